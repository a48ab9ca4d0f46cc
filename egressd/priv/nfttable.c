/*
 * nfttable: the layout of the `inet egressd` table (parent process): the
 * zone chain before conntrack (the sidecar's marked flows in a conntrack
 * zone of their own), the filter chain on output before NAT (mark,
 * established, loopback, DNS, deny sets, allow and learned sets,
 * default), and the NAT chain that sends DNS and the intercepted ports to
 * the local listeners. Exemption is by packet mark only, never by uid.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_conntrack_tuple_common.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include "egressd/priv/nftrules.h"
#include "egressd/priv/nftrules_internal.h"

/* ---- rule expressions ---- */

static struct nftnl_expr *
ex(struct nftnl_rule *r, const char *name, bool *oom)
{
	struct nftnl_expr *e = nftnl_expr_alloc(name);

	if (e == NULL)
		*oom = true;
	else
		nftnl_rule_add_expr(r, e);
	return e;
}

static void
ex_meta(struct nftnl_rule *r, uint32_t key, uint32_t dreg, bool *oom)
{
	struct nftnl_expr *e = ex(r, "meta", oom);

	if (e == NULL)
		return;
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, dreg);
}

static void
ex_cmp(struct nftnl_rule *r, uint32_t op, const void *data, uint32_t len, bool *oom)
{
	struct nftnl_expr *e = ex(r, "cmp", oom);

	if (e == NULL)
		return;
	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG32_00);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
	nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
}

static void
ex_meta_eq8(struct nftnl_rule *r, uint32_t key, uint8_t v, bool *oom)
{
	ex_meta(r, key, NFT_REG32_00, oom);
	ex_cmp(r, NFT_CMP_EQ, &v, 1, oom);
}

static void
ex_payload(
    struct nftnl_rule *r, uint32_t base, uint32_t off, uint32_t len, uint32_t dreg, bool *oom)
{
	struct nftnl_expr *e = ex(r, "payload", oom);

	if (e == NULL)
		return;
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, off);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, dreg);
}

/* th dport == port (the caller matched the L4 protocol first). */
static void
ex_dport_eq(struct nftnl_rule *r, uint16_t port, bool *oom)
{
	uint16_t be = htons(port);

	ex_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG32_00, oom);
	ex_cmp(r, NFT_CMP_EQ, &be, 2, oom);
}

static struct nftnl_expr *
ex_lookup(struct nftnl_rule *r, const char *set, uint32_t id, bool *oom)
{
	struct nftnl_expr *e = ex(r, "lookup", oom);

	if (e == NULL)
		return NULL;
	nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG32_00);
	nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
	nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, id);
	return e;
}

/* A lookup that matches when the key is NOT in the set. */
static void
ex_lookup_inv(struct nftnl_rule *r, const char *set, uint32_t id, bool *oom)
{
	struct nftnl_expr *e = ex_lookup(r, set, id, oom);

	if (e != NULL)
		nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
}

static void
ex_verdict(struct nftnl_rule *r, int verdict, bool *oom)
{
	struct nftnl_expr *e = ex(r, "immediate", oom);

	if (e == NULL)
		return;
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)verdict);
}

/* TCP: reset; anything else: ICMP(v6) administratively prohibited. */
static void
ex_reject(struct nftnl_rule *r, bool tcp, bool *oom)
{
	struct nftnl_expr *e = ex(r, "reject", oom);

	if (e == NULL)
		return;
	if (tcp) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_REJECT_TYPE, NFT_REJECT_TCP_RST);
		nftnl_expr_set_u8(e, NFTNL_EXPR_REJECT_CODE, 0);
	} else {
		nftnl_expr_set_u32(e, NFTNL_EXPR_REJECT_TYPE, NFT_REJECT_ICMPX_UNREACH);
		nftnl_expr_set_u8(e, NFTNL_EXPR_REJECT_CODE, NFT_REJECT_ICMPX_ADMIN_PROHIBITED);
	}
}

/*
 * log group G prefix "egressd:<rule>" snaplen 128: the refusal that follows
 * leaves a record for the parent's NFLOG reader (priv/nflog.c). The rule
 * names are kreject.c's vocabulary.
 */
static void
ex_log(struct nftnl_rule *r, const struct nftrules_config *cfg, const char *rule, bool *oom)
{
	char prefix[64];
	struct nftnl_expr *e;

	if (cfg->nflog_group == 0 || (e = ex(r, "log", oom)) == NULL)
		return;
	snprintf(prefix, sizeof(prefix), "%s%s", NFTRULES_LOG_PREFIX, rule);
	nftnl_expr_set_u16(e, NFTNL_EXPR_LOG_GROUP, cfg->nflog_group);
	nftnl_expr_set_u32(e, NFTNL_EXPR_LOG_SNAPLEN, NFTRULES_LOG_SNAPLEN);
	if (nftnl_expr_set_str(e, NFTNL_EXPR_LOG_PREFIX, prefix) < 0)
		*oom = true;
}

/* ct state & bits != 0: the connection is in one of the states of bits. */
static void
ex_ct_state_in(struct nftnl_rule *r, uint32_t bits, bool *oom)
{
	uint32_t zero = 0;
	struct nftnl_expr *e = ex(r, "ct", oom);

	if (e != NULL) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATE);
		nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG32_00);
	}
	e = ex(r, "bitwise", oom);
	if (e != NULL) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG32_00);
		nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG32_00);
		nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, 4);
		nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, &bits, 4);
		nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, &zero, 4);
	}
	ex_cmp(r, NFT_CMP_NEQ, &zero, 4, oom);
}

