/*
 * DNS to the resolvers through the chained proxy (EGRESSD_DNS_VIA_PROXY):
 * the socket functions c-ares uses in that mode (egressd/dns/dnsvia.c).
 */
#ifndef EGRESSD_DNSVIA_H
#define EGRESSD_DNSVIA_H

#include <sys/socket.h>

#include <event2/event.h>

#include "egressd/common/config.h"

#define DNSVIA_MAX_CONNS 64            /* tunnels at once (c-ares keeps few) */
#define DNSVIA_DIAL_S 5                /* seconds to reach the proxy and get its answer */
#define DNSVIA_HEAD_MAX 8192           /* bytes of the proxy's answer head at most */
#define DNSVIA_MAX_QUEUED (128 * 1024) /* bytes queued one way before reading pauses */
#define DNSVIA_WARN_S 10               /* a refusal line at most this often */
#define DNSVIA_REQ_MAX 1536            /* the CONNECT head, Proxy-Authorization included */

struct dnsvia;
struct sockpool;

/* For cfg's proxy (an address; https verified for it), marked TCP sockets from pool. */
struct dnsvia *dnsvia_new(struct event_base *base, struct sockpool *pool, const struct config *cfg,
    char *err, size_t errlen);

/* c-ares's socket: its end of a new socketpair, or -1 with errno. */
int dnsvia_socket(struct dnsvia *v);

/*
 * c-ares connects fd to a resolver: the tunnel to it starts (0; c-ares's
 * end is usable at once), or -1 with errno (ENOBUFS: no marked socket
 * ready, which is no fault of the resolver's; else a bad fd).
 */
int dnsvia_connect(struct dnsvia *v, int fd, const struct sockaddr *sa, socklen_t len);

/* c-ares closes fd: its tunnel goes too. close(2)'s result. */
int dnsvia_close(struct dnsvia *v, int fd);

/* After the resolver is closed. Accepts NULL. */
void dnsvia_free(struct dnsvia *v);

#endif
