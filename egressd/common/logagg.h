/*
 * Aggregation of repeated log events (dns and intercept): a hostile workload can make
 * the sidecar refuse something as often as it likes, and one line per
 * refusal would fill the disk and drown the audit trail. Per window, the
 * first event of each key (a DNS name) is logged in full; repeats are
 * counted and written as one summary line per key when the window ends;
 * keys past the table's cap are counted in one overflow line. Only
 * deny-type events use it: injection and mutation records never do.
 */
#ifndef EGRESSD_LOGAGG_H
#define EGRESSD_LOGAGG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egressd/common/log.h"

#define LOGAGG_WINDOW_S 60 /* summary window (seconds, monotonic) */
#define LOGAGG_MAX_KEYS 64 /* distinct keys logged per window, per event */
#define LOGAGG_MAX_KEY 253 /* key bytes kept (a DNS name) */
#define LOGAGG_MAX_EVENT 32

enum logagg_verdict {
	LOGAGG_LOG,      /* first of its key in the window: write the full line */
	LOGAGG_COUNTED,  /* a repeat: counted in the key's summary */
	LOGAGG_OVERFLOW, /* the window's key table is full: counted in the overflow line */
};

struct logagg;

/*
 * An aggregator for `event` of `module` (constants, borrowed for its
 * life), summaries at `level`. window_s and max_keys may lower the
 * compiled limits (0: the limit), never raise them. NULL: no memory.
 */
struct logagg *logagg_new(const char *module, const char *event, enum log_level level,
    unsigned window_s, size_t max_keys);

/* Write what is pending (as at a window's end), then free. Accepts NULL. */
void logagg_free(struct logagg *a);

/*
 * Note one event for `key` at monotonic second now_s (borrowed for the
 * call). A window that ended is summarised first. The caller writes its
 * full line only on LOGAGG_LOG.
 */
enum logagg_verdict logagg_note(struct logagg *a, const char *key, int64_t now_s)
    __attribute__((warn_unused_result));

/*
 * Summarise the window if it ended by now_s (or at once when `force`):
 * one "<event>_summary" line per key with repeats (name, count,
 * suppressed, window_s), one "<event>_overflow" line if keys overflowed.
 */
void logagg_flush(struct logagg *a, int64_t now_s, bool force);

/* Events not written in full since start (repeats and overflow). */
uint64_t logagg_suppressed(const struct logagg *a);

#endif
