/*
 * Unit tests of the HTTP/2 relay toward an HTTP/2 upstream
 * (vault/icpt_h2.c), driven through the real code: the workload is an
 * nghttp2 client on one end of a socket pair (the relay's plain leg on the
 * other, the connection set up as terminated with h2 agreed), the upstream
 * an nghttp2 server over TLS in this process, whose certificate for
 * api.allowed.test the intercept's client context trusts. Both run in the
 * test's loop (no thread); every wait is bounded in loop turns.
 *
 * Covers: a stream the workload ends while its request body waits for
 * the upstream's window, after an early answer (its body must go no
 * further, and nothing may read the freed stream); a credentialed
 * request's fields sent never-indexed; an upstream response head past
 * HTTPWIRE_MAX_HEADERS fields refused, as the HTTP/1.1 parser refuses it.
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
#include <event2/event.h>
#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vault/httpwire.h"
#include "vault/icpt_internal.h"
#include "vault/intercept.h"
#include "vault/secret.h"
#include "vault/snap.h"

#include "icptfix.h"

#define SECRET "sk-live-CANARY1-h2up-0123456789abcdef"
#define HOSTNAME "api.allowed.test"
#define TURNS 400 /* loop turns of at most 2 ms: a hang ends the test, it does not time it */

/* What the upstream does with a request. */
enum up_mode {
	UP_EARLY, /* answers at the request's head (END_STREAM), reads no body, its window 16 */
	UP_OK,    /* answers 200 at the request's end */
	UP_MANY,  /* answers with :status and 110 fields, content-encoding the last */
	UP_SUBST, /* as UP_OK, the binding substituting a 16 KiB secret in bodies */
};

struct t {
	struct event_base *base;
	struct intercept *ic;
	struct vault_snap *snap;
	X509 *cert;
	EVP_PKEY *key;
	char log[4096];
	/* the upstream */
	enum up_mode mode;
	int lfd, ufd;
	SSL_CTX *sctx;
	SSL *ussl;
	bool uhs;
	nghttp2_session *us;
	int32_t usid;
	size_t ubody;     /* request body bytes received */
	uint32_t urst;    /* the error code of a reset of usid, + 1 (0: none) */
	int key_flags;    /* flags x-api-key came with, -1: it did not come */
	bool open_window; /* the test asks for a WINDOW_UPDATE of usid */
	/* the workload */
	int w;
	nghttp2_session *ws;
	char status[4];
	bool resp_end;
	uint8_t body[1000];
	size_t boff, blen;
};

/* ---------------------------------------------------------------- fixture */

static struct vault_snap *
mksnap(void)
{
	static const char js[] =
	    "{\"credentials\":[{\"name\":\"c1\",\"source\":{\"value\":\"x\"}}],"
	    "\"bindings\":[{\"name\":\"b1\",\"match\":{\"schemes\":[\"https\"],"
	    "\"hosts\":[\"" HOSTNAME "\"],\"paths\":[\"/v1/*\"],\"methods\":[\"GET\","
	    "\"POST\"]},\"auth\":{\"type\":\"apiKey\",\"name\":\"X-Api-Key\","
	    "\"credential\":\"c1\"}}]}";

	return icptfix_snap(js, (const uint8_t *)SECRET, strlen(SECRET));
}

/* b1 substitutes PH in the bodies of /v1/ with a 16 KiB secret (c1). */
#define PH "PH_C1_PLACEHOLDER"
static struct vault_snap *
mksnap_subst(void)
{
	static const char js[] =
	    "{\"credentials\":[{\"name\":\"c1\",\"source\":{\"value\":\"x\"}}],"
	    "\"bindings\":[{\"name\":\"b1\",\"match\":{\"schemes\":[\"https\"],"
	    "\"hosts\":[\"" HOSTNAME "\"],\"paths\":[\"/v1/*\"],\"methods\":[\"POST\"]},"
	    "\"auth\":{\"type\":\"passthrough\",\"substitutions\":[{\"credential\":\"c1\","
	    "\"placeholder\":\"" PH "\",\"in\":[\"body\"]}]}}]}";
	static uint8_t v[SECRET_MAX_BYTES];

	memset(v, 'k', sizeof(v));
	return icptfix_snap(js, v, sizeof(v));
}

