/*
 * icpt_h2: the HTTP/2 relay of terminated connections (intercept process).
 *
 * The workload's side is an nghttp2 server session over the TLS filter;
 * the upstream's is an nghttp2 client session when the server chose h2 in
 * ALPN, else the streams go as HTTP/1.1 requests one at a time on the one
 * upstream connection. Every stream's header list is written out as an
 * HTTP/1.1 head and parsed by the strict parser, so that it passes the
 * very checks of an HTTP/1.1 request (icpt_request_verdict): Host equal
 * to the SNI, one binding or none, the workload's credentials dropped, the
 * credential injected. Every header block and body toward the workload is
 * redacted. nghttp2 does the RFC 9113 checks (pseudo-headers, connection
 * fields, content-length against DATA); the caps on streams, header lists,
 * resets and control frames are ours and nghttp2's.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include "policy/binding.h"
#include "policy/name.h"
#include "vault/httpwire.h"
#include "vault/intercept.h"
#include "vault/intercept_internal.h"
#include "vault/redact.h"
#include "vault/snap.h"
#include "vault/subst.h"
#include "vault/icpt_internal.h"

#define H2_MAX_STREAMS 100       /* SETTINGS_MAX_CONCURRENT_STREAMS toward the workload */
#define H2_MAX_HEADER_LIST 65536 /* SETTINGS_MAX_HEADER_LIST_SIZE; decoded, RFC 9113 6.5.2 */
#define H2_MAX_FIELDS 128        /* fields of one header block */
#define H2_HOLD (32 * 1024)    /* a content-length body held before anything of it goes upstream */
#define H2_RST_PER_S 100       /* RST_STREAM from the workload within one second */
#define H2_CTL_PER_S 1000      /* control or empty frames within one second */
#define H2_MAX_CONTINUATIONS 8 /* CONTINUATION frames after one HEADERS */
#define H2_WINDOW 65535        /* stream window toward the workload (the default) */
#define H2_CONN_WINDOW (1024 * 1024) /* connection window toward the workload */

/* A header block as received: "name: value\r\n" lines, and where each field is. */
struct h2_block {
	uint8_t *buf;
	size_t len, cap;
	size_t decoded; /* RFC 9113 6.5.2 size: name + value + 32 per field */
	struct {
		uint32_t no, nl, vo, vl;
	} f[H2_MAX_FIELDS];
	size_t n;
	bool too_large; /* past H2_MAX_HEADER_LIST or H2_MAX_FIELDS: the rest not kept */
};

enum h2s_up {
	H2S_UP_WAIT, /* checked, held (body below the hold bound) or waiting its turn */
	H2S_UP_SENT, /* its head went upstream; body streaming */
	H2S_UP_DONE, /* the request is all upstream */
};

/* One workload stream. */
struct h2s {
	struct icpt_conn *c;
	struct h2s *next; /* oldest first */
	int32_t id;       /* the workload's stream */
	int32_t uid;      /* the upstream stream (h2 upstream), 0 before */
	struct h2_block hb;
	bool checked;      /* the head passed; the request is relayed */
	bool refused;      /* answered by us: the rest of the request is dropped */
	bool req_end;      /* END_STREAM from the workload */
	bool resp_head;    /* a final response head went to the workload */
	bool resp_end;     /* the response is complete upstream side */
	bool trailers_out; /* response trailers submitted */
	bool chunked;      /* HTTP/1.1 upstream: the body goes chunked */
	bool len_pending;  /* a substituted Content-Length body: framed when it goes */
	bool hold;         /* a content-length body: held until END_STREAM or H2_HOLD */
	bool is_head;      /* HEAD: no body in the answer */
	enum h2s_up up;
	size_t unconsumed; /* DATA bytes received and not yet given back to the window */
	char method[ICPT_MAX_METHOD + 1];
	char binding[BINDING_MAX_NAME + 1];
	bool credentialed, bound;
	struct vault_snap *snap;
	struct evbuffer *head; /* the checked HTTP/1.1 head for upstream */
	struct evbuffer *req;  /* request body bytes not yet upstream */
	struct evbuffer *out;  /* redacted response body for the workload */
	struct evbuffer *sbuf; /* body substitution output */
	struct subst_stream *subst;
	struct intercept_ovr_scan ovr;
	struct redact_stream *rs;
	bool rs_read;       /* rs is in a read of the upstream's (h2_reads_end ends it) */
	struct h2_block rh; /* upstream (h2) response headers, then trailers */
	uint8_t *trail;     /* the buffer of the redacted trailers' block, backing trailnv */
	nghttp2_nv *trailnv;
	size_t ntrail;
	int status;
	uint64_t resp_bytes, matches;
	/* HTTP/1.1 upstream */
	struct httpwire_body body;
	int interim;
	bool resp_keep;
};

struct icpt_h2 {
	nghttp2_session *ws; /* the workload's (server) */
	nghttp2_session *us; /* the upstream's (client), when it speaks h2 */
	struct h2s *streams;
	struct h2s *cur; /* HTTP/1.1 upstream: the exchange on the wire */
	size_t nstreams;
	time_t win;    /* the current one-second window (CLOCK_MONOTONIC) */
	unsigned nrst; /* RST_STREAM frames in it */
	unsigned nctl; /* control and empty frames in it */
	bool calm;     /* GOAWAY ENHANCE_YOUR_CALM queued: nothing more is processed */
	bool up_dirty; /* HTTP/1.1 upstream out of step: a new connection for the next */
	uint64_t outq; /* bytes in every stream's out */
};

static void h2_pump(struct icpt_conn *c);
static void h2_up_pump(struct icpt_conn *c);

/* ---------------------------------------------------------------- header blocks */

static void
h2_block_reset(struct h2_block *b)
{
	b->len = b->n = b->decoded = 0;
	b->too_large = false;
}

static void
h2_block_free(struct h2_block *b)
{
	free(b->buf);
	memset(b, 0, sizeof(*b));
}

/* Append one field; past the caps the block is marked, never grown. */
static int
h2_block_add(struct h2_block *b, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
	size_t need = nl + vl + 4;

	b->decoded += nl + vl + 32;
	if (b->too_large || b->decoded > H2_MAX_HEADER_LIST || b->n == H2_MAX_FIELDS) {
		b->too_large = true;
		return 0;
	}
	if (b->len + need > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		uint8_t *p;

		while (cap < b->len + need)
			cap *= 2;
		if ((p = realloc(b->buf, cap)) == NULL)
			return -1;
		b->buf = p;
		b->cap = cap;
	}
	b->f[b->n].no = (uint32_t)b->len;
	b->f[b->n].nl = (uint32_t)nl;
	memcpy(b->buf + b->len, n, nl);
	b->len += nl;
	memcpy(b->buf + b->len, ": ", 2);
	b->len += 2;
	b->f[b->n].vo = (uint32_t)b->len;
	b->f[b->n].vl = (uint32_t)vl;
	memcpy(b->buf + b->len, v, vl);
	b->len += vl;
	memcpy(b->buf + b->len, "\r\n", 2);
	b->len += 2;
	b->n++;
	return 0;
}

static bool
h2_field_is(const struct h2_block *b, size_t i, const char *name)
{
	size_t n = strlen(name);

	return b->f[i].nl == n && memcmp(b->buf + b->f[i].no, name, n) == 0;
}

/* The value of the first field called name, or NULL. */
static const uint8_t *
h2_field(const struct h2_block *b, const char *name, size_t *len)
{
	for (size_t i = 0; i < b->n; i++)
		if (h2_field_is(b, i, name)) {
			*len = b->f[i].vl;
			return b->buf + b->f[i].vo;
		}
	return NULL;
}

/* Secret occurrences masked on stream s: for its audit line and the counter. */
static void
h2s_matched(struct h2s *s, uint64_t m)
{
	s->matches += m;
	icpt_count(s->c->ic, INTERCEPT_M_REDACTED, m);
}

/* Mask the secrets of the snapshot in buf[0..len) (a whole header block), in place. */
static void
h2s_redact_buf(struct h2s *s, uint8_t *buf, size_t len)
{
	struct redact_set *set = vault_snap_redact(s->snap);
	uint64_t m = 0;

	if (set != NULL && len > 0)
		redact_buf(set, buf, len, &m);
	h2s_matched(s, m);
}

