/*
 * nftrules: builds and applies the `inet egressd` nftables table through
 * libnftnl/libmnl: address sets, a filter chain on output before NAT and a
 * NAT chain that sends DNS (and intercepted ports) to local listeners.
 *
 * Runs in the privileged parent only. It must never run the nft command,
 * never exempt traffic by uid (only by packet mark), and never report
 * success for a batch before every ACK of it has been read and matched.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
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

/* nft's datatype ids, so that `nft list` prints our sets readably. */
#define NFTRULES_TYPE_IPV4 7
#define NFTRULES_TYPE_IPV6 8
#define NFTRULES_TYPE_SERVICE 13
#define NFTRULES_TYPE_BITS 6
#define NFTRULES_LOOPBACK_IFINDEX 1 /* lo is always ifindex 1 in a netns */
#define NFTRULES_RECV_BUF (64 * 1024)
#define NFTRULES_ICMPV6_RS 133
#define NFTRULES_ICMPV6_NS 135
#define NFTRULES_ICMPV6_NA 136
#define NFTRULES_PORT_DNS 53
#define NFTRULES_PORT_DOT 853

struct nftrules {
	struct nftrules_config cfg;
	struct mnl_socket *nl;
	uint32_t portid;
	uint32_t seq;
	char err[NFTRULES_ERRLEN];
};

/* An address range (and port range for port-scoped sets). */
struct nftrules_range {
	uint8_t lo[16];
	uint8_t hi[16];
	uint16_t plo;
	uint16_t phi;
};

static const char *const nftrules_set_names[NFTRULES_SET_KINDS][2] = {
    [NFTRULES_SET_ALLOW] = {"allow4", "allow6"},
    [NFTRULES_SET_DENY] = {"deny4", "deny6"},
    [NFTRULES_SET_ALLOWP] = {"allowp4", "allowp6"},
    [NFTRULES_SET_DENYP] = {"denyp4", "denyp6"},
    [NFTRULES_SET_LEARNED] = {"learned4", "learned6"},
    [NFTRULES_SET_LEARNEDP] = {"learnedp4", "learnedp6"},
};

static bool
kind_has_port(enum nftrules_set_kind k)
{
	return k == NFTRULES_SET_ALLOWP || k == NFTRULES_SET_DENYP || k == NFTRULES_SET_LEARNEDP;
}

static bool
kind_is_interval(enum nftrules_set_kind k)
{
	return k != NFTRULES_SET_LEARNED && k != NFTRULES_SET_LEARNEDP;
}

static size_t
fam_alen(int family)
{
	return family == AF_INET ? 4 : 16;
}

/* Name of a set ("allow4", "learnedp6", ...). */
const char *
nftrules_set_name(enum nftrules_set_kind kind, int family)
{
	return nftrules_set_names[kind][family == AF_INET ? 0 : 1];
}

static void
batch_fail(struct nftrules_batch *b, const char *why)
{
	if (b->failed)
		return;
	b->failed = true;
	snprintf(b->err, sizeof(b->err), "%s", why);
}

/* Start an empty batch whose first message gets sequence number seq. */
void
nftrules_batch_init(struct nftrules_batch *b, uint32_t seq)
{
	memset(b, 0, sizeof(*b));
	b->seq = seq;
	b->set_id = 1;
}

/* Free the batch's buffers. */
void
nftrules_batch_deinit(struct nftrules_batch *b)
{
	free(b->buf);
	free(b->msgs);
	memset(b, 0, sizeof(*b));
}

/* Room for one more message; NULL (and failed) when out of memory. */
static char *
batch_reserve(struct nftrules_batch *b)
{
	if (b->failed)
		return NULL;
	if (b->cap - b->len < NFTRULES_MSG_MAX) {
		size_t ncap = b->cap ? b->cap * 2 : 4 * NFTRULES_MSG_MAX;
		uint8_t *nb = realloc(b->buf, ncap);

		if (nb == NULL) {
			batch_fail(b, "out of memory");
			return NULL;
		}
		b->buf = nb;
		b->cap = ncap;
	}
	memset(b->buf + b->len, 0, NFTRULES_MSG_MAX);
	return (char *)b->buf + b->len;
}

/* Account for the message just built; what != NULL records it for its ACK. */
static void
batch_commit(struct nftrules_batch *b, struct nlmsghdr *nlh, const char *what, const char *obj)
{
	if (nlh->nlmsg_len > NFTRULES_MSG_MAX) {
		batch_fail(b, "netlink message too large");
		return;
	}
	b->len += NLMSG_ALIGN(nlh->nlmsg_len);
	if (what == NULL)
		return;
	if (b->nmsgs == b->msgs_cap) {
		size_t ncap = b->msgs_cap ? b->msgs_cap * 2 : 64;
		struct nftrules_msg *nm = realloc(b->msgs, ncap * sizeof(*nm));

		if (nm == NULL) {
			batch_fail(b, "out of memory");
			return;
		}
		b->msgs = nm;
		b->msgs_cap = ncap;
	}
	b->msgs[b->nmsgs].seq = nlh->nlmsg_seq;
	snprintf(b->msgs[b->nmsgs].what, NFTRULES_WHAT_LEN, "%s %s", what, obj);
	b->nmsgs++;
}

static void
batch_begin(struct nftrules_batch *b)
{
	char *p = batch_reserve(b);

	if (p != NULL)
		batch_commit(b, nftnl_batch_begin(p, b->seq++), NULL, NULL);
}

static int
batch_end(struct nftrules_batch *b)
{
	char *p = batch_reserve(b);

	if (p != NULL)
		batch_commit(b, nftnl_batch_end(p, b->seq++), NULL, NULL);
	return b->failed ? -1 : 0;
}

