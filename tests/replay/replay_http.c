/*
 * Replay tests of the interceptor's HTTP relay (issue 13, "seams for
 * tests without root"): request -> the head the upstream receives (with
 * the injected credential) -> the body the workload gets back (redacted).
 * The real relay (vault/icpt_http.c) runs through tests/lib/relayharness.c:
 * a plain connection for api.allowed.test with the case's vault in force
 * and a scripted upstream on loopback.
 *
 *   replay_http CASE_DIR      runs every CASE_DIR/<name>.case
 *
 * A case is lines of (# comments and blank lines aside; in request,
 * upstream and the expectations \r, \n, \t and \\ are escapes):
 *
 *   vault <CreateRequest JSON: credentials with inline values, bindings>
 *   upstream <a whole response>        one per request head, in order
 *   upstream-body <status line rest> <body>   200 OK and a body: the
 *                                      Content-Length is computed
 *   request <bytes the workload sends>
 *   wait <text>                        run until the workload got it
 *   expect upstream-has <text> | expect upstream-lacks <text>
 *   expect workload-has <text> | expect workload-lacks <text>
 *   expect upstream-count <n> <text>   occurrences in what the upstream got
 *
 * Exit 0 when every case passes; each mismatch is printed.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egressd/common/log.h"
#include "policy/binding.h"
#include "policy/policy.h"
#include "relayharness.h"
#include "replay.h"
#include "vault/secret.h"
#include "vault/snap.h"

#define MAX_LINE 8192
#define MAX_EXPECT 32

enum hexp_kind { UP_HAS, UP_LACKS, W_HAS, W_LACKS, UP_COUNT };

struct hexp {
	enum hexp_kind kind;
	unsigned n;
	char *text;
};

struct hcase {
	char *vault;
	char *request;
	char *wait;
	char *upstream[RELAY_MAX_SCRIPT];
	size_t nupstream;
	struct hexp exp[MAX_EXPECT];
	size_t nexp;
};

/* A copy of s with \r \n \t \\ unescaped. */
static char *
unescape(const char *s)
{
	char *o = malloc(strlen(s) + 1), *p = o;

	if (o == NULL)
		abort();
	for (; *s != '\0'; s++) {
		if (*s != '\\' || s[1] == '\0') {
			*p++ = *s;
			continue;
		}
		s++;
		*p++ = *s == 'r' ? '\r' : *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
	}
	*p = '\0';
	return o;
}

/* "200 OK <body>" as a whole response with its Content-Length. */
static char *
with_length(const char *spec)
{
	const char *sp1 = strchr(spec, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	char *body, *out;
	size_t n;

	if (sp2 == NULL)
		return NULL;
	body = unescape(sp2 + 1);
	n = strlen(body) + (size_t)(sp2 - spec) + 64;
	out = malloc(n);
	if (out == NULL)
		abort();
	snprintf(out, n, "HTTP/1.1 %.*s\r\nContent-Length: %zu\r\n\r\n%s", (int)(sp2 - spec), spec,
	    strlen(body), body);
	free(body);
	return out;
}

static void
case_free(struct hcase *c)
{
	free(c->vault);
	free(c->request);
	free(c->wait);
	for (size_t i = 0; i < c->nupstream; i++)
		free(c->upstream[i]);
	for (size_t i = 0; i < c->nexp; i++)
		free(c->exp[i].text);
}

static int
load_case(const char *path, struct hcase *c)
{
	static const struct {
		const char *key;
		enum hexp_kind kind;
	} kinds[] = {{"expect upstream-has ", UP_HAS}, {"expect upstream-lacks ", UP_LACKS},
	    {"expect workload-has ", W_HAS}, {"expect workload-lacks ", W_LACKS}};
	FILE *f = fopen(path, "r");
	char line[MAX_LINE];

	memset(c, 0, sizeof(*c));
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *nl = strchr(line, '\n');
		bool done = false;
		unsigned n;
		int off = 0;

		if (nl != NULL)
			*nl = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]) && !done; k++)
			if (strncmp(line, kinds[k].key, strlen(kinds[k].key)) == 0 &&
			    c->nexp < MAX_EXPECT) {
				c->exp[c->nexp].kind = kinds[k].kind;
				c->exp[c->nexp++].text = unescape(line + strlen(kinds[k].key));
				done = true;
			}
		if (done)
			continue;
		if (strncmp(line, "vault ", 6) == 0 && c->vault == NULL)
			c->vault = strdup(line + 6);
		else if (strncmp(line, "request ", 8) == 0 && c->request == NULL)
			c->request = unescape(line + 8);
		else if (strncmp(line, "wait ", 5) == 0 && c->wait == NULL)
			c->wait = unescape(line + 5);
		else if (strncmp(line, "upstream-body ", 14) == 0 &&
		         c->nupstream < RELAY_MAX_SCRIPT) {
			if ((c->upstream[c->nupstream] = with_length(line + 14)) == NULL)
				goto fail;
			c->nupstream++;
		} else if (strncmp(line, "upstream ", 9) == 0 && c->nupstream < RELAY_MAX_SCRIPT)
			c->upstream[c->nupstream++] = unescape(line + 9);
		else if (sscanf(line, "expect upstream-count %u %n", &n, &off) == 1 && off > 0 &&
		         c->nexp < MAX_EXPECT) {
			c->exp[c->nexp].kind = UP_COUNT;
			c->exp[c->nexp].n = n;
			c->exp[c->nexp++].text = unescape(line + off);
		} else
			goto fail;
	}
	fclose(f);
	return c->vault != NULL && c->request != NULL && c->wait != NULL ? 0 : -1;
