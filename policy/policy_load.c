/*
 * policy_load: the policy's front ends (control process and the CLI): the
 * OpenSandbox JSON body and the git YAML file, validated strictly with
 * errors as file:line:col: key: message that never echo more than a
 * capped, escaped excerpt. The only file it opens is the one it is told to.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "policy/binding.h"
#include "policy/policy.h"
#include "policy/policy_internal.h"
#include "policy/yamltree.h"

/* ---- errors and validation context ---- */

/* Defaults of the limits; see policy.h. */
void
policy_limits_default(struct policy_limits *lim)
{
	lim->max_rules = POLICY_MAX_RULES_DEFAULT;
	lim->max_target_len = POLICY_MAX_TARGET_LEN;
}

/* file:line:col: key: message; see policy.h. */
void
policy_err_format(const struct policy_err *err, char *buf, size_t len)
{
	const char *f = err->file[0] ? err->file : "<input>";

	if (err->key[0])
		snprintf(buf, len, "%s:%u:%u: %s: %s", f, err->line, err->col, err->key, err->msg);
	else
		snprintf(buf, len, "%s:%u:%u: %s", f, err->line, err->col, err->msg);
}

/* Start a validation context; see policy_internal.h. */
void
policy_ctx_init(struct policy_ctx *c, struct policy_err *err, const char *file,
    const struct yamltree_marks *marks, const struct policy_limits *lim)
{
	memset(err, 0, sizeof(*err));
	snprintf(err->file, sizeof(err->file), "%s", file ? file : "<input>");
	c->err = err;
	c->file = file;
	c->marks = marks;
	c->max_rules = POLICY_MAX_RULES_DEFAULT;
	c->max_target_len = POLICY_MAX_TARGET_LEN;
	if (lim != NULL) {
		/* Configuration may lower limits, never raise them past the ceiling. */
		c->max_rules = lim->max_rules == 0 || lim->max_rules > POLICY_MAX_RULES_HARD
		                   ? POLICY_MAX_RULES_HARD
		                   : lim->max_rules;
		if (lim->max_target_len != 0 && lim->max_target_len < POLICY_MAX_TARGET_LEN)
			c->max_target_len = lim->max_target_len;
	}
}

/* Path of a child; see policy_internal.h. */
void
policy_ctx_path(char *buf, size_t len, const char *path, const char *key, size_t index)
{
	if (key != NULL)
		snprintf(buf, len, "%s%s%s", path, path[0] ? "." : "", key);
	else
		snprintf(buf, len, "%s[%zu]", path, index);
}

/* Record an error; see policy_internal.h. */
int
policy_ctx_fail(struct policy_ctx *c, enum policy_errcode code, const json_t *parent,
    const char *key, size_t index, int at_key, const char *path, const char *fmt, ...)
{
	va_list ap;
	struct policy_err *e = c->err;

	if (e->code != POLICY_ERR_NONE)
		return -1; /* keep the first error */
	e->code = code;
	/* No key under an object: the object itself lacks something. */
	bool self = key == NULL && (parent == NULL || json_is_object(parent));
	if (self)
		snprintf(e->key, sizeof(e->key), "%s", path);
	else
		policy_ctx_path(e->key, sizeof(e->key), path, key, index);
	if (c->marks != NULL) {
		unsigned l = 0, col = 0;
		if ((self && parent != NULL &&
		        yamltree_mark_node(c->marks, parent, &l, &col) == 0) ||
		    (!self && yamltree_mark(c->marks, parent, key, index, at_key, &l, &col) == 0) ||
		    yamltree_mark(c->marks, NULL, NULL, 0, 0, &l, &col) == 0) {
			e->line = l;
			e->col = col;
		}
	}
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return -1;
}

/* Case-insensitive member lookup; see policy_internal.h. */
json_t *
policy_ctx_member(const json_t *obj, const char *name)
{
	const char *k;
	json_t *v;

	if (!json_is_object(obj))
		return NULL;
	json_object_foreach((json_t *)obj, k, v)
	{
		if (strcasecmp(k, name) == 0)
			return v;
	}
	return NULL;
}

