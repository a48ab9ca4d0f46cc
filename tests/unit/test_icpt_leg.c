/*
 * Unit tests of the interceptor's legs (vault/icpt_leg.c) on socket pairs,
 * plain and TLS directly on the descriptor: bytes both ways, the input's
 * high-water mark, EOF with writing still open, a leg freed from its own
 * callback, and the records OpenSSL read ahead: every one is decrypted
 * without a readiness of its own, also when reading resumes below the
 * high-water mark or is enabled again. Every wait is bounded in loop turns.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "vault/icpt_leg.h"

#define TURNS 200 /* loop turns a wait takes at most */

/*
 * Bytes libevent holds: its allocations go through these (set before its
 * first), each with its size in a 16-byte prefix.
 */
static size_t t_live;
static bool t_oom; /* libevent's allocations fail */

static void *
t_malloc(size_t n)
{
	size_t *p = t_oom ? NULL : malloc(n + 16);

	if (p == NULL)
		return NULL;
	p[0] = n;
	t_live += n;
	return (char *)p + 16;
}

static void *
t_realloc(void *q, size_t n)
{
	size_t *p, *r;

	if (q == NULL)
		return t_malloc(n);
	p = (size_t *)(void *)((char *)q - 16);
	if ((r = realloc(p, n + 16)) == NULL)
		return NULL;
	t_live = t_live - r[0] + n;
	r[0] = n;
	return (char *)r + 16;
}

static void
t_free(void *q)
{
	size_t *p;

	if (q == NULL)
		return;
	p = (size_t *)(void *)((char *)q - 16);
	t_live -= p[0];
	free(p);
}

struct side {
	struct icpt_leg *l;
	int reads, writes, connected, eof, errors, timeouts;
	bool free_on_read;
};

static void
t_read_cb(struct icpt_leg *l, void *arg)
{
	struct side *s = arg;

	s->reads++;
	if (s->free_on_read) {
		icpt_leg_free(l);
		s->l = NULL;
	}
}

static void
t_write_cb(struct icpt_leg *l, void *arg)
{
	struct side *s = arg;

	(void)l;
	s->writes++;
}

static void
t_event_cb(struct icpt_leg *l, short what, void *arg)
{
	struct side *s = arg;

	(void)l;
	if (what & BEV_EVENT_CONNECTED)
		s->connected++;
	if (what & BEV_EVENT_EOF)
		s->eof++;
	if (what & BEV_EVENT_ERROR)
		s->errors++;
	if (what & BEV_EVENT_TIMEOUT)
		s->timeouts++; /* not acted on: the leg lives on */
}

static void
t_pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
}

/* A plain leg on one end of a new socket pair, its callbacks s's. */
static void
t_plain(struct event_base *base, int sv[2], struct side *s)
{
	t_pair(sv);
	s->l = icpt_leg_new(base, sv[0], NULL, ICPT_LEG_PLAIN);
	assert_non_null(s->l);
	icpt_leg_setcb(s->l, t_read_cb, t_write_cb, t_event_cb, s);
}

/* Run the loop until the input of l holds want bytes, at most TURNS turns. */
static bool
t_until_in(struct event_base *base, struct icpt_leg *l, size_t want)
{
	for (int i = 0; i < TURNS; i++) {
		if (evbuffer_get_length(icpt_leg_input(l)) >= want)
			return true;
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	}
	return evbuffer_get_length(icpt_leg_input(l)) >= want;
}

