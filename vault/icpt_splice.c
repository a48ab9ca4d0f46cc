/*
 * icpt_splice: passthrough (intercept process). After the checks, a host
 * no binding applies to is spliced: the ClientHello is replayed to the
 * original destination and bytes move both ways undecrypted, with
 * backpressure and half-closes.
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
void
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
void
icpt_splice_start(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	c->ubev = c->usock;
	/* Replay the ClientHello (and anything after it) to the real server. */
	evbuffer_add_buffer(bufferevent_get_output(c->ubev), bufferevent_get_input(c->cbev));
	/* A server that spoke first (peek) already sent its banner. */
	evbuffer_add_buffer(bufferevent_get_output(c->cbev), bufferevent_get_input(c->ubev));
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
