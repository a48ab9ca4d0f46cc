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

#include "icptfix.h"
#include "relayharness.h"

#define SECRET "sk-live-CANARY1-relay-0123456789abcdef"

/*
 * b1: X-Api-Key on GET and POST of /v1/ (plain HTTP, so that the relay
 * runs without TLS); /other is on the bound host but matches no binding.
 */
static struct vault_snap *
mksnap(void)
{
	static const char js[] =
	    "{\"credentials\":[{\"name\":\"c1\",\"source\":{\"value\":\"x\"}}],"
	    "\"bindings\":[{\"name\":\"b1\",\"match\":{\"schemes\":[\"http\"],"
	    "\"hosts\":[\"api.allowed.test\"],\"paths\":[\"/v1/*\"],\"methods\":[\"GET\","
	    "\"POST\"]},\"auth\":{\"type\":\"apiKey\",\"name\":\"X-Api-Key\","
	    "\"credential\":\"c1\"}}]}";

	return icptfix_snap(js, (const uint8_t *)SECRET, strlen(SECRET));
}

static struct relay *
h_new(void)
{
	return relay_new(mksnap());
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
	struct relay *h = h_new();

	h->script[0] = resp;
	h->script[1] = NEXT_RESP;
	h->nscript = 2;
	relay_send(h, req);
	assert_true(relay_pump(h, first_seen));
	relay_send(h, NEXT_REQ);
	if (!relay_pump(h, "next-body"))
		fail_msg(
		    "no answer to the request after %.40s -> %.40s (log: %s)", req, resp, h->log);
	assert_false(h->weof);
	assert_int_equal(h->accepts, 1);
	assert_int_equal(h->heads, 2);
	relay_free(h);
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
	struct relay *h = h_new();

	(void)state;
	relay_send(h, "CONNECT api.allowed.test:443 HTTP/1.1\r\n" HOST "\r\n");
	assert_true(relay_pump(h, NULL));
	assert_non_null(strstr(h->wrx, "HTTP/1.1 405 "));
	assert_int_equal(h->urxlen, 0);
	relay_free(h);
}

/* ---------------------------------------------------------------- item 3 */

/* A credentialed request that must be refused: 403, nothing upstream, no secret. */
static void
refused(const char *req, const char *reason)
{
	struct relay *h = h_new();

	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nserved";
	h->nscript = 1;
	relay_send(h, req);
	assert_true(relay_pump(h, NULL));
	if (strstr(h->wrx, "HTTP/1.1 403 ") != h->wrx)
		fail_msg("not refused: %.60s (got %.60s)", req, h->wrx);
	assert_null(strstr(h->wrx, "served"));
	assert_null(strstr(h->wrx, SECRET));
	assert_null(strstr(h->urx, "_method"));
	assert_null(strstr(h->urx, "DELETE"));
	if (strstr(h->log, reason) == NULL)
		fail_msg("reason %s not logged: %s", reason, h->log);
	relay_free(h);
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
	struct relay *h = h_new();
	char req[1024];

	/* The upstream never answers: the refusal is ours. */
	snprintf(req, sizeof(req), "POST /v1/x HTTP/1.1\r\n" HOST "%sContent-Length: %zu\r\n\r\n%s",
	    ctype, strlen(part1) + strlen(part2), part1);
	relay_send(h, req);
	/* The first part goes upstream; nothing comes back yet. */
	if (relay_pump_n(h, "HTTP/1.1", 20))
		fail_msg("answered early: %s%s: %.60s (log %s)", part1, part2, h->wrx, h->log);
	relay_send(h, part2);
	assert_true(relay_pump(h, NULL));
	if (strstr(h->wrx, "HTTP/1.1 403 ") != h->wrx)
		fail_msg("not refused: %s%s (got %.60s)", part1, part2, h->wrx);
	assert_null(strstr(h->urx, "_method"));
	assert_null(strstr(h->wrx, SECRET));
	assert_non_null(strstr(h->log, "method_override"));
	relay_free(h);
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
	struct relay *h = h_new();

	(void)state;
	relay_send(h, "POST /v1/x HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"
	              "6\r\na=1&_m\r\n3;x=y\r\neth\r\n");
	if (relay_pump_n(h, "HTTP/1.1", 20))
		fail_msg("answered early: %.60s (log %s)", h->wrx, h->log);
	relay_send(h, "3\r\nod=\r\n6\r\nDELETE\r\n0\r\n\r\n");
	assert_true(relay_pump(h, NULL));
	assert_ptr_equal(strstr(h->wrx, "HTTP/1.1 403 "), h->wrx);
	assert_null(strstr(h->urx, "od="));
	assert_null(strstr(h->urx, "DELETE"));
	assert_non_null(strstr(h->log, "method_override"));
	relay_free(h);
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
		struct relay *h = h_new();
		char req[1024];

		h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nserved";
		h->nscript = 1;
		if (ok[i][1][0] != '\0')
			snprintf(req, sizeof(req), "%sContent-Length: %zu\r\n\r\n%s", ok[i][0],
			    strlen(ok[i][1]), ok[i][1]);
		else
			snprintf(req, sizeof(req), "%s\r\n", ok[i][0]);
		relay_send(h, req);
		if (!relay_pump(h, "served"))
			fail_msg("refused: %.70s (log %s)", req, h->log);
		relay_free(h);
	}
}

