/*
 * policy_edit: new policies derived from old ones (control process): PATCH
 * merges, DELETE by target, the deny.always/allow.always files, and
 * another binding set. The inputs are never changed; a failure leaves
 * nothing half-built.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <limits.h>
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

/* ---- derivations ---- */

static int
policy_copy_lists(const struct policy *p, struct policy_rules out[POLICY_ORIGIN_RULE_LISTS])
{
	memset(out, 0, sizeof(*out) * POLICY_ORIGIN_RULE_LISTS);
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++) {
		if (policy_rules_copy(&out[o], &p->lists[o]) != 0) {
			for (int k = 0; k < o; k++)
				policy_rules_free(&out[k]);
			return -1;
		}
	}
	return 0;
}

/* A policy derived from base: its default, DNS settings and terminateAll, new lists. */
static struct policy *
policy_derive(const struct policy *base, struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS],
    struct binding_set *bs)
{
	struct policy *p = policy_build(base->def, lists, &base->dns, bs);

	if (p == NULL)
		return NULL;
	p->terminate_all = base->terminate_all;
	if (policy_rules_copy(&p->log_skip, &base->log_skip) != 0) {
		policy_free(p);
		return NULL;
	}
	return p;
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
	if (policy_rules_copy(&merged, &patch->lists[POLICY_ORIGIN_USER]) != 0)
		goto nomem;
	for (size_t i = 0; i < lists[POLICY_ORIGIN_USER].n; i++) {
		if (policy_rules_push(&merged, &lists[POLICY_ORIGIN_USER].v[i]) != 0)
			goto nomem;
	}
	lists[POLICY_ORIGIN_USER].n = 0;
	policy_rules_free(&lists[POLICY_ORIGIN_USER]);
	lists[POLICY_ORIGIN_USER] = merged;
	memset(&merged, 0, sizeof(merged));
	if (policy_rules_dedup(&lists[POLICY_ORIGIN_USER]) != 0)
		goto nomem;
	if (lists[POLICY_ORIGIN_USER].n > c.max_rules) {
		policy_ctx_fail(&c, POLICY_ERR_TOO_LARGE, NULL, NULL, 0, 0, "egress",
		    "egress rule total count %zu exceeds limit %zu", lists[POLICY_ORIGIN_USER].n,
		    c.max_rules);
		for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++)
			policy_rules_free(&lists[o]);
		return NULL;
	}
	struct policy *p = policy_derive(base, lists, binding_set_ref(base->bindings));
	return p ? p : policy_nomem(err);
