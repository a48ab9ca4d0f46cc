/*
 * Streaming redaction of secret values and their common encodings in bytes
 * sent back to the workload. A redact_set is built once per vault revision
 * (immutable, refcounted, shareable across threads); a redact_stream is the
 * per-direction, per-connection scanner state.
 */
#ifndef EGRESSD_VAULT_REDACT_H
#define EGRESSD_VAULT_REDACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;
struct secret;
struct redact_set;
struct redact_stream;

/* Shortest pattern accepted: shorter ones would mask noise. */
#define REDACT_MIN_PATTERN 8
/* Longest pattern (bytes): bounds the hold-back of a stream. Covers the
 * widest rendering (6 bytes per byte, all-\uXXXX JSON) of the largest
 * secret with a basic-auth user. */
#define REDACT_MAX_PATTERN (1u << 17)
/* Most values (secrets, basic pairs) in one set. */
#define REDACT_MAX_VALUES 1024
/* Most automaton states (sum of pattern bytes + 1) in one set. */
#define REDACT_MAX_STATES (1u << 22)
/* Byte written over every byte of a match. */
#define REDACT_MASK_BYTE '*'
/* Largest slice reserved in an output evbuffer at once. */
#define REDACT_FEED_SLICE 65536
/* Framed modes hold a partial event or frame up to this many bytes (or the
 * longest pattern, if longer) before releasing its oldest bytes. */
#define REDACT_FRAMED_HOLD 16384

/*
 * How a stream is cut. Output is released only at points that are a
 * function of the input bytes and their positions, never of the match
 * state, so what the workload sees cannot tell how much of a secret a
 * reflected guess matched.
 */
enum redact_mode {
	/* A body: exactly min(max_hold, bytes since the last line feed) are
	 * held back (the whole min(max_hold, bytes so far) if some pattern
	 * contains a line feed). */
	REDACT_MODE_BODY = 0,
	/* text/event-stream: every complete event goes out at once (SSE keeps
	 * flowing); data values are also scanned as the text a client
	 * reassembles, concatenated across lines and events. */
	REDACT_MODE_SSE,
	/* Server-to-client WebSocket frames: every complete frame goes out at
	 * once; payloads of data frames are scanned concatenated as well. */
	REDACT_MODE_WEBSOCKET,
	/* gRPC messages (5-byte prefix: compressed flag, 32-bit length):
	 * every complete message goes out at once (a streaming call waits for
	 * each); payloads of uncompressed messages are scanned concatenated
	 * as well. */
	REDACT_MODE_GRPC,
};

enum redact_err {
	REDACT_ERR_NONE = 0,
	REDACT_ERR_TOO_SHORT, /* a value is shorter than REDACT_MIN_PATTERN */
	REDACT_ERR_TOO_LONG,  /* an encoding exceeds REDACT_MAX_PATTERN */
	REDACT_ERR_TOO_MANY,  /* too many values or states */
	REDACT_ERR_INVALID,   /* NULL secret, bad basic user */
	REDACT_ERR_NOMEM,
};

/*
 * One value to redact. With basic_user set (basic auth), the set also covers
 * "user:value" and its base64 (as in "Authorization: Basic ..."), besides
 * the value itself. The user name is not secret; it must not contain ':'.
 */
struct redact_value {
	const struct secret *secret; /* borrowed for redact_set_new() only */
	const uint8_t *basic_user;   /* NULL unless basic auth */
	size_t basic_user_len;
};

/*
 * Builds the set for n values: each value is registered raw, reversed, hex
 * (both cases), base64 (padded, plus the three unpadded alignments that occur
 * inside a longer base64 text), base64url, percent-encoded (upper and lower
 * hex, and form style with '+'), and JSON-escaped (minimal, "\/", ASCII-only
 * "\uXXXX", HTML-safe, all-"\uXXXX" in both cases). Returns NULL and *err on
 * failure; refcount 1. n may be 0 (a set that matches nothing).
 */
struct redact_set *redact_set_new(const struct redact_value *vals, size_t n, enum redact_err *err)
    __attribute__((warn_unused_result));

/* Takes another reference; returns set. */
struct redact_set *redact_set_ref(struct redact_set *set);

/* Drops a reference; the last one wipes the patterns and frees. Accepts NULL. */
void redact_set_unref(struct redact_set *set);

/* Number of distinct patterns in the set. */
size_t redact_set_npatterns(const struct redact_set *set);