/* redirect to a local port. */
static void
ex_redirect(struct nftnl_rule *r, uint16_t to_port, bool *oom)
{
	uint16_t be = htons(to_port);
	struct nftnl_expr *e = ex(r, "immediate", oom);

	if (e == NULL)
		return;
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG32_00);
	nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &be, sizeof(be));
	e = ex(r, "redir", oom);
	if (e == NULL)
		return;
	nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN, NFT_REG32_00);
	nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
}

static struct nftnl_rule *
rule_new(const struct nftrules_config *cfg, const char *chain)
{
	struct nftnl_rule *r = nftnl_rule_alloc();

	if (r == NULL)
		return NULL;
	nftnl_rule_set_str(r, NFTNL_RULE_TABLE, cfg->table);
	nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
	nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
	return r;
}

/* Append the rule (or fail the batch if an expression could not be made). */
static void
msg_rule(struct nftrules_batch *b, struct nftnl_rule *r, bool oom, const char *chain)
{
	struct nlmsghdr *nlh;
	char *p = nftrules_batch_reserve(b);

	if (r == NULL || oom || p == NULL) {
		nftrules_batch_fail(b, "out of memory");
		if (r != NULL)
			nftnl_rule_free(r);
		return;
	}
	nlh = nftnl_rule_nlmsg_build_hdr(
	    p, NFT_MSG_NEWRULE, NFPROTO_INET, NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK, b->seq++);
	nftnl_rule_nlmsg_build_payload(nlh, r);
	nftnl_rule_free(r);
	nftrules_batch_commit(b, nlh, "add rule to", chain);
}

/* meta mark == mark -> verdict, or reject (TCP reset / ICMPX). */
static void
rule_mark(struct nftrules_batch *b, const struct nftrules_config *cfg, const char *chain,
    uint32_t mark, int verdict, bool reject)
{
	struct nftnl_rule *r = rule_new(cfg, chain);
	bool oom = r == NULL;

	if (r != NULL) {
		ex_meta(r, NFT_META_MARK, NFT_REG32_00, &oom);
		ex_cmp(r, NFT_CMP_EQ, &mark, sizeof(mark), &oom);
		if (reject)
			ex_reject(r, false, &oom);
		else
			ex_verdict(r, verdict, &oom);
	}
	msg_rule(b, r, oom, chain);
}

/* l4proto proto, dport port -> verdict, or reject (TCP reset / ICMPX). */
static void
rule_port(struct nftrules_batch *b, const struct nftrules_config *cfg, const char *chain,
    uint8_t proto, uint16_t port, int verdict, bool reject)
{
	struct nftnl_rule *r = rule_new(cfg, chain);
	bool oom = r == NULL;

	if (r != NULL) {
		ex_meta_eq8(r, NFT_META_L4PROTO, proto, &oom);
		ex_dport_eq(r, port, &oom);
		if (reject) {
			ex_log(r, cfg, port == NFTRULES_PORT_DOT ? "dot" : "doh", &oom);
			ex_reject(r, proto == IPPROTO_TCP, &oom);
		} else
			ex_verdict(r, verdict, &oom);
	}
	msg_rule(b, r, oom, chain);
}

/*
 * Set lookup rule on the filter chain: nfproto, [l4proto], daddr [. dport]
 * in set -> accept or reject. proto 0 matches any L4 protocol.
 */
static void
rule_set(struct nftrules_batch *b, const struct nftrules_config *cfg, enum nftrules_set_kind kind,
    int family, uint8_t proto, bool reject)
{
	struct nftnl_rule *r = rule_new(cfg, NFTRULES_CHAIN_FILTER);
	bool oom = r == NULL;
	uint32_t alen = (uint32_t)nftrules_fam_alen(family);

	if (r != NULL) {
		ex_meta_eq8(
		    r, NFT_META_NFPROTO, family == AF_INET ? NFPROTO_IPV4 : NFPROTO_IPV6, &oom);
		if (proto != 0)
			ex_meta_eq8(r, NFT_META_L4PROTO, proto, &oom);
		ex_payload(r, NFT_PAYLOAD_NETWORK_HEADER, family == AF_INET ? 16 : 24, alen,
		    NFT_REG32_00, &oom);
		if (nftrules_kind_has_port(kind))
			ex_payload(
			    r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG32_00 + alen / 4, &oom);
		ex_lookup(
		    r, nftrules_set_name(kind, family), nftrules_set_id(b, kind, family), &oom);
		if (reject) {
			ex_log(r, cfg, nftrules_kind_has_port(kind) ? "deny_port" : "deny", &oom);
			ex_reject(r, proto == IPPROTO_TCP, &oom);
		} else
			ex_verdict(r, NF_ACCEPT, &oom);
	}
	msg_rule(b, r, oom, NFTRULES_CHAIN_FILTER);
}

