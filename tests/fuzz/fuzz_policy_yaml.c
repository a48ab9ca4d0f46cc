/*
 * Fuzz target for the YAML policy file loader and the always-rules
 * parser: no crash, no leak, and every error carries a position inside
 * the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/binding.h"
#include "policy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct policy_err err;
	struct policy_decision d;
	struct policy *p = policy_from_yaml_buf("fuzz.yaml", buf, size, NULL, &err);
	size_t lines = 1;

	/* YAML breaks lines at \n, \r and a few Unicode separators: count bytes generously */
	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n' || data[i] == '\r' || data[i] >= 0x80;
	if (p == NULL) {
		/* libyaml may report the position just past the last line */
		if (err.code != POLICY_ERR_NOMEM && err.line > lines + 1)
			abort();
		p = policy_new_deny_all();
	} else {
		policy_decide_name(p, "a.b.example.com", &d);
		json_decref(policy_to_json(p));
	}
	struct policy *q =
	    policy_with_always(p, "deny.always", buf, size, "allow.always", buf, size, &err);
	if (q != NULL) {
		policy_decide_name(q, "example.com", &d);
		policy_free(q);
	}
	policy_free(p);
	return 0;
}
