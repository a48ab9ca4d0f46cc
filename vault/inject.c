/*
 * inject: pure helpers of the interceptor (intercept process): the Host
 * check, the request head rewrite that strips the workload's copies of
 * the injected headers and appends the binding's, and the status code of
 * a refused head. No I/O; unit-tested through intercept_internal.h.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include "certs/leaf.h"
#include "policy/binding.h"
#include "policy/name.h"
#include "vault/httpwire.h"
#include "vault/intercept.h"
#include "vault/intercept_internal.h"
#include "vault/redact.h"
#include "vault/snap.h"
#include "vault/subst.h"
#include "vault/tlspeek.h"
#include "policy/addrclass.h"
#include "vault/icpt_internal.h"

/* ---------------------------------------------------------------- pure helpers */

/* Why the original destination is egressd itself, or NULL. */
const char *
intercept_self_reason(int family, const uint8_t *addr, uint16_t port, uint16_t tls_port,
    uint16_t plain_port, const uint8_t (*local)[16], const int *local_fam, size_t nlocal)
{
	/* Loopback and unspecified in any spelling (policy/addrclass.c). */
	if (addrclass_of(family, addr, NULL) == ADDRCLASS_LOOPBACK)
		return "orig_dst_loopback";
	for (size_t i = 0; i < nlocal; i++) {
		if (local_fam[i] == family &&
		    memcmp(local[i], addr, family == AF_INET ? 4 : 16) == 0)
			return "orig_dst_local";
	}
	/* A redirect loop through a listener port is refused whatever the address. */
	if (port == tls_port || port == plain_port)
		return "orig_dst_listener";
	return NULL;
}

/* Canonical host of a Host value; ":port" must name the original port. */
int
intercept_host_canon(const uint8_t *val, size_t len, uint16_t dport, char *out)
{
	size_t hlen = len, outlen;

	if (len == 0 || val[0] == '[')
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (val[i] == ':') {
			unsigned long p = 0;

			if (i + 1 == len || len - i - 1 > 5)
				return -1;
			for (size_t j = i + 1; j < len; j++) {
				if (val[j] < '0' || val[j] > '9')
					return -1;
				p = p * 10 + (unsigned long)(val[j] - '0');
			}
			if (p != dport)
				return -1;
			hlen = i;
			break;
		}
	}
	if (policy_name_canon(val, hlen, 0, out, &outlen) != POLICY_NAME_OK)
		return -1;
	/* An IPv4 literal has no name to check the policy or a binding with. */
	return 0;
}

/* Status code for a refused request head. */
int
intercept_request_error_status(enum httpwire_status st, enum httpwire_error e)
{
	if (st == HTTPWIRE_TOO_LARGE || e == HTTPWIRE_E_HEAD_TOO_LARGE ||
	    e == HTTPWIRE_E_TOO_MANY_FIELDS)
		return 431;
	switch (e) {
	case HTTPWIRE_E_VERSION:
		return 505;
	case HTTPWIRE_E_TRANSFER_ENCODING:
		return 501;
	case HTTPWIRE_E_EXPECT:
		return 417;
	case HTTPWIRE_E_CONNECT:
		return 405;
	default:
		return 400;
	}
}

/* ---------------------------------------------------------------- credentialed requests */

/*
 * Headers a framework reads as "use another method or path than the
 * request line's": each turns a request the binding allowed (GET /v1/x)
 * into one it did not (DELETE, /admin). Refused, see docs/vault-requests.md.
 */
static const char *const ovr_method_headers[] = {
    "x-http-method-override", /* Google APIs, ASP.NET, Express method-override, Rails apps */
    "x-http-method",          /* OData, ASP.NET Web API, Symfony */
    "x-method-override",      /* Express method-override, IBM, Nancy */
    NULL,
};
static const char *const ovr_target_headers[] = {
    "x-original-url", /* IIS URL rewrite, Symfony (older), Zend: a path other than the line's */
    "x-rewrite-url",  /* IIS, Symfony (older) */
    NULL,
};

/*
 * Auth-bearing headers of the workload, dropped on a credentialed request
 * (besides the binding's own): next to the injected secret the server could
 * authenticate the workload's account instead (the secret then authorises
 * an action in the attacker's account), or reflect the value beside it.
 */