static int
f_get_socket(void *arg, int family, intercept_socket_cb cb, void *cbarg)
{
	return icptfix_socket(((struct t *)arg)->base, family, cb, cbarg);
}

static struct vault_snap *
f_snapshot(void *arg)
{
	return vault_snap_ref(((struct t *)arg)->snap);
}

static void
f_count(void *arg, enum intercept_metric m, uint64_t n)
{
	(void)arg, (void)m, (void)n;
}

static void
f_log(void *arg, const struct intercept_event *ev)
{
	struct t *t = arg;
	size_t n = strlen(t->log);

	snprintf(t->log + n, sizeof(t->log) - n, "%s:%s ", ev->event,
	    ev->reason != NULL ? ev->reason : "-");
}

static const struct intercept_ops f_ops = {
    .sni_allowed = icptfix_sni_allowed,
    .dst_ok = icptfix_dst_ok,
    .get_upstream_socket = f_get_socket,
    .snapshot = f_snapshot,
    .count = f_count,
    .log = f_log,
};

/* ---------------------------------------------------------------- upstream */

static int
up_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
    unsigned inlen, void *arg)
{
	(void)ssl, (void)arg;
	return nghttp2_select_next_protocol((unsigned char **)out, outlen, in, inlen) == 1
	           ? SSL_TLSEXT_ERR_OK
	           : SSL_TLSEXT_ERR_ALERT_FATAL;
}

static void
up_answer(struct t *t, int32_t id)
{
	static nghttp2_nv ok[] = {{(uint8_t *)":status", (uint8_t *)"200", 7, 3, 0}};
	static char names[110][8];
	nghttp2_nv many[111];

	if (t->mode != UP_MANY) {
		assert_int_equal(nghttp2_submit_response(t->us, id, ok, 1, NULL), 0);
		return;
	}
	many[0] = ok[0];
	for (int i = 0; i < 109; i++) {
		snprintf(names[i], sizeof(names[i]), "x-f%03d", i);
		many[i + 1] =
		    (nghttp2_nv){(uint8_t *)names[i], (uint8_t *)"v", strlen(names[i]), 1, 0};
	}
	many[110] = (nghttp2_nv){
	    (uint8_t *)"content-encoding", (uint8_t *)"gzip", 16, 4, NGHTTP2_NV_FLAG_NONE};
	assert_int_equal(nghttp2_submit_response(t->us, id, many, 111, NULL), 0);
}

static int
up_header_cb(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
    const uint8_t *value, size_t vl, uint8_t flags, void *arg)
{
	struct t *t = arg;

	(void)s, (void)f, (void)value, (void)vl;
	if (nl == 9 && memcmp(name, "x-api-key", 9) == 0)
		t->key_flags = flags;
	return 0;
}

static int
up_frame_cb(nghttp2_session *s, const nghttp2_frame *f, void *arg)
{
	struct t *t = arg;
	bool end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;

	(void)s;
	if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
		t->usid = f->hd.stream_id;
		if (t->mode == UP_EARLY || end)
			up_answer(t, f->hd.stream_id);
	} else if (f->hd.type == NGHTTP2_DATA && end && t->mode != UP_EARLY) {
		up_answer(t, f->hd.stream_id);
	}
	return 0;
}

static int
up_data_cb(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *p, size_t n, void *arg)
{
	(void)s, (void)flags, (void)id, (void)p;
	((struct t *)arg)->ubody += n;
	return 0;
}

static int
up_close_cb(nghttp2_session *s, int32_t id, uint32_t code, void *arg)
{
	struct t *t = arg;

	(void)s;
	if (id == t->usid && code != NGHTTP2_NO_ERROR)
		t->urst = code + 1;
	return 0;
}

static void
up_start_session(struct t *t)
{
	nghttp2_session_callbacks *cb;
	nghttp2_option *opt;
	nghttp2_settings_entry early[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 16}};

	assert_int_equal(nghttp2_session_callbacks_new(&cb), 0);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, up_frame_cb);
	nghttp2_session_callbacks_set_on_header_callback(cb, up_header_cb);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, up_data_cb);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, up_close_cb);
	assert_int_equal(nghttp2_option_new(&opt), 0);
	/* The early answerer reads no body: its stream window opens only when the test says. */
	nghttp2_option_set_no_auto_window_update(opt, t->mode == UP_EARLY);
	assert_int_equal(nghttp2_session_server_new2(&t->us, cb, t, opt), 0);
	nghttp2_session_callbacks_del(cb);
	nghttp2_option_del(opt);
	assert_int_equal(
	    nghttp2_submit_settings(t->us, NGHTTP2_FLAG_NONE, early, t->mode == UP_EARLY ? 1 : 0),
	    0);
}

