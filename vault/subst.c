/*
 * subst: placeholder substitution of the interceptor (intercept process).
 * Only a request that matched exactly one binding is substituted, only
 * with that binding's substitutions and only in the places it names; the
 * replacement is literal and single-pass (a secret that happens to hold a
 * placeholder is never rescanned). Must never log a value; every buffer
 * that held one is wiped before it is freed.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <event2/buffer.h>
#include <openssl/crypto.h>

#include "policy/binding.h"
#include "vault/secret.h"
#include "vault/snap.h"
#include "vault/subst.h"

struct subst_stream {
	struct subst_rules rules;
	uint8_t hold[BINDING_PLACEHOLDER_MAX]; /* a placeholder's beginning, cut by a feed */
	size_t nhold;
	uint64_t count;
	size_t grown; /* bytes the replacements added (at most SUBST_MAX_GROWTH) */
};

static const char subst_hex[] = "0123456789ABCDEF";

static bool
subst_unreserved(uint8_t c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

/* Encoding; see subst.h. */
int
subst_encode(const uint8_t *v, size_t n, enum subst_enc enc, uint8_t **out, size_t *outlen)
{
	uint8_t *o = malloc(n * 6 + 1); /* \u00XX is the longest form of one byte */
	size_t k = 0;

	if (o == NULL)
		return -1;
	for (size_t i = 0; i < n; i++) {
		uint8_t c = v[i];

		if (enc == SUBST_RAW) {
			o[k++] = c;
		} else if (enc == SUBST_URL || enc == SUBST_FORM) {
			if (subst_unreserved(c)) {
				o[k++] = c;
			} else if (enc == SUBST_FORM && c == ' ') {
				o[k++] = '+';
			} else {
				o[k++] = '%';
				o[k++] = (uint8_t)subst_hex[c >> 4];
				o[k++] = (uint8_t)subst_hex[c & 15];
			}
		} else if (c == '"' || c == '\\') {
			o[k++] = '\\';
			o[k++] = c;
		} else if (c == '\t') {
			o[k++] = '\\';
			o[k++] = 't';
		} else if (c < 0x20 || c == 0x7f) {
			memcpy(o + k, "\\u00", 4);
			o[k + 4] = (uint8_t)subst_hex[c >> 4];
			o[k + 5] = (uint8_t)subst_hex[c & 15];
			k += 6;
		} else {
			o[k++] = c; /* UTF-8 stays as it is inside a JSON string */
		}
	}
	*out = o;
	*outlen = k;
	return 0;
}

/* Wipe and free; see subst.h. */
void
subst_free(uint8_t *p, size_t n)
{
	if (p == NULL)
		return;
	OPENSSL_cleanse(p, n);
	free(p);
}

/* Rules of a binding for a place; see subst.h. */
int
subst_rules_build(const struct vault_snap *snap, size_t idx, unsigned place, enum subst_enc enc,
    struct subst_rules *rules)
{
	const struct binding_set *bs = vault_snap_bindings(snap);
	struct binding_substitution s;

	memset(rules, 0, sizeof(*rules));
	for (size_t j = 0; binding_subst_get(bs, idx, j, &s) == 0; j++) {
		const struct secret *v = vault_snap_secret(snap, s.credential);
		struct subst_rule *r;
		uint8_t *raw;
		size_t n;
		int rc;

		if (!(s.in & place) || rules->n == sizeof(rules->r) / sizeof(rules->r[0]))
			continue;
		if (v == NULL)
			goto fail;
		n = secret_len(v);
		if ((raw = malloc(n)) == NULL)
			goto fail;
		r = &rules->r[rules->n];
		rc = secret_append_raw(v, raw, n) == 0
		         ? subst_encode(raw, n, enc, &r->rep, &r->replen)
		         : -1;
		subst_free(raw, n);
		if (rc != 0)
			goto fail;
		/* A copy: the body may outlive the request's snapshot (early response). */
		if ((r->ph = malloc(s.len)) == NULL) {
			subst_free(r->rep, r->replen);
			goto fail;
		}
		memcpy(r->ph, s.placeholder, s.len);
		r->phlen = s.len;
		r->credential = s.credential;
		rules->first[s.placeholder[0]] = true;
		if (s.len > rules->maxlen)
			rules->maxlen = s.len;
		rules->n++;
	}
	return 0;
fail:
	subst_rules_clear(rules);
	return -1;
}

/* Wipe the replacements; see subst.h. */
void
subst_rules_clear(struct subst_rules *rules)
{
	for (size_t i = 0; i < rules->n; i++) {
		subst_free(rules->r[i].rep, rules->r[i].replen);
		free(rules->r[i].ph);
	}
	memset(rules, 0, sizeof(*rules));
}

/*
 * The rule whose placeholder starts at p[0..avail): a whole match (*part
 * false) or, when more input may follow, a placeholder that p's remaining
 * bytes begin (*part true). No placeholder contains another (binding.c),
 * so at most one can do either.
 */
static const struct subst_rule *
subst_at(const struct subst_rules *rules, const uint8_t *p, size_t avail, bool more, bool *part)
{
	if (!rules->first[p[0]])
		return NULL;
	for (size_t i = 0; i < rules->n; i++) {
		const struct subst_rule *r = &rules->r[i];

		if (avail >= r->phlen && memcmp(p, r->ph, r->phlen) == 0) {
			*part = false;
			return r;
		}
		if (more && avail < r->phlen && memcmp(p, r->ph, avail) == 0) {
			*part = true;
			return r;
		}
	}
	return NULL;
}

/* Grow a wiped buffer to hold need more bytes. */
static int
subst_reserve(uint8_t **buf, size_t *cap, size_t used, size_t need)
{
	size_t ncap = *cap ? *cap : 256;
	uint8_t *n;

	if (used + need <= *cap)
		return 0;
	while (ncap < used + need)
		ncap *= 2;
	if ((n = malloc(ncap)) == NULL)
		return -1;
	if (used > 0)
		memcpy(n, *buf, used);
	subst_free(*buf, *cap);
	*buf = n;
	*cap = ncap;
	return 0;
}

/* Whole-buffer substitution; see subst.h. */
int
subst_buf(const struct subst_rules *rules, const uint8_t *in, size_t len, uint8_t **out,
    size_t *outlen, size_t *count)
{
	uint8_t *o = NULL;
	size_t cap = 0, k = 0, lit = 0;
	bool part;

	*out = NULL;
	*outlen = 0;
	*count = 0;
	for (size_t i = 0; i < len;) {
		const struct subst_rule *r = subst_at(rules, in + i, len - i, false, &part);

		if (r == NULL) {
			i++;
			continue;
		}
		if (subst_reserve(&o, &cap, k, (i - lit) + r->replen + (len - i)) != 0) {
			subst_free(o, cap);
			*count = 0;
			return -1;
		}
		memcpy(o + k, in + lit, i - lit);
		k += i - lit;
		memcpy(o + k, r->rep, r->replen);
		k += r->replen;
		i += r->phlen;
		lit = i;
		(*count)++;
	}
	if (*count == 0)
		return 0;
	memcpy(o + k, in + lit, len - lit); /* reserved above */
	k += len - lit;
	/* Trim the capacity to the length: the caller wipes outlen bytes. */
	if (k < cap)
		OPENSSL_cleanse(o + k, cap - k);
	*out = o;
	*outlen = k;
	return 0;
}

/* Body kind; see subst.h. */
enum subst_body
subst_body_kind(const struct httpwire_header *hdrs, size_t n)
{
	const struct httpwire_header *ce = httpwire_find_header(hdrs, n, "content-encoding");
	const struct httpwire_header *ct = httpwire_find_header(hdrs, n, "content-type");
	size_t tl = 0;

	/* Compressed bytes hold no placeholder we could see. */
	if (ce != NULL &&
	    !(ce->value.len == 8 && strncasecmp((const char *)ce->value.ptr, "identity", 8) == 0))
		return SUBST_BODY_SKIP;
	if (ct == NULL)
		return SUBST_BODY_RAW;
	while (tl < ct->value.len && ct->value.ptr[tl] != ';' && ct->value.ptr[tl] != ' ' &&
	       ct->value.ptr[tl] != '\t')
		tl++;
	const char *t = (const char *)ct->value.ptr;
	if (tl >= 10 && strncasecmp(t, "multipart/", 10) == 0)
		return SUBST_BODY_SKIP;
	if ((tl == 16 && strncasecmp(t, "application/json", 16) == 0) ||
	    (tl > 5 && strncasecmp(t + tl - 5, "+json", 5) == 0))
		return SUBST_BODY_JSON;
	if (tl == 33 && strncasecmp(t, "application/x-www-form-urlencoded", 33) == 0)
		return SUBST_BODY_FORM;
	return SUBST_BODY_RAW;
}

/* Keep a substituted copy in the arena; the view points at it. */
static int
subst_view(
    const struct subst_rules *rules, struct httpwire_view *v, struct subst_arena *a, long *total)
{
	uint8_t *o;
	size_t olen, cnt;

	if (v->len == 0 || rules->n == 0)
		return 0;
	if (a->n == sizeof(a->p) / sizeof(a->p[0]) ||
	    subst_buf(rules, v->ptr, v->len, &o, &olen, &cnt) != 0)
		return -1;
	if (cnt == 0)
		return 0;
	a->p[a->n] = o;
	a->len[a->n++] = olen;
	v->ptr = o;
	v->len = olen;
	*total += (long)cnt;
	return 0;
}

/* Head substitution; see subst.h. */
long
subst_head(const struct vault_snap *snap, size_t idx, const struct httpwire_request *req,
    struct httpwire_header *hdrs, struct httpwire_view *start_line, struct subst_arena *arena)
{
	struct subst_rules rules;
	struct httpwire_view path, query = {NULL, 0};
	long total = 0;
	int rc = 0;

	memset(arena, 0, sizeof(*arena));
	*start_line = req->start_line;
	path = req->path;
	if (req->target.len > req->path.len + 1) {
		query.ptr = req->target.ptr + req->path.len + 1;
		query.len = req->target.len - req->path.len - 1;
	}
	/* The target: path and query each in its own place, URL-encoded. */
	if (subst_rules_build(snap, idx, BINDING_IN_PATH, SUBST_URL, &rules) != 0)
		return -1;
	rc = subst_view(&rules, &path, arena, &total);
	subst_rules_clear(&rules);
	if (rc == 0 && query.len > 0) {
		if (subst_rules_build(snap, idx, BINDING_IN_QUERY, SUBST_URL, &rules) != 0)
			rc = -1;
		else
			rc = subst_view(&rules, &query, arena, &total);
		subst_rules_clear(&rules);
	}
	if (rc == 0 && total > 0) {
		/* METHOD SP path ['?' query] SP version, rebuilt in the arena. */
		const uint8_t *s = req->start_line.ptr, *end = s + req->start_line.len;
		size_t pre = (size_t)(req->target.ptr - s);
		const uint8_t *post = req->target.ptr + req->target.len;
		size_t n = pre + path.len + (query.ptr ? 1 + query.len : 0) + (size_t)(end - post);
		uint8_t *o = malloc(n);

		if (o == NULL || arena->n == sizeof(arena->p) / sizeof(arena->p[0])) {
			free(o);
			rc = -1;
		} else {
			size_t k = 0;
			memcpy(o, s, pre);
			k = pre;
			memcpy(o + k, path.ptr, path.len);
			k += path.len;
			if (query.ptr != NULL) {
				o[k++] = '?';
				memcpy(o + k, query.ptr, query.len);
				k += query.len;
			}
			memcpy(o + k, post, (size_t)(end - post));
			arena->p[arena->n] = o;
			arena->len[arena->n++] = n;
			*start_line = (struct httpwire_view){o, n};
		}
	}
	if (rc == 0) {
		if (subst_rules_build(snap, idx, BINDING_IN_HEADER, SUBST_RAW, &rules) != 0)
			rc = -1;
		for (size_t i = 0; rc == 0 && rules.n > 0 && i < req->nheaders; i++) {
			/* Routing and framing fields are the proxy's: never rewritten. */
			if (hdrs[i].name.ptr == NULL ||
			    binding_header_reserved(
			        (const char *)hdrs[i].name.ptr, hdrs[i].name.len))
				continue;
			rc = subst_view(&rules, &hdrs[i].value, arena, &total);
		}
		subst_rules_clear(&rules);
	}
	if (rc != 0) {
		subst_arena_free(arena);
		return -1;
	}
	return total;
}

/* A substituted value; see subst.h. */
bool
subst_arena_holds(const struct subst_arena *arena, const uint8_t *p)
{
	uintptr_t a = (uintptr_t)p;

	for (size_t i = 0; p != NULL && i < arena->n; i++)
		if (a >= (uintptr_t)arena->p[i] && a - (uintptr_t)arena->p[i] < arena->len[i])
			return true;
	return false;
}

/* Wipe the arena; see subst.h. */
void
subst_arena_free(struct subst_arena *arena)
{
	for (size_t i = 0; i < arena->n; i++)
		subst_free(arena->p[i], arena->len[i]);
	arena->n = 0;
}

/*
 * Whether binding idx has the placeholder of s too (one credential may
 * share a placeholder across bindings): then it is not a stray there.
 */
static bool
subst_has_placeholder(
    const struct binding_set *bs, size_t idx, const struct binding_substitution *s)
{
	struct binding_substitution o;

	for (size_t j = 0; idx != SIZE_MAX && binding_subst_get(bs, idx, j, &o) == 0; j++)
		if (o.len == s->len && memcmp(o.placeholder, s->placeholder, s->len) == 0)
			return true;
	return false;
}

/* Stray placeholders; see subst.h. */
size_t
subst_find_stray(const struct binding_set *bs, size_t skip, const uint8_t *buf, size_t len)
{
	struct binding_substitution s;

	for (size_t b = 0; bs != NULL && b < binding_set_count(bs); b++) {
		if (b == skip)
			continue;
		for (size_t j = 0; binding_subst_get(bs, b, j, &s) == 0; j++)
			if (!subst_has_placeholder(bs, skip, &s) &&
			    memmem(buf, len, s.placeholder, s.len) != NULL)
				return s.credential;
	}
	return SIZE_MAX;
}

/* Streaming substituter; see subst.h. */
struct subst_stream *
subst_stream_new(struct subst_rules *rules)
{
	struct subst_stream *st = calloc(1, sizeof(*st));

	if (st == NULL) {
		subst_rules_clear(rules);
		return NULL;
	}
	st->rules = *rules;
	memset(rules, 0, sizeof(*rules));
	return st;
}

/* Scan w[0..n) to out; keep a cut placeholder's beginning when more follows. */
static int
subst_stream_scan(
    struct subst_stream *st, const uint8_t *w, size_t n, bool more, struct evbuffer *out)
{
	size_t lit = 0;
	bool part = false;

	if (st->grown > SUBST_MAX_GROWTH)
		return SUBST_TOO_LARGE; /* nothing more once past it (subst.h) */
	for (size_t i = 0; i < n;) {
		const struct subst_rule *r = subst_at(&st->rules, w + i, n - i, more, &part);

		if (r == NULL) {
			i++;
			continue;
		}
		if (evbuffer_add(out, w + lit, i - lit) != 0)
			return -1;
		if (part) {
			memcpy(st->hold, w + i, n - i); /* n - i < phlen <= sizeof(hold) */
			st->nhold = n - i;
			return 0;
		}
		if (r->replen > r->phlen) {
			st->grown += r->replen - r->phlen;
			if (st->grown > SUBST_MAX_GROWTH)
				return SUBST_TOO_LARGE;
		}
		if (evbuffer_add(out, r->rep, r->replen) != 0)
			return -1;
		st->count++;
		i += r->phlen;
		lit = i;
	}
	return evbuffer_add(out, w + lit, n - lit);
}

/* Feed; see subst.h. */
int
subst_stream_feed(struct subst_stream *st, const uint8_t *in, size_t len, struct evbuffer *out)
{
	uint8_t *w;
	size_t n;
	int rc;

	if (st->rules.n == 0)
		return evbuffer_add(out, in, len);
	if (st->nhold == 0) {
		/* The common case: no copy unless a placeholder is cut at the end. */
		return subst_stream_scan(st, in, len, true, out);
	}
	n = st->nhold + len;
	if ((w = malloc(n)) == NULL)
		return -1;
	memcpy(w, st->hold, st->nhold);
	memcpy(w + st->nhold, in, len);
	st->nhold = 0;
	rc = subst_stream_scan(st, w, n, true, out);
	free(w); /* placeholders and workload bytes only: no secret */
	return rc;
}

/* Finish; see subst.h. */
int
subst_stream_finish(struct subst_stream *st, struct evbuffer *out)
{
	uint8_t w[sizeof(st->hold)];
	size_t n = st->nhold;

	memcpy(w, st->hold, n);
	st->nhold = 0;
	return subst_stream_scan(st, w, n, false, out);
}

/* Count; see subst.h. */
uint64_t
subst_stream_count(const struct subst_stream *st)
{
	return st->count;
}

/* Free; see subst.h. */
void
subst_stream_free(struct subst_stream *st)
{
	if (st == NULL)
		return;
	subst_rules_clear(&st->rules);
	OPENSSL_cleanse(st, sizeof(*st));
	free(st);
}