/* Unknown and case-duplicate keys; see policy_internal.h. */
int
policy_ctx_keys(
    struct policy_ctx *c, const json_t *obj, const char *path, const char *const *allowed)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)obj, k, v)
	{
		size_t i, same = 0;
		const char *k2;
		json_t *v2;

		for (i = 0; allowed[i] != NULL; i++) {
			if (strcasecmp(k, allowed[i]) == 0)
				break;
		}
		if (allowed[i] == NULL) {
			/* Neither the message nor the location quotes the key: it may be a
			 * secret pasted in the wrong place. */
			bool first = c->err->code == POLICY_ERR_NONE;
			policy_ctx_fail(c, POLICY_ERR_INVALID, obj, k, 0, 1, path, "unknown key");
			if (first)
				snprintf(c->err->key, sizeof(c->err->key), "%s",
				    path[0] ? path : "(top level)");
			return -1;
		}
		json_object_foreach((json_t *)obj, k2, v2)
		{
			if (strcasecmp(k, k2) == 0)
				same++;
		}
		if (same > 1)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, k, 0, 1, path,
			    "duplicate key (keys are case-insensitive)");
	}
	return 0;
}

/* Printable copy; see policy_internal.h. */
void
policy_show(char *buf, size_t buflen, const char *s, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < len && o + 4 < buflen; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (i >= POLICY_SHOW_MAX) {
			buf[o++] = '.';
			buf[o++] = '.';
			buf[o++] = '.';
			break;
		}
		buf[o++] = (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') ? (char)ch : '?';
	}
	buf[o] = '\0';
}

/* String without embedded NUL; see policy_internal.h. */
bool
policy_json_is_str(const json_t *v)
{
	return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

/* ---- rules ---- */

void
policy_rule_deinit(struct policy_rule *r)
{
	free(r->target);
	free(r->ports);
}

void
policy_rules_free(struct policy_rules *l)
{
	for (size_t i = 0; i < l->n; i++)
		policy_rule_deinit(&l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

int
policy_rules_push(struct policy_rules *l, struct policy_rule *r)
{
	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 16;
		struct policy_rule *nv = realloc(l->v, ncap * sizeof(*nv));
		if (nv == NULL)
			return -1;
		l->v = nv;
		l->cap = ncap;
	}
	l->v[l->n++] = *r;
	memset(r, 0, sizeof(*r));
	return 0;
}

static int
rule_copy(struct policy_rule *dst, const struct policy_rule *src)
{
	*dst = *src;
	dst->ports = NULL;
	if ((dst->target = strdup(src->target)) == NULL)
		return -1;
	if (src->nports > 0) {
		dst->ports = malloc(src->nports * sizeof(*dst->ports));
		if (dst->ports == NULL) {
			free(dst->target);
			return -1;
		}
		memcpy(dst->ports, src->ports, src->nports * sizeof(*dst->ports));
	}
	return 0;
}

int
policy_rules_copy(struct policy_rules *dst, const struct policy_rules *src)
{
	memset(dst, 0, sizeof(*dst));
	for (size_t i = 0; i < src->n; i++) {
		struct policy_rule r;
		if (rule_copy(&r, &src->v[i]) != 0 || policy_rules_push(dst, &r) != 0) {
			policy_rules_free(dst);
			return -1;
		}
	}
	return 0;
}

bool
policy_is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' || ch == '\f' || ch == '\v';
}

/*
 * Classify and canonicalise a target: an IP literal, a CIDR, else a host
 * name or "*." wildcard. Returns 0, or an error code with *why set.
 */
enum policy_errcode
policy_rule_target(
    const char *s, size_t len, size_t max_len, struct policy_rule *r, const char **why)
{
	char canon[POLICY_NAME_MAX + 1];
	size_t clen;

	while (len > 0 && policy_is_space(s[0])) {
		s++;
		len--;
	}
	while (len > 0 && policy_is_space(s[len - 1]))
		len--;
	if (len == 0) {
		*why = "egress target cannot be empty";
		return POLICY_ERR_INVALID;
	}
	if (len > max_len) {
		*why = "egress target is too long";
		return POLICY_ERR_TOO_LARGE;
	}
	if (policy_addr_parse((const uint8_t *)s, len, true, &r->addr) == POLICY_NAME_OK) {
		char buf[POLICY_ADDR_TEXT_MAX];
		unsigned full = r->addr.family == AF_INET ? 32 : 128;
		r->kind = r->addr.prefix == full && memchr(s, '/', len) == NULL
		              ? POLICY_TARGET_ADDR
		              : POLICY_TARGET_CIDR;
		policy_addr_format(&r->addr, buf, sizeof(buf));
		if (r->kind == POLICY_TARGET_CIDR && strchr(buf, '/') == NULL)
			snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "/%u",
			    (unsigned)r->addr.prefix);
		r->target = strdup(buf);
		return r->target ? POLICY_ERR_NONE : POLICY_ERR_NOMEM;
	}
	memset(&r->addr, 0, sizeof(r->addr));
	if (memchr(s, ':', len) != NULL || memchr(s, '/', len) != NULL) {
		*why = "not a valid IP address, CIDR or host name (no ports, schemes, "
		       "brackets or zones)";
		return POLICY_ERR_INVALID;
	}
	switch (policy_name_canon((const uint8_t *)s, len, POLICY_NAME_WILDCARD, canon, &clen)) {
	case POLICY_NAME_OK:
		break;
	case POLICY_NAME_TOO_LARGE:
		*why = "host name longer than 253 bytes";
		return POLICY_ERR_TOO_LARGE;
	default:
		*why = "not a valid host name: LDH labels of 1-63 bytes, a leading \"*.\" "
		       "only as a whole label, punycode (xn--) for IDN";
		return POLICY_ERR_INVALID;
	}
	r->kind = policy_name_is_wildcard(canon) ? POLICY_TARGET_WILDCARD : POLICY_TARGET_NAME;
	r->target = strdup(canon);
	return r->target ? POLICY_ERR_NONE : POLICY_ERR_NOMEM;
}

