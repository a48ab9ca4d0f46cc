/*
 * icpt_accept: the entry of every intercepted connection (intercept
 * process): the original destination from conntrack, the refusal of
 * connections aimed at egressd itself, the ClientHello peek and its checks
 * (SNI allowed, destination learned for it, no ECH), then passthrough or
 * termination with a leaf for the SNI. Connections to other ports of
 * learned addresses come in on the peek listener: their first bytes say
 * TLS (the same checks), HTTP (the Host checks) or another protocol
 * (passed through); a silent client lets a server speak first. The
 * connection cap and the hello deadline are enforced here, and so is the
 * rule that a second ClientHello (after a HelloRetryRequest) names the
 * host the first one was checked for: by OpenSSL's ClientHello callback on
 * terminated connections, by icpt_splice.c on passed-through ones.
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

/* ---------------------------------------------------------------- first bytes */

/*
 * The workload's first bytes are peeked (MSG_PEEK), never read, until they
 * decide the path: a terminated connection's TLS then runs on the socket
 * from its first byte, the ClientHello included (OpenSSL reads it again,
 * and its ClientHello callback checks it names the host tlspeek found);
 * a passed-through one reads them into its bufferevent. The event is
 * edge-triggered: each arrival brings one more peek, and a peer that
 * half-closed before its bytes were whole (EV_CLOSED) ends the wait.
 */
static uint8_t icpt_first_buf[ICPT_HELLO_WATERMARK];

/* Peek at most max of the workload's bytes: > 0 bytes, 0 EOF, -1 none yet, -2 an error. */
static ssize_t
icpt_first_peek(struct icpt_conn *c, size_t max)
{
	ssize_t n;

	do
		n = recv(c->cfd, icpt_first_buf, max, MSG_PEEK);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? -1 : -2;
	c->first = (size_t)n;
	return n;
}

/* The first bytes decided: no more peeking. */
static void
icpt_first_done(struct icpt_conn *c)
{
	if (c->ev_first != NULL)
		event_free(c->ev_first);
	c->ev_first = NULL;
}

/* Passthrough that cannot run raw from the hello on (see icpt_internal.h). */
int
icpt_first_to_craw(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;
	struct evbuffer *in;
	ssize_t n = 0;
	int rc;

	icpt_first_done(c);
	if (c->first > 0) {
		do
			n = recv(c->cfd, icpt_first_buf, c->first, 0);
		while (n < 0 && errno == EINTR);
		if (n != (ssize_t)c->first) {
			icpt_close(c, "client_closed_in_hello");
			return -1;
		}
	}
	c->craw = bufferevent_socket_new(ic->base, c->cfd, BEV_OPT_CLOSE_ON_FREE);
	if (c->craw == NULL) {
		icpt_close(c, "oom");
		return -1;
	}
	/* The input's end is the bufferevent's own (frozen): thawed for these bytes. */
	in = bufferevent_get_input(c->craw);
	evbuffer_unfreeze(in, 0);
	rc = n > 0 ? evbuffer_add(in, icpt_first_buf, (size_t)n) : 0;
	evbuffer_freeze(in, 0);
	if (rc != 0) {
		icpt_close(c, "oom");
		return -1;
	}
	bufferevent_setwatermark(c->craw, EV_READ, 0, ICPT_HELLO_WATERMARK);
	bufferevent_disable(c->craw, EV_READ);
	return 0;
}

/* ---------------------------------------------------------------- TLS entry */

