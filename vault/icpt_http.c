/*
 * icpt_http: the HTTP/1.1 relay of terminated and plain connections
 * (intercept process): strict request heads, exactly one binding per
 * request, injection, and every byte back to the workload redacted.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include "certs/leaf.h"
#include "policy/binding.h"
#include "policy/name.h"
#include "vault/httpwire.h"
#include "vault/intercept.h"
#include "vault/intercept_internal.h"
#include "vault/redact.h"
#include "vault/snap.h"
#include "vault/subst.h"
#include "vault/tlspeek.h"
#include "vault/icpt_internal.h"

/* ---------------------------------------------------------------- HTTP relay */

/* Workload-leg timeouts for the request state. */
static void
icpt_client_timeouts(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	if (c->req != ICPT_REQ_HEAD)
		icpt_deadline_stop(c); /* the head is complete */
	/* A silent workload waiting for a long response (SSE) is not idle. */
	if (c->req == ICPT_REQ_HEAD)
		icpt_leg_timeouts(c->cl, ic->cfg.keepalive_timeout_s, ic->cfg.idle_timeout_s);
	else if (c->req == ICPT_REQ_BODY)
		icpt_leg_timeouts(c->cl, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
	else
		icpt_leg_timeouts(c->cl, 0, ic->cfg.idle_timeout_s);
}

/*
 * Start decoding a message body; false when no body follows. The one
 * answer to "is there a body" for requests and responses alike: the
 * framing httpwire chose by RFC 9112 6.3 (HEAD, 1xx, 204 and 304 have
 * none; CONNECT is never relayed), read by the body decoder, so that a
 * Content-Length: 0 is as bodiless as a 204.
 */
static bool
icpt_body_begin(
    struct httpwire_body *b, enum httpwire_framing f, uint64_t content_length, unsigned flags)
{
	httpwire_body_init(b, f, content_length, flags);
	return !httpwire_body_done(b);
}

/*
 * A placeholder on a request it is not bound to (no binding matched, or
 * another binding's) stays as it is: logged by credential name, once per
 * request, from the head (the body is not searched).
 */
static void
icpt_stray(struct icpt_conn *c, const struct vault_snap *snap, const struct httpwire_request *req,
    size_t headlen, size_t idx)
{
	const struct binding_set *bs;
	struct binding_credential_info ci;
	size_t cred;

	if (snap == NULL) /* no vault */
		return;
	bs = vault_snap_bindings(snap);
	cred = subst_find_stray(bs, idx, req->start_line.ptr, headlen);
	if (cred == SIZE_MAX || binding_credential_get(bs, cred, &ci) != 0)
		return;
	struct intercept_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.level = INTERCEPT_L_WARN;
	ev.event = "placeholder_unmatched";
	ev.conn = c->id;
	ev.reason = idx == SIZE_MAX ? "no_binding" : "other_binding";
	ev.host = c->host;
	ev.method = c->method;
	ev.credential = ci.name;
	ev.family = c->family;
	ev.addr = c->addr;
	ev.port = c->port;
	c->ic->ops->log(c->ic->arg, &ev);
}

/*
 * A body substitution for binding idx: a body of a kind that can hold a
 * placeholder (not multipart, not compressed), on HTTP/1.1 (past the hold
 * bound it is re-framed chunked, which HTTP/1.0 has not). *out stays
 * NULL when there is none; its output goes to *sbuf (made here). 0 or -1.
 */
static int
icpt_body_subst(struct icpt_conn *c, const struct vault_snap *snap,
    const struct httpwire_request *req, size_t idx, struct evbuffer **sbuf,
    struct subst_stream **out)
{
	static const enum subst_enc enc[] = {[SUBST_BODY_RAW] = SUBST_RAW,
	    [SUBST_BODY_JSON] = SUBST_JSON,
	    [SUBST_BODY_FORM] = SUBST_FORM};
	struct subst_rules rules;
	enum subst_body kind;

	(void)c;
	*out = NULL;
	if (req->version_minor != 1 ||
	    !(req->framing == HTTPWIRE_FRAME_CHUNKED ||
	        (req->framing == HTTPWIRE_FRAME_LENGTH && req->content_length > 0)))
		return 0;
	if ((kind = subst_body_kind(req->headers, req->nheaders)) == SUBST_BODY_SKIP)
		return 0;
	if (subst_rules_build(snap, idx, BINDING_IN_BODY, enc[kind], &rules) != 0)
		return -1;
	if (rules.n == 0)
		return 0;
	if (*sbuf == NULL && (*sbuf = evbuffer_new()) == NULL) {
		subst_rules_clear(&rules);
		return -1;
	}
	return (*out = subst_stream_new(&rules)) == NULL ? -1 : 0;
}

/*
 * The framing field of a substituted body (Content-Length: N, or
 * Transfer-Encoding: chunked) into a head that ends with its blank line.
 * 0 or -1.
 */
int
icpt_head_frame(struct evbuffer *head, const char *field)
{
	struct evbuffer *t = evbuffer_new();
	size_t n = evbuffer_get_length(head);
	int rc = -1;

	if (t != NULL && n >= 2 && evbuffer_remove_buffer(head, t, n - 2) == (int)(n - 2) &&
	    evbuffer_add(t, field, strlen(field)) == 0 && evbuffer_add_buffer(t, head) == 0 &&
	    evbuffer_add_buffer(head, t) == 0)
		rc = 0;
	if (t != NULL)
		evbuffer_free(t);
	return rc;
}

/*
 * The checks of a request head, the same for the HTTP/1.1 and the HTTP/2
 * relays (see icpt_internal.h). host is the request's canonical host,
 * already found to be the connection's.
 */
const char *
icpt_request_verdict(struct icpt_conn *c, const struct httpwire_request *req, size_t headlen,
    const char *host, struct evbuffer **sbuf, struct evbuffer *head, struct icpt_verdict *v)
{
	struct intercept *ic = c->ic;
	char path[HTTPWIRE_MAX_PATH + 1];
	const char *scheme = c->tls ? "https" : "http";
	const char *why;
	enum binding_match_result mr = BINDING_MATCH_NONE;

	memset(v, 0, sizeof(*v));
	v->status = 403;
	v->text = "Forbidden";
	if (intercept_upgrade_refused(req)) {
		v->text = "upgrade refused";
		return "upgrade_refused";
	}
	v->snap = ic->ops->snapshot(ic->arg);
	v->bound = vault_snap_host_bound(v->snap, host);
	if (v->bound) {
		/* Bindings match on the raw path: refuse paths that read two ways. */
		if (req->path.len > HTTPWIRE_MAX_PATH ||
		    httpwire_path_is_ambiguous(req->path.ptr, req->path.len))
			return "path_ambiguous";
		memcpy(path, req->path.ptr, req->path.len);
		path[req->path.len] = '\0';
		mr = binding_match(
		    vault_snap_bindings(v->snap), scheme, host, c->port, c->method, path, &v->idx);
		if (mr == BINDING_MATCH_AMBIGUOUS) {
			v->text = "credential binding ambiguous";
			return "binding_ambiguous";
		}
		v->inject =
		    mr == BINDING_MATCH_ONE && !c->peek; /* never on a port not intercepted */
		if (!v->inject)
			intercept_request_decodable(req->headers, req->nheaders);
	}
	icpt_stray(c, v->snap, req, headlen, v->inject ? v->idx : SIZE_MAX);
	if (v->inject && icpt_body_subst(c, v->snap, req, v->idx, sbuf, &v->subst) != 0) {
		v->status = 500;
		v->text = "Internal Server Error";
		return "oom";
	}
	/*
	 * Only what the binding allowed is credentialed (docs/vault-requests.md):
	 * checked on the workload's own fields, before the head is written
	 * (which substitutes header values into an arena it frees).
	 */
	if (v->inject && (why = intercept_request_refusal(req, &v->text)) != NULL)
		return why;
	if (intercept_request_head(req, req->headers, v->snap, v->idx, v->inject, v->subst != NULL,
	        ic->scratch, sizeof(ic->scratch), head) != 0) {
		v->status = 400;
		v->text = "Bad Request";
		return "head_rewrite";
	}
	if (v->inject) {
		snprintf(v->binding, sizeof(v->binding), "%s",
		    binding_name(vault_snap_bindings(v->snap), v->idx));
		icpt_count(ic, INTERCEPT_M_INJECTED, 1);
	}
	icpt_count(ic, INTERCEPT_M_REQUESTS, 1);
	return NULL;
}

/* Release what a refused verdict holds. */
void
icpt_verdict_clear(struct icpt_verdict *v)
{
	vault_snap_unref(v->snap);
	subst_stream_free(v->subst);
	memset(v, 0, sizeof(*v));
}

/*
 * A request that can go twice: a safe method (RFC 9110 9.2.1), no body,
 * no Upgrade.
 */
static bool
icpt_safe_bodiless(const struct httpwire_request *req)
{
	const struct httpwire_view *m = &req->method;

	if (req->upgrade || req->expect_continue ||
	    !(req->framing == HTTPWIRE_FRAME_NONE ||
	        (req->framing == HTTPWIRE_FRAME_LENGTH && req->content_length == 0)))
		return false;
	return (m->len == 3 && memcmp(m->ptr, "GET", 3) == 0) ||
	       (m->len == 4 && memcmp(m->ptr, "HEAD", 4) == 0) ||
	       (m->len == 7 && memcmp(m->ptr, "OPTIONS", 7) == 0);
}

/* A request head's buffer back to the connection, empty, for its next request. */
static void
icpt_head_park(struct icpt_conn *c, struct evbuffer *head)
{
	evbuffer_drain(head, evbuffer_get_length(head));
	if (c->hbuf == NULL && c->state != ICPT_S_CLOSED)
		c->hbuf = head;
	else
		evbuffer_free(head);
}

/* Returns false when the request was refused (the connection is draining). */
static bool
icpt_http_request(struct icpt_conn *c, const struct httpwire_request *req, size_t headlen)
{
	struct intercept *ic = c->ic;
	char host[POLICY_NAME_MAX + 1];
	struct evbuffer *in = icpt_leg_input(c->cl);
	struct evbuffer *head;
	struct icpt_verdict v;
	const char *why;
	bool replayable;

	icpt_up_busy(c);
	icpt_unquiet(c);
	if (!icpt_http_buffers(c)) {
		icpt_close(c, "oom");
		return false;
	}
	snprintf(c->method, sizeof(c->method), "%.*s",
	    (int)(req->method.len > ICPT_MAX_METHOD ? ICPT_MAX_METHOD : req->method.len),
	    (const char *)req->method.ptr);
	if (intercept_host_canon(req->host.ptr, req->host.len, c->port, host) != 0) {
		icpt_http_error(c, c->tls ? 421 : 400,
		    c->tls ? "Misdirected Request" : "Bad Request", "host_invalid");
		return false;
	}
	if (c->host[0] == '\0') {
		/* Plain HTTP: the first Host is checked like an SNI and pins the connection. */
		if (icpt_set_host(c, host) != 0) {
			icpt_close(c, "oom");
			return false;
		}
		if (!ic->ops->sni_allowed(ic->arg, host)) {
			icpt_reject(c, "host_denied");
			icpt_http_error(c, 403, "Forbidden", "host_denied");
			return false;
		}
		if (!ic->ops->dst_ok(ic->arg, host, c->family, c->addr, c->port)) {
			icpt_reject(c, "orig_dst_not_in_resolved_set");
			icpt_http_error(c, 403, "Forbidden", "orig_dst_not_in_resolved_set");
			return false;
		}
	} else if (strcmp(host, c->host) != 0) {
		/* The upstream (and its certificate) is for c->host only. */
		icpt_http_error(
		    c, 421, "Misdirected Request", c->tls ? "host_not_sni" : "host_changed");
		return false;
	}
	if (c->up_failed) {
		icpt_http_error(c, 502, "Bad Gateway", c->up_why);
		return false;
	}
	c->binding = NULL;
	vault_snap_unref(c->snap);
	c->snap = NULL;
	subst_stream_free(c->subst);
	c->subst = NULL;
	if (c->shead != NULL) /* never left by a finished request; defensive */
		evbuffer_free(c->shead);
	c->shead = NULL;
	/* The connection's own head buffer, made once (no allocation per request). */
	head = c->hbuf != NULL ? c->hbuf : evbuffer_new();
	c->hbuf = NULL;
	if (head == NULL) {
		icpt_http_error(c, 500, "Internal Server Error", "oom");
		return false;
	}
	if ((why = icpt_request_verdict(c, req, headlen, host, &c->sbuf, head, &v)) != NULL) {
		int status = v.status;
		const char *text = v.text;

		icpt_head_park(c, head);
		icpt_verdict_clear(&v);
		icpt_http_error(c, status, text, why);
		return false;
	}
	c->snap = v.snap;
	c->subst = v.subst;
	c->credentialed = v.inject;
	memset(&c->reqscan, 0, sizeof(c->reqscan));
	c->binding = c->credentialed ? binding_name(vault_snap_bindings(c->snap), v.idx) : NULL;
	c->req_is_head = req->method.len == 4 && memcmp(req->method.ptr, "HEAD", 4) == 0;
	/* (req's views are into the head, drained below) */
	if (!c->up_asked)
		(void)icpt_up_take(c); /* a pooled leg has answered before: up_served */
	replayable = c->up_served && icpt_safe_bodiless(req);
	c->req_upgrade = req->upgrade;
	c->req_keep = req->keep_alive;
	c->up_keep = !req->upgrade && (req->keep_alive || req->version_minor == 1);
	c->status = 0;
	c->head_matches = 0;
	c->resp_bytes = 0;
	c->interim = 0;
	evbuffer_drain(in, headlen);
	if (c->subst != NULL && req->framing == HTTPWIRE_FRAME_LENGTH && !req->expect_continue) {
		/* Held until the substituted body's length is known (icpt_req_subst_out). */
		c->shead = head;
	} else {
		if (c->subst != NULL && req->framing == HTTPWIRE_FRAME_LENGTH &&
		    icpt_head_frame(head, "Transfer-Encoding: chunked\r\n") != 0) {
			icpt_head_park(c, head);
			icpt_close(c, "oom");
			return false;
		}
		icpt_up_forget_replay(c);
		if (replayable && icpt_up_keep_replay(c, head) != 0) {
			icpt_head_park(c, head);
			icpt_close(c, "oom");
			return false;
		}
		icpt_to_upstream(c, head, evbuffer_get_length(head));
		icpt_head_park(c, head);
	}
	/*
	 * A trailer section is a second header block, after the head was
	 * checked and the credential injected: to a host with a binding it
	 * could carry the workload's own Authorization or Host. Refused there.
	 */
	c->req = icpt_body_begin(&c->reqbody, req->framing, req->content_length,
	             v.bound ? HTTPWIRE_BODY_NO_TRAILERS : 0)
	             ? ICPT_REQ_BODY
	             : ICPT_REQ_DONE;
	c->resp = ICPT_RESP_HEAD;
	c->scanned = 0;
	if (!c->up_asked && (why = icpt_up_start(c)) != NULL) {
		icpt_http_error(c, 502, "Bad Gateway", why);
		return false;
	}
	icpt_client_timeouts(c);
	return true;
}

/* Whether a line end arrived past what was already searched. */
static int
icpt_find_head(struct evbuffer *in, size_t *scanned)
{
	size_t len = evbuffer_get_length(in);
	struct evbuffer_ptr p;

	if (len <= *scanned)
		return 0;
	if (evbuffer_ptr_set(in, &p, *scanned, EVBUFFER_PTR_SET) != 0)
		return 0;
	p = evbuffer_search(in, "\n", 1, &p);
	if (p.pos < 0) {
		*scanned = len;
		return 0;
	}
	return 1;
}

/* Payload of a credentialed request body: look for a method override in it. */
static void
icpt_req_span_cb(const uint8_t *data, size_t off, size_t len, void *arg)
{
	struct icpt_conn *c = arg;
	int rc;

	(void)intercept_ovr_scan_feed(&c->reqscan, data, len);
	if (c->subst != NULL && !c->subst_big && !c->oom &&
	    (rc = subst_stream_feed(c->subst, data, len, c->sbuf)) != 0) {
		if (rc == SUBST_TOO_LARGE)
			c->subst_big = true;
		else
			c->oom = true;
	}
}

/*
 * A substituted body: the payload bytes of this read (take of in) are
 * replaced by c->sbuf. A Content-Length request's head is held (c->shead)
 * while the substituted body fits in max_buffer: at its end the head goes
 * with the new Content-Length, then the body. Past that bound, or for a
 * chunked request, the body is sent chunked, one chunk per read, and at the
 * end the held bytes and the last chunk. 0 or -1.
 */
static int
icpt_req_subst_out(struct icpt_conn *c, struct evbuffer *in, size_t take, bool done)
{
	size_t n;
	int rc;

	if (c->oom || evbuffer_drain(in, take) != 0)
		return -1;
	if (done && (rc = subst_stream_finish(c->subst, c->sbuf)) != 0) {
		c->subst_big = rc == SUBST_TOO_LARGE;
		return -1;
	}
	n = evbuffer_get_length(c->sbuf);
	if (c->shead != NULL) {
		if (!done && n <= c->ic->cfg.max_buffer)
			return 0;
		if (icpt_head_frame_len(c->shead, done, n) != 0)
			return -1;
		icpt_to_upstream(c, c->shead, evbuffer_get_length(c->shead));
		evbuffer_free(c->shead);
		c->shead = NULL;
		if (done) {
			icpt_to_upstream(c, c->sbuf, n);
			return 0;
		}
	}
	return icpt_chunk_to_upstream(c, c->sbuf, done);
}

/*
 * A body's framing into its head: Content-Length: n when the whole body
 * (n bytes) is known, else Transfer-Encoding: chunked. 0 or -1.
 */
int
icpt_head_frame_len(struct evbuffer *head, bool whole, size_t n)
{
	char field[64];

	if (whole)
		snprintf(field, sizeof(field), "Content-Length: %zu\r\n", n);
	else
		snprintf(field, sizeof(field), "Transfer-Encoding: chunked\r\n");
	return icpt_head_frame(head, field);
}

/* All of src upstream as one chunk (none when it is empty), then the last chunk when last. */
int
icpt_chunk_to_upstream(struct icpt_conn *c, struct evbuffer *src, bool last)
{
	struct evbuffer *f = evbuffer_new();
	size_t n = evbuffer_get_length(src);
	int rc = -1;

	if (f == NULL)
		return -1;
	if (n > 0 && (evbuffer_add_printf(f, "%zx\r\n", n) < 0 ||
	                 evbuffer_add_buffer(f, src) != 0 || evbuffer_add(f, "\r\n", 2) != 0))
		goto out;
	if (last && evbuffer_add(f, "0\r\n\r\n", 5) != 0)
		goto out;
	icpt_to_upstream(c, f, evbuffer_get_length(f));
	rc = 0;
out:
	evbuffer_free(f);
	return rc;
}

/*
 * Whether the HTTP/1.1 relay must leave the workload's bytes alone: the
 * HTTP/2 relay has them, or the hello offered h2 and the handshake that
 * decides is not finished (the upstream may connect first). Once it is,
 * a connection that chose h2 becomes an HTTP/2 one here.
 */
static bool
icpt_h2_switch(struct icpt_conn *c)
{
	SSL *ssl;

	if (c->h2 != NULL)
		return true;
	if (c->h2_checked || !c->want_h2)
		return false;
	ssl = icpt_leg_ssl(c->cl);
	if (ssl == NULL || !SSL_is_init_finished(ssl))
		return true;
	c->h2_checked = true;
	if (!icpt_h2_negotiated(c))
		return false;
	icpt_h2_start(c);
	return true;
}

/* Workload -> upstream, per the request state. */
void
icpt_http_client(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	if (icpt_h2_switch(c))
		return;

	while (c->state == ICPT_S_HTTP) {
		struct evbuffer *in = icpt_leg_input(c->cl);
		size_t len = evbuffer_get_length(in);

		if (c->req == ICPT_REQ_HEAD) {
			struct httpwire_request req;
			enum httpwire_status st;
			size_t consumed = 0, n;
			uint8_t *data;

			if (c->resp != ICPT_RESP_IDLE || len == 0)
				return;
			icpt_deadline_head(c); /* a whole head within the deadline */
			if (c->state != ICPT_S_HTTP)
				return; /* no memory for the deadline, made again after a quiet spell */
			/* Re-parse only when a new line end arrived. */
			if (!icpt_find_head(in, &c->scanned)) {
				if (len > HTTPWIRE_MAX_HEAD_BYTES)
					icpt_http_error(c, 431, "Request Header Fields Too Large",
					    "head_too_large");
				return;
			}
			n = len > HTTPWIRE_MAX_HEAD_BYTES + 1 ? HTTPWIRE_MAX_HEAD_BYTES + 1 : len;
			data = evbuffer_pullup(in, (ssize_t)n);
			if (data == NULL) {
				icpt_close(c, "oom");
				return;
			}
			st = httpwire_parse_request(
			    data, n, &req, ic->hdrs, HTTPWIRE_MAX_HEADERS, &consumed);
			if (st == HTTPWIRE_NEED_MORE) {
				c->scanned = len;
				return;
			}
			if (st != HTTPWIRE_OK) {
				/* Smuggling shapes and malformed heads never reach upstream. */
				int code = intercept_request_error_status(st, req.error);

				icpt_http_error(c, code,
				    code == 431   ? "Request Header Fields Too Large"
				    : code == 501 ? "Not Implemented"
				    : code == 505 ? "HTTP Version Not Supported"
				    : code == 414 ? "URI Too Long"
				                  : "Bad Request",
				    httpwire_error_str(req.error));
				return;
			}
			if (!icpt_http_request(c, &req, consumed))
				return;
			continue;
		}
		if (c->req == ICPT_REQ_BODY) {
			struct evbuffer_iovec v[8];
			int nv;
			size_t take = 0;
			enum httpwire_status st = HTTPWIRE_NEED_MORE;

			if (len == 0)
				return;
			nv = evbuffer_peek(in, -1, NULL, v, 8);
			for (int i = 0; i < nv && i < 8; i++) {
				size_t used = 0;

				st = httpwire_body_feed(&c->reqbody, v[i].iov_base, v[i].iov_len,
				    &used, c->credentialed ? icpt_req_span_cb : NULL, c);
				take += used;
				if (st != HTTPWIRE_NEED_MORE)
					break;
			}
			if (st == HTTPWIRE_INVALID || st == HTTPWIRE_TOO_LARGE) {
				icpt_http_error(c, 400, "Bad Request",
				    httpwire_error_str(httpwire_body_error(&c->reqbody)));
				return;
			}
			if (c->reqscan.found) {
				/* Refused before the bytes that complete the name leave. */
				icpt_http_error(c, 403,
				    "method override refused on a credentialed request",
				    "method_override");
				return;
			}
			if (c->subst == NULL) {
				icpt_to_upstream(c, in, take);
			} else if (c->subst_big ||
			           icpt_req_subst_out(c, in, take, st == HTTPWIRE_OK) != 0) {
				if (!c->subst_big) {
					icpt_close(c, "oom");
					return;
				}
				/* What it became is not sent: the body is cut, the leg dropped. */
				evbuffer_drain(c->sbuf, evbuffer_get_length(c->sbuf));
				icpt_http_error(c, 413, "Content Too Large", "subst_too_large");
				return;
			}
			if (st == HTTPWIRE_OK) {
				if (c->subst != NULL) {
					subst_stream_free(c->subst);
					c->subst = NULL;
				}
				c->req = ICPT_REQ_DONE;
				icpt_client_timeouts(c);
			}
			/* Backpressure: stop reading the workload while upstream is behind. */
			if (icpt_up_pending(c) >= ic->cfg.max_buffer) {
				icpt_leg_disable(c->cl, EV_READ);
				return;
			}
			continue;
		}
		return; /* REQ_DONE: the next request waits for this response */
	}
	if (c->state == ICPT_S_TUNNEL && c->up_ready) {
		struct evbuffer *in = icpt_leg_input(c->cl);

		icpt_to_upstream(c, in, evbuffer_get_length(in));
		if (icpt_up_pending(c) >= ic->cfg.max_buffer)
			icpt_leg_disable(c->cl, EV_READ);
	}
}

/* Redacted bytes toward the workload; chunked bodies are re-framed. */
static int
icpt_emit(struct icpt_conn *c)
{
	struct evbuffer *out = icpt_leg_output(c->cl);
	size_t n = evbuffer_get_length(c->tmp);

	if (n == 0)
		return 0;
	c->resp_bytes += n;
	if (c->rechunk) {
		if (evbuffer_add_printf(out, "%zx\r\n", n) < 0 ||
		    evbuffer_add_buffer(out, c->tmp) != 0 || evbuffer_add(out, "\r\n", 2) != 0)
			return -1;
		return 0;
	}
	return evbuffer_add_buffer(out, c->tmp);
}

/* One span of response payload: through the redactor into c->tmp. */
static void
icpt_body_span_cb(const uint8_t *data, size_t off, size_t len, void *arg)
{
	struct icpt_conn *c = arg;

	if (c->rs != NULL) {
		if (redact_stream_feed(c->rs, data, len, c->tmp) != 0)
			c->oom = true;
	} else if (evbuffer_add(c->tmp, data, len) != 0) {
		c->oom = true;
	}
}

/*
 * The audit lines of one answered request (HTTP/1.1 or an h2 stream): the
 * redactions, and for a credentialed one (binding set) the injection with
 * its binding, status and bytes; never a value.
 */
void
icpt_audit(struct icpt_conn *c, const char *method, const char *binding, int status, uint64_t bytes,
    uint64_t matches)
{
	struct intercept *ic = c->ic;

	if (matches > 0) {
		struct intercept_event ev = {.level = INTERCEPT_L_INFO,
		    .event = "redact",
		    .conn = c->id,
		    .host = c->host,
		    .method = method,
		    .status = status,
		    .count = matches};
		ic->ops->log(ic->arg, &ev);
	}
	if (binding != NULL) {
		struct intercept_event ev = {.level = INTERCEPT_L_INFO,
		    .event = "inject",
		    .conn = c->id,
		    .host = c->host,
		    .method = method,
		    .binding = binding,
		    .status = status,
		    .bytes = bytes,
		    .count = matches};
		ic->ops->log(ic->arg, &ev);
	}
}

/* The response ended: flush the redactor, audit, then next request or close. */
static void
icpt_resp_finish(struct icpt_conn *c, bool eof)
{
	struct intercept *ic = c->ic;
	uint64_t m = 0;

	if (c->rs != NULL) {
		if (redact_stream_flush(c->rs, c->tmp) != 0) {
			icpt_close(c, "oom");
			return;
		}
		m = redact_stream_matches(c->rs);
		/* Kept for the next response (redact_stream_reuse): no allocation per response. */
		redact_stream_free(c->rs_spare);
		c->rs_spare = c->rs;
		c->rs = NULL;
		icpt_count(ic, INTERCEPT_M_REDACTED, m);
	}
	if (icpt_emit(c) != 0) {
		icpt_close(c, "oom");
		return;
	}
	if (c->rechunk)
		icpt_leg_write(c->cl, "0\r\n\r\n", 5);
	m += c->head_matches;
	c->head_matches = 0;
	icpt_audit(c, c->method, c->credentialed ? c->binding : NULL, c->status, c->resp_bytes, m);
	c->binding = NULL; /* in the snapshot let go of here */
	vault_snap_unref(c->snap);
	c->snap = NULL;
	c->credentialed = false;
	c->resp = ICPT_RESP_IDLE;
	c->scanned = 0;
	/*
	 * Bytes the upstream sent past the end of this response answer no
	 * request: relayed, they would become the answer to the workload's
	 * next one (a response desync). The upstream connection is no longer
	 * in step; this exchange ends here.
	 */
	if (!eof && c->ul != NULL && evbuffer_get_length(icpt_leg_input(c->ul)) > 0) {
		struct intercept_event ev = {.level = INTERCEPT_L_WARN,
		    .event = "conn_reject",
		    .conn = c->id,
		    .host = c->host,
		    .reason = "upstream_unsolicited"};

		ic->ops->log(ic->arg, &ev);
		icpt_drain(c);
		return;
	}
	if (eof || !c->req_keep || !c->resp_keep || c->req != ICPT_REQ_DONE || c->c_eof) {
		/* The workload's connection ends; a leg still in step goes to the pool. */
		if (!eof && c->resp_keep && c->up_keep && c->req == ICPT_REQ_DONE)
			icpt_up_idle(c);
		icpt_drain(c);
		return;
	}
	c->req = ICPT_REQ_HEAD;
	c->method[0] = '\0';
	c->up_served = c->up_ready;
	icpt_up_idle(c);
	icpt_quiet(c);
	icpt_client_timeouts(c);
	icpt_leg_enable(c->cl, EV_READ);
	icpt_http_client(c);
}

/*
 * Whether the response declares a content coding other than identity, or
 * a gRPC message coding (grpc-encoding: its messages compressed).
 */
static bool
icpt_encoded(const struct httpwire_header *hs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct httpwire_header *h = &hs[i];

		if (!httpwire_name_eq(h->name, "content-encoding") &&
		    !httpwire_name_eq(h->name, "grpc-encoding"))
			continue;
		if (!(h->value.len == 8 &&
		        strncasecmp((const char *)h->value.ptr, "identity", 8) == 0))
			return true;
	}
	return false;
}

