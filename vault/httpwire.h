/*
 * httpwire: strict HTTP/1.1 head parser (requests and responses), body
 * framing state machine, head writer and path ambiguity check. Pure
 * functions over (const uint8_t *, size_t); results are views into the
 * caller's buffer, valid as long as that buffer is.
 */
#ifndef VAULT_HTTPWIRE_H
#define VAULT_HTTPWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HTTPWIRE_MAX_HEAD_BYTES 32768         /* start line + fields + final CRLF */
#define HTTPWIRE_MAX_HEADERS 100              /* field lines in one head */
#define HTTPWIRE_MAX_CONTENT_LENGTH_DIGITS 18 /* Content-Length < 10^18 */
#define HTTPWIRE_MAX_CHUNK_LINE 1024          /* chunk-size line with extensions */
#define HTTPWIRE_MAX_CHUNK_SIZE_DIGITS 15     /* hex digits of one chunk size */
#define HTTPWIRE_MAX_TRAILER_BYTES 8192       /* whole trailer section */
#define HTTPWIRE_MAX_INTERIM 8                /* 1xx responses a caller should accept per request */
#define HTTPWIRE_MAX_PATH 8192                /* path bytes httpwire_path_is_ambiguous examines */
#define HTTPWIRE_MAX_DECODE_ROUNDS 3          /* percent-decoding passes of that check */

enum httpwire_status {
	HTTPWIRE_OK,        /* complete and valid; see *consumed */
	HTTPWIRE_NEED_MORE, /* valid so far; call again with more bytes */
	HTTPWIRE_INVALID,   /* malformed; see error; close the connection */
	HTTPWIRE_TOO_LARGE, /* over a HTTPWIRE_MAX_* limit; close */
};

/* Why a message was refused: for the log line and the status code. */
enum httpwire_error {
	HTTPWIRE_E_NONE,
	HTTPWIRE_E_LINE_ENDING,       /* bare CR or bare LF */
	HTTPWIRE_E_START_LINE,        /* request or status line syntax */
	HTTPWIRE_E_METHOD,            /* method not a token */
	HTTPWIRE_E_TARGET,            /* not origin-form, bad bytes or %-encoding */
	HTTPWIRE_E_CONNECT,           /* CONNECT: this is not a forward proxy */
	HTTPWIRE_E_VERSION,           /* neither HTTP/1.1 nor HTTP/1.0 (505) */
	HTTPWIRE_E_STATUS,            /* status code out of range */
	HTTPWIRE_E_FIELD_NAME,        /* not a token, or whitespace before ':' */
	HTTPWIRE_E_FIELD_VALUE,       /* CTL, NUL or (requests) 8-bit byte */
	HTTPWIRE_E_OBS_FOLD,          /* continuation line */
	HTTPWIRE_E_CL_TE,             /* both Content-Length and Transfer-Encoding */
	HTTPWIRE_E_CONTENT_LENGTH,    /* duplicate or not a strict 1*DIGIT */
	HTTPWIRE_E_TRANSFER_ENCODING, /* anything but one exact "chunked" (501) */
	HTTPWIRE_E_HOST,              /* missing, duplicate or malformed Host */
	HTTPWIRE_E_EXPECT,            /* Expect other than 100-continue (417) */
	HTTPWIRE_E_HEAD_TOO_LARGE,    /* over HTTPWIRE_MAX_HEAD_BYTES (431) */
	HTTPWIRE_E_TOO_MANY_FIELDS,   /* over HTTPWIRE_MAX_HEADERS or capacity (431) */
	HTTPWIRE_E_CHUNK,             /* bad chunk-size line or chunk CRLF */
	HTTPWIRE_E_CHUNK_TOO_LARGE,   /* chunk line or size over its limit */
	HTTPWIRE_E_TRAILER,           /* bad or refused trailer field */
	HTTPWIRE_E_TRUNCATED,         /* connection closed inside a framed body */
};

/* A view into the caller's buffer. */
struct httpwire_view {
	const uint8_t *ptr;
	size_t len;
};

