/*
 * Unit tests of policy/policy.c: the OpenSandbox JSON front end,
 * precedence (deny.always > allow.always > first user match > default),
 * wildcard apex, ports, address prefixes, PATCH/DELETE, always files,
 * GET shape, iteration and limits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "policy/policy.h"

static struct policy *
load(const char *json)
{
	struct policy_err err;
	struct policy *p = policy_from_json(json, strlen(json), NULL, &err);
	if (p == NULL)
		print_error("load failed: %s: %s\n", err.key, err.msg);
	assert_non_null(p);
	return p;
}

static enum policy_errcode
load_err(const char *json, struct policy_err *err)
{
	struct policy *p = policy_from_json(json, strlen(json), NULL, err);
	assert_null(p);
	return err->code;
}

static enum policy_action
name_action(const struct policy *p, const char *name)
{
	struct policy_decision d;
	policy_decide_name(p, name, &d);
	return d.action;
}

static struct policy_decision
addr_decide(const struct policy *p, const char *ip, uint16_t port)
{
	struct policy_decision d;
	uint8_t b[16];
	int fam = strchr(ip, ':') ? AF_INET6 : AF_INET;
	assert_int_equal(inet_pton(fam, ip, b), 1);
	policy_decide_addr(p, fam, b, port, 6, &d);
	return d;
}

static void
test_json_empty_forms(void **state)
{
	const char *forms[] = {"", "   \n\t", "null", "{}", "{}\n", "{\"defaultAction\":\"\"}",
	    "{\"defaultAction\":null}", "{\"egress\":null}", "{\"egress\":[]}"};
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		struct policy *p = load(forms[i]);
		assert_int_equal(policy_default_action(p), POLICY_DENY);
		assert_int_equal(policy_rule_count(p, POLICY_ORIGIN_USER), 0);
		assert_int_equal(name_action(p, "example.com"), POLICY_DENY);
		assert_string_equal(policy_mode(p), "deny_all");
		policy_free(p);
	}
	struct policy *p = load("{\"defaultAction\":\" ALLOW \"}");
	assert_int_equal(policy_default_action(p), POLICY_ALLOW);
	assert_string_equal(policy_mode(p), "allow_all");
	policy_free(p);
}

static void
test_json_errors(void **state)
{
	struct policy_err err;
	char line[800];

	/* duplicate keys, exact and by case */
	assert_int_equal(load_err("{\"defaultAction\":\"allow\",\"defaultAction\":\"deny\"}", &err),
	    POLICY_ERR_SYNTAX);
	assert_int_equal(load_err("{\"egress\":[{\"action\":\"allow\",\"target\":\"a.com\","
	                          "\"target\":\"b.com\"}]}",
	                     &err),
	    POLICY_ERR_SYNTAX);
	assert_int_equal(load_err("{\"defaultAction\":\"allow\",\"DefaultAction\":\"deny\"}", &err),
	    POLICY_ERR_INVALID);
	/* OpenSandbox accepts any defaultAction and half-applies it; we refuse */
	assert_int_equal(load_err("{\"defaultAction\":\"block\"}", &err), POLICY_ERR_INVALID);
	assert_string_equal(err.key, "defaultAction");
	assert_int_equal(
	    load_err("{\"egress\":[{\"action\":\"drop\",\"target\":\"a.com\"}]}", &err),
	    POLICY_ERR_INVALID);
	assert_string_equal(err.key, "egress[0].action");
	assert_non_null(strstr(err.msg, "unsupported action"));
	assert_int_equal(load_err("{\"egress\":[{\"action\":\"allow\",\"target\":\"  \"}]}", &err),
	    POLICY_ERR_INVALID);
	assert_non_null(strstr(err.msg, "egress target cannot be empty"));
	assert_int_equal(
	    load_err("{\"egress\":[{\"action\":\"allow\"}]}", &err), POLICY_ERR_INVALID);
	/* OpenSandbox stores these as never-matching domains; we refuse them */
	const char *bad[] = {"*", "a b.com", "foo.com:443", "[::1]", "http://x.com", "*.*.x.com",
	    "x.com/path", "fe80::1%eth0",
	    "b\xc3\xbc"
	    "cher.de",
	    "10.0.0.0/33", "01.2.3.4"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char body[256];
		snprintf(body, sizeof(body),
		    "{\"egress\":[{\"action\":\"allow\",\"target\":\"%s\"}]}", bad[i]);
		assert_int_equal(load_err(body, &err), POLICY_ERR_INVALID);
		assert_string_equal(err.key, "egress[0].target");
	}
	/* NUL inside a JSON string: jansson refuses it before we see it */
	assert_int_equal(
	    load_err("{\"egress\":[{\"action\":\"allow\",\"target\":\"a\\u0000.com\"}]}", &err),
	    POLICY_ERR_SYNTAX);
	/* unknown keys (a typo of ports would otherwise widen an allow) */
	assert_int_equal(load_err("{\"egress\":[{\"action\":\"allow\",\"target\":\"a.com\","
	                          "\"prots\":[443]}]}",
	                     &err),
	    POLICY_ERR_INVALID);
	assert_non_null(strstr(err.msg, "unknown key"));
	assert_int_equal(load_err("{\"egres\":[]}", &err), POLICY_ERR_INVALID);
	assert_int_equal(load_err("[1,2]", &err), POLICY_ERR_INVALID);
	assert_int_equal(load_err("{\"egress\":{}}", &err), POLICY_ERR_INVALID);
	assert_int_equal(load_err("{\"egress\":[", &err), POLICY_ERR_SYNTAX);
	assert_int_equal(err.line, 1);
	/* ports on a deny, bad ports */
	assert_int_equal(load_err("{\"egress\":[{\"action\":\"deny\",\"target\":\"a.com\","
	                          "\"ports\":[22]}]}",
	                     &err),
	    POLICY_ERR_INVALID);
	const char *badports[] = {"[]", "[0]", "[65536]", "[\"10-5\"]", "[\"x\"]", "[true]",
	    "[\"1-\"]", "[\"08\"]", "443"};
	for (size_t i = 0; i < sizeof(badports) / sizeof(badports[0]); i++) {
		char body[256];
		snprintf(body, sizeof(body),
		    "{\"egress\":[{\"action\":\"allow\",\"target\":\"a.com\",\"ports\":%s}]}",
		    badports[i]);
		assert_int_equal(load_err(body, &err), POLICY_ERR_INVALID);
	}
	policy_err_format(&err, line, sizeof(line));
	assert_non_null(strstr(line, "<json>:"));
	assert_non_null(strstr(line, "egress[0].ports"));
}

