/*
 * test_leaf: leaf minting verified against the sandbox CA with the real
 * verifier, pathlen and name constraints, host-name refusals, LRU cache.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "certs/ca.h"
#include "certs/ca_internal.h"
#include "certs/leaf.h"
#include "certs/leaf_internal.h"

/* Verify cert (with optional untrusted intermediates) for host as a TLS
 * server certificate issued under ca; returns the X509_V_ code. */
static int
verify(const struct ca *ca, X509 *cert, STACK_OF(X509) * chain, const char *host)
{
	X509_STORE *store;
	X509_STORE_CTX *ctx;
	X509_VERIFY_PARAM *param;
	int rc;

	assert_non_null(store = X509_STORE_new());
	assert_int_equal(X509_STORE_add_cert(store, ca_cert(ca)), 1);
	assert_non_null(ctx = X509_STORE_CTX_new());
	assert_int_equal(X509_STORE_CTX_init(ctx, store, cert, chain), 1);
	assert_int_equal(X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_SERVER), 1);
	param = X509_STORE_CTX_get0_param(ctx);
	if (host != NULL)
		assert_int_equal(X509_VERIFY_PARAM_set1_host(param, host, 0), 1);
	rc = X509_verify_cert(ctx) == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx);
	if (rc == X509_V_OK)
		assert_int_equal(X509_STORE_CTX_get_error(ctx), X509_V_OK);
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	ERR_clear_error();
	return rc;
}

static X509 *
get(struct leaf_cache *lc, const char *host)
{
	char err[CA_ERR_LEN];
	EVP_PKEY *key = NULL;
	X509 *x;

	x = leaf_cache_get(lc, host, strlen(host), &key, err, sizeof(err));
	if (x == NULL)
		fail_msg("leaf_cache_get(%s): %s", host, err);
	assert_ptr_equal(key, leaf_cache_key(lc));
	return x;
}

static time_t fake_now;

static time_t
fake_clock(void)
{
	return fake_now;
}