/* One field line; name.ptr == NULL marks a slot httpwire_head_write skips. */
struct httpwire_header {
	struct httpwire_view name;
	struct httpwire_view value; /* OWS trimmed */
};

/* How the body of a message is delimited. */
enum httpwire_framing {
	HTTPWIRE_FRAME_NONE,    /* no body */
	HTTPWIRE_FRAME_LENGTH,  /* Content-Length bytes */
	HTTPWIRE_FRAME_CHUNKED, /* chunked transfer coding */
	HTTPWIRE_FRAME_CLOSE,   /* response body runs to connection close */
	HTTPWIRE_FRAME_TUNNEL,  /* 101: bytes after the head are another protocol */
};

/* A parsed request head; views are borrowed from the parsed buffer. */
struct httpwire_request {
	enum httpwire_error error;
	struct httpwire_view method;
	struct httpwire_view target;     /* origin-form, raw */
	struct httpwire_view path;       /* target before '?' */
	struct httpwire_view start_line; /* without CRLF */
	int version_minor;               /* 1 for HTTP/1.1, 0 for HTTP/1.0 */
	struct httpwire_header *headers; /* the caller's array */
	size_t nheaders;
	struct httpwire_view host; /* the one Host value */
	enum httpwire_framing framing;
	uint64_t content_length; /* when framing is LENGTH */
	bool expect_continue;    /* Expect: 100-continue */
	bool keep_alive;         /* connection may carry another request */
	bool upgrade;            /* an Upgrade field is present */
};

/* A parsed response head; views are borrowed from the parsed buffer. */
struct httpwire_response {
	enum httpwire_error error;
	int status;
	struct httpwire_view reason;
	int version_minor;
	struct httpwire_header *headers;
	size_t nheaders;
	enum httpwire_framing framing;
	uint64_t content_length;
	bool keep_alive;
	bool interim; /* 1xx other than 101: another head follows */
};

/*
 * Parse a request head at buf[0..len), headers stored into hdrs[0..cap).
 * On OK *consumed is the head length (through the blank line); body bytes
 * and pipelined requests follow it. Whatever the status, req->path.ptr is
 * non-NULL exactly when the request line was whole and valid, and method,
 * target, path and version_minor are then set (so a head cut short still
 * tells its request line: the control API's audit of refused requests).
 */
enum httpwire_status httpwire_parse_request(const uint8_t *buf, size_t len,
    struct httpwire_request *req, struct httpwire_header *hdrs, size_t cap, size_t *consumed)
    __attribute__((warn_unused_result));

/*
 * Parse a response head; request_was_head selects the no-body rule of
 * responses to HEAD.
 */
enum httpwire_status httpwire_parse_response(const uint8_t *buf, size_t len, bool request_was_head,
    struct httpwire_response *resp, struct httpwire_header *hdrs, size_t cap, size_t *consumed)
    __attribute__((warn_unused_result));

/*
 * The CONNECT request head for addr (family AF_INET or AF_INET6; an
 * address, never a name the proxy would resolve again) and port, with Host
 * and, when auth is non-empty, Proxy-Authorization: auth; NUL-terminated
 * in out (cap bytes). Its length, or 0 when it does not fit. out holds
 * auth: the caller wipes it.
 */
size_t httpwire_connect_request(
    char *out, size_t cap, int family, const void *addr, unsigned port, const char *auth);

/*
 * A forward proxy's answer to CONNECT at buf[0..len), with the strict
 * response parser: its status code (*consumed the head's length), 0 when
 * more bytes are needed and len < max, -1 when it is not a valid HTTP/1.x
 * answer head or is not whole within max bytes.
 */
int httpwire_connect_status(const uint8_t *buf, size_t len, size_t max, size_t *consumed)
    __attribute__((warn_unused_result));

/* Called for each span of body payload (chunk framing excluded). data ==
 * buf + off of the buffer given to httpwire_body_feed. */
typedef void (*httpwire_body_data_cb)(const uint8_t *data, size_t off, size_t len, void *arg);

