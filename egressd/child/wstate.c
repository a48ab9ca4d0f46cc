/*
 * Child state and policy lifecycle (child processes). In control, a
 * policy change is handed to the parent as one policy_wire document; the
 * parent puts it in the kernel and pushes it to dns and intercept, and
 * answers only once they acknowledged, so no process answers under a
 * policy the kernel does not enforce, and an API answer means every
 * process decides on the new one. An invalid source leaves the previous
 * policy in force. dns and intercept take what the parent pushes here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "certs/ca.h"
#include "egressd/child/wchan.h"
#include "egressd/child/wstate.h"
#include "egressd/common/learnmap.h"
#include "egressd/common/log.h"
#include "egressd/common/safefile.h"
#include "egressd/common/shstat.h"
#include "policy/binding.h"
#include "policy/name.h"
#include "policy/policy.h"
#include "vault/snap.h"
#include "vault/vwire.h"

/* How often the policy and always files are checked for changes. */
#define WSTATE_WATCH_S 2

struct wstate_apply;

struct wstate {
	const struct config *cfg;
	enum chan_role role;
	struct event_base *base;
	struct wchan *chan;
	int exit_code;

	struct policy *policy; /* active, with the always rules */
	char *inherit;         /* the parent's policy in force at start (policy_wire), or NULL */
	size_t inherit_len;
	uint64_t revision;             /* bumped on every applied change */
	bool ready;                    /* this process reported READY */
	struct wstate_apply *applying; /* in flight, FIFO */
	struct wstate_apply *queue_tail;

	struct learnmap *learned;
	struct vault_snap *vault; /* intercept: the vault in force, or NULL */
	struct wstate_service svc_ops;
	void *svc;               /* the role's service (svc_ops.start's) */
	struct metrics *metrics; /* this process's page (shstat), or metrics_local */
	struct metrics metrics_local;
	struct ca *ca_own; /* the CA the parent pushed after a renewal; NULL: cfg->ca */
	char *ca_bundle;   /* PEM of the CAs to trust; NULL: cfg->ca's alone */
	size_t ca_bundle_len;
	struct chan_doc push_rx; /* a document the parent is pushing */
	int push_err;            /* of the learn batch being pushed */
	/*
	 * The chained proxy's addresses (CHAN_LEARN_PROXY), intercept only:
	 * those being pushed, and those in force (the service reads them at
	 * start, and is told of every change after).
	 */
	struct chan_learn proxy_rx[CHAN_MAX_PROXY_ADDRS], proxy[CHAN_MAX_PROXY_ADDRS];
	size_t nproxy_rx, nproxy;
	struct event *ev_watch; /* policy and always files */
	struct wstate_stamp {
		long long mtime_ns, size, ino;
	} stamps[4];
};

struct wstate_apply {
	struct wstate_apply *next;
	struct wstate *ws;
	struct policy *p;
	wstate_applied_cb cb;
	void *arg;
	bool sent; /* handed to the parent: its answer is awaited */
};

static void wstate_apply_next(struct wstate *ws);

static void
wstate_apply_done(struct wstate *ws, struct wstate_apply *a, int err, const char *msg)
{
	ws->applying = a->next;
	if (ws->applying == NULL)
		ws->queue_tail = NULL;
	if (a->cb != NULL)
		a->cb(err, msg, a->arg);
	policy_free(a->p);
	free(a);
	wstate_apply_next(ws);
}

struct wstate_prune {
	const struct policy *newp;
	size_t forgotten;
};

/* Keep a learned entry while its name is still allowed on that port scope. */
static bool
wstate_keep_learned(const struct learnmap_entry *e, void *arg)
{
	return policy_learn_refusal(((struct wstate_prune *)arg)->newp, e->name, e->port) == NULL;
}

static void
wstate_forgotten_cb(const struct learnmap_entry *e, void *arg)
{
	((struct wstate_prune *)arg)->forgotten++;
}

/*
 * Make p (a reference taken) the policy in force in this process: swap,
 * bump the revision, forget the learned entries it no longer allows (the
 * parent has forgotten them in the kernel), and log it.
 */
static void
wstate_swap_policy(struct wstate *ws, struct policy *p)
{
	struct wstate_prune pr = {.newp = p};
	struct policy *old = ws->policy;
	struct log_line l;

	ws->policy = p;
	ws->revision++;
	learnmap_prune(ws->learned, wstate_keep_learned, wstate_forgotten_cb, &pr);
	policy_free(old);
	log_begin(&l, LOG_INFO, "policy", "policy_apply");
	log_uint(&l, "revision", ws->revision);
	log_str(&l, "default", policy_action_str(policy_default_action(p)));
	log_uint(&l, "rules", policy_rule_count(p, POLICY_ORIGIN_USER));
	log_uint(&l, "deny_always", policy_rule_count(p, POLICY_ORIGIN_DENY_ALWAYS));
	log_uint(&l, "allow_always", policy_rule_count(p, POLICY_ORIGIN_ALLOW_ALWAYS));
	log_uint(&l, "log_skip", policy_log_skip_count(p));
	log_uint(&l, "forgotten", pr.forgotten);
	log_end(&l);
}

