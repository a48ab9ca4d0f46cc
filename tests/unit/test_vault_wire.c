/*
 * Unit tests of vault/vwire.c, the vault document control hands to the
 * intercept: a snapshot survives the round trip (bindings, values with
 * bytes >= 0x80, revision, redaction), an empty vault is an empty
 * document, and a document that the API could not have produced (unknown
 * keys, a bad value, a count that does not match, bindings the API's
 * parser refuses) is refused without quoting any value.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "policy/binding.h"
#include "policy/policy.h"
#include "vault/redact.h"
#include "vault/secret.h"
#include "vault/snap.h"
#include "vault/vwire.h"

#define SECRET "sk-live-\xc3\xa9\xff-0123456789abcdef"

static const char base[] =
    "{\"credentials\":[{\"name\":\"tok\",\"source\":{\"type\":\"inline\",\"value\":\"x\"}},"
    "{\"name\":\"f\",\"source\":{\"type\":\"file\",\"path\":\"/run/secret\"}}],"
    "\"bindings\":[{\"name\":\"code\",\"match\":{\"hosts\":[\"code.example.com\"],"
    "\"paths\":[\"/v1/*\"]},\"auth\":{\"type\":\"bearer\",\"credential\":\"tok\"}},"
    "{\"name\":\"other\",\"match\":{\"hosts\":[\"api.example.com\"],\"paths\":[\"/x\"]},"
    "\"auth\":{\"type\":\"apiKey\",\"name\":\"X-Key\",\"credential\":\"f\"}}]}";

static struct vault_snap *
make_snap(void)
{
	struct policy_err pe;
	struct binding_set *bs = binding_set_from_json(base, strlen(base), &pe);
	struct secret *v[2];
	struct vault_snap *s;
	char err[256];

	assert_non_null(bs);
	v[0] = secret_new((const uint8_t *)SECRET, strlen(SECRET));
	v[1] = secret_new((const uint8_t *)"file-value-42", 13);
	assert_non_null(v[0]);
	assert_non_null(v[1]);
	s = vault_snap_new(bs, v, 2, 7, err, sizeof(err));
	assert_non_null(s);
	secret_unref(v[0]);
	secret_unref(v[1]);
	binding_set_free(bs);
	return s;
}

static void
test_round_trip(void **state)
{
	struct vault_snap *s = make_snap(), *t = NULL;
	struct evbuffer *b = evbuffer_new();
	char err[256] = "";
	size_t len, idx;
	int e;
	char *doc = vault_wire_encode(s, &len, &e);

	assert_non_null(doc);
	assert_int_equal(e, 0);
	/* The values travel as hex, never as they are. */
	assert_null(strstr(doc, "0123456789abcdef\""));
	assert_int_equal(vault_wire_decode(doc, len, &t, err, sizeof(err)), 0);
	assert_non_null(t);
	assert_int_equal(vault_snap_revision(t), 7);
	assert_int_equal(binding_set_count(vault_snap_bindings(t)), 2);
	assert_int_equal(binding_match(vault_snap_bindings(t), "https", "code.example.com", 443,
	                     "GET", "/v1/x", &idx),
	    BINDING_MATCH_ONE);
	assert_int_equal(vault_snap_inject(t, idx, b), 0);
	{
		size_t n = evbuffer_get_length(b);
		char *h = calloc(1, n + 1);

		evbuffer_copyout(b, h, n);
		assert_non_null(strstr(h, "Authorization: Bearer " SECRET "\r\n"));
		free(h);
	}
	assert_true(secret_equal_ct(vault_snap_secret(t, 0), vault_snap_secret(s, 0)));
	assert_true(secret_equal_ct(vault_snap_secret(t, 1), vault_snap_secret(s, 1)));
	assert_non_null(vault_snap_redact(t));
	vault_wire_free(doc, len);
	evbuffer_free(b);
	vault_snap_unref(s);
	vault_snap_unref(t);
}

static void
test_empty(void **state)
{
	struct vault_snap *t = (struct vault_snap *)1;
	char err[256];
	size_t len = 99;
	int e = -1;

	assert_null(vault_wire_encode(NULL, &len, &e));
	assert_int_equal(len, 0);
	assert_int_equal(e, 0);
	assert_int_equal(vault_wire_decode(NULL, 0, &t, err, sizeof(err)), 0);
	assert_null(t);
}

/* Decode must refuse s, and its error must not quote the value. */
static void
refused(const char *s)
{
	struct vault_snap *t = NULL;
	char err[256] = "";

	assert_int_equal(vault_wire_decode(s, strlen(s), &t, err, sizeof(err)), -1);
	assert_null(t);
	assert_true(err[0] != '\0');
	assert_null(strstr(err, "7365637265"));
	assert_null(strstr(err, "secret"));
}

#define VAULT                                                                                      \
	"\"vault\":{\"credentials\":[{\"name\":\"k\",\"source\":{\"type\":\"inline\","             \
	"\"value\":\"-\"}}],\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"a.example."      \
	"com\"],"                                                                                  \
	"\"paths\":[\"/p\"]},\"auth\":{\"type\":\"bearer\",\"credential\":\"k\"}}]}"

static void
test_refused(void **state)
{
	struct vault_snap *t = NULL;
	char err[256];
	static const char good[] =
	    "{\"v\":1,\"revision\":2," VAULT ",\"values\":[\"7365637265743031\"]}";

	assert_int_equal(vault_wire_decode(good, strlen(good), &t, err, sizeof(err)), 0);
	assert_non_null(t);
	vault_snap_unref(t);
	refused("[]");
	refused("{\"v\":2,\"revision\":2," VAULT ",\"values\":[\"7365637265743031\"]}");
	refused("{\"v\":1,\"revision\":0," VAULT ",\"values\":[\"7365637265743031\"]}");
	refused("{\"v\":1,\"revision\":2," VAULT ",\"values\":[\"7365637265743031\"],\"x\":1}");
	/* More or fewer values than credentials. */
	refused("{\"v\":1,\"revision\":2," VAULT ",\"values\":[]}");
	refused("{\"v\":1,\"revision\":2," VAULT ",\"values\":[\"7365637265743031\",\"6161\"]}");
	/* Not hex, odd length, upper case, a value a header cannot carry (CR LF). */
	refused("{\"v\":1,\"revision\":2," VAULT ",\"values\":[\"zz65637265743031\"]}");
	refused("{\"v\":1,\"revision\":2," VAULT ",\"values\":[\"736563726574303\"]}");
	refused("{\"v\":1,\"revision\":2," VAULT ",\"values\":[\"7365637265743031AB\"]}");
	refused("{\"v\":1,\"revision\":2," VAULT ",\"values\":[\"736563720d0a7265\"]}");
	/* Bindings the API would refuse (a credential nobody names, a duplicate key). */
	refused(
	    "{\"v\":1,\"revision\":2,\"vault\":{\"credentials\":[],\"bindings\":[{\"name\":\"b\","
	    "\"match\":{\"hosts\":[\"a.example.com\"]},\"auth\":{\"type\":\"bearer\","
	    "\"credential\":\"k\"}}]},\"values\":[]}");
	refused("{\"v\":1,\"v\":1,\"revision\":2," VAULT ",\"values\":[\"7365637265743031\"]}");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_empty),
	    cmocka_unit_test(test_refused),
	};

	vault_json_wipe_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
