/*
 * Unit tests of the interceptor's HTTP relay (vault/icpt_http.c) driven
 * through the real code: a workload connection is built as icpt_accept_cb
 * builds a plain one (the original destination is an in-process upstream
 * on loopback), requests are written on the workload's end of a socket
 * pair, and a scripted upstream answers each request head. Covers the
 * bodiless responses of a keep-alive connection (issue 15 item 1), what a
 * credentialed request may not carry (item 3) and upgrades (item 4).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "policy/binding.h"
#include "vault/icpt_internal.h"
#include "vault/intercept.h"
#include "vault/secret.h"
#include "vault/snap.h"

#define SECRET "sk-live-CANARY1-relay-0123456789abcdef"
#define RX_MAX 65536
#define MAX_SCRIPT 8
#define PUMP_TURNS 400 /* loop turns of at most 10 ms: a hang ends the test, it does not time it */

struct h {
	struct event_base *base;
	struct intercept *ic;
	struct vault_snap *snap;
	int w;   /* the workload's end */
	int lfd; /* the upstream's listener */
	int ufd; /* the accepted upstream connection */
	int accepts;
	struct sockaddr_in up;
	char urx[RX_MAX]; /* what the upstream received */
	size_t urxlen;
	char wrx[RX_MAX]; /* what the workload received */
	size_t wrxlen;
	bool weof;
	const char *script[MAX_SCRIPT]; /* one answer per request head upstream sees */
	size_t nscript, heads;
	char log[4096]; /* event:reason of every log record */
};

struct sockjob {
	int fd;
	intercept_socket_cb cb;
	void *arg;
};

static bool
f_sni_allowed(void *arg, const char *canon)
{
	(void)arg;
	return strcmp(canon, "api.allowed.test") == 0;
}

static bool
f_dst_ok(void *arg, const char *canon, int family, const uint8_t *addr, uint16_t port)
{
	(void)arg, (void)canon, (void)family, (void)addr, (void)port;
	return true;
}

static void
f_sock_later(evutil_socket_t fd, short what, void *arg)
{
	struct sockjob *j = arg;

	(void)fd, (void)what;
	j->cb(j->fd, j->fd < 0 ? EIO : 0, j->arg);
	free(j);
}

/* The worker's marked socket: a plain one, delivered on a later loop turn. */
static int
f_get_socket(void *arg, int family, intercept_socket_cb cb, void *cbarg)
{
	struct h *h = arg;
	struct sockjob *j = calloc(1, sizeof(*j));
	struct timeval tv = {0, 0};

	assert_non_null(j);
	j->fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	j->cb = cb;
	j->arg = cbarg;
	assert_int_equal(event_base_once(h->base, -1, EV_TIMEOUT, f_sock_later, j, &tv), 0);
	return 0;
}

static struct vault_snap *
f_snapshot(void *arg)
{
	struct h *h = arg;

	return vault_snap_ref(h->snap);
}

static void
f_count(void *arg, enum intercept_metric m, uint64_t n)
{
	(void)arg, (void)m, (void)n;
}

static void
f_log(void *arg, const struct intercept_event *ev)
{
	struct h *h = arg;
	size_t n = strlen(h->log);

	snprintf(h->log + n, sizeof(h->log) - n, "%s:%s ", ev->event,
	    ev->reason != NULL ? ev->reason : "-");
}

static const struct intercept_ops f_ops = {
    .sni_allowed = f_sni_allowed,
    .dst_ok = f_dst_ok,
    .get_upstream_socket = f_get_socket,
    .snapshot = f_snapshot,
    .count = f_count,
    .log = f_log,
};

/*
 * b1: X-Api-Key on GET and POST of /v1/ (plain HTTP, so that the relay
 * runs without TLS); /other is on the bound host but matches no binding.
 */
