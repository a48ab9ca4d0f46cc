/*
 * httpwire: strict HTTP/1.1 message framing for the intercept path. It
 * parses request and response heads, follows bodies as a streaming state
 * machine (Content-Length, chunked, close-delimited), writes rewritten heads
 * and flags paths that a server could read another way. Run by the worker
 * on bytes from the workload and from upstreams. It must never guess: any
 * byte sequence that two HTTP implementations could frame differently
 * (smuggling) is refused, never normalised, and nothing is read past a
 * checked length or allocated.
 */
#include "vault/httpwire.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* Bounds-checked reader; all message bytes are read through it. */
struct hw_cur {
	const uint8_t *p;
	size_t len;
	size_t off;
};

static bool
cur_peek(const struct hw_cur *c, size_t ahead, uint8_t *v)
{
	if (c->len - c->off <= ahead)
		return false;
	*v = c->p[c->off + ahead];
	return true;
}

static bool
cur_u8(struct hw_cur *c, uint8_t *v)
{
	if (!cur_peek(c, 0, v))
		return false;
	c->off++;
	return true;
}

static bool
view_at(struct httpwire_view v, size_t i, uint8_t *out)
{
	if (i >= v.len)
		return false;
	*out = v.ptr[i];
	return true;
}

/* RFC 9110 5.6.2 tchar. */
static bool
is_tchar(uint8_t ch)
{
	if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
		return true;
	return ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static bool
is_vchar(uint8_t ch)
{
	return ch >= 0x21 && ch <= 0x7e;
}

static int
hex_val(uint8_t ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

static uint8_t
lower(uint8_t ch)
{
	return (ch >= 'A' && ch <= 'Z') ? (uint8_t)(ch - 'A' + 'a') : ch;
}

bool
httpwire_ci_eq(const uint8_t *p, const char *lit, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (lower(p[i]) != lower((uint8_t)lit[i]))
			return false;
	return true;
}

/* v is lit, ASCII case aside (inline: most calls name a literal, whose length is folded). */
static inline bool
view_eq_ci(struct httpwire_view v, const char *lit)
{
	return httpwire_name_eq(v, lit);
}

static bool
view_eq(struct httpwire_view v, const char *lit)
{
	size_t n = strlen(lit);
	return v.len == n && memcmp(v.ptr, lit, n) == 0;
}

static struct httpwire_view
view_sub(struct httpwire_view v, size_t from, size_t to)
{
	return (struct httpwire_view){.ptr = v.ptr + from, .len = to - from};
}

/*
 * Next CRLF-terminated line. Only CRLF ends a line: a bare LF or a CR not
 * followed by LF is refused, since other parsers split lines there.
 */
static enum httpwire_status
next_line(struct hw_cur *c, struct httpwire_view *line, enum httpwire_error *err)
{
	size_t start = c->off;
	uint8_t ch, nx;

	for (size_t i = 0; cur_peek(c, i, &ch); i++) {
		if (ch == '\n') {
			*err = HTTPWIRE_E_LINE_ENDING;
			return HTTPWIRE_INVALID;
		}
		if (ch != '\r')
			continue;
		if (!cur_peek(c, i + 1, &nx))
			return HTTPWIRE_NEED_MORE;
		if (nx != '\n') {
			*err = HTTPWIRE_E_LINE_ENDING;
			return HTTPWIRE_INVALID;
		}
		line->ptr = c->p + start;
		line->len = i;
		c->off += i + 2;
		return HTTPWIRE_OK;
	}
	return HTTPWIRE_NEED_MORE;
}

static enum httpwire_status
head_line(struct hw_cur *c, struct httpwire_view *line, enum httpwire_error *err)
{
	enum httpwire_status st = next_line(c, line, err);

	if ((st == HTTPWIRE_OK && c->off > HTTPWIRE_MAX_HEAD_BYTES) ||
	    (st == HTTPWIRE_NEED_MORE && c->len >= HTTPWIRE_MAX_HEAD_BYTES)) {
		*err = HTTPWIRE_E_HEAD_TOO_LARGE;
		return HTTPWIRE_TOO_LARGE;
	}
	return st;
}

/*
 * Field lines up to the blank line, into hdrs. Names must be tokens
 * directly followed by ':' ("Host :" is how TE/Host smuggling starts);
 * values are trimmed of OWS and may hold only SP, HTAB and VCHAR (plus
 * obs-text in responses): NUL and CTLs truncate or split in C and in logs.
 */
static enum httpwire_status
parse_fields(struct hw_cur *c, bool request, struct httpwire_header *hdrs, size_t cap, size_t *n,
    enum httpwire_error *err)
{
	struct httpwire_view line;
	enum httpwire_status st;
	size_t colon, vs, ve;
	uint8_t ch;

	*n = 0;
	for (;;) {
		if ((st = head_line(c, &line, err)) != HTTPWIRE_OK)
			return st;
		if (line.len == 0)
			return HTTPWIRE_OK;
		if (view_at(line, 0, &ch) && (ch == ' ' || ch == '\t')) {
			*err = HTTPWIRE_E_OBS_FOLD;
			return HTTPWIRE_INVALID;
		}
		for (colon = 0; view_at(line, colon, &ch) && ch != ':'; colon++) {
			if (!is_tchar(ch)) {
				*err = HTTPWIRE_E_FIELD_NAME;
				return HTTPWIRE_INVALID;
			}
		}
		if (colon == 0 || colon == line.len) {
			*err = HTTPWIRE_E_FIELD_NAME;
			return HTTPWIRE_INVALID;
		}
		vs = colon + 1;
		ve = line.len;
		while (view_at(line, vs, &ch) && (ch == ' ' || ch == '\t'))
			vs++;
		while (ve > vs && view_at(line, ve - 1, &ch) && (ch == ' ' || ch == '\t'))
			ve--;
		for (size_t i = vs; i < ve; i++) {
			if (!view_at(line, i, &ch))
				break;
			if (ch == ' ' || ch == '\t' || is_vchar(ch) || (!request && ch >= 0x80))
				continue;
			*err = HTTPWIRE_E_FIELD_VALUE;
			return HTTPWIRE_INVALID;
		}
		/* Framing fields must be spelled plainly: "chunked\t" is
		 * "chunked" here but maybe not upstream, if forwarded raw. */
		if ((view_eq_ci(view_sub(line, 0, colon), "transfer-encoding") ||
		        view_eq_ci(view_sub(line, 0, colon), "content-length")) &&
		    (ve != line.len || (view_at(line, colon + 1, &ch) && ch == '\t'))) {
			*err = HTTPWIRE_E_FIELD_VALUE;
			return HTTPWIRE_INVALID;
		}
		if (*n >= HTTPWIRE_MAX_HEADERS || *n >= cap) {
			*err = HTTPWIRE_E_TOO_MANY_FIELDS;
			return HTTPWIRE_TOO_LARGE;
		}
		hdrs[*n].name = view_sub(line, 0, colon);
		hdrs[*n].value = view_sub(line, vs, ve);
		(*n)++;
	}
}

/* Strict 1*DIGIT, no sign, no leading zero, under 10^18. */
static bool
parse_content_length(struct httpwire_view v, uint64_t *out)
{
	uint64_t x = 0;
	uint8_t ch;

	if (v.len == 0 || v.len > HTTPWIRE_MAX_CONTENT_LENGTH_DIGITS)
		return false;
	for (size_t i = 0; i < v.len; i++) {
		if (!view_at(v, i, &ch) || ch < '0' || ch > '9')
			return false;
		if (i == 0 && ch == '0' && v.len > 1)
			return false;
		x = x * 10 + (uint64_t)(ch - '0');
	}
	*out = x;
	return true;
}

/* Host: reg-name / IPv4 / [IP-literal] with an optional port; no
 * userinfo, list, space, '#' or NUL: one reading only. */
static bool
valid_host(struct httpwire_view v)
{
	uint8_t ch;

	if (v.len == 0)
		return false;
	for (size_t i = 0; i < v.len; i++) {
		if (!view_at(v, i, &ch))
			return false;
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == ':' || ch == '[' ||
		    ch == ']' || ch == '_')
			continue;
		return false;
	}
	return true;
}

/* Whether a comma-separated list value holds tok (case-insensitive). */
static bool
list_has(struct httpwire_view v, const char *tok)
{
	size_t i = 0, s, e;
	uint8_t ch;

	while (i < v.len) {
		s = i;
		while (view_at(v, i, &ch) && ch != ',')
			i++;
		e = i;
		while (view_at(v, s, &ch) && s < e && (ch == ' ' || ch == '\t'))
			s++;
		while (e > s && view_at(v, e - 1, &ch) && (ch == ' ' || ch == '\t'))
			e--;
		if (view_eq_ci(view_sub(v, s, e), tok))
			return true;
		i++;
	}
	return false;
}

/* What the framing-relevant fields of a head say. */
struct hw_fields {
	size_t cl_count, te_count, host_count;
	bool cl_ok, te_chunked;
	uint64_t cl;
	struct httpwire_view host;
	bool conn_close, conn_keep_alive, expect_continue, expect_other, upgrade;
};

static void
scan_fields(const struct httpwire_header *h, size_t n, struct hw_fields *f)
{
	memset(f, 0, sizeof(*f));
	f->cl_ok = true;
	for (size_t i = 0; i < n; i++) {
		if (httpwire_name_eq(h[i].name, "content-length")) {
			if (f->cl_count++ > 0 || !parse_content_length(h[i].value, &f->cl))
				f->cl_ok = false;
		} else if (httpwire_name_eq(h[i].name, "transfer-encoding")) {
			f->te_count++;
			f->te_chunked = view_eq_ci(h[i].value, "chunked");
		} else if (httpwire_name_eq(h[i].name, "host")) {
			f->host_count++;
			f->host = h[i].value;
		} else if (httpwire_name_eq(h[i].name, "connection")) {
			f->conn_close |= list_has(h[i].value, "close");
			f->conn_keep_alive |= list_has(h[i].value, "keep-alive");
		} else if (httpwire_name_eq(h[i].name, "expect")) {
			if (view_eq_ci(h[i].value, "100-continue"))
				f->expect_continue = true;
			else
				f->expect_other = true;
		} else if (httpwire_name_eq(h[i].name, "upgrade")) {
			f->upgrade = true;
		}
	}
}

/*
 * Body framing checks shared by both directions (RFC 9112 6.1-6.3): CL
 * and TE together, two CLs (even equal), a CL that is not plain digits,
 * or TE other than one exact "chunked" are the classic desync vectors.
 */
static enum httpwire_error
check_framing(const struct hw_fields *f, int minor)
{
	if (f->cl_count > 0 && f->te_count > 0)
		return HTTPWIRE_E_CL_TE;
	if (f->cl_count > 0 && !f->cl_ok)
		return HTTPWIRE_E_CONTENT_LENGTH;
	if (f->te_count > 1 || (f->te_count == 1 && (!f->te_chunked || minor == 0)))
		return HTTPWIRE_E_TRANSFER_ENCODING;
	return HTTPWIRE_E_NONE;
}

/* origin-form only: '/' then VCHARs other than '#', valid %XX escapes. */
static bool
valid_target(struct httpwire_view t)
{
	uint8_t ch, h1, h2;

	if (!view_at(t, 0, &ch) || ch != '/')
		return false;
	for (size_t i = 0; i < t.len; i++) {
		if (!view_at(t, i, &ch) || !is_vchar(ch) || ch == '#')
			return false;
		if (ch == '%') {
			if (!view_at(t, i + 1, &h1) || !view_at(t, i + 2, &h2) || hex_val(h1) < 0 ||
			    hex_val(h2) < 0)
				return false;
			i += 2;
		}
	}
	return true;
}

static int
parse_version(struct httpwire_view v)
{
	if (view_eq(v, "HTTP/1.1"))
		return 1;
	if (view_eq(v, "HTTP/1.0"))
		return 0;
	return -1;
}

static bool
view_starts(struct httpwire_view v, const char *lit)
{
	size_t n = strlen(lit);
	return v.len >= n && memcmp(v.ptr, lit, n) == 0;
}

static enum httpwire_error
parse_request_line(struct httpwire_view line, struct httpwire_request *req)
{
	size_t i = 0, ts;
	uint8_t ch;
	struct httpwire_view ver;

	while (view_at(line, i, &ch) && is_tchar(ch))
		i++;
	if (i == 0)
		return HTTPWIRE_E_START_LINE;
	if (!view_at(line, i, &ch) || ch != ' ')
		return HTTPWIRE_E_METHOD;
	req->method = view_sub(line, 0, i);
	ts = ++i;
	while (view_at(line, i, &ch) && ch != ' ')
		i++;
	if (i == ts || i == line.len)
		return HTTPWIRE_E_START_LINE;
	req->target = view_sub(line, ts, i);
	ver = view_sub(line, i + 1, line.len);
	if ((req->version_minor = parse_version(ver)) < 0)
		return view_starts(ver, "HTTP/") ? HTTPWIRE_E_VERSION : HTTPWIRE_E_START_LINE;
	/* A transparent proxy must never become a forward proxy. */
	if (view_eq(req->method, "CONNECT"))
		return HTTPWIRE_E_CONNECT;
	if (!valid_target(req->target))
		return HTTPWIRE_E_TARGET;
	req->path = req->target;
	for (size_t k = 0; view_at(req->target, k, &ch); k++) {
		if (ch == '?') {
			req->path = view_sub(req->target, 0, k);
			break;
		}
	}
	return HTTPWIRE_E_NONE;
}

static enum httpwire_status
req_fail(struct httpwire_request *req, enum httpwire_status st, enum httpwire_error e)
{
	req->error = e;
	return st;
}

/* Parse one request head. */
enum httpwire_status
httpwire_parse_request(const uint8_t *buf, size_t len, struct httpwire_request *req,
    struct httpwire_header *hdrs, size_t cap, size_t *consumed)
{
	struct hw_cur c = {.p = buf, .len = len, .off = 0};
	struct httpwire_view line;
	struct hw_fields f;
	enum httpwire_status st;
	enum httpwire_error e = HTTPWIRE_E_NONE;

	memset(req, 0, sizeof(*req));
	*consumed = 0;
	req->headers = hdrs;
	if ((st = head_line(&c, &line, &e)) != HTTPWIRE_OK)
		return req_fail(req, st, e);
	req->start_line = line;
	if ((e = parse_request_line(line, req)) != HTTPWIRE_E_NONE)
		return req_fail(req, HTTPWIRE_INVALID, e);
	if ((st = parse_fields(&c, true, hdrs, cap, &req->nheaders, &e)) != HTTPWIRE_OK)
		return req_fail(req, st, e);
	scan_fields(hdrs, req->nheaders, &f);
	if ((e = check_framing(&f, req->version_minor)) != HTTPWIRE_E_NONE)
		return req_fail(req, HTTPWIRE_INVALID, e);
	/* Exactly one Host, for 1.0 too: it selects the binding (EX-121/123). */
	if (f.host_count != 1 || !valid_host(f.host))
		return req_fail(req, HTTPWIRE_INVALID, HTTPWIRE_E_HOST);
	if (f.expect_other)
		return req_fail(req, HTTPWIRE_INVALID, HTTPWIRE_E_EXPECT);
	req->host = f.host;
	req->expect_continue = f.expect_continue;
	req->upgrade = f.upgrade;
	req->keep_alive =
	    req->version_minor == 1 ? !f.conn_close : (f.conn_keep_alive && !f.conn_close);
	if (f.te_count > 0) {
		req->framing = HTTPWIRE_FRAME_CHUNKED;
	} else if (f.cl_count > 0) {
		req->framing = HTTPWIRE_FRAME_LENGTH;
		req->content_length = f.cl;
	} else {
		req->framing = HTTPWIRE_FRAME_NONE;
	}
	*consumed = c.off;
	return HTTPWIRE_OK;
}

static enum httpwire_status
resp_fail(struct httpwire_response *resp, enum httpwire_status st, enum httpwire_error e)
{
	resp->error = e;
	return st;
}

static enum httpwire_error
parse_status_line(struct httpwire_view line, struct httpwire_response *resp)
{
	uint8_t d[3], ch;

	if (line.len < 12 || !view_starts(line, "HTTP/"))
		return HTTPWIRE_E_START_LINE;
	if ((resp->version_minor = parse_version(view_sub(line, 0, 8))) < 0)
		return HTTPWIRE_E_VERSION;
	if (!view_at(line, 8, &ch) || ch != ' ')
		return HTTPWIRE_E_START_LINE;
	for (size_t i = 0; i < 3; i++)
		if (!view_at(line, 9 + i, &d[i]) || d[i] < '0' || d[i] > '9')
			return HTTPWIRE_E_STATUS;
	resp->status = (d[0] - '0') * 100 + (d[1] - '0') * 10 + (d[2] - '0');
	if (resp->status < 100 || resp->status > 599)
		return HTTPWIRE_E_STATUS;
	if (line.len == 12)
		return HTTPWIRE_E_NONE; /* no SP, no reason: tolerated */
	if (!view_at(line, 12, &ch) || ch != ' ')
		return HTTPWIRE_E_START_LINE;
	resp->reason = view_sub(line, 13, line.len);
	for (size_t i = 0; view_at(resp->reason, i, &ch); i++)
		if (!(ch == ' ' || ch == '\t' || is_vchar(ch) || ch >= 0x80))
			return HTTPWIRE_E_START_LINE;
	return HTTPWIRE_E_NONE;
}

/* Parse one response head. */
enum httpwire_status
httpwire_parse_response(const uint8_t *buf, size_t len, bool request_was_head,
    struct httpwire_response *resp, struct httpwire_header *hdrs, size_t cap, size_t *consumed)
{
	struct hw_cur c = {.p = buf, .len = len, .off = 0};
	struct httpwire_view line;
	struct hw_fields f;
	enum httpwire_status st;
	enum httpwire_error e = HTTPWIRE_E_NONE;
	int s;

	memset(resp, 0, sizeof(*resp));
	*consumed = 0;
	resp->headers = hdrs;
	if ((st = head_line(&c, &line, &e)) != HTTPWIRE_OK)
		return resp_fail(resp, st, e);
	if ((e = parse_status_line(line, resp)) != HTTPWIRE_E_NONE)
		return resp_fail(resp, HTTPWIRE_INVALID, e);
	if ((st = parse_fields(&c, false, hdrs, cap, &resp->nheaders, &e)) != HTTPWIRE_OK)
		return resp_fail(resp, st, e);
	scan_fields(hdrs, resp->nheaders, &f);
	if ((e = check_framing(&f, resp->version_minor)) != HTTPWIRE_E_NONE)
		return resp_fail(resp, HTTPWIRE_INVALID, e);
	s = resp->status;
	/* 1xx and 204 cannot carry a transfer coding (RFC 9112 6.1). */
	if (f.te_count > 0 && (s < 200 || s == 204))
		return resp_fail(resp, HTTPWIRE_INVALID, HTTPWIRE_E_TRANSFER_ENCODING);
	resp->keep_alive =
	    resp->version_minor == 1 ? !f.conn_close : (f.conn_keep_alive && !f.conn_close);
	if (s == 101) {
		resp->framing = HTTPWIRE_FRAME_TUNNEL;
		resp->keep_alive = false;
	} else if (s < 200) {
		resp->framing = HTTPWIRE_FRAME_NONE;
		resp->interim = true;
	} else if (request_was_head || s == 204 || s == 304) {
		resp->framing = HTTPWIRE_FRAME_NONE;
	} else if (f.te_count > 0) {
		resp->framing = HTTPWIRE_FRAME_CHUNKED;
	} else if (f.cl_count > 0) {
		resp->framing = HTTPWIRE_FRAME_LENGTH;
		resp->content_length = f.cl;
	} else {
		resp->framing = HTTPWIRE_FRAME_CLOSE;
		resp->keep_alive = false;
	}
	*consumed = c.off;
	return HTTPWIRE_OK;
}

/* Body decoder states. */
enum {
	B_DONE,       /* body complete */
	B_ERROR,      /* a feed failed; stays failed */
	B_LENGTH,     /* counting down Content-Length */
	B_CLOSE,      /* everything until EOF */
	B_SIZE,       /* hex digits of a chunk size */
	B_EXT_NAME0,  /* after ';': first char of an extension name */
	B_EXT_NAME,   /* extension name */
	B_EXT_VAL0,   /* after '=': token or quoted-string */
	B_EXT_TOKEN,  /* token value */
	B_EXT_QUOTED, /* inside a quoted-string */
	B_EXT_QESC,   /* after a backslash in a quoted-string */
	B_EXT_AFTERQ, /* after the closing quote */
	B_SIZE_LF,    /* CR of the chunk-size line seen */
	B_DATA,       /* chunk payload */
	B_DATA_CR,    /* CR after chunk payload */
	B_DATA_LF,    /* LF after chunk payload */
	B_TR_LINE,    /* start of a trailer line or of the final CRLF */
	B_TR_NAME,    /* trailer field name */
	B_TR_VALUE,   /* trailer field value */
	B_TR_LF,      /* LF ending a trailer field */
	B_END_LF,     /* LF of the final CRLF */
};

/* Initialise a body decoder. */
void
httpwire_body_init(
    struct httpwire_body *b, enum httpwire_framing f, uint64_t content_length, int flags)
{
	memset(b, 0, sizeof(*b));
	b->framing = f;
	b->flags = flags;
	switch (f) {
	case HTTPWIRE_FRAME_LENGTH:
		b->remaining = content_length;
		b->state = content_length == 0 ? B_DONE : B_LENGTH;
		break;
	case HTTPWIRE_FRAME_CHUNKED:
		b->state = B_SIZE;
		break;
	case HTTPWIRE_FRAME_CLOSE:
	case HTTPWIRE_FRAME_TUNNEL:
		b->state = B_CLOSE;
		break;
	default:
		b->state = B_DONE;
		break;
	}
}

static enum httpwire_status
body_fail(struct httpwire_body *b, enum httpwire_status st, enum httpwire_error e)
{
	b->state = B_ERROR;
	b->error = e;
	return st;
}

static void
emit(struct httpwire_body *b, const uint8_t *buf, size_t off, size_t n, httpwire_body_data_cb cb,
    void *arg)
{
	if (n == 0)
		return;
	b->payload += n;
	if (cb != NULL)
		cb(buf + off, off, n, arg);
}

/* One byte of the chunk-size line; returns B_ERROR on a syntax error. */
static int
chunk_line_byte(struct httpwire_body *b, uint8_t ch)
{
	int h;

	switch (b->state) {
	case B_SIZE:
		if ((h = hex_val(ch)) >= 0) {
			b->remaining = b->remaining << 4 | (uint64_t)h;
			b->digits++;
			return B_SIZE;
		}
		if (b->digits == 0)
			return B_ERROR;
		return ch == ';' ? B_EXT_NAME0 : ch == '\r' ? B_SIZE_LF : B_ERROR;
	case B_EXT_NAME0:
		return is_tchar(ch) ? B_EXT_NAME : B_ERROR;
	case B_EXT_NAME:
		if (is_tchar(ch))
			return B_EXT_NAME;
		return ch == '='    ? B_EXT_VAL0
		       : ch == ';'  ? B_EXT_NAME0
		       : ch == '\r' ? B_SIZE_LF
		                    : B_ERROR;
	case B_EXT_VAL0:
		return is_tchar(ch) ? B_EXT_TOKEN : ch == '"' ? B_EXT_QUOTED : B_ERROR;
	case B_EXT_TOKEN:
		if (is_tchar(ch))
			return B_EXT_TOKEN;
		return ch == ';' ? B_EXT_NAME0 : ch == '\r' ? B_SIZE_LF : B_ERROR;
	case B_EXT_QUOTED:
		/* A CR inside quotes is where "quoted CRLF" desyncs hide. */
		if (ch == '"')
			return B_EXT_AFTERQ;
		if (ch == '\\')
			return B_EXT_QESC;
		return (ch == '\t' || ch == ' ' || is_vchar(ch) || ch >= 0x80) ? B_EXT_QUOTED
		                                                               : B_ERROR;
	case B_EXT_QESC:
		return (ch == '\t' || ch == ' ' || is_vchar(ch) || ch >= 0x80) ? B_EXT_QUOTED
		                                                               : B_ERROR;
	case B_EXT_AFTERQ:
		return ch == ';' ? B_EXT_NAME0 : ch == '\r' ? B_SIZE_LF : B_ERROR;
	default:
		return B_ERROR;
	}
}

/* One byte of the trailer section. */
static int
trailer_byte(struct httpwire_body *b, uint8_t ch)
{
	switch (b->state) {
	case B_TR_LINE:
		if (ch == '\r')
			return B_END_LF;
		if (!is_tchar(ch)) /* SP/HTAB here would be obs-fold */
			return B_ERROR;
		b->trailer_fields++;
		return B_TR_NAME;
	case B_TR_NAME:
		return is_tchar(ch) ? B_TR_NAME : ch == ':' ? B_TR_VALUE : B_ERROR;
	case B_TR_VALUE:
		if (ch == '\r')
			return B_TR_LF;
		return (ch == '\t' || ch == ' ' || is_vchar(ch) || ch >= 0x80) ? B_TR_VALUE
		                                                               : B_ERROR;
	case B_TR_LF:
		return ch == '\n' ? B_TR_LINE : B_ERROR;
	case B_END_LF:
		return ch == '\n' ? B_DONE : B_ERROR;
	default:
		return B_ERROR;
	}
}

/* Feed body bytes. */
enum httpwire_status
httpwire_body_feed(struct httpwire_body *b, const uint8_t *buf, size_t len, size_t *consumed,
    httpwire_body_data_cb cb, void *arg)
{
	struct hw_cur c = {.p = buf, .len = len, .off = 0};
	size_t n;
	uint8_t ch;
	int next;

	*consumed = 0;
	while (b->state != B_DONE) {
		if (b->state == B_ERROR)
			return b->error == HTTPWIRE_E_CHUNK_TOO_LARGE ? HTTPWIRE_TOO_LARGE
			                                              : HTTPWIRE_INVALID;
		n = c.len - c.off;
		if (n == 0) {
			*consumed = c.off;
			return HTTPWIRE_NEED_MORE;
		}
		switch (b->state) {
		case B_CLOSE:
			emit(b, buf, c.off, n, cb, arg);
			c.off += n;
			continue;
		case B_LENGTH:
		case B_DATA:
			if ((uint64_t)n > b->remaining)
				n = (size_t)b->remaining;
			emit(b, buf, c.off, n, cb, arg);
			c.off += n;
			b->remaining -= n;
			if (b->remaining == 0)
				b->state = b->state == B_LENGTH ? B_DONE : B_DATA_CR;
			continue;
		default:
			break;
		}
		if (!cur_u8(&c, &ch))
			break;
		switch (b->state) {
		case B_DATA_CR:
			/* Missing CRLF after the payload: refuse, never resync. */
			if (ch != '\r')
				return body_fail(b, HTTPWIRE_INVALID, HTTPWIRE_E_CHUNK);
			b->state = B_DATA_LF;
			break;
		case B_DATA_LF:
			if (ch != '\n')
				return body_fail(b, HTTPWIRE_INVALID, HTTPWIRE_E_CHUNK);
			b->state = B_SIZE;
			b->line_len = b->digits = 0;
			break;
		case B_SIZE_LF:
			if (ch != '\n')
				return body_fail(b, HTTPWIRE_INVALID, HTTPWIRE_E_CHUNK);
			b->state = b->remaining == 0 ? B_TR_LINE : B_DATA;
			break;
		case B_TR_LINE:
		case B_TR_NAME:
		case B_TR_VALUE:
		case B_TR_LF:
		case B_END_LF:
			if (++b->trailer_bytes > HTTPWIRE_MAX_TRAILER_BYTES)
				return body_fail(b, HTTPWIRE_TOO_LARGE, HTTPWIRE_E_CHUNK_TOO_LARGE);
			next = trailer_byte(b, ch);
			if (next == B_ERROR ||
			    (b->trailer_fields > 0 && (b->flags & HTTPWIRE_BODY_NO_TRAILERS)))
				return body_fail(b, HTTPWIRE_INVALID, HTTPWIRE_E_TRAILER);
			b->state = next;
			break;
		default:
			/* chunk-size line: bounded, so extensions cannot stall us */
			if (++b->line_len > HTTPWIRE_MAX_CHUNK_LINE)
				return body_fail(b, HTTPWIRE_TOO_LARGE, HTTPWIRE_E_CHUNK_TOO_LARGE);
			next = chunk_line_byte(b, ch);
			if (next == B_ERROR)
				return body_fail(b, HTTPWIRE_INVALID, HTTPWIRE_E_CHUNK);
			if (b->digits > HTTPWIRE_MAX_CHUNK_SIZE_DIGITS)
				return body_fail(b, HTTPWIRE_TOO_LARGE, HTTPWIRE_E_CHUNK_TOO_LARGE);
			b->state = next;
			break;
		}
	}
	*consumed = c.off;
	return HTTPWIRE_OK;
}

/* The connection ended. */
enum httpwire_status
httpwire_body_eof(struct httpwire_body *b)
{
	if (b->state == B_CLOSE) {
		b->state = B_DONE;
		return HTTPWIRE_OK;
	}
	if (b->state == B_DONE)
		return HTTPWIRE_OK;
	if (b->state != B_ERROR) {
		b->state = B_ERROR;
		b->error = HTTPWIRE_E_TRUNCATED;
	}
	return HTTPWIRE_INVALID;
}

/* Whether the body has ended. */
bool
httpwire_body_done(const struct httpwire_body *b)
{
	return b->state == B_DONE;
}

/* The error of a failed feed. */
enum httpwire_error
httpwire_body_error(const struct httpwire_body *b)
{
	return b->error;
}

/* Trailer fields seen. */
size_t
httpwire_body_trailer_fields(const struct httpwire_body *b)
{
	return b->trailer_fields;
}

/* First header with that name. */
const struct httpwire_header *
httpwire_find_header(const struct httpwire_header *h, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (h[i].name.ptr != NULL && httpwire_name_eq(h[i].name, name))
			return &h[i];
	return NULL;
}

/* Bounded appender for the head writer. */
struct hw_out {
	uint8_t *buf;
	size_t cap;
	size_t len;
	bool overflow;
};

static void
out_put(struct hw_out *o, const void *p, size_t n)
{
	if (o->overflow || o->cap - o->len < n) {
		o->overflow = true;
		return;
	}
	if (n > 0)
		memcpy(o->buf + o->len, p, n);
	o->len += n;
}

/* A field the writer may emit: a token name and a value of SP/HTAB/VCHAR/obs-text. */
static bool
writable_field(const struct httpwire_header *h)
{
	uint8_t ch;

	if (h->name.len == 0)
		return false;
	for (size_t i = 0; view_at(h->name, i, &ch); i++)
		if (!is_tchar(ch))
			return false;
	for (size_t i = 0; view_at(h->value, i, &ch); i++)
		if (!(ch == ' ' || ch == '\t' || is_vchar(ch) || ch >= 0x80))
			return false;
	return true;
}

static bool
write_fields(struct hw_out *o, const struct httpwire_header *h, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (h[i].name.ptr == NULL)
			continue;
		/* Header injection: a CR/LF in a value would start a new field. */
		if (!writable_field(&h[i]))
			return false;
		out_put(o, h[i].name.ptr, h[i].name.len);
		out_put(o, ": ", 2);
		out_put(o, h[i].value.ptr, h[i].value.len);
		out_put(o, "\r\n", 2);
	}
	return true;
}

