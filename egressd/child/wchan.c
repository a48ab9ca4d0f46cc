/*
 * A child's side of its parent channel (child processes). Replies are matched
 * to requests by id in a small open-addressing table; a reply that matches
 * nothing, or any invalid message, means the channel cannot be trusted and
 * the child exits (the parent restarts it). What the parent pushes on its
 * own (ids with CHAN_ID_PARENT) goes to the push handler.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "egressd/common/log.h"
#include "egressd/child/wchan.h"

#define WCHAN_SLOTS (WCHAN_MAX_PENDING * 2)
/* How long a send waits for room on a full channel before it counts as broken. */
#define WCHAN_SEND_MS 10000

struct wchan_slot {
	uint32_t id;    /* 0: free */
	bool ever_used; /* probing continues past slots that were once used */
	bool cancelled; /* the requester is gone: drop the reply */
	wchan_reply_cb cb;
	void *arg;
};

struct wchan {
	int fd;
	struct event *ev;
	uint32_t next_id;
	size_t pending;
	struct wchan_slot slots[WCHAN_SLOTS];
	wchan_dead_cb dead;
	void *dead_arg;
	wchan_push_cb push;
	void *push_arg;
	bool broken;
};

static struct wchan_slot *
wchan_find(struct wchan *w, uint32_t id)
{
	for (size_t i = 0; i < WCHAN_SLOTS; i++) {
		struct wchan_slot *s = &w->slots[(id + i) % WCHAN_SLOTS];
		if (s->id == id)
			return s;
		if (s->id == 0 && !s->ever_used)
			return NULL;
	}
	return NULL;
}

static void
wchan_break(struct wchan *w, const char *why)
{
	if (w->broken)
		return;
	w->broken = true;
	event_del(w->ev);
	w->dead(why, w->dead_arg);
}

static void
wchan_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wchan *w = arg;

	for (int i = 0; i < 256 && !w->broken; i++) {
		union chan_msg m;
		int passfd;
		const char *why;
		struct wchan_slot *s;
		wchan_reply_cb cb;
		void *cbarg;

		switch (chan_recv(w->fd, &m, CHAN_TO_WORKER, &passfd, &why)) {
		case CHAN_AGAIN:
			return;
		case CHAN_EOF:
			wchan_break(w, "parent closed the channel");
			return;
		case CHAN_INVALID:
			wchan_break(w, why);
			return;
		case CHAN_FDLOST:
			/* The socket never arrived: a failed request (EMFILE), not a broken channel. */
			m.socket_rep.err = EMFILE;
			passfd = -1;
			break;
		case CHAN_OK:
			break;
		}
		if ((m.hdr.id & CHAN_ID_PARENT) != 0) {
			/* chan_validate let through only a pushed document or learn. */
			if (w->push == NULL) {
				wchan_break(
				    w, "the parent pushed to a process that takes no pushes");
				return;
			}
			w->push(&m, w->push_arg);
			if (m.hdr.type == CHAN_VAULT)
				explicit_bzero(&m, sizeof(m));
			continue;
		}
		s = wchan_find(w, m.hdr.id);
		if (s == NULL) {
			if (passfd >= 0)
				close(passfd);
			wchan_break(w, "reply to no request");
			return;
		}
		cb = s->cb;
		cbarg = s->arg;
		s->id = 0;
		w->pending--;
		if (s->cancelled) {
			if (passfd >= 0)
				close(passfd);
			continue;
		}
		cb(&m, passfd, cbarg);
	}
}

/* Wrap the channel fd in a read event on `base`. */
struct wchan *
wchan_new(struct event_base *base, int fd, wchan_dead_cb dead, void *arg)
{
	struct wchan *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return NULL;
	w->fd = fd;
	w->dead = dead;
	w->dead_arg = arg;
	w->next_id = 1;
	w->ev = event_new(base, fd, EV_READ | EV_PERSIST, wchan_read_cb, w);
	if (w->ev == NULL || event_add(w->ev, NULL) != 0) {
		if (w->ev != NULL)
			event_free(w->ev);
		free(w);
		return NULL;
	}
	return w;
}

