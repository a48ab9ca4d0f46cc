/*
 * Unit tests of policy/binding.c: the OpenSandbox credential-vault JSON,
 * host/path/method validation, reserved headers, the static overlap
 * check, coverage by explicit allow rules, runtime match precedence, and
 * that no function hands back or prints an inline value.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "policy/binding.h"
#include "policy/policy.h"

#define CANARY "s3cr3t-CANARY-9f8e7d"

static const char *const creds =
    "\"credentials\":[{\"name\":\"tok\",\"source\":{\"type\":\"inline\",\"value\":\"" CANARY "\"}},"
    "{\"name\":\"k2\",\"source\":{\"value\":\"other\"}},"
    "{\"name\":\"f\",\"source\":{\"type\":\"file\",\"path\":\"/run/secrets/f\"}},"
    "{\"name\":\"e\",\"source\":{\"type\":\"env\",\"name\":\"TOKEN_E\"}}]";

static struct binding_set *
vault(const char *bindings, struct policy_err *err)
{
	char buf[8192];
	snprintf(buf, sizeof(buf), "{%s,\"bindings\":[%s]}", creds, bindings);
	return binding_set_from_json(buf, strlen(buf), err);
}

static void
vault_err(const char *bindings, const char *want)
{
	struct policy_err err;
	struct binding_set *bs = vault(bindings, &err);
	if (bs != NULL || strstr(err.msg, want) == NULL)
		print_error("bindings %s: got \"%s\", want \"%s\"\n", bindings, err.msg, want);
	assert_null(bs);
	assert_non_null(strstr(err.msg, want));
	assert_null(strstr(err.msg, CANARY));
}

/* B: a binding with allowBroad (most cases test other rules); E: an exact one. */
#define B(name, match, auth)                                                                       \
	"{\"name\":\"" name "\",\"allowBroad\":true,\"match\":" match ",\"auth\":" auth "}"
#define E(name, match, auth) "{\"name\":\"" name "\",\"match\":" match ",\"auth\":" auth "}"
#define BEARER "{\"type\":\"bearer\",\"credential\":\"tok\"}"

static void
test_vault_json_ok(void **state)
{
	struct policy_err err;
	struct binding_set *bs = vault(
	    B("gitlab",
	        "{\"hosts\":[\"Code.Example.com.\",\"code.example.com\"],\"paths\":[\"/"
	        "api/v4/*\"]}",
	        "{\"type\":\"apiKey\",\"name\":\"private-token\",\"credential\":"
	        "\"tok\"}") "," B("custom",
	        "{\"hosts\":[\"*.svc.example\"],\"schemes\":[\"HTTP\",\"https\"],"
	        "\"methods\":[\"get\"]}",
	        "{\"type\":\"customHeaders\",\"headers\":[{\"name\":\"x-a\","
	        "\"credential\":\"f\"},"
	        "{\"name\":\"X-B\",\"credential\":\"e\"}]}") "," B("basic",
	        "{\"hosts\":[\"basic.example\"]}", "{\"type\":\"basic\",\"credential\":\"k2\"}"),
	    &err);
	struct binding_header h;
	struct binding_credential_info ci;

	if (bs == NULL)
		print_error("%s: %s\n", err.key, err.msg);
	assert_non_null(bs);
	assert_int_equal(binding_set_count(bs), 3);
	assert_int_equal(binding_credential_count(bs), 4);
	assert_string_equal(binding_name(bs, 0), "gitlab");
	assert_int_equal(binding_auth_type(bs, 0), BINDING_AUTH_APIKEY);
	assert_int_equal(binding_header_get(bs, 0, 0, &h), 0);
	assert_string_equal(h.name, "Private-Token"); /* Go-canonical */
	assert_string_equal(h.prefix, "");
	assert_int_equal(binding_credential_get(bs, h.credential, &ci), 0);
	assert_string_equal(ci.name, "tok");
	assert_int_equal(ci.source, BINDING_SOURCE_INLINE);
	assert_null(ci.ref);
	assert_int_equal(binding_header_count(bs, 1), 2);
	assert_int_equal(binding_header_get(bs, 1, 1, &h), 0);
	assert_string_equal(h.name, "X-B");
	assert_int_equal(binding_credential_get(bs, h.credential, &ci), 0);
	assert_int_equal(ci.source, BINDING_SOURCE_ENV);
	assert_string_equal(ci.ref, "TOKEN_E");
	assert_int_equal(binding_header_get(bs, 1, 2, &h), -1);
	assert_int_equal(binding_schemes(bs, 1), BINDING_SCHEME_HTTP | BINDING_SCHEME_HTTPS);
	assert_int_equal(binding_header_get(bs, 2, 0, &h), 0);
	assert_string_equal(h.name, "Authorization");
	assert_string_equal(h.prefix, "Basic ");
	/* sanitized view: names only, never a value, a reference or custom header names */
	json_t *j = binding_set_to_json(bs);
	char *s = json_dumps(j, JSON_COMPACT);
	assert_null(strstr(s, CANARY));
	assert_null(strstr(s, "TOKEN_E"));
	assert_null(strstr(s, "X-B"));
	assert_non_null(strstr(s, "\"hosts\":[\"code.example.com\"]"));
	assert_non_null(strstr(s, "\"name\":\"Private-Token\""));
	assert_non_null(strstr(s, "\"paths\":[\"/api/v4/*\"]"));
	assert_non_null(strstr(s, "\"methods\":[\"GET\"]"));
	/* sorted by name */
	assert_true(strstr(s, "\"basic\"") < strstr(s, "\"custom\""));
	free(s);
	json_decref(j);
	binding_set_free(bs);
}