/*
 * The parent has put the policy in force: its static sets, and the
 * learned addresses and flows it no longer allows are gone; dns and
 * intercept have it. Swap here too.
 */
static void
wstate_policy_cb(const union chan_msg *reply, int fd, void *arg)
{
	struct wstate_apply *a = arg;
	struct wstate *ws = a->ws;
	struct log_line l;

	if (reply->result.err != 0) {
		ws->metrics->policy_failures++;
		ws->metrics->nft_errors++;
		log_begin(&l, LOG_ERROR, "policy", "policy_reject");
		log_str(&l, "why", reply->result.msg);
		log_end(&l);
		wstate_apply_done(ws, a, EIO, reply->result.msg);
		return;
	}
	ws->metrics->policy_applies++;
	wstate_swap_policy(ws, policy_ref(a->p));
	if (ws->svc != NULL && ws->svc_ops.policy_changed != NULL)
		ws->svc_ops.policy_changed(ws->svc);
	wstate_apply_done(ws, a, 0, "");
}

/* Hand the policy to the parent as one policy_wire document in chunks. */
static void
wstate_apply_next(struct wstate *ws)
{
	struct wstate_apply *a = ws->applying;
	char *doc;
	size_t len = 0;
	int rc;

	if (a == NULL || a->sent)
		return;
	doc = policy_wire_encode(a->p, &len);
	if (doc == NULL || len > CHAN_MAX_POLICY_BYTES) {
		free(doc);
		wstate_apply_done(ws, a, E2BIG, "policy too large for the channel");
		return;
	}
	a->sent = true;
	rc = wchan_doc(ws->chan, CHAN_POLICY, doc, len, wstate_policy_cb, a);
	free(doc);
	if (rc != 0)
		wstate_apply_done(ws, a, EPIPE, "channel to the parent is broken");
}

/* Whether every policy still being applied allows name (see wstate.h). */
bool
wstate_pending_allows(const struct wstate *ws, const char *name)
{
	for (const struct wstate_apply *a = ws->applying; a != NULL; a = a->next) {
		struct policy_decision dec;

		policy_decide_name(a->p, name, &dec);
		if (dec.action != POLICY_ALLOW)
			return false;
	}
	return true;
}

void
wstate_apply(struct wstate *ws, struct policy *p, wstate_applied_cb cb, void *arg)
{
	struct wstate_apply *a = calloc(1, sizeof(*a));

	if (a == NULL) {
		policy_free(p);
		if (cb != NULL)
			cb(ENOMEM, "out of memory", arg);
		return;
	}
	a->ws = ws;
	a->p = p;
	a->cb = cb;
	a->arg = arg;
	if (ws->queue_tail != NULL)
		ws->queue_tail->next = a;
	else
		ws->applying = a;
	ws->queue_tail = a;
	wstate_apply_next(ws);
}

struct policy *
wstate_with_always(struct wstate *ws, const struct policy *user, char *err, size_t errlen)
{
	struct policy_err pe;
	struct policy *p = policy_with_always_dir(user, ws->cfg->always_dir, &pe);

	if (p == NULL)
		policy_err_format(&pe, err, errlen);
	return p;
}

/* Whether buf (the persisted policy file) carries the tag written beside it. */
static bool
wstate_policy_file_tag_ok(const struct config *cfg, const char *buf, size_t n)
{
	char path[PATH_MAX + 8], *tag = NULL, ferr[512];
	size_t tlen = 0;
	bool ok;

	/* Without a token (insecure mode) there is no key: nothing to check with. */
	if (cfg->token[0] == '\0')
		return true;
	snprintf(path, sizeof(path), "%s.hmac", cfg->os_policy_file);
	if (safefile_read(path, SAFEFILE_TAG_HEX + 2, &tag, &tlen, ferr, sizeof(ferr)) != 0)
		return false;
	ok = safefile_tag_ok(cfg->token, buf, n, tag, tlen);
	free(tag);
	return ok;
}

