/*
 * An immutable Credential Vault revision: the bindings, the secret of each
 * credential and the redaction set built from them. The worker swaps the
 * active snapshot atomically; a connection takes a reference per request,
 * so requests in flight keep the revision they started with. The last
 * reference wipes the secrets.
 */
#ifndef EGRESSD_VAULT_SNAP_H
#define EGRESSD_VAULT_SNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct binding_set;
struct secret;
struct redact_set;
struct evbuffer;
struct vault_snap;

/*
 * Build a snapshot. `bs` is referenced; `secrets[i]` is the value of
 * credential i of bs (referenced; all must be present). NULL with err.
 */
struct vault_snap *vault_snap_new(struct binding_set *bs, struct secret *const *secrets,
    size_t nsecrets, uint64_t revision, char *err, size_t errlen)
    __attribute__((warn_unused_result));

struct vault_snap *vault_snap_ref(struct vault_snap *s);
void vault_snap_unref(struct vault_snap *s);

uint64_t vault_snap_revision(const struct vault_snap *s);

/* The bindings (borrowed for the life of the snapshot). */
const struct binding_set *vault_snap_bindings(const struct vault_snap *s);

/* The value of credential i (borrowed), or NULL past the end. */
const struct secret *vault_snap_secret(const struct vault_snap *s, size_t i);

/* True if some binding could apply to this canonical host. */
bool vault_snap_host_bound(const struct vault_snap *s, const char *host);

/* The redaction set of every secret and its encodings (borrowed; NULL if none). */
struct redact_set *vault_snap_redact(const struct vault_snap *s);

/* Append binding idx's header lines ("Name: prefix+value\r\n") to out. */
int vault_snap_inject(const struct vault_snap *s, size_t idx, struct evbuffer *out)
    __attribute__((warn_unused_result));

/* True if binding idx injects a header of this name (compared without case). */
bool vault_snap_injects_header(
    const struct vault_snap *s, size_t idx, const char *name, size_t len);

#endif
