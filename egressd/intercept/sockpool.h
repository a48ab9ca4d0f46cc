/*
 * sockpool: marked sockets from the parent, for the worker's outbound
 * connections. A few are kept ready per family; a request is always
 * answered asynchronously, from the pool or from a fresh CHAN_SOCKET_REQ.
 */
#ifndef EGRESSD_SOCKPOOL_H
#define EGRESSD_SOCKPOOL_H

#include <stddef.h>

struct event_base;
struct wchan;
struct sockpool;

/* Sockets kept ready per family at most. */
#define SOCKPOOL_MAX_KEEP 64

/* Gets a marked socket (owned by the callee) or fd -1 and an errno. */
typedef void (*sockpool_cb)(int fd, int err, void *arg);

/*
 * A pool of socktype (SOCK_STREAM or SOCK_DGRAM) sockets that keeps up to
 * keep of each family ready. chan is borrowed. Owned, or NULL.
 */
struct sockpool *sockpool_new(struct event_base *base, struct wchan *chan, int socktype,
    size_t keep) __attribute__((warn_unused_result));

/* Frees the pool: ready sockets are closed, pending callbacks never run. Accepts NULL. */
void sockpool_free(struct sockpool *p);

/* Ask for a socket of family (AF_INET/AF_INET6); cb runs once, later. 0 or -1. */
int sockpool_get(struct sockpool *p, int family, sockpool_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* Sockets ready now for family. */
size_t sockpool_ready(const struct sockpool *p, int family);

#endif
