/*
 * DNS tunnelling limit (dns process): an allowed wildcard zone is a channel to
 * whoever runs its name servers, every distinct name a message. Distinct
 * names per wildcard rule are counted per window; past the limit the
 * proxy answers REFUSED.
 */
#ifndef EGRESSD_DNSTUNNEL_H
#define EGRESSD_DNSTUNNEL_H

#include <stdbool.h>
#include <stdint.h>

#define DNSTUNNEL_WINDOW_S 60 /* length of a counting window */
#define DNSTUNNEL_NAMES 50    /* distinct names per wildcard rule and window */
#define DNSTUNNEL_RULES 128   /* wildcard rules tracked at once (oldest reused) */

struct dnstunnel;

/* A counter with a fresh random key; NULL when no randomness or memory. */
struct dnstunnel *dnstunnel_new(void);

/* Free (accepts NULL). */
void dnstunnel_free(struct dnstunnel *t);

/*
 * Whether `name` (canonical) under wildcard rule `rule` may be resolved at
 * monotonic second now_s: already counted in this window, or under the
 * limit (then counted). Both strings are borrowed for the call. The first
 * refusal of a rule in a window logs dns_tunnel_suspected.
 */
bool dnstunnel_ok(struct dnstunnel *t, const char *rule, const char *name, int64_t now_s);

#endif
