/*
 * Upstream connections through a chained HTTP CONNECT proxy
 * (OPENSANDBOX_EGRESS_UPSTREAM_PROXY). The policy decision is egressd's,
 * made before any dial: the proxy is only a carrier. The tunnel is asked
 * for the original destination *address* (never a name the proxy would
 * resolve again, possibly elsewhere), and only a 2xx answer with a clean
 * head opens it; the nft table lets the intercept's mark reach the proxy
 * and nothing else, so no path dials direct.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>

#include "certs/trust.h"
#include "vault/httpwire.h"
#include "vault/icpt_internal.h"

/* Bytes of the proxy's answer head at most; a longer one is refused. */
#define ICPT_PROXY_HEAD_MAX 8192
/* Bytes of the CONNECT head at most (the Proxy-Authorization value is 1 KiB at most). */
#define ICPT_PROXY_REQ_MAX 1536

int
icpt_proxy_status(const uint8_t *buf, size_t len, size_t *consumed)
{
	/* The same strict parser as every upstream answer (RFC 9112). */
	return httpwire_connect_status(buf, len, ICPT_PROXY_HEAD_MAX, consumed);
}

int
icpt_dial_family(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	if (!ic->proxy_on)
		return c->family;
	if (ic->npx == 0) {
		icpt_log(c, INTERCEPT_L_WARN, "upstream_proxy_refused", "proxy_unresolved", 0);
		return 0;
	}
	ic->pxnext %= ic->npx;
	/* IPv4 and IPv6 addresses only (intercept_new, intercept_set_proxy). */
	if (ic->pxlen[ic->pxnext] > sizeof(c->pxaddr)) {
		icpt_log(c, INTERCEPT_L_WARN, "upstream_proxy_refused", "proxy_address_family", 0);
		return 0;
	}
	memcpy(&c->pxaddr, &ic->px[ic->pxnext], ic->pxlen[ic->pxnext]);
	c->pxlen = ic->pxlen[ic->pxnext];
	ic->pxnext++;
	return c->pxaddr.sa.sa_family;
}

bool
icpt_proxy_addr_ok(const struct sockaddr_storage *ss, socklen_t len)
{
	return (ss->ss_family == AF_INET && len == sizeof(struct sockaddr_in)) ||
	       (ss->ss_family == AF_INET6 && len == sizeof(struct sockaddr_in6));
}

int
intercept_set_proxy(
    struct intercept *ic, const struct sockaddr_storage *addrs, const socklen_t *lens, size_t n)
{
	if (ic->cfg.proxy_name[0] == '\0' || n == 0 || n > INTERCEPT_MAX_PROXY_ADDRS)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!icpt_proxy_addr_ok(&addrs[i], lens[i]))
			return -1;
	for (size_t i = 0; i < n; i++) {
		ic->px[i] = addrs[i];
		ic->pxlen[i] = lens[i];
	}
	ic->npx = n;
	ic->pxnext = 0;
	return 0;
}

/* The tunnel stands: the connection's own callbacks take over. */
static void
icpt_proxy_open(struct icpt_conn *c, struct bufferevent *bev)
{
	bufferevent_data_cb rcb = NULL;
	void *arg = NULL;

	bufferevent_setcb(bev, c->dial_read, NULL, c->dial_event, c);
	c->dial_event(bev, BEV_EVENT_CONNECTED, c);
	/*
	 * Bytes the server sent right after the answer (a server-first
	 * protocol) are already in the input: hand them to whoever reads
	 * this socket now (the connection, or the TLS filter over it).
	 */
	if (c->state == ICPT_S_CLOSED || c->usock != bev ||
	    evbuffer_get_length(bufferevent_get_input(bev)) == 0)
		return;
	bufferevent_getcb(bev, &rcb, NULL, NULL, &arg);
	if (rcb != NULL)
		rcb(bev, arg);
}

static void
icpt_proxy_read_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in), consumed = 0;
	const uint8_t *head;
	int code;

	if (len > ICPT_PROXY_HEAD_MAX)
		len = ICPT_PROXY_HEAD_MAX;
	head = evbuffer_pullup(in, (ssize_t)len);
	code = head == NULL ? -1 : icpt_proxy_status(head, len, &consumed);
	if (code == 0)
		return;
	if (code < 200 || code > 299) {
		icpt_log(c, INTERCEPT_L_WARN, "upstream_proxy_refused",
		    code < 0 ? "proxy_bad_answer" : "proxy_status", code < 0 ? 0 : code);
		c->dial_event(bev, BEV_EVENT_ERROR | BEV_EVENT_READING, c);
		return;
	}
	evbuffer_drain(in, consumed);
	icpt_proxy_open(c, bev);
}

