/*
 * DNS proxy (dns process). Every query of the workload arrives here by
 * the nft redirect of port 53. A denied name is answered NXDOMAIN locally
 * with no upstream packet (a query is itself an exfiltration channel). An
 * allowed name is resolved with a fresh query of ours (new id, only the
 * question, our EDNS) through c-ares, whose sockets are marked ones from
 * the parent: one channel per upstream, tried in order over the healthy
 * ones (dnshealth.c, probed every interval). Answer addresses that point
 * inside (loopback, link-local, metadata, ourselves, optionally private
 * ranges) are removed; the rest are learned by the parent, and only once
 * it has acknowledged them does the client get its answer. The decision is made on the name the client
 * asked for; CNAME targets are followed for the answer but not re-checked.
 */
#include <arpa/inet.h>
#include <ares.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/rand.h>

#include "egressd/dns/dnshealth.h"
#include "egressd/dns/dnsproxy.h"
#include "egressd/dns/dnsvia.h"
#include "egressd/dns/pxname.h"
#include "egressd/dns/dnstunnel.h"
#include "egressd/dns/dnswire.h"
#include "egressd/common/learnmap.h"
#include "egressd/common/log.h"
#include "egressd/common/logagg.h"
#include "egressd/dns/kreject.h"
#include "egressd/child/sockpool.h"
#include "egressd/common/ownnet.h"
#include "egressd/child/wchan.h"
#include "egressd/child/wstate.h"
#include "policy/addrclass.h"
#include "policy/policy.h"

#define DNSPROXY_UDP_BURST 64
/* Sockets per c-ares channel (one server: its UDP socket and TCP ones). */
#define DNSPROXY_ACHAN_FDS 16

enum dnsproxy_kind {
	DNSQ_UDP,
	DNSQ_TCP,
};

struct dnsproxy_aresfd {
	int fd; /* -1: free */
	struct event *ev;
};

struct dnstcp;

struct dnsq {
	struct dnsproxy *d;
	enum dnsproxy_kind kind;
	struct dnswire_query q;
	int udpfd;
	struct sockaddr_storage peer;
	socklen_t peerlen;
	struct dnstcp *tcp;
	struct timespec start;
	uint8_t *reply;
	size_t reply_len;
	struct chan_learn *learns; /* DNSPROXY_MAX_LEARN, while an answer is learned */
	size_t nlearn;
	uint16_t ports[DNSPROXY_MAX_LEARN];
	size_t nports;
	size_t naddrs_ok; /* addresses accepted so far by the predicate */
	size_t max_addrs;
	bool block_private;
	struct policy *policy; /* the policy the decision was made with */
};

/*
 * A DNS-over-TCP client. The read deadline follows the state, so a client
 * that sends one byte at a time cannot keep the connection: a query must
 * arrive whole within DNSPROXY_TCP_QUERY_S of its first byte, and an idle
 * connection lasts DNSPROXY_TCP_IDLE_S. Neither is reset by each byte.
 */
enum dnstcp_state {
	DNSTCP_IDLE,    /* nothing buffered, nothing in flight: idle deadline */
	DNSTCP_READING, /* part of a query buffered: deadline from its first byte */
	/* Waiting for us (answers in flight, pipelining or output bound): no deadline. */
	DNSTCP_BUSY,
	DNSTCP_CLOSED, /* closed; freed when the last in-flight query lets go */
};

struct dnstcp {
	struct dnsproxy *d;
	struct bufferevent *bev;
	struct event *ev_deadline;
	enum dnstcp_state state;
	int refs;
	bool closed;
	bool paused; /* reading off until dnstcp_resume (pipelining or output bound) */
	int inflight;
};

struct dnsproxy {
	struct wstate *ws;
	struct dnstunnel *tunnel; /* distinct names per wildcard rule (dnstunnel.c) */
	struct dnsproxy_resolver_ops rops;
	void *resolver; /* rops.open's, or NULL */
	struct ares_addr_port_node nodes[DNSPROXY_MAX_UPSTREAMS];
	size_t nnodes;
	int udp[2];
	struct event *ev_udp[2];
	struct evconnlistener *tcp[2];
	struct sockpool *pool[2]; /* [stream]: marked sockets, UDP and TCP */
	struct addrclass_own own; /* the sandbox's own networks, read again on change */
	int ownfd;                /* told about address and route changes, or -1 */
	struct event *ev_own;
	size_t inflight;
	size_t ntcp;
	/* Deny-type log lines, aggregated per name and window (logagg.c). */
	struct logagg *agg_deny, *agg_nodata, *agg_filter, *agg_answer, *agg_tcp, *agg_upfail;
	/* The table's refusals the parent passes on (kreject.c). */
	struct kreject *kreject;
	struct event *ev_agg;
	bool want_v4, want_v6;
	void (*ready_cb)(void *arg);
	void *ready_arg;
	bool ready_sent;
	struct pxname *pxname; /* the chained proxy's name, when it is given by name */
	struct dnsvia *via;    /* DNS through the chained proxy, or NULL */
};

/*
 * One c-ares channel in the proxy's loop, with one server: the resolver
 * does its own failover over the healthy upstreams (dnshealth.c), so that
 * each upstream costs one exchange timeout at most and a silent one is
 * skipped by the next queries.
 */
struct dnsproxy_achan {
	struct dnsproxy_ares *r;
	size_t up;     /* index of its upstream */
	bool sock_bad; /* the pool had no marked socket: not the upstream's fault */
	ares_channel ch;
	struct event *ev_timer;
	struct dnsproxy_aresfd afds[DNSPROXY_ACHAN_FDS];
};

/* The c-ares resolver (dnsproxy_cares): a query and a probe channel per upstream. */
struct dnsproxy_ares {
	struct dnsproxy *d;
	struct dnshealth_settings set;
	struct dnshealth health;
	size_t n;
	struct dnsproxy_achan qch[DNSPROXY_MAX_UPSTREAMS];
	struct dnsproxy_achan pch[DNSPROXY_MAX_UPSTREAMS];
	bool probing[DNSPROXY_MAX_UPSTREAMS]; /* a probe in flight */
	struct event *ev_probe;
	bool all_down; /* none healthy (warned once until one is back) */
	bool closing;
};

_Static_assert(DNSHEALTH_MAX == DNSPROXY_MAX_UPSTREAMS, "one health slot per upstream");

/* One query through c-ares: the proxy's callback and the upstreams left to try. */
struct dnsproxy_ares_q {
	struct dnsproxy_ares *r;
	dnsproxy_answer_cb cb;
	void *arg;
	uint8_t *query;
	size_t len;
	size_t order[DNSPROXY_MAX_UPSTREAMS];
	size_t norder, at;
};

static bool dnsproxy_log_first(struct dnsproxy *d, struct logagg *a, const char *key);
struct policy_decision;
static bool dnsq_ports(struct dnsq *dq, const struct policy_decision *dec);
static void dnsproxy_ares_timer(struct dnsproxy_achan *c);

static double
dnsproxy_elapsed(const struct timespec *a)
{
	struct timespec b;

	clock_gettime(CLOCK_MONOTONIC, &b);
	return (double)(b.tv_sec - a->tv_sec) + (double)(b.tv_nsec - a->tv_nsec) / 1e9;
}

int64_t
dnsproxy_now_s(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)now.tv_sec;
}

/* --- Address classification ------------------------------------------ */

/*
 * Whether an answer address may be learned: policy/addrclass.c decides
 * what is inner (the same table as the kernel's deny sets), and the
 * sandbox's own networks (its subnets, addresses and gateways, in any
 * spelling) are never handed out either.
 */
bool
dnsproxy_addr_ok(
    const struct dnsproxy *d, int family, const unsigned char *addr, bool block_private)
{
	return !addrclass_refused(d != NULL ? &d->own : NULL, family, addr, block_private, NULL);
}

/*
 * The own networks, at start and again whenever addresses or routes
 * change. The kernel's deny sets (the parent follows the same changes)
 * are the enforcement and the parent refuses to learn them; this is the
 * first filter, so a failure is logged and the previous list is kept.
 */
static void
dnsproxy_own_networks(struct dnsproxy *d)
{
	struct addrclass_own own;
	char err[256];

	if (ownnet_scan(&own, err, sizeof(err)) != 0) {
		log_msg(LOG_WARN, "dns", "own_networks_error",
		    "own networks not read (the parent still refuses them): %s", err);
		return;
	}
	d->own = own;
}

