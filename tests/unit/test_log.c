/* Unit tests of log escaping and line building: network values cannot
 * forge fields, break the line, or grow it without bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>
#include <regex.h>

#include "egressd/common/log.h"

static void
test_escape_specials(void **state)
{
	char out[256];
	size_t n;

	n = log_escape(out, sizeof(out), "a\"b\\c\nd\re\tf", 11, 256);
	assert_string_equal(out, "a\\\"b\\\\c\\u000ad\\u000de\\u0009f");
	assert_int_equal(n, strlen(out));
	/* NUL and 8-bit bytes become \u00XX: the output is ASCII. */
	n = log_escape(out, sizeof(out), "x\0y\xff\x80", 5, 256);
	assert_string_equal(out, "x\\u0000y\\u00ff\\u0080");
	assert_int_equal(n, strlen(out));
	n = log_escape(out, sizeof(out), "\x7f", 1, 256);
	assert_string_equal(out, "\\u007f");
}

static void
test_escape_caps_length(void **state)
{
	char in[1000], out[2048];

	memset(in, 'a', sizeof(in));
	log_escape(out, sizeof(out), in, sizeof(in), 10);
	assert_string_equal(out, "aaaaaaaaaa...");
	/* A small output buffer is never overrun and says it was cut. */
	log_escape(out, 8, in, sizeof(in), 1000);
	assert_true(strlen(out) < 8);
	assert_non_null(strstr(out, "..."));
	/* Escapes are never split: 6-byte \u sequences fit whole or not at all. */
	memset(in, '\n', sizeof(in));
	log_escape(out, 20, in, sizeof(in), 1000);
	assert_int_equal((strlen(out) - 3) % 6, 0);
}

static char *
capture_line(void (*emit)(void))
{
	int p[2];
	static char buf[LOG_MAX_LINE * 2];
	ssize_t n;

	assert_int_equal(pipe(p), 0);
	log_init("test", LOG_DEBUG, p[1]);
	emit();
	close(p[1]);
	n = read(p[0], buf, sizeof(buf) - 1);
	close(p[0]);
	assert_true(n > 0);
	buf[n] = '\0';
	log_init("test", LOG_INFO, 2);
	return buf;
}

static void
emit_forgery(void)
{
	struct log_line l;

	log_begin(&l, LOG_INFO, "dns", "dns_deny");
	log_str(&l, "name", "evil\",\"event\":\"dns_allow\"}\n{\"x\":\"");
	log_int(&l, "n", -5);
	log_bool(&l, "b", true);
	log_end(&l);
}

static void
test_line_cannot_be_forged(void **state)
{
	char *s = capture_line(emit_forgery);

	/* One line only, and the injected quote is escaped. */
	assert_non_null(strchr(s, '\n'));
	assert_int_equal(strchr(s, '\n') - s, (long)strlen(s) - 1);
	assert_non_null(strstr(s, "\"event\":\"dns_deny\""));
	assert_null(strstr(s, "\"event\":\"dns_allow\""));
	assert_non_null(strstr(s, "evil\\\",\\\"event"));
	assert_non_null(strstr(s, "\"n\":-5"));
	assert_non_null(strstr(s, "\"b\":true"));
	assert_non_null(strstr(s, "\"proc\":\"test\""));
}

static void
emit_huge(void)
{
	struct log_line l;
	char v[600];

	memset(v, 'z', sizeof(v));
	v[sizeof(v) - 1] = '\0';
	log_begin(&l, LOG_INFO, "api", "big");
	for (int i = 0; i < 40; i++)
		log_str(&l, "v", v);
	log_end(&l);
}

static void
test_line_is_bounded(void **state)
{
	char *s = capture_line(emit_huge);

	assert_true(strlen(s) <= LOG_MAX_LINE);
	assert_non_null(strstr(s, "\"cut\":true}\n"));
	/* Each value was capped at LOG_MAX_VALUE bytes plus "...". */
	assert_non_null(strstr(s, "zzz...\""));
}

static void
emit_debug(void)
{
	struct log_line l;

	log_set_level(LOG_WARN);
	log_begin(&l, LOG_INFO, "x", "hidden");
	log_end(&l);
	log_begin(&l, LOG_ERROR, "x", "shown");
	log_end(&l);
}

