/*
 * wipe: OpenSSL's memory is wiped when it is freed. OpenSSL decodes a
 * private key through intermediate buffers (the DER of a PEM file, one per
 * decoder it tries) that it frees without clearing; a worker forked from
 * the parent's heap would inherit those copies of the CA key, and any
 * process keeps copies of the secrets it handled. Installed first thing in
 * main(), before OpenSSL allocates anything.
 */
#ifndef EGRESSD_WIPE_H
#define EGRESSD_WIPE_H

/* 0, or -1 if OpenSSL had already allocated (then nothing changes). */
int wipe_install(void) __attribute__((warn_unused_result));

#endif
