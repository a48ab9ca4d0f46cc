/*
 * Structured logging: one JSON object per line on stderr. Every line has a
 * timestamp, level, module, event and process role; values that come from
 * the network are escaped and length-capped. The log API takes plain
 * strings and integers only: a secret (vault/secret.h) cannot be passed.
 */
#ifndef EGRESSD_LOG_H
#define EGRESSD_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum log_level {
	LOG_DEBUG = 0,
	LOG_INFO,
	LOG_WARN,
	LOG_ERROR,
};

/* Longest value kept from the network before "..." is appended. */
#define LOG_MAX_VALUE 256
/* Longest log line; longer lines are cut at a field boundary. */
#define LOG_MAX_LINE 4096

/* One log line being built on the caller's stack. */
struct log_line {
	char buf[LOG_MAX_LINE];
	size_t len;
	bool overflow;
	bool enabled;
	enum log_level level;
};

void log_init(const char *role, enum log_level min, int fd);
void log_set_role(const char *role);
void log_set_level(enum log_level min);
bool log_parse_level(const char *s, enum log_level *out);
bool log_enabled(enum log_level level);

/* Start a line for event `event` of module `module` (both constants). */
void log_begin(struct log_line *l, enum log_level level, const char *module, const char *event);
/* Add a string field; the value is escaped and capped at LOG_MAX_VALUE. */
void log_str(struct log_line *l, const char *key, const char *val);
/* Add a string field from a buffer of known length (may hold NUL bytes). */
void log_strn(struct log_line *l, const char *key, const void *val, size_t len);
void log_int(struct log_line *l, const char *key, long long val);
void log_uint(struct log_line *l, const char *key, unsigned long long val);
void log_bool(struct log_line *l, const char *key, bool val);
/* Write the line (with a newline) in one write(2). */
void log_end(struct log_line *l);

/*
 * Defer debug and info lines (an event loop's process): kept in order and
 * written together by log_flush, in one write(2) of less than PIPE_BUF.
 * kick(arg) is called once for the first line after each flush: the owner
 * schedules log_flush for the end of its loop's turn. A warning or error,
 * a full buffer and log_flush write them. NULL turns deferral off (after a
 * flush). A forked child starts without it.
 */
void log_defer(void (*kick)(void *), void *arg);
/* Write the deferred lines now (the owner's turn ended, or it exits). */
void log_flush(void);

/* Shorthand for a line with a single "msg" field. */
void log_msg(enum log_level level, const char *module, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * Escape `len` bytes of `in` as the body of a JSON string into `out`
 * (capacity `cap`, always NUL-terminated), keeping at most `maxin` input
 * bytes and appending "..." when cut. Control bytes, quotes, backslashes
 * and every byte >= 0x80 are escaped as \u00XX, so the output is ASCII.
 * Returns the length written.
 */
size_t log_escape(char *out, size_t cap, const void *in, size_t len, size_t maxin);

#endif