/* Why a final response is not relayed (see icpt_internal.h). */
const char *
icpt_response_refusal(
    bool credentialed, bool bound, int status, const struct httpwire_header *h, size_t n)
{
	/* We asked for identity; an encoded body cannot be scanned. */
	if (credentialed && icpt_encoded(h, n))
		return "encoded_credentialed_response";
	/* A bound host may return a stored secret: only in a form we can read. */
	if ((credentialed || bound) && (icpt_encoded(h, n) || status == 206))
		return "undecodable_response_from_bound_host";
	return NULL;
}

/* The redaction mode for a body with these fields (not a tunnel). */
enum redact_mode
icpt_redact_mode_of(const struct httpwire_header *hs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct httpwire_header *h = &hs[i];

		/* application/grpc, application/grpc+proto, ...: length-prefixed messages. */
		if (httpwire_name_eq(h->name, "content-type") && h->value.len >= 16 &&
		    strncasecmp((const char *)h->value.ptr, "application/grpc", 16) == 0 &&
		    (h->value.len == 16 || h->value.ptr[16] == '+' || h->value.ptr[16] == ';'))
			return REDACT_MODE_GRPC;

		if (!httpwire_name_eq(h->name, "content-type") || h->value.len < 17 ||
		    strncasecmp((const char *)h->value.ptr, "text/event-stream", 17) != 0)
			continue;
		if (h->value.len == 17 || h->value.ptr[17] == ';' || h->value.ptr[17] == ' ' ||
		    h->value.ptr[17] == '\t')
			return REDACT_MODE_SSE;
	}
	return REDACT_MODE_BODY;
}

