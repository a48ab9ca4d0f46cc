/*
 * Unit tests of policy/name.c: the host name canonicaliser (the
 * canonicalisation attacks of the exfil catalogue: EX-024, EX-060,
 * EX-062, EX-063, EX-124) and the IP/CIDR literal parser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "policy/name.h"

struct name_case {
	const char *in;
	size_t len; /* 0 = strlen(in) */
	unsigned flags;
	enum policy_name_status want;
	const char *canon; /* when OK */
};

static const struct name_case name_cases[] = {
    /* case folding and one trailing dot (EX-060) */
    {"API.Allowed.TEST", 0, 0, POLICY_NAME_OK, "api.allowed.test"},
    {"api.allowed.test.", 0, 0, POLICY_NAME_OK, "api.allowed.test"},
    {"api.allowed.test..", 0, 0, POLICY_NAME_INVALID, NULL},
    {".", 0, 0, POLICY_NAME_INVALID, NULL},
    {"", 0, 0, POLICY_NAME_INVALID, NULL},
    {".api.allowed.test", 0, 0, POLICY_NAME_INVALID, NULL},
    {"api..allowed.test", 0, 0, POLICY_NAME_INVALID, NULL},
    /* embedded NUL given with an explicit length (EX-124) */
    {"evil\0.allowed.com", 17, 0, POLICY_NAME_INVALID, NULL},
    {"allowed.com\0", 12, 0, POLICY_NAME_INVALID, NULL},
    /* a suffix in the middle is just another name */
    {"allowed.com.evil.com", 0, 0, POLICY_NAME_OK, "allowed.com.evil.com"},
    /* brackets, ports, userinfo, schemes, paths, spaces */
    {"[allowed.com]", 0, 0, POLICY_NAME_INVALID, NULL},
    {"[::1]", 0, 0, POLICY_NAME_INVALID, NULL},
    {"allowed.com:443", 0, 0, POLICY_NAME_INVALID, NULL},
    {"user@allowed.com", 0, 0, POLICY_NAME_INVALID, NULL},
    {"https://allowed.com", 0, 0, POLICY_NAME_INVALID, NULL},
    {"allowed.com/x", 0, 0, POLICY_NAME_INVALID, NULL},
    {"allowed.com#x", 0, 0, POLICY_NAME_INVALID, NULL},
    {"allowed .com", 0, 0, POLICY_NAME_INVALID, NULL},
    {"under_score.com", 0, 0, POLICY_NAME_INVALID, NULL},
    /* hyphens: not at a label edge */
    {"-a.com", 0, 0, POLICY_NAME_INVALID, NULL},
    {"a-.com", 0, 0, POLICY_NAME_INVALID, NULL},
    {"a-b.com", 0, 0, POLICY_NAME_OK, "a-b.com"},
    /* IDN only as punycode A-labels (EX-063) */
    {"xn--bcher-kva.allowed.test", 0, 0, POLICY_NAME_OK, "xn--bcher-kva.allowed.test"},
    {"XN--BCHER-KVA.allowed.test", 0, 0, POLICY_NAME_OK, "xn--bcher-kva.allowed.test"},
    {"b\xc3\xbc"
     "cher.allowed.test",
        0, 0, POLICY_NAME_INVALID, NULL},
    {"\xd0\xb0pi.allowed.test", 0, 0, POLICY_NAME_INVALID, NULL},
    /* numeric spellings of addresses (EX-024) */
    {"2852039166", 0, 0, POLICY_NAME_INVALID, NULL},
    {"0xa9fea9fe", 0, 0, POLICY_NAME_INVALID, NULL},
    {"169.254.43518", 0, 0, POLICY_NAME_INVALID, NULL},
    {"169.254.169.254.", 0, 0, POLICY_NAME_INVALID, NULL},
    {"0251.0376.0251.0376", 0, 0, POLICY_NAME_INVALID, NULL},
    {"1.2.3.4", 0, 0, POLICY_NAME_INVALID, NULL},
    {"0x.com", 0, 0, POLICY_NAME_OK, "0x.com"},
    {"123.example", 0, 0, POLICY_NAME_OK, "123.example"},
    /* wildcards (EX-062) */
    {"*.example.com", 0, 0, POLICY_NAME_INVALID, NULL},
    {"*.Example.COM.", 0, POLICY_NAME_WILDCARD, POLICY_NAME_OK, "*.example.com"},
    {"*.", 0, POLICY_NAME_WILDCARD, POLICY_NAME_INVALID, NULL},
    {"*", 0, POLICY_NAME_WILDCARD, POLICY_NAME_INVALID, NULL},
    {"*.*.example.com", 0, POLICY_NAME_WILDCARD, POLICY_NAME_INVALID, NULL},
    {"a.*.example.com", 0, POLICY_NAME_WILDCARD, POLICY_NAME_INVALID, NULL},
    {"*example.com", 0, POLICY_NAME_WILDCARD, POLICY_NAME_INVALID, NULL},
    {"**.example.com", 0, POLICY_NAME_WILDCARD, POLICY_NAME_INVALID, NULL},
    {"*..example.com", 0, POLICY_NAME_WILDCARD, POLICY_NAME_INVALID, NULL},
    {"*.com", 0, POLICY_NAME_WILDCARD, POLICY_NAME_OK, "*.com"},
    {"*.com", 0, POLICY_NAME_WILDCARD | POLICY_NAME_REQUIRE_DOT, POLICY_NAME_INVALID, NULL},
    {"*.localhost", 0, POLICY_NAME_WILDCARD | POLICY_NAME_REQUIRE_DOT, POLICY_NAME_INVALID, NULL},
    {"localhost", 0, POLICY_NAME_REQUIRE_DOT, POLICY_NAME_INVALID, NULL},
    {"localhost", 0, 0, POLICY_NAME_OK, "localhost"},
};

