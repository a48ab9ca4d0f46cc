/*
 * Control API (control process): the OpenSandbox egress sidecar's HTTP API
 * on libevent's evhttp. Auth comes first, before routing or method checks,
 * and is a constant-time comparison; loopback is not trusted because the
 * workload shares it. Failed attempts draw on one global budget (the
 * workload owns all of 127.0.0.0/8, so a per-source budget throttles
 * nothing), and a request with the right token is never throttled. Bodies
 * are capped before parsing. Policy changes answer only once the parent
 * has applied them to nft. Every mutation attempt, accepted or refused,
 * writes one audit record (api_audit), also when libevent refuses it
 * before the dispatch (api_conn). No response or log line carries a
 * token or a secret value.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <sys/queue.h>

#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "egressd/child/wstate.h"
#include "egressd/common/log.h"
#include "egressd/common/safefile.h"
#include "egressd/control/api.h"
#include "egressd/control/httpreply.h"
#include "egressd/control/vaultapi.h"
#include "policy/binding.h"
#include "policy/policy.h"
#include "vault/httpwire.h"
#include "vault/snap.h"

#define API_MAX_BODY (1 << 20)
#define API_MAX_HEAD 16384 /* header lines, as evhttp counts them */
#define API_AUTH_HEADER "OPENSANDBOX-EGRESS-AUTH"
/*
 * Failed authentications, all sources together: a token bucket of
 * API_AUTH_BURST failures that refills one failure every
 * API_AUTH_REFILL_MS. Empty bucket: requests without the right token get
 * 429. The right token always passes.
 */
#define API_AUTH_BURST 32
#define API_AUTH_REFILL_MS 1000
/* Audit records: the endpoint is kept up to this many bytes. */
#define API_AUDIT_PATH_MAX 128
/* Hex digits of the SHA-256 state digest in an audit record (64 bits). */
#define API_AUDIT_HASH_HEX 16
/* The head of a request being read is kept up to this many bytes (api_conn). */
#define API_AUDIT_HEAD_MAX HTTPWIRE_MAX_HEAD_BYTES

/* What the request carried, as the audit record tells it. */
enum api_tok {
	API_TOK_OFF,     /* auth is off (insecure opt-in) */
	API_TOK_RIGHT,   /* exactly one header, the right token */
	API_TOK_WRONG,   /* one header, another value */
	API_TOK_ABSENT,  /* no header */
	API_TOK_DUP,     /* more than one header: refused whatever they hold */
	API_TOK_UNKNOWN, /* the HTTP layer refused the request before its head was whole */
};

/* One mutation attempt being audited (copied into api_pending when deferred). */
struct api_audit {
	char peer[INET6_ADDRSTRLEN];
	char endpoint[API_AUDIT_PATH_MAX];
	const char *method; /* static text */
	enum api_tok tok;
	bool vault; /* /credential-vault*: the vault's state, else the policy's */
	uint64_t rev_before;
	bool deferred;     /* the answer comes later (api_applied_cb writes the record) */
	bool http_refused; /* libevent answered it before the dispatch (api_conn) */
};

struct api_pending;

/*
 * One connection to the API, watched for the audit of the requests that
 * libevent refuses itself, before api_gencb runs: 2.1 answers a body over
 * API_MAX_BODY (Content-Length or chunked) with 413, a head over
 * API_MAX_HEAD or one it cannot parse with 400, an unknown Expect with
 * 417, and has no hook that shows such a request (evhttp_set_newreqcb
 * and evhttp_set_errorcb are 2.2). So the connection's own buffers are
 * watched: the bytes of the head being read are kept (to its blank line,
 * at most API_AUDIT_HEAD_MAX), and an answer that libevent writes while
 * none of this connection's requests is at the dispatch is its refusal
 * of that head. libevent stays the only judge of a request; this only
 * tells the audit what was refused. The bufferevent is the socket one
 * evhttp makes itself (no filter: evhttp sets the descriptor on it).
 */
struct api_conn {
	struct api *api;
	struct bufferevent *bev;         /* made by api_bev_cb, freed by evhttp */
	struct evhttp_connection *evcon; /* set by api_conn_bind_cb; NULL until then */
	struct event *bind;              /* one-shot: learns evcon once evhttp has set it up */
	struct evbuffer_cb_entry *in_cb, *out_cb;
	struct api_pending *pending; /* this connection's policy change waiting for the parent */
	bool dispatched;             /* a request is at the dispatch until its answer is sent */
	uint8_t *head;               /* the head being read, as received */
	size_t head_len, head_cap;
	int head_eol;   /* end-of-head scanner: 1 after LF, 2 after LF CR */
	bool head_done; /* its blank line was seen, or API_AUDIT_HEAD_MAX reached */
	LIST_ENTRY(api_conn) entry;
};

struct api {
	struct wstate *ws;
	struct vaultapi *va; /* the vault's routes and the vault control holds */
	struct evhttp *http;
	unsigned char token_hash[32];
	bool auth;
	uint64_t auth_credit_ms; /* failure budget, in ms of refill (API_AUTH_REFILL_MS each) */
	uint64_t auth_last_ms;   /* monotonic time of the last refill */
	struct api_audit *cur;   /* the mutation being dispatched, or NULL */
	struct api_conn *conn;   /* the connection of the request being dispatched, or NULL */
	LIST_HEAD(, api_conn) conns;
};

/* One policy change or vault mutation waiting for the parent. */
struct api_pending {
	struct api *api;
	struct evhttp_request *req;
	struct api_conn *conn; /* NULL: untracked (closecb on the connection), or closed */
	bool orphaned;         /* the client went away */
	int kind;              /* 0 replace, 1 reset (empty body), 2 patch, 3 delete, 4 vault */
	struct timespec start;
	bool audited; /* audit holds the record to write on completion */
	struct api_audit audit;
};

static void
api_hash(const void *p, size_t n, unsigned char out[32])
{
	unsigned int len = 32;

	EVP_Digest(p, n, out, &len, EVP_sha256(), NULL);
}

static enum api_tok api_token(struct api *a, struct evhttp_request *req);

