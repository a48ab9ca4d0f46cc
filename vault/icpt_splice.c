/*
 * icpt_splice: passthrough (intercept process). After the checks, a host
 * no binding applies to is spliced: the ClientHello is replayed to the
 * original destination and bytes move both ways undecrypted, with
 * backpressure and half-closes. Until the server's first message is in,
 * the client's further bytes wait: when it is a HelloRetryRequest, the
 * client's records up to its second ClientHello are parsed and that hello
 * must name the first one's host (an SNI swapped after the checks would
 * reach another host behind the same front). Any other answer ends the
 * parsing; nothing else of a passed-through connection is read.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include "certs/leaf.h"
#include "policy/binding.h"
#include "policy/name.h"
#include "vault/httpwire.h"
#include "vault/intercept.h"
#include "vault/intercept_internal.h"
#include "vault/redact.h"
#include "vault/snap.h"
#include "vault/tlspeek.h"
#include "vault/icpt_internal.h"

/* ------------------------------------------------------------- raw relay */

/*
 * Once nothing of a passed-through connection is parsed any more (no
 * second hello can follow) and both legs are plain sockets, its bytes move
 * off the bufferevents: each socket has one edge-triggered event, added
 * once, and what is read is written to the other socket at once, in the
 * same turn. Only bytes the other socket did not take are kept (and that
 * side is read no more until they are gone), so an idle connection holds
 * no buffer. No FIONREAD before a read, no epoll_ctl per write.
 */
struct icpt_raw {
	struct icpt_conn *c;
	bool raw_hello; /* run raw from the hello on: the retry states are read here (peeked) */
	bool rdhup[2];  /* fd[d]'s peer half-closed (EV_CLOSED): what is peeked is all there is */
	struct event *ev[2]; /* 0: the workload's socket, 1: upstream's */
	struct event *idle;  /* no byte either way for idle_timeout_s */
	int fd[2];
	uint8_t *held[2]; /* read from fd[d], not yet taken by fd[!d] */
	size_t off[2], len[2];
	bool eof[2];  /* fd[d] read its EOF */
	bool shut[2]; /* fd[d] was shut for writing */
	time_t last;  /* a byte last moved (monotonic seconds) */
};

static uint8_t icpt_raw_buf[ICPT_RAW_READ];

static bool icpt_raw_retry(struct icpt_raw *r, int d);

static time_t
icpt_raw_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return ts.tv_sec;
}

void
icpt_raw_free(struct icpt_conn *c)
{
	struct icpt_raw *r = c->raw;
	int d;

	if (r == NULL)
		return;
	for (d = 0; d < 2; d++) {
		if (r->ev[d] != NULL)
			event_free(r->ev[d]);
		free(r->held[d]);
	}
	if (r->idle != NULL)
		event_free(r->idle);
	free(r);
	c->raw = NULL;
}

/* Keep what fd[!d] did not take of data; fd[d] is read no more until it goes. */
static bool
icpt_raw_hold(struct icpt_raw *r, int d, const uint8_t *data, size_t n)
{
	if ((r->held[d] = malloc(n)) == NULL)
		return false;
	memcpy(r->held[d], data, n);
	r->off[d] = 0;
	r->len[d] = n;
	return true;
}

/* Write to fd; false on an error other than a full socket. */
static bool
icpt_raw_send(int fd, const uint8_t *data, size_t n, size_t *sent)
{
	ssize_t w;

	*sent = 0;
	while (*sent < n) {
		w = send(fd, data + *sent, n - *sent, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK;
		}
		*sent += (size_t)w;
	}
	return true;
}

/*
 * Move bytes from fd[d] to fd[!d]: what is held first, then reads until
 * the socket is empty (EAGAIN), the other one full, or the turn's budget
 * spent. A short read does not end it: an EOF or a reset already in
 * behind the bytes brings no edge of its own (and libevent reports a
 * hang-up or an error as readable and writable, without EV_CLOSED), so it
 * is read now or never.
 * False when the connection ended.
 */
