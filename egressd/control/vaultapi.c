/*
 * Credential Vault store and its control API (worker process), with the
 * OpenSandbox semantics: POST creates (revision 1), PATCH applies
 * delete/replace/add to credentials then bindings with optional
 * expectedRevision (409 on mismatch), DELETE clears everything. Every
 * mutation builds a whole candidate, validates it against the effective
 * policy, loads its secrets and builds its snapshot before it is swapped
 * in; on any error nothing changes. Secret values are write-only: no
 * response, error or log line carries one, nor echoes invalid input.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/http.h>
#include <jansson.h>
#include <openssl/crypto.h>

#include "egressd/control/api.h"
#include "egressd/common/log.h"
#include "egressd/control/vaultapi.h"
#include "egressd/child/wstate.h"
#include "policy/binding.h"
#include "policy/policy.h"
#include "vault/secret.h"
#include "vault/snap.h"

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

struct vaultstore {
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

static void vaultapi_audit(struct wstate *ws, const char *op);

/* jansson memory is wiped before it is freed: it may hold inline secrets. */
static void
vaultapi_json_free(void *p)
{
	if (p == NULL)
		return;
	OPENSSL_cleanse(p, malloc_usable_size(p));
	free(p);
}

/* Install the wiping allocator; call once at worker start. */
void
vaultapi_init(void)
{
	json_set_alloc_funcs(malloc, vaultapi_json_free);
}

static struct vaultstore *
vaultapi_store(struct wstate *ws)
{
	if (ws->vstore == NULL)
		ws->vstore = calloc(1, sizeof(struct vaultstore));
	return ws->vstore;
}

static void
vaultapi_clear(struct vaultstore *vs)
{
	json_decref(vs->creds);
	json_decref(vs->bindings);
	json_decref(vs->cred_revs);
	vs->creds = vs->bindings = vs->cred_revs = NULL;
	vs->exists = false;
	vs->revision = 0;
	vs->nfiles = 0;
}

/* Free the store and every secret it holds. */
void
vaultapi_free(struct wstate *ws)
{
	struct vaultstore *vs = ws->vstore;

	vault_snap_unref(ws->vault);
	ws->vault = NULL;
	if (vs == NULL)
		return;
	vaultapi_clear(vs);
	for (size_t i = 0; i < vs->nenv; i++)
		secret_unref(vs->env[i].s);
	free(vs);
	ws->vstore = NULL;
}

struct vault_reveal {
	struct secret *s;
	bool bad; /* the value failed secret_value_ok */
};

static int
vaultapi_reveal_cb(const uint8_t *value, size_t len, void *arg)
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

#define VAULTAPI_BAD_VALUE                                                                         \
	"the value holds a byte a header field cannot carry (CR, LF, NUL, another control "        \
	"byte, or white space at either end)"

/* Why a source failed, without the value: EILSEQ is the header-value rule. */
static const char *
vaultapi_load_why(int e)
{
	return e == EILSEQ ? VAULTAPI_BAD_VALUE : strerror(e);
}

/*
 * Load the value of credential i of bs from its source. Errors name the
 * credential by position (and by name when `named`: file loads and
 * rotations of a vault already accepted), never the value or the path.
 */
