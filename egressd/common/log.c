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

/*
 * p[0..len) escaped to ASCII (\" \\ and \u00XX) into out while each
 * escape fits whole in room bytes: the bytes written, and in *used the
 * input bytes they stand for.
 */
static size_t
log_esc_some(char *out, size_t room, const uint8_t *p, size_t len, size_t *used)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0, i;

	for (i = 0; i < len; i++) {
		uint8_t c = p[i];

		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
			if (o + 1 > room)
				break;
			out[o++] = (char)c;
		} else if (c == '"' || c == '\\') {
			if (o + 2 > room)
				break;
			out[o++] = '\\';
			out[o++] = (char)c;
		} else {
			if (o + 6 > room)
				break;
			memcpy(out + o, "\\u00", 4);
			out[o + 4] = hex[c >> 4];
			out[o + 5] = hex[c & 15];
			o += 6;
		}
	}
	*used = i;
	return o;
}

size_t
log_escape(char *out, size_t cap, const void *in, size_t len, size_t maxin)
{
	bool cut = len > maxin;
	size_t o, used;

	if (cap == 0)
		return 0;
	if (cut)
		len = maxin;
	/* Room is kept for the cut marker and the NUL. */
	o = log_esc_some(out, cap >= 4 ? cap - 4 : 0, in, len, &used);
	if (used < len)
		cut = true;
	if (cut && o + 4 <= cap) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
	return o;
}

/*
 * A field goes in whole or not at all: it is built at the end of the line
 * and taken back when it does not fit with LOG_RESERVE bytes left (the
 * cut marker and "}\n"); the line is cut there, so a cut line is still
 * one JSON object. Built in place, without printf: an info line per
 * credentialed request is on the intercept's hot path.
 */
static size_t
log_room(const struct log_line *l)
{
	if (l->overflow || l->len + LOG_RESERVE >= sizeof(l->buf))
		return 0;
	return sizeof(l->buf) - LOG_RESERVE - l->len;
}

/*
 * p[0..len) escaped as log_escape does (capped at maxin input bytes, then
 * "...") into out[0..room): its length, or SIZE_MAX when it does not fit.
 */
static size_t
log_esc(char *out, size_t room, const uint8_t *p, size_t len, size_t maxin)
{
	bool cut = len > maxin;
	size_t o, used;

	if (cut)
		len = maxin;
	o = log_esc_some(out, room, p, len, &used);
	if (used < len)
		return SIZE_MAX;
	if (cut) {
		if (o + 3 > room)
			return SIZE_MAX;
		memcpy(out + o, "...", 3);
		o += 3;
	}
	return o;
}

