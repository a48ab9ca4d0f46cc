/*
 * Per-key, per-window aggregation of deny-type log events (dns and intercept). The
 * table is a fixed array of LOGAGG_MAX_KEYS entries searched linearly
 * with exact comparison of the key, so a chosen name can neither collide
 * into another's count nor grow memory. Lines written per window are
 * bounded by 2 * max_keys + 1 whatever the workload sends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egressd/common/logagg.h"

struct logagg_entry {
	char key[LOGAGG_MAX_KEY + 1];
	uint64_t count; /* events in this window, the logged one included */
};

struct logagg {
	const char *module;
	char summary_event[LOGAGG_MAX_EVENT + 16];
	char overflow_event[LOGAGG_MAX_EVENT + 16];
	enum log_level level;
	int64_t window_s;
	size_t max_keys;
	int64_t window; /* start of the current window; -1: none yet */
	size_t n;
	uint64_t overflow; /* events of keys that found the table full */
	uint64_t suppressed;
	struct logagg_entry *e;
};

/* An aggregator for one event; limits may only be lowered. */
struct logagg *
logagg_new(
    const char *module, const char *event, enum log_level level, unsigned window_s, size_t max_keys)
{
	struct logagg *a;

	if (strlen(event) > LOGAGG_MAX_EVENT || (a = calloc(1, sizeof(*a))) == NULL)
		return NULL;
	a->max_keys = max_keys == 0 || max_keys > LOGAGG_MAX_KEYS ? LOGAGG_MAX_KEYS : max_keys;
	a->e = calloc(a->max_keys, sizeof(*a->e));
	if (a->e == NULL) {
		free(a);
		return NULL;
	}
	a->module = module;
	snprintf(a->summary_event, sizeof(a->summary_event), "%s_summary", event);
	snprintf(a->overflow_event, sizeof(a->overflow_event), "%s_overflow", event);
	a->level = level;
	a->window_s = window_s == 0 || window_s > LOGAGG_WINDOW_S ? LOGAGG_WINDOW_S : window_s;
	a->window = -1;
	return a;
}

/* Write the window's summaries and start an empty table. */
static void
logagg_summarise(struct logagg *a)
{
	struct log_line l;

	for (size_t i = 0; i < a->n; i++) {
		if (a->e[i].count < 2)
			continue; /* its one event was logged in full */
		log_begin(&l, a->level, a->module, a->summary_event);
		log_str(&l, "name", a->e[i].key);
		log_uint(&l, "count", a->e[i].count);
		log_uint(&l, "suppressed", a->e[i].count - 1);
		log_uint(&l, "window_s", (unsigned long long)a->window_s);
		log_end(&l);
	}
	if (a->overflow > 0) {
		log_begin(&l, a->level, a->module, a->overflow_event);
		log_uint(&l, "count", a->overflow);
		log_uint(&l, "names_cap", a->max_keys);
		log_uint(&l, "window_s", (unsigned long long)a->window_s);
		log_end(&l);
	}
	a->n = 0;
	a->overflow = 0;
	a->window = -1;
}

/* Summarise if the window ended by now_s, or at once when forced. */
void
logagg_flush(struct logagg *a, int64_t now_s, bool force)
{
	if (a == NULL || a->window < 0)
		return;
	if (force || now_s - a->window >= a->window_s)
		logagg_summarise(a);
}

/* Note one event; only LOGAGG_LOG asks the caller for its full line. */
enum logagg_verdict
logagg_note(struct logagg *a, const char *key, int64_t now_s)
{
	size_t kl = strnlen(key, LOGAGG_MAX_KEY + 1);

	logagg_flush(a, now_s, false);
	if (a->window < 0)
		a->window = now_s;
	if (kl > LOGAGG_MAX_KEY)
		kl = LOGAGG_MAX_KEY; /* longer keys share their first bytes' entry */
	for (size_t i = 0; i < a->n; i++) {
		if (strncmp(a->e[i].key, key, kl) == 0 && a->e[i].key[kl] == '\0') {
			a->e[i].count++;
			a->suppressed++;
			return LOGAGG_COUNTED;
		}
	}
	if (a->n >= a->max_keys) {
		a->overflow++;
		a->suppressed++;
		return LOGAGG_OVERFLOW;
	}
	memcpy(a->e[a->n].key, key, kl);
	a->e[a->n].key[kl] = '\0';
	a->e[a->n].count = 1;
	a->n++;
	return LOGAGG_LOG;
}

/* Events not written in full since start. */
uint64_t
logagg_suppressed(const struct logagg *a)
{
	return a == NULL ? 0 : a->suppressed;
}

/* Write what is pending, then free. */
void
logagg_free(struct logagg *a)
{
	if (a == NULL)
		return;
	logagg_summarise(a);
	free(a->e);
	free(a);
}
