/*
 * Unit tests of policy/addrclass.c: the one classifier of inner addresses,
 * embedded IPv4 spellings in IPv6, and the kernel deny prefixes built
 * from the same table.
 */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "policy/addrclass.h"

static enum addrclass
cls(const char *text)
{
	uint8_t a[16];
	int fam = strchr(text, ':') != NULL ? AF_INET6 : AF_INET;

	assert_int_equal(inet_pton(fam, text, a), 1);
	return addrclass_of(fam, a, NULL);
}

static void
test_ipv4(void **state)
{
	assert_int_equal(cls("169.254.169.254"), ADDRCLASS_INNER);
	assert_int_equal(cls("169.254.1.1"), ADDRCLASS_INNER);
	assert_int_equal(cls("100.100.100.200"), ADDRCLASS_INNER);
	assert_int_equal(cls("168.63.129.16"), ADDRCLASS_INNER);
	assert_int_equal(cls("192.0.0.192"), ADDRCLASS_INNER);
	assert_int_equal(cls("224.0.0.1"), ADDRCLASS_INNER);
	assert_int_equal(cls("255.255.255.255"), ADDRCLASS_INNER);
	assert_int_equal(cls("127.0.0.1"), ADDRCLASS_LOOPBACK);
	assert_int_equal(cls("0.0.0.0"), ADDRCLASS_LOOPBACK);
	assert_int_equal(cls("10.0.0.5"), ADDRCLASS_PRIVATE);
	assert_int_equal(cls("172.31.255.255"), ADDRCLASS_PRIVATE);
	assert_int_equal(cls("100.64.0.1"), ADDRCLASS_PRIVATE);
	assert_int_equal(cls("203.0.113.10"), ADDRCLASS_PUBLIC);
	assert_int_equal(cls("168.63.129.17"), ADDRCLASS_PUBLIC);
	assert_int_equal(cls("172.32.0.1"), ADDRCLASS_PUBLIC);
}

static void
test_ipv6(void **state)
{
	assert_int_equal(cls("::1"), ADDRCLASS_LOOPBACK);
	assert_int_equal(cls("::"), ADDRCLASS_LOOPBACK);
	assert_int_equal(cls("fe80::1"), ADDRCLASS_INNER);
	assert_int_equal(cls("ff02::1"), ADDRCLASS_INNER);
	assert_int_equal(cls("fd00:ec2::254"), ADDRCLASS_INNER);
	assert_int_equal(cls("fd00::1"), ADDRCLASS_PRIVATE);
	assert_int_equal(cls("2001:db8::10"), ADDRCLASS_PUBLIC);
}

/* Every IPv6 spelling of an embedded inner IPv4 address is inner. */
static void
test_embedded(void **state)
{
	const char *why = NULL;
	uint8_t a[16];

	assert_int_equal(cls("::ffff:169.254.169.254"), ADDRCLASS_INNER);
	assert_int_equal(cls("::169.254.169.254"), ADDRCLASS_INNER);
	assert_int_equal(cls("2002:a9fe:a9fe::1"), ADDRCLASS_INNER);
	assert_int_equal(cls("64:ff9b::169.254.169.254"), ADDRCLASS_INNER);
	/* RFC 6052 /48: the address sits in bytes 6,7 and 9,10 (the u octet is skipped). */
	assert_int_equal(cls("64:ff9b:1:a9fe:a9:fe00::"), ADDRCLASS_INNER);
	assert_int_equal(cls("64:ff9b::127.0.0.1"), ADDRCLASS_LOOPBACK);
	assert_int_equal(cls("2002:7f00:1::"), ADDRCLASS_LOOPBACK);
	assert_int_equal(cls("::ffff:10.0.0.5"), ADDRCLASS_PRIVATE);
	assert_int_equal(cls("2002:cb00:710a::1"), ADDRCLASS_PUBLIC); /* 203.0.113.10 */
	assert_int_equal(cls("64:ff9b::203.0.113.10"), ADDRCLASS_PUBLIC);
	assert_int_equal(cls("2001:0:4136:e378:8000:63bf:3fff:fdd2"), ADDRCLASS_INNER); /* Teredo */
	assert_int_equal(inet_pton(AF_INET6, "2002:a9fe:a9fe::1", a), 1);
	assert_int_equal(addrclass_of(AF_INET6, a, &why), ADDRCLASS_INNER);
	assert_non_null(strstr(why, "169.254.0.0/16"));
}

static void
test_refused(void **state)
{
	uint8_t a[16];

	assert_int_equal(inet_pton(AF_INET, "10.1.2.3", a), 1);
	assert_false(addrclass_refused(AF_INET, a, false, NULL));
	assert_true(addrclass_refused(AF_INET, a, true, NULL));
	assert_int_equal(inet_pton(AF_INET, "169.254.169.254", a), 1);
	assert_true(addrclass_refused(AF_INET, a, false, NULL));
	assert_int_equal(inet_pton(AF_INET, "203.0.113.10", a), 1);
	assert_false(addrclass_refused(AF_INET, a, true, NULL));
}

/* The kernel's deny prefixes cover what the classifier calls inner. */
static bool
covered(const struct policy_addr *p, size_t n, const char *text)
{
	struct policy_addr a;

	assert_int_equal(
	    policy_addr_parse((const uint8_t *)text, strlen(text), false, &a), POLICY_NAME_OK);
	for (size_t i = 0; i < n; i++)
		if (p[i].family == a.family && policy_addr_in(&p[i], &a))
			return true;
	return false;
}

static void
test_deny_prefixes(void **state)
{
	struct policy_addr p[ADDRCLASS_MAX_DENY];
	size_t n = addrclass_deny_prefixes(p, ADDRCLASS_MAX_DENY);

	assert_true(n > 0 && n <= ADDRCLASS_MAX_DENY);
	assert_int_equal(addrclass_deny_prefixes(NULL, 0), n);
	assert_true(covered(p, n, "169.254.169.254"));
	assert_true(covered(p, n, "168.63.129.16"));
	assert_true(covered(p, n, "192.0.0.192"));
	assert_true(covered(p, n, "100.100.100.200"));
	assert_true(covered(p, n, "fd00:ec2::254"));
	assert_true(covered(p, n, "2002:a9fe:a9fe::1"));
	assert_true(covered(p, n, "64:ff9b::a9fe:a9fe"));
	assert_true(covered(p, n, "64:ff9b:1:a9fe:a9:fe00::"));
	assert_true(covered(p, n, "::a9fe:a9fe"));
	assert_true(covered(p, n, "2001:0:4136:e378:8000:63bf:3fff:fdd2"));
	assert_true(covered(p, n, "2002:6464:64c8::"));
	assert_false(covered(p, n, "203.0.113.10"));
	assert_false(covered(p, n, "2001:db8::10"));
	assert_false(covered(p, n, "2002:cb00:710a::1"));
	assert_false(covered(p, n, "10.0.0.5"));
	/* Every prefix is a valid, masked prefix. */
	for (size_t i = 0; i < n; i++) {
		unsigned max = p[i].family == AF_INET ? 32 : 128;
		assert_true(p[i].prefix <= max);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ipv4),
	    cmocka_unit_test(test_ipv6),
	    cmocka_unit_test(test_embedded),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_deny_prefixes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
