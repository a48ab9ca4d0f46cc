/*
 * The fake resolver (tests only); see fakeresolver.h. Answers are built
 * as an upstream would: the query's id and question, QR RD RA, one A or
 * AAAA record per scripted address with a compression pointer to the
 * question's name. A name with no rule gets NXDOMAIN.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>

#include "egressd/dns/dnswire.h"
#include "fakeresolver.h"

struct fakeresolver_q {
	struct fakeresolver *f;
	dnsproxy_answer_cb cb;
	void *arg;
	int status;
	size_t len;
	uint8_t msg[1024];
};

static void *
fakeresolver_open(void *arg, struct dnsproxy *d, char *err, size_t errlen)
{
	(void)d;
	(void)err;
	(void)errlen;
	return arg;
}

static void
fakeresolver_close(void *r)
{
	(void)r;
}

static void
fakeresolver_put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* The scripted answer to q into out; its length. */
static size_t
fakeresolver_answer(const struct fakeresolver_rule *r, const struct dnswire_query *q, uint8_t *out)
{
	size_t n = DNSWIRE_HDR_LEN;
	size_t count = 0;

	memset(out, 0, DNSWIRE_HDR_LEN);
	fakeresolver_put16(out, q->id);
	out[2] = 0x81;                                                              /* QR, RD */
	out[3] = (uint8_t)(0x80 | (r != NULL ? r->rcode : DNSWIRE_RCODE_NXDOMAIN)); /* RA, rcode */
	fakeresolver_put16(out + 4, 1);
	memcpy(out + n, q->question, q->question_len);
	n += q->question_len;
	for (size_t i = 0; r != NULL && i < r->naddrs; i++) {
		int v6 = r->family[i] == AF_INET6;

		if ((v6 ? DNSWIRE_TYPE_AAAA : DNSWIRE_TYPE_A) != q->qtype)
			continue;
		fakeresolver_put16(out + n, 0xc00c); /* the question's name */
		fakeresolver_put16(out + n + 2, q->qtype);
		fakeresolver_put16(out + n + 4, DNSWIRE_CLASS_IN);
		out[n + 6] = (uint8_t)(r->ttl >> 24);
		out[n + 7] = (uint8_t)(r->ttl >> 16);
		out[n + 8] = (uint8_t)(r->ttl >> 8);
		out[n + 9] = (uint8_t)r->ttl;
		fakeresolver_put16(out + n + 10, v6 ? 16 : 4);
		memcpy(out + n + 12, r->addr[i], v6 ? 16 : 4);
		n += 12 + (v6 ? 16 : 4);
		count++;
	}
	fakeresolver_put16(out + 6, (unsigned)count);
	return n;
}

/* Delivered from the loop, as a real upstream's answer would be. */
static void
fakeresolver_deliver_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fakeresolver_q *fq = arg;

	fq->f->pending--;
	fq->cb(fq->arg, fq->status, fq->status == 0 ? fq->msg : NULL, fq->len);
	free(fq);
}

static void
fakeresolver_send(void *rv, const uint8_t *query, size_t len, dnsproxy_answer_cb cb, void *arg)
{
	struct fakeresolver *f = rv;
	struct fakeresolver_q *fq = calloc(1, sizeof(*fq));
	const struct fakeresolver_rule *rule = NULL;
	struct dnswire_query q;
	size_t used;
	struct timeval now = {0, 0};

	if (fq == NULL || dnswire_parse_query(query, len, &q, &used) != DNSWIRE_OK) {
		free(fq);
		cb(arg, EIO, NULL, 0);
		return;
	}
	f->asked++;
	snprintf(f->last, sizeof(f->last), "%s", q.name);
	for (size_t i = 0; i < f->nrules && rule == NULL; i++)
		if (strcmp(f->rules[i].name, q.name) == 0 &&
		    (f->rules[i].qtype == 0 || f->rules[i].qtype == q.qtype))
			rule = &f->rules[i];
	fq->f = f;
	fq->cb = cb;
	fq->arg = arg;
	if (rule != NULL && rule->timeout)
		fq->status = ETIMEDOUT;
	else
		fq->len = fakeresolver_answer(rule, &q, fq->msg);
	f->pending++;
	event_base_once(f->base, -1, EV_TIMEOUT, fakeresolver_deliver_cb, fq, &now);
}

void
fakeresolver_init(struct fakeresolver *f, struct event_base *base)
{
	memset(f, 0, sizeof(*f));
	f->base = base;
	f->ops.open = fakeresolver_open;
	f->ops.send = fakeresolver_send;
	f->ops.close = fakeresolver_close;
	f->ops.arg = f;
}
