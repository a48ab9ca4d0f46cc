/*
 * Unit tests of vault/httpwire: byte fixtures for every smuggling case of
 * catalogue section 5 (EX-110..146), pipelining, Expect: 100-continue,
 * response framing (HEAD/204/304/1xx/101/close), the chunked decoder under
 * every split, the head writer and the path ambiguity check.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "vault/httpwire.h"

#define S(lit) (const uint8_t *)(lit), sizeof(lit) - 1

static struct httpwire_request req;
static struct httpwire_response resp;
static struct httpwire_header hdrs[HTTPWIRE_MAX_HEADERS + 8];
static uint8_t big[HTTPWIRE_MAX_HEAD_BYTES * 3];

static enum httpwire_status
preq(const uint8_t *b, size_t n, size_t *consumed)
{
	return httpwire_parse_request(b, n, &req, hdrs, sizeof(hdrs) / sizeof(hdrs[0]), consumed);
}

static enum httpwire_status
presp(const uint8_t *b, size_t n, bool head, size_t *consumed)
{
	return httpwire_parse_response(
	    b, n, head, &resp, hdrs, sizeof(hdrs) / sizeof(hdrs[0]), consumed);
}

static bool
veq(struct httpwire_view v, const char *s)
{
	return v.len == strlen(s) && memcmp(v.ptr, s, v.len) == 0;
}

/* A request fixture that must be refused with a given error. */
struct bad_req {
	const char *bytes;
	size_t len;
	enum httpwire_status st;
	enum httpwire_error err;
};

#define BAD(lit, e)                                                                                \
	{                                                                                          \
		lit, sizeof(lit) - 1, HTTPWIRE_INVALID, e                                          \
	}
#define H "Host: api.allowed.test\r\n"