/* The user policy from the configured sources, in OpenSandbox order. */
static struct policy *
wstate_load_user(struct wstate *ws, bool at_start, char *err, size_t errlen)
{
	const struct config *cfg = ws->cfg;
	struct policy_err pe;
	struct policy *p;

	memset(&pe, 0, sizeof(pe));
	/*
	 * A restarted worker, when the API owns the rules, takes the policy
	 * the parent holds in force: an API change survives a worker crash.
	 * With a YAML file the file is the truth (it also holds the bindings).
	 */
	if (at_start && ws->inherit != NULL && cfg->policy_file[0] == '\0') {
		p = policy_wire_decode(ws->inherit, ws->inherit_len, &pe);
		if (p != NULL) {
			log_msg(LOG_INFO, "policy", "policy_inherit",
			    "starting from the policy in force in the parent (%zu bytes)",
			    ws->inherit_len);
			return p;
		}
		log_msg(LOG_ERROR, "policy", "policy_inherit",
		    "the parent's policy does not decode (%s); loading the sources", pe.msg);
	}
	if (cfg->policy_file[0] != '\0') {
		p = policy_from_yaml_file(cfg->policy_file, NULL, &pe);
		if (p == NULL)
			policy_err_format(&pe, err, errlen);
		return p;
	}
	if (cfg->os_policy_file[0] != '\0') {
		/*
		 * The file the API persists: read back only as the sidecar wrote
		 * it (its directory and the file of root or our uid, not writable
		 * by others, no symlink), never what a workload planted.
		 */
		char *buf, ferr[512];
		size_t n;
		int rc = safefile_read(cfg->os_policy_file, 1 << 22, &buf, &n, ferr, sizeof(ferr));

		if (rc < 0)
			log_msg(LOG_ERROR, "policy", "policy_file_refused",
			    "not loading the policy file: %s", ferr);
		/*
		 * And only with the tag the sidecar wrote beside it, keyed with
		 * the token: a file changed by anyone else (root included) that
		 * does not hold the token is refused.
		 */
		if (rc == 0 && n > 0 && !wstate_policy_file_tag_ok(cfg, buf, n)) {
			log_msg(LOG_ERROR, "policy", "policy_file_refused",
			    "not loading the policy file %s: its integrity tag (%s.hmac) is "
			    "missing "
			    "or does not match (written by someone without the API token, or by "
			    "another token); falling back to the environment's policy",
			    cfg->os_policy_file, cfg->os_policy_file);
			free(buf);
			rc = -1;
		}
		if (rc == 0 && n > 0) {
			p = policy_from_json(buf, n, NULL, &pe);
			free(buf);
			if (p != NULL)
				return p;
			/* OpenSandbox: an invalid file falls back to the env policy. */
			log_msg(LOG_WARN, "policy", "policy_file_invalid",
			    "ignoring invalid policy file %s: %s:%u:%u: %s", cfg->os_policy_file,
			    pe.file, pe.line, pe.col, pe.msg);
		} else if (rc == 0)
			free(buf);
	}
	if (cfg->rules_json != NULL && cfg->rules_json[0] != '\0') {
		p = policy_from_json(cfg->rules_json, strlen(cfg->rules_json), NULL, &pe);
		if (p == NULL)
			policy_err_format(&pe, err, errlen);
		return p;
	}
	if (!at_start && ws->policy != NULL)
		return policy_ref(ws->policy);
	return policy_new_deny_all();
}

static void
wstate_reload_cb(int err, const char *msg, void *arg)
{
	if (err != 0)
		log_msg(LOG_ERROR, "policy", "policy_reload",
		    "reload refused, previous policy stays: %s", msg);
}

void
wstate_reload(struct wstate *ws, const char *why)
{
	char err[512] = "";
	struct policy *user, *eff;

	log_msg(LOG_INFO, "policy", "policy_reload", "reloading (%s)", why);
	/* Without a YAML file the API owns the user rules: only the always files reload. */
	if (ws->cfg->policy_file[0] != '\0')
		user = wstate_load_user(ws, false, err, sizeof(err));
	else
		user = policy_ref(ws->policy);
	if (user == NULL) {
		ws->metrics->policy_failures++;
		log_msg(LOG_ERROR, "policy", "policy_invalid", "previous policy stays: %s", err);
		return;
	}
	eff = wstate_with_always(ws, user, err, sizeof(err));
	policy_free(user);
	if (eff == NULL) {
		ws->metrics->policy_failures++;
		log_msg(LOG_ERROR, "policy", "policy_invalid", "previous policy stays: %s", err);
		return;
	}
	wstate_apply(ws, eff, wstate_reload_cb, NULL);
}

static void
wstate_stamp(const char *path, struct wstate_stamp *st)
{
	struct stat sb;

	if (path[0] == '\0' || stat(path, &sb) != 0) {
		memset(st, 0, sizeof(*st));
		return;
	}
	st->mtime_ns = (long long)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
	st->size = (long long)sb.st_size;
	st->ino = (long long)sb.st_ino;
}