static int
port_cmp(const void *a, const void *b)
{
	const struct policy_port_range *x = a, *y = b;
	return (int)x->lo - (int)y->lo;
}

static int
port_number(const char *s, size_t len, uint16_t *out)
{
	unsigned v = 0;

	if (len == 0 || len > 5 || (len > 1 && s[0] == '0'))
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v < 1 || v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

/* ports: [443, "8000-8100", "22"]; sorted and merged. */
static int
rule_ports(struct policy_ctx *c, const json_t *node, const char *path, struct policy_rule *r)
{
	size_t i, n = json_array_size(node), o = 0;
	json_t *v;

	if (n > POLICY_MAX_PORT_RANGES)
		return policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, node, NULL, POLICY_MAX_PORT_RANGES,
		    0, path, "more than %d port entries", POLICY_MAX_PORT_RANGES);
	if ((r->ports = calloc(n, sizeof(*r->ports))) == NULL)
		return policy_ctx_fail(
		    c, POLICY_ERR_NOMEM, NULL, NULL, 0, 0, path, "out of memory");
	json_array_foreach(node, i, v)
	{
		struct policy_port_range pr;
		if (json_is_integer(v)) {
			json_int_t x = json_integer_value(v);
			if (x < 1 || x > 65535)
				return policy_ctx_fail(c, POLICY_ERR_INVALID, node, NULL, i, 0,
				    path, "port must be 1..65535");
			pr.lo = pr.hi = (uint16_t)x;
		} else if (policy_json_is_str(v)) {
			const char *s = json_string_value(v), *dash = strchr(s, '-');
			size_t len = strlen(s);
			if (dash == NULL ? port_number(s, len, &pr.lo) != 0
			                 : (port_number(s, (size_t)(dash - s), &pr.lo) != 0 ||
			                       port_number(dash + 1, len - (size_t)(dash - s) - 1,
			                           &pr.hi) != 0 ||
			                       pr.hi < pr.lo))
				return policy_ctx_fail(c, POLICY_ERR_INVALID, node, NULL, i, 0,
				    path,
				    "port must be 1..65535 or a range \"lo-hi\" with lo <= hi");
			if (dash == NULL)
				pr.hi = pr.lo;
		} else {
			return policy_ctx_fail(c, POLICY_ERR_INVALID, node, NULL, i, 0, path,
			    "port must be a number or a \"lo-hi\" string");
		}
		r->ports[o++] = pr;
	}
	qsort(r->ports, o, sizeof(*r->ports), port_cmp);
	size_t m = 0;
	for (i = 0; i < o; i++) {
		if (m > 0 && (unsigned)r->ports[i].lo <= (unsigned)r->ports[m - 1].hi + 1) {
			if (r->ports[i].hi > r->ports[m - 1].hi)
				r->ports[m - 1].hi = r->ports[i].hi;
		} else {
			r->ports[m++] = r->ports[i];
		}
	}
	r->nports = m;
	return 0;
}

static const char *const rule_keys[] = {"action", "target", "ports", NULL};

/* One {"action","target","ports"?} object. */

