/*
 * Unit tests of egressd/dns/pkthdr.c (the headers of a refused packet)
 * and egressd/dns/krule.c (the refusing rules' names and reasons): good
 * IPv4/IPv6 packets of each protocol, copies cut short at every length,
 * inconsistent header lengths, extension-header chains (bounded, and one
 * that points past the copy), fragments, and the rule vocabulary.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "egressd/dns/krule.h"
#include "egressd/dns/pkthdr.h"

/* IPv4 TCP SYN 10.200.0.2:43210 -> 203.0.113.20:443 (20-byte IP, 20-byte TCP). */
static const uint8_t tcp4[] = {0x45, 0x00, 0x00, 0x28, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0x00,
    0x00, 10, 200, 0, 2, 203, 0, 113, 20, 0xa8, 0xca, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0, 0x50,
    0x02, 0xff, 0xff, 0, 0, 0, 0};

/* IPv4 with 4 bytes of options, UDP 10.200.0.2:5000 -> 203.0.113.10:9999. */
static const uint8_t udp4_opts[] = {0x46, 0x00, 0x00, 0x20, 0, 0, 0, 0, 0x40, 0x11, 0, 0, 10, 200,
    0, 2, 203, 0, 113, 10, 0x01, 0x01, 0x01, 0x00, 0x13, 0x88, 0x27, 0x0f, 0, 8, 0, 0};

/* IPv4 ICMP echo request. */
static const uint8_t icmp4[] = {0x45, 0, 0, 0x1c, 0, 0, 0, 0, 64, 1, 0, 0, 10, 200, 0, 2, 203, 0,
    113, 20, 8, 0, 0xf7, 0xff, 0, 0, 0, 0};

static void
ip6(uint8_t *p, uint8_t next, size_t payload)
{
	memset(p, 0, 40);
	p[0] = 0x60;
	p[4] = (uint8_t)(payload >> 8);
	p[5] = (uint8_t)payload;
	p[6] = next;
	p[7] = 64;
	inet_pton(AF_INET6, "fd00:200::2", p + 8);
	inet_pton(AF_INET6, "2001:db8::20", p + 24);
}

static void
test_tcp4(void **state)
{
	struct pkthdr h;
	char a[INET6_ADDRSTRLEN];

	assert_int_equal(pkthdr_parse(tcp4, sizeof(tcp4), 0, &h), PKTHDR_OK);
	assert_int_equal(h.family, AF_INET);
	assert_int_equal(h.proto, IPPROTO_TCP);
	assert_true(h.has_ports);
	assert_int_equal(h.sport, 43210);
	assert_int_equal(h.dport, 443);
	assert_string_equal(inet_ntop(AF_INET, h.src, a, sizeof(a)), "10.200.0.2");
	assert_string_equal(inet_ntop(AF_INET, h.dst, a, sizeof(a)), "203.0.113.20");
	assert_string_equal(pkthdr_proto_name(h.proto), "tcp");
	/* The family the record says must agree with the version nibble. */
	assert_int_equal(pkthdr_parse(tcp4, sizeof(tcp4), AF_INET, &h), PKTHDR_OK);
	assert_int_equal(pkthdr_parse(tcp4, sizeof(tcp4), AF_INET6, &h), PKTHDR_INVALID);
	assert_int_equal(h.family, 0);
}

static void
test_udp4_options_icmp4(void **state)
{
	struct pkthdr h;

	assert_int_equal(pkthdr_parse(udp4_opts, sizeof(udp4_opts), 0, &h), PKTHDR_OK);
	assert_int_equal(h.proto, IPPROTO_UDP);
	assert_int_equal(h.sport, 5000);
	assert_int_equal(h.dport, 9999);
	assert_int_equal(pkthdr_parse(icmp4, sizeof(icmp4), 0, &h), PKTHDR_OK);
	assert_true(h.has_icmp);
	assert_false(h.has_ports);
	assert_int_equal(h.icmp_type, 8);
	assert_int_equal(h.icmp_code, 0);
}

