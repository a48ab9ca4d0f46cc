/*
 * Control API (worker process): the OpenSandbox egress sidecar's HTTP API
 * on libevent's evhttp. Auth comes first, before routing or method checks,
 * and is a constant-time comparison; loopback is not trusted because the
 * workload shares it. Bodies are capped before parsing. Policy changes
 * answer only once the parent has applied them to nft. No response or log
 * line carries a token or a secret value.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <sys/queue.h>

#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "egressd/control/api.h"
#include "egressd/child/learnmap.h"
#include "egressd/common/log.h"
#include "egressd/control/vaultapi.h"
#include "egressd/intercept/wintercept.h"
#include "egressd/child/wstate.h"
#include "policy/policy.h"

#define API_MAX_BODY (1 << 20)
#define API_AUTH_HEADER "OPENSANDBOX-EGRESS-AUTH"
/* Auth failures allowed per source per window before 429. */
#define API_AUTH_BURST 10
#define API_AUTH_WINDOW_S 10
#define API_AUTH_SOURCES 256

struct api_source {
	char addr[INET6_ADDRSTRLEN];
	time_t window;
	unsigned failures;
};

struct api {
	struct wstate *ws;
	struct evhttp *http;
	unsigned char token_hash[32];
	bool auth;
	struct api_source sources[API_AUTH_SOURCES];
};

/* One policy change waiting for the parent. */
struct api_pending {
	struct api *api;
	struct evhttp_request *req;
	bool orphaned; /* the client went away */
	int kind;      /* 0 replace, 1 reset (empty body), 2 patch, 3 delete */
	struct timespec start;
};

static void
api_reply(struct evhttp_request *req, int code, const char *reason, const char *ctype,
    const char *body, size_t len)
{
	struct evbuffer *b = evbuffer_new();
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);

	evhttp_add_header(h, "Content-Type", ctype);
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(h, "Cache-Control", "no-store");
	if (b != NULL)
		evbuffer_add(b, body, len);
	evhttp_send_reply(req, code, reason, b);
	if (b != NULL)
		evbuffer_free(b);
}

/* Plain-text error, OpenSandbox style: the message and a newline. */
void
api_error(struct evhttp_request *req, int code, const char *reason, const char *msg)
{
	char buf[1024];
	int n = snprintf(buf, sizeof(buf), "%s\n", msg);

	api_reply(req, code, reason, "text/plain; charset=utf-8", buf,
	    n < 0                     ? 0
	    : (size_t)n < sizeof(buf) ? (size_t)n
	                              : sizeof(buf) - 1);
}

void
api_json(struct evhttp_request *req, int code, const char *reason, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);

	if (s == NULL) {
		api_error(req, 500, "Internal Server Error", "internal error: encoding");
		return;
	}
	{
		size_t n = strlen(s);
		char *t = malloc(n + 2);
		if (t != NULL) {
			memcpy(t, s, n);
			t[n] = '\n';
			api_reply(req, code, reason, "application/json", t, n + 1);
			free(t);
		} else
			api_error(req, 500, "Internal Server Error", "internal error: memory");
	}
	free(s);
}

static void
api_hash(const void *p, size_t n, unsigned char out[32])
{
	unsigned int len = 32;

	EVP_Digest(p, n, out, &len, EVP_sha256(), NULL);
}

static struct api_source *
api_source(struct api *a, const char *addr)
{
	struct api_source *oldest = &a->sources[0];

	for (size_t i = 0; i < API_AUTH_SOURCES; i++) {
		if (strcmp(a->sources[i].addr, addr) == 0)
			return &a->sources[i];
		if (a->sources[i].window < oldest->window)
			oldest = &a->sources[i];
	}
	memset(oldest, 0, sizeof(*oldest));
	snprintf(oldest->addr, sizeof(oldest->addr), "%s", addr);
	return oldest;
}

/*
 * Token check, first of all. The hash of the offered value is compared in
 * constant time with the hash of the token, so neither content nor length
 * leaks through timing. A source over its failure budget is refused
 * without a comparison, so guessing is throttled per source address.
 */
