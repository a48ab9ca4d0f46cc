/*
 * OTLP metrics encoding (egressd/common/otlp.c): METRICS_EXTRA_ATTRS
 * parsing, the export request walked with a minimal protobuf reader (every
 * series of /metrics with its value, the resource attributes, the
 * temporality), a buffer too small, and delta temporality. The netns test
 * decodes the same bytes with the OpenTelemetry project's generated code.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "egressd/common/config.h"
#include "egressd/common/otlp.h"

/* --------------------------------------------------------- a protobuf reader */

struct pbr {
	const unsigned char *p;
	size_t len;
	size_t off;
};

static uint64_t
pbr_varint(struct pbr *r)
{
	uint64_t v = 0;

	for (int s = 0; s < 64; s += 7) {
		unsigned char c;

		assert_true(r->off < r->len);
		c = r->p[r->off++];
		v |= (uint64_t)(c & 0x7f) << s;
		if ((c & 0x80) == 0)
			return v;
	}
	fail_msg("varint too long");
	return 0;
}

/* Next field: its number, wire type and (for LEN) a sub-reader; false at the end. */
static bool
pbr_next(struct pbr *r, unsigned *field, unsigned *wire, struct pbr *sub, uint64_t *val)
{
	uint64_t tag;

	if (r->off == r->len)
		return false;
	tag = pbr_varint(r);
	*field = (unsigned)(tag >> 3);
	*wire = (unsigned)(tag & 7);
	if (*wire == 0) {
		*val = pbr_varint(r);
	} else if (*wire == 1) {
		assert_true(r->len - r->off >= 8);
		*val = 0;
		for (int i = 0; i < 8; i++)
			*val |= (uint64_t)r->p[r->off + i] << (8 * i);
		r->off += 8;
	} else if (*wire == 2) {
		uint64_t n = pbr_varint(r);

		assert_true(n <= r->len - r->off);
		sub->p = r->p + r->off;
		sub->len = (size_t)n;
		sub->off = 0;
		r->off += (size_t)n;
	} else {
		fail_msg("unexpected wire type %u", *wire);
	}
	return true;
}

/* The string field f of message m (or "" when absent). */
static void
pbr_string(struct pbr m, unsigned f, char *out, size_t cap)
{
	unsigned field, wire;
	struct pbr sub;
	uint64_t v;

	out[0] = '\0';
	while (pbr_next(&m, &field, &wire, &sub, &v))
		if (field == f && wire == 2) {
			assert_true(sub.len < cap);
			memcpy(out, sub.p, sub.len);
			out[sub.len] = '\0';
		}
}

/* The first LEN field f of m into *out; false when absent. */
static bool
pbr_sub(struct pbr m, unsigned f, struct pbr *out)
{
	unsigned field, wire;
	struct pbr sub;
	uint64_t v;

	while (pbr_next(&m, &field, &wire, &sub, &v))
		if (field == f && wire == 2) {
			*out = sub;
			return true;
		}
	return false;
}

/* The scalar field f of m; false when absent. */
static bool
pbr_scalar(struct pbr m, unsigned f, uint64_t *out)
{
	unsigned field, wire;
	struct pbr sub;
	uint64_t v;

	while (pbr_next(&m, &field, &wire, &sub, &v))
		if (field == f && wire != 2) {
			*out = v;
			return true;
		}
	return false;
}

/* ------------------------------------------------------------------- tests */

