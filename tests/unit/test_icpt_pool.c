/*
 * Unit tests of the pool of upstream legs (vault/icpt_up.c): a verified
 * TLS leg left by a workload connection that closed goes to the next
 * connection to exactly the same name, address and port. Driven through
 * the real code: the workload legs are plain socket pairs (the pool looks
 * only at the upstream side), the upstream is a TLS server in this process
 * whose certificate for api.allowed.test the intercept's client context
 * trusts, so that the legs are made and verified by icpt_usock_event_cb,
 * pooled by icpt_up_release and taken by icpt_up_take.
 *
 * A leg is handed on only with nothing to read: a connection that drains
 * (Connection: close) stops reading its upstream, which may meanwhile send
 * more (a misbehaving server: a body on a 304, a length overrun) or close.
 * Bytes the next connection found there would be read as its answer.
 * Every wait is bounded in loop turns.
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
#include <event2/buffer.h>
#include <event2/event.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vault/icpt_internal.h"
#include "vault/intercept.h"
#include "vault/snap.h"

#include "icptfix.h"

#define SECRET "sk-live-CANARY1-relay-0123456789abcdef"
#define HOSTNAME "api.allowed.test"
#define MAXUP 4

struct upc {
	int fd;
	SSL *ssl;
	bool up; /* handshake done */
	char rx[8192];
	size_t rxlen;
	size_t heads;
};

struct h {
	struct event_base *base;
	struct intercept *ic;
	struct vault_snap *snap;
	int lfd;
	struct sockaddr_in up;
	SSL_CTX *sctx;
	struct upc u[MAXUP];
	int nu;
	uint64_t reused, retried;
	char log[4096];
};

static struct vault_snap *
mksnap(void)
{
	static const char js[] =
	    "{\"credentials\":[{\"name\":\"c1\",\"source\":{\"value\":\"x\"}}],"
	    "\"bindings\":[{\"name\":\"b1\",\"match\":{\"schemes\":[\"http\"],"
	    "\"hosts\":[\"api.allowed.test\"],\"paths\":[\"/v1/*\"],\"methods\":[\"GET\","
	    "\"POST\"]},\"auth\":{\"type\":\"apiKey\",\"name\":\"X-Api-Key\","
	    "\"credential\":\"c1\"}}]}";

	return icptfix_snap(js, (const uint8_t *)SECRET, strlen(SECRET));
}

/* ------------------------------------------------------------ fake parent */

static int
f_get_socket(void *arg, int family, intercept_socket_cb cb, void *cbarg)
{
	return icptfix_socket(((struct h *)arg)->base, family, cb, cbarg);
}

static struct vault_snap *
f_snapshot(void *arg)
{
	return vault_snap_ref(((struct h *)arg)->snap);
}

static void
f_count(void *arg, enum intercept_metric m, uint64_t n)
{
	if (m == INTERCEPT_M_UPSTREAM_REUSED)
		((struct h *)arg)->reused += n;
	if (m == INTERCEPT_M_REQUESTS_RETRIED)
		((struct h *)arg)->retried += n;
}

static void
f_log(void *arg, const struct intercept_event *ev)
{
	struct h *h = arg;
	size_t n = strlen(h->log);

	snprintf(h->log + n, sizeof(h->log) - n, "%lu:%s:%s ", (unsigned long)ev->conn, ev->event,
	    ev->reason != NULL ? ev->reason : "-");
}

static const struct intercept_ops f_ops = {
    .sni_allowed = icptfix_sni_allowed,
    .dst_ok = icptfix_dst_ok,
    .get_upstream_socket = f_get_socket,
    .snapshot = f_snapshot,
    .count = f_count,
    .log = f_log,
};

/* ------------------------------------------------------------ harness */

