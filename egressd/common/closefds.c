/* Close all inherited descriptors but a few (see closefds.h). */
#include <errno.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <unistd.h>

#include "egressd/common/closefds.h"

/* The kernel's default fs.nr_open: no descriptor is numbered past it unless raised. */
#define CLOSEFDS_NR_OPEN (1u << 20)

/* Close [lo, hi]: close_range, else one by one up to the descriptor limit. */
static int
closefds_range(unsigned lo, unsigned hi)
{
	struct rlimit rl;
	unsigned end = hi;

	if (lo > hi)
		return 0;
	if (close_range(lo, hi, 0) == 0)
		return 0;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return -1;
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > CLOSEFDS_NR_OPEN)
		rl.rlim_cur = CLOSEFDS_NR_OPEN;
	if (rl.rlim_cur <= end)
		end = rl.rlim_cur == 0 ? 0 : (unsigned)rl.rlim_cur - 1;
	for (unsigned fd = lo; fd <= end; fd++)
		(void)close((int)fd);
	return 0;
}

int
closefds_except(const int *keep, size_t n)
{
	int k[CLOSEFDS_MAX_KEEP];
	size_t m = 0;
	unsigned lo = 3;

	if (n > CLOSEFDS_MAX_KEEP) {
		errno = EINVAL;
		return -1;
	}
	/* The kept descriptors from 3 up, each once, in order. */
	for (size_t i = 0; i < n; i++) {
		bool dup = false;

		for (size_t j = 0; j < m; j++)
			dup = dup || k[j] == keep[i];
		if (keep[i] >= 3 && !dup)
			k[m++] = keep[i];
	}
	for (size_t i = 1; i < m; i++) {
		int v = k[i];
		size_t j = i;

		for (; j > 0 && k[j - 1] > v; j--)
			k[j] = k[j - 1];
		k[j] = v;
	}
	for (size_t i = 0; i < m; i++) {
		if (closefds_range(lo, (unsigned)k[i] - 1) != 0)
			return -1;
		lo = (unsigned)k[i] + 1;
	}
	return closefds_range(lo, ~0U);
}
