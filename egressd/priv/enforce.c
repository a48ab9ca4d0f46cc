/*
 * Parent-side adapter from validated channel messages to nftrules
 * (parent process only). It converts, never trusts: every element was
 * range-checked by chan_validate() and is converted field by field.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "egressd/priv/enforce.h"
#include "policy/addrclass.h"
#include "policy/policy.h"
#include "egressd/priv/nftrules.h"

struct enforce {
	struct nftrules *nft;
	bool dns_only;              /* mode dns: no IP enforcement, default accept */
	uint32_t genid;             /* ruleset generation after our last change */
	struct nftrules_rule *last; /* the static rules in force, for repair */
	size_t nlast;
	enum nftrules_action last_default;
	struct addrclass_own own; /* the sandbox's own networks, always denied */
	bool installed;           /* the table is in place (enforce_install) */
	uint16_t proxy_port;      /* the chained proxy's port; 0: no proxy */
};

/* Remember the generation our change produced; a later one is not ours. */
static void
enforce_mark(struct enforce *e)
{
	uint32_t g;

	if (nftrules_genid(e->nft, &g) == 0)
		e->genid = g;
}

_Static_assert(CONFIG_MAX_INTERCEPT_PORTS == NFTRULES_MAX_INTERCEPT, "config checks the nft limit");

/* Parse "80,443" into redirects to the plain and TLS listener ports. */
static int
enforce_ports(const struct config *cfg, struct nftrules_config *nc, char *err, size_t errlen)
{
	char buf[sizeof(cfg->intercept_ports)];
	char *save = NULL;

	snprintf(buf, sizeof(buf), "%s", cfg->intercept_ports);
	nc->nintercept = 0;
	for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
		char *end;
		unsigned long v = strtoul(t, &end, 10);

		if (*end != '\0' || v == 0 || v > 65535 ||
		    nc->nintercept >= NFTRULES_MAX_INTERCEPT) {
			snprintf(err, errlen, "intercept-ports: bad port list \"%s\"",
			    cfg->intercept_ports);
			return -1;
		}
		nc->intercept_ports[nc->nintercept].port = (uint16_t)v;
		/* Port 80 and any non-TLS port configured as such go to the plain listener. */
		nc->intercept_ports[nc->nintercept].to_port =
		    v == 80 ? cfg->plain_port : cfg->tls_port;
		nc->nintercept++;
	}
	return 0;
}

