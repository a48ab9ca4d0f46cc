/*
 * Unit tests of vault/tlspeek: a real OpenSSL ClientHello, every prefix of
 * it, record fragmentation, and one synthetic hello per malformed SNI,
 * ALPN or extension layout of catalogue EX-085..089; the server's first
 * message (ServerHello or HelloRetryRequest, EX-086b), the client's
 * records up to its second hello, a server_name extension body as OpenSSL
 * hands it over, and the names of certificate alerts (EX-096b).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "vault/tlspeek.h"

/* openssl s_client -servername api.allowed.test -alpn h2,http/1.1 */
static const unsigned char real_hello[] = {0x16, 0x03, 0x01, 0x01, 0x4f, 0x01, 0x00, 0x01, 0x4b,
    0x03, 0x03, 0x47, 0x2c, 0x4c, 0x0d, 0xa9, 0x1c, 0xdf, 0x9a, 0x93, 0x48, 0xaa, 0x6c, 0xb1, 0x9a,
    0x45, 0xad, 0xb2, 0xd2, 0x33, 0xa4, 0xcf, 0xee, 0xd5, 0x99, 0xc9, 0x54, 0xaa, 0xdc, 0xcb, 0x03,
    0x5e, 0xeb, 0x20, 0xef, 0x29, 0xcd, 0x5a, 0x8c, 0x85, 0x5b, 0x8d, 0xaf, 0x1f, 0x5e, 0x9c, 0x4f,
    0x7c, 0xd3, 0x30, 0x7c, 0xe0, 0x46, 0x2a, 0xec, 0xbe, 0x9e, 0xef, 0x4b, 0xf8, 0x5c, 0x52, 0x23,
    0xdf, 0x7e, 0xb2, 0x00, 0x3e, 0x13, 0x02, 0x13, 0x03, 0x13, 0x01, 0xc0, 0x2c, 0xc0, 0x30, 0x00,
    0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa, 0xc0, 0x2b, 0xc0, 0x2f, 0x00, 0x9e, 0xc0, 0x24, 0xc0,
    0x28, 0x00, 0x6b, 0xc0, 0x23, 0xc0, 0x27, 0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14, 0x00, 0x39, 0xc0,
    0x09, 0xc0, 0x13, 0x00, 0x33, 0x00, 0x9d, 0x00, 0x9c, 0x00, 0x3d, 0x00, 0x3c, 0x00, 0x35, 0x00,
    0x2f, 0x00, 0xff, 0x01, 0x00, 0x00, 0xc4, 0x00, 0x00, 0x00, 0x15, 0x00, 0x13, 0x00, 0x00, 0x10,
    0x61, 0x70, 0x69, 0x2e, 0x61, 0x6c, 0x6c, 0x6f, 0x77, 0x65, 0x64, 0x2e, 0x74, 0x65, 0x73, 0x74,
    0x00, 0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x16, 0x00, 0x14, 0x00, 0x1d,
    0x00, 0x17, 0x00, 0x1e, 0x00, 0x19, 0x00, 0x18, 0x01, 0x00, 0x01, 0x01, 0x01, 0x02, 0x01, 0x03,
    0x01, 0x04, 0x00, 0x23, 0x00, 0x00, 0x00, 0x10, 0x00, 0x0e, 0x00, 0x0c, 0x02, 0x68, 0x32, 0x08,
    0x68, 0x74, 0x74, 0x70, 0x2f, 0x31, 0x2e, 0x31, 0x00, 0x16, 0x00, 0x00, 0x00, 0x17, 0x00, 0x00,
    0x00, 0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06, 0x03, 0x08, 0x07, 0x08, 0x08,
    0x08, 0x09, 0x08, 0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05, 0x08, 0x06, 0x04, 0x01, 0x05, 0x01,
    0x06, 0x01, 0x03, 0x03, 0x03, 0x01, 0x03, 0x02, 0x04, 0x02, 0x05, 0x02, 0x06, 0x02, 0x00, 0x2b,
    0x00, 0x09, 0x08, 0x03, 0x04, 0x03, 0x03, 0x03, 0x02, 0x03, 0x01, 0x00, 0x2d, 0x00, 0x02, 0x01,
    0x01, 0x00, 0x33, 0x00, 0x26, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20, 0xf7, 0x26, 0x4d, 0x15, 0x9e,
    0x4e, 0xee, 0x9c, 0x82, 0x6b, 0xdb, 0x4a, 0x06, 0x2b, 0x38, 0x76, 0x2d, 0x9a, 0x41, 0xc5, 0xa7,
    0x18, 0x13, 0x01, 0x17, 0x2c, 0x78, 0x02, 0x77, 0x23, 0xde, 0x59};
