/*
 * A child's state: its role, the active policy, the learned-address map,
 * its service (control: the API and the policy sources; dns: the DNS
 * proxy; intercept: interception and the vault's data path) and its
 * counters. In control, policy changes go through wstate_apply(), which
 * hands the policy to the parent and swaps only once the parent has put it
 * in force everywhere; dns and intercept take the policy, the vault and
 * learned addresses the parent pushes.
 *
 * The state is opaque: the services read it through the accessors below,
 * and plug themselves in through struct wstate_service (egressd/child/
 * worker.c picks the role's), so this module knows none of them.
 */
#ifndef EGRESSD_WSTATE_H
#define EGRESSD_WSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "egressd/common/chan.h"
#include "egressd/common/config.h"
#include "egressd/common/metrics.h"

struct policy;
struct wchan;
struct learnmap;
struct vault_snap;
struct wstate;
struct ca;

/* A role's service. */
struct wstate_service {
	/*
	 * Start it: dns and intercept once the policy handed over is in
	 * place, control before its first policy is applied. The service, or
	 * NULL with err.
	 */
	void *(*start)(struct wstate *ws, char *err, size_t errlen);
	void (*stop)(void *svc);
	/*
	 * Control: a policy is in force (the vault follows the policy file's
	 * bindings). Intercept: a pushed policy or vault is in force.
	 */
	void (*policy_changed)(void *svc);
	/* Every few seconds (control: rotated credential files). */
	void (*tick)(void *svc);
	/* Report: an event the parent forwarded (borrowed for the call). */
	void (*event)(void *svc, const struct chan_event *e);
	/*
	 * Intercept: the chained proxy's addresses, as resolved from its name
	 * (n >= 1, borrowed for the call), in place of those in force. 0 or an
	 * errno (the parent is told).
	 */
	int (*proxy)(void *svc, const struct chan_learn *l, size_t n);
	/*
	 * Intercept: the sandbox CA was renewed (wstate_ca() is the new one):
	 * issue from it, drop what the old one issued. 0, or -1 (then the
	 * previous CA stays in force here and the parent is told).
	 */
	int (*ca_changed)(void *svc);
	/* dns: a record of the table's refusals the parent passed on (borrowed for the call). */
	void (*nflog)(void *svc, const struct chan_nflog *r);
};

/*
 * A child's state; svc may be NULL (tests). A learned map is made for
 * every role. NULL when out of memory.
 */
struct wstate *wstate_new(const struct config *cfg, enum chan_role role, struct event_base *base,
    struct wchan *chan, const struct wstate_service *svc);

/* Intercept: the chained proxy's addresses in force (*n of them; 0: none, or not by name). */
const struct chan_learn *wstate_proxy(const struct wstate *ws, size_t *n);

/* Stop the service and free the state. */
void wstate_free(struct wstate *ws);

/* The channel to the parent (made after the state: its callbacks take the state). */
void wstate_set_chan(struct wstate *ws, struct wchan *chan);

/* The policy the parent handed over at start (policy_wire, taken; NULL: none yet). */
void wstate_set_inherit(struct wstate *ws, char *doc, size_t len);

/* Load the initial policy, apply it (control) or take the parent's, start the service. */
int wstate_start(struct wstate *ws) __attribute__((warn_unused_result));

/* Stop with this exit code (the event loop ends). */
void wstate_fail(struct wstate *ws, int exit_code);
int wstate_exit_code(const struct wstate *ws);

/*
 * dns, intercept: report a refusal for the deny webhook (when one is
 * configured): name canonical or NULL, family 0 without an address,
 * reason a [a-z0-9_] word. Never waits: dropped when the channel is full.
 */
void wstate_event(struct wstate *ws, enum chan_event_kind kind, const char *name, int family,
    const uint8_t *addr, uint16_t port, const char *reason);

/* Tell the parent this process serves (a service that is ready later calls it). */
void wstate_report_ready(struct wstate *ws, const char *what);

/* Accessors. */
const struct config *wstate_cfg(const struct wstate *ws);
enum chan_role wstate_role(const struct wstate *ws);
struct event_base *wstate_base(const struct wstate *ws);
struct wchan *wstate_chan(const struct wstate *ws);
struct policy *wstate_policy(const struct wstate *ws); /* borrowed: take a ref to keep it */
struct learnmap *wstate_learned(const struct wstate *ws);
struct metrics *wstate_metrics(const struct wstate *ws);
uint64_t wstate_revision(const struct wstate *ws);        /* bumped on every applied change */
bool wstate_ready(const struct wstate *ws);               /* this process reported READY */
struct vault_snap *wstate_vault(const struct wstate *ws); /* intercept: in force (borrowed) */
void *wstate_svc(const struct wstate *ws);
/* The sandbox CA in force (certificate only), borrowed until the next renewal; NULL: none. */
const struct ca *wstate_ca(const struct wstate *ws);
/* The certificates to trust (the current CA, then the previous one during an overlap) as PEM. */
const char *wstate_ca_bundle(const struct wstate *ws, size_t *lenp);

/* Make p the active policy without the parent (takes the reference; tests). */
void wstate_set_policy(struct wstate *ws, struct policy *p);

/* Called once the change is applied (err 0) or refused (err != 0, msg says why). */
typedef void (*wstate_applied_cb)(int err, const char *msg, void *arg);

/*
 * Whether every policy still being applied (sent to the parent, not yet
 * acknowledged) allows name. A DNS answer decided on the policy in force
 * is learned only then: a learn sent while a change that removes the
 * name is in flight would reach the kernel after the change's prune, and
 * outlive the acknowledgement.
 */
bool wstate_pending_allows(const struct wstate *ws, const char *name);

/*
 * Control: make `p` the active policy (takes the reference): the parent
 * puts it in force and pushes it to the other children first; only then
 * this process swaps and calls cb. On failure the previous policy stays
 * and cb gets the reason. Changes are applied one at a time, in order.
 */
void wstate_apply(struct wstate *ws, struct policy *p, wstate_applied_cb cb, void *arg);

/* Re-read the policy sources (SIGHUP, file change); invalid keeps the old. */
void wstate_reload(struct wstate *ws, const char *why);

/* Build the effective policy from a user policy: add the always files. */
struct policy *wstate_with_always(
    struct wstate *ws, const struct policy *user, char *err, size_t errlen);

/*
 * Control: hand a vault snapshot (NULL: none) to the parent, for the
 * intercept; cb gets 0 once the intercept holds it, or an errno. Without
 * a channel or without interception, cb runs at once with 0.
 */
void wstate_publish_vault(
    struct wstate *ws, const struct vault_snap *snap, wstate_applied_cb cb, void *arg);

/* Control: whether every child is ready (egressd serves), and the intercept. */
bool wstate_all_ready(const struct wstate *ws);
bool wstate_intercept_ready(const struct wstate *ws);

/* Control: every child's counters summed into *out, and the learned entries in force. */
void wstate_metrics_sum(const struct wstate *ws, struct metrics *out);
uint64_t wstate_learned_count(const struct wstate *ws);

#endif