static struct h *
h_new(void)
{
	struct h *h = calloc(1, sizeof(*h));
	socklen_t len = sizeof(h->up);
	X509 *cert;
	EVP_PKEY *key;

	assert_non_null(h);
	h->base = event_base_new();
	h->snap = mksnap();
	h->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	h->up.sin_family = AF_INET;
	h->up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(h->lfd, (struct sockaddr *)&h->up, sizeof(h->up)), 0);
	assert_int_equal(listen(h->lfd, 8), 0);
	assert_int_equal(getsockname(h->lfd, (struct sockaddr *)&h->up, &len), 0);

	icptfix_cert(HOSTNAME, &cert, &key);
	h->sctx = SSL_CTX_new(TLS_server_method());
	assert_int_equal(SSL_CTX_use_certificate(h->sctx, cert), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey(h->sctx, key), 1);
	SSL_CTX_set_num_tickets(h->sctx, 0);

	h->ic = icptfix_intercept(h->base, &f_ops, h, cert);
	X509_free(cert);
	EVP_PKEY_free(key);
	return h;
}

/* A workload connection to HOSTNAME (terminated, as far as the upstream side goes); *w its end. */
static struct icpt_conn *
conn_new(struct h *h, int *w)
{
	struct intercept *ic = h->ic;
	struct icpt_conn *c = calloc(1, sizeof(*c));
	int sv[2];

	assert_non_null(c);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	*w = sv[1];
	c->ic = ic;
	c->host = icpt_nohost;
	assert_int_equal(icpt_set_host(c, HOSTNAME), 0);
	c->id = ++ic->next_id;
	c->tls = false;
	c->terminated = true; /* the upstream leg is TLS, verified for HOSTNAME: poolable */
	c->state = ICPT_S_HELLO;
	c->cfd = sv[0];
	c->cl = icpt_leg_new(ic->base, sv[0], NULL, ICPT_LEG_PLAIN);
	assert_non_null(c->cl);
	c->next = ic->conns;
	if (ic->conns != NULL)
		ic->conns->prev = c;
	ic->conns = c;
	ic->nconns++;
	memcpy(&c->dst, &h->up, sizeof(h->up));
	c->dstlen = sizeof(h->up);
	c->family = AF_INET;
	assert_int_equal(inet_pton(AF_INET, "203.0.113.10", c->addr), 1);
	c->port = 80; /* the binding is http://api.allowed.test (c->tls false) */
	assert_true(icpt_set_state(c, ICPT_S_HTTP));
	icpt_http_start(c);
	return c;
}

#define ANSWER_A "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nanswerA"
#define ANSWER_B "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nanswerB"
#define STALE "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nSTALEBODY"
#define REQ_A "GET /a HTTP/1.1\r\nHost: " HOSTNAME "\r\nConnection: close\r\n\r\n"
#define REQ_B "GET /v1/b HTTP/1.1\r\nHost: " HOSTNAME "\r\n\r\n"

/* What the upstream does besides answering each request head. */
enum extra {
	X_NONE,
	X_STALE_LATER,    /* a response more on A's leg while A drains (it waits in the kernel) */
	X_STALE_TOGETHER, /* that response right behind A's answer (OpenSSL reads it ahead) */
	X_CLOSE_ON_B,     /* its first connection closes at B's request, unanswered */
	X_END_LATER,      /* it ends A's leg (a FIN, no close_notify) while A drains */
};

static enum extra extra;

