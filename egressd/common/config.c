/*
 * Configuration loading (parent, before fork). One table of options drives
 * the config file, the environment, the flags and --help, so a setting has
 * the same name and validation everywhere. The token is an option like the
 * others but is never echoed: errors about it name the option only.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "certs/ca.h"
#include "certs/carenew.h"
#include "egressd/common/config.h"
#include "egressd/common/httpurl.h"
#include "egressd/common/otlp.h"
#include "policy/name.h"
#include "policy/yamltree.h"

enum config_type {
	CT_STR,
	CT_STRP, /* heap string of any length */
	CT_BOOL,
	CT_U16,
	CT_U32,
	CT_LONG,
	CT_MODE,
	CT_LEVEL,
};

struct config_opt {
	const char *name; /* flag name and config-file key */
	const char *env;  /* primary environment variable */
	const char *env2; /* alternative (our own) variable, or NULL */
	enum config_type type;
	size_t off;
	size_t size;
	bool secret; /* never echo the value */
	const char *help;
};

#define O(f) offsetof(struct config, f), sizeof(((struct config *)0)->f)

static const struct config_opt config_opts[] = {
    {"mode", "OPENSANDBOX_EGRESS_MODE", "EGRESSD_MODE", CT_MODE, O(mode), false,
        "enforcement mode: dns+nft (default, secure) or dns (DNS filtering only)"},
    {"policy", "EGRESSD_POLICY", NULL, CT_STR, O(policy_file), false,
        "YAML policy file (see docs/policy.md); reloaded on SIGHUP and on change"},
    {"policy-file", "OPENSANDBOX_EGRESS_POLICY_FILE", NULL, CT_STR, O(os_policy_file), false,
        "OpenSandbox JSON policy file, loaded at start and rewritten on API changes"},
    {"rules", "OPENSANDBOX_EGRESS_RULES", NULL, CT_STRP, O(rules_json), false,
        "initial policy as OpenSandbox JSON"},
    {"always-dir", "EGRESSD_ALWAYS_DIR", NULL, CT_STR, O(always_dir), false,
        "directory of deny.always and allow.always operator rules"},
    {"http-addr", "OPENSANDBOX_EGRESS_HTTP_ADDR", NULL, CT_STR, O(http_addr), false,
        "control API listen address [host]:port"},
    {"token", "OPENSANDBOX_EGRESS_TOKEN", NULL, CT_STR, O(token), true,
        "control API token, sent in the OPENSANDBOX-EGRESS-AUTH header"},
    {"insecure-no-token", "EGRESSD_INSECURE_NO_TOKEN", NULL, CT_BOOL, O(insecure_no_token), false,
        "allow starting without an API token (warned at every start)"},
    {"max-rules", "OPENSANDBOX_EGRESS_MAX_RULES", NULL, CT_LONG, O(max_rules), false,
        "maximum egress rules in a policy (0: unlimited)"},
    {"dns-upstream", "OPENSANDBOX_EGRESS_DNS_UPSTREAM", NULL, CT_STR, O(dns_upstream), false,
        "upstream DNS servers ip[:port],... (default: /etc/resolv.conf at start)"},
    {"dns-upstream-timeout", "OPENSANDBOX_EGRESS_DNS_UPSTREAM_TIMEOUT", NULL, CT_STR,
        O(dns_upstream_timeout), false,
        "seconds per upstream DNS exchange (default 5, at most 120; invalid: 5, warned)"},
    {"dns-upstream-probe", "OPENSANDBOX_EGRESS_DNS_UPSTREAM_PROBE", NULL, CT_STR,
        O(dns_upstream_probe), false,
        "name the upstream health probe asks for (type A; default: . type NS)"},
    {"dns-upstream-probe-interval", "OPENSANDBOX_EGRESS_DNS_UPSTREAM_PROBE_INTERVAL_SEC", NULL,
        CT_STR, O(dns_upstream_probe_interval), false,
        "seconds between upstream health probes (1..3600, default 30; invalid: 30, warned)"},
    {"dns-port", "EGRESSD_DNS_PORT", NULL, CT_U16, O(dns_port), false,
        "loopback port of the DNS proxy (port 53 is redirected to it)"},
    {"mark", "EGRESSD_MARK", NULL, CT_U32, O(mark), false,
        "packet mark of the sidecar's own sockets (the only exemption)"},
    {"dns-mark", "EGRESSD_DNS_MARK", NULL, CT_U32, O(dns_mark), false,
        "packet mark of the dns process's sockets: they reach the configured resolvers "
        "and nothing else"},
    {"nflog-group", "EGRESSD_NFLOG_GROUP", NULL, CT_U16, O(nflog_group), false,
        "NFLOG group that the table's refusals are logged to and the parent reads "
        "(default 4201; 0: no conn_reject records for the kernel's refusals)"},
    {"worker-user", "EGRESSD_WORKER_USER", NULL, CT_STR, O(worker_user), false,
        "worker uid[:gid] or user name (default: user egressd, else uid 65533)"},
    {"ready-file", "EGRESSD_READY_FILE", NULL, CT_STR, O(ready_file), false,
        "file created once enforcement is in place"},
    {"remove-table-on-exit", "EGRESSD_REMOVE_TABLE_ON_EXIT", NULL, CT_BOOL, O(remove_table_on_exit),
        false, "remove the nft table on a graceful stop (default: keep it, traffic stays blocked)"},
    {"table", "EGRESSD_TABLE", NULL, CT_STR, O(table), false, "name of the nft inet table"},
    {"intercept", "OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT", "EGRESSD_INTERCEPT", CT_BOOL,
        O(intercept), false, "transparent TLS/HTTP interception (credential vault)"},
    {"intercept-ports", "EGRESSD_INTERCEPT_PORTS", NULL, CT_STR, O(intercept_ports), false,
        "TCP ports redirected to the intercept listener"},
    {"intercept-extra-ports", "OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS", NULL, CT_STR,
        O(intercept_extra_ports), false,
        "more TCP ports to intercept, added to intercept-ports (OpenSandbox: at most 15 in all)"},
    {"tls-port", "EGRESSD_TLS_PORT", NULL, CT_U16, O(tls_port), false,
        "intercept listener port for TLS"},
    {"plain-port", "EGRESSD_PLAIN_PORT", NULL, CT_U16, O(plain_port), false,
        "intercept listener port for plain HTTP"},
    {"peek-port", "EGRESSD_PEEK_PORT", NULL, CT_U16, O(peek_port), false,
        "intercept listener port for the other TCP ports of name-learned addresses"},
    {"intercept-max-conns", "EGRESSD_INTERCEPT_MAX_CONNS", NULL, CT_U32, O(intercept_max_conns),
        false,
        "intercepted connections at once (0: (RLIMIT_NOFILE - 64) / 2, at most 4096; set: up to "
        "RLIMIT_NOFILE - 128, at most 65536: a connection between requests holds one "
        "descriptor, upstreams take what is left)"},
    {"hello-timeout", "EGRESSD_HELLO_TIMEOUT", NULL, CT_U32, O(hello_timeout), false,
        "seconds to receive a whole ClientHello (default 10, at most 10)"},
    {"head-timeout", "EGRESSD_HEAD_TIMEOUT", NULL, CT_U32, O(head_timeout), false,
        "seconds to receive a whole request head (default 15, at most 30)"},
    {"keepalive-timeout", "EGRESSD_KEEPALIVE_TIMEOUT", NULL, CT_U32, O(keepalive_timeout), false,
        "seconds an idle keep-alive connection waits for a request (default 60, at most 300)"},
    {"upstream-idle-max", "EGRESSD_UPSTREAM_IDLE_MAX", NULL, CT_U32, O(upstream_idle_max), false,
        "upstream connections kept open under idle keep-alive ones (default 64, at most 4096)"},
    {"terminate-all", "EGRESSD_TERMINATE_ALL", NULL, CT_BOOL, O(terminate_all), false,
        "terminate every allowed TLS host, not only bound ones (Host must equal SNI)"},
    {"http2", "EGRESSD_HTTP2", NULL, CT_BOOL, O(http2), false,
        "speak HTTP/2 on terminated connections when the workload offers it (default true)"},
    {"ca-export", "EGRESSD_CA_EXPORT", NULL, CT_STR, O(ca_export), false,
        "where to write the sandbox CA certificate (PEM, 0644)"},
    {"ca-cert", "EGRESSD_CA_CERT", NULL, CT_STR, O(ca_cert), false,
        "operator CA certificate (with --ca-key) for a stable fingerprint"},
    {"ca-key", "EGRESSD_CA_KEY", NULL, CT_STR, O(ca_key), false, "operator CA private key"},
    {"ca-lifetime", "EGRESSD_CA_LIFETIME", NULL, CT_U32, O(ca_lifetime), false,
        "seconds a generated sandbox CA is valid (default 604800, at least 20); it is renewed "
        "before it expires"},
    {"ca-renew-before", "EGRESSD_CA_RENEW_BEFORE", NULL, CT_U32, O(ca_renew_before), false,
        "seconds before expiry a generated CA is renewed, the old and the new both exported "
        "meanwhile (default 86400 or half of ca-lifetime if shorter; at least 5, at most half)"},
    {"upstream-ca", "OPENSANDBOX_EGRESS_MITMPROXY_UPSTREAM_TRUST_DIR", "EGRESSD_UPSTREAM_CA",
        CT_STR, O(upstream_ca), false, "trust file or directory for upstream TLS"},
    {"ssl-insecure", "OPENSANDBOX_EGRESS_MITMPROXY_SSL_INSECURE", NULL, CT_BOOL, O(ssl_insecure),
        false, "skip upstream TLS verification (refused while bindings exist)"},
    {"block-doh-443", "OPENSANDBOX_EGRESS_BLOCK_DOH_443", NULL, CT_BOOL, O(block_doh_443), false,
        "refuse port 443 (TCP and UDP) to the DoH blocklist, or to every address without one"},
    {"doh-blocklist", "OPENSANDBOX_EGRESS_DOH_BLOCKLIST", NULL, CT_STR, O(doh_blocklist), false,
        "DoH resolver IPs/CIDRs, comma-separated (with block-doh-443)"},
    {"deny-webhook", "OPENSANDBOX_EGRESS_DENY_WEBHOOK", NULL, CT_STR, O(deny_webhook), false,
        "http://address[:port]/path that gets a POST for every refusal (docs/api.md)"},
    {"upstream-proxy", "OPENSANDBOX_EGRESS_UPSTREAM_PROXY", NULL, CT_STR, O(upstream_proxy), false,
        "http[s]://host[:port]: every intercept dial goes through HTTP CONNECT to it, none direct"},
    {"dns-via-proxy", "EGRESSD_DNS_VIA_PROXY", NULL, CT_BOOL, O(dns_via_proxy), false,
        "the DNS upstream queries too go through the proxy (DNS over TCP in CONNECT)"},
    {"upstream-proxy-auth", "OPENSANDBOX_EGRESS_UPSTREAM_PROXY_AUTH", NULL, CT_STR,
        O(upstream_proxy_auth), true, "the whole Proxy-Authorization value (never logged)"},
    {"report-queue", "EGRESSD_REPORT_QUEUE", NULL, CT_U32, O(report_queue), false,
        "deny webhook events waiting at most (default and maximum 256)"},
    {"report-mark", "EGRESSD_REPORT_MARK", NULL, CT_U32, O(report_mark), false,
        "packet mark of the report process's sockets: the webhook and the collector only"},
    {"listen-mark", "EGRESSD_LISTEN_MARK", NULL, CT_U32, O(listen_mark), false,
        "packet mark of the parent's listening sockets, no child's: only they may serve "
        "the sidecar's ports"},
    {"sandbox-id", "OPENSANDBOX_EGRESS_SANDBOX_ID", NULL, CT_STR, O(sandbox_id), false,
        "sandbox id: the sandbox_id resource attribute of OTLP metrics"},
    {"metrics-extra-attrs", "OPENSANDBOX_EGRESS_METRICS_EXTRA_ATTRS", NULL, CT_STR,
        O(metrics_extra_attrs), false, "more OTLP resource attributes, k=v,k2=v2"},
    {"otlp-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", NULL, CT_STR, O(otlp_endpoint), false,
        "OTLP/HTTP base URL http://host[:port][/path] (metrics go to <path>/v1/metrics)"},
    {"otlp-metrics-endpoint", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", NULL, CT_STR,
        O(otlp_metrics_endpoint), false, "OTLP/HTTP metrics URL, used as given (wins)"},
    {"otlp-protocol", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", CT_STR,
        O(otlp_protocol), false, "http/protobuf (the only one)"},
    {"otlp-headers", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS", CT_STR,
        O(otlp_headers), true, "headers of every export, k=v,k2=v2 (percent-encoded values)"},
    {"otlp-timeout", "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", CT_U32,
        O(otlp_timeout_ms), false, "milliseconds per export (default 10000)"},
    {"otlp-interval", "OTEL_METRIC_EXPORT_INTERVAL", NULL, CT_U32, O(otlp_interval_ms), false,
        "milliseconds between exports (default 60000, at least 1000)"},
    {"otlp-temporality", "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", NULL, CT_STR,
        O(otlp_temporality), false, "cumulative (default), delta or lowmemory"},
    {"otel-metrics-exporter", "OTEL_METRICS_EXPORTER", NULL, CT_STR, O(otel_metrics_exporter),
        false, "otlp (default) or none"},
    {"otel-sdk-disabled", "OTEL_SDK_DISABLED", NULL, CT_BOOL, O(otel_sdk_disabled), false,
        "true: no OTLP export"},
    {"otel-service-name", "OTEL_SERVICE_NAME", NULL, CT_STR, O(otel_service_name), false,
        "service.name resource attribute (default egressd)"},
    {"otel-resource-attributes", "OTEL_RESOURCE_ATTRIBUTES", NULL, CT_STR, O(otel_resource_attrs),
        false, "more resource attributes, k=v,k2=v2"},
    {"log-level", "OPENSANDBOX_EGRESS_LOG_LEVEL", "EGRESSD_LOG_LEVEL", CT_LEVEL, O(log_level),
        false, "debug, info, warn or error"},
};

