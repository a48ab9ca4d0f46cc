/*
 * nftsets: the sets of the egressd table (parent process): static
 * allow/deny sets built from IP/CIDR rules (ranges normalised, port-scoped
 * sets made disjoint) and the learned sets with their timeouts. Pure
 * builders into a batch; nftrules.c sends it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include "egressd/priv/nftrules.h"
#include "egressd/priv/nftrules_internal.h"
#include "policy/addrclass.h"

/* Table message: NEWTABLE or DELTABLE. */
void
nftrules_msg_table(struct nftrules_batch *b, const struct nftrules_config *cfg, uint16_t cmd)
{
	struct nftnl_table *t = nftnl_table_alloc();
	struct nlmsghdr *nlh;
	char *p = nftrules_batch_reserve(b);

	if (t == NULL || p == NULL) {
		nftrules_batch_fail(b, "out of memory");
		nftnl_table_free(t);
		return;
	}
	nftnl_table_set_str(t, NFTNL_TABLE_NAME, cfg->table);
	nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
	nlh = nftnl_table_nlmsg_build_hdr(p, cmd, NFPROTO_INET,
	    (cmd == NFT_MSG_NEWTABLE ? NLM_F_CREATE : 0) | NLM_F_ACK, b->seq++);
	nftnl_table_nlmsg_build_payload(nlh, t);
	nftnl_table_free(t);
	nftrules_batch_commit(
	    b, nlh, cmd == NFT_MSG_NEWTABLE ? "add table" : "delete table", cfg->table);
}

uint32_t
nftrules_set_id(struct nftrules_batch *b, enum nftrules_set_kind kind, int family)
{
	return b->set_id + (uint32_t)kind * 2 + (family == AF_INET ? 0 : 1);
}

/* NEWSET for one kind and family. */
void
nftrules_msg_set(struct nftrules_batch *b, const struct nftrules_config *cfg,
    enum nftrules_set_kind kind, int family)
{
	struct nftnl_set *s = nftnl_set_alloc();
	struct nlmsghdr *nlh;
	char *p = nftrules_batch_reserve(b);
	uint32_t atype = family == AF_INET ? NFTRULES_TYPE_IPV4 : NFTRULES_TYPE_IPV6;
	uint32_t alen = (uint32_t)nftrules_fam_alen(family), flags;

	if (s == NULL || p == NULL) {
		nftrules_batch_fail(b, "out of memory");
		if (s != NULL)
			nftnl_set_free(s);
		return;
	}
	nftnl_set_set_str(s, NFTNL_SET_TABLE, cfg->table);
	nftnl_set_set_str(s, NFTNL_SET_NAME, nftrules_set_name(kind, family));
	nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
	nftnl_set_set_u32(s, NFTNL_SET_ID, nftrules_set_id(b, kind, family));
	flags = nftrules_kind_is_interval(kind) ? NFT_SET_INTERVAL : NFT_SET_TIMEOUT;
	if (nftrules_kind_has_port(kind)) {
		uint8_t fields[2] = {(uint8_t)alen, 2};

		flags |= NFT_SET_CONCAT;
		nftnl_set_set_u32(
		    s, NFTNL_SET_KEY_TYPE, atype << NFTRULES_TYPE_BITS | NFTRULES_TYPE_SERVICE);
		nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, alen + 4);
		nftnl_set_set_data(s, NFTNL_SET_DESC_CONCAT, fields, sizeof(fields));
	} else {
		nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, atype);
		nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, alen);
	}
	nftnl_set_set_u32(s, NFTNL_SET_FLAGS, flags);
	nlh = nftnl_set_nlmsg_build_hdr(
	    p, NFT_MSG_NEWSET, NFPROTO_INET, NLM_F_CREATE | NLM_F_ACK, b->seq++);
	nftnl_set_nlmsg_build_payload(nlh, s);
	nftnl_set_free(s);
	nftrules_batch_commit(b, nlh, "add set", nftrules_set_name(kind, family));
}

