/*
 * Unit tests of vault/intercept's pure helpers: the not-an-open-proxy
 * check of original destinations, Host canonicalisation against the
 * original port, the status codes of refused heads, and the request head
 * rewrite of a credentialed request (every case variant and duplicate of
 * the injected header dropped, identity encoding, no Range) against the
 * byte-exact pass-through of an unmatched one; the rule for a second
 * ClientHello after a HelloRetryRequest (EX-086b).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <event2/buffer.h>
#include <sys/socket.h>

#include "policy/binding.h"
#include "vault/intercept.h"
#include "vault/intercept_internal.h"
#include "vault/secret.h"
#include "vault/snap.h"

#define SECRET "sk-live-CANARY1-unit-0123456789abcdef"

static const char *
self4(const char *a, uint16_t port)
{
	uint8_t b[16] = {0};

	assert_int_equal(inet_pton(AF_INET, a, b), 1);
	return intercept_self_reason(AF_INET, b, port, 15443, 15080, NULL, NULL, 0);
}

static const char *
self6(const char *a, uint16_t port, const uint8_t (*local)[16], const int *fam, size_t n)
{
	uint8_t b[16];

	assert_int_equal(inet_pton(AF_INET6, a, b), 1);
	return intercept_self_reason(AF_INET6, b, port, 15443, 15080, local, fam, n);
}

static void
test_self(void **state)
{
	uint8_t local[2][16] = {{0}};
	int fam[2] = {AF_INET, AF_INET6};

	(void)state;
	assert_string_equal(self4("127.0.0.1", 443), "orig_dst_loopback");
	assert_string_equal(self4("127.9.9.9", 80), "orig_dst_loopback");
	assert_string_equal(self4("0.0.0.0", 443), "orig_dst_loopback");
	assert_string_equal(self6("::1", 443, NULL, NULL, 0), "orig_dst_loopback");
	assert_string_equal(self6("::", 443, NULL, NULL, 0), "orig_dst_loopback");
	assert_string_equal(self6("::ffff:127.0.0.1", 443, NULL, NULL, 0), "orig_dst_loopback");
	assert_null(self4("203.0.113.10", 443));
	assert_null(self6("2001:db8::10", 443, NULL, NULL, 0));
	/* A redirect loop through a listener port, whatever the address. */
	assert_string_equal(self4("203.0.113.10", 15443), "orig_dst_listener");
	assert_string_equal(self4("203.0.113.10", 15080), "orig_dst_listener");
	/* The sidecar's own interface addresses. */
	assert_int_equal(inet_pton(AF_INET, "10.200.0.2", local[0]), 1);
	assert_int_equal(inet_pton(AF_INET6, "fd00:200::2", local[1]), 1);
	assert_string_equal(intercept_self_reason(AF_INET, local[0], 443, 15443, 15080,
	                        (const uint8_t(*)[16])local, fam, 2),
	    "orig_dst_local");
	assert_string_equal(
	    self6("fd00:200::2", 443, (const uint8_t(*)[16])local, fam, 2), "orig_dst_local");
	assert_null(self6("fd00:200::3", 443, (const uint8_t(*)[16])local, fam, 2));
}

static int
canon(const char *v, uint16_t port, char *out)
{
	return intercept_host_canon((const uint8_t *)v, strlen(v), port, out);
}

static void
test_host_canon(void **state)
{
	char out[256];

	(void)state;
	assert_int_equal(canon("API.Allowed.Test", 443, out), 0);
	assert_string_equal(out, "api.allowed.test");
	assert_int_equal(canon("api.allowed.test:443", 443, out), 0);
	assert_string_equal(out, "api.allowed.test");
	assert_int_equal(canon("api.allowed.test.", 443, out), 0);
	assert_string_equal(out, "api.allowed.test");
	/* Another port would name another origin than the one dialled. */
	assert_int_equal(canon("api.allowed.test:8443", 443, out), -1);
	assert_int_equal(canon("api.allowed.test:", 443, out), -1);
	assert_int_equal(canon("api.allowed.test:44x", 443, out), -1);
	assert_int_equal(canon("api.allowed.test:0000443", 443, out), -1);
	assert_int_equal(canon("[::1]:443", 443, out), -1);
	assert_int_equal(canon("203.0.113.10", 443, out), -1);
	assert_int_equal(canon("a b.test", 443, out), -1);
	assert_int_equal(canon("", 443, out), -1);
}

