/*
 * Unit tests of egressd/dns/dnsvia (DNS over TCP through the chained
 * proxy's CONNECT) without root: the fake parent of tests/lib hands out
 * (unmarked) sockets, a loopback listener plays the proxy, and the test
 * holds c-ares's end of the socketpair. The CONNECT request is framed
 * exactly, and an answer the proxy sends right before it closes reaches
 * c-ares's end before that end sees the close.
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
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egressd/child/sockpool.h"
#include "egressd/common/config.h"
#include "egressd/dns/dnsvia.h"
#include "fakeparent.h"

struct env {
	struct event_base *base;
	struct fakeparent f;
	struct sockpool *pool;
	struct config cfg;
	struct dnsvia *v;
	int lfd;       /* the fake proxy's listener */
	uint16_t port; /* its port */
};

/* A bounded number of loop turns (no clock). */
static void
turns(struct env *e, int n)
{
	for (int i = 0; i < n; i++)
		event_base_loop(e->base, EVLOOP_NONBLOCK);
}

static void
env_init(struct env *e, const char *auth)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	char err[256];

	memset(e, 0, sizeof(*e));
	e->base = event_base_new();
	assert_non_null(e->base);
	assert_int_equal(fakeparent_init(&e->f, e->base), 0);
	e->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_true(e->lfd >= 0);
	assert_int_equal(bind(e->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(e->lfd, 4), 0);
	assert_int_equal(getsockname(e->lfd, (struct sockaddr *)&a, &alen), 0);
	e->port = ntohs(a.sin_port);
	config_defaults(&e->cfg);
	snprintf(e->cfg.upstream_proxy, sizeof(e->cfg.upstream_proxy), "http://127.0.0.1:%u",
	    (unsigned)e->port);
	snprintf(e->cfg.upstream_proxy_auth, sizeof(e->cfg.upstream_proxy_auth), "%s", auth);
	e->cfg.dns_via_proxy = true;
	e->pool = sockpool_new(e->base, e->f.wc, SOCK_STREAM, 2, SOCKPOOL_V4);
	assert_non_null(e->pool);
	for (int i = 0; i < 200 && sockpool_ready(e->pool, AF_INET) == 0; i++)
		turns(e, 1);
	assert_true(sockpool_ready(e->pool, AF_INET) > 0);
	e->v = dnsvia_new(e->base, e->pool, &e->cfg, err, sizeof(err));
	assert_non_null(e->v);
}

static void
env_fini(struct env *e)
{
	dnsvia_free(e->v);
	sockpool_free(e->pool);
	close(e->lfd);
	assert_int_equal(e->f.invalid, 0);
	fakeparent_fini(&e->f);
	event_base_free(e->base);
	config_free(&e->cfg);
}

/* c-ares's socket, connected to the resolver 192.0.2.53:53 (the tunnel starts). */
static int
via_connect(struct env *e)
{
	struct sockaddr_in r = {.sin_family = AF_INET, .sin_port = htons(53)};
	int cfd = dnsvia_socket(e->v);

	assert_true(cfd >= 0);
	assert_int_equal(inet_pton(AF_INET, "192.0.2.53", &r.sin_addr), 1);
	assert_int_equal(dnsvia_connect(e->v, cfd, (struct sockaddr *)&r, sizeof(r)), 0);
	return cfd;
}

/* The proxy's side of the connection dnsvia made. */
static int
proxy_accept(struct env *e)
{
	int pfd = -1;

	for (int i = 0; i < 200 && pfd < 0; i++) {
		turns(e, 1);
		pfd = accept4(e->lfd, NULL, NULL, SOCK_CLOEXEC);
	}
	assert_true(pfd >= 0);
	return pfd;
}

/* What the proxy received up to the end of the request head (bounded). */
static size_t
proxy_read_head(struct env *e, int pfd, char *buf, size_t cap)
{
	size_t have = 0;

	buf[0] = '\0';
	for (int i = 0; i < 200 && (have < 4 || strstr(buf, "\r\n\r\n") == NULL); i++) {
		ssize_t n;

		turns(e, 1);
		n = recv(pfd, buf + have, cap - 1 - have, MSG_DONTWAIT);
		if (n > 0) {
			have += (size_t)n;
			buf[have] = '\0';
		}
	}
	return have;
}