/* DELSET: the set goes at commit, with its elements. */
void
nftrules_msg_del_set(struct nftrules_batch *b, const struct nftrules_config *cfg,
    enum nftrules_set_kind kind, int family)
{
	struct nlmsghdr *nlh;
	char *p = nftrules_batch_reserve(b);

	if (p == NULL)
		return;
	nlh = nftnl_nlmsg_build_hdr(p, NFT_MSG_DELSET, NFPROTO_INET, NLM_F_ACK, b->seq++);
	mnl_attr_put_strz(nlh, NFTA_SET_TABLE, cfg->table);
	mnl_attr_put_strz(nlh, NFTA_SET_NAME, nftrules_set_name(kind, family));
	nftrules_batch_commit(b, nlh, "delete set", nftrules_set_name(kind, family));
}

/* Key bytes: the address, then (port sets) the port padded to 4 bytes. */
static void
make_key(uint8_t *key, const uint8_t *addr, size_t alen, bool with_port, uint16_t port)
{
	memset(key, 0, 20);
	memcpy(key, addr, alen);
	if (with_port) {
		key[alen] = (uint8_t)(port >> 8);
		key[alen + 1] = (uint8_t)port;
	}
}

/* addr + 1 in place; false on overflow (the range reaches the top). */
static bool
addr_inc(uint8_t *a, size_t alen)
{
	for (size_t i = alen; i-- > 0;)
		if (++a[i] != 0)
			return true;
	return false;
}

/* Add elements for ranges[0..n) of a static set, in chunked messages. */
static void
msg_elems(struct nftrules_batch *b, const struct nftrules_config *cfg, enum nftrules_set_kind kind,
    int family, const struct nftrules_range *r, size_t n)
{
	size_t alen = nftrules_fam_alen(family),
	       klen = nftrules_kind_has_port(kind) ? alen + 4 : alen;
	size_t i = 0;

	while (i < n && !b->failed) {
		struct nftnl_set *s = nftnl_set_alloc();
		struct nlmsghdr *nlh;
		char *p = nftrules_batch_reserve(b);

		if (s == NULL || p == NULL) {
			nftrules_batch_fail(b, "out of memory");
			if (s != NULL)
				nftnl_set_free(s);
			return;
		}
		nftnl_set_set_str(s, NFTNL_SET_TABLE, cfg->table);
		nftnl_set_set_str(s, NFTNL_SET_NAME, nftrules_set_name(kind, family));
		nftnl_set_set_u32(s, NFTNL_SET_ID, nftrules_set_id(b, kind, family));
		for (size_t k = 0; k < NFTRULES_ELEMS_PER_MSG && i < n; k++, i++) {
			struct nftnl_set_elem *e = nftnl_set_elem_alloc();
			uint8_t key[20], end[20];

			if (e == NULL) {
				nftrules_batch_fail(b, "out of memory");
				break;
			}
			make_key(key, r[i].lo, alen, nftrules_kind_has_port(kind), r[i].plo);
			nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, (uint32_t)klen);
			if (nftrules_kind_has_port(kind)) {
				/* pipapo: one element carries both ends. */
				make_key(end, r[i].hi, alen, true, r[i].phi);
				nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY_END, end, (uint32_t)klen);
				nftnl_set_elem_add(s, e);
				continue;
			}
			nftnl_set_elem_add(s, e);
			/* rbtree: an end element at hi + 1, none if hi is the top. */
			memcpy(end, r[i].hi, alen);
			if (addr_inc(end, alen)) {
				e = nftnl_set_elem_alloc();
				if (e == NULL) {
					nftrules_batch_fail(b, "out of memory");
					break;
				}
				nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, end, (uint32_t)alen);
				nftnl_set_elem_set_u32(
				    e, NFTNL_SET_ELEM_FLAGS, NFT_SET_ELEM_INTERVAL_END);
				nftnl_set_elem_add(s, e);
			}
		}
		nlh = nftnl_set_elem_nlmsg_build_hdr(
		    p, NFT_MSG_NEWSETELEM, NFPROTO_INET, NLM_F_CREATE | NLM_F_ACK, b->seq++);
		nftnl_set_elems_nlmsg_build_payload(nlh, s);
		nftnl_set_free(s);
		nftrules_batch_commit(b, nlh, "add elements", nftrules_set_name(kind, family));
	}
}