static void
test_leaf_verifies(void **state)
{
	char err[CA_ERR_LEN], cn[300];
	const ASN1_OCTET_STRING *aki;
	GENERAL_NAMES *gens;
	GENERAL_NAME *gn;
	struct leaf_cache *lc;
	unsigned char *der = NULL;
	const unsigned char *p;
	time_t nb, na, before, after;
	struct ca *ca;
	X509 *x, *y;
	int crit = -1, len;

	assert_non_null(ca = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(lc = leaf_cache_new(ca, NULL, err, sizeof(err)));
	before = time(NULL);
	x = get(lc, "api.example.com");
	after = time(NULL);
	assert_int_equal(verify(ca, x, NULL, "api.example.com"), X509_V_OK);
	assert_int_equal(X509_check_host(x, "api.example.com", 0, 0, NULL), 1);
	assert_int_equal(X509_check_host(x, "other.example.com", 0, 0, NULL), 0);
	assert_int_equal(verify(ca, x, NULL, "other.example.com"), X509_V_ERR_HOSTNAME_MISMATCH);
	/* The key the caller gets is the cert's key (SSL_use_PrivateKey). */
	assert_int_equal(X509_check_private_key(x, leaf_cache_key(lc)), 1);
	assert_true(EVP_PKEY_is_a(leaf_cache_key(lc), "EC"));
	assert_int_equal(EVP_PKEY_get_bits(leaf_cache_key(lc)), 256);
	/* Exactly one SAN, a dNSName equal to the host; CN = host. */
	gens = X509_get_ext_d2i(x, NID_subject_alt_name, &crit, NULL);
	assert_non_null(gens);
	assert_int_equal(crit, 0);
	assert_int_equal(sk_GENERAL_NAME_num(gens), 1);
	gn = sk_GENERAL_NAME_value(gens, 0);
	assert_int_equal(gn->type, GEN_DNS);
	assert_int_equal(ASN1_STRING_length(gn->d.dNSName), 15);
	assert_memory_equal(ASN1_STRING_get0_data(gn->d.dNSName), "api.example.com", 15);
	GENERAL_NAMES_free(gens);
	assert_int_equal(
	    X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof(cn)),
	    15);
	assert_string_equal(cn, "api.example.com");
	/* EKU serverAuth, keyUsage digitalSignature, not a CA. */
	assert_true(X509_get_extension_flags(x) & EXFLAG_XKUSAGE);
	assert_int_equal(X509_get_extended_key_usage(x), XKU_SSL_SERVER);
	assert_int_equal(X509_get_key_usage(x), KU_DIGITAL_SIGNATURE);
	assert_int_equal(X509_check_ca(x), 0);
	/* AKI = CA SKI; issuer = CA subject; 128-bit serial. */
	aki = X509_get0_authority_key_id(x);
	assert_non_null(aki);
	assert_int_equal(ASN1_OCTET_STRING_cmp(aki, X509_get0_subject_key_id(ca_cert(ca))), 0);
	assert_int_equal(
	    X509_NAME_cmp(X509_get_issuer_name(x), X509_get_subject_name(ca_cert(ca))), 0);
	assert_int_equal(ASN1_STRING_length(X509_get0_serialNumber(x)), 16);
	/* Validity inside the CA's, at most a day. */
	assert_int_equal(ca_time_to_epoch(X509_get0_notBefore(x), &nb), 0);
	assert_int_equal(ca_time_to_epoch(X509_get0_notAfter(x), &na), 0);
	assert_true(nb >= ca_not_before(ca));
	assert_true(na <= ca_not_after(ca));
	assert_true(na >= before + LEAF_DEFAULT_LIFETIME_SECS);
	assert_true(na <= after + LEAF_DEFAULT_LIFETIME_SECS);
	assert_true(nb >= before - LEAF_BACKDATE_SECS);
	assert_true(nb <= after - LEAF_BACKDATE_SECS);
	/* DER round trip (what the client sees) verifies and keeps the key. */
	assert_true((len = i2d_X509(x, &der)) > 0);
	p = der;
	assert_non_null(y = d2i_X509(NULL, &p, len));
	assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(y), leaf_cache_key(lc)), 1);
	assert_int_equal(verify(ca, y, NULL, "api.example.com"), X509_V_OK);
	OPENSSL_free(der);
	X509_free(y);
	/* Another CA does not vouch for it. */
	{
		struct ca *other = ca_generate(NULL, err, sizeof(err));

		assert_non_null(other);
		assert_int_not_equal(verify(other, x, NULL, "api.example.com"), X509_V_OK);
		ca_free(other);
	}
	X509_free(x);
	leaf_cache_free(lc);
	ca_free(ca);
}

static void
test_leaf_usable_by_ssl(void **state)
{
	char err[CA_ERR_LEN];
	struct leaf_cache *lc;
	EVP_PKEY *key = NULL;
	struct ca *ca;
	SSL_CTX *sctx;
	SSL *ssl;
	X509 *x;

	assert_non_null(ca = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(lc = leaf_cache_new(ca, NULL, err, sizeof(err)));
	assert_non_null(x = leaf_cache_get(lc, "a.example", 9, &key, err, sizeof(err)));
	assert_non_null(sctx = SSL_CTX_new(TLS_server_method()));
	assert_non_null(ssl = SSL_new(sctx));
	assert_int_equal(SSL_use_certificate(ssl, x), 1);
	assert_int_equal(SSL_use_PrivateKey(ssl, key), 1);
	assert_int_equal(SSL_check_private_key(ssl), 1);
	SSL_free(ssl);
	SSL_CTX_free(sctx);
	X509_free(x);
	leaf_cache_free(lc);
	ca_free(ca);
}

static X509 *
issue(X509 *issuer, EVP_PKEY *issuer_key, const struct ca *ca, EVP_PKEY *subject_key,
    const char *cn, const char *bc, const char *san)
{
	X509V3_CTX v3;
	X509_EXTENSION *ext;
	time_t now = time(NULL);
	X509 *x;

	assert_non_null(x = X509_new());
	assert_int_equal(X509_set_version(x, X509_VERSION_3), 1);
	assert_int_equal(ca_random_serial(x), 0);
	assert_int_equal(X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
	                     (const unsigned char *)cn, -1, -1, 0),
	    1);
	assert_int_equal(X509_set_issuer_name(x, X509_get_subject_name(issuer)), 1);
	assert_non_null(ASN1_TIME_set(X509_getm_notBefore(x), now - 60));
	assert_non_null(ASN1_TIME_set(X509_getm_notAfter(x), now + 3600));
	assert_int_equal(X509_set_pubkey(x, subject_key), 1);
	X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
	assert_non_null(ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, bc));
	assert_int_equal(X509_add_ext(x, ext, -1), 1);
	X509_EXTENSION_free(ext);
	assert_non_null(ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san));
	assert_int_equal(X509_add_ext(x, ext, -1), 1);
	X509_EXTENSION_free(ext);
	if (ca != NULL)
		assert_int_equal(ca_sign(ca, x), 0);
	else
		assert_true(X509_sign(x, issuer_key, EVP_sha256()) > 0);
	return x;
}

