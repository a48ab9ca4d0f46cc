/*
 * The control API's answers (control process); see httpreply.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "egressd/control/httpreply.h"

void
http_reply(struct evhttp_request *req, int code, const char *reason, const char *ctype,
    const char *body, size_t len)
{
	struct evbuffer *b = evbuffer_new();
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);

	evhttp_add_header(h, "Content-Type", ctype);
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(h, "Cache-Control", "no-store");
	if (b != NULL)
		evbuffer_add(b, body, len);
	evhttp_send_reply(req, code, reason, b);
	if (b != NULL)
		evbuffer_free(b);
}

/* Plain-text error, OpenSandbox style: the message and a newline. */
void
http_error(struct evhttp_request *req, int code, const char *reason, const char *msg)
{
	char buf[1024];
	int n = snprintf(buf, sizeof(buf), "%s\n", msg);

	http_reply(req, code, reason, "text/plain; charset=utf-8", buf,
	    n < 0                     ? 0
	    : (size_t)n < sizeof(buf) ? (size_t)n
	                              : sizeof(buf) - 1);
}

void
http_json(struct evhttp_request *req, int code, const char *reason, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);

	if (s == NULL) {
		http_error(req, 500, "Internal Server Error", "internal error: encoding");
		return;
	}
	{
		size_t n = strlen(s);
		char *t = malloc(n + 2);
		if (t != NULL) {
			memcpy(t, s, n);
			t[n] = '\n';
			http_reply(req, code, reason, "application/json", t, n + 1);
			free(t);
		} else
			http_error(req, 500, "Internal Server Error", "internal error: memory");
	}
	free(s);
}

/* Read the body (already capped by evhttp) into a NUL-terminated copy. */
char *
http_body(struct evhttp_request *req, size_t *len)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t n = evbuffer_get_length(in);
	char *b = malloc(n + 1);

	if (b == NULL)
		return NULL;
	evbuffer_copyout(in, b, n);
	b[n] = '\0';
	*len = n;
	return b;
}

void
http_allow(struct evhttp_request *req, const char *allow)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
	http_error(req, 405, "Method Not Allowed", "method not allowed");
}
