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
	NFTRULES_SET_KINDS,
};

#define NFTRULES_CHAIN_FILTER "filter"
#define NFTRULES_CHAIN_NAT "nat"
#define NFTRULES_FILTER_PRIO (-150)
#define NFTRULES_NAT_PRIO (-100)

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

#endif
