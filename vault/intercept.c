/*
 * intercept: transparent TLS and plain-HTTP interception (worker process).
 *
 * nft redirects the workload's TCP 443/80 to our loopback listeners. Each
 * connection's original destination is read from conntrack; one aimed at
 * egressd itself is closed (never an open proxy). TLS: the ClientHello is
 * peeked, its SNI must be allowed and the original destination learned for
 * it (or covered by an IP rule); hosts no binding could apply to are
 * spliced untouched to the original destination, the others are
 * terminated with a leaf from the sandbox CA, re-encrypted to a verified
 * upstream, parsed strictly per request, credentialed by exactly one
 * binding, and every byte back to the workload is redacted. Plain HTTP
 * goes through the same parser. This module must never forward a request
 * to an unverified upstream, never hand a secret to the log hook, and
 * never call egressd/ code (the worker gives it an ops table).
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

/* linux/netfilter_ipv4.h and linux/netfilter_ipv6/ip6_tables.h. */
#define ICPT_SO_ORIGINAL_DST 80
#define ICPT_IP6T_SO_ORIGINAL_DST 80

#define ICPT_DEFAULT_IDLE_S 120
#define ICPT_DRAIN_POLL_MS 5
#define ICPT_DRAIN_MAX_S 5
#define ICPT_MAX_METHOD 32
#define ICPT_SESS_SLOTS 256    /* upstream TLS sessions kept for resumption */
#define ICPT_SESS_KEY 320      /* "host addr port" */
#define ICPT_LOCAL_TTL_MS 1000 /* how long the list of local addresses is reused */
#define ICPT_MAX_LOCAL 64      /* local addresses checked against the original destination */
#define ICPT_HEAD_SLACK 512    /* room for the rewritten head beyond the workload's */

/* Connection states (conn_set_state checks the transitions). */
enum icpt_state {
	ICPT_S_HELLO,  /* TLS: reading the ClientHello */
	ICPT_S_SPLICE, /* passthrough: waiting for upstream, then raw bytes both ways */
	ICPT_S_HTTP,   /* terminated TLS or plain HTTP: request/response relay */
	ICPT_S_TUNNEL, /* after 101: raw both ways, upstream->workload redacted */
	ICPT_S_DRAIN,  /* last bytes toward the workload, then close */
	ICPT_S_CLOSED, /* freed on the next loop turn */
};

/* Request side of the relay. */
enum icpt_req {
	ICPT_REQ_HEAD, /* waiting for a request head */
	ICPT_REQ_BODY, /* streaming the request body upstream */
	ICPT_REQ_DONE, /* request sent; the next is read after the response */
};

/* Response side of the relay. */
enum icpt_resp {
	ICPT_RESP_IDLE, /* no request outstanding */
	ICPT_RESP_HEAD, /* waiting for a (possibly interim) response head */
	ICPT_RESP_BODY, /* streaming the response body to the workload */
};

struct intercept {
	struct event_base *base;
	const struct intercept_ops *ops;
	void *arg;
	struct intercept_config cfg;
	char upstream_ca[PATH_MAX];
	struct evconnlistener *ls[4];
	size_t nls;
	SSL_CTX *srv_ctx;
	SSL_CTX *up_ctx;
	size_t nconns;
	uint64_t next_id;
	struct icpt_conn *conns;
	struct icpt_conn *dead;            /* closed, freed on the next loop turn */
	uint8_t local[ICPT_MAX_LOCAL][16]; /* the sidecar's own addresses, cached */
	int local_fam[ICPT_MAX_LOCAL];
	size_t nlocal;
	struct timespec local_at; /* when they were read; zero: never */
	struct icpt_sess {
		char key[ICPT_SESS_KEY];
		SSL_SESSION *sess;
	} sess[ICPT_SESS_SLOTS]; /* by exact upstream (name, address, port) */
	struct httpwire_header hdrs[HTTPWIRE_MAX_HEADERS];
	uint8_t scratch[HTTPWIRE_MAX_HEAD_BYTES + ICPT_HEAD_SLACK];
};

struct icpt_conn {
	struct intercept *ic;
	struct icpt_conn *prev, *next;
	uint64_t id;
	enum icpt_state state;
	int sockreqs;       /* upstream socket requests in flight */
	bool tls;           /* came in on the TLS listener */
	bool terminated;    /* TLS terminated here */
	bool up_asked;      /* upstream socket requested */
	bool up_ready;      /* upstream connected (and verified) */
	bool up_failed;     /* upstream connect or verification failed */
	const char *up_why; /* reason of up_failed */
	bool c_eof, u_eof;
	bool shut_sent;
	bool oom; /* the redactor failed: the connection must end */

	struct sockaddr_storage dst;
	socklen_t dstlen;
	int family;
	uint8_t addr[16];
	uint16_t port;
	char host[POLICY_NAME_MAX + 1]; /* canonical SNI, or the first Host on plain */
	char sess_key[ICPT_SESS_KEY];   /* upstream session cache key */

	struct tlspeek_hello *hello; /* HELLO state only */
	struct bufferevent *craw;    /* workload socket */
	struct bufferevent *cbev;    /* workload application bytes (craw or its TLS filter) */
	struct bufferevent *usock;   /* upstream socket */
	struct bufferevent *ubev;    /* upstream application bytes */
	struct evbuffer *toup;       /* bytes for upstream while it is not ready */
	struct evbuffer *tmp;        /* redactor output */

	enum icpt_req req;
	enum icpt_resp resp;
	size_t scanned; /* head bytes already searched for a line end */
	struct httpwire_body reqbody, respbody;
	bool req_is_head, req_upgrade, req_keep, resp_keep, rechunk;
	bool credentialed;
	char method[ICPT_MAX_METHOD + 1];
	char binding[BINDING_MAX_NAME + 1];
	int status;
	uint64_t resp_bytes;
	int interim;
	uint64_t head_matches;   /* masked in response heads of this request */
	struct vault_snap *snap; /* of the current request */
	struct redact_stream *rs;

	struct event *ev_free;
	struct event *ev_drain;
	int drain_polls;
};

static void icpt_close(struct icpt_conn *c, const char *why);
static void icpt_http_client(struct icpt_conn *c);
static void icpt_http_upstream(struct icpt_conn *c);

/* ---------------------------------------------------------------- pure helpers */

/* Loopback or unspecified, IPv4-mapped forms included. */
static bool
icpt_is_loopback(int family, const uint8_t *a)
{
	static const uint8_t v6lo[16] = {[15] = 1};
	static const uint8_t zero[16];

	if (family == AF_INET)
		return a[0] == 127 || memcmp(a, zero, 4) == 0;
	if (memcmp(a, v6lo, 16) == 0 || memcmp(a, zero, 16) == 0)
		return true;
	/* IPv4-mapped loopback or unspecified. */
	if (memcmp(a, zero, 10) == 0 && a[10] == 0xff && a[11] == 0xff)
		return a[12] == 127 || memcmp(a + 12, zero, 4) == 0;
	return false;
}

/* Why the original destination is egressd itself, or NULL. */
const char *
intercept_self_reason(int family, const uint8_t *addr, uint16_t port, uint16_t tls_port,
    uint16_t plain_port, const uint8_t (*local)[16], const int *local_fam, size_t nlocal)
{
	if (icpt_is_loopback(family, addr))
		return "orig_dst_loopback";
	for (size_t i = 0; i < nlocal; i++) {
		if (local_fam[i] == family &&
		    memcmp(local[i], addr, family == AF_INET ? 4 : 16) == 0)
			return "orig_dst_local";
	}
	/* A redirect loop through a listener port is refused whatever the address. */
	if (port == tls_port || port == plain_port)
		return "orig_dst_listener";
	return NULL;
}

/* Canonical host of a Host value; ":port" must name the original port. */
int
intercept_host_canon(const uint8_t *val, size_t len, uint16_t dport, char *out)
{
	size_t hlen = len, outlen;

	if (len == 0 || val[0] == '[')
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (val[i] == ':') {
			unsigned long p = 0;

			if (i + 1 == len || len - i - 1 > 5)
				return -1;
			for (size_t j = i + 1; j < len; j++) {
				if (val[j] < '0' || val[j] > '9')
					return -1;
				p = p * 10 + (unsigned long)(val[j] - '0');
			}
			if (p != dport)
				return -1;
			hlen = i;
			break;
		}
	}
	if (policy_name_canon(val, hlen, 0, out, &outlen) != POLICY_NAME_OK)
		return -1;
	/* An IPv4 literal has no name to check the policy or a binding with. */
	return 0;
}

