/*
 * The worker's side of a policy change, without root, against the fake
 * parent of tests/lib: the effective policy goes out as a policy_wire
 * document in CHAN_POLICY chunks (a large one in many), the parent decodes
 * it, and only its answer swaps the worker's policy and forgets the
 * learned entries of names no longer allowed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/event.h>
#include <sys/socket.h>

#include "egressd/child/wstate.h"
#include "egressd/common/chan.h"
#include "egressd/common/config.h"
#include "egressd/common/learnmap.h"
#include "fakeparent.h"
#include "policy/policy.h"

struct done {
	int calls, err;
};

static void
applied_cb(int err, const char *msg, void *arg)
{
	struct done *d = arg;

	d->calls++;
	d->err = err;
}

static struct policy *
big_policy(size_t n, const char *extra)
{
	size_t cap = n * 64 + 256, off = 0;
	char *buf = malloc(cap);
	struct policy_err err;
	struct policy *p;

	assert_non_null(buf);
	off += (size_t)snprintf(buf + off, cap - off, "{\"defaultAction\":\"deny\",\"egress\":[");
	for (size_t i = 0; i < n; i++)
		off += (size_t)snprintf(buf + off, cap - off,
		    "%s{\"action\":\"allow\",\"target\":\"h%zu.example.com\",\"ports\":[443]}",
		    i ? "," : "", i);
	off += (size_t)snprintf(buf + off, cap - off, "%s]}", extra);
	p = policy_from_json(buf, off, NULL, &err);
	free(buf);
	assert_non_null(p);
	return p;
}

static void
test_chunked_apply(void **state)
{
	struct event_base *base = event_base_new();
	struct fakeparent f;
	struct config cfg;
	struct wstate *ws;
	struct done d = {0};
	struct timespec now;

	(void)state;
	assert_non_null(base);
	assert_int_equal(fakeparent_init(&f, base), 0);
	config_defaults(&cfg);
	ws = wstate_new(&cfg, CHAN_ROLE_CONTROL, base, f.wc, NULL);
	assert_non_null(ws);
	wstate_set_policy(ws, policy_new_deny_all());
	assert_non_null(wstate_learned(ws));
	clock_gettime(CLOCK_MONOTONIC, &now);
	{
		uint8_t a[16] = {192, 0, 2, 10};

		assert_int_equal(learnmap_add(wstate_learned(ws), "h1.example.com", AF_INET, a, 443,
		                     now.tv_sec + 60),
		    0);
		assert_int_equal(learnmap_add(wstate_learned(ws), "gone.example.com", AF_INET, a,
		                     443, now.tv_sec + 60),
		    0);
	}
	/*
	 * 600 rules: about 40 KiB of policy_wire, several chunks (the fake
	 * parent shares our thread: the channel buffer must hold them all).
	 */
	wstate_apply(ws, big_policy(600, ""), applied_cb, &d);
	assert_int_equal(d.calls, 0); /* nothing swaps before the parent answers */
	assert_int_equal(policy_rule_count(wstate_policy(ws), POLICY_ORIGIN_USER), 0);
	for (int i = 0; i < 400 && d.calls == 0; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.err, 0);
	assert_int_equal(f.invalid, 0);
	assert_int_equal(f.policies, 1);
	assert_int_equal(wstate_revision(ws), 1);
	assert_int_equal(policy_rule_count(wstate_policy(ws), POLICY_ORIGIN_USER), 600);
	/* The learned entry of a name the new policy does not allow is gone. */
	assert_int_equal(learnmap_count(wstate_learned(ws)), 1);
	wstate_free(ws);
	fakeparent_fini(&f);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_chunked_apply),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