/* Table message: NEWTABLE or DELTABLE. */
static void
msg_table(struct nftrules_batch *b, const struct nftrules_config *cfg, uint16_t cmd)
{
	struct nftnl_table *t = nftnl_table_alloc();
	struct nlmsghdr *nlh;
	char *p = batch_reserve(b);

	if (t == NULL || p == NULL) {
		batch_fail(b, "out of memory");
		nftnl_table_free(t);
		return;
	}
	nftnl_table_set_str(t, NFTNL_TABLE_NAME, cfg->table);
	nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
	nlh = nftnl_table_nlmsg_build_hdr(p, cmd, NFPROTO_INET,
	    (cmd == NFT_MSG_NEWTABLE ? NLM_F_CREATE : 0) | NLM_F_ACK, b->seq++);
	nftnl_table_nlmsg_build_payload(nlh, t);
	nftnl_table_free(t);
	batch_commit(b, nlh, cmd == NFT_MSG_NEWTABLE ? "add table" : "delete table", cfg->table);
}

static uint32_t
set_id(struct nftrules_batch *b, enum nftrules_set_kind kind, int family)
{
	return b->set_id + (uint32_t)kind * 2 + (family == AF_INET ? 0 : 1);
}

/* NEWSET for one kind and family. */
static void
msg_set(struct nftrules_batch *b, const struct nftrules_config *cfg, enum nftrules_set_kind kind,
    int family)
{
	struct nftnl_set *s = nftnl_set_alloc();
	struct nlmsghdr *nlh;
	char *p = batch_reserve(b);
	uint32_t atype = family == AF_INET ? NFTRULES_TYPE_IPV4 : NFTRULES_TYPE_IPV6;
	uint32_t alen = (uint32_t)fam_alen(family), flags;

	if (s == NULL || p == NULL) {
		batch_fail(b, "out of memory");
		if (s != NULL)
			nftnl_set_free(s);
		return;
	}
	nftnl_set_set_str(s, NFTNL_SET_TABLE, cfg->table);
	nftnl_set_set_str(s, NFTNL_SET_NAME, nftrules_set_name(kind, family));
	nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
	nftnl_set_set_u32(s, NFTNL_SET_ID, set_id(b, kind, family));
	flags = kind_is_interval(kind) ? NFT_SET_INTERVAL : NFT_SET_TIMEOUT;
	if (kind_has_port(kind)) {
		uint8_t fields[2] = {(uint8_t)alen, 2};

		flags |= NFT_SET_CONCAT;
		nftnl_set_set_u32(
		    s, NFTNL_SET_KEY_TYPE, atype << NFTRULES_TYPE_BITS | NFTRULES_TYPE_SERVICE);
		nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, alen + 4);
		nftnl_set_set_data(s, NFTNL_SET_DESC_CONCAT, fields, sizeof(fields));
	} else {
		nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, atype);
		nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, alen);
	}
	nftnl_set_set_u32(s, NFTNL_SET_FLAGS, flags);
	nlh = nftnl_set_nlmsg_build_hdr(
	    p, NFT_MSG_NEWSET, NFPROTO_INET, NLM_F_CREATE | NLM_F_ACK, b->seq++);
	nftnl_set_nlmsg_build_payload(nlh, s);
	nftnl_set_free(s);
	batch_commit(b, nlh, "add set", nftrules_set_name(kind, family));
}

/* DELSET: the set goes at commit, with its elements. */
static void
msg_del_set(struct nftrules_batch *b, const struct nftrules_config *cfg,
    enum nftrules_set_kind kind, int family)
{
	struct nlmsghdr *nlh;
	char *p = batch_reserve(b);

	if (p == NULL)
		return;
	nlh = nftnl_nlmsg_build_hdr(p, NFT_MSG_DELSET, NFPROTO_INET, NLM_F_ACK, b->seq++);
	mnl_attr_put_strz(nlh, NFTA_SET_TABLE, cfg->table);
	mnl_attr_put_strz(nlh, NFTA_SET_NAME, nftrules_set_name(kind, family));
	batch_commit(b, nlh, "delete set", nftrules_set_name(kind, family));
}

/* Key bytes: the address, then (port sets) the port padded to 4 bytes. */
static void
make_key(uint8_t *key, const uint8_t *addr, size_t alen, bool with_port, uint16_t port)
{
	memset(key, 0, 20);
	memcpy(key, addr, alen);
	if (with_port) {
		key[alen] = (uint8_t)(port >> 8);
		key[alen + 1] = (uint8_t)port;
	}
}

/* addr + 1 in place; false on overflow (the range reaches the top). */
static bool
addr_inc(uint8_t *a, size_t alen)
{
	for (size_t i = alen; i-- > 0;)
		if (++a[i] != 0)
			return true;
	return false;
}