static const unsigned int real_hello_len = 340;
/* openssl s_client -noservername */
static const unsigned char real_nosni[] = {0x16, 0x03, 0x01, 0x01, 0x24, 0x01, 0x00, 0x01, 0x20,
    0x03, 0x03, 0xc9, 0xa0, 0x55, 0x3f, 0x28, 0xb2, 0x40, 0x3e, 0x23, 0x87, 0xe2, 0xef, 0x44, 0x14,
    0x4f, 0xa3, 0x59, 0xc2, 0x51, 0x7e, 0x78, 0xab, 0x0f, 0xf0, 0x6e, 0x98, 0xc0, 0x08, 0x51, 0xa2,
    0xfb, 0x52, 0x20, 0x56, 0xc9, 0x2f, 0x26, 0x86, 0x04, 0x7c, 0x72, 0xcf, 0x54, 0x26, 0x01, 0x9f,
    0x7e, 0x37, 0xef, 0x6f, 0xca, 0x34, 0xdb, 0x92, 0xb9, 0xd3, 0xd3, 0x3f, 0x97, 0xab, 0x39, 0xe4,
    0xa8, 0xc3, 0x55, 0x00, 0x3e, 0x13, 0x02, 0x13, 0x03, 0x13, 0x01, 0xc0, 0x2c, 0xc0, 0x30, 0x00,
    0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa, 0xc0, 0x2b, 0xc0, 0x2f, 0x00, 0x9e, 0xc0, 0x24, 0xc0,
    0x28, 0x00, 0x6b, 0xc0, 0x23, 0xc0, 0x27, 0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14, 0x00, 0x39, 0xc0,
    0x09, 0xc0, 0x13, 0x00, 0x33, 0x00, 0x9d, 0x00, 0x9c, 0x00, 0x3d, 0x00, 0x3c, 0x00, 0x35, 0x00,
    0x2f, 0x00, 0xff, 0x01, 0x00, 0x00, 0x99, 0x00, 0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00,
    0x0a, 0x00, 0x16, 0x00, 0x14, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x1e, 0x00, 0x19, 0x00, 0x18, 0x01,
    0x00, 0x01, 0x01, 0x01, 0x02, 0x01, 0x03, 0x01, 0x04, 0x00, 0x23, 0x00, 0x00, 0x00, 0x16, 0x00,
    0x00, 0x00, 0x17, 0x00, 0x00, 0x00, 0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06,
    0x03, 0x08, 0x07, 0x08, 0x08, 0x08, 0x09, 0x08, 0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05, 0x08,
    0x06, 0x04, 0x01, 0x05, 0x01, 0x06, 0x01, 0x03, 0x03, 0x03, 0x01, 0x03, 0x02, 0x04, 0x02, 0x05,
    0x02, 0x06, 0x02, 0x00, 0x2b, 0x00, 0x09, 0x08, 0x03, 0x04, 0x03, 0x03, 0x03, 0x02, 0x03, 0x01,
    0x00, 0x2d, 0x00, 0x02, 0x01, 0x01, 0x00, 0x33, 0x00, 0x26, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20,
    0xca, 0xe8, 0x0f, 0x92, 0x3d, 0x97, 0x99, 0x68, 0x29, 0xd0, 0xec, 0x57, 0xc1, 0x2d, 0x8d, 0xca,
    0xb6, 0xca, 0xb8, 0xad, 0x2a, 0x25, 0xe9, 0x2b, 0xb1, 0xd1, 0x48, 0xe8, 0x21, 0xe1, 0x62, 0x7b};
static const unsigned int real_nosni_len = 297;

static struct tlspeek_hello hello; /* 16 KiB: keep it off the stack */

/* Append helpers for building synthetic hellos. */
struct buf {
	uint8_t b[40000];
	size_t n;
};

static void
put8(struct buf *b, unsigned v)
{
	b->b[b->n++] = (uint8_t)v;
}

static void
put16(struct buf *b, unsigned v)
{
	put8(b, v >> 8);
	put8(b, v);
}

static void
putmem(struct buf *b, const void *p, size_t n)
{
	if (n == 0)
		return;
	memcpy(b->b + b->n, p, n);
	b->n += n;
}

/* Extension of type t with body p[0..n). */
static void
ext(struct buf *e, unsigned t, const void *p, size_t n)
{
	put16(e, t);
	put16(e, (unsigned)n);
	putmem(e, p, n);
}

/* server_name extension with one host_name entry. */
static void
ext_sni(struct buf *e, const char *name, size_t n)
{
	put16(e, 0);
	put16(e, (unsigned)(n + 5));
	put16(e, (unsigned)(n + 3));
	put8(e, 0);
	put16(e, (unsigned)n);
	putmem(e, name, n);
}

/* The ClientHello handshake message around extension block e. */
static void
handshake(struct buf *hs, const struct buf *e)
{
	size_t body = 2 + 32 + 1 + 4 + 2 + 2 + e->n;

	hs->n = 0;
	put8(hs, 1);
	put8(hs, (unsigned)(body >> 16));
	put16(hs, (unsigned)(body & 0xffff));
	put16(hs, 0x0303);
	for (int i = 0; i < 32; i++)
		put8(hs, (unsigned)i);
	put8(hs, 0);
	put16(hs, 2);
	put16(hs, 0x1301);
	put8(hs, 1);
	put8(hs, 0);
	put16(hs, (unsigned)e->n);
	putmem(hs, e->b, e->n);
}

/* Wrap handshake bytes into records of at most frag bytes. */
static void
records(struct buf *out, const uint8_t *hs, size_t n, size_t frag)
{
	out->n = 0;
	for (size_t off = 0; off < n; off += frag) {
		size_t k = n - off < frag ? n - off : frag;
		put8(out, 22);
		put16(out, 0x0301);
		put16(out, (unsigned)k);
		putmem(out, hs + off, k);
	}
}