/* meta mark == mark, daddr, l4proto, dport -> accept: a marked process to one destination. */
static void
rule_mark_dest(struct nftrules_batch *b, const struct nftrules_config *cfg, uint32_t mark,
    const struct nftrules_dest *d, uint8_t proto)
{
	struct nftnl_rule *r = rule_new(cfg, NFTRULES_CHAIN_FILTER);
	bool oom = r == NULL;
	uint32_t alen = (uint32_t)nftrules_fam_alen(d->family);

	if (r != NULL) {
		ex_meta(r, NFT_META_MARK, NFT_REG32_00, &oom);
		ex_cmp(r, NFT_CMP_EQ, &mark, sizeof(mark), &oom);
		ex_meta_eq8(
		    r, NFT_META_NFPROTO, d->family == AF_INET ? NFPROTO_IPV4 : NFPROTO_IPV6, &oom);
		ex_payload(r, NFT_PAYLOAD_NETWORK_HEADER, d->family == AF_INET ? 16 : 24, alen,
		    NFT_REG32_00, &oom);
		ex_cmp(r, NFT_CMP_EQ, d->addr, alen, &oom);
		ex_meta_eq8(r, NFT_META_L4PROTO, proto, &oom);
		ex_dport_eq(r, d->port, &oom);
		ex_verdict(r, NF_ACCEPT, &oom);
	}
	msg_rule(b, r, oom, NFTRULES_CHAIN_FILTER);
}

/* meta mark == mark, l4proto, dport -> reject: the sidecar's DNS to anyone else. */
static void
rule_mark_port_reject(struct nftrules_batch *b, const struct nftrules_config *cfg,
    const char *chain, uint8_t proto, uint16_t port)
{
	struct nftnl_rule *r = rule_new(cfg, chain);
	bool oom = r == NULL;

	if (r != NULL) {
		ex_meta(r, NFT_META_MARK, NFT_REG32_00, &oom);
		ex_cmp(r, NFT_CMP_EQ, &cfg->mark, sizeof(cfg->mark), &oom);
		ex_meta_eq8(r, NFT_META_L4PROTO, proto, &oom);
		ex_dport_eq(r, port, &oom);
		ex_reject(r, proto == IPPROTO_TCP, &oom);
	}
	msg_rule(b, r, oom, chain);
}

/*
 * OPENSANDBOX_EGRESS_BLOCK_DOH_443: port 443 to the DoH blocklist (or to
 * every address when the list is empty) is refused, TCP with a reset and
 * UDP (DoH over HTTP/3) with ICMP. An allowed resolver host would
 * otherwise answer DNS over HTTPS past the DNS proxy.
 */
static void
rules_doh(struct nftrules_batch *b, const struct nftrules_config *cfg)
{
	static const int fams[] = {AF_INET, AF_INET6};
	static const uint8_t l4[] = {IPPROTO_TCP, IPPROTO_UDP};

	if (!cfg->block_doh)
		return;
	for (size_t p = 0; p < sizeof(l4); p++) {
		if (cfg->ndoh == 0) {
			rule_port(b, cfg, NFTRULES_CHAIN_FILTER, l4[p], NFTRULES_PORT_DOH, 0, true);
			continue;
		}
		for (size_t f = 0; f < 2; f++) {
			struct nftnl_rule *r = rule_new(cfg, NFTRULES_CHAIN_FILTER);
			bool oom = r == NULL;
			uint32_t alen = (uint32_t)nftrules_fam_alen(fams[f]);

			if (r != NULL) {
				ex_meta_eq8(r, NFT_META_NFPROTO,
				    fams[f] == AF_INET ? NFPROTO_IPV4 : NFPROTO_IPV6, &oom);
				ex_meta_eq8(r, NFT_META_L4PROTO, l4[p], &oom);
				ex_dport_eq(r, NFTRULES_PORT_DOH, &oom);
				ex_payload(r, NFT_PAYLOAD_NETWORK_HEADER,
				    fams[f] == AF_INET ? 16 : 24, alen, NFT_REG32_00, &oom);
				ex_lookup(r, nftrules_set_name(NFTRULES_SET_DOH, fams[f]),
				    nftrules_set_id(b, NFTRULES_SET_DOH, fams[f]), &oom);
				ex_log(r, cfg, "doh", &oom);
				ex_reject(r, l4[p] == IPPROTO_TCP, &oom);
			}
			msg_rule(b, r, oom, NFTRULES_CHAIN_FILTER);
		}
	}
}

/* An IPv6 destination prefix that neighbour discovery may go to. */
struct nd_dst {
	uint8_t net[16];
	uint8_t plen;
};

/* nfproto ipv6, l4proto icmpv6, icmpv6 type t, ip6 daddr in d -> accept. */
static void
rule_nd(
    struct nftrules_batch *b, const struct nftrules_config *cfg, uint8_t t, const struct nd_dst *d)
{
	struct nftnl_rule *r = rule_new(cfg, NFTRULES_CHAIN_FILTER);
	bool oom = r == NULL;
	uint8_t mask[16], zero[16];

	memset(zero, 0, sizeof(zero));
	for (size_t by = 0; by < 16; by++) {
		int bits = (int)d->plen - (int)by * 8;
		mask[by] = bits >= 8 ? 0xff : bits <= 0 ? 0 : (uint8_t)(0xff << (8 - bits));
	}
	if (r != NULL) {
		struct nftnl_expr *e;

		ex_meta_eq8(r, NFT_META_NFPROTO, NFPROTO_IPV6, &oom);
		ex_meta_eq8(r, NFT_META_L4PROTO, IPPROTO_ICMPV6, &oom);
		ex_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 1, NFT_REG32_00, &oom);
		ex_cmp(r, NFT_CMP_EQ, &t, 1, &oom);
		ex_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 24, 16, NFT_REG32_00, &oom);
		e = ex(r, "bitwise", &oom);
		if (e != NULL) {
			nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG32_00);
			nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG32_00);
			nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, 16);
			nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, mask, 16);
			nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, zero, 16);
		}
		ex_cmp(r, NFT_CMP_EQ, d->net, 16, &oom);
		ex_verdict(r, NF_ACCEPT, &oom);
	}
	msg_rule(b, r, oom, NFTRULES_CHAIN_FILTER);
}

