/*
 * DNS upstream health (dns process). Reads the timeout and probe settings
 * with upstream's fallbacks and keeps one healthy flag per upstream: an
 * exchange that gets no answer, or a probe that gets none, ejects the
 * upstream; a probe that gets any answer brings it back. Queries use the
 * healthy ones in configured order, all of them when none is. Pure: it
 * never sends or logs anything itself.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "egressd/dns/dnshealth.h"

/* A whole number of seconds as Go's strconv.Atoi reads it; false if not one. */
static bool
dnshealth_atoi(const char *v, long *out)
{
	char *end;
	long l;

	if (v[0] == '\0' || isspace((unsigned char)v[0]))
		return false;
	errno = 0;
	l = strtol(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0')
		return false;
	*out = l;
	return true;
}

/* Letters, digits, '-' and '_', labels of 1..63, at most 253 in all; "." alone is the root. */
static bool
dnshealth_name_ok(const char *v, size_t len)
{
	size_t lab = 0;

	if (len == 0 || len > DNSHEALTH_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)v[i];
		if (c == '.') {
			if (lab == 0)
				return false;
			lab = 0;
			continue;
		}
		if (!isalnum(c) && c != '-' && c != '_')
			return false;
		if (++lab > 63)
			return false;
	}
	return lab > 0;
}

/* See dnshealth.h. */
void
dnshealth_settings(const char *timeout, const char *probe, const char *interval,
    struct dnshealth_settings *out, enum dnshealth_parse st[3])
{
	long l;

	memset(out, 0, sizeof(*out));
	out->timeout_s = DNSHEALTH_TIMEOUT_DEFAULT_S;
	st[0] = DNSHEALTH_DEFAULT;
	if (timeout != NULL && timeout[0] != '\0') {
		if (!dnshealth_atoi(timeout, &l) || l <= 0)
			st[0] = DNSHEALTH_INVALID;
		else if (l > DNSHEALTH_TIMEOUT_MAX_S) {
			out->timeout_s = DNSHEALTH_TIMEOUT_MAX_S;
			st[0] = DNSHEALTH_CLAMPED;
		} else {
			out->timeout_s = (unsigned)l;
			st[0] = DNSHEALTH_SET;
		}
	}
	st[1] = DNSHEALTH_DEFAULT;
	if (probe != NULL && probe[0] != '\0' && strcmp(probe, ".") != 0) {
		size_t len = strlen(probe);
		if (probe[len - 1] == '.')
			len--;
		if (dnshealth_name_ok(probe, len)) {
			memcpy(out->probe, probe, len);
			out->probe[len] = '\0';
			for (size_t i = 0; i < len; i++)
				out->probe[i] = (char)tolower((unsigned char)out->probe[i]);
			st[1] = DNSHEALTH_SET;
		} else
			st[1] = DNSHEALTH_INVALID;
	}
	out->interval_s = DNSHEALTH_INTERVAL_DEFAULT_S;
	st[2] = DNSHEALTH_DEFAULT;
	if (interval != NULL && interval[0] != '\0') {
		if (!dnshealth_atoi(interval, &l) || l < DNSHEALTH_INTERVAL_MIN_S ||
		    l > DNSHEALTH_INTERVAL_MAX_S)
			st[2] = DNSHEALTH_INVALID;
		else {
			out->interval_s = (unsigned)l;
			st[2] = DNSHEALTH_SET;
		}
	}
	out->probe_timeout_s = out->timeout_s < DNSHEALTH_PROBE_TIMEOUT_MAX_S
	                           ? out->timeout_s
	                           : DNSHEALTH_PROBE_TIMEOUT_MAX_S;
}

/* See dnshealth.h. */
void
dnshealth_init(struct dnshealth *h, size_t n)
{
	memset(h, 0, sizeof(*h));
	h->n = n < DNSHEALTH_MAX ? n : DNSHEALTH_MAX;
	for (size_t i = 0; i < h->n; i++)
		h->healthy[i] = true;
}

/* See dnshealth.h. */
size_t
dnshealth_order(const struct dnshealth *h, size_t *out, bool *all_down)
{
	size_t k = 0;

	for (size_t i = 0; i < h->n; i++)
		if (h->healthy[i])
			out[k++] = i;
	*all_down = k == 0 && h->n > 0;
	if (k == 0)
		for (size_t i = 0; i < h->n; i++)
			out[k++] = i;
	return k;
}

static bool
dnshealth_record(struct dnshealth *h, size_t i, bool answered)
{
	bool was;

	if (i >= h->n)
		return false;
	was = h->healthy[i];
	if (answered)
		h->fails[i] = 0;
	else if (h->fails[i] < UINT32_MAX)
		h->fails[i]++;
	h->healthy[i] = answered;
	return was != answered;
}

/* See dnshealth.h. */
bool
dnshealth_exchange(struct dnshealth *h, size_t i, bool answered)
{
	/* An answer to a query does not bring an ejected upstream back: only a probe does. */
	if (answered && i < h->n && !h->healthy[i])
		return false;
	return dnshealth_record(h, i, answered);
}

/* See dnshealth.h. */
bool
dnshealth_probe(struct dnshealth *h, size_t i, bool answered)
{
	return dnshealth_record(h, i, answered);
}

/* See dnshealth.h. */
bool
dnshealth_healthy(const struct dnshealth *h, size_t i)
{
	return i < h->n && h->healthy[i];
}
