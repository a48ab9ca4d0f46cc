/*
 * trust: the upstream trust anchors, read once by the parent before it
 * forks the worker (as relayd and OpenSSH do), so that a trust file or
 * directory readable only by root works with an unprivileged worker.
 */
#ifndef EGRESSD_CERTS_TRUST_H
#define EGRESSD_CERTS_TRUST_H

#include <stddef.h>
#include <sys/socket.h>

#include <openssl/x509.h>

#define TRUST_MAX_FILES 4096         /* files read from a trust directory */
#define TRUST_MAX_FILE_BYTES 4194304 /* one trust file */

/*
 * Every certificate (and CRL) of a PEM file, or of every regular file of a
 * directory (hashed c_rehash names or any other; files that hold no PEM
 * certificate are skipped). Owned store, or NULL with one sentence in err
 * naming the path, what failed and the uid that read it.
 */
X509_STORE *trust_load(const char *path, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * The system store into st, for a context given no trust of its own: the
 * hashed directory (SSL_CERT_DIR, else OpenSSL's default) looked up lazily
 * at verification when it holds c_rehash names, so that nothing is parsed
 * at start; else, or when SSL_CERT_FILE is set, OpenSSL's default paths
 * (the bundle file read now). 1 on success, 0 on failure.
 */
int trust_system_paths(X509_STORE *st) __attribute__((warn_unused_result));

/*
 * A client SSL of ctx toward a peer the sidecar dials itself (the chained
 * proxy): its certificate verified for name, which is also the SNI, when
 * name is non-empty, else for the address of ss (an IP subjectAltName, no
 * SNI). NULL on failure.
 */
struct ssl_st *trust_peer_ssl(struct ssl_ctx_st *ctx, const struct sockaddr *ss, const char *name);

#endif