/* Decimal digits of v into out (20 bytes at most): their count. */
static size_t
log_u64(char *out, unsigned long long v)
{
	char t[20];
	size_t n = 0;

	do {
		t[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	for (size_t i = 0; i < n; i++)
		out[i] = t[n - 1 - i];
	return n;
}

/*
 * Start a field, ,"key": at the end of the line: where its value goes
 * (*room bytes there), or NULL when the line is cut here.
 */
static char *
log_field(struct log_line *l, const char *key, size_t *room)
{
	size_t r = log_room(l), n;
	char *p = l->buf + l->len;

	if (r < 4 ||
	    (n = log_esc(p + 2, r - 4, (const uint8_t *)key, strlen(key), 64)) == SIZE_MAX) {
		l->overflow = true;
		return NULL;
	}
	p[0] = ',';
	p[1] = '"';
	p[2 + n] = '"';
	p[3 + n] = ':';
	*room = r - 4 - n;
	return p + 4 + n;
}

/* A field's value v[0..n) is written: the field is the line's. */
static void
log_field_end(struct log_line *l, const char *v, size_t n)
{
	l->len = (size_t)(v - l->buf) + n;
}

/* A field whose value is s[0..n), as it is (digits, true, null). */
static void
log_raw(struct log_line *l, const char *key, const char *s, size_t n)
{
	size_t room;
	char *v = log_field(l, key, &room);

	if (v == NULL)
		return;
	if (n > room) {
		l->overflow = true;
		return;
	}
	memcpy(v, s, n);
	log_field_end(l, v, n);
}

/* Bytes of s, at most cap - *o - 1 of them, at out + *o. */
static void
log_put(char *out, size_t *o, size_t cap, const char *s)
{
	size_t n = strlen(s);

	if (n > cap - 1 - *o)
		n = cap - 1 - *o;
	memcpy(out + *o, s, n);
	*o += n;
}

/* "YYYY-MM-DDTHH:MM:SS" of the last second a line was begun in. */
static struct {
	time_t sec;
	char text[64]; /* 19 used: snprintf sizes %d at 11 */
} log_ts = {-1, ""};

/* Start a line: timestamp, level, role, pid, module and event. */
void
log_begin(struct log_line *l, enum log_level level, const char *module, const char *event)
{
	struct timespec ts;
	char *h = l->buf;
	size_t o = 0, cap = 256;
	long ms;

	l->len = 0;
	l->overflow = false;
	l->enabled = log_enabled(level);
	l->level = level;
	if (!l->enabled)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (ts.tv_sec != log_ts.sec) {
		struct tm tm;

		gmtime_r(&ts.tv_sec, &tm);
		snprintf(log_ts.text, sizeof(log_ts.text), "%04d-%02d-%02dT%02d:%02d:%02d",
		    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
		log_ts.sec = ts.tv_sec;
	}
	ms = ts.tv_nsec / 1000000;
	/* The head is ours (names of the code, not of the network): at most 255 bytes. */
	log_put(h, &o, cap, "{\"ts\":\"");
	log_put(h, &o, cap, log_ts.text);
	if (o + 5 < cap) {
		h[o++] = '.';
		h[o++] = (char)('0' + ms / 100);
		h[o++] = (char)('0' + ms / 10 % 10);
		h[o++] = (char)('0' + ms % 10);
	}
	log_put(h, &o, cap, "Z\",\"level\":\"");
	log_put(h, &o, cap, log_level_names[level]);
	log_put(h, &o, cap, "\",\"proc\":\"");
	log_put(h, &o, cap, log_role);
	log_put(h, &o, cap, "\",\"pid\":");
	if (o + 21 < cap)
		o += log_u64(h + o, (unsigned long long)(log_pid != 0 ? log_pid : getpid()));
	log_put(h, &o, cap, ",\"module\":\"");
	log_put(h, &o, cap, module);
	log_put(h, &o, cap, "\",\"event\":\"");
	log_put(h, &o, cap, event);
	log_put(h, &o, cap, "\"");
	l->len = o;
}

/* Add an escaped, capped string field (NULL prints as null). */
void
log_str(struct log_line *l, const char *key, const char *val)
{
	if (!l->enabled)
		return;
	if (val == NULL) {
		log_raw(l, key, "null", 4);
		return;
	}
	log_strn(l, key, val, strlen(val));
}

/* Add an escaped, capped field from a byte buffer. */
void
log_strn(struct log_line *l, const char *key, const void *val, size_t len)
{
	size_t room, n;
	char *v;

	if (!l->enabled || (v = log_field(l, key, &room)) == NULL)
		return;
	if (room < 2 || (n = log_esc(v + 1, room - 2, val, len, LOG_MAX_VALUE)) == SIZE_MAX) {
		l->overflow = true;
		return;
	}
	v[0] = '"';
	v[n + 1] = '"';
	log_field_end(l, v, n + 2);
}

/* Add a signed integer field. */
void
log_int(struct log_line *l, const char *key, long long val)
{
	char tmp[24];
	size_t n = 0;

	if (!l->enabled)
		return;
	if (val < 0)
		tmp[n++] = '-';
	n += log_u64(tmp + n, val < 0 ? 0ULL - (unsigned long long)val : (unsigned long long)val);
	log_raw(l, key, tmp, n);
}

/* Add an unsigned integer field. */
void
log_uint(struct log_line *l, const char *key, unsigned long long val)
{
	char tmp[24];

	if (!l->enabled)
		return;
	log_raw(l, key, tmp, log_u64(tmp, val));
}

/* Add a boolean field. */
void
log_bool(struct log_line *l, const char *key, bool val)
{
	if (!l->enabled)
		return;
	log_raw(l, key, val ? "true" : "false", val ? 4 : 5);
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