/* Terminate TLS with leaf (a reference, taken) and connect upstream in parallel. */
static void
icpt_terminate_with(struct icpt_conn *c, X509 *leaf, EVP_PKEY *key)
{
	struct intercept *ic = c->ic;
	const char *why;
	SSL *ssl;

	ssl = SSL_new(ic->srv_ctx);
	if (ssl == NULL || SSL_use_certificate(ssl, leaf) != 1 ||
	    SSL_use_PrivateKey(ssl, key) != 1) {
		X509_free(leaf);
		SSL_free(ssl);
		icpt_close(c, "tls_setup");
		return;
	}
	X509_free(leaf);
	icpt_first_done(c);
	if (!icpt_enter(c, ICPT_S_HTTP)) {
		SSL_free(ssl);
		return;
	}
	/* For the ClientHello and ALPN callbacks; cleared before the SSL goes. */
	SSL_set_app_data(ssl, c);
	c->terminated = true;
	c->want_h2 = !ic->cfg.no_http2 && tlspeek_offers_alpn(c->hello, "h2");
	free(c->hello);
	c->hello = NULL;
	/* TLS on the socket itself: the ClientHello is still in it, peeked only. */
	c->cl = icpt_leg_new(ic->base, c->cfd, ssl, ICPT_LEG_ACCEPT);
	if (c->cl == NULL) {
		c->cfd = -1; /* closed with the leg that could not be */
		icpt_close(c, "tls_setup");
		return;
	}
	icpt_count(ic, INTERCEPT_M_TERMINATED, 1);
	icpt_http_start(c);
	if (c->state == ICPT_S_HTTP && (why = icpt_up_start(c)) != NULL)
		icpt_up_fail(c, why);
}

/* The leaf the parent minted, or NULL. */
static void
icpt_leaf_cb(X509 *leaf, void *arg)
{
	struct icpt_conn *c = arg;

	if (icpt_sock_orphaned(c, -1) || c->state != ICPT_S_HELLO) {
		X509_free(leaf);
		return;
	}
	if (leaf == NULL) {
		icpt_reject(c, "leaf_refused");
		icpt_alert(c, TLSPEEK_ALERT_INTERNAL_ERROR);
		return;
	}
	icpt_terminate_with(c, leaf, leaf_cache_key(c->ic->cfg.leaves));
}

/*
 * Terminate TLS with a leaf for the SNI: from the cache, or minted by the
 * process that holds the CA key (the handshake waits, reads paused, under
 * the head deadline already armed).
 */
static void
icpt_terminate(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;
	EVP_PKEY *key = NULL;
	char err[256];
	X509 *leaf;

	leaf = leaf_cache_find(ic->cfg.leaves, c->host, strlen(c->host), &key);
	if (leaf == NULL && ic->ops->get_leaf == NULL)
		leaf = leaf_cache_get(
		    ic->cfg.leaves, c->host, strlen(c->host), &key, err, sizeof(err));
	if (leaf != NULL) {
		icpt_terminate_with(c, leaf, key);
		return;
	}
	if (ic->ops->get_leaf != NULL) {
		icpt_first_done(c); /* the hello waits in the socket */
		c->sockreqs++;
		if (ic->ops->get_leaf(ic->arg, c->host, icpt_leaf_cb, c) == 0)
			return;
		c->sockreqs--;
	}
	icpt_reject(c, "leaf_refused");
	icpt_alert(c, TLSPEEK_ALERT_INTERNAL_ERROR);
}