static void
t_turns(struct event_base *base, int n)
{
	for (int i = 0; i < n; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

/* Read what the plain peer fd holds (bounded) into buf. */
static size_t
t_drain_fd(int fd, char *buf, size_t cap)
{
	size_t got = 0;
	ssize_t n;

	while (got < cap && (n = read(fd, buf + got, cap - got)) > 0)
		got += (size_t)n;
	return got;
}

/* ---------------------------------------------------------------- plain */

static void
test_plain_both_ways(void **state)
{
	struct event_base *base = event_base_new();
	struct side s = {0};
	char buf[64];
	int sv[2];

	(void)state;
	t_plain(base, sv, &s);
	assert_int_equal(write(sv[1], "hello", 5), 5);
	assert_true(t_until_in(base, s.l, 5));
	assert_int_equal(s.reads, 1);
	assert_memory_equal(evbuffer_pullup(icpt_leg_input(s.l), 5), "hello", 5);
	/* Two additions in one turn leave together, at its end; then the write callback. */
	assert_int_equal(icpt_leg_write(s.l, "ab", 2), 0);
	assert_int_equal(icpt_leg_write(s.l, "cd", 2), 0);
	assert_int_equal(t_drain_fd(sv[1], buf, sizeof(buf)), 0);
	t_turns(base, 2);
	assert_int_equal(t_drain_fd(sv[1], buf, sizeof(buf)), 4);
	assert_memory_equal(buf, "abcd", 4);
	assert_int_equal(s.writes, 1);
	assert_int_equal(evbuffer_get_length(icpt_leg_output(s.l)), 0);
	assert_int_equal(icpt_leg_fd(s.l), sv[0]);
	assert_null(icpt_leg_ssl(s.l));
	icpt_leg_free(s.l);
	close(sv[1]);
	event_base_free(base);
}

/* Reading stops at the high-water mark and goes on once the input drains. */
static void
test_plain_high_water(void **state)
{
	struct event_base *base = event_base_new();
	struct side s = {0};
	int sv[2];

	(void)state;
	t_pair(sv);
	s.l = icpt_leg_new(base, sv[0], NULL, ICPT_LEG_PLAIN);
	icpt_leg_setcb(s.l, t_read_cb, NULL, t_event_cb, &s);
	icpt_leg_read_high(s.l, 4);
	assert_int_equal(write(sv[1], "0123456789", 10), 10);
	t_turns(base, 5);
	assert_int_equal(evbuffer_get_length(icpt_leg_input(s.l)), 4);
	evbuffer_drain(icpt_leg_input(s.l), 4);
	assert_true(t_until_in(base, s.l, 4));
	assert_memory_equal(evbuffer_pullup(icpt_leg_input(s.l), 4), "4567", 4);
	evbuffer_drain(icpt_leg_input(s.l), 4);
	assert_true(t_until_in(base, s.l, 2));
	icpt_leg_free(s.l);
	close(sv[1]);
	event_base_free(base);
}

/* The peer's EOF ends reading only: an answer still goes out after it. */
static void
test_plain_eof_half(void **state)
{
	struct event_base *base = event_base_new();
	struct side s = {0};
	char buf[16];
	int sv[2];

	(void)state;
	t_pair(sv);
	s.l = icpt_leg_new(base, sv[0], NULL, ICPT_LEG_PLAIN);
	icpt_leg_setcb(s.l, t_read_cb, NULL, t_event_cb, &s);
	assert_int_equal(write(sv[1], "req", 3), 3);
	assert_int_equal(shutdown(sv[1], SHUT_WR), 0);
	t_turns(base, 5);
	assert_int_equal(evbuffer_get_length(icpt_leg_input(s.l)), 3);
	assert_int_equal(s.eof, 1);
	assert_int_equal(s.errors, 0);
	assert_int_equal(icpt_leg_write(s.l, "answer", 6), 0);
	t_turns(base, 2);
	assert_int_equal(t_drain_fd(sv[1], buf, sizeof(buf)), 6);
	icpt_leg_free(s.l);
	close(sv[1]);
	event_base_free(base);
}

/* A leg freed from its own read callback goes once the callback returns. */
static void
test_plain_free_in_callback(void **state)
{
	struct event_base *base = event_base_new();
	struct side s = {.free_on_read = true};
	int sv[2];

	(void)state;
	t_pair(sv);
	s.l = icpt_leg_new(base, sv[0], NULL, ICPT_LEG_PLAIN);
	icpt_leg_setcb(s.l, t_read_cb, NULL, t_event_cb, &s);
	assert_int_equal(write(sv[1], "x", 1), 1);
	t_turns(base, 5);
	assert_int_equal(s.reads, 1);
	assert_null(s.l);
	/* The descriptor went with the leg: the peer reads EOF. */
	assert_int_equal(read(sv[1], (char[1]){0}, 1), 0);
	close(sv[1]);
	event_base_free(base);
}

/* ---------------------------------------------------------------- TLS */

struct tls {
	struct event_base *base;
	SSL_CTX *sctx, *cctx;
	struct side srv, cli;
};

/* A throwaway P-256 key and self-signed certificate for the server side. */
static void
t_tls_ctx(struct tls *t)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *x = X509_new();

	assert_non_null(key);
	assert_non_null(x);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), 0);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, key);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
	    (const unsigned char *)"leg.test", -1, -1, 0);
	X509_set_issuer_name(x, X509_get_subject_name(x));
	assert_true(X509_sign(x, key, EVP_sha256()) > 0);
	t->sctx = SSL_CTX_new(TLS_server_method());
	t->cctx = SSL_CTX_new(TLS_client_method());
	assert_int_equal(SSL_CTX_use_certificate(t->sctx, x), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey(t->sctx, key), 1);
	SSL_CTX_set_verify(t->cctx, SSL_VERIFY_NONE, NULL);
	X509_free(x);
	EVP_PKEY_free(key);
}