bool
api_auth(struct api *a, struct evhttp_request *req)
{
	const char *v;
	unsigned char h[32];
	char *peer = NULL;
	ev_uint16_t port = 0;
	struct api_source *src;
	time_t now = time(NULL);

	if (!a->auth)
		return true;
	evhttp_connection_get_peer(evhttp_request_get_connection(req), &peer, &port);
	src = api_source(a, peer ? peer : "?");
	if (now - src->window >= API_AUTH_WINDOW_S) {
		src->window = now;
		src->failures = 0;
	}
	if (src->failures >= API_AUTH_BURST) {
		a->ws->metrics.api_auth_failures++;
		api_error(req, 429, "Too Many Requests", "too many failed authentications");
		return false;
	}
	/* Exactly one auth header: two could be read differently by a proxy in front. */
	{
		struct evkeyval *kv;
		int n = 0;
		for (kv = evhttp_request_get_input_headers(req)->tqh_first; kv != NULL;
		     kv = kv->next.tqe_next)
			if (strcasecmp(kv->key, API_AUTH_HEADER) == 0)
				n++;
		if (n > 1) {
			src->failures++;
			a->ws->metrics.api_auth_failures++;
			api_error(req, 400, "Bad Request", "duplicate " API_AUTH_HEADER " header");
			return false;
		}
	}
	v = evhttp_find_header(evhttp_request_get_input_headers(req), API_AUTH_HEADER);
	if (v != NULL) {
		api_hash(v, strlen(v), h);
		if (CRYPTO_memcmp(h, a->token_hash, sizeof(h)) == 0)
			return true;
	}
	src->failures++;
	a->ws->metrics.api_auth_failures++;
	{
		struct log_line l;
		log_begin(&l, LOG_WARN, "api", "auth_fail");
		log_str(&l, "peer", peer);
		log_bool(&l, "header_present", v != NULL);
		log_end(&l);
	}
	api_error(req, 401, "Unauthorized", "unauthorized");
	return false;
}

/* Read the body (already capped by evhttp) into a NUL-terminated copy. */
char *
api_body(struct evhttp_request *req, size_t *len)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t n = evbuffer_get_length(in);
	char *b = malloc(n + 1);

	if (b == NULL)
		return NULL;
	evbuffer_copyout(in, b, n);
	b[n] = '\0';
	*len = n;
	return b;
}

static bool
api_blank(const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != ' ' && b[i] != '\t' && b[i] != '\r' && b[i] != '\n')
			return false;
	return true;
}

void
api_allow(struct evhttp_request *req, const char *allow)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
	api_error(req, 405, "Method Not Allowed", "method not allowed");
}

/* The body of a PATCH or DELETE: NULL (already answered) when empty or on no memory. */
static char *
api_required_body(struct evhttp_request *req, size_t *len)
{
	char *body = api_body(req, len);

	if (body == NULL) {
		api_error(req, 500, "Internal Server Error", "out of memory");
		return NULL;
	}
	if (api_blank(body, *len)) {
		free(body);
		api_error(req, 400, "Bad Request", "empty body");
		return NULL;
	}
	return body;
}

static json_t *
api_policy_status(struct api *a, const struct policy *p, bool with_mode)
{
	json_t *j = json_object();

	json_object_set_new(j, "status", json_string("ok"));
	json_object_set_new(j, "mode", json_string(policy_mode(p)));
	if (with_mode)
		json_object_set_new(
		    j, "enforcementMode", json_string(config_mode_name(a->ws->cfg->mode)));
	return j;
}

static void
api_conn_closed_cb(struct evhttp_connection *conn, void *arg)
{
	struct api_pending *pd = arg;

	pd->orphaned = true;
}

