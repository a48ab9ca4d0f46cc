/*
 * Unit tests of vault/redact: every rendering of a secret is masked, whole
 * occurrences only, no other byte changes, and streaming over any split of
 * the input gives exactly the one-shot result (checked against a naive
 * search over the set's own patterns).
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

#include "vault/redact.h"
#include "vault/redact_internal.h"
#include "vault/secret.h"

#define S1 "sk-live-CANARY1-q8Zt3xW9pLm2vB7"
#define S2 "p@ss/w\xc3\xb6rd \"x\"\\y<&>"
#define S4 "hunter2-hunter2-hunter2"

static uint32_t
trand(uint32_t *st)
{
	*st ^= *st << 13;
	*st ^= *st >> 17;
	*st ^= *st << 5;
	return *st;
}

static struct secret *
mksecret(const char *v)
{
	struct secret *s = secret_new((const uint8_t *)v, strlen(v));

	assert_non_null(s);
	return s;
}

/* A set over S1, S2 and basic user:S4. */
static struct redact_set *
mkset(void)
{
	struct secret *a = mksecret(S1), *b = mksecret(S2), *c = mksecret(S4);
	struct redact_value v[3] = {
	    {.secret = a},
	    {.secret = b},
	    {.secret = c, .basic_user = (const uint8_t *)"user", .basic_user_len = 4},
	};
	enum redact_err err;
	struct redact_set *set = redact_set_new(v, 3, &err);

	assert_non_null(set);
	assert_int_equal(err, REDACT_ERR_NONE);
	secret_unref(a);
	secret_unref(b);
	secret_unref(c);
	return set;
}

/* Redacts a copy of s one-shot and returns it (caller frees). */
static uint8_t *
oneshot(const struct redact_set *set, const uint8_t *s, size_t len, uint64_t *m)
{
	uint8_t *b = malloc(len + 1);

	assert_non_null(b);
	memcpy(b, s, len);
	b[len] = 0;
	redact_buf(set, b, len, m);
	return b;
}

/* Asserts that needle, placed in filler, is masked whole and nothing else changes. */
static void
assert_masked_in(const struct redact_set *set, const char *needle, size_t nlen)
{
	char text[4096];
	size_t pre, total;
	uint8_t *out;
	uint64_t m = 0;
	size_t i;

	pre = (size_t)snprintf(text, sizeof(text), "{\"echo\": \"");
	assert_true(pre + nlen + 16 < sizeof(text));
	memcpy(text + pre, needle, nlen);
	memcpy(text + pre + nlen, "\", \"ok\": 1}", 11);
	total = pre + nlen + 11;
	out = oneshot(set, (const uint8_t *)text, total, &m);
	assert_true(m >= 1);
	for (i = 0; i < total; i++) {
		if (i >= pre && i < pre + nlen)
			assert_int_equal(out[i], REDACT_MASK_BYTE);
		else
			assert_int_equal(out[i], (uint8_t)text[i]);
	}
	free(out);
}

static void
test_refuses_short_and_bad(void **state)
{
	struct secret *s = mksecret("short12");
	struct secret *ok = mksecret(S1);
	struct redact_value v = {.secret = s};
	struct redact_value bad = {
	    .secret = ok, .basic_user = (const uint8_t *)"us:er", .basic_user_len = 5};
	struct redact_value null = {.secret = NULL};
	enum redact_err err = REDACT_ERR_NONE;

	assert_null(redact_set_new(&v, 1, &err));
	assert_int_equal(err, REDACT_ERR_TOO_SHORT);
	assert_null(redact_set_new(&bad, 1, &err));
	assert_int_equal(err, REDACT_ERR_INVALID);
	assert_null(redact_set_new(&null, 1, &err));
	assert_int_equal(err, REDACT_ERR_INVALID);
	assert_null(redact_set_new(NULL, 1, &err));
	assert_int_equal(err, REDACT_ERR_INVALID);
	assert_null(redact_set_new(&v, REDACT_MAX_VALUES + 1, &err));
	assert_int_equal(err, REDACT_ERR_TOO_MANY);
	assert_string_equal(redact_err_str(REDACT_ERR_TOO_SHORT), "value_too_short");
	secret_unref(s);
	secret_unref(ok);
}

static void
test_large_secret(void **state)
{
	uint8_t *v = malloc(SECRET_MAX_BYTES), *text = malloc(SECRET_MAX_BYTES + 4);
	struct secret *s;
	struct redact_value rv;
	struct redact_set *set;
	enum redact_err err;
	size_t i;

	assert_non_null(v);
	assert_non_null(text);
	for (i = 0; i < SECRET_MAX_BYTES; i++)
		v[i] = (uint8_t)('a' + i % 26);
	s = secret_new(v, SECRET_MAX_BYTES);
	assert_non_null(s);
	rv = (struct redact_value){
	    .secret = s, .basic_user = (const uint8_t *)"u", .basic_user_len = 1};
	/* The largest secret with all its renderings fits the pattern limit. */
	set = redact_set_new(&rv, 1, &err);
	assert_non_null(set);
	assert_true(redact_set_max_hold(set) < REDACT_MAX_PATTERN);
	memcpy(text, "x=\"", 3);
	memcpy(text + 3, v, SECRET_MAX_BYTES);
	text[SECRET_MAX_BYTES + 3] = '"';
	redact_buf(set, text, SECRET_MAX_BYTES + 4, NULL);
	assert_memory_equal(text, "x=\"", 3);
	for (i = 0; i < SECRET_MAX_BYTES; i++)
		assert_int_equal(text[3 + i], REDACT_MASK_BYTE);
	assert_int_equal(text[SECRET_MAX_BYTES + 3], '"');
	redact_set_unref(set);
	secret_unref(s);
	free(v);
	free(text);
}

static void
test_empty_set_passes_through(void **state)
{
	enum redact_err err;
	struct redact_set *set = redact_set_new(NULL, 0, &err);
	const char *t = "nothing " S1 " to see";
	uint8_t *out;
	uint64_t m = 0;

	assert_non_null(set);
	assert_int_equal(redact_set_npatterns(set), 0);
	assert_int_equal(redact_set_max_hold(set), 0);
	out = oneshot(set, (const uint8_t *)t, strlen(t), &m);
	assert_memory_equal(out, t, strlen(t));
	assert_int_equal(m, 0);
	free(out);
	redact_set_unref(set);
}

