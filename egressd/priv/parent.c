/*
 * The privileged parent process. It keeps CAP_NET_ADMIN, installs the nft
 * table before anything else runs, then forks the worker and serves it:
 * marked sockets (the only way the worker's own traffic is exempted) and
 * validated nft changes. It parses no network input: everything it acts
 * on is a fixed-size channel message that passed chan_validate(), and a
 * message that does not is fatal for the worker, never obeyed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "certs/ca.h"
#include "certs/leaf.h"
#include "certs/trust.h"
#include "egressd/common/chan.h"
#include "egressd/common/ownnet.h"
#include "egressd/priv/capwatch.h"
#include "egressd/priv/enforce.h"
#include "egressd/priv/listen.h"
#include "egressd/common/log.h"
#include "egressd/priv/parent.h"
#include "egressd/priv/ppolicy.h"
#include "egressd/priv/privsep.h"
#include "egressd/priv/startcheck.h"

/* Restart backoff of a crashed worker. */
#define PARENT_BACKOFF_MIN_MS 100
#define PARENT_BACKOFF_MAX_MS 10000
/* A worker that lived this long resets the backoff. */
#define PARENT_STABLE_S 30
/*
 * A worker that dies before it was ever ready is retried this many times
 * (a port still held by a previous instance frees itself quickly), then
 * egressd gives up loudly: a bad configuration does not heal by looping.
 */
#define PARENT_STARTUP_TRIES 5
/* Grace between SIGTERM and SIGKILL of the worker on shutdown. */
#define PARENT_STOP_GRACE_MS 700
/* How often the ruleset is checked for changes made by someone else. */
#define PARENT_WATCHDOG_MS 1000

struct parent {
	struct config *cfg;
	parent_worker_fn worker_fn;
	struct event_base *base;
	struct enforce *enf;
	uid_t wuid;
	gid_t wgid;

	pid_t worker;
	int chanfd;
	struct event *ev_chan;
	time_t started;
	unsigned backoff_ms;
	struct event *ev_restart;
	struct event *ev_kill;
	struct event *ev_watch;
	unsigned tampers;
	int ownfd; /* told about address and route changes */
	struct event *ev_own;
	bool own_dirty; /* the own networks changed and are not applied yet */
	bool stopping;
	bool ready;
	bool ever_ready;           /* a worker reached READY since start */
	unsigned startup_failures; /* workers that died before the first READY */
	int exit_code;

	/* The policy in force, as the parent decoded it. */
	struct ppolicy *pp;

	/* Mints the worker's leaves: the CA private key stays here. */
	struct leaf_cache *minter;

	/* Workload processes with NET_ADMIN or NET_RAW, reported once each. */
	struct capwatch *capwatch;

	/* Learned addresses being batched; one refused makes the batch refused. */
	struct chan_learn learns[CHAN_MAX_BATCH];
	size_t nlearn;
	const char *learn_refused; /* why the batch is refused, or NULL */
	size_t learn_refused_at;
	uint64_t learns_refused;
};

static void parent_spawn(struct parent *p);

/* Forget a batch or a document the worker was sending. */
static void
parent_chan_reset(struct parent *p)
{
	ppolicy_rx_reset(p->pp);
	p->nlearn = 0;
	p->learn_refused = NULL;
}

static void
parent_ready_file(struct parent *p, bool present)
{
	const char *path = p->cfg->ready_file;
	int fd;

	if (path[0] == '\0')
		return;
	if (!present) {
		unlink(path);
		return;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		log_msg(LOG_ERROR, "proc", "ready_file", "cannot create ready file: %s",
		    strerror(errno));
		return;
	}
	if (write(fd, "ready\n", 6) != 6)
		log_msg(LOG_ERROR, "proc", "ready_file", "short write to ready file");
	close(fd);
}