static int
reveal_cb(const uint8_t *v, size_t len, void *arg)
{
	memcpy(arg, v, len);
	((char *)arg)[len] = '\0';
	return 42;
}

static void
test_reveal(void **state)
{
	struct policy_err err;
	struct binding_set *bs = vault(B("a", "{\"hosts\":[\"a.example\"]}", BEARER), &err);
	char out[64];

	assert_non_null(bs);
	assert_int_equal(binding_credential_reveal(bs, 0, reveal_cb, out), 42);
	assert_string_equal(out, CANARY);
	assert_int_equal(binding_credential_reveal(bs, 2, reveal_cb, out), -1); /* file */
	assert_int_equal(binding_credential_reveal(bs, 9, reveal_cb, out), -1);
	assert_ptr_equal(binding_set_ref(bs), bs);
	binding_set_free(bs);
	binding_set_free(bs);
	binding_set_free(NULL);
}

static void
test_vault_json_errors(void **state)
{
	struct policy_err err;

	/* hosts */
	vault_err(B("a", "{\"hosts\":[]}", BEARER), "match.hosts cannot be empty");
	vault_err(B("a", "{}", BEARER), "match.hosts cannot be empty");
	const char *badhosts[] = {"api.example.com:443", "api_example.com", "localhost",
	    "*.localhost", "*.example.com:443", "https://a.example", "a.example/x", "a.*.example",
	    "*", "b\\u00fccher.example"};
	for (size_t i = 0; i < sizeof(badhosts) / sizeof(badhosts[0]); i++) {
		char b[512];
		snprintf(b, sizeof(b), B("a", "{\"hosts\":[\"%s\"]}", BEARER), badhosts[i]);
		vault_err(b, "is not an FQDN");
	}
	vault_err(B("a", "{\"hosts\":[\"10.0.0.1\"]}", BEARER), "must be an FQDN, not an IP");
	vault_err(B("a", "{\"hosts\":[\"::1\"]}", BEARER), "must be an FQDN, not an IP");
	/* schemes, ports, methods, paths */
	vault_err(B("a", "{\"hosts\":[\"a.example\"],\"schemes\":[\"ftp\"]}", BEARER),
	    "scheme must be http or https");
	vault_err(B("a", "{\"hosts\":[\"a.example\"],\"ports\":[8443]}", BEARER),
	    "must be the default port of one of its schemes");
	vault_err(B("a", "{\"hosts\":[\"a.example\"],\"ports\":[80]}", BEARER),
	    "must be the default port of one of its schemes");
	vault_err(
	    B("a", "{\"hosts\":[\"a.example\"],\"schemes\":[\"http\",\"https\"],\"ports\":[443]}",
	        BEARER),
	    "must list the default port of every scheme");
	vault_err(B("a", "{\"hosts\":[\"a.example\"],\"methods\":[\"G T\"]}", BEARER),
	    "method must be an HTTP token");
	vault_err(B("a", "{\"hosts\":[\"a.example\"],\"methods\":[\" \"]}", BEARER),
	    "method cannot be blank");
	vault_err(B("a", "{\"hosts\":[\"a.example\"],\"paths\":[\"api/*\"]}", BEARER),
	    "path must start with /");
	vault_err(
	    B("a", "{\"hosts\":[\"a.example\"],\"paths\":[\"/a*/b\"]}", BEARER), "only at the end");
	vault_err(B("a", "{\"hosts\":[\"a.example\"],\"paths\":[\"/a?x=1\"]}", BEARER),
	    "only at the end");
	vault_err(B("a", "{\"hosts\":\"a.example\"}", BEARER), "must be a list");
	vault_err(B("a", "{\"hosts\":[1]}", BEARER), "must be a string");
	/* auth */
	vault_err(
	    B("a", "{\"hosts\":[\"a.example\"]}", "{\"type\":\"Bearer\",\"credential\":\"tok\"}"),
	    "unsupported auth type");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}", "{\"type\":\"bearer\"}"),
	    "bearer auth requires credential");
	vault_err(
	    B("a", "{\"hosts\":[\"a.example\"]}", "{\"type\":\"bearer\",\"credential\":\" \"}"),
	    "bearer auth requires credential");
	vault_err(
	    B("a", "{\"hosts\":[\"a.example\"]}", "{\"type\":\"basic\",\"credential\":\"nope\"}"),
	    "references an unknown credential");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}",
	              "{\"type\":\"apiKey\",\"name\":\"Content-Length\",\"credential\":\"tok\"}"),
	    "reserved credential header name");
	const char *reserved[] = {"host", "Transfer-Encoding", "connection", "UPGRADE", "te",
	    "trailer", "keep-alive", "proxy-authorization", "Proxy-Foo", "forwarded",
	    "x-forwarded-for", "X-Forwarded-Anything", "via", "expect", "content-type"};
	for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++) {
		char b[512];
		snprintf(b, sizeof(b),
		    B("a", "{\"hosts\":[\"a.example\"]}",
		        "{\"type\":\"customHeaders\",\"headers\":[{\"name\":\"%s\",\"credential\":"
		        "\"tok\"}]}"),
		    reserved[i]);
		vault_err(b, "reserved credential header name");
	}
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}",
	              "{\"type\":\"apiKey\",\"name\":\"X:Y\",\"credential\":\"tok\"}"),
	    "invalid credential header name");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}",
	              "{\"type\":\"customHeaders\",\"headers\":[{\"name\":\"X-Access-Token\","
	              "\"credential\":"
	              "\"tok\"},{\"name\":\"x-access-token\",\"credential\":\"k2\"}]}"),
	    "duplicate custom header name");
	vault_err(
	    B("a", "{\"hosts\":[\"a.example\"]}", "{\"type\":\"customHeaders\",\"headers\":[]}"),
	    "at least one header");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}",
	              "{\"type\":\"customHeaders\",\"headers\":[{\"name\":\"X-A\"}]}"),
	    "customHeaders entry \"0\" requires credential");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}",
	              "{\"type\":\"bearer\",\"credential\":\"tok\",\"name\":\"X\"}"),
	    "takes only a credential");
	/* Authorization and Cookie are allowed as apiKey names, as OpenSandbox */
	char b[512];
	snprintf(b, sizeof(b), "{%s,\"bindings\":[%s]}", creds,
	    B("a", "{\"hosts\":[\"a.example\"]}",
	        "{\"type\":\"apiKey\",\"name\":\"cookie\",\"credential\":\"tok\"}"));
	struct binding_set *bs = binding_set_from_json(b, strlen(b), &err);
	assert_non_null(bs);
	binding_set_free(bs);
	/* names, duplicates, unknown keys */
	vault_err(B(" ", "{\"hosts\":[\"a.example\"]}", BEARER), "binding name cannot be blank");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}", BEARER) "," B(
	              "a", "{\"hosts\":[\"b.example\"]}", BEARER),
	    "duplicate binding name (the same as bindings[0])");
	vault_err("{\"name\":\"a\",\"match\":{\"hosts\":[\"a.example\"]},\"auth\":" BEARER
	          ",\"x\":1}",
	    "unknown key");
	vault_err(
	    B("a", "{\"hosts\":[\"a.example\"],\"host\":[\"b.example\"]}", BEARER), "unknown key");
	/* credentials */
	const char *credbad[][2] = {
	    {"{\"credentials\":[{\"name\":\"\",\"source\":{\"value\":\"x\"}}]}",
	        "credential name cannot be blank"},
	    {"{\"credentials\":[{\"name\":\"a\",\"source\":{\"type\":\"inline\",\"value\":\"\"}}]}",
	        "inline value cannot be empty"},
	    {"{\"credentials\":[{\"name\":\"a\",\"source\":{\"type\":\"vault\",\"value\":\"x\"}}]}",
	        "a file or env source takes no value"},
	    {"{\"credentials\":[{\"name\":\"a\",\"source\":{\"type\":\"kms\"}}]}",
	        "unsupported credential source type (inline, file or env)"},
	    {"{\"credentials\":[{\"name\":\"a\",\"source\":{\"value\":\"x\"}},{\"name\":\"a\","
	     "\"source\":{\"value\":\"y\"}}]}",
	        "duplicate credential name (the same as credentials[0])"},
	    {"{\"credentials\":[{\"name\":\"a\",\"source\":{\"type\":\"file\",\"path\":\"rel\"}}]}",
	        "absolute path"},
	    {"{\"credentials\":[{\"name\":\"a\",\"source\":{\"type\":\"env\",\"name\":\"1X\"}}]}",
	        "variable name"},
	    {"{\"credentials\":[{\"name\":\"a\"}]}", "needs a source mapping"},
	    {"{\"credentials\":{}}", "credentials must be a list"},
	    {"{\"bindings\":{}}", "bindings must be a list"},
	    {"{\"credentials\":[],\"extra\":1}", "unknown key"},
	    {"[]", "must be a JSON object"},
	};
	for (size_t i = 0; i < sizeof(credbad) / sizeof(credbad[0]); i++) {
		bs = binding_set_from_json(credbad[i][0], strlen(credbad[i][0]), &err);
		if (bs != NULL || strstr(err.msg, credbad[i][1]) == NULL)
			print_error("case %zu: got \"%s\"\n", i, err.msg);
		assert_null(bs);
		assert_non_null(strstr(err.msg, credbad[i][1]));
	}
	/* an inline value is never quoted, even in a JSON syntax error */
	const char *broken =
	    "{\"credentials\":[{\"name\":\"a\",\"source\":{\"value\":\"" CANARY "\"";
	assert_null(binding_set_from_json(broken, strlen(broken), &err));
	assert_int_equal(err.code, POLICY_ERR_SYNTAX);
	assert_null(strstr(err.msg, CANARY));
	/* empty vault is valid */
	bs = binding_set_from_json("{\"credentials\":[],\"bindings\":[]}", 32, &err);
	assert_non_null(bs);
	assert_int_equal(binding_set_count(bs), 0);
	binding_set_free(bs);
	/* limits */
	char *big = malloc(64 * 1024);
	size_t o = (size_t)sprintf(big, "{\"credentials\":[");
	for (int i = 0; i <= BINDING_MAX_CREDENTIALS; i++)
		o += (size_t)sprintf(
		    big + o, "%s{\"name\":\"c%d\",\"source\":{\"value\":\"v\"}}", i ? "," : "", i);
	sprintf(big + o, "]}");
	assert_null(binding_set_from_json(big, strlen(big), &err));
	assert_int_equal(err.code, POLICY_ERR_TOO_LARGE);
	free(big);
}

