/*
 * intercept: the interceptor's public face (intercept process): setup of
 * the TLS contexts and listeners, the connection lifecycle (one state
 * machine, one close), and logging through the ops hooks. The data path
 * lives in icpt_accept.c (accept, original destination, ClientHello),
 * icpt_splice.c (passthrough), icpt_up.c (upstream and verification) and
 * icpt_http.c (the HTTP relay); request rewriting in inject.c.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <malloc.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include "certs/leaf.h"
#include "policy/binding.h"
#include "policy/name.h"
#include "vault/httpwire.h"
#include "certs/trust.h"
#include "vault/intercept.h"
#include "vault/intercept_internal.h"
#include "vault/redact.h"
#include "vault/snap.h"
#include "vault/subst.h"
#include "vault/tlspeek.h"
#include "vault/icpt_internal.h"

/* ---------------------------------------------------------------- logging */

/* Add to a counter through the ops hook. */
void
icpt_count(struct intercept *ic, enum intercept_metric m, uint64_t n)
{
	ic->ops->count(ic->arg, m, n);
}

/* One log record about connection c through the ops hook. */
void
icpt_log(struct icpt_conn *c, enum intercept_level lvl, const char *event, const char *reason,
    int status)
{
	struct intercept_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.level = lvl;
	ev.event = event;
	ev.conn = c->id;
	ev.reason = reason;
	ev.host = c->host[0] ? c->host : NULL;
	ev.method = c->method[0] ? c->method : NULL;
	ev.status = status;
	ev.family = c->family;
	ev.addr = c->addr;
	ev.port = c->port;
	c->ic->ops->log(c->ic->arg, &ev);
}

/* A connection refused by a check: counted, and logged with its reason. */
void
icpt_reject(struct icpt_conn *c, const char *reason)
{
	icpt_count(c->ic, INTERCEPT_M_REJECTED, 1);
	icpt_log(c, INTERCEPT_L_WARN, "conn_reject", reason, 0);
}

/* ---------------------------------------------------------------- lifecycle */

/* The only place the state changes; an illegal transition is refused. */
bool
icpt_set_state(struct icpt_conn *c, enum icpt_state s)
{
	bool ok;

	switch (s) {
	case ICPT_S_HELLO:
		ok = c->state == ICPT_S_PEEK;
		break;
	case ICPT_S_SPLICE:
	case ICPT_S_HTTP:
		ok = c->state == ICPT_S_HELLO || c->state == ICPT_S_PEEK;
		break;
	case ICPT_S_TUNNEL:
		ok = c->state == ICPT_S_HTTP;
		break;
	case ICPT_S_DRAIN:
		ok = c->state != ICPT_S_CLOSED;
		break;
	case ICPT_S_CLOSED:
		ok = true;
		break;
	default:
		ok = false;
		break;
	}
	if (ok)
		c->state = s;
	return ok;
}

/*
 * Enter state s, or close the connection: an illegal transition is a bug
 * of ours, and the connection it happens on goes no further.
 */
bool
icpt_enter(struct icpt_conn *c, enum icpt_state s)
{
	if (icpt_set_state(c, s))
		return true;
	icpt_log(c, INTERCEPT_L_WARN, "conn_close", "illegal_state_transition", 0);
	icpt_close(c, NULL);
	return false;
}

/*
 * Closed connections are freed by one event of the intercept (ev_reap),
 * not one each: a connection goes only after every callback that was
 * already due when it closed (they may still name it), so one closed
 * while the reaper was already due waits for its next run (reap_later).
 * One with a socket request out waits for the answer (icpt_sock_orphaned).
 */
void
icpt_reap(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	c->reap_later = ic->reap_due;
	if (!ic->reap_due) {
		ic->reap_due = true;
		event_active(ic->ev_reap, EV_TIMEOUT, 0);
	}
}

/* What c's host is until one is set: c is freed without it. */
const char icpt_nohost[1];

int
icpt_set_host(struct icpt_conn *c, const char *name)
{
	size_t n = strlen(name);
	char *h;

	if (strcmp(c->host, name) == 0)
		return 0;
	if ((h = malloc(n + 1)) == NULL)
		return -1;
	memcpy(h, name, n + 1);
	if (c->host != icpt_nohost)
		free((char *)c->host);
	c->host = h;
	return 0;
}

/* The last of c (released already, icpt_release): its host and itself. */
static void
icpt_conn_free(struct icpt_conn *c)
{
	if (c->host != icpt_nohost)
		free((char *)c->host);
	free(c);
}