static struct buf ebuf, hsbuf, wire, skip;

static enum tlspeek_status
parse_ext(const struct buf *e, size_t *consumed)
{
	handshake(&hsbuf, e);
	records(&wire, hsbuf.b, hsbuf.n, 16384);
	return tlspeek_parse(wire.b, wire.n, &hello, consumed);
}

static void
expect_reason(enum tlspeek_reason r)
{
	size_t c;
	assert_int_equal(parse_ext(&ebuf, &c), TLSPEEK_INVALID);
	assert_int_equal(hello.reason, r);
}

static void
test_real_hello(void **state)
{
	size_t c = 0;

	assert_int_equal(tlspeek_parse(real_hello, real_hello_len, &hello, &c), TLSPEEK_OK);
	assert_int_equal(c, real_hello_len);
	assert_true(hello.has_sni);
	assert_string_equal(hello.sni, "api.allowed.test");
	assert_int_equal(hello.sni_len, 16);
	assert_int_equal(hello.record_version, 0x0301);
	assert_int_equal(hello.client_version, 0x0303);
	assert_true(hello.has_alpn);
	assert_int_equal(hello.alpn_count, 2);
	assert_true(tlspeek_offers_alpn(&hello, "h2"));
	assert_true(tlspeek_offers_alpn(&hello, "http/1.1"));
	assert_false(tlspeek_offers_alpn(&hello, "http/1.0"));
	assert_false(hello.has_ech);
}

static void
test_real_prefixes_need_more(void **state)
{
	size_t c;
	for (size_t n = 0; n < real_hello_len; n++) {
		assert_int_equal(tlspeek_parse(real_hello, n, &hello, &c), TLSPEEK_NEED_MORE);
		assert_int_equal(c, 0);
	}
}

static void
test_bytes_after_hello_not_consumed(void **state)
{
	uint8_t b[sizeof(real_hello) + 8];
	size_t c;

	memcpy(b, real_hello, real_hello_len);
	memset(b + real_hello_len, 0x17, 8);
	assert_int_equal(tlspeek_parse(b, sizeof(b), &hello, &c), TLSPEEK_OK);
	assert_int_equal(c, real_hello_len);
}

static void
test_no_sni(void **state)
{
	size_t c;
	assert_int_equal(tlspeek_parse(real_nosni, real_nosni_len, &hello, &c), TLSPEEK_OK);
	assert_false(hello.has_sni);
	assert_int_equal(hello.sni_len, 0);
	/* a hello without any extension block: also "no SNI" */
	ebuf.n = 0;
	handshake(&hsbuf, &ebuf);
	hsbuf.n -= 2; /* drop the empty extensions length */
	hsbuf.b[3] -= 2;
	records(&wire, hsbuf.b, hsbuf.n, 16384);
	assert_int_equal(tlspeek_parse(wire.b, wire.n, &hello, &c), TLSPEEK_OK);
	assert_false(hello.has_sni);
}

static void
test_fragmented(void **state)
{
	size_t c, hslen = real_hello_len - 5;

	/* the real hello re-cut into 3 records, then into 7-byte records */
	records(&wire, real_hello + 5, hslen, hslen / 3 + 1);
	assert_int_equal(tlspeek_parse(wire.b, wire.n, &hello, &c), TLSPEEK_OK);
	assert_int_equal(hello.records, 3);
	assert_string_equal(hello.sni, "api.allowed.test");
	assert_int_equal(c, wire.n);
	for (size_t n = 0; n < wire.n; n++)
		assert_int_equal(tlspeek_parse(wire.b, n, &hello, &c), TLSPEEK_NEED_MORE);
	records(&wire, real_hello + 5, hslen, 2);
	assert_int_equal(tlspeek_parse(wire.b, wire.n, &hello, &c), TLSPEEK_TOO_LARGE);
	records(&wire, real_hello + 5, hslen, hslen / TLSPEEK_MAX_RECORDS + 1);
	assert_int_equal(tlspeek_parse(wire.b, wire.n, &hello, &c), TLSPEEK_OK);
	assert_string_equal(hello.sni, "api.allowed.test");
}

static void
test_not_tls(void **state)
{
	static const uint8_t http[] = "GET / HTTP/1.1\r\n";
	static const uint8_t sslv2[] = {0x80, 0x2e, 0x01, 0x00, 0x02};
	static const uint8_t ssh[] = "SSH-2.0-OpenSSH_9.2\r\n";
	static const uint8_t appdata[] = {0x17, 0x03, 0x03, 0x00, 0x01, 0x00};
	static const uint8_t bad_major[] = {0x16, 0x02};
	static const uint8_t empty_rec[] = {0x16, 0x03, 0x01, 0x00, 0x00};
	static const uint8_t server_hello[] = {0x16, 0x03, 0x03, 0x00, 0x04, 0x02, 0, 0, 0};
	size_t c;

	assert_int_equal(tlspeek_parse(http, 1, &hello, &c), TLSPEEK_INVALID);
	assert_int_equal(hello.reason, TLSPEEK_R_NOT_TLS);
	assert_int_equal(tlspeek_parse(sslv2, sizeof(sslv2), &hello, &c), TLSPEEK_INVALID);
	assert_int_equal(tlspeek_parse(ssh, sizeof(ssh) - 1, &hello, &c), TLSPEEK_INVALID);
	assert_int_equal(tlspeek_parse(appdata, sizeof(appdata), &hello, &c), TLSPEEK_INVALID);
	assert_int_equal(tlspeek_parse(bad_major, sizeof(bad_major), &hello, &c), TLSPEEK_INVALID);
	assert_int_equal(tlspeek_parse(empty_rec, sizeof(empty_rec), &hello, &c), TLSPEEK_INVALID);
	assert_int_equal(hello.reason, TLSPEEK_R_RECORD);
	assert_int_equal(
	    tlspeek_parse(server_hello, sizeof(server_hello), &hello, &c), TLSPEEK_INVALID);
	assert_int_equal(hello.reason, TLSPEEK_R_NOT_HELLO);
}