static bool
icpt_raw_pump(struct icpt_raw *r, int d)
{
	struct icpt_conn *c = r->c;
	size_t budget = ICPT_RAW_BUDGET, cap = c->ic->cfg.max_buffer, sent;
	ssize_t n;

	if (cap == 0 || cap > sizeof(icpt_raw_buf))
		cap = sizeof(icpt_raw_buf);
	if (r->len[d] > 0) {
		if (!icpt_raw_send(r->fd[!d], r->held[d] + r->off[d], r->len[d], &sent))
			goto fail;
		r->off[d] += sent;
		r->len[d] -= sent;
		if (r->len[d] > 0)
			return true; /* wait for fd[!d] to take more */
		free(r->held[d]);
		r->held[d] = NULL;
	}
	/*
	 * A retry state peeks at what decides it (icpt_raw_retry): the server's
	 * first message, then the client's second hello; the client's bytes
	 * wait in its socket until then.
	 */
	if (r->raw_hello && c->retry == ICPT_RETRY_SERVER)
		return d == 0 || icpt_raw_retry(r, 1);
	if (r->raw_hello && c->retry == ICPT_RETRY_CLIENT && d == 0)
		return icpt_raw_retry(r, 0);
	while (!r->eof[d]) {
		if (budget == 0) {
			/* Others' turn: the rest is read on the next one. */
			event_active(r->ev[d], EV_READ, 0);
			break;
		}
		n = recv(r->fd[d], icpt_raw_buf, cap, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			goto fail;
		}
		if (n == 0) {
			r->eof[d] = true;
			break;
		}
		r->last = icpt_raw_now();
		if (!icpt_raw_send(r->fd[!d], icpt_raw_buf, (size_t)n, &sent))
			goto fail;
		if (sent < (size_t)n) {
			if (!icpt_raw_hold(r, d, icpt_raw_buf + sent, (size_t)n - sent)) {
				icpt_close(c, "oom");
				return false;
			}
			return true;
		}
		budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
	}
	/* Half-close: an EOF passes on once the bytes before it are out. */
	if (r->eof[d] && r->len[d] == 0 && !r->shut[!d]) {
		r->shut[!d] = true;
		(void)shutdown(r->fd[!d], SHUT_WR);
	}
	if (r->eof[0] && r->eof[1] && r->len[0] == 0 && r->len[1] == 0) {
		icpt_close(c, "splice_done");
		return false;
	}
	return true;
fail:
	icpt_close(c, "splice_error");
	return false;
}

/* fd[i] readable: its bytes go over; writable: the bytes held for it go. */
static void
icpt_raw_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_raw *r = arg;
	int i = fd == r->fd[0] ? 0 : 1;

	if (r->c->state != ICPT_S_SPLICE)
		return; /* draining after a refusal: nothing more moves */
	/* The peer half-closed: a retry state's bytes stay incomplete (icpt_raw_retry). */
	if (what & EV_CLOSED) {
		r->rdhup[i] = true;
		what |= EV_READ;
	}
	if ((what & EV_READ) && !icpt_raw_pump(r, i))
		return;
	if ((what & EV_WRITE) && r->len[!i] > 0)
		(void)icpt_raw_pump(r, !i);
}

static void
icpt_raw_idle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_raw *r = arg;
	time_t quiet = icpt_raw_now() - r->last, limit = (time_t)r->c->ic->cfg.idle_timeout_s;
	struct timeval tv = {limit - quiet, 0};

	(void)fd, (void)what;
	if (quiet >= limit) {
		icpt_close(r->c, "idle_timeout");
		return;
	}
	evtimer_add(r->idle, &tv);
}

/*
 * What a bufferevent had not sent (its output, whose front only it drains:
 * thawed for this) and then what the other had read, in order, as what is
 * held for one direction.
 */
static bool
icpt_raw_take(struct icpt_raw *r, int d, struct evbuffer *unsent, struct evbuffer *read)
{
	size_t a = evbuffer_get_length(unsent), b = evbuffer_get_length(read);
	bool ok;

	if (a + b == 0)
		return true;
	if ((r->held[d] = malloc(a + b)) == NULL)
		return false;
	evbuffer_unfreeze(unsent, 1);
	ok = evbuffer_remove(unsent, r->held[d], a) == (int)a;
	evbuffer_freeze(unsent, 1);
	if (!ok || evbuffer_remove(read, r->held[d] + a, b) != (int)b)
		return false;
	r->len[d] = a + b;
	return true;
}