static void
test_limits(void **state)
{
	struct policy_limits lim;
	struct policy_err err;
	char *body = malloc(200000);
	size_t o = 0;

	policy_limits_default(&lim);
	assert_int_equal(lim.max_rules, 4096);
	o += (size_t)sprintf(body + o, "{\"egress\":[");
	for (int i = 0; i < 4097; i++)
		o += (size_t)sprintf(body + o,
		    "%s{\"action\":\"allow\",\"target\":\"h%d.example\"}", i ? "," : "", i);
	sprintf(body + o, "]}");
	struct policy *p = policy_from_json(body, strlen(body), &lim, &err);
	assert_null(p);
	assert_int_equal(err.code, POLICY_ERR_TOO_LARGE);
	assert_non_null(strstr(err.msg, "exceeds limit 4096"));
	/* 0 means the compiled ceiling, as OpenSandbox's 0 = unlimited */
	lim.max_rules = 0;
	p = policy_from_json(body, strlen(body), &lim, &err);
	assert_non_null(p);
	assert_int_equal(policy_rule_count(p, POLICY_ORIGIN_USER), 4097);
	policy_free(p);
	free(body);
	/* target length */
	char t[400];
	memset(t, 'a', 300);
	t[300] = '\0';
	char b2[512];
	snprintf(b2, sizeof(b2), "{\"egress\":[{\"action\":\"allow\",\"target\":\"%s\"}]}", t);
	assert_int_equal(load_err(b2, &err), POLICY_ERR_TOO_LARGE);
	lim.max_rules = 10;
	lim.max_target_len = 8;
	assert_null(
	    policy_from_json("{\"egress\":[{\"target\":\"abcdefghi.com\"}]}", 39, &lim, &err));
	assert_int_equal(err.code, POLICY_ERR_TOO_LARGE);
}

