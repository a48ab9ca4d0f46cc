/*
 * Prometheus text exposition of the children's counters (control process, from the shared pages).
 * Nothing here takes a label value from the network, so no escaping is
 * needed beyond the fixed mode string.
 */
#include <stddef.h>
#include <string.h>

#include <event2/buffer.h>

#include "egressd/common/metrics.h"

/* Upper bounds (seconds) of the histogram buckets; the last is +Inf. */
static const double metrics_bounds[METRICS_NBUCKETS] = {
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.5,
    1e300,
};

/* Count one observation. */
void
metrics_observe(struct metrics_hist *h, double seconds)
{
	for (int i = 0; i < METRICS_NBUCKETS; i++) {
		if (seconds <= metrics_bounds[i]) {
			h->buckets[i]++;
			break;
		}
	}
	h->count++;
	h->sum += seconds;
}

#define MC(field, name, help)                                                                      \
	{                                                                                          \
		name, help, offsetof(struct metrics, field)                                        \
	}

/* The counters, in /metrics order; OTLP exports the same list (otlp.c). */
const struct metrics_def metrics_counters[] = {
    MC(dns_queries, "egressd_dns_queries_total", "DNS queries received."),
    MC(dns_allowed, "egressd_dns_allowed_total", "DNS queries resolved upstream."),
    MC(dns_denied, "egressd_dns_denied_total", "DNS queries denied (NXDOMAIN)."),
    MC(dns_servfail, "egressd_dns_servfail_total", "DNS queries answered SERVFAIL."),
    MC(dns_formerr, "egressd_dns_formerr_total", "Malformed DNS queries."),
    MC(dns_filtered_addrs, "egressd_dns_filtered_addresses_total",
        "Answer addresses removed (loopback, link-local, metadata, private)."),
    MC(dns_learned, "egressd_dns_learned_total", "Addresses added to the learned sets."),
    MC(dns_log_suppressed, "egressd_dns_log_suppressed_total",
        "DNS deny-type log lines folded into per-name summaries."),
    MC(dns_bad_answers, "egressd_dns_bad_answers_total",
        "Upstream answers refused (CNAME loop, chain too long, malformed)."),
    MC(dns_tcp_refused, "egressd_dns_tcp_refused_total",
        "DNS TCP connections refused at the connection cap."),
    MC(dns_tcp_timeouts, "egressd_dns_tcp_timeouts_total",
        "DNS TCP connections closed by the query deadline or idle timeout."),
    MC(nft_errors, "egressd_nft_errors_total", "Failed nft changes."),
    MC(policy_applies, "egressd_policy_applies_total", "Policy changes applied."),
    MC(policy_failures, "egressd_policy_failures_total", "Policy changes refused."),
    MC(api_requests, "egressd_api_requests_total", "Control API requests."),
    MC(api_auth_failures, "egressd_api_auth_failures_total", "Control API auth failures."),
    MC(conn_accepted, "egressd_connections_total", "Intercepted connections accepted."),
    MC(conn_rejected, "egressd_connections_rejected_total", "Intercepted connections refused."),
    MC(conn_limited, "egressd_connections_limited_total",
        "Intercepted connections refused at the connection cap."),
    MC(conn_passthrough, "egressd_connections_passthrough_total",
        "Connections passed through without decryption."),
    MC(conn_terminated, "egressd_connections_terminated_total",
        "Connections terminated for credential injection."),
    MC(inject_total, "egressd_injections_total", "Credentials injected."),
    MC(redact_total, "egressd_redactions_total", "Secret occurrences masked."),
    MC(client_tls_resumed, "egressd_client_tls_resumed_total",
        "Workload TLS handshakes that resumed with a session ticket."),
    MC(client_ticket_refused, "egressd_client_tickets_refused_total",
        "Session tickets presented for another host than they were issued for."),
    MC(upstream_tls, "egressd_upstream_tls_handshakes_total",
        "Verified upstream TLS handshakes of terminated connections."),
    MC(upstream_tls_resumed, "egressd_upstream_tls_resumed_total",
        "Upstream TLS handshakes that resumed a session."),
    MC(h2_conns, "egressd_intercept_h2_connections_total",
        "Terminated workload connections that speak HTTP/2."),
    MC(h2_calm, "egressd_intercept_h2_calm_total",
        "HTTP/2 connections ended with GOAWAY ENHANCE_YOUR_CALM (rapid reset, frame floods)."),
    MC(requests_retried, "egressd_intercept_requests_retried_total",
        "Safe requests sent again on a new upstream connection: the kept one had closed."),
    MC(conns_trimmed, "egressd_intercept_conns_trimmed_total",
        "Keep-alive connections quiet for a second that gave their TLS buffers back."),
    MC(upstream_reused, "egressd_intercept_upstream_reused_total",
        "Upstream connections a new workload connection took from the pool (no handshake)."),
    MC(events_delivered, "egressd_deny_events_delivered_total",
        "Deny webhook events delivered (2xx)."),
    MC(events_dropped, "egressd_deny_events_dropped_total",
        "Deny webhook events dropped because the queue was full."),
    MC(events_failed, "egressd_deny_events_failed_total",
        "Deny webhook events given up after the retries."),
    MC(otlp_exports, "egressd_otlp_exports_total", "OTLP metric exports delivered (2xx)."),
    MC(otlp_failures, "egressd_otlp_export_failures_total", "OTLP metric exports that failed."),
    /* One counter per reason, in enum krule_reason order (egressd/dns/krule.h). */
    MC(kreject[0], "egressd_conn_reject_not_allowed_total",
        "Connections the table refused: TCP to a destination no rule allows."),
    MC(kreject[1], "egressd_conn_reject_udp_not_allowed_total",
        "Connections the table refused: UDP (not DNS) to a destination that does not allow it."),
    MC(kreject[2], "egressd_conn_reject_protocol_not_allowed_total",
        "Packets the table refused: another protocol to a destination that does not allow it."),
    MC(kreject[3], "egressd_conn_reject_address_denied_total",
        "Connections the table refused: a denied address."),
    MC(kreject[4], "egressd_conn_reject_port_denied_total",
        "Connections the table refused: a denied address and port."),
    MC(kreject[5], "egressd_conn_reject_doh_blocked_total",
        "Connections the table refused: DNS over HTTPS to a blocked resolver."),
    MC(kreject[6], "egressd_conn_reject_dot_blocked_total",
        "Connections the table refused: DNS over TLS."),
    MC(kreject[7], "egressd_conn_reject_proxy_bypass_total",
        "Connections the table refused: a direct dial past the chained proxy."),
    MC(kreject[8], "egressd_conn_reject_unparsed_total",
        "Refusal records whose rule or packet headers could not be read."),
    MC(kreject_log_suppressed, "egressd_conn_reject_log_suppressed_total",
        "conn_reject log lines folded into per-destination summaries."),
};
const size_t metrics_ncounters = sizeof(metrics_counters) / sizeof(metrics_counters[0]);
_Static_assert(sizeof(metrics_counters) / sizeof(metrics_counters[0]) ==
                   offsetof(struct metrics, dns_latency) / sizeof(uint64_t),
    "every counter of struct metrics is exported");

