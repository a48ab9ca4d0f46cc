/*
 * tlspeek: reads the ClientHello that opens an intercepted TLS connection,
 * reassembling it across records, and extracts what the policy decision
 * needs: SNI, ALPN offers, ECH/0-RTT/PSK markers. Run by the worker on
 * untrusted bytes before anything is sent upstream. It must never read past
 * a length it has not checked, allocate, or accept an ambiguous SNI (two
 * names, two extensions, odd bytes): ambiguity is what a bypass is made of.
 */
#include "vault/tlspeek.h"

#include <string.h>

#define TLS_CT_CCS 20
#define TLS_CT_ALERT 21
#define TLS_CT_HANDSHAKE 22
#define TLS_CT_APPDATA 23
#define TLS_HS_CLIENT_HELLO 1
#define TLS_HS_SERVER_HELLO 2
#define TLS_MAX_CIPHERTEXT (TLSPEEK_MAX_RECORD + 256) /* RFC 8446 5.2 */
#define TLS_RECORD_HDR 5
#define TLS_HS_HDR 4
#define TLS_RANDOM_LEN 32
#define TLS_MAX_SESSION_ID 32
#define EXT_SERVER_NAME 0x0000
#define EXT_ALPN 0x0010
#define EXT_PSK 0x0029
#define EXT_EARLY_DATA 0x002a
#define EXT_ECH 0xfe0d
#define EXT_ESNI 0xffce
#define SNI_HOST_NAME 0

/* Bounds-checked reader; every access to hello bytes goes through it. */
struct tlspeek_cur {
	const uint8_t *p;
	size_t len;
	size_t off;
};

static size_t
cur_left(const struct tlspeek_cur *c)
{
	return c->len - c->off;
}

static bool
cur_u8(struct tlspeek_cur *c, uint8_t *v)
{
	if (cur_left(c) < 1)
		return false;
	*v = c->p[c->off++];
	return true;
}

static bool
cur_peek(const struct tlspeek_cur *c, uint8_t *v)
{
	if (cur_left(c) < 1)
		return false;
	*v = c->p[c->off];
	return true;
}

static bool
cur_u16(struct tlspeek_cur *c, uint16_t *v)
{
	if (cur_left(c) < 2)
		return false;
	*v = (uint16_t)(c->p[c->off] << 8 | c->p[c->off + 1]);
	c->off += 2;
	return true;
}

static bool
cur_u24(struct tlspeek_cur *c, uint32_t *v)
{
	if (cur_left(c) < 3)
		return false;
	*v = (uint32_t)c->p[c->off] << 16 | (uint32_t)c->p[c->off + 1] << 8 | c->p[c->off + 2];
	c->off += 3;
	return true;
}

/* Take n bytes as a sub-cursor. */
static bool
cur_sub(struct tlspeek_cur *c, size_t n, struct tlspeek_cur *sub)
{
	if (cur_left(c) < n)
		return false;
	sub->p = c->p + c->off;
	sub->len = n;
	sub->off = 0;
	c->off += n;
	return true;
}

static bool
cur_skip(struct tlspeek_cur *c, size_t n)
{
	struct tlspeek_cur dummy;
	return cur_sub(c, n, &dummy);
}

/* A u8/u16-length-prefixed vector as a sub-cursor. */
static bool
cur_vec8(struct tlspeek_cur *c, struct tlspeek_cur *sub)
{
	uint8_t n;
	return cur_u8(c, &n) && cur_sub(c, n, sub);
}

static bool
cur_vec16(struct tlspeek_cur *c, struct tlspeek_cur *sub)
{
	uint16_t n;
	return cur_u16(c, &n) && cur_sub(c, n, sub);
}

static enum tlspeek_status
fail(struct tlspeek_hello *h, enum tlspeek_status st, enum tlspeek_reason r)
{
	h->reason = r;
	return st;
}

/*
 * host_name must be a plain LDH name: the policy compares names byte for
 * byte, so anything a resolver or a cert matcher could read differently
 * (NUL, '*', ':', '_', trailing dot, IP literal) is refused here.
 */
