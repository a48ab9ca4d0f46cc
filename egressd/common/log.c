/*
 * JSON-lines logger, used by the parent and its children. Each line is built
 * in a fixed buffer and written with a single write(2) so that lines of the
 * two processes never interleave. A child's event loop can defer its
 * debug and info lines (log_defer): they are kept in order in one buffer
 * of less than PIPE_BUF and written together at the end of the loop's turn
 * (still one write(2), so still whole lines), or sooner when the buffer is
 * full or a warning comes; never dropped. Values from the network go through
 * log_escape(): escaped to ASCII and capped, so a hostile name cannot forge
 * fields or flood the log. Must never receive a secret: callers log
 * lengths ("redacted len=N"), never values.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "egressd/common/log.h"

static const char *log_role = "egressd";
static enum log_level log_min = LOG_INFO;
static int log_fd = 2;
static pid_t log_pid; /* getpid() is a system call: kept, and reset in a forked child */
static bool log_atfork;

/* Deferred lines (log_defer): whole lines, written together by log_flush. */
#define LOG_DEFER_CAP (PIPE_BUF - 1)
static struct {
	bool on;
	bool kicked; /* the owner was asked for a flush since the last one */
	void (*kick)(void *);
	void *arg;
	size_t len;
	char buf[LOG_DEFER_CAP];
} log_q;

/* Bytes kept free at the end of a line for the cut marker and "}\n". */
#define LOG_RESERVE 16

static const char *const log_level_names[] = {
    [LOG_DEBUG] = "debug",
    [LOG_INFO] = "info",
    [LOG_WARN] = "warn",
    [LOG_ERROR] = "error",
};

/* In a forked child: its own pid, and no deferral (the parent's loop is not its). */
static void
log_forked(void)
{
	log_pid = getpid();
	log_q.on = log_q.kicked = false;
	log_q.len = 0;
}

/* Set the process role ("parent", "worker", "cli"), level and output fd. */
void
log_init(const char *role, enum log_level min, int fd)
{
	log_role = role;
	log_min = min;
	log_fd = fd;
	log_pid = getpid();
	if (!log_atfork && pthread_atfork(NULL, NULL, log_forked) == 0)
		log_atfork = true;
}

/* Change the role after fork(). */
void
log_set_role(const char *role)
{
	log_role = role;
	log_pid = getpid();
}

static void
log_write(const char *buf, size_t len)
{
	ssize_t r;

	do {
		r = write(log_fd, buf, len);
	} while (r < 0 && errno == EINTR);
}

void
log_flush(void)
{
	if (log_q.len > 0)
		log_write(log_q.buf, log_q.len);
	log_q.len = 0;
	log_q.kicked = false;
}

void
log_defer(void (*kick)(void *), void *arg)
{
	log_flush();
	log_q.kick = kick;
	log_q.arg = arg;
	log_q.on = kick != NULL;
}

/* Change the minimum level. */
void
log_set_level(enum log_level min)
{
	log_min = min;
}

/* Parse "debug", "info", "warn"/"warning" or "error". */
bool
log_parse_level(const char *s, enum log_level *out)
{
	for (size_t i = 0; i < sizeof(log_level_names) / sizeof(log_level_names[0]); i++) {
		if (strcasecmp(s, log_level_names[i]) == 0) {
			*out = (enum log_level)i;
			return true;
		}
	}
	if (strcasecmp(s, "warning") == 0) {
		*out = LOG_WARN;
		return true;
	}
	return false;
}

/* Whether a line of this level would be written. */
bool
log_enabled(enum log_level level)
{
	return level >= log_min;
}

size_t
log_escape(char *out, size_t cap, const void *in, size_t len, size_t maxin)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *p = in;
	size_t o = 0;
	bool cut = len > maxin;

	if (cap == 0)
		return 0;
	if (cut)
		len = maxin;
	for (size_t i = 0; i < len; i++) {
		uint8_t c = p[i];
		char esc[7];
		size_t n;

		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			n = 2;
		} else if (c < 0x20 || c >= 0x7f) {
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			n = 6;
		} else {
			esc[0] = (char)c;
			n = 1;
		}
		if (o + n + 4 > cap) {
			cut = true;
			break;
		}
		memcpy(out + o, esc, n);
		o += n;
	}
	if (cut && o + 4 <= cap) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
	return o;
}