/* How the workload reassembles this body, for the redactor's cuts. */
static enum redact_mode
icpt_redact_mode(const struct httpwire_response *r)
{
	if (r->framing == HTTPWIRE_FRAME_TUNNEL)
		return REDACT_MODE_WEBSOCKET;
	return icpt_redact_mode_of(r->headers, r->nheaders);
}

/* A complete response head: check it, redact it, send it on. */
static bool
icpt_http_response(
    struct icpt_conn *c, const struct httpwire_response *r, uint8_t *data, size_t headlen)
{
	struct intercept *ic = c->ic;
	struct redact_set *set = vault_snap_redact(c->snap);
	struct evbuffer *in = icpt_leg_input(c->ul);
	enum redact_mode mode;
	const char *why;
	uint64_t m = 0;

	c->status = r->status;
	if (r->status == 101 && !c->req_upgrade) {
		icpt_http_error(c, 502, "Bad Gateway", "unexpected_101");
		return false;
	}
	if (r->status == 101 && c->credentialed && (why = intercept_101_refusal(r)) != NULL) {
		/* Never a tunnel the redactor cannot read (compressed frames). */
		icpt_http_error(c, 502, "Bad Gateway", why);
		return false;
	}
	if (!r->interim &&
	    (why = icpt_response_refusal(c->credentialed, vault_snap_host_bound(c->snap, c->host),
	         r->status, r->headers, r->nheaders)) != NULL) {
		icpt_http_error(c, 502, "Bad Gateway", why);
		return false;
	}
	if (r->interim && ++c->interim > HTTPWIRE_MAX_INTERIM) {
		icpt_http_error(c, 502, "Bad Gateway", "too_many_interim");
		return false;
	}
	if (headlen > sizeof(ic->scratch)) {
		icpt_close(c, "head_too_large");
		return false;
	}
	/* Decided while r's views still point into `in` (drained below). */
	mode = icpt_redact_mode(r);
	memcpy(ic->scratch, data, headlen);
	if (set != NULL)
		redact_buf(set, ic->scratch, headlen, &m);
	if (m > 0)
		icpt_count(ic, INTERCEPT_M_REDACTED, m);
	c->head_matches += m;
	if (!r->interim && !c->req_keep && r->keep_alive && r->framing != HTTPWIRE_FRAME_TUNNEL &&
	    headlen >= 4 && memcmp(ic->scratch + headlen - 4, "\r\n\r\n", 4) == 0) {
		/*
		 * The workload asked to close, the upstream (asked for nothing)
		 * did not say it will: the close is ours, and is said (RFC 9112
		 * 9.6), or a client would send its next request into it.
		 */
		icpt_leg_write(c->cl, ic->scratch, headlen - 2);
		icpt_leg_write(c->cl, "Connection: close\r\n\r\n", 21);
		c->resp_bytes += 19;
	} else {
		icpt_leg_write(c->cl, ic->scratch, headlen);
	}
	c->resp_bytes += headlen;
	evbuffer_drain(in, headlen);
	c->scanned = 0;
	if (r->interim)
		return true;
	c->resp_keep = r->keep_alive;
	c->rechunk = r->framing == HTTPWIRE_FRAME_CHUNKED;
	if (set != NULL) {
		if (c->rs_spare != NULL && redact_stream_reuse(c->rs_spare, set, mode) == 0) {
			c->rs = c->rs_spare;
			c->rs_spare = NULL;
		} else {
			c->rs = redact_stream_new_mode(set, mode);
		}
		if (c->rs == NULL) {
			icpt_close(c, "oom");
			return false;
		}
	}
	if (r->framing == HTTPWIRE_FRAME_TUNNEL) {
		/* WebSocket: raw both ways from here; toward the workload still redacted. */
		if (!icpt_enter(c, ICPT_S_TUNNEL))
			return false;
		icpt_leg_timeouts(c->cl, ic->cfg.idle_timeout_s, ic->cfg.idle_timeout_s);
		icpt_leg_enable(c->cl, EV_READ);
		icpt_http_client(c);
		return true;
	}
	c->resp = ICPT_RESP_BODY;
	if (!icpt_body_begin(&c->respbody, r->framing, r->content_length, 0)) {
		icpt_resp_finish(c, false);
		return c->state == ICPT_S_HTTP;
	}
	return true;
}

