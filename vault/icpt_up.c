/*
 * icpt_up: the upstream leg (intercept process): a marked socket to the
 * original destination, TLS with verification of the certificate for
 * the SNI (never skipped), sessions resumed only for the exact name,
 * address and port they were verified for.
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

/* ---------------------------------------------------------------- upstream */

static void icpt_up_read_cb(struct icpt_leg *l, void *arg);
static void icpt_up_write_cb(struct icpt_leg *l, void *arg);
static void icpt_up_event_cb(struct icpt_leg *l, short what, void *arg);
static void icpt_up_cap(struct intercept *ic, struct icpt_conn *c);

/*
 * Free an upstream leg. A TLS leg whose handshake finished first sends its
 * close_notify (written at once if the socket takes it; never waited for):
 * OpenSSL marks the session of an SSL freed without one as not resumable,
 * and the next connection to the same upstream would pay a full handshake.
 * A leg that failed (a fatal alert, a verification failure) has had its
 * session dropped by OpenSSL already, and a handshake that did not finish
 * stored none.
 */
static void
icpt_up_leg_free(struct icpt_leg *l)
{
	SSL *ssl = icpt_leg_ssl(l);

	if (ssl != NULL)
		SSL_set_app_data(ssl, NULL);
	icpt_leg_close_notify(l);
	icpt_leg_free(l);
}

void
icpt_up_free(struct icpt_conn *c)
{
	if (c->ul != NULL)
		icpt_up_leg_free(c->ul);
	if (c->usock != NULL)
		bufferevent_free(c->usock);
	c->ul = NULL;
	c->usock = NULL;
	icpt_upfd_sync(c);
}

/*
 * What c holds of upstream descriptors (its socket connecting, its leg,
 * its raw passthrough socket, the sockets it asked for), into the
 * intercept's count: called where one comes or goes. A connection freed
 * holds none, so the count cannot drift.
 */
void
icpt_upfd_sync(struct icpt_conn *c)
{
	unsigned held = c->upreqs + (c->usock != NULL) + (c->ul != NULL) + (c->ufd_own ? 1 : 0);

	c->ic->nupfd = c->ic->nupfd + held - c->upfd;
	c->upfd = held;
}

/* Off the idle list. */
void
icpt_up_busy(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	if (!c->idle)
		return;
	TAILQ_REMOVE(&ic->idle, c, idle_link);
	c->idle = false;
	ic->nidle--;
}

/*
 * Between requests, the leg carries nothing: closed, it costs the next
 * request a connection (a resumed session); kept, its memory, both TLS
 * buffers' worth at the next byte. The newest idle legs are kept, as a
 * pool of that size would be, and each stays bound to its own workload
 * connection: nothing one connection's upstream sends can reach another.
 */
void
icpt_up_idle(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	if (c->idle || c->ul == NULL || !c->up_ready || c->h2 != NULL)
		return;
	TAILQ_INSERT_TAIL(&ic->idle, c, idle_link);
	c->idle = true;
	ic->nidle++;
	/* Never c's own leg: its read callback may be running (the cap is at least 1). */
	icpt_up_cap(ic, c);
}

void
icpt_up_drop(struct icpt_conn *c, const char *why)
{
	icpt_up_busy(c);
	icpt_log(c, INTERCEPT_L_DEBUG, "upstream_close", why, 0);
	icpt_up_free(c);
	c->up_ready = c->up_asked = c->up_served = false;
	c->u_eof = false;
	if (c->toup != NULL) /* NULL: given back between requests */
		evbuffer_drain(c->toup, evbuffer_get_length(c->toup));
}

void
icpt_up_forget_replay(struct icpt_conn *c)
{
	if (c->replay_len > 0)
		OPENSSL_cleanse(c->replay, c->replay_len);
	c->replay_len = 0;
}

void
icpt_up_free_replay(struct icpt_conn *c)
{
	icpt_up_forget_replay(c);
	free(c->replay);
	c->replay = NULL;
	c->replay_cap = 0;
}