/* A server leg and a client leg on the two ends of a socket pair, handshaken. */
static void
t_tls_up(struct tls *t)
{
	int sv[2];

	memset(t, 0, sizeof(*t));
	t->base = event_base_new();
	t_tls_ctx(t);
	t_pair(sv);
	t->srv.l = icpt_leg_new(t->base, sv[0], SSL_new(t->sctx), ICPT_LEG_ACCEPT);
	t->cli.l = icpt_leg_new(t->base, sv[1], SSL_new(t->cctx), ICPT_LEG_CONNECT);
	assert_non_null(t->srv.l);
	assert_non_null(t->cli.l);
	icpt_leg_setcb(t->srv.l, t_read_cb, t_write_cb, t_event_cb, &t->srv);
	icpt_leg_setcb(t->cli.l, t_read_cb, t_write_cb, t_event_cb, &t->cli);
	for (int i = 0; i < TURNS && (t->srv.connected == 0 || t->cli.connected == 0); i++)
		event_base_loop(t->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	assert_int_equal(t->srv.connected, 1);
	assert_int_equal(t->cli.connected, 1);
	assert_non_null(icpt_leg_ssl(t->srv.l));
	assert_true(SSL_is_init_finished(icpt_leg_ssl(t->cli.l)));
}

static void
t_tls_down(struct tls *t)
{
	icpt_leg_free(t->srv.l);
	icpt_leg_free(t->cli.l);
	SSL_CTX_free(t->sctx);
	SSL_CTX_free(t->cctx);
	event_base_free(t->base);
}

/* Bytes both ways over TLS on the descriptors, a large body as whole records. */
static void
test_tls_both_ways(void **state)
{
	static char big[100000];
	struct tls t;

	(void)state;
	t_tls_up(&t);
	assert_int_equal(icpt_leg_write(t.cli.l, "GET / HTTP/1.1\r\n\r\n", 18), 0);
	assert_true(t_until_in(t.base, t.srv.l, 18));
	assert_memory_equal(
	    evbuffer_pullup(icpt_leg_input(t.srv.l), 18), "GET / HTTP/1.1\r\n\r\n", 18);
	memset(big, 'b', sizeof(big));
	assert_int_equal(icpt_leg_write(t.srv.l, big, sizeof(big)), 0);
	assert_true(t_until_in(t.base, t.cli.l, sizeof(big)));
	assert_int_equal(evbuffer_get_length(icpt_leg_input(t.cli.l)), sizeof(big));
	assert_true(t.srv.writes >= 1);
	t_tls_down(&t);
}

/*
 * Several records read ahead in one read(2): each is decrypted before the
 * next wait, since the socket, drained into OpenSSL's buffer, brings no
 * readiness for them. Reading is off while the client sends three records
 * (three turns), then on: everything arrives without another byte.
 */
static void
test_tls_read_ahead(void **state)
{
	struct tls t;

	(void)state;
	t_tls_up(&t);
	icpt_leg_disable(t.srv.l, EV_READ);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(icpt_leg_write(t.cli.l, "record!", 7), 0);
		t_turns(t.base, 2);
	}
	assert_int_equal(evbuffer_get_length(icpt_leg_input(t.srv.l)), 0);
	icpt_leg_enable(t.srv.l, EV_READ);
	assert_true(t_until_in(t.base, t.srv.l, 21));
	t_tls_down(&t);
}

