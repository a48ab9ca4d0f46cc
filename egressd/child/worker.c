/*
 * The unprivileged children (one per role: control, dns, intercept): each
 * holds no capability and runs under the worker uid. Each owns one kind
 * of network input (the control API, DNS, intercepted connections) and
 * asks the parent, over its channel, for what its role may ask. None
 * touches netlink.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "egressd/child/wchan.h"
#include "egressd/child/worker.h"
#include "egressd/child/wstate.h"
#include "egressd/common/log.h"
#include "egressd/control/api.h"
#include "egressd/dns/dnsproxy.h"
#include "egressd/intercept/wintercept.h"
#include "egressd/report/report.h"

/* ---- each role's service, plugged into its wstate ---- */

static void *
worker_control_start(struct wstate *ws, char *err, size_t errlen)
{
	return api_new(ws, err, errlen);
}

static void
worker_control_stop(void *svc)
{
	api_free(svc);
}

static void
worker_control_policy(void *svc)
{
	api_policy_changed(svc);
}

static void
worker_control_tick(void *svc)
{
	api_tick(svc);
}

static void
worker_dns_ready_cb(void *arg)
{
	wstate_report_ready(arg, "DNS proxy");
}

static void *
worker_dns_start(struct wstate *ws, char *err, size_t errlen)
{
	return dnsproxy_new(ws, worker_dns_ready_cb, ws, NULL, err, errlen);
}

static void
worker_dns_stop(void *svc)
{
	dnsproxy_free(svc);
}

static void
worker_dns_nflog(void *svc, const struct chan_nflog *r)
{
	dnsproxy_nflog(svc, r);
}

static void *
worker_intercept_start(struct wstate *ws, char *err, size_t errlen)
{
	struct wintercept *w = wintercept_new(ws, err, errlen);

	if (w != NULL && wintercept_ready(w))
		wstate_report_ready(ws, "interception");
	return w;
}

static void
worker_intercept_stop(void *svc)
{
	wintercept_free(svc);
}

static void
worker_intercept_changed(void *svc)
{
	wintercept_state_changed(svc);
}

static int
worker_intercept_proxy(void *svc, const struct chan_learn *l, size_t n)
{
	return wintercept_proxy(svc, l, n);
}

static int
worker_intercept_ca(void *svc)
{
	return wintercept_ca_changed(svc);
}

static void *
worker_report_start(struct wstate *ws, char *err, size_t errlen)
{
	return report_new(ws, err, errlen);
}

static void
worker_report_stop(void *svc)
{
	report_free(svc);
}

static void
worker_report_event(void *svc, const struct chan_event *e)
{
	report_event(svc, e);
}

static const struct wstate_service worker_services[CHAN_ROLE_MAX] = {
    [CHAN_ROLE_CONTROL] = {worker_control_start, worker_control_stop, worker_control_policy,
        worker_control_tick, NULL, NULL, NULL, NULL},
    [CHAN_ROLE_DNS] = {worker_dns_start, worker_dns_stop, NULL, NULL, NULL, NULL, NULL,
        worker_dns_nflog},
    [CHAN_ROLE_INTERCEPT] = {worker_intercept_start, worker_intercept_stop,
        worker_intercept_changed, NULL, NULL, worker_intercept_proxy, worker_intercept_ca, NULL},
    [CHAN_ROLE_REPORT] = {worker_report_start, worker_report_stop, NULL, NULL, worker_report_event,
        NULL, NULL, NULL},
};

static void
worker_dead_cb(const char *why, void *arg)
{
	log_msg(LOG_ERROR, "proc", "chan_lost", "parent channel lost: %s", why);
	wstate_fail(arg, 71);
}

static void
worker_sigterm_cb(evutil_socket_t sig, short what, void *arg)
{
	log_msg(LOG_INFO, "proc", "stop", "%s stopping", chan_role_name(wstate_role(arg)));
	/* The report process first delivers what is queued (bounded). */
	if (wstate_role(arg) == CHAN_ROLE_REPORT && wstate_svc(arg) != NULL) {
		report_drain(wstate_svc(arg));
		return;
	}
	event_base_loopbreak(wstate_base(arg));
}

static void
worker_sighup_cb(evutil_socket_t sig, short what, void *arg)
{
	if (wstate_role(arg) == CHAN_ROLE_CONTROL)
		wstate_reload(arg, "SIGHUP");
}

/* Seconds the parent has to hand over the policy in force. */
#define WORKER_HANDOVER_S 10

/*
 * The parent's first message(s): the policy in force (CHAN_POLICY chunks
 * of CHAN_ID_HANDOVER; total 0 when there is none yet). Read before
 * anything else.
 */
