/*
 * Conntrack revocation (parent): delete established flows to destinations
 * that are no longer allowed.
 */
#ifndef EGRESSD_CTFLUSH_H
#define EGRESSD_CTFLUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A revoked destination: prefix, and a port (0: every port). */
struct ctflush_target {
	int family;
	uint8_t addr[16];
	uint8_t prefix;
	uint16_t port;
};

/*
 * Delete every conntrack entry whose original destination matches one of
 * t[0..n), except flows carrying skip_mark. *deleted gets the count.
 */
int ctflush_revoke(const struct ctflush_target *t, size_t n, uint32_t skip_mark, size_t *deleted,
    char *err, size_t errlen) __attribute__((warn_unused_result));

#endif