static const char *
api_tok_str(enum api_tok t)
{
	switch (t) {
	case API_TOK_OFF:
		return "auth_off";
	case API_TOK_RIGHT:
		return "right";
	case API_TOK_WRONG:
		return "wrong";
	case API_TOK_ABSENT:
		return "absent";
	case API_TOK_DUP:
		return "duplicate";
	case API_TOK_UNKNOWN:
		return "unknown";
	}
	return "?";
}

static void
api_hex(const unsigned char *d, char hex[API_AUDIT_HASH_HEX + 1])
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < API_AUDIT_HASH_HEX / 2; i++) {
		hex[2 * i] = digits[d[i] >> 4];
		hex[2 * i + 1] = digits[d[i] & 0xf];
	}
	hex[API_AUDIT_HASH_HEX] = '\0';
}

/* Feed one NUL-terminated field (NUL included, so fields cannot run together). */
static void
api_digest_str(EVP_MD_CTX *c, const char *s)
{
	EVP_DigestUpdate(c, s, strlen(s) + 1);
}

/*
 * Digest of the effective policy: every rule of every origin list (the
 * always files included), in order, then the default action. Names and
 * addresses only: a policy holds no secret.
 */
static void
api_policy_digest(const struct policy *p, char hex[API_AUDIT_HASH_HEX + 1])
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned char d[32];
	unsigned int dl = sizeof(d);
	char num[64];

	memset(d, 0, sizeof(d));
	if (c != NULL && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1) {
		api_digest_str(c, "policy");
		for (int o = 0; p != NULL && o < POLICY_ORIGIN_RULE_LISTS; o++) {
			size_t n = policy_rule_count(p, (enum policy_origin)o);

			for (size_t i = 0; i < n; i++) {
				struct policy_rule_info ri;

				if (policy_rule_get(p, (enum policy_origin)o, i, &ri) != 0)
					continue;
				snprintf(num, sizeof(num), "%d/%d/%d/%zu", o, (int)ri.action,
				    (int)ri.kind, ri.nports);
				api_digest_str(c, num);
				api_digest_str(c, ri.target ? ri.target : "");
				for (size_t k = 0; k < ri.nports; k++) {
					snprintf(num, sizeof(num), "%u-%u",
					    (unsigned)ri.ports[k].lo, (unsigned)ri.ports[k].hi);
					api_digest_str(c, num);
				}
			}
		}
		api_digest_str(c, p != NULL ? policy_action_str(policy_default_action(p)) : "none");
		EVP_DigestFinal_ex(c, d, &dl);
	}
	EVP_MD_CTX_free(c);
	api_hex(d, hex);
}

/*
 * Digest of the vault in force: its revision and its sanitised bindings
 * (binding_set_to_json: names, match, auth type, header names; never a
 * value or a reference to one), so a digest says nothing about a secret.
 */
static void
api_vault_digest(const struct vaultapi *va, char hex[API_AUDIT_HASH_HEX + 1])
{
	const struct vault_snap *active = vaultapi_active(va);
	const struct binding_set *bs = active ? vault_snap_bindings(active) : NULL;
	json_t *j = bs ? binding_set_to_json(bs) : NULL;
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	unsigned char d[32];
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned int dl = sizeof(d);
	char num[32];

	memset(d, 0, sizeof(d));
	if (c != NULL && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1) {
		api_digest_str(c, "vault");
		snprintf(num, sizeof(num), "%llu",
		    (unsigned long long)(active ? vault_snap_revision(active) : 0));
		api_digest_str(c, num);
		api_digest_str(c, s != NULL ? s : "none");
		EVP_DigestFinal_ex(c, d, &dl);
	}
	EVP_MD_CTX_free(c);
	free(s);
	json_decref(j);
	api_hex(d, hex);
}

static uint64_t
api_audit_rev(const struct api *a, bool vault)
{
	if (vault)
		return vaultapi_active(a->va) ? vault_snap_revision(vaultapi_active(a->va)) : 0;
	return wstate_revision(a->ws);
}

/*
 * A mutation attempt: a writing method on any path but the reads that
 * ignore the method (/healthz, /ca.pem, /metrics). Unknown paths are
 * included, so a new endpoint is audited without more code.
 */
static bool
api_is_mutation(enum evhttp_cmd_type cmd, const char *path)
{
	switch (cmd) {
	case EVHTTP_REQ_POST:
	case EVHTTP_REQ_PUT:
	case EVHTTP_REQ_PATCH:
	case EVHTTP_REQ_DELETE:
		break;
	default:
		return false;
	}
	return path == NULL || (strcmp(path, "/healthz") != 0 && strcmp(path, "/ca.pem") != 0 &&
	                           strcmp(path, "/metrics") != 0);
}

static const char *
api_method_str(enum evhttp_cmd_type cmd)
{
	switch (cmd) {
	case EVHTTP_REQ_POST:
		return "POST";
	case EVHTTP_REQ_PUT:
		return "PUT";
	case EVHTTP_REQ_PATCH:
		return "PATCH";
	case EVHTTP_REQ_DELETE:
		return "DELETE";
	default:
		return "?";
	}
}

/* The method of a request line, as evhttp names it (case-sensitive); 0 for any other. */
static enum evhttp_cmd_type
api_method_of(struct httpwire_view m)
{
	static const struct {
		const char *name;
		enum evhttp_cmd_type cmd;
	} known[] = {
	    {"POST", EVHTTP_REQ_POST},
	    {"PUT", EVHTTP_REQ_PUT},
	    {"PATCH", EVHTTP_REQ_PATCH},
	    {"DELETE", EVHTTP_REQ_DELETE},
	    {"GET", EVHTTP_REQ_GET},
	    {"HEAD", EVHTTP_REQ_HEAD},
	    {"OPTIONS", EVHTTP_REQ_OPTIONS},
	    {"TRACE", EVHTTP_REQ_TRACE},
	    {"CONNECT", EVHTTP_REQ_CONNECT},
	};

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (m.len == strlen(known[i].name) && memcmp(m.ptr, known[i].name, m.len) == 0)
			return known[i].cmd;
	return 0;
}

