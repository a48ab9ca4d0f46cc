/*
 * The privileged parent process. It keeps CAP_NET_ADMIN, installs the nft
 * table before anything else runs, then forks one child per trust level
 * (control, dns and, with interception, intercept; docs/privsep.md) and
 * serves them: marked sockets (the only way a child's own traffic is
 * exempted), learned addresses, leaves, and the policy and vault that
 * control hands on, which the parent puts in force and pushes to the
 * children that decide on them. It parses no network input: everything it
 * acts on is a fixed-size channel message that passed chan_validate() and
 * that its sender's role may send (chan_role_may_send()); a message that
 * fails either is fatal for that child, never obeyed.
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
#include "certs/carenew.h"
#include "certs/leaf.h"
#include "certs/trust.h"
#include "egressd/common/chan.h"
#include "egressd/common/closefds.h"
#include "egressd/common/log.h"
#include "egressd/common/ownnet.h"
#include "egressd/common/shstat.h"
#include "egressd/priv/capwatch.h"
#include "egressd/priv/enforce.h"
#include "egressd/priv/listen.h"
#include "egressd/priv/nflog.h"
#include "egressd/priv/parent.h"
#include "egressd/report/report.h"
#include "egressd/priv/ppolicy.h"
#include "egressd/priv/privsep.h"
#include "egressd/priv/startcheck.h"
#include "policy/addrclass.h"

/* Restart backoff of a crashed child. */
#define PARENT_BACKOFF_MIN_MS 100
#define PARENT_BACKOFF_MAX_MS 10000
/* A child that lived this long resets its backoff. */
#define PARENT_STABLE_S 30
/*
 * A child that dies before it was ever ready is retried this many times
 * (a port still held by a previous instance frees itself quickly), then
 * egressd gives up loudly: a bad configuration does not heal by looping.
 */
#define PARENT_STARTUP_TRIES 5
/* Grace between SIGTERM and SIGKILL of the children on shutdown. */
#define PARENT_STOP_GRACE_MS 700
/* How often the ruleset is checked for changes made by someone else. */
#define PARENT_WATCHDOG_MS 1000
/* A child has this long to acknowledge a push, or it is killed. */
#define PARENT_ACK_S 10
/* Replies kept for a child whose channel is full, at most (parent_answer). */
#define PARENT_OUTQ_MAX (2 * CHAN_MAX_PENDING)
/*
 * Sockets among them at most: past this a socket request is answered
 * ENOBUFS without one, so that a child that reads nothing cannot hold the
 * parent's descriptors (it needs them to start children again).
 */
#define PARENT_OUTQ_FDS 1024
/* Blocking budget of one document send to a child. */
#define PARENT_SEND_MS 10000
/* Seconds between two changes of the chained proxy's addresses, at least. */
#define PARENT_PROXY_CHANGE_S 2

struct parent;

/*
 * A reply the child's channel had no room for (its socket buffer full):
 * kept, in order, with the descriptor it carries, until the channel
 * drains (parent_outq_flush).
 */
struct pout {
	struct pout *next;
	int fd; /* passed with it (SCM_RIGHTS), closed once sent; -1: none */
	union chan_msg m;
};

/* One child: a role, its process and its channel. */
struct pkid {
	struct parent *p;
	enum chan_role role;
	pid_t pid;
	int chanfd;
	struct event *ev_chan;
	/*
	 * Replies waiting for room (a burst of requests answered faster than
	 * the child reads them), sent as its channel drains (ev_out).
	 */
	struct pout *outq, **outq_tail;
	size_t noutq, noutq_fds;
	struct event *ev_out;
	time_t started;
	unsigned backoff_ms;
	struct event *ev_restart;
	bool ready;                /* sent READY */
	bool ever_ready;           /* an incarnation reached READY since start */
	unsigned startup_failures; /* incarnations that died before the first READY */
	struct chan_doc rx;        /* control: a vault being received */
};

/*
 * Something pushed to the children, waiting for their CHAN_ACK: a policy
 * put in force, a vault, or learned addresses. When the last one has
 * acknowledged (or died, or been killed at the deadline), the request
 * that caused it is answered; a vault push then becomes the vault the
 * parent hands to a new intercept.
 */
struct ppush {
	struct ppush *next;
	uint32_t id;
	uint32_t waiting; /* role bits */
	time_t deadline;
	/* The request to answer: its child incarnation, id and type (reply_id 0: none). */
	enum chan_role reply_role;
	pid_t reply_pid;
	uint32_t reply_id;
	uint16_t reply_type;
	int err;
	bool hard;  /* a policy: a child that refuses it is killed (it cannot go on deciding) */
	bool ca;    /* renewed CA certificates: an intercept that refuses them is killed */
	bool proxy; /* the chained proxy's addresses: likewise (it restarts with them) */
	/*
	 * A new vault for the intercept (control's, or none when control
	 * died): its document (NULL: the empty vault), wiped when freed, and
	 * the vault in force once the intercept took it.
	 */
	bool new_vault;
	char *vault;
	size_t vault_len;
};

struct parent {
	struct config *cfg;
	parent_worker_fn worker_fn;
	struct event_base *base;
	struct enforce *enf;
	uid_t wuid;
	gid_t wgid;

	struct pkid kids[CHAN_ROLE_MAX];
	uint32_t present; /* role bits of the children this configuration runs */
	struct event *ev_kill;
	struct event *ev_watch;
	unsigned tampers;
	int ownfd; /* told about address and route changes */
	struct event *ev_own;
	bool own_dirty; /* the own networks changed and are not applied yet */
	bool stopping;
	bool ready; /* every child is ready */
	int exit_code;

	/* The policy in force, as the parent decoded it. */
	struct ppolicy *pp;
	/* The vault in force (the intercept holds it), as control encoded it; wiped when replaced. */
	char *vault;
	size_t vault_len;
	struct ppush *pushes, *pushes_tail;
	uint32_t next_push;

	/* Counters and status shared with the children. */
	struct shstat shs;

	/* Mints the intercept's leaves: the CA private key stays here. */
	struct leaf_cache *minter;
	/* The generated CA's schedule (carenew), or the operator CA's state last logged. */
	unsigned ca_lifetime, ca_renew_before;
	time_t ca_retry_at;
	bool ca_export_dirty; /* the export does not show the CAs in force yet: retried */
	time_t ca_export_retry_at;
	enum carenew_op_state ca_op_logged;

	/* Workload processes with NET_ADMIN or NET_RAW, reported once each. */
	struct capwatch *capwatch;

	/* Learned addresses being batched (dns); one refused makes the batch refused. */
	struct chan_learn learns[CHAN_MAX_BATCH];
	size_t nlearn;
	const char *learn_refused; /* why the batch is refused, or NULL */
	size_t learn_refused_at;
	uint64_t learns_refused;

	/*
	 * The chained proxy given by name: its name (canonical; "" otherwise)
	 * and the addresses the dns process resolved for it, in force in the
	 * table and handed to every intercept.
	 */
	char proxy_name[254];
	struct chan_learn proxy[CHAN_MAX_PROXY_ADDRS];
	size_t nproxy;
	/*
	 * A change rebuilds the filter chain: at most one every
	 * PARENT_PROXY_CHANGE_S (the dns child asks no more often than every
	 * PXNAME_MIN_S); more are refused, counted, and logged once a window.
	 */
	time_t proxy_changed, proxy_busy_logged;
	uint64_t proxy_busy;

	/* Events forwarded to the report child, and those dropped (it was absent or full). */
	uint32_t next_event;
	uint64_t events_dropped;

	/* The table's refusals (NFLOG), passed to the dns child unparsed; NULL: not logged. */
	struct nflog *nflog;
	struct event *ev_nflog;
	uint32_t next_nflog;
	uint64_t nflog_dropped; /* the dns child was absent or behind */
	uint64_t nflog_lost_seen;
};

static void parent_spawn(struct pkid *k);
static void parent_push_drop_role(struct parent *p, enum chan_role role);
static void parent_ca_tick(struct parent *p);

static bool
parent_alive(const struct pkid *k)
{
	return k->pid > 0 && k->chanfd >= 0;
}

static void
parent_vault_free(char *doc, size_t len)
{
	if (doc != NULL) {
		explicit_bzero(doc, len);
		free(doc);
	}
}