/* The upstream's turn: accept, handshake, read and answer, write. */
static void
up_serve(struct t *t)
{
	uint8_t buf[16384];
	const uint8_t *out;
	ssize_t n;
	int r;

	if (t->ufd < 0 &&
	    (t->ufd = accept4(t->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		t->ussl = SSL_new(t->sctx);
		assert_non_null(t->ussl);
		SSL_set_fd(t->ussl, t->ufd);
		SSL_set_accept_state(t->ussl);
	}
	if (t->ussl == NULL)
		return;
	if (!t->uhs) {
		if (SSL_do_handshake(t->ussl) != 1)
			return;
		t->uhs = true;
		up_start_session(t);
	}
	while ((r = SSL_read(t->ussl, buf, sizeof(buf))) > 0)
		assert_int_equal(nghttp2_session_mem_recv(t->us, buf, (size_t)r), r);
	if (t->open_window && t->usid > 0) {
		t->open_window = false;
		assert_int_equal(
		    nghttp2_submit_window_update(t->us, NGHTTP2_FLAG_NONE, t->usid, 4096), 0);
	}
	while ((n = nghttp2_session_mem_send(t->us, &out)) > 0)
		assert_int_equal(SSL_write(t->ussl, out, (int)n), (int)n);
}

/* ---------------------------------------------------------------- workload */

static ssize_t
w_send_cb(nghttp2_session *s, const uint8_t *d, size_t n, int flags, void *arg)
{
	struct t *t = arg;
	ssize_t r = write(t->w, d, n);

	(void)s, (void)flags;
	if (r < 0)
		return errno == EAGAIN ? NGHTTP2_ERR_WOULDBLOCK : NGHTTP2_ERR_CALLBACK_FAILURE;
	return r;
}

static int
w_header_cb(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
    const uint8_t *value, size_t vl, uint8_t flags, void *arg)
{
	struct t *t = arg;

	(void)s, (void)f, (void)flags;
	if (nl == 7 && memcmp(name, ":status", 7) == 0 && vl == 3)
		memcpy(t->status, value, 3);
	return 0;
}

static int
w_frame_cb(nghttp2_session *s, const nghttp2_frame *f, void *arg)
{
	(void)s;
	if (f->hd.stream_id == 1 && (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0)
		((struct t *)arg)->resp_end = true;
	return 0;
}

static ssize_t
w_body_cb(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
    nghttp2_data_source *src, void *arg)
{
	struct t *t = arg;
	size_t n = t->blen - t->boff;

	(void)s, (void)id, (void)src, (void)flags;
	if (n == 0)
		return NGHTTP2_ERR_DEFERRED; /* the body never ends: the test ends the stream */
	if (n > len)
		n = len;
	memcpy(buf, t->body + t->boff, n);
	t->boff += n;
	return (ssize_t)n;
}

/* One turn of everything: egressd's loop, the workload, the upstream. */
static void
turn(struct t *t)
{
	uint8_t buf[16384];
	ssize_t n;

	event_base_loop(t->base, EVLOOP_NONBLOCK);
	while ((n = read(t->w, buf, sizeof(buf))) > 0)
		assert_int_equal(nghttp2_session_mem_recv(t->ws, buf, (size_t)n), n);
	assert_int_equal(nghttp2_session_send(t->ws), 0);
	up_serve(t);
	(void)poll(NULL, 0, 2);
}

static void
turns(struct t *t, int n)
{
	for (int i = 0; i < n; i++)
		turn(t);
}

/* The intercept, the upstream's listener and a terminated h2 connection to HOSTNAME. */
static struct t *
t_new(enum up_mode mode)
{
	struct t *t = calloc(1, sizeof(*t));
	struct intercept *ic;
	struct icpt_conn *c = calloc(1, sizeof(*c));
	struct sockaddr_in up = {.sin_family = AF_INET};
	socklen_t len = sizeof(up);
	nghttp2_session_callbacks *cb;
	int sv[2];

	assert_non_null(t);
	assert_non_null(c);
	t->mode = mode;
	t->ufd = -1;
	t->key_flags = -1;
	t->base = event_base_new();
	assert_non_null(t->base);
	t->snap = mode == UP_SUBST ? mksnap_subst() : mksnap();
	icptfix_cert(HOSTNAME, &t->cert, &t->key);
	t->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(t->lfd, (struct sockaddr *)&up, sizeof(up)), 0);
	assert_int_equal(listen(t->lfd, 4), 0);
	assert_int_equal(getsockname(t->lfd, (struct sockaddr *)&up, &len), 0);
	t->sctx = SSL_CTX_new(TLS_server_method());
	assert_non_null(t->sctx);
	assert_int_equal(SSL_CTX_use_certificate(t->sctx, t->cert), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey(t->sctx, t->key), 1);
	SSL_CTX_set_alpn_select_cb(t->sctx, up_alpn, NULL);

	ic = icptfix_intercept(t->base, &f_ops, t, t->cert);
	ic->cfg.keepalive_timeout_s = 60;
	t->ic = ic;

	/* The connection, as the TLS listener leaves a terminated one that agreed on h2. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	t->w = sv[1];
	c->ic = ic;
	c->host = icpt_nohost;
	c->id = ++ic->next_id;
	c->tls = true;
	c->terminated = true;
	c->want_h2 = true;
	c->h2_checked = true;
	c->state = ICPT_S_HELLO;
	c->cfd = sv[0];
	c->cl = icpt_leg_new(ic->base, sv[0], NULL, ICPT_LEG_PLAIN);
	assert_non_null(c->cl);
	ic->conns = c;
	ic->nconns = 1;
	memcpy(&c->dst, &up, sizeof(up));
	c->dstlen = sizeof(up);
	c->family = AF_INET;
	assert_int_equal(inet_pton(AF_INET, "203.0.113.10", c->addr), 1);
	c->port = 443;
	assert_int_equal(icpt_set_host(c, HOSTNAME), 0);
	assert_true(icpt_set_state(c, ICPT_S_HTTP));
	icpt_h2_start(c);

	/* The workload: an h2 client with prior knowledge. */
	assert_int_equal(nghttp2_session_callbacks_new(&cb), 0);
	nghttp2_session_callbacks_set_send_callback(cb, w_send_cb);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, w_frame_cb);
	nghttp2_session_callbacks_set_on_header_callback(cb, w_header_cb);
	assert_int_equal(nghttp2_session_client_new(&t->ws, cb, t), 0);
	nghttp2_session_callbacks_del(cb);
	assert_int_equal(nghttp2_submit_settings(t->ws, NGHTTP2_FLAG_NONE, NULL, 0), 0);
	return t;
}

static void
t_free(struct t *t)
{
	intercept_free(t->ic);
	event_base_loop(t->base, EVLOOP_NONBLOCK);
	nghttp2_session_del(t->ws);
	close(t->w);
	nghttp2_session_del(t->us);
	SSL_free(t->ussl);
	if (t->ufd >= 0)
		close(t->ufd);
	close(t->lfd);
	SSL_CTX_free(t->sctx);
	vault_snap_unref(t->snap);
	X509_free(t->cert);
	EVP_PKEY_free(t->key);
	event_base_free(t->base);
	free(t);
}

/* Stream 1: method on path, with a body that never ends (the test resets the stream) or none. */
static void
t_request(struct t *t, const char *method, const char *path, bool body)
{
	nghttp2_data_provider dp = {.read_callback = w_body_cb};
	nghttp2_nv nv[] = {
	    {(uint8_t *)":method", (uint8_t *)method, 7, strlen(method), 0},
	    {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0},
	    {(uint8_t *)":authority", (uint8_t *)HOSTNAME, 10, strlen(HOSTNAME), 0},
	    {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
	};

	assert_int_equal(nghttp2_submit_request(t->ws, NULL, nv, 4, body ? &dp : NULL, NULL), 1);
}

/* ---------------------------------------------------------------- tests */

/*
 * An upload the upstream answers at its head (END_STREAM) without reading
 * it: 16 bytes fit its stream window, the rest wait. The workload then
 * ends the stream, and the upstream opens its window: the stream must
 * have been reset upstream, and no more of its body sent (nghttp2 would
 * otherwise resume the waiting body through a stream already freed).
 */
static void
test_stream_ended_before_its_body_resets_upstream(void **state)
{
	struct t *t = t_new(UP_EARLY);
	size_t sent;

	(void)state;
	t_request(t, "POST", "/v1/upload", true);
	for (int i = 0; i < TURNS && !t->resp_end; i++)
		turn(t);
	if (!t->resp_end)
		fail_msg("no early answer (log: %s)", t->log);
	assert_string_equal(t->status, "200");
	memset(t->body, 'a', sizeof(t->body));
	t->blen = sizeof(t->body);
	assert_int_equal(nghttp2_session_resume_data(t->ws, 1), 0);
	for (int i = 0; i < TURNS && t->ubody < 16; i++)
		turn(t);
	turns(t, 10);
	sent = t->ubody;
	assert_int_equal(sent, 16);
	assert_int_equal(nghttp2_submit_rst_stream(t->ws, NGHTTP2_FLAG_NONE, 1, NGHTTP2_CANCEL), 0);
	for (int i = 0; i < TURNS && t->urst == 0; i++)
		turn(t);
	if (t->urst != NGHTTP2_CANCEL + 1)
		fail_msg("the upstream stream was not reset (%u; log: %s)", t->urst, t->log);
	t->open_window = true;
	turns(t, 20);
	assert_int_equal(t->ubody, sent);
	t_free(t);
}

/* The credential goes upstream as a never-indexed field; an uncredentialed request's may be indexed. */
static void
check_key_flags(const char *path, int want)
{
	struct t *t = t_new(UP_OK);

	t_request(t, "GET", path, false);
	for (int i = 0; i < TURNS && !t->resp_end; i++)
		turn(t);
	if (!t->resp_end)
		fail_msg("%s not answered (log: %s)", path, t->log);
	assert_string_equal(t->status, "200");
	assert_int_equal(t->key_flags, want);
	t_free(t);
}

static void
test_credential_sent_never_indexed(void **state)
{
	(void)state;
	check_key_flags("/v1/models", NGHTTP2_NV_FLAG_NO_INDEX);
	check_key_flags("/other", -1); /* no binding: no credential */
}

/*
 * An upstream head of 111 fields, content-encoding the last: every field
 * is checked (the encoded body would pass the redactor unread), so it is
 * refused as the HTTP/1.1 parser refuses more than HTTPWIRE_MAX_HEADERS.
 */
static void
test_response_past_max_fields_refused(void **state)
{
	struct t *t = t_new(UP_MANY);

	(void)state;
	t_request(t, "GET", "/v1/models", false);
	for (int i = 0; i < TURNS && !t->resp_end; i++)
		turn(t);
	if (!t->resp_end)
		fail_msg("not answered (log: %s)", t->log);
	if (strcmp(t->status, "502") != 0)
		fail_msg("status %s (log: %s)", t->status, t->log);
	assert_non_null(strstr(t->log, "response_head_too_large"));
	t_free(t);
}

/*
 * An h2 body of 40 placeholders for a 16 KiB secret: what it would become
 * passes SUBST_MAX_GROWTH, and the stream is refused (413), none of the
 * secrets buffered or sent.
 */
static void
test_body_growth_refused(void **state)
{
	struct t *t = t_new(UP_SUBST);

	(void)state;
	for (size_t i = 0; i < 40; i++)
		memcpy(t->body + i * strlen(PH), PH, strlen(PH));
	t->blen = 40 * strlen(PH);
	t_request(t, "POST", "/v1/upload", true);
	for (int i = 0; i < TURNS && !t->resp_end; i++)
		turn(t);
	if (!t->resp_end)
		fail_msg("not answered (log: %s)", t->log);
	if (strcmp(t->status, "413") != 0)
		fail_msg("status %s (log: %s)", t->status, t->log);
	assert_non_null(strstr(t->log, "subst_too_large"));
	assert_int_equal(t->ubody, 0);
	t_free(t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_stream_ended_before_its_body_resets_upstream),
	    cmocka_unit_test(test_credential_sent_never_indexed),
	    cmocka_unit_test(test_response_past_max_fields_refused),
	    cmocka_unit_test(test_body_growth_refused),
	};

	signal(SIGPIPE, SIG_IGN); /* as egressd does */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
