/*
 * SipHash-2-4 (Aumasson and Bernstein), 64-bit output: a keyed hash for
 * tables whose keys come from the workload (DNS names), so that nobody
 * without the per-process key can make two keys collide.
 */
#ifndef EGRESSD_SIPHASH_H
#define EGRESSD_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

#define SIPHASH_KEY_LEN 16

/* SipHash-2-4 of (msg, len) under key; msg is borrowed for the call. */
uint64_t siphash_24(const uint8_t key[SIPHASH_KEY_LEN], const void *msg, size_t len);

/* Fill key from getrandom(2). 0, or -1 with errno when no randomness. */
int siphash_random_key(uint8_t key[SIPHASH_KEY_LEN]) __attribute__((warn_unused_result));

#endif
