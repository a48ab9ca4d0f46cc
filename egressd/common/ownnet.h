/*
 * ownnet: the sandbox's own networks, read from its network namespace
 * (any process: rtnetlink dumps need no capability). They are the on-link
 * prefix of every address that is neither host- nor link-scoped, that
 * address itself, and the gateway of every route (multipath included):
 * the pod subnet and the node. The result is a struct addrclass_own
 * (policy/addrclass.h), shared by the kernel's deny sets, the parent's
 * learn check and the DNS answer filter.
 */
#ifndef EGRESSD_OWNNET_H
#define EGRESSD_OWNNET_H

#include <stdbool.h>
#include <stddef.h>

#include "policy/addrclass.h"

/*
 * Read the namespace's addresses and routes into own (replaced). -1 with
 * err on a netlink error or when there are more than ADDRCLASS_MAX_OWN
 * distinct prefixes (own is then empty: the caller decides what a failed
 * scan means).
 */
int ownnet_scan(struct addrclass_own *own, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * A netlink socket (non-blocking; owned, close it) subscribed to changes
 * of addresses and routes, both families; -1 with errno on failure.
 */
int ownnet_watch_open(void) __attribute__((warn_unused_result));

/*
 * Read everything pending on a watch socket. True when the networks may
 * have changed: an address or route message, or lost messages (ENOBUFS).
 */
bool ownnet_watch_drain(int fd);

/* own as text for a log line ("10.200.0.0/24 10.200.0.1 fd00:200::/64"). */
void ownnet_format(const struct addrclass_own *own, char *buf, size_t buflen);

#endif
