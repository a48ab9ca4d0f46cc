/*
 * krule: the vocabulary of the table's refusing rules, as their NFLOG
 * prefixes name them (nfttable.c writes "egressd:<rule>"), with the reason
 * each gives and what it means. Used by the dns process (kreject.c) for
 * conn_reject records and by `egressd explain` for a recorded refusal.
 * Pure, no allocation.
 */
#ifndef EGRESSD_KRULE_H
#define EGRESSD_KRULE_H

#include <stddef.h>
#include <stdint.h>

#define KRULE_PREFIX "egressd:"

enum krule_reason {
	KRULE_NOT_ALLOWED,     /* TCP to an address and port no allow rule or learned name opens */
	KRULE_UDP_NOT_ALLOWED, /* UDP (not DNS) to a destination that does not allow it */
	KRULE_PROTO_NOT_ALLOWED, /* another protocol (ICMP, SCTP...) to such a destination */
	KRULE_ADDRESS_DENIED,    /* a deny rule's address (or the sandbox's own networks) */
	KRULE_PORT_DENIED,       /* a deny rule's address and port */
	KRULE_DOH_BLOCKED,       /* port 443 to a DoH resolver (block-doh-443) */
	KRULE_DOT_BLOCKED,       /* DNS over TLS (853) without a port rule allowing it */
	KRULE_PROXY_BYPASS,      /* with a chained proxy: a dial that would not go through it */
	KRULE_UNPARSED,          /* a record whose rule or packet headers could not be read */
	KRULE_NREASONS,
};

/* A rule of the table, by its name (the prefix without KRULE_PREFIX). */
struct krule {
	const char *name;
	const char *where; /* the rule, as `nft list table` would show it, roughly */
	const char *why;   /* what refusing by it means */
};

/* The rule a prefix names ("egressd:deny"), or NULL for one that is not ours. */
const struct krule *krule_find(const char *prefix);

/* A rule by its bare name ("deny"), or NULL. */
const struct krule *krule_by_name(const char *name);

/* The reason a rule gives for a packet of transport protocol proto (IPPROTO_*). */
enum krule_reason krule_reason(const struct krule *r, uint8_t proto);

/* The reason's word for logs, events and metrics ("not_allowed"...). */
const char *krule_reason_name(enum krule_reason reason);

/* The rules, for listing; *n gets their number. */
const struct krule *krule_all(size_t *n);

#endif
