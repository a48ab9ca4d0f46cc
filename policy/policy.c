/*
 * policy: the immutable, refcounted egress policy model (any process that
 * decides: the parent, the children, the CLI): building it from rule lists
 * with its indexes (per-label name hashes, a hash per address prefix
 * length), and read-only views (JSON for GET /policy, iterators). Loading
 * is in policy_load.c, PATCH/DELETE/always derivations in policy_edit.c,
 * decisions in policy_match.c. Pure: no sockets, no globals, no logging.
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

/* ---- indexes ---- */

static size_t
pow2_at_least(size_t n)
{
	size_t c = 16;
	while (c < n)
		c <<= 1;
	return c;
}

/*
 * Hash of a dotted string built label by label from the right, so that a
 * lookup gets the hash of every suffix of a name in one pass.
 */
static uint64_t
rev_hash(const char *s, size_t len)
{
	uint64_t h = POLICY_FNV_OFFSET;
	size_t end = len;

	for (;;) {
		const char *dot = memrchr(s, '.', end);
		size_t start = dot ? (size_t)(dot - s) + 1 : 0;
		h = policy_suffix_step(h, policy_label_hash(s + start, end - start));
		if (start == 0)
			return h;
		end = start - 1;
	}
}

static unsigned
label_count(const char *s, size_t len)
{
	unsigned n = 1;
	for (size_t i = 0; i < len; i++)
		n += s[i] == '.';
	return n;
}

uint64_t
policy_label_bit(unsigned labels)
{
	return 1ULL << (labels >= 64 ? 63 : labels - 1);
}

int
policy_ntab_init(struct policy_ntab *t, size_t n)
{
	size_t cap = pow2_at_least(n * 2 + 1);
	t->e = calloc(cap, sizeof(*t->e));
	t->mask = cap - 1;
	t->labels = 0;
	t->bloom = NULL;
	t->bmask = 0;
	return t->e ? 0 : -1;
}

/* Give an index table its filter; sized for n keys. */
static int
ntab_bloom_init(struct policy_ntab *t, size_t n)
{
	size_t bits = pow2_at_least(n * POLICY_BLOOM_BITS_PER_KEY);

	if (bits < 512)
		bits = 512;
	t->bloom = calloc(bits / 64, sizeof(uint64_t));
	t->bmask = bits - 1;
	return t->bloom ? 0 : -1;
}

static inline const char *
nent_key(const struct policy_nent *e)
{
	return e->len <= POLICY_NKEY_INLINE ? e->k.inl : e->k.ptr;
}

/* Fill an empty slot with key (borrowed when too long to inline). */
static void
nent_set(struct policy_nent *e, const char *key, size_t len, uint64_t h)
{
	e->h = h;
	e->len = (uint32_t)len;
	if (len <= POLICY_NKEY_INLINE)
		memcpy(e->k.inl, key, len);
	else
		e->k.ptr = key;
	e->idx[0] = e->idx[1] = e->idx[2] = -1;
}

struct policy_nent *
policy_ntab_find(const struct policy_ntab *t, uint64_t h, const char *key, size_t len)
{
	for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
		struct policy_nent *e = &t->e[i];
		if (e->len == 0)
			return e;
		if (e->h == h && e->len == len && memcmp(nent_key(e), key, len) == 0)
			return e;
	}
}

static void
ntab_add(struct policy_ntab *t, const char *key, enum policy_origin o, size_t idx)
{
	size_t len = strlen(key);
	uint64_t h = rev_hash(key, len);
	struct policy_nent *e = policy_ntab_find(t, h, key, len);

	if (e->len == 0) {
		nent_set(e, key, len, h);
		t->labels |= policy_label_bit(label_count(key, len));
		if (t->bloom != NULL) {
			size_t b = (size_t)(h >> 32) & t->bmask;
			t->bloom[b / 64] |= 1ULL << (b % 64);
		}
	}
	if (e->idx[o] < 0)
		e->idx[o] = (int32_t)idx;
}