static enum tlspeek_reason
check_host_name(struct tlspeek_cur *name, char *out, size_t *out_len)
{
	size_t n = cur_left(name), label = 0;
	bool all_numeric = true;
	uint8_t ch;

	if (n == 0 || n > TLSPEEK_MAX_HOSTNAME)
		return TLSPEEK_R_SNI_NAME;
	for (size_t i = 0; i < n; i++) {
		if (!cur_u8(name, &ch))
			return TLSPEEK_R_SNI_NAME;
		if (ch == '.') {
			if (label == 0)
				return TLSPEEK_R_SNI_NAME; /* empty label or trailing dot */
			label = 0;
		} else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '-') {
			all_numeric = false;
			label++;
		} else if (ch >= '0' && ch <= '9') {
			label++;
		} else {
			return TLSPEEK_R_SNI_NAME;
		}
		if (label > TLSPEEK_MAX_LABEL)
			return TLSPEEK_R_SNI_NAME;
		out[i] = (char)((ch >= 'A' && ch <= 'Z') ? ch - 'A' + 'a' : ch);
	}
	if (label == 0)
		return TLSPEEK_R_SNI_NAME;
	if (all_numeric)
		return TLSPEEK_R_SNI_IP_LITERAL;
	out[n] = '\0';
	*out_len = n;
	return TLSPEEK_R_NONE;
}

/* The server_name extension body: one host_name entry, nothing else. */
static enum tlspeek_reason
parse_sni(struct tlspeek_cur *ext, char *out, size_t *out_len)
{
	struct tlspeek_cur list, name;
	uint8_t type;

	if (!cur_vec16(ext, &list) || cur_left(ext) != 0)
		return TLSPEEK_R_SNI_MALFORMED;
	if (cur_left(&list) == 0)
		return TLSPEEK_R_SNI_COUNT;
	if (!cur_u8(&list, &type) || !cur_vec16(&list, &name))
		return TLSPEEK_R_SNI_MALFORMED;
	/* A second entry of any type makes "the" name ambiguous. */
	if (cur_left(&list) != 0)
		return TLSPEEK_R_SNI_COUNT;
	if (type != SNI_HOST_NAME)
		return TLSPEEK_R_SNI_TYPE;
	return check_host_name(&name, out, out_len);
}

/* The same rules on an extension body handed over by OpenSSL. */
enum tlspeek_reason
tlspeek_sni_ext(const uint8_t *ext, size_t len, char *name, size_t *name_len)
{
	struct tlspeek_cur c = {.p = ext, .len = ext == NULL ? 0 : len, .off = 0};
	size_t n = 0;
	enum tlspeek_reason r;

	name[0] = '\0';
	*name_len = 0;
	r = parse_sni(&c, name, &n);
	if (r != TLSPEEK_R_NONE) {
		name[0] = '\0';
		return r;
	}
	*name_len = n;
	return TLSPEEK_R_NONE;
}

static enum tlspeek_reason
parse_alpn(struct tlspeek_cur *ext, struct tlspeek_hello *h)
{
	struct tlspeek_cur list, proto;

	if (!cur_vec16(ext, &list) || cur_left(ext) != 0 || cur_left(&list) == 0)
		return TLSPEEK_R_ALPN;
	while (cur_left(&list) > 0) {
		if (!cur_vec8(&list, &proto) || proto.len == 0)
			return TLSPEEK_R_ALPN;
		if (h->alpn_count == TLSPEEK_MAX_ALPN) {
			h->alpn_overflow = true;
			continue;
		}
		h->alpn[h->alpn_count].ptr = proto.p;
		h->alpn[h->alpn_count].len = proto.len;
		h->alpn_count++;
	}
	return TLSPEEK_R_NONE;
}

