/*
 * The chained upstream proxy's name (OPENSANDBOX_EGRESS_UPSTREAM_PROXY
 * given by name), resolved by the dns process for the sidecar itself: A
 * and AAAA through the same upstreams as the workload's queries, again
 * when the answer's TTL runs out. The addresses go to the parent as one
 * CHAN_LEARN_PROXY batch, which pins the intercept's mark to them in the
 * table and hands them to the intercept; they are never learned for the
 * workload, and the workload's own queries for the name meet the policy
 * like any other.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <openssl/rand.h>

#include "egressd/child/wchan.h"
#include "egressd/child/wstate.h"
#include "egressd/common/log.h"
#include "egressd/dns/dnswire.h"
#include "egressd/dns/pxname.h"

/* One of the two questions (A, AAAA) of a resolution. */
struct pxname_q {
	struct pxname *px;
	uint16_t qtype;
	bool done;
	struct dnswire_answer res;
};

struct pxname {
	struct dnsproxy *d;
	struct wstate *ws;
	char name[DNSWIRE_MAX_NAME + 1];
	struct event *ev; /* the next resolution */
	struct pxname_q q[2];
	unsigned pending; /* questions in flight */
	bool busy;        /* a resolution, or its batch to the parent, is under way */
	bool failing;     /* the last resolution gave no address in force */
	time_t warned;    /* monotonic second of the last failure line */
	void (*first_cb)(void *arg);
	void *first_arg;
	struct chan_learn batch[CHAN_MAX_PROXY_ADDRS];
};

static void pxname_resolve(struct pxname *px);

static void
pxname_again(struct pxname *px, uint32_t secs)
{
	struct timeval tv = {(time_t)secs, 0};

	evtimer_add(px->ev, &tv);
}

/* The first resolution is over, whatever its outcome: the dns process may serve. */
static void
pxname_first_done(struct pxname *px)
{
	void (*cb)(void *) = px->first_cb;

	px->first_cb = NULL;
	if (cb != NULL)
		cb(px->first_arg);
}

/* No address in force from this round: try again soon, say so now and then. */
static void
pxname_fail(struct pxname *px, const char *why)
{
	time_t now = (time_t)dnsproxy_now_s();

	px->busy = false;
	if (!px->failing || now - px->warned >= PXNAME_WARN_S) {
		struct log_line l;

		log_begin(&l, LOG_WARN, "dns", "upstream_proxy_unresolved");
		log_str(&l, "name", px->name);
		log_str(&l, "why", why);
		log_uint(&l, "retry_s", PXNAME_RETRY_S);
		log_end(&l);
		px->warned = now;
	}
	px->failing = true;
	pxname_again(px, PXNAME_RETRY_S);
	pxname_first_done(px);
}

static void
pxname_sent_cb(const union chan_msg *reply, int fd, void *arg)
{
	struct pxname *px = arg;
	uint32_t ttl = UINT32_MAX;

	(void)fd;
	if (reply->result.err != 0) {
		pxname_fail(px, reply->result.msg[0] != '\0' ? reply->result.msg : "refused");
		return;
	}
	for (size_t i = 0; i < 2; i++)
		if (px->q[i].res.naddrs > 0 && px->q[i].res.min_ttl < ttl)
			ttl = px->q[i].res.min_ttl;
	if (ttl < PXNAME_MIN_S)
		ttl = PXNAME_MIN_S;
	if (ttl > PXNAME_MAX_S)
		ttl = PXNAME_MAX_S;
	if (px->failing) {
		log_msg(LOG_INFO, "dns", "upstream_proxy_resolved", "%s resolves again", px->name);
		px->failing = false;
	}
	px->busy = false;
	pxname_again(px, ttl);
	pxname_first_done(px);
}

/*
 * Both questions answered: IPv4 addresses when the name has any, else
 * IPv6 ones (a dual-stack proxy is dialled over IPv4, an IPv6-only one
 * over IPv6), at most CHAN_MAX_PROXY_ADDRS, as one batch.
 */
