/*
 * icpt_leg: one leg of an intercepted connection as the HTTP relays see
 * it (intercept process): a plaintext input and output buffer, read,
 * write and event callbacks, timeouts and flow control.
 *
 * A native leg runs on its descriptor itself, plain or with TLS directly
 * on it (SSL_read and SSL_write on the socket, no buffer filter stacked on
 * a socket bufferevent): one read(2) per readiness brings every record
 * the socket holds into OpenSSL's read-ahead buffer, and each is decrypted
 * before the next wait; what the relays add to the output goes out at the
 * end of the loop turn that added it, as one write per record (16 KiB),
 * with write interest only on EAGAIN. A wrapped leg forwards to a libevent
 * bufferevent: TLS inside a tunnel through an https:// proxy, where TLS
 * runs over TLS.
 *
 * Callbacks follow the bufferevent conventions (the relays were written
 * against them): the read callback when bytes were added to the input,
 * the write callback when the output drained to empty after a write, the
 * event callback with BEV_EVENT_* flags (CONNECTED once a handshake
 * completes; EOF, ERROR or TIMEOUT with READING or WRITING). A leg freed
 * from inside one of its callbacks is freed once that callback returns.
 */
#ifndef VAULT_ICPT_LEG_H
#define VAULT_ICPT_LEG_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/bufferevent.h>
#include <openssl/ssl.h>

struct event_base;
struct evbuffer;
struct icpt_leg;

typedef void (*icpt_leg_data_cb)(struct icpt_leg *l, void *arg);
typedef void (*icpt_leg_event_cb)(struct icpt_leg *l, short what, void *arg);

enum icpt_leg_mode {
	ICPT_LEG_PLAIN,   /* bytes as they are */
	ICPT_LEG_ACCEPT,  /* TLS, the server's side: the handshake first */
	ICPT_LEG_CONNECT, /* TLS, the client's side: the handshake first */
};

/* Plaintext bytes one read of a native leg brings at most (one TLS record). */
#define ICPT_LEG_READ 16384
/* Bytes one native leg reads per loop turn at most, before others get theirs. */
#define ICPT_LEG_BUDGET (256 * 1024)
/* A trimmed wrapped leg's reads until icpt_leg_max_read(l, 0): a small chain. */
#define ICPT_LEG_TRIM_READ 512
/* Errors kept from a failed TLS leg (icpt_leg_error). */
#define ICPT_LEG_ERRORS 4

/*
 * A native leg on the connected, non-blocking socket fd (taken), with TLS
 * over ssl (taken) unless mode is ICPT_LEG_PLAIN (ssl NULL). Reading and
 * writing are enabled. NULL without memory (fd closed, ssl freed).
 */
struct icpt_leg *icpt_leg_new(struct event_base *base, int fd, SSL *ssl, enum icpt_leg_mode mode)
    __attribute__((warn_unused_result));
/* A leg over bev (taken, freed with the leg), or NULL (bev freed). */
struct icpt_leg *icpt_leg_wrap(struct bufferevent *bev) __attribute__((warn_unused_result));
/* Closes the descriptor (a native leg) or frees the bufferevent. Accepts NULL. */
void icpt_leg_free(struct icpt_leg *l);

/* The plaintext buffers (borrowed, live as long as the leg). */
struct evbuffer *icpt_leg_input(struct icpt_leg *l);
struct evbuffer *icpt_leg_output(struct icpt_leg *l);
/* Add to the output (see icpt_leg_output). 0 or -1. */
int icpt_leg_write(struct icpt_leg *l, const void *data, size_t n);

void icpt_leg_setcb(struct icpt_leg *l, icpt_leg_data_cb readcb, icpt_leg_data_cb writecb,
    icpt_leg_event_cb eventcb, void *arg);
/* EV_READ and/or EV_WRITE: whether the leg reads its socket and writes its output. */
void icpt_leg_enable(struct icpt_leg *l, short what);
void icpt_leg_disable(struct icpt_leg *l, short what);
/* Read and write timeouts in seconds, 0: none (a read resets the read one). */
void icpt_leg_timeouts(struct icpt_leg *l, unsigned rd_s, unsigned wr_s);
/* Stop reading while the input holds high bytes or more; 0: no limit. */
void icpt_leg_read_high(struct icpt_leg *l, size_t high);
/* Bytes one read takes at most (a trimmed leg reads small); 0: the default. */
void icpt_leg_max_read(struct icpt_leg *l, size_t n);

/* The leg's TLS object (borrowed), or NULL: a plain leg. */
SSL *icpt_leg_ssl(const struct icpt_leg *l);
/* The leg's socket, or -1 (a wrapped leg over a filter). */
int icpt_leg_fd(const struct icpt_leg *l);
/*
 * The next OpenSSL error kept from a failure (a fatal alert received or
 * sent, a verification failure), oldest first; 0 when there is none left.
 */
unsigned long icpt_leg_error(struct icpt_leg *l);
/*
 * A finished TLS leg sends its close_notify now (written at once if the
 * socket takes it, never waited for). Nothing on a plain leg.
 */
void icpt_leg_close_notify(struct icpt_leg *l);
/*
 * Give back what an idle leg holds (its TLS record buffers; a wrapped
 * leg's empty input chain, its next reads small until icpt_leg_max_read(l,
 * 0)); nothing when bytes are waiting either way.
 */
void icpt_leg_trim(struct icpt_leg *l);
/*
 * icpt_leg_trim, then a native leg sleeps: its buffers and every event but
 * the read one are freed (about 1 KiB), until its socket is readable, its
 * read timeout ends or any call above wakes it (7 allocations; a call that
 * finds no memory to wake fails the leg, from the loop). Not from inside
 * one of the leg's callbacks (it stays awake).
 */
void icpt_leg_sleep(struct icpt_leg *l);
/* Whether a native leg sleeps (icpt_leg_sleep). */
bool icpt_leg_asleep(const struct icpt_leg *l);
/*
 * Whether anything waits to be read on l: bytes in its input, in OpenSSL's
 * record layer (processed or not), or on its socket, or the socket's end
 * or an error. Without looking at the socket when its reading is off, a
 * leg seems quiet while its peer has sent more. A wrapped leg cannot tell
 * what its filter holds: true.
 */
bool icpt_leg_unread(struct icpt_leg *l);

#endif /* VAULT_ICPT_LEG_H */
