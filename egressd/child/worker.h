/*
 * The unprivileged worker: DNS proxy, control API, interception. It starts
 * from parent_run() after fork and never returns.
 */
#ifndef EGRESSD_WORKER_H
#define EGRESSD_WORKER_H

#include "egressd/common/config.h"

/* Entry point of the worker after the privilege drop; returns exit code. */
int worker_main(const struct config *cfg, int chanfd);

#endif
