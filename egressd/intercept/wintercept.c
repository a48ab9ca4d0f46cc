/*
 * wintercept: interception glue (intercept process). Holds the sandbox CA's
 * certificate (its private key stays in the parent, which mints every leaf
 * for the leaf cache's key on a miss), the leaf cache and a pool of marked
 * TCP sockets, and answers the interceptor's questions from the intercept process's
 * state: is this name allowed, was this address learned for it (or covered
 * by an IP rule), what is the active vault revision. It must never give
 * the interceptor an unmarked socket.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <event2/event.h>

#include "certs/ca.h"
#include "certs/leaf.h"
#include "egressd/common/httpurl.h"
#include "egressd/common/learnmap.h"
#include "egressd/common/log.h"
#include "egressd/common/logagg.h"
#include "egressd/child/sockpool.h"
#include "egressd/child/wchan.h"
#include "egressd/intercept/wintercept.h"
#include "egressd/child/wstate.h"
#include "policy/policy.h"
#include "vault/intercept.h"
#include "vault/snap.h"

/* Marked TCP sockets kept ready per family. */
#define WINTERCEPT_POOL 8
/* Seconds between checks for an ended log-aggregation window. */
#define WINTERCEPT_AGG_TICK_S 5

struct wintercept {
	struct wstate *ws;
	const struct ca *ca; /* wstate_ca(): the parent's, or the one it pushed after a renewal */
	struct leaf_cache *leaves;
	struct sockpool *pool;
	struct intercept *ic;
	struct intercept_ops ops;            /* wintercept_ops, for this CA */
	struct wintercept_leafreq *leafreqs; /* asked of the parent, not answered */
	struct logagg *agg_ca;               /* client_rejected_ca: one line per host and window */
	struct logagg *agg_ev;               /* deny webhook events: one per host and window */
	struct event *ev_agg;
};

/*
 * A connection waiting for a leaf. One per host asks the parent (id set);
 * the others waiting for the same host (id 0) get the same answer, so
 * that a burst of first connections to a host costs one leaf, not one
 * each (nor a reply each through the parent's channel).
 */
struct wintercept_leafreq {
	struct wintercept_leafreq *prev, *next;
	struct wintercept *w;
	uint32_t id; /* of the request to the parent; 0: waits for another's */
	intercept_leaf_cb cb;
	void *arg;
	char host[CHAN_NAME_LEN];
};

static bool
wintercept_sni_allowed(void *arg, const char *canon)
{
	struct wintercept *w = arg;
	struct policy_decision d;

	policy_decide_name(wstate_policy(w->ws), canon, &d);
	return d.action == POLICY_ALLOW;
}

static bool
wintercept_dst_ok(void *arg, const char *canon, int family, const uint8_t *addr, uint16_t port)
{
	struct wintercept *w = arg;
	struct policy_decision d;
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (learnmap_has(wstate_learned(w->ws), canon, family, addr, port, ts.tv_sec))
		return true;
	/* An explicit IP allow rule (or defaultAction allow) covers the address too. */
	policy_decide_addr(wstate_policy(w->ws), family, addr, port, IPPROTO_TCP, &d);
	return d.action == POLICY_ALLOW;
}

/* terminateAll from the policy, or forced on by EGRESSD_TERMINATE_ALL. */
static bool
wintercept_terminate_all(void *arg)
{
	struct wintercept *w = arg;

	return wstate_cfg(w->ws)->terminate_all || policy_terminate_all(wstate_policy(w->ws));
}

static int
wintercept_socket(void *arg, int family, intercept_socket_cb cb, void *cbarg)
{
	struct wintercept *w = arg;

	return sockpool_get(w->pool, family, cb, cbarg);
}

static struct vault_snap *
wintercept_snapshot(void *arg)
{
	struct wintercept *w = arg;

	return wstate_vault(w->ws) == NULL ? NULL : vault_snap_ref(wstate_vault(w->ws));
}