static void
test_overlap(void **state)
{
	struct policy_err err;
	struct binding_set *bs;

	/* same host, overlapping paths and methods */
	vault_err(B("a", "{\"hosts\":[\"a.example\"],\"paths\":[\"/api/*\"]}", BEARER) "," B(
	              "b", "{\"hosts\":[\"a.example\"],\"paths\":[\"/api/v1/x\"]}", BEARER),
	    "bindings[0] and bindings[1] can match the same request");
	vault_err(B("a", "{\"hosts\":[\"*.example.com\"]}", BEARER) "," B(
	              "b", "{\"hosts\":[\"*.x.example.com\"]}", BEARER),
	    "can match the same request");
	vault_err(B("a", "{\"hosts\":[\"x.example\"],\"paths\":[\"/a*\"]}", BEARER) "," B(
	              "b", "{\"hosts\":[\"x.example\"],\"paths\":[\"/ab*\"]}", BEARER),
	    "can match the same request");
	/* disjoint on any one dimension is fine */
	const char *ok[] = {
	    B("a", "{\"hosts\":[\"a.example\"],\"methods\":[\"GET\"]}", BEARER) "," B(
	        "b", "{\"hosts\":[\"a.example\"],\"methods\":[\"POST\"]}", BEARER),
	    B("a", "{\"hosts\":[\"a.example\"],\"paths\":[\"/v1/*\"]}", BEARER) "," B(
	        "b", "{\"hosts\":[\"a.example\"],\"paths\":[\"/v2/*\"]}", BEARER),
	    B("a", "{\"hosts\":[\"a.example\"],\"schemes\":[\"http\"],\"ports\":[80]}",
	        BEARER) "," B("b", "{\"hosts\":[\"a.example\"]}", BEARER),
	    /* exact beats wildcard at runtime: no conflict */
	    B("a", "{\"hosts\":[\"api.example.com\"]}", BEARER) "," B(
	        "b", "{\"hosts\":[\"*.example.com\"]}", BEARER),
	    B("a", "{\"hosts\":[\"*.a.example\"]}", BEARER) "," B(
	        "b", "{\"hosts\":[\"*.ba.example\"]}", BEARER),
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		bs = vault(ok[i], &err);
		if (bs == NULL)
			print_error("case %zu: %s\n", i, err.msg);
		assert_non_null(bs);
		binding_set_free(bs);
	}
}

