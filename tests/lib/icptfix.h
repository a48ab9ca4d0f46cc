/*
 * Pieces the interceptor's in-process tests share (tests only): the
 * interceptor's state as intercept_new() leaves it, the fake parent's
 * answers, a self-signed certificate for an upstream in the test, and a
 * snapshot of one credential. A piece that cannot set itself up aborts
 * the test.
 */
#ifndef EGRESSD_TESTS_ICPTFIX_H
#define EGRESSD_TESTS_ICPTFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "vault/intercept.h"

struct event_base;
struct vault_snap;

/* The host every fixture serves. */
#define ICPTFIX_HOST "api.allowed.test"

/*
 * An interceptor on base (ops, arg), as intercept_new() sets one up for a
 * worker with 64 descriptors (no keep-alive timeout set); up_ctx verifies
 * against trust (none: NULL).
 */
struct intercept *icptfix_intercept(
    struct event_base *base, const struct intercept_ops *ops, void *arg, X509 *trust);

/* The worker's marked socket: a plain one of family, delivered on a later turn of base. */
int icptfix_socket(struct event_base *base, int family, intercept_socket_cb cb, void *cbarg);

/* ops: only ICPTFIX_HOST is allowed; every destination is. */
bool icptfix_sni_allowed(void *arg, const char *canon);
bool icptfix_dst_ok(void *arg, const char *canon, int family, const uint8_t *addr, uint16_t port);

/* A P-256 key and a self-signed CA certificate for DNS:host (an hour either way). */
void icptfix_cert(const char *host, X509 **cert, EVP_PKEY **key);

/* A snapshot of bindings (JSON: "bindings" and credential "c1") with c1 = secret[0..n). */
struct vault_snap *icptfix_snap(const char *json, const uint8_t *secret, size_t n);

#endif