/*
 * Move a splice off its bufferevents when it can: nothing left to parse,
 * plain sockets both ways (not a TLS leg to an https:// proxy), no EOF
 * yet, and a loop that has edge-triggered events. Otherwise the
 * bufferevents go on.
 */
static void
icpt_raw_start(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;
	struct icpt_raw *r;
	struct timeval tv = {(time_t)ic->cfg.idle_timeout_s, 0};
	int d;

	if (c->raw != NULL || c->state != ICPT_S_SPLICE || c->retry != ICPT_RETRY_OFF || c->c_eof ||
	    c->u_eof || c->craw == NULL || c->usock == NULL || !c->up_ready ||
	    bufferevent_openssl_get_ssl(c->usock) != NULL ||
	    !(event_base_get_features(ic->base) & EV_FEATURE_ET))
		return;
	if ((r = calloc(1, sizeof(*r))) == NULL)
		return;
	r->c = c;
	r->fd[0] = bufferevent_getfd(c->craw);
	r->fd[1] = bufferevent_getfd(c->usock);
	r->last = icpt_raw_now();
	c->raw = r;
	/* Toward upstream: what its bufferevent had not sent, then what the client's had read. */
	if (!icpt_raw_take(
	        r, 0, bufferevent_get_output(c->usock), bufferevent_get_input(c->craw)) ||
	    !icpt_raw_take(
	        r, 1, bufferevent_get_output(c->craw), bufferevent_get_input(c->usock))) {
		icpt_close(c, "oom");
		return;
	}
	for (d = 0; d < 2; d++) {
		r->ev[d] = event_new(
		    ic->base, r->fd[d], EV_READ | EV_WRITE | EV_ET | EV_PERSIST, icpt_raw_cb, r);
		if (r->ev[d] == NULL) {
			icpt_close(c, "oom");
			return;
		}
	}
	if ((r->idle = evtimer_new(ic->base, icpt_raw_idle_cb, r)) == NULL) {
		icpt_close(c, "oom");
		return;
	}
	bufferevent_disable(c->craw, EV_READ | EV_WRITE);
	bufferevent_disable(c->usock, EV_READ | EV_WRITE);
	bufferevent_set_timeouts(c->craw, NULL, NULL);
	bufferevent_set_timeouts(c->usock, NULL, NULL);
	bufferevent_setcb(c->craw, NULL, NULL, NULL, NULL);
	bufferevent_setcb(c->usock, NULL, NULL, NULL, NULL);
	if (event_add(r->ev[0], NULL) != 0 || event_add(r->ev[1], NULL) != 0 ||
	    evtimer_add(r->idle, &tv) != 0) {
		icpt_close(c, "event_add");
		return;
	}
	/* What was held goes at once; the sockets' edges bring the rest. */
	if (r->len[0] > 0 && !icpt_raw_pump(r, 0))
		return;
	if (r->len[1] > 0)
		(void)icpt_raw_pump(r, 1);
}

/*
 * The retry checks of a passthrough, one copy for the raw relay and the
 * bufferevents alike (a second hello after a HelloRetryRequest could name
 * another host behind the same front).
 */
enum icpt_retry_verdict {
	ICPT_RV_MORE,   /* a valid prefix: wait for more bytes */
	ICPT_RV_PASS,   /* decided: the bytes may go on */
	ICPT_RV_HRR,    /* the server's first message is a HelloRetryRequest */
	ICPT_RV_REFUSED /* refused (logged, alerted or closed): stop */
};

/*
 * The server's first message at data[0..n): whether another hello can
 * come. On a HelloRetryRequest, c now waits for the client's second hello
 * (ICPT_RETRY_CLIENT, the hello deadline armed again).
 */
