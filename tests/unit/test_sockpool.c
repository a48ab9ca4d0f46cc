/*
 * Unit tests of egressd/sockpool (the interceptor's source of marked
 * upstream sockets) against the in-process fake parent of tests/lib on a
 * real seqpacket channel: callbacks run from the loop and never inside sockpool_get(),
 * the pool refills to its size per family, a parent error reaches the
 * caller, and freeing the pool with requests in flight runs no callback.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <event2/event.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egressd/common/chan.h"
#include "egressd/child/sockpool.h"
#include "egressd/child/wchan.h"
#include "fakeparent.h"

/* The fake parent of tests/lib. */
#define fake fakeparent

struct got {
	int calls;
	int fd;
	int err;
	int family;
};

static void
got_cb(int fd, int err, void *arg)
{
	struct got *g = arg;

	g->calls++;
	g->fd = fd;
	g->err = err;
}

static void
spin(struct fake *f, bool (*done)(void *), void *arg)
{
	/* Bounded number of loop turns, no clock. */
	for (int i = 0; i < 200 && !done(arg); i++)
		event_base_loop(f->base, EVLOOP_NONBLOCK);
	assert_true(done(arg));
}

static bool
called(void *arg)
{
	return ((struct got *)arg)->calls > 0;
}

static void
fake_init(struct fake *f)
{
	struct event_base *base = event_base_new();

	assert_non_null(base);
	assert_int_equal(fakeparent_init(f, base), 0);
}

static void
fake_fini(struct fake *f)
{
	struct event_base *base = f->base;

	assert_int_equal(f->invalid, 0);
	fakeparent_fini(f);
	event_base_free(base);
}

static int
sock_domain(int fd)
{
	int d = -1;
	socklen_t l = sizeof(d);

	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &d, &l), 0);
	return d;
}

struct ready_arg {
	struct sockpool *p;
	size_t want;
};

static bool
full(void *arg)
{
	struct ready_arg *r = arg;

	return sockpool_ready(r->p, AF_INET) == r->want &&
	       sockpool_ready(r->p, AF_INET6) == r->want;
}

static void
test_get_and_refill(void **state)
{
	struct fake f;
	struct sockpool *p;
	struct got g = {0};
	struct ready_arg ra;

	(void)state;
	fake_init(&f);
	p = sockpool_new(f.base, f.wc, SOCK_STREAM, 3, SOCKPOOL_V4 | SOCKPOOL_V6);
	assert_non_null(p);
	/* Nothing ready yet: the request goes to the parent. */
	assert_int_equal(sockpool_get(p, AF_INET6, got_cb, &g), 0);
	assert_int_equal(g.calls, 0);
	spin(&f, called, &g);
	assert_int_equal(g.calls, 1);
	assert_true(g.fd >= 0);
	assert_int_equal(g.err, 0);
	assert_int_equal(sock_domain(g.fd), AF_INET6);
	close(g.fd);
	ra.p = p;
	ra.want = 3;
	spin(&f, full, &ra);

	/* From the pool: still asynchronous, and refilled afterwards. */
	memset(&g, 0, sizeof(g));
	assert_int_equal(sockpool_get(p, AF_INET, got_cb, &g), 0);
	assert_int_equal(g.calls, 0);
	assert_int_equal(sockpool_ready(p, AF_INET), 2);
	spin(&f, called, &g);
	assert_int_equal(g.calls, 1);
	assert_int_equal(sock_domain(g.fd), AF_INET);
	close(g.fd);
	spin(&f, full, &ra);
	assert_int_equal(sockpool_get(p, AF_UNIX, got_cb, &g), -1);
	assert_int_equal(sockpool_get(p, AF_INET, NULL, &g), -1);
	sockpool_free(p);
	fake_fini(&f);
}

static void
test_parent_error(void **state)
{
	struct fake f;
	struct sockpool *p;
	struct got g = {0};

	(void)state;
	fake_init(&f);
	f.fail_errno = EMFILE;
	p = sockpool_new(f.base, f.wc, SOCK_STREAM, 0, SOCKPOOL_V4 | SOCKPOOL_V6);
	assert_non_null(p);
	assert_int_equal(sockpool_get(p, AF_INET, got_cb, &g), 0);
	spin(&f, called, &g);
	assert_int_equal(g.fd, -1);
	assert_int_equal(g.err, EMFILE);
	assert_int_equal(sockpool_ready(p, AF_INET), 0);
	sockpool_free(p);
	fake_fini(&f);
}

static void
test_free_pending(void **state)
{
	struct fake f;
	struct sockpool *p;
	struct got g = {0};

	(void)state;
	fake_init(&f);
	/* The parent does not answer yet. */
	assert_int_equal(event_del(f.ev), 0);
	p = sockpool_new(f.base, f.wc, SOCK_STREAM, 2, SOCKPOOL_V4 | SOCKPOOL_V6);
	assert_non_null(p);
	assert_int_equal(sockpool_get(p, AF_INET, got_cb, &g), 0);
	for (int i = 0; i < 5; i++)
		event_base_loop(f.base, EVLOOP_NONBLOCK);
	/* The requester goes away first: its callback must never run. */
	sockpool_free(p);
	assert_int_equal(event_add(f.ev, NULL), 0);
	for (int i = 0; i < 20; i++)
		event_base_loop(f.base, EVLOOP_NONBLOCK);
	assert_int_equal(g.calls, 0);
	assert_true(f.served > 0);
	fake_fini(&f);
}

static void
count_ready(void *arg)
{
	(*(int *)arg)++;
}

static bool
v4_ready(void *arg)
{
	return sockpool_ready(arg, AF_INET) > 0;
}

/* The synchronous take (c-ares): a ready socket or EAGAIN, never an unmarked one. */
static void
test_take(void **state)
{
	struct fake f;
	struct sockpool *p;
	int readies = 0, fd;

	(void)state;
	fake_init(&f);
	p = sockpool_new(f.base, f.wc, SOCK_DGRAM, 2, SOCKPOOL_V4);
	assert_non_null(p);
	sockpool_on_ready(p, count_ready, &readies);
	/* Nothing has arrived yet: EAGAIN, not a socket of our own making. */
	errno = 0;
	assert_int_equal(sockpool_take(p, AF_INET), -1);
	assert_int_equal(errno, EAGAIN);
	/* A family the pool does not keep is refused and never asked for. */
	errno = 0;
	assert_int_equal(sockpool_take(p, AF_INET6), -1);
	assert_int_equal(errno, EAFNOSUPPORT);
	spin(&f, v4_ready, p);
	assert_true(readies >= 1);
	assert_int_equal(sockpool_ready(p, AF_INET6), 0);
	fd = sockpool_take(p, AF_INET);
	assert_true(fd >= 0);
	assert_int_equal(sock_domain(fd), AF_INET);
	close(fd);
	sockpool_free(p);
	fake_fini(&f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_take),
	    cmocka_unit_test(test_get_and_refill),
	    cmocka_unit_test(test_parent_error),
	    cmocka_unit_test(test_free_pending),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