/* Add elements for ranges[0..n) of a static set, in chunked messages. */
static void
msg_elems(struct nftrules_batch *b, const struct nftrules_config *cfg, enum nftrules_set_kind kind,
    int family, const struct nftrules_range *r, size_t n)
{
	size_t alen = fam_alen(family), klen = kind_has_port(kind) ? alen + 4 : alen;
	size_t i = 0;

	while (i < n && !b->failed) {
		struct nftnl_set *s = nftnl_set_alloc();
		struct nlmsghdr *nlh;
		char *p = batch_reserve(b);

		if (s == NULL || p == NULL) {
			batch_fail(b, "out of memory");
			if (s != NULL)
				nftnl_set_free(s);
			return;
		}
		nftnl_set_set_str(s, NFTNL_SET_TABLE, cfg->table);
		nftnl_set_set_str(s, NFTNL_SET_NAME, nftrules_set_name(kind, family));
		nftnl_set_set_u32(s, NFTNL_SET_ID, set_id(b, kind, family));
		for (size_t k = 0; k < NFTRULES_ELEMS_PER_MSG && i < n; k++, i++) {
			struct nftnl_set_elem *e = nftnl_set_elem_alloc();
			uint8_t key[20], end[20];

			if (e == NULL) {
				batch_fail(b, "out of memory");
				break;
			}
			make_key(key, r[i].lo, alen, kind_has_port(kind), r[i].plo);
			nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, (uint32_t)klen);
			if (kind_has_port(kind)) {
				/* pipapo: one element carries both ends. */
				make_key(end, r[i].hi, alen, true, r[i].phi);
				nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY_END, end, (uint32_t)klen);
				nftnl_set_elem_add(s, e);
				continue;
			}
			nftnl_set_elem_add(s, e);
			/* rbtree: an end element at hi + 1, none if hi is the top. */
			memcpy(end, r[i].hi, alen);
			if (addr_inc(end, alen)) {
				e = nftnl_set_elem_alloc();
				if (e == NULL) {
					batch_fail(b, "out of memory");
					break;
				}
				nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, end, (uint32_t)alen);
				nftnl_set_elem_set_u32(
				    e, NFTNL_SET_ELEM_FLAGS, NFT_SET_ELEM_INTERVAL_END);
				nftnl_set_elem_add(s, e);
			}
		}
		nlh = nftnl_set_elem_nlmsg_build_hdr(
		    p, NFT_MSG_NEWSETELEM, NFPROTO_INET, NLM_F_CREATE | NLM_F_ACK, b->seq++);
		nftnl_set_elems_nlmsg_build_payload(nlh, s);
		nftnl_set_free(s);
		batch_commit(b, nlh, "add elements", nftrules_set_name(kind, family));
	}
}

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

static void
ex_lookup(struct nftnl_rule *r, const char *set, uint32_t id, bool *oom)
{
	struct nftnl_expr *e = ex(r, "lookup", oom);

	if (e == NULL)
		return;
	nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG32_00);
	nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
	nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, id);
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
	char *p = batch_reserve(b);

	if (r == NULL || oom || p == NULL) {
		batch_fail(b, "out of memory");
		if (r != NULL)
			nftnl_rule_free(r);
		return;
	}
	nlh = nftnl_rule_nlmsg_build_hdr(
	    p, NFT_MSG_NEWRULE, NFPROTO_INET, NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK, b->seq++);
	nftnl_rule_nlmsg_build_payload(nlh, r);
	nftnl_rule_free(r);
	batch_commit(b, nlh, "add rule to", chain);
}

/* mark == cfg->mark -> verdict. */
static void
rule_mark(
    struct nftrules_batch *b, const struct nftrules_config *cfg, const char *chain, int verdict)
{
	struct nftnl_rule *r = rule_new(cfg, chain);
	bool oom = r == NULL;

	if (r != NULL) {
		ex_meta(r, NFT_META_MARK, NFT_REG32_00, &oom);
		ex_cmp(r, NFT_CMP_EQ, &cfg->mark, sizeof(cfg->mark), &oom);
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
		if (reject)
			ex_reject(r, proto == IPPROTO_TCP, &oom);
		else
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
	uint32_t alen = (uint32_t)fam_alen(family);

	if (r != NULL) {
		ex_meta_eq8(
		    r, NFT_META_NFPROTO, family == AF_INET ? NFPROTO_IPV4 : NFPROTO_IPV6, &oom);
		if (proto != 0)
			ex_meta_eq8(r, NFT_META_L4PROTO, proto, &oom);
		ex_payload(r, NFT_PAYLOAD_NETWORK_HEADER, family == AF_INET ? 16 : 24, alen,
		    NFT_REG32_00, &oom);
		if (kind_has_port(kind))
			ex_payload(
			    r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG32_00 + alen / 4, &oom);
		ex_lookup(r, nftrules_set_name(kind, family), set_id(b, kind, family), &oom);
		if (reject)
			ex_reject(r, proto == IPPROTO_TCP, &oom);
		else
			ex_verdict(r, NF_ACCEPT, &oom);
	}
	msg_rule(b, r, oom, NFTRULES_CHAIN_FILTER);
}

/*
 * The filter chain, in order: mark accept, established/related accept,
 * loopback accept, IPv6 ND accept, DNS accept (the NAT chain redirects it),
 * deny sets reject, port-scoped allow/learned accept, DoT reject, allow and
 * learned accept, then reject (deny) or accept (allow). Deny comes before
 * every allow so that defaultAction allow still enforces deny rules.
 */
static void
chain_filter_rules(
    struct nftrules_batch *b, const struct nftrules_config *cfg, enum nftrules_action def)
{
	static const uint8_t nd[] = {NFTRULES_ICMPV6_RS, NFTRULES_ICMPV6_NS, NFTRULES_ICMPV6_NA};
	static const int fams[] = {AF_INET, AF_INET6};
	static const uint8_t l4[] = {IPPROTO_TCP, IPPROTO_UDP};
	const char *fc = NFTRULES_CHAIN_FILTER;
	struct nftnl_rule *r;
	bool oom;

	/* The sidecar's own sockets: by SO_MARK, which needs CAP_NET_ADMIN. */
	rule_mark(b, cfg, fc, NF_ACCEPT);

	r = rule_new(cfg, fc);
	oom = r == NULL;
	if (r != NULL) {
		uint32_t st = NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED);
		uint32_t zero = 0;
		struct nftnl_expr *e = ex(r, "ct", &oom);

