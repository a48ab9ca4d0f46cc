/*
 * Unit tests of egressd/common/config.c: the --config file goes through
 * the one YAML reader (aliases, duplicate keys and non-scalars refused,
 * errors with file:line:col), and flags beat the environment, which beats
 * the file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "egressd/common/config.h"

static char path[64];

static void
write_file(const char *text)
{
	int fd;

	snprintf(path, sizeof(path), "/tmp/egressd-config-XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

/* Load the file (plus argv) into c; 0 or -1 with err. */
static int
load(struct config *c, const char *text, int argc, char **argv, char *err, size_t errlen)
{
	char *av[8];
	int rc;

	write_file(text);
	av[0] = (char *)"--config";
	av[1] = path;
	for (int i = 0; i < argc && i < 6; i++)
		av[2 + i] = argv[i];
	config_defaults(c);
	rc = config_load(c, argc + 2, av, err, errlen);
	unlink(path);
	return rc;
}

static void
test_file_good(void **state)
{
	struct config c;
	char err[512] = "";

	unsetenv("EGRESSD_DNS_PORT");
	assert_int_equal(load(&c,
	                     "dns-port: 5353\nintercept: true\ntable: t1\n"
	                     "http-addr: \"127.0.0.1:9999\"\n",
	                     0, NULL, err, sizeof(err)),
	    0);
	assert_int_equal(c.dns_port, 5353);
	assert_true(c.intercept);
	assert_string_equal(c.table, "t1");
	assert_string_equal(c.http_addr, "127.0.0.1:9999");
	config_free(&c);
}

static void
test_precedence(void **state)
{
	struct config c;
	char err[512] = "";
	char *flags[] = {(char *)"--table=t3"};

	setenv("EGRESSD_TABLE", "t2", 1);
	setenv("EGRESSD_DNS_PORT", "6000", 1);
	assert_int_equal(load(&c, "table: t1\ndns-port: 5353\n", 1, flags, err, sizeof(err)), 0);
	assert_string_equal(c.table, "t3");
	assert_int_equal(c.dns_port, 6000);
	config_free(&c);
	unsetenv("EGRESSD_TABLE");
	unsetenv("EGRESSD_DNS_PORT");
}

/* Every refusal names file:line:col. */
static void
refused(const char *text, const char *want)
{
	struct config c;
	char err[512] = "";

	assert_int_equal(load(&c, text, 0, NULL, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "/tmp/egressd-config-"));
	if (strstr(err, want) == NULL)
		fail_msg("error \"%s\" lacks \"%s\"", err, want);
	config_free(&c);
}

static void
test_file_refused(void **state)
{
	/* An alias used to be skipped silently; the one YAML reader refuses it. */
	refused("table: &t egressd\nmode: *t\n", ":1:");
	refused("table: a\ntable: b\n", ":2:");
	refused("nosuch: 1\n", "unknown option \"nosuch\"");
	refused("table:\n  - a\n", "scalar");
	refused("table: {a: b}\n", "scalar");
	refused("- table\n", "mapping");
	refused("dns-port: 70000\n", "dns-port");
	refused("table: a\n---\ntable: b\n", ":");
}

struct reports {
	int n;
	char last[128];
};

static void
count_report(const char *name, const char *why, void *arg)
{
	struct reports *r = arg;

	r->n++;
	snprintf(r->last, sizeof(r->last), "%s", name);
	assert_non_null(why);
}

