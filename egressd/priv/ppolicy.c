/*
 * The parent's copy of the effective policy (parent process); see
 * ppolicy.h. A worker may only propose a whole policy through the strict
 * decoder; what the kernel enforces is computed here from that decoded
 * copy, never taken from a child as sets or flags.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "egressd/common/learnmap.h"
#include "egressd/common/log.h"
#include "egressd/priv/ctflush.h"
#include "egressd/priv/enforce.h"
#include "egressd/priv/ppolicy.h"
#include "policy/addrclass.h"
#include "policy/policy.h"

/* Seconds a new worker has to take the policy in force. */
#define PPOLICY_HANDOVER_S 10

struct ppolicy {
	const struct config *cfg;
	struct enforce *enf;
	struct policy *policy; /* in force */
	char *wire;            /* its document, handed to a new worker */
	size_t wire_len;
	struct learnmap *learned;

	struct chan_doc rx; /* a document being received */
};

struct ppolicy *
ppolicy_new(const struct config *cfg, struct enforce *enf)
{
	struct ppolicy *pp = calloc(1, sizeof(*pp));

	if (pp == NULL)
		return NULL;
	pp->cfg = cfg;
	pp->enf = enf;
	pp->policy = policy_new_deny_all();
	pp->learned = learnmap_new();
	if (pp->policy == NULL || pp->learned == NULL) {
		ppolicy_free(pp);
		return NULL;
	}
	return pp;
}

void
ppolicy_rx_reset(struct ppolicy *pp)
{
	chan_doc_reset(&pp->rx);
}

void
ppolicy_free(struct ppolicy *pp)
{
	if (pp == NULL)
		return;
	ppolicy_rx_reset(pp);
	policy_free(pp->policy);
	free(pp->wire);
	learnmap_free(pp->learned);
	free(pp);
}

bool
ppolicy_name_allowed(struct ppolicy *pp, const char *name)
{
	struct policy_decision dec;

	policy_decide_name(pp->policy, name, &dec);
	return dec.action == POLICY_ALLOW;
}

int
ppolicy_learn_check(struct ppolicy *pp, struct chan_learn *l, const char **why)
{
	const struct policy_dns *pd = policy_dns(pp->policy);

	if ((*why = policy_learn_refusal(pp->policy, l->name, l->port)) != NULL)
		return EPERM;
	if (addrclass_refused(enforce_own(pp->enf), l->family, l->addr, pd->filter_private, why))
		return EPERM;
	if (l->timeout_s > pd->ttl_max)
		l->timeout_s = pd->ttl_max;
	return 0;
}

void
ppolicy_learned(struct ppolicy *pp, const struct chan_learn *l, size_t n)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	for (size_t i = 0; i < n; i++)
		if (learnmap_add(pp->learned, l[i].name, l[i].family, l[i].addr, l[i].port,
		        ts.tv_sec + l[i].timeout_s) != 0) {
			/* The kernel entry still times out; only an early forget is lost. */
			log_msg(LOG_WARN, "policy", "learn_full", "parent's learned map full");
			return;
		}
}

void
ppolicy_expire(struct ppolicy *pp)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	learnmap_expire(pp->learned, ts.tv_sec);
}

/* What a change takes away: learned elements to forget, prefixes whose flows end. */
struct ppolicy_revoke {
	const struct policy *newp;
	struct chan_learn *forget;
	struct ctflush_target *ends;
	size_t nforget, nends, capforget, capends;
	bool nomem;
};

static bool
ppolicy_keep_cb(const struct learnmap_entry *e, void *arg)
{
	struct ppolicy_revoke *rv = arg;

	return policy_learn_refusal(rv->newp, e->name, e->port) == NULL;
}