/* The workload's own credentials never ride along with the injected one. */
static void
test_workload_credentials_stripped(void **state)
{
	struct relay *h = h_new();

	(void)state;
	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nserved";
	h->nscript = 1;
	relay_send(h, "GET /v1/x HTTP/1.1\r\n" HOST "Authorization: Bearer attacker-1\r\n"
	              "Proxy-Authorization: Basic attacker-2\r\nCookie: session=attacker-3\r\n"
	              "x-api-key: attacker-4\r\nX-API-KEY: attacker-5\r\nApi-Key: attacker-6\r\n"
	              "X-Auth-Token: attacker-7\r\nX-Access-Token: attacker-8\r\n"
	              "X-Goog-Api-Key: attacker-9\r\nX-Keep: kept\r\n"
	              "X-Forwarded-Host: attacker-10.test\r\nForwarded: host=attacker-11.test\r\n"
	              "X-Forwarded-For: 127.0.0.1\r\nX-Real-IP: 127.0.0.1\r\n\r\n");
	assert_true(relay_pump(h, "served"));
	assert_null(strstr(h->urx, "attacker"));
	assert_null(strstr(h->urx, "127.0.0.1"));
	assert_int_equal(relay_count(h->urx, "X-Api-Key: " SECRET "\r\n"), 1);
	assert_non_null(strstr(h->urx, "X-Keep: kept\r\n"));
	relay_free(h);

	/* Not credentialed: relayed as sent. */
	h = h_new();
	h->script[0] = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nserved";
	h->nscript = 1;
	relay_send(h, "GET /other HTTP/1.1\r\n" HOST "Cookie: session=mine\r\n\r\n");
	assert_true(relay_pump(h, "served"));
	assert_non_null(strstr(h->urx, "Cookie: session=mine\r\n"));
	assert_null(strstr(h->urx, SECRET));
	relay_free(h);
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
	struct relay *h = h_new();

	(void)state;
	h->script[0] = WS_101("");
	h->nscript = 1;
	relay_send(h, WS_REQ("/v1/ws", "websocket",
	                  "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
	                  "sec-websocket-extensions: x-webkit-deflate-frame\r\n"));
	assert_true(relay_pump(h, "101 Switching"));
	assert_non_null(strstr(h->urx, "X-Api-Key: " SECRET "\r\n"));
	assert_null(strcasestr(h->urx, "sec-websocket-extensions"));
	assert_null(strstr(h->urx, "deflate"));
	relay_free(h);

	/* The server negotiates compression anyway: 502, never its 101. */
	h = h_new();
	h->script[0] = WS_101("Sec-WebSocket-Extensions: permessage-deflate\r\n");
	h->nscript = 1;
	relay_send(
	    h, WS_REQ("/v1/ws", "websocket", "Sec-WebSocket-Extensions: permessage-deflate\r\n"));
	assert_true(relay_pump(h, NULL));
	assert_ptr_equal(strstr(h->wrx, "HTTP/1.1 502 "), h->wrx);
	assert_null(strstr(h->wrx, "101"));
	relay_free(h);

	/*
	 * The server sends a compressed (RSV1) or a masked frame, neither
	 * negotiated nor allowed to it: no scan can read it, so nothing of
	 * it reaches the workload and the tunnel ends.
	 */
	{
		static const char *const frames[] = {
		    "\xc1\x05hello",                 /* FIN, RSV1, text */
		    "\x81\x85\x01\x02\x03\x04ignmk", /* FIN, text, masked */
		};

		for (size_t i = 0; i < sizeof(frames) / sizeof(frames[0]); i++) {
			static char resp[512];

			snprintf(resp, sizeof(resp), "%s%s", WS_101(""), frames[i]);
			h = h_new();
			h->script[0] = resp;
			h->nscript = 1;
			relay_send(h, WS_REQ("/v1/ws", "websocket", ""));
			assert_true(relay_pump(h, NULL));
			assert_null(strstr(h->wrx, frames[i] + 2));
			assert_non_null(strstr(h->log, "websocket_frame_unreadable"));
			relay_free(h);
		}
	}

	/* A 101 to another protocol than the one asked for: 502. */
	h = h_new();
	h->script[0] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n"
	               "Connection: Upgrade\r\n\r\n";
	h->nscript = 1;
	relay_send(h, WS_REQ("/v1/ws", "websocket", ""));
	assert_true(relay_pump(h, NULL));
	assert_ptr_equal(strstr(h->wrx, "HTTP/1.1 502 "), h->wrx);
	relay_free(h);
}

