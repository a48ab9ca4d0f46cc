/*
 * Unit tests of placeholder substitution (vault/subst.c) and of its use by
 * the HTTP relay (vault/icpt_http.c, vault/inject.c) through the real code:
 * the encodings, the single-pass whole-buffer replacement, the streaming
 * substituter with a placeholder cut at every byte offset, and requests
 * through the relay harness: path, query and header values of a matching
 * request, a Content-Length body with its new length (or chunked past the
 * hold bound or after Expect: 100-continue), a chunked body with a
 * placeholder split across chunks and reads, JSON and form bodies, a
 * multipart body left alone, a placeholder on a request that matches no
 * binding or another binding left and logged, and the echoed secret
 * redacted from the response.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "policy/binding.h"
#include "vault/httpwire.h"
#include "vault/icpt_internal.h"
#include "vault/secret.h"
#include "vault/snap.h"
#include "vault/subst.h"

#include "icptfix.h"
#include "relayharness.h"

/* '+' and '/' are percent-encoded in a path, a query and a form; '"' is JSON-escaped. */
#define SECRET "sk-live+CANARY1/subst\"0123456789"
#define SECRET_URL "sk-live%2BCANARY1%2Fsubst%220123456789"
#define SECRET_JSON "sk-live+CANARY1/subst\\\"0123456789"
#define SECRET2 "tok2-CANARY2-abcdefghijklmnop"
#define PH "PH_C1_PLACEHOLDER"
#define PH2 "PH_C2_PLACEHOLDER"
#define HOST "Host: api.allowed.test\r\n"

/* ---------------------------------------------------------------- subst.c alone */

static void
rules1(struct subst_rules *r, const char *ph, const char *rep)
{
	size_t i = r->n++;

	r->r[i].ph = (uint8_t *)strdup(ph);
	r->r[i].phlen = strlen(ph);
	r->r[i].rep = (uint8_t *)strdup(rep);
	r->r[i].replen = strlen(rep);
	r->first[(uint8_t)ph[0]] = true;
	if (strlen(ph) > r->maxlen)
		r->maxlen = strlen(ph);
}

static char *
drain_str(struct evbuffer *b)
{
	size_t n = evbuffer_get_length(b);
	char *s = calloc(1, n + 1);

	assert_non_null(s);
	evbuffer_remove(b, s, n);
	return s;
}

static void
test_encode(void **state)
{
	uint8_t *o;
	size_t n;

	(void)state;
	assert_int_equal(
	    subst_encode((const uint8_t *)SECRET, strlen(SECRET), SUBST_URL, &o, &n), 0);
	assert_int_equal(n, strlen(SECRET_URL));
	assert_memory_equal(o, SECRET_URL, n);
	subst_free(o, n);
	assert_int_equal(
	    subst_encode((const uint8_t *)SECRET, strlen(SECRET), SUBST_JSON, &o, &n), 0);
	assert_int_equal(n, strlen(SECRET_JSON));
	assert_memory_equal(o, SECRET_JSON, n);
	subst_free(o, n);
	assert_int_equal(subst_encode((const uint8_t *)"a b\\c\x01", 6, SUBST_FORM, &o, &n), 0);
	assert_int_equal(n, 10);
	assert_memory_equal(o, "a+b%5Cc%01", 10);
	subst_free(o, n);
	assert_int_equal(subst_encode((const uint8_t *)"a b\\c\x01", 6, SUBST_JSON, &o, &n), 0);
	assert_int_equal(n, 12);
	assert_memory_equal(o, "a b\\\\c\\u0001", 12);
	subst_free(o, n);
}

static void
test_buf(void **state)
{
	struct subst_rules r;
	uint8_t *o;
	size_t n, cnt;
	const char *in = "x" PH "y" PH PH "PH_C1_PLACEHOLDEz";

	(void)state;
	memset(&r, 0, sizeof(r));
	/* The replacement holds the placeholder: single pass, never rescanned. */
	rules1(&r, PH, "<" PH ">");
	rules1(&r, "OTHER_PLACEHOLDER", "2");
	assert_int_equal(subst_buf(&r, (const uint8_t *)in, strlen(in), &o, &n, &cnt), 0);
	assert_int_equal(cnt, 3);
	assert_int_equal(n, strlen("x<" PH ">y<" PH "><" PH ">PH_C1_PLACEHOLDEz"));
	assert_memory_equal(o, "x<" PH ">y<" PH "><" PH ">PH_C1_PLACEHOLDEz", n);
	subst_free(o, n);
	/* Nothing to replace: no copy. */
	assert_int_equal(subst_buf(&r, (const uint8_t *)"abc", 3, &o, &n, &cnt), 0);
	assert_int_equal(cnt, 0);
	assert_null(o);
	subst_rules_clear(&r);
}

