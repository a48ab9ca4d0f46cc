/*
 * Unit tests of policy/cli.c on the fixtures: `check` exit codes and
 * file:line:col messages, `check -v` round trip, `explain` output for
 * names, addresses and requests, `test` counts and exit codes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "policy/cli.h"
#include "policy/policy.h"

#define OUT_MAX (256 * 1024)

static char out_buf[OUT_MAX], err_buf[OUT_MAX];

static void
slurp_fd(int fd, char *buf)
{
	ssize_t n;
	size_t o = 0;

	lseek(fd, 0, SEEK_SET);
	while (o + 1 < OUT_MAX && (n = read(fd, buf + o, OUT_MAX - 1 - o)) > 0)
		o += (size_t)n;
	buf[o] = '\0';
}

/* Run policycli_main with stdout and stderr captured into out_buf/err_buf. */
static int
run(int argc, char **argv)
{
	char tout[] = "/tmp/policy_cli_outXXXXXX", terr[] = "/tmp/policy_cli_errXXXXXX";
	int fo = mkstemp(tout), fe = mkstemp(terr);
	int so = dup(1), se = dup(2), rc;

	assert_true(fo >= 0 && fe >= 0);
	fflush(stdout);
	fflush(stderr);
	dup2(fo, 1);
	dup2(fe, 2);
	rc = policycli_main(argc, argv);
	fflush(stdout);
	fflush(stderr);
	dup2(so, 1);
	dup2(se, 2);
	close(so);
	close(se);
	slurp_fd(fo, out_buf);
	slurp_fd(fe, err_buf);
	close(fo);
	close(fe);
	unlink(tout);
	unlink(terr);
	return rc;
}

static char *
data(const char *rel)
{
	static char bufs[8][1024];
	static int k;
	const char *d = getenv("EGRESSD_TEST_DATA");
	char *b = bufs[k++ % 8];
	snprintf(b, 1024, "%s/%s", d ? d : "tests/data", rel);
	return b;
}

static void
test_check(void **state)
{
	char *ok[] = {"check", data("policy/valid/full.yaml"), data("policy/valid/minimal.yaml"),
	    data("policy/opensandbox.json")};
	assert_int_equal(run(4, ok), 0);
	assert_non_null(strstr(out_buf, "full.yaml: ok (8 rules, 2 bindings)"));
	assert_non_null(strstr(out_buf, "opensandbox.json: ok (3 rules"));
	/* every allowBroad binding is warned about, the exact ones are not */
	assert_non_null(
	    strstr(err_buf, "full.yaml: warning: bindings[1] (services) sets allowBroad"));
	assert_null(strstr(err_buf, "bindings[0] (api) sets allowBroad"));

	char *bad[] = {"check", data("policy/valid/minimal.yaml"),
	    data("policy/invalid/rule-target-port.yaml"),
	    data("policy/invalid/binding-not-covered.yaml")};
	assert_int_equal(run(4, bad), 1);
	assert_non_null(
	    strstr(err_buf, "rule-target-port.yaml:5:13: egress[0].target: not a valid"));
	assert_non_null(
	    strstr(err_buf, "binding-not-covered.yaml:10:38: bindings[0].match.hosts[1]: "
	                    "host is not covered"));
	assert_null(strstr(err_buf, "other.example.com")); /* the field, never its text */
	/* a secret written in a file is refused and never echoed */
	char *inl[] = {"check", data("policy/invalid/cred-inline-value.yaml")};
	assert_int_equal(run(2, inl), 1);
	assert_null(strstr(err_buf, "hunter2"));
	assert_null(strstr(out_buf, "hunter2"));
	char *none[] = {"check"};
	assert_int_equal(run(1, none), 2);
	char *missing[] = {"check", "/nonexistent.yaml"};
	assert_int_equal(run(2, missing), 1);
	assert_non_null(strstr(err_buf, "/nonexistent.yaml:0:0: cannot read"));
	char *unknown[] = {"frobnicate"};
	assert_int_equal(run(1, unknown), 2);
}

