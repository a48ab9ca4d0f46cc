/*
 * The control API's answers (control process): plain-text errors in the
 * OpenSandbox style, JSON bodies, 405 with Allow, and request bodies. Used
 * by the API (egressd/control/api.c) and the vault's routes
 * (egressd/control/vaultapi.c), which need nothing else of each other's.
 */
#ifndef EGRESSD_HTTPREPLY_H
#define EGRESSD_HTTPREPLY_H

#include <stddef.h>

#include <jansson.h>

struct evhttp_request;

/* A body of ctype with the API's headers (nosniff, no-store). */
void http_reply(struct evhttp_request *req, int code, const char *reason, const char *ctype,
    const char *body, size_t len);

/* Plain-text error: the message and a newline. */
void http_error(struct evhttp_request *req, int code, const char *reason, const char *msg);

/* A JSON body and a newline. */
void http_json(struct evhttp_request *req, int code, const char *reason, json_t *j);

/* 405 with the methods allowed. */
void http_allow(struct evhttp_request *req, const char *allow);

/* The request body (already capped by evhttp), NUL-terminated; NULL on no memory. */
char *http_body(struct evhttp_request *req, size_t *len);

#endif