static bool
wstate_stamps(struct wstate *ws)
{
	char deny[PATH_MAX + 16], allow[PATH_MAX + 16], skip[PATH_MAX + 20];
	struct wstate_stamp now[4];
	bool changed;

	snprintf(deny, sizeof(deny), "%s/deny.always", ws->cfg->always_dir);
	snprintf(allow, sizeof(allow), "%s/allow.always", ws->cfg->always_dir);
	snprintf(skip, sizeof(skip), "%s/log_skip.always", ws->cfg->always_dir);
	wstate_stamp(ws->cfg->policy_file, &now[0]);
	wstate_stamp(deny, &now[1]);
	wstate_stamp(allow, &now[2]);
	wstate_stamp(skip, &now[3]);
	changed = memcmp(now, ws->stamps, sizeof(now)) != 0;
	memcpy(ws->stamps, now, sizeof(now));
	return changed;
}

static void
wstate_watch_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wstate *ws = arg;
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	learnmap_expire(ws->learned, ts.tv_sec);
	if (ws->role != CHAN_ROLE_CONTROL)
		return;
	if (ws->svc != NULL && ws->svc_ops.tick != NULL)
		ws->svc_ops.tick(ws->svc);
	if (wstate_stamps(ws))
		wstate_reload(ws, "file changed");
}

/* Tell the parent this process serves. */
void
wstate_report_ready(struct wstate *ws, const char *what)
{
	struct chan_ready r;

	memset(&r, 0, sizeof(r));
	r.hdr.type = CHAN_READY;
	r.hdr.id = wchan_id(ws->chan);
	if (wchan_send(ws->chan, &r) != 0)
		return;
	ws->ready = true;
	log_msg(LOG_INFO, "proc", "child_ready", "%s in place", what);
}

static void
wstate_first_cb(int err, const char *msg, void *arg)
{
	struct wstate *ws = arg;

	if (err != 0) {
		log_msg(
		    LOG_ERROR, "policy", "policy_invalid", "initial policy not applied: %s", msg);
		ws->exit_code = 1;
		event_base_loopbreak(ws->base);
		return;
	}
	wstate_report_ready(ws, "policy and control API");
}

/* ---- what the parent pushes (dns, intercept) ---- */

static void
wstate_ack(struct wstate *ws, uint32_t id, int err)
{
	struct chan_ack a;

	memset(&a, 0, sizeof(a));
	a.hdr.type = CHAN_ACK;
	a.hdr.id = id;
	a.err = err;
	if (wchan_send(ws->chan, &a) != 0)
		log_msg(LOG_ERROR, "proc", "chan_send", "acknowledgement failed");
}

/* Intercept: a pushed policy or vault is in force (its session tickets end). */
static void
wstate_changed(struct wstate *ws)
{
	if (ws->role == CHAN_ROLE_INTERCEPT && ws->svc != NULL &&
	    ws->svc_ops.policy_changed != NULL)
		ws->svc_ops.policy_changed(ws->svc);
}

/* The policy in force changed: swap, and forget learned entries it no longer allows. */
static int
wstate_take_policy(struct wstate *ws, const char *doc, size_t len)
{
	struct policy_err pe;
	struct policy *p;

	memset(&pe, 0, sizeof(pe));
	p = policy_wire_decode(doc ? doc : "", len, &pe);
	if (p == NULL) {
		log_msg(LOG_ERROR, "policy", "policy_reject", "the parent's policy: %s", pe.msg);
		return EINVAL;
	}
	wstate_swap_policy(ws, p);
	wstate_changed(ws);
	return 0;
}

/* The vault in force changed (intercept): requests in flight keep theirs. */
static int
wstate_take_vault(struct wstate *ws, const char *doc, size_t len)
{
	struct vault_snap *snap;
	char err[256];

	if (ws->role != CHAN_ROLE_INTERCEPT)
		return EPERM;
	if (vault_wire_decode(doc, len, &snap, err, sizeof(err)) != 0) {
		log_msg(LOG_ERROR, "vault", "vault_error", "the vault pushed is refused: %s", err);
		return EINVAL;
	}
	vault_snap_unref(ws->vault);
	ws->vault = snap;
	wstate_changed(ws);
	log_msg(LOG_INFO, "vault", "vault_in_force", "revision %llu, %zu bindings",
	    (unsigned long long)(snap ? vault_snap_revision(snap) : 0),
	    snap ? binding_set_count(vault_snap_bindings(snap)) : (size_t)0);
	return 0;
}

