/*
 * The Credential Vault's OpenSandbox-compatible API (control process).
 */
#ifndef EGRESSD_VAULTAPI_H
#define EGRESSD_VAULTAPI_H

#include <stdbool.h>
#include <stddef.h>

struct wstate;
struct policy;
struct evhttp_request;

/* Serve /credential-vault[/...]; auth was checked by the caller. */
void vaultapi_handle(struct wstate *ws, struct evhttp_request *req, const char *path, bool auth_on,
    bool proxy_ready);

/* 0 if the active vault stays valid under the effective policy p, else -1 with err. */
int vaultapi_check_policy(struct wstate *ws, const struct policy *p, char *err, size_t errlen);

/* The policy changed: load bindings of a policy file while the API owns no vault. */
void vaultapi_policy_changed(struct wstate *ws);

/* Re-read file sources that changed (called from the watch timer). */
void vaultapi_rotate_files(struct wstate *ws);

/* Drop the vault and every secret it holds. */
void vaultapi_free(struct wstate *ws);

#endif