static enum tlspeek_reason
parse_extensions(struct tlspeek_cur *c, struct tlspeek_hello *h)
{
	uint8_t seen[65536 / 8];
	struct tlspeek_cur exts, data;
	uint16_t type;
	enum tlspeek_reason r;
	bool psk_seen = false;

	memset(seen, 0, sizeof(seen));
	if (!cur_vec16(c, &exts) || cur_left(c) != 0)
		return TLSPEEK_R_EXTENSIONS;
	while (cur_left(&exts) > 0) {
		if (!cur_u16(&exts, &type) || !cur_vec16(&exts, &data))
			return TLSPEEK_R_EXTENSIONS;
		/* RFC 8446 4.2: duplicates are illegal; they also let two
		 * parsers disagree on which SNI or ALPN counts. */
		if (seen[type >> 3] & (1u << (type & 7)))
			return TLSPEEK_R_DUP_EXTENSION;
		seen[type >> 3] |= (uint8_t)(1u << (type & 7));
		if (psk_seen)
			return TLSPEEK_R_PSK_NOT_LAST;
		switch (type) {
		case EXT_SERVER_NAME:
			h->has_sni = true;
			if ((r = parse_sni(&data, h->sni, &h->sni_len)) != TLSPEEK_R_NONE)
				return r;
			break;
		case EXT_ALPN:
			h->has_alpn = true;
			if ((r = parse_alpn(&data, h)) != TLSPEEK_R_NONE)
				return r;
			break;
		case EXT_ECH:
			h->has_ech = true;
			break;
		case EXT_ESNI:
			h->has_esni = true;
			break;
		case EXT_EARLY_DATA:
			h->has_early_data = true;
			break;
		case EXT_PSK:
			h->has_psk = true;
			psk_seen = true;
			break;
		default:
			break;
		}
	}
	return TLSPEEK_R_NONE;
}

static enum tlspeek_reason
parse_client_hello(struct tlspeek_cur *c, struct tlspeek_hello *h)
{
	struct tlspeek_cur sid, suites, comp;

	if (!cur_u16(c, &h->client_version) || !cur_skip(c, TLS_RANDOM_LEN))
		return TLSPEEK_R_HELLO;
	if (!cur_vec8(c, &sid) || sid.len > TLS_MAX_SESSION_ID)
		return TLSPEEK_R_HELLO;
	if (!cur_vec16(c, &suites) || suites.len < 2 || suites.len % 2 != 0)
		return TLSPEEK_R_HELLO;
	if (!cur_vec8(c, &comp) || comp.len < 1)
		return TLSPEEK_R_HELLO;
	if (h->client_version >> 8 != 3)
		return TLSPEEK_R_HELLO;
	if (cur_left(c) == 0)
		return TLSPEEK_R_NONE; /* no extensions: no SNI */
	return parse_extensions(c, h);
}