		if (e != NULL) {
			nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATE);
			nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG32_00);
		}
		e = ex(r, "bitwise", &oom);
		if (e != NULL) {
			nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG32_00);
			nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG32_00);
			nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, 4);
			nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, &st, 4);
			nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, &zero, 4);
		}
		ex_cmp(r, NFT_CMP_NEQ, &zero, 4, &oom);
		ex_verdict(r, NF_ACCEPT, &oom);
	}
	msg_rule(b, r, oom, fc);

	r = rule_new(cfg, fc);
	oom = r == NULL;
	if (r != NULL) {
		uint32_t lo = NFTRULES_LOOPBACK_IFINDEX;

		ex_meta(r, NFT_META_OIF, NFT_REG32_00, &oom);
		ex_cmp(r, NFT_CMP_EQ, &lo, 4, &oom);
		ex_verdict(r, NF_ACCEPT, &oom);
	}
	msg_rule(b, r, oom, fc);

	/* IPv6 needs neighbour discovery to reach even allowed hosts. */
	for (size_t i = 0; i < sizeof(nd); i++) {
		r = rule_new(cfg, fc);
		oom = r == NULL;
		if (r != NULL) {
			ex_meta_eq8(r, NFT_META_NFPROTO, NFPROTO_IPV6, &oom);
			ex_meta_eq8(r, NFT_META_L4PROTO, IPPROTO_ICMPV6, &oom);
			ex_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 1, NFT_REG32_00, &oom);
			ex_cmp(r, NFT_CMP_EQ, &nd[i], 1, &oom);
			ex_verdict(r, NF_ACCEPT, &oom);
		}
		msg_rule(b, r, oom, fc);
	}

	/* DNS is accepted here because the NAT chain redirects it next. */
	for (size_t p = 0; p < sizeof(l4); p++)
		rule_port(b, cfg, fc, l4[p], NFTRULES_PORT_DNS, NF_ACCEPT, false);

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
		ex_reject(r, true, &oom);
		msg_rule(b, r, oom, fc);
		r = rule_new(cfg, fc);
		oom = r == NULL;
		if (r != NULL)
			ex_reject(r, false, &oom);
	} else if (r != NULL) {
		ex_verdict(r, NF_ACCEPT, &oom);
	}
	msg_rule(b, r, oom, fc);
}

/*
 * The NAT chain (after the filter chain saw the original destination):
 * marked traffic returns, DNS goes to the proxy, intercepted ports to the
 * vault listeners.
 */
static void
chain_nat_rules(struct nftrules_batch *b, const struct nftrules_config *cfg)
{
	static const uint8_t l4[] = {IPPROTO_UDP, IPPROTO_TCP};
	const char *nc = NFTRULES_CHAIN_NAT;
	struct nftnl_rule *r;
	bool oom;

	rule_mark(b, cfg, nc, NFT_RETURN);
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
}

static void
msg_chain(struct nftrules_batch *b, const struct nftrules_config *cfg, const char *name,
    const char *type, int prio)
{
	struct nftnl_chain *c = nftnl_chain_alloc();
	struct nlmsghdr *nlh;
	char *p = batch_reserve(b);

	if (c == NULL || p == NULL) {
		batch_fail(b, "out of memory");
		if (c != NULL)
			nftnl_chain_free(c);
		return;
	}
	nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, cfg->table);
	nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
	nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, type);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, NF_INET_LOCAL_OUT);
	nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
	nlh = nftnl_chain_nlmsg_build_hdr(
	    p, NFT_MSG_NEWCHAIN, NFPROTO_INET, NLM_F_CREATE | NLM_F_ACK, b->seq++);
	nftnl_chain_nlmsg_build_payload(nlh, c);
	nftnl_chain_free(c);
	batch_commit(b, nlh, "add chain", name);
}

/* DELRULE without a handle: the kernel flushes the chain. */
static void
msg_flush_chain(struct nftrules_batch *b, const struct nftrules_config *cfg, const char *name)
{
	struct nftnl_rule *r = rule_new(cfg, name);
	struct nlmsghdr *nlh;
	char *p = batch_reserve(b);

	if (r == NULL || p == NULL) {
		batch_fail(b, "out of memory");
		if (r != NULL)
			nftnl_rule_free(r);
		return;
	}
	nlh = nftnl_rule_nlmsg_build_hdr(p, NFT_MSG_DELRULE, NFPROTO_INET, NLM_F_ACK, b->seq++);
	nftnl_rule_nlmsg_build_payload(nlh, r);
	nftnl_rule_free(r);
	batch_commit(b, nlh, "flush chain", name);
}

static int
range_cmp(const void *a, const void *b)
{
	const struct nftrules_range *x = a, *y = b;
	int c = memcmp(x->lo, y->lo, 16);

	if (c != 0)
		return c;
	if ((c = memcmp(x->hi, y->hi, 16)) != 0)
		return c;
	if (x->plo != y->plo)
		return x->plo < y->plo ? -1 : 1;
	return x->phi < y->phi ? -1 : x->phi > y->phi;
}

/* Sort; merge overlapping or adjacent address ranges. */
static size_t
ranges_normalise(struct nftrules_range *r, size_t n, size_t alen)
{
	size_t out = 0;

	if (n == 0)
		return 0;
	qsort(r, n, sizeof(*r), range_cmp);
	for (size_t i = 1; i < n; i++) {
		struct nftrules_range *last = &r[out];
		uint8_t next[16];
		bool adj;

		memcpy(next, last->hi, alen);
		adj = !addr_inc(next, alen) || memcmp(r[i].lo, next, alen) <= 0;
		if (!adj) {
			r[++out] = r[i];
			continue;
		}
		if (memcmp(r[i].hi, last->hi, alen) > 0)
			memcpy(last->hi, r[i].hi, alen);
	}
	return out + 1;
}

static int
u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Port-scoped ranges made disjoint: the kernel refuses overlapping
 * elements in a concatenated interval set. Ports are cut at every rule
 * boundary; within each piece the covering address ranges are merged;
 * neighbouring pieces with the same addresses are joined again.
 * Returns an owned array (NULL with *nout 0 when empty or out of memory).
 */