/* The body cut in three feeds at every pair of offsets gives the same output. */
static void
test_stream_split(void **state)
{
	const char *in = "{\"a\":\"" PH "\",\"b\":\"PH_C1_PLACE\",\"c\":\"" PH PH "\"}PH_C1";
	const char *want = "{\"a\":\"SEC\",\"b\":\"PH_C1_PLACE\",\"c\":\"SECSEC\"}PH_C1";
	size_t len = strlen(in);

	(void)state;
	for (size_t i = 0; i <= len; i++) {
		for (size_t j = i; j <= len; j++) {
			struct subst_rules r;
			struct subst_stream *st;
			struct evbuffer *out = evbuffer_new();
			char *got;

			memset(&r, 0, sizeof(r));
			rules1(&r, PH, "SEC");
			st = subst_stream_new(&r);
			assert_non_null(st);
			assert_non_null(out);
			assert_int_equal(subst_stream_feed(st, (const uint8_t *)in, i, out), 0);
			assert_int_equal(
			    subst_stream_feed(st, (const uint8_t *)in + i, j - i, out), 0);
			assert_int_equal(
			    subst_stream_feed(st, (const uint8_t *)in + j, len - j, out), 0);
			assert_int_equal(subst_stream_finish(st, out), 0);
			got = drain_str(out);
			if (strcmp(got, want) != 0)
				fail_msg("split at %zu,%zu: got %s", i, j, got);
			assert_int_equal(subst_stream_count(st), 3);
			free(got);
			evbuffer_free(out);
			subst_stream_free(st);
		}
	}
}

/* One byte per feed, two rules. */
static void
test_stream_bytewise(void **state)
{
	const char *in = "PH_C" PH "x" PH2 "PH_C2_PLACEHOLDE";
	struct subst_rules r;
	struct subst_stream *st;
	struct evbuffer *out = evbuffer_new();
	char *got;

	(void)state;
	memset(&r, 0, sizeof(r));
	rules1(&r, PH, "one");
	rules1(&r, PH2, "two");
	st = subst_stream_new(&r);
	assert_non_null(st);
	for (size_t i = 0; in[i] != '\0'; i++)
		assert_int_equal(subst_stream_feed(st, (const uint8_t *)in + i, 1, out), 0);
	assert_int_equal(subst_stream_finish(st, out), 0);
	got = drain_str(out);
	assert_string_equal(got, "PH_Conextwo"
	                         "PH_C2_PLACEHOLDE");
	assert_int_equal(subst_stream_count(st), 2);
	free(got);
	evbuffer_free(out);
	subst_stream_free(st);
}

/*
 * A body of back-to-back placeholders grows by a secret each: its growth
 * stops at SUBST_MAX_GROWTH, and the substituter says so from then on.
 */
static void
test_stream_growth_bounded(void **state)
{
	static char rep[SECRET_MAX_BYTES + 1];
	static char body[17 * 8 + 1];
	struct subst_rules r = {0};
	struct subst_stream *st;
	struct evbuffer *out = evbuffer_new();
	size_t fit = SUBST_MAX_GROWTH / (SECRET_MAX_BYTES - 8); /* 16 placeholders */

	(void)state;
	assert_non_null(out);
	memset(rep, 'k', SECRET_MAX_BYTES);
	for (size_t i = 0; i < 17; i++)
		memcpy(body + 8 * i, "PHPHPHPH", 8);
	rules1(&r, "PHPHPHPH", rep);
	st = subst_stream_new(&r);
	assert_non_null(st);
	assert_int_equal(fit, 16);
	assert_int_equal(subst_stream_feed(st, (const uint8_t *)body, 8 * fit, out), 0);
	assert_int_equal(evbuffer_get_length(out), fit * SECRET_MAX_BYTES);
	assert_int_equal(subst_stream_feed(st, (const uint8_t *)body, 8, out), SUBST_TOO_LARGE);
	assert_true(evbuffer_get_length(out) <= 8 * (fit + 1) + SUBST_MAX_GROWTH);
	assert_int_equal(subst_stream_feed(st, (const uint8_t *)"x", 1, out), SUBST_TOO_LARGE);
	assert_int_equal(subst_stream_finish(st, out), SUBST_TOO_LARGE);
	subst_stream_free(st);
	evbuffer_free(out);
}

