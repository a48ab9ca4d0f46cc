/*
 * ca_internal: helpers shared by certs/ modules and their tests only.
 */
#ifndef EGRESSD_CERTS_CA_INTERNAL_H
#define EGRESSD_CERTS_CA_INTERNAL_H

#include <stddef.h>
#include <time.h>

#include <openssl/asn1.h>
#include <openssl/x509.h>

#include "certs/ca.h"

/* Format an error message into err (may be NULL), with the first queued
 * OpenSSL error appended; clears the OpenSSL error queue. */
void ca_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Give x a random positive 128-bit serial number. */
int ca_random_serial(X509 *x) CA_WUR;

/* Convert an ASN1_TIME to seconds since the epoch. */
int ca_time_to_epoch(const ASN1_TIME *t, time_t *out) CA_WUR;

/* The CA's key identifier (its SKI, or the SHA-1 of its public key), for
 * the authorityKeyIdentifier of issued certificates. Borrowed. */
const ASN1_OCTET_STRING *ca_key_id(const struct ca *ca);

#endif