static void
test_error_status(void **state)
{
	(void)state;
	assert_int_equal(intercept_request_error_status(HTTPWIRE_INVALID, HTTPWIRE_E_CL_TE), 400);
	assert_int_equal(intercept_request_error_status(HTTPWIRE_TOO_LARGE, HTTPWIRE_E_NONE), 431);
	assert_int_equal(
	    intercept_request_error_status(HTTPWIRE_INVALID, HTTPWIRE_E_TOO_MANY_FIELDS), 431);
	assert_int_equal(intercept_request_error_status(HTTPWIRE_INVALID, HTTPWIRE_E_VERSION), 505);
	assert_int_equal(
	    intercept_request_error_status(HTTPWIRE_INVALID, HTTPWIRE_E_TRANSFER_ENCODING), 501);
	assert_int_equal(intercept_request_error_status(HTTPWIRE_INVALID, HTTPWIRE_E_EXPECT), 417);
	assert_int_equal(intercept_request_error_status(HTTPWIRE_INVALID, HTTPWIRE_E_CONNECT), 405);
	assert_string_not_equal(intercept_metric_name(INTERCEPT_M_INJECTED), "unknown");
	assert_string_equal(intercept_metric_name(INTERCEPT_M_COUNT), "unknown");
}

static struct vault_snap *
mksnap(void)
{
	static const char js[] =
	    "{\"credentials\":[{\"name\":\"c1\",\"source\":{\"type\":\"inline\",\"value\":\"" SECRET
	    "\"}}],\"bindings\":[{\"name\":\"b1\",\"match\":{\"hosts\":[\"api.allowed.test\"],"
	    "\"paths\":[\"/v1/*\"],\"methods\":[\"GET\"]},\"auth\":{\"type\":\"bearer\","
	    "\"credential\":\"c1\"}}]}";
	struct policy_err pe;
	struct binding_set *bs = binding_set_from_json(js, strlen(js), &pe);
	struct secret *s = secret_new((const uint8_t *)SECRET, strlen(SECRET));
	struct vault_snap *snap;
	char err[256];

	assert_non_null(bs);
	assert_non_null(s);
	snap = vault_snap_new(bs, &s, 1, 1, err, sizeof(err));
	assert_non_null(snap);
	binding_set_free(bs);
	secret_unref(s);
	return snap;
}

static const char REQ[] = "GET /v1/x HTTP/1.1\r\n"
                          "Host: api.allowed.test\r\n"
                          "Authorization: Bearer sk-fake-1\r\n"
                          "X-Keep: 1\r\n"
                          "authorization: second\r\n"
                          "AUTHORIZATION: third\r\n"
                          "Accept-Encoding: gzip, br\r\n"
                          "Range: bytes=0-5\r\n"
                          "If-Range: \"e\"\r\n"
                          "\r\n";

static char *
rewrite(struct vault_snap *snap, bool inject, size_t *lenp)
{
	struct httpwire_request req;
	struct httpwire_header hdrs[HTTPWIRE_MAX_HEADERS];
	static uint8_t scratch[HTTPWIRE_MAX_HEAD_BYTES + 512];
	size_t consumed = 0, idx = 0;
	struct evbuffer *out = evbuffer_new();
	char *s;

	assert_int_equal(httpwire_parse_request((const uint8_t *)REQ, strlen(REQ), &req, hdrs,
	                     HTTPWIRE_MAX_HEADERS, &consumed),
	    HTTPWIRE_OK);
	if (inject)
		assert_int_equal(binding_match(vault_snap_bindings(snap), "https",
		                     "api.allowed.test", 443, "GET", "/v1/x", &idx),
		    BINDING_MATCH_ONE);
	assert_int_equal(intercept_request_head(
	                     &req, hdrs, snap, idx, inject, false, scratch, sizeof(scratch), out),
	    0);
	*lenp = evbuffer_get_length(out);
	s = calloc(1, *lenp + 1);
	assert_non_null(s);
	assert_int_equal(evbuffer_remove(out, s, *lenp), (int)*lenp);
	evbuffer_free(out);
	return s;
}

static size_t
count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = strcasestr(hay, needle); p != NULL; p = strcasestr(p + 1, needle))
		n++;
	return n;
}

static void
test_rewrite(void **state)
{
	struct vault_snap *snap = mksnap();
	size_t len;
	char *s;

	(void)state;
	/* No binding matched: the head goes upstream exactly as sent. */
	s = rewrite(snap, false, &len);
	assert_int_equal(len, strlen(REQ));
	assert_memory_equal(s, REQ, len);
	free(s);

	s = rewrite(snap, true, &len);
	assert_int_equal(count(s, "authorization:"), 1);
	assert_non_null(strstr(s, "\r\nAuthorization: Bearer " SECRET "\r\n"));
	assert_null(strstr(s, "sk-fake-1"));
	assert_null(strstr(s, "second"));
	assert_null(strstr(s, "third"));
	assert_int_equal(count(s, "accept-encoding:"), 1);
	assert_non_null(strstr(s, "\r\nAccept-Encoding: identity\r\n"));
	assert_int_equal(count(s, "range:"), 0);
	assert_non_null(strstr(s, "\r\nX-Keep: 1\r\n"));
	assert_non_null(strstr(s, "GET /v1/x HTTP/1.1\r\nHost: api.allowed.test\r\n"));
	/* The head still ends with exactly one blank line. */
	assert_true(len > 4 && memcmp(s + len - 4, "\r\n\r\n", 4) == 0);
	assert_ptr_equal(strstr(s, "\r\n\r\n"), s + len - 4);
	free(s);
	vault_snap_unref(snap);
}

