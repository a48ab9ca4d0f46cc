/*
 * The refusing rules' vocabulary (dns process and the policy CLI). One
 * table: nfttable.c names its log prefixes after these entries, and a
 * rule not found here is reported as unparsed, never guessed at.
 */
#include <string.h>
#include <netinet/in.h>

#include "egressd/dns/krule.h"

enum {
	KRULE_R_DEFAULT_TCP,
	KRULE_R_DEFAULT,
	KRULE_R_DENY,
	KRULE_R_DENY_PORT,
	KRULE_R_DOH,
	KRULE_R_DOT,
	KRULE_R_PROXY_ONLY,
	KRULE_R_MAX,
};

static const struct krule krule_rules[KRULE_R_MAX] = {
    [KRULE_R_DEFAULT_TCP] = {"default_tcp", "meta l4proto tcp reject with tcp reset (last rule)",
        "no allow rule covers the address and port, and no allowed name resolved to it "
        "(direct IP, an address never learned or expired, or a port the name is not "
        "allowed on)"},
    [KRULE_R_DEFAULT] = {"default", "reject with icmpx admin-prohibited (last rule)",
        "UDP or another protocol to a destination no IP rule allows (names allowed without "
        "ports open TCP only; UDP needs an explicit port rule)"},
    [KRULE_R_DENY] = {"deny", "ip[6] daddr @deny4/@deny6 reject",
        "the address is in a deny rule or in the sandbox's own networks"},
    [KRULE_R_DENY_PORT] = {"deny_port", "ip[6] daddr . th dport @denyp4/@denyp6 reject",
        "the address and port are in a deny rule"},
    [KRULE_R_DOH] = {"doh", "th dport 443 [daddr @doh4/@doh6] reject",
        "port 443 to a DNS-over-HTTPS resolver (OPENSANDBOX_EGRESS_BLOCK_DOH_443)"},
    [KRULE_R_DOT] = {"dot", "th dport 853 reject",
        "DNS over TLS, which would bypass the DNS proxy, without a port rule allowing it"},
    [KRULE_R_PROXY_ONLY] = {"proxy_only", "(upstream proxy) not an intercepted dial reject",
        "with a chained upstream proxy, a connection that would leave directly instead of "
        "through the intercept and the proxy"},
};

const struct krule *
krule_by_name(const char *name)
{
	for (size_t i = 0; i < KRULE_R_MAX; i++)
		if (strcmp(krule_rules[i].name, name) == 0)
			return &krule_rules[i];
	return NULL;
}

/* The rule of an NFLOG prefix. */
const struct krule *
krule_find(const char *prefix)
{
	size_t pl = strlen(KRULE_PREFIX);

	if (strncmp(prefix, KRULE_PREFIX, pl) != 0)
		return NULL;
	return krule_by_name(prefix + pl);
}

/* The reason a rule gives; see krule.h. */
enum krule_reason
krule_reason(const struct krule *r, uint8_t proto)
{
	if (r == NULL)
		return KRULE_UNPARSED;
	switch (r - krule_rules) {
	case KRULE_R_DEFAULT_TCP:
		return KRULE_NOT_ALLOWED;
	case KRULE_R_DEFAULT:
		if (proto == IPPROTO_TCP)
			return KRULE_NOT_ALLOWED;
		return proto == IPPROTO_UDP ? KRULE_UDP_NOT_ALLOWED : KRULE_PROTO_NOT_ALLOWED;
	case KRULE_R_DENY:
		return KRULE_ADDRESS_DENIED;
	case KRULE_R_DENY_PORT:
		return KRULE_PORT_DENIED;
	case KRULE_R_DOH:
		return KRULE_DOH_BLOCKED;
	case KRULE_R_DOT:
		return KRULE_DOT_BLOCKED;
	case KRULE_R_PROXY_ONLY:
		return KRULE_PROXY_BYPASS;
	default:
		return KRULE_UNPARSED;
	}
}

const char *
krule_reason_name(enum krule_reason reason)
{
	static const char *const names[KRULE_NREASONS] = {
	    [KRULE_NOT_ALLOWED] = "not_allowed",
	    [KRULE_UDP_NOT_ALLOWED] = "udp_not_allowed",
	    [KRULE_PROTO_NOT_ALLOWED] = "protocol_not_allowed",
	    [KRULE_ADDRESS_DENIED] = "address_denied",
	    [KRULE_PORT_DENIED] = "port_denied",
	    [KRULE_DOH_BLOCKED] = "doh_blocked",
	    [KRULE_DOT_BLOCKED] = "dot_blocked",
	    [KRULE_PROXY_BYPASS] = "proxy_bypass",
	    [KRULE_UNPARSED] = "unparsed",
	};

	return (unsigned)reason < KRULE_NREASONS ? names[reason] : "unparsed";
}

const struct krule *
krule_all(size_t *n)
{
	*n = KRULE_R_MAX;
	return krule_rules;
}