static void
test_first_match_and_wildcards(void **state)
{
	struct policy *p = load("{\"defaultAction\":\"deny\",\"egress\":["
	                        "{\"action\":\"allow\",\"target\":\"*.example.com\"},"
	                        "{\"action\":\"deny\",\"target\":\"api.example.com\"},"
	                        "{\"action\":\"deny\",\"target\":\"*.internal.example.org\"},"
	                        "{\"action\":\"allow\",\"target\":\"*.example.org\"},"
	                        "{\"action\":\"allow\",\"target\":\"Exact.Example.NET.\"},"
	                        "{\"action\":\"allow\",\"target\":\"*.example.com\"},"
	                        "{\"target\":\"blocked.example.net\"}]}");
	struct policy_decision d;

	/* first match wins, whichever kind (OpenSandbox) */
	policy_decide_name(p, "api.example.com", &d);
	assert_int_equal(d.action, POLICY_ALLOW);
	assert_int_equal(d.origin, POLICY_ORIGIN_USER);
	assert_int_equal(d.index, 0);
	assert_string_equal(d.target, "*.example.com");
	assert_int_equal(d.kind, POLICY_TARGET_WILDCARD);
	/* every depth below the apex, never the apex, never a look-alike */
	assert_int_equal(name_action(p, "a.b.c.example.com"), POLICY_ALLOW);
	assert_int_equal(name_action(p, "example.com"), POLICY_DENY);
	assert_int_equal(name_action(p, "notexample.com"), POLICY_DENY);
	assert_int_equal(name_action(p, "example.com.evil.com"), POLICY_DENY);
	/* a deny earlier in the list beats a broader later allow */
	assert_int_equal(name_action(p, "x.internal.example.org"), POLICY_DENY);
	assert_int_equal(name_action(p, "internal.example.org"), POLICY_ALLOW);
	assert_int_equal(name_action(p, "example.org"), POLICY_DENY);
	/* targets are canonical */
	assert_int_equal(name_action(p, "exact.example.net"), POLICY_ALLOW);
	assert_int_equal(name_action(p, "sub.exact.example.net"), POLICY_DENY);
	policy_decide_name(p, "blocked.example.net", &d);
	assert_int_equal(d.action, POLICY_DENY);
	assert_int_equal(d.index, 5); /* the duplicate *.example.com was dropped */
	assert_int_equal(policy_rule_count(p, POLICY_ORIGIN_USER), 6);
	/* no rule: default */
	policy_decide_name(p, "other.test", &d);
	assert_int_equal(d.origin, POLICY_ORIGIN_DEFAULT);
	assert_int_equal(d.index, SIZE_MAX);
	assert_null(d.target);
	/* non-canonical input never matches a rule */
	policy_decide_name(p, "", &d);
	assert_int_equal(d.origin, POLICY_ORIGIN_DEFAULT);
	/* IP rules never take part in name decisions */
	policy_free(p);
	p = load("{\"defaultAction\":\"deny\",\"egress\":[{\"action\":\"allow\",\"target\":\"1.2.3."
	         "4\"}]}");
	assert_int_equal(name_action(p, "1.2.3.4"), POLICY_DENY);
	policy_free(p);
	/* a wildcard on a TLD, and a very deep name */
	p = load("{\"egress\":[{\"action\":\"allow\",\"target\":\"*.test\"}]}");
	assert_int_equal(name_action(p, "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z.test"),
	    POLICY_ALLOW);
	assert_int_equal(name_action(p, "test"), POLICY_DENY);
	policy_free(p);
}