static const struct bad_req bad_requests[] = {
    /* EX-110 CL.TE, EX-111 TE.CL */
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n"
        "0\r\n\r\nGET /admin HTTP/1.1\r\n" H "\r\n",
        HTTPWIRE_E_CL_TE),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n",
        HTTPWIRE_E_CL_TE),
    /* EX-112 TE obfuscations */
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding: chunked\t\r\n\r\n", HTTPWIRE_E_FIELD_VALUE),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding: chunked \r\n\r\n", HTTPWIRE_E_FIELD_VALUE),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding:\tchunked\r\n\r\n", HTTPWIRE_E_FIELD_VALUE),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding : chunked\r\n\r\n", HTTPWIRE_E_FIELD_NAME),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding: xchunked\r\n\r\n",
        HTTPWIRE_E_TRANSFER_ENCODING),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding: chunked, identity\r\n\r\n",
        HTTPWIRE_E_TRANSFER_ENCODING),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding: identity, chunked\r\n\r\n",
        HTTPWIRE_E_TRANSFER_ENCODING),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n",
        HTTPWIRE_E_TRANSFER_ENCODING),
    BAD("POST /v1/x HTTP/1.1\r\n" H
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        HTTPWIRE_E_TRANSFER_ENCODING),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding:\x0b"
        "chunked\r\n\r\n",
        HTTPWIRE_E_FIELD_VALUE),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding: \"chunked\"\r\n\r\n",
        HTTPWIRE_E_TRANSFER_ENCODING),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding: chunked;ext=1\r\n\r\n",
        HTTPWIRE_E_TRANSFER_ENCODING),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding: chunked, gzip\r\n\r\n",
        HTTPWIRE_E_TRANSFER_ENCODING),
    /* EX-116: TE on HTTP/1.0, unknown coding */
    BAD("POST /v1/x HTTP/1.0\r\n" H "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        HTTPWIRE_E_TRANSFER_ENCODING),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Transfer-Encoding: gzip\r\n\r\n",
        HTTPWIRE_E_TRANSFER_ENCODING),
    /* EX-113 duplicate CL, even identical */
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: 34\r\nContent-Length: 0\r\n\r\n",
        HTTPWIRE_E_CONTENT_LENGTH),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: 5, 5\r\n\r\n", HTTPWIRE_E_CONTENT_LENGTH),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: 1,1\r\n\r\n", HTTPWIRE_E_CONTENT_LENGTH),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: 5\r\ncontent-length: 5\r\n\r\n",
        HTTPWIRE_E_CONTENT_LENGTH),
    /* EX-114 malformed CL */
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: +5\r\n\r\n", HTTPWIRE_E_CONTENT_LENGTH),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: -1\r\n\r\n", HTTPWIRE_E_CONTENT_LENGTH),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: 0x5\r\n\r\n", HTTPWIRE_E_CONTENT_LENGTH),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: 5 \r\n\r\n", HTTPWIRE_E_FIELD_VALUE),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: 05\r\n\r\n", HTTPWIRE_E_CONTENT_LENGTH),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: 5a\r\n\r\n", HTTPWIRE_E_CONTENT_LENGTH),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: 18446744073709551616\r\n\r\n",
        HTTPWIRE_E_CONTENT_LENGTH),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length: 99999999999999999999\r\n\r\n",
        HTTPWIRE_E_CONTENT_LENGTH),
    BAD("POST /v1/x HTTP/1.1\r\n" H "Content-Length:\r\n\r\n", HTTPWIRE_E_CONTENT_LENGTH),
    /* EX-117 bare LF, bare CR, mixed */
    BAD("GET /v1/x HTTP/1.1\nHost: api.allowed.test\nX: y\n\n", HTTPWIRE_E_LINE_ENDING),
    BAD("GET /v1/x HTTP/1.1\r\nHost: api.allowed.test\rX-Evil: 1\r\n\r\n", HTTPWIRE_E_LINE_ENDING),
    BAD("GET /v1/x HTTP/1.1\r\n" H "X: y\n\r\n", HTTPWIRE_E_LINE_ENDING),
    BAD("GET /v1/x HTTP/1.1\r\n" H "\n", HTTPWIRE_E_LINE_ENDING),
    /* EX-121 duplicate Host, EX-123 missing Host, EX-124 Host syntax */
    BAD("GET /v1/x HTTP/1.1\r\n" H "Host: evil.test\r\n\r\n", HTTPWIRE_E_HOST),
    BAD("GET /v1/x HTTP/1.1\r\nHost: evil.test\r\n" H "\r\n", HTTPWIRE_E_HOST),
    BAD("GET /v1/x HTTP/1.1\r\n" H H "\r\n", HTTPWIRE_E_HOST),
    BAD("GET /v1/x HTTP/1.1\r\nHost: api.allowed.test, evil.test\r\n\r\n", HTTPWIRE_E_HOST),
    BAD("GET /v1/x HTTP/1.1\r\n\r\n", HTTPWIRE_E_HOST),
    BAD("GET /v1/x HTTP/1.0\r\n\r\n", HTTPWIRE_E_HOST),
    BAD("GET /v1/x HTTP/1.1\r\nHost: user@api.allowed.test\r\n\r\n", HTTPWIRE_E_HOST),
    BAD("GET /v1/x HTTP/1.1\r\nHost: api.allowed.test:443@evil.test\r\n\r\n", HTTPWIRE_E_HOST),
    BAD("GET /v1/x HTTP/1.1\r\nHost: api.allowed.test#x\r\n\r\n", HTTPWIRE_E_HOST),
    BAD("GET /v1/x HTTP/1.1\r\nHost: \r\n\r\n", HTTPWIRE_E_HOST),
    BAD("GET /v1/x HTTP/1.1\r\nHost: api.allowed.test\x00.evil.test\r\n\r\n",
        HTTPWIRE_E_FIELD_VALUE),
    /* EX-125 CONNECT, EX-126/141 target forms */
    BAD("CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n", HTTPWIRE_E_CONNECT),
    BAD("CONNECT /x HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_CONNECT),
    BAD("GET http://evil.test/x HTTP/1.1\r\nHost: evil.test\r\n\r\n", HTTPWIRE_E_TARGET),
    BAD("GET api.allowed.test:443 HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_TARGET),
    BAD("OPTIONS * HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_TARGET),
    BAD("GET  HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_START_LINE),
    BAD("GET v1/x HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_TARGET),
    BAD("GET /v1/x#frag HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_TARGET),
    BAD("GET /v1/%zz HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_TARGET),
    BAD("GET /v1/% HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_TARGET),
    BAD("GET /v1/\x80 HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_TARGET),
    BAD("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", HTTPWIRE_E_VERSION),
    /* EX-129 versions */
    BAD("GET /\r\n", HTTPWIRE_E_START_LINE),
    BAD("GET /v1/x HTTP/2.0\r\n" H "\r\n", HTTPWIRE_E_VERSION),
    BAD("GET /v1/x http/1.1\r\n" H "\r\n", HTTPWIRE_E_START_LINE),
    BAD("GET /v1/x HTTP/1.1 \r\n" H "\r\n", HTTPWIRE_E_VERSION),
    BAD("GET  /v1/x HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_START_LINE),
    BAD("GET /v1/x HTTP/1.10\r\n" H "\r\n", HTTPWIRE_E_VERSION),
    BAD("\r\nGET /v1/x HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_START_LINE),
    /* EX-132 obs-fold, EX-133 whitespace in names */
    BAD("GET /v1/x HTTP/1.1\r\n" H " .evil.test\r\n\r\n", HTTPWIRE_E_OBS_FOLD),
    BAD("GET /v1/x HTTP/1.1\r\n" H "Authorization: Bearer\r\n sk-fake-0\r\n\r\n",
        HTTPWIRE_E_OBS_FOLD),
    BAD("GET /v1/x HTTP/1.1\r\n" H "X-A: a\r\n\tb\r\n\r\n", HTTPWIRE_E_OBS_FOLD),
    BAD("GET /v1/x HTTP/1.1\r\n Host: evil.test\r\n" H "\r\n", HTTPWIRE_E_OBS_FOLD),
    BAD("GET /v1/x HTTP/1.1\r\nHost : evil.test\r\n\r\n", HTTPWIRE_E_FIELD_NAME),
    BAD("GET /v1/x HTTP/1.1\r\n" H "Authorization\t: x\r\n\r\n", HTTPWIRE_E_FIELD_NAME),
    BAD("GET /v1/x HTTP/1.1\r\n" H ": novalue\r\n\r\n", HTTPWIRE_E_FIELD_NAME),
    BAD("GET /v1/x HTTP/1.1\r\n" H "NoColon\r\n\r\n", HTTPWIRE_E_FIELD_NAME),
    /* EX-134 control and 8-bit bytes */
    BAD("GET /v1/x HTTP/1.1\r\n" H "X-A\x00"
        "B: 1\r\n\r\n",
        HTTPWIRE_E_FIELD_NAME),
    BAD("GET /v1/x HTTP/1.1\r\n" H "X-A: a\x00"
        "b\r\n\r\n",
        HTTPWIRE_E_FIELD_VALUE),
    BAD("GET /v1/x HTTP/1.1\r\n" H "X-A: a\x7f\r\n\r\n", HTTPWIRE_E_FIELD_VALUE),
    BAD("GET /v1/x HTTP/1.1\r\n" H "X-A: \x80\xff\r\n\r\n", HTTPWIRE_E_FIELD_VALUE),
    BAD("GET /v1/x HTTP/1.1\r\n" H "X-A: a\x0b\r\n\r\n", HTTPWIRE_E_FIELD_VALUE),
    BAD("GET /v1/x HTTP/1.1\r\n" H "X-A: a\x0c\r\n\r\n", HTTPWIRE_E_FIELD_VALUE),
    BAD("GET /v1/x HTTP/1.1\r\n" H "X-A: \x1b[31m\r\n\r\n", HTTPWIRE_E_FIELD_VALUE),
    BAD("GE\x00T /v1/x HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_METHOD),
    BAD("GET\t/v1/x HTTP/1.1\r\n" H "\r\n", HTTPWIRE_E_METHOD),
    /* Expect other than 100-continue */
    BAD("POST /v1/x HTTP/1.1\r\n" H "Expect: 200-ok\r\nContent-Length: 1\r\n\r\n",
        HTTPWIRE_E_EXPECT),
};

static void
test_request_rejections(void **state)
{
	size_t c;

	for (size_t i = 0; i < sizeof(bad_requests) / sizeof(bad_requests[0]); i++) {
		const struct bad_req *b = &bad_requests[i];
		enum httpwire_status st = preq((const uint8_t *)b->bytes, b->len, &c);
		if (st != b->st || req.error != b->err)
			fail_msg("fixture %zu: status %d error %s, want %d %s", i, st,
			    httpwire_error_str(req.error), b->st, httpwire_error_str(b->err));
		assert_int_equal(c, 0);
	}
}

static void
test_request_ok(void **state)
{
	size_t c;
	static const char r[] = "GET /v1/x?a=1&b=%2F HTTP/1.1\r\nHost: api.allowed.test\r\n"
	                        "Accept:  */*  \r\nX-Empty:\r\n\r\n";

	assert_int_equal(preq(S(r), &c), HTTPWIRE_OK);
	assert_int_equal(c, sizeof(r) - 1);
	assert_true(veq(req.method, "GET"));
	assert_true(veq(req.target, "/v1/x?a=1&b=%2F"));
	assert_true(veq(req.path, "/v1/x"));
	assert_true(veq(req.host, "api.allowed.test"));
	assert_true(veq(req.start_line, "GET /v1/x?a=1&b=%2F HTTP/1.1"));
	assert_int_equal(req.version_minor, 1);
	assert_int_equal(req.nheaders, 3);
	assert_true(veq(req.headers[1].value, "*/*"));
	assert_int_equal(req.headers[2].value.len, 0);
	assert_int_equal(req.framing, HTTPWIRE_FRAME_NONE);
	assert_true(req.keep_alive);
	assert_false(req.expect_continue);
	/* every strict prefix is incomplete, never invalid */
	for (size_t n = 0; n < sizeof(r) - 1; n++) {
		assert_int_equal(preq((const uint8_t *)r, n, &c), HTTPWIRE_NEED_MORE);
		assert_int_equal(c, 0);
	}
	/* TE chunked, any case; lowercase method is a token (policy compares case) */
	assert_int_equal(
	    preq(S("post /v1/x HTTP/1.1\r\n" H "Transfer-Encoding: CHUNKED\r\n\r\n"), &c),
	    HTTPWIRE_OK);
	assert_int_equal(req.framing, HTTPWIRE_FRAME_CHUNKED);
	assert_int_equal(
	    preq(S("GET /v1/x HTTP/1.1\r\nHost: [::1]:8443\r\n\r\n"), &c), HTTPWIRE_OK);
	assert_int_equal(preq(S("GET /v1/x HTTP/1.1\r\nhOST: api.allowed.test\r\n"
	                        "Content-Length:  0\r\nUpgrade: websocket\r\n\r\n"),
	                     &c),
	    HTTPWIRE_OK);
	assert_int_equal(req.framing, HTTPWIRE_FRAME_LENGTH);
	assert_int_equal(req.content_length, 0);
	assert_true(req.upgrade);
}

static void
test_keep_alive_flags(void **state)
{
	size_t c;

	assert_int_equal(
	    preq(S("GET / HTTP/1.1\r\n" H "Connection: Keep-Alive, CLOSE\r\n\r\n"), &c),
	    HTTPWIRE_OK);
	assert_false(req.keep_alive);
	assert_int_equal(preq(S("GET / HTTP/1.0\r\n" H "\r\n"), &c), HTTPWIRE_OK);
	assert_int_equal(req.version_minor, 0);
	assert_false(req.keep_alive);
	assert_int_equal(
	    preq(S("GET / HTTP/1.0\r\n" H "Connection: keep-alive\r\n\r\n"), &c), HTTPWIRE_OK);
	assert_true(req.keep_alive);
}

static void
test_pipelined(void **state)
{
	/* EX-119: three requests in one write, each parsed on its own */
	static const char r[] = "GET /v1/x HTTP/1.1\r\n" H "\r\n"
	                        "GET /v2/admin HTTP/1.1\r\n" H "\r\n"
	                        "DELETE /v1/x HTTP/1.1\r\n" H "\r\n";
	static const char *const want[] = {"GET /v1/x", "GET /v2/admin", "DELETE /v1/x"};
	const uint8_t *p = (const uint8_t *)r;
	size_t left = sizeof(r) - 1, c;

	for (int i = 0; i < 3; i++) {
		assert_int_equal(preq(p, left, &c), HTTPWIRE_OK);
		assert_int_equal(req.start_line.len, strlen(want[i]) + 9);
		assert_memory_equal(req.start_line.ptr, want[i], strlen(want[i]));
		assert_int_equal(req.nheaders, 1);
		p += c;
		left -= c;
	}
	assert_int_equal(left, 0);
}

static void
test_expect_continue_and_cl0(void **state)
{
	/* EX-130 and EX-118: the declared body is the body, whatever it holds */
	static const char r[] = "POST /v1/x HTTP/1.1\r\n" H "Expect: 100-Continue\r\n"
	                        "Content-Length: 44\r\n\r\n"
	                        "GET /admin HTTP/1.1\r\nHost: api.allowed.t\r\n\r\n"
	                        "GET /v1/y HTTP/1.1\r\n" H "\r\n";
	struct httpwire_body b;
	size_t c, bc;

	assert_int_equal(preq(S(r), &c), HTTPWIRE_OK);
	assert_true(req.expect_continue);
	assert_int_equal(req.framing, HTTPWIRE_FRAME_LENGTH);
	assert_int_equal(req.content_length, 44);
	httpwire_body_init(&b, req.framing, req.content_length, 0);
	assert_int_equal(
	    httpwire_body_feed(&b, (const uint8_t *)r + c, sizeof(r) - 1 - c, &bc, NULL, NULL),
	    HTTPWIRE_OK);
	assert_int_equal(bc, 44);
	assert_int_equal(
	    preq((const uint8_t *)r + c + bc, sizeof(r) - 1 - c - bc, &c), HTTPWIRE_OK);
	assert_true(veq(req.path, "/v1/y"));
}

static void
test_limits(void **state)
{
	size_t c, n;

	/* one huge header: head over the cap */
	n = (size_t)snprintf((char *)big, sizeof(big), "GET / HTTP/1.1\r\n" H "X-Big: ");
	memset(big + n, 'a', HTTPWIRE_MAX_HEAD_BYTES);
	n += HTTPWIRE_MAX_HEAD_BYTES;
	memcpy(big + n, "\r\n\r\n", 4);
	assert_int_equal(preq(big, n + 4, &c), HTTPWIRE_TOO_LARGE);
	assert_int_equal(req.error, HTTPWIRE_E_HEAD_TOO_LARGE);
	/* incomplete and already at the cap */
	assert_int_equal(preq(big, HTTPWIRE_MAX_HEAD_BYTES, &c), HTTPWIRE_TOO_LARGE);
	assert_int_equal(preq(big, HTTPWIRE_MAX_HEAD_BYTES - 1, &c), HTTPWIRE_NEED_MORE);
	/* a request line of 1 MB (EX-131) */
	memcpy(big, "GET /", 5);
	memset(big + 5, 'a', sizeof(big) - 5);
	assert_int_equal(preq(big, sizeof(big), &c), HTTPWIRE_TOO_LARGE);
	/* HTTPWIRE_MAX_HEADERS fields pass, one more does not */
	for (int extra = 0; extra < 2; extra++) {
		n = (size_t)snprintf((char *)big, sizeof(big), "GET / HTTP/1.1\r\n" H);
		for (int i = 0; i < HTTPWIRE_MAX_HEADERS - 1 + extra; i++)
			n += (size_t)snprintf((char *)big + n, sizeof(big) - n, "X-%d: v\r\n", i);
		n += (size_t)snprintf((char *)big + n, sizeof(big) - n, "\r\n");
		assert_int_equal(preq(big, n, &c), extra ? HTTPWIRE_TOO_LARGE : HTTPWIRE_OK);
		if (extra)
			assert_int_equal(req.error, HTTPWIRE_E_TOO_MANY_FIELDS);
	}
	/* the caller's capacity is a limit too */
	assert_int_equal(
	    httpwire_parse_request(S("GET / HTTP/1.1\r\n" H "A: 1\r\n\r\n"), &req, hdrs, 1, &c),
	    HTTPWIRE_TOO_LARGE);
}

/* The request line is told whatever the status, exactly when it was whole and valid. */
static void
test_request_line_of_partial_heads(void **state)
{
	static const struct {
		const char *b;
		enum httpwire_status st;
		const char *method, *path; /* path NULL: not told */
	} cases[] = {
	    {"POST /policy?x=1 HTTP/1.1\r\nHost: a\r\nX-A: b", HTTPWIRE_NEED_MORE, "POST",
	        "/policy"},
	    {"PUT /p HTTP/1.0\r\n", HTTPWIRE_NEED_MORE, "PUT", "/p"},
	    {"PATCH /p HTTP/1.1\r\nX-A: b\r\n\r\n", HTTPWIRE_INVALID, "PATCH", "/p"}, /* no Host */
	    {"DELETE /p HTTP/1.1\r\nBad Name: b\r\n", HTTPWIRE_INVALID, "DELETE", "/p"},
	    {"POST /pol", HTTPWIRE_NEED_MORE, NULL, NULL},
	    {"POST http://a/p HTTP/1.1\r\n" H "\r\n", HTTPWIRE_INVALID, NULL, NULL},
	    {"CONNECT a:443 HTTP/1.1\r\n" H "\r\n", HTTPWIRE_INVALID, NULL, NULL},
	    {"POST /p HTTP/2\r\n" H "\r\n", HTTPWIRE_INVALID, NULL, NULL},
	};
	size_t c, n;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(
		    preq((const uint8_t *)cases[i].b, strlen(cases[i].b), &c), cases[i].st);
		if (cases[i].path == NULL) {
			assert_null(req.path.ptr);
			continue;
		}
		assert_non_null(req.path.ptr);
		assert_true(veq(req.method, cases[i].method));
		assert_true(veq(req.path, cases[i].path));
	}
	/* a head over the cap, its request line whole */
	n = (size_t)snprintf((char *)big, sizeof(big), "PUT /policy HTTP/1.1\r\n" H "X-Big: ");
	memset(big + n, 'a', HTTPWIRE_MAX_HEAD_BYTES);
	assert_int_equal(preq(big, HTTPWIRE_MAX_HEAD_BYTES, &c), HTTPWIRE_TOO_LARGE);
	assert_true(veq(req.method, "PUT"));
	assert_true(veq(req.path, "/policy"));
	/* a request line over the cap */
	memcpy(big, "POST /", 6);
	memset(big + 6, 'a', HTTPWIRE_MAX_HEAD_BYTES);
	assert_int_equal(preq(big, HTTPWIRE_MAX_HEAD_BYTES + 6, &c), HTTPWIRE_TOO_LARGE);
	assert_null(req.path.ptr);
}

static void
test_responses(void **state)
{
	size_t c;

	assert_int_equal(
	    presp(S("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"), false, &c), HTTPWIRE_OK);
	assert_int_equal(resp.status, 200);
	assert_true(veq(resp.reason, "OK"));
	assert_int_equal(resp.framing, HTTPWIRE_FRAME_LENGTH);
	assert_int_equal(resp.content_length, 5);
	assert_true(resp.keep_alive);
	assert_int_equal(c, 38);
	assert_int_equal(
	    presp(S("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), true, &c), HTTPWIRE_OK);
	assert_int_equal(resp.framing, HTTPWIRE_FRAME_NONE);
	assert_int_equal(presp(S("HTTP/1.1 204 No Content\r\n\r\n"), false, &c), HTTPWIRE_OK);
	assert_int_equal(resp.framing, HTTPWIRE_FRAME_NONE);
	assert_int_equal(
	    presp(S("HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n"), false, &c),
	    HTTPWIRE_OK);
	assert_int_equal(resp.framing, HTTPWIRE_FRAME_NONE);
	assert_int_equal(
	    presp(S("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"), false, &c),
	    HTTPWIRE_OK);
	assert_int_equal(resp.framing, HTTPWIRE_FRAME_CHUNKED);
	assert_int_equal(
	    presp(S("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"), false, &c),
	    HTTPWIRE_OK);
	assert_int_equal(resp.framing, HTTPWIRE_FRAME_CLOSE);
	assert_false(resp.keep_alive);
	assert_int_equal(
	    presp(S("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n"), false, &c), HTTPWIRE_OK);
	assert_false(resp.keep_alive);
	assert_int_equal(presp(S("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
	                         "Connection: Upgrade\r\n\r\n"),
	                     false, &c),
	    HTTPWIRE_OK);
	assert_int_equal(resp.framing, HTTPWIRE_FRAME_TUNNEL);
	assert_false(resp.interim);
	/* no reason phrase, 8-bit reason and values: tolerated from upstreams */
	assert_int_equal(presp(S("HTTP/1.1 200\r\nContent-Disposition: caf\xc3\xa9\r\n"
	                         "Content-Length: 0\r\n\r\n"),
	                     false, &c),
	    HTTPWIRE_OK);
	assert_int_equal(resp.reason.len, 0);
}

static void
test_interim_then_final(void **state)
{
	static const char r[] = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 401 Unauthorized\r\n"
	                        "Content-Length: 0\r\n\r\n";
	size_t c, c2;

	assert_int_equal(presp(S(r), false, &c), HTTPWIRE_OK);
	assert_true(resp.interim);
	assert_int_equal(resp.framing, HTTPWIRE_FRAME_NONE);
	assert_int_equal(presp((const uint8_t *)r + c, sizeof(r) - 1 - c, false, &c2), HTTPWIRE_OK);
	assert_false(resp.interim);
	assert_int_equal(resp.status, 401);
	assert_int_equal(c + c2, sizeof(r) - 1);
}

static void
test_response_rejections(void **state)
{
	static const struct bad_req bad[] = {
	    /* EX-146 */
	    BAD("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
	        HTTPWIRE_E_CL_TE),
	    BAD("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
	        HTTPWIRE_E_CONTENT_LENGTH),
	    BAD("HTTP/1.1 200 OK\nContent-Length: 5\n\n", HTTPWIRE_E_LINE_ENDING),
	    BAD("HTTP/1.1 200 OK\r\nX-Echo: Bearer\r\n sk-fake-0\r\n\r\n", HTTPWIRE_E_OBS_FOLD),
	    BAD("HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
	        HTTPWIRE_E_TRANSFER_ENCODING),
	    BAD("HTTP/1.1 100 Continue\r\nTransfer-Encoding: chunked\r\n\r\n",
	        HTTPWIRE_E_TRANSFER_ENCODING),
	    BAD("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	        HTTPWIRE_E_TRANSFER_ENCODING),
	    BAD("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
	        HTTPWIRE_E_TRANSFER_ENCODING),
	    BAD("HTTP/1.1 099 Low\r\n\r\n", HTTPWIRE_E_STATUS),
	    BAD("HTTP/1.1 600 High\r\n\r\n", HTTPWIRE_E_STATUS),
	    BAD("HTTP/1.1 20x OK\r\n\r\n", HTTPWIRE_E_STATUS),
	    BAD("HTTP/1.1 2000 OK\r\n\r\n", HTTPWIRE_E_START_LINE),
	    BAD("HTTP/2.0 200 OK\r\n\r\n", HTTPWIRE_E_VERSION),
	    BAD("HTTP/1.1  200 OK\r\n\r\n", HTTPWIRE_E_STATUS),
	    BAD("ICY 200 OK\r\n\r\n", HTTPWIRE_E_START_LINE),
	    BAD("HTTP/1.1 200 O\x01K\r\n\r\n", HTTPWIRE_E_START_LINE),
	    BAD("HTTP/1.1 200 OK\r\nX: a\x00"
	        "b\r\n\r\n",
	        HTTPWIRE_E_FIELD_VALUE),
	};
	size_t c;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum httpwire_status st =
		    presp((const uint8_t *)bad[i].bytes, bad[i].len, false, &c);
		if (st != bad[i].st || resp.error != bad[i].err)
			fail_msg("fixture %zu: status %d error %s, want %s", i, st,
			    httpwire_error_str(resp.error), httpwire_error_str(bad[i].err));
	}
}

/* Collects decoded payload and checks that spans lie inside the fed buffer. */
struct sink {
	uint8_t data[4096];
	size_t n;
	const uint8_t *base;
	size_t base_len;
};

static void
sink_cb(const uint8_t *data, size_t off, size_t len, void *arg)
{
	struct sink *s = arg;

	assert_ptr_equal(data, s->base + off);
	assert_true(off + len <= s->base_len);
	assert_true(s->n + len <= sizeof(s->data));
	memcpy(s->data + s->n, data, len);
	s->n += len;
}

/* Feed msg in pieces of the sizes produced by step(); returns the status of
 * the last feed, the total consumed in *total. */
static enum httpwire_status
feed_split(struct httpwire_body *b, const uint8_t *msg, size_t len, uint32_t seed, size_t maxpiece,
    struct sink *s, size_t *total)
{
	enum httpwire_status st = HTTPWIRE_NEED_MORE;
	size_t off = 0, c;

	s->n = 0;
	*total = 0;
	while (off < len) {
		seed = seed * 1103515245u + 12345u;
		size_t piece = 1 + (seed >> 8) % maxpiece;
		if (piece > len - off)
			piece = len - off;
		s->base = msg + off;
		s->base_len = piece;
		st = httpwire_body_feed(b, msg + off, piece, &c, sink_cb, s);
		*total += c;
		if (st != HTTPWIRE_NEED_MORE)
			return st;
		assert_int_equal(c, piece);
		off += piece;
	}
	return st;
}

static void
test_chunked_splits(void **state)
{
	static const char msg[] = "5\r\nhello\r\n6;a=b;c=\"x \\\" y\";d\r\n world\r\n"
	                          "1A\r\nabcdefghijklmnopqrstuvwxyz\r\n000\r\nX-Trailer: 1\r\n\r\n"
	                          "NEXT";
	static const char want[] = "hello worldabcdefghijklmnopqrstuvwxyz";
	size_t body_len = sizeof(msg) - 1 - 4, total;
	struct httpwire_body b;
	struct sink s;

	for (size_t maxpiece = 1; maxpiece <= sizeof(msg); maxpiece += 3) {
		for (uint32_t seed = 1; seed < 6; seed++) {
			httpwire_body_init(&b, HTTPWIRE_FRAME_CHUNKED, 0, 0);
			assert_int_equal(feed_split(&b, (const uint8_t *)msg, sizeof(msg) - 1, seed,
			                     maxpiece, &s, &total),
			    HTTPWIRE_OK);
			assert_int_equal(total, body_len);
			assert_int_equal(s.n, sizeof(want) - 1);
			assert_memory_equal(s.data, want, s.n);
			assert_true(httpwire_body_done(&b));
			assert_int_equal(httpwire_body_trailer_fields(&b), 1);
		}
	}
	/* done bodies consume nothing more */
	size_t c;
	assert_int_equal(
	    httpwire_body_feed(&b, (const uint8_t *)"x", 1, &c, NULL, NULL), HTTPWIRE_OK);
	assert_int_equal(c, 0);
}

static void
test_chunked_rejections(void **state)
{
	static const struct bad_req bad[] = {
	    /* EX-115 */
	    BAD("5;\nhello\r\n0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD("5;\x00"
	        "ext\r\nhello\r\n0\r\n\r\n",
	        HTTPWIRE_E_CHUNK),
	    BAD("5;ext=\"a\r\nb\"\r\nhello\r\n0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD("0x5\r\nhello\r\n0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD(" 5\r\nhello\r\n0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD("5 \r\nhello\r\n0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD("5 ;a\r\nhello\r\n0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD("5\r\nhelloXX0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD("5\r\nhello\n0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD("5\nhello\r\n0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD("\r\nhello\r\n0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD("5;=x\r\nhello\r\n0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD("5;a=\r\nhello\r\n0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD("-5\r\nhello\r\n0\r\n\r\n", HTTPWIRE_E_CHUNK),
	    BAD("5\r\nhello\r\n0\r\n X: y\r\n\r\n", HTTPWIRE_E_TRAILER),
	    BAD("5\r\nhello\r\n0\r\nX : y\r\n\r\n", HTTPWIRE_E_TRAILER),
	    BAD("5\r\nhello\r\n0\r\nX: a\x00\r\n\r\n", HTTPWIRE_E_TRAILER),
	    BAD("5\r\nhello\r\n0\r\nX: y\n\r\n", HTTPWIRE_E_TRAILER),
	    BAD("5\r\nhello\r\n0\r\n\rX", HTTPWIRE_E_TRAILER),
	    {"fffffffffffffffff\r\n", 19, HTTPWIRE_TOO_LARGE, HTTPWIRE_E_CHUNK_TOO_LARGE},
	    {"0000000000000001\r\n", 18, HTTPWIRE_TOO_LARGE, HTTPWIRE_E_CHUNK_TOO_LARGE},
	};
	struct httpwire_body b;
	size_t c;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		httpwire_body_init(&b, HTTPWIRE_FRAME_CHUNKED, 0, 0);
		enum httpwire_status st = httpwire_body_feed(
		    &b, (const uint8_t *)bad[i].bytes, bad[i].len, &c, NULL, NULL);
		if (st != bad[i].st || httpwire_body_error(&b) != bad[i].err)
			fail_msg("chunk fixture %zu: status %d error %s", i, st,
			    httpwire_error_str(httpwire_body_error(&b)));
		/* a failed decoder stays failed */
		assert_int_equal(
		    httpwire_body_feed(&b, (const uint8_t *)"0\r\n\r\n", 5, &c, NULL, NULL),
		    bad[i].st);
	}
	/* 15 hex digits are the maximum that is accepted */
	httpwire_body_init(&b, HTTPWIRE_FRAME_CHUNKED, 0, 0);
	assert_int_equal(
	    httpwire_body_feed(&b, S("fffffffffffffff\r\nab"), &c, NULL, NULL), HTTPWIRE_NEED_MORE);
	/* a 64 KiB extension (EX-115) is cut at the line limit */
	memcpy(big, "5;a=", 4);
	memset(big + 4, 'x', 65536);
	httpwire_body_init(&b, HTTPWIRE_FRAME_CHUNKED, 0, 0);
	assert_int_equal(httpwire_body_feed(&b, big, 65540, &c, NULL, NULL), HTTPWIRE_TOO_LARGE);
	assert_true(c <= HTTPWIRE_MAX_CHUNK_LINE);
	/* trailers refused when the caller asks (EX-144) */
	httpwire_body_init(&b, HTTPWIRE_FRAME_CHUNKED, 0, HTTPWIRE_BODY_NO_TRAILERS);
	assert_int_equal(httpwire_body_feed(&b, S("0\r\nHost: evil.test\r\n\r\n"), &c, NULL, NULL),
	    HTTPWIRE_INVALID);
	assert_int_equal(httpwire_body_error(&b), HTTPWIRE_E_TRAILER);
	httpwire_body_init(&b, HTTPWIRE_FRAME_CHUNKED, 0, HTTPWIRE_BODY_NO_TRAILERS);
	assert_int_equal(httpwire_body_feed(&b, S("0\r\n\r\n"), &c, NULL, NULL), HTTPWIRE_OK);
	/* an endless trailer section is bounded */
	size_t n = 3;
	memcpy(big, "0\r\n", 3);
	while (n < HTTPWIRE_MAX_TRAILER_BYTES + 100) {
		memcpy(big + n, "X-T: 12345678\r\n", 15);
		n += 15;
	}
	httpwire_body_init(&b, HTTPWIRE_FRAME_CHUNKED, 0, 0);
	assert_int_equal(httpwire_body_feed(&b, big, n, &c, NULL, NULL), HTTPWIRE_TOO_LARGE);
	/* EOF inside a chunked body is a truncation */
	httpwire_body_init(&b, HTTPWIRE_FRAME_CHUNKED, 0, 0);
	assert_int_equal(httpwire_body_feed(&b, S("5\r\nhel"), &c, NULL, NULL), HTTPWIRE_NEED_MORE);
	assert_int_equal(httpwire_body_eof(&b), HTTPWIRE_INVALID);
	assert_int_equal(httpwire_body_error(&b), HTTPWIRE_E_TRUNCATED);
}

static void
test_length_and_close_bodies(void **state)
{
	/* EX-146: a second response glued after a Content-Length body */
	static const char r[] =
	    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n";
	struct httpwire_body b;
	struct sink s;
	size_t c, hc, total;

	assert_int_equal(presp(S(r), false, &hc), HTTPWIRE_OK);
	httpwire_body_init(&b, resp.framing, resp.content_length, 0);
	s.n = 0;
	s.base = (const uint8_t *)r + hc;
	s.base_len = sizeof(r) - 1 - hc;
	assert_int_equal(httpwire_body_feed(&b, s.base, s.base_len, &c, sink_cb, &s), HTTPWIRE_OK);
	assert_int_equal(c, 5);
	assert_memory_equal(s.data, "hello", 5);
	/* split feeds; EOF early is a truncation */
	httpwire_body_init(&b, HTTPWIRE_FRAME_LENGTH, 5, 0);
	assert_int_equal(feed_split(&b, S("hel"), 7, 1, &s, &total), HTTPWIRE_NEED_MORE);
	assert_int_equal(httpwire_body_eof(&b), HTTPWIRE_INVALID);
	httpwire_body_init(&b, HTTPWIRE_FRAME_LENGTH, 0, 0);
	assert_true(httpwire_body_done(&b));
	/* close-delimited: everything is payload until EOF */
	httpwire_body_init(&b, HTTPWIRE_FRAME_CLOSE, 0, 0);
	assert_int_equal(
	    feed_split(&b, S("data: 1\n\ndata: 2\n\n"), 4, 9, &s, &total), HTTPWIRE_NEED_MORE);
	assert_int_equal(total, 18);
	assert_int_equal(s.n, 18);
	assert_false(httpwire_body_done(&b));
	assert_int_equal(httpwire_body_eof(&b), HTTPWIRE_OK);
	assert_true(httpwire_body_done(&b));
	/* no body */
	httpwire_body_init(&b, HTTPWIRE_FRAME_NONE, 0, 0);
	assert_int_equal(httpwire_body_feed(&b, S("HTTP/1.1"), &c, NULL, NULL), HTTPWIRE_OK);
	assert_int_equal(c, 0);
}

static void
test_find_and_write(void **state)
{
	static const char r[] = "GET /v1/x HTTP/1.1\r\nHost: api.allowed.test\r\n"
	                        "authorization: Bearer mine\r\nAccept: */*\r\n"
	                        "AUTHORIZATION: Bearer other\r\n\r\n";
	struct httpwire_header h[8], extra[1];
	uint8_t out[512];
	size_t c, w;

	assert_int_equal(httpwire_parse_request(S(r), &req, h, 8, &c), HTTPWIRE_OK);
	struct httpwire_view sl0 = req.start_line;
	size_t nh = req.nheaders;
	assert_int_equal(nh, 4);
	assert_true(httpwire_name_eq(h[1].name, "Authorization"));
	assert_false(httpwire_name_eq(h[1].name, "Authorizatio"));
	assert_ptr_equal(httpwire_find_header(h, req.nheaders, "AUTHORIZATION"), &h[1]);
	assert_null(httpwire_find_header(h, req.nheaders, "Cookie"));
	/* drop every Authorization, add one */
	for (size_t i = 0; i < req.nheaders; i++)
		if (httpwire_name_eq(h[i].name, "authorization"))
			h[i].name.ptr = NULL;
	extra[0].name = (struct httpwire_view){(const uint8_t *)"X-Added", 7};
	extra[0].value = (struct httpwire_view){(const uint8_t *)"yes", 3};
	assert_int_equal(
	    httpwire_head_write(out, sizeof(out), req.start_line, h, req.nheaders, extra, 1, &w),
	    0);
	static const char want[] = "GET /v1/x HTTP/1.1\r\nHost: api.allowed.test\r\nAccept: */*\r\n"
	                           "X-Added: yes\r\n\r\n";
	assert_int_equal(w, sizeof(want) - 1);
	assert_memory_equal(out, want, w);
	assert_int_equal(preq(out, w, &c), HTTPWIRE_OK);
	assert_int_equal(c, w);
	/* too small, by one byte */
	assert_int_equal(httpwire_head_write(out, w - 1, sl0, h, nh, extra, 1, &c), -1);
	/* header injection through a value, a name, or the start line */
	extra[0].value = (struct httpwire_view){(const uint8_t *)"a\r\nHost: evil.test", 18};
	assert_int_equal(httpwire_head_write(out, sizeof(out), sl0, h, nh, extra, 1, &w), -1);
	extra[0].value = (struct httpwire_view){(const uint8_t *)"a\0b", 3};
	assert_int_equal(httpwire_head_write(out, sizeof(out), sl0, h, nh, extra, 1, &w), -1);
	extra[0].value = (struct httpwire_view){(const uint8_t *)"ok", 2};
	extra[0].name = (struct httpwire_view){(const uint8_t *)"X Bad", 5};
	assert_int_equal(httpwire_head_write(out, sizeof(out), sl0, h, nh, extra, 1, &w), -1);
	extra[0].name = (struct httpwire_view){(const uint8_t *)"X-Ok", 4};
	struct httpwire_view sl = {(const uint8_t *)"GET / HTTP/1.1\nX: y", 19};
	assert_int_equal(httpwire_head_write(out, sizeof(out), sl, h, nh, extra, 1, &w), -1);
	assert_int_equal(httpwire_head_write(out, sizeof(out), sl0, NULL, 0, extra, 1, &w), 0);
}

static void
test_path_ambiguity(void **state)
{
	/* EX-135 */
	static const char *const amb[] = {"/v1/../admin", "/v1/%2e%2e/admin", "/v1%2f..%2fadmin",
	    "/v1/%252e%252e/admin", "/v1/./x", "/v1;x=1/../../admin", "/v1\\..\\admin", "/v1/%00/x",
	    "/v1%2Fx", "/v1/x/..", "/v1/%C0%AE%C0%AE/admin", "/v1/%5cadmin", "/v1/..;/admin",
	    "/v1;x=1/y", "/v1/%2E", "/v1/%25252e", "/v1/%2525252e/x", "/v1/%zz", "/v1/%3b", "/..",
	    "/.", "/v1/%2e./x", "/v1/%0a"};
	static const char *const ok[] = {"/v1/x", "/%76%31/x", "/v1/a%2Ejson", "/v1/x?next=../..",
	    "/v1/caf%C3%A9", "//v1/x", "/v1/...", "/V1/x", "/", "/v1/x?%2f", "/v1/.hidden",
	    "/v1/a..b", "/v1/%41"};

	for (size_t i = 0; i < sizeof(amb) / sizeof(amb[0]); i++)
		if (!httpwire_path_is_ambiguous((const uint8_t *)amb[i], strlen(amb[i])))
			fail_msg("not flagged: %s", amb[i]);
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (httpwire_path_is_ambiguous((const uint8_t *)ok[i], strlen(ok[i])))
			fail_msg("flagged: %s", ok[i]);
	/* paths over the examined bound are refused */
	big[0] = '/';
	memset(big + 1, 'a', HTTPWIRE_MAX_PATH + 1);
	assert_true(httpwire_path_is_ambiguous(big, HTTPWIRE_MAX_PATH + 2));
	assert_false(httpwire_path_is_ambiguous(big, HTTPWIRE_MAX_PATH));
	assert_string_equal(httpwire_error_str(HTTPWIRE_E_CL_TE), "cl_and_te");
}

/* Percent-encode bytes into "/v1/" X "x" (upper or lower hex, %25 layers). */
static size_t
enc_path(char *out, size_t cap, const uint8_t *b, size_t n, bool upper, int layers)
{
	size_t o = (size_t)snprintf(out, cap, "/v1/");

	for (size_t i = 0; i < n; i++) {
		o += (size_t)snprintf(out + o, cap - o, "%%");
		for (int l = 0; l < layers; l++)
			o += (size_t)snprintf(out + o, cap - o, "25");
		o += (size_t)snprintf(out + o, cap - o, upper ? "%02X" : "%02x", b[i]);
	}
	o += (size_t)snprintf(out + o, cap - o, "x");
	return o;
}

static void
expect_amb(const uint8_t *b, size_t n, bool want)
{
	char path[256];

	for (int layers = 0; layers < 3; layers++) {
		for (int up = 0; up < 2; up++) {
			size_t len = enc_path(path, sizeof(path), b, n, up, layers);
			if (httpwire_path_is_ambiguous((const uint8_t *)path, len) != want)
				fail_msg("%s: %s", want ? "not flagged" : "flagged", path);
		}
	}
}

/*
 * Issue 15 item 7: a decoded path that is not strict UTF-8 or holds a
 * separator look-alike is ambiguous. The class is generated: the overlong
 * forms of every ASCII byte and of every 2- and 3-byte length boundary,
 * surrogates, code points past U+10FFFF, invalid leads, stray and missing
 * continuation bytes, and the fullwidth and other look-alikes of '.', '/'
 * and '\\', each at 0, 1 and 2 extra %25 layers, upper and lower case.
 */
static void
test_path_utf8_class(void **state)
{
	uint8_t b[6];

	for (unsigned c = 0; c < 0x80; c++) {
		b[0] = (uint8_t)(0xc0 | c >> 6), b[1] = (uint8_t)(0x80 | (c & 0x3f));
		expect_amb(b, 2, true);
		b[0] = 0xe0, b[1] = (uint8_t)(0x80 | c >> 6), b[2] = (uint8_t)(0x80 | (c & 0x3f));
		expect_amb(b, 3, true);
		b[0] = 0xf0, b[1] = 0x80, b[2] = (uint8_t)(0x80 | c >> 6);
		b[3] = (uint8_t)(0x80 | (c & 0x3f));
		expect_amb(b, 4, true);
		/* the 5- and 6-byte forms RFC 2279 had */
		b[0] = 0xf8, b[1] = 0x80, b[2] = 0x80, b[3] = (uint8_t)(0x80 | c >> 6);
		b[4] = (uint8_t)(0x80 | (c & 0x3f));
		expect_amb(b, 5, true);
		b[0] = 0xfc, b[1] = 0x80, b[2] = 0x80, b[3] = 0x80, b[4] = (uint8_t)(0x80 | c >> 6);
		b[5] = (uint8_t)(0x80 | (c & 0x3f));
		expect_amb(b, 6, true);
	}
	/* overlong forms of multi-byte code points: U+0080..U+07FF in 3 bytes, U+0800..U+FFFF in 4 */
	for (uint32_t cp = 0x80; cp < 0x800; cp += 0x41) {
		b[0] = 0xe0, b[1] = (uint8_t)(0x80 | cp >> 6), b[2] = (uint8_t)(0x80 | (cp & 0x3f));
		expect_amb(b, 3, true);
	}
	for (uint32_t cp = 0x800; cp < 0x10000; cp += 0x3e1) {
		b[0] = 0xf0, b[1] = (uint8_t)(0x80 | cp >> 12),
		b[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
		b[3] = (uint8_t)(0x80 | (cp & 0x3f));
		expect_amb(b, 4, true);
	}
	/* every byte that cannot lead, alone and before a continuation byte */
	for (unsigned l = 0x80; l < 0x100; l++) {
		if ((l >= 0xc2 && l <= 0xf4))
			continue;
		b[0] = (uint8_t)l, b[1] = 0xae;
		expect_amb(b, 1, true);
		expect_amb(b, 2, true);
	}
	/* a valid lead without its continuation bytes, or with a wrong one */
	for (unsigned l = 0xc2; l <= 0xf4; l++) {
		b[0] = (uint8_t)l, b[1] = '.', b[2] = '.';
		expect_amb(b, 1, true);
		expect_amb(b, 2, true);
	}
	/* surrogates and code points past U+10FFFF */
	for (unsigned x = 0xa0; x <= 0xbf; x++) {
		b[0] = 0xed, b[1] = (uint8_t)x, b[2] = 0x80;
		expect_amb(b, 3, true);
	}
	for (unsigned x = 0x90; x <= 0xbf; x++) {
		b[0] = 0xf4, b[1] = (uint8_t)x, b[2] = 0x80, b[3] = 0x80;
		expect_amb(b, 4, true);
	}
	/* look-alikes of '.', '/' and '\\' */
	static const uint8_t look[][3] = {{0xef, 0xbc, 0x8e}, {0xef, 0xbc, 0x8f},
	    {0xef, 0xbc, 0xbc}, {0xe2, 0x80, 0xa4}, {0xe2, 0x80, 0xa5}, {0xe2, 0x80, 0xa6},
	    {0xef, 0xb9, 0x92}, {0xe2, 0x81, 0x84}, {0xe2, 0x88, 0x95}, {0xe2, 0x88, 0x96},
	    {0xef, 0xb9, 0xa8}};
	for (size_t i = 0; i < sizeof(look) / sizeof(look[0]); i++)
		expect_amb(look[i], 3, true);
	/* the review's strings, literally */
	static const char *const listed[] = {"/v1/%c0%ae%c0%ae/admin",
	    "/v1/%e0%80%ae%e0%80%ae/admin", "/v1/%f0%80%80%ae/admin", "/v1%c0%afadmin",
	    "/v1%e0%80%afadmin", "/v1/%ef%bc%8e%ef%bc%8e/admin", "/v1%ef%bc%8fadmin",
	    "/v1/%EF%BC%8E%EF%BC%8E%EF%BC%8Fadmin", "/v1/%25e0%2580%25ae/x"};
	for (size_t i = 0; i < sizeof(listed) / sizeof(listed[0]); i++)
		if (!httpwire_path_is_ambiguous((const uint8_t *)listed[i], strlen(listed[i])))
			fail_msg("not flagged: %s", listed[i]);
	/* valid UTF-8 stays fine: é, €, an emoji, fullwidth A, U+FFFD, U+10FFFF */
	static const uint8_t good[][4] = {{0xc3, 0xa9}, {0xe2, 0x82, 0xac},
	    {0xf0, 0x9f, 0x98, 0x80}, {0xef, 0xbc, 0xa1}, {0xef, 0xbf, 0xbd},
	    {0xf4, 0x8f, 0xbf, 0xbf}, {0xc2, 0x80}, {0xe0, 0xa0, 0x80}, {0xf0, 0x90, 0x80, 0x80}};
	static const size_t glen[] = {2, 3, 4, 3, 3, 4, 2, 3, 4};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		expect_amb(good[i], glen[i], false);
}

/* The CONNECT request: the address (bracketed for IPv6), Host, and the authorization only when given. */
static void
test_connect_request(void **state)
{
	static const uint8_t v4[4] = {203, 0, 113, 10};
	static const uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 0x10};
	char out[256];
	size_t n;

	(void)state;
	n = httpwire_connect_request(out, sizeof(out), AF_INET, v4, 443, NULL);
	assert_string_equal(
	    out, "CONNECT 203.0.113.10:443 HTTP/1.1\r\nHost: 203.0.113.10:443\r\n\r\n");
	assert_int_equal(n, strlen(out));
	n = httpwire_connect_request(out, sizeof(out), AF_INET6, v6, 53, "");
	assert_string_equal(
	    out, "CONNECT [2001:db8::10]:53 HTTP/1.1\r\nHost: [2001:db8::10]:53\r\n\r\n");
	assert_int_equal(n, strlen(out));
	n = httpwire_connect_request(out, sizeof(out), AF_INET, v4, 80, "Basic eDp5");
	assert_string_equal(out, "CONNECT 203.0.113.10:80 HTTP/1.1\r\nHost: 203.0.113.10:80\r\n"
	                         "Proxy-Authorization: Basic eDp5\r\n\r\n");
	assert_int_equal(n, strlen(out));
	/* Too small: nothing, never a truncated head. */
	assert_int_equal(httpwire_connect_request(out, 40, AF_INET, v4, 80, "Basic eDp5"), 0);
	assert_int_equal(httpwire_connect_request(out, sizeof(out), AF_UNIX, v4, 80, NULL), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_request_rejections),
	    cmocka_unit_test(test_request_ok),
	    cmocka_unit_test(test_keep_alive_flags),
	    cmocka_unit_test(test_pipelined),
	    cmocka_unit_test(test_expect_continue_and_cl0),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_request_line_of_partial_heads),
	    cmocka_unit_test(test_responses),
	    cmocka_unit_test(test_interim_then_final),
	    cmocka_unit_test(test_response_rejections),
	    cmocka_unit_test(test_chunked_splits),
	    cmocka_unit_test(test_chunked_rejections),
	    cmocka_unit_test(test_length_and_close_bodies),
	    cmocka_unit_test(test_find_and_write),
	    cmocka_unit_test(test_path_ambiguity),
	    cmocka_unit_test(test_path_utf8_class),
	    cmocka_unit_test(test_connect_request),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