/* Every truncation: addresses from 20 bytes on, ports only with their 4 bytes. */
static void
test_truncations(void **state)
{
	struct pkthdr h;

	for (size_t n = 0; n < sizeof(tcp4); n++) {
		enum pkthdr_status st = pkthdr_parse(tcp4, n, 0, &h);

		if (n < 20)
			assert_int_equal(st, PKTHDR_INVALID);
		else if (n < 24)
			assert_int_equal(st, PKTHDR_SHORT);
		else
			assert_int_equal(st, PKTHDR_OK);
		assert_int_equal(h.has_ports, n >= 24);
	}
	/* Options push the transport header past a 24-byte copy. */
	assert_int_equal(pkthdr_parse(udp4_opts, 24, 0, &h), PKTHDR_SHORT);
	assert_int_equal(h.proto, IPPROTO_UDP);
	assert_false(h.has_ports);
	assert_int_equal(pkthdr_parse(NULL, 0, 0, &h), PKTHDR_INVALID);
}

static void
test_ip4_invalid(void **state)
{
	uint8_t p[sizeof(tcp4)];
	struct pkthdr h;

	memcpy(p, tcp4, sizeof(p));
	p[0] = 0x44; /* IHL 4: a 16-byte header */
	assert_int_equal(pkthdr_parse(p, sizeof(p), 0, &h), PKTHDR_INVALID);
	memcpy(p, tcp4, sizeof(p));
	p[2] = 0;
	p[3] = 19; /* total length below the header */
	assert_int_equal(pkthdr_parse(p, sizeof(p), 0, &h), PKTHDR_INVALID);
	memcpy(p, tcp4, sizeof(p));
	p[0] = 0x55; /* version 5 */
	assert_int_equal(pkthdr_parse(p, sizeof(p), 0, &h), PKTHDR_INVALID);
	memcpy(p, tcp4, sizeof(p));
	p[0] = 0x4f; /* 60-byte header, longer than the 40-byte copy */
	p[3] = 60;
	assert_int_equal(pkthdr_parse(p, sizeof(p), 0, &h), PKTHDR_SHORT);
	assert_int_equal(h.proto, IPPROTO_TCP);
	/* A later fragment has no transport header: its first bytes are data. */
	memcpy(p, tcp4, sizeof(p));
	p[6] = 0x00;
	p[7] = 0x10;
	assert_int_equal(pkthdr_parse(p, sizeof(p), 0, &h), PKTHDR_OK);
	assert_true(h.fragment);
	assert_false(h.has_ports);
}

static void
test_ip6(void **state)
{
	uint8_t p[PKTHDR_MAX_COPY + 16];
	struct pkthdr h;
	char a[INET6_ADDRSTRLEN];

	ip6(p, IPPROTO_TCP, 20);
	p[40] = 0x9c;
	p[41] = 0x40;
	p[42] = 0x01;
	p[43] = 0xbb;
	assert_int_equal(pkthdr_parse(p, 60, 0, &h), PKTHDR_OK);
	assert_int_equal(h.family, AF_INET6);
	assert_int_equal(h.sport, 40000);
	assert_int_equal(h.dport, 443);
	assert_string_equal(inet_ntop(AF_INET6, h.src, a, sizeof(a)), "fd00:200::2");
	assert_string_equal(inet_ntop(AF_INET6, h.dst, a, sizeof(a)), "2001:db8::20");
	assert_int_equal(pkthdr_parse(p, 39, 0, &h), PKTHDR_INVALID);
	assert_int_equal(pkthdr_parse(p, 40, 0, &h), PKTHDR_SHORT);
	assert_int_equal(pkthdr_parse(p, 60, AF_INET, &h), PKTHDR_INVALID);

	/* Hop-by-hop (8 bytes) then a destination option (16) then UDP. */
	ip6(p, IPPROTO_HOPOPTS, 40);
	p[40] = IPPROTO_DSTOPTS;
	p[41] = 0;
	p[48] = IPPROTO_UDP;
	p[49] = 1;
	p[64] = 0x00;
	p[65] = 0x35;
	p[66] = 0x11;
	p[67] = 0x5c;
	assert_int_equal(pkthdr_parse(p, 72, 0, &h), PKTHDR_OK);
	assert_int_equal(h.proto, IPPROTO_UDP);
	assert_int_equal(h.sport, 53);
	assert_int_equal(h.dport, 4444);
	/* An extension header whose length points past the copy. */
	p[41] = 200;
	assert_int_equal(pkthdr_parse(p, 72, 0, &h), PKTHDR_SHORT);
	assert_false(h.has_ports);

	/* A later fragment. */
	ip6(p, IPPROTO_FRAGMENT, 16);
	p[40] = IPPROTO_TCP;
	p[42] = 0x01; /* offset 32 */
	assert_int_equal(pkthdr_parse(p, 56, 0, &h), PKTHDR_OK);
	assert_true(h.fragment);
	assert_int_equal(h.proto, IPPROTO_TCP);
	assert_false(h.has_ports);

	/* ICMPv6. */
	ip6(p, IPPROTO_ICMPV6, 8);
	p[40] = 128;
	assert_int_equal(pkthdr_parse(p, 48, 0, &h), PKTHDR_OK);
	assert_true(h.has_icmp);
	assert_int_equal(h.icmp_type, 128);
}