static void
test_pathlen_zero(void **state)
{
	char err[CA_ERR_LEN];
	STACK_OF(X509) * chain;
	struct leaf_cache *lc;
	EVP_PKEY *k1, *k2;
	X509 *leaf, *inter, *deep, *under_leaf;
	struct ca *ca;

	assert_non_null(ca = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(lc = leaf_cache_new(ca, NULL, err, sizeof(err)));
	assert_non_null(k1 = EVP_EC_gen("P-256"));
	assert_non_null(k2 = EVP_EC_gen("P-256"));
	/* Even a CA:TRUE intermediate signed by the CA cannot issue. */
	inter = issue(ca_cert(ca), NULL, ca, k1, "intermediate", "critical,CA:TRUE",
	    "DNS:intermediate.example");
	deep = issue(inter, k1, NULL, k2, "deep.example", "critical,CA:FALSE", "DNS:deep.example");
	assert_non_null(chain = sk_X509_new_null());
	assert_true(sk_X509_push(chain, inter) > 0);
	assert_int_equal(verify(ca, deep, chain, "deep.example"), X509_V_ERR_PATH_LENGTH_EXCEEDED);
	/* A cert signed with the leaf key, chained through the leaf. */
	leaf = get(lc, "leaf.example");
	under_leaf = issue(leaf, leaf_cache_key(lc), NULL, k2, "deep.example", "critical,CA:FALSE",
	    "DNS:deep.example");
	assert_true(sk_X509_push(chain, leaf) > 0);
	assert_int_not_equal(verify(ca, under_leaf, chain, "deep.example"), X509_V_OK);
	sk_X509_free(chain);
	X509_free(under_leaf);
	X509_free(leaf);
	X509_free(deep);
	X509_free(inter);
	EVP_PKEY_free(k1);
	EVP_PKEY_free(k2);
	leaf_cache_free(lc);
	ca_free(ca);
}

static void
test_name_constraints(void **state)
{
	static const char *permitted[] = {"api.example.com", "*.svc.test"};
	struct ca_config cfg = {.permitted_dns = permitted, .n_permitted = 2};
	char err[CA_ERR_LEN];
	struct leaf_cache *lc;
	struct leaf_stats st;
	struct ca *ca;
	X509 *x;
	size_t i;
	static const char *ok_hosts[] = {"api.example.com", "v2.api.example.com", "a.svc.test"};
	static const char *bad_hosts[] = {
	    "evil.com", "svc.test", "example.com", "xapi.example.com"};

	assert_non_null(ca = ca_generate(&cfg, err, sizeof(err)));
	assert_non_null(lc = leaf_cache_new(ca, NULL, err, sizeof(err)));
	for (i = 0; i < sizeof(ok_hosts) / sizeof(ok_hosts[0]); i++) {
		x = get(lc, ok_hosts[i]);
		assert_int_equal(verify(ca, x, NULL, ok_hosts[i]), X509_V_OK);
		X509_free(x);
	}
	for (i = 0; i < sizeof(bad_hosts) / sizeof(bad_hosts[0]); i++) {
		/* The cache refuses to mint outside the constraints... */
		assert_null(
		    leaf_cache_get(lc, bad_hosts[i], strlen(bad_hosts[i]), NULL, err, sizeof(err)));
		assert_non_null(strstr(err, "constraints"));
		/* ...and the verifier would reject such a leaf anyway. */
		x = leaf_mint(lc, bad_hosts[i], strlen(bad_hosts[i]), time(NULL), NULL);
		assert_non_null(x);
		assert_int_equal(verify(ca, x, NULL, bad_hosts[i]), X509_V_ERR_PERMITTED_VIOLATION);
		X509_free(x);
	}
	/* IP addresses are excluded outright, v4 and v6. */
	{
		EVP_PKEY *k = EVP_EC_gen("P-256");

		assert_non_null(k);
		x = issue(ca_cert(ca), NULL, ca, k, "ip", "critical,CA:FALSE", "IP:192.0.2.7");
		assert_int_equal(verify(ca, x, NULL, NULL), X509_V_ERR_EXCLUDED_VIOLATION);
		X509_free(x);
		x = issue(ca_cert(ca), NULL, ca, k, "ip6", "critical,CA:FALSE", "IP:2001:db8::1");
		assert_int_equal(verify(ca, x, NULL, NULL), X509_V_ERR_EXCLUDED_VIOLATION);
		X509_free(x);
		/* Control: the same shape with a permitted DNS name verifies. */
		x = issue(ca_cert(ca), NULL, ca, k, "ok", "critical,CA:FALSE", "DNS:z.svc.test");
		assert_int_equal(verify(ca, x, NULL, "z.svc.test"), X509_V_OK);
		X509_free(x);
		EVP_PKEY_free(k);
	}
	leaf_cache_stats(lc, &st);
	assert_int_equal(st.refused, 4);
	assert_int_equal(st.mints, 3);
	leaf_cache_free(lc);
	ca_free(ca);
}

static void
test_refuses_bad_hosts(void **state)
{
	static const char *bad[] = {"", "Example.com", "a.com.", "a..com", "-a.com", "a-.com",
	    "exa mple.com", "_dmarc.x.com", "1.2.3.4", "*.x.com", "x.com/", "x.com:443", "[::1]"};
	char err[CA_ERR_LEN], longname[300];
	struct leaf_cache *lc;
	struct leaf_stats st;
	struct ca *ca;
	size_t i;

	assert_non_null(ca = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(lc = leaf_cache_new(ca, NULL, err, sizeof(err)));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_null(leaf_cache_get(lc, bad[i], strlen(bad[i]), NULL, err, sizeof(err)));
		assert_non_null(strstr(err, "canonical"));
	}
	/* NUL inside: "a.com\0.evil" must not become a cert for a.com. */
	assert_null(leaf_cache_get(lc, "a.com\0.evil", 11, NULL, err, sizeof(err)));
	/* Too long (254) and a 64-byte label. */
	memset(longname, 'a', sizeof(longname));
	for (i = 50; i < 254; i += 50)
		longname[i] = '.';
	assert_null(leaf_cache_get(lc, longname, 254, NULL, err, sizeof(err)));
	memset(longname, 'a', 64);
	memcpy(longname + 64, ".com", 4);
	assert_false(ca_host_valid(longname, 68));
	assert_true(ca_host_valid(longname + 1, 67));
	assert_null(leaf_cache_get(lc, longname, 68, NULL, err, sizeof(err)));
	assert_null(leaf_mint(lc, "Bad.com", 7, time(NULL), NULL));
	leaf_cache_stats(lc, &st);
	assert_int_equal(st.refused, sizeof(bad) / sizeof(bad[0]) + 3);
	assert_int_equal(st.mints, 0);
	assert_int_equal(st.entries, 0);
	leaf_cache_free(lc);
	ca_free(ca);
}

static void
test_long_host_no_cn(void **state)
{
	char err[CA_ERR_LEN], host[254];
	GENERAL_NAMES *gens;
	struct leaf_cache *lc;
	struct ca *ca;
	X509 *x;
	size_t i;
	int crit = -1;

	/* 253 bytes: valid DNS, too long for a CN. */
	for (i = 0; i < 253; i++)
		host[i] = (i % 60 == 59) ? '.' : 'b';
	host[253] = '\0';
	assert_true(ca_host_valid(host, 253));
	assert_non_null(ca = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(lc = leaf_cache_new(ca, NULL, err, sizeof(err)));
	x = get(lc, host);
	assert_int_equal(X509_NAME_entry_count(X509_get_subject_name(x)), 0);
	gens = X509_get_ext_d2i(x, NID_subject_alt_name, &crit, NULL);
	assert_non_null(gens);
	assert_int_equal(crit, 1); /* empty subject: SAN must be critical */
	GENERAL_NAMES_free(gens);
	assert_int_equal(verify(ca, x, NULL, host), X509_V_OK);
	X509_free(x);
	leaf_cache_free(lc);
	ca_free(ca);
}

static void
test_lru(void **state)
{
	struct leaf_config cfg = {.capacity = 2};
	char err[CA_ERR_LEN];
	struct leaf_cache *lc;
	struct leaf_stats st;
	struct ca *ca;
	X509 *a1, *a2, *a3, *b1, *b2, *c1;

	assert_non_null(ca = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(lc = leaf_cache_new(ca, &cfg, err, sizeof(err)));
	a1 = get(lc, "a.example");
	b1 = get(lc, "b.example");
	a2 = get(lc, "a.example"); /* hit: same object, a is now most recent */
	assert_ptr_equal(a1, a2);
	c1 = get(lc, "c.example"); /* evicts b, the least recent */
	leaf_cache_stats(lc, &st);
	assert_int_equal(st.entries, 2);
	assert_int_equal(st.evictions, 1);
	a3 = get(lc, "a.example");
	assert_ptr_equal(a1, a3);
	b2 = get(lc, "b.example"); /* re-minted; we still hold b1 */
	assert_ptr_not_equal(b1, b2);
	assert_int_not_equal(
	    ASN1_INTEGER_cmp(X509_get0_serialNumber(b1), X509_get0_serialNumber(b2)), 0);
	/* The evicted cert stays valid for its holder (refcounted). */
	assert_int_equal(verify(ca, b1, NULL, "b.example"), X509_V_OK);
	leaf_cache_stats(lc, &st);
	assert_int_equal(st.hits, 2);
	assert_int_equal(st.mints, 4);
	assert_int_equal(st.evictions, 2);
	assert_int_equal(st.entries, 2);
	X509_free(a1);
	X509_free(a2);
	X509_free(a3);
	X509_free(b1);
	X509_free(b2);
	X509_free(c1);
	leaf_cache_free(lc);

	cfg.capacity = LEAF_MAX_CAPACITY + 1;
	assert_null(leaf_cache_new(ca, &cfg, err, sizeof(err)));
	cfg.capacity = 0;
	cfg.lifetime_secs = LEAF_MAX_LIFETIME_SECS + 1;
	assert_null(leaf_cache_new(ca, &cfg, err, sizeof(err)));
	cfg.lifetime_secs = LEAF_MIN_LIFETIME_SECS - 1;
	assert_null(leaf_cache_new(ca, &cfg, err, sizeof(err)));
	assert_null(leaf_cache_new(NULL, NULL, err, sizeof(err)));
	leaf_cache_free(NULL);
	ca_free(ca);
}

static void
test_many_hosts(void **state)
{
	struct leaf_config cfg = {.capacity = 100};
	char err[CA_ERR_LEN], host[64];
	struct leaf_cache *lc;
	struct leaf_stats st;
	struct ca *ca;
	X509 *x, *first[100];
	int i;

	assert_non_null(ca = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(lc = leaf_cache_new(ca, &cfg, err, sizeof(err)));
	for (i = 0; i < 100; i++) {
		snprintf(host, sizeof(host), "h%d.example", i);
		first[i] = get(lc, host);
	}
	/* All hit, each returns its own host's cert. */
	for (i = 0; i < 100; i++) {
		snprintf(host, sizeof(host), "h%d.example", i);
		x = get(lc, host);
		assert_ptr_equal(x, first[i]);
		assert_int_equal(X509_check_host(x, host, 0, 0, NULL), 1);
		X509_free(x);
	}
	leaf_cache_stats(lc, &st);
	assert_int_equal(st.hits, 100);
	assert_int_equal(st.evictions, 0);
	for (i = 0; i < 100; i++)
		X509_free(first[i]);
	leaf_cache_free(lc);
	ca_free(ca);
}

static void
test_prewarm(void **state)
{
	static const char *hosts[] = {"a.example", "*.wild.example", "b.example"};
	static const char *bad[] = {"c.example", "Bad.example"};
	char err[CA_ERR_LEN];
	struct leaf_cache *lc;
	struct leaf_stats st;
	struct ca *ca;
	X509 *x;

	assert_non_null(ca = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(lc = leaf_cache_new(ca, NULL, err, sizeof(err)));
	assert_int_equal(leaf_cache_prewarm(lc, hosts, 3, err, sizeof(err)), 2);
	leaf_cache_stats(lc, &st);
	assert_int_equal(st.mints, 2);
	assert_int_equal(st.entries, 2);
	x = get(lc, "b.example"); /* a hit now */
	X509_free(x);
	leaf_cache_stats(lc, &st);
	assert_int_equal(st.hits, 1);
	assert_int_equal(st.mints, 2);
	assert_int_equal(leaf_cache_prewarm(lc, bad, 2, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "canonical"));
	leaf_cache_free(lc);
	ca_free(ca);
}

static void
test_expiry_and_renewal(void **state)
{
	struct ca_config ccfg = {.validity_secs = 2 * 86400};
	char err[CA_ERR_LEN];
	struct leaf_cache *lc;
	struct ca *ca;
	time_t na;
	X509 *x1, *x2, *x3, *x2b;

	assert_non_null(ca = ca_generate(&ccfg, err, sizeof(err)));
	assert_non_null(lc = leaf_cache_new(ca, NULL, err, sizeof(err)));
	fake_now = time(NULL);
	leaf_cache_set_clock(lc, fake_clock);
	x1 = get(lc, "r.example");
	/* Close to the leaf's expiry: a fresh leaf replaces it. */
	fake_now += LEAF_DEFAULT_LIFETIME_SECS - LEAF_RENEW_MARGIN_SECS + 1;
	x2 = get(lc, "r.example");
	assert_ptr_not_equal(x1, x2);
	/* Near the CA's end: a new leaf ends with the CA, never after. */
	fake_now = ca_not_after(ca) - 2 * 3600;
	x3 = get(lc, "s.example");
	assert_int_equal(ca_time_to_epoch(X509_get0_notAfter(x3), &na), 0);
	assert_int_equal(na, ca_not_after(ca));
	X509_free(x3);
	/* Within the renewal margin of the CA's end it is still served from
	 * the cache: nothing that lives longer can be minted. */
	fake_now = ca_not_after(ca) - 60;
	x2b = get(lc, "s.example");
	assert_ptr_equal(x2b, x3);
	X509_free(x2b);
	/* Past the CA's end: refused. */
	fake_now = ca_not_after(ca);
	assert_null(leaf_cache_get(lc, "r.example", 9, NULL, err, sizeof(err)));
	assert_non_null(strstr(err, "expired"));
	X509_free(x1);
	X509_free(x2);
	leaf_cache_free(lc);
	ca_free(ca);
}

static void
test_loaded_ca_issues(void **state)
{
	char err[CA_ERR_LEN], dir[] = "/tmp/test_leaf.XXXXXX", cp[128], kp[128];
	X509V3_CTX v3;
	X509_EXTENSION *ext;
	struct leaf_cache *lc;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_PKEY *k;
	struct ca *ca;
	X509 *x, *leaf;
	FILE *f;

	assert_non_null(mkdtemp(dir));
	snprintf(cp, sizeof(cp), "%s/ca.crt", dir);
	snprintf(kp, sizeof(kp), "%s/ca.key", dir);
	/* An operator CA without SKI: the AKI keyid is computed. */
	assert_non_null(k = EVP_EC_gen("P-256"));
	assert_non_null(x = X509_new());
	assert_int_equal(X509_set_version(x, X509_VERSION_3), 1);
	assert_int_equal(ca_random_serial(x), 0);
	assert_int_equal(X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
	                     (const unsigned char *)"op CA", -1, -1, 0),
	    1);
	assert_int_equal(X509_set_issuer_name(x, X509_get_subject_name(x)), 1);
	assert_non_null(ASN1_TIME_set(X509_getm_notBefore(x), time(NULL) - 60));
	assert_non_null(ASN1_TIME_set(X509_getm_notAfter(x), time(NULL) + 86400 * 30));
	assert_int_equal(X509_set_pubkey(x, k), 1);
	X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
	assert_non_null(
	    ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "critical,CA:TRUE"));
	assert_int_equal(X509_add_ext(x, ext, -1), 1);
	X509_EXTENSION_free(ext);
	assert_true(X509_sign(x, k, EVP_sha256()) > 0);
	assert_non_null(f = fopen(cp, "w"));
	assert_int_equal(PEM_write_X509(f, x), 1);
	fclose(f);
	assert_non_null(f = fopen(kp, "w"));
	assert_int_equal(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
	fclose(f);

	ca = ca_load(cp, kp, err, sizeof(err));
	if (ca == NULL)
		fail_msg("ca_load: %s", err);
	assert_non_null(lc = leaf_cache_new(ca, NULL, err, sizeof(err)));
	leaf = get(lc, "op.example");
	assert_int_equal(verify(ca, leaf, NULL, "op.example"), X509_V_OK);
	assert_int_equal(X509_pubkey_digest(x, EVP_sha1(), md, &mdlen), 1);
	assert_int_equal(ASN1_STRING_length(X509_get0_authority_key_id(leaf)), (int)mdlen);
	assert_memory_equal(ASN1_STRING_get0_data(X509_get0_authority_key_id(leaf)), md, mdlen);
	/* The leaf lives at most 24 hours although the CA lives 30 days. */
	{
		time_t na;

		assert_int_equal(ca_time_to_epoch(X509_get0_notAfter(leaf), &na), 0);
		assert_true(na < ca_not_after(ca));
	}
	X509_free(leaf);
	leaf_cache_free(lc);
	ca_free(ca);
	X509_free(x);
	EVP_PKEY_free(k);
	unlink(cp);
	unlink(kp);
	rmdir(dir);
}

/*
 * Leaves minted elsewhere: the parent (which holds the CA key) mints for the
 * worker's public key, the worker (which does not) caches only a leaf for
 * the host it asked, with its own key, issued by its CA.
 */
static void
test_minted_by_the_parent(void **state)
{
	char err[256];
	struct ca *ca, *other;
	struct leaf_cache *parent, *worker, *stranger;
	uint8_t der[256], junk[91];
	int n;
	X509 *x, *y;
	EVP_PKEY *key = NULL;

	(void)state;
	assert_non_null(ca = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(other = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(parent = leaf_cache_new(ca, NULL, err, sizeof(err)));
	assert_non_null(worker = leaf_cache_new(ca, NULL, err, sizeof(err)));
	assert_non_null(stranger = leaf_cache_new(other, NULL, err, sizeof(err)));
	n = leaf_cache_pubkey_der(worker, der, sizeof(der));
	assert_true(n > 0);
	assert_int_equal(leaf_cache_pubkey_der(worker, der, 10), -1);

	assert_null(leaf_cache_find(worker, "api.example.com", 15, NULL));
	x = leaf_cache_mint_for(parent, "api.example.com", 15, der, (size_t)n, err, sizeof(err));
	assert_non_null(x);
	/* Not for another host, nor kept under it. */
	assert_int_equal(leaf_cache_put(worker, "other.example.com", 17, x), -1);
	assert_int_equal(leaf_cache_put(worker, "api.example.com", 15, x), 0);
	y = leaf_cache_find(worker, "api.example.com", 15, &key);
	assert_ptr_equal(y, x);
	assert_ptr_equal(key, leaf_cache_key(worker));
	X509_free(y);
	X509_free(x);
	/* A leaf for the parent's own key, or from another CA, is refused. */
	x = leaf_cache_get(parent, "b.example.com", 13, NULL, err, sizeof(err));
	assert_non_null(x);
	assert_int_equal(leaf_cache_put(worker, "b.example.com", 13, x), -1);
	X509_free(x);
	x = leaf_cache_mint_for(stranger, "c.example.com", 13, der, (size_t)n, err, sizeof(err));
	assert_non_null(x);
	assert_int_equal(leaf_cache_put(worker, "c.example.com", 13, x), -1);
	X509_free(x);
	/* The parent mints only for a P-256 key and a canonical name. */
	memset(junk, 0x30, sizeof(junk));
	assert_null(
	    leaf_cache_mint_for(parent, "d.example.com", 13, junk, sizeof(junk), err, sizeof(err)));
	assert_null(
	    leaf_cache_mint_for(parent, "D.example.com", 13, der, (size_t)n, err, sizeof(err)));
	assert_null(
	    leaf_cache_mint_for(parent, "d.example.com", 13, der, (size_t)n - 1, err, sizeof(err)));
	/* A CA without its key (the worker after fork) signs nothing. */
	assert_true(ca_can_sign(ca));
	ca_forget_key(ca);
	assert_false(ca_can_sign(ca));
	assert_null(leaf_cache_get(worker, "e.example.com", 13, NULL, err, sizeof(err)));
	leaf_cache_free(stranger);
	leaf_cache_free(worker);
	leaf_cache_free(parent);
	ca_free(other);
	ca_free(ca);
}

/*
 * A renewed CA: the cache issues from it and drops every leaf of the old
 * one, so no host keeps being served a leaf of the CA being retired; a
 * leaf of the old CA is no longer taken from the parent either.
 */
static void
test_set_ca(void **state)
{
	char err[256];
	struct ca *old, *fresh;
	struct leaf_cache *parent, *worker;
	struct leaf_stats st;
	uint8_t der[256];
	int n;
	X509 *x, *y;

	(void)state;
	assert_non_null(old = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(fresh = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(parent = leaf_cache_new(old, NULL, err, sizeof(err)));
	assert_non_null(worker = leaf_cache_new(old, NULL, err, sizeof(err)));
	n = leaf_cache_pubkey_der(worker, der, sizeof(der));
	assert_true(n > 0);
	x = leaf_cache_mint_for(parent, "api.example.com", 15, der, (size_t)n, err, sizeof(err));
	assert_non_null(x);
	assert_int_equal(leaf_cache_put(worker, "api.example.com", 15, x), 0);
	assert_int_equal(verify(old, x, NULL, "api.example.com"), X509_V_OK);
	/* The parent's own cache, with its key: a leaf of the old CA cached. */
	y = get(parent, "own.example.com");
	X509_free(y);

	assert_int_equal(leaf_cache_set_ca(worker, fresh, err, sizeof(err)), 0);
	assert_int_equal(leaf_cache_set_ca(parent, fresh, err, sizeof(err)), 0);
	leaf_cache_stats(worker, &st);
	assert_int_equal(st.entries, 0);
	assert_null(leaf_cache_find(worker, "api.example.com", 15, NULL));
	/* A leaf of the old CA in flight is refused once the new one is in force. */
	assert_int_equal(leaf_cache_put(worker, "api.example.com", 15, x), -1);
	X509_free(x);
	/* The next leaf comes from the new CA, verifies under it and not under the old. */
	x = leaf_cache_mint_for(parent, "api.example.com", 15, der, (size_t)n, err, sizeof(err));
	assert_non_null(x);
	assert_int_equal(verify(fresh, x, NULL, "api.example.com"), X509_V_OK);
	assert_int_not_equal(verify(old, x, NULL, "api.example.com"), X509_V_OK);
	assert_int_equal(leaf_cache_put(worker, "api.example.com", 15, x), 0);
	X509_free(x);
	y = get(parent, "own.example.com");
	assert_int_equal(verify(fresh, y, NULL, "own.example.com"), X509_V_OK);
	X509_free(y);
	assert_int_equal(leaf_cache_set_ca(worker, NULL, err, sizeof(err)), -1);
	leaf_cache_free(worker);
	leaf_cache_free(parent);
	ca_free(old);
	ca_free(fresh);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_minted_by_the_parent),
	    cmocka_unit_test(test_set_ca),
	    cmocka_unit_test(test_leaf_verifies),
	    cmocka_unit_test(test_leaf_usable_by_ssl),
	    cmocka_unit_test(test_pathlen_zero),
	    cmocka_unit_test(test_name_constraints),
	    cmocka_unit_test(test_refuses_bad_hosts),
	    cmocka_unit_test(test_long_host_no_cn),
	    cmocka_unit_test(test_lru),
	    cmocka_unit_test(test_many_hosts),
	    cmocka_unit_test(test_prewarm),
	    cmocka_unit_test(test_expiry_and_renewal),
	    cmocka_unit_test(test_loaded_ca_issues),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