/* Serialise a head. */
int
httpwire_head_write(uint8_t *buf, size_t cap, struct httpwire_view start_line,
    const struct httpwire_header *headers, size_t n, const struct httpwire_header *extra, size_t m,
    size_t *written)
{
	struct hw_out o = {.buf = buf, .cap = cap, .len = 0, .overflow = false};
	uint8_t ch;

	*written = 0;
	if (start_line.len == 0)
		return -1;
	for (size_t i = 0; view_at(start_line, i, &ch); i++)
		if (!(ch == ' ' || ch == '\t' || is_vchar(ch)))
			return -1;
	out_put(&o, start_line.ptr, start_line.len);
	out_put(&o, "\r\n", 2);
	if (!write_fields(&o, headers, n) || !write_fields(&o, extra, m))
		return -1;
	out_put(&o, "\r\n", 2);
	if (o.overflow)
		return -1;
	*written = o.len;
	return 0;
}

/* Whether some segment of p[0..n) is "." or "..". */
static bool
has_dot_segment(const uint8_t *p, size_t n)
{
	size_t s = 0;

	for (size_t i = 0; i <= n; i++) {
		if (i < n && p[i] != '/')
			continue;
		if ((i - s == 1 && p[s] == '.') || (i - s == 2 && p[s] == '.' && p[s + 1] == '.'))
			return true;
		s = i + 1;
	}
	return false;
}