#define CONFIG_NOPTS (sizeof(config_opts) / sizeof(config_opts[0]))

/* Fill in compiled defaults. */
void
config_defaults(struct config *c)
{
	memset(c, 0, sizeof(*c));
	listen_set_none(&c->listen);
	c->mode = CONFIG_MODE_DNS_NFT;
	snprintf(c->always_dir, sizeof(c->always_dir), "/var/egress/rules");
	snprintf(c->http_addr, sizeof(c->http_addr), ":18080");
	c->max_rules = 4096;
	c->dns_port = 15353;
	c->mark = 0x1;
	c->dns_mark = 0x2;
	c->nflog_group = CONFIG_NFLOG_GROUP;
	c->report_mark = 0x4;
	c->listen_mark = 0x8;
	snprintf(c->table, sizeof(c->table), "egressd");
	snprintf(c->intercept_ports, sizeof(c->intercept_ports), "80,443");
	c->tls_port = 15443;
	c->plain_port = 15080;
	c->peek_port = 15444;
	c->http2 = true;
	snprintf(c->ca_export, sizeof(c->ca_export), "/run/egressd/ca.pem");
	c->log_level = LOG_INFO;
}

void
config_wipe_secrets(int argc, char **argv)
{
	for (size_t i = 0; i < sizeof(config_opts) / sizeof(config_opts[0]); i++) {
		const struct config_opt *o = &config_opts[i];
		const char *names[2] = {o->env, o->env2};
		size_t nl = strlen(o->name);

		if (!o->secret)
			continue;
		for (size_t k = 0; k < 2; k++) {
			char *v = names[k] != NULL ? getenv(names[k]) : NULL;

			if (v == NULL)
				continue;
			explicit_bzero(v, strlen(v));
			unsetenv(names[k]);
		}
		for (int a = 1; a < argc; a++) {
			char *arg = argv[a];

			if (strncmp(arg, "--", 2) != 0 || strncmp(arg + 2, o->name, nl) != 0)
				continue;
			if (arg[2 + nl] == '=')
				explicit_bzero(arg + 3 + nl, strlen(arg + 3 + nl));
			else if (arg[2 + nl] == '\0' && a + 1 < argc)
				explicit_bzero(argv[a + 1], strlen(argv[a + 1]));
		}
	}
}