/* Settings egressd does not implement are never ignored silently. */
static void
test_env_audit(void **state)
{
	char err[512];
	struct reports r;
	char *proxy[] = {(char *)"PATH=/bin",
	    (char *)"OPENSANDBOX_EGRESS_MITMPROXY_PASSTHROUGH_HOSTS=api.example.com", NULL};
	char *auth[] = {
	    (char *)"OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_TRUSTED_PROXY_CIDRS=c2VjcmV0", NULL};
	char *empty[] = {(char *)"OPENSANDBOX_EGRESS_MITMPROXY_PASSTHROUGH_HOSTS=", NULL};
	char *scoped_on[] = {
	    (char *)"OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_REQUIRE_SCOPED_MATCH=true", NULL};
	char *scoped_off[] = {
	    (char *)"OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_REQUIRE_SCOPED_MATCH=false", NULL};
	char *tls[] = {(char *)"OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_REQUIRE_TLS=1", NULL};
	char *cidrs[] = {
	    (char *)"OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_TRUSTED_PROXY_CIDRS=10.0.0.0/8", NULL};
	char *fleet[] = {(char *)"OPENSANDBOX_EGRESS_PROFILE=fast-sandbox", NULL};
	char *sidecar[] = {(char *)"OPENSANDBOX_EGRESS_PROFILE=sidecar", NULL};
	char *warned[] = {(char *)"OPENSANDBOX_EGRESS_MITMPROXY_SHADOW=true",
	    (char *)"OPENSANDBOX_EGRESS_NAMESERVER_EXEMPT=192.0.2.53", (char *)"EGRESSD_NO_SUCH=1",
	    (char *)"OPENSANDBOX_EGRESS_DNS_UPSTREAM_TIMEOUT=2",
	    (char *)"OPENSANDBOX_EGRESS_TOKEN=t",
	    (char *)"OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS=8443",
	    (char *)"OPENSANDBOX_EGRESS_SANDBOX_ID=sbx-1", (char *)"HOME=/root", NULL};

	memset(&r, 0, sizeof(r));
	assert_int_equal(config_env_audit(proxy, count_report, &r, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "OPENSANDBOX_EGRESS_MITMPROXY_PASSTHROUGH_HOSTS"));
	assert_int_equal(config_env_audit(auth, count_report, &r, err, sizeof(err)), -1);
	/* The refusal names the variable, never its value (it may be a credential). */
	assert_null(strstr(err, "c2VjcmV0"));
	assert_int_equal(config_env_audit(scoped_on, count_report, &r, err, sizeof(err)), -1);
	assert_int_equal(config_env_audit(tls, count_report, &r, err, sizeof(err)), -1);
	assert_int_equal(config_env_audit(cidrs, count_report, &r, err, sizeof(err)), -1);
	assert_int_equal(config_env_audit(fleet, count_report, &r, err, sizeof(err)), -1);
	assert_int_equal(r.n, 0);
	/* Unset (empty), switched off, or the one profile that exists: a warning at most. */
	assert_int_equal(config_env_audit(empty, count_report, &r, err, sizeof(err)), 0);
	assert_int_equal(r.n, 0);
	assert_int_equal(config_env_audit(scoped_off, count_report, &r, err, sizeof(err)), 0);
	assert_int_equal(r.n, 1);
	assert_int_equal(config_env_audit(sidecar, count_report, &r, err, sizeof(err)), 0);
	assert_int_equal(r.n, 2);
	/* Implemented ones are silent; unimplemented and unknown ones are reported. */
	memset(&r, 0, sizeof(r));
	assert_int_equal(config_env_audit(warned, count_report, &r, err, sizeof(err)), 0);
	assert_int_equal(r.n, 3); /* MITMPROXY_SHADOW, NAMESERVER_EXEMPT, EGRESSD_NO_SUCH */
	assert_string_equal(r.last, "EGRESSD_NO_SUCH");
}

/* OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS adds to the intercepted ports. */
static void
test_extra_ports(void **state)
{
	struct config c;
	char err[512] = "";

	setenv("OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS", "8443,9443", 1);
	assert_int_equal(load(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	unsetenv("OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS");
	assert_string_equal(c.intercept_ports, "80,443,8443,9443");
	config_free(&c);
}

/* Port lists are checked at load, naming the setting: no late nft error. */
static void
test_port_lists(void **state)
{
	static const char *const bad[] = {"8443,abc", "70000", "0", "8443,,9443", "8443,", ",8443",
	    "443", "8443,8443", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15", "-1", "8443x"};
	struct config c;
	char err[512] = "";

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS", bad[i], 1);
		err[0] = '\0';
		assert_int_equal(load(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), -1);
		assert_non_null(strstr(err, "OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS"));
		config_free(&c);
	}
	/* Spaces around the ports are allowed, as in the other lists. */
	setenv("OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS", " 8443 , 9443 ", 1);
	assert_int_equal(load(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	config_free(&c);
	unsetenv("OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS");
	setenv("EGRESSD_INTERCEPT_PORTS", "80,,443", 1);
	assert_int_equal(load(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "EGRESSD_INTERCEPT_PORTS"));
	config_free(&c);
	unsetenv("EGRESSD_INTERCEPT_PORTS");
}

/* load, then config_check as main does (with a token). */
static int
loadc(struct config *c, const char *text, int argc, char **argv, char *err, size_t errlen)
{
	if (load(c, text, argc, argv, err, errlen) != 0)
		return -1;
	c->token[0] = 'x';
	return config_check(c, err, errlen);
}

/*
 * The chained proxy: http(s) with an IP literal or a host name, no path,
 * with interception in dns+nft mode; its Proxy-Authorization value a
 * header value. No error quotes the URL or the value.
 */
static void
test_upstream_proxy(void **state)
{
	static const char *const bad[] = {"http://user:hunter2@192.0.2.9:3128",
	    "http://192.0.2.9:3128/?a=hunter2", "http://192.0.2.9:3128/path", "http://192.0.2.9:0",
	    "ftp://192.0.2.9:3128", "https://192.0.2.9:3128/p", "http://*.example.test:3128",
	    "http://proxy_1.example.test:3128", "http://-proxy.example.test",
	    "http://proxy.example.test./x", "http://proxy..example.test",
	    "https://u:hunter2@192.0.2.9", "http://192.0.2.9:3128#hunter2", "192.0.2.9:3128",
	    "http://192.0.2.9:99999"};
	struct config c;
	struct config_proxy px;
	char err[512] = "";

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY", bad[i], 1);
		err[0] = '\0';
		assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), -1);
		assert_non_null(strstr(err, "OPENSANDBOX_EGRESS_UPSTREAM_PROXY"));
		assert_null(strstr(err, "hunter2"));
		config_free(&c);
	}
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY", "http://192.0.2.9:3128", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	config_proxy(&c, &px);
	assert_true(px.set);
	assert_false(px.tls);
	assert_int_equal(px.family, AF_INET);
	assert_int_equal(px.port, 3128);
	assert_int_equal(px.addr[0], 192);
	assert_int_equal(px.addr[3], 9);
	config_free(&c);
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY", "https://192.0.2.9", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	config_proxy(&c, &px);
	assert_true(px.set);
	assert_true(px.tls);
	assert_int_equal(px.port, 443);
	config_free(&c);
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY", "https://[2001:db8::9]:8443", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	config_proxy(&c, &px);
	assert_true(px.tls);
	assert_int_equal(px.family, AF_INET6);
	assert_int_equal(px.port, 8443);
	config_free(&c);
	/* By name: canonical (lowercase, no final dot), resolved by the dns process. */
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY", "http://Proxy.Corp.EXAMPLE.test.:3128", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	config_proxy(&c, &px);
	assert_true(px.set);
	assert_false(px.tls);
	assert_int_equal(px.family, 0);
	assert_string_equal(px.name, "proxy.corp.example.test");
	assert_int_equal(px.port, 3128);
	config_free(&c);
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY", "https://proxy.example.test", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	config_proxy(&c, &px);
	assert_true(px.tls);
	assert_string_equal(px.name, "proxy.example.test");
	assert_int_equal(px.port, 443);
	config_free(&c);
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY", "http://192.0.2.9:3128", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	config_proxy(&c, &px);
	assert_string_equal(px.name, "");
	config_free(&c);
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY", "http://[2001:db8::9]/", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	config_proxy(&c, &px);
	assert_true(px.set);
	assert_int_equal(px.family, AF_INET6);
	assert_int_equal(px.port, 80);
	config_free(&c);
	/* DNS through the proxy: only with a proxy, given by address. */
	setenv("EGRESSD_DNS_VIA_PROXY", "true", 1);
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY", "http://proxy.example.test:3128", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "EGRESSD_DNS_VIA_PROXY"));
	config_free(&c);
	unsetenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY");
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "EGRESSD_DNS_VIA_PROXY is set without"));
	config_free(&c);
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY", "http://192.0.2.9:3128", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	assert_true(c.dns_via_proxy);
	config_free(&c);
	unsetenv("EGRESSD_DNS_VIA_PROXY");
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY", "http://[2001:db8::9]/", 1);
	/* Only the intercept dials through it: without interception it would be ignored. */
	assert_int_equal(loadc(&c, "intercept: false\n", 0, NULL, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "MITMPROXY_TRANSPARENT"));
	config_free(&c);
	assert_int_equal(loadc(&c, "intercept: true\nmode: dns\n", 0, NULL, err, sizeof(err)), -1);
	config_free(&c);
	/* The authorization value: a header value, never quoted. */
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY_AUTH", "Basic hunter2\r\nX-Evil: 1", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "OPENSANDBOX_EGRESS_UPSTREAM_PROXY_AUTH"));
	assert_null(strstr(err, "hunter2"));
	config_free(&c);
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY_AUTH", " Basic aHVudGVyMg==", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), -1);
	config_free(&c);
	setenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY_AUTH", "Basic aHVudGVyMg==", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	config_free(&c);
	/* An authorization without a proxy would be ignored: refused. */
	unsetenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY");
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "OPENSANDBOX_EGRESS_UPSTREAM_PROXY_AUTH"));
	config_free(&c);
	unsetenv("OPENSANDBOX_EGRESS_UPSTREAM_PROXY_AUTH");
}

