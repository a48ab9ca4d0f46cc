/*
 * Control API server (worker): OpenSandbox-compatible /policy,
 * /credential-vault, /healthz, plus /metrics.
 */
#ifndef EGRESSD_API_H
#define EGRESSD_API_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

struct wstate;
struct api;

/* Listen on cfg->http_addr. NULL with err on failure. */
struct api *api_new(struct wstate *ws, char *err, size_t errlen);
void api_free(struct api *a);

struct evhttp_request;

/* Shared by the API handlers (api.c, vaultapi.c). */
/* Plain-text error body "msg\n", OpenSandbox style. */
void api_error(struct evhttp_request *req, int code, const char *reason, const char *msg);
/* JSON body (compact, key order kept) plus a newline. */
void api_json(struct evhttp_request *req, int code, const char *reason, json_t *j);
/* 405 with an Allow header. */
void api_allow(struct evhttp_request *req, const char *allow);
/* Token check (constant time, rate-limited); answers 401/429 itself when false. */
bool api_auth(struct api *a, struct evhttp_request *req);
/* A NUL-terminated copy of the (size-capped) body; NULL on no memory. */
char *api_body(struct evhttp_request *req, size_t *len);

/*
 * A request answered later (a vault mutation waits for the intercept): it
 * keeps its audit record, and its answer is dropped if the client went
 * away. Begin while handling it; end with exactly one of the answers (a
 * NULL json sends an empty body). NULL when out of memory.
 */
struct api_later;
struct api_later *api_later_begin(struct api *a, struct evhttp_request *req);
void api_later_json(struct api_later *l, int code, const char *reason, json_t *j);
void api_later_error(struct api_later *l, int code, const char *reason, const char *msg);

#endif