static void
dnsproxy_own_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dnsproxy *d = arg;

	if (ownnet_watch_drain(d->ownfd))
		dnsproxy_own_networks(d);
}

/* --- Marked socket pool ----------------------------------------------- */

/* Ready once a marked UDP socket is there for every family of the resolvers. */
static void
dnsproxy_pool_ready_cb(void *arg)
{
	struct dnsproxy *d = arg;

	if (d->ready_sent || (d->want_v4 && sockpool_ready(d->pool[0], AF_INET) == 0) ||
	    (d->want_v6 && sockpool_ready(d->pool[0], AF_INET6) == 0))
		return;
	d->ready_sent = true;
	/* With a proxy given by name, ready once its first resolution is over. */
	if (d->pxname != NULL)
		pxname_start(d->pxname, d->ready_cb, d->ready_arg);
	else
		d->ready_cb(d->ready_arg);
}

void
dnsproxy_resolve(
    struct dnsproxy *d, const uint8_t *query, size_t len, dnsproxy_answer_cb cb, void *arg)
{
	d->rops.send(d->resolver, query, len, cb, arg);
}

/* c-ares asks for a socket: hand out a marked one from the pool. */
static ares_socket_t
dnsproxy_asocket(int family, int type, int protocol, void *arg)
{
	struct dnsproxy_achan *c = arg;
	struct dnsproxy *d = c->r->d;
	int fd;

	/* Through the proxy: TCP only, on a socketpair carried through CONNECT. */
	if (wstate_cfg(d->ws)->dns_via_proxy) {
		fd = d->via != NULL && (type & 0xf) == SOCK_STREAM ? dnsvia_socket(d->via) : -1;
		if (fd < 0)
			c->sock_bad = true;
		return fd < 0 ? ARES_SOCKET_BAD : fd;
	}
	fd = sockpool_take(d->pool[(type & 0xf) == SOCK_STREAM], family);

	/* Never fall back to an unmarked socket: it would be redirected to us. */
	if (fd < 0 && errno == EAGAIN)
		log_msg(LOG_WARN, "dns", "socket_pool_empty", "no marked socket ready");
	if (fd < 0)
		c->sock_bad = true;
	return fd < 0 ? ARES_SOCKET_BAD : fd;
}

static int
dnsproxy_aclose(ares_socket_t fd, void *arg)
{
	struct dnsproxy_achan *c = arg;

	return c->r->d->via != NULL ? dnsvia_close(c->r->d->via, fd) : close(fd);
}

static int
dnsproxy_aconnect(ares_socket_t fd, const struct sockaddr *sa, ares_socklen_t len, void *arg)
{
	struct dnsproxy_achan *c = arg;
	int rc;

	if (c->r->d->via == NULL)
		return connect(fd, sa, len);
	rc = dnsvia_connect(c->r->d->via, fd, sa, len);
	/* No marked socket for the tunnel: ours, the upstream is not ejected for it. */
	if (rc != 0 && errno == ENOBUFS)
		c->sock_bad = true;
	return rc;
}

static ares_ssize_t
dnsproxy_arecvfrom(ares_socket_t fd, void *buf, size_t len, int flags, struct sockaddr *sa,
    ares_socklen_t *salen, void *arg)
{
	return recvfrom(fd, buf, len, flags, sa, salen);
}

static ares_ssize_t
dnsproxy_asendv(ares_socket_t fd, const struct iovec *iov, int n, void *arg)
{
	return writev(fd, iov, n);
}

static const struct ares_socket_functions dnsproxy_sockfns = {
    .asocket = dnsproxy_asocket,
    .aclose = dnsproxy_aclose,
    .aconnect = dnsproxy_aconnect,
    .arecvfrom = dnsproxy_arecvfrom,
    .asendv = dnsproxy_asendv,
};

/* --- c-ares in the event loop ----------------------------------------- */

static void
dnsproxy_ares_io_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dnsproxy_achan *c = arg;

	ares_process_fd(c->ch, (what & EV_READ) ? fd : ARES_SOCKET_BAD,
	    (what & EV_WRITE) ? fd : ARES_SOCKET_BAD);
	dnsproxy_ares_timer(c);
}

static void
dnsproxy_ares_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dnsproxy_achan *c = arg;

	ares_process_fd(c->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
	dnsproxy_ares_timer(c);
}

static void
dnsproxy_ares_timer(struct dnsproxy_achan *c)
{
	struct timeval tv, *t;

	if (c->ch == NULL || c->ev_timer == NULL)
		return;
	t = ares_timeout(c->ch, NULL, &tv);
	if (t == NULL)
		evtimer_del(c->ev_timer);
	else
		evtimer_add(c->ev_timer, t);
}

static void
dnsproxy_sock_state_cb(void *arg, ares_socket_t fd, int readable, int writable)
{
	struct dnsproxy_achan *c = arg;
	struct dnsproxy_aresfd *slot = NULL, *free_slot = NULL;
	short what = (readable ? EV_READ : 0) | (writable ? EV_WRITE : 0);

	for (int i = 0; i < DNSPROXY_ACHAN_FDS; i++) {
		if (c->afds[i].fd == fd)
			slot = &c->afds[i];
		else if (c->afds[i].fd < 0 && free_slot == NULL)
			free_slot = &c->afds[i];
	}
	if (slot != NULL) {
		event_free(slot->ev);
		slot->ev = NULL;
		slot->fd = -1;
	}
	if (what == 0)
		return;
	if (slot == NULL)
		slot = free_slot;
	if (slot == NULL) {
		log_msg(LOG_ERROR, "dns", "ares_fds", "too many upstream sockets");
		return;
	}
	slot->fd = fd;
	slot->ev =
	    event_new(wstate_base(c->r->d->ws), fd, what | EV_PERSIST, dnsproxy_ares_io_cb, c);
	event_add(slot->ev, NULL);
}

/* c-ares's status as the resolver seam's errno (dnsproxy.h). */
static int
dnsproxy_ares_errno(int status)
{
	switch (status) {
	case ARES_SUCCESS:
		return 0;
	case ARES_EDESTRUCTION:
	case ARES_ECANCELLED:
		return ECANCELED;
	case ARES_ETIMEOUT:
		return ETIMEDOUT;
	case ARES_ECONNREFUSED:
		return ECONNREFUSED;
	case ARES_ENOMEM:
		return ENOMEM;
	default:
		return EIO;
	}
}

/* Upstream i as upstream's logs write it: a.b.c.d:p or [v6]:p. */
static void
dnsproxy_upstream_txt(const struct dnsproxy *d, size_t i, char *out, size_t outlen)
{
	char ip[INET6_ADDRSTRLEN];
	const struct ares_addr_port_node *nd = &d->nodes[i];

	inet_ntop(nd->family, &nd->addr, ip, sizeof(ip));
	snprintf(out, outlen, nd->family == AF_INET6 ? "[%s]:%d" : "%s:%d", ip, nd->udp_port);
}

/* Log a change of an upstream's health, and the state of the whole list. */
static void
dnsproxy_health_log(struct dnsproxy_ares *r, size_t i, const char *how, const char *err)
{
	struct log_line l;
	char txt[INET6_ADDRSTRLEN + 16];
	bool healthy = dnshealth_healthy(&r->health, i);

	dnsproxy_upstream_txt(r->d, i, txt, sizeof(txt));
	log_begin(&l, healthy ? LOG_INFO : LOG_WARN, "dns",
	    healthy ? "dns_upstream_up" : "dns_upstream_down");
	log_str(&l, "upstream", txt);
	log_str(&l, "by", how);
	if (err != NULL)
		log_str(&l, "error", err);
	log_str(&l, "msg",
	    healthy ? "upstream answers a probe: back in the list"
	            : "upstream ejected until a probe answers");
	log_end(&l);
}

static void dnsproxy_ares_try(struct dnsproxy_ares_q *q);

