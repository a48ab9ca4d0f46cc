/*
 * Unit tests of egressd/common/siphash.c: the reference vectors of the
 * SipHash paper, agreement with OpenSSL's SIPHASH MAC on every length
 * from 0 to 64, and a random key that changes the result.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "egressd/common/siphash.h"

static void
seq_key(uint8_t key[SIPHASH_KEY_LEN])
{
	for (int i = 0; i < SIPHASH_KEY_LEN; i++)
		key[i] = (uint8_t)i;
}

static void
test_paper_vectors(void **state)
{
	uint8_t key[SIPHASH_KEY_LEN], msg[15];

	seq_key(key);
	for (int i = 0; i < 15; i++)
		msg[i] = (uint8_t)i;
	/* SipHash paper, appendix A: key 00..0f, message 00..0e. */
	assert_true(siphash_24(key, msg, 15) == 0xa129ca6149be45e5ull);
	/* First line of the reference vectors.h (empty message). */
	assert_true(siphash_24(key, msg, 0) == 0x726fdb47dd0e0e31ull);
}

static uint64_t
openssl_siphash(const uint8_t *key, const uint8_t *msg, size_t len)
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "SIPHASH", NULL);
	EVP_MAC_CTX *ctx;
	size_t size = 8, outl = 0;
	uint8_t out[8];
	uint64_t v = 0;
	OSSL_PARAM params[] = {
	    OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size), OSSL_PARAM_construct_end()};

	assert_non_null(mac);
	ctx = EVP_MAC_CTX_new(mac);
	assert_non_null(ctx);
	assert_int_equal(EVP_MAC_init(ctx, key, SIPHASH_KEY_LEN, params), 1);
	assert_int_equal(EVP_MAC_update(ctx, msg, len), 1);
	assert_int_equal(EVP_MAC_final(ctx, out, &outl, sizeof(out)), 1);
	assert_int_equal(outl, 8);
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | out[i];
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	return v;
}

static void
test_matches_openssl(void **state)
{
	uint8_t key[SIPHASH_KEY_LEN], msg[64];

	for (int i = 0; i < SIPHASH_KEY_LEN; i++)
		key[i] = (uint8_t)(0xa5 ^ (i * 37));
	for (int i = 0; i < 64; i++)
		msg[i] = (uint8_t)(i * 101 + 7);
	for (size_t len = 0; len <= sizeof(msg); len++)
		assert_true(siphash_24(key, msg, len) == openssl_siphash(key, msg, len));
}

static void
test_random_key(void **state)
{
	uint8_t k1[SIPHASH_KEY_LEN], k2[SIPHASH_KEY_LEN];
	const char *name = "a.wild.example.test";

	assert_int_equal(siphash_random_key(k1), 0);
	assert_int_equal(siphash_random_key(k2), 0);
	/* Two draws of 128 bits are equal with probability 2^-128. */
	assert_memory_not_equal(k1, k2, SIPHASH_KEY_LEN);
	assert_true(siphash_24(k1, name, strlen(name)) != siphash_24(k2, name, strlen(name)));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_paper_vectors),
	    cmocka_unit_test(test_matches_openssl),
	    cmocka_unit_test(test_random_key),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