nomem:
	policy_rules_free(&merged);
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++)
		policy_rules_free(&lists[o]);
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
	if (policy_parse_rules(&c, NULL, root, "", &lists[POLICY_ORIGIN_USER], false) != 0) {
		policy_rules_free(&lists[POLICY_ORIGIN_USER]);
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
		if (targets[i] != NULL && policy_rule_target(targets[i], strlen(targets[i]),
		                              POLICY_MAX_TARGET_LEN, &r, &why) == POLICY_ERR_NONE) {
			canon[i] = r.target;
			r.target = NULL;
		}
		policy_rule_deinit(&r);
	}
	struct policy_ntab set = {0};
	if (policy_ntab_init(&set, ntargets) != 0)
		goto nomem;
	for (size_t i = 0; i < ntargets; i++) {
		uint64_t h;
		struct policy_nent *e;
		if (canon[i] != NULL && (e = policy_strset_slot(&set, canon[i], &h))->len == 0)
			policy_strset_put(e, canon[i], h, i);
	}
	if (policy_copy_lists(base, lists) != 0) {
		free(set.e);
		goto nomem;
	}
	struct policy_rules *u = &lists[POLICY_ORIGIN_USER];
	for (size_t i = 0; i < u->n; i++) {
		uint64_t h;
		bool hit = policy_strset_slot(&set, u->v[i].target, &h)->len != 0;
		if (hit) {
			policy_rule_deinit(&u->v[i]);
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
	struct policy *p = policy_derive(base, lists, binding_set_ref(base->bindings));
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

/*
 * One always file: one target per line, blanks and '#' lines skipped.
 * names_only (log_skip.always) refuses IP literals and CIDRs.
 */
static int
always_parse(const char *name, const char *buf, size_t len, enum policy_action action,
    bool names_only, struct policy_rules *l, struct policy_err *err)
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
		enum policy_errcode code =
		    policy_rule_target(s, n, POLICY_MAX_TARGET_LEN, &r, &why);
		if (code == POLICY_ERR_NONE && names_only && r.kind >= POLICY_TARGET_ADDR) {
			code = POLICY_ERR_INVALID;
			why = "is not a domain pattern (a name or *.name)";
		}
		if (code != POLICY_ERR_NONE) {
			char show[POLICY_SHOW_MAX + 8];
			policy_show(show, sizeof(show), s + lead, n - lead);
			policy_rule_deinit(&r);
			err->code = code;
			snprintf(err->msg, sizeof(err->msg), "\"%s\": %s", show,
			    why ? why : "out of memory");
			goto fail;
		}
		r.action = action;
		if (policy_rules_push(l, &r) != 0) {
			policy_rule_deinit(&r);
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
	if (always_parse(deny_name, deny_buf, deny_len, POLICY_DENY, false,
	        &lists[POLICY_ORIGIN_DENY_ALWAYS], err) != 0 ||
	    always_parse(allow_name, allow_buf, allow_len, POLICY_ALLOW, false,
	        &lists[POLICY_ORIGIN_ALLOW_ALWAYS], err) != 0 ||
	    policy_rules_copy(&lists[POLICY_ORIGIN_USER], &p->lists[POLICY_ORIGIN_USER]) != 0) {
		for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++)
			policy_rules_free(&lists[o]);
		return err->code ? NULL : policy_nomem(err);
	}
	struct policy *np = policy_derive(p, lists, binding_set_ref(p->bindings));
	return np ? np : policy_nomem(err);
}

/* log_skip.always lines into out (names only, deduplicated); see policy_internal.h. */
int
policy_log_skip_parse(
    const char *name, const char *buf, size_t len, struct policy_rules *out, struct policy_err *err)
{
	memset(out, 0, sizeof(*out));
	if (always_parse(name, buf, len, POLICY_ALLOW, true, out, err) != 0) {
		policy_rules_free(out);
		return -1;
	}
	if (policy_rules_dedup(out) != 0) {
		policy_rules_free(out);
		policy_nomem(err);
		return -1;
	}
	return 0;
}

/* log_skip.always; see policy.h. */
struct policy *
policy_with_log_skip(
    const struct policy *p, const char *name, const char *buf, size_t len, struct policy_err *err)
{
	struct policy_rules skip, lists[POLICY_ORIGIN_RULE_LISTS];
	struct policy *np;

	memset(err, 0, sizeof(*err));
	if (policy_log_skip_parse(name, buf, len, &skip, err) != 0)
		return NULL;
	if (policy_copy_lists(p, lists) != 0 ||
	    (np = policy_derive(p, lists, binding_set_ref(p->bindings))) == NULL) {
		policy_rules_free(&skip);
		return policy_nomem(err);
	}
	policy_rules_free(&np->log_skip);
	np->log_skip = skip;
	return np;
}

/* The operator directory's three files, one build; see policy.h. */
struct policy *
policy_with_always_dir(const struct policy *p, const char *dir, struct policy_err *err)
{
	static const char *const files[3] = {"deny.always", "allow.always", "log_skip.always"};
	char path[3][PATH_MAX + 20];
	char *buf[3] = {NULL, NULL, NULL};
	size_t len[3] = {0, 0, 0};
	struct policy_rules skip;
	struct policy *np = NULL;
	bool missing;

	memset(err, 0, sizeof(*err));
	for (int k = 0; k < 3; k++) {
		snprintf(path[k], sizeof(path[k]), "%s/%s", dir, files[k]);
		buf[k] = policy_read_file(path[k], POLICY_MAX_ALWAYS_BYTES, &len[k], err, &missing);
		if (buf[k] == NULL && !missing)
			goto out;
	}
	if (policy_log_skip_parse(path[2], buf[2], len[2], &skip, err) != 0)
		goto out;
	np = policy_with_always(p, path[0], buf[0], len[0], path[1], buf[1], len[1], err);
	if (np != NULL) {
		/* A fresh policy, not shared yet: its list is set in place. */
		policy_rules_free(&np->log_skip);
		np->log_skip = skip;
	} else {
		policy_rules_free(&skip);
	}
out:
	for (int k = 0; k < 3; k++)
		free(buf[k]);
	return np;
}

/* Swap bindings; see policy.h. */
struct policy *
policy_with_bindings(const struct policy *p, struct binding_set *bs)
{
	struct policy_rules lists[POLICY_ORIGIN_RULE_LISTS];

	if (policy_copy_lists(p, lists) != 0)
		return NULL;
	return policy_derive(p, lists, binding_set_ref(bs));
}