static void
test_name_table(void **state)
{
	for (size_t i = 0; i < sizeof(name_cases) / sizeof(name_cases[0]); i++) {
		const struct name_case *c = &name_cases[i];
		char out[POLICY_NAME_MAX + 1];
		size_t olen = 99;
		size_t len = c->len ? c->len : strlen(c->in);
		enum policy_name_status st =
		    policy_name_canon((const uint8_t *)c->in, len, c->flags, out, &olen);
		if (st != c->want)
			print_error("case %zu \"%s\": status %d want %d\n", i, c->in, st, c->want);
		assert_int_equal(st, c->want);
		if (c->want == POLICY_NAME_OK) {
			assert_string_equal(out, c->canon);
			assert_int_equal(olen, strlen(c->canon));
		} else {
			assert_int_equal(olen, 0);
		}
	}
}

static void
test_name_lengths(void **state)
{
	char in[400], out[POLICY_NAME_MAX + 1];
	size_t olen;

	/* a 63-byte label is fine, 64 is not */
	memset(in, 'a', 63);
	memcpy(in + 63, ".com", 4);
	assert_int_equal(policy_name_canon((uint8_t *)in, 67, 0, out, &olen), POLICY_NAME_OK);
	memset(in, 'a', 64);
	memcpy(in + 64, ".com", 4);
	assert_int_equal(policy_name_canon((uint8_t *)in, 68, 0, out, &olen), POLICY_NAME_INVALID);
	/* 253 bytes are fine (plus a trailing dot), 254 are too large */
	for (size_t i = 0; i < 253; i++)
		in[i] = (i % 2) ? '.' : 'a';
	in[252] = 'b';
	assert_int_equal(policy_name_canon((uint8_t *)in, 253, 0, out, &olen), POLICY_NAME_OK);
	assert_int_equal(olen, 253);
	in[253] = '.';
	assert_int_equal(policy_name_canon((uint8_t *)in, 254, 0, out, &olen), POLICY_NAME_OK);
	in[253] = 'c';
	assert_int_equal(
	    policy_name_canon((uint8_t *)in, 254, 0, out, &olen), POLICY_NAME_TOO_LARGE);
	assert_int_equal(policy_name_canon(NULL, 0, 0, out, &olen), POLICY_NAME_INVALID);
}

struct addr_case {
	const char *in;
	bool prefix;
	enum policy_name_status want;
	int family;
	const char *text; /* policy_addr_format output */
};

