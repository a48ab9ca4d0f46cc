/*
 * Unit tests of egressd/dns/dnstunnel.c: distinct names under a wildcard
 * rule are counted exactly, so a name that collides with a counted one
 * under the old 32-bit FNV-1a still counts as a new name; the window
 * resets the count.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "egressd/dns/dnstunnel.h"

#define RULE "*.wild.example.test"
#define SEARCH_MAX (1u << 19) /* names tried for an FNV-1a collision */

/* The hash the tunnel counter used to keep (32-bit FNV-1a, 0 mapped to 1). */
static uint32_t
fnv1a32(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h ? h : 1;
}

struct hpair {
	uint32_t h;
	uint32_t i;
};

static int
hpair_cmp(const void *a, const void *b)
{
	const struct hpair *x = a, *y = b;

	if (x->h != y->h)
		return x->h < y->h ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

static void
collide_name(uint32_t i, char *out, size_t cap)
{
	snprintf(out, cap, "p%08x.wild.example.test", i);
}

/* Two different names with one FNV-1a value: a birthday search, bounded. */
static void
find_fnv_collision(char *a, char *b, size_t cap)
{
	struct hpair *v = calloc(SEARCH_MAX, sizeof(*v));
	char name[64];

	assert_non_null(v);
	for (uint32_t i = 0; i < SEARCH_MAX; i++) {
		collide_name(i, name, sizeof(name));
		v[i].h = fnv1a32(name);
		v[i].i = i;
	}
	qsort(v, SEARCH_MAX, sizeof(*v), hpair_cmp);
	for (uint32_t i = 1; i < SEARCH_MAX; i++) {
		if (v[i].h == v[i - 1].h) {
			collide_name(v[i - 1].i, a, cap);
			collide_name(v[i].i, b, cap);
			free(v);
			return;
		}
	}
	free(v);
	fail_msg("no FNV-1a collision in %u names", SEARCH_MAX);
}

static void
test_fnv_collision_counts_twice(void **state)
{
	struct dnstunnel *t = dnstunnel_new();
	char a[64], b[64], name[64];

	assert_non_null(t);
	find_fnv_collision(a, b, sizeof(a));
	assert_string_not_equal(a, b);
	assert_int_equal(fnv1a32(a), fnv1a32(b));
	/* Fill the window to the limit, the last name being `a`. */
	for (int i = 0; i < DNSTUNNEL_NAMES - 1; i++) {
		snprintf(name, sizeof(name), "f%d.wild.example.test", i);
		assert_true(dnstunnel_ok(t, RULE, name, 100));
	}
	assert_true(dnstunnel_ok(t, RULE, a, 100));
	/* `a` again is the same name: free. */
	assert_true(dnstunnel_ok(t, RULE, a, 100));
	/* `b` is a new name past the limit, even though it collides with `a`. */
	assert_false(dnstunnel_ok(t, RULE, b, 100));
	dnstunnel_free(t);
}

static void
test_limit_and_window(void **state)
{
	struct dnstunnel *t = dnstunnel_new();
	char name[64];

	assert_non_null(t);
	for (int i = 0; i < DNSTUNNEL_NAMES; i++) {
		snprintf(name, sizeof(name), "n%d.wild.example.test", i);
		assert_true(dnstunnel_ok(t, RULE, name, 5));
	}
	assert_false(dnstunnel_ok(t, RULE, "over.wild.example.test", 5));
	/* Another rule has a count of its own. */
	assert_true(dnstunnel_ok(t, "*.other.example.test", "x.other.example.test", 5));
	/* Still refused inside the window, allowed in the next one. */
	assert_false(dnstunnel_ok(t, RULE, "over.wild.example.test", 5 + DNSTUNNEL_WINDOW_S - 1));
	assert_true(dnstunnel_ok(t, RULE, "over.wild.example.test", 5 + DNSTUNNEL_WINDOW_S));
	dnstunnel_free(t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fnv_collision_counts_twice),
	    cmocka_unit_test(test_limit_and_window),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
