/*
 * Privilege helpers: capability checks of the parent and the irreversible
 * drop of the worker (own uid when possible, no capabilities,
 * no_new_privs, not dumpable, no core files).
 */
#ifndef EGRESSD_PRIVSEP_H
#define EGRESSD_PRIVSEP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Whether capability `cap` (CAP_*) is in our effective set. */
bool privsep_has_cap(int cap);

/* No core files, not dumpable (no ptrace by same-uid processes). */
int privsep_harden(void) __attribute__((warn_unused_result));

/*
 * Drop to the worker's privileges: if we may change ids, switch to uid/gid
 * (no supplementary groups); then clear every capability (bounding set
 * where allowed, ambient, effective, permitted, inheritable), set
 * no_new_privs, and die with the parent. Verifies the result. 0 or -1 with
 * a reason in err.
 */
int privsep_drop(uid_t uid, gid_t gid, pid_t parent, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * Drop every capability but keep the uid (the policy CLI: it reads the
 * caller's files, and parses them with no privilege at all): bounding set
 * where allowed, ambient, effective, permitted, inheritable; then
 * no_new_privs and no core files. 0 or -1 with a reason in err.
 */
int privsep_drop_caps(char *err, size_t errlen) __attribute__((warn_unused_result));

#endif
