/*
 * Upstream trust read eagerly into one X509_STORE (see trust.h). OpenSSL's
 * own directory lookup reads the files lazily, at verification time, with
 * the worker's rights: here everything is read at start with the parent's.
 */
#include <dirent.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "certs/trust.h"

/* Add the certificates and CRLs of one PEM file; the count added, or -1 with errno. */
static int
trust_add_file(X509_STORE *st, int at, const char *name)
{
	STACK_OF(X509_INFO) * infos;
	struct stat sb;
	BIO *bio;
	FILE *f;
	int fd, n = 0, e;

	fd = openat(at, name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -1;
	if (fstat(fd, &sb) != 0) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	if (!S_ISREG(sb.st_mode) || sb.st_size > TRUST_MAX_FILE_BYTES) {
		close(fd);
		errno = S_ISREG(sb.st_mode) ? EFBIG : EINVAL;
		return -1;
	}
	f = fdopen(fd, "r");
	if (f == NULL) {
		close(fd);
		return -1;
	}
	bio = BIO_new_fp(f, BIO_CLOSE);
	if (bio == NULL) {
		fclose(f);
		errno = ENOMEM;
		return -1;
	}
	infos = PEM_X509_INFO_read_bio(bio, NULL, NULL, NULL);
	BIO_free(bio);
	ERR_clear_error();
	if (infos == NULL)
		return 0;
	for (int i = 0; i < sk_X509_INFO_num(infos); i++) {
		X509_INFO *xi = sk_X509_INFO_value(infos, i);

		if (xi->x509 != NULL && X509_STORE_add_cert(st, xi->x509) == 1)
			n++;
		if (xi->crl != NULL)
			(void)X509_STORE_add_crl(st, xi->crl);
	}
	sk_X509_INFO_pop_free(infos, X509_INFO_free);
	ERR_clear_error();
	return n;
}

X509_STORE *
trust_load(const char *path, char *err, size_t errlen)
{
	X509_STORE *st;
	struct stat sb;
	int total = 0, files = 0;
	const char *why = NULL;
	int e = 0;

	if (stat(path, &sb) != 0) {
		e = errno;
		why = "cannot stat";
		goto fail;
	}
	st = X509_STORE_new();
	if (st == NULL) {
		snprintf(err, errlen, "upstream trust %.200s: out of memory", path);
		return NULL;
	}
	if (S_ISDIR(sb.st_mode)) {
		int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
		struct dirent *de;

		if (d == NULL) {
			e = errno;
			if (dfd >= 0)
				close(dfd);
			X509_STORE_free(st);
			why = "cannot read the directory";
			goto fail;
		}
		while ((de = readdir(d)) != NULL && files < TRUST_MAX_FILES) {
			int n;

			if (de->d_name[0] == '.')
				continue;
			files++;
			n = trust_add_file(st, dirfd(d), de->d_name);
			if (n < 0 && errno == EACCES) {
				/* One unreadable anchor is a configuration error, not a skip. */
				e = errno;
				closedir(d);
				X509_STORE_free(st);
				snprintf(err, errlen,
				    "cannot read upstream trust file %.200s/%.100s: %s (read by "
				    "uid "
				    "%u before the privilege drop); make it readable by that uid",
				    path, de->d_name, strerror(e), (unsigned)geteuid());
				return NULL;
			}
			if (n > 0)
				total += n;
		}
		closedir(d);
	} else {
		int n = trust_add_file(st, AT_FDCWD, path);

		if (n < 0) {
			e = errno;
			X509_STORE_free(st);
			why = "cannot read";
			goto fail;
		}
		total = n;
	}
	if (total == 0) {
		X509_STORE_free(st);
		snprintf(err, errlen,
		    "upstream trust %.200s holds no PEM certificate; point "
		    "OPENSANDBOX_EGRESS_MITMPROXY_UPSTREAM_TRUST_DIR at a PEM file or a directory "
		    "of them",
		    path);
		return NULL;
	}
	return st;
fail:
	snprintf(err, errlen,
	    "%s upstream trust %.200s: %s (read by uid %u before the privilege drop); make it "
	    "readable by that uid or fix OPENSANDBOX_EGRESS_MITMPROXY_UPSTREAM_TRUST_DIR",
	    why, path, strerror(e), (unsigned)geteuid());
	return NULL;
}

/* A c_rehash name: eight hex digits, a dot, a decimal suffix. */
static bool
trust_hashed_name(const char *n)
{
	size_t i;

	for (i = 0; i < 8; i++)
		if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f')))
			return false;
	if (n[8] != '.' || n[9] == '\0')
		return false;
	for (i = 9; n[i] != '\0'; i++)
		if (n[i] < '0' || n[i] > '9')
			return false;
	return true;
}

/* Whether dir holds at least one c_rehash name (looked at in its first TRUST_MAX_FILES). */
static bool
trust_dir_hashed(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	bool found = false;
	int seen = 0;

	if (d == NULL)
		return false;
	while (!found && seen++ < TRUST_MAX_FILES && (de = readdir(d)) != NULL)
		found = trust_hashed_name(de->d_name);
	closedir(d);
	return found;
}

int
trust_system_paths(X509_STORE *st)
{
	const char *file = getenv(X509_get_default_cert_file_env());
	const char *dir = getenv(X509_get_default_cert_dir_env());

	if (dir == NULL || dir[0] == '\0')
		dir = X509_get_default_cert_dir();
	if ((file == NULL || file[0] == '\0') && trust_dir_hashed(dir))
		return X509_STORE_load_path(st, dir);
	return X509_STORE_set_default_paths(st);
}

SSL *
trust_peer_ssl(SSL_CTX *ctx, const struct sockaddr *ss, const char *name)
{
	SSL *ssl = SSL_new(ctx);
	int ok;

	if (ssl == NULL)
		return NULL;
	if (name != NULL && name[0] != '\0')
		ok = SSL_set_tlsext_host_name(ssl, name) == 1 &&
		     X509_VERIFY_PARAM_set1_host(SSL_get0_param(ssl), name, 0) == 1;
	else if (ss->sa_family == AF_INET)
		ok =
		    X509_VERIFY_PARAM_set1_ip(SSL_get0_param(ssl),
		        (const unsigned char *)&((const struct sockaddr_in *)ss)->sin_addr, 4) == 1;
	else
		ok = ss->sa_family == AF_INET6 &&
		     X509_VERIFY_PARAM_set1_ip(SSL_get0_param(ssl),
		         (const unsigned char *)&((const struct sockaddr_in6 *)ss)->sin6_addr,
		         16) == 1;
	if (!ok) {
		SSL_free(ssl);
		return NULL;
	}
	return ssl;
}