/* PEM of cur and, if any, prev, concatenated; owned, or NULL when out of memory. */
static char *
wstate_bundle(const struct ca *cur, const struct ca *prev, size_t *lenp)
{
	size_t a = 0, b = 0;
	const char *pa = ca_pem_view(cur, &a), *pb = prev != NULL ? ca_pem_view(prev, &b) : "";
	char *out = malloc(a + b + 1);

	if (out == NULL)
		return NULL;
	memcpy(out, pa, a);
	memcpy(out + a, pb, b);
	out[a + b] = '\0';
	*lenp = a + b;
	return out;
}

/*
 * The sandbox CA was renewed, or its previous one expired: the CA in
 * force and the bundle to serve. Certificates only (ca_from_der checks
 * each is a CA); the key is the parent's.
 */
static int
wstate_take_ca(struct wstate *ws, const struct chan_ca *m)
{
	struct ca *cur, *prev = NULL, *old = ws->ca_own;
	char err[256], fp[65];
	char *bundle;
	size_t blen = 0;

	if (ws->role != CHAN_ROLE_CONTROL && ws->role != CHAN_ROLE_INTERCEPT)
		return EPERM;
	if ((cur = ca_from_der(m->cur, m->cur_len, err, sizeof(err))) == NULL ||
	    (m->prev_len > 0 &&
	        (prev = ca_from_der(m->prev, m->prev_len, err, sizeof(err))) == NULL)) {
		log_msg(LOG_ERROR, "vault", "ca_error", "the CA pushed is refused: %s", err);
		ca_free(cur);
		return EINVAL;
	}
	bundle = wstate_bundle(cur, prev, &blen);
	ca_free(prev);
	if (bundle == NULL) {
		ca_free(cur);
		return ENOMEM;
	}
	ws->ca_own = cur;
	if (ws->svc != NULL && ws->svc_ops.ca_changed != NULL &&
	    ws->svc_ops.ca_changed(ws->svc) != 0) {
		/* The service still issues from the old one: it stays in force here. */
		ws->ca_own = old;
		ca_free(cur);
		free(bundle);
		return ENOMEM;
	}
	ca_free(old);
	free(ws->ca_bundle);
	ws->ca_bundle = bundle;
	ws->ca_bundle_len = blen;
	ca_fingerprint(cur, fp);
	log_msg(LOG_INFO, "vault", "ca_in_force", "sandbox CA sha256 %s%s", fp,
	    m->prev_len > 0 ? ", the previous one still trusted" : "");
	return 0;
}

/*
 * One of the chained proxy's addresses: never a learned destination (the
 * workload's SNI is never checked against them). The whole batch goes to
 * the service, which dials them from now on.
 */
static void
wstate_push_proxy(struct wstate *ws, const struct chan_learn *l)
{
	if (ws->role != CHAN_ROLE_INTERCEPT || ws->svc_ops.proxy == NULL)
		ws->push_err = EPERM;
	else if (ws->nproxy_rx >= CHAN_MAX_PROXY_ADDRS)
		ws->push_err = E2BIG;
	else
		ws->proxy_rx[ws->nproxy_rx++] = *l;
	if ((l->hdr.flags & CHAN_LEARN_MORE) != 0)
		return;
	if (ws->push_err == 0 && ws->svc != NULL)
		ws->push_err = ws->svc_ops.proxy(ws->svc, ws->proxy_rx, ws->nproxy_rx);
	if (ws->push_err == 0) {
		memcpy(ws->proxy, ws->proxy_rx, ws->nproxy_rx * sizeof(ws->proxy[0]));
		ws->nproxy = ws->nproxy_rx;
	}
	wstate_ack(ws, l->hdr.id, ws->push_err);
	ws->push_err = 0;
	ws->nproxy_rx = 0;
}

const struct chan_learn *
wstate_proxy(const struct wstate *ws, size_t *n)
{
	*n = ws->nproxy;
	return ws->proxy;
}

