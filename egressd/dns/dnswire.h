/*
 * dnswire: DNS message parsing and building for the DNS proxy (dns process).
 * Pure functions over caller buffers; no allocation, no I/O.
 */
#ifndef EGRESSD_DNSWIRE_H
#define EGRESSD_DNSWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DNSWIRE_HDR_LEN 12
#define DNSWIRE_MAX_MSG 65535     /* largest DNS message (TCP frame) */
#define DNSWIRE_MAX_NAME_WIRE 255 /* RFC 1035 2.3.4, wire form */
#define DNSWIRE_MAX_NAME 253      /* text form without trailing dot */
#define DNSWIRE_MAX_LABEL 63
#define DNSWIRE_MAX_PTR_HOPS 64    /* compression pointers per name */
#define DNSWIRE_MAX_RRS 256        /* answer RRs handled per upstream reply */
#define DNSWIRE_MAX_CNAME_CHAIN 16 /* CNAME links from the qname; more, or a loop: refused */
#define DNSWIRE_MAX_ADDRS 64       /* A/AAAA addresses kept per reply */
#define DNSWIRE_EDNS_UDP_SIZE 1232 /* advertised in our own OPT RR */
#define DNSWIRE_MAX_QUESTION (DNSWIRE_MAX_NAME_WIRE + 4)

#define DNSWIRE_TYPE_A 1
#define DNSWIRE_TYPE_NS 2
#define DNSWIRE_TYPE_CNAME 5
#define DNSWIRE_TYPE_SOA 6
#define DNSWIRE_TYPE_PTR 12
#define DNSWIRE_TYPE_MX 15
#define DNSWIRE_TYPE_AAAA 28
#define DNSWIRE_TYPE_SRV 33
#define DNSWIRE_TYPE_OPT 41
#define DNSWIRE_CLASS_IN 1

#define DNSWIRE_RCODE_NOERROR 0
#define DNSWIRE_RCODE_FORMERR 1
#define DNSWIRE_RCODE_SERVFAIL 2
#define DNSWIRE_RCODE_NXDOMAIN 3
#define DNSWIRE_RCODE_NOTIMP 4
#define DNSWIRE_RCODE_REFUSED 5

/* The name of a header rcode (0..15), as RFC 1035 and 2136 spell it; "other" past them. */
const char *dnswire_rcode_name(int rcode);

enum dnswire_status {
	DNSWIRE_OK,        /* parsed; *consumed bytes used */
	DNSWIRE_NEED_MORE, /* only from dnswire_tcp_frame: read more bytes */
	DNSWIRE_INVALID,   /* malformed or not acceptable */
	DNSWIRE_TOO_LARGE, /* exceeds a limit or the output buffer */
};

/* A parsed client query. Filled by dnswire_parse_query. */
struct dnswire_query {
	bool hdr_valid;    /* header readable: a FORMERR reply may be sent */
	bool has_question; /* question parsed (false: FORMERR has qdcount 0) */
	uint16_t id;
	uint8_t opcode;
	bool rd;
	bool cd;
	bool has_opt;      /* an OPT RR was present in the additional section */
	uint16_t udp_size; /* client's reply size limit: 512 or its EDNS size */
	uint16_t qtype;
	uint16_t qclass;
	char name[DNSWIRE_MAX_NAME + 1]; /* canonical: lowercase, no final dot */
	size_t name_len;
	uint8_t qname_wire[DNSWIRE_MAX_NAME_WIRE]; /* lowercased wire form */
	size_t qname_wire_len;
	uint8_t question[DNSWIRE_MAX_QUESTION]; /* question as sent (case kept) */
	size_t question_len;
};

/* One address kept from an upstream answer. */
struct dnswire_addr {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	uint32_t ttl;
};

/* Result of dnswire_filter_answer. */
struct dnswire_answer {
	uint8_t rcode;
	bool truncated; /* upstream set TC: reply is header+question with TC */
	size_t naddrs;
	struct dnswire_addr addrs[DNSWIRE_MAX_ADDRS];
	size_t nremoved;  /* A/AAAA dropped by the predicate or off the chain */
	uint32_t min_ttl; /* over kept addresses; 0 if none */
};

/* Predicate on an answer address: true keeps it. */
typedef bool (*dnswire_addr_ok_cb)(int family, const uint8_t *addr, void *arg);

/* Split a TCP stream: a 2-byte length then the message (a view into buf). */
enum dnswire_status dnswire_tcp_frame(const uint8_t *buf, size_t len, const uint8_t **msg,
    size_t *msg_len, size_t *consumed) __attribute__((warn_unused_result));

/* Parse a complete client query (UDP datagram or TCP frame body). */
enum dnswire_status dnswire_parse_query(const uint8_t *pkt, size_t len, struct dnswire_query *q,
    size_t *consumed) __attribute__((warn_unused_result));

/* Build an answerless reply with rcode, echoing id/opcode/RD/question of q. */
int dnswire_build_error(const struct dnswire_query *q, uint8_t rcode, uint8_t *out, size_t cap,
    size_t *out_len) __attribute__((warn_unused_result));

/* Build a fresh upstream query: RD, one question, our OPT RR (no options). */
int dnswire_build_query(uint16_t id, const char *name, uint16_t qtype, uint16_t qclass,
    uint8_t *out, size_t cap, size_t *out_len) __attribute__((warn_unused_result));

/*
 * Parse the upstream reply to the query (id up_id, question of q) and write
 * the filtered reply for the client into out. Only the answer section is
 * kept: records whose owner is on the CNAME chain from the asked name.
 * A CNAME loop is INVALID and a chain longer than DNSWIRE_MAX_CNAME_CHAIN
 * links is TOO_LARGE: the caller answers SERVFAIL.
 * A/AAAA for which ok_cb returns false are removed; authority and
 * additional sections are dropped (an OPT RR of ours is added when the
 * client sent one). If the reply exceeds max_len it becomes header +
 * question with TC set and no addresses.
 */
enum dnswire_status dnswire_filter_answer(const uint8_t *pkt, size_t len, uint16_t up_id,
    const struct dnswire_query *q, dnswire_addr_ok_cb ok_cb, void *arg, size_t max_len,
    uint8_t *out, size_t cap, size_t *out_len, struct dnswire_answer *res)
    __attribute__((warn_unused_result));

/* Printable name of a status (for logs and test messages). */
const char *dnswire_status_str(enum dnswire_status st);

#endif