/* Upstream -> workload, per the response state. */
void
icpt_http_upstream(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	while (c->state == ICPT_S_HTTP || c->state == ICPT_S_TUNNEL) {
		struct evbuffer *in = icpt_leg_input(c->ul);
		size_t len = evbuffer_get_length(in);

		/* Backpressure: the workload is behind; its write callback resumes us. */
		if (evbuffer_get_length(icpt_leg_output(c->cl)) >= ic->cfg.max_buffer) {
			icpt_leg_disable(c->ul, EV_READ);
			return;
		}
		if (c->state == ICPT_S_TUNNEL) {
			if (len > 0) {
				if (c->rs != NULL) {
					redact_stream_read_begin(c->rs);
					if (redact_stream_feed_evbuffer(c->rs, in, c->tmp) != 0) {
						icpt_close(c, "oom");
						return;
					}
					/* Nothing of this read goes: a frame the scan cannot read. */
					if (redact_stream_unreadable(c->rs)) {
						icpt_close(c, "websocket_frame_unreadable");
						return;
					}
					if (redact_stream_read_end(c->rs, c->tmp) != 0) {
						icpt_close(c, "oom");
						return;
					}
				} else {
					evbuffer_add_buffer(c->tmp, in);
				}
				c->rechunk = false;
				if (icpt_emit(c) != 0) {
					icpt_close(c, "oom");
					return;
				}
			}
			if (c->u_eof) {
				if (c->rs != NULL && redact_stream_flush(c->rs, c->tmp) == 0)
					(void)icpt_emit(c);
				icpt_drain(c);
			}
			return;
		}
		if (c->resp == ICPT_RESP_IDLE) {
			if (len > 0) {
				icpt_close(c, "upstream_unsolicited");
				return;
			}
			/* Upstream ended a keep-alive connection: end ours too. */
			if (c->u_eof)
				icpt_drain(c);
			return;
		}
		if (c->resp == ICPT_RESP_HEAD) {
			struct httpwire_response r;
			enum httpwire_status st;
			size_t consumed = 0, n;
			uint8_t *data;

			if (len == 0 || !icpt_find_head(in, &c->scanned)) {
				if (len > HTTPWIRE_MAX_HEAD_BYTES) {
					icpt_http_error(
					    c, 502, "Bad Gateway", "response_head_too_large");
					return;
				}
				if (c->u_eof)
					icpt_http_error(c, 502, "Bad Gateway", "upstream_closed");
				return;
			}
			n = len > HTTPWIRE_MAX_HEAD_BYTES + 1 ? HTTPWIRE_MAX_HEAD_BYTES + 1 : len;
			data = evbuffer_pullup(in, (ssize_t)n);
			if (data == NULL) {
				icpt_close(c, "oom");
				return;
			}
			st = httpwire_parse_response(
			    data, n, c->req_is_head, &r, ic->hdrs, HTTPWIRE_MAX_HEADERS, &consumed);
			if (st == HTTPWIRE_NEED_MORE) {
				c->scanned = len;
				if (c->u_eof)
					icpt_http_error(c, 502, "Bad Gateway", "upstream_closed");
				return;
			}
			if (st != HTTPWIRE_OK) {
				icpt_http_error(c, 502, "Bad Gateway", httpwire_error_str(r.error));
				return;
			}
			if (!icpt_http_response(c, &r, data, consumed))
				return;
			continue;
		}
		/* RESP_BODY */
		{
			struct evbuffer_iovec v[8];
			int nv;
			size_t take = 0;
			enum httpwire_status st = HTTPWIRE_NEED_MORE;

			nv = len > 0 ? evbuffer_peek(in, -1, NULL, v, 8) : 0;
			/* A framed body is released at this read's end, not per chunk. */
			if (c->rs != NULL)
				redact_stream_read_begin(c->rs);
			for (int i = 0; i < nv && i < 8; i++) {
				size_t used = 0;

				st = httpwire_body_feed(&c->respbody, v[i].iov_base, v[i].iov_len,
				    &used, icpt_body_span_cb, c);
				take += used;
				if (st != HTTPWIRE_NEED_MORE)
					break;
			}
			if (c->rs != NULL && st == HTTPWIRE_NEED_MORE &&
			    redact_stream_read_end(c->rs, c->tmp) != 0)
				c->oom = true;
			if (st == HTTPWIRE_INVALID || st == HTTPWIRE_TOO_LARGE) {
				icpt_close(c, "response_body_invalid");
				return;
			}
			evbuffer_drain(in, take);
			/* At the end, the rest goes out with the held bytes, in one chunk. */
			if (c->oom || (st != HTTPWIRE_OK && icpt_emit(c) != 0)) {
				icpt_close(c, "oom");
				return;
			}
			if (st == HTTPWIRE_OK) {
				icpt_resp_finish(c, false);
				continue;
			}
			if (c->u_eof && evbuffer_get_length(in) == 0) {
				if (httpwire_body_eof(&c->respbody) == HTTPWIRE_OK)
					icpt_resp_finish(c, true);
				else
					icpt_close(c, "upstream_truncated");
				return;
			}
			if (take == 0 || len == take)
				return;
		}
	}
}

