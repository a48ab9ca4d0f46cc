/*
 * Distinct-name counting per wildcard rule (worker, DNS proxy). Names are
 * remembered as 64-bit SipHash-2-4 values under a key drawn per process:
 * the workload chooses the names, and with an unkeyed or short hash it
 * could pick a payload name that collides with one already counted and
 * pass for free (a 32-bit FNV-1a collision takes under a second). Never
 * allocates after dnstunnel_new; never logs more than one line per rule
 * and window.
 */
#include <stdlib.h>
#include <string.h>

#include "egressd/common/log.h"
#include "egressd/common/siphash.h"
#include "egressd/dns/dnstunnel.h"

struct dnstunnel_rule {
	uint64_t rule_hash; /* keyed hash of the wildcard target; 0: free */
	int64_t window;     /* start of the current window (monotonic s) */
	size_t n;
	uint64_t names[DNSTUNNEL_NAMES];
	bool alerted;
};

struct dnstunnel {
	uint8_t key[SIPHASH_KEY_LEN];
	struct dnstunnel_rule rules[DNSTUNNEL_RULES];
};

static uint64_t
dnstunnel_hash(const struct dnstunnel *t, const char *s)
{
	uint64_t h = siphash_24(t->key, s, strlen(s));

	return h ? h : 1; /* 0 marks a free slot */
}

/* A counter with a fresh random key; NULL when no randomness or memory. */
struct dnstunnel *
dnstunnel_new(void)
{
	struct dnstunnel *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return NULL;
	if (siphash_random_key(t->key) != 0) {
		free(t);
		return NULL;
	}
	return t;
}

/* Free (accepts NULL). */
void
dnstunnel_free(struct dnstunnel *t)
{
	free(t);
}

/* Whether the name may be resolved; counts it when new in the window. */
bool
dnstunnel_ok(struct dnstunnel *t, const char *rule, const char *name, int64_t now_s)
{
	uint64_t rh = dnstunnel_hash(t, rule), nh = dnstunnel_hash(t, name);
	struct dnstunnel_rule *r = NULL, *oldest = &t->rules[0];

	for (size_t i = 0; i < DNSTUNNEL_RULES; i++) {
		if (t->rules[i].rule_hash == rh) {
			r = &t->rules[i];
			break;
		}
		if (t->rules[i].window < oldest->window)
			oldest = &t->rules[i];
	}
	if (r == NULL) {
		r = oldest;
		memset(r, 0, sizeof(*r));
		r->rule_hash = rh;
		r->window = now_s;
	}
	if (now_s - r->window >= DNSTUNNEL_WINDOW_S) {
		r->window = now_s;
		r->n = 0;
		r->alerted = false;
	}
	for (size_t i = 0; i < r->n; i++)
		if (r->names[i] == nh)
			return true;
	if (r->n >= DNSTUNNEL_NAMES) {
		if (!r->alerted) {
			struct log_line l;
			r->alerted = true;
			log_begin(&l, LOG_WARN, "dns", "dns_tunnel_suspected");
			log_str(&l, "rule", rule);
			log_str(&l, "name", name);
			log_uint(&l, "limit", DNSTUNNEL_NAMES);
			log_uint(&l, "window_s", DNSTUNNEL_WINDOW_S);
			log_end(&l);
		}
		return false;
	}
	r->names[r->n++] = nh;
	return true;
}
