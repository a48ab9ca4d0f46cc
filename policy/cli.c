/*
 * cli.c: `egressd check [-v] FILE...`, `egressd explain FILE QUERY...`
 * (a QUERY may be `--conn-reject REFUSAL`: which table rule refused it)
 * and `egressd test FILE CASES.yaml`, run by users and CI on policy
 * repositories (never by the daemon). It prints to stdout/stderr but must
 * never print a credential value: only names and sources exist here.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <jansson.h>

#include "egressd/dns/krule.h"
#include "policy/binding.h"
#include "policy/cli.h"
#include "policy/name.h"
#include "policy/policy.h"
#include "policy/policy_internal.h"
#include "policy/yamltree.h"

#define CLI_QUERY_MAX 2048 /* bytes of one explain/test query */

enum cli_kind {
	CLI_NAME,    /* a DNS name */
	CLI_ADDR,    /* ip, ip:port, [v6]:port */
	CLI_REQUEST, /* METHOD scheme://host[:port]/path */
};

/* The outcome of one query. */
struct cli_result {
	enum cli_kind kind;
	enum policy_action action;
	struct policy_decision d;
	enum binding_match_result bm;
	size_t binding;
	char subject[300]; /* canonical name or address text */
	uint16_t port;
	bool port_denied; /* name allowed, port not in the rule's ports */
};

static bool
cli_ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && strcmp(s + a - b, suf) == 0;
}

static char *
cli_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n = 0;

	if (f == NULL)
		return NULL;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			if (cap >= POLICY_MAX_FILE_BYTES + 8192)
				break;
			cap = cap ? cap * 2 : 8192;
			char *nb = realloc(buf, cap);
			if (nb == NULL)
				break;
			buf = nb;
		}
		size_t r = fread(buf + n, 1, cap - n - 1, f);
		n += r;
		if (r == 0)
			break;
	}
	fclose(f);
	if (buf != NULL)
		buf[n] = '\0';
	*len = n;
	return buf;
}

/* Load FILE: JSON (OpenSandbox shape) by extension, else YAML. */
static struct policy *
cli_load(const char *path, struct policy_err *err)
{
	size_t len;
	char *buf;
	struct policy *p;

	if (!cli_ends_with(path, ".json"))
		return policy_from_yaml_file(path, NULL, err);
	memset(err, 0, sizeof(*err));
	if ((buf = cli_slurp(path, &len)) == NULL) {
		err->code = POLICY_ERR_IO;
		snprintf(err->file, sizeof(err->file), "%s", path);
		snprintf(err->msg, sizeof(err->msg), "cannot read file");
		return NULL;
	}
	p = policy_from_json(buf, len, NULL, err);
	snprintf(err->file, sizeof(err->file), "%s", path);
	free(buf);
	return p;
}

/*
 * Load FILE, with the operator overlay DIR/deny.always, DIR/allow.always
 * and DIR/log_skip.always when "-a DIR" leads the arguments (shifted away).
 */
static struct policy *
cli_load_args(int *argc, char ***argv, struct policy_err *err)
{
	const char *dir = NULL;
	struct policy *p, *q;

	if (*argc >= 3 && strcmp((*argv)[1], "-a") == 0) {
		/* The view starts at DIR, which stands in for argv[0] (unused later). */
		dir = (*argv)[2];
		*argv += 2;
		*argc -= 2;
	}
	if (*argc < 2) {
		memset(err, 0, sizeof(*err));
		return NULL;
	}
	if ((p = cli_load((*argv)[1], err)) == NULL || dir == NULL)
		return p;
	q = policy_with_always_dir(p, dir, err);
	policy_free(p);
	return q;
}

static void
cli_print_err(const struct policy_err *err)
{
	char line[700];
	policy_err_format(err, line, sizeof(line));
	fprintf(stderr, "%s\n", line);
}

