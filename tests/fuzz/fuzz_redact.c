/*
 * Fuzz target for vault/redact: the input is a response stream; it is
 * redacted one-shot, by a brute-force search over the set's patterns, and
 * as a stream cut at input-derived points (through both the buffer and the
 * evbuffer interfaces). All must agree byte for byte, and no byte outside a
 * whole match may change. A body stream holds back exactly
 * min(max_hold, bytes so far), never a count that depends on the match
 * state. The event-stream and WebSocket modes mask at least what the
 * one-shot pass masks, change nothing else but to the mask byte, and stay
 * within their hold bound.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "vault/redact.h"
#include "vault/redact_internal.h"
#include "vault/secret.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Longest input examined (the brute-force reference is quadratic-ish). */
#define FUZZ_REDACT_MAX_INPUT 65536

#define FUZZ_CHECK(c)                                                                              \
	do {                                                                                       \
		if (!(c))                                                                          \
			abort();                                                                   \
	} while (0)

static struct redact_set *fuzz_set;

static struct redact_set *
fuzz_redact_set(void)
{
	/* The last value lies inside the first: matches found via fail links. */
	static const char *vals[4] = {"sk-live-CANARY1-q8Zt3xW9pLm2vB7",
	    "p@ss/w\xc3\xb6rd \"x\"\\y<&>", "hunter2-hunter2-hunter2", "CANARY1-q8Zt3xW9"};
	struct redact_value rv[4];
	struct secret *s[4];
	int i;

	if (fuzz_set != NULL)
		return fuzz_set;
	for (i = 0; i < 4; i++) {
		s[i] = secret_new((const uint8_t *)vals[i], strlen(vals[i]));
		FUZZ_CHECK(s[i] != NULL);
		rv[i] = (struct redact_value){.secret = s[i]};
	}
	rv[2].basic_user = (const uint8_t *)"user";
	rv[2].basic_user_len = 4;
	fuzz_set = redact_set_new(rv, 4, NULL);
	FUZZ_CHECK(fuzz_set != NULL);
	for (i = 0; i < 4; i++)
		secret_unref(s[i]);
	return fuzz_set;
}

struct fuzz_naive {
	const uint8_t *in;
	size_t len;
	uint8_t *mask;
	uint64_t count;
};

static void
fuzz_naive_cb(const uint8_t *p, size_t plen, void *arg)
{
	struct fuzz_naive *nv = arg;
	const uint8_t *hit, *at = nv->in;
	size_t left = nv->len;

	while (left >= plen && (hit = memmem(at, left, p, plen)) != NULL) {
		memset(nv->mask + (hit - nv->in), 1, plen);
		nv->count++;
		left -= (size_t)(hit - at) + 1;
		at = hit + 1;
	}
}

static uint32_t
fuzz_rand(uint32_t *st)
{
	*st ^= *st << 13;
	*st ^= *st >> 17;
	*st ^= *st << 5;
	return *st;
}

/* A framed mode: nothing changed but to the mask; for SSE at least the
 * one-shot masking. */