static void
test_ports(void **state)
{
	struct policy *p = load("{\"egress\":["
	                        "{\"action\":\"allow\",\"target\":\"api.example.com\",\"ports\":"
	                        "[443,\"8000-8100\",\"8050-9000\",80]},"
	                        "{\"action\":\"allow\",\"target\":\"10.0.0.0/8\",\"ports\":[22]},"
	                        "{\"action\":\"allow\",\"target\":\"10.1.0.0/16\"}]}");
	const struct policy_port_range *pr;
	size_t n;

	assert_int_equal(policy_name_ports(p, "api.example.com", &pr, &n), 1);
	assert_int_equal(n, 3); /* sorted and merged: 80, 443, 8000-9000 */
	assert_int_equal(pr[0].lo, 80);
	assert_int_equal(pr[2].lo, 8000);
	assert_int_equal(pr[2].hi, 9000);
	assert_true(policy_ports_contain(pr, n, 8999));
	assert_false(policy_ports_contain(pr, n, 22));
	assert_true(policy_ports_contain(NULL, 0, 22));
	assert_int_equal(policy_name_ports(p, "other.com", &pr, &n), 0);
	/* address rules: an allow covers its ports only, others fall through */
	assert_int_equal(addr_decide(p, "10.2.0.1", 22).action, POLICY_ALLOW);
	struct policy_decision d = addr_decide(p, "10.2.0.1", 443);
	assert_int_equal(d.action, POLICY_DENY);
	assert_int_equal(d.origin, POLICY_ORIGIN_DEFAULT);
	assert_non_null(strstr(d.why, "not this port"));
	assert_int_equal(addr_decide(p, "10.2.0.1", 0).action, POLICY_ALLOW);
	d = addr_decide(p, "10.1.2.3", 443);
	assert_int_equal(d.action, POLICY_ALLOW);
	assert_string_equal(d.target, "10.1.0.0/16");
	policy_free(p);
}

static void
test_addresses(void **state)
{
	struct policy *p = load("{\"defaultAction\":\"deny\",\"egress\":["
	                        "{\"action\":\"allow\",\"target\":\"0.0.0.0/0\"},"
	                        "{\"action\":\"deny\",\"target\":\"10.0.0.0/8\"},"
	                        "{\"action\":\"allow\",\"target\":\"10.1.2.3\"},"
	                        "{\"action\":\"deny\",\"target\":\"2001:db8::/32\"},"
	                        "{\"action\":\"allow\",\"target\":\"2001:db8::1\"},"
	                        "{\"action\":\"allow\",\"target\":\"::ffff:192.0.2.0/120\"}]}");
	struct policy_decision d;

	/* deny prefixes beat allow prefixes whatever the order (OpenSandbox nft) */
	d = addr_decide(p, "10.1.2.3", 443);
	assert_int_equal(d.action, POLICY_DENY);
	assert_string_equal(d.target, "10.0.0.0/8");
	assert_int_equal(d.kind, POLICY_TARGET_CIDR);
	assert_int_equal(addr_decide(p, "11.0.0.1", 443).action, POLICY_ALLOW);
	assert_int_equal(addr_decide(p, "2001:db8::1", 443).action, POLICY_DENY);
	assert_int_equal(addr_decide(p, "2001:db9::1", 443).action, POLICY_DENY);
	/* IPv4-mapped destinations are decided as IPv4 */
	assert_int_equal(addr_decide(p, "::ffff:10.9.9.9", 443).action, POLICY_DENY);
	assert_int_equal(addr_decide(p, "::ffff:11.9.9.9", 443).action, POLICY_ALLOW);
	/* a mapped CIDR rule was stored as IPv4 */
	struct policy_rule_info ri;
	assert_int_equal(policy_rule_get(p, POLICY_ORIGIN_USER, 5, &ri), 0);
	assert_string_equal(ri.target, "192.0.2.0/24");
	assert_int_equal(ri.addr->family, AF_INET);
	assert_int_equal(ri.kind, POLICY_TARGET_CIDR);
	assert_int_equal(policy_rule_get(p, POLICY_ORIGIN_USER, 2, &ri), 0);
	assert_int_equal(ri.kind, POLICY_TARGET_ADDR);
	assert_int_equal(policy_rule_get(p, POLICY_ORIGIN_USER, 6, &ri), -1);
	/* unknown family fails closed */
	uint8_t z[16] = {0};
	policy_decide_addr(p, AF_UNIX, z, 80, 6, &d);
	assert_int_equal(d.action, POLICY_DENY);
	policy_free(p);
}