static void
test_match(void **state)
{
	struct policy_err err;
	struct binding_set *bs = vault(
	    B("exact", "{\"hosts\":[\"api.example.com\"],\"paths\":[\"/v1/*\"]}", BEARER) "," B(
	        "wild", "{\"hosts\":[\"*.example.com\"]}", BEARER) "," B("plain",
	        "{\"hosts\":[\"plain.example\"],\"schemes\":[\"http\"],\"paths\":[\"/x\"]}",
	        BEARER),
	    &err);
	size_t idx;

	assert_non_null(bs);
	assert_int_equal(
	    binding_match(bs, "https", "api.example.com", 443, "GET", "/v1/a?q=1", &idx),
	    BINDING_MATCH_ONE);
	assert_int_equal(idx, 0);
	/* exact host did not match the path: the wildcard applies */
	assert_int_equal(binding_match(bs, "https", "api.example.com", 443, "GET", "/v2", &idx),
	    BINDING_MATCH_ONE);
	assert_int_equal(idx, 1);
	/* the apex is not under its wildcard */
	assert_int_equal(
	    binding_match(bs, "https", "example.com", 443, "GET", "/", &idx), BINDING_MATCH_NONE);
	assert_int_equal(idx, SIZE_MAX);
	assert_int_equal(binding_match(bs, "https", "a.b.example.com", 443, "DELETE", "/", &idx),
	    BINDING_MATCH_ONE);
	assert_int_equal(binding_match(bs, "https", "a.b.example.com", 443, "HEAD", "/", &idx),
	    BINDING_MATCH_NONE);
	assert_int_equal(binding_match(bs, "https", "evilexample.com", 443, "GET", "/", &idx),
	    BINDING_MATCH_NONE);
	/* scheme must be allowed; exact paths are exact (query ignored) */
	assert_int_equal(binding_match(bs, "https", "plain.example", 443, "GET", "/x", &idx),
	    BINDING_MATCH_NONE);
	assert_int_equal(
	    binding_match(bs, "http", "plain.example", 80, "GET", "/x?y", &idx), BINDING_MATCH_ONE);
	assert_int_equal(
	    binding_match(bs, "http", "plain.example", 80, "GET", "/xy", &idx), BINDING_MATCH_NONE);
	assert_int_equal(
	    binding_match(bs, "ftp", "plain.example", 443, "GET", "/x", &idx), BINDING_MATCH_NONE);
	assert_int_equal(
	    binding_match(NULL, "https", "a", 443, "GET", "/", &idx), BINDING_MATCH_NONE);
	assert_true(binding_host_has_binding(bs, "x.example.com"));
	assert_false(binding_host_has_binding(bs, "example.com"));
	binding_set_free(bs);
}

static void
test_disjoint_runtime(void **state)
{
	/* Same host, disjoint methods: each request resolves to exactly one
	 * binding (AMBIGUOUS needs two bindings of one precedence class to
	 * match, which the static overlap check refuses at load). */
	struct policy_err err;
	struct binding_set *bs =
	    vault(B("a", "{\"hosts\":[\"x.example\"],\"methods\":[\"GET\"]}", BEARER) "," B(
	              "b", "{\"hosts\":[\"x.example\"],\"methods\":[\"POST\"]}", BEARER),
	        &err);
	size_t idx;

	assert_non_null(bs);
	assert_int_equal(
	    binding_match(bs, "https", "x.example", 443, "GET", "/", &idx), BINDING_MATCH_ONE);
	assert_int_equal(idx, 0);
	assert_int_equal(
	    binding_match(bs, "https", "x.example", 443, "POST", "/", &idx), BINDING_MATCH_ONE);
	assert_int_equal(idx, 1);
	binding_set_free(bs);
}