/*
 * A keyword-like JSON string: the value trimmed of spaces (*s, *len, a view
 * into v, capped to cap - 1 bytes) and an ASCII-lowercased copy in word.
 */
static void
policy_json_word(const json_t *v, const char **s, size_t *len, char *word, size_t cap)
{
	const char *p = json_string_value(v);
	size_t n = json_string_length(v);

	while (n > 0 && policy_is_space(*p)) {
		p++;
		n--;
	}
	while (n > 0 && policy_is_space(p[n - 1]))
		n--;
	if (n >= cap)
		n = cap - 1;
	for (size_t i = 0; i < n; i++)
		word[i] = (char)((p[i] >= 'A' && p[i] <= 'Z') ? p[i] - 'A' + 'a' : p[i]);
	word[n] = '\0';
	*s = p;
	*len = n;
}

static int
rule_from_json(struct policy_ctx *c, const json_t *parent, size_t index, const char *ppath,
    struct policy_rule *r)
{
	char path[128], sub[160];
	const json_t *obj = json_array_get(parent, index);
	const char *why = NULL;

	memset(r, 0, sizeof(*r));
	policy_ctx_path(path, sizeof(path), ppath, NULL, index);
	if (!json_is_object(obj))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, parent, NULL, index, 0, ppath,
		    "a rule must be an object with \"action\" and \"target\"");
	if (policy_ctx_keys(c, obj, path, rule_keys) != 0)
		return -1;
	json_t *act = policy_ctx_member(obj, "action");
	json_t *tgt = policy_ctx_member(obj, "target");
	json_t *ports = policy_ctx_member(obj, "ports");
	r->action = POLICY_DENY; /* empty or missing action is deny, as OpenSandbox */
	if (act != NULL && !json_is_null(act)) {
		char a[16];
		size_t alen;
		const char *s;
		if (!policy_json_is_str(act))
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "action", 0, 0, path,
			    "action must be a string");
		policy_json_word(act, &s, &alen, a, sizeof(a));
		if (strcmp(a, "allow") == 0)
			r->action = POLICY_ALLOW;
		else if (alen != 0 && strcmp(a, "deny") != 0) {
			(void)s;
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "action", 0, 0, path,
			    "unsupported action (allow or deny)");
		}
	}
	if (tgt == NULL)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, parent, NULL, index, 0, ppath,
		    "egress target cannot be empty");
	if (!policy_json_is_str(tgt))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "target", 0, 0, path,
		    json_is_string(tgt) ? "NUL byte in target" : "target must be a string");
	enum policy_errcode code = policy_rule_target(
	    json_string_value(tgt), json_string_length(tgt), c->max_target_len, r, &why);
	if (code != POLICY_ERR_NONE) {
		/* The target is not quoted: errors never echo input (it may be a secret). */
		policy_rule_deinit(r);
		memset(r, 0, sizeof(*r));
		return policy_ctx_fail(
		    c, code, obj, "target", 0, 0, path, "%s", why ? why : "out of memory");
	}
	if (ports != NULL && !json_is_null(ports)) {
		policy_ctx_path(sub, sizeof(sub), path, "ports", 0);
		if (r->action != POLICY_ALLOW) {
			policy_rule_deinit(r);
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "ports", 0, 1, path,
			    "ports are only allowed on allow rules (a deny covers all ports)");
		}
		if (!json_is_array(ports) || json_array_size(ports) == 0) {
			policy_rule_deinit(r);
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "ports", 0, 0, path,
			    "ports must be a non-empty list of ports or \"lo-hi\" ranges");
		}
		if (rule_ports(c, ports, sub, r) != 0) {
			policy_rule_deinit(r);
			return -1;
		}
	}
	return 0;
}

/* ---- front ends ---- */

static const char *const json_root_keys[] = {"defaultAction", "egress", "terminateAll", NULL};
static const char *const yaml_root_keys[] = {
    "version", "defaultAction", "egress", "dns", "credentials", "bindings", "terminateAll", NULL};
static const char *const dns_keys[] = {"ttlMin", "ttlMax", "filterPrivate", NULL};