static void
test_always(void **state)
{
	struct policy *u = load("{\"defaultAction\":\"deny\",\"egress\":["
	                        "{\"action\":\"allow\",\"target\":\"9.9.9.9\"},"
	                        "{\"action\":\"allow\",\"target\":\"evil.example\"},"
	                        "{\"action\":\"deny\",\"target\":\"good.example\"},"
	                        "{\"action\":\"deny\",\"target\":\"8.8.8.8\"}]}");
	const char *deny = "# operator deny list\n\n  9.9.9.9  \n*.evil.example\nevil.example\n"
	                   "both.example\n169.254.0.0/16\n";
	const char *allow = "good.example\r\nboth.example\n  # indented comment\n8.8.8.0/24\n";
	struct policy_err err;
	struct policy_decision d;
	struct policy *p = policy_with_always(
	    u, "deny.always", deny, strlen(deny), "allow.always", allow, strlen(allow), &err);

	assert_non_null(p);
	assert_int_equal(policy_rule_count(p, POLICY_ORIGIN_DENY_ALWAYS), 5);
	assert_int_equal(policy_rule_count(p, POLICY_ORIGIN_ALLOW_ALWAYS), 3);
	/* deny.always beats a user allow */
	policy_decide_name(p, "evil.example", &d);
	assert_int_equal(d.action, POLICY_DENY);
	assert_int_equal(d.origin, POLICY_ORIGIN_DENY_ALWAYS);
	assert_int_equal(addr_decide(p, "9.9.9.9", 53).origin, POLICY_ORIGIN_DENY_ALWAYS);
	/* allow.always beats a user deny */
	policy_decide_name(p, "good.example", &d);
	assert_int_equal(d.action, POLICY_ALLOW);
	assert_int_equal(d.origin, POLICY_ORIGIN_ALLOW_ALWAYS);
	/* for addresses every deny prefix wins, as the nft sets (OpenSandbox) */
	d = addr_decide(p, "8.8.8.8", 53);
	assert_int_equal(d.action, POLICY_DENY);
	assert_int_equal(d.origin, POLICY_ORIGIN_USER);
	d = addr_decide(p, "8.8.8.9", 53);
	assert_int_equal(d.action, POLICY_ALLOW);
	assert_int_equal(d.origin, POLICY_ORIGIN_ALLOW_ALWAYS);
	/* deny.always beats allow.always for the same target */
	assert_int_equal(name_action(p, "both.example"), POLICY_DENY);
	/* always rules never show in GET, nor in the user count */
	json_t *j = policy_to_json(p);
	assert_int_equal(json_array_size(json_object_get(j, "egress")), 4);
	json_decref(j);
	/* a bad line names its line number */
	const char *bad = "ok.example\n# c\nbad..example\n";
	assert_null(policy_with_always(u, "deny.always", bad, strlen(bad), NULL, NULL, 0, &err));
	assert_int_equal(err.line, 3);
	assert_string_equal(err.file, "deny.always");
	/* files: a missing one means no rules */
	char dir[] = "/tmp/policy_alwaysXXXXXX";
	assert_non_null(mkdtemp(dir));
	char dpath[256], apath[256];
	snprintf(dpath, sizeof(dpath), "%s/deny.always", dir);
	snprintf(apath, sizeof(apath), "%s/allow.always", dir);
	FILE *f = fopen(dpath, "w");
	assert_non_null(f);
	fputs("good.example\n", f);
	fclose(f);
	struct policy *q = policy_with_always_dir(u, dir, &err);
	assert_non_null(q);
	assert_int_equal(policy_rule_count(q, POLICY_ORIGIN_DENY_ALWAYS), 1);
	assert_int_equal(policy_rule_count(q, POLICY_ORIGIN_ALLOW_ALWAYS), 0);
	assert_int_equal(name_action(q, "good.example"), POLICY_DENY);
	/* a directory instead of a file is an error */
	assert_int_equal(mkdir(apath, 0700), 0);
	assert_null(policy_with_always_dir(u, dir, &err));
	assert_int_equal(err.code, POLICY_ERR_IO);
	rmdir(apath);
	unlink(dpath);
	rmdir(dir);
	policy_free(q);
	policy_free(p);
	policy_free(u);
}