static void
test_coverage(void **state)
{
	struct policy_err err;
	struct binding_set *bs =
	    vault(B("code", "{\"hosts\":[\"code.example.com\"]}", BEARER) "," B(
	              "svc", "{\"hosts\":[\"*.svc.example.com\"]}", BEARER),
	        &err);
	struct policy *p;

	assert_non_null(bs);
	/* no rules at all */
	p = policy_from_json("{\"defaultAction\":\"allow\"}", 25, NULL, &err);
	assert_non_null(p);
	assert_int_equal(binding_set_validate(bs, p, &err), -1);
	assert_non_null(strstr(err.msg, "require explicit networkPolicy.egress allow rules"));
	policy_free(p);
	/* default allow never counts as coverage */
	const char *j1 =
	    "{\"defaultAction\":\"allow\",\"egress\":[{\"action\":\"allow\",\"target\":"
	    "\"*.svc.example.com\"}]}";
	p = policy_from_json(j1, strlen(j1), NULL, &err);
	assert_int_equal(binding_set_validate(bs, p, &err), -1);
	assert_string_equal(err.key, "bindings[0].match.hosts[0]");
	assert_non_null(strstr(err.msg, "host is not covered"));
	policy_free(p);
	/* an earlier deny defeats a covering allow */
	const char *j2 = "{\"egress\":[{\"action\":\"deny\",\"target\":\"code.example.com\"},"
	                 "{\"action\":\"allow\",\"target\":\"*.example.com\"}]}";
	p = policy_from_json(j2, strlen(j2), NULL, &err);
	assert_int_equal(binding_set_validate(bs, p, &err), -1);
	assert_string_equal(err.key, "bindings[0].match.hosts[0]");
	policy_free(p);
	/* a parent wildcard covers both an exact host and a narrower wildcard */
	const char *j3 = "{\"egress\":[{\"action\":\"allow\",\"target\":\"*.example.com\"}]}";
	p = policy_from_json(j3, strlen(j3), NULL, &err);
	assert_int_equal(binding_set_validate(bs, p, &err), 0);
	policy_free(p);
	/* a wildcard host needs a wildcard rule: the exact apex is not enough */
	const char *j4 = "{\"egress\":[{\"action\":\"allow\",\"target\":\"code.example.com\"},"
	                 "{\"action\":\"allow\",\"target\":\"svc.example.com\"},"
	                 "{\"action\":\"allow\",\"target\":\"a.svc.example.com\"}]}";
	p = policy_from_json(j4, strlen(j4), NULL, &err);
	assert_int_equal(binding_set_validate(bs, p, &err), -1);
	assert_string_equal(err.key, "bindings[1].match.hosts[0]");
	policy_free(p);
	/* a port-limited allow must include the binding's port (443 for https) */
	const char *j5 = "{\"egress\":[{\"action\":\"allow\",\"target\":\"*.example.com\","
	                 "\"ports\":[8443]}]}";
	p = policy_from_json(j5, strlen(j5), NULL, &err);
	assert_int_equal(binding_set_validate(bs, p, &err), -1);
	assert_non_null(strstr(err.msg, "ports exclude"));
	policy_free(p);
	/* allow.always coverage counts, deny.always defeats */
	p = policy_from_json("{}", 2, NULL, &err);
	struct policy *q = policy_with_always(p, "d", NULL, 0, "a", "*.example.com\n", 14, &err);
	assert_non_null(q);
	assert_int_equal(binding_set_validate(bs, q, &err), 0);
	struct policy *r =
	    policy_with_always(p, "d", "code.example.com\n", 17, "a", "*.example.com\n", 14, &err);
	assert_int_equal(binding_set_validate(bs, r, &err), -1);
	/* an empty set needs no policy */
	assert_int_equal(binding_set_validate(NULL, p, &err), 0);
	/* bindings ride along policy derivations */
	struct policy *w = policy_with_bindings(q, bs);
	assert_ptr_equal(policy_bindings(w), bs);
	policy_free(w);
	policy_free(r);
	policy_free(q);
	policy_free(p);
	binding_set_free(bs);
}

/* Refused with the error at `key`, never quoting the input. */
static void
vault_err_at(const char *bindings, const char *key, const char *want)
{
	struct policy_err err;
	struct binding_set *bs = vault(bindings, &err);
	if (bs != NULL || strcmp(err.key, key) != 0 || strstr(err.msg, want) == NULL)
		print_error("%s: got %s: %s\n", bindings, err.key, err.msg);
	assert_null(bs);
	assert_string_equal(err.key, key);
	assert_non_null(strstr(err.msg, want));
}