/* Read c-ares's end until it closes (bounded): the bytes it got, or -1 if it never closed. */
static ssize_t
cares_read_all(struct env *e, int cfd, uint8_t *buf, size_t cap)
{
	size_t have = 0;

	for (int i = 0; i < 400; i++) {
		ssize_t n;

		turns(e, 1);
		n = recv(cfd, buf + have, cap - have, MSG_DONTWAIT);
		if (n == 0)
			return (ssize_t)have;
		if (n > 0)
			have += (size_t)n;
		else if (errno != EAGAIN && errno != EWOULDBLOCK)
			return (ssize_t)have;
	}
	return -1;
}

/* The request: CONNECT to the resolver's address and port, Host, the authorization, an empty line. */
static void
test_connect_framing(void **state)
{
	static const char want[] = "CONNECT 192.0.2.53:53 HTTP/1.1\r\nHost: 192.0.2.53:53\r\n"
	                           "Proxy-Authorization: Basic dGVzdDp0ZXN0\r\n\r\n";
	struct env e;
	char head[1024];
	int cfd, pfd;

	(void)state;
	env_init(&e, "Basic dGVzdDp0ZXN0");
	cfd = via_connect(&e);
	pfd = proxy_accept(&e);
	assert_int_equal(proxy_read_head(&e, pfd, head, sizeof(head)), strlen(want));
	assert_string_equal(head, want);
	close(pfd);
	assert_int_equal(dnsvia_close(e.v, cfd), 0);
	env_fini(&e);
}

/*
 * The resolver answers and the proxy closes right behind the answer (a
 * server may close after answering, RFC 7766; the proxy then closes
 * too): the answer must reach c-ares before its end closes, or the
 * query fails although it was answered.
 */
