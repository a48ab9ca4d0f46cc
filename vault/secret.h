/*
 * Opaque credential values. No accessor returns a C string or a pointer to
 * the bytes: a secret can only be copied into an outgoing buffer, compared
 * in constant time, or rendered (base64) into one. Wiped on last unref.
 */
#ifndef EGRESSD_VAULT_SECRET_H
#define EGRESSD_VAULT_SECRET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

struct evbuffer;
struct secret;

/* Largest secret value accepted from any source (bytes). */
#define SECRET_MAX_BYTES 16384

/*
 * Identity of a secret file as last read: Kubernetes rotates Secret volumes
 * by swapping a symlink, so any of these changing means "re-read".
 */
struct secret_stamp {
	bool valid; /* false: never stamped, or stat failed */
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	struct timespec ctime;
};

/*
 * True if the bytes can be a header field value (RFC 9110: VCHAR, SP, HTAB,
 * obs-text; no white space at either end). Every source is checked with it.
 */
bool secret_value_ok(const uint8_t *bytes, size_t len);

/* Copies len bytes (1..SECRET_MAX_BYTES) into a new secret; refcount 1. */
struct secret *secret_new(const uint8_t *bytes, size_t len) __attribute__((warn_unused_result));

/* Reads a regular file (size-capped), strips one trailing "\n" or "\r\n";
 * on failure returns NULL and sets *err to an errno value (EILSEQ: the
 * value fails secret_value_ok). */
struct secret *secret_from_file(const char *path, int *err) __attribute__((warn_unused_result));

/* As secret_from_file, and fills *stamp from the descriptor that was read. */
struct secret *secret_from_file_stamp(const char *path, struct secret_stamp *stamp, int *err)
    __attribute__((warn_unused_result));

/* Reads env var name once, wipes its value in the environment block and
 * unsets it; NULL and *err (ENOENT, EINVAL, EMSGSIZE, EILSEQ, ENOMEM) on failure. */
struct secret *secret_from_env(const char *name, int *err) __attribute__((warn_unused_result));

/* True when path (followed through symlinks) no longer matches *stamp;
 * *stamp is updated to the current identity either way. */
bool secret_file_changed(const char *path, struct secret_stamp *stamp);

/* Number of bytes in the value. */
size_t secret_len(const struct secret *s);

/* Constant-time equality of two values (only the lengths may leak). */
bool secret_equal_ct(const struct secret *a, const struct secret *b);

/* Appends the raw value to out; 0 or -1. */
int secret_append_to(const struct secret *s, struct evbuffer *out)
    __attribute__((warn_unused_result));

/* Writes exactly secret_len(s) bytes at dst; -1 (nothing written) if cap is short. */
int secret_append_raw(const struct secret *s, uint8_t *dst, size_t cap)
    __attribute__((warn_unused_result));

/* Length of base64(prefix || value) with padding, for sizing buffers. */
size_t secret_base64_len(const struct secret *s, size_t prefix_len);

/* Appends standard padded base64(prefix || value) to out (Basic auth:
 * prefix "user:"); the prefix is not secret. 0 or -1. */
int secret_append_base64(const struct secret *s, const uint8_t *prefix, size_t prefix_len,
    struct evbuffer *out) __attribute__((warn_unused_result));

/* Same into dst; writes secret_base64_len() bytes, no NUL; -1 if cap is short. */
int secret_append_base64_raw(const struct secret *s, const uint8_t *prefix, size_t prefix_len,
    uint8_t *dst, size_t cap) __attribute__((warn_unused_result));

/* Takes another reference; returns s. */
struct secret *secret_ref(struct secret *s);

/* Drops a reference; the last one wipes and frees. Accepts NULL. */
void secret_unref(struct secret *s);

#endif
