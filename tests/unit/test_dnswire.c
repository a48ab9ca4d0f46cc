/*
 * Unit tests for egressd/dnswire: byte-array fixtures of good and bad
 * queries and upstream answers, every prefix of each good fixture, and the
 * reply builders.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "egressd/dns/dnswire.h"

/* id 0xbeef, RD, "WwW.ExAmple.COM" A IN, OPT udp 4096. */
static const uint8_t q_good[] = {0xbe, 0xef, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x01, 3, 'W', 'w', 'W', 7, 'E', 'x', 'A', 'm', 'p', 'l', 'e', 3, 'C', 'O', 'M', 0, 0x00, 0x01,
    0x00, 0x01, 0x00, 0x00, 0x29, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};

/* Upstream answer to id 0x1234 www.example.com A: CNAME to cdn.example.com,
 * cdn A 93.184.216.34 ttl 60, cdn A 127.0.0.1 ttl 30, other. A 1.2.3.4. */
static const uint8_t a_good[] = {0x12, 0x34, 0x81, 0x80, 0x00, 0x01, 0x00, 0x04, 0x00, 0x00, 0x00,
    0x00,
    /* 12: question */
    3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0, 0x00, 0x01, 0x00,
    0x01,
    /* 33: CNAME, rdata at 45 = cdn + ptr to "example.com" at 16 */
    0xc0, 0x0c, 0x00, 0x05, 0x00, 0x01, 0x00, 0x00, 0x01, 0x2c, 0x00, 0x06, 3, 'c', 'd', 'n', 0xc0,
    0x10,
    /* 51: A 93.184.216.34 */
    0xc0, 0x2d, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x3c, 0x00, 0x04, 93, 184, 216, 34,
    /* 67: A 127.0.0.1 */
    0xc0, 0x2d, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x1e, 0x00, 0x04, 127, 0, 0, 1,
    /* 83: off-chain A */
    5, 'o', 't', 'h', 'e', 'r', 0, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x3c, 0x00, 0x04, 1, 2,
    3, 4};

static bool
reject_loopback(int family, const uint8_t *addr, void *arg)
{
	int *calls = arg;

	(*calls)++;
	return !(family == AF_INET && addr[0] == 127);
}

static bool
keep_all(int family, const uint8_t *addr, void *arg)
{
	return true;
}

static void
client_query(struct dnswire_query *q, const char *name, uint16_t qtype)
{
	uint8_t buf[512];
	size_t n, used;

	assert_int_equal(
	    dnswire_build_query(0x7777, name, qtype, DNSWIRE_CLASS_IN, buf, sizeof(buf), &n), 0);
	assert_int_equal(dnswire_parse_query(buf, n, q, &used), DNSWIRE_OK);
	assert_int_equal(used, n);
}

static void
test_query_good(void **state)
{
	struct dnswire_query q;
	size_t used;

	assert_int_equal(dnswire_parse_query(q_good, sizeof(q_good), &q, &used), DNSWIRE_OK);
	assert_int_equal(used, sizeof(q_good));
	assert_string_equal(q.name, "www.example.com");
	assert_int_equal(q.name_len, 15);
	assert_int_equal(q.id, 0xbeef);
	assert_true(q.rd);
	assert_int_equal(q.opcode, 0);
	assert_int_equal(q.qtype, DNSWIRE_TYPE_A);
	assert_int_equal(q.qclass, DNSWIRE_CLASS_IN);
	assert_true(q.has_opt);
	assert_int_equal(q.udp_size, 4096);
	/* The echoed question keeps the client's case (DNS 0x20). */
	assert_int_equal(q.question_len, 21);
	assert_memory_equal(q.question, q_good + 12, 21);
}

static void
test_query_every_prefix_invalid(void **state)
{
	struct dnswire_query q;
	size_t used;

	for (size_t n = 0; n < sizeof(q_good); n++) {
		enum dnswire_status st = dnswire_parse_query(q_good, n, &q, &used);

		assert_int_equal(st, DNSWIRE_INVALID);
		assert_int_equal(used, 0);
		assert_int_equal(q.hdr_valid, n >= DNSWIRE_HDR_LEN);
	}
}