/* Whether a response field must not be relayed to an h2 peer (RFC 9113 8.2.2). */
static bool
h2_hop_field(const uint8_t *n, size_t nl)
{
	static const char *const hop[] = {"connection", "keep-alive", "proxy-connection",
	    "transfer-encoding", "upgrade", "te", NULL};

	for (size_t i = 0; hop[i] != NULL; i++)
		if (nl == strlen(hop[i]) && strncasecmp((const char *)n, hop[i], nl) == 0)
			return true;
	return false;
}

/* ---------------------------------------------------------------- streams */

static struct h2s *
h2s_new(struct icpt_conn *c, int32_t id)
{
	struct h2s *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	s->c = c;
	s->id = id;
	if ((s->req = evbuffer_new()) == NULL || (s->out = evbuffer_new()) == NULL) {
		if (s->req != NULL)
			evbuffer_free(s->req);
		free(s);
		return NULL;
	}
	/* Oldest first: HTTP/1.1 upstream takes them in this order. */
	struct h2s **pp = &c->h2->streams;

	while (*pp != NULL)
		pp = &(*pp)->next;
	*pp = s;
	c->h2->nstreams++;
	return s;
}

static void
h2s_free(struct h2s *s)
{
	struct icpt_h2 *h = s->c->h2;

	for (struct h2s **pp = &h->streams; *pp != NULL; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	h->nstreams--;
	if (h->cur == s)
		h->cur = NULL;
	h->outq -= evbuffer_get_length(s->out);
	h2_block_free(&s->hb);
	h2_block_free(&s->rh);
	if (s->head != NULL)
		evbuffer_free(s->head);
	evbuffer_free(s->req);
	evbuffer_free(s->out);
	if (s->sbuf != NULL)
		evbuffer_free(s->sbuf);
	subst_stream_free(s->subst);
	redact_stream_free(s->rs);
	vault_snap_unref(s->snap);
	free(s->trail);
	free(s->trailnv);
	free(s);
}

/* A log line about stream s (its method in the record). */
static void
h2s_log(struct h2s *s, enum intercept_level lvl, const char *event, const char *reason, int status)
{
	struct icpt_conn *c = s->c;

	snprintf(c->method, sizeof(c->method), "%s", s->method);
	icpt_log(c, lvl, event, reason, status);
}

/*
 * Request bytes left s->req (moved upstream, n of them): the workload's
 * window opens by as much, so that what is buffered per stream stays
 * within its window. An empty s->req gives back all (a substituted body's
 * size differs from what came).
 */
static void
h2s_consume(struct h2s *s, size_t n)
{
	if (evbuffer_get_length(s->req) == 0 || n > s->unconsumed)
		n = s->unconsumed;
	if (n == 0)
		return;
	s->unconsumed -= n;
	(void)nghttp2_session_consume(s->c->h2->ws, s->id, n);
}

/* Read callback of a body we wrote (our error answers): text, then the end. */
static ssize_t
h2_out_read_cb(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
    nghttp2_data_source *src, void *arg)
{
	struct icpt_conn *c = arg;
	struct h2s *s = src->ptr;
	size_t n = evbuffer_get_length(s->out);

	(void)sess;
	(void)id;
	if (n > len)
		n = len;
	if (n > 0) {
		evbuffer_remove(s->out, buf, n);
		c->h2->outq -= n;
		s->resp_bytes += n;
	}
	if (evbuffer_get_length(s->out) > 0)
		return (ssize_t)n;
	if (!s->resp_end)
		return n > 0 ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
	*flags |= NGHTTP2_DATA_FLAG_EOF;
	if (s->trailnv != NULL && !s->trailers_out) {
		/* The body's last frame does not end the stream: the trailers do. */
		*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
		s->trailers_out = true;
		if (nghttp2_submit_trailer(c->h2->ws, s->id, s->trailnv, s->ntrail) != 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	return (ssize_t)n;
}

/*
 * Our own answer on stream s: status and a text body; the request's rest
 * is dropped, nothing more of it goes upstream. After a response head went
 * out, the stream is reset instead.
 */
static void
h2s_error(struct h2s *s, int status, const char *text, const char *reason)
{
	struct icpt_conn *c = s->c;
	char code[8];
	nghttp2_data_provider dp = {.source.ptr = s, .read_callback = h2_out_read_cb};
	nghttp2_nv nv[] = {
	    {(uint8_t *)":status", (uint8_t *)code, 7, 3, NGHTTP2_NV_FLAG_NONE},
	    {(uint8_t *)"content-type", (uint8_t *)"text/plain", 12, 10, NGHTTP2_NV_FLAG_NONE},
	};

	h2s_log(s, INTERCEPT_L_WARN, "http_reject", reason, status);
	s->refused = true;
	s->status = status;
	if (s->resp_head) {
		(void)nghttp2_submit_rst_stream(
		    c->h2->ws, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
		return;
	}
	s->resp_head = true;
	snprintf(code, sizeof(code), "%03u", (unsigned)status % 1000u);
	c->h2->outq -= evbuffer_get_length(s->out);
	evbuffer_drain(s->out, evbuffer_get_length(s->out));
	evbuffer_add_printf(s->out, "%s\n", text);
	c->h2->outq += evbuffer_get_length(s->out);
	s->resp_end = true;
	free(s->trailnv);
	s->trailnv = NULL;
	if (nghttp2_submit_response(c->h2->ws, s->id, nv, 2, &dp) != 0)
		(void)nghttp2_submit_rst_stream(
		    c->h2->ws, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
	if (s->uid > 0 && c->h2->us != NULL)
		(void)nghttp2_submit_rst_stream(
		    c->h2->us, NGHTTP2_FLAG_NONE, s->uid, NGHTTP2_CANCEL);
}

/*
 * GOAWAY ENHANCE_YOUR_CALM: the workload abuses the protocol; counted and
 * logged once. send: ours to queue (false: nghttp2's own limiter sent it).
 */
static void
h2_calm(struct icpt_conn *c, const char *reason, bool send)
{
	if (c->h2->calm)
		return;
	c->h2->calm = true;
	icpt_count(c->ic, INTERCEPT_M_H2_CALM, 1);
	icpt_reject(c, reason);
	if (send)
		(void)nghttp2_session_terminate_session(c->h2->ws, NGHTTP2_ENHANCE_YOUR_CALM);
}

/* Count a frame of kind rst/control in the current second; past a cap, calm. */
static void
h2_rate(struct icpt_conn *c, bool rst)
{
	struct icpt_h2 *h = c->h2;
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec != h->win) {
		h->win = now.tv_sec;
		h->nrst = h->nctl = 0;
	}
	if (rst && ++h->nrst > H2_RST_PER_S)
		h2_calm(c, "h2_rapid_reset", true);
	else if (!rst && ++h->nctl > H2_CTL_PER_S)
		h2_calm(c, "h2_frame_flood", true);
}

/* ---------------------------------------------------------------- requests */

/*
 * The request's header list as an HTTP/1.1 head into out: the request line
 * from :method and :path, Host from :authority (a Host field must agree),
 * the other fields as they came (cookie crumbs joined, RFC 9113 8.2.3) and,
 * for a body of unknown length, Transfer-Encoding: chunked so that the
 * parser frames it as HTTP/1.1 would. NULL, or why (status in *status).
 */
static const char *
h2_head_text(struct h2s *s, struct evbuffer *out, int *status)
{
	const struct h2_block *b = &s->hb;
	const uint8_t *m = NULL, *path = NULL, *auth = NULL, *scheme = NULL, *v;
	size_t ml = 0, pl = 0, al = 0, sl = 0, vl, ncookie = 0;
	bool has_cl = false;

	*status = 400;
	for (size_t i = 0; i < b->n; i++) {
		const uint8_t *n = b->buf + b->f[i].no;

		v = b->buf + b->f[i].vo;
		vl = b->f[i].vl;
		if (h2_field_is(b, i, ":method"))
			m = v, ml = vl;
		else if (h2_field_is(b, i, ":path"))
			path = v, pl = vl;
		else if (h2_field_is(b, i, ":authority"))
			auth = v, al = vl;
		else if (h2_field_is(b, i, ":scheme"))
			scheme = v, sl = vl;
		else if (n[0] == ':')
			return "h2_pseudo_header"; /* nghttp2 refuses them first */
		else if (h2_hop_field(n, b->f[i].nl) &&
		         !(h2_field_is(b, i, "te") && vl == 8 && memcmp(v, "trailers", 8) == 0))
			return "h2_connection_field"; /* RFC 9113 8.2.2; nghttp2 too */
		else if (h2_field_is(b, i, "content-length"))
			has_cl = true;
		else if (h2_field_is(b, i, "cookie"))
			ncookie++;
	}
	if (m == NULL || ml == 0)
		return "h2_pseudo_header";
	if (ml == 7 && memcmp(m, "CONNECT", 7) == 0) {
		*status = 405;
		return "connect_refused";
	}
	if (scheme == NULL || sl != 5 || memcmp(scheme, "https", 5) != 0)
		return "h2_scheme";
	/* Origin-form, or "*" (OPTIONS): never another host's absolute URI. */
	if (path == NULL || pl == 0 || !(path[0] == '/' || (pl == 1 && path[0] == '*')))
		return "h2_pseudo_header";
	if (auth == NULL) {
		/* RFC 9113 8.3.1: Host when there is no :authority. */
		if ((auth = h2_field(b, "host", &al)) == NULL)
			return "host_missing";
	}
	for (size_t i = 0; i < b->n; i++)
		if (h2_field_is(b, i, "host") &&
		    (b->f[i].vl != al || memcmp(b->buf + b->f[i].vo, auth, al) != 0))
			return "host_authority_mismatch";
	if (evbuffer_add(out, m, ml) != 0 || evbuffer_add(out, " ", 1) != 0 ||
	    evbuffer_add(out, path, pl) != 0 || evbuffer_add(out, " HTTP/1.1\r\nHost: ", 17) != 0 ||
	    evbuffer_add(out, auth, al) != 0 || evbuffer_add(out, "\r\n", 2) != 0)
		goto oom;
	for (size_t i = 0; i < b->n; i++) {
		const uint8_t *n = b->buf + b->f[i].no;

		if (n[0] == ':' || h2_field_is(b, i, "host") || h2_field_is(b, i, "cookie"))
			continue;
		if (evbuffer_add(out, n, b->f[i].nl + 2 + b->f[i].vl + 2) != 0)
			goto oom;
	}
	if (ncookie > 0) {
		size_t k = 0;

		if (evbuffer_add(out, "Cookie: ", 8) != 0)
			goto oom;
		for (size_t i = 0; i < b->n; i++) {
			if (!h2_field_is(b, i, "cookie"))
				continue;
			if ((k++ > 0 && evbuffer_add(out, "; ", 2) != 0) ||
			    evbuffer_add(out, b->buf + b->f[i].vo, b->f[i].vl) != 0)
				goto oom;
		}
		if (evbuffer_add(out, "\r\n", 2) != 0)
			goto oom;
	}
	if (!s->req_end && !has_cl && evbuffer_add(out, "Transfer-Encoding: chunked\r\n", 28) != 0)
		goto oom;
	if (evbuffer_add(out, "\r\n", 2) != 0)
		goto oom;
	return NULL;
oom:
	*status = 500;
	return "oom";
}

/* A complete request header block on stream s: the checks, then queued for upstream. */
static void
h2_request(struct h2s *s)
{
	struct icpt_conn *c = s->c;
	struct intercept *ic = c->ic;
	struct httpwire_request req;
	struct icpt_verdict v;
	struct evbuffer *text = NULL;
	char host[POLICY_NAME_MAX + 1];
	const char *why;
	size_t consumed = 0, len;
	enum httpwire_status st;
	int status;
	uint8_t *data;

	if (s->hb.too_large) {
		h2s_error(s, 431, "Request Header Fields Too Large", "head_too_large");
		return;
	}
	if ((text = evbuffer_new()) == NULL || (s->head = evbuffer_new()) == NULL) {
		h2s_error(s, 500, "Internal Server Error", "oom");
		goto out;
	}
	if ((why = h2_head_text(s, text, &status)) != NULL) {
		h2s_error(s, status, status == 405 ? "Method Not Allowed" : "Bad Request", why);
		goto out;
	}
	len = evbuffer_get_length(text);
	if (len > HTTPWIRE_MAX_HEAD_BYTES) {
		h2s_error(s, 431, "Request Header Fields Too Large", "head_too_large");
		goto out;
	}
	data = evbuffer_pullup(text, -1);
	st = httpwire_parse_request(data, len, &req, ic->hdrs, HTTPWIRE_MAX_HEADERS, &consumed);
	if (st != HTTPWIRE_OK || consumed != len) {
		int code = st == HTTPWIRE_OK ? 400 : intercept_request_error_status(st, req.error);

		h2s_error(s, code, code == 431 ? "Request Header Fields Too Large" : "Bad Request",
		    st == HTTPWIRE_OK ? "h2_head" : httpwire_error_str(req.error));
		goto out;
	}
	snprintf(s->method, sizeof(s->method), "%.*s",
	    (int)(req.method.len > ICPT_MAX_METHOD ? ICPT_MAX_METHOD : req.method.len),
	    (const char *)req.method.ptr);
	snprintf(c->method, sizeof(c->method), "%s", s->method);
	/* The upstream (and its certificate) is for c->host only: no coalescing. */
	if (intercept_host_canon(req.host.ptr, req.host.len, c->port, host) != 0) {
		h2s_error(s, 421, "Misdirected Request", "host_invalid");
		goto out;
	}
	if (strcmp(host, c->host) != 0) {
		h2s_error(s, 421, "Misdirected Request", "host_not_sni");
		goto out;
	}
	if (c->up_failed) {
		h2s_error(s, 502, "Bad Gateway", c->up_why);
		goto out;
	}
	if ((why = icpt_request_verdict(c, &req, consumed, host, &s->sbuf, s->head, &v)) != NULL) {
		int vs = v.status;
		const char *vt = v.text;

		icpt_verdict_clear(&v);
		h2s_error(s, vs, vt, why);
		goto out;
	}
	s->snap = v.snap;
	s->subst = v.subst;
	s->credentialed = v.inject;
	s->bound = v.bound;
	snprintf(s->binding, sizeof(s->binding), "%s", v.binding);
	s->is_head = strcmp(s->method, "HEAD") == 0;
	/*
	 * HTTP/1.1 upstream: a body of unknown length goes chunked; a
	 * substituted one with a Content-Length gets its new length when it
	 * is all in at the first send (within the hold), else goes chunked.
	 */
	s->chunked = req.framing == HTTPWIRE_FRAME_CHUNKED;
	/*
	 * A declared length can turn out false at END_STREAM (H2.CL): such a
	 * body is held, so that a short one never reaches an HTTP/1.1 server
	 * framed by its lie. A body of no declared length is framed by us and
	 * goes at once (gRPC streams a message and waits for the answer).
	 */
	s->hold = req.framing == HTTPWIRE_FRAME_LENGTH;
	s->len_pending = s->subst != NULL && req.framing == HTTPWIRE_FRAME_LENGTH;
	s->checked = true;
	if (!c->up_asked && !c->up_ready && (why = icpt_up_start(c)) != NULL)
		h2s_error(s, 502, "Bad Gateway", why);
out:
	if (text != NULL)
		evbuffer_free(text);
}

/* A substituted piece of stream s's body (rc: the substituter's) to its request bytes. */
static void
h2s_subst_out(struct h2s *s, int rc)
{
	if (rc == SUBST_TOO_LARGE) {
		evbuffer_drain(s->sbuf, evbuffer_get_length(s->sbuf));
		h2s_error(s, 413, "Content Too Large", "subst_too_large");
	} else if (rc != 0 || evbuffer_add_buffer(s->req, s->sbuf) != 0) {
		h2s_error(s, 500, "Internal Server Error", "oom");
	}
}

/* Request body bytes of stream s (payload of DATA). */
static void
h2_request_data(struct h2s *s, const uint8_t *p, size_t n)
{
	if (s->refused || !s->checked)
		return;
	if (s->resp_end && s->c->h2->cur != s && s->uid <= 0) {
		/* Answered already, not on the wire: nobody reads the rest. */
		h2s_consume(s, s->unconsumed);
		return;
	}
	if (s->credentialed && intercept_ovr_scan_feed(&s->ovr, p, n)) {
		/* Refused before the bytes that complete the name leave. */
		if (s->up == H2S_UP_WAIT)
			h2s_error(s, 403, "method override refused on a credentialed request",
			    "method_override");
		else {
			h2s_log(s, INTERCEPT_L_WARN, "http_reject", "method_override", 403);
			s->refused = true;
			(void)nghttp2_submit_rst_stream(
			    s->c->h2->ws, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
		}
		return;
	}
	if (s->subst != NULL) {
		h2s_subst_out(s, subst_stream_feed(s->subst, p, n, s->sbuf));
		return;
	}
	if (evbuffer_add(s->req, p, n) != 0)
		h2s_error(s, 500, "Internal Server Error", "oom");
}

/* The workload ended stream s's request (END_STREAM). */
static void
h2_request_end(struct h2s *s)
{
	s->req_end = true;
	if (s->refused || !s->checked || s->subst == NULL)
		return;
	h2s_subst_out(s, subst_stream_finish(s->subst, s->sbuf));
}

/* ---------------------------------------------------------------- workload session */

static int
h2_w_begin_headers_cb(nghttp2_session *sess, const nghttp2_frame *f, void *arg)
{
	struct icpt_conn *c = arg;
	struct h2s *s;

	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	if (c->h2->calm)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	if ((s = h2s_new(c, f->hd.stream_id)) == NULL)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	nghttp2_session_set_stream_user_data(sess, f->hd.stream_id, s);
	return 0;
}

/*
 * One decoded field, of either session: a request's head (the workload's
 * trailers are dropped: never merged, never routed on), or an upstream
 * answer's head or trailers.
 */
static int
h2_header_cb(nghttp2_session *sess, const nghttp2_frame *f, const uint8_t *n, size_t nl,
    const uint8_t *v, size_t vl, uint8_t flags, void *arg)
{
	struct icpt_conn *c = arg;
	struct h2s *s = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
	bool ws = sess == c->h2->ws;

	(void)flags;
	if (s == NULL || f->hd.type != NGHTTP2_HEADERS ||
	    (ws && f->headers.cat != NGHTTP2_HCAT_REQUEST))
		return 0;
	return h2_block_add(ws ? &s->hb : &s->rh, n, nl, v, vl) == 0
	           ? 0
	           : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
}

static int
h2_w_data_cb(
    nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *p, size_t n, void *arg)
{
	struct h2s *s = nghttp2_session_get_stream_user_data(sess, id);

	(void)flags;
	(void)arg;
	if (s == NULL || s->refused || !s->checked) {
		/* Dropped: the window is given back at once. */
		(void)nghttp2_session_consume(sess, id, n);
		return 0;
	}
	s->unconsumed += n;
	h2_request_data(s, p, n);
	if (s->refused)
		h2s_consume(s, s->unconsumed);
	return 0;
}

static int
h2_w_frame_cb(nghttp2_session *sess, const nghttp2_frame *f, void *arg)
{
	struct icpt_conn *c = arg;
	struct h2s *s = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
	bool end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;

	switch (f->hd.type) {
	case NGHTTP2_HEADERS:
		if (s == NULL)
			return 0;
		if (f->headers.cat == NGHTTP2_HCAT_REQUEST) {
			s->req_end = end;
			if (!c->h2->calm)
				h2_request(s);
			if (end)
				h2_request_end(s);
		} else if (end) {
			h2_request_end(s); /* after trailers */
		}
		break;
	case NGHTTP2_DATA:
		if (f->hd.length == 0 && !end)
			h2_rate(c, false); /* empty DATA frames cost us, not the sender */
		if (s != NULL && end)
			h2_request_end(s);
		break;
	case NGHTTP2_RST_STREAM:
		h2_rate(c, true);
		break;
	case NGHTTP2_SETTINGS:
	case NGHTTP2_PING:
	case NGHTTP2_PRIORITY:
	case NGHTTP2_WINDOW_UPDATE:
		h2_rate(c, false);
		break;
	default:
		break;
	}
	return 0;
}

static int
h2_w_close_cb(nghttp2_session *sess, int32_t id, uint32_t code, void *arg)
{
	struct icpt_conn *c = arg;
	struct h2s *s = nghttp2_session_get_stream_user_data(sess, id);

	(void)code;
	if (s == NULL)
		return 0;
	nghttp2_session_set_stream_user_data(sess, id, NULL);
	/*
	 * The upstream stream ends with it unless both ways are done: an
	 * answer may end before the request's body (an early answer), whose
	 * rest nghttp2 would otherwise send when the window opens.
	 */
	if (s->uid > 0 && c->h2->us != NULL) {
		nghttp2_session_set_stream_user_data(c->h2->us, s->uid, NULL);
		if (!s->resp_end || s->up != H2S_UP_DONE)
			(void)nghttp2_submit_rst_stream(
			    c->h2->us, NGHTTP2_FLAG_NONE, s->uid, NGHTTP2_CANCEL);
	}
	/* HTTP/1.1 upstream mid-exchange: that connection is out of step. */
	if (c->h2->us == NULL && c->h2->cur == s && (!s->resp_end || s->up != H2S_UP_DONE))
		c->h2->up_dirty = true;
	if (s->resp_head && !s->refused)
		icpt_audit(c, s->method, s->credentialed ? s->binding : NULL, s->status,
		    s->resp_bytes, s->matches);
	if (s->unconsumed > 0)
		(void)nghttp2_session_consume_connection(sess, s->unconsumed);
	h2s_free(s);
	return 0;
}

/* A GOAWAY of ours went out: after it, nothing; the connection drains. */
static int
h2_w_sent_cb(nghttp2_session *sess, const nghttp2_frame *f, void *arg)
{
	struct icpt_conn *c = arg;

	(void)sess;
	/* nghttp2's own reset limiter */
	if (f->hd.type == NGHTTP2_GOAWAY && f->goaway.error_code == NGHTTP2_ENHANCE_YOUR_CALM)
		h2_calm(c, "h2_rapid_reset", false);
	return 0;
}

/* ---------------------------------------------------------------- upstream h2 */

/*
 * Read callback of an upstream stream's request body. The stream is found
 * by its id, never through the provider's pointer: a stream freed while
 * its body waited for the window has none (h2_w_close_cb), and it resets.
 */
static ssize_t
h2_req_read_cb(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
    nghttp2_data_source *src, void *arg)
{
	struct h2s *s = nghttp2_session_get_stream_user_data(sess, id);
	size_t n;

	(void)src;
	(void)arg;
	if (s == NULL)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	n = evbuffer_get_length(s->req);
	if (n > len)
		n = len;
	if (n > 0) {
		evbuffer_remove(s->req, buf, n);
		h2s_consume(s, n);
	}
	if (evbuffer_get_length(s->req) == 0 && s->req_end) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		s->up = H2S_UP_DONE;
		return (ssize_t)n;
	}
	return n > 0 ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
}

/*
 * Submit stream s upstream over h2: the checked head parsed again (it is
 * ours) into the fields of an h2 request, without the HTTP/1.1 framing and
 * connection fields.
 */
static int
h2_up_submit(struct h2s *s)
{
	struct icpt_conn *c = s->c;
	struct intercept *ic = c->ic;
	struct httpwire_request req;
	nghttp2_nv nv[HTTPWIRE_MAX_HEADERS + 4];
	size_t consumed, n = 0, len = evbuffer_get_length(s->head);
	uint8_t *data = evbuffer_pullup(s->head, -1);
	nghttp2_data_provider dp = {.source.ptr = NULL, .read_callback = h2_req_read_cb};
	uint8_t fl = s->credentialed ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE;
	int32_t id;

	if (data == NULL || httpwire_parse_request(data, len, &req, ic->hdrs, HTTPWIRE_MAX_HEADERS,
	                        &consumed) != HTTPWIRE_OK)
		return -1;
		/*
	 * A credentialed request's fields are never indexed (RFC 7541 7.1.3,
	 * fl): the credential stays out of the dynamic table, where the size
	 * of later requests on the connection could tell what it holds.
	 */
#define NV(a, al, b, bl) nv[n++] = (nghttp2_nv){(uint8_t *)(a), (uint8_t *)(b), (al), (bl), fl}
	NV(":method", 7, req.method.ptr, req.method.len);
	NV(":scheme", 7, "https", 5);
	NV(":authority", 10, req.host.ptr, req.host.len);
	NV(":path", 5, req.target.ptr, req.target.len);
	for (size_t i = 0; i < req.nheaders; i++) {
		struct httpwire_header *h = &req.headers[i];

		if (h->name.ptr == NULL || httpwire_name_eq(h->name, "host"))
			continue;
		if (httpwire_name_eq(h->name, "te")) {
			/* Only "trailers" is an h2 TE (gRPC sends it). */
			if (h->value.len == 8 &&
			    strncasecmp((const char *)h->value.ptr, "trailers", 8) == 0)
				NV("te", 2, "trailers", 8);
			continue;
		}
		if (h2_hop_field(h->name.ptr, h->name.len))
			continue;
		/* h2 names are lower case; the head is ours and writable. */
		for (size_t k = 0; k < h->name.len; k++)
			((uint8_t *)h->name.ptr)[k] = (uint8_t)tolower(h->name.ptr[k]);
		NV(h->name.ptr, h->name.len, h->value.ptr, h->value.len);
	}
#undef NV
	id = nghttp2_submit_request(c->h2->us, NULL, nv, n,
	    (s->req_end && evbuffer_get_length(s->req) == 0) ? NULL : &dp, s);
	if (id < 0)
		return -1;
	s->uid = id;
	s->up = (s->req_end && evbuffer_get_length(s->req) == 0) ? H2S_UP_DONE : H2S_UP_SENT;
	return 0;
}

/* nv of a redacted block (names and values point into b->buf, which must stay). */
static size_t
h2_block_nv(struct h2_block *b, nghttp2_nv *nv, size_t cap, bool skip_hop)
{
	size_t n = 0;

	for (size_t i = 0; i < b->n && n < cap; i++) {
		uint8_t *name = b->buf + b->f[i].no;

		if (skip_hop && h2_hop_field(name, b->f[i].nl))
			continue;
		nv[n++] = (nghttp2_nv){
		    name, b->buf + b->f[i].vo, b->f[i].nl, b->f[i].vl, NGHTTP2_NV_FLAG_NONE};
	}
	return n;
}

/* The fields of a block as httpwire headers, for the shared response checks. */
static size_t
h2_block_hdrs(const struct h2_block *b, struct httpwire_header *h, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < b->n && n < cap; i++) {
		h[n].name.ptr = b->buf + b->f[i].no;
		h[n].name.len = b->f[i].nl;
		h[n].value.ptr = b->buf + b->f[i].vo;
		h[n].value.len = b->f[i].vl;
		n++;
	}
	return n;
}

/*
 * A final response head for stream s (fields in hdrs[0..n), already
 * redacted, plus its status): checked, then submitted to the workload
 * with s->out as its body.
 */
static void
h2_response(struct h2s *s, int status, nghttp2_nv *nv, size_t nnv, struct httpwire_header *hdrs,
    size_t nh, bool end)
{
	struct icpt_conn *c = s->c;
	struct redact_set *set = vault_snap_redact(s->snap);
	nghttp2_data_provider dp = {.source.ptr = s, .read_callback = h2_out_read_cb};
	const char *why;

	s->status = status;
	if ((why = icpt_response_refusal(s->credentialed, s->bound, status, hdrs, nh)) != NULL) {
		h2s_error(s, 502, "Bad Gateway", why);
		return;
	}
	if (set != NULL && !end &&
	    (s->rs = redact_stream_new_mode(set, icpt_redact_mode_of(hdrs, nh))) == NULL) {
		h2s_error(s, 500, "Internal Server Error", "oom");
		return;
	}
	s->resp_head = true;
	s->resp_end = end;
	if (nghttp2_submit_response(c->h2->ws, s->id, nv, nnv, end ? NULL : &dp) != 0)
		(void)nghttp2_submit_rst_stream(
		    c->h2->ws, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
}

/* Response body bytes for stream s: through its redactor into s->out. */
static void
h2_response_data(struct h2s *s, const uint8_t *p, size_t n)
{
	struct icpt_h2 *h = s->c->h2;
	size_t before = evbuffer_get_length(s->out);

	if (s->refused || !s->resp_head)
		return;
	if (s->rs != NULL && !s->rs_read) {
		/* Framed bodies are released at the read's end, not per DATA frame. */
		redact_stream_read_begin(s->rs);
		s->rs_read = true;
	}
	if (s->rs != NULL ? redact_stream_feed(s->rs, p, n, s->out) != 0
	                  : evbuffer_add(s->out, p, n) != 0) {
		h2s_error(s, 500, "Internal Server Error", "oom");
		return;
	}
	h->outq += evbuffer_get_length(s->out) - before;
	(void)nghttp2_session_resume_data(h->ws, s->id);
}

/* A read of the upstream's was taken in: each stream it fed releases up to its last frame end. */
static void
h2_reads_end(struct icpt_conn *c)
{
	struct icpt_h2 *h = c->h2;

	for (struct h2s *s = h != NULL ? h->streams : NULL; s != NULL; s = s->next) {
		size_t before;

		if (!s->rs_read || s->rs == NULL)
			continue;
		s->rs_read = false;
		before = evbuffer_get_length(s->out);
		if (redact_stream_read_end(s->rs, s->out) != 0) {
			h2s_error(s, 500, "Internal Server Error", "oom");
			continue;
		}
		h->outq += evbuffer_get_length(s->out) - before;
		(void)nghttp2_session_resume_data(h->ws, s->id);
	}
}

/* The response ended upstream: the redactor's held bytes go, then the end. */
static void
h2_response_end(struct h2s *s)
{
	struct icpt_h2 *h = s->c->h2;
	size_t before = evbuffer_get_length(s->out);

	if (s->refused || !s->resp_head || s->resp_end)
		return;
	if (s->rs != NULL) {
		if (redact_stream_flush(s->rs, s->out) != 0) {
			h2s_error(s, 500, "Internal Server Error", "oom");
			return;
		}
		h2s_matched(s, redact_stream_matches(s->rs));
		redact_stream_free(s->rs);
		s->rs = NULL;
		s->rs_read = false;
	}
	h->outq += evbuffer_get_length(s->out) - before;
	s->resp_end = true;
	(void)nghttp2_session_resume_data(h->ws, s->id);
}

/* Upstream response trailers (gRPC's status): redacted, kept for after the body. */
static void
h2_response_trailers(struct h2s *s)
{
	size_t n;

	h2s_redact_buf(s, s->rh.buf, s->rh.len);
	free(s->trailnv);
	if ((s->trailnv = calloc(s->rh.n ? s->rh.n : 1, sizeof(*s->trailnv))) == NULL) {
		h2s_error(s, 500, "Internal Server Error", "oom");
		return;
	}
	n = h2_block_nv(&s->rh, s->trailnv, s->rh.n, true);
	s->ntrail = n;
	/* The block's buffer backs the fields until they are sent: it moves to trail. */
	free(s->trail);
	s->trail = s->rh.buf;
	s->rh.buf = NULL;
	s->rh.cap = 0;
	h2_block_reset(&s->rh);
}

static int
h2_u_frame_cb(nghttp2_session *sess, const nghttp2_frame *f, void *arg)
{
	struct h2s *s = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
	bool end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;

	(void)arg;
	if (s == NULL || s->refused)
		return 0; /* answered by us already: the upstream's rest is not relayed */
	if (f->hd.type == NGHTTP2_HEADERS) {
		const uint8_t *st;
		size_t sl;
		int status = 0;

		/* As the HTTP/1.1 parser: every field is checked, at most HTTPWIRE_MAX_HEADERS. */
		if (s->rh.too_large || s->rh.n > HTTPWIRE_MAX_HEADERS) {
			h2s_error(s, 502, "Bad Gateway", "response_head_too_large");
			return 0;
		}
		if (s->resp_head) {
			h2_response_trailers(s);
			if (end)
				h2_response_end(s);
			return 0;
		}
		if ((st = h2_field(&s->rh, ":status", &sl)) != NULL && sl == 3)
			status = (st[0] - '0') * 100 + (st[1] - '0') * 10 + (st[2] - '0');
		if (status >= 100 && status < 200) {
			/* Interim answers are not relayed (101 cannot come on h2). */
			if (++s->interim > HTTPWIRE_MAX_INTERIM)
				h2s_error(s, 502, "Bad Gateway", "too_many_interim");
			h2_block_reset(&s->rh);
			return 0;
		}
		{
			struct intercept *ic = s->c->ic;
			nghttp2_nv nv[H2_MAX_FIELDS];
			size_t nh, nnv;

			h2s_redact_buf(s, s->rh.buf, s->rh.len);
			nh = h2_block_hdrs(&s->rh, ic->hdrs, HTTPWIRE_MAX_HEADERS);
			nnv = h2_block_nv(&s->rh, nv, H2_MAX_FIELDS, true);
			h2_response(s, status, nv, nnv, ic->hdrs, nh, end);
			/* nghttp2 copied the fields: the block is free for the trailers. */
			h2_block_reset(&s->rh);
		}
		return 0;
	}
	if (f->hd.type == NGHTTP2_DATA && end)
		h2_response_end(s);
	return 0;
}

static int
h2_u_data_cb(
    nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *p, size_t n, void *arg)
{
	struct h2s *s = nghttp2_session_get_stream_user_data(sess, id);

	(void)flags;
	(void)arg;
	if (s != NULL)
		h2_response_data(s, p, n);
	return 0;
}

static int
h2_u_close_cb(nghttp2_session *sess, int32_t id, uint32_t code, void *arg)
{
	struct h2s *s = nghttp2_session_get_stream_user_data(sess, id);

	(void)arg;
	if (s == NULL)
		return 0;
	s->uid = -1;
	if (s->resp_end || s->refused)
		return 0;
	if (code != NGHTTP2_NO_ERROR || !s->resp_head) {
		icpt_count(s->c->ic, INTERCEPT_M_UPSTREAM_ERR, 1);
		h2s_error(s, 502, "Bad Gateway", "upstream_stream_reset");
		return 0;
	}
	h2_response_end(s);
	return 0;
}

/* ---------------------------------------------------------------- upstream HTTP/1.1 */

/* Move stream s's request bytes to the HTTP/1.1 upstream, framed. */
static void
h2_h1_send(struct h2s *s)
{
	struct icpt_conn *c = s->c;
	size_t n = evbuffer_get_length(s->req);

	if (s->up == H2S_UP_WAIT) {
		if (s->len_pending) {
			s->chunked = !s->req_end;
			s->len_pending = false;
			if (icpt_head_frame_len(s->head, s->req_end, n) != 0) {
				icpt_close(c, "oom");
				return;
			}
		}
		icpt_to_upstream(c, s->head, evbuffer_get_length(s->head));
		s->up = H2S_UP_SENT;
	}
	if (s->up != H2S_UP_SENT)
		return;
	if (s->chunked) {
		if ((n > 0 || s->req_end) && icpt_chunk_to_upstream(c, s->req, s->req_end) != 0) {
			icpt_close(c, "oom");
			return;
		}
	} else if (n > 0) {
		icpt_to_upstream(c, s->req, n);
	}
	if (n > 0)
		h2s_consume(s, n);
	if (s->req_end)
		s->up = H2S_UP_DONE;
}

/*
 * A response head from the HTTP/1.1 upstream for the current stream, r as
 * parsed from data[0..headlen): masked in a copy, whose fields (the views
 * moved into it) are what the workload gets.
 */
static bool
h2_h1_response(
    struct h2s *s, const struct httpwire_response *r, const uint8_t *data, size_t headlen)
{
	struct intercept *ic = s->c->ic;
	nghttp2_nv nv[HTTPWIRE_MAX_HEADERS + 1];
	char code[8];
	size_t nnv = 0;

	if (headlen > sizeof(ic->scratch))
		return false;
	if (r->interim) {
		if (++s->interim > HTTPWIRE_MAX_INTERIM) {
			h2s_error(s, 502, "Bad Gateway", "too_many_interim");
			return false;
		}
		return true;
	}
	if (r->status == 101 || r->framing == HTTPWIRE_FRAME_TUNNEL) {
		h2s_error(s, 502, "Bad Gateway", "unexpected_101");
		return false;
	}
	/* Masking keeps lengths: every field is at the same offset in the copy. */
	memcpy(ic->scratch, data, headlen);
	h2s_redact_buf(s, ic->scratch, headlen);
	snprintf(code, sizeof(code), "%03u", (unsigned)r->status % 1000u);
	nv[nnv++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)code, 7, 3, NGHTTP2_NV_FLAG_NONE};
	for (size_t i = 0; i < r->nheaders; i++) {
		struct httpwire_header *h = &r->headers[i];
		uint8_t *name = ic->scratch + (h->name.ptr - data);

		h->value.ptr = ic->scratch + (h->value.ptr - data);
		h->name.ptr = name;
		if (h2_hop_field(name, h->name.len))
			continue;
		for (size_t k = 0; k < h->name.len; k++)
			name[k] = (uint8_t)tolower(name[k]);
		nv[nnv++] = (nghttp2_nv){
		    name, (uint8_t *)h->value.ptr, h->name.len, h->value.len, NGHTTP2_NV_FLAG_NONE};
	}
	s->resp_keep = r->keep_alive;
	httpwire_body_init(&s->body, r->framing, r->content_length, 0);
	h2_response(s, r->status, nv, nnv, r->headers, r->nheaders, httpwire_body_done(&s->body));
	return !s->refused;
}

/* One span of an HTTP/1.1 response body. */
static void
h2_h1_span_cb(const uint8_t *data, size_t off, size_t len, void *arg)
{
	(void)off;
	h2_response_data(arg, data, len);
}

/* Delete the upstream h2 session, its streams' links to it first. */
static void
h2_us_del(struct icpt_h2 *h)
{
	if (h->us == NULL)
		return;
	for (struct h2s *s = h->streams; s != NULL; s = s->next)
		if (s->uid > 0)
			nghttp2_session_set_stream_user_data(h->us, s->uid, NULL);
	nghttp2_session_del(h->us);
	h->us = NULL;
}

/*
 * The upstream connection goes (its session, its socket, what was queued
 * for it): the next stream that is ready asks for a new one.
 */
static void
h2_up_reset(struct icpt_conn *c)
{
	struct icpt_h2 *h = c->h2;

	h2_us_del(h);
	h->cur = NULL;
	h->up_dirty = false;
	icpt_up_free(c);
	c->up_ready = c->up_asked = false;
	c->u_eof = false;
	if (c->toup != NULL)
		evbuffer_drain(c->toup, evbuffer_get_length(c->toup));
}

/* The HTTP/1.1 exchange of the current stream ended: next one, or a new connection. */
static void
h2_h1_next(struct icpt_conn *c, bool reusable)
{
	c->h2->cur = NULL;
	if (!reusable || c->h2->up_dirty)
		h2_up_reset(c);
}

/* Bytes from the HTTP/1.1 upstream: the current stream's response. */
static void
h2_h1_upstream(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;
	struct icpt_h2 *h = c->h2;

	while (c->ul != NULL) {
		struct evbuffer *in = icpt_leg_input(c->ul);
		size_t len = evbuffer_get_length(in);
		struct h2s *s = h->cur;

		if (s == NULL || s->refused) {
			if (len > 0 || c->u_eof || s != NULL) {
				/* Nobody asked (or the asker left): this connection is done. */
				h2_h1_next(c, false);
				h2_pump(c);
			}
			return;
		}
		if (!s->resp_head) {
			struct httpwire_response r;
			size_t consumed = 0, n;
			enum httpwire_status st;
			uint8_t *data;

			if (len == 0) {
				if (c->u_eof) {
					h2s_error(s, 502, "Bad Gateway", "upstream_closed");
					h2_h1_next(c, false);
				}
				return;
			}
			n = len > HTTPWIRE_MAX_HEAD_BYTES + 1 ? HTTPWIRE_MAX_HEAD_BYTES + 1 : len;
			if ((data = evbuffer_pullup(in, (ssize_t)n)) == NULL) {
				icpt_close(c, "oom");
				return;
			}
			st = httpwire_parse_response(
			    data, n, s->is_head, &r, ic->hdrs, HTTPWIRE_MAX_HEADERS, &consumed);
			if (st == HTTPWIRE_NEED_MORE && !c->u_eof)
				return;
			if (st != HTTPWIRE_OK) {
				h2s_error(s, 502, "Bad Gateway",
				    st == HTTPWIRE_NEED_MORE ? "upstream_closed"
				                             : httpwire_error_str(r.error));
				h2_h1_next(c, false);
				continue;
			}
			if (!h2_h1_response(s, &r, data, consumed)) {
				h2_h1_next(c, false);
				continue;
			}
			evbuffer_drain(in, consumed);
			if (s->resp_end)
				h2_h1_next(c, s->resp_keep && s->up == H2S_UP_DONE);
			continue;
		}
		/* The body. */
		{
			struct evbuffer_iovec v[8];
			int nv = len > 0 ? evbuffer_peek(in, -1, NULL, v, 8) : 0;
			size_t take = 0;
			enum httpwire_status st = HTTPWIRE_NEED_MORE;

			for (int i = 0; i < nv && i < 8; i++) {
				size_t used = 0;

				st = httpwire_body_feed(
				    &s->body, v[i].iov_base, v[i].iov_len, &used, h2_h1_span_cb, s);
				take += used;
				if (st != HTTPWIRE_NEED_MORE)
					break;
			}
			evbuffer_drain(in, take);
			if (st == HTTPWIRE_INVALID || st == HTTPWIRE_TOO_LARGE) {
				h2s_error(s, 502, "Bad Gateway", "response_body_invalid");
				h2_h1_next(c, false);
				continue;
			}
			if (st == HTTPWIRE_OK) {
				h2_response_end(s);
				h2_h1_next(c, s->resp_keep && s->up == H2S_UP_DONE);
				continue;
			}
			if (c->u_eof && evbuffer_get_length(in) == 0) {
				if (httpwire_body_eof(&s->body) == HTTPWIRE_OK)
					h2_response_end(s);
				else
					h2s_error(s, 502, "Bad Gateway", "upstream_truncated");
				h2_h1_next(c, false);
				continue;
			}
			if (take == 0 || s->refused)
				return;
		}
	}
}

/* ---------------------------------------------------------------- pumps */

/*
 * Whether stream s may go upstream: its request ended, it declared no
 * length, or its body passed the hold.
 */
static bool
h2s_ready(const struct h2s *s)
{
	return s->checked && !s->refused && s->up == H2S_UP_WAIT &&
	       (s->req_end || !s->hold || evbuffer_get_length(s->req) > H2_HOLD);
}

/* Hand streams to the upstream as it can take them. */
static void
h2_up_pump(struct icpt_conn *c)
{
	struct icpt_h2 *h = c->h2;
	bool want = false;

	if (c->up_failed) {
		/* The upstream cannot be reached: every stream waiting for it gets 502. */
		for (struct h2s *s = h->streams; s != NULL; s = s->next)
			if (s->checked && !s->refused && !s->resp_end)
				h2s_error(s, 502, "Bad Gateway", c->up_why);
		return;
	}
	/* HTTP/1.1 upstream out of step (a refused or abandoned exchange): a new one. */
	if (h->us == NULL && c->up_ready &&
	    ((h->cur != NULL && h->cur->refused) || (h->cur == NULL && h->up_dirty)))
		h2_h1_next(c, false);
	for (struct h2s *s = h->streams; s != NULL; s = s->next)
		if (s->checked && !s->refused && s->up != H2S_UP_DONE)
			want = true;
	if (!c->up_ready) {
		const char *why;

		if (want && !c->up_asked && !c->up_failed && (why = icpt_up_start(c)) != NULL)
			for (struct h2s *s = h->streams; s != NULL; s = s->next)
				if (s->checked && !s->refused)
					h2s_error(s, 502, "Bad Gateway", why);
		return;
	}
	if (h->us != NULL) {
		for (struct h2s *s = h->streams; s != NULL; s = s->next) {
			if (h2s_ready(s) && h2_up_submit(s) != 0)
				h2s_error(s, 502, "Bad Gateway", "upstream_submit");
			else if (s->uid > 0 && s->up == H2S_UP_SENT)
				(void)nghttp2_session_resume_data(h->us, s->uid);
		}
		return;
	}
	if (h->cur == NULL) {
		for (struct h2s *s = h->streams; s != NULL; s = s->next)
			if (h2s_ready(s)) {
				h->cur = s;
				break;
			}
	}
	if (h->cur != NULL && !h->cur->refused)
		h2_h1_send(h->cur);
}

/* Frames out to both peers, within the buffer bounds; then back-pressure. */
static void
h2_flush(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;
	struct icpt_h2 *h = c->h2;
	const uint8_t *data;
	ssize_t n = 0;

	if (h->us != NULL && c->ul != NULL) {
		struct evbuffer *o = icpt_leg_output(c->ul);

		while (evbuffer_get_length(o) < ic->cfg.max_buffer &&
		       (n = nghttp2_session_mem_send(h->us, &data)) > 0)
			evbuffer_add(o, data, (size_t)n);
	}
	{
		struct evbuffer *o = icpt_leg_output(c->cl);

		while (evbuffer_get_length(o) < ic->cfg.max_buffer &&
		       (n = nghttp2_session_mem_send(h->ws, &data)) > 0)
			evbuffer_add(o, data, (size_t)n);
		if (n < 0) {
			icpt_close(c, "h2_send_failed");
			return;
		}
	}
	/* The workload is behind: stop reading upstream until it catches up. */
	if (c->ul != NULL) {
		if (h->outq >= ic->cfg.max_buffer ||
		    evbuffer_get_length(icpt_leg_output(c->cl)) >= ic->cfg.max_buffer)
			icpt_leg_disable(c->ul, EV_READ);
		else if (c->up_ready)
			icpt_leg_enable(c->ul, EV_READ);
	}
	/* Upstream is behind: stop reading the workload. */
	if (icpt_up_pending(c) >= ic->cfg.max_buffer)
		icpt_leg_disable(c->cl, EV_READ);
	else if (!c->c_eof && !h->calm)
		icpt_leg_enable(c->cl, EV_READ);
}

/*
 * The connection's one deadline, which frames do not push back (pings or
 * a header block sent a byte at a time): a header block must be whole
 * within the head timeout, and a connection without a stream ends after
 * the keep-alive timeout. With streams open, only the idle timeout.
 */
static void
h2_deadline(struct icpt_conn *c)
{
	static const char head[] = "head_timeout", keep[] = "keepalive_timeout";
	struct icpt_h2 *h = c->h2;
	const char *want = h->nstreams == 0 ? keep : NULL;
	bool pending = c->ev_deadline != NULL && evtimer_pending(c->ev_deadline, NULL);

	for (struct h2s *s = h->streams; s != NULL; s = s->next)
		if (!s->checked && !s->refused)
			want = head; /* a header block is being received */
	if (want == NULL) {
		icpt_deadline_stop(c);
		return;
	}
	if (pending && c->deadline_why == want)
		return;
	icpt_deadline_arm(
	    c, want == head ? c->ic->cfg.head_timeout_s : c->ic->cfg.keepalive_timeout_s, want);
}

/* After any event: streams upstream, frames out, and the end of the connection. */
static void
h2_pump(struct icpt_conn *c)
{
	struct icpt_h2 *h = c->h2;

	if (c->state != ICPT_S_HTTP || h == NULL)
		return;
	if (!h->calm)
		h2_up_pump(c);
	if (c->state != ICPT_S_HTTP)
		return;
	h2_flush(c);
	if (c->state != ICPT_S_HTTP)
		return;
	if (h->us != NULL && !nghttp2_session_want_read(h->us) &&
	    !nghttp2_session_want_write(h->us)) {
		/* The upstream session ended (its GOAWAY, or ours after its protocol error). */
		icpt_count(c->ic, INTERCEPT_M_UPSTREAM_ERR, 1);
		icpt_log(c, INTERCEPT_L_WARN, "upstream_error", "upstream_h2_closed", 0);
		icpt_h2_up_lost(c, "upstream_h2_closed");
		return;
	}
	if (h->calm || (!nghttp2_session_want_read(h->ws) && !nghttp2_session_want_write(h->ws)) ||
	    (c->c_eof && h->nstreams == 0)) {
		icpt_drain(c);
		return;
	}
	h2_deadline(c);
}

/* ---------------------------------------------------------------- entry points */

/* Workload bytes: into the server session. */
static void
h2_c_read_cb(struct icpt_leg *l, void *arg)
{
	struct icpt_conn *c = arg;
	struct evbuffer *in = icpt_leg_input(l);

	while (c->state == ICPT_S_HTTP && evbuffer_get_length(in) > 0 && !c->h2->calm) {
		struct evbuffer_iovec v;
		ssize_t r;

		if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
			break;
		r = nghttp2_session_mem_recv(c->h2->ws, v.iov_base, v.iov_len);
		if (c->state != ICPT_S_HTTP)
			return;
		if (r == NGHTTP2_ERR_FLOODED) {
			/* SETTINGS or PING faster than their ACKs can leave: a flood. */
			h2_calm(c, "h2_frame_flood", true);
			h2_flush(c);
			icpt_drain(c);
			return;
		}
		if (r < 0) {
			/* A connection error (RFC 9113 5.4.1): GOAWAY, and the connection ends. */
			icpt_log(c, INTERCEPT_L_INFO, "conn_close", "h2_protocol_error", 0);
			h2_flush(c); /* nghttp2 queued its GOAWAY */
			icpt_drain(c);
			return;
		}
		evbuffer_drain(in, (size_t)r);
	}
	h2_pump(c);
}

static void
h2_c_write_cb(struct icpt_leg *l, void *arg)
{
	(void)l;
	h2_pump(arg);
}

static void
h2_c_event_cb(struct icpt_leg *l, short what, void *arg)
{
	struct icpt_conn *c = arg;

	(void)l;
	if (what & BEV_EVENT_CONNECTED)
		return;
	if (what & BEV_EVENT_EOF) {
		c->c_eof = true;
		icpt_leg_disable(c->cl, EV_READ);
		h2_pump(c);
		return;
	}
	icpt_close(c, (what & BEV_EVENT_TIMEOUT) ? "idle_timeout" : "client_error");
}

static int
h2_session_new(nghttp2_session **out, bool server, struct icpt_conn *c)
{
	nghttp2_session_callbacks *cb;
	nghttp2_option *opt;
	int rc;

	if (nghttp2_session_callbacks_new(&cb) != 0)
		return -1;
	if (nghttp2_option_new(&opt) != 0) {
		nghttp2_session_callbacks_del(cb);
		return -1;
	}
	nghttp2_option_set_max_continuations(opt, H2_MAX_CONTINUATIONS);
	nghttp2_option_set_max_outbound_ack(opt, 100);
	nghttp2_option_set_max_settings(opt, 16);
	nghttp2_option_set_no_closed_streams(opt, 1);
	if (server) {
		nghttp2_option_set_stream_reset_rate_limit(opt, 2 * H2_RST_PER_S, H2_RST_PER_S);
		/* The window opens as bytes go upstream (h2s_consume): back-pressure per stream. */
		nghttp2_option_set_no_auto_window_update(opt, 1);
		nghttp2_session_callbacks_set_on_begin_headers_callback(cb, h2_w_begin_headers_cb);
		nghttp2_session_callbacks_set_on_header_callback(cb, h2_header_cb);
		nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, h2_w_data_cb);
		nghttp2_session_callbacks_set_on_frame_recv_callback(cb, h2_w_frame_cb);
		nghttp2_session_callbacks_set_on_stream_close_callback(cb, h2_w_close_cb);
		nghttp2_session_callbacks_set_on_frame_send_callback(cb, h2_w_sent_cb);
		rc = nghttp2_session_server_new2(out, cb, c, opt);
	} else {
		nghttp2_session_callbacks_set_on_header_callback(cb, h2_header_cb);
		nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, h2_u_data_cb);
		nghttp2_session_callbacks_set_on_frame_recv_callback(cb, h2_u_frame_cb);
		nghttp2_session_callbacks_set_on_stream_close_callback(cb, h2_u_close_cb);
		rc = nghttp2_session_client_new2(out, cb, c, opt);
	}
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cb);
	return rc == 0 ? 0 : -1;
}

