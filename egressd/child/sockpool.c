/*
 * sockpool: marked sockets for the worker (worker process). The parent
 * creates each socket with the sidecar's mark and passes it over the
 * channel; the pool keeps a few ready so that a connection does not wait
 * for a round trip. Callbacks always run from the event loop, never from
 * inside sockpool_get(). It never creates a socket itself: an unmarked
 * socket would be refused by nft anyway, and must not be used.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "egressd/common/chan.h"
#include "egressd/child/sockpool.h"
#include "egressd/child/wchan.h"
#include "egressd/common/log.h"

/* One request: a caller's (cb set) or a refill of the pool (cb NULL). */
struct sockpool_req {
	struct sockpool *p;
	struct sockpool_req *prev, *next;
	int family;
	sockpool_cb cb;
	void *arg;
	uint32_t id; /* channel request id while in flight, else 0 */
	int fd;
	int err;
};

struct sockpool {
	struct event_base *base;
	struct wchan *chan;
	int socktype;
	size_t keep;
	unsigned families;
	void (*ready_cb)(void *arg);
	void *ready_arg;
	int ready[2][SOCKPOOL_MAX_KEEP]; /* [v6] */
	size_t nready[2];
	size_t refilling[2];
	struct sockpool_req *pending; /* in flight on the channel */
	struct sockpool_req *done;    /* answered, callback not yet run */
	struct event *ev_done;
};

static void
sockpool_unlink(struct sockpool_req **head, struct sockpool_req *r)
{
	if (r->prev != NULL)
		r->prev->next = r->next;
	else
		*head = r->next;
	if (r->next != NULL)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
}

static void
sockpool_link(struct sockpool_req **head, struct sockpool_req *r)
{
	r->prev = NULL;
	r->next = *head;
	if (*head != NULL)
		(*head)->prev = r;
	*head = r;
}

static void sockpool_refill(struct sockpool *p, int family);

static void
sockpool_done_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sockpool *p = arg;

	while (p->done != NULL) {
		struct sockpool_req *r = p->done;

		sockpool_unlink(&p->done, r);
		r->cb(r->fd, r->err, r->arg);
		free(r);
	}
}