static void
dnsproxy_ares_answer_cb(void *arg, int status, int timeouts, unsigned char *abuf, int alen)
{
	struct dnsproxy_ares_q *q = arg;
	struct dnsproxy_ares *r = q->r;
	size_t up = q->order[q->at];
	struct dnsproxy_achan *c = &r->qch[up];
	int e = dnsproxy_ares_errno(status);
	bool sock_bad = c->sock_bad;
	int rcode = -1;

	c->sock_bad = false;
	if (e == ECANCELED) {
		q->cb(q->arg, ECANCELED, NULL, 0);
		goto done;
	}
	if (e == 0 && alen >= DNSWIRE_HDR_LEN)
		rcode = abuf[3] & 0x0f;
	/* NOERROR (NODATA too) and NXDOMAIN are final, as upstream. */
	if (rcode == DNSWIRE_RCODE_NOERROR || rcode == DNSWIRE_RCODE_NXDOMAIN) {
		(void)dnshealth_exchange(&r->health, up, true);
		q->cb(q->arg, 0, abuf, (size_t)alen);
		goto done;
	}
	if (!r->closing) {
		struct log_line l;
		char txt[INET6_ADDRSTRLEN + 16];

		dnsproxy_upstream_txt(r->d, up, txt, sizeof(txt));
		/* With every upstream down, each query would log each one: debug then. */
		log_begin(&l, rcode >= 0 || r->all_down ? LOG_DEBUG : LOG_WARN, "dns",
		    "dns_upstream_error");
		log_str(&l, "upstream", txt);
		if (rcode >= 0)
			log_int(&l, "rcode", rcode);
		else
			log_str(&l, "error", strerror(e != 0 ? e : EIO));
		log_str(&l, "msg", "upstream exchange error");
		log_end(&l);
		/* No answer at all: ejected until a probe answers. A missing socket or memory is ours. */
		if (rcode < 0 && !sock_bad && e != ENOMEM &&
		    dnshealth_exchange(&r->health, up, false))
			dnsproxy_health_log(r, up, "exchange", strerror(e != 0 ? e : EIO));
	}
	if (++q->at < q->norder && !r->closing) {
		dnsproxy_ares_try(q);
		return;
	}
	/*
	 * Every upstream failed: the proxy answers SERVFAIL. The last one's
	 * own answer (an rcode such as REFUSED) goes to the callback, which
	 * says which; no answer at all goes as the error it was.
	 */
	if (rcode >= 0)
		q->cb(q->arg, 0, abuf, (size_t)alen);
	else
		q->cb(q->arg, e != 0 ? e : EIO, NULL, 0);
done:
	free(q->query);
	free(q);
}

static void
dnsproxy_ares_try(struct dnsproxy_ares_q *q)
{
	struct dnsproxy_achan *c = &q->r->qch[q->order[q->at]];

	ares_send(c->ch, q->query, (int)q->len, dnsproxy_ares_answer_cb, q);
	dnsproxy_ares_timer(c);
}

static void
dnsproxy_ares_send(void *rv, const uint8_t *query, size_t len, dnsproxy_answer_cb cb, void *arg)
{
	struct dnsproxy_ares *r = rv;
	struct dnsproxy_ares_q *q = calloc(1, sizeof(*q));
	bool down;

	if (q == NULL || (q->query = malloc(len)) == NULL) {
		free(q);
		cb(arg, ENOMEM, NULL, 0);
		return;
	}
	memcpy(q->query, query, len);
	q->len = len;
	q->r = r;
	q->cb = cb;
	q->arg = arg;
	q->norder = dnshealth_order(&r->health, q->order, &down);
	if (down && !r->all_down)
		log_msg(LOG_WARN, "dns", "dns_upstreams_down",
		    "no upstream is healthy: queries use the full list until a probe answers");
	r->all_down = down;
	dnsproxy_ares_try(q);
}

/* --- Health probes ---------------------------------------------------- */

static void
dnsproxy_probe_answer_cb(void *arg, int status, int timeouts, unsigned char *abuf, int alen)
{
	struct dnsproxy_achan *c = arg;
	struct dnsproxy_ares *r = c->r;
	bool sock_bad = c->sock_bad;
	/* Any answer, whatever its RCODE, is a live upstream (NOCHECKRESP). */
	bool answered = status == ARES_SUCCESS;

	c->sock_bad = false;
	r->probing[c->up] = false;
	if (r->closing || status == ARES_EDESTRUCTION || status == ARES_ECANCELLED)
		return;
	if (!answered) {
		struct log_line l;
		char txt[INET6_ADDRSTRLEN + 16];

		if (sock_bad || status == ARES_ENOMEM)
			return; /* no marked socket or memory: the upstream is not to blame */
		dnsproxy_upstream_txt(r->d, c->up, txt, sizeof(txt));
		log_begin(&l, LOG_WARN, "dns", "dns_upstream_probe_fail");
		log_str(&l, "upstream", txt);
		log_str(&l, "error", ares_strerror(status));
		log_str(&l, "msg", "upstream probe failed");
		log_end(&l);
	}
	if (dnshealth_probe(&r->health, c->up, answered))
		dnsproxy_health_log(r, c->up, "probe", answered ? NULL : ares_strerror(status));
}

/* Probe every upstream in parallel: "."/NS, or "<probe>."/A; RD set. */
static void
dnsproxy_probe_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dnsproxy_ares *r = arg;
	const char *name = r->set.probe[0] != '\0' ? r->set.probe : ".";
	int type = r->set.probe[0] != '\0' ? 1 /* A */ : 2 /* NS */;
	struct timeval tv = {0, 200000};
	unsigned char *buf = NULL;
	unsigned short id;
	int len = 0;

	/* The first round waits for the first marked sockets. */
	if (!r->d->ready_sent) {
		evtimer_add(r->ev_probe, &tv);
		return;
	}
	tv.tv_sec = (time_t)r->set.interval_s;
	tv.tv_usec = 0;
	evtimer_add(r->ev_probe, &tv);
	if (RAND_bytes((unsigned char *)&id, sizeof(id)) != 1 ||
	    ares_create_query(name, 1 /* IN */, type, id, 1, &buf, &len, 0) != ARES_SUCCESS)
		return;
	for (size_t i = 0; i < r->n; i++) {
		if (r->probing[i]) {
			log_msg(
			    LOG_DEBUG, "dns", "dns_probe_skip", "upstream %zu: probe in flight", i);
			continue;
		}
		r->probing[i] = true;
		ares_send(r->pch[i].ch, buf, len, dnsproxy_probe_answer_cb, &r->pch[i]);
		dnsproxy_ares_timer(&r->pch[i]);
	}
	ares_free_string(buf);
}

/* --- The resolver ----------------------------------------------------- */

static void
dnsproxy_achan_deinit(struct dnsproxy_achan *c)
{
	if (c->ch != NULL)
		ares_destroy(c->ch); /* runs callbacks with ARES_EDESTRUCTION */
	c->ch = NULL;
	for (int i = 0; i < DNSPROXY_ACHAN_FDS; i++)
		if (c->afds[i].ev != NULL) {
			event_free(c->afds[i].ev);
			c->afds[i].ev = NULL;
		}
	if (c->ev_timer != NULL)
		event_free(c->ev_timer);
	c->ev_timer = NULL;
}

/* A channel to upstream i alone: one try, timeout_ms. */
static int
dnsproxy_achan_init(
    struct dnsproxy_ares *r, struct dnsproxy_achan *c, size_t i, unsigned timeout_ms)
{
	struct ares_options opts;
	struct ares_addr_port_node node = r->d->nodes[i];

	c->r = r;
	c->up = i;
	for (int k = 0; k < DNSPROXY_ACHAN_FDS; k++)
		c->afds[k].fd = -1;
	memset(&opts, 0, sizeof(opts));
	opts.sock_state_cb = dnsproxy_sock_state_cb;
	opts.sock_state_cb_data = c;
	opts.timeout = (int)timeout_ms;
	opts.tries = 1;
	/*
	 * NOCHECKRESP: every answer comes back to us, and the failover on
	 * RCODE is ours. No STAYOPEN: c-ares closes its upstream sockets once
	 * no query is outstanding, so each burst of queries leaves from a new
	 * random port (the marked socket comes ready from the pool); a kept
	 * socket would give a forger a port that never changes.
	 */
	opts.flags = ARES_FLAG_NOCHECKRESP;
	/* Through the proxy, DNS over TCP: CONNECT carries TCP only. */
	if (wstate_cfg(r->d->ws)->dns_via_proxy)
		opts.flags |= ARES_FLAG_USEVC;
	if (ares_init_options(&c->ch, &opts,
	        ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_FLAGS) !=
	    ARES_SUCCESS) {
		c->ch = NULL;
		return -1;
	}
	ares_set_socket_functions(c->ch, &dnsproxy_sockfns, c);
	node.next = NULL;
	c->ev_timer = evtimer_new(wstate_base(r->d->ws), dnsproxy_ares_timeout_cb, c);
	if (ares_set_servers_ports(c->ch, &node) != ARES_SUCCESS || c->ev_timer == NULL)
		return -1;
	return 0;
}