static enum icpt_retry_verdict
icpt_retry_server_check(struct icpt_conn *c, const uint8_t *data, size_t n)
{
	enum tlspeek_server kind;
	enum tlspeek_reason why;
	enum tlspeek_status st = tlspeek_server_first(data, n, &kind, &why);

	if (st == TLSPEEK_NEED_MORE)
		return ICPT_RV_MORE;
	if (st != TLSPEEK_OK) {
		/* Not TLS, or not readable: no telling whether a second hello comes. */
		icpt_reject(c, "upstream_not_server_hello");
		icpt_close(c, NULL);
		return ICPT_RV_REFUSED;
	}
	if (kind != TLSPEEK_SERVER_HRR)
		return ICPT_RV_PASS;
	if ((c->hello = malloc(sizeof(*c->hello))) == NULL) {
		icpt_close(c, "oom");
		return ICPT_RV_REFUSED;
	}
	c->retry = ICPT_RETRY_CLIENT;
	icpt_log(c, INTERCEPT_L_DEBUG, "hello_retry", NULL, 0);
	/* The second hello, like the first, within the hello deadline. */
	icpt_deadline_arm(c, c->ic->cfg.hello_timeout_s, "hello_timeout");
	return ICPT_RV_HRR;
}

/*
 * The client's bytes after the HelloRetryRequest at data[0..n): its second
 * hello must name the first one's host (refused with an alert otherwise).
 * whole: nothing more can come (past the bound, or the client closed).
 */
static enum icpt_retry_verdict
icpt_retry_client_check(struct icpt_conn *c, const uint8_t *data, size_t n, bool whole)
{
	size_t consumed = 0;
	enum tlspeek_status st = tlspeek_parse_retry(data, n, c->early_data, c->hello, &consumed);
	const char *why;

	if (st == TLSPEEK_NEED_MORE && n >= TLSPEEK_MAX_WIRE + TLSPEEK_MAX_SKIP)
		st = TLSPEEK_TOO_LARGE;
	if (st == TLSPEEK_NEED_MORE && !whole)
		return ICPT_RV_MORE;
	if (st == TLSPEEK_NEED_MORE) {
		icpt_close(c, "client_closed_in_hello");
		return ICPT_RV_REFUSED;
	}
	if (st != TLSPEEK_OK) {
		icpt_reject(c, "hrr_bad_client_hello");
		icpt_alert(c, TLSPEEK_ALERT_DECODE_ERROR);
		return ICPT_RV_REFUSED;
	}
	why = intercept_retry_refusal(c->host, c->hello->has_sni ? c->hello->sni : NULL,
	    c->hello->sni_len, c->hello->has_ech || c->hello->has_esni);
	if (why != NULL) {
		icpt_reject(c, why);
		icpt_alert(c, TLSPEEK_ALERT_ILLEGAL_PARAMETER);
		return ICPT_RV_REFUSED;
	}
	icpt_deadline_stop(c);
	return ICPT_RV_PASS;
}

/*
 * The retry states of a passthrough run raw from the hello on, read by
 * peeking (MSG_PEEK: nothing is taken before it is decided): direction 1
 * in ICPT_RETRY_SERVER, the server's first message, says whether a
 * second hello can come; direction 0 in ICPT_RETRY_CLIENT, the client's
 * records up to its second hello, which must name the first one's host.
 * The client's bytes wait in its socket until then. False when the
 * connection ended.
 */
static bool
icpt_raw_retry(struct icpt_raw *r, int d)
{
	struct icpt_conn *c = r->c;
	size_t max = d == 1 ? TLSPEEK_SERVER_FIRST_MAX : TLSPEEK_MAX_WIRE + TLSPEEK_MAX_SKIP;
	enum icpt_retry_verdict v;
	ssize_t n;

	do
		n = recv(r->fd[d], icpt_raw_buf, max, MSG_PEEK);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return true;
	if (n <= 0) {
		icpt_close(c, d == 1 ? "upstream_closed_in_hello" : "client_closed_in_hello");
		return false;
	}
	r->last = icpt_raw_now();
	if (d == 1) {
		v = icpt_retry_server_check(c, icpt_raw_buf, (size_t)n);
		if (v == ICPT_RV_MORE && r->rdhup[1]) {
			/* Closed before its first message was whole. */
			icpt_reject(c, "upstream_not_server_hello");
			icpt_close(c, NULL);
			return false;
		}
		if (v == ICPT_RV_MORE)
			return true;
		if (v == ICPT_RV_REFUSED)
			return false;
		if (v == ICPT_RV_PASS)
			c->retry = ICPT_RETRY_OFF;
		/* The server's bytes go on, then what the client sent meanwhile decides. */
		return c->state == ICPT_S_SPLICE && icpt_raw_pump(r, 1) && icpt_raw_pump(r, 0);
	}
	v = icpt_retry_client_check(c, icpt_raw_buf, (size_t)n, r->rdhup[0]);
	if (v != ICPT_RV_PASS)
		return v == ICPT_RV_MORE;
	free(c->hello);
	c->hello = NULL;
	c->retry = ICPT_RETRY_OFF;
	return icpt_raw_pump(r, 0);
}

