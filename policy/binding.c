/*
 * binding.c: credentials (by source) and credential bindings, their
 * OpenSandbox vault JSON and YAML front ends, validation (references,
 * reserved headers, static overlap, coverage by explicit allow rules) and
 * the per-request match. Run by the worker (policy files, vault writes,
 * every intercepted request) and by the CLI; never by the parent. Must never
 * print, log or return a credential value; inline values are wiped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/binding.h"
#include "policy/name.h"
#include "policy/policy_internal.h"

struct binding_cred {
	char *name;
	enum binding_source source;
	char *ref;      /* file path or env name */
	uint8_t *value; /* inline only; wiped on free */
	size_t vlen;
};

struct binding_host {
	char *name; /* canonical, "*.x" for a wildcard */
	bool wildcard;
	size_t src; /* index in the source hosts list */
};

struct binding_path {
	char *p; /* without the trailing '*' of a prefix */
	size_t len;
	bool prefix;
};

struct binding_hdr {
	char *name;
	const char *prefix;
	size_t cred;
};

struct binding_sub {
	char *ph; /* placeholder */
	size_t len;
	size_t cred;
	unsigned in; /* BINDING_IN_* */
};

struct binding {
	char *name;
	unsigned schemes; /* BINDING_SCHEME_* */
	unsigned ports;   /* 0x1 = 80, 0x2 = 443: the default ports of the schemes */
	bool broad;       /* allowBroad: wildcard hosts and the all-paths pattern allowed */
	struct binding_host *hosts;
	size_t nhosts;
	char **methods;
	size_t nmethods;
	struct binding_path *paths;
	size_t npaths;
	enum binding_auth auth;
	struct binding_hdr *hdrs;
	size_t nhdrs;
	struct binding_sub *subs;
	size_t nsubs;
};

struct binding_set {
	int refs;
	struct binding_cred *creds;
	size_t ncreds;
	struct binding *b;
	size_t nb;
};

#define BINDING_PORT_80 0x1
#define BINDING_PORT_443 0x2

static const char *const binding_default_methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};

/*
 * Headers that route, frame or describe the hop: injecting them would let
 * a binding smuggle requests or spoof the client (lowercase; "*" = prefix).
 */
static const char *const binding_reserved[] = {"host", "content-length", "content-type",
    "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive", "proxy-*",
    "forwarded", "x-forwarded-*", "via", "expect", "x-real-ip", "http2-settings", "alt-svc",
    "max-forwards", NULL};

static void
cred_deinit(struct binding_cred *c)
{
	free(c->name);
	free(c->ref);
	if (c->value != NULL) {
		explicit_bzero(c->value, c->vlen);
		free(c->value);
	}
}

static void
binding_deinit(struct binding *b)
{
	free(b->name);
	for (size_t i = 0; i < b->nhosts; i++)
		free(b->hosts[i].name);
	free(b->hosts);
	for (size_t i = 0; i < b->nmethods; i++)
		free(b->methods[i]);
	free(b->methods);
	for (size_t i = 0; i < b->npaths; i++)
		free(b->paths[i].p);
	free(b->paths);
	for (size_t i = 0; i < b->nhdrs; i++)
		free(b->hdrs[i].name);
	free(b->hdrs);
	for (size_t i = 0; i < b->nsubs; i++)
		free(b->subs[i].ph);
	free(b->subs);
}

/* Take a reference; see binding.h. */
struct binding_set *
binding_set_ref(struct binding_set *bs)
{
	if (bs != NULL)
		__atomic_add_fetch(&bs->refs, 1, __ATOMIC_RELAXED);
	return bs;
}

/* Drop a reference; see binding.h. */
void
binding_set_free(struct binding_set *bs)
{
	if (bs == NULL || __atomic_sub_fetch(&bs->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	for (size_t i = 0; i < bs->ncreds; i++)
		cred_deinit(&bs->creds[i]);
	free(bs->creds);
	for (size_t i = 0; i < bs->nb; i++)
		binding_deinit(&bs->b[i]);
	free(bs->b);
	free(bs);
}

/* ---- parsing helpers ---- */

static bool
bs_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

/* Trimmed view of a JSON string. */
static const char *
bs_trim(const json_t *v, size_t *len)
{
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);

	while (n > 0 && bs_space(*s)) {
		s++;
		n--;
	}
	while (n > 0 && bs_space(s[n - 1]))
		n--;
	*len = n;
	return s;
}

static char *
bs_strndup(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d != NULL) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

static bool
bs_tchar(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* Go's CanonicalMIMEHeaderKey for a token: Upper-Case-After-Dashes. */
static void
bs_header_canon(char *s)
{
	bool up = true;
	for (; *s; s++) {
		if (up && *s >= 'a' && *s <= 'z')
			*s = (char)(*s - 'a' + 'A');
		else if (!up && *s >= 'A' && *s <= 'Z')
			*s = (char)(*s - 'A' + 'a');
		up = *s == '-';
	}
}

static bool
bs_header_reserved(const char *name)
{
	for (size_t i = 0; binding_reserved[i] != NULL; i++) {
		const char *r = binding_reserved[i];
		size_t n = strlen(r);
		if (r[n - 1] == '*' ? strncasecmp(name, r, n - 1) == 0 : strcasecmp(name, r) == 0)
			return true;
	}
	return false;
}

static int
bs_cred_find(const struct binding_set *bs, const char *name, size_t *idx)
{
	for (size_t i = 0; i < bs->ncreds; i++) {
		if (strcmp(bs->creds[i].name, name) == 0) {
			*idx = i;
			return 0;
		}
	}
	return -1;
}

/* A required, trimmed, non-blank name of at most BINDING_MAX_NAME bytes. */
static int
bs_name(struct policy_ctx *c, const json_t *obj, const char *key, const char *path,
    const char *blank_msg, char **out)
{
	json_t *v = policy_ctx_member(obj, key);
	size_t n;
	const char *s;

	if (v != NULL && !json_is_null(v) && !policy_json_is_str(v))
		return policy_ctx_fail(
		    c, POLICY_ERR_INVALID, obj, key, 0, 0, path, "must be a string");
	s = v && json_is_string(v) ? bs_trim(v, &n) : "";
	if (v == NULL || !json_is_string(v))
		n = 0;
	if (n == 0)
		return policy_ctx_fail(
		    c, POLICY_ERR_INVALID, obj, v ? key : NULL, 0, 0, path, "%s", blank_msg);
	if (n > BINDING_MAX_NAME)
		return policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, obj, key, 0, 0, path,
		    "longer than %d bytes", BINDING_MAX_NAME);
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, key, 0, 0, path,
			    "control character in name");
	}
	if ((*out = bs_strndup(s, n)) == NULL)
		return policy_ctx_fail(c, POLICY_ERR_NOMEM, obj, key, 0, 0, path, "out of memory");
	return 0;
}

/* A list member: absent/null/[] gives *n = 0; else an array of strings. */
static int
bs_list(struct policy_ctx *c, const json_t *obj, const char *key, const char *path, json_t **arr,
    size_t *n)
{
	json_t *v = policy_ctx_member(obj, key);
	size_t i;
	json_t *e;

	*arr = NULL;
	*n = 0;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_array(v))
		return policy_ctx_fail(
		    c, POLICY_ERR_INVALID, obj, key, 0, 0, path, "must be a list");
	if (json_array_size(v) > BINDING_MAX_LIST)
		return policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, obj, key, 0, 0, path,
		    "more than %d entries", BINDING_MAX_LIST);
	if (strcmp(key, "ports") != 0) {
		char sub[160];
		policy_ctx_path(sub, sizeof(sub), path, key, 0);
		json_array_foreach(v, i, e)
		{
			if (!policy_json_is_str(e))
				return policy_ctx_fail(
				    c, POLICY_ERR_INVALID, v, NULL, i, 0, sub, "must be a string");
		}
	}
	*arr = v;
	*n = json_array_size(v);
	return 0;
}

/* ---- credentials ---- */