/* Status code for a refused request head. */
int
intercept_request_error_status(enum httpwire_status st, enum httpwire_error e)
{
	if (st == HTTPWIRE_TOO_LARGE || e == HTTPWIRE_E_HEAD_TOO_LARGE ||
	    e == HTTPWIRE_E_TOO_MANY_FIELDS)
		return 431;
	switch (e) {
	case HTTPWIRE_E_VERSION:
		return 505;
	case HTTPWIRE_E_TRANSFER_ENCODING:
		return 501;
	case HTTPWIRE_E_EXPECT:
		return 417;
	case HTTPWIRE_E_CONNECT:
		return 405;
	default:
		return 400;
	}
}

/* Rewrite the request head for upstream (see intercept_internal.h). */
int
intercept_request_head(const struct httpwire_request *req, struct httpwire_header *hdrs,
    const struct vault_snap *snap, size_t idx, bool inject, uint8_t *scratch, size_t cap,
    struct evbuffer *out)
{
	struct httpwire_header extra[1];
	size_t nextra = 0, written;

	if (inject) {
		for (size_t i = 0; i < req->nheaders; i++) {
			struct httpwire_view n = hdrs[i].name;

			if (n.ptr == NULL)
				continue;
			/* The workload must not override or duplicate the credential. */
			if (vault_snap_injects_header(snap, idx, (const char *)n.ptr, n.len) ||
			    httpwire_name_eq(n, "accept-encoding") ||
			    httpwire_name_eq(n, "range") || httpwire_name_eq(n, "if-range"))
				hdrs[i].name.ptr = NULL;
		}
		/* Ask for a body the redactor can read. */
		extra[0].name = (struct httpwire_view){(const uint8_t *)"Accept-Encoding", 15};
		extra[0].value = (struct httpwire_view){(const uint8_t *)"identity", 8};
		nextra = 1;
	}
	if (httpwire_head_write(
	        scratch, cap, req->start_line, hdrs, req->nheaders, extra, nextra, &written) != 0 ||
	    written < 2)
		return -1;
	if (!inject)
		return evbuffer_add(out, scratch, written);
	/* Binding headers go before the blank line. */
	if (evbuffer_add(out, scratch, written - 2) != 0 ||
	    vault_snap_inject(snap, idx, out) != 0 || evbuffer_add(out, "\r\n", 2) != 0)
		return -1;
	return 0;
}

/* ---------------------------------------------------------------- logging */

/* Add to a counter through the ops hook. */
static void
icpt_count(struct intercept *ic, enum intercept_metric m, uint64_t n)
{
	ic->ops->count(ic->arg, m, n);
}

/* One log record about connection c through the ops hook. */
static void
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
static void
icpt_reject(struct icpt_conn *c, const char *reason)
{
	icpt_count(c->ic, INTERCEPT_M_REJECTED, 1);
	icpt_log(c, INTERCEPT_L_WARN, "conn_reject", reason, 0);
}

/* ---------------------------------------------------------------- lifecycle */

/* The only place the state changes; an illegal transition is refused. */
static bool
icpt_set_state(struct icpt_conn *c, enum icpt_state s)
{
	bool ok;

	switch (s) {
	case ICPT_S_SPLICE:
	case ICPT_S_HTTP:
		ok = c->state == ICPT_S_HELLO;
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

/* Next loop turn after close: free, unless a socket request is still out. */
static void
icpt_free_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_conn *c = arg;

	if (c->sockreqs > 0)
		return; /* the socket callback frees it */
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		c->ic->dead = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	event_free(c->ev_free);
	free(c);
}

/* Unlink c and free every resource it holds (not c itself). */
static void
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
	if (c->ubev != NULL)
		bufferevent_free(c->ubev);
	else if (c->usock != NULL)
		bufferevent_free(c->usock);
	if (c->cbev != NULL && c->cbev != c->craw)
		bufferevent_free(c->cbev);
	else if (c->craw != NULL)
		bufferevent_free(c->craw);
	c->ubev = c->usock = c->cbev = c->craw = NULL;
	if (c->ev_drain != NULL)
		event_free(c->ev_drain);
	c->ev_drain = NULL;
	if (c->toup != NULL)
		evbuffer_free(c->toup);
	if (c->tmp != NULL)
		evbuffer_free(c->tmp);
	c->toup = c->tmp = NULL;
	redact_stream_free(c->rs);
	c->rs = NULL;
	vault_snap_unref(c->snap);
	c->snap = NULL;
	free(c->hello);
	c->hello = NULL;
}

/* The one way a connection ends: release everything, free on the next turn. */
static void
icpt_close(struct icpt_conn *c, const char *why)
{
	if (c->state == ICPT_S_CLOSED)
		return;
	icpt_set_state(c, ICPT_S_CLOSED);
	if (why != NULL)
		icpt_log(c, INTERCEPT_L_DEBUG, "conn_close", why, 0);
	icpt_release(c);
	c->next = c->ic->dead;
	if (c->next != NULL)
		c->next->prev = c;
	c->ic->dead = c;
	event_active(c->ev_free, EV_TIMEOUT, 0);
}

/* Whether every byte for the workload left, TLS records included. */
static bool
icpt_client_flushed(struct icpt_conn *c)
{
	if (c->cbev != NULL && evbuffer_get_length(bufferevent_get_output(c->cbev)) > 0)
		return false;
	return c->craw == NULL || evbuffer_get_length(bufferevent_get_output(c->craw)) == 0;
}

/* Polls until the workload side is flushed (bounded), then closes. */
static void
icpt_drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_conn *c = arg;
	struct timeval tv = {0, ICPT_DRAIN_POLL_MS * 1000};

	if (c->state != ICPT_S_DRAIN)
		return;
	if (c->cbev != NULL && c->cbev != c->craw &&
	    evbuffer_get_length(bufferevent_get_output(c->cbev)) == 0 && !c->shut_sent) {
		SSL *ssl = bufferevent_openssl_get_ssl(c->cbev);

		/* close_notify, so that a close-delimited body is not read as truncated. */
		c->shut_sent = true;
		if (ssl != NULL && SSL_is_init_finished(ssl))
			(void)SSL_shutdown(ssl);
	}
	if (icpt_client_flushed(c) ||
	    ++c->drain_polls > ICPT_DRAIN_MAX_S * 1000 / ICPT_DRAIN_POLL_MS) {
		icpt_close(c, NULL);
		return;
	}
	event_add(c->ev_drain, &tv);
}

/* Stop reading, send what is queued to the workload, then close. */
static void
icpt_drain(struct icpt_conn *c)
{
	if (c->state == ICPT_S_CLOSED || c->state == ICPT_S_DRAIN)
		return;
	icpt_set_state(c, ICPT_S_DRAIN);
	if (c->cbev != NULL)
		bufferevent_disable(c->cbev, EV_READ);
	if (c->ubev != NULL)
		bufferevent_disable(c->ubev, EV_READ);
	else if (c->usock != NULL)
		bufferevent_disable(c->usock, EV_READ);
	c->ev_drain = event_new(c->ic->base, -1, 0, icpt_drain_cb, c);
	if (c->ev_drain == NULL) {
		icpt_close(c, "oom");
		return;
	}
	event_active(c->ev_drain, EV_TIMEOUT, 0);
}

/* Refuse a TLS connection before any handshake: one fatal alert record. */
static void
icpt_alert(struct icpt_conn *c, enum tlspeek_alert a)
{
	uint8_t rec[TLSPEEK_ALERT_LEN];
	int n = tlspeek_alert_write(rec, sizeof(rec), c->hello ? c->hello->record_version : 0, a);

	if (n > 0)
		bufferevent_write(c->craw, rec, (size_t)n);
	icpt_drain(c);
}

