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

#endif
