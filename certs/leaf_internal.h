/*
 * leaf_internal: test-only access to leaf minting and the cache clock.
 */
#ifndef EGRESSD_CERTS_LEAF_INTERNAL_H
#define EGRESSD_CERTS_LEAF_INTERNAL_H

#include <time.h>

#include "certs/leaf.h"

/* Mint a leaf for host without the cache and without the name-constraint
 * pre-check (tests use it to prove the verifier enforces the constraints).
 * host must still be a valid canonical name. Owned: X509_free(). */
X509 *leaf_mint(
    struct leaf_cache *lc, const char *host, size_t len, time_t now, time_t *not_after) LEAF_WUR;

/* Replace the cache's clock (default: time()). */
void leaf_cache_set_clock(struct leaf_cache *lc, time_t (*now_fn)(void));

#endif