static void
test_levels_filter(void **state)
{
	char *s = capture_line(emit_debug);
	enum log_level lv;

	assert_null(strstr(s, "hidden"));
	assert_non_null(strstr(s, "\"level\":\"error\""));
	assert_true(log_parse_level("WARNING", &lv));
	assert_int_equal(lv, LOG_WARN);
	assert_false(log_parse_level("loud", &lv));
}

static int kicks;

static void
count_kick(void *arg)
{
	(void)arg;
	kicks++;
}

/* Every byte now in the pipe (non-blocking): -1 when there is none. */
static ssize_t
drain(int fd, char *buf, size_t cap)
{
	ssize_t n, got = 0;

	while ((size_t)got < cap - 1 && (n = read(fd, buf + got, cap - 1 - (size_t)got)) > 0)
		got += n;
	buf[got] = '\0';
	return got > 0 ? got : -1;
}

/* Whether the line of event `first` comes before the line of event `then` in buf. */
static bool
in_order(const char *buf, const char *first, const char *then)
{
	char a[64], b[64];
	const char *x, *y;

	snprintf(a, sizeof(a), "\"event\":\"%s\"", first);
	snprintf(b, sizeof(b), "\"event\":\"%s\"", then);
	x = strstr(buf, a);
	y = strstr(buf, b);
	return x != NULL && y != NULL && x < y;
}

/* Lines of event `name` in buf. */
static int
count_event(const char *buf, const char *name)
{
	char key[64];
	const char *p = buf;
	int n = 0;

	snprintf(key, sizeof(key), "\"event\":\"%s\"", name);
	while ((p = strstr(p, key)) != NULL) {
		n++;
		p++;
	}
	return n;
}

/*
 * Deferred lines: kept in order until log_flush (one kick per flush), a
 * warning writes them first and then itself, a full buffer writes whole
 * lines only, and a forked child does not inherit the deferral.
 */
