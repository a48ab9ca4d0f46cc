/*
 * ca: the per-sandbox certificate authority.
 *
 * Run by the parent at start (before the worker is forked, so that every
 * worker, restarts included, serves the same CA): it generates an ECDSA
 * P-256 CA in memory
 * (CA:TRUE pathlen:0, keyCertSign, short validity, optional DNS name
 * constraints) or loads one from operator files, exports the public
 * certificate for the workload's trust store and signs leaves for leaf.c.
 * It must never write the CA private key anywhere, nor load a CA it cannot
 * fully check (non-CA, non-EC, mismatched key, expired).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "certs/ca.h"
#include "certs/ca_internal.h"

#define CA_SERIAL_BYTES 16
#define CA_CN_TAG_BYTES 4

struct ca {
	X509 *cert;
	EVP_PKEY *key; /* the CA private key: memory only */
	EVP_MD *md;    /* pre-fetched signing digest */
	NAME_CONSTRAINTS *nc;
	ASN1_OCTET_STRING *key_id;
	char *pem;
	size_t pem_len;
	time_t not_before;
	time_t not_after;
	bool loaded;
};

/* Format an error message with the first queued OpenSSL error appended. */
void
ca_errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	unsigned long e;
	size_t n;
	int r;

	e = ERR_peek_error();
	if (err != NULL && errlen > 0) {
		va_start(ap, fmt);
		r = vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
		n = r < 0 ? 0 : (size_t)r;
		if (e != 0 && n + 3 < errlen) {
			memcpy(err + n, ": ", 3);
			ERR_error_string_n(e, err + n + 2, errlen - n - 2);
		}
	}
	ERR_clear_error();
}

/* Lowercase LDH labels, dot-separated, no trailing dot, bounded. */
bool
ca_host_valid(const char *name, size_t len)
{
	size_t i, lablen = 0;
	bool alldigit = true;
	char c;

	if (name == NULL || len == 0 || len > CA_MAX_NAME_LEN)
		return false;
	for (i = 0; i < len; i++) {
		c = name[i];
		if (c == '.') {
			if (lablen == 0 || name[i - 1] == '-')
				return false;
			lablen = 0;
			alldigit = true;
			continue;
		}
		if (c >= 'a' && c <= 'z')
			alldigit = false;
		else if (c == '-') {
			if (lablen == 0)
				return false;
			alldigit = false;
		} else if (c < '0' || c > '9')
			return false; /* uppercase, '_', NUL, ... */
		if (++lablen > 63)
			return false;
	}
	if (lablen == 0 || name[len - 1] == '-')
		return false;
	/* An all-numeric last label is an IP literal, never a host name. */
	return !alldigit;
}

/* Give x a random positive 128-bit serial number. */
int
ca_random_serial(X509 *x)
{
	unsigned char b[CA_SERIAL_BYTES];
	ASN1_INTEGER *ai = NULL;
	BIGNUM *bn;
	int ok = -1;

	if (RAND_bytes(b, sizeof(b)) != 1)
		return -1;
	b[0] &= 0x7f; /* positive, and DER fits in 16 octets */
	b[0] |= 0x40; /* never zero, always full length */
	if ((bn = BN_bin2bn(b, sizeof(b), NULL)) == NULL)
		return -1;
	if ((ai = BN_to_ASN1_INTEGER(bn, NULL)) != NULL && X509_set_serialNumber(x, ai) == 1)
		ok = 0;
	ASN1_INTEGER_free(ai);
	BN_free(bn);
	return ok;
}

/* Convert an ASN1_TIME to seconds since the epoch. */
int
ca_time_to_epoch(const ASN1_TIME *t, time_t *out)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	if (t == NULL || ASN1_TIME_to_tm(t, &tm) != 1)
		return -1;
	*out = timegm(&tm);
	return 0;
}

static int
add_ext_conf(X509 *x, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509_EXTENSION *ext;
	int ok;

	X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
	if ((ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value)) == NULL)
		return -1;
	ok = X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	return ok == 1 ? 0 : -1;
}

