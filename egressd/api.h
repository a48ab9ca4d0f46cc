/*
 * Control API server (worker): OpenSandbox-compatible /policy,
 * /credential-vault, /healthz, plus /metrics.
 */
#ifndef EGRESSD_API_H
#define EGRESSD_API_H

#include <stddef.h>

struct wstate;
struct api;

/* Listen on cfg->http_addr. NULL with err on failure. */
struct api *api_new(struct wstate *ws, char *err, size_t errlen);
void api_free(struct api *a);

#endif
