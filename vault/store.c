/*
 * The Credential Vault store (worker process): the credentials and bindings
 * as written through the API, with the OpenSandbox semantics. POST creates
 * (revision 1); PATCH applies delete, replace, add to credentials then
 * bindings, with an optional expectedRevision (409 on mismatch). Every
 * mutation builds a whole candidate, validates it against the effective
 * policy, loads its secrets (inline, file, env) and builds its snapshot
 * before anything changes; on any error nothing does. Secret values are
 * write-only: no result, error or log line carries one, nor echoes
 * invalid input. No HTTP here: egressd/control/vaultapi.c is the glue.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/crypto.h>

#include "policy/binding.h"
#include "policy/policy.h"
#include "vault/secret.h"
#include "vault/snap.h"
#include "vault/store.h"

/* Env sources are read once; later revisions reuse the value. */
#define VAULT_MAX_ENV 64

struct vault_env_secret {
	char name[BINDING_MAX_NAME];
	struct secret *s;
};

/* File sources are watched: Kubernetes rotates a Secret volume by a symlink swap. */
#define VAULT_MAX_FILES 64

struct vault_file_watch {
	char path[BINDING_MAX_PATH + 1];
	struct secret_stamp stamp;
};

struct vault_store {
	struct vault_file_watch files[VAULT_MAX_FILES];
	size_t nfiles;
	bool exists;
	uint64_t revision;
	json_t *creds;     /* array of credential objects as given (inline values included) */
	json_t *bindings;  /* array of binding objects as given */
	json_t *cred_revs; /* name -> revision */
	struct vault_env_secret env[VAULT_MAX_ENV];
	size_t nenv;
};

struct vault_reveal {
	struct secret *s;
	bool bad; /* the value failed secret_value_ok */
};

static int
store_reveal_cb(const uint8_t *value, size_t len, void *arg)
{
	struct vault_reveal *r = arg;

	/* The same header-value rule as file and env sources (secret_value_ok). */
	if (!secret_value_ok(value, len)) {
		r->bad = true;
		return -1;
	}
	r->s = secret_new(value, len);
	return r->s == NULL ? -1 : 0;
}

#define STORE_BAD_VALUE                                                                            \
	"the value holds a byte a header field cannot carry (CR, LF, NUL, another control "        \
	"byte, or white space at either end)"

/* Why a source failed, without the value: EILSEQ is the header-value rule. */
static const char *
store_load_why(int e)
{
	return e == EILSEQ ? STORE_BAD_VALUE : strerror(e);
}

/*
 * Load the value of credential i of bs from its source. Errors name the
 * credential by position (and by name when `named`: file loads and
 * rotations of a vault already accepted), never the value or the path.
 */
