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
	assert_false(addrclass_refused(NULL, AF_INET, a, false, NULL));
	assert_true(addrclass_refused(NULL, AF_INET, a, true, NULL));
	assert_int_equal(inet_pton(AF_INET, "169.254.169.254", a), 1);
	assert_true(addrclass_refused(NULL, AF_INET, a, false, NULL));
	assert_int_equal(inet_pton(AF_INET, "203.0.113.10", a), 1);
	assert_false(addrclass_refused(NULL, AF_INET, a, true, NULL));
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
	size_t n = addrclass_deny_prefixes(NULL, p, ADDRCLASS_MAX_DENY);

	assert_true(n > 0 && n <= ADDRCLASS_MAX_DENY);
	assert_int_equal(addrclass_deny_prefixes(NULL, NULL, 0), n);
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

static void
own_add(struct addrclass_own *own, const char *text, unsigned prefix)
{
	uint8_t a[16];
	int fam = strchr(text, ':') != NULL ? AF_INET6 : AF_INET;

	assert_int_equal(inet_pton(fam, text, a), 1);
	assert_int_equal(addrclass_own_add(own, fam, a, prefix), 0);
}

static bool
is_own(const struct addrclass_own *own, const char *text)
{
	uint8_t a[16];
	int fam = strchr(text, ':') != NULL ? AF_INET6 : AF_INET;

	assert_int_equal(inet_pton(fam, text, a), 1);
	return addrclass_is_own(own, fam, a, NULL);
}

/* The fixture's sandbox: 10.200.0.2/24 and fd00:200::2/64, gateways .1 and ::1. */
static void
fixture_own(struct addrclass_own *own)
{
	memset(own, 0, sizeof(*own));
	own_add(own, "10.200.0.2", 32);
	own_add(own, "10.200.0.2", 24); /* masked; replaces the address inside it */
	own_add(own, "10.200.0.1", 32); /* inside: dropped */
	own_add(own, "fd00:200::2", 64);
	own_add(own, "fd00:200::1", 128);
}

/* The own list: masked prefixes, none inside another, compared as sets. */
static void
test_own_add(void **state)
{
	struct addrclass_own own, other;
	uint8_t a[16] = {10, 200, 0, 2};

	fixture_own(&own);
	assert_int_equal(own.n, 2);
	assert_int_equal(own.net[0].family, AF_INET);
	assert_int_equal(own.net[0].prefix, 24);
	assert_int_equal(own.net[0].bytes[3], 0);
	assert_int_equal(own.net[1].prefix, 64);
	assert_int_equal(addrclass_own_add(&own, AF_INET, a, 33), -1);
	assert_int_equal(addrclass_own_add(&own, AF_UNIX, a, 8), -1);
	assert_int_equal(own.n, 2);
	/* Same prefixes in another order: equal; one more: not. */
	memset(&other, 0, sizeof(other));
	own_add(&other, "fd00:200::", 64);
	own_add(&other, "10.200.0.0", 24);
	assert_true(addrclass_own_equal(&own, &other));
	own_add(&other, "192.0.2.1", 32);
	assert_false(addrclass_own_equal(&own, &other));
	assert_false(addrclass_own_equal(&own, NULL));
	assert_true(addrclass_own_equal(NULL, NULL));
	/* Full: the next distinct prefix is refused and nothing changes. */
	memset(&other, 0, sizeof(other));
	for (unsigned i = 0; i < ADDRCLASS_MAX_OWN; i++) {
		uint8_t b[4] = {198, 18, (uint8_t)i, 0};

		assert_int_equal(addrclass_own_add(&other, AF_INET, b, 24), 0);
	}
	assert_int_equal(addrclass_own_add(&other, AF_INET, a, 32), -1);
	assert_int_equal(other.n, ADDRCLASS_MAX_OWN);
	/* ... but one inside an existing prefix is no new prefix. */
	a[0] = 198;
	a[1] = 18;
	assert_int_equal(addrclass_own_add(&other, AF_INET, a, 32), 0);
}