static const char *const cred_headers[] = {
    "authorization",        /* RFC 9110 */
    "proxy-authorization",  /* RFC 9110, hop-by-hop, some origins read it */
    "cookie",               /* a session of another account */
    "x-api-key",            /* AWS API Gateway, Anthropic, many */
    "api-key",              /* Azure OpenAI, others */
    "x-auth-token",         /* OpenStack, Docker registries */
    "x-access-token",       /* various */
    "x-goog-api-key",       /* Google APIs */
    "x-amz-security-token", /* AWS temporary credentials */
    "private-token",        /* GitLab */
    NULL,
};

/*
 * Headers that tell a server (or a proxy in front of it) which host, path
 * prefix, scheme or client the request is "really" for: dropped on a
 * credentialed request, since some upstreams route or check IP allow
 * lists on them, and the binding allowed the Host and path of the line.
 */
static const char *const route_headers[] = {
    "forwarded",          /* RFC 7239 host=, proto=, for= */
    "x-forwarded-host",   /* de facto Forwarded host= */
    "x-forwarded-server", /* Apache mod_proxy */
    "x-forwarded-prefix", /* Spring, Traefik: a path prefix */
    "x-forwarded-proto",  /* de facto Forwarded proto= */
    "x-forwarded-port",   /* de facto */
    "x-forwarded-for",    /* de facto Forwarded for= (IP allow lists of a key) */
    "x-real-ip",          /* nginx */
    "x-client-ip",        /* various */
    "x-host",             /* various */
    NULL,
};

static bool
name_in(struct httpwire_view n, const char *const *list)
{
	for (size_t i = 0; list[i] != NULL; i++)
		if (httpwire_name_eq(n, list[i]))
			return true;
	return false;
}

static int
ovr_hex(uint8_t ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/*
 * One decoded byte of a name against "_method", any case. A match is a
 * name that starts with it: the refusal comes at its last byte, before that
 * byte is sent on, so the server never receives the whole name.
 */
static void
ovr_match(uint8_t *n, unsigned ch, bool *found)
{
	static const char pat[] = "_method";

	if (*n == INTERCEPT_OVR_NOMATCH || *n >= sizeof(pat) - 1)
		return;
	if (ch >= 'A' && ch <= 'Z')
		ch += 'a' - 'A';
	if (ch != (unsigned char)pat[*n]) {
		*n = INTERCEPT_OVR_NOMATCH;
		return;
	}
	if (++*n == sizeof(pat) - 1)
		*found = true;
}

/* application/x-www-form-urlencoded (and query strings): names are %-decoded, '+' is SP. */
static void
ovr_form_byte(struct intercept_ovr_scan *s, uint8_t ch)
{
	int v;

	if (s->fpct > 0) {
		if ((v = ovr_hex(ch)) >= 0) {
			s->fhex = (uint8_t)(s->fhex << 4 | v);
			if (s->fpct++ == 2) {
				s->fpct = 0;
				if (!s->fvalue)
					ovr_match(&s->fn, s->fhex, &s->found);
			}
			return;
		}
		/* A broken escape: no name we look for; the byte is read as usual. */
		s->fpct = 0;
		s->fn = INTERCEPT_OVR_NOMATCH;
	}
	if (ch == '&' || ch == ';') {
		s->fvalue = false;
		s->fn = 0;
		return;
	}
	if (ch == '%') {
		s->fpct = 1;
		s->fhex = 0;
		return;
	}
	if (s->fvalue)
		return;
	if (ch == '=') {
		s->fvalue = true;
		return;
	}
	ovr_match(&s->fn, ch == '+' ? ' ' : ch, &s->found);
}

/* Quoted strings (JSON keys, multipart name="..."), with backslash and u-escapes. */
static void
ovr_quoted_byte(struct intercept_ovr_scan *s, uint8_t ch)
{
	int v;

	switch (s->qstate) {
	case 0:
		if (ch == '"') {
			s->qstate = 1;
			s->qn = 0;
		}
		return;
	case 1:
		if (ch == '"')
			s->qstate = 0;
		else if (ch == '\\')
			s->qstate = 2;
		else
			ovr_match(&s->qn, ch, &s->found);
		return;
	case 2:
		if (ch == 'u') {
			s->qstate = 3;
			s->qhex = 0;
			return;
		}
		s->qstate = 1;
		ovr_match(&s->qn, ch, &s->found);
		return;
	default:
		if ((v = ovr_hex(ch)) < 0) {
			s->qstate = ch == '"' ? 0 : 1;
			s->qn = INTERCEPT_OVR_NOMATCH;
			return;
		}
		s->qhex = (uint16_t)(s->qhex << 4 | v);
		if (++s->qstate == 7) {
			s->qstate = 1;
			ovr_match(&s->qn, s->qhex < 0x80 ? s->qhex : 0, &s->found);
		}
		return;
	}
}

/* Feed an override scanner. */
bool
intercept_ovr_scan_feed(struct intercept_ovr_scan *s, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n && !s->found; i++) {
		ovr_form_byte(s, p[i]);
		ovr_quoted_byte(s, p[i]);
	}
	return s->found;
}

