/*
 * safefile: reading and writing the sidecar's own state files where a
 * workload may share the volume (see safefile.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "egressd/common/safefile.h"

/* Owned by root or by us, and writable by neither group nor others. */
static bool
safefile_owner_ok(const struct stat *sb)
{
	return (sb->st_uid == 0 || sb->st_uid == geteuid()) &&
	       (sb->st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

int
safefile_dir_open(const char *path, const char **base, char *err, size_t errlen)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct stat sb;
	int dfd;

	*base = slash ? slash + 1 : path;
	if (slash == NULL)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	if ((*base)[0] == '\0' || strlen(*base) + 22 > NAME_MAX) {
		snprintf(err, errlen, "%.200s: bad file name", path);
		return -1;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fstat(dfd, &sb) != 0) {
		snprintf(err, errlen, "%.200s: %s", dir, strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return -1;
	}
	if (!safefile_owner_ok(&sb)) {
		snprintf(err, errlen,
		    "directory %.200s must belong to root or uid %u and not be writable by group "
		    "or others (it is uid %u, mode %04o)",
		    dir, (unsigned)geteuid(), (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777));
		close(dfd);
		return -1;
	}
	return dfd;
}

int
safefile_read(const char *path, size_t max, char **buf, size_t *len, char *err, size_t errlen)
{
	const char *base;
	struct stat sb;
	char *b = NULL;
	size_t n = 0;
	int dfd, fd, rc = -1;

	*buf = NULL;
	*len = 0;
	dfd = safefile_dir_open(path, &base, err, errlen);
	if (dfd < 0)
		return -1;
	fd = openat(dfd, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	close(dfd);
	if (fd < 0) {
		if (errno == ENOENT)
			return 1;
		snprintf(err, errlen, "%.200s: %s%s", path, strerror(errno),
		    errno == ELOOP ? " (a symlink: refused)" : "");
		return -1;
	}
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || !safefile_owner_ok(&sb)) {
		snprintf(err, errlen,
		    "%.200s must be a regular file of root or uid %u that group and others cannot "
		    "write",
		    path, (unsigned)geteuid());
		goto out;
	}
	if ((size_t)sb.st_size > max) {
		snprintf(err, errlen, "%.200s: larger than %zu bytes", path, max);
		goto out;
	}
	b = malloc((size_t)sb.st_size + 1);
	if (b == NULL) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	while (n < (size_t)sb.st_size) {
		ssize_t r = read(fd, b + n, (size_t)sb.st_size - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	b = NULL;
	rc = 0;
out:
	free(b);
	close(fd);
	return rc;
}

/* The label in front of the bytes: a tag of one kind of file is no tag of another. */
#define SAFEFILE_TAG_LABEL "egressd persisted policy v1\n"

int
safefile_tag(const char *key, const void *data, size_t len, char hex[SAFEFILE_TAG_HEX + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	size_t mdlen = 0;
	EVP_MAC *mac;
	EVP_MAC_CTX *ctx = NULL;
	OSSL_PARAM params[2];
	int rc = -1;

	if (key == NULL || key[0] == '\0')
		return -1;
	if ((mac = EVP_MAC_fetch(NULL, "HMAC", NULL)) == NULL)
		return -1;
	params[0] = OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0);
	params[1] = OSSL_PARAM_construct_end();
	if ((ctx = EVP_MAC_CTX_new(mac)) != NULL &&
	    EVP_MAC_init(ctx, (const unsigned char *)key, strlen(key), params) == 1 &&
	    EVP_MAC_update(ctx, (const unsigned char *)SAFEFILE_TAG_LABEL,
	        sizeof(SAFEFILE_TAG_LABEL) - 1) == 1 &&
	    EVP_MAC_update(ctx, data, len) == 1 &&
	    EVP_MAC_final(ctx, md, &mdlen, sizeof(md)) == 1 && mdlen * 2 == SAFEFILE_TAG_HEX) {
		for (size_t i = 0; i < mdlen; i++)
			snprintf(hex + 2 * i, 3, "%02x", md[i]);
		rc = 0;
	}
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	OPENSSL_cleanse(md, sizeof(md));
	return rc;
}

bool
safefile_tag_ok(const char *key, const void *data, size_t len, const char *tag, size_t taglen)
{
	char want[SAFEFILE_TAG_HEX + 1];
	bool ok;

	if (taglen == SAFEFILE_TAG_HEX + 1 && tag[SAFEFILE_TAG_HEX] == '\n')
		taglen--;
	if (taglen != SAFEFILE_TAG_HEX || safefile_tag(key, data, len, want) != 0)
		return false;
	ok = CRYPTO_memcmp(want, tag, SAFEFILE_TAG_HEX) == 0;
	OPENSSL_cleanse(want, sizeof(want));
	return ok;
}
