/*
 * pkthdr: the headers of one packet the kernel refused, as NFLOG copied
 * them (dns process; kreject.c). Pure and bounded: it reads the IPv4 or
 * IPv6 header, walks at most PKTHDR_MAX_EXT IPv6 extension headers, and
 * takes the ports of TCP, UDP, UDP-Lite and SCTP or the type and code of
 * ICMP and ICMPv6. No allocation, no I/O; never reads past len.
 */
#ifndef EGRESSD_PKTHDR_H
#define EGRESSD_PKTHDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PKTHDR_MAX_COPY 128 /* bytes of a packet worth reading (the NFLOG copy range) */
#define PKTHDR_MAX_EXT 8    /* IPv6 extension headers walked before the transport one */

enum pkthdr_status {
	PKTHDR_OK,      /* addresses and, where the protocol has them, ports or ICMP type */
	PKTHDR_SHORT,   /* the copy ends inside the transport header: addresses and protocol only */
	PKTHDR_INVALID, /* not an IPv4/IPv6 packet, or its header lengths are inconsistent */
};

/* What the headers say; every field is zero when absent. */
struct pkthdr {
	int family;    /* AF_INET or AF_INET6 */
	uint8_t proto; /* the transport protocol (after IPv6 extension headers) */
	uint8_t src[16], dst[16];
	bool has_ports; /* TCP, UDP, UDP-Lite, SCTP: sport and dport are set */
	uint16_t sport, dport;
	bool has_icmp; /* ICMP, ICMPv6: type and code are set */
	uint8_t icmp_type, icmp_code;
	bool fragment; /* a non-first fragment: no transport header */
};

/*
 * Parse the copy of a packet, network header first (p, len borrowed for
 * the call). family 0 takes the IP version from the packet, else the
 * version must match it. *out is filled on OK and SHORT.
 */
enum pkthdr_status pkthdr_parse(const uint8_t *p, size_t len, int family, struct pkthdr *out)
    __attribute__((warn_unused_result));

/* The protocol's name for logs ("tcp", "udp", "icmp"...), or NULL for another. */
const char *pkthdr_proto_name(uint8_t proto);

#endif
