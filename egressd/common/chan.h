/*
 * The parent <-> child channels: one SOCK_SEQPACKET socketpair per child,
 * carrying fixed-size messages. Every message starts with a chan_hdr; its
 * total size is fixed per type and checked against a table, and its
 * fields are range checked, before anything dispatches on it. Each channel
 * belongs to one role (enum chan_role), and the parent accepts from it only
 * what that role may send (chan_role_may_send). File descriptors (marked
 * sockets) travel with CHAN_SOCKET_REP by SCM_RIGHTS.
 */
#ifndef EGRESSD_CHAN_H
#define EGRESSD_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum chan_type {
	CHAN_NONE = 0,
	CHAN_SOCKET_REQ, /* dns, intercept -> parent: a marked socket, please */
	CHAN_SOCKET_REP, /* parent -> child: the socket (fd attached) or an errno */
	CHAN_LEARN,      /* dns -> parent (parent -> intercept): a name's address, with a timeout */
	CHAN_POLICY,     /* either way: one chunk of the effective policy (policy_wire) */
	CHAN_RESULT,     /* parent -> child: outcome of a request, by id */
	CHAN_READY,      /* child -> parent: this child serves */
	CHAN_LEAF_REQ,   /* intercept -> parent: a leaf for a host and its public key */
	CHAN_LEAF_REP,   /* parent -> intercept: the leaf (DER) or an errno */
	CHAN_VAULT,      /* either way: one chunk of the active vault (vault_wire) */
	CHAN_ACK,        /* child -> parent: a pushed document or learn batch is in force */
	CHAN_EVENT,      /* dns, intercept, control -> parent -> report: a refusal to report */
	CHAN_CA,    /* parent -> control, intercept: the sandbox CA certificates after a renewal */
	CHAN_NFLOG, /* parent -> dns: a packet the table refused (NFLOG record, unparsed) */
	CHAN_TYPE_MAX,
};

/*
 * The trust levels, one process each (docs/privsep.md). What each may send
 * the parent is chan_role_may_send()'s table; anything else kills it.
 */
enum chan_role {
	CHAN_ROLE_CONTROL, /* the HTTP API and the policy sources: POLICY, VAULT, READY, ACK */
	CHAN_ROLE_DNS, /* the DNS proxy and the kernel's refusals: LEARN, SOCKET_REQ (udp, tcp), READY, ACK, EVENT */
	CHAN_ROLE_INTERCEPT, /* TLS/HTTP and the vault's data path: LEAF_REQ, SOCKET_REQ (tcp), READY, ACK */
	CHAN_ROLE_REPORT, /* deny webhook and OTLP export: SOCKET_REQ (tcp), READY */
	CHAN_ROLE_MAX,
};

/*
 * Ids: a child numbers its requests below CHAN_ID_PARENT and the parent
 * echoes them in its replies; what the parent pushes on its own (the
 * handover, policy, vault and learns) carries ids with CHAN_ID_PARENT set,
 * and a child's CHAN_ACK echoes one of those.
 */
#define CHAN_ID_PARENT 0x80000000u
#define CHAN_ID_HANDOVER (CHAN_ID_PARENT | 1u)

/* Limits of what the channel carries. */
#define CHAN_MAX_TIMEOUT_S (7 * 24 * 3600)
#define CHAN_NAME_LEN 256                 /* a canonical name and its NUL */
#define CHAN_POLICY_CHUNK 8192            /* policy bytes per CHAN_POLICY message */
#define CHAN_MAX_POLICY_BYTES (32u << 20) /* one policy document */
#define CHAN_MAX_VAULT_BYTES (8u << 20)   /* one vault document */
#define CHAN_LEAF_KEY_MAX 128             /* DER SubjectPublicKeyInfo of a P-256 key: 91 */
#define CHAN_LEAF_DER_MAX 4096            /* one leaf certificate */
/* A child's requests awaiting their replies, at most (the parent keeps twice as many replies). */
#define CHAN_MAX_PENDING 4096
#define CHAN_CA_DER_MAX 2048 /* one generated CA certificate: about 450 */
#define CHAN_ERRMSG_LEN 128