/* Free the channel wrapper (the fd is closed too). */
void
wchan_free(struct wchan *w)
{
	if (w == NULL)
		return;
	event_free(w->ev);
	close(w->fd);
	free(w);
}

void
wchan_on_push(struct wchan *w, wchan_push_cb cb, void *arg)
{
	w->push = cb;
	w->push_arg = arg;
}

/* Next request id, skipping 0 and staying below the parent's ids. */
uint32_t
wchan_id(struct wchan *w)
{
	uint32_t id = w->next_id++;

	if (w->next_id >= CHAN_ID_PARENT)
		w->next_id = 1;
	return id;
}

int
wchan_request(struct wchan *w, const void *msg, wchan_reply_cb cb, void *arg)
{
	struct chan_hdr hdr;

	if (w->broken || w->pending >= WCHAN_MAX_PENDING) {
		errno = EAGAIN;
		return -1;
	}
	memcpy(&hdr, msg, sizeof(hdr));
	for (size_t i = 0; i < WCHAN_SLOTS; i++) {
		struct wchan_slot *s = &w->slots[(hdr.id + i) % WCHAN_SLOTS];
		if (s->id == 0) {
			if (chan_send_wait(w->fd, msg, WCHAN_SEND_MS) != 0) {
				log_msg(LOG_ERROR, "proc", "chan_send",
				    "send of a %s request failed: %s", chan_type_name(hdr.type),
				    strerror(errno));
				wchan_break(w, "send to parent failed");
				return -1;
			}
			s->id = hdr.id;
			s->ever_used = true;
			s->cancelled = false;
			s->cb = cb;
			s->arg = arg;
			w->pending++;
			return 0;
		}
	}
	errno = EAGAIN;
	return -1;
}

int
wchan_send(struct wchan *w, const void *msg)
{
	if (w->broken) {
		errno = EPIPE;
		return -1;
	}
	if (chan_send_wait(w->fd, msg, WCHAN_SEND_MS) != 0) {
		log_msg(LOG_ERROR, "proc", "chan_send", "send of a %s message failed: %s",
		    chan_type_name(((const struct chan_hdr *)msg)->type), strerror(errno));
		wchan_break(w, "send to parent failed");
		return -1;
	}
	return 0;
}

int
wchan_offer(struct wchan *w, const void *msg)
{
	if (w->broken)
		return -1;
	if (chan_offer(w->fd, msg) == 0)
		return 0;
	if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS)
		wchan_break(w, "send to parent failed");
	return -1;
}

int
wchan_batch(struct wchan *w, void *msgs, size_t size, size_t n, wchan_reply_cb cb, void *arg)
{
	uint32_t id = wchan_id(w);

	if (n == 0 || n > CHAN_MAX_BATCH) {
		errno = EINVAL;
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		struct chan_hdr *h = (struct chan_hdr *)((char *)msgs + i * size);
		bool last = i + 1 == n;

		h->id = id;
		h->flags = (uint16_t)((h->flags & ~CHAN_LEARN_MORE) | (last ? 0 : CHAN_LEARN_MORE));
		if ((last ? wchan_request(w, h, cb, arg) : wchan_send(w, h)) != 0)
			return -1;
	}
	return 0;
}

int
wchan_doc(struct wchan *w, unsigned type, const char *doc, size_t len, wchan_reply_cb cb, void *arg)
{
	struct chan_policy *c = malloc(sizeof(*c));
	uint32_t id = wchan_id(w);
	size_t off = 0;
	int rc = 0;

	if (c == NULL)
		return -1;
	do {
		off = chan_doc_chunk(c, type, id, doc, len, off);
		rc = off < len ? wchan_send(w, c) : wchan_request(w, c, cb, arg);
	} while (rc == 0 && off < len);
	explicit_bzero(c, sizeof(*c));
	free(c);
	return rc;
}

/* The reply will still come; mark the slot so that it is dropped. */
void
wchan_cancel(struct wchan *w, uint32_t id)
{
	struct wchan_slot *s = wchan_find(w, id);

	if (s != NULL)
		s->cancelled = true;
}
