/*
 * The report process; see report.h. One delivery at a time, an explicit
 * state machine: a webhook event (oldest first) or an OTLP export takes a
 * marked socket from the pool, connects, sends one HTTP/1.1 request with
 * Connection: close and reads the answer's status line. Webhook events
 * are retried (1, 2, 4 s) on network errors, 5xx and 429, then given up;
 * an OTLP export is not retried (the next one carries the totals).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>

#include "egressd/child/sockpool.h"
#include "egressd/child/wstate.h"
#include "egressd/common/config.h"
#include "egressd/common/httpurl.h"
#include "egressd/common/log.h"
#include "egressd/common/otlp.h"
#include "egressd/common/shstat.h"
#include "egressd/report/report.h"
#include "version.h"

/* What a delivery carries. */
enum report_kind {
	REPORT_WEBHOOK,
	REPORT_OTLP,
};

/* One delivery's state; report_set_state() is the only place it changes. */
enum report_state {
	REPORT_S_IDLE,     /* nothing in flight */
	REPORT_S_SOCKET,   /* waiting for a marked socket from the parent */
	REPORT_S_EXCHANGE, /* connecting, sending, reading the status line */
	REPORT_S_BACKOFF,  /* a webhook attempt failed: waiting to retry */
};

struct report {
	struct wstate *ws;
	struct event_base *base;
	struct config_report set;
	struct sockpool *pool;
	struct metrics *m;

	struct chan_event q[REPORT_QUEUE];
	size_t qhead, qlen, qcap;

	enum report_state state;
	enum report_kind kind;
	unsigned attempt;
	struct bufferevent *bev;
	struct evbuffer *req; /* the request being delivered */
	char ans[REPORT_MAX_ANSWER];
	size_t anslen;
	struct event *ev_timer; /* the attempt's deadline, or the backoff */

	struct event *ev_otlp; /* the export interval */
	bool otlp_due;
	uint64_t start_ns, last_ns;
	struct metrics prev;         /* at the last delivered export (delta) */
	struct metrics pending_prev; /* at the export in flight */
	uint64_t pending_ns;
	unsigned char *otlp_buf;

	bool draining;
	struct event *ev_drain;
};

static void report_kick(struct report *r);

static bool
report_set_state(struct report *r, enum report_state s)
{
	bool ok;

	switch (s) {
	case REPORT_S_SOCKET:
		ok = r->state == REPORT_S_IDLE || r->state == REPORT_S_BACKOFF;
		break;
	case REPORT_S_EXCHANGE:
		ok = r->state == REPORT_S_SOCKET;
		break;
	case REPORT_S_BACKOFF:
		ok = r->state == REPORT_S_SOCKET || r->state == REPORT_S_EXCHANGE;
		break;
	case REPORT_S_IDLE:
	default:
		ok = true;
		break;
	}
	if (ok)
		r->state = s;
	else
		log_msg(LOG_ERROR, "report", "report_state", "illegal transition %d -> %d",
		    (int)r->state, (int)s);
	return ok;
}

static uint64_t
report_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ the bodies */

long
report_event_json(const struct chan_event *e, const char *sandbox_id, char *buf, size_t cap)
{
	static const char *const kinds[CHAN_EVENT_KIND_MAX] = {
	    [CHAN_EVENT_DNS_DENY] = "dns",
	    [CHAN_EVENT_CONN_DENY] = "connection",
	    [CHAN_EVENT_VAULT_DENY] = "vault",
	};
	char addr[INET6_ADDRSTRLEN] = "", ts[32];
	time_t t = (time_t)e->time_s;
	struct tm tm;
	json_t *o;
	size_t n;

	if (e->kind == 0 || e->kind >= CHAN_EVENT_KIND_MAX)
		return -1;
	if (e->family != 0)
		inet_ntop(e->family, e->addr, addr, sizeof(addr));
	gmtime_r(&t, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
	o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "hostname",
	    e->name[0] != '\0' ? e->name : addr, "timestamp", ts, "source", "opensandbox-egress",
	    "sandboxId", sandbox_id, "kind", kinds[e->kind], "reason", e->reason);
	if (o == NULL)
		return -1;
	if (e->family != 0 &&
	    (json_object_set_new(o, "address", json_string(addr)) != 0 ||
	        (e->port != 0 && json_object_set_new(o, "port", json_integer(e->port)) != 0))) {
		json_decref(o);
		return -1;
	}
	n = json_dumpb(o, buf, cap, JSON_COMPACT);
	json_decref(o);
	return n == 0 || n > cap ? -1 : (long)n;
}