/* Kill the worker for a protocol violation: it may be compromised. */
static void
parent_violation(struct parent *p, const char *why)
{
	struct log_line l;

	log_begin(&l, LOG_ERROR, "proc", "chan_violation");
	log_str(&l, "why", why);
	log_int(&l, "worker", p->worker);
	log_end(&l);
	if (p->worker > 0)
		kill(p->worker, SIGKILL);
	if (p->ev_chan != NULL) {
		event_free(p->ev_chan);
		p->ev_chan = NULL;
	}
	if (p->chanfd >= 0) {
		close(p->chanfd);
		p->chanfd = -1;
	}
	parent_chan_reset(p);
}

static void
parent_reply(struct parent *p, uint32_t id, unsigned req_type, int err, const char *msg)
{
	struct chan_result r;

	memset(&r, 0, sizeof(r));
	r.hdr.type = CHAN_RESULT;
	r.hdr.id = id;
	r.req_type = (uint16_t)req_type;
	r.err = err;
	snprintf(r.msg, sizeof(r.msg), "%s", msg ? msg : "");
	if (chan_send(p->chanfd, &r, -1) != 0)
		log_msg(LOG_WARN, "proc", "chan_send", "reply failed: %s", strerror(errno));
}

/* Marked-socket factory: the worker's upstream sockets carry our mark. */
static void
parent_socket(struct parent *p, const struct chan_socket_req *req)
{
	struct chan_socket_rep rep;
	int fd, err = 0;
	uint32_t mark = p->cfg->mark;

	memset(&rep, 0, sizeof(rep));
	rep.hdr.type = CHAN_SOCKET_REP;
	rep.hdr.id = req->hdr.id;
	fd = socket(req->family, req->socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		err = errno;
	else if (setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) != 0) {
		err = errno;
		close(fd);
		fd = -1;
	}
	rep.err = err;
	if (chan_send(p->chanfd, &rep, fd) != 0)
		log_msg(LOG_WARN, "proc", "chan_send", "socket reply failed: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
}

static void
parent_learn_flush(struct parent *p, uint32_t id)
{
	char err[256] = "";
	int rc = 0;

	if (p->learn_refused != NULL) {
		struct log_line l;
		char txt[INET6_ADDRSTRLEN];

		p->learns_refused++;
		const struct chan_learn *bad = &p->learns[p->learn_refused_at];

		inet_ntop(bad->family, bad->addr, txt, sizeof(txt));
		log_begin(&l, LOG_WARN, "policy", "learn_refused");
		log_str(&l, "name", bad->name);
		log_str(&l, "addr", txt);
		log_str(&l, "why", p->learn_refused);
		log_uint(&l, "count", p->learns_refused);
		log_end(&l);
		parent_reply(p, id, CHAN_LEARN, EPERM, p->learn_refused);
	} else {
		rc = enforce_learn(p->enf, p->learns, p->nlearn, err, sizeof(err));
		if (rc != 0)
			log_msg(LOG_ERROR, "nft", "nft_error", "%s", err);
		else
			ppolicy_learned(p->pp, p->learns, p->nlearn);
		parent_reply(p, id, CHAN_LEARN, rc == 0 ? 0 : EIO, rc == 0 ? "" : err);
	}
	p->nlearn = 0;
	p->learn_refused = NULL;
}

/* Batch learns, each checked against the parent's own copy of the policy. */
static void
parent_learn(struct parent *p, const struct chan_learn *l)
{
	const char *why;

	if (p->nlearn > 0 && l->hdr.id != p->learns[0].hdr.id) {
		parent_violation(p, "learn batch interleaved with another");
		return;
	}
	if (p->nlearn >= CHAN_MAX_BATCH) {
		parent_violation(p, "learn batch too long");
		return;
	}
	p->learns[p->nlearn] = *l;
	if (p->learn_refused == NULL &&
	    ppolicy_learn_check(p->pp, &p->learns[p->nlearn], &why) != 0) {
		p->learn_refused = why;
		p->learn_refused_at = p->nlearn;
	}
	p->nlearn++;
	if ((l->hdr.flags & CHAN_LEARN_MORE) == 0)
		parent_learn_flush(p, l->hdr.id);
}

/* A leaf for the worker's key, for a host the policy in force allows. */
static void
parent_leaf(struct parent *p, const struct chan_leaf_req *r)
{
	struct chan_leaf_rep *rep;
	char err[256] = "";
	X509 *x = NULL;
	int n;

	if (!p->cfg->intercept || p->cfg->ca == NULL) {
		parent_violation(p, "leaf request without interception");
		return;
	}
	if ((rep = calloc(1, sizeof(*rep))) == NULL)
		return; /* the worker's request times out with its connection */
	rep->hdr.type = CHAN_LEAF_REP;
	rep->hdr.id = r->hdr.id;
	if (p->minter == NULL)
		p->minter = leaf_cache_new(p->cfg->ca, NULL, err, sizeof(err));
	if (p->minter != NULL && !ppolicy_name_allowed(p->pp, r->name))
		snprintf(err, sizeof(err), "host not allowed by the policy in force");
	else if (p->minter != NULL)
		x = leaf_cache_mint_for(
		    p->minter, r->name, strlen(r->name), r->key, r->key_len, err, sizeof(err));
	if (x != NULL && (n = i2d_X509(x, NULL)) > 0 && n <= CHAN_LEAF_DER_MAX) {
		unsigned char *d = rep->der;

		rep->der_len = (uint32_t)i2d_X509(x, &d);
	}
	X509_free(x);
	if (rep->der_len == 0) {
		struct log_line l;

		rep->err = EPERM;
		log_begin(&l, LOG_WARN, "vault", "leaf_refused");
		log_str(&l, "host", r->name);
		log_str(&l, "why", err[0] ? err : "certificate too large");
		log_end(&l);
	}
	if (chan_send(p->chanfd, rep, -1) != 0)
		log_msg(LOG_WARN, "proc", "chan_send", "leaf reply failed: %s", strerror(errno));
	free(rep);
}

static void
parent_policy(struct parent *p, const struct chan_policy *c)
{
	char msg[CHAN_ERRMSG_LEN];
	const char *why = "";
	int err = 0;

	switch (ppolicy_chunk(p->pp, c, &err, msg, sizeof(msg), &why)) {
	case PPOLICY_MORE:
		return;
	case PPOLICY_VIOLATION:
		parent_violation(p, why);
		return;
	case PPOLICY_DONE:
		parent_reply(p, c->hdr.id, CHAN_POLICY, err, msg);
		return;
	}
}

static void
parent_dispatch(struct parent *p, const union chan_msg *m)
{
	switch (m->hdr.type) {
	case CHAN_SOCKET_REQ:
		parent_socket(p, &m->socket_req);
		break;
	case CHAN_LEARN:
		parent_learn(p, &m->learn);
		break;
	case CHAN_POLICY:
		parent_policy(p, &m->policy);
		break;
	case CHAN_LEAF_REQ:
		parent_leaf(p, &m->leaf_req);
		break;
	case CHAN_READY:
		if (!p->ready) {
			struct log_line l;
			p->ready = true;
			p->ever_ready = true;
			parent_ready_file(p, true);
			log_begin(&l, LOG_INFO, "proc", "ready");
			log_str(&l, "mode", config_mode_name(p->cfg->mode));
			log_end(&l);
		}
		break;
	default:
		/* chan_validate() refuses every other type in this direction. */
		parent_violation(p, "unexpected message type");
		break;
	}
}

static void
parent_chan_cb(evutil_socket_t fd, short what, void *arg)
{
	struct parent *p = arg;

	/* Bounded per wakeup so that signals are served under load. */
	for (int i = 0; i < 256 && p->chanfd >= 0; i++) {
		union chan_msg m;
		int passfd;
		const char *why;

		switch (chan_recv(p->chanfd, &m, CHAN_TO_PARENT, &passfd, &why)) {
		case CHAN_AGAIN:
			return;
		case CHAN_EOF:
			event_free(p->ev_chan);
			p->ev_chan = NULL;
			close(p->chanfd);
			p->chanfd = -1;
			return;
		case CHAN_INVALID:
		case CHAN_FDLOST: /* the worker passes the parent no descriptors */
			parent_violation(p, why);
			return;
		case CHAN_OK:
			parent_dispatch(p, &m);
			break;
		}
	}
}

/* Log the own networks in force. */
static void
parent_own_log(const struct addrclass_own *own, const char *event)
{
	char txt[ADDRCLASS_MAX_OWN * 24];
	struct log_line l;

	ownnet_format(own, txt, sizeof(txt));
	log_begin(&l, LOG_INFO, "nft", event);
	log_uint(&l, "count", own->n);
	log_str(&l, "prefixes", txt);
	log_end(&l);
}

/*
 * Read the own networks again and put them in the deny sets if they
 * changed. A failure leaves the previous ones in force and is retried at
 * the next change or watchdog tick.
 */
static void
parent_own_refresh(struct parent *p)
{
	struct addrclass_own own;
	char err[256];
	bool changed;

	if (ownnet_scan(&own, err, sizeof(err)) != 0 ||
	    enforce_set_own(p->enf, &own, &changed, err, sizeof(err)) != 0) {
		log_msg(LOG_ERROR, "nft", "own_networks_error",
		    "own networks not updated (the previous ones stay denied): %s", err);
		return;
	}
	p->own_dirty = false;
	if (changed)
		parent_own_log(&own, "own_networks_change");
}

static void
parent_own_cb(evutil_socket_t fd, short what, void *arg)
{
	struct parent *p = arg;

	if (ownnet_watch_drain(p->ownfd)) {
		p->own_dirty = true;
		parent_own_refresh(p);
	}
}

/*
 * Watchdog: only a process with CAP_NET_ADMIN can change the ruleset. If
 * the generation moved without us, the workload was given NET_ADMIN (a
 * setup egressd cannot defend from inside the namespace): say so loudly
 * and put the table back. Enforcement must then move host-side.
 */
static void
parent_watch_cb(evutil_socket_t fd, short what, void *arg)
{
	struct parent *p = arg;
	char err[256];
	struct log_line l;

	ppolicy_expire(p->pp);
	capwatch_scan(p->capwatch, getpid(), p->worker);
	if (p->own_dirty)
		parent_own_refresh(p);
	if (!enforce_tampered(p->enf))
		return;
	p->tampers++;
	log_begin(&l, LOG_ERROR, "nft", "nft_tamper");
	log_str(&l, "msg",
	    "the nft ruleset was changed by another process: the workload may hold "
	    "CAP_NET_ADMIN (unsafe_capabilities); reinstalling the table");
	log_uint(&l, "count", p->tampers);
	log_end(&l);
	if (enforce_repair(p->enf, err, sizeof(err)) != 0)
		log_msg(LOG_ERROR, "nft", "nft_error", "repair failed: %s", err);
}

static void
parent_restart_cb(evutil_socket_t fd, short what, void *arg)
{
	parent_spawn(arg);
}

static void
parent_worker_gone(struct parent *p, int status)
{
	struct log_line l;
	bool stable = time(NULL) - p->started >= PARENT_STABLE_S;

	log_begin(&l, p->stopping ? LOG_INFO : LOG_ERROR, "proc", "worker_exit");
	log_int(&l, "pid", p->worker);
	if (WIFEXITED(status))
		log_int(&l, "status", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		log_int(&l, "signal", WTERMSIG(status));
	log_end(&l);
	p->worker = -1;
	if (p->ev_chan != NULL) {
		event_free(p->ev_chan);
		p->ev_chan = NULL;
	}
	if (p->chanfd >= 0) {
		close(p->chanfd);
		p->chanfd = -1;
	}
	parent_chan_reset(p);
	if (p->ready) {
		/* The nft table stays: a dead worker means no egress, never open egress. */
		p->ready = false;
		parent_ready_file(p, false);
	}
	if (p->stopping) {
		event_base_loopbreak(p->base);
		return;
	}
	/*
	 * A worker that keeps failing before it was ever ready fails on its
	 * configuration (a bad policy, a port taken for good): looping cannot
	 * help. Refuse to run, loudly; the table stays, egress stays blocked.
	 */
	if (!p->ever_ready && ++p->startup_failures >= PARENT_STARTUP_TRIES) {
		log_msg(LOG_ERROR, "proc", "startup_failed",
		    "the worker failed %u times before it was ready; see the errors above",
		    p->startup_failures);
		p->exit_code = 1;
		event_base_loopbreak(p->base);
		return;
	}
	if (stable)
		p->backoff_ms = PARENT_BACKOFF_MIN_MS;
	{
		struct timeval tv = {p->backoff_ms / 1000, (p->backoff_ms % 1000) * 1000};
		log_msg(LOG_WARN, "proc", "worker_restart", "restarting the worker in %u ms",
		    p->backoff_ms);
		evtimer_add(p->ev_restart, &tv);
	}
	p->backoff_ms *= 2;
	if (p->backoff_ms > PARENT_BACKOFF_MAX_MS)
		p->backoff_ms = PARENT_BACKOFF_MAX_MS;
}

static void
parent_sigchld_cb(evutil_socket_t sig, short what, void *arg)
{
	struct parent *p = arg;
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		if (pid == p->worker)
			parent_worker_gone(p, status);
	}
}

static void
parent_kill_cb(evutil_socket_t fd, short what, void *arg)
{
	struct parent *p = arg;

	if (p->worker > 0) {
		log_msg(LOG_WARN, "proc", "worker_kill", "worker did not stop in time");
		kill(p->worker, SIGKILL);
	}
}

static void
parent_sigterm_cb(evutil_socket_t sig, short what, void *arg)
{
	struct parent *p = arg;
	struct timeval tv = {0, PARENT_STOP_GRACE_MS * 1000};

	if (p->stopping)
		return;
	p->stopping = true;
	log_msg(LOG_INFO, "proc", "stop", "stopping on signal %d", (int)sig);
	evtimer_del(p->ev_restart);
	if (p->worker <= 0) {
		event_base_loopbreak(p->base);
		return;
	}
	kill(p->worker, SIGTERM);
	evtimer_add(p->ev_kill, &tv);
}

static void
parent_sighup_cb(evutil_socket_t sig, short what, void *arg)
{
	struct parent *p = arg;

	log_msg(LOG_INFO, "proc", "reload", "SIGHUP: asking the worker to reload");
	if (p->worker > 0)
		kill(p->worker, SIGHUP);
}

/* In the child: forget the parent's loop without touching its kernel state. */
static void
parent_child_reset(struct event_base *base, int keepfd, const struct listen_set *ls)
{
	sigset_t all;
	struct sigaction sa;

	/*
	 * The event base's epoll and signal fds are shared with the parent:
	 * close our copies first, so that freeing the base below cannot touch
	 * the parent's epoll registrations (it only meets closed fds).
	 */
	for (int fd = 3; fd < 1024; fd++)
		if (fd != keepfd && !listen_is(ls, fd))
			close(fd);
	event_base_free(base);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (int s = 1; s < NSIG; s++)
		sigaction(s, &sa, NULL);
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
}

static void
parent_spawn(struct parent *p)
{
	int sv[2];
	pid_t pid, self;

	if (chan_pair(sv) != 0) {
		log_msg(LOG_ERROR, "proc", "spawn", "socketpair: %s", strerror(errno));
		goto retry;
	}
	self = getpid();
	pid = fork();
	if (pid < 0) {
		log_msg(LOG_ERROR, "proc", "spawn", "fork: %s", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		goto retry;
	}
	if (pid == 0) {
		char err[256];

		parent_child_reset(p->base, sv[1], &p->cfg->listen);
		log_set_role("worker");
		/* The worker never holds the CA key: the parent mints its leaves. */
		ca_forget_key(p->cfg->ca);
		if (privsep_drop(p->wuid, p->wgid, self, err, sizeof(err)) != 0) {
			log_msg(LOG_ERROR, "proc", "privdrop", "%s", err);
			_exit(70);
		}
		_exit(p->worker_fn(p->cfg, sv[1]));
	}
	close(sv[1]);
	if (fcntl(sv[0], F_SETFL, O_NONBLOCK) != 0) {
		log_msg(LOG_ERROR, "proc", "spawn", "fcntl: %s", strerror(errno));
	}
	/* The policy in force first: a new worker starts from it, not from its sources. */
	if (ppolicy_handover(p->pp, sv[0]) != 0)
		log_msg(LOG_ERROR, "proc", "spawn", "policy handover to the worker failed: %s",
		    strerror(errno));
	p->worker = pid;
	p->chanfd = sv[0];
	p->started = time(NULL);
	p->ev_chan = event_new(p->base, sv[0], EV_READ | EV_PERSIST, parent_chan_cb, p);
	event_add(p->ev_chan, NULL);
	{
		struct log_line l;
		log_begin(&l, LOG_INFO, "proc", "worker_start");
		log_int(&l, "pid", pid);
		log_uint(&l, "uid", p->wuid);
		log_uint(&l, "gid", p->wgid);
		log_end(&l);
	}
	return;
retry : {
	struct timeval tv = {1, 0};
	evtimer_add(p->ev_restart, &tv);
}
}

/*
 * Write the sandbox CA certificate where the workload reads it. The parent
 * made the CA, so it writes the export itself, whatever a previous run
 * left in the directory (another owner, stale temporary files); it says
 * which path to fix when it cannot.
 */
static int
parent_export_ca(const struct config *cfg, char *err, size_t errlen)
{
	char dir[PATH_MAX], e[256];
	char *slash;

	if (cfg->ca_export[0] == '\0')
		return 0;
	snprintf(dir, sizeof(dir), "%s", cfg->ca_export);
	slash = strrchr(dir, '/');
	if (slash != NULL && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
			snprintf(err, errlen,
			    "cannot create the CA export directory %.200s: %s (uid %u); set "
			    "EGRESSD_CA_EXPORT to a writable path",
			    dir, strerror(errno), (unsigned)geteuid());
			return -1;
		}
	}
	if (ca_export_pem(cfg->ca, cfg->ca_export, e, sizeof(e)) != 0) {
		snprintf(err, errlen,
		    "cannot write the CA export %.200s: %.120s (uid %u); make its "
		    "directory writable by that uid or set EGRESSD_CA_EXPORT",
		    cfg->ca_export, e, (unsigned)geteuid());
		return -1;
	}
	return 0;
}

/*
 * Raise the soft descriptor limit to the hard one (systemd's default soft
 * limit is 1024): a workload that opens many connections must meet the
 * per-process connection caps, which leave a reserve, never EMFILE in
 * the middle of a request. The workers inherit the limit.
 */
static void
parent_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t was = rl.rlim_cur;

		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
			log_msg(LOG_WARN, "proc", "startup",
			    "cannot raise RLIMIT_NOFILE from %llu: %s", (unsigned long long)was,
			    strerror(errno));
			return;
		}
	}
	{
		struct log_line l;

		log_begin(&l, LOG_DEBUG, "proc", "nofile");
		log_uint(&l, "soft", (uint64_t)rl.rlim_cur);
		log_uint(&l, "hard", (uint64_t)rl.rlim_max);
		log_end(&l);
	}
}

