/*
 * Fuzz target for the Credential Vault store's PATCH semantics
 * (vault/store.c), through the API glue's entry point
 * vaultapi_handle(). Every run starts from the same vault, made by POST
 * (an inline, a file and an env credential, two bindings), and sends the
 * input as a PATCH body. Requests are standalone evhttp_request objects; this file
 * defines evhttp_send_reply(), which the executable's copy interposes on
 * libevent's, to capture the status and the body instead of writing them
 * to a connection. Invariants:
 *  - a refused PATCH (any status but 200) leaves the vault byte-identical
 *    (GET state, revision, the active snapshot);
 *  - an accepted one bumps the revision by one, answers with the state a
 *    GET then returns, and the active snapshot carries that revision;
 *  - an expectedRevision other than the current one is never accepted;
 *  - no response body and no log line carries a secret value: the base
 *    vault's three values, or an inline value of the PATCH (8 bytes or
 *    more) that no other string of the input contains (an input may put
 *    the same text in a name, which errors may quote).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <jansson.h>

#include "egressd/child/wstate.h"
#include "vault/vwire.h"
#include "egressd/common/config.h"
#include "egressd/common/log.h"
#include "egressd/control/vaultapi.h"
#include "policy/policy.h"
#include "vault/snap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SECRET_INLINE "s3cr3t-INLINE-4b1d9c"
#define SECRET_FILE "s3cr3t-FILE-77aa10"
#define SECRET_ENV "s3cr3t-ENV-c0ffee"
#define FUZZ_ENV "FUZZ_VAULT_ENV_SECRET"
#define FUZZ_MAX_VALUES 64

/* The last reply captured by evhttp_send_reply(). */
static int reply_code;
static char *reply_body;
static size_t reply_len;

void
evhttp_send_reply(struct evhttp_request *req, int code, const char *reason, struct evbuffer *buf)
{
	free(reply_body);
	reply_code = code;
	reply_len = buf ? evbuffer_get_length(buf) : 0;
	reply_body = malloc(reply_len + 1);
	if (reply_body == NULL)
		abort();
	if (buf != NULL)
		evbuffer_copyout(buf, reply_body, reply_len);
	reply_body[reply_len] = '\0';
}

static struct config fuzz_cfg;
static struct policy *fuzz_policy;
static char fuzz_base[2048];
static int fuzz_logfd = -1;
static char fuzz_envvar[sizeof(FUZZ_ENV "=" SECRET_ENV)];

static void
fuzz_init(void)
{
	static const char pol[] =
	    "{\"egress\":[{\"action\":\"allow\",\"target\":\"*.example.com\"}]}";
	char path[] = "/tmp/fuzz_vault_patch.XXXXXX";
	struct policy_err err;
	int fd;

	if (fuzz_policy != NULL)
		return;
	vault_json_wipe_init();
	fuzz_logfd = memfd_create("fuzz_vault_log", MFD_CLOEXEC);
	if (fuzz_logfd < 0)
		abort();
	log_init("worker", LOG_DEBUG, fuzz_logfd);
	config_defaults(&fuzz_cfg);
	fuzz_cfg.intercept = true;
	fuzz_cfg.ssl_insecure = false;
	fuzz_policy = policy_from_json(pol, strlen(pol), NULL, &err);
	if (fuzz_policy == NULL)
		abort();
	fd = mkstemp(path);
	if (fd < 0 || write(fd, SECRET_FILE "\n", strlen(SECRET_FILE) + 1) < 0)
		abort();
	close(fd);
	snprintf(fuzz_base, sizeof(fuzz_base),
	    "{\"credentials\":["
	    "{\"name\":\"tok\",\"source\":{\"type\":\"inline\",\"value\":\"" SECRET_INLINE "\"}},"
	    "{\"name\":\"f\",\"source\":{\"type\":\"file\",\"path\":\"%s\"}},"
	    "{\"name\":\"e\",\"source\":{\"type\":\"env\",\"name\":\"" FUZZ_ENV "\"}}],"
	    "\"bindings\":["
	    "{\"name\":\"code\",\"match\":{\"hosts\":[\"code.example.com\"],"
	    "\"paths\":[\"/v1/*\"]},"
	    "\"auth\":{\"type\":\"bearer\",\"credential\":\"tok\"}},"
	    "{\"name\":\"custom\",\"allowBroad\":true,"
	    "\"match\":{\"hosts\":[\"*.svc.example.com\"]},"
	    "\"auth\":{\"type\":\"customHeaders\",\"headers\":[{\"name\":\"x-a\","
	    "\"credential\":\"f\"},{\"name\":\"X-B\",\"credential\":\"e\"}]}}]}",
	    path);
}

