/*
 * policy.c: the immutable egress policy model, its JSON (OpenSandbox
 * /policy) and YAML (git file) front ends, PATCH/DELETE/always-rule
 * derivations, and the matching engine (per-label name hashing, hash per
 * prefix length for addresses). Run by the parent at load, by the worker
 * on API updates and lookups, and by the CLI. Pure: no sockets, no
 * globals, no logging; the only file it opens is the one it is told to.
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

#define POLICY_FNV_OFFSET 0xcbf29ce484222325ULL /* hash seed */

struct policy_rule {
	enum policy_action action;
	enum policy_target_kind kind;
	char *target; /* canonical */
	struct policy_addr addr;
	struct policy_port_range *ports; /* NULL = all ports */
	size_t nports;
};

struct policy_rules {
	struct policy_rule *v;
	size_t n, cap;
};

#define POLICY_NKEY_INLINE 40 /* key bytes kept inside an index entry */

/*
 * Name index entry: a name (exact table) or a wildcard suffix (wild
 * table). One cache line; short keys live inline so a hit costs no
 * extra memory access.
 */
struct policy_nent {
	uint64_t h;
	uint32_t len;                          /* 0 = empty slot */
	int32_t idx[POLICY_ORIGIN_RULE_LISTS]; /* first rule per origin, -1 none */
	union {
		char inl[POLICY_NKEY_INLINE];
		const char *ptr; /* borrowed from the rule's target */
	} k;
};

struct policy_ntab {
	struct policy_nent *e;
	size_t mask;
	uint64_t labels; /* bit n-1: some key has n labels (bit 63: >= 64) */
	uint64_t *bloom; /* one bit per key hash: skips probes (and cache misses) for absent keys */
	size_t bmask;    /* bits in bloom - 1 */
};

#define POLICY_BLOOM_BITS_PER_KEY 16 /* about 6% false positives with one bit per key */

/* Address index entry: one (family, prefix, masked address). */
struct policy_aent {
	uint64_t h;
	bool used;
	struct policy_addr a;
	int32_t idx[POLICY_ORIGIN_RULE_LISTS];
};

struct policy_atab {
	struct policy_aent *e;
	size_t mask;
	uint8_t plen4[33], n4; /* prefix lengths present, longest first */
	uint8_t plen6[129], n6;
};

struct policy {
	int refs;
	enum policy_action def;
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];
	struct policy_dns dns;
	struct binding_set *bindings;
	struct policy_ntab exact, wild;
	struct policy_atab addrs;
};

/* ---- errors and validation context ---- */

/* Defaults of the limits; see policy.h. */
void
policy_limits_default(struct policy_limits *lim)
{
	lim->max_rules = POLICY_MAX_RULES_DEFAULT;
	lim->max_target_len = POLICY_MAX_TARGET_LEN;
}

/* file:line:col: key: message; see policy.h. */
void
policy_err_format(const struct policy_err *err, char *buf, size_t len)
{
	const char *f = err->file[0] ? err->file : "<input>";

	if (err->key[0])
		snprintf(buf, len, "%s:%u:%u: %s: %s", f, err->line, err->col, err->key, err->msg);
	else
		snprintf(buf, len, "%s:%u:%u: %s", f, err->line, err->col, err->msg);
}

/* Start a validation context; see policy_internal.h. */
void
policy_ctx_init(struct policy_ctx *c, struct policy_err *err, const char *file,
    const struct yamltree_marks *marks, const struct policy_limits *lim)
{
	memset(err, 0, sizeof(*err));
	snprintf(err->file, sizeof(err->file), "%s", file ? file : "<input>");
	c->err = err;
	c->file = file;
	c->marks = marks;
	c->max_rules = POLICY_MAX_RULES_DEFAULT;
	c->max_target_len = POLICY_MAX_TARGET_LEN;
	if (lim != NULL) {
		/* Configuration may lower limits, never raise them past the ceiling. */
		c->max_rules = lim->max_rules == 0 || lim->max_rules > POLICY_MAX_RULES_HARD
		                   ? POLICY_MAX_RULES_HARD
		                   : lim->max_rules;
		if (lim->max_target_len != 0 && lim->max_target_len < POLICY_MAX_TARGET_LEN)
			c->max_target_len = lim->max_target_len;
	}
}

/* Path of a child; see policy_internal.h. */
void
policy_ctx_path(char *buf, size_t len, const char *path, const char *key, size_t index)
{
	if (key != NULL)
		snprintf(buf, len, "%s%s%s", path, path[0] ? "." : "", key);
	else
		snprintf(buf, len, "%s[%zu]", path, index);
}

/* Record an error; see policy_internal.h. */
int
policy_ctx_fail(struct policy_ctx *c, enum policy_errcode code, const json_t *parent,
    const char *key, size_t index, int at_key, const char *path, const char *fmt, ...)
{
	va_list ap;
	struct policy_err *e = c->err;

	if (e->code != POLICY_ERR_NONE)
		return -1; /* keep the first error */
	e->code = code;
	/* No key under an object: the object itself lacks something. */
	bool self = key == NULL && (parent == NULL || json_is_object(parent));
	if (self)
		snprintf(e->key, sizeof(e->key), "%s", path);
	else
		policy_ctx_path(e->key, sizeof(e->key), path, key, index);
	if (c->marks != NULL) {
		unsigned l = 0, col = 0;
		if ((self && parent != NULL &&
		        yamltree_mark_node(c->marks, parent, &l, &col) == 0) ||
		    (!self && yamltree_mark(c->marks, parent, key, index, at_key, &l, &col) == 0) ||
		    yamltree_mark(c->marks, NULL, NULL, 0, 0, &l, &col) == 0) {
			e->line = l;
			e->col = col;
		}
	}
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return -1;
}

/* Case-insensitive member lookup; see policy_internal.h. */
json_t *
policy_ctx_member(const json_t *obj, const char *name)
{
	const char *k;
	json_t *v;

	if (!json_is_object(obj))
		return NULL;
	json_object_foreach((json_t *)obj, k, v)
	{
		if (strcasecmp(k, name) == 0)
			return v;
	}
	return NULL;
}