/* Keep a copy of head (left as it is): in the connection's buffer, grown only when too small. */
int
icpt_up_keep_replay(struct icpt_conn *c, struct evbuffer *head)
{
	size_t n = evbuffer_get_length(head);

	icpt_up_forget_replay(c);
	if (n > c->replay_cap) {
		uint8_t *p = malloc(n);

		if (p == NULL)
			return -1;
		free(c->replay);
		c->replay = p;
		c->replay_cap = n;
	}
	if (evbuffer_copyout(head, c->replay, n) != (ssize_t)n)
		return -1;
	c->replay_len = n;
	return 0;
}

/*
 * The served leg closed (or failed) under a request before a byte of its
 * answer: a kept request goes once more, on a new connection. False when
 * there is none (a body, an unsafe method, a fresh leg, sent twice already).
 */
static bool
icpt_up_replay(struct icpt_conn *c, struct icpt_leg *l)
{
	const char *why;

	if (c->h2 != NULL || c->state != ICPT_S_HTTP || c->resp != ICPT_RESP_HEAD ||
	    c->replay_len == 0 || c->interim != 0 || c->req != ICPT_REQ_DONE ||
	    evbuffer_get_length(icpt_leg_input(l)) > 0)
		return false;
	icpt_up_drop(c, "upstream_closed_under_request");
	if (evbuffer_add(c->toup, c->replay, c->replay_len) != 0) {
		icpt_close(c, "oom");
		return true;
	}
	icpt_up_forget_replay(c); /* sent once more at most */
	if ((why = icpt_up_start(c)) != NULL) {
		icpt_http_error(c, 502, "Bad Gateway", why);
		return true;
	}
	icpt_count(c->ic, INTERCEPT_M_REQUESTS_RETRIED, 1);
	return true;
}

/* ---------------------------------------------------------------- pool */

static void
icpt_pooled_free(struct icpt_pooled *p)
{
	struct intercept *ic = p->ic;

	TAILQ_REMOVE(&ic->pool, p, link);
	ic->npool--;
	icpt_up_leg_free(p->ul); /* its session stays resumable */
	free(p);
}

/* A pooled leg answers nothing: any byte, its close, an error or its idle timeout end it. */
static void
icpt_pooled_read_cb(struct icpt_leg *l, void *arg)
{
	(void)l;
	icpt_pooled_free(arg);
}

static void
icpt_pooled_event_cb(struct icpt_leg *l, short what, void *arg)
{
	(void)l, (void)what;
	icpt_pooled_free(arg);
}

/*
 * The key of c's upstream for the session store and the pool, into key
 * (ICPT_SESS_KEY bytes): its name, address and port. 0, or -1 (no name).
 */
static int
icpt_up_key(const struct icpt_conn *c, char *key)
{
	char a[INET6_ADDRSTRLEN];

	if (c->host[0] == '\0' || inet_ntop(c->family, c->addr, a, sizeof(a)) == NULL)
		return -1;
	snprintf(key, ICPT_SESS_KEY, "%s %s %u", c->host, a, c->port);
	return 0;
}

/* Keep at most cfg.upstream_idle_max legs in all, kept (attached) or pooled; c's own stays. */
static void
icpt_up_cap(struct intercept *ic, struct icpt_conn *c)
{
	while (ic->nidle + ic->npool > ic->cfg.upstream_idle_max) {
		if (ic->npool > 0)
			icpt_pooled_free(TAILQ_FIRST(&ic->pool));
		else if (TAILQ_FIRST(&ic->idle) != c)
			icpt_up_drop(TAILQ_FIRST(&ic->idle), "upstream_idle_max");
		else
			break;
	}
}

/*
 * Whether n more descriptors fit the budget. Past it, pooled legs go
 * first, then the legs kept by connections between requests (longest
 * idle first, never self's): a connection with a request outranks a
 * kept leg. False when nothing is left to give back.
 */