/*
 * One percent-decoding pass in place. Returns false when the result would
 * be ambiguous: a malformed escape, or an escape standing for a separator,
 * a control byte, or an overlong UTF-8 lead (0xc0/0xc1 spell '.' and '/').
 */
static bool
decode_pass(uint8_t *p, size_t *n, bool *had_escape)
{
	size_t r = 0, w = 0;
	int h1, h2;
	uint8_t v;

	*had_escape = false;
	while (r < *n) {
		if (p[r] != '%') {
			p[w++] = p[r++];
			continue;
		}
		if (*n - r < 3 || (h1 = hex_val(p[r + 1])) < 0 || (h2 = hex_val(p[r + 2])) < 0)
			return false;
		v = (uint8_t)(h1 << 4 | h2);
		if (v == '/' || v == '\\' || v < 0x20 || v == 0x7f || v == 0xc0 || v == 0xc1)
			return false;
		p[w++] = v;
		r += 3;
		*had_escape = true;
	}
	*n = w;
	return true;
}

/*
 * Code points that servers fold to '.', '/' or '\\' (NFKC, or Windows
 * "best fit"): the fullwidth and small forms, dot leaders, ellipsis, the
 * fraction and division slashes, the set minus.
 */
static const uint32_t path_lookalikes[] = {
    0x2024, 0x2025, 0x2026, 0xfe52, 0xff0e, 0x2044, 0x2215, 0xff0f, 0x2216, 0xfe68, 0xff3c};