static void
wstate_push_cb(const union chan_msg *m, void *arg)
{
	struct wstate *ws = arg;
	struct timespec ts;
	char *doc;
	size_t len;
	int err;

	/* Control takes the CA certificates only, as it took no push before them. */
	if (ws->role == CHAN_ROLE_CONTROL && m->hdr.type != CHAN_CA) {
		log_msg(LOG_ERROR, "proc", "chan_lost",
		    "the parent pushed %s to control, which takes only the CA",
		    chan_type_name(m->hdr.type));
		ws->exit_code = 71;
		event_base_loopbreak(ws->base);
		return;
	}
	switch (m->hdr.type) {
	case CHAN_CA:
		wstate_ack(ws, m->hdr.id, wstate_take_ca(ws, &m->ca));
		return;
	case CHAN_LEARN:
		if ((m->learn.hdr.flags & CHAN_LEARN_PROXY) != 0) {
			wstate_push_proxy(ws, &m->learn);
			return;
		}
		/* The intercept checks SNI against the names the DNS proxy learned. */
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if (ws->role == CHAN_ROLE_INTERCEPT &&
		    learnmap_add(ws->learned, m->learn.name, m->learn.family, m->learn.addr,
		        m->learn.port, ts.tv_sec + m->learn.timeout_s) != 0)
			ws->push_err = ENOSPC;
		if ((m->learn.hdr.flags & CHAN_LEARN_MORE) == 0) {
			wstate_ack(
			    ws, m->hdr.id, ws->role == CHAN_ROLE_INTERCEPT ? ws->push_err : EPERM);
			ws->push_err = 0;
		}
		return;
	case CHAN_EVENT:
		if (ws->svc != NULL && ws->svc_ops.event != NULL)
			ws->svc_ops.event(ws->svc, &m->event);
		return;
	case CHAN_NFLOG:
		if (ws->svc != NULL && ws->svc_ops.nflog != NULL)
			ws->svc_ops.nflog(ws->svc, &m->nflog);
		return;
	case CHAN_POLICY:
	case CHAN_VAULT:
		break;
	default:
		return; /* chan_validate() lets no other type through with a parent id */
	}
	switch (chan_doc_feed(&ws->push_rx, m)) {
	case CHAN_DOC_MORE:
		return;
	case CHAN_DOC_BAD:
		log_msg(LOG_ERROR, "proc", "chan_lost", "the parent's document is out of sequence");
		ws->exit_code = 71;
		event_base_loopbreak(ws->base);
		return;
	case CHAN_DOC_NOMEM:
		wstate_ack(ws, m->hdr.id, ENOMEM);
		return;
	case CHAN_DOC_DONE:
		break;
	}
	doc = chan_doc_take(&ws->push_rx, &len);
	err = m->hdr.type == CHAN_POLICY ? wstate_take_policy(ws, doc, len)
	                                 : wstate_take_vault(ws, doc, len);
	vault_wire_free(doc, len);
	wstate_ack(ws, m->hdr.id, err);
}

/* ---- control: the vault to the intercept ---- */

struct wstate_vpub {
	wstate_applied_cb cb;
	void *arg;
};

static void
wstate_vault_cb(const union chan_msg *reply, int fd, void *arg)
{
	struct wstate_vpub *v = arg;

	if (v->cb != NULL)
		v->cb(reply->result.err, reply->result.msg, v->arg);
	free(v);
}

void
wstate_publish_vault(
    struct wstate *ws, const struct vault_snap *snap, wstate_applied_cb cb, void *arg)
{
	struct wstate_vpub *v;
	char *doc;
	size_t len;
	int err, rc;

	if (ws->chan == NULL || !ws->cfg->intercept) {
		if (cb != NULL)
			cb(0, "", arg);
		return;
	}
	doc = vault_wire_encode(snap, &len, &err);
	if ((doc == NULL && err != 0) || len > CHAN_MAX_VAULT_BYTES ||
	    (v = calloc(1, sizeof(*v))) == NULL) {
		vault_wire_free(doc, len);
		if (cb != NULL)
			cb(err ? err : E2BIG, "the vault does not fit the channel", arg);
		return;
	}
	v->cb = cb;
	v->arg = arg;
	rc = wchan_doc(ws->chan, CHAN_VAULT, doc, len, wstate_vault_cb, v);
	vault_wire_free(doc, len);
	if (rc != 0) {
		free(v);
		if (cb != NULL)
			cb(EPIPE, "channel to the parent is broken", arg);
	}
}

/* ---- control: the others' status ---- */

bool
wstate_all_ready(const struct wstate *ws)
{
	const volatile struct shstat_status *st = shstat_view()->status;

	if (st == NULL)
		return ws->ready;
	return ws->ready && st->ready == st->present;
}

bool
wstate_intercept_ready(const struct wstate *ws)
{
	const volatile struct shstat_status *st = shstat_view()->status;

	return ws->cfg->intercept && st != NULL && (st->ready & (1u << CHAN_ROLE_INTERCEPT)) != 0;
}

void
wstate_metrics_sum(const struct wstate *ws, struct metrics *out)
{
	const struct shstat_view *v = shstat_view();

	memset(out, 0, sizeof(*out));
	if (v->status == NULL) {
		metrics_add(out, ws->metrics);
		return;
	}
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		if (v->role[r] != NULL)
			metrics_add(out, v->role[r]);
}

uint64_t
wstate_learned_count(const struct wstate *ws)
{
	const volatile struct shstat_status *st = shstat_view()->status;

	if (st != NULL)
		return st->learned;
	return learnmap_count(ws->learned);
}