/* log_skip.always: names only, line numbers on errors, kept by every derived policy. */
static void
test_log_skip(void **state)
{
	struct policy *u = load("{\"defaultAction\":\"deny\",\"egress\":["
	                        "{\"action\":\"allow\",\"target\":\"a.example\"}]}");
	const char *skip = "# quiet names\n\nNoisy.Example.\n  *.cdn.example  \n";
	struct policy_err err;
	struct policy *p = policy_with_log_skip(u, "log_skip.always", skip, strlen(skip), &err);
	struct policy *q;
	size_t removed = 0;

	assert_non_null(p);
	assert_true(policy_log_skip(p, "noisy.example"));
	assert_true(policy_log_skip(p, "x.y.cdn.example"));
	assert_false(policy_log_skip(p, "cdn.example"));
	assert_false(policy_log_skip(p, "xcdn.example"));
	assert_false(policy_log_skip(p, "a.example"));
	assert_false(policy_log_skip(u, "noisy.example"));
	/* the rules are untouched */
	assert_int_equal(name_action(p, "a.example"), POLICY_ALLOW);
	assert_int_equal(name_action(p, "noisy.example"), POLICY_DENY);
	/* PATCH and DELETE derive from p: the list stays */
	const char *patch = "[{\"action\":\"allow\",\"target\":\"b.example\"}]";
	q = policy_patch_json(p, patch, strlen(patch), NULL, &err);
	assert_non_null(q);
	assert_true(policy_log_skip(q, "noisy.example"));
	policy_free(q);
	const char *del = "[\"a.example\"]";
	q = policy_remove_json(p, del, strlen(del), &removed, &err);
	assert_non_null(q);
	assert_int_equal(removed, 1);
	assert_true(policy_log_skip(q, "x.cdn.example"));
	policy_free(q);
	/* an address or CIDR line is refused, naming its line (as OpenSandbox) */
	const char *bad = "ok.example\n# c\n192.0.2.0/24\n";
	assert_null(policy_with_log_skip(u, "log_skip.always", bad, strlen(bad), &err));
	assert_int_equal(err.line, 3);
	assert_string_equal(err.file, "log_skip.always");
	assert_non_null(strstr(err.msg, "not a domain pattern"));
	bad = "2001:db8::1\n";
	assert_null(policy_with_log_skip(u, "log_skip.always", bad, strlen(bad), &err));
	bad = "bad..example\n";
	assert_null(policy_with_log_skip(u, "log_skip.always", bad, strlen(bad), &err));
	/* the directory: a missing file is an empty list, a present one is read */
	q = policy_with_always_dir(u, "/nonexistent", &err);
	assert_non_null(q);
	assert_false(policy_log_skip(q, "noisy.example"));
	policy_free(q);
	char dir[] = "/tmp/policy_skipXXXXXX", path[64];
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/log_skip.always", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(skip, f);
	fclose(f);
	q = policy_with_always_dir(u, dir, &err);
	assert_non_null(q);
	assert_true(policy_log_skip(q, "noisy.example"));
	assert_int_equal(name_action(q, "a.example"), POLICY_ALLOW);
	policy_free(q);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("203.0.113.0/24\n", f);
	fclose(f);
	assert_null(policy_with_always_dir(u, dir, &err));
	assert_int_equal(err.line, 1);
	assert_string_equal(err.file, path);
	unlink(path);
	rmdir(dir);
	policy_free(p);
	policy_free(u);
}