static struct vault_snap *
mksnap(void)
{
	static const char js[] =
	    "{\"credentials\":[{\"name\":\"c1\",\"source\":{\"type\":\"inline\",\"value\":\"" SECRET
	    "\"}}],\"bindings\":[{\"name\":\"b1\",\"match\":{\"schemes\":[\"http\"],"
	    "\"hosts\":[\"api.allowed.test\"],\"paths\":[\"/v1/*\"],\"methods\":[\"GET\","
	    "\"POST\"]},\"auth\":{\"type\":\"apiKey\",\"name\":\"X-Api-Key\","
	    "\"credential\":\"c1\"}}]}";
	struct policy_err pe;
	struct binding_set *bs = binding_set_from_json(js, strlen(js), &pe);
	struct secret *s = secret_new((const uint8_t *)SECRET, strlen(SECRET));
	struct vault_snap *snap;
	char err[256];

	assert_non_null(bs);
	assert_non_null(s);
	snap = vault_snap_new(bs, &s, 1, 1, err, sizeof(err));
	assert_non_null(snap);
	binding_set_free(bs);
	secret_unref(s);
	return snap;
}

/* A plain workload connection to 203.0.113.10:80, built as icpt_accept_cb does. */
static struct h *
h_new(void)
{
	struct h *h = calloc(1, sizeof(*h));
	struct intercept *ic = calloc(1, sizeof(*ic));
	struct icpt_conn *c = calloc(1, sizeof(*c));
	socklen_t len = sizeof(h->up);
	int sv[2];

	assert_non_null(h);
	assert_non_null(ic);
	assert_non_null(c);
	h->base = event_base_new();
	assert_non_null(h->base);
	h->snap = mksnap();
	h->ufd = -1;
	h->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_true(h->lfd >= 0);
	h->up.sin_family = AF_INET;
	h->up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(h->lfd, (struct sockaddr *)&h->up, sizeof(h->up)), 0);
	assert_int_equal(listen(h->lfd, 4), 0);
	assert_int_equal(getsockname(h->lfd, (struct sockaddr *)&h->up, &len), 0);

	ic->base = h->base;
	ic->ops = &f_ops;
	ic->arg = h;
	ic->cfg.tls_port = 15443;
	ic->cfg.plain_port = 15080;
	ic->cfg.max_conns = 16;
	ic->cfg.max_buffer = INTERCEPT_MAX_BUFFER;
	ic->cfg.head_timeout_s = INTERCEPT_MAX_HEAD_S;
	ic->cfg.idle_timeout_s = ICPT_DEFAULT_IDLE_S;
	ic->cfg.connect_timeout_s = INTERCEPT_MAX_CONNECT_S;
	h->ic = ic;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	h->w = sv[1];
	c->ic = ic;
	c->id = ++ic->next_id;
	c->tls = false;
	c->state = ICPT_S_HELLO;
	c->ev_free = event_new(ic->base, -1, 0, icpt_free_cb, c);
	c->craw = bufferevent_socket_new(ic->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
	assert_non_null(c->ev_free);
	assert_non_null(c->craw);
	c->cbev = c->craw;
	ic->conns = c;
	ic->nconns = 1;
	memcpy(&c->dst, &h->up, sizeof(h->up));
	c->dstlen = sizeof(h->up);
	c->family = AF_INET;
	assert_int_equal(inet_pton(AF_INET, "203.0.113.10", c->addr), 1);
	c->port = 80;
	assert_true(icpt_set_state(c, ICPT_S_HTTP));
	icpt_http_start(c);
	return h;
}

static void
h_free(struct h *h)
{
	intercept_free(h->ic);
	/* Deferred frees of closed connections run on this last turn. */
	event_base_loop(h->base, EVLOOP_NONBLOCK);
	vault_snap_unref(h->snap);
	close(h->w);
	close(h->lfd);
	if (h->ufd >= 0)
		close(h->ufd);
	event_base_free(h->base);
	free(h);
}