static void
parse_bad(const uint8_t *p, size_t n, bool hdr_valid)
{
	struct dnswire_query q;
	size_t used;

	assert_int_equal(dnswire_parse_query(p, n, &q, &used), DNSWIRE_INVALID);
	assert_int_equal(q.hdr_valid, hdr_valid);
}

static void
test_query_bad(void **state)
{
	uint8_t b[sizeof(q_good) + 8];
	struct dnswire_query q;
	uint8_t out[512];
	size_t used, n;

	/* qdcount 0 and 2: FORMERR with no question echoed. */
	memcpy(b, q_good, sizeof(q_good));
	b[5] = 0;
	parse_bad(b, sizeof(q_good), true);
	assert_int_equal(dnswire_parse_query(b, sizeof(q_good), &q, &used), DNSWIRE_INVALID);
	assert_int_equal(dnswire_build_error(&q, DNSWIRE_RCODE_FORMERR, out, sizeof(out), &n), 0);
	assert_int_equal(n, DNSWIRE_HDR_LEN);
	assert_int_equal(out[0], 0xbe);
	assert_int_equal(out[1], 0xef);
	assert_int_equal(out[2], 0x81); /* QR + RD */
	assert_int_equal(out[3], DNSWIRE_RCODE_FORMERR);
	assert_int_equal(out[5], 0);
	b[5] = 2;
	parse_bad(b, sizeof(q_good), true);

	/* QR set: a response is dropped, not answered. */
	memcpy(b, q_good, sizeof(q_good));
	b[2] |= 0x80;
	parse_bad(b, sizeof(q_good), false);

	/* Compression pointer in the question. */
	memcpy(b, q_good, sizeof(q_good));
	b[24] = 0xc0;
	b[25] = 0x0c;
	parse_bad(b, sizeof(q_good), true);

	/* Label type 0x40 (label length 64 > 63). */
	memcpy(b, q_good, sizeof(q_good));
	b[12] = 64;
	parse_bad(b, sizeof(q_good), true);

	/*
	 * Bytes the one canonicaliser refuses (NUL, dot, space, high bit,
	 * underscore): the query is not for a name we could allow.
	 */
	const uint8_t badch[] = {0, '.', ' ', 0xc3, '_'};
	for (size_t i = 0; i < sizeof(badch); i++) {
		memcpy(b, q_good, sizeof(q_good));
		b[14] = badch[i];
		parse_bad(b, sizeof(q_good), true);
	}

	/* Trailing garbage after the OPT RR. */
	memcpy(b, q_good, sizeof(q_good));
	b[sizeof(q_good)] = 0;
	parse_bad(b, sizeof(q_good) + 1, true);

	/* Two OPT RRs. */
	{
		uint8_t two[sizeof(q_good) + 11];

		memcpy(two, q_good, sizeof(q_good));
		memcpy(two + sizeof(q_good), q_good + 33, 11);
		two[11] = 2;
		parse_bad(two, sizeof(two), true);
	}
}

static void
test_query_name_too_long(void **state)
{
	uint8_t p[600];
	size_t off = DNSWIRE_HDR_LEN;
	struct dnswire_query q;
	size_t used;

	memset(p, 0, DNSWIRE_HDR_LEN);
	p[5] = 1;
	/* 4 labels of 63: 256 bytes of wire name with the root: too long. */
	for (int i = 0; i < 4; i++) {
		p[off++] = 63;
		memset(p + off, 'a', 63);
		off += 63;
	}
	p[off++] = 0;
	p[off++] = 0;
	p[off++] = 1;
	p[off++] = 0;
	p[off++] = 1;
	assert_int_equal(dnswire_parse_query(p, off, &q, &used), DNSWIRE_INVALID);
	/* 3 x 63 + 61 = 253 characters: the longest legal name. */
	off = DNSWIRE_HDR_LEN + 3 * 64;
	p[off++] = 61;
	memset(p + off, 'b', 61);
	off += 61;
	p[off++] = 0;
	p[off++] = 0;
	p[off++] = 1;
	p[off++] = 0;
	p[off++] = 1;
	assert_int_equal(dnswire_parse_query(p, off, &q, &used), DNSWIRE_OK);
	assert_int_equal(q.name_len, DNSWIRE_MAX_NAME);
}

