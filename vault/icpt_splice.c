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
	/* Half-close: pass on an EOF once the bytes before it are out (none held). */
	if (c->c_eof && c->retry == ICPT_RETRY_OFF && c->ubev != NULL &&
	    evbuffer_get_length(bufferevent_get_output(c->ubev)) == 0) {
		SSL *tls = bufferevent_openssl_get_ssl(c->ubev);

		/* Through an https:// proxy the half-close is TLS's close_notify. */
		if (tls != NULL)
			(void)SSL_shutdown(tls);
		else
			shutdown(bufferevent_getfd(c->ubev), SHUT_WR);
	}
	if (c->u_eof && evbuffer_get_length(bufferevent_get_output(c->cbev)) == 0)
		shutdown(bufferevent_getfd(c->cbev), SHUT_WR);
	if (c->c_eof && c->u_eof && evbuffer_get_length(bufferevent_get_output(c->ubev)) == 0 &&
	    evbuffer_get_length(bufferevent_get_output(c->cbev)) == 0)
		icpt_close(c, "splice_done");
}

/* The client's held bytes go upstream as they are, and it is read again. */
static void
icpt_retry_done(struct icpt_conn *c)
{
	c->retry = ICPT_RETRY_OFF;
	free(c->hello);
	c->hello = NULL;
	bufferevent_setwatermark(c->cbev, EV_READ, 0, ICPT_HELLO_WATERMARK);
	evbuffer_add_buffer(bufferevent_get_output(c->ubev), bufferevent_get_input(c->cbev));
	if (!c->c_eof)
		bufferevent_enable(c->cbev, EV_READ);
}

/*
 * The server's first message: a HelloRetryRequest makes the client's
 * next hello subject to the checks. False while it is incomplete, or when
 * the connection was refused.
 */
static bool
icpt_retry_server(struct icpt_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->ubev);
	size_t len = evbuffer_get_length(in);
	size_t n = len > TLSPEEK_SERVER_FIRST_MAX ? TLSPEEK_SERVER_FIRST_MAX : len;
	uint8_t *data = evbuffer_pullup(in, (ssize_t)n);
	enum tlspeek_server kind;
	enum tlspeek_reason why;
	enum tlspeek_status st;

	if (data == NULL)
		return false;
	st = tlspeek_server_first(data, n, &kind, &why);
	if (st == TLSPEEK_NEED_MORE)
		return false;
	if (st != TLSPEEK_OK) {
		/* Not TLS, or not readable: no telling whether a second hello comes. */
		icpt_reject(c, "upstream_not_server_hello");
		icpt_close(c, NULL);
		return false;
	}
	if (kind != TLSPEEK_SERVER_HRR) {
		icpt_retry_done(c);
		return true;
	}
	c->hello = malloc(sizeof(*c->hello));
	if (c->hello == NULL) {
		icpt_close(c, "oom");
		return false;
	}
	c->retry = ICPT_RETRY_CLIENT;
	icpt_log(c, INTERCEPT_L_DEBUG, "hello_retry", NULL, 0);
	/* The second hello, like the first, within the hello deadline. */
	icpt_deadline_arm(c, c->ic->cfg.hello_timeout_s, "hello_timeout");
	bufferevent_setwatermark(c->cbev, EV_READ, 0, ICPT_RETRY_WATERMARK);
	if (!c->c_eof)
		bufferevent_enable(c->cbev, EV_READ);
	return c->state == ICPT_S_SPLICE;
}

/*
 * The client's bytes after the HelloRetryRequest: its second hello
 * decides. True when the held bytes may go upstream.
 */
