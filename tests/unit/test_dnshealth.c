/*
 * Unit tests of egressd/dns/dnshealth.c: upstream's fallbacks for the
 * timeout, probe and interval settings, and the healthy order (ejection
 * by a silent exchange or probe, return by a probe only, all upstreams
 * when none is healthy).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "egressd/dns/dnshealth.h"

static void
test_timeout(void **state)
{
	struct dnshealth_settings s;
	enum dnshealth_parse st[3];

	(void)state;
	dnshealth_settings(NULL, NULL, NULL, &s, st);
	assert_int_equal(s.timeout_s, 5);
	assert_int_equal(s.probe_timeout_s, 2);
	assert_int_equal(st[0], DNSHEALTH_DEFAULT);
	dnshealth_settings("1", "", "", &s, st);
	assert_int_equal(s.timeout_s, 1);
	assert_int_equal(s.probe_timeout_s, 1);
	assert_int_equal(st[0], DNSHEALTH_SET);
	dnshealth_settings("120", NULL, NULL, &s, st);
	assert_int_equal(s.timeout_s, 120);
	assert_int_equal(s.probe_timeout_s, 2);
	dnshealth_settings("121", NULL, NULL, &s, st);
	assert_int_equal(s.timeout_s, 120);
	assert_int_equal(st[0], DNSHEALTH_CLAMPED);
	/* <= 0 and not a whole number: the default. */
	const char *bad[] = {"0", "-3", "abc", "1.5", " 2", "2s", "99999999999999999999999"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		dnshealth_settings(bad[i], NULL, NULL, &s, st);
		assert_int_equal(s.timeout_s, 5);
		assert_int_equal(st[0], DNSHEALTH_INVALID);
	}
}

static void
test_interval(void **state)
{
	struct dnshealth_settings s;
	enum dnshealth_parse st[3];

	(void)state;
	dnshealth_settings(NULL, NULL, "", &s, st);
	assert_int_equal(s.interval_s, 30);
	assert_int_equal(st[2], DNSHEALTH_DEFAULT);
	dnshealth_settings(NULL, NULL, "5", &s, st);
	assert_int_equal(s.interval_s, 5);
	assert_int_equal(st[2], DNSHEALTH_SET);
	dnshealth_settings(NULL, NULL, "1", &s, st);
	assert_int_equal(s.interval_s, 1);
	dnshealth_settings(NULL, NULL, "3600", &s, st);
	assert_int_equal(s.interval_s, 3600);
	const char *bad[] = {"0", "3601", "-1", "x", "5m"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		dnshealth_settings(NULL, NULL, bad[i], &s, st);
		assert_int_equal(s.interval_s, 30);
		assert_int_equal(st[2], DNSHEALTH_INVALID);
	}
}

static void
test_probe(void **state)
{
	struct dnshealth_settings s;
	enum dnshealth_parse st[3];
	char longlab[80], longname[300];

	(void)state;
	dnshealth_settings(NULL, ".", NULL, &s, st);
	assert_string_equal(s.probe, "");
	assert_int_equal(st[1], DNSHEALTH_DEFAULT);
	dnshealth_settings(NULL, "Intranet.Corp", NULL, &s, st);
	assert_string_equal(s.probe, "intranet.corp");
	assert_int_equal(st[1], DNSHEALTH_SET);
	dnshealth_settings(NULL, "intranet.corp.", NULL, &s, st);
	assert_string_equal(s.probe, "intranet.corp");
	memset(longlab, 'a', 64);
	longlab[64] = '\0';
	memset(longname, 'a', 260);
	for (size_t i = 10; i < 260; i += 10)
		longname[i] = '.';
	longname[260] = '\0';
	const char *bad[] = {"a..b", ".a", "a b", "a/b", "..", longlab, longname, "x\"y"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		dnshealth_settings(NULL, bad[i], NULL, &s, st);
		assert_string_equal(s.probe, "");
		assert_int_equal(st[1], DNSHEALTH_INVALID);
	}
}

static void
test_order(void **state)
{
	struct dnshealth h;
	size_t out[DNSHEALTH_MAX], n;
	bool down;

	(void)state;
	dnshealth_init(&h, 3);
	n = dnshealth_order(&h, out, &down);
	assert_int_equal(n, 3);
	assert_false(down);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[2], 2);
	/* A silent exchange ejects the first: queries start at the second. */
	assert_true(dnshealth_exchange(&h, 0, false));
	assert_false(dnshealth_exchange(&h, 0, false));
	n = dnshealth_order(&h, out, &down);
	assert_int_equal(n, 2);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 2);
	/* An answer to a query does not bring it back, a probe does. */
	assert_false(dnshealth_exchange(&h, 0, true));
	assert_false(dnshealth_healthy(&h, 0));
	assert_true(dnshealth_probe(&h, 0, true));
	assert_true(dnshealth_healthy(&h, 0));
	n = dnshealth_order(&h, out, &down);
	assert_int_equal(n, 3);
	assert_int_equal(out[0], 0);
	/* A failed probe ejects; an answered one of a healthy upstream changes nothing. */
	assert_true(dnshealth_probe(&h, 1, false));
	assert_false(dnshealth_probe(&h, 2, true));
	n = dnshealth_order(&h, out, &down);
	assert_int_equal(n, 2);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[1], 2);
	/* None healthy: all of them, in configured order, flagged. */
	assert_true(dnshealth_probe(&h, 0, false));
	assert_true(dnshealth_probe(&h, 2, false));
	n = dnshealth_order(&h, out, &down);
	assert_int_equal(n, 3);
	assert_true(down);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[1], 1);
	assert_int_equal(out[2], 2);
	assert_int_equal(h.fails[2], 1);
	/* Out of range indexes are ignored. */
	assert_false(dnshealth_probe(&h, 7, true));
	assert_false(dnshealth_healthy(&h, 7));
	dnshealth_init(&h, 20);
	assert_int_equal(h.n, DNSHEALTH_MAX);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_timeout),
	    cmocka_unit_test(test_interval),
	    cmocka_unit_test(test_probe),
	    cmocka_unit_test(test_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