/* The report process's destinations: the webhook's and the collector's address and port. */
static int
enforce_reports(const struct config *cfg, struct nftrules_config *nc, char *err, size_t errlen)
{
	struct config_report *r = malloc(sizeof(*r));
	const struct httpurl *u[2];
	int rc = -1;

	if (r == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (config_report(cfg, r, err, errlen) != 0)
		goto out;
	u[0] = r->webhook ? &r->hook : NULL;
	u[1] = r->otlp.enabled ? &r->otlp.url : NULL;
	nc->nreports = 0;
	nc->report_mark = u[0] != NULL || u[1] != NULL ? cfg->report_mark : 0;
	for (size_t i = 0; i < 2; i++) {
		if (u[i] == NULL)
			continue;
		nc->reports[nc->nreports].family = u[i]->family;
		memcpy(nc->reports[nc->nreports].addr, u[i]->addr, 16);
		nc->reports[nc->nreports].port = u[i]->port;
		nc->nreports++;
	}
	rc = 0;
out:
	explicit_bzero(r, sizeof(*r)); /* the OTLP headers are report's alone */
	free(r);
	return rc;
}

/* The chained proxy: the intercept's only destination. */
static void
enforce_proxy(const struct config *cfg, struct nftrules_config *nc)
{
	struct config_proxy px;

	config_proxy(cfg, &px);
	nc->proxy = px.set;
	nc->dns_via_proxy = px.set && cfg->dns_via_proxy;
	nc->nproxy = 0;
	/* Given by name: no address until the dns process resolved it (enforce_set_proxy). */
	if (!px.set || px.family == 0)
		return;
	nc->proxy_dests[0].family = px.family;
	memcpy(nc->proxy_dests[0].addr, px.addr, sizeof(nc->proxy_dests[0].addr));
	nc->proxy_dests[0].port = px.port;
	nc->nproxy = 1;
}

/* OPENSANDBOX_EGRESS_DOH_BLOCKLIST into the nft configuration. */
static int
enforce_doh(const struct config *cfg, struct nftrules_config *nc, char *err, size_t errlen)
{
	struct config_prefix p[CONFIG_MAX_DOH];
	size_t n = 0;

	if (config_doh_blocklist(cfg, p, CONFIG_MAX_DOH, &n, err, errlen) != 0)
		return -1;
	nc->ndoh = 0;
	for (size_t i = 0; i < n && i < NFTRULES_MAX_DOH; i++) {
		nc->doh[i].family = p[i].family;
		memcpy(nc->doh[i].addr, p[i].addr, sizeof(nc->doh[i].addr));
		nc->doh[i].prefix_len = p[i].prefix_len;
		nc->ndoh++;
	}
	return 0;
}

/* Prepare the nft writer from the configuration. */
struct enforce *
enforce_open(const struct config *cfg, char *err, size_t errlen)
{
	struct nftrules_config nc;
	struct enforce *e;

	nftrules_config_default(&nc);
	if (strlen(cfg->table) >= sizeof(nc.table)) {
		snprintf(err, errlen, "table name too long");
		return NULL;
	}
	snprintf(nc.table, sizeof(nc.table), "%s", cfg->table);
	nc.mark = cfg->mark;
	nc.dns_mark = cfg->dns_mark;
	nc.listen_mark = cfg->listen_mark;
	nc.nflog_group = cfg->nflog_group;
	nc.dns_port = cfg->dns_port;
	nc.intercept = cfg->intercept;
	nc.peek_port = cfg->intercept ? cfg->peek_port : 0;
	if (enforce_ports(cfg, &nc, err, errlen) != 0)
		return NULL;
	for (int i = 0; i < LISTEN_MAX; i++) {
		bool dup = false;

		if (cfg->listen.fd[i] < 0)
			continue;
		for (size_t k = 0; k < nc.nlisteners; k++)
			dup |= nc.listeners[k].proto == cfg->listen.proto[i] &&
			       nc.listeners[k].port == cfg->listen.port[i];
		if (dup || nc.nlisteners >= NFTRULES_MAX_LISTENERS)
			continue;
		nc.listeners[nc.nlisteners].proto = cfg->listen.proto[i];
		nc.listeners[nc.nlisteners].port = cfg->listen.port[i];
		/* evhttp has no connection cap: the kernel keeps the API's. */
		nc.listeners[nc.nlisteners].max_conns = i == LISTEN_API ? LISTEN_API_MAX_CONNS : 0;
		nc.nlisteners++;
	}
	for (size_t i = 0; i < cfg->nupstreams && i < NFTRULES_MAX_RESOLVERS; i++) {
		nc.resolvers[i].family = cfg->upstreams[i].family;
		memcpy(nc.resolvers[i].addr, cfg->upstreams[i].addr, 16);
		nc.resolvers[i].port = cfg->upstreams[i].port;
		nc.nresolvers++;
	}
	nc.block_doh = cfg->block_doh_443;
	enforce_proxy(cfg, &nc);
	if (enforce_doh(cfg, &nc, err, errlen) != 0 || enforce_reports(cfg, &nc, err, errlen) != 0)
		return NULL;
	e = calloc(1, sizeof(*e));
	if (e == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	e->dns_only = cfg->mode == CONFIG_MODE_DNS;
	{
		struct config_proxy px;

		config_proxy(cfg, &px);
		e->proxy_port = px.set ? px.port : 0;
	}
	e->nft = nftrules_open(&nc, err, errlen);
	if (e->nft == NULL) {
		free(e);
		return NULL;
	}
	return e;
}

int
enforce_install(struct enforce *e, char *err, size_t errlen)
{
	struct nftrules_static st = {
	    .rules = NULL,
	    .nrules = 0,
	    .default_action = e->dns_only ? NFTRULES_ALLOW : NFTRULES_DENY,
	    .own = &e->own,
	};

	if (nftrules_install(e->nft, &st) != 0) {
		snprintf(err, errlen, "%s", nftrules_error(e->nft));
		return -1;
	}
	e->last_default = st.default_action;
	e->installed = true;
	enforce_mark(e);
	return 0;
}

const struct addrclass_own *
enforce_own(const struct enforce *e)
{
	return e != NULL ? &e->own : NULL;
}

int
enforce_set_own(
    struct enforce *e, const struct addrclass_own *own, bool *changed, char *err, size_t errlen)
{
	struct nftrules_static st = {
	    .rules = e->last,
	    .nrules = e->nlast,
	    .default_action = e->last_default,
	    .own = own,
	};

	*changed = false;
	if (addrclass_own_equal(&e->own, own))
		return 0;
	/* The static sets again with the new own prefixes; learned sets kept. */
	if (e->installed && nftrules_update_static(e->nft, &st) != 0) {
		snprintf(err, errlen, "%s", nftrules_error(e->nft));
		return -1;
	}
	e->own = *own;
	*changed = true;
	if (e->installed)
		enforce_mark(e);
	return 0;
}

/* The nft rules of a policy's IP/CIDR rules, one per port range. */
struct enforce_rules {
	struct nftrules_rule *v;
	size_t n, cap;
};

static int
enforce_rule_cb(const struct policy_rule_info *r, void *arg)
{
	struct enforce_rules *rs = arg;
	size_t need = r->nports ? r->nports : 1;

	if (rs->n + need > NFTRULES_MAX_RULES)
		return -1;
	if (rs->n + need > rs->cap) {
		size_t ncap = rs->cap ? rs->cap * 2 : 64;
		struct nftrules_rule *nv;

		while (ncap < rs->n + need)
			ncap *= 2;
		if ((nv = realloc(rs->v, ncap * sizeof(*nv))) == NULL)
			return -1;
		rs->v = nv;
		rs->cap = ncap;
	}
	for (size_t i = 0; i < need; i++) {
		struct nftrules_rule *o = &rs->v[rs->n++];

		memset(o, 0, sizeof(*o));
		o->action = r->action == POLICY_ALLOW ? NFTRULES_ALLOW : NFTRULES_DENY;
		o->family = r->addr->family;
		memcpy(o->addr, r->addr->bytes, r->addr->family == AF_INET ? 4 : 16);
		o->prefix_len = r->addr->prefix;
		if (r->nports) {
			o->port_lo = r->ports[i].lo;
			o->port_hi = r->ports[i].hi;
		}
	}
	return 0;
}

int
enforce_policy(struct enforce *e, const struct policy *p, size_t *nrules, char *err, size_t errlen)
{
	struct enforce_rules rs = {0};
	struct nftrules_static st;
	bool default_allow = policy_default_action(p) == POLICY_ALLOW;
	int rc;

	/* In dns mode IP rules are not enforced (OpenSandbox semantics, warned at start). */
	if (e->dns_only)
		default_allow = true;
	else if (policy_foreach_addr(p, enforce_rule_cb, &rs) != 0) {
		snprintf(err, errlen, "IP rules exceed the nft limit of %d", NFTRULES_MAX_RULES);
		free(rs.v);
		return -1;
	}
	st.rules = rs.v;
	st.nrules = rs.n;
	st.default_action = default_allow ? NFTRULES_ALLOW : NFTRULES_DENY;
	st.own = &e->own;
	rc = nftrules_update_static(e->nft, &st);
	if (rc != 0) {
		snprintf(err, errlen, "%s", nftrules_error(e->nft));
		free(rs.v);
		return rc;
	}
	free(e->last);
	e->last = rs.v;
	e->nlast = rs.n;
	e->last_default = st.default_action;
	enforce_mark(e);
	*nrules = rs.n;
	return 0;
}

int
enforce_learn(struct enforce *e, const struct chan_learn *l, size_t n, char *err, size_t errlen)
{
	struct nftrules_elem el[CHAN_MAX_BATCH];

	if (n > CHAN_MAX_BATCH) {
		snprintf(err, errlen, "learn batch of %zu exceeds %d", n, CHAN_MAX_BATCH);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		memset(&el[i], 0, sizeof(el[i]));
		el[i].family = l[i].family;
		memcpy(el[i].addr, l[i].addr, 16);
		el[i].port = l[i].port;
		el[i].timeout_ms = (uint64_t)l[i].timeout_s * 1000;
	}
	if (nftrules_learn_many(e->nft, el, n) != 0) {
		snprintf(err, errlen, "%s", nftrules_error(e->nft));
		return -1;
	}
	enforce_mark(e);
	return 0;
}

int
enforce_forget(struct enforce *e, const struct chan_learn *l, size_t n, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		if (nftrules_forget(e->nft, l[i].family, l[i].addr, l[i].port) != 0) {
			snprintf(err, errlen, "%s", nftrules_error(e->nft));
			return -1;
		}
	}
	enforce_mark(e);
	return 0;
}

/* Whether every destination of a (na of them) is one of b's. */
static bool
enforce_dests_within(
    const struct nftrules_dest *a, size_t na, const struct nftrules_dest *b, size_t nb)
{
	for (size_t i = 0; i < na; i++) {
		bool found = false;

		for (size_t k = 0; k < nb && !found; k++)
			found = a[i].family == b[k].family && a[i].port == b[k].port &&
			        memcmp(a[i].addr, b[k].addr, sizeof(a[i].addr)) == 0;
		if (!found)
			return false;
	}
	return true;
}

/* Whether a and b hold the same destinations, in any order (duplicates or not). */
static bool
enforce_dests_equal(
    const struct nftrules_dest *a, size_t na, const struct nftrules_dest *b, size_t nb)
{
	return enforce_dests_within(a, na, b, nb) && enforce_dests_within(b, nb, a, na);
}

/*
 * l[0..n) as the proxy's destinations (its port), into d (NFTRULES_MAX_PROXY
 * room; n at most that): whether they differ from those in force.
 */
static bool
enforce_proxy_differs(
    const struct enforce *e, const struct chan_learn *l, size_t n, struct nftrules_dest *d)
{
	struct nftrules_dest cur[NFTRULES_MAX_PROXY];
	size_t ncur = 0;

	memset(d, 0, NFTRULES_MAX_PROXY * sizeof(*d));
	for (size_t i = 0; i < n; i++) {
		d[i].family = l[i].family;
		memcpy(d[i].addr, l[i].addr, sizeof(d[i].addr));
		d[i].port = e->proxy_port;
	}
	nftrules_proxy(e->nft, cur, &ncur);
	return !enforce_dests_equal(d, n, cur, ncur);
}

bool
enforce_proxy_same(const struct enforce *e, const struct chan_learn *l, size_t n)
{
	struct nftrules_dest d[NFTRULES_MAX_PROXY];

	return n <= NFTRULES_MAX_PROXY && !enforce_proxy_differs(e, l, n, d);
}

int
enforce_set_proxy(struct enforce *e, const struct chan_learn *l, size_t n, bool *changed, char *err,
    size_t errlen)
{
	struct nftrules_dest d[NFTRULES_MAX_PROXY];
	struct nftrules_static st = {
	    .rules = e->last,
	    .nrules = e->nlast,
	    .default_action = e->last_default,
	    .own = &e->own,
	};

	*changed = false;
	if (e->proxy_port == 0 || n > NFTRULES_MAX_PROXY) {
		snprintf(err, errlen, "%s",
		    e->proxy_port == 0 ? "no chained proxy configured"
		                       : "too many proxy addresses");
		return -1;
	}
	if (!enforce_proxy_differs(e, l, n, d))
		return 0;
	if (!e->installed) {
		snprintf(err, errlen, "the table is not installed yet");
		return -1;
	}
	if (nftrules_set_proxy(e->nft, d, n, &st) != 0) {
		snprintf(err, errlen, "%s", nftrules_error(e->nft));
		return -1;
	}
	*changed = true;
	enforce_mark(e);
	return 0;
}

int
enforce_remove(struct enforce *e, char *err, size_t errlen)
{
	if (nftrules_remove_table(e->nft) != 0) {
		snprintf(err, errlen, "%s", nftrules_error(e->nft));
		return -1;
	}
	return 0;
}

bool
enforce_tampered(struct enforce *e)
{
	uint32_t g;

	if (nftrules_genid(e->nft, &g) != 0)
		return false;
	return g != e->genid;
}

int
enforce_repair(struct enforce *e, char *err, size_t errlen)
{
	struct nftrules_static st = {
	    .rules = e->last,
	    .nrules = e->nlast,
	    .default_action = e->last_default,
	    .own = &e->own,
	};

	/* The learned sets are lost: clients resolve again; until then, no egress. */
	if (nftrules_install(e->nft, &st) != 0) {
		snprintf(err, errlen, "%s", nftrules_error(e->nft));
		return -1;
	}
	enforce_mark(e);
	return 0;
}

void
enforce_close(struct enforce *e)
{
	if (e == NULL)
		return;
	nftrules_close(e->nft);
	free(e->last);
	free(e);
}