/* A short response of ours to the workload; the connection then closes. */
static void
icpt_http_error(struct icpt_conn *c, int status, const char *text, const char *reason)
{
	char buf[512];
	int n;

	if (c->state == ICPT_S_CLOSED || c->cbev == NULL)
		return;
	n = snprintf(buf, sizeof(buf),
	    "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
	    "Connection: close\r\n\r\n%s\n",
	    status, text, strlen(text) + 1, text);
	if (n > 0 && (size_t)n < sizeof(buf))
		bufferevent_write(c->cbev, buf, (size_t)n);
	icpt_log(c, INTERCEPT_L_WARN, "http_reject", reason, status);
	icpt_drain(c);
}

/* Read and write timeouts of a leg in seconds; 0 means none. */
static void
icpt_timeouts(struct bufferevent *bev, unsigned rd_s, unsigned wr_s)
{
	struct timeval r = {(time_t)rd_s, 0}, w = {(time_t)wr_s, 0};

	bufferevent_set_timeouts(bev, rd_s ? &r : NULL, wr_s ? &w : NULL);
}

/* ---------------------------------------------------------------- splice */

/* The other leg of a splice. */
static struct bufferevent *
icpt_peer(struct icpt_conn *c, struct bufferevent *bev)
{
	return bev == c->cbev ? c->ubev : c->cbev;
}

/* Forward half-closes once drained; close when both sides are done. */
static void
icpt_splice_shut(struct icpt_conn *c)
{
	if (c->ubev == NULL) {
		icpt_close(c, "client_closed_before_upstream");
		return;
	}
	/* Half-close: pass on an EOF once the bytes before it are out. */
	if (c->c_eof && c->ubev != NULL &&
	    evbuffer_get_length(bufferevent_get_output(c->ubev)) == 0)
		shutdown(bufferevent_getfd(c->ubev), SHUT_WR);
	if (c->u_eof && evbuffer_get_length(bufferevent_get_output(c->cbev)) == 0)
		shutdown(bufferevent_getfd(c->cbev), SHUT_WR);
	if (c->c_eof && c->u_eof && evbuffer_get_length(bufferevent_get_output(c->ubev)) == 0 &&
	    evbuffer_get_length(bufferevent_get_output(c->cbev)) == 0)
		icpt_close(c, "splice_done");
}

/* Passthrough: move bytes to the other leg as they come. */
static void
icpt_splice_read_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_conn *c = arg;
	struct bufferevent *peer = icpt_peer(c, bev);
	struct evbuffer *out = bufferevent_get_output(peer);

	evbuffer_add_buffer(out, bufferevent_get_input(bev));
	/* Backpressure: stop reading this side while the other is behind. */
	if (evbuffer_get_length(out) >= c->ic->cfg.max_buffer)
		bufferevent_disable(bev, EV_READ);
}

/* A leg drained: resume reading the other one. */
static void
icpt_splice_write_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_conn *c = arg;
	struct bufferevent *peer = icpt_peer(c, bev);
	bool peer_eof = bev == c->cbev ? c->u_eof : c->c_eof;

	if (!peer_eof)
		bufferevent_enable(peer, EV_READ);
	icpt_splice_shut(c);
}

/* EOF half-closes; errors and idle timeouts end the connection. */
static void
icpt_splice_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct icpt_conn *c = arg;

	if (what & BEV_EVENT_EOF) {
		if (bev == c->cbev)
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
static void
icpt_splice_start(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	c->ubev = c->usock;
	/* Replay the ClientHello (and anything after it) to the real server. */
	evbuffer_add_buffer(bufferevent_get_output(c->ubev), bufferevent_get_input(c->cbev));
	bufferevent_setcb(
	    c->cbev, icpt_splice_read_cb, icpt_splice_write_cb, icpt_splice_event_cb, c);
	bufferevent_setcb(
	    c->ubev, icpt_splice_read_cb, icpt_splice_write_cb, icpt_splice_event_cb, c);
	icpt_timeouts(c->cbev, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
	icpt_timeouts(c->ubev, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
	bufferevent_enable(c->cbev, EV_READ | EV_WRITE);
	bufferevent_enable(c->ubev, EV_READ | EV_WRITE);
	icpt_count(ic, INTERCEPT_M_PASSTHROUGH, 1);
}

/* ---------------------------------------------------------------- upstream */

/* Upstream unusable: record why; a waiting request gets 502. */
static void
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
	if (c->ubev != NULL) {
		bufferevent_free(c->ubev);
		c->ubev = c->usock = NULL;
	} else if (c->usock != NULL) {
		bufferevent_free(c->usock);
		c->usock = NULL;
	}
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
	icpt_timeouts(c->ubev, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
	if (evbuffer_get_length(c->toup) > 0)
		evbuffer_add_buffer(bufferevent_get_output(c->ubev), c->toup);
	bufferevent_enable(c->ubev, EV_READ | EV_WRITE);
	if (c->state == ICPT_S_HTTP)
		icpt_http_client(c);
}

/* Response bytes from upstream. */
static void
icpt_up_read_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_conn *c = arg;

	if (c->state == ICPT_S_HTTP || c->state == ICPT_S_TUNNEL)
		icpt_http_upstream(c);
}

/* Upstream caught up with the request body. */
static void
icpt_up_write_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_conn *c = arg;

	/* Upstream caught up: read the workload again. */
	if ((c->state == ICPT_S_HTTP || c->state == ICPT_S_TUNNEL) && !c->c_eof) {
		bufferevent_enable(c->cbev, EV_READ);
		icpt_http_client(c);
	}
}

/* Upstream handshake done, EOF, error or timeout. */
static void
icpt_up_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct icpt_conn *c = arg;

	if (c->state == ICPT_S_DRAIN)
		return; /* the workload gets what it has; upstream goes at close */
	if (what & BEV_EVENT_CONNECTED) {
		if (c->terminated) {
			SSL *ssl = bufferevent_openssl_get_ssl(bev);

			/* Belt and braces: the handshake already required both. */
			if (ssl == NULL || SSL_get_verify_result(ssl) != X509_V_OK ||
			    SSL_get0_peer_certificate(ssl) == NULL) {
				icpt_up_fail(c, "upstream_verify_failed");
				return;
			}
		}
		icpt_up_ready(c);
		return;
	}
	if (!c->up_ready) {
		const char *why = "upstream_connect_failed";

		if (c->terminated && c->ubev != NULL) {
			SSL *ssl = bufferevent_openssl_get_ssl(c->ubev);
			long v = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;

			why = v != X509_V_OK ? "upstream_verify_failed" : "upstream_tls_failed";
		}
		if (what & BEV_EVENT_TIMEOUT)
			why = "upstream_timeout";
		icpt_up_fail(c, why);
		return;
	}
	if (what & BEV_EVENT_EOF) {
		c->u_eof = true;
		if (c->state == ICPT_S_HTTP || c->state == ICPT_S_TUNNEL)
			icpt_http_upstream(c);
		return;
	}
	icpt_count(c->ic, INTERCEPT_M_UPSTREAM_ERR, 1);
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
	char a[INET6_ADDRSTRLEN];
	struct icpt_sess *e;

	if (inet_ntop(c->family, c->addr, a, sizeof(a)) == NULL)
		return;
	snprintf(c->sess_key, sizeof(c->sess_key), "%s %s %u", c->host, a, c->port);
	SSL_set_app_data(ssl, c);
	e = &c->ic->sess[icpt_sess_slot(c->sess_key)];
	if (e->sess != NULL && strcmp(e->key, c->sess_key) == 0 &&
	    SSL_SESSION_is_resumable(e->sess))
		(void)SSL_set_session(ssl, e->sess);
}