/* Reassemble the hello from its records, then parse it. */
enum tlspeek_status
tlspeek_parse(const uint8_t *buf, size_t len, struct tlspeek_hello *out, size_t *consumed)
{
	struct tlspeek_cur in = {.p = buf, .len = len, .off = 0};
	struct tlspeek_cur rec, hs;
	uint8_t ct, hs_type;
	uint16_t ver, rlen;
	uint32_t body_len;
	size_t need = 0; /* handshake bytes wanted, once the header is known */
	enum tlspeek_reason r;

	memset(out, 0, offsetof(struct tlspeek_hello, hs));
	*consumed = 0;
	for (;;) {
		if (cur_left(&in) == 0)
			return TLSPEEK_NEED_MORE;
		/* Judge the record header byte by byte so that non-TLS input is
		 * refused on its first byte, not after a NEED_MORE. */
		if (!cur_u8(&in, &ct))
			return TLSPEEK_NEED_MORE;
		if (ct != TLS_CT_HANDSHAKE)
			return fail(out, TLSPEEK_INVALID,
			    out->records == 0 ? TLSPEEK_R_NOT_TLS : TLSPEEK_R_RECORD);
		if (cur_peek(&in, &ct) && ct != 3)
			return fail(out, TLSPEEK_INVALID, TLSPEEK_R_NOT_TLS);
		if (!cur_u16(&in, &ver) || !cur_u16(&in, &rlen))
			return TLSPEEK_NEED_MORE;
		if (ver > 0x0304 || rlen == 0 || rlen > TLSPEEK_MAX_RECORD)
			return fail(out, TLSPEEK_INVALID, TLSPEEK_R_RECORD);
		if (out->records == 0)
			out->record_version = ver;
		if (++out->records > TLSPEEK_MAX_RECORDS)
			return fail(out, TLSPEEK_TOO_LARGE, TLSPEEK_R_TOO_LARGE);
		if (!cur_sub(&in, rlen, &rec)) {
			/* Partial record: wait, but not beyond the cap. */
			if (out->hs_len + cur_left(&in) > TLSPEEK_MAX_HELLO)
				return fail(out, TLSPEEK_TOO_LARGE, TLSPEEK_R_TOO_LARGE);
			return TLSPEEK_NEED_MORE;
		}
		if (out->hs_len + rlen > TLSPEEK_MAX_HELLO)
			return fail(out, TLSPEEK_TOO_LARGE, TLSPEEK_R_TOO_LARGE);
		memcpy(out->hs + out->hs_len, rec.p, rlen);
		out->hs_len += rlen;
		if (need == 0 && out->hs_len >= TLS_HS_HDR) {
			hs = (struct tlspeek_cur){.p = out->hs, .len = out->hs_len, .off = 0};
			if (!cur_u8(&hs, &hs_type) || !cur_u24(&hs, &body_len))
				return fail(out, TLSPEEK_INVALID, TLSPEEK_R_HELLO);
			if (hs_type != TLS_HS_CLIENT_HELLO)
				return fail(out, TLSPEEK_INVALID, TLSPEEK_R_NOT_HELLO);
			if (body_len > TLSPEEK_MAX_HELLO - TLS_HS_HDR)
				return fail(out, TLSPEEK_TOO_LARGE, TLSPEEK_R_TOO_LARGE);
			need = TLS_HS_HDR + body_len;
		}
		if (need != 0 && out->hs_len >= need)
			break;
	}
	/* The client sends nothing else before the server's reply. */
	if (out->hs_len != need)
		return fail(out, TLSPEEK_INVALID, TLSPEEK_R_TRAILING);
	hs = (struct tlspeek_cur){.p = out->hs + TLS_HS_HDR, .len = need - TLS_HS_HDR, .off = 0};
	if ((r = parse_client_hello(&hs, out)) != TLSPEEK_R_NONE) {
		return fail(out, TLSPEEK_INVALID, r);
	}
	*consumed = in.off;
	return TLSPEEK_OK;
}

/* RFC 8446 4.1.3: the random of a HelloRetryRequest, SHA-256("HelloRetryRequest"). */
static const uint8_t hrr_random[TLS_RANDOM_LEN] = {0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11,
    0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91, 0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e,
    0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c};

/*
 * A record header at the cursor: NEED_MORE until its 5 bytes are in,
 * INVALID on a version that is not 3.x (judged on its first byte) or a
 * length of 0 or over max.
 */
static enum tlspeek_status
record_header(struct tlspeek_cur *in, uint8_t *ct, uint16_t *rlen, size_t max)
{
	uint8_t major;
	uint16_t ver;

	if (!cur_u8(in, ct))
		return TLSPEEK_NEED_MORE;
	if (cur_peek(in, &major) && major != 3)
		return TLSPEEK_INVALID;
	if (!cur_u16(in, &ver) || !cur_u16(in, rlen))
		return TLSPEEK_NEED_MORE;
	if (ver > 0x0304 || *rlen == 0 || *rlen > max)
		return TLSPEEK_INVALID;
	return TLSPEEK_OK;
}

