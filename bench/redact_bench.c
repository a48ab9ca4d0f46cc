/*
 * Redactor throughput: scans clean text (no secret present) and text with a
 * secret every 4 KiB, through a redact_stream in 16 KiB feeds, for 1 KiB,
 * 1 MiB and 100 MiB buffers with 4 secrets (one of them basic auth), and
 * prints MB/s. Not a test; run by hand on an otherwise idle core.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vault/redact.h"
#include "vault/secret.h"

#define BENCH_FEED 16384

static double
bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Pseudo-English ASCII text, JSON-ish, deterministic. */
static void
bench_fill(uint8_t *buf, size_t len)
{
	static const char *words[] = {"the ", "model ", "returned ", "{\"id\": ", "42, ",
	    "\"content\": ", "\"hello world\", ", "tokens ", "stream ", "data: ", "\n", "choices ",
	    "index ", "usage ", "Authorization ", "Bearer ", "https://api/v1 "};
	uint32_t r = 12345;
	size_t n = 0, l;
	const char *w;

	while (n < len) {
		r = r * 1103515245u + 12345u;
		w = words[(r >> 16) % (sizeof(words) / sizeof(words[0]))];
		l = strlen(w);
		if (l > len - n)
			l = len - n;
		memcpy(buf + n, w, l);
		n += l;
	}
}

static double
bench_run(struct redact_set *set, const uint8_t *buf, size_t len, uint8_t *out, int reps,
    uint64_t *matches)
{
	double t0, t1;
	size_t off, n, olen;
	int i;

	t0 = bench_now();
	for (i = 0; i < reps; i++) {
		struct redact_stream *st = redact_stream_new(set);

		if (st == NULL)
			exit(1);
		for (off = 0; off < len; off += n) {
			n = len - off < BENCH_FEED ? len - off : BENCH_FEED;
			if (redact_stream_feed_buf(st, buf + off, n, out,
			        BENCH_FEED + redact_set_max_hold(set), &olen) == -1)
				exit(1);
		}
		if (redact_stream_flush_buf(
		        st, out, BENCH_FEED + redact_set_max_hold(set), &olen) == -1)
			exit(1);
		*matches += redact_stream_matches(st);
		redact_stream_free(st);
	}
	t1 = bench_now();
	return (double)len * reps / (t1 - t0) / 1e6;
}

int
main(void)
{
	static const char *vals[4] = {"sk-live-CANARY1-q8Zt3xW9pLm2vB7",
	    "ghp_9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a", "AKIAIOSFODNN7EXAMPLE/wJalrXUtnFEMI",
	    "hunter2-hunter2-hunter2"};
	static const size_t sizes[3] = {1024, 1 << 20, 100u << 20};
	struct redact_value rv[4];
	struct secret *s[4];
	struct redact_set *set;
	enum redact_err err;
	uint8_t *buf, *out;
	uint64_t m;
	double mbs;
	size_t i, off;
	int reps;

	for (i = 0; i < 4; i++) {
		s[i] = secret_new((const uint8_t *)vals[i], strlen(vals[i]));
		if (s[i] == NULL)
			return 1;
		rv[i] = (struct redact_value){.secret = s[i]};
	}
	rv[3].basic_user = (const uint8_t *)"user";
	rv[3].basic_user_len = 4;
	set = redact_set_new(rv, 4, &err);
	if (set == NULL) {
		fprintf(stderr, "redact_set_new: %s\n", redact_err_str(err));
		return 1;
	}
	printf("patterns %zu, max hold %zu\n", redact_set_npatterns(set), redact_set_max_hold(set));
	buf = malloc(sizes[2]);
	out = malloc(BENCH_FEED + redact_set_max_hold(set));
	if (buf == NULL || out == NULL)
		return 1;
	for (i = 0; i < 3; i++) {
		reps = sizes[i] >= (100u << 20) ? 3 : (int)((256u << 20) / sizes[i]);
		bench_fill(buf, sizes[i]);
		m = 0;
		mbs = bench_run(set, buf, sizes[i], out, reps, &m);
		printf("%9zu bytes clean:        %8.0f MB/s (%llu matches)\n", sizes[i], mbs,
		    (unsigned long long)m);
		for (off = 0; off + 64 < sizes[i]; off += 4096)
			memcpy(buf + off, vals[off / 4096 % 4], strlen(vals[off / 4096 % 4]));
		m = 0;
		mbs = bench_run(set, buf, sizes[i], out, reps, &m);
		printf("%9zu bytes secret/4KiB:  %8.0f MB/s (%llu matches)\n", sizes[i], mbs,
		    (unsigned long long)m);
	}
	free(buf);
	free(out);
	redact_set_unref(set);
	for (i = 0; i < 4; i++)
		secret_unref(s[i]);
	return 0;
}
