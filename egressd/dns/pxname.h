/*
 * The chained upstream proxy's name, resolved by the dns process for the
 * sidecar's own dials (egressd/dns/pxname.c, docs/api.md).
 */
#ifndef EGRESSD_PXNAME_H
#define EGRESSD_PXNAME_H

#include "egressd/dns/dnsproxy.h"

/*
 * Seconds: the answer's TTL is clamped to [MIN, MAX] before the name is
 * resolved again; a failed resolution is tried again after RETRY, and a
 * failure is logged at most once per WARN while it lasts.
 */
#define PXNAME_MIN_S 5
#define PXNAME_MAX_S 300
#define PXNAME_RETRY_S 5
#define PXNAME_WARN_S 60
/* Bytes of a filtered answer at most (a longer one gives no address). */
#define PXNAME_ANSWER_MAX 4096

struct wstate;
struct pxname;

/* A resolver for name (canonical) through d's upstreams; NULL when out of memory. */
struct pxname *pxname_new(struct dnsproxy *d, struct wstate *ws, const char *name);

/*
 * Resolve now and whenever the answer runs out; first_cb(arg) once the
 * first resolution is over (its addresses in force, or failed).
 */
void pxname_start(struct pxname *px, void (*first_cb)(void *arg), void *arg);

/* After the resolver is closed (its queries cancelled). Accepts NULL. */
void pxname_free(struct pxname *px);

#endif