/* Forget what a child was sending (it is gone). */
static void
parent_chan_reset(struct pkid *k)
{
	struct parent *p = k->p;

	chan_doc_reset(&k->rx);
	if (k->role == CHAN_ROLE_CONTROL)
		ppolicy_rx_reset(p->pp);
	if (k->role == CHAN_ROLE_DNS) {
		p->nlearn = 0;
		p->learn_refused = NULL;
	}
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

/*
 * Publish which children are ready (each once it sent READY; what is
 * pushed later holds back only the request that caused it), and
 * egressd's readiness when all are.
 */
static void
parent_update_ready(struct parent *p)
{
	uint32_t ready = 0;
	bool all;

	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		if ((p->present & (1u << r)) && p->kids[r].ready)
			ready |= 1u << r;
	all = ready == p->present;
	if (p->shs.status != NULL) {
		p->shs.status->ready = ready;
		p->shs.status->learned = ppolicy_learned_count(p->pp);
	}
	if (all == p->ready)
		return;
	p->ready = all;
	parent_ready_file(p, all);
	if (all) {
		struct log_line l;

		log_begin(&l, LOG_INFO, "proc", "ready");
		log_str(&l, "mode", config_mode_name(p->cfg->mode));
		log_end(&l);
	}
}

static void
parent_outq_clear(struct pkid *k)
{
	struct pout *o;

	while ((o = k->outq) != NULL) {
		k->outq = o->next;
		if (o->fd >= 0)
			close(o->fd);
		free(o);
	}
	k->outq_tail = &k->outq;
	k->noutq = k->noutq_fds = 0;
	if (k->ev_out != NULL) {
		event_free(k->ev_out);
		k->ev_out = NULL;
	}
}

static void
parent_close_chan(struct pkid *k)
{
	parent_outq_clear(k);
	if (k->ev_chan != NULL) {
		event_free(k->ev_chan);
		k->ev_chan = NULL;
	}
	if (k->chanfd >= 0) {
		close(k->chanfd);
		k->chanfd = -1;
	}
	parent_chan_reset(k);
}

/* Kill a child for a protocol violation: it may be compromised. */
static void
parent_violation(struct pkid *k, const char *why)
{
	struct log_line l;

	log_begin(&l, LOG_ERROR, "proc", "chan_violation");
	log_str(&l, "why", why);
	log_str(&l, "role", chan_role_name(k->role));
	log_int(&l, "worker", k->pid);
	log_end(&l);
	if (k->pid > 0)
		kill(k->pid, SIGKILL);
	parent_close_chan(k);
	parent_push_drop_role(k->p, k->role);
}

/* Send what waits for room, in order. */
static void
parent_outq_flush(struct pkid *k)
{
	struct pout *o;

	while ((o = k->outq) != NULL) {
		if (chan_send(k->chanfd, &o->m, o->fd) != 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
				return; /* ev_out brings us back */
			log_msg(LOG_WARN, "proc", "chan_send", "reply to %s failed: %s",
			    chan_role_name(k->role), strerror(errno));
		}
		k->outq = o->next;
		if (k->outq == NULL)
			k->outq_tail = &k->outq;
		k->noutq--;
		if (o->fd >= 0) {
			close(o->fd);
			k->noutq_fds--;
		}
		free(o);
	}
	event_del(k->ev_out);
}

static void
parent_out_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	parent_outq_flush(arg);
}

/*
 * A reply to one of the child's requests (msg, with fd when >= 0, taken):
 * sent now, or, when the child's channel has no room, kept until it has
 * (never dropped: the request would hang, and its connection with it).
 * The child's requests are still read meanwhile: a child waits for room
 * to send its own (wchan), and would wait forever for a parent that
 * stopped reading until its replies were read. A child has at most
 * CHAN_MAX_PENDING requests out; one with more replies waiting than
 * PARENT_OUTQ_MAX does not read its channel, and is killed.
 */
static void
parent_answer(struct pkid *k, const void *msg, int fd)
{
	struct chan_hdr h;
	struct pout *o;
	size_t n;

	memcpy(&h, msg, sizeof(h));
	if (k->outq == NULL) {
		if (chan_send(k->chanfd, msg, fd) == 0)
			goto sent;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS) {
			log_msg(LOG_WARN, "proc", "chan_send", "reply to %s failed: %s",
			    chan_role_name(k->role), strerror(errno));
			goto sent;
		}
	}
	if (k->noutq >= PARENT_OUTQ_MAX) {
		if (fd >= 0)
			close(fd);
		parent_violation(k, "replies not read");
		return;
	}
	n = chan_msg_size(h.type);
	if (k->ev_out == NULL)
		k->ev_out =
		    event_new(k->p->base, k->chanfd, EV_WRITE | EV_PERSIST, parent_out_cb, k);
	if (n == 0 || k->ev_out == NULL || (o = malloc(offsetof(struct pout, m) + n)) == NULL) {
		log_msg(LOG_WARN, "proc", "chan_send", "reply to %s lost: out of memory",
		    chan_role_name(k->role));
		goto sent;
	}
	o->next = NULL;
	o->fd = fd;
	memcpy(&o->m, msg, n);
	if (k->outq == NULL) {
		k->outq_tail = &k->outq;
		event_add(k->ev_out, NULL);
	}
	*k->outq_tail = o;
	k->outq_tail = &o->next;
	k->noutq++;
	k->noutq_fds += fd >= 0;
	return;
sent:
	if (fd >= 0)
		close(fd);
}

static void
parent_reply(struct pkid *k, uint32_t id, unsigned req_type, int err, const char *msg)
{
	struct chan_result r;

	if (!parent_alive(k))
		return;
	memset(&r, 0, sizeof(r));
	r.hdr.type = CHAN_RESULT;
	r.hdr.id = id;
	r.req_type = (uint16_t)req_type;
	r.err = err;
	snprintf(r.msg, sizeof(r.msg), "%s", msg ? msg : "");
	parent_answer(k, &r, -1);
}

/* ---- pushes ---- */

static uint32_t
parent_push_id(struct parent *p)
{
	/* Parent ids; 1 is the handover's. */
	if (++p->next_push < 2 || p->next_push >= CHAN_ID_PARENT)
		p->next_push = 2;
	return CHAN_ID_PARENT | p->next_push;
}

static struct ppush *
parent_push_new(struct parent *p)
{
	struct ppush *u = calloc(1, sizeof(*u));

	if (u == NULL)
		return NULL;
	u->id = parent_push_id(p);
	u->deadline = time(NULL) + PARENT_ACK_S;
	return u;
}

/* The push is over: answer its request; a vault push becomes the vault in force. */
static void
parent_push_finish(struct parent *p, struct ppush *u)
{
	struct pkid *k = &p->kids[u->reply_role];

	if (u->new_vault) {
		if (u->err == 0) {
			parent_vault_free(p->vault, p->vault_len);
			p->vault = u->vault;
			p->vault_len = u->vault_len;
			u->vault = NULL;
		}
		parent_vault_free(u->vault, u->vault_len);
	}
	if (u->reply_id != 0 && k->pid == u->reply_pid)
		parent_reply(k, u->reply_id, u->reply_type, u->err,
		    u->err ? "the intercept refused it" : "");
	free(u);
}

/* Finish every push that waits for nobody any more, in order. */
static void
parent_push_settle(struct parent *p)
{
	struct ppush **up = &p->pushes, *last = NULL;

	while (*up != NULL) {
		struct ppush *u = *up;

		if (u->waiting != 0) {
			last = u;
			up = &u->next;
			continue;
		}
		*up = u->next;
		parent_push_finish(p, u);
	}
	p->pushes_tail = last;
	parent_update_ready(p);
}

/* Queue u; it is finished at once if nobody has to acknowledge it. */
static void
parent_push_queue(struct parent *p, struct ppush *u)
{
	if (p->pushes_tail != NULL)
		p->pushes_tail->next = u;
	else
		p->pushes = u;
	p->pushes_tail = u;
	parent_push_settle(p);
}

/* A child is gone: nobody waits for it any more (its successor gets the state in force). */
static void
parent_push_drop_role(struct parent *p, enum chan_role role)
{
	for (struct ppush *u = p->pushes; u != NULL; u = u->next)
		u->waiting &= ~(1u << role);
	parent_push_settle(p);
}