/* OpenSSL hands us a new upstream session (after a verified handshake). */
static int
icpt_sess_new_cb(SSL *ssl, SSL_SESSION *sess)
{
	struct icpt_conn *c = SSL_get_app_data(ssl);
	struct icpt_sess *e;

	if (c == NULL || c->sess_key[0] == '\0' || SSL_get_verify_result(ssl) != X509_V_OK)
		return 0;
	e = &c->ic->sess[icpt_sess_slot(c->sess_key)];
	SSL_SESSION_free(e->sess);
	e->sess = sess;
	snprintf(e->key, sizeof(e->key), "%s", c->sess_key);
	return 1; /* we keep the reference */
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
		c->ubev = c->usock;
		bufferevent_setcb(c->ubev, icpt_up_read_cb, icpt_up_write_cb, icpt_up_event_cb, c);
		icpt_up_ready(c);
		return;
	}
	SSL *ssl = SSL_new(ic->up_ctx);
	if (ssl == NULL || SSL_set_tlsext_host_name(ssl, c->host) != 1 ||
	    SSL_set1_host(ssl, c->host) != 1) {
		SSL_free(ssl);
		icpt_up_fail(c, "upstream_tls_setup");
		return;
	}
	icpt_sess_resume(c, ssl);
	c->ubev = bufferevent_openssl_filter_new(ic->base, c->usock, ssl,
	    BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (c->ubev == NULL) {
		SSL_free(ssl);
		icpt_up_fail(c, "upstream_tls_setup");
		return;
	}
	/* A server that closes without close_notify still ends a close-delimited body. */
	bufferevent_openssl_set_allow_dirty_shutdown(c->ubev, 1);
	bufferevent_setcb(c->ubev, icpt_up_read_cb, icpt_up_write_cb, icpt_up_event_cb, c);
	icpt_timeouts(c->ubev, ic->cfg.connect_timeout_s, ic->cfg.connect_timeout_s);
	bufferevent_enable(c->ubev, EV_READ | EV_WRITE);
}

/* A marked socket from the worker: connect it to the original destination. */
static void
icpt_sock_cb(int fd, int err, void *arg)
{
	struct icpt_conn *c = arg;
	struct intercept *ic = c->ic;

	c->sockreqs--;
	if (c->state == ICPT_S_CLOSED) {
		if (fd >= 0)
			close(fd);
		if (c->sockreqs == 0)
			event_active(c->ev_free, EV_TIMEOUT, 0);
		return;
	}
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
	bufferevent_setcb(c->usock, NULL, NULL, icpt_usock_event_cb, c);
	icpt_timeouts(c->usock, ic->cfg.connect_timeout_s, ic->cfg.connect_timeout_s);
	if (bufferevent_socket_connect(c->usock, (struct sockaddr *)&c->dst, (int)c->dstlen) != 0)
		icpt_up_fail(c, "upstream_connect_failed");
}

/* Ask the worker for a marked socket of the destination family. */
static int
icpt_up_start(struct icpt_conn *c)
{
	c->up_asked = true;
	c->sockreqs++;
	if (c->ic->ops->get_upstream_socket(c->ic->arg, c->family, icpt_sock_cb, c) != 0) {
		c->sockreqs--;
		return -1;
	}
	return 0;
}

/* Bytes for upstream: queued until it is connected and verified. */
static void
icpt_to_upstream(struct icpt_conn *c, struct evbuffer *src, size_t n)
{
	struct evbuffer *dst = c->up_ready ? bufferevent_get_output(c->ubev) : c->toup;

	evbuffer_remove_buffer(src, dst, n);
}

/* Bytes queued toward upstream, connected or not. */
static size_t
icpt_up_pending(struct icpt_conn *c)
{
	size_t n = evbuffer_get_length(c->toup);

	if (c->ubev != NULL)
		n += evbuffer_get_length(bufferevent_get_output(c->ubev));
	return n;
}

/* ---------------------------------------------------------------- HTTP relay */

