/*
 * The relay harness (tests only); see relayharness.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "icptfix.h"
#include "relayharness.h"
#include "vault/icpt_internal.h"
#include "vault/intercept.h"
#include "vault/snap.h"

/* A harness that cannot set itself up fails the test at once. */
#define RELAY_CHECK(x)                                                                             \
	do {                                                                                       \
		if (!(x)) {                                                                        \
			fprintf(stderr, "relayharness: %s:%d: %s\n", __FILE__, __LINE__, #x);      \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* The worker's marked socket: a plain one, delivered on a later loop turn. */
static int
f_get_socket(void *arg, int family, intercept_socket_cb cb, void *cbarg)
{
	return icptfix_socket(((struct relay *)arg)->base, family, cb, cbarg);
}

static struct vault_snap *
f_snapshot(void *arg)
{
	struct relay *h = arg;

	return vault_snap_ref(h->snap);
}

static void
f_count(void *arg, enum intercept_metric m, uint64_t n)
{
	(void)arg, (void)m, (void)n;
}

static void
f_log(void *arg, const struct intercept_event *ev)
{
	struct relay *h = arg;
	size_t n = strlen(h->log);

	snprintf(h->log + n, sizeof(h->log) - n, "%s:%s ", ev->event,
	    ev->reason != NULL ? ev->reason : "-");
}

static const struct intercept_ops f_ops = {
    .sni_allowed = icptfix_sni_allowed,
    .dst_ok = icptfix_dst_ok,
    .get_upstream_socket = f_get_socket,
    .snapshot = f_snapshot,
    .count = f_count,
    .log = f_log,
};

/* A plain workload connection to 203.0.113.10:80, built as icpt_accept_cb does; see relayharness.h. */
struct relay *
relay_new(struct vault_snap *snap)
{
	struct relay *h = calloc(1, sizeof(*h));
	struct intercept *ic;
	struct icpt_conn *c = calloc(1, sizeof(*c));
	socklen_t len = sizeof(h->up);
	int sv[2];

	RELAY_CHECK(h != NULL);
	RELAY_CHECK(c != NULL);
	h->base = event_base_new();
	RELAY_CHECK(h->base != NULL);
	h->snap = snap;
	h->ufd = -1;
	h->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	RELAY_CHECK(h->lfd >= 0);
	h->up.sin_family = AF_INET;
	h->up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	RELAY_CHECK((bind(h->lfd, (struct sockaddr *)&h->up, sizeof(h->up))) == (0));
	RELAY_CHECK((listen(h->lfd, 4)) == (0));
	RELAY_CHECK((getsockname(h->lfd, (struct sockaddr *)&h->up, &len)) == (0));

	ic = icptfix_intercept(h->base, &f_ops, h, NULL);
	h->ic = ic;

	RELAY_CHECK(
	    (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv)) == (0));
	h->w = sv[1];
	c->ic = ic;
	c->host = icpt_nohost;
	c->id = ++ic->next_id;
	c->tls = false;
	c->state = ICPT_S_HELLO;
	c->cfd = sv[0];
	c->cl = icpt_leg_new(ic->base, sv[0], NULL, ICPT_LEG_PLAIN);
	RELAY_CHECK(c->cl != NULL);
	ic->conns = c;
	ic->nconns = 1;
	memcpy(&c->dst, &h->up, sizeof(h->up));
	c->dstlen = sizeof(h->up);
	c->family = AF_INET;
	RELAY_CHECK((inet_pton(AF_INET, "203.0.113.10", c->addr)) == (1));
	c->port = 80;
	RELAY_CHECK(icpt_set_state(c, ICPT_S_HTTP));
	icpt_http_start(c);
	return h;
}

void
relay_free(struct relay *h)
{
	intercept_free(h->ic);
	/* Deferred frees of closed connections run on this last turn. */
	event_base_loop(h->base, EVLOOP_NONBLOCK);
	vault_snap_unref(h->snap);
	close(h->w);
	close(h->lfd);
	if (h->ufd >= 0)
		close(h->ufd);
	event_base_free(h->base);
	free(h);
}

size_t
relay_count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* The upstream answers every new request head with the next scripted response. */
static void
up_serve(struct relay *h)
{
	size_t heads;

	if (h->ufd < 0) {
		int fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
			return;
		h->ufd = fd;
		h->accepts++;
	}
	for (;;) {
		ssize_t n;

		if (h->urxlen + 1 >= sizeof(h->urx))
			break;
		n = read(h->ufd, h->urx + h->urxlen, sizeof(h->urx) - 1 - h->urxlen);
		if (n <= 0)
			break;
		h->urxlen += (size_t)n;
		h->urx[h->urxlen] = '\0';
	}
	heads = relay_count(h->urx, "\r\n\r\n");
	while (h->heads < heads) {
		const char *r = h->heads < h->nscript ? h->script[h->heads] : NULL;

		h->heads++;
		if (r != NULL)
			RELAY_CHECK((write(h->ufd, r, strlen(r))) == ((ssize_t)strlen(r)));
	}
}

static void
w_read(struct relay *h)
{
	for (;;) {
		ssize_t n;

		if (h->wrxlen + 1 >= sizeof(h->wrx))
			return;
		n = read(h->w, h->wrx + h->wrxlen, sizeof(h->wrx) - 1 - h->wrxlen);
		if (n == 0)
			h->weof = true;
		if (n <= 0)
			return;
		h->wrxlen += (size_t)n;
		h->wrx[h->wrxlen] = '\0';
	}
}

/* Run the loop until the workload has received want (or EOF), at most turns times. */
bool
relay_pump_n(struct relay *h, const char *want, int turns)
{
	for (int i = 0; i < turns; i++) {
		struct pollfd p[2] = {{.fd = h->w, .events = POLLIN},
		    {.fd = h->ufd >= 0 ? h->ufd : h->lfd, .events = POLLIN}};

		event_base_loop(h->base, EVLOOP_NONBLOCK);
		up_serve(h);
		w_read(h);
		if (want != NULL && strstr(h->wrx, want) != NULL)
			return true;
		if (h->weof)
			return want == NULL;
		(void)poll(p, 2, 10);
	}
	return false;
}

bool
relay_pump(struct relay *h, const char *want)
{
	return relay_pump_n(h, want, RELAY_PUMP_TURNS);
}

void
relay_send(struct relay *h, const char *s)
{
	RELAY_CHECK((write(h->w, s, strlen(s))) == ((ssize_t)strlen(s)));
}
