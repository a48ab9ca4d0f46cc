/*
 * leaf_bench: cost of leaf minting (cache misses) and of cache hits.
 *
 * Prints mint latency p50/p99 in µs over distinct hosts (wall clock and thread
 * CPU time), and the mean cost of a cache hit in ns. Target (DESIGN.md §8): mint p99 <= 500 µs.
 * Usage: leaf_bench [mints] [hits]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "certs/ca.h"
#include "certs/leaf.h"

#define BENCH_DEFAULT_MINTS 2000
#define BENCH_DEFAULT_HITS 1000000
#define BENCH_HOT_HOSTS 64

static double
clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double
now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/* Thread CPU time: immune to preemption on a busy machine. */
static double
cpu_ns(void)
{
	return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	char err[CA_ERR_LEN], host[64], hot[BENCH_HOT_HOSTS][64];
	size_t hot_len[BENCH_HOT_HOSTS];
	struct leaf_config lcfg = {0};
	struct leaf_cache *lc;
	struct leaf_stats st;
	struct ca *ca;
	double *lat, *cpu, t0, t1, c0, c1, sum = 0, csum = 0;
	long mints = BENCH_DEFAULT_MINTS, hits = BENCH_DEFAULT_HITS, i;
	EVP_PKEY *key;
	X509 *x;
	int n;

	if (argc > 1)
		mints = strtol(argv[1], NULL, 10);
	if (argc > 2)
		hits = strtol(argv[2], NULL, 10);
	if (mints < 10 || hits < 1) {
		fprintf(stderr, "usage: leaf_bench [mints>=10] [hits>=1]\n");
		return 2;
	}
	if ((ca = ca_generate(NULL, err, sizeof(err))) == NULL) {
		fprintf(stderr, "ca_generate: %s\n", err);
		return 1;
	}
	lcfg.capacity = LEAF_MAX_CAPACITY;
	if ((lc = leaf_cache_new(ca, &lcfg, err, sizeof(err))) == NULL) {
		fprintf(stderr, "leaf_cache_new: %s\n", err);
		return 1;
	}
	if ((lat = calloc((size_t)mints, sizeof(*lat))) == NULL ||
	    (cpu = calloc((size_t)mints, sizeof(*cpu))) == NULL)
		return 1;
	for (i = 0; i < mints; i++) {
		n = snprintf(host, sizeof(host), "h%ld.bench.example.com", i);
		c0 = cpu_ns();
		t0 = now_ns();
		x = leaf_cache_get(lc, host, (size_t)n, &key, err, sizeof(err));
		t1 = now_ns();
		c1 = cpu_ns();
		if (x == NULL) {
			fprintf(stderr, "mint %s: %s\n", host, err);
			return 1;
		}
		X509_free(x);
		lat[i] = (t1 - t0) / 1e3;
		cpu[i] = (c1 - c0) / 1e3;
		sum += lat[i];
		csum += cpu[i];
	}
	qsort(lat, (size_t)mints, sizeof(*lat), cmp_double);
	qsort(cpu, (size_t)mints, sizeof(*cpu), cmp_double);
	printf("leaf mint (miss), wall: n=%ld mean=%.1f us p50=%.1f us p99=%.1f us max=%.1f us\n",
	    mints, sum / (double)mints, lat[mints / 2], lat[(mints * 99) / 100], lat[mints - 1]);
	printf("leaf mint (miss), cpu:  n=%ld mean=%.1f us p50=%.1f us p99=%.1f us max=%.1f us\n",
	    mints, csum / (double)mints, cpu[mints / 2], cpu[(mints * 99) / 100], cpu[mints - 1]);

	/* Hits: names prepared up front, so only the lookup is timed. */
	for (i = 0; i < BENCH_HOT_HOSTS; i++)
		hot_len[i] = (size_t)snprintf(hot[i], sizeof(hot[i]), "h%ld.bench.example.com", i);
	c0 = cpu_ns();
	t0 = now_ns();
	for (i = 0; i < hits; i++) {
		x = leaf_cache_get(lc, hot[i % BENCH_HOT_HOSTS], hot_len[i % BENCH_HOT_HOSTS], &key,
		    err, sizeof(err));
		if (x == NULL) {
			fprintf(stderr, "hit %s: %s\n", hot[i % BENCH_HOT_HOSTS], err);
			return 1;
		}
		X509_free(x);
	}
	t1 = now_ns();
	c1 = cpu_ns();
	leaf_cache_stats(lc, &st);
	printf("leaf cache hit (get + X509_free): n=%ld wall mean=%.0f ns, cpu mean=%.0f ns\n",
	    hits, (t1 - t0) / (double)hits, (c1 - c0) / (double)hits);
	printf("stats: mints=%llu hits=%llu evictions=%llu entries=%zu\n",
	    (unsigned long long)st.mints, (unsigned long long)st.hits,
	    (unsigned long long)st.evictions, st.entries);
	free(lat);
	free(cpu);
	leaf_cache_free(lc);
	ca_free(ca);
	return 0;
}
