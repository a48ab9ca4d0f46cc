/*
 * Credential values (struct secret): loaded from inline API values, files
 * (Kubernetes Secret volumes, re-read on rotation) or the environment (read
 * once, then scrubbed). Runs in the worker that injects credentials. It must
 * never log, never hand out a pointer to the bytes, and always wipe them
 * with OPENSSL_cleanse before the memory is freed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <openssl/crypto.h>

#include "vault/secret.h"

struct secret {
	atomic_uint refs;
	size_t len;
	uint8_t bytes[];
};

static const char secret_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Creates a secret of len bytes with uninitialised contents. */
static struct secret *
secret_alloc(size_t len)
{
	struct secret *s;

	if (len == 0 || len > SECRET_MAX_BYTES)
		return NULL;
	s = malloc(sizeof(*s) + len);
	if (s == NULL)
		return NULL;
	atomic_init(&s->refs, 1);
	s->len = len;
	return s;
}

/* Copies bytes into a new secret (refcount 1). */
struct secret *
secret_new(const uint8_t *bytes, size_t len)
{
	struct secret *s;

	if (bytes == NULL)
		return NULL;
	s = secret_alloc(len);
	if (s != NULL)
		memcpy(s->bytes, bytes, len);
	return s;
}

/*
 * RFC 9110 field-value: field-vchar [ 1*( SP / HTAB / field-vchar ) field-vchar ],
 * field-vchar = VCHAR / obs-text. A value outside it (CR, LF, NUL, another
 * control byte, DEL, or white space at either end) would be written raw
 * into the request head: a second header, a second request, or a value the
 * upstream trims to something else.
 */
bool
secret_value_ok(const uint8_t *bytes, size_t len)
{
	if (bytes == NULL || len == 0 || len > SECRET_MAX_BYTES)
		return false;
	for (size_t i = 0; i < len; i++) {
		uint8_t b = bytes[i];
		bool ws = b == ' ' || b == '\t';
		if (!(ws || (b >= 0x21 && b <= 0x7e) || b >= 0x80))
			return false;
		if (ws && (i == 0 || i == len - 1))
			return false;
	}
	return true;
}

static void
secret_set_err(int *err, int e)
{
	if (err != NULL)
		*err = e;
}

static void
secret_stamp_fill(struct secret_stamp *st, const struct stat *sb)
{
	st->valid = true;
	st->dev = sb->st_dev;
	st->ino = sb->st_ino;
	st->size = sb->st_size;
	st->mtime = sb->st_mtim;
	st->ctime = sb->st_ctim;
}