static struct ctflush_target *
ppolicy_end_push(struct ppolicy_revoke *rv)
{
	if (rv->nends == rv->capends) {
		size_t ncap = rv->capends ? rv->capends * 2 : 64;
		struct ctflush_target *n = realloc(rv->ends, ncap * sizeof(*n));

		if (n == NULL) {
			rv->nomem = true;
			return NULL;
		}
		rv->ends = n;
		rv->capends = ncap;
	}
	memset(&rv->ends[rv->nends], 0, sizeof(rv->ends[0]));
	return &rv->ends[rv->nends++];
}

static void
ppolicy_gone_cb(const struct learnmap_entry *e, void *arg)
{
	struct ppolicy_revoke *rv = arg;
	struct ctflush_target *t;

	if (rv->nforget == rv->capforget) {
		size_t ncap = rv->capforget ? rv->capforget * 2 : 64;
		struct chan_learn *n = realloc(rv->forget, ncap * sizeof(*n));

		if (n == NULL) {
			rv->nomem = true;
			return;
		}
		rv->forget = n;
		rv->capforget = ncap;
	}
	memset(&rv->forget[rv->nforget], 0, sizeof(rv->forget[0]));
	rv->forget[rv->nforget].family = (uint8_t)e->family;
	memcpy(rv->forget[rv->nforget].addr, e->addr, 16);
	rv->forget[rv->nforget].port = e->port;
	rv->nforget++;
	/* A forgotten address also loses its established flows. */
	if ((t = ppolicy_end_push(rv)) != NULL) {
		t->family = e->family;
		memcpy(t->addr, e->addr, 16);
		t->prefix = e->family == AF_INET ? 32 : 128;
		t->port = e->port;
	}
}

/* An IP/CIDR allow rule of the old policy that the new one does not keep. */
static int
ppolicy_rule_cb(const struct policy_rule_info *r, void *arg)
{
	struct ppolicy_revoke *rv = arg;
	struct policy_decision dec;
	struct ctflush_target *t;

	if (r->action != POLICY_ALLOW || r->addr == NULL)
		return 0;
	policy_decide_addr(rv->newp, r->addr->family, r->addr->bytes,
	    r->nports ? r->ports[0].lo : 0, IPPROTO_TCP, &dec);
	if (dec.action == POLICY_ALLOW)
		return 0;
	if ((t = ppolicy_end_push(rv)) != NULL) {
		t->family = r->addr->family;
		t->prefix = r->addr->prefix;
		memcpy(t->addr, r->addr->bytes, r->addr->family == AF_INET ? 4 : 16);
	}
	return 0;
}

/* Put newp in force (takes it and its document); 0 or an errno with msg. */
static int
ppolicy_apply(
    struct ppolicy *pp, struct policy *newp, char *doc, size_t len, char *msg, size_t msglen)
{
	struct ppolicy_revoke rv;
	char err[256] = "";
	size_t nrules = 0, deleted = 0;
	struct log_line l;

	if (enforce_policy(pp->enf, newp, &nrules, err, sizeof(err)) != 0) {
		log_msg(LOG_ERROR, "nft", "nft_error", "%s", err);
		snprintf(msg, msglen, "%s", err);
		policy_free(newp);
		free(doc);
		return EIO;
	}
	memset(&rv, 0, sizeof(rv));
	rv.newp = newp;
	/* Learned addresses of names that stay allowed are kept (no flush). */
	learnmap_prune(pp->learned, ppolicy_keep_cb, ppolicy_gone_cb, &rv);
	policy_foreach_addr(pp->policy, ppolicy_rule_cb, &rv);
	if (rv.nforget > 0 && enforce_forget(pp->enf, rv.forget, rv.nforget, err, sizeof(err)) != 0)
		log_msg(LOG_ERROR, "nft", "nft_error", "%s", err);
	if (rv.nends > 0 &&
	    ctflush_revoke(rv.ends, rv.nends, pp->cfg->mark, &deleted, err, sizeof(err)) != 0)
		log_msg(LOG_ERROR, "nft", "ct_error", "%s", err);
	else if (deleted > 0)
		log_msg(LOG_INFO, "nft", "ct_revoke", "%zu established flows ended", deleted);
	if (rv.nomem)
		log_msg(LOG_ERROR, "policy", "revoke_error",
		    "out of memory: some addresses stay learned until their timeout");
	policy_free(pp->policy);
	pp->policy = newp;
	free(pp->wire);
	pp->wire = doc;
	pp->wire_len = len;
	log_begin(&l, LOG_INFO, "nft", "nft_apply");
	log_uint(&l, "elements", nrules);
	log_bool(&l, "default_allow", policy_default_action(newp) == POLICY_ALLOW);
	log_uint(&l, "forgotten", rv.nforget);
	log_uint(&l, "flows_ended", deleted);
	log_end(&l);
	free(rv.forget);
	free(rv.ends);
	return 0;
}