static void
sockpool_reply_cb(const union chan_msg *reply, int fd, void *arg)
{
	struct sockpool_req *r = arg;
	struct sockpool *p = r->p;
	int v6 = r->family == AF_INET6;

	sockpool_unlink(&p->pending, r);
	r->id = 0;
	if (reply->hdr.type != CHAN_SOCKET_REP || reply->socket_rep.err != 0 || fd < 0) {
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	if (r->cb == NULL) {
		p->refilling[v6]--;
		free(r);
		if (fd < 0) {
			log_msg(LOG_ERROR, "proc", "socket_error",
			    "the parent could not create a marked socket: %s",
			    strerror(
			        reply->hdr.type == CHAN_SOCKET_REP && reply->socket_rep.err != 0
			            ? reply->socket_rep.err
			            : EIO));
			return;
		}
		if (p->nready[v6] >= p->keep) {
			close(fd);
			return;
		}
		p->ready[v6][p->nready[v6]++] = fd;
		if (p->ready_cb != NULL)
			p->ready_cb(p->ready_arg);
		return;
	}
	r->fd = fd;
	r->err = fd >= 0 ? 0
	                 : (reply->hdr.type == CHAN_SOCKET_REP && reply->socket_rep.err != 0
	                           ? reply->socket_rep.err
	                           : EIO);
	sockpool_link(&p->done, r);
	event_active(p->ev_done, EV_TIMEOUT, 0);
}

static int
sockpool_ask(struct sockpool *p, struct sockpool_req *r)
{
	struct chan_socket_req m;

	memset(&m, 0, sizeof(m));
	m.hdr.type = CHAN_SOCKET_REQ;
	m.hdr.id = wchan_id(p->chan);
	m.family = r->family;
	m.socktype = p->socktype;
	r->id = m.hdr.id;
	if (wchan_request(p->chan, &m, sockpool_reply_cb, r) != 0)
		return -1;
	sockpool_link(&p->pending, r);
	return 0;
}

static void
sockpool_refill(struct sockpool *p, int family)
{
	int v6 = family == AF_INET6;

	while (p->nready[v6] + p->refilling[v6] < p->keep) {
		struct sockpool_req *r = calloc(1, sizeof(*r));

		if (r == NULL)
			return;
		r->p = p;
		r->family = family;
		r->fd = -1;
		if (sockpool_ask(p, r) != 0) {
			free(r);
			return;
		}
		p->refilling[v6]++;
	}
}

/* A pool of marked sockets (see sockpool.h). */
struct sockpool *
sockpool_new(
    struct event_base *base, struct wchan *chan, int socktype, size_t keep, unsigned families)
{
	struct sockpool *p = calloc(1, sizeof(*p));

	if (p == NULL)
		return NULL;
	p->base = base;
	p->chan = chan;
	p->socktype = socktype;
	p->keep = keep > SOCKPOOL_MAX_KEEP ? SOCKPOOL_MAX_KEEP : keep;
	p->families = families;
	p->ev_done = event_new(base, -1, 0, sockpool_done_cb, p);
	if (p->ev_done == NULL) {
		free(p);
		return NULL;
	}
	if (families & SOCKPOOL_V4)
		sockpool_refill(p, AF_INET);
	if (families & SOCKPOOL_V6)
		sockpool_refill(p, AF_INET6);
	return p;
}

/* Free the pool; pending callbacks never run. */
void
sockpool_free(struct sockpool *p)
{
	if (p == NULL)
		return;
	while (p->pending != NULL) {
		struct sockpool_req *r = p->pending;

		sockpool_unlink(&p->pending, r);
		wchan_cancel(p->chan, r->id);
		free(r);
	}
	while (p->done != NULL) {
		struct sockpool_req *r = p->done;

		sockpool_unlink(&p->done, r);
		if (r->fd >= 0)
			close(r->fd);
		free(r);
	}
	for (int v6 = 0; v6 < 2; v6++)
		for (size_t i = 0; i < p->nready[v6]; i++)
			close(p->ready[v6][i]);
	event_free(p->ev_done);
	free(p);
}

static bool
sockpool_family_ok(const struct sockpool *p, int family)
{
	return (family == AF_INET && (p->families & SOCKPOOL_V4)) ||
	       (family == AF_INET6 && (p->families & SOCKPOOL_V6));
}

/* A ready socket now, or -1 (see sockpool.h). */
int
sockpool_take(struct sockpool *p, int family)
{
	int v6 = family == AF_INET6, fd;

	if (!sockpool_family_ok(p, family)) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if (p->nready[v6] == 0) {
		sockpool_refill(p, family);
		errno = EAGAIN;
		return -1;
	}
	fd = p->ready[v6][--p->nready[v6]];
	sockpool_refill(p, family);
	return fd;
}

void
sockpool_on_ready(struct sockpool *p, void (*cb)(void *arg), void *arg)
{
	p->ready_cb = cb;
	p->ready_arg = arg;
}

/* Ask for a marked socket; cb runs once from the loop. */
int
sockpool_get(struct sockpool *p, int family, sockpool_cb cb, void *arg)
{
	int v6 = family == AF_INET6;
	struct sockpool_req *r;

	if (cb == NULL || !sockpool_family_ok(p, family))
		return -1;
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return -1;
	r->p = p;
	r->family = family;
	r->cb = cb;
	r->arg = arg;
	r->fd = -1;
	if (p->nready[v6] > 0) {
		r->fd = p->ready[v6][--p->nready[v6]];
		sockpool_link(&p->done, r);
		event_active(p->ev_done, EV_TIMEOUT, 0);
	} else if (sockpool_ask(p, r) != 0) {
		free(r);
		return -1;
	}
	sockpool_refill(p, family);
	return 0;
}

/* Sockets ready now for family. */
size_t
sockpool_ready(const struct sockpool *p, int family)
{
	return p->nready[family == AF_INET6];
}