static void
icpt_proxy_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct icpt_conn *c = arg;
	char req[ICPT_PROXY_REQ_MAX];
	const void *ip;
	size_t n;

	if (!(what & BEV_EVENT_CONNECTED)) {
		/* The proxy is down, its TLS failed, or it closed before answering: no direct fallback. */
		icpt_log(c, INTERCEPT_L_WARN, "upstream_proxy_refused",
		    (what & BEV_EVENT_TIMEOUT) ? "proxy_timeout"
		    : c->ic->cfg.proxy_tls     ? "proxy_tls_failed"
		                               : "proxy_unreachable",
		    0);
		c->dial_event(bev, what & ~BEV_EVENT_CONNECTED, c);
		return;
	}
	ip = c->dst.sa.sa_family == AF_INET ? (const void *)&c->dst.sin.sin_addr
	                                    : (const void *)&c->dst.sin6.sin6_addr;
	n = httpwire_connect_request(
	    req, sizeof(req), c->dst.sa.sa_family, ip, c->port, c->ic->cfg.proxy_auth);
	if (n == 0 || evbuffer_add(bufferevent_get_output(bev), req, n) != 0) {
		explicit_bzero(req, sizeof(req));
		c->dial_event(bev, BEV_EVENT_ERROR, c);
		return;
	}
	explicit_bzero(req, sizeof(req));
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/*
 * An https:// proxy: TCP is up, now TLS to the proxy, its certificate
 * verified against the upstream trust for its name (also the SNI) when it
 * was given by name, else for its address (no SNI for an address). The filter becomes the connection's upstream socket: the
 * CONNECT, and then the tunnel (and any TLS of the connection's own
 * inside it), go through it.
 */
static void
icpt_proxy_tcp_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct icpt_conn *c = arg;
	struct intercept *ic = c->ic;
	struct bufferevent *f;
	SSL *ssl;

	if (!(what & BEV_EVENT_CONNECTED)) {
		icpt_proxy_event_cb(bev, what, c);
		return;
	}
	/* Given by name: the certificate must be for the name, whatever address DNS gave. */
	if ((ssl = trust_peer_ssl(ic->up_ctx, &c->pxaddr.sa, ic->cfg.proxy_name)) == NULL) {
		icpt_proxy_event_cb(bev, BEV_EVENT_ERROR, c);
		return;
	}
	f = bufferevent_openssl_filter_new(ic->base, bev, ssl, BUFFEREVENT_SSL_CONNECTING,
	    BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (f == NULL) {
		SSL_free(ssl);
		icpt_proxy_event_cb(bev, BEV_EVENT_ERROR, c);
		return;
	}
	c->usock = f;
	/* The filter keeps the deadlines from now on; the socket under it has none. */
	bufferevent_set_timeouts(bev, NULL, NULL);
	bufferevent_setcb(f, icpt_proxy_read_cb, NULL, icpt_proxy_event_cb, c);
	icpt_timeouts(f, ic->cfg.connect_timeout_s, ic->cfg.connect_timeout_s);
	bufferevent_enable(f, EV_READ | EV_WRITE);
}

int
icpt_dial(struct icpt_conn *c, bufferevent_data_cb readcb, bufferevent_event_cb eventcb)
{
	struct intercept *ic = c->ic;

	/* Every upstream leg (terminated, plain, spliced, probed, via a proxy) is dialled here. */
	icpt_nodelay(bufferevent_getfd(c->usock));
	if (!ic->proxy_on) {
		bufferevent_setcb(c->usock, readcb, NULL, eventcb, c);
		return bufferevent_socket_connect(c->usock, &c->dst.sa, (int)c->dstlen);
	}
	c->dial_read = readcb;
	c->dial_event = eventcb;
	if (ic->cfg.proxy_tls)
		bufferevent_setcb(c->usock, NULL, NULL, icpt_proxy_tcp_event_cb, c);
	else
		bufferevent_setcb(c->usock, icpt_proxy_read_cb, NULL, icpt_proxy_event_cb, c);
	/* The address icpt_dial_family() chose; none chosen: no dial. */
	if (c->pxlen == 0)
		return -1;
	return bufferevent_socket_connect(c->usock, &c->pxaddr.sa, (int)c->pxlen);
}
