/*
 * test_trust: the upstream trust read eagerly (certs/trust.c): a PEM file
 * with several certificates, a directory of files under any names, files
 * without certificates skipped, and one-sentence errors naming the path.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/pem.h>
#include <openssl/x509.h>

#include "certs/ca.h"
#include "certs/trust.h"

static char tmpdir[64];
static char pem1[4096], pem2[4096];

static void
put(const char *name, const char *a, const char *b)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(a, f);
	if (b != NULL)
		fputs(b, f);
	assert_int_equal(fclose(f), 0);
}

static int
setup(void **state)
{
	struct ca_config cc;
	char err[256];
	size_t n;

	(void)state;
	memset(&cc, 0, sizeof(cc));
	for (int i = 0; i < 2; i++) {
		struct ca *ca = ca_generate(&cc, err, sizeof(err));
		const char *pem;

		assert_non_null(ca);
		pem = ca_pem_view(ca, &n);
		assert_true(n < sizeof(pem1));
		memcpy(i == 0 ? pem1 : pem2, pem, n);
		(i == 0 ? pem1 : pem2)[n] = '\0';
		ca_free(ca);
	}
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_trust.XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	return 0;
}

static int
teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	assert_int_equal(system(cmd), 0);
	return 0;
}

static int
nobjs(X509_STORE *st)
{
	return sk_X509_OBJECT_num(X509_STORE_get0_objects(st));
}

/* The store verifies a certificate it holds (each CA is self-signed). */
static int
verifies(X509_STORE *st, const char *pem)
{
	BIO *b = BIO_new_mem_buf(pem, -1);
	X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	int ok;

	assert_non_null(x);
	assert_int_equal(X509_STORE_CTX_init(ctx, st, x, NULL), 1);
	ok = X509_verify_cert(ctx);
	X509_STORE_CTX_free(ctx);
	X509_free(x);
	BIO_free(b);
	return ok;
}

static void
test_file(void **state)
{
	char p[256], err[512];
	X509_STORE *st;

	(void)state;
	put("both.pem", pem1, pem2);
	snprintf(p, sizeof(p), "%s/both.pem", tmpdir);
	st = trust_load(p, err, sizeof(err));
	assert_non_null(st);
	assert_int_equal(nobjs(st), 2);
	assert_int_equal(verifies(st, pem1), 1);
	assert_int_equal(verifies(st, pem2), 1);
	X509_STORE_free(st);

	put("one.pem", pem1, NULL);
	snprintf(p, sizeof(p), "%s/one.pem", tmpdir);
	st = trust_load(p, err, sizeof(err));
	assert_non_null(st);
	assert_int_equal(nobjs(st), 1);
	assert_int_equal(verifies(st, pem1), 1);
	assert_int_not_equal(verifies(st, pem2), 1);
	X509_STORE_free(st);
}

static void
test_dir(void **state)
{
	char p[256], err[512];
	X509_STORE *st;

	(void)state;
	put("a1b2c3d4.0", pem1, NULL); /* a c_rehash name */
	put("any-name.crt", pem2, NULL);
	put("dup.pem", pem1, NULL); /* the same anchor twice counts once */
	put("README", "not a certificate\n", NULL);
	put(".hidden.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", NULL);
	snprintf(p, sizeof(p), "%s/sub", tmpdir);
	assert_int_equal(mkdir(p, 0700), 0);
	st = trust_load(tmpdir, err, sizeof(err));
	assert_non_null(st);
	assert_int_equal(nobjs(st), 2);
	assert_int_equal(verifies(st, pem1), 1);
	assert_int_equal(verifies(st, pem2), 1);
	X509_STORE_free(st);
}

static void
test_errors(void **state)
{
	char p[256], err[512];

	(void)state;
	snprintf(p, sizeof(p), "%s/missing.pem", tmpdir);
	assert_null(trust_load(p, err, sizeof(err)));
	assert_non_null(strstr(err, p));
	assert_non_null(strstr(err, "uid"));
	assert_non_null(strstr(err, "No such file"));

	put("junk", "no certificate here\n", NULL);
	snprintf(p, sizeof(p), "%s/junk", tmpdir);
	assert_null(trust_load(p, err, sizeof(err)));
	assert_non_null(strstr(err, "no PEM certificate"));
	/* A directory holding no certificate at all is refused too. */
	assert_null(trust_load(tmpdir, err, sizeof(err)));
	assert_non_null(strstr(err, tmpdir));
}

/* Write the CA of pem under its c_rehash name (subject hash, ".0"). */
static void
put_hashed(const char *pem)
{
	BIO *b = BIO_new_mem_buf(pem, -1);
	X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
	char name[64];

	assert_non_null(x);
	snprintf(name, sizeof(name), "%08lx.0", X509_subject_name_hash(x));
	X509_free(x);
	BIO_free(b);
	put(name, pem, NULL);
}

/*
 * The system store without trust of our own: a hashed directory
 * (SSL_CERT_DIR) is looked up at verification, not read at start; one
 * without c_rehash names is not taken for one; SSL_CERT_FILE is honoured.
 */
static void
test_system_paths(void **state)
{
	char file[128];
	X509_STORE *st;

	(void)state;
	unsetenv("SSL_CERT_FILE");
	/* Not hashed: the directory is not used (pem1 is not in the system store). */
	put("ca1.pem", pem1, NULL);
	setenv("SSL_CERT_DIR", tmpdir, 1);
	st = X509_STORE_new();
	assert_int_equal(trust_system_paths(st), 1);
	/* The default paths read the bundle file now (when the system has one). */
	if (access(X509_get_default_cert_file(), R_OK) == 0)
		assert_true(nobjs(st) > 0);
	assert_int_not_equal(verifies(st, pem1), 1);
	X509_STORE_free(st);
	/* Hashed: found at verification time, including a file added after the load. */
	st = X509_STORE_new();
	assert_int_equal(trust_system_paths(st), 1); /* still no hashed name: default paths */
	X509_STORE_free(st);
	put_hashed(pem1);
	st = X509_STORE_new();
	assert_int_equal(trust_system_paths(st), 1);
	/* Nothing is parsed at start: certificates are read as verification needs them. */
	assert_int_equal(nobjs(st), 0);
	put_hashed(pem2); /* after the load: a lazy lookup still finds it */
	assert_int_equal(verifies(st, pem1), 1);
	assert_int_equal(verifies(st, pem2), 1);
	X509_STORE_free(st);
	/* SSL_CERT_FILE set: the file it names, whatever the directory holds. */
	snprintf(file, sizeof(file), "%s/ca1.pem", tmpdir);
	setenv("SSL_CERT_FILE", file, 1);
	setenv("SSL_CERT_DIR", "/nonexistent-egressd-test", 1);
	st = X509_STORE_new();
	assert_int_equal(trust_system_paths(st), 1);
	assert_int_equal(verifies(st, pem1), 1);
	assert_int_not_equal(verifies(st, pem2), 1);
	X509_STORE_free(st);
	unsetenv("SSL_CERT_FILE");
	unsetenv("SSL_CERT_DIR");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_file, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_dir, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_system_paths, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
