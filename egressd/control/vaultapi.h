/*
 * The Credential Vault's OpenSandbox-compatible API (control process):
 * the routes of /credential-vault, the vault control holds (its store and
 * active snapshot), and its hand-over to the intercept.
 */
#ifndef EGRESSD_VAULTAPI_H
#define EGRESSD_VAULTAPI_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

struct wstate;
struct policy;
struct vault_snap;
struct evhttp_request;
struct vaultapi;

/*
 * How a mutation's answer waits for the intercept (the API's deferred
 * answers, with their audit record). begin returns a handle, NULL when
 * out of memory; one of json (NULL json: no body) or error ends it.
 */
struct vaultapi_later_ops {
	void *(*begin)(void *ctx, struct evhttp_request *req);
	void (*json)(void *later, int code, const char *reason, json_t *j);
	void (*error)(void *later, int code, const char *reason, const char *msg);
	void *ctx;
};

/* ops may be NULL when every answer is immediate (no channel: tests). */
struct vaultapi *vaultapi_new(struct wstate *ws, const struct vaultapi_later_ops *ops);

/* Drop the vault and every secret it holds. */
void vaultapi_free(struct vaultapi *va);

/* Serve /credential-vault[/...]; auth was checked by the caller. */
void vaultapi_handle(struct vaultapi *va, struct evhttp_request *req, const char *path,
    bool auth_on, bool proxy_ready);

/* The active snapshot (borrowed), or NULL. */
const struct vault_snap *vaultapi_active(const struct vaultapi *va);

/* 0 if the active vault stays valid under the effective policy p, else -1 with err. */
int vaultapi_check_policy(
    const struct vaultapi *va, const struct policy *p, char *err, size_t errlen);

/* The policy changed: load bindings of a policy file while the API owns no vault. */
void vaultapi_policy_changed(struct vaultapi *va);

/* Re-read file sources that changed (called from the watch timer). */
void vaultapi_rotate_files(struct vaultapi *va);

#endif
