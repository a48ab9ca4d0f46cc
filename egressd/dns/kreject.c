/*
 * conn_reject records of the table's refusals (dns process). The packet
 * bytes are the workload's: they go only through pkthdr_parse(), and
 * what is logged is addresses, numbers and names from krule's fixed
 * table. A hostile workload can make the kernel refuse as often as it
 * likes: lines are bounded per window by logagg (one full line per
 * destination, one summary per destination, one overflow line), the
 * counters are plain integers, and nothing here allocates per record.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "egressd/child/wstate.h"
#include "egressd/common/log.h"
#include "egressd/common/logagg.h"
#include "egressd/dns/kreject.h"
#include "egressd/dns/krule.h"
#include "egressd/dns/pkthdr.h"

_Static_assert(METRICS_NKREJECT == KRULE_NREASONS, "one counter per reason");

#define KREJECT_ETH_P_IP 0x0800
#define KREJECT_ETH_P_IPV6 0x86dd

struct kreject {
	struct wstate *ws;
	struct logagg *agg;
};

struct kreject *
kreject_new(struct wstate *ws)
{
	struct kreject *k = calloc(1, sizeof(*k));

	if (k == NULL)
		return NULL;
	k->ws = ws;
	k->agg = logagg_new("nft", "conn_reject", LOG_INFO, 0, 0);
	if (k->agg == NULL) {
		free(k);
		return NULL;
	}
	return k;
}

void
kreject_free(struct kreject *k)
{
	if (k == NULL)
		return;
	logagg_free(k->agg);
	free(k);
}

void
kreject_flush(struct kreject *k, int64_t now_s)
{
	if (k != NULL)
		logagg_flush(k->agg, now_s, false);
}

/* The full line of the first record of a destination in the window. */
static void
kreject_log(const struct chan_nflog *r, const struct krule *rule, enum krule_reason reason,
    const struct pkthdr *h, bool parsed)
{
	struct log_line l;
	char a[INET6_ADDRSTRLEN];
	const char *pn;

	log_begin(&l, LOG_INFO, "nft", "conn_reject");
	log_str(&l, "rule", rule != NULL ? rule->name : "unknown");
	log_str(&l, "reason", krule_reason_name(reason));
	if (parsed) {
		log_str(&l, "family", h->family == AF_INET ? "ipv4" : "ipv6");
		pn = pkthdr_proto_name(h->proto);
		if (pn != NULL)
			log_str(&l, "proto", pn);
		else
			log_uint(&l, "proto", h->proto);
		inet_ntop(h->family, h->src, a, sizeof(a));
		log_str(&l, "src", a);
		if (h->has_ports)
			log_uint(&l, "sport", h->sport);
		inet_ntop(h->family, h->dst, a, sizeof(a));
		log_str(&l, "dst", a);
		if (h->has_ports)
			log_uint(&l, "dport", h->dport);
		if (h->has_icmp) {
			log_uint(&l, "icmp_type", h->icmp_type);
			log_uint(&l, "icmp_code", h->icmp_code);
		}
	} else {
		log_uint(&l, "bytes", r->len);
	}
	log_end(&l);
}

/* One refused packet; see kreject.h. */
void
kreject_note(struct kreject *k, const struct chan_nflog *r, int64_t now_s)
{
	const struct krule *rule = krule_find(r->prefix);
	int family = r->hwproto == KREJECT_ETH_P_IP     ? AF_INET
	             : r->hwproto == KREJECT_ETH_P_IPV6 ? AF_INET6
	                                                : 0;
	struct pkthdr h;
	bool parsed = pkthdr_parse(r->data, r->len, family, &h) != PKTHDR_INVALID;
	enum krule_reason reason = parsed ? krule_reason(rule, h.proto) : KRULE_UNPARSED;
	char key[LOGAGG_MAX_KEY + 1];

	wstate_metrics(k->ws)->kreject[reason]++;
	/* One record per rule, protocol and destination: source ports change per connection. */
	if (parsed) {
		char a[INET6_ADDRSTRLEN];

		inet_ntop(h.family, h.dst, a, sizeof(a));
		snprintf(key, sizeof(key), "%s %u %s %u", rule != NULL ? rule->name : "unknown",
		    h.proto, a, h.has_ports ? h.dport : (h.has_icmp ? h.icmp_type : 0));
	} else
		snprintf(key, sizeof(key), "unparsed");
	if (logagg_note(k->agg, key, now_s) != LOGAGG_LOG) {
		wstate_metrics(k->ws)->kreject_log_suppressed++;
		return;
	}
	kreject_log(r, rule, reason, &h, parsed);
	if (parsed)
		wstate_event(k->ws, CHAN_EVENT_CONN_DENY, NULL, h.family, h.dst,
		    h.has_ports ? h.dport : 0, krule_reason_name(reason));
}