/* Whether a field value is exactly tok (case-insensitive, OWS already trimmed). */
static bool
value_is(struct httpwire_view v, const char *tok)
{
	size_t n = strlen(tok);

	return v.len == n && strncasecmp((const char *)v.ptr, tok, n) == 0;
}

/* Why a credentialed request is refused (see intercept_internal.h). */
const char *
intercept_request_refusal(const struct httpwire_request *req, const char **text)
{
	struct intercept_ovr_scan scan;

	for (size_t i = 0; i < req->nheaders; i++) {
		const struct httpwire_header *h = &req->headers[i];

		if (h->name.ptr == NULL)
			continue;
		if (name_in(h->name, ovr_method_headers)) {
			*text = "method override refused on a credentialed request";
			return "method_override";
		}
		if (name_in(h->name, ovr_target_headers)) {
			*text = "target override refused on a credentialed request";
			return "target_override";
		}
		/* The body scan below cannot see through a content coding. */
		if (httpwire_name_eq(h->name, "content-encoding") &&
		    !value_is(h->value, "identity")) {
			*text = "encoded request body refused on a credentialed request";
			return "request_body_encoded";
		}
	}
	/* Rails, Laravel, Symfony and method-override read _method from the query too. */
	memset(&scan, 0, sizeof(scan));
	for (size_t k = req->path.len; k < req->target.len; k++) {
		if (k == req->path.len)
			continue; /* the '?' */
		if (intercept_ovr_scan_feed(&scan, req->target.ptr + k, 1)) {
			*text = "method override refused on a credentialed request";
			return "method_override";
		}
	}
	if (intercept_upgrade_refused(req)) {
		*text = "upgrade refused on a credentialed request";
		return "upgrade_refused";
	}
	return NULL;
}

/*
 * One upgrade only, to WebSocket (RFC 6455: GET), on every relayed request:
 * h2c, TLS and the rest would carry the connection into a protocol the
 * relay does not read (an h2c connection's streams would pass no check).
 */
bool
intercept_upgrade_refused(const struct httpwire_request *req)
{
	size_t upgrades = 0;
	bool websocket = false;

	if (!req->upgrade)
		return false;
	for (size_t i = 0; i < req->nheaders; i++) {
		const struct httpwire_header *h = &req->headers[i];

		if (h->name.ptr != NULL && httpwire_name_eq(h->name, "upgrade")) {
			upgrades++;
			websocket = value_is(h->value, "websocket");
		}
	}
	return upgrades != 1 || !websocket || req->method.len != 3 ||
	       memcmp(req->method.ptr, "GET", 3) != 0;
}

/* Why a 101 to a credentialed WebSocket request is not relayed. */
const char *
intercept_101_refusal(const struct httpwire_response *r)
{
	size_t upgrades = 0;
	bool websocket = false;

	for (size_t i = 0; i < r->nheaders; i++) {
		const struct httpwire_header *h = &r->headers[i];

		/* We sent no extension offer: any extension answer is unasked for. */
		if (httpwire_name_eq(h->name, "sec-websocket-extensions"))
			return "ws_extension_negotiated";
		if (httpwire_name_eq(h->name, "upgrade")) {
			upgrades++;
			websocket = value_is(h->value, "websocket");
		}
	}
	if (upgrades != 1 || !websocket)
		return "upgrade_mismatch";
	return NULL;
}