void
config_free(struct config *c)
{
	free(c->rules_json);
	c->rules_json = NULL;
	ca_free(c->ca); /* wipes the key */
	c->ca = NULL;
	ca_free(c->ca_prev);
	c->ca_prev = NULL;
	X509_STORE_free(c->upstream_store);
	c->upstream_store = NULL;
	explicit_bzero(c->token, sizeof(c->token));
}

const char *
config_mode_name(enum config_mode m)
{
	return m == CONFIG_MODE_DNS ? "dns" : "dns+nft";
}

static bool
config_parse_bool(const char *v, bool *out)
{
	/* OpenSandbox's truthy set (1, true, yes, y, on); anything else but the falsy set is refused. */
	static const char *const yes[] = {"1", "true", "yes", "y", "on"};
	static const char *const no[] = {"0", "false", "no", "n", "off", ""};

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		if (strcasecmp(v, yes[i]) == 0) {
			*out = true;
			return true;
		}
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (strcasecmp(v, no[i]) == 0) {
			*out = false;
			return true;
		}
	return false;
}

/* OpenSandbox mode syntax: tokens from {dns, nft} joined by '+'. */
static bool
config_parse_mode(const char *v, enum config_mode *out)
{
	char buf[64];
	bool dns = false, nft = false;
	char *save = NULL;

	if (strlen(v) >= sizeof(buf))
		return false;
	for (size_t i = 0; v[i] != '\0'; i++)
		buf[i] = (char)tolower((unsigned char)v[i]), buf[i + 1] = '\0';
	if (v[0] == '\0')
		return false;
	for (char *t = strtok_r(buf, "+", &save); t != NULL; t = strtok_r(NULL, "+", &save)) {
		if (strcmp(t, "dns") == 0)
			dns = true;
		else if (strcmp(t, "nft") == 0)
			nft = true;
		else
			return false;
	}
	if (!dns)
		return false;
	*out = nft ? CONFIG_MODE_DNS_NFT : CONFIG_MODE_DNS;
	return true;
}

static int
config_set(struct config *c, const struct config_opt *o, const char *v, const char *src, char *err,
    size_t errlen)
{
	void *dst = (char *)c + o->off;
	char *end;
	unsigned long long u;
	long l;

	switch (o->type) {
	case CT_STR:
		if (strlen(v) >= o->size) {
			snprintf(err, errlen, "%s %s: value too long (max %zu bytes)", src, o->name,
			    o->size - 1);
			return -1;
		}
		memcpy(dst, v, strlen(v) + 1);
		return 0;
	case CT_STRP: {
		char *dup = strdup(v);
		if (dup == NULL) {
			snprintf(err, errlen, "%s %s: out of memory", src, o->name);
			return -1;
		}
		free(*(char **)dst);
		*(char **)dst = dup;
		return 0;
	}
	case CT_BOOL:
		if (!config_parse_bool(v, dst))
			goto bad;
		return 0;
	case CT_U16:
	case CT_U32:
		errno = 0;
		u = strtoull(v, &end, 0);
		if (errno != 0 || end == v || *end != '\0' || v[0] == '-' ||
		    u > (o->type == CT_U16 ? 65535ULL : 0xffffffffULL))
			goto bad;
		if (o->type == CT_U16)
			*(uint16_t *)dst = (uint16_t)u;
		else
			*(uint32_t *)dst = (uint32_t)u;
		return 0;
	case CT_LONG:
		errno = 0;
		l = strtol(v, &end, 10);
		if (errno != 0 || end == v || *end != '\0' || l < 0)
			goto bad;
		*(long *)dst = l;
		return 0;
	case CT_MODE:
		if (!config_parse_mode(v, dst))
			goto bad;
		return 0;
	case CT_LEVEL:
		if (!log_parse_level(v, dst))
			goto bad;
		return 0;
	}
bad:
	if (o->secret)
		snprintf(err, errlen, "%s %s: invalid value", src, o->name);
	else
		snprintf(err, errlen, "%s %s: invalid value \"%.64s\"", src, o->name, v);
	return -1;
}

