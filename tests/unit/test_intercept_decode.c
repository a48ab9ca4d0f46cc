/*
 * Unit test of the decoding rules for uncredentialed requests to a host
 * that has a binding (issue 15 item 6): such a host may return a secret it
 * was sent earlier, so the request must not invite a compressed or partial
 * response the redactor cannot see through; and a workload's
 * "Connection: close" ends at the proxy. Drives the real helpers of
 * vault/inject.c (intercept_request_decodable, intercept_request_head).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "vault/httpwire.h"
#include "vault/intercept_internal.h"

static const char REQ[] = "GET /public/x HTTP/1.1\r\n"
                          "Host: api.allowed.test\r\n"
                          "Accept-Encoding: gzip, br\r\n"
                          "X-Keep: 1\r\n"
                          "accept-encoding: deflate\r\n"
                          "Range: bytes=0-5\r\n"
                          "RANGE: bytes=6-9\r\n"
                          "If-Range: \"e\"\r\n"
                          "Sec-WebSocket-Extensions: permessage-deflate\r\n"
                          "\r\n";

static size_t
count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = strcasestr(hay, needle); p != NULL; p = strcasestr(p + 1, needle))
		n++;
	return n;
}

/* The head the uncredentialed request text goes upstream with. */
static char *
rewrite_req(const char *text, bool decodable, size_t *lenp)
{
	struct httpwire_request req;
	struct httpwire_header hdrs[HTTPWIRE_MAX_HEADERS];
	static uint8_t scratch[HTTPWIRE_MAX_HEAD_BYTES + 512];
	size_t consumed = 0;
	struct evbuffer *out = evbuffer_new();
	char *s;

	assert_non_null(out);
	assert_int_equal(httpwire_parse_request((const uint8_t *)text, strlen(text), &req, hdrs,
	                     HTTPWIRE_MAX_HEADERS, &consumed),
	    HTTPWIRE_OK);
	if (decodable)
		intercept_request_decodable(hdrs, req.nheaders);
	assert_int_equal(intercept_request_head(
	                     &req, hdrs, NULL, 0, false, false, scratch, sizeof(scratch), out),
	    0);
	*lenp = evbuffer_get_length(out);
	s = calloc(1, *lenp + 1);
	assert_non_null(s);
	assert_int_equal(evbuffer_remove(out, s, *lenp), (int)*lenp);
	evbuffer_free(out);
	return s;
}

static char *
rewrite(bool decodable, size_t *lenp)
{
	return rewrite_req(REQ, decodable, lenp);
}

/*
 * An HTTP/1.1 workload's close is its own: upstream the request says
 * nothing of the connection (and what Connection nominated is dropped with
 * it), so the leg can serve another connection. HTTP/1.0, or a request
 * that keeps its connection, goes as it came.
 */
static void
test_close_is_the_workloads(void **state)
{
	static const char close11[] = "GET /x HTTP/1.1\r\nHost: a.test\r\n"
	                              "Connection: close, X-Hop\r\nX-Hop: 1\r\nX-Keep: 1\r\n\r\n";
	static const char close10[] = "GET /x HTTP/1.0\r\nHost: a.test\r\n"
	                              "Connection: close, X-Hop\r\nX-Hop: 1\r\nX-Keep: 1\r\n\r\n";
	static const char keep11[] = "GET /x HTTP/1.1\r\nHost: a.test\r\n"
	                             "Connection: X-Hop\r\nX-Hop: 1\r\nX-Keep: 1\r\n\r\n";
	size_t len;
	char *s;

	(void)state;
	s = rewrite_req(close11, false, &len);
	assert_int_equal(count(s, "connection:"), 0);
	assert_int_equal(count(s, "x-hop"), 0);
	assert_non_null(strstr(s, "\r\nX-Keep: 1\r\n"));
	assert_non_null(strstr(s, "GET /x HTTP/1.1\r\nHost: a.test\r\n"));
	assert_ptr_equal(strstr(s, "\r\n\r\n"), s + len - 4);
	free(s);

	s = rewrite_req(close10, false, &len);
	assert_int_equal(len, strlen(close10));
	assert_memory_equal(s, close10, len);
	free(s);

	s = rewrite_req(keep11, false, &len);
	assert_int_equal(len, strlen(keep11));
	assert_memory_equal(s, keep11, len);
	free(s);
}

static void
test_bound_host_gets_identity_whole_bodies(void **state)
{
	size_t len;
	char *s;

	(void)state;
	/* Without the rules, the codings and ranges go upstream as sent. */
	s = rewrite(false, &len);
	assert_int_equal(len, strlen(REQ));
	assert_memory_equal(s, REQ, len);
	free(s);

	s = rewrite(true, &len);
	assert_int_equal(count(s, "accept-encoding:"), 1);
	assert_non_null(strstr(s, "\r\nAccept-Encoding: identity\r\n"));
	assert_null(strstr(s, "gzip"));
	assert_null(strstr(s, "deflate"));
	assert_int_equal(count(s, "range:"), 0);
	assert_null(strstr(s, "permessage-deflate"));
	assert_non_null(strstr(s, "\r\nX-Keep: 1\r\n"));
	assert_non_null(strstr(s, "GET /public/x HTTP/1.1\r\nHost: api.allowed.test\r\n"));
	assert_true(len > 4 && memcmp(s + len - 4, "\r\n\r\n", 4) == 0);
	assert_ptr_equal(strstr(s, "\r\n\r\n"), s + len - 4);
	free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bound_host_gets_identity_whole_bodies),
	    cmocka_unit_test(test_close_is_the_workloads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
