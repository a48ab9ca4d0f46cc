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
