/*
 * Shared counter and status pages (parent and children); see shstat.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "egressd/common/shstat.h"

static struct shstat_view shstat_self;

/* A memfd of `size` bytes and a read-only descriptor of the same file. */
static int
shstat_make(const char *name, size_t size, int *rw, int *ro, char *err, size_t errlen)
{
	char path[64];

	*rw = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (*rw < 0 || ftruncate(*rw, (off_t)size) != 0 ||
	    fcntl(*rw, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
		snprintf(err, errlen, "shared counters: memfd: %s", strerror(errno));
		return -1;
	}
	/* A descriptor opened read-only gives mappings that can never be made writable. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", *rw);
	*ro = open(path, O_RDONLY | O_CLOEXEC);
	if (*ro < 0) {
		snprintf(
		    err, errlen, "shared counters: reopen %s read-only: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

int
shstat_open(struct shstat *s, char *err, size_t errlen)
{
	memset(s, 0, sizeof(*s));
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		s->rw[r] = s->ro[r] = -1;
	s->status_rw = s->status_ro = -1;
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		if (shstat_make(chan_role_name((enum chan_role)r), sizeof(struct metrics),
		        &s->rw[r], &s->ro[r], err, errlen) != 0)
			goto fail;
	if (shstat_make("status", sizeof(struct shstat_status), &s->status_rw, &s->status_ro, err,
	        errlen) != 0)
		goto fail;
	s->status = mmap(NULL, sizeof(struct shstat_status), PROT_READ | PROT_WRITE, MAP_SHARED,
	    s->status_rw, 0);
	if (s->status == MAP_FAILED) {
		s->status = NULL;
		snprintf(err, errlen, "shared counters: mmap: %s", strerror(errno));
		goto fail;
	}
	return 0;
fail:
	shstat_close(s);
	return -1;
}

void
shstat_close(struct shstat *s)
{
	for (int r = 0; r < CHAN_ROLE_MAX; r++) {
		if (s->rw[r] >= 0)
			close(s->rw[r]);
		if (s->ro[r] >= 0)
			close(s->ro[r]);
		s->rw[r] = s->ro[r] = -1;
	}
	if (s->status_rw >= 0)
		close(s->status_rw);
	if (s->status_ro >= 0)
		close(s->status_ro);
	s->status_rw = s->status_ro = -1;
	if (s->status != NULL)
		munmap(s->status, sizeof(struct shstat_status));
	s->status = NULL;
}

bool
shstat_is(const struct shstat *s, int fd)
{
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		if (fd == s->rw[r] || fd == s->ro[r])
			return true;
	return fd == s->status_rw || fd == s->status_ro;
}

static const void *
shstat_map_ro(int fd, size_t size)
{
	void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

int
shstat_attach(struct shstat *s, enum chan_role role)
{
	void *own;

	if (s->status != NULL) {
		munmap(s->status, sizeof(struct shstat_status));
		s->status = NULL;
	}
	own =
	    mmap(NULL, sizeof(struct metrics), PROT_READ | PROT_WRITE, MAP_SHARED, s->rw[role], 0);
	if (own == MAP_FAILED)
		return -1;
	shstat_self.own = own;
	/* Control serves /metrics, report exports them (OTLP): both read every page. */
	if (role != CHAN_ROLE_CONTROL && role != CHAN_ROLE_REPORT)
		return 0;
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		if ((shstat_self.role[r] = shstat_map_ro(s->ro[r], sizeof(struct metrics))) == NULL)
			return -1;
	shstat_self.status = shstat_map_ro(s->status_ro, sizeof(struct shstat_status));
	return shstat_self.status == NULL ? -1 : 0;
}

const struct shstat_view *
shstat_view(void)
{
	return &shstat_self;
}