/*
 * The listeners' mark is theirs alone: a child's role mark equal to it
 * would let that child serve the sidecar's ports. Refused by config_check.
 */
static void
test_listen_mark(void **state)
{
	static const char *const same[] = {"0x1", "0x2", "0x4", "0"};
	struct config c;
	char err[512] = "";
	int rc;

	(void)state;
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	assert_int_equal(c.listen_mark, 0x8);
	config_free(&c);
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		err[0] = '\0';
		setenv("EGRESSD_LISTEN_MARK", same[i], 1);
		rc = loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err));
		unsetenv("EGRESSD_LISTEN_MARK");
		config_free(&c);
		assert_int_equal(rc, -1);
		if (strstr(err, "listen-mark") == NULL)
			fail_msg("%s: %s", same[i], err);
	}
	setenv("EGRESSD_LISTEN_MARK", "0x10", 1);
	rc = loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err));
	unsetenv("EGRESSD_LISTEN_MARK");
	assert_int_equal(rc, 0);
	assert_int_equal(c.listen_mark, 0x10);
	config_free(&c);
}

/* The generated CA's lifetime and overlap: in range, and not for an operator CA. */
static void
test_ca_lifetime(void **state)
{
	struct config c;
	char err[512] = "";

	(void)state;
	setenv("EGRESSD_CA_LIFETIME", "30", 1);
	setenv("EGRESSD_CA_RENEW_BEFORE", "10", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), 0);
	assert_int_equal(c.ca_lifetime, 30);
	assert_int_equal(c.ca_renew_before, 10);
	config_free(&c);
	/* More than half the lifetime: a third CA would be due while two are trusted. */
	setenv("EGRESSD_CA_RENEW_BEFORE", "16", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "ca-renew-before"));
	config_free(&c);
	setenv("EGRESSD_CA_RENEW_BEFORE", "4", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), -1);
	config_free(&c);
	unsetenv("EGRESSD_CA_RENEW_BEFORE");
	setenv("EGRESSD_CA_LIFETIME", "19", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "ca-lifetime"));
	config_free(&c);
	setenv("EGRESSD_CA_LIFETIME", "thirty", 1);
	assert_int_equal(loadc(&c, "intercept: true\n", 0, NULL, err, sizeof(err)), -1);
	config_free(&c);
	/* The file and flags take them too; an operator CA is never renewed by egressd. */
	unsetenv("EGRESSD_CA_LIFETIME");
	assert_int_equal(loadc(&c, "intercept: true\nca-lifetime: 86400\nca-renew-before: 3600\n",
	                     0, NULL, err, sizeof(err)),
	    0);
	assert_int_equal(c.ca_lifetime, 86400);
	assert_int_equal(c.ca_renew_before, 3600);
	config_free(&c);
	assert_int_equal(loadc(&c,
	                     "intercept: true\nca-cert: /tmp/x.crt\nca-key: /tmp/x.key\n"
	                     "ca-lifetime: 86400\n",
	                     0, NULL, err, sizeof(err)),
	    -1);
	assert_non_null(strstr(err, "generated CA only"));
	config_free(&c);
}