/* The server's first message: ServerHello, HelloRetryRequest or an alert. */
enum tlspeek_status
tlspeek_server_first(
    const uint8_t *buf, size_t len, enum tlspeek_server *kind, enum tlspeek_reason *reason)
{
	struct tlspeek_cur in = {.p = buf, .len = len, .off = 0};
	/* handshake header, legacy_version, random: all a HelloRetryRequest needs */
	uint8_t hs[TLS_HS_HDR + 2 + TLS_RANDOM_LEN];
	size_t have = 0, records = 0, take;
	enum tlspeek_status st;
	bool partial;
	uint16_t rlen;
	uint8_t ct;

	*kind = TLSPEEK_SERVER_HELLO;
	*reason = TLSPEEK_R_NONE;
	while (have < sizeof(hs)) {
		/* Judged on the first byte, as tlspeek_parse does. */
		if (cur_peek(&in, &ct) && ct != TLS_CT_HANDSHAKE &&
		    (ct != TLS_CT_ALERT || records > 0)) {
			*reason = records == 0 ? TLSPEEK_R_NOT_TLS : TLSPEEK_R_RECORD;
			return TLSPEEK_INVALID;
		}
		if ((st = record_header(&in, &ct, &rlen, TLSPEEK_MAX_RECORD)) != TLSPEEK_OK) {
			if (st == TLSPEEK_INVALID)
				*reason = records == 0 ? TLSPEEK_R_NOT_TLS : TLSPEEK_R_RECORD;
			return st;
		}
		if (ct == TLS_CT_ALERT) {
			if (rlen != 2) {
				*reason = TLSPEEK_R_RECORD;
				return TLSPEEK_INVALID;
			}
			*kind = TLSPEEK_SERVER_ALERT;
			return TLSPEEK_OK;
		}
		if (++records > TLSPEEK_MAX_RECORDS) {
			*reason = TLSPEEK_R_TOO_LARGE;
			return TLSPEEK_TOO_LARGE;
		}
		/* Copy what this record holds of the bytes still wanted. */
		take = sizeof(hs) - have;
		if (take > rlen)
			take = rlen;
		partial = cur_left(&in) < take;
		if (partial)
			take = cur_left(&in);
		memcpy(hs + have, in.p + in.off, take);
		have += take;
		if (have > 0 && hs[0] != TLS_HS_SERVER_HELLO) {
			*reason = TLSPEEK_R_NOT_SERVER_HELLO;
			return TLSPEEK_INVALID;
		}
		if (partial)
			return TLSPEEK_NEED_MORE;
		if (have < sizeof(hs))
			in.off += rlen; /* this whole record was taken: on to the next */
	}
	/* body length covers version and random; legacy_version is 3.x */
	if (((uint32_t)hs[1] << 16 | (uint32_t)hs[2] << 8 | hs[3]) < 2 + TLS_RANDOM_LEN ||
	    hs[TLS_HS_HDR] != 3) {
		*reason = TLSPEEK_R_SERVER_HELLO;
		return TLSPEEK_INVALID;
	}
	*kind = memcmp(hs + TLS_HS_HDR + 2, hrr_random, TLS_RANDOM_LEN) == 0 ? TLSPEEK_SERVER_HRR
	                                                                     : TLSPEEK_SERVER_HELLO;
	return TLSPEEK_OK;
}

/* The client's records after a HelloRetryRequest, through its second hello. */
enum tlspeek_status
tlspeek_parse_retry(
    const uint8_t *buf, size_t len, bool early_data, struct tlspeek_hello *out, size_t *consumed)
{
	struct tlspeek_cur in = {.p = buf, .len = len, .off = 0};
	bool ccs = false;
	enum tlspeek_status st;
	uint16_t rlen;
	uint8_t ct, b;

	memset(out, 0, offsetof(struct tlspeek_hello, hs));
	*consumed = 0;
	for (;;) {
		size_t start = in.off;

		if (cur_left(&in) == 0)
			return TLSPEEK_NEED_MORE;
		if (in.p[in.off] == TLS_CT_HANDSHAKE)
			break;
		if ((st = record_header(&in, &ct, &rlen, TLS_MAX_CIPHERTEXT)) != TLSPEEK_OK)
			return st == TLSPEEK_INVALID ? fail(out, st, TLSPEEK_R_RECORD) : st;
		if (ct == TLS_CT_CCS) {
			/* One compatibility change_cipher_spec: the byte 1, once. */
			if (ccs || rlen != 1)
				return fail(out, TLSPEEK_INVALID, TLSPEEK_R_BEFORE_RETRY);
			if (!cur_u8(&in, &b))
				return TLSPEEK_NEED_MORE;
			if (b != 1)
				return fail(out, TLSPEEK_INVALID, TLSPEEK_R_BEFORE_RETRY);
			ccs = true;
		} else if (ct == TLS_CT_APPDATA && early_data) {
			/* 0-RTT data the server skips after its HelloRetryRequest. */
			if (start + 5 + (size_t)rlen > TLSPEEK_MAX_SKIP)
				return fail(out, TLSPEEK_TOO_LARGE, TLSPEEK_R_TOO_LARGE);
			if (!cur_skip(&in, rlen))
				return TLSPEEK_NEED_MORE;
		} else {
			return fail(out, TLSPEEK_INVALID, TLSPEEK_R_BEFORE_RETRY);
		}
		if (in.off > TLSPEEK_MAX_SKIP)
			return fail(out, TLSPEEK_TOO_LARGE, TLSPEEK_R_TOO_LARGE);
	}
	st = tlspeek_parse(in.p + in.off, cur_left(&in), out, consumed);
	if (st == TLSPEEK_OK)
		*consumed += in.off;
	return st;
}