/* A push was sent to k (rc 0): it must now acknowledge it; else it is killed. */
static void
parent_push_sent(struct ppush *u, struct pkid *k, unsigned type, int rc)
{
	if (rc != 0) {
		/* It does not take what is in force: it cannot go on deciding. */
		log_msg(LOG_ERROR, "proc", "push_failed", "%s push to %s failed: %s",
		    chan_type_name(type), chan_role_name(k->role), strerror(errno));
		kill(k->pid, SIGKILL);
		return;
	}
	u->waiting |= 1u << k->role;
}

/* The policy in force to the child of `role`. */
static void
parent_push_policy(struct parent *p, struct ppush *u, enum chan_role role)
{
	struct pkid *k = &p->kids[role];

	if (parent_alive(k))
		parent_push_sent(u, k, CHAN_POLICY, ppolicy_send(p->pp, k->chanfd, u->id));
}

/* A vault document (NULL, 0: none) to the intercept. */
static void
parent_push_vault(struct parent *p, struct ppush *u, const char *doc, size_t len)
{
	struct pkid *k = &p->kids[CHAN_ROLE_INTERCEPT];

	if (parent_alive(k))
		parent_push_sent(u, k, CHAN_VAULT,
		    chan_doc_send(k->chanfd, CHAN_VAULT, u->id, doc, len, PARENT_SEND_MS));
}

/*
 * Learned entries to the intercept (which checks SNI against them), batched;
 * flags is CHAN_LEARN_PROXY for the proxy's addresses, else 0.
 */
static void
parent_push_learns(
    struct parent *p, struct ppush *u, const struct chan_learn *l, size_t n, uint16_t flags)
{
	struct pkid *k = &p->kids[CHAN_ROLE_INTERCEPT];

	if (!parent_alive(k) || n == 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct chan_learn m = l[i];

		m.hdr.type = CHAN_LEARN;
		m.hdr.id = u->id;
		m.hdr.flags = (uint16_t)(flags | (i + 1 < n ? CHAN_LEARN_MORE : 0));
		if (chan_send_wait(k->chanfd, &m, PARENT_SEND_MS) != 0) {
			log_msg(LOG_ERROR, "proc", "push_failed",
			    "learn push to intercept failed: %s", strerror(errno));
			kill(k->pid, SIGKILL);
			return;
		}
	}
	u->waiting |= 1u << CHAN_ROLE_INTERCEPT;
}

/* A child acknowledged a push. */
static void
parent_ack(struct pkid *k, const struct chan_ack *a)
{
	struct parent *p = k->p;
	struct ppush *u = p->pushes;

	while (u != NULL && u->id != a->hdr.id)
		u = u->next;
	if (u == NULL || !(u->waiting & (1u << k->role))) {
		parent_violation(k, "acknowledgement of nothing pushed to it");
		return;
	}
	u->waiting &= ~(1u << k->role);
	if (a->err != 0) {
		struct log_line l;

		log_begin(&l, LOG_ERROR, "proc", "push_refused");
		log_str(&l, "role", chan_role_name(k->role));
		log_str(&l, "why", strerror(a->err));
		log_end(&l);
		if (u->new_vault)
			u->err = a->err; /* the intercept keeps the vault it had */
		/*
		 * An intercept without the new CA could not take the leaves it
		 * signs; one without the proxy's addresses would fail every dial
		 * (the table already pins them): a new one starts with both.
		 */
		if (u->hard || ((u->ca || u->proxy) && k->role == CHAN_ROLE_INTERCEPT))
			kill(k->pid, SIGKILL);
	}
	parent_push_settle(p);
}

/* The watchdog: a child that does not acknowledge in time is killed. */
static void
parent_push_deadlines(struct parent *p)
{
	time_t now = time(NULL);

	for (struct ppush *u = p->pushes; u != NULL; u = u->next) {
		if (u->waiting == 0 || now < u->deadline)
			continue;
		for (int r = 0; r < CHAN_ROLE_MAX; r++)
			if ((u->waiting & (1u << r)) && p->kids[r].pid > 0) {
				log_msg(LOG_ERROR, "proc", "push_timeout",
				    "%s did not acknowledge in %d s: killed", chan_role_name(r),
				    PARENT_ACK_S);
				kill(p->kids[r].pid, SIGKILL);
			}
	}
}

/* ---- requests ---- */

/*
 * Marked-socket factory: the children's upstream sockets carry a mark of
 * their role, which the table scopes (docs/nft-table.md): the dns
 * process's (dns_mark) reach the configured resolvers and nothing else,
 * the intercept's (mark) no DNS and only what the workload's sets allow.
 */
static void
parent_socket(struct pkid *k, const struct chan_socket_req *req)
{
	struct chan_socket_rep rep;
	int fd, err = 0;
	uint32_t mark = k->role == CHAN_ROLE_DNS      ? k->p->cfg->dns_mark
	                : k->role == CHAN_ROLE_REPORT ? k->p->cfg->report_mark
	                                              : k->p->cfg->mark;

	memset(&rep, 0, sizeof(rep));
	rep.hdr.type = CHAN_SOCKET_REP;
	rep.hdr.id = req->hdr.id;
	if (k->noutq_fds >= PARENT_OUTQ_FDS) {
		fd = -1;
		err = ENOBUFS;
	} else if ((fd = socket(req->family, req->socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) <
	           0) {
		err = errno;
	} else if (setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) != 0) {
		err = errno;
		close(fd);
		fd = -1;
	}
	rep.err = err;
	parent_answer(k, &rep, fd);
}

static void
parent_learn_flush(struct pkid *k, uint32_t id)
{
	struct parent *p = k->p;
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
		parent_reply(k, id, CHAN_LEARN, EPERM, p->learn_refused);
	} else {
		struct ppush *u;

		rc = enforce_learn(p->enf, p->learns, p->nlearn, err, sizeof(err));
		if (rc != 0) {
			log_msg(LOG_ERROR, "nft", "nft_error", "%s", err);
			parent_reply(k, id, CHAN_LEARN, EIO, err);
		} else if ((u = parent_push_new(p)) == NULL) {
			ppolicy_learned(p->pp, p->learns, p->nlearn);
			parent_reply(k, id, CHAN_LEARN, 0, "");
		} else {
			/* Answered once the intercept knows them too. */
			ppolicy_learned(p->pp, p->learns, p->nlearn);
			u->reply_role = k->role;
			u->reply_pid = k->pid;
			u->reply_id = id;
			u->reply_type = CHAN_LEARN;
			parent_push_learns(p, u, p->learns, p->nlearn, 0);
			parent_push_queue(p, u);
		}
	}
	p->nlearn = 0;
	p->learn_refused = NULL;
}

/* Seconds of CLOCK_MONOTONIC (never 0 once running). */
static time_t
parent_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + 1;
}

/* The proxy's addresses in force to the intercept (u: answered once it holds them). */
static void
parent_push_proxy(struct parent *p, struct ppush *u)
{
	parent_push_learns(p, u, p->proxy, p->nproxy, CHAN_LEARN_PROXY);
}

/*
 * A batch of the proxy's addresses (CHAN_LEARN_PROXY) is whole: they
 * replace those in force, in the table first, then in the intercept; the
 * dns process is answered once both hold them. A refused one (an address
 * no proxy may have) leaves the previous ones in force.
 */