static void
test_sni_ok_and_lowercased(void **state)
{
	size_t c;
	ebuf.n = 0;
	ext_sni(&ebuf, "API.Allowed-1.TEST", 18);
	assert_int_equal(parse_ext(&ebuf, &c), TLSPEEK_OK);
	assert_string_equal(hello.sni, "api.allowed-1.test");
}

static void
test_sni_duplicates(void **state)
{
	/* two server_name extensions */
	ebuf.n = 0;
	ext_sni(&ebuf, "api.allowed.test", 16);
	ext_sni(&ebuf, "evil.test", 9);
	expect_reason(TLSPEEK_R_DUP_EXTENSION);
	/* two host_name entries in one list, both orders */
	for (int order = 0; order < 2; order++) {
		const char *a = order ? "evil.test" : "api.allowed.test";
		const char *b = order ? "api.allowed.test" : "evil.test";
		size_t la = strlen(a), lb = strlen(b);
		ebuf.n = 0;
		put16(&ebuf, 0);
		put16(&ebuf, (unsigned)(2 + 3 + la + 3 + lb));
		put16(&ebuf, (unsigned)(3 + la + 3 + lb));
		put8(&ebuf, 0);
		put16(&ebuf, (unsigned)la);
		putmem(&ebuf, a, la);
		put8(&ebuf, 0);
		put16(&ebuf, (unsigned)lb);
		putmem(&ebuf, b, lb);
		expect_reason(TLSPEEK_R_SNI_COUNT);
	}
}

static void
test_sni_malformed(void **state)
{
	static const uint8_t type1[] = {
	    0, 12, 1, 0, 9, 'e', 'v', 'i', 'l', '.', 't', 'e', 's', 't'};
	static const uint8_t overlong[] = {
	    0, 12, 0, 0, 40, 'e', 'v', 'i', 'l', '.', 't', 'e', 's', 't'};
	static const uint8_t empty_list[] = {0, 0};

	ebuf.n = 0;
	ext(&ebuf, 0, type1, sizeof(type1));
	expect_reason(TLSPEEK_R_SNI_TYPE);
	ebuf.n = 0;
	ext(&ebuf, 0, overlong, sizeof(overlong));
	expect_reason(TLSPEEK_R_SNI_MALFORMED);
	ebuf.n = 0;
	ext(&ebuf, 0, empty_list, sizeof(empty_list));
	expect_reason(TLSPEEK_R_SNI_COUNT);
	ebuf.n = 0;
	ext(&ebuf, 0, NULL, 0);
	expect_reason(TLSPEEK_R_SNI_MALFORMED);
}

static void
test_sni_names(void **state)
{
	static const char *const bad[] = {"", "api.allowed.test\0.evil.test", "api.allowed.test.",
	    ".api.allowed.test", "api..allowed.test", "*.allowed.test", "api.allowed.test:443",
	    "under_score.test", "api allowed", "caf\xc3\xa9.test"};
	char name[300];
	size_t c;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t n = i == 1 ? 28 : strlen(bad[i]);
		ebuf.n = 0;
		ext_sni(&ebuf, bad[i], n);
		expect_reason(TLSPEEK_R_SNI_NAME);
	}
	ebuf.n = 0;
	ext_sni(&ebuf, "203.0.113.10", 12);
	expect_reason(TLSPEEK_R_SNI_IP_LITERAL);
	/* 253 bytes in 63-byte labels: fine; 254: refused; a 64-byte label: refused */
	memset(name, 'a', sizeof(name));
	name[63] = name[127] = name[191] = '.';
	ebuf.n = 0;
	ext_sni(&ebuf, name, 253);
	assert_int_equal(parse_ext(&ebuf, &c), TLSPEEK_OK);
	assert_int_equal(hello.sni_len, 253);
	ebuf.n = 0;
	ext_sni(&ebuf, name, 254);
	expect_reason(TLSPEEK_R_SNI_NAME);
	name[63] = 'a';
	ebuf.n = 0;
	ext_sni(&ebuf, name, 100);
	expect_reason(TLSPEEK_R_SNI_NAME);
}

