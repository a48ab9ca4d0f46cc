/*
 * Worker counters and latency histograms, served as Prometheus text on
 * GET /metrics. Plain integers: each child is single-threaded and writes only its own page (shstat.c).
 */
#ifndef EGRESSD_METRICS_H
#define EGRESSD_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;

#define METRICS_NBUCKETS 12
#define METRICS_NKREJECT 9 /* = KRULE_NREASONS */

struct metrics_hist {
	uint64_t buckets[METRICS_NBUCKETS]; /* cumulative at format time */
	uint64_t count;
	double sum; /* seconds */
};

struct metrics {
	uint64_t dns_queries;
	uint64_t dns_allowed;
	uint64_t dns_denied;
	uint64_t dns_servfail;
	uint64_t dns_formerr;
	uint64_t dns_filtered_addrs; /* answer addresses removed (rebinding, metadata...) */
	uint64_t dns_learned;        /* addresses added to the learned sets */
	/* DNS abuse limits (docs/dns.md) */
	uint64_t dns_log_suppressed; /* deny-type lines folded into summaries */
	uint64_t dns_bad_answers;    /* upstream answers refused (CNAME loop/chain, malformed) */
	uint64_t dns_tcp_refused;    /* TCP connections over DNSPROXY_MAX_TCP */
	uint64_t dns_tcp_timeouts;   /* TCP connections closed by a deadline */
	uint64_t nft_errors;
	uint64_t policy_applies;
	uint64_t policy_failures;
	uint64_t api_requests;
	uint64_t api_auth_failures;
	uint64_t conn_accepted;
	uint64_t conn_rejected;
	uint64_t conn_limited; /* refused at the intercept's connection cap */
	uint64_t conn_passthrough;
	uint64_t conn_terminated;
	uint64_t inject_total;
	uint64_t redact_total;
	uint64_t client_tls_resumed;    /* workload handshakes resumed with a ticket */
	uint64_t client_ticket_refused; /* tickets for another host: full handshake */
	uint64_t upstream_tls;          /* verified upstream TLS handshakes (terminated) */
	uint64_t upstream_tls_resumed;  /* of those, sessions resumed */
	uint64_t h2_conns;              /* terminated connections that speak HTTP/2 */
	uint64_t h2_calm;               /* of those, ended with GOAWAY ENHANCE_YOUR_CALM */
	uint64_t requests_retried; /* safe requests sent again: a kept upstream leg had closed */
	uint64_t conns_trimmed;    /* quiet connections that gave their buffers back */
	uint64_t upstream_reused;  /* pooled upstream legs taken by a new workload connection */
	/* The report process (egressd/report/) */
	uint64_t events_delivered; /* deny webhook POSTs answered 2xx */
	uint64_t events_dropped;   /* events dropped: the queue was full */
	uint64_t events_failed;    /* events given up after the retries */
	uint64_t otlp_exports;     /* OTLP exports answered 2xx */
	uint64_t otlp_failures;    /* OTLP exports that failed */
	/* The table's refusals (dns process, from NFLOG; docs/nflog.md), by reason (krule.h) */
	uint64_t kreject[METRICS_NKREJECT];
	uint64_t kreject_log_suppressed; /* conn_reject lines folded into summaries */
	struct metrics_hist dns_latency;
	struct metrics_hist api_latency;
};

/* One exported series: its name, help text and place in struct metrics. */
struct metrics_def {
	const char *name;
	const char *help;
	size_t offset;
};

#define METRICS_NGAUGES 3 /* egressd_ready, _policy_revision, _learned_entries */

extern const struct metrics_def metrics_counters[];
extern const size_t metrics_ncounters;
extern const struct metrics_def metrics_hists[];
extern const size_t metrics_nhists;
extern const struct metrics_def metrics_gauges[METRICS_NGAUGES];

/* Counter i of metrics_counters in m. */
uint64_t metrics_counter_value(const struct metrics *m, size_t i);

/* Histogram i of metrics_hists in m (buckets per bucket, not cumulative). */
const struct metrics_hist *metrics_hist_value(const struct metrics *m, size_t i);

/* Upper bound of bucket i (seconds); the last bucket is +Inf. */
double metrics_bound(int i);

/* Add src's counters and histograms to dst (control sums the children's pages). */
void metrics_add(struct metrics *dst, const volatile struct metrics *src);

/* Record one observation in seconds. */
void metrics_observe(struct metrics_hist *h, double seconds);

/* Append the Prometheus text exposition to out. */
int metrics_format(const struct metrics *m, const char *mode, uint64_t revision, bool ready,
    uint64_t learned_entries, struct evbuffer *out);

#endif