static void
wintercept_count(void *arg, enum intercept_metric m, uint64_t n)
{
	struct metrics *mt = wstate_metrics(((struct wintercept *)arg)->ws);

	switch (m) {
	case INTERCEPT_M_ACCEPTED:
		mt->conn_accepted += n;
		break;
	case INTERCEPT_M_REJECTED:
		mt->conn_rejected += n;
		break;
	case INTERCEPT_M_PASSTHROUGH:
		mt->conn_passthrough += n;
		break;
	case INTERCEPT_M_TERMINATED:
		mt->conn_terminated += n;
		break;
	case INTERCEPT_M_INJECTED:
		mt->inject_total += n;
		break;
	case INTERCEPT_M_REDACTED:
		mt->redact_total += n;
		break;
	case INTERCEPT_M_LIMITED:
		mt->conn_limited += n;
		break;
	case INTERCEPT_M_RESUMED:
		mt->client_tls_resumed += n;
		break;
	case INTERCEPT_M_TICKET_REFUSED:
		mt->client_ticket_refused += n;
		break;
	case INTERCEPT_M_UPSTREAM_TLS:
		mt->upstream_tls += n;
		break;
	case INTERCEPT_M_UPSTREAM_RESUMED:
		mt->upstream_tls_resumed += n;
		break;
	case INTERCEPT_M_H2:
		mt->h2_conns += n;
		break;
	case INTERCEPT_M_H2_CALM:
		mt->h2_calm += n;
		break;
	case INTERCEPT_M_REQUESTS_RETRIED:
		mt->requests_retried += n;
		break;
	case INTERCEPT_M_TRIMMED:
		mt->conns_trimmed += n;
		break;
	case INTERCEPT_M_UPSTREAM_REUSED:
		mt->upstream_reused += n;
		break;
	default:
		break;
	}
}

static int64_t
wintercept_now_s(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)now.tv_sec;
}

/* Summaries of windows that ended are written within a tick. */
static void
wintercept_agg_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wintercept *w = arg;

	logagg_flush(w->agg_ca, wintercept_now_s(), false);
	logagg_flush(w->agg_ev, wintercept_now_s(), false);
}

/*
 * A refusal for the deny webhook: connections the intercept refused, and
 * requests to a bound host the vault refused (403). One per host (or
 * destination) and window, as the DNS proxy's; the log line is always written.
 */
static void
wintercept_event(struct wintercept *w, const struct intercept_event *ev)
{
	enum chan_event_kind kind;
	char key[LOGAGG_MAX_KEY + 1];

	if (strcmp(ev->event, "conn_reject") == 0)
		kind = CHAN_EVENT_CONN_DENY;
	else if (strcmp(ev->event, "http_reject") == 0 && ev->status == 403 && ev->reason != NULL &&
	         strcmp(ev->reason, "host_denied") != 0 &&
	         strcmp(ev->reason, "orig_dst_not_in_resolved_set") != 0)
		kind = CHAN_EVENT_VAULT_DENY; /* those two were a conn_reject already */
	else
		return;
	if (ev->host != NULL)
		snprintf(key, sizeof(key), "%d %s", (int)kind, ev->host);
	else if (ev->addr != NULL && (ev->family == AF_INET || ev->family == AF_INET6)) {
		char a[INET6_ADDRSTRLEN];

		inet_ntop(ev->family, ev->addr, a, sizeof(a));
		snprintf(key, sizeof(key), "%d %s %u", (int)kind, a, ev->port);
	} else
		return;
	if (logagg_note(w->agg_ev, key, wintercept_now_s()) != LOGAGG_LOG)
		return;
	wstate_event(w->ws, kind, ev->host, ev->addr != NULL ? ev->family : 0, ev->addr, ev->port,
	    ev->reason != NULL ? ev->reason : "refused");
}

static void
wintercept_log(void *arg, const struct intercept_event *ev)
{
	static const enum log_level lv[] = {
	    [INTERCEPT_L_DEBUG] = LOG_DEBUG,
	    [INTERCEPT_L_INFO] = LOG_INFO,
	    [INTERCEPT_L_WARN] = LOG_WARN,
	};
	struct wintercept *w = arg;
	struct log_line l;

	/* The workload can fail handshakes at will: the first per host and window is written. */
	if (strcmp(ev->event, "client_rejected_ca") == 0 &&
	    logagg_note(w->agg_ca, ev->host != NULL ? ev->host : "", wintercept_now_s()) !=
	        LOGAGG_LOG)
		return;

	if (wstate_cfg(w->ws)->deny_webhook[0] != '\0')
		wintercept_event(w, ev);
	log_begin(&l, lv[ev->level], "vault", ev->event);
	log_uint(&l, "conn", ev->conn);
	if (ev->reason != NULL)
		log_str(&l, "reason", ev->reason);
	if (ev->host != NULL)
		log_str(&l, "host", ev->host);
	if (ev->method != NULL)
		log_str(&l, "method", ev->method);
	if (ev->binding != NULL)
		log_str(&l, "binding", ev->binding);
	if (ev->credential != NULL)
		log_str(&l, "credential", ev->credential);
	if (ev->status != 0)
		log_int(&l, "status", ev->status);
	if (ev->bytes != 0)
		log_uint(&l, "bytes", ev->bytes);
	if (ev->count != 0) /* conn_limit: refusals since its previous line */
		log_uint(
		    &l, strcmp(ev->event, "conn_limit") == 0 ? "refused" : "matches", ev->count);
	if (ev->addr != NULL && (ev->family == AF_INET || ev->family == AF_INET6)) {
		struct policy_addr a;
		char buf[POLICY_ADDR_TEXT_MAX];

		policy_addr_from_bytes(ev->family, ev->addr, &a);
		a.prefix = ev->family == AF_INET ? 32 : 128;
		policy_addr_format(&a, buf, sizeof(buf));
		log_str(&l, "dst", buf);
		log_uint(&l, "dport", ev->port);
	}
	log_end(&l);
}