/* The histograms (seconds). */
const struct metrics_def metrics_hists[] = {
    MC(dns_latency, "egressd_dns_latency_seconds", "DNS answer latency."),
    MC(api_latency, "egressd_policy_apply_seconds",
        "Policy change to enforcement (API request to answer)."),
};
const size_t metrics_nhists = sizeof(metrics_hists) / sizeof(metrics_hists[0]);

/* The gauges of the status page, in /metrics order. */
const struct metrics_def metrics_gauges[METRICS_NGAUGES] = {
    {"egressd_ready", "Enforcement in place.", 0},
    {"egressd_policy_revision", "Applied policy changes.", 0},
    {"egressd_learned_entries", "Learned destinations.", 0},
};

/* Bucket i's upper bound; see metrics.h. */
double
metrics_bound(int i)
{
	return metrics_bounds[i];
}

uint64_t
metrics_counter_value(const struct metrics *m, size_t i)
{
	uint64_t v;

	memcpy(&v, (const char *)m + metrics_counters[i].offset, sizeof(v));
	return v;
}

const struct metrics_hist *
metrics_hist_value(const struct metrics *m, size_t i)
{
	return (
	    const struct metrics_hist *)(const void *)((const char *)m + metrics_hists[i].offset);
}

static void
metrics_hist_format(
    struct evbuffer *out, const char *name, const char *help, const struct metrics_hist *h)
{
	uint64_t cum = 0;

	evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (int i = 0; i < METRICS_NBUCKETS; i++) {
		cum += h->buckets[i];
		if (i == METRICS_NBUCKETS - 1)
			evbuffer_add_printf(
			    out, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
		else
			evbuffer_add_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name,
			    metrics_bounds[i], (unsigned long long)cum);
	}
	evbuffer_add_printf(
	    out, "%s_sum %.9f\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

int
metrics_format(const struct metrics *m, const char *mode, uint64_t revision, bool ready,
    uint64_t learned_entries, struct evbuffer *out)
{
	const uint64_t gauge[METRICS_NGAUGES] = {ready ? 1 : 0, revision, learned_entries};

	evbuffer_add_printf(out,
	    "# HELP egressd_info Build and mode.\n# TYPE egressd_info gauge\n"
	    "egressd_info{mode=\"%s\"} 1\n",
	    mode);
	for (size_t i = 0; i < METRICS_NGAUGES; i++)
		evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n",
		    metrics_gauges[i].name, metrics_gauges[i].help, metrics_gauges[i].name,
		    metrics_gauges[i].name, (unsigned long long)gauge[i]);
	for (size_t i = 0; i < metrics_ncounters; i++)
		evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n",
		    metrics_counters[i].name, metrics_counters[i].help, metrics_counters[i].name,
		    metrics_counters[i].name, (unsigned long long)metrics_counter_value(m, i));
	for (size_t i = 0; i < metrics_nhists; i++)
		metrics_hist_format(
		    out, metrics_hists[i].name, metrics_hists[i].help, metrics_hist_value(m, i));
	return 0;
}

static void
metrics_hist_add(struct metrics_hist *d, const struct metrics_hist *s)
{
	for (int i = 0; i < METRICS_NBUCKETS; i++)
		d->buckets[i] += s->buckets[i];
	d->count += s->count;
	d->sum += s->sum;
}

void
metrics_add(struct metrics *dst, const volatile struct metrics *src)
{
	struct metrics s;
	uint64_t *d = (uint64_t *)dst;
	const uint64_t *v = (const uint64_t *)&s;

	/* A snapshot first: the owner goes on writing its page. */
	memcpy(&s, (const void *)src, sizeof(s));
	/* Every field before the histograms is a uint64_t counter. */
	for (size_t i = 0; i < offsetof(struct metrics, dns_latency) / sizeof(uint64_t); i++)
		d[i] += v[i];
	metrics_hist_add(&dst->dns_latency, &s.dns_latency);
	metrics_hist_add(&dst->api_latency, &s.api_latency);
}