static bool
api_is_vault_path(const char *path)
{
	return path != NULL && (strcmp(path, "/credential-vault") == 0 ||
	                           strncmp(path, "/credential-vault/", 18) == 0);
}

static void
api_audit_peer(struct evhttp_connection *evcon, struct api_audit *au)
{
	char *peer = NULL;
	ev_uint16_t port = 0;

	if (evcon != NULL)
		evhttp_connection_get_peer(evcon, &peer, &port);
	snprintf(au->peer, sizeof(au->peer), "%s", peer ? peer : "?");
}

/* The actor and the state before a mutation runs. */
static void
api_audit_begin(struct api *a, struct evhttp_request *req, const char *path, struct api_audit *au)
{
	memset(au, 0, sizeof(*au));
	api_audit_peer(evhttp_request_get_connection(req), au);
	snprintf(au->endpoint, sizeof(au->endpoint), "%s", path ? path : "");
	au->method = api_method_str(evhttp_request_get_command(req));
	au->tok = api_token(a, req);
	au->vault = api_is_vault_path(path);
	au->rev_before = api_audit_rev(a, au->vault);
}

/*
 * The one audit record of a mutation attempt, accepted or refused: actor
 * (peer, token state), endpoint and method, the status answered, the
 * revision before and after and a digest of the state after. Never the
 * body, a token or a secret. Written at warn when refused.
 */
static void
api_audit_write(struct api *a, const struct api_audit *au, int status, bool client_gone)
{
	char hex[API_AUDIT_HASH_HEX + 1];
	struct log_line l;

	if (au->vault)
		api_vault_digest(a->va, hex);
	else
		api_policy_digest(wstate_policy(a->ws), hex);
	log_begin(&l, status >= 200 && status < 300 ? LOG_INFO : LOG_WARN, "api", "api_audit");
	log_str(&l, "peer", au->peer);
	log_str(&l, "token", api_tok_str(au->tok));
	log_str(&l, "method", au->method);
	log_str(&l, "endpoint", au->endpoint);
	log_int(&l, "status", status);
	log_bool(&l, "accepted", status >= 200 && status < 300);
	log_str(&l, "object", au->vault ? "vault" : "policy");
	log_uint(&l, "revision_before", au->rev_before);
	log_uint(&l, "revision_after", api_audit_rev(a, au->vault));
	log_str(&l, "sha256_after", hex);
	if (client_gone)
		log_bool(&l, "client_gone", true);
	if (au->http_refused)
		log_str(&l, "refused_by", "http");
	log_end(&l);
}

static uint64_t
api_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * What the request carries, checked in constant time: the hash of the
 * offered value is compared with the hash of the token, so neither
 * content nor length leaks through timing. Two headers are refused
 * whatever they hold: a proxy in front could read the other one.
 */
static enum api_tok
api_tok_of(struct api *a, size_t n, const void *v, size_t len)
{
	unsigned char h[32];

	if (!a->auth)
		return API_TOK_OFF;
	if (n > 1)
		return API_TOK_DUP;
	if (n == 0)
		return API_TOK_ABSENT;
	api_hash(v, len, h);
	return CRYPTO_memcmp(h, a->token_hash, sizeof(h)) == 0 ? API_TOK_RIGHT : API_TOK_WRONG;
}

static enum api_tok
api_token(struct api *a, struct evhttp_request *req)
{
	struct evkeyvalq *hs = evhttp_request_get_input_headers(req);
	struct evkeyval *kv;
	const char *v;
	size_t n = 0;

	for (kv = hs->tqh_first; kv != NULL; kv = kv->next.tqe_next)
		if (strcasecmp(kv->key, API_AUTH_HEADER) == 0)
			n++;
	v = evhttp_find_header(hs, API_AUTH_HEADER);
	return api_tok_of(a, n, v, v != NULL ? strlen(v) : 0);
}

/* The same check on a head parsed by httpwire (a request evhttp refused). */
static enum api_tok
api_head_token(struct api *a, const struct httpwire_request *hr)
{
	const struct httpwire_header *first = NULL;
	size_t n = 0;

	for (size_t i = 0; i < hr->nheaders; i++) {
		if (!httpwire_name_eq(hr->headers[i].name, API_AUTH_HEADER))
			continue;
		if (n++ == 0)
			first = &hr->headers[i];
	}
	return api_tok_of(a, n, first ? first->value.ptr : NULL, first ? first->value.len : 0);
}

/*
 * Take one failure from the global budget; false when it is empty. One
 * budget for every source: the workload can use any address of
 * 127.0.0.0/8, and the control plane shares 127.0.0.1 with it.
 */
static bool
api_auth_take(struct api *a)
{
	uint64_t now = api_now_ms();
	uint64_t cap = (uint64_t)API_AUTH_BURST * API_AUTH_REFILL_MS;

	a->auth_credit_ms += now - a->auth_last_ms;
	if (a->auth_credit_ms > cap)
		a->auth_credit_ms = cap;
	a->auth_last_ms = now;
	if (a->auth_credit_ms < API_AUTH_REFILL_MS)
		return false;
	a->auth_credit_ms -= API_AUTH_REFILL_MS;
	return true;
}

/*
 * Token check, first of all: the right token passes at once, even while
 * failures are throttled, so the workload cannot lock the control plane
 * out. Anything else draws on the global failure budget: 401 (400 for a
 * duplicated header) while it lasts, 429 once it is spent.
 */
static bool
api_auth(struct api *a, struct evhttp_request *req)
{
	enum api_tok tok = api_token(a, req);
	char *peer = NULL;
	ev_uint16_t port = 0;

	if (tok == API_TOK_OFF || tok == API_TOK_RIGHT)
		return true;
	wstate_metrics(a->ws)->api_auth_failures++;
	if (!api_auth_take(a)) {
		http_error(req, 429, "Too Many Requests", "too many failed authentications");
		return false;
	}
	if (tok == API_TOK_DUP) {
		http_error(req, 400, "Bad Request", "duplicate " API_AUTH_HEADER " header");
		return false;
	}
	evhttp_connection_get_peer(evhttp_request_get_connection(req), &peer, &port);
	{
		struct log_line l;
		log_begin(&l, LOG_WARN, "api", "auth_fail");
		log_str(&l, "peer", peer);
		log_bool(&l, "header_present", tok == API_TOK_WRONG);
		log_end(&l);
	}
	http_error(req, 401, "Unauthorized", "unauthorized");
	return false;
}