/* Whether the list value v (comma separated, OWS) names field n. */
static bool
list_names(struct httpwire_view v, struct httpwire_view n)
{
	size_t i = 0;

	while (i < v.len) {
		size_t a, b;

		while (i < v.len && (v.ptr[i] == ' ' || v.ptr[i] == '\t' || v.ptr[i] == ','))
			i++;
		a = i;
		while (i < v.len && v.ptr[i] != ',')
			i++;
		b = i;
		while (b > a && (v.ptr[b - 1] == ' ' || v.ptr[b - 1] == '\t'))
			b--;
		if (b - a == n.len && b > a &&
		    strncasecmp((const char *)v.ptr + a, (const char *)n.ptr, n.len) == 0)
			return true;
	}
	return false;
}

/*
 * Drop Connection, Proxy-Connection and Keep-Alive, and every field a
 * Connection value nominates; Upgrade stays on a request that upgrades
 * (the relay allowed it), Transfer-Encoding stays (it frames the body).
 */
void
intercept_drop_hop_by_hop(const struct httpwire_request *req, struct httpwire_header *hdrs)
{
	for (size_t i = 0; i < req->nheaders; i++) {
		struct httpwire_view n = hdrs[i].name;

		if (n.ptr == NULL || httpwire_name_eq(n, "connection") ||
		    httpwire_name_eq(n, "transfer-encoding") ||
		    (req->upgrade && httpwire_name_eq(n, "upgrade")))
			continue;
		if (httpwire_name_eq(n, "proxy-connection") || httpwire_name_eq(n, "keep-alive")) {
			hdrs[i].name.ptr = NULL;
			continue;
		}
		for (size_t k = 0; k < req->nheaders; k++)
			if (hdrs[k].name.ptr != NULL &&
			    httpwire_name_eq(hdrs[k].name, "connection") &&
			    list_names(hdrs[k].value, n)) {
				hdrs[i].name.ptr = NULL;
				break;
			}
	}
	for (size_t i = 0; i < req->nheaders; i++)
		if (hdrs[i].name.ptr != NULL && httpwire_name_eq(hdrs[i].name, "connection"))
			hdrs[i].name.ptr = NULL;
}

/*
 * Whether header h holds a placeholder binding idx substitutes in header
 * values (a reserved name, Proxy-Authorization among them, never is).
 */
static bool
holds_header_placeholder(const struct vault_snap *snap, size_t idx, const struct httpwire_header *h)
{
	struct binding_substitution s;
	struct httpwire_view v = h->value;

	if (binding_header_reserved((const char *)h->name.ptr, h->name.len))
		return false;

	for (size_t j = 0; binding_subst_get(vault_snap_bindings(snap), idx, j, &s) == 0; j++)
		if ((s.in & BINDING_IN_HEADER) &&
		    memmem(v.ptr, v.len, s.placeholder, s.len) != NULL)
			return true;
	return false;
}

