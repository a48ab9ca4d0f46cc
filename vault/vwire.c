/*
 * The vault document between control and the intercept (control and
 * intercept processes); see vwire.h.
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/crypto.h>

#include "policy/binding.h"
#include "policy/policy.h"
#include "vault/secret.h"
#include "vault/snap.h"
#include "vault/vwire.h"

#define VWIRE_VERSION 1

static const char *const vwire_keys[] = {"v", "revision", "vault", "values", NULL};

static void
vwire_json_free(void *p)
{
	if (p == NULL)
		return;
	OPENSSL_cleanse(p, malloc_usable_size(p));
	free(p);
}

void
vault_json_wipe_init(void)
{
	json_set_alloc_funcs(malloc, vwire_json_free);
}

void
vault_wire_free(char *doc, size_t len)
{
	if (doc == NULL)
		return;
	OPENSSL_cleanse(doc, len);
	free(doc);
}

/* The value as lower-case hex, in a string the caller wipes. */
static json_t *
vwire_hex(const struct secret *s)
{
	static const char hx[] = "0123456789abcdef";
	size_t n = secret_len(s);
	uint8_t *raw = malloc(n ? n : 1);
	char *txt = malloc(n * 2 + 1);
	json_t *j = NULL;

	if (raw != NULL && txt != NULL && secret_append_raw(s, raw, n) == 0) {
		for (size_t i = 0; i < n; i++) {
			txt[2 * i] = hx[raw[i] >> 4];
			txt[2 * i + 1] = hx[raw[i] & 0xf];
		}
		j = json_stringn(txt, n * 2);
	}
	if (raw != NULL)
		OPENSSL_cleanse(raw, n);
	if (txt != NULL)
		OPENSSL_cleanse(txt, n * 2 + 1);
	free(raw);
	free(txt);
	return j;
}

char *
vault_wire_encode(const struct vault_snap *snap, size_t *len, int *err)
{
	const struct binding_set *bs;
	json_t *o, *vals;
	char *doc;

	*len = 0;
	*err = 0;
	if (snap == NULL)
		return NULL;
	bs = vault_snap_bindings(snap);
	o = json_object();
	vals = json_array();
	if (o == NULL || vals == NULL || json_object_set_new(o, "v", json_integer(VWIRE_VERSION)) ||
	    json_object_set_new(
	        o, "revision", json_integer((json_int_t)vault_snap_revision(snap))) ||
	    json_object_set_new(o, "vault", binding_set_to_wire(bs)) ||
	    json_object_get(o, "vault") == NULL)
		goto nomem;
	for (size_t i = 0; i < binding_credential_count(bs); i++) {
		const struct secret *s = vault_snap_secret(snap, i);

		if (s == NULL || json_array_append_new(vals, vwire_hex(s)) != 0)
			goto nomem;
	}
	if (json_object_set_new(o, "values", vals) != 0) {
		vals = NULL;
		goto nomem;
	}
	doc = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (doc == NULL) {
		*err = ENOMEM;
		return NULL;
	}
	*len = strlen(doc);
	return doc;
nomem:
	json_decref(vals);
	json_decref(o);
	*err = ENOMEM;
	return NULL;
}

static int
vwire_nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* One value: even-length lower-case hex of a valid header value. */
static struct secret *
vwire_value(const json_t *v)
{
	size_t n = json_string_length(v), blen = n / 2;
	const char *t = json_string_value(v);
	uint8_t *b;
	struct secret *s = NULL;

	if (!json_is_string(v) || n == 0 || n % 2 != 0 || blen > SECRET_MAX_BYTES)
		return NULL;
	if ((b = malloc(blen)) == NULL)
		return NULL;
	for (size_t i = 0; i < blen; i++) {
		int hi = vwire_nibble(t[2 * i]), lo = vwire_nibble(t[2 * i + 1]);

		if (hi < 0 || lo < 0)
			goto out;
		b[i] = (uint8_t)(hi << 4 | lo);
	}
	if (secret_value_ok(b, blen))
		s = secret_new(b, blen);
out:
	OPENSSL_cleanse(b, blen);
	free(b);
	return s;
}

int
vault_wire_decode(const char *doc, size_t len, struct vault_snap **snap, char *err, size_t errlen)
{
	json_t *o, *v, *rev, *vault, *vals;
	struct binding_set *bs = NULL;
	struct secret **secrets = NULL;
	struct policy_err pe;
	size_t n = 0;
	char *vtxt = NULL;
	const char *key;
	json_t *val;
	int rc = -1;

	*snap = NULL;
	if (len == 0)
		return 0;
	o = json_loadb(doc, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(o)) {
		snprintf(err, errlen, "vault document: not a JSON object");
		goto out;
	}
	json_object_foreach(o, key, val)
	{
		size_t k = 0;

		while (vwire_keys[k] != NULL && strcmp(vwire_keys[k], key) != 0)
			k++;
		if (vwire_keys[k] == NULL) {
			snprintf(err, errlen, "vault document: unknown key");
			goto out;
		}
	}
	v = json_object_get(o, "v");
	rev = json_object_get(o, "revision");
	vault = json_object_get(o, "vault");
	vals = json_object_get(o, "values");
	if (!json_is_integer(v) || json_integer_value(v) != VWIRE_VERSION ||
	    !json_is_integer(rev) || json_integer_value(rev) <= 0 || !json_is_object(vault) ||
	    !json_is_array(vals)) {
		snprintf(err, errlen, "vault document: bad version, revision, vault or values");
		goto out;
	}
	/* The bindings through the API's parser: nothing the API would refuse. */
	vtxt = json_dumps(vault, JSON_COMPACT);
	memset(&pe, 0, sizeof(pe));
	if (vtxt == NULL || (bs = binding_set_from_json(vtxt, strlen(vtxt), &pe)) == NULL) {
		snprintf(
		    err, errlen, "vault document: bindings: %s", vtxt ? pe.msg : "out of memory");
		goto out;
	}
	n = binding_credential_count(bs);
	if (json_array_size(vals) != n) {
		snprintf(err, errlen, "vault document: %zu values for %zu credentials",
		    json_array_size(vals), n);
		goto out;
	}
	if ((secrets = calloc(n ? n : 1, sizeof(*secrets))) == NULL) {
		snprintf(err, errlen, "vault document: out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if ((secrets[i] = vwire_value(json_array_get(vals, i))) == NULL) {
			snprintf(
			    err, errlen, "vault document: values[%zu] is not a valid value", i);
			goto out;
		}
	*snap = vault_snap_new(bs, secrets, n, (uint64_t)json_integer_value(rev), err, errlen);
	rc = *snap == NULL ? -1 : 0;
out:
	for (size_t i = 0; secrets != NULL && i < n; i++)
		secret_unref(secrets[i]);
	free(secrets);
	binding_set_free(bs);
	if (vtxt != NULL)
		vault_wire_free(vtxt, strlen(vtxt));
	json_decref(o);
	return rc;
}