static const char *const cred_keys[] = {"name", "source", NULL};
static const char *const source_keys[] = {"type", "value", "path", "name", NULL};

static int
bs_env_name_ok(const char *s, size_t n)
{
	if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		        (ch >= '0' && ch <= '9') || ch == '_'))
			return 0;
	}
	return 1;
}

static int
bs_credential(
    struct policy_ctx *c, struct binding_set *bs, const json_t *arr, size_t idx, bool allow_inline)
{
	char path[64], spath[80];
	const json_t *obj = json_array_get(arr, idx);
	struct binding_cred *cr = &bs->creds[bs->ncreds];

	snprintf(path, sizeof(path), "credentials[%zu]", idx);
	snprintf(spath, sizeof(spath), "%s.source", path);
	if (!json_is_object(obj))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, arr, NULL, idx, 0, "credentials",
		    "a credential must be a mapping with name and source");
	if (policy_ctx_keys(c, obj, path, cred_keys) != 0 ||
	    bs_name(c, obj, "name", path, "credential name cannot be blank", &cr->name) != 0)
		return -1;
	bs->ncreds++;
	for (size_t i = 0; i + 1 < bs->ncreds; i++) {
		if (strcmp(bs->creds[i].name, cr->name) == 0)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "name", 0, 0, path,
			    "duplicate credential name (the same as credentials[%zu])", i);
	}
	json_t *src = policy_ctx_member(obj, "source");
	if (!json_is_object(src))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, src ? "source" : NULL, 0, 0,
		    src ? path : "credentials", "a credential needs a source mapping");
	if (policy_ctx_keys(c, src, spath, source_keys) != 0)
		return -1;
	json_t *type = policy_ctx_member(src, "type");
	json_t *value = policy_ctx_member(src, "value");
	json_t *fpath = policy_ctx_member(src, "path");
	json_t *ename = policy_ctx_member(src, "name");
	size_t tl = 0;
	const char *t = type && policy_json_is_str(type) ? bs_trim(type, &tl) : "";
	if (type != NULL && !json_is_null(type) && !policy_json_is_str(type))
		return policy_ctx_fail(
		    c, POLICY_ERR_INVALID, src, "type", 0, 0, spath, "must be a string");
	if (tl == 0 || (tl == 6 && strncmp(t, "inline", 6) == 0)) {
		/* Secrets never live in git: a policy file names a source instead. */
		if (!allow_inline)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, src, value ? "value" : NULL,
			    0, value ? 1 : 0, spath,
			    "inline credential values are not allowed in a policy file; "
			    "use a source of type file or env");
		if (fpath != NULL || ename != NULL)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, src, fpath ? "path" : "name",
			    0, 1, spath, "an inline source takes only a value");
		if (value == NULL || !json_is_string(value) || json_string_length(value) == 0)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, src, value ? "value" : NULL,
			    0, 0, spath, "inline value cannot be empty");
		if (json_string_length(value) > BINDING_MAX_VALUE)
			return policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, src, "value", 0, 0, spath,
			    "value longer than %d bytes", BINDING_MAX_VALUE);
		cr->source = BINDING_SOURCE_INLINE;
		cr->vlen = json_string_length(value);
		if ((cr->value = malloc(cr->vlen)) == NULL)
			return policy_ctx_fail(
			    c, POLICY_ERR_NOMEM, src, "value", 0, 0, spath, "out of memory");
		memcpy(cr->value, json_string_value(value), cr->vlen);
		return 0;
	}
	if (value != NULL)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, src, "value", 0, 1, spath,
		    allow_inline ? "a file or env source takes no value"
		                 : "inline credential values are not allowed in a policy file; "
		                   "use a source of type file or env");
	if (tl == 4 && strncmp(t, "file", 4) == 0) {
		size_t n = 0;
		const char *s = fpath && policy_json_is_str(fpath) ? bs_trim(fpath, &n) : "";
		if (ename != NULL)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, src, "name", 0, 1, spath,
			    "a file source takes a path, not a name");
		if (n == 0 || s[0] != '/')
			return policy_ctx_fail(c, POLICY_ERR_INVALID, src, fpath ? "path" : "type",
			    0, 0, spath, "a file source needs an absolute path");
		if (n > BINDING_MAX_PATH)
			return policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, src, "path", 0, 0, spath,
			    "path longer than %d bytes", BINDING_MAX_PATH);
		cr->source = BINDING_SOURCE_FILE;
		cr->ref = bs_strndup(s, n);
	} else if (tl == 3 && strncmp(t, "env", 3) == 0) {
		size_t n = 0;
		const char *s = ename && policy_json_is_str(ename) ? bs_trim(ename, &n) : "";
		if (fpath != NULL)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, src, "path", 0, 1, spath,
			    "an env source takes a name, not a path");
		if (!bs_env_name_ok(s, n) || n > BINDING_MAX_NAME)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, src, ename ? "name" : "type",
			    0, 0, spath,
			    "an env source needs a variable name ([A-Za-z_][A-Za-z0-9_]*)");
		cr->source = BINDING_SOURCE_ENV;
		cr->ref = bs_strndup(s, n);
	} else {
		return policy_ctx_fail(c, POLICY_ERR_INVALID, src, "type", 0, 0, spath,
		    "unsupported credential source type (inline, file or env)");
	}
	if (cr->ref == NULL)
		return policy_ctx_fail(
		    c, POLICY_ERR_NOMEM, src, "type", 0, 0, spath, "out of memory");
	return 0;
}

/* ---- bindings ---- */

static const char *const binding_keys[] = {"name", "allowBroad", "match", "auth", NULL};
static const char *const match_keys[] = {"schemes", "ports", "hosts", "methods", "paths", NULL};
static const char *const auth_keys[] = {
    "type", "credential", "name", "headers", "substitutions", NULL};
static const char *const hdr_keys[] = {"name", "credential", NULL};
static const char *const sub_keys[] = {"credential", "placeholder", "in", NULL};
static const char *const sub_in[] = {"path", "query", "header", "body", NULL};

static int
bs_hosts(struct policy_ctx *c, struct binding *b, const json_t *m, const char *mpath)
{
	json_t *arr, *v;
	size_t n, i;
	char sub[160];

	if (bs_list(c, m, "hosts", mpath, &arr, &n) != 0)
		return -1;
	if (n == 0)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, m,
		    policy_ctx_member(m, "hosts") ? "hosts" : NULL, 0, 0, mpath,
		    "match.hosts cannot be empty");
	policy_ctx_path(sub, sizeof(sub), mpath, "hosts", 0);
	if ((b->hosts = calloc(n, sizeof(*b->hosts))) == NULL)
		return policy_ctx_fail(
		    c, POLICY_ERR_NOMEM, m, "hosts", 0, 0, mpath, "out of memory");
	json_array_foreach(arr, i, v)
	{
		char canon[POLICY_NAME_MAX + 1];
		size_t len, clen;
		struct policy_addr a;
		const char *s = bs_trim(v, &len);

		/* Errors name the field, never its text: it may be a pasted secret. */
		if (policy_addr_parse((const uint8_t *)s, len, false, &a) == POLICY_NAME_OK)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, arr, NULL, i, 0, sub,
			    "credential binding host must be an FQDN, not an IP address");
		if (memchr(s, '/', len) != NULL ||
		    policy_name_canon((const uint8_t *)s, len,
		        POLICY_NAME_WILDCARD | POLICY_NAME_REQUIRE_DOT, canon,
		        &clen) != POLICY_NAME_OK)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, arr, NULL, i, 0, sub,
			    "host is not an FQDN or *.FQDN (no ports, schemes, paths or "
			    "non-ASCII)");
		/* A secret goes where one exact binding says: a zone needs an explicit opt-in. */
		if (policy_name_is_wildcard(canon) && !b->broad)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, arr, NULL, i, 0, sub,
			    "a wildcard host is refused unless the binding sets allowBroad: true");
		bool dup = false;
		for (size_t k = 0; k < b->nhosts && !dup; k++)
			dup = strcmp(b->hosts[k].name, canon) == 0;
		if (dup)
			continue;
		struct binding_host *h = &b->hosts[b->nhosts];
		if ((h->name = strdup(canon)) == NULL)
			return policy_ctx_fail(
			    c, POLICY_ERR_NOMEM, arr, NULL, i, 0, sub, "out of memory");
		h->wildcard = policy_name_is_wildcard(canon);
		h->src = i;
		b->nhosts++;
	}
	return 0;
}

