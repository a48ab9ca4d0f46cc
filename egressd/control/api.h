/*
 * Control API server (control process): OpenSandbox-compatible /policy,
 * /credential-vault, /healthz, plus /metrics. It owns the vault's routes
 * (egressd/control/vaultapi.c) and is control's service in its wstate.
 */
#ifndef EGRESSD_API_H
#define EGRESSD_API_H

#include <stddef.h>

struct wstate;
struct api;

/* Listen on cfg->http_addr. NULL with err on failure. */
struct api *api_new(struct wstate *ws, char *err, size_t errlen);
void api_free(struct api *a);

/* A policy is in force (the vault follows a policy file's bindings). */
void api_policy_changed(struct api *a);

/* The watch timer: re-read rotated credential files. */
void api_tick(struct api *a);

#endif
