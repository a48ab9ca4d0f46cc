/*
 * kreject: the kernel's refusals as audit records (dns process). Each
 * NFLOG record the parent passes on (CHAN_NFLOG) is parsed (pkthdr.c),
 * named by its rule and reason (krule.c), counted by reason in /metrics,
 * and written as one `conn_reject` line per destination and window
 * (logagg.c), which also goes to the deny webhook when there is one.
 */
#ifndef EGRESSD_KREJECT_H
#define EGRESSD_KREJECT_H

#include <stdbool.h>
#include <stdint.h>

#include "egressd/common/chan.h"

struct wstate;
struct kreject;

/* For the dns process's state (borrowed for its life). NULL: no memory. */
struct kreject *kreject_new(struct wstate *ws);

/* Write the pending summaries, then free. Accepts NULL. */
void kreject_free(struct kreject *k);

/* One record (borrowed for the call), at monotonic second now_s. */
void kreject_note(struct kreject *k, const struct chan_nflog *r, int64_t now_s);

/* Summaries of a window that ended by now_s. */
void kreject_flush(struct kreject *k, int64_t now_s);

#endif
