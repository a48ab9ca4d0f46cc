/*
 * Placeholder substitution (intercept process): on a request that matched
 * a binding, the placeholders of that binding's substitutions are replaced
 * by their credential's value, literally and in one pass, in the places
 * the binding names (path, query, header values, body), encoded for the
 * place. Replacements hold secrets: they are wiped before being freed.
 */
#ifndef VAULT_SUBST_H
#define VAULT_SUBST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/binding.h"
#include "vault/httpwire.h"

struct evbuffer;
struct vault_snap;
struct binding_set;

/* How a secret is written where it replaces a placeholder. */
enum subst_enc {
	SUBST_RAW = 0, /* as is: header values, bodies of other media types */
	SUBST_URL,     /* percent-encoded but for RFC 3986 unreserved: path, query */
	SUBST_JSON,    /* JSON string escaped: application/json, +json bodies */
	SUBST_FORM,    /* quote_plus: application/x-www-form-urlencoded bodies */
};

/* What a request body is, for substitution. */
enum subst_body {
	SUBST_BODY_RAW = 0, /* substitute literally */
	SUBST_BODY_JSON,
	SUBST_BODY_FORM,
	SUBST_BODY_SKIP, /* multipart or Content-Encoding: left as it is */
};

/* One placeholder and its encoded replacement (both owned by the rule set). */
struct subst_rule {
	uint8_t *ph;
	size_t phlen;
	uint8_t *rep;
	size_t replen;
	size_t credential;
};

struct subst_rules {
	struct subst_rule r[BINDING_MAX_LIST]; /* a binding has at most this many */
	size_t n;
	bool first[256]; /* first bytes of the placeholders */
	size_t maxlen;
};

struct subst_stream;

/* Encode v[0..n) for enc into a new buffer (*out owned, wipe and free). 0 or -1. */
int subst_encode(const uint8_t *v, size_t n, enum subst_enc enc, uint8_t **out, size_t *outlen)
    __attribute__((warn_unused_result));

/*
 * The rules of binding idx for place (a BINDING_IN_* bit), values encoded
 * with enc. rules is filled (n may be 0). 0 or -1 (out of memory).
 */
int subst_rules_build(const struct vault_snap *snap, size_t idx, unsigned place, enum subst_enc enc,
    struct subst_rules *rules) __attribute__((warn_unused_result));

/* Wipe and free the replacements of rules. */
void subst_rules_clear(struct subst_rules *rules);

/*
 * Replace every placeholder of rules in in[0..len) (single pass, the
 * output is never rescanned) into a new buffer *out (owned: wipe with
 * subst_free). *count gets the replacements made; 0 means *out is NULL.
 */
int subst_buf(const struct subst_rules *rules, const uint8_t *in, size_t len, uint8_t **out,
    size_t *outlen, size_t *count) __attribute__((warn_unused_result));

/* Wipe n bytes at p and free (accepts NULL). */
void subst_free(uint8_t *p, size_t n);

/* The body kind of a request from its Content-Type and Content-Encoding. */
enum subst_body subst_body_kind(const struct httpwire_header *hdrs, size_t n);

/*
 * Substitute the head of a request that matched binding idx: the target
 * (path before '?', query after) into *start_line and header values in
 * hdrs[] (never reserved headers: Host, framing, hop-by-hop). The new
 * bytes live in *arena until subst_arena_free. Returns the replacements
 * made, or -1.
 */
struct subst_arena {
	uint8_t *p[HTTPWIRE_MAX_HEADERS + 3]; /* every header, path, query, start line */
	size_t len[HTTPWIRE_MAX_HEADERS + 3];
	size_t n;
};
long subst_head(const struct vault_snap *snap, size_t idx, const struct httpwire_request *req,
    struct httpwire_header *hdrs, struct httpwire_view *start_line, struct subst_arena *arena)
    __attribute__((warn_unused_result));

/* Wipe and free the arena's buffers. */
void subst_arena_free(struct subst_arena *arena);
/* Whether p is in one of the arena's buffers (a substituted value). */
bool subst_arena_holds(const struct subst_arena *arena, const uint8_t *p);

/*
 * The credential index of the first placeholder of any binding (but
 * binding skip, or SIZE_MAX for none) found in buf, or SIZE_MAX: a
 * placeholder on a request it was not bound to (left, and logged).
 */
size_t subst_find_stray(const struct binding_set *bs, size_t skip, const uint8_t *buf, size_t len);

/* A streaming body substituter over rules (taken: cleared on free). NULL on ENOMEM. */
struct subst_stream *subst_stream_new(struct subst_rules *rules)
    __attribute__((warn_unused_result));

/*
 * What a body's replacements may add to it in all: a body of back-to-back
 * placeholders grows by up to a secret per placeholder (a 16 KiB secret
 * for an 8-byte placeholder: 2,048 times), and the relays buffer what a
 * body becomes. Past it, SUBST_TOO_LARGE (the request is refused: 413).
 */
#define SUBST_MAX_GROWTH (256 * 1024)
#define SUBST_TOO_LARGE (-2)

/*
 * Feed body payload; substituted bytes are appended to out. A placeholder
 * cut across feeds is held back (at most its length - 1 bytes). 0, -1
 * (out of memory) or SUBST_TOO_LARGE (then nothing more may be fed).
 */
int subst_stream_feed(struct subst_stream *st, const uint8_t *in, size_t len, struct evbuffer *out)
    __attribute__((warn_unused_result));

/* End of the body: the held bytes to out. 0, -1 or SUBST_TOO_LARGE. */
int subst_stream_finish(struct subst_stream *st, struct evbuffer *out)
    __attribute__((warn_unused_result));

/* Replacements made so far. */
uint64_t subst_stream_count(const struct subst_stream *st);

void subst_stream_free(struct subst_stream *st);

#endif