static const struct addr_case addr_cases[] = {
    {"1.2.3.4", false, POLICY_NAME_OK, AF_INET, "1.2.3.4"},
    {"255.255.255.255", false, POLICY_NAME_OK, AF_INET, "255.255.255.255"},
    {"256.1.1.1", false, POLICY_NAME_INVALID, 0, NULL},
    {"01.2.3.4", false, POLICY_NAME_INVALID, 0, NULL},
    {"0251.0376.0251.0376", false, POLICY_NAME_INVALID, 0, NULL},
    {"2852039166", false, POLICY_NAME_INVALID, 0, NULL},
    {"0xa9fea9fe", false, POLICY_NAME_INVALID, 0, NULL},
    {"169.254.43518", false, POLICY_NAME_INVALID, 0, NULL},
    {"1.2.3", false, POLICY_NAME_INVALID, 0, NULL},
    {"1.2.3.4.", false, POLICY_NAME_INVALID, 0, NULL},
    {" 1.2.3.4", false, POLICY_NAME_INVALID, 0, NULL},
    {"1.2.3.4/8", false, POLICY_NAME_INVALID, 0, NULL},
    {"10.1.2.3/8", true, POLICY_NAME_OK, AF_INET, "10.0.0.0/8"},
    {"10.0.0.0/33", true, POLICY_NAME_INVALID, 0, NULL},
    {"10.0.0.0/", true, POLICY_NAME_INVALID, 0, NULL},
    {"10.0.0.0/08", true, POLICY_NAME_INVALID, 0, NULL},
    {"0.0.0.0/0", true, POLICY_NAME_OK, AF_INET, "0.0.0.0/0"},
    {"2001:DB8::1", false, POLICY_NAME_OK, AF_INET6, "2001:db8::1"},
    {"2001:db8::1/32", true, POLICY_NAME_OK, AF_INET6, "2001:db8::/32"},
    {"fe80::1%eth0", false, POLICY_NAME_INVALID, 0, NULL},
    {"[::1]", false, POLICY_NAME_INVALID, 0, NULL},
    {"::1/129", true, POLICY_NAME_INVALID, 0, NULL},
    /* IPv4-mapped IPv6 is the IPv4 address (EX-024) */
    {"::ffff:169.254.169.254", false, POLICY_NAME_OK, AF_INET, "169.254.169.254"},
    {"0:0:0:0:0:ffff:a9fe:a9fe", false, POLICY_NAME_OK, AF_INET, "169.254.169.254"},
    {"::ffff:10.0.0.0/104", true, POLICY_NAME_OK, AF_INET, "10.0.0.0/8"},
    {"::ffff:0:0/95", true, POLICY_NAME_OK, AF_INET6, "::fffe:0:0/95"},
    {"64:ff9b::a9fe:a9fe", false, POLICY_NAME_OK, AF_INET6, "64:ff9b::a9fe:a9fe"},
    {"example.com", false, POLICY_NAME_INVALID, 0, NULL},
};

static void
test_addr_table(void **state)
{
	for (size_t i = 0; i < sizeof(addr_cases) / sizeof(addr_cases[0]); i++) {
		const struct addr_case *c = &addr_cases[i];
		struct policy_addr a;
		char buf[POLICY_ADDR_TEXT_MAX];
		enum policy_name_status st =
		    policy_addr_parse((const uint8_t *)c->in, strlen(c->in), c->prefix, &a);
		if (st != c->want)
			print_error("case %zu \"%s\": status %d want %d\n", i, c->in, st, c->want);
		assert_int_equal(st, c->want);
		if (st != POLICY_NAME_OK)
			continue;
		assert_int_equal(a.family, c->family);
		policy_addr_format(&a, buf, sizeof(buf));
		assert_string_equal(buf, c->text);
	}
}

static void
test_addr_bytes_and_contain(void **state)
{
	uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3};
	struct policy_addr a, net;

	policy_addr_from_bytes(AF_INET6, mapped, &a);
	assert_int_equal(a.family, AF_INET);
	assert_int_equal(a.prefix, 32);
	assert_int_equal(a.bytes[0], 10);
	assert_int_equal(
	    policy_addr_parse((const uint8_t *)"10.0.0.0/8", 10, true, &net), POLICY_NAME_OK);
	assert_true(policy_addr_in(&net, &a));
	assert_int_equal(
	    policy_addr_parse((const uint8_t *)"10.1.2.0/23", 11, true, &net), POLICY_NAME_OK);
	assert_true(policy_addr_in(&net, &a));
	assert_int_equal(
	    policy_addr_parse((const uint8_t *)"10.1.4.0/23", 11, true, &net), POLICY_NAME_OK);
	assert_false(policy_addr_in(&net, &a));
	assert_int_equal(policy_addr_parse((const uint8_t *)"::/0", 4, true, &net), POLICY_NAME_OK);
	assert_false(policy_addr_in(&net, &a)); /* families never mix */
	/* an over-long literal is reported as too large, not read past */
	char big[100];
	memset(big, '1', sizeof(big));
	assert_int_equal(
	    policy_addr_parse((uint8_t *)big, sizeof(big), true, &a), POLICY_NAME_TOO_LARGE);
	assert_int_equal(
	    policy_addr_parse((const uint8_t *)"1.2\0.3.4", 8, false, &a), POLICY_NAME_INVALID);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_name_table),
	    cmocka_unit_test(test_name_lengths),
	    cmocka_unit_test(test_addr_table),
	    cmocka_unit_test(test_addr_bytes_and_contain),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