static void
test_check_verbose_round_trip(void **state)
{
	char *v[] = {"check", "-v", data("policy/valid/full.yaml")};
	struct policy_err err;

	assert_int_equal(run(3, v), 0);
	assert_non_null(strstr(out_buf, "\"target\": \"api.example.com\""));
	assert_non_null(strstr(out_buf, "\"path\": \"/run/secrets/registry-key\""));
	/* the normalised output is itself a valid policy file */
	struct policy *p = policy_from_yaml_buf("normalised", out_buf, strlen(out_buf), NULL, &err);
	if (p == NULL)
		print_error("%u:%u %s %s\n", err.line, err.col, err.key, err.msg);
	assert_non_null(p);
	assert_int_equal(policy_rule_count(p, POLICY_ORIGIN_USER), 8);
	policy_free(p);
}

static void
test_shadow_warning(void **state)
{
	char path[] = "/tmp/policy_cli_shadowXXXXXX.yaml";
	int fd = mkstemps(path, 5);
	const char *y = "egress:\n  - {action: deny, target: 10.0.0.0/8}\n"
	                "  - {action: allow, target: 10.1.0.0/16}\n"
	                "  - {action: allow, target: 11.0.0.0/8}\n";
	assert_true(fd >= 0);
	assert_int_equal(write(fd, y, strlen(y)), (ssize_t)strlen(y));
	close(fd);
	char *a[] = {"check", path};
	assert_int_equal(run(2, a), 0);
	assert_non_null(strstr(err_buf, "warning: egress[1] allow 10.1.0.0/16 is shadowed by "
	                                "egress[0] deny 10.0.0.0/8"));
	assert_null(strstr(err_buf, "11.0.0.0"));
	unlink(path);
}

static void
test_explain(void **state)
{
	char *a[] = {"explain", data("policy/valid/full.yaml"), "X.Internal.Example.com.",
	    "203.0.113.9:22", "[2001:db8::1]:80", "GET https://api.example.com/v1/users?x=1",
	    "nothing.test"};
	assert_int_equal(run(7, a), 0);
	assert_non_null(strstr(out_buf, "name x.internal.example.com: deny\n"
	                                "  rule: user egress[1] deny *.internal.example.com\n"));
	assert_non_null(strstr(out_buf, "address 203.0.113.9 port 22: allow\n"
	                                "  rule: user egress[5] allow 203.0.113.0/24\n"));
	assert_non_null(strstr(out_buf, "address 2001:db8::1 port 80: deny\n"
	                                "  rule: none (defaultAction deny)\n"));
	assert_non_null(
	    strstr(out_buf, "  why: an allow rule covers the address but not this port"));
	assert_non_null(strstr(out_buf, "request api.example.com port 443: allow\n"
	                                "  rule: user egress[0] allow api.example.com ports "
	                                "443,8000-8100,8443\n"));
	assert_non_null(
	    strstr(out_buf, "  binding: api (bearer)\n"
	                    "  inject: Authorization: Bearer <credential api-token>\n"));
	assert_non_null(
	    strstr(out_buf, "name nothing.test: deny\n  rule: none (defaultAction deny)"));
	/* unreadable queries */
	char *b[] = {"explain", data("policy/valid/full.yaml"), "evil\x01.com", "ftp://x.com/",
	    "GET ftp://x.com/", "1.2.3.4:99999", "[::1"};
	assert_int_equal(run(7, b), 2);
	assert_non_null(strstr(err_buf, "\"evil?.com\": not a valid DNS name"));
	assert_non_null(strstr(err_buf, "bad ip:port"));
	assert_non_null(strstr(err_buf, "bad [v6]:port"));
	char *c[] = {"explain", data("policy/valid/full.yaml")};
	assert_int_equal(run(2, c), 2);
	char *d[] = {"explain", data("policy/invalid/dns-ttl-order.yaml"), "a.com"};
	assert_int_equal(run(3, d), 1);
}