/* Whether the hello offers proto among its (first TLSPEEK_MAX_ALPN) ALPN names. */
bool
tlspeek_offers_alpn(const struct tlspeek_hello *h, const char *proto)
{
	size_t n = strlen(proto);

	for (size_t i = 0; i < h->alpn_count; i++)
		if (h->alpn[i].len == n && memcmp(h->alpn[i].ptr, proto, n) == 0)
			return true;
	return false;
}

/* Constant log name of a reason. */
const char *
tlspeek_reason_str(enum tlspeek_reason r)
{
	switch (r) {
	case TLSPEEK_R_NONE:
		return "none";
	case TLSPEEK_R_NOT_TLS:
		return "not_tls";
	case TLSPEEK_R_RECORD:
		return "bad_record";
	case TLSPEEK_R_NOT_HELLO:
		return "not_client_hello";
	case TLSPEEK_R_HELLO:
		return "bad_client_hello";
	case TLSPEEK_R_TRAILING:
		return "trailing_bytes";
	case TLSPEEK_R_EXTENSIONS:
		return "bad_extensions";
	case TLSPEEK_R_DUP_EXTENSION:
		return "duplicate_extension";
	case TLSPEEK_R_PSK_NOT_LAST:
		return "psk_not_last";
	case TLSPEEK_R_SNI_MALFORMED:
		return "sni_malformed";
	case TLSPEEK_R_SNI_COUNT:
		return "sni_count";
	case TLSPEEK_R_SNI_TYPE:
		return "sni_type";
	case TLSPEEK_R_SNI_NAME:
		return "sni_name";
	case TLSPEEK_R_SNI_IP_LITERAL:
		return "sni_ip_literal";
	case TLSPEEK_R_ALPN:
		return "bad_alpn";
	case TLSPEEK_R_TOO_LARGE:
		return "too_large";
	case TLSPEEK_R_NOT_SERVER_HELLO:
		return "not_server_hello";
	case TLSPEEK_R_SERVER_HELLO:
		return "bad_server_hello";
	case TLSPEEK_R_BEFORE_RETRY:
		return "bad_record_before_retry";
	}
	return "unknown";
}

/* Alerts that say the peer did not accept our certificate (RFC 8446 6.2). */
const char *
tlspeek_cert_alert_str(unsigned desc)
{
	switch (desc) {
	case 42:
		return "bad_certificate";
	case 43:
		return "unsupported_certificate";
	case 44:
		return "certificate_revoked";
	case 45:
		return "certificate_expired";
	case 46:
		return "certificate_unknown";
	case 48:
		return "unknown_ca";
	}
	return NULL;
}

/* Build a fatal alert record. */
int
tlspeek_alert_write(uint8_t *buf, size_t cap, uint16_t record_version, enum tlspeek_alert desc)
{
	if (buf == NULL || cap < TLSPEEK_ALERT_LEN)
		return -1;
	if (record_version == 0)
		record_version = 0x0303;
	buf[0] = 21; /* alert */
	buf[1] = (uint8_t)(record_version >> 8);
	buf[2] = (uint8_t)record_version;
	buf[3] = 0;
	buf[4] = 2;
	buf[5] = 2; /* fatal */
	buf[6] = (uint8_t)desc;
	return TLSPEEK_ALERT_LEN;
}
