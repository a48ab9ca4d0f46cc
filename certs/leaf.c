/*
 * leaf: mints per-host leaf certificates from the sandbox CA and caches them.
 *
 * Run by the worker when it terminates TLS (a host with bindings, or every
 * allowed host with terminateAll). One
 * P-256 key serves every leaf (keygen and key encoding stay off the request
 * path); certificates are cached as X509 objects, never as DER, in an LRU
 * keyed by the canonical host name. It must never mint for a name that is not
 * canonical LDH or that the CA's name constraints exclude, nor give a leaf a
 * validity outside the CA's.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "certs/ca_internal.h"
#include "certs/leaf.h"
#include "certs/leaf_internal.h"

struct leaf_entry {
	struct leaf_entry *hnext; /* hash chain */
	struct leaf_entry *prev;  /* LRU list, towards the most recent */
	struct leaf_entry *next;  /* LRU list, towards the least recent */
	X509 *cert;
	time_t not_after;
	uint64_t hash;
	size_t len;
	char host[]; /* canonical, NUL-terminated */
};

struct leaf_cache {
	const struct ca *ca; /* borrowed */
	EVP_PKEY *key;       /* the one leaf key of this process */
	EVP_PKEY *pub;       /* its public half, for X509_set_pubkey() */
	X509_NAME *issuer;
	X509_EXTENSION *ext_bc;
	X509_EXTENSION *ext_ku;
	X509_EXTENSION *ext_eku;
	X509_EXTENSION *ext_aki;
	struct leaf_entry **buckets;
	size_t mask;             /* bucket count - 1 (a power of two) */
	struct leaf_entry *head; /* most recently used */
	struct leaf_entry *tail; /* least recently used */
	size_t count;
	size_t capacity;
	unsigned int lifetime;
	uint64_t seed;
	time_t (*now)(void);
	struct leaf_stats stats;
};

static time_t
default_now(void)
{
	return time(NULL);
}

/* Keyed FNV-1a with a final avalanche; the seed is random per process. */
static uint64_t
host_hash(const struct leaf_cache *lc, const char *s, size_t len)
{
	uint64_t h = lc->seed;
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ULL;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

static X509_EXTENSION *
ext_conf(int nid, const char *value)
{
	return X509V3_EXT_conf_nid(NULL, NULL, nid, value);
}

static X509_EXTENSION *
ext_aki(const struct ca *ca)
{
	AUTHORITY_KEYID *akid;
	X509_EXTENSION *ext = NULL;

	if ((akid = AUTHORITY_KEYID_new()) == NULL)
		return NULL;
	if ((akid->keyid = ASN1_OCTET_STRING_dup(ca_key_id(ca))) != NULL)
		ext = X509V3_EXT_i2d(NID_authority_key_identifier, 0, akid);
	AUTHORITY_KEYID_free(akid);
	return ext;
}

/*
 * The public half of key as a public-only EVP_PKEY that X509_set_pubkey()
 * encodes directly. With a provider key, OpenSSL 3.0 builds an encoder and a
 * decoder context on every call (about 0.2-0.45 ms, most of a mint); the key
 * d2i_PublicKey() returns takes the fast path (about 10 us). Same public key,
 * so SSL_use_PrivateKey() with the provider key still matches.
 */
static EVP_PKEY *
public_half(EVP_PKEY *key)
{
	unsigned char *enc = NULL;
	const unsigned char *p;
	EVP_PKEY_CTX *pctx;
	EVP_PKEY *params = NULL, *pub = NULL;
	size_t len;

	if ((len = EVP_PKEY_get1_encoded_public_key(key, &enc)) == 0)
		return NULL;
	if ((pctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL)) != NULL &&
	    EVP_PKEY_paramgen_init(pctx) == 1 && EVP_PKEY_CTX_set_group_name(pctx, "P-256") == 1 &&
	    EVP_PKEY_paramgen(pctx, &params) == 1) {
		p = enc;
		/* Turns params into the public key on success. */
		pub = d2i_PublicKey(EVP_PKEY_EC, &params, &p, (long)len);
		if (pub == NULL)
			EVP_PKEY_free(params);
	}
	EVP_PKEY_CTX_free(pctx);
	OPENSSL_free(enc);
	if (pub != NULL && EVP_PKEY_eq(pub, key) != 1) {
		EVP_PKEY_free(pub);
		pub = NULL;
	}
	ERR_clear_error();
	return pub;
}

