/*
 * Fuzz target for vault/tlspeek: any bytes, as a whole and as every
 * shorter prefix the parser could see first; checks the invariants the
 * interceptor relies on (bounded consumption, an SNI that is a clean C
 * string, ALPN views inside the hello, prefix monotonicity).
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

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t consumed = 0, c2;
	enum tlspeek_status st = tlspeek_parse(data, size, &h, &consumed);
	uint8_t alert[TLSPEEK_ALERT_LEN];

	check(st == TLSPEEK_OK || consumed == 0);
	check(consumed <= size);
	if (st == TLSPEEK_OK) {
		check(h.hs_len <= TLSPEEK_MAX_HELLO);
		check(h.sni_len <= TLSPEEK_MAX_HOSTNAME);
		check(strlen(h.sni) == h.sni_len);
		check(h.has_sni == (h.sni_len > 0));
		check(h.alpn_count <= TLSPEEK_MAX_ALPN);
		for (size_t i = 0; i < h.alpn_count; i++)
			check(h.alpn[i].len > 0 && h.alpn[i].ptr >= h.hs &&
			      h.alpn[i].ptr + h.alpn[i].len <= h.hs + h.hs_len);
		/* a prefix of an accepted hello is only ever incomplete */
		if (consumed > 0)
			check(tlspeek_parse(data, consumed - 1, &h, &c2) == TLSPEEK_NEED_MORE);
	} else {
		check(st == TLSPEEK_NEED_MORE || st == TLSPEEK_INVALID || st == TLSPEEK_TOO_LARGE);
		check(st == TLSPEEK_NEED_MORE || tlspeek_reason_str(h.reason) != NULL);
	}
	check(tlspeek_alert_write(alert, sizeof(alert), h.record_version,
	          TLSPEEK_ALERT_UNRECOGNIZED_NAME) == TLSPEEK_ALERT_LEN);
	return 0;
}