static struct secret *
store_load_secret(struct vault_store *vs, const struct binding_set *bs, size_t i, bool named,
    char *err, size_t errlen)
{
	struct binding_credential_info ci;
	struct vault_reveal r = {NULL, false};
	char who[BINDING_MAX_NAME + 40];
	int e = 0;

	if (binding_credential_get(bs, i, &ci) != 0) {
		snprintf(err, errlen, "internal error: credential %zu", i);
		return NULL;
	}
	if (named)
		snprintf(who, sizeof(who), "credentials[%zu] (\"%s\")", i, ci.name);
	else
		snprintf(who, sizeof(who), "credentials[%zu]", i);
	switch (ci.source) {
	case BINDING_SOURCE_INLINE:
		if (binding_credential_reveal(bs, i, store_reveal_cb, &r) != 0 || r.s == NULL)
			snprintf(err, errlen, "%s.source.value: %s", who,
			    r.bad ? STORE_BAD_VALUE : "invalid inline value");
		return r.s;
	case BINDING_SOURCE_FILE: {
		struct secret_stamp st;
		size_t k;

		memset(&st, 0, sizeof(st));
		r.s = secret_from_file_stamp(ci.ref, &st, &e);
		if (r.s == NULL) {
			/* By position: neither the name nor the path is echoed. */
			if (e == EACCES)
				snprintf(err, errlen,
				    "%s.source.path: cannot load the file: %s (the worker, uid %u, "
				    "needs read access to it: it is re-read on every rotation)",
				    who, store_load_why(e), (unsigned)getuid());
			else
				snprintf(err, errlen, "%s.source.path: cannot load the file: %s",
				    who, store_load_why(e));
			return NULL;
		}
		/* Remember the file's identity, to re-read it when it changes. */
		for (k = 0; k < vs->nfiles && strcmp(vs->files[k].path, ci.ref) != 0; k++)
			;
		if (k == vs->nfiles && vs->nfiles < VAULT_MAX_FILES &&
		    strlen(ci.ref) < sizeof(vs->files[0].path))
			snprintf(
			    vs->files[vs->nfiles++].path, sizeof(vs->files[0].path), "%s", ci.ref);
		if (k < vs->nfiles)
			vs->files[k].stamp = st;
		return r.s;
	}
	case BINDING_SOURCE_ENV:
		/* The sidecar's own settings are no credential source. */
		if (strncmp(ci.ref, "OPENSANDBOX_EGRESS_", 19) == 0 ||
		    strncmp(ci.ref, "EGRESSD_", 8) == 0) {
			snprintf(err, errlen,
			    "%s.source.name: the sidecar's own settings (OPENSANDBOX_EGRESS_*, "
			    "EGRESSD_*) are not credential sources",
			    who);
			return NULL;
		}
		for (size_t k = 0; k < vs->nenv; k++)
			if (strcmp(vs->env[k].name, ci.ref) == 0)
				return secret_ref(vs->env[k].s);
		if (vs->nenv >= VAULT_MAX_ENV || strlen(ci.ref) >= sizeof(vs->env[0].name)) {
			snprintf(err, errlen, "%s.source.name: too many env sources", who);
			return NULL;
		}
		r.s = secret_from_env(ci.ref, &e);
		if (r.s == NULL) {
			snprintf(err, errlen, "%s.source.name: environment variable: %s", who,
			    e == ENOENT ? "not set (env sources are read once)"
			                : store_load_why(e));
			return NULL;
		}
		snprintf(vs->env[vs->nenv].name, sizeof(vs->env[0].name), "%s", ci.ref);
		vs->env[vs->nenv++].s = secret_ref(r.s);
		return r.s;
	}
	snprintf(err, errlen, "%s: unknown source", who);
	return NULL;
}

/* Whether s holds the control API's token (constant time in the value). */
static bool
store_is_token(const char *tok, const struct secret *s)
{
	struct secret *t;
	bool eq;

	if (tok == NULL || tok[0] == '\0' || secret_len(s) != strlen(tok))
		return false;
	t = secret_new((const uint8_t *)tok, strlen(tok));
	if (t == NULL)
		return true; /* fail closed */
	eq = secret_equal_ct(s, t);
	secret_unref(t);
	return eq;
}

/* Load every secret of bs and build its snapshot. NULL with err. */
static struct vault_snap *
store_snap_from_set(struct vault_store *vs, const struct vault_store_ctx *cx,
    struct binding_set *bs, uint64_t revision, bool named, char *err, size_t errlen)
{
	struct secret **secrets;
	struct vault_snap *snap = NULL;
	size_t n = binding_credential_count(bs), loaded = 0;