static void
test_body_kind(void **state)
{
	struct httpwire_header h[2];

	(void)state;
#define HV(i, n, v)                                                                                \
	h[i].name = (struct httpwire_view){(const uint8_t *)(n), strlen(n)};                       \
	h[i].value = (struct httpwire_view){(const uint8_t *)(v), strlen(v)}
	HV(0, "Content-Type", "application/json; charset=utf-8");
	assert_int_equal(subst_body_kind(h, 1), SUBST_BODY_JSON);
	HV(0, "content-type", "application/vnd.api+json");
	assert_int_equal(subst_body_kind(h, 1), SUBST_BODY_JSON);
	HV(0, "Content-Type", "application/x-www-form-urlencoded");
	assert_int_equal(subst_body_kind(h, 1), SUBST_BODY_FORM);
	HV(0, "Content-Type", "multipart/form-data; boundary=x");
	assert_int_equal(subst_body_kind(h, 1), SUBST_BODY_SKIP);
	HV(0, "Content-Type", "text/plain");
	assert_int_equal(subst_body_kind(h, 1), SUBST_BODY_RAW);
	HV(1, "Content-Encoding", "gzip");
	assert_int_equal(subst_body_kind(h, 2), SUBST_BODY_SKIP);
	assert_int_equal(subst_body_kind(h, 0), SUBST_BODY_RAW);
#undef HV
}

/* ---------------------------------------------------------------- through the relay */

/*
 * b1: passthrough, GET and POST of http://api.allowed.test/v1/, c1's
 * placeholder everywhere; b2: bearer c2 on /v2/, c2's placeholder in
 * headers. /other is on the bound host but matches no binding.
 */
static struct vault_snap *
mksnap(void)
{
	static const char js[] =
	    "{\"credentials\":[{\"name\":\"c1\",\"source\":{\"value\":\"x\"}},"
	    "{\"name\":\"c2\",\"source\":{\"value\":\"x\"}}],"
	    "\"bindings\":[{\"name\":\"b1\",\"match\":{\"schemes\":[\"http\"],"
	    "\"hosts\":[\"api.allowed.test\"],\"paths\":[\"/v1/*\"],\"methods\":[\"GET\","
	    "\"POST\"]},\"auth\":{\"type\":\"passthrough\",\"substitutions\":[{\"credential\":"
	    "\"c1\",\"placeholder\":\"" PH "\",\"in\":[\"path\",\"query\",\"header\",\"body\"]}]}},"
	    "{\"name\":\"b2\",\"match\":{\"schemes\":[\"http\"],\"hosts\":[\"api.allowed.test\"],"
	    "\"paths\":[\"/v2/*\"]},\"auth\":{\"type\":\"bearer\",\"credential\":\"c2\","
	    "\"substitutions\":[{\"credential\":\"c2\",\"placeholder\":\"" PH2
	    "\",\"in\":[\"header\"]}]}}]}";
	struct policy_err pe;
	struct binding_set *bs = binding_set_from_json(js, strlen(js), &pe);
	struct secret *s[2] = {secret_new((const uint8_t *)SECRET, strlen(SECRET)),
	    secret_new((const uint8_t *)SECRET2, strlen(SECRET2))};
	struct vault_snap *snap;
	char err[256];

	if (bs == NULL)
		fail_msg("%s", pe.msg);
	assert_non_null(s[0]);
	assert_non_null(s[1]);
	snap = vault_snap_new(bs, s, 2, 1, err, sizeof(err));
	if (snap == NULL)
		fail_msg("%s", err);
	binding_set_free(bs);
	secret_unref(s[0]);
	secret_unref(s[1]);
	return snap;
}