/*
 * icmpv6 type nd-router-solicit limit rate over RATE/second burst BURST
 * packets drop: router solicitations are bounded whatever their
 * destination, so a workload with CAP_NET_RAW cannot flood the link (and
 * the node's router) with them. One rule, so one bucket for every RS the
 * namespace sends, the kernel's own included (it sends three at link up).
 */
static void
rule_rs_limit(struct nftrules_batch *b, const struct nftrules_config *cfg)
{
	struct nftnl_rule *r = rule_new(cfg, NFTRULES_CHAIN_FILTER);
	bool oom = r == NULL;
	uint8_t t = NFTRULES_ICMPV6_RS;

	if (r != NULL) {
		struct nftnl_expr *e;

		ex_meta_eq8(r, NFT_META_NFPROTO, NFPROTO_IPV6, &oom);
		ex_meta_eq8(r, NFT_META_L4PROTO, IPPROTO_ICMPV6, &oom);
		ex_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 1, NFT_REG32_00, &oom);
		ex_cmp(r, NFT_CMP_EQ, &t, 1, &oom);
		e = ex(r, "limit", &oom);
		if (e != NULL) {
			nftnl_expr_set_u64(e, NFTNL_EXPR_LIMIT_RATE, NFTRULES_RS_RATE);
			nftnl_expr_set_u64(e, NFTNL_EXPR_LIMIT_UNIT, 1); /* per second */
			nftnl_expr_set_u32(e, NFTNL_EXPR_LIMIT_BURST, NFTRULES_RS_BURST);
			nftnl_expr_set_u32(e, NFTNL_EXPR_LIMIT_TYPE, NFT_LIMIT_PKTS);
			nftnl_expr_set_u32(e, NFTNL_EXPR_LIMIT_FLAGS, NFT_LIMIT_F_INV);
		}
		ex_verdict(r, NF_DROP, &oom);
	}
	msg_rule(b, r, oom, NFTRULES_CHAIN_FILTER);
}

/*
 * With a chained proxy every dial of the sidecar goes through it, so the
 * workload's own traffic may leave only where the NAT chain hands it to the
 * intercept: TCP to an intercepted port, or to a name-learned address (the
 * peek listener). Anything else (UDP but the DNS accepted earlier, other
 * protocols, TCP to an IP-allowed address on another port) would be a
 * direct dial past the proxy: it is refused before the allow rules.
 */
static void
rules_proxy_only(struct nftrules_batch *b, const struct nftrules_config *cfg)
{
	const char *fc = NFTRULES_CHAIN_FILTER;
	struct nftnl_rule *r;
	bool oom;

	r = rule_new(cfg, fc);
	oom = r == NULL;
	if (r != NULL) {
		uint8_t tcp = IPPROTO_TCP;

		ex_meta(r, NFT_META_L4PROTO, NFT_REG32_00, &oom);
		ex_cmp(r, NFT_CMP_NEQ, &tcp, 1, &oom);
		ex_log(r, cfg, "proxy_only", &oom);
		ex_reject(r, false, &oom);
	}
	msg_rule(b, r, oom, fc);
	for (int f = 0; f < 2; f++) {
		int fam = f == 0 ? AF_INET : AF_INET6;
		uint32_t alen = (uint32_t)nftrules_fam_alen(fam);

		r = rule_new(cfg, fc);
		oom = r == NULL;
		if (r == NULL) {
			msg_rule(b, r, oom, fc);
			continue;
		}
		ex_meta_eq8(
		    r, NFT_META_NFPROTO, fam == AF_INET ? NFPROTO_IPV4 : NFPROTO_IPV6, &oom);
		/* A cmp or lookup reads its registers and leaves them as they are. */
		ex_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG32_00, &oom);
		for (size_t i = 0; i < cfg->nintercept && i < NFTRULES_MAX_INTERCEPT; i++) {
			uint16_t be = htons(cfg->intercept_ports[i].port);

			ex_cmp(r, NFT_CMP_NEQ, &be, 2, &oom);
		}
		if (cfg->peek_port != 0) {
			ex_payload(r, NFT_PAYLOAD_NETWORK_HEADER, fam == AF_INET ? 16 : 24, alen,
			    NFT_REG32_00, &oom);
			ex_lookup_inv(r, nftrules_set_name(NFTRULES_SET_LEARNED, fam),
			    nftrules_set_id(b, NFTRULES_SET_LEARNED, fam), &oom);
			ex_payload(
			    r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG32_00 + alen / 4, &oom);
			ex_lookup_inv(r, nftrules_set_name(NFTRULES_SET_LEARNEDP, fam),
			    nftrules_set_id(b, NFTRULES_SET_LEARNEDP, fam), &oom);
		}
		ex_log(r, cfg, "proxy_only", &oom);
		ex_reject(r, true, &oom);
		msg_rule(b, r, oom, fc);
	}
}

/*
 * The filter chain, in order: established/related accept, the sidecar's
 * DNS to its resolvers accept and to anyone else reject, loopback
 * accept, router solicitations past their rate drop, IPv6 ND on the link
 * accept, DNS accept (the NAT chain redirects it), DoH 443 reject (when
 * configured), deny sets reject, port-scoped allow/learned accept, DoT
 * reject, allow and
 * learned accept, then reject (deny) or accept (allow). Deny comes before
 * every allow so that defaultAction allow still enforces deny rules.
 */
