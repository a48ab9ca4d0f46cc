/*
 * The Credential Vault's control API (control process): routing, the
 * OpenSandbox preconditions (412), request bodies and answers. The store
 * and its semantics (POST, PATCH, rotation, secret sources) are
 * vault/store.c; this file swaps in the snapshot a mutation returns,
 * hands it to the intercept through the parent (wstate_publish_vault) and
 * answers once the intercept holds it, and writes the audit line. Secret
 * values are write-only: no response, error or log line carries one, nor
 * echoes invalid input.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/http.h>
#include <jansson.h>
#include <openssl/crypto.h>

#include "egressd/control/httpreply.h"
#include "egressd/common/log.h"
#include "egressd/control/vaultapi.h"
#include "egressd/child/wstate.h"
#include "policy/binding.h"
#include "policy/policy.h"
#include "vault/secret.h"
#include "vault/snap.h"
#include "vault/store.h"
#include "vault/vwire.h"

struct vaultapi {
	struct wstate *ws;
	struct vault_store *vs;   /* the vault as written through the API */
	struct vault_snap *vault; /* its active snapshot, or NULL */
	struct vaultapi_later_ops later;
	bool has_later;
};

static void vaultapi_audit(struct vaultapi *va, const char *op);

/* A vault change the intercept has not confirmed yet, and the answer it waits for. */
struct vaultapi_answer {
	struct vaultapi *va;
	struct evhttp_request *req;
	void *later; /* the deferred answer; NULL while the publish has not returned */
	bool done;   /* published synchronously (no channel) */
	int err;
	int code;
	const char *reason;
	json_t *body; /* NULL: no content */
};

/*
 * The intercept could not take the new vault: fail closed, with no vault
 * anywhere rather than one in control that the intercept does not inject.
 */
static void
vaultapi_drop(struct vaultapi *va)
{
	if (va->vs != NULL)
		vault_store_clear(va->vs);
	vault_snap_unref(va->vault);
	va->vault = NULL;
	vaultapi_audit(va, "dropped");
	wstate_publish_vault(va->ws, va->vault, NULL, NULL);
}

static void
vaultapi_send(struct vaultapi_answer *an)
{
	char msg[256];

	if (an->err != 0)
		snprintf(msg, sizeof(msg),
		    "the credential proxy did not take the vault (%s); the vault was dropped",
		    strerror(an->err));
	if (an->later != NULL) {
		if (an->err != 0)
			an->va->later.error(an->later, 503, "Service Unavailable", msg);
		else
			an->va->later.json(an->later, an->code, an->reason, an->body);
	} else if (an->err != 0)
		http_error(an->req, 503, "Service Unavailable", msg);
	else if (an->body != NULL)
		http_json(an->req, an->code, an->reason, an->body);
	else
		evhttp_send_reply(an->req, an->code, an->reason, NULL);
	json_decref(an->body);
	free(an);
}

static void
vaultapi_published_cb(int err, const char *msg, void *arg)
{
	struct vaultapi_answer *an = arg;

	an->err = err;
	if (err != 0) {
		log_msg(
		    LOG_ERROR, "vault", "vault_error", "the intercept refused the vault: %s", msg);
		vaultapi_drop(an->va);
	}
	if (an->later == NULL && an->req == NULL) {
		json_decref(an->body); /* its request was answered with 500 already */
		free(an);
		return;
	}
	if (an->later == NULL) {
		an->done = true; /* answered by vaultapi_answer, which is still running */
		return;
	}
	vaultapi_send(an);
}

/*
 * Answer req with code and body (taken) once the active vault is in force
 * in the intercept; at once when there is no intercept to wait for.
 */
static void
vaultapi_answer(
    struct vaultapi *va, struct evhttp_request *req, int code, const char *reason, json_t *body)
{
	struct vaultapi_answer *an = calloc(1, sizeof(*an));

	if (an == NULL) {
		json_decref(body);
		http_error(req, 500, "Internal Server Error", "out of memory");
		return;
	}
	an->va = va;
	an->req = req;
	an->code = code;
	an->reason = reason;
	an->body = body;
	wstate_publish_vault(va->ws, va->vault, vaultapi_published_cb, an);
	if (an->done) {
		vaultapi_send(an);
		return;
	}
	an->later = va->has_later ? va->later.begin(va->later.ctx, req) : NULL;
	if (an->later == NULL) {
		/* The answer comes when the intercept confirms; without memory for it, say so now. */
		an->req = NULL;
		http_error(req, 500, "Internal Server Error", "out of memory");
	}
}

static struct vault_store *
vaultapi_store(struct vaultapi *va)
{
	if (va->vs == NULL)
		va->vs = vault_store_new();
	return va->vs;
}

struct vaultapi *
vaultapi_new(struct wstate *ws, const struct vaultapi_later_ops *ops)
{
	struct vaultapi *va = calloc(1, sizeof(*va));

	if (va == NULL)
		return NULL;
	va->ws = ws;
	if (ops != NULL) {
		va->later = *ops;
		va->has_later = true;
	}
	return va;
}

