/*
 * test_ca: the per-sandbox CA: generation, name constraints, export, loading
 * operator files and refusing bad ones.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "certs/ca.h"
#include "certs/ca_internal.h"

static char tmpdir[64];

static int
setup_dir(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_ca.XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	return 0;
}

static int
teardown_dir(void **state)
{
	char p[512];
	struct dirent *d;
	DIR *dir;

	if ((dir = opendir(tmpdir)) != NULL) {
		while ((d = readdir(dir)) != NULL) {
			if (d->d_name[0] == '.')
				continue;
			snprintf(p, sizeof(p), "%s/%s", tmpdir, d->d_name);
			unlink(p);
		}
		closedir(dir);
	}
	rmdir(tmpdir);
	return 0;
}

static int
count_files(const char *path)
{
	struct dirent *d;
	DIR *dir;
	int n = 0;

	assert_non_null(dir = opendir(path));
	while ((d = readdir(dir)) != NULL)
		if (strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0)
			n++;
	closedir(dir);
	return n;
}

static char *
slurp(const char *path, size_t *lenp)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	size_t n;

	assert_non_null(f);
	buf = calloc(1, 1 << 20);
	assert_non_null(buf);
	n = fread(buf, 1, (1 << 20) - 1, f);
	fclose(f);
	if (lenp != NULL)
		*lenp = n;
	return buf;
}

/* ---- operator CA fixtures, built with plain OpenSSL ---- */

enum fixture_kind {
	FIX_GOOD,        /* EC P-256, CA:TRUE, keyCertSign */
	FIX_NOT_CA,      /* no basicConstraints */
	FIX_CA_FALSE,    /* CA:FALSE */
	FIX_NO_CERTSIGN, /* CA:TRUE but keyUsage digitalSignature only */
	FIX_EXPIRED,     /* notAfter in the past */
	FIX_ED25519,     /* not EC */
	FIX_K256,        /* EC, but not a NIST curve */
	FIX_P384,        /* EC P-384: accepted, signs with SHA-384 */
	FIX_FUTURE,      /* notBefore in the future */
};

static EVP_PKEY *
make_fixture(enum fixture_kind kind, const char *cert_path, const char *key_path)
{
	X509V3_CTX v3;
	X509_EXTENSION *ext;
	EVP_PKEY *key;
	X509 *x;
	FILE *f;
	time_t now = time(NULL);

	if (kind == FIX_ED25519)
		key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	else
		key = EVP_EC_gen(kind == FIX_K256   ? "secp256k1"
		                 : kind == FIX_P384 ? "P-384"
		                                    : "P-256");
	assert_non_null(key);
	assert_non_null(x = X509_new());
	assert_int_equal(X509_set_version(x, X509_VERSION_3), 1);
	assert_int_equal(ASN1_INTEGER_set(X509_get_serialNumber(x), 42), 1);
	assert_int_equal(X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
	                     (const unsigned char *)"operator test CA", -1, -1, 0),
	    1);
	assert_int_equal(X509_set_issuer_name(x, X509_get_subject_name(x)), 1);
	if (kind == FIX_EXPIRED) {
		assert_non_null(ASN1_TIME_set(X509_getm_notBefore(x), now - 7200));
		assert_non_null(ASN1_TIME_set(X509_getm_notAfter(x), now - 3600));
	} else if (kind == FIX_FUTURE) {
		assert_non_null(ASN1_TIME_set(X509_getm_notBefore(x), now + 3600));
		assert_non_null(ASN1_TIME_set(X509_getm_notAfter(x), now + 86400));
	} else {
		assert_non_null(ASN1_TIME_set(X509_getm_notBefore(x), now - 60));
		assert_non_null(ASN1_TIME_set(X509_getm_notAfter(x), now + 86400));
	}
	assert_int_equal(X509_set_pubkey(x, key), 1);
	X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
	if (kind != FIX_NOT_CA) {
		ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints,
		    kind == FIX_CA_FALSE ? "critical,CA:FALSE" : "critical,CA:TRUE");
		assert_non_null(ext);
		assert_int_equal(X509_add_ext(x, ext, -1), 1);
		X509_EXTENSION_free(ext);
	}
	if (kind == FIX_NO_CERTSIGN) {
		ext = X509V3_EXT_conf_nid(NULL, &v3, NID_key_usage, "critical,digitalSignature");
		assert_non_null(ext);
		assert_int_equal(X509_add_ext(x, ext, -1), 1);
		X509_EXTENSION_free(ext);
	}
	assert_true(X509_sign(x, key, kind == FIX_ED25519 ? NULL : EVP_sha256()) > 0);
	assert_non_null(f = fopen(cert_path, "w"));
	assert_int_equal(PEM_write_X509(f, x), 1);
	fclose(f);
	if (key_path != NULL) {
		assert_non_null(f = fopen(key_path, "w"));
		assert_int_equal(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL), 1);
		fclose(f);
	}
	X509_free(x);
	return key;
}

