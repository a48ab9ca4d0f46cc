/*
 * The privileged parent: installs enforcement, forks and supervises the
 * worker, and serves its channel requests (marked sockets, nft changes).
 */
#ifndef EGRESSD_PARENT_H
#define EGRESSD_PARENT_H

#include "egressd/common/config.h"

/* The worker's entry point, run in the child after the privilege drop. */
typedef int (*parent_worker_fn)(const struct config *cfg, int chanfd);

/*
 * Run the sidecar until SIGTERM/SIGINT, with `worker` as the worker
 * (egressd passes worker_main; tests/lib/hostile_worker.c passes a
 * hostile one, to show what the parent refuses). Returns the exit code.
 */
int parent_run(struct config *cfg, parent_worker_fn worker);

#endif