/* Free the store and every secret it holds. */
void
vaultapi_free(struct vaultapi *va)
{
	if (va == NULL)
		return;
	vault_snap_unref(va->vault);
	vault_store_free(va->vs);
	free(va);
}

const struct vault_snap *
vaultapi_active(const struct vaultapi *va)
{
	return va->vault;
}

/* A change no request waits for (policy file bindings, a rotated file). */
static void
vaultapi_logged_cb(int err, const char *msg, void *arg)
{
	if (err != 0)
		log_msg(LOG_ERROR, "vault", "vault_error",
		    "the intercept did not take the vault: %s; it keeps the previous one", msg);
}

/*
 * Bindings from the YAML policy file (file and env sources only) become
 * the active vault while no vault was written through the API.
 */
void
vaultapi_policy_changed(struct vaultapi *va)
{
	struct vault_store *vs = vaultapi_store(va);
	struct binding_set *bs = (struct binding_set *)policy_bindings(wstate_policy(va->ws));
	struct vault_store_ctx cx = {
	    .policy = wstate_policy(va->ws), .token = wstate_cfg(va->ws)->token};
	struct vault_snap *snap;
	char err[512];

	if (vs == NULL || vault_store_exists(vs))
		return;
	if (bs == NULL || binding_set_count(bs) == 0) {
		if (va->vault != NULL) {
			vault_snap_unref(va->vault);
			va->vault = NULL;
			wstate_publish_vault(va->ws, va->vault, vaultapi_logged_cb, NULL);
		}
		return;
	}
	snap = vault_store_from_bindings(vs, bs, &cx, err, sizeof(err));
	if (snap == NULL) {
		/* Fail closed: without its secrets the binding injects nothing. */
		log_msg(
		    LOG_ERROR, "vault", "vault_error", "policy file bindings not loaded: %s", err);
		return;
	}
	vault_snap_unref(va->vault);
	va->vault = snap;
	vaultapi_audit(va, "policy_file");
	wstate_publish_vault(va->ws, va->vault, vaultapi_logged_cb, NULL);
}

static void
vaultapi_audit(struct vaultapi *va, const char *op)
{
	struct log_line l;
	const struct binding_set *bs = va->vault ? vault_snap_bindings(va->vault) : NULL;

	log_begin(&l, LOG_INFO, "vault", "vault_update");
	log_str(&l, "op", op);
	log_uint(&l, "revision", va->vs ? vault_store_revision(va->vs) : 0);
	log_uint(&l, "credentials", bs ? binding_credential_count(bs) : 0);
	log_uint(&l, "bindings", bs ? binding_set_count(bs) : 0);
	log_end(&l);
}

/* Make snap the active snapshot (takes it). */
static void
vaultapi_activate(struct vaultapi *va, struct vault_snap *snap)
{
	vault_snap_unref(va->vault);
	va->vault = snap;
}

static struct vault_store_ctx
vaultapi_ctx(const struct vaultapi *va)
{
	struct vault_store_ctx cx = {
	    .policy = wstate_policy(va->ws), .token = wstate_cfg(va->ws)->token};

	return cx;
}

static json_t *
vaultapi_parse(struct evhttp_request *req, const char *what, char *err, size_t errlen)
{
	size_t len;
	char *body = http_body(req, &len);
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

static const char *
vaultapi_reason(int status)
{
	switch (status) {
	case 404:
		return "Not Found";
	case 409:
		return "Conflict";
	default:
		return "Bad Request";
	}
}

/* POST or PATCH through the store; the answer is the new state. */
static void
vaultapi_mutate(struct vaultapi *va, struct evhttp_request *req, bool create)
{
	struct vault_store_ctx cx = vaultapi_ctx(va);
	struct vault_snap *snap = NULL;
	char err[512];
	json_t *j;
	int status;

	if (create ? vault_store_exists(va->vs) : !vault_store_exists(va->vs)) {
		http_error(req, create ? 409 : 404, create ? "Conflict" : "Not Found",
		    create ? "credential vault already exists" : "credential vault not found");
		return;
	}
	j = vaultapi_parse(req,
	    create ? "invalid credential vault request"
	           : "invalid credential vault mutation request",
	    err, sizeof(err));
	if (j == NULL) {
		http_error(req, 400, "Bad Request", err);
		return;
	}
	status = create ? vault_store_create(va->vs, j, &cx, &snap, err, sizeof(err))
	                : vault_store_patch(va->vs, j, &cx, &snap, err, sizeof(err));
	json_decref(j);
	if (snap == NULL) {
		http_error(req, status, vaultapi_reason(status), err);
		return;
	}
	vaultapi_activate(va, snap);
	vaultapi_audit(va, create ? "create" : "patch");
	vaultapi_answer(
	    va, req, status, create ? "Created" : "OK", vault_store_state(va->vs, va->vault));
}

static void
vaultapi_sub(struct vaultapi *va, struct evhttp_request *req, const char *rest)
{
	json_t *st, *list, *v, *o;
	const char *kind = NULL;
	size_t i;

	if (strncmp(rest, "credentials", 11) == 0 && (rest[11] == '\0' || rest[11] == '/'))
		kind = "credentials";
	else if (strncmp(rest, "bindings", 8) == 0 && (rest[8] == '\0' || rest[8] == '/'))
		kind = "bindings";
	if (kind == NULL) {
		http_error(req, 404, "Not Found", "not found");
		return;
	}
	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
		http_allow(req, "GET");
		return;
	}
	if (!vault_store_exists(va->vs)) {
		http_error(req, 404, "Not Found", "credential vault not found");
		return;
	}
	st = vault_store_state(va->vs, va->vault);
	list = json_object_get(st, kind);
	rest += strlen(kind);
	if (*rest == '\0') {
		o = json_object();
		json_object_set(o, "revision", json_object_get(st, "revision"));
		json_object_set(o, kind, list);
		http_json(req, 200, "OK", o);
		json_decref(o);
		json_decref(st);
		return;
	}
	{
		char *name = evhttp_uridecode(rest + 1, 0, NULL);
		char t[BINDING_MAX_NAME * 2];
		vault_store_trim(name ? name : "", t, sizeof(t));
		free(name);
		json_array_foreach(list, i, v)
		{
			if (strcmp(vault_store_name(v), t) == 0) {
				http_json(req, 200, "OK", v);
				json_decref(st);
				return;
			}
		}
	}
	http_error(req, 404, "Not Found",
	    strcmp(kind, "credentials") == 0 ? "credential not found" : "binding not found");
	json_decref(st);
}

