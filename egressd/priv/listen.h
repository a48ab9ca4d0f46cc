/*
 * listen: the sidecar's listening sockets (parent process). The parent
 * binds each one once, with the sidecar's SO_MARK, before it forks the
 * worker, and keeps it for its whole life; every worker incarnation
 * inherits the same sockets, so a crashed worker never frees a port.
 */
#ifndef EGRESSD_LISTEN_H
#define EGRESSD_LISTEN_H

#include <stddef.h>

#include "egressd/common/config.h"
#include "egressd/common/listeners.h"

/*
 * Bind every listener the configuration needs (the API on cfg->http_addr,
 * DNS on loopback UDP and TCP, both families, and the intercept ports when
 * interception is on), each marked with cfg->listen_mark, a mark no child
 * socket carries (the input chain lets only it serve the sidecar's ports),
 * into cfg->listen. A
 * port already taken is an error that names it and who holds it. 0, or -1
 * with err (and nothing left open).
 */
int listen_open(struct config *cfg, char *err, size_t errlen) __attribute__((warn_unused_result));

/* Close every listener of ls. */
void listen_close(struct listen_set *ls);

#endif