void
icpt_reap_cb(evutil_socket_t fd, short what, void *arg)
{
	struct intercept *ic = arg;
	struct icpt_conn *c, *next;
	bool again = false;

	(void)fd, (void)what;
	ic->reap_due = false;
	for (c = ic->dead; c != NULL; c = next) {
		next = c->next;
		if (c->sockreqs > 0)
			continue; /* the socket callback reaps it */
		if (c->reap_later) {
			c->reap_later = false;
			again = true;
			continue;
		}
		if (c->prev != NULL)
			c->prev->next = c->next;
		else
			ic->dead = c->next;
		if (c->next != NULL)
			c->next->prev = c->prev;
		icpt_conn_free(c);
	}
	if (again) {
		ic->reap_due = true;
		event_active(ic->ev_reap, EV_TIMEOUT, 0);
	}
}

/* What a connection keeps between requests only to save allocations. */
static void
icpt_idle_free(struct icpt_conn *c)
{
	icpt_up_free_replay(c);
	/* The request buffers, empty between requests (icpt_http_buffers makes them again). */
	if (c->toup != NULL && evbuffer_get_length(c->toup) == 0) {
		evbuffer_free(c->toup);
		c->toup = NULL;
	}
	if (c->tmp != NULL && evbuffer_get_length(c->tmp) == 0) {
		evbuffer_free(c->tmp);
		c->tmp = NULL;
	}
	redact_stream_free(c->rs_spare);
	c->rs_spare = NULL;
	if (c->hbuf != NULL)
		evbuffer_free(c->hbuf);
	c->hbuf = NULL;
	/* No head has begun: the deadline's event is made again when one does. */
	if (c->ev_deadline != NULL && !evtimer_pending(c->ev_deadline, NULL)) {
		event_free(c->ev_deadline);
		c->ev_deadline = NULL;
	}
}

/* Unlink c and free every resource it holds (not c itself). */
void
icpt_release(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	if (c->prev != NULL)
		c->prev->next = c->next;
	else if (ic->conns == c)
		ic->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
	ic->nconns--;
	icpt_h2_free(c);
	icpt_raw_free(c); /* before the bufferevents close the descriptors it watches */
	if (c->ufd_own)
		close(c->ufd);
	c->ufd_own = false;
	if (c->ev_linger != NULL)
		event_free(c->ev_linger); /* the same: it watches the workload's socket */
	c->ev_linger = NULL;
	icpt_unquiet(c);
	/* The upstream leg, or the socket still connecting; its count with it. */
	icpt_up_release(c);
	if (c->ev_first != NULL)
		event_free(c->ev_first);
	c->ev_first = NULL;
	/* The workload's socket goes with whichever holds it: its leg, craw, or c. */
	if (c->cl != NULL) {
		SSL *ssl = icpt_leg_ssl(c->cl);

		if (ssl != NULL)
			SSL_set_app_data(ssl, NULL); /* no callback finds c after this */
		icpt_leg_free(c->cl);
	} else if (c->craw != NULL) {
		bufferevent_free(c->craw);
	} else if (c->cfd >= 0) {
		close(c->cfd);
	}
	c->cl = NULL;
	c->craw = NULL;
	c->cfd = -1;
	if (c->ev_drain != NULL)
		event_free(c->ev_drain);
	c->ev_drain = NULL;
	if (c->ev_deadline != NULL)
		event_free(c->ev_deadline);
	c->ev_deadline = NULL;
	if (c->ev_probe != NULL)
		event_free(c->ev_probe);
	c->ev_probe = NULL;
	redact_stream_free(c->rs);
	c->rs = NULL;
	icpt_idle_free(c);
	if (c->toup != NULL)
		evbuffer_free(c->toup);
	if (c->tmp != NULL)
		evbuffer_free(c->tmp);
	c->toup = c->tmp = NULL;
	subst_stream_free(c->subst);
	c->subst = NULL;
	if (c->sbuf != NULL)
		evbuffer_free(c->sbuf);
	c->sbuf = NULL;
	if (c->shead != NULL)
		evbuffer_free(c->shead);
	c->shead = NULL;
	vault_snap_unref(c->snap);
	c->snap = NULL;
	free(c->hello);
	c->hello = NULL;
}

/* The one way a connection ends: release everything, free on the next turn. */
void
icpt_close(struct icpt_conn *c, const char *why)
{
	if (c->state == ICPT_S_CLOSED || !icpt_set_state(c, ICPT_S_CLOSED))
		return;
	if (why != NULL)
		icpt_log(c, INTERCEPT_L_DEBUG, "conn_close", why, 0);
	icpt_release(c);
	c->next = c->ic->dead;
	if (c->next != NULL)
		c->next->prev = c;
	c->ic->dead = c;
	icpt_reap(c);
}

/* Whether every byte for the workload left (a native leg writes its records to the socket). */
static bool
icpt_client_flushed(struct icpt_conn *c)
{
	if (c->cl != NULL && evbuffer_get_length(icpt_leg_output(c->cl)) > 0)
		return false;
	return c->craw == NULL || evbuffer_get_length(bufferevent_get_output(c->craw)) == 0;
}