static void
dnsproxy_ares_close(void *rv)
{
	struct dnsproxy_ares *r = rv;

	if (r == NULL)
		return;
	r->closing = true;
	if (r->ev_probe != NULL)
		event_free(r->ev_probe);
	for (size_t i = 0; i < r->n; i++) {
		dnsproxy_achan_deinit(&r->qch[i]);
		dnsproxy_achan_deinit(&r->pch[i]);
	}
	free(r);
}

/* Log the health settings, and each one that fell back, naming its variable. */
static void
dnsproxy_health_settings(struct dnsproxy_ares *r)
{
	const struct config *c = wstate_cfg(r->d->ws);
	const char *vars[3] = {"OPENSANDBOX_EGRESS_DNS_UPSTREAM_TIMEOUT",
	    "OPENSANDBOX_EGRESS_DNS_UPSTREAM_PROBE",
	    "OPENSANDBOX_EGRESS_DNS_UPSTREAM_PROBE_INTERVAL_SEC"};
	const char *vals[3] = {
	    c->dns_upstream_timeout, c->dns_upstream_probe, c->dns_upstream_probe_interval};
	const char *want[3] = {"whole seconds 1..120", "a DNS name", "whole seconds 1..3600"};
	enum dnshealth_parse st[3];
	char used[3][DNSHEALTH_NAME_MAX + 8];
	struct log_line l;

	dnshealth_settings(vals[0], vals[1], vals[2], &r->set, st);
	snprintf(used[0], sizeof(used[0]), "%u", r->set.timeout_s);
	snprintf(used[1], sizeof(used[1]), "%s", r->set.probe[0] != '\0' ? r->set.probe : ".");
	snprintf(used[2], sizeof(used[2]), "%u", r->set.interval_s);
	for (int k = 0; k < 3; k++) {
		if (st[k] != DNSHEALTH_INVALID && st[k] != DNSHEALTH_CLAMPED)
			continue;
		log_begin(&l, LOG_WARN, "dns", "config_fallback");
		log_str(&l, "variable", vars[k]);
		log_str(&l, "value", vals[k]);
		log_str(&l, "using", used[k]);
		log_str(&l, "msg",
		    st[k] == DNSHEALTH_CLAMPED ? "above the maximum: the maximum is used"
		                               : want[k]);
		log_end(&l);
	}
	log_begin(&l, LOG_INFO, "dns", "dns_upstream_health");
	log_uint(&l, "timeout_s", r->set.timeout_s);
	log_uint(&l, "probe_timeout_s", r->set.probe_timeout_s);
	log_uint(&l, "probe_interval_s", r->set.interval_s);
	log_str(&l, "probe", r->set.probe[0] != '\0' ? r->set.probe : ". NS");
	log_end(&l);
}

static void *
dnsproxy_ares_open(void *arg, struct dnsproxy *d, char *err, size_t errlen)
{
	struct dnsproxy_ares *r = calloc(1, sizeof(*r));
	struct timeval now = {0, 0};
	int rc;

	if (r == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	r->d = d;
	rc = ares_library_init(ARES_LIB_INIT_ALL);
	if (rc != ARES_SUCCESS) {
		snprintf(err, errlen, "c-ares init: %s", ares_strerror(rc));
		free(r);
		return NULL;
	}
	dnsproxy_health_settings(r);
	r->n = d->nnodes;
	dnshealth_init(&r->health, r->n);
	for (size_t i = 0; i < r->n; i++) {
		if (dnsproxy_achan_init(r, &r->qch[i], i, r->set.timeout_s * 1000) != 0 ||
		    dnsproxy_achan_init(r, &r->pch[i], i, r->set.probe_timeout_s * 1000) != 0) {
			snprintf(err, errlen, "c-ares channels: out of memory");
			dnsproxy_ares_close(r);
			return NULL;
		}
	}
	/* Probes at start (once the first marked sockets are there) and every interval. */
	r->ev_probe = evtimer_new(wstate_base(d->ws), dnsproxy_probe_cb, r);
	if (r->ev_probe == NULL || evtimer_add(r->ev_probe, &now) != 0) {
		snprintf(err, errlen, "probe timer");
		dnsproxy_ares_close(r);
		return NULL;
	}
	return r;
}

const struct dnsproxy_resolver_ops dnsproxy_cares = {
    dnsproxy_ares_open, dnsproxy_ares_send, dnsproxy_ares_close, NULL};

/* --- Replies ---------------------------------------------------------- */

static void dnstcp_arm(struct dnstcp *t);
static void dnstcp_resume(struct dnstcp *t);

static void
dnstcp_unref(struct dnstcp *t)
{
	if (--t->refs > 0)
		return;
	if (t->ev_deadline != NULL)
		event_free(t->ev_deadline);
	if (t->bev != NULL)
		bufferevent_free(t->bev);
	t->d->ntcp--;
	free(t);
}

static void
dnsq_send(struct dnsq *dq, const uint8_t *buf, size_t len)
{
	if (dq->kind == DNSQ_UDP) {
		if (sendto(dq->udpfd, buf, len, 0, (struct sockaddr *)&dq->peer, dq->peerlen) < 0)
			log_msg(LOG_DEBUG, "dns", "send_error", "%s", strerror(errno));
	} else if (!dq->tcp->closed) {
		uint8_t pfx[2] = {(uint8_t)(len >> 8), (uint8_t)len};
		struct evbuffer *out = bufferevent_get_output(dq->tcp->bev);
		evbuffer_add(out, pfx, 2);
		evbuffer_add(out, buf, len);
	}
}

static void
dnsq_free(struct dnsq *dq)
{
	if (dq->kind == DNSQ_TCP) {
		struct dnstcp *t = dq->tcp;
		t->inflight--;
		dnstcp_resume(t); /* a client paused at the pipelining bound */
		dnstcp_arm(t);
		dnstcp_unref(t);
	}
	dq->d->inflight--;
	policy_free(dq->policy);
	free(dq->learns);
	free(dq->reply);
	free(dq);
}

static void
dnsq_finish_rcode(struct dnsq *dq, uint8_t rcode)
{
	uint8_t buf[DNSWIRE_HDR_LEN + DNSWIRE_MAX_QUESTION + 16];
	size_t n;

	if (rcode == DNSWIRE_RCODE_SERVFAIL)
		wstate_metrics(dq->d->ws)->dns_servfail++;
	if (dnswire_build_error(&dq->q, rcode, buf, sizeof(buf), &n) == 0)
		dnsq_send(dq, buf, n);
	metrics_observe(&wstate_metrics(dq->d->ws)->dns_latency, dnsproxy_elapsed(&dq->start));
	dnsq_free(dq);
}

static void
dnsq_learned_cb(const union chan_msg *reply, int fd, void *arg)
{
	struct dnsq *dq = arg;

	if (reply->result.err != 0) {
		/* Fail closed: an address the kernel does not know is not given out. */
		wstate_metrics(dq->d->ws)->nft_errors++;
		log_msg(LOG_ERROR, "dns", "learn_error", "parent could not learn: %s",
		    reply->result.msg);
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_SERVFAIL);
		return;
	}
	wstate_metrics(dq->d->ws)->dns_learned += dq->nlearn;
	dnsq_send(dq, dq->reply, dq->reply_len);
	metrics_observe(&wstate_metrics(dq->d->ws)->dns_latency, dnsproxy_elapsed(&dq->start));
	dnsq_free(dq);
}