struct chan_hdr {
	uint16_t type; /* enum chan_type */
	uint16_t flags;
	uint32_t id; /* request id, echoed in the reply; never 0 */
};

struct chan_socket_req {
	struct chan_hdr hdr;
	int32_t family;   /* AF_INET or AF_INET6 */
	int32_t socktype; /* SOCK_DGRAM or SOCK_STREAM */
};

struct chan_socket_rep {
	struct chan_hdr hdr;
	int32_t err; /* 0, or the errno; an fd is attached iff err == 0 */
};

/*
 * CHAN_LEARN_MORE in hdr.flags: more learn messages follow in the same
 * batch; the last one, without it, is answered. A batch holds at most
 * CHAN_MAX_BATCH messages. The parent checks every one against its own
 * copy of the policy: the name must be allowed on that port scope and the
 * address may not be an inner one.
 *
 * CHAN_LEARN_PROXY: the batch holds the addresses of the chained upstream
 * proxy's name (OPENSANDBOX_EGRESS_UPSTREAM_PROXY given by name), all of
 * them, port 0, from the dns process (which resolves that name itself,
 * never for the workload) and from the parent to the intercept. They
 * replace the proxy's addresses in force; they are never learned for the
 * workload. Every message of a batch carries the flag or none does.
 */
#define CHAN_MAX_BATCH 64
#define CHAN_LEARN_MORE 0x1
#define CHAN_LEARN_PROXY 0x2
#define CHAN_MAX_PROXY_ADDRS 16 /* addresses of the proxy's name kept at most */

struct chan_learn {
	struct chan_hdr hdr;
	uint8_t family; /* AF_INET or AF_INET6 */
	uint8_t pad[3];
	uint8_t addr[16];
	uint16_t port; /* 0: all ports */
	uint16_t pad2;
	uint32_t timeout_s;       /* 1..CHAN_MAX_TIMEOUT_S */
	char name[CHAN_NAME_LEN]; /* the canonical name asked, NUL-terminated */
};

/*
 * The effective policy travels as a policy_wire document cut into chunks
 * of one id: offsets follow each other from 0, CHAN_POLICY_MORE marks all
 * but the last, and the last ends at total. From control it is the policy
 * to apply (answered by one CHAN_RESULT once dns and intercept have it);
 * from the parent it is the policy in force, sent first to every new
 * child (CHAN_ID_HANDOVER; total 0: none yet) and pushed to dns and
 * intercept after every change (acknowledged by CHAN_ACK).
 */
#define CHAN_POLICY_MORE 0x1

/*
 * CHAN_VAULT uses the same chunk layout (struct chan_policy, at most
 * CHAN_MAX_VAULT_BYTES): from control, the vault to make active, answered
 * by one CHAN_RESULT once the intercept holds it; from the parent, the
 * vault in force (total 0: none). Its chunks carry secrets: every
 * receiver wipes them.
 */

struct chan_policy {
	struct chan_hdr hdr;
	uint32_t total;  /* bytes of the whole document, <= CHAN_MAX_POLICY_BYTES */
	uint32_t offset; /* of this chunk */
	uint32_t len;    /* bytes of data used, <= CHAN_POLICY_CHUNK */
	uint32_t pad;
	char data[CHAN_POLICY_CHUNK];
};

struct chan_result {
	struct chan_hdr hdr;
	uint16_t req_type; /* the type of the request answered */
	uint16_t pad;
	int32_t err;               /* 0 on success, else an errno */
	char msg[CHAN_ERRMSG_LEN]; /* NUL-terminated reason; never carries secrets */
};

struct chan_ready {
	struct chan_hdr hdr;
};

/* A child took what the parent pushed under hdr.id (err 0), or refused it. */
struct chan_ack {
	struct chan_hdr hdr;
	int32_t err;
	uint32_t pad;
};

/*
 * No child holds the CA private key: the intercept asks the parent for
 * each leaf it does not have cached, with the public key of its own leaf
 * key. The parent mints only for a canonical name the policy allows and
 * the CA may sign.
 */