/* The fast public half, or the key itself (slower mints, same certs). */
static EVP_PKEY *
leaf_pub(EVP_PKEY *key)
{
	EVP_PKEY *pub;

	if ((pub = public_half(key)) != NULL)
		return pub;
	return EVP_PKEY_up_ref(key) == 1 ? key : NULL;
}

/* New cache with a fresh leaf key. */
struct leaf_cache *
leaf_cache_new(const struct ca *ca, const struct leaf_config *cfg, char *err, size_t errlen)
{
	static const struct leaf_config defaults;
	struct leaf_cache *lc;
	size_t cap, nb;

	if (cfg == NULL)
		cfg = &defaults;
	if (ca == NULL) {
		ca_errf(err, errlen, "leaf cache needs a CA");
		return NULL;
	}
	cap = cfg->capacity ? cfg->capacity : LEAF_DEFAULT_CAPACITY;
	if (cap > LEAF_MAX_CAPACITY) {
		ca_errf(err, errlen, "leaf cache capacity must be at most %d", LEAF_MAX_CAPACITY);
		return NULL;
	}
	if ((lc = calloc(1, sizeof(*lc))) == NULL) {
		ca_errf(err, errlen, "out of memory");
		return NULL;
	}
	lc->ca = ca;
	lc->capacity = cap;
	lc->lifetime = cfg->lifetime_secs ? cfg->lifetime_secs : LEAF_DEFAULT_LIFETIME_SECS;
	lc->now = default_now;
	if (lc->lifetime < LEAF_MIN_LIFETIME_SECS || lc->lifetime > LEAF_MAX_LIFETIME_SECS) {
		ca_errf(err, errlen, "leaf lifetime must be between %d and %d seconds",
		    LEAF_MIN_LIFETIME_SECS, LEAF_MAX_LIFETIME_SECS);
		free(lc);
		return NULL;
	}
	for (nb = 16; nb < cap; nb <<= 1)
		;
	lc->mask = nb - 1;
	if ((lc->buckets = calloc(nb, sizeof(*lc->buckets))) == NULL ||
	    RAND_bytes((unsigned char *)&lc->seed, sizeof(lc->seed)) != 1 ||
	    (lc->key = EVP_EC_gen("P-256")) == NULL || (lc->pub = leaf_pub(lc->key)) == NULL ||
	    (lc->issuer = X509_NAME_dup(X509_get_subject_name(ca_cert(ca)))) == NULL ||
	    (lc->ext_bc = ext_conf(NID_basic_constraints, "critical,CA:FALSE")) == NULL ||
	    (lc->ext_ku = ext_conf(NID_key_usage, "critical,digitalSignature")) == NULL ||
	    (lc->ext_eku = ext_conf(NID_ext_key_usage, "serverAuth")) == NULL ||
	    (lc->ext_aki = ext_aki(ca)) == NULL) {
		ca_errf(err, errlen, "cannot set up the leaf cache");
		leaf_cache_free(lc);
		return NULL;
	}
	return lc;
}

static int
add_san(X509 *x, const char *host, size_t len, int critical)
{
	GENERAL_NAMES *gens;
	GENERAL_NAME *gn = NULL;
	ASN1_IA5STRING *ia5;
	int ok = -1;

	if ((gens = sk_GENERAL_NAME_new_null()) == NULL)
		return -1;
	if ((ia5 = ASN1_IA5STRING_new()) == NULL)
		goto out;
	if (ASN1_STRING_set(ia5, host, (int)len) != 1 || (gn = GENERAL_NAME_new()) == NULL) {
		ASN1_IA5STRING_free(ia5);
		goto out;
	}
	GENERAL_NAME_set0_value(gn, GEN_DNS, ia5);
	if (sk_GENERAL_NAME_push(gens, gn) <= 0) {
		GENERAL_NAME_free(gn);
		goto out;
	}
	if (X509_add1_ext_i2d(x, NID_subject_alt_name, gens, critical, X509V3_ADD_DEFAULT) == 1)
		ok = 0;
out:
	GENERAL_NAMES_free(gens);
	return ok;
}

static X509 *leaf_mint_key(struct leaf_cache *lc, const char *host, size_t len, EVP_PKEY *pub,
    time_t now, time_t *not_after);

/* Mint a leaf for host; validity inside the CA's. */
X509 *
leaf_mint(struct leaf_cache *lc, const char *host, size_t len, time_t now, time_t *not_after)
{
	return leaf_mint_key(lc, host, len, lc->pub, now, not_after);
}

