/*
 * Unit tests of vault/secret: copying, constant-time comparison, rendering
 * (raw, base64 for Basic auth), file sources (newline stripping, size cap,
 * non-regular files, Kubernetes-style symlink rotation) and env sources
 * (read once, scrubbed from the environment).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "vault/secret.h"

static char tmpdir[] = "/tmp/test_secret.XXXXXX";

static int
setup(void **state)
{
	return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int
teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static void
tpath(char *buf, size_t cap, const char *name)
{
	snprintf(buf, cap, "%s/%s", tmpdir, name);
}

static void
write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static struct secret *
mk(const char *v)
{
	struct secret *s = secret_new((const uint8_t *)v, strlen(v));

	assert_non_null(s);
	return s;
}

/* Asserts that s holds exactly v, through the only way out: a copy. */
static void
assert_secret_is(const struct secret *s, const void *v, size_t len)
{
	uint8_t buf[SECRET_MAX_BYTES];

	assert_int_equal(secret_len(s), len);
	assert_int_equal(secret_append_raw(s, buf, sizeof(buf)), 0);
	assert_memory_equal(buf, v, len);
}

static void
test_new_and_limits(void **state)
{
	uint8_t *big = calloc(1, SECRET_MAX_BYTES + 1);
	struct secret *s;

	assert_non_null(big);
	assert_null(secret_new((const uint8_t *)"", 0));
	assert_null(secret_new(NULL, 4));
	assert_null(secret_new(big, SECRET_MAX_BYTES + 1));
	s = secret_new(big, SECRET_MAX_BYTES);
	assert_non_null(s);
	assert_int_equal(secret_len(s), SECRET_MAX_BYTES);
	secret_unref(s);
	/* The secret owns a copy: changing the source does not change it. */
	memcpy(big, "abcdef", 6);
	s = secret_new(big, 6);
	assert_non_null(s);
	big[0] = 'X';
	assert_secret_is(s, "abcdef", 6);
	secret_unref(s);
	secret_unref(NULL);
	free(big);
}

static void
test_equal_ct(void **state)
{
	struct secret *a = mk("token-123"), *b = mk("token-123"), *c = mk("token-124");
	struct secret *d = mk("token-12");

	assert_true(secret_equal_ct(a, b));
	assert_false(secret_equal_ct(a, c));
	assert_false(secret_equal_ct(a, d));
	assert_false(secret_equal_ct(d, a));
	secret_unref(a);
	secret_unref(b);
	secret_unref(c);
	secret_unref(d);
}

static void
test_append_raw_and_evbuffer(void **state)
{
	struct secret *s = mk("Bearer-xyz");
	struct evbuffer *eb = evbuffer_new();
	uint8_t buf[16];
	char out[32];

	memset(buf, '#', sizeof(buf));
	assert_int_equal(secret_append_raw(s, buf, 9), -1);
	assert_int_equal(buf[0], '#'); /* nothing written on refusal */
	assert_int_equal(secret_append_raw(s, buf, 10), 0);
	assert_memory_equal(buf, "Bearer-xyz", 10);
	assert_int_equal(buf[10], '#'); /* no NUL, no overrun */
	assert_non_null(eb);
	assert_int_equal(evbuffer_add(eb, "A: ", 3), 0);
	assert_int_equal(secret_append_to(s, eb), 0);
	assert_int_equal(evbuffer_get_length(eb), 13);
	assert_int_equal(evbuffer_remove(eb, out, sizeof(out)), 13);
	assert_memory_equal(out, "A: Bearer-xyz", 13);
	evbuffer_free(eb);
	secret_unref(s);
}

