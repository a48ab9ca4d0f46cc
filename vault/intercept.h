/*
 * intercept: the transparent TLS/HTTP interceptor of the worker. It owns
 * the listeners that nft redirects intercepted ports to, checks every
 * connection (original destination, SNI or Host against the policy and the
 * learned addresses), passes through hosts that no binding could apply to,
 * and terminates the others to inject credentials and redact responses.
 * It calls no egressd/ code: the worker hands it an ops table.
 */
#ifndef VAULT_INTERCEPT_H
#define VAULT_INTERCEPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct x509_st;

struct event_base;
struct leaf_cache;
struct vault_snap;
struct intercept;

/* Compiled maxima; the configuration may lower them, never raise them. */
#define INTERCEPT_MAX_CONNS 65536         /* workload connections at once, set explicitly */
#define INTERCEPT_DEFAULT_CONNS 4096      /* ... unless set (both within the descriptors) */
#define INTERCEPT_MAX_BUFFER (256 * 1024) /* bytes queued toward one leg before pausing the other */
#define INTERCEPT_MAX_HELLO_S 10          /* seconds to receive the ClientHello */
#define INTERCEPT_MAX_HEAD_S 30           /* seconds to receive a whole request head */
#define INTERCEPT_MAX_IDLE_S 300          /* seconds without traffic on a leg */
#define INTERCEPT_DEFAULT_UPSTREAM_IDLE 64 /* as nginx's "keepalive 64" */
#define INTERCEPT_MAX_KEEPALIVE_S 300      /* seconds a keep-alive connection waits for a request */
#define INTERCEPT_FD_RESERVE 64            /* descriptors kept for the channel, the API, DNS */
#define INTERCEPT_UP_HEADROOM 64           /* descriptors a set cap leaves for upstreams */
#define INTERCEPT_MAX_CONNECT_S 15         /* seconds to connect and handshake upstream */

/* Counters the interceptor reports through intercept_ops.count. */
enum intercept_metric {
	INTERCEPT_M_ACCEPTED,         /* workload connections accepted */
	INTERCEPT_M_REJECTED,         /* refused by a check (conn_reject) */
	INTERCEPT_M_PASSTHROUGH,      /* spliced without decryption */
	INTERCEPT_M_TERMINATED,       /* TLS terminated (leaf from the sandbox CA) */
	INTERCEPT_M_REQUESTS,         /* HTTP requests relayed on terminated or plain connections */
	INTERCEPT_M_INJECTED,         /* requests that got a credential */
	INTERCEPT_M_REDACTED,         /* secret occurrences masked toward the workload */
	INTERCEPT_M_UPSTREAM_ERR,     /* upstream connect, verify or protocol failures */
	INTERCEPT_M_LIMITED,          /* refused at the connection cap (conn_limit) */
	INTERCEPT_M_RESUMED,          /* workload handshakes that resumed with a ticket */
	INTERCEPT_M_TICKET_REFUSED,   /* tickets presented for another host: full handshake */
	INTERCEPT_M_UPSTREAM_TLS,     /* verified upstream TLS handshakes (terminated) */
	INTERCEPT_M_UPSTREAM_RESUMED, /* of those, sessions resumed */
	INTERCEPT_M_H2,               /* terminated connections speaking HTTP/2 */
	INTERCEPT_M_H2_CALM,          /* HTTP/2 connections ended for abuse (ENHANCE_YOUR_CALM) */
	INTERCEPT_M_REQUESTS_RETRIED, /* safe requests sent again: a kept upstream leg had closed */
	INTERCEPT_M_TRIMMED,          /* connections quiet long enough to give their buffers back */
	INTERCEPT_M_UPSTREAM_REUSED, /* upstream legs a new workload connection took from the pool */
	INTERCEPT_M_COUNT,
};

/* Severity of an intercept_event. */
enum intercept_level {
	INTERCEPT_L_DEBUG,
	INTERCEPT_L_INFO,
	INTERCEPT_L_WARN,
};

/*
 * One audit/log record. Strings are borrowed for the call; values from the
 * network (host, method) are raw and must be escaped by the logger. No field
 * ever holds a secret value.
 */
struct intercept_event {
	enum intercept_level level;
	const char *event;      /* conn_reject, inject, redact, upstream_error, http_reject */
	uint64_t conn;          /* connection id */
	const char *reason;     /* machine-readable reason, or NULL */
	const char *host;       /* SNI or Host, or NULL */
	const char *method;     /* request method, or NULL */
	const char *binding;    /* binding name (inject), or NULL */
	const char *credential; /* credential name (placeholder_unmatched), or NULL */
	int status;             /* HTTP status, or 0 */
	uint64_t bytes;         /* response bytes toward the workload, or 0 */
	uint64_t count;         /* redaction matches, or 0 */
	int family;             /* original destination (AF_INET/AF_INET6), 0 if unknown */
	const uint8_t *addr;    /* 4 or 16 bytes */
	uint16_t port;
};

/* Delivers a marked TCP socket: fd (owned by the callee) or -1 and an errno. */
typedef void (*intercept_socket_cb)(int fd, int err, void *arg);
/* A leaf for the host asked (a new reference, cached already), or NULL: refused. */
typedef void (*intercept_leaf_cb)(struct x509_st *leaf, void *arg);

