/*
 * Packet header reader for refused packets (dns process, from the NFLOG
 * records the parent passes on unparsed). The bytes are the workload's:
 * every read goes through pkthdr_u8/pkthdr_u16/pkthdr_bytes, which check
 * the offset against the copy's length, and the walk of IPv6 extension
 * headers is bounded. It must never read past len or loop on a header
 * that points at itself.
 */
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include "egressd/dns/pkthdr.h"

#define PKTHDR_IP4_MIN 20
#define PKTHDR_IP6_LEN 40

struct pkthdr_cur {
	const uint8_t *p;
	size_t len;
};

static bool
pkthdr_u8(const struct pkthdr_cur *c, size_t off, uint8_t *v)
{
	if (off >= c->len)
		return false;
	*v = c->p[off];
	return true;
}

static bool
pkthdr_u16(const struct pkthdr_cur *c, size_t off, uint16_t *v)
{
	if (off > c->len || c->len - off < 2)
		return false;
	*v = (uint16_t)(c->p[off] << 8 | c->p[off + 1]);
	return true;
}

static bool
pkthdr_bytes(const struct pkthdr_cur *c, size_t off, size_t n, uint8_t *out)
{
	if (off > c->len || c->len - off < n)
		return false;
	memcpy(out, c->p + off, n);
	return true;
}

/* The transport header at off: ports or ICMP type and code. */
static enum pkthdr_status
pkthdr_l4(const struct pkthdr_cur *c, size_t off, struct pkthdr *h)
{
	switch (h->proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_UDPLITE:
	case IPPROTO_SCTP:
		if (!pkthdr_u16(c, off, &h->sport) || !pkthdr_u16(c, off + 2, &h->dport))
			return PKTHDR_SHORT;
		h->has_ports = true;
		return PKTHDR_OK;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		if (!pkthdr_u8(c, off, &h->icmp_type) || !pkthdr_u8(c, off + 1, &h->icmp_code))
			return PKTHDR_SHORT;
		h->has_icmp = true;
		return PKTHDR_OK;
	default:
		return PKTHDR_OK; /* a protocol without ports: the addresses say it all */
	}
}

static enum pkthdr_status
pkthdr_ip4(const struct pkthdr_cur *c, struct pkthdr *h)
{
	uint8_t vihl, proto;
	uint16_t total, frag;
	size_t hl;

	if (!pkthdr_u8(c, 0, &vihl) || !pkthdr_u16(c, 2, &total) || !pkthdr_u16(c, 6, &frag) ||
	    !pkthdr_u8(c, 9, &proto) || !pkthdr_bytes(c, 12, 4, h->src) ||
	    !pkthdr_bytes(c, 16, 4, h->dst))
		return PKTHDR_INVALID;
	hl = (size_t)(vihl & 0x0f) * 4;
	/* A header shorter than 20 bytes, or longer than the packet, is no IPv4 header. */
	if (hl < PKTHDR_IP4_MIN || total < hl)
		return PKTHDR_INVALID;
	h->family = AF_INET;
	h->proto = proto;
	if ((frag & 0x1fff) != 0) {
		h->fragment = true;
		return PKTHDR_OK;
	}
	if (hl > c->len)
		return PKTHDR_SHORT;
	return pkthdr_l4(c, hl, h);
}

static enum pkthdr_status
pkthdr_ip6(const struct pkthdr_cur *c, struct pkthdr *h)
{
	uint8_t next;
	size_t off = PKTHDR_IP6_LEN;

	if (!pkthdr_u8(c, 6, &next) || !pkthdr_bytes(c, 8, 16, h->src) ||
	    !pkthdr_bytes(c, 24, 16, h->dst))
		return PKTHDR_INVALID;
	h->family = AF_INET6;
	for (int i = 0; i < PKTHDR_MAX_EXT; i++) {
		uint8_t nh, elen;
		uint16_t frag;

		switch (next) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS:
			if (!pkthdr_u8(c, off, &nh) || !pkthdr_u8(c, off + 1, &elen)) {
				h->proto = next;
				return PKTHDR_SHORT;
			}
			next = nh;
			off += ((size_t)elen + 1) * 8;
			continue;
		case IPPROTO_AH:
			if (!pkthdr_u8(c, off, &nh) || !pkthdr_u8(c, off + 1, &elen)) {
				h->proto = next;
				return PKTHDR_SHORT;
			}
			next = nh;
			off += ((size_t)elen + 2) * 4;
			continue;
		case IPPROTO_FRAGMENT:
			if (!pkthdr_u8(c, off, &nh) || !pkthdr_u16(c, off + 2, &frag)) {
				h->proto = next;
				return PKTHDR_SHORT;
			}
			next = nh;
			off += 8;
			if ((frag & 0xfff8) != 0) {
				h->proto = next;
				h->fragment = true;
				return PKTHDR_OK;
			}
			continue;
		default:
			h->proto = next;
			return pkthdr_l4(c, off, h);
		}
	}
	/* More extension headers than any real packet needs: protocol unknown. */
	h->proto = next;
	return PKTHDR_SHORT;
}

/* Parse one packet copy; see pkthdr.h. */
enum pkthdr_status
pkthdr_parse(const uint8_t *p, size_t len, int family, struct pkthdr *out)
{
	struct pkthdr_cur c = {p, len > PKTHDR_MAX_COPY ? PKTHDR_MAX_COPY : len};
	uint8_t v;
	enum pkthdr_status st;

	memset(out, 0, sizeof(*out));
	if (p == NULL || !pkthdr_u8(&c, 0, &v))
		return PKTHDR_INVALID;
	v >>= 4;
	if (v == 4 && (family == 0 || family == AF_INET))
		st = pkthdr_ip4(&c, out);
	else if (v == 6 && (family == 0 || family == AF_INET6))
		st = pkthdr_ip6(&c, out);
	else
		st = PKTHDR_INVALID;
	if (st == PKTHDR_INVALID)
		memset(out, 0, sizeof(*out));
	return st;
}

/* Names of the protocols a log line spells out. */
const char *
pkthdr_proto_name(uint8_t proto)
{
	switch (proto) {
	case IPPROTO_TCP:
		return "tcp";
	case IPPROTO_UDP:
		return "udp";
	case IPPROTO_UDPLITE:
		return "udplite";
	case IPPROTO_SCTP:
		return "sctp";
	case IPPROTO_ICMP:
		return "icmp";
	case IPPROTO_ICMPV6:
		return "icmpv6";
	default:
		return NULL;
	}
}