/* Route /credential-vault and its subresources (auth already passed). */
void
vaultapi_handle(struct vaultapi *va, struct evhttp_request *req, const char *path, bool auth_on,
    bool proxy_ready)
{
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	struct vault_store *vs = vaultapi_store(va);
	bool write = cmd == EVHTTP_REQ_POST || cmd == EVHTTP_REQ_PATCH || cmd == EVHTTP_REQ_DELETE;

	if (vs == NULL) {
		http_error(req, 500, "Internal Server Error", "out of memory");
		return;
	}
	if (strncmp(path, "/credential-vault/", 18) == 0) {
		vaultapi_sub(va, req, path + 18);
		return;
	}
	if (!write && cmd != EVHTTP_REQ_GET) {
		http_allow(req, "GET, POST, PATCH, DELETE");
		return;
	}
	if (write) {
		/* OpenSandbox preconditions, in their order (412). */
		const char *why = NULL;
		if (!auth_on)
			why = "credential vault requires egress API auth token";
		else if (!wstate_cfg(va->ws)->intercept)
			why = "credential vault requires transparent mitmproxy";
		else if (wstate_cfg(va->ws)->mode == CONFIG_MODE_DNS)
			/* DNS-only filtering lets the workload dial around the vault. */
			why = "credential vault requires dns+nft egress enforcement";
		else if (wstate_cfg(va->ws)->ssl_insecure)
			why = "credential vault rejects insecure upstream TLS mode";
		else if (!proxy_ready)
			why = "credential proxy is not ready";
		if (why != NULL) {
			http_error(req, 412, "Precondition Failed", why);
			return;
		}
	}
	switch (cmd) {
	case EVHTTP_REQ_GET:
		if (!vault_store_exists(vs))
			http_error(req, 404, "Not Found", "credential vault not found");
		else {
			json_t *j = vault_store_state(vs, va->vault);
			http_json(req, 200, "OK", j);
			json_decref(j);
		}
		return;
	case EVHTTP_REQ_POST:
		vaultapi_mutate(va, req, true);
		return;
	case EVHTTP_REQ_PATCH:
		vaultapi_mutate(va, req, false);
		return;
	default: /* DELETE */
		if (!vault_store_exists(vs)) {
			http_error(req, 404, "Not Found", "credential vault not found");
			return;
		}
		vault_store_clear(vs);
		vault_snap_unref(va->vault);
		va->vault = NULL;
		vaultapi_audit(va, "delete");
		vaultapi_answer(va, req, 204, "No Content", NULL);
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
vaultapi_rotate_files(struct vaultapi *va)
{
	struct vault_store_ctx cx = vaultapi_ctx(va);
	struct vault_snap *snap;
	bool changed = false;
	char err[512];

	if (va->vs == NULL)
		return;
	snap = vault_store_rotate(va->vs, va->vault, &cx, &changed, err, sizeof(err));
	if (!changed)
		return;
	if (snap == NULL) {
		log_msg(LOG_ERROR, "vault", "vault_error",
		    "a credential file changed but could not be loaded; the previous values stay: "
		    "%s",
		    err);
		return;
	}
	vaultapi_activate(va, snap);
	vaultapi_audit(va, "file_rotated");
	wstate_publish_vault(va->ws, va->vault, vaultapi_logged_cb, NULL);
}

/* Would the current vault stay valid under the effective policy `p`? */
int
vaultapi_check_policy(const struct vaultapi *va, const struct policy *p, char *err, size_t errlen)
{
	const struct binding_set *bs = va->vault ? vault_snap_bindings(va->vault) : NULL;
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