static void
fixture_paths(char *cert, char *key, size_t cap, const char *tag)
{
	snprintf(cert, cap, "%s/%s.crt", tmpdir, tag);
	snprintf(key, cap, "%s/%s.key", tmpdir, tag);
}

/* ---- tests ---- */

static void
test_host_valid(void **state)
{
	static const char *good[] = {"a", "example.com", "api.example.com", "x-1.y2.io",
	    "0a.example", "xn--bcher-kva.example"};
	static const char *bad[] = {"", "Example.com", "a..b", ".a.com", "a.com.", "-a.com",
	    "a-.com", "a_b.com", "a b.com", "1.2.3.4", "a.123", "*.example.com", "a/b"};
	char label64[80], long254[300];
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(ca_host_valid(good[i], strlen(good[i])));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(ca_host_valid(bad[i], strlen(bad[i])));
	/* An embedded NUL must not truncate the name into a valid one. */
	assert_false(ca_host_valid("a\0b.com", 7));
	assert_true(ca_host_valid("a\0b.com", 1));
	assert_false(ca_host_valid(NULL, 3));
	memset(label64, 'a', 64);
	memcpy(label64 + 64, ".com", 5);
	assert_false(ca_host_valid(label64, strlen(label64)));
	assert_true(ca_host_valid(label64 + 1, strlen(label64 + 1)));
	/* 254 bytes: too long, 253: fine. */
	for (i = 0; i < 254; i++)
		long254[i] = (i % 50 == 49) ? '.' : 'a';
	assert_false(ca_host_valid(long254, 254));
	assert_true(ca_host_valid(long254, 253));
}

