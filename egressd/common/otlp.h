/*
 * OTLP/HTTP metrics: the series of /metrics (metrics.c's tables) encoded as
 * an opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest
 * (protobuf, Content-Type application/x-protobuf), and the settings of the
 * OpenTelemetry environment that egressd honours (docs/api.md).
 * Nothing here touches the network: the report child posts what this builds.
 */
#ifndef EGRESSD_OTLP_H
#define EGRESSD_OTLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egressd/common/httpurl.h"
#include "egressd/common/metrics.h"

#define OTLP_MAX_ATTRS 24        /* resource attributes in all */
#define OTLP_MAX_HEADERS 8       /* OTEL_EXPORTER_OTLP_HEADERS entries */
#define OTLP_MAX_KEY 64          /* bytes of an attribute key */
#define OTLP_MAX_VALUE 256       /* bytes of an attribute value */
#define OTLP_MAX_BODY (1u << 16) /* bytes of one export request */

struct otlp_attr {
	char key[OTLP_MAX_KEY];
	char value[OTLP_MAX_VALUE];
};

struct config;

/* The resolved export settings: whether to export, where, how often. */
struct otlp_settings {
	bool enabled;
	struct httpurl url; /* the collector's metrics URL */
	struct otlp_attr attrs[OTLP_MAX_ATTRS];
	size_t nattrs;
	struct otlp_attr headers[OTLP_MAX_HEADERS]; /* never logged */
	size_t nheaders;
	uint32_t interval_ms;
	uint32_t timeout_ms;
	bool delta;
};

/*
 * The OpenTelemetry settings of c into *s: off when no endpoint is set,
 * OTEL_SDK_DISABLED is true or OTEL_METRICS_EXPORTER is none. -1 with err
 * (naming the variable, never a header value) when a setting asks for
 * what egressd does not do (grpc, https, another exporter) or is malformed.
 */
int otlp_settings(const struct config *c, struct otlp_settings *s, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* What one export describes: the resource and the time window. */
struct otlp_export {
	const struct otlp_attr *attrs; /* resource attributes, in order */
	size_t nattrs;
	const char *mode; /* egressd_info's mode attribute */
	uint64_t gauges[METRICS_NGAUGES];
	uint64_t start_ns; /* cumulative: the process start; delta: the last export */
	uint64_t now_ns;
	bool delta; /* aggregation temporality of the sums and histograms */
};

/*
 * Parse METRICS_EXTRA_ATTRS ("k=v,k2=v2"; a value may contain '=') into
 * out after the n entries already there. An entry without a key or a value,
 * a key outside [A-Za-z0-9_.-], a control byte, a key given twice, or more
 * than max entries in all is an error naming the entry by position only.
 */
int otlp_parse_attrs(const char *spec, struct otlp_attr *out, size_t max, size_t *n, char *err,
    size_t errlen) __attribute__((warn_unused_result));

/*
 * Encode the export request for m into buf (at most cap bytes); the length,
 * or -1 when it does not fit.
 */
long otlp_encode(const struct metrics *m, const struct otlp_export *x, unsigned char *buf,
    size_t cap) __attribute__((warn_unused_result));

/* out = now - prev, counter by counter and bucket by bucket (delta temporality). */
void otlp_delta(struct metrics *out, const struct metrics *now, const struct metrics *prev);

#endif