static int
parse_default(struct policy_ctx *c, const json_t *root, enum policy_action *def)
{
	json_t *v = policy_ctx_member(root, "defaultAction");
	const char *s;
	size_t len;
	char a[16];

	*def = POLICY_DENY;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!policy_json_is_str(v))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, root, "defaultAction", 0, 0, "",
		    "defaultAction must be \"allow\" or \"deny\"");
	policy_json_word(v, &s, &len, a, sizeof(a));
	if (len == 0 || strcmp(a, "deny") == 0)
		return 0;
	if (strcmp(a, "allow") == 0) {
		*def = POLICY_ALLOW;
		return 0;
	}
	/* OpenSandbox accepts any value here and then half-applies it; we refuse. */
	return policy_ctx_fail(c, POLICY_ERR_INVALID, root, "defaultAction", 0, 0, "",
	    "unsupported defaultAction (allow or deny)");
}

/* terminateAll: true | false (absent: false). */
static int
parse_terminate_all(struct policy_ctx *c, const json_t *root, bool *out)
{
	json_t *v = policy_ctx_member(root, "terminateAll");

	*out = false;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, root, "terminateAll", 0, 0, "",
		    "terminateAll must be true or false");
	*out = json_is_true(v);
	return 0;
}

/* Parse an egress array into l; YAML refuses duplicate targets. */
int
policy_parse_rules(struct policy_ctx *c, const json_t *parent, const json_t *arr, const char *path,
    struct policy_rules *l, bool strict_dups)
{
	size_t i;
	json_t *v;
	struct policy_ntab seen = {0};
	int rc = 0;

	if (!json_is_array(arr))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, parent, parent ? "egress" : NULL, 0,
		    0, "", "egress must be a list of rules");
	if (json_array_size(arr) > c->max_rules)
		return policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, parent, parent ? "egress" : NULL, 0,
		    1, "", "egress rule total count %zu exceeds limit %zu", json_array_size(arr),
		    c->max_rules);
	json_array_foreach(arr, i, v)
	{
		struct policy_rule r;
		struct policy_nent *e = NULL;
		uint64_t h = 0;
		if (rule_from_json(c, arr, i, path, &r) != 0) {
			rc = -1;
			break;
		}
		if (strict_dups) {
			if (seen.e == NULL && policy_ntab_init(&seen, json_array_size(arr)) != 0) {
				policy_rule_deinit(&r);
				rc = policy_ctx_fail(
				    c, POLICY_ERR_NOMEM, NULL, NULL, 0, 0, path, "out of memory");
				break;
			}
			e = policy_strset_slot(&seen, r.target, &h);
			if (e->len != 0) {
				char sub[128];
				policy_ctx_path(sub, sizeof(sub), path, NULL, i);
				policy_rule_deinit(&r);
				rc = policy_ctx_fail(c, POLICY_ERR_INVALID, v, "target", 0, 0, sub,
				    "duplicate target (first at %s[%d])", path, (int)e->idx[0]);
				break;
			}
		}
		/* The target string stays put when the rule array grows. */
		const char *target = r.target;
		if (policy_rules_push(l, &r) != 0) {
			policy_rule_deinit(&r);
			rc = policy_ctx_fail(
			    c, POLICY_ERR_NOMEM, NULL, NULL, 0, 0, path, "out of memory");
			break;
		}
		if (e != NULL)
			policy_strset_put(e, target, h, i);
	}
	free(seen.e);
	return rc;
}

bool
policy_blank(const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (!policy_is_space(buf[i]))
			return false;
	}
	return true;
}

json_t *
policy_load_json(struct policy_ctx *c, const char *buf, size_t len)
{
	json_error_t je;
	json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);

	if (root == NULL) {
		c->err->code = POLICY_ERR_SYNTAX;
		c->err->line = je.line > 0 ? (unsigned)je.line : 0;
		c->err->col = je.column > 0 ? (unsigned)je.column : 0;
		snprintf(c->err->msg, sizeof(c->err->msg), "invalid JSON: %s", je.text);
	}
	return root;
}

