/*
 * Fuzz target for vault/httpwire. The first byte picks the direction
 * (request or response, and HEAD); the rest is parsed as a head, then as
 * the body that head declares. Checks: consumption bounded, chunked
 * payload identical whether fed at once or one byte at a time, a written
 * head re-parses, and the path check terminates on any target.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vault/httpwire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct httpwire_header hdrs[HTTPWIRE_MAX_HEADERS];
static struct httpwire_header hdrs2[HTTPWIRE_MAX_HEADERS];
static uint8_t out[HTTPWIRE_MAX_HEAD_BYTES * 2];

struct acc {
	uint64_t n;
	uint32_t sum;
};

static void
check(bool ok)
{
	if (!ok)
		abort();
}

static void
acc_cb(const uint8_t *d, size_t off, size_t len, void *arg)
{
	struct acc *a = arg;
	for (size_t i = 0; i < len; i++)
		a->sum = a->sum * 31 + d[i];
	a->n += len;
}

/* Decode the body whole and byte by byte; both must agree. */
static void
body(enum httpwire_framing f, uint64_t cl, const uint8_t *p, size_t n)
{
	struct httpwire_body a, b;
	struct acc aa = {0, 0}, ab = {0, 0};
	enum httpwire_status sa, sb = HTTPWIRE_NEED_MORE;
	size_t ca, cb, tb = 0;

	httpwire_body_init(&a, f, cl, 0);
	sa = httpwire_body_feed(&a, p, n, &ca, acc_cb, &aa);
	check(ca <= n);
	httpwire_body_init(&b, f, cl, 0);
	for (size_t i = 0; i < n; i++) {
		sb = httpwire_body_feed(&b, p + i, 1, &cb, acc_cb, &ab);
		tb += cb;
		if (sb != HTTPWIRE_NEED_MORE)
			break;
	}
	if (n == 0 || httpwire_body_done(&b))
		sb = httpwire_body_feed(&b, p, 0, &cb, acc_cb, &ab);
	check(sa == sb);
	check(aa.n == ab.n && aa.sum == ab.sum);
	if (sa == HTTPWIRE_OK)
		check(ca == tb);
	/* EOF ends a body validly only when it is close-delimited or done */
	if (httpwire_body_eof(&a) == HTTPWIRE_OK)
		check(sa == HTTPWIRE_OK || f == HTTPWIRE_FRAME_CLOSE || f == HTTPWIRE_FRAME_TUNNEL);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct httpwire_request req;
	struct httpwire_response resp;
	size_t c = 0, c2, w;

	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	data++;
	size--;
	if ((mode & 1) == 0) {
		enum httpwire_status st =
		    httpwire_parse_request(data, size, &req, hdrs, HTTPWIRE_MAX_HEADERS, &c);
		check(c <= size && (st == HTTPWIRE_OK || c == 0));
		if (st != HTTPWIRE_OK)
			return 0;
		check(req.nheaders <= HTTPWIRE_MAX_HEADERS && req.host.len > 0);
		(void)httpwire_path_is_ambiguous(req.target.ptr, req.target.len);
		body(req.framing, req.content_length, data + c, size - c);
		if (httpwire_head_write(
		        out, sizeof(out), req.start_line, hdrs, req.nheaders, NULL, 0, &w) == 0) {
			check(httpwire_parse_request(out, w, &req, hdrs2, HTTPWIRE_MAX_HEADERS,
			          &c2) != HTTPWIRE_INVALID);
		}
	} else {
		enum httpwire_status st = httpwire_parse_response(
		    data, size, (mode & 2) != 0, &resp, hdrs, HTTPWIRE_MAX_HEADERS, &c);
		check(c <= size && (st == HTTPWIRE_OK || c == 0));
		if (st != HTTPWIRE_OK)
			return 0;
		check(resp.status >= 100 && resp.status <= 599);
		body(resp.framing, resp.content_length, data + c, size - c);
	}
	/* the path check on raw input, whatever it is */
	(void)httpwire_path_is_ambiguous(data, size);
	return 0;
}