/* dns and intercept start from the policy the parent handed over (deny-all if none yet). */
static struct policy *
wstate_inherited(struct wstate *ws)
{
	struct policy_err pe;
	struct policy *p = NULL;

	memset(&pe, 0, sizeof(pe));
	if (ws->inherit != NULL &&
	    (p = policy_wire_decode(ws->inherit, ws->inherit_len, &pe)) == NULL)
		log_msg(LOG_ERROR, "policy", "policy_inherit",
		    "the parent's policy does not decode (%s): deny-all until the next", pe.msg);
	return p != NULL ? p : policy_new_deny_all();
}

static int
wstate_start_control(struct wstate *ws)
{
	char err[512] = "";
	struct policy *user, *eff;

	vault_json_wipe_init();
	/* Bad initial configuration is fatal: egressd must not run half-configured. */
	user = wstate_load_user(ws, true, err, sizeof(err));
	if (user == NULL) {
		log_msg(LOG_ERROR, "policy", "policy_invalid", "%s", err);
		return -1;
	}
	eff = wstate_with_always(ws, user, err, sizeof(err));
	policy_free(user);
	if (eff == NULL) {
		log_msg(LOG_ERROR, "policy", "policy_invalid", "%s", err);
		return -1;
	}
	ws->policy = policy_new_deny_all();
	/* GET /ca.pem serves the CA certificates the parent pushes after a renewal. */
	if (ws->chan != NULL)
		wchan_on_push(ws->chan, wstate_push_cb, ws);
	wstate_stamps(ws);
	if (ws->svc_ops.start != NULL &&
	    (ws->svc = ws->svc_ops.start(ws, err, sizeof(err))) == NULL) {
		log_msg(LOG_ERROR, "api", "api_error", "%s", err);
		policy_free(eff);
		return -1;
	}
	wstate_apply(ws, eff, wstate_first_cb, ws);
	return 0;
}

static int
wstate_start_data(struct wstate *ws)
{
	char e[512];

	ws->policy = wstate_inherited(ws);
	wchan_on_push(ws->chan, wstate_push_cb, ws);
	if (ws->role == CHAN_ROLE_INTERCEPT)
		vault_json_wipe_init();
	if (ws->svc_ops.start != NULL && (ws->svc = ws->svc_ops.start(ws, e, sizeof(e))) == NULL) {
		log_msg(LOG_ERROR,
		    ws->role == CHAN_ROLE_DNS      ? "dns"
		    : ws->role == CHAN_ROLE_REPORT ? "report"
		                                   : "vault",
		    ws->role == CHAN_ROLE_DNS      ? "dns_error"
		    : ws->role == CHAN_ROLE_REPORT ? "report_error"
		                                   : "intercept_error",
		    "%s", e);
		return -1;
	}
	return 0;
}

int
wstate_start(struct wstate *ws)
{
	struct timeval tv = {WSTATE_WATCH_S, 0};

	ws->ev_watch = event_new(ws->base, -1, EV_PERSIST, wstate_watch_cb, ws);
	if (ws->ev_watch == NULL || event_add(ws->ev_watch, &tv) != 0)
		return -1;
	/* Forked during a renewal's overlap: the previous CA is trusted too. */
	if (ws->cfg->ca != NULL && ws->cfg->ca_prev != NULL &&
	    (ws->ca_bundle = wstate_bundle(ws->cfg->ca, ws->cfg->ca_prev, &ws->ca_bundle_len)) ==
	        NULL)
		return -1;
	if (ws->role == CHAN_ROLE_CONTROL)
		return wstate_start_control(ws);
	return wstate_start_data(ws);
}

struct wstate *
wstate_new(const struct config *cfg, enum chan_role role, struct event_base *base,
    struct wchan *chan, const struct wstate_service *svc)
{
	struct wstate *ws = calloc(1, sizeof(*ws));

	if (ws == NULL)
		return NULL;
	ws->cfg = cfg;
	ws->role = role;
	ws->base = base;
	ws->chan = chan;
	if (svc != NULL)
		ws->svc_ops = *svc;
	ws->metrics = shstat_view()->own != NULL ? shstat_view()->own : &ws->metrics_local;
	ws->learned = learnmap_new();
	if (ws->learned == NULL) {
		free(ws);
		return NULL;
	}
	return ws;
}