/* The first bytes of a connection on the peek listener. */
static void
test_peek_classify(void **state)
{
	static const struct {
		const char *in;
		size_t len;
		enum intercept_peek want;
	} t[] = {
	    {"", 0, INTERCEPT_PEEK_MORE},
	    {"\x16\x03\x01", 3, INTERCEPT_PEEK_TLS},
	    {"\x16", 1, INTERCEPT_PEEK_TLS},
	    {"\x15\x03\x03", 3, INTERCEPT_PEEK_TLS}, /* any record type: tlspeek refuses it */
	    {"\x17\x03\x03", 3, INTERCEPT_PEEK_TLS},
	    {"GET / HTTP/1.1\r\n", 16, INTERCEPT_PEEK_HTTP},
	    {"EXFIL /x HTTP/1.1", 17, INTERCEPT_PEEK_HTTP}, /* unknown methods too */
	    {"M-SEARCH * HTTP/1.1", 19, INTERCEPT_PEEK_HTTP},
	    {"GET", 3, INTERCEPT_PEEK_MORE},
	    {"G", 1, INTERCEPT_PEEK_MORE},
	    {" GET /", 6, INTERCEPT_PEEK_OPAQUE},
	    {"SSH-2.0-OpenSSH_9.2\r\n", 21, INTERCEPT_PEEK_OPAQUE},
	    {"*1\r\n$4\r\nPING\r\n", 14, INTERCEPT_PEEK_OPAQUE},
	    {"\x00\x01"
	     "binary",
	        8, INTERCEPT_PEEK_OPAQUE},
	    {"EHLO\r\n", 6, INTERCEPT_PEEK_OPAQUE},
	    {"GET\t/", 5, INTERCEPT_PEEK_OPAQUE},
	    /* A token longer than any method is not HTTP, and never waits forever. */
	    {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 40, INTERCEPT_PEEK_OPAQUE},
	    {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 32, INTERCEPT_PEEK_MORE},
	    {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 33, INTERCEPT_PEEK_OPAQUE},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		assert_int_equal(
		    intercept_peek_classify((const uint8_t *)t[i].in, t[i].len), t[i].want);
}

static void
test_retry_refusal(void **state)
{
	(void)state;
	/* the same host: the handshake goes on */
	assert_null(intercept_retry_refusal("api.allowed.test", "api.allowed.test", 16, false));
	/* another host, an allowed one included: the fronting trick */
	assert_string_equal(
	    intercept_retry_refusal("api.allowed.test", "evil.test", 9, false), "hrr_sni_changed");
	assert_string_equal(
	    intercept_retry_refusal("front.allowed.test", "cotenant.evil.test", 18, false),
	    "hrr_sni_changed");
	assert_string_equal(
	    intercept_retry_refusal("api.allowed.test", "other.allowed.test", 18, false),
	    "hrr_sni_changed");
	/* a suffix or prefix of the name is another name */
	assert_string_equal(
	    intercept_retry_refusal("api.allowed.test", "api.allowed.tes", 15, false),
	    "hrr_sni_changed");
	assert_string_equal(
	    intercept_retry_refusal("api.allowed.test", "api.allowed.test.evil", 21, false),
	    "hrr_sni_changed");
	/* the length counts, not a NUL inside */
	assert_string_equal(
	    intercept_retry_refusal("api.allowed.test", "api.allowed.test\0x", 18, false),
	    "hrr_sni_invalid");
	/* none, or not a name */
	assert_string_equal(
	    intercept_retry_refusal("api.allowed.test", NULL, 0, false), "hrr_no_sni");
	assert_string_equal(
	    intercept_retry_refusal("api.allowed.test", "a..test", 7, false), "hrr_sni_invalid");
	/* ECH would hide the real name from this check */
	assert_string_equal(
	    intercept_retry_refusal("api.allowed.test", "api.allowed.test", 16, true),
	    "hrr_ech_refused");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_self),
	    cmocka_unit_test(test_host_canon),
	    cmocka_unit_test(test_error_status),
	    cmocka_unit_test(test_rewrite),
	    cmocka_unit_test(test_peek_classify),
	    cmocka_unit_test(test_retry_refusal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