static void
test_alpn_and_markers(void **state)
{
	static const uint8_t alpn[] = {
	    0, 12, 2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
	static const uint8_t alpn_empty_proto[] = {0, 3, 2, 'h', '2', 0};
	static const uint8_t alpn_short[] = {0, 5, 2, 'h', '2'};
	uint8_t grease[16] = {0};
	size_t c;

	ebuf.n = 0;
	ext_sni(&ebuf, "api.allowed.test", 16);
	ext(&ebuf, 0x0010, alpn, sizeof(alpn));
	ext(&ebuf, 0xfe0d, grease, sizeof(grease));
	ext(&ebuf, 0xffce, grease, 4);
	ext(&ebuf, 0x002a, NULL, 0);
	assert_int_equal(parse_ext(&ebuf, &c), TLSPEEK_OK);
	assert_true(hello.has_ech);
	assert_true(hello.has_esni);
	assert_true(hello.has_early_data);
	assert_int_equal(hello.alpn_count, 2);
	assert_int_equal(hello.alpn[1].len, 8);
	assert_memory_equal(hello.alpn[1].ptr, "http/1.1", 8);
	ebuf.n = 0;
	ext(&ebuf, 0x0010, alpn_empty_proto, sizeof(alpn_empty_proto));
	expect_reason(TLSPEEK_R_ALPN);
	ebuf.n = 0;
	ext(&ebuf, 0x0010, alpn_short, sizeof(alpn_short));
	expect_reason(TLSPEEK_R_ALPN);
	/* more protocols than kept: flagged, not an error */
	ebuf.n = 0;
	put16(&ebuf, 0x0010);
	put16(&ebuf, 2 + 2 * 20);
	put16(&ebuf, 2 * 20);
	for (int i = 0; i < 20; i++) {
		put8(&ebuf, 1);
		put8(&ebuf, (unsigned)('a' + i));
	}
	assert_int_equal(parse_ext(&ebuf, &c), TLSPEEK_OK);
	assert_int_equal(hello.alpn_count, TLSPEEK_MAX_ALPN);
	assert_true(hello.alpn_overflow);
}

static void
test_extension_layout(void **state)
{
	size_t c;

	/* any duplicated extension type */
	ebuf.n = 0;
	ext(&ebuf, 0x0017, NULL, 0);
	ext(&ebuf, 0x0017, NULL, 0);
	expect_reason(TLSPEEK_R_DUP_EXTENSION);
	/* pre_shared_key must be last */
	ebuf.n = 0;
	ext(&ebuf, 0x0029, "xx", 2);
	ext_sni(&ebuf, "api.allowed.test", 16);
	expect_reason(TLSPEEK_R_PSK_NOT_LAST);
	ebuf.n = 0;
	ext_sni(&ebuf, "api.allowed.test", 16);
	ext(&ebuf, 0x0029, "xx", 2);
	assert_int_equal(parse_ext(&ebuf, &c), TLSPEEK_OK);
	assert_true(hello.has_psk);
	/* extension length running past the block */
	ebuf.n = 0;
	put16(&ebuf, 0x0017);
	put16(&ebuf, 9);
	expect_reason(TLSPEEK_R_EXTENSIONS);
}

static void
test_trailing_and_size(void **state)
{
	size_t c;
	static struct buf big;

	/* a byte after the hello inside its record */
	ebuf.n = 0;
	ext_sni(&ebuf, "api.allowed.test", 16);
	handshake(&hsbuf, &ebuf);
	put8(&hsbuf, 0);
	records(&wire, hsbuf.b, hsbuf.n, 16384);
	assert_int_equal(tlspeek_parse(wire.b, wire.n, &hello, &c), TLSPEEK_INVALID);
	assert_int_equal(hello.reason, TLSPEEK_R_TRAILING);
	/* a hello claiming more than the cap: refused on its header */
	static const uint8_t huge[] = {0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x01, 0x00, 0x00};
	assert_int_equal(tlspeek_parse(huge, sizeof(huge), &hello, &c), TLSPEEK_TOO_LARGE);
	/* a padded hello just under the cap, over two records: accepted */
	ebuf.n = 0;
	ext_sni(&ebuf, "api.allowed.test", 16);
	size_t pad = TLSPEEK_MAX_HELLO - 4 - 43 - ebuf.n - 4;
	put16(&ebuf, 0x0015);
	put16(&ebuf, (unsigned)pad);
	memset(ebuf.b + ebuf.n, 0, pad);
	ebuf.n += pad;
	handshake(&hsbuf, &ebuf);
	assert_int_equal(hsbuf.n, TLSPEEK_MAX_HELLO);
	records(&big, hsbuf.b, hsbuf.n, 10000);
	assert_int_equal(tlspeek_parse(big.b, big.n, &hello, &c), TLSPEEK_OK);
	assert_string_equal(hello.sni, "api.allowed.test");
	/* one byte more: too large */
	put16(&ebuf, 0x0016);
	put16(&ebuf, 0);
	handshake(&hsbuf, &ebuf);
	records(&big, hsbuf.b, hsbuf.n, 10000);
	assert_int_equal(tlspeek_parse(big.b, big.n, &hello, &c), TLSPEEK_TOO_LARGE);
}

static void
test_alert(void **state)
{
	uint8_t b[16];
	static const uint8_t want[] = {21, 3, 3, 0, 2, 2, 112};

	assert_int_equal(tlspeek_alert_write(b, sizeof(b), 0, TLSPEEK_ALERT_UNRECOGNIZED_NAME), 7);
	assert_memory_equal(b, want, 7);
	assert_int_equal(tlspeek_alert_write(b, sizeof(b), 0x0301, TLSPEEK_ALERT_ACCESS_DENIED), 7);
	assert_int_equal(b[2], 1);
	assert_int_equal(b[6], 49);
	assert_int_equal(tlspeek_alert_write(b, 6, 0, TLSPEEK_ALERT_HANDSHAKE_FAILURE), -1);
	assert_string_equal(tlspeek_reason_str(TLSPEEK_R_SNI_COUNT), "sni_count");
}

/* RFC 8446 4.1.3 */
static const uint8_t hrr_rand[32] = {0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d,
    0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91, 0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e,
    0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c};

/* A ServerHello handshake message (version, random, session id, suite, no extensions...). */
static void
server_hello(struct buf *hs, const uint8_t *random, unsigned hs_type)
{
	static const uint8_t tail[] = {
	    0x00, 0x13, 0x01, 0x00, 0x00, 0x06, 0x00, 0x2b, 0x00, 0x02, 0x03, 0x04};
	size_t body = 2 + 32 + sizeof(tail);

	hs->n = 0;
	put8(hs, hs_type);
	put8(hs, (unsigned)(body >> 16));
	put16(hs, (unsigned)(body & 0xffff));
	put16(hs, 0x0303);
	putmem(hs, random, 32);
	putmem(hs, tail, sizeof(tail));
}

static enum tlspeek_status
first(const struct buf *b, size_t n, enum tlspeek_server *kind, enum tlspeek_reason *r)
{
	return tlspeek_server_first(b->b, n, kind, r);
}

static void
test_server_first(void **state)
{
	static const uint8_t plain[32] = {1, 2, 3};
	static const uint8_t alert[] = {21, 3, 3, 0, 2, 2, 40};
	enum tlspeek_server kind;
	enum tlspeek_reason r;

	/* a ServerHello: decided once its random is in, every shorter prefix waits */
	server_hello(&hsbuf, plain, 2);
	records(&wire, hsbuf.b, hsbuf.n, 16384);
	assert_int_equal(first(&wire, wire.n, &kind, &r), TLSPEEK_OK);
	assert_int_equal(kind, TLSPEEK_SERVER_HELLO);
	assert_int_equal(first(&wire, 5 + 38, &kind, &r), TLSPEEK_OK);
	for (size_t n = 0; n < 5 + 38; n++)
		assert_int_equal(first(&wire, n, &kind, &r), TLSPEEK_NEED_MORE);
	/* the HelloRetryRequest random */
	server_hello(&hsbuf, hrr_rand, 2);
	records(&wire, hsbuf.b, hsbuf.n, 16384);
	assert_int_equal(first(&wire, wire.n, &kind, &r), TLSPEEK_OK);
	assert_int_equal(kind, TLSPEEK_SERVER_HRR);
	/* one byte of the random changed: an ordinary ServerHello */
	wire.b[5 + 6 + 31] ^= 1;
	assert_int_equal(first(&wire, wire.n, &kind, &r), TLSPEEK_OK);
	assert_int_equal(kind, TLSPEEK_SERVER_HELLO);
	/* fragmented over records: the same answer, every prefix waits */
	records(&wire, hsbuf.b, hsbuf.n, 5);
	assert_int_equal(first(&wire, wire.n, &kind, &r), TLSPEEK_OK);
	assert_int_equal(kind, TLSPEEK_SERVER_HRR);
	for (size_t n = 0; n < 7 * 10 + 5 + 3; n++)
		assert_int_equal(first(&wire, n, &kind, &r), TLSPEEK_NEED_MORE);
	/* too finely cut to tell within TLSPEEK_MAX_RECORDS records, and never waits past the bound */
	records(&wire, hsbuf.b, hsbuf.n, 1);
	assert_true(wire.n >= TLSPEEK_SERVER_FIRST_MAX);
	assert_int_equal(first(&wire, wire.n, &kind, &r), TLSPEEK_TOO_LARGE);
	assert_int_equal(first(&wire, TLSPEEK_SERVER_FIRST_MAX, &kind, &r), TLSPEEK_TOO_LARGE);
	/* an alert: the server refused the hello */
	memcpy(wire.b, alert, sizeof(alert));
	assert_int_equal(first(&wire, sizeof(alert), &kind, &r), TLSPEEK_OK);
	assert_int_equal(kind, TLSPEEK_SERVER_ALERT);
	wire.b[4] = 3; /* an alert record is 2 bytes */
	assert_int_equal(first(&wire, sizeof(alert), &kind, &r), TLSPEEK_INVALID);
	/* not TLS: judged on the first byte */
	memcpy(wire.b, "HTTP/1.1 400", 12);
	assert_int_equal(first(&wire, 1, &kind, &r), TLSPEEK_INVALID);
	assert_int_equal(r, TLSPEEK_R_NOT_TLS);
	/* a change_cipher_spec or application data first is no answer to a hello */
	static const uint8_t ccs[] = {20, 3, 3, 0, 1, 1};
	memcpy(wire.b, ccs, sizeof(ccs));
	assert_int_equal(first(&wire, sizeof(ccs), &kind, &r), TLSPEEK_INVALID);
	/* another handshake message first */
	server_hello(&hsbuf, hrr_rand, 11);
	records(&wire, hsbuf.b, hsbuf.n, 16384);
	assert_int_equal(first(&wire, 6, &kind, &r), TLSPEEK_INVALID);
	assert_int_equal(r, TLSPEEK_R_NOT_SERVER_HELLO);
	/* a ServerHello too short for its random */
	server_hello(&hsbuf, hrr_rand, 2);
	hsbuf.b[1] = hsbuf.b[2] = 0;
	hsbuf.b[3] = 20;
	records(&wire, hsbuf.b, hsbuf.n, 16384);
	assert_int_equal(first(&wire, wire.n, &kind, &r), TLSPEEK_INVALID);
	assert_int_equal(r, TLSPEEK_R_SERVER_HELLO);
	/* an alert after a handshake record */
	server_hello(&hsbuf, hrr_rand, 2);
	records(&wire, hsbuf.b, 3, 16384);
	memcpy(wire.b + wire.n, alert, sizeof(alert));
	assert_int_equal(first(&wire, wire.n + sizeof(alert), &kind, &r), TLSPEEK_INVALID);
	assert_int_equal(r, TLSPEEK_R_RECORD);
	assert_string_equal(tlspeek_reason_str(TLSPEEK_R_NOT_SERVER_HELLO), "not_server_hello");
}

/* The client's second flight: optional records, then the real hello. */
static void
retry_wire(struct buf *b, const uint8_t *pre, size_t npre)
{
	b->n = 0;
	putmem(b, pre, npre);
	putmem(b, real_hello, real_hello_len);
}

static void
test_parse_retry(void **state)
{
	static const uint8_t ccs[] = {20, 3, 3, 0, 1, 1};
	static const uint8_t ccs2[] = {20, 3, 3, 0, 1, 1, 20, 3, 3, 0, 1, 1};
	static const uint8_t badccs[] = {20, 3, 3, 0, 1, 2};
	static const uint8_t longccs[] = {20, 3, 3, 0, 2, 1, 1};
	static const uint8_t early[] = {23, 3, 3, 0, 4, 9, 9, 9, 9, 20, 3, 3, 0, 1, 1};
	static const uint8_t alert[] = {21, 3, 3, 0, 2, 2, 48};
	size_t c;

	/* the second hello alone, and after one change_cipher_spec */
	retry_wire(&wire, NULL, 0);
	assert_int_equal(tlspeek_parse_retry(wire.b, wire.n, false, &hello, &c), TLSPEEK_OK);
	assert_int_equal(c, real_hello_len);
	assert_string_equal(hello.sni, "api.allowed.test");
	retry_wire(&wire, ccs, sizeof(ccs));
	assert_int_equal(tlspeek_parse_retry(wire.b, wire.n, false, &hello, &c), TLSPEEK_OK);
	assert_int_equal(c, sizeof(ccs) + real_hello_len);
	assert_string_equal(hello.sni, "api.allowed.test");
	for (size_t n = 0; n < wire.n; n++) {
		assert_int_equal(
		    tlspeek_parse_retry(wire.b, n, false, &hello, &c), TLSPEEK_NEED_MORE);
		assert_int_equal(c, 0);
	}
	/* bytes after the hello are not consumed */
	put8(&wire, 23);
	assert_int_equal(tlspeek_parse_retry(wire.b, wire.n, false, &hello, &c), TLSPEEK_OK);
	assert_int_equal(c, wire.n - 1);
	/* the second hello gets every check of the first */
	retry_wire(&wire, ccs, sizeof(ccs));
	wire.b[sizeof(ccs) + 5] = 2; /* not a ClientHello */
	assert_int_equal(tlspeek_parse_retry(wire.b, wire.n, false, &hello, &c), TLSPEEK_INVALID);
	assert_int_equal(hello.reason, TLSPEEK_R_NOT_HELLO);
	/* two change_cipher_spec, another value, another length: refused */
	retry_wire(&wire, ccs2, sizeof(ccs2));
	assert_int_equal(tlspeek_parse_retry(wire.b, wire.n, false, &hello, &c), TLSPEEK_INVALID);
	assert_int_equal(hello.reason, TLSPEEK_R_BEFORE_RETRY);
	retry_wire(&wire, badccs, sizeof(badccs));
	assert_int_equal(tlspeek_parse_retry(wire.b, wire.n, false, &hello, &c), TLSPEEK_INVALID);
	retry_wire(&wire, longccs, sizeof(longccs));
	assert_int_equal(tlspeek_parse_retry(wire.b, wire.n, false, &hello, &c), TLSPEEK_INVALID);
	/* an alert (the client gave up) is no hello */
	retry_wire(&wire, alert, sizeof(alert));
	assert_int_equal(tlspeek_parse_retry(wire.b, wire.n, false, &hello, &c), TLSPEEK_INVALID);
	/* rejected 0-RTT data is skipped only when the first hello offered early data */
	retry_wire(&wire, early, sizeof(early));
	assert_int_equal(tlspeek_parse_retry(wire.b, wire.n, false, &hello, &c), TLSPEEK_INVALID);
	assert_int_equal(hello.reason, TLSPEEK_R_BEFORE_RETRY);
	assert_int_equal(tlspeek_parse_retry(wire.b, wire.n, true, &hello, &c), TLSPEEK_OK);
	assert_int_equal(c, sizeof(early) + real_hello_len);
	assert_string_equal(hello.sni, "api.allowed.test");
	/* ... and at most TLSPEEK_MAX_SKIP bytes of it */
	skip.n = 0;
	while (skip.n + 5 + 1000 <= TLSPEEK_MAX_SKIP) {
		put8(&skip, 23);
		put16(&skip, 0x0303);
		put16(&skip, 1000);
		memset(skip.b + skip.n, 7, 1000);
		skip.n += 1000;
	}
	putmem(&skip, real_hello, real_hello_len);
	assert_int_equal(tlspeek_parse_retry(skip.b, skip.n, true, &hello, &c), TLSPEEK_OK);
	skip.n -= real_hello_len;
	put8(&skip, 23);
	put16(&skip, 0x0303);
	put16(&skip, 1000);
	memset(skip.b + skip.n, 7, 1000);
	skip.n += 1000;
	putmem(&skip, real_hello, real_hello_len);
	assert_int_equal(tlspeek_parse_retry(skip.b, skip.n, true, &hello, &c), TLSPEEK_TOO_LARGE);
}

static void
test_sni_ext(void **state)
{
	char name[TLSPEEK_MAX_HOSTNAME + 1];
	size_t n = 99;
	static struct buf e;

	/* the body of the real hello's server_name extension */
	static const uint8_t body[] = {0x00, 0x13, 0x00, 0x00, 0x10, 'A', 'p', 'i', '.', 'a', 'l',
	    'l', 'o', 'w', 'e', 'd', '.', 't', 'e', 's', 't'};
	assert_int_equal(tlspeek_sni_ext(body, sizeof(body), name, &n), TLSPEEK_R_NONE);
	assert_string_equal(name, "api.allowed.test");
	assert_int_equal(n, 16);
	/* the same rules as in tlspeek_parse */
	assert_int_equal(
	    tlspeek_sni_ext(body, sizeof(body) - 1, name, &n), TLSPEEK_R_SNI_MALFORMED);
	assert_string_equal(name, "");
	assert_int_equal(n, 0);
	assert_int_equal(tlspeek_sni_ext(NULL, 0, name, &n), TLSPEEK_R_SNI_MALFORMED);
	e.n = 0;
	put16(&e, 0);
	assert_int_equal(tlspeek_sni_ext(e.b, e.n, name, &n), TLSPEEK_R_SNI_COUNT);
	e.n = 0;
	put16(&e, 2 * (3 + 4));
	for (int i = 0; i < 2; i++) {
		put8(&e, 0);
		put16(&e, 4);
		putmem(&e, "a.te", 4);
	}
	assert_int_equal(tlspeek_sni_ext(e.b, e.n, name, &n), TLSPEEK_R_SNI_COUNT);
	e.n = 0;
	put16(&e, 3 + 8);
	put8(&e, 0);
	put16(&e, 8);
	putmem(&e, "10.0.0.1", 8);
	assert_int_equal(tlspeek_sni_ext(e.b, e.n, name, &n), TLSPEEK_R_SNI_IP_LITERAL);
	assert_string_equal(name, "");
	e.n = 0;
	put16(&e, 3 + 11);
	put8(&e, 0);
	put16(&e, 11);
	putmem(&e, "a.test\0evil", 11);
	assert_int_equal(tlspeek_sni_ext(e.b, e.n, name, &n), TLSPEEK_R_SNI_NAME);
}

static void
test_cert_alerts(void **state)
{
	assert_string_equal(tlspeek_cert_alert_str(48), "unknown_ca");
	assert_string_equal(tlspeek_cert_alert_str(42), "bad_certificate");
	assert_string_equal(tlspeek_cert_alert_str(46), "certificate_unknown");
	assert_string_equal(tlspeek_cert_alert_str(45), "certificate_expired");
	assert_null(tlspeek_cert_alert_str(40));  /* handshake_failure */
	assert_null(tlspeek_cert_alert_str(47));  /* illegal_parameter */
	assert_null(tlspeek_cert_alert_str(120)); /* no_application_protocol */
	assert_null(tlspeek_cert_alert_str(0));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_real_hello),
	    cmocka_unit_test(test_real_prefixes_need_more),
	    cmocka_unit_test(test_bytes_after_hello_not_consumed),
	    cmocka_unit_test(test_no_sni),
	    cmocka_unit_test(test_fragmented),
	    cmocka_unit_test(test_not_tls),
	    cmocka_unit_test(test_sni_ok_and_lowercased),
	    cmocka_unit_test(test_sni_duplicates),
	    cmocka_unit_test(test_sni_malformed),
	    cmocka_unit_test(test_sni_names),
	    cmocka_unit_test(test_alpn_and_markers),
	    cmocka_unit_test(test_extension_layout),
	    cmocka_unit_test(test_trailing_and_size),
	    cmocka_unit_test(test_alert),
	    cmocka_unit_test(test_server_first),
	    cmocka_unit_test(test_parse_retry),
	    cmocka_unit_test(test_sni_ext),
	    cmocka_unit_test(test_cert_alerts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