/* Workload-leg timeouts for the request state. */
static void
icpt_client_timeouts(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	/* A silent workload waiting for a long response (SSE) is not idle. */
	if (c->req == ICPT_REQ_HEAD)
		icpt_timeouts(c->cbev, ic->cfg.head_timeout_s, ic->cfg.idle_timeout_s);
	else if (c->req == ICPT_REQ_BODY)
		icpt_timeouts(c->cbev, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
	else
		icpt_timeouts(c->cbev, 0, ic->cfg.idle_timeout_s);
}

/* Returns false when the request was refused (the connection is draining). */
static bool
icpt_http_request(struct icpt_conn *c, const struct httpwire_request *req, size_t headlen)
{
	struct intercept *ic = c->ic;
	char host[POLICY_NAME_MAX + 1];
	char path[HTTPWIRE_MAX_PATH + 1];
	const char *scheme = c->tls ? "https" : "http";
	struct evbuffer *in = bufferevent_get_input(c->cbev);
	struct evbuffer *head;
	size_t idx = 0;
	bool inject = false, bound;
	enum binding_match_result mr = BINDING_MATCH_NONE;

	snprintf(c->method, sizeof(c->method), "%.*s",
	    (int)(req->method.len > ICPT_MAX_METHOD ? ICPT_MAX_METHOD : req->method.len),
	    (const char *)req->method.ptr);
	if (intercept_host_canon(req->host.ptr, req->host.len, c->port, host) != 0) {
		icpt_http_error(c, c->tls ? 421 : 400,
		    c->tls ? "Misdirected Request" : "Bad Request", "host_invalid");
		return false;
	}
	if (c->host[0] == '\0') {
		/* Plain HTTP: the first Host is checked like an SNI and pins the connection. */
		if (!ic->ops->sni_allowed(ic->arg, host)) {
			snprintf(c->host, sizeof(c->host), "%s", host);
			icpt_reject(c, "host_denied");
			icpt_http_error(c, 403, "Forbidden", "host_denied");
			return false;
		}
		if (!ic->ops->dst_ok(ic->arg, host, c->family, c->addr, c->port)) {
			snprintf(c->host, sizeof(c->host), "%s", host);
			icpt_reject(c, "orig_dst_not_in_resolved_set");
			icpt_http_error(c, 403, "Forbidden", "orig_dst_not_in_resolved_set");
			return false;
		}
		snprintf(c->host, sizeof(c->host), "%s", host);
	} else if (strcmp(host, c->host) != 0) {
		/* The upstream (and its certificate) is for c->host only. */
		icpt_http_error(
		    c, 421, "Misdirected Request", c->tls ? "host_not_sni" : "host_changed");
		return false;
	}
	if (c->up_failed) {
		icpt_http_error(c, 502, "Bad Gateway", c->up_why);
		return false;
	}
	vault_snap_unref(c->snap);
	c->snap = ic->ops->snapshot(ic->arg);
	bound = vault_snap_host_bound(c->snap, host);
	if (bound) {
		/* Bindings match on the raw path: refuse paths that read two ways. */
		if (req->path.len > HTTPWIRE_MAX_PATH ||
		    httpwire_path_is_ambiguous(req->path.ptr, req->path.len)) {
			icpt_http_error(c, 403, "Forbidden", "path_ambiguous");
			return false;
		}
		memcpy(path, req->path.ptr, req->path.len);
		path[req->path.len] = '\0';
		mr = binding_match(
		    vault_snap_bindings(c->snap), scheme, host, c->method, path, &idx);
		if (mr == BINDING_MATCH_AMBIGUOUS) {
			icpt_http_error(
			    c, 403, "credential binding ambiguous", "binding_ambiguous");
			return false;
		}
		inject = mr == BINDING_MATCH_ONE;
	}
	head = evbuffer_new();
	if (head == NULL || intercept_request_head(req, ic->hdrs, c->snap, idx, inject, ic->scratch,
	                        sizeof(ic->scratch), head) != 0) {
		evbuffer_free(head);
		icpt_http_error(c, 400, "Bad Request", "head_rewrite");
		return false;
	}
	c->credentialed = inject;
	c->binding[0] = '\0';
	if (inject) {
		snprintf(c->binding, sizeof(c->binding), "%s",
		    binding_name(vault_snap_bindings(c->snap), idx));
		icpt_count(ic, INTERCEPT_M_INJECTED, 1);
	}
	icpt_count(ic, INTERCEPT_M_REQUESTS, 1);
	c->req_is_head = req->method.len == 4 && memcmp(req->method.ptr, "HEAD", 4) == 0;
	c->req_upgrade = req->upgrade;
	c->req_keep = req->keep_alive;
	c->status = 0;
	c->head_matches = 0;
	c->resp_bytes = 0;
	c->interim = 0;
	evbuffer_drain(in, headlen);
	icpt_to_upstream(c, head, evbuffer_get_length(head));
	evbuffer_free(head);
	httpwire_body_init(&c->reqbody, req->framing, req->content_length, 0);
	c->req = req->framing == HTTPWIRE_FRAME_NONE ? ICPT_REQ_DONE : ICPT_REQ_BODY;
	c->resp = ICPT_RESP_HEAD;
	c->scanned = 0;
	if (!c->up_asked && icpt_up_start(c) != 0) {
		icpt_http_error(c, 502, "Bad Gateway", "upstream_socket_unavailable");
		return false;
	}
	icpt_client_timeouts(c);
	return true;
}

/* Whether a line end arrived past what was already searched. */
static int
icpt_find_head(struct evbuffer *in, size_t *scanned)
{
	size_t len = evbuffer_get_length(in);
	struct evbuffer_ptr p;

	if (len <= *scanned)
		return 0;
	if (evbuffer_ptr_set(in, &p, *scanned, EVBUFFER_PTR_SET) != 0)
		return 0;
	p = evbuffer_search(in, "\n", 1, &p);
	if (p.pos < 0) {
		*scanned = len;
		return 0;
	}
	return 1;
}

/* Workload -> upstream, per the request state. */
static void
icpt_http_client(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	while (c->state == ICPT_S_HTTP) {
		struct evbuffer *in = bufferevent_get_input(c->cbev);
		size_t len = evbuffer_get_length(in);

		if (c->req == ICPT_REQ_HEAD) {
			struct httpwire_request req;
			enum httpwire_status st;
			size_t consumed = 0, n;
			uint8_t *data;

			if (c->resp != ICPT_RESP_IDLE || len == 0)
				return;
			/* Re-parse only when a new line end arrived. */
			if (!icpt_find_head(in, &c->scanned)) {
				if (len > HTTPWIRE_MAX_HEAD_BYTES)
					icpt_http_error(c, 431, "Request Header Fields Too Large",
					    "head_too_large");
				return;
			}
			n = len > HTTPWIRE_MAX_HEAD_BYTES + 1 ? HTTPWIRE_MAX_HEAD_BYTES + 1 : len;
			data = evbuffer_pullup(in, (ssize_t)n);
			if (data == NULL) {
				icpt_close(c, "oom");
				return;
			}
			st = httpwire_parse_request(
			    data, n, &req, ic->hdrs, HTTPWIRE_MAX_HEADERS, &consumed);
			if (st == HTTPWIRE_NEED_MORE) {
				c->scanned = len;
				return;
			}
			if (st != HTTPWIRE_OK) {
				/* Smuggling shapes and malformed heads never reach upstream. */
				icpt_http_error(c, intercept_request_error_status(st, req.error),
				    "Bad Request", httpwire_error_str(req.error));
				return;
			}
			if (!icpt_http_request(c, &req, consumed))
				return;
			continue;
		}
		if (c->req == ICPT_REQ_BODY) {
			struct evbuffer_iovec v[8];
			int nv;
			size_t take = 0;
			enum httpwire_status st = HTTPWIRE_NEED_MORE;

			if (len == 0)
				return;
			nv = evbuffer_peek(in, -1, NULL, v, 8);
			for (int i = 0; i < nv && i < 8; i++) {
				size_t used = 0;

				st = httpwire_body_feed(
				    &c->reqbody, v[i].iov_base, v[i].iov_len, &used, NULL, NULL);
				take += used;
				if (st != HTTPWIRE_NEED_MORE)
					break;
			}
			if (st == HTTPWIRE_INVALID || st == HTTPWIRE_TOO_LARGE) {
				icpt_http_error(c, 400, "Bad Request",
				    httpwire_error_str(httpwire_body_error(&c->reqbody)));
				return;
			}
			icpt_to_upstream(c, in, take);
			if (st == HTTPWIRE_OK) {
				c->req = ICPT_REQ_DONE;
				icpt_client_timeouts(c);
			}
			/* Backpressure: stop reading the workload while upstream is behind. */
			if (icpt_up_pending(c) >= ic->cfg.max_buffer) {
				bufferevent_disable(c->cbev, EV_READ);
				return;
			}
			continue;
		}
		return; /* REQ_DONE: the next request waits for this response */
	}
	if (c->state == ICPT_S_TUNNEL && c->up_ready) {
		struct evbuffer *in = bufferevent_get_input(c->cbev);

		icpt_to_upstream(c, in, evbuffer_get_length(in));
		if (icpt_up_pending(c) >= ic->cfg.max_buffer)
			bufferevent_disable(c->cbev, EV_READ);
	}
}

/* Redacted bytes toward the workload; chunked bodies are re-framed. */
static int
icpt_emit(struct icpt_conn *c)
{
	struct evbuffer *out = bufferevent_get_output(c->cbev);
	size_t n = evbuffer_get_length(c->tmp);

	if (n == 0)
		return 0;
	c->resp_bytes += n;
	if (c->rechunk) {
		if (evbuffer_add_printf(out, "%zx\r\n", n) < 0 ||
		    evbuffer_add_buffer(out, c->tmp) != 0 || evbuffer_add(out, "\r\n", 2) != 0)
			return -1;
		return 0;
	}
	return evbuffer_add_buffer(out, c->tmp);
}

/* One span of response payload: through the redactor into c->tmp. */
static void
icpt_body_span_cb(const uint8_t *data, size_t off, size_t len, void *arg)
{
	struct icpt_conn *c = arg;

	if (c->rs != NULL) {
		if (redact_stream_feed(c->rs, data, len, c->tmp) != 0)
			c->oom = true;
	} else if (evbuffer_add(c->tmp, data, len) != 0) {
		c->oom = true;
	}
}

/* The response ended: flush the redactor, audit, then next request or close. */
static void
icpt_resp_finish(struct icpt_conn *c, bool eof)
{
	struct intercept *ic = c->ic;
	uint64_t m = 0;

	if (c->rs != NULL) {
		if (redact_stream_flush(c->rs, c->tmp) != 0) {
			icpt_close(c, "oom");
			return;
		}
		m = redact_stream_matches(c->rs);
		redact_stream_free(c->rs);
		c->rs = NULL;
		icpt_count(ic, INTERCEPT_M_REDACTED, m);
	}
	if (icpt_emit(c) != 0) {
		icpt_close(c, "oom");
		return;
	}
	if (c->rechunk)
		bufferevent_write(c->cbev, "0\r\n\r\n", 5);
	m += c->head_matches;
	c->head_matches = 0;
	if (m > 0) {
		struct intercept_event ev = {.level = INTERCEPT_L_INFO,
		    .event = "redact",
		    .conn = c->id,
		    .host = c->host,
		    .method = c->method,
		    .status = c->status,
		    .count = m};
		ic->ops->log(ic->arg, &ev);
	}
	if (c->credentialed) {
		/* Audit: binding, host, method, status, bytes; never the value. */
		struct intercept_event ev = {.level = INTERCEPT_L_INFO,
		    .event = "inject",
		    .conn = c->id,
		    .host = c->host,
		    .method = c->method,
		    .binding = c->binding,
		    .status = c->status,
		    .bytes = c->resp_bytes,
		    .count = m};
		ic->ops->log(ic->arg, &ev);
	}
	vault_snap_unref(c->snap);
	c->snap = NULL;
	c->credentialed = false;
	c->resp = ICPT_RESP_IDLE;
	c->scanned = 0;
	if (eof || !c->req_keep || !c->resp_keep || c->req != ICPT_REQ_DONE || c->c_eof) {
		icpt_drain(c);
		return;
	}
	c->req = ICPT_REQ_HEAD;
	c->method[0] = '\0';
	icpt_client_timeouts(c);
	bufferevent_enable(c->cbev, EV_READ);
	icpt_http_client(c);
}

/* Whether the response declares a content coding other than identity. */
static bool
icpt_encoded(const struct httpwire_response *r)
{
	for (size_t i = 0; i < r->nheaders; i++) {
		const struct httpwire_header *h = &r->headers[i];

		if (!httpwire_name_eq(h->name, "content-encoding"))
			continue;
		if (!(h->value.len == 8 &&
		        strncasecmp((const char *)h->value.ptr, "identity", 8) == 0))
			return true;
	}
	return false;
}

/* A complete response head: check it, redact it, send it on. */
static bool
icpt_http_response(
    struct icpt_conn *c, const struct httpwire_response *r, uint8_t *data, size_t headlen)
{
	struct intercept *ic = c->ic;
	struct redact_set *set = vault_snap_redact(c->snap);
	struct evbuffer *in = bufferevent_get_input(c->ubev);
	uint64_t m = 0;

	c->status = r->status;
	if (r->status == 101 && !c->req_upgrade) {
		icpt_http_error(c, 502, "Bad Gateway", "unexpected_101");
		return false;
	}
	if (c->credentialed && !r->interim && icpt_encoded(r)) {
		/* We asked for identity; an encoded body cannot be scanned. */
		icpt_http_error(c, 502, "Bad Gateway", "encoded_credentialed_response");
		return false;
	}
	if (r->interim && ++c->interim > HTTPWIRE_MAX_INTERIM) {
		icpt_http_error(c, 502, "Bad Gateway", "too_many_interim");
		return false;
	}
	if (headlen > sizeof(ic->scratch)) {
		icpt_close(c, "head_too_large");
		return false;
	}
	memcpy(ic->scratch, data, headlen);
	if (set != NULL)
		redact_buf(set, ic->scratch, headlen, &m);
	if (m > 0)
		icpt_count(ic, INTERCEPT_M_REDACTED, m);
	c->head_matches += m;
	bufferevent_write(c->cbev, ic->scratch, headlen);
	c->resp_bytes += headlen;
	evbuffer_drain(in, headlen);
	c->scanned = 0;
	if (r->interim)
		return true;
	c->resp_keep = r->keep_alive;
	c->rechunk = r->framing == HTTPWIRE_FRAME_CHUNKED;
	if (set != NULL) {
		c->rs = redact_stream_new(set);
		if (c->rs == NULL) {
			icpt_close(c, "oom");
			return false;
		}
	}
	if (r->framing == HTTPWIRE_FRAME_TUNNEL) {
		/* WebSocket: raw both ways from here; toward the workload still redacted. */
		icpt_set_state(c, ICPT_S_TUNNEL);
		icpt_timeouts(c->cbev, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
		bufferevent_enable(c->cbev, EV_READ);
		icpt_http_client(c);
		return true;
	}
	httpwire_body_init(&c->respbody, r->framing, r->content_length, 0);
	c->resp = ICPT_RESP_BODY;
	if (r->framing == HTTPWIRE_FRAME_NONE) {
		icpt_resp_finish(c, false);
		return c->state == ICPT_S_HTTP;
	}
	return true;
}

/* Upstream -> workload, per the response state. */
static void
icpt_http_upstream(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	while (c->state == ICPT_S_HTTP || c->state == ICPT_S_TUNNEL) {
		struct evbuffer *in = bufferevent_get_input(c->ubev);
		size_t len = evbuffer_get_length(in);

		/* Backpressure: the workload is behind; its write callback resumes us. */
		if (evbuffer_get_length(bufferevent_get_output(c->cbev)) >= ic->cfg.max_buffer) {
			bufferevent_disable(c->ubev, EV_READ);
			return;
		}
		if (c->state == ICPT_S_TUNNEL) {
			if (len > 0) {
				if (c->rs != NULL) {
					if (redact_stream_feed_evbuffer(c->rs, in, c->tmp) != 0) {
						icpt_close(c, "oom");
						return;
					}
				} else {
					evbuffer_add_buffer(c->tmp, in);
				}
				c->rechunk = false;
				if (icpt_emit(c) != 0) {
					icpt_close(c, "oom");
					return;
				}
			}
			if (c->u_eof) {
				if (c->rs != NULL && redact_stream_flush(c->rs, c->tmp) == 0)
					(void)icpt_emit(c);
				icpt_drain(c);
			}
			return;
		}
		if (c->resp == ICPT_RESP_IDLE) {
			if (len > 0) {
				icpt_close(c, "upstream_unsolicited");
				return;
			}
			/* Upstream ended a keep-alive connection: end ours too. */
			if (c->u_eof)
				icpt_drain(c);
			return;
		}
		if (c->resp == ICPT_RESP_HEAD) {
			struct httpwire_response r;
			enum httpwire_status st;
			size_t consumed = 0, n;
			uint8_t *data;

			if (len == 0 || !icpt_find_head(in, &c->scanned)) {
				if (len > HTTPWIRE_MAX_HEAD_BYTES) {
					icpt_http_error(
					    c, 502, "Bad Gateway", "response_head_too_large");
					return;
				}
				if (c->u_eof)
					icpt_http_error(c, 502, "Bad Gateway", "upstream_closed");
				return;
			}
			n = len > HTTPWIRE_MAX_HEAD_BYTES + 1 ? HTTPWIRE_MAX_HEAD_BYTES + 1 : len;
			data = evbuffer_pullup(in, (ssize_t)n);
			if (data == NULL) {
				icpt_close(c, "oom");
				return;
			}
			st = httpwire_parse_response(
			    data, n, c->req_is_head, &r, ic->hdrs, HTTPWIRE_MAX_HEADERS, &consumed);
			if (st == HTTPWIRE_NEED_MORE) {
				c->scanned = len;
				if (c->u_eof)
					icpt_http_error(c, 502, "Bad Gateway", "upstream_closed");
				return;
			}
			if (st != HTTPWIRE_OK) {
				icpt_http_error(c, 502, "Bad Gateway", httpwire_error_str(r.error));
				return;
			}
			if (!icpt_http_response(c, &r, data, consumed))
				return;
			continue;
		}
		/* RESP_BODY */
		{
			struct evbuffer_iovec v[8];
			int nv;
			size_t take = 0;
			enum httpwire_status st = HTTPWIRE_NEED_MORE;

			nv = len > 0 ? evbuffer_peek(in, -1, NULL, v, 8) : 0;
			for (int i = 0; i < nv && i < 8; i++) {
				size_t used = 0;

				st = httpwire_body_feed(&c->respbody, v[i].iov_base, v[i].iov_len,
				    &used, icpt_body_span_cb, c);
				take += used;
				if (st != HTTPWIRE_NEED_MORE)
					break;
			}
			if (st == HTTPWIRE_INVALID || st == HTTPWIRE_TOO_LARGE) {
				icpt_close(c, "response_body_invalid");
				return;
			}
			evbuffer_drain(in, take);
			if (c->oom || icpt_emit(c) != 0) {
				icpt_close(c, "oom");
				return;
			}
			if (st == HTTPWIRE_OK) {
				icpt_resp_finish(c, false);
				continue;
			}
			if (c->u_eof && evbuffer_get_length(in) == 0) {
				if (httpwire_body_eof(&c->respbody) == HTTPWIRE_OK)
					icpt_resp_finish(c, true);
				else
					icpt_close(c, "upstream_truncated");
				return;
			}
			if (take == 0 || len == take)
				return;
		}
	}
}

/* Request bytes from the workload. */
static void
icpt_c_read_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_conn *c = arg;

	icpt_http_client(c);
}

/* The workload caught up: resume reading upstream. */
static void
icpt_c_write_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_conn *c = arg;

	/* The workload caught up: read upstream again. */
	if ((c->state == ICPT_S_HTTP || c->state == ICPT_S_TUNNEL) && c->ubev != NULL &&
	    c->up_ready && !c->u_eof) {
		bufferevent_enable(c->ubev, EV_READ);
		icpt_http_upstream(c);
	}
}

