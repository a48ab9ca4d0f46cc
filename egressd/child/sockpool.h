/*
 * sockpool: marked sockets from the parent, for the worker's outbound
 * connections: the one pool the intercept (TCP) and the DNS proxy (UDP and
 * TCP to the resolvers) take them from. A few are kept ready per family; a
 * request is answered asynchronously, from the pool or from a fresh
 * CHAN_SOCKET_REQ, and sockpool_take() serves callers that cannot wait
 * (c-ares asks for a socket synchronously).
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

/* Families of sockpool_new(). */
#define SOCKPOOL_V4 0x1
#define SOCKPOOL_V6 0x2

/*
 * A pool of socktype (SOCK_STREAM or SOCK_DGRAM) sockets that keeps up to
 * keep of each family in `families` ready. chan is borrowed. Owned, or NULL.
 */
struct sockpool *sockpool_new(struct event_base *base, struct wchan *chan, int socktype,
    size_t keep, unsigned families) __attribute__((warn_unused_result));

/*
 * A ready socket now, the pool refilling behind it; -1 with errno EAGAIN
 * when none is ready (or EAFNOSUPPORT for a family the pool does not keep).
 */
int sockpool_take(struct sockpool *p, int family) __attribute__((warn_unused_result));

/* cb runs (from the loop) each time a socket is added to the ready set. */
void sockpool_on_ready(struct sockpool *p, void (*cb)(void *arg), void *arg);

/* Frees the pool: ready sockets are closed, pending callbacks never run. Accepts NULL. */
void sockpool_free(struct sockpool *p);

/* Ask for a socket of family (AF_INET/AF_INET6); cb runs once, later. 0 or -1. */
int sockpool_get(struct sockpool *p, int family, sockpool_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* Sockets ready now for family. */
size_t sockpool_ready(const struct sockpool *p, int family);

#endif
