// Test-only OTLP/HTTP metrics receiver (tests/netns/test_otlp.sh).
// It decodes each request with the OpenTelemetry project's own generated
// protobuf code (@opentelemetry/otlp-transformer), refuses anything that is
// not an exact ExportMetricsServiceRequest (wrong path, method or type, bad
// wire format, unknown fields: the re-encoding must give the same bytes),
// and appends one JSON line per request to OUT (decoded, or {"error":...}).
// Usage: node receiver.js ADDR PORT OUT [EXPECTED_HEADER=VALUE]
'use strict';
const fs = require('fs');
const http = require('http');
const root = require('@opentelemetry/otlp-transformer/build/src/generated/root');

const Req = root.opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest;
const Resp = root.opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceResponse;
const [addr, port, out, expect] = process.argv.slice(2);
const MAX = 1 << 20;

function record(obj) {
  fs.appendFileSync(out, JSON.stringify(obj) + '\n');
}

function refuse(res, why) {
  record({ error: why });
  res.writeHead(400, { 'Content-Type': 'text/plain' });
  res.end(why + '\n');
}

const server = http.createServer((req, res) => {
  const chunks = [];
  let size = 0;
  req.on('data', (c) => {
    size += c.length;
    if (size <= MAX) chunks.push(c);
  });
  req.on('end', () => {
    if (req.method !== 'POST' || req.url !== '/v1/metrics')
      return refuse(res, `unexpected ${req.method} ${req.url}`);
    if (req.headers['content-type'] !== 'application/x-protobuf')
      return refuse(res, `content-type ${req.headers['content-type']}`);
    if (size > MAX) return refuse(res, 'body too large');
    if (expect) {
      const [k, v] = expect.split('=');
      if (req.headers[k.toLowerCase()] !== v) return refuse(res, `header ${k} missing or wrong`);
    }
    const body = Buffer.concat(chunks);
    let msg;
    try {
      msg = Req.decode(body);
    } catch (e) {
      return refuse(res, 'decode: ' + e.message);
    }
    const bad = Req.verify(msg);
    if (bad) return refuse(res, 'verify: ' + bad);
    const again = Buffer.from(Req.encode(msg).finish());
    if (!again.equals(body)) return refuse(res, 're-encoding differs (unknown or misplaced fields)');
    record({
      headers: { 'user-agent': req.headers['user-agent'] || '' },
      request: Req.toObject(msg, { longs: String, enums: String, defaults: false }),
    });
    res.writeHead(200, { 'Content-Type': 'application/x-protobuf' });
    res.end(Buffer.from(Resp.encode(Resp.create({})).finish()));
  });
});
server.listen(Number(port), addr, () => {
  fs.writeFileSync(out + '.ready', 'ready\n');
});