static void
test_raw_and_rendered(void **state)
{
	struct redact_set *set = mkset();
	struct secret *c = mksecret(S4);
	struct secret *a = mksecret(S1);
	uint8_t b64[256];
	char buf[512];
	size_t n, i;

	assert_masked_in(set, S1, strlen(S1));
	assert_masked_in(set, S2, strlen(S2));
	assert_masked_in(set, S4, strlen(S4));
	assert_masked_in(set, "user:" S4, strlen("user:" S4));
	/* Reversed and hex (lower and upper). */
	n = strlen(S1);
	for (i = 0; i < n; i++)
		buf[i] = S1[n - 1 - i];
	assert_masked_in(set, buf, n);
	for (i = 0; i < n; i++)
		snprintf(buf + 2 * i, 3, "%02x", (unsigned char)S1[i]);
	assert_masked_in(set, buf, 2 * n);
	for (i = 0; i < n; i++)
		snprintf(buf + 2 * i, 3, "%02X", (unsigned char)S1[i]);
	assert_masked_in(set, buf, 2 * n);
	/* base64 of the value, and Basic base64("user:" S4), built by secret.c. */
	assert_int_equal(secret_append_base64_raw(a, NULL, 0, b64, sizeof(b64)), 0);
	assert_masked_in(set, (char *)b64, secret_base64_len(a, 0));
	assert_int_equal(
	    secret_append_base64_raw(c, (const uint8_t *)"user:", 5, b64, sizeof(b64)), 0);
	n = secret_base64_len(c, 5);
	assert_masked_in(set, (char *)b64, n);
	secret_unref(a);
	secret_unref(c);
	redact_set_unref(set);
}

static void
test_base64url_and_alignments(void **state)
{
	struct redact_set *set = mkset();
	struct secret *s = mksecret(S2);
	uint8_t b64[256], text[300];
	size_t n, k, i, from, to, len = strlen(S2);
	uint8_t *out;

	/* base64url without padding: '+' '/' become '-' '_', '=' dropped. */
	assert_int_equal(secret_append_base64_raw(s, NULL, 0, b64, sizeof(b64)), 0);
	n = secret_base64_len(s, 0);
	while (n > 0 && b64[n - 1] == '=')
		n--;
	for (i = 0; i < n; i++)
		b64[i] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : b64[i];
	assert_masked_in(set, (char *)b64, n);
	/* Inside a longer base64 text at every alignment: the characters that
	 * depend on the secret alone are masked, the prefix's are not. */
	for (k = 1; k <= 5; k++) {
		assert_int_equal(
		    secret_append_base64_raw(s, (const uint8_t *)"abcde", k, b64, sizeof(b64)), 0);
		n = secret_base64_len(s, k);
		memcpy(text, b64, n);
		out = oneshot(set, text, n, NULL);
		from = (8 * k + 5) / 6;
		to = (8 * (k + len)) / 6;
		for (i = from; i < to; i++)
			assert_int_equal(out[i], REDACT_MASK_BYTE);
		for (i = 0; i < (8 * k) / 6; i++)
			assert_int_equal(out[i], text[i]);
		free(out);
	}
	secret_unref(s);
	redact_set_unref(set);
}

static void
test_url_and_json(void **state)
{
	struct redact_set *set = mkset();

	/* Percent-encoding, upper and lower hex, and form style. */
	assert_masked_in(set, "p%40ss%2Fw%C3%B6rd%20%22x%22%5Cy%3C%26%3E",
	    strlen("p%40ss%2Fw%C3%B6rd%20%22x%22%5Cy%3C%26%3E"));
	assert_masked_in(set, "p%40ss%2fw%c3%b6rd%20%22x%22%5cy%3c%26%3e",
	    strlen("p%40ss%2fw%c3%b6rd%20%22x%22%5cy%3c%26%3e"));
	assert_masked_in(set, "p%40ss%2Fw%C3%B6rd+%22x%22%5Cy%3C%26%3E",
	    strlen("p%40ss%2Fw%C3%B6rd+%22x%22%5Cy%3C%26%3E"));
	/* "user:pass" percent-encoded as a whole. */
	assert_masked_in(set, "user%3A" S4, strlen("user%3A" S4));
	/* JSON: minimal, "\/", ASCII-only, HTML-safe, all-\u. */
	assert_masked_in(set, "p@ss/w\xc3\xb6rd \\\"x\\\"\\\\y<&>",
	    strlen("p@ss/w\xc3\xb6rd \\\"x\\\"\\\\y<&>"));
	assert_masked_in(set, "p@ss\\/w\xc3\xb6rd \\\"x\\\"\\\\y<&>",
	    strlen("p@ss\\/w\xc3\xb6rd \\\"x\\\"\\\\y<&>"));
	assert_masked_in(
	    set, "p@ss/w\\u00f6rd \\\"x\\\"\\\\y<&>", strlen("p@ss/w\\u00f6rd \\\"x\\\"\\\\y<&>"));
	assert_masked_in(set, "p@ss\\/w\\u00f6rd \\\"x\\\"\\\\y<&>",
	    strlen("p@ss\\/w\\u00f6rd \\\"x\\\"\\\\y<&>"));
	assert_masked_in(set, "p@ss/w\xc3\xb6rd \\\"x\\\"\\\\y\\u003c\\u0026\\u003e",
	    strlen("p@ss/w\xc3\xb6rd \\\"x\\\"\\\\y\\u003c\\u0026\\u003e"));
	assert_masked_in(set,
	    "\\u0073\\u006b\\u002d\\u006c\\u0069\\u0076\\u0065\\u002d"
	    "\\u0043\\u0041\\u004e\\u0041\\u0052\\u0059\\u0031\\u002d\\u0071\\u0038"
	    "\\u005a\\u0074\\u0033\\u0078\\u0057\\u0039\\u0070\\u004c\\u006d\\u0032"
	    "\\u0076\\u0042\\u0037",
	    31 * 6);
	assert_masked_in(set,
	    "\\u0073\\u006B\\u002D\\u006C\\u0069\\u0076\\u0065\\u002D"
	    "\\u0043\\u0041\\u004E\\u0041\\u0052\\u0059\\u0031\\u002D\\u0071\\u0038"
	    "\\u005A\\u0074\\u0033\\u0078\\u0057\\u0039\\u0070\\u004C\\u006D\\u0032"
	    "\\u0076\\u0042\\u0037",
	    31 * 6);
	redact_set_unref(set);
}

/*
 * Percent-encoders that leave more than unreserved literal, and .NET's
 * JSON escaping (System.Text.Json's default): an AWS-style key with '/'
 * and '+' (and '~', '*', a space), echoed by each, is masked whole.
 */
