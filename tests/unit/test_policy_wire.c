/*
 * Unit tests of policy/policy_wire.c: the effective policy as the parent
 * receives it from a child. A round trip keeps every decision and encodes
 * to the same bytes; a document the encoder could not have written is
 * refused.
 */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "policy/policy.h"

static const char yaml[] =
    "version: 1\n"
    "defaultAction: deny\n"
    "terminateAll: true\n"
    "dns: {ttlMin: 30, ttlMax: 900, filterPrivate: false}\n"
    "egress:\n"
    "  - {action: allow, target: api.example.com, ports: [443, \"8000-8080\"]}\n"
    "  - {action: allow, target: \"*.example.org\"}\n"
    "  - {action: deny, target: 198.51.100.0/24}\n"
    "  - {action: allow, target: 2001:db8::/32, ports: [22]}\n";
static const char deny_always[] = "203.0.113.7\nbad.example.com\n";
static const char allow_always[] = "192.0.2.0/25\n";
static const char log_skip[] = "noisy.example.com\n*.cdn.example.org\n";

static struct policy *
sample(void)
{
	struct policy_err err;
	struct policy *u, *p;

	u = policy_from_yaml_buf("t.yaml", yaml, strlen(yaml), NULL, &err);
	assert_non_null(u);
	p = policy_with_always(u, "deny", deny_always, strlen(deny_always), "allow", allow_always,
	    strlen(allow_always), &err);
	assert_non_null(p);
	policy_free(u);
	u = policy_with_log_skip(p, "skip", log_skip, strlen(log_skip), &err);
	assert_non_null(u);
	policy_free(p);
	return u;
}

static void
same_name(const struct policy *a, const struct policy *b, const char *name)
{
	struct policy_decision x, y;

	policy_decide_name(a, name, &x);
	policy_decide_name(b, name, &y);
	assert_int_equal(x.action, y.action);
	assert_int_equal(x.origin, y.origin);
	assert_int_equal(x.nports, y.nports);
	for (size_t i = 0; i < x.nports; i++) {
		assert_int_equal(x.ports[i].lo, y.ports[i].lo);
		assert_int_equal(x.ports[i].hi, y.ports[i].hi);
	}
}

static void
same_addr(const struct policy *a, const struct policy *b, const char *text, uint16_t port)
{
	struct policy_decision x, y;
	uint8_t ad[16];
	int fam = strchr(text, ':') ? AF_INET6 : AF_INET;

	assert_int_equal(inet_pton(fam, text, ad), 1);
	policy_decide_addr(a, fam, ad, port, IPPROTO_TCP, &x);
	policy_decide_addr(b, fam, ad, port, IPPROTO_TCP, &y);
	assert_int_equal(x.action, y.action);
	assert_int_equal(x.origin, y.origin);
}

static void
test_round_trip(void **state)
{
	struct policy *p = sample(), *q;
	struct policy_err err;
	char *w1, *w2;
	size_t n1, n2;

	w1 = policy_wire_encode(p, &n1);
	assert_non_null(w1);
	q = policy_wire_decode(w1, n1, &err);
	assert_non_null(q);
	w2 = policy_wire_encode(q, &n2);
	assert_non_null(w2);
	assert_int_equal(n1, n2);
	assert_memory_equal(w1, w2, n1);

	assert_int_equal(policy_default_action(q), POLICY_DENY);
	assert_true(policy_terminate_all(q));
	assert_int_equal(policy_dns(q)->ttl_min, 30);
	assert_int_equal(policy_dns(q)->ttl_max, 900);
	assert_false(policy_dns(q)->filter_private);
	for (int o = 0; o < 3; o++)
		assert_int_equal(policy_rule_count(p, o), policy_rule_count(q, o));
	same_name(p, q, "api.example.com");
	same_name(p, q, "a.b.example.org");
	same_name(p, q, "example.org");
	same_name(p, q, "bad.example.com");
	same_name(p, q, "other.test");
	same_addr(p, q, "198.51.100.9", 443);
	same_addr(p, q, "203.0.113.7", 443);
	same_addr(p, q, "192.0.2.9", 80);
	same_addr(p, q, "2001:db8::1", 22);
	same_addr(p, q, "2001:db8::1", 23);
	assert_true(policy_log_skip(q, "noisy.example.com"));
	assert_true(policy_log_skip(q, "a.cdn.example.org"));
	assert_false(policy_log_skip(q, "cdn.example.org"));
	assert_false(policy_log_skip(q, "api.example.com"));
	free(w1);
	free(w2);
	policy_free(p);
	policy_free(q);
}

