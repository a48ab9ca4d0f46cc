/*
 * Unit tests of the persisted policy's integrity tag (safefile_tag): keyed
 * by the token, bound to every byte, compared in constant time, and no tag
 * without a key.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "egressd/common/safefile.h"

static void
test_tag(void **state)
{
	static const char doc[] = "{\"defaultAction\":\"deny\",\"egress\":null}\n";
	char a[SAFEFILE_TAG_HEX + 1], b[SAFEFILE_TAG_HEX + 1], line[SAFEFILE_TAG_HEX + 2];
	char evil[sizeof(doc)];

	(void)state;
	assert_int_equal(safefile_tag("token-1", doc, sizeof(doc) - 1, a), 0);
	assert_int_equal(strlen(a), SAFEFILE_TAG_HEX);
	assert_int_equal(strspn(a, "0123456789abcdef"), SAFEFILE_TAG_HEX);
	assert_true(safefile_tag_ok("token-1", doc, sizeof(doc) - 1, a, strlen(a)));
	/* As written to <file>.hmac: with its newline. */
	snprintf(line, sizeof(line), "%s\n", a);
	assert_true(safefile_tag_ok("token-1", doc, sizeof(doc) - 1, line, strlen(line)));
	/* Another key, another tag. */
	assert_int_equal(safefile_tag("token-2", doc, sizeof(doc) - 1, b), 0);
	assert_string_not_equal(a, b);
	assert_false(safefile_tag_ok("token-2", doc, sizeof(doc) - 1, a, strlen(a)));
	/* One byte changed, or one byte fewer. */
	memcpy(evil, doc, sizeof(doc));
	evil[3] ^= 1;
	assert_false(safefile_tag_ok("token-1", evil, sizeof(doc) - 1, a, strlen(a)));
	assert_false(safefile_tag_ok("token-1", doc, sizeof(doc) - 2, a, strlen(a)));
	/* A short, long or altered tag. */
	assert_false(safefile_tag_ok("token-1", doc, sizeof(doc) - 1, a, strlen(a) - 1));
	assert_false(safefile_tag_ok("token-1", doc, sizeof(doc) - 1, line, strlen(line) + 0 - 2));
	a[10] = a[10] == '0' ? '1' : '0';
	assert_false(safefile_tag_ok("token-1", doc, sizeof(doc) - 1, a, strlen(a)));
	/* No key, no tag. */
	assert_int_equal(safefile_tag("", doc, sizeof(doc) - 1, b), -1);
	assert_int_equal(safefile_tag(NULL, doc, sizeof(doc) - 1, b), -1);
	assert_false(safefile_tag_ok("", doc, sizeof(doc) - 1, line, strlen(line)));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tag),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
