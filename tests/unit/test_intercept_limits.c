/*
 * test_intercept_limits: the interceptor's connection cap is derived from
 * RLIMIT_NOFILE at setup (a reserve for the channel, the API and DNS; by
 * default two descriptors per proxied connection), and configuration may
 * lower it or, set, raise it to the descriptors less a headroom for
 * upstreams (a connection between requests holds one), never past them.
 * Drives the real intercept_new() on loopback ports.
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
#include <event2/event.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "certs/ca.h"
#include "certs/leaf.h"
#include "vault/intercept.h"

static bool
no_name(void *arg, const char *canon)
{
	(void)arg;
	(void)canon;
	return false;
}

static bool
no_dst(void *arg, const char *canon, int family, const uint8_t *addr, uint16_t port)
{
	(void)arg;
	(void)canon;
	(void)family;
	(void)addr;
	(void)port;
	return false;
}

static int
no_socket(void *arg, int family, intercept_socket_cb cb, void *cbarg)
{
	(void)arg;
	(void)family;
	(void)cb;
	(void)cbarg;
	return -1;
}

static struct vault_snap *
no_snap(void *arg)
{
	(void)arg;
	return NULL;
}

static void
no_count(void *arg, enum intercept_metric m, uint64_t n)
{
	(void)arg;
	(void)m;
	(void)n;
}

static void
no_log(void *arg, const struct intercept_event *ev)
{
	(void)arg;
	(void)ev;
}

static bool
no_terminate(void *arg)
{
	(void)arg;
	return false;
}

static const struct intercept_ops ops = {
    .sni_allowed = no_name,
    .dst_ok = no_dst,
    .get_upstream_socket = no_socket,
    .snapshot = no_snap,
    .count = no_count,
    .log = no_log,
    .terminate_all = no_terminate,
};

/* A loopback port that was free a moment ago (v4 and v6). */
static uint16_t
free_port(void)
{
	for (int i = 0; i < 50; i++) {
		struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = in6addr_loopback};
		struct sockaddr_in a = {.sin_family = AF_INET};
		socklen_t len = sizeof(a);
		int s = socket(AF_INET, SOCK_STREAM, 0), s6 = socket(AF_INET6, SOCK_STREAM, 0);
		uint16_t p = 0;

		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
		    getsockname(s, (struct sockaddr *)&a, &len) == 0) {
			a6.sin6_port = a.sin_port;
			if (s6 >= 0 && bind(s6, (struct sockaddr *)&a6, sizeof(a6)) == 0)
				p = ntohs(a.sin_port);
		}
		if (s >= 0)
			close(s);
		if (s6 >= 0)
			close(s6);
		if (p != 0)
			return p;
	}
	fail_msg("no free loopback port");
	return 0;
}

/* intercept_new() with the given cap setting; returns its effective cap. */
static size_t
cap_with_reserve(
    struct event_base *base, struct leaf_cache *lc, unsigned max_conns, unsigned reserve)
{
	struct intercept_config cfg;
	struct intercept *ic;
	char err[256];
	size_t cap;

	memset(&cfg, 0, sizeof(cfg));
	cfg.tls_port = free_port();
	cfg.plain_port = free_port();
	cfg.peek_port = free_port();
	cfg.leaves = lc;
	cfg.max_conns = max_conns;
	cfg.fd_reserve = reserve;
	if (cfg.tls_port == cfg.plain_port || cfg.peek_port == cfg.tls_port ||
	    cfg.peek_port == cfg.plain_port)
		fail_msg("port collision");
	ic = intercept_new(base, &ops, NULL, &cfg, err, sizeof(err));
	if (ic == NULL)
		fail_msg("intercept_new: %s", err);
	assert_true(intercept_listening(ic));
	cap = intercept_max_conns(ic);
	intercept_free(ic);
	return cap;
}

static size_t
cap_with(struct event_base *base, struct leaf_cache *lc, unsigned max_conns)
{
	return cap_with_reserve(base, lc, max_conns, 0);
}

/* A throwaway CA and the leaf cache an intercept needs (*ca: to free after it). */
static struct leaf_cache *
leaves_new(struct ca **ca)
{
	struct ca_config cc;
	struct leaf_cache *lc;
	char err[256];

	memset(&cc, 0, sizeof(cc));
	*ca = ca_generate(&cc, err, sizeof(err));
	assert_non_null(*ca);
	lc = leaf_cache_new(*ca, NULL, err, sizeof(err));
	assert_non_null(lc);
	return lc;
}