static void
test_base64(void **state)
{
	static const struct {
		const char *pre, *val, *b64;
	} v[] = {
	    {"", "f", "Zg=="},
	    {"", "fo", "Zm8="},
	    {"", "foo", "Zm9v"},
	    {"", "foobar", "Zm9vYmFy"},
	    {"user:", "pass", "dXNlcjpwYXNz"},
	    {"Aladdin:", "open sesame", "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="},
	    {"fo", "o", "Zm9v"},
	};
	struct evbuffer *eb = evbuffer_new();
	uint8_t buf[64];
	size_t i, n, pl;

	assert_non_null(eb);
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		struct secret *s = mk(v[i].val);

		pl = strlen(v[i].pre);
		n = strlen(v[i].b64);
		assert_int_equal(secret_base64_len(s, pl), n);
		memset(buf, '#', sizeof(buf));
		assert_int_equal(
		    secret_append_base64_raw(s, (const uint8_t *)v[i].pre, pl, buf, n - 1), -1);
		assert_int_equal(
		    secret_append_base64_raw(s, (const uint8_t *)v[i].pre, pl, buf, n), 0);
		assert_memory_equal(buf, v[i].b64, n);
		assert_int_equal(buf[n], '#');
		assert_int_equal(secret_append_base64(s, (const uint8_t *)v[i].pre, pl, eb), 0);
		assert_int_equal(evbuffer_get_length(eb), n);
		assert_int_equal(evbuffer_remove(eb, buf, sizeof(buf)), (int)n);
		assert_memory_equal(buf, v[i].b64, n);
		secret_unref(s);
	}
	evbuffer_free(eb);
}

static void
test_from_file(void **state)
{
	char p[256];
	struct secret *s;
	int err = 0;
	char *big;

	tpath(p, sizeof(p), "nl");
	write_file(p, "abc\n", 4);
	s = secret_from_file(p, &err);
	assert_non_null(s);
	assert_secret_is(s, "abc", 3);
	secret_unref(s);

	tpath(p, sizeof(p), "crlf");
	write_file(p, "abc\r\n", 5);
	s = secret_from_file(p, &err);
	assert_non_null(s);
	assert_secret_is(s, "abc", 3);
	secret_unref(s);

	/* Only one trailing newline is stripped: a second one is part of the
	 * value, which a header cannot carry, so the file is refused. */
	tpath(p, sizeof(p), "two");
	write_file(p, "ab\n\n", 4);
	err = 0;
	assert_null(secret_from_file(p, &err));
	assert_int_equal(err, EILSEQ);
	tpath(p, sizeof(p), "inner");
	write_file(p, "a\tb\x80\xff~\n", 7);
	s = secret_from_file(p, &err);
	assert_non_null(s);
	assert_secret_is(s, "a\tb\x80\xff~", 6);
	secret_unref(s);
	/* Every byte outside field-value, inside a file value, is refused. */
	for (int b = 0; b < 256; b++) {
		uint8_t v[4] = {'a', (uint8_t)b, 'z', '\n'};
		bool ok = b == '\t' || b == ' ' || (b >= 0x21 && b <= 0x7e) || b >= 0x80;
		tpath(p, sizeof(p), "byte");
		write_file(p, v, sizeof(v));
		err = 0;
		s = secret_from_file(p, &err);
		if ((s != NULL) != ok)
			print_error("byte 0x%02x: loaded=%d\n", b, s != NULL);
		assert_int_equal(s != NULL, ok);
		if (!ok)
			assert_int_equal(err, EILSEQ);
		secret_unref(s);
	}

	tpath(p, sizeof(p), "empty");
	write_file(p, "\n", 1);
	assert_null(secret_from_file(p, &err));
	assert_int_equal(err, ENODATA);

	/* Size cap: exactly the maximum (plus newline) loads, one more does not. */
	big = malloc(SECRET_MAX_BYTES + 2);
	assert_non_null(big);
	memset(big, 'k', SECRET_MAX_BYTES + 2);
	big[SECRET_MAX_BYTES] = '\n';
	tpath(p, sizeof(p), "max");
	write_file(p, big, SECRET_MAX_BYTES + 1);
	s = secret_from_file(p, &err);
	assert_non_null(s);
	assert_int_equal(secret_len(s), SECRET_MAX_BYTES);
	secret_unref(s);
	big[SECRET_MAX_BYTES] = 'k';
	tpath(p, sizeof(p), "toobig");
	write_file(p, big, SECRET_MAX_BYTES + 1);
	assert_null(secret_from_file(p, &err));
	assert_int_equal(err, EFBIG);
	free(big);

	tpath(p, sizeof(p), "missing");
	assert_null(secret_from_file(p, &err));
	assert_int_equal(err, ENOENT);
	assert_null(secret_from_file(tmpdir, &err));
	assert_int_equal(err, EINVAL);
	/* A FIFO planted at the path is refused without blocking. */
	tpath(p, sizeof(p), "fifo");
	assert_int_equal(mkfifo(p, 0600), 0);
	assert_null(secret_from_file(p, &err));
	assert_int_equal(err, EINVAL);
}

