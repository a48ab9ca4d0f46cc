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

#include "egressd/common/log.h"
#include "egressd/common/shstat.h"
#include "egressd/child/wchan.h"
#include "egressd/child/worker.h"
#include "egressd/child/wstate.h"

static void
worker_dead_cb(const char *why, void *arg)
{
	struct wstate *ws = arg;

	log_msg(LOG_ERROR, "proc", "chan_lost", "parent channel lost: %s", why);
	ws->exit_code = 71;
	event_base_loopbreak(ws->base);
}

static void
worker_sigterm_cb(evutil_socket_t sig, short what, void *arg)
{
	struct wstate *ws = arg;

	log_msg(LOG_INFO, "proc", "stop", "%s stopping", chan_role_name(ws->role));
	event_base_loopbreak(ws->base);
}

static void
worker_sighup_cb(evutil_socket_t sig, short what, void *arg)
{
	struct wstate *ws = arg;

	if (ws->role == CHAN_ROLE_CONTROL)
		wstate_reload(ws, "SIGHUP");
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

int
worker_main(const struct config *cfg, int chanfd, enum chan_role role)
{
	struct wstate ws;
	struct event *ev_term, *ev_int, *ev_hup;

	signal(SIGPIPE, SIG_IGN);
	memset(&ws, 0, sizeof(ws));
	ws.cfg = cfg;
	ws.role = role;
	ws.metrics = shstat_view()->own != NULL ? shstat_view()->own : &ws.metrics_local;
	if (worker_inherit(chanfd, &ws.inherit, &ws.inherit_len) != 0)
		return 71;
	ws.base = event_base_new();
	if (ws.base == NULL) {
		log_msg(LOG_ERROR, "proc", "startup", "event_base_new failed");
		return 1;
	}
	ws.chan = wchan_new(ws.base, chanfd, worker_dead_cb, &ws);
	if (ws.chan == NULL) {
		log_msg(LOG_ERROR, "proc", "startup", "channel setup failed");
		return 1;
	}
	ev_term = evsignal_new(ws.base, SIGTERM, worker_sigterm_cb, &ws);
	ev_int = evsignal_new(ws.base, SIGINT, worker_sigterm_cb, &ws);
	ev_hup = evsignal_new(ws.base, SIGHUP, worker_sighup_cb, &ws);
	event_add(ev_term, NULL);
	event_add(ev_int, NULL);
	event_add(ev_hup, NULL);

	if (wstate_start(&ws) != 0) {
		ws.exit_code = 1;
	} else
		event_base_dispatch(ws.base);

	wstate_stop(&ws);
	event_free(ev_term);
	event_free(ev_int);
	event_free(ev_hup);
	wchan_free(ws.chan);
	event_base_free(ws.base);
	free(ws.inherit);
	return ws.exit_code;
}