/* Pump until the upstream has received want. */
static bool
up_got(struct relay *h, const char *want)
{
	for (int i = 0; i < RELAY_PUMP_TURNS; i++) {
		if (strstr(h->urx, want) != NULL)
			return true;
		(void)relay_pump_n(h, "\x01never", 1);
	}
	return strstr(h->urx, want) != NULL;
}

/* The payload of the chunked body after the first head in urx. */
static char *
dechunk(const char *urx)
{
	const char *p = strstr(urx, "\r\n\r\n");
	char *o = calloc(1, strlen(urx) + 1);
	size_t k = 0;

	assert_non_null(p);
	assert_non_null(o);
	p += 4;
	for (;;) {
		char *end;
		unsigned long n = strtoul(p, &end, 16);

		assert_true(end != p);
		assert_memory_equal(end, "\r\n", 2);
		p = end + 2;
		if (n == 0) {
			assert_memory_equal(p, "\r\n", 2);
			return o;
		}
		assert_true(strlen(p) >= n + 2);
		memcpy(o + k, p, n);
		k += n;
		p += n;
		assert_memory_equal(p, "\r\n", 2);
		p += 2;
	}
}

/* A long substituted value full of bytes to encode still loads (bounded extra forms). */
static void
test_long_value_loads(void **state)
{
	static const char js[] =
	    "{\"credentials\":[{\"name\":\"c1\",\"source\":{\"value\":\"x\"}}],"
	    "\"bindings\":[{\"name\":\"b1\",\"match\":{\"hosts\":[\"api.allowed.test\"],"
	    "\"paths\":[\"/v1/*\"]},\"auth\":{\"type\":\"passthrough\",\"substitutions\":[{"
	    "\"credential\":\"c1\",\"placeholder\":\"" PH "\",\"in\":[\"body\"]}]}}]}";
	struct policy_err pe;
	struct binding_set *bs = binding_set_from_json(js, strlen(js), &pe);
	static uint8_t v[SECRET_MAX_BYTES];
	struct secret *s;
	struct vault_snap *snap;
	char err[256];

	(void)state;
	assert_non_null(bs);
	for (size_t i = 0; i < sizeof(v); i++)
		v[i] = (uint8_t) "a/b+c\"d%"[i % 8];
	s = secret_new(v, sizeof(v));
	assert_non_null(s);
	snap = vault_snap_new(bs, &s, 1, 1, err, sizeof(err));
	if (snap == NULL)
		fail_msg("%s", err);
	vault_snap_unref(snap);
	binding_set_free(bs);
	secret_unref(s);
}

static void
test_relay_head(void **state)
{
	struct relay *h = relay_new(mksnap());
	static const char echo[] = "[" SECRET "][" SECRET_URL "]" SECRET_JSON "_____";
	char resp[256];

	(void)state;
	/* An echo of the secret in every form it was written. */
	snprintf(resp, sizeof(resp), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s",
	    strlen(echo), echo);
	h->script[0] = resp;
	h->nscript = 1;
	relay_send(h, "GET /v1/" PH "?k=" PH "&x=1 HTTP/1.1\r\n" HOST "X-Token: pre-" PH
	              "\r\nAuthorization: Bearer " PH "\r\nContent-Type: text/" PH
	              "\r\nProxy-Authorization: Basic " PH "\r\n\r\n");
	assert_true(relay_pump(h, "_____"));
	assert_non_null(strstr(h->urx, "GET /v1/" SECRET_URL "?k=" SECRET_URL "&x=1 HTTP/1.1\r\n"));
	assert_non_null(strstr(h->urx, "\r\nX-Token: pre-" SECRET "\r\n"));
	assert_non_null(strstr(h->urx, "\r\nAuthorization: Bearer " SECRET "\r\n"));
	/* Reserved headers are never substituted. */
	assert_non_null(strstr(h->urx, "\r\nContent-Type: text/" PH "\r\n"));
	/* A reserved credential header is still dropped, placeholder or not. */
	assert_null(strstr(h->urx, "Proxy-Authorization"));
	assert_int_equal(relay_count(h->urx, PH), 1);
	/* The workload never sees the secret, in any of its forms. */
	assert_null(strstr(h->wrx, "CANARY1"));
	assert_non_null(strstr(h->wrx, "200 OK"));
	relay_free(h);
}