/* Request bytes from the workload. */
static void
icpt_c_read_cb(struct icpt_leg *l, void *arg)
{
	struct icpt_conn *c = arg;

	(void)l;
	icpt_http_client(c);
}

/* The workload caught up: resume reading upstream. */
static void
icpt_c_write_cb(struct icpt_leg *l, void *arg)
{
	struct icpt_conn *c = arg;

	(void)l;
	/* The workload caught up: read upstream again. */
	if ((c->state == ICPT_S_HTTP || c->state == ICPT_S_TUNNEL) && c->ul != NULL &&
	    c->up_ready && !c->u_eof) {
		icpt_leg_enable(c->ul, EV_READ);
		icpt_http_upstream(c);
	}
}

/*
 * The workload's TLS handshake failed. A client that refuses the sandbox
 * CA's leaf (an alert such as unknown_ca or bad_certificate: a pinned or
 * misconfigured client) is logged once at info level, so that an operator
 * sees it. An alert of ours (no_application_protocol, illegal_parameter
 * from the ClientHello callback) is in the socket already: the connection
 * drains and lingers, so that a close with the client's bytes unread does
 * not reset it away before the client reads it.
 */
static void
icpt_c_handshake_failed(struct icpt_conn *c, struct icpt_leg *l)
{
	const char *alert = NULL;
	unsigned long e;

	if (c->state == ICPT_S_DRAIN) {
		icpt_close(c, NULL);
		return;
	}
	while ((e = icpt_leg_error(l)) != 0) {
		int r = ERR_GET_REASON(e);

		if (alert == NULL && ERR_GET_LIB(e) == ERR_LIB_SSL && r > SSL_AD_REASON_OFFSET)
			alert = tlspeek_cert_alert_str((unsigned)(r - SSL_AD_REASON_OFFSET));
	}
	if (alert != NULL)
		icpt_log(c, INTERCEPT_L_INFO, "client_rejected_ca", alert, 0);
	icpt_log(c, INTERCEPT_L_DEBUG, "conn_close", "client_handshake_failed", 0);
	icpt_drain(c);
}

