/*
 * The DNS proxy (dns process): answers the workload's queries on
 * loopback, refuses denied names locally, resolves allowed ones with a
 * fresh query through its resolver (c-ares over marked sockets), and has
 * the parent learn the answer addresses before the client sees them.
 */
#ifndef EGRESSD_DNSPROXY_H
#define EGRESSD_DNSPROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egressd/common/chan.h"

struct wstate;
struct dnsproxy;

/* Upstream servers at most (resolv.conf or OPENSANDBOX_EGRESS_DNS_UPSTREAM). */
#define DNSPROXY_MAX_UPSTREAMS 8
/* Queries in flight at most; more get SERVFAIL. */
#define DNSPROXY_MAX_INFLIGHT 4096
/*
 * DNS over TCP (docs/dns.md): clients at most (more are closed at accept,
 * logged and counted); seconds a connection may stay idle between
 * queries; seconds from the first byte of a query's length prefix to its
 * last byte (a deadline, not reset by each byte); queries in flight per
 * connection; answer bytes queued to a client that does not read before
 * its reading pauses.
 */
#define DNSPROXY_MAX_TCP 256
#define DNSPROXY_TCP_IDLE_S 10
#define DNSPROXY_TCP_QUERY_S 5
#define DNSPROXY_TCP_PIPELINE 16
#define DNSPROXY_TCP_MAX_OUT (4 * (65535 + 2))
/* Seconds between checks for ended log-aggregation windows. */
#define DNSPROXY_AGG_TICK_S 5
/* Marked sockets kept ready per family and type for c-ares. */
#define DNSPROXY_POOL 4
/* Learned elements per answer (addresses x port scopes). */
#define DNSPROXY_MAX_LEARN CHAN_MAX_BATCH

/*
 * The answer to one upstream query: status 0 and the message, or an errno
 * (ETIMEDOUT, ECONNREFUSED, EIO...) and no message. ECANCELED when the
 * resolver is closed with the query in flight: the query is to be freed,
 * not answered.
 */
typedef void (*dnsproxy_answer_cb)(void *arg, int status, const uint8_t *msg, size_t len);

/*
 * The resolver the proxy sends its fresh queries through: c-ares over
 * marked sockets (dnsproxy_cares), or a fake in tests (tests/lib/
 * fakeresolver.c, tests/replay/). `open` gets the proxy (for its
 * upstreams, its loop and its socket pool) and the ops' arg.
 */
struct dnsproxy_resolver_ops {
	void *(*open)(void *arg, struct dnsproxy *d, char *err, size_t errlen);
	void (*send)(void *r, const uint8_t *query, size_t len, dnsproxy_answer_cb cb, void *cbarg);
	void (*close)(void *r);
	void *arg;
};

extern const struct dnsproxy_resolver_ops dnsproxy_cares;

/*
 * Bind the listeners (127.0.0.1 and ::1, UDP and TCP, on cfg->dns_port),
 * open the resolver (NULL: c-ares with the upstream servers) and start
 * filling the socket pool. `ready_cb` is called once the first marked
 * sockets arrived.
 */
struct dnsproxy *dnsproxy_new(struct wstate *ws, void (*ready_cb)(void *arg), void *arg,
    const struct dnsproxy_resolver_ops *resolver, char *err, size_t errlen);

void dnsproxy_free(struct dnsproxy *d);

/* A record of the table's refusals from the parent (borrowed for the call; kreject.c). */
void dnsproxy_nflog(struct dnsproxy *d, const struct chan_nflog *r);

/* DNS-over-TCP clients connected now. */
size_t dnsproxy_tcp_clients(const struct dnsproxy *d);

/*
 * A query of the sidecar's own (the chained proxy's name) through the
 * resolver, as the workload's fresh queries go; cb as for the resolver.
 */
void dnsproxy_resolve(
    struct dnsproxy *d, const uint8_t *query, size_t len, dnsproxy_answer_cb cb, void *arg);

/* Seconds of CLOCK_MONOTONIC (the dns process's clock for windows and deadlines). */
int64_t dnsproxy_now_s(void);

/* Whether the answer address may be learned and given to the workload. */
bool dnsproxy_addr_ok(
    const struct dnsproxy *d, int family, const unsigned char *addr, bool block_private);

#endif