static void
test_file_rotation_symlink_swap(void **state)
{
	char d1[256], d2[256], data[256], tmp[256], tok[256], f1[256], f2[256];
	struct secret_stamp st = {0};
	struct secret *s;
	int err;

	/* The Kubernetes layout: token -> ..data/token, ..data -> v1. */
	tpath(d1, sizeof(d1), "v1");
	tpath(d2, sizeof(d2), "v2");
	assert_int_equal(mkdir(d1, 0700), 0);
	assert_int_equal(mkdir(d2, 0700), 0);
	tpath(f1, sizeof(f1), "v1/token");
	tpath(f2, sizeof(f2), "v2/token");
	write_file(f1, "old-token\n", 10);
	write_file(f2, "new-token\n", 10); /* same size on purpose */
	tpath(data, sizeof(data), "..data");
	tpath(tmp, sizeof(tmp), "..data_tmp");
	tpath(tok, sizeof(tok), "token");
	assert_int_equal(symlink("v1", data), 0);
	assert_int_equal(symlink("..data/token", tok), 0);

	assert_true(secret_file_changed(tok, &st)); /* first look */
	assert_false(secret_file_changed(tok, &st));
	s = secret_from_file_stamp(tok, &st, &err);
	assert_non_null(s);
	assert_secret_is(s, "old-token", 9);
	secret_unref(s);
	assert_false(secret_file_changed(tok, &st));

	/* Atomic swap of ..data, as the kubelet does. */
	assert_int_equal(symlink("v2", tmp), 0);
	assert_int_equal(rename(tmp, data), 0);
	assert_true(secret_file_changed(tok, &st));
	assert_false(secret_file_changed(tok, &st));
	s = secret_from_file(tok, &err);
	assert_non_null(s);
	assert_secret_is(s, "new-token", 9);
	secret_unref(s);

	/* In-place rewrite with another size is seen too. */
	write_file(f2, "newer-token\n", 12);
	assert_true(secret_file_changed(tok, &st));
	/* Removal is a change; staying removed is not. */
	assert_int_equal(unlink(f2), 0);
	assert_true(secret_file_changed(tok, &st));
	assert_false(st.valid);
	assert_false(secret_file_changed(tok, &st));
}

