/*
 * Counters and status shared between processes without a message for
 * each: one memfd page per child role, written only by that child and
 * mapped read-only into control (which serves /metrics) and report (which exports them), and one status
 * page written only by the parent (which children are ready, how many
 * addresses are learned) and read by control (/healthz, /metrics). A
 * read-only mapping comes from a read-only descriptor, so a child cannot
 * make it writable again with mprotect().
 */
#ifndef EGRESSD_SHSTAT_H
#define EGRESSD_SHSTAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egressd/common/chan.h"
#include "egressd/common/metrics.h"

/* The parent's page. */
struct shstat_status {
	uint32_t ready;    /* bit (1 << role) per child that reported READY */
	uint32_t present;  /* bit per child the configuration runs */
	uint64_t learned;  /* learned entries in force */
	uint64_t revision; /* policy changes put in force (egressd_policy_revision) */
};

/* The descriptors, made by the parent before it forks. */
struct shstat {
	int rw[CHAN_ROLE_MAX], ro[CHAN_ROLE_MAX];
	int status_rw, status_ro;
	struct shstat_status *status; /* the parent's writable mapping */
};

/* What a child sees, once shstat_attach() ran in it. */
struct shstat_view {
	struct metrics *own;                                /* this child's counters */
	const volatile struct metrics *role[CHAN_ROLE_MAX]; /* control, report: every child's */
	const volatile struct shstat_status *status;        /* control, report */
};

/* Parent: make the pages. 0, or -1 with err. */
int shstat_open(struct shstat *s, char *err, size_t errlen);
void shstat_close(struct shstat *s);

/* Whether fd is one of the descriptors (kept across a child's fd sweep). */
bool shstat_is(const struct shstat *s, int fd);

/*
 * Child of `role`, right after fork: map its own page writable and, for
 * control, every page read-only; drop the parent's writable status page.
 * The descriptors are closed by the caller's sweep. 0 or -1.
 */
int shstat_attach(struct shstat *s, enum chan_role role);

/* The view shstat_attach() made in this process (own is NULL before). */
const struct shstat_view *shstat_view(void);

#endif