static struct nftrules_range *
ranges_disjoint_ports(
    const struct nftrules_range *r, size_t n, size_t alen, size_t *nout, bool *oom)
{
	uint32_t *bd = calloc(2 * n + 1, sizeof(*bd));
	struct nftrules_range *tmp = calloc(n + 1, sizeof(*tmp)), *out = NULL;
	size_t nb = 0, no = 0, cap = 0, prev_start = 0, prev_n = 0;
	uint32_t prev_end = 0;
	bool have_prev = false;

	*nout = 0;
	if (bd == NULL || tmp == NULL)
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		bd[nb++] = r[i].plo;
		bd[nb++] = (uint32_t)r[i].phi + 1;
	}
	qsort(bd, nb, sizeof(*bd), u32_cmp);
	for (size_t k = 0; k + 1 < nb; k++) {
		uint32_t a = bd[k], e = bd[k + 1] - 1;
		size_t m = 0;
		bool same;

		if (bd[k + 1] == a)
			continue;
		for (size_t i = 0; i < n; i++)
			if (r[i].plo <= a && r[i].phi >= e) {
				tmp[m] = r[i];
				tmp[m].plo = tmp[m].phi = 0;
				m++;
			}
		m = ranges_normalise(tmp, m, alen);
		if (m == 0) {
			have_prev = false;
			continue;
		}
		same = have_prev && prev_end + 1 == a && prev_n == m;
		for (size_t j = 0; same && j < m; j++)
			same = memcmp(out[prev_start + j].lo, tmp[j].lo, 16) == 0 &&
			       memcmp(out[prev_start + j].hi, tmp[j].hi, 16) == 0;
		if (same) {
			for (size_t j = 0; j < m; j++)
				out[prev_start + j].phi = (uint16_t)e;
			prev_end = e;
			continue;
		}
		if (cap - no < m) {
			size_t ncap = (cap + m) * 2;
			struct nftrules_range *nr = realloc(out, ncap * sizeof(*nr));

			if (nr == NULL)
				goto nomem;
			out = nr;
			cap = ncap;
		}
		for (size_t j = 0; j < m; j++) {
			out[no + j] = tmp[j];
			out[no + j].plo = (uint16_t)a;
			out[no + j].phi = (uint16_t)e;
		}
		prev_start = no;
		prev_n = m;
		prev_end = e;
		have_prev = true;
		no += m;
	}
	free(bd);
	free(tmp);
	*nout = no;
	return out;
nomem:
	free(bd);
	free(tmp);
	free(out);
	*oom = true;
	return NULL;
}

/*
 * Destinations no rule can open: link-local (where cloud metadata lives),
 * the Alibaba and AWS IPv6 metadata addresses, "this network", multicast,
 * reserved and broadcast. They are always in the deny sets, whatever the
 * policy says (0.0.0.0/0 included). The sidecar's own marked traffic is
 * accepted before, so a link-local resolver still works for egressd.
 */
static const struct {
	int family;
	uint8_t addr[16];
	uint8_t prefix;
} nftrules_inner[] = {
    {AF_INET, {169, 254}, 16},
    {AF_INET, {100, 100, 100, 200}, 32},
    {AF_INET, {0}, 8},
    {AF_INET, {224}, 3},
    {AF_INET6, {0xfe, 0x80}, 10},
    {AF_INET6, {0xff}, 8},
    {AF_INET6, {0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54}, 128},
};

#define NFTRULES_NINNER (sizeof(nftrules_inner) / sizeof(nftrules_inner[0]))

static void
range_from_prefix(struct nftrules_range *r, const uint8_t *addr, uint8_t prefix, size_t alen)
{
	memset(r, 0, sizeof(*r));
	for (size_t by = 0; by < alen; by++) {
		int bits = (int)prefix - (int)by * 8;
		uint8_t mask = bits >= 8 ? 0xff : bits <= 0 ? 0 : (uint8_t)(0xff << (8 - bits));

		r->lo[by] = addr[by] & mask;
		r->hi[by] = (uint8_t)(r->lo[by] | (uint8_t)~mask);
	}
}

/* Validate the rules and emit the elements of the static sets. */
static void
static_elems(
    struct nftrules_batch *b, const struct nftrules_config *cfg, const struct nftrules_static *st)
{
	static const int fams[] = {AF_INET, AF_INET6};
	static const enum nftrules_set_kind kinds[] = {
	    NFTRULES_SET_ALLOW, NFTRULES_SET_DENY, NFTRULES_SET_ALLOWP, NFTRULES_SET_DENYP};
	struct nftrules_range *r;

	if (st->nrules > NFTRULES_MAX_RULES) {
		batch_fail(b, "too many static rules");
		return;
	}
	for (size_t i = 0; i < st->nrules; i++) {
		const struct nftrules_rule *x = &st->rules[i];

		if ((x->family != AF_INET && x->family != AF_INET6) ||
		    x->prefix_len > fam_alen(x->family) * 8 || x->port_lo > x->port_hi ||
		    (x->action != NFTRULES_ALLOW && x->action != NFTRULES_DENY)) {
			batch_fail(b, "invalid static rule");
			return;
		}
	}
	r = calloc(st->nrules + NFTRULES_NINNER, sizeof(*r));
	if (r == NULL) {
		batch_fail(b, "out of memory");
		return;
	}
	for (size_t f = 0; f < 2; f++) {
		size_t alen = fam_alen(fams[f]);

		for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
			bool ports = kind_has_port(kinds[k]);
			enum nftrules_action act =
			    (kinds[k] == NFTRULES_SET_DENY || kinds[k] == NFTRULES_SET_DENYP)
			        ? NFTRULES_DENY
			        : NFTRULES_ALLOW;
			size_t n = 0;

			for (size_t i = 0; i < st->nrules; i++) {
				const struct nftrules_rule *x = &st->rules[i];
				bool has_port = x->port_hi != 0;

				if (x->family != fams[f] || x->action != act || has_port != ports)
					continue;
				range_from_prefix(&r[n], x->addr, x->prefix_len, alen);
				r[n].plo = x->port_lo;
				r[n].phi = x->port_hi;
				n++;
			}
			if (kinds[k] == NFTRULES_SET_DENY)
				for (size_t i = 0; i < NFTRULES_NINNER; i++)
					if (nftrules_inner[i].family == fams[f])
						range_from_prefix(&r[n++], nftrules_inner[i].addr,
						    nftrules_inner[i].prefix, alen);
			if (ports) {
				bool oom = false;
				struct nftrules_range *d =
				    ranges_disjoint_ports(r, n, alen, &n, &oom);

				if (oom)
					batch_fail(b, "out of memory");
				msg_elems(b, cfg, kinds[k], fams[f], d, n);
				free(d);
				continue;
			}
			n = ranges_normalise(r, n, alen);
			msg_elems(b, cfg, kinds[k], fams[f], r, n);
		}
	}
	free(r);
}