/* Unknown and case-duplicate keys; see policy_internal.h. */
int
policy_ctx_keys(
    struct policy_ctx *c, const json_t *obj, const char *path, const char *const *allowed)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)obj, k, v)
	{
		size_t i, same = 0;
		const char *k2;
		json_t *v2;

		for (i = 0; allowed[i] != NULL; i++) {
			if (strcasecmp(k, allowed[i]) == 0)
				break;
		}
		if (allowed[i] == NULL) {
			char show[POLICY_SHOW_MAX + 8];
			policy_show(show, sizeof(show), k, strlen(k));
			return policy_ctx_fail(
			    c, POLICY_ERR_INVALID, obj, k, 0, 1, path, "unknown key \"%s\"", show);
		}
		json_object_foreach((json_t *)obj, k2, v2)
		{
			if (strcasecmp(k, k2) == 0)
				same++;
		}
		if (same > 1)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, k, 0, 1, path,
			    "duplicate key (keys are case-insensitive)");
	}
	return 0;
}

/* Printable copy; see policy_internal.h. */
void
policy_show(char *buf, size_t buflen, const char *s, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < len && o + 4 < buflen; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (i >= POLICY_SHOW_MAX) {
			buf[o++] = '.';
			buf[o++] = '.';
			buf[o++] = '.';
			break;
		}
		buf[o++] = (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') ? (char)ch : '?';
	}
	buf[o] = '\0';
}

/* String without embedded NUL; see policy_internal.h. */
bool
policy_json_is_str(const json_t *v)
{
	return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

/* ---- rules ---- */

static void
rule_deinit(struct policy_rule *r)
{
	free(r->target);
	free(r->ports);
}

static void
rules_free(struct policy_rules *l)
{
	for (size_t i = 0; i < l->n; i++)
		rule_deinit(&l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static int
rules_push(struct policy_rules *l, struct policy_rule *r)
{
	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 16;
		struct policy_rule *nv = realloc(l->v, ncap * sizeof(*nv));
		if (nv == NULL)
			return -1;
		l->v = nv;
		l->cap = ncap;
	}
	l->v[l->n++] = *r;
	memset(r, 0, sizeof(*r));
	return 0;
}

static int
rule_copy(struct policy_rule *dst, const struct policy_rule *src)
{
	*dst = *src;
	dst->ports = NULL;
	if ((dst->target = strdup(src->target)) == NULL)
		return -1;
	if (src->nports > 0) {
		dst->ports = malloc(src->nports * sizeof(*dst->ports));
		if (dst->ports == NULL) {
			free(dst->target);
			return -1;
		}
		memcpy(dst->ports, src->ports, src->nports * sizeof(*dst->ports));
	}
	return 0;
}

static int
rules_copy(struct policy_rules *dst, const struct policy_rules *src)
{
	memset(dst, 0, sizeof(*dst));
	for (size_t i = 0; i < src->n; i++) {
		struct policy_rule r;
		if (rule_copy(&r, &src->v[i]) != 0 || rules_push(dst, &r) != 0) {
			rules_free(dst);
			return -1;
		}
	}
	return 0;
}

static bool
policy_is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' || ch == '\f' || ch == '\v';
}

/*
 * Classify and canonicalise a target: an IP literal, a CIDR, else a host
 * name or "*." wildcard. Returns 0, or an error code with *why set.
 */
static enum policy_errcode
rule_target(const char *s, size_t len, size_t max_len, struct policy_rule *r, const char **why)
{
	char canon[POLICY_NAME_MAX + 1];
	size_t clen;

	while (len > 0 && policy_is_space(s[0])) {
		s++;
		len--;
	}
	while (len > 0 && policy_is_space(s[len - 1]))
		len--;
	if (len == 0) {
		*why = "egress target cannot be empty";
		return POLICY_ERR_INVALID;
	}
	if (len > max_len) {
		*why = "egress target is too long";
		return POLICY_ERR_TOO_LARGE;
	}
	if (policy_addr_parse((const uint8_t *)s, len, true, &r->addr) == POLICY_NAME_OK) {
		char buf[POLICY_ADDR_TEXT_MAX];
		unsigned full = r->addr.family == AF_INET ? 32 : 128;
		r->kind = r->addr.prefix == full && memchr(s, '/', len) == NULL
		              ? POLICY_TARGET_ADDR
		              : POLICY_TARGET_CIDR;
		policy_addr_format(&r->addr, buf, sizeof(buf));
		if (r->kind == POLICY_TARGET_CIDR && strchr(buf, '/') == NULL)
			snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "/%u",
			    (unsigned)r->addr.prefix);
		r->target = strdup(buf);
		return r->target ? POLICY_ERR_NONE : POLICY_ERR_NOMEM;
	}
	memset(&r->addr, 0, sizeof(r->addr));
	if (memchr(s, ':', len) != NULL || memchr(s, '/', len) != NULL) {
		*why = "not a valid IP address, CIDR or host name (no ports, schemes, "
		       "brackets or zones)";
		return POLICY_ERR_INVALID;
	}
	switch (policy_name_canon((const uint8_t *)s, len, POLICY_NAME_WILDCARD, canon, &clen)) {
	case POLICY_NAME_OK:
		break;
	case POLICY_NAME_TOO_LARGE:
		*why = "host name longer than 253 bytes";
		return POLICY_ERR_TOO_LARGE;
	default:
		*why = "not a valid host name: LDH labels of 1-63 bytes, a leading \"*.\" "
		       "only as a whole label, punycode (xn--) for IDN";
		return POLICY_ERR_INVALID;
	}
	r->kind = policy_name_is_wildcard(canon) ? POLICY_TARGET_WILDCARD : POLICY_TARGET_NAME;
	r->target = strdup(canon);
	return r->target ? POLICY_ERR_NONE : POLICY_ERR_NOMEM;
}

static int
port_cmp(const void *a, const void *b)
{
	const struct policy_port_range *x = a, *y = b;
	return (int)x->lo - (int)y->lo;
}

