/*
 * The unprivileged worker process: it holds no capability and runs under
 * its own uid. It owns every piece of network input (DNS, the control API,
 * intercepted connections) and asks the parent, over the channel, for
 * marked sockets and for nft changes. It never touches netlink.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "egressd/common/log.h"
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

	log_msg(LOG_INFO, "proc", "stop", "worker stopping");
	event_base_loopbreak(ws->base);
}

static void
worker_sighup_cb(evutil_socket_t sig, short what, void *arg)
{
	struct wstate *ws = arg;

	wstate_reload(ws, "SIGHUP");
}

int
worker_main(const struct config *cfg, int chanfd)
{
	struct wstate ws;
	struct event *ev_term, *ev_int, *ev_hup;

	signal(SIGPIPE, SIG_IGN);
	memset(&ws, 0, sizeof(ws));
	ws.cfg = cfg;
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
	return ws.exit_code;
}