/* Flags of httpwire_body_init. */
#define HTTPWIRE_BODY_NO_TRAILERS 0x1 /* any trailer field is INVALID */

/*
 * Streaming body framing state, embedded by the caller. Fields are private
 * to httpwire.c; read them through the functions below.
 */
struct httpwire_body {
	enum httpwire_framing framing;
	int state;
	int flags;
	enum httpwire_error error;
	uint64_t remaining;   /* bytes left in the body or current chunk */
	size_t line_len;      /* bytes of the current chunk-size line */
	size_t digits;        /* hex digits of the current chunk size */
	size_t trailer_bytes; /* bytes of the trailer section so far */
	size_t trailer_fields;
	uint64_t payload; /* payload bytes delivered */
};

/* Start decoding a body framed as f (content_length used for LENGTH). */
void httpwire_body_init(
    struct httpwire_body *b, enum httpwire_framing f, uint64_t content_length, int flags);

/*
 * Feed buf[0..len); *consumed is the bytes that belong to this body
 * (framing included), the rest belongs to the next message. cb (may be
 * NULL) sees each payload span. OK: the body ended; NEED_MORE: every byte
 * was consumed and more are needed (CLOSE and TUNNEL always say so).
 */
enum httpwire_status httpwire_body_feed(struct httpwire_body *b, const uint8_t *buf, size_t len,
    size_t *consumed, httpwire_body_data_cb cb, void *arg) __attribute__((warn_unused_result));

/* The peer closed: OK when that ends the body validly (CLOSE, or done). */
enum httpwire_status httpwire_body_eof(struct httpwire_body *b) __attribute__((warn_unused_result));

/* Whether the body has ended. */
bool httpwire_body_done(const struct httpwire_body *b);

/* The error that made a feed fail. */
enum httpwire_error httpwire_body_error(const struct httpwire_body *b);

/* Trailer fields seen (chunked only). */
size_t httpwire_body_trailer_fields(const struct httpwire_body *b);

/* p[0..n) is lit[0..n), ASCII case aside. */
bool httpwire_ci_eq(const uint8_t *p, const char *lit, size_t n);

/*
 * Case-insensitive compare of a field name with a literal. Inline: the
 * literal's length is known where it is written, and most names differ
 * from it in length.
 */
static inline bool
httpwire_name_eq(struct httpwire_view name, const char *lit)
{
	size_t n = strlen(lit);

	return name.len == n && httpwire_ci_eq(name.ptr, lit, n);
}

/* First header named name (case-insensitive), or NULL. */
const struct httpwire_header *httpwire_find_header(
    const struct httpwire_header *h, size_t n, const char *name);

/*
 * Write start_line CRLF, then headers[] (slots with name.ptr NULL skipped),
 * then extra[], each "name: value" CRLF, then the blank line. Refuses (-1)
 * names that are not tokens, values with CR/LF/NUL/CTL, a start line with
 * CR/LF, and cap too small. *written is the head length on success.
 */
int httpwire_head_write(uint8_t *buf, size_t cap, struct httpwire_view start_line,
    const struct httpwire_header *headers, size_t n, const struct httpwire_header *extra, size_t m,
    size_t *written) __attribute__((warn_unused_result));

/*
 * Whether the path of a request target (the part before '?') can be read
 * two ways: a "." or ".." segment (also "..;x"), '\\', ';', or after up to
 * HTTPWIRE_MAX_DECODE_ROUNDS percent-decoding passes an encoded '/', '\\',
 * NUL or CTL, bytes that are not strict UTF-8 (overlong forms of any length,
 * surrogates, stray or missing continuation bytes), a look-alike of '.',
 * '/' or '\\' (fullwidth %ef%bc%8e, %ef%bc%8f, ...), a dot-segment, or
 * still-encoded '%'.
 */
bool httpwire_path_is_ambiguous(const uint8_t *target, size_t len);

/* A constant name for an error, for logs. */
const char *httpwire_error_str(enum httpwire_error e);

#endif /* VAULT_HTTPWIRE_H */
