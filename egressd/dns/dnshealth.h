/*
 * DNS upstream health (dns process): the settings of the exchange timeout
 * and the probe, and the healthy flag of each upstream. Pure: no I/O, no
 * clock; dnsproxy.c sends the probes and records what happened.
 */
#ifndef EGRESSD_DNSHEALTH_H
#define EGRESSD_DNSHEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Upstreams tracked at most (DNSPROXY_MAX_UPSTREAMS). */
#define DNSHEALTH_MAX 8
/* OPENSANDBOX_EGRESS_DNS_UPSTREAM_TIMEOUT: seconds per upstream exchange. */
#define DNSHEALTH_TIMEOUT_DEFAULT_S 5
#define DNSHEALTH_TIMEOUT_MAX_S 120
/* OPENSANDBOX_EGRESS_DNS_UPSTREAM_PROBE_INTERVAL_SEC: seconds between probes. */
#define DNSHEALTH_INTERVAL_DEFAULT_S 30
#define DNSHEALTH_INTERVAL_MIN_S 1
#define DNSHEALTH_INTERVAL_MAX_S 3600
/* A probe waits min(timeout, this) seconds. */
#define DNSHEALTH_PROBE_TIMEOUT_MAX_S 2
/* Longest probe name (a DNS name in text, without the final dot). */
#define DNSHEALTH_NAME_MAX 253

/* How a setting was read. */
enum dnshealth_parse {
	DNSHEALTH_SET,     /* the value as given */
	DNSHEALTH_DEFAULT, /* empty: the default */
	DNSHEALTH_INVALID, /* not a value: the default */
	DNSHEALTH_CLAMPED, /* out of range: the nearest bound */
};

struct dnshealth_settings {
	unsigned timeout_s;
	unsigned interval_s;
	unsigned probe_timeout_s;
	/* "" probes "."/NS; a name probes "<name>."/A. */
	char probe[DNSHEALTH_NAME_MAX + 1];
};

/*
 * Read the three variables (NULL or "" for unset) as upstream does:
 * timeout whole seconds, <=0 or invalid -> 5, above 120 -> 120; interval
 * 1..3600, invalid or out of range -> 30; probe a DNS name ("." is the
 * default question), an invalid one -> the default. The result of each
 * is in st[0..2] (timeout, probe, interval) for the start log.
 */
void dnshealth_settings(const char *timeout, const char *probe, const char *interval,
    struct dnshealth_settings *out, enum dnshealth_parse st[3]);

/* Health of the upstreams, in configured order. */
struct dnshealth {
	size_t n;
	bool healthy[DNSHEALTH_MAX];
	uint32_t fails[DNSHEALTH_MAX]; /* exchange and probe failures in a row */
};

/* n upstreams (at most DNSHEALTH_MAX), all healthy until shown otherwise. */
void dnshealth_init(struct dnshealth *h, size_t n);

/*
 * The upstreams a query tries, in order, into out[DNSHEALTH_MAX]: the
 * healthy ones; none healthy: all of them, and *all_down is set (warn).
 * Returns how many.
 */
size_t dnshealth_order(const struct dnshealth *h, size_t *out, bool *all_down);

/*
 * Record an exchange with upstream i: an answer keeps it, a silence or
 * error ejects it until a probe answers (so a silent upstream costs one
 * timeout, not one per query). Returns whether its health changed.
 */
bool dnshealth_exchange(struct dnshealth *h, size_t i, bool answered);

/* Record a probe of upstream i (any answer is healthy). Returns whether its health changed. */
bool dnshealth_probe(struct dnshealth *h, size_t i, bool answered);

/* Whether upstream i is healthy. */
bool dnshealth_healthy(const struct dnshealth *h, size_t i);

#endif