static void
test_generate_defaults(void **state)
{
	char err[CA_ERR_LEN], cn[128];
	const ASN1_INTEGER *serial;
	BASIC_CONSTRAINTS *bc;
	ASN1_BIT_STRING *ku;
	EVP_PKEY *pub;
	struct ca *ca;
	X509 *x;
	time_t before, after;
	int crit = -1;

	before = time(NULL);
	ca = ca_generate(NULL, err, sizeof(err));
	after = time(NULL);
	assert_non_null(ca);
	assert_false(ca_is_loaded(ca));
	x = ca_cert(ca);
	assert_int_equal(X509_get_version(x), X509_VERSION_3);
	/* Self-signed with its own P-256 key. */
	assert_non_null(pub = X509_get0_pubkey(x));
	assert_true(EVP_PKEY_is_a(pub, "EC"));
	assert_int_equal(EVP_PKEY_get_bits(pub), 256);
	assert_int_equal(X509_verify(x, pub), 1);
	assert_int_equal(X509_check_issued(x, x), X509_V_OK);
	/* basicConstraints critical CA:TRUE pathlen:0. */
	bc = X509_get_ext_d2i(x, NID_basic_constraints, &crit, NULL);
	assert_non_null(bc);
	assert_int_equal(crit, 1);
	assert_true(bc->ca);
	assert_non_null(bc->pathlen);
	assert_int_equal(ASN1_INTEGER_get(bc->pathlen), 0);
	BASIC_CONSTRAINTS_free(bc);
	assert_int_equal(X509_get_pathlen(x), 0);
	/* keyUsage critical keyCertSign + cRLSign only. */
	ku = X509_get_ext_d2i(x, NID_key_usage, &crit, NULL);
	assert_non_null(ku);
	assert_int_equal(crit, 1);
	ASN1_BIT_STRING_free(ku);
	assert_int_equal(X509_get_key_usage(x), KU_KEY_CERT_SIGN | KU_CRL_SIGN);
	assert_non_null(X509_get0_subject_key_id(x));
	assert_int_equal(X509_get_ext_by_NID(x, NID_name_constraints, -1), -1);
	/* Random positive 128-bit serial. */
	serial = X509_get0_serialNumber(x);
	assert_int_equal(ASN1_STRING_length(serial), 16);
	assert_int_equal(ASN1_STRING_type(serial), V_ASN1_INTEGER);
	/* Subject CN. */
	assert_true(X509_NAME_get_text_by_NID(
	                X509_get_subject_name(x), NID_commonName, cn, sizeof(cn)) > 0);
	assert_int_equal(strncmp(cn, "egressd sandbox CA ", 19), 0);
	assert_int_equal(strlen(cn), 19 + 8);
	/* Validity: backdated, 7 days; bracketed by clock reads, not timed. */
	assert_int_equal(ca_not_after(ca) - ca_not_before(ca),
	    CA_DEFAULT_VALIDITY_SECS + CA_DEFAULT_BACKDATE_SECS);
	assert_true(ca_not_before(ca) >= before - CA_DEFAULT_BACKDATE_SECS);
	assert_true(ca_not_before(ca) <= after - CA_DEFAULT_BACKDATE_SECS);
	ca_free(ca);
}