/* What the interceptor needs from the worker. Every hook is required. */
struct intercept_ops {
	/* Whether the policy allows this canonical host name. */
	bool (*sni_allowed)(void *arg, const char *canon);
	/* Whether addr:port was learned for canon, or is covered by an IP allow rule. */
	bool (*dst_ok)(
	    void *arg, const char *canon, int family, const uint8_t *addr, uint16_t port);
	/* Ask for a marked TCP socket of family; cb runs exactly once, later. 0 or -1. */
	int (*get_upstream_socket)(void *arg, int family, intercept_socket_cb cb, void *cbarg);
	/* The active vault revision with a new reference (vault_snap_unref it), or NULL. */
	struct vault_snap *(*snapshot)(void *arg);
	/* Add n to a counter. */
	void (*count)(void *arg, enum intercept_metric m, uint64_t n);
	/* Write one log line for ev. */
	void (*log)(void *arg, const struct intercept_event *ev);
	/* Whether every allowed TLS host is terminated (terminateAll), not only bound ones. */
	bool (*terminate_all)(void *arg);
	/*
	 * A leaf for a canonical host that is not in the leaf cache, minted by
	 * a process that holds the CA key (the parent); cb runs exactly once,
	 * later. 0 or -1. NULL: the cache mints itself (it holds the CA key).
	 */
	int (*get_leaf)(void *arg, const char *host, intercept_leaf_cb cb, void *cbarg);
};

/* Settings; zero fields take the compiled defaults. */
struct intercept_config {
	uint16_t tls_port;         /* listener of redirected TLS (e.g. 15443) */
	uint16_t plain_port;       /* listener of redirected plain HTTP (e.g. 15080) */
	uint16_t peek_port;        /* listener of other TCP ports of learned addresses; 0: none */
	struct leaf_cache *leaves; /* borrowed, must outlive the interceptor */
	const char *upstream_ca;   /* trust file or directory; NULL or "": system store */
	/* upstream_ca as read before the privilege drop (certs/trust.h); borrowed */
	struct x509_store_st *upstream_store;
	unsigned max_conns; /* also within the descriptors (intercept.c icpt_conn_cap) */
	/*
	 * Descriptors the rest of the process may hold beside the intercept
	 * (other listeners' own connection caps), kept on top of
	 * INTERCEPT_FD_RESERVE.
	 */
	unsigned fd_reserve;
	size_t max_buffer;
	unsigned hello_timeout_s;     /* deadline for the whole ClientHello (not an idle timer) */
	unsigned head_timeout_s;      /* deadline for a whole request head, from its first byte */
	unsigned idle_timeout_s;      /* a leg without traffic */
	unsigned keepalive_timeout_s; /* a keep-alive connection between requests */
	/*
	 * Upstream legs kept open under keep-alive workload connections that
	 * are between requests (HTTP/1.1): past this many, the one idle
	 * longest is closed (close_notify, its session kept for resumption)
	 * and its workload connection reconnects at its next request.
	 */
	unsigned upstream_idle_max;
	unsigned connect_timeout_s;
	/*
	 * A chained HTTP CONNECT proxy (proxy_len 0: none): every upstream
	 * connection goes to it and asks for a tunnel to the original
	 * destination address; proxy_auth (borrowed, or NULL) is sent as
	 * Proxy-Authorization and never logged.
	 */
	struct sockaddr_storage proxy;
	socklen_t proxy_len;
	const char *proxy_auth;
	bool proxy_tls; /* TLS to the proxy first, its certificate for its address or name */
	/*
	 * A proxy given by name (proxy_len 0): its canonical name (the TLS
	 * certificate is verified for it, and it is the SNI) and port; its
	 * addresses come with intercept_set_proxy(). Until they do, every dial
	 * fails: never a direct one.
	 */
	char proxy_name[254];
	uint16_t proxy_port;
	/*
	 * Listening sockets made by the caller (TLS v4, TLS v6, plain v4,
	 * plain v6, peek v4, peek v6), or NULL: the interceptor binds
	 * loopback itself.
	 */
	const int *listen_fds;
	bool no_http2; /* ALPN offers http/1.1 only toward the workload */
};

/*
 * Start the listeners on 127.0.0.1 and ::1 for each port (tls, plain and,
 * when set, peek). ops and arg are
 * borrowed until intercept_free(). Owned, or NULL with err filled.
 */
struct intercept *intercept_new(struct event_base *base, const struct intercept_ops *ops, void *arg,
    const struct intercept_config *cfg, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Addresses of a chained proxy given by name, at most. */
#define INTERCEPT_MAX_PROXY_ADDRS 16

/*
 * A chained proxy given by name: its addresses (n of them, 1 to
 * INTERCEPT_MAX_PROXY_ADDRS, with its port) in place of those in force;
 * new dials take them in turn. Connections already dialled keep theirs.
 * 0, or -1 (no proxy by name, or n out of range) with nothing changed.
 */
int intercept_set_proxy(struct intercept *ic, const struct sockaddr_storage *addrs,
    const socklen_t *lens, size_t n) __attribute__((warn_unused_result));

/*
 * Every session ticket issued so far stops resuming (new keys, no previous
 * one): called when the policy, the vault or the CA changes, so that a
 * ticket is bound to the state it was issued under.
 */
void intercept_tickets_reset(struct intercept *ic);

/*
 * The pooled upstream legs (those closed workload connections left) are
 * closed: called with intercept_tickets_reset, so that no leg outlives
 * the state it was opened under.
 */
void intercept_pool_flush(struct intercept *ic);

/* Close the listeners and every connection. Accepts NULL. */
void intercept_free(struct intercept *ic);

/* True once every listener is bound. */
bool intercept_listening(const struct intercept *ic);

/* The effective connection cap. */
size_t intercept_max_conns(const struct intercept *ic);

/* A constant name of a metric, for exposition. */
const char *intercept_metric_name(enum intercept_metric m);

#endif /* VAULT_INTERCEPT_H */
