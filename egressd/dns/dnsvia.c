/*
 * DNS to the resolvers through the chained proxy (EGRESSD_DNS_VIA_PROXY):
 * c-ares speaks DNS over TCP (ARES_FLAG_USEVC) on one end of a socketpair,
 * as if it were connected to the resolver; the other end is carried
 * through a CONNECT tunnel, on a marked socket, to the resolver's address
 * and port. What c-ares writes waits in the socketpair until the proxy
 * answered 2xx; a refusal, a failed connect or TLS, or either side
 * closing ends both, and c-ares fails over as for a resolver that closed.
 * The dns mark reaches the proxy and nothing else (the nft table).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/ssl.h>

#include "certs/trust.h"
#include "egressd/child/sockpool.h"
#include "egressd/common/httpurl.h"
#include "egressd/common/log.h"
#include "egressd/dns/dnsproxy.h"
#include "egressd/dns/dnsvia.h"
#include "vault/httpwire.h"

enum dnsvia_state {
	DNSVIA_NEW,     /* c-ares has its end; not connected yet */
	DNSVIA_DIALING, /* TCP (and TLS) to the proxy, then its answer to CONNECT */
	DNSVIA_OPEN,    /* the tunnel stands: bytes flow both ways */
};

struct dnsvia_conn {
	struct dnsvia *v;
	struct dnsvia_conn *next;
	enum dnsvia_state state;
	int cfd;                     /* c-ares's end */
	int bfd;                     /* ours, until lbev owns it */
	struct bufferevent *lbev;    /* our end, once the tunnel stands */
	struct bufferevent *ubev;    /* to the proxy (TCP, or TLS over it) */
	struct sockaddr_storage dst; /* the resolver c-ares asked for */
	bool draining;               /* the proxy closed: its last bytes go to c-ares, then both */
};

struct dnsvia {
	struct event_base *base;
	struct sockpool *pool; /* marked TCP sockets */
	struct sockaddr_storage proxy;
	socklen_t proxy_len;
	bool tls;
	const char *auth; /* borrowed from the configuration; never logged */
	SSL_CTX *ctx;     /* https:// proxies */
	struct dnsvia_conn *conns;
	size_t nconns;
	time_t warned; /* monotonic second of the last refusal line */
};

static void dnsvia_dial_event_cb(struct bufferevent *bev, short what, void *arg);

/* A refusal, at most one line every DNSVIA_WARN_S: a dead proxy fails every query. */
static void
dnsvia_warn(struct dnsvia_conn *c, const char *reason, int status)
{
	struct dnsvia *v = c->v;
	time_t now = (time_t)dnsproxy_now_s();
	struct log_line l;

	if (v->warned != 0 && now - v->warned < DNSVIA_WARN_S)
		return;
	v->warned = now;
	log_begin(&l, LOG_WARN, "dns", "dns_proxy_refused");
	log_str(&l, "reason", reason);
	if (status > 0)
		log_uint(&l, "status", (unsigned)status);
	log_end(&l);
}