/* The upstream: accept, handshake, answer every new head in order. */
static void
up_serve(struct h *h)
{
	static const int one = 1;
	int fd;

	while (h->nu < MAXUP &&
	       (fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		struct upc *u = &h->u[h->nu++];

		u->fd = fd;
		/* Each record goes at once: nothing waits for an ACK. */
		assert_int_equal(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
		u->ssl = SSL_new(h->sctx);
		assert_non_null(u->ssl);
		SSL_set_fd(u->ssl, fd);
		SSL_set_accept_state(u->ssl);
	}
	for (int i = 0; i < h->nu; i++) {
		struct upc *u = &h->u[i];
		int n;

		if (u->ssl == NULL)
			continue;
		if (!u->up) {
			if (SSL_do_handshake(u->ssl) != 1)
				continue;
			u->up = true;
		}
		while ((n = SSL_read(
		            u->ssl, u->rx + u->rxlen, (int)(sizeof(u->rx) - 1 - u->rxlen))) > 0) {
			u->rxlen += (size_t)n;
			u->rx[u->rxlen] = '\0';
		}
		for (;;) {
			const char *p = u->rx;
			bool is_a;

			for (size_t k = 0; k < u->heads && p != NULL; k++)
				if ((p = strstr(p, "\r\n\r\n")) != NULL)
					p += 4;
			if (p == NULL || strstr(p, "\r\n\r\n") == NULL)
				break;
			u->heads++;
			is_a = strncmp(p, "GET /a ", 7) == 0;
			if (!is_a && i == 0 && extra == X_CLOSE_ON_B) {
				SSL_free(u->ssl);
				u->ssl = NULL;
				close(u->fd);
				u->fd = -1;
				break;
			}
			assert_true(SSL_write(u->ssl, is_a ? ANSWER_A : ANSWER_B,
			                (int)strlen(is_a ? ANSWER_A : ANSWER_B)) > 0);
			if (is_a && extra == X_STALE_TOGETHER)
				assert_true(SSL_write(u->ssl, STALE, (int)strlen(STALE)) > 0);
		}
	}
}

/* Bytes the upstream's first connection has not sent yet. */
static int
up_unsent(struct h *h)
{
	int n = -1;

	assert_int_equal(ioctl(h->u[0].fd, SIOCOUTQNSD, &n), 0);
	return n;
}

static void
w_read(int w, char *buf, size_t cap, size_t *len)
{
	ssize_t n;

	while (*len + 1 < cap && (n = read(w, buf + *len, cap - 1 - *len)) > 0) {
		*len += (size_t)n;
		buf[*len] = '\0';
	}
}

/* Loop turns (at most turns, of at most 5 ms each) until the workload's w has received want. */
static bool
pump(struct h *h, int w, char *buf, size_t cap, size_t *len, const char *want, int turns)
{
	for (int i = 0; i < turns; i++) {
		event_base_loop(h->base, EVLOOP_NONBLOCK);
		up_serve(h);
		w_read(w, buf, cap, len);
		if (want != NULL && strstr(buf, want) != NULL)
			return true;
		(void)poll(NULL, 0, 5);
	}
	return false;
}

static void
h_free(struct h *h)
{
	intercept_free(h->ic);
	event_base_loop(h->base, EVLOOP_NONBLOCK);
	vault_snap_unref(h->snap);
	for (int i = 0; i < h->nu; i++) {
		SSL_free(h->u[i].ssl);
		if (h->u[i].fd >= 0)
			close(h->u[i].fd);
	}
	SSL_CTX_free(h->sctx);
	close(h->lfd);
	event_base_free(h->base);
	free(h);
}

/*
 * A asks with Connection: close and is answered with keep-alive: A drains
 * with its leg idle, to be pooled when A goes. Then A's workload closes
 * and, in the same loop turn, B sends a credentialed GET. B's answer is
 * written into bbuf.
 */
static struct h *
a_then_b(enum extra x, char *bbuf, size_t cap)
{
	struct h *h = h_new();
	char abuf[4096] = "";
	size_t alen = 0, blen = 0;
	int wa, wb;
	struct icpt_conn *a;

	extra = x;
	a = conn_new(h, &wa);
	assert_int_equal(write(wa, REQ_A, strlen(REQ_A)), (ssize_t)strlen(REQ_A));
	if (!pump(h, wa, abuf, sizeof(abuf), &alen, "answerA", 400))
		fail_msg("A not answered (log: %s)", h->log);
	assert_int_equal(a->state, ICPT_S_DRAIN);
	assert_true(a->idle);
	if (x == X_STALE_LATER)
		assert_true(SSL_write(h->u[0].ssl, STALE, (int)strlen(STALE)) > 0);
	if (x == X_END_LATER)
		assert_int_equal(shutdown(h->u[0].fd, SHUT_WR), 0);
	/*
	 * Until the upstream has sent all it wrote: what it sent past A's
	 * answer has reached egressd, where A, draining, does not read it.
	 * (Bytes sent after B's request goes are B's answer, as on any reused
	 * HTTP/1.1 connection.)
	 */
	for (int i = 0; i < 100 && up_unsent(h) > 0; i++) {
		event_base_loop(h->base, EVLOOP_NONBLOCK);
		(void)poll(NULL, 0, 5);
	}
	assert_int_equal(up_unsent(h), 0);
	for (int i = 0; i < 3; i++) {
		event_base_loop(h->base, EVLOOP_NONBLOCK);
		(void)poll(NULL, 0, 5);
	}
	assert_int_equal(a->state, ICPT_S_DRAIN);
	(void)conn_new(h, &wb);
	close(wa);
	assert_int_equal(write(wb, REQ_B, strlen(REQ_B)), (ssize_t)strlen(REQ_B));
	(void)poll(NULL, 0, 5);
	event_base_loop(h->base, EVLOOP_ONCE); /* A's close and B's request, in this order */
	bbuf[0] = '\0';
	(void)pump(h, wb, bbuf, cap, &blen, "answerB", 400);
	/* Anything more B would be given. */
	(void)pump(h, wb, bbuf, cap, &blen, NULL, 20);
	return h;
}

/*
 * The control: a clean leg is taken, and the credentialed request goes on
 * it (one upstream connection in all).
 */
static void
test_quiet_leg_is_taken(void **state)
{
	char b[4096];
	struct h *h;

	(void)state;
	h = a_then_b(X_NONE, b, sizeof(b));
	assert_int_equal(h->reused, 1);
	assert_int_equal(h->nu, 1);
	assert_non_null(strstr(h->u[0].rx, "GET /v1/b "));
	assert_non_null(strstr(h->u[0].rx, "X-Api-Key: " SECRET "\r\n"));
	assert_non_null(strstr(b, "answerB"));
	h_free(h);
}

/*
 * B's answer is its own, on a new connection, never what A's leg held;
 * the leg was closed where why (pool_unread: at A's release; pooled_unread:
 * at B's take) says.
 */
static void
check_not_handed_on(struct h *h, const char *b, const char *why)
{
	if (strstr(b, "STALEBODY") != NULL)
		fail_msg("B read the bytes sent on A's leg as its answer (reused %lu; log: %s)",
		    (unsigned long)h->reused, h->log);
	assert_non_null(strstr(b, "answerB"));
	assert_int_equal(h->reused, 0);
	assert_int_equal(h->nu, 2);
	assert_null(strstr(h->u[0].rx, "GET /v1/b "));
	assert_non_null(strstr(h->u[1].rx, "X-Api-Key: " SECRET "\r\n"));
	if (strstr(h->log, why) == NULL)
		fail_msg("the leg was not closed at %s (log: %s)", why, h->log);
}

static void
test_leg_with_bytes_in_kernel_not_handed_on(void **state)
{
	char b[4096];
	struct h *h;

	(void)state;
	h = a_then_b(X_STALE_LATER, b, sizeof(b));
	check_not_handed_on(h, b, "1:upstream_close:pool_unread ");
	h_free(h);
}

static void
test_leg_ended_not_handed_on(void **state)
{
	char b[4096];
	struct h *h;

	(void)state;
	h = a_then_b(X_END_LATER, b, sizeof(b));
	check_not_handed_on(h, b, "1:upstream_close:pool_unread ");
	h_free(h);
}

static void
test_leg_with_bytes_in_openssl_not_handed_on(void **state)
{
	char b[4096];
	struct h *h;

	(void)state;
	h = a_then_b(X_STALE_TOGETHER, b, sizeof(b));
	check_not_handed_on(h, b, "1:upstream_close:pool_unread ");
	h_free(h);
}

/*
 * A is gone and its clean leg pooled; B's request comes, and behind it,
 * before the pooled leg's read callback has run, bytes on the pooled leg
 * (both ready in one loop turn, B first): the leg is closed at the take,
 * not handed to B.
 */
static void
since_pooled(bool end)
{
	struct h *h = h_new();
	char abuf[4096] = "", b[4096] = "";
	size_t alen = 0, blen = 0;
	int wa, wb;

	extra = X_NONE;
	(void)conn_new(h, &wa);
	assert_int_equal(write(wa, REQ_A, strlen(REQ_A)), (ssize_t)strlen(REQ_A));
	if (!pump(h, wa, abuf, sizeof(abuf), &alen, "answerA", 400))
		fail_msg("A not answered (log: %s)", h->log);
	close(wa);
	for (int i = 0; i < 100 && h->ic->npool == 0; i++) {
		event_base_loop(h->base, EVLOOP_NONBLOCK);
		(void)poll(NULL, 0, 5);
	}
	assert_int_equal(h->ic->npool, 1);
	(void)conn_new(h, &wb);
	event_base_loop(h->base, EVLOOP_NONBLOCK); /* B is read from */
	assert_int_equal(write(wb, REQ_B, strlen(REQ_B)), (ssize_t)strlen(REQ_B));
	if (end)
		assert_int_equal(shutdown(h->u[0].fd, SHUT_WR), 0);
	else
		assert_true(SSL_write(h->u[0].ssl, STALE, (int)strlen(STALE)) > 0);
	for (int i = 0; i < 100 && up_unsent(h) > 0; i++)
		(void)poll(NULL, 0, 5);
	assert_int_equal(up_unsent(h), 0);
	event_base_loop(h->base, EVLOOP_ONCE); /* B's request and the pooled leg's bytes */
	(void)pump(h, wb, b, sizeof(b), &blen, "answerB", 400);
	(void)pump(h, wb, b, sizeof(b), &blen, NULL, 20);
	check_not_handed_on(h, b, "2:upstream_close:pooled_unread ");
	h_free(h);
}

static void
test_leg_with_bytes_since_pooled_not_taken(void **state)
{
	(void)state;
	since_pooled(false);
}

/* The same with the pooled leg's end (a FIN) instead of bytes. */
static void
test_leg_ended_since_pooled_not_taken(void **state)
{
	(void)state;
	since_pooled(true);
}

/*
 * A taken leg the upstream closes at the first request on it, unanswered
 * (its keep-alive timeout racing the request): a safe request goes once
 * more on a new connection, as on a connection's own kept leg.
 */
static void
test_request_on_taken_leg_sent_again(void **state)
{
	char b[4096];
	struct h *h;

	(void)state;
	h = a_then_b(X_CLOSE_ON_B, b, sizeof(b));
	assert_int_equal(h->reused, 1);
	assert_int_equal(h->retried, 1);
	if (strstr(b, "answerB") == NULL)
		fail_msg("B was not answered (got: %.120s; log: %s)", b, h->log);
	assert_int_equal(h->nu, 2);
	assert_non_null(strstr(h->u[1].rx, "GET /v1/b "));
	assert_non_null(strstr(h->u[1].rx, "X-Api-Key: " SECRET "\r\n"));
	assert_null(strstr(b, "502"));
	h_free(h);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_quiet_leg_is_taken),
	    cmocka_unit_test(test_leg_with_bytes_in_kernel_not_handed_on),
	    cmocka_unit_test(test_leg_with_bytes_in_openssl_not_handed_on),
	    cmocka_unit_test(test_leg_ended_not_handed_on),
	    cmocka_unit_test(test_leg_with_bytes_since_pooled_not_taken),
	    cmocka_unit_test(test_leg_ended_since_pooled_not_taken),
	    cmocka_unit_test(test_request_on_taken_leg_sent_again),
	};

	signal(SIGPIPE, SIG_IGN); /* as egressd does */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
