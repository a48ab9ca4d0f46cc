/*
 * A child's side of the sandbox CA's renewal, without root, against the
 * fake parent of tests/lib: control takes the CA certificates the parent
 * pushes (CHAN_CA) and serves them as the bundle of GET /ca.pem, refuses
 * a certificate that is no CA with the previous bundle in force, and
 * takes no other push; the intercept's service is told, and when it
 * cannot take the new CA the previous one stays in force there.
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

#include "certs/ca.h"
#include "egressd/child/wstate.h"
#include "egressd/common/chan.h"
#include "egressd/common/config.h"
#include "fakeparent.h"

/* Run the loop until the fake parent has seen `acks` acknowledgements (bounded). */
static void
until_acks(struct event_base *base, struct fakeparent *f, unsigned acks)
{
	for (int i = 0; i < 400 && f->acks < acks; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(f->acks, acks);
}

/* The parent pushes cur (and prev, NULL: none) under id. */
static void
push_ca(struct fakeparent *f, uint32_t id, const struct ca *cur, const struct ca *prev)
{
	struct chan_ca *m = calloc(1, sizeof(*m));
	int n;

	assert_non_null(m);
	m->hdr.type = CHAN_CA;
	m->hdr.id = CHAN_ID_PARENT | id;
	n = ca_der(cur, m->cur, sizeof(m->cur));
	assert_true(n > 0);
	m->cur_len = (uint32_t)n;
	if (prev != NULL) {
		n = ca_der(prev, m->prev, sizeof(m->prev));
		assert_true(n > 0);
		m->prev_len = (uint32_t)n;
	}
	assert_int_equal(chan_send(f->pfd, m, -1), 0);
	free(m);
}

/* The bundle is exactly these PEMs, in order. */
static void
bundle_is(struct wstate *ws, const struct ca *a, const struct ca *b)
{
	size_t n = 0, la = 0, lb = 0;
	const char *got = wstate_ca_bundle(ws, &n);
	const char *pa = ca_pem_view(a, &la), *pb = b != NULL ? ca_pem_view(b, &lb) : "";

	assert_non_null(got);
	assert_int_equal(n, la + lb);
	assert_memory_equal(got, pa, la);
	assert_memory_equal(got + la, pb, lb);
}

static void
test_control_takes_the_ca(void **state)
{
	struct event_base *base = event_base_new();
	struct fakeparent f;
	struct config cfg;
	struct wstate *ws;
	struct ca *a, *b;
	char err[CA_ERR_LEN];

	(void)state;
	assert_non_null(base);
	assert_int_equal(fakeparent_init(&f, base), 0);
	config_defaults(&cfg);
	cfg.intercept = true;
	snprintf(cfg.always_dir, sizeof(cfg.always_dir), "/nonexistent-egressd-test");
	assert_non_null(a = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(b = ca_generate(NULL, err, sizeof(err)));
	cfg.ca = a;
	ws = wstate_new(&cfg, CHAN_ROLE_CONTROL, base, f.wc, NULL);
	assert_non_null(ws);
	assert_int_equal(wstate_start(ws), 0);
	bundle_is(ws, a, NULL);
	assert_ptr_equal(wstate_ca(ws), a);

	/* The renewal: the new CA signs, the old one is still trusted. */
	push_ca(&f, 5, b, a);
	until_acks(base, &f, 1);
	assert_int_equal(f.ack_id, CHAN_ID_PARENT | 5);
	assert_int_equal(f.ack_err, 0);
	bundle_is(ws, b, a);
	assert_int_equal(X509_cmp(ca_cert(wstate_ca(ws)), ca_cert(b)), 0);
	assert_false(ca_can_sign(wstate_ca(ws)));

	/* A certificate that is no CA (a DER of the wrong thing): refused, the bundle stays. */
	{
		struct chan_ca *m = calloc(1, sizeof(*m));

		assert_non_null(m);
		m->hdr.type = CHAN_CA;
		m->hdr.id = CHAN_ID_PARENT | 6;
		m->cur_len = 4;
		memcpy(m->cur, "\x30\x02\x05\x00", 4);
		assert_int_equal(chan_send(f.pfd, m, -1), 0);
		free(m);
	}
	until_acks(base, &f, 2);
	assert_int_equal(f.ack_err, EINVAL);
	bundle_is(ws, b, a);

	/* The old one expired: the new one alone. */
	push_ca(&f, 7, b, NULL);
	until_acks(base, &f, 3);
	assert_int_equal(f.ack_err, 0);
	bundle_is(ws, b, NULL);
	assert_int_equal(wstate_exit_code(ws), 0);
	assert_int_equal(f.invalid, 0);

	/* Control takes no other push (as before the CA): it stops. */
	{
		struct chan_learn l;

		memset(&l, 0, sizeof(l));
		l.hdr.type = CHAN_LEARN;
		l.hdr.id = CHAN_ID_PARENT | 8;
		l.family = AF_INET;
		l.timeout_s = 60;
		snprintf(l.name, sizeof(l.name), "api.example.com");
		assert_int_equal(chan_send(f.pfd, &l, -1), 0);
	}
	for (int i = 0; i < 400 && wstate_exit_code(ws) == 0; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(wstate_exit_code(ws), 71);
	assert_int_equal(f.acks, 3);
	wstate_free(ws);
	fakeparent_fini(&f);
	event_base_free(base);
	ca_free(a);
	ca_free(b);
}

/* A stand-in intercept service: counts the calls, fails while told to. */
struct fakesvc {
	int calls, fail;
	const struct ca *seen;
	struct wstate *ws;
};

static struct fakesvc svc;

static void *
fakesvc_start(struct wstate *ws, char *err, size_t errlen)
{
	svc.ws = ws;
	return &svc;
}

static int
fakesvc_ca(void *arg)
{
	struct fakesvc *s = arg;

	s->calls++;
	s->seen = wstate_ca(s->ws);
	return s->fail ? -1 : 0;
}

static void
test_intercept_told(void **state)
{
	static const struct wstate_service ops = {.start = fakesvc_start, .ca_changed = fakesvc_ca};
	struct event_base *base = event_base_new();
	struct fakeparent f;
	struct config cfg;
	struct wstate *ws;
	struct ca *a, *b;
	char err[CA_ERR_LEN];

	(void)state;
	memset(&svc, 0, sizeof(svc));
	assert_non_null(base);
	assert_int_equal(fakeparent_init(&f, base), 0);
	config_defaults(&cfg);
	cfg.intercept = true;
	assert_non_null(a = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(b = ca_generate(NULL, err, sizeof(err)));
	cfg.ca = a;
	ws = wstate_new(&cfg, CHAN_ROLE_INTERCEPT, base, f.wc, &ops);
	assert_non_null(ws);
	assert_int_equal(wstate_start(ws), 0);
	assert_ptr_equal(wstate_ca(ws), a);

	/* The service cannot take it: the old CA stays in force here, the parent is told. */
	svc.fail = 1;
	push_ca(&f, 5, b, a);
	until_acks(base, &f, 1);
	assert_int_equal(f.ack_err, ENOMEM);
	assert_int_equal(svc.calls, 1);
	assert_ptr_equal(wstate_ca(ws), a);
	bundle_is(ws, a, NULL);
	/* It can: the service issues from the new CA, which the state holds. */
	svc.fail = 0;
	push_ca(&f, 6, b, a);
	until_acks(base, &f, 2);
	assert_int_equal(f.ack_err, 0);
	assert_int_equal(svc.calls, 2);
	assert_ptr_equal(svc.seen, wstate_ca(ws));
	assert_int_equal(X509_cmp(ca_cert(wstate_ca(ws)), ca_cert(b)), 0);
	wstate_free(ws);
	fakeparent_fini(&f);
	event_base_free(base);
	ca_free(a);
	ca_free(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_control_takes_the_ca),
	    cmocka_unit_test(test_intercept_told),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