/* Predicate for dnswire: inner addresses never, and no more than we can learn. */
static bool
dnsq_addr_pred(int family, const uint8_t *addr, void *arg)
{
	struct dnsq *dq = arg;

	if (!dnsproxy_addr_ok(dq->d, family, addr, dq->block_private)) {
		char txt[INET6_ADDRSTRLEN];
		struct log_line l;

		wstate_metrics(dq->d->ws)->dns_filtered_addrs++;
		if (!dnsproxy_log_first(dq->d, dq->d->agg_filter, dq->q.name))
			return false;
		inet_ntop(family, addr, txt, sizeof(txt));
		log_begin(&l, LOG_WARN, "dns", "dns_filter");
		log_str(&l, "name", dq->q.name);
		log_str(&l, "addr", txt);
		log_str(
		    &l, "why", "inner address (loopback, link-local, metadata, own or private)");
		log_end(&l);
		return false;
	}
	if (dq->naddrs_ok >= dq->max_addrs)
		return false;
	dq->naddrs_ok++;
	return true;
}

static void
dnsq_answer_cb(void *arg, int status, const uint8_t *abuf, size_t alen)
{
	struct dnsq *dq = arg;
	struct dnsproxy *d = dq->d;
	struct dnswire_answer res;
	const struct policy_dns *pd = policy_dns(dq->policy);
	size_t cap = dq->kind == DNSQ_TCP ? DNSWIRE_MAX_MSG : dq->q.udp_size;
	size_t maxlen = cap;
	uint16_t up_id;
	struct timespec now;
	enum dnswire_status st;
	int rcode;

	if (status == ECANCELED) {
		dnsq_free(dq);
		return;
	}
	rcode = status == 0 && abuf != NULL && alen >= DNSWIRE_HDR_LEN ? abuf[3] & 0x0f : -1;
	if (rcode != DNSWIRE_RCODE_NOERROR && rcode != DNSWIRE_RCODE_NXDOMAIN) {
		/* Once per name and window: a workload asking again cannot flood the log. */
		if (dnsproxy_log_first(d, d->agg_upfail, dq->q.name)) {
			struct log_line l;

			log_begin(&l, LOG_WARN, "dns", "dns_upstream_fail");
			log_str(&l, "name", dq->q.name);
			if (rcode >= 0)
				log_str(&l, "rcode", dnswire_rcode_name(rcode));
			else
				log_str(
				    &l, "error", status != 0 ? strerror(status) : "short answer");
			log_end(&l);
		}
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_SERVFAIL);
		return;
	}
	/*
	 * The policy may have changed while the query was upstream: decide
	 * again on the policy in force now, so a late answer for a name that
	 * is no longer allowed is never learned.
	 */
	if (dq->policy != wstate_policy(d->ws)) {
		struct policy_decision dec;

		policy_free(dq->policy);
		dq->policy = policy_ref(wstate_policy(d->ws));
		pd = policy_dns(dq->policy);
		policy_decide_name(dq->policy, dq->q.name, &dec);
		if (dec.action != POLICY_ALLOW || !dnsq_ports(dq, &dec)) {
			wstate_metrics(d->ws)->dns_denied++;
			if (dnsproxy_log_first(d, d->agg_deny, dq->q.name)) {
				struct log_line l;
				log_begin(&l, LOG_INFO, "dns", "dns_deny");
				log_str(&l, "name", dq->q.name);
				log_str(&l, "why", "late answer dropped: policy changed");
				log_end(&l);
				wstate_event(d->ws, CHAN_EVENT_DNS_DENY, dq->q.name, 0, NULL, 0,
				    "policy_changed");
			}
			dnsq_finish_rcode(dq, DNSWIRE_RCODE_NXDOMAIN);
			return;
		}
		dq->max_addrs = DNSPROXY_MAX_LEARN / dq->nports;
		dq->block_private = pd->filter_private;
	}
	up_id = (uint16_t)((abuf[0] << 8) | abuf[1]);
	dq->reply = malloc(cap);
	if (dq->reply == NULL) {
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_SERVFAIL);
		return;
	}
	st = dnswire_filter_answer(abuf, (size_t)alen, up_id, &dq->q, dnsq_addr_pred, dq, maxlen,
	    dq->reply, cap, &dq->reply_len, &res);
	if (st != DNSWIRE_OK) {
		/* Malformed, a CNAME loop or a chain past DNSWIRE_MAX_CNAME_CHAIN. */
		wstate_metrics(d->ws)->dns_bad_answers++;
		if (dnsproxy_log_first(d, d->agg_answer, dq->q.name)) {
			struct log_line l;
			log_begin(&l, LOG_WARN, "dns", "dns_bad_answer");
			log_str(&l, "name", dq->q.name);
			log_str(&l, "status", dnswire_status_str(st));
			log_uint(&l, "cname_limit", DNSWIRE_MAX_CNAME_CHAIN);
			log_end(&l);
		}
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_SERVFAIL);
		return;
	}
	/* Learn every kept address for every port scope, clamped lifetime. */
	clock_gettime(CLOCK_MONOTONIC, &now);
	dq->nlearn = 0;
	if (res.naddrs > 0 && dq->learns == NULL &&
	    (dq->learns = calloc(DNSPROXY_MAX_LEARN, sizeof(*dq->learns))) == NULL) {
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_SERVFAIL);
		return;
	}
	for (size_t i = 0; i < res.naddrs; i++) {
		uint32_t ttl = res.addrs[i].ttl;
		if (ttl < pd->ttl_min)
			ttl = pd->ttl_min;
		if (ttl > pd->ttl_max)
			ttl = pd->ttl_max;
		for (size_t k = 0; k < dq->nports && dq->nlearn < DNSPROXY_MAX_LEARN; k++) {
			struct chan_learn *l = &dq->learns[dq->nlearn++];
			memset(l, 0, sizeof(*l));
			l->hdr.type = CHAN_LEARN;
			l->family = (uint8_t)res.addrs[i].family;
			memcpy(l->addr, res.addrs[i].addr, res.addrs[i].family == AF_INET ? 4 : 16);
			l->port = dq->ports[k];
			l->timeout_s = ttl;
			memcpy(l->name, dq->q.name, strlen(dq->q.name));
			if (learnmap_add(wstate_learned(d->ws), dq->q.name, l->family, l->addr,
			        l->port, now.tv_sec + ttl) != 0) {
				log_msg(LOG_ERROR, "dns", "learn_full", "learned map full");
				dnsq_finish_rcode(dq, DNSWIRE_RCODE_SERVFAIL);
				return;
			}
		}
	}
	/* log_skip.always silences successes only: refusals are always logged. */
	if (res.naddrs > 0 && !policy_log_skip(dq->policy, dq->q.name)) {
		struct log_line l;
		char txt[INET6_ADDRSTRLEN];
		log_begin(&l, LOG_INFO, "dns", "learn");
		log_str(&l, "name", dq->q.name);
		log_uint(&l, "addrs", res.naddrs);
		inet_ntop(res.addrs[0].family, res.addrs[0].addr, txt, sizeof(txt));
		log_str(&l, "first", txt);
		log_uint(&l, "ttl", dq->learns[0].timeout_s);
		log_end(&l);
	}
	if (dq->nlearn == 0) {
		dnsq_send(dq, dq->reply, dq->reply_len);
		metrics_observe(&wstate_metrics(d->ws)->dns_latency, dnsproxy_elapsed(&dq->start));
		dnsq_free(dq);
		return;
	}
	/* A policy change in flight that removes the name: nothing is learned (fail closed). */
	if (!wstate_pending_allows(d->ws, dq->q.name)) {
		wstate_metrics(d->ws)->dns_denied++;
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_NXDOMAIN);
		return;
	}
	if (wchan_batch(wstate_chan(d->ws), dq->learns, sizeof(dq->learns[0]), dq->nlearn,
	        dnsq_learned_cb, dq) != 0)
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_SERVFAIL);
}

/* --- Queries ---------------------------------------------------------- */

/* Expand the allowed port ranges of the deciding rule into learn scopes. */
static bool
dnsq_ports(struct dnsq *dq, const struct policy_decision *dec)
{
	dq->nports = 0;
	if (dec->ports == NULL || dec->nports == 0) {
		dq->ports[dq->nports++] = 0;
		return true;
	}
	for (size_t i = 0; i < dec->nports; i++)
		for (uint32_t p = dec->ports[i].lo; p <= dec->ports[i].hi; p++) {
			if (dq->nports >= DNSPROXY_MAX_LEARN)
				return false;
			dq->ports[dq->nports++] = (uint16_t)p;
		}
	return true;
}