static int
bs_match(struct policy_ctx *c, struct binding *b, const json_t *obj, const char *bpath)
{
	char mpath[96], sub[160];
	json_t *m = policy_ctx_member(obj, "match"), *arr, *v;
	size_t n, i;

	snprintf(mpath, sizeof(mpath), "%s.match", bpath);
	if (!json_is_object(m))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, m ? "match" : NULL, 0, 0, bpath,
		    "a binding needs a match mapping");
	if (policy_ctx_keys(c, m, mpath, match_keys) != 0)
		return -1;
	/* schemes */
	if (bs_list(c, m, "schemes", mpath, &arr, &n) != 0)
		return -1;
	policy_ctx_path(sub, sizeof(sub), mpath, "schemes", 0);
	json_array_foreach(arr, i, v)
	{
		size_t len;
		const char *s = bs_trim(v, &len);
		if (len == 4 && strncasecmp(s, "http", 4) == 0)
			b->schemes |= BINDING_SCHEME_HTTP;
		else if (len == 5 && strncasecmp(s, "https", 5) == 0)
			b->schemes |= BINDING_SCHEME_HTTPS;
		else
			return policy_ctx_fail(c, POLICY_ERR_INVALID, arr, NULL, i, 0, sub,
			    "scheme must be http or https");
	}
	if (b->schemes == 0)
		b->schemes = BINDING_SCHEME_HTTPS;
	/*
	 * ports: kept for OpenSandbox compatibility. A binding injects on its
	 * schemes' default ports only (https 443, http 80), so a listed port
	 * must be one of those and every scheme's port must be listed: a
	 * request to the host on any other port gets no secret.
	 */
	unsigned want = ((b->schemes & BINDING_SCHEME_HTTP) ? BINDING_PORT_80 : 0) |
	                ((b->schemes & BINDING_SCHEME_HTTPS) ? BINDING_PORT_443 : 0);
	if (bs_list(c, m, "ports", mpath, &arr, &n) != 0)
		return -1;
	policy_ctx_path(sub, sizeof(sub), mpath, "ports", 0);
	json_array_foreach(arr, i, v)
	{
		json_int_t p = json_is_integer(v) ? json_integer_value(v) : 0;
		unsigned bit = p == 80 ? BINDING_PORT_80 : p == 443 ? BINDING_PORT_443 : 0;
		if (bit == 0 || !(want & bit))
			return policy_ctx_fail(c, POLICY_ERR_INVALID, arr, NULL, i, 0, sub,
			    "a binding port must be the default port of one of its schemes "
			    "(https 443, http 80)");
		b->ports |= bit;
	}
	if (n > 0 && b->ports != want)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, m, "ports", 0, 0, mpath,
		    "ports must list the default port of every scheme of the binding "
		    "(https 443, http 80)");
	b->ports = want;
	if (bs_hosts(c, b, m, mpath) != 0)
		return -1;
	/* methods */
	if (bs_list(c, m, "methods", mpath, &arr, &n) != 0)
		return -1;
	policy_ctx_path(sub, sizeof(sub), mpath, "methods", 0);
	size_t nm = n ? n : sizeof(binding_default_methods) / sizeof(binding_default_methods[0]);
	if ((b->methods = calloc(nm, sizeof(*b->methods))) == NULL)
		return policy_ctx_fail(c, POLICY_ERR_NOMEM, m, NULL, 0, 0, mpath, "out of memory");
	for (i = 0; i < nm; i++) {
		char tmp[BINDING_MAX_NAME + 1];
		size_t len;
		const char *s =
		    n ? bs_trim(json_array_get(arr, i), &len) : binding_default_methods[i];
		if (!n)
			len = strlen(s);
		if (len == 0 || len > BINDING_MAX_NAME)
			return policy_ctx_fail(
			    c, POLICY_ERR_INVALID, arr, NULL, i, 0, sub, "method cannot be blank");
		for (size_t k = 0; k < len; k++) {
			if (!bs_tchar(s[k]))
				return policy_ctx_fail(c, POLICY_ERR_INVALID, arr, NULL, i, 0, sub,
				    "method must be an HTTP token");
			tmp[k] = (char)((s[k] >= 'a' && s[k] <= 'z') ? s[k] - 'a' + 'A' : s[k]);
		}
		tmp[len] = '\0';
		bool dup = false;
		for (size_t k = 0; k < b->nmethods && !dup; k++)
			dup = strcmp(b->methods[k], tmp) == 0;
		if (dup)
			continue;
		if ((b->methods[b->nmethods] = strdup(tmp)) == NULL)
			return policy_ctx_fail(
			    c, POLICY_ERR_NOMEM, m, NULL, 0, 0, mpath, "out of memory");
		b->nmethods++;
	}
	/* paths */
	if (bs_list(c, m, "paths", mpath, &arr, &n) != 0)
		return -1;
	policy_ctx_path(sub, sizeof(sub), mpath, "paths", 0);
	size_t np = n ? n : 1;
	if ((b->paths = calloc(np, sizeof(*b->paths))) == NULL)
		return policy_ctx_fail(c, POLICY_ERR_NOMEM, m, NULL, 0, 0, mpath, "out of memory");
	for (i = 0; i < np; i++) {
		size_t len;
		const char *s = n ? bs_trim(json_array_get(arr, i), &len) : "/*";
		if (!n)
			len = 2;
		if (len == 0 || s[0] != '/')
			return policy_ctx_fail(
			    c, POLICY_ERR_INVALID, arr, NULL, i, 0, sub, "path must start with /");
		if (len > BINDING_MAX_PATH)
			return policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, arr, NULL, i, 0, sub,
			    "path longer than %d bytes", BINDING_MAX_PATH);
		for (size_t k = 0; k < len; k++) {
			unsigned char ch = (unsigned char)s[k];
			/* '*' only as the final prefix marker; no query, fragment or controls. */
			if (ch <= 0x20 || ch >= 0x7f || ch == '?' || ch == '#' ||
			    (ch == '*' && k != len - 1))
				return policy_ctx_fail(c, POLICY_ERR_INVALID, arr, NULL, i, 0, sub,
				    "path must be printable ASCII without ?, # or spaces, with * "
				    "only at the end");
		}
		bool prefix = s[len - 1] == '*';
		size_t plen = prefix ? len - 1 : len;
		/* A lone "/" prefix (also the default when paths is absent) matches every path. */
		if (prefix && plen == 1 && !b->broad && n > 0)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, arr, NULL, i, 0, sub,
			    "the all-paths pattern is refused unless the binding sets "
			    "allowBroad: true");
		if (prefix && plen == 1 && !b->broad)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, m,
			    policy_ctx_member(m, "paths") ? "paths" : NULL, 0, 0, mpath,
			    "paths is required: the default /* matches every path (list the "
			    "paths, or set allowBroad: true on the binding)");
		bool dup = false;
		for (size_t k = 0; k < b->npaths && !dup; k++)
			dup = b->paths[k].prefix == prefix && b->paths[k].len == plen &&
			      memcmp(b->paths[k].p, s, plen) == 0;
		if (dup)
			continue;
		struct binding_path *bp = &b->paths[b->npaths];
		if ((bp->p = bs_strndup(s, plen)) == NULL)
			return policy_ctx_fail(
			    c, POLICY_ERR_NOMEM, m, NULL, 0, 0, mpath, "out of memory");
		bp->len = plen;
		bp->prefix = prefix;
		b->npaths++;
	}
	return 0;
}