/* A chain longer than PKTHDR_MAX_EXT ends the walk: protocol unknown, no ports. */
static void
test_ip6_long_chain(void **state)
{
	uint8_t p[PKTHDR_MAX_COPY];
	struct pkthdr h;

	ip6(p, IPPROTO_DSTOPTS, 80);
	for (size_t off = 40; off + 8 <= sizeof(p); off += 8) {
		p[off] = IPPROTO_DSTOPTS;
		p[off + 1] = 0;
	}
	assert_int_equal(pkthdr_parse(p, sizeof(p), 0, &h), PKTHDR_SHORT);
	assert_int_equal(h.proto, IPPROTO_DSTOPTS);
	assert_false(h.has_ports);
	/* Bytes past PKTHDR_MAX_COPY are never read. */
	assert_int_equal(pkthdr_parse(tcp4, sizeof(tcp4), 0, &h), PKTHDR_OK);
}

static void
test_krule(void **state)
{
	size_t n;
	const struct krule *all = krule_all(&n);

	assert_true(n >= 7);
	assert_string_equal(krule_find("egressd:default_tcp")->name, "default_tcp");
	assert_null(krule_find("default_tcp"));
	assert_null(krule_find("egressd:"));
	assert_null(krule_find("egressd:nosuch"));
	assert_null(krule_find("other:deny"));
	assert_int_equal(
	    krule_reason(krule_by_name("default"), IPPROTO_UDP), KRULE_UDP_NOT_ALLOWED);
	assert_int_equal(
	    krule_reason(krule_by_name("default"), IPPROTO_ICMP), KRULE_PROTO_NOT_ALLOWED);
	assert_int_equal(krule_reason(krule_by_name("default"), IPPROTO_TCP), KRULE_NOT_ALLOWED);
	assert_int_equal(krule_reason(krule_by_name("deny"), IPPROTO_UDP), KRULE_ADDRESS_DENIED);
	assert_int_equal(krule_reason(krule_by_name("deny_port"), IPPROTO_TCP), KRULE_PORT_DENIED);
	assert_int_equal(krule_reason(krule_by_name("proxy_only"), 0), KRULE_PROXY_BYPASS);
	assert_int_equal(krule_reason(NULL, IPPROTO_TCP), KRULE_UNPARSED);
	assert_string_equal(krule_reason_name(KRULE_DOT_BLOCKED), "dot_blocked");
	assert_string_equal(krule_reason_name(KRULE_NREASONS), "unparsed");
	/* Every rule has a reason other than unparsed, and a name a prefix can carry. */
	for (size_t i = 0; i < n; i++) {
		assert_int_not_equal(krule_reason(&all[i], IPPROTO_TCP), KRULE_UNPARSED);
		assert_true(strlen(KRULE_PREFIX) + strlen(all[i].name) < 32);
		assert_int_equal(
		    strspn(all[i].name, "abcdefghijklmnopqrstuvwxyz_"), strlen(all[i].name));
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tcp4),
	    cmocka_unit_test(test_udp4_options_icmp4),
	    cmocka_unit_test(test_truncations),
	    cmocka_unit_test(test_ip4_invalid),
	    cmocka_unit_test(test_ip6),
	    cmocka_unit_test(test_ip6_long_chain),
	    cmocka_unit_test(test_krule),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