static void
fuzz_framed(struct redact_set *set, enum redact_mode mode, const uint8_t *data, size_t size,
    const uint8_t *ref, uint8_t *got, uint8_t *tmp, size_t tcap, uint32_t *rs)
{
	struct redact_stream *st = redact_stream_new_mode(set, mode);
	size_t off, n, olen, glen = 0, i;

	FUZZ_CHECK(st != NULL);
	FUZZ_CHECK(redact_stream_max_hold(st) + 1 + size <= tcap);
	for (off = 0; off < size; off += n) {
		n = 1 + fuzz_rand(rs) % (fuzz_rand(rs) % 2 ? 5 : 211);
		if (n > size - off)
			n = size - off;
		FUZZ_CHECK(redact_stream_feed_buf(st, data + off, n, tmp, tcap, &olen) == 0);
		memcpy(got + glen, tmp, olen);
		glen += olen;
		FUZZ_CHECK(glen + redact_stream_held(st) == off + n);
		FUZZ_CHECK(redact_stream_held(st) <= redact_stream_max_hold(st));
	}
	FUZZ_CHECK(redact_stream_flush_buf(st, tmp, tcap, &olen) == 0);
	memcpy(got + glen, tmp, olen);
	glen += olen;
	FUZZ_CHECK(glen == size);
	for (i = 0; i < size; i++) {
		/* (Bytes that are not WebSocket frames are released at each feed's
		 * end, so a match across feeds there may be masked only in part.) */
		if (ref[i] == REDACT_MASK_BYTE && mode == REDACT_MODE_SSE)
			FUZZ_CHECK(got[i] == REDACT_MASK_BYTE);
		else
			FUZZ_CHECK(got[i] == data[i] || got[i] == REDACT_MASK_BYTE);
	}
	redact_stream_free(st);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct redact_set *set = fuzz_redact_set();
	struct fuzz_naive nv;
	struct redact_stream *st;
	struct evbuffer *eb;
	uint8_t *ref, *got, *tmp;
	size_t i, off, n, olen, glen, tcap, hold, since_lf = 0;
	uint64_t m = 0;
	uint32_t rs = 2166136261u;

	if (size > FUZZ_REDACT_MAX_INPUT)
		size = FUZZ_REDACT_MAX_INPUT;
	for (i = 0; i < size; i++)
		rs = (rs ^ data[i]) * 16777619u;
	rs |= 1;
	hold = redact_set_max_hold(set);
	tcap = size + REDACT_FRAMED_HOLD + hold + 1;
	ref = malloc(size + 1);
	got = malloc(size + 1);
	tmp = malloc(tcap);
	nv = (struct fuzz_naive){.in = data, .len = size, .mask = calloc(1, size + 1)};
	FUZZ_CHECK(ref != NULL && got != NULL && tmp != NULL && nv.mask != NULL);

	/* One-shot against brute force: masks exactly the union of occurrences. */
	if (size > 0)
		memcpy(ref, data, size);
	redact_buf(set, ref, size, &m);
	FUZZ_CHECK(redact_set_foreach_pattern(set, fuzz_naive_cb, &nv) == 0);
	FUZZ_CHECK(m == nv.count);
	for (i = 0; i < size; i++)
		FUZZ_CHECK(ref[i] == (nv.mask[i] ? REDACT_MASK_BYTE : data[i]));

	/* Streamed through caller buffers, cut at pseudo-random points. */
	st = redact_stream_new(set);
	FUZZ_CHECK(st != NULL);
	glen = 0;
	for (off = 0; off < size; off += n) {
		n = 1 + fuzz_rand(&rs) % (fuzz_rand(&rs) % 2 ? 3 : 97);
		if (n > size - off)
			n = size - off;
		FUZZ_CHECK(redact_stream_feed_buf(st, data + off, n, tmp, tcap, &olen) == 0);
		memcpy(got + glen, tmp, olen);
		glen += olen;
		FUZZ_CHECK(glen + redact_stream_held(st) == off + n);
		FUZZ_CHECK(redact_stream_held(st) <= redact_set_max_hold(set));
		/* The hold is a function of the input alone (issue 15 item 5):
		 * the bytes since the last line feed, at most max_hold. */
		for (i = off; i < off + n; i++)
			if (data[i] == '\n')
				since_lf = i + 1;
		FUZZ_CHECK(redact_stream_held(st) ==
		           (off + n - since_lf < hold ? off + n - since_lf : hold));
	}
	FUZZ_CHECK(redact_stream_flush_buf(st, tmp, tcap, &olen) == 0);
	memcpy(got + glen, tmp, olen);
	glen += olen;
	FUZZ_CHECK(glen == size);
	FUZZ_CHECK(size == 0 || memcmp(got, ref, size) == 0);
	FUZZ_CHECK(redact_stream_matches(st) == m);

	/* Streamed through evbuffers, other cuts, same stream object reused. */
	eb = evbuffer_new();
	FUZZ_CHECK(eb != NULL);
	for (off = 0; off < size; off += n) {
		n = 1 + fuzz_rand(&rs) % 41;
		if (n > size - off)
			n = size - off;
		FUZZ_CHECK(redact_stream_feed(st, data + off, n, eb) == 0);
	}
	FUZZ_CHECK(redact_stream_flush(st, eb) == 0);
	FUZZ_CHECK(evbuffer_get_length(eb) == size);
	FUZZ_CHECK(evbuffer_remove(eb, got, size) == (int)size);
	FUZZ_CHECK(size == 0 || memcmp(got, ref, size) == 0);
	FUZZ_CHECK(redact_stream_matches(st) == 2 * m);

	evbuffer_free(eb);
	redact_stream_free(st);
	fuzz_framed(set, REDACT_MODE_SSE, data, size, ref, got, tmp, tcap, &rs);
	fuzz_framed(set, REDACT_MODE_WEBSOCKET, data, size, ref, got, tmp, tcap, &rs);
	free(nv.mask);
	free(tmp);
	free(got);
	free(ref);
	return 0;
}