static bool
api_blank(const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != ' ' && b[i] != '\t' && b[i] != '\r' && b[i] != '\n')
			return false;
	return true;
}

/* The body of a PATCH or DELETE: NULL (already answered) when empty or on no memory. */
static char *
api_required_body(struct evhttp_request *req, size_t *len)
{
	char *body = http_body(req, len);

	if (body == NULL) {
		http_error(req, 500, "Internal Server Error", "out of memory");
		return NULL;
	}
	if (api_blank(body, *len)) {
		free(body);
		http_error(req, 400, "Bad Request", "empty body");
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
		    j, "enforcementMode", json_string(config_mode_name(wstate_cfg(a->ws)->mode)));
	return j;
}

/* The client of an untracked connection (no api_conn) went away. */
static void
api_pending_closed_cb(struct evhttp_connection *conn, void *arg)
{
	struct api_pending *pd = arg;

	pd->orphaned = true;
}

/* Write data to base in dfd: a fresh temporary file, fsync'd, renamed over base. */
static int
api_write_state(
    int dfd, const char *base, const char *data, size_t len, mode_t mode, char *err, size_t errlen)
{
	char tmp[NAME_MAX + 1];
	unsigned char rnd[8];
	int fd = -1;
	size_t off = 0;

	for (int tries = 0; fd < 0 && tries < 8; tries++) {
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			break;
		snprintf(tmp, sizeof(tmp), ".%.200s.%02x%02x%02x%02x%02x%02x%02x%02x.tmp", base,
		    rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0) {
		snprintf(err, errlen, "failed to persist policy: %s", strerror(errno));
		return -1;
	}
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			goto ioerr;
		off += (size_t)w;
	}
	if (fchmod(fd, mode) != 0 || fsync(fd) != 0)
		goto ioerr;
	if (close(fd) != 0) {
		fd = -1;
		goto ioerr;
	}
	fd = -1;
	if (renameat(dfd, tmp, dfd, base) != 0)
		goto ioerr;
	(void)fsync(dfd); /* the rename itself */
	return 0;
ioerr:
	snprintf(err, errlen, "failed to persist policy: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
	unlinkat(dfd, tmp, 0);
	return -1;
}

/*
 * Write the user policy to OPENSANDBOX_EGRESS_POLICY_FILE: a new file of
 * a random name in the target's directory (O_CREAT|O_EXCL|O_NOFOLLOW,
 * 0600), fsync, then rename over the target. A fixed "<file>.tmp" opened
 * with fopen() would follow a symlink planted there and write wherever it
 * points. The directory must belong to root or to us and must not be
 * writable by group or others, so nobody else can plant or swap entries.
 * Beside it, <file>.hmac holds its integrity tag (safefile_tag, keyed with
 * the API token), which the next start checks before it loads the file.
 */
static int
api_persist(struct api *a, const struct policy *p, char *err, size_t errlen)
{
	const char *path = wstate_cfg(a->ws)->os_policy_file;
	const char *base;
	char tagname[NAME_MAX + 1], tag[SAFEFILE_TAG_HEX + 2];
	struct stat sb;
	mode_t mode = 0600;
	char *s = NULL;
	json_t *j;
	int dfd = -1, rc = -1;
	size_t len;

	if (path[0] == '\0')
		return 0;
	dfd = safefile_dir_open(path, &base, err, errlen);
	if (dfd < 0) {
		size_t n = strlen(err);

		/* "failed to persist policy: " before the reason. */
		if (n + 27 < errlen) {
			memmove(err + 26, err, n + 1);
			memcpy(err, "failed to persist policy: ", 26);
		}
		goto out;
	}
	/* Keep the mode of an existing regular file (never follow a link to learn it). */
	if (fstatat(dfd, base, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
		mode = sb.st_mode & 0777;
	j = policy_to_json(p);
	if (j != NULL)
		s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (s == NULL) {
		snprintf(err, errlen, "failed to persist policy: out of memory");
		goto out;
	}
	len = strlen(s);
	s[len++] = '\n'; /* json_dumps' NUL becomes the final newline */
	/*
	 * The integrity tag first (keyed with the token), then the policy: a
	 * crash between the two leaves a pair that does not match, which the
	 * next start refuses (the control plane sends the policy again).
	 */
	snprintf(tagname, sizeof(tagname), "%.200s.hmac", base);
	if (wstate_cfg(a->ws)->token[0] != '\0') {
		if (safefile_tag(wstate_cfg(a->ws)->token, s, len, tag) != 0) {
			snprintf(err, errlen, "failed to persist policy: cannot compute its tag");
			goto out;
		}
		tag[SAFEFILE_TAG_HEX] = '\n';
		if (api_write_state(dfd, tagname, tag, SAFEFILE_TAG_HEX + 1, 0600, err, errlen) !=
		    0)
			goto out;
	}
	if (api_write_state(dfd, base, s, len, mode, err, errlen) != 0)
		goto out;
	rc = 0;
out:
	if (dfd >= 0)
		close(dfd);
	free(s);
	return rc;
}

/*
 * A request answered later (a policy change, a vault mutation): it keeps
 * its audit record and learns if its client goes away meanwhile.
 */
static struct api_pending *
api_pending_begin(struct api *a, struct evhttp_request *req, int kind)
{
	struct api_pending *pd = calloc(1, sizeof(*pd));

	if (pd == NULL)
		return NULL;
	pd->api = a;
	pd->req = req;
	pd->kind = kind;
	clock_gettime(CLOCK_MONOTONIC, &pd->start);
	if (a->cur != NULL) {
		/* Answered later: api_pending_end writes the audit record. */
		pd->audit = *a->cur;
		pd->audited = true;
		a->cur->deferred = true;
	}
	if (a->conn != NULL) {
		pd->conn = a->conn;
		a->conn->pending = pd;
	} else
		evhttp_connection_set_closecb(
		    evhttp_request_get_connection(req), api_pending_closed_cb, pd);
	return pd;
}

/* Whether the client is still there to answer; detaches the request from its connection. */
static bool
api_pending_detach(struct api_pending *pd)
{
	if (pd->orphaned)
		return false;
	if (pd->conn != NULL)
		pd->conn->pending = NULL;
	else
		evhttp_connection_set_closecb(evhttp_request_get_connection(pd->req), NULL, NULL);
	return true;
}

/* The answer was sent (or its client is gone): audit, time, free. */
static void
api_pending_end(struct api_pending *pd, int status)
{
	struct api *a = pd->api;
	struct timespec now;

	if (pd->audited)
		api_audit_write(a, &pd->audit, status, pd->orphaned);
	/* Time from the request to the change being in force (and answered). */
	clock_gettime(CLOCK_MONOTONIC, &now);
	metrics_observe(&wstate_metrics(a->ws)->api_latency,
	    (double)(now.tv_sec - pd->start.tv_sec) +
	        (double)(now.tv_nsec - pd->start.tv_nsec) / 1e9);
	free(pd);
}

/* The vault's deferred answers (struct vaultapi_later_ops). */
static void *
api_later_begin(void *ctx, struct evhttp_request *req)
{
	return api_pending_begin(ctx, req, 4);
}

static void
api_later_json(void *l, int code, const char *reason, json_t *j)
{
	struct api_pending *pd = (struct api_pending *)l;

	if (api_pending_detach(pd)) {
		if (j != NULL)
			http_json(pd->req, code, reason, j);
		else
			evhttp_send_reply(pd->req, code, reason, NULL);
	}
	api_pending_end(pd, code);
}

static void
api_later_error(void *l, int code, const char *reason, const char *msg)
{
	struct api_pending *pd = (struct api_pending *)l;

	if (api_pending_detach(pd))
		http_error(pd->req, code, reason, msg);
	api_pending_end(pd, code);
}

static void
api_applied_cb(int err, const char *msg, void *arg)
{
	struct api_pending *pd = arg;
	struct api *a = pd->api;
	char perr[512];
	struct log_line l;

	if (err == 0 && api_persist(a, wstate_policy(a->ws), perr, sizeof(perr)) != 0)
		log_msg(LOG_ERROR, "api", "persist_error", "%s", perr);
	log_begin(
	    &l, err ? LOG_ERROR : LOG_INFO, "api", err ? "policy_update_failed" : "policy_update");
	log_uint(&l, "revision", wstate_revision(a->ws));
	log_str(&l, "mode", policy_mode(wstate_policy(a->ws)));
	log_uint(&l, "rules", policy_rule_count(wstate_policy(a->ws), POLICY_ORIGIN_USER));
	if (err)
		log_str(&l, "error", msg);
	log_end(&l);
	if (api_pending_detach(pd)) {
		if (err != 0) {
			char buf[512];
			snprintf(buf, sizeof(buf), "failed to apply nftables policy: %s", msg);
			http_error(pd->req, 500, "Internal Server Error", buf);
		} else {
			json_t *j = api_policy_status(a, wstate_policy(a->ws), pd->kind != 1);
			if (pd->kind == 1)
				json_object_set_new(
				    j, "reason", json_string("policy reset to default deny-all"));
			http_json(pd->req, 200, "OK", j);
			json_decref(j);
		}
	}
	api_pending_end(pd, err != 0 ? 500 : 200);
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
		http_error(req, 500, "Internal Server Error", err);
		return;
	}
	/* The vault's bindings must stay covered by explicit allow rules. */
	if (vaultapi_check_policy(a->va, eff, err, sizeof(err)) != 0) {
		char buf[600];
		snprintf(buf, sizeof(buf), "credential vault policy validation: %s", err);
		policy_free(eff);
		http_error(req, 400, "Bad Request", buf);
		return;
	}
	pd = api_pending_begin(a, req, kind);
	if (pd == NULL) {
		policy_free(eff);
		http_error(req, 500, "Internal Server Error", "out of memory");
		return;
	}
	wstate_apply(a->ws, eff, api_applied_cb, pd);
}

static void
api_policy_err(struct evhttp_request *req, const char *prefix, const struct policy_err *pe)
{
	char buf[768], e[600];

	policy_err_format(pe, e, sizeof(e));
	snprintf(buf, sizeof(buf), "%s: %s", prefix, e);
	if (pe->code == POLICY_ERR_TOO_LARGE)
		http_error(req, 413, "Payload Too Large", buf);
	else
		http_error(req, 400, "Bad Request", buf);
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
	lim.max_rules =
	    wstate_cfg(a->ws)->max_rules == 0 ? 0 : (size_t)wstate_cfg(a->ws)->max_rules;
	memset(&pe, 0, sizeof(pe));
	switch (evhttp_request_get_command(req)) {
	case EVHTTP_REQ_GET: {
		json_t *j = api_policy_status(a, wstate_policy(a->ws), true);
		json_object_set_new(j, "policy", policy_to_json(wstate_policy(a->ws)));
		http_json(req, 200, "OK", j);
		json_decref(j);
		return;
	}
	case EVHTTP_REQ_POST:
	case EVHTTP_REQ_PUT:
		if ((body = http_body(req, &len)) == NULL)
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
		p = policy_patch_json(wstate_policy(a->ws), body, len, &lim, &pe);
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
		p = policy_remove_json(wstate_policy(a->ws), body, len, &removed, &pe);
		free(body);
		if (p == NULL) {
			api_policy_err(req, "invalid delete targets", &pe);
			return;
		}
		if (removed == 0) {
			json_t *j = api_policy_status(a, wstate_policy(a->ws), true);
			json_object_set_new(j, "reason", json_string("no matching targets found"));
			http_json(req, 200, "OK", j);
			json_decref(j);
			policy_free(p);
			return;
		}
		api_commit(a, req, p, 3);
		return;
	default:
		http_allow(req, "GET, POST, PUT, PATCH, DELETE");
		return;
	}
	http_error(req, 500, "Internal Server Error", "out of memory");
}

static void
api_vault(struct api *a, struct evhttp_request *req)
{
	const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);

	if (strcmp(path, "/credential-vault/_active") == 0) {
		/* The active snapshot is never served over TCP. */
		if (cmd == EVHTTP_REQ_GET)
			http_error(req, 403, "Forbidden", "forbidden");
		else
			http_allow(req, "GET");
		return;
	}
	if (!api_auth(a, req))
		return;
	vaultapi_handle(
	    a->va, req, path, a->auth, wstate_ready(a->ws) && wstate_intercept_ready(a->ws));
}

/*
 * Copy n bytes at off of buf into dst; the number copied. Through
 * evbuffer_peek: evbuffer_copyout_from refuses a buffer whose start is
 * frozen, as a socket bufferevent keeps its output between writes.
 */
static size_t
api_buf_copy(struct evbuffer *buf, size_t off, uint8_t *dst, size_t n)
{
	struct evbuffer_iovec v[8];
	struct evbuffer_ptr pos;
	size_t done = 0;

	while (done < n) {
		size_t before = done;
		int nv;

		if (evbuffer_ptr_set(buf, &pos, off + done, EVBUFFER_PTR_SET) != 0)
			break;
		nv = evbuffer_peek(buf, (ev_ssize_t)(n - done), &pos, v, 8);
		for (int i = 0; i < nv && i < 8 && done < n; i++) {
			size_t k = v[i].iov_len < n - done ? v[i].iov_len : n - done;

			memcpy(dst + done, v[i].iov_base, k);
			done += k;
		}
		if (done == before)
			break;
	}
	return done;
}

/* Wipe and drop the kept head (it holds the token header). */
static void
api_conn_head_clear(struct api_conn *c)
{
	if (c->head != NULL) {
		OPENSSL_cleanse(c->head, c->head_cap);
		free(c->head);
	}
	c->head = NULL;
	c->head_len = c->head_cap = 0;
	c->head_eol = 0;
	c->head_done = false;
}

/*
 * Keep bytes [off, off + n) of buf, read from the client, while the head
 * is not whole: up to the blank line that ends it (CRLF CRLF, or LF LF
 * as evhttp also takes), at most API_AUDIT_HEAD_MAX. Body bytes that came
 * with the head are not kept. Out of memory: what was kept is all the
 * audit will know.
 */
static void
api_conn_head_add(struct api_conn *c, struct evbuffer *buf, size_t off, size_t n)
{
	size_t want = API_AUDIT_HEAD_MAX - c->head_len, got, i;

	if (c->head_done || n == 0)
		return;
	if (n < want)
		want = n;
	if (c->head_len + want > c->head_cap) {
		size_t cap = c->head_cap != 0 ? c->head_cap : 1024;
		uint8_t *nh;

		while (cap < c->head_len + want)
			cap *= 2;
		if (cap > API_AUDIT_HEAD_MAX)
			cap = API_AUDIT_HEAD_MAX;
		if ((nh = malloc(cap)) == NULL) {
			c->head_done = true;
			return;
		}
		if (c->head_len != 0)
			memcpy(nh, c->head, c->head_len);
		if (c->head != NULL) {
			OPENSSL_cleanse(c->head, c->head_cap);
			free(c->head);
		}
		c->head = nh;
		c->head_cap = cap;
	}
	if ((got = api_buf_copy(buf, off, c->head + c->head_len, want)) != want) {
		OPENSSL_cleanse(c->head + c->head_len, got);
		c->head_done = true;
		return;
	}
	for (i = 0; i < got && !c->head_done; i++) {
		uint8_t ch = c->head[c->head_len + i];

		if (ch == '\n') {
			c->head_done = c->head_eol != 0;
			c->head_eol = 1;
		} else
			c->head_eol = ch == '\r' && c->head_eol == 1 ? 2 : 0;
	}
	OPENSSL_cleanse(c->head + c->head_len + i, got - i);
	c->head_len += i;
	if (c->head_len >= API_AUDIT_HEAD_MAX)
		c->head_done = true;
}

/*
 * The one record of a request libevent refused with status: what its
 * head told, as far as it was read. A whole head gives the method, the
 * endpoint and the token state; a head cut short gives the method and
 * endpoint if its request line was whole (the token is "unknown": another
 * token header could have followed), else neither ("?"). Reads write no
 * record; a request whose method is unknown is taken for a mutation.
 * Nothing changed: the revision and digest are the current ones.
 */
static void
api_conn_refused(struct api_conn *c, int status)
{
	struct api *a = c->api;
	struct httpwire_header hdrs[HTTPWIRE_MAX_HEADERS];
	struct httpwire_request hr;
	enum httpwire_status st = HTTPWIRE_NEED_MORE;
	enum evhttp_cmd_type cmd = 0;
	struct api_audit au;
	size_t used;
	bool line = false;

	memset(&au, 0, sizeof(au));
	memset(&hr, 0, sizeof(hr));
	au.http_refused = true;
	au.method = "?";
	snprintf(au.endpoint, sizeof(au.endpoint), "?");
	au.tok = a->auth ? API_TOK_UNKNOWN : API_TOK_OFF;
	if (c->head_len != 0)
		st = httpwire_parse_request(
		    c->head, c->head_len, &hr, hdrs, HTTPWIRE_MAX_HEADERS, &used);
	/* httpwire sets path exactly when the request line was whole and valid. */
	if (hr.path.ptr != NULL) {
		line = true;
		cmd = api_method_of(hr.method);
		au.method = api_method_str(cmd);
		snprintf(au.endpoint, sizeof(au.endpoint), "%.*s", (int)hr.path.len,
		    (const char *)hr.path.ptr);
		if (st == HTTPWIRE_OK)
			au.tok = api_head_token(a, &hr);
	}
	api_conn_head_clear(c);
	if (line && !api_is_mutation(cmd, au.endpoint))
		return;
	api_audit_peer(c->evcon, &au);
	au.vault = api_is_vault_path(au.endpoint);
	au.rev_before = api_audit_rev(a, au.vault);
	api_audit_write(a, &au, status, false);
}

/* The status of the response line at buf[off..], or -1 if it is none. */
static int
api_status_at(struct evbuffer *buf, size_t off)
{
	uint8_t l[13];

	if (api_buf_copy(buf, off, l, sizeof(l)) != sizeof(l))
		return -1;
	/* "HTTP/1.x NNN " as evhttp writes it */
	if (memcmp(l, "HTTP/1.", 7) != 0 || l[8] != ' ' || l[12] != ' ')
		return -1;
	for (int i = 9; i < 12; i++)
		if (l[i] < '0' || l[i] > '9')
			return -1;
	return (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
}

/* Bytes read from the client: keep the head being read. */
static void
api_conn_in_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct api_conn *c = arg;
	size_t len = evbuffer_get_length(buf);

	if (info->n_added != 0 && info->n_added <= len)
		api_conn_head_add(c, buf, len - info->n_added, info->n_added);
}

/*
 * Bytes queued for the client. While no request is at the dispatch, only
 * evhttp writes: a 100 Continue, or its refusal (evhttp_send_error: one
 * status line, then headers and an HTML page, then it closes the
 * connection), so each final status line seen here is one refusal.
 */
static void
api_conn_out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct api_conn *c = arg;
	size_t len = evbuffer_get_length(buf);
	int status;

	if (info->n_added == 0 || info->n_added > len || c->dispatched)
		return;
	status = api_status_at(buf, len - info->n_added);
	if (status >= 200)
		api_conn_refused(c, status);
}

