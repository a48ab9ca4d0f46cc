/*
 * addrclass: the one table of inner addresses (any process; pure). Every
 * range names its source, so that a reader of the table, the logs and
 * `egressd explain` knows why an address is refused. Two copies of this
 * rule would drift apart, and the gap between them is a bypass: the DNS
 * filter, the nft deny sets and the intercept all come here.
 */
#include <string.h>
#include <sys/socket.h>

#include "policy/addrclass.h"

struct addrclass_range {
	int family;
	uint8_t addr[16];
	uint8_t prefix;
	enum addrclass cls;
	const char *why;
};

/*
 * The ranges, most specific first within a family (the first match
 * decides). Sources: RFC 6890 (special-purpose registries), RFC 3927
 * (link-local), the clouds' metadata documentation (AWS, GCP and Azure
 * IMDS at 169.254.169.254, Azure WireServer 168.63.129.16, Oracle OCI
 * 192.0.0.192, Alibaba 100.100.100.200, AWS IPv6 fd00:ec2::254),
 * RFC 1918, RFC 6598 (CGNAT), RFC 4193 (ULA), RFC 3879 (site-local).
 */
static const struct addrclass_range addrclass_table[] = {
    {AF_INET, {168, 63, 129, 16}, 32, ADDRCLASS_INNER, "168.63.129.16/32 Azure WireServer"},
    {AF_INET, {100, 100, 100, 200}, 32, ADDRCLASS_INNER,
        "100.100.100.200/32 Alibaba Cloud metadata"},
    {AF_INET, {192, 0, 0, 192}, 32, ADDRCLASS_INNER, "192.0.0.192/32 Oracle Cloud metadata"},
    {AF_INET, {0}, 8, ADDRCLASS_LOOPBACK, "0.0.0.0/8 this network (RFC 6890)"},
    {AF_INET, {127}, 8, ADDRCLASS_LOOPBACK, "127.0.0.0/8 loopback"},
    {AF_INET, {169, 254}, 16, ADDRCLASS_INNER,
        "169.254.0.0/16 link-local (cloud metadata 169.254.169.254)"},
    {AF_INET, {192, 0, 0}, 24, ADDRCLASS_INNER,
        "192.0.0.0/24 IETF protocol assignments (RFC 6890)"},
    {AF_INET, {224}, 4, ADDRCLASS_INNER, "224.0.0.0/4 multicast"},
    {AF_INET, {240}, 4, ADDRCLASS_INNER, "240.0.0.0/4 reserved and broadcast"},
    {AF_INET, {10}, 8, ADDRCLASS_PRIVATE, "10.0.0.0/8 private (RFC 1918)"},
    {AF_INET, {172, 16}, 12, ADDRCLASS_PRIVATE, "172.16.0.0/12 private (RFC 1918)"},
    {AF_INET, {192, 168}, 16, ADDRCLASS_PRIVATE, "192.168.0.0/16 private (RFC 1918)"},
    {AF_INET, {100, 64}, 10, ADDRCLASS_PRIVATE, "100.64.0.0/10 shared address space (RFC 6598)"},
    {AF_INET6, {0xfd, 0x00, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54}, 128, ADDRCLASS_INNER,
        "fd00:ec2::254/128 AWS IPv6 metadata"},
    {AF_INET6, {0}, 128, ADDRCLASS_LOOPBACK, "::/128 unspecified"},
    {AF_INET6, {[15] = 1}, 128, ADDRCLASS_LOOPBACK, "::1/128 loopback"},
    {AF_INET6, {0x20, 0x01, 0, 0}, 32, ADDRCLASS_INNER, "2001::/32 Teredo (embeds IPv4)"},
    {AF_INET6, {0xfe, 0x80}, 10, ADDRCLASS_INNER, "fe80::/10 link-local"},
    {AF_INET6, {0xff}, 8, ADDRCLASS_INNER, "ff00::/8 multicast"},
    {AF_INET6, {0xfc}, 7, ADDRCLASS_PRIVATE, "fc00::/7 unique local (RFC 4193)"},
    {AF_INET6, {0xfe, 0xc0}, 10, ADDRCLASS_PRIVATE, "fec0::/10 site-local (RFC 3879)"},
};

#define ADDRCLASS_N (sizeof(addrclass_table) / sizeof(addrclass_table[0]))