/* Validate and canonicalise one header name into *out. */
static int
bs_header_name(
    struct policy_ctx *c, const json_t *obj, const char *key, const char *path, char **out)
{
	json_t *v = policy_ctx_member(obj, key);
	size_t n = 0;
	const char *s = v && policy_json_is_str(v) ? bs_trim(v, &n) : "";

	if (n == 0)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, v ? key : NULL, 0, 0, path,
		    "header name cannot be blank");
	if (n > BINDING_MAX_NAME)
		return policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, obj, key, 0, 0, path,
		    "header name longer than %d bytes", BINDING_MAX_NAME);
	for (size_t i = 0; i < n; i++) {
		/* Invalid input is not echoed: it could be a value pasted in the wrong field. */
		if (!bs_tchar(s[i]))
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, key, 0, 0, path,
			    "invalid credential header name (byte %zu is not a token character)",
			    i + 1);
	}
	if ((*out = bs_strndup(s, n)) == NULL)
		return policy_ctx_fail(c, POLICY_ERR_NOMEM, obj, key, 0, 0, path, "out of memory");
	if (bs_header_reserved(*out))
		return policy_ctx_fail(
		    c, POLICY_ERR_INVALID, obj, key, 0, 0, path, "reserved credential header name");
	bs_header_canon(*out);
	return 0;
}

/* A credential reference: trimmed, non-blank, must name a credential. */
static int
bs_cred_ref(struct policy_ctx *c, const struct binding_set *bs, const struct binding *b,
    const json_t *obj, const char *path, const char *blank_msg, size_t *idx)
{
	json_t *v = policy_ctx_member(obj, "credential");
	size_t n = 0;
	const char *s = v && policy_json_is_str(v) ? bs_trim(v, &n) : "";
	char tmp[BINDING_MAX_NAME + 1];

	(void)b;
	if (n == 0)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, v ? "credential" : NULL, 0, 0,
		    path, "%s", blank_msg);
	if (n > BINDING_MAX_NAME)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "credential", 0, 0, path,
		    "references an unknown credential");
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	if (bs_cred_find(bs, tmp, idx) != 0)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "credential", 0, 0, path,
		    "references an unknown credential");
	return 0;
}

static bool
bs_absent(const json_t *obj, const char *key)
{
	json_t *v = policy_ctx_member(obj, key);
	return v == NULL || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0) ||
	       (json_is_array(v) && json_array_size(v) == 0);
}

/* One entry of auth.substitutions into b->subs[b->nsubs]. */
static int
bs_sub(struct policy_ctx *c, struct binding_set *bs, struct binding *b, const json_t *arr,
    size_t idx, const char *lpath)
{
	char spath[160], ipath[176];
	const json_t *h = json_array_get(arr, idx);
	struct binding_sub *sb = &b->subs[b->nsubs];
	json_t *ph, *in, *e;
	size_t n, i;
	const char *p;

	snprintf(spath, sizeof(spath), "%s[%zu]", lpath, idx);
	if (!json_is_object(h))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, arr, NULL, idx, 0, lpath,
		    "a substitution must be a mapping with credential, placeholder and in");
	if (policy_ctx_keys(c, h, spath, sub_keys) != 0 ||
	    bs_cred_ref(c, bs, b, h, spath, "a substitution requires credential", &sb->cred) != 0)
		return -1;
	ph = policy_ctx_member(h, "placeholder");
	if (ph == NULL || !json_is_string(ph) || json_string_length(ph) == 0)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, h, ph ? "placeholder" : NULL, 0, 0,
		    spath, "a substitution requires placeholder");
	p = json_string_value(ph);
	n = json_string_length(ph);
	/* A short or common placeholder would match text that was never one. */
	if (n < BINDING_PLACEHOLDER_MIN || n > BINDING_PLACEHOLDER_MAX)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, h, "placeholder", 0, 0, spath,
		    "placeholder must be %d to %d bytes", BINDING_PLACEHOLDER_MIN,
		    BINDING_PLACEHOLDER_MAX);
	for (i = 0; i < n; i++) {
		if ((unsigned char)p[i] <= 0x20 || (unsigned char)p[i] >= 0x7f)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, h, "placeholder", 0, 0, spath,
			    "placeholder byte %zu is not printable ASCII (no space, no control "
			    "character)",
			    i + 1);
	}
	/*
	 * Each placeholder names one credential: one that contains another
	 * (or equals one of another credential) would substitute by accident.
	 */
	for (size_t k = 0; k <= bs->nb - 1; k++) {
		const struct binding *o = &bs->b[k];
		size_t m = o == b ? b->nsubs : o->nsubs;
		for (size_t j = 0; j < m; j++) {
			const struct binding_sub *x = &o->subs[j];
			bool same = x->len == n && memcmp(x->ph, p, n) == 0;
			if (same && o != b && x->cred == sb->cred)
				continue; /* one credential, one placeholder, several hosts */
			if (same || (x->len > n && memmem(x->ph, x->len, p, n) != NULL) ||
			    (n > x->len && memmem(p, n, x->ph, x->len) != NULL))
				return policy_ctx_fail(c, POLICY_ERR_INVALID, h, "placeholder", 0,
				    0, spath,
				    "placeholder %s a placeholder of bindings[%zu].auth."
				    "substitutions[%zu]",
				    same ? "is the same as" : "overlaps", k, j);
		}
	}
	in = policy_ctx_member(h, "in");
	snprintf(ipath, sizeof(ipath), "%s.in", spath);
	if (!json_is_array(in) || json_array_size(in) == 0)
		return policy_ctx_fail(c, POLICY_ERR_INVALID, h, in ? "in" : NULL, 0, 0, spath,
		    "a substitution requires in (path, query, header or body)");
	json_array_foreach(in, i, e)
	{
		unsigned bit = 0;
		for (size_t k = 0; sub_in[k] != NULL && bit == 0; k++)
			if (json_is_string(e) && strcmp(json_string_value(e), sub_in[k]) == 0)
				bit = 1u << k;
		if (bit == 0)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, in, NULL, i, 0, ipath,
			    "unsupported substitution place (path, query, header or body)");
		if (sb->in & bit)
			return policy_ctx_fail(
			    c, POLICY_ERR_INVALID, in, NULL, i, 0, ipath, "duplicate place");
		sb->in |= bit;
	}
	if ((sb->ph = bs_strndup(p, n)) == NULL)
		return policy_ctx_fail(c, POLICY_ERR_NOMEM, h, NULL, 0, 0, spath, "out of memory");
	sb->len = n;
	b->nsubs++;
	return 0;
}

/* auth.substitutions (any auth type); passthrough needs at least one. */
static int
bs_subs(struct policy_ctx *c, struct binding_set *bs, struct binding *b, const json_t *a,
    const char *apath)
{
	json_t *l = policy_ctx_member(a, "substitutions");
	char lpath[128];

	snprintf(lpath, sizeof(lpath), "%s.substitutions", apath);
	if (l != NULL && !json_is_null(l) && !json_is_array(l))
		return policy_ctx_fail(
		    c, POLICY_ERR_INVALID, a, "substitutions", 0, 0, apath, "must be a list");
	if (json_array_size(l) == 0) {
		if (b->auth == BINDING_AUTH_PASSTHROUGH)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, a, l ? "substitutions" : NULL,
			    0, 0, apath, "passthrough auth requires at least one substitution");
		return 0;
	}
	if (json_array_size(l) > BINDING_MAX_LIST)
		return policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, a, "substitutions", 0, 0, apath,
		    "more than %d substitutions", BINDING_MAX_LIST);
	if ((b->subs = calloc(json_array_size(l), sizeof(*b->subs))) == NULL)
		return policy_ctx_fail(c, POLICY_ERR_NOMEM, a, NULL, 0, 0, apath, "out of memory");
	for (size_t i = 0; i < json_array_size(l); i++)
		if (bs_sub(c, bs, b, l, i, lpath) != 0)
			return -1;
	return 0;
}

static int bs_auth_type(struct policy_ctx *c, struct binding_set *bs, struct binding *b,
    const json_t *a, const char *apath);