static void
test_attrs(void **state)
{
	static const char *const bad[] = {"=v", "k=", "k", "k=v,", ",k=v", "k=v,k=w", "bad key=v",
	    "k=a\tb", "k=v,,j=w", "k\x01=v"};
	struct otlp_attr a[4];
	char err[256];
	size_t n = 0;

	(void)state;
	assert_int_equal(otlp_parse_attrs("team=ml,run.id=a=b", a, 4, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 2);
	assert_string_equal(a[0].key, "team");
	assert_string_equal(a[0].value, "ml");
	assert_string_equal(a[1].key, "run.id");
	assert_string_equal(a[1].value, "a=b"); /* a value may contain '=' */
	/* A key already given (sandbox_id before the extra attributes) is refused. */
	assert_int_equal(otlp_parse_attrs("team=x", a, 4, &n, err, sizeof(err)), -1);
	assert_int_equal(n, 2);
	assert_int_equal(otlp_parse_attrs("a=1,b=2,c=3", a, 4, &n, err, sizeof(err)), -1);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = 0;
		assert_int_equal(otlp_parse_attrs(bad[i], a, 4, &n, err, sizeof(err)), -1);
		/* Errors name the entry by position, never its text. */
		assert_null(strstr(err, "bad key"));
	}
	n = 0;
	assert_int_equal(otlp_parse_attrs("", a, 4, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 0);
}

static void
fill(struct metrics *m)
{
	memset(m, 0, sizeof(*m));
	for (size_t i = 0; i < metrics_ncounters; i++) {
		uint64_t v = 1000 + i;

		memcpy((char *)m + metrics_counters[i].offset, &v, sizeof(v));
	}
	metrics_observe(&m->dns_latency, 0.0002);
	metrics_observe(&m->dns_latency, 0.3);
	metrics_observe(&m->dns_latency, 99);
	metrics_observe(&m->api_latency, 0.004);
}

static void
test_encode(void **state)
{
	static unsigned char buf[OTLP_MAX_BODY];
	struct otlp_attr attrs[2] = {{"service.name", "egressd"}, {"sandbox_id", "sbx-1"}};
	struct otlp_export x = {.attrs = attrs,
	    .nattrs = 2,
	    .mode = "dns+nft",
	    .gauges = {1, 7, 42},
	    .start_ns = 111,
	    .now_ns = 222};
	struct metrics m;
	struct pbr top, rm = {0}, res = {0}, sm = {0}, met = {0};
	unsigned field, wire;
	uint64_t v;
	long len;
	size_t counters = 0, hists = 0, gauges = 0, nattr = 0;

	(void)state;
	fill(&m);
	len = otlp_encode(&m, &x, buf, sizeof(buf));
	assert_true(len > 0);
	top = (struct pbr){buf, (size_t)len, 0};
	assert_true(pbr_sub(top, 1, &rm)); /* resource_metrics */
	assert_true(pbr_sub(rm, 1, &res)); /* resource */
	while (pbr_next(&res, &field, &wire, &met, &v)) {
		char key[64], val[256];
		struct pbr any;

		assert_int_equal(field, 1); /* attributes */
		pbr_string(met, 1, key, sizeof(key));
		assert_true(pbr_sub(met, 2, &any));
		pbr_string(any, 1, val, sizeof(val));
		assert_string_equal(key, attrs[nattr].key);
		assert_string_equal(val, attrs[nattr].value);
		nattr++;
	}
	assert_int_equal(nattr, 2);
	assert_true(pbr_sub(rm, 2, &sm)); /* scope_metrics */
	while (pbr_next(&sm, &field, &wire, &met, &v)) {
		char name[128];
		struct pbr data = {0}, dp = {0};

		if (field == 1)
			continue; /* the scope */
		assert_int_equal(field, 2);
		pbr_string(met, 1, name, sizeof(name));
		if (pbr_sub(met, 7, &data)) { /* sum */
			size_t i;

			for (i = 0; i < metrics_ncounters; i++)
				if (strcmp(metrics_counters[i].name, name) == 0)
					break;
			assert_true(i < metrics_ncounters);
			assert_true(pbr_sub(data, 1, &dp));
			assert_true(pbr_scalar(dp, 6, &v)); /* as_int */
			assert_int_equal(v, 1000 + i);
			assert_true(pbr_scalar(dp, 2, &v));
			assert_int_equal(v, 111);
			assert_true(pbr_scalar(data, 2, &v));
			assert_int_equal(v, 2); /* cumulative */
			assert_true(pbr_scalar(data, 3, &v));
			assert_int_equal(v, 1); /* monotonic */
			counters++;
		} else if (pbr_sub(met, 9, &data)) { /* histogram */
			struct pbr packed = {0};
			size_t nb = 0;

			assert_true(pbr_sub(data, 1, &dp));
			assert_true(pbr_scalar(dp, 4, &v));
			assert_int_equal(
			    v, strcmp(name, "egressd_dns_latency_seconds") == 0 ? 3 : 1);
			assert_true(pbr_sub(dp, 6, &packed));
			assert_int_equal(packed.len, 8 * METRICS_NBUCKETS);
			assert_true(pbr_sub(dp, 7, &packed));
			nb = packed.len / 8;
			assert_int_equal(nb, METRICS_NBUCKETS - 1);
			hists++;
		} else {
			assert_true(pbr_sub(met, 5, &data)); /* gauge */
			assert_true(pbr_sub(data, 1, &dp));
			assert_true(pbr_scalar(dp, 6, &v));
			if (strcmp(name, "egressd_learned_entries") == 0)
				assert_int_equal(v, 42);
			if (strcmp(name, "egressd_policy_revision") == 0)
				assert_int_equal(v, 7);
			gauges++;
		}
	}
	assert_int_equal(counters, metrics_ncounters);
	assert_int_equal(hists, metrics_nhists);
	assert_int_equal(gauges, 1 + METRICS_NGAUGES); /* egressd_info and the status gauges */
	/* Too small a buffer: -1, never a truncated request. */
	assert_int_equal(otlp_encode(&m, &x, buf, (size_t)len - 1), -1);
	assert_int_equal(otlp_encode(&m, &x, buf, 10), -1);
}

static void
test_delta(void **state)
{
	struct metrics a, b, d;

	(void)state;
	fill(&a);
	b = a;
	b.dns_queries += 5;
	metrics_observe(&b.dns_latency, 0.0002);
	otlp_delta(&d, &b, &a);
	assert_int_equal(d.dns_queries, 5);
	assert_int_equal(d.redact_total, 0);
	assert_int_equal(d.dns_latency.count, 1);
	assert_int_equal(d.dns_latency.buckets[1], 1);
	/* A counter that went down (a child restarted with a fresh page): the new value. */
	b.dns_queries = 3;
	otlp_delta(&d, &b, &a);
	assert_int_equal(d.dns_queries, 3);
}

static int
settings(struct config *c, struct otlp_settings *s, char *err, size_t errlen)
{
	err[0] = '\0';
	return otlp_settings(c, s, err, errlen);
}

/* The OpenTelemetry environment: what turns export on and off, and what is refused. */
static void
test_settings(void **state)
{
	struct config c;
	struct otlp_settings s;
	char err[512];

	(void)state;
	config_defaults(&c);
	assert_int_equal(settings(&c, &s, err, sizeof(err)), 0);
	assert_false(s.enabled); /* no endpoint: no export */
	assert_int_equal(s.interval_ms, 60000);

	snprintf(c.otlp_endpoint, sizeof(c.otlp_endpoint), "http://192.0.2.9:4318/");
	assert_int_equal(settings(&c, &s, err, sizeof(err)), 0);
	assert_true(s.enabled);
	assert_string_equal(s.url.host, "192.0.2.9");
	assert_int_equal(s.url.port, 4318);
	assert_string_equal(s.url.path, "/v1/metrics"); /* the base URL gets the signal path */
	assert_string_equal(s.url.authority, "192.0.2.9:4318");
	assert_string_equal(s.attrs[0].key, "service.name");
	assert_string_equal(s.attrs[0].value, "egressd");

	/* The metrics endpoint wins and is used as given. */
	snprintf(c.otlp_metrics_endpoint, sizeof(c.otlp_metrics_endpoint),
	    "http://[2001:db8::9]/custom/path");
	assert_int_equal(settings(&c, &s, err, sizeof(err)), 0);
	assert_string_equal(s.url.host, "2001:db8::9");
	assert_int_equal(s.url.port, 80);
	assert_string_equal(s.url.path, "/custom/path");
	assert_string_equal(s.url.authority, "[2001:db8::9]:80");

	/* Switched off by either OpenTelemetry setting. */
	c.otel_sdk_disabled = true;
	assert_int_equal(settings(&c, &s, err, sizeof(err)), 0);
	assert_false(s.enabled);
	c.otel_sdk_disabled = false;
	snprintf(c.otel_metrics_exporter, sizeof(c.otel_metrics_exporter), "NONE");
	assert_int_equal(settings(&c, &s, err, sizeof(err)), 0);
	assert_false(s.enabled);
	snprintf(c.otel_metrics_exporter, sizeof(c.otel_metrics_exporter), "prometheus");
	assert_int_equal(settings(&c, &s, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "OTEL_METRICS_EXPORTER"));
	c.otel_metrics_exporter[0] = '\0';

	/* Resource attributes: sandbox id, then the extra ones, in order. */
	snprintf(c.sandbox_id, sizeof(c.sandbox_id), "sbx-7");
	snprintf(c.metrics_extra_attrs, sizeof(c.metrics_extra_attrs), "team=ml,run=a=b");
	assert_int_equal(settings(&c, &s, err, sizeof(err)), 0);
	assert_int_equal(s.nattrs, 5);
	assert_string_equal(s.attrs[2].key, "sandbox_id");
	assert_string_equal(s.attrs[2].value, "sbx-7");
	assert_string_equal(s.attrs[4].value, "a=b");
	snprintf(c.metrics_extra_attrs, sizeof(c.metrics_extra_attrs), "sandbox_id=other");
	assert_int_equal(settings(&c, &s, err, sizeof(err)), -1); /* no overriding the pinned id */
	assert_non_null(strstr(err, "METRICS_EXTRA_ATTRS"));
	c.metrics_extra_attrs[0] = '\0';

	/* Headers: percent-decoded; framing headers and control bytes refused, never echoed. */
	snprintf(c.otlp_headers, sizeof(c.otlp_headers), "%s",
	    "Authorization=Basic%20c2VjcmV0,x-tenant=7");
	assert_int_equal(settings(&c, &s, err, sizeof(err)), 0);
	assert_int_equal(s.nheaders, 2);
	assert_string_equal(s.headers[0].value, "Basic c2VjcmV0");
	snprintf(c.otlp_headers, sizeof(c.otlp_headers), "Content-Length=5");
	assert_int_equal(settings(&c, &s, err, sizeof(err)), -1);
	snprintf(c.otlp_headers, sizeof(c.otlp_headers), "%s", "x-a=c2VjcmV0%0d%0aInjected: 1");
	assert_int_equal(settings(&c, &s, err, sizeof(err)), -1);
	assert_null(strstr(err, "c2VjcmV0"));
	c.otlp_headers[0] = '\0';

	/* Temporality. */
	snprintf(c.otlp_temporality, sizeof(c.otlp_temporality), "Delta");
	assert_int_equal(settings(&c, &s, err, sizeof(err)), 0);
	assert_true(s.delta);
	snprintf(c.otlp_temporality, sizeof(c.otlp_temporality), "sideways");
	assert_int_equal(settings(&c, &s, err, sizeof(err)), -1);
	c.otlp_temporality[0] = '\0';

	/* What egressd does not do is refused, not ignored. */
	snprintf(c.otlp_protocol, sizeof(c.otlp_protocol), "grpc");
	assert_int_equal(settings(&c, &s, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "PROTOCOL"));
	snprintf(c.otlp_protocol, sizeof(c.otlp_protocol), "http/protobuf");
	c.otlp_interval_ms = 10;
	assert_int_equal(settings(&c, &s, err, sizeof(err)), -1);
	c.otlp_interval_ms = 1000;
	{
		static const char *const bad[] = {"https://192.0.2.9:4318", "ftp://x", "http://",
		    "http://u:p@192.0.2.9/", "http://192.0.2.9:0/", "http://192.0.2.9:70000/",
		    "http://192.0.2.9/x?q=1", "http://192.0.2.9/#f", "http://[2001:db8::9/",
		    "http://bad_host/", "http://192.0.2.9:43x/", "192.0.2.9:4318"};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			snprintf(
			    c.otlp_metrics_endpoint, sizeof(c.otlp_metrics_endpoint), "%s", bad[i]);
			assert_int_equal(settings(&c, &s, err, sizeof(err)), -1);
			assert_non_null(strstr(err, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"));
		}
	}
	config_free(&c);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_attrs),
	    cmocka_unit_test(test_encode),
	    cmocka_unit_test(test_delta),
	    cmocka_unit_test(test_settings),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