static int
range_cmp(const void *a, const void *b)
{
	const struct nftrules_range *x = a, *y = b;
	int c = memcmp(x->lo, y->lo, 16);

	if (c != 0)
		return c;
	if ((c = memcmp(x->hi, y->hi, 16)) != 0)
		return c;
	if (x->plo != y->plo)
		return x->plo < y->plo ? -1 : 1;
	return x->phi < y->phi ? -1 : x->phi > y->phi;
}

/* Sort; merge overlapping or adjacent address ranges. */
static size_t
ranges_normalise(struct nftrules_range *r, size_t n, size_t alen)
{
	size_t out = 0;

	if (n == 0)
		return 0;
	qsort(r, n, sizeof(*r), range_cmp);
	for (size_t i = 1; i < n; i++) {
		struct nftrules_range *last = &r[out];
		uint8_t next[16];
		bool adj;

		memcpy(next, last->hi, alen);
		adj = !addr_inc(next, alen) || memcmp(r[i].lo, next, alen) <= 0;
		if (!adj) {
			r[++out] = r[i];
			continue;
		}
		if (memcmp(r[i].hi, last->hi, alen) > 0)
			memcpy(last->hi, r[i].hi, alen);
	}
	return out + 1;
}

static int
u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Port-scoped ranges made disjoint: the kernel refuses overlapping
 * elements in a concatenated interval set. Ports are cut at every rule
 * boundary; within each piece the covering address ranges are merged;
 * neighbouring pieces with the same addresses are joined again.
 *
 * Sort and sweep: the rules are sorted once by first port and once by end
 * port, and one pass over the boundaries keeps the set of rules covering
 * the current piece (added at their first port, removed after their last),
 * so a piece costs the rules that cover it, never all n. O(n log n) plus
 * the merging of each piece's covering ranges; the old scan of every rule
 * for every piece was O(n^2) and could stall the parent.
 * The output and the merging work are capped (NFTRULES_DISJOINT_MAX_*):
 * nested port ranges can make both quadratic, and the input comes from
 * the worker.
 * Returns an owned array (NULL with *nout 0 when empty); on failure NULL
 * with *why set to a static reason.
 */
