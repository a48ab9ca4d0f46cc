/*
 * The effective policy on the channel between processes (see policy.h).
 * One JSON object:
 *
 *   {"v":1,"defaultAction":"deny","terminateAll":false,
 *    "dns":{"ttlMin":60,"ttlMax":360,"filterPrivate":true},
 *    "denyAlways":[rule..],"allowAlways":[rule..],"egress":[rule..],
 *    "logSkip":["name"|"*.name"..]}
 *
 * Rules have the API's shape, so decoding goes through the API's rule
 * parser; the receiver trusts nothing the sender could not have written
 * through the API or the always files.
 */
#include <stdlib.h>
#include <string.h>

#include "policy/policy_internal.h"

#define POLICY_WIRE_VERSION 1

static const char *const wire_keys[] = {"v", "defaultAction", "terminateAll", "dns", "denyAlways",
    "allowAlways", "egress", "logSkip", NULL};
static const char *const wire_dns_keys[] = {"ttlMin", "ttlMax", "filterPrivate", NULL};
/* The list keys, in enum policy_origin order. */
static const char *const wire_lists[POLICY_ORIGIN_RULE_LISTS] = {
    [POLICY_ORIGIN_DENY_ALWAYS] = "denyAlways",
    [POLICY_ORIGIN_ALLOW_ALWAYS] = "allowAlways",
    [POLICY_ORIGIN_USER] = "egress",
};

static json_t *
wire_rules(const struct policy_rules *l)
{
	json_t *a = json_array();

	for (size_t i = 0; a != NULL && i < l->n; i++) {
		json_t *r = json_object();

		if (r == NULL || json_array_append_new(a, r) != 0) {
			json_decref(a);
			return NULL;
		}
		json_object_set_new(r, "action", json_string(policy_action_str(l->v[i].action)));
		json_object_set_new(r, "target", json_string(l->v[i].target));
		if (l->v[i].nports > 0)
			json_object_set_new(r, "ports", policy_ports_json(&l->v[i]));
	}
	return a;
}

char *
policy_wire_encode(const struct policy *p, size_t *len)
{
	json_t *o = json_object(), *d = json_object();
	char *s = NULL;

	if (o == NULL || d == NULL)
		goto out;
	json_object_set_new(o, "v", json_integer(POLICY_WIRE_VERSION));
	json_object_set_new(o, "defaultAction", json_string(policy_action_str(p->def)));
	json_object_set_new(o, "terminateAll", json_boolean(p->terminate_all));
	json_object_set_new(d, "ttlMin", json_integer(p->dns.ttl_min));
	json_object_set_new(d, "ttlMax", json_integer(p->dns.ttl_max));
	json_object_set_new(d, "filterPrivate", json_boolean(p->dns.filter_private));
	json_object_set(o, "dns", d);
	for (int k = 0; k < POLICY_ORIGIN_RULE_LISTS; k++) {
		json_t *a = wire_rules(&p->lists[k]);

		if (a == NULL || json_object_set_new(o, wire_lists[k], a) != 0)
			goto out;
	}
	json_t *ls = json_array();
	if (ls == NULL || json_object_set_new(o, "logSkip", ls) != 0)
		goto out;
	for (size_t i = 0; i < p->log_skip.n; i++)
		if (json_array_append_new(ls, json_string(p->log_skip.v[i].target)) != 0)
			goto out;
	s = json_dumps(o, JSON_COMPACT);
	if (s != NULL)
		*len = strlen(s);
out:
	json_decref(d);
	json_decref(o);
	return s;
}

static int
wire_uint(struct policy_ctx *c, const json_t *obj, const char *key, uint32_t lo, uint32_t hi,
    uint32_t *out)
{
	json_t *v = json_object_get(obj, key);

	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, key, 0, 0, "dns",
		    "%s must be an integer in %u..%u", key, lo, hi);
	*out = (uint32_t)json_integer_value(v);
	return 0;
}

static int
wire_bool(struct policy_ctx *c, const json_t *obj, const char *key, const char *path, bool *out)
{
	json_t *v = json_object_get(obj, key);

	if (!json_is_boolean(v))
		return policy_ctx_fail(
		    c, POLICY_ERR_INVALID, obj, key, 0, 0, path, "%s must be a boolean", key);
	*out = json_is_true(v);
	return 0;
}

/*
 * The logSkip list, through the log_skip.always parser (one line per
 * string: a string holding a line break is refused), into the freshly
 * built p.
 */
