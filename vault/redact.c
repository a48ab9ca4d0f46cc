/*
 * Streaming redactor: masks every whole occurrence of a secret, or of one of
 * its renderings (base64, URL, JSON, hex, ...), in the bytes going back to
 * the workload. Sets are built in the worker on each vault revision and
 * scanned by the loop threads. An Aho-Corasick automaton over all patterns,
 * with a bigram filter that skips clean data quickly. It must never change a
 * byte that is not part of a whole match, never let what it holds back or
 * releases depend on how much of a secret some bytes matched (that is an
 * oracle), and never log.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <openssl/crypto.h>

#include "vault/redact.h"
#include "vault/redact_internal.h"
#include "vault/secret.h"

/* Longest basic-auth user name accepted. */
#define REDACT_MAX_BASIC_USER 256
/* Initial capacity of a stream's held bytes (grows up to max_hold). */
#define REDACT_HOLD_INITIAL 64

/* log2 of the bits in the 4-gram filter (16 KiB, stays in L1). */
#define REDACT_GRAM_BITS 17
/* Positions excluded per 4-gram probe: offsets 0..4 of an 8-byte prefix. */
#define REDACT_GRAM_STRIDE 5

/* JSON rendering variants. */
#define REDACT_JSON_SLASH 0x01 /* "/" as "\/" (PHP) */
#define REDACT_JSON_ASCII 0x02 /* non-ASCII as \uXXXX (Python, PHP) */
#define REDACT_JSON_HTML 0x04  /* <, >, & as \u003c... (Go) */
#define REDACT_JSON_ALL 0x08   /* every character as \uXXXX */
#define REDACT_JSON_UPPER 0x10 /* upper-case hex digits */
/* System.Text.Json's default (ASP.NET Core): + ' " ` < > & and non-ASCII as \uXXXX */
#define REDACT_JSON_DOTNET 0x20

struct redact_node {
	uint32_t fail;    /* longest proper suffix that is a trie node */
	uint32_t edge;    /* first outgoing edge (sorted by label) */
	uint32_t nedge;   /* number of outgoing edges */
	uint32_t depth;   /* length of the string this node spells */
	uint32_t masklen; /* longest pattern ending here (0: none) */
	uint32_t nout;    /* number of patterns ending here */
};

struct redact_set {
	atomic_uint refs;
	size_t npatterns;
	size_t maxlen;
	bool lf; /* some pattern contains '\n' (a raw secret with a line feed) */
	uint32_t nstates;
	struct redact_node *nodes;
	uint8_t *elabel;
	uint32_t *etarget;
	uint32_t root[256];    /* transitions out of the root */
	uint64_t bigram[1024]; /* bit (b0 | b1 << 8): some pattern starts b0 b1 */
	/* Hashed 4-grams at offsets 0..4 of every pattern (see redact_skip). */
	uint64_t gram[(1u << REDACT_GRAM_BITS) / 64];
};

/* Server-sent events parser state (what an EventSource client sees). */
struct redact_sse {
	uint8_t line;   /* REDACT_SSE_* below */
	uint8_t flen;   /* field name bytes seen on this line */
	bool fdata;     /* the field name so far is a prefix of "data" */
	bool cr;        /* the previous byte was a CR (an LF after it is no new line) */
	bool crbound;   /* that CR ended an event (its LF joins the flushed event) */
	bool lineempty; /* nothing but the line end so far on this line */
};

/* WebSocket (server to client) frame parser state. */
struct redact_ws {
	uint8_t hdr[14]; /* the frame header so far */
	uint8_t hlen;    /* bytes of it seen */
	uint8_t hneed;   /* header length once known (2 until the second byte) */
	bool data;       /* payload is message data (text, binary, continuation) */
	uint64_t left;   /* payload bytes left in this frame */
	bool inpayload;
	bool opaque; /* not WebSocket framing: held as a body is */
	/* A frame compressed (RSV1) or masked: nothing negotiated either; unscannable. */
	bool unreadable;
};

/* gRPC length-prefixed message parser state. */
struct redact_grpc {
	uint8_t hlen;  /* prefix bytes seen */
	uint8_t flag;  /* the compressed flag of this message */
	uint32_t left; /* payload bytes left in this message */
	bool inpayload;
	bool opaque; /* not gRPC framing (a flag other than 0 or 1) */
};

struct redact_stream {
	struct redact_set *set;
	enum redact_mode mode;
	uint32_t state;  /* automaton over the raw bytes */
	uint32_t dstate; /* automaton over the reassembled text (framed modes) */
	size_t held;     /* a function of input positions only, never of state */
	size_t holdcap;
	size_t maxhold; /* redact_stream_max_hold() */
	uint64_t matches;
	uint8_t *hold;
	/* Framed modes: the reassembled-text bytes among the held ones, and
	 * their offsets in the held bytes, so a match across events can mask. */
	uint8_t *dtext;
	uint32_t *dpos;
	size_t dlen, dcap;
	struct redact_sse sse;
	struct redact_ws ws;
	struct redact_grpc grpc;
	/*
	 * Framed modes, between redact_stream_read_begin and _end: every byte
	 * is held, rbound just past the last event or frame end among them.
	 */
	bool inread;
	size_t rbound;
};

/* Pattern list under construction: bytes in one arena, wiped when grown. */
struct redact_plist {
	uint8_t *arena;
	size_t alen, acap;
	size_t *off, *len;
	size_t n, cap;
	size_t start; /* arena offset of the pattern being written */
	enum redact_err err;
};