static GENERAL_NAME *
gn_new(int type, const void *data, size_t len)
{
	GENERAL_NAME *gn;
	ASN1_STRING *s;

	s = type == GEN_DNS ? ASN1_IA5STRING_new() : ASN1_OCTET_STRING_new();
	if (s == NULL)
		return NULL;
	if (ASN1_STRING_set(s, data, (int)len) != 1 || (gn = GENERAL_NAME_new()) == NULL) {
		ASN1_STRING_free(s);
		return NULL;
	}
	GENERAL_NAME_set0_value(gn, type, s);
	return gn;
}

static int
push_subtree(STACK_OF(GENERAL_SUBTREE) * sk, GENERAL_NAME *gn)
{
	GENERAL_SUBTREE *st;

	if (gn == NULL)
		return -1;
	if ((st = GENERAL_SUBTREE_new()) == NULL) {
		GENERAL_NAME_free(gn);
		return -1;
	}
	GENERAL_NAME_free(st->base);
	st->base = gn;
	if (sk_GENERAL_SUBTREE_push(sk, st) <= 0) {
		GENERAL_SUBTREE_free(st);
		return -1;
	}
	return 0;
}

/*
 * Restrict the CA to the given DNS names. "*.x.com" becomes the subtree
 * ".x.com" (subdomains only); "x.com" covers x.com and its subdomains.
 * All IP addresses are excluded so the CA cannot vouch for an IP literal.
 */
static int
add_name_constraints(X509 *x, const char *const *names, size_t n, char *err, size_t errlen)
{
	static const unsigned char any4[8], any6[32];
	NAME_CONSTRAINTS *nc;
	const char *s;
	size_t i, len;
	int ok = -1;

	if ((nc = NAME_CONSTRAINTS_new()) == NULL)
		goto fail;
	nc->permittedSubtrees = sk_GENERAL_SUBTREE_new_null();
	nc->excludedSubtrees = sk_GENERAL_SUBTREE_new_null();
	if (nc->permittedSubtrees == NULL || nc->excludedSubtrees == NULL)
		goto fail;
	for (i = 0; i < n; i++) {
		if ((s = names[i]) == NULL) {
			ca_errf(err, errlen, "permitted name %zu is NULL", i);
			goto out;
		}
		len = strnlen(s, CA_MAX_NAME_LEN + 3);
		if (len >= 2 && s[0] == '*' && s[1] == '.') {
			if (!ca_host_valid(s + 2, len - 2)) {
				ca_errf(err, errlen, "invalid permitted name %zu", i);
				goto out;
			}
			if (push_subtree(nc->permittedSubtrees, gn_new(GEN_DNS, s + 1, len - 1)) !=
			    0)
				goto fail;
		} else {
			if (!ca_host_valid(s, len)) {
				ca_errf(err, errlen, "invalid permitted name %zu", i);
				goto out;
			}
			if (push_subtree(nc->permittedSubtrees, gn_new(GEN_DNS, s, len)) != 0)
				goto fail;
		}
	}
	if (push_subtree(nc->excludedSubtrees, gn_new(GEN_IPADD, any4, sizeof(any4))) != 0 ||
	    push_subtree(nc->excludedSubtrees, gn_new(GEN_IPADD, any6, sizeof(any6))) != 0)
		goto fail;
	/* RFC 5280 4.2.1.10: name constraints MUST be critical. */
	if (X509_add1_ext_i2d(x, NID_name_constraints, nc, 1, X509V3_ADD_DEFAULT) != 1)
		goto fail;
	ok = 0;
	goto out;
fail:
	ca_errf(err, errlen, "cannot build name constraints");
out:
	NAME_CONSTRAINTS_free(nc);
	return ok;
}

