/*
 * Unit tests of vault/store.c without HTTP: the OpenSandbox semantics of
 * POST and PATCH (revisions, expectedRevision, one operation per name,
 * delete/replace/add order), coverage by the policy, the API token never
 * a credential, nothing changed on any error, and no value in the state.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "policy/policy.h"
#include "vault/snap.h"
#include "vault/store.h"

#define SECRET "sk-live-0123456789abcdef"
#define TOKEN "the-control-api-token"

static const char base[] =
    "{\"credentials\":[{\"name\":\"tok\",\"source\":{\"type\":\"inline\",\"value\":\"" SECRET
    "\"}}],"
    "\"bindings\":[{\"name\":\"code\",\"match\":{\"hosts\":[\"code.example.com\"],"
    "\"paths\":[\"/v1/*\"]},\"auth\":{\"type\":\"bearer\",\"credential\":\"tok\"}}]}";

static json_t *
J(const char *s)
{
	json_error_t je;
	json_t *j = json_loads(s, 0, &je);

	if (j == NULL)
		fail_msg("bad test JSON: %s", je.text);
	return j;
}

struct fix {
	struct policy *p;
	struct vault_store_ctx cx;
	struct vault_store *vs;
};

static void
fix_init(struct fix *f)
{
	static const char pol[] =
	    "{\"egress\":[{\"action\":\"allow\",\"target\":\"*.example.com\"}]}";
	struct policy_err err;

	f->p = policy_from_json(pol, strlen(pol), NULL, &err);
	assert_non_null(f->p);
	f->cx.policy = f->p;
	f->cx.token = TOKEN;
	f->vs = vault_store_new();
	assert_non_null(f->vs);
}

static void
fix_fini(struct fix *f)
{
	vault_store_free(f->vs);
	policy_free(f->p);
}

/* Run a mutation; returns the status, checks snap iff success, frees it. */
static int
run(struct fix *f, bool create, const char *body, char *err, size_t errlen)
{
	struct vault_snap *snap = NULL;
	json_t *j = J(body);
	int st = create ? vault_store_create(f->vs, j, &f->cx, &snap, err, errlen)
	                : vault_store_patch(f->vs, j, &f->cx, &snap, err, errlen);

	json_decref(j);
	assert_int_equal(snap != NULL, st == 200 || st == 201);
	if (snap != NULL) {
		assert_int_equal(vault_snap_revision(snap), vault_store_revision(f->vs));
		vault_snap_unref(snap);
	} else
		assert_true(err[0] != '\0');
	return st;
}

static char *
state_text(struct fix *f, const struct vault_snap *active)
{
	json_t *s = vault_store_state(f->vs, active);
	char *t = json_dumps(s, JSON_COMPACT | JSON_SORT_KEYS);

	json_decref(s);
	assert_non_null(t);
	return t;
}

static void
test_create_and_patch(void **state)
{
	struct fix f;
	char err[512];

	fix_init(&f);
	assert_false(vault_store_exists(f.vs));
	assert_int_equal(run(&f, false, "{}", err, sizeof(err)), 404);
	assert_int_equal(run(&f, true, base, err, sizeof(err)), 201);
	assert_true(vault_store_exists(f.vs));
	assert_int_equal(vault_store_revision(f.vs), 1);
	assert_int_equal(run(&f, true, base, err, sizeof(err)), 409);

	/* A stale expectedRevision, then the right one. */
	assert_int_equal(run(&f, false, "{\"expectedRevision\":7}", err, sizeof(err)), 409);
	assert_int_equal(vault_store_revision(f.vs), 1);
	assert_int_equal(run(&f, false,
	                     "{\"expectedRevision\":1,\"credentials\":{\"add\":[{\"name\":\"b\","
	                     "\"source\":{\"type\":\"inline\",\"value\":\"another-secret-1\"}}]}}",
	                     err, sizeof(err)),
	    200);
	assert_int_equal(vault_store_revision(f.vs), 2);
	/* add of an existing name is a conflict; delete of a missing one is refused. */
	assert_int_equal(run(&f, false,
	                     "{\"credentials\":{\"add\":[{\"name\":\"b\",\"source\":{\"type\":"
	                     "\"inline\",\"value\":\"another-secret-2\"}}]}}",
	                     err, sizeof(err)),
	    409);
	assert_int_equal(
	    run(&f, false, "{\"credentials\":{\"delete\":[\"nope\"]}}", err, sizeof(err)), 400);
	/* One name in two operations of one request. */
	assert_int_equal(run(&f, false,
	                     "{\"credentials\":{\"delete\":[\"b\"],\"replace\":[{\"name\":\"b\","
	                     "\"source\":{\"type\":\"inline\",\"value\":\"another-secret-3\"}}]}}",
	                     err, sizeof(err)),
	    400);
	/* Deleting a credential a binding uses leaves a dangling reference: refused. */
	assert_int_equal(
	    run(&f, false, "{\"credentials\":{\"delete\":[\"tok\"]}}", err, sizeof(err)), 400);
	assert_int_equal(vault_store_revision(f.vs), 2);
	/* Unknown fields are refused, their names not echoed. */
	assert_int_equal(run(&f, false, "{\"" SECRET "\":1}", err, sizeof(err)), 400);
	assert_null(strstr(err, SECRET));
	fix_fini(&f);
}

static void
test_refusals_change_nothing(void **state)
{
	struct fix f;
	char err[512], *before, *after;
	struct vault_snap *active = NULL;
	json_t *j = J(base);

	fix_init(&f);
	assert_int_equal(vault_store_create(f.vs, j, &f.cx, &active, err, sizeof(err)), 201);
	json_decref(j);
	before = state_text(&f, active);
	/* A binding the policy does not cover (a host outside *.example.com). */
	assert_int_equal(run(&f, false,
	                     "{\"bindings\":{\"add\":[{\"name\":\"x\",\"match\":{\"hosts\":["
	                     "\"api.other.test\"],\"paths\":[\"/\"]},\"auth\":{\"type\":"
	                     "\"bearer\",\"credential\":\"tok\"}}]}}",
	                     err, sizeof(err)),
	    400);
	/* The API token is never a credential, whatever the source. */
	assert_int_equal(run(&f, false,
	                     "{\"credentials\":{\"replace\":[{\"name\":\"tok\",\"source\":{"
	                     "\"type\":\"inline\",\"value\":\"" TOKEN "\"}}]}}",
	                     err, sizeof(err)),
	    400);
	assert_null(strstr(err, TOKEN));
	after = state_text(&f, active);
	assert_string_equal(before, after);
	assert_int_equal(vault_store_revision(f.vs), 1);
	/* The state names credentials but never holds a value. */
	assert_non_null(strstr(after, "\"tok\""));
	assert_null(strstr(after, SECRET));
	free(before);
	free(after);
	vault_snap_unref(active);
	vault_store_clear(f.vs);
	assert_false(vault_store_exists(f.vs));
	assert_int_equal(vault_store_revision(f.vs), 0);
	fix_fini(&f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_create_and_patch),
	    cmocka_unit_test(test_refusals_change_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
