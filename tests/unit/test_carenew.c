/*
 * test_carenew: the sandbox CA's renewal schedule (when to renew, when the
 * previous CA leaves the bundle, at most two at a time), its settings, and
 * when an operator CA is warned about.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "certs/ca.h"
#include "certs/carenew.h"

#define T0 1800000000 /* a fixed "now": the schedule reads no clock */

static void
test_renew_at_the_overlap(void **state)
{
	struct carenew_sched s = {.cur_not_after = T0 + 30, .renew_before = 10};

	(void)state;
	assert_int_equal(carenew_next(&s, T0), CARENEW_NONE);
	assert_int_equal(carenew_next(&s, T0 + 19), CARENEW_NONE);
	/* Exactly renew_before seconds before the end, and any time later. */
	assert_int_equal(carenew_next(&s, T0 + 20), CARENEW_RENEW);
	assert_int_equal(carenew_next(&s, T0 + 29), CARENEW_RENEW);
	assert_int_equal(carenew_next(&s, T0 + 31), CARENEW_RENEW);
	/* The default week with a day's overlap. */
	s.cur_not_after = T0 + 7 * 86400;
	s.renew_before = 86400;
	assert_int_equal(carenew_next(&s, T0 + 6 * 86400 - 1), CARENEW_NONE);
	assert_int_equal(carenew_next(&s, T0 + 6 * 86400), CARENEW_RENEW);
}

static void
test_previous_goes_at_its_end(void **state)
{
	/* Renewed at T0 + 20: the new one ends at T0 + 50, the old at T0 + 30. */
	struct carenew_sched s = {
	    .cur_not_after = T0 + 50, .prev_not_after = T0 + 30, .renew_before = 10};

	(void)state;
	assert_int_equal(carenew_next(&s, T0 + 20), CARENEW_NONE);
	assert_int_equal(carenew_next(&s, T0 + 29), CARENEW_NONE);
	assert_int_equal(carenew_next(&s, T0 + 30), CARENEW_DROP_PREV);
	s.prev_not_after = 0;
	assert_int_equal(carenew_next(&s, T0 + 30), CARENEW_NONE);
	assert_int_equal(carenew_next(&s, T0 + 40), CARENEW_RENEW);
}

/* Never a third CA: a renewal waits for the previous one to go. */
static void
test_at_most_two(void **state)
{
	/* An overlap of half the lifetime: the old one ends when the new one is due. */
	struct carenew_sched s = {
	    .cur_not_after = T0 + 40, .prev_not_after = T0 + 20, .renew_before = 10};

	(void)state;
	assert_int_equal(carenew_next(&s, T0 + 20), CARENEW_DROP_PREV);
	s.prev_not_after = 0;
	assert_int_equal(carenew_next(&s, T0 + 30), CARENEW_RENEW);
	/* Due while a previous one is still trusted: wait. */
	s.prev_not_after = T0 + 35;
	assert_int_equal(carenew_next(&s, T0 + 30), CARENEW_NONE);
	/* A host that slept through both: drop first, then renew, one step at a time. */
	s.prev_not_after = T0 + 35;
	assert_int_equal(carenew_next(&s, T0 + 1000), CARENEW_DROP_PREV);
	s.prev_not_after = 0;
	assert_int_equal(carenew_next(&s, T0 + 1000), CARENEW_RENEW);
}

static void
test_retry_after_failure(void **state)
{
	struct carenew_sched s = {
	    .cur_not_after = T0 + 30, .renew_before = 10, .retry_at = T0 + 20 + CARENEW_RETRY_SECS};

	(void)state;
	assert_int_equal(carenew_next(&s, T0 + 20), CARENEW_NONE);
	assert_int_equal(carenew_next(&s, T0 + 20 + CARENEW_RETRY_SECS - 1), CARENEW_NONE);
	assert_int_equal(carenew_next(&s, T0 + 20 + CARENEW_RETRY_SECS), CARENEW_RENEW);
	/* A retry time never holds back dropping an expired previous CA. */
	s.prev_not_after = T0 + 21;
	assert_int_equal(carenew_next(&s, T0 + 22), CARENEW_DROP_PREV);
}