/*
 * A TLS passthrough whose upstream socket connected, plain, nothing read
 * from it: its bytes move raw from here, the hello still in the workload's
 * socket (it was peeked). The hello goes first, exactly; the rest of the
 * client's waits until the server's first message says no second hello
 * comes (icpt_raw_retry). No bufferevent ever holds either socket; c owns
 * both. False when that does not hold (an https:// proxy's TLS, bytes the
 * proxy's answer left): the bufferevents then go on.
 */
static bool
icpt_raw_begin(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;
	struct timeval tv = {(time_t)ic->cfg.idle_timeout_s, 0};
	struct icpt_raw *r;
	size_t sent;
	ssize_t n;

	if (c->usock == NULL || bufferevent_openssl_get_ssl(c->usock) != NULL ||
	    evbuffer_get_length(bufferevent_get_input(c->usock)) > 0 ||
	    evbuffer_get_length(bufferevent_get_output(c->usock)) > 0 ||
	    c->retry != ICPT_RETRY_SERVER || c->hello_bytes == 0 ||
	    !(event_base_get_features(ic->base) & EV_FEATURE_ET))
		return false;
	if ((r = calloc(1, sizeof(*r))) == NULL) {
		icpt_close(c, "oom");
		return true;
	}
	c->raw = r;
	r->c = c;
	r->raw_hello = true;
	/* The upstream socket is c's from here: its bufferevent only connected it. */
	c->ufd = bufferevent_getfd(c->usock);
	c->ufd_own = true;
	bufferevent_setfd(c->usock, -1);
	bufferevent_free(c->usock);
	c->usock = NULL;
	c->up_ready = true;
	r->fd[0] = c->cfd;
	r->fd[1] = c->ufd;
	r->last = icpt_raw_now();
	icpt_count(ic, INTERCEPT_M_PASSTHROUGH, 1);
	for (int d = 0; d < 2; d++) {
		r->ev[d] = event_new(ic->base, r->fd[d],
		    EV_READ | EV_WRITE | EV_CLOSED | EV_ET | EV_PERSIST, icpt_raw_cb, r);
		if (r->ev[d] == NULL || event_add(r->ev[d], NULL) != 0) {
			icpt_close(c, "oom");
			return true;
		}
	}
	if ((r->idle = evtimer_new(ic->base, icpt_raw_idle_cb, r)) == NULL ||
	    evtimer_add(r->idle, &tv) != 0) {
		icpt_close(c, "oom");
		return true;
	}
	/* The hello, exactly (it was peeked whole), then the server's answer decides. */
	do
		n = recv(c->cfd, icpt_raw_buf, c->hello_bytes, 0);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)c->hello_bytes) {
		icpt_close(c, "client_closed_in_hello");
		return true;
	}
	if (!icpt_raw_send(c->ufd, icpt_raw_buf, (size_t)n, &sent)) {
		icpt_close(c, "splice_error");
		return true;
	}
	if (sent < (size_t)n && !icpt_raw_hold(r, 0, icpt_raw_buf + sent, (size_t)n - sent)) {
		icpt_close(c, "oom");
		return true;
	}
	return true;
}

/* ---------------------------------------------------------------- splice */

/* The other leg of a splice. */
static struct bufferevent *
icpt_peer(struct icpt_conn *c, struct bufferevent *bev)
{
	return bev == c->craw ? c->usock : c->craw;
}