int
report_status(const char *buf, size_t len)
{
	int code = 0;

	/* "HTTP/1.x NNN" then a space or the end of the line. */
	for (size_t i = 0; i < len && i < 13; i++) {
		char c = buf[i];

		if (i < 5 && c != "HTTP/"[i])
			return -1;
		if (i == 5 && c != '1')
			return -1;
		if (i == 6 && c != '.')
			return -1;
		if (i == 7 && c != '0' && c != '1')
			return -1;
		if (i == 8 && c != ' ')
			return -1;
		if (i >= 9 && i <= 11) {
			if (c < '0' || c > '9')
				return -1;
			code = code * 10 + (c - '0');
		}
		if (i == 12) {
			if (c != ' ' && c != '\r')
				return -1;
			return code >= 100 && code <= 599 ? code : -1;
		}
	}
	return 0;
}

/* The request head and body into r->req. */
static int
report_request(struct report *r, const struct httpurl *u, const char *type, const void *body,
    size_t len, const struct otlp_attr *hdrs, size_t nhdrs)
{
	struct evbuffer *b = r->req;

	evbuffer_drain(b, evbuffer_get_length(b));
	if (evbuffer_add_printf(b,
	        "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: egressd/%s\r\n"
	        "Content-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n",
	        u->path, u->authority, EGRESSD_VERSION, type, len) < 0)
		return -1;
	for (size_t i = 0; i < nhdrs; i++)
		if (evbuffer_add_printf(b, "%s: %s\r\n", hdrs[i].key, hdrs[i].value) < 0)
			return -1;
	if (evbuffer_add(b, "\r\n", 2) != 0 || evbuffer_add(b, body, len) != 0)
		return -1;
	return 0;
}

static const struct httpurl *
report_target(const struct report *r)
{
	return r->kind == REPORT_WEBHOOK ? &r->set.hook : &r->set.otlp.url;
}

/* ------------------------------------------------------------ deliveries */

static void
report_close(struct report *r)
{
	if (r->bev != NULL)
		bufferevent_free(r->bev);
	r->bev = NULL;
	evtimer_del(r->ev_timer);
}

static void report_attempt(struct report *r);

/* The current delivery is over: delivered (ok), or failed (retry when it may). */
static void
report_done(struct report *r, bool ok, bool permanent, const char *why)
{
	report_close(r);
	if (r->kind == REPORT_OTLP) {
		if (ok) {
			r->m->otlp_exports++;
			/* Delta: the next window starts here; a failed one's counts go with it. */
			if (r->set.otlp.delta) {
				r->prev = r->pending_prev;
				r->last_ns = r->pending_ns;
			}
		} else if (r->m->otlp_failures++ % 10 == 0) {
			log_msg(LOG_WARN, "report", "otlp_export_failed",
			    "OTLP export to %s failed: %s (%llu so far)", r->set.otlp.url.authority,
			    why, (unsigned long long)r->m->otlp_failures);
		}
		report_set_state(r, REPORT_S_IDLE);
		report_kick(r);
		return;
	}
	if (!ok && !permanent && r->attempt < REPORT_RETRIES) {
		struct timeval tv = {1 << r->attempt, 0};

		r->attempt++;
		if (report_set_state(r, REPORT_S_BACKOFF))
			evtimer_add(r->ev_timer, &tv);
		return;
	}
	if (ok) {
		r->m->events_delivered++;
	} else if (r->m->events_failed++ % 100 == 0) {
		log_msg(LOG_WARN, "report", "webhook_failed",
		    "deny webhook %s: event given up after %u attempt(s): %s (%llu so far)",
		    r->set.hook.authority, r->attempt + 1, why,
		    (unsigned long long)r->m->events_failed);
	}
	r->qhead = (r->qhead + 1) % r->qcap;
	r->qlen--;
	report_set_state(r, REPORT_S_IDLE);
	report_kick(r);
}

static void
report_read_cb(struct bufferevent *bev, void *arg)
{
	struct report *r = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t room = sizeof(r->ans) - r->anslen;
	int code;

	r->anslen += evbuffer_remove(in, r->ans + r->anslen, room);
	evbuffer_drain(in, evbuffer_get_length(in));
	code = report_status(r->ans, r->anslen);
	if (code == 0 && r->anslen < sizeof(r->ans))
		return;
	if (code <= 0) {
		report_done(r, false, false, "not an HTTP answer");
		return;
	}
	if (code >= 200 && code <= 299) {
		report_done(r, true, false, "");
		return;
	}
	/* Retry what may pass later (5xx, 429); other answers will not change. */
	report_done(r, false, !(code >= 500 || code == 429),
	    code >= 500 ? "a 5xx answer" : (code == 429 ? "429" : "a 4xx answer"));
}