/*
 * explain --conn-reject: for a logged conn_reject line, the table rule it
 * names, its reason and the policy rule behind it; for a bare 5-tuple the
 * rule is derived from the policy (deny rule, default TCP or other, DoT,
 * or none when an IP rule allows it); unreadable refusals are refused.
 */
static void
test_explain_conn_reject(void **state)
{
	char *a[] = {"explain", data("policy/valid/full.yaml"), "--conn-reject",
	    "{\"event\":\"conn_reject\",\"rule\":\"deny\",\"reason\":\"address_denied\","
	    "\"family\":\"ipv4\",\"proto\":\"tcp\",\"src\":\"10.200.0.2\",\"sport\":39476,"
	    "\"dst\":\"198.51.100.7\",\"dport\":443}",
	    "--conn-reject", "tcp 10.0.0.2 -> 192.0.2.1:22", "--conn-reject",
	    "udp [2001:db8::1]:9999", "--conn-reject", "icmp 192.0.2.1", "--conn-reject",
	    "tcp 203.0.113.9:443", "--conn-reject", "tcp 192.0.2.1:853"};
	assert_int_equal(run(14, a), 0);
	assert_non_null(
	    strstr(out_buf, "refusal tcp 10.200.0.2 port 39476 -> 198.51.100.7 port 443\n"
	                    "  table rule: deny (ip[6] daddr @deny4/@deny6 reject)\n"
	                    "  reason: address_denied\n"));
	assert_non_null(strstr(out_buf, "  policy: user egress[7] deny 198.51.100.7\n"));
	assert_non_null(strstr(out_buf, "refusal tcp 10.0.0.2 -> 192.0.2.1 port 22\n"
	                                "  table rule: default_tcp (derived from the policy)"));
	assert_non_null(strstr(out_buf, "  reason: not_allowed\n"));
	/* 2001:db8::/32 is allowed on 443 only: UDP 9999 falls to the last rule. */
	assert_non_null(strstr(out_buf, "refusal udp (sandbox) -> 2001:db8::1 port 9999\n"
	                                "  table rule: default (derived from the policy)"));
	assert_non_null(strstr(out_buf, "  reason: udp_not_allowed\n"));
	assert_non_null(strstr(out_buf, "  reason: protocol_not_allowed\n"));
	assert_non_null(strstr(out_buf, "refusal tcp (sandbox) -> 203.0.113.9 port 443\n"
	                                "  table rule: none: the policy allows"));
	assert_non_null(strstr(out_buf, "  table rule: dot (derived from the policy)"));

	char *b[] = {"explain", data("policy/valid/full.yaml"), "--conn-reject", "tcp host.test:22",
	    "--conn-reject", "{\"event\":\"dns_deny\",\"dst\":\"192.0.2.1\"}", "--conn-reject",
	    "bogus 192.0.2.1", "--conn-reject", "{not json", "--conn-reject", "tcp 192.0.2.1:0",
	    "--conn-reject"};
	assert_int_equal(run(13, b), 2);
	assert_non_null(strstr(err_buf, "the destination is not an IP address"));
	assert_non_null(strstr(err_buf, "not a conn_reject line"));
	assert_non_null(strstr(err_buf, "unknown protocol"));
	assert_non_null(strstr(err_buf, "not a JSON log line"));
	assert_non_null(strstr(err_buf, "bad port"));
	assert_non_null(strstr(err_buf, "--conn-reject needs a refusal"));
	/* A rule the table does not have is said so, never guessed. */
	char *c[] = {"explain", data("policy/valid/full.yaml"), "--conn-reject",
	    "{\"event\":\"conn_reject\",\"rule\":\"nosuch\",\"dst\":\"192.0.2.1\"}"};
	assert_int_equal(run(4, c), 0);
	assert_non_null(strstr(out_buf, "  table rule: nosuch (not a rule of egressd's table)"));
}