/* Workload EOF, error or timeout (handshake completion is ignored). */
static void
icpt_c_event_cb(struct icpt_leg *l, short what, void *arg)
{
	struct icpt_conn *c = arg;
	SSL *ssl;

	if (what & BEV_EVENT_CONNECTED) {
		(void)icpt_h2_switch(c); /* TLS handshake with the workload done */
		return;
	}
	if (what & BEV_EVENT_EOF) {
		c->c_eof = true;
		icpt_leg_disable(l, EV_READ);
		if (c->state == ICPT_S_HTTP && c->resp != ICPT_RESP_IDLE)
			return; /* let the response finish, then close */
		icpt_close(c, "client_eof");
		return;
	}
	if (what & BEV_EVENT_TIMEOUT) {
		icpt_close(c, c->req == ICPT_REQ_HEAD ? "head_timeout" : "idle_timeout");
		return;
	}
	if (c->terminated && (ssl = icpt_leg_ssl(l)) != NULL && !SSL_is_init_finished(ssl)) {
		icpt_c_handshake_failed(c, l);
		return;
	}
	icpt_close(c, "client_error");
}

/*
 * The buffers a request and its answer pass through: made when the relay
 * starts, given back by a connection quiet between requests (icpt_trim_cb)
 * and made again by its next request. False when out of memory.
 */
bool
icpt_http_buffers(struct icpt_conn *c)
{
	if (c->toup == NULL && (c->toup = evbuffer_new()) == NULL)
		return false;
	return c->tmp != NULL || (c->tmp = evbuffer_new()) != NULL;
}

/* Start the HTTP relay on the workload leg (plain or TLS filter). */
void
icpt_http_start(struct icpt_conn *c)
{
	struct intercept *ic = c->ic;

	if (!icpt_http_buffers(c)) {
		icpt_close(c, "oom");
		return;
	}
	c->req = ICPT_REQ_HEAD;
	c->resp = ICPT_RESP_IDLE;
	icpt_leg_setcb(c->cl, icpt_c_read_cb, icpt_c_write_cb, icpt_c_event_cb, c);
	/* Bound what is buffered from the workload while a response is pending. */
	icpt_leg_read_high(c->cl, ic->cfg.max_buffer);
	/*
	 * Back-pressure: a slow reader leaves the leg's output unwritten (TLS
	 * records are made only as the socket takes them), which stops reading
	 * the upstream (icpt_http_upstream) instead of buffering the response.
	 */
	icpt_client_timeouts(c);
	icpt_leg_enable(c->cl, EV_READ | EV_WRITE);
}