static void
chain_filter_rules(
    struct nftrules_batch *b, const struct nftrules_config *cfg, enum nftrules_action def)
{
	static const uint8_t nd[] = {NFTRULES_ICMPV6_RS, NFTRULES_ICMPV6_NS, NFTRULES_ICMPV6_NA};
	static const struct nd_dst nd_dst[] = {
	    {{0xfe, 0x80}, 10}, /* link-local */
	    {{0xff}, 8},        /* multicast (solicited-node, all-routers) */
	};
	static const int fams[] = {AF_INET, AF_INET6};
	static const uint8_t l4[] = {IPPROTO_TCP, IPPROTO_UDP};
	const char *fc = NFTRULES_CHAIN_FILTER;
	struct nftnl_rule *r;
	bool oom;

	r = rule_new(cfg, fc);
	oom = r == NULL;
	if (r != NULL) {
		ex_ct_state_in(
		    r, NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED), &oom);
		ex_verdict(r, NF_ACCEPT, &oom);
	}
	msg_rule(b, r, oom, fc);

	/*
	 * The sidecar's own sockets (SO_MARK, which needs CAP_NET_ADMIN) are
	 * no blanket exemption. The dns process's (dns_mark) reach the
	 * configured resolvers and nothing else; the intercept's (mark) send
	 * no DNS, and everything else they send meets the same sets as the
	 * workload's traffic below (never an inner address; under deny-all,
	 * nothing the policy does not allow). A child that a parser bug
	 * handed to the workload gets no further with a marked socket.
	 */
	if (cfg->proxy && cfg->dns_via_proxy) {
		/* DNS over TCP through CONNECT: the proxy is the dns process's only peer. */
		for (size_t i = 0; i < cfg->nproxy && i < NFTRULES_MAX_PROXY; i++)
			rule_mark_dest(b, cfg, cfg->dns_mark, &cfg->proxy_dests[i], IPPROTO_TCP);
	} else
		for (size_t i = 0; i < cfg->nresolvers; i++)
			for (size_t p = 0; p < sizeof(l4); p++)
				rule_mark_dest(b, cfg, cfg->dns_mark, &cfg->resolvers[i], l4[p]);
	rule_mark(b, cfg, fc, cfg->dns_mark, 0, true);
	/* The report process's: TCP to the webhook and the collector, nothing else. */
	if (cfg->report_mark != 0) {
		for (size_t i = 0; i < cfg->nreports && i < NFTRULES_MAX_REPORTS; i++)
			rule_mark_dest(b, cfg, cfg->report_mark, &cfg->reports[i], IPPROTO_TCP);
		rule_mark(b, cfg, fc, cfg->report_mark, 0, true);
	}
	for (size_t p = 0; p < sizeof(l4); p++)
		rule_mark_port_reject(b, cfg, fc, l4[p], NFTRULES_PORT_DNS);
	/* With a chained proxy, the intercept's: TCP to the proxy, nothing else (no direct dial). */
	if (cfg->proxy) {
		for (size_t i = 0; i < cfg->nproxy && i < NFTRULES_MAX_PROXY; i++)
			rule_mark_dest(b, cfg, cfg->mark, &cfg->proxy_dests[i], IPPROTO_TCP);
		rule_mark(b, cfg, fc, cfg->mark, 0, true);
	}

	r = rule_new(cfg, fc);
	oom = r == NULL;
	if (r != NULL) {
		uint32_t lo = NFTRULES_LOOPBACK_IFINDEX;

		ex_meta(r, NFT_META_OIF, NFT_REG32_00, &oom);
		ex_cmp(r, NFT_CMP_EQ, &lo, 4, &oom);
		ex_verdict(r, NF_ACCEPT, &oom);
	}
	msg_rule(b, r, oom, fc);

	/*
	 * IPv6 needs neighbour discovery to reach even allowed hosts, but
	 * only on the link: RS/NS/NA to a link-local (fe80::/10) or
	 * multicast (ff00::/8) destination. Sent to a routed address they
	 * would carry data (target, options) past the policy. Router
	 * solicitations are rate-limited first (rule_rs_limit).
	 */
	rule_rs_limit(b, cfg);
	for (size_t i = 0; i < sizeof(nd); i++)
		for (size_t k = 0; k < sizeof(nd_dst) / sizeof(nd_dst[0]); k++)
			rule_nd(b, cfg, nd[i], &nd_dst[k]);

	/* DNS is accepted here because the NAT chain redirects it next. */
	for (size_t p = 0; p < sizeof(l4); p++)
		rule_port(b, cfg, fc, l4[p], NFTRULES_PORT_DNS, NF_ACCEPT, false);

	/* DoH blocking comes before every allow, so no allow rule can undo it. */
	rules_doh(b, cfg);
	if (cfg->proxy)
		rules_proxy_only(b, cfg);

	/* Deny before any allow, so defaultAction allow keeps deny rules. */
	for (size_t f = 0; f < 2; f++) {
		rule_set(b, cfg, NFTRULES_SET_DENY, fams[f], IPPROTO_TCP, true);
		rule_set(b, cfg, NFTRULES_SET_DENY, fams[f], 0, true);
		for (size_t p = 0; p < sizeof(l4); p++)
			rule_set(b, cfg, NFTRULES_SET_DENYP, fams[f], l4[p], true);
	}
	/* Rule ports are TCP ports: UDP (QUIC) never leaves through a port rule. */
	for (size_t f = 0; f < 2; f++) {
		rule_set(b, cfg, NFTRULES_SET_ALLOWP, fams[f], IPPROTO_TCP, false);
		rule_set(b, cfg, NFTRULES_SET_LEARNEDP, fams[f], IPPROTO_TCP, false);
	}
	/* DoT bypasses the DNS proxy: refused unless a port rule allowed it. */
	for (size_t p = 0; p < sizeof(l4); p++)
		rule_port(b, cfg, fc, l4[p], NFTRULES_PORT_DOT, 0, true);
	/*
	 * A name allowed without ports opens TCP only: UDP (QUIC, DNS to
	 * the host itself) needs explicit ports, so HTTP/3 falls back to
	 * TCP where it is intercepted. IP/CIDR rules cover every protocol.
	 */
	for (size_t f = 0; f < 2; f++) {
		rule_set(b, cfg, NFTRULES_SET_ALLOW, fams[f], 0, false);
		rule_set(b, cfg, NFTRULES_SET_LEARNED, fams[f], IPPROTO_TCP, false);
	}

	r = rule_new(cfg, fc);
	oom = r == NULL;
	if (r != NULL && def == NFTRULES_DENY) {
		ex_meta_eq8(r, NFT_META_L4PROTO, IPPROTO_TCP, &oom);
		ex_log(r, cfg, "default_tcp", &oom);
		ex_reject(r, true, &oom);
		msg_rule(b, r, oom, fc);
		r = rule_new(cfg, fc);
		oom = r == NULL;
		if (r != NULL) {
			ex_log(r, cfg, "default", &oom);
			ex_reject(r, false, &oom);
		}
	} else if (r != NULL) {
		ex_verdict(r, NF_ACCEPT, &oom);
	}
	msg_rule(b, r, oom, fc);
}

