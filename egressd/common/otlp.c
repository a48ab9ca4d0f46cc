/*
 * OTLP/HTTP metrics encoding; see otlp.h. Field numbers are those of
 * the .proto files of opentelemetry-proto (collector/metrics,
 * metrics, resource and common, v1).
 * A nested message is written in place: its length is reserved as three
 * varint bytes (OTLP_MAX_BODY < 2^21) and closed up when the message ends,
 * so the output is canonical protobuf.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egressd/common/config.h"
#include "egressd/common/httpurl.h"
#include "egressd/common/otlp.h"
#include "version.h"

/* Wire types. */
#define PB_VARINT 0
#define PB_I64 1
#define PB_LEN 2

struct otlp_buf {
	unsigned char *p;
	size_t len;
	size_t cap;
	bool over;
};

static void
pb_bytes(struct otlp_buf *b, const void *v, size_t n)
{
	if (b->over || b->cap - b->len < n) {
		b->over = true;
		return;
	}
	memcpy(b->p + b->len, v, n);
	b->len += n;
}

static void
pb_varint(struct otlp_buf *b, uint64_t v)
{
	unsigned char t[10];
	size_t n = 0;

	do {
		t[n] = (unsigned char)(v & 0x7f);
		v >>= 7;
		if (v != 0)
			t[n] |= 0x80;
		n++;
	} while (v != 0);
	pb_bytes(b, t, n);
}

static void
pb_tag(struct otlp_buf *b, unsigned field, unsigned wire)
{
	pb_varint(b, ((uint64_t)field << 3) | wire);
}

static void
pb_le64(struct otlp_buf *b, uint64_t v)
{
	unsigned char t[8];

	for (int i = 0; i < 8; i++)
		t[i] = (unsigned char)(v >> (8 * i));
	pb_bytes(b, t, 8);
}

static uint64_t
pb_dbits(double d)
{
	uint64_t u;

	memcpy(&u, &d, sizeof(u));
	return u;
}

static void
pb_fixed64(struct otlp_buf *b, unsigned field, uint64_t v)
{
	pb_tag(b, field, PB_I64);
	pb_le64(b, v);
}

static void
pb_string(struct otlp_buf *b, unsigned field, const char *s)
{
	size_t n = strlen(s);

	pb_tag(b, field, PB_LEN);
	pb_varint(b, n);
	pb_bytes(b, s, n);
}

/* Open a nested message: its tag and three reserved length bytes. */
static size_t
pb_open(struct otlp_buf *b, unsigned field)
{
	static const unsigned char reserve[3];

	pb_tag(b, field, PB_LEN);
	pb_bytes(b, reserve, sizeof(reserve));
	return b->len;
}

/* Close it: the minimal varint length, the body moved up against it. */
static void
pb_close(struct otlp_buf *b, size_t body)
{
	size_t n, k = 0;
	unsigned char t[3];
	uint64_t v;

	if (b->over)
		return;
	n = b->len - body;
	if (n >= (1u << 21)) {
		b->over = true;
		return;
	}
	v = n;
	do {
		t[k] = (unsigned char)(v & 0x7f);
		v >>= 7;
		if (v != 0)
			t[k] |= 0x80;
		k++;
	} while (v != 0);
	memcpy(b->p + body - 3, t, k);
	memmove(b->p + body - 3 + k, b->p + body, n);
	b->len -= 3 - k;
}

/* common.v1.KeyValue {key = 1, value = 2 (AnyValue {string_value = 1})}. */
static void
pb_keyvalue(struct otlp_buf *b, unsigned field, const char *key, const char *value)
{
	size_t kv = pb_open(b, field), av;

	pb_string(b, 1, key);
	av = pb_open(b, 2);
	pb_string(b, 1, value);
	pb_close(b, av);
	pb_close(b, kv);
}

/* metrics.v1.NumberDataPoint {start = 2, time = 3, as_int = 6, attributes = 7}. */
static void
pb_number_point(struct otlp_buf *b, const struct otlp_export *x, bool with_start, uint64_t v,
    const char *attr_key, const char *attr_value)
{
	size_t dp = pb_open(b, 1);

	if (with_start)
		pb_fixed64(b, 2, x->start_ns);
	pb_fixed64(b, 3, x->now_ns);
	pb_fixed64(b, 6, v); /* sfixed64: the same bytes */
	if (attr_key != NULL)
		pb_keyvalue(b, 7, attr_key, attr_value);
	pb_close(b, dp);
}