/* The answer to the request at the dispatch is sent (evhttp_send_done). */
static void
api_conn_answered_cb(struct evhttp_request *req, void *arg)
{
	struct api_conn *c = arg;

	c->dispatched = false;
}

/*
 * Free c. unwatch: its bufferevent is alive, take the buffer callbacks
 * off it; unref: drop the reference api_bev_cb took (unbound only).
 */
static void
api_conn_free(struct api_conn *c, bool unwatch, bool unref)
{
	if (unwatch) {
		if (c->in_cb != NULL)
			evbuffer_remove_cb_entry(bufferevent_get_input(c->bev), c->in_cb);
		if (c->out_cb != NULL)
			evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->out_cb);
	}
	if (c->bind != NULL)
		event_free(c->bind);
	api_conn_head_clear(c);
	LIST_REMOVE(c, entry);
	if (unref)
		bufferevent_decref(c->bev);
	free(c);
}

/* evhttp frees the connection (evhttp_connection_free): c goes with it. */
static void
api_conn_closed_cb(struct evhttp_connection *evcon, void *arg)
{
	struct api_conn *c = arg;

	if (c->pending != NULL) {
		c->pending->orphaned = true;
		c->pending->conn = NULL;
	}
	api_conn_free(c, true, false);
}

/*
 * Right after the accept, once evhttp has wrapped the bufferevent in its
 * connection: that connection is the bufferevent's callback argument (so
 * in libevent 2.1 and 2.2), and its close callback frees c. If evhttp
 * already dropped it (its callbacks are cleared), the reference taken in
 * api_bev_cb is the last one.
 */
