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
 * With --where, it tells what that floor is made of instead: OpenSSL's
 * allocations are followed (CRYPTO_set_mem_functions), and those that one
 * idle server object holds (TLS 1.3, a leaf on the object, tickets: as
 * egressd's) are listed by the OpenSSL source line that made them, with
 * their heap chunks' bytes (malloc_usable_size plus the chunk header).
 * The object listed is the third made, so first-use caches are not in it.
 *
 * usage: build/bench/tlsmem_bench [N]   (default 500)
 *        build/bench/tlsmem_bench --where
 */
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

static size_t
heap_used(void)
{
	struct mallinfo2 m = mallinfo2();

	return m.uordblks;
}

/*
 * --where: every live OpenSSL allocation, by address, in an open-addressed
 * table (linear probing, deletion by backward shift). Only allocations made
 * while "marking" is set are listed.
 */
#define WHERE_SLOTS (1u << 16)

struct where {
	void *p;
	size_t n;
	const char *file;
	int line;
	bool marked;
};

static struct where *where_tab;
static size_t where_live;
static bool where_marking, where_full;

static size_t
where_slot(const void *p)
{
	return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull) & (WHERE_SLOTS - 1);
}

static void
where_add(void *p, size_t n, const char *file, int line)
{
	size_t i = where_slot(p);

	if (where_live + 1 >= WHERE_SLOTS) {
		where_full = true;
		return;
	}
	while (where_tab[i].p != NULL)
		i = (i + 1) & (WHERE_SLOTS - 1);
	where_tab[i] = (struct where){p, n, file, line, where_marking};
	where_live++;
}

/* Removes p's entry, copied to *was if was is not NULL. */
static void
where_del(const void *p, struct where *was)
{
	size_t i = where_slot(p), j, k;

	while (where_tab[i].p != NULL && where_tab[i].p != p)
		i = (i + 1) & (WHERE_SLOTS - 1);
	if (where_tab[i].p == NULL)
		return;
	if (was != NULL)
		*was = where_tab[i];
	where_tab[i].p = NULL;
	where_live--;
	/* Move back the entries after it that probed past the hole. */
	for (j = (i + 1) & (WHERE_SLOTS - 1); where_tab[j].p != NULL;
	     j = (j + 1) & (WHERE_SLOTS - 1)) {
		k = where_slot(where_tab[j].p);
		if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) {
			where_tab[i] = where_tab[j];
			where_tab[j].p = NULL;
			i = j;
		}
	}
}

static void *
where_malloc(size_t n, const char *file, int line)
{
	void *p = malloc(n);

	if (p != NULL)
		where_add(p, n, file, line);
	return p;
}

/* The old block leaves the table first, and comes back if realloc fails. */
static void *
where_realloc(void *old, size_t n, const char *file, int line)
{
	struct where was = {0};
	void *p;

	if (old != NULL)
		where_del(old, &was);
	p = realloc(old, n);
	if (p != NULL)
		where_add(p, n, file, line);
	else if (n != 0 && was.p != NULL)
		where_add(was.p, was.n, was.file, was.line);
	return p;
}