/* metrics.v1.Metric {name = 1, description = 2, unit = 3, gauge = 5}. */
static void
pb_gauge(struct otlp_buf *b, const struct otlp_export *x, const char *name, const char *help,
    uint64_t v, const char *attr_key, const char *attr_value)
{
	size_t m = pb_open(b, 2), g;

	pb_string(b, 1, name);
	pb_string(b, 2, help);
	g = pb_open(b, 5);
	pb_number_point(b, x, false, v, attr_key, attr_value);
	pb_close(b, g);
	pb_close(b, m);
}

/* Metric with sum = 7: Sum {data_points = 1, temporality = 2, is_monotonic = 3}. */
static void
pb_sum(struct otlp_buf *b, const struct otlp_export *x, const struct metrics_def *d, uint64_t v)
{
	size_t m = pb_open(b, 2), s;

	pb_string(b, 1, d->name);
	pb_string(b, 2, d->help);
	s = pb_open(b, 7);
	pb_number_point(b, x, true, v, NULL, NULL);
	pb_tag(b, 2, PB_VARINT);
	pb_varint(b, x->delta ? 1 : 2); /* AGGREGATION_TEMPORALITY_DELTA / _CUMULATIVE */
	pb_tag(b, 3, PB_VARINT);
	pb_varint(b, 1);
	pb_close(b, s);
	pb_close(b, m);
}

/*
 * Metric with histogram = 9: Histogram {data_points = 1, temporality = 2};
 * HistogramDataPoint {start = 2, time = 3, count = 4, sum = 5,
 * bucket_counts = 6 (packed fixed64), explicit_bounds = 7 (packed double)}.
 */
static void
pb_histogram(struct otlp_buf *b, const struct otlp_export *x, const struct metrics_def *d,
    const struct metrics_hist *h)
{
	size_t m = pb_open(b, 2), hs, dp;

	pb_string(b, 1, d->name);
	pb_string(b, 2, d->help);
	pb_string(b, 3, "s");
	hs = pb_open(b, 9);
	dp = pb_open(b, 1);
	pb_fixed64(b, 2, x->start_ns);
	pb_fixed64(b, 3, x->now_ns);
	pb_fixed64(b, 4, h->count);
	pb_fixed64(b, 5, pb_dbits(h->sum));
	pb_tag(b, 6, PB_LEN);
	pb_varint(b, 8 * METRICS_NBUCKETS);
	for (int i = 0; i < METRICS_NBUCKETS; i++)
		pb_le64(b, h->buckets[i]);
	/* N buckets have N - 1 explicit bounds; the last bucket is +Inf. */
	pb_tag(b, 7, PB_LEN);
	pb_varint(b, 8 * (METRICS_NBUCKETS - 1));
	for (int i = 0; i < METRICS_NBUCKETS - 1; i++)
		pb_le64(b, pb_dbits(metrics_bound(i)));
	pb_close(b, dp);
	pb_tag(b, 2, PB_VARINT);
	pb_varint(b, x->delta ? 1 : 2);
	pb_close(b, hs);
	pb_close(b, m);
}

/* Encode; see otlp.h. */
long
otlp_encode(const struct metrics *m, const struct otlp_export *x, unsigned char *buf, size_t cap)
{
	struct otlp_buf b = {.p = buf, .cap = cap < OTLP_MAX_BODY ? cap : OTLP_MAX_BODY};
	size_t rm, res, sm, scope;

	/* ExportMetricsServiceRequest {resource_metrics = 1}. */
	rm = pb_open(&b, 1);
	/* ResourceMetrics {resource = 1, scope_metrics = 2}; Resource {attributes = 1}. */
	res = pb_open(&b, 1);
	for (size_t i = 0; i < x->nattrs; i++)
		pb_keyvalue(&b, 1, x->attrs[i].key, x->attrs[i].value);
	pb_close(&b, res);
	/* ScopeMetrics {scope = 1, metrics = 2}; InstrumentationScope {name = 1, version = 2}. */
	sm = pb_open(&b, 2);
	scope = pb_open(&b, 1);
	pb_string(&b, 1, "egressd");
	pb_string(&b, 2, EGRESSD_VERSION);
	pb_close(&b, scope);
	pb_gauge(&b, x, "egressd_info", "Build and mode.", 1, "mode", x->mode);
	for (size_t i = 0; i < METRICS_NGAUGES; i++)
		pb_gauge(&b, x, metrics_gauges[i].name, metrics_gauges[i].help, x->gauges[i], NULL,
		    NULL);
	for (size_t i = 0; i < metrics_ncounters; i++)
		pb_sum(&b, x, &metrics_counters[i], metrics_counter_value(m, i));
	for (size_t i = 0; i < metrics_nhists; i++)
		pb_histogram(&b, x, &metrics_hists[i], metrics_hist_value(m, i));
	pb_close(&b, sm);
	pb_close(&b, rm);
	return b.over ? -1 : (long)b.len;
}