/* Rewrite the request head for upstream (see intercept_internal.h). */
int
intercept_request_head(const struct httpwire_request *req, struct httpwire_header *hdrs,
    const struct vault_snap *snap, size_t idx, bool inject, bool rechunk, uint8_t *scratch,
    size_t cap, struct evbuffer *out)
{
	struct httpwire_header extra[2];
	struct httpwire_view start = req->start_line;
	struct subst_arena arena;
	size_t nextra = 0, written;
	long nsub = 0;
	int rc;

	arena.n = 0;
	/*
	 * Hop-by-hop fields are the proxy's own (RFC 9110 7.6.1): the
	 * workload's Connection, and every field it nominates, end here, so
	 * no intermediary is told to strip what egressd sends; the Connection
	 * upstream is egressd's. An HTTP/1.1 workload's close ends its own
	 * connection only: upstream the request asks for nothing (keep-alive,
	 * HTTP/1.1's default), so the verified leg can serve the next
	 * connection (icpt_up_release). Any other uncredentialed request goes
	 * as it came.
	 */
	if (inject || (req->version_minor == 1 && !req->keep_alive && !req->upgrade))
		intercept_drop_hop_by_hop(req, hdrs);
	if (inject) {
		for (size_t i = 0; i < req->nheaders; i++) {
			struct httpwire_view n = hdrs[i].name;

			if (n.ptr == NULL)
				continue;
			/*
			 * The workload must not override or duplicate the credential,
			 * nor send its own (unless it holds this binding's placeholder,
			 * which is substituted below), nor offer WebSocket compression
			 * (a compressed echo of the secret is past the redactor).
			 */
			if (vault_snap_injects_header(snap, idx, (const char *)n.ptr, n.len) ||
			    (name_in(n, cred_headers) &&
			        !holds_header_placeholder(snap, idx, &hdrs[i])) ||
			    name_in(n, route_headers) ||
			    httpwire_name_eq(n, "sec-websocket-extensions") ||
			    httpwire_name_eq(n, "accept-encoding") ||
			    httpwire_name_eq(n, "grpc-accept-encoding") ||
			    httpwire_name_eq(n, "range") || httpwire_name_eq(n, "if-range") ||
			    (rechunk && httpwire_name_eq(n, "content-length")))
				hdrs[i].name.ptr = NULL;
		}
		/* Ask for a body the redactor can read. */
		extra[0].name = (struct httpwire_view){(const uint8_t *)"Accept-Encoding", 15};
		extra[0].value = (struct httpwire_view){(const uint8_t *)"identity", 8};
		nextra = 1;
		if (req->upgrade || req->version_minor == 0) {
			const char *v = req->upgrade      ? "upgrade"
			                : req->keep_alive ? "keep-alive"
			                                  : "close";

			extra[1].name = (struct httpwire_view){(const uint8_t *)"Connection", 10};
			extra[1].value = (struct httpwire_view){(const uint8_t *)v, strlen(v)};
			nextra = 2;
		}
		if (binding_subst_count(vault_snap_bindings(snap), idx) > 0 &&
		    (nsub = subst_head(snap, idx, req, hdrs, &start, &arena)) < 0)
			return -1;
	}
	rc = httpwire_head_write(scratch, cap, start, hdrs, req->nheaders, extra, nextra, &written);
	/* A substituted value goes with the arena: no view of it is left in hdrs. */
	for (size_t i = 0; i < req->nheaders && arena.n > 0; i++)
		if (hdrs[i].name.ptr != NULL && subst_arena_holds(&arena, hdrs[i].value.ptr))
			hdrs[i].name.ptr = NULL;
	subst_arena_free(&arena);
	if (rc != 0 || written < 2) {
		if (nsub > 0)
			OPENSSL_cleanse(scratch, cap);
		return -1;
	}
	if (!inject)
		return evbuffer_add(out, scratch, written);
	/* Binding headers go before the blank line. */
	rc = evbuffer_add(out, scratch, written - 2) != 0 ||
	             vault_snap_inject(snap, idx, out) != 0 || evbuffer_add(out, "\r\n", 2) != 0
	         ? -1
	         : 0;
	if (nsub > 0)
		OPENSSL_cleanse(scratch, written); /* it held substituted secrets */
	return rc;
}

/* Make an uncredentialed request to a bound host decodable (see intercept_internal.h). */
void
intercept_request_decodable(struct httpwire_header *hdrs, size_t n)
{
	bool ae = false;

	for (size_t i = 0; i < n; i++) {
		struct httpwire_view nm = hdrs[i].name;

		if (nm.ptr == NULL)
			continue;
		/*
		 * The host may hold a secret it was sent earlier and return it in
		 * any response: never compressed (the redactor cannot see
		 * through; permessage-deflate is the WebSocket form) and never
		 * in pieces (each piece too short to match).
		 */
		if (httpwire_name_eq(nm, "accept-encoding") && !ae) {
			hdrs[i].value = (struct httpwire_view){(const uint8_t *)"identity", 8};
			ae = true;
		} else if (httpwire_name_eq(nm, "accept-encoding") ||
		           httpwire_name_eq(nm, "grpc-accept-encoding") ||
		           httpwire_name_eq(nm, "range") || httpwire_name_eq(nm, "if-range") ||
		           httpwire_name_eq(nm, "sec-websocket-extensions")) {
			hdrs[i].name.ptr = NULL;
		}
	}
}