static void
test_cap_from_rlimit(void **state)
{
	struct rlimit old, rl;
	struct event_base *base = event_base_new();
	struct ca *ca;
	struct leaf_cache *lc = leaves_new(&ca);

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);

	rl = old;
	rl.rlim_cur = 200; /* (200 - 64) / 2 = 68 proxied connections */
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_int_equal(cap_with(base, lc, 0), (200 - INTERCEPT_FD_RESERVE) / 2);
	/* Configuration lowers the cap, never raises it past the descriptors. */
	assert_int_equal(cap_with(base, lc, 10), 10);
	assert_int_equal(
	    cap_with(base, lc, 100000), 200 - INTERCEPT_FD_RESERVE - INTERCEPT_UP_HEADROOM);
	/* Fewer descriptors than twice the headroom: half of them, set or not. */
	rl.rlim_cur = 180;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_int_equal(cap_with(base, lc, 100000), (180 - INTERCEPT_FD_RESERVE) / 2);
	/*
	 * What the rest of the process may hold (the DNS proxy's and the API's
	 * own caps) comes out of the same budget: with 1024 descriptors, 256
	 * DNS connections and 64 API connections, the intercept stops at 320.
	 */
	rl.rlim_cur = 1024;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_int_equal(
	    cap_with_reserve(base, lc, 0, 256 + 64), (1024 - INTERCEPT_FD_RESERVE - 256 - 64) / 2);
	assert_true(
	    2 * cap_with_reserve(base, lc, 0, 256 + 64) + 256 + 64 + INTERCEPT_FD_RESERVE <= 1024);

	/*
	 * With many descriptors the default holds unless the cap is set; set,
	 * it may pass the default and half the descriptors (10,000 idle
	 * connections in 20,000), never the descriptors less the headroom nor
	 * the compiled maximum.
	 */
	rl.rlim_cur = old.rlim_max < 24000 ? old.rlim_max : 24000;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur >= 2 * INTERCEPT_DEFAULT_CONNS + INTERCEPT_FD_RESERVE)
		assert_int_equal(cap_with(base, lc, 0), INTERCEPT_DEFAULT_CONNS);
	else
		assert_int_equal(cap_with(base, lc, 0), (rl.rlim_cur - INTERCEPT_FD_RESERVE) / 2);
	if (rl.rlim_cur >= 10000 + INTERCEPT_FD_RESERVE + INTERCEPT_UP_HEADROOM)
		assert_int_equal(cap_with(base, lc, 10000), 10000);
	else
		assert_int_equal(cap_with(base, lc, 10000),
		    rl.rlim_cur - INTERCEPT_FD_RESERVE - INTERCEPT_UP_HEADROOM);
	assert_true(cap_with(base, lc, 100000) > INTERCEPT_DEFAULT_CONNS ||
	            rl.rlim_cur < INTERCEPT_DEFAULT_CONNS + INTERCEPT_FD_RESERVE);
	assert_int_equal(
	    cap_with(base, lc, 100000), rl.rlim_cur - INTERCEPT_FD_RESERVE - INTERCEPT_UP_HEADROOM);

	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	leaf_cache_free(lc);
	ca_free(ca);
	event_base_free(base);
}

/*
 * A chained proxy's address is IPv4 or IPv6 of its exact length, at setup
 * and when its name resolves: a connection keeps a copy sized for those
 * (anything longer would overrun it), so anything else is refused and what
 * was in force stays.
 */
static void
test_proxy_address_family(void **state)
{
	struct event_base *base = event_base_new();
	struct ca *ca;
	struct leaf_cache *lc = leaves_new(&ca);
	struct intercept_config cfg;
	struct intercept *ic;
	struct sockaddr_storage ss[2];
	socklen_t lens[2];
	char err[256];

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.tls_port = free_port();
	cfg.plain_port = free_port();
	cfg.leaves = lc;
	if (cfg.tls_port == cfg.plain_port)
		fail_msg("port collision");

	/* At setup: a Unix address, and an IPv4 one given a longer length. */
	memset(&cfg.proxy, 0, sizeof(cfg.proxy));
	cfg.proxy.ss_family = AF_UNIX;
	cfg.proxy_len = sizeof(struct sockaddr_storage);
	err[0] = '\0';
	assert_null(intercept_new(base, &ops, NULL, &cfg, err, sizeof(err)));
	assert_non_null(strstr(err, "IPv4 or IPv6"));
	cfg.proxy.ss_family = AF_INET;
	assert_null(intercept_new(base, &ops, NULL, &cfg, err, sizeof(err)));
	cfg.proxy_len = sizeof(struct sockaddr_in);
	ic = intercept_new(base, &ops, NULL, &cfg, err, sizeof(err));
	if (ic == NULL)
		fail_msg("intercept_new: %s", err);
	intercept_free(ic);

	/* By name: the resolved addresses are checked the same way. */
	memset(&cfg.proxy, 0, sizeof(cfg.proxy));
	cfg.proxy_len = 0;
	snprintf(cfg.proxy_name, sizeof(cfg.proxy_name), "proxy.example.test");
	ic = intercept_new(base, &ops, NULL, &cfg, err, sizeof(err));
	if (ic == NULL)
		fail_msg("intercept_new: %s", err);
	memset(ss, 0, sizeof(ss));
	ss[0].ss_family = AF_INET6;
	lens[0] = sizeof(struct sockaddr_in6);
	ss[1].ss_family = AF_UNIX;
	lens[1] = sizeof(struct sockaddr_storage);
	assert_int_equal(intercept_set_proxy(ic, ss, lens, 2), -1);
	ss[1].ss_family = AF_INET6;
	assert_int_equal(intercept_set_proxy(ic, ss, lens, 2), -1); /* a length past sin6 */
	lens[1] = sizeof(struct sockaddr_in6);
	assert_int_equal(intercept_set_proxy(ic, ss, lens, 2), 0);
	intercept_free(ic);

	leaf_cache_free(lc);
	ca_free(ca);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cap_from_rlimit),
	    cmocka_unit_test(test_proxy_address_family),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