static bool
config_ok(struct nftrules_batch *b, const struct nftrules_config *cfg)
{
	size_t n = strnlen(cfg->table, sizeof(cfg->table));

	if (n == 0 || n == sizeof(cfg->table) || cfg->dns_port == 0 ||
	    cfg->nintercept > NFTRULES_MAX_INTERCEPT) {
		batch_fail(b, "invalid nftrules configuration");
		return false;
	}
	return true;
}

/* Whole table: add+delete+add table, sets, chains, rules, static elements. */
int
nftrules_build_install(
    struct nftrules_batch *b, const struct nftrules_config *cfg, const struct nftrules_static *st)
{
	static const int fams[] = {AF_INET, AF_INET6};

	if (!config_ok(b, cfg))
		return -1;
	batch_begin(b);
	/* add + delete + add: replaces the table whether or not it exists. */
	msg_table(b, cfg, NFT_MSG_NEWTABLE);
	msg_table(b, cfg, NFT_MSG_DELTABLE);
	msg_table(b, cfg, NFT_MSG_NEWTABLE);
	for (int k = 0; k < NFTRULES_SET_KINDS; k++)
		for (size_t f = 0; f < 2; f++)
			msg_set(b, cfg, (enum nftrules_set_kind)k, fams[f]);
	static_elems(b, cfg, st);
	msg_chain(b, cfg, NFTRULES_CHAIN_FILTER, "filter", NFTRULES_FILTER_PRIO);
	chain_filter_rules(b, cfg, st->default_action);
	msg_chain(b, cfg, NFTRULES_CHAIN_NAT, "nat", NFTRULES_NAT_PRIO);
	chain_nat_rules(b, cfg);
	return batch_end(b);
}

/* Re-create allow/deny sets and refill the filter chain; learned sets kept. */
int
nftrules_build_update_static(
    struct nftrules_batch *b, const struct nftrules_config *cfg, const struct nftrules_static *st)
{
	static const int fams[] = {AF_INET, AF_INET6};

	if (!config_ok(b, cfg))
		return -1;
	batch_begin(b);
	/*
	 * The rules that reference the static sets go first; then the sets are
	 * deleted and re-created (5x faster than a flush + refill of 10k
	 * elements in one transaction). Learned sets are not touched.
	 */
	msg_flush_chain(b, cfg, NFTRULES_CHAIN_FILTER);
	for (int k = NFTRULES_SET_ALLOW; k <= NFTRULES_SET_DENYP; k++)
		for (size_t f = 0; f < 2; f++)
			msg_del_set(b, cfg, (enum nftrules_set_kind)k, fams[f]);
	for (int k = NFTRULES_SET_ALLOW; k <= NFTRULES_SET_DENYP; k++)
		for (size_t f = 0; f < 2; f++)
			msg_set(b, cfg, (enum nftrules_set_kind)k, fams[f]);
	static_elems(b, cfg, st);
	chain_filter_rules(b, cfg, st->default_action);
	return batch_end(b);
}

/* One learned element: add (with timeout) or delete. */
/* One learned element message (add with timeout, or delete) into an open batch. */
static int
msg_learn(struct nftrules_batch *b, const struct nftrules_config *cfg, int family,
    const uint8_t *addr, uint16_t port, uint64_t timeout_ms, bool del)
{
	enum nftrules_set_kind kind = port ? NFTRULES_SET_LEARNEDP : NFTRULES_SET_LEARNED;
	struct nftnl_set *s;
	struct nftnl_set_elem *e;
	struct nlmsghdr *nlh;
	uint8_t key[20];
	size_t alen;
	char *p;

	if (family != AF_INET && family != AF_INET6) {
		batch_fail(b, "invalid address family");
		return -1;
	}
	if (!del && timeout_ms == 0) {
		batch_fail(b, "learned elements need a timeout");
		return -1;
	}
	alen = fam_alen(family);
	p = batch_reserve(b);
	s = nftnl_set_alloc();
	e = nftnl_set_elem_alloc();
	if (p == NULL || s == NULL || e == NULL) {
		batch_fail(b, "out of memory");
		if (s != NULL)
			nftnl_set_free(s);
		if (e != NULL)
			nftnl_set_elem_free(e);
		return -1;
	}
	nftnl_set_set_str(s, NFTNL_SET_TABLE, cfg->table);
	nftnl_set_set_str(s, NFTNL_SET_NAME, nftrules_set_name(kind, family));
	make_key(key, addr, alen, port != 0, port);
	nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, (uint32_t)(port ? alen + 4 : alen));
	if (!del)
		nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, timeout_ms);
	nftnl_set_elem_add(s, e);
	nlh = nftnl_set_elem_nlmsg_build_hdr(p, del ? NFT_MSG_DELSETELEM : NFT_MSG_NEWSETELEM,
	    NFPROTO_INET, (del ? 0 : NLM_F_CREATE) | NLM_F_ACK, b->seq++);
	nftnl_set_elems_nlmsg_build_payload(nlh, s);
	nftnl_set_free(s);
	batch_commit(b, nlh, del ? "delete element from" : "add element to",
	    nftrules_set_name(kind, family));
	return 0;
}