bool
icpt_fd_room(struct intercept *ic, const struct icpt_conn *self, size_t n)
{
	while (ic->nconns + ic->nupfd + ic->npool + n > ic->fd_budget) {
		struct icpt_conn *o = TAILQ_FIRST(&ic->idle);

		if (ic->npool > 0)
			icpt_pooled_free(TAILQ_FIRST(&ic->pool));
		else if (o != NULL && o != self)
			icpt_up_drop(o, "upstream_fd_budget");
		else if (o != NULL && TAILQ_NEXT(o, idle_link) != NULL)
			icpt_up_drop(TAILQ_NEXT(o, idle_link), "upstream_fd_budget");
		else
			return false;
	}
	return true;
}

void
icpt_up_release(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;
	struct icpt_pooled *p;
	SSL *ssl = icpt_leg_ssl(c->ul);
	char key[ICPT_SESS_KEY];
	/*
	 * Only a leg with nothing left to read either way: one whose reading
	 * was off (a drain) may hold an answer c never read, or its end.
	 */
	bool clean = c->idle && ssl != NULL && c->h2 == NULL && !c->want_h2 && !c->u_eof &&
	             icpt_up_key(c, key) == 0 && evbuffer_get_length(icpt_leg_output(c->ul)) == 0;

	if (clean && icpt_leg_unread(c->ul)) {
		icpt_log(c, INTERCEPT_L_DEBUG, "upstream_close", "pool_unread", 0);
		clean = false;
	}
	icpt_up_busy(c);
	if (!clean || ic->cfg.upstream_idle_max == 0 || (p = calloc(1, sizeof(*p))) == NULL) {
		icpt_up_free(c);
		return;
	}
	SSL_set_app_data(ssl, NULL);
	p->ic = ic;
	p->ul = c->ul;
	snprintf(p->key, sizeof(p->key), "%s", key);
	c->ul = NULL;
	icpt_leg_setcb(p->ul, icpt_pooled_read_cb, NULL, icpt_pooled_event_cb, p);
	icpt_leg_enable(p->ul, EV_READ);
	icpt_leg_trim(p->ul); /* a pooled leg waits with no record buffers */
	TAILQ_INSERT_TAIL(&ic->pool, p, link);
	ic->npool++;
	icpt_upfd_sync(c);
	icpt_up_cap(ic, NULL);
}

/*
 * A pooled leg for exactly c's name, address and port (HTTP/1.1, TLS),
 * made c's: connected and verified already. False when there is none.
 * A leg with anything to read (bytes or its end that came since it was
 * pooled, in this loop turn or before its reading was back on) is
 * closed, never taken: c would read them as its answer.
 */