static void
test_deferred_lines(void **state)
{
	static char buf[PIPE_BUF * 8];
	char big[300];
	int p[2], st, i, lines;
	pid_t pid;
	ssize_t n;

	(void)state;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
	log_init("test", LOG_DEBUG, p[1]);
	kicks = 0;
	log_defer(count_kick, NULL);
	log_msg(LOG_INFO, "t", "one", "a");
	log_msg(LOG_DEBUG, "t", "two", "b");
	assert_int_equal(kicks, 1);
	assert_int_equal(drain(p[0], buf, sizeof(buf)), -1); /* nothing written yet */
	log_flush();
	assert_true(drain(p[0], buf, sizeof(buf)) > 0);
	assert_true(in_order(buf, "one", "two"));

	/* A warning: the deferred line first, then the warning, at once. */
	log_msg(LOG_INFO, "t", "three", "c");
	assert_int_equal(kicks, 2);
	log_msg(LOG_WARN, "t", "alarm", "w");
	assert_true(drain(p[0], buf, sizeof(buf)) > 0);
	assert_true(in_order(buf, "three", "alarm"));
	log_flush();
	assert_int_equal(drain(p[0], buf, sizeof(buf)), -1); /* nothing left over */

	/* More than the buffer holds: written as it fills, every line whole, none lost. */
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	for (i = 0; i < 40; i++)
		log_msg(LOG_INFO, "t", "fill", "%s", big);
	n = drain(p[0], buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(buf[n - 1], '\n'); /* whole lines only */
	lines = count_event(buf, "fill");
	assert_true(lines > 0 && lines < 40); /* the rest still waits */
	log_flush();
	assert_true(drain(p[0], buf + n, sizeof(buf) - (size_t)n) > 0);
	assert_int_equal(count_event(buf, "fill"), 40);

	/* A forked child writes at once: the parent's loop would never flush it. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		log_msg(LOG_INFO, "t", "child", "c");
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(drain(p[0], buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "\"event\":\"child\""));
	log_defer(NULL, NULL);
	close(p[0]);
	close(p[1]);
	log_init("test", LOG_INFO, 2);
}

/* The line s (one, with its newline) as a JSON object; fails the test otherwise. */
static json_t *
line_json(const char *s)
{
	json_error_t err;
	json_t *j;

	assert_non_null(strchr(s, '\n'));
	assert_int_equal(strchr(s, '\n') - s, (long)strlen(s) - 1);
	j = json_loads(s, JSON_ALLOW_NUL, &err);
	if (j == NULL)
		fail_msg("not JSON (%s): %s", err.text, s);
	assert_true(json_is_object(j));
	return j;
}

static void
emit_fields(void)
{
	struct log_line l;

	log_begin(&l, LOG_WARN, "vault", "inject");
	log_uint(&l, "zero", 0);
	log_int(&l, "imin", LLONG_MIN);
	log_int(&l, "imax", LLONG_MAX);
	log_int(&l, "neg", -1);
	log_bool(&l, "f", false);
	log_str(&l, "nul", NULL);
	log_strn(&l, "bin", "a\0\"\\\x01\xe9z", 7);
	log_str(&l, "k\"ey", "v");
	log_end(&l);
}

static void
emit_umax(void)
{
	struct log_line l;

	log_begin(&l, LOG_INFO, "vault", "umax");
	log_uint(&l, "umax", ULLONG_MAX);
	log_end(&l);
}

/* Every kind of field, built without printf, reads back exactly. */
static void
test_fields_read_back(void **state)
{
	static const char bin[] = "a\0\"\\\x01\xc3\xa9z"; /* \xe9 read back as U+00E9 */
	char *s = capture_line(emit_fields);
	json_t *j = line_json(s);
	regex_t re;

	(void)state;
	assert_int_equal(
	    regcomp(&re,
	        "^\\{\"ts\":\"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
	        "\\.[0-9]{3}Z\",\"level\":\"warn\",\"proc\":\"test\",\"pid\":[1-9][0-9]*,"
	        "\"module\":\"vault\",\"event\":\"inject\",",
	        REG_EXTENDED | REG_NOSUB),
	    0);
	assert_int_equal(regexec(&re, s, 0, NULL, 0), 0);
	regfree(&re);
	assert_int_equal(json_integer_value(json_object_get(j, "pid")), (json_int_t)getpid());
	assert_non_null(strstr(s, "\"zero\":0,"));
	assert_true(json_integer_value(json_object_get(j, "imin")) == LLONG_MIN);
	assert_true(json_integer_value(json_object_get(j, "imax")) == LLONG_MAX);
	assert_int_equal(json_integer_value(json_object_get(j, "neg")), -1);
	assert_true(json_is_false(json_object_get(j, "f")));
	assert_true(json_is_null(json_object_get(j, "nul")));
	assert_int_equal(json_string_length(json_object_get(j, "bin")), sizeof(bin) - 1);
	assert_memory_equal(json_string_value(json_object_get(j, "bin")), bin, sizeof(bin) - 1);
	assert_string_equal(json_string_value(json_object_get(j, "k\"ey")), "v");
	json_decref(j);
	/* Past what jansson reads: as text. */
	assert_non_null(strstr(capture_line(emit_umax), ",\"umax\":18446744073709551615}\n"));
}

/*
 * A line cut for length is still one JSON object: fields go in whole or
 * not at all, whatever the length of the one that did not fit (the cut
 * falls at every offset of a field across these lengths).
 */
static int cut_pad;

static void
emit_cut(void)
{
	struct log_line l;
	char v[LOG_MAX_VALUE + 1];

	memset(v, '"', sizeof(v) - 1); /* escaped: 2 bytes each */
	v[sizeof(v) - 1] = '\0';
	log_begin(&l, LOG_INFO, "api", "cut");
	log_strn(&l, "pad", v, (size_t)cut_pad);
	for (int i = 0; i < 20; i++) {
		log_str(&l, "v", v);
		log_uint(&l, "n", 123456789);
	}
	log_end(&l);
}

static void
test_cut_line_is_json(void **state)
{
	(void)state;
	for (cut_pad = 0; cut_pad <= 120; cut_pad++) {
		char *s = capture_line(emit_cut);
		json_t *j = line_json(s);

		assert_true(strlen(s) <= LOG_MAX_LINE);
		assert_true(json_is_true(json_object_get(j, "cut")));
		assert_non_null(strstr(s, ",\"cut\":true}\n"));
		json_decref(j);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_escape_specials),
	    cmocka_unit_test(test_escape_caps_length),
	    cmocka_unit_test(test_line_cannot_be_forged),
	    cmocka_unit_test(test_line_is_bounded),
	    cmocka_unit_test(test_levels_filter),
	    cmocka_unit_test(test_deferred_lines),
	    cmocka_unit_test(test_fields_read_back),
	    cmocka_unit_test(test_cut_line_is_json),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
