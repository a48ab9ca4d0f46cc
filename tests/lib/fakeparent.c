/* A fake parent on a real channel (see fakeparent.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "egressd/child/wchan.h"
#include "egressd/common/chan.h"
#include "fakeparent.h"
#include "policy/policy.h"

static void
fakeparent_dead_cb(const char *why, void *arg)
{
	struct fakeparent *f = arg;

	f->invalid++;
}

static void
fakeparent_result(struct fakeparent *f, uint32_t id, unsigned type, int err)
{
	struct chan_result r;

	memset(&r, 0, sizeof(r));
	r.hdr.type = CHAN_RESULT;
	r.hdr.id = id;
	r.req_type = (uint16_t)type;
	r.err = err;
	if (chan_send(f->pfd, &r, -1) != 0)
		f->invalid++;
}

static void
fakeparent_policy(struct fakeparent *f, const struct chan_policy *c)
{
	struct policy_err pe;
	struct policy *p;

	if (c->offset == 0) {
		free(f->policy_rx);
		f->policy_rx = malloc(c->total ? c->total : 1);
		f->policy_have = 0;
	}
	if (f->policy_rx == NULL || c->offset != f->policy_have) {
		f->invalid++;
		return;
	}
	memcpy(f->policy_rx + f->policy_have, c->data, c->len);
	f->policy_have += c->len;
	if (c->hdr.flags & CHAN_POLICY_MORE)
		return;
	p = policy_wire_decode(f->policy_rx, c->total, &pe);
	free(f->policy_rx);
	f->policy_rx = NULL;
	if (p != NULL)
		f->policies++;
	policy_free(p);
	fakeparent_result(f, c->hdr.id, CHAN_POLICY, p != NULL ? 0 : EINVAL);
}

static void
fakeparent_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fakeparent *f = arg;

	for (;;) {
		union chan_msg *m = malloc(sizeof(*m));
		int passfd = -1, s = -1;
		const char *why;
		enum chan_status st;

		if (m == NULL)
			return;
		st = chan_recv(f->pfd, m, CHAN_TO_PARENT, &passfd, &why);
		if (passfd >= 0)
			close(passfd);
		if (st != CHAN_OK) {
			if (st == CHAN_INVALID || st == CHAN_FDLOST)
				f->invalid++;
			free(m);
			return;
		}
		switch (m->hdr.type) {
		case CHAN_SOCKET_REQ: {
			struct chan_socket_rep rep;

			memset(&rep, 0, sizeof(rep));
			rep.hdr.type = CHAN_SOCKET_REP;
			rep.hdr.id = m->hdr.id;
			if (f->fail_errno != 0)
				rep.err = f->fail_errno;
			else if ((s = socket(m->socket_req.family,
			              m->socket_req.socktype | SOCK_CLOEXEC, 0)) < 0)
				rep.err = errno;
			if (chan_send(f->pfd, &rep, s) != 0)
				f->invalid++;
			if (s >= 0)
				close(s);
			f->served++;
			break;
		}
		case CHAN_LEARN:
			if (f->learns == NULL)
				f->learns = calloc(FAKEPARENT_MAX_LEARNS, sizeof(*f->learns));
			if (f->learns != NULL && f->nlearns < FAKEPARENT_MAX_LEARNS)
				f->learns[f->nlearns++] = m->learn;
			if ((m->hdr.flags & CHAN_LEARN_MORE) == 0)
				fakeparent_result(f, m->hdr.id, CHAN_LEARN, f->fail_errno);
			break;
		case CHAN_POLICY:
			fakeparent_policy(f, &m->policy);
			break;
		case CHAN_ACK:
			f->acks++;
			f->ack_id = m->hdr.id;
			f->ack_err = m->ack.err;
			break;
		default:
			break;
		}
		free(m);
	}
}

int
fakeparent_init(struct fakeparent *f, struct event_base *base)
{
	int sv[2];

	memset(f, 0, sizeof(*f));
	f->base = base;
	f->pfd = -1;
	if (chan_pair(sv) != 0)
		return -1;
	f->pfd = sv[1];
	f->wc = wchan_new(base, sv[0], fakeparent_dead_cb, f);
	f->ev = event_new(base, f->pfd, EV_READ | EV_PERSIST, fakeparent_cb, f);
	if (f->wc == NULL || f->ev == NULL || event_add(f->ev, NULL) != 0) {
		fakeparent_fini(f);
		return -1;
	}
	return 0;
}

void
fakeparent_fini(struct fakeparent *f)
{
	if (f->wc != NULL)
		wchan_free(f->wc);
	if (f->ev != NULL)
		event_free(f->ev);
	if (f->pfd >= 0)
		close(f->pfd);
	free(f->learns);
	free(f->policy_rx);
	memset(f, 0, sizeof(*f));
	f->pfd = -1;
}
