/*
 * The Credential Vault store: the credentials and bindings written through
 * the control API, their revisions, and the secret sources they name (env
 * values read once, files watched for rotation). Each mutation returns the
 * snapshot to make active; the caller swaps it in. No HTTP: the statuses
 * are the OpenSandbox API's (201, 200, 400, 404, 409) so that the glue
 * (egressd/control/vaultapi.c) only answers them.
 */
#ifndef EGRESSD_VAULT_STORE_H
#define EGRESSD_VAULT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct binding_set;
struct policy;
struct vault_snap;
struct vault_store;

/* What a candidate is checked against. */
struct vault_store_ctx {
	const struct policy *policy; /* the effective policy: bindings must be covered */
	const char *token;           /* the control API's token: never a credential */
};

struct vault_store *vault_store_new(void) __attribute__((warn_unused_result));
void vault_store_free(struct vault_store *vs);

bool vault_store_exists(const struct vault_store *vs);
uint64_t vault_store_revision(const struct vault_store *vs);

/* DELETE: no credentials and no bindings any more. */
void vault_store_clear(struct vault_store *vs);

/*
 * POST body (an object). 201 with *snap (revision 1) to make active, or
 * 400/409 with err and nothing changed. Errors never quote a value.
 */
int vault_store_create(struct vault_store *vs, json_t *body, const struct vault_store_ctx *cx,
    struct vault_snap **snap, char *err, size_t errlen) __attribute__((warn_unused_result));

/* PATCH body (an object). 200 with *snap, or 400/404/409 with err and nothing changed. */
int vault_store_patch(struct vault_store *vs, json_t *body, const struct vault_store_ctx *cx,
    struct vault_snap **snap, char *err, size_t errlen) __attribute__((warn_unused_result));

/* The GET state (never a value) given the active snapshot. Owned. */
json_t *vault_store_state(const struct vault_store *vs, const struct vault_snap *active);

/*
 * If a file the active snapshot read has changed (a Kubernetes Secret
 * rotation), *changed is set and the snapshot rebuilt with the same
 * bindings and revision is returned; NULL with err when it cannot be
 * loaded (the previous one stays), NULL without *changed when nothing did.
 */
struct vault_snap *vault_store_rotate(struct vault_store *vs, const struct vault_snap *active,
    const struct vault_store_ctx *cx, bool *changed, char *err, size_t errlen);

/* The snapshot of a policy file's bindings (file and env sources), or NULL with err. */
struct vault_snap *vault_store_from_bindings(struct vault_store *vs, struct binding_set *bs,
    const struct vault_store_ctx *cx, char *err, size_t errlen);

/* A credential or binding object's name ("" if none), and a trimmed copy for comparisons. */
const char *vault_store_name(json_t *o);
void vault_store_trim(const char *in, char *out, size_t cap);

#endif