static size_t
count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* The upstream answers every new request head with the next scripted response. */
static void
up_serve(struct h *h)
{
	size_t heads;

	if (h->ufd < 0) {
		int fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
			return;
		h->ufd = fd;
		h->accepts++;
	}
	for (;;) {
		ssize_t n;

		if (h->urxlen + 1 >= sizeof(h->urx))
			break;
		n = read(h->ufd, h->urx + h->urxlen, sizeof(h->urx) - 1 - h->urxlen);
		if (n <= 0)
			break;
		h->urxlen += (size_t)n;
		h->urx[h->urxlen] = '\0';
	}
	heads = count(h->urx, "\r\n\r\n");
	while (h->heads < heads) {
		const char *r = h->heads < h->nscript ? h->script[h->heads] : NULL;

		h->heads++;
		if (r != NULL)
			assert_int_equal(write(h->ufd, r, strlen(r)), (ssize_t)strlen(r));
	}
}

static void
w_read(struct h *h)
{
	for (;;) {
		ssize_t n;

		if (h->wrxlen + 1 >= sizeof(h->wrx))
			return;
		n = read(h->w, h->wrx + h->wrxlen, sizeof(h->wrx) - 1 - h->wrxlen);
		if (n == 0)
			h->weof = true;
		if (n <= 0)
			return;
		h->wrxlen += (size_t)n;
		h->wrx[h->wrxlen] = '\0';
	}
}

/* Run the loop until the workload has received want (or EOF), at most turns times. */
static bool
pump_n(struct h *h, const char *want, int turns)
{
	for (int i = 0; i < turns; i++) {
		struct pollfd p[2] = {{.fd = h->w, .events = POLLIN},
		    {.fd = h->ufd >= 0 ? h->ufd : h->lfd, .events = POLLIN}};

		event_base_loop(h->base, EVLOOP_NONBLOCK);
		up_serve(h);
		w_read(h);
		if (want != NULL && strstr(h->wrx, want) != NULL)
			return true;
		if (h->weof)
			return want == NULL;
		(void)poll(p, 2, 10);
	}
	return false;
}

static bool
pump(struct h *h, const char *want)
{
	return pump_n(h, want, PUMP_TURNS);
}

static void
send_w(struct h *h, const char *s)
{
	assert_int_equal(write(h->w, s, strlen(s)), (ssize_t)strlen(s));
}

/* ---------------------------------------------------------------- item 1 */

#define HOST "Host: api.allowed.test\r\n"
#define NEXT_REQ "GET /next HTTP/1.1\r\n" HOST "\r\n"
#define NEXT_RESP "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nnext-body"

/*
 * Every bodiless response (RFC 9112 6.3) ends the exchange: the next
 * request on the same workload connection is answered, over the same
 * upstream connection.
 */
static void
bodiless(const char *req, const char *resp, const char *first_seen)
{
	struct h *h = h_new();

	h->script[0] = resp;
	h->script[1] = NEXT_RESP;
	h->nscript = 2;
	send_w(h, req);
	assert_true(pump(h, first_seen));
	send_w(h, NEXT_REQ);
	if (!pump(h, "next-body"))
		fail_msg(
		    "no answer to the request after %.40s -> %.40s (log: %s)", req, resp, h->log);
	assert_false(h->weof);
	assert_int_equal(h->accepts, 1);
	assert_int_equal(h->heads, 2);
	h_free(h);
}

