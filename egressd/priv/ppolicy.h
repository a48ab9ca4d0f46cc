/*
 * The parent's own copy of the effective policy. Control hands it a
 * policy as a policy_wire document (CHAN_POLICY chunks); the parent
 * decodes it with the strict parser, writes its static sets and default
 * action itself, forgets the learned addresses and ends the flows the new
 * policy no longer allows, and only then keeps it (and pushes it to dns
 * and intercept). Every learn request is checked against this copy, and
 * every new child is given it at start, so a restart never reverts a
 * policy the API applied.
 */
#ifndef EGRESSD_PPOLICY_H
#define EGRESSD_PPOLICY_H

#include <stdbool.h>
#include <stddef.h>

#include "egressd/common/chan.h"
#include "egressd/common/config.h"

struct enforce;
struct ppolicy;

struct ppolicy *ppolicy_new(const struct config *cfg, struct enforce *enf);
void ppolicy_free(struct ppolicy *pp);

/* Outcome of one policy chunk. */
enum ppolicy_status {
	PPOLICY_MORE,      /* wait for the next chunk */
	PPOLICY_DONE,      /* applied (*err 0) or refused (*err, msg): answer control */
	PPOLICY_VIOLATION, /* chunks out of sequence: control is broken (*why) */
};

/* Feed one validated chunk from control. */
enum ppolicy_status ppolicy_chunk(struct ppolicy *pp, const union chan_msg *m, int *err, char *msg,
    size_t msglen, const char **why);

/* Drop a document being received (control is gone). */
void ppolicy_rx_reset(struct ppolicy *pp);

/*
 * Check one learn request against the policy in force: the name allowed
 * on that port scope, the address not an inner one. The timeout is
 * clamped to the policy's ttlMax. 0, or an errno with *why.
 */
int ppolicy_learn_check(struct ppolicy *pp, struct chan_learn *l, const char **why);

/* Whether the policy in force allows a canonical name (leaf minting). */
bool ppolicy_name_allowed(struct ppolicy *pp, const char *name);

/* Record learns the kernel accepted, for pruning at the next change. */
void ppolicy_learned(struct ppolicy *pp, const struct chan_learn *l, size_t n);

/* Forget expired learned entries (the kernel's timeouts did the same). */
void ppolicy_expire(struct ppolicy *pp);

/*
 * Send the policy in force on a child's channel as CHAN_POLICY chunks of
 * `id` (blocking, with a deadline): the handover to a new child, or a
 * push of a change. One empty chunk when there is none yet.
 */
int ppolicy_send(struct ppolicy *pp, int chanfd, uint32_t id);

/* Whether control has put a policy in force yet. */
bool ppolicy_has_policy(const struct ppolicy *pp);

/* Learned entries the parent holds (in the kernel's sets). */
size_t ppolicy_learned_count(const struct ppolicy *pp);

/* Each learned entry still in force, as a learn message (name, address, port, time left). */
typedef void (*ppolicy_learn_fn)(const struct chan_learn *l, void *arg);
void ppolicy_foreach_learned(struct ppolicy *pp, ppolicy_learn_fn fn, void *arg);

#endif