static int
port_number(const char *s, size_t len, uint16_t *out)
{
	unsigned v = 0;

	if (len == 0 || len > 5 || (len > 1 && s[0] == '0'))
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v < 1 || v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

/* ports: [443, "8000-8100", "22"]; sorted and merged. */
static int
rule_ports(struct policy_ctx *c, const json_t *node, const char *path, struct policy_rule *r)
{
	size_t i, n = json_array_size(node), o = 0;
	json_t *v;

	if (n > POLICY_MAX_PORT_RANGES)
		return policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, node, NULL, POLICY_MAX_PORT_RANGES,
		    0, path, "more than %d port entries", POLICY_MAX_PORT_RANGES);
	if ((r->ports = calloc(n, sizeof(*r->ports))) == NULL)
		return policy_ctx_fail(
		    c, POLICY_ERR_NOMEM, NULL, NULL, 0, 0, path, "out of memory");
	json_array_foreach(node, i, v)
	{
		struct policy_port_range pr;
		if (json_is_integer(v)) {
			json_int_t x = json_integer_value(v);
			if (x < 1 || x > 65535)
				return policy_ctx_fail(c, POLICY_ERR_INVALID, node, NULL, i, 0,
				    path, "port must be 1..65535");
			pr.lo = pr.hi = (uint16_t)x;
		} else if (policy_json_is_str(v)) {
			const char *s = json_string_value(v), *dash = strchr(s, '-');
			size_t len = strlen(s);
			if (dash == NULL ? port_number(s, len, &pr.lo) != 0
			                 : (port_number(s, (size_t)(dash - s), &pr.lo) != 0 ||
			                       port_number(dash + 1, len - (size_t)(dash - s) - 1,
			                           &pr.hi) != 0 ||
			                       pr.hi < pr.lo))
				return policy_ctx_fail(c, POLICY_ERR_INVALID, node, NULL, i, 0,
				    path,
				    "port must be 1..65535 or a range \"lo-hi\" with lo <= hi");
			if (dash == NULL)
				pr.hi = pr.lo;
		} else {
			return policy_ctx_fail(c, POLICY_ERR_INVALID, node, NULL, i, 0, path,
			    "port must be a number or a \"lo-hi\" string");
		}
		r->ports[o++] = pr;
	}
	qsort(r->ports, o, sizeof(*r->ports), port_cmp);
	size_t m = 0;
	for (i = 0; i < o; i++) {
		if (m > 0 && (unsigned)r->ports[i].lo <= (unsigned)r->ports[m - 1].hi + 1) {
			if (r->ports[i].hi > r->ports[m - 1].hi)
				r->ports[m - 1].hi = r->ports[i].hi;
		} else {
			r->ports[m++] = r->ports[i];
		}
	}
	r->nports = m;
	return 0;
}

static const char *const rule_keys[] = {"action", "target", "ports", NULL};

/* One {"action","target","ports"?} object. */

/*
 * A keyword-like JSON string: the value trimmed of spaces (*s, *len, a view
 * into v, capped to cap - 1 bytes) and an ASCII-lowercased copy in word.
 */
static void
policy_json_word(const json_t *v, const char **s, size_t *len, char *word, size_t cap)
{
	const char *p = json_string_value(v);
	size_t n = json_string_length(v);

	while (n > 0 && policy_is_space(*p)) {
		p++;
		n--;
	}
	while (n > 0 && policy_is_space(p[n - 1]))
		n--;
	if (n >= cap)
		n = cap - 1;
	for (size_t i = 0; i < n; i++)
		word[i] = (char)((p[i] >= 'A' && p[i] <= 'Z') ? p[i] - 'A' + 'a' : p[i]);
	word[n] = '\0';
	*s = p;
	*len = n;
}

static int
rule_from_json(struct policy_ctx *c, const json_t *parent, size_t index, const char *ppath,
    struct policy_rule *r)
{
	char path[128], sub[160];
	const json_t *obj = json_array_get(parent, index);
	const char *why = NULL;

	memset(r, 0, sizeof(*r));
	policy_ctx_path(path, sizeof(path), ppath, NULL, index);
	if (!json_is_object(obj))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, parent, NULL, index, 0, ppath,
		    "a rule must be an object with \"action\" and \"target\"");
	if (policy_ctx_keys(c, obj, path, rule_keys) != 0)
		return -1;
	json_t *act = policy_ctx_member(obj, "action");
	json_t *tgt = policy_ctx_member(obj, "target");
	json_t *ports = policy_ctx_member(obj, "ports");
	r->action = POLICY_DENY; /* empty or missing action is deny, as OpenSandbox */
	if (act != NULL && !json_is_null(act)) {
		char a[16];
		size_t alen;
		const char *s;
		if (!policy_json_is_str(act))
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "action", 0, 0, path,
			    "action must be a string");
		policy_json_word(act, &s, &alen, a, sizeof(a));
		if (strcmp(a, "allow") == 0)
			r->action = POLICY_ALLOW;
		else if (alen != 0 && strcmp(a, "deny") != 0) {
			char show[POLICY_SHOW_MAX + 8];
			policy_show(show, sizeof(show), s, alen);
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "action", 0, 0, path,
			    "unsupported action \"%s\" (allow or deny)", show);
		}
	}
	if (tgt == NULL)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, parent, NULL, index, 0, ppath,
		    "egress target cannot be empty");
	if (!policy_json_is_str(tgt))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "target", 0, 0, path,
		    json_is_string(tgt) ? "NUL byte in target" : "target must be a string");
	enum policy_errcode code = rule_target(
	    json_string_value(tgt), json_string_length(tgt), c->max_target_len, r, &why);
	if (code != POLICY_ERR_NONE) {
		char show[POLICY_SHOW_MAX + 8];
		policy_show(show, sizeof(show), json_string_value(tgt), json_string_length(tgt));
		rule_deinit(r);
		memset(r, 0, sizeof(*r));
		return policy_ctx_fail(c, code, obj, "target", 0, 0, path, "\"%s\": %s", show,
		    why ? why : "out of memory");
	}
	if (ports != NULL && !json_is_null(ports)) {
		policy_ctx_path(sub, sizeof(sub), path, "ports", 0);
		if (r->action != POLICY_ALLOW) {
			rule_deinit(r);
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "ports", 0, 1, path,
			    "ports are only allowed on allow rules (a deny covers all ports)");
		}
		if (!json_is_array(ports) || json_array_size(ports) == 0) {
			rule_deinit(r);
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "ports", 0, 0, path,
			    "ports must be a non-empty list of ports or \"lo-hi\" ranges");
		}
		if (rule_ports(c, ports, sub, r) != 0) {
			rule_deinit(r);
			return -1;
		}
	}
	return 0;
}