static void
test_encoder_variants(void **state)
{
	static const char *const forms[] = {
	    /* Python urllib.parse.quote (safe '/') */
	    "wJalr/K7MDENG/bPx%2BEXAMPLE~K%2Ay%20z",
	    "wJalr/K7MDENG/bPx%2bEXAMPLE~K%2ay%20z",
	    /* Go url.PathEscape */
	    "wJalr%2FK7MDENG%2FbPx+EXAMPLE~K%2Ay%20z",
	    /* JavaScript encodeURIComponent */
	    "wJalr%2FK7MDENG%2FbPx%2BEXAMPLE~K*y%20z",
	    /* JavaScript encodeURI */
	    "wJalr/K7MDENG/bPx+EXAMPLE~K*y%20z",
	    /* Java URLEncoder */
	    "wJalr%2FK7MDENG%2FbPx%2BEXAMPLE%7EK*y+z",
	    /* .NET System.Text.Json */
	    "wJalr/K7MDENG/bPx\\u002BEXAMPLE~K*y z",
	};
	struct secret *a = mksecret("wJalr/K7MDENG/bPx+EXAMPLE~K*y z");
	struct redact_value v = {.secret = a};
	enum redact_err err;
	struct redact_set *set = redact_set_new(&v, 1, &err);

	(void)state;
	assert_non_null(set);
	secret_unref(a);
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++)
		assert_masked_in(set, forms[i], strlen(forms[i]));
	redact_set_unref(set);
}

static void
test_partial_never_masked(void **state)
{
	struct redact_set *set = mkset();
	const char *t[] = {
	    "prefix sk-live-CANARY1-q8Zt3xW9pLm2vB suffix",  /* last byte missing */
	    "prefix k-live-CANARY1-q8Zt3xW9pLm2vB7 suffix",  /* first byte missing */
	    "prefix sk-live-CANARY1-q8Zt3xW9pLm2vb7 suffix", /* one byte differs */
	    "prefix SK-LIVE-CANARY1-Q8ZT3XW9PLM2VB7 suffix", /* upper-cased: not covered */
	    "user:hunter2-hunter2-hunter",
	};
	uint8_t *out;
	uint64_t m = 0;
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		out = oneshot(set, (const uint8_t *)t[i], strlen(t[i]), &m);
		assert_memory_equal(out, t[i], strlen(t[i]));
		free(out);
	}
	assert_int_equal(m, 0);
	redact_set_unref(set);
}

static void
test_overlap_masks_union(void **state)
{
	struct secret *a = mksecret("AAAABBBBCCCC"), *b = mksecret("BBBBCCCCDDDD");
	struct secret *c = mksecret("ZZAAAABBBBCCCCQQ");
	struct redact_value v[3] = {{.secret = a}, {.secret = b}, {.secret = c}};
	struct redact_set *set = redact_set_new(v, 3, NULL);
	/* Overlapping matches; then a value found while the automaton is deep in
	 * the path of a longer one that does not complete. */
	const char *t = "xAAAABBBBCCCCDDDDx AAAABBBBCCCCAAAABBBBCCCC xZZAAAABBBBCCCCx";
	uint8_t *out;
	uint64_t m = 0;

	assert_non_null(set);
	out = oneshot(set, (const uint8_t *)t, strlen(t), &m);
	assert_string_equal(
	    (char *)out, "x****************x ************************ xZZ************x");
	assert_int_equal(m, 5);
	free(out);
	redact_set_unref(set);
	secret_unref(a);
	secret_unref(b);
	secret_unref(c);
}

struct naive {
	const uint8_t *in;
	size_t len;
	uint8_t *mask;
};

static void
naive_cb(const uint8_t *p, size_t plen, void *arg)
{
	struct naive *nv = arg;
	size_t i;

	for (i = 0; i + plen <= nv->len; i++)
		if (memcmp(nv->in + i, p, plen) == 0)
			memset(nv->mask + i, 1, plen);
}

/* The expected result by brute force over the set's patterns. */
static uint8_t *
naive_redact(const struct redact_set *set, const uint8_t *in, size_t len)
{
	struct naive nv = {.in = in, .len = len, .mask = calloc(1, len + 1)};
	uint8_t *out = malloc(len + 1);
	size_t i;

	assert_non_null(nv.mask);
	assert_non_null(out);
	assert_int_equal(redact_set_foreach_pattern(set, naive_cb, &nv), 0);
	for (i = 0; i < len; i++)
		out[i] = nv.mask[i] ? REDACT_MASK_BYTE : in[i];
	free(nv.mask);
	return out;
}

static void
test_patterns_enumerated(void **state)
{
	struct redact_set *set = mkset();
	struct naive nv = {.in = (const uint8_t *)"", .len = 0, .mask = NULL};

	/* Three values plus user:S4, about twenty renderings each, no duplicates. */
	assert_true(redact_set_npatterns(set) > 40);
	assert_true(redact_set_max_hold(set) >= strlen(S2) * 6 - 1);
	assert_int_equal(redact_set_foreach_pattern(set, naive_cb, &nv), 0);
	redact_set_unref(set);
}

/* Random text over a small alphabet with renderings of the secrets mixed in. */
static size_t
gen_stream(uint8_t *buf, size_t cap, uint32_t *rs)
{
	static const char *pieces[] = {
	    S1,
	    S2,
	    S4,
	    "user:" S4,
	    "dXNlcjpodW50ZXIyLWh1bnRlcjItaHVudGVyMg==",
	    "c2stbGl2ZS1DQU5BUlkxLXE4WnQzeFc5cExtMnZCNw==",
	    "p%40ss%2Fw%C3%B6rd%20%22x%22%5Cy%3C%26%3E",
	    "sk-live-CANARY1-q8Zt3xW9",
	    "\\u0073\\u006b\\u002d",
	    "hunter2-hunter2-hunte",
	    "AAAA",
	    "sk-",
	    "\r\n\r\n",
	};
	size_t n = 0, p, l;

	while (n < cap) {
		if (trand(rs) % 4 == 0) {
			p = trand(rs) % (sizeof(pieces) / sizeof(pieces[0]));
			l = strlen(pieces[p]);
			if (n + l > cap)
				break;
			memcpy(buf + n, pieces[p], l);
			n += l;
		} else {
			buf[n++] = (uint8_t)("sk-ABCuser:%2=\\ \x00\xc3"[trand(rs) % 16]);
		}
	}
	return n;
}

