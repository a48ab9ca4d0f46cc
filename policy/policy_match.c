/*
 * policy_match: decisions on canonical names and addresses (every process
 * that decides): deny.always, then allow.always, then the first matching
 * user rule, then the default, in the same order as the nft sets.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "policy/binding.h"
#include "policy/policy.h"
#include "policy/policy_internal.h"
#include "policy/yamltree.h"

/* ---- matching ---- */

static void
decision_default(const struct policy *p, struct policy_decision *out, const char *why)
{
	memset(out, 0, sizeof(*out));
	out->action = p->def;
	out->origin = POLICY_ORIGIN_DEFAULT;
	out->index = SIZE_MAX;
	out->why = why;
}

static void
decision_rule(const struct policy *p, enum policy_origin o, size_t i, struct policy_decision *out,
    const char *why)
{
	const struct policy_rule *r = &p->lists[o].v[i];

	out->action = r->action;
	out->origin = o;
	out->index = i;
	out->target = r->target;
	out->kind = r->kind;
	out->ports = r->action == POLICY_ALLOW ? r->ports : NULL;
	out->nports = r->action == POLICY_ALLOW ? r->nports : 0;
	out->why = why;
}

static void
name_consider(const struct policy_nent *e, int32_t best[POLICY_ORIGIN_RULE_LISTS])
{
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++) {
		if (e->idx[o] >= 0 && (best[o] < 0 || e->idx[o] < best[o]))
			best[o] = e->idx[o];
	}
}

/* Name decision; see policy.h. */
void
policy_decide_name(const struct policy *p, const char *canon, struct policy_decision *out)
{
	static const char *const why[POLICY_ORIGIN_RULE_LISTS] = {
	    "matched by an operator deny.always rule (beats every other rule)",
	    "matched by an operator allow.always rule (beats user rules)",
	    "first matching user rule in list order",
	};
	int32_t best[POLICY_ORIGIN_RULE_LISTS] = {-1, -1, -1};
	size_t len = canon ? strlen(canon) : 0;
	uint64_t h = POLICY_FNV_OFFSET;
	unsigned labels = 0;

	if (len == 0 || len > POLICY_NAME_MAX) {
		decision_default(p, out, "not a canonical name: no rule can match");
		return;
	}
	/* One right-to-left pass over labels: the hash of every suffix comes for free. */
	size_t end = len;
	for (;;) {
		const char *dot = memrchr(canon, '.', end);
		size_t start = dot ? (size_t)(dot - canon) + 1 : 0;
		h = policy_suffix_step(h, policy_label_hash(canon + start, end - start));
		labels++;
		if (start == 0) {
			if (policy_ntab_maybe(&p->exact, h)) {
				const struct policy_nent *e =
				    policy_ntab_find(&p->exact, h, canon, len);
				if (e->len != 0)
					name_consider(e, best);
			}
			break;
		}
		/* "*.s" matches names strictly below s: a label is left of this suffix. */
		if ((p->wild.labels & policy_label_bit(labels)) && policy_ntab_maybe(&p->wild, h)) {
			const struct policy_nent *e =
			    policy_ntab_find(&p->wild, h, canon + start, len - start);
			if (e->len != 0)
				name_consider(e, best);
		}
		end = start - 1;
	}
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++) {
		if (best[o] >= 0) {
			decision_rule(p, (enum policy_origin)o, (size_t)best[o], out, why[o]);
			return;
		}
	}
	decision_default(p, out, "no rule matched the name: defaultAction");
}

/* Ports of a name; see policy.h. */
int
policy_name_ports(const struct policy *p, const char *canon, const struct policy_port_range **ports,
    size_t *nports)
{
	struct policy_decision d;

	policy_decide_name(p, canon, &d);
	*ports = d.ports;
	*nports = d.nports;
	return d.action == POLICY_ALLOW ? 1 : 0;
}

/* Port membership; see policy.h. */
bool
policy_ports_contain(const struct policy_port_range *ports, size_t nports, uint16_t port)
{
	if (nports == 0)
		return true;
	for (size_t i = 0; i < nports; i++) {
		if (port >= ports[i].lo && port <= ports[i].hi)
			return true;
	}
	return false;
}