static void
dnsvia_conn_free(struct dnsvia_conn *c)
{
	struct dnsvia *v = c->v;

	for (struct dnsvia_conn **pp = &v->conns; *pp != NULL; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	v->nconns--;
	if (c->lbev != NULL)
		bufferevent_free(c->lbev);
	else if (c->bfd >= 0)
		close(c->bfd);
	if (c->ubev != NULL)
		bufferevent_free(c->ubev);
	free(c);
}

static struct dnsvia_conn *
dnsvia_find(struct dnsvia *v, int cfd)
{
	for (struct dnsvia_conn *c = v->conns; c != NULL; c = c->next)
		if (c->cfd == cfd)
			return c;
	return NULL;
}

/* Bytes one way: what was read on from is written to to, paused past the limit. */
static void
dnsvia_pass(struct bufferevent *from, struct bufferevent *to)
{
	evbuffer_add_buffer(bufferevent_get_output(to), bufferevent_get_input(from));
	if (evbuffer_get_length(bufferevent_get_output(to)) > DNSVIA_MAX_QUEUED)
		bufferevent_disable(from, EV_READ);
}

static void
dnsvia_local_read_cb(struct bufferevent *bev, void *arg)
{
	struct dnsvia_conn *c = arg;

	dnsvia_pass(bev, c->ubev);
}

static void
dnsvia_up_read_cb(struct bufferevent *bev, void *arg)
{
	struct dnsvia_conn *c = arg;

	dnsvia_pass(bev, c->lbev);
}

/* Output drained below the limit: the other side may read again. */
static void
dnsvia_write_cb(struct bufferevent *bev, void *arg)
{
	struct dnsvia_conn *c = arg;

	/* The proxy closed: once its last bytes are with c-ares, both go. */
	if (c->draining) {
		if (bev == c->lbev && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			dnsvia_conn_free(c);
		return;
	}
	bufferevent_enable(bev == c->lbev ? c->ubev : c->lbev, EV_READ);
}

/*
 * Either side failed: both go; c-ares sees its end close. The proxy
 * closing cleanly right behind an answer (a resolver may close after
 * answering, RFC 7766, and the proxy with it) first hands c-ares what is
 * still queued for it: freed now, the answer would be lost.
 */
static void
dnsvia_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct dnsvia_conn *c = arg;

	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)))
		return;
	if (bev == c->ubev && c->lbev != NULL && (what & BEV_EVENT_EOF) &&
	    !(what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))) {
		evbuffer_add_buffer(
		    bufferevent_get_output(c->lbev), bufferevent_get_input(c->ubev));
		if (evbuffer_get_length(bufferevent_get_output(c->lbev)) > 0) {
			c->draining = true;
			bufferevent_disable(c->ubev, EV_READ | EV_WRITE);
			bufferevent_disable(c->lbev, EV_READ);
			bufferevent_setwatermark(c->lbev, EV_WRITE, 0, 0);
			return;
		}
	}
	dnsvia_conn_free(c);
}

/* The proxy answered 2xx: our end of the socketpair starts flowing. */
static void
dnsvia_open(struct dnsvia_conn *c)
{
	struct evbuffer *rest = bufferevent_get_input(c->ubev);

	c->lbev = bufferevent_socket_new(c->v->base, c->bfd, BEV_OPT_CLOSE_ON_FREE);
	if (c->lbev == NULL) {
		dnsvia_conn_free(c);
		return;
	}
	c->bfd = -1;
	c->state = DNSVIA_OPEN;
	bufferevent_set_timeouts(c->ubev, NULL, NULL);
	bufferevent_setcb(c->lbev, dnsvia_local_read_cb, dnsvia_write_cb, dnsvia_event_cb, c);
	bufferevent_setcb(c->ubev, dnsvia_up_read_cb, dnsvia_write_cb, dnsvia_event_cb, c);
	bufferevent_setwatermark(c->lbev, EV_WRITE, DNSVIA_MAX_QUEUED / 2, 0);
	bufferevent_setwatermark(c->ubev, EV_WRITE, DNSVIA_MAX_QUEUED / 2, 0);
	/* Bytes the resolver sent right behind the answer's head. */
	if (evbuffer_get_length(rest) > 0)
		dnsvia_pass(c->ubev, c->lbev);
	bufferevent_enable(c->lbev, EV_READ | EV_WRITE);
	bufferevent_enable(c->ubev, EV_READ | EV_WRITE);
}

/* The proxy's answer to CONNECT: only a whole, clean 2xx head opens the tunnel. */
static void
dnsvia_answer_cb(struct bufferevent *bev, void *arg)
{
	struct dnsvia_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in), consumed = 0;
	const uint8_t *head;
	int code;

	if (len > DNSVIA_HEAD_MAX)
		len = DNSVIA_HEAD_MAX;
	head = evbuffer_pullup(in, (ssize_t)len);
	code = head == NULL ? -1 : httpwire_connect_status(head, len, DNSVIA_HEAD_MAX, &consumed);
	if (code == 0)
		return;
	if (code < 200 || code > 299) {
		dnsvia_warn(c, code < 0 ? "proxy_bad_answer" : "proxy_status", code);
		dnsvia_conn_free(c);
		return;
	}
	evbuffer_drain(in, consumed);
	dnsvia_open(c);
}

