/*
 * The privileged parent: installs enforcement, forks and supervises one
 * child per trust level (control, dns, intercept), and serves their
 * channel requests (marked sockets, learned addresses, leaves, the policy
 * and vault control hands on), each checked against the sender's role.
 */
#ifndef EGRESSD_PARENT_H
#define EGRESSD_PARENT_H

#include "egressd/common/chan.h"
#include "egressd/common/config.h"

/* A child's entry point, run after the privilege drop, with its role. */
typedef int (*parent_worker_fn)(const struct config *cfg, int chanfd, enum chan_role role);

/*
 * Run the sidecar until SIGTERM/SIGINT, with `worker` as every child
 * (egressd passes worker_main; tests/lib/hostile_worker.c passes hostile
 * code, to show what the parent refuses). Returns the exit code.
 */
int parent_run(struct config *cfg, parent_worker_fn worker);

#endif