static void
upgrade_refused(const char *req)
{
	struct relay *h = h_new();

	h->script[0] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n"
	               "Connection: Upgrade\r\n\r\n";
	h->nscript = 1;
	relay_send(h, req);
	assert_true(relay_pump(h, NULL));
	if (strstr(h->wrx, "HTTP/1.1 403 ") != h->wrx)
		fail_msg("not refused: %.80s (got %.60s)", req, h->wrx);
	assert_null(strstr(h->wrx, "101"));
	assert_int_equal(h->urxlen, 0);
	assert_non_null(strstr(h->log, "upgrade_refused"));
	relay_free(h);
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
	/* Not only credentialed requests: an h2c connection's streams would pass no check. */
	upgrade_refused("GET /other HTTP/1.1\r\n" HOST "Upgrade: h2c\r\nConnection: Upgrade, "
	                "HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n");
	upgrade_refused(
	    "GET /other HTTP/1.1\r\n" HOST "Upgrade: TLS/1.2\r\nConnection: Upgrade\r\n\r\n");
}

/* A 101 nobody asked for is a 502 (kept from before). */
static void
test_unexpected_101(void **state)
{
	struct relay *h = h_new();

	(void)state;
	h->script[0] = WS_101("");
	h->nscript = 1;
	relay_send(h, "GET /v1/x HTTP/1.1\r\n" HOST "\r\n");
	assert_true(relay_pump(h, NULL));
	assert_ptr_equal(strstr(h->wrx, "HTTP/1.1 502 "), h->wrx);
	assert_non_null(strstr(h->log, "unexpected_101"));
	relay_free(h);
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

/*
 * The descriptor budget (issue 19 item 5): an upstream socket past it is
 * never asked for, and the request is answered 502 (upstream_fd_budget);
 * within it, what a connection holds is counted while it holds it and no
 * longer once it closes (its leg pooled, the pool's own count).
 */
static void
test_upstream_fd_budget(void **state)
{
	struct relay *h = h_new();

	(void)state;
	h->ic->fd_budget = 1; /* the workload's socket only */
	h->script[0] = NEXT_RESP;
	h->nscript = 1;
	relay_send(h, NEXT_REQ);
	if (!relay_pump(h, "502 Bad Gateway"))
		fail_msg("no 502 past the budget (log: %s)", h->log);
	assert_non_null(strstr(h->log, "upstream_fd_budget"));
	/* One line says why, not a second naming another reason. */
	assert_int_equal(relay_count(h->log, "upstream_fd_budget"), 1);
	assert_null(strstr(h->log, "upstream_socket_unavailable"));
	assert_int_equal(h->accepts, 0);
	assert_int_equal(h->ic->nupfd, 0);
	relay_free(h);

	h = h_new();
	h->ic->fd_budget = 2;
	h->script[0] = NEXT_RESP;
	h->script[1] = NEXT_RESP;
	h->nscript = 2;
	relay_send(h, NEXT_REQ);
	assert_true(relay_pump(h, "next-body"));
	assert_int_equal(h->ic->nupfd, 1); /* its leg, kept between requests */
	h->wrxlen = 0;
	relay_send(h, NEXT_REQ);
	assert_true(relay_pump(h, "next-body"));
	assert_int_equal(h->accepts, 1);
	assert_null(strstr(h->log, "upstream_fd_budget"));
	assert_int_equal(shutdown(h->w, SHUT_WR), 0);
	assert_true(relay_pump(h, NULL)); /* the connection ends */
	for (int i = 0; i < 20 && h->ic->nconns > 0; i++)
		event_base_loop(h->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	assert_int_equal(h->ic->nconns, 0);
	assert_int_equal(h->ic->nupfd, 0);
	assert_true(h->ic->npool <= 1);
	relay_free(h);
}

/*
 * The head kept to send again when a served leg closes under a request is
 * copied into a buffer the connection keeps (one allocation for all its
 * requests, not one each), and wiped once the answer begins: it may carry
 * the credential.
 */
static void
test_replay_buffer_kept_and_wiped(void **state)
{
	struct relay *h = h_new();
	struct icpt_conn *c = h->ic->conns;
	uint8_t *buf;

	(void)state;
	h->script[0] = NEXT_RESP;
	h->script[1] = NEXT_RESP;
	h->script[2] = NEXT_RESP;
	h->nscript = 3;
	relay_send(h, NEXT_REQ);
	assert_true(relay_pump(h, "next-body"));
	assert_null(c->replay); /* a fresh leg: nothing to send again */
	for (int i = 0; i < 2; i++) {
		h->wrxlen = 0;
		h->wrx[0] = '\0';
		relay_send(h, NEXT_REQ); /* on the served leg: kept until the answer */
		assert_true(relay_pump(h, "next-body"));
		assert_non_null(c->replay);
		assert_int_equal(c->replay_len, 0);
		assert_true(c->replay_cap >= strlen(NEXT_REQ));
		for (size_t j = 0; j < c->replay_cap; j++)
			assert_int_equal(c->replay[j], 0);
		if (i == 0)
			buf = c->replay;
		else
			assert_ptr_equal(c->replay, buf); /* the same buffer, no new one */
	}
	relay_free(h);
}

/* One request answered, with one more answer scripted: the connection then goes quiet. */
static void
t_one_answered(struct relay *h)
{
	h->script[0] = NEXT_RESP;
	h->script[1] = NEXT_RESP;
	h->nscript = 2;
	relay_send(h, NEXT_REQ);
	assert_true(relay_pump(h, "next-body"));
	assert_true(h->ic->conns->quiet);
}

/* The quiet sweep, as if c had been quiet long enough. */
static void
t_sweep(struct relay *h, struct icpt_conn *c)
{
	c->quiet_at.tv_sec -= 2 * (ICPT_TRIM_MS / 1000 + 1);
	event_active(h->ic->ev_trim, EV_TIMEOUT, 0);
	event_base_loop(h->base, EVLOOP_NONBLOCK);
	assert_true(c->trimmed);
}

/*
 * A connection quiet between requests gives back its request buffers with
 * its record buffers, its workload leg sleeps and its deadline event goes
 * (memory per idle connection), and its next request makes them again and
 * is answered as the first was. The sweep is driven here: the quiet time
 * is moved back, not waited for.
 */
static void
test_quiet_gives_buffers_back(void **state)
{
	struct relay *h = h_new();
	struct icpt_conn *c = h->ic->conns;

	(void)state;
	t_one_answered(h);
	assert_non_null(c->toup);
	assert_non_null(c->tmp);
	assert_non_null(c->ev_deadline);
	assert_false(icpt_leg_asleep(c->cl));
	assert_non_null(h->ic->ev_trim);
	t_sweep(h, c);
	assert_null(c->toup);
	assert_null(c->tmp);
	assert_null(c->ev_deadline);
	assert_true(icpt_leg_asleep(c->cl));

	h->wrxlen = 0;
	h->wrx[0] = '\0';
	relay_send(h, NEXT_REQ);
	assert_true(relay_pump(h, "next-body"));
	assert_non_null(strstr(h->wrx, "HTTP/1.1 200 OK\r\n"));
	assert_false(c->trimmed);
	assert_non_null(c->toup);
	assert_non_null(c->tmp);
	assert_false(icpt_leg_asleep(c->cl));
	relay_free(h);
}

/*
 * A quiet connection's deadline event is freed; when the next head finds
 * no memory to make it again, the connection closes there: nothing of the
 * head is parsed or forwarded (it went on with its workload leg gone).
 */
static bool fail_event_alloc; /* libevent's allocations of a struct event's size fail */

static void *
t_ev_malloc(size_t n)
{
	return fail_event_alloc && n == event_get_struct_event_size() ? NULL : malloc(n);
}

static void *
t_ev_realloc(void *p, size_t n)
{
	return realloc(p, n);
}

static void
test_deadline_oom_after_quiet(void **state)
{
	struct relay *h = h_new();
	struct icpt_conn *c = h->ic->conns;
	size_t heads;

	(void)state;
	t_one_answered(h);
	t_sweep(h, c);
	assert_null(c->ev_deadline);
	/* Wake the leg first: the one event allocation left to fail is the deadline's. */
	(void)icpt_leg_input(c->cl);
	assert_false(icpt_leg_asleep(c->cl));
	heads = h->heads;
	h->wrxlen = 0;
	h->wrx[0] = '\0';
	fail_event_alloc = true;
	relay_send(h, NEXT_REQ);
	assert_true(relay_pump(h, NULL)); /* the workload sees its connection end */
	fail_event_alloc = false;
	assert_true(h->weof);
	assert_int_equal(h->ic->nconns, 0);
	assert_int_equal(h->heads, heads);
	assert_null(strstr(h->wrx, "HTTP/1.1 200"));
	assert_non_null(strstr(h->log, "oom"));
	relay_free(h);
}

/*
 * Closed connections are freed by the intercept's one reaper event, never
 * before a callback that was already due when they closed (it may still
 * name them), nor while a socket request is out.
 */
static struct intercept *reap_ic;
static struct icpt_conn *reap_b;
static int reap_b_seen = -1;

static bool
reap_listed(const struct icpt_conn *c)
{
	for (const struct icpt_conn *d = reap_ic->dead; d != NULL; d = d->next)
		if (d == c)
			return true;
	return false;
}

static void
reap_probe_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what, (void)arg;
	reap_b_seen = reap_listed(reap_b);
}

/* As icpt_close leaves a connection: on the dead list, its reaping asked for. */
static void
reap_close(struct icpt_conn *c)
{
	c->ic = reap_ic;
	c->state = ICPT_S_CLOSED;
	c->prev = NULL;
	c->next = reap_ic->dead;
	if (c->next != NULL)
		c->next->prev = c;
	reap_ic->dead = c;
	icpt_reap(c);
}

static void
test_reap_after_due_callbacks(void **state)
{
	struct event_base *base = event_base_new();
	struct intercept *ic = calloc(1, sizeof(*ic));
	struct icpt_conn *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct icpt_conn *s = calloc(1, sizeof(*s));
	struct event *probe;

	(void)state;
	assert_non_null(base);
	assert_non_null(ic);
	assert_true(a != NULL && b != NULL && s != NULL);
	ic->base = base;
	ic->ev_reap = event_new(base, -1, 0, icpt_reap_cb, ic);
	probe = event_new(base, -1, 0, reap_probe_cb, NULL);
	assert_true(ic->ev_reap != NULL && probe != NULL);
	reap_ic = ic;
	reap_b = b;

	reap_close(a);                      /* the reaper is due */
	event_active(probe, EV_TIMEOUT, 0); /* due when b closes: it may name b */
	reap_close(b);
	s->sockreqs = 1; /* a socket request out: its answer reaps it */
	reap_close(s);
	assert_true(event_base_loop(base, EVLOOP_NONBLOCK) >= 0);
	assert_int_equal(reap_b_seen, 1); /* b was still there for the probe */
	assert_true(ic->dead == s && s->next == NULL && s->prev == NULL);
	assert_false(ic->reap_due);

	s->sockreqs = 0; /* as icpt_sock_orphaned on the answer */
	icpt_reap(s);
	assert_true(event_base_loop(base, EVLOOP_NONBLOCK) >= 0);
	assert_null(ic->dead);
	assert_false(ic->reap_due);

	event_free(probe);
	event_free(ic->ev_reap);
	free(ic);
	event_base_free(base);
}

/* ---------------------------------------------------------------- framed bodies */

/* The secret's two parts, cut where an upstream's chunk ends. */
#define FIRST "sk-live-CANARY1-relay-01234"
#define REST "56789abcdef"

/*
 * A credentialed GET answered with ctype and the chunked body, all in one
 * write of the upstream's (one read): what the workload got.
 */
static char *
framed_answer(const char *ctype, const char *chunks)
{
	static char resp[1024];
	struct relay *h = relay_new(mksnap());
	char *got;

	snprintf(resp, sizeof(resp),
	    "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n%s", ctype,
	    chunks);
	h->script[0] = resp;
	h->nscript = 1;
	relay_send(h, "GET /v1/echo HTTP/1.1\r\n" HOST "\r\n");
	assert_true(relay_pump(h, "\r\n0\r\n\r\n"));
	assert_non_null(strstr(h->urx, "X-Api-Key: " SECRET "\r\n"));
	got = strdup(h->wrx);
	assert_non_null(got);
	relay_free(h);
	return got;
}

/*
 * Two events, each with one part of the reflected secret, in two chunks of
 * one read: the event stream's text is scanned across events, and the
 * first event waits for the read's end, so the secret is masked whole.
 */
static void
test_event_stream_secret_across_chunks(void **state)
{
	char *w;

	(void)state;
	/* "data: " FIRST "\n\n" is 35 (0x23) bytes, "data: " REST "\n\n" 19 (0x13). */
	w = framed_answer("text/event-stream",
	    "23\r\ndata: " FIRST "\n\n\r\n13\r\ndata: " REST "\n\n\r\n0\r\n\r\n");
	if (strstr(w, "sk-live") != NULL || strstr(w, REST) != NULL)
		fail_msg("a part of the secret reached the workload:\n%s", w);
	free(w);
}

/*
 * A body labelled gRPC that is not gRPC framing (JSON) is held as a body
 * is: the secret cut by a chunk boundary is masked whole.
 */
static void
test_grpc_label_on_other_body(void **state)
{
	char *w;

	(void)state;
	/* {"k":" FIRST is 33 (0x21) bytes, REST "} 13 (0xd). */
	w = framed_answer(
	    "application/grpc", "21\r\n{\"k\":\"" FIRST "\r\nd\r\n" REST "\"}\r\n0\r\n\r\n");
	if (strstr(w, "sk-live") != NULL || strstr(w, REST) != NULL)
		fail_msg("a part of the secret reached the workload:\n%s", w);
	free(w);
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
	    cmocka_unit_test(test_upstream_fd_budget),
	    cmocka_unit_test(test_reap_after_due_callbacks),
	    cmocka_unit_test(test_event_stream_secret_across_chunks),
	    cmocka_unit_test(test_grpc_label_on_other_body),
	    cmocka_unit_test(test_quiet_gives_buffers_back),
	    cmocka_unit_test(test_deadline_oom_after_quiet),
	    cmocka_unit_test(test_replay_buffer_kept_and_wiped),
	};

	event_set_mem_functions(t_ev_malloc, t_ev_realloc, free);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