static void
test_generate_unique(void **state)
{
	char err[CA_ERR_LEN], f1[65], f2[65];
	struct ca *a, *b;

	assert_non_null(a = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(b = ca_generate(NULL, err, sizeof(err)));
	ca_fingerprint(a, f1);
	ca_fingerprint(b, f2);
	assert_int_equal(strlen(f1), 64);
	assert_string_not_equal(f1, f2);
	assert_int_not_equal(ASN1_INTEGER_cmp(X509_get0_serialNumber(ca_cert(a)),
	                         X509_get0_serialNumber(ca_cert(b))),
	    0);
	assert_int_not_equal(
	    X509_NAME_cmp(X509_get_subject_name(ca_cert(a)), X509_get_subject_name(ca_cert(b))), 0);
	ca_free(a);
	ca_free(b);
	ca_free(NULL);
}

static void
test_generate_config(void **state)
{
	static const char *bad_names[] = {"Example.com", "*.", "*", "a..b", "x_y.com", "1.2.3.4",
	    "", "*.*.x.com", "a.*.x.com", "x.com."};
	char err[CA_ERR_LEN];
	struct ca_config cfg;
	const char *one[1];
	struct ca *ca;
	size_t i;

	memset(&cfg, 0, sizeof(cfg));
	cfg.validity_secs = CA_MIN_VALIDITY_SECS - 1;
	assert_null(ca_generate(&cfg, err, sizeof(err)));
	assert_non_null(strstr(err, "validity"));
	cfg.validity_secs = CA_MAX_VALIDITY_SECS + 1u;
	assert_null(ca_generate(&cfg, err, sizeof(err)));
	cfg.validity_secs = 2 * 3600;
	cfg.backdate_secs = CA_MAX_BACKDATE_SECS + 1;
	assert_null(ca_generate(&cfg, err, sizeof(err)));
	cfg.backdate_secs = 60;
	assert_non_null(ca = ca_generate(&cfg, err, sizeof(err)));
	assert_int_equal(ca_not_after(ca) - ca_not_before(ca), 2 * 3600 + 60);
	ca_free(ca);
	/* Invalid permitted names are refused, not silently dropped. */
	for (i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		one[0] = bad_names[i];
		cfg.permitted_dns = one;
		cfg.n_permitted = 1;
		assert_null(ca_generate(&cfg, err, sizeof(err)));
	}
	one[0] = NULL;
	assert_null(ca_generate(&cfg, err, sizeof(err)));
	cfg.permitted_dns = NULL;
	assert_null(ca_generate(&cfg, err, sizeof(err)));
	cfg.permitted_dns = one;
	cfg.n_permitted = CA_MAX_PERMITTED + 1;
	assert_null(ca_generate(&cfg, err, sizeof(err)));
	/* NULL err buffer is allowed. */
	assert_null(ca_generate(&cfg, NULL, 0));
}

static void
test_name_constraints(void **state)
{
	static const char *permitted[] = {"api.example.com", "*.svc.test"};
	struct ca_config cfg = {.permitted_dns = permitted, .n_permitted = 2};
	char err[CA_ERR_LEN];
	NAME_CONSTRAINTS *nc;
	struct ca *ca, *open_ca;
	int crit = -1;

	assert_non_null(ca = ca_generate(&cfg, err, sizeof(err)));
	nc = X509_get_ext_d2i(ca_cert(ca), NID_name_constraints, &crit, NULL);
	assert_non_null(nc);
	assert_int_equal(crit, 1);
	assert_int_equal(sk_GENERAL_SUBTREE_num(nc->permittedSubtrees), 2);
	/* The wildcard became the ".svc.test" subtree. */
	assert_memory_equal(
	    ASN1_STRING_get0_data(
	        sk_GENERAL_SUBTREE_value(nc->permittedSubtrees, 1)->base->d.dNSName),
	    ".svc.test", 9);
	/* Every IP address is excluded (v4 and v6). */
	assert_int_equal(sk_GENERAL_SUBTREE_num(nc->excludedSubtrees), 2);
	NAME_CONSTRAINTS_free(nc);

	assert_true(ca_permits(ca, "api.example.com", 15));
	assert_true(ca_permits(ca, "v1.api.example.com", 18));
	assert_true(ca_permits(ca, "a.svc.test", 10));
	assert_true(ca_permits(ca, "a.b.svc.test", 12));
	assert_false(ca_permits(ca, "svc.test", 8));
	assert_false(ca_permits(ca, "example.com", 11));
	assert_false(ca_permits(ca, "xapi.example.com", 16)); /* label boundary */
	assert_false(ca_permits(ca, "evil.com", 8));
	assert_false(ca_permits(ca, "api.example.com.evil.com", 24));
	assert_false(ca_permits(ca, "API.example.com", 15)); /* not canonical */

	assert_non_null(open_ca = ca_generate(NULL, err, sizeof(err)));
	assert_true(ca_permits(open_ca, "evil.com", 8));
	assert_false(ca_permits(open_ca, "evil.com.", 9));
	ca_free(open_ca);
	ca_free(ca);
}

static void
test_export(void **state)
{
	char err[CA_ERR_LEN], path[256], bad[256], *content, buf[8192];
	const char *view;
	size_t len, vlen;
	struct stat st;
	struct ca *ca, *ca2;
	mode_t old;
	BIO *bio;
	X509 *x;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/ca.pem", tmpdir);
	assert_non_null(ca = ca_generate(NULL, err, sizeof(err)));
	/* Mode is 0644 whatever the umask. */
	old = umask(077);
	assert_int_equal(ca_export_pem(ca, path, err, sizeof(err)), 0);
	umask(old);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	assert_true(S_ISREG(st.st_mode));
	/* One file, no temp leftovers. */
	assert_int_equal(count_files(tmpdir), 1);
	content = slurp(path, &len);
	view = ca_pem_view(ca, &vlen);
	assert_int_equal(len, vlen);
	assert_memory_equal(content, view, len);
	/* Parses back to the same certificate, and holds no key. */
	assert_non_null(bio = BIO_new_mem_buf(content, (int)len));
	assert_non_null(x = PEM_read_bio_X509(bio, NULL, NULL, NULL));
	assert_int_equal(X509_cmp(x, ca_cert(ca)), 0);
	assert_null(PEM_read_bio_X509(bio, NULL, NULL, NULL)); /* only one block */
	BIO_free(bio);
	X509_free(x);
	/* PEM labels only: base64 has no '-', but may spell "KEY" (1 run in 400). */
	assert_null(strstr(content, "PRIVATE KEY-----"));
	assert_null(strstr(content, " KEY-----"));
	free(content);

	/* ca_pem: exact copy, refuses a short buffer. */
	n = ca_pem(ca, buf, sizeof(buf));
	assert_int_equal(n, (ssize_t)vlen);
	assert_string_equal(buf, view);
	assert_int_equal(ca_pem(ca, buf, vlen), -1);
	assert_int_equal(ca_pem(ca, buf, vlen + 1), (ssize_t)vlen);

	/* Re-export of another CA replaces the file atomically. */
	assert_non_null(ca2 = ca_generate(NULL, err, sizeof(err)));
	assert_int_equal(ca_export_pem(ca2, path, err, sizeof(err)), 0);
	content = slurp(path, &len);
	view = ca_pem_view(ca2, &vlen);
	assert_int_equal(len, vlen);
	assert_memory_equal(content, view, len);
	free(content);
	assert_int_equal(count_files(tmpdir), 1);

	/* Missing directory: a clear error, nothing written. */
	snprintf(bad, sizeof(bad), "%s/missing/ca.pem", tmpdir);
	assert_int_equal(ca_export_pem(ca, bad, err, sizeof(err)), -1);
	assert_true(strlen(err) > 0);
	assert_int_equal(ca_export_pem(ca, "", err, sizeof(err)), -1);
	assert_int_equal(count_files(tmpdir), 1);
	ca_free(ca);
	ca_free(ca2);
}

/* The export during an overlap: both CAs, the current first, each whole. */
static void
test_export_bundle(void **state)
{
	char err[CA_ERR_LEN], path[256], *content;
	const struct ca *cas[3];
	struct ca *a, *b;
	size_t len, la, lb;
	struct stat st;
	BIO *bio;
	X509 *x;

	snprintf(path, sizeof(path), "%s/bundle.pem", tmpdir);
	assert_non_null(a = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(b = ca_generate(NULL, err, sizeof(err)));
	cas[0] = b;
	cas[1] = a;
	cas[2] = a;
	assert_int_equal(ca_export_bundle(cas, 2, path, err, sizeof(err)), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	content = slurp(path, &len);
	ca_pem_view(a, &la);
	ca_pem_view(b, &lb);
	assert_int_equal(len, la + lb);
	assert_non_null(bio = BIO_new_mem_buf(content, (int)len));
	assert_non_null(x = PEM_read_bio_X509(bio, NULL, NULL, NULL));
	assert_int_equal(X509_cmp(x, ca_cert(b)), 0);
	X509_free(x);
	assert_non_null(x = PEM_read_bio_X509(bio, NULL, NULL, NULL));
	assert_int_equal(X509_cmp(x, ca_cert(a)), 0);
	X509_free(x);
	assert_null(PEM_read_bio_X509(bio, NULL, NULL, NULL));
	BIO_free(bio);
	assert_null(strstr(content, "PRIVATE KEY-----"));
	free(content);
	/* The overlap is over: the current one alone replaces the bundle. */
	assert_int_equal(ca_export_bundle(cas, 1, path, err, sizeof(err)), 0);
	content = slurp(path, &len);
	assert_int_equal(len, lb);
	free(content);
	/* No CA, more than two, or a NULL one: refused, the file as it was. */
	assert_int_equal(ca_export_bundle(cas, 0, path, err, sizeof(err)), -1);
	assert_int_equal(ca_export_bundle(cas, 3, path, err, sizeof(err)), -1);
	cas[1] = NULL;
	assert_int_equal(ca_export_bundle(cas, 2, path, err, sizeof(err)), -1);
	content = slurp(path, &len);
	assert_int_equal(len, lb);
	free(content);
	assert_int_equal(count_files(tmpdir), 1);
	ca_free(a);
	ca_free(b);
}

/*
 * The certificate of a generated CA holds its public key only: were it to
 * keep a reference to the private key (X509_set_pubkey caches the key it
 * is given), ca_forget_key() would leave the scalar in every child.
 */
static void
test_cert_holds_no_private_key(void **state)
{
	char err[CA_ERR_LEN];
	struct ca *ca;
	BIGNUM *d = NULL;
	EVP_PKEY *pub;

	assert_non_null(ca = ca_generate(NULL, err, sizeof(err)));
	assert_non_null(pub = X509_get0_pubkey(ca_cert(ca)));
	assert_int_equal(EVP_PKEY_get_bn_param(pub, OSSL_PKEY_PARAM_PRIV_KEY, &d), 0);
	assert_null(d);
	ERR_clear_error();
	ca_forget_key(ca);
	assert_false(ca_can_sign(ca));
	assert_non_null(X509_get0_pubkey(ca_cert(ca)));
	ca_free(ca);
}

/* What a child makes of the certificate the parent pushes: a CA without a key. */
static void
test_from_der(void **state)
{
	char err[CA_ERR_LEN], fa[65], fb[65];
	unsigned char der[4096], bad[4097];
	struct ca *ca, *pub;
	X509 *leafish;
	EVP_PKEY *k;
	unsigned char *p;
	int n;

	assert_non_null(ca = ca_generate(NULL, err, sizeof(err)));
	n = ca_der(ca, der, sizeof(der));
	assert_true(n > 0 && n < 2048); /* fits CHAN_CA_DER_MAX */
	assert_int_equal(ca_der(ca, der, (size_t)n - 1), -1);
	assert_non_null(pub = ca_from_der(der, (size_t)n, err, sizeof(err)));
	assert_int_equal(X509_cmp(ca_cert(pub), ca_cert(ca)), 0);
	ca_fingerprint(ca, fa);
	ca_fingerprint(pub, fb);
	assert_string_equal(fa, fb);
	assert_int_equal(ca_not_after(pub), ca_not_after(ca));
	assert_false(ca_can_sign(pub));
	assert_false(ca_is_loaded(pub));
	ca_free(pub);
	/* Trailing bytes, a truncated certificate, nothing. */
	memcpy(bad, der, (size_t)n);
	bad[n] = 0;
	assert_null(ca_from_der(bad, (size_t)n + 1, err, sizeof(err)));
	assert_null(ca_from_der(der, (size_t)n - 1, err, sizeof(err)));
	assert_null(ca_from_der(der, 0, err, sizeof(err)));
	assert_null(ca_from_der(NULL, 10, err, sizeof(err)));
	/* A certificate that is no CA (CA:FALSE) is refused. */
	assert_non_null(leafish = X509_new());
	assert_non_null(k = EVP_EC_gen("P-256"));
	assert_int_equal(X509_set_version(leafish, X509_VERSION_3), 1);
	assert_int_equal(ca_random_serial(leafish), 0);
	assert_int_equal(X509_set_issuer_name(leafish, X509_get_subject_name(ca_cert(ca))), 1);
	assert_non_null(ASN1_TIME_set(X509_getm_notBefore(leafish), time(NULL) - 60));
	assert_non_null(ASN1_TIME_set(X509_getm_notAfter(leafish), time(NULL) + 3600));
	assert_int_equal(X509_set_pubkey(leafish, k), 1);
	{
		X509_EXTENSION *e =
		    X509V3_EXT_conf_nid(NULL, NULL, NID_basic_constraints, "critical,CA:FALSE");

		assert_non_null(e);
		assert_int_equal(X509_add_ext(leafish, e, -1), 1);
		X509_EXTENSION_free(e);
	}
	assert_int_equal(ca_sign(ca, leafish), 0);
	p = der;
	n = i2d_X509(leafish, &p);
	assert_true(n > 0);
	assert_null(ca_from_der(der, (size_t)n, err, sizeof(err)));
	assert_non_null(strstr(err, "not a CA"));
	X509_free(leafish);
	EVP_PKEY_free(k);
	ca_free(ca);
}

static void
test_load_good(void **state)
{
	char err[CA_ERR_LEN], cert[256], key[256], out[256], *content;
	EVP_PKEY *k;
	struct ca *ca;
	size_t len;

	fixture_paths(cert, key, sizeof(cert), "good");
	k = make_fixture(FIX_GOOD, cert, key);
	ca = ca_load(cert, key, err, sizeof(err));
	if (ca == NULL)
		fail_msg("ca_load: %s", err);
	assert_true(ca_is_loaded(ca));
	assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(ca_cert(ca)), k), 1);
	assert_non_null(ca_key_id(ca)); /* computed: the fixture has no SKI */
	assert_int_equal(ASN1_STRING_length(ca_key_id(ca)), 20);
	/* The exported file holds the certificate, never the operator's key. */
	snprintf(out, sizeof(out), "%s/export.pem", tmpdir);
	assert_int_equal(ca_export_pem(ca, out, err, sizeof(err)), 0);
	content = slurp(out, &len);
	assert_null(strstr(content, "PRIVATE KEY-----"));
	assert_non_null(strstr(content, "BEGIN CERTIFICATE"));
	free(content);
	ca_free(ca);
	EVP_PKEY_free(k);

	/* P-384 is accepted and signs with a matching digest. */
	fixture_paths(cert, key, sizeof(cert), "p384");
	k = make_fixture(FIX_P384, cert, key);
	assert_non_null(ca = ca_load(cert, key, err, sizeof(err)));
	{
		X509 *x = X509_new();

		assert_non_null(x);
		assert_int_equal(X509_set_issuer_name(x, X509_get_subject_name(ca_cert(ca))), 1);
		assert_int_equal(X509_set_pubkey(x, k), 1);
		assert_int_equal(ca_sign(ca, x), 0);
		assert_int_equal(X509_get_signature_nid(x), NID_ecdsa_with_SHA384);
		assert_int_equal(X509_verify(x, X509_get0_pubkey(ca_cert(ca))), 1);
		X509_free(x);
	}
	ca_free(ca);
	EVP_PKEY_free(k);
}

static void
test_load_refused(void **state)
{
	char err[CA_ERR_LEN], cert[256], key[256], cert2[256], key2[256];
	EVP_PKEY *k, *k2;
	struct ca *ca;
	FILE *f;
	int i;

	/* Mismatched key: the key of another CA. */
	fixture_paths(cert, key, sizeof(cert), "m1");
	fixture_paths(cert2, key2, sizeof(cert2), "m2");
	k = make_fixture(FIX_GOOD, cert, key);
	k2 = make_fixture(FIX_GOOD, cert2, key2);
	assert_null(ca_load(cert, key2, err, sizeof(err)));
	assert_non_null(strstr(err, "does not match"));
	EVP_PKEY_free(k);
	EVP_PKEY_free(k2);

	fixture_paths(cert, key, sizeof(cert), "notca");
	EVP_PKEY_free(make_fixture(FIX_NOT_CA, cert, key));
	assert_null(ca_load(cert, key, err, sizeof(err)));
	assert_non_null(strstr(err, "not a CA"));

	fixture_paths(cert, key, sizeof(cert), "cafalse");
	EVP_PKEY_free(make_fixture(FIX_CA_FALSE, cert, key));
	assert_null(ca_load(cert, key, err, sizeof(err)));
	assert_non_null(strstr(err, "not a CA"));

	fixture_paths(cert, key, sizeof(cert), "nocertsign");
	EVP_PKEY_free(make_fixture(FIX_NO_CERTSIGN, cert, key));
	assert_null(ca_load(cert, key, err, sizeof(err)));
	assert_non_null(strstr(err, "keyCertSign"));

	fixture_paths(cert, key, sizeof(cert), "expired");
	EVP_PKEY_free(make_fixture(FIX_EXPIRED, cert, key));
	assert_null(ca_load(cert, key, err, sizeof(err)));
	assert_non_null(strstr(err, "expired"));

	fixture_paths(cert, key, sizeof(cert), "future");
	EVP_PKEY_free(make_fixture(FIX_FUTURE, cert, key));
	assert_null(ca_load(cert, key, err, sizeof(err)));
	assert_non_null(strstr(err, "not yet valid"));

	fixture_paths(cert, key, sizeof(cert), "k256");
	EVP_PKEY_free(make_fixture(FIX_K256, cert, key));
	assert_null(ca_load(cert, key, err, sizeof(err)));
	assert_non_null(strstr(err, "must be EC"));

	fixture_paths(cert, key, sizeof(cert), "ed25519");
	EVP_PKEY_free(make_fixture(FIX_ED25519, cert, key));
	assert_null(ca_load(cert, key, err, sizeof(err)));
	assert_non_null(strstr(err, "must be EC"));

	/* An encrypted key is refused without prompting. */
	fixture_paths(cert, key, sizeof(cert), "enc");
	k = make_fixture(FIX_GOOD, cert, NULL);
	assert_non_null(f = fopen(key, "w"));
	assert_int_equal(PEM_write_PrivateKey(f, k, EVP_aes_256_cbc(),
	                     (const unsigned char *)"secret", 6, NULL, NULL),
	    1);
	fclose(f);
	EVP_PKEY_free(k);
	assert_null(ca_load(cert, key, err, sizeof(err)));
	assert_non_null(strstr(err, "no unencrypted PEM private key"));

	/* Swapped paths, missing files, oversized files, no PEM. */
	fixture_paths(cert, key, sizeof(cert), "good2");
	EVP_PKEY_free(make_fixture(FIX_GOOD, cert, key));
	assert_null(ca_load(key, cert, err, sizeof(err)));
	assert_null(ca_load(cert, "/nonexistent/key.pem", err, sizeof(err)));
	assert_null(ca_load("/nonexistent/ca.pem", key, err, sizeof(err)));
	assert_null(ca_load(NULL, key, err, sizeof(err)));
	assert_null(ca_load(tmpdir, key, err, sizeof(err))); /* a directory */
	snprintf(cert2, sizeof(cert2), "%s/big.pem", tmpdir);
	assert_non_null(f = fopen(cert2, "w"));
	for (i = 0; i < CA_MAX_FILE_BYTES / 16 + 1; i++)
		fputs("0123456789abcde\n", f);
	fclose(f);
	assert_null(ca_load(cert2, key, err, sizeof(err)));
	assert_non_null(strstr(err, "at most"));
	/* The same good pair does load: the refusals above are about the files. */
	assert_non_null(ca = ca_load(cert, key, err, sizeof(err)));
	ca_free(ca);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_host_valid),
	    cmocka_unit_test(test_generate_defaults),
	    cmocka_unit_test(test_generate_unique),
	    cmocka_unit_test(test_generate_config),
	    cmocka_unit_test(test_name_constraints),
	    cmocka_unit_test_setup_teardown(test_export, setup_dir, teardown_dir),
	    cmocka_unit_test_setup_teardown(test_export_bundle, setup_dir, teardown_dir),
	    cmocka_unit_test(test_from_der),
	    cmocka_unit_test(test_cert_holds_no_private_key),
	    cmocka_unit_test_setup_teardown(test_load_good, setup_dir, teardown_dir),
	    cmocka_unit_test_setup_teardown(test_load_refused, setup_dir, teardown_dir),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