struct nftrules_range *
nftrules_ranges_disjoint_ports(
    const struct nftrules_range *r, size_t n, size_t alen, size_t *nout, const char **why)
{
	uint64_t work = 0;

	*why = NULL;
	uint64_t *starts = calloc(n + 1, sizeof(*starts)), *ends = calloc(n + 1, sizeof(*ends));
	size_t *act = calloc(n + 1, sizeof(*act)), *pos = calloc(n + 1, sizeof(*pos));
	struct nftrules_range *tmp = calloc(n + 1, sizeof(*tmp)), *out = NULL;
	size_t no = 0, cap = 0, prev_start = 0, prev_n = 0, nact = 0, is = 0, ie = 0;
	uint32_t prev_end = 0;
	bool have_prev = false;

	*nout = 0;
	if (starts == NULL || ends == NULL || act == NULL || pos == NULL || tmp == NULL)
		goto nomem;
	/* (port << 32 | index): sorted by port, n < 2^32 (NFTRULES_MAX_RULES). */
	for (size_t i = 0; i < n; i++) {
		starts[i] = (uint64_t)r[i].plo << 32 | i;
		ends[i] = ((uint64_t)r[i].phi + 1) << 32 | i;
	}
	qsort(starts, n, sizeof(*starts), u64_cmp);
	qsort(ends, n, sizeof(*ends), u64_cmp);
	while (is < n || ie < n) {
		uint32_t a = is < n && (ie >= n || starts[is] >> 32 <= ends[ie] >> 32)
		                 ? (uint32_t)(starts[is] >> 32)
		                 : (uint32_t)(ends[ie] >> 32);
		uint32_t e;
		size_t m = 0;
		bool same;

		/* Rules whose last port was a - 1 leave; rules that start at a join. */
		for (; ie < n && ends[ie] >> 32 == a; ie++) {
			size_t i = (size_t)(ends[ie] & 0xffffffffu), at = pos[i];

			act[at] = act[--nact];
			pos[act[at]] = at;
		}
		for (; is < n && starts[is] >> 32 == a; is++) {
			size_t i = (size_t)(starts[is] & 0xffffffffu);

			pos[i] = nact;
			act[nact++] = i;
		}
		if (is >= n && ie >= n)
			break;
		e = (is < n && starts[is] >> 32 < ends[ie] >> 32 ? (uint32_t)(starts[is] >> 32)
		                                                 : (uint32_t)(ends[ie] >> 32)) -
		    1;
		work += nact;
		if (work > NFTRULES_DISJOINT_MAX_WORK)
			goto toobig;
		for (size_t k = 0; k < nact; k++) {
			tmp[m] = r[act[k]];
			tmp[m].plo = tmp[m].phi = 0;
			m++;
		}
		m = ranges_normalise(tmp, m, alen);
		if (m == 0) {
			have_prev = false;
			continue;
		}
		same = have_prev && prev_end + 1 == a && prev_n == m;
		for (size_t j = 0; same && j < m; j++)
			same = memcmp(out[prev_start + j].lo, tmp[j].lo, 16) == 0 &&
			       memcmp(out[prev_start + j].hi, tmp[j].hi, 16) == 0;
		if (same) {
			for (size_t j = 0; j < m; j++)
				out[prev_start + j].phi = (uint16_t)e;
			prev_end = e;
			continue;
		}
		if (no + m > NFTRULES_DISJOINT_MAX_ELEMS)
			goto toobig;
		if (cap - no < m) {
			size_t ncap = (cap + m) * 2;
			struct nftrules_range *nr = realloc(out, ncap * sizeof(*nr));

			if (nr == NULL)
				goto nomem;
			out = nr;
			cap = ncap;
		}
		for (size_t j = 0; j < m; j++) {
			out[no + j] = tmp[j];
			out[no + j].plo = (uint16_t)a;
			out[no + j].phi = (uint16_t)e;
		}
		prev_start = no;
		prev_n = m;
		prev_end = e;
		have_prev = true;
		no += m;
	}
	free(starts);
	free(ends);
	free(act);
	free(pos);
	free(tmp);
	*nout = no;
	return out;
toobig:
	*why = "port-scoped rules overlap too much (too many disjoint elements)";
	goto fail;
nomem:
	*why = "out of memory";
fail:
	free(starts);
	free(ends);
	free(act);
	free(pos);
	free(tmp);
	free(out);
	return NULL;
}

static void
range_from_prefix(struct nftrules_range *r, const uint8_t *addr, uint8_t prefix, size_t alen)
{
	memset(r, 0, sizeof(*r));
	for (size_t by = 0; by < alen; by++) {
		int bits = (int)prefix - (int)by * 8;
		uint8_t mask = bits >= 8 ? 0xff : bits <= 0 ? 0 : (uint8_t)(0xff << (8 - bits));

		r->lo[by] = addr[by] & mask;
		r->hi[by] = (uint8_t)(r->lo[by] | (uint8_t)~mask);
	}
}

/* Validate the rules and emit the elements of the static sets. */
void
nftrules_static_elems(
    struct nftrules_batch *b, const struct nftrules_config *cfg, const struct nftrules_static *st)
{
	static const int fams[] = {AF_INET, AF_INET6};
	static const enum nftrules_set_kind kinds[] = {
	    NFTRULES_SET_ALLOW, NFTRULES_SET_DENY, NFTRULES_SET_ALLOWP, NFTRULES_SET_DENYP};
	struct policy_addr inner[ADDRCLASS_MAX_DENY];
	size_t ninner;
	struct nftrules_range *r;