static void
log_append(struct log_line *l, const char *s, size_t n)
{
	/* Keep room for the cut marker and the closing "}\n". */
	if (l->overflow || l->len + n + LOG_RESERVE > sizeof(l->buf)) {
		l->overflow = true;
		return;
	}
	memcpy(l->buf + l->len, s, n);
	l->len += n;
}

static void
log_key(struct log_line *l, const char *key)
{
	char tmp[96];
	size_t n = log_escape(tmp, sizeof(tmp), key, strlen(key), 64);

	log_append(l, ",\"", 2);
	log_append(l, tmp, n);
	log_append(l, "\":", 2);
}

/* Start a line: timestamp, level, role, pid, module and event. */
void
log_begin(struct log_line *l, enum log_level level, const char *module, const char *event)
{
	struct timespec ts;
	struct tm tm;
	char head[256];
	int n;

	l->len = 0;
	l->overflow = false;
	l->enabled = log_enabled(level);
	l->level = level;
	if (!l->enabled)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(head, sizeof(head),
	    "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"level\":\"%s\","
	    "\"proc\":\"%s\",\"pid\":%ld,\"module\":\"%s\",\"event\":\"%s\"",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
	    ts.tv_nsec / 1000000, log_level_names[level], log_role,
	    (long)(log_pid != 0 ? log_pid : getpid()), module, event);
	if (n > 0)
		log_append(l, head, (size_t)n < sizeof(head) ? (size_t)n : sizeof(head) - 1);
}

/* Add an escaped, capped string field (NULL prints as null). */
void
log_str(struct log_line *l, const char *key, const char *val)
{
	if (!l->enabled)
		return;
	if (val == NULL) {
		log_key(l, key);
		log_append(l, "null", 4);
		return;
	}
	log_strn(l, key, val, strlen(val));
}

/* Add an escaped, capped field from a byte buffer. */
void
log_strn(struct log_line *l, const char *key, const void *val, size_t len)
{
	char tmp[LOG_MAX_VALUE * 6 + 8];
	size_t n;

	if (!l->enabled)
		return;
	n = log_escape(tmp, sizeof(tmp), val, len, LOG_MAX_VALUE);
	log_key(l, key);
	log_append(l, "\"", 1);
	log_append(l, tmp, n);
	log_append(l, "\"", 1);
}

/* Add a signed integer field. */
void
log_int(struct log_line *l, const char *key, long long val)
{
	char tmp[32];
	int n;

	if (!l->enabled)
		return;
	n = snprintf(tmp, sizeof(tmp), "%lld", val);
	log_key(l, key);
	log_append(l, tmp, (size_t)n);
}

/* Add an unsigned integer field. */
void
log_uint(struct log_line *l, const char *key, unsigned long long val)
{
	char tmp[32];
	int n;

	if (!l->enabled)
		return;
	n = snprintf(tmp, sizeof(tmp), "%llu", val);
	log_key(l, key);
	log_append(l, tmp, (size_t)n);
}

/* Add a boolean field. */
void
log_bool(struct log_line *l, const char *key, bool val)
{
	if (!l->enabled)
		return;
	log_key(l, key);
	log_append(l, val ? "true" : "false", val ? 4 : 5);
}

/* Close the line and write it in one call. */
void
log_end(struct log_line *l)
{
	if (!l->enabled)
		return;
	if (l->overflow) {
		/* Room was kept: mark the cut so readers know. */
		memcpy(l->buf + l->len, ",\"cut\":true", 11);
		l->len += 11;
	}
	memcpy(l->buf + l->len, "}\n", 2);
	l->len += 2;
	if (log_q.on && l->level < LOG_WARN && l->len <= sizeof(log_q.buf)) {
		if (log_q.len + l->len > sizeof(log_q.buf))
			log_flush();
		memcpy(log_q.buf + log_q.len, l->buf, l->len);
		log_q.len += l->len;
		if (!log_q.kicked) {
			log_q.kicked = true;
			log_q.kick(log_q.arg);
		}
		return;
	}
	/* In order: what was deferred goes first. */
	log_flush();
	log_write(l->buf, l->len);
}

/* A line with one formatted "msg" field; the format is ours, not the network's. */
void
log_msg(enum log_level level, const char *module, const char *event, const char *fmt, ...)
{
	struct log_line l;
	char msg[1024];
	va_list ap;

	log_begin(&l, level, module, event);
	if (!l.enabled)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_str(&l, "msg", msg);
	log_end(&l);
}