/* Forward half-closes once drained; close when both sides are done. */
static void
icpt_splice_shut(struct icpt_conn *c)
{
	if (!c->up_ready) {
		icpt_close(c, "client_closed_before_upstream");
		return;
	}
	/* Half-close: pass on an EOF once the bytes before it are out (none held). */
	if (c->c_eof && c->retry == ICPT_RETRY_OFF && c->usock != NULL &&
	    evbuffer_get_length(bufferevent_get_output(c->usock)) == 0) {
		SSL *tls = bufferevent_openssl_get_ssl(c->usock);

		/* Through an https:// proxy the half-close is TLS's close_notify. */
		if (tls != NULL)
			(void)SSL_shutdown(tls);
		else
			shutdown(bufferevent_getfd(c->usock), SHUT_WR);
	}
	if (c->u_eof && evbuffer_get_length(bufferevent_get_output(c->craw)) == 0)
		shutdown(bufferevent_getfd(c->craw), SHUT_WR);
	if (c->c_eof && c->u_eof && evbuffer_get_length(bufferevent_get_output(c->usock)) == 0 &&
	    evbuffer_get_length(bufferevent_get_output(c->craw)) == 0)
		icpt_close(c, "splice_done");
}

/* The client's held bytes go upstream as they are, and it is read again. */
static void
icpt_retry_done(struct icpt_conn *c)
{
	c->retry = ICPT_RETRY_OFF;
	free(c->hello);
	c->hello = NULL;
	bufferevent_setwatermark(c->craw, EV_READ, 0, ICPT_HELLO_WATERMARK);
	evbuffer_add_buffer(bufferevent_get_output(c->usock), bufferevent_get_input(c->craw));
	if (!c->c_eof)
		bufferevent_enable(c->craw, EV_READ);
}

/*
 * The server's first message: a HelloRetryRequest makes the client's
 * next hello subject to the checks. False while it is incomplete, or when
 * the connection was refused.
 */
static bool
icpt_retry_server(struct icpt_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->usock);
	size_t len = evbuffer_get_length(in);
	size_t n = len > TLSPEEK_SERVER_FIRST_MAX ? TLSPEEK_SERVER_FIRST_MAX : len;
	uint8_t *data = evbuffer_pullup(in, (ssize_t)n);

	if (data == NULL)
		return false;
	switch (icpt_retry_server_check(c, data, n)) {
	case ICPT_RV_MORE:
	case ICPT_RV_REFUSED:
		return false;
	case ICPT_RV_PASS:
		icpt_retry_done(c);
		return true;
	case ICPT_RV_HRR:
		break;
	}
	bufferevent_setwatermark(c->craw, EV_READ, 0, ICPT_RETRY_WATERMARK);
	if (!c->c_eof)
		bufferevent_enable(c->craw, EV_READ);
	return c->state == ICPT_S_SPLICE;
}

/*
 * The client's bytes after the HelloRetryRequest: its second hello
 * decides. True when the held bytes may go upstream.
 */
static bool
icpt_retry_client(struct icpt_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->craw);
	size_t len = evbuffer_get_length(in);
	uint8_t *data;

	if (len == 0)
		return false;
	if ((data = evbuffer_pullup(in, -1)) == NULL)
		return false;
	if (icpt_retry_client_check(c, data, len, false) != ICPT_RV_PASS)
		return false;
	icpt_retry_done(c);
	return true;
}

