/*
 * Unit tests of the workload-side session ticket keys (vault/icpt_tickets.c):
 * random per interceptor, rotated on schedule with the previous key kept
 * for decryption one period (its tickets renewed), older ones forgotten.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "vault/icpt_internal.h"

static void
test_rotation(void **state)
{
	struct icpt_tickets t, u;
	unsigned char first[16], second[16];
	const struct icpt_tkey *k;
	bool old = true;

	(void)state;
	assert_int_equal(icpt_tickets_init(&t, 3600, 1000), 0);
	assert_int_equal(icpt_tickets_init(&u, 3600, 1000), 0);
	/* Each interceptor has keys of its own. */
	assert_memory_not_equal(t.k[0].name, u.k[0].name, 16);
	assert_memory_not_equal(t.k[0].aes, u.k[0].aes, 32);
	assert_null(icpt_tickets_find(&u, t.k[0].name, &old));
	memcpy(first, t.k[0].name, 16);
	k = icpt_tickets_find(&t, first, &old);
	assert_ptr_equal(k, &t.k[0]);
	assert_false(old);
	/* Not yet due: nothing changes. */
	icpt_tickets_rotate(&t, 1000 + 3599);
	assert_memory_equal(t.k[0].name, first, 16);
	assert_false(t.k[1].set);
	/* Due: a new current key; the first decrypts still, as the old one. */
	icpt_tickets_rotate(&t, 1000 + 3600);
	assert_memory_not_equal(t.k[0].name, first, 16);
	memcpy(second, t.k[0].name, 16);
	k = icpt_tickets_find(&t, first, &old);
	assert_ptr_equal(k, &t.k[1]);
	assert_true(old);
	k = icpt_tickets_find(&t, second, &old);
	assert_ptr_equal(k, &t.k[0]);
	assert_false(old);
	/* Another period: the first key is gone for good. */
	icpt_tickets_rotate(&t, 1000 + 7200);
	assert_null(icpt_tickets_find(&t, first, &old));
	assert_non_null(icpt_tickets_find(&t, second, &old));
	assert_true(old);
	/* Wiped: no key is left to find, none of its bytes either. */
	icpt_tickets_wipe(&t);
	assert_null(icpt_tickets_find(&t, second, &old));
	{
		static const unsigned char zero[sizeof(t)];

		assert_memory_equal(&t, zero, sizeof(t));
	}
	icpt_tickets_wipe(&u);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rotation),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