/* Peek the ClientHello and run every check before anything is forwarded. */
static void
icpt_hello_step(struct icpt_conn *c, short what)
{
	struct intercept *ic = c->ic;
	ssize_t n = icpt_first_peek(c, ICPT_HELLO_WATERMARK);
	size_t consumed = 0, clen;
	char name[POLICY_NAME_MAX + 1];
	enum tlspeek_status st;
	struct vault_snap *snap;
	const char *why;
	bool bound;

	if (n == -1)
		return;
	if (n <= 0) {
		icpt_close(c, "client_closed_in_hello");
		return;
	}
	st = tlspeek_parse(icpt_first_buf, (size_t)n, c->hello, &consumed);
	if (st == TLSPEEK_NEED_MORE) {
		if (what & EV_CLOSED)
			icpt_close(c, "client_closed_in_hello");
		return;
	}
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
	if (policy_name_canon((const uint8_t *)c->hello->sni, c->hello->sni_len, 0, name, &clen) !=
	    POLICY_NAME_OK) {
		icpt_reject(c, "sni_invalid");
		icpt_alert(c, TLSPEEK_ALERT_UNRECOGNIZED_NAME);
		return;
	}
	if (icpt_set_host(c, name) != 0) {
		icpt_close(c, "oom");
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
	snap = ic->ops->snapshot(ic->arg);
	/* Bindings act on intercepted ports only; terminateAll closes domain fronting. */
	bound =
	    (!c->peek && vault_snap_host_bound(snap, c->host)) || ic->ops->terminate_all(ic->arg);
	vault_snap_unref(snap);
	if (bound) {
		/* Handshake and first request head share one deadline. */
		icpt_deadline_arm(c, ic->cfg.head_timeout_s, "head_timeout");
		icpt_terminate(c);
		return;
	}
	icpt_deadline_stop(c);
	/* Only the hello is replayed until the server's answer says whether another follows. */
	c->hello_bytes = consumed;
	c->early_data = c->hello->has_early_data;
	c->retry = ICPT_RETRY_SERVER;
	free(c->hello);
	c->hello = NULL;
	if (!icpt_enter(c, ICPT_S_SPLICE))
		return;
	/* The hello stays in the socket (peeked): the splice takes it once upstream is there. */
	icpt_first_done(c);
	if ((why = icpt_up_start(c)) != NULL)
		icpt_up_fail(c, why);
}

/* Why a second ClientHello may not go on (see intercept_internal.h). */
const char *
intercept_retry_refusal(const char *host, const char *sni, size_t sni_len, bool ech)
{
	char canon[POLICY_NAME_MAX + 1];
	size_t clen;

	if (sni == NULL)
		return "hrr_no_sni";
	if (policy_name_canon((const uint8_t *)sni, sni_len, 0, canon, &clen) != POLICY_NAME_OK)
		return "hrr_sni_invalid";
	/* The checks, the leaf and the upstream are the first hello's host's only. */
	if (strcmp(canon, host) != 0)
		return "hrr_sni_changed";
	if (ech)
		return "hrr_ech_refused";
	return NULL;
}

/*
 * Every ClientHello OpenSSL processes on a terminated connection: the
 * peeked one, and the second one a HelloRetryRequest asks for (OpenSSL
 * takes it without comparing its SNI). Each must name the host the checks
 * were made for, by the same parser: a second hello naming another host
 * would get the first one's handshake (EX-086b), and a first one read
 * otherwise than tlspeek read it is a parser differential. Refused with
 * illegal_parameter (RFC 8446 4.1.2: only listed fields may change).
 */
int
icpt_client_hello_cb(SSL *ssl, int *al, void *arg)
{
	struct icpt_conn *c = SSL_get_app_data(ssl);
	char sni[TLSPEEK_MAX_HOSTNAME + 1];
	const unsigned char *ext = NULL;
	size_t len = 0, n = 0;
	const char *why = NULL;
	bool ech;

	*al = SSL_AD_ILLEGAL_PARAMETER;
	if (c == NULL) {
		*al = SSL_AD_INTERNAL_ERROR;
		return SSL_CLIENT_HELLO_ERROR;
	}
	c->hellos++;
	ech = SSL_client_hello_get0_ext(ssl, 0xfe0d, &ext, &len) == 1 ||
	      SSL_client_hello_get0_ext(ssl, 0xffce, &ext, &len) == 1;
	if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &ext, &len) != 1)
		why = "hrr_no_sni";
	else if (tlspeek_sni_ext(ext, len, sni, &n) != TLSPEEK_R_NONE)
		why = "hrr_sni_invalid";
	else
		why = intercept_retry_refusal(c->host, sni, n, ech);
	if (why == NULL)
		return SSL_CLIENT_HELLO_SUCCESS;
	icpt_reject(c, c->hellos == 1 ? "sni_parse_mismatch" : why);
	return SSL_CLIENT_HELLO_ERROR;
}

/* ---------------------------------------------------------------- peek */

/* RFC 9110 tchar: the bytes of a method token. */
static bool
icpt_tchar(uint8_t b)
{
	return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') ||
	       (b != '\0' && strchr("!#$%&'*+-.^_`|~", b) != NULL);
}

/*
 * What the first bytes of a peek connection are. Any TLS record type is
 * TLS (tlspeek then refuses what is not a ClientHello); a token and a
 * space is HTTP, whatever the method, so that an unknown method still
 * goes through the Host check; anything else is another protocol.
 */
