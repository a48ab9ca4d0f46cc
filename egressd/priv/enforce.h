/*
 * Enforcement backend of the parent: the nft table (egressd/nftrules.c)
 * driven from validated channel messages. Only the parent calls it.
 */
#ifndef EGRESSD_ENFORCE_H
#define EGRESSD_ENFORCE_H

#include <stdbool.h>
#include <stddef.h>

#include "egressd/common/chan.h"
#include "egressd/common/config.h"

struct enforce;
struct policy;

/* Open netlink and prepare; nothing is installed yet. NULL on error. */
struct enforce *enforce_open(const struct config *cfg, char *err, size_t errlen);

/*
 * Install the whole table in one batch: default deny with no rules yet,
 * the DNS redirect and, when interception is on, the intercept redirect.
 * Fails closed: an error means egressd must not start.
 */
int enforce_install(struct enforce *e, char *err, size_t errlen)
    __attribute__((warn_unused_result));

struct addrclass_own;

/* The sandbox's own networks in force (borrowed from e; NULL when e is NULL). */
const struct addrclass_own *enforce_own(const struct enforce *e);

/*
 * Set the sandbox's own networks (copied). Before enforce_install they are
 * only kept for it; after, a different set re-creates the static sets
 * with it in one batch (learned sets kept) and *changed is true. On error
 * the previous networks stay in force, in the kernel and here.
 */
int enforce_set_own(struct enforce *e, const struct addrclass_own *own, bool *changed, char *err,
    size_t errlen) __attribute__((warn_unused_result));

/*
 * Replace the static IP/CIDR sets and the default action with those of
 * policy p, in one batch; *nrules gets the count of nft rules written.
 */
int enforce_policy(struct enforce *e, const struct policy *p, size_t *nrules, char *err,
    size_t errlen) __attribute__((warn_unused_result));

/* Add (or refresh) learned addresses with their timeouts, in one batch. */
int enforce_learn(struct enforce *e, const struct chan_learn *l, size_t n, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Remove learned addresses, in one batch; absent ones are not an error. */
int enforce_forget(struct enforce *e, const struct chan_learn *l, size_t n, char *err,
    size_t errlen) __attribute__((warn_unused_result));

/*
 * The chained proxy's addresses, as the dns process resolved its name (n
 * of them, port ignored: the proxy's own), in place of those in force.
 * *changed is false when they are the same ones (nothing is written). On
 * error the previous addresses stay in force.
 */
int enforce_set_proxy(struct enforce *e, const struct chan_learn *l, size_t n, bool *changed,
    char *err, size_t errlen) __attribute__((warn_unused_result));

/* Whether l[0..n) are the proxy's addresses in force already (in any order). */
bool enforce_proxy_same(const struct enforce *e, const struct chan_learn *l, size_t n);

/* Delete the table (graceful stop with remove-table-on-exit). */
int enforce_remove(struct enforce *e, char *err, size_t errlen);

/* True if someone else changed the ruleset since our last change. */
bool enforce_tampered(struct enforce *e);

/* Reinstall the whole table with the static rules in force (learned sets are lost). */
int enforce_repair(struct enforce *e, char *err, size_t errlen) __attribute__((warn_unused_result));

void enforce_close(struct enforce *e);

#endif