/* Lingering: the workload's bytes after a drained close are read and dropped. */
static void
icpt_linger_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_conn *c = arg;
	uint8_t buf[4096];
	ssize_t n;

	(void)what;
	while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
		c->lingered += (size_t)n;
		if (c->lingered >= ICPT_LINGER_MAX) {
			icpt_close(c, NULL);
			return;
		}
	}
	if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
		icpt_close(c, NULL); /* the workload closed too, or reset */
}

/*
 * Close without a reset that would take the last bytes with it: a socket
 * closed with unread bytes in it sends RST, and a workload still sending
 * (a refused upload, an HTTP/2 flood answered with GOAWAY) would lose the
 * answer queued before it. So the socket is shut for writing (the workload
 * reads the answer, then EOF) and what it still sends is read and dropped
 * until it closes, for ICPT_LINGER_MS and ICPT_LINGER_MAX bytes at most
 * (the drain's timer is the deadline).
 */
static void
icpt_linger(struct icpt_conn *c)
{
	struct timeval tv = {0, ICPT_LINGER_MS * 1000};
	int fd = c->cfd;

	if (fd < 0) {
		icpt_close(c, NULL);
		return;
	}
	/* Its edge-triggered events go first: one socket's events are all edge-triggered or none. */
	icpt_raw_free(c);
	if (c->craw != NULL)
		bufferevent_disable(c->craw, EV_READ | EV_WRITE);
	if (c->cl != NULL)
		icpt_leg_disable(c->cl, EV_READ | EV_WRITE);
	if (c->ev_first != NULL)
		event_del(c->ev_first);
	c->ev_linger = event_new(c->ic->base, fd, EV_READ | EV_PERSIST, icpt_linger_cb, c);
	if (c->ev_linger == NULL || shutdown(fd, SHUT_WR) != 0 ||
	    event_add(c->ev_linger, NULL) != 0 || evtimer_add(c->ev_drain, &tv) != 0) {
		icpt_close(c, NULL);
		return;
	}
}

/* Polls until the workload side is flushed (bounded), then closes. */
static void
icpt_drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_conn *c = arg;
	struct timeval tv = {0, ICPT_DRAIN_POLL_MS * 1000};

	if (c->state != ICPT_S_DRAIN)
		return;
	if (c->ev_linger != NULL) {
		icpt_close(c, NULL); /* the lingering's deadline */
		return;
	}
	if (c->cl != NULL && evbuffer_get_length(icpt_leg_output(c->cl)) == 0 && !c->shut_sent) {
		/* close_notify, so that a close-delimited body is not read as truncated. */
		c->shut_sent = true;
		icpt_leg_close_notify(c->cl);
	}
	if (icpt_client_flushed(c)) {
		icpt_linger(c);
		return;
	}
	if (++c->drain_polls > ICPT_DRAIN_MAX_S * 1000 / ICPT_DRAIN_POLL_MS) {
		icpt_close(c, NULL);
		return;
	}
	event_add(c->ev_drain, &tv);
}

/* Stop reading, send what is queued to the workload, then close. */
void
icpt_drain(struct icpt_conn *c)
{
	if (c->state == ICPT_S_DRAIN || !icpt_enter(c, ICPT_S_DRAIN))
		return;
	if (c->cl != NULL)
		icpt_leg_disable(c->cl, EV_READ);
	if (c->craw != NULL)
		bufferevent_disable(c->craw, EV_READ);
	if (c->ev_first != NULL)
		event_del(c->ev_first);
	if (c->ul != NULL)
		icpt_leg_disable(c->ul, EV_READ);
	if (c->usock != NULL)
		bufferevent_disable(c->usock, EV_READ);
	c->ev_drain = event_new(c->ic->base, -1, 0, icpt_drain_cb, c);
	if (c->ev_drain == NULL) {
		icpt_close(c, "oom");
		return;
	}
	event_active(c->ev_drain, EV_TIMEOUT, 0);
}