static int
bs_auth(struct policy_ctx *c, struct binding_set *bs, struct binding *b, const json_t *obj,
    const char *bpath)
{
	char apath[96];
	json_t *a = policy_ctx_member(obj, "auth");

	snprintf(apath, sizeof(apath), "%s.auth", bpath);
	if (!json_is_object(a))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, a ? "auth" : NULL, 0, 0, bpath,
		    "a binding needs an auth mapping");
	if (policy_ctx_keys(c, a, apath, auth_keys) != 0 || bs_auth_type(c, bs, b, a, apath) != 0)
		return -1;
	return bs_subs(c, bs, b, a, apath);
}

static int
bs_auth_type(struct policy_ctx *c, struct binding_set *bs, struct binding *b, const json_t *a,
    const char *apath)
{
	json_t *t = policy_ctx_member(a, "type");
	const char *ts = policy_json_is_str(t) ? json_string_value(t) : "";
	size_t cred = 0;

	/* The auth type is case-sensitive, as OpenSandbox. */
	if (strcmp(ts, "passthrough") == 0) {
		if (!bs_absent(a, "name") || !bs_absent(a, "headers") ||
		    !bs_absent(a, "credential"))
			return policy_ctx_fail(c, POLICY_ERR_INVALID, a,
			    !bs_absent(a, "name")      ? "name"
			    : !bs_absent(a, "headers") ? "headers"
			                               : "credential",
			    0, 1, apath, "passthrough auth takes only substitutions");
		b->auth = BINDING_AUTH_PASSTHROUGH;
		return 0;
	}
	if (strcmp(ts, "bearer") == 0 || strcmp(ts, "basic") == 0) {
		bool bearer = ts[1] == 'e';
		if (!bs_absent(a, "name") || !bs_absent(a, "headers"))
			return policy_ctx_fail(c, POLICY_ERR_INVALID, a,
			    bs_absent(a, "name") ? "headers" : "name", 0, 1, apath,
			    "%s auth takes only a credential", ts);
		if (bs_cred_ref(c, bs, b, a, apath,
		        bearer ? "bearer auth requires credential"
		               : "basic auth requires credential",
		        &cred) != 0)
			return -1;
		b->auth = bearer ? BINDING_AUTH_BEARER : BINDING_AUTH_BASIC;
		if ((b->hdrs = calloc(1, sizeof(*b->hdrs))) == NULL ||
		    (b->hdrs[0].name = strdup("Authorization")) == NULL)
			return policy_ctx_fail(
			    c, POLICY_ERR_NOMEM, a, NULL, 0, 0, apath, "out of memory");
		b->hdrs[0].prefix = bearer ? "Bearer " : "Basic ";
		b->hdrs[0].cred = cred;
		b->nhdrs = 1;
		return 0;
	}
	if (strcmp(ts, "apiKey") == 0) {
		char *hn = NULL;
		if (!bs_absent(a, "headers"))
			return policy_ctx_fail(c, POLICY_ERR_INVALID, a, "headers", 0, 1, apath,
			    "apiKey auth takes a name and a credential");
		if (bs_header_name(c, a, "name", apath, &hn) != 0) {
			free(hn);
			return -1;
		}
		if (bs_cred_ref(c, bs, b, a, apath, "apiKey auth requires credential", &cred) !=
		    0) {
			free(hn);
			return -1;
		}
		if ((b->hdrs = calloc(1, sizeof(*b->hdrs))) == NULL) {
			free(hn);
			return policy_ctx_fail(
			    c, POLICY_ERR_NOMEM, a, NULL, 0, 0, apath, "out of memory");
		}
		b->auth = BINDING_AUTH_APIKEY;
		b->hdrs[0].name = hn;
		b->hdrs[0].prefix = "";
		b->hdrs[0].cred = cred;
		b->nhdrs = 1;
		return 0;
	}
	if (strcmp(ts, "customHeaders") == 0) {
		json_t *hs = policy_ctx_member(a, "headers"), *h;
		size_t i;
		char hpath[128];
		if (!bs_absent(a, "name") || !bs_absent(a, "credential"))
			return policy_ctx_fail(c, POLICY_ERR_INVALID, a,
			    bs_absent(a, "name") ? "credential" : "name", 0, 1, apath,
			    "customHeaders auth takes only headers");
		if (!json_is_array(hs) || json_array_size(hs) == 0)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, a, hs ? "headers" : NULL, 0,
			    0, apath, "customHeaders auth requires at least one header");
		if (json_array_size(hs) > BINDING_MAX_LIST)
			return policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, a, "headers", 0, 0, apath,
			    "more than %d headers", BINDING_MAX_LIST);
		if ((b->hdrs = calloc(json_array_size(hs), sizeof(*b->hdrs))) == NULL)
			return policy_ctx_fail(
			    c, POLICY_ERR_NOMEM, a, NULL, 0, 0, apath, "out of memory");
		b->auth = BINDING_AUTH_CUSTOM;
		json_array_foreach(hs, i, h)
		{
			char msg[64];
			snprintf(hpath, sizeof(hpath), "%s.headers[%zu]", apath, i);
			if (!json_is_object(h)) {
				char lpath[128];
				snprintf(lpath, sizeof(lpath), "%s.headers", apath);
				return policy_ctx_fail(c, POLICY_ERR_INVALID, hs, NULL, i, 0, lpath,
				    "a header must be a mapping with name and credential");
			}
			if (policy_ctx_keys(c, h, hpath, hdr_keys) != 0 ||
			    bs_header_name(c, h, "name", hpath, &b->hdrs[i].name) != 0) {
				b->nhdrs = i + 1;
				return -1;
			}
			b->nhdrs = i + 1;
			snprintf(
			    msg, sizeof(msg), "customHeaders entry \"%zu\" requires credential", i);
			if (bs_cred_ref(c, bs, b, h, hpath, msg, &b->hdrs[i].cred) != 0)
				return -1;
			b->hdrs[i].prefix = "";
			for (size_t k = 0; k < i; k++) {
				if (strcasecmp(b->hdrs[k].name, b->hdrs[i].name) == 0)
					return policy_ctx_fail(c, POLICY_ERR_INVALID, h, "name", 0,
					    0, hpath,
					    "duplicate custom header name (the same as "
					    "headers[%zu])",
					    k);
			}
		}
		return 0;
	}
	return policy_ctx_fail(c, POLICY_ERR_INVALID, a, t ? "type" : NULL, 0, 0, apath,
	    "unsupported auth type (bearer, basic, apiKey, customHeaders, passthrough)");
}

/* Reserved header name (not NUL-terminated); see binding.h. */
bool
binding_header_reserved(const char *name, size_t len)
{
	char tmp[BINDING_MAX_NAME + 1];

	if (len > BINDING_MAX_NAME)
		return false;
	memcpy(tmp, name, len);
	tmp[len] = '\0';
	return bs_header_reserved(tmp);
}

/* ---- static overlap ---- */

static bool
bs_paths_overlap(const struct binding_path *x, const struct binding_path *y)
{
	if (!x->prefix && !y->prefix)
		return x->len == y->len && memcmp(x->p, y->p, x->len) == 0;
	if (x->prefix && !y->prefix)
		return y->len >= x->len && memcmp(x->p, y->p, x->len) == 0;
	if (!x->prefix && y->prefix)
		return x->len >= y->len && memcmp(x->p, y->p, y->len) == 0;
	size_t n = x->len < y->len ? x->len : y->len;
	return memcmp(x->p, y->p, n) == 0;
}

/* Hosts of the same precedence class that some name matches under both. */
static bool
bs_hosts_overlap(const struct binding_host *x, const struct binding_host *y)
{
	if (x->wildcard != y->wildcard)
		return false; /* an exact host beats a wildcard at runtime */
	if (!x->wildcard)
		return strcmp(x->name, y->name) == 0;
	const char *a = x->name + 2, *b = y->name + 2;
	size_t la = strlen(a), lb = strlen(b);
	if (la == lb)
		return strcmp(a, b) == 0;
	const char *lo = la > lb ? a : b, *sh = la > lb ? b : a;
	size_t ll = la > lb ? la : lb, ls = la > lb ? lb : la;
	return lo[ll - ls - 1] == '.' && strcmp(lo + ll - ls, sh) == 0;
}