/* Write the user policy to OPENSANDBOX_EGRESS_POLICY_FILE: temp file, then rename. */
static int
api_persist(struct api *a, const struct policy *p, char *err, size_t errlen)
{
	const char *path = a->ws->cfg->os_policy_file;
	char tmp[PATH_MAX + 16];
	json_t *j;
	FILE *f;
	struct stat sb;
	mode_t mode = 0600;
	int rc;

	if (path[0] == '\0')
		return 0;
	if (stat(path, &sb) == 0)
		mode = sb.st_mode & 0777;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	j = policy_to_json(p);
	f = fopen(tmp, "w");
	if (f == NULL || j == NULL) {
		snprintf(err, errlen, "failed to persist policy: %s", strerror(errno));
		json_decref(j);
		if (f != NULL)
			fclose(f);
		return -1;
	}
	rc = json_dumpf(j, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (rc != 0 || fputc('\n', f) == EOF || fflush(f) != 0 || fsync(fileno(f)) != 0 ||
	    fchmod(fileno(f), mode) != 0) {
		snprintf(err, errlen, "failed to persist policy: %s", strerror(errno));
		fclose(f);
		unlink(tmp);
		return -1;
	}
	fclose(f);
	if (rename(tmp, path) != 0) {
		snprintf(err, errlen, "failed to persist policy: %s", strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

static void
api_applied_cb(int err, const char *msg, void *arg)
{
	struct api_pending *pd = arg;
	struct api *a = pd->api;
	char perr[512];
	struct log_line l;

	if (err == 0 && api_persist(a, a->ws->policy, perr, sizeof(perr)) != 0)
		log_msg(LOG_ERROR, "api", "persist_error", "%s", perr);
	log_begin(
	    &l, err ? LOG_ERROR : LOG_INFO, "api", err ? "policy_update_failed" : "policy_update");
	log_uint(&l, "revision", a->ws->revision);
	log_str(&l, "mode", policy_mode(a->ws->policy));
	log_uint(&l, "rules", policy_rule_count(a->ws->policy, POLICY_ORIGIN_USER));
	if (err)
		log_str(&l, "error", msg);
	log_end(&l);
	if (!pd->orphaned) {
		evhttp_connection_set_closecb(evhttp_request_get_connection(pd->req), NULL, NULL);
		if (err != 0) {
			char buf[512];
			snprintf(buf, sizeof(buf), "failed to apply nftables policy: %s", msg);
			api_error(pd->req, 500, "Internal Server Error", buf);
		} else {
			json_t *j = api_policy_status(a, a->ws->policy, pd->kind != 1);
			if (pd->kind == 1)
				json_object_set_new(
				    j, "reason", json_string("policy reset to default deny-all"));
			api_json(pd->req, 200, "OK", j);
			json_decref(j);
		}
	}
	{
		/* Time from the request to the change being in force (and answered). */
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		metrics_observe(&a->ws->metrics.api_latency,
		    (double)(now.tv_sec - pd->start.tv_sec) +
		        (double)(now.tv_nsec - pd->start.tv_nsec) / 1e9);
	}
	free(pd);
}

/* Validate the user policy, add the always rules and hand it to wstate_apply(). */
static void
api_commit(struct api *a, struct evhttp_request *req, struct policy *user, int kind)
{
	char err[512];
	struct policy *eff = wstate_with_always(a->ws, user, err, sizeof(err));
	struct api_pending *pd;

	policy_free(user);
	if (eff == NULL) {
		api_error(req, 500, "Internal Server Error", err);
		return;
	}
	/* The vault's bindings must stay covered by explicit allow rules. */
	if (vaultapi_check_policy(a->ws, eff, err, sizeof(err)) != 0) {
		char buf[600];
		snprintf(buf, sizeof(buf), "credential vault policy validation: %s", err);
		policy_free(eff);
		api_error(req, 400, "Bad Request", buf);
		return;
	}
	pd = calloc(1, sizeof(*pd));
	if (pd == NULL) {
		policy_free(eff);
		api_error(req, 500, "Internal Server Error", "out of memory");
		return;
	}
	pd->api = a;
	pd->req = req;
	pd->kind = kind;
	clock_gettime(CLOCK_MONOTONIC, &pd->start);
	evhttp_connection_set_closecb(evhttp_request_get_connection(req), api_conn_closed_cb, pd);
	wstate_apply(a->ws, eff, api_applied_cb, pd);
}

static void
api_policy_err(struct evhttp_request *req, const char *prefix, const struct policy_err *pe)
{
	char buf[768], e[600];

	policy_err_format(pe, e, sizeof(e));
	snprintf(buf, sizeof(buf), "%s: %s", prefix, e);
	if (pe->code == POLICY_ERR_TOO_LARGE)
		api_error(req, 413, "Payload Too Large", buf);
	else
		api_error(req, 400, "Bad Request", buf);
}

static void
api_policy(struct api *a, struct evhttp_request *req)
{
	struct policy_limits lim;
	struct policy_err pe;
	struct policy *p;
	char *body;
	size_t len;
	size_t removed = 0;

	policy_limits_default(&lim);
	lim.max_rules = a->ws->cfg->max_rules == 0 ? 0 : (size_t)a->ws->cfg->max_rules;
	memset(&pe, 0, sizeof(pe));
	switch (evhttp_request_get_command(req)) {
	case EVHTTP_REQ_GET: {
		json_t *j = api_policy_status(a, a->ws->policy, true);
		json_object_set_new(j, "policy", policy_to_json(a->ws->policy));
		api_json(req, 200, "OK", j);
		json_decref(j);
		return;
	}
	case EVHTTP_REQ_POST:
	case EVHTTP_REQ_PUT:
		if ((body = api_body(req, &len)) == NULL)
			break;
		if (api_blank(body, len)) {
			free(body);
			api_commit(a, req, policy_new_deny_all(), 1);
			return;
		}
		p = policy_from_json(body, len, &lim, &pe);
		free(body);
		if (p == NULL) {
			api_policy_err(req, "invalid policy", &pe);
			return;
		}
		api_commit(a, req, p, 0);
		return;
	case EVHTTP_REQ_PATCH:
		if ((body = api_required_body(req, &len)) == NULL)
			return;
		p = policy_patch_json(a->ws->policy, body, len, &lim, &pe);
		free(body);
		if (p == NULL) {
			api_policy_err(req, "invalid patch rules", &pe);
			return;
		}
		api_commit(a, req, p, 2);
		return;
	case EVHTTP_REQ_DELETE:
		if ((body = api_required_body(req, &len)) == NULL)
			return;
		p = policy_remove_json(a->ws->policy, body, len, &removed, &pe);
		free(body);
		if (p == NULL) {
			api_policy_err(req, "invalid delete targets", &pe);
			return;
		}
		if (removed == 0) {
			json_t *j = api_policy_status(a, a->ws->policy, true);
			json_object_set_new(j, "reason", json_string("no matching targets found"));
			api_json(req, 200, "OK", j);
			json_decref(j);
			policy_free(p);
			return;
		}
		api_commit(a, req, p, 3);
		return;
	default:
		api_allow(req, "GET, POST, PUT, PATCH, DELETE");
		return;
	}
	api_error(req, 500, "Internal Server Error", "out of memory");
}

static void
api_vault(struct api *a, struct evhttp_request *req)
{
	const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);

	if (strcmp(path, "/credential-vault/_active") == 0) {
		/* The active snapshot is never served over TCP. */
		if (cmd == EVHTTP_REQ_GET)
			api_error(req, 403, "Forbidden", "forbidden");
		else
			api_allow(req, "GET");
		return;
	}
	if (!api_auth(a, req))
		return;
	vaultapi_handle(a->ws, req, path, a->auth, a->ws->ready && a->ws->cfg->intercept);
}

static void
api_gencb(struct evhttp_request *req, void *arg)
{
	struct api *a = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;

	a->ws->metrics.api_requests++;
	if (path == NULL) {
		api_error(req, 400, "Bad Request", "bad request");
		return;
	}
	/* Health needs no auth and accepts any method, as in OpenSandbox. */
	if (strcmp(path, "/healthz") == 0) {
		if (a->ws->ready && (!a->ws->cfg->intercept || wintercept_ready(a->ws->icpt)))
			api_reply(req, 200, "OK", "text/plain; charset=utf-8", "ok", 2);
		else
			api_error(req, 503, "Service Unavailable", "enforcement not ready");
		return;
	}
	/* The sandbox CA certificate is public: the workload installs it. */
	if (strcmp(path, "/ca.pem") == 0) {
		size_t n = 0;
		const char *pem = wintercept_ca_pem(a->ws->icpt, &n);

		if (pem == NULL)
			api_error(req, 404, "Not Found", "interception is off");
		else
			api_reply(req, 200, "OK", "application/x-pem-file", pem, n);
		return;
	}
	if (strcmp(path, "/credential-vault") == 0 ||
	    strncmp(path, "/credential-vault/", 18) == 0) {
		api_vault(a, req);
		return;
	}
	if (!api_auth(a, req))
		return;
	if (strcmp(path, "/policy") == 0) {
		api_policy(a, req);
		return;
	}
	if (strcmp(path, "/metrics") == 0) {
		struct evbuffer *b = evbuffer_new();
		if (b == NULL) {
			api_error(req, 500, "Internal Server Error", "out of memory");
			return;
		}
		metrics_format(&a->ws->metrics, config_mode_name(a->ws->cfg->mode), a->ws->revision,
		    a->ws->ready, learnmap_count(a->ws->learned), b);
		evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
		    "text/plain; version=0.0.4");
		evhttp_send_reply(req, 200, "OK", b);
		evbuffer_free(b);
		return;
	}
	api_error(req, 404, "Not Found", "404 page not found");
}

struct api *
api_new(struct wstate *ws, char *err, size_t errlen)
{
	struct api *a = calloc(1, sizeof(*a));
	char host[128];
	uint16_t port;

	if (a == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	a->ws = ws;
	a->auth = ws->cfg->token[0] != '\0';
	if (a->auth)
		api_hash(ws->cfg->token, strlen(ws->cfg->token), a->token_hash);
	if (listen_split_addr(ws->cfg->http_addr, host, sizeof(host), &port) != 0) {
		snprintf(
		    err, errlen, "http-addr: \"%.64s\" is not [host]:port", ws->cfg->http_addr);
		free(a);
		return NULL;
	}
	a->http = evhttp_new(ws->base);
	if (a->http == NULL) {
		free(a);
		snprintf(err, errlen, "evhttp_new failed");
		return NULL;
	}
	evhttp_set_max_body_size(a->http, API_MAX_BODY);
	evhttp_set_max_headers_size(a->http, 16384);
	evhttp_set_timeout(a->http, 30);
	/* Every method reaches the handler, so auth comes before 405 (OpenSandbox order). */
	evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
	                                        EVHTTP_REQ_PATCH | EVHTTP_REQ_DELETE |
	                                        EVHTTP_REQ_HEAD | EVHTTP_REQ_OPTIONS |
	                                        EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT);
	evhttp_set_gencb(a->http, api_gencb, a);
	/* The parent's socket, held for the sidecar's life; tests without one bind here. */
	if (ws->cfg->listen.fd[LISTEN_API] >= 0
	        ? evhttp_accept_socket(a->http, ws->cfg->listen.fd[LISTEN_API]) != 0
	        : evhttp_bind_socket(a->http, host, port) != 0) {
		snprintf(err, errlen, "cannot listen on %s:%u: %s", host, port, strerror(errno));
		evhttp_free(a->http);
		free(a);
		return NULL;
	}
	log_msg(LOG_INFO, "api", "api_listen", "control API on %s:%u (auth %s)", host, port,
	    a->auth ? "on" : "OFF");
	return a;
}

void
api_free(struct api *a)
{
	if (a == NULL)
		return;
	evhttp_free(a->http);
	OPENSSL_cleanse(a->token_hash, sizeof(a->token_hash));
	free(a);
}