static void
parent_proxy_flush(struct pkid *k, uint32_t id)
{
	struct parent *p = k->p;
	char err[256] = "", txt[INET6_ADDRSTRLEN];
	struct log_line l;
	struct ppush *u;
	bool changed;

	if (p->learn_refused != NULL) {
		const struct chan_learn *bad = &p->learns[p->learn_refused_at];

		inet_ntop(bad->family, bad->addr, txt, sizeof(txt));
		log_begin(&l, LOG_WARN, "policy", "upstream_proxy_address_refused");
		log_str(&l, "name", bad->name);
		log_str(&l, "addr", txt);
		log_str(&l, "why", p->learn_refused);
		log_end(&l);
		parent_reply(k, id, CHAN_LEARN, EPERM, p->learn_refused);
		goto out;
	}
	if (!enforce_proxy_same(p->enf, p->learns, p->nlearn) && p->proxy_changed != 0 &&
	    parent_mono() - p->proxy_changed < PARENT_PROXY_CHANGE_S) {
		p->proxy_busy++;
		if (parent_mono() - p->proxy_busy_logged >= PARENT_PROXY_CHANGE_S) {
			p->proxy_busy_logged = parent_mono();
			log_begin(&l, LOG_WARN, "policy", "upstream_proxy_busy");
			log_str(&l, "why", "the proxy's addresses change too often");
			log_uint(&l, "count", p->proxy_busy);
			log_end(&l);
		}
		parent_reply(k, id, CHAN_LEARN, EBUSY, "the proxy's addresses change too often");
		goto out;
	}
	if (enforce_set_proxy(p->enf, p->learns, p->nlearn, &changed, err, sizeof(err)) != 0) {
		log_msg(LOG_ERROR, "nft", "nft_error", "proxy addresses: %s", err);
		parent_reply(k, id, CHAN_LEARN, EIO, err);
		goto out;
	}
	memcpy(p->proxy, p->learns, p->nlearn * sizeof(p->proxy[0]));
	p->nproxy = p->nlearn;
	if (changed)
		p->proxy_changed = parent_mono();
	if (!changed) {
		parent_reply(k, id, CHAN_LEARN, 0, "");
		goto out;
	}
	{
		char list[CHAN_MAX_PROXY_ADDRS * (INET6_ADDRSTRLEN + 1)] = "";
		size_t off = 0;

		for (size_t i = 0; i < p->nproxy; i++) {
			inet_ntop(p->proxy[i].family, p->proxy[i].addr, txt, sizeof(txt));
			off += (size_t)snprintf(
			    list + off, sizeof(list) - off, "%s%s", i > 0 ? " " : "", txt);
		}
		log_begin(&l, LOG_INFO, "policy", "upstream_proxy_addresses");
		log_str(&l, "name", p->proxy_name);
		log_str(&l, "addrs", list);
		log_uint(&l, "count", p->nproxy);
		log_end(&l);
	}
	if ((u = parent_push_new(p)) == NULL) {
		parent_reply(k, id, CHAN_LEARN, 0, "");
		goto out;
	}
	u->reply_role = k->role;
	u->reply_pid = k->pid;
	u->reply_id = id;
	u->reply_type = CHAN_LEARN;
	u->proxy = true;
	parent_push_proxy(p, u);
	parent_push_queue(p, u);
out:
	p->nlearn = 0;
	p->learn_refused = NULL;
}

/*
 * An address of the proxy's name: only with a proxy given by name, for
 * that name, and never an address the sandbox must not reach (loopback,
 * link-local and metadata, its own networks). Private addresses are
 * allowed: corporate proxies live there. NULL, or why it is refused.
 */
static const char *
parent_proxy_check(struct parent *p, const struct chan_learn *l, bool *violation)
{
	const char *why = NULL;

	*violation = true;
	if (p->nlearn >= CHAN_MAX_PROXY_ADDRS)
		return "too many proxy addresses";
	*violation = false;
	if (p->proxy_name[0] == '\0')
		return "no proxy is given by name";
	if (strcmp(l->name, p->proxy_name) != 0)
		return "not the proxy's name";
	if (addrclass_refused(enforce_own(p->enf), l->family, l->addr, false, &why))
		return why;
	return NULL;
}

/* Batch learns, each checked against the parent's own copy of the policy. */
static void
parent_learn(struct pkid *k, const struct chan_learn *l)
{
	struct parent *p = k->p;
	bool proxy = (l->hdr.flags & CHAN_LEARN_PROXY) != 0, violation;
	const char *why;

	if (p->nlearn > 0 && l->hdr.id != p->learns[0].hdr.id) {
		parent_violation(k, "learn batch interleaved with another");
		return;
	}
	if (p->nlearn >= CHAN_MAX_BATCH) {
		parent_violation(k, "learn batch too long");
		return;
	}
	if (p->nlearn > 0 && ((l->hdr.flags ^ p->learns[0].hdr.flags) & CHAN_LEARN_PROXY) != 0) {
		parent_violation(k, "learn batch mixes proxy and workload addresses");
		return;
	}
	if (proxy && (why = parent_proxy_check(p, l, &violation)) != NULL) {
		if (violation) {
			parent_violation(k, why);
			return;
		}
		if (p->learn_refused == NULL) {
			p->learn_refused = why;
			p->learn_refused_at = p->nlearn;
		}
	}
	p->learns[p->nlearn] = *l;
	if (!proxy && p->learn_refused == NULL &&
	    ppolicy_learn_check(p->pp, &p->learns[p->nlearn], &why) != 0) {
		p->learn_refused = why;
		p->learn_refused_at = p->nlearn;
	}
	p->nlearn++;
	if ((l->hdr.flags & CHAN_LEARN_MORE) != 0)
		return;
	if (proxy)
		parent_proxy_flush(k, l->hdr.id);
	else
		parent_learn_flush(k, l->hdr.id);
}

/* A leaf for the intercept's key, for a host the policy in force allows. */
static void
parent_leaf(struct pkid *k, const struct chan_leaf_req *r)
{
	struct parent *p = k->p;
	struct chan_leaf_rep *rep;
	char err[256] = "";
	X509 *x = NULL;
	int n;

	if (!p->cfg->intercept || p->cfg->ca == NULL) {
		parent_violation(k, "leaf request without interception");
		return;
	}
	if ((rep = calloc(1, sizeof(*rep))) == NULL)
		return; /* the request times out with its connection */
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
	if (rep->der_len != 0) {
		struct log_line l;

		log_begin(&l, LOG_DEBUG, "vault", "leaf_mint");
		log_str(&l, "host", r->name);
		log_end(&l);
	} else {
		struct log_line l;

		rep->err = EPERM;
		log_begin(&l, LOG_WARN, "vault", "leaf_refused");
		log_str(&l, "host", r->name);
		log_str(&l, "why", err[0] ? err : "certificate too large");
		log_end(&l);
	}
	parent_answer(k, rep, -1);
	free(rep);
}

/* Control's policy: into the kernel, then to dns and intercept, then answered. */
static void
parent_policy(struct pkid *k, const union chan_msg *m)
{
	struct parent *p = k->p;
	char msg[CHAN_ERRMSG_LEN];
	const char *why = "";
	int err = 0;
	struct ppush *u;

	switch (ppolicy_chunk(p->pp, m, &err, msg, sizeof(msg), &why)) {
	case PPOLICY_MORE:
		return;
	case PPOLICY_VIOLATION:
		parent_violation(k, why);
		return;
	case PPOLICY_DONE:
		break;
	}
	if (err == 0)
		p->shs.status->revision++; /* in the kernel now: egressd_policy_revision (OTLP) */
	if (err != 0 || (u = parent_push_new(p)) == NULL) {
		parent_reply(k, m->hdr.id, CHAN_POLICY, err, msg);
		return;
	}
	u->reply_role = k->role;
	u->reply_pid = k->pid;
	u->reply_id = m->hdr.id;
	u->reply_type = CHAN_POLICY;
	u->hard = true;
	parent_push_policy(p, u, CHAN_ROLE_DNS);
	parent_push_policy(p, u, CHAN_ROLE_INTERCEPT);
	parent_push_queue(p, u);
}

/* Control's vault: to the intercept, in force once it acknowledged, then answered. */
static void
parent_vault(struct pkid *k, const union chan_msg *m)
{
	struct parent *p = k->p;
	struct ppush *u;
	char *doc;
	size_t len;

	switch (chan_doc_feed(&k->rx, m)) {
	case CHAN_DOC_MORE:
		return;
	case CHAN_DOC_BAD:
		parent_violation(k, "vault chunk out of sequence");
		return;
	case CHAN_DOC_NOMEM:
		parent_reply(k, m->hdr.id, CHAN_VAULT, ENOMEM, "out of memory");
		return;
	case CHAN_DOC_DONE:
		break;
	}
	doc = chan_doc_take(&k->rx, &len);
	if ((u = parent_push_new(p)) == NULL) {
		parent_vault_free(doc, len);
		parent_reply(k, m->hdr.id, CHAN_VAULT, ENOMEM, "out of memory");
		return;
	}
	u->reply_role = k->role;
	u->reply_pid = k->pid;
	u->reply_id = m->hdr.id;
	u->reply_type = CHAN_VAULT;
	u->new_vault = true;
	u->vault = doc;
	u->vault_len = len;
	parent_push_vault(p, u, doc, len);
	parent_push_queue(p, u);
}

