/*
 * Internals shared by the interceptor's modules (intercept.c, icpt_*.c):
 * the connection and interceptor structs, their state enums, and the
 * functions one module calls in another. Not for outside vault/.
 */
#ifndef VAULT_ICPT_INTERNAL_H
#define VAULT_ICPT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <openssl/ssl.h>

#include "policy/binding.h"
#include "policy/name.h"
#include "vault/httpwire.h"
#include "vault/icpt_leg.h"
#include "vault/intercept.h"
#include "vault/intercept_internal.h"
#include "vault/redact.h"
#include "vault/tlspeek.h"

/* linux/netfilter_ipv4.h and linux/netfilter_ipv6/ip6_tables.h. */
#define ICPT_SO_ORIGINAL_DST 80
#define ICPT_IP6T_SO_ORIGINAL_DST 80

#define ICPT_DEFAULT_IDLE_S 120
#define ICPT_DEFAULT_HEAD_S 15      /* whole request head, from its first byte */
#define ICPT_DEFAULT_KEEPALIVE_S 60 /* waiting for the next request on keep-alive */
#define ICPT_PEEK_MS 500            /* silence after which a peek connection asks upstream first */
#define ICPT_LIMIT_LOG_S 1          /* at most one conn_limit line per this many seconds */
#define ICPT_DRAIN_POLL_MS 5
#define ICPT_DRAIN_MAX_S 5
#define ICPT_LINGER_MS 500           /* after a drained close: the workload's bytes read away */
#define ICPT_LINGER_MAX (256 * 1024) /* at most this much of them */
#define ICPT_MAX_METHOD 32
#define ICPT_SESS_SLOTS 256       /* upstream TLS sessions kept for resumption */
#define ICPT_TICKET_ROTATE_S 3600 /* the workload-side ticket key's life as the current one */
#define ICPT_SESS_KEY 320         /* "host addr port" */
#define ICPT_LOCAL_TTL_MS 1000    /* how long the list of local addresses is reused */
#define ICPT_MAX_LOCAL 64         /* local addresses checked against the original destination */
#define ICPT_HEAD_SLACK 512       /* room for the rewritten head beyond the workload's */
/* Read high-water mark of the workload leg while a ClientHello is awaited. */
#define ICPT_HELLO_WATERMARK (TLSPEEK_MAX_WIRE + 64)
/* The same after a HelloRetryRequest: records before the second hello too. */
#define ICPT_RETRY_WATERMARK (TLSPEEK_MAX_WIRE + TLSPEEK_MAX_SKIP + 64)
#define ICPT_TRIM_MS 1000 /* between requests this long: the TLS legs give their buffers back */
/* The raw relay of a passed-through connection (icpt_splice.c). */
#define ICPT_RAW_READ (64 * 1024)    /* one read, written at once */
#define ICPT_RAW_BUDGET (256 * 1024) /* bytes one direction moves per loop turn */

/* Connection states (conn_set_state checks the transitions). */
enum icpt_state {
	ICPT_S_PEEK,   /* other port of a learned address: TLS, HTTP or opaque? */
	ICPT_S_HELLO,  /* TLS: reading the ClientHello */
	ICPT_S_SPLICE, /* passthrough: waiting for upstream, then raw bytes both ways */
	ICPT_S_HTTP,   /* terminated TLS or plain HTTP: request/response relay */
	ICPT_S_TUNNEL, /* after 101: raw both ways, upstream->workload redacted */
	ICPT_S_DRAIN,  /* last bytes toward the workload, then close */
	ICPT_S_CLOSED, /* freed on the next loop turn */
};

/*
 * Passthrough after the ClientHello: whether a second one can come. Only
 * a HelloRetryRequest (the server's first message) makes the client send
 * another (RFC 8446 4.1.4), whose SNI could name another host behind the
 * same front: it gets the first one's checks, then bytes flow unparsed.
 */
enum icpt_retry {
	ICPT_RETRY_OFF,    /* no second hello can come: raw bytes both ways */
	ICPT_RETRY_SERVER, /* reading the server's first message; the client's bytes wait */
	ICPT_RETRY_CLIENT, /* HelloRetryRequest relayed: reading the client's second hello */
};