/* Passthrough: move bytes to the other leg as they come. */
static void
icpt_splice_read_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_conn *c = arg;
	struct bufferevent *peer = icpt_peer(c, bev);
	struct evbuffer *out = bufferevent_get_output(peer);
	enum icpt_retry was = c->retry;

	if (c->state != ICPT_S_SPLICE)
		return;
	if (bev == c->craw && c->retry != ICPT_RETRY_OFF) {
		/* Held until the server's first message, then until the second hello. */
		if (c->retry == ICPT_RETRY_SERVER) {
			bufferevent_disable(bev, EV_READ);
			return;
		}
		if (!icpt_retry_client(c))
			return;
	}
	if (bev == c->usock && c->retry == ICPT_RETRY_SERVER && !icpt_retry_server(c))
		return;
	evbuffer_add_buffer(out, bufferevent_get_input(bev));
	/* Backpressure: stop reading this side while the other is behind. */
	if (evbuffer_get_length(out) >= c->ic->cfg.max_buffer)
		bufferevent_disable(bev, EV_READ);
	/* A client EOF that waited for its held bytes to go. */
	if (was != ICPT_RETRY_OFF && c->retry == ICPT_RETRY_OFF && c->c_eof)
		icpt_splice_shut(c);
	/* Bytes of the second hello that came before the HelloRetryRequest was relayed. */
	else if (bev == c->usock && c->retry == ICPT_RETRY_CLIENT &&
	         evbuffer_get_length(bufferevent_get_input(c->craw)) > 0)
		icpt_splice_read_cb(c->craw, c);
	/* Nothing more to parse: the bytes move raw from here on. */
	else if (was != ICPT_RETRY_OFF && c->retry == ICPT_RETRY_OFF)
		icpt_raw_start(c);
}

/* A leg drained: resume reading the other one. */
static void
icpt_splice_write_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_conn *c = arg;
	struct bufferevent *peer = icpt_peer(c, bev);
	bool peer_eof = bev == c->craw ? c->u_eof : c->c_eof;

	if (c->state != ICPT_S_SPLICE)
		return; /* draining after a refusal: nothing more is read */
	if (!peer_eof && (peer != c->craw || c->retry != ICPT_RETRY_SERVER))
		bufferevent_enable(peer, EV_READ);
	icpt_splice_shut(c);
}

/* EOF half-closes; errors and idle timeouts end the connection. */
void
icpt_splice_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct icpt_conn *c = arg;

	if (what & BEV_EVENT_EOF) {
		if (bev == c->craw)
			c->c_eof = true;
		else
			c->u_eof = true;
		bufferevent_disable(bev, EV_READ);
		icpt_splice_shut(c);
		return;
	}
	icpt_close(c, (what & BEV_EVENT_TIMEOUT) ? "idle_timeout" : "splice_error");
}

/* Upstream connected: replay the hello, then splice both ways. */
void
icpt_splice_start(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	/* A TLS passthrough came here with the hello still in its socket. */
	if (c->craw == NULL) {
		if (icpt_raw_begin(c))
			return;
		if (icpt_first_to_craw(c) != 0)
			return;
		bufferevent_setcb(c->craw, NULL, NULL, icpt_splice_event_cb, c);
	}
	c->up_ready = true;
	/*
	 * Replay the ClientHello to the real server; what came after it waits
	 * for the server's first message when a second hello could follow.
	 */
	if (c->retry == ICPT_RETRY_SERVER)
		evbuffer_remove_buffer(bufferevent_get_input(c->craw),
		    bufferevent_get_output(c->usock), c->hello_bytes);
	else
		evbuffer_add_buffer(
		    bufferevent_get_output(c->usock), bufferevent_get_input(c->craw));
	/* A server that spoke first (peek) already sent its banner. */
	evbuffer_add_buffer(bufferevent_get_output(c->craw), bufferevent_get_input(c->usock));
	bufferevent_setcb(
	    c->craw, icpt_splice_read_cb, icpt_splice_write_cb, icpt_splice_event_cb, c);
	bufferevent_setcb(
	    c->usock, icpt_splice_read_cb, icpt_splice_write_cb, icpt_splice_event_cb, c);
	icpt_timeouts(c->craw, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
	icpt_timeouts(c->usock, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
	bufferevent_enable(c->craw, c->retry == ICPT_RETRY_SERVER ? EV_WRITE : EV_READ | EV_WRITE);
	bufferevent_enable(c->usock, EV_READ | EV_WRITE);
	icpt_count(ic, INTERCEPT_M_PASSTHROUGH, 1);
	/* The hello goes now, not once epoll has said the new socket is writable. */
	if (bufferevent_openssl_get_ssl(c->usock) == NULL)
		icpt_flush_sock(c->usock);
	icpt_raw_start(c);
}