/* Whether the TLS leg l (NULL, or not TLS: no) chose h2 in ALPN. */
static bool
h2_alpn_h2(struct icpt_leg *l)
{
	SSL *ssl = icpt_leg_ssl(l);
	const unsigned char *p = NULL;
	unsigned len = 0;

	if (ssl == NULL)
		return false;
	SSL_get0_alpn_selected(ssl, &p, &len);
	return len == 2 && memcmp(p, "h2", 2) == 0;
}

/* Whether the workload's handshake chose h2. */
bool
icpt_h2_negotiated(struct icpt_conn *c)
{
	return h2_alpn_h2(c->cl);
}

/* The workload's handshake chose h2: the relay becomes an HTTP/2 one. */
void
icpt_h2_start(struct icpt_conn *c)
{
	nghttp2_settings_entry set[] = {
	    {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, H2_MAX_STREAMS},
	    {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, H2_MAX_HEADER_LIST},
	    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_WINDOW},
	    {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	};

	if ((c->h2 = calloc(1, sizeof(*c->h2))) == NULL ||
	    h2_session_new(&c->h2->ws, true, c) != 0 ||
	    nghttp2_submit_settings(c->h2->ws, NGHTTP2_FLAG_NONE, set, 4) != 0 ||
	    nghttp2_session_set_local_window_size(
	        c->h2->ws, NGHTTP2_FLAG_NONE, 0, H2_CONN_WINDOW) != 0) {
		icpt_close(c, "oom");
		return;
	}
	icpt_count(c->ic, INTERCEPT_M_H2, 1);
	icpt_deadline_stop(c);
	icpt_leg_timeouts(c->cl, c->ic->cfg.idle_timeout_s, c->ic->cfg.idle_timeout_s);
	icpt_leg_setcb(c->cl, h2_c_read_cb, h2_c_write_cb, h2_c_event_cb, c);
	icpt_leg_enable(c->cl, EV_READ | EV_WRITE);
	/* An upstream that connected during the handshake. */
	if (c->up_ready)
		icpt_h2_up_ready(c);
	h2_c_read_cb(c->cl, c);
}