static void
test_tcp_frame(void **state)
{
	uint8_t buf[2 + sizeof(q_good) + 3];
	const uint8_t *msg = NULL;
	size_t mlen = 0, used = 99;

	buf[0] = 0;
	buf[1] = sizeof(q_good);
	memcpy(buf + 2, q_good, sizeof(q_good));
	assert_int_equal(dnswire_tcp_frame(buf, 1, &msg, &mlen, &used), DNSWIRE_NEED_MORE);
	assert_int_equal(used, 0);
	assert_int_equal(
	    dnswire_tcp_frame(buf, 2 + sizeof(q_good) - 1, &msg, &mlen, &used), DNSWIRE_NEED_MORE);
	assert_int_equal(dnswire_tcp_frame(buf, sizeof(buf), &msg, &mlen, &used), DNSWIRE_OK);
	assert_ptr_equal(msg, buf + 2);
	assert_int_equal(mlen, sizeof(q_good));
	assert_int_equal(used, 2 + sizeof(q_good));
	buf[1] = 5; /* shorter than a header */
	assert_int_equal(dnswire_tcp_frame(buf, sizeof(buf), &msg, &mlen, &used), DNSWIRE_INVALID);
}

static void
test_build_error(void **state)
{
	struct dnswire_query q;
	uint8_t out[512];
	size_t used, n;

	assert_int_equal(dnswire_parse_query(q_good, sizeof(q_good), &q, &used), DNSWIRE_OK);
	assert_int_equal(dnswire_build_error(&q, DNSWIRE_RCODE_NXDOMAIN, out, sizeof(out), &n), 0);
	assert_int_equal(n, 12 + 21 + 11);
	assert_int_equal(out[0], 0xbe);
	assert_int_equal(out[2], 0x81);
	assert_int_equal(out[3], DNSWIRE_RCODE_NXDOMAIN);
	assert_int_equal(out[5], 1);  /* qdcount */
	assert_int_equal(out[7], 0);  /* ancount */
	assert_int_equal(out[11], 1); /* our OPT */
	assert_memory_equal(out + 12, q_good + 12, 21);
	/* Too small a buffer fails cleanly. */
	assert_int_equal(dnswire_build_error(&q, DNSWIRE_RCODE_REFUSED, out, 20, &n), -1);
	q.hdr_valid = false;
	assert_int_equal(dnswire_build_error(&q, DNSWIRE_RCODE_SERVFAIL, out, sizeof(out), &n), -1);
}