fail:
	fclose(f);
	return -1;
}

/* The case's vault as the intercept holds it: bindings and each inline value. */
static int
reveal_cb(const uint8_t *v, size_t len, void *arg)
{
	*(struct secret **)arg = secret_new(v, len);
	return 0;
}

static struct vault_snap *
case_snap(const char *name, const char *js)
{
	struct policy_err pe;
	struct binding_set *bs = binding_set_from_json(js, strlen(js), &pe);
	struct secret *sec[16] = {NULL};
	struct vault_snap *snap = NULL;
	size_t n;
	char err[256];

	if (bs == NULL) {
		replay_bad(name, "the vault does not load: %s", pe.msg);
		return NULL;
	}
	n = binding_credential_count(bs);
	for (size_t i = 0; i < n && i < 16; i++)
		if (binding_credential_reveal(bs, i, reveal_cb, &sec[i]) != 0 || sec[i] == NULL) {
			replay_bad(name, "credential %zu has no inline value", i);
			goto out;
		}
	if (n <= 16 && (snap = vault_snap_new(bs, sec, n, 1, err, sizeof(err))) == NULL)
		replay_bad(name, "vault_snap_new: %s", err);
out:
	for (size_t i = 0; i < n && i < 16; i++)
		secret_unref(sec[i]);
	binding_set_free(bs);
	return snap;
}

static void
run_case(const char *name, const struct hcase *c)
{
	struct vault_snap *snap = case_snap(name, c->vault);
	struct relay *h;

	if (snap == NULL)
		return;
	h = relay_new(snap);
	for (size_t i = 0; i < c->nupstream; i++)
		h->script[i] = c->upstream[i];
	h->nscript = c->nupstream;
	relay_send(h, c->request);
	if (!relay_pump(h, c->wait))
		replay_bad(name, "the workload never got \"%s\" (log: %s)", c->wait, h->log);
	for (size_t i = 0; i < c->nexp; i++) {
		const struct hexp *e = &c->exp[i];
		const char *where = e->kind == W_HAS || e->kind == W_LACKS ? h->wrx : h->urx;
		bool has = strstr(where, e->text) != NULL;

		switch (e->kind) {
		case UP_HAS:
		case W_HAS:
			if (!has)
				replay_bad(name, "the %s did not get \"%s\"",
				    e->kind == UP_HAS ? "upstream" : "workload", e->text);
			break;
		case UP_LACKS:
		case W_LACKS:
			if (has)
				replay_bad(name, "the %s got \"%s\"",
				    e->kind == UP_LACKS ? "upstream" : "workload", e->text);
			break;
		case UP_COUNT:
			if (relay_count(h->urx, e->text) != e->n)
				replay_bad(name, "the upstream got \"%s\" %zu times, expected %u",
				    e->text, relay_count(h->urx, e->text), e->n);
			break;
		}
	}
	relay_free(h);
}

static void
http_case(const char *path, const char *name)
{
	struct hcase c;

	if (load_case(path, &c) != 0)
		replay_bad(name, "the case does not parse");
	else
		run_case(name, &c);
	case_free(&c);
}

int
main(int argc, char **argv)
{
	log_init("intercept", LOG_ERROR, 2);
	return replay_main(argc, argv, "replay_http", http_case);
}