static const struct config_opt *
config_find(const char *name)
{
	for (size_t i = 0; i < CONFIG_NOPTS; i++)
		if (strcmp(config_opts[i].name, name) == 0)
			return &config_opts[i];
	return NULL;
}

/*
 * Config file: a flat YAML mapping of option names to scalars, read by the
 * one YAML reader (policy/yamltree.c), which refuses aliases, anchors,
 * tags, duplicate keys and several documents.
 */
static int
config_from_file(struct config *c, const char *path, char *err, size_t errlen)
{
	struct yamltree_marks *marks = NULL;
	struct yamltree_error ye;
	uint8_t *buf;
	size_t len = 0;
	json_t *root, *v;
	const char *k;
	int rc = -1;
	FILE *f = fopen(path, "r");

	if (f == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	buf = malloc(CONFIG_FILE_MAX + 1);
	if (buf != NULL)
		len = fread(buf, 1, CONFIG_FILE_MAX + 1, f);
	fclose(f);
	if (buf == NULL || len > CONFIG_FILE_MAX) {
		snprintf(
		    err, errlen, "%s: %s", path, buf == NULL ? "out of memory" : "file too large");
		free(buf);
		return -1;
	}
	memset(&ye, 0, sizeof(ye));
	root = yamltree_parse(buf, len, &marks, &ye);
	free(buf);
	if (root == NULL) {
		snprintf(err, errlen, "%s:%u:%u: %s", path, ye.line, ye.col, ye.msg);
		return -1;
	}
	if (json_is_null(root)) {
		rc = 0;
		goto out;
	}
	if (!json_is_object(root)) {
		snprintf(err, errlen, "%s:1:1: the file must be a mapping of option names", path);
		goto out;
	}
	json_object_foreach(root, k, v)
	{
		unsigned line = 0, col = 0;
		char src[PATH_MAX + 32], num[32];
		const char *val = NULL;

		(void)yamltree_mark(marks, root, k, 0, 0, &line, &col);
		if (config_find(k) == NULL) {
			(void)yamltree_mark(marks, root, k, 0, 1, &line, &col);
			snprintf(
			    err, errlen, "%s:%u:%u: unknown option \"%.64s\"", path, line, col, k);
			goto out;
		}
		if (json_is_string(v))
			val = json_string_value(v);
		else if (json_is_integer(v)) {
			snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
			val = num;
		} else if (json_is_boolean(v))
			val = json_is_true(v) ? "true" : "false";
		if (val == NULL) {
			snprintf(err, errlen, "%s:%u:%u: %s: a scalar value is required", path,
			    line, col, k);
			goto out;
		}
		snprintf(src, sizeof(src), "%s:%u:%u:", path, line, col);
		if (config_set(c, config_find(k), val, src, err, errlen) != 0)
			goto out;
	}
	rc = 0;
out:
	json_decref(root);
	yamltree_marks_free(marks);
	return rc;
}

/*
 * Variables of the OpenSandbox sidecar (and our own prefix) that egressd
 * does not implement. Ignoring a setting silently is never right: those
 * whose absence would weaken or change enforcement refuse the start when
 * they ask for something (refuse), the others are warned about at every
 * start (warn), and a few are known and harmless (quiet). docs/api.md has
 * the same table with the reasons.
 */
enum config_env_verdict { ENV_QUIET, ENV_WARN, ENV_REFUSE };

static const struct {
	const char *name;
	enum config_env_verdict verdict;
	const char *why;
} config_env_known[] = {
    {"OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_REQUIRE_TLS", ENV_REFUSE,
        "the vault-write transport guard is not implemented"},
    {"OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_TRUSTED_PROXY_CIDRS", ENV_REFUSE,
        "the vault-write transport guard is not implemented"},
    {"OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_REQUIRE_SCOPED_MATCH", ENV_REFUSE,
        "not implemented as a switch"},
    {"OPENSANDBOX_EGRESS_PROFILE", ENV_REFUSE,
        "only the sidecar profile exists (fleet and fast-sandbox are not implemented)"},
    {"OPENSANDBOX_EGRESS_REDIRECT_BACKEND", ENV_REFUSE,
        "egressd always redirects with its own nft table (only auto or nft)"},
    {"OPENSANDBOX_EGRESS_MITMPROXY_PASSTHROUGH_HOSTS", ENV_REFUSE,
        "operator passthrough selectors are not implemented (hosts without a binding are "
        "always passed through)"},
    {"OPENSANDBOX_EGRESS_NAMESERVER_EXEMPT", ENV_WARN,
        "exemption not granted: the workload's DNS to these addresses still goes through the "
        "filtering proxy (an unfiltered DNS path would be a tunnel); the sidecar reaches its "
        "resolvers by its mark"},
    {"OPENSANDBOX_EGRESS_MITMPROXY_PORT", ENV_WARN,
        "egressd has no mitmproxy: set EGRESSD_TLS_PORT / EGRESSD_PLAIN_PORT"},
    {"OPENSANDBOX_EGRESS_MITMPROXY_SCRIPT", ENV_WARN,
        "addon scripts are never run (upstream removed it from the server's allowlist)"},
    {"OPENSANDBOX_EGRESS_MITMPROXY_SHADOW", ENV_WARN, "egressd has nothing to shadow"},
    {"OPENSANDBOX_EGRESS_MITMPROXY_UPSTREAM_EXTRA_CA", ENV_WARN,
        "set OPENSANDBOX_EGRESS_MITMPROXY_UPSTREAM_TRUST_DIR instead"},
    {"OPENSANDBOX_EGRESS_PENDING_PUSH_TTL", ENV_WARN, "fast-sandbox profile only"},
    {"OPENSANDBOX_EGRESS_SLOT_STORE_DIR", ENV_WARN, "fleet profile only (obsolete)"},
    {"OPENSANDBOX_EGRESS_SLOT_POLL_INTERVAL", ENV_WARN, "fleet profile only (obsolete)"},
    {"OPENSANDBOX_EGRESS_EXTENSIONS_POC", ENV_WARN, "storage-only extensions are not implemented"},
    {"OPENSANDBOX_EGRESS_EXPERIMENTAL_REVISION_RUNTIME", ENV_WARN, "branch-only upstream"},
    {"OPENSANDBOX_EGRESS_QUARANTINE_ID", ENV_WARN, "branch-only upstream"},
    {"OPENSANDBOX_EGRESS_REVISION_DRAIN_TIMEOUT_SECONDS", ENV_WARN, "branch-only upstream"},
    {"OPENSANDBOX_EGRESS_PUBLIC_POLICY", ENV_WARN, "a fork's setting, not implemented"},
    {"EGRESSD_CONFIG", ENV_QUIET, "the --config file"},
    {"EGRESSD_BIN", ENV_QUIET, "test harness"},
    {"EGRESSD_SRC", ENV_QUIET, "test harness"},
    {"EGRESSD_BUILD", ENV_QUIET, "test harness"},
};

/* Whether a setting's value asks for something (so that ignoring it would matter). */
static bool
config_env_asks(const char *name, const char *v)
{
	if (strcmp(name, "OPENSANDBOX_EGRESS_PROFILE") == 0)
		return strcasecmp(v, "sidecar") != 0;
	if (strcmp(name, "OPENSANDBOX_EGRESS_REDIRECT_BACKEND") == 0)
		return strcasecmp(v, "auto") != 0 && strcasecmp(v, "nft") != 0;
	if (strstr(name, "_REQUIRE_") != NULL)
		return strcasecmp(v, "false") != 0 && strcasecmp(v, "0") != 0 &&
		       strcasecmp(v, "off") != 0 && strcasecmp(v, "no") != 0;
	return v[0] != '\0';
}

/* See config.h. */
int
config_env_audit(char **envp, config_env_report_cb report, void *arg, char *err, size_t errlen)
{
	for (char **e = envp; e != NULL && *e != NULL; e++) {
		const char *eq = strchr(*e, '=');
		char name[128];
		bool known = false;
		size_t n;

		if (eq == NULL || (strncmp(*e, "OPENSANDBOX_EGRESS_", 19) != 0 &&
		                      strncmp(*e, "EGRESSD_", 8) != 0))
			continue;
		n = (size_t)(eq - *e);
		if (n >= sizeof(name))
			n = sizeof(name) - 1;
		memcpy(name, *e, n);
		name[n] = '\0';
		for (size_t i = 0; i < CONFIG_NOPTS && !known; i++)
			known =
			    (config_opts[i].env != NULL && strcmp(config_opts[i].env, name) == 0) ||
			    (config_opts[i].env2 != NULL && strcmp(config_opts[i].env2, name) == 0);
		if (known)
			continue;
		for (size_t i = 0; i < sizeof(config_env_known) / sizeof(config_env_known[0]);
		     i++) {
			if (strcmp(config_env_known[i].name, name) != 0)
				continue;
			known = true;
			if (config_env_known[i].verdict == ENV_REFUSE &&
			    config_env_asks(name, eq + 1)) {
				snprintf(err, errlen,
				    "%s is set but not implemented by egressd (%s); ignoring it "
				    "would "
				    "change enforcement, so egressd refuses to start: unset it",
				    name, config_env_known[i].why);
				return -1;
			}
			if (config_env_known[i].verdict != ENV_QUIET && eq[1] != '\0' &&
			    report != NULL)
				report(name, config_env_known[i].why, arg);
			break;
		}
		if (!known && report != NULL)
			report(name, "unknown variable: not an egressd setting (see --help)", arg);
	}
	return 0;
}

/* Apply environment variables; an empty variable counts as unset. */
int
config_from_env(struct config *c, char *err, size_t errlen)
{
	for (size_t i = 0; i < CONFIG_NOPTS; i++) {
		const struct config_opt *o = &config_opts[i];
		const char *names[2] = {o->env, o->env2};
		for (size_t k = 0; k < 2; k++) {
			const char *v;
			char src[96];
			if (names[k] == NULL || (v = getenv(names[k])) == NULL || v[0] == '\0')
				continue;
			snprintf(src, sizeof(src), "environment %s (option", names[k]);
			if (config_set(c, o, v, src, err, errlen) != 0) {
				size_t n = strlen(err);
				snprintf(err + n, errlen - n, ")");
				return -1;
			}
		}
	}
	return 0;
}

/*
 * A port list ("80,443"): decimal ports 1-65535 separated by commas
 * (spaces around them allowed), no empty element, none twice, and none
 * already in prior (NULL = none); both lists together fit the intercept's
 * CONFIG_MAX_INTERCEPT_PORTS. Errors name the setting, what.
 */
static int
config_port_list(const char *list, const char *what, const char *prior, char *err, size_t errlen)
{
	unsigned long seen[CONFIG_MAX_INTERCEPT_PORTS];
	size_t n = 0;

	for (int pass = prior != NULL ? 0 : 1; pass < 2; pass++) {
		const char *p = pass == 0 ? prior : list;

		p += strspn(p, " ");
		while (*p != '\0') {
			char *end = NULL;
			unsigned long v = 0;

			if (*p >= '0' && *p <= '9')
				v = strtoul(p, &end, 10);
			if (v == 0 || v > 65535) {
				snprintf(err, errlen,
				    "%s: \"%.64s\" is not a comma-separated list of ports 1-65535",
				    what, list);
				return -1;
			}
			p = end + strspn(end, " ");
			if (*p == ',') {
				p++;
				p += strspn(p, " ");
				if (*p == '\0')
					v = 0; /* a trailing comma: an empty element */
			} else if (*p != '\0') {
				v = 0;
			}
			if (v == 0) {
				snprintf(err, errlen,
				    "%s: \"%.64s\" is not a comma-separated list of ports 1-65535",
				    what, list);
				return -1;
			}
			for (size_t i = 0; i < n; i++)
				if (seen[i] == v) {
					snprintf(err, errlen, "%s: port %lu is listed twice%s",
					    what, v,
					    pass == 1 && prior != NULL
					        ? " or is intercepted already"
					        : "");
					return -1;
				}
			if (n == CONFIG_MAX_INTERCEPT_PORTS) {
				snprintf(err, errlen, "%s: more than %d intercept ports in all",
				    what, CONFIG_MAX_INTERCEPT_PORTS);
				return -1;
			}
			seen[n++] = v;
		}
	}
	return 0;
}

int
config_load(struct config *c, int argc, char **argv, char *err, size_t errlen)
{
	struct option lopts[CONFIG_NOPTS + 2];
	const char *file = getenv("EGRESSD_CONFIG");
	int ch, idx;

	/* The config file comes first so that env and flags override it. */
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			file = argv[i + 1];
		else if (strncmp(argv[i], "--config=", 9) == 0)
			file = argv[i] + 9;
	}
	if (file != NULL && file[0] != '\0') {
		snprintf(c->config_file, sizeof(c->config_file), "%s", file);
		if (config_from_file(c, file, err, errlen) != 0)
			return -1;
	}
	if (config_from_env(c, err, errlen) != 0)
		return -1;

	for (size_t i = 0; i < CONFIG_NOPTS; i++) {
		lopts[i].name = config_opts[i].name;
		lopts[i].has_arg =
		    config_opts[i].type == CT_BOOL ? optional_argument : required_argument;
		lopts[i].flag = NULL;
		lopts[i].val = 0x100 + (int)i;
	}
	lopts[CONFIG_NOPTS] = (struct option){"config", required_argument, NULL, 'c'};
	lopts[CONFIG_NOPTS + 1] = (struct option){NULL, 0, NULL, 0};
	optind = 0;
	opterr = 0;
	/* getopt wants argv[0]; our argv starts at the first option. */
	{
		char *av[argc + 2];
		av[0] = (char *)"egressd";
		for (int i = 0; i < argc; i++)
			av[i + 1] = argv[i];
		av[argc + 1] = NULL;
		while ((ch = getopt_long(argc + 1, av, "", lopts, &idx)) != -1) {
			const struct config_opt *o;
			if (ch == 'c')
				continue;
			if (ch < 0x100 || ch >= 0x100 + (int)CONFIG_NOPTS) {
				snprintf(err, errlen,
				    "unknown or incomplete option \"%.64s\" (see --help)",
				    av[optind - 1]);
				return -1;
			}
			o = &config_opts[ch - 0x100];
			if (config_set(c, o, optarg ? optarg : "true", "option --", err, errlen) !=
			    0)
				return -1;
		}
		if (optind < argc + 1) {
			snprintf(
			    err, errlen, "unexpected argument \"%.64s\" (see --help)", av[optind]);
			return -1;
		}
	}
	if (config_port_list(c->intercept_ports, "--intercept-ports (EGRESSD_INTERCEPT_PORTS)",
	        NULL, err, errlen) != 0 ||
	    config_port_list(c->intercept_extra_ports,
	        "--intercept-extra-ports (OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS)",
	        c->intercept_ports, err, errlen) != 0)
		return -1;
	/* OpenSandbox's extra intercept ports add to ours (80 and 443 by default). */
	if (c->intercept_extra_ports[0] != '\0') {
		size_t n = strlen(c->intercept_ports);

		if (n + 1 + strlen(c->intercept_extra_ports) >= sizeof(c->intercept_ports)) {
			snprintf(err, errlen, "too many intercept ports");
			return -1;
		}
		snprintf(c->intercept_ports + n, sizeof(c->intercept_ports) - n, "%s%s",
		    n > 0 ? "," : "", c->intercept_extra_ports);
		c->intercept_extra_ports[0] = '\0';
	}
	return 0;
}