static bool
bs_overlap(const struct binding *x, const struct binding *y)
{
	bool hit = false;

	if (!(x->schemes & y->schemes) || !(x->ports & y->ports))
		return false;
	for (size_t i = 0; i < x->nmethods && !hit; i++)
		for (size_t j = 0; j < y->nmethods && !hit; j++)
			hit = strcmp(x->methods[i], y->methods[j]) == 0;
	if (!hit)
		return false;
	hit = false;
	for (size_t i = 0; i < x->npaths && !hit; i++)
		for (size_t j = 0; j < y->npaths && !hit; j++)
			hit = bs_paths_overlap(&x->paths[i], &y->paths[j]);
	if (!hit)
		return false;
	for (size_t i = 0; i < x->nhosts; i++)
		for (size_t j = 0; j < y->nhosts; j++)
			if (bs_hosts_overlap(&x->hosts[i], &y->hosts[j]))
				return true;
	return false;
}

static int
bs_binding(struct policy_ctx *c, struct binding_set *bs, const json_t *arr, size_t idx)
{
	char path[64];
	const json_t *obj = json_array_get(arr, idx);
	struct binding *b = &bs->b[bs->nb];

	snprintf(path, sizeof(path), "bindings[%zu]", idx);
	if (!json_is_object(obj))
		return policy_ctx_fail(c, POLICY_ERR_INVALID, arr, NULL, idx, 0, "bindings",
		    "a binding must be a mapping with name, match and auth");
	if (policy_ctx_keys(c, obj, path, binding_keys) != 0 ||
	    bs_name(c, obj, "name", path, "binding name cannot be blank", &b->name) != 0)
		return -1;
	bs->nb++;
	for (size_t i = 0; i + 1 < bs->nb; i++) {
		if (strcmp(bs->b[i].name, b->name) == 0)
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "name", 0, 0, path,
			    "duplicate binding name (the same as bindings[%zu])", i);
	}
	json_t *broad = policy_ctx_member(obj, "allowBroad");
	if (broad != NULL && !json_is_null(broad) && !json_is_boolean(broad))
		return policy_ctx_fail(
		    c, POLICY_ERR_INVALID, obj, "allowBroad", 0, 0, path, "must be true or false");
	b->broad = json_is_true(broad);
	if (bs_match(c, b, obj, path) != 0 || bs_auth(c, bs, b, obj, path) != 0)
		return -1;
	/* No request may be claimed by two bindings: pick one or refuse, statically. */
	for (size_t i = 0; i + 1 < bs->nb; i++) {
		if (bs_overlap(&bs->b[i], b))
			return policy_ctx_fail(c, POLICY_ERR_INVALID, obj, "name", 0, 0, path,
			    "bindings[%zu] and bindings[%zu] can match the same request", i,
			    bs->nb - 1);
	}
	return 0;
}