static struct secret *
vaultapi_load_secret(struct vaultstore *vs, const struct binding_set *bs, size_t i, bool named,
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
		if (binding_credential_reveal(bs, i, vaultapi_reveal_cb, &r) != 0 || r.s == NULL)
			snprintf(err, errlen, "%s.source.value: %s", who,
			    r.bad ? VAULTAPI_BAD_VALUE : "invalid inline value");
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
				    who, vaultapi_load_why(e), (unsigned)getuid());
			else
				snprintf(err, errlen, "%s.source.path: cannot load the file: %s",
				    who, vaultapi_load_why(e));
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
			                : vaultapi_load_why(e));
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
vaultapi_is_token(const struct wstate *ws, const struct secret *s)
{
	const char *tok = ws->cfg->token;
	struct secret *t;
	bool eq;

	if (tok[0] == '\0' || secret_len(s) != strlen(tok))
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
vaultapi_snap_from_set(struct wstate *ws, struct binding_set *bs, uint64_t revision, bool named,
    char *err, size_t errlen)
{
	struct vaultstore *vs = vaultapi_store(ws);
	struct secret **secrets;
	struct vault_snap *snap = NULL;
	size_t n = binding_credential_count(bs), loaded = 0;

	if (vs == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	secrets = calloc(n ? n : 1, sizeof(*secrets));
	if (secrets == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	for (; loaded < n; loaded++) {
		secrets[loaded] = vaultapi_load_secret(vs, bs, loaded, named, err, errlen);
		if (secrets[loaded] == NULL)
			break;
		/*
		 * The control API's token is never a credential, whatever source
		 * names it (an env source reading OPENSANDBOX_EGRESS_TOKEN, a file
		 * holding it, an inline copy): a binding would send it upstream.
		 */
		if (vaultapi_is_token(ws, secrets[loaded])) {
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
 * Bindings from the YAML policy file (file and env sources only) become
 * the active vault while no vault was written through the API.
 */
void
vaultapi_policy_changed(struct wstate *ws)
{
	struct vaultstore *vs = vaultapi_store(ws);
	struct binding_set *bs = (struct binding_set *)policy_bindings(ws->policy);
	struct vault_snap *snap;
	char err[512];

	if (vs == NULL || vs->exists)
		return;
	if (bs == NULL || binding_set_count(bs) == 0) {
		vault_snap_unref(ws->vault);
		ws->vault = NULL;
		return;
	}
	snap = vaultapi_snap_from_set(ws, bs, 0, true, err, sizeof(err));
	if (snap == NULL) {
		/* Fail closed: without its secrets the binding injects nothing. */
		log_msg(
		    LOG_ERROR, "vault", "vault_error", "policy file bindings not loaded: %s", err);
		return;
	}
	vault_snap_unref(ws->vault);
	ws->vault = snap;
	vaultapi_audit(ws, "policy_file");
}

/*
 * Build the snapshot of a candidate {credentials, bindings}: parse,
 * validate against the effective policy, load secrets. NULL with err and
 * *status (400) on failure.
 */
static struct vault_snap *
vaultapi_candidate(
    struct wstate *ws, json_t *creds, json_t *bindings, uint64_t revision, char *err, size_t errlen)
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
	if (binding_set_count(bs) > 0 && binding_set_validate(bs, ws->policy, &pe) != 0) {
		policy_err_format(&pe, err, errlen);
		binding_set_free(bs);
		return NULL;
	}
	snap = vaultapi_snap_from_set(ws, bs, revision, false, err, errlen);
	binding_set_free(bs);
	return snap;
}

static json_t *
vaultapi_state(struct wstate *ws)
{
	struct vaultstore *vs = ws->vstore;
	json_t *san = binding_set_to_json(vault_snap_bindings(ws->vault));
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

static void
vaultapi_audit(struct wstate *ws, const char *op)
{
	struct log_line l;
	const struct binding_set *bs = ws->vault ? vault_snap_bindings(ws->vault) : NULL;

	log_begin(&l, LOG_INFO, "vault", "vault_update");
	log_str(&l, "op", op);
	log_uint(&l, "revision", ws->vstore ? ws->vstore->revision : 0);
	log_uint(&l, "credentials", bs ? binding_credential_count(bs) : 0);
	log_uint(&l, "bindings", bs ? binding_set_count(bs) : 0);
	log_end(&l);
}

static const char *
vaultapi_name(json_t *o)
{
	const char *n = json_string_value(json_object_get(o, "name"));
	return n ? n : "";
}

/* Trimmed copy of a name for comparisons. */
static void
vaultapi_trim(const char *in, char *out, size_t cap)
{
	size_t b = 0, e = strlen(in);

	while (in[b] == ' ' || in[b] == '\t')
		b++;
	while (e > b && (in[e - 1] == ' ' || in[e - 1] == '\t'))
		e--;
	snprintf(out, cap, "%.*s", (int)(e - b), in + b);
}

static ssize_t
vaultapi_find(json_t *arr, const char *name)
{
	size_t i;
	json_t *v;
	char t[BINDING_MAX_NAME * 2];

	json_array_foreach(arr, i, v)
	{
		vaultapi_trim(vaultapi_name(v), t, sizeof(t));
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
vaultapi_ops(json_t *arr, json_t *ops, const char *kind, json_t *touched_revs, uint64_t rev,
    char *err, size_t errlen, int *status)
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
			const char *raw = j == 2 ? json_string_value(v) : vaultapi_name(v);
			if (raw == NULL || (j < 2 && !json_is_object(v))) {
				snprintf(err, errlen,
				    "invalid credential vault mutation request: %s %s "
				    "entries must be %s",
				    kind, keys[j], j == 2 ? "names" : "objects");
				goto out;
			}
			vaultapi_trim(raw, name, sizeof(name));
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
		vaultapi_trim(json_string_value(v), name, sizeof(name));
		at = vaultapi_find(arr, name);
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
		vaultapi_trim(vaultapi_name(v), name, sizeof(name));
		at = vaultapi_find(arr, name);
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
		vaultapi_trim(vaultapi_name(v), name, sizeof(name));
		if (vaultapi_find(arr, name) >= 0) {
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

/* Swap in a validated candidate. */
static void
vaultapi_commit(struct wstate *ws, struct vault_snap *snap, json_t *creds, json_t *bindings,
    json_t *revs, uint64_t revision)
{
	struct vaultstore *vs = ws->vstore;

	json_decref(vs->creds);
	json_decref(vs->bindings);
	json_decref(vs->cred_revs);
	vs->creds = creds;
	vs->bindings = bindings;
	vs->cred_revs = revs;
	vs->revision = revision;
	vs->exists = true;
	vault_snap_unref(ws->vault);
	ws->vault = snap;
}

static json_t *
vaultapi_parse(struct evhttp_request *req, const char *what, char *err, size_t errlen)
{
	size_t len;
	char *body = api_body(req, &len);
	json_error_t je;
	json_t *j;

	if (body == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	OPENSSL_cleanse(body, len);
	free(body);
	if (j == NULL) {
		/* The parser's text never quotes the input: no value can leak here. */
		snprintf(err, errlen, "%s: %s at line %d column %d", what,
		    len == 0 ? "EOF" : "malformed JSON", je.line, je.column);
		return NULL;
	}
	if (!json_is_object(j)) {
		snprintf(err, errlen, "%s: body must be a JSON object", what);
		json_decref(j);
		return NULL;
	}
	return j;
}

static void
vaultapi_create(struct wstate *ws, struct evhttp_request *req)
{
	struct vaultstore *vs = ws->vstore;
	char err[512];
	json_t *j, *creds, *bindings, *revs;
	const char *k;
	json_t *v;
	struct vault_snap *snap;
	size_t i;

	if (vs->exists) {
		api_error(req, 409, "Conflict", "credential vault already exists");
		return;
	}
	j = vaultapi_parse(req, "invalid credential vault request", err, sizeof(err));
	if (j == NULL) {
		api_error(req, 400, "Bad Request", err);
		return;
	}
	json_object_foreach(j, k, v)
	{
		if (strcmp(k, "credentials") != 0 && strcmp(k, "bindings") != 0) {
			snprintf(err, sizeof(err),
			    "invalid credential vault request: unknown field "
			    "(allowed: credentials, bindings)");
			api_error(req, 400, "Bad Request", err);
			json_decref(j);
			return;
		}
	}
	creds = json_object_get(j, "credentials");
	bindings = json_object_get(j, "bindings");
	creds = json_is_array(creds) ? json_copy(creds) : json_array();
	bindings = json_is_array(bindings) ? json_copy(bindings) : json_array();
	json_decref(j);
	snap = vaultapi_candidate(ws, creds, bindings, 1, err, sizeof(err));
	if (snap == NULL) {
		json_decref(creds);
		json_decref(bindings);
		api_error(req, 400, "Bad Request", err);
		return;
	}
	revs = json_object();
	json_array_foreach(creds, i, v)
	{
		char name[BINDING_MAX_NAME * 2];
		vaultapi_trim(vaultapi_name(v), name, sizeof(name));
		json_object_set_new(revs, name, json_integer(1));
	}
	vaultapi_commit(ws, snap, creds, bindings, revs, 1);
	vaultapi_audit(ws, "create");
	j = vaultapi_state(ws);
	api_json(req, 201, "Created", j);
	json_decref(j);
}

static void
vaultapi_patch(struct wstate *ws, struct evhttp_request *req)
{
	struct vaultstore *vs = ws->vstore;
	char err[512];
	json_t *j, *creds = NULL, *bindings = NULL, *revs = NULL, *exp;
	const char *k;
	json_t *v;
	struct vault_snap *snap;
	uint64_t rev;
	int status = 400;

	if (!vs->exists) {
		api_error(req, 404, "Not Found", "credential vault not found");
		return;
	}
	j = vaultapi_parse(req, "invalid credential vault mutation request", err, sizeof(err));
	if (j == NULL) {
		api_error(req, 400, "Bad Request", err);
		return;
	}
	json_object_foreach(j, k, v)
	{
		if (strcmp(k, "credentials") != 0 && strcmp(k, "bindings") != 0 &&
		    strcmp(k, "expectedRevision") != 0) {
			snprintf(err, sizeof(err),
			    "invalid credential vault mutation request: unknown field (allowed: "
			    "expectedRevision, credentials, bindings)");
			goto fail;
		}
	}
	exp = json_object_get(j, "expectedRevision");
	if (exp != NULL && !json_is_null(exp)) {
		if (!json_is_integer(exp) || json_integer_value(exp) < 0) {
			snprintf(err, sizeof(err),
			    "invalid credential vault mutation request: "
			    "expectedRevision must be a non-negative integer");
			goto fail;
		}
		if ((uint64_t)json_integer_value(exp) != vs->revision) {
			snprintf(err, sizeof(err),
			    "expectedRevision %lld does not match current "
			    "revision %llu",
			    (long long)json_integer_value(exp), (unsigned long long)vs->revision);
			status = 409;
			goto fail;
		}
	}
	rev = vs->revision + 1;
	creds = json_deep_copy(vs->creds);
	bindings = json_deep_copy(vs->bindings);
	revs = json_deep_copy(vs->cred_revs);
	if (vaultapi_ops(creds, json_object_get(j, "credentials"), "credential", revs, rev, err,
	        sizeof(err), &status) != 0 ||
	    vaultapi_ops(bindings, json_object_get(j, "bindings"), "binding", NULL, rev, err,
	        sizeof(err), &status) != 0)
		goto fail;
	snap = vaultapi_candidate(ws, creds, bindings, rev, err, sizeof(err));
	if (snap == NULL) {
		status = 400;
		goto fail;
	}
	json_decref(j);
	vaultapi_commit(ws, snap, creds, bindings, revs, rev);
	vaultapi_audit(ws, "patch");
	j = vaultapi_state(ws);
	api_json(req, 200, "OK", j);
	json_decref(j);
	return;
fail:
	json_decref(j);
	json_decref(creds);
	json_decref(bindings);
	json_decref(revs);
	api_error(req, status, status == 409 ? "Conflict" : "Bad Request", err);
}

static void
vaultapi_sub(struct wstate *ws, struct evhttp_request *req, const char *rest)
{
	json_t *st, *list, *v, *o;
	const char *kind = NULL;
	size_t i;

	if (strncmp(rest, "credentials", 11) == 0 && (rest[11] == '\0' || rest[11] == '/'))
		kind = "credentials";
	else if (strncmp(rest, "bindings", 8) == 0 && (rest[8] == '\0' || rest[8] == '/'))
		kind = "bindings";
	if (kind == NULL) {
		api_error(req, 404, "Not Found", "not found");
		return;
	}
	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
		api_allow(req, "GET");
		return;
	}
	if (!ws->vstore->exists) {
		api_error(req, 404, "Not Found", "credential vault not found");
		return;
	}
	st = vaultapi_state(ws);
	list = json_object_get(st, kind);
	rest += strlen(kind);
	if (*rest == '\0') {
		o = json_object();
		json_object_set(o, "revision", json_object_get(st, "revision"));
		json_object_set(o, kind, list);
		api_json(req, 200, "OK", o);
		json_decref(o);
		json_decref(st);
		return;
	}
	{
		char *name = evhttp_uridecode(rest + 1, 0, NULL);
		char t[BINDING_MAX_NAME * 2];
		vaultapi_trim(name ? name : "", t, sizeof(t));
		free(name);
		json_array_foreach(list, i, v)
		{
			if (strcmp(vaultapi_name(v), t) == 0) {
				api_json(req, 200, "OK", v);
				json_decref(st);
				return;
			}
		}
	}
	api_error(req, 404, "Not Found",
	    strcmp(kind, "credentials") == 0 ? "credential not found" : "binding not found");
	json_decref(st);
}

/* Route /credential-vault and its subresources (auth already passed). */
void
vaultapi_handle(
    struct wstate *ws, struct evhttp_request *req, const char *path, bool auth_on, bool proxy_ready)
{
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	struct vaultstore *vs = vaultapi_store(ws);
	bool write = cmd == EVHTTP_REQ_POST || cmd == EVHTTP_REQ_PATCH || cmd == EVHTTP_REQ_DELETE;

	if (vs == NULL) {
		api_error(req, 500, "Internal Server Error", "out of memory");
		return;
	}
	if (strncmp(path, "/credential-vault/", 18) == 0) {
		vaultapi_sub(ws, req, path + 18);
		return;
	}
	if (!write && cmd != EVHTTP_REQ_GET) {
		api_allow(req, "GET, POST, PATCH, DELETE");
		return;
	}
	if (write) {
		/* OpenSandbox preconditions, in their order (412). */
		const char *why = NULL;
		if (!auth_on)
			why = "credential vault requires egress API auth token";
		else if (!ws->cfg->intercept)
			why = "credential vault requires transparent mitmproxy";
		else if (ws->cfg->mode == CONFIG_MODE_DNS)
			/* DNS-only filtering lets the workload dial around the vault. */
			why = "credential vault requires dns+nft egress enforcement";
		else if (ws->cfg->ssl_insecure)
			why = "credential vault rejects insecure upstream TLS mode";
		else if (!proxy_ready)
			why = "credential proxy is not ready";
		if (why != NULL) {
			api_error(req, 412, "Precondition Failed", why);
			return;
		}
	}
	switch (cmd) {
	case EVHTTP_REQ_GET:
		if (!vs->exists)
			api_error(req, 404, "Not Found", "credential vault not found");
		else {
			json_t *j = vaultapi_state(ws);
			api_json(req, 200, "OK", j);
			json_decref(j);
		}
		return;
	case EVHTTP_REQ_POST:
		vaultapi_create(ws, req);
		return;
	case EVHTTP_REQ_PATCH:
		vaultapi_patch(ws, req);
		return;
	default: /* DELETE */
		if (!vs->exists) {
			api_error(req, 404, "Not Found", "credential vault not found");
			return;
		}
		vaultapi_clear(vs);
		vault_snap_unref(ws->vault);
		ws->vault = NULL;
		vaultapi_audit(ws, "delete");
		evhttp_send_reply(req, 204, "No Content", NULL);
		return;
	}
}

/*
 * File sources rotate in place (Kubernetes Secret volumes): when a file the
 * active vault read has changed, the snapshot is rebuilt with the same
 * bindings and revision and the new values; requests in flight keep the
 * old one. A file that cannot be read keeps the previous snapshot.
 */
void
vaultapi_rotate_files(struct wstate *ws)
{
	struct vaultstore *vs = ws->vstore;
	struct vault_snap *snap;
	bool changed = false;
	char err[512];

	if (vs == NULL || ws->vault == NULL || vs->nfiles == 0)
		return;
	for (size_t i = 0; i < vs->nfiles; i++)
		if (secret_file_changed(vs->files[i].path, &vs->files[i].stamp))
			changed = true;
	if (!changed)
		return;
	snap = vaultapi_snap_from_set(ws, (struct binding_set *)vault_snap_bindings(ws->vault),
	    vault_snap_revision(ws->vault), true, err, sizeof(err));
	if (snap == NULL) {
		log_msg(LOG_ERROR, "vault", "vault_error",
		    "a credential file changed but could not be loaded; the previous values stay: "
		    "%s",
		    err);
		return;
	}
	vault_snap_unref(ws->vault);
	ws->vault = snap;
	vaultapi_audit(ws, "file_rotated");
}

/* Would the current vault stay valid under the effective policy `p`? */
int
vaultapi_check_policy(struct wstate *ws, const struct policy *p, char *err, size_t errlen)
{
	const struct binding_set *bs = ws->vault ? vault_snap_bindings(ws->vault) : NULL;
	struct policy_err pe;

	if (bs == NULL || binding_set_count(bs) == 0)
		return 0;
	memset(&pe, 0, sizeof(pe));
	if (binding_set_validate(bs, p, &pe) != 0) {
		policy_err_format(&pe, err, errlen);
		return -1;
	}
	return 0;
}