/* Find key in a string set; an empty slot (key NULL) when absent. */
struct policy_nent *
policy_strset_slot(struct policy_ntab *t, const char *key, uint64_t *h)
{
	size_t len = strlen(key);

	*h = rev_hash(key, len);
	return policy_ntab_find(t, *h, key, len);
}

/* Insert key (borrowed) into the empty slot e, remembering idx. */
void
policy_strset_put(struct policy_nent *e, const char *key, uint64_t h, size_t idx)
{
	nent_set(e, key, strlen(key), h);
	e->idx[0] = (int32_t)idx;
}

uint64_t
policy_addr_hash(const struct policy_addr *a)
{
	uint64_t w[2], h;

	memcpy(w, a->bytes, 16);
	h = w[0] * 0x9e3779b97f4a7c15ULL ^
	    (w[1] + ((uint64_t)a->prefix << 8 | (uint64_t)a->family));
	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 29;
	return h;
}

struct policy_aent *
policy_atab_find(const struct policy_atab *t, const struct policy_addr *a, uint64_t h)
{
	for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
		struct policy_aent *e = &t->e[i];
		if (!e->used)
			return e;
		if (e->h == h && e->a.family == a->family && e->a.prefix == a->prefix &&
		    memcmp(e->a.bytes, a->bytes, 16) == 0)
			return e;
	}
}

static void
atab_add(struct policy_atab *t, const struct policy_addr *a, enum policy_origin o, size_t idx)
{
	uint64_t h = policy_addr_hash(a);
	struct policy_aent *e = policy_atab_find(t, a, h);

	if (!e->used) {
		e->used = true;
		e->h = h;
		e->a = *a;
		e->idx[0] = e->idx[1] = e->idx[2] = -1;
		uint8_t *pl = a->family == AF_INET ? t->plen4 : t->plen6;
		uint8_t *np = a->family == AF_INET ? &t->n4 : &t->n6;
		size_t k;
		for (k = 0; k < *np && pl[k] != a->prefix; k++)
			;
		if (k == *np) {
			/* Keep longest first: the most specific prefix is found first. */
			size_t at = 0;
			while (at < *np && pl[at] > a->prefix)
				at++;
			memmove(pl + at + 1, pl + at, *np - at);
			pl[at] = a->prefix;
			(*np)++;
		}
	}
	if (e->idx[o] < 0)
		e->idx[o] = (int32_t)idx;
}

/* Drop later duplicates of a canonical target (first occurrence wins). */
int
policy_rules_dedup(struct policy_rules *l)
{
	struct policy_ntab seen;
	size_t o = 0;

	if (policy_ntab_init(&seen, l->n) != 0)
		return -1;
	for (size_t i = 0; i < l->n; i++) {
		size_t len = strlen(l->v[i].target);
		uint64_t h = rev_hash(l->v[i].target, len);
		struct policy_nent *e = policy_ntab_find(&seen, h, l->v[i].target, len);
		if (e->len != 0) {
			policy_rule_deinit(&l->v[i]);
			continue;
		}
		l->v[o] = l->v[i];
		nent_set(e, l->v[o].target, len, h);
		o++;
	}
	l->n = o;
	free(seen.e);
	return 0;
}