static void
test_random_splits_match_oneshot(void **state)
{
	struct redact_set *set = mkset();
	uint32_t rs = 0x2545f491;
	uint8_t in[6000], *ref, *naive, *got, *tmp;
	size_t len, off, chunk, olen, glen;
	uint64_t m1, m2, total = 0;
	int iter;

	tmp = malloc(sizeof(in) + redact_set_max_hold(set));
	got = malloc(sizeof(in));
	assert_non_null(tmp);
	assert_non_null(got);
	for (iter = 0; iter < 200; iter++) {
		struct redact_stream *st = redact_stream_new(set);

		assert_non_null(st);
		len = gen_stream(in, sizeof(in) - (trand(&rs) % 3000), &rs);
		m1 = 0;
		ref = oneshot(set, in, len, &m1);
		naive = naive_redact(set, in, len);
		assert_memory_equal(ref, naive, len);
		glen = 0;
		for (off = 0; off < len; off += chunk) {
			/* Mostly tiny feeds, sometimes single bytes, sometimes large. */
			chunk = iter % 5 == 0 ? 1 : 1 + trand(&rs) % (iter % 2 ? 7 : 700);
			if (chunk > len - off)
				chunk = len - off;
			assert_int_equal(redact_stream_feed_buf(st, in + off, chunk, tmp,
			                     sizeof(in) + redact_set_max_hold(set), &olen),
			    0);
			memcpy(got + glen, tmp, olen);
			glen += olen;
			/* Only a pending partial match is held back. */
			assert_true(redact_stream_held(st) <= redact_set_max_hold(set));
			assert_int_equal(glen + redact_stream_held(st), off + chunk);
		}
		assert_int_equal(redact_stream_flush_buf(st, tmp, sizeof(in), &olen), 0);
		memcpy(got + glen, tmp, olen);
		glen += olen;
		assert_int_equal(glen, len);
		assert_memory_equal(got, ref, len);
		m2 = redact_stream_matches(st);
		assert_int_equal(m1, m2);
		total += m1;
		redact_stream_free(st);
		free(ref);
		free(naive);
	}
	/* The generator does plant secrets: the comparison is not vacuous. */
	assert_true(total > 1000);
	free(tmp);
	free(got);
	redact_set_unref(set);
}

static void
longest_cb(const uint8_t *p, size_t len, void *arg)
{
	struct {
		uint8_t buf[1024];
		size_t len;
	} *l = arg;

	if (len > l->len && len <= sizeof(l->buf)) {
		memcpy(l->buf, p, len);
		l->len = len;
	}
}

/* A body holds back exactly min(max_hold, bytes so far), whatever they are. */
/* With a line feed in some pattern, a line feed releases nothing early. */
static void
test_lf_in_secret_keeps_hold(void **state)
{
	struct secret *sec = mksecret("line-one\nline-two");
	struct redact_value v = {.secret = sec};
	struct redact_set *set = redact_set_new(&v, 1, NULL);
	struct redact_stream *st;
	uint8_t dst[256];
	size_t olen, flen;
	const char *t = "x line-one\nline-two y";

	assert_non_null(set);
	secret_unref(sec);
	st = redact_stream_new(set);
	assert_non_null(st);
	/* Fed up to the line feed: all of "line-one\n" must stay held. */
	assert_int_equal(
	    redact_stream_feed_buf(st, (const uint8_t *)t, 11, dst, sizeof(dst), &olen), 0);
	assert_int_equal(redact_stream_held(st), 11);
	assert_int_equal(redact_stream_feed_buf(
	                     st, (const uint8_t *)t + 11, strlen(t) - 11, dst, sizeof(dst), &olen),
	    0);
	assert_int_equal(redact_stream_flush_buf(st, dst + olen, sizeof(dst) - olen, &flen), 0);
	assert_int_equal(olen + flen, strlen(t));
	assert_memory_equal(dst, "x *****************", 19);
	redact_stream_free(st);
	redact_set_unref(set);
}

static void
test_hold_is_fixed(void **state)
{
	struct redact_set *set = mkset();
	struct redact_stream *st = redact_stream_new(set);
	struct evbuffer *out = evbuffer_new();
	size_t h = redact_set_max_hold(set), n, i;
	uint8_t *clean = malloc(2 * h + 10), buf[64];

	assert_non_null(st);
	assert_non_null(out);
	assert_non_null(clean);
	assert_int_equal(redact_stream_max_hold(st), h);
	memset(clean, 'c', 2 * h + 10);
	/* Clean text is held as much as a pending prefix of a secret would be. */
	assert_int_equal(redact_stream_feed(st, clean, 10, out), 0);
	assert_int_equal(redact_stream_held(st), 10);
	assert_int_equal(evbuffer_get_length(out), 0);
	assert_int_equal(redact_stream_feed(st, clean, 2 * h, out), 0);
	assert_int_equal(redact_stream_held(st), h);
	assert_int_equal(evbuffer_get_length(out), h + 10);
	evbuffer_drain(out, evbuffer_get_length(out));
	/* A prefix of a secret: the same counts. */
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)"sk-live-CANARY1-q8", 18, out), 0);
	assert_int_equal(redact_stream_held(st), h);
	assert_int_equal(evbuffer_get_length(out), 18);
	/* Completing it masks the whole value, including the held part; a
	 * line feed releases everything before it (no pattern holds one). */
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)"Zt3xW9pLm2vB7\n", 14, out), 0);
	assert_int_equal(redact_stream_held(st), 0);
	assert_int_equal(redact_stream_flush(st, out), 0);
	n = evbuffer_get_length(out);
	assert_int_equal(n, 18 + h + 14);
	evbuffer_drain(out, n - 32);
	assert_int_equal(evbuffer_remove(out, buf, sizeof(buf)), 32);
	for (i = 0; i < 31; i++)
		assert_int_equal(buf[i], REDACT_MASK_BYTE);
	assert_int_equal(buf[31], '\n');
	assert_int_equal(redact_stream_matches(st), 1);
	/* After a line feed, the hold counts from it, match or not. */
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)"ab\ncdefgh", 9, out), 0);
	assert_int_equal(redact_stream_held(st), 6);
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)"ab\nsk-liv", 9, out), 0);
	assert_int_equal(redact_stream_held(st), 6);
	assert_int_equal(evbuffer_get_length(out), 12);
	assert_int_equal(redact_stream_flush(st, out), 0);
	evbuffer_drain(out, evbuffer_get_length(out));
	/* A prefix that never completes is released unchanged by flush. */
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)"x sk-live-CAN", 13, out), 0);
	assert_int_equal(evbuffer_get_length(out), 0);
	assert_int_equal(redact_stream_flush(st, out), 0);
	assert_int_equal(evbuffer_remove(out, buf, sizeof(buf)), 13);
	assert_memory_equal(buf, "x sk-live-CAN", 13);
	free(clean);
	evbuffer_free(out);
	redact_stream_free(st);
	redact_set_unref(set);
}

/*
 * Issue 16 item 4: a feed that ends exactly on a complete match of the
 * longest pattern left held = maxlen, past redact_set_max_hold().
 */