/* The upstream is connected and verified: its protocol decides the upstream side. */
void
icpt_h2_up_ready(struct icpt_conn *c)
{
	struct icpt_h2 *h = c->h2;
	nghttp2_settings_entry set[] = {
	    {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	    {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, H2_MAX_HEADER_LIST},
	    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_WINDOW},
	};

	if (h == NULL)
		return;
	/* A lost upstream's session went with it (h2_up_reset): h->us is NULL here. */
	if (h2_alpn_h2(c->ul)) {
		if (h2_session_new(&h->us, false, c) != 0 ||
		    nghttp2_submit_settings(h->us, NGHTTP2_FLAG_NONE, set, 3) != 0) {
			icpt_close(c, "oom");
			return;
		}
	}
	h2_pump(c);
}

/* Upstream bytes. */
void
icpt_h2_upstream(struct icpt_conn *c)
{
	struct icpt_h2 *h = c->h2;

	if (h == NULL || c->state != ICPT_S_HTTP)
		return;
	if (h->us == NULL) {
		h2_h1_upstream(c);
		h2_reads_end(c);
	} else if (c->ul != NULL) {
		struct evbuffer *in = icpt_leg_input(c->ul);

		while (c->state == ICPT_S_HTTP && c->ul != NULL && evbuffer_get_length(in) > 0) {
			struct evbuffer_iovec v;
			ssize_t r;

			if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
				break;
			r = nghttp2_session_mem_recv(h->us, v.iov_base, v.iov_len);
			if (r < 0) {
				icpt_count(c->ic, INTERCEPT_M_UPSTREAM_ERR, 1);
				icpt_h2_up_lost(c, "upstream_h2_error");
				return;
			}
			evbuffer_drain(in, (size_t)r);
		}
		if (c->state == ICPT_S_HTTP)
			h2_reads_end(c);
		if (c->state == ICPT_S_HTTP && h->us != NULL &&
		    (c->u_eof || (!nghttp2_session_want_read(h->us) &&
		                     !nghttp2_session_want_write(h->us)))) {
			icpt_h2_up_lost(c, "upstream_closed");
			return;
		}
	}
	h2_pump(c);
}