/*
 * Reading stopped at the high-water mark with records still in OpenSSL's
 * buffer (the socket empty): draining the input below the mark brings the
 * next record, and so does enabling reading again after a disable.
 */
static void
test_tls_high_water_pending(void **state)
{
	struct tls t;

	(void)state;
	t_tls_up(&t);
	icpt_leg_disable(t.srv.l, EV_READ);
	icpt_leg_read_high(t.srv.l, 7);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(icpt_leg_write(t.cli.l, "record!", 7), 0);
		t_turns(t.base, 2);
	}
	icpt_leg_enable(t.srv.l, EV_READ);
	assert_true(t_until_in(t.base, t.srv.l, 7));
	t_turns(t.base, 3);
	assert_int_equal(evbuffer_get_length(icpt_leg_input(t.srv.l)), 7);
	evbuffer_drain(icpt_leg_input(t.srv.l), 7);
	assert_true(t_until_in(t.base, t.srv.l, 7));
	icpt_leg_disable(t.srv.l, EV_READ);
	evbuffer_drain(icpt_leg_input(t.srv.l), 7);
	t_turns(t.base, 3);
	assert_int_equal(evbuffer_get_length(icpt_leg_input(t.srv.l)), 0);
	icpt_leg_enable(t.srv.l, EV_READ);
	assert_true(t_until_in(t.base, t.srv.l, 7));
	t_tls_down(&t);
}