static void
test_build_query(void **state)
{
	static const uint8_t want[] = {0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
	    0x00, 0x01, 1, 'a', 2, 'b', 'c', 0, 0x00, 0x1c, 0x00, 0x01, 0x00, 0x00, 0x29, 0x04,
	    0xd0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
	uint8_t out[600];
	char longname[300];
	size_t n;

	assert_int_equal(
	    dnswire_build_query(0x1234, "a.bc", DNSWIRE_TYPE_AAAA, 1, out, sizeof(out), &n), 0);
	assert_int_equal(n, sizeof(want));
	assert_memory_equal(out, want, sizeof(want));
	/* Only a canonical name goes upstream (policy_name_canon decides). */
	assert_int_equal(dnswire_build_query(1, "A.bc", 1, 1, out, sizeof(out), &n), -1);
	assert_int_equal(dnswire_build_query(1, "_dmarc.bc", 1, 1, out, sizeof(out), &n), -1);
	assert_int_equal(dnswire_build_query(1, "a.123", 1, 1, out, sizeof(out), &n), -1);
	assert_int_equal(dnswire_build_query(1, "a.bc.", 1, 1, out, sizeof(out), &n), -1);
	assert_int_equal(dnswire_build_query(1, "a..bc", 1, 1, out, sizeof(out), &n), -1);
	assert_int_equal(dnswire_build_query(1, "a b", 1, 1, out, sizeof(out), &n), -1);
	memset(longname, 'x', 64);
	longname[64] = '\0';
	assert_int_equal(dnswire_build_query(1, longname, 1, 1, out, sizeof(out), &n), -1);
	memset(longname, 'x', 254);
	for (int i = 60; i < 254; i += 61)
		longname[i] = '.';
	longname[254] = '\0';
	assert_int_equal(dnswire_build_query(1, longname, 1, 1, out, sizeof(out), &n), -1);
	assert_int_equal(dnswire_build_query(1, "a.bc", 1, 1, out, 20, &n), -1);
}

static void
test_answer_filter(void **state)
{
	struct dnswire_query q;
	struct dnswire_answer res, res2;
	uint8_t out[1024], out2[1024];
	size_t n, n2;
	int calls = 0;

	client_query(&q, "www.example.com", DNSWIRE_TYPE_A);
	assert_int_equal(dnswire_filter_answer(a_good, sizeof(a_good), 0x1234, &q, reject_loopback,
	                     &calls, sizeof(out), out, sizeof(out), &n, &res),
	    DNSWIRE_OK);
	/* The predicate saw only the two on-chain addresses. */
	assert_int_equal(calls, 2);
	assert_int_equal(res.rcode, 0);
	assert_false(res.truncated);
	assert_int_equal(res.naddrs, 1);
	assert_int_equal(res.addrs[0].family, AF_INET);
	assert_memory_equal(res.addrs[0].addr, ((uint8_t[]){93, 184, 216, 34}), 4);
	assert_int_equal(res.addrs[0].ttl, 60);
	assert_int_equal(res.min_ttl, 60);
	assert_int_equal(res.nremoved, 2);
	/* Reply: client's id, QR, RD, RA, one question, CNAME + A, our OPT. */
	assert_int_equal(out[0], 0x77);
	assert_int_equal(out[1], 0x77);
	assert_int_equal(out[2] & 0x80, 0x80);
	assert_int_equal(out[3], 0x80);
	assert_int_equal(out[7], 2);
	assert_int_equal(out[9], 0);
	assert_int_equal(out[11], 1);
	assert_null(memmem(out, n, ((uint8_t[]){127, 0, 0, 1}), 4));
	assert_null(memmem(out, n, ((uint8_t[]){1, 2, 3, 4}), 4));
	/* The reply is itself a valid answer: the same filter accepts it. */
	assert_int_equal(dnswire_filter_answer(out, n, 0x7777, &q, keep_all, NULL, sizeof(out2),
	                     out2, sizeof(out2), &n2, &res2),
	    DNSWIRE_OK);
	assert_int_equal(res2.naddrs, 1);
	assert_int_equal(res2.nremoved, 0);
	assert_int_equal(n2, n);
	assert_memory_equal(out2 + 2, out + 2, n - 2);
}

static void
test_answer_every_prefix_invalid(void **state)
{
	struct dnswire_query q;
	struct dnswire_answer res;
	uint8_t out[1024];
	size_t n;

	client_query(&q, "www.example.com", DNSWIRE_TYPE_A);
	for (size_t len = 0; len < sizeof(a_good); len++)
		assert_int_equal(dnswire_filter_answer(a_good, len, 0x1234, &q, keep_all, NULL,
		                     sizeof(out), out, sizeof(out), &n, &res),
		    DNSWIRE_INVALID);
}

static enum dnswire_status
filter_mod(size_t at, const uint8_t *bytes, size_t nb, uint16_t id, const char *qname)
{
	uint8_t p[sizeof(a_good)];
	struct dnswire_query q;
	struct dnswire_answer res;
	uint8_t out[1024];
	size_t n;

	memcpy(p, a_good, sizeof(p));
	memcpy(p + at, bytes, nb);
	client_query(&q, qname, DNSWIRE_TYPE_A);
	return dnswire_filter_answer(
	    p, sizeof(p), id, &q, keep_all, NULL, sizeof(out), out, sizeof(out), &n, &res);
}

static void
test_answer_bad(void **state)
{
	struct dnswire_query q;
	struct dnswire_answer res;
	uint8_t out[1024];
	size_t n;

	/* Wrong id, wrong question name, wrong qtype, QR unset. */
	assert_int_equal(
	    filter_mod(0, (uint8_t[]){0}, 0, 0x1235, "www.example.com"), DNSWIRE_INVALID);
	assert_int_equal(
	    filter_mod(0, (uint8_t[]){0}, 0, 0x1234, "ww.example.com"), DNSWIRE_INVALID);
	assert_int_equal(
	    filter_mod(30, (uint8_t[]){0x1c}, 1, 0x1234, "www.example.com"), DNSWIRE_INVALID);
	assert_int_equal(
	    filter_mod(2, (uint8_t[]){0x01}, 1, 0x1234, "www.example.com"), DNSWIRE_INVALID);
	/* Pointer to itself, forward, and out of the packet. */
	assert_int_equal(
	    filter_mod(51, (uint8_t[]){0xc0, 51}, 2, 0x1234, "www.example.com"), DNSWIRE_INVALID);
	assert_int_equal(
	    filter_mod(51, (uint8_t[]){0xc0, 60}, 2, 0x1234, "www.example.com"), DNSWIRE_INVALID);
	assert_int_equal(
	    filter_mod(51, (uint8_t[]){0xff, 0xff}, 2, 0x1234, "www.example.com"), DNSWIRE_INVALID);
	/* Two-pointer loop: the CNAME target "cdn" points back into itself. */
	assert_int_equal(
	    filter_mod(49, (uint8_t[]){0xc0, 45}, 2, 0x1234, "www.example.com"), DNSWIRE_INVALID);
	/* Label running past the end of the packet. */
	assert_int_equal(
	    filter_mod(83, (uint8_t[]){60}, 1, 0x1234, "www.example.com"), DNSWIRE_INVALID);
	/* A record with rdlength 5. */
	assert_int_equal(
	    filter_mod(62, (uint8_t[]){5}, 1, 0x1234, "www.example.com"), DNSWIRE_INVALID);
	/* ancount larger than what is there. */
	assert_int_equal(
	    filter_mod(7, (uint8_t[]){5}, 1, 0x1234, "www.example.com"), DNSWIRE_INVALID);
	/* ancount over the limit. */
	assert_int_equal(filter_mod(6, (uint8_t[]){0xff, 0xff}, 2, 0x1234, "www.example.com"),
	    DNSWIRE_TOO_LARGE);
	/* A NULL predicate is refused. */
	client_query(&q, "www.example.com", DNSWIRE_TYPE_A);
	assert_int_equal(dnswire_filter_answer(a_good, sizeof(a_good), 0x1234, &q, NULL, NULL,
	                     sizeof(out), out, sizeof(out), &n, &res),
	    DNSWIRE_INVALID);
}

static void
test_answer_truncation(void **state)
{
	uint8_t p[sizeof(a_good)];
	struct dnswire_query q;
	struct dnswire_answer res;
	uint8_t out[1024];
	size_t n;

	client_query(&q, "www.example.com", DNSWIRE_TYPE_A);
	/* Too big for the client: header + question with TC, nothing learned. */
	assert_int_equal(dnswire_filter_answer(a_good, sizeof(a_good), 0x1234, &q, keep_all, NULL,
	                     40, out, sizeof(out), &n, &res),
	    DNSWIRE_OK);
	assert_true(res.truncated);
	assert_int_equal(res.naddrs, 0);
	assert_int_equal(n, 12 + 21 + 11);
	assert_int_equal(out[2] & 0x02, 0x02);
	assert_int_equal(out[7], 0);
	/* Upstream TC: passed on, nothing learned. */
	memcpy(p, a_good, sizeof(p));
	p[2] |= 0x02;
	assert_int_equal(dnswire_filter_answer(p, sizeof(p), 0x1234, &q, keep_all, NULL,
	                     sizeof(out), out, sizeof(out), &n, &res),
	    DNSWIRE_OK);
	assert_true(res.truncated);
	assert_int_equal(res.naddrs, 0);
	/* Output buffer too small even for the TC reply. */
	assert_int_equal(dnswire_filter_answer(a_good, sizeof(a_good), 0x1234, &q, keep_all, NULL,
	                     sizeof(out), out, 20, &n, &res),
	    DNSWIRE_TOO_LARGE);
}

static void
test_answer_cname_loop_and_aaaa(void **state)
{
	/* a.x CNAME b.x, b.x CNAME a.x, b.x AAAA 2001:db8::1. */
	static const uint8_t p[] = {0, 9, 0x81, 0x80, 0, 1, 0, 3, 0, 0, 0, 0,
	    /* 12 */ 1, 'a', 1, 'x', 0, 0, 28, 0, 1,
	    /* 21 */ 0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 10, 0, 4, 1, 'b', 0xc0, 14,
	    /* 37: b.x at 33 */ 0xc0, 33, 0, 5, 0, 1, 0, 0, 0, 10, 0, 2, 0xc0, 12,
	    /* 51 */ 0xc0, 33, 0, 28, 0, 1, 0, 0, 0, 5, 0, 16, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0,
	    0, 0, 0, 0, 0, 0, 0, 1};
	struct dnswire_query q;
	struct dnswire_answer res;
	uint8_t out[1024];
	size_t n;

	client_query(&q, "a.x", DNSWIRE_TYPE_AAAA);
	/* A loop refuses the whole answer (SERVFAIL), nothing is learned. */
	assert_int_equal(dnswire_filter_answer(p, sizeof(p), 9, &q, keep_all, NULL, sizeof(out),
	                     out, sizeof(out), &n, &res),
	    DNSWIRE_INVALID);
	assert_int_equal(res.naddrs, 0);
}

struct wbuf {
	uint8_t *p;
	size_t cap, o;
};

static void
put8(struct wbuf *w, unsigned v)
{
	assert_true(w->o < w->cap);
	w->p[w->o++] = (uint8_t)v;
}

static void
put16(struct wbuf *w, unsigned v)
{
	put8(w, v >> 8);
	put8(w, v);
}

/* The name "c<i>.x", uncompressed. */
static void
put_cname(struct wbuf *w, int i)
{
	char lab[16];
	int ll = snprintf(lab, sizeof(lab), "c%d", i);

	put8(w, (unsigned)ll);
	for (int k = 0; k < ll; k++)
		put8(w, (uint8_t)lab[k]);
	put8(w, 1);
	put8(w, 'x');
	put8(w, 0);
}

/*
 * An upstream answer (id 0x42) to "c0.x" A: `links` CNAMEs c0.x -> c1.x
 * -> ..., then (with loop_to >= 0) one more from the last name back to
 * c<loop_to>.x, then an A record 198.51.100.7 for the last name.
 */
static size_t
chain_answer(uint8_t *p, size_t cap, int links, int loop_to)
{
	struct wbuf w = {p, cap, 0};
	int ncname = links + (loop_to >= 0);
	char lab[16];

	put16(&w, 0x42);
	put16(&w, 0x8180);
	put16(&w, 1);
	put16(&w, (unsigned)ncname + 1);
	put16(&w, 0);
	put16(&w, 0);
	put_cname(&w, 0);
	put16(&w, DNSWIRE_TYPE_A);
	put16(&w, DNSWIRE_CLASS_IN);
	for (int i = 0; i < ncname; i++) {
		int to = i < links ? i + 1 : loop_to;
		int from = i < links ? i : links;

		put_cname(&w, from);
		put16(&w, DNSWIRE_TYPE_CNAME);
		put16(&w, DNSWIRE_CLASS_IN);
		put16(&w, 0);
		put16(&w, 60);
		put16(&w, (unsigned)snprintf(lab, sizeof(lab), "c%d", to) + 4);
		put_cname(&w, to);
	}
	put_cname(&w, links);
	put16(&w, DNSWIRE_TYPE_A);
	put16(&w, DNSWIRE_CLASS_IN);
	put16(&w, 0);
	put16(&w, 60);
	put16(&w, 4);
	put8(&w, 198);
	put8(&w, 51);
	put8(&w, 100);
	put8(&w, 7);
	return w.o;
}

static void
test_answer_cname_chain_limit(void **state)
{
	uint8_t p[16384], out[16384];
	struct dnswire_query q;
	struct dnswire_answer res;
	size_t len, n;

	client_query(&q, "c0.x", DNSWIRE_TYPE_A);
	/* A chain of exactly the limit is followed to its address. */
	len = chain_answer(p, sizeof(p), DNSWIRE_MAX_CNAME_CHAIN, -1);
	assert_int_equal(dnswire_filter_answer(p, len, 0x42, &q, keep_all, NULL, sizeof(out), out,
	                     sizeof(out), &n, &res),
	    DNSWIRE_OK);
	assert_int_equal(res.naddrs, 1);
	assert_int_equal(res.addrs[0].addr[3], 7);
	assert_int_equal(out[7], DNSWIRE_MAX_CNAME_CHAIN + 1);
	/* One link more is refused, not cut short. */
	len = chain_answer(p, sizeof(p), DNSWIRE_MAX_CNAME_CHAIN + 1, -1);
	assert_int_equal(dnswire_filter_answer(p, len, 0x42, &q, keep_all, NULL, sizeof(out), out,
	                     sizeof(out), &n, &res),
	    DNSWIRE_TOO_LARGE);
	assert_int_equal(res.naddrs, 0);
	len = chain_answer(p, sizeof(p), 200, -1);
	assert_int_equal(dnswire_filter_answer(p, len, 0x42, &q, keep_all, NULL, sizeof(out), out,
	                     sizeof(out), &n, &res),
	    DNSWIRE_TOO_LARGE);
	/* Loops of every length up to the limit: to itself, to the start, midway. */
	len = chain_answer(p, sizeof(p), 0, 0);
	assert_int_equal(dnswire_filter_answer(p, len, 0x42, &q, keep_all, NULL, sizeof(out), out,
	                     sizeof(out), &n, &res),
	    DNSWIRE_INVALID);
	for (int links = 1; links <= DNSWIRE_MAX_CNAME_CHAIN; links++) {
		len = chain_answer(p, sizeof(p), links, links / 2);
		assert_int_equal(dnswire_filter_answer(p, len, 0x42, &q, keep_all, NULL,
		                     sizeof(out), out, sizeof(out), &n, &res),
		    DNSWIRE_INVALID);
		assert_int_equal(res.naddrs, 0);
	}
}

/* Header rcodes by name, for the logs; anything past the named ones is "other". */
static void
test_rcode_name(void **state)
{
	(void)state;
	assert_string_equal(dnswire_rcode_name(DNSWIRE_RCODE_NOERROR), "NOERROR");
	assert_string_equal(dnswire_rcode_name(DNSWIRE_RCODE_SERVFAIL), "SERVFAIL");
	assert_string_equal(dnswire_rcode_name(DNSWIRE_RCODE_REFUSED), "REFUSED");
	assert_string_equal(dnswire_rcode_name(10), "NOTZONE");
	assert_string_equal(dnswire_rcode_name(11), "other");
	assert_string_equal(dnswire_rcode_name(15), "other");
	assert_string_equal(dnswire_rcode_name(-1), "other");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_query_good),
	    cmocka_unit_test(test_query_every_prefix_invalid),
	    cmocka_unit_test(test_query_bad),
	    cmocka_unit_test(test_query_name_too_long),
	    cmocka_unit_test(test_tcp_frame),
	    cmocka_unit_test(test_build_error),
	    cmocka_unit_test(test_build_query),
	    cmocka_unit_test(test_answer_filter),
	    cmocka_unit_test(test_answer_every_prefix_invalid),
	    cmocka_unit_test(test_answer_bad),
	    cmocka_unit_test(test_answer_truncation),
	    cmocka_unit_test(test_answer_cname_loop_and_aaaa),
	    cmocka_unit_test(test_answer_cname_chain_limit),
	    cmocka_unit_test(test_rcode_name),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
