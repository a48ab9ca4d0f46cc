/*
 * ca: the per-sandbox certificate authority (ECDSA P-256).
 *
 * Generated in memory at start, or loaded from operator-given files for a
 * stable fingerprint. Only the public certificate ever leaves the process.
 */
#ifndef EGRESSD_CERTS_CA_H
#define EGRESSD_CERTS_CA_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#define CA_WUR __attribute__((warn_unused_result))

/* Limits and defaults (configuration may lower the maxima, never raise). */
#define CA_DEFAULT_VALIDITY_SECS (7 * 24 * 3600)
/* Short lifetimes exist for renewal tests; a sandbox keeps the week. */
#define CA_MIN_VALIDITY_SECS 20
#define CA_MAX_VALIDITY_SECS (3650 * 24 * 3600)
#define CA_DEFAULT_BACKDATE_SECS 300
#define CA_MAX_BACKDATE_SECS (24 * 3600)
#define CA_MAX_PERMITTED 4096   /* name-constraint entries */
#define CA_MAX_NAME_LEN 253     /* DNS name, no trailing dot */
#define CA_MAX_FILE_BYTES 65536 /* operator cert or key file */
#define CA_ERR_LEN 256          /* suggested size of error buffers */
#define CA_MAX_BUNDLE 2         /* CAs in one export: the current and the previous */

struct ca;

/* Settings for ca_generate(); a zeroed struct means the defaults. */
struct ca_config {
	unsigned int validity_secs; /* 0: CA_DEFAULT_VALIDITY_SECS */
	unsigned int backdate_secs; /* 0: CA_DEFAULT_BACKDATE_SECS */
	/*
	 * Optional X.509 name constraints: canonical DNS names ("api.x.com",
	 * which also covers its subdomains) or wildcards ("*.x.com", which
	 * covers the subdomains only). NULL or 0 entries: unconstrained.
	 * Borrowed for the duration of the call.
	 */
	const char *const *permitted_dns;
	size_t n_permitted;
};

/* Generate a fresh CA in memory; its certificate holds the public key only
 * (ca_forget_key() drops the last reference to the private one). Owned:
 * free with ca_free(). */
struct ca *ca_generate(const struct ca_config *cfg, char *err, size_t errlen) CA_WUR;

/* Load an operator CA (PEM cert + PEM key); refuses a non-CA, a non-EC key,
 * a key that does not match, or a certificate outside its validity. Owned. */
struct ca *ca_load(const char *cert_path, const char *key_path, char *err, size_t errlen) CA_WUR;

/* Write the public certificate PEM atomically (temp file, fsync, rename),
 * mode 0644. Never writes the private key. */
int ca_export_pem(const struct ca *ca, const char *path, char *err, size_t errlen) CA_WUR;

/*
 * Write the certificate PEMs of cas[0..n) (1..CA_MAX_BUNDLE, none NULL) as
 * one bundle, the same way: the export during a renewal's overlap.
 */
int ca_export_bundle(
    const struct ca *const *cas, size_t n, const char *path, char *err, size_t errlen) CA_WUR;

/*
 * A public-only CA from its DER certificate (what the parent pushes to a
 * child after a renewal): refused unless it is a CA certificate
 * (basicConstraints CA:TRUE, keyCertSign if keyUsage is present) with an
 * EC key. It holds no private key: ca_sign() fails. Owned.
 */
struct ca *ca_from_der(const unsigned char *der, size_t len, char *err, size_t errlen) CA_WUR;

/* The certificate as DER into buf; its length, or -1 if cap is too small. */
int ca_der(const struct ca *ca, unsigned char *buf, size_t cap) CA_WUR;

/* Copy the certificate PEM into buf (NUL-terminated); returns its length
 * without the NUL, or -1 if cap is too small. */
ssize_t ca_pem(const struct ca *ca, char *buf, size_t cap) CA_WUR;

/* The certificate PEM, borrowed until ca_free(); *lenp gets its length. */
const char *ca_pem_view(const struct ca *ca, size_t *lenp);

/* SHA-256 fingerprint of the certificate as 64 lowercase hex digits + NUL. */
void ca_fingerprint(const struct ca *ca, char out[65]);

/* The certificate, borrowed until ca_free(). */
X509 *ca_cert(const struct ca *ca);

/* Validity bounds of the CA certificate (seconds since the epoch). */
time_t ca_not_before(const struct ca *ca);
time_t ca_not_after(const struct ca *ca);

/* True if the CA's name constraints (if any) allow a leaf for host. */
bool ca_permits(const struct ca *ca, const char *host, size_t len);

/* True if the CA came from operator files rather than ca_generate(). */
bool ca_is_loaded(const struct ca *ca);

/* Sign a to-be-issued certificate with the CA key; sets nothing else. */
int ca_sign(const struct ca *ca, X509 *x) CA_WUR;

/* Free the CA; the private key is wiped. Accepts NULL. */
void ca_free(struct ca *ca);

/*
 * Drop the CA private key from this process (a worker, after fork: its
 * leaves are minted by the parent). The certificate stays; ca_sign()
 * fails from then on.
 */
void ca_forget_key(struct ca *ca);

/* Whether this process holds the CA private key. */
bool ca_can_sign(const struct ca *ca);

/* True if name is a canonical host name: lowercase LDH labels, no trailing
 * dot, no NUL, at most CA_MAX_NAME_LEN bytes, last label not all digits. */
bool ca_host_valid(const char *name, size_t len);

#endif