static void
test_patch_and_delete(void **state)
{
	struct policy *base = load("{\"defaultAction\":\"allow\",\"egress\":["
	                           "{\"action\":\"allow\",\"target\":\"example.com\"},"
	                           "{\"action\":\"deny\",\"target\":\"*.example.com\"}]}");
	struct policy_err err;
	struct policy_limits lim;
	const char *patch = "[{\"action\":\"deny\",\"target\":\"blocked.com\"},"
	                    "{\"action\":\"allow\",\"target\":\"EXAMPLE.com\"},"
	                    "{\"action\":\"allow\",\"target\":\"blocked.com\"}]";
	struct policy *p = policy_patch_json(base, patch, strlen(patch), NULL, &err);

	assert_non_null(p);
	json_t *j = policy_to_json(p);
	char *s = json_dumps(j, JSON_COMPACT);
	assert_string_equal(s, "{\"egress\":[{\"action\":\"deny\",\"target\":\"blocked.com\"},"
	                       "{\"action\":\"allow\",\"target\":\"example.com\"},"
	                       "{\"action\":\"deny\",\"target\":\"*.example.com\"}],"
	                       "\"defaultAction\":\"allow\"}");
	free(s);
	json_decref(j);
	/* the patch overrides a same-target rule */
	const char *over = "[{\"action\":\"deny\",\"target\":\"example.com\"}]";
	struct policy *p2 = policy_patch_json(p, over, strlen(over), NULL, &err);
	assert_non_null(p2);
	assert_int_equal(name_action(p2, "example.com"), POLICY_DENY);
	assert_int_equal(policy_rule_count(p2, POLICY_ORIGIN_USER), 3);
	/* bodies */
	assert_null(policy_patch_json(p, "", 0, NULL, &err));
	assert_string_equal(err.msg, "empty body");
	assert_null(policy_patch_json(p, "[]", 2, NULL, &err));
	assert_string_equal(err.msg, "empty array");
	assert_null(policy_patch_json(p, "{}", 2, NULL, &err));
	const char *badact = "[{\"action\":\"x\",\"target\":\"a.com\"}]";
	assert_null(policy_patch_json(p, badact, strlen(badact), NULL, &err));
	assert_int_equal(err.code, POLICY_ERR_INVALID);
	/* the merged count is limited */
	policy_limits_default(&lim);
	lim.max_rules = 3;
	const char *one = "[{\"action\":\"deny\",\"target\":\"new.com\"}]";
	assert_null(policy_patch_json(p, one, strlen(one), &lim, &err));
	assert_int_equal(err.code, POLICY_ERR_TOO_LARGE);
	assert_non_null(strstr(err.msg, "egress rule total count 4 exceeds limit 3"));
	/* DELETE: canonical, case-insensitive, unknown targets ignored */
	size_t removed = 9;
	const char *del = "[\"BLOCKED.com.\",\"nonexistent.com\",\"not a target\"]";
	struct policy *p3 = policy_remove_json(p, del, strlen(del), &removed, &err);
	assert_non_null(p3);
	assert_int_equal(removed, 1);
	assert_int_equal(policy_rule_count(p3, POLICY_ORIGIN_USER), 2);
	assert_int_equal(policy_default_action(p3), POLICY_ALLOW);
	struct policy *p4 = policy_remove_json(p3, "[\"zzz.com\"]", 11, &removed, &err);
	assert_non_null(p4);
	assert_int_equal(removed, 0);
	assert_null(policy_remove_json(p3, "", 0, &removed, &err));
	assert_null(policy_remove_json(p3, "[]", 2, &removed, &err));
	assert_null(policy_remove_json(p3, "[1]", 3, &removed, &err));
	assert_null(policy_remove_json(p3, "[", 1, &removed, &err));
	assert_int_equal(err.code, POLICY_ERR_SYNTAX);
	/* CIDRs are compared canonically too */
	struct policy *c = load("{\"egress\":[{\"action\":\"deny\",\"target\":\"10.0.0.0/8\"}]}");
	const char *t[] = {"10.1.2.3/8"};
	struct policy *c2 = policy_remove_targets(c, t, 1, &removed, &err);
	assert_non_null(c2);
	assert_int_equal(removed, 1);
	policy_free(c2);
	policy_free(c);
	policy_free(p4);
	policy_free(p3);
	policy_free(p2);
	policy_free(p);
	policy_free(base);
}

struct count_arg {
	int addrs, names;
	enum policy_origin last_origin;
};

static int
count_addr_cb(const struct policy_rule_info *ri, void *arg)
{
	struct count_arg *c = arg;
	assert_non_null(ri->addr);
	assert_true(ri->kind == POLICY_TARGET_ADDR || ri->kind == POLICY_TARGET_CIDR);
	assert_true(ri->origin >= c->last_origin);
	c->last_origin = ri->origin;
	c->addrs++;
	return 0;
}

static int
count_name_cb(const struct policy_rule_info *ri, void *arg)
{
	struct count_arg *c = arg;
	assert_null(ri->addr);
	c->names++;
	return c->names == 2 ? 7 : 0; /* stop early */
}