/* Issue 15 item 2: hosts, paths and ports are exact unless allowBroad. */
static void
test_exact(void **state)
{
	struct policy_err err;
	struct binding_set *bs;
	size_t idx;

	/* the review's accepted shapes are refused without the opt-in */
	vault_err_at(E("a", "{\"hosts\":[\"*.allowed.test\"],\"paths\":[\"/v1/x\"]}", BEARER),
	    "bindings[0].match.hosts[0]",
	    "wildcard host is refused unless the binding sets allowBroad");
	vault_err_at(E("a",
	                 "{\"hosts\":[\"api.allowed.test\",\"*.wild.allowed.test\"],\"paths\":[\"/"
	                 "v1/x\"]}",
	                 BEARER),
	    "bindings[0].match.hosts[1]", "wildcard host is refused");
	vault_err_at(
	    E("a", "{\"hosts\":[\"api.allowed.test\"],\"paths\":[\"/v1/x\",\" /* \"]}", BEARER),
	    "bindings[0].match.paths[1]", "all-paths pattern is refused unless");
	vault_err_at(E("a", "{\"hosts\":[\"api.allowed.test\"]}", BEARER), "bindings[0].match",
	    "paths is required");
	vault_err_at(E("a", "{\"hosts\":[\"api.allowed.test\"],\"paths\":[]}", BEARER),
	    "bindings[0].match.paths", "paths is required");
	/* a double star and a bare star were never patterns; they stay refused */
	vault_err_at(E("a", "{\"hosts\":[\"api.allowed.test\"],\"paths\":[\"/**\"]}", BEARER),
	    "bindings[0].match.paths[0]", "only at the end");
	vault_err_at(E("a", "{\"hosts\":[\"api.allowed.test\"],\"paths\":[\"*\"]}", BEARER),
	    "bindings[0].match.paths[0]", "must start with /");
	/* allowBroad is a boolean on the binding, false is the default */
	vault_err_at("{\"name\":\"a\",\"allowBroad\":\"yes\",\"match\":{\"hosts\":[\"a.example\"]},"
	             "\"auth\":" BEARER "}",
	    "bindings[0].allowBroad", "must be true or false");
	vault_err_at("{\"name\":\"a\",\"allowBroad\":false,\"match\":{\"hosts\":[\"*.a.example\"],"
	             "\"paths\":[\"/x\"]},\"auth\":" BEARER "}",
	    "bindings[0].match.hosts[0]", "wildcard host is refused");
	/* with the opt-in both are accepted, shown in the sanitized view */
	bs = vault(B("z", "{\"hosts\":[\"*.allowed.test\"],\"paths\":[\"/*\"]}", BEARER) "," E(
	               "e", "{\"hosts\":[\"api.example\"],\"paths\":[\"/v1/*\"]}", BEARER),
	    &err);
	assert_non_null(bs);
	assert_true(binding_allow_broad(bs, 0));
	assert_false(binding_allow_broad(bs, 1));
	json_t *j = binding_set_to_json(bs);
	char *txt = json_dumps(j, JSON_COMPACT);
	assert_non_null(strstr(txt, "\"name\":\"z\",\"allowBroad\":true"));
	assert_null(strstr(txt, "\"name\":\"e\",\"allowBroad\""));
	free(txt);
	json_decref(j);
	/* ports: an https binding injects on 443 only, whatever the host and path */
	assert_int_equal(binding_match(bs, "https", "api.example", 443, "GET", "/v1/a", &idx),
	    BINDING_MATCH_ONE);
	assert_int_equal(idx, 1);
	const uint16_t other[] = {8443, 80, 444, 0, 65535, 4443};
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		assert_int_equal(
		    binding_match(bs, "https", "api.example", other[i], "GET", "/v1/a", &idx),
		    BINDING_MATCH_NONE);
		assert_int_equal(
		    binding_match(bs, "https", "x.allowed.test", other[i], "GET", "/", &idx),
		    BINDING_MATCH_NONE);
	}
	assert_int_equal(
	    binding_match(bs, "http", "api.example", 80, "GET", "/v1/a", &idx), BINDING_MATCH_NONE);
	binding_set_free(bs);
	/* two schemes: each on its own default port, never crossed */
	bs = vault(
	    E("b",
	        "{\"hosts\":[\"api.example\"],\"schemes\":[\"http\",\"https\"],\"ports\":[443,"
	        "80],\"paths\":[\"/v1/*\"]}",
	        BEARER),
	    &err);
	assert_non_null(bs);
	assert_int_equal(binding_match(bs, "https", "api.example", 443, "GET", "/v1/a", &idx),
	    BINDING_MATCH_ONE);
	assert_int_equal(
	    binding_match(bs, "http", "api.example", 80, "GET", "/v1/a", &idx), BINDING_MATCH_ONE);
	assert_int_equal(binding_match(bs, "https", "api.example", 80, "GET", "/v1/a", &idx),
	    BINDING_MATCH_NONE);
	assert_int_equal(binding_match(bs, "http", "api.example", 443, "GET", "/v1/a", &idx),
	    BINDING_MATCH_NONE);
	assert_int_equal(binding_match(bs, "http", "api.example", 8080, "GET", "/v1/a", &idx),
	    BINDING_MATCH_NONE);
	binding_set_free(bs);
	/* ports may restate the scheme's port (OpenSandbox shape), nothing else */
	bs = vault(
	    E("c", "{\"hosts\":[\"api.example\"],\"ports\":[443],\"paths\":[\"/v1/x\"]}", BEARER),
	    &err);
	assert_non_null(bs);
	binding_set_free(bs);
}

#define CANARY_TAIL "9f8e7d6c5b4a"

/* tmpl with every "%s" replaced by v. */
static void
subst(char *out, size_t cap, const char *tmpl, const char *v)
{
	size_t o = 0, vl = strlen(v);

	for (const char *t = tmpl; *t != '\0' && o + vl + 1 < cap; t++) {
		if (t[0] == '%' && t[1] == 's') {
			memcpy(out + o, v, vl);
			o += vl;
			t++;
		} else {
			out[o++] = *t;
		}
	}
	out[o] = '\0';
}

/*
 * Issue 15 item 8: a canary in any string field (or as a key) of a vault
 * request is never quoted by the error, in the message or the location.
 */
