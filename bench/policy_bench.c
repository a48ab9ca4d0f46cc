/*
 * policy_bench: median lookup cost of policy_decide_name() and
 * policy_decide_addr() with 10, 1k, 10k and 100k rules, plus the time to
 * parse and build such a policy from the OpenSandbox JSON. The lookups
 * must stay flat as rules grow (hash per label, hash per prefix length).
 * Usage: policy_bench [ROUNDS]   (prints a table on stdout)
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "policy/policy.h"

#define BENCH_QUERIES 4096 /* distinct queries, cycled */
#define BENCH_BATCH 4096   /* lookups per timed batch */
#define BENCH_ROUNDS 101   /* timed batches; the median is reported */

static uint64_t bench_state = 0x9e3779b97f4a7c15ULL;

static uint32_t
bench_rand(void)
{
	bench_state ^= bench_state << 13;
	bench_state ^= bench_state >> 7;
	bench_state ^= bench_state << 17;
	return (uint32_t)(bench_state >> 16);
}

static double
bench_now(void)
{
	struct timespec ts;
	/* CPU time of this thread: stable on a shared machine, what DESIGN asks for */
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int
bench_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* N rules: a third exact names, a third wildcards, a third IPv4/IPv6 prefixes. */
static char *
bench_policy_json(size_t n)
{
	size_t cap = n * 96 + 256, o = 0;
	char *b = malloc(cap);

	o += (size_t)snprintf(b + o, cap - o, "{\"defaultAction\":\"deny\",\"egress\":[");
	for (size_t i = 0; i < n; i++) {
		const char *act = (i % 7 == 3) ? "deny" : "allow";
		o += (size_t)snprintf(
		    b + o, cap - o, "%s{\"action\":\"%s\",\"target\":\"", i ? "," : "", act);
		switch (i % 6) {
		case 0:
		case 3:
			o += (size_t)snprintf(
			    b + o, cap - o, "api%zu.svc%zu.example.com", i, i % 97);
			break;
		case 1:
		case 4:
			o += (size_t)snprintf(b + o, cap - o, "*.zone%zu.example.net", i);
			break;
		case 2:
			o += (size_t)snprintf(b + o, cap - o, "%u.%u.%u.%u",
			    11 + (unsigned)(i >> 16 & 0x3f), (unsigned)(i >> 8 & 0xff),
			    (unsigned)(i & 0xff), 1 + (unsigned)(i % 200));
			break;
		default:
			o += (size_t)snprintf(
			    b + o, cap - o, "2001:db8:%zx:%zx::/64", i >> 16, i & 0xffff);
			break;
		}
		o += (size_t)snprintf(b + o, cap - o, "\"}");
	}
	snprintf(b + o, cap - o, "]}");
	return b;
}

struct bench_addr {
	int family;
	uint8_t b[16];
};

static void
bench_run(size_t n, size_t rounds)
{
	static char names[BENCH_QUERIES][96];
	static struct bench_addr addrs[BENCH_QUERIES];
	static double samples[BENCH_ROUNDS * 4];
	struct policy_limits lim = {.max_rules = 0};
	struct policy_err err;
	struct policy_decision d;
	char *json = bench_policy_json(n);
	size_t allowed = 0;

	double t0 = bench_now();
	struct policy *p = policy_from_json(json, strlen(json), &lim, &err);
	double build_ms = (bench_now() - t0) / 1e6;
	free(json);
	if (p == NULL) {
		fprintf(stderr, "build failed: %s\n", err.msg);
		exit(1);
	}
	/* half hits (exact names, names under wildcards, covered addresses), half misses */
	for (size_t q = 0; q < BENCH_QUERIES; q++) {
		size_t i = bench_rand() % n;
		switch (q % 4) {
		case 0:
			snprintf(names[q], sizeof(names[q]), "api%zu.svc%zu.example.com", i - i % 3,
			    (i - i % 3) % 97);
			break;
		case 1:
			snprintf(names[q], sizeof(names[q]), "x%u.y.zone%zu.example.net",
			    bench_rand() % 1000, i - (i % 3) + 1);
			break;
		case 2:
			snprintf(
			    names[q], sizeof(names[q]), "miss%u.a.b.example.org", bench_rand());
			break;
		default:
			snprintf(
			    names[q], sizeof(names[q]), "www.unknown%u.example.com", bench_rand());
			break;
		}
		if (q % 2 == 0) {
			size_t k = i - i % 6 + 2;
			addrs[q].family = AF_INET;
			addrs[q].b[0] = (uint8_t)(11 + (k >> 16 & 0x3f));
			addrs[q].b[1] = (uint8_t)(k >> 8 & 0xff);
			addrs[q].b[2] = (uint8_t)(k & 0xff);
			addrs[q].b[3] = (uint8_t)(1 + k % 200);
		} else {
			addrs[q].family = AF_INET6;
			memset(addrs[q].b, 0, 16);
			addrs[q].b[0] = 0x20;
			addrs[q].b[1] = 0x01;
			addrs[q].b[2] = 0x0d;
			addrs[q].b[3] = 0xb8;
			addrs[q].b[4] = (uint8_t)(bench_rand() & 0xff);
			addrs[q].b[7] = (uint8_t)(bench_rand() & 0xff);
			addrs[q].b[15] = 1;
		}
	}
	/* names */
	for (size_t r = 0; r < rounds; r++) {
		double s = bench_now();
		for (size_t k = 0; k < BENCH_BATCH; k++) {
			policy_decide_name(p, names[(r * BENCH_BATCH + k) % BENCH_QUERIES], &d);
			allowed += d.action == POLICY_ALLOW;
		}
		samples[r] = (bench_now() - s) / BENCH_BATCH;
	}
	qsort(samples, rounds, sizeof(double), bench_cmp);
	double name_ns = samples[rounds / 2];
	/* addresses */
	for (size_t r = 0; r < rounds; r++) {
		double s = bench_now();
		for (size_t k = 0; k < BENCH_BATCH; k++) {
			const struct bench_addr *a = &addrs[(r * BENCH_BATCH + k) % BENCH_QUERIES];
			policy_decide_addr(p, a->family, a->b, 443, 6, &d);
			allowed += d.action == POLICY_ALLOW;
		}
		samples[r] = (bench_now() - s) / BENCH_BATCH;
	}
	qsort(samples, rounds, sizeof(double), bench_cmp);
	double addr_ns = samples[rounds / 2];
	printf("%8zu  %12.1f  %12.1f  %12.2f   (%zu allowed)\n", n, name_ns, addr_ns, build_ms,
	    allowed);
	policy_free(p);
}

int
main(int argc, char **argv)
{
	static const size_t sizes[] = {10, 1000, 10000, 100000};
	size_t rounds = BENCH_ROUNDS;

	if (argc > 1) {
		rounds = (size_t)strtoul(argv[1], NULL, 10);
		if (rounds < 1 || rounds > BENCH_ROUNDS)
			rounds = BENCH_ROUNDS;
	}
	printf(
	    "policy lookup, CPU ns per lookup, median of %zu batches of %d\n", rounds, BENCH_BATCH);
	printf("%8s  %12s  %12s  %12s\n", "rules", "name ns/op", "addr ns/op", "build ms");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		bench_run(sizes[i], rounds);
	return 0;
}
