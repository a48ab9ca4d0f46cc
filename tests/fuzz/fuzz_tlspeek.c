/*
 * Fuzz target for vault/tlspeek: any bytes, as a whole and as every
 * shorter prefix the parser could see first; checks the invariants the
 * interceptor relies on (bounded consumption, an SNI that is a clean C
 * string, ALPN views inside the hello, prefix monotonicity). The same
 * bytes go through the server's-first-message classifier (decided within
 * TLSPEEK_SERVER_FIRST_MAX bytes), the second-hello parser (with and
 * without skipped 0-RTT records) and the server_name extension parser.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vault/tlspeek.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tlspeek_hello h;

static void
check(bool ok)
{
	if (!ok)
		abort();
}

/* The checks of an accepted hello. */
static void
check_hello(const struct tlspeek_hello *x)
{
	check(x->hs_len <= TLSPEEK_MAX_HELLO);
	check(x->sni_len <= TLSPEEK_MAX_HOSTNAME);
	check(strlen(x->sni) == x->sni_len);
	check(x->has_sni == (x->sni_len > 0));
	check(x->alpn_count <= TLSPEEK_MAX_ALPN);
	for (size_t i = 0; i < x->alpn_count; i++)
		check(x->alpn[i].len > 0 && x->alpn[i].ptr >= x->hs &&
		      x->alpn[i].ptr + x->alpn[i].len <= x->hs + x->hs_len);
}

/* The other entry points on the same bytes. */
static void
check_others(const uint8_t *data, size_t size)
{
	char name[TLSPEEK_MAX_HOSTNAME + 1];
	enum tlspeek_server kind, k2;
	enum tlspeek_reason r;
	enum tlspeek_status st;
	size_t consumed = 0, n = 0;

	st = tlspeek_server_first(data, size, &kind, &r);
	check(st != TLSPEEK_NEED_MORE || size < TLSPEEK_SERVER_FIRST_MAX);
	check(st == TLSPEEK_OK || st == TLSPEEK_NEED_MORE || tlspeek_reason_str(r) != NULL);
	if (st == TLSPEEK_OK) {
		check(kind == TLSPEEK_SERVER_HELLO || kind == TLSPEEK_SERVER_HRR ||
		      kind == TLSPEEK_SERVER_ALERT);
		/* one byte less is undecided, or the same decision */
		if (size > 0) {
			enum tlspeek_status s2 = tlspeek_server_first(data, size - 1, &k2, &r);
			check(s2 == TLSPEEK_NEED_MORE || (s2 == TLSPEEK_OK && k2 == kind));
		}
	}
	for (int early = 0; early < 2; early++) {
		st = tlspeek_parse_retry(data, size, early == 1, &h, &consumed);
		check(st == TLSPEEK_OK || consumed == 0);
		check(consumed <= size);
		if (st == TLSPEEK_OK)
			check_hello(&h);
	}
	if (tlspeek_sni_ext(data, size, name, &n) == TLSPEEK_R_NONE)
		check(n > 0 && n <= TLSPEEK_MAX_HOSTNAME && strlen(name) == n);
	else
		check(n == 0 && name[0] == '\0');
	(void)tlspeek_cert_alert_str(size > 0 ? data[0] : 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t consumed = 0, c2;
	enum tlspeek_status st = tlspeek_parse(data, size, &h, &consumed);
	uint8_t alert[TLSPEEK_ALERT_LEN];

	check(st == TLSPEEK_OK || consumed == 0);
	check(consumed <= size);
	if (st == TLSPEEK_OK) {
		check_hello(&h);
		/* a prefix of an accepted hello is only ever incomplete */
		if (consumed > 0)
			check(tlspeek_parse(data, consumed - 1, &h, &c2) == TLSPEEK_NEED_MORE);
	} else {
		check(st == TLSPEEK_NEED_MORE || st == TLSPEEK_INVALID || st == TLSPEEK_TOO_LARGE);
		check(st == TLSPEEK_NEED_MORE || tlspeek_reason_str(h.reason) != NULL);
	}
	check(tlspeek_alert_write(alert, sizeof(alert), h.record_version,
	          TLSPEEK_ALERT_UNRECOGNIZED_NAME) == TLSPEEK_ALERT_LEN);
	check_others(data, size);
	return 0;
}