static int
worker_inherit(int chanfd, char **doc, size_t *len)
{
	union chan_msg *m = malloc(sizeof(*m));
	char *buf = NULL;
	uint32_t have = 0;
	int rc = -1;

	*doc = NULL;
	*len = 0;
	if (m == NULL)
		return -1;
	for (;;) {
		struct pollfd pfd = {.fd = chanfd, .events = POLLIN};
		const char *why = "";
		int passfd = -1;
		enum chan_status st;

		if (poll(&pfd, 1, WORKER_HANDOVER_S * 1000) <= 0) {
			log_msg(LOG_ERROR, "proc", "startup", "no policy handover from the parent");
			break;
		}
		st = chan_recv(chanfd, m, CHAN_TO_WORKER, &passfd, &why);
		if (st == CHAN_AGAIN)
			continue;
		if (st != CHAN_OK || m->hdr.type != CHAN_POLICY || m->hdr.id != CHAN_ID_HANDOVER ||
		    m->policy.offset != have || (have > 0 && m->policy.total != *len)) {
			if (passfd >= 0)
				close(passfd);
			log_msg(LOG_ERROR, "proc", "startup", "bad policy handover: %s",
			    st == CHAN_OK ? "out of sequence" : why);
			break;
		}
		if (have == 0) {
			*len = m->policy.total;
			if ((buf = malloc(*len ? *len : 1)) == NULL)
				break;
		}
		memcpy(buf + have, m->policy.data, m->policy.len);
		have += m->policy.len;
		if ((m->hdr.flags & CHAN_POLICY_MORE) == 0) {
			rc = 0;
			break;
		}
	}
	free(m);
	if (rc != 0 || *len == 0) {
		free(buf);
		buf = NULL;
		if (rc != 0)
			*len = 0;
	}
	*doc = buf;
	return rc;
}

/* The end of a loop turn that logged: its deferred lines are written. */
static void
worker_log_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what, (void)arg;
	log_flush();
}

static void
worker_log_kick(void *arg)
{
	event_active(arg, EV_TIMEOUT, 0);
}

/*
 * The intercept's loop applies its epoll changes once per turn (libevent's
 * change list): write interest a TLS leg's socket gains and loses within
 * one turn (vault/intercept.c writes those sockets at the turn's end)
 * costs no epoll_ctl. No descriptor of it is ever dup()ed, the one case
 * the change list gets wrong.
 */
static struct event_base *
worker_base(enum chan_role role)
{
	struct event_config *ec;
	struct event_base *base;

	if (role != CHAN_ROLE_INTERCEPT)
		return event_base_new();
	if ((ec = event_config_new()) == NULL)
		return NULL;
	(void)event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
	base = event_base_new_with_config(ec);
	event_config_free(ec);
	return base;
}

int
worker_main(const struct config *cfg, int chanfd, enum chan_role role)
{
	struct event_base *base;
	struct wchan *chan = NULL;
	struct wstate *ws = NULL;
	struct event *ev_term, *ev_int, *ev_hup, *ev_log;
	char *inherit;
	size_t inherit_len;
	int rc;

	signal(SIGPIPE, SIG_IGN);
	if ((unsigned)role >= CHAN_ROLE_MAX || worker_inherit(chanfd, &inherit, &inherit_len) != 0)
		return 71;
	base = worker_base(role);
	if (base == NULL) {
		log_msg(LOG_ERROR, "proc", "startup", "event_base_new failed");
		free(inherit);
		return 1;
	}
	ws = wstate_new(cfg, role, base, NULL, &worker_services[role]);
	if (ws != NULL)
		chan = wchan_new(base, chanfd, worker_dead_cb, ws);
	if (ws == NULL || chan == NULL) {
		log_msg(LOG_ERROR, "proc", "startup", "channel setup failed");
		free(inherit);
		wstate_free(ws);
		event_base_free(base);
		return 1;
	}
	wstate_set_chan(ws, chan);
	wstate_set_inherit(ws, inherit, inherit_len);
	/*
	 * Debug and info lines (an audit line per credentialed request) leave
	 * in one write per loop turn, after the callbacks that logged them.
	 */
	if ((ev_log = event_new(base, -1, 0, worker_log_flush_cb, NULL)) != NULL)
		log_defer(worker_log_kick, ev_log);
	ev_term = evsignal_new(base, SIGTERM, worker_sigterm_cb, ws);
	ev_int = evsignal_new(base, SIGINT, worker_sigterm_cb, ws);
	ev_hup = evsignal_new(base, SIGHUP, worker_sighup_cb, ws);
	event_add(ev_term, NULL);
	event_add(ev_int, NULL);
	event_add(ev_hup, NULL);

	if (wstate_start(ws) != 0)
		wstate_fail(ws, 1);
	else
		event_base_dispatch(base);
	rc = wstate_exit_code(ws);
	wstate_free(ws);
	log_defer(NULL, NULL); /* every deferred line written: the child ends with _exit */
	if (ev_log != NULL)
		event_free(ev_log);
	event_free(ev_term);
	event_free(ev_int);
	event_free(ev_hup);
	wchan_free(chan);
	event_base_free(base);
	return rc;
}