static void
dnsproxy_query(struct dnsproxy *d, const uint8_t *pkt, size_t len, struct dnsq *dq)
{
	struct wstate *ws = d->ws;
	struct policy_decision dec;
	size_t used;
	uint8_t qbuf[DNSWIRE_HDR_LEN + DNSWIRE_MAX_QUESTION + 16];
	uint16_t up_id;
	size_t qlen;
	enum dnswire_status st;
	struct log_line l;

	clock_gettime(CLOCK_MONOTONIC, &dq->start);
	d->inflight++;
	dq->d = d;
	wstate_metrics(ws)->dns_queries++;
	st = dnswire_parse_query(pkt, len, &dq->q, &used);
	if (st != DNSWIRE_OK) {
		wstate_metrics(ws)->dns_formerr++;
		if (dq->q.hdr_valid) {
			dnsq_finish_rcode(dq, DNSWIRE_RCODE_FORMERR);
			return;
		}
		dnsq_free(dq); /* not even a header: drop */
		return;
	}
	if (d->inflight > DNSPROXY_MAX_INFLIGHT || d->resolver == NULL) {
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_SERVFAIL);
		return;
	}
	dq->policy = policy_ref(wstate_policy(ws));
	policy_decide_name(dq->policy, dq->q.name, &dec);
	if (dec.action != POLICY_ALLOW || dq->q.opcode != 0) {
		wstate_metrics(ws)->dns_denied++;
		if (dnsproxy_log_first(d, d->agg_deny, dq->q.name)) {
			log_begin(&l, LOG_INFO, "dns", "dns_deny");
			log_str(&l, "name", dq->q.name);
			log_uint(&l, "qtype", dq->q.qtype);
			log_str(&l, "origin", policy_origin_str(dec.origin));
			log_str(&l, "rule", dec.target);
			log_str(&l, "why", dq->q.opcode != 0 ? "opcode not QUERY" : dec.why);
			log_end(&l);
			/* One webhook event per name and window, as the log line. */
			wstate_event(ws, CHAN_EVENT_DNS_DENY, dq->q.name, 0, NULL, 0,
			    dq->q.opcode != 0 ? "opcode" : "policy_deny");
		}
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_NXDOMAIN);
		return;
	}
	/*
	 * Only address queries leave: TXT, MX, SRV, HTTPS/SVCB (ECH configs,
	 * address hints) and the rest would carry data in or hand out
	 * addresses nobody checked. They get an empty NOERROR (NODATA), so
	 * clients fall back to A/AAAA.
	 */
	if (dq->q.qclass != DNSWIRE_CLASS_IN ||
	    (dq->q.qtype != DNSWIRE_TYPE_A && dq->q.qtype != DNSWIRE_TYPE_AAAA)) {
		if (dnsproxy_log_first(d, d->agg_nodata, dq->q.name)) {
			log_begin(&l, LOG_INFO, "dns", "dns_nodata");
			log_str(&l, "name", dq->q.name);
			log_uint(&l, "qtype", dq->q.qtype);
			log_str(&l, "why", "only A and AAAA queries are forwarded");
			log_end(&l);
		}
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_NOERROR);
		return;
	}
	if (dec.kind == POLICY_TARGET_WILDCARD && dec.target != NULL &&
	    !dnstunnel_ok(d->tunnel, dec.target, dq->q.name, dnsproxy_now_s())) {
		wstate_metrics(ws)->dns_denied++;
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_REFUSED);
		return;
	}
	if (!dnsq_ports(dq, &dec)) {
		log_msg(LOG_ERROR, "dns", "ports", "rule port ranges too wide to learn per port");
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_SERVFAIL);
		return;
	}
	dq->max_addrs = DNSPROXY_MAX_LEARN / dq->nports;
	dq->block_private = policy_dns(dq->policy)->filter_private;
	wstate_metrics(ws)->dns_allowed++;
	log_begin(&l, LOG_DEBUG, "dns", "dns_allow");
	log_str(&l, "name", dq->q.name);
	log_uint(&l, "qtype", dq->q.qtype);
	log_str(&l, "rule", dec.target);
	log_end(&l);
	/*
	 * A fresh query: only the question, our flags, a random id (c-ares
	 * 1.18's ares_send keeps the caller's: with 0, the id and a kept port
	 * would be all an off-path forger had to match).
	 */
	if (RAND_bytes((unsigned char *)&up_id, sizeof(up_id)) != 1 ||
	    dnswire_build_query(
	        up_id, dq->q.name, dq->q.qtype, dq->q.qclass, qbuf, sizeof(qbuf), &qlen) != 0) {
		dnsq_finish_rcode(dq, DNSWIRE_RCODE_SERVFAIL);
		return;
	}
	d->rops.send(d->resolver, qbuf, qlen, dnsq_answer_cb, dq);
}

static void
dnsproxy_udp_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dnsproxy *d = arg;

	for (int i = 0; i < DNSPROXY_UDP_BURST; i++) {
		uint8_t buf[DNSWIRE_MAX_MSG];
		struct dnsq *dq;
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		ssize_t n =
		    recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&peer, &plen);

		if (n < 0)
			return;
		dq = calloc(1, sizeof(*dq));
		if (dq == NULL)
			return;
		dq->kind = DNSQ_UDP;
		dq->udpfd = fd;
		dq->peer = peer;
		dq->peerlen = plen;
		dnsproxy_query(d, buf, (size_t)n, dq);
	}
}

/*
 * The one place a TCP client changes state. Every state but CLOSED may
 * follow any other; nothing follows CLOSED (-1: the caller stops).
 */
static int
dnstcp_set_state(struct dnstcp *t, enum dnstcp_state st)
{
	if (t->state == DNSTCP_CLOSED)
		return -1;
	t->state = st;
	return 0;
}

static void
dnstcp_close(struct dnstcp *t)
{
	if (dnstcp_set_state(t, DNSTCP_CLOSED) != 0)
		return;
	t->closed = true;
	evtimer_del(t->ev_deadline);
	bufferevent_disable(t->bev, EV_READ | EV_WRITE);
	dnstcp_unref(t);
}

/*
 * Whether the client must wait for us: pipelining is bounded, and so are
 * the answers a client that does not read may queue.
 */
static bool
dnstcp_must_wait(struct dnstcp *t)
{
	return t->inflight >= DNSPROXY_TCP_PIPELINE ||
	       evbuffer_get_length(bufferevent_get_output(t->bev)) > DNSPROXY_TCP_MAX_OUT;
}

/* Whether a whole frame (length prefix and message) is buffered. */
static bool
dnstcp_frame_buffered(struct evbuffer *in)
{
	uint8_t pfx[2];
	size_t avail = evbuffer_get_length(in);

	if (avail < 2 || evbuffer_copyout(in, pfx, 2) != 2)
		return false;
	return avail >= 2 + (size_t)((pfx[0] << 8) | pfx[1]);
}

/*
 * Set the read deadline from what is buffered and in flight. Entering
 * READING starts the query deadline; staying there keeps it (bytes do not
 * extend it). Entering IDLE starts the idle deadline; BUSY has none.
 */
static void
dnstcp_arm(struct dnstcp *t)
{
	struct evbuffer *in;
	enum dnstcp_state st, was = t->state;
	struct timeval tv = {0, 0};

	if (was == DNSTCP_CLOSED)
		return;
	in = bufferevent_get_input(t->bev);
	if (evbuffer_get_length(in) == 0)
		st = t->inflight > 0 ? DNSTCP_BUSY : DNSTCP_IDLE;
	else if (dnstcp_frame_buffered(in))
		st = DNSTCP_BUSY; /* a whole query waits for the pipelining bound */
	else
		st = DNSTCP_READING;
	if (dnstcp_set_state(t, st) != 0)
		return;
	if (st == DNSTCP_BUSY) {
		evtimer_del(t->ev_deadline);
		return;
	}
	if (st == was)
		return; /* the deadline set on entry stands */
	tv.tv_sec = st == DNSTCP_READING ? DNSPROXY_TCP_QUERY_S : DNSPROXY_TCP_IDLE_S;
	evtimer_add(t->ev_deadline, &tv);
}