static void
cli_ports_text(const struct policy_port_range *pr, size_t n, char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < n && o + 16 < len; i++) {
		o += (size_t)snprintf(buf + o, len - o, "%s%u", i ? "," : "", pr[i].lo);
		if (pr[i].hi != pr[i].lo)
			o += (size_t)snprintf(buf + o, len - o, "-%u", pr[i].hi);
	}
}

/* The normalised policy in the policy-file shape (JSON is valid YAML). */
static void
cli_print_policy(const struct policy *p)
{
	json_t *o = json_object(), *eg = json_array(), *dns = json_object();
	const struct policy_dns *d = policy_dns(p);

	json_object_set_new(o, "version", json_integer(1));
	json_object_set_new(
	    o, "defaultAction", json_string(policy_action_str(policy_default_action(p))));
	json_object_set_new(dns, "ttlMin", json_integer(d->ttl_min));
	json_object_set_new(dns, "ttlMax", json_integer(d->ttl_max));
	json_object_set_new(dns, "filterPrivate", json_boolean(d->filter_private));
	json_object_set_new(o, "dns", dns);
	json_t *user = policy_to_json(p);
	json_t *rules = json_object_get(user, "egress");
	if (json_is_array(rules))
		json_array_extend(eg, rules);
	json_decref(user);
	json_object_set_new(o, "egress", eg);
	if (policy_bindings(p) != NULL) {
		json_t *b = binding_set_to_tree(policy_bindings(p));
		json_object_update(o, b);
		json_decref(b);
	}
	char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	if (s != NULL)
		printf("%s\n", s);
	free(s);
	json_decref(o);
}

struct cli_shadow {
	const struct policy *p;
	const char *file;
	const struct policy_rule_info *allow;
	int warnings;
};

static int
cli_shadow_deny_cb(const struct policy_rule_info *ri, void *arg)
{
	struct cli_shadow *s = arg;

	if (ri->origin != POLICY_ORIGIN_USER || ri->action != POLICY_DENY ||
	    !policy_addr_in(ri->addr, s->allow->addr))
		return 0;
	fprintf(stderr,
	    "%s: warning: egress[%zu] allow %s is shadowed by egress[%zu] deny %s "
	    "(address denies beat address allows)\n",
	    s->file, s->allow->index, s->allow->target, ri->index, ri->target);
	s->warnings++;
	return 1;
}

static int
cli_shadow_allow_cb(const struct policy_rule_info *ri, void *arg)
{
	struct cli_shadow *s = arg;

	if (ri->origin != POLICY_ORIGIN_USER || ri->action != POLICY_ALLOW)
		return 0;
	s->allow = ri;
	(void)policy_foreach_addr(s->p, cli_shadow_deny_cb, s);
	return 0;
}

/*
 * Warn about allow prefixes that a deny prefix fully covers (dead rules),
 * and about every binding that opted in to wildcard hosts or all paths
 * (allowBroad): its secret goes to more than one exact endpoint.
 */
static int
cli_lint(const struct policy *p, const char *file)
{
	struct cli_shadow s = {.p = p, .file = file};
	const struct binding_set *bs = policy_bindings(p);

	(void)policy_foreach_addr(p, cli_shadow_allow_cb, &s);
	for (size_t i = 0; i < binding_set_count(bs); i++) {
		if (!binding_allow_broad(bs, i))
			continue;
		fprintf(stderr,
		    "%s: warning: bindings[%zu] (%s) sets allowBroad: its credential may go to "
		    "any host of a wildcard zone or any path, not one exact endpoint\n",
		    file, i, binding_name(bs, i));
		s.warnings++;
	}
	return s.warnings;
}