static void
api_conn_bind_cb(evutil_socket_t fd, short what, void *arg)
{
	struct api_conn *c = arg;
	bufferevent_event_cb ecb = NULL;
	void *cbarg = NULL;

	event_free(c->bind);
	c->bind = NULL;
	bufferevent_getcb(c->bev, NULL, NULL, &ecb, &cbarg);
	if (ecb == NULL || cbarg == NULL || evhttp_connection_get_bufferevent(cbarg) != c->bev) {
		api_conn_free(c, true, true);
		return;
	}
	c->evcon = cbarg;
	evhttp_connection_set_closecb(c->evcon, api_conn_closed_cb, c);
	bufferevent_decref(c->bev);
}

/*
 * evhttp_set_bevcb: the bufferevent of a new connection, the one evhttp
 * makes when there is no callback (a socket bufferevent, descriptor set
 * by evhttp, options 0), with c watching its buffers. Out of memory: the
 * connection is served untracked, and said so.
 */
static struct bufferevent *
api_bev_cb(struct event_base *base, void *arg)
{
	struct api *a = arg;
	struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
	struct api_conn *c;

	if (bev == NULL)
		return NULL;
	if ((c = calloc(1, sizeof(*c))) == NULL)
		goto untracked;
	c->api = a;
	c->bev = bev;
	LIST_INSERT_HEAD(&a->conns, c, entry);
	c->bind = event_new(base, -1, 0, api_conn_bind_cb, c);
	c->in_cb = evbuffer_add_cb(bufferevent_get_input(bev), api_conn_in_cb, c);
	c->out_cb = evbuffer_add_cb(bufferevent_get_output(bev), api_conn_out_cb, c);
	if (c->bind == NULL || c->in_cb == NULL || c->out_cb == NULL) {
		api_conn_free(c, true, false);
		goto untracked;
	}
	bufferevent_incref(bev); /* until api_conn_bind_cb */
	event_active(c->bind, EV_TIMEOUT, 1);
	return bev;
untracked:
	log_msg(LOG_WARN, "api", "api_conn_untracked",
	    "out of memory: requests the HTTP layer refuses on this connection are not audited");
	return bev;
}