/* Whether a deny-type line is written in full: first of its key per window. */
static bool
dnsproxy_log_first(struct dnsproxy *d, struct logagg *a, const char *key)
{
	if (logagg_note(a, key, dnsproxy_now_s()) == LOGAGG_LOG)
		return true;
	wstate_metrics(d->ws)->dns_log_suppressed++;
	return false;
}

static void
dnstcp_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dnstcp *t = arg;
	struct dnsproxy *d = t->d;
	const char *why = t->state == DNSTCP_READING ? "query deadline" : "idle timeout";
	struct log_line l;

	wstate_metrics(d->ws)->dns_tcp_timeouts++;
	if (dnsproxy_log_first(d, d->agg_tcp, why)) {
		log_begin(&l, LOG_INFO, "dns", "dns_tcp_close");
		log_str(&l, "name", why);
		log_uint(&l, "limit_s",
		    t->state == DNSTCP_READING ? DNSPROXY_TCP_QUERY_S : DNSPROXY_TCP_IDLE_S);
		log_end(&l);
	}
	dnstcp_close(t);
}

static void
dnstcp_read_cb(struct bufferevent *bev, void *arg)
{
	struct dnstcp *t = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	t->refs++; /* a query answered at once must not free t under us */
	while (!t->closed) {
		size_t avail = evbuffer_get_length(in);
		uint8_t *p;
		const uint8_t *msg;
		size_t mlen, used;
		struct dnsq *dq;

		if (avail < 2)
			break;
		p = evbuffer_pullup(
		    in, avail < DNSWIRE_MAX_MSG + 2 ? (ssize_t)avail : DNSWIRE_MAX_MSG + 2);
		switch (
		    dnswire_tcp_frame(p, avail < DNSWIRE_MAX_MSG + 2 ? avail : DNSWIRE_MAX_MSG + 2,
		        &msg, &mlen, &used)) {
		case DNSWIRE_NEED_MORE:
			goto out;
		case DNSWIRE_OK:
			break;
		default:
			dnstcp_close(t);
			goto out;
		}
		/*
		 * Reading stops while the client must wait: left enabled, a
		 * full input buffer would call us in a loop until answers
		 * drain. dnstcp_resume turns it back on.
		 */
		if (dnstcp_must_wait(t)) {
			t->paused = true;
			bufferevent_disable(bev, EV_READ);
			break;
		}
		dq = calloc(1, sizeof(*dq));
		if (dq == NULL) {
			dnstcp_close(t);
			goto out;
		}
		dq->kind = DNSQ_TCP;
		dq->tcp = t;
		t->refs++;
		t->inflight++;
		dnsproxy_query(t->d, msg, mlen, dq);
		if (t->closed)
			break;
		evbuffer_drain(in, used);
		/* The next query's deadline starts at its own first byte. */
		if (dnstcp_set_state(t, DNSTCP_BUSY) != 0)
			break;
	}
out:
	dnstcp_arm(t);
	dnstcp_unref(t);
}

