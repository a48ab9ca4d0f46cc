/*
 * Fuzz target for policy_name_canon() and policy_addr_parse(): no crash,
 * no over-read, and both are idempotent (the canonical form of a
 * canonical value is itself), which is what "canonicalise once" needs.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/name.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char out[POLICY_NAME_MAX + 1], again[POLICY_NAME_MAX + 1];
	size_t olen, alen;
	unsigned flags = size > 0 ? data[0] & 3 : 0;
	struct policy_addr a, b;

	if (policy_name_canon(data, size, flags, out, &olen) == POLICY_NAME_OK) {
		if (olen != strlen(out) || olen == 0 || olen > POLICY_NAME_MAX)
			abort();
		if (policy_name_canon((const uint8_t *)out, olen, flags, again, &alen) !=
		        POLICY_NAME_OK ||
		    alen != olen || memcmp(out, again, olen) != 0)
			abort();
	}
	for (int pfx = 0; pfx < 2; pfx++) {
		if (policy_addr_parse(data, size, pfx, &a) != POLICY_NAME_OK)
			continue;
		char text[POLICY_ADDR_TEXT_MAX];
		policy_addr_format(&a, text, sizeof(text));
		if (policy_addr_parse((const uint8_t *)text, strlen(text), true, &b) !=
		        POLICY_NAME_OK ||
		    a.family != b.family || a.prefix != b.prefix ||
		    memcmp(a.bytes, b.bytes, 16) != 0 || !policy_addr_in(&a, &b))
			abort();
	}
	return 0;
}
