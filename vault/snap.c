/*
 * Credential Vault snapshots (worker process). A snapshot pins a binding
 * set, one secret per credential and the redaction set of all of them. It
 * is immutable and refcounted; the worker swaps the active one whole, and
 * in-flight requests keep theirs. Secrets leave this module only as bytes
 * appended to an outgoing buffer; nothing here logs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "policy/binding.h"
#include "vault/redact.h"
#include "vault/secret.h"
#include "vault/snap.h"
#include "vault/subst.h"

struct vault_snap {
	int refs;
	uint64_t revision;
	struct binding_set *bs;
	struct secret **secrets;
	size_t nsecrets;
	struct secret **extra; /* decoded basic-auth passwords, for redaction only */
	size_t nextra;
	struct redact_set *redact;
};

/* Take a reference. */
struct vault_snap *
vault_snap_ref(struct vault_snap *s)
{
	if (s != NULL)
		s->refs++;
	return s;
}

/* Drop a reference; the last one releases (and so wipes) every secret. */
void
vault_snap_unref(struct vault_snap *s)
{
	if (s == NULL || --s->refs > 0)
		return;
	for (size_t i = 0; i < s->nsecrets; i++)
		secret_unref(s->secrets[i]);
	for (size_t i = 0; i < s->nextra; i++)
		secret_unref(s->extra[i]);
	free(s->secrets);
	free(s->extra);
	redact_set_unref(s->redact);
	binding_set_free(s->bs);
	free(s);
}

/*
 * A basic credential is base64("user:pass"), as in OpenSandbox. Its
 * decoded form "user:pass" (and the password alone, when long enough to
 * be masked without noise) are registered too, so that every rendering of
 * them is masked as well as the base64 form. Appends to extra[].
 */
static void
vault_snap_basic(struct vault_snap *s, const struct secret *b64)
{
	size_t n = secret_len(b64);
	uint8_t *enc = malloc(n + 1), *dec = malloc(n + 1);
	int dlen;
	uint8_t *colon;

	if (enc == NULL || dec == NULL || n == 0 || n % 4 != 0)
		goto out;
	if (secret_append_raw(b64, enc, n) != 0)
		goto out;
	dlen = EVP_DecodeBlock(dec, enc, (int)n);
	if (dlen < 0)
		goto out;
	/* EVP_DecodeBlock counts the padding bytes as output. */
	if (enc[n - 1] == '=')
		dlen--;
	if (n >= 2 && enc[n - 2] == '=')
		dlen--;
	colon = memchr(dec, ':', (size_t)dlen);
	if (colon == NULL)
		goto out;
	if ((size_t)dlen >= REDACT_MIN_PATTERN &&
	    (s->extra[s->nextra] = secret_new(dec, (size_t)dlen)) != NULL)
		s->nextra++;
	{
		size_t plen = (size_t)dlen - (size_t)(colon - dec) - 1;
		if (plen >= REDACT_MIN_PATTERN &&
		    (s->extra[s->nextra] = secret_new(colon + 1, plen)) != NULL)
			s->nextra++;
	}
out:
	if (enc != NULL)
		OPENSSL_cleanse(enc, n + 1);
	if (dec != NULL)
		OPENSSL_cleanse(dec, n + 1);
	free(enc);
	free(dec);
}

/*
 * A placeholder must not hold a credential value nor be held by one: the
 * workload would hold the secret, or substitution would rewrite a secret.
 * Checked here, where every source's value is known. 0 or -1 with err.
 */