static void
pxname_complete(struct pxname *px)
{
	const struct pxname_q *q = px->q[0].res.naddrs > 0 ? &px->q[0] : &px->q[1];
	size_t n = 0;

	for (size_t i = 0; i < q->res.naddrs && n < CHAN_MAX_PROXY_ADDRS; i++) {
		const struct dnswire_addr *a = &q->res.addrs[i];
		struct chan_learn *l = &px->batch[n];
		bool dup = false;

		for (size_t k = 0; k < n && !dup; k++)
			dup = px->batch[k].family == a->family &&
			      memcmp(px->batch[k].addr, a->addr, sizeof(a->addr)) == 0;
		if (dup)
			continue;
		memset(l, 0, sizeof(*l));
		l->hdr.type = CHAN_LEARN;
		l->hdr.flags = CHAN_LEARN_PROXY;
		l->family = (uint8_t)a->family;
		memcpy(l->addr, a->addr, a->family == AF_INET ? 4 : 16);
		l->timeout_s = a->ttl < 1                    ? 1
		               : a->ttl > CHAN_MAX_TIMEOUT_S ? CHAN_MAX_TIMEOUT_S
		                                             : a->ttl;
		memcpy(l->name, px->name, strlen(px->name));
		n++;
	}
	if (n == 0) {
		pxname_fail(px, "no usable address in the answers");
		return;
	}
	if (wchan_batch(
	        wstate_chan(px->ws), px->batch, sizeof(px->batch[0]), n, pxname_sent_cb, px) != 0)
		pxname_fail(px, "the parent's channel is broken");
}

/* The proxy's addresses are never the sandbox's own or inner ones (the parent checks again). */
static bool
pxname_addr_pred(int family, const uint8_t *addr, void *arg)
{
	struct pxname_q *q = arg;

	return dnsproxy_addr_ok(q->px->d, family, addr, false);
}

static void
pxname_answer_cb(void *arg, int status, const uint8_t *msg, size_t len)
{
	struct pxname_q *q = arg;
	struct pxname *px = q->px;
	struct dnswire_query dq;
	uint8_t query[DNSWIRE_MAX_QUESTION + DNSWIRE_HDR_LEN + 16], out[PXNAME_ANSWER_MAX];
	size_t qlen, used, outlen;

	if (status == ECANCELED)
		return; /* the resolver is closing: so is the process */
	memset(&q->res, 0, sizeof(q->res));
	/* The question as sent, parsed back: the answer must match it. */
	if (status == 0 && len >= DNSWIRE_HDR_LEN &&
	    dnswire_build_query(
	        0, px->name, q->qtype, DNSWIRE_CLASS_IN, query, sizeof(query), &qlen) == 0 &&
	    dnswire_parse_query(query, qlen, &dq, &used) == DNSWIRE_OK &&
	    dnswire_filter_answer(msg, len, (uint16_t)((msg[0] << 8) | msg[1]), &dq,
	        pxname_addr_pred, q, sizeof(out), out, sizeof(out), &outlen,
	        &q->res) == DNSWIRE_OK) {
		if (q->res.rcode != DNSWIRE_RCODE_NOERROR)
			q->res.naddrs = 0;
	} else
		memset(&q->res, 0, sizeof(q->res));
	q->done = true;
	if (--px->pending == 0)
		pxname_complete(px);
}

static void
pxname_resolve(struct pxname *px)
{
	static const uint16_t qtypes[2] = {DNSWIRE_TYPE_A, DNSWIRE_TYPE_AAAA};

	if (px->busy)
		return;
	px->busy = true;
	px->pending = 2;
	for (size_t i = 0; i < 2; i++) {
		uint8_t query[DNSWIRE_MAX_QUESTION + DNSWIRE_HDR_LEN + 16];
		uint16_t id;
		size_t len;

		px->q[i].px = px;
		px->q[i].qtype = qtypes[i];
		px->q[i].done = false;
		if (RAND_bytes((unsigned char *)&id, sizeof(id)) != 1 ||
		    dnswire_build_query(id, px->name, qtypes[i], DNSWIRE_CLASS_IN, query,
		        sizeof(query), &len) != 0) {
			memset(&px->q[i].res, 0, sizeof(px->q[i].res));
			px->q[i].done = true;
			if (--px->pending == 0)
				pxname_complete(px);
			continue;
		}
		dnsproxy_resolve(px->d, query, len, pxname_answer_cb, &px->q[i]);
	}
}

static void
pxname_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	pxname_resolve(arg);
}

struct pxname *
pxname_new(struct dnsproxy *d, struct wstate *ws, const char *name)
{
	struct pxname *px;

	if (strlen(name) > DNSWIRE_MAX_NAME || (px = calloc(1, sizeof(*px))) == NULL)
		return NULL;
	px->d = d;
	px->ws = ws;
	memcpy(px->name, name, strlen(name));
	px->ev = evtimer_new(wstate_base(ws), pxname_timer_cb, px);
	if (px->ev == NULL) {
		free(px);
		return NULL;
	}
	return px;
}

void
pxname_start(struct pxname *px, void (*first_cb)(void *arg), void *arg)
{
	px->first_cb = first_cb;
	px->first_arg = arg;
	pxname_resolve(px);
}

void
pxname_free(struct pxname *px)
{
	if (px == NULL)
		return;
	event_free(px->ev);
	free(px);
}