/* One request to the vault API; the reply is in reply_code/reply_body. */
static void
fuzz_request(struct vaultapi *ws, enum evhttp_cmd_type cmd, const void *body, size_t len)
{
	struct evhttp_request *req = evhttp_request_new(NULL, NULL);

	if (req == NULL)
		abort();
	req->type = cmd;
	if (len > 0 && evbuffer_add(evhttp_request_get_input_buffer(req), body, len) != 0)
		abort();
	reply_code = 0;
	vaultapi_handle(ws, req, "/credential-vault", true, true);
	if (reply_code == 0)
		abort();
	evhttp_request_free(req);
}

/* The GET state, as a string the caller frees. */
static char *
fuzz_state(struct vaultapi *ws)
{
	char *s;

	fuzz_request(ws, EVHTTP_REQ_GET, NULL, 0);
	if (reply_code != 200)
		abort();
	s = strdup(reply_body);
	if (s == NULL)
		abort();
	return s;
}

struct fuzz_strings {
	const char *s[1024]; /* every key and string but the inline values */
	size_t n;
	char ints[64][24]; /* integers as an error would print them */
	size_t nints;
	const char *values[FUZZ_MAX_VALUES];
	size_t nvalues;
};

/* Every key, string and integer of j; inline values of credentials go to values. */
static void
fuzz_collect(json_t *j, struct fuzz_strings *fs, bool in_source)
{
	const char *k;
	json_t *v;
	size_t i;

	if (json_is_string(j) && fs->n < 1024) {
		fs->s[fs->n++] = json_string_value(j);
	} else if (json_is_integer(j) && fs->nints < 64 && fs->n < 1024) {
		snprintf(fs->ints[fs->nints], sizeof(fs->ints[0]), "%lld",
		    (long long)json_integer_value(j));
		fs->s[fs->n++] = fs->ints[fs->nints++];
	} else if (json_is_object(j)) {
		json_object_foreach(j, k, v)
		{
			if (in_source && strcmp(k, "value") == 0 && json_is_string(v)) {
				if (fs->nvalues < FUZZ_MAX_VALUES)
					fs->values[fs->nvalues++] = json_string_value(v);
				continue;
			}
			if (fs->n < 1024)
				fs->s[fs->n++] = k;
			fuzz_collect(v, fs, strcmp(k, "source") == 0);
		}
	} else if (json_is_array(j)) {
		json_array_foreach(j, i, v) fuzz_collect(v, fs, false);
	}
}

/* True if the input may legitimately make a reply quote needle. */
static bool
fuzz_echoable(const struct fuzz_strings *fs, const char *needle, const uint8_t *raw, size_t rawlen)
{
	if (memmem(raw, rawlen, needle, strlen(needle)) != NULL)
		return true;
	for (size_t i = 0; i < fs->n; i++)
		if (strstr(fs->s[i], needle) != NULL)
			return true;
	return false;
}

/* abort() if text holds a secret value that it could only have from a value. */
static void
fuzz_no_secret(
    const char *text, size_t len, const struct fuzz_strings *fs, const uint8_t *raw, size_t rawlen)
{
	static const char *const base[] = {SECRET_INLINE, SECRET_FILE, SECRET_ENV};

	for (size_t i = 0; i < 3; i++)
		if (memmem(text, len, base[i], strlen(base[i])) != NULL &&
		    !fuzz_echoable(fs, base[i], raw, rawlen))
			abort();
	for (size_t i = 0; i < fs->nvalues; i++) {
		const char *v = fs->values[i];
		if (strlen(v) >= 8 && memmem(text, len, v, strlen(v)) != NULL &&
		    !fuzz_echoable(fs, v, (const uint8_t *)"", 0) && strstr(fuzz_base, v) == NULL)
			abort();
	}
}