/* Build from the two lists; see policy_internal.h. */
struct binding_set *
binding_set_from_tree(struct policy_ctx *c, const json_t *root, const json_t *creds,
    const json_t *bindings, bool allow_inline)
{
	struct binding_set *bs = calloc(1, sizeof(*bs));
	size_t nc = json_array_size(creds), nb = json_array_size(bindings);

	if (bs == NULL) {
		policy_ctx_fail(c, POLICY_ERR_NOMEM, NULL, NULL, 0, 0, "", "out of memory");
		return NULL;
	}
	bs->refs = 1;
	if (creds != NULL && !json_is_null(creds) && !json_is_array(creds)) {
		policy_ctx_fail(c, POLICY_ERR_INVALID, root, "credentials", 0, 0, "",
		    "credentials must be a list");
		goto fail;
	}
	if (bindings != NULL && !json_is_null(bindings) && !json_is_array(bindings)) {
		policy_ctx_fail(
		    c, POLICY_ERR_INVALID, root, "bindings", 0, 0, "", "bindings must be a list");
		goto fail;
	}
	if (nc > BINDING_MAX_CREDENTIALS || nb > BINDING_MAX_BINDINGS) {
		policy_ctx_fail(c, POLICY_ERR_TOO_LARGE, root,
		    nc > BINDING_MAX_CREDENTIALS ? "credentials" : "bindings", 0, 1, "",
		    "more than %d entries", BINDING_MAX_CREDENTIALS);
		goto fail;
	}
	if ((nc && (bs->creds = calloc(nc, sizeof(*bs->creds))) == NULL) ||
	    (nb && (bs->b = calloc(nb, sizeof(*bs->b))) == NULL)) {
		policy_ctx_fail(c, POLICY_ERR_NOMEM, NULL, NULL, 0, 0, "", "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < nc; i++) {
		if (bs_credential(c, bs, creds, i, allow_inline) != 0)
			goto fail;
	}
	for (size_t i = 0; i < nb; i++) {
		if (bs_binding(c, bs, bindings, i) != 0)
			goto fail;
	}
	return bs;
fail:
	binding_set_free(bs);
	return NULL;
}

static const char *const vault_keys[] = {"credentials", "bindings", NULL};

/* Wipe every inline value string of the parsed request before it is freed. */
static void
bs_wipe_tree(json_t *creds)
{
	size_t i;
	json_t *cr;

	json_array_foreach(creds, i, cr)
	{
		json_t *v = policy_ctx_member(policy_ctx_member(cr, "source"), "value");
		if (json_is_string(v))
			explicit_bzero((char *)json_string_value(v), json_string_length(v));
	}
}

/* Vault CreateRequest; see binding.h. */
struct binding_set *
binding_set_from_json(const char *buf, size_t len, struct policy_err *err)
{
	struct policy_ctx c;
	json_error_t je;
	json_t *root;
	struct binding_set *bs = NULL;

	policy_ctx_init(&c, err, "<json>", NULL, NULL);
	if (len > BINDING_MAX_JSON_BYTES) {
		policy_ctx_fail(&c, POLICY_ERR_TOO_LARGE, NULL, NULL, 0, 0, "",
		    "request larger than %u bytes", BINDING_MAX_JSON_BYTES);
		return NULL;
	}
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	if (root == NULL) {
		/* jansson's message never quotes string contents, only positions. */
		err->code = POLICY_ERR_SYNTAX;
		err->line = je.line > 0 ? (unsigned)je.line : 0;
		err->col = je.column > 0 ? (unsigned)je.column : 0;
		snprintf(err->msg, sizeof(err->msg), "invalid JSON");
		return NULL;
	}
	json_t *creds = policy_ctx_member(root, "credentials");
	if (!json_is_object(root)) {
		policy_ctx_fail(
		    &c, POLICY_ERR_INVALID, NULL, NULL, 0, 0, "", "request must be a JSON object");
	} else if (policy_ctx_keys(&c, root, "", vault_keys) == 0) {
		bs = binding_set_from_tree(
		    &c, root, creds, policy_ctx_member(root, "bindings"), true);
	}
	if (json_is_array(creds))
		bs_wipe_tree(creds);
	json_decref(root);
	return bs;
}

/* ---- coverage ---- */

static const char *
bs_host_cover(const struct policy *p, const struct binding *b, const struct binding_host *h)
{
	struct policy_decision d;

	policy_decide_name(p, h->name, &d);
	if (d.action != POLICY_ALLOW || d.origin == POLICY_ORIGIN_DEFAULT)
		return "is not covered by an explicit allow egress rule";
	/* A port-limited allow must include every port the binding injects on. */
	if (((b->schemes & BINDING_SCHEME_HTTPS) &&
	        !policy_ports_contain(d.ports, d.nports, 443)) ||
	    ((b->schemes & BINDING_SCHEME_HTTP) && !policy_ports_contain(d.ports, d.nports, 80)))
		return "is allowed by a rule whose ports exclude the binding's scheme port";
	return NULL;
}

/* Coverage with location; see policy_internal.h. */
int
binding_set_check(const struct binding_set *bs, const struct policy *p, struct policy_err *err,
    size_t *bad_binding, size_t *bad_host)
{
	memset(err, 0, sizeof(*err));
	*bad_binding = *bad_host = 0;
	if (bs == NULL || bs->nb == 0)
		return 0;
	size_t total = 0;
	for (int o = 0; o < POLICY_ORIGIN_RULE_LISTS; o++)
		total += policy_rule_count(p, (enum policy_origin)o);
	if (total == 0) {
		err->code = POLICY_ERR_INVALID;
		snprintf(err->msg, sizeof(err->msg),
		    "credential bindings require explicit networkPolicy.egress allow rules");
		return -1;
	}
	for (size_t i = 0; i < bs->nb; i++) {
		for (size_t j = 0; j < bs->b[i].nhosts; j++) {
			const char *why = bs_host_cover(p, &bs->b[i], &bs->b[i].hosts[j]);
			if (why != NULL) {
				err->code = POLICY_ERR_INVALID;
				/* By position: a name or host may be a pasted secret. */
				snprintf(err->key, sizeof(err->key),
				    "bindings[%zu].match.hosts[%zu]", i, bs->b[i].hosts[j].src);
				snprintf(err->msg, sizeof(err->msg), "host %s", why);
				*bad_binding = i;
				*bad_host = bs->b[i].hosts[j].src;
				return -1;
			}
		}
	}
	return 0;
}

/* Coverage; see binding.h. */
int
binding_set_validate(const struct binding_set *bs, const struct policy *p, struct policy_err *err)
{
	size_t bi, hi;
	return binding_set_check(bs, p, err, &bi, &hi);
}

/* ---- runtime ---- */

/* 2: exact host, 1: wildcard strictly below its apex, 0: no match. */
static int
bs_host_level(const struct binding *b, const char *host, size_t hlen)
{
	int best = 0;

	for (size_t i = 0; i < b->nhosts; i++) {
		const struct binding_host *h = &b->hosts[i];
		if (!h->wildcard) {
			if (strcmp(h->name, host) == 0)
				return 2;
			continue;
		}
		const char *suf = h->name + 1; /* ".example.com" */
		size_t sl = strlen(suf);
		if (hlen > sl && memcmp(host + hlen - sl, suf, sl) == 0)
			best = 1;
	}
	return best;
}

static bool
bs_path_match(const struct binding *b, const char *path, size_t plen)
{
	for (size_t i = 0; i < b->npaths; i++) {
		const struct binding_path *p = &b->paths[i];
		if (p->prefix ? plen >= p->len && memcmp(path, p->p, p->len) == 0
		              : plen == p->len && memcmp(path, p->p, plen) == 0)
			return true;
	}
	return false;
}

/* Request match; see binding.h. */
enum binding_match_result
binding_match(const struct binding_set *bs, const char *scheme, const char *host, uint16_t port,
    const char *method, const char *path, size_t *index)
{
	unsigned sch, pbit;
	int best = 0;
	size_t count = 0, hlen, plen;

	*index = SIZE_MAX;
	if (bs == NULL || scheme == NULL || host == NULL || method == NULL || path == NULL)
		return BINDING_MATCH_NONE;
	/* Exact port: only the scheme's default port, and only if the binding lists it. */
	if (strcmp(scheme, "https") == 0 && port == 443) {
		sch = BINDING_SCHEME_HTTPS;
		pbit = BINDING_PORT_443;
	} else if (strcmp(scheme, "http") == 0 && port == 80) {
		sch = BINDING_SCHEME_HTTP;
		pbit = BINDING_PORT_80;
	} else {
		return BINDING_MATCH_NONE;
	}
	hlen = strlen(host);
	plen = strcspn(path, "?");
	for (size_t i = 0; i < bs->nb; i++) {
		const struct binding *b = &bs->b[i];
		bool m = false;
		if (!(b->schemes & sch) || !(b->ports & pbit))
			continue;
		int lvl = bs_host_level(b, host, hlen);
		if (lvl == 0 || lvl < best)
			continue;
		for (size_t k = 0; k < b->nmethods && !m; k++)
			m = strcmp(b->methods[k], method) == 0;
		if (!m || !bs_path_match(b, path, plen))
			continue;
		if (lvl > best) {
			best = lvl;
			count = 0;
		}
		count++;
		*index = i;
	}
	if (count == 0) {
		*index = SIZE_MAX;
		return BINDING_MATCH_NONE;
	}
	return count == 1 ? BINDING_MATCH_ONE : BINDING_MATCH_AMBIGUOUS;
}

/* Host named by some binding; see binding.h. */
bool
binding_host_has_binding(const struct binding_set *bs, const char *host)
{
	size_t hlen = strlen(host);

	for (size_t i = 0; bs != NULL && i < bs->nb; i++) {
		if (bs_host_level(&bs->b[i], host, hlen) > 0)
			return true;
	}
	return false;
}

/* ---- accessors ---- */

/* Number of bindings; see binding.h. */
size_t
binding_set_count(const struct binding_set *bs)
{
	return bs ? bs->nb : 0;
}

/* Number of credentials; see binding.h. */
size_t
binding_credential_count(const struct binding_set *bs)
{
	return bs ? bs->ncreds : 0;
}

/* Binding name; see binding.h. */
const char *
binding_name(const struct binding_set *bs, size_t i)
{
	return i < binding_set_count(bs) ? bs->b[i].name : NULL;
}

/* Auth type; see binding.h. */
enum binding_auth
binding_auth_type(const struct binding_set *bs, size_t i)
{
	return bs->b[i].auth;
}

/* allowBroad; see binding.h. */
bool
binding_allow_broad(const struct binding_set *bs, size_t i)
{
	return i < binding_set_count(bs) && bs->b[i].broad;
}

/* Schemes; see binding.h. */
unsigned
binding_schemes(const struct binding_set *bs, size_t i)
{
	return i < binding_set_count(bs) ? bs->b[i].schemes : 0;
}

/* Header count; see binding.h. */
size_t
binding_header_count(const struct binding_set *bs, size_t i)
{
	return i < binding_set_count(bs) ? bs->b[i].nhdrs : 0;
}

/* One injected header; see binding.h. */
int
binding_header_get(const struct binding_set *bs, size_t i, size_t j, struct binding_header *out)
{
	if (i >= binding_set_count(bs) || j >= bs->b[i].nhdrs)
		return -1;
	out->name = bs->b[i].hdrs[j].name;
	out->prefix = bs->b[i].hdrs[j].prefix;
	out->credential = bs->b[i].hdrs[j].cred;
	return 0;
}

/* One credential without its value; see binding.h. */
/* Substitutions of binding i; see binding.h. */
size_t
binding_subst_count(const struct binding_set *bs, size_t i)
{
	return i < bs->nb ? bs->b[i].nsubs : 0;
}

/* Substitution j of binding i; see binding.h. */
int
binding_subst_get(
    const struct binding_set *bs, size_t i, size_t j, struct binding_substitution *out)
{
	if (i >= bs->nb || j >= bs->b[i].nsubs)
		return -1;
	out->placeholder = (const uint8_t *)bs->b[i].subs[j].ph;
	out->len = bs->b[i].subs[j].len;
	out->credential = bs->b[i].subs[j].cred;
	out->in = bs->b[i].subs[j].in;
	return 0;
}

int
binding_credential_get(const struct binding_set *bs, size_t i, struct binding_credential_info *out)
{
	if (i >= binding_credential_count(bs))
		return -1;
	out->name = bs->creds[i].name;
	out->source = bs->creds[i].source;
	out->ref = bs->creds[i].ref;
	return 0;
}

/* Hand an inline value to cb; see binding.h. */
int
binding_credential_reveal(const struct binding_set *bs, size_t i, binding_reveal_cb cb, void *arg)
{
	if (i >= binding_credential_count(bs) || bs->creds[i].source != BINDING_SOURCE_INLINE)
		return -1;
	return cb(bs->creds[i].value, bs->creds[i].vlen, arg);
}

static int
bs_cmp_cred(const void *a, const void *b)
{
	const struct binding_cred *const *x = a, *const *y = b;
	return strcmp((*x)->name, (*y)->name);
}

static int
bs_cmp_binding(const void *a, const void *b)
{
	const struct binding *const *x = a, *const *y = b;
	return strcmp((*x)->name, (*y)->name);
}

static json_t *
bs_match_json(const struct binding *b)
{
	json_t *m = json_object(), *a;

	a = json_array();
	if (b->schemes & BINDING_SCHEME_HTTP)
		json_array_append_new(a, json_string("http"));
	if (b->schemes & BINDING_SCHEME_HTTPS)
		json_array_append_new(a, json_string("https"));
	json_object_set_new(m, "schemes", a);
	a = json_array();
	if (b->ports & BINDING_PORT_80)
		json_array_append_new(a, json_integer(80));
	if (b->ports & BINDING_PORT_443)
		json_array_append_new(a, json_integer(443));
	json_object_set_new(m, "ports", a);
	a = json_array();
	for (size_t i = 0; i < b->nhosts; i++)
		json_array_append_new(a, json_string(b->hosts[i].name));
	json_object_set_new(m, "hosts", a);
	a = json_array();
	for (size_t i = 0; i < b->nmethods; i++)
		json_array_append_new(a, json_string(b->methods[i]));
	json_object_set_new(m, "methods", a);
	a = json_array();
	for (size_t i = 0; i < b->npaths; i++) {
		char buf[BINDING_MAX_PATH + 2];
		snprintf(buf, sizeof(buf), "%s%s", b->paths[i].p, b->paths[i].prefix ? "*" : "");
		json_array_append_new(a, json_string(buf));
	}
	json_object_set_new(m, "paths", a);
	return m;
}

/* auth.substitutions of b into a (placeholders are not secret). */
static void
bs_subs_json(const struct binding_set *bs, const struct binding *b, json_t *a)
{
	json_t *l;

	if (b->nsubs == 0 || (l = json_array()) == NULL)
		return;
	for (size_t k = 0; k < b->nsubs; k++) {
		json_t *e = json_object(), *in = json_array();
		for (size_t q = 0; sub_in[q] != NULL; q++)
			if (b->subs[k].in & (1u << q))
				json_array_append_new(in, json_string(sub_in[q]));
		json_object_set_new(e, "credential", json_string(bs->creds[b->subs[k].cred].name));
		json_object_set_new(e, "placeholder", json_stringn(b->subs[k].ph, b->subs[k].len));
		json_object_set_new(e, "in", in);
		json_array_append_new(l, e);
	}
	json_object_set_new(a, "substitutions", l);
}

/* Sanitized view; see binding.h. */
json_t *
binding_set_to_json(const struct binding_set *bs)
{
	static const char *const st[] = {"inline", "file", "env"};
	static const char *const at[] = {
	    "bearer", "basic", "apiKey", "customHeaders", "passthrough"};
	json_t *o = json_object(), *cl = json_array(), *bl = json_array();
	size_t nc = binding_credential_count(bs), nb = binding_set_count(bs);
	const struct binding_cred **cs = calloc(nc ? nc : 1, sizeof(*cs));
	const struct binding **bv = calloc(nb ? nb : 1, sizeof(*bv));

	if (o == NULL || cl == NULL || bl == NULL || cs == NULL || bv == NULL) {
		json_decref(o);
		json_decref(cl);
		json_decref(bl);
		free(cs);
		free(bv);
		return NULL;
	}
	for (size_t i = 0; i < nc; i++)
		cs[i] = &bs->creds[i];
	for (size_t i = 0; i < nb; i++)
		bv[i] = &bs->b[i];
	qsort(cs, nc, sizeof(*cs), bs_cmp_cred);
	qsort(bv, nb, sizeof(*bv), bs_cmp_binding);
	for (size_t i = 0; i < nc; i++) {
		json_t *c = json_object();
		json_object_set_new(c, "name", json_string(cs[i]->name));
		json_object_set_new(c, "sourceType", json_string(st[cs[i]->source]));
		json_array_append_new(cl, c);
	}
	for (size_t i = 0; i < nb; i++) {
		json_t *b = json_object(), *a = json_object();
		json_object_set_new(b, "name", json_string(bv[i]->name));
		if (bv[i]->broad)
			json_object_set_new(b, "allowBroad", json_true());
		json_object_set_new(b, "match", bs_match_json(bv[i]));
		json_object_set_new(a, "type", json_string(at[bv[i]->auth]));
		if (bv[i]->auth == BINDING_AUTH_APIKEY)
			json_object_set_new(a, "name", json_string(bv[i]->hdrs[0].name));
		bs_subs_json(bs, bv[i], a);
		json_object_set_new(b, "auth", a);
		json_array_append_new(bl, b);
	}
	free(cs);
	free(bv);
	json_object_set_new(o, "credentials", cl);
	json_object_set_new(o, "bindings", bl);
	return o;
}

/* Policy-file shaped view; see policy_internal.h. */
json_t *
binding_set_to_tree(const struct binding_set *bs)
{
	static const char *const at[] = {
	    "bearer", "basic", "apiKey", "customHeaders", "passthrough"};
	json_t *o = json_object(), *cl = json_array(), *bl = json_array();

	for (size_t i = 0; i < binding_credential_count(bs); i++) {
		const struct binding_cred *cr = &bs->creds[i];
		json_t *c = json_object(), *s = json_object();
		json_object_set_new(c, "name", json_string(cr->name));
		if (cr->source == BINDING_SOURCE_FILE) {
			json_object_set_new(s, "type", json_string("file"));
			json_object_set_new(s, "path", json_string(cr->ref));
		} else if (cr->source == BINDING_SOURCE_ENV) {
			json_object_set_new(s, "type", json_string("env"));
			json_object_set_new(s, "name", json_string(cr->ref));
		} else {
			json_object_set_new(s, "type", json_string("inline"));
		}
		json_object_set_new(c, "source", s);
		json_array_append_new(cl, c);
	}
	for (size_t i = 0; i < binding_set_count(bs); i++) {
		const struct binding *b = &bs->b[i];
		json_t *j = json_object(), *a = json_object();
		json_object_set_new(j, "name", json_string(b->name));
		if (b->broad)
			json_object_set_new(j, "allowBroad", json_true());
		json_object_set_new(j, "match", bs_match_json(b));
		json_object_set_new(a, "type", json_string(at[b->auth]));
		if (b->auth == BINDING_AUTH_CUSTOM) {
			json_t *hs = json_array();
			for (size_t k = 0; k < b->nhdrs; k++) {
				json_t *h = json_object();
				json_object_set_new(h, "name", json_string(b->hdrs[k].name));
				json_object_set_new(
				    h, "credential", json_string(bs->creds[b->hdrs[k].cred].name));
				json_array_append_new(hs, h);
			}
			json_object_set_new(a, "headers", hs);
		} else if (b->auth != BINDING_AUTH_PASSTHROUGH) {
			if (b->auth == BINDING_AUTH_APIKEY)
				json_object_set_new(a, "name", json_string(b->hdrs[0].name));
			json_object_set_new(
			    a, "credential", json_string(bs->creds[b->hdrs[0].cred].name));
		}
		bs_subs_json(bs, b, a);
		json_object_set_new(j, "auth", a);
		json_array_append_new(bl, j);
	}
	json_object_set_new(o, "credentials", cl);
	json_object_set_new(o, "bindings", bl);
	return o;
}

/* CreateRequest shape with placeholder values; see binding.h. */
json_t *
binding_set_to_wire(const struct binding_set *bs)
{
	json_t *o = binding_set_to_tree(bs), *c;
	size_t i;

	if (o == NULL)
		return NULL;
	json_array_foreach(json_object_get(o, "credentials"), i, c)
	{
		json_t *src = json_pack("{s:s,s:s}", "type", "inline", "value", "-");

		if (src == NULL || json_object_set_new(c, "source", src) != 0) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}