/* Fill the derived fields shared by generated and loaded CAs. */
static int
ca_finish(struct ca *ca, char *err, size_t errlen)
{
	const ASN1_OCTET_STRING *ski;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	BIO *bio = NULL;
	char *data;
	long n;
	int crit = -1;

	if (ca_time_to_epoch(X509_get0_notBefore(ca->cert), &ca->not_before) != 0 ||
	    ca_time_to_epoch(X509_get0_notAfter(ca->cert), &ca->not_after) != 0) {
		ca_errf(err, errlen, "cannot read the CA validity");
		return -1;
	}
	ca->nc = X509_get_ext_d2i(ca->cert, NID_name_constraints, &crit, NULL);
	if (ca->nc == NULL && crit != -1) {
		ca_errf(err, errlen, "unreadable name constraints in the CA certificate");
		return -1;
	}
	if ((ski = X509_get0_subject_key_id(ca->cert)) != NULL)
		ca->key_id = ASN1_OCTET_STRING_dup(ski);
	else if (X509_pubkey_digest(ca->cert, EVP_sha1(), md, &mdlen) == 1 &&
	         (ca->key_id = ASN1_OCTET_STRING_new()) != NULL &&
	         ASN1_OCTET_STRING_set(ca->key_id, md, (int)mdlen) != 1) {
		ASN1_OCTET_STRING_free(ca->key_id);
		ca->key_id = NULL;
	}
	if (ca->key_id == NULL) {
		ca_errf(err, errlen, "cannot compute the CA key identifier");
		return -1;
	}
	if ((bio = BIO_new(BIO_s_mem())) == NULL || PEM_write_bio_X509(bio, ca->cert) != 1 ||
	    (n = BIO_get_mem_data(bio, &data)) <= 0 || (ca->pem = malloc((size_t)n + 1)) == NULL) {
		BIO_free(bio);
		ca_errf(err, errlen, "cannot encode the CA certificate");
		return -1;
	}
	memcpy(ca->pem, data, (size_t)n);
	ca->pem[n] = '\0';
	ca->pem_len = (size_t)n;
	BIO_free(bio);
	return 0;
}

/*
 * X509_set_pubkey() keeps a reference to the whole key, private half
 * included, in the certificate (X509_PUBKEY caches the EVP_PKEY it was
 * given): ca_forget_key() would then free a reference, not the key, and
 * every child would keep the scalar with the certificate. The certificate
 * decoded from its own DER holds the public key only.
 */
static int
ca_public_cert(struct ca *ca)
{
	unsigned char *der = NULL;
	const unsigned char *p;
	X509 *x = NULL;
	int n;

	if ((n = i2d_X509(ca->cert, &der)) > 0) {
		p = der;
		x = d2i_X509(NULL, &p, n);
	}
	OPENSSL_free(der);
	if (x == NULL)
		return -1;
	X509_free(ca->cert);
	ca->cert = x;
	return 0;
}

