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

#include "vault/icpt_internal.h"

/* Bytes of the proxy's answer head at most; a longer one is refused. */
#define ICPT_PROXY_HEAD_MAX 8192

int
icpt_proxy_status(const char *head, size_t len)
{
	int code = 0;

	/* "HTTP/1.x SP 3DIGIT SP reason CRLF", as RFC 9112 section 4. */
	if (len < 14 || memcmp(head, "HTTP/1.", 7) != 0 || (head[7] != '0' && head[7] != '1') ||
	    head[8] != ' ')
		return -1;
	for (size_t i = 9; i < 12; i++) {
		if (head[i] < '0' || head[i] > '9')
			return -1;
		code = code * 10 + (head[i] - '0');
	}
	if (code < 100 || (head[12] != ' ' && head[12] != '\r'))
		return -1;
	for (size_t i = 12; i + 1 < len; i++) {
		if (head[i] == '\r' && head[i + 1] == '\n')
			return code;
		if ((unsigned char)head[i] < 0x20 && head[i] != '\t')
			return -1;
	}
	return -1;
}

int
icpt_dial_family(const struct icpt_conn *c)
{
	return c->ic->cfg.proxy_len != 0 ? c->ic->cfg.proxy.ss_family : c->family;
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
	struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	char head[ICPT_PROXY_HEAD_MAX];
	size_t n;
	int code;

	if (end.pos < 0) {
		if (evbuffer_get_length(in) < ICPT_PROXY_HEAD_MAX)
			return;
		icpt_log(c, INTERCEPT_L_WARN, "upstream_proxy_refused", "proxy_head_too_large", 0);
		c->dial_event(bev, BEV_EVENT_ERROR | BEV_EVENT_READING, c);
		return;
	}
	n = (size_t)end.pos + 4;
	if (n > sizeof(head)) {
		icpt_log(c, INTERCEPT_L_WARN, "upstream_proxy_refused", "proxy_head_too_large", 0);
		c->dial_event(bev, BEV_EVENT_ERROR | BEV_EVENT_READING, c);
		return;
	}
	evbuffer_remove(in, head, n);
	code = icpt_proxy_status(head, n);
	if (code < 200 || code > 299) {
		icpt_log(c, INTERCEPT_L_WARN, "upstream_proxy_refused",
		    code < 0 ? "proxy_bad_answer" : "proxy_status", code < 0 ? 0 : code);
		c->dial_event(bev, BEV_EVENT_ERROR | BEV_EVENT_READING, c);
		return;
	}
	icpt_proxy_open(c, bev);
}

static void
icpt_proxy_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct icpt_conn *c = arg;
	char a[INET6_ADDRSTRLEN];
	const void *ip;

	if (!(what & BEV_EVENT_CONNECTED)) {
		/* The proxy is down or closed before answering: no direct fallback. */
		icpt_log(c, INTERCEPT_L_WARN, "upstream_proxy_refused",
		    (what & BEV_EVENT_TIMEOUT) ? "proxy_timeout" : "proxy_unreachable", 0);
		c->dial_event(bev, what & ~BEV_EVENT_CONNECTED, c);
		return;
	}
	ip = c->dst.ss_family == AF_INET
	         ? (const void *)&((struct sockaddr_in *)&c->dst)->sin_addr
	         : (const void *)&((struct sockaddr_in6 *)&c->dst)->sin6_addr;
	inet_ntop(c->dst.ss_family, ip, a, sizeof(a));
	if (c->dst.ss_family == AF_INET6)
		evbuffer_add_printf(bufferevent_get_output(bev),
		    "CONNECT [%s]:%u HTTP/1.1\r\nHost: [%s]:%u\r\n", a, c->port, a, c->port);
	else
		evbuffer_add_printf(bufferevent_get_output(bev),
		    "CONNECT %s:%u HTTP/1.1\r\nHost: %s:%u\r\n", a, c->port, a, c->port);
	if (c->ic->cfg.proxy_auth != NULL && c->ic->cfg.proxy_auth[0] != '\0')
		evbuffer_add_printf(bufferevent_get_output(bev), "Proxy-Authorization: %s\r\n",
		    c->ic->cfg.proxy_auth);
	evbuffer_add(bufferevent_get_output(bev), "\r\n", 2);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

int
icpt_dial(struct icpt_conn *c, bufferevent_data_cb readcb, bufferevent_event_cb eventcb)
{
	struct intercept *ic = c->ic;

	if (ic->cfg.proxy_len == 0) {
		bufferevent_setcb(c->usock, readcb, NULL, eventcb, c);
		return bufferevent_socket_connect(
		    c->usock, (struct sockaddr *)&c->dst, (int)c->dstlen);
	}
	c->dial_read = readcb;
	c->dial_event = eventcb;
	bufferevent_setcb(c->usock, icpt_proxy_read_cb, NULL, icpt_proxy_event_cb, c);
	return bufferevent_socket_connect(
	    c->usock, (struct sockaddr *)&ic->cfg.proxy, (int)ic->cfg.proxy_len);
}