static void
test_relay_unmatched(void **state)
{
	struct relay *h = relay_new(mksnap());

	(void)state;
	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
	h->script[1] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok2";
	h->nscript = 2;
	/* No binding: left as it is, logged. */
	relay_send(h, "GET /other/" PH " HTTP/1.1\r\n" HOST "X-Token: " PH "\r\n\r\n");
	assert_true(relay_pump(h, "ok"));
	assert_int_equal(relay_count(h->urx, PH), 2);
	assert_non_null(strstr(h->log, "placeholder_unmatched:no_binding"));
	/* b2's request with b1's placeholder: b2's own is substituted, b1's never. */
	relay_send(h, "GET /v2/x HTTP/1.1\r\n" HOST "X-A: " PH "\r\nX-B: " PH2 "\r\n\r\n");
	assert_true(relay_pump(h, "ok2"));
	assert_non_null(strstr(h->urx, "\r\nX-A: " PH "\r\n"));
	assert_non_null(strstr(h->urx, "\r\nX-B: " SECRET2 "\r\n"));
	assert_non_null(strstr(h->log, "placeholder_unmatched:other_binding"));
	assert_null(strstr(h->urx, "CANARY1"));
	relay_free(h);
}

/* Every header field, the path and the query substituted at once. */
static void
test_relay_every_header(void **state)
{
	struct relay *h = relay_new(mksnap());
	char req[16384];
	size_t k;

	(void)state;
	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
	h->nscript = 1;
	k = (size_t)snprintf(req, sizeof(req), "GET /v1/" PH "?q=" PH " HTTP/1.1\r\n" HOST);
	for (int i = 0; i < HTTPWIRE_MAX_HEADERS - 1; i++)
		k += (size_t)snprintf(req + k, sizeof(req) - k, "X-H%d: " PH "\r\n", i);
	snprintf(req + k, sizeof(req) - k, "\r\n");
	relay_send(h, req);
	assert_true(relay_pump(h, "ok"));
	assert_int_equal(relay_count(h->urx, SECRET), HTTPWIRE_MAX_HEADERS - 1);
	assert_int_equal(relay_count(h->urx, SECRET_URL), 2);
	assert_int_equal(relay_count(h->urx, PH), 0);
	relay_free(h);
}

/*
 * A Content-Length body: substituted, sent with its new Content-Length
 * (held up to max_buffer), or chunked past that bound or after an Expect:
 * 100-continue (the workload waits for the upstream's 100 before it sends
 * the body).
 */
static void
body_cl(const char *ctype, const char *extra, size_t max_buffer, const char *body, const char *want)
{
	struct relay *h = relay_new(mksnap());
	static char req[40000];
	char *got, cl[64];
	bool chunked = (max_buffer > 0 && max_buffer < strlen(want)) || *extra != '\0';

	if (max_buffer > 0)
		h->ic->cfg.max_buffer = max_buffer;
	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
	h->nscript = 1;
	snprintf(req, sizeof(req),
	    "POST /v1/x HTTP/1.1\r\n" HOST "Content-Type: %s\r\n%sContent-Length: %zu\r\n\r\n%s",
	    ctype, extra, strlen(body), body);
	relay_send(h, req);
	if (chunked) {
		if (!up_got(h, "\r\n0\r\n\r\n"))
			fail_msg(
			    "%s %s: upstream got %.300s; log %s", ctype, extra, h->urx, h->log);
		assert_null(strstr(h->urx, "Content-Length"));
		assert_non_null(strstr(h->urx, "\r\nTransfer-Encoding: chunked\r\n"));
		got = dechunk(h->urx);
	} else {
		assert_true(up_got(h, want));
		snprintf(cl, sizeof(cl), "\r\nContent-Length: %zu\r\n\r\n", strlen(want));
		assert_non_null(strstr(h->urx, cl));
		assert_null(strstr(h->urx, "Transfer-Encoding"));
		got = strdup(strstr(h->urx, "\r\n\r\n") + 4);
	}
	assert_true(relay_pump(h, "ok"));
	if (strcmp(got, want) != 0)
		fail_msg("%s body: got %.80s, want %.80s", ctype, got, want);
	free(got);
	relay_free(h);
}