/*
 * NAT: TCP to a name-learned address ([. dport] in a learned set) goes to
 * the peek listener, whatever the port: the filter chain only knows the
 * address, which a CDN shares with hosts the policy denies, so the SNI or
 * Host check must see every connection to it (the shared-IP hole).
 */
static void
rule_learned_redirect(struct nftrules_batch *b, const struct nftrules_config *cfg,
    enum nftrules_set_kind kind, int family)
{
	struct nftnl_rule *r = rule_new(cfg, NFTRULES_CHAIN_NAT);
	bool oom = r == NULL;
	uint32_t alen = (uint32_t)nftrules_fam_alen(family);

	if (r != NULL) {
		ex_meta_eq8(
		    r, NFT_META_NFPROTO, family == AF_INET ? NFPROTO_IPV4 : NFPROTO_IPV6, &oom);
		ex_meta_eq8(r, NFT_META_L4PROTO, IPPROTO_TCP, &oom);
		ex_payload(r, NFT_PAYLOAD_NETWORK_HEADER, family == AF_INET ? 16 : 24, alen,
		    NFT_REG32_00, &oom);
		if (nftrules_kind_has_port(kind))
			ex_payload(
			    r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG32_00 + alen / 4, &oom);
		ex_lookup(
		    r, nftrules_set_name(kind, family), nftrules_set_id(b, kind, family), &oom);
		ex_redirect(r, cfg->peek_port, &oom);
	}
	msg_rule(b, r, oom, NFTRULES_CHAIN_NAT);
}

/*
 * The NAT chain (after the filter chain saw the original destination):
 * marked traffic returns, DNS goes to the proxy, intercepted ports to the
 * vault listeners, other TCP ports of learned addresses to the peek one.
 */
static void
chain_nat_rules(struct nftrules_batch *b, const struct nftrules_config *cfg)
{
	static const uint8_t l4[] = {IPPROTO_UDP, IPPROTO_TCP};
	const char *nc = NFTRULES_CHAIN_NAT;
	struct nftnl_rule *r;
	bool oom;

	rule_mark(b, cfg, nc, cfg->mark, NFT_RETURN, false);
	rule_mark(b, cfg, nc, cfg->dns_mark, NFT_RETURN, false);
	if (cfg->report_mark != 0)
		rule_mark(b, cfg, nc, cfg->report_mark, NFT_RETURN, false);
	for (size_t p = 0; p < sizeof(l4); p++) {
		r = rule_new(cfg, nc);
		oom = r == NULL;
		if (r != NULL) {
			ex_meta_eq8(r, NFT_META_L4PROTO, l4[p], &oom);
			ex_dport_eq(r, NFTRULES_PORT_DNS, &oom);
			ex_redirect(r, cfg->dns_port, &oom);
		}
		msg_rule(b, r, oom, nc);
	}
	if (!cfg->intercept)
		return;
	/* Loopback services of the sandbox are not sent to the vault. */
	r = rule_new(cfg, nc);
	oom = r == NULL;
	if (r != NULL) {
		uint32_t lo = NFTRULES_LOOPBACK_IFINDEX;

		ex_meta(r, NFT_META_OIF, NFT_REG32_00, &oom);
		ex_cmp(r, NFT_CMP_EQ, &lo, 4, &oom);
		ex_verdict(r, NFT_RETURN, &oom);
	}
	msg_rule(b, r, oom, nc);
	for (size_t i = 0; i < cfg->nintercept && i < NFTRULES_MAX_INTERCEPT; i++) {
		r = rule_new(cfg, nc);
		oom = r == NULL;
		if (r != NULL) {
			ex_meta_eq8(r, NFT_META_L4PROTO, IPPROTO_TCP, &oom);
			ex_dport_eq(r, cfg->intercept_ports[i].port, &oom);
			ex_redirect(r, cfg->intercept_ports[i].to_port, &oom);
		}
		msg_rule(b, r, oom, nc);
	}
	if (cfg->peek_port == 0)
		return;
	for (size_t f = 0; f < 2; f++) {
		int fam = f == 0 ? AF_INET : AF_INET6;

		rule_learned_redirect(b, cfg, NFTRULES_SET_LEARNED, fam);
		rule_learned_redirect(b, cfg, NFTRULES_SET_LEARNEDP, fam);
	}
}