/* Mint a leaf for host carrying public key pub. */
static X509 *
leaf_mint_key(struct leaf_cache *lc, const char *host, size_t len, EVP_PKEY *pub, time_t now,
    time_t *not_after)
{
	time_t nb, na;
	X509 *x;
	bool with_cn;

	if (!ca_host_valid(host, len))
		return NULL;
	/* Never outlive the CA, never predate it. */
	nb = now - LEAF_BACKDATE_SECS;
	if (nb < ca_not_before(lc->ca))
		nb = ca_not_before(lc->ca);
	na = now + (time_t)lc->lifetime;
	if (na > ca_not_after(lc->ca))
		na = ca_not_after(lc->ca);
	if (na <= now || nb >= na)
		return NULL;
	/* CN is capped at 64 bytes by X.520; a longer name lives in the SAN
	 * only, which must then be critical (RFC 5280 4.2.1.6). */
	with_cn = len <= LEAF_CN_MAX;
	if ((x = X509_new()) == NULL)
		return NULL;
	if (X509_set_version(x, X509_VERSION_3) != 1 || ca_random_serial(x) != 0 ||
	    X509_set_issuer_name(x, lc->issuer) != 1 ||
	    (with_cn && X509_NAME_add_entry_by_NID(X509_get_subject_name(x), NID_commonName,
	                    MBSTRING_ASC, (const unsigned char *)host, (int)len, -1, 0) != 1) ||
	    ASN1_TIME_set(X509_getm_notBefore(x), nb) == NULL ||
	    ASN1_TIME_set(X509_getm_notAfter(x), na) == NULL || X509_set_pubkey(x, pub) != 1 ||
	    X509_add_ext(x, lc->ext_bc, -1) != 1 || X509_add_ext(x, lc->ext_ku, -1) != 1 ||
	    X509_add_ext(x, lc->ext_eku, -1) != 1 || add_san(x, host, len, !with_cn) != 0 ||
	    X509_add_ext(x, lc->ext_aki, -1) != 1 || ca_sign(lc->ca, x) != 0) {
		ERR_clear_error();
		X509_free(x);
		return NULL;
	}
	if (not_after != NULL)
		*not_after = na;
	return x;
}

static void
lru_unlink(struct leaf_cache *lc, struct leaf_entry *e)
{
	if (e->prev != NULL)
		e->prev->next = e->next;
	else
		lc->head = e->next;
	if (e->next != NULL)
		e->next->prev = e->prev;
	else
		lc->tail = e->prev;
	e->prev = e->next = NULL;
}

static void
lru_push_front(struct leaf_cache *lc, struct leaf_entry *e)
{
	e->prev = NULL;
	e->next = lc->head;
	if (lc->head != NULL)
		lc->head->prev = e;
	lc->head = e;
	if (lc->tail == NULL)
		lc->tail = e;
}

static void
entry_remove(struct leaf_cache *lc, struct leaf_entry *e)
{
	struct leaf_entry **pp;

	for (pp = &lc->buckets[e->hash & lc->mask]; *pp != NULL; pp = &(*pp)->hnext) {
		if (*pp == e) {
			*pp = e->hnext;
			break;
		}
	}
	lru_unlink(lc, e);
	X509_free(e->cert);
	free(e);
	lc->count--;
}

static struct leaf_entry *
entry_find(struct leaf_cache *lc, const char *host, size_t len, uint64_t h)
{
	struct leaf_entry *e;

	for (e = lc->buckets[h & lc->mask]; e != NULL; e = e->hnext)
		if (e->hash == h && e->len == len && memcmp(e->host, host, len) == 0)
			return e;
	return NULL;
}

/* The leaf for host: cached, or minted and cached. */
X509 *
leaf_cache_get(
    struct leaf_cache *lc, const char *host, size_t len, EVP_PKEY **keyp, char *err, size_t errlen)
{
	struct leaf_entry *e;
	time_t now, na = 0;
	uint64_t h;
	X509 *x;

