/*
 * safefile: the sidecar's own state files (every process). A file the
 * sidecar writes and later reads back (the persisted OpenSandbox policy)
 * lives in a directory that belongs to root or to this process's uid and
 * that neither group nor others may write, and is itself a regular file
 * of that owner, never a symlink: whatever a workload can plant on a
 * shared volume is refused, not loaded.
 */
#ifndef EGRESSD_SAFEFILE_H
#define EGRESSD_SAFEFILE_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Open path's directory (O_DIRECTORY) after checking its owner and mode;
 * *base points into path at the file's name. The descriptor, or -1 with
 * err naming the directory, the uid it must belong to and the mode.
 */
int safefile_dir_open(const char *path, const char **base, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * Read the whole of path (at most max bytes) into a new NUL-terminated
 * buffer, after the directory check above, without following a symlink,
 * and only if it is a regular file of root or our uid that group and
 * others cannot write. 0 with *buf and *len set, 1 when the file does not exist,
 * -1 with err.
 */
int safefile_read(const char *path, size_t max, char **buf, size_t *len, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Hex digits of a safefile_tag() (HMAC-SHA256), without the NUL. */
#define SAFEFILE_TAG_HEX 64

/*
 * The integrity tag of a state file's contents: HMAC-SHA256 keyed with
 * key (the control API's token, which only the control plane and the
 * sidecar hold), over a label and the bytes, as lowercase hex with a NUL.
 * A file whose tag does not match was not written by a sidecar that held
 * the token. 0, or -1 (empty key or a crypto error).
 */
int safefile_tag(const char *key, const void *data, size_t len, char hex[SAFEFILE_TAG_HEX + 1])
    __attribute__((warn_unused_result));

/* Whether tag (hex, optionally followed by a newline) is data's tag under key; constant time. */
bool safefile_tag_ok(const char *key, const void *data, size_t len, const char *tag, size_t taglen);

#endif