/* Generate a fresh CA in memory. */
struct ca *
ca_generate(const struct ca_config *cfg, char *err, size_t errlen)
{
	static const struct ca_config defaults;
	unsigned char tag[CA_CN_TAG_BYTES];
	char cn[64];
	unsigned int validity, backdate;
	struct ca *ca;
	X509_NAME *name;
	time_t now;

	if (cfg == NULL)
		cfg = &defaults;
	validity = cfg->validity_secs ? cfg->validity_secs : CA_DEFAULT_VALIDITY_SECS;
	backdate = cfg->backdate_secs ? cfg->backdate_secs : CA_DEFAULT_BACKDATE_SECS;
	if (validity < CA_MIN_VALIDITY_SECS || validity > CA_MAX_VALIDITY_SECS) {
		ca_errf(err, errlen, "CA validity must be between %d and %d seconds",
		    CA_MIN_VALIDITY_SECS, CA_MAX_VALIDITY_SECS);
		return NULL;
	}
	if (backdate > CA_MAX_BACKDATE_SECS) {
		ca_errf(
		    err, errlen, "CA backdate must be at most %d seconds", CA_MAX_BACKDATE_SECS);
		return NULL;
	}
	if (cfg->n_permitted > CA_MAX_PERMITTED ||
	    (cfg->n_permitted > 0 && cfg->permitted_dns == NULL)) {
		ca_errf(
		    err, errlen, "too many or missing permitted names (max %d)", CA_MAX_PERMITTED);
		return NULL;
	}
	if ((ca = calloc(1, sizeof(*ca))) == NULL) {
		ca_errf(err, errlen, "out of memory");
		return NULL;
	}
	if ((ca->key = EVP_EC_gen("P-256")) == NULL ||
	    (ca->md = EVP_MD_fetch(NULL, "SHA256", NULL)) == NULL ||
	    (ca->cert = X509_new()) == NULL || RAND_bytes(tag, sizeof(tag)) != 1)
		goto fail;
	snprintf(
	    cn, sizeof(cn), "egressd sandbox CA %02x%02x%02x%02x", tag[0], tag[1], tag[2], tag[3]);
	name = X509_get_subject_name(ca->cert);
	now = time(NULL);
	if (X509_set_version(ca->cert, X509_VERSION_3) != 1 || ca_random_serial(ca->cert) != 0 ||
	    X509_NAME_add_entry_by_NID(name, NID_organizationName, MBSTRING_ASC,
	        (const unsigned char *)"egressd", -1, -1, 0) != 1 ||
	    X509_NAME_add_entry_by_NID(
	        name, NID_commonName, MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0) != 1 ||
	    X509_set_issuer_name(ca->cert, name) != 1 ||
	    ASN1_TIME_set(X509_getm_notBefore(ca->cert), now - (time_t)backdate) == NULL ||
	    ASN1_TIME_set(X509_getm_notAfter(ca->cert), now + (time_t)validity) == NULL ||
	    X509_set_pubkey(ca->cert, ca->key) != 1)
		goto fail;
	/* pathlen:0: a leaf we issue can never act as a CA itself. */
	if (add_ext_conf(ca->cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") != 0 ||
	    add_ext_conf(ca->cert, NID_key_usage, "critical,keyCertSign,cRLSign") != 0 ||
	    add_ext_conf(ca->cert, NID_subject_key_identifier, "hash") != 0)
		goto fail;
	if (cfg->n_permitted > 0 && add_name_constraints(ca->cert, cfg->permitted_dns,
	                                cfg->n_permitted, err, errlen) != 0) {
		ca_free(ca);
		return NULL;
	}
	if (X509_sign(ca->cert, ca->key, ca->md) <= 0 || ca_public_cert(ca) != 0)
		goto fail;
	if (ca_finish(ca, err, errlen) != 0) {
		ca_free(ca);
		return NULL;
	}
	return ca;
fail:
	ca_errf(err, errlen, "cannot generate the CA");
	ca_free(ca);
	return NULL;
}

/* Read a whole (small) file; the caller cleanses and frees *bufp. */
static int
read_small_file(const char *path, char **bufp, size_t *lenp, char *err, size_t errlen)
{
	struct stat st;
	char *buf;
	size_t len = 0;
	ssize_t r = 0;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) < 0) {
		ca_errf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > CA_MAX_FILE_BYTES) {
		ca_errf(err, errlen, "%s: not a regular file of at most %d bytes", path,
		    CA_MAX_FILE_BYTES);
		close(fd);
		return -1;
	}
	if ((buf = malloc(CA_MAX_FILE_BYTES + 1)) == NULL) {
		close(fd);
		ca_errf(err, errlen, "out of memory");
		return -1;
	}
	/* Read to EOF with a bound: the file may change under us. */
	while (len <= CA_MAX_FILE_BYTES) {
		r = read(fd, buf + len, CA_MAX_FILE_BYTES + 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	if (r < 0 || len > CA_MAX_FILE_BYTES) {
		OPENSSL_cleanse(buf, CA_MAX_FILE_BYTES + 1);
		free(buf);
		ca_errf(err, errlen, "%s: read error or too large", path);
		return -1;
	}
	*bufp = buf;
	*lenp = len;
	return 0;
}

static int
no_passphrase_cb(char *buf, int size, int rwflag, void *u)
{
	return -1; /* encrypted keys are refused, never prompted for */
}

static const char *
ec_digest_for(EVP_PKEY *key)
{
	char group[64];

	if (EVP_PKEY_get_utf8_string_param(
	        key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group), NULL) != 1)
		return NULL;
	if (strcmp(group, "prime256v1") == 0 || strcmp(group, "P-256") == 0)
		return "SHA256";
	if (strcmp(group, "secp384r1") == 0 || strcmp(group, "P-384") == 0)
		return "SHA384";
	if (strcmp(group, "secp521r1") == 0 || strcmp(group, "P-521") == 0)
		return "SHA512";
	return NULL;
}