struct chan_leaf_req {
	struct chan_hdr hdr;
	char name[CHAN_NAME_LEN]; /* canonical host, NUL-terminated */
	uint16_t key_len;         /* bytes of key used */
	uint16_t pad;
	uint8_t key[CHAN_LEAF_KEY_MAX];
};

struct chan_leaf_rep {
	struct chan_hdr hdr;
	int32_t err;      /* 0, or an errno (and der_len 0) */
	uint32_t der_len; /* bytes of der used */
	uint8_t der[CHAN_LEAF_DER_MAX];
};

/*
 * A refusal, for the deny webhook (docs/api.md). The dns process reports
 * denied names, the intercept refused connections and vault refusals,
 * control nothing yet; the parent forwards each to the report child (parent
 * id), or drops it when that child is absent or its channel is full: an
 * event never waits. name is a canonical name or empty (all NULs) with an
 * address; reason is [a-z0-9_], NUL-padded.
 */
enum chan_event_kind {
	CHAN_EVENT_DNS_DENY = 1, /* a name the policy denies */
	CHAN_EVENT_CONN_DENY,    /* a connection the intercept refused */
	CHAN_EVENT_VAULT_DENY,   /* a request to a bound host the vault refused */
	CHAN_EVENT_KIND_MAX,
};

/* dns reports CHAN_EVENT_DNS_DENY, and CHAN_EVENT_CONN_DENY for the table's refusals (CHAN_NFLOG). */

#define CHAN_REASON_LEN 32

struct chan_event {
	struct chan_hdr hdr;
	uint8_t kind;   /* enum chan_event_kind */
	uint8_t family; /* AF_INET, AF_INET6, or 0 without an address */
	uint16_t port;  /* destination port, 0 if none */
	uint8_t addr[16];
	uint64_t time_s; /* seconds since the epoch, when it happened */
	char name[CHAN_NAME_LEN];
	char reason[CHAN_REASON_LEN];
};

/*
 * The sandbox CA was renewed, or its previous one expired (parent id,
 * acknowledged by CHAN_ACK): the certificate that signs the leaves from
 * now on, and the previous one still trusted during the overlap (prev_len
 * 0: none). Certificates only: the CA private key never leaves the
 * parent, which mints every leaf. Control serves both at GET /ca.pem;
 * the intercept drops the leaves it cached from the previous CA.
 */
struct chan_ca {
	struct chan_hdr hdr;
	uint32_t cur_len;  /* 1..CHAN_CA_DER_MAX bytes of cur used */
	uint32_t prev_len; /* 0..CHAN_CA_DER_MAX bytes of prev used */
	uint8_t cur[CHAN_CA_DER_MAX];
	uint8_t prev[CHAN_CA_DER_MAX];
};

/*
 * A packet a refusing rule of the table logged (NFLOG, docs/nflog.md),
 * from the parent to the dns child, which parses it: the parent reads
 * only the netlink attributes the kernel wrote and passes the packet's
 * first bytes on untouched, so that it parses no workload bytes itself.
 * prefix is the rule's log prefix ([a-z0-9_:], NUL-padded); data holds
 * len bytes of the packet from its network header, the rest zero.
 */
#define CHAN_NFLOG_PREFIX 32
#define CHAN_NFLOG_COPY 128

struct chan_nflog {
	struct chan_hdr hdr;
	uint16_t hwproto; /* the packet's ethertype (0x0800, 0x86dd), host order, or 0 */
	uint16_t pad;
	uint32_t len;    /* bytes of data used, <= CHAN_NFLOG_COPY */
	uint64_t time_s; /* seconds since the epoch, when the parent read it */
	char prefix[CHAN_NFLOG_PREFIX];
	uint8_t data[CHAN_NFLOG_COPY];
};

union chan_msg {
	struct chan_hdr hdr;
	struct chan_socket_req socket_req;
	struct chan_socket_rep socket_rep;
	struct chan_learn learn;
	struct chan_policy policy;
	struct chan_result result;
	struct chan_ready ready;
	struct chan_leaf_req leaf_req;
	struct chan_leaf_rep leaf_rep;
	struct chan_policy vault;
	struct chan_ack ack;
	struct chan_event event;
	struct chan_ca ca;
	struct chan_nflog nflog;
};