/* Delta; see otlp.h. Counters only grow, so a smaller value means a reset. */
void
otlp_delta(struct metrics *out, const struct metrics *now, const struct metrics *prev)
{
	const uint64_t *a = (const uint64_t *)(const void *)now;
	const uint64_t *p = (const uint64_t *)(const void *)prev;
	uint64_t *o = (uint64_t *)(void *)out;
	const struct metrics_hist *hn[] = {&now->dns_latency, &now->api_latency};
	const struct metrics_hist *hp[] = {&prev->dns_latency, &prev->api_latency};
	struct metrics_hist *ho[] = {&out->dns_latency, &out->api_latency};

	for (size_t i = 0; i < offsetof(struct metrics, dns_latency) / sizeof(uint64_t); i++)
		o[i] = a[i] >= p[i] ? a[i] - p[i] : a[i];
	for (size_t k = 0; k < sizeof(hn) / sizeof(hn[0]); k++) {
		bool reset = hn[k]->count < hp[k]->count;

		for (int i = 0; i < METRICS_NBUCKETS; i++)
			ho[k]->buckets[i] = reset || hn[k]->buckets[i] < hp[k]->buckets[i]
			                        ? hn[k]->buckets[i]
			                        : hn[k]->buckets[i] - hp[k]->buckets[i];
		ho[k]->count = reset ? hn[k]->count : hn[k]->count - hp[k]->count;
		ho[k]->sum = reset ? hn[k]->sum : hn[k]->sum - hp[k]->sum;
	}
}

static bool
otlp_key_ok(const char *k, size_t n)
{
	if (n == 0 || n >= OTLP_MAX_KEY)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)k[i]) && k[i] != '_' && k[i] != '.' && k[i] != '-')
			return false;
	return true;
}

/* METRICS_EXTRA_ATTRS; see otlp.h. */
int
otlp_parse_attrs(
    const char *spec, struct otlp_attr *out, size_t max, size_t *n, char *err, size_t errlen)
{
	const char *p = spec;
	size_t pos = 0;

	while (*p != '\0') {
		const char *end = strchr(p, ',');
		const char *eq;
		size_t len = end != NULL ? (size_t)(end - p) : strlen(p), klen, vlen;

		pos++;
		eq = memchr(p, '=', len);
		klen = eq != NULL ? (size_t)(eq - p) : 0;
		vlen = eq != NULL ? len - klen - 1 : 0;
		if (eq == NULL || !otlp_key_ok(p, klen) || vlen == 0 || vlen >= OTLP_MAX_VALUE) {
			snprintf(err, errlen,
			    "entry %zu is not key=value (key of [A-Za-z0-9_.-], at most %d bytes; "
			    "value not empty, at most %d bytes)",
			    pos, OTLP_MAX_KEY - 1, OTLP_MAX_VALUE - 1);
			return -1;
		}
		for (size_t i = 0; i < vlen; i++)
			if ((unsigned char)eq[1 + i] < 0x20 || eq[1 + i] == 0x7f) {
				snprintf(
				    err, errlen, "entry %zu: a control byte in the value", pos);
				return -1;
			}
		for (size_t i = 0; i < *n; i++)
			if (strlen(out[i].key) == klen && memcmp(out[i].key, p, klen) == 0) {
				snprintf(err, errlen, "entry %zu: a key given twice", pos);
				return -1;
			}
		if (*n >= max) {
			snprintf(err, errlen, "more than %zu attributes", max);
			return -1;
		}
		memcpy(out[*n].key, p, klen);
		out[*n].key[klen] = '\0';
		memcpy(out[*n].value, eq + 1, vlen);
		out[*n].value[vlen] = '\0';
		(*n)++;
		p = end != NULL ? end + 1 : p + len;
		if (end != NULL && *p == '\0') {
			snprintf(err, errlen, "entry %zu is empty", pos + 1);
			return -1;
		}
	}
	return 0;
}