enum ppolicy_status
ppolicy_chunk(struct ppolicy *pp, const union chan_msg *m, int *err, char *msg, size_t msglen,
    const char **why)
{
	struct policy_err pe;
	struct policy *newp;
	char *doc;
	size_t len;

	*err = 0;
	msg[0] = '\0';
	switch (chan_doc_feed(&pp->rx, m)) {
	case CHAN_DOC_MORE:
		return PPOLICY_MORE;
	case CHAN_DOC_BAD:
		*why = "policy chunk out of sequence";
		return PPOLICY_VIOLATION;
	case CHAN_DOC_NOMEM:
		*err = ENOMEM;
		snprintf(msg, msglen, "out of memory");
		/* The rest of the chunks are refused as out of sequence: say so now. */
		return PPOLICY_DONE;
	case CHAN_DOC_DONE:
		break;
	}
	doc = chan_doc_take(&pp->rx, &len);
	newp = policy_wire_decode(doc ? doc : "", len, &pe);
	if (newp == NULL) {
		policy_err_format(&pe, msg, msglen);
		log_msg(LOG_ERROR, "policy", "policy_reject", "control's policy refused: %s", msg);
		free(doc);
		*err = EINVAL;
		return PPOLICY_DONE;
	}
	*err = ppolicy_apply(pp, newp, doc, len, msg, msglen);
	return PPOLICY_DONE;
}

int
ppolicy_send(struct ppolicy *pp, int chanfd, uint32_t id)
{
	return chan_doc_send(
	    chanfd, CHAN_POLICY, id, pp->wire, pp->wire_len, PPOLICY_HANDOVER_S * 1000);
}

bool
ppolicy_has_policy(const struct ppolicy *pp)
{
	return pp->wire != NULL;
}

size_t
ppolicy_learned_count(const struct ppolicy *pp)
{
	return learnmap_count(pp->learned);
}

struct ppolicy_each {
	ppolicy_learn_fn fn;
	void *arg;
	time_t now;
};

static void
ppolicy_each_cb(const struct learnmap_entry *e, void *arg)
{
	struct ppolicy_each *pe = arg;
	struct chan_learn l;

	if (e->expires <= pe->now)
		return;
	memset(&l, 0, sizeof(l));
	l.hdr.type = CHAN_LEARN;
	l.family = (uint8_t)e->family;
	memcpy(l.addr, e->addr, 16);
	l.port = e->port;
	l.timeout_s = (uint32_t)(e->expires - pe->now);
	if (l.timeout_s > CHAN_MAX_TIMEOUT_S)
		l.timeout_s = CHAN_MAX_TIMEOUT_S;
	snprintf(l.name, sizeof(l.name), "%s", e->name);
	pe->fn(&l, pe->arg);
}

void
ppolicy_foreach_learned(struct ppolicy *pp, ppolicy_learn_fn fn, void *arg)
{
	struct ppolicy_each pe = {fn, arg, 0};
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	pe.now = ts.tv_sec;
	learnmap_foreach(pp->learned, ppolicy_each_cb, &pe);
}
