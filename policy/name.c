/*
 * name.c: the host name canonicaliser and the IP/CIDR literal parser.
 * Run by every process that matches names or addresses (policy loaders,
 * DNS proxy, SNI and Host checks). Pure functions over (bytes, length):
 * they must never allocate, log, or accept two spellings of one name.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "policy/name.h"

static bool
name_is_ldh(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

static bool
name_is_hex(uint8_t c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/*
 * A last label made only of digits, or of "0x" and hex digits, makes the
 * name read as a numeric address to some resolvers (inet_aton forms such
 * as 2852039166 or 0xa9fea9fe); no real TLD looks like that.
 */
static bool
name_label_is_numeric(const char *l, size_t n)
{
	size_t i = 0;
	bool hex = false;

	if (n >= 2 && l[0] == '0' && l[1] == 'x') {
		i = 2;
		hex = true;
		if (n == 2)
			return false;
	}
	for (; i < n; i++) {
		if (hex ? !name_is_hex((uint8_t)l[i]) : !(l[i] >= '0' && l[i] <= '9'))
			return false;
	}
	return true;
}

/* Canonicalise a host name; see name.h. */
enum policy_name_status
policy_name_canon(const uint8_t *in, size_t len, unsigned flags, char *out, size_t *outlen)
{
	size_t i, o = 0, lstart = 0, labels = 0;

	*outlen = 0;
	out[0] = '\0';
	if (in == NULL || len == 0)
		return POLICY_NAME_INVALID;
	/* One trailing dot is the root label: strip exactly one. */
	if (in[len - 1] == '.')
		len--;
	if (len == 0)
		return POLICY_NAME_INVALID;
	if (len > POLICY_NAME_MAX)
		return POLICY_NAME_TOO_LARGE;
	i = 0;
	if (len >= 2 && in[0] == '*' && in[1] == '.') {
		if (!(flags & POLICY_NAME_WILDCARD))
			return POLICY_NAME_INVALID;
		out[o++] = '*';
		out[o++] = '.';
		i = 2;
		lstart = o;
	}
	for (; i < len; i++) {
		uint8_t c = in[i];

		if (c >= 'A' && c <= 'Z')
			c = (uint8_t)(c - 'A' + 'a');
		if (c == '.') {
			size_t ll = o - lstart;
			if (ll == 0)
				return POLICY_NAME_INVALID; /* empty label */
			if (out[lstart] == '-' || out[o - 1] == '-')
				return POLICY_NAME_INVALID;
			labels++;
			out[o++] = '.';
			lstart = o;
			continue;
		}
		/* NUL, '*', '[', ':', '_', spaces and non-ASCII all end here. */
		if (!name_is_ldh(c))
			return POLICY_NAME_INVALID;
		out[o++] = (char)c;
		if (o - lstart > POLICY_LABEL_MAX)
			return POLICY_NAME_INVALID;
	}
	if (o == lstart)
		return POLICY_NAME_INVALID; /* "*." alone or empty last label */
	if (out[lstart] == '-' || out[o - 1] == '-')
		return POLICY_NAME_INVALID;
	labels++;
	if (name_label_is_numeric(out + lstart, o - lstart))
		return POLICY_NAME_INVALID;
	if ((flags & POLICY_NAME_REQUIRE_DOT) && labels < 2)
		return POLICY_NAME_INVALID;
	out[o] = '\0';
	*outlen = o;
	return POLICY_NAME_OK;
}

/* True if canon begins with the wildcard label. */
bool
policy_name_is_wildcard(const char *canon)
{
	return canon[0] == '*' && canon[1] == '.';
}

/* Strict dotted-quad: four decimal parts 0..255, no leading zeros. */
static bool
addr_parse_v4(const char *s, size_t n, uint8_t out[4])
{
	size_t i = 0;

	for (int part = 0; part < 4; part++) {
		unsigned v = 0;
		size_t digits = 0;

		if (part > 0) {
			if (i >= n || s[i] != '.')
				return false;
			i++;
		}
		while (i < n && s[i] >= '0' && s[i] <= '9') {
			if (digits > 0 && v == 0)
				return false; /* leading zero: octal in inet_aton */
			v = v * 10 + (unsigned)(s[i] - '0');
			if (v > 255)
				return false;
			digits++;
			i++;
		}
		if (digits == 0)
			return false;
		out[part] = (uint8_t)v;
	}
	return i == n;
}