/* OpenSandbox /policy body; see policy.h. */
struct policy *
policy_from_json(
    const char *buf, size_t len, const struct policy_limits *lim, struct policy_err *err)
{
	struct policy_ctx c;
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];
	enum policy_action def;
	bool ta = false;
	json_t *root;

	policy_ctx_init(&c, err, "<json>", NULL, lim);
	memset(lists, 0, sizeof(lists));
	if (buf == NULL || policy_blank(buf, len))
		return policy_new_deny_all();
	if ((root = policy_load_json(&c, buf, len)) == NULL)
		return NULL;
	if (json_is_null(root)) {
		json_decref(root);
		return policy_new_deny_all();
	}
	if (!json_is_object(root)) {
		json_decref(root);
		policy_ctx_fail(
		    &c, POLICY_ERR_INVALID, NULL, NULL, 0, 0, "", "policy must be a JSON object");
		return NULL;
	}
	json_t *eg = policy_ctx_member(root, "egress");
	if (policy_ctx_keys(&c, root, "", json_root_keys) != 0 ||
	    parse_default(&c, root, &def) != 0 || parse_terminate_all(&c, root, &ta) != 0 ||
	    (eg != NULL && !json_is_null(eg) &&
	        policy_parse_rules(&c, root, eg, "egress", &lists[POLICY_ORIGIN_USER], false) !=
	            0)) {
		policy_rules_free(&lists[POLICY_ORIGIN_USER]);
		json_decref(root);
		return NULL;
	}
	json_decref(root);
	struct policy *p = policy_build(def, lists, NULL, NULL);
	if (p == NULL)
		err->code = POLICY_ERR_NOMEM;
	else
		p->terminate_all = ta;
	return p;
}

static int
parse_uint(struct policy_ctx *c, const json_t *obj, const char *key, const char *path, uint32_t lo,
    uint32_t hi, uint32_t *out)
{
	json_t *v = policy_ctx_member(obj, key);

	if (v == NULL)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, key, 0, 0, path,
		    "must be an integer in %u..%u", lo, hi);
	*out = (uint32_t)json_integer_value(v);
	return 0;
}

static int
parse_dns(struct policy_ctx *c, const json_t *root, struct policy_dns *dns)
{
	json_t *d = policy_ctx_member(root, "dns");

	dns->ttl_min = POLICY_DNS_TTL_MIN_DEFAULT;
	dns->ttl_max = POLICY_DNS_TTL_MAX_DEFAULT;
	dns->filter_private = true;
	if (d == NULL || json_is_null(d))
		return 0;
	if (!json_is_object(d))
		return policy_ctx_fail(
		    c, POLICY_ERR_INVALID, root, "dns", 0, 0, "", "dns must be a mapping");
	if (policy_ctx_keys(c, d, "dns", dns_keys) != 0 ||
	    parse_uint(c, d, "ttlMin", "dns", 1, POLICY_DNS_TTL_CEILING, &dns->ttl_min) != 0 ||
	    parse_uint(c, d, "ttlMax", "dns", 1, POLICY_DNS_TTL_CEILING, &dns->ttl_max) != 0)
		return -1;
	if (dns->ttl_min > dns->ttl_max)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, d, "ttlMin", 0, 0, "dns",
		    "ttlMin (%u) is larger than ttlMax (%u)", dns->ttl_min, dns->ttl_max);
	json_t *fp = policy_ctx_member(d, "filterPrivate");
	if (fp != NULL) {
		if (!json_is_boolean(fp))
			return policy_ctx_fail(c, POLICY_ERR_INVALID, d, "filterPrivate", 0, 0,
			    "dns", "must be true or false");
		dns->filter_private = json_is_true(fp);
	}
	return 0;
}