/* Connected to the proxy (and TLS verified): ask for the resolver. */
static void
dnsvia_connect_req(struct dnsvia_conn *c)
{
	char req[DNSVIA_REQ_MAX];
	const void *ip;
	unsigned port;
	size_t n;

	if (c->dst.ss_family == AF_INET) {
		ip = &((struct sockaddr_in *)&c->dst)->sin_addr;
		port = ntohs(((struct sockaddr_in *)&c->dst)->sin_port);
	} else {
		ip = &((struct sockaddr_in6 *)&c->dst)->sin6_addr;
		port = ntohs(((struct sockaddr_in6 *)&c->dst)->sin6_port);
	}
	n = httpwire_connect_request(req, sizeof(req), c->dst.ss_family, ip, port, c->v->auth);
	if (n == 0 || evbuffer_add(bufferevent_get_output(c->ubev), req, n) != 0) {
		explicit_bzero(req, sizeof(req));
		dnsvia_conn_free(c);
		return;
	}
	explicit_bzero(req, sizeof(req));
	bufferevent_setcb(c->ubev, dnsvia_answer_cb, NULL, dnsvia_dial_event_cb, c);
	bufferevent_enable(c->ubev, EV_READ | EV_WRITE);
}

static void
dnsvia_dial_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct dnsvia_conn *c = arg;

	(void)bev;
	if (what & BEV_EVENT_CONNECTED) {
		dnsvia_connect_req(c);
		return;
	}
	dnsvia_warn(c,
	    (what & BEV_EVENT_TIMEOUT) ? "proxy_timeout"
	    : c->v->tls                ? "proxy_tls_failed"
	                               : "proxy_unreachable",
	    0);
	dnsvia_conn_free(c);
}

/* TCP to an https:// proxy is up: TLS, its certificate verified for its address. */
static void
dnsvia_tcp_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct dnsvia_conn *c = arg;
	struct dnsvia *v = c->v;
	struct bufferevent *f;
	SSL *ssl;

	if (!(what & BEV_EVENT_CONNECTED)) {
		dnsvia_dial_event_cb(bev, what, c);
		return;
	}
	if ((ssl = trust_peer_ssl(v->ctx, (const struct sockaddr *)&v->proxy, NULL)) == NULL) {
		dnsvia_dial_event_cb(bev, BEV_EVENT_ERROR, c);
		return;
	}
	f = bufferevent_openssl_filter_new(v->base, bev, ssl, BUFFEREVENT_SSL_CONNECTING,
	    BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (f == NULL) {
		SSL_free(ssl);
		dnsvia_dial_event_cb(bev, BEV_EVENT_ERROR, c);
		return;
	}
	bufferevent_set_timeouts(bev, NULL, NULL);
	c->ubev = f;
	bufferevent_setcb(f, NULL, NULL, dnsvia_dial_event_cb, c);
	bufferevent_set_timeouts(
	    f, &(struct timeval){DNSVIA_DIAL_S, 0}, &(struct timeval){DNSVIA_DIAL_S, 0});
	bufferevent_enable(f, EV_READ | EV_WRITE);
}

int
dnsvia_socket(struct dnsvia *v)
{
	struct dnsvia_conn *c;
	int sv[2];

	if (v->nconns >= DNSVIA_MAX_CONNS) {
		errno = EMFILE;
		return -1;
	}
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return -1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
		free(c);
		return -1;
	}
	c->v = v;
	c->cfd = sv[0];
	c->bfd = sv[1];
	c->next = v->conns;
	v->conns = c;
	v->nconns++;
	return c->cfd;
}