static void
test_errors_never_echo(void **state)
{
	static const char *const shapes[] = {
	    /* names, sources, types */
	    "{\"credentials\":[{\"name\":\"%s\",\"source\":{\"value\":\"v\"}},{\"name\":\"%s\","
	    "\"source\":{\"value\":\"v\"}}]}",
	    "{\"credentials\":[{\"name\":\"%s\"}]}",
	    "{\"credentials\":[{\"name\":\"a\",\"source\":{\"type\":\"%s\"}}]}",
	    "{\"credentials\":[{\"name\":\"a\",\"source\":{\"type\":\"file\",\"path\":\"%s\"}},{"
	    "\"name\":\"\"}]}",
	    "{\"credentials\":[{\"name\":\"a\",\"source\":{\"type\":\"env\",\"name\":\"%s-\"}}]}",
	    "{\"credentials\":[{\"name\":\"a\",\"source\":{\"type\":\"file\",\"value\":\"%s\"}}]}",
	    "{\"credentials\":[{\"name\":\"a\",\"source\":{\"value\":\"v\",\"%s\":1}}]}",
	    "{\"credentials\":[{\"name\":\"a\",\"%s\":{\"value\":\"v\"}}]}",
	    "{\"%s\":[]}",
	    /* bindings: every field */
	    "{\"bindings\":[{\"name\":\"%s\",\"match\":{\"hosts\":[\"a.example\"],\"paths\":[\"/"
	    "x\"]},\"auth\":{\"type\":\"bearer\",\"credential\":\"nope\"}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"%s\"]},\"auth\":{}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"%s.example\"]},\"auth\":{}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"*.%s.example\"],\"paths\":[\"/"
	    "x\"]},\"auth\":{}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"a.example\"],\"paths\":[\"%s\"]"
	    "},"
	    "\"auth\":{}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"a.example\"],\"paths\":[\"/"
	    "%s*\"]},\"auth\":{\"type\":\"x\"}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"a.example\"],\"methods\":[\"%s "
	    "\"]},\"auth\":{}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"a.example\"],\"schemes\":[\"%"
	    "s\"]},"
	    "\"auth\":{}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"a.example\"],\"ports\":[\"%s\"]"
	    "},"
	    "\"auth\":{}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"a.example\"],\"%s\":1},"
	    "\"auth\":{}"
	    "}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"allowBroad\":\"%s\",\"match\":{},\"auth\":{}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"a.example\"],\"paths\":[\"/"
	    "x\"]},\"auth\":{\"type\":\"%s\"}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"a.example\"],\"paths\":[\"/"
	    "x\"]},\"auth\":{\"type\":\"bearer\",\"credential\":\"%s\"}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"a.example\"],\"paths\":[\"/"
	    "x\"]},\"auth\":{\"type\":\"apiKey\",\"name\":\"%s:\",\"credential\":\"c\"}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"a.example\"],\"paths\":[\"/"
	    "x\"]},\"auth\":{\"type\":\"customHeaders\",\"headers\":[{\"name\":\"X-%s\","
	    "\"credential\":\"c\"},{\"name\":\"x-%s\",\"credential\":\"c\"}]}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"match\":{\"hosts\":[\"a.example\"],\"paths\":[\"/"
	    "x\"]},\"auth\":{\"type\":\"customHeaders\",\"headers\":[{\"name\":\"X-A\","
	    "\"%s\":\"c\"}]}}]}",
	    "{\"bindings\":[{\"name\":\"%s\",\"match\":{\"hosts\":[\"a.example\"],\"paths\":[\"/"
	    "x\"]},\"auth\":{\"type\":\"bearer\",\"credential\":\"c\"}},{\"name\":\"%s\",\"match\":"
	    "{"
	    "\"hosts\":[\"b.example\"],\"paths\":[\"/x\"]},\"auth\":{\"type\":\"bearer\","
	    "\"credential\":\"c\"}}]}",
	    "{\"bindings\":[{\"name\":\"b\",\"%s\":1}]}",
	};
	/* the canary as a bare word, and as a near-valid value of each field */
	static const char *const canaries[] = {"sk-live-CANARY-" CANARY_TAIL, "canary" CANARY_TAIL,
	    "/canary/" CANARY_TAIL, "A" CANARY_TAIL "\\r\\nX: 1"};

	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		for (size_t k = 0; k < sizeof(canaries) / sizeof(canaries[0]); k++) {
			char buf[4096], line[1024];
			struct policy_err err;
			const char *cv = canaries[k];
			subst(buf, sizeof(buf), shapes[i], cv);
			struct binding_set *bs = binding_set_from_json(buf, strlen(buf), &err);
			/* every shape is invalid: c is never a credential of these requests */
			if (bs != NULL)
				print_error("accepted: %s\n", buf);
			assert_null(bs);
			policy_err_format(&err, line, sizeof(line));
			if (strstr(line, CANARY_TAIL) != NULL || strstr(line, "ANARY") != NULL)
				print_error("echoed: %s\n  -> %s\n", buf, line);
			assert_null(strstr(line, CANARY_TAIL));
			assert_null(strstr(line, "ANARY"));
		}
	}
}

#define PH "PLACEHOLDER_TOK_0001"
#define SUB(cred, ph, in) "{\"credential\":\"" cred "\",\"placeholder\":\"" ph "\",\"in\":" in "}"
#define PASS(subs) "{\"type\":\"passthrough\",\"substitutions\":[" subs "]}"

