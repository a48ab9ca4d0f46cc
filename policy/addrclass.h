/*
 * addrclass: the one classifier of inner addresses, used by every check
 * that must agree: the DNS answer filter, the kernel's always-deny sets
 * and the intercept's refusal of connections aimed at egressd itself.
 * IPv6 forms that embed an IPv4 address (IPv4-mapped, IPv4-compatible,
 * 6to4, NAT64 64:ff9b::/96 and 64:ff9b:1::/48) are classified by the
 * embedded address; Teredo is inner as a whole. The sandbox's own
 * networks are run-time data (struct addrclass_own) that every caller
 * passes in, classified here by the same rules.
 */
#ifndef POLICY_ADDRCLASS_H
#define POLICY_ADDRCLASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/name.h"

enum addrclass {
	ADDRCLASS_PUBLIC = 0, /* may be learned and reached when the policy allows */
	ADDRCLASS_PRIVATE,    /* RFC 1918, CGNAT, ULA: refused in DNS answers on request */
	ADDRCLASS_LOOPBACK,   /* loopback and unspecified: never an egress destination */
	ADDRCLASS_INNER,      /* link-local, metadata, multicast, reserved: always denied */
};

/* Most prefixes of the sandbox's own networks (struct addrclass_own). */
#define ADDRCLASS_MAX_OWN 64

/*
 * Most prefixes addrclass_deny_prefixes() writes: the table's, and each
 * own prefix with its four on-wire IPv6 spellings.
 */
#define ADDRCLASS_MAX_DENY (96 + 5 * ADDRCLASS_MAX_OWN)

/*
 * The sandbox's own networks, read from its namespace at run time
 * (egressd/common/ownnet.c): the on-link prefix of each address of its
 * interfaces, the address itself, and the gateway of each route, i.e. the
 * pod subnet and the node. No rule opens them, as no rule opens the inner
 * ranges (catalogue invariant 5: own infrastructure). Plain data: masked
 * prefixes, none inside another (addrclass_own_add keeps it so).
 */
struct addrclass_own {
	size_t n;
	struct policy_addr net[ADDRCLASS_MAX_OWN];
};

/*
 * The class of a 4- or 16-byte address. *why (may be NULL) gets the name
 * of the range that decided, e.g. "169.254.0.0/16 link-local (cloud
 * metadata)", or "public". Pure.
 */
enum addrclass addrclass_of(int family, const uint8_t *addr, const char **why);

/*
 * Add addr/prefix to own, masked. A prefix inside one already there is
 * dropped; those inside the new one are replaced by it. -1 (own unchanged)
 * when the family or prefix is invalid or own is full.
 */
int addrclass_own_add(struct addrclass_own *own, int family, const uint8_t *addr, unsigned prefix)
    __attribute__((warn_unused_result));

/* Whether a and b hold the same prefixes (in any order). NULL is empty. */
bool addrclass_own_equal(const struct addrclass_own *a, const struct addrclass_own *b);

/*
 * Whether addr, or the IPv4 address an IPv6 spelling of it embeds
 * (mapped, compatible, 6to4, NAT64), lies in one of own's prefixes (own
 * may be NULL: none). *why (may be NULL) gets a fixed description.
 */
bool addrclass_is_own(
    const struct addrclass_own *own, int family, const uint8_t *addr, const char **why);

/*
 * True for ADDRCLASS_LOOPBACK and ADDRCLASS_INNER, for the sandbox's own
 * networks (own, may be NULL) in any spelling, and for PRIVATE when
 * block_private.
 */
bool addrclass_refused(const struct addrclass_own *own, int family, const uint8_t *addr,
    bool block_private, const char **why);

/*
 * The prefixes no rule may open, for the kernel's deny sets: every inner
 * and loopback range and every prefix of own (may be NULL), each IPv4 one
 * again in every IPv6 spelling that embeds it (6to4, NAT64,
 * IPv4-compatible; IPv4-mapped never reaches the wire), plus Teredo.
 * Writes at most cap; returns how many exist.
 */
size_t addrclass_deny_prefixes(
    const struct addrclass_own *own, struct policy_addr *out, size_t cap);

#endif
