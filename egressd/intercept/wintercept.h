/*
 * wintercept: the intercept process's glue around vault/intercept: the sandbox CA and
 * its export, the leaf cache, marked upstream sockets, and the policy,
 * learned-address and vault hooks the interceptor calls.
 */
#ifndef EGRESSD_WINTERCEPT_H
#define EGRESSD_WINTERCEPT_H

#include <stdbool.h>
#include <stddef.h>

#include "egressd/common/chan.h"

struct wstate;
struct wintercept;

/*
 * Create the CA (generated, or loaded from cfg->ca_cert/ca_key), export its
 * certificate to cfg->ca_export, and start the listeners. ws is borrowed
 * and must outlive the result. Owned, or NULL with err filled.
 */
struct wintercept *wintercept_new(struct wstate *ws, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Stop interception and free everything. Accepts NULL. */
void wintercept_free(struct wintercept *w);

/*
 * The chained proxy's addresses, as resolved from its name (n >= 1, from
 * the parent), in place of those in force. 0 or an errno.
 */
/* A pushed policy or vault is in force: session tickets issued before stop resuming. */
void wintercept_state_changed(struct wintercept *w);

int wintercept_proxy(struct wintercept *w, const struct chan_learn *l, size_t n);

/* True once the CA is exported and the listeners are up. */
bool wintercept_ready(const struct wintercept *w);

/* The CA certificate PEM, borrowed until wintercept_free(); NULL if none. */
const char *wintercept_ca_pem(const struct wintercept *w, size_t *lenp);

/*
 * The sandbox CA was renewed (wstate_ca() is the new one): leaves come
 * from it from now on, and the cached leaves of the old one are dropped.
 * 0, or -1 (out of memory: the old CA stays in force).
 */
int wintercept_ca_changed(struct wintercept *w) __attribute__((warn_unused_result));

#endif