/* auth.type passthrough and substitutions on every auth type. */
static void
test_substitutions(void **state)
{
	struct policy_err err;
	struct binding_substitution sb;
	struct binding_set *bs =
	    vault(B("p", "{\"hosts\":[\"p.example\"]}",
	              PASS(SUB("tok", PH, "[\"path\",\"query\",\"header\",\"body\"]") "," SUB(
	                  "k2", "PLACEHOLDER_K2_0002", "[\"header\"]"))) "," B("b",
	              "{\"hosts\":[\"b.example\"]}",
	              "{\"type\":\"bearer\",\"credential\":\"k2\",\"substitutions\":[" SUB(
	                  "tok", PH, "[\"body\"]") "]}"),
	        &err);

	(void)state;
	if (bs == NULL)
		print_error("%s: %s\n", err.key, err.msg);
	assert_non_null(bs);
	assert_int_equal(binding_auth_type(bs, 0), BINDING_AUTH_PASSTHROUGH);
	assert_int_equal(binding_header_count(bs, 0), 0);
	assert_int_equal(binding_subst_count(bs, 0), 2);
	assert_int_equal(binding_subst_get(bs, 0, 0, &sb), 0);
	assert_int_equal(sb.len, strlen(PH));
	assert_memory_equal(sb.placeholder, PH, sb.len);
	assert_int_equal(
	    sb.in, BINDING_IN_PATH | BINDING_IN_QUERY | BINDING_IN_HEADER | BINDING_IN_BODY);
	assert_int_equal(binding_subst_get(bs, 0, 1, &sb), 0);
	assert_int_equal(sb.in, BINDING_IN_HEADER);
	assert_int_equal(binding_subst_get(bs, 0, 2, &sb), -1);
	assert_int_equal(binding_auth_type(bs, 1), BINDING_AUTH_BEARER);
	assert_int_equal(binding_subst_count(bs, 1), 1);
	/* the sanitized view names placeholders and credentials, never a value */
	json_t *j = binding_set_to_json(bs);
	char *s = json_dumps(j, JSON_COMPACT);
	assert_null(strstr(s, CANARY));
	assert_non_null(strstr(s, "\"type\":\"passthrough\""));
	assert_non_null(strstr(s, "\"placeholder\":\"" PH "\""));
	free(s);
	json_decref(j);
	binding_set_free(bs);

	/* strict validation */
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}", "{\"type\":\"passthrough\"}"),
	    "passthrough auth requires at least one substitution");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}",
	              "{\"type\":\"passthrough\",\"credential\":\"tok\",\"substitutions\":[" SUB(
	                  "tok", PH, "[\"path\"]") "]}"),
	    "passthrough auth takes only substitutions");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}", PASS(SUB("nope", PH, "[\"path\"]"))),
	    "references an unknown credential");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}", PASS(SUB("tok", "SHORT12", "[\"path\"]"))),
	    "placeholder must be 8 to 256 bytes");
	vault_err(
	    B("a", "{\"hosts\":[\"a.example\"]}", PASS(SUB("tok", "HAS SPACE_1", "[\"path\"]"))),
	    "is not printable ASCII");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}",
	              PASS(SUB("tok", "CTRL\\u0001_PH_1", "[\"path\"]"))),
	    "is not printable ASCII");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}", PASS(SUB("tok", PH, "[\"cookie\"]"))),
	    "unsupported substitution place");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}", PASS(SUB("tok", PH, "[]"))),
	    "a substitution requires in");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}", PASS(SUB("tok", PH, "\"path\""))),
	    "a substitution requires in");
	vault_err(
	    B("a", "{\"hosts\":[\"a.example\"]}", PASS(SUB("tok", PH, "[\"path\",\"path\"]"))),
	    "duplicate place");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}",
	              PASS("{\"credential\":\"tok\",\"placeholder\":\"" PH
	                   "\",\"in\":[\"path\"],\"value\":\"x\"}")),
	    "unknown key");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}",
	              PASS("{\"credential\":\"tok\",\"in\":[\"path\"]}")),
	    "a substitution requires placeholder");
	/* overlapping placeholders: within a binding and across bindings */
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}",
	              PASS(SUB("tok", PH, "[\"path\"]") "," SUB("k2", PH "X", "[\"path\"]"))),
	    "overlaps");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}",
	              PASS(SUB("tok", PH, "[\"path\"]") "," SUB("tok", PH, "[\"query\"]"))),
	    "is the same as");
	vault_err(
	    B("a", "{\"hosts\":[\"a.example\"]}", PASS(SUB("tok", PH, "[\"path\"]"))) "," B(
	        "b", "{\"hosts\":[\"b.example\"]}", PASS(SUB("k2", "TOK_0001", "[\"path\"]"))),
	    "overlaps");
	vault_err(B("a", "{\"hosts\":[\"a.example\"]}", PASS(SUB("tok", PH, "[\"path\"]"))) "," B(
	              "b", "{\"hosts\":[\"b.example\"]}", PASS(SUB("k2", PH, "[\"path\"]"))),
	    "is the same as");
	/* one credential may keep its placeholder on several bindings */
	bs = vault(B("a", "{\"hosts\":[\"a.example\"]}", PASS(SUB("tok", PH, "[\"path\"]"))) "," B(
	               "b", "{\"hosts\":[\"b.example\"]}", PASS(SUB("tok", PH, "[\"header\"]"))),
	    &err);
	assert_non_null(bs);
	binding_set_free(bs);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_vault_json_ok),
	    cmocka_unit_test(test_reveal),
	    cmocka_unit_test(test_vault_json_errors),
	    cmocka_unit_test(test_overlap),
	    cmocka_unit_test(test_match),
	    cmocka_unit_test(test_disjoint_runtime),
	    cmocka_unit_test(test_coverage),
	    cmocka_unit_test(test_exact),
	    cmocka_unit_test(test_errors_never_echo),
	    cmocka_unit_test(test_substitutions),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