/* ---- indexes ---- */

static size_t
pow2_at_least(size_t n)
{
	size_t c = 16;
	while (c < n)
		c <<= 1;
	return c;
}

/* Hash of one label, 8 bytes at a time. */
static inline uint64_t
label_hash(const char *p, size_t n)
{
	uint64_t acc = 0x9e3779b97f4a7c15ULL ^ n, w;

	while (n >= 8) {
		memcpy(&w, p, 8);
		acc = (acc ^ w) * 0xff51afd7ed558ccdULL;
		acc ^= acc >> 32;
		p += 8;
		n -= 8;
	}
	/* Tails in registers (two overlapping loads), never byte stores then a wide load. */
	if (n >= 4) {
		uint32_t a, b;
		memcpy(&a, p, 4);
		memcpy(&b, p + n - 4, 4);
		w = (uint64_t)a | (uint64_t)b << 32;
	} else if (n > 0) {
		w = (uint64_t)(uint8_t)p[0] | (uint64_t)(uint8_t)p[n / 2] << 8 |
		    (uint64_t)(uint8_t)p[n - 1] << 16;
	} else {
		return acc;
	}
	acc = (acc ^ w) * 0xff51afd7ed558ccdULL;
	return acc ^ (acc >> 32);
}

/* Extend the hash of a suffix by the label to its left. */
static inline uint64_t
suffix_step(uint64_t h, uint64_t lh)
{
	h = (h ^ lh) * 0xc4ceb9fe1a85ec53ULL;
	return h ^ (h >> 29);
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
		h = suffix_step(h, label_hash(s + start, end - start));
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

static uint64_t
label_bit(unsigned labels)
{
	return 1ULL << (labels >= 64 ? 63 : labels - 1);
}

static int
ntab_init(struct policy_ntab *t, size_t n)
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

/* False only if no key of the table can have hash h. */
static inline bool
ntab_maybe(const struct policy_ntab *t, uint64_t h)
{
	size_t b = (size_t)(h >> 32) & t->bmask;
	return t->bloom == NULL || (t->bloom[b / 64] >> (b % 64)) & 1;
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

static struct policy_nent *
ntab_find(const struct policy_ntab *t, uint64_t h, const char *key, size_t len)
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
	struct policy_nent *e = ntab_find(t, h, key, len);

	if (e->len == 0) {
		nent_set(e, key, len, h);
		t->labels |= label_bit(label_count(key, len));
		if (t->bloom != NULL) {
			size_t b = (size_t)(h >> 32) & t->bmask;
			t->bloom[b / 64] |= 1ULL << (b % 64);
		}
	}
	if (e->idx[o] < 0)
		e->idx[o] = (int32_t)idx;
}

/* Find key in a string set; an empty slot (key NULL) when absent. */
static struct policy_nent *
strset_slot(struct policy_ntab *t, const char *key, uint64_t *h)
{
	size_t len = strlen(key);

	*h = rev_hash(key, len);
	return ntab_find(t, *h, key, len);
}

/* Insert key (borrowed) into the empty slot e, remembering idx. */
static void
strset_put(struct policy_nent *e, const char *key, uint64_t h, size_t idx)
{
	nent_set(e, key, strlen(key), h);
	e->idx[0] = (int32_t)idx;
}

static uint64_t
addr_hash(const struct policy_addr *a)
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

static struct policy_aent *
atab_find(const struct policy_atab *t, const struct policy_addr *a, uint64_t h)
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
	uint64_t h = addr_hash(a);
	struct policy_aent *e = atab_find(t, a, h);

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
static int
rules_dedup(struct policy_rules *l)
{
	struct policy_ntab seen;
	size_t o = 0;

	if (ntab_init(&seen, l->n) != 0)
		return -1;
	for (size_t i = 0; i < l->n; i++) {
		size_t len = strlen(l->v[i].target);
		uint64_t h = rev_hash(l->v[i].target, len);
		struct policy_nent *e = ntab_find(&seen, h, l->v[i].target, len);
		if (e->len != 0) {
			rule_deinit(&l->v[i]);
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
static struct policy *
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
		if (rules_dedup(&p->lists[o]) != 0)
			goto fail_p;
		for (size_t i = 0; i < p->lists[o].n; i++) {
			enum policy_target_kind k = p->lists[o].v[i].kind;
			naddrs += k >= POLICY_TARGET_ADDR;
			nexact += k == POLICY_TARGET_NAME;
			nwild += k == POLICY_TARGET_WILDCARD;
		}
	}
	if (ntab_init(&p->exact, nexact) != 0 || ntab_init(&p->wild, nwild) != 0 ||
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
		rules_free(&lists[o]);
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
		rules_free(&p->lists[o]);
	free(p->exact.e);
	free(p->wild.e);
	free(p->exact.bloom);
	free(p->wild.bloom);
	free(p->addrs.e);
	binding_set_free(p->bindings);
	free(p);
}

/* ---- front ends ---- */

static const char *const json_root_keys[] = {"defaultAction", "egress", NULL};
static const char *const yaml_root_keys[] = {
    "version", "defaultAction", "egress", "dns", "credentials", "bindings", NULL};
static const char *const dns_keys[] = {"ttlMin", "ttlMax", "filterPrivate", NULL};

static int
parse_default(struct policy_ctx *c, const json_t *root, enum policy_action *def)
{
	json_t *v = policy_ctx_member(root, "defaultAction");
	const char *s;
	size_t len;
	char a[16];

	*def = POLICY_DENY;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!policy_json_is_str(v))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, root, "defaultAction", 0, 0, "",
		    "defaultAction must be \"allow\" or \"deny\"");
	policy_json_word(v, &s, &len, a, sizeof(a));
	if (len == 0 || strcmp(a, "deny") == 0)
		return 0;
	if (strcmp(a, "allow") == 0) {
		*def = POLICY_ALLOW;
		return 0;
	}
	/* OpenSandbox accepts any value here and then half-applies it; we refuse. */
	return policy_ctx_fail(c, POLICY_ERR_INVALID, root, "defaultAction", 0, 0, "",
	    "unsupported defaultAction (allow or deny)");
}

/* Parse an egress array into l; YAML refuses duplicate targets. */
static int
parse_rules(struct policy_ctx *c, const json_t *parent, const json_t *arr, const char *path,
    struct policy_rules *l, bool strict_dups)
{
	size_t i;
	json_t *v;
	struct policy_ntab seen = {0};
	int rc = 0;

	if (!json_is_array(arr))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, parent, parent ? "egress" : NULL, 0,
		    0, "", "egress must be a list of rules");
	if (json_array_size(arr) > c->max_rules)
		return policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, parent, parent ? "egress" : NULL, 0,
		    1, "", "egress rule total count %zu exceeds limit %zu", json_array_size(arr),
		    c->max_rules);
	json_array_foreach(arr, i, v)
	{
		struct policy_rule r;
		struct policy_nent *e = NULL;
		uint64_t h = 0;
		if (rule_from_json(c, arr, i, path, &r) != 0) {
			rc = -1;
			break;
		}
		if (strict_dups) {
			if (seen.e == NULL && ntab_init(&seen, json_array_size(arr)) != 0) {
				rule_deinit(&r);
				rc = policy_ctx_fail(
				    c, POLICY_ERR_NOMEM, NULL, NULL, 0, 0, path, "out of memory");
				break;
			}
			e = strset_slot(&seen, r.target, &h);
			if (e->len != 0) {
				char sub[128];
				policy_ctx_path(sub, sizeof(sub), path, NULL, i);
				rule_deinit(&r);
				rc = policy_ctx_fail(c, POLICY_ERR_INVALID, v, "target", 0, 0, sub,
				    "duplicate target (first at %s[%d])", path, (int)e->idx[0]);
				break;
			}
		}
		/* The target string stays put when the rule array grows. */
		const char *target = r.target;
		if (rules_push(l, &r) != 0) {
			rule_deinit(&r);
			rc = policy_ctx_fail(
			    c, POLICY_ERR_NOMEM, NULL, NULL, 0, 0, path, "out of memory");
			break;
		}
		if (e != NULL)
			strset_put(e, target, h, i);
	}
	free(seen.e);
	return rc;
}

