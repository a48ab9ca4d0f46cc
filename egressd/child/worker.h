/*
 * The unprivileged children: control (the API), dns (the DNS proxy) and
 * intercept (interception), one process each. Each starts from
 * parent_run() after fork.
 */
#ifndef EGRESSD_WORKER_H
#define EGRESSD_WORKER_H

#include "egressd/common/chan.h"
#include "egressd/common/config.h"

/* Entry point of a child of `role` after the privilege drop; returns its exit code. */
int worker_main(const struct config *cfg, int chanfd, enum chan_role role);

#endif