/* Load and check an operator CA. */
struct ca *
ca_load(const char *cert_path, const char *key_path, char *err, size_t errlen)
{
	char *cbuf = NULL, *kbuf = NULL;
	size_t clen = 0, klen = 0;
	const char *mdname;
	struct ca *ca = NULL;
	BIO *bio;
	time_t now;

	if (cert_path == NULL || key_path == NULL) {
		ca_errf(err, errlen, "CA certificate and key paths are both required");
		return NULL;
	}
	if (read_small_file(cert_path, &cbuf, &clen, err, errlen) != 0)
		return NULL;
	if (read_small_file(key_path, &kbuf, &klen, err, errlen) != 0)
		goto out;
	if ((ca = calloc(1, sizeof(*ca))) == NULL) {
		ca_errf(err, errlen, "out of memory");
		goto out;
	}
	ca->loaded = true;
	if ((bio = BIO_new_mem_buf(cbuf, (int)clen)) != NULL)
		ca->cert = PEM_read_bio_X509(bio, NULL, no_passphrase_cb, NULL);
	BIO_free(bio);
	if (ca->cert == NULL) {
		ca_errf(err, errlen, "%s: no PEM certificate", cert_path);
		goto fail;
	}
	if ((bio = BIO_new_mem_buf(kbuf, (int)klen)) != NULL)
		ca->key = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase_cb, NULL);
	BIO_free(bio);
	if (ca->key == NULL) {
		ca_errf(err, errlen, "%s: no unencrypted PEM private key", key_path);
		goto fail;
	}
	if (!EVP_PKEY_is_a(ca->key, "EC") || (mdname = ec_digest_for(ca->key)) == NULL) {
		ca_errf(err, errlen, "%s: CA key must be EC on P-256, P-384 or P-521", key_path);
		goto fail;
	}
	/* A key that does not match would make every leaf unverifiable. */
	if (X509_check_private_key(ca->cert, ca->key) != 1) {
		ca_errf(err, errlen, "%s does not match %s", key_path, cert_path);
		goto fail;
	}
	if ((X509_get_extension_flags(ca->cert) & EXFLAG_KUSAGE) &&
	    !(X509_get_key_usage(ca->cert) & KU_KEY_CERT_SIGN)) {
		ca_errf(err, errlen, "%s: keyUsage lacks keyCertSign", cert_path);
		goto fail;
	}
	/* EXFLAG_CA is set only by basicConstraints CA:TRUE. */
	if (!(X509_get_extension_flags(ca->cert) & EXFLAG_CA) || X509_check_ca(ca->cert) != 1) {
		ca_errf(err, errlen, "%s is not a CA certificate (basicConstraints CA:TRUE)",
		    cert_path);
		goto fail;
	}
	if ((ca->md = EVP_MD_fetch(NULL, mdname, NULL)) == NULL) {
		ca_errf(err, errlen, "cannot fetch %s", mdname);
		goto fail;
	}
	if (ca_finish(ca, err, errlen) != 0)
		goto fail;
	now = time(NULL);
	if (ca->not_after <= now || ca->not_before > now) {
		ca_errf(err, errlen, "%s is expired or not yet valid", cert_path);
		goto fail;
	}
	goto out;
fail:
	ca_free(ca);
	ca = NULL;
out:
	if (cbuf != NULL) {
		OPENSSL_cleanse(cbuf, CA_MAX_FILE_BYTES + 1);
		free(cbuf);
	}
	if (kbuf != NULL) {
		OPENSSL_cleanse(kbuf, CA_MAX_FILE_BYTES + 1);
		free(kbuf);
	}
	return ca;
}