static bool
policy_blank(const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (!policy_is_space(buf[i]))
			return false;
	}
	return true;
}

static json_t *
policy_load_json(struct policy_ctx *c, const char *buf, size_t len)
{
	json_error_t je;
	json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);

	if (root == NULL) {
		c->err->code = POLICY_ERR_SYNTAX;
		c->err->line = je.line > 0 ? (unsigned)je.line : 0;
		c->err->col = je.column > 0 ? (unsigned)je.column : 0;
		snprintf(c->err->msg, sizeof(c->err->msg), "invalid JSON: %s", je.text);
	}
	return root;
}

/* OpenSandbox /policy body; see policy.h. */
struct policy *
policy_from_json(
    const char *buf, size_t len, const struct policy_limits *lim, struct policy_err *err)
{
	struct policy_ctx c;
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];
	enum policy_action def;
	json_t *root;

	policy_ctx_init(&c, err, "<json>", NULL, lim);
	memset(lists, 0, sizeof(lists));
	if (buf == NULL || policy_blank(buf, len))
		return policy_new_deny_all();
	if ((root = policy_load_json(&c, buf, len)) == NULL)
		return NULL;
	if (json_is_null(root)) {
		json_decref(root);
		return policy_new_deny_all();
	}
	if (!json_is_object(root)) {
		json_decref(root);
		policy_ctx_fail(
		    &c, POLICY_ERR_INVALID, NULL, NULL, 0, 0, "", "policy must be a JSON object");
		return NULL;
	}
	json_t *eg = policy_ctx_member(root, "egress");
	if (policy_ctx_keys(&c, root, "", json_root_keys) != 0 ||
	    parse_default(&c, root, &def) != 0 ||
	    (eg != NULL && !json_is_null(eg) &&
	        parse_rules(&c, root, eg, "egress", &lists[POLICY_ORIGIN_USER], false) != 0)) {
		rules_free(&lists[POLICY_ORIGIN_USER]);
		json_decref(root);
		return NULL;
	}
	json_decref(root);
	struct policy *p = policy_build(def, lists, NULL, NULL);
	if (p == NULL)
		err->code = POLICY_ERR_NOMEM;
	return p;
}

static int
parse_uint(struct policy_ctx *c, const json_t *obj, const char *key, const char *path, uint32_t lo,
    uint32_t hi, uint32_t *out)
{
	json_t *v = policy_ctx_member(obj, key);

	if (v == NULL)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, key, 0, 0, path,
		    "must be an integer in %u..%u", lo, hi);
	*out = (uint32_t)json_integer_value(v);
	return 0;
}

static int
parse_dns(struct policy_ctx *c, const json_t *root, struct policy_dns *dns)
{
	json_t *d = policy_ctx_member(root, "dns");

	dns->ttl_min = POLICY_DNS_TTL_MIN_DEFAULT;
	dns->ttl_max = POLICY_DNS_TTL_MAX_DEFAULT;
	dns->filter_private = true;
	if (d == NULL || json_is_null(d))
		return 0;
	if (!json_is_object(d))
		return policy_ctx_fail(
		    c, POLICY_ERR_INVALID, root, "dns", 0, 0, "", "dns must be a mapping");
	if (policy_ctx_keys(c, d, "dns", dns_keys) != 0 ||
	    parse_uint(c, d, "ttlMin", "dns", 1, POLICY_DNS_TTL_CEILING, &dns->ttl_min) != 0 ||
	    parse_uint(c, d, "ttlMax", "dns", 1, POLICY_DNS_TTL_CEILING, &dns->ttl_max) != 0)
		return -1;
	if (dns->ttl_min > dns->ttl_max)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, d, "ttlMin", 0, 0, "dns",
		    "ttlMin (%u) is larger than ttlMax (%u)", dns->ttl_min, dns->ttl_max);
	json_t *fp = policy_ctx_member(d, "filterPrivate");
	if (fp != NULL) {
		if (!json_is_boolean(fp))
			return policy_ctx_fail(c, POLICY_ERR_INVALID, d, "filterPrivate", 0, 0,
			    "dns", "must be true or false");
		dns->filter_private = json_is_true(fp);
	}
	return 0;
}