	/* The name goes into a certificate and a cache key: canonical only. */
	if (!ca_host_valid(host, len)) {
		lc->stats.refused++;
		ca_errf(err, errlen, "not a canonical host name");
		return NULL;
	}
	/* A leaf the CA's constraints exclude would only fail at the client. */
	if (!ca_permits(lc->ca, host, len)) {
		lc->stats.refused++;
		ca_errf(err, errlen, "host outside the CA name constraints");
		return NULL;
	}
	now = lc->now();
	if (now >= ca_not_after(lc->ca)) {
		ca_errf(err, errlen, "the CA has expired");
		return NULL;
	}
	h = host_hash(lc, host, len);
	e = entry_find(lc, host, len, h);
	if (e != NULL && (e->not_after > now + LEAF_RENEW_MARGIN_SECS ||
	                     (e->not_after >= ca_not_after(lc->ca) && e->not_after > now))) {
		lc->stats.hits++;
		lru_unlink(lc, e);
		lru_push_front(lc, e);
		if (X509_up_ref(e->cert) != 1) {
			ca_errf(err, errlen, "X509_up_ref failed");
			return NULL;
		}
		if (keyp != NULL)
			*keyp = lc->key;
		return e->cert;
	}
	if ((x = leaf_mint(lc, host, len, now, &na)) == NULL) {
		ca_errf(err, errlen, "cannot mint a leaf certificate");
		return NULL;
	}
	lc->stats.mints++;
	if (e != NULL) {
		/* Near expiry: replace in place. */
		X509_free(e->cert);
		lru_unlink(lc, e);
	} else {
		if (lc->count >= lc->capacity && lc->tail != NULL) {
			entry_remove(lc, lc->tail);
			lc->stats.evictions++;
		}
		if ((e = calloc(1, sizeof(*e) + len + 1)) == NULL) {
			X509_free(x);
			ca_errf(err, errlen, "out of memory");
			return NULL;
		}
		memcpy(e->host, host, len);
		e->len = len;
		e->hash = h;
		e->hnext = lc->buckets[h & lc->mask];
		lc->buckets[h & lc->mask] = e;
		lc->count++;
	}
	e->cert = x;
	e->not_after = na;
	lru_push_front(lc, e);
	if (X509_up_ref(x) != 1) {
		ca_errf(err, errlen, "X509_up_ref failed");
		return NULL;
	}
	if (keyp != NULL)
		*keyp = lc->key;
	return x;
}

/* The cached leaf for host, fresh enough; never mints. */
X509 *
leaf_cache_find(struct leaf_cache *lc, const char *host, size_t len, EVP_PKEY **keyp)
{
	struct leaf_entry *e;
	time_t now = lc->now();

	if (!ca_host_valid(host, len))
		return NULL;
	e = entry_find(lc, host, len, host_hash(lc, host, len));
	if (e == NULL || !(e->not_after > now + LEAF_RENEW_MARGIN_SECS ||
	                     (e->not_after >= ca_not_after(lc->ca) && e->not_after > now)))
		return NULL;
	if (X509_up_ref(e->cert) != 1)
		return NULL;
	lc->stats.hits++;
	lru_unlink(lc, e);
	lru_push_front(lc, e);
	if (keyp != NULL)
		*keyp = lc->key;
	return e->cert;
}

/* Cache x (minted elsewhere for this cache's key) for host. */
int
leaf_cache_put(struct leaf_cache *lc, const char *host, size_t len, X509 *x)
{
	struct leaf_entry *e;
	const ASN1_TIME *na_asn;
	struct tm tm;
	uint64_t h;

	if (!ca_host_valid(host, len) || X509_check_host(x, host, len, 0, NULL) != 1 ||
	    EVP_PKEY_eq(X509_get0_pubkey(x), lc->key) != 1 ||
	    X509_check_issued(ca_cert(lc->ca), x) != X509_V_OK ||
	    (na_asn = X509_get0_notAfter(x)) == NULL || ASN1_TIME_to_tm(na_asn, &tm) != 1) {
		ERR_clear_error();
		return -1;
	}
	h = host_hash(lc, host, len);
	if ((e = entry_find(lc, host, len, h)) != NULL)
		entry_remove(lc, e);
	if (lc->count >= lc->capacity && lc->tail != NULL) {
		entry_remove(lc, lc->tail);
		lc->stats.evictions++;
	}
	if ((e = calloc(1, sizeof(*e) + len + 1)) == NULL || X509_up_ref(x) != 1) {
		free(e);
		return -1;
	}
	memcpy(e->host, host, len);
	e->len = len;
	e->hash = h;
	e->cert = x;
	e->not_after = timegm(&tm);
	e->hnext = lc->buckets[h & lc->mask];
	lc->buckets[h & lc->mask] = e;
	lc->count++;
	lru_push_front(lc, e);
	lc->stats.mints++;
	return 0;
}