/* Deduplicate every list and build the indexes; takes the lists. */
struct policy *
policy_build(enum policy_action def, struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS],
    const struct policy_dns *dns, struct binding_set *bs)
{
	struct policy *p = calloc(1, sizeof(*p));
	size_t nexact = 0, nwild = 0, naddrs = 0;

	if (p == NULL)
		goto fail;
	p->refs = 1;
	p->def = def;
	if (dns != NULL) {
		p->dns = *dns;
	} else {
		p->dns.ttl_min = POLICY_DNS_TTL_MIN_DEFAULT;
		p->dns.ttl_max = POLICY_DNS_TTL_MAX_DEFAULT;
		p->dns.filter_private = true;
	}
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++) {
		p->lists[o] = lists[o];
		memset(&lists[o], 0, sizeof(lists[o]));
		if (policy_rules_dedup(&p->lists[o]) != 0)
			goto fail_p;
		for (size_t i = 0; i < p->lists[o].n; i++) {
			enum policy_target_kind k = p->lists[o].v[i].kind;
			naddrs += k >= POLICY_TARGET_ADDR;
			nexact += k == POLICY_TARGET_NAME;
			nwild += k == POLICY_TARGET_WILDCARD;
		}
	}
	if (policy_ntab_init(&p->exact, nexact) != 0 || policy_ntab_init(&p->wild, nwild) != 0 ||
	    ntab_bloom_init(&p->exact, nexact) != 0 || ntab_bloom_init(&p->wild, nwild) != 0)
		goto fail_p;
	size_t acap = pow2_at_least(naddrs * 2 + 1);
	if ((p->addrs.e = calloc(acap, sizeof(*p->addrs.e))) == NULL)
		goto fail_p;
	p->addrs.mask = acap - 1;
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++) {
		for (size_t i = 0; i < p->lists[o].n; i++) {
			const struct policy_rule *r = &p->lists[o].v[i];
			if (r->kind == POLICY_TARGET_NAME)
				ntab_add(&p->exact, r->target, (enum policy_origin)o, i);
			else if (r->kind == POLICY_TARGET_WILDCARD)
				ntab_add(&p->wild, r->target + 2, (enum policy_origin)o, i);
			else
				atab_add(&p->addrs, &r->addr, (enum policy_origin)o, i);
		}
	}
	p->bindings = bs;
	return p;
fail_p:
	policy_free(p);
	binding_set_free(bs);
	return NULL;
fail:
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++)
		policy_rules_free(&lists[o]);
	binding_set_free(bs);
	return NULL;
}

/* A deny-all policy; see policy.h. */
struct policy *
policy_new_deny_all(void)
{
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];

	memset(lists, 0, sizeof(lists));
	return policy_build(POLICY_DENY, lists, NULL, NULL);
}

/* Take a reference; see policy.h. */
struct policy *
policy_ref(struct policy *p)
{
	if (p != NULL)
		__atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
	return p;
}

/* Drop a reference; see policy.h. */
void
policy_free(struct policy *p)
{
	if (p == NULL || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++)
		policy_rules_free(&p->lists[o]);
	policy_rules_free(&p->log_skip);
	free(p->exact.e);
	free(p->wild.e);
	free(p->exact.bloom);
	free(p->wild.bloom);
	free(p->addrs.e);
	binding_set_free(p->bindings);
	free(p);
}

/* ---- views ---- */

static void
rule_info(const struct policy *p, enum policy_origin o, size_t i, struct policy_rule_info *out)
{
	const struct policy_rule *r = &p->lists[o].v[i];

	out->origin = o;
	out->index = i;
	out->action = r->action;
	out->kind = r->kind;
	out->target = r->target;
	out->addr = r->kind >= POLICY_TARGET_ADDR ? &r->addr : NULL;
	out->ports = r->ports;
	out->nports = r->nports;
}

/* A rule's ports in the JSON shape (numbers and "lo-hi" strings). */
json_t *
policy_ports_json(const struct policy_rule *r)
{
	json_t *a = json_array();

	for (size_t i = 0; a != NULL && i < r->nports; i++) {
		if (r->ports[i].lo == r->ports[i].hi) {
			json_array_append_new(a, json_integer(r->ports[i].lo));
		} else {
			char b[16];
			snprintf(b, sizeof(b), "%u-%u", r->ports[i].lo, r->ports[i].hi);
			json_array_append_new(a, json_string(b));
		}
	}
	return a;
}