static bool
icpt_retry_client(struct icpt_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->cbev);
	size_t len = evbuffer_get_length(in), consumed = 0;
	uint8_t *data;
	enum tlspeek_status st;
	const char *why;

	if (len == 0)
		return false;
	if ((data = evbuffer_pullup(in, -1)) == NULL)
		return false;
	st = tlspeek_parse_retry(data, len, c->early_data, c->hello, &consumed);
	if (st == TLSPEEK_NEED_MORE && len >= TLSPEEK_MAX_WIRE + TLSPEEK_MAX_SKIP)
		st = TLSPEEK_TOO_LARGE;
	if (st == TLSPEEK_NEED_MORE)
		return false;
	if (st != TLSPEEK_OK) {
		icpt_reject(c, "hrr_bad_client_hello");
		icpt_alert(c, TLSPEEK_ALERT_DECODE_ERROR);
		return false;
	}
	why = intercept_retry_refusal(c->host, c->hello->has_sni ? c->hello->sni : NULL,
	    c->hello->sni_len, c->hello->has_ech || c->hello->has_esni);
	if (why != NULL) {
		icpt_reject(c, why);
		icpt_alert(c, TLSPEEK_ALERT_ILLEGAL_PARAMETER);
		return false;
	}
	icpt_deadline_stop(c);
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
	if (bev == c->cbev && c->retry != ICPT_RETRY_OFF) {
		/* Held until the server's first message, then until the second hello. */
		if (c->retry == ICPT_RETRY_SERVER) {
			bufferevent_disable(bev, EV_READ);
			return;
		}
		if (!icpt_retry_client(c))
			return;
	}
	if (bev == c->ubev && c->retry == ICPT_RETRY_SERVER && !icpt_retry_server(c))
		return;
	evbuffer_add_buffer(out, bufferevent_get_input(bev));
	/* Backpressure: stop reading this side while the other is behind. */
	if (evbuffer_get_length(out) >= c->ic->cfg.max_buffer)
		bufferevent_disable(bev, EV_READ);
	/* A client EOF that waited for its held bytes to go. */
	if (was != ICPT_RETRY_OFF && c->retry == ICPT_RETRY_OFF && c->c_eof)
		icpt_splice_shut(c);
	/* Bytes of the second hello that came before the HelloRetryRequest was relayed. */
	else if (bev == c->ubev && c->retry == ICPT_RETRY_CLIENT &&
	         evbuffer_get_length(bufferevent_get_input(c->cbev)) > 0)
		icpt_splice_read_cb(c->cbev, c);
}

/* A leg drained: resume reading the other one. */
static void
icpt_splice_write_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_conn *c = arg;
	struct bufferevent *peer = icpt_peer(c, bev);
	bool peer_eof = bev == c->cbev ? c->u_eof : c->c_eof;

	if (c->state != ICPT_S_SPLICE)
		return; /* draining after a refusal: nothing more is read */
	if (!peer_eof && (peer != c->cbev || c->retry != ICPT_RETRY_SERVER))
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
	/*
	 * Replay the ClientHello to the real server; what came after it waits
	 * for the server's first message when a second hello could follow.
	 */
	if (c->retry == ICPT_RETRY_SERVER)
		evbuffer_remove_buffer(bufferevent_get_input(c->cbev),
		    bufferevent_get_output(c->ubev), c->hello_bytes);
	else
		evbuffer_add_buffer(
		    bufferevent_get_output(c->ubev), bufferevent_get_input(c->cbev));
	/* A server that spoke first (peek) already sent its banner. */
	evbuffer_add_buffer(bufferevent_get_output(c->cbev), bufferevent_get_input(c->ubev));
	bufferevent_setcb(
	    c->cbev, icpt_splice_read_cb, icpt_splice_write_cb, icpt_splice_event_cb, c);
	bufferevent_setcb(
	    c->ubev, icpt_splice_read_cb, icpt_splice_write_cb, icpt_splice_event_cb, c);
	icpt_timeouts(c->cbev, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
	icpt_timeouts(c->ubev, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
	bufferevent_enable(c->cbev, c->retry == ICPT_RETRY_SERVER ? EV_WRITE : EV_READ | EV_WRITE);
	bufferevent_enable(c->ubev, EV_READ | EV_WRITE);
	icpt_count(ic, INTERCEPT_M_PASSTHROUGH, 1);
}