/* Workload EOF, error or timeout (handshake completion is ignored). */
static void
icpt_c_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct icpt_conn *c = arg;

	if (what & BEV_EVENT_CONNECTED)
		return; /* TLS handshake with the workload done */
	if (what & BEV_EVENT_EOF) {
		c->c_eof = true;
		bufferevent_disable(bev, EV_READ);
		if (c->state == ICPT_S_HTTP && c->resp != ICPT_RESP_IDLE)
			return; /* let the response finish, then close */
		icpt_close(c, "client_eof");
		return;
	}
	if (what & BEV_EVENT_TIMEOUT)
		icpt_close(c, c->req == ICPT_REQ_HEAD ? "head_timeout" : "idle_timeout");
	else
		icpt_close(c, "client_error");
}

/* Start the HTTP relay on the workload leg (plain or TLS filter). */
static void
icpt_http_start(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	c->toup = evbuffer_new();
	c->tmp = evbuffer_new();
	if (c->toup == NULL || c->tmp == NULL) {
		icpt_close(c, "oom");
		return;
	}
	c->req = ICPT_REQ_HEAD;
	c->resp = ICPT_RESP_IDLE;
	bufferevent_setcb(c->cbev, icpt_c_read_cb, icpt_c_write_cb, icpt_c_event_cb, c);
	/* Bound what is buffered from the workload while a response is pending. */
	bufferevent_setwatermark(c->cbev, EV_READ, 0, ic->cfg.max_buffer);
	icpt_client_timeouts(c);
	bufferevent_enable(c->cbev, EV_READ | EV_WRITE);
}