static void
test_feed_ends_on_longest_match(void **state)
{
	struct redact_set *set = mkset();
	struct redact_stream *st = redact_stream_new(set);
	struct {
		uint8_t buf[1024];
		size_t len;
	} l = {.len = 0};
	uint8_t dst[2048];
	size_t olen, flen, i;

	assert_non_null(st);
	assert_int_equal(redact_set_foreach_pattern(set, longest_cb, &l), 0);
	assert_int_equal(l.len, redact_set_max_hold(set) + 1);
	assert_int_equal(redact_stream_feed_buf(st, l.buf, l.len, dst, sizeof(dst), &olen), 0);
	assert_true(redact_stream_held(st) <= redact_set_max_hold(set));
	assert_int_equal(olen + redact_stream_held(st), l.len);
	assert_int_equal(redact_stream_flush_buf(st, dst + olen, sizeof(dst) - olen, &flen), 0);
	assert_int_equal(olen + flen, l.len);
	for (i = 0; i < l.len; i++)
		assert_int_equal(dst[i], REDACT_MASK_BYTE);
	redact_stream_free(st);
	redact_set_unref(set);
}

/*
 * Runs body through a stream of the given mode in the given cuts; writes
 * the output size of every feed and of the final flush to sizes (the
 * chunks the relay writes) and the output to res. Returns the count.
 */
static size_t
run_cuts(struct redact_set *set, enum redact_mode mode, const uint8_t *body, size_t len,
    const size_t *cuts, size_t ncuts, size_t *sizes, uint8_t *res)
{
	struct redact_stream *st = redact_stream_new_mode(set, mode);
	uint8_t *tmp = malloc(len + redact_stream_max_hold(st) + 1);
	size_t off = 0, k = 0, n, olen, rl = 0;

	assert_non_null(st);
	assert_non_null(tmp);
	for (size_t c = 0; off < len; c++) {
		n = c < ncuts ? cuts[c] : len - off;
		if (n > len - off)
			n = len - off;
		assert_int_equal(redact_stream_feed_buf(st, body + off, n, tmp,
		                     len + redact_stream_max_hold(st) + 1, &olen),
		    0);
		assert_true(redact_stream_held(st) <= redact_stream_max_hold(st));
		memcpy(res + rl, tmp, olen);
		rl += olen;
		sizes[k++] = olen;
		off += n;
	}
	assert_int_equal(
	    redact_stream_flush_buf(st, tmp, len + redact_stream_max_hold(st) + 1, &olen), 0);
	memcpy(res + rl, tmp, olen);
	rl += olen;
	sizes[k++] = olen;
	assert_int_equal(rl, len);
	free(tmp);
	redact_stream_free(st);
	return k;
}

/* Builds head || filler || pat[0, k) || tail into b; returns its length. */
static size_t
guess_body(
    uint8_t *b, const char *head, const uint8_t *pat, size_t plen, size_t k, const char *tail)
{
	size_t n = strlen(head);

	memcpy(b, head, n);
	/* The same length for every k: only how much matches changes. */
	memset(b + n, '~', plen - k);
	memcpy(b + n + plen - k, pat, k);
	n += plen;
	memcpy(b + n, tail, strlen(tail));
	return n + strlen(tail);
}

/*
 * Issue 15 item 5: the workload reflects a guess at the end of a body (or
 * of an event, or of a frame) and watches the chunk sizes. For a guess
 * matching 0, 1, ... all bytes of a pattern, the sequence of output sizes
 * must be the same; only a whole match changes content (its mask).
 */
static void
test_hold_does_not_depend_on_match(void **state)
{
	struct redact_set *set = mkset();
	struct {
		uint8_t buf[1024];
		size_t len;
	} l = {.len = 0};
	const uint8_t *pats[2];
	size_t plens[2];
	static const size_t cuts[][4] = {
	    {5000, 0, 0, 0}, {40, 1, 300, 7}, {1, 1, 1, 1}, {333, 2, 50, 9}};
	static const struct {
		enum redact_mode mode;
		const char *head, *tail;
	} shapes[] = {
	    {REDACT_MODE_BODY, "{\"error\":\"bad\",\"echo\":\"", ""},
	    {REDACT_MODE_BODY, "", "\"}"},
	    {REDACT_MODE_BODY, "{\"a\":1}\n{\"echo\":\"", "\"}\n{\"b\":2"},
	    {REDACT_MODE_SSE, "data: hello\n\ndata: ", ""},
	    {REDACT_MODE_SSE, "data: hello\n\ndata: ", "\n\n"},
	    {REDACT_MODE_SSE, ": c\r\n\r\ndata:", "\r\ndata: x\r\n"},
	};
	uint8_t body[4096], res[4096];
	size_t ref[64], got[64], nref, ngot;

	assert_int_equal(redact_set_foreach_pattern(set, longest_cb, &l), 0);
	pats[0] = (const uint8_t *)S1;
	plens[0] = strlen(S1);
	pats[1] = l.buf;
	plens[1] = l.len;
	for (size_t p = 0; p < 2; p++)
		for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++)
			for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
				size_t len = guess_body(
				    body, shapes[sh].head, pats[p], plens[p], 0, shapes[sh].tail);

				nref =
				    run_cuts(set, shapes[sh].mode, body, len, cuts[c], 4, ref, res);
				assert_memory_equal(res, body, len);
				for (size_t k = 1; k <= plens[p]; k++) {
					len = guess_body(body, shapes[sh].head, pats[p], plens[p],
					    k, shapes[sh].tail);
					ngot = run_cuts(
					    set, shapes[sh].mode, body, len, cuts[c], 4, got, res);
					assert_int_equal(ngot, nref);
					assert_memory_equal(got, ref, nref * sizeof(ref[0]));
					if (k < plens[p])
						assert_memory_equal(res, body, len);
					else
						assert_memory_not_equal(res, body, len);
				}
			}
	redact_set_unref(set);
}

/* Redacts an SSE stream fed in the given cuts; returns the output (caller frees). */
static uint8_t *
sse_run(struct redact_set *set, const char *s, const size_t *cuts, size_t ncuts)
{
	size_t len = strlen(s), sizes[256];
	uint8_t *res = calloc(1, len + 1);

	assert_non_null(res);
	assert_true(ncuts < 200);
	run_cuts(set, REDACT_MODE_SSE, (const uint8_t *)s, len, cuts, ncuts, sizes, res);
	return res;
}

/*
 * Issue 15 item 6: an event stream is redacted as the text a client
 * reassembles: data values across lines of one event and across events
 * (a client may concatenate them) are scanned as one text.
 */