/*
 * The input chain: each of the sidecar's ports (API, DNS, intercept) is
 * served only by a socket carrying the sidecar's mark. The parent holds
 * those sockets for its whole life; should the port ever be bound by
 * anyone else (while the sidecar restarts, with the table kept), that
 * socket has no mark and cannot get one without CAP_NET_ADMIN, so what
 * arrives for it is refused. A packet whose socket the kernel finds only
 * as a request or time-wait socket (no mark to read) is not matched: such
 * sockets exist only after a SYN that a marked listener accepted.
 */
/*
 * tcp dport P ct state new ct count over N -> reset: a port whose server
 * has no connection cap of its own (the API: libevent's evhttp has none)
 * cannot be made to hold every descriptor of the process that serves it.
 */
static void
rule_conn_cap(
    struct nftrules_batch *b, const struct nftrules_config *cfg, const struct nftrules_listener *li)
{
	struct nftnl_rule *r = rule_new(cfg, NFTRULES_CHAIN_INPUT);
	bool oom = r == NULL;

	if (r != NULL) {
		struct nftnl_expr *e;

		ex_meta_eq8(r, NFT_META_L4PROTO, IPPROTO_TCP, &oom);
		ex_dport_eq(r, li->port, &oom);
		ex_ct_state_in(r, NF_CT_STATE_BIT(IP_CT_NEW), &oom);
		e = ex(r, "connlimit", &oom);
		if (e != NULL) {
			nftnl_expr_set_u32(e, NFTNL_EXPR_CONNLIMIT_COUNT, li->max_conns);
			nftnl_expr_set_u32(e, NFTNL_EXPR_CONNLIMIT_FLAGS, NFT_CONNLIMIT_F_INV);
		}
		ex_reject(r, true, &oom);
	}
	msg_rule(b, r, oom, NFTRULES_CHAIN_INPUT);
}

/*
 * The zone chain (priority raw, before conntrack): every packet that
 * carries one of the sidecar's marks is tracked with its original
 * direction in conntrack zone NFTRULES_CT_ZONE, the reply direction in the
 * default zone. A flow's NAT verdict and its "established" state belong
 * to its first packet, and a UDP entry outlives its socket by 30 s or
 * more; in one zone a workload that binds the source port of the proxy's
 * finished upstream query would send as that established flow, straight
 * past the redirect, and a proxy query on a port the workload just used
 * would be redirected by the workload's flow. Replies still match: the
 * reply tuple is hashed in the default zone, as the packets that come
 * back are (and as the sidecar's answers to the workload's redirected
 * flows are looked up).
 */
static void
chain_zone_rules(struct nftrules_batch *b, const struct nftrules_config *cfg)
{
	const uint32_t marks[] = {cfg->mark, cfg->dns_mark, cfg->report_mark};
	const uint16_t zone = NFTRULES_CT_ZONE;

	for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++) {
		struct nftnl_rule *r;
		struct nftnl_expr *e;
		bool oom, dup = false;

		for (size_t j = 0; j < i; j++)
			dup = dup || marks[j] == marks[i];
		if (marks[i] == 0 || dup)
			continue;
		r = rule_new(cfg, NFTRULES_CHAIN_ZONE);
		oom = r == NULL;
		if (r != NULL) {
			ex_meta(r, NFT_META_MARK, NFT_REG32_00, &oom);
			ex_cmp(r, NFT_CMP_EQ, &marks[i], sizeof(marks[i]), &oom);
			e = ex(r, "immediate", &oom);
			if (e != NULL) {
				nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG32_00);
				nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &zone, sizeof(zone));
			}
			e = ex(r, "ct", &oom);
			if (e != NULL) {
				nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_ZONE);
				nftnl_expr_set_u8(e, NFTNL_EXPR_CT_DIR, IP_CT_DIR_ORIGINAL);
				nftnl_expr_set_u32(e, NFTNL_EXPR_CT_SREG, NFT_REG32_00);
			}
		}
		msg_rule(b, r, oom, NFTRULES_CHAIN_ZONE);
	}
}

static void
chain_input_rules(struct nftrules_batch *b, const struct nftrules_config *cfg)
{
	const char *ic = NFTRULES_CHAIN_INPUT;

	for (size_t i = 0; i < cfg->nlisteners; i++) {
		const struct nftrules_listener *li = &cfg->listeners[i];
		struct nftnl_rule *r = rule_new(cfg, ic);
		bool oom = r == NULL;

		if (r != NULL) {
			struct nftnl_expr *e;

			ex_meta_eq8(r, NFT_META_L4PROTO, li->proto, &oom);
			ex_dport_eq(r, li->port, &oom);
			e = ex(r, "socket", &oom);
			if (e != NULL) {
				nftnl_expr_set_u32(e, NFTNL_EXPR_SOCKET_KEY, NFT_SOCKET_MARK);
				nftnl_expr_set_u32(e, NFTNL_EXPR_SOCKET_DREG, NFT_REG32_00);
			}
			ex_cmp(r, NFT_CMP_NEQ, &cfg->listen_mark, sizeof(cfg->listen_mark), &oom);
			ex_reject(r, li->proto == IPPROTO_TCP, &oom);
		}
		msg_rule(b, r, oom, ic);
		if (li->proto == IPPROTO_TCP && li->max_conns > 0)
			rule_conn_cap(b, cfg, li);
	}
}