/* Request side of the relay. */
enum icpt_req {
	ICPT_REQ_HEAD, /* waiting for a request head */
	ICPT_REQ_BODY, /* streaming the request body upstream */
	ICPT_REQ_DONE, /* request sent; the next is read after the response */
};

/* Response side of the relay. */
enum icpt_resp {
	ICPT_RESP_IDLE, /* no request outstanding */
	ICPT_RESP_HEAD, /* waiting for a (possibly interim) response head */
	ICPT_RESP_BODY, /* streaming the response body to the workload */
};

/* One ticket key (icpt_tickets.c): its name in the ticket, AES and HMAC keys. */
struct icpt_tkey {
	unsigned char name[16];
	unsigned char aes[32];
	unsigned char hmac[32];
	time_t born; /* CLOCK_MONOTONIC second */
	bool set;
};

/* The current key ([0]) and the previous one ([1], decryption only). */
struct icpt_tickets {
	struct icpt_tkey k[2];
	unsigned rotate_s;
};

int icpt_tickets_init(struct icpt_tickets *t, unsigned rotate_s, time_t now);
/* A new current key once the current one is rotate_s old; the previous one goes. */
void icpt_tickets_rotate(struct icpt_tickets *t, time_t now);
/* The key a ticket names (*old: the previous one, whose tickets are renewed), or NULL. */
const struct icpt_tkey *icpt_tickets_find(
    const struct icpt_tickets *t, const unsigned char *name, bool *old);
void icpt_tickets_wipe(struct icpt_tickets *t);

struct intercept {
	struct event_base *base;
	const struct intercept_ops *ops;
	void *arg;
	struct intercept_config cfg;
	char upstream_ca[PATH_MAX];
	struct evconnlistener *ls[6];
	size_t nls;
	SSL_CTX *srv_ctx;
	SSL_CTX *up_ctx;
	size_t nconns;
	/*
	 * Descriptors: the workload's sockets (nconns), the upstream sockets
	 * connections hold or have asked for (nupfd) and pooled legs (npool)
	 * stay within fd_budget, what RLIMIT_NOFILE leaves past the reserve.
	 */
	size_t nupfd;
	size_t fd_budget;
	time_t limit_logged;     /* CLOCK_MONOTONIC second of the last conn_limit line */
	uint64_t limit_unlogged; /* refusals since that line */
	uint64_t next_id;
	struct icpt_conn *conns;
	struct icpt_conn *dead; /* closed, freed by ev_reap (icpt_reap) */
	struct event *ev_reap;
	bool reap_due; /* ev_reap is active */
	/* Connections between requests that hold an upstream leg, longest idle first. */
	TAILQ_HEAD(, icpt_conn) idle;
	size_t nidle;
	/* Upstream legs left by closed workload connections, oldest first (icpt_up_take). */
	TAILQ_HEAD(icpt_pool_head, icpt_pooled) pool;
	size_t npool;
	/* Every connection between requests (HTTP/1.1), longest quiet first, and its sweep. */
	TAILQ_HEAD(, icpt_conn) quiet;
	struct event *ev_trim;
	time_t trimmed_at;                 /* second of the last malloc_trim */
	bool trim_pending;                 /* buffers freed since */
	uint8_t local[ICPT_MAX_LOCAL][16]; /* the sidecar's own addresses, cached */
	int local_fam[ICPT_MAX_LOCAL];
	size_t nlocal;
	struct timespec local_at; /* when they were read; zero: never */
	/*
	 * The chained proxy (proxy_on): its addresses (the configured one, or
	 * those of its name) and the next one to dial.
	 */
	bool proxy_on;
	struct sockaddr_storage px[INTERCEPT_MAX_PROXY_ADDRS];
	socklen_t pxlen[INTERCEPT_MAX_PROXY_ADDRS];
	size_t npx, pxnext;
	struct icpt_tickets tickets; /* workload-side session tickets */
	struct icpt_sess {
		char key[ICPT_SESS_KEY];
		SSL_SESSION *sess;
	} sess[ICPT_SESS_SLOTS]; /* by exact upstream (name, address, port) */
	struct httpwire_header hdrs[HTTPWIRE_MAX_HEADERS];
	uint8_t scratch[HTTPWIRE_MAX_HEAD_BYTES + ICPT_HEAD_SLACK];
};

