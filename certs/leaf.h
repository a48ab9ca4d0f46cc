/*
 * leaf: per-host leaf certificates signed by the sandbox CA, and their LRU
 * cache. One P-256 key per process; one X509 per canonical host name.
 */
#ifndef EGRESSD_CERTS_LEAF_H
#define EGRESSD_CERTS_LEAF_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "certs/ca.h"

#define LEAF_WUR __attribute__((warn_unused_result))

/* Limits and defaults (configuration may lower the maxima, never raise). */
#define LEAF_DEFAULT_CAPACITY 1024
#define LEAF_MAX_CAPACITY 65536
#define LEAF_DEFAULT_LIFETIME_SECS (24 * 3600)
#define LEAF_MIN_LIFETIME_SECS 3600
#define LEAF_MAX_LIFETIME_SECS (7 * 24 * 3600)
#define LEAF_BACKDATE_SECS 300     /* tolerate client clock skew */
#define LEAF_RENEW_MARGIN_SECS 600 /* re-mint a cached leaf this close to expiry */
#define LEAF_CN_MAX 64             /* X.520 ub-common-name */

struct leaf_cache;

/* Settings for leaf_cache_new(); a zeroed struct means the defaults. */
struct leaf_config {
	size_t capacity;            /* 0: LEAF_DEFAULT_CAPACITY */
	unsigned int lifetime_secs; /* 0: LEAF_DEFAULT_LIFETIME_SECS */
};

/* Counters for metrics. */
struct leaf_stats {
	uint64_t hits;
	uint64_t mints;
	uint64_t evictions;
	uint64_t refused; /* invalid or non-permitted host names */
	size_t entries;
};

/* New cache with a fresh process-wide P-256 leaf key. ca is borrowed and
 * must outlive the cache. Owned: free with leaf_cache_free(). */
struct leaf_cache *leaf_cache_new(
    const struct ca *ca, const struct leaf_config *cfg, char *err, size_t errlen) LEAF_WUR;

/*
 * The leaf certificate for a canonical host name (lowercase LDH, no trailing
 * dot, no NUL, at most CA_MAX_NAME_LEN bytes; anything else is refused, as
 * is a host outside the CA's name constraints). Mints on a miss.
 * Returns a new reference (X509_free it); *keyp, if keyp is not NULL, gets
 * the leaf private key, borrowed until leaf_cache_free(). Not thread-safe:
 * one cache per event loop.
 */
X509 *leaf_cache_get(struct leaf_cache *lc, const char *host, size_t len, EVP_PKEY **keyp,
    char *err, size_t errlen) LEAF_WUR;

/* Mint leaves ahead of time for the given canonical hosts (e.g. every bound
 * host at start), so the first connection does not pay for a mint. Names
 * starting with "*." are skipped. Returns the number of hosts cached, or -1
 * at the first refused name. */
int leaf_cache_prewarm(
    struct leaf_cache *lc, const char *const *hosts, size_t n, char *err, size_t errlen) LEAF_WUR;

/*
 * The cached leaf for a canonical host if it is not near expiry, with a
 * new reference (and *keyp as leaf_cache_get() gives it); NULL on a miss.
 * Never mints: a worker without the CA key asks the parent on a miss.
 */
X509 *leaf_cache_find(
    struct leaf_cache *lc, const char *host, size_t len, EVP_PKEY **keyp) LEAF_WUR;

/*
 * Cache x for host (takes a new reference). Refused (-1) unless x names
 * host, carries this cache's public key and is issued by its CA: a leaf
 * the parent minted for this process.
 */
int leaf_cache_put(struct leaf_cache *lc, const char *host, size_t len, X509 *x) LEAF_WUR;

/* This cache's public key as DER SubjectPublicKeyInfo into buf; its length or -1. */
int leaf_cache_pubkey_der(const struct leaf_cache *lc, uint8_t *buf, size_t cap) LEAF_WUR;

/*
 * The parent's side: a leaf for host with the P-256 public key spki (DER
 * SubjectPublicKeyInfo) of a worker's cache, signed by this cache's CA;
 * not cached. Owned (X509_free), or NULL with err.
 */
X509 *leaf_cache_mint_for(struct leaf_cache *lc, const char *host, size_t len, const uint8_t *spki,
    size_t spki_len, char *err, size_t errlen) LEAF_WUR;

/*
 * Issue from ca from now on (a renewed sandbox CA; borrowed, must outlive
 * the cache): every cached leaf, issued by the previous CA, is dropped,
 * so that each host's next leaf is minted (or asked for) anew. The leaf
 * key stays. -1 with err (out of memory): nothing changed.
 */
int leaf_cache_set_ca(
    struct leaf_cache *lc, const struct ca *ca, char *err, size_t errlen) LEAF_WUR;

/* The process-wide leaf private key, borrowed until leaf_cache_free(). */
EVP_PKEY *leaf_cache_key(const struct leaf_cache *lc);

/* Copy the counters into *st. */
void leaf_cache_stats(const struct leaf_cache *lc, struct leaf_stats *st);

/* Free the cache, its certificates and the leaf key. Accepts NULL. */
void leaf_cache_free(struct leaf_cache *lc);

#endif