static void
test_relay_body_length(void **state)
{
	static char big[30000], bigwant[30000];

	(void)state;
	body_cl("application/json", "", 0, "{\"k\":\"" PH "\",\"l\":[\"" PH "\"]}",
	    "{\"k\":\"" SECRET_JSON "\",\"l\":[\"" SECRET_JSON "\"]}");
	body_cl("application/x-www-form-urlencoded", "", 0, "a=1&k=" PH, "a=1&k=" SECRET_URL);
	body_cl("text/plain", "", 0, PH, SECRET);
	body_cl("text/plain", "Expect: 100-continue\r\n", 0, PH, SECRET);
	/* Past max_buffer: chunked, nothing lost. */
	memset(big, 'x', 20000);
	memcpy(big + 20000, PH, strlen(PH));
	memset(big + 20000 + strlen(PH), 'y', 5000);
	memset(bigwant, 'x', 20000);
	memcpy(bigwant + 20000, SECRET, strlen(SECRET));
	memset(bigwant + 20000 + strlen(SECRET), 'y', 5000);
	body_cl("text/plain", "", 4096, big, bigwant);
	body_cl("text/plain", "", 65536, big, bigwant);
}

/* b1 substitutes PH in headers and bodies with secret[0..n) (c1). */
static struct vault_snap *
mksnap_secret(const uint8_t *secret, size_t n)
{
	static const char js[] =
	    "{\"credentials\":[{\"name\":\"c1\",\"source\":{\"value\":\"x\"}}],"
	    "\"bindings\":[{\"name\":\"b1\",\"match\":{\"schemes\":[\"http\"],"
	    "\"hosts\":[\"api.allowed.test\"],\"paths\":[\"/v1/*\"],\"methods\":[\"GET\","
	    "\"POST\"]},\"auth\":{\"type\":\"passthrough\",\"substitutions\":[{"
	    "\"credential\":\"c1\",\"placeholder\":\"" PH "\",\"in\":[\"header\",\"body\"]}]}}]}";

	return icptfix_snap(js, secret, n);
}

/*
 * A placeholder as a credentialed request's Content-Encoding: refused (the
 * body scan cannot see through a coding), on the workload's own value. The
 * secret is 8 bytes, "identity"'s length, so that a check made on the
 * substituted value, after its bytes were wiped and freed with the head's
 * arena, would read them (valgrind and ASan see it).
 */
static void
test_relay_placeholder_as_content_encoding(void **state)
{
	struct relay *h = relay_new(mksnap_secret((const uint8_t *)"s3cr3t!!", 8));

	(void)state;
	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
	h->nscript = 1;
	relay_send(h, "GET /v1/x HTTP/1.1\r\n" HOST "Content-Encoding: " PH "\r\n\r\n");
	assert_true(relay_pump(h, "\r\n\r\n"));
	assert_non_null(strstr(h->wrx, "HTTP/1.1 403 "));
	assert_non_null(strstr(h->log, "request_body_encoded"));
	assert_null(strstr(h->urx, "GET /v1/x"));
	relay_free(h);
}

/*
 * A body of placeholders for a 16 KiB secret: what it would become passes
 * SUBST_MAX_GROWTH, and the request is refused (413) before its head or
 * any of it goes upstream, instead of buffering 40 secrets.
 */
static void
test_relay_body_growth_refused(void **state)
{
	static uint8_t v[SECRET_MAX_BYTES];
	static char req[4096];
	char body[40 * sizeof(PH)] = "";
	struct relay *h;

	(void)state;
	memset(v, 'k', sizeof(v));
	h = relay_new(mksnap_secret(v, sizeof(v)));
	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
	h->nscript = 1;
	for (int i = 0; i < 40; i++)
		strcat(body, PH);
	snprintf(req, sizeof(req),
	    "POST /v1/x HTTP/1.1\r\n" HOST
	    "Content-Type: text/plain\r\nContent-Length: %zu\r\n\r\n%s",
	    strlen(body), body);
	relay_send(h, req);
	assert_true(relay_pump(h, "\r\n\r\n"));
	if (strstr(h->wrx, "HTTP/1.1 413 ") == NULL)
		fail_msg("workload got %.80s; log %s", h->wrx, h->log);
	assert_non_null(strstr(h->log, "subst_too_large"));
	assert_null(strstr(h->urx, "POST /v1/x"));
	assert_null(strstr(h->urx, "kkkkkkkk"));
	relay_free(h);
}