static int
cli_check(int argc, char **argv)
{
	bool verbose = false;
	int rc = 0, files = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-v") == 0) {
			verbose = true;
			continue;
		}
		struct policy_err err;
		struct policy *p = cli_load(argv[i], &err);
		files++;
		if (p == NULL) {
			cli_print_err(&err);
			rc = 1;
			continue;
		}
		(void)cli_lint(p, argv[i]);
		if (verbose)
			cli_print_policy(p);
		else
			printf("%s: ok (%zu rules, %zu bindings)\n", argv[i],
			    policy_rule_count(p, POLICY_ORIGIN_USER),
			    binding_set_count(policy_bindings(p)));
		policy_free(p);
	}
	if (files == 0) {
		fprintf(stderr, "usage: egressd check [-v] FILE...\n");
		return 2;
	}
	return rc;
}

static int
cli_port(const char *s, uint16_t *out)
{
	unsigned long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -1;
	v = strtoul(s, &end, 10);
	if (*end != '\0' || v < 1 || v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

/* Evaluate one query; -1 with why set if the query cannot be read. */
static int
cli_eval(const struct policy *p, const char *q, struct cli_result *r, const char **why)
{
	char buf[CLI_QUERY_MAX + 1];
	struct policy_addr a;
	size_t len = strlen(q), clen;

	memset(r, 0, sizeof(*r));
	r->bm = BINDING_MATCH_NONE;
	if (len == 0 || len > CLI_QUERY_MAX) {
		*why = "empty or overlong query";
		return -1;
	}
	memcpy(buf, q, len + 1);
	char *sp = strchr(buf, ' ');
	if (sp != NULL) {
		/* METHOD scheme://host[:port]/path */
		char *method = buf, *url = sp + 1, *host, *path, *colon;
		const char *scheme;
		*sp = '\0';
		if (strncmp(url, "https://", 8) == 0) {
			scheme = "https";
			host = url + 8;
			r->port = 443;
		} else if (strncmp(url, "http://", 7) == 0) {
			scheme = "http";
			host = url + 7;
			r->port = 80;
		} else {
			*why = "a request query is METHOD https://host/path";
			return -1;
		}
		path = strchr(host, '/');
		char pathbuf[CLI_QUERY_MAX + 2];
		snprintf(pathbuf, sizeof(pathbuf), "%s", path ? path : "/");
		if (path != NULL)
			*path = '\0';
		colon = strrchr(host, ':');
		if (colon != NULL) {
			*colon = '\0';
			if (cli_port(colon + 1, &r->port) != 0) {
				*why = "bad port in URL";
				return -1;
			}
		}
		if (policy_name_canon((const uint8_t *)host, strlen(host), 0, r->subject, &clen) !=
		    POLICY_NAME_OK) {
			*why = "the URL host is not a valid host name (requests to IP literals "
			       "never match a binding)";
			return -1;
		}
		r->kind = CLI_REQUEST;
		policy_decide_name(p, r->subject, &r->d);
		r->action = r->d.action;
		if (r->action == POLICY_ALLOW &&
		    !policy_ports_contain(r->d.ports, r->d.nports, r->port)) {
			r->action = POLICY_DENY;
			r->port_denied = true;
		}
		/* A binding matches only its scheme's default port (binding_match). */
		if (r->action == POLICY_ALLOW)
			r->bm = binding_match(policy_bindings(p), scheme, r->subject, r->port,
			    method, pathbuf, &r->binding);
		return 0;
	}
	/* [v6]:port, v4:port, or a bare address */
	if (buf[0] == '[') {
		char *end = strchr(buf, ']');
		if (end == NULL ||
		    (end[1] != '\0' && (end[1] != ':' || cli_port(end + 2, &r->port) != 0))) {
			*why = "bad [v6]:port";
			return -1;
		}
		*end = '\0';
		if (policy_addr_parse((const uint8_t *)buf + 1, strlen(buf + 1), false, &a) !=
		    POLICY_NAME_OK) {
			*why = "bad IPv6 address";
			return -1;
		}
	} else if (policy_addr_parse((const uint8_t *)buf, len, false, &a) != POLICY_NAME_OK) {
		char *colon = strrchr(buf, ':');
		if (colon != NULL && strchr(buf, ':') == colon) {
			*colon = '\0';
			if (cli_port(colon + 1, &r->port) != 0 ||
			    policy_addr_parse((const uint8_t *)buf, strlen(buf), false, &a) !=
			        POLICY_NAME_OK) {
				*why = "bad ip:port";
				return -1;
			}
		} else {
			if (policy_name_canon((const uint8_t *)buf, len, 0, r->subject, &clen) !=
			    POLICY_NAME_OK) {
				*why = "not a valid DNS name, address or request";
				return -1;
			}
			r->kind = CLI_NAME;
			policy_decide_name(p, r->subject, &r->d);
			r->action = r->d.action;
			return 0;
		}
	}
	r->kind = CLI_ADDR;
	policy_addr_format(&a, r->subject, sizeof(r->subject));
	policy_decide_addr(p, a.family, a.bytes, r->port, 6, &r->d);
	r->action = r->d.action;
	return 0;
}

static void
cli_print_result(const struct policy *p, const char *q, const struct cli_result *r)
{
	static const char *const kinds[] = {"name", "address", "request"};
	static const char *const auths[] = {
	    "bearer", "basic", "apiKey", "customHeaders", "passthrough"};
	char ports[256];

	printf("%s %s", kinds[r->kind], r->subject);
	if (r->port != 0)
		printf(" port %u", r->port);
	printf(": %s\n", policy_action_str(r->action));
	if (r->d.origin == POLICY_ORIGIN_DEFAULT) {
		printf("  rule: none (defaultAction %s)\n",
		    policy_action_str(policy_default_action(p)));
	} else {
		cli_ports_text(r->d.ports, r->d.nports, ports, sizeof(ports));
		printf("  rule: %s%s[%zu] %s %s%s%s\n", policy_origin_str(r->d.origin),
		    r->d.origin == POLICY_ORIGIN_USER ? " egress" : "", r->d.index,
		    policy_action_str(r->d.action), r->d.target, r->d.nports ? " ports " : "",
		    r->d.nports ? ports : "");
	}
	printf("  why: %s\n", r->d.why);
	if (r->port_denied)
		printf("  why: port %u is not in the deciding rule's ports\n", r->port);
	if (r->kind != CLI_REQUEST)
		return;
	if (r->action != POLICY_ALLOW) {
		printf("  binding: none (the request is not allowed to leave)\n");
	} else if (r->bm == BINDING_MATCH_ONE) {
		const struct binding_set *bs = policy_bindings(p);
		struct binding_header h;
		struct binding_credential_info ci;
		printf("  binding: %s (%s)\n", binding_name(bs, r->binding),
		    auths[binding_auth_type(bs, r->binding)]);
		for (size_t j = 0; binding_header_get(bs, r->binding, j, &h) == 0; j++) {
			if (binding_credential_get(bs, h.credential, &ci) != 0)
				continue;
			printf("  inject: %s: %s<credential %s>\n", h.name, h.prefix, ci.name);
		}
	} else if (r->bm == BINDING_MATCH_AMBIGUOUS) {
		printf("  binding: ambiguous (refused with 403)\n");
	} else {
		printf("  binding: none (forwarded untouched)\n");
	}
}

/* A refusal to explain: what the record (or the 5-tuple given) says. */
struct cli_refusal {
	char rule[32];  /* the table rule the record names; empty: derive it */
	char proto[16]; /* "tcp", "udp", "icmp"... or a number */
	uint8_t l4;     /* IPPROTO_* */
	char src[64];   /* as given, may be empty */
	uint16_t sport;
	struct policy_addr dst;
	uint16_t dport;
};

static uint8_t
cli_l4(const char *proto)
{
	static const struct {
		const char *name;
		uint8_t num;
	} t[] = {{"tcp", IPPROTO_TCP}, {"udp", IPPROTO_UDP}, {"icmp", IPPROTO_ICMP},
	    {"icmpv6", IPPROTO_ICMPV6}, {"sctp", IPPROTO_SCTP}, {"udplite", IPPROTO_UDPLITE}};
	char *end;
	unsigned long v;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (strcmp(proto, t[i].name) == 0)
			return t[i].num;
	v = strtoul(proto, &end, 10);
	return *proto != '\0' && *end == '\0' && v <= 255 ? (uint8_t)v : 0;
}

static int
cli_json_str(json_t *o, const char *key, char *out, size_t cap, bool need)
{
	json_t *v = json_object_get(o, key);

	if (v == NULL)
		return need ? -1 : 0;
	if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= 65535) {
		snprintf(out, cap, "%lld", (long long)json_integer_value(v));
		return 0;
	}
	if (!json_is_string(v) || json_string_length(v) >= cap)
		return -1;
	snprintf(out, cap, "%s", json_string_value(v));
	return 0;
}

/* A conn_reject log line, or "PROTO [SRC] DST[:PORT]". -1 with why. */
static int
cli_refusal_parse(const char *text, struct cli_refusal *f, const char **why)
{
	char dst[80] = "", port[8] = "", sport[8] = "", buf[CLI_QUERY_MAX + 1];
	char *tok[4], *save = NULL;
	int n = 0;

	memset(f, 0, sizeof(*f));
	if (text[0] == '{') {
		json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
		char ev[32] = "";
		int bad;

		if (o == NULL || !json_is_object(o)) {
			json_decref(o);
			*why = "not a JSON log line";
			return -1;
		}
		bad = cli_json_str(o, "event", ev, sizeof(ev), true) != 0 ||
		      strcmp(ev, "conn_reject") != 0 ||
		      cli_json_str(o, "rule", f->rule, sizeof(f->rule), true) != 0 ||
		      cli_json_str(o, "proto", f->proto, sizeof(f->proto), false) != 0 ||
		      cli_json_str(o, "src", f->src, sizeof(f->src), false) != 0 ||
		      cli_json_str(o, "sport", sport, sizeof(sport), false) != 0 ||
		      cli_json_str(o, "dst", dst, sizeof(dst), true) != 0 ||
		      cli_json_str(o, "dport", port, sizeof(port), false) != 0;
		json_decref(o);
		if (bad) {
			*why = "not a conn_reject line with rule and dst (egressd's log)";
			return -1;
		}
	} else {
		if (strlen(text) > CLI_QUERY_MAX) {
			*why = "too long";
			return -1;
		}
		snprintf(buf, sizeof(buf), "%s", text);
		for (char *t = strtok_r(buf, " \t", &save); t != NULL && n < 4;
		     t = strtok_r(NULL, " \t", &save))
			if (strcmp(t, "->") != 0)
				tok[n++] = t;
		if (n < 2 || n > 3 || strlen(tok[0]) >= sizeof(f->proto)) {
			*why = "expected PROTO [SRC] DST[:PORT] (e.g. \"tcp 203.0.113.5:443\")";
			return -1;
		}
		snprintf(f->proto, sizeof(f->proto), "%s", tok[0]);
		if (n == 3)
			snprintf(f->src, sizeof(f->src), "%.63s", tok[1]);
		{
			char *d = tok[n - 1], *c;

			if (d[0] == '[' && (c = strchr(d, ']')) != NULL) {
				*c = '\0';
				if (c[1] == ':')
					snprintf(port, sizeof(port), "%.7s", c + 2);
				else if (c[1] != '\0')
					port[0] = 'x';
				d++;
			} else if ((c = strrchr(d, ':')) != NULL && strchr(d, ':') == c) {
				*c = '\0';
				snprintf(port, sizeof(port), "%.7s", c + 1);
			}
			snprintf(dst, sizeof(dst), "%.79s", d);
		}
	}
	f->l4 = cli_l4(f->proto);
	if (f->proto[0] != '\0' && f->l4 == 0) {
		*why = "unknown protocol";
		return -1;
	}
	if (policy_addr_parse((const uint8_t *)dst, strlen(dst), false, &f->dst) !=
	    POLICY_NAME_OK) {
		*why = "the destination is not an IP address";
		return -1;
	}
	if ((port[0] != '\0' && cli_port(port, &f->dport) != 0) ||
	    (sport[0] != '\0' && cli_port(sport, &f->sport) != 0)) {
		*why = "bad port";
		return -1;
	}
	return 0;
}

/*
 * Which table rule refused it: the one the record names, else the one the
 * policy leads to (the learned sets are not known here: an address an
 * allowed name resolved to would have been accepted on its ports).
 */
static const struct krule *
cli_refusal_rule(const struct cli_refusal *f, const struct policy_decision *d, bool *derived)
{
	*derived = f->rule[0] == '\0';
	if (!*derived)
		return krule_by_name(f->rule);
	if (d->action == POLICY_DENY && d->origin != POLICY_ORIGIN_DEFAULT)
		return krule_by_name("deny");
	if (d->action == POLICY_ALLOW)
		return NULL;
	if (f->dport == 853)
		return krule_by_name("dot");
	return krule_by_name(f->l4 == IPPROTO_TCP ? "default_tcp" : "default");
}

/* explain --conn-reject: the table rule, the reason and the policy's view of the destination. */
static int
cli_explain_refusal(const struct policy *p, const char *text)
{
	struct cli_refusal f;
	struct policy_decision d;
	const struct krule *k;
	const char *why = NULL;
	char a[INET6_ADDRSTRLEN + 8], show[POLICY_SHOW_MAX + 8], ports[256];
	bool derived;

	if (cli_refusal_parse(text, &f, &why) != 0) {
		policy_show(show, sizeof(show), text, strlen(text));
		fprintf(stderr, "explain: --conn-reject \"%s\": %s\n", show, why);
		return 2;
	}
	policy_addr_format(&f.dst, a, sizeof(a));
	policy_decide_addr(p, f.dst.family, f.dst.bytes, f.dport, f.l4 ? f.l4 : IPPROTO_TCP, &d);
	k = cli_refusal_rule(&f, &d, &derived);
	policy_show(show, sizeof(show), f.src[0] ? f.src : "(sandbox)",
	    strlen(f.src[0] ? f.src : "(sandbox)"));
	printf("refusal %s %s", f.proto[0] ? f.proto : "?", show);
	if (f.sport)
		printf(" port %u", f.sport);
	printf(" -> %s", a);
	if (f.dport)
		printf(" port %u", f.dport);
	printf("\n");
	if (k == NULL && !derived) {
		policy_show(show, sizeof(show), f.rule, strlen(f.rule));
		printf("  table rule: %s (not a rule of egressd's table)\n", show);
	} else if (k == NULL) {
		printf("  table rule: none: the policy allows this destination, so the table "
		       "refuses it only through the DoH, DoT or upstream-proxy rules\n");
	} else {
		printf("  table rule: %s%s (%s)\n", k->name,
		    derived ? " (derived from the policy)" : "", k->where);
		printf("  reason: %s\n", krule_reason_name(krule_reason(k, f.l4)));
		printf("  why: %s\n", k->why);
	}
	if (d.origin == POLICY_ORIGIN_DEFAULT) {
		printf("  policy: no IP rule covers %s (defaultAction %s)\n", a,
		    policy_action_str(policy_default_action(p)));
	} else {
		cli_ports_text(d.ports, d.nports, ports, sizeof(ports));
		printf("  policy: %s%s[%zu] %s %s%s%s\n", policy_origin_str(d.origin),
		    d.origin == POLICY_ORIGIN_USER ? " egress" : "", d.index,
		    policy_action_str(d.action), d.target, d.nports ? " ports " : "",
		    d.nports ? ports : "");
	}
	printf("  policy says: %s\n", d.why);
	return 0;
}

static int
cli_explain(int argc, char **argv)
{
	struct policy_err err;
	struct policy *p;
	int rc = 0;

	p = cli_load_args(&argc, &argv, &err);
	if (p == NULL && err.code != POLICY_ERR_NONE) {
		cli_print_err(&err);
		return 1;
	}
	if (argc < 3) {
		policy_free(p);
		fprintf(stderr, "usage: egressd explain [-a RULES_DIR] FILE QUERY...\n"
		                "  QUERY: a DNS name, ip[:port], [v6]:port, "
		                "\"METHOD https://host/path\", or\n"
		                "  --conn-reject REFUSAL: a conn_reject log line, or "
		                "\"PROTO [SRC] DST[:PORT]\"\n");
		return 2;
	}
	for (int i = 2; i < argc; i++) {
		struct cli_result r;
		const char *why = NULL;
		if (strcmp(argv[i], "--conn-reject") == 0) {
			if (i + 1 >= argc) {
				fprintf(stderr, "explain: --conn-reject needs a refusal\n");
				rc = 2;
			} else if (cli_explain_refusal(p, argv[++i]) != 0)
				rc = 2;
			continue;
		}
		if (cli_eval(p, argv[i], &r, &why) != 0) {
			char show[POLICY_SHOW_MAX + 8];
			policy_show(show, sizeof(show), argv[i], strlen(argv[i]));
			fprintf(stderr, "explain: \"%s\": %s\n", show, why);
			rc = 2;
			continue;
		}
		cli_print_result(p, argv[i], &r);
	}
	policy_free(p);
	return rc;
}

static const char *const cases_root_keys[] = {"cases", NULL};
static const char *const case_keys[] = {"name", "query", "expect", "binding", NULL};

/* One case: returns 1 pass, 0 fail, -1 malformed (err filled). */
static int
cli_case(struct policy_ctx *c, const struct policy *p, const json_t *arr, size_t i)
{
	char path[64], show[POLICY_SHOW_MAX + 8];
	const json_t *cs = json_array_get(arr, i);
	struct cli_result r;
	const char *why = NULL;

	snprintf(path, sizeof(path), "cases[%zu]", i);
	if (!json_is_object(cs))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, arr, NULL, i, 0, "cases",
		    "a case must be a mapping with query and expect");
	if (policy_ctx_keys(c, cs, path, case_keys) != 0)
		return -1;
	json_t *q = policy_ctx_member(cs, "query"), *ex = policy_ctx_member(cs, "expect");
	json_t *bd = policy_ctx_member(cs, "binding"), *nm = policy_ctx_member(cs, "name");
	if (!policy_json_is_str(q))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, q ? cs : arr, q ? "query" : NULL, i,
		    0, q ? path : "cases", "a case needs a query string");
	const char *exs = policy_json_is_str(ex) ? json_string_value(ex) : "";
	if (strcmp(exs, "allow") != 0 && strcmp(exs, "deny") != 0)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, ex ? cs : arr, ex ? "expect" : NULL,
		    i, 0, ex ? path : "cases", "expect must be allow or deny");
	if (bd != NULL && !policy_json_is_str(bd))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, cs, "binding", 0, 0, path,
		    "binding must be a binding name, none or ambiguous");
	const char *label = policy_json_is_str(nm) ? json_string_value(nm) : json_string_value(q);
	policy_show(show, sizeof(show), label, strlen(label));
	if (cli_eval(p, json_string_value(q), &r, &why) != 0)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, cs, "query", 0, 0, path, "%s", why);
	if (bd != NULL && r.kind != CLI_REQUEST)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, cs, "binding", 0, 1, path,
		    "binding expectations need a request query (METHOD https://host/path)");
	const char *got = policy_action_str(r.action);
	bool ok = strcmp(got, exs) == 0;
	char gotb[BINDING_MAX_NAME + 16] = "";
	if (bd != NULL) {
		const char *want = json_string_value(bd);
		if (r.bm == BINDING_MATCH_ONE)
			snprintf(
			    gotb, sizeof(gotb), "%s", binding_name(policy_bindings(p), r.binding));
		else
			snprintf(gotb, sizeof(gotb), "%s",
			    r.bm == BINDING_MATCH_AMBIGUOUS ? "ambiguous" : "none");
		ok = ok && strcmp(want, gotb) == 0;
	}
	if (ok) {
		printf("PASS %s: %s%s%s\n", show, got, bd ? ", binding " : "", bd ? gotb : "");
		return 1;
	}
	printf("FAIL %s: expected %s%s%s, got %s%s%s (%s%s%s)\n", show, exs, bd ? ", binding " : "",
	    bd ? json_string_value(bd) : "", got, bd ? ", binding " : "", bd ? gotb : "",
	    r.d.target ? r.d.target : "defaultAction", r.d.target ? ": " : ": ", r.d.why);
	return 0;
}