/*
 * A URL of one of the sidecar's own peers (proxy, webhook, collector) must
 * hold an address: the nft table pins that peer's marked sockets to it.
 */
static int
config_url_literal(
    const struct httpurl *u, const char *var, const char *peer, char *err, size_t errlen)
{
	if (u->family != 0)
		return 0;
	snprintf(err, errlen,
	    "%s: give the %s's IP address (the sidecar's own connections to it are pinned in the "
	    "nft table; names are not resolved)",
	    var, peer);
	return -1;
}

/*
 * The proxy URL: http:// or https:// (the port then defaults to 443), else
 * as httpurl_parse. 0, or -1 with why (never the URL).
 */
static int
config_proxy_url(const char *url, struct httpurl *u, bool *tls, char *why, size_t whylen)
{
	char buf[sizeof(((struct config *)0)->upstream_proxy) + 8];
	const char *rest, *end;
	bool port_given;

	if (tls != NULL)
		*tls = false;
	if (strncmp(url, "https://", 8) != 0)
		return httpurl_parse(url, u, why, whylen);
	rest = url + 8;
	/* Whether a port follows the host: after "]" for [v6], else before the path. */
	if (rest[0] == '[') {
		end = strchr(rest, ']');
		port_given = end != NULL && end[1] == ':';
	} else {
		end = rest + strcspn(rest, "/?#");
		port_given = memchr(rest, ':', (size_t)(end - rest)) != NULL;
	}
	snprintf(buf, sizeof(buf), "http://%s", rest);
	if (httpurl_parse(buf, u, why, whylen) != 0)
		return -1;
	if (!port_given) {
		u->port = 443;
		if (u->family == AF_INET6)
			snprintf(u->authority, sizeof(u->authority), "[%s]:443", u->host);
		else
			snprintf(u->authority, sizeof(u->authority), "%s:443", u->host);
	}
	if (tls != NULL)
		*tls = true;
	return 0;
}