/* close_notify ends the peer's reading as an EOF, not an error. */
static void
test_tls_close_notify(void **state)
{
	struct tls t;

	(void)state;
	t_tls_up(&t);
	icpt_leg_close_notify(t.cli.l);
	for (int i = 0; i < TURNS && t.srv.eof == 0; i++)
		event_base_loop(t.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	assert_int_equal(t.srv.eof, 1);
	assert_int_equal(t.srv.errors, 0);
	t_tls_down(&t);
}

/* A peer that is not TLS fails the handshake with an error and the kept OpenSSL errors. */
static void
test_tls_handshake_garbage(void **state)
{
	struct event_base *base = event_base_new();
	struct tls t;
	struct side s = {0};
	int sv[2];

	(void)state;
	memset(&t, 0, sizeof(t));
	t_tls_ctx(&t);
	t_pair(sv);
	s.l = icpt_leg_new(base, sv[0], SSL_new(t.sctx), ICPT_LEG_ACCEPT);
	icpt_leg_setcb(s.l, t_read_cb, NULL, t_event_cb, &s);
	assert_int_equal(write(sv[1], "GET / HTTP/1.1\r\n\r\n", 18), 18);
	for (int i = 0; i < TURNS && s.errors == 0; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	assert_int_equal(s.errors, 1);
	assert_int_equal(s.connected, 0);
	assert_int_equal(s.reads, 0);
	assert_true(icpt_leg_error(s.l) != 0);
	icpt_leg_free(s.l);
	close(sv[1]);
	SSL_CTX_free(t.sctx);
	SSL_CTX_free(t.cctx);
	event_base_free(base);
}

struct t_timeouts {
	int timeouts;
};

/* Run the loop for ms milliseconds (in slices of 100 ms, 200 at most). */
static void
t_run_ms(struct event_base *base, long ms)
{
	struct timeval start, now, spent;

	gettimeofday(&start, NULL);
	for (int i = 0; i < 200; i++) {
		struct timeval stop = {0, 100 * 1000};

		event_base_loopexit(base, &stop);
		event_base_dispatch(base);
		gettimeofday(&now, NULL);
		timersub(&now, &start, &spent);
		if (spent.tv_sec * 1000 + spent.tv_usec / 1000 >= ms)
			break;
	}
}

static void
t_timeout_cb(struct icpt_leg *l, short what, void *arg)
{
	struct t_timeouts *t = arg;

	(void)l;
	if (what & BEV_EVENT_TIMEOUT)
		t->timeouts++; /* and left to run: the leg must not report it again at once */
}

/*
 * A timeout the relays do not act on comes again only after as long
 * again: a TLS handshake that never starts (the peer says nothing), with
 * 1 s timeouts, reports once in 1.5 s, not in a loop (a handshake timeout
 * once counted from a start that never moved, so it fired at every turn).
 */
static void
test_tls_handshake_timeout_once(void **state)
{
	struct event_base *base = event_base_new();
	struct t_timeouts t = {0};
	struct tls tl;
	struct icpt_leg *l;
	int sv[2];

	(void)state;
	memset(&tl, 0, sizeof(tl));
	t_tls_ctx(&tl);
	t_pair(sv);
	l = icpt_leg_new(base, sv[0], SSL_new(tl.sctx), ICPT_LEG_ACCEPT);
	assert_non_null(l);
	icpt_leg_setcb(l, NULL, NULL, t_timeout_cb, &t);
	icpt_leg_timeouts(l, 1, 1);
	t_run_ms(base, 1500);
	assert_int_equal(t.timeouts, 1);
	icpt_leg_free(l);
	close(sv[1]);
	SSL_CTX_free(tl.sctx);
	SSL_CTX_free(tl.cctx);
	event_base_free(base);
}

/* Run the loop until s has seen reads reads (a count, not the input: that would wake it). */
static bool
t_until_reads(struct event_base *base, const struct side *s, int reads)
{
	for (int i = 0; i < TURNS && s->reads < reads; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	return s->reads >= reads;
}

/*
 * An idle native leg sleeps when told to: its two buffers with their
 * callbacks and its write, deferred-work and timeout events are given back
 * (libevent's heap falls by that much for each of 32 legs), the read event
 * stays. Bytes from the peer wake a sleeping leg and are read as ever; a
 * call wakes it (what it writes leaves); the peer's close reaches it as an
 * EOF; waking takes back what sleeping gave.
 */
static void
test_plain_idle_sleeps(void **state)
{
	enum { N = 32 };
	struct event_base *base = event_base_new();
	struct side s[N];
	int sv[N][2];
	size_t awake, asleep;
	char buf[8];

	(void)state;
	memset(s, 0, sizeof(s));
	for (int i = 0; i < N; i++) {
		t_plain(base, sv[i], &s[i]);
		assert_int_equal(write(sv[i][1], "a", 1), 1);
	}
	for (int i = 0; i < N; i++) {
		assert_true(t_until_in(base, s[i].l, 1));
		evbuffer_drain(icpt_leg_input(s[i].l), 1);
	}
	t_turns(base, 2);
	awake = t_live;
	for (int i = 0; i < N; i++) {
		assert_false(icpt_leg_asleep(s[i].l));
		icpt_leg_sleep(s[i].l);
		assert_true(icpt_leg_asleep(s[i].l));
	}
	asleep = t_live;
	assert_true(awake - asleep >= N * (3 * event_get_struct_event_size() + 200));

	assert_int_equal(write(sv[3][1], "wake", 4), 4);
	assert_true(t_until_reads(base, &s[3], 2));
	assert_false(icpt_leg_asleep(s[3].l));
	assert_int_equal(evbuffer_get_length(icpt_leg_input(s[3].l)), 4);
	assert_memory_equal(evbuffer_pullup(icpt_leg_input(s[3].l), 4), "wake", 4);
	evbuffer_drain(icpt_leg_input(s[3].l), 4);

	assert_int_equal(icpt_leg_write(s[5].l, "out", 3), 0);
	assert_false(icpt_leg_asleep(s[5].l));
	t_turns(base, 2);
	assert_int_equal(t_drain_fd(sv[5][1], buf, sizeof(buf)), 3);
	assert_memory_equal(buf, "out", 3);

	close(sv[7][1]);
	sv[7][1] = -1;
	for (int i = 0; i < TURNS && s[7].eof == 0; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	assert_int_equal(s[7].eof, 1);

	for (int i = 0; i < N; i++)
		(void)evbuffer_get_length(icpt_leg_input(s[i].l)); /* every leg woken */
	assert_true(t_live >= awake);
	for (int i = 0; i < N; i++) {
		icpt_leg_free(s[i].l);
		if (sv[i][1] >= 0)
			close(sv[i][1]);
	}
	event_base_free(base);
}

/*
 * A sleeping leg keeps its read timeout (its read event carries it): set
 * to 1 s, it is reported once within 1.5 s of the last read, as awake
 * (and, not acted on, not again at once).
 */
static void
test_idle_sleep_keeps_read_timeout(void **state)
{
	struct event_base *base = event_base_new();
	struct side s = {0};
	int sv[2];

	(void)state;
	t_plain(base, sv, &s);
	icpt_leg_timeouts(s.l, 1, 0);
	assert_int_equal(write(sv[1], "a", 1), 1);
	assert_true(t_until_in(base, s.l, 1));
	evbuffer_drain(icpt_leg_input(s.l), 1);
	icpt_leg_sleep(s.l);
	assert_true(icpt_leg_asleep(s.l));
	t_run_ms(base, 1500);
	assert_int_equal(s.timeouts, 1);
	icpt_leg_free(s.l);
	close(sv[1]);
	event_base_free(base);
}

/*
 * Told to sleep when its read timeout is already due, a leg reports the
 * timeout once and reads on after it (libevent drops a read event whose
 * timeout of zero fired, and never adds it again).
 */
static void
test_sleep_with_timeout_due_reads_on(void **state)
{
	struct event_base *base = event_base_new();
	struct side s = {0};
	int sv[2];

	(void)state;
	t_plain(base, sv, &s);
	icpt_leg_timeouts(s.l, 1, 0);
	t_turns(base, 2);
	usleep(1200 * 1000); /* the loop held elsewhere past the read timeout */
	icpt_leg_sleep(s.l);
	t_run_ms(base, 300);
	assert_int_equal(s.timeouts, 1);
	assert_false(icpt_leg_asleep(s.l));
	assert_int_equal(write(sv[1], "x", 1), 1);
	assert_true(t_until_reads(base, &s, 1));
	assert_int_equal(s.reads, 1);
	icpt_leg_free(s.l);
	close(sv[1]);
	event_base_free(base);
}

static void
t_wake_probe_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	(void)icpt_leg_input(arg); /* any call on a sleeping leg wakes it */
}

/*
 * Put l to sleep, then run one turn in which its read event's timeout
 * fires and a timer calling cb, due just before it, runs first: cb runs
 * between the firing and the read event's callback.
 */
static void
t_probe_in_timeout_turn(struct event_base *base, struct icpt_leg *l, event_callback_fn cb)
{
	struct timeval soon = {0, 500 * 1000};
	struct event *probe = evtimer_new(base, cb, l);

	assert_non_null(probe);
	icpt_leg_sleep(l);
	assert_true(icpt_leg_asleep(l));
	evtimer_add(probe, &soon);
	usleep(1200 * 1000); /* both due in the next turn */
	event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	event_free(probe);
}

/* Wakes the leg, gives it a longer read timeout and puts it to sleep again. */
static void
t_wake_sleep_probe_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	(void)icpt_leg_input(arg);
	icpt_leg_timeouts(arg, 3, 0);
	icpt_leg_sleep(arg);
	assert_true(icpt_leg_asleep(arg));
}

/*
 * Sleeping, waking, and sleeping again between the firing of the read
 * event's timeout and its callback: the leg still sees its socket become
 * readable (at once, not when the new timeout ends).
 */
static void
test_sleep_again_before_timeout_callback(void **state)
{
	struct event_base *base = event_base_new();
	struct side s = {0};
	int sv[2];

	(void)state;
	t_plain(base, sv, &s);
	icpt_leg_timeouts(s.l, 1, 0);
	t_turns(base, 2);
	t_probe_in_timeout_turn(base, s.l, t_wake_sleep_probe_cb);
	assert_true(icpt_leg_asleep(s.l));
	assert_int_equal(write(sv[1], "x", 1), 1);
	assert_true(t_until_reads(base, &s, 1));
	assert_int_equal(s.reads, 1);
	assert_int_equal(s.timeouts, 0);
	icpt_leg_free(s.l);
	close(sv[1]);
	event_base_free(base);
}

/*
 * A wake that comes between the firing of the sleeping read event's
 * timeout and its callback leaves that event no timer: the leg, asleep
 * again with no read timeout, is not woken by it.
 */
static void
test_wake_before_timeout_callback(void **state)
{
	struct event_base *base = event_base_new();
	struct side s = {0};
	int sv[2];

	(void)state;
	t_plain(base, sv, &s);
	icpt_leg_timeouts(s.l, 1, 0);
	t_turns(base, 2);
	t_probe_in_timeout_turn(base, s.l, t_wake_probe_cb);
	assert_false(icpt_leg_asleep(s.l));
	t_run_ms(base, 300);
	assert_int_equal(s.timeouts, 1);
	icpt_leg_timeouts(s.l, 0, 0);
	icpt_leg_sleep(s.l);
	assert_true(icpt_leg_asleep(s.l));
	t_run_ms(base, 1500);
	assert_true(icpt_leg_asleep(s.l));
	assert_int_equal(s.timeouts, 1);
	assert_int_equal(s.reads, 0);
	icpt_leg_free(s.l);
	close(sv[1]);
	event_base_free(base);
}

/*
 * TLS legs sleep too once their record buffers are given back (trimming
 * alone gives back only those: a pooled leg stays awake), and a request
 * and its answer cross both after they woke.
 */
static void
test_tls_idle_sleeps(void **state)
{
	struct tls t;

	(void)state;
	t_tls_up(&t);
	assert_int_equal(icpt_leg_write(t.cli.l, "ping", 4), 0);
	assert_true(t_until_in(t.base, t.srv.l, 4));
	evbuffer_drain(icpt_leg_input(t.srv.l), 4);
	t_turns(t.base, 2);
	icpt_leg_trim(t.srv.l);
	assert_false(icpt_leg_asleep(t.srv.l));
	icpt_leg_sleep(t.srv.l);
	icpt_leg_sleep(t.cli.l);
	assert_true(icpt_leg_asleep(t.srv.l));
	assert_true(icpt_leg_asleep(t.cli.l));
	assert_int_equal(icpt_leg_write(t.cli.l, "again", 5), 0);
	assert_true(t_until_reads(t.base, &t.srv, 2));
	assert_false(icpt_leg_asleep(t.srv.l));
	assert_memory_equal(evbuffer_pullup(icpt_leg_input(t.srv.l), 5), "again", 5);
	assert_int_equal(icpt_leg_write(t.srv.l, "pong", 4), 0);
	assert_true(t_until_in(t.base, t.cli.l, 4));
	assert_memory_equal(evbuffer_pullup(icpt_leg_input(t.cli.l), 4), "pong", 4);
	t_tls_down(&t);
}

/*
 * A call on a sleeping leg that finds no memory to wake does nothing (a
 * write fails, the buffers are empty) and the leg fails once, from the
 * loop: an error the relays hear of as from any other failure.
 */
static void
test_wake_without_memory_fails(void **state)
{
	struct event_base *base = event_base_new();
	struct side s = {0};
	int sv[2];

	(void)state;
	t_plain(base, sv, &s);
	t_turns(base, 2);
	icpt_leg_sleep(s.l);
	assert_true(icpt_leg_asleep(s.l));
	t_oom = true;
	assert_int_equal(icpt_leg_write(s.l, "lost", 4), -1);
	assert_int_equal(evbuffer_get_length(icpt_leg_input(s.l)), 0);
	assert_true(icpt_leg_asleep(s.l));
	assert_int_equal(s.errors, 0);
	t_oom = false;
	t_turns(base, 3);
	assert_int_equal(s.errors, 1);
	assert_int_equal(s.reads, 0);
	icpt_leg_free(s.l);
	close(sv[1]);
	event_base_free(base);
}

static void
t_call_on_error_cb(struct icpt_leg *l, short what, void *arg)
{
	struct side *s = arg;

	(void)what;
	s->errors++;
	(void)icpt_leg_input(l); /* as a relay's error path may */
}

/*
 * A leg that finds no memory to wake in its own read callback fails once,
 * whatever its callbacks then call on it.
 */
static void
test_wake_fails_in_read_callback_once(void **state)
{
	struct event_base *base = event_base_new();
	struct side s = {0};
	int sv[2];

	(void)state;
	t_plain(base, sv, &s);
	icpt_leg_setcb(s.l, t_read_cb, t_write_cb, t_call_on_error_cb, &s);
	t_turns(base, 2);
	icpt_leg_sleep(s.l);
	assert_true(icpt_leg_asleep(s.l));
	assert_int_equal(write(sv[1], "x", 1), 1);
	t_oom = true;
	t_turns(base, 3);
	assert_int_equal(s.errors, 1);
	t_oom = false;
	t_turns(base, 3);
	assert_int_equal(s.errors, 1);
	assert_int_equal(s.reads, 0);
	icpt_leg_free(s.l);
	close(sv[1]);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_plain_both_ways),
	    cmocka_unit_test(test_plain_high_water),
	    cmocka_unit_test(test_plain_eof_half),
	    cmocka_unit_test(test_plain_free_in_callback),
	    cmocka_unit_test(test_tls_both_ways),
	    cmocka_unit_test(test_tls_read_ahead),
	    cmocka_unit_test(test_tls_high_water_pending),
	    cmocka_unit_test(test_tls_close_notify),
	    cmocka_unit_test(test_tls_handshake_garbage),
	    cmocka_unit_test(test_tls_handshake_timeout_once),
	    cmocka_unit_test(test_plain_idle_sleeps),
	    cmocka_unit_test(test_idle_sleep_keeps_read_timeout),
	    cmocka_unit_test(test_sleep_with_timeout_due_reads_on),
	    cmocka_unit_test(test_wake_before_timeout_callback),
	    cmocka_unit_test(test_sleep_again_before_timeout_callback),
	    cmocka_unit_test(test_tls_idle_sleeps),
	    cmocka_unit_test(test_wake_without_memory_fails),
	    cmocka_unit_test(test_wake_fails_in_read_callback_once),
	};

	event_set_mem_functions(t_malloc, t_realloc, t_free);

	return cmocka_run_group_tests(tests, NULL, NULL);
}
