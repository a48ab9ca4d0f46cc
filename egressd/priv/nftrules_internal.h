/*
 * nftrules internals for tests: the pure batch builders. They write
 * netlink messages into a growable buffer and record each message's
 * sequence number and purpose, so tests can parse them back without root.
 */
#ifndef EGRESSD_NFTRULES_INTERNAL_H
#define EGRESSD_NFTRULES_INTERNAL_H

#include "egressd/priv/nftrules.h"

#define NFTRULES_ELEMS_PER_MSG 256   /* keeps the element nest far below 64 KiB */
#define NFTRULES_MSG_MAX (96 * 1024) /* room reserved for one message */
#define NFTRULES_WHAT_LEN 48

/* One acked message of a batch. */
struct nftrules_msg {
	uint32_t seq;
	char what[NFTRULES_WHAT_LEN]; /* e.g. "add set allow4" */
};

/* A batch under construction (embedded; nftrules_batch_init/deinit). */
struct nftrules_batch {
	uint8_t *buf;
	size_t len;
	size_t cap;
	uint32_t seq; /* next sequence number */
	uint32_t set_id;
	struct nftrules_msg *msgs;
	size_t nmsgs;
	size_t msgs_cap;
	bool failed; /* allocation or validation failure; see err */
	char err[NFTRULES_ERRLEN];
};

/* The set kinds, per family. */
enum nftrules_set_kind {
	NFTRULES_SET_ALLOW,
	NFTRULES_SET_DENY,
	NFTRULES_SET_ALLOWP,
	NFTRULES_SET_DENYP,
	NFTRULES_SET_LEARNED,
	NFTRULES_SET_LEARNEDP,
	NFTRULES_SET_DOH, /* DoH blocklist (interval), only with cfg->block_doh */
	NFTRULES_SET_KINDS,
};

#define NFTRULES_CHAIN_FILTER "filter"
#define NFTRULES_CHAIN_NAT "nat"
#define NFTRULES_FILTER_PRIO (-150)
#define NFTRULES_NAT_PRIO (-100)
#define NFTRULES_CHAIN_INPUT "input"
#define NFTRULES_INPUT_PRIO (-150)
/* Before conntrack (-200): the sidecar's marked flows get their own zone. */
#define NFTRULES_CHAIN_ZONE "zone"
#define NFTRULES_ZONE_PRIO (-300)
#define NFTRULES_CT_ZONE 1

/* Start an empty batch whose first message gets sequence number seq. */
void nftrules_batch_init(struct nftrules_batch *b, uint32_t seq);

/* Free the batch's buffers. */
void nftrules_batch_deinit(struct nftrules_batch *b);

/* Name of a set ("allow4", "learnedp6", ...). */
const char *nftrules_set_name(enum nftrules_set_kind kind, int family);

/* Whole table: add+delete+add table, sets, chains, rules, static elements. */
int nftrules_build_install(struct nftrules_batch *b, const struct nftrules_config *cfg,
    const struct nftrules_static *st) __attribute__((warn_unused_result));

/* Re-create allow/deny sets and refill the filter chain; learned sets kept. */
int nftrules_build_update_static(struct nftrules_batch *b, const struct nftrules_config *cfg,
    const struct nftrules_static *st) __attribute__((warn_unused_result));

/* One learned element: add (with timeout) or delete. */
int nftrules_build_learn(struct nftrules_batch *b, const struct nftrules_config *cfg, int family,
    const uint8_t *addr, uint16_t port, uint64_t timeout_ms, bool del)
    __attribute__((warn_unused_result));

/* Delete the table. */
int nftrules_build_remove_table(struct nftrules_batch *b, const struct nftrules_config *cfg)
    __attribute__((warn_unused_result));

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
/* Router solicitations: at most RATE a second once a burst of BURST is spent. */
#define NFTRULES_RS_RATE 1
#define NFTRULES_RS_BURST 10
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
    [NFTRULES_SET_DOH] = {"doh4", "doh6"},
};

static inline bool
nftrules_kind_has_port(enum nftrules_set_kind k)
{
	return k == NFTRULES_SET_ALLOWP || k == NFTRULES_SET_DENYP || k == NFTRULES_SET_LEARNEDP;
}

static inline bool
nftrules_kind_is_interval(enum nftrules_set_kind k)
{
	return k != NFTRULES_SET_LEARNED && k != NFTRULES_SET_LEARNEDP;
}

static inline size_t
nftrules_fam_alen(int family)
{
	return family == AF_INET ? 4 : 16;
}

/* Defined in one module of policy/, called from another. */
void nftrules_batch_begin(struct nftrules_batch *b);
void nftrules_batch_commit(
    struct nftrules_batch *b, struct nlmsghdr *nlh, const char *what, const char *obj);
int nftrules_batch_end(struct nftrules_batch *b);
void nftrules_batch_fail(struct nftrules_batch *b, const char *why);
char *nftrules_batch_reserve(struct nftrules_batch *b);
bool nftrules_config_ok(struct nftrules_batch *b, const struct nftrules_config *cfg);
void nftrules_msg_del_set(struct nftrules_batch *b, const struct nftrules_config *cfg,
    enum nftrules_set_kind kind, int family);
int nftrules_msg_learn(struct nftrules_batch *b, const struct nftrules_config *cfg, int family,
    const uint8_t *addr, uint16_t port, uint64_t timeout_ms, bool del);
void nftrules_msg_set(struct nftrules_batch *b, const struct nftrules_config *cfg,
    enum nftrules_set_kind kind, int family);
void nftrules_msg_table(struct nftrules_batch *b, const struct nftrules_config *cfg, uint16_t cmd);
uint32_t nftrules_set_id(struct nftrules_batch *b, enum nftrules_set_kind kind, int family);
/* Caps of nftrules_ranges_disjoint_ports: elements out, covering ranges merged. */
#define NFTRULES_DISJOINT_MAX_ELEMS (1u << 20)
#define NFTRULES_DISJOINT_MAX_WORK (1u << 26)

/* Port-scoped ranges made disjoint (sort + sweep); owned result, NULL when empty or *why. */
struct nftrules_range *nftrules_ranges_disjoint_ports(
    const struct nftrules_range *r, size_t n, size_t alen, size_t *nout, const char **why);
/* Elements of the DoH blocklist sets (cfg->doh), when cfg->block_doh. */
void nftrules_doh_elems(struct nftrules_batch *b, const struct nftrules_config *cfg);
void nftrules_static_elems(
    struct nftrules_batch *b, const struct nftrules_config *cfg, const struct nftrules_static *st);

#endif