/* Most bytes a stream of this set can hold back (longest pattern - 1). */
size_t redact_set_max_hold(const struct redact_set *set);

/* Redacts buf in place as one whole message; adds match count to *matches
 * (may be NULL). For header blocks and as the reference for streams. */
void redact_buf(const struct redact_set *set, uint8_t *buf, size_t len, uint64_t *matches);

/* New scanner for one direction of one connection; takes a set reference.
 * Same as redact_stream_new_mode(set, REDACT_MODE_BODY). */
struct redact_stream *redact_stream_new(struct redact_set *set) __attribute__((warn_unused_result));

/* New scanner with the given framing; NULL on a bad mode or no memory. */
struct redact_stream *redact_stream_new_mode(struct redact_set *set, enum redact_mode mode)
    __attribute__((warn_unused_result));

/* Frees the stream and drops its set reference; held bytes are wiped. Accepts NULL. */
void redact_stream_free(struct redact_stream *st);

/*
 * The stream for another body, as redact_stream_new_mode(set, mode) makes
 * one, without an allocation: its held bytes wiped, its buffers kept.
 * Call it after redact_stream_flush (nothing held). 0, or -1 on a bad mode.
 */
int redact_stream_reuse(struct redact_stream *st, struct redact_set *set, enum redact_mode mode)
    __attribute__((warn_unused_result));

/*
 * Scans len bytes and appends to out (masked where matched) all but the
 * bytes the mode holds back: in a body the last min(max_hold, bytes since
 * the last line feed) whatever they are; in framed modes the partial event or frame (at most
 * redact_stream_max_hold()). 0, or -1 on allocation failure (the stream is
 * then unusable).
 */
int redact_stream_feed(struct redact_stream *st, const uint8_t *in, size_t len,
    struct evbuffer *out) __attribute__((warn_unused_result));

/* As redact_stream_feed, draining all of in (e.g. a bufferevent input). */
int redact_stream_feed_evbuffer(struct redact_stream *st, struct evbuffer *in, struct evbuffer *out)
    __attribute__((warn_unused_result));

/* As redact_stream_feed into dst; needs cap >= redact_stream_held() + len,
 * else -1 and nothing consumed. Stores the bytes written in *out_len. */
int redact_stream_feed_buf(struct redact_stream *st, const uint8_t *in, size_t len, uint8_t *dst,
    size_t cap, size_t *out_len) __attribute__((warn_unused_result));

/*
 * One read of the upstream's: a framed stream (event stream, WebSocket,
 * gRPC) releases only at its end, whatever the feeds within it (chunks,
 * DATA frames, slices), so that a secret cut across two events or frames
 * that came in one read is masked whole. Between the two calls every
 * byte fed is held (redact_stream_held() may pass the max hold by the
 * read's size); read_end releases up to the last event or frame end fed,
 * or all but redact_stream_max_hold() bytes if more. A body is held as
 * always. read_end: 0 or -1 (no memory: the stream is unusable).
 */
void redact_stream_read_begin(struct redact_stream *st);
/*
 * Whether a WebSocket stream met a frame from the server that no scan can
 * read: compressed (RSV1; the upgrade negotiates no extension) or masked
 * (RFC 6455 5.1: a server never masks). Its bytes must not be released:
 * the caller ends the tunnel before redact_stream_read_end.
 */
bool redact_stream_unreadable(const struct redact_stream *st);
int redact_stream_read_end(struct redact_stream *st, struct evbuffer *out)
    __attribute__((warn_unused_result));

/* End of message: releases the held bytes (they cannot match) to out and
 * resets the scanner. 0 or -1. */
int redact_stream_flush(struct redact_stream *st, struct evbuffer *out)
    __attribute__((warn_unused_result));

/* As redact_stream_flush into dst (cap >= redact_stream_held()). */
int redact_stream_flush_buf(struct redact_stream *st, uint8_t *dst, size_t cap, size_t *out_len)
    __attribute__((warn_unused_result));

/* Bytes currently held back: a function of the bytes fed and their
 * positions only, always <= redact_stream_max_hold(). */
size_t redact_stream_held(const struct redact_stream *st);

/* Most bytes this stream holds back: redact_set_max_hold() for a body,
 * at least REDACT_FRAMED_HOLD in framed modes. */
size_t redact_stream_max_hold(const struct redact_stream *st);

/* Pattern occurrences masked so far on this stream. */
uint64_t redact_stream_matches(const struct redact_stream *st);

/* Short static name of an error, for logs. */
const char *redact_err_str(enum redact_err err);

#endif