static void
test_deny_all(void **state)
{
	struct policy *p = policy_new_deny_all(), *q;
	struct policy_err err;
	size_t n;
	char *w = policy_wire_encode(p, &n);

	assert_non_null(w);
	q = policy_wire_decode(w, n, &err);
	assert_non_null(q);
	assert_int_equal(policy_default_action(q), POLICY_DENY);
	assert_int_equal(policy_rule_count(q, POLICY_ORIGIN_USER), 0);
	free(w);
	policy_free(p);
	policy_free(q);
}

/* Decode must refuse doc; err names why. */
static void
refused(const char *doc)
{
	struct policy_err err;
	struct policy *q = policy_wire_decode(doc, strlen(doc), &err);

	if (q != NULL)
		fail_msg("accepted: %s", doc);
	assert_int_not_equal(err.code, POLICY_ERR_NONE);
	assert_true(err.msg[0] != '\0');
}

#define DNS "\"dns\":{\"ttlMin\":60,\"ttlMax\":360,\"filterPrivate\":true}"
#define HEAD "{\"v\":1,\"defaultAction\":\"deny\",\"terminateAll\":false," DNS

static void
test_refusals(void **state)
{
	struct policy_err err;
	const char *ok = HEAD ",\"denyAlways\":[],\"allowAlways\":[],\"egress\":[],\"logSkip\":[]}";
	struct policy *q = policy_wire_decode(ok, strlen(ok), &err);

	assert_non_null(q);
	policy_free(q);
	refused("");
	refused("[]");
	refused("{\"v\":2,\"defaultAction\":\"deny\",\"terminateAll\":false," DNS
	        ",\"denyAlways\":[],\"allowAlways\":[],\"egress\":[],\"logSkip\":[]}");
	refused(HEAD ",\"denyAlways\":[],\"allowAlways\":[]}");
	refused(
	    HEAD ",\"denyAlways\":[],\"allowAlways\":[],\"egress\":[],\"logSkip\":[],\"extra\":1}");
	refused("{\"v\":1,\"defaultAction\":\"maybe\",\"terminateAll\":false," DNS
	        ",\"denyAlways\":[],\"allowAlways\":[],\"egress\":[],\"logSkip\":[]}");
	refused("{\"v\":1,\"defaultAction\":\"deny\",\"terminateAll\":false,"
	        "\"dns\":{\"ttlMin\":0,\"ttlMax\":360,\"filterPrivate\":true}"
	        ",\"denyAlways\":[],\"allowAlways\":[],\"egress\":[],\"logSkip\":[]}");
	refused("{\"v\":1,\"defaultAction\":\"deny\",\"terminateAll\":false,"
	        "\"dns\":{\"ttlMin\":600,\"ttlMax\":360,\"filterPrivate\":true}"
	        ",\"denyAlways\":[],\"allowAlways\":[],\"egress\":[],\"logSkip\":[]}");
	/* An allow rule smuggled into the deny-always list. */
	refused(HEAD ",\"denyAlways\":[{\"action\":\"allow\",\"target\":\"0.0.0.0/0\"}],"
	             "\"allowAlways\":[],\"egress\":[],\"logSkip\":[]}");
	refused(HEAD
	    ",\"denyAlways\":[],\"allowAlways\":[],"
	    "\"egress\":[{\"action\":\"allow\",\"target\":\"bad_name.example\"}],\"logSkip\":[]}");
	refused(HEAD ",\"denyAlways\":[],\"allowAlways\":[],"
	             "\"egress\":[{\"action\":\"allow\",\"target\":\"a.example\",\"ports\":[0]}],"
	             "\"logSkip\":[]}");
	/* logSkip: missing, not an array, an address, two lines in one string. */
	refused(HEAD ",\"denyAlways\":[],\"allowAlways\":[],\"egress\":[]}");
	refused(HEAD ",\"denyAlways\":[],\"allowAlways\":[],\"egress\":[],\"logSkip\":{}}");
	refused(HEAD
	    ",\"denyAlways\":[],\"allowAlways\":[],\"egress\":[],\"logSkip\":[\"192.0.2.1\"]}");
	refused(HEAD ",\"denyAlways\":[],\"allowAlways\":[],\"egress\":[],"
	             "\"logSkip\":[\"a.example\\nb.example\"]}");
	refused(HEAD ",\"denyAlways\":[],\"allowAlways\":[],\"egress\":[],\"logSkip\":[1]}");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_deny_all),
	    cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