/* The proxy's host name, canonical, into out (NULL: only checked). 0 or -1. */
static int
config_proxy_name(const struct httpurl *u, char *out, size_t outlen)
{
	char canon[POLICY_NAME_MAX + 1];
	size_t n;

	if (policy_name_canon((const uint8_t *)u->host, strlen(u->host), 0, canon, &n) !=
	        POLICY_NAME_OK ||
	    n + 1 > sizeof(((struct config_proxy *)0)->name))
		return -1;
	if (out != NULL)
		snprintf(out, outlen, "%s", canon);
	return 0;
}

/*
 * The chained proxy: an http URL with an IP literal or a host name and no path, only with
 * interception in dns+nft mode (the intercept is what dials through it and
 * the table what refuses every direct dial); its Proxy-Authorization value
 * a header value. Errors never quote the value.
 */
static int
config_check_proxy(const struct config *c, char *err, size_t errlen)
{
	const char *v = "OPENSANDBOX_EGRESS_UPSTREAM_PROXY";
	struct httpurl u;
	char why[256];
	size_t n;

	if (c->upstream_proxy[0] == '\0') {
		if (c->upstream_proxy_auth[0] != '\0' || c->dns_via_proxy) {
			snprintf(err, errlen, "%s is set without %s",
			    c->dns_via_proxy ? "EGRESSD_DNS_VIA_PROXY"
			                     : "OPENSANDBOX_EGRESS_UPSTREAM_PROXY_AUTH",
			    v);
			return -1;
		}
		return 0;
	}
	if (config_proxy_url(c->upstream_proxy, &u, NULL, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "%s: %s", v, why);
		return -1;
	}
	if (u.family == 0 && config_proxy_name(&u, NULL, 0) != 0) {
		snprintf(err, errlen,
		    "%s: the host is neither an IP address nor a host name (LDH labels, not a "
		    "wildcard)",
		    v);
		return -1;
	}
	if (strcmp(u.path, "/") != 0) {
		snprintf(err, errlen, "%s: a proxy URL has no path", v);
		return -1;
	}
	if (c->dns_via_proxy && u.family == 0) {
		snprintf(err, errlen,
		    "EGRESSD_DNS_VIA_PROXY needs %s to hold the proxy's IP address: its name could "
		    "only be resolved through the proxy itself",
		    v);
		return -1;
	}
	if (!c->intercept || c->mode != CONFIG_MODE_DNS_NFT) {
		snprintf(err, errlen,
		    "%s needs OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true in dns+nft mode: the "
		    "intercept dials through the proxy and the nft table refuses every direct dial",
		    v);
		return -1;
	}
	n = strlen(c->upstream_proxy_auth);
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)c->upstream_proxy_auth[i];

		if ((ch < 0x20 && ch != '\t') || ch == 0x7f || ch >= 0x80) {
			snprintf(err, errlen,
			    "%s_AUTH: not a header value (control or non-ASCII byte at offset %zu)",
			    v, i);
			return -1;
		}
	}
	if (n > 0 &&
	    (c->upstream_proxy_auth[0] == ' ' || c->upstream_proxy_auth[0] == '\t' ||
	        c->upstream_proxy_auth[n - 1] == ' ' || c->upstream_proxy_auth[n - 1] == '\t')) {
		snprintf(err, errlen, "%s_AUTH: leading or trailing white space", v);
		return -1;
	}
	return 0;
}