static int
write_all(int fd, const char *p, size_t n)
{
	ssize_t w;

	while (n > 0) {
		w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Write the certificate PEMs as one bundle, atomically, with mode 0644. */
int
ca_export_bundle(const struct ca *const *cas, size_t n, const char *path, char *err, size_t errlen)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	const char *slash;
	int fd, dfd, saved, wr = 0;

	if (cas == NULL || n == 0 || n > CA_MAX_BUNDLE || path == NULL || *path == '\0') {
		ca_errf(err, errlen, "no CA export path or no CA");
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		if (cas[i] == NULL) {
			ca_errf(err, errlen, "no CA export path or no CA");
			return -1;
		}
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmpXXXXXX", path) >= sizeof(tmp)) {
		ca_errf(err, errlen, "CA export path too long");
		return -1;
	}
	/* Same directory as the target, so rename() is atomic. */
	if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
		ca_errf(err, errlen, "%s: %s", tmp, strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < n && wr == 0; i++)
		wr = write_all(fd, cas[i]->pem, cas[i]->pem_len);
	if (fchmod(fd, 0644) != 0 || wr != 0 || fsync(fd) != 0) {
		saved = errno;
		close(fd);
		unlink(tmp);
		ca_errf(err, errlen, "%s: %s", tmp, strerror(saved));
		return -1;
	}
	if (close(fd) != 0 || rename(tmp, path) != 0) {
		saved = errno;
		unlink(tmp);
		ca_errf(err, errlen, "%s: %s", path, strerror(saved));
		return -1;
	}
	/* Make the rename durable; some filesystems refuse fsync on dirs. */
	slash = strrchr(path, '/');
	if (slash == NULL)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		if (fsync(dfd) != 0 && errno != EINVAL && errno != EROFS) {
			saved = errno;
			close(dfd);
			ca_errf(err, errlen, "%s: %s", dir, strerror(saved));
			return -1;
		}
		close(dfd);
	}
	return 0;
}

/* Write the certificate PEM atomically with mode 0644. */
int
ca_export_pem(const struct ca *ca, const char *path, char *err, size_t errlen)
{
	return ca_export_bundle(&ca, 1, path, err, errlen);
}

/* A public-only CA from a DER certificate (see ca.h). */
struct ca *
ca_from_der(const unsigned char *der, size_t len, char *err, size_t errlen)
{
	const unsigned char *p = der;
	struct ca *ca;
	EVP_PKEY *pub;

	if (der == NULL || len == 0 || len > CA_MAX_FILE_BYTES) {
		ca_errf(err, errlen, "no CA certificate");
		return NULL;
	}
	if ((ca = calloc(1, sizeof(*ca))) == NULL) {
		ca_errf(err, errlen, "out of memory");
		return NULL;
	}
	/* The whole buffer is one certificate: no trailing bytes. */
	ca->cert = d2i_X509(NULL, &p, (long)len);
	if (ca->cert == NULL || p != der + len) {
		ca_errf(err, errlen, "not one DER certificate");
		goto fail;
	}
	if (!(X509_get_extension_flags(ca->cert) & EXFLAG_CA) || X509_check_ca(ca->cert) != 1 ||
	    ((X509_get_extension_flags(ca->cert) & EXFLAG_KUSAGE) &&
	        !(X509_get_key_usage(ca->cert) & KU_KEY_CERT_SIGN))) {
		ca_errf(err, errlen, "not a CA certificate");
		goto fail;
	}
	if ((pub = X509_get0_pubkey(ca->cert)) == NULL || !EVP_PKEY_is_a(pub, "EC")) {
		ca_errf(err, errlen, "the CA key is not EC");
		goto fail;
	}
	if (ca_finish(ca, err, errlen) != 0)
		goto fail;
	return ca;
fail:
	ca_free(ca);
	return NULL;
}

/* The certificate as DER. */
int
ca_der(const struct ca *ca, unsigned char *buf, size_t cap)
{
	unsigned char *p = buf;
	int n;

	if (ca == NULL || buf == NULL || (n = i2d_X509(ca->cert, NULL)) <= 0 || (size_t)n > cap)
		return -1;
	return i2d_X509(ca->cert, &p) == n ? n : -1;
}

/* Copy the certificate PEM into buf. */
ssize_t
ca_pem(const struct ca *ca, char *buf, size_t cap)
{
	if (ca == NULL || buf == NULL || cap <= ca->pem_len)
		return -1;
	memcpy(buf, ca->pem, ca->pem_len + 1);
	return (ssize_t)ca->pem_len;
}

/* The certificate PEM, borrowed. */
const char *
ca_pem_view(const struct ca *ca, size_t *lenp)
{
	if (lenp != NULL)
		*lenp = ca->pem_len;
	return ca->pem;
}