/* Read again once a paused client need not wait any more. */
static void
dnstcp_resume(struct dnstcp *t)
{
	if (t->closed || !t->paused || dnstcp_must_wait(t))
		return;
	t->paused = false;
	bufferevent_enable(t->bev, EV_READ);
	if (dnstcp_frame_buffered(bufferevent_get_input(t->bev)))
		bufferevent_trigger(
		    t->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

/* Output drained: a client paused at the output bound may go on. */
static void
dnstcp_write_cb(struct bufferevent *bev, void *arg)
{
	dnstcp_resume(arg);
}

static void
dnstcp_event_cb(struct bufferevent *bev, short what, void *arg)
{
	dnstcp_close(arg);
}

static void
dnsproxy_accept_cb(
    struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
	struct dnsproxy *d = arg;
	struct dnstcp *t;
	struct timeval wr = {DNSPROXY_TCP_IDLE_S, 0};

	/* The cap keeps descriptors for the upstream sockets the dns process also needs. */
	if (d->ntcp >= DNSPROXY_MAX_TCP) {
		struct log_line l;

		wstate_metrics(d->ws)->dns_tcp_refused++;
		if (dnsproxy_log_first(d, d->agg_tcp, "connection cap")) {
			log_begin(&l, LOG_WARN, "dns", "dns_tcp_refused");
			log_str(&l, "name", "connection cap");
			log_uint(&l, "limit", DNSPROXY_MAX_TCP);
			log_end(&l);
		}
		close(fd);
		return;
	}
	if ((t = calloc(1, sizeof(*t))) == NULL) {
		close(fd);
		return;
	}
	t->d = d;
	t->refs = 1;
	t->state = DNSTCP_BUSY; /* dnstcp_arm below enters IDLE */
	t->bev = bufferevent_socket_new(wstate_base(d->ws), fd, BEV_OPT_CLOSE_ON_FREE);
	t->ev_deadline = evtimer_new(wstate_base(d->ws), dnstcp_deadline_cb, t);
	if (t->bev == NULL || t->ev_deadline == NULL) {
		if (t->ev_deadline != NULL)
			event_free(t->ev_deadline);
		if (t->bev != NULL)
			bufferevent_free(t->bev);
		else
			close(fd);
		free(t);
		return;
	}
	d->ntcp++;
	bufferevent_setcb(t->bev, dnstcp_read_cb, dnstcp_write_cb, dnstcp_event_cb, t);
	/* Writes keep a timeout of their own: a client that never reads. */
	bufferevent_set_timeouts(t->bev, NULL, &wr);
	bufferevent_setwatermark(t->bev, EV_READ, 0, DNSWIRE_MAX_MSG + 2);
	bufferevent_enable(t->bev, EV_READ | EV_WRITE);
	dnstcp_arm(t);
}

/* --- Setup ------------------------------------------------------------ */

/* Summaries of windows that ended are written within a tick. */
static void
dnsproxy_agg_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dnsproxy *d = arg;
	int64_t now = dnsproxy_now_s();

	logagg_flush(d->agg_deny, now, false);
	logagg_flush(d->agg_nodata, now, false);
	logagg_flush(d->agg_filter, now, false);
	logagg_flush(d->agg_answer, now, false);
	logagg_flush(d->agg_tcp, now, false);
	logagg_flush(d->agg_upfail, now, false);
	kreject_flush(d->kreject, now);
}

/* A record of the table's refusals (CHAN_NFLOG). */
void
dnsproxy_nflog(struct dnsproxy *d, const struct chan_nflog *r)
{
	if (d->kreject != NULL)
		kreject_note(d->kreject, r, dnsproxy_now_s());
}

static int
dnsproxy_upstreams(
    struct dnsproxy *d, struct ares_addr_port_node *nodes, size_t *n, char *err, size_t errlen)
{
	struct config own;
	const struct config *c = wstate_cfg(d->ws);

	/* The parent resolved them once; a proxy run alone resolves its own. */
	if (c->nupstreams == 0) {
		memset(&own, 0, sizeof(own));
		snprintf(own.dns_upstream, sizeof(own.dns_upstream), "%s", c->dns_upstream);
		if (config_upstreams(&own, err, errlen) != 0)
			return -1;
		c = &own;
	}
	*n = 0;
	for (size_t i = 0; i < c->nupstreams && i < DNSPROXY_MAX_UPSTREAMS; i++) {
		struct ares_addr_port_node *nd = &nodes[*n];

		memset(nd, 0, sizeof(*nd));
		nd->family = c->upstreams[i].family;
		if (nd->family == AF_INET) {
			memcpy(&nd->addr.addr4, c->upstreams[i].addr, 4);
			d->want_v4 = true;
		} else {
			memcpy(&nd->addr.addr6, c->upstreams[i].addr, 16);
			d->want_v6 = true;
		}
		nd->udp_port = c->upstreams[i].port;
		nd->tcp_port = c->upstreams[i].port;
		if (*n > 0)
			nodes[*n - 1].next = nd;
		(*n)++;
	}
	return 0;
}

/*
 * Serve the parent's DNS sockets of one family (UDP and TCP on loopback,
 * bound once for the sidecar's life with its mark), or, without them
 * (tests that run the proxy alone), bind loopback here.
 */
static int
dnsproxy_listen(struct dnsproxy *d, int v6, char *err, size_t errlen)
{
	const struct listen_set *ls = &wstate_cfg(d->ws)->listen;
	int ufd = ls->fd[v6 ? LISTEN_DNS_UDP6 : LISTEN_DNS_UDP4];
	int tfd = ls->fd[v6 ? LISTEN_DNS_TCP6 : LISTEN_DNS_TCP4];
	struct sockaddr_storage ss;
	socklen_t sl;
	int one = 1;

	memset(&ss, 0, sizeof(ss));
	if (v6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_addr = in6addr_loopback;
		s6->sin6_port = htons(wstate_cfg(d->ws)->dns_port);
		sl = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		s4->sin_port = htons(wstate_cfg(d->ws)->dns_port);
		sl = sizeof(*s4);
	}
	if (ufd < 0) {
		ufd = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (ufd < 0)
			goto fail;
		if (v6)
			setsockopt(ufd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		if (bind(ufd, (struct sockaddr *)&ss, sl) != 0) {
			close(ufd);
			goto fail;
		}
	}
	d->udp[v6] = ufd;
	d->ev_udp[v6] =
	    event_new(wstate_base(d->ws), ufd, EV_READ | EV_PERSIST, dnsproxy_udp_cb, d);
	event_add(d->ev_udp[v6], NULL);
	if (tfd >= 0)
		d->tcp[v6] = evconnlistener_new(wstate_base(d->ws), dnsproxy_accept_cb, d,
		    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, tfd);
	else
		d->tcp[v6] = evconnlistener_new_bind(wstate_base(d->ws), dnsproxy_accept_cb, d,
		    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC |
		        (v6 ? LEV_OPT_BIND_IPV6ONLY : 0),
		    64, (struct sockaddr *)&ss, (int)sl);
	if (d->tcp[v6] == NULL)
		goto fail;
	return 0;
fail:
	snprintf(err, errlen, "DNS listener on %s port %u: %s", v6 ? "[::1]" : "127.0.0.1",
	    wstate_cfg(d->ws)->dns_port, strerror(errno));
	return -1;
}

struct dnsproxy *
dnsproxy_new(struct wstate *ws, void (*ready_cb)(void *arg), void *arg,
    const struct dnsproxy_resolver_ops *resolver, char *err, size_t errlen)
{
	struct dnsproxy *d = calloc(1, sizeof(*d));

	if (d == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	d->ws = ws;
	d->ready_cb = ready_cb;
	d->ready_arg = arg;
	d->udp[0] = d->udp[1] = -1;
	d->rops = resolver != NULL ? *resolver : dnsproxy_cares;
	/* The watch first, so that no change after the scan goes unseen. */
	d->ownfd = ownnet_watch_open();
	if (d->ownfd >= 0) {
		d->ev_own =
		    event_new(wstate_base(ws), d->ownfd, EV_READ | EV_PERSIST, dnsproxy_own_cb, d);
		if (d->ev_own == NULL || event_add(d->ev_own, NULL) != 0) {
			snprintf(err, errlen, "own networks watch");
			goto fail;
		}
	} else
		log_msg(LOG_WARN, "dns", "own_networks_error",
		    "address changes not watched (the parent still follows them): %s",
		    strerror(errno));
	dnsproxy_own_networks(d);
	if ((d->tunnel = dnstunnel_new()) == NULL) {
		snprintf(err, errlen, "DNS tunnel counter: no random key or memory");
		goto fail;
	}
	d->agg_deny = logagg_new("dns", "dns_deny", LOG_INFO, 0, 0);
	d->agg_nodata = logagg_new("dns", "dns_nodata", LOG_INFO, 0, 0);
	d->agg_filter = logagg_new("dns", "dns_filter", LOG_WARN, 0, 0);
	d->agg_answer = logagg_new("dns", "dns_bad_answer", LOG_WARN, 0, 0);
	d->agg_tcp = logagg_new("dns", "dns_tcp", LOG_INFO, 0, 0);
	d->agg_upfail = logagg_new("dns", "dns_upstream_fail", LOG_WARN, 0, 0);
	d->kreject = kreject_new(ws);
	if (d->agg_deny == NULL || d->agg_nodata == NULL || d->agg_filter == NULL ||
	    d->agg_answer == NULL || d->agg_tcp == NULL || d->agg_upfail == NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	{
		struct timeval tv = {DNSPROXY_AGG_TICK_S, 0};
		d->ev_agg = event_new(wstate_base(ws), -1, EV_PERSIST, dnsproxy_agg_cb, d);
		if (d->ev_agg == NULL || event_add(d->ev_agg, &tv) != 0) {
			snprintf(err, errlen, "log aggregation timer");
			goto fail;
		}
	}
	if (dnsproxy_upstreams(d, d->nodes, &d->nnodes, err, errlen) != 0)
		goto fail;
	{
		struct config_proxy px;

		config_proxy(wstate_cfg(ws), &px);
		/* Through the proxy, the only marked sockets are TCP ones of the proxy's family. */
		if (px.set && wstate_cfg(ws)->dns_via_proxy) {
			d->want_v4 = px.family == AF_INET;
			d->want_v6 = px.family == AF_INET6;
		}
		if (px.set && px.family == 0 && (d->pxname = pxname_new(d, ws, px.name)) == NULL) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
	}
	d->resolver = d->rops.open(d->rops.arg, d, err, errlen);
	if (d->resolver == NULL)
		goto fail;
	if (dnsproxy_listen(d, 0, err, errlen) != 0 || dnsproxy_listen(d, 1, err, errlen) != 0)
		goto fail;
	{
		unsigned fam = (d->want_v4 ? SOCKPOOL_V4 : 0) | (d->want_v6 ? SOCKPOOL_V6 : 0);

		for (int st = 0; st < 2; st++) {
			d->pool[st] = sockpool_new(wstate_base(ws), wstate_chan(ws),
			    st ? SOCK_STREAM : SOCK_DGRAM, DNSPROXY_POOL, fam);
			if (d->pool[st] == NULL) {
				snprintf(err, errlen, "out of memory");
				goto fail;
			}
		}
		sockpool_on_ready(d->pool[0], dnsproxy_pool_ready_cb, d);
	}
	if (wstate_cfg(ws)->dns_via_proxy &&
	    (d->via = dnsvia_new(wstate_base(ws), d->pool[1], wstate_cfg(ws), err, errlen)) == NULL)
		goto fail;
	{
		struct log_line l;
		char txt[INET6_ADDRSTRLEN];
		log_begin(&l, LOG_INFO, "dns", "dns_listen");
		log_uint(&l, "port", wstate_cfg(ws)->dns_port);
		log_uint(&l, "upstreams", d->nnodes);
		inet_ntop(d->nodes[0].family, &d->nodes[0].addr, txt, sizeof(txt));
		log_str(&l, "upstream", txt);
		log_end(&l);
	}
	return d;
fail:
	dnsproxy_free(d);
	return NULL;
}

size_t
dnsproxy_tcp_clients(const struct dnsproxy *d)
{
	return d->ntcp;
}

void
dnsproxy_free(struct dnsproxy *d)
{
	if (d == NULL)
		return;
	/* Queries in flight get ECANCELED and free themselves. */
	if (d->resolver != NULL)
		d->rops.close(d->resolver);
	pxname_free(d->pxname);
	dnsvia_free(d->via);
	for (int v6 = 0; v6 < 2; v6++) {
		if (d->ev_udp[v6] != NULL)
			event_free(d->ev_udp[v6]);
		if (d->udp[v6] >= 0)
			close(d->udp[v6]);
		if (d->tcp[v6] != NULL)
			evconnlistener_free(d->tcp[v6]);
	}
	for (int st = 0; st < 2; st++)
		sockpool_free(d->pool[st]);
	dnstunnel_free(d->tunnel);
	if (d->ev_agg != NULL)
		event_free(d->ev_agg);
	if (d->ev_own != NULL)
		event_free(d->ev_own);
	if (d->ownfd >= 0)
		close(d->ownfd);
	/* Pending summaries are written, so counts survive a shutdown. */
	logagg_free(d->agg_deny);
	logagg_free(d->agg_nodata);
	logagg_free(d->agg_filter);
	logagg_free(d->agg_answer);
	logagg_free(d->agg_tcp);
	logagg_free(d->agg_upfail);
	kreject_free(d->kreject);
	free(d);
}
