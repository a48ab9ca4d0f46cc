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

/* Rewrite the request head for upstream (see intercept_internal.h). */
int
intercept_request_head(const struct httpwire_request *req, struct httpwire_header *hdrs,
    const struct vault_snap *snap, size_t idx, bool inject, uint8_t *scratch, size_t cap,
    struct evbuffer *out)
{
	struct httpwire_header extra[1];
	size_t nextra = 0, written;

	if (inject) {
		for (size_t i = 0; i < req->nheaders; i++) {
			struct httpwire_view n = hdrs[i].name;

			if (n.ptr == NULL)
				continue;
			/* The workload must not override or duplicate the credential. */
			if (vault_snap_injects_header(snap, idx, (const char *)n.ptr, n.len) ||
			    httpwire_name_eq(n, "accept-encoding") ||
			    httpwire_name_eq(n, "range") || httpwire_name_eq(n, "if-range"))
				hdrs[i].name.ptr = NULL;
		}
		/* Ask for a body the redactor can read. */
		extra[0].name = (struct httpwire_view){(const uint8_t *)"Accept-Encoding", 15};
		extra[0].value = (struct httpwire_view){(const uint8_t *)"identity", 8};
		nextra = 1;
	}
	if (httpwire_head_write(
	        scratch, cap, req->start_line, hdrs, req->nheaders, extra, nextra, &written) != 0 ||
	    written < 2)
		return -1;
	if (!inject)
		return evbuffer_add(out, scratch, written);
	/* Binding headers go before the blank line. */
	if (evbuffer_add(out, scratch, written - 2) != 0 ||
	    vault_snap_inject(snap, idx, out) != 0 || evbuffer_add(out, "\r\n", 2) != 0)
		return -1;
	return 0;
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
		           httpwire_name_eq(nm, "range") || httpwire_name_eq(nm, "if-range") ||
		           httpwire_name_eq(nm, "sec-websocket-extensions")) {
			hdrs[i].name.ptr = NULL;
		}
	}
}