/* ---------------------------------------------------------------- TLS entry */

/* Terminate TLS with a leaf for the SNI and connect upstream in parallel. */
static void
icpt_terminate(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;
	EVP_PKEY *key = NULL;
	char err[256];
	X509 *leaf;
	SSL *ssl;

	leaf = leaf_cache_get(ic->cfg.leaves, c->host, strlen(c->host), &key, err, sizeof(err));
	if (leaf == NULL) {
		icpt_reject(c, "leaf_refused");
		icpt_alert(c, TLSPEEK_ALERT_INTERNAL_ERROR);
		return;
	}
	ssl = SSL_new(ic->srv_ctx);
	if (ssl == NULL || SSL_use_certificate(ssl, leaf) != 1 ||
	    SSL_use_PrivateKey(ssl, key) != 1) {
		X509_free(leaf);
		SSL_free(ssl);
		icpt_close(c, "tls_setup");
		return;
	}
	X509_free(leaf);
	c->terminated = true;
	icpt_set_state(c, ICPT_S_HTTP);
	free(c->hello);
	c->hello = NULL;
	/* The ClientHello is still in craw's input: the filter reads it from there. */
	c->cbev = bufferevent_openssl_filter_new(ic->base, c->craw, ssl, BUFFEREVENT_SSL_ACCEPTING,
	    BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (c->cbev == NULL) {
		SSL_free(ssl);
		c->cbev = c->craw;
		icpt_close(c, "tls_setup");
		return;
	}
	bufferevent_openssl_set_allow_dirty_shutdown(c->cbev, 1);
	icpt_count(ic, INTERCEPT_M_TERMINATED, 1);
	icpt_http_start(c);
	if (c->state == ICPT_S_HTTP && icpt_up_start(c) != 0)
		icpt_up_fail(c, "upstream_socket_unavailable");
}

/* Peek the ClientHello and run every check before anything is forwarded. */
static void
icpt_hello_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_conn *c = arg;
	struct intercept *ic = c->ic;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in), consumed = 0, clen;
	uint8_t *data = evbuffer_pullup(in, -1);
	enum tlspeek_status st;
	struct vault_snap *snap;
	bool bound;

	if (data == NULL)
		return;
	st = tlspeek_parse(data, len, c->hello, &consumed);
	if (st == TLSPEEK_NEED_MORE)
		return;
	if (st != TLSPEEK_OK) {
		icpt_reject(c, tlspeek_reason_str(c->hello->reason));
		icpt_alert(c, TLSPEEK_ALERT_DECODE_ERROR);
		return;
	}
	if (!c->hello->has_sni) {
		icpt_reject(c, "no_sni");
		icpt_alert(c, TLSPEEK_ALERT_UNRECOGNIZED_NAME);
		return;
	}
	if (policy_name_canon((const uint8_t *)c->hello->sni, c->hello->sni_len, 0, c->host,
	        &clen) != POLICY_NAME_OK) {
		icpt_reject(c, "sni_invalid");
		icpt_alert(c, TLSPEEK_ALERT_UNRECOGNIZED_NAME);
		return;
	}
	if (c->hello->has_ech || c->hello->has_esni) {
		/* The real name would be hidden from the checks below. */
		icpt_reject(c, "ech_refused");
		icpt_alert(c, TLSPEEK_ALERT_ACCESS_DENIED);
		return;
	}
	if (!ic->ops->sni_allowed(ic->arg, c->host)) {
		icpt_reject(c, "sni_denied");
		icpt_alert(c, TLSPEEK_ALERT_ACCESS_DENIED);
		return;
	}
	/* The shared-IP hole: the SNI must name the address actually dialled. */
	if (!ic->ops->dst_ok(ic->arg, c->host, c->family, c->addr, c->port)) {
		icpt_reject(c, "orig_dst_not_in_resolved_set");
		icpt_alert(c, TLSPEEK_ALERT_ACCESS_DENIED);
		return;
	}
	bufferevent_disable(bev, EV_READ);
	bufferevent_set_timeouts(bev, NULL, NULL);
	snap = ic->ops->snapshot(ic->arg);
	bound = vault_snap_host_bound(snap, c->host);
	vault_snap_unref(snap);
	if (bound) {
		icpt_terminate(c);
		return;
	}
	free(c->hello);
	c->hello = NULL;
	icpt_set_state(c, ICPT_S_SPLICE);
	bufferevent_setcb(bev, NULL, NULL, icpt_splice_event_cb, c);
	if (icpt_up_start(c) != 0)
		icpt_up_fail(c, "upstream_socket_unavailable");
}

/* No complete hello in time, or the workload went away. */
static void
icpt_hello_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct icpt_conn *c = arg;

	if (what & BEV_EVENT_TIMEOUT) {
		icpt_reject(c, "hello_timeout");
		icpt_close(c, NULL);
		return;
	}
	icpt_close(c, "client_closed_in_hello");
}

/* ---------------------------------------------------------------- accept */

/* The pre-NAT destination from conntrack. */
static int
icpt_orig_dst(struct icpt_conn *c, int fd, int lfamily)
{
	socklen_t len = sizeof(c->dst);

	memset(&c->dst, 0, sizeof(c->dst));
	if (lfamily == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&c->dst;

		len = sizeof(*sin);
		if (getsockopt(fd, SOL_IP, ICPT_SO_ORIGINAL_DST, sin, &len) != 0 ||
		    sin->sin_family != AF_INET)
			return -1;
		c->family = AF_INET;
		memcpy(c->addr, &sin->sin_addr, 4);
		c->port = ntohs(sin->sin_port);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&c->dst;

		len = sizeof(*sin6);
		if (getsockopt(fd, SOL_IPV6, ICPT_IP6T_SO_ORIGINAL_DST, sin6, &len) != 0 ||
		    sin6->sin6_family != AF_INET6)
			return -1;
		c->family = AF_INET6;
		memcpy(c->addr, &sin6->sin6_addr, 16);
		c->port = ntohs(sin6->sin6_port);
	}
	c->dstlen = len;
	return 0;
}

