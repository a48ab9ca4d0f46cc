/*
 * Redactor internals for tests and the fuzz target only: enumerate the
 * patterns a set was built with, to check the automaton against a naive
 * search. Never include this from production code.
 */
#ifndef EGRESSD_VAULT_REDACT_INTERNAL_H
#define EGRESSD_VAULT_REDACT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

struct redact_set;

/* Calls cb once per distinct pattern (bytes valid during the call); 0 or -1. */
int redact_set_foreach_pattern(
    const struct redact_set *set, void (*cb)(const uint8_t *p, size_t len, void *arg), void *arg)
    __attribute__((warn_unused_result));

#endif