/* SHA-256 fingerprint as lowercase hex. */
void
ca_fingerprint(const struct ca *ca, char out[65])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0, i;

	out[0] = '\0';
	if (X509_digest(ca->cert, EVP_sha256(), md, &n) != 1 || n != 32) {
		ERR_clear_error();
		return;
	}
	for (i = 0; i < n; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 0xf];
	}
	out[64] = '\0';
}

/* The CA certificate, borrowed. */
X509 *
ca_cert(const struct ca *ca)
{
	return ca->cert;
}

/* notBefore of the CA certificate. */
time_t
ca_not_before(const struct ca *ca)
{
	return ca->not_before;
}

/* notAfter of the CA certificate. */
time_t
ca_not_after(const struct ca *ca)
{
	return ca->not_after;
}

/* True if the CA was loaded from operator files. */
bool
ca_is_loaded(const struct ca *ca)
{
	return ca->loaded;
}

/* The CA key identifier, borrowed. */
const ASN1_OCTET_STRING *
ca_key_id(const struct ca *ca)
{
	return ca->key_id;
}

static bool
ieq(const char *a, const unsigned char *b, size_t n)
{
	size_t i;
	unsigned char x, y;

	for (i = 0; i < n; i++) {
		x = (unsigned char)a[i];
		y = b[i];
		if (y >= 'A' && y <= 'Z')
			y = (unsigned char)(y - 'A' + 'a');
		if (x != y)
			return false;
	}
	return true;
}

/* RFC 5280 dNSName subtree match, as OpenSSL's verifier applies it. */
static bool
dns_in_subtree(const char *host, size_t len, const ASN1_STRING *base)
{
	const unsigned char *b = ASN1_STRING_get0_data(base);
	size_t blen = (size_t)ASN1_STRING_length(base);

	if (blen == 0)
		return true;
	if (len < blen)
		return false;
	if (len > blen && b[0] != '.' && host[len - blen - 1] != '.')
		return false;
	return ieq(host + len - blen, b, blen);
}

static int
subtrees_match(const char *host, size_t len, STACK_OF(GENERAL_SUBTREE) * sk, bool *any_dns)
{
	GENERAL_SUBTREE *st;
	int i;

	*any_dns = false;
	for (i = 0; i < sk_GENERAL_SUBTREE_num(sk); i++) {
		st = sk_GENERAL_SUBTREE_value(sk, i);
		if (st->base->type != GEN_DNS)
			continue;
		*any_dns = true;
		if (dns_in_subtree(host, len, st->base->d.dNSName))
			return 1;
	}
	return 0;
}

/* True if the CA's name constraints allow host. */
bool
ca_permits(const struct ca *ca, const char *host, size_t len)
{
	bool any_dns;

	if (!ca_host_valid(host, len))
		return false;
	if (ca->nc == NULL)
		return true;
	if (subtrees_match(host, len, ca->nc->excludedSubtrees, &any_dns))
		return false;
	if (subtrees_match(host, len, ca->nc->permittedSubtrees, &any_dns))
		return true;
	/* No dNSName in the permitted subtrees: DNS names are unconstrained. */
	return !any_dns;
}

/* Sign x with the CA key. */
int
ca_sign(const struct ca *ca, X509 *x)
{
	if (ca->key == NULL || X509_sign(x, ca->key, ca->md) <= 0) {
		ERR_clear_error();
		return -1;
	}
	return 0;
}

/* Drop the private key (a worker after fork); EVP_PKEY_free wipes the scalar. */
void
ca_forget_key(struct ca *ca)
{
	if (ca == NULL)
		return;
	EVP_PKEY_free(ca->key);
	ca->key = NULL;
}

/* Whether the CA can still sign (its private key is held). */
bool
ca_can_sign(const struct ca *ca)
{
	return ca != NULL && ca->key != NULL;
}

/* Free the CA; EVP_PKEY_free wipes the private scalar. */
void
ca_free(struct ca *ca)
{
	if (ca == NULL)
		return;
	EVP_PKEY_free(ca->key);
	X509_free(ca->cert);
	EVP_MD_free(ca->md);
	NAME_CONSTRAINTS_free(ca->nc);
	ASN1_OCTET_STRING_free(ca->key_id);
	free(ca->pem);
	OPENSSL_cleanse(ca, sizeof(*ca));
	free(ca);
}