/* GET shape; see policy.h. */
json_t *
policy_to_json(const struct policy *p)
{
	json_t *o = json_object(), *eg;
	const struct policy_rules *u = &p->lists[POLICY_ORIGIN_USER];

	if (o == NULL)
		return NULL;
	if (u->n == 0) {
		eg = json_null();
	} else {
		eg = json_array();
		for (size_t i = 0; eg != NULL && i < u->n; i++) {
			json_t *r = json_object();
			json_object_set_new(
			    r, "action", json_string(policy_action_str(u->v[i].action)));
			json_object_set_new(r, "target", json_string(u->v[i].target));
			if (u->v[i].nports > 0)
				json_object_set_new(r, "ports", policy_ports_json(&u->v[i]));
			json_array_append_new(eg, r);
		}
	}
	json_object_set_new(o, "egress", eg);
	json_object_set_new(o, "defaultAction", json_string(policy_action_str(p->def)));
	if (p->terminate_all) /* an egressd extension, shown only when set */
		json_object_set_new(o, "terminateAll", json_true());
	return o;
}

/* GET mode string; see policy.h. */
const char *
policy_mode(const struct policy *p)
{
	if (p->lists[POLICY_ORIGIN_USER].n > 0)
		return "enforcing";
	return p->def == POLICY_ALLOW ? "allow_all" : "deny_all";
}

/* Default action; see policy.h. */
enum policy_action
policy_default_action(const struct policy *p)
{
	return p->def;
}

/* terminateAll; see policy.h. */
bool
policy_terminate_all(const struct policy *p)
{
	return p->terminate_all;
}

/* DNS settings; see policy.h. */
const struct policy_dns *
policy_dns(const struct policy *p)
{
	return &p->dns;
}

/* Bindings; see policy.h. */
const struct binding_set *
policy_bindings(const struct policy *p)
{
	return p->bindings;
}

/* Rule count; see policy.h. */
size_t
policy_rule_count(const struct policy *p, enum policy_origin origin)
{
	return origin < POLICY_ORIGIN_RULE_LISTS ? p->lists[origin].n : 0;
}

/* log_skip entries; see policy.h. */
size_t
policy_log_skip_count(const struct policy *p)
{
	return p->log_skip.n;
}

/* One rule; see policy.h. */
int
policy_rule_get(
    const struct policy *p, enum policy_origin origin, size_t index, struct policy_rule_info *out)
{
	if (origin >= POLICY_ORIGIN_RULE_LISTS || index >= p->lists[origin].n)
		return -1;
	rule_info(p, origin, index, out);
	return 0;
}

static int
policy_foreach(const struct policy *p, bool addrs, policy_rule_cb cb, void *arg)
{
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++) {
		for (size_t i = 0; i < p->lists[o].n; i++) {
			struct policy_rule_info ri;
			if ((p->lists[o].v[i].kind >= POLICY_TARGET_ADDR) != addrs)
				continue;
			rule_info(p, (enum policy_origin)o, i, &ri);
			int rc = cb(&ri, arg);
			if (rc != 0)
				return rc;
		}
	}
	return 0;
}

/* IP/CIDR rules; see policy.h. */
int
policy_foreach_addr(const struct policy *p, policy_rule_cb cb, void *arg)
{
	return policy_foreach(p, true, cb, arg);
}

/* Name rules; see policy.h. */
int
policy_foreach_name(const struct policy *p, policy_rule_cb cb, void *arg)
{
	return policy_foreach(p, false, cb, arg);
}

/* Origin text; see policy.h. */
const char *
policy_origin_str(enum policy_origin o)
{
	switch (o) {
	case POLICY_ORIGIN_DENY_ALWAYS:
		return "deny.always";
	case POLICY_ORIGIN_ALLOW_ALWAYS:
		return "allow.always";
	case POLICY_ORIGIN_USER:
		return "user";
	default:
		return "default";
	}
}

/* Action text; see policy.h. */
const char *
policy_action_str(enum policy_action a)
{
	return a == POLICY_ALLOW ? "allow" : "deny";
}