/*
 * Whether decoded path bytes are not strict UTF-8 (RFC 3629: no overlong
 * form, e.g. c0 ae, e0 80 ae or f0 80 80 ae for '.', no surrogate, nothing
 * past U+10FFFF, no stray or missing continuation byte), or hold a
 * look-alike of a separator. Either reads as "." or "/" somewhere upstream.
 */
static bool
utf8_suspect(const uint8_t *p, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint8_t b = p[i];
		size_t need;
		uint32_t cp, min;

		if (b < 0x80) {
			i++;
			continue;
		}
		if (b >= 0xc2 && b <= 0xdf) {
			need = 1, cp = b & 0x1f, min = 0x80;
		} else if (b >= 0xe0 && b <= 0xef) {
			need = 2, cp = b & 0x0f, min = 0x800;
		} else if (b >= 0xf0 && b <= 0xf4) {
			need = 3, cp = b & 0x07, min = 0x10000;
		} else {
			return true; /* continuation, c0/c1 or f5..ff as a lead */
		}
		if (n - i - 1 < need)
			return true;
		for (size_t k = 1; k <= need; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return true;
			cp = cp << 6 | (p[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return true;
		for (size_t k = 0; k < sizeof(path_lookalikes) / sizeof(path_lookalikes[0]); k++)
			if (cp == path_lookalikes[k])
				return true;
		i += need + 1;
	}
	return false;
}

/* Whether the path can be read in two ways. */
bool
httpwire_path_is_ambiguous(const uint8_t *target, size_t len)
{
	uint8_t tmp[HTTPWIRE_MAX_PATH];
	size_t n = 0;
	bool had;

	while (n < len && target[n] != '?' && target[n] != '#')
		n++;
	if (n > sizeof(tmp))
		return true;
	for (size_t i = 0; i < n; i++)
		if (target[i] == '\\' || target[i] == ';')
			return true; /* Windows separators; "..;" path parameters */
	if (has_dot_segment(target, n))
		return true;
	memcpy(tmp, target, n);
	for (int round = 0; round < HTTPWIRE_MAX_DECODE_ROUNDS; round++) {
		if (!decode_pass(tmp, &n, &had))
			return true;
		if (!had)
			return false;
		if (has_dot_segment(tmp, n) || memchr(tmp, ';', n) != NULL || utf8_suspect(tmp, n))
			return true;
	}
	/* Still encoded after the bound: nobody should need that much. */
	return memchr(tmp, '%', n) != NULL;
}

/* Constant log name of an error. */
const char *
httpwire_error_str(enum httpwire_error e)
{
	switch (e) {
	case HTTPWIRE_E_NONE:
		return "none";
	case HTTPWIRE_E_LINE_ENDING:
		return "bad_line_ending";
	case HTTPWIRE_E_START_LINE:
		return "bad_start_line";
	case HTTPWIRE_E_METHOD:
		return "bad_method";
	case HTTPWIRE_E_TARGET:
		return "bad_target";
	case HTTPWIRE_E_CONNECT:
		return "connect_refused";
	case HTTPWIRE_E_VERSION:
		return "bad_version";
	case HTTPWIRE_E_STATUS:
		return "bad_status";
	case HTTPWIRE_E_FIELD_NAME:
		return "bad_field_name";
	case HTTPWIRE_E_FIELD_VALUE:
		return "bad_field_value";
	case HTTPWIRE_E_OBS_FOLD:
		return "obs_fold";
	case HTTPWIRE_E_CL_TE:
		return "cl_and_te";
	case HTTPWIRE_E_CONTENT_LENGTH:
		return "bad_content_length";
	case HTTPWIRE_E_TRANSFER_ENCODING:
		return "bad_transfer_encoding";
	case HTTPWIRE_E_HOST:
		return "bad_host";
	case HTTPWIRE_E_EXPECT:
		return "bad_expect";
	case HTTPWIRE_E_HEAD_TOO_LARGE:
		return "head_too_large";
	case HTTPWIRE_E_TOO_MANY_FIELDS:
		return "too_many_fields";
	case HTTPWIRE_E_CHUNK:
		return "bad_chunk";
	case HTTPWIRE_E_CHUNK_TOO_LARGE:
		return "chunk_too_large";
	case HTTPWIRE_E_TRAILER:
		return "bad_trailer";
	case HTTPWIRE_E_TRUNCATED:
		return "truncated_body";
	}
	return "unknown";
}

int
httpwire_connect_status(const uint8_t *buf, size_t len, size_t max, size_t *consumed)
{
	struct httpwire_header hdrs[HTTPWIRE_MAX_HEADERS];
	struct httpwire_response r;

	switch (
	    httpwire_parse_response(buf, len, false, &r, hdrs, HTTPWIRE_MAX_HEADERS, consumed)) {
	case HTTPWIRE_OK:
		return r.status;
	case HTTPWIRE_NEED_MORE:
		return len < max ? 0 : -1;
	default:
		return -1;
	}
}

size_t
httpwire_connect_request(
    char *out, size_t cap, int family, const void *addr, unsigned port, const char *auth)
{
	char a[INET6_ADDRSTRLEN];
	const char *l = family == AF_INET6 ? "[" : "", *r = family == AF_INET6 ? "]" : "";
	bool with_auth = auth != NULL && auth[0] != '\0';
	int n;

	if (inet_ntop(family, addr, a, sizeof(a)) == NULL)
		return 0;
	n = snprintf(out, cap, "CONNECT %s%s%s:%u HTTP/1.1\r\nHost: %s%s%s:%u\r\n%s%s%s\r\n", l, a,
	    r, port, l, a, r, port, with_auth ? "Proxy-Authorization: " : "", with_auth ? auth : "",
	    with_auth ? "\r\n" : "");
	return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}