void
config_proxy(const struct config *c, struct config_proxy *p)
{
	struct httpurl u;
	char why[256];

	memset(p, 0, sizeof(*p));
	if (c->upstream_proxy[0] == '\0' ||
	    config_proxy_url(c->upstream_proxy, &u, &p->tls, why, sizeof(why)) != 0)
		return;
	if (u.family == 0 && config_proxy_name(&u, p->name, sizeof(p->name)) != 0)
		return;
	p->set = true;
	p->family = u.family;
	memcpy(p->addr, u.addr, sizeof(p->addr));
	p->port = u.port;
}

int
config_check(const struct config *c, char *err, size_t errlen)
{
	if (c->token[0] == '\0' && !c->insecure_no_token) {
		snprintf(err, errlen,
		    "no API token: set OPENSANDBOX_EGRESS_TOKEN (or --token), or opt out "
		    "explicitly "
		    "with EGRESSD_INSECURE_NO_TOKEN=1 (anyone on the shared loopback could then "
		    "change the policy)");
		return -1;
	}
	if (c->mark == 0 || c->dns_mark == 0) {
		snprintf(err, errlen, "%s must not be 0", c->mark == 0 ? "mark" : "dns-mark");
		return -1;
	}
	if (c->report_mark == 0 || c->report_mark == c->mark || c->report_mark == c->dns_mark) {
		snprintf(err, errlen,
		    "report-mark must not be 0 and must differ from mark and dns-mark");
		return -1;
	}
	if (c->listen_mark == 0 || c->listen_mark == c->mark || c->listen_mark == c->dns_mark ||
	    c->listen_mark == c->report_mark) {
		snprintf(err, errlen,
		    "listen-mark must not be 0 and must differ from mark, dns-mark and "
		    "report-mark: "
		    "a child's sockets must never serve the sidecar's ports");
		return -1;
	}
	if (c->report_queue > 256) {
		snprintf(err, errlen, "report-queue: at most 256");
		return -1;
	}
	if (c->deny_webhook[0] != '\0') {
		struct httpurl u;
		char why[256];

		if (httpurl_parse(c->deny_webhook, &u, why, sizeof(why)) != 0) {
			snprintf(err, errlen, "OPENSANDBOX_EGRESS_DENY_WEBHOOK: %s", why);
			return -1;
		}
		if (config_url_literal(
		        &u, "OPENSANDBOX_EGRESS_DENY_WEBHOOK", "receiver", err, errlen) != 0)
			return -1;
	}
	if (config_check_proxy(c, err, errlen) != 0)
		return -1;
	if (c->dns_mark == c->mark) {
		snprintf(err, errlen,
		    "dns-mark must differ from mark: the dns process's sockets reach the resolvers "
		    "only, the others' never send DNS");
		return -1;
	}
	if (c->dns_port == 0 || c->tls_port == 0 || c->plain_port == 0 || c->peek_port == 0) {
		snprintf(err, errlen, "listener ports must not be 0");
		return -1;
	}
	if (c->peek_port == c->tls_port || c->peek_port == c->plain_port ||
	    c->tls_port == c->plain_port) {
		snprintf(err, errlen, "tls-port, plain-port and peek-port must differ");
		return -1;
	}
	{
		struct otlp_settings os;

		int rc = otlp_settings(c, &os, err, errlen);
		bool enabled = rc == 0 && os.enabled;
		struct httpurl url = os.url;

		/* Only the report child keeps the headers (exporter credentials). */
		explicit_bzero(&os, sizeof(os));
		if (rc != 0)
			return -1;
		if (enabled &&
		    config_url_literal(&url,
		        c->otlp_metrics_endpoint[0] != '\0' ? "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
		                                            : "OTEL_EXPORTER_OTLP_ENDPOINT",
		        "collector", err, errlen) != 0)
			return -1;
	}
	if ((c->ca_cert[0] == '\0') != (c->ca_key[0] == '\0')) {
		snprintf(err, errlen, "ca-cert and ca-key must be given together");
		return -1;
	}
	{
		unsigned lt, rb;

		/* egressd never renews an operator CA: a lifetime for it would be a lie. */
		if (c->ca_cert[0] != '\0' && (c->ca_lifetime != 0 || c->ca_renew_before != 0)) {
			snprintf(err, errlen,
			    "ca-lifetime and ca-renew-before apply to a generated CA only, not to "
			    "ca-cert");
			return -1;
		}
		if (carenew_settings(c->ca_lifetime, c->ca_renew_before, &lt, &rb, err, errlen) !=
		    0)
			return -1;
	}
	{
		struct config_prefix doh[CONFIG_MAX_DOH];
		size_t n;

		if (config_doh_blocklist(c, doh, CONFIG_MAX_DOH, &n, err, errlen) != 0)
			return -1;
	}
	return 0;
}

/* OPENSANDBOX_EGRESS_DOH_BLOCKLIST: "IP[/len]" entries, comma-separated, masked. */
int
config_doh_blocklist(const struct config *c, struct config_prefix *out, size_t max, size_t *n,
    char *err, size_t errlen)
{
	char buf[sizeof(c->doh_blocklist)];
	char *save = NULL;

	*n = 0;
	snprintf(buf, sizeof(buf), "%s", c->doh_blocklist);
	for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		struct config_prefix p;
		char *slash, *end;
		unsigned long len;
		size_t alen;

		while (*t == ' ' || *t == '\t')
			t++;
		for (end = t + strlen(t); end > t && (end[-1] == ' ' || end[-1] == '\t'); end--)
			end[-1] = '\0';
		if (*t == '\0')
			continue;
		memset(&p, 0, sizeof(p));
		slash = strchr(t, '/');
		if (slash != NULL)
			*slash = '\0';
		if (inet_pton(AF_INET, t, p.addr) == 1)
			p.family = AF_INET;
		else if (inet_pton(AF_INET6, t, p.addr) == 1)
			p.family = AF_INET6;
		alen = p.family == AF_INET ? 4 : 16;
		len = alen * 8;
		if (p.family != 0 && slash != NULL) {
			len = strtoul(slash + 1, &end, 10);
			if (slash[1] == '\0' || *end != '\0' || len > alen * 8)
				p.family = 0;
		}
		if (p.family == 0 || *n >= max) {
			snprintf(err, errlen, "doh-blocklist: %s \"%.64s%s%.8s\"",
			    p.family == 0 ? "invalid entry" : "too many entries at", t,
			    slash != NULL ? "/" : "", slash != NULL ? slash + 1 : "");
			return -1;
		}
		p.prefix_len = (uint8_t)len;
		for (size_t by = 0; by < alen; by++) {
			int bits = (int)len - (int)by * 8;
			p.addr[by] &= bits >= 8   ? 0xff
			              : bits <= 0 ? 0
			                          : (uint8_t)(0xff << (8 - bits));
		}
		out[(*n)++] = p;
	}
	return 0;
}