bool
icpt_up_take(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;
	struct icpt_pooled *p, *prev;
	char key[ICPT_SESS_KEY];

	if (!c->terminated || c->want_h2 || c->h2 != NULL || c->ul != NULL || ic->npool == 0 ||
	    icpt_up_key(c, key) != 0)
		return false;
	for (p = TAILQ_LAST(&ic->pool, icpt_pool_head); p != NULL; p = prev) {
		prev = TAILQ_PREV(p, icpt_pool_head, link);
		if (strcmp(p->key, key) != 0)
			continue;
		if (!icpt_leg_unread(p->ul))
			break;
		icpt_log(c, INTERCEPT_L_DEBUG, "upstream_close", "pooled_unread", 0);
		icpt_pooled_free(p);
	}
	if (p == NULL)
		return false;
	TAILQ_REMOVE(&ic->pool, p, link);
	ic->npool--;
	c->ul = p->ul;
	free(p);
	icpt_upfd_sync(c);
	SSL_set_app_data(icpt_leg_ssl(c->ul), c);
	icpt_leg_setcb(c->ul, icpt_up_read_cb, icpt_up_write_cb, icpt_up_event_cb, c);
	c->up_asked = c->up_ready = c->up_served = true;
	icpt_leg_max_read(c->ul, 0); /* it may have been trimmed */
	icpt_leg_timeouts(c->ul, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
	if (c->toup != NULL && evbuffer_get_length(c->toup) > 0)
		evbuffer_add_buffer(icpt_leg_output(c->ul), c->toup);
	icpt_leg_enable(c->ul, EV_READ | EV_WRITE);
	icpt_count(ic, INTERCEPT_M_UPSTREAM_REUSED, 1);
	return true;
}

void
icpt_pool_free(struct intercept *ic)
{
	while (!TAILQ_EMPTY(&ic->pool))
		icpt_pooled_free(TAILQ_FIRST(&ic->pool));
}

void
intercept_pool_flush(struct intercept *ic)
{
	icpt_pool_free(ic);
}

/* Upstream unusable: record why; a waiting request gets 502. */
void
icpt_up_fail(struct icpt_conn *c, const char *why)
{
	icpt_count(c->ic, INTERCEPT_M_UPSTREAM_ERR, 1);
	icpt_log(c, INTERCEPT_L_WARN, "upstream_error", why, 0);
	if (c->state == ICPT_S_SPLICE) {
		icpt_close(c, why);
		return;
	}
	c->up_failed = true;
	c->up_why = why;
	if (c->h2 != NULL) {
		icpt_h2_up_lost(c, why);
		return;
	}
	icpt_up_free(c);
	/* A request already waiting gets 502; nothing of it was sent. */
	if (c->state == ICPT_S_HTTP && c->req != ICPT_REQ_HEAD)
		icpt_http_error(c, 502, "Bad Gateway", why);
	else if (c->state == ICPT_S_TUNNEL)
		icpt_close(c, why);
}

/* Upstream connected (and verified when TLS): flush what was queued. */
static void
icpt_up_ready(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	c->up_ready = true;
	icpt_leg_timeouts(c->ul, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
	if (c->toup != NULL && evbuffer_get_length(c->toup) > 0)
		evbuffer_add_buffer(icpt_leg_output(c->ul), c->toup);
	icpt_leg_enable(c->ul, EV_READ | EV_WRITE);
	if (c->h2 != NULL)
		icpt_h2_up_ready(c);
	else if (c->state == ICPT_S_HTTP)
		icpt_http_client(c);
}

/*
 * Response bytes from upstream. What the relay adds toward the workload
 * (a head, a chunk's size line, its bytes, its CRLF) leaves at the end of
 * the turn, as one TLS record where it fits (icpt_leg.c).
 */
static void
icpt_up_read_cb(struct icpt_leg *l, void *arg)
{
	struct icpt_conn *c = arg;

	(void)l;
	if (c->h2 != NULL) {
		icpt_h2_upstream(c);
		return;
	}
	if (c->state != ICPT_S_HTTP && c->state != ICPT_S_TUNNEL)
		return;
	/* The answer began: the request is no longer sent again. */
	icpt_up_forget_replay(c);
	icpt_http_upstream(c);
}

/* Upstream caught up with the request body. */
static void
icpt_up_write_cb(struct icpt_leg *l, void *arg)
{
	struct icpt_conn *c = arg;

	if (c->h2 != NULL) {
		icpt_h2_pump(c);
		return;
	}
	/* Upstream caught up: read the workload again. */
	(void)l;
	if ((c->state == ICPT_S_HTTP || c->state == ICPT_S_TUNNEL) && !c->c_eof) {
		icpt_leg_enable(c->cl, EV_READ);
		icpt_http_client(c);
	}
}

/* Upstream handshake done, EOF, error or timeout. */
static void
icpt_up_event_cb(struct icpt_leg *l, short what, void *arg)
{
	struct icpt_conn *c = arg;

	if (c->state == ICPT_S_DRAIN)
		return; /* the workload gets what it has; upstream goes at close */
	if (what & BEV_EVENT_CONNECTED) {
		if (c->terminated) {
			SSL *ssl = icpt_leg_ssl(l);

			/* Belt and braces: the handshake already required both. */
			if (ssl == NULL || SSL_get_verify_result(ssl) != X509_V_OK ||
			    SSL_get0_peer_certificate(ssl) == NULL) {
				icpt_up_fail(c, "upstream_verify_failed");
				return;
			}
			icpt_count(c->ic, INTERCEPT_M_UPSTREAM_TLS, 1);
			if (SSL_session_reused(ssl))
				icpt_count(c->ic, INTERCEPT_M_UPSTREAM_RESUMED, 1);
		}
		icpt_up_ready(c);
		return;
	}
	if (!c->up_ready) {
		const char *why = "upstream_connect_failed";

		if (c->terminated && c->ul != NULL) {
			SSL *ssl = icpt_leg_ssl(c->ul);
			long v = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;

			why = v != X509_V_OK ? "upstream_verify_failed" : "upstream_tls_failed";
		}
		if (what & BEV_EVENT_TIMEOUT)
			why = "upstream_timeout";
		icpt_up_fail(c, why);
		return;
	}
	/*
	 * Between requests (nothing asked, nothing unread), the upstream
	 * closing, failing or going quiet ends the leg only: the workload's
	 * connection stays, and its next request reconnects.
	 */
	if (c->h2 == NULL && c->state == ICPT_S_HTTP && c->resp == ICPT_RESP_IDLE &&
	    evbuffer_get_length(icpt_leg_input(l)) == 0) {
		icpt_up_drop(c, (what & BEV_EVENT_EOF)       ? "upstream_closed"
		                : (what & BEV_EVENT_TIMEOUT) ? "upstream_idle_timeout"
		                                             : "upstream_error");
		return;
	}
	if (!(what & BEV_EVENT_TIMEOUT) && icpt_up_replay(c, l))
		return;
	if (what & BEV_EVENT_EOF) {
		c->u_eof = true;
		if (c->h2 != NULL)
			icpt_h2_upstream(c);
		else if (c->state == ICPT_S_HTTP || c->state == ICPT_S_TUNNEL)
			icpt_http_upstream(c);
		return;
	}
	icpt_count(c->ic, INTERCEPT_M_UPSTREAM_ERR, 1);
	if (c->h2 != NULL) {
		/* Streams on it fail; the connection to the workload stays. */
		icpt_h2_up_lost(
		    c, (what & BEV_EVENT_TIMEOUT) ? "upstream_idle_timeout" : "upstream_error");
		return;
	}
	icpt_close(c, (what & BEV_EVENT_TIMEOUT) ? "upstream_idle_timeout" : "upstream_error");
}

/* Slot of a session key (FNV-1a). */
static size_t
icpt_sess_slot(const char *key)
{
	uint32_t h = 2166136261u;

	for (const char *p = key; *p != '\0'; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	return h % ICPT_SESS_SLOTS;
}

/*
 * Offer the session last verified for exactly this name, address and
 * port: resumption skips the chain check, so the key must pin all three.
 */
static void
icpt_sess_resume(struct icpt_conn *c, SSL *ssl)
{
	struct icpt_sess *e;
	char key[ICPT_SESS_KEY];

	if (icpt_up_key(c, key) != 0)
		return;
	SSL_set_app_data(ssl, c);
	e = &c->ic->sess[icpt_sess_slot(key)];
	if (e->sess != NULL && strcmp(e->key, key) == 0 && SSL_SESSION_is_resumable(e->sess))
		(void)SSL_set_session(ssl, e->sess);
}

/* OpenSSL hands us a new upstream session (after a verified handshake). */
int
icpt_sess_new_cb(SSL *ssl, SSL_SESSION *sess)
{
	struct icpt_conn *c = SSL_get_app_data(ssl);
	struct icpt_sess *e;
	char key[ICPT_SESS_KEY];

	if (c == NULL || icpt_up_key(c, key) != 0 || SSL_get_verify_result(ssl) != X509_V_OK)
		return 0;
	e = &c->ic->sess[icpt_sess_slot(key)];
	SSL_SESSION_free(e->sess);
	e->sess = sess;
	snprintf(e->key, sizeof(e->key), "%s", key);
	return 1; /* we keep the reference */
}

/*
 * The upstream leg of a connected c->usock (taken), with TLS over ssl
 * (taken) unless NULL: native on the socket, or a filter over the
 * bufferevent when that is itself TLS (to an https:// proxy) or already
 * holds bytes of the server (after a proxy's answer). NULL on failure.
 */
static struct icpt_leg *
icpt_up_leg(struct icpt_conn *c, SSL *ssl)
{
	struct intercept *ic = c->ic;
	struct bufferevent *u = c->usock, *f;
	int fd;

	c->usock = NULL;
	if (bufferevent_openssl_get_ssl(u) == NULL &&
	    evbuffer_get_length(bufferevent_get_input(u)) == 0 &&
	    evbuffer_get_length(bufferevent_get_output(u)) == 0) {
		fd = bufferevent_getfd(u);
		bufferevent_setfd(u, -1); /* the leg takes the socket */
		bufferevent_free(u);
		return icpt_leg_new(
		    ic->base, fd, ssl, ssl != NULL ? ICPT_LEG_CONNECT : ICPT_LEG_PLAIN);
	}
	if (ssl == NULL)
		return icpt_leg_wrap(u);
	/* The filter keeps the deadlines from now on; the socket under it has none. */
	bufferevent_set_timeouts(u, NULL, NULL);
	f = bufferevent_openssl_filter_new(ic->base, u, ssl, BUFFEREVENT_SSL_CONNECTING,
	    BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (f == NULL) {
		SSL_free(ssl);
		bufferevent_free(u);
		return NULL;
	}
	/* A server that closes without close_notify still ends a close-delimited body. */
	bufferevent_openssl_set_allow_dirty_shutdown(f, 1);
	/* The same back-pressure toward a slow upstream (request bodies). */
	bufferevent_setwatermark(u, EV_WRITE, 0, ic->cfg.max_buffer);
	return icpt_leg_wrap(f);
}

/* The marked socket connected: splice, plain relay, or start upstream TLS. */
static void
icpt_usock_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct icpt_conn *c = arg;
	struct intercept *ic = c->ic;

	if (c->state == ICPT_S_DRAIN)
		return;
	if (!(what & BEV_EVENT_CONNECTED)) {
		icpt_up_fail(
		    c, (what & BEV_EVENT_TIMEOUT) ? "upstream_timeout" : "upstream_connect_failed");
		return;
	}
	if (c->state == ICPT_S_SPLICE) {
		icpt_splice_start(c);
		return;
	}
	if (!c->terminated) {
		if ((c->ul = icpt_up_leg(c, NULL)) == NULL) {
			icpt_up_fail(c, "oom");
			return;
		}
		icpt_leg_setcb(c->ul, icpt_up_read_cb, icpt_up_write_cb, icpt_up_event_cb, c);
		icpt_up_ready(c);
		return;
	}
	SSL *ssl = SSL_new(ic->up_ctx);
	/*
	 * The name is checked against DNS subjectAltNames only, whole labels
	 * only: never the subject CN (a certificate without a DNS SAN, or with
	 * an IP SAN only, is not for this host), never a partial wildcard
	 * ("bad*.example"). The secret goes to this host or nowhere.
	 */
	if (ssl != NULL)
		SSL_set_hostflags(ssl,
		    X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
	if (ssl == NULL || SSL_set_tlsext_host_name(ssl, c->host) != 1 ||
	    SSL_set1_host(ssl, c->host) != 1) {
		SSL_free(ssl);
		icpt_up_fail(c, "upstream_tls_setup");
		return;
	}
	if (c->want_h2 &&
	    SSL_set_alpn_protos(ssl, (const unsigned char *)"\x02h2\x08http/1.1", 12) != 0) {
		SSL_free(ssl);
		icpt_up_fail(c, "upstream_tls_setup");
		return;
	}
	icpt_sess_resume(c, ssl);
	if ((c->ul = icpt_up_leg(c, ssl)) == NULL) {
		icpt_up_fail(c, "upstream_tls_setup");
		return;
	}
	icpt_leg_setcb(c->ul, icpt_up_read_cb, icpt_up_write_cb, icpt_up_event_cb, c);
	icpt_leg_timeouts(c->ul, ic->cfg.connect_timeout_s, ic->cfg.connect_timeout_s);
	icpt_leg_enable(c->ul, EV_READ | EV_WRITE);
}

/*
 * A requested socket arrived: false if the connection still wants it;
 * true when the connection closed meanwhile (the socket is closed, and the
 * connection freed once no other request is outstanding).
 */
bool
icpt_sock_orphaned(struct icpt_conn *c, int fd)
{
	c->sockreqs--;
	if (c->state != ICPT_S_CLOSED)
		return false;
	if (fd >= 0)
		close(fd);
	icpt_upfd_sync(c);
	if (c->sockreqs == 0)
		icpt_reap(c);
	return true;
}

/* A marked socket from the worker: connect it to the original destination. */
static void
icpt_sock_take(int fd, struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	if (c->state == ICPT_S_DRAIN) {
		/* The workload already got its answer: no upstream connection. */
		if (fd >= 0)
			close(fd);
		return;
	}
	if (fd < 0) {
		icpt_up_fail(c, "upstream_socket_unavailable");
		return;
	}
	c->usock = bufferevent_socket_new(ic->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (c->usock == NULL) {
		close(fd);
		icpt_up_fail(c, "oom");
		return;
	}
	icpt_timeouts(c->usock, ic->cfg.connect_timeout_s, ic->cfg.connect_timeout_s);
	if (icpt_dial(c, NULL, icpt_usock_event_cb) != 0)
		icpt_up_fail(c, "upstream_connect_failed");
}

/* A requested socket arrived for c: take unless c closed meanwhile, then count. */
void
icpt_sock_arrive(struct icpt_conn *c, int fd, void (*take)(int, struct icpt_conn *))
{
	c->upreqs--;
	if (icpt_sock_orphaned(c, fd))
		return;
	take(fd, c);
	icpt_upfd_sync(c);
}

static void
icpt_sock_cb(int fd, int err, void *arg)
{
	(void)err;
	icpt_sock_arrive(arg, fd, icpt_sock_take);
}

/* Ask the worker for a marked socket of the destination family. */
const char *
icpt_up_start(struct icpt_conn *c)
{
	int family = icpt_dial_family(c);

	if (family == 0)
		return "upstream_socket_unavailable";
	if (icpt_up_take(c))
		return NULL;
	if (!icpt_fd_room(c->ic, c, 1)) {
		icpt_count(c->ic, INTERCEPT_M_LIMITED, 1);
		return "upstream_fd_budget";
	}
	c->up_asked = true;
	c->sockreqs++;
	c->upreqs++;
	if (c->ic->ops->get_upstream_socket(c->ic->arg, family, icpt_sock_cb, c) != 0) {
		c->sockreqs--;
		c->upreqs--;
		return "upstream_socket_unavailable";
	}
	icpt_upfd_sync(c);
	return NULL;
}

/* Bytes for upstream: queued until it is connected and verified. */
void
icpt_to_upstream(struct icpt_conn *c, struct evbuffer *src, size_t n)
{
	struct evbuffer *dst = c->up_ready ? icpt_leg_output(c->ul) : c->toup;

	evbuffer_remove_buffer(src, dst, n);
}

/* Bytes queued toward upstream, connected or not. */
size_t
icpt_up_pending(struct icpt_conn *c)
{
	size_t n = c->toup != NULL ? evbuffer_get_length(c->toup) : 0;

	if (c->ul != NULL)
		n += evbuffer_get_length(icpt_leg_output(c->ul));
	return n;
}