enum intercept_peek
intercept_peek_classify(const uint8_t *data, size_t len)
{
	if (len == 0)
		return INTERCEPT_PEEK_MORE;
	if (data[0] >= 0x14 && data[0] <= 0x18)
		return INTERCEPT_PEEK_TLS;
	for (size_t i = 0; i < len && i <= ICPT_MAX_METHOD; i++) {
		if (data[i] == ' ')
			return i > 0 ? INTERCEPT_PEEK_HTTP : INTERCEPT_PEEK_OPAQUE;
		if (!icpt_tchar(data[i]))
			return INTERCEPT_PEEK_OPAQUE;
	}
	return len > ICPT_MAX_METHOD ? INTERCEPT_PEEK_OPAQUE : INTERCEPT_PEEK_MORE;
}

/* Forget the server-first probe: its socket goes, a late one is closed on arrival. */
static void
icpt_probe_drop(struct icpt_conn *c)
{
	c->probing = false;
	c->probe_up = false;
	if (c->ev_probe != NULL)
		evtimer_del(c->ev_probe);
	if (c->usock != NULL) {
		bufferevent_free(c->usock);
		c->usock = NULL;
	}
	icpt_upfd_sync(c);
}

/* Neither TLS nor HTTP: the filter chain allowed this port, pass the bytes on. */
static void
icpt_peek_opaque(struct icpt_conn *c)
{
	const char *why;

	if (!icpt_enter(c, ICPT_S_SPLICE))
		return;
	icpt_deadline_stop(c);
	if (c->ev_probe != NULL)
		evtimer_del(c->ev_probe);
	if (icpt_first_to_craw(c) != 0)
		return;
	bufferevent_setcb(c->craw, NULL, NULL, icpt_splice_event_cb, c);
	icpt_log(c, INTERCEPT_L_DEBUG, "conn_opaque",
	    c->first == 0 ? "server_first" : "not_tls_http", 0);
	if (c->probe_up)
		icpt_splice_start(c);
	else if (!c->probing && (why = icpt_up_start(c)) != NULL)
		icpt_up_fail(c, why);
	/* else the probe's socket callbacks start the splice */
}

/* The server spoke before the client: a server-first protocol (SSH, SMTP...). */
static void
icpt_probe_read_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_conn *c = arg;

	if (c->state == ICPT_S_PEEK && c->first == 0) {
		icpt_peek_opaque(c);
		return;
	}
	/* The client's first bytes are still undecided: hold the server's, read no more. */
	bufferevent_disable(bev, EV_READ);
}

/* The probe's socket connected (wait for the server) or failed. */
static void
icpt_probe_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct icpt_conn *c = arg;

	if (what & BEV_EVENT_CONNECTED) {
		c->probe_up = true;
		if (c->state == ICPT_S_SPLICE)
			icpt_splice_start(c);
		else
			bufferevent_enable(bev, EV_READ);
		return;
	}
	if (c->state == ICPT_S_SPLICE)
		icpt_up_fail(
		    c, (what & BEV_EVENT_TIMEOUT) ? "upstream_timeout" : "upstream_connect_failed");
	else
		icpt_close(c, "upstream_closed_in_peek");
}

/* A marked socket for the probe: connect it; nothing of the client is sent yet. */
static void
icpt_probe_sock_take(int fd, struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	if (!c->probing || (c->state != ICPT_S_PEEK && c->state != ICPT_S_SPLICE)) {
		if (fd >= 0)
			close(fd);
		return;
	}
	if (fd < 0 ||
	    (c->usock = bufferevent_socket_new(ic->base, fd, BEV_OPT_CLOSE_ON_FREE)) == NULL) {
		if (fd >= 0)
			close(fd);
		if (c->state == ICPT_S_SPLICE)
			icpt_up_fail(c, "upstream_socket_unavailable");
		else
			c->probing = false; /* the client may still speak first */
		return;
	}
	icpt_timeouts(c->usock, ic->cfg.connect_timeout_s, 0);
	if (icpt_dial(c, icpt_probe_read_cb, icpt_probe_event_cb) != 0)
		icpt_probe_event_cb(c->usock, BEV_EVENT_ERROR, c);
}

static void
icpt_probe_sock_cb(int fd, int err, void *arg)
{
	(void)err;
	icpt_sock_arrive(arg, fd, icpt_probe_sock_take);
}

