/*
 * Unit tests of closefds_except (egressd/common/closefds.c): what a new
 * child keeps of the descriptors it inherits. Each case runs in a forked
 * process, which closes its descriptors and reports through its exit code.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "egressd/common/closefds.h"

#define HIGH 1500 /* past 1024, the bound of the loop this replaced */
#define LAST 2048 /* descriptors looked at */

static bool
is_open(int fd)
{
	return fcntl(fd, F_GETFD) != -1;
}

/*
 * In a child: open a pipe, copy its ends to 40, 50, 1023, 1024 and HIGH,
 * keep keep[0..n), and exit 0 when exactly 0-2 and the kept ones above 2
 * are open (past 2: any other number is 1 + it, capped at 254).
 */
static int
run(const int *keep, size_t n)
{
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (pid == 0) {
		static const int at[] = {40, 50, 1023, 1024, HIGH};
		struct rlimit rl;
		int p[2];

		if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_max < LAST)
			_exit(255);
		rl.rlim_cur = LAST;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || pipe(p) != 0)
			_exit(255);
		for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
			if (dup2(p[i % 2], at[i]) != at[i])
				_exit(255);
		if (closefds_except(keep, n) != 0)
			_exit(253);
		for (int fd = 0; fd < LAST; fd++) {
			bool kept = fd < 3;

			for (size_t i = 0; i < n; i++)
				kept = kept || keep[i] == fd;
			if (is_open(fd) != kept)
				_exit(fd < 3 ? 252 : 1 + (fd > 250 ? 250 : fd));
		}
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void
test_keeps_only_what_it_is_told(void **state)
{
	const int keep[] = {HIGH, -1, 50, 50, 1};

	(void)state;
	if (run(keep, sizeof(keep) / sizeof(keep[0])) != 0)
		fail_msg("exit %d", run(keep, sizeof(keep) / sizeof(keep[0])));
}

/* Past 1024 too: nothing numbered high survives unless kept. */
static void
test_closes_past_1024(void **state)
{
	const int keep[] = {40};

	(void)state;
	assert_int_equal(run(keep, 1), 0);
	assert_int_equal(run(NULL, 0), 0);
}

static void
test_too_many_refused(void **state)
{
	int keep[CLOSEFDS_MAX_KEEP + 1];

	(void)state;
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
		keep[i] = 100 + (int)i;
	assert_int_equal(closefds_except(keep, CLOSEFDS_MAX_KEEP + 1), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_keeps_only_what_it_is_told),
	    cmocka_unit_test(test_closes_past_1024),
	    cmocka_unit_test(test_too_many_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