	if (st->nrules > NFTRULES_MAX_RULES) {
		nftrules_batch_fail(b, "too many static rules");
		return;
	}
	for (size_t i = 0; i < st->nrules; i++) {
		const struct nftrules_rule *x = &st->rules[i];

		if ((x->family != AF_INET && x->family != AF_INET6) ||
		    x->prefix_len > nftrules_fam_alen(x->family) * 8 || x->port_lo > x->port_hi ||
		    (x->action != NFTRULES_ALLOW && x->action != NFTRULES_DENY)) {
			nftrules_batch_fail(b, "invalid static rule");
			return;
		}
	}
	/*
	 * Destinations no rule can open (policy/addrclass.c): link-local
	 * and metadata, loopback, multicast, reserved, the sandbox's own
	 * networks (its subnets, addresses and gateways: the pod subnet and
	 * the node), and their IPv6 spellings. Always in the deny sets,
	 * whatever the policy says (0.0.0.0/0 included). The sidecar's DNS
	 * to its resolvers is accepted before, so a link-local or on-link
	 * resolver still works for egressd.
	 */
	ninner = addrclass_deny_prefixes(st->own, inner, ADDRCLASS_MAX_DENY);
	if (ninner > ADDRCLASS_MAX_DENY) {
		nftrules_batch_fail(b, "too many inner prefixes");
		return;
	}
	r = calloc(st->nrules + ninner, sizeof(*r));
	if (r == NULL) {
		nftrules_batch_fail(b, "out of memory");
		return;
	}
	for (size_t f = 0; f < 2; f++) {
		size_t alen = nftrules_fam_alen(fams[f]);

		for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
			bool ports = nftrules_kind_has_port(kinds[k]);
			enum nftrules_action act =
			    (kinds[k] == NFTRULES_SET_DENY || kinds[k] == NFTRULES_SET_DENYP)
			        ? NFTRULES_DENY
			        : NFTRULES_ALLOW;
			size_t n = 0;

			for (size_t i = 0; i < st->nrules; i++) {
				const struct nftrules_rule *x = &st->rules[i];
				bool has_port = x->port_hi != 0;

				if (x->family != fams[f] || x->action != act || has_port != ports)
					continue;
				range_from_prefix(&r[n], x->addr, x->prefix_len, alen);
				r[n].plo = x->port_lo;
				r[n].phi = x->port_hi;
				n++;
			}
			if (kinds[k] == NFTRULES_SET_DENY)
				for (size_t i = 0; i < ninner; i++)
					if (inner[i].family == fams[f])
						range_from_prefix(
						    &r[n++], inner[i].bytes, inner[i].prefix, alen);
			if (ports) {
				const char *why = NULL;
				struct nftrules_range *d =
				    nftrules_ranges_disjoint_ports(r, n, alen, &n, &why);

				if (why != NULL)
					nftrules_batch_fail(b, why);
				msg_elems(b, cfg, kinds[k], fams[f], d, n);
				free(d);
				continue;
			}
			n = ranges_normalise(r, n, alen);
			msg_elems(b, cfg, kinds[k], fams[f], r, n);
		}
	}
	free(r);
}

/* The DoH blocklist sets: the configured prefixes, merged, per family. */
void
nftrules_doh_elems(struct nftrules_batch *b, const struct nftrules_config *cfg)
{
	static const int fams[] = {AF_INET, AF_INET6};
	struct nftrules_range r[NFTRULES_MAX_DOH];

	if (!cfg->block_doh)
		return;
	for (size_t f = 0; f < 2; f++) {
		size_t alen = nftrules_fam_alen(fams[f]), n = 0;

		for (size_t i = 0; i < cfg->ndoh && i < NFTRULES_MAX_DOH; i++)
			if (cfg->doh[i].family == fams[f])
				range_from_prefix(
				    &r[n++], cfg->doh[i].addr, cfg->doh[i].prefix_len, alen);
		n = ranges_normalise(r, n, alen);
		msg_elems(b, cfg, NFTRULES_SET_DOH, fams[f], r, n);
	}
}

