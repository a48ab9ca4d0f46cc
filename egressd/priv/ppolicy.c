/*
 * The parent's copy of the effective policy (parent process); see
 * ppolicy.h. A worker may only propose a whole policy through the strict
 * decoder; what the kernel enforces is computed here from that decoded
 * copy, never taken from the worker as sets or flags.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
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

	/* A document being received. */
	char *rx;
	uint32_t rx_total, rx_have, rx_id;
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
	free(pp->rx);
	pp->rx = NULL;
	pp->rx_total = pp->rx_have = pp->rx_id = 0;
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
ppolicy_chunk(struct ppolicy *pp, const struct chan_policy *c, int *err, char *msg, size_t msglen,
    const char **why)
{
	struct policy_err pe;
	struct policy *newp;
	char *doc;
	size_t len;

	*err = 0;
	msg[0] = '\0';
	if (c->offset == 0) {
		if (pp->rx != NULL) {
			*why = "policy begun twice";
			return PPOLICY_VIOLATION;
		}
		pp->rx = malloc(c->total ? c->total : 1);
		if (pp->rx == NULL) {
			*err = ENOMEM;
			snprintf(msg, msglen, "out of memory");
			/* The rest of the chunks are refused as out of sequence: say so now. */
			return PPOLICY_DONE;
		}
		pp->rx_total = c->total;
		pp->rx_have = 0;
		pp->rx_id = c->hdr.id;
	} else if (pp->rx == NULL || c->hdr.id != pp->rx_id || c->total != pp->rx_total ||
	           c->offset != pp->rx_have) {
		*why = "policy chunk out of sequence";
		return PPOLICY_VIOLATION;
	}
	memcpy(pp->rx + pp->rx_have, c->data, c->len);
	pp->rx_have += c->len;
	if ((c->hdr.flags & CHAN_POLICY_MORE) != 0)
		return PPOLICY_MORE;
	doc = pp->rx;
	len = pp->rx_total;
	pp->rx = NULL;
	ppolicy_rx_reset(pp);
	newp = policy_wire_decode(doc, len, &pe);
	if (newp == NULL) {
		policy_err_format(&pe, msg, msglen);
		log_msg(LOG_ERROR, "policy", "policy_reject", "worker's policy refused: %s", msg);
		free(doc);
		*err = EINVAL;
		return PPOLICY_DONE;
	}
	*err = ppolicy_apply(pp, newp, doc, len, msg, msglen);
	return PPOLICY_DONE;
}

/* One blocking send with the handover's deadline. */
static int
ppolicy_send_one(int fd, const struct chan_policy *c)
{
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};

		if (chan_send(fd, c, -1) == 0)
			return 0;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS)
			return -1;
		if (poll(&pfd, 1, PPOLICY_HANDOVER_S * 1000) <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
	}
}

int
ppolicy_handover(struct ppolicy *pp, int chanfd)
{
	struct chan_policy *c = calloc(1, sizeof(*c));
	size_t off = 0;
	int rc = 0;

	if (c == NULL)
		return -1;
	do {
		size_t n = pp->wire_len - off;

		if (n > CHAN_POLICY_CHUNK)
			n = CHAN_POLICY_CHUNK;
		memset(c, 0, sizeof(*c));
		c->hdr.type = CHAN_POLICY;
		c->hdr.id = 1;
		c->total = (uint32_t)pp->wire_len;
		c->offset = (uint32_t)off;
		c->len = (uint32_t)n;
		if (n > 0)
			memcpy(c->data, pp->wire + off, n);
		off += n;
		if (off < pp->wire_len)
			c->hdr.flags = CHAN_POLICY_MORE;
		if (ppolicy_send_one(chanfd, c) != 0) {
			rc = -1;
			break;
		}
	} while (off < pp->wire_len);
	free(c);
	return rc;
}
