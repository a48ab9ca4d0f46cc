/*
 * Credentials and credential bindings: which request gets which secret
 * injected. Loaded from the OpenSandbox credential-vault JSON and from
 * the YAML policy file; validated against a policy; matched per request.
 */
#ifndef POLICY_BINDING_H
#define POLICY_BINDING_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/policy.h"

#define BINDING_MAX_CREDENTIALS 256 /* credentials of one set */
#define BINDING_MAX_BINDINGS 256    /* bindings of one set */
#define BINDING_MAX_LIST 64         /* hosts, paths, methods or headers of one binding */
#define BINDING_MAX_NAME 128        /* bytes of a credential, binding or header name */
#define BINDING_MAX_VALUE 16384     /* bytes of an inline secret */
#define BINDING_MAX_PATH 1024       /* bytes of a path pattern or file path */
#define BINDING_MAX_JSON_BYTES (1u << 20)

struct binding_set;

enum binding_source {
	BINDING_SOURCE_INLINE = 0, /* value given in the API request (never in a file) */
	BINDING_SOURCE_FILE,       /* ref is an absolute file path */
	BINDING_SOURCE_ENV,        /* ref is an environment variable name */
};

enum binding_auth {
	BINDING_AUTH_BEARER = 0,  /* Authorization: Bearer <v> */
	BINDING_AUTH_BASIC,       /* Authorization: Basic <v> */
	BINDING_AUTH_APIKEY,      /* <name>: <v> */
	BINDING_AUTH_CUSTOM,      /* each header: <name>: <v> */
	BINDING_AUTH_PASSTHROUGH, /* no header: only the binding's substitutions */
};

/* Where a substitution replaces its placeholder (bits of binding_substitution.in). */
#define BINDING_IN_PATH 0x1
#define BINDING_IN_QUERY 0x2
#define BINDING_IN_HEADER 0x4
#define BINDING_IN_BODY 0x8

#define BINDING_PLACEHOLDER_MIN 8   /* bytes: shorter ones match by chance */
#define BINDING_PLACEHOLDER_MAX 256 /* bytes */

enum binding_match_result {
	BINDING_MATCH_NONE = 0,  /* forward untouched */
	BINDING_MATCH_ONE,       /* inject binding *index */
	BINDING_MATCH_AMBIGUOUS, /* more than one: refuse (403) */
};

#define BINDING_SCHEME_HTTP 0x1
#define BINDING_SCHEME_HTTPS 0x2

/* A credential as the vault sees it (no value). */
struct binding_credential_info {
	const char *name;
	enum binding_source source;
	const char *ref; /* path or env name; NULL for inline */
};

/* One header a binding injects. */
struct binding_header {
	const char *name;   /* canonical, e.g. "Authorization", "Private-Token" */
	const char *prefix; /* "Bearer ", "Basic " or "" */
	size_t credential;  /* index into the set's credentials */
};

/* One substitution of a binding: the placeholder the workload holds. */
struct binding_substitution {
	const uint8_t *placeholder; /* printable ASCII, no space (borrowed) */
	size_t len;
	size_t credential; /* index into the set's credentials */
	unsigned in;       /* BINDING_IN_* bits */
};

/* Called with a secret value; the bytes are valid only during the call. */
typedef int (*binding_reveal_cb)(const uint8_t *value, size_t len, void *arg);

/*
 * Parse an OpenSandbox credential-vault CreateRequest
 * {"credentials":[...],"bindings":[...]} (inline, file or env sources).
 * Owned set or NULL with err filled; the message never holds a value.
 */
struct binding_set *binding_set_from_json(const char *buf, size_t len, struct policy_err *err)
    __attribute__((warn_unused_result));

/* Take a reference (accepts NULL). */
struct binding_set *binding_set_ref(struct binding_set *bs);

/* Drop a reference; the last one wipes inline values and frees (accepts NULL). */
void binding_set_free(struct binding_set *bs);

/*
 * Check the set against a policy: every binding host must be allowed by
 * an explicit allow rule (not the default) on the binding's scheme
 * ports, and bindings need at least one rule. 0, or -1 with err.
 */
int binding_set_validate(const struct binding_set *bs, const struct policy *p,
    struct policy_err *err) __attribute__((warn_unused_result));

/*
 * The binding for a request: scheme "http"/"https", canonical host, the
 * original destination port (a binding matches only its scheme's default
 * port, 443 or 80), method (case-sensitive), raw path (query ignored). An
 * exact host beats a wildcard host; two at the best level are ambiguous.
 */
enum binding_match_result binding_match(const struct binding_set *bs, const char *scheme,
    const char *host, uint16_t port, const char *method, const char *path, size_t *index);

/* True if some binding names this host (exact, or by wildcard). */
bool binding_host_has_binding(const struct binding_set *bs, const char *host);

size_t binding_set_count(const struct binding_set *bs);
size_t binding_credential_count(const struct binding_set *bs);

/* Name of binding i (borrowed). */
const char *binding_name(const struct binding_set *bs, size_t i);

/* Auth type of binding i. */
enum binding_auth binding_auth_type(const struct binding_set *bs, size_t i);

/* True if binding i opted in to wildcard hosts or all paths (allowBroad: true). */
bool binding_allow_broad(const struct binding_set *bs, size_t i);

/* Schemes of binding i (BINDING_SCHEME_* bits). */
unsigned binding_schemes(const struct binding_set *bs, size_t i);

/* Number of headers binding i injects. */
size_t binding_header_count(const struct binding_set *bs, size_t i);

/* Header j of binding i; 0 or -1. */
int binding_header_get(
    const struct binding_set *bs, size_t i, size_t j, struct binding_header *out);

/* Number of substitutions of binding i. */
size_t binding_subst_count(const struct binding_set *bs, size_t i);

/* Substitution j of binding i; 0 or -1. */
int binding_subst_get(
    const struct binding_set *bs, size_t i, size_t j, struct binding_substitution *out);

/*
 * True if a header of this name routes, frames or describes the hop (Host,
 * Content-Length, Transfer-Encoding, Connection, Proxy-*...): never injected,
 * never substituted.
 */
bool binding_header_reserved(const char *name, size_t len);

/* Credential i (no value); 0 or -1. */
int binding_credential_get(
    const struct binding_set *bs, size_t i, struct binding_credential_info *out);

/* Call cb with the inline value of credential i; -1 if not inline. */
int binding_credential_reveal(
    const struct binding_set *bs, size_t i, binding_reveal_cb cb, void *arg);

/* Sanitized view (names, match, auth type, apiKey name; never values or refs). */
json_t *binding_set_to_json(const struct binding_set *bs);

/*
 * The set in the API's CreateRequest shape, every credential an inline
 * source whose value is the placeholder "-": what vault/vwire.c carries
 * to the intercept, beside the values, so that the receiver parses it
 * with the API's own parser (binding_set_from_json). Owned; NULL on ENOMEM.
 */
json_t *binding_set_to_wire(const struct binding_set *bs);

#endif