/* Loads a secret file and stamps the identity of what was read. */
struct secret *
secret_from_file_stamp(const char *path, struct secret_stamp *stamp, int *err)
{
	/* Room for the value plus an optional "\r\n", plus one byte to see EOF. */
	uint8_t buf[SECRET_MAX_BYTES + 3];
	struct secret *s = NULL;
	struct stat sb;
	size_t got = 0;
	ssize_t n;
	int fd;

	if (path == NULL) {
		secret_set_err(err, EINVAL);
		return NULL;
	}
	/* O_NONBLOCK: a FIFO planted at the path must not hang the loader. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd == -1) {
		secret_set_err(err, errno);
		return NULL;
	}
	if (fstat(fd, &sb) == -1) {
		secret_set_err(err, errno);
		goto out;
	}
	if (!S_ISREG(sb.st_mode)) {
		secret_set_err(err, EINVAL);
		goto out;
	}
	while (got < sizeof(buf)) {
		n = read(fd, buf + got, sizeof(buf) - got);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			secret_set_err(err, errno);
			goto out;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	if (got > 0 && buf[got - 1] == '\n') {
		got--;
		if (got > 0 && buf[got - 1] == '\r')
			got--;
	}
	if (got > SECRET_MAX_BYTES) {
		secret_set_err(err, EFBIG);
		goto out;
	}
	if (got == 0) {
		secret_set_err(err, ENODATA);
		goto out;
	}
	if (!secret_value_ok(buf, got)) {
		secret_set_err(err, EILSEQ);
		goto out;
	}
	s = secret_new(buf, got);
	if (s == NULL) {
		secret_set_err(err, ENOMEM);
		goto out;
	}
	if (stamp != NULL)
		secret_stamp_fill(stamp, &sb);
out:
	OPENSSL_cleanse(buf, sizeof(buf));
	close(fd);
	return s;
}

/* Loads a secret file (see secret_from_file_stamp). */
struct secret *
secret_from_file(const char *path, int *err)
{
	return secret_from_file_stamp(path, NULL, err);
}

/* Takes a secret out of the environment, leaving no copy there. */
struct secret *
secret_from_env(const char *name, int *err)
{
	struct secret *s;
	size_t len;
	bool bad;
	char *v;

	if (name == NULL || *name == '\0' || strchr(name, '=') != NULL) {
		secret_set_err(err, EINVAL);
		return NULL;
	}
	v = getenv(name);
	if (v == NULL) {
		secret_set_err(err, ENOENT);
		return NULL;
	}
	len = strlen(v);
	bad = len > 0 && len <= SECRET_MAX_BYTES && !secret_value_ok((const uint8_t *)v, len);
	s = bad ? NULL : secret_new((const uint8_t *)v, len);
	/*
	 * Wipe the value where it lives (the initial environment block is what
	 * /proc/PID/environ shows), then drop the variable so that children and
	 * later getenv() calls never see it, whether or not the copy succeeded.
	 */
	OPENSSL_cleanse(v, len);
	unsetenv(name);
	if (s == NULL) {
		secret_set_err(err, len == 0                 ? ENODATA
		                    : len > SECRET_MAX_BYTES ? EMSGSIZE
		                    : bad                    ? EILSEQ
		                                             : ENOMEM);
		return NULL;
	}
	return s;
}

/* Rotation check for file sources: compares and refreshes the stamp. */
bool
secret_file_changed(const char *path, struct secret_stamp *stamp)
{
	struct secret_stamp now = {0};
	struct stat sb;
	bool changed;

	if (path != NULL && stat(path, &sb) == 0)
		secret_stamp_fill(&now, &sb);
	if (!now.valid || !stamp->valid)
		changed = now.valid != stamp->valid;
	else
		changed = now.dev != stamp->dev || now.ino != stamp->ino ||
		          now.size != stamp->size || now.mtime.tv_sec != stamp->mtime.tv_sec ||
		          now.mtime.tv_nsec != stamp->mtime.tv_nsec ||
		          now.ctime.tv_sec != stamp->ctime.tv_sec ||
		          now.ctime.tv_nsec != stamp->ctime.tv_nsec;
	*stamp = now;
	return changed;
}

/* Length of the value; lengths are not secret. */
size_t
secret_len(const struct secret *s)
{
	return s->len;
}

/* Constant-time comparison of two values of the same length. */
bool
secret_equal_ct(const struct secret *a, const struct secret *b)
{
	if (a->len != b->len)
		return false;
	return CRYPTO_memcmp(a->bytes, b->bytes, a->len) == 0;
}

/* Copies the value into a header being built by the caller. */
int
secret_append_raw(const struct secret *s, uint8_t *dst, size_t cap)
{
	if (dst == NULL || cap < s->len)
		return -1;
	memcpy(dst, s->bytes, s->len);
	return 0;
}

/* Appends the value to an outgoing evbuffer. */
int
secret_append_to(const struct secret *s, struct evbuffer *out)
{
	return evbuffer_add(out, s->bytes, s->len);
}

size_t
secret_base64_len(const struct secret *s, size_t prefix_len)
{
	return (prefix_len + s->len + 2) / 3 * 4;
}

/* Byte i of prefix || value. */
static uint8_t
secret_cat_at(const struct secret *s, const uint8_t *prefix, size_t prefix_len, size_t i)
{
	return i < prefix_len ? prefix[i] : s->bytes[i - prefix_len];
}

int
secret_append_base64_raw(
    const struct secret *s, const uint8_t *prefix, size_t prefix_len, uint8_t *dst, size_t cap)
{
	size_t total = prefix_len + s->len, i, o = 0;
	uint32_t v;

	if (dst == NULL || (prefix == NULL && prefix_len > 0) || prefix_len > SECRET_MAX_BYTES ||
	    cap < secret_base64_len(s, prefix_len))
		return -1;
	for (i = 0; i + 3 <= total; i += 3) {
		v = (uint32_t)secret_cat_at(s, prefix, prefix_len, i) << 16 |
		    (uint32_t)secret_cat_at(s, prefix, prefix_len, i + 1) << 8 |
		    secret_cat_at(s, prefix, prefix_len, i + 2);
		dst[o++] = secret_b64[v >> 18 & 63];
		dst[o++] = secret_b64[v >> 12 & 63];
		dst[o++] = secret_b64[v >> 6 & 63];
		dst[o++] = secret_b64[v & 63];
	}
	if (i < total) {
		v = (uint32_t)secret_cat_at(s, prefix, prefix_len, i) << 16;
		if (i + 1 < total)
			v |= (uint32_t)secret_cat_at(s, prefix, prefix_len, i + 1) << 8;
		dst[o++] = secret_b64[v >> 18 & 63];
		dst[o++] = secret_b64[v >> 12 & 63];
		dst[o++] = i + 1 < total ? secret_b64[v >> 6 & 63] : '=';
		dst[o++] = '=';
	}
	return 0;
}

int
secret_append_base64(
    const struct secret *s, const uint8_t *prefix, size_t prefix_len, struct evbuffer *out)
{
	size_t n;
	struct evbuffer_iovec vec;

	if (prefix_len > SECRET_MAX_BYTES)
		return -1;
	n = secret_base64_len(s, prefix_len);
	/* One contiguous extent: the rendering is written once, in place. */
	if (evbuffer_reserve_space(out, (ev_ssize_t)n, &vec, 1) != 1 || vec.iov_len < n)
		return -1;
	if (secret_append_base64_raw(s, prefix, prefix_len, vec.iov_base, n) == -1)
		return -1;
	vec.iov_len = n;
	return evbuffer_commit_space(out, &vec, 1);
}

/* Shares the secret with another owner. */
struct secret *
secret_ref(struct secret *s)
{
	atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
	return s;
}

/* Releases one owner; the last one wipes the bytes. */
void
secret_unref(struct secret *s)
{
	if (s == NULL)
		return;
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
		return;
	OPENSSL_cleanse(s->bytes, s->len);
	OPENSSL_cleanse(&s->len, sizeof(s->len));
	free(s);
}