/*
 * A verified upstream TLS leg whose workload connection closed between
 * requests, nothing unread: the next connection to exactly the same
 * name, address and port (HTTP/1.1 only) takes it instead of dialling.
 */
struct icpt_pooled {
	TAILQ_ENTRY(icpt_pooled) link;
	struct intercept *ic;
	struct icpt_leg *ul;
	char key[ICPT_SESS_KEY]; /* "host addr port", as the session store's */
};

/* An IPv4 or IPv6 socket address, no larger than those need. */
union icpt_addr {
	struct sockaddr sa;
	struct sockaddr_in sin;
	struct sockaddr_in6 sin6;
};

struct icpt_conn {
	struct intercept *ic;
	struct icpt_conn *prev, *next;
	TAILQ_ENTRY(icpt_conn) idle_link; /* on ic's idle list (idle) */
	bool idle;
	TAILQ_ENTRY(icpt_conn) quiet_link; /* on ic's quiet list (quiet), since quiet_at */
	bool quiet;
	bool reap_later; /* closed while ev_reap was due: freed on its next run */
	bool trimmed;    /* its legs read little until bytes come */
	struct timeval quiet_at;
	uint64_t id;
	enum icpt_state state;
	int sockreqs;       /* socket and leaf requests in flight */
	unsigned upreqs;    /* of them, upstream sockets */
	unsigned upfd;      /* upstream descriptors counted for it in ic->nupfd */
	bool tls;           /* came in on the TLS listener (or peeked as TLS) */
	bool peek;          /* came in on the peek listener: a port that is not intercepted */
	bool probing;       /* peek: a socket was asked for so that a server can speak first */
	bool probe_up;      /* peek: that upstream socket is connected */
	bool terminated;    /* TLS terminated here */
	bool up_asked;      /* upstream socket requested */
	bool up_ready;      /* upstream connected (and verified) */
	bool up_failed;     /* upstream connect or verification failed */
	bool up_served;     /* the leg answered a request: it may have been closed since */
	const char *up_why; /* reason of up_failed */
	bool c_eof, u_eof;
	bool shut_sent;
	bool oom;             /* the redactor failed: the connection must end */
	bool subst_big;       /* a body's substitutions passed SUBST_MAX_GROWTH: 413 */
	bool want_h2;         /* the hello offered h2 (and it is on): ALPN h2 both ways */
	bool h2_checked;      /* the workload's ALPN was looked at */
	struct icpt_h2 *h2;   /* the HTTP/2 relay (icpt_h2.c), or NULL: HTTP/1.1 */
	struct icpt_raw *raw; /* passthrough moved off the bufferevents (icpt_splice.c) */
	int ufd;      /* the upstream socket of a passthrough run raw from the hello (c's) */
	bool ufd_own; /* ufd is set (c is calloc'd: 0 is a descriptor) */

	union icpt_addr dst; /* the original destination (addr, port) */
	socklen_t dstlen;
	/* Through a chained proxy: the callbacks to restore once the tunnel stands. */
	bufferevent_data_cb dial_read;
	bufferevent_event_cb dial_event;
	union icpt_addr pxaddr; /* the proxy address this connection dials */
	socklen_t pxlen;
	int family;
	uint8_t addr[16];
	uint16_t port;
	const char *host; /* canonical SNI, or the first Host on plain; "" (static) until set */

	struct tlspeek_hello *hello; /* HELLO state, and the second hello of ICPT_RETRY_CLIENT */
	enum icpt_retry retry;       /* passthrough of a TLS connection */
	size_t hello_bytes;          /* wire bytes of the peeked ClientHello */
	bool early_data;             /* the peeked hello offered 0-RTT data */
	unsigned hellos;             /* ClientHellos OpenSSL processed (terminated) */
	/*
	 * The workload's socket: peeked (MSG_PEEK, ev_first) while its first
	 * bytes decide the path, so that a terminated connection's TLS runs
	 * on the socket from its first byte; then owned by cl (HTTP) or craw
	 * (passthrough). c's own (closed with it) until then.
	 */
	int cfd;
	struct event *ev_first;    /* PEEK, HELLO: the workload's socket is readable */
	size_t first;              /* bytes of the workload's seen so far (peeked) */
	struct bufferevent *craw;  /* passthrough: the workload's socket */
	struct bufferevent *usock; /* upstream socket while it connects; passthrough: upstream */
	struct icpt_leg *cl;       /* HTTP, TUNNEL: the workload's leg (plain or TLS on cfd) */
	struct icpt_leg *ul;       /* HTTP, TUNNEL: upstream's, once connected (and verified) */
	struct evbuffer *toup;     /* bytes for upstream while it is not ready */
	/*
	 * A safe request's head sent on a served leg, for icpt_up_replay:
	 * replay_len bytes (0: none) in a buffer of replay_cap kept between
	 * requests (wiped when dropped: the head may carry the credential).
	 */
	uint8_t *replay;
	size_t replay_len, replay_cap;
	struct evbuffer *tmp; /* redactor output */

