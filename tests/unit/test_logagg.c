/*
 * Unit tests of egressd/common/logagg.c: a flood of one event writes a
 * bounded number of lines whatever the keys, and every event is
 * accounted for: full lines + summaries' suppressed counts + overflow
 * counts = events noted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "egressd/common/log.h"
#include "egressd/common/logagg.h"

#define FLOOD 2000

struct tally {
	unsigned lines, full, summaries, overflows;
	unsigned long long suppressed, overflowed;
};

/* Sum "key":N over every line of `event` in the log text. */
static unsigned long long
field_sum(const char *log, const char *event, const char *key, unsigned *lines)
{
	char ev[64], k[64];
	unsigned long long sum = 0;

	snprintf(ev, sizeof(ev), "\"event\":\"%s\"", event);
	snprintf(k, sizeof(k), "\"%s\":", key);
	*lines = 0;
	for (const char *p = log; (p = strstr(p, ev)) != NULL; p++) {
		const char *eol = strchr(p, '\n'), *f = strstr(p, k);

		(*lines)++;
		if (f != NULL && (eol == NULL || f < eol))
			sum += strtoull(f + strlen(k), NULL, 10);
	}
	return sum;
}

static void
read_tally(FILE *f, struct tally *t)
{
	static char buf[1 << 20];
	size_t n;

	fflush(f);
	rewind(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < n; i++)
		t->lines += buf[i] == '\n';
	field_sum(buf, "deny", "x", &t->full);
	t->suppressed = field_sum(buf, "deny_summary", "suppressed", &t->summaries);
	t->overflowed = field_sum(buf, "deny_overflow", "count", &t->overflows);
}

/* What a caller does: write its full line only when told to. */
static void
note(struct logagg *a, const char *key, int64_t now)
{
	if (logagg_note(a, key, now) == LOGAGG_LOG) {
		struct log_line l;
		log_begin(&l, LOG_INFO, "dns", "deny");
		log_str(&l, "name", key);
		log_end(&l);
	}
}

static FILE *
capture(void)
{
	FILE *f = tmpfile();

	assert_non_null(f);
	log_init("test", LOG_DEBUG, fileno(f));
	return f;
}

static void
test_flood_few_names(void **state)
{
	FILE *f = capture();
	struct logagg *a = logagg_new("dns", "deny", LOG_INFO, 0, 0);
	struct tally t;
	char name[64];

	assert_non_null(a);
	for (int i = 0; i < FLOOD; i++) {
		snprintf(name, sizeof(name), "n%d.evil.test", i % 10);
		note(a, name, 100);
	}
	assert_int_equal(logagg_suppressed(a), FLOOD - 10);
	logagg_flush(a, 100, true);
	read_tally(f, &t);
	assert_int_equal(t.full, 10);
	assert_int_equal(t.summaries, 10);
	assert_int_equal(t.overflows, 0);
	assert_int_equal(t.full + t.suppressed + t.overflowed, FLOOD);
	assert_int_equal(t.lines, 20);
	logagg_free(a);
	fclose(f);
}

static void
test_flood_distinct_names(void **state)
{
	FILE *f = capture();
	struct logagg *a = logagg_new("dns", "deny", LOG_INFO, 0, 0);
	struct tally t;
	char name[64];

	assert_non_null(a);
	for (int i = 0; i < FLOOD; i++) {
		snprintf(name, sizeof(name), "x%d.evil.test", i);
		note(a, name, 7);
	}
	logagg_free(a); /* writes what is pending */
	read_tally(f, &t);
	assert_int_equal(t.full, LOGAGG_MAX_KEYS);
	assert_int_equal(t.summaries, 0);
	assert_int_equal(t.overflows, 1);
	assert_int_equal(t.full + t.suppressed + t.overflowed, FLOOD);
	assert_true(t.lines <= 2 * LOGAGG_MAX_KEYS + 1);
	fclose(f);
}

static void
test_windows(void **state)
{
	FILE *f = capture();
	struct logagg *a = logagg_new("dns", "deny", LOG_INFO, 10, 4);
	struct tally t;

	assert_non_null(a);
	assert_int_equal(logagg_note(a, "a.test", 0), LOGAGG_LOG);
	assert_int_equal(logagg_note(a, "a.test", 9), LOGAGG_COUNTED);
	/* Not yet ended: nothing written. */
	logagg_flush(a, 9, false);
	read_tally(f, &t);
	assert_int_equal(t.lines, 0);
	/* The next window logs the name in full again, after the summary. */
	assert_int_equal(logagg_note(a, "a.test", 10), LOGAGG_LOG);
	read_tally(f, &t);
	assert_int_equal(t.summaries, 1);
	assert_int_equal(t.suppressed, 1);
	/* The cap is per window, and only lowered: 4 keys here. */
	for (int i = 0; i < 3; i++) {
		char k[16];
		snprintf(k, sizeof(k), "k%d", i);
		assert_int_equal(logagg_note(a, k, 11), LOGAGG_LOG);
	}
	assert_int_equal(logagg_note(a, "k9", 11), LOGAGG_OVERFLOW);
	assert_int_equal(logagg_note(a, "a.test", 11), LOGAGG_COUNTED);
	/* A window longer than the compiled one is clamped. */
	logagg_free(a);
	a = logagg_new("dns", "deny", LOG_INFO, 100000, 100000);
	assert_non_null(a);
	assert_int_equal(logagg_note(a, "b.test", 0), LOGAGG_LOG);
	assert_int_equal(logagg_note(a, "b.test", LOGAGG_WINDOW_S), LOGAGG_LOG);
	logagg_free(a);
	fclose(f);
}

static void
test_long_keys(void **state)
{
	FILE *f = capture();
	struct logagg *a = logagg_new("dns", "deny", LOG_INFO, 0, 0);
	char k1[400], k2[400];

	assert_non_null(a);
	memset(k1, 'a', sizeof(k1) - 1);
	k1[sizeof(k1) - 1] = '\0';
	memcpy(k2, k1, sizeof(k2));
	k2[10] = 'b';
	assert_int_equal(logagg_note(a, k1, 0), LOGAGG_LOG);
	assert_int_equal(logagg_note(a, k1, 0), LOGAGG_COUNTED);
	assert_int_equal(logagg_note(a, k2, 0), LOGAGG_LOG);
	/* A prefix of a stored key is another key. */
	assert_int_equal(logagg_note(a, "aaa", 0), LOGAGG_LOG);
	logagg_free(a);
	fclose(f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_flood_few_names),
	    cmocka_unit_test(test_flood_distinct_names),
	    cmocka_unit_test(test_windows),
	    cmocka_unit_test(test_long_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