void
wstate_free(struct wstate *ws)
{
	if (ws == NULL)
		return;
	while (ws->applying != NULL) {
		struct wstate_apply *a = ws->applying;
		ws->applying = a->next;
		policy_free(a->p);
		free(a);
	}
	if (ws->svc != NULL && ws->svc_ops.stop != NULL)
		ws->svc_ops.stop(ws->svc);
	ws->svc = NULL;
	vault_snap_unref(ws->vault);
	if (ws->ev_watch != NULL)
		event_free(ws->ev_watch);
	chan_doc_reset(&ws->push_rx);
	ca_free(ws->ca_own);
	free(ws->ca_bundle);
	learnmap_free(ws->learned);
	policy_free(ws->policy);
	free(ws->inherit);
	free(ws);
}

/* The CA the parent pushed last, or the one this process inherited. */
const struct ca *
wstate_ca(const struct wstate *ws)
{
	return ws->ca_own != NULL ? ws->ca_own : ws->cfg->ca;
}

/* What GET /ca.pem serves: the current CA, then the previous one during an overlap. */
const char *
wstate_ca_bundle(const struct wstate *ws, size_t *lenp)
{
	if (ws->ca_bundle != NULL) {
		*lenp = ws->ca_bundle_len;
		return ws->ca_bundle;
	}
	if (ws->cfg->ca == NULL)
		return NULL;
	return ca_pem_view(ws->cfg->ca, lenp);
}

void
wstate_set_chan(struct wstate *ws, struct wchan *chan)
{
	ws->chan = chan;
}

void
wstate_set_inherit(struct wstate *ws, char *doc, size_t len)
{
	free(ws->inherit);
	ws->inherit = doc;
	ws->inherit_len = len;
}

void
wstate_fail(struct wstate *ws, int exit_code)
{
	ws->exit_code = exit_code;
	event_base_loopbreak(ws->base);
}

int
wstate_exit_code(const struct wstate *ws)
{
	return ws->exit_code;
}

void
wstate_set_policy(struct wstate *ws, struct policy *p)
{
	policy_free(ws->policy);
	ws->policy = p;
}

const struct config *
wstate_cfg(const struct wstate *ws)
{
	return ws->cfg;
}

enum chan_role
wstate_role(const struct wstate *ws)
{
	return ws->role;
}

struct event_base *
wstate_base(const struct wstate *ws)
{
	return ws->base;
}

struct wchan *
wstate_chan(const struct wstate *ws)
{
	return ws->chan;
}

struct policy *
wstate_policy(const struct wstate *ws)
{
	return ws->policy;
}

struct learnmap *
wstate_learned(const struct wstate *ws)
{
	return ws->learned;
}

struct metrics *
wstate_metrics(const struct wstate *ws)
{
	return ws->metrics;
}

uint64_t
wstate_revision(const struct wstate *ws)
{
	return ws->revision;
}

bool
wstate_ready(const struct wstate *ws)
{
	return ws->ready;
}

struct vault_snap *
wstate_vault(const struct wstate *ws)
{
	return ws->vault;
}

void *
wstate_svc(const struct wstate *ws)
{
	return ws->svc;
}

/* An event for the deny webhook; see wstate.h. */
void
wstate_event(struct wstate *ws, enum chan_event_kind kind, const char *name, int family,
    const uint8_t *addr, uint16_t port, const char *reason)
{
	struct chan_event e;
	size_t nl = name != NULL ? strlen(name) : 0;

	char canon[POLICY_NAME_MAX + 1];
	size_t cl;

	if (ws->chan == NULL || ws->cfg->deny_webhook[0] == '\0' || nl >= sizeof(e.name) ||
	    strlen(reason) >= sizeof(e.reason))
		return;
	/* The parent takes only canonical names (chan_validate): any other is left out. */
	if (nl > 0 &&
	    (nl > POLICY_NAME_MAX ||
	        policy_name_canon((const uint8_t *)name, nl, 0, canon, &cl) != POLICY_NAME_OK ||
	        cl != nl || memcmp(canon, name, nl) != 0))
		nl = 0;
	if (nl == 0 && family != AF_INET && family != AF_INET6)
		return;
	memset(&e, 0, sizeof(e));
	e.hdr.type = CHAN_EVENT;
	e.hdr.id = wchan_id(ws->chan);
	e.kind = (uint8_t)kind;
	if (family == AF_INET || family == AF_INET6) {
		e.family = (uint8_t)family;
		memcpy(e.addr, addr, family == AF_INET ? 4 : 16);
		e.port = port;
	}
	if (nl > 0)
		memcpy(e.name, name, nl);
	/* A reason word of [a-z0-9_] (chan_validate), else a generic one. */
	if (reason[0] == '\0' ||
	    strspn(reason, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(reason))
		reason = "refused";
	memcpy(e.reason, reason, strlen(reason));
	e.time_s = (uint64_t)time(NULL);
	if (wchan_offer(ws->chan, &e) != 0)
		ws->metrics->events_dropped++;
}