static void
test_sse_reassembled(void **state)
{
	struct redact_set *set = mkset();
	static const size_t whole[1] = {100000};
	static const size_t bytes[1] = {1};
	static const char *split[] = {
	    "data: sk-live-CANA\ndata: RY1-q8Zt3xW9pLm2vB7\n\n",
	    "data: sk-live-CANA\n\ndata: RY1-q8Zt3xW9pLm2vB7\n\n",
	    "data:sk-live-CANA\r\n: a comment\r\nevent: x\r\n\r\ndata: RY1-q8Zt3xW9pLm2vB7\r\n\r\n",
	    "data: sk-live-\r\rdata: CANARY1-q8Zt3xW9pLm2vB7\r\r",
	};
	uint8_t *r;

	for (size_t i = 0; i < sizeof(split) / sizeof(split[0]); i++) {
		size_t len = strlen(split[i]);

		/* One read holding the whole split: every piece is masked. */
		r = sse_run(set, split[i], whole, 1);
		assert_null(memmem(r, len, "sk-live", 7));
		assert_null(memmem(r, len, "q8Zt3xW9pLm2vB7", 15));
		/* Framing bytes and field names are left alone. */
		for (size_t j = 0; j < len; j++)
			if (r[j] != REDACT_MASK_BYTE)
				assert_int_equal(r[j], (uint8_t)split[i][j]);
		assert_int_equal(memcmp(r, "data", 4), 0);
		free(r);
		/* One byte per read: within an event, still all masked. */
		if (i == 0) {
			r = sse_run(set, split[i], bytes, 1);
			assert_null(memmem(r, len, "sk-live", 7));
			free(r);
		}
	}
	/* Not data: an "event:" or "id:" value is no part of the text. */
	r = sse_run(set, "event: sk-live-CANA\ndata: RY1-q8Zt3xW9pLm2vB7\n\n", whole, 1);
	assert_non_null(memmem(r, 45, "sk-live-CANA", 12));
	free(r);
	/* One whole data value is masked by the raw scan and counted once. */
	{
		struct redact_stream *st = redact_stream_new_mode(set, REDACT_MODE_SSE);
		struct evbuffer *out = evbuffer_new();
		const char *e = "data: " S1 "\n\n";

		assert_non_null(st);
		assert_non_null(out);
		assert_int_equal(redact_stream_feed(st, (const uint8_t *)e, strlen(e), out), 0);
		assert_int_equal(redact_stream_matches(st), 1);
		/* A complete event goes out at once: SSE keeps flowing. */
		assert_int_equal(redact_stream_held(st), 0);
		assert_int_equal(evbuffer_get_length(out), strlen(e));
		/* A partial event is held whole until its end arrives. */
		assert_int_equal(redact_stream_feed(st, (const uint8_t *)"data: ab", 8, out), 0);
		assert_int_equal(redact_stream_held(st), 8);
		assert_int_equal(redact_stream_feed(st, (const uint8_t *)"\r\n\r\n", 4, out), 0);
		assert_int_equal(redact_stream_held(st), 0);
		assert_int_equal(evbuffer_get_length(out), strlen(e) + 12);
		/* Split across two data lines: one more match. */
		e = "data: sk-live-CANARY1\ndata: -q8Zt3xW9pLm2vB7\n\n";
		assert_int_equal(redact_stream_feed(st, (const uint8_t *)e, strlen(e), out), 0);
		assert_int_equal(redact_stream_matches(st), 2);
		evbuffer_free(out);
		redact_stream_free(st);
	}
	redact_set_unref(set);
}

/* WebSocket frames: complete frames go out at once; payloads reassembled. */
/*
 * Within a read (redact_stream_read_begin/_end), a framed stream releases
 * at the read's end only, however it was fed: two events each holding a
 * part of a secret, fed apart, are scanned together and masked whole.
 */
static void
test_read_releases_at_its_end(void **state)
{
	struct redact_set *set = mkset();
	struct redact_stream *st = redact_stream_new_mode(set, REDACT_MODE_SSE);
	struct evbuffer *out = evbuffer_new();
	const char *e1 = "data: sk-live-CANARY1-q8\n\n", *e2 = "data: Zt3xW9pLm2vB7\n\n";
	size_t n;
	char *got;

	(void)state;
	assert_non_null(st);
	assert_non_null(out);
	redact_stream_read_begin(st);
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)e1, strlen(e1), out), 0);
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)e2, strlen(e2), out), 0);
	assert_int_equal(evbuffer_get_length(out), 0);
	assert_int_equal(redact_stream_held(st), strlen(e1) + strlen(e2));
	assert_int_equal(redact_stream_read_end(st, out), 0);
	assert_int_equal(redact_stream_held(st), 0);
	n = evbuffer_get_length(out);
	assert_int_equal(n, strlen(e1) + strlen(e2));
	got = (char *)evbuffer_pullup(out, -1);
	assert_null(memmem(got, n, "sk-live", 7));
	assert_null(memmem(got, n, "Zt3xW9pLm2vB7", 13));
	assert_non_null(memmem(got, n, "data: ", 6));
	/* Outside a read, each feed releases its complete events as before. */
	evbuffer_drain(out, n);
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)e2, strlen(e2), out), 0);
	assert_int_equal(evbuffer_get_length(out), strlen(e2));
	evbuffer_free(out);
	redact_stream_free(st);
	redact_set_unref(set);
}