static void
wintercept_leaf_link(struct wintercept *w, struct wintercept_leafreq *r)
{
	r->prev = NULL;
	r->next = w->leafreqs;
	if (r->next != NULL)
		r->next->prev = r;
	w->leafreqs = r;
}

static void
wintercept_leaf_unlink(struct wintercept_leafreq *r)
{
	if (r->prev != NULL)
		r->prev->next = r->next;
	else
		r->w->leafreqs = r->next;
	if (r->next != NULL)
		r->next->prev = r->prev;
}

static void
wintercept_leaf_reply(const union chan_msg *reply, int fd, void *arg)
{
	struct wintercept_leafreq *r = arg, *o, *next;
	struct wintercept *w = r->w;
	X509 *x = NULL;

	(void)fd;
	wintercept_leaf_unlink(r);
	if (reply->hdr.type == CHAN_LEAF_REP && reply->leaf_rep.err == 0) {
		const unsigned char *p = reply->leaf_rep.der;

		x = d2i_X509(NULL, &p, (long)reply->leaf_rep.der_len);
		/* Only a leaf for this host, this process's key and our CA is kept. */
		if (x == NULL || leaf_cache_put(w->leaves, r->host, strlen(r->host), x) != 0) {
			log_msg(LOG_ERROR, "vault", "leaf_error",
			    "the parent's leaf for %s does not match the request", r->host);
			X509_free(x);
			x = NULL;
		}
	}
	/* Those waiting for the same host first, each with its own reference. */
	for (o = w->leafreqs; o != NULL; o = next) {
		next = o->next;
		if (o->id != 0 || strcmp(o->host, r->host) != 0)
			continue;
		wintercept_leaf_unlink(o);
		if (x != NULL)
			X509_up_ref(x);
		o->cb(x, o->arg);
		free(o);
		/* A callback may have closed connections, never another's request. */
		next = w->leafreqs;
	}
	r->cb(x, r->arg);
	free(r);
}

/* Ask the parent for a leaf (the CA key never enters a child). */
static int
wintercept_get_leaf(void *arg, const char *host, intercept_leaf_cb cb, void *cbarg)
{
	struct wintercept *w = arg;
	struct wintercept_leafreq *r;
	struct chan_leaf_req *m;
	int n;

	if (strlen(host) >= CHAN_NAME_LEN || (r = calloc(1, sizeof(*r))) == NULL)
		return -1;
	r->w = w;
	r->cb = cb;
	r->arg = cbarg;
	snprintf(r->host, sizeof(r->host), "%s", host);
	for (struct wintercept_leafreq *o = w->leafreqs; o != NULL; o = o->next) {
		if (o->id != 0 && strcmp(o->host, host) == 0) {
			wintercept_leaf_link(w, r); /* answered with o */
			return 0;
		}
	}
	if ((m = calloc(1, sizeof(*m))) == NULL) {
		free(r);
		return -1;
	}
	n = leaf_cache_pubkey_der(w->leaves, m->key, sizeof(m->key));
	m->hdr.type = CHAN_LEAF_REQ;
	m->hdr.id = wchan_id(wstate_chan(w->ws));
	m->key_len = (uint16_t)(n > 0 ? n : 0);
	snprintf(m->name, sizeof(m->name), "%s", host);
	r->id = m->hdr.id;
	if (n <= 0 || wchan_request(wstate_chan(w->ws), m, wintercept_leaf_reply, r) != 0) {
		free(m);
		free(r);
		return -1;
	}
	free(m);
	wintercept_leaf_link(w, r);
	return 0;
}