static void
addr_mask_to(const struct policy_addr *a, uint8_t prefix, struct policy_addr *out)
{
	size_t full = prefix / 8, total = a->family == AF_INET ? 4 : 16;

	memset(out, 0, sizeof(*out));
	out->family = a->family;
	out->prefix = prefix;
	memcpy(out->bytes, a->bytes, full);
	if (full < total && prefix % 8)
		out->bytes[full] = a->bytes[full] & (uint8_t)(0xff << (8 - prefix % 8));
}

/* Address decision; see policy.h. */
void
policy_decide_addr(const struct policy *p, int family, const uint8_t *addr, uint16_t port,
    int proto, struct policy_decision *out)
{
	struct policy_addr a, k;
	int32_t dall = -1, aall = -1, udeny = -1, uallow = -1;
	bool port_miss = false;

	if (family != AF_INET && family != AF_INET6) {
		decision_default(p, out, "unknown address family");
		out->action = POLICY_DENY;
		return;
	}
	policy_addr_from_bytes(family, addr, &a);
	const uint8_t *pl = a.family == AF_INET ? p->addrs.plen4 : p->addrs.plen6;
	size_t np = a.family == AF_INET ? p->addrs.n4 : p->addrs.n6;
	for (size_t i = 0; i < np; i++) {
		addr_mask_to(&a, pl[i], &k);
		const struct policy_aent *e = policy_atab_find(&p->addrs, &k, policy_addr_hash(&k));
		if (!e->used)
			continue;
		if (e->idx[0] >= 0 && (dall < 0 || e->idx[0] < dall))
			dall = e->idx[0];
		if (e->idx[1] >= 0 && (aall < 0 || e->idx[1] < aall))
			aall = e->idx[1];
		if (e->idx[2] >= 0) {
			const struct policy_rule *r = &p->lists[POLICY_ORIGIN_USER].v[e->idx[2]];
			if (r->action == POLICY_DENY) {
				if (udeny < 0 || e->idx[2] < udeny)
					udeny = e->idx[2];
			} else if (port == 0 || policy_ports_contain(r->ports, r->nports, port)) {
				if (uallow < 0 || e->idx[2] < uallow)
					uallow = e->idx[2];
			} else {
				port_miss = true;
			}
		}
	}
	memset(out, 0, sizeof(*out));
	/*
	 * Addresses follow the nft sets (as OpenSandbox): every deny prefix,
	 * operator or user, beats every allow prefix.
	 */
	if (dall >= 0)
		decision_rule(p, POLICY_ORIGIN_DENY_ALWAYS, (size_t)dall, out,
		    "inside an operator deny.always address or CIDR");
	else if (udeny >= 0)
		decision_rule(p, POLICY_ORIGIN_USER, (size_t)udeny, out,
		    "inside a user deny address or CIDR (address denies beat address allows)");
	else if (aall >= 0)
		decision_rule(p, POLICY_ORIGIN_ALLOW_ALWAYS, (size_t)aall, out,
		    "inside an operator allow.always address or CIDR");
	else if (uallow >= 0)
		decision_rule(p, POLICY_ORIGIN_USER, (size_t)uallow, out,
		    "inside a user allow address or CIDR");
	else
		decision_default(p, out,
		    port_miss ? "an allow rule covers the address but not this port: defaultAction"
		              : "no address rule matched: defaultAction");
}

/* Learned port scope; see policy.h. */
const char *
policy_learn_refusal(const struct policy *p, const char *canon, uint16_t port)
{
	struct policy_decision dec;

	policy_decide_name(p, canon, &dec);
	if (dec.action != POLICY_ALLOW)
		return "name not allowed by the policy in force";
	if (port == 0 ? dec.nports != 0 : !policy_ports_contain(dec.ports, dec.nports, port))
		return "port scope not allowed for the name";
	return NULL;
}

/* log_skip; see policy.h. Linear: the list is an operator's short file. */
bool
policy_log_skip(const struct policy *p, const char *canon)
{
	size_t len = canon ? strlen(canon) : 0;

	for (size_t i = 0; p != NULL && i < p->log_skip.n; i++) {
		const struct policy_rule *r = &p->log_skip.v[i];
		size_t tl;

		if (r->kind == POLICY_TARGET_NAME && strcmp(r->target, canon) == 0)
			return true;
		if (r->kind != POLICY_TARGET_WILDCARD)
			continue;
		/* "*.s" covers names strictly below s, as in the rules. */
		tl = strlen(r->target + 1); /* ".s" */
		if (len > tl && strcmp(canon + len - tl, r->target + 1) == 0)
			return true;
	}
	return false;
}