static void
test_websocket_frames(void **state)
{
	struct redact_set *set = mkset();
	struct redact_stream *st = redact_stream_new_mode(set, REDACT_MODE_WEBSOCKET);
	struct evbuffer *out = evbuffer_new();
	uint8_t f[128], res[128];
	size_t n = 0, a = 14, b = strlen(S1) - 14;

	assert_non_null(st);
	assert_non_null(out);
	assert_null(redact_stream_new_mode(set, (enum redact_mode)7));
	/* Two text frames, S1 split across them (FIN clear, then continuation). */
	f[n++] = 0x01;
	f[n++] = (uint8_t)a;
	memcpy(f + n, S1, a);
	n += a;
	f[n++] = 0x80;
	f[n++] = (uint8_t)b;
	memcpy(f + n, S1 + a, b);
	n += b;
	/* Half of a third frame. */
	f[n++] = 0x81;
	f[n++] = 10;
	memcpy(f + n, "hello", 5);
	n += 5;
	assert_int_equal(redact_stream_feed(st, f, n, out), 0);
	assert_int_equal(redact_stream_held(st), 7);
	assert_int_equal(evbuffer_get_length(out), n - 7);
	assert_int_equal(evbuffer_remove(out, res, sizeof(res)), (int)(n - 7));
	assert_null(memmem(res, n - 7, "sk-live", 7));
	assert_null(memmem(res, n - 7, "W9pLm2vB7", 9));
	assert_int_equal(res[0], 0x01);
	assert_int_equal(res[1], a);
	assert_int_equal(res[2 + a], 0x80);
	assert_int_equal(res[3 + a], b);
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)"world", 5, out), 0);
	assert_int_equal(redact_stream_held(st), 0);
	assert_int_equal(evbuffer_get_length(out), 12);
	evbuffer_drain(out, 12);
	redact_stream_free(st);
	/*
	 * Bytes that are not frames (a reserved opcode) are held as a body's
	 * are: a secret cut across two feeds is masked whole.
	 */
	st = redact_stream_new_mode(set, REDACT_MODE_WEBSOCKET);
	assert_non_null(st);
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)"echo sk-live", 12, out), 0);
	assert_int_equal(redact_stream_held(st), 12);
	assert_int_equal(evbuffer_get_length(out), 0);
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)S1 + 7, strlen(S1) - 7, out), 0);
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)"\n", 1, out), 0);
	assert_int_equal(redact_stream_held(st), 0);
	assert_int_equal(evbuffer_get_length(out), 5 + strlen(S1) + 1);
	assert_null(memmem(evbuffer_pullup(out, -1), evbuffer_get_length(out), "sk-live", 7));
	evbuffer_free(out);
	redact_stream_free(st);
	redact_set_unref(set);
}

/* One gRPC message into f at n: flag, 32-bit length, payload. */
static size_t
grpc_msg(uint8_t *f, size_t n, uint8_t flag, const char *p, size_t len)
{
	f[n++] = flag;
	f[n++] = 0;
	f[n++] = 0;
	f[n++] = (uint8_t)(len >> 8);
	f[n++] = (uint8_t)len;
	memcpy(f + n, p, len);
	return n + len;
}

/*
 * gRPC messages: each complete message goes out at once (a streaming call
 * waits for it), a partial one is held, a secret split across two
 * messages is masked, and bytes that are not gRPC framing flow.
 */
static void
test_grpc_messages(void **state)
{
	struct redact_set *set = mkset();
	struct redact_stream *st = redact_stream_new_mode(set, REDACT_MODE_GRPC);
	struct evbuffer *out = evbuffer_new();
	uint8_t f[256], res[256];
	size_t n = 0, a = 14, b = strlen(S1) - 14, m;

	(void)state;
	assert_non_null(st);
	assert_non_null(out);
	/* A short message without a line feed: not held (BODY mode would hold it). */
	n = grpc_msg(f, 0, 0, "got:pp-1-0", 10);
	assert_int_equal(redact_stream_feed(st, f, n, out), 0);
	assert_int_equal(redact_stream_held(st), 0);
	assert_int_equal(evbuffer_get_length(out), n);
	evbuffer_drain(out, n);
	/* S1 whole in one message, then split across two, then half a message. */
	n = grpc_msg(f, 0, 0, "auth:" S1, 5 + strlen(S1));
	n = grpc_msg(f, n, 0, S1, a);
	n = grpc_msg(f, n, 0, S1 + a, b);
	m = n;
	n = grpc_msg(f, n, 0, "hello", 5) - 2;
	assert_int_equal(redact_stream_feed(st, f, n, out), 0);
	assert_int_equal(redact_stream_held(st), n - m);
	assert_int_equal(evbuffer_get_length(out), m);
	assert_int_equal(evbuffer_remove(out, res, sizeof(res)), (int)m);
	assert_null(memmem(res, m, "sk-live", 7));
	assert_null(memmem(res, m, "W9pLm2vB7", 9));
	assert_int_equal(redact_stream_matches(st), 2);
	assert_int_equal(redact_stream_feed(st, (const uint8_t *)"lo", 2, out), 0);
	assert_int_equal(redact_stream_held(st), 0);
	assert_int_equal(evbuffer_get_length(out), n - m + 2);
	evbuffer_drain(out, n - m + 2);
	redact_stream_free(st);
	/*
	 * Not gRPC framing (a flag of 7): held as a body is (a secret cut
	 * across feeds is masked whole), still scanned.
	 */
	st = redact_stream_new_mode(set, REDACT_MODE_GRPC);
	assert_non_null(st);
	n = 0;
	f[n++] = 7;
	memcpy(f + n, S1, strlen(S1));
	n += strlen(S1);
	assert_int_equal(redact_stream_feed(st, f, 10, out), 0);
	assert_int_equal(redact_stream_feed(st, f + 10, n - 10, out), 0);
	assert_int_equal(redact_stream_held(st), n);
	assert_int_equal(redact_stream_flush(st, out), 0);
	assert_int_equal(evbuffer_remove(out, res, sizeof(res)), (int)n);
	assert_null(memmem(res, n, "sk-live", 7));
	evbuffer_free(out);
	redact_stream_free(st);
	redact_set_unref(set);
}

static void
test_evbuffer_paths_and_refcount(void **state)
{
	struct redact_set *set = mkset();
	struct redact_stream *st = redact_stream_new(set);
	struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
	const char *t = "HTTP/1.1 401\r\nX-Echo: Bearer " S1 "\r\n\r\ninvalid token ";
	size_t i, len = strlen(t), big = 3 * REDACT_FEED_SLICE + 17;
	uint8_t *data = malloc(big), *res = malloc(big);

	assert_non_null(data);
	assert_non_null(res);
	/* The stream keeps the set alive after its builder lets go. */
	redact_set_unref(set);
	/* Several evbuffer chains, the secret straddling two of them. */
	for (i = 0; i < len; i++)
		evbuffer_add(in, t + i, 1);
	assert_int_equal(redact_stream_feed_evbuffer(st, in, out), 0);
	assert_int_equal(evbuffer_get_length(in), 0);
	/* A large body crossing slices, with the secret across a slice boundary. */
	memset(data, 'z', big);
	memcpy(data + REDACT_FEED_SLICE - 10, S1, strlen(S1));
	assert_int_equal(redact_stream_feed(st, data, big, out), 0);
	assert_int_equal(redact_stream_flush(st, out), 0);
	assert_int_equal(evbuffer_get_length(out), len + big);
	assert_int_equal(evbuffer_remove(out, res, len), (int)len);
	assert_null(memmem(res, len, S1, strlen(S1)));
	assert_memory_equal(res, t, strlen("HTTP/1.1 401\r\nX-Echo: Bearer "));
	assert_memory_equal(res + len - 18, "\r\n\r\ninvalid token ", 18);
	assert_int_equal(evbuffer_remove(out, res, big), (int)big);
	for (i = 0; i < big; i++) {
		if (i >= REDACT_FEED_SLICE - 10 && i < REDACT_FEED_SLICE - 10 + strlen(S1))
			assert_int_equal(res[i], REDACT_MASK_BYTE);
		else
			assert_int_equal(res[i], 'z');
	}
	assert_int_equal(redact_stream_matches(st), 2);
	free(data);
	free(res);
	evbuffer_free(in);
	evbuffer_free(out);
	redact_stream_free(st);
}

