/*
 * SipHash-2-4 with a 64-bit result (any process). Used where a table is
 * keyed by bytes the workload chooses: with a random key per process the
 * workload cannot compute collisions, which an unkeyed hash (FNV) lets it
 * do in under a second. Pure; the key comes from getrandom(2).
 */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "egressd/common/siphash.h"

#define SIPHASH_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static uint64_t
siphash_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static void
siphash_round(uint64_t v[4])
{
	v[0] += v[1];
	v[1] = SIPHASH_ROTL(v[1], 13);
	v[1] ^= v[0];
	v[0] = SIPHASH_ROTL(v[0], 32);
	v[2] += v[3];
	v[3] = SIPHASH_ROTL(v[3], 16);
	v[3] ^= v[2];
	v[0] += v[3];
	v[3] = SIPHASH_ROTL(v[3], 21);
	v[3] ^= v[0];
	v[2] += v[1];
	v[1] = SIPHASH_ROTL(v[1], 17);
	v[1] ^= v[2];
	v[2] = SIPHASH_ROTL(v[2], 32);
}

/* SipHash-2-4: two compression rounds per word, four finalisation rounds. */
uint64_t
siphash_24(const uint8_t key[SIPHASH_KEY_LEN], const void *msg, size_t len)
{
	const uint8_t *p = msg;
	uint64_t k0 = siphash_le64(key), k1 = siphash_le64(key + 8);
	uint64_t v[4] = {k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull,
	    k0 ^ 0x6c7967656e657261ull, k1 ^ 0x7465646279746573ull};
	uint8_t last[8] = {0};
	size_t full = len - len % 8;
	uint64_t m;

	for (size_t i = 0; i < full; i += 8) {
		m = siphash_le64(p + i);
		v[3] ^= m;
		siphash_round(v);
		siphash_round(v);
		v[0] ^= m;
	}
	if (len > full)
		memcpy(last, p + full, len - full);
	last[7] = (uint8_t)len;
	m = siphash_le64(last);
	v[3] ^= m;
	siphash_round(v);
	siphash_round(v);
	v[0] ^= m;
	v[2] ^= 0xff;
	for (int i = 0; i < 4; i++)
		siphash_round(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/* A fresh key from the kernel's generator (blocks only before it is seeded). */
int
siphash_random_key(uint8_t key[SIPHASH_KEY_LEN])
{
	size_t got = 0;

	while (got < SIPHASH_KEY_LEN) {
		ssize_t n = getrandom(key + got, SIPHASH_KEY_LEN - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		got += (size_t)n;
	}
	return 0;
}