static void
test_always_dir(void **state)
{
	char dir[] = "/tmp/policy_cli_rulesXXXXXX", path[256];
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/deny.always", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("# operator\napi.example.com\n", f);
	fclose(f);
	char *a[] = {"explain", "-a", dir, data("policy/valid/full.yaml"), "api.example.com"};
	assert_int_equal(run(5, a), 0);
	assert_non_null(strstr(out_buf, "name api.example.com: deny\n"
	                                "  rule: deny.always[0] deny api.example.com\n"));
	/* the cases that expect api.example.com to be allowed now fail */
	char *b[] = {
	    "test", "-a", dir, data("policy/valid/full.yaml"), data("policy/cases-full.yaml")};
	assert_int_equal(run(5, b), 1);
	assert_non_null(strstr(out_buf, "FAIL api.example.com: expected allow, got deny"));
	/* a bad overlay line names its file and line */
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("ok.example\nbad..example\n", f);
	fclose(f);
	assert_int_equal(run(5, a), 1);
	assert_non_null(
	    strstr(err_buf, "deny.always:2:1: \"bad..example\": not a valid host name"));
	unlink(path);
	rmdir(dir);
}

static void
test_test_command(void **state)
{
	char *a[] = {"test", data("policy/valid/full.yaml"), data("policy/cases-full.yaml")};
	assert_int_equal(run(3, a), 0);
	assert_non_null(strstr(out_buf, "15 passed, 0 failed\n"));
	assert_non_null(
	    strstr(out_buf, "PASS GET https://api.example.com/v1/users: allow, binding api"));

	char *b[] = {"test", data("policy/valid/full.yaml"), data("policy/cases-failing.yaml")};
	assert_int_equal(run(3, b), 1);
	assert_non_null(strstr(out_buf, "1 passed, 2 failed\n"));
	assert_non_null(strstr(out_buf, "FAIL wrong action: expected allow, got deny"));
	assert_non_null(strstr(out_buf, "FAIL wrong binding: expected allow, binding services, got "
	                                "allow, binding api"));

	/* the examples ship with their own expectations */
	char ex[1024], cs[1024];
	snprintf(ex, sizeof(ex), "%s/../../examples/github-agent.yaml", data(""));
	snprintf(cs, sizeof(cs), "%s/../../examples/github-agent.cases.yaml", data(""));
	char *c[] = {"test", ex, cs};
	assert_int_equal(run(3, c), 0);
	assert_non_null(strstr(out_buf, " 0 failed\n"));

	/* a malformed cases file names the place */
	char path[] = "/tmp/policy_cli_casesXXXXXX.yaml";
	int fd = mkstemps(path, 5);
	const char *y = "cases:\n  - query: a.com\n    expect: maybe\n";
	assert_true(fd >= 0);
	assert_int_equal(write(fd, y, strlen(y)), (ssize_t)strlen(y));
	close(fd);
	char *d[] = {"test", data("policy/valid/full.yaml"), path};
	assert_int_equal(run(3, d), 2);
	assert_non_null(strstr(err_buf, ":3:13: cases[0].expect: expect must be allow or deny"));
	unlink(path);
	char *e[] = {"test", data("policy/valid/full.yaml")};
	assert_int_equal(run(2, e), 2);
	char *f[] = {"test", data("policy/valid/full.yaml"), data("policy/valid/minimal.yaml")};
	assert_int_equal(run(3, f), 2);
	assert_non_null(strstr(err_buf, "(top level): unknown key"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_check),
	    cmocka_unit_test(test_check_verbose_round_trip),
	    cmocka_unit_test(test_shadow_warning),
	    cmocka_unit_test(test_explain),
	    cmocka_unit_test(test_explain_conn_reject),
	    cmocka_unit_test(test_always_dir),
	    cmocka_unit_test(test_test_command),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