static void
test_feed_buf_too_small(void **state)
{
	struct redact_set *set = mkset();
	struct redact_stream *st = redact_stream_new(set);
	uint8_t dst[64];
	size_t olen = 99;

	assert_non_null(st);
	assert_int_equal(
	    redact_stream_feed_buf(st, (const uint8_t *)"sk-live", 7, dst, sizeof(dst), &olen), 0);
	assert_int_equal(olen, 0);
	assert_int_equal(redact_stream_held(st), 7);
	/* 7 held + 60 new > 64: refused, nothing consumed. */
	assert_int_equal(redact_stream_feed_buf(st, dst, 60, dst, sizeof(dst), &olen), -1);
	assert_int_equal(redact_stream_held(st), 7);
	assert_int_equal(redact_stream_flush_buf(st, dst, 3, &olen), -1);
	assert_int_equal(redact_stream_flush_buf(st, dst, sizeof(dst), &olen), 0);
	assert_int_equal(olen, 7);
	assert_memory_equal(dst, "sk-live", 7);
	redact_stream_free(st);
	redact_set_unref(set);
}

/* Feeds body in chunks of k bytes through st, flushes, returns what came out (caller frees). */
static uint8_t *
stream_out(struct redact_stream *st, const uint8_t *body, size_t len, size_t k, size_t *outlen)
{
	struct evbuffer *out = evbuffer_new();
	uint8_t *r;

	assert_non_null(out);
	for (size_t off = 0; off < len; off += k)
		assert_int_equal(
		    redact_stream_feed(st, body + off, off + k < len ? k : len - off, out), 0);
	assert_int_equal(redact_stream_flush(st, out), 0);
	*outlen = evbuffer_get_length(out);
	r = malloc(*outlen + 1);
	assert_non_null(r);
	evbuffer_remove(out, r, *outlen);
	evbuffer_free(out);
	return r;
}

/*
 * A stream reused for another body (redact_stream_reuse) is a fresh one
 * for the set and mode it is given: the same output and count as a new
 * stream of that set and mode, in every mode, when the vault changed in
 * between (another set: its secret masked, the old set's no longer), and
 * whatever the last body left (a secret's first half at its end never
 * joins the next body's start).
 */
static void
test_stream_reuse(void **state)
{
	static const enum redact_mode modes[] = {
	    REDACT_MODE_BODY, REDACT_MODE_SSE, REDACT_MODE_WEBSOCKET, REDACT_MODE_GRPC};
	struct redact_set *old = mkset(), *now;
	struct secret *s5 = mksecret("tok-NEW-vault-5Hq2mR8sW1xZ");
	struct redact_value v = {.secret = s5};
	enum redact_err err;
	char first[256], second[256];
	uint32_t seed = 7;
	size_t h = strlen(S1) / 2;

	(void)state;
	now = redact_set_new(&v, 1, &err);
	assert_non_null(now);
	secret_unref(s5);
	/* The first body ends with S1's first half; the second has the rest, S1 and S5. */
	snprintf(first, sizeof(first), "data: x %.*s", (int)h, S1);
	snprintf(
	    second, sizeof(second), "%s " S1 " and tok-NEW-vault-5Hq2mR8sW1xZ end\n\n", S1 + h);
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		for (int round = 0; round < 20; round++) {
			struct redact_stream *used = redact_stream_new_mode(old, modes[round % 4]);
			struct redact_stream *fresh = redact_stream_new_mode(now, modes[i]);
			size_t k = 1 + (size_t)(trand(&seed) % 40), n1, n2, n3;
			uint8_t *a, *b, *c;

			assert_non_null(used);
			assert_non_null(fresh);
			a = stream_out(used, (const uint8_t *)first, strlen(first), k, &n1);
			assert_int_equal(redact_stream_reuse(used, now, modes[i]), 0);
			assert_int_equal(redact_stream_held(used), 0);
			assert_int_equal(redact_stream_matches(used), 0);
			b = stream_out(used, (const uint8_t *)second, strlen(second), k, &n2);
			c = stream_out(fresh, (const uint8_t *)second, strlen(second), k, &n3);
			assert_int_equal(n2, n3);
			assert_memory_equal(b, c, n2);
			assert_int_equal(redact_stream_matches(used), redact_stream_matches(fresh));
			assert_int_equal(redact_stream_matches(used), 1);
			assert_non_null(memmem(b, n2, S1, strlen(S1)));
			free(a);
			free(b);
			free(c);
			redact_stream_free(used);
			redact_stream_free(fresh);
		}
	}
	{
		struct redact_stream *st = redact_stream_new_mode(now, REDACT_MODE_BODY);

		assert_int_equal(redact_stream_reuse(st, now, (enum redact_mode)99), -1);
		redact_stream_free(st);
	}
	redact_set_unref(old);
	redact_set_unref(now);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_refuses_short_and_bad),
	    cmocka_unit_test(test_empty_set_passes_through),
	    cmocka_unit_test(test_large_secret),
	    cmocka_unit_test(test_raw_and_rendered),
	    cmocka_unit_test(test_base64url_and_alignments),
	    cmocka_unit_test(test_url_and_json),
	    cmocka_unit_test(test_encoder_variants),
	    cmocka_unit_test(test_read_releases_at_its_end),
	    cmocka_unit_test(test_partial_never_masked),
	    cmocka_unit_test(test_overlap_masks_union),
	    cmocka_unit_test(test_patterns_enumerated),
	    cmocka_unit_test(test_random_splits_match_oneshot),
	    cmocka_unit_test(test_hold_is_fixed),
	    cmocka_unit_test(test_lf_in_secret_keeps_hold),
	    cmocka_unit_test(test_feed_ends_on_longest_match),
	    cmocka_unit_test(test_hold_does_not_depend_on_match),
	    cmocka_unit_test(test_sse_reassembled),
	    cmocka_unit_test(test_websocket_frames),
	    cmocka_unit_test(test_grpc_messages),
	    cmocka_unit_test(test_evbuffer_paths_and_refcount),
	    cmocka_unit_test(test_feed_buf_too_small),
	    cmocka_unit_test(test_stream_reuse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