static void
report_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct report *r = arg;

	if ((what & BEV_EVENT_CONNECTED) != 0)
		return;
	report_done(r, false, false,
	    (what & BEV_EVENT_EOF) != 0 ? "closed before its answer" : "connection failed");
}

static void
report_sock_cb(int fd, int err, void *arg)
{
	struct report *r = arg;
	const struct httpurl *u = report_target(r);
	struct sockaddr_storage ss;
	socklen_t sl;

	/* A socket asked for by an attempt that has ended already. */
	if (r->state != REPORT_S_SOCKET) {
		if (fd >= 0)
			close(fd);
		return;
	}
	if (fd < 0) {
		report_done(r, false, false, strerror(err));
		return;
	}
	sl = httpurl_sockaddr(u->family, u->addr, u->port, &ss);
	r->bev = bufferevent_socket_new(r->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (r->bev == NULL) {
		close(fd);
		report_done(r, false, false, "out of memory");
		return;
	}
	report_set_state(r, REPORT_S_EXCHANGE);
	r->anslen = 0;
	bufferevent_setcb(r->bev, report_read_cb, NULL, report_event_cb, r);
	bufferevent_enable(r->bev, EV_READ | EV_WRITE);
	/* The request is queued now; libevent sends it once connected. */
	if (bufferevent_write(r->bev, evbuffer_pullup(r->req, -1), evbuffer_get_length(r->req)) !=
	        0 ||
	    bufferevent_socket_connect(r->bev, (struct sockaddr *)&ss, (int)sl) != 0)
		report_done(r, false, false, "connect failed");
}

/* The attempt's deadline, or the end of a backoff. */
static void
report_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct report *r = arg;

	(void)fd;
	(void)what;
	if (r->state == REPORT_S_BACKOFF)
		report_attempt(r);
	else if (r->state != REPORT_S_IDLE)
		report_done(r, false, false, "no answer in time");
}

static void
report_attempt(struct report *r)
{
	struct timeval tv = {REPORT_ATTEMPT_S, 0};

	if (!report_set_state(r, REPORT_S_SOCKET))
		return;
	evtimer_add(r->ev_timer, &tv);
	if (sockpool_get(r->pool, report_target(r)->family, report_sock_cb, r) != 0)
		report_done(r, false, false, "no marked socket");
}

/* The OTLP export of the counters now. */
static int
report_otlp_request(struct report *r)
{
	const struct shstat_view *v = shstat_view();
	struct otlp_export x;
	struct metrics sum, delta;
	const struct metrics *m = &sum;
	long n;

	wstate_metrics_sum(r->ws, &sum);
	memset(&x, 0, sizeof(x));
	x.attrs = r->set.otlp.attrs;
	x.nattrs = r->set.otlp.nattrs;
	x.mode = config_mode_name(wstate_cfg(r->ws)->mode);
	x.gauges[0] =
	    v->status != NULL && (v->status->ready & v->status->present) == v->status->present;
	x.gauges[1] = v->status != NULL ? v->status->revision : 0;
	x.gauges[2] = v->status != NULL ? v->status->learned : 0;
	x.now_ns = report_now_ns();
	x.delta = r->set.otlp.delta;
	if (x.delta) {
		otlp_delta(&delta, &sum, &r->prev);
		m = &delta;
		x.start_ns = r->last_ns;
	} else {
		x.start_ns = r->start_ns;
	}
	n = otlp_encode(m, &x, r->otlp_buf, OTLP_MAX_BODY);
	if (n < 0)
		return -1;
	r->pending_prev = sum;
	r->pending_ns = x.now_ns;
	return report_request(r, &r->set.otlp.url, "application/x-protobuf", r->otlp_buf, (size_t)n,
	    r->set.otlp.headers, r->set.otlp.nheaders);
}

/* Start the next delivery, if there is one and none is in flight. */
static void
report_kick(struct report *r)
{
	char body[1024];
	long n;

	if (r->state != REPORT_S_IDLE)
		return;
	while (r->qlen > 0) {
		n = report_event_json(
		    &r->q[r->qhead], wstate_cfg(r->ws)->sandbox_id, body, sizeof(body));
		r->kind = REPORT_WEBHOOK;
		r->attempt = 0;
		if (n >= 0 && report_request(r, &r->set.hook, "application/json", body, (size_t)n,
		                  NULL, 0) == 0) {
			report_attempt(r);
			return;
		}
		r->m->events_failed++;
		r->qhead = (r->qhead + 1) % r->qcap;
		r->qlen--;
	}
	if (r->otlp_due) {
		r->otlp_due = false;
		r->kind = REPORT_OTLP;
		r->attempt = 0;
		if (report_otlp_request(r) == 0) {
			report_attempt(r);
			return;
		}
		r->m->otlp_failures++;
	}
	if (r->draining)
		event_base_loopbreak(r->base);
}

