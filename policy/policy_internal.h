/*
 * Shared inside policy/: the validation context that lets the JSON and
 * YAML front ends (policy.c, binding.c, cli.c) report file:line:col: key.
 */
#ifndef POLICY_POLICY_INTERNAL_H
#define POLICY_POLICY_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>

#include "policy/binding.h"
#include "policy/policy.h"
#include "policy/yamltree.h"

#define POLICY_SHOW_MAX 64 /* bytes of untrusted text quoted in a message */

/* Where validation errors go and how to locate them. */
struct policy_ctx {
	struct policy_err *err;
	const char *file;                   /* "<json>" for the API */
	const struct yamltree_marks *marks; /* NULL for JSON */
	size_t max_rules;
	size_t max_target_len;
};

/* Start a context (resolves limits; lim may be NULL). */
void policy_ctx_init(struct policy_ctx *c, struct policy_err *err, const char *file,
    const struct yamltree_marks *marks, const struct policy_limits *lim);

/*
 * Record an error at member key (or element index when key is NULL) of
 * parent, whose own path is path; at_key points at the key rather than
 * the value. Always returns -1.
 */
int policy_ctx_fail(struct policy_ctx *c, enum policy_errcode code, const json_t *parent,
    const char *key, size_t index, int at_key, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

/* Member of obj by case-insensitive name, or NULL. */
json_t *policy_ctx_member(const json_t *obj, const char *name);

/* Refuse members not in allowed (NULL-terminated) and case-variant duplicates. */
int policy_ctx_keys(struct policy_ctx *c, const json_t *obj, const char *path,
    const char *const *allowed) __attribute__((warn_unused_result));

/* Path of a member or element: "path.key" or "path[i]". */
void policy_ctx_path(char *buf, size_t len, const char *path, const char *key, size_t index);

/* Printable, length-capped copy of untrusted bytes for messages. */
void policy_show(char *buf, size_t buflen, const char *s, size_t len);

/* True for a JSON string without an embedded NUL. */
bool policy_json_is_str(const json_t *v);

/*
 * Build a binding set from the "credentials" and "bindings" members of a
 * YAML file or vault request (either may be NULL). allow_inline says if
 * credentials may carry a value. Owned set or NULL with c->err filled.
 */
struct binding_set *binding_set_from_tree(struct policy_ctx *c, const json_t *root,
    const json_t *creds, const json_t *bindings, bool allow_inline)
    __attribute__((warn_unused_result));

/*
 * Coverage check of binding_set_validate(), also reporting which binding
 * and which host (index in the source list) failed.
 */
int binding_set_check(const struct binding_set *bs, const struct policy *p, struct policy_err *err,
    size_t *bad_binding, size_t *bad_host) __attribute__((warn_unused_result));

/*
 * Full normalised view for `check -v`, in the policy-file shape:
 * credentials with their source (never a value), bindings with auth
 * credential references. Owned tree.
 */
json_t *binding_set_to_tree(const struct binding_set *bs);

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
	bool terminate_all;           /* terminateAll: every allowed TLS host is terminated */
	struct policy_rules log_skip; /* log_skip.always: names whose learn line is not written */
	struct policy_ntab exact, wild;
	struct policy_atab addrs;
};

/* Hot helpers of the name index, shared by building and matching. */
/* Hash of one label, 8 bytes at a time. */
static inline uint64_t
policy_label_hash(const char *p, size_t n)
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

/* False only if no key of the table can have hash h. */
static inline bool
policy_ntab_maybe(const struct policy_ntab *t, uint64_t h)
{
	size_t b = (size_t)(h >> 32) & t->bmask;
	return t->bloom == NULL || (t->bloom[b / 64] >> (b % 64)) & 1;
}

/* Extend the hash of a suffix by the label to its left. */
static inline uint64_t
policy_suffix_step(uint64_t h, uint64_t lh)
{
	h = (h ^ lh) * 0xc4ceb9fe1a85ec53ULL;
	return h ^ (h >> 29);
}

/* Defined in one module of policy/, called from another. */
uint64_t policy_addr_hash(const struct policy_addr *a);
struct policy_aent *policy_atab_find(
    const struct policy_atab *t, const struct policy_addr *a, uint64_t h);
uint64_t policy_label_bit(unsigned labels);
struct policy_nent *policy_ntab_find(
    const struct policy_ntab *t, uint64_t h, const char *key, size_t len);
int policy_ntab_init(struct policy_ntab *t, size_t n);
int policy_parse_rules(struct policy_ctx *c, const json_t *parent, const json_t *arr,
    const char *path, struct policy_rules *l, bool strict_dups);
bool policy_blank(const char *buf, size_t len);
struct policy *policy_build(enum policy_action def,
    struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS], const struct policy_dns *dns,
    struct binding_set *bs);
bool policy_is_space(char ch);
json_t *policy_ports_json(const struct policy_rule *r);
json_t *policy_load_json(struct policy_ctx *c, const char *buf, size_t len);
char *policy_read_file(
    const char *path, size_t max, size_t *len, struct policy_err *err, bool *missing);
void policy_rule_deinit(struct policy_rule *r);
enum policy_errcode policy_rule_target(
    const char *s, size_t len, size_t max_len, struct policy_rule *r, const char **why);
int policy_rules_copy(struct policy_rules *dst, const struct policy_rules *src);
/* log_skip.always lines (names and "*.name" only) into out, deduplicated; -1 with err. */
int policy_log_skip_parse(const char *name, const char *buf, size_t len, struct policy_rules *out,
    struct policy_err *err);
int policy_rules_dedup(struct policy_rules *l);
void policy_rules_free(struct policy_rules *l);
int policy_rules_push(struct policy_rules *l, struct policy_rule *r);
void policy_strset_put(struct policy_nent *e, const char *key, uint64_t h, size_t idx);
struct policy_nent *policy_strset_slot(struct policy_ntab *t, const char *key, uint64_t *h);

#endif