static int
cli_test(int argc, char **argv)
{
	struct policy_err err, cerr;
	struct policy_ctx c;
	struct yamltree_marks *marks = NULL;
	struct yamltree_error ye;
	struct policy *p;
	size_t len, passed = 0, failed = 0, i;
	char *buf;
	json_t *root, *v;
	int rc = 0;

	p = cli_load_args(&argc, &argv, &err);
	if (p == NULL && err.code != POLICY_ERR_NONE) {
		cli_print_err(&err);
		return 1;
	}
	if (argc != 3 || p == NULL) {
		policy_free(p);
		fprintf(stderr, "usage: egressd test [-a RULES_DIR] FILE CASES.yaml\n");
		return 2;
	}
	if ((buf = cli_slurp(argv[2], &len)) == NULL) {
		fprintf(stderr, "%s: cannot read file\n", argv[2]);
		policy_free(p);
		return 2;
	}
	root = yamltree_parse((const uint8_t *)buf, len, &marks, &ye);
	free(buf);
	if (root == NULL) {
		fprintf(stderr, "%s:%u:%u: %s\n", argv[2], ye.line, ye.col, ye.msg);
		policy_free(p);
		return 2;
	}
	policy_ctx_init(&c, &cerr, argv[2], marks, NULL);
	json_t *cases = policy_ctx_member(root, "cases");
	if (!json_is_object(root) || policy_ctx_keys(&c, root, "", cases_root_keys) != 0 ||
	    !json_is_array(cases) || json_array_size(cases) == 0 ||
	    json_array_size(cases) > POLICYCLI_MAX_CASES) {
		if (cerr.code == POLICY_ERR_NONE)
			policy_ctx_fail(&c, POLICY_ERR_INVALID, json_is_object(root) ? root : NULL,
			    json_is_object(root) && cases ? "cases" : NULL, 0, 0, "",
			    "a cases file is a mapping with a non-empty \"cases\" list (at most "
			    "%d)",
			    POLICYCLI_MAX_CASES);
		cli_print_err(&cerr);
		rc = 2;
		goto out;
	}
	json_array_foreach(cases, i, v)
	{
		int r = cli_case(&c, p, cases, i);
		if (r < 0) {
			cli_print_err(&cerr);
			rc = 2;
			goto out;
		}
		if (r > 0)
			passed++;
		else
			failed++;
	}
	printf("%zu passed, %zu failed\n", passed, failed);
	rc = failed ? 1 : 0;
out:
	json_decref(root);
	yamltree_marks_free(marks);
	policy_free(p);
	return rc;
}

/* Dispatch a subcommand; see cli.h. */
int
policycli_main(int argc, char **argv)
{
	if (argc < 1 || argv[0] == NULL)
		return 2;
	if (strcmp(argv[0], "check") == 0)
		return cli_check(argc, argv);
	if (strcmp(argv[0], "explain") == 0)
		return cli_explain(argc, argv);
	if (strcmp(argv[0], "test") == 0)
		return cli_test(argc, argv);
	fprintf(stderr, "unknown policy command \"%s\" (check, explain, test)\n", argv[0]);
	return 2;
}