/* One learned element: add (with timeout) or delete. */
int
nftrules_build_learn(struct nftrules_batch *b, const struct nftrules_config *cfg, int family,
    const uint8_t *addr, uint16_t port, uint64_t timeout_ms, bool del)
{
	if (!config_ok(b, cfg))
		return -1;
	batch_begin(b);
	if (msg_learn(b, cfg, family, addr, port, timeout_ms, del) != 0)
		return -1;
	return batch_end(b);
}

/* Delete the table. */
int
nftrules_build_remove_table(struct nftrules_batch *b, const struct nftrules_config *cfg)
{
	if (!config_ok(b, cfg))
		return -1;
	batch_begin(b);
	msg_table(b, cfg, NFT_MSG_DELTABLE);
	return batch_end(b);
}

/* ---- socket side ---- */

/* Defaults: table egressd, mark 0x1, DNS 15353, 443->15443 and 80->15080 off. */
void
nftrules_config_default(struct nftrules_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->table, sizeof(cfg->table), "%s", NFTRULES_TABLE_DEFAULT);
	cfg->mark = NFTRULES_MARK_DEFAULT;
	cfg->dns_port = NFTRULES_DNS_PORT_DEFAULT;
	cfg->intercept = false;
	cfg->nintercept = 2;
	cfg->intercept_ports[0] = (struct nftrules_redirect){443, 15443};
	cfg->intercept_ports[1] = (struct nftrules_redirect){80, 15080};
}

