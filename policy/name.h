/*
 * Host name canonicalisation and IP/CIDR literal parsing: the one
 * canonicaliser shared by DNS, SNI, Host, policy and bindings.
 */
#ifndef POLICY_NAME_H
#define POLICY_NAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POLICY_NAME_MAX 253     /* bytes of a canonical name, no trailing dot */
#define POLICY_LABEL_MAX 63     /* bytes of one label */
#define POLICY_ADDR_TEXT_MAX 64 /* bytes of an address or CIDR literal */

/* Result of a pure parser over untrusted bytes. */
enum policy_name_status {
	POLICY_NAME_OK = 0,
	POLICY_NAME_INVALID,
	POLICY_NAME_TOO_LARGE,
};

/* Flags of policy_name_canon(). */
#define POLICY_NAME_WILDCARD 0x1    /* accept a leading "*." label */
#define POLICY_NAME_REQUIRE_DOT 0x2 /* at least two labels (FQDN) */

/* An IPv4 or IPv6 address with a prefix length (32/128 for a host). */
struct policy_addr {
	int family;        /* AF_INET or AF_INET6 */
	uint8_t bytes[16]; /* network order; 4 used for AF_INET */
	uint8_t prefix;    /* bits; bytes past it are zero */
};

/*
 * Canonicalise the name in[0..len): lowercase, one trailing dot removed,
 * LDH labels only (no leading/trailing hyphen), no empty label, labels
 * <= 63, name <= 253, no NUL or non-ASCII (IDN must be given as xn--),
 * and a last label that does not read as a number (2852039166, 0x7f01).
 * Writes a NUL-terminated canonical name to out (POLICY_NAME_MAX + 1
 * bytes) and its length to *outlen. Pure.
 */
enum policy_name_status policy_name_canon(const uint8_t *in, size_t len, unsigned flags, char *out,
    size_t *outlen) __attribute__((warn_unused_result));

/* True if the canonical name starts with the wildcard label "*.". */
bool policy_name_is_wildcard(const char *canon);

/*
 * Parse an IPv4 (strict dotted decimal, no leading zeros) or IPv6 literal
 * (no zone), with a "/prefix" when allow_prefix. IPv4-mapped IPv6
 * (::ffff:a.b.c.d) becomes the IPv4 form. A CIDR is masked to its
 * prefix. Pure.
 */
enum policy_name_status policy_addr_parse(const uint8_t *in, size_t len, bool allow_prefix,
    struct policy_addr *out) __attribute__((warn_unused_result));

/* Build an address from raw bytes (4 or 16), unmapping IPv4-mapped IPv6. */
void policy_addr_from_bytes(int family, const uint8_t *bytes, struct policy_addr *out);

/* True if addr lies inside the prefix net. */
bool policy_addr_in(const struct policy_addr *net, const struct policy_addr *addr);

/*
 * Format a to buf (at least POLICY_ADDR_TEXT_MAX bytes): "1.2.3.4",
 * "2001:db8::1", or with "/len" when the prefix is not a full host.
 */
void policy_addr_format(const struct policy_addr *a, char *buf, size_t buflen);

#endif
