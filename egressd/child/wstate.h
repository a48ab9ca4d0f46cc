/*
 * A child's state: its role, the active policy, the learned-address map,
 * its service (control: the API and the policy sources; dns: the DNS
 * proxy; intercept: interception and the vault's data path) and its
 * counters. In control, policy changes go through wstate_apply(), which
 * hands the policy to the parent and swaps only once the parent has put it
 * in force everywhere; dns and intercept take the policy, the vault and
 * learned addresses the parent pushes (wstate_push).
 */
#ifndef EGRESSD_WSTATE_H
#define EGRESSD_WSTATE_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "egressd/common/chan.h"
#include "egressd/common/config.h"
#include "egressd/common/metrics.h"

struct policy;
struct wchan;
struct dnsproxy;
struct learnmap;
struct api;
struct vault_snap;
struct vault_store;
struct wintercept;

struct wstate_apply;

struct wstate {
	const struct config *cfg;
	enum chan_role role;
	struct event_base *base;
	struct wchan *chan;
	int exit_code;

	struct policy *policy; /* active, with the always rules */
	char *inherit;         /* the parent's policy in force at start (policy_wire), or NULL */
	size_t inherit_len;
	uint64_t revision;             /* bumped on every applied change */
	bool ready;                    /* enforcement and listeners are in place */
	struct wstate_apply *applying; /* in flight, FIFO */
	struct wstate_apply *queue_tail;

	struct learnmap *learned;
	struct dnsproxy *dns;
	struct api *api;
	struct vault_snap *vault;   /* active Credential Vault revision, or NULL */
	struct vault_store *vstore; /* the vault as written through the API */
	struct wintercept *icpt;    /* TLS/HTTP interception, when enabled */
	struct metrics *metrics;    /* this process's page (shstat), or metrics_local */
	struct metrics metrics_local;
	struct chan_doc push_rx; /* a document the parent is pushing */
	int push_err;            /* of the learn batch being pushed */
	struct event *ev_watch;  /* policy and always files */
	struct wstate_stamp {
		long long mtime_ns, size, ino;
	} stamps[3];
};

/* Called once the change is applied (err 0) or refused (err != 0, msg says why). */
typedef void (*wstate_applied_cb)(int err, const char *msg, void *arg);

/* Load the initial policy, apply it, start the services, report ready. */
int wstate_start(struct wstate *ws) __attribute__((warn_unused_result));

/* Stop the services and free the state. */
void wstate_stop(struct wstate *ws);

/*
 * Make `p` the active policy (takes the reference): the parent applies its
 * static sets first; only then the worker swaps, forgets learned addresses
 * of names no longer allowed, and calls cb. On failure the previous policy
 * stays and cb gets the reason. Changes are applied one at a time, in order.
 */
/*
 * Whether every policy still being applied (sent to the parent, not yet
 * acknowledged) allows name. A DNS answer decided on the policy in force
 * is learned only then: a learn sent while a change that removes the
 * name is in flight would reach the kernel after the change's prune, and
 * outlive the acknowledgement.
 */
bool wstate_pending_allows(const struct wstate *ws, const char *name);

void wstate_apply(struct wstate *ws, struct policy *p, wstate_applied_cb cb, void *arg);

/* Re-read the policy sources (SIGHUP, file change); invalid keeps the old. */
void wstate_reload(struct wstate *ws, const char *why);

/*
 * Control: hand the active vault (ws->vault) to the parent, for the
 * intercept; cb gets 0 once the intercept holds it, or an errno. Without
 * a channel or without interception, cb runs at once with 0.
 */
void wstate_publish_vault(struct wstate *ws, wstate_applied_cb cb, void *arg);

/* Control: whether every child is ready (egressd serves), and the intercept. */
bool wstate_all_ready(const struct wstate *ws);
bool wstate_intercept_ready(const struct wstate *ws);

/* Control: every child's counters summed into *out, and the learned entries in force. */
void wstate_metrics_sum(const struct wstate *ws, struct metrics *out);
uint64_t wstate_learned_count(const struct wstate *ws);

/* Build the effective policy from a user policy: add the always files. */
struct policy *wstate_with_always(
    struct wstate *ws, const struct policy *user, char *err, size_t errlen);

#endif
