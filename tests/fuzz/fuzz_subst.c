/*
 * Fuzz target for vault/subst: the input is a request body. The first byte
 * picks the cut points; the rest is substituted one-shot (subst_buf) and
 * as a stream fed in input-derived pieces. Both must agree byte for byte,
 * count the same replacements, and equal a naive left-to-right reference
 * (a replacement holding a placeholder is never rescanned).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "vault/subst.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_SUBST_MAX_INPUT 65536

#define FUZZ_CHECK(c)                                                                              \
	do {                                                                                       \
		if (!(c))                                                                          \
			abort();                                                                   \
	} while (0)

/* Placeholders as binding.c allows them: none contains another. */
static const char *const fuzz_ph[3] = {"PH_AAAAAAAA", "PH_ABABABAB_X", "{{SECRET_C}}"};
static const char *const fuzz_rep[3] = {"", "replacement-two-PH_AAAAAAAA", "r3"};

static void
fuzz_rules(struct subst_rules *r)
{
	memset(r, 0, sizeof(*r));
	for (size_t i = 0; i < 3; i++) {
		struct subst_rule *x = &r->r[r->n++];

		x->ph = (uint8_t *)strdup(fuzz_ph[i]);
		x->phlen = strlen(fuzz_ph[i]);
		x->rep = (uint8_t *)strdup(fuzz_rep[i]);
		x->replen = strlen(fuzz_rep[i]);
		FUZZ_CHECK(x->ph != NULL && x->rep != NULL);
		r->first[x->ph[0]] = true;
		if (x->phlen > r->maxlen)
			r->maxlen = x->phlen;
	}
}

/* Naive reference: at each position the placeholder that starts there. */
static struct evbuffer *
fuzz_reference(const uint8_t *in, size_t len, size_t *count)
{
	struct evbuffer *o = evbuffer_new();

	FUZZ_CHECK(o != NULL);
	*count = 0;
	for (size_t i = 0; i < len;) {
		bool hit = false;

		for (size_t k = 0; k < 3 && !hit; k++) {
			size_t n = strlen(fuzz_ph[k]);

			if (len - i >= n && memcmp(in + i, fuzz_ph[k], n) == 0) {
				evbuffer_add(o, fuzz_rep[k], strlen(fuzz_rep[k]));
				i += n;
				(*count)++;
				hit = true;
			}
		}
		if (!hit)
			evbuffer_add(o, in + i++, 1);
	}
	return o;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct subst_rules r;
	struct subst_stream *st;
	struct evbuffer *ref, *out;
	uint8_t *one;
	size_t onelen, cnt, refcnt, off = 0;
	unsigned seed;

	if (size < 1 || size > FUZZ_SUBST_MAX_INPUT)
		return 0;
	seed = data[0];
	data++;
	size--;
	ref = fuzz_reference(data, size, &refcnt);
	fuzz_rules(&r);
	FUZZ_CHECK(subst_buf(&r, data, size, &one, &onelen, &cnt) == 0);
	FUZZ_CHECK(cnt == refcnt);
	if (cnt == 0) {
		FUZZ_CHECK(one == NULL && evbuffer_get_length(ref) == size &&
		           (size == 0 || memcmp(evbuffer_pullup(ref, -1), data, size) == 0));
	} else {
		FUZZ_CHECK(onelen == evbuffer_get_length(ref) &&
		           (onelen == 0 || memcmp(evbuffer_pullup(ref, -1), one, onelen) == 0));
	}
	out = evbuffer_new();
	FUZZ_CHECK(out != NULL);
	st = subst_stream_new(&r);
	FUZZ_CHECK(st != NULL);
	while (off < size) {
		size_t n = 1 + (seed * 31 + off * 7 + data[off]) % 17;

		if (n > size - off)
			n = size - off;
		FUZZ_CHECK(subst_stream_feed(st, data + off, n, out) == 0);
		off += n;
	}
	FUZZ_CHECK(subst_stream_finish(st, out) == 0);
	FUZZ_CHECK(subst_stream_count(st) == refcnt);
	FUZZ_CHECK(evbuffer_get_length(out) == evbuffer_get_length(ref) &&
	           (evbuffer_get_length(out) == 0 ||
	               memcmp(evbuffer_pullup(out, -1), evbuffer_pullup(ref, -1),
	                   evbuffer_get_length(out)) == 0));
	subst_stream_free(st);
	subst_free(one, onelen);
	evbuffer_free(out);
	evbuffer_free(ref);
	return 0;
}
