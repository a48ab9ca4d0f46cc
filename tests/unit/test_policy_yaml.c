/*
 * Unit tests of the YAML policy file (policy_from_yaml_*): every fixture
 * in tests/data/policy/invalid/ carries its expected error in a first
 * line "# expect: LINE:COL: KEY: MESSAGE" and must fail exactly there;
 * every fixture in valid/ and every example must load.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "policy/binding.h"
#include "policy/policy.h"

static const char *
data_dir(void)
{
	const char *d = getenv("EGRESSD_TEST_DATA");
	return d ? d : "tests/data";
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted *.yaml names of dir; returns the count. */
static size_t
list_yaml(const char *dir, char ***out)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t n = 0, cap = 0;
	char **v = NULL;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);
		if (l < 6 || strcmp(e->d_name + l - 5, ".yaml") != 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			v = realloc(v, cap * sizeof(*v));
			assert_non_null(v);
		}
		v[n++] = strdup(e->d_name);
	}
	closedir(d);
	qsort(v, n, sizeof(*v), name_cmp);
	*out = v;
	return n;
}

static void
test_invalid_fixtures(void **state)
{
	char dir[512], path[1024], head[512];
	char **names;
	size_t n, bad = 0;

	snprintf(dir, sizeof(dir), "%s/policy/invalid", data_dir());
	n = list_yaml(dir, &names);
	assert_true(n >= 80);
	for (size_t i = 0; i < n; i++) {
		unsigned line, col;
		char key[128], msg[256];
		struct policy_err err;
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		f = fopen(path, "r");
		assert_non_null(f);
		assert_non_null(fgets(head, sizeof(head), f));
		fclose(f);
		head[strcspn(head, "\n")] = '\0';
		if (sscanf(head, "# expect: %u:%u: %127[^:]: %255[^\n]", &line, &col, key, msg) !=
		    4)
			fail_msg("%s: bad expect line", names[i]);
		struct policy *p = policy_from_yaml_file(path, NULL, &err);
		if (p != NULL) {
			print_error("%s: loaded but should fail with %s\n", names[i], msg);
			policy_free(p);
			bad++;
			free(names[i]);
			continue;
		}
		bool ok =
		    err.line == line && err.col == col && strstr(err.msg, msg) != NULL &&
		    (strcmp(key, "-") == 0 ? err.key[0] == '\0' || err.code == POLICY_ERR_SYNTAX
		                           : strcmp(err.key, key) == 0);
		if (!ok) {
			print_error("%s: got %u:%u: %s: %s; want %u:%u: %s: %s\n", names[i],
			    err.line, err.col, err.key, err.msg, line, col, key, msg);
			bad++;
		}
		assert_string_equal(err.file, path);
		/* the message never contains a secret written in the file */
		assert_null(strstr(err.msg, "hunter2"));
		free(names[i]);
	}
	free(names);
	assert_int_equal(bad, 0);
}

static void
load_dir_ok(const char *dir)
{
	char path[1024];
	char **names;
	size_t n = list_yaml(dir, &names);

	for (size_t i = 0; i < n; i++) {
		struct policy_err err;
		char line[800];
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (strstr(names[i], ".cases.") != NULL) {
			free(names[i]);
			continue;
		}
		struct policy *p = policy_from_yaml_file(path, NULL, &err);
		if (p == NULL) {
			policy_err_format(&err, line, sizeof(line));
			fail_msg("%s", line);
		}
		policy_free(p);
		free(names[i]);
	}
	free(names);
}

static void
test_valid_fixtures_and_examples(void **state)
{
	char dir[512];

	snprintf(dir, sizeof(dir), "%s/policy/valid", data_dir());
	load_dir_ok(dir);
	snprintf(dir, sizeof(dir), "%s/../../examples", data_dir());
	load_dir_ok(dir);
}