/* Leaves come from the parent: the CA key is not here. */
static const struct intercept_ops wintercept_ops = {
    .sni_allowed = wintercept_sni_allowed,
    .dst_ok = wintercept_dst_ok,
    .get_upstream_socket = wintercept_socket,
    .snapshot = wintercept_snapshot,
    .count = wintercept_count,
    .log = wintercept_log,
    .terminate_all = wintercept_terminate_all,
    .get_leaf = wintercept_get_leaf,
};

/* Start interception (see wintercept.h). */
struct wintercept *
wintercept_new(struct wstate *ws, char *err, size_t errlen)
{
	const struct config *cfg = wstate_cfg(ws);
	struct wintercept *w = calloc(1, sizeof(*w));
	struct intercept_config icfg;

	if (w == NULL) {
		snprintf(err, errlen, "intercept: out of memory");
		return NULL;
	}
	w->ws = ws;
	/* Upstream verification is never turned off: the secret must reach only the real host. */
	if (cfg->ssl_insecure)
		log_msg(LOG_WARN, "vault", "intercept_config",
		    "ssl-insecure is ignored: upstream certificates are always verified");
	/*
	 * The parent's CA (made or loaded, and exported, before any child
	 * ran), shared by every intercept incarnation; its private key stayed
	 * in the parent, which mints the leaves.
	 */
	w->ca = wstate_ca(ws);
	if (w->ca == NULL) {
		snprintf(err, errlen, "intercept: no sandbox CA from the parent");
		goto fail;
	}
	w->leaves = leaf_cache_new(w->ca, NULL, err, errlen);
	if (w->leaves == NULL)
		goto fail;
	w->pool = sockpool_new(wstate_base(ws), wstate_chan(ws), SOCK_STREAM, WINTERCEPT_POOL,
	    SOCKPOOL_V4 | SOCKPOOL_V6);
	if (w->pool == NULL) {
		snprintf(err, errlen, "intercept: socket pool: out of memory");
		goto fail;
	}
	memset(&icfg, 0, sizeof(icfg));
	icfg.tls_port = cfg->tls_port;
	icfg.plain_port = cfg->plain_port;
	icfg.peek_port = cfg->peek_port;
	icfg.max_conns = cfg->intercept_max_conns;
	/* This process serves interception only: no other cap shares its descriptors. */
	icfg.fd_reserve = 0;
	icfg.hello_timeout_s = cfg->hello_timeout;
	icfg.head_timeout_s = cfg->head_timeout;
	icfg.keepalive_timeout_s = cfg->keepalive_timeout;
	icfg.upstream_idle_max = cfg->upstream_idle_max;
	icfg.no_http2 = !cfg->http2;
	icfg.leaves = w->leaves;
	icfg.upstream_ca = cfg->upstream_ca;
	/* The parent's sockets, in the order intercept_config wants (TLS, plain, peek). */
	icfg.listen_fds = &cfg->listen.fd[LISTEN_TLS4];
	icfg.upstream_store = cfg->upstream_store;
	{
		struct config_proxy px;

		config_proxy(cfg, &px);
		if (px.set) {
			char a[INET6_ADDRSTRLEN];

			if (px.family != 0) {
				icfg.proxy_len =
				    httpurl_sockaddr(px.family, px.addr, px.port, &icfg.proxy);
				inet_ntop(px.family, px.addr, a, sizeof(a));
			} else {
				snprintf(icfg.proxy_name, sizeof(icfg.proxy_name), "%s", px.name);
				icfg.proxy_port = px.port;
				snprintf(a, sizeof(a), "%s", "");
			}
			icfg.proxy_auth = cfg->upstream_proxy_auth;
			icfg.proxy_tls = px.tls;
			/*
			 * By name over plain HTTP, the Proxy-Authorization goes to
			 * whatever address DNS gives: say so (TLS verifies the name).
			 */
			if (px.family == 0 && !px.tls && cfg->upstream_proxy_auth[0] != '\0')
				log_msg(LOG_WARN, "intercept", "upstream_proxy_auth_cleartext",
				    "the Proxy-Authorization goes in clear text to the addresses "
				    "DNS "
				    "gives for %s; use https:// or the proxy's IP address",
				    px.name);
			/* Never the Proxy-Authorization value: only whether there is one. */
			log_msg(LOG_INFO, "intercept", "upstream_proxy",
			    "every upstream connection goes through CONNECT to %s port %u%s%s",
			    px.family != 0 ? a : px.name, (unsigned)px.port,
			    px.tls ? " over TLS" : "",
			    cfg->upstream_proxy_auth[0] != '\0' ? " (with Proxy-Authorization)"
			                                        : "");
		}
	}
	w->agg_ca = logagg_new("vault", "client_rejected_ca", LOG_INFO, 0, 0);
	w->agg_ev = logagg_new("report", "deny_event", LOG_DEBUG, 0, 0);
	if (w->agg_ca == NULL || w->agg_ev == NULL) {
		snprintf(err, errlen, "intercept: log aggregation: out of memory");
		goto fail;
	}
	{
		struct timeval tv = {WINTERCEPT_AGG_TICK_S, 0};

		w->ev_agg = event_new(wstate_base(ws), -1, EV_PERSIST, wintercept_agg_cb, w);
		if (w->ev_agg == NULL || event_add(w->ev_agg, &tv) != 0) {
			snprintf(err, errlen, "intercept: log aggregation timer");
			goto fail;
		}
	}
	w->ops = wintercept_ops;
	w->ic = intercept_new(wstate_base(ws), &w->ops, w, &icfg, err, errlen);
	if (w->ic == NULL)
		goto fail;
	{
		size_t n;
		const struct chan_learn *l = wstate_proxy(ws, &n);

		/* The proxy's addresses the parent pushed before the service started. */
		if (n > 0 && wintercept_proxy(w, l, n) != 0) {
			snprintf(err, errlen, "intercept: the proxy's addresses are refused");
			goto fail;
		}
	}
	{
		char fp[65];

		ca_fingerprint(w->ca, fp);
		log_msg(LOG_INFO, "vault", "intercept_ready",
		    "listening on %u (tls), %u (plain) and %u (peek), at most %zu connections; CA "
		    "sha256 %s exported to %s",
		    cfg->tls_port, cfg->plain_port, cfg->peek_port, intercept_max_conns(w->ic), fp,
		    cfg->ca_export[0] ? cfg->ca_export : "(nowhere)");
	}
	return w;
fail:
	wintercept_free(w);
	return NULL;
}