/* YAML policy over a buffer; see policy.h. */
struct policy *
policy_from_yaml_buf(const char *name, const char *buf, size_t len, const struct policy_limits *lim,
    struct policy_err *err)
{
	struct policy_ctx c;
	struct yamltree_marks *marks = NULL;
	struct yamltree_error ye;
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];
	struct policy_dns dns;
	struct binding_set *bs = NULL;
	enum policy_action def;
	bool ta = false;
	struct policy *p = NULL;
	json_t *root;

	memset(lists, 0, sizeof(lists));
	policy_ctx_init(&c, err, name, NULL, lim);
	if (len > POLICY_MAX_FILE_BYTES) {
		err->code = POLICY_ERR_TOO_LARGE;
		snprintf(
		    err->msg, sizeof(err->msg), "file larger than %u bytes", POLICY_MAX_FILE_BYTES);
		return NULL;
	}
	root = yamltree_parse((const uint8_t *)buf, len, &marks, &ye);
	if (root == NULL) {
		err->code = POLICY_ERR_SYNTAX;
		err->line = ye.line;
		err->col = ye.col;
		snprintf(err->msg, sizeof(err->msg), "%s", ye.msg[0] ? ye.msg : "out of memory");
		return NULL;
	}
	c.marks = marks;
	if (json_is_null(root)) {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, NULL, NULL, 0, 0, "",
		    "empty policy file (write \"defaultAction: deny\" for deny-all)");
		if (err->line == 0)
			err->line = err->col = 1;
		goto out;
	}
	if (!json_is_object(root)) {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, NULL, NULL, 0, 0, "",
		    "a policy file must be a mapping");
		goto out;
	}
	if (policy_ctx_keys(&c, root, "", yaml_root_keys) != 0)
		goto out;
	json_t *ver = policy_ctx_member(root, "version");
	if (ver != NULL && !(json_is_integer(ver) && json_integer_value(ver) == 1)) {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, root, "version", 0, 0, "",
		    "unsupported version (this egressd reads version 1)");
		goto out;
	}
	json_t *eg = policy_ctx_member(root, "egress");
	if (parse_default(&c, root, &def) != 0 || parse_dns(&c, root, &dns) != 0 ||
	    parse_terminate_all(&c, root, &ta) != 0)
		goto out;
	if (eg != NULL && !json_is_null(eg) &&
	    policy_parse_rules(&c, root, eg, "egress", &lists[POLICY_ORIGIN_USER], true) != 0)
		goto out;
	json_t *cr = policy_ctx_member(root, "credentials");
	json_t *bd = policy_ctx_member(root, "bindings");
	if ((cr != NULL && !json_is_null(cr)) || (bd != NULL && !json_is_null(bd))) {
		bs = binding_set_from_tree(&c, root, cr, bd, false);
		if (bs == NULL)
			goto out;
	}
	p = policy_build(def, lists, &dns, bs);
	if (p == NULL) {
		err->code = POLICY_ERR_NOMEM;
		goto out;
	}
	p->terminate_all = ta;
	if (bs != NULL) {
		size_t bi = 0, hi = 0;
		struct policy_err tmp;
		if (binding_set_check(bs, p, &tmp, &bi, &hi) != 0) {
			json_t *b = json_array_get(bd, bi);
			json_t *hosts = policy_ctx_member(policy_ctx_member(b, "match"), "hosts");
			char path[128];
			snprintf(path, sizeof(path), "bindings[%zu].match.hosts", bi);
			if (hosts != NULL)
				policy_ctx_fail(
				    &c, tmp.code, hosts, NULL, hi, 0, path, "%s", tmp.msg);
			else
				policy_ctx_fail(
				    &c, tmp.code, NULL, NULL, 0, 0, path, "%s", tmp.msg);
			policy_free(p);
			p = NULL;
		}
	}
out:
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++)
		policy_rules_free(&lists[o]);
	json_decref(root);
	yamltree_marks_free(marks);
	return p;
}

/* Read a whole regular file of at most max bytes into a malloc'd buffer. */
char *
policy_read_file(const char *path, size_t max, size_t *len, struct policy_err *err, bool *missing)
{
	struct stat st;
	char *buf = NULL;
	size_t off = 0;
	int fd;

	*len = 0;
	if (missing != NULL)
		*missing = false;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) == -1) {
		if (missing != NULL && errno == ENOENT) {
			*missing = true;
			return NULL;
		}
		goto io;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		goto io_fd;
	if ((size_t)st.st_size > max) {
		close(fd);
		err->code = POLICY_ERR_TOO_LARGE;
		snprintf(err->file, sizeof(err->file), "%s", path);
		snprintf(err->msg, sizeof(err->msg), "file larger than %zu bytes", max);
		return NULL;
	}
	if ((buf = malloc((size_t)st.st_size + 1)) == NULL)
		goto io_fd;
	while (off < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + off, (size_t)st.st_size - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	close(fd);
	buf[off] = '\0';
	*len = off;
	return buf;
io_fd:
	close(fd);
io:
	free(buf);
	err->code = POLICY_ERR_IO;
	snprintf(err->file, sizeof(err->file), "%s", path);
	snprintf(err->msg, sizeof(err->msg), "cannot read: %s", strerror(errno ? errno : EINVAL));
	return NULL;
}

/* YAML policy file; see policy.h. */
struct policy *
policy_from_yaml_file(const char *path, const struct policy_limits *lim, struct policy_err *err)
{
	size_t len;
	char *buf;
	struct policy *p;

	memset(err, 0, sizeof(*err));
	if ((buf = policy_read_file(path, POLICY_MAX_FILE_BYTES, &len, err, NULL)) == NULL)
		return NULL;
	p = policy_from_yaml_buf(path, buf, len, lim, err);
	free(buf);
	return p;
}