	enum icpt_req req;
	enum icpt_resp resp;
	size_t scanned; /* head bytes already searched for a line end */
	struct httpwire_body reqbody, respbody;
	struct intercept_ovr_scan reqscan; /* credentialed request body: _method */
	bool req_is_head, req_upgrade, req_keep, resp_keep, rechunk;
	bool up_keep; /* the upstream was not asked to close after this request */
	bool credentialed;
	char method[ICPT_MAX_METHOD + 1];
	const char *binding; /* credentialed: its binding's name, in snap (NULL otherwise) */
	int status;
	uint64_t resp_bytes;
	int interim;
	uint64_t head_matches;   /* masked in response heads of this request */
	struct vault_snap *snap; /* of the current request */
	struct redact_stream *rs;
	struct redact_stream *rs_spare; /* the last response's, for the next (freed when trimmed) */
	struct evbuffer *hbuf;          /* a request head's buffer, between requests (idem) */
	struct subst_stream *subst;     /* request body substitution, or NULL */
	struct evbuffer *sbuf;          /* its output, sent as one chunk per read */
	struct evbuffer *shead; /* a Content-Length request's head, held for its new length */

	struct event *ev_drain;
	struct event *ev_deadline; /* hello, peek or request head deadline */
	const char *deadline_why;
	struct event *ev_probe; /* peek: silence timer */
	int drain_polls;
	struct event
	    *ev_linger; /* the workload socket shut for writing, read until EOF (bounded) */
	size_t lingered;
};

/* The outcome of the checks of one request head (icpt_request_verdict). */
struct icpt_verdict {
	struct vault_snap *snap;    /* the revision the request is checked under (a reference) */
	size_t idx;                 /* the binding, when inject */
	bool inject;                /* exactly one binding matched: credentialed */
	bool bound;                 /* the host has a binding */
	struct subst_stream *subst; /* a body substitution, or NULL */
	int status;                 /* of a refusal */
	const char *text;           /* its reason phrase */
	char binding[BINDING_MAX_NAME + 1];
};

/*
 * The checks every relayed request head passes, for the HTTP/1.1 and the
 * HTTP/2 relays alike, host (canonical) already found to be the
 * connection's and c->method set: an Upgrade other than WebSocket, a
 * snapshot, the ambiguous path, exactly one binding or none, the stray
 * placeholders, the rewritten head to send upstream (HTTP/1.1 text) into
 * head, a body substitution (its output into *sbuf, made when needed), the
 * refusals of a credentialed request; counted. NULL, or the refusal reason
 * with v->status and v->text (icpt_verdict_clear then, which zeroes them).
 */
const char *icpt_request_verdict(struct icpt_conn *c, const struct httpwire_request *req,
    size_t headlen, const char *host, struct evbuffer **sbuf, struct evbuffer *head,
    struct icpt_verdict *v) __attribute__((warn_unused_result));
void icpt_verdict_clear(struct icpt_verdict *v);

/*
 * Why a final response (status, fields h[0..n)) is not relayed, NULL when
 * it may be: a content coding on a credentialed request's answer, or from
 * a bound host a coding or a 206 (a stored secret only in a form the
 * redactor reads).
 */
const char *icpt_response_refusal(
    bool credentialed, bool bound, int status, const struct httpwire_header *h, size_t n);
/* The redaction mode of a body with fields h[0..n): SSE or plain body. */
enum redact_mode icpt_redact_mode_of(const struct httpwire_header *h, size_t n);

/* The redact and inject audit lines of one answered request (binding NULL: not credentialed). */
void icpt_audit(struct icpt_conn *c, const char *method, const char *binding, int status,
    uint64_t bytes, uint64_t matches);

