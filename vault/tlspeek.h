/*
 * tlspeek: pure parser of the first bytes of a TLS connection (the
 * ClientHello, possibly fragmented over several records), of the first
 * message of the server's answer (ServerHello or HelloRetryRequest) and of
 * the client's records after a HelloRetryRequest up to its second
 * ClientHello; builder of plaintext TLS alert records. No allocation, no
 * I/O.
 */
#ifndef VAULT_TLSPEEK_H
#define VAULT_TLSPEEK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TLSPEEK_MAX_HELLO 16384  /* handshake message bytes, header included */
#define TLSPEEK_MAX_RECORDS 16   /* records the hello may be fragmented into */
#define TLSPEEK_MAX_RECORD 16384 /* plaintext record payload (RFC 8446 5.1) */
#define TLSPEEK_MAX_HOSTNAME 253 /* SNI host_name bytes */
#define TLSPEEK_MAX_LABEL 63     /* one DNS label */
#define TLSPEEK_MAX_ALPN 16      /* ALPN protocols kept; more sets alpn_overflow */
#define TLSPEEK_ALERT_LEN 7      /* bytes of one alert record */
/* Wire bytes of the largest hello: TLSPEEK_MAX_HELLO in TLSPEEK_MAX_RECORDS records. */
#define TLSPEEK_MAX_WIRE (TLSPEEK_MAX_HELLO + 5 * TLSPEEK_MAX_RECORDS)
/* Bytes after which tlspeek_server_first never says NEED_MORE. */
#define TLSPEEK_SERVER_FIRST_MAX (5 * (TLSPEEK_MAX_RECORDS + 1) + 4 + 2 + 32)
/* Record bytes (headers included) skipped before a second ClientHello. */
#define TLSPEEK_MAX_SKIP 16384

enum tlspeek_status {
	TLSPEEK_OK,        /* a complete, well-formed ClientHello */
	TLSPEEK_NEED_MORE, /* a valid prefix: read more and call again with all bytes */
	TLSPEEK_INVALID,   /* not TLS, or a malformed hello: see reason */
	TLSPEEK_TOO_LARGE, /* hello over TLSPEEK_MAX_HELLO or TLSPEEK_MAX_RECORDS */
};

/* Why a hello was refused, for the log line and the choice of alert. */
enum tlspeek_reason {
	TLSPEEK_R_NONE,
	TLSPEEK_R_NOT_TLS,          /* first record is not a TLS handshake record */
	TLSPEEK_R_RECORD,           /* bad record header or length */
	TLSPEEK_R_NOT_HELLO,        /* first handshake message is not a ClientHello */
	TLSPEEK_R_HELLO,            /* malformed ClientHello body */
	TLSPEEK_R_TRAILING,         /* bytes after the ClientHello in its last record */
	TLSPEEK_R_EXTENSIONS,       /* malformed extension block */
	TLSPEEK_R_DUP_EXTENSION,    /* an extension type appears twice */
	TLSPEEK_R_PSK_NOT_LAST,     /* pre_shared_key is not the last extension */
	TLSPEEK_R_SNI_MALFORMED,    /* server_name list lengths inconsistent */
	TLSPEEK_R_SNI_COUNT,        /* not exactly one server_name entry */
	TLSPEEK_R_SNI_TYPE,         /* server_name entry not of type host_name */
	TLSPEEK_R_SNI_NAME,         /* empty, too long, non-LDH, bad label, trailing dot */
	TLSPEEK_R_SNI_IP_LITERAL,   /* an IPv4 literal (RFC 6066 forbids it) */
	TLSPEEK_R_ALPN,             /* malformed ALPN list */
	TLSPEEK_R_TOO_LARGE,        /* over a TLSPEEK_MAX_* limit */
	TLSPEEK_R_NOT_SERVER_HELLO, /* the server's first handshake message is not a ServerHello */
	TLSPEEK_R_SERVER_HELLO,     /* malformed ServerHello (too short, bad version) */
	TLSPEEK_R_BEFORE_RETRY, /* a record before the second ClientHello that may not be there */
};

/* What the server's first message is (tlspeek_server_first). */
enum tlspeek_server {
	TLSPEEK_SERVER_HELLO, /* a ServerHello: no second ClientHello follows */
	TLSPEEK_SERVER_HRR,   /* a HelloRetryRequest: the client sends a second ClientHello */
	TLSPEEK_SERVER_ALERT, /* an alert record: the server refused the hello */
};

/* A view into the hello's own reassembly buffer (struct tlspeek_hello.hs). */
struct tlspeek_view {
	const uint8_t *ptr;
	size_t len;
};

/*
 * What the parser learned. The caller owns it (it may be embedded in a
 * connection); views point into hs[] and live as long as the struct.
 */