/* Refuse a TLS connection before any handshake: one fatal alert record. */
void
icpt_alert(struct icpt_conn *c, enum tlspeek_alert a)
{
	uint8_t rec[TLSPEEK_ALERT_LEN];
	int n = tlspeek_alert_write(rec, sizeof(rec), c->hello ? c->hello->record_version : 0, a);

	/* Before any handshake the socket is c's or craw's: an empty socket takes 7 bytes. */
	if (n > 0 && c->craw != NULL)
		bufferevent_write(c->craw, rec, (size_t)n);
	else if (n > 0 && c->cfd >= 0 && c->cl == NULL)
		(void)send(c->cfd, rec, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	icpt_drain(c);
}

/* A short response of ours to the workload; the connection then closes. */
void
icpt_http_error(struct icpt_conn *c, int status, const char *text, const char *reason)
{
	char buf[512];
	int n;

	if (c->state == ICPT_S_CLOSED || c->cl == NULL)
		return;
	n = snprintf(buf, sizeof(buf),
	    "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
	    "Connection: close\r\n\r\n%s\n",
	    status, text, strlen(text) + 1, text);
	if (n > 0 && (size_t)n < sizeof(buf))
		icpt_leg_write(c->cl, buf, (size_t)n);
	icpt_log(c, INTERCEPT_L_WARN, "http_reject", reason, status);
	icpt_drain(c);
}

/* A deadline passed (slowloris): refused, counted, logged, closed. */
static void
icpt_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_conn *c = arg;

	if (c->state == ICPT_S_CLOSED)
		return;
	if (strcmp(c->deadline_why, "keepalive_timeout") == 0) {
		icpt_close(c, c->deadline_why); /* an idle HTTP/2 connection: no refusal */
		return;
	}
	if (c->state != ICPT_S_DRAIN) /* a draining connection was already refused */
		icpt_reject(c, c->deadline_why);
	icpt_close(c, NULL);
}

/*
 * (Re)start the connection's one deadline. Unlike a bufferevent read
 * timeout it is not reset by each byte, so a peer sending one byte a
 * second cannot hold a connection (slowloris).
 */
void
icpt_deadline_arm(struct icpt_conn *c, unsigned secs, const char *why)
{
	struct timeval tv = {(time_t)secs, 0};

	if (c->ev_deadline == NULL)
		c->ev_deadline = evtimer_new(c->ic->base, icpt_deadline_cb, c);
	if (c->ev_deadline == NULL) {
		icpt_close(c, "oom");
		return;
	}
	c->deadline_why = why;
	evtimer_add(c->ev_deadline, &tv);
}

/* The head deadline, unless one already runs (a request head has begun). */
void
icpt_deadline_head(struct icpt_conn *c)
{
	if (c->ev_deadline == NULL || !evtimer_pending(c->ev_deadline, NULL))
		icpt_deadline_arm(c, c->ic->cfg.head_timeout_s, "head_timeout");
}

/* The awaited bytes arrived: no deadline until the next head begins. */
void
icpt_deadline_stop(struct icpt_conn *c)
{
	if (c->ev_deadline != NULL)
		evtimer_del(c->ev_deadline);
}

/*
 * TCP_NODELAY on a proxied socket (either leg): every write here is a whole
 * message or record already, and Nagle's algorithm against the peer's
 * delayed ACK would hold a handshake flight or a response tail ~40 ms.
 * Best effort: a socket without it still works, only slower.
 */