static void
msg_chain(struct nftrules_batch *b, const struct nftrules_config *cfg, const char *name,
    const char *type, uint32_t hook, int prio)
{
	struct nftnl_chain *c = nftnl_chain_alloc();
	struct nlmsghdr *nlh;
	char *p = nftrules_batch_reserve(b);

	if (c == NULL || p == NULL) {
		nftrules_batch_fail(b, "out of memory");
		if (c != NULL)
			nftnl_chain_free(c);
		return;
	}
	nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, cfg->table);
	nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
	nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, type);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, hook);
	nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
	nlh = nftnl_chain_nlmsg_build_hdr(
	    p, NFT_MSG_NEWCHAIN, NFPROTO_INET, NLM_F_CREATE | NLM_F_ACK, b->seq++);
	nftnl_chain_nlmsg_build_payload(nlh, c);
	nftnl_chain_free(c);
	nftrules_batch_commit(b, nlh, "add chain", name);
}

/* DELRULE without a handle: the kernel flushes the chain. */
static void
msg_flush_chain(struct nftrules_batch *b, const struct nftrules_config *cfg, const char *name)
{
	struct nftnl_rule *r = rule_new(cfg, name);
	struct nlmsghdr *nlh;
	char *p = nftrules_batch_reserve(b);

	if (r == NULL || p == NULL) {
		nftrules_batch_fail(b, "out of memory");
		if (r != NULL)
			nftnl_rule_free(r);
		return;
	}
	nlh = nftnl_rule_nlmsg_build_hdr(p, NFT_MSG_DELRULE, NFPROTO_INET, NLM_F_ACK, b->seq++);
	nftnl_rule_nlmsg_build_payload(nlh, r);
	nftnl_rule_free(r);
	nftrules_batch_commit(b, nlh, "flush chain", name);
}

/* Whole table: add+delete+add table, sets, chains, rules, static elements. */
int
nftrules_build_install(
    struct nftrules_batch *b, const struct nftrules_config *cfg, const struct nftrules_static *st)
{
	static const int fams[] = {AF_INET, AF_INET6};

	if (!nftrules_config_ok(b, cfg))
		return -1;
	nftrules_batch_begin(b);
	/* add + delete + add: replaces the table whether or not it exists. */
	nftrules_msg_table(b, cfg, NFT_MSG_NEWTABLE);
	nftrules_msg_table(b, cfg, NFT_MSG_DELTABLE);
	nftrules_msg_table(b, cfg, NFT_MSG_NEWTABLE);
	for (int k = 0; k < NFTRULES_SET_KINDS; k++)
		for (size_t f = 0; f < 2; f++)
			if (k != NFTRULES_SET_DOH || cfg->block_doh)
				nftrules_msg_set(b, cfg, (enum nftrules_set_kind)k, fams[f]);
	nftrules_static_elems(b, cfg, st);
	nftrules_doh_elems(b, cfg);
	msg_chain(b, cfg, NFTRULES_CHAIN_ZONE, "filter", NF_INET_LOCAL_OUT, NFTRULES_ZONE_PRIO);
	chain_zone_rules(b, cfg);
	msg_chain(b, cfg, NFTRULES_CHAIN_FILTER, "filter", NF_INET_LOCAL_OUT, NFTRULES_FILTER_PRIO);
	chain_filter_rules(b, cfg, st->default_action);
	msg_chain(b, cfg, NFTRULES_CHAIN_NAT, "nat", NF_INET_LOCAL_OUT, NFTRULES_NAT_PRIO);
	chain_nat_rules(b, cfg);
	msg_chain(b, cfg, NFTRULES_CHAIN_INPUT, "filter", NF_INET_LOCAL_IN, NFTRULES_INPUT_PRIO);
	chain_input_rules(b, cfg);
	return nftrules_batch_end(b);
}

/* Re-create allow/deny sets and refill the filter chain; learned sets kept. */
int
nftrules_build_update_static(
    struct nftrules_batch *b, const struct nftrules_config *cfg, const struct nftrules_static *st)
{
	static const int fams[] = {AF_INET, AF_INET6};

	if (!nftrules_config_ok(b, cfg))
		return -1;
	nftrules_batch_begin(b);
	/*
	 * The rules that reference the static sets go first; then the sets are
	 * deleted and re-created (5x faster than a flush + refill of 10k
	 * elements in one transaction). Learned sets are not touched.
	 */
	msg_flush_chain(b, cfg, NFTRULES_CHAIN_FILTER);
	for (int k = NFTRULES_SET_ALLOW; k <= NFTRULES_SET_DENYP; k++)
		for (size_t f = 0; f < 2; f++)
			nftrules_msg_del_set(b, cfg, (enum nftrules_set_kind)k, fams[f]);
	for (int k = NFTRULES_SET_ALLOW; k <= NFTRULES_SET_DENYP; k++)
		for (size_t f = 0; f < 2; f++)
			nftrules_msg_set(b, cfg, (enum nftrules_set_kind)k, fams[f]);
	nftrules_static_elems(b, cfg, st);
	chain_filter_rules(b, cfg, st->default_action);
	return nftrules_batch_end(b);
}

/* Delete the table. */
int
nftrules_build_remove_table(struct nftrules_batch *b, const struct nftrules_config *cfg)
{
	if (!nftrules_config_ok(b, cfg))
		return -1;
	nftrules_batch_begin(b);
	nftrules_msg_table(b, cfg, NFT_MSG_DELTABLE);
	return nftrules_batch_end(b);
}