static int
vault_snap_placeholders_ok(const struct binding_set *bs, struct secret *const *secrets,
    size_t nsecrets, char *err, size_t errlen)
{
	struct binding_substitution sb;
	int rc = 0;

	for (size_t i = 0; i < nsecrets && rc == 0; i++) {
		size_t n = secret_len(secrets[i]);
		uint8_t *v = malloc(n ? n : 1);

		if (v == NULL || secret_append_raw(secrets[i], v, n) != 0) {
			free(v);
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		for (size_t b = 0; b < binding_set_count(bs) && rc == 0; b++) {
			for (size_t j = 0; binding_subst_get(bs, b, j, &sb) == 0; j++) {
				if (memmem(v, n, sb.placeholder, sb.len) == NULL &&
				    memmem(sb.placeholder, sb.len, v, n) == NULL)
					continue;
				/* Named by position: an error never echoes input text. */
				snprintf(err, errlen,
				    "bindings[%zu].auth.substitutions[%zu].placeholder: a "
				    "substitution "
				    "placeholder and a credential value overlap (a placeholder "
				    "must "
				    "not contain or be part of a secret)",
				    b, j);
				rc = -1;
				break;
			}
		}
		OPENSSL_cleanse(v, n);
		free(v);
	}
	return rc;
}

/*
 * A substituted credential is written URL-encoded in a path or query,
 * JSON-escaped or form-encoded in a body: an upstream echoing that form
 * back must be masked too, so each form that differs from the value is
 * registered. Appends to extra[] (room for three per credential). The
 * redactor already masks the percent and JSON renderings of every value;
 * these are a second net (the form's '+' for a space among them), bounded
 * so that a long value cannot push the set past its state budget.
 */
#define VAULT_SNAP_ENCODED_MAX 1024
static void
vault_snap_encoded(struct vault_snap *s, const struct secret *v)
{
	static const enum subst_enc encs[] = {SUBST_URL, SUBST_JSON, SUBST_FORM};
	size_t n = secret_len(v), elen[3] = {0, 0, 0};
	uint8_t *raw = malloc(n ? n : 1), *enc[3] = {NULL, NULL, NULL};

	if (raw == NULL || secret_append_raw(v, raw, n) != 0)
		goto out;
	for (size_t k = 0; k < 3; k++) {
		bool dup = false;

		if (subst_encode(raw, n, encs[k], &enc[k], &elen[k]) != 0)
			goto out;
		if (elen[k] == n && memcmp(enc[k], raw, n) == 0)
			continue;
		for (size_t q = 0; q < k; q++)
			dup = dup || (elen[q] == elen[k] && memcmp(enc[q], enc[k], elen[k]) == 0);
		if (!dup && elen[k] >= REDACT_MIN_PATTERN && elen[k] <= VAULT_SNAP_ENCODED_MAX &&
		    (s->extra[s->nextra] = secret_new(enc[k], elen[k])) != NULL)
			s->nextra++;
	}
out:
	for (size_t k = 0; k < 3; k++)
		subst_free(enc[k], elen[k]);
	if (raw != NULL)
		OPENSSL_cleanse(raw, n);
	free(raw);
}

struct vault_snap *
vault_snap_new(struct binding_set *bs, struct secret *const *secrets, size_t nsecrets,
    uint64_t revision, char *err, size_t errlen)
{
	struct vault_snap *s;
	struct redact_value *rv = NULL;
	size_t nrv = 0;
	enum redact_err rerr;

	if (nsecrets != binding_credential_count(bs)) {
		snprintf(err, errlen, "internal error: %zu secrets for %zu credentials", nsecrets,
		    binding_credential_count(bs));
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		goto nomem;
	s->refs = 1;
	s->revision = revision;
	s->bs = binding_set_ref(bs);
	s->secrets = calloc(nsecrets ? nsecrets : 1, sizeof(*s->secrets));
	s->extra = calloc(binding_set_count(bs) * 2 + nsecrets * 3 + 1, sizeof(*s->extra));
	rv = calloc(nsecrets * 4 + binding_set_count(bs) * 2 + 1, sizeof(*rv));
	if (s->secrets == NULL || s->extra == NULL || rv == NULL)
		goto nomem;
	for (size_t i = 0; i < nsecrets; i++) {
		s->secrets[i] = secret_ref(secrets[i]);
		s->nsecrets++;
		rv[nrv++].secret = secrets[i];
	}
	/* Basic credentials also register their decoded forms. */
	for (size_t b = 0; b < binding_set_count(bs); b++) {
		struct binding_header h;

		if (binding_auth_type(bs, b) != BINDING_AUTH_BASIC ||
		    binding_header_get(bs, b, 0, &h) != 0 || h.credential >= nsecrets)
			continue;
		vault_snap_basic(s, secrets[h.credential]);
	}
	/* Substituted credentials also register their encoded forms (once each). */
	for (size_t i = 0; i < nsecrets; i++) {
		struct binding_substitution sb;
		bool used = false;

		for (size_t b = 0; b < binding_set_count(bs) && !used; b++)
			for (size_t j = 0; binding_subst_get(bs, b, j, &sb) == 0 && !used; j++)
				used = sb.credential == i;
		if (used)
			vault_snap_encoded(s, secrets[i]);
	}
	if (vault_snap_placeholders_ok(bs, secrets, nsecrets, err, errlen) != 0) {
		free(rv);
		vault_snap_unref(s);
		return NULL;
	}
	for (size_t i = 0; i < s->nextra; i++)
		rv[nrv++].secret = s->extra[i];
	s->redact = redact_set_new(rv, nrv, &rerr);
	free(rv);
	rv = NULL;
	if (s->redact == NULL) {
		snprintf(err, errlen,
		    "credential values cannot be redacted: %s "
		    "(values must be at least %d bytes)",
		    redact_err_str(rerr), REDACT_MIN_PATTERN);
		vault_snap_unref(s);
		return NULL;
	}
	return s;
nomem:
	free(rv);
	vault_snap_unref(s);
	snprintf(err, errlen, "out of memory");
	return NULL;
}

uint64_t
vault_snap_revision(const struct vault_snap *s)
{
	return s->revision;
}

const struct binding_set *
vault_snap_bindings(const struct vault_snap *s)
{
	return s->bs;
}

const struct secret *
vault_snap_secret(const struct vault_snap *s, size_t i)
{
	return i < s->nsecrets ? s->secrets[i] : NULL;
}

bool
vault_snap_host_bound(const struct vault_snap *s, const char *host)
{
	return s != NULL && binding_host_has_binding(s->bs, host);
}

struct redact_set *
vault_snap_redact(const struct vault_snap *s)
{
	return s == NULL ? NULL : s->redact;
}

int
vault_snap_inject(const struct vault_snap *s, size_t idx, struct evbuffer *out)
{
	size_t n;

	if (idx >= binding_set_count(s->bs))
		return -1;
	n = binding_header_count(s->bs, idx);
	for (size_t j = 0; j < n; j++) {
		struct binding_header h;

		if (binding_header_get(s->bs, idx, j, &h) != 0 || h.credential >= s->nsecrets)
			return -1;
		if (evbuffer_add(out, h.name, strlen(h.name)) != 0 ||
		    evbuffer_add(out, ": ", 2) != 0 ||
		    evbuffer_add(out, h.prefix, strlen(h.prefix)) != 0 ||
		    secret_append_to(s->secrets[h.credential], out) != 0 ||
		    evbuffer_add(out, "\r\n", 2) != 0)
			return -1;
	}
	return 0;
}

bool
vault_snap_injects_header(const struct vault_snap *s, size_t idx, const char *name, size_t len)
{
	size_t n;

	if (idx >= binding_set_count(s->bs))
		return false;
	n = binding_header_count(s->bs, idx);
	for (size_t j = 0; j < n; j++) {
		struct binding_header h;

		if (binding_header_get(s->bs, idx, j, &h) == 0 && strlen(h.name) == len &&
		    strncasecmp(h.name, name, len) == 0)
			return true;
	}
	return false;
}