/*
 * The upstream connection is gone (closed, failed, or an h2 error): every
 * stream that went to it and has no whole answer fails; the others wait
 * for a new connection.
 */
void
icpt_h2_up_lost(struct icpt_conn *c, const char *why)
{
	struct icpt_h2 *h = c->h2;

	if (h == NULL)
		return;
	for (struct h2s *s = h->streams; s != NULL; s = s->next) {
		if (s->refused || s->up == H2S_UP_WAIT)
			continue;
		if (!s->resp_end) {
			if (s->resp_head && h->us == NULL &&
			    httpwire_body_eof(&s->body) == HTTPWIRE_OK)
				h2_response_end(s);
			else
				h2s_error(s, 502, "Bad Gateway", why);
		}
	}
	h2_up_reset(c);
	h2_pump(c);
}

void
icpt_h2_pump(struct icpt_conn *c)
{
	h2_pump(c);
}

/* Free the relay (the connection is going). */
void
icpt_h2_free(struct icpt_conn *c)
{
	struct icpt_h2 *h = c->h2;

	if (h == NULL)
		return;
	/* Sessions first: their close callbacks must not run on freed streams. */
	h2_us_del(h);
	for (struct h2s *s = h->streams; s != NULL; s = s->next)
		nghttp2_session_set_stream_user_data(h->ws, s->id, NULL);
	nghttp2_session_del(h->ws);
	while (h->streams != NULL)
		h2s_free(h->streams);
	free(h);
	c->h2 = NULL;
}