	secrets = calloc(n ? n : 1, sizeof(*secrets));
	if (secrets == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	for (; loaded < n; loaded++) {
		secrets[loaded] = store_load_secret(vs, bs, loaded, named, err, errlen);
		if (secrets[loaded] == NULL)
			break;
		/*
		 * The control API's token is never a credential, whatever source
		 * names it (an env source reading OPENSANDBOX_EGRESS_TOKEN, a file
		 * holding it, an inline copy): a binding would send it upstream.
		 */
		if (store_is_token(cx->token, secrets[loaded])) {
			snprintf(err, errlen,
			    "credentials[%zu]: the value is the control API's token, which is "
			    "never "
			    "a credential",
			    loaded);
			secret_unref(secrets[loaded]);
			break;
		}
	}
	if (loaded == n)
		snap = vault_snap_new(bs, secrets, n, revision, err, errlen);
	for (size_t i = 0; i < loaded; i++)
		secret_unref(secrets[i]);
	free(secrets);
	return snap;
}

/*
 * Build the snapshot of a candidate {credentials, bindings}: parse,
 * validate against the effective policy, load secrets. NULL with err and
 * *status (400) on failure.
 */
static struct vault_snap *
store_candidate(struct vault_store *vs, const struct vault_store_ctx *cx, json_t *creds,
    json_t *bindings, uint64_t revision, char *err, size_t errlen)
{
	json_t *doc = json_object();
	char *txt;
	struct policy_err pe;
	struct binding_set *bs;
	struct vault_snap *snap;

	json_object_set(doc, "credentials", creds);
	json_object_set(doc, "bindings", bindings);
	txt = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (txt == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	memset(&pe, 0, sizeof(pe));
	bs = binding_set_from_json(txt, strlen(txt), &pe);
	OPENSSL_cleanse(txt, strlen(txt));
	free(txt);
	if (bs == NULL) {
		policy_err_format(&pe, err, errlen);
		return NULL;
	}
	if (binding_set_count(bs) > 0 && binding_set_validate(bs, cx->policy, &pe) != 0) {
		policy_err_format(&pe, err, errlen);
		binding_set_free(bs);
		return NULL;
	}
	snap = store_snap_from_set(vs, cx, bs, revision, false, err, errlen);
	binding_set_free(bs);
	return snap;
}

json_t *
vault_store_state(const struct vault_store *vs, const struct vault_snap *active)
{
	json_t *san = binding_set_to_json(active ? vault_snap_bindings(active) : NULL);
	json_t *o = json_object();
	json_t *c, *b;
	size_t i;
	json_t *v;

	if (san == NULL || o == NULL) {
		json_decref(san);
		json_decref(o);
		return NULL;
	}
	json_object_set_new(o, "revision", json_integer((json_int_t)vs->revision));
	c = json_object_get(san, "credentials");
	json_array_foreach(c, i, v)
	{
		json_t *r =
		    json_object_get(vs->cred_revs, json_string_value(json_object_get(v, "name")));
		json_object_set_new(v, "revision", json_integer(r ? json_integer_value(r) : 0));
	}
	b = json_object_get(san, "bindings");
	json_array_foreach(b, i, v)
	{
		json_t *nb = json_object();
		json_object_set(nb, "name", json_object_get(v, "name"));
		json_object_set_new(nb, "revision", json_integer((json_int_t)vs->revision));
		json_object_set(nb, "match", json_object_get(v, "match"));
		json_object_set(nb, "auth", json_object_get(v, "auth"));
		json_array_set_new(b, i, nb);
	}
	json_object_set(o, "credentials", c);
	json_object_set(o, "bindings", b);
	json_decref(san);
	return o;
}

const char *
vault_store_name(json_t *o)
{
	const char *n = json_string_value(json_object_get(o, "name"));
	return n ? n : "";
}

/* Trimmed copy of a name for comparisons. */
void
vault_store_trim(const char *in, char *out, size_t cap)
{
	size_t b = 0, e = strlen(in);

	while (in[b] == ' ' || in[b] == '\t')
		b++;
	while (e > b && (in[e - 1] == ' ' || in[e - 1] == '\t'))
		e--;
	snprintf(out, cap, "%.*s", (int)(e - b), in + b);
}

static ssize_t
store_find(json_t *arr, const char *name)
{
	size_t i;
	json_t *v;
	char t[BINDING_MAX_NAME * 2];

	json_array_foreach(arr, i, v)
	{
		vault_store_trim(vault_store_name(v), t, sizeof(t));
		if (strcmp(t, name) == 0)
			return (ssize_t)i;
	}
	return -1;
}

/*
 * Apply one {add, replace, delete} group (OpenSandbox order: delete,
 * replace, add) to arr. kind is "credential" or "binding". 0, or -1 with
 * err and *status.
 */
static int
store_ops(json_t *arr, json_t *ops, const char *kind, json_t *touched_revs, uint64_t rev, char *err,
    size_t errlen, int *status)
{
	static const char *const keys[] = {"add", "replace", "delete"};
	json_t *seen = json_object();
	const char *k;
	json_t *v;
	size_t i;
	int rc = -1;

	*status = 400;
	if (ops == NULL || json_is_null(ops)) {
		json_decref(seen);
		return 0;
	}
	if (!json_is_object(ops)) {
		snprintf(err, errlen,
		    "invalid credential vault mutation request: %ss must be an object", kind);
		goto out;
	}
	json_object_foreach(ops, k, v)
	{
		bool known = false;
		for (size_t j = 0; j < 3; j++)
			known |= strcmp(k, keys[j]) == 0;
		if (!known || (!json_is_array(v) && !json_is_null(v))) {
			/* The key is not echoed: it may be a value pasted in the wrong place. */
			snprintf(err, errlen,
			    "invalid credential vault mutation request: unknown or invalid field "
			    "in "
			    "%ss (allowed: add, replace, delete)",
			    kind);
			goto out;
		}
	}
	/* Every name may appear in one operation only. */
	for (size_t j = 0; j < 3; j++) {
		json_t *list = json_object_get(ops, keys[j]);
		json_array_foreach(list, i, v)
		{
			char name[BINDING_MAX_NAME * 2];
			const char *raw = j == 2 ? json_string_value(v) : vault_store_name(v);
			if (raw == NULL || (j < 2 && !json_is_object(v))) {
				snprintf(err, errlen,
				    "invalid credential vault mutation request: %s %s "
				    "entries must be %s",
				    kind, keys[j], j == 2 ? "names" : "objects");
				goto out;
			}
			vault_store_trim(raw, name, sizeof(name));
			if (name[0] == '\0') {
				snprintf(err, errlen, "%s %s name cannot be blank", kind, keys[j]);
				goto out;
			}
			if (json_object_get(seen, name) != NULL) {
				/* Names are not echoed (one may be a pasted value). */
				if (json_integer_value(json_object_get(seen, name)) ==
				        (json_int_t)j &&
				    j == 0)
					snprintf(err, errlen, "duplicate %s add name (add[%zu])",
					    kind, i);
				else
					snprintf(err, errlen,
					    "%s %s[%zu] mentioned by multiple operations", kind,
					    keys[j], i);
				goto out;
			}
			json_object_set_new(seen, name, json_integer((json_int_t)j));
		}
	}
	json_array_foreach(json_object_get(ops, "delete"), i, v)
	{
		char name[BINDING_MAX_NAME * 2];
		ssize_t at;
		vault_store_trim(json_string_value(v), name, sizeof(name));
		at = store_find(arr, name);
		if (at < 0) {
			/* A name that is not stored is not echoed (it may be a pasted value). */
			snprintf(err, errlen, "%s delete[%zu] does not exist", kind, i);
			goto out;
		}
		json_array_remove(arr, (size_t)at);
		if (touched_revs != NULL)
			json_object_del(touched_revs, name);
	}
	json_array_foreach(json_object_get(ops, "replace"), i, v)
	{
		char name[BINDING_MAX_NAME * 2];
		ssize_t at;
		vault_store_trim(vault_store_name(v), name, sizeof(name));
		at = store_find(arr, name);
		if (at < 0) {
			snprintf(err, errlen, "%s replace[%zu] does not exist", kind, i);
			goto out;
		}
		json_array_set(arr, (size_t)at, v);
		if (touched_revs != NULL)
			json_object_set_new(touched_revs, name, json_integer((json_int_t)rev));
	}
	json_array_foreach(json_object_get(ops, "add"), i, v)
	{
		char name[BINDING_MAX_NAME * 2];
		vault_store_trim(vault_store_name(v), name, sizeof(name));
		if (store_find(arr, name) >= 0) {
			snprintf(err, errlen, "%s add[%zu] already exists", kind, i);
			*status = 409;
			goto out;
		}
		json_array_append(arr, v);
		if (touched_revs != NULL)
			json_object_set_new(touched_revs, name, json_integer((json_int_t)rev));
	}
	rc = 0;
out:
	json_decref(seen);
	return rc;
}

/* A new, empty store. */
struct vault_store *
vault_store_new(void)
{
	return calloc(1, sizeof(struct vault_store));
}

/* Forget the credentials and bindings (DELETE); env values read once stay. */
void
vault_store_clear(struct vault_store *vs)
{
	json_decref(vs->creds);
	json_decref(vs->bindings);
	json_decref(vs->cred_revs);
	vs->creds = vs->bindings = vs->cred_revs = NULL;
	vs->exists = false;
	vs->revision = 0;
	vs->nfiles = 0;
}

void
vault_store_free(struct vault_store *vs)
{
	if (vs == NULL)
		return;
	vault_store_clear(vs);
	for (size_t i = 0; i < vs->nenv; i++)
		secret_unref(vs->env[i].s);
	OPENSSL_cleanse(vs, sizeof(*vs));
	free(vs);
}

bool
vault_store_exists(const struct vault_store *vs)
{
	return vs->exists;
}

uint64_t
vault_store_revision(const struct vault_store *vs)
{
	return vs->revision;
}

/* Swap in a validated candidate. */
static void
store_commit(
    struct vault_store *vs, json_t *creds, json_t *bindings, json_t *revs, uint64_t revision)
{
	json_decref(vs->creds);
	json_decref(vs->bindings);
	json_decref(vs->cred_revs);
	vs->creds = creds;
	vs->bindings = bindings;
	vs->cred_revs = revs;
	vs->revision = revision;
	vs->exists = true;
}

/* POST: see store.h. */
int
vault_store_create(struct vault_store *vs, json_t *body, const struct vault_store_ctx *cx,
    struct vault_snap **snap, char *err, size_t errlen)
{
	json_t *creds, *bindings, *revs, *v;
	const char *k;
	size_t i;

	*snap = NULL;
	if (vs->exists) {
		snprintf(err, errlen, "credential vault already exists");
		return 409;
	}
	json_object_foreach(body, k, v)
	{
		if (strcmp(k, "credentials") != 0 && strcmp(k, "bindings") != 0) {
			snprintf(err, errlen,
			    "invalid credential vault request: unknown field "
			    "(allowed: credentials, bindings)");
			return 400;
		}
	}
	creds = json_object_get(body, "credentials");
	bindings = json_object_get(body, "bindings");
	creds = json_is_array(creds) ? json_copy(creds) : json_array();
	bindings = json_is_array(bindings) ? json_copy(bindings) : json_array();
	*snap = store_candidate(vs, cx, creds, bindings, 1, err, errlen);
	if (*snap == NULL) {
		json_decref(creds);
		json_decref(bindings);
		return 400;
	}
	revs = json_object();
	json_array_foreach(creds, i, v)
	{
		char name[BINDING_MAX_NAME * 2];
		vault_store_trim(vault_store_name(v), name, sizeof(name));
		json_object_set_new(revs, name, json_integer(1));
	}
	store_commit(vs, creds, bindings, revs, 1);
	return 201;
}

/* PATCH: see store.h. */
int
vault_store_patch(struct vault_store *vs, json_t *body, const struct vault_store_ctx *cx,
    struct vault_snap **snap, char *err, size_t errlen)
{
	json_t *creds = NULL, *bindings = NULL, *revs = NULL, *exp, *v;
	const char *k;
	uint64_t rev;
	int status = 400;

	*snap = NULL;
	if (!vs->exists) {
		snprintf(err, errlen, "credential vault not found");
		return 404;
	}
	json_object_foreach(body, k, v)
	{
		if (strcmp(k, "credentials") != 0 && strcmp(k, "bindings") != 0 &&
		    strcmp(k, "expectedRevision") != 0) {
			snprintf(err, errlen,
			    "invalid credential vault mutation request: unknown field (allowed: "
			    "expectedRevision, credentials, bindings)");
			return 400;
		}
	}
	exp = json_object_get(body, "expectedRevision");
	if (exp != NULL && !json_is_null(exp)) {
		if (!json_is_integer(exp) || json_integer_value(exp) < 0) {
			snprintf(err, errlen,
			    "invalid credential vault mutation request: "
			    "expectedRevision must be a non-negative integer");
			return 400;
		}
		if ((uint64_t)json_integer_value(exp) != vs->revision) {
			snprintf(err, errlen,
			    "expectedRevision %lld does not match current "
			    "revision %llu",
			    (long long)json_integer_value(exp), (unsigned long long)vs->revision);
			return 409;
		}
	}
	rev = vs->revision + 1;
	creds = json_deep_copy(vs->creds);
	bindings = json_deep_copy(vs->bindings);
	revs = json_deep_copy(vs->cred_revs);
	if (store_ops(creds, json_object_get(body, "credentials"), "credential", revs, rev, err,
	        errlen, &status) != 0 ||
	    store_ops(bindings, json_object_get(body, "bindings"), "binding", NULL, rev, err,
	        errlen, &status) != 0)
		goto fail;
	*snap = store_candidate(vs, cx, creds, bindings, rev, err, errlen);
	if (*snap == NULL) {
		status = 400;
		goto fail;
	}
	store_commit(vs, creds, bindings, revs, rev);
	return 200;
fail:
	json_decref(creds);
	json_decref(bindings);
	json_decref(revs);
	return status;
}

/* File rotation: see store.h. */
struct vault_snap *
vault_store_rotate(struct vault_store *vs, const struct vault_snap *active,
    const struct vault_store_ctx *cx, bool *changed, char *err, size_t errlen)
{
	*changed = false;
	if (active == NULL || vs->nfiles == 0)
		return NULL;
	for (size_t i = 0; i < vs->nfiles; i++)
		if (secret_file_changed(vs->files[i].path, &vs->files[i].stamp))
			*changed = true;
	if (!*changed)
		return NULL;
	return store_snap_from_set(vs, cx, (struct binding_set *)vault_snap_bindings(active),
	    vault_snap_revision(active), true, err, errlen);
}

/* Bindings of a policy file: see store.h. */
struct vault_snap *
vault_store_from_bindings(struct vault_store *vs, struct binding_set *bs,
    const struct vault_store_ctx *cx, char *err, size_t errlen)
{
	return store_snap_from_set(vs, cx, bs, 0, true, err, errlen);
}