/* The HTTP/2 relay (icpt_h2.c). */
bool icpt_h2_negotiated(struct icpt_conn *c);
void icpt_h2_start(struct icpt_conn *c);
void icpt_h2_up_ready(struct icpt_conn *c);
void icpt_h2_upstream(struct icpt_conn *c);
/* The upstream connection is gone: streams on it fail, the rest wait for a new one. */
void icpt_h2_up_lost(struct icpt_conn *c, const char *why);
void icpt_h2_pump(struct icpt_conn *c);
void icpt_h2_free(struct icpt_conn *c);
/* A framing field (e.g. "Transfer-Encoding: chunked\r\n") into a head before its blank line. */
int icpt_head_frame(struct evbuffer *head, const char *field);
/* Content-Length: n into head when whole, else Transfer-Encoding: chunked. 0 or -1. */
int icpt_head_frame_len(struct evbuffer *head, bool whole, size_t n);
/* All of src upstream as one chunk (none when empty), then the last chunk when last. 0 or -1. */
int icpt_chunk_to_upstream(struct icpt_conn *c, struct evbuffer *src, bool last);

/* Defined in one module, called from another. */
void icpt_accept_cb(
    struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg);
void icpt_alert(struct icpt_conn *c, enum tlspeek_alert a);
void icpt_close(struct icpt_conn *c, const char *why);
void icpt_count(struct intercept *ic, enum intercept_metric m, uint64_t n);
/* What a connection's host is until one is set (icpt_set_host): "". */
extern const char icpt_nohost[1];
/* Set c's host (the name is copied); -1 without memory (the host stays as it was). */
int icpt_set_host(struct icpt_conn *c, const char *name);
void icpt_deadline_arm(struct icpt_conn *c, unsigned secs, const char *why);
void icpt_deadline_head(struct icpt_conn *c);
void icpt_deadline_stop(struct icpt_conn *c);
void icpt_drain(struct icpt_conn *c);
/*
 * Connect c->usock to c->dst with readcb and eventcb: directly, or through
 * the chained proxy (CONNECT, its 2xx answer read), in which case eventcb
 * sees BEV_EVENT_CONNECTED only once the tunnel stands. 0, or -1 (eventcb
 * not called).
 */
int icpt_dial(struct icpt_conn *c, bufferevent_data_cb readcb, bufferevent_event_cb eventcb);
/*
 * The family of the socket to ask for: the destination's, or with a
 * chained proxy the next proxy address's (kept for icpt_dial). 0 (logged)
 * when the proxy is given by name and none is known yet: no dial at all.
 */
int icpt_dial_family(struct icpt_conn *c);
/* A chained proxy's address: IPv4 or IPv6 of its exact length (what a connection copies). */
bool icpt_proxy_addr_ok(const struct sockaddr_storage *ss, socklen_t len);
/*
 * The chained proxy's answer at buf[0..len), with the upstream answers'
 * strict parser: its status code (*consumed the head's length), 0 when
 * more bytes are needed, -1 when it is not a valid HTTP/1.x answer head or
 * is longer than the proxy's head limit.
 */
int icpt_proxy_status(const uint8_t *buf, size_t len, size_t *consumed);
/* Free closed c once the callbacks due when it closed have run (and its socket requests). */
void icpt_reap(struct icpt_conn *c);
/* ev_reap's callback (arg: the intercept). */
void icpt_reap_cb(evutil_socket_t fd, short what, void *arg);
/* Session tickets on the server context (icpt_tickets.c). 0, or -1. */
int icpt_tickets_setup(struct intercept *ic);
void icpt_http_client(struct icpt_conn *c);
void icpt_http_error(struct icpt_conn *c, int status, const char *text, const char *reason);
void icpt_http_start(struct icpt_conn *c);
void icpt_http_upstream(struct icpt_conn *c);
/* TCP_NODELAY on a proxied socket: the accepted one, and every upstream dial. */
void icpt_nodelay(int fd);
void icpt_log(struct icpt_conn *c, enum intercept_level lvl, const char *event, const char *reason,
    int status);