/* Why the original destination is egressd itself, or NULL. */
static const char *
icpt_self_check(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;
	struct ifaddrs *ifa = NULL;
	struct timespec now;
	long long age_ms;

	/* A netlink dump per connection is too dear: reuse the list briefly. */
	clock_gettime(CLOCK_MONOTONIC, &now);
	age_ms = (long long)(now.tv_sec - ic->local_at.tv_sec) * 1000 +
	         (now.tv_nsec - ic->local_at.tv_nsec) / 1000000;
	if ((ic->local_at.tv_sec == 0 && ic->local_at.tv_nsec == 0) || age_ms < 0 ||
	    age_ms >= ICPT_LOCAL_TTL_MS) {
		size_t n = 0;

		if (getifaddrs(&ifa) == 0) {
			for (struct ifaddrs *i = ifa; i != NULL && n < ICPT_MAX_LOCAL;
			     i = i->ifa_next) {
				if (i->ifa_addr == NULL)
					continue;
				if (i->ifa_addr->sa_family == AF_INET) {
					memcpy(ic->local[n],
					    &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
					ic->local_fam[n++] = AF_INET;
				} else if (i->ifa_addr->sa_family == AF_INET6) {
					memcpy(ic->local[n],
					    &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
					ic->local_fam[n++] = AF_INET6;
				}
			}
			freeifaddrs(ifa);
		}
		ic->nlocal = n;
		ic->local_at = now;
	}
	return intercept_self_reason(c->family, c->addr, c->port, ic->cfg.tls_port,
	    ic->cfg.plain_port, (const uint8_t(*)[16])ic->local, ic->local_fam, ic->nlocal);
}

/* A redirected connection: find where it was going and start its checks. */
static void
icpt_accept_cb(
    struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
	struct intercept *ic = arg;
	struct sockaddr_storage ls;
	socklen_t lslen = sizeof(ls);
	struct icpt_conn *c;
	const char *self;
	bool tls;

	if (getsockname(fd, (struct sockaddr *)&ls, &lslen) != 0) {
		close(fd);
		return;
	}
	tls = ntohs(ls.ss_family == AF_INET
	                ? ((struct sockaddr_in *)&ls)->sin_port
	                : ((struct sockaddr_in6 *)&ls)->sin6_port) == ic->cfg.tls_port;
	icpt_count(ic, INTERCEPT_M_ACCEPTED, 1);
	if (ic->nconns >= ic->cfg.max_conns || (c = calloc(1, sizeof(*c))) == NULL) {
		icpt_count(ic, INTERCEPT_M_REJECTED, 1);
		close(fd);
		return;
	}
	c->ic = ic;
	c->id = ++ic->next_id;
	c->tls = tls;
	c->state = ICPT_S_HELLO;
	c->ev_free = event_new(ic->base, -1, 0, icpt_free_cb, c);
	c->craw = bufferevent_socket_new(ic->base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->cbev = c->craw;
	c->next = ic->conns;
	if (ic->conns != NULL)
		ic->conns->prev = c;
	ic->conns = c;
	ic->nconns++;
	if (c->ev_free == NULL || c->craw == NULL) {
		if (c->craw == NULL)
			close(fd);
		if (c->ev_free == NULL) {
			icpt_release(c);
			free(c);
			return;
		}
		icpt_close(c, "oom");
		return;
	}
	if (icpt_orig_dst(c, fd, ls.ss_family) != 0) {
		icpt_reject(c, "orig_dst_unknown");
		icpt_close(c, NULL);
		return;
	}
	/* Not an open proxy: a connection aimed at egressd itself goes nowhere. */
	if ((self = icpt_self_check(c)) != NULL) {
		icpt_reject(c, self);
		icpt_close(c, NULL);
		return;
	}
	if (!tls) {
		icpt_set_state(c, ICPT_S_HTTP);
		icpt_http_start(c);
		return;
	}
	c->hello = malloc(sizeof(*c->hello));
	if (c->hello == NULL) {
		icpt_close(c, "oom");
		return;
	}
	bufferevent_setcb(c->craw, icpt_hello_cb, NULL, icpt_hello_event_cb, c);
	bufferevent_setwatermark(
	    c->craw, EV_READ, 0, TLSPEEK_MAX_HELLO + 5 * TLSPEEK_MAX_RECORDS + 64);
	icpt_timeouts(c->craw, ic->cfg.hello_timeout_s, ic->cfg.hello_timeout_s);
	bufferevent_enable(c->craw, EV_READ);
}

/* ---------------------------------------------------------------- setup */

/* ALPN on terminated connections: http/1.1 or nothing. */
static int
icpt_alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
    unsigned int inlen, void *arg)
{
	static const unsigned char h11[] = "\x08http/1.1";
	unsigned char *sel = NULL;

	/* Only HTTP/1.1 is spoken on terminated connections. */
	if (SSL_select_next_proto(&sel, outlen, h11, sizeof(h11) - 1, in, inlen) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
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
	SSL_CTX_set_min_proto_version(ic->up_ctx, TLS1_2_VERSION);
	SSL_CTX_set_alpn_select_cb(ic->srv_ctx, icpt_alpn_cb, NULL);
	SSL_CTX_set_options(ic->srv_ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_session_cache_mode(ic->srv_ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_options(ic->up_ctx, SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_verify(ic->up_ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_session_cache_mode(
	    ic->up_ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ic->up_ctx, icpt_sess_new_cb);
	if (SSL_CTX_set_alpn_protos(ic->up_ctx, h11, sizeof(h11) - 1) != 0) {
		snprintf(err, errlen, "intercept: ALPN setup failed");
		return -1;
	}
	if (ic->upstream_ca[0] == '\0')
		ok = SSL_CTX_set_default_verify_paths(ic->up_ctx);
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

/* One loopback listener. */
static int
icpt_listen(struct intercept *ic, int family, uint16_t port, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t len;
	struct evconnlistener *l;

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

/* A configured value, defaulted and capped at the compiled maximum. */
static unsigned
icpt_lim(unsigned v, unsigned def, unsigned max)
{
	return v == 0 ? def : (v > max ? max : v);
}

/* Start the interceptor's listeners (see intercept.h). */
struct intercept *
intercept_new(struct event_base *base, const struct intercept_ops *ops, void *arg,
    const struct intercept_config *cfg, char *err, size_t errlen)
{
	struct intercept *ic;

	if (cfg->leaves == NULL || cfg->tls_port == 0 || cfg->plain_port == 0 ||
	    cfg->tls_port == cfg->plain_port) {
		snprintf(err, errlen, "intercept: bad configuration");
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
	ic->cfg = *cfg;
	ic->cfg.max_conns = icpt_lim(cfg->max_conns, INTERCEPT_MAX_CONNS, INTERCEPT_MAX_CONNS);
	ic->cfg.max_buffer = cfg->max_buffer == 0 || cfg->max_buffer > INTERCEPT_MAX_BUFFER
	                         ? INTERCEPT_MAX_BUFFER
	                         : cfg->max_buffer;
	ic->cfg.hello_timeout_s =
	    icpt_lim(cfg->hello_timeout_s, INTERCEPT_MAX_HELLO_S, INTERCEPT_MAX_HELLO_S);
	ic->cfg.head_timeout_s =
	    icpt_lim(cfg->head_timeout_s, INTERCEPT_MAX_HEAD_S, INTERCEPT_MAX_HEAD_S);
	ic->cfg.idle_timeout_s =
	    icpt_lim(cfg->idle_timeout_s, ICPT_DEFAULT_IDLE_S, INTERCEPT_MAX_IDLE_S);
	ic->cfg.connect_timeout_s =
	    icpt_lim(cfg->connect_timeout_s, INTERCEPT_MAX_CONNECT_S, INTERCEPT_MAX_CONNECT_S);
	snprintf(ic->upstream_ca, sizeof(ic->upstream_ca), "%s",
	    cfg->upstream_ca != NULL ? cfg->upstream_ca : "");
	ic->cfg.upstream_ca = ic->upstream_ca;
	if (icpt_ctx_setup(ic, err, errlen) != 0 ||
	    icpt_listen(ic, AF_INET, cfg->tls_port, err, errlen) != 0 ||
	    icpt_listen(ic, AF_INET6, cfg->tls_port, err, errlen) != 0 ||
	    icpt_listen(ic, AF_INET, cfg->plain_port, err, errlen) != 0 ||
	    icpt_listen(ic, AF_INET6, cfg->plain_port, err, errlen) != 0) {
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
		event_free(c->ev_free);
		free(c);
	}
	while (ic->dead != NULL) {
		struct icpt_conn *c = ic->dead;

		ic->dead = c->next;
		event_free(c->ev_free);
		free(c);
	}
	SSL_CTX_free(ic->srv_ctx);
	for (size_t i = 0; i < ICPT_SESS_SLOTS; i++)
		SSL_SESSION_free(ic->sess[i].sess);
	SSL_CTX_free(ic->up_ctx);
	free(ic);
}

/* True once all listeners are bound. */
bool
intercept_listening(const struct intercept *ic)
{
	return ic != NULL && ic->nls == 4;
}

/* Workload connections currently open. */
size_t
intercept_conn_count(const struct intercept *ic)
{
	return ic == NULL ? 0 : ic->nconns;
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
	};

	return (unsigned)m < INTERCEPT_M_COUNT ? names[m] : "unknown";
}