/* The log lines written since the last call, checked, then dropped. */
static void
fuzz_check_log(const struct fuzz_strings *fs, const uint8_t *raw, size_t rawlen)
{
	char buf[65536];
	off_t end = lseek(fuzz_logfd, 0, SEEK_END);
	ssize_t n;

	if (end > 0) {
		size_t want = (size_t)end < sizeof(buf) ? (size_t)end : sizeof(buf);
		n = pread(fuzz_logfd, buf, want, 0);
		if (n < 0)
			abort();
		fuzz_no_secret(buf, (size_t)n, fs, raw, rawlen);
	}
	if (ftruncate(fuzz_logfd, 0) != 0 || lseek(fuzz_logfd, 0, SEEK_SET) != 0)
		abort();
}

/* Create the base vault (POST), as every run starts from it. */
static void
fuzz_create(struct vaultapi *ws)
{
	struct fuzz_strings none;

	memset(&none, 0, sizeof(none));
	/*
	 * Env sources are taken out of the environment (and wiped) when first
	 * read: put the variable back from a static buffer (setenv would
	 * allocate every time, which libFuzzer takes for a leak to look for).
	 */
	snprintf(fuzz_envvar, sizeof(fuzz_envvar), "%s", FUZZ_ENV "=" SECRET_ENV);
	if (putenv(fuzz_envvar) != 0)
		abort();
	fuzz_request(ws, EVHTTP_REQ_POST, fuzz_base, strlen(fuzz_base));
	if (reply_code != 201)
		abort();
	fuzz_no_secret(reply_body, reply_len, &none, (const uint8_t *)"", 0);
}

/*
 * One store for the whole process: a refused PATCH must leave it as it
 * was (checked below), an accepted one is undone by DELETE and POST, so
 * that every run starts from the base vault without rebuilding it.
 */
static struct vaultapi *fuzz_va;
static char *fuzz_base_state;

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vaultapi *ws;
	struct fuzz_strings fs;
	const struct vault_snap *snap;
	char *before, *after, *answer;
	int code;
	json_t *doc, *exp;
	uint64_t rev;

	fuzz_init();
	if (fuzz_base_state == NULL) {
		struct wstate *st = wstate_new(&fuzz_cfg, CHAN_ROLE_CONTROL, NULL, NULL, NULL);

		if (st == NULL)
			abort();
		wstate_set_policy(st, policy_ref(fuzz_policy));
		/* No channel: every answer is immediate. */
		if ((fuzz_va = vaultapi_new(st, NULL)) == NULL)
			abort();
		ws = fuzz_va;
		fuzz_create(ws);
		fuzz_base_state = fuzz_state(ws);
	}
	memset(&fs, 0, sizeof(fs));
	ws = fuzz_va;
	before = fuzz_state(ws);
	snap = vaultapi_active(ws);
	rev = vault_snap_revision(snap);
	if (rev != 1 || strcmp(before, fuzz_base_state) != 0)
		abort();

	doc = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	fuzz_collect(doc, &fs, false);
	fuzz_request(ws, EVHTTP_REQ_PATCH, data, size);
	code = reply_code;
	answer = strdup(reply_body);
	if (answer == NULL)
		abort();
	fuzz_no_secret(answer, strlen(answer), &fs, data, size);
	after = fuzz_state(ws);
	fuzz_no_secret(after, strlen(after), &fs, data, size);
	if (code == 200) {
		/* The answer is the new state, one revision on. */
		if (strcmp(answer, after) != 0 || vaultapi_active(ws) == NULL ||
		    vault_snap_revision(vaultapi_active(ws)) != rev + 1)
			abort();
		exp = json_is_object(doc) ? json_object_get(doc, "expectedRevision") : NULL;
		if (exp != NULL && !json_is_null(exp) &&
		    (!json_is_integer(exp) || json_integer_value(exp) != (json_int_t)rev))
			abort();
		fuzz_request(ws, EVHTTP_REQ_DELETE, NULL, 0);
		if (reply_code != 204 || vaultapi_active(ws) != NULL)
			abort();
		fuzz_create(ws);
	} else {
		/* Refused: nothing changed. */
		if ((code != 400 && code != 409) || strcmp(before, after) != 0 ||
		    vaultapi_active(ws) != snap)
			abort();
	}
	fuzz_check_log(&fs, data, size);
	json_decref(doc);
	free(before);
	free(after);
	free(answer);
	return 0;
}
