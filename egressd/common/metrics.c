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

static void
metrics_counter(struct evbuffer *out, const char *name, const char *help, uint64_t v)
{
	evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name,
	    name, (unsigned long long)v);
}

static void
metrics_hist(struct evbuffer *out, const char *name, const char *help, const struct metrics_hist *h)
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
	evbuffer_add_printf(out,
	    "# HELP egressd_info Build and mode.\n# TYPE egressd_info gauge\n"
	    "egressd_info{mode=\"%s\"} 1\n",
	    mode);
	evbuffer_add_printf(out,
	    "# HELP egressd_ready Enforcement in place.\n"
	    "# TYPE egressd_ready gauge\negressd_ready %d\n",
	    ready ? 1 : 0);
	evbuffer_add_printf(out,
	    "# HELP egressd_policy_revision Applied policy changes.\n"
	    "# TYPE egressd_policy_revision gauge\negressd_policy_revision %llu\n",
	    (unsigned long long)revision);
	evbuffer_add_printf(out,
	    "# HELP egressd_learned_entries Learned destinations.\n"
	    "# TYPE egressd_learned_entries gauge\negressd_learned_entries %llu\n",
	    (unsigned long long)learned_entries);
	metrics_counter(out, "egressd_dns_queries_total", "DNS queries received.", m->dns_queries);
	metrics_counter(
	    out, "egressd_dns_allowed_total", "DNS queries resolved upstream.", m->dns_allowed);
	metrics_counter(
	    out, "egressd_dns_denied_total", "DNS queries denied (NXDOMAIN).", m->dns_denied);
	metrics_counter(
	    out, "egressd_dns_servfail_total", "DNS queries answered SERVFAIL.", m->dns_servfail);
	metrics_counter(out, "egressd_dns_formerr_total", "Malformed DNS queries.", m->dns_formerr);
	metrics_counter(out, "egressd_dns_filtered_addresses_total",
	    "Answer addresses removed (loopback, link-local, metadata, private).",
	    m->dns_filtered_addrs);
	metrics_counter(out, "egressd_dns_learned_total", "Addresses added to the learned sets.",
	    m->dns_learned);
	metrics_counter(out, "egressd_dns_log_suppressed_total",
	    "DNS deny-type log lines folded into per-name summaries.", m->dns_log_suppressed);
	metrics_counter(out, "egressd_dns_bad_answers_total",
	    "Upstream answers refused (CNAME loop, chain too long, malformed).",
	    m->dns_bad_answers);
	metrics_counter(out, "egressd_dns_tcp_refused_total",
	    "DNS TCP connections refused at the connection cap.", m->dns_tcp_refused);
	metrics_counter(out, "egressd_dns_tcp_timeouts_total",
	    "DNS TCP connections closed by the query deadline or idle timeout.",
	    m->dns_tcp_timeouts);
	metrics_counter(out, "egressd_nft_errors_total", "Failed nft changes.", m->nft_errors);
	metrics_counter(
	    out, "egressd_policy_applies_total", "Policy changes applied.", m->policy_applies);
	metrics_counter(
	    out, "egressd_policy_failures_total", "Policy changes refused.", m->policy_failures);
	metrics_counter(
	    out, "egressd_api_requests_total", "Control API requests.", m->api_requests);
	metrics_counter(out, "egressd_api_auth_failures_total", "Control API auth failures.",
	    m->api_auth_failures);
	metrics_counter(out, "egressd_connections_total", "Intercepted connections accepted.",
	    m->conn_accepted);
	metrics_counter(out, "egressd_connections_rejected_total",
	    "Intercepted connections refused.", m->conn_rejected);
	metrics_counter(out, "egressd_connections_limited_total",
	    "Intercepted connections refused at the connection cap.", m->conn_limited);
	metrics_counter(out, "egressd_connections_passthrough_total",
	    "Connections passed through without decryption.", m->conn_passthrough);
	metrics_counter(out, "egressd_connections_terminated_total",
	    "Connections terminated for credential injection.", m->conn_terminated);
	metrics_counter(out, "egressd_injections_total", "Credentials injected.", m->inject_total);
	metrics_counter(
	    out, "egressd_redactions_total", "Secret occurrences masked.", m->redact_total);
	metrics_hist(out, "egressd_dns_latency_seconds", "DNS answer latency.", &m->dns_latency);
	metrics_hist(out, "egressd_policy_apply_seconds",
	    "Policy change to enforcement (API request to answer).", &m->api_latency);
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