/*
 * An event (a refusal) from dns, intercept or control, already validated
 * and checked against the sender's role: to the report child, without
 * waiting. Absent or full, it is dropped and counted: no child's refusal
 * ever waits on a delivery.
 */
static void
parent_event(struct pkid *k, const struct chan_event *e)
{
	struct parent *p = k->p;
	struct pkid *r = &p->kids[CHAN_ROLE_REPORT];
	struct chan_event fwd = *e;

	if ((p->present & (1u << CHAN_ROLE_REPORT)) == 0)
		return;
	fwd.hdr.id = CHAN_ID_PARENT | (++p->next_event & ~CHAN_ID_PARENT);
	if (r->pid > 0 && r->chanfd >= 0 && chan_offer(r->chanfd, &fwd) == 0)
		return;
	/* The first drop, then one line per 1000. */
	if (p->events_dropped++ % 1000 == 0)
		log_msg(LOG_WARN, "report", "event_dropped",
		    "the report process is %s: %llu event(s) dropped so far",
		    r->pid > 0 ? "behind" : "not running", (unsigned long long)p->events_dropped);
}

/*
 * A record of a refusing rule (priv/nflog.c): to the dns child as it came,
 * without waiting, as events go to report. The parent does not look
 * inside the packet: the dns child parses it (docs/nflog.md).
 */
static void
parent_nflog_record(const struct chan_nflog *r, void *arg)
{
	struct parent *p = arg;
	struct pkid *d = &p->kids[CHAN_ROLE_DNS];
	struct chan_nflog fwd = *r;

	fwd.hdr.id = CHAN_ID_PARENT | (++p->next_nflog & ~CHAN_ID_PARENT);
	if (fwd.hdr.id == CHAN_ID_PARENT)
		fwd.hdr.id = CHAN_ID_PARENT | (++p->next_nflog & ~CHAN_ID_PARENT);
	/*
	 * Only to a dns child that is ready: a workload that floods refused
	 * packets while it starts must not delay its start (the flood would
	 * be parsed before the child's own setup).
	 */
	if (parent_alive(d) && d->ready && chan_offer(d->chanfd, &fwd) == 0)
		return;
	/* The first drop, then one line per 1000. */
	if (p->nflog_dropped++ % 1000 == 0)
		log_msg(LOG_WARN, "nft", "conn_reject_dropped",
		    "the dns process is %s: %llu kernel refusal record(s) dropped so far",
		    d->pid <= 0 ? "not running"
		    : d->ready  ? "behind"
		                : "not ready",
		    (unsigned long long)p->nflog_dropped);
}

static void
parent_nflog_cb(evutil_socket_t fd, short what, void *arg)
{
	struct parent *p = arg;
	uint64_t lost;

	(void)fd;
	(void)what;
	nflog_read(p->nflog, parent_nflog_record, p);
	lost = nflog_lost(p->nflog);
	if (lost != p->nflog_lost_seen &&
	    (p->nflog_lost_seen == 0 || lost / 1000 != p->nflog_lost_seen / 1000))
		log_msg(LOG_WARN, "nft", "conn_reject_lost",
		    "the kernel dropped refusal records (socket full) %llu time(s) so far",
		    (unsigned long long)lost);
	p->nflog_lost_seen = lost;
}

static void
parent_dispatch(struct pkid *k, const union chan_msg *m)
{
	if (!chan_role_may_send(k->role, m)) {
		char why[96];

		snprintf(why, sizeof(why), "%s may not send %s", chan_role_name(k->role),
		    chan_type_name(m->hdr.type));
		parent_violation(k, why);
		return;
	}
	switch (m->hdr.type) {
	case CHAN_SOCKET_REQ:
		parent_socket(k, &m->socket_req);
		break;
	case CHAN_LEARN:
		parent_learn(k, &m->learn);
		break;
	case CHAN_POLICY:
		parent_policy(k, m);
		break;
	case CHAN_VAULT:
		parent_vault(k, m);
		break;
	case CHAN_LEAF_REQ:
		parent_leaf(k, &m->leaf_req);
		break;
	case CHAN_ACK:
		parent_ack(k, &m->ack);
		break;
	case CHAN_EVENT:
		parent_event(k, &m->event);
		break;
	case CHAN_READY:
		if (!k->ready) {
			struct log_line l;

			k->ready = true;
			k->ever_ready = true;
			log_begin(&l, LOG_INFO, "proc", "worker_ready");
			log_str(&l, "role", chan_role_name(k->role));
			log_int(&l, "pid", k->pid);
			log_end(&l);
			parent_update_ready(k->p);
		}
		break;
	default:
		/* chan_validate() refuses every other type in this direction. */
		parent_violation(k, "unexpected message type");
		break;
	}
}