/* YAML policy over a buffer; see policy.h. */
struct policy *
policy_from_yaml_buf(const char *name, const char *buf, size_t len, const struct policy_limits *lim,
    struct policy_err *err)
{
	struct policy_ctx c;
	struct yamltree_marks *marks = NULL;
	struct yamltree_error ye;
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];
	struct policy_dns dns;
	struct binding_set *bs = NULL;
	enum policy_action def;
	struct policy *p = NULL;
	json_t *root;

	memset(lists, 0, sizeof(lists));
	policy_ctx_init(&c, err, name, NULL, lim);
	if (len > POLICY_MAX_FILE_BYTES) {
		err->code = POLICY_ERR_TOO_LARGE;
		snprintf(
		    err->msg, sizeof(err->msg), "file larger than %u bytes", POLICY_MAX_FILE_BYTES);
		return NULL;
	}
	root = yamltree_parse((const uint8_t *)buf, len, &marks, &ye);
	if (root == NULL) {
		err->code = POLICY_ERR_SYNTAX;
		err->line = ye.line;
		err->col = ye.col;
		snprintf(err->msg, sizeof(err->msg), "%s", ye.msg[0] ? ye.msg : "out of memory");
		return NULL;
	}
	c.marks = marks;
	if (json_is_null(root)) {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, NULL, NULL, 0, 0, "",
		    "empty policy file (write \"defaultAction: deny\" for deny-all)");
		if (err->line == 0)
			err->line = err->col = 1;
		goto out;
	}
	if (!json_is_object(root)) {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, NULL, NULL, 0, 0, "",
		    "a policy file must be a mapping");
		goto out;
	}
	if (policy_ctx_keys(&c, root, "", yaml_root_keys) != 0)
		goto out;
	json_t *ver = policy_ctx_member(root, "version");
	if (ver != NULL && !(json_is_integer(ver) && json_integer_value(ver) == 1)) {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, root, "version", 0, 0, "",
		    "unsupported version (this egressd reads version 1)");
		goto out;
	}
	json_t *eg = policy_ctx_member(root, "egress");
	if (parse_default(&c, root, &def) != 0 || parse_dns(&c, root, &dns) != 0)
		goto out;
	if (eg != NULL && !json_is_null(eg) &&
	    parse_rules(&c, root, eg, "egress", &lists[POLICY_ORIGIN_USER], true) != 0)
		goto out;
	json_t *cr = policy_ctx_member(root, "credentials");
	json_t *bd = policy_ctx_member(root, "bindings");
	if ((cr != NULL && !json_is_null(cr)) || (bd != NULL && !json_is_null(bd))) {
		bs = binding_set_from_tree(&c, root, cr, bd, false);
		if (bs == NULL)
			goto out;
	}
	p = policy_build(def, lists, &dns, bs);
	if (p == NULL) {
		err->code = POLICY_ERR_NOMEM;
		goto out;
	}
	if (bs != NULL) {
		size_t bi = 0, hi = 0;
		struct policy_err tmp;
		if (binding_set_check(bs, p, &tmp, &bi, &hi) != 0) {
			json_t *b = json_array_get(bd, bi);
			json_t *hosts = policy_ctx_member(policy_ctx_member(b, "match"), "hosts");
			char path[128];
			snprintf(path, sizeof(path), "bindings[%zu].match.hosts", bi);
			if (hosts != NULL)
				policy_ctx_fail(
				    &c, tmp.code, hosts, NULL, hi, 0, path, "%s", tmp.msg);
			else
				policy_ctx_fail(
				    &c, tmp.code, NULL, NULL, 0, 0, path, "%s", tmp.msg);
			policy_free(p);
			p = NULL;
		}
	}
out:
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++)
		rules_free(&lists[o]);
	json_decref(root);
	yamltree_marks_free(marks);
	return p;
}

/* Read a whole regular file of at most max bytes into a malloc'd buffer. */
static char *
policy_read_file(const char *path, size_t max, size_t *len, struct policy_err *err, bool *missing)
{
	struct stat st;
	char *buf = NULL;
	size_t off = 0;
	int fd;

	*len = 0;
	if (missing != NULL)
		*missing = false;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) == -1) {
		if (missing != NULL && errno == ENOENT) {
			*missing = true;
			return NULL;
		}
		goto io;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		goto io_fd;
	if ((size_t)st.st_size > max) {
		close(fd);
		err->code = POLICY_ERR_TOO_LARGE;
		snprintf(err->file, sizeof(err->file), "%s", path);
		snprintf(err->msg, sizeof(err->msg), "file larger than %zu bytes", max);
		return NULL;
	}
	if ((buf = malloc((size_t)st.st_size + 1)) == NULL)
		goto io_fd;
	while (off < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + off, (size_t)st.st_size - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	close(fd);
	buf[off] = '\0';
	*len = off;
	return buf;
io_fd:
	close(fd);
io:
	free(buf);
	err->code = POLICY_ERR_IO;
	snprintf(err->file, sizeof(err->file), "%s", path);
	snprintf(err->msg, sizeof(err->msg), "cannot read: %s", strerror(errno ? errno : EINVAL));
	return NULL;
}

/* YAML policy file; see policy.h. */
struct policy *
policy_from_yaml_file(const char *path, const struct policy_limits *lim, struct policy_err *err)
{
	size_t len;
	char *buf;
	struct policy *p;

	memset(err, 0, sizeof(*err));
	if ((buf = policy_read_file(path, POLICY_MAX_FILE_BYTES, &len, err, NULL)) == NULL)
		return NULL;
	p = policy_from_yaml_buf(path, buf, len, lim, err);
	free(buf);
	return p;
}

/* ---- derivations ---- */

static int
policy_copy_lists(const struct policy *p, struct policy_rules out[POLICY_ORIGIN_RULE_LISTS])
{
	memset(out, 0, sizeof(*out) * POLICY_ORIGIN_RULE_LISTS);
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++) {
		if (rules_copy(&out[o], &p->lists[o]) != 0) {
			for (int k = 0; k < o; k++)
				rules_free(&out[k]);
			return -1;
		}
	}
	return 0;
}