static void
report_otlp_cb(evutil_socket_t fd, short what, void *arg)
{
	struct report *r = arg;

	(void)fd;
	(void)what;
	r->otlp_due = true;
	report_kick(r);
}

static void
report_drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct report *r = arg;

	(void)fd;
	(void)what;
	if (r->qlen > 0)
		log_msg(LOG_WARN, "report", "drain_timeout",
		    "%zu event(s) not delivered within %d s of the stop", r->qlen, REPORT_DRAIN_S);
	event_base_loopbreak(r->base);
}

/* ------------------------------------------------------------- interface */

void
report_event(struct report *r, const struct chan_event *e)
{
	if (r->set.webhook == false)
		return;
	if (r->qlen == r->qcap) {
		if (r->m->events_dropped++ % 100 == 0)
			log_msg(LOG_WARN, "report", "event_queue_full",
			    "blocked-event queue full; dropping hostname %s (%llu dropped so far)",
			    e->name[0] != '\0' ? e->name : "(an address)",
			    (unsigned long long)r->m->events_dropped);
		return;
	}
	r->q[(r->qhead + r->qlen) % r->qcap] = *e;
	r->qlen++;
	report_kick(r);
}

void
report_drain(struct report *r)
{
	struct timeval tv = {REPORT_DRAIN_S, 0};

	r->draining = true;
	/* A last export, as OpenTelemetry SDKs flush at shutdown. */
	if (r->set.otlp.enabled)
		r->otlp_due = true;
	evtimer_add(r->ev_drain, &tv);
	report_kick(r);
}

struct report *
report_new(struct wstate *ws, char *err, size_t errlen)
{
	struct report *r = calloc(1, sizeof(*r));
	unsigned fams = 0;

	if (r == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	r->ws = ws;
	r->base = wstate_base(ws);
	r->m = wstate_metrics(ws);
	r->qcap = wstate_cfg(ws)->report_queue;
	if (r->qcap == 0 || r->qcap > REPORT_QUEUE)
		r->qcap = REPORT_QUEUE;
	if (config_report(wstate_cfg(ws), &r->set, err, errlen) != 0)
		goto fail;
	if (r->set.webhook)
		fams |= r->set.hook.family == AF_INET ? SOCKPOOL_V4 : SOCKPOOL_V6;
	if (r->set.otlp.enabled)
		fams |= r->set.otlp.url.family == AF_INET ? SOCKPOOL_V4 : SOCKPOOL_V6;
	r->req = evbuffer_new();
	r->otlp_buf = malloc(OTLP_MAX_BODY);
	r->ev_timer = evtimer_new(r->base, report_timer_cb, r);
	r->ev_drain = evtimer_new(r->base, report_drain_cb, r);
	r->ev_otlp = event_new(r->base, -1, EV_PERSIST, report_otlp_cb, r);
	r->pool = sockpool_new(r->base, wstate_chan(ws), SOCK_STREAM, 1, fams);
	if (r->req == NULL || r->otlp_buf == NULL || r->ev_timer == NULL || r->ev_drain == NULL ||
	    r->ev_otlp == NULL || r->pool == NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	r->start_ns = r->last_ns = report_now_ns();
	wstate_metrics_sum(ws, &r->prev);
	if (r->set.otlp.enabled) {
		struct timeval tv = {
		    r->set.otlp.interval_ms / 1000, (r->set.otlp.interval_ms % 1000) * 1000};

		event_add(r->ev_otlp, &tv);
	}
	{
		struct log_line l;

		log_begin(&l, LOG_INFO, "report", "report_start");
		if (r->set.webhook)
			log_str(&l, "webhook", r->set.hook.authority);
		if (r->set.otlp.enabled) {
			log_str(&l, "otlp", r->set.otlp.url.authority);
			log_uint(&l, "interval_ms", r->set.otlp.interval_ms);
		}
		log_end(&l);
	}
	wstate_report_ready(ws, "reports");
	return r;
fail:
	report_free(r);
	return NULL;
}

void
report_free(struct report *r)
{
	if (r == NULL)
		return;
	if (r->bev != NULL)
		bufferevent_free(r->bev);
	sockpool_free(r->pool);
	if (r->ev_timer != NULL)
		event_free(r->ev_timer);
	if (r->ev_drain != NULL)
		event_free(r->ev_drain);
	if (r->ev_otlp != NULL)
		event_free(r->ev_otlp);
	if (r->req != NULL)
		evbuffer_free(r->req);
	free(r->otlp_buf);
	/* The collector's headers may hold its credentials. */
	explicit_bzero(&r->set, sizeof(r->set));
	free(r);
}