static void
parent_chan_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pkid *k = arg;

	/* Bounded per wakeup so that signals and the other children are served under load. */
	for (int i = 0; i < 256 && k->chanfd >= 0; i++) {
		union chan_msg m;
		int passfd;
		const char *why;

		switch (chan_recv(k->chanfd, &m, CHAN_TO_PARENT, &passfd, &why)) {
		case CHAN_AGAIN:
			return;
		case CHAN_EOF:
			parent_close_chan(k);
			return;
		case CHAN_INVALID:
		case CHAN_FDLOST: /* the children pass the parent no descriptors */
			parent_violation(k, why);
			return;
		case CHAN_OK:
			parent_dispatch(k, &m);
			/* A vault chunk holds secrets: no copy of it stays on this stack. */
			if (m.hdr.type == CHAN_VAULT)
				explicit_bzero(&m, sizeof(m));
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
	pid_t ours[CHAN_ROLE_MAX + 1];
	size_t nours = 0;
	char err[256];
	struct log_line l;

	ppolicy_expire(p->pp);
	parent_push_deadlines(p);
	parent_ca_tick(p);
	if (p->shs.status != NULL)
		p->shs.status->learned = ppolicy_learned_count(p->pp);
	ours[nours++] = getpid();
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		if (p->kids[r].pid > 0)
			ours[nours++] = p->kids[r].pid;
	capwatch_scan(p->capwatch, ours, nours);
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

static bool
parent_any_alive(const struct parent *p)
{
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		if (p->kids[r].pid > 0)
			return true;
	return false;
}

static void
parent_kid_gone(struct pkid *k, int status)
{
	struct parent *p = k->p;
	struct log_line l;
	bool stable = time(NULL) - k->started >= PARENT_STABLE_S;

	log_begin(&l, p->stopping ? LOG_INFO : LOG_ERROR, "proc", "worker_exit");
	log_str(&l, "role", chan_role_name(k->role));
	log_int(&l, "pid", k->pid);
	if (WIFEXITED(status))
		log_int(&l, "status", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		log_int(&l, "signal", WTERMSIG(status));
	log_end(&l);
	k->pid = -1;
	k->ready = false;
	parent_close_chan(k);
	/* The nft table stays: a dead child means less service, never open egress. */
	parent_push_drop_role(p, k->role);
	if (k->role == CHAN_ROLE_CONTROL && p->vault != NULL && !p->stopping) {
		/*
		 * The vault lives in control's store: a new control starts without
		 * one, so the intercept must not keep injecting what nobody can
		 * see or change through the API any more. It goes with control.
		 */
		struct ppush *u = parent_push_new(p);

		log_msg(LOG_WARN, "vault", "vault_dropped",
		    "control exited: the credential vault written through the API is dropped");
		if (u != NULL) {
			u->new_vault = true; /* the empty vault */
			parent_push_vault(p, u, NULL, 0);
			parent_push_queue(p, u);
		}
	}
	parent_update_ready(p);
	if (p->stopping) {
		if (!parent_any_alive(p))
			event_base_loopbreak(p->base);
		return;
	}
	/*
	 * A child that keeps failing before it was ever ready fails on its
	 * configuration (a bad policy, a port taken for good): looping cannot
	 * help. Refuse to run, loudly; the table stays, egress stays blocked.
	 */
	if (!k->ever_ready && ++k->startup_failures >= PARENT_STARTUP_TRIES) {
		log_msg(LOG_ERROR, "proc", "startup_failed",
		    "the %s process failed %u times before it was ready; see the errors above",
		    chan_role_name(k->role), k->startup_failures);
		p->exit_code = 1;
		event_base_loopbreak(p->base);
		return;
	}
	if (stable)
		k->backoff_ms = PARENT_BACKOFF_MIN_MS;
	{
		struct timeval tv = {k->backoff_ms / 1000, (k->backoff_ms % 1000) * 1000};

		log_begin(&l, LOG_WARN, "proc", "worker_restart");
		log_str(&l, "role", chan_role_name(k->role));
		log_uint(&l, "in_ms", k->backoff_ms);
		log_end(&l);
		evtimer_add(k->ev_restart, &tv);
	}
	k->backoff_ms *= 2;
	if (k->backoff_ms > PARENT_BACKOFF_MAX_MS)
		k->backoff_ms = PARENT_BACKOFF_MAX_MS;
}

static void
parent_sigchld_cb(evutil_socket_t sig, short what, void *arg)
{
	struct parent *p = arg;
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (int r = 0; r < CHAN_ROLE_MAX; r++)
			if (pid == p->kids[r].pid) {
				parent_kid_gone(&p->kids[r], status);
				break;
			}
	}
}

static void
parent_kill_cb(evutil_socket_t fd, short what, void *arg)
{
	struct parent *p = arg;

	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		if (p->kids[r].pid > 0) {
			log_msg(LOG_WARN, "proc", "worker_kill", "%s did not stop in time",
			    chan_role_name(r));
			kill(p->kids[r].pid, SIGKILL);
		}
}

static void
parent_sigterm_cb(evutil_socket_t sig, short what, void *arg)
{
	struct parent *p = arg;
	/* The report child drains its deliveries for up to REPORT_DRAIN_S. */
	struct timeval tv = {0, PARENT_STOP_GRACE_MS * 1000};

	if (p->kids[CHAN_ROLE_REPORT].pid > 0)
		tv.tv_sec = REPORT_DRAIN_S + 1;
	if (p->stopping)
		return;
	p->stopping = true;
	log_msg(LOG_INFO, "proc", "stop", "stopping on signal %d", (int)sig);
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		evtimer_del(p->kids[r].ev_restart);
	if (!parent_any_alive(p)) {
		event_base_loopbreak(p->base);
		return;
	}
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		if (p->kids[r].pid > 0)
			kill(p->kids[r].pid, SIGTERM);
	evtimer_add(p->ev_kill, &tv);
}

/* SIGHUP re-reads the policy sources: control holds them. */
static void
parent_sighup_cb(evutil_socket_t sig, short what, void *arg)
{
	struct parent *p = arg;
	pid_t pid = p->kids[CHAN_ROLE_CONTROL].pid;

	log_msg(LOG_INFO, "proc", "reload", "SIGHUP: asking control to reload");
	if (pid > 0)
		kill(pid, SIGHUP);
}

/* Which child serves a listener (the API, DNS, or the intercept's ports). */
static enum chan_role
parent_listener_role(int i)
{
	if (i == LISTEN_API)
		return CHAN_ROLE_CONTROL;
	if (i >= LISTEN_DNS_UDP4 && i <= LISTEN_DNS_TCP6)
		return CHAN_ROLE_DNS;
	return CHAN_ROLE_INTERCEPT;
}

/*
 * In the child: keep only its own listeners, its channel and the shared
 * pages it mapped; forget the parent's loop without touching its kernel
 * state.
 */
static void
parent_child_reset(struct event_base *base, int keepfd, struct listen_set *ls, enum chan_role role)
{
	int keep[LISTEN_MAX + 1];
	size_t nkeep = 0;
	sigset_t all;
	struct sigaction sa;

	for (int i = 0; i < LISTEN_MAX; i++) {
		if (parent_listener_role(i) != role)
			ls->fd[i] = -1;
		else if (ls->fd[i] >= 0)
			keep[nkeep++] = ls->fd[i];
	}
	keep[nkeep++] = keepfd;
	/*
	 * The event base's epoll and signal fds are shared with the parent:
	 * close our copies first, so that freeing the base below cannot touch
	 * the parent's epoll registrations (it only meets closed fds). Every
	 * number: the parent's limit is raised, and it may hold more than
	 * 1024 descriptors (queued sockets of another child, its channels).
	 */
	if (closefds_except(keep, nkeep) != 0)
		_exit(127);
	event_base_free(base);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (int s = 1; s < NSIG; s++)
		sigaction(s, &sa, NULL);
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
}

/* In a new child: what its role must not hold goes before it runs a line of its own. */
static void
parent_child_forget(struct parent *p, enum chan_role role)
{
	/* No child holds the CA key: the parent mints the intercept's leaves. */
	ca_forget_key(p->cfg->ca);
	ca_forget_key(p->cfg->ca_prev);
	leaf_cache_free(p->minter);
	p->minter = NULL;
	/* Only control holds the API token. */
	if (role != CHAN_ROLE_CONTROL)
		explicit_bzero(p->cfg->token, sizeof(p->cfg->token));
	/* Only the intercept dials through the chained proxy (and dns, for DNS through it). */
	if (role != CHAN_ROLE_INTERCEPT && !(role == CHAN_ROLE_DNS && p->cfg->dns_via_proxy))
		explicit_bzero(p->cfg->upstream_proxy_auth, sizeof(p->cfg->upstream_proxy_auth));
	/* Only report sends the OTLP headers (an exporter's credentials). */
	if (role != CHAN_ROLE_REPORT)
		explicit_bzero(p->cfg->otlp_headers, sizeof(p->cfg->otlp_headers));
	/* The vault reaches the intercept by push, never by inheritance. */
	parent_vault_free(p->vault, p->vault_len);
	p->vault = NULL;
	for (struct ppush *u = p->pushes; u != NULL; u = u->next)
		if (u->vault != NULL) {
			explicit_bzero(u->vault, u->vault_len);
			u->vault_len = 0;
		}
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		chan_doc_reset(&p->kids[r].rx);
}

/* A new intercept: the vault and the learned entries in force, as pushes. */
static void parent_intercept_state(struct parent *p);

static void
parent_spawn(struct pkid *k)
{
	struct parent *p = k->p;
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

		log_set_role(chan_role_name(k->role));
		if (shstat_attach(&p->shs, k->role) != 0) {
			log_msg(LOG_ERROR, "proc", "startup", "cannot map the shared counters: %s",
			    strerror(errno));
			_exit(70);
		}
		parent_child_reset(p->base, sv[1], &p->cfg->listen, k->role);
		parent_child_forget(p, k->role);
		if (privsep_drop(p->wuid, p->wgid, self, err, sizeof(err)) != 0) {
			log_msg(LOG_ERROR, "proc", "privdrop", "%s", err);
			_exit(70);
		}
		_exit(p->worker_fn(p->cfg, sv[1], k->role));
	}
	close(sv[1]);
	if (fcntl(sv[0], F_SETFL, O_NONBLOCK) != 0)
		log_msg(LOG_ERROR, "proc", "spawn", "fcntl: %s", strerror(errno));
	k->pid = pid;
	k->chanfd = sv[0];
	k->started = time(NULL);
	k->ready = false;
	/* The policy in force first: a new child starts from it, not from its sources. */
	if (ppolicy_send(p->pp, sv[0], CHAN_ID_HANDOVER) != 0)
		log_msg(LOG_ERROR, "proc", "spawn", "policy handover to %s failed: %s",
		    chan_role_name(k->role), strerror(errno));
	k->ev_chan = event_new(p->base, sv[0], EV_READ | EV_PERSIST, parent_chan_cb, k);
	event_add(k->ev_chan, NULL);
	{
		struct log_line l;

		log_begin(&l, LOG_INFO, "proc", "worker_start");
		log_str(&l, "role", chan_role_name(k->role));
		log_int(&l, "pid", pid);
		log_uint(&l, "uid", p->wuid);
		log_uint(&l, "gid", p->wgid);
		log_end(&l);
	}
	if (k->role == CHAN_ROLE_INTERCEPT)
		parent_intercept_state(p);
	return;
retry : {
	struct timeval tv = {1, 0};
	evtimer_add(k->ev_restart, &tv);
}
}

/* The learned entries in force, gathered into batches for a new intercept. */
struct parent_learn_batch {
	struct parent *p;
	struct chan_learn l[CHAN_MAX_BATCH];
	size_t n;
};

static void
parent_learn_batch_push(struct parent_learn_batch *b)
{
	struct ppush *u;

	if (b->n > 0 && (u = parent_push_new(b->p)) != NULL) {
		parent_push_learns(b->p, u, b->l, b->n, 0);
		parent_push_queue(b->p, u);
	}
	b->n = 0;
}

static void
parent_learn_collect(const struct chan_learn *l, void *arg)
{
	struct parent_learn_batch *b = arg;

	b->l[b->n++] = *l;
	if (b->n == CHAN_MAX_BATCH)
		parent_learn_batch_push(b);
}

static void
parent_intercept_state(struct parent *p)
{
	struct parent_learn_batch *b;
	struct ppush *u;

	/* Not a new vault: the one in force, handed to the new intercept. */
	if (p->vault != NULL && (u = parent_push_new(p)) != NULL) {
		parent_push_vault(p, u, p->vault, p->vault_len);
		parent_push_queue(p, u);
	}
	if ((b = calloc(1, sizeof(*b))) == NULL)
		return; /* the intercept learns them again as names are resolved */
	b->p = p;
	ppolicy_foreach_learned(p->pp, parent_learn_collect, b);
	parent_learn_batch_push(b);
	free(b);
	/* The chained proxy's addresses, when its name was resolved. */
	if (p->nproxy > 0 && (u = parent_push_new(p)) != NULL) {
		parent_push_proxy(p, u);
		parent_push_queue(p, u);
	}
}

/*
 * Write the sandbox CA certificate (during a renewal's overlap, the new
 * one and the previous one) where the workload reads it. The parent
 * made the CA, so it writes the export itself, whatever a previous run
 * left in the directory (another owner, stale temporary files); it says
 * which path to fix when it cannot.
 */
static int
parent_export_ca(const struct config *cfg, char *err, size_t errlen)
{
	const struct ca *cas[CA_MAX_BUNDLE] = {cfg->ca, cfg->ca_prev};
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
	if (ca_export_bundle(cas, cfg->ca_prev != NULL ? 2 : 1, cfg->ca_export, e, sizeof(e)) !=
	    0) {
		snprintf(err, errlen,
		    "cannot write the CA export %.200s: %.120s (uid %u); make its "
		    "directory writable by that uid or set EGRESSD_CA_EXPORT",
		    cfg->ca_export, e, (unsigned)geteuid());
		return -1;
	}
	return 0;
}

/* ---- the sandbox CA's renewal (certs/carenew.h) ---- */

/* Log a CA's fingerprint and notAfter. */
static void
parent_ca_log(struct log_line *l, const char *key, const struct ca *ca)
{
	char fp[65], k2[32];

	ca_fingerprint(ca, fp);
	log_str(l, key, fp);
	snprintf(k2, sizeof(k2), "%s_not_after", key);
	log_int(l, k2, (long long)ca_not_after(ca));
}

/* The CA certificates in force to control and the intercept (certificates only). */
static void
parent_ca_push(struct parent *p)
{
	static const enum chan_role to[] = {CHAN_ROLE_CONTROL, CHAN_ROLE_INTERCEPT};
	struct pkid *icpt = &p->kids[CHAN_ROLE_INTERCEPT];
	struct chan_ca *m = calloc(1, sizeof(*m));
	struct ppush *u = parent_push_new(p);
	int n = -1, np = 0;

	if (m != NULL) {
		n = ca_der(p->cfg->ca, m->cur, sizeof(m->cur));
		if (p->cfg->ca_prev != NULL)
			np = ca_der(p->cfg->ca_prev, m->prev, sizeof(m->prev));
	}
	if (m == NULL || u == NULL || n <= 0 || np < 0) {
		/*
		 * An intercept that keeps the old CA could not take the leaves
		 * the new one signs: it restarts, and inherits the CAs in force.
		 */
		log_msg(LOG_ERROR, "vault", "ca_push_error",
		    "the CA certificates cannot be pushed: the intercept restarts with them");
		if (parent_alive(icpt))
			kill(icpt->pid, SIGKILL);
		free(m);
		free(u);
		return;
	}
	m->hdr.type = CHAN_CA;
	m->hdr.id = u->id;
	m->cur_len = (uint32_t)n;
	m->prev_len = (uint32_t)np;
	u->ca = true;
	for (size_t i = 0; i < sizeof(to) / sizeof(to[0]); i++) {
		struct pkid *k = &p->kids[to[i]];

		if (parent_alive(k))
			parent_push_sent(
			    u, k, CHAN_CA, chan_send_wait(k->chanfd, m, PARENT_SEND_MS));
	}
	free(m);
	parent_push_queue(p, u);
}

/*
 * Write the export again; until it is written, it is retried every
 * CARENEW_RETRY_SECS. The first failure is logged, and the recovery.
 */
static void
parent_ca_export(struct parent *p, time_t now)
{
	char err[512];
	bool was = p->ca_export_dirty;

	p->ca_export_dirty = parent_export_ca(p->cfg, err, sizeof(err)) != 0;
	if (p->ca_export_dirty) {
		p->ca_export_retry_at = now + CARENEW_RETRY_SECS;
		if (!was)
			log_msg(LOG_ERROR, "vault", "ca_export_error",
			    "%s (the workload may not trust the new leaves; retried every %d s)",
			    err, CARENEW_RETRY_SECS);
	} else if (was)
		log_msg(LOG_INFO, "vault", "ca_export", "the CA export is written again: %s",
		    p->cfg->ca_export);
}

/*
 * A new CA for the leaves from now on; the current one becomes the
 * previous, still exported and served until it expires. Its key is
 * dropped at once (EVP_PKEY_free wipes the scalar): nothing is signed
 * with it again. A failure keeps the CA in force and is retried.
 */
static int
parent_ca_renew(struct parent *p, time_t now)
{
	struct config *cfg = p->cfg;
	struct ca_config cc;
	struct ca *fresh;
	unsigned char der[CHAN_CA_DER_MAX];
	char err[CA_ERR_LEN];
	struct log_line l;

	memset(&cc, 0, sizeof(cc));
	cc.validity_secs = p->ca_lifetime;
	fresh = ca_generate(&cc, err, sizeof(err));
	if (fresh != NULL && ca_der(fresh, der, sizeof(der)) < 0) {
		snprintf(err, sizeof(err), "the new CA certificate does not fit the channel");
		ca_free(fresh);
		fresh = NULL;
	}
	if (fresh == NULL) {
		p->ca_retry_at = now + CARENEW_RETRY_SECS;
		log_msg(LOG_ERROR, "vault", "ca_renew_error",
		    "the sandbox CA is not renewed (retried in %d s): %s", CARENEW_RETRY_SECS, err);
		return -1;
	}
	p->ca_retry_at = 0;
	ca_free(cfg->ca_prev); /* carenew_next() renews only without one */
	ca_forget_key(cfg->ca);
	cfg->ca_prev = cfg->ca;
	cfg->ca = fresh;
	/* The minter borrowed the old CA: the next leaf makes a new one. */
	leaf_cache_free(p->minter);
	p->minter = NULL;
	log_begin(&l, LOG_INFO, "vault", "ca_renew");
	parent_ca_log(&l, "ca", cfg->ca);
	parent_ca_log(&l, "previous", cfg->ca_prev);
	log_end(&l);
	parent_ca_export(p, now);
	parent_ca_push(p);
	return 0;
}

/* The previous CA expired: out of the export and GET /ca.pem, and freed. */
static void
parent_ca_drop_prev(struct parent *p, time_t now)
{
	struct log_line l;

	log_begin(&l, LOG_INFO, "vault", "ca_previous_expired");
	parent_ca_log(&l, "previous", p->cfg->ca_prev);
	parent_ca_log(&l, "ca", p->cfg->ca);
	log_end(&l);
	ca_free(p->cfg->ca_prev);
	p->cfg->ca_prev = NULL;
	parent_ca_export(p, now);
	parent_ca_push(p);
}

/* An operator CA is never renewed: warn as its end nears, and when it is past. */
static void
parent_ca_operator(struct parent *p, time_t now)
{
	enum carenew_op_state st = carenew_operator_state(ca_not_after(p->cfg->ca), now);
	struct log_line l;

	if (!carenew_operator_warn(p->ca_op_logged, st))
		return;
	p->ca_op_logged = st;
	log_begin(&l, st == CARENEW_OP_EXPIRED ? LOG_ERROR : LOG_WARN, "vault",
	    st == CARENEW_OP_EXPIRED ? "ca_expired" : "ca_expiry_warning");
	log_str(&l, "msg",
	    st == CARENEW_OP_EXPIRED
	        ? "the operator CA (ca-cert) has expired: no leaf can be issued; egressd never "
	          "renews an operator CA, replace it and restart"
	        : "the operator CA (ca-cert) expires within 7 days; egressd never renews an "
	          "operator CA, replace it and restart");
	parent_ca_log(&l, "ca", p->cfg->ca);
	log_end(&l);
}

/* Every watchdog tick: the CA's schedule. */
static void
parent_ca_tick(struct parent *p)
{
	struct config *cfg = p->cfg;
	time_t now = time(NULL);

	if (!cfg->intercept || cfg->ca == NULL)
		return;
	if (ca_is_loaded(cfg->ca)) {
		parent_ca_operator(p, now);
		return;
	}
	if (p->ca_export_dirty && now >= p->ca_export_retry_at)
		parent_ca_export(p, now);
	/* Two steps at most: a late tick may find the previous CA expired and the current due. */
	for (int i = 0; i < 2; i++) {
		struct carenew_sched s = {
		    .cur_not_after = ca_not_after(cfg->ca),
		    .prev_not_after = cfg->ca_prev != NULL ? ca_not_after(cfg->ca_prev) : 0,
		    .renew_before = p->ca_renew_before,
		    .retry_at = p->ca_retry_at,
		};

		switch (carenew_next(&s, now)) {
		case CARENEW_NONE:
			return;
		case CARENEW_DROP_PREV:
			parent_ca_drop_prev(p, now);
			break;
		case CARENEW_RENEW:
			if (parent_ca_renew(p, now) != 0)
				return;
			break;
		}
	}
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
	{
		struct config_proxy px;

		config_proxy(cfg, &px);
		snprintf(p.proxy_name, sizeof(p.proxy_name), "%s", px.set ? px.name : "");
	}
	p.worker_fn = worker;
	p.ownfd = -1;
	for (int r = 0; r < CHAN_ROLE_MAX; r++) {
		p.kids[r].p = &p;
		p.kids[r].role = (enum chan_role)r;
		p.kids[r].pid = -1;
		p.kids[r].chanfd = -1;
		p.kids[r].backoff_ms = PARENT_BACKOFF_MIN_MS;
	}
	p.present = 1u << CHAN_ROLE_CONTROL | 1u << CHAN_ROLE_DNS;
	if (cfg->intercept)
		p.present |= 1u << CHAN_ROLE_INTERCEPT;
	{
		struct config_report *rep = malloc(sizeof(*rep));

		if (rep == NULL || config_report(cfg, rep, err, sizeof(err)) != 0) {
			log_msg(LOG_ERROR, "proc", "startup", "report settings: %s",
			    rep == NULL ? "out of memory" : err);
			if (rep != NULL)
				explicit_bzero(rep, sizeof(*rep));
			free(rep);
			return 1;
		}
		if (rep->webhook || rep->otlp.enabled)
			p.present |= 1u << CHAN_ROLE_REPORT;
		explicit_bzero(rep, sizeof(*rep)); /* the OTLP headers are report's alone */
		free(rep);
	}
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		p.shs.rw[r] = p.shs.ro[r] = -1;
	p.shs.status_rw = p.shs.status_ro = -1;

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
		/* Checked with the configuration; here for the values in force. */
		if (carenew_settings(cfg->ca_lifetime, cfg->ca_renew_before, &p.ca_lifetime,
		        &p.ca_renew_before, err, sizeof(err)) != 0) {
			log_msg(LOG_ERROR, "vault", "ca_error", "%s", err);
			return 1;
		}
		cc.validity_secs = p.ca_lifetime;
		if (cfg->ca_cert[0] != '\0')
			cfg->ca = ca_load(cfg->ca_cert, cfg->ca_key, err, sizeof(err));
		else
			cfg->ca = ca_generate(&cc, err, sizeof(err));
		if (cfg->ca == NULL) {
			log_msg(LOG_ERROR, "vault", "ca_error", "sandbox CA: %s", err);
			return 1;
		}
		/* An operator CA already within 7 days of its end is warned about at start. */
		if (ca_is_loaded(cfg->ca))
			parent_ca_operator(&p, time(NULL));
		else {
			struct log_line l;

			log_begin(&l, LOG_INFO, "vault", "ca_generate");
			parent_ca_log(&l, "ca", cfg->ca);
			log_uint(&l, "lifetime_s", p.ca_lifetime);
			log_uint(&l, "renew_before_s", p.ca_renew_before);
			log_end(&l);
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
	/*
	 * The refusals' records (docs/nflog.md), before the table is touched: a
	 * group another reader holds (another egressd in this namespace) is a
	 * start-up error that leaves the ruleset as it was, not silence.
	 */
	if (cfg->nflog_group != 0 &&
	    (p.nflog = nflog_open(cfg->nflog_group, err, sizeof(err))) == NULL) {
		log_msg(LOG_ERROR, "nft", "nflog_error", "%s", err);
		close(p.ownfd);
		listen_close(&cfg->listen);
		return 1;
	}
	{
		struct addrclass_own own;
		bool changed;

		if (ownnet_scan(&own, err, sizeof(err)) != 0) {
			log_msg(LOG_ERROR, "nft", "own_networks_error",
			    "cannot read the sandbox's own networks: %s", err);
			nflog_close(p.nflog);
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
			nflog_close(p.nflog);
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
		nflog_close(p.nflog);
		enforce_close(p.enf);
		close(p.ownfd);
		listen_close(&cfg->listen);
		return 1;
	}
	parent_ready_file(&p, false);
	if (shstat_open(&p.shs, err, sizeof(err)) != 0) {
		log_msg(LOG_ERROR, "proc", "startup", "%s", err);
		ppolicy_free(p.pp);
		nflog_close(p.nflog);
		enforce_close(p.enf);
		close(p.ownfd);
		listen_close(&cfg->listen);
		return 1;
	}
	p.shs.status->present = p.present;

	p.base = event_base_new();
	if (p.base == NULL) {
		log_msg(LOG_ERROR, "proc", "startup", "event_base_new failed");
		nflog_close(p.nflog);
		enforce_close(p.enf);
		close(p.ownfd);
		return 1;
	}
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		p.kids[r].ev_restart = evtimer_new(p.base, parent_restart_cb, &p.kids[r]);
	p.ev_kill = evtimer_new(p.base, parent_kill_cb, &p);
	p.ev_watch = event_new(p.base, -1, EV_PERSIST, parent_watch_cb, &p);
	p.ev_own = event_new(p.base, p.ownfd, EV_READ | EV_PERSIST, parent_own_cb, &p);
	event_add(p.ev_own, NULL);
	if (p.nflog != NULL) {
		p.ev_nflog =
		    event_new(p.base, nflog_fd(p.nflog), EV_READ | EV_PERSIST, parent_nflog_cb, &p);
		event_add(p.ev_nflog, NULL);
	}
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

	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		if (p.present & (1u << r))
			parent_spawn(&p.kids[r]);
	event_base_dispatch(p.base);
	rc = p.exit_code;

	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		if (p.kids[r].pid > 0) {
			int status;

			kill(p.kids[r].pid, SIGKILL);
			waitpid(p.kids[r].pid, &status, 0);
			p.kids[r].pid = -1;
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
	event_free(p.ev_kill);
	event_free(p.ev_watch);
	event_free(p.ev_own);
	if (p.ev_nflog != NULL)
		event_free(p.ev_nflog);
	nflog_close(p.nflog);
	close(p.ownfd);
	for (int r = 0; r < CHAN_ROLE_MAX; r++) {
		parent_close_chan(&p.kids[r]);
		event_free(p.kids[r].ev_restart);
	}
	while (p.pushes != NULL) {
		struct ppush *u = p.pushes;

		p.pushes = u->next;
		parent_vault_free(u->vault, u->vault_len);
		free(u);
	}
	parent_vault_free(p.vault, p.vault_len);
	shstat_close(&p.shs);
	ppolicy_free(p.pp);
	leaf_cache_free(p.minter);
	capwatch_free(p.capwatch);
	event_base_free(p.base);
	enforce_close(p.enf);
	listen_close(&cfg->listen);
	return rc;
}