static void
addr_mask(struct policy_addr *a)
{
	size_t total = a->family == AF_INET ? 4 : 16;

	for (size_t b = 0; b < total; b++) {
		unsigned bit0 = (unsigned)b * 8;
		if (bit0 >= a->prefix)
			a->bytes[b] = 0;
		else if (bit0 + 8 > a->prefix)
			a->bytes[b] &= (uint8_t)(0xff << (8 - (a->prefix - bit0)));
	}
}

/* Rewrite ::ffff:a.b.c.d (and its prefixes >= 96) to the IPv4 form. */
static void
addr_unmap(struct policy_addr *a)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	if (a->family != AF_INET6 || a->prefix < 96 || memcmp(a->bytes, mapped, 12) != 0)
		return;
	memmove(a->bytes, a->bytes + 12, 4);
	memset(a->bytes + 4, 0, 12);
	a->family = AF_INET;
	a->prefix = (uint8_t)(a->prefix - 96);
}

/* Parse an address or CIDR literal; see name.h. */
enum policy_name_status
policy_addr_parse(const uint8_t *in, size_t len, bool allow_prefix, struct policy_addr *out)
{
	char buf[POLICY_ADDR_TEXT_MAX];
	size_t alen = len;
	unsigned prefix = 0;
	bool has_prefix = false;

	memset(out, 0, sizeof(*out));
	if (in == NULL || len == 0)
		return POLICY_NAME_INVALID;
	if (len >= sizeof(buf))
		return POLICY_NAME_TOO_LARGE;
	memcpy(buf, in, len);
	buf[len] = '\0';
	if (memchr(buf, '\0', len) != NULL)
		return POLICY_NAME_INVALID;
	char *slash = memchr(buf, '/', len);
	if (slash != NULL) {
		size_t digits = 0;
		if (!allow_prefix)
			return POLICY_NAME_INVALID;
		alen = (size_t)(slash - buf);
		for (char *p = slash + 1; *p != '\0'; p++) {
			if (*p < '0' || *p > '9' || (digits > 0 && prefix == 0))
				return POLICY_NAME_INVALID;
			prefix = prefix * 10 + (unsigned)(*p - '0');
			if (prefix > 128)
				return POLICY_NAME_INVALID;
			digits++;
		}
		if (digits == 0)
			return POLICY_NAME_INVALID;
		has_prefix = true;
		*slash = '\0';
	}
	if (addr_parse_v4(buf, alen, out->bytes)) {
		out->family = AF_INET;
		if (has_prefix && prefix > 32)
			return POLICY_NAME_INVALID;
		out->prefix = (uint8_t)(has_prefix ? prefix : 32);
	} else {
		/* inet_pton refuses zones ("%eth0"), brackets and ports. */
		if (memchr(buf, ':', alen) == NULL || inet_pton(AF_INET6, buf, out->bytes) != 1)
			return POLICY_NAME_INVALID;
		out->family = AF_INET6;
		out->prefix = (uint8_t)(has_prefix ? prefix : 128);
	}
	addr_mask(out);
	addr_unmap(out);
	return POLICY_NAME_OK;
}

/* Build an address from 4 or 16 raw bytes; see name.h. */
void
policy_addr_from_bytes(int family, const uint8_t *bytes, struct policy_addr *out)
{
	memset(out, 0, sizeof(*out));
	out->family = family;
	memcpy(out->bytes, bytes, family == AF_INET ? 4 : 16);
	out->prefix = family == AF_INET ? 32 : 128;
	addr_unmap(out);
}

/* Prefix containment; see name.h. */
bool
policy_addr_in(const struct policy_addr *net, const struct policy_addr *addr)
{
	unsigned full, rem;

	if (net->family != addr->family || addr->prefix < net->prefix)
		return false;
	full = net->prefix / 8;
	rem = net->prefix % 8;
	if (memcmp(net->bytes, addr->bytes, full) != 0)
		return false;
	if (rem == 0)
		return true;
	uint8_t m = (uint8_t)(0xff << (8 - rem));
	return (net->bytes[full] & m) == (addr->bytes[full] & m);
}

/* Text form of an address or prefix; see name.h. */
void
policy_addr_format(const struct policy_addr *a, char *buf, size_t buflen)
{
	char tmp[INET6_ADDRSTRLEN];
	unsigned full = a->family == AF_INET ? 32 : 128;

	if (inet_ntop(a->family, a->bytes, tmp, sizeof(tmp)) == NULL) {
		snprintf(buf, buflen, "?");
		return;
	}
	if (a->prefix == full)
		snprintf(buf, buflen, "%s", tmp);
	else
		snprintf(buf, buflen, "%s/%u", tmp, (unsigned)a->prefix);
}