static const char redact_b64std[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char redact_b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
static const char redact_hexlo[] = "0123456789abcdef";
static const char redact_hexup[] = "0123456789ABCDEF";

/* Static name of a build error, for logs. */
const char *
redact_err_str(enum redact_err err)
{
	switch (err) {
	case REDACT_ERR_NONE:
		return "none";
	case REDACT_ERR_TOO_SHORT:
		return "value_too_short";
	case REDACT_ERR_TOO_LONG:
		return "pattern_too_long";
	case REDACT_ERR_TOO_MANY:
		return "too_many_patterns";
	case REDACT_ERR_INVALID:
		return "invalid_value";
	case REDACT_ERR_NOMEM:
		return "no_memory";
	}
	return "unknown";
}

/* malloc + copy + wipe + free: realloc would leave copies of secret bytes. */
static void *
redact_grow(void *old, size_t oldsz, size_t newsz)
{
	void *p = malloc(newsz);

	if (p == NULL)
		return NULL;
	if (old != NULL) {
		memcpy(p, old, oldsz);
		OPENSSL_cleanse(old, oldsz);
		free(old);
	}
	return p;
}

static void
redact_wipe_free(void *p, size_t sz)
{
	if (p == NULL)
		return;
	OPENSSL_cleanse(p, sz);
	free(p);
}

static void
plist_put(struct redact_plist *pl, uint8_t c)
{
	uint8_t *a;
	size_t ncap;

	if (pl->err != REDACT_ERR_NONE)
		return;
	if (pl->alen - pl->start >= REDACT_MAX_PATTERN) {
		pl->err = REDACT_ERR_TOO_LONG;
		return;
	}
	if (pl->alen == pl->acap) {
		ncap = pl->acap ? pl->acap * 2 : 1024;
		a = redact_grow(pl->arena, pl->alen, ncap);
		if (a == NULL) {
			pl->err = REDACT_ERR_NOMEM;
			return;
		}
		pl->arena = a;
		pl->acap = ncap;
	}
	pl->arena[pl->alen++] = c;
}

static void
plist_puts(struct redact_plist *pl, const char *s)
{
	while (*s != '\0')
		plist_put(pl, (uint8_t)*s++);
}

static void
plist_begin(struct redact_plist *pl)
{
	pl->start = pl->alen;
}

/* Drops the pattern being written (a rendering that does not apply). */
static void
plist_abort(struct redact_plist *pl)
{
	OPENSSL_cleanse(pl->arena + pl->start, pl->alen - pl->start);
	pl->alen = pl->start;
}

static void
plist_end(struct redact_plist *pl)
{
	size_t ncap, len = pl->alen - pl->start;
	size_t *o, *l;

	if (pl->err != REDACT_ERR_NONE)
		return;
	/* Short patterns would mask ordinary text and give a guessing oracle. */
	if (len < REDACT_MIN_PATTERN) {
		pl->err = REDACT_ERR_TOO_SHORT;
		return;
	}
	if (pl->n == pl->cap) {
		ncap = pl->cap ? pl->cap * 2 : 64;
		o = redact_grow(pl->off, pl->n * sizeof(*o), ncap * sizeof(*o));
		l = o == NULL ? NULL : redact_grow(pl->len, pl->n * sizeof(*l), ncap * sizeof(*l));
		if (l == NULL) {
			if (o != NULL)
				pl->off = o;
			pl->err = REDACT_ERR_NOMEM;
			return;
		}
		pl->off = o;
		pl->len = l;
		pl->cap = ncap;
	}
	pl->off[pl->n] = pl->start;
	pl->len[pl->n] = len;
	pl->n++;
}

static void
plist_free(struct redact_plist *pl)
{
	redact_wipe_free(pl->arena, pl->acap);
	free(pl->off);
	free(pl->len);
}

/* Base64 chars [from, to) of (k zero bytes || v), unpadded, into pl. */
static void
redact_b64_slice(struct redact_plist *pl, const char *alpha, const uint8_t *v, size_t n, size_t k,
    size_t from, size_t to)
{
	size_t total = k + n, ci;
	size_t bit, byte;
	unsigned acc;

	for (ci = from; ci < to; ci++) {
		bit = ci * 6;
		byte = bit / 8;
		acc = 0;
		/* The 6 bits of char ci lie within bytes byte and byte + 1. */
		if (byte >= k && byte < total)
			acc = (unsigned)v[byte - k] << 8;
		if (byte + 1 >= k && byte + 1 < total)
			acc |= v[byte + 1 - k];
		plist_put(pl, (uint8_t)alpha[(acc >> (10 - bit % 8)) & 63]);
	}
}

/* Base64 renderings: the canonical text, and for k = 0..2 the characters
 * that depend on v alone when v sits at offset k (mod 3) of a longer text. */
static void
redact_add_base64(struct redact_plist *pl, const uint8_t *v, size_t n)
{
	size_t k, chars = (n * 8 + 5) / 6;

	plist_begin(pl);
	redact_b64_slice(pl, redact_b64std, v, n, 0, 0, chars);
	while ((pl->alen - pl->start) % 4 != 0 && pl->err == REDACT_ERR_NONE)
		plist_put(pl, '=');
	plist_end(pl);
	plist_begin(pl);
	redact_b64_slice(pl, redact_b64url, v, n, 0, 0, chars);
	plist_end(pl);
	for (k = 0; k < 3; k++) {
		size_t from = (8 * k + 5) / 6, to = (8 * k + 8 * n) / 6;

		plist_begin(pl);
		redact_b64_slice(pl, redact_b64std, v, n, k, from, to);
		plist_end(pl);
		plist_begin(pl);
		redact_b64_slice(pl, redact_b64url, v, n, k, from, to);
		plist_end(pl);
	}
}

static bool
redact_unreserved(uint8_t c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

/* Percent-encoding flags: a space is '+' (forms), '~' is encoded too (Java). */
#define REDACT_URL_FORM 0x1
#define REDACT_URL_TILDE 0x2

/*
 * Percent-encoding of every byte outside RFC 3986 unreserved and safe
 * (literal as they are), per flags (REDACT_URL_*).
 */
static void
redact_add_url(struct redact_plist *pl, const uint8_t *v, size_t n, const char *hex,
    const char *safe, unsigned flags)
{
	plist_begin(pl);
	for (size_t i = 0; i < n; i++) {
		bool lit =
		    (v[i] != 0 && strchr(safe, v[i]) != NULL) ||
		    (redact_unreserved(v[i]) && !((flags & REDACT_URL_TILDE) && v[i] == '~'));

		if (lit) {
			plist_put(pl, v[i]);
		} else if ((flags & REDACT_URL_FORM) && v[i] == ' ') {
			plist_put(pl, '+');
		} else {
			plist_put(pl, '%');
			plist_put(pl, (uint8_t)hex[v[i] >> 4]);
			plist_put(pl, (uint8_t)hex[v[i] & 15]);
		}
	}
	plist_end(pl);
}

/*
 * Encoders that leave more than RFC 3986 unreserved as it is: each set
 * below stays literal, every other byte outside unreserved is %XX. Only
 * sets that v has a byte of make a new rendering.
 */
static const struct {
	const char *safe;
	unsigned flags;
} redact_url_safe[] = {
    {"/", 0},                                  /* Python urllib.parse.quote, Werkzeug */
    {"!*'()", 0},                              /* JavaScript encodeURIComponent */
    {"$&+,:;=@", 0},                           /* Go url.PathEscape */
    {"!#$&'()*+,/:;=?@", 0},                   /* JavaScript encodeURI */
    {"*", REDACT_URL_FORM | REDACT_URL_TILDE}, /* Java URLEncoder */
};

/* Whether v has a byte that set s (or, with flags, ' ' or '~') renders otherwise. */
static bool
redact_url_safe_applies(const uint8_t *v, size_t n, const char *s, unsigned flags)
{
	for (size_t i = 0; i < n; i++)
		if ((v[i] != 0 && strchr(s, v[i]) != NULL) ||
		    (flags != 0 && (v[i] == ' ' || v[i] == '~')))
			return true;
	return false;
}

/* Every byte percent-encoded (%XX), as encoders that escape everything do. */
static void
redact_add_url_all(struct redact_plist *pl, const uint8_t *v, size_t n, const char *hex)
{
	plist_begin(pl);
	for (size_t i = 0; i < n; i++) {
		plist_put(pl, '%');
		plist_put(pl, (uint8_t)hex[v[i] >> 4]);
		plist_put(pl, (uint8_t)hex[v[i] & 15]);
	}
	plist_end(pl);
}

static void
redact_add_hex(struct redact_plist *pl, const uint8_t *v, size_t n, const char *hex)
{
	size_t i;

	plist_begin(pl);
	for (i = 0; i < n; i++) {
		plist_put(pl, (uint8_t)hex[v[i] >> 4]);
		plist_put(pl, (uint8_t)hex[v[i] & 15]);
	}
	plist_end(pl);
}

static void
redact_add_reversed(struct redact_plist *pl, const uint8_t *v, size_t n)
{
	size_t i;

	plist_begin(pl);
	for (i = n; i > 0; i--)
		plist_put(pl, v[i - 1]);
	plist_end(pl);
}

/* Decodes one UTF-8 sequence at v[*i]; returns the code point or -1. */
static long
redact_utf8(const uint8_t *v, size_t n, size_t *i)
{
	uint8_t c = v[*i];
	size_t need, j;
	long cp, min;

	if (c < 0x80) {
		(*i)++;
		return c;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		need = 1;
		cp = c & 0x1f;
		min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 2;
		cp = c & 0x0f;
		min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 3;
		cp = c & 0x07;
		min = 0x10000;
	} else {
		return -1;
	}
	if (n - *i <= need)
		return -1;
	for (j = 1; j <= need; j++) {
		if ((v[*i + j] & 0xc0) != 0x80)
			return -1;
		cp = cp << 6 | (v[*i + j] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return -1;
	*i += need + 1;
	return cp;
}

static void
redact_put_u(struct redact_plist *pl, unsigned u, const char *hex)
{
	plist_puts(pl, "\\u");
	plist_put(pl, (uint8_t)hex[u >> 12 & 15]);
	plist_put(pl, (uint8_t)hex[u >> 8 & 15]);
	plist_put(pl, (uint8_t)hex[u >> 4 & 15]);
	plist_put(pl, (uint8_t)hex[u & 15]);
}

/* JSON string-body rendering of v per flags; skipped when it needs UTF-8
 * decoding and v is not valid UTF-8 (encoders would not emit v then). */
static void
redact_add_json(struct redact_plist *pl, const uint8_t *v, size_t n, unsigned flags)
{
	const char *hex = flags & REDACT_JSON_UPPER ? redact_hexup : redact_hexlo;
	bool decode = (flags & (REDACT_JSON_ASCII | REDACT_JSON_ALL | REDACT_JSON_DOTNET)) != 0;
	size_t i = 0;
	long cp;

	plist_begin(pl);
	while (i < n) {
		if (decode) {
			cp = redact_utf8(v, n, &i);
			if (cp < 0) {
				plist_abort(pl);
				return;
			}
		} else {
			cp = v[i++];
		}
		if (cp >= 0x10000) {
			/* Only reached when decoding: a surrogate pair. */
			redact_put_u(pl, (unsigned)(0xd800 + ((cp - 0x10000) >> 10)), hex);
			redact_put_u(pl, (unsigned)(0xdc00 + ((cp - 0x10000) & 0x3ff)), hex);
		} else if ((flags & REDACT_JSON_ALL) || (decode && cp >= 0x7f) ||
		           ((flags & REDACT_JSON_DOTNET) && cp < 0x80 &&
		               strchr("+'\"`<>&", (int)cp) != NULL)) {
			redact_put_u(pl, (unsigned)cp, hex);
		} else if (cp == '"') {
			plist_puts(pl, "\\\"");
		} else if (cp == '\\') {
			plist_puts(pl, "\\\\");
		} else if (cp == '/' && (flags & REDACT_JSON_SLASH)) {
			plist_puts(pl, "\\/");
		} else if ((cp == '<' || cp == '>' || cp == '&') && (flags & REDACT_JSON_HTML)) {
			redact_put_u(pl, (unsigned)cp, hex);
		} else if (cp == '\b') {
			plist_puts(pl, "\\b");
		} else if (cp == '\f') {
			plist_puts(pl, "\\f");
		} else if (cp == '\n') {
			plist_puts(pl, "\\n");
		} else if (cp == '\r') {
			plist_puts(pl, "\\r");
		} else if (cp == '\t') {
			plist_puts(pl, "\\t");
		} else if (cp < 0x20) {
			redact_put_u(pl, (unsigned)cp, hex);
		} else {
			plist_put(pl, (uint8_t)cp);
		}
	}
	plist_end(pl);
}

/*
 * All renderings of one value that an echoing upstream is likely to apply
 * (catalogue EX-147..149, 172, 174): percent-encoding with the safe sets
 * of common encoders, JSON escaping as PHP, Python, Go and .NET write it.
 * Not covered, as residual risk:
 * upper-casing, HTML entities, line-wrapped base64, mixed-case hex escapes.
 */
static void
redact_add_value(struct redact_plist *pl, const uint8_t *v, size_t n)
{
	static const unsigned json[] = {
	    0,
	    REDACT_JSON_SLASH,
	    REDACT_JSON_ASCII,
	    REDACT_JSON_ASCII | REDACT_JSON_SLASH,
	    REDACT_JSON_HTML,
	    REDACT_JSON_ALL,
	    REDACT_JSON_ALL | REDACT_JSON_UPPER,
	    REDACT_JSON_DOTNET | REDACT_JSON_UPPER,
	};
	size_t i;

	if (n < REDACT_MIN_PATTERN) {
		pl->err = REDACT_ERR_TOO_SHORT;
		return;
	}
	plist_begin(pl);
	for (i = 0; i < n; i++)
		plist_put(pl, v[i]);
	plist_end(pl);
	redact_add_reversed(pl, v, n);
	redact_add_hex(pl, v, n, redact_hexlo);
	redact_add_hex(pl, v, n, redact_hexup);
	redact_add_base64(pl, v, n);
	redact_add_url(pl, v, n, redact_hexup, "", 0);
	redact_add_url(pl, v, n, redact_hexlo, "", 0);
	redact_add_url_all(pl, v, n, redact_hexup);
	redact_add_url_all(pl, v, n, redact_hexlo);
	if (memchr(v, ' ', n) != NULL) {
		redact_add_url(pl, v, n, redact_hexup, "", REDACT_URL_FORM);
		redact_add_url(pl, v, n, redact_hexlo, "", REDACT_URL_FORM);
	}
	for (i = 0; i < sizeof(redact_url_safe) / sizeof(redact_url_safe[0]); i++) {
		if (!redact_url_safe_applies(
		        v, n, redact_url_safe[i].safe, redact_url_safe[i].flags))
			continue;
		redact_add_url(
		    pl, v, n, redact_hexup, redact_url_safe[i].safe, redact_url_safe[i].flags);
		redact_add_url(
		    pl, v, n, redact_hexlo, redact_url_safe[i].safe, redact_url_safe[i].flags);
	}
	for (i = 0; i < sizeof(json) / sizeof(json[0]); i++)
		redact_add_json(pl, v, n, json[i]);
}

/* Hash of the 4 bytes at p, REDACT_GRAM_BITS wide. */
static inline uint32_t
redact_gram_hash(const uint8_t *p)
{
	uint32_t g;

	memcpy(&g, p, sizeof(g));
	return (g * 0x9e3779b1u) >> (32 - REDACT_GRAM_BITS);
}

/* Trie under construction: children as sibling lists. */
struct redact_trie {
	uint32_t *child, *sibling, *ownlen;
	uint8_t *label;
	uint32_t n;
	uint32_t root[256];
};

static uint32_t
trie_child(const struct redact_trie *t, uint32_t u, uint8_t c)
{
	uint32_t v;

	if (u == 0)
		return t->root[c];
	for (v = t->child[u]; v != 0; v = t->sibling[v])
		if (t->label[v] == c)
			return v;
	return 0;
}

static void
trie_insert(struct redact_trie *t, const uint8_t *p, size_t len)
{
	uint32_t u = 0, v;
	size_t i;

	for (i = 0; i < len; i++) {
		v = trie_child(t, u, p[i]);
		if (v == 0) {
			v = t->n++;
			t->label[v] = p[i];
			t->child[v] = 0;
			t->ownlen[v] = 0;
			if (u == 0) {
				t->root[p[i]] = v;
				t->sibling[v] = 0;
			} else {
				t->sibling[v] = t->child[u];
				t->child[u] = v;
			}
		}
		u = v;
	}
	t->ownlen[u] = (uint32_t)len;
}

/* Transition at build time (sibling lists + fail links). */
static uint32_t
trie_step(const struct redact_trie *t, const struct redact_node *nodes, uint32_t s, uint8_t c)
{
	uint32_t v;

	for (;;) {
		v = trie_child(t, s, c);
		if (v != 0 || s == 0)
			return v;
		s = nodes[s].fail;
	}
}

/* Builds the automaton from the trie; 0 or -1 (no memory). */
static int
redact_compile(struct redact_set *set, struct redact_trie *t)
{
	uint32_t *queue, qh = 0, qt = 0, ne = 0, u, v, f, c, kids[256], nk, i, j;

	set->nstates = t->n;
	set->nodes = calloc(t->n, sizeof(*set->nodes));
	set->elabel = malloc(t->n);
	set->etarget = malloc((size_t)t->n * sizeof(uint32_t));
	queue = malloc((size_t)t->n * sizeof(uint32_t));
	if (set->nodes == NULL || set->elabel == NULL || set->etarget == NULL || queue == NULL) {
		free(queue);
		return -1;
	}
	memcpy(set->root, t->root, sizeof(set->root));
	queue[qt++] = 0;
	while (qh < qt) {
		u = queue[qh++];
		nk = 0;
		if (u == 0) {
			for (c = 0; c < 256; c++)
				if (t->root[c] != 0)
					kids[nk++] = t->root[c];
		} else {
			for (v = t->child[u]; v != 0; v = t->sibling[v])
				kids[nk++] = v;
			/* Sorted by label, for the binary search of redact_step(). */
			for (i = 1; i < nk; i++)
				for (j = i; j > 0 && t->label[kids[j - 1]] > t->label[kids[j]];
				     j--) {
					v = kids[j];
					kids[j] = kids[j - 1];
					kids[j - 1] = v;
				}
		}
		set->nodes[u].edge = ne;
		set->nodes[u].nedge = nk;
		for (i = 0; i < nk; i++) {
			v = kids[i];
			set->elabel[ne] = t->label[v];
			set->etarget[ne++] = v;
			f = u == 0 ? 0 : trie_step(t, set->nodes, set->nodes[u].fail, t->label[v]);
			set->nodes[v].fail = f;
			set->nodes[v].depth = set->nodes[u].depth + 1;
			set->nodes[v].masklen = t->ownlen[v] > set->nodes[f].masklen
			                            ? t->ownlen[v]
			                            : set->nodes[f].masklen;
			set->nodes[v].nout = (t->ownlen[v] != 0) + set->nodes[f].nout;
			if (t->ownlen[v] != 0)
				set->npatterns++;
			queue[qt++] = v;
		}
	}
	free(queue);
	return 0;
}

static void
trie_free(struct redact_trie *t, size_t cap)
{
	free(t->child);
	free(t->sibling);
	free(t->ownlen);
	redact_wipe_free(t->label, cap);
}

/* Compiles the values and all their renderings into one automaton. */
struct redact_set *
redact_set_new(const struct redact_value *vals, size_t n, enum redact_err *errp)
{
	struct redact_plist pl = {0};
	struct redact_trie t = {0};
	struct redact_set *set = NULL;
	uint8_t *buf = NULL;
	size_t i, j, vlen, ulen, bufcap = 0, total = 1;

	if (n > REDACT_MAX_VALUES) {
		pl.err = REDACT_ERR_TOO_MANY;
		goto out;
	}
	if (vals == NULL && n > 0) {
		pl.err = REDACT_ERR_INVALID;
		goto out;
	}
	for (i = 0; i < n && pl.err == REDACT_ERR_NONE; i++) {
		if (vals[i].secret == NULL) {
			pl.err = REDACT_ERR_INVALID;
			break;
		}
		vlen = secret_len(vals[i].secret);
		ulen = vals[i].basic_user != NULL ? vals[i].basic_user_len : 0;
		if (ulen > REDACT_MAX_BASIC_USER ||
		    (ulen > 0 && memchr(vals[i].basic_user, ':', ulen) != NULL)) {
			pl.err = REDACT_ERR_INVALID;
			break;
		}
		redact_wipe_free(buf, bufcap);
		bufcap = ulen + 1 + vlen;
		buf = malloc(bufcap);
		if (buf == NULL) {
			bufcap = 0;
			pl.err = REDACT_ERR_NOMEM;
			break;
		}
		if (secret_append_raw(vals[i].secret, buf + ulen + 1, vlen) == -1) {
			pl.err = REDACT_ERR_INVALID;
			break;
		}
		redact_add_value(&pl, buf + ulen + 1, vlen);
		if (vals[i].basic_user != NULL) {
			/* "user:pass" as sent in Basic auth, and all its renderings. */
			if (ulen > 0)
				memcpy(buf, vals[i].basic_user, ulen);
			buf[ulen] = ':';
			redact_add_value(&pl, buf, ulen + 1 + vlen);
		}
	}
	if (pl.err != REDACT_ERR_NONE)
		goto out;
	for (i = 0; i < pl.n; i++) {
		total += pl.len[i];
		if (total > REDACT_MAX_STATES) {
			pl.err = REDACT_ERR_TOO_MANY;
			goto out;
		}
	}
	set = calloc(1, sizeof(*set));
	t.child = malloc(total * sizeof(uint32_t));
	t.sibling = malloc(total * sizeof(uint32_t));
	t.ownlen = malloc(total * sizeof(uint32_t));
	t.label = malloc(total);
	if (set == NULL || t.child == NULL || t.sibling == NULL || t.ownlen == NULL ||
	    t.label == NULL) {
		pl.err = REDACT_ERR_NOMEM;
		goto out;
	}
	atomic_init(&set->refs, 1);
	t.n = 1;
	t.child[0] = t.sibling[0] = t.ownlen[0] = 0;
	t.label[0] = 0;
	for (i = 0; i < pl.n; i++) {
		const uint8_t *p = pl.arena + pl.off[i];
		unsigned bg = p[0] | (unsigned)p[1] << 8;

		trie_insert(&t, p, pl.len[i]);
		set->bigram[bg >> 6] |= (uint64_t)1 << (bg & 63);
		for (j = 0; j < REDACT_GRAM_STRIDE; j++) {
			uint32_t h = redact_gram_hash(p + j);

			set->gram[h >> 6] |= (uint64_t)1 << (h & 63);
		}
		if (pl.len[i] > set->maxlen)
			set->maxlen = pl.len[i];
		if (memchr(p, '\n', pl.len[i]) != NULL)
			set->lf = true;
	}
	if (redact_compile(set, &t) == -1)
		pl.err = REDACT_ERR_NOMEM;
out:
	trie_free(&t, total);
	plist_free(&pl);
	redact_wipe_free(buf, bufcap);
	if (pl.err != REDACT_ERR_NONE) {
		redact_set_unref(set);
		set = NULL;
	}
	if (errp != NULL)
		*errp = pl.err;
	return set;
}

/* Shares the set (one per vault revision) with a stream or thread. */
struct redact_set *
redact_set_ref(struct redact_set *set)
{
	atomic_fetch_add_explicit(&set->refs, 1, memory_order_relaxed);
	return set;
}

/* Releases one owner; the last one wipes the patterns. */
void
redact_set_unref(struct redact_set *set)
{
	if (set == NULL)
		return;
	if (atomic_fetch_sub_explicit(&set->refs, 1, memory_order_acq_rel) != 1)
		return;
	/* The edge labels spell every pattern: wipe them all. */
	redact_wipe_free(set->elabel, set->nstates);
	redact_wipe_free(set->etarget, (size_t)set->nstates * sizeof(uint32_t));
	redact_wipe_free(set->nodes, (size_t)set->nstates * sizeof(*set->nodes));
	OPENSSL_cleanse(set, sizeof(*set));
	free(set);
}

/* Count of distinct patterns, for metrics. */
size_t
redact_set_npatterns(const struct redact_set *set)
{
	return set->npatterns;
}

/* Upper bound on the bytes a stream of this set holds back. */
size_t
redact_set_max_hold(const struct redact_set *set)
{
	return set->maxlen > 0 ? set->maxlen - 1 : 0;
}

/* Next state from s on byte c (Aho-Corasick with fail links). */
static inline uint32_t
redact_step(const struct redact_set *set, uint32_t s, uint8_t c)
{
	const struct redact_node *nd;
	const uint8_t *lab;
	uint32_t lo, hi, mid;

	while (s != 0) {
		nd = &set->nodes[s];
		lab = set->elabel + nd->edge;
		if (nd->nedge == 1) {
			if (lab[0] == c)
				return set->etarget[nd->edge];
		} else {
			lo = 0;
			hi = nd->nedge;
			while (lo < hi) {
				mid = (lo + hi) / 2;
				if (lab[mid] < c)
					lo = mid + 1;
				else
					hi = mid;
			}
			if (lo < nd->nedge && lab[lo] == c)
				return set->etarget[nd->edge + lo];
		}
		s = nd->fail;
	}
	return set->root[c];
}

static inline bool
redact_bigram(const struct redact_set *set, const uint8_t *p)
{
	unsigned v = p[0] | (unsigned)p[1] << 8;

	return (set->bigram[v >> 6] >> (v & 63)) & 1;
}

static inline bool
redact_gram(const struct redact_set *set, const uint8_t *p)
{
	uint32_t h = redact_gram_hash(p);

	return (set->gram[h >> 6] >> (h & 63)) & 1;
}

/*
 * From the root state, the first position >= i where a pattern (or a
 * pending prefix of one) may start; bytes before it leave the automaton at
 * the root, so they are skipped without stepping. Every pattern is at least
 * 8 bytes long, so a match starting anywhere in [i, i + 4] has the 4 bytes
 * at i + 4 at offset 0..4 of its pattern: when that 4-gram is in no pattern
 * there, five positions are excluded with one probe. Then a bigram test per
 * position, then (last byte) the root transitions.
 */
static size_t
redact_skip(const struct redact_set *set, const uint8_t *p, size_t i, size_t to)
{
	for (;;) {
		while (to - i >= REDACT_GRAM_STRIDE + 3 && !redact_gram(set, p + i + 4))
			i += REDACT_GRAM_STRIDE;
		if (to - i < 2)
			break;
		if (redact_bigram(set, p + i))
			return i;
		i++;
	}
	if (i < to && set->root[p[i]] == 0)
		i++;
	return i;
}

/*
 * Scans p[from, to) starting in *state; p[0, from) must hold the bytes the
 * state spells. Masks every match in place (they all lie within p).
 */
static void
redact_scan(const struct redact_set *set, uint8_t *p, size_t from, size_t to, uint32_t *state,
    uint64_t *matches)
{
	const struct redact_node *nd;
	uint32_t s = *state;
	size_t i = from;

	while (i < to) {
		if (s == 0) {
			i = redact_skip(set, p, i, to);
			if (i == to)
				break;
		}
		s = redact_step(set, s, p[i]);
		nd = &set->nodes[s];
		/*
		 * A match of length L ending at i: in a body its first L - 1 bytes
		 * are among the max_hold held back, so masking reaches all of it.
		 */
		if (nd->masklen != 0) {
			/* In framed modes the start of a match across an event end
			 * may already be out: mask what is still here. */
			size_t first = i + 1 >= nd->masklen ? i + 1 - nd->masklen : 0;

			memset(p + first, REDACT_MASK_BYTE, i + 1 - first);
			*matches += nd->nout;
		}
		i++;
	}
	*state = s;
}

/* One-shot redaction of a complete buffer, in place. */
void
redact_buf(const struct redact_set *set, uint8_t *buf, size_t len, uint64_t *matches)
{
	uint64_t m = 0;
	uint32_t s = 0;

	redact_scan(set, buf, 0, len, &s, &m);
	if (matches != NULL)
		*matches += m;
}

/* Scanner state for one direction of one connection (a whole body). */
struct redact_stream *
redact_stream_new(struct redact_set *set)
{
	return redact_stream_new_mode(set, REDACT_MODE_BODY);
}

static bool
redact_mode_ok(enum redact_mode mode)
{
	return mode == REDACT_MODE_BODY || mode == REDACT_MODE_SSE ||
	       mode == REDACT_MODE_WEBSOCKET || mode == REDACT_MODE_GRPC;
}

/* A stream's state from the start, for set (a reference taken) and mode; its buffers kept. */
static void
redact_stream_init(struct redact_stream *st, struct redact_set *set, enum redact_mode mode)
{
	uint8_t *hold = st->hold, *dtext = st->dtext;
	uint32_t *dpos = st->dpos;
	size_t holdcap = st->holdcap, dcap = st->dcap;

	memset(st, 0, sizeof(*st));
	st->hold = hold;
	st->holdcap = holdcap;
	st->dtext = dtext;
	st->dpos = dpos;
	st->dcap = dcap;
	st->set = redact_set_ref(set);
	st->mode = mode;
	st->maxhold = redact_set_max_hold(set);
	/* A partial event or frame is held whole, up to a cap that still
	 * covers the longest pattern. */
	if (mode != REDACT_MODE_BODY && set->maxlen > 0 && st->maxhold < REDACT_FRAMED_HOLD)
		st->maxhold = REDACT_FRAMED_HOLD;
	st->ws.hneed = 2;
	st->sse.lineempty = true;
}

/* Scanner for a body of the given framing (see enum redact_mode). */
struct redact_stream *
redact_stream_new_mode(struct redact_set *set, enum redact_mode mode)
{
	struct redact_stream *st;

	if (!redact_mode_ok(mode))
		return NULL;
	st = calloc(1, sizeof(*st));
	if (st == NULL)
		return NULL;
	redact_stream_init(st, set, mode);
	return st;
}

/* The stream, for another body (see redact.h). */
int
redact_stream_reuse(struct redact_stream *st, struct redact_set *set, enum redact_mode mode)
{
	struct redact_set *was = st->set;

	if (!redact_mode_ok(mode))
		return -1;
	/* What the last body held back never reaches the next one's buffers. */
	if (st->hold != NULL)
		OPENSSL_cleanse(st->hold, st->holdcap);
	if (st->dtext != NULL)
		OPENSSL_cleanse(st->dtext, st->dcap);
	redact_stream_init(st, set, mode);
	redact_set_unref(was);
	return 0;
}

/* Frees a scanner; held bytes are wiped, not released. */
void
redact_stream_free(struct redact_stream *st)
{
	if (st == NULL)
		return;
	redact_wipe_free(st->hold, st->holdcap);
	redact_wipe_free(st->dtext, st->dcap);
	free(st->dpos);
	redact_set_unref(st->set);
	free(st);
}

/* Bytes currently held back. */
size_t
redact_stream_held(const struct redact_stream *st)
{
	return st->held;
}

/* Upper bound of redact_stream_held() for this stream. */
size_t
redact_stream_max_hold(const struct redact_stream *st)
{
	return st->maxhold;
}

/* Occurrences masked so far, for the redaction counter. */
uint64_t
redact_stream_matches(const struct redact_stream *st)
{
	return st->matches;
}

enum {
	REDACT_SSE_START = 0, /* at the start of a line */
	REDACT_SSE_FIELD,     /* in the field name */
	REDACT_SSE_SPACE,     /* just after "data:" (one space is dropped) */
	REDACT_SSE_DATA,      /* in the value of a data line */
	REDACT_SSE_OTHER,     /* in a comment or another field */
};

/*
 * One byte of an event stream (WHATWG HTML, "event stream interpretation"):
 * whether it belongs to a data value (*text), and whether an event ends
 * after it (*bound). Lines end at CRLF, LF or CR; an empty line ends an
 * event; "data" values lose one leading space.
 */
static void
redact_sse_byte(struct redact_sse *p, uint8_t c, bool *text, bool *bound)
{
	*text = false;
	*bound = false;
	if (p->cr && c == '\n') {
		p->cr = false;
		/* The LF of a CRLF that ended an event goes out with it. */
		*bound = p->crbound;
		p->crbound = false;
		return;
	}
	p->cr = false;
	p->crbound = false;
	if (c == '\n' || c == '\r') {
		if (p->lineempty)
			*bound = true;
		p->cr = c == '\r';
		p->crbound = p->cr && *bound;
		p->line = REDACT_SSE_START;
		p->lineempty = true;
		return;
	}
	p->lineempty = false;
	switch (p->line) {
	case REDACT_SSE_START:
		p->flen = 0;
		p->fdata = true;
		if (c == ':') {
			p->line = REDACT_SSE_OTHER;
			return;
		}
		p->line = REDACT_SSE_FIELD;
		/* fall through */
	case REDACT_SSE_FIELD:
		if (c == ':') {
			p->line = p->fdata && p->flen == 4 ? REDACT_SSE_SPACE : REDACT_SSE_OTHER;
			return;
		}
		if (p->flen >= 4 || c != (uint8_t) "data"[p->flen])
			p->fdata = false;
		if (p->flen < UINT8_MAX)
			p->flen++;
		return;
	case REDACT_SSE_SPACE:
		p->line = REDACT_SSE_DATA;
		if (c == ' ')
			return;
		*text = true;
		return;
	case REDACT_SSE_DATA:
		*text = true;
		return;
	default:
		return;
	}
}

/*
 * One byte of server-to-client WebSocket frames (RFC 6455 section 5.2):
 * whether it is message payload (*text) and whether a frame ends after it.
 * Payload of a masked frame (a server must not send one) is not text.
 */
static void
redact_ws_byte(struct redact_ws *p, uint8_t c, bool *text, bool *bound)
{
	*text = false;
	*bound = false;
	if (p->opaque)
		return;
	if (p->inpayload) {
		*text = p->data;
		if (--p->left == 0) {
			p->inpayload = false;
			*bound = true;
		}
		return;
	}
	p->hdr[p->hlen++] = c;
	/* RSV2, RSV3 or a reserved opcode: these bytes are not frames (a
	 * tunnel of another protocol); from here every feed ends a unit. */
	if (p->hlen == 1 &&
	    ((c & 0x30) != 0 || ((c & 0x0f) > 2 && (c & 0x0f) < 8) || (c & 0x0f) > 10)) {
		p->opaque = true;
		return;
	}
	if (p->hlen == 2) {
		uint8_t len7 = p->hdr[1] & 0x7f;

		p->hneed = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + (p->hdr[1] & 0x80 ? 4 : 0);
	}
	if (p->hlen < p->hneed)
		return;
	{
		uint8_t len7 = p->hdr[1] & 0x7f, op = p->hdr[0] & 0x0f;
		uint64_t n = len7;

		if (len7 == 126)
			n = (uint64_t)p->hdr[2] << 8 | p->hdr[3];
		else if (len7 == 127)
			for (int i = 2; i < 10; i++)
				n = n << 8 | p->hdr[i];
		/* Compressed (RSV1) or masked payload is not text a scan can read. */
		p->data = op <= 2 && !(p->hdr[1] & 0x80) && !(p->hdr[0] & 0x40);
		if ((p->hdr[1] & 0x80) || (p->hdr[0] & 0x40))
			p->unreadable = true;
		p->left = n;
		p->inpayload = n > 0;
		*bound = n == 0;
		p->hlen = 0;
		p->hneed = 2;
	}
}

/*
 * One byte of a gRPC message stream: whether it is payload of an
 * uncompressed message (*text) and whether a message ends after it.
 */
static void
redact_grpc_byte(struct redact_grpc *p, uint8_t c, bool *text, bool *bound)
{
	*text = false;
	*bound = false;
	if (p->opaque)
		return;
	if (p->inpayload) {
		*text = p->flag == 0;
		if (--p->left == 0) {
			p->inpayload = false;
			*bound = true;
		}
		return;
	}
	if (p->hlen == 0) {
		if (c > 1) {
			p->opaque = true; /* from here every feed ends a unit */
			return;
		}
		p->flag = c;
		p->left = 0;
	} else {
		p->left = p->left << 8 | c;
	}
	if (++p->hlen < 5)
		return;
	p->hlen = 0;
	p->inpayload = p->left > 0;
	*bound = p->left == 0;
}

/*
 * Scans the reassembled text t[from, to) from *state; pos[j] is the offset
 * in raw of t[j]. A match masks the raw bytes of its text bytes that are
 * still here; one whose bytes were not adjacent in raw (a secret split
 * across events or frames) is counted, the others the raw scan counts.
 */
static void
redact_scan_text(const struct redact_set *set, const uint8_t *t, const uint32_t *pos, size_t from,
    size_t to, uint32_t *state, uint8_t *raw, uint64_t *matches)
{
	const struct redact_node *nd;
	uint32_t s = *state;
	size_t i = from, j, first;

	while (i < to) {
		if (s == 0) {
			i = redact_skip(set, t, i, to);
			if (i == to)
				break;
		}
		s = redact_step(set, s, t[i]);
		nd = &set->nodes[s];
		if (nd->masklen != 0) {
			first = i + 1 >= nd->masklen ? i + 1 - nd->masklen : 0;
			for (j = first; j <= i; j++)
				raw[pos[j]] = REDACT_MASK_BYTE;
			if (i + 1 < nd->masklen || pos[i] - pos[first] != i - first)
				*matches += nd->nout;
		}
		i++;
	}
	*state = s;
}

/* Grows a wiped buffer of secret-bearing bytes to hold at least need. */
static int
redact_reserve(uint8_t **buf, size_t *cap, size_t used, size_t need)
{
	size_t ncap;
	uint8_t *b;

	if (need <= *cap)
		return 0;
	ncap = *cap < REDACT_HOLD_INITIAL ? REDACT_HOLD_INITIAL : *cap;
	while (ncap < need)
		ncap *= 2;
	b = redact_grow(*buf, used, ncap);
	if (b == NULL)
		return -1;
	*buf = b;
	*cap = ncap;
	return 0;
}

/*
 * Framed modes: parses dst[from, need) (not yet masked), appends its text
 * bytes to st->dtext, and returns the offset just past the last event or
 * frame end in it (0 if none). -1 on allocation failure.
 */
static int
redact_frame(struct redact_stream *st, const uint8_t *dst, size_t from, size_t need, size_t *bound)
{
	uint32_t *np;
	size_t ncap, i;
	bool text, b;

	*bound = 0;
	if (need > UINT32_MAX)
		return -1;
	ncap = st->dcap;
	if (redact_reserve(&st->dtext, &ncap, st->dlen, st->dlen + (need - from)) == -1)
		return -1;
	if (ncap != st->dcap) {
		np = malloc(ncap * sizeof(*np));
		if (np == NULL) {
			st->dcap = ncap;
			return -1;
		}
		if (st->dlen > 0)
			memcpy(np, st->dpos, st->dlen * sizeof(*np));
		free(st->dpos);
		st->dpos = np;
		st->dcap = ncap;
	}
	for (i = from; i < need; i++) {
		if (st->mode == REDACT_MODE_SSE)
			redact_sse_byte(&st->sse, dst[i], &text, &b);
		else if (st->mode == REDACT_MODE_GRPC)
			redact_grpc_byte(&st->grpc, dst[i], &text, &b);
		else
			redact_ws_byte(&st->ws, dst[i], &text, &b);
		if (text) {
			st->dtext[st->dlen] = dst[i];
			st->dpos[st->dlen++] = (uint32_t)i;
		}
		if (b)
			*bound = i + 1;
	}
	return 0;
}

/* Whether st is held as a body: body mode, or framing it could not read (opaque). */
static bool
redact_bodylike(const struct redact_stream *st)
{
	return st->mode == REDACT_MODE_BODY ||
	       (st->mode == REDACT_MODE_WEBSOCKET && st->ws.opaque) ||
	       (st->mode == REDACT_MODE_GRPC && st->grpc.opaque);
}

static void redact_text_release(struct redact_stream *st, size_t out);

/* Emit the first out held bytes (dst holds need), keep the rest. 0 or -1. */
static int
redact_keep(struct redact_stream *st, uint8_t *dst, size_t need, size_t out)
{
	size_t keep = need - out;

	if (redact_reserve(&st->hold, &st->holdcap, st->held, keep) == -1)
		return -1;
	if (keep > 0) {
		memmove(st->hold, dst + out, keep);
		/* The caller's buffer must not keep a copy of held bytes. */
		if (dst != st->hold)
			OPENSSL_cleanse(dst + out, keep);
	}
	if (dst == st->hold && out > 0)
		OPENSSL_cleanse(st->hold + keep, out); /* the moved bytes' old places */
	st->held = keep;
	if (st->mode != REDACT_MODE_BODY)
		redact_text_release(st, out);
	return 0;
}

/* Keeps the text bytes at raw offsets >= out, rebased to the new hold. */
static void
redact_text_release(struct redact_stream *st, size_t out)
{
	size_t k = 0, j;

	while (k < st->dlen && st->dpos[k] < out)
		k++;
	for (j = k; j < st->dlen; j++) {
		st->dtext[j - k] = st->dtext[j];
		st->dpos[j - k] = st->dpos[j] - (uint32_t)out;
	}
	if (k > 0)
		OPENSSL_cleanse(st->dtext + st->dlen - k, k);
	st->dlen -= k;
}

/*
 * Core feed: scan in after the held bytes, emit all but the new hold.
 *
 * What is emitted is a function of the input positions alone, never of the
 * match state, so the sizes the workload sees (chunks, records, writes) say
 * nothing about how much of a secret some bytes matched (issue 15 item 5):
 * a body holds back min(max_hold, bytes since its last line feed) (the line
 * feed rule only when no pattern contains one); an event stream or
 * WebSocket emits up to the end of its last complete event or frame and
 * holds the partial one (up to max_hold).
 */
int
redact_stream_feed_buf(struct redact_stream *st, const uint8_t *in, size_t len, uint8_t *dst,
    size_t cap, size_t *out_len)
{
	size_t need = st->held + len, out, bound = 0, dfrom;

	if (len > SIZE_MAX - st->held || cap < need)
		return -1;
	if (len > 0)
		memmove(dst + st->held, in, len);
	if (st->held > 0)
		memcpy(dst, st->hold, st->held);
	dfrom = st->dlen;
	if (st->mode != REDACT_MODE_BODY && redact_frame(st, dst, st->held, need, &bound) == -1)
		return -1;
	redact_scan(st->set, dst, st->held, need, &st->state, &st->matches);
	if (st->mode != REDACT_MODE_BODY)
		redact_scan_text(
		    st->set, st->dtext, st->dpos, dfrom, st->dlen, &st->dstate, dst, &st->matches);
	/*
	 * A body is also released up to its last line feed when no pattern
	 * holds one: no match can reach back across it, so lines (NDJSON,
	 * logs, long polls) keep flowing. Still a function of the input only.
	 */
	if (redact_bodylike(st) && !st->set->lf && need > st->held) {
		const uint8_t *nl = memrchr(dst + st->held, '\n', need - st->held);

		if (nl != NULL && (size_t)(nl - dst) + 1 > bound)
			bound = (size_t)(nl - dst) + 1;
	}
	if (st->inread && st->mode != REDACT_MODE_BODY) {
		/* Released at the read's end, up to its last event or frame end. */
		if (bound > 0)
			st->rbound = bound;
		out = 0;
	} else {
		out = need > st->maxhold ? need - st->maxhold : 0;
		if (bound > out)
			out = bound;
	}
	if (redact_keep(st, dst, need, out) == -1)
		return -1;
	*out_len = out;
	return 0;
}

/* A frame the scan cannot read; see redact.h. */
bool
redact_stream_unreadable(const struct redact_stream *st)
{
	return st->mode == REDACT_MODE_WEBSOCKET && st->ws.unreadable;
}

/* A read begins; see redact.h. */
void
redact_stream_read_begin(struct redact_stream *st)
{
	st->inread = true;
	st->rbound = 0;
}

/* A read ends; see redact.h. */
int
redact_stream_read_end(struct redact_stream *st, struct evbuffer *out)
{
	size_t rel = st->held > st->maxhold ? st->held - st->maxhold : 0;

	if (!st->inread)
		return 0;
	st->inread = false;
	if (st->rbound > rel)
		rel = st->rbound;
	st->rbound = 0;
	if (rel == 0)
		return 0;
	if (evbuffer_add(out, st->hold, rel) == -1)
		return -1;
	return redact_keep(st, st->hold, st->held, rel);
}

/* Feed into an evbuffer, in slices of REDACT_FEED_SLICE. */
int
redact_stream_feed(struct redact_stream *st, const uint8_t *in, size_t len, struct evbuffer *out)
{
	struct evbuffer_iovec vec;
	size_t n, need, olen;

	while (len > 0) {
		n = len < REDACT_FEED_SLICE ? len : REDACT_FEED_SLICE;
		need = st->held + n;
		if (evbuffer_reserve_space(out, (ev_ssize_t)need, &vec, 1) != 1 ||
		    vec.iov_len < need)
			return -1;
		if (redact_stream_feed_buf(st, in, n, vec.iov_base, need, &olen) == -1)
			return -1;
		if (olen > 0) {
			vec.iov_len = olen;
			if (evbuffer_commit_space(out, &vec, 1) == -1)
				return -1;
		}
		in += n;
		len -= n;
	}
	return 0;
}

/* Feed a whole evbuffer, chain by chain, draining it. */
int
redact_stream_feed_evbuffer(struct redact_stream *st, struct evbuffer *in, struct evbuffer *out)
{
	struct evbuffer_iovec vec;

	while (evbuffer_get_length(in) > 0) {
		if (evbuffer_peek(in, -1, NULL, &vec, 1) < 1)
			return -1;
		if (redact_stream_feed(st, vec.iov_base, vec.iov_len, out) == -1)
			return -1;
		if (evbuffer_drain(in, vec.iov_len) == -1)
			return -1;
	}
	return 0;
}

/* Back to the start of a message: no held bytes, no pending state. */
static void
redact_stream_reset(struct redact_stream *st)
{
	if (st->held > 0)
		OPENSSL_cleanse(st->hold, st->held);
	if (st->dlen > 0)
		OPENSSL_cleanse(st->dtext, st->dlen);
	st->held = 0;
	st->dlen = 0;
	st->state = 0;
	st->dstate = 0;
	memset(&st->sse, 0, sizeof(st->sse));
	st->sse.lineempty = true;
	memset(&st->ws, 0, sizeof(st->ws));
	st->ws.hneed = 2;
	st->inread = false;
	st->rbound = 0;
}

/* End of message into a caller buffer. */
int
redact_stream_flush_buf(struct redact_stream *st, uint8_t *dst, size_t cap, size_t *out_len)
{
	if (cap < st->held)
		return -1;
	if (st->held > 0)
		memcpy(dst, st->hold, st->held);
	*out_len = st->held;
	redact_stream_reset(st);
	return 0;
}

/* End of message: the held bytes cannot match any more. */
int
redact_stream_flush(struct redact_stream *st, struct evbuffer *out)
{
	if (st->held > 0 && evbuffer_add(out, st->hold, st->held) == -1)
		return -1;
	redact_stream_reset(st);
	return 0;
}

/* Walks the trie depth-first, calling cb for every distinct pattern. */
int
redact_set_foreach_pattern(
    const struct redact_set *set, void (*cb)(const uint8_t *p, size_t len, void *arg), void *arg)
{
	uint8_t *path;
	uint32_t *stack, *next, sp = 0, u, e;

	if (set->nstates == 0)
		return 0;
	path = malloc(set->maxlen + 1);
	stack = malloc(((size_t)set->maxlen + 1) * sizeof(uint32_t));
	next = malloc(((size_t)set->maxlen + 1) * sizeof(uint32_t));
	if (path == NULL || stack == NULL || next == NULL) {
		free(path);
		free(stack);
		free(next);
		return -1;
	}
	stack[0] = 0;
	next[0] = 0;
	for (;;) {
		u = stack[sp];
		if (next[sp] < set->nodes[u].nedge) {
			e = set->nodes[u].edge + next[sp]++;
			u = set->etarget[e];
			path[sp] = set->elabel[e];
			stack[++sp] = u;
			next[sp] = 0;
			/* Own pattern here iff this node ends one more pattern than its fail. */
			if (set->nodes[u].nout > set->nodes[set->nodes[u].fail].nout)
				cb(path, sp, arg);
			continue;
		}
		if (sp == 0)
			break;
		sp--;
	}
	redact_wipe_free(path, set->maxlen + 1);
	free(stack);
	free(next);
	return 0;
}
