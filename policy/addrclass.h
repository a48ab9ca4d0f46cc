/*
 * addrclass: the one classifier of inner addresses, used by every check
 * that must agree: the DNS answer filter, the kernel's always-deny sets
 * and the intercept's refusal of connections aimed at egressd itself.
 * IPv6 forms that embed an IPv4 address (IPv4-mapped, IPv4-compatible,
 * 6to4, NAT64 64:ff9b::/96 and 64:ff9b:1::/48) are classified by the
 * embedded address; Teredo is inner as a whole.
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

/* Most prefixes addrclass_deny_prefixes() writes. */
#define ADDRCLASS_MAX_DENY 96

/*
 * The class of a 4- or 16-byte address. *why (may be NULL) gets the name
 * of the range that decided, e.g. "169.254.0.0/16 link-local (cloud
 * metadata)", or "public". Pure.
 */
enum addrclass addrclass_of(int family, const uint8_t *addr, const char **why);

/* True for ADDRCLASS_LOOPBACK and ADDRCLASS_INNER, and for PRIVATE when block_private. */
bool addrclass_refused(int family, const uint8_t *addr, bool block_private, const char **why);

/*
 * The prefixes no rule may open, for the kernel's deny sets: every inner
 * and loopback range, and each one again in every IPv6 spelling that
 * embeds it (6to4, NAT64, IPv4-compatible; IPv4-mapped never reaches the
 * wire) plus Teredo. Writes at most cap; returns how many exist.
 */
size_t addrclass_deny_prefixes(struct policy_addr *out, size_t cap);

#endif