/* The tracked connection of req, or NULL. */
static struct api_conn *
api_conn_of(struct api *a, struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct api_conn *c;

	if (evcon == NULL)
		return NULL;
	for (c = LIST_FIRST(&a->conns); c != NULL; c = LIST_NEXT(c, entry))
		if (c->evcon == evcon)
			return c;
	return NULL;
}

/*
 * A request of c reached the dispatch: its answer is ours, not a
 * refusal, until it is sent; the next request's head starts with what
 * is already read behind this one (pipelined).
 */
static void
api_conn_dispatch(struct api_conn *c, struct evhttp_request *req)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);

	c->dispatched = true;
	evhttp_request_set_on_complete_cb(req, api_conn_answered_cb, c);
	api_conn_head_clear(c);
	api_conn_head_add(c, in, 0, evbuffer_get_length(in));
}

static void api_route(struct api *a, struct evhttp_request *req, const char *path);

/*
 * Every request enters here. A mutation attempt is audited around the
 * routing, whatever answers it (auth, a handler, a precondition): one
 * record when the answer is sent now, or from api_applied_cb when the
 * parent must apply it first.
 */
static void
api_gencb(struct evhttp_request *req, void *arg)
{
	struct api *a = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	struct api_audit au;

	wstate_metrics(a->ws)->api_requests++;
	if ((a->conn = api_conn_of(a, req)) != NULL)
		api_conn_dispatch(a->conn, req);
	if (!api_is_mutation(evhttp_request_get_command(req), path)) {
		api_route(a, req, path);
		a->conn = NULL;
		return;
	}
	api_audit_begin(a, req, path, &au);
	a->cur = &au;
	api_route(a, req, path);
	a->cur = NULL;
	a->conn = NULL;
	/* Handlers answer synchronously unless deferred; req lives until the write completes. */
	if (!au.deferred)
		api_audit_write(a, &au, evhttp_request_get_response_code(req), false);
}