static struct policy *
policy_nomem(struct policy_err *err)
{
	err->code = POLICY_ERR_NOMEM;
	snprintf(err->msg, sizeof(err->msg), "out of memory");
	return NULL;
}

/* PATCH merge; see policy.h. */
struct policy *
policy_merge(const struct policy *base, const struct policy *patch, const struct policy_limits *lim,
    struct policy_err *err)
{
	struct policy_ctx c;
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];
	struct policy_rules merged;

	policy_ctx_init(&c, err, "<json>", NULL, lim);
	if (policy_copy_lists(base, lists) != 0)
		return policy_nomem(err);
	if (rules_copy(&merged, &patch->lists[POLICY_ORIGIN_USER]) != 0)
		goto nomem;
	for (size_t i = 0; i < lists[POLICY_ORIGIN_USER].n; i++) {
		if (rules_push(&merged, &lists[POLICY_ORIGIN_USER].v[i]) != 0)
			goto nomem;
	}
	lists[POLICY_ORIGIN_USER].n = 0;
	rules_free(&lists[POLICY_ORIGIN_USER]);
	lists[POLICY_ORIGIN_USER] = merged;
	memset(&merged, 0, sizeof(merged));
	if (rules_dedup(&lists[POLICY_ORIGIN_USER]) != 0)
		goto nomem;
	if (lists[POLICY_ORIGIN_USER].n > c.max_rules) {
		policy_ctx_fail(&c, POLICY_ERR_TOO_LARGE, NULL, NULL, 0, 0, "egress",
		    "egress rule total count %zu exceeds limit %zu", lists[POLICY_ORIGIN_USER].n,
		    c.max_rules);
		for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++)
			rules_free(&lists[o]);
		return NULL;
	}
	struct policy *p =
	    policy_build(base->def, lists, &base->dns, binding_set_ref(base->bindings));
	return p ? p : policy_nomem(err);
nomem:
	rules_free(&merged);
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++)
		rules_free(&lists[o]);
	return policy_nomem(err);
}

/* PATCH body; see policy.h. */
struct policy *
policy_patch_json(const struct policy *base, const char *buf, size_t len,
    const struct policy_limits *lim, struct policy_err *err)
{
	struct policy_ctx c;
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];
	json_t *root;

	memset(lists, 0, sizeof(lists));
	policy_ctx_init(&c, err, "<json>", NULL, lim);
	if (buf == NULL || policy_blank(buf, len)) {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, NULL, NULL, 0, 0, "", "empty body");
		return NULL;
	}
	if ((root = policy_load_json(&c, buf, len)) == NULL)
		return NULL;
	if (!json_is_array(root) || json_array_size(root) == 0) {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, NULL, NULL, 0, 0, "",
		    json_is_array(root) ? "empty array" : "patch must be a JSON array of rules");
		json_decref(root);
		return NULL;
	}
	/* The merged count is what the limit applies to; parse with the ceiling. */
	c.max_rules = POLICY_MAX_RULES_HARD;
	if (parse_rules(&c, NULL, root, "", &lists[POLICY_ORIGIN_USER], false) != 0) {
		rules_free(&lists[POLICY_ORIGIN_USER]);
		json_decref(root);
		return NULL;
	}
	json_decref(root);
	struct policy *patch = policy_build(base->def, lists, NULL, NULL);
	if (patch == NULL)
		return policy_nomem(err);
	struct policy *p = policy_merge(base, patch, lim, err);
	policy_free(patch);
	return p;
}

/* DELETE by targets; see policy.h. */
struct policy *
policy_remove_targets(const struct policy *base, const char *const *targets, size_t ntargets,
    size_t *removed, struct policy_err *err)
{
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];
	char **canon = calloc(ntargets ? ntargets : 1, sizeof(*canon));
	size_t o = 0;

	memset(err, 0, sizeof(*err));
	*removed = 0;
	if (canon == NULL)
		return policy_nomem(err);
	for (size_t i = 0; i < ntargets; i++) {
		struct policy_rule r;
		const char *why;
		memset(&r, 0, sizeof(r));
		/* A target that is not canonicalisable cannot be stored: skip it. */
		if (targets[i] != NULL && rule_target(targets[i], strlen(targets[i]),
		                              POLICY_MAX_TARGET_LEN, &r, &why) == POLICY_ERR_NONE) {
			canon[i] = r.target;
			r.target = NULL;
		}
		rule_deinit(&r);
	}
	struct policy_ntab set = {0};
	if (ntab_init(&set, ntargets) != 0)
		goto nomem;
	for (size_t i = 0; i < ntargets; i++) {
		uint64_t h;
		struct policy_nent *e;
		if (canon[i] != NULL && (e = strset_slot(&set, canon[i], &h))->len == 0)
			strset_put(e, canon[i], h, i);
	}
	if (policy_copy_lists(base, lists) != 0) {
		free(set.e);
		goto nomem;
	}
	struct policy_rules *u = &lists[POLICY_ORIGIN_USER];
	for (size_t i = 0; i < u->n; i++) {
		uint64_t h;
		bool hit = strset_slot(&set, u->v[i].target, &h)->len != 0;
		if (hit) {
			rule_deinit(&u->v[i]);
			(*removed)++;
		} else {
			u->v[o++] = u->v[i];
		}
	}
	u->n = o;
	free(set.e);
	for (size_t i = 0; i < ntargets; i++)
		free(canon[i]);
	free(canon);
	struct policy *p =
	    policy_build(base->def, lists, &base->dns, binding_set_ref(base->bindings));
	return p ? p : policy_nomem(err);
nomem:
	for (size_t i = 0; i < ntargets; i++)
		free(canon[i]);
	free(canon);
	return policy_nomem(err);
}