void icpt_reject(struct icpt_conn *c, const char *reason);
void icpt_release(struct icpt_conn *c);
int icpt_sess_new_cb(SSL *ssl, SSL_SESSION *sess);
/* Change state if the transition is legal (pure on c->state). */
bool icpt_set_state(struct icpt_conn *c, enum icpt_state s) __attribute__((warn_unused_result));
/* Change state, or log and close the connection: false means stop. */
bool icpt_enter(struct icpt_conn *c, enum icpt_state s) __attribute__((warn_unused_result));
void icpt_splice_event_cb(struct bufferevent *bev, short what, void *arg);
/*
 * Passthrough: a socket bufferevent (craw) takes the workload's socket,
 * with the bytes peeked so far read into its input (reading off). 0, or
 * -1 (the connection closed).
 */
int icpt_first_to_craw(struct icpt_conn *c) __attribute__((warn_unused_result));
void icpt_splice_start(struct icpt_conn *c);
void icpt_raw_free(struct icpt_conn *c);
void icpt_timeouts(struct bufferevent *bev, unsigned rd_s, unsigned wr_s);
/*
 * The socket's bytes are written at once, not once epoll has said the new
 * socket is writable (a passed-through ClientHello, a CONNECT).
 */
void icpt_flush_sock(struct bufferevent *sock);
void icpt_to_upstream(struct icpt_conn *c, struct evbuffer *src, size_t n);
void icpt_up_fail(struct icpt_conn *c, const char *why);
/* Free the upstream leg (close_notify first on a finished TLS leg, so that its session resumes). */
void icpt_up_free(struct icpt_conn *c);
void icpt_upfd_sync(struct icpt_conn *c);
bool icpt_fd_room(struct intercept *ic, const struct icpt_conn *self, size_t n);
size_t icpt_up_pending(struct icpt_conn *c);
/*
 * Ask for c's upstream leg (a pooled one, else a socket within the
 * descriptor budget): NULL, or why not (the caller refuses with it).
 */
const char *icpt_up_start(struct icpt_conn *c);
/*
 * A pooled leg for exactly c's name, address and port made c's (none with
 * anything to read), or false. icpt_up_start tries it first; a request
 * takes it before its head goes, so that the head is kept for sending
 * again as on any leg that answered before (icpt_up_keep_replay).
 */
bool icpt_up_take(struct icpt_conn *c);
/*
 * The idle upstream legs (HTTP/1.1, between requests): c's leg joins the
 * list at a response's end, leaves it when a request comes or c goes;
 * past cfg.upstream_idle_max the longest idle one is closed.
 */
void icpt_up_idle(struct icpt_conn *c);
void icpt_up_busy(struct icpt_conn *c);
/*
 * Between requests (HTTP/1.1): ICPT_TRIM_MS later, the connection gives
 * back its request buffers and its deadline event, and its legs their
 * record buffers and read chains; a native leg then sleeps (icpt_leg_sleep).
 * A request ends it.
 */
void icpt_quiet(struct icpt_conn *c);
void icpt_unquiet(struct icpt_conn *c);
bool icpt_http_buffers(struct icpt_conn *c);
/* Close c's upstream leg between requests: its next request reconnects. */
void icpt_up_drop(struct icpt_conn *c, const char *why);
/* c closes: its leg goes to the pool when it is clean (idle, HTTP/1.1, TLS), else it is freed. */
void icpt_up_release(struct icpt_conn *c);
void icpt_pool_free(struct intercept *ic);
/*
 * Keep a copy of a request's whole head (a safe method, no body) sent on
 * a leg that already answered one: if that leg turns out closed before a
 * byte of the answer, the request goes again on a new one (RFC 9112 9.3.1).
 */
int icpt_up_keep_replay(struct icpt_conn *c, struct evbuffer *head);
/* Drop the kept head (wiped); _free also gives its buffer back. */
void icpt_up_forget_replay(struct icpt_conn *c);
void icpt_up_free_replay(struct icpt_conn *c);

/* OpenSSL's ClientHello callback of the server context (terminated connections). */
int icpt_client_hello_cb(SSL *ssl, int *al, void *arg);

/* A requested socket arrived for c: true when c closed meanwhile (fd closed). */
bool icpt_sock_orphaned(struct icpt_conn *c, int fd);
void icpt_sock_arrive(struct icpt_conn *c, int fd, void (*take)(int, struct icpt_conn *));

#endif /* VAULT_ICPT_INTERNAL_H */