/* IPv6 prefixes that embed an IPv4 address, and where its four bytes are. */
static const struct {
	uint8_t prefix[16];
	uint8_t len;     /* bits */
	uint8_t at[4];   /* byte offsets of the IPv4 address */
	bool on_wire;    /* false: the kernel sends these as IPv4 (mapped) */
	const char *why; /* what the embedding is */
} addrclass_embed[] = {
    {{[10] = 0xff, [11] = 0xff}, 96, {12, 13, 14, 15}, false, "IPv4-mapped"},
    {{0x00, 0x64, 0xff, 0x9b}, 96, {12, 13, 14, 15}, true, "NAT64 64:ff9b::/96"},
    /* RFC 6052 /48: bits 64-71 (the "u" octet) are skipped. */
    {{0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48, {6, 7, 9, 10}, true, "NAT64 64:ff9b:1::/48"},
    {{0x20, 0x02}, 16, {2, 3, 4, 5}, true, "6to4 2002::/16"},
    {{0}, 96, {12, 13, 14, 15}, true, "IPv4-compatible ::/96"},
};

#define ADDRCLASS_NEMBED (sizeof(addrclass_embed) / sizeof(addrclass_embed[0]))

static bool
addrclass_match(const uint8_t *a, const uint8_t *net, unsigned bits)
{
	size_t whole = bits / 8;
	unsigned rest = bits % 8;

	if (memcmp(a, net, whole) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((a[whole] ^ net[whole]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

static enum addrclass
addrclass_lookup(int family, const uint8_t *addr, const char **why)
{
	for (size_t i = 0; i < ADDRCLASS_N; i++) {
		const struct addrclass_range *r = &addrclass_table[i];

		if (r->family == family && addrclass_match(addr, r->addr, r->prefix)) {
			*why = r->why;
			return r->cls;
		}
	}
	*why = "public";
	return ADDRCLASS_PUBLIC;
}

/* The IPv4 address an IPv6 address embeds, if it has one of the embeddings. */
static bool
addrclass_embedded(const uint8_t *a6, uint8_t v4[4])
{
	for (size_t i = 0; i < ADDRCLASS_NEMBED; i++) {
		if (!addrclass_match(a6, addrclass_embed[i].prefix, addrclass_embed[i].len))
			continue;
		for (size_t k = 0; k < 4; k++)
			v4[k] = a6[addrclass_embed[i].at[k]];
		return true;
	}
	return false;
}

/* Classify an address (see addrclass.h). */
enum addrclass
addrclass_of(int family, const uint8_t *addr, const char **why)
{
	const char *w = "public";
	enum addrclass c;
	uint8_t v4[4];

	if (why == NULL)
		why = &w;
	if (family == AF_INET)
		return addrclass_lookup(AF_INET, addr, why);
	if (family != AF_INET6) {
		*why = "not an IP address";
		return ADDRCLASS_INNER;
	}
	/* Exact IPv6 entries (::, ::1, metadata) before the embeddings. */
	c = addrclass_lookup(AF_INET6, addr, why);
	if (c != ADDRCLASS_PUBLIC)
		return c;
	/* An embedded inner address is as inner as the address itself. */
	if (addrclass_embedded(addr, v4))
		return addrclass_lookup(AF_INET, v4, why);
	return ADDRCLASS_PUBLIC;
}

static unsigned
addrclass_bits(int family)
{
	return family == AF_INET ? 32 : 128;
}

/* Add a prefix to the own networks (see addrclass.h). */
int
addrclass_own_add(struct addrclass_own *own, int family, const uint8_t *addr, unsigned prefix)
{
	struct policy_addr a;
	size_t alen = family == AF_INET ? 4 : 16, keep = 0;

	if ((family != AF_INET && family != AF_INET6) || prefix > addrclass_bits(family))
		return -1;
	memset(&a, 0, sizeof(a));
	a.family = family;
	a.prefix = (uint8_t)prefix;
	for (size_t by = 0; by < alen; by++) {
		int bits = (int)prefix - (int)by * 8;

		a.bytes[by] = addr[by] & (bits >= 8 ? 0xff : bits <= 0 ? 0 : 0xff << (8 - bits));
	}
	for (size_t i = 0; i < own->n; i++)
		if (policy_addr_in(&own->net[i], &a))
			return 0;
	/* Those inside the new prefix go; the rest keep their order. */
	for (size_t i = 0; i < own->n; i++)
		if (!policy_addr_in(&a, &own->net[i]))
			own->net[keep++] = own->net[i];
	if (keep >= ADDRCLASS_MAX_OWN)
		return -1;
	own->n = keep;
	own->net[own->n++] = a;
	return 0;
}

/* Whether two own lists hold the same prefixes (see addrclass.h). */
bool
addrclass_own_equal(const struct addrclass_own *a, const struct addrclass_own *b)
{
	size_t na = a != NULL ? a->n : 0, nb = b != NULL ? b->n : 0;

	if (na != nb)
		return false;
	/* Neither holds duplicates (addrclass_own_add): same size, a in b, equal. */
	for (size_t i = 0; i < na; i++) {
		bool found = false;

		for (size_t k = 0; k < nb && !found; k++)
			found = a->net[i].family == b->net[k].family &&
			        a->net[i].prefix == b->net[k].prefix &&
			        memcmp(a->net[i].bytes, b->net[k].bytes, 16) == 0;
		if (!found)
			return false;
	}
	return true;
}

static bool
addrclass_own_match(const struct addrclass_own *own, int family, const uint8_t *addr)
{
	struct policy_addr a;

	memset(&a, 0, sizeof(a));
	a.family = family;
	memcpy(a.bytes, addr, family == AF_INET ? 4 : 16);
	a.prefix = (uint8_t)addrclass_bits(family);
	for (size_t i = 0; i < own->n; i++)
		if (policy_addr_in(&own->net[i], &a))
			return true;
	return false;
}

/* Whether an address is in the sandbox's own networks (see addrclass.h). */
bool
addrclass_is_own(const struct addrclass_own *own, int family, const uint8_t *addr, const char **why)
{
	uint8_t v4[4];
	bool hit;

	if (own == NULL || (family != AF_INET && family != AF_INET6))
		return false;
	hit = addrclass_own_match(own, family, addr) ||
	      (family == AF_INET6 && addrclass_embedded(addr, v4) &&
	          addrclass_own_match(own, AF_INET, v4));
	if (hit && why != NULL)
		*why = "the sandbox's own network (an on-link prefix, address or gateway)";
	return hit;
}

/* Whether an answer or destination must be refused (see addrclass.h). */
bool
addrclass_refused(const struct addrclass_own *own, int family, const uint8_t *addr,
    bool block_private, const char **why)
{
	enum addrclass c = addrclass_of(family, addr, why);

	if (c == ADDRCLASS_INNER || c == ADDRCLASS_LOOPBACK)
		return true;
	if (addrclass_is_own(own, family, addr, why))
		return true;
	return block_private && c == ADDRCLASS_PRIVATE;
}

/* Append one prefix if there is room; count it either way. */
static void
addrclass_put(struct policy_addr *out, size_t cap, size_t *n, int family, const uint8_t *bytes,
    unsigned prefix)
{
	if (*n < cap) {
		struct policy_addr *a = &out[*n];

		memset(a, 0, sizeof(*a));
		a->family = family;
		memcpy(a->bytes, bytes, family == AF_INET ? 4 : 16);
		a->prefix = (uint8_t)prefix;
	}
	(*n)++;
}

/* One prefix, and an IPv4 one again in each on-wire IPv6 spelling. */
static void
addrclass_put_spellings(struct policy_addr *out, size_t cap, size_t *n, int family,
    const uint8_t *addr, unsigned prefix)
{
	addrclass_put(out, cap, n, family, addr, prefix);
	if (family != AF_INET)
		return;
	for (size_t e = 0; e < ADDRCLASS_NEMBED; e++) {
		uint8_t v6[16];
		unsigned bits = addrclass_embed[e].len;

		if (!addrclass_embed[e].on_wire)
			continue;
		memcpy(v6, addrclass_embed[e].prefix, 16);
		for (size_t k = 0; k < 4; k++)
			v6[addrclass_embed[e].at[k]] = addr[k];
		/*
		 * The IPv4 prefix continues the IPv6 one; where the
		 * embedding skips an octet (NAT64 /48), a prefix that
		 * reaches past it covers the skipped octet whole.
		 */
		if (addrclass_embed[e].at[3] - addrclass_embed[e].at[0] == 3)
			bits += prefix;
		else if (prefix <= 16)
			bits += prefix;
		else
			bits += 8 + prefix;
		addrclass_put(out, cap, n, AF_INET6, v6, bits);
	}
}

/* The always-denied prefixes and their embedded spellings (see addrclass.h). */
size_t
addrclass_deny_prefixes(const struct addrclass_own *own, struct policy_addr *out, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < ADDRCLASS_N; i++) {
		const struct addrclass_range *r = &addrclass_table[i];

		if (r->cls != ADDRCLASS_INNER && r->cls != ADDRCLASS_LOOPBACK)
			continue;
		addrclass_put_spellings(out, cap, &n, r->family, r->addr, r->prefix);
	}
	for (size_t i = 0; own != NULL && i < own->n && i < ADDRCLASS_MAX_OWN; i++)
		addrclass_put_spellings(
		    out, cap, &n, own->net[i].family, own->net[i].bytes, own->net[i].prefix);
	return n;
}