bool
nftrules_config_ok(struct nftrules_batch *b, const struct nftrules_config *cfg)
{
	size_t n = strnlen(cfg->table, sizeof(cfg->table));

	if (n == 0 || n == sizeof(cfg->table) || cfg->dns_port == 0 ||
	    cfg->nintercept > NFTRULES_MAX_INTERCEPT || cfg->ndoh > NFTRULES_MAX_DOH) {
		nftrules_batch_fail(b, "invalid nftrules configuration");
		return false;
	}
	for (size_t i = 0; i < cfg->ndoh; i++)
		if ((cfg->doh[i].family != AF_INET && cfg->doh[i].family != AF_INET6) ||
		    cfg->doh[i].prefix_len > nftrules_fam_alen(cfg->doh[i].family) * 8) {
			nftrules_batch_fail(b, "invalid DoH blocklist entry");
			return false;
		}
	return true;
}

/* One learned element: add (with timeout) or delete. */
/* One learned element message (add with timeout, or delete) into an open batch. */
int
nftrules_msg_learn(struct nftrules_batch *b, const struct nftrules_config *cfg, int family,
    const uint8_t *addr, uint16_t port, uint64_t timeout_ms, bool del)
{
	enum nftrules_set_kind kind = port ? NFTRULES_SET_LEARNEDP : NFTRULES_SET_LEARNED;
	struct nftnl_set *s;
	struct nftnl_set_elem *e;
	struct nlmsghdr *nlh;
	uint8_t key[20];
	size_t alen;
	char *p;

	if (family != AF_INET && family != AF_INET6) {
		nftrules_batch_fail(b, "invalid address family");
		return -1;
	}
	if (!del && timeout_ms == 0) {
		nftrules_batch_fail(b, "learned elements need a timeout");
		return -1;
	}
	alen = nftrules_fam_alen(family);
	p = nftrules_batch_reserve(b);
	s = nftnl_set_alloc();
	e = nftnl_set_elem_alloc();
	if (p == NULL || s == NULL || e == NULL) {
		nftrules_batch_fail(b, "out of memory");
		if (s != NULL)
			nftnl_set_free(s);
		if (e != NULL)
			nftnl_set_elem_free(e);
		return -1;
	}
	nftnl_set_set_str(s, NFTNL_SET_TABLE, cfg->table);
	nftnl_set_set_str(s, NFTNL_SET_NAME, nftrules_set_name(kind, family));
	make_key(key, addr, alen, port != 0, port);
	nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, (uint32_t)(port ? alen + 4 : alen));
	if (!del) {
		nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, timeout_ms);
		/*
		 * And the expiry, explicitly: re-adding an element that exists
		 * then moves its expiry to now + timeout (the kernel keeps the old
		 * one otherwise), so a name answered again stays learned as long
		 * as its new TTL says, not its first.
		 */
		nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_EXPIRATION, timeout_ms);
	}
	nftnl_set_elem_add(s, e);
	nlh = nftnl_set_elem_nlmsg_build_hdr(p, del ? NFT_MSG_DELSETELEM : NFT_MSG_NEWSETELEM,
	    NFPROTO_INET, (del ? 0 : NLM_F_CREATE) | NLM_F_ACK, b->seq++);
	nftnl_set_elems_nlmsg_build_payload(nlh, s);
	nftnl_set_free(s);
	nftrules_batch_commit(b, nlh, del ? "delete element from" : "add element to",
	    nftrules_set_name(kind, family));
	return 0;
}

/* One learned element: add (with timeout) or delete. */
int
nftrules_build_learn(struct nftrules_batch *b, const struct nftrules_config *cfg, int family,
    const uint8_t *addr, uint16_t port, uint64_t timeout_ms, bool del)
{
	if (!nftrules_config_ok(b, cfg))
		return -1;
	nftrules_batch_begin(b);
	if (nftrules_msg_learn(b, cfg, family, addr, port, timeout_ms, del) != 0)
		return -1;
	return nftrules_batch_end(b);
}