static void
api_route(struct api *a, struct evhttp_request *req, const char *path)
{
	if (path == NULL) {
		http_error(req, 400, "Bad Request", "bad request");
		return;
	}
	/* Health needs no auth and accepts any method, as in OpenSandbox. */
	if (strcmp(path, "/healthz") == 0) {
		if (wstate_all_ready(a->ws))
			http_reply(req, 200, "OK", "text/plain; charset=utf-8", "ok", 2);
		else
			http_error(req, 503, "Service Unavailable", "enforcement not ready");
		return;
	}
	/* The sandbox CA certificate is public: the workload installs it. */
	if (strcmp(path, "/ca.pem") == 0) {
		size_t n = 0;
		/* During a renewal's overlap: the new CA and the previous one, both trusted. */
		const char *pem = wstate_cfg(a->ws)->intercept ? wstate_ca_bundle(a->ws, &n) : NULL;

		if (pem == NULL)
			http_error(req, 404, "Not Found", "interception is off");
		else
			http_reply(req, 200, "OK", "application/x-pem-file", pem, n);
		return;
	}
	if (api_is_vault_path(path)) {
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
		struct metrics sum;

		if (b == NULL) {
			http_error(req, 500, "Internal Server Error", "out of memory");
			return;
		}
		wstate_metrics_sum(a->ws, &sum);
		metrics_format(&sum, config_mode_name(wstate_cfg(a->ws)->mode),
		    wstate_revision(a->ws), wstate_all_ready(a->ws), wstate_learned_count(a->ws),
		    b);
		evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
		    "text/plain; version=0.0.4");
		evhttp_send_reply(req, 200, "OK", b);
		evbuffer_free(b);
		return;
	}
	http_error(req, 404, "Not Found", "404 page not found");
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
	{
		struct vaultapi_later_ops ops = {
		    api_later_begin, api_later_json, api_later_error, a};

		a->va = vaultapi_new(ws, &ops);
	}
	if (a->va == NULL) {
		snprintf(err, errlen, "out of memory");
		free(a);
		return NULL;
	}
	LIST_INIT(&a->conns);
	a->auth = wstate_cfg(ws)->token[0] != '\0';
	a->auth_credit_ms = (uint64_t)API_AUTH_BURST * API_AUTH_REFILL_MS;
	a->auth_last_ms = api_now_ms();
	if (a->auth)
		api_hash(wstate_cfg(ws)->token, strlen(wstate_cfg(ws)->token), a->token_hash);
	if (listen_split_addr(wstate_cfg(ws)->http_addr, host, sizeof(host), &port) != 0) {
		snprintf(err, errlen, "http-addr: \"%.64s\" is not [host]:port",
		    wstate_cfg(ws)->http_addr);
		vaultapi_free(a->va);
		free(a);
		return NULL;
	}
	a->http = evhttp_new(wstate_base(ws));
	if (a->http == NULL) {
		vaultapi_free(a->va);
		free(a);
		snprintf(err, errlen, "evhttp_new failed");
		return NULL;
	}
	evhttp_set_max_body_size(a->http, API_MAX_BODY);
	evhttp_set_max_headers_size(a->http, API_MAX_HEAD);
	evhttp_set_timeout(a->http, 30);
	/* Every method reaches the handler, so auth comes before 405 (OpenSandbox order). */
	evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
	                                        EVHTTP_REQ_PATCH | EVHTTP_REQ_DELETE |
	                                        EVHTTP_REQ_HEAD | EVHTTP_REQ_OPTIONS |
	                                        EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT);
	evhttp_set_gencb(a->http, api_gencb, a);
	evhttp_set_bevcb(a->http, api_bev_cb, a);
	/* The parent's socket, held for the sidecar's life; tests without one bind here. */
	if (wstate_cfg(ws)->listen.fd[LISTEN_API] >= 0
	        ? evhttp_accept_socket(a->http, wstate_cfg(ws)->listen.fd[LISTEN_API]) != 0
	        : evhttp_bind_socket(a->http, host, port) != 0) {
		snprintf(err, errlen, "cannot listen on %s:%u: %s", host, port, strerror(errno));
		evhttp_free(a->http);
		vaultapi_free(a->va);
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
	struct api_conn *c;

	if (a == NULL)
		return;
	/* Frees every connection: their close callbacks free the api_conns. */
	evhttp_free(a->http);
	/* Left: connections not bound yet (their bufferevent is held). */
	while ((c = LIST_FIRST(&a->conns)) != NULL)
		api_conn_free(c, c->evcon == NULL, c->evcon == NULL);
	OPENSSL_cleanse(a->token_hash, sizeof(a->token_hash));
	vaultapi_free(a->va);
	free(a);
}

void
api_policy_changed(struct api *a)
{
	vaultapi_policy_changed(a->va);
}

void
api_tick(struct api *a)
{
	vaultapi_rotate_files(a->va);
}
