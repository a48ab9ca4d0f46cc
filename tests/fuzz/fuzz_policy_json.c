/*
 * Fuzz target for the OpenSandbox JSON front ends: policy_from_json,
 * PATCH and DELETE bodies, the credential-vault request, and the GET
 * round trip (a loaded policy re-serialised must load to the same JSON).
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
	size_t removed;
	struct policy *p = policy_from_json(buf, size, NULL, &err);

	if (p != NULL) {
		json_t *j = policy_to_json(p);
		char *s = json_dumps(j, JSON_COMPACT);
		struct policy *q = s ? policy_from_json(s, strlen(s), NULL, &err) : NULL;
		if (q == NULL)
			abort();
		json_t *j2 = policy_to_json(q);
		if (!json_equal(j, j2))
			abort();
		json_decref(j2);
		json_decref(j);
		free(s);
		policy_decide_name(q, "api.example.com", &d);
		uint8_t a[16] = {10, 1, 2, 3};
		policy_decide_addr(q, 2, a, 443, 6, &d);
		policy_free(q);
	} else {
		p = policy_new_deny_all();
	}
	struct policy *m = policy_patch_json(p, buf, size, NULL, &err);
	policy_free(m);
	struct policy *r = policy_remove_json(p, buf, size, &removed, &err);
	policy_free(r);
	struct binding_set *bs = binding_set_from_json(buf, size, &err);
	if (bs != NULL) {
		size_t idx;
		int bad = binding_set_validate(bs, p, &err);
		if (bad != 0 && err.code == POLICY_ERR_NONE)
			abort();
		(void)binding_match(bs, "https", "api.example.com", 443, "GET", "/v1/x", &idx);
		json_decref(binding_set_to_json(bs));
		binding_set_free(bs);
	}
	policy_free(p);
	return 0;
}