static int
wire_log_skip(struct policy_ctx *c, const json_t *root, struct policy *p)
{
	const json_t *a = json_object_get(root, "logSkip"), *v;
	struct policy_rules skip;
	char *buf;
	int rc;
	size_t i, n = 0, off = 0;

	if (!json_is_array(a)) {
		policy_ctx_fail(c, POLICY_ERR_INVALID, root, "logSkip", 0, 0, "",
		    "logSkip must be an array of names");
		return -1;
	}
	if (json_array_size(a) == 0)
		return 0;
	json_array_foreach(a, i, v)
	{
		if (!json_is_string(v) ||
		    memchr(json_string_value(v), '\n', json_string_length(v)) != NULL) {
			policy_ctx_fail(c, POLICY_ERR_INVALID, root, "logSkip", 0, 0, "",
			    "logSkip holds a name per string");
			return -1;
		}
		n += json_string_length(v) + 1;
	}
	if ((buf = malloc(n)) == NULL) {
		c->err->code = POLICY_ERR_NOMEM;
		snprintf(c->err->msg, sizeof(c->err->msg), "out of memory");
		return -1;
	}
	json_array_foreach(a, i, v)
	{
		memcpy(buf + off, json_string_value(v), json_string_length(v));
		off += json_string_length(v);
		buf[off++] = '\n';
	}
	rc = policy_log_skip_parse("<wire>", buf, off, &skip, c->err);
	free(buf);
	if (rc == 0)
		p->log_skip = skip;
	return rc;
}

struct policy *
policy_wire_decode(const char *buf, size_t len, struct policy_err *err)
{
	struct policy_ctx c;
	struct policy_limits lim;
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];
	struct policy_dns dns;
	enum policy_action def;
	struct policy *p = NULL;
	bool ta = false;
	json_t *root, *v, *d;
	const char *s;

	memset(err, 0, sizeof(*err));
	memset(lists, 0, sizeof(lists));
	memset(&dns, 0, sizeof(dns));
	memset(&lim, 0, sizeof(lim)); /* the hard ceilings: the sender applied its limits */
	policy_ctx_init(&c, err, "<wire>", NULL, &lim);
	root = policy_load_json(&c, buf, len);
	if (root == NULL)
		return NULL;
	if (!json_is_object(root)) {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, NULL, NULL, 0, 0, "", "not an object");
		goto out;
	}
	/* Exact keys, all present: the encoder always writes every one. */
	if (policy_ctx_keys(&c, root, "", wire_keys) != 0)
		goto out;
	for (size_t k = 0; wire_keys[k] != NULL; k++)
		if (json_object_get(root, wire_keys[k]) == NULL) {
			policy_ctx_fail(&c, POLICY_ERR_INVALID, root, NULL, 0, 0, wire_keys[k],
			    "missing member");
			goto out;
		}
	v = json_object_get(root, "v");
	if (!json_is_integer(v) || json_integer_value(v) != POLICY_WIRE_VERSION) {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, root, "v", 0, 0, "", "unknown version");
		goto out;
	}
	s = json_string_value(json_object_get(root, "defaultAction"));
	if (s != NULL && strcmp(s, "allow") == 0)
		def = POLICY_ALLOW;
	else if (s != NULL && strcmp(s, "deny") == 0)
		def = POLICY_DENY;
	else {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, root, "defaultAction", 0, 0, "",
		    "defaultAction must be allow or deny");
		goto out;
	}
	if (wire_bool(&c, root, "terminateAll", "", &ta) != 0)
		goto out;
	d = json_object_get(root, "dns");
	if (!json_is_object(d)) {
		policy_ctx_fail(
		    &c, POLICY_ERR_INVALID, root, "dns", 0, 0, "", "dns must be an object");
		goto out;
	}
	if (policy_ctx_keys(&c, d, "dns", wire_dns_keys) != 0 ||
	    wire_uint(&c, d, "ttlMin", 1, POLICY_DNS_TTL_CEILING, &dns.ttl_min) != 0 ||
	    wire_uint(&c, d, "ttlMax", 1, POLICY_DNS_TTL_CEILING, &dns.ttl_max) != 0 ||
	    wire_bool(&c, d, "filterPrivate", "dns", &dns.filter_private) != 0)
		goto out;
	if (dns.ttl_min > dns.ttl_max) {
		policy_ctx_fail(
		    &c, POLICY_ERR_INVALID, d, "ttlMin", 0, 0, "dns", "ttlMin exceeds ttlMax");
		goto out;
	}
	for (int k = 0; k < POLICY_ORIGIN_RULE_LISTS; k++) {
		enum policy_action want =
		    k == POLICY_ORIGIN_DENY_ALWAYS ? POLICY_DENY : POLICY_ALLOW;

		if (policy_parse_rules(&c, root, json_object_get(root, wire_lists[k]),
		        wire_lists[k], &lists[k], false) != 0)
			goto out;
		/* The always lists hold one action each, as their files do. */
		for (size_t i = 0; k != POLICY_ORIGIN_USER && i < lists[k].n; i++)
			if (lists[k].v[i].action != want) {
				policy_ctx_fail(&c, POLICY_ERR_INVALID, root, wire_lists[k], 0, 0,
				    "", "an always list holds a rule of the other action");
				goto out;
			}
	}
	p = policy_build(def, lists, &dns, NULL);
	if (p == NULL) {
		err->code = POLICY_ERR_NOMEM;
		snprintf(err->msg, sizeof(err->msg), "out of memory");
		goto out;
	}
	p->terminate_all = ta;
	if (wire_log_skip(&c, root, p) != 0) {
		policy_free(p);
		p = NULL;
	}
out:
	for (int k = 0; k < POLICY_ORIGIN_RULE_LISTS; k++)
		policy_rules_free(&lists[k]);
	json_decref(root);
	return p;
}