static void
test_settings(void **state)
{
	unsigned lt = 1, rb = 1;
	char err[256];

	(void)state;
	assert_int_equal(carenew_settings(0, 0, &lt, &rb, err, sizeof(err)), 0);
	assert_int_equal(lt, CA_DEFAULT_VALIDITY_SECS);
	assert_int_equal(rb, CARENEW_DEFAULT_RENEW_BEFORE_SECS);
	/* A short lifetime's default overlap is half of it. */
	assert_int_equal(carenew_settings(30, 0, &lt, &rb, err, sizeof(err)), 0);
	assert_int_equal(lt, 30);
	assert_int_equal(rb, 15);
	assert_int_equal(carenew_settings(20, 10, &lt, &rb, err, sizeof(err)), 0);
	assert_int_equal(rb, 10);
	assert_int_equal(carenew_settings(CA_MIN_VALIDITY_SECS, CARENEW_MIN_RENEW_BEFORE_SECS, &lt,
	                     &rb, err, sizeof(err)),
	    0);
	assert_int_equal(
	    carenew_settings(CA_MAX_VALIDITY_SECS, 86400, &lt, &rb, err, sizeof(err)), 0);
	/* Refused, and what was there stays. */
	lt = rb = 7;
	assert_int_equal(
	    carenew_settings(CA_MIN_VALIDITY_SECS - 1, 5, &lt, &rb, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "ca-lifetime"));
	assert_int_equal(
	    carenew_settings((unsigned)CA_MAX_VALIDITY_SECS + 1, 5, &lt, &rb, err, sizeof(err)),
	    -1);
	assert_int_equal(carenew_settings(30, 16, &lt, &rb, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "ca-renew-before"));
	assert_int_equal(
	    carenew_settings(30, CARENEW_MIN_RENEW_BEFORE_SECS - 1, &lt, &rb, err, sizeof(err)),
	    -1);
	assert_int_equal(carenew_settings(0, 7 * 86400, &lt, &rb, err, sizeof(err)), -1);
	assert_int_equal(lt, 7);
	assert_int_equal(rb, 7);
}

static void
test_operator_warning(void **state)
{
	time_t end = T0 + 30 * 86400;

	(void)state;
	assert_int_equal(carenew_operator_state(end, T0), CARENEW_OP_OK);
	assert_int_equal(
	    carenew_operator_state(end, end - CARENEW_OPERATOR_WARN_SECS - 1), CARENEW_OP_OK);
	assert_int_equal(
	    carenew_operator_state(end, end - CARENEW_OPERATOR_WARN_SECS), CARENEW_OP_SOON);
	assert_int_equal(carenew_operator_state(end, end - 1), CARENEW_OP_SOON);
	assert_int_equal(carenew_operator_state(end, end), CARENEW_OP_EXPIRED);
	/* At start (nothing logged yet): a CA within the week is warned about at once. */
	assert_false(carenew_operator_warn(CARENEW_OP_OK, CARENEW_OP_OK));
	assert_true(carenew_operator_warn(CARENEW_OP_OK, CARENEW_OP_SOON));
	assert_true(carenew_operator_warn(CARENEW_OP_OK, CARENEW_OP_EXPIRED));
	/* Once per state: not again every tick, but again when it expires. */
	assert_false(carenew_operator_warn(CARENEW_OP_SOON, CARENEW_OP_SOON));
	assert_true(carenew_operator_warn(CARENEW_OP_SOON, CARENEW_OP_EXPIRED));
	assert_false(carenew_operator_warn(CARENEW_OP_EXPIRED, CARENEW_OP_EXPIRED));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_renew_at_the_overlap),
	    cmocka_unit_test(test_previous_goes_at_its_end),
	    cmocka_unit_test(test_at_most_two),
	    cmocka_unit_test(test_retry_after_failure),
	    cmocka_unit_test(test_settings),
	    cmocka_unit_test(test_operator_warning),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