enum chan_status {
	CHAN_OK = 0,
	CHAN_AGAIN,   /* nothing to read now */
	CHAN_EOF,     /* the peer closed */
	CHAN_INVALID, /* wrong size, unknown type, bad field: the peer is broken */
	CHAN_FDLOST,  /* a valid socket reply whose descriptor did not fit (EMFILE) */
};

/* Which side receives a message type; the other side must refuse it. */
enum chan_side {
	CHAN_TO_PARENT,
	CHAN_TO_WORKER,
};

/* The fixed size of a message type, or 0 for an unknown type. */
size_t chan_msg_size(unsigned type);

/*
 * Check a received message: size against the table, type known and meant
 * for `side`, id not 0, fields in range. Pure. On failure *why says which
 * check failed (a constant string).
 */
bool chan_validate(const void *buf, size_t len, enum chan_side side, const char **why);

/* A SOCK_SEQPACKET pair, close-on-exec. */
int chan_pair(int sv[2]) __attribute__((warn_unused_result));

/* Send one message (size from the table), with `passfd` attached if >= 0. */
/*
 * Send one message without waiting: -1 with EAGAIN when the channel is
 * full (events are dropped then, never waited for).
 */
int chan_offer(int fd, const void *msg);

int chan_send(int fd, const void *msg, int passfd) __attribute__((warn_unused_result));

/*
 * Send one message (no descriptor), waiting at most timeout_ms while the
 * socket is full (the peer reads as fast as it can; a burst of chunks
 * outruns the socket buffer). 0, or -1 with errno (ETIMEDOUT).
 */
int chan_send_wait(int fd, const void *msg, int timeout_ms) __attribute__((warn_unused_result));

/*
 * Receive one message into *out and validate it for `side`. A passed fd,
 * if any, is returned in *passfd (else -1); an fd that arrives on a
 * message that may not carry one is closed and the message is INVALID.
 */
enum chan_status chan_recv(int fd, union chan_msg *out, enum chan_side side, int *passfd,
    const char **why) __attribute__((warn_unused_result));

const char *chan_type_name(unsigned type);
const char *chan_role_name(enum chan_role role);

/*
 * Whether a child of `role` may send this (validated) message: the type,
 * and for a socket request its socket type (dns: udp or tcp; intercept:
 * tcp; control: none). Pure. The parent kills a child that sends
 * anything else.
 */
bool chan_role_may_send(enum chan_role role, const union chan_msg *m);

/*
 * A chunked document (CHAN_POLICY or CHAN_VAULT) being received. Its
 * buffer is wiped before it is freed (a vault holds secrets).
 */
struct chan_doc {
	char *buf;
	uint32_t total, have, id;
	uint16_t type;
};

enum chan_doc_status {
	CHAN_DOC_MORE,  /* wait for the next chunk */
	CHAN_DOC_DONE,  /* whole: chan_doc_take() */
	CHAN_DOC_NOMEM, /* no room for it: refused, the rest of its chunks are out of sequence */
	CHAN_DOC_BAD,   /* out of sequence or over the type's limit: the sender is broken */
};

/* Feed one validated chunk of m's type (CHAN_POLICY or CHAN_VAULT). */
enum chan_doc_status chan_doc_feed(struct chan_doc *d, const union chan_msg *m);

/* The whole document (owned by the caller; NULL for an empty one) and its length. */
char *chan_doc_take(struct chan_doc *d, size_t *len);

/* Forget (and wipe) a document being received. */
void chan_doc_reset(struct chan_doc *d);

/*
 * Fill *c with the chunk of a document that starts at off (of len bytes,
 * type and id given), flags included; the offset of the next chunk.
 * Done when it equals len.
 */
size_t chan_doc_chunk(
    struct chan_policy *c, unsigned type, uint32_t id, const char *doc, size_t len, size_t off);

/*
 * Send a whole document as chunks of `type` under one id, waiting at
 * most timeout_ms for room on a full socket. An empty document is one
 * empty chunk. 0, or -1 with errno.
 */
int chan_doc_send(int fd, unsigned type, uint32_t id, const char *doc, size_t len, int timeout_ms)
    __attribute__((warn_unused_result));

#endif