int
wintercept_proxy(struct wintercept *w, const struct chan_learn *l, size_t n)
{
	struct sockaddr_storage a[INTERCEPT_MAX_PROXY_ADDRS];
	socklen_t len[INTERCEPT_MAX_PROXY_ADDRS];
	struct config_proxy px;

	config_proxy(wstate_cfg(w->ws), &px);
	if (!px.set || px.family != 0 || n == 0 || n > INTERCEPT_MAX_PROXY_ADDRS)
		return EINVAL;
	for (size_t i = 0; i < n; i++)
		len[i] = httpurl_sockaddr(l[i].family, l[i].addr, px.port, &a[i]);
	return intercept_set_proxy(w->ic, a, len, n) == 0 ? 0 : EINVAL;
}

/* Stop interception; the pool goes first so no socket callback outlives it. */
void
wintercept_free(struct wintercept *w)
{
	if (w == NULL)
		return;
	sockpool_free(w->pool);
	/* A leaf reply after this point finds its request cancelled. */
	while (w->leafreqs != NULL) {
		struct wintercept_leafreq *r = w->leafreqs;

		wintercept_leaf_unlink(r);
		if (r->id != 0)
			wchan_cancel(wstate_chan(w->ws), r->id);
		free(r);
	}
	intercept_free(w->ic);
	if (w->ev_agg != NULL)
		event_free(w->ev_agg);
	logagg_free(w->agg_ca); /* writes the summaries still pending */
	logagg_free(w->agg_ev);
	leaf_cache_free(w->leaves);
	free(w);
}

/* True once the listeners are up (the parent exported the CA before). */
bool
wintercept_ready(const struct wintercept *w)
{
	return w != NULL && intercept_listening(w->ic);
}

/* A renewed CA: issue from it; the old one's cached leaves go. */
int
wintercept_ca_changed(struct wintercept *w)
{
	char err[256];

	if (leaf_cache_set_ca(w->leaves, wstate_ca(w->ws), err, sizeof(err)) != 0) {
		log_msg(LOG_ERROR, "vault", "ca_error", "%s", err);
		return -1;
	}
	w->ca = wstate_ca(w->ws);
	intercept_tickets_reset(w->ic);
	intercept_pool_flush(w->ic);
	return 0;
}

/* The CA certificate PEM. */
void
wintercept_state_changed(struct wintercept *w)
{
	intercept_tickets_reset(w->ic);
	intercept_pool_flush(w->ic);
}

const char *
wintercept_ca_pem(const struct wintercept *w, size_t *lenp)
{
	if (w == NULL || w->ca == NULL)
		return NULL;
	return ca_pem_view(w->ca, lenp);
}