static void
where_free(void *p, const char *file, int line)
{
	(void)file, (void)line;
	if (p != NULL)
		where_del(p, NULL);
	free(p);
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

struct where_sum {
	const char *file;
	int line;
	size_t bytes, chunks, count;
};

static int
where_sum_cmp(const void *a, const void *b)
{
	const struct where_sum *x = a, *y = b;

	return x->chunks < y->chunks ? 1 : x->chunks > y->chunks ? -1 : 0;
}

/* The marked live allocations, summed by the source line that made them. */
static void
where_print(void)
{
	static struct where_sum sum[512];
	size_t nsum = 0, bytes = 0, chunks = 0, count = 0;

	if (where_full) {
		printf("  (the table filled: no inventory)\n");
		return;
	}
	for (size_t i = 0; i < WHERE_SLOTS; i++) {
		const struct where *w = &where_tab[i];
		size_t k, chunk;

		if (w->p == NULL || !w->marked)
			continue;
		chunk = malloc_usable_size(w->p) + sizeof(size_t);
		for (k = 0; k < nsum; k++)
			if (sum[k].line == w->line && strcmp(sum[k].file, w->file) == 0)
				break;
		if (k == nsum) {
			if (nsum == sizeof(sum) / sizeof(sum[0]))
				continue;
			sum[nsum++] = (struct where_sum){w->file, w->line, 0, 0, 0};
		}
		sum[k].bytes += w->n;
		sum[k].chunks += chunk;
		sum[k].count++;
		bytes += w->n;
		chunks += chunk;
		count++;
	}
	qsort(sum, nsum, sizeof(sum[0]), where_sum_cmp);
	printf("  %-56s %6s %6s %s\n", "made at (OpenSSL source)", "asked", "heap", "allocations");
	for (size_t k = 0; k < nsum; k++) {
		char at[128];

		snprintf(at, sizeof(at), "%s:%d", sum[k].file, sum[k].line);
		printf("  %-56s %6zu %6zu %zu\n", at, sum[k].bytes, sum[k].chunks, sum[k].count);
	}
	printf("  %-56s %6zu %6zu %zu (%.2f KiB of heap)\n", "total", bytes, chunks, count,
	    (double)chunks / 1024.0);
}

/*
 * KiB one idle established server object holds, over n of them; -1 on a
 * failure. With where (n at least 3), the third object's allocations are
 * listed instead.
 */
static double
measure(int n, int max_version, bool per_object_cert, bool tickets, EVP_PKEY *key, X509 *cert,
    bool where)
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

		where_marking = where && i == 2;
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
		BIO *nb;

		where_marking = where && i == 2;
		nb = BIO_new(BIO_s_null());
		SSL_free(cli[i]);
		cli[i] = NULL;
		(void)SSL_free_buffers(srv[i]);
		SSL_set_bio(srv[i], nb, nb);
	}
	where_marking = false;
	if (where)
		where_print();
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
	bool where = argc == 2 && strcmp(argv[1], "--where") == 0;
	int n = where ? 3 : argc > 1 ? atoi(argv[1]) : 500;
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

	/* Before OpenSSL's first allocation, which mkcert makes. */
	if (where && ((where_tab = calloc(WHERE_SLOTS, sizeof(*where_tab))) == NULL ||
	                 CRYPTO_set_mem_functions(where_malloc, where_realloc, where_free) != 1)) {
		fprintf(stderr, "tlsmem_bench: cannot follow OpenSSL's allocations\n");
		return 1;
	}
	if (n < 1 || n > 100000 || mkcert(&key, &cert) != 0) {
		fprintf(stderr, "usage: tlsmem_bench [N (1..100000)] | --where\n");
		return 2;
	}
	if (where) {
		printf("OpenSSL %s: what one idle established server object holds (%s, record "
		       "buffers freed), in bytes\n",
		    OpenSSL_version(OPENSSL_VERSION_STRING), cases[0].name);
		if (measure(n, cases[0].version, cases[0].per_object, cases[0].tickets, key, cert,
		        true) < 0)
			printf("  failed\n");
		X509_free(cert);
		EVP_PKEY_free(key);
		return 0;
	}
	printf("OpenSSL %s: heap held by one idle established server object (record buffers "
	       "freed), over %d\n",
	    OpenSSL_version(OPENSSL_VERSION_STRING), n);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		double k = measure(
		    n, cases[i].version, cases[i].per_object, cases[i].tickets, key, cert, false);

		if (k < 0)
			printf("  %-52s failed\n", cases[i].name);
		else
			printf("  %-52s %6.2f KiB\n", cases[i].name, k);
	}
	X509_free(cert);
	EVP_PKEY_free(key);
	return 0;
}