/* DELETE body; see policy.h. */
struct policy *
policy_remove_json(
    const struct policy *base, const char *buf, size_t len, size_t *removed, struct policy_err *err)
{
	struct policy_ctx c;
	json_t *root, *v;
	size_t i;

	*removed = 0;
	policy_ctx_init(&c, err, "<json>", NULL, NULL);
	if (buf == NULL || policy_blank(buf, len)) {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, NULL, NULL, 0, 0, "", "empty body");
		return NULL;
	}
	if ((root = policy_load_json(&c, buf, len)) == NULL)
		return NULL;
	if (!json_is_array(root) || json_array_size(root) == 0) {
		policy_ctx_fail(&c, POLICY_ERR_INVALID, NULL, NULL, 0, 0, "",
		    json_is_array(root) ? "empty array" : "body must be a JSON array of targets");
		json_decref(root);
		return NULL;
	}
	const char **t = calloc(json_array_size(root), sizeof(*t));
	if (t == NULL) {
		json_decref(root);
		return policy_nomem(err);
	}
	json_array_foreach(root, i, v)
	{
		if (!policy_json_is_str(v)) {
			policy_ctx_fail(&c, POLICY_ERR_INVALID, root, NULL, i, 0, "",
			    "targets must be strings");
			free(t);
			json_decref(root);
			return NULL;
		}
		t[i] = json_string_value(v);
	}
	struct policy *p = policy_remove_targets(base, t, json_array_size(root), removed, err);
	free(t);
	json_decref(root);
	return p;
}

/* One always file: one target per line, blanks and '#' lines skipped. */
static int
always_parse(const char *name, const char *buf, size_t len, enum policy_action action,
    struct policy_rules *l, struct policy_err *err)
{
	size_t pos = 0;
	unsigned line = 0;

	while (buf != NULL && pos < len) {
		const char *s = buf + pos, *nl = memchr(s, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - s) : len - pos;
		size_t lead = 0;
		struct policy_rule r;
		const char *why = NULL;

		pos += n + (nl ? 1 : 0);
		line++;
		while (lead < n && policy_is_space(s[lead]))
			lead++;
		if (lead == n || s[lead] == '#')
			continue;
		if (l->n >= POLICY_MAX_ALWAYS_RULES) {
			err->code = POLICY_ERR_TOO_LARGE;
			snprintf(err->msg, sizeof(err->msg), "more than %d rules",
			    POLICY_MAX_ALWAYS_RULES);
			goto fail;
		}
		memset(&r, 0, sizeof(r));
		enum policy_errcode code = rule_target(s, n, POLICY_MAX_TARGET_LEN, &r, &why);
		if (code != POLICY_ERR_NONE) {
			char show[POLICY_SHOW_MAX + 8];
			policy_show(show, sizeof(show), s + lead, n - lead);
			rule_deinit(&r);
			err->code = code;
			snprintf(err->msg, sizeof(err->msg), "\"%s\": %s", show,
			    why ? why : "out of memory");
			goto fail;
		}
		r.action = action;
		if (rules_push(l, &r) != 0) {
			rule_deinit(&r);
			err->code = POLICY_ERR_NOMEM;
			snprintf(err->msg, sizeof(err->msg), "out of memory");
			goto fail;
		}
	}
	return 0;
fail:
	snprintf(err->file, sizeof(err->file), "%s", name ? name : "<always>");
	err->line = line;
	err->col = 1;
	return -1;
}

/* Replace the always lists; see policy.h. */
struct policy *
policy_with_always(const struct policy *p, const char *deny_name, const char *deny_buf,
    size_t deny_len, const char *allow_name, const char *allow_buf, size_t allow_len,
    struct policy_err *err)
{
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];

	memset(err, 0, sizeof(*err));
	memset(lists, 0, sizeof(lists));
	if (always_parse(deny_name, deny_buf, deny_len, POLICY_DENY,
	        &lists[POLICY_ORIGIN_DENY_ALWAYS], err) != 0 ||
	    always_parse(allow_name, allow_buf, allow_len, POLICY_ALLOW,
	        &lists[POLICY_ORIGIN_ALLOW_ALWAYS], err) != 0 ||
	    rules_copy(&lists[POLICY_ORIGIN_USER], &p->lists[POLICY_ORIGIN_USER]) != 0) {
		for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++)
			rules_free(&lists[o]);
		return err->code ? NULL : policy_nomem(err);
	}
	struct policy *np = policy_build(p->def, lists, &p->dns, binding_set_ref(p->bindings));
	return np ? np : policy_nomem(err);
}

/* Always files; see policy.h. */
struct policy *
policy_with_always_files(
    const struct policy *p, const char *deny_path, const char *allow_path, struct policy_err *err)
{
	char *d = NULL, *a = NULL;
	size_t dl = 0, al = 0;
	bool missing;
	struct policy *np = NULL;

	memset(err, 0, sizeof(*err));
	if (deny_path != NULL) {
		d = policy_read_file(deny_path, POLICY_MAX_ALWAYS_BYTES, &dl, err, &missing);
		if (d == NULL && !missing)
			return NULL;
	}
	if (allow_path != NULL) {
		a = policy_read_file(allow_path, POLICY_MAX_ALWAYS_BYTES, &al, err, &missing);
		if (a == NULL && !missing) {
			free(d);
			return NULL;
		}
	}
	np = policy_with_always(p, deny_path, d, dl, allow_path, a, al, err);
	free(d);
	free(a);
	return np;
}

/* Swap bindings; see policy.h. */
struct policy *
policy_with_bindings(const struct policy *p, struct binding_set *bs)
{
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];

	if (policy_copy_lists(p, lists) != 0)
		return NULL;
	return policy_build(p->def, lists, &p->dns, binding_set_ref(bs));
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

static json_t *
ports_to_json(const struct policy_rule *r)
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
				json_object_set_new(r, "ports", ports_to_json(&u->v[i]));
			json_array_append_new(eg, r);
		}
	}
	json_object_set_new(o, "egress", eg);
	json_object_set_new(o, "defaultAction", json_string(policy_action_str(p->def)));
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
		h = suffix_step(h, label_hash(canon + start, end - start));
		labels++;
		if (start == 0) {
			if (ntab_maybe(&p->exact, h)) {
				const struct policy_nent *e = ntab_find(&p->exact, h, canon, len);
				if (e->len != 0)
					name_consider(e, best);
			}
			break;
		}
		/* "*.s" matches names strictly below s: a label is left of this suffix. */
		if ((p->wild.labels & label_bit(labels)) && ntab_maybe(&p->wild, h)) {
			const struct policy_nent *e =
			    ntab_find(&p->wild, h, canon + start, len - start);
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
		const struct policy_aent *e = atab_find(&p->addrs, &k, addr_hash(&k));
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