static void
test_answer_then_close(void **state)
{
	static const uint8_t query[] = {0, 4, 0x12, 0x34, 0, 0};
	static const char answer_head[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	uint8_t answer[2 + 512], got[sizeof(answer) + 16];
	char head[1024], out[sizeof(answer_head) + sizeof(answer)];
	struct env e;
	int cfd, pfd;
	ssize_t n;

	(void)state;
	for (size_t i = 0; i < sizeof(answer); i++)
		answer[i] = (uint8_t)(i * 7 + 1);
	answer[0] = 512 >> 8;
	answer[1] = 512 & 0xff;
	env_init(&e, "");
	cfd = via_connect(&e);
	/* c-ares writes its query at once; it waits in the socketpair for the tunnel. */
	assert_int_equal(send(cfd, query, sizeof(query), MSG_NOSIGNAL), (ssize_t)sizeof(query));
	pfd = proxy_accept(&e);
	assert_true(proxy_read_head(&e, pfd, head, sizeof(head)) > 0);
	assert_non_null(strstr(head, "\r\n\r\n"));
	assert_null(strstr(head, "Proxy-Authorization"));
	/* The 2xx head first: the tunnel stands, the query goes through. */
	assert_int_equal(send(pfd, answer_head, strlen(answer_head), MSG_NOSIGNAL),
	    (ssize_t)strlen(answer_head));
	n = 0;
	for (int i = 0; i < 200 && n < (ssize_t)sizeof(query); i++) {
		ssize_t k;

		turns(&e, 1);
		k = recv(pfd, out + n, sizeof(out) - (size_t)n, MSG_DONTWAIT);
		if (k > 0)
			n += k;
	}
	assert_int_equal(n, (ssize_t)sizeof(query));
	assert_memory_equal(out, query, sizeof(query));
	/* The answer and the close in one go. */
	assert_int_equal(send(pfd, answer, sizeof(answer), MSG_NOSIGNAL), (ssize_t)sizeof(answer));
	close(pfd);
	n = cares_read_all(&e, cfd, got, sizeof(got));
	assert_int_equal(n, (ssize_t)sizeof(answer));
	assert_memory_equal(got, answer, sizeof(answer));
	assert_int_equal(dnsvia_close(e.v, cfd), 0);
	env_fini(&e);
}

/* A refusal (non-2xx) closes c-ares's end with nothing passed. */
static void
test_refused(void **state)
{
	static const char refusal[] = "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n";
	uint8_t got[64];
	char head[1024];
	struct env e;
	int cfd, pfd;

	(void)state;
	env_init(&e, "");
	cfd = via_connect(&e);
	pfd = proxy_accept(&e);
	assert_true(proxy_read_head(&e, pfd, head, sizeof(head)) > 0);
	assert_int_equal(
	    send(pfd, refusal, strlen(refusal), MSG_NOSIGNAL), (ssize_t)strlen(refusal));
	assert_int_equal(cares_read_all(&e, cfd, got, sizeof(got)), 0);
	close(pfd);
	assert_int_equal(dnsvia_close(e.v, cfd), 0);
	env_fini(&e);
}

/* The resolver's first bytes in the same segment as the 2xx head reach c-ares. */
static void
test_bytes_behind_head(void **state)
{
	static const char both[] = "HTTP/1.1 200 OK\r\n\r\n\x00\x03"
	                           "abc";
	uint8_t got[16];
	char head[1024];
	struct env e;
	int cfd, pfd;
	ssize_t n = 0;

	(void)state;
	env_init(&e, "");
	cfd = via_connect(&e);
	pfd = proxy_accept(&e);
	assert_true(proxy_read_head(&e, pfd, head, sizeof(head)) > 0);
	assert_int_equal(
	    send(pfd, both, sizeof(both) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(both) - 1);
	for (int i = 0; i < 200 && n < 5; i++) {
		ssize_t k;

		turns(&e, 1);
		k = recv(cfd, got + n, sizeof(got) - (size_t)n, MSG_DONTWAIT);
		if (k > 0)
			n += k;
	}
	assert_int_equal(n, 5);
	assert_memory_equal(got,
	    "\x00\x03"
	    "abc",
	    5);
	close(pfd);
	assert_int_equal(dnsvia_close(e.v, cfd), 0);
	env_fini(&e);
}

/* c-ares closes its socket while the tunnel is still dialing, or waiting for the answer. */
static void
test_close_while_dialing(void **state)
{
	char head[1024];
	struct env e;
	int cfd, pfd;

	(void)state;
	env_init(&e, "");
	/* Before the TCP connect completed. */
	cfd = via_connect(&e);
	assert_int_equal(dnsvia_close(e.v, cfd), 0);
	turns(&e, 5);
	pfd = accept4(e.lfd, NULL, NULL, SOCK_CLOEXEC);
	if (pfd >= 0)
		close(pfd);
	/* With the CONNECT sent and no answer yet; then the proxy answers into nothing. */
	cfd = via_connect(&e);
	pfd = proxy_accept(&e);
	assert_true(proxy_read_head(&e, pfd, head, sizeof(head)) > 0);
	assert_int_equal(dnsvia_close(e.v, cfd), 0);
	(void)send(pfd, "HTTP/1.1 200 OK\r\n\r\n", 19, MSG_NOSIGNAL);
	turns(&e, 5);
	close(pfd);
	turns(&e, 5);
	/* A socket c-ares never connected. */
	cfd = dnsvia_socket(e.v);
	assert_true(cfd >= 0);
	assert_int_equal(dnsvia_close(e.v, cfd), 0);
	env_fini(&e);
}

/*
 * No marked socket ready: ENOBUFS (ours, so the resolver is not ejected
 * for it; never EAGAIN, which c-ares would take for a connect in
 * progress and wait on), and nothing is dialled.
 */
static void
test_no_marked_socket(void **state)
{
	struct sockaddr_in r = {.sin_family = AF_INET, .sin_port = htons(53)};
	int taken[SOCKPOOL_MAX_KEEP], ntaken = 0, cfd, pfd;
	struct env e;

	(void)state;
	env_init(&e, "");
	while (ntaken < SOCKPOOL_MAX_KEEP && (taken[ntaken] = sockpool_take(e.pool, AF_INET)) >= 0)
		ntaken++;
	assert_true(ntaken > 0);
	cfd = dnsvia_socket(e.v);
	assert_true(cfd >= 0);
	assert_int_equal(inet_pton(AF_INET, "192.0.2.53", &r.sin_addr), 1);
	errno = 0;
	assert_int_equal(dnsvia_connect(e.v, cfd, (struct sockaddr *)&r, sizeof(r)), -1);
	assert_int_equal(errno, ENOBUFS);
	turns(&e, 5);
	pfd = accept4(e.lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_int_equal(pfd, -1);
	assert_int_equal(dnsvia_close(e.v, cfd), 0);
	for (int i = 0; i < ntaken; i++)
		close(taken[i]);
	env_fini(&e);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_connect_framing),
	    cmocka_unit_test(test_answer_then_close),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_bytes_behind_head),
	    cmocka_unit_test(test_close_while_dialing),
	    cmocka_unit_test(test_no_marked_socket),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