static void
test_full_semantics(void **state)
{
	char path[512];
	struct policy_err err;
	struct policy_decision d;
	uint8_t a[16];

	snprintf(path, sizeof(path), "%s/policy/valid/full.yaml", data_dir());
	struct policy *p = policy_from_yaml_file(path, NULL, &err);
	assert_non_null(p);
	const struct policy_dns *dns = policy_dns(p);
	assert_int_equal(dns->ttl_min, 30);
	assert_int_equal(dns->ttl_max, 600);
	assert_false(dns->filter_private);
	policy_decide_name(p, "api.example.com", &d);
	assert_int_equal(d.action, POLICY_ALLOW);
	assert_int_equal(d.nports, 3); /* 443, 8000-8100, 8443 */
	policy_decide_name(p, "blocked.example", &d);
	assert_int_equal(d.action, POLICY_DENY);
	assert_int_equal(d.origin, POLICY_ORIGIN_USER);
	/* the IPv4-mapped deny is stored and enforced as IPv4 */
	inet_pton(AF_INET, "198.51.100.7", a);
	policy_decide_addr(p, AF_INET, a, 443, 6, &d);
	assert_int_equal(d.action, POLICY_DENY);
	assert_string_equal(d.target, "198.51.100.7");
	const struct binding_set *bs = policy_bindings(p);
	assert_non_null(bs);
	assert_int_equal(binding_set_count(bs), 2);
	struct binding_credential_info ci;
	assert_int_equal(binding_credential_get(bs, 1, &ci), 0);
	assert_int_equal(ci.source, BINDING_SOURCE_FILE);
	assert_string_equal(ci.ref, "/run/secrets/registry-key");
	policy_free(p);
}

static void
test_buffers(void **state)
{
	struct policy_err err;
	struct policy *p;
	const char *y;

	/* a quoted number is a string, a plain one a number: "443" ports work either way */
	y = "egress:\n  - {action: allow, target: a.example, ports: [\"443\", 80]}\n";
	p = policy_from_yaml_buf("buf", y, strlen(y), NULL, &err);
	assert_non_null(p);
	policy_free(p);
	/* a plain scalar that looks like a bool is not a target */
	y = "egress:\n  - {action: allow, target: true}\n";
	assert_null(policy_from_yaml_buf("buf", y, strlen(y), NULL, &err));
	assert_string_equal(err.file, "buf");
	assert_int_equal(err.line, 2);
	/* limits apply to files too */
	struct policy_limits lim = {.max_rules = 1};
	y = "egress:\n  - {action: allow, target: a.example}\n  - {action: allow, target: "
	    "b.example}\n";
	assert_null(policy_from_yaml_buf("buf", y, strlen(y), &lim, &err));
	assert_int_equal(err.code, POLICY_ERR_TOO_LARGE);
	assert_int_equal(err.line, 1);
	/* embedded NUL in the buffer itself */
	const char nul[] = "defaultAction: de\0ny\n";
	assert_null(policy_from_yaml_buf("buf", nul, sizeof(nul) - 1, NULL, &err));
	/* a missing file */
	assert_null(policy_from_yaml_file("/nonexistent/policy.yaml", NULL, &err));
	assert_int_equal(err.code, POLICY_ERR_IO);
	assert_string_equal(err.file, "/nonexistent/policy.yaml");
	/* over the size limit */
	size_t big = POLICY_MAX_FILE_BYTES + 1;
	char *b = malloc(big);
	memset(b, '#', big);
	assert_null(policy_from_yaml_buf("buf", b, big, NULL, &err));
	assert_int_equal(err.code, POLICY_ERR_TOO_LARGE);
	free(b);
	/* error formatting */
	y = "defaultAction: deny\negress:\n  - action: allow\n    target: \"a b\"\n";
	assert_null(policy_from_yaml_buf("p.yaml", y, strlen(y), NULL, &err));
	char line[800];
	policy_err_format(&err, line, sizeof(line));
	assert_non_null(strstr(line, "p.yaml:4:13: egress[0].target: not a valid"));
	assert_null(strstr(line, "a b")); /* errors name the field, never echo its text */
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_invalid_fixtures),
	    cmocka_unit_test(test_valid_fixtures_and_examples),
	    cmocka_unit_test(test_full_semantics),
	    cmocka_unit_test(test_buffers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
