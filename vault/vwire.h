/*
 * The active vault on the channel from control to the intercept: one JSON
 * object
 *
 *   {"v":1,"revision":N,"vault":{CreateRequest with placeholder values},
 *    "values":["<hex of credential 0's value>", ...]}
 *
 * The bindings go through the API's parser on the way in, and every value
 * through the same header-value rule as a source (secret_value_ok), so
 * the intercept takes nothing control could not have been given through
 * the API. The document holds secrets: every buffer of it is wiped
 * before it is freed, and no error quotes it.
 */
#ifndef EGRESSD_VAULT_VWIRE_H
#define EGRESSD_VAULT_VWIRE_H

#include <stddef.h>

struct vault_snap;

/* The document of snap (NULL: an empty document, *len 0). NULL with *len 0 on ENOMEM. */
char *vault_wire_encode(const struct vault_snap *snap, size_t *len, int *err);

/* Wipe and free a document. */
void vault_wire_free(char *doc, size_t len);

/* The snapshot of a document (an empty one: NULL, and 0); -1 with err when it does not decode. */
int vault_wire_decode(
    const char *doc, size_t len, struct vault_snap **snap, char *err, size_t errlen);

/* Make jansson wipe memory before freeing it (documents and inline values pass through it). */
void vault_json_wipe_init(void);

#endif