/*
 * The own networks are refused in every spelling, as the inner ranges
 * are: the subnet, the node, and IPv6 forms embedding them (mapped,
 * compatible, 6to4, NAT64 /96 and /48); a private address that is not
 * ours stays a policy choice.
 */
static void
test_own_refused(void **state)
{
	struct addrclass_own own;
	const char *why = NULL;
	uint8_t a[16];

	fixture_own(&own);
	assert_true(is_own(&own, "10.200.0.1"));
	assert_true(is_own(&own, "10.200.0.77"));
	assert_true(is_own(&own, "fd00:200::1"));
	assert_true(is_own(&own, "fd00:200::99"));
	assert_true(is_own(&own, "::ffff:10.200.0.1"));
	assert_true(is_own(&own, "::10.200.0.1"));
	assert_true(is_own(&own, "64:ff9b::10.200.0.1"));
	assert_true(is_own(&own, "64:ff9b:1:ac8:0:100::")); /* /48: bytes 6,7 and 9,10 */
	assert_true(is_own(&own, "2002:ac8:1::1"));
	assert_false(is_own(&own, "10.201.0.1"));
	assert_false(is_own(&own, "fd00:201::1"));
	assert_false(is_own(&own, "64:ff9b::203.0.113.10"));
	assert_false(is_own(NULL, "10.200.0.1"));
	assert_int_equal(inet_pton(AF_INET, "10.200.0.1", a), 1);
	assert_true(addrclass_refused(&own, AF_INET, a, false, &why));
	assert_non_null(strstr(why, "own network"));
	assert_false(addrclass_refused(NULL, AF_INET, a, false, NULL));
	assert_int_equal(inet_pton(AF_INET, "10.0.0.5", a), 1);
	assert_false(addrclass_refused(&own, AF_INET, a, false, NULL));
	assert_true(addrclass_refused(&own, AF_INET, a, true, NULL));
	/* An inner address keeps its own reason. */
	assert_int_equal(inet_pton(AF_INET, "169.254.169.254", a), 1);
	assert_true(addrclass_refused(&own, AF_INET, a, false, &why));
	assert_non_null(strstr(why, "169.254.0.0/16"));
}

/* The kernel's deny prefixes carry the own networks and their spellings. */
static void
test_own_deny_prefixes(void **state)
{
	struct addrclass_own own;
	struct policy_addr p[ADDRCLASS_MAX_DENY];
	size_t base = addrclass_deny_prefixes(NULL, NULL, 0), n;

	fixture_own(&own);
	n = addrclass_deny_prefixes(&own, p, ADDRCLASS_MAX_DENY);
	/* The IPv4 subnet in five spellings, the IPv6 one once. */
	assert_int_equal(n, base + 5 + 1);
	assert_true(covered(p, n, "10.200.0.1"));
	assert_true(covered(p, n, "10.200.0.254"));
	assert_true(covered(p, n, "fd00:200::1"));
	assert_true(covered(p, n, "64:ff9b::10.200.0.1"));
	assert_true(covered(p, n, "64:ff9b:1:ac8:0:100::"));
	assert_true(covered(p, n, "2002:ac8:1::1"));
	assert_true(covered(p, n, "::10.200.0.1"));
	assert_false(covered(p, n, "10.201.0.1"));
	assert_false(covered(p, n, "10.0.0.5"));
	assert_false(covered(p, n, "fd00:201::1"));
	/* A full own list still fits the documented bound. */
	memset(&own, 0, sizeof(own));
	for (unsigned i = 0; i < ADDRCLASS_MAX_OWN; i++) {
		uint8_t b[4] = {198, 18, (uint8_t)i, 0};

		assert_int_equal(addrclass_own_add(&own, AF_INET, b, 24), 0);
	}
	assert_true(addrclass_deny_prefixes(&own, NULL, 0) <= ADDRCLASS_MAX_DENY);
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
	    cmocka_unit_test(test_own_add),
	    cmocka_unit_test(test_own_refused),
	    cmocka_unit_test(test_own_deny_prefixes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