/* The client stayed silent: connect upstream so that a server-first protocol can start. */
static void
icpt_probe_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_conn *c = arg;
	struct intercept *ic = c->ic;
	int family;

	if (c->state != ICPT_S_PEEK || c->probing || c->first > 0)
		return;
	if ((family = icpt_dial_family(c)) == 0)
		return; /* no proxy address: the client's first bytes fail the connection */
	if (!icpt_fd_room(ic, c, 1))
		return; /* no descriptor to spare: the client must speak first */
	c->probing = true;
	c->sockreqs++;
	c->upreqs++;
	if (ic->ops->get_upstream_socket(ic->arg, family, icpt_probe_sock_cb, c) != 0) {
		c->sockreqs--;
		c->upreqs--;
		c->probing = false;
	}
	icpt_upfd_sync(c);
}

/*
 * Plain HTTP: a native leg takes the workload's socket (its bytes are
 * still in it) and the relay starts.
 */
static void
icpt_first_to_http(struct icpt_conn *c)
{
	icpt_first_done(c);
	c->cl = icpt_leg_new(c->ic->base, c->cfd, NULL, ICPT_LEG_PLAIN);
	if (c->cl == NULL) {
		c->cfd = -1;
		icpt_close(c, "oom");
		return;
	}
	icpt_http_start(c);
}

/* The first bytes of a peek connection decide its path. */
static void
icpt_peek_step(struct icpt_conn *c, short what)
{
	ssize_t n = icpt_first_peek(c, ICPT_MAX_METHOD + 1);

	if (n == -1)
		return;
	if (n <= 0) {
		icpt_close(c, "client_closed_in_peek");
		return;
	}
	switch (intercept_peek_classify(icpt_first_buf, (size_t)n)) {
	case INTERCEPT_PEEK_MORE:
		if (what & EV_CLOSED)
			icpt_close(c, "client_closed_in_peek");
		return;
	case INTERCEPT_PEEK_TLS:
		icpt_probe_drop(c);
		if (!icpt_enter(c, ICPT_S_HELLO))
			return;
		c->tls = true;
		c->hello = malloc(sizeof(*c->hello));
		if (c->hello == NULL) {
			icpt_close(c, "oom");
			return;
		}
		icpt_hello_step(c, what);
		return;
	case INTERCEPT_PEEK_HTTP:
		icpt_probe_drop(c);
		if (!icpt_enter(c, ICPT_S_HTTP))
			return;
		icpt_deadline_arm(c, c->ic->cfg.head_timeout_s, "head_timeout");
		if (c->state == ICPT_S_HTTP)
			icpt_first_to_http(c);
		return;
	case INTERCEPT_PEEK_OPAQUE:
		icpt_peek_opaque(c);
		return;
	}
}

/* The workload's socket is readable (edge), or it half-closed: peek again. */
static void
icpt_first_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_conn *c = arg;

	(void)fd;
	if (c->state == ICPT_S_PEEK)
		icpt_peek_step(c, what);
	else if (c->state == ICPT_S_HELLO)
		icpt_hello_step(c, what);
}

/* Peek at the workload's bytes as they come (edge-triggered, and its half-close). */
static void
icpt_first_watch(struct icpt_conn *c)
{
	c->ev_first = event_new(
	    c->ic->base, c->cfd, EV_READ | EV_ET | EV_CLOSED | EV_PERSIST, icpt_first_cb, c);
	if (c->ev_first == NULL || event_add(c->ev_first, NULL) != 0)
		icpt_close(c, "oom");
}

/* ---------------------------------------------------------------- accept */

/* At the cap: close at once, count, and log at most one line a second. */
static void
icpt_limit_refuse(struct intercept *ic, int fd)
{
	struct timespec now;

	close(fd);
	icpt_count(ic, INTERCEPT_M_LIMITED, 1);
	icpt_count(ic, INTERCEPT_M_REJECTED, 1);
	ic->limit_unlogged++;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (ic->limit_logged != 0 && now.tv_sec - ic->limit_logged < ICPT_LIMIT_LOG_S)
		return;
	struct intercept_event ev = {.level = INTERCEPT_L_WARN,
	    .event = "conn_limit",
	    .reason = "max_conns",
	    .count = ic->limit_unlogged};
	ic->ops->log(ic->arg, &ev);
	ic->limit_logged = now.tv_sec > 0 ? now.tv_sec : 1;
	ic->limit_unlogged = 0;
}