/* Issue from a renewed CA: new issuer name and key identifier, no old leaf kept. */
int
leaf_cache_set_ca(struct leaf_cache *lc, const struct ca *ca, char *err, size_t errlen)
{
	X509_NAME *issuer;
	X509_EXTENSION *aki;

	if (ca == NULL) {
		ca_errf(err, errlen, "leaf cache needs a CA");
		return -1;
	}
	if ((issuer = X509_NAME_dup(X509_get_subject_name(ca_cert(ca)))) == NULL ||
	    (aki = ext_aki(ca)) == NULL) {
		X509_NAME_free(issuer);
		ca_errf(err, errlen, "cannot set up the leaf cache for the new CA");
		return -1;
	}
	/* A leaf of the old CA must not be served once the workload may trust only the new. */
	while (lc->tail != NULL)
		entry_remove(lc, lc->tail);
	X509_NAME_free(lc->issuer);
	X509_EXTENSION_free(lc->ext_aki);
	lc->issuer = issuer;
	lc->ext_aki = aki;
	lc->ca = ca;
	return 0;
}

/* This cache's public key as DER SubjectPublicKeyInfo. */
int
leaf_cache_pubkey_der(const struct leaf_cache *lc, uint8_t *buf, size_t cap)
{
	int n = i2d_PUBKEY(lc->key, NULL);
	unsigned char *p = buf;

	if (n <= 0 || (size_t)n > cap || i2d_PUBKEY(lc->key, &p) != n)
		return -1;
	return n;
}

/* A leaf for host with someone else's public key (see leaf.h). */
X509 *
leaf_cache_mint_for(struct leaf_cache *lc, const char *host, size_t len, const uint8_t *spki,
    size_t spki_len, char *err, size_t errlen)
{
	const unsigned char *p = spki;
	EVP_PKEY *pub;
	X509 *x;
	time_t now = lc->now();

	if (!ca_host_valid(host, len) || !ca_permits(lc->ca, host, len)) {
		lc->stats.refused++;
		ca_errf(err, errlen, "host not canonical or outside the CA name constraints");
		return NULL;
	}
	pub = d2i_PUBKEY(NULL, &p, (long)spki_len);
	if (pub == NULL || p != spki + spki_len || !EVP_PKEY_is_a(pub, "EC") ||
	    EVP_PKEY_get_bits(pub) != 256) {
		EVP_PKEY_free(pub);
		ERR_clear_error();
		ca_errf(err, errlen, "not a P-256 public key");
		return NULL;
	}
	x = leaf_mint_key(lc, host, len, pub, now, NULL);
	EVP_PKEY_free(pub);
	if (x == NULL)
		ca_errf(err, errlen, "cannot mint a leaf certificate");
	else
		lc->stats.mints++;
	return x;
}

/* Mint and cache leaves for known hosts. */
int
leaf_cache_prewarm(
    struct leaf_cache *lc, const char *const *hosts, size_t n, char *err, size_t errlen)
{
	size_t i;
	X509 *x;
	int done = 0;

	for (i = 0; i < n; i++) {
		if (hosts[i] == NULL) {
			ca_errf(err, errlen, "prewarm host %zu is NULL", i);
			return -1;
		}
		if (hosts[i][0] == '*' && hosts[i][1] == '.')
			continue;
		x = leaf_cache_get(
		    lc, hosts[i], strnlen(hosts[i], CA_MAX_NAME_LEN + 1), NULL, err, errlen);
		if (x == NULL)
			return -1;
		X509_free(x);
		done++;
	}
	return done;
}

/* The leaf private key, borrowed. */
EVP_PKEY *
leaf_cache_key(const struct leaf_cache *lc)
{
	return lc->key;
}

/* Copy the counters. */
void
leaf_cache_stats(const struct leaf_cache *lc, struct leaf_stats *st)
{
	*st = lc->stats;
	st->entries = lc->count;
}

/* Replace the clock (tests). */
void
leaf_cache_set_clock(struct leaf_cache *lc, time_t (*now_fn)(void))
{
	lc->now = now_fn != NULL ? now_fn : default_now;
}

/* Free everything; EVP_PKEY_free wipes the leaf key. */
void
leaf_cache_free(struct leaf_cache *lc)
{
	if (lc == NULL)
		return;
	while (lc->tail != NULL)
		entry_remove(lc, lc->tail);
	free(lc->buckets);
	EVP_PKEY_free(lc->key);
	EVP_PKEY_free(lc->pub);
	X509_NAME_free(lc->issuer);
	X509_EXTENSION_free(lc->ext_bc);
	X509_EXTENSION_free(lc->ext_ku);
	X509_EXTENSION_free(lc->ext_eku);
	X509_EXTENSION_free(lc->ext_aki);
	OPENSSL_cleanse(lc, sizeof(*lc));
	free(lc);
}
