/*
 * startcheck: what the worker reads again after the privilege drop, checked
 * at start with the worker's own rights (a probe process that drops to its
 * uid and gid), so that a file it cannot read is named in one log line
 * before anything runs rather than found by reading the code.
 */
#ifndef EGRESSD_PRIV_STARTCHECK_H
#define EGRESSD_PRIV_STARTCHECK_H

#include <stddef.h>
#include <sys/types.h>

#include "egressd/common/config.h"

/*
 * The policy files and the credential files the YAML policy names. A file
 * the worker cannot do without (--policy) that it cannot read: -1 with one
 * sentence in err (path, uid, mode, what to change). Others are logged as
 * one warning line each. 0 otherwise.
 */
int startcheck_worker_reads(
    const struct config *cfg, uid_t uid, gid_t gid, char *err, size_t errlen);

#endif