struct tlspeek_hello {
	enum tlspeek_reason reason;         /* set when INVALID or TOO_LARGE */
	uint16_t record_version;            /* version field of the first record */
	uint16_t client_version;            /* legacy_version of the ClientHello */
	size_t records;                     /* records the hello occupied */
	bool has_sni;                       /* false: no server_name extension at all */
	char sni[TLSPEEK_MAX_HOSTNAME + 1]; /* host_name, lowercased, NUL-terminated */
	size_t sni_len;
	bool has_alpn;
	bool alpn_overflow; /* more than TLSPEEK_MAX_ALPN protocols offered */
	size_t alpn_count;  /* entries valid in alpn[] */
	struct tlspeek_view alpn[TLSPEEK_MAX_ALPN];
	bool has_ech;        /* encrypted_client_hello (0xfe0d) */
	bool has_esni;       /* obsolete encrypted_server_name (0xffce) */
	bool has_early_data; /* early_data (0x002a): 0-RTT attempted */
	bool has_psk;        /* pre_shared_key (0x0029): resumption attempted */
	size_t hs_len;       /* reassembled handshake bytes in hs[] */
	uint8_t hs[TLSPEEK_MAX_HELLO];
};

/* TLS alert descriptions the interceptor sends (RFC 8446 6). */
enum tlspeek_alert {
	TLSPEEK_ALERT_HANDSHAKE_FAILURE = 40,
	TLSPEEK_ALERT_ILLEGAL_PARAMETER = 47,
	TLSPEEK_ALERT_ACCESS_DENIED = 49,
	TLSPEEK_ALERT_DECODE_ERROR = 50,
	TLSPEEK_ALERT_PROTOCOL_VERSION = 70,
	TLSPEEK_ALERT_INTERNAL_ERROR = 80,
	TLSPEEK_ALERT_UNRECOGNIZED_NAME = 112,
	TLSPEEK_ALERT_NO_APPLICATION_PROTOCOL = 120,
};

/*
 * Parse the ClientHello at the start of buf[0..len). On OK, *consumed is the
 * bytes of the records that carried it. Call again with the whole buffer
 * after NEED_MORE. out is always reset first.
 */
enum tlspeek_status tlspeek_parse(const uint8_t *buf, size_t len, struct tlspeek_hello *out,
    size_t *consumed) __attribute__((warn_unused_result));

/*
 * Parse the body of a server_name extension (as OpenSSL's ClientHello
 * callback hands it over) with the rules tlspeek_parse applies: exactly
 * one host_name entry, a plain LDH name. On TLSPEEK_R_NONE, name (at
 * least TLSPEEK_MAX_HOSTNAME + 1 bytes) holds it lowercased and
 * NUL-terminated and *name_len its length.
 */
enum tlspeek_reason tlspeek_sni_ext(const uint8_t *ext, size_t len, char *name, size_t *name_len)
    __attribute__((warn_unused_result));

/*
 * Classify the first bytes the server sent after the ClientHello: OK with
 * *kind once the first handshake message's version and random are in
 * (or an alert record's header), NEED_MORE, INVALID or TOO_LARGE with
 * *reason (not TLS, another message, or that much spread over more than
 * TLSPEEK_MAX_RECORDS records). A HelloRetryRequest is a ServerHello whose
 * random is SHA-256("HelloRetryRequest") (RFC 8446 4.1.3).
 */
enum tlspeek_status tlspeek_server_first(const uint8_t *buf, size_t len, enum tlspeek_server *kind,
    enum tlspeek_reason *reason) __attribute__((warn_unused_result));

/*
 * Parse the client's bytes after a HelloRetryRequest up to and including
 * its second ClientHello (as tlspeek_parse does the first). Before it may
 * come one change_cipher_spec record (the single byte 1, RFC 8446 D.4)
 * and, when the first hello offered early data (early_data true),
 * application_data records (the rejected 0-RTT data, 4.2.10), at most
 * TLSPEEK_MAX_SKIP bytes in all. *consumed counts those records too.
 */
enum tlspeek_status tlspeek_parse_retry(const uint8_t *buf, size_t len, bool early_data,
    struct tlspeek_hello *out, size_t *consumed) __attribute__((warn_unused_result));

/* Whether the hello offers the ALPN protocol name (exact bytes). */
bool tlspeek_offers_alpn(const struct tlspeek_hello *h, const char *proto);

/* A constant name for a reason, for logs. */
const char *tlspeek_reason_str(enum tlspeek_reason r);

/*
 * The name of an alert by which a TLS client refuses the certificate it
 * was shown (bad_certificate 42 to certificate_unknown 46, unknown_ca 48),
 * or NULL for any other description.
 */
const char *tlspeek_cert_alert_str(unsigned desc);

/*
 * Write one fatal alert record (7 bytes) into buf; record_version 0 means
 * 0x0303. Returns the bytes written, or -1 when cap is too small.
 */
int tlspeek_alert_write(uint8_t *buf, size_t cap, uint16_t record_version, enum tlspeek_alert desc)
    __attribute__((warn_unused_result));

#endif /* VAULT_TLSPEEK_H */