static void
test_iteration_and_json(void **state)
{
	struct policy *u =
	    load("{\"egress\":["
	         "{\"action\":\"allow\",\"target\":\"a.com\",\"ports\":[443,\"1000-2000\"]},"
	         "{\"action\":\"deny\",\"target\":\"10.0.0.0/8\"},"
	         "{\"action\":\"allow\",\"target\":\"*.b.com\"},"
	         "{\"action\":\"allow\",\"target\":\"2001:db8::/48\"},"
	         "{\"action\":\"allow\",\"target\":\"c.com\"}]}");
	struct policy_err err;
	struct policy *p = policy_with_always(u, "d", "1.1.1.1\n", 8, "a", NULL, 0, &err);
	struct count_arg c = {0};

	assert_non_null(p);
	assert_int_equal(policy_foreach_addr(p, count_addr_cb, &c), 0);
	assert_int_equal(c.addrs, 3);
	assert_int_equal(policy_foreach_name(p, count_name_cb, &c), 7);
	assert_int_equal(c.names, 2);
	/* GET shape, ports round trip */
	json_t *j = policy_to_json(p);
	char *s = json_dumps(j, JSON_COMPACT);
	struct policy *back = policy_from_json(s, strlen(s), NULL, &err);
	assert_non_null(back);
	assert_non_null(strstr(s, "\"ports\":[443,\"1000-2000\"]"));
	json_t *j2 = policy_to_json(back);
	assert_true(json_equal(j, j2));
	free(s);
	json_decref(j);
	json_decref(j2);
	assert_string_equal(policy_mode(back), "enforcing");
	/* DNS defaults and refcounts */
	assert_int_equal(policy_dns(back)->ttl_min, POLICY_DNS_TTL_MIN_DEFAULT);
	assert_true(policy_dns(back)->filter_private);
	assert_ptr_equal(policy_ref(back), back);
	policy_free(back);
	policy_free(back);
	policy_free(NULL);
	assert_string_equal(policy_origin_str(POLICY_ORIGIN_DEFAULT), "default");
	assert_string_equal(policy_action_str(POLICY_ALLOW), "allow");
	policy_free(p);
	policy_free(u);
}

/* terminateAll: parsed from JSON and YAML, carried by derivations, shown when set. */
static void
test_terminate_all(void **state)
{
	static const char yml[] = "defaultAction: deny\nterminateAll: true\n";
	struct policy_err err;
	struct policy *p, *q;
	json_t *j;

	(void)state;
	p = load("{\"egress\":[{\"action\":\"allow\",\"target\":\"a.test\"}]}");
	assert_false(policy_terminate_all(p));
	j = policy_to_json(p);
	assert_null(json_object_get(j, "terminateAll"));
	json_decref(j);
	policy_free(p);

	p = load("{\"terminateAll\":true,\"egress\":[{\"action\":\"allow\",\"target\":\"a."
	         "test\"}]}");
	assert_true(policy_terminate_all(p));
	j = policy_to_json(p);
	assert_true(json_is_true(json_object_get(j, "terminateAll")));
	json_decref(j);
	/* PATCH keeps it. */
	q = policy_patch_json(p, "[{\"action\":\"allow\",\"target\":\"b.test\"}]", 38, NULL, &err);
	assert_non_null(q);
	assert_true(policy_terminate_all(q));
	policy_free(q);
	policy_free(p);

	assert_int_equal(load_err("{\"terminateAll\":\"yes\"}", &err), POLICY_ERR_INVALID);
	assert_int_equal(load_err("{\"terminateAll\":1}", &err), POLICY_ERR_INVALID);

	p = policy_from_yaml_buf("t.yaml", yml, strlen(yml), NULL, &err);
	assert_non_null(p);
	assert_true(policy_terminate_all(p));
	policy_free(p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_terminate_all),
	    cmocka_unit_test(test_json_empty_forms),
	    cmocka_unit_test(test_json_errors),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_first_match_and_wildcards),
	    cmocka_unit_test(test_ports),
	    cmocka_unit_test(test_addresses),
	    cmocka_unit_test(test_always),
	    cmocka_unit_test(test_log_skip),
	    cmocka_unit_test(test_patch_and_delete),
	    cmocka_unit_test(test_iteration_and_json),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