int
dnsvia_connect(struct dnsvia *v, int fd, const struct sockaddr *sa, socklen_t len)
{
	struct dnsvia_conn *c = dnsvia_find(v, fd);
	int ufd;

	if (c == NULL || c->state != DNSVIA_NEW || len > sizeof(c->dst) ||
	    (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) {
		errno = EINVAL;
		return -1;
	}
	memcpy(&c->dst, sa, len);
	/*
	 * Never an unmarked socket: it would be redirected to the DNS proxy
	 * itself. None ready is ours, not the resolver's: ENOBUFS (never
	 * EAGAIN, which c-ares takes for a connect in progress).
	 */
	if ((ufd = sockpool_take(v->pool, v->proxy.ss_family)) < 0) {
		errno = ENOBUFS;
		return -1;
	}
	c->ubev = bufferevent_socket_new(v->base, ufd, BEV_OPT_CLOSE_ON_FREE);
	if (c->ubev == NULL) {
		close(ufd);
		errno = ENOMEM;
		return -1;
	}
	c->state = DNSVIA_DIALING;
	bufferevent_setcb(
	    c->ubev, NULL, NULL, v->tls ? dnsvia_tcp_event_cb : dnsvia_dial_event_cb, c);
	bufferevent_set_timeouts(
	    c->ubev, &(struct timeval){DNSVIA_DIAL_S, 0}, &(struct timeval){DNSVIA_DIAL_S, 0});
	if (bufferevent_socket_connect(c->ubev, (struct sockaddr *)&v->proxy, (int)v->proxy_len) !=
	    0) {
		bufferevent_free(c->ubev);
		c->ubev = NULL;
		c->state = DNSVIA_NEW;
		errno = ECONNREFUSED;
		return -1;
	}
	/* c-ares's end is connected already: its query waits there for the tunnel. */
	return 0;
}

int
dnsvia_close(struct dnsvia *v, int fd)
{
	struct dnsvia_conn *c = dnsvia_find(v, fd);
	int rc = close(fd);

	if (c != NULL) {
		c->cfd = -1;
		dnsvia_conn_free(c);
	}
	return rc;
}

struct dnsvia *
dnsvia_new(struct event_base *base, struct sockpool *pool, const struct config *cfg, char *err,
    size_t errlen)
{
	struct config_proxy px;
	struct dnsvia *v;

	config_proxy(cfg, &px);
	if (!px.set || px.family == 0) {
		snprintf(err, errlen, "DNS through the proxy needs the proxy's address");
		return NULL;
	}
	if ((v = calloc(1, sizeof(*v))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	v->base = base;
	v->pool = pool;
	v->proxy_len = httpurl_sockaddr(px.family, px.addr, px.port, &v->proxy);
	v->tls = px.tls;
	v->auth = cfg->upstream_proxy_auth;
	if (v->tls) {
		v->ctx = SSL_CTX_new(TLS_client_method());
		if (v->ctx == NULL) {
			snprintf(err, errlen, "DNS through the proxy: TLS setup failed");
			free(v);
			return NULL;
		}
		SSL_CTX_set_min_proto_version(v->ctx, TLS1_2_VERSION);
		SSL_CTX_set_options(v->ctx, SSL_OP_NO_RENEGOTIATION);
		SSL_CTX_set_verify(v->ctx, SSL_VERIFY_PEER, NULL);
		if (cfg->upstream_store != NULL)
			SSL_CTX_set1_cert_store(v->ctx, cfg->upstream_store);
		else if (trust_system_paths(SSL_CTX_get_cert_store(v->ctx)) != 1) {
			snprintf(err, errlen, "DNS through the proxy: no upstream trust");
			SSL_CTX_free(v->ctx);
			free(v);
			return NULL;
		}
	}
	return v;
}

void
dnsvia_free(struct dnsvia *v)
{
	if (v == NULL)
		return;
	/* c-ares closed its ends (the resolver is closed first); ours go now. */
	while (v->conns != NULL)
		dnsvia_conn_free(v->conns);
	SSL_CTX_free(v->ctx);
	free(v);
}