/* Two substituted Content-Length bodies on one keep-alive connection. */
static void
test_relay_body_keepalive(void **state)
{
	struct relay *h = relay_new(mksnap());
	char want[256];

	(void)state;
	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none";
	h->script[1] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo";
	h->nscript = 2;
	relay_send(h, "POST /v1/a HTTP/1.1\r\n" HOST "Content-Type: text/plain\r\n"
	              "Content-Length: 19\r\n\r\n1:" PH);
	assert_true(relay_pump(h, "one"));
	relay_send(h, "POST /v1/b HTTP/1.1\r\n" HOST "Content-Type: text/plain\r\n"
	              "Content-Length: 19\r\n\r\n2:" PH);
	assert_true(relay_pump(h, "two"));
	snprintf(want, sizeof(want), "Content-Length: %zu\r\n\r\n1:" SECRET "POST /v1/b ",
	    strlen(SECRET) + 2);
	assert_non_null(strstr(h->urx, want));
	snprintf(want, sizeof(want), "Content-Length: %zu\r\n\r\n2:" SECRET, strlen(SECRET) + 2);
	assert_non_null(strstr(h->urx, want));
	assert_int_equal(h->accepts, 1);
	relay_free(h);
}

/* Multipart (and compressed) bodies are left as they are, framing too. */
static void
test_relay_body_multipart(void **state)
{
	struct relay *h = relay_new(mksnap());
	const char *body = "--b\r\n\r\n" PH "\r\n--b--\r\n";
	char req[512];

	(void)state;
	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
	h->nscript = 1;
	snprintf(req, sizeof(req),
	    "POST /v1/x HTTP/1.1\r\n" HOST
	    "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: %zu\r\n\r\n%s",
	    strlen(body), body);
	relay_send(h, req);
	assert_true(up_got(h, "--b--\r\n"));
	assert_non_null(strstr(h->urx, "Content-Length: "));
	assert_non_null(strstr(h->urx, "\r\n\r\n--b\r\n\r\n" PH "\r\n"));
	assert_null(strstr(h->urx, "CANARY1"));
	relay_free(h);
}

/* A chunked body, the placeholder cut across chunks and across reads. */
static void
test_relay_body_chunked(void **state)
{
	struct relay *h = relay_new(mksnap());
	char *got;

	(void)state;
	/* Answered once the body is in (its last chunk ends like a head). */
	h->script[1] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
	h->nscript = 2;
	relay_send(h, "POST /v1/x HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"
	              "5\r\nab PH\r\n");
	(void)relay_pump_n(h, "\x01never", 5);
	relay_send(h, "6\r\n_C1_PL\r\n");
	(void)relay_pump_n(h, "\x01never", 5);
	relay_send(h, "9\r\nACEHOLDER\r\n4\r\n PH_");
	(void)relay_pump_n(h, "\x01never", 5);
	relay_send(h, "\r\n0\r\n\r\n");
	if (!up_got(h, "\r\n0\r\n\r\n"))
		fail_msg("upstream got %s; log %s; workload %s", h->urx, h->log, h->wrx);
	got = dechunk(h->urx);
	assert_string_equal(got, "ab " SECRET " PH_");
	free(got);
	assert_true(relay_pump(h, "ok"));
	relay_free(h);
}

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_encode),
	    cmocka_unit_test(test_buf),
	    cmocka_unit_test(test_stream_split),
	    cmocka_unit_test(test_stream_bytewise),
	    cmocka_unit_test(test_stream_growth_bounded),
	    cmocka_unit_test(test_body_kind),
	    cmocka_unit_test(test_long_value_loads),
	    cmocka_unit_test(test_relay_head),
	    cmocka_unit_test(test_relay_unmatched),
	    cmocka_unit_test(test_relay_every_header),
	    cmocka_unit_test(test_relay_body_length),
	    cmocka_unit_test(test_relay_placeholder_as_content_encoding),
	    cmocka_unit_test(test_relay_body_growth_refused),
	    cmocka_unit_test(test_relay_body_keepalive),
	    cmocka_unit_test(test_relay_body_multipart),
	    cmocka_unit_test(test_relay_body_chunked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