/* Open a NETLINK_NETFILTER socket; NULL and err filled on failure. Owned. */
struct nftrules *
nftrules_open(const struct nftrules_config *cfg, char *err, size_t errlen)
{
	struct nftrules *n = calloc(1, sizeof(*n));
	int one = 1;

	if (n == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	n->cfg = *cfg;
	n->nl = mnl_socket_open(NETLINK_NETFILTER);
	if (n->nl == NULL || mnl_socket_bind(n->nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		snprintf(err, errlen, "netlink socket: %s", strerror(errno));
		nftrules_close(n);
		return NULL;
	}
	/* Error ACKs without a copy of the request: small, many fit. */
	(void)mnl_socket_setsockopt(n->nl, NETLINK_CAP_ACK, &one, sizeof(one));
	n->portid = mnl_socket_get_portid(n->nl);
	n->seq = (uint32_t)time(NULL);
	return n;
}

static void
sockbuf(struct nftrules *n, int force, int plain, size_t want)
{
	int fd = mnl_socket_get_fd(n->nl), v = want > (1u << 30) ? (1 << 30) : (int)want;

	if (setsockopt(fd, SOL_SOCKET, force, &v, sizeof(v)) < 0)
		(void)setsockopt(fd, SOL_SOCKET, plain, &v, sizeof(v));
}

/*
 * Send the batch once and read every ACK. The kernel processes a batch
 * inside sendmsg, so all replies are queued when it returns: they are read
 * without blocking, each matched to its request by sequence number.
 */
static int
run_batch(struct nftrules *n, struct nftrules_batch *b, int ignore_errno)
{
	uint8_t rbuf[NFTRULES_RECV_BUF];
	bool *acked;
	size_t nacked = 0;
	int first_err = 0;
	const char *first_what = "batch";
	uint32_t first_seq = 0;
	ssize_t r;

	if (b->failed) {
		snprintf(n->err, sizeof(n->err), "%s", b->err);
		errno = EINVAL;
		return -1;
	}
	acked = calloc(b->nmsgs ? b->nmsgs : 1, sizeof(*acked));
	if (acked == NULL) {
		snprintf(n->err, sizeof(n->err), "out of memory");
		return -1;
	}
	sockbuf(n, SO_SNDBUFFORCE, SO_SNDBUF, b->len + 65536);
	/* One skb per ACK: budget its truesize, not its length. */
	sockbuf(n, SO_RCVBUFFORCE, SO_RCVBUF, b->nmsgs * 2048 + 262144);
	r = mnl_socket_sendto(n->nl, b->buf, b->len);
	if (r < 0 || (size_t)r != b->len) {
		snprintf(n->err, sizeof(n->err), "netlink send: %s",
		    r < 0 ? strerror(errno) : "short write");
		free(acked);
		return -1;
	}
	for (;;) {
		const struct nlmsghdr *nlh;
		int len;

		r = recv(mnl_socket_get_fd(n->nl), rbuf, sizeof(rbuf), MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (r < 0) {
			/* ENOBUFS: ACKs were lost, the outcome is unknown. */
			first_err = errno;
			first_what = "netlink receive";
			break;
		}
		len = (int)r;
		for (nlh = (const struct nlmsghdr *)rbuf; mnl_nlmsg_ok(nlh, len);
		     nlh = mnl_nlmsg_next(nlh, &len)) {
			const struct nlmsgerr *e;
			size_t i;

			if (nlh->nlmsg_type != NLMSG_ERROR ||
			    nlh->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
				continue;
			e = mnl_nlmsg_get_payload(nlh);
			for (i = 0; i < b->nmsgs && b->msgs[i].seq != nlh->nlmsg_seq; i++)
				;
			if (i < b->nmsgs && !acked[i]) {
				acked[i] = true;
				nacked++;
			}
			if (e->error != 0 && -e->error != ignore_errno && first_err == 0) {
				first_err = -e->error;
				first_seq = nlh->nlmsg_seq;
				first_what = i < b->nmsgs ? b->msgs[i].what : "batch";
			}
		}
	}
	free(acked);
	if (first_err != 0) {
		snprintf(n->err, sizeof(n->err), "%s (seq %u): %s", first_what, first_seq,
		    strerror(first_err));
		errno = first_err;
		return -1;
	}
	if (nacked != b->nmsgs) {
		snprintf(n->err, sizeof(n->err), "netlink: %zu of %zu ACKs missing",
		    b->nmsgs - nacked, b->nmsgs);
		errno = EPROTO;
		return -1;
	}
	n->err[0] = '\0';
	return 0;
}

static int
finish(struct nftrules *n, struct nftrules_batch *b, int built, int ignore_errno)
{
	int rc = -1;

	if (built == 0)
		rc = run_batch(n, b, ignore_errno);
	else
		snprintf(n->err, sizeof(n->err), "%s", b->err);
	n->seq = b->seq;
	nftrules_batch_deinit(b);
	return rc;
}

/* Replace the whole table (delete if present, create, fill) atomically. */
int
nftrules_install(struct nftrules *n, const struct nftrules_static *st)
{
	struct nftrules_batch b;

	nftrules_batch_init(&b, n->seq);
	return finish(n, &b, nftrules_build_install(&b, &n->cfg, st), 0);
}

/* Refill allow/deny sets and rebuild the filter chain; learned sets kept. */
int
nftrules_update_static(struct nftrules *n, const struct nftrules_static *st)
{
	struct nftrules_batch b;

	nftrules_batch_init(&b, n->seq);
	return finish(n, &b, nftrules_build_update_static(&b, &n->cfg, st), 0);
}

/* Add (or refresh) a learned address; port 0 = all ports. timeout in ms. */
int
nftrules_learn(
    struct nftrules *n, int family, const uint8_t *addr, uint16_t port, uint64_t timeout_ms)
{
	struct nftrules_batch b;

	nftrules_batch_init(&b, n->seq);
	return finish(
	    n, &b, nftrules_build_learn(&b, &n->cfg, family, addr, port, timeout_ms, false), 0);
}

/*
 * Add (or refresh) several learned elements in one transaction: one
 * netlink round trip per DNS answer, however many addresses it has.
 */
int
nftrules_learn_many(struct nftrules *n, const struct nftrules_elem *el, size_t count)
{
	struct nftrules_batch b;
	int built = 0;

	nftrules_batch_init(&b, n->seq);
	if (!config_ok(&b, &n->cfg))
		built = -1;
	else {
		batch_begin(&b);
		for (size_t i = 0; i < count && built == 0; i++)
			built = msg_learn(&b, &n->cfg, el[i].family, el[i].addr, el[i].port,
			    el[i].timeout_ms, false);
		if (built == 0)
			built = batch_end(&b);
	}
	return finish(n, &b, built, 0);
}

/* Remove a learned address; absent is not an error. */
int
nftrules_forget(struct nftrules *n, int family, const uint8_t *addr, uint16_t port)
{
	struct nftrules_batch b;

	nftrules_batch_init(&b, n->seq);
	return finish(
	    n, &b, nftrules_build_learn(&b, &n->cfg, family, addr, port, 0, true), ENOENT);
}

/* Delete the table; absent is not an error. */
int
nftrules_remove_table(struct nftrules *n)
{
	struct nftrules_batch b;

	nftrules_batch_init(&b, n->seq);
	return finish(n, &b, nftrules_build_remove_table(&b, &n->cfg), ENOENT);
}

/* The last error message (valid until the next call on n). */
const char *
nftrules_error(const struct nftrules *n)
{
	return n->err;
}

/* Close the socket and free n (accepts NULL). The table stays in place. */
void
nftrules_close(struct nftrules *n)
{
	if (n == NULL)
		return;
	if (n->nl != NULL)
		mnl_socket_close(n->nl);
	free(n);
}

static int
nftrules_gen_cb(const struct nlmsghdr *nlh, void *data)
{
	struct nlattr *a;

	mnl_attr_for_each(a, nlh, sizeof(struct nfgenmsg))
	{
		if (mnl_attr_get_type(a) == NFTA_GEN_ID && mnl_attr_validate(a, MNL_TYPE_U32) >= 0)
			*(uint32_t *)data = ntohl(mnl_attr_get_u32(a));
	}
	return MNL_CB_OK;
}

/*
 * The ruleset generation: the kernel bumps it on every committed change
 * by anyone. The watchdog compares it with the one after our own last
 * change to notice tampering (a workload that was given CAP_NET_ADMIN).
 */
int
nftrules_genid(struct nftrules *n, uint32_t *genid)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct nfgenmsg *nfg;
	uint32_t seq = ++n->seq;
	ssize_t r;
	int rc;

	nlh->nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	nlh->nlmsg_seq = seq;
	nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
	nfg->nfgen_family = AF_UNSPEC;
	nfg->version = NFNETLINK_V0;
	nfg->res_id = 0;
	*genid = 0;
	if (mnl_socket_sendto(n->nl, nlh, nlh->nlmsg_len) < 0) {
		snprintf(n->err, sizeof(n->err), "getgen: %s", strerror(errno));
		return -1;
	}
	do {
		r = mnl_socket_recvfrom(n->nl, buf, sizeof(buf));
		if (r < 0) {
			snprintf(n->err, sizeof(n->err), "getgen: %s", strerror(errno));
			return -1;
		}
		rc = mnl_cb_run(buf, (size_t)r, seq, n->portid, nftrules_gen_cb, genid);
	} while (rc > 0);
	if (rc < 0) {
		snprintf(n->err, sizeof(n->err), "getgen: %s", strerror(errno));
		return -1;
	}
	return 0;
}