/* The pre-NAT destination from conntrack. */
static int
icpt_orig_dst(struct icpt_conn *c, int fd, int lfamily)
{
	socklen_t len = sizeof(c->dst);

	memset(&c->dst, 0, sizeof(c->dst));
	if (lfamily == AF_INET) {
		struct sockaddr_in *sin = &c->dst.sin;

		len = sizeof(*sin);
		if (getsockopt(fd, SOL_IP, ICPT_SO_ORIGINAL_DST, sin, &len) != 0 ||
		    sin->sin_family != AF_INET)
			return -1;
		c->family = AF_INET;
		memcpy(c->addr, &sin->sin_addr, 4);
		c->port = ntohs(sin->sin_port);
	} else {
		struct sockaddr_in6 *sin6 = &c->dst.sin6;

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
	if (ic->cfg.peek_port != 0 && c->port == ic->cfg.peek_port)
		return "orig_dst_listener";
	return intercept_self_reason(c->family, c->addr, c->port, ic->cfg.tls_port,
	    ic->cfg.plain_port, (const uint8_t(*)[16])ic->local, ic->local_fam, ic->nlocal);
}

/* A redirected connection: find where it was going and start its checks. */
void
icpt_accept_cb(
    struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
	struct intercept *ic = arg;
	struct sockaddr_storage ls;
	socklen_t lslen = sizeof(ls);
	struct icpt_conn *c;
	const char *self;
	uint16_t lport;
	bool tls;

	if (getsockname(fd, (struct sockaddr *)&ls, &lslen) != 0) {
		close(fd);
		return;
	}
	lport = ntohs(ls.ss_family == AF_INET ? ((struct sockaddr_in *)&ls)->sin_port
	                                      : ((struct sockaddr_in6 *)&ls)->sin6_port);
	tls = lport == ic->cfg.tls_port;
	icpt_count(ic, INTERCEPT_M_ACCEPTED, 1);
	/* The cap keeps descriptors for the API, DNS and the channel: room for c and its upstream. */
	if (ic->nconns >= ic->cfg.max_conns || !icpt_fd_room(ic, NULL, 2)) {
		icpt_limit_refuse(ic, fd);
		return;
	}
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		icpt_count(ic, INTERCEPT_M_REJECTED, 1);
		close(fd);
		return;
	}
	c->ic = ic;
	c->host = icpt_nohost;
	c->id = ++ic->next_id;
	c->tls = tls;
	c->peek = ic->cfg.peek_port != 0 && lport == ic->cfg.peek_port;
	c->state = c->peek ? ICPT_S_PEEK : ICPT_S_HELLO;
	icpt_nodelay(fd);
	c->cfd = fd;
	c->next = ic->conns;
	if (ic->conns != NULL)
		ic->conns->prev = c;
	ic->conns = c;
	ic->nconns++;
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
	if (c->peek) {
		/* The whole classification and ClientHello share the hello deadline. */
		icpt_deadline_arm(c, ic->cfg.hello_timeout_s, "hello_timeout");
		if (c->state == ICPT_S_CLOSED)
			return;
		c->ev_probe = evtimer_new(ic->base, icpt_probe_cb, c);
		if (c->ev_probe == NULL) {
			icpt_close(c, "oom");
			return;
		}
		struct timeval pt = {ICPT_PEEK_MS / 1000, (ICPT_PEEK_MS % 1000) * 1000};
		evtimer_add(c->ev_probe, &pt);
		icpt_first_watch(c);
		return;
	}
	if (!tls) {
		if (!icpt_enter(c, ICPT_S_HTTP))
			return;
		/* The whole first request head within the head deadline. */
		icpt_deadline_arm(c, ic->cfg.head_timeout_s, "head_timeout");
		if (c->state == ICPT_S_CLOSED)
			return;
		icpt_first_to_http(c);
		return;
	}
	c->hello = malloc(sizeof(*c->hello));
	if (c->hello == NULL) {
		icpt_close(c, "oom");
		return;
	}
	/* A deadline for the whole ClientHello: one byte a second does not extend it. */
	icpt_deadline_arm(c, ic->cfg.hello_timeout_s, "hello_timeout");
	if (c->state == ICPT_S_CLOSED)
		return;
	icpt_first_watch(c);
}