int
config_worker_ids(const struct config *c, uid_t *uid, gid_t *gid, char *err, size_t errlen)
{
	const char *u = c->worker_user;
	char *end;
	unsigned long v;

	if (u[0] == '\0') {
		struct passwd *pw = getpwnam("egressd");
		if (pw != NULL) {
			*uid = pw->pw_uid;
			*gid = pw->pw_gid;
		} else {
			*uid = CONFIG_DEFAULT_WORKER_ID;
			*gid = CONFIG_DEFAULT_WORKER_ID;
		}
		return 0;
	}
	if (isdigit((unsigned char)u[0])) {
		errno = 0;
		v = strtoul(u, &end, 10);
		if (errno != 0 || v == 0 || v >= 0xffffffffUL)
			goto bad;
		*uid = (uid_t)v;
		*gid = (gid_t)v;
		if (*end == ':') {
			const char *g = end + 1;
			errno = 0;
			v = strtoul(g, &end, 10);
			if (errno != 0 || end == g || v == 0 || v >= 0xffffffffUL)
				goto bad;
			*gid = (gid_t)v;
		}
		if (*end != '\0')
			goto bad;
		return 0;
	} else {
		struct passwd *pw = getpwnam(u);
		if (pw == NULL) {
			snprintf(err, errlen, "worker-user: no user \"%.32s\"", u);
			return -1;
		}
		if (pw->pw_uid == 0)
			goto bad;
		*uid = pw->pw_uid;
		*gid = pw->pw_gid;
		return 0;
	}
bad:
	snprintf(
	    err, errlen, "worker-user: \"%.32s\" is not uid[:gid] (non-zero) or a user name", u);
	return -1;
}

void
config_usage(FILE *out)
{
	struct config d;

	config_defaults(&d);
	fprintf(out, "usage: egressd [options]              run the sidecar (needs CAP_NET_ADMIN)\n"
	             "       egressd check [-v] FILE...     validate policy files\n"
	             "       egressd explain FILE QUERY     explain a decision (name, ip:port, "
	             "'METHOD https://host/path')\n"
	             "       egressd test FILE CASES.yaml   run table-driven policy expectations\n"
	             "       egressd --version | --help | --features\n\n"
	             "Options (flag / environment variable; flags win over the environment, which\n"
	             "wins over --config FILE, a YAML mapping of option names):\n"
	             "  --config FILE  (EGRESSD_CONFIG)\n");
	for (size_t i = 0; i < CONFIG_NOPTS; i++) {
		const struct config_opt *o = &config_opts[i];
		fprintf(out, "  --%s%s  (%s%s%s)\n      %s\n", o->name,
		    o->type == CT_BOOL ? "[=BOOL]" : "=VALUE", o->env, o->env2 ? ", " : "",
		    o->env2 ? o->env2 : "", o->help);
	}
	fprintf(out,
	    "\nDefaults: mode=%s http-addr=%s dns-port=%u mark=0x%x max-rules=%ld "
	    "intercept-ports=%s tls-port=%u plain-port=%u ca-export=%s table=%s\n",
	    config_mode_name(d.mode), d.http_addr, d.dns_port, d.mark, d.max_rules,
	    d.intercept_ports, d.tls_port, d.plain_port, d.ca_export, d.table);
}

/* Resolve the upstream resolvers (see config.h). */
int
config_upstreams(struct config *c, char *err, size_t errlen)
{
	char buf[1024];
	char *save = NULL;

	c->nupstreams = 0;
	if (c->dns_upstream[0] == '\0') {
		/* From resolv.conf, captured once at start. */
		FILE *f = fopen("/etc/resolv.conf", "r");
		char line[512];
		size_t o = 0;

		buf[0] = '\0';
		if (f == NULL) {
			snprintf(err, errlen, "no upstream: /etc/resolv.conf: %s", strerror(errno));
			return -1;
		}
		while (fgets(line, sizeof(line), f) != NULL) {
			char ns[256];

			if (sscanf(line, " nameserver %255s", ns) == 1 &&
			    o + strlen(ns) + 2 < sizeof(buf))
				o += (size_t)snprintf(
				    buf + o, sizeof(buf) - o, "%s%s", o ? "," : "", ns);
		}
		fclose(f);
	} else
		snprintf(buf, sizeof(buf), "%s", c->dns_upstream);

	for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
		struct config_upstream *u;
		char host[128];
		unsigned long port = 53;
		char *end;

		if (c->nupstreams >= CONFIG_MAX_UPSTREAMS)
			break;
		u = &c->upstreams[c->nupstreams];
		memset(u, 0, sizeof(*u));
		if (t[0] == '[') {
			char *rb = strchr(t, ']');

			if (rb == NULL || (size_t)(rb - t - 1) >= sizeof(host))
				goto bad;
			memcpy(host, t + 1, (size_t)(rb - t - 1));
			host[rb - t - 1] = '\0';
			if (rb[1] == ':') {
				port = strtoul(rb + 2, &end, 10);
				if (rb[2] == '\0' || *end != '\0')
					goto bad;
			} else if (rb[1] != '\0')
				goto bad;
		} else if (strchr(t, ':') != NULL && strchr(t, ':') == strrchr(t, ':')) {
			char *colon = strchr(t, ':');

			if ((size_t)(colon - t) >= sizeof(host))
				goto bad;
			memcpy(host, t, (size_t)(colon - t));
			host[colon - t] = '\0';
			port = strtoul(colon + 1, &end, 10);
			if (colon[1] == '\0' || *end != '\0')
				goto bad;
		} else
			snprintf(host, sizeof(host), "%s", t);
		if (port == 0 || port > 65535)
			goto bad;
		if (inet_pton(AF_INET, host, u->addr) == 1)
			u->family = AF_INET;
		else if (inet_pton(AF_INET6, host, u->addr) == 1)
			u->family = AF_INET6;
		else
			goto bad;
		u->port = (uint16_t)port;
		c->nupstreams++;
		continue;
	bad:
		snprintf(err, errlen,
		    "invalid DNS upstream \"%.64s\" (want ip, ip:port or [ip6]:port)", t);
		c->nupstreams = 0;
		return -1;
	}
	if (c->nupstreams == 0) {
		snprintf(err, errlen,
		    "no DNS upstream configured (resolv.conf or "
		    "OPENSANDBOX_EGRESS_DNS_UPSTREAM)");
		return -1;
	}
	return 0;
}

/* Report settings; see config.h. */
int
config_report(const struct config *c, struct config_report *r, char *err, size_t errlen)
{
	memset(r, 0, sizeof(*r));
	if (c->deny_webhook[0] != '\0') {
		if (httpurl_parse(c->deny_webhook, &r->hook, err, errlen) != 0)
			return -1;
		r->webhook = true;
	}
	return otlp_settings(c, &r->otlp, err, errlen);
}
