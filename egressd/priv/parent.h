/*
 * The privileged parent: installs enforcement, forks and supervises the
 * worker, and serves its channel requests (marked sockets, nft changes).
 */
#ifndef EGRESSD_PARENT_H
#define EGRESSD_PARENT_H

#include "egressd/common/config.h"

/* Run the sidecar until SIGTERM/SIGINT. Returns the process exit code. */
int parent_run(struct config *cfg);

#endif