/* OPENSANDBOX_EGRESS_DOH_BLOCKLIST: IPs and CIDRs of both families, masked; bad entries refused. */
static void
test_doh_blocklist(void **state)
{
	struct config c;
	struct config_prefix p[CONFIG_MAX_DOH];
	char err[256];
	size_t n = 99;

	(void)state;
	config_defaults(&c);
	assert_int_equal(config_doh_blocklist(&c, p, CONFIG_MAX_DOH, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 0);
	snprintf(c.doh_blocklist, sizeof(c.doh_blocklist), " 1.1.1.1 ,10.9.8.7/8,, 2001:db8::1/32");
	assert_int_equal(config_doh_blocklist(&c, p, CONFIG_MAX_DOH, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 3);
	assert_int_equal(p[0].family, AF_INET);
	assert_int_equal(p[0].prefix_len, 32);
	assert_memory_equal(p[0].addr, "\x01\x01\x01\x01", 4);
	assert_int_equal(p[1].prefix_len, 8);
	assert_memory_equal(p[1].addr, "\x0a\x00\x00\x00", 4); /* masked */
	assert_int_equal(p[2].family, AF_INET6);
	assert_int_equal(p[2].prefix_len, 32);
	assert_memory_equal(p[2].addr, "\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\0", 16);
	{
		static const char *const bad[] = {
		    "dns.google", "1.1.1.1/33", "1.1.1.1/", "::1/129", "1.1.1.1/8x", "1.1.1"};
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			snprintf(c.doh_blocklist, sizeof(c.doh_blocklist), "8.8.8.8,%s", bad[i]);
			assert_int_equal(
			    config_doh_blocklist(&c, p, CONFIG_MAX_DOH, &n, err, sizeof(err)), -1);
			assert_non_null(strstr(err, "doh-blocklist: invalid entry"));
			c.token[0] = 'x';
			assert_int_equal(config_check(&c, err, sizeof(err)), -1);
		}
	}
	/* The OpenSandbox truthy spelling "y" is accepted. */
	setenv("OPENSANDBOX_EGRESS_BLOCK_DOH_443", "y", 1);
	config_defaults(&c);
	assert_int_equal(config_from_env(&c, err, sizeof(err)), 0);
	assert_true(c.block_doh_443);
	unsetenv("OPENSANDBOX_EGRESS_BLOCK_DOH_443");
	config_free(&c);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_file_good),
	    cmocka_unit_test(test_env_audit),
	    cmocka_unit_test(test_extra_ports),
	    cmocka_unit_test(test_listen_mark),
	    cmocka_unit_test(test_port_lists),
	    cmocka_unit_test(test_upstream_proxy),
	    cmocka_unit_test(test_doh_blocklist),
	    cmocka_unit_test(test_ca_lifetime),
	    cmocka_unit_test(test_precedence),
	    cmocka_unit_test(test_file_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