static void
test_bodiless_keepalive(void **state)
{
	(void)state;
	/* The reported bug: 200 with Content-Length: 0. */
	bodiless("GET /a HTTP/1.1\r\n" HOST "\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	    "200 OK");
	/* HEAD: the Content-Length describes the GET body that is not sent. */
	bodiless("HEAD /a HTTP/1.1\r\n" HOST "\r\n",
	    "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n", "200 OK");
	bodiless("HEAD /a HTTP/1.1\r\n" HOST "\r\n",
	    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "200 OK");
	bodiless("GET /a HTTP/1.1\r\n" HOST "\r\n", "HTTP/1.1 204 No Content\r\n\r\n", "204");
	bodiless("GET /a HTTP/1.1\r\n" HOST "\r\n",
	    "HTTP/1.1 304 Not Modified\r\nContent-Length: 77\r\n\r\n", "304");
	/* A request with an empty body. */
	bodiless("POST /a HTTP/1.1\r\n" HOST "Content-Length: 0\r\n\r\n",
	    "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "200 OK");
	/* Interim responses, then a bodiless final one. */
	bodiless("POST /a HTTP/1.1\r\n" HOST "Expect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
	    "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "200 OK");
	bodiless("GET /a HTTP/1.1\r\n" HOST "\r\n",
	    "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
	    "204");
	bodiless("GET /a HTTP/1.1\r\n" HOST "\r\n",
	    "HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	    "\r\n\r\nok");
	/* Credentialed: the same with the redactor in the path. */
	bodiless("GET /v1/a HTTP/1.1\r\n" HOST "\r\n",
	    "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "200 OK");
}

/* CONNECT is never relayed (no response to it exists): 405 and the end. */
static void
test_connect_refused(void **state)
{
	struct h *h = h_new();

	(void)state;
	send_w(h, "CONNECT api.allowed.test:443 HTTP/1.1\r\n" HOST "\r\n");
	assert_true(pump(h, NULL));
	assert_non_null(strstr(h->wrx, "HTTP/1.1 405 "));
	assert_int_equal(h->urxlen, 0);
	h_free(h);
}

/* ---------------------------------------------------------------- item 3 */

/* A credentialed request that must be refused: 403, nothing upstream, no secret. */
static void
refused(const char *req, const char *reason)
{
	struct h *h = h_new();

	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nserved";
	h->nscript = 1;
	send_w(h, req);
	assert_true(pump(h, NULL));
	if (strstr(h->wrx, "HTTP/1.1 403 ") != h->wrx)
		fail_msg("not refused: %.60s (got %.60s)", req, h->wrx);
	assert_null(strstr(h->wrx, "served"));
	assert_null(strstr(h->wrx, SECRET));
	assert_null(strstr(h->urx, "_method"));
	assert_null(strstr(h->urx, "DELETE"));
	if (strstr(h->log, reason) == NULL)
		fail_msg("reason %s not logged: %s", reason, h->log);
	h_free(h);
}

static void
test_method_override_refused(void **state)
{
	(void)state;
	refused("GET /v1/x HTTP/1.1\r\n" HOST "X-HTTP-Method-Override: DELETE\r\n\r\n",
	    "method_override");
	refused("GET /v1/x HTTP/1.1\r\n" HOST "x-http-method: DELETE\r\n\r\n", "method_override");
	refused("POST /v1/x HTTP/1.1\r\n" HOST
	        "X-METHOD-OVERRIDE: DELETE\r\nContent-Length: 0\r\n\r\n",
	    "method_override");
	refused("GET /v1/x HTTP/1.1\r\n" HOST "X-Original-URL: /admin/delete\r\n\r\n",
	    "target_override");
	refused("GET /v1/x HTTP/1.1\r\n" HOST "X-Rewrite-URL: /admin\r\n\r\n", "target_override");
	refused("POST /v1/x HTTP/1.1\r\n" HOST
	        "Content-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
	    "request_body_encoded");
	refused("GET /v1/x?_method=DELETE HTTP/1.1\r\n" HOST "\r\n", "method_override");
	refused("GET /v1/x?a=1&%5Fmethod=DELETE HTTP/1.1\r\n" HOST "\r\n", "method_override");
	refused("GET /v1/x?a=1;_METHOD=DELETE HTTP/1.1\r\n" HOST "\r\n", "method_override");
	refused("GET /v1/x?_%6d%65thod HTTP/1.1\r\n" HOST "\r\n", "method_override");
}

/* The override hides in the body of a POST: refused, the name never leaves. */
static void
body_refused(const char *ctype, const char *part1, const char *part2)
{
	struct h *h = h_new();
	char req[1024];

	/* The upstream never answers: the refusal is ours. */
	snprintf(req, sizeof(req), "POST /v1/x HTTP/1.1\r\n" HOST "%sContent-Length: %zu\r\n\r\n%s",
	    ctype, strlen(part1) + strlen(part2), part1);
	send_w(h, req);
	/* The first part goes upstream; nothing comes back yet. */
	if (pump_n(h, "HTTP/1.1", 20))
		fail_msg("answered early: %s%s: %.60s (log %s)", part1, part2, h->wrx, h->log);
	send_w(h, part2);
	assert_true(pump(h, NULL));
	if (strstr(h->wrx, "HTTP/1.1 403 ") != h->wrx)
		fail_msg("not refused: %s%s (got %.60s)", part1, part2, h->wrx);
	assert_null(strstr(h->urx, "_method"));
	assert_null(strstr(h->wrx, SECRET));
	assert_non_null(strstr(h->log, "method_override"));
	h_free(h);
}

static void
test_body_override_refused(void **state)
{
	(void)state;
	body_refused(
	    "Content-Type: application/x-www-form-urlencoded\r\n", "a=1&_met", "hod=DELETE");
	body_refused("", "_meth", "od=DELETE&b=2");
	body_refused(
	    "Content-Type: application/x-www-form-urlencoded\r\n", "a=1&%5f", "Method=delete");
	body_refused("Content-Type: application/json\r\n", "{\"a\":1,\"_meth", "od\":\"DELETE\"}");
	body_refused("Content-Type: application/json\r\n", "{\"\\u005f", "method\":\"DELETE\"}");
	body_refused("Content-Type: multipart/form-data; boundary=XX\r\n",
	    "--XX\r\nContent-Disposition: form-data; name=\"_me",
	    "thod\"\r\n\r\nDELETE\r\n--XX--\r\n");
}

/* Chunk framing cannot split the name past the scan: it reads the payload. */
static void
test_chunked_body_override_refused(void **state)
{
	struct h *h = h_new();

	(void)state;
	send_w(h, "POST /v1/x HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"
	          "6\r\na=1&_m\r\n3;x=y\r\neth\r\n");
	if (pump_n(h, "HTTP/1.1", 20))
		fail_msg("answered early: %.60s (log %s)", h->wrx, h->log);
	send_w(h, "3\r\nod=\r\n6\r\nDELETE\r\n0\r\n\r\n");
	assert_true(pump(h, NULL));
	assert_ptr_equal(strstr(h->wrx, "HTTP/1.1 403 "), h->wrx);
	assert_null(strstr(h->urx, "od="));
	assert_null(strstr(h->urx, "DELETE"));
	assert_non_null(strstr(h->log, "method_override"));
	h_free(h);
}

/* What looks like an override but is not one is relayed. */
static void
test_override_lookalikes_pass(void **state)
{
	static const char *const ok[][2] = {
	    {"POST /v1/x HTTP/1.1\r\n" HOST "Content-Type: application/x-www-form-urlencoded\r\n",
	        "payment_method=pm_1&x_method_id=2&a=_method"},
	    {"GET /v1/x?payment_method=pm_1&b=_method HTTP/1.1\r\n" HOST, ""},
	    {"POST /v1/x HTTP/1.1\r\n" HOST "Content-Type: application/json\r\n",
	        "{\"payment_method\":\"x_method\",\"b\":\"x_method\"}"},
	    /* Not credentialed: not the vault's business. */
	    {"GET /other?_method=DELETE HTTP/1.1\r\n" HOST "X-HTTP-Method-Override: DELETE\r\n",
	        ""},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct h *h = h_new();
		char req[1024];

		h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nserved";
		h->nscript = 1;
		if (ok[i][1][0] != '\0')
			snprintf(req, sizeof(req), "%sContent-Length: %zu\r\n\r\n%s", ok[i][0],
			    strlen(ok[i][1]), ok[i][1]);
		else
			snprintf(req, sizeof(req), "%s\r\n", ok[i][0]);
		send_w(h, req);
		if (!pump(h, "served"))
			fail_msg("refused: %.70s (log %s)", req, h->log);
		h_free(h);
	}
}

/* The workload's own credentials never ride along with the injected one. */
static void
test_workload_credentials_stripped(void **state)
{
	struct h *h = h_new();

	(void)state;
	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nserved";
	h->nscript = 1;
	send_w(h, "GET /v1/x HTTP/1.1\r\n" HOST "Authorization: Bearer attacker-1\r\n"
	          "Proxy-Authorization: Basic attacker-2\r\nCookie: session=attacker-3\r\n"
	          "x-api-key: attacker-4\r\nX-API-KEY: attacker-5\r\nApi-Key: attacker-6\r\n"
	          "X-Auth-Token: attacker-7\r\nX-Access-Token: attacker-8\r\n"
	          "X-Goog-Api-Key: attacker-9\r\nX-Keep: kept\r\n"
	          "X-Forwarded-Host: attacker-10.test\r\nForwarded: host=attacker-11.test\r\n"
	          "X-Forwarded-For: 127.0.0.1\r\nX-Real-IP: 127.0.0.1\r\n\r\n");
	assert_true(pump(h, "served"));
	assert_null(strstr(h->urx, "attacker"));
	assert_null(strstr(h->urx, "127.0.0.1"));
	assert_int_equal(count(h->urx, "X-Api-Key: " SECRET "\r\n"), 1);
	assert_non_null(strstr(h->urx, "X-Keep: kept\r\n"));
	h_free(h);

	/* Not credentialed: relayed as sent. */
	h = h_new();
	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nserved";
	h->nscript = 1;
	send_w(h, "GET /other HTTP/1.1\r\n" HOST "Cookie: session=mine\r\n\r\n");
	assert_true(pump(h, "served"));
	assert_non_null(strstr(h->urx, "Cookie: session=mine\r\n"));
	assert_null(strstr(h->urx, SECRET));
	h_free(h);
}

/* ---------------------------------------------------------------- item 4 */

#define WS_REQ(path, upgrade, extra)                                                               \
	"GET " path " HTTP/1.1\r\n" HOST "Upgrade: " upgrade "\r\nConnection: Upgrade\r\n"         \
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" extra       \
	"\r\n"
#define WS_101(extra)                                                                              \
	"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"        \
	"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" extra "\r\n"

static void
test_upgrade_websocket_without_compression(void **state)
{
	struct h *h = h_new();

	(void)state;
	h->script[0] = WS_101("");
	h->nscript = 1;
	send_w(h, WS_REQ("/v1/ws", "websocket",
	              "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
	              "sec-websocket-extensions: x-webkit-deflate-frame\r\n"));
	assert_true(pump(h, "101 Switching"));
	assert_non_null(strstr(h->urx, "X-Api-Key: " SECRET "\r\n"));
	assert_null(strcasestr(h->urx, "sec-websocket-extensions"));
	assert_null(strstr(h->urx, "deflate"));
	h_free(h);

	/* The server negotiates compression anyway: 502, never its 101. */
	h = h_new();
	h->script[0] = WS_101("Sec-WebSocket-Extensions: permessage-deflate\r\n");
	h->nscript = 1;
	send_w(
	    h, WS_REQ("/v1/ws", "websocket", "Sec-WebSocket-Extensions: permessage-deflate\r\n"));
	assert_true(pump(h, NULL));
	assert_ptr_equal(strstr(h->wrx, "HTTP/1.1 502 "), h->wrx);
	assert_null(strstr(h->wrx, "101"));
	h_free(h);

	/* A 101 to another protocol than the one asked for: 502. */
	h = h_new();
	h->script[0] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n"
	               "Connection: Upgrade\r\n\r\n";
	h->nscript = 1;
	send_w(h, WS_REQ("/v1/ws", "websocket", ""));
	assert_true(pump(h, NULL));
	assert_ptr_equal(strstr(h->wrx, "HTTP/1.1 502 "), h->wrx);
	h_free(h);
}

static void
upgrade_refused(const char *req)
{
	struct h *h = h_new();

	h->script[0] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n"
	               "Connection: Upgrade\r\n\r\n";
	h->nscript = 1;
	send_w(h, req);
	assert_true(pump(h, NULL));
	if (strstr(h->wrx, "HTTP/1.1 403 ") != h->wrx)
		fail_msg("not refused: %.80s (got %.60s)", req, h->wrx);
	assert_null(strstr(h->wrx, "101"));
	assert_int_equal(h->urxlen, 0);
	assert_non_null(strstr(h->log, "upgrade_refused"));
	h_free(h);
}

static void
test_upgrade_other_refused(void **state)
{
	(void)state;
	upgrade_refused("GET /v1/x HTTP/1.1\r\n" HOST "Upgrade: h2c\r\nConnection: Upgrade, "
	                "HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n");
	upgrade_refused(
	    "GET /v1/x HTTP/1.1\r\n" HOST "Upgrade: TLS/1.2\r\nConnection: Upgrade\r\n\r\n");
	upgrade_refused(WS_REQ("/v1/ws", "websocket, h2c", ""));
	upgrade_refused(WS_REQ("/v1/ws", "h2c", "Upgrade: websocket\r\n"));
	upgrade_refused(WS_REQ("/v1/ws", "websocket/13", ""));
	upgrade_refused("POST /v1/ws HTTP/1.1\r\n" HOST "Upgrade: websocket\r\n"
	                "Connection: Upgrade\r\nContent-Length: 0\r\n\r\n");
}

/* A 101 nobody asked for is a 502 (kept from before). */
static void
test_unexpected_101(void **state)
{
	struct h *h = h_new();

	(void)state;
	h->script[0] = WS_101("");
	h->nscript = 1;
	send_w(h, "GET /v1/x HTTP/1.1\r\n" HOST "\r\n");
	assert_true(pump(h, NULL));
	assert_ptr_equal(strstr(h->wrx, "HTTP/1.1 502 "), h->wrx);
	assert_non_null(strstr(h->log, "unexpected_101"));
	h_free(h);
}

/* The connection state machine refuses every transition it does not list. */
static void
test_state_machine(void **state)
{
	static const struct {
		enum icpt_state from, to;
		bool ok;
	} t[] = {
	    {ICPT_S_PEEK, ICPT_S_HELLO, true},
	    {ICPT_S_PEEK, ICPT_S_HTTP, true},
	    {ICPT_S_PEEK, ICPT_S_SPLICE, true},
	    {ICPT_S_HELLO, ICPT_S_SPLICE, true},
	    {ICPT_S_HELLO, ICPT_S_HTTP, true},
	    {ICPT_S_HTTP, ICPT_S_TUNNEL, true},
	    {ICPT_S_TUNNEL, ICPT_S_DRAIN, true},
	    {ICPT_S_HTTP, ICPT_S_CLOSED, true},
	    /* A second ClientHello, terminating a spliced or tunnelled stream, reopening. */
	    {ICPT_S_HELLO, ICPT_S_HELLO, false},
	    {ICPT_S_HTTP, ICPT_S_HELLO, false},
	    {ICPT_S_SPLICE, ICPT_S_HTTP, false},
	    {ICPT_S_TUNNEL, ICPT_S_HTTP, false},
	    {ICPT_S_SPLICE, ICPT_S_TUNNEL, false},
	    {ICPT_S_HTTP, ICPT_S_SPLICE, false},
	    {ICPT_S_DRAIN, ICPT_S_HTTP, false},
	    {ICPT_S_CLOSED, ICPT_S_DRAIN, false},
	    {ICPT_S_CLOSED, ICPT_S_HTTP, false},
	    {ICPT_S_PEEK, (enum icpt_state)99, false},
	};
	struct icpt_conn c;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		memset(&c, 0, sizeof(c));
		c.state = t[i].from;
		assert_int_equal(icpt_set_state(&c, t[i].to), t[i].ok);
		assert_int_equal(c.state, t[i].ok ? t[i].to : t[i].from);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_state_machine),
	    cmocka_unit_test(test_bodiless_keepalive),
	    cmocka_unit_test(test_connect_refused),
	    cmocka_unit_test(test_method_override_refused),
	    cmocka_unit_test(test_body_override_refused),
	    cmocka_unit_test(test_chunked_body_override_refused),
	    cmocka_unit_test(test_override_lookalikes_pass),
	    cmocka_unit_test(test_workload_credentials_stripped),
	    cmocka_unit_test(test_upgrade_websocket_without_compression),
	    cmocka_unit_test(test_upgrade_other_refused),
	    cmocka_unit_test(test_unexpected_101),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
