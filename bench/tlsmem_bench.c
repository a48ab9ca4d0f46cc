/*
 * bench/tlsmem_bench: what one established TLS connection's OpenSSL object
 * holds on the heap, server side, once its record buffers are given back
 * (SSL_free_buffers, as an idle intercepted connection does): the floor
 * under egressd's memory per idle terminated connection, whatever egressd
 * keeps of its own. N server and client objects handshake in memory (BIO
 * pairs), exchange one request and answer, the clients go, and the heap
 * in use (mallinfo2) is read before and after the servers are freed. For
 * TLS 1.3 and TLS 1.2, the certificate set on the context or on each
 * object (egressd sets a leaf per connection), with and without session
 * tickets. Prints KiB per connection.
 *
 * usage: build/bench/tlsmem_bench [N]   (default 500)
 */
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

static size_t
heap_used(void)
{
	struct mallinfo2 m = mallinfo2();

	return m.uordblks;
}

/* A throwaway P-256 key and self-signed certificate. */
static int
mkcert(EVP_PKEY **key, X509 **cert)
{
	*key = EVP_EC_gen("P-256");
	*cert = X509_new();
	if (*key == NULL || *cert == NULL)
		return -1;
	ASN1_INTEGER_set(X509_get_serialNumber(*cert), 1);
	X509_gmtime_adj(X509_getm_notBefore(*cert), 0);
	X509_gmtime_adj(X509_getm_notAfter(*cert), 3600);
	X509_set_pubkey(*cert, *key);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(*cert), "CN", MBSTRING_ASC,
	    (const unsigned char *)"tlsmem.test", -1, -1, 0);
	X509_set_issuer_name(*cert, X509_get_subject_name(*cert));
	return X509_sign(*cert, *key, EVP_sha256()) > 0 ? 0 : -1;
}

/* KiB one idle established server object holds, over n of them; -1 on a failure. */
static double
measure(int n, int max_version, bool per_object_cert, bool tickets, EVP_PKEY *key, X509 *cert)
{
	SSL_CTX *sctx = SSL_CTX_new(TLS_server_method()), *cctx = SSL_CTX_new(TLS_client_method());
	SSL **srv = calloc((size_t)n, sizeof(*srv)), **cli = calloc((size_t)n, sizeof(*cli));
	size_t before, after;
	double kib = -1;
	char buf[64];

	if (sctx == NULL || cctx == NULL || srv == NULL || cli == NULL)
		goto out;
	SSL_CTX_set_max_proto_version(sctx, max_version);
	if (!tickets)
		SSL_CTX_set_options(sctx, SSL_OP_NO_TICKET);
	if (!per_object_cert &&
	    (SSL_CTX_use_certificate(sctx, cert) != 1 || SSL_CTX_use_PrivateKey(sctx, key) != 1))
		goto out;
	for (int i = 0; i < n; i++) {
		BIO *a, *b;

		srv[i] = SSL_new(sctx);
		cli[i] = SSL_new(cctx);
		if (srv[i] == NULL || cli[i] == NULL || BIO_new_bio_pair(&a, 4096, &b, 4096) != 1)
			goto out;
		if (per_object_cert && (SSL_use_certificate(srv[i], cert) != 1 ||
		                           SSL_use_PrivateKey(srv[i], key) != 1))
			goto out;
		SSL_set_bio(srv[i], a, a);
		SSL_set_bio(cli[i], b, b);
		SSL_set_accept_state(srv[i]);
		SSL_set_connect_state(cli[i]);
		for (int k = 0;
		     k < 20 && !(SSL_is_init_finished(srv[i]) && SSL_is_init_finished(cli[i]));
		     k++) {
			(void)SSL_do_handshake(cli[i]);
			(void)SSL_do_handshake(srv[i]);
		}
		if (SSL_write(cli[i], "GET", 3) != 3 || SSL_read(srv[i], buf, sizeof(buf)) != 3 ||
		    SSL_write(srv[i], "OK", 2) != 2 || SSL_read(cli[i], buf, sizeof(buf)) != 2)
			goto out;
	}
	/* The clients go; each server keeps only itself (a null BIO for the pair). */
	for (int i = 0; i < n; i++) {
		BIO *nb = BIO_new(BIO_s_null());

		SSL_free(cli[i]);
		cli[i] = NULL;
		(void)SSL_free_buffers(srv[i]);
		SSL_set_bio(srv[i], nb, nb);
	}
	before = heap_used();
	for (int i = 0; i < n; i++) {
		SSL_free(srv[i]);
		srv[i] = NULL;
	}
	after = heap_used();
	kib = (double)(before - after) / 1024.0 / n;
out:
	for (int i = 0; srv != NULL && cli != NULL && i < n; i++) {
		SSL_free(srv[i]);
		SSL_free(cli[i]);
	}
	free(srv);
	free(cli);
	SSL_CTX_free(sctx);
	SSL_CTX_free(cctx);
	return kib;
}

int
main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 500;
	static const struct {
		const char *name;
		int version;
		bool per_object, tickets;
	} cases[] = {
	    {"TLS 1.3, leaf on each object, tickets (egressd)", TLS1_3_VERSION, true, true},
	    {"TLS 1.3, leaf on the context, tickets", TLS1_3_VERSION, false, true},
	    {"TLS 1.3, leaf on each object, no tickets", TLS1_3_VERSION, true, false},
	    {"TLS 1.2, leaf on each object, tickets", TLS1_2_VERSION, true, true},
	};
	EVP_PKEY *key;
	X509 *cert;

	if (n < 1 || n > 100000 || mkcert(&key, &cert) != 0) {
		fprintf(stderr, "usage: tlsmem_bench [N (1..100000)]\n");
		return 2;
	}
	printf("OpenSSL %s: heap held by one idle established server object (record buffers "
	       "freed), over %d\n",
	    OpenSSL_version(OPENSSL_VERSION_STRING), n);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		double k =
		    measure(n, cases[i].version, cases[i].per_object, cases[i].tickets, key, cert);

		if (k < 0)
			printf("  %-52s failed\n", cases[i].name);
		else
			printf("  %-52s %6.2f KiB\n", cases[i].name, k);
	}
	X509_free(cert);
	EVP_PKEY_free(key);
	return 0;
}