int
parent_run(struct config *cfg, parent_worker_fn worker)
{
	struct parent p;
	char err[512];
	struct event *sigs[4];
	int rc;

	memset(&p, 0, sizeof(p));
	p.cfg = cfg;
	p.worker_fn = worker;
	p.chanfd = -1;
	p.ownfd = -1;
	p.worker = -1;
	p.backoff_ms = PARENT_BACKOFF_MIN_MS;

	if (!privsep_has_cap(CAP_NET_ADMIN)) {
		fprintf(stderr,
		    "egressd: missing capability CAP_NET_ADMIN. egressd programs nftables and "
		    "marks "
		    "its own sockets, so it must be granted NET_ADMIN: run it as root, or in a "
		    "container with 'capabilities: add: [NET_ADMIN]' (Kubernetes securityContext) "
		    "or '--cap-add NET_ADMIN' (docker/podman), or give the binary the file "
		    "capability (setcap cap_net_admin+ep egressd).\n");
		return 77;
	}
	if (privsep_harden() != 0) {
		log_msg(
		    LOG_ERROR, "proc", "startup", "cannot disable core dumps: %s", strerror(errno));
		return 1;
	}
	if (config_worker_ids(cfg, &p.wuid, &p.wgid, err, sizeof(err)) != 0) {
		log_msg(LOG_ERROR, "proc", "startup", "%s", err);
		return 1;
	}
	if (startcheck_worker_reads(cfg, p.wuid, p.wgid, err, sizeof(err)) != 0) {
		log_msg(LOG_ERROR, "proc", "worker_access", "%s", err);
		return 1;
	}
	if (cfg->insecure_no_token && cfg->token[0] == '\0')
		log_msg(LOG_WARN, "api", "insecure_no_token",
		    "starting WITHOUT an API token: anyone on the sandbox loopback can change the "
		    "policy; set OPENSANDBOX_EGRESS_TOKEN");
	if (cfg->mode == CONFIG_MODE_DNS)
		log_msg(LOG_WARN, "nft", "mode_dns",
		    "mode dns: only DNS is filtered; direct IP connections, DoH and DoT are NOT "
		    "blocked. Use dns+nft (the default) for enforcement");
	/*
	 * The sandbox CA is made once, here: every worker (restarts included)
	 * inherits it, so the workload's trust survives a worker crash. The
	 * operator's key files are read with the parent's rights.
	 */
	if (cfg->intercept) {
		struct ca_config cc;

		memset(&cc, 0, sizeof(cc));
		if (cfg->ca_cert[0] != '\0')
			cfg->ca = ca_load(cfg->ca_cert, cfg->ca_key, err, sizeof(err));
		else
			cfg->ca = ca_generate(&cc, err, sizeof(err));
		if (cfg->ca == NULL) {
			log_msg(LOG_ERROR, "vault", "ca_error", "sandbox CA: %s", err);
			return 1;
		}
		/* The upstream trust too: the worker may not be able to read it. */
		if (cfg->upstream_ca[0] != '\0') {
			cfg->upstream_store = trust_load(cfg->upstream_ca, err, sizeof(err));
			if (cfg->upstream_store == NULL) {
				log_msg(LOG_ERROR, "vault", "trust_error", "%s", err);
				return 1;
			}
		}
	}
	if (cfg->intercept && parent_export_ca(cfg, err, sizeof(err)) != 0) {
		log_msg(LOG_ERROR, "vault", "ca_error", "%s", err);
		return 1;
	}
	parent_raise_nofile();
	/*
	 * The listening sockets are bound once, here, and held for the
	 * parent's life: a worker crash never frees a port for the workload
	 * to take, and the table's input chain refuses any unmarked socket
	 * on these ports while the sidecar itself restarts.
	 */
	if (listen_open(cfg, err, sizeof(err)) != 0) {
		log_msg(LOG_ERROR, "proc", "listen_error", "%s", err);
		return 1;
	}
	/* The resolvers, once: the DNS proxy and the table's rule name the same ones. */
	if (config_upstreams(cfg, err, sizeof(err)) != 0) {
		log_msg(LOG_ERROR, "dns", "dns_upstream_error", "%s", err);
		listen_close(&cfg->listen);
		return 1;
	}
	/*
	 * The sandbox's own networks (its subnets, addresses and gateways)
	 * are denied from the start: they are read, and watched for changes,
	 * before the table goes in.
	 */
	p.ownfd = ownnet_watch_open();
	if (p.ownfd < 0) {
		log_msg(LOG_ERROR, "nft", "own_networks_error",
		    "cannot watch the sandbox's addresses and routes: %s", strerror(errno));
		listen_close(&cfg->listen);
		return 1;
	}
	{
		struct addrclass_own own;
		bool changed;

		if (ownnet_scan(&own, err, sizeof(err)) != 0) {
			log_msg(LOG_ERROR, "nft", "own_networks_error",
			    "cannot read the sandbox's own networks: %s", err);
			close(p.ownfd);
			listen_close(&cfg->listen);
			return 1;
		}
		/* Fail closed: nothing runs until the table is in place. */
		p.enf = enforce_open(cfg, err, sizeof(err));
		if (p.enf == NULL ||
		    enforce_set_own(p.enf, &own, &changed, err, sizeof(err)) != 0 ||
		    enforce_install(p.enf, err, sizeof(err)) != 0) {
			log_msg(
			    LOG_ERROR, "nft", "nft_error", "cannot install enforcement: %s", err);
			if (p.enf != NULL)
				enforce_close(p.enf);
			close(p.ownfd);
			listen_close(&cfg->listen);
			return 1;
		}
		parent_own_log(&own, "own_networks");
	}
	log_msg(LOG_INFO, "nft", "nft_install", "table inet %s installed (%s)", cfg->table,
	    config_mode_name(cfg->mode));
	p.capwatch = capwatch_new();
	p.pp = ppolicy_new(cfg, p.enf);
	if (p.pp == NULL) {
		log_msg(LOG_ERROR, "proc", "startup", "out of memory");
		enforce_close(p.enf);
		close(p.ownfd);
		listen_close(&cfg->listen);
		return 1;
	}
	parent_ready_file(&p, false);

	p.base = event_base_new();
	if (p.base == NULL) {
		log_msg(LOG_ERROR, "proc", "startup", "event_base_new failed");
		enforce_close(p.enf);
		close(p.ownfd);
		return 1;
	}
	p.ev_restart = evtimer_new(p.base, parent_restart_cb, &p);
	p.ev_kill = evtimer_new(p.base, parent_kill_cb, &p);
	p.ev_watch = event_new(p.base, -1, EV_PERSIST, parent_watch_cb, &p);
	p.ev_own = event_new(p.base, p.ownfd, EV_READ | EV_PERSIST, parent_own_cb, &p);
	event_add(p.ev_own, NULL);
	/* A change between the scan above and now is not lost: look once more. */
	parent_own_refresh(&p);
	{
		struct timeval wt = {PARENT_WATCHDOG_MS / 1000, (PARENT_WATCHDOG_MS % 1000) * 1000};
		event_add(p.ev_watch, &wt);
	}
	sigs[0] = evsignal_new(p.base, SIGCHLD, parent_sigchld_cb, &p);
	sigs[1] = evsignal_new(p.base, SIGTERM, parent_sigterm_cb, &p);
	sigs[2] = evsignal_new(p.base, SIGINT, parent_sigterm_cb, &p);
	sigs[3] = evsignal_new(p.base, SIGHUP, parent_sighup_cb, &p);
	for (int i = 0; i < 4; i++)
		event_add(sigs[i], NULL);
	signal(SIGPIPE, SIG_IGN);

	parent_spawn(&p);
	event_base_dispatch(p.base);
	rc = p.exit_code;

	if (p.worker > 0) {
		int status;
		kill(p.worker, SIGKILL);
		waitpid(p.worker, &status, 0);
	}
	parent_ready_file(&p, false);
	if (cfg->remove_table_on_exit) {
		if (enforce_remove(p.enf, err, sizeof(err)) != 0) {
			log_msg(LOG_ERROR, "nft", "nft_error", "table removal failed: %s", err);
			rc = 1;
		} else
			log_msg(LOG_INFO, "nft", "nft_remove", "table removed on exit");
	} else
		log_msg(LOG_INFO, "nft", "nft_keep",
		    "table kept on exit: egress stays blocked until egressd runs again");
	for (int i = 0; i < 4; i++)
		event_free(sigs[i]);
	event_free(p.ev_restart);
	event_free(p.ev_kill);
	event_free(p.ev_watch);
	event_free(p.ev_own);
	close(p.ownfd);
	if (p.ev_chan != NULL)
		event_free(p.ev_chan);
	if (p.chanfd >= 0)
		close(p.chanfd);
	ppolicy_free(p.pp);
	leaf_cache_free(p.minter);
	capwatch_free(p.capwatch);
	event_base_free(p.base);
	enforce_close(p.enf);
	listen_close(&cfg->listen);
	return rc;
}