static void
test_from_env(void **state)
{
	static char envbuf[] = "EGRESSD_TEST_SECRET_P=put-env-value-42";
	const char *val = envbuf + strlen("EGRESSD_TEST_SECRET_P=");
	struct secret *s;
	size_t i;
	int err = 0;

	assert_int_equal(setenv("EGRESSD_TEST_SECRET", "env-secret-value", 1), 0);
	s = secret_from_env("EGRESSD_TEST_SECRET", &err);
	assert_non_null(s);
	assert_secret_is(s, "env-secret-value", 16);
	secret_unref(s);
	/* Read once: the variable is gone afterwards. */
	assert_null(getenv("EGRESSD_TEST_SECRET"));
	assert_null(secret_from_env("EGRESSD_TEST_SECRET", &err));
	assert_int_equal(err, ENOENT);

	/* The environment block itself is wiped, not only unlinked. */
	assert_int_equal(putenv(envbuf), 0);
	s = secret_from_env("EGRESSD_TEST_SECRET_P", &err);
	assert_non_null(s);
	assert_secret_is(s, "put-env-value-42", 16);
	secret_unref(s);
	for (i = 0; i < 16; i++)
		assert_int_equal(val[i], 0);
	assert_null(getenv("EGRESSD_TEST_SECRET_P"));

	assert_null(secret_from_env("A=B", &err));
	assert_int_equal(err, EINVAL);
	assert_int_equal(setenv("EGRESSD_TEST_EMPTY", "", 1), 0);
	assert_null(secret_from_env("EGRESSD_TEST_EMPTY", &err));
	assert_int_equal(err, ENODATA);
	assert_null(getenv("EGRESSD_TEST_EMPTY"));
}

/* The header field-value rule (RFC 9110) over every byte and position. */
static void
test_value_ok(void **state)
{
	for (int b = 0; b < 256; b++) {
		uint8_t one[1] = {(uint8_t)b}, mid[3] = {'x', (uint8_t)b, 'y'};
		uint8_t head[2] = {(uint8_t)b, 'y'}, tail[2] = {'x', (uint8_t)b};
		bool vchar = (b >= 0x21 && b <= 0x7e) || b >= 0x80; /* VCHAR / obs-text */
		bool ws = b == ' ' || b == '\t';

		assert_int_equal(secret_value_ok(one, 1), vchar);
		assert_int_equal(secret_value_ok(mid, 3), vchar || ws);
		/* white space only inside: a parser trims it at either end */
		assert_int_equal(secret_value_ok(head, 2), vchar);
		assert_int_equal(secret_value_ok(tail, 2), vchar);
	}
	assert_false(secret_value_ok((const uint8_t *)"a\r\nX-Evil: 1", 14));
	assert_false(secret_value_ok((const uint8_t *)"tok\0en", 6));
	assert_false(secret_value_ok((const uint8_t *)"", 0));
	assert_false(secret_value_ok(NULL, 1));
	assert_true(secret_value_ok((const uint8_t *)"Bearer-ok value", 15));
}

static void
test_env_bad_bytes(void **state)
{
	int err = 0;

	/* Refused, and still taken out of the environment. */
	assert_int_equal(setenv("EGRESSD_TEST_CRLF", "tok\r\nX-Injected: 1", 1), 0);
	assert_null(secret_from_env("EGRESSD_TEST_CRLF", &err));
	assert_int_equal(err, EILSEQ);
	assert_null(getenv("EGRESSD_TEST_CRLF"));
	assert_int_equal(setenv("EGRESSD_TEST_TRAIL", "tok ", 1), 0);
	assert_null(secret_from_env("EGRESSD_TEST_TRAIL", &err));
	assert_int_equal(err, EILSEQ);
}

static void
test_refcount(void **state)
{
	struct secret *s = mk("shared-value");
	struct secret *r = secret_ref(s);

	assert_ptr_equal(r, s);
	secret_unref(s);
	/* Still alive through the second reference (ASan checks the rest). */
	assert_secret_is(r, "shared-value", 12);
	secret_unref(r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_new_and_limits),
	    cmocka_unit_test(test_equal_ct),
	    cmocka_unit_test(test_append_raw_and_evbuffer),
	    cmocka_unit_test(test_base64),
	    cmocka_unit_test(test_from_file),
	    cmocka_unit_test(test_file_rotation_symlink_swap),
	    cmocka_unit_test(test_from_env),
	    cmocka_unit_test(test_value_ok),
	    cmocka_unit_test(test_env_bad_bytes),
	    cmocka_unit_test(test_refcount),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