/* strcasecmp without locale: the settings are ASCII words. */
static bool
otlp_word(const char *a, const char *b)
{
	for (; *a != '\0' && *b != '\0'; a++, b++)
		if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
			return false;
	return *a == *b;
}

static int
otlp_hex(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/*
 * OTEL_EXPORTER_OTLP_HEADERS: k=v,... with percent-encoded values; keys
 * are header tokens, framing headers are refused, values must be field
 * values once decoded. Errors name the entry by position, never a value.
 */
static int
otlp_headers(const char *spec, struct otlp_settings *s, char *err, size_t errlen)
{
	static const char *const framing[] = {"host", "content-length", "content-type",
	    "transfer-encoding", "connection", "te", "upgrade", "trailer", NULL};
	struct otlp_attr raw[OTLP_MAX_HEADERS];
	size_t n = 0;

	if (otlp_parse_attrs(spec, raw, OTLP_MAX_HEADERS, &n, err, errlen) != 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		const char *v = raw[i].value;
		size_t o = 0;

		for (size_t k = 0; raw[i].key[k] != '\0'; k++)
			if (raw[i].key[k] == '.') {
				snprintf(err, errlen, "entry %zu: not a header name", i + 1);
				return -1;
			}
		for (size_t k = 0; framing[k] != NULL; k++)
			if (otlp_word(raw[i].key, framing[k])) {
				snprintf(
				    err, errlen, "entry %zu: a framing header is refused", i + 1);
				return -1;
			}
		for (size_t k = 0; v[k] != '\0'; k++) {
			int c = (unsigned char)v[k];

			if (c == '%') {
				int h = otlp_hex(v[k + 1]), l = h < 0 ? -1 : otlp_hex(v[k + 2]);

				if (l < 0) {
					snprintf(
					    err, errlen, "entry %zu: a bad percent escape", i + 1);
					return -1;
				}
				c = h * 16 + l;
				k += 2;
			}
			if ((c < 0x20 && c != '\t') || c == 0x7f) {
				snprintf(
				    err, errlen, "entry %zu: a control byte in the value", i + 1);
				return -1;
			}
			s->headers[i].value[o++] = (char)c;
		}
		s->headers[i].value[o] = '\0';
		memcpy(s->headers[i].key, raw[i].key, sizeof(s->headers[i].key));
	}
	s->nheaders = n;
	return 0;
}

static void
otlp_attr_set(struct otlp_settings *s, const char *k, const char *v)
{
	snprintf(s->attrs[s->nattrs].key, sizeof(s->attrs[0].key), "%s", k);
	snprintf(s->attrs[s->nattrs].value, sizeof(s->attrs[0].value), "%s", v);
	s->nattrs++;
}

/* The collector's URL into s; generic: the base URL of every signal. */
static int
otlp_target(const char *url, bool generic, struct otlp_settings *s, char *err, size_t errlen)
{
	struct httpurl u;

	if (httpurl_parse(url, &u, err, errlen) != 0)
		return -1;
	if (generic) {
		size_t n = strlen(u.path);

		while (n > 0 && u.path[n - 1] == '/')
			n--;
		if (n + sizeof("/v1/metrics") > sizeof(u.path)) {
			snprintf(err, errlen, "the URL's path is too long");
			return -1;
		}
		memcpy(u.path + n, "/v1/metrics", sizeof("/v1/metrics"));
	}
	s->url = u;
	return 0;
}

/*
 * The variable to name in an error about a setting that has a general and
 * a metrics form (OTEL_EXPORTER_OTLP_X, OTEL_EXPORTER_OTLP_METRICS_X): the
 * metrics one when it is set, as the OpenTelemetry specification makes it
 * win.
 */
static const char *
otlp_var(const char *x)
{
	static char name[64];

	snprintf(name, sizeof(name), "OTEL_EXPORTER_OTLP_METRICS_%s", x);
	if (getenv(name) == NULL)
		snprintf(name, sizeof(name), "OTEL_EXPORTER_OTLP_%s", x);
	return name;
}

/* Settings; see otlp.h. */
int
otlp_settings(const struct config *c, struct otlp_settings *s, char *err, size_t errlen)
{
	char why[256] = "";
	const char *var = NULL;

	memset(s, 0, sizeof(*s));
	s->interval_ms = c->otlp_interval_ms != 0 ? c->otlp_interval_ms : 60000;
	s->timeout_ms = c->otlp_timeout_ms != 0 ? c->otlp_timeout_ms : 10000;
	if (c->otlp_protocol[0] != '\0' && strcmp(c->otlp_protocol, "http/protobuf") != 0) {
		snprintf(err, errlen, "%s: only http/protobuf is supported", otlp_var("PROTOCOL"));
		return -1;
	}
	if (c->otel_metrics_exporter[0] != '\0' && !otlp_word(c->otel_metrics_exporter, "otlp") &&
	    !otlp_word(c->otel_metrics_exporter, "none")) {
		snprintf(err, errlen,
		    "OTEL_METRICS_EXPORTER: only otlp or none (Prometheus text is GET /metrics)");
		return -1;
	}
	if (c->otlp_temporality[0] != '\0' && !otlp_word(c->otlp_temporality, "cumulative") &&
	    !otlp_word(c->otlp_temporality, "delta") &&
	    !otlp_word(c->otlp_temporality, "lowmemory")) {
		snprintf(err, errlen,
		    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE: cumulative, "
		    "delta or lowmemory");
		return -1;
	}
	/* Only counters and histograms here: lowmemory is delta for both. */
	s->delta = c->otlp_temporality[0] != '\0' && !otlp_word(c->otlp_temporality, "cumulative");
	if (s->interval_ms < 1000 || s->timeout_ms < 100 || s->timeout_ms > 60000) {
		if (s->interval_ms < 1000)
			snprintf(err, errlen,
			    "OTEL_METRIC_EXPORT_INTERVAL: at least 1000 (milliseconds)");
		else
			snprintf(
			    err, errlen, "%s: 100 to 60000 (milliseconds)", otlp_var("TIMEOUT"));
		return -1;
	}
	if (c->otlp_metrics_endpoint[0] != '\0') {
		var = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
		if (otlp_target(c->otlp_metrics_endpoint, false, s, why, sizeof(why)) != 0)
			goto bad;
	} else if (c->otlp_endpoint[0] != '\0') {
		var = "OTEL_EXPORTER_OTLP_ENDPOINT";
		if (otlp_target(c->otlp_endpoint, true, s, why, sizeof(why)) != 0)
			goto bad;
	}
	var = otlp_var("HEADERS");
	if (otlp_headers(c->otlp_headers, s, why, sizeof(why)) != 0)
		goto bad;
	otlp_attr_set(
	    s, "service.name", c->otel_service_name[0] ? c->otel_service_name : "egressd");
	otlp_attr_set(s, "service.version", EGRESSD_VERSION);
	if (c->sandbox_id[0] != '\0')
		otlp_attr_set(s, "sandbox_id", c->sandbox_id);
	var = "OPENSANDBOX_EGRESS_METRICS_EXTRA_ATTRS";
	if (otlp_parse_attrs(c->metrics_extra_attrs, s->attrs, OTLP_MAX_ATTRS, &s->nattrs, why,
	        sizeof(why)) != 0)
		goto bad;
	var = "OTEL_RESOURCE_ATTRIBUTES";
	if (otlp_parse_attrs(c->otel_resource_attrs, s->attrs, OTLP_MAX_ATTRS, &s->nattrs, why,
	        sizeof(why)) != 0)
		goto bad;
	s->enabled = s->url.host[0] != '\0' && !c->otel_sdk_disabled &&
	             !otlp_word(c->otel_metrics_exporter, "none");
	return 0;
bad:
	snprintf(err, errlen, "%s: %s", var, why);
	return -1;
}
