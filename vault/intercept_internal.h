/*
 * intercept internals shared with the unit tests: the pure helpers of the
 * interceptor (address and Host checks, request head rewriting).
 */
#ifndef VAULT_INTERCEPT_INTERNAL_H
#define VAULT_INTERCEPT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/name.h"
#include "vault/httpwire.h"

struct evbuffer;
struct vault_snap;

/* Why a connection's original destination is egressd itself (NULL: it is not). */
const char *intercept_self_reason(int family, const uint8_t *addr, uint16_t port, uint16_t tls_port,
    uint16_t plain_port, const uint8_t (*local)[16], const int *local_fam, size_t nlocal);

/*
 * Finds a method-override parameter ("_method", any case, %-encoded or
 * JSON-escaped) in a stream of bytes: as a form parameter name (at the
 * start or after '&' or ';') or as the start of a quoted string (JSON
 * keys, multipart name="..."). Embedded by the caller; zero it to start.
 */
struct intercept_ovr_scan {
	uint8_t fn;     /* form: name bytes matched so far, or INTERCEPT_OVR_NOMATCH */
	uint8_t fpct;   /* form: 0, or 1/2 while reading the hex digits of a %XX */
	uint8_t fhex;   /* form: the %XX byte being read */
	bool fvalue;    /* form: inside a value, not a name */
	uint8_t qn;     /* quoted: bytes matched so far, or INTERCEPT_OVR_NOMATCH */
	uint8_t qstate; /* quoted: 0 outside, 1 inside, 2 after a backslash, 3-6 u-escape digits */
	uint16_t qhex;  /* quoted: the code point of a u-escape being read */
	bool found;     /* a parameter name starting with "_method" was seen */
};
#define INTERCEPT_OVR_NOMATCH 0xff

/* Feed bytes to an override scanner; returns s->found. */
bool intercept_ovr_scan_feed(struct intercept_ovr_scan *s, const uint8_t *p, size_t n);

/*
 * Why a request that matched a binding must not get its credential
 * (NULL: it may): a method or target override in a header or in the
 * query, an encoded body, an Upgrade other than one "websocket" on GET.
 * *text is the reason phrase of the 403.
 */
const char *intercept_request_refusal(const struct httpwire_request *req, const char **text)
    __attribute__((warn_unused_result));

/* Whether a request's Upgrade is anything but one "websocket" on GET. */
bool intercept_upgrade_refused(const struct httpwire_request *req);

/*
 * Why the 101 answering a credentialed WebSocket request is not relayed
 * (NULL: it may be): it switches to something else than websocket, or it
 * negotiates an extension (permessage-deflate would carry a compressed
 * echo of the credential past the redactor; none was offered).
 */
const char *intercept_101_refusal(const struct httpwire_response *r)
    __attribute__((warn_unused_result));

/*
 * Canonicalise a Host field value into out (POLICY_NAME_MAX + 1 bytes): an
 * optional ":port" must be digits and equal dport. 0, or -1 when the value
 * is not a host name (IP literals included) or names another port.
 */
int intercept_host_canon(const uint8_t *val, size_t len, uint16_t dport, char *out)
    __attribute__((warn_unused_result));

/*
 * Write the request head to send upstream into out. With snap and idx (a
 * matched binding), every workload header the binding injects is dropped
 * (all case variants and duplicates), so are the workload's own
 * credentials in the other auth-bearing headers, its routing headers
 * (X-Forwarded-*, Forwarded; docs/vault-requests.md) and
 * Sec-WebSocket-Extensions, Accept-Encoding becomes identity, Range and
 * If-Range are dropped and the binding's headers are appended. The
 * binding's substitutions of the path, query and header values are made
 * (vault/subst.h); a workload credential header holding one of them is
 * kept, so substituted. rechunk (a body substitution follows): the
 * Content-Length is dropped, and the caller adds the framing of the
 * substituted body (icpt_http.c). The hop-by-hop fields of a
 * credentialed request, and of any HTTP/1.1 request that says close, are
 * dropped (intercept_drop_hop_by_hop); upstream such a request asks for
 * nothing, so keep-alive: the workload's close ends its own connection.
 * hdrs is modified (dropped slots get name.ptr NULL; so do the headers
 * whose values were substituted, their bytes wiped and freed once written).
 * scratch holds at least cap bytes. 0 or -1.
 */
int intercept_request_head(const struct httpwire_request *req, struct httpwire_header *hdrs,
    const struct vault_snap *snap, size_t idx, bool inject, bool rechunk, uint8_t *scratch,
    size_t cap, struct evbuffer *out) __attribute__((warn_unused_result));

/*
 * The decoding rules of a credentialed request, for every other request to
 * a host that has a binding: the first Accept-Encoding becomes identity,
 * other copies, Range, If-Range and Sec-WebSocket-Extensions are dropped
 * (name.ptr NULL).
 */
void intercept_request_decodable(struct httpwire_header *hdrs, size_t n);

/*
 * A credentialed request's hop-by-hop fields end at the proxy: Connection
 * (and every field it nominates), Proxy-Connection and Keep-Alive are
 * dropped (name.ptr NULL); Upgrade on an upgrading request and
 * Transfer-Encoding stay.
 */
void intercept_drop_hop_by_hop(const struct httpwire_request *req, struct httpwire_header *hdrs);
/* What the first bytes of a connection on the peek listener are. */
enum intercept_peek {
	INTERCEPT_PEEK_MORE,   /* too few bytes to tell */
	INTERCEPT_PEEK_TLS,    /* a TLS record: the ClientHello checks */
	INTERCEPT_PEEK_HTTP,   /* a token then a space: the Host checks */
	INTERCEPT_PEEK_OPAQUE, /* another protocol: passed through */
};

/*
 * Why a second ClientHello (after a HelloRetryRequest) may not go on
 * (NULL: it may): it must name the host the first one was checked for
 * (host, canonical) and offer no ECH or ESNI. sni and sni_len are its
 * server_name as tlspeek read it; sni NULL: it has none.
 */
const char *intercept_retry_refusal(const char *host, const char *sni, size_t sni_len, bool ech)
    __attribute__((warn_unused_result));

/* Classify the first len bytes of a peek connection. */
enum intercept_peek intercept_peek_classify(const uint8_t *data, size_t len);

/* The status code for a refused request head. */
int intercept_request_error_status(enum httpwire_status st, enum httpwire_error e);

#endif /* VAULT_INTERCEPT_INTERNAL_H */