void
icpt_nodelay(int fd)
{
	int one = 1;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Read and write timeouts of a leg in seconds; 0 means none. */
void
icpt_timeouts(struct bufferevent *bev, unsigned rd_s, unsigned wr_s)
{
	struct timeval r = {(time_t)rd_s, 0}, w = {(time_t)wr_s, 0};

	bufferevent_set_timeouts(bev, rd_s ? &r : NULL, wr_s ? &w : NULL);
}

/*
 * A socket bufferevent's output is written now, in this turn, not on the
 * next one once epoll says the new socket is writable: what the kernel
 * does not take stays, and the bufferevent writes it when the socket
 * drains, as before. With the loop's change list, its write interest added
 * and dropped within the turn never reaches epoll.
 */
void
icpt_flush_sock(struct bufferevent *sock)
{
	struct evbuffer *out = bufferevent_get_output(sock);
	int n;

	if (evbuffer_get_length(out) == 0)
		return;
	evbuffer_unfreeze(out, 1);
	n = evbuffer_write(out, bufferevent_getfd(sock));
	evbuffer_freeze(out, 1);
	if (n <= 0)
		return; /* full, or an error the bufferevent meets on its own write */
	if (evbuffer_get_length(out) == 0)
		event_del(&sock->ev_write); /* as its write callback does once drained */
	bufferevent_trigger(sock, EV_WRITE, 0);
}

/* ---------------------------------------------------------------- quiet */

static void
icpt_quiet_unlink(struct icpt_conn *c)
{
	TAILQ_REMOVE(&c->ic->quiet, c, quiet_link);
	c->quiet = false;
}

/* Arm the sweep for when the longest quiet connection is due. */
static void
icpt_trim_arm(struct intercept *ic, const struct timeval *now)
{
	struct timeval due, wait = {0, 0};

	if (TAILQ_EMPTY(&ic->quiet) || ic->ev_trim == NULL)
		return;
	due = TAILQ_FIRST(&ic->quiet)->quiet_at;
	due.tv_usec += (ICPT_TRIM_MS % 1000) * 1000;
	due.tv_sec += ICPT_TRIM_MS / 1000 + due.tv_usec / 1000000;
	due.tv_usec %= 1000000;
	if (timercmp(&due, now, >))
		timersub(&due, now, &wait);
	evtimer_add(ic->ev_trim, &wait);
}

static void
icpt_trim_cb(evutil_socket_t fd, short what, void *arg)
{
	struct intercept *ic = arg;
	struct timeval now, age;
	struct icpt_conn *c;
	uint64_t n = 0;

	(void)fd, (void)what;
	event_base_gettimeofday_cached(ic->base, &now);
	while ((c = TAILQ_FIRST(&ic->quiet)) != NULL) {
		timersub(&now, &c->quiet_at, &age);
		if (age.tv_sec * 1000 + age.tv_usec / 1000 < ICPT_TRIM_MS)
			break;
		icpt_quiet_unlink(c);
		icpt_idle_free(c);
		if (c->cl != NULL)
			icpt_leg_sleep(c->cl);
		if (c->ul != NULL)
			icpt_leg_sleep(c->ul);
		c->trimmed = true;
		n++;
	}
	icpt_count(ic, INTERCEPT_M_TRIMMED, n);
	/*
	 * The freed buffers sit between live allocations, where the heap does
	 * not shrink: their pages go back to the kernel, once a second at most.
	 */
	ic->trim_pending |= n > 0;
	if (ic->trim_pending && now.tv_sec != ic->trimmed_at) {
		ic->trimmed_at = now.tv_sec;
		ic->trim_pending = false;
		(void)malloc_trim(0);
	}
	icpt_trim_arm(ic, &now);
	if (ic->trim_pending && !evtimer_pending(ic->ev_trim, NULL)) {
		struct timeval one = {1, 0};

		evtimer_add(ic->ev_trim, &one);
	}
}

void
icpt_quiet(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;
	bool first = TAILQ_EMPTY(&ic->quiet);

	if (c->quiet || c->h2 != NULL || c->state != ICPT_S_HTTP)
		return;
	if (ic->ev_trim == NULL && (ic->ev_trim = evtimer_new(ic->base, icpt_trim_cb, ic)) == NULL)
		return; /* untrimmed: more memory, nothing else */
	event_base_gettimeofday_cached(ic->base, &c->quiet_at);
	TAILQ_INSERT_TAIL(&ic->quiet, c, quiet_link);
	c->quiet = true;
	if (first)
		icpt_trim_arm(ic, &c->quiet_at);
}

/* A request came: full-sized reads again (the workload leg's first is already in). */
void
icpt_unquiet(struct icpt_conn *c)
{
	if (c->quiet)
		icpt_quiet_unlink(c);
	if (!c->trimmed)
		return;
	c->trimmed = false;
	if (c->cl != NULL)
		icpt_leg_max_read(c->cl, 0);
	if (c->ul != NULL)
		icpt_leg_max_read(c->ul, 0);
}

/* ---------------------------------------------------------------- setup */

/*
 * ALPN on terminated connections: h2 when the peeked hello offered it
 * (c->want_h2, also what the upstream is offered), else http/1.1. An
 * offer of neither is refused with a fatal no_application_protocol alert
 * (RFC 7301 3.2), so that a client never goes on speaking what it offered;
 * a hello without ALPN never gets here and is served HTTP/1.1.
 */
static int
icpt_alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
    unsigned int inlen, void *arg)
{
	static const unsigned char h11[] = "\x08http/1.1";
	static const unsigned char both[] = "\x02h2\x08http/1.1";
	struct icpt_conn *c = SSL_get_app_data(ssl);
	unsigned char *sel = NULL;
	bool h2 = c != NULL && c->want_h2;

	if (SSL_select_next_proto(&sel, outlen, h2 ? both : h11,
	        h2 ? sizeof(both) - 1 : sizeof(h11) - 1, in, inlen) != OPENSSL_NPN_NEGOTIATED) {
		if (c != NULL)
			icpt_reject(c, "alpn_unsupported");
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	}
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

/* The server context (leaves set per connection) and the verifying client context. */
static int
icpt_ctx_setup(struct intercept *ic, char *err, size_t errlen)
{
	static const unsigned char h11[] = "\x08http/1.1";
	struct stat st;
	int ok;

	ic->srv_ctx = SSL_CTX_new(TLS_server_method());
	ic->up_ctx = SSL_CTX_new(TLS_client_method());
	if (ic->srv_ctx == NULL || ic->up_ctx == NULL) {
		snprintf(err, errlen, "intercept: SSL_CTX_new failed");
		return -1;
	}
	SSL_CTX_set_min_proto_version(ic->srv_ctx, TLS1_2_VERSION);
	/* TLS 1.2 toward the workload: forward-secret AEAD suites only (no CBC, no SHA-1 MAC). */
	if (SSL_CTX_set_cipher_list(ic->srv_ctx, "ECDHE+AESGCM:ECDHE+CHACHA20") != 1) {
		snprintf(err, errlen, "intercept: cipher list setup failed");
		return -1;
	}
	SSL_CTX_set_min_proto_version(ic->up_ctx, TLS1_2_VERSION);
	SSL_CTX_set_alpn_select_cb(ic->srv_ctx, icpt_alpn_cb, NULL);
	SSL_CTX_set_client_hello_cb(ic->srv_ctx, icpt_client_hello_cb, NULL);
	SSL_CTX_set_options(ic->srv_ctx, SSL_OP_NO_RENEGOTIATION);
	if (icpt_tickets_setup(ic) != 0) {
		snprintf(err, errlen, "intercept: session ticket setup failed");
		return -1;
	}
	SSL_CTX_set_options(ic->up_ctx, SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_verify(ic->up_ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_session_cache_mode(
	    ic->up_ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ic->up_ctx, icpt_sess_new_cb);
	if (SSL_CTX_set_alpn_protos(ic->up_ctx, h11, sizeof(h11) - 1) != 0) {
		snprintf(err, errlen, "intercept: ALPN setup failed");
		return -1;
	}
	if (ic->cfg.upstream_store != NULL) {
		SSL_CTX_set1_cert_store(ic->up_ctx, ic->cfg.upstream_store);
		ok = 1;
	} else if (ic->upstream_ca[0] == '\0')
		ok = trust_system_paths(SSL_CTX_get_cert_store(ic->up_ctx));
	else if (stat(ic->upstream_ca, &st) == 0 && S_ISDIR(st.st_mode))
		ok = SSL_CTX_load_verify_locations(ic->up_ctx, NULL, ic->upstream_ca);
	else
		ok = SSL_CTX_load_verify_locations(ic->up_ctx, ic->upstream_ca, NULL);
	if (ok != 1) {
		snprintf(err, errlen, "intercept: cannot load upstream trust from %s",
		    ic->upstream_ca[0] ? ic->upstream_ca : "the system store");
		return -1;
	}
	return 0;
}

/* One loopback listener: the caller's socket `fd` if >= 0, else bound here. */
static int
icpt_listen(struct intercept *ic, int family, uint16_t port, int fd, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t len;
	struct evconnlistener *l;

	if (fd >= 0) {
		l = evconnlistener_new(ic->base, icpt_accept_cb, ic,
		    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
		if (l == NULL) {
			snprintf(err, errlen, "intercept: cannot serve port %u: %s", port,
			    strerror(errno));
			return -1;
		}
		ic->ls[ic->nls++] = l;
		return 0;
	}
	memset(&ss, 0, sizeof(ss));
	if (family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		len = sizeof(*sin);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		sin6->sin6_addr = in6addr_loopback;
		len = sizeof(*sin6);
	}
	l = evconnlistener_new_bind(ic->base, icpt_accept_cb, ic,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 512,
	    (struct sockaddr *)&ss, (int)len);
	if (l == NULL) {
		snprintf(err, errlen, "intercept: cannot listen on %s port %u: %s",
		    family == AF_INET ? "127.0.0.1" : "[::1]", port, strerror(errno));
		return -1;
	}
	ic->ls[ic->nls++] = l;
	return 0;
}

/* The caller's listening socket i, or -1. */
#define ICPT_LFD(cfg, i) ((cfg)->listen_fds != NULL ? (cfg)->listen_fds[i] : -1)

/* A configured value, defaulted and capped at the compiled maximum. */
static unsigned
icpt_lim(unsigned v, unsigned def, unsigned max)
{
	return v == 0 ? def : (v > max ? max : v);
}

/*
 * The descriptors the interceptor may hold: RLIMIT_NOFILE less
 * INTERCEPT_FD_RESERVE for its channel, the API and DNS, so that a flood
 * from the workload never starves them (EMFILE).
 */
static size_t
icpt_fd_budget(unsigned others)
{
	struct rlimit rl;
	rlim_t reserve = (rlim_t)INTERCEPT_FD_RESERVE + others;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 2 * (size_t)INTERCEPT_MAX_CONNS + INTERCEPT_UP_HEADROOM;
	if (rl.rlim_cur <= 2 * reserve)
		return INTERCEPT_FD_RESERVE;
	return rl.rlim_cur - reserve < 4 * (rlim_t)INTERCEPT_MAX_CONNS
	           ? (size_t)(rl.rlim_cur - reserve)
	           : 4 * (size_t)INTERCEPT_MAX_CONNS;
}

/*
 * The connection cap. A connection holds two descriptors while it has an
 * upstream and one between requests once its leg is given back (past
 * upstream_idle_max kept). Unset, the cap is half the budget, at most
 * INTERCEPT_DEFAULT_CONNS: every connection can have its upstream at once.
 * Set, it may reach the budget less INTERCEPT_UP_HEADROOM (to the compiled
 * INTERCEPT_MAX_CONNS): many idle connections, and upstreams for those
 * with a request while descriptors are left (icpt_fd_room); a request
 * past them is answered 502 (upstream_fd_budget), never by EMFILE.
 */
static unsigned
icpt_conn_cap(size_t budget, unsigned set)
{
	size_t half = budget / 2;
	size_t most = budget > 2 * INTERCEPT_UP_HEADROOM ? budget - INTERCEPT_UP_HEADROOM : half;

	if (set == 0)
		most = half < INTERCEPT_DEFAULT_CONNS ? half : INTERCEPT_DEFAULT_CONNS;
	else if (set < most)
		most = set;
	return most < INTERCEPT_MAX_CONNS ? (unsigned)most : INTERCEPT_MAX_CONNS;
}

/* Start the interceptor's listeners (see intercept.h). */
struct intercept *
intercept_new(struct event_base *base, const struct intercept_ops *ops, void *arg,
    const struct intercept_config *cfg, char *err, size_t errlen)
{
	struct intercept *ic;
	size_t budget = icpt_fd_budget(cfg->fd_reserve);

	if (cfg->leaves == NULL || cfg->tls_port == 0 || cfg->plain_port == 0 ||
	    cfg->tls_port == cfg->plain_port || cfg->peek_port == cfg->tls_port ||
	    cfg->peek_port == cfg->plain_port) {
		snprintf(err, errlen, "intercept: bad configuration");
		return NULL;
	}
	/* The workload's first bytes are peeked on an edge-triggered event (icpt_accept.c). */
	if (!(event_base_get_features(base) & EV_FEATURE_ET)) {
		snprintf(err, errlen, "intercept: the event loop has no edge-triggered events");
		return NULL;
	}
	ic = calloc(1, sizeof(*ic));
	if (ic == NULL) {
		snprintf(err, errlen, "intercept: out of memory");
		return NULL;
	}
	ic->base = base;
	ic->ops = ops;
	ic->arg = arg;
	TAILQ_INIT(&ic->idle);
	TAILQ_INIT(&ic->quiet);
	TAILQ_INIT(&ic->pool);
	if ((ic->ev_reap = event_new(base, -1, 0, icpt_reap_cb, ic)) == NULL) {
		snprintf(err, errlen, "intercept: out of memory");
		free(ic);
		return NULL;
	}
	ic->cfg = *cfg;
	ic->fd_budget = budget;
	ic->cfg.max_conns = icpt_conn_cap(budget, cfg->max_conns);
	ic->cfg.max_buffer = cfg->max_buffer == 0 || cfg->max_buffer > INTERCEPT_MAX_BUFFER
	                         ? INTERCEPT_MAX_BUFFER
	                         : cfg->max_buffer;
	ic->cfg.hello_timeout_s =
	    icpt_lim(cfg->hello_timeout_s, INTERCEPT_MAX_HELLO_S, INTERCEPT_MAX_HELLO_S);
	ic->cfg.head_timeout_s =
	    icpt_lim(cfg->head_timeout_s, ICPT_DEFAULT_HEAD_S, INTERCEPT_MAX_HEAD_S);
	ic->cfg.idle_timeout_s =
	    icpt_lim(cfg->idle_timeout_s, ICPT_DEFAULT_IDLE_S, INTERCEPT_MAX_IDLE_S);
	ic->cfg.keepalive_timeout_s =
	    icpt_lim(cfg->keepalive_timeout_s, ICPT_DEFAULT_KEEPALIVE_S, INTERCEPT_MAX_KEEPALIVE_S);
	ic->cfg.connect_timeout_s =
	    icpt_lim(cfg->connect_timeout_s, INTERCEPT_MAX_CONNECT_S, INTERCEPT_MAX_CONNECT_S);
	ic->cfg.upstream_idle_max = icpt_lim(
	    cfg->upstream_idle_max, INTERCEPT_DEFAULT_UPSTREAM_IDLE, INTERCEPT_DEFAULT_CONNS);
	snprintf(ic->upstream_ca, sizeof(ic->upstream_ca), "%s",
	    cfg->upstream_ca != NULL ? cfg->upstream_ca : "");
	ic->cfg.upstream_ca = ic->upstream_ca;
	ic->cfg.proxy_name[sizeof(ic->cfg.proxy_name) - 1] = '\0';
	ic->proxy_on = cfg->proxy_len != 0 || ic->cfg.proxy_name[0] != '\0';
	if (cfg->proxy_len != 0) {
		if (!icpt_proxy_addr_ok(&cfg->proxy, cfg->proxy_len)) {
			snprintf(err, errlen, "intercept: the proxy address is not IPv4 or IPv6");
			event_free(ic->ev_reap);
			free(ic);
			return NULL;
		}
		ic->px[0] = cfg->proxy;
		ic->pxlen[0] = cfg->proxy_len;
		ic->npx = 1;
	}
	if (icpt_ctx_setup(ic, err, errlen) != 0 ||
	    icpt_listen(ic, AF_INET, cfg->tls_port, ICPT_LFD(cfg, 0), err, errlen) != 0 ||
	    icpt_listen(ic, AF_INET6, cfg->tls_port, ICPT_LFD(cfg, 1), err, errlen) != 0 ||
	    icpt_listen(ic, AF_INET, cfg->plain_port, ICPT_LFD(cfg, 2), err, errlen) != 0 ||
	    icpt_listen(ic, AF_INET6, cfg->plain_port, ICPT_LFD(cfg, 3), err, errlen) != 0 ||
	    (cfg->peek_port != 0 &&
	        (icpt_listen(ic, AF_INET, cfg->peek_port, ICPT_LFD(cfg, 4), err, errlen) != 0 ||
	            icpt_listen(ic, AF_INET6, cfg->peek_port, ICPT_LFD(cfg, 5), err, errlen) !=
	                0))) {
		intercept_free(ic);
		return NULL;
	}
	return ic;
}

/* Close the listeners and every connection. */
void
intercept_free(struct intercept *ic)
{
	if (ic == NULL)
		return;
	for (size_t i = 0; i < ic->nls; i++)
		evconnlistener_free(ic->ls[i]);
	while (ic->conns != NULL) {
		struct icpt_conn *c = ic->conns;

		c->state = ICPT_S_CLOSED;
		icpt_release(c);
		icpt_conn_free(c);
	}
	while (ic->dead != NULL) {
		struct icpt_conn *c = ic->dead;

		ic->dead = c->next;
		icpt_conn_free(c);
	}
	if (ic->ev_reap != NULL)
		event_free(ic->ev_reap);
	icpt_pool_free(ic);
	if (ic->ev_trim != NULL)
		event_free(ic->ev_trim);
	SSL_CTX_free(ic->srv_ctx);
	icpt_tickets_wipe(&ic->tickets);
	for (size_t i = 0; i < ICPT_SESS_SLOTS; i++)
		SSL_SESSION_free(ic->sess[i].sess);
	SSL_CTX_free(ic->up_ctx);
	free(ic);
}

/* True once all listeners are bound. */
bool
intercept_listening(const struct intercept *ic)
{
	return ic != NULL && ic->nls == (ic->cfg.peek_port != 0 ? 6u : 4u);
}

/* The effective connection cap. */
size_t
intercept_max_conns(const struct intercept *ic)
{
	return ic == NULL ? 0 : ic->cfg.max_conns;
}

/* A constant name of a metric. */
const char *
intercept_metric_name(enum intercept_metric m)
{
	static const char *const names[INTERCEPT_M_COUNT] = {
	    [INTERCEPT_M_ACCEPTED] = "accepted",
	    [INTERCEPT_M_REJECTED] = "rejected",
	    [INTERCEPT_M_PASSTHROUGH] = "passthrough",
	    [INTERCEPT_M_TERMINATED] = "terminated",
	    [INTERCEPT_M_REQUESTS] = "requests",
	    [INTERCEPT_M_INJECTED] = "injected",
	    [INTERCEPT_M_REDACTED] = "redacted",
	    [INTERCEPT_M_UPSTREAM_ERR] = "upstream_errors",
	    [INTERCEPT_M_LIMITED] = "refused_limit",
	    [INTERCEPT_M_RESUMED] = "client_resumed",
	    [INTERCEPT_M_TICKET_REFUSED] = "client_ticket_refused",
	    [INTERCEPT_M_UPSTREAM_TLS] = "upstream_tls",
	    [INTERCEPT_M_UPSTREAM_RESUMED] = "upstream_tls_resumed",
	    [INTERCEPT_M_H2] = "h2_connections",
	    [INTERCEPT_M_H2_CALM] = "h2_calm",
	    [INTERCEPT_M_REQUESTS_RETRIED] = "requests_retried",
	    [INTERCEPT_M_TRIMMED] = "trimmed",
	    [INTERCEPT_M_UPSTREAM_REUSED] = "upstream_reused",
	};

	return (unsigned)m < INTERCEPT_M_COUNT ? names[m] : "unknown";
}
