/*
 * Fuzz target for egressd/dnswire: the input is fed to the TCP framer, the
 * query parser (and the error builder when a header was read), and to the
 * upstream answer filter against fixed questions, with the id taken from
 * the input so that fuzzed answers get past the id check.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "egressd/dns/dnswire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool
fuzz_keep_odd(int family, const uint8_t *addr, void *arg)
{
	return (addr[family == 2 ? 3 : 15] & 1) != 0;
}

static bool
fuzz_keep_all(int family, const uint8_t *addr, void *arg)
{
	return true;
}

/* An accepted answer gives a reply that itself parses with every address. */
static void
fuzz_answer(const uint8_t *data, size_t size, const struct dnswire_query *q, size_t max_len)
{
	static uint8_t out[DNSWIRE_MAX_MSG], out2[DNSWIRE_MAX_MSG];
	struct dnswire_answer res, res2;
	size_t n, n2;
	uint16_t id = size >= 2 ? (uint16_t)(data[0] << 8 | data[1]) : 0;

	if (dnswire_filter_answer(data, size, id, q, fuzz_keep_odd, NULL, max_len, out, sizeof(out),
	        &n, &res) != DNSWIRE_OK)
		return;
	if (n > sizeof(out) || (n > max_len && !res.truncated) || res.naddrs > DNSWIRE_MAX_ADDRS)
		abort();
	if (res.truncated)
		return;
	if (dnswire_filter_answer(out, n, q->id, q, fuzz_keep_all, NULL, sizeof(out2), out2,
	        sizeof(out2), &n2, &res2) != DNSWIRE_OK ||
	    res2.naddrs != res.naddrs || res2.nremoved != 0)
		abort();
}

static void
fuzz_fixed_query(struct dnswire_query *q, const char *name, uint16_t qtype)
{
	uint8_t buf[512];
	size_t n, used;

	memset(q, 0, sizeof(*q));
	if (dnswire_build_query(1, name, qtype, DNSWIRE_CLASS_IN, buf, sizeof(buf), &n) == 0)
		if (dnswire_parse_query(buf, n, q, &used) != DNSWIRE_OK)
			abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dnswire_query q, fixed;
	const uint8_t *msg;
	size_t used, mlen, n;
	uint8_t out[1024];

	if (dnswire_tcp_frame(data, size, &msg, &mlen, &used) == DNSWIRE_OK &&
	    (msg != data + 2 || used != mlen + 2 || used > size))
		abort();
	if (dnswire_parse_query(data, size, &q, &used) == DNSWIRE_OK) {
		/* Canonical name: its length, and no byte outside LDH and '_' '.'. */
		if (used != size || strlen(q.name) != q.name_len ||
		    strspn(q.name, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != q.name_len)
			abort();
		if (dnswire_build_error(&q, DNSWIRE_RCODE_NXDOMAIN, out, sizeof(out), &n) != 0)
			abort();
		fuzz_answer(data, size, &q, 512);
	} else if (q.hdr_valid) {
		if (dnswire_build_error(&q, DNSWIRE_RCODE_FORMERR, out, sizeof(out), &n) != 0)
			abort();
	}
	fuzz_fixed_query(&fixed, "www.example.com", DNSWIRE_TYPE_A);
	fuzz_answer(data, size, &fixed, 512);
	fuzz_answer(data, size, &fixed, DNSWIRE_MAX_MSG);
	fuzz_fixed_query(&fixed, "a.x", DNSWIRE_TYPE_AAAA);
	fuzz_answer(data, size, &fixed, DNSWIRE_MAX_MSG);
	return 0;
}
