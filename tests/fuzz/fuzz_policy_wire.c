/*
 * Fuzz target for policy_wire_decode (policy/policy_wire.c): the policy a
 * worker proposes, which the parent decodes as root. Invariants: a
 * document that decodes re-encodes to a document that decodes to the
 * same bytes again (the encoding is canonical), and a refused one says
 * why.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct policy_err err;
	struct policy *p = policy_wire_decode((const char *)data, size, &err);
	struct policy *q;
	struct policy_decision d;
	char *w1, *w2;
	size_t n1, n2;

	if (p == NULL) {
		if (err.code == POLICY_ERR_NONE || err.msg[0] == '\0')
			abort();
		return 0;
	}
	w1 = policy_wire_encode(p, &n1);
	if (w1 == NULL)
		abort();
	q = policy_wire_decode(w1, n1, &err);
	if (q == NULL)
		abort();
	w2 = policy_wire_encode(q, &n2);
	if (w2 == NULL || n1 != n2 || memcmp(w1, w2, n1) != 0)
		abort();
	policy_decide_name(q, "api.example.com", &d);
	if (policy_default_action(p) != policy_default_action(q))
		abort();
	free(w1);
	free(w2);
	policy_free(p);
	policy_free(q);
	return 0;
}
