/*
 * icpt_leg: a leg of an intercepted connection (intercept process), native
 * on its descriptor (plain, or TLS directly on the socket) or wrapped
 * around a bufferevent (TLS inside a tunnel). See icpt_leg.h.
 *
 * A native leg is write-first: what is added to its output is written at
 * the end of the loop turn (one deferred event per leg, so that a turn's
 * additions go out together), and write interest is taken only when the
 * socket refused bytes (EAGAIN). Its read interest changes only when the
 * relays enable or disable reading or the input reaches its high-water
 * mark. TLS reads use OpenSSL's read-ahead: one read(2) takes what the
 * socket holds, and every complete record is decrypted before the next
 * wait, since no readiness would report bytes already in OpenSSL's buffer.
 * It never blocks and never calls back into the relays from inside one of
 * their calls: callbacks run from the loop only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include "vault/icpt_leg.h"

/* What an I/O operation of a native leg returns besides a byte count (> 0) or EOF (0). */
#define LEG_AGAIN (-1) /* nothing now: wait for the same direction */
#define LEG_OTHER (-2) /* TLS needs the other direction first */
#define LEG_ERROR (-3)

/* Work a native leg does at the end of the loop turn. */
#define LEG_D_FLUSH 0x1 /* write the output */
#define LEG_D_READ 0x2  /* read what OpenSSL already holds */
#define LEG_D_SHAKE 0x4 /* start the TLS handshake (the peer's first flight may be in) */

/* How bytes cross a native leg's socket: the transport variants. */
struct icpt_leg_io {
	/* Read at most n bytes into buf. */
	ssize_t (*read)(struct icpt_leg *l, void *buf, size_t n);
	/* Write from the front of out (not drained here). */
	ssize_t (*send)(struct icpt_leg *l, struct evbuffer *out);
	/* Bytes already read from the socket and not yet returned by read. */
	bool (*pending)(const struct icpt_leg *l);
};

struct icpt_leg {
	const struct icpt_leg_io *io; /* native: plain or TLS; NULL: wrapped */
	struct bufferevent *bev;      /* wrapped */
	struct event_base *base;
	int fd;
	SSL *ssl;
	struct evbuffer *in, *out;
	struct event *rd, *wr; /* the socket readable, writable */
	struct event *defer;   /* end-of-turn work (defer_what) */
	/*
	 * The read and write timeouts, on one timer of their own (the I/O
	 * events' interest never changes for them): rd_at is the last read or
	 * when reading began, wr_at the last write or when the socket refused
	 * bytes; the timer, armed for the nearer end, checks them when it fires.
	 */
	struct event *to;
	struct timeval rd_at, wr_at, to_due;
	struct timeval hs_at; /* the handshake began (its bound does not move with its flights) */
	unsigned defer_what;
	icpt_leg_data_cb readcb, writecb;
	icpt_leg_event_cb eventcb;
	void *arg;
	unsigned rd_s, wr_s;
	size_t high;     /* input high-water mark, 0: none */
	size_t max_read; /* one read at most, 0: ICPT_LEG_READ */
	size_t retry;    /* a TLS write to retry with the same length, 0: none */
	unsigned long err[ICPT_LEG_ERRORS];
	unsigned nerr, errpos;
	short enabled;         /* EV_READ, EV_WRITE: what the relays want */
	bool handshaking;      /* TLS: the handshake is not finished */
	bool hs_write;         /* the handshake waits for writability */
	bool read_wants_write; /* SSL_read needs the socket writable */
	bool write_wants_read; /* SSL_write needs the socket readable */
	bool blocked;          /* the socket refused bytes: wait for writability */
	bool wm;               /* reading stopped at the high-water mark */
	bool rd_eof;           /* EOF read: no more reading */
	bool failed;           /* an error reported: no more I/O */
	bool rd_on, wr_on;     /* rd, wr added */
	bool notified;         /* close_notify sent */
	bool asleep;           /* trimmed idle: in, out, wr, defer and to freed (leg_sleep) */
	bool wake_failed;      /* waking found no memory (still asleep): it fails from the loop */
	int busy;              /* in one of the leg's own callbacks */
	bool dead;             /* freed while busy: destroyed when it returns */
};

/* One read's plaintext before it joins an input (the loop is single-threaded). */
static uint8_t icpt_leg_buf[ICPT_LEG_READ];
/* What a leg that could not wake offers as its buffers: empty and frozen (adds fail). */
static struct evbuffer *leg_none;

static bool leg_wake(struct icpt_leg *l);

/* ---------------------------------------------------------------- transports */

static ssize_t
leg_plain_read(struct icpt_leg *l, void *buf, size_t n)
{
	ssize_t r;

	do
		r = recv(l->fd, buf, n, 0);
	while (r < 0 && errno == EINTR);
	if (r >= 0)
		return r;
	return errno == EAGAIN || errno == EWOULDBLOCK ? LEG_AGAIN : LEG_ERROR;
}

/* Every chain of the output in one sendmsg. */
static ssize_t
leg_plain_send(struct icpt_leg *l, struct evbuffer *out)
{
	struct evbuffer_iovec v[16];
	struct iovec iov[16];
	struct msghdr m;
	int n = evbuffer_peek(out, -1, NULL, v, 16);
	ssize_t r;

	if (n > 16)
		n = 16;
	for (int i = 0; i < n; i++) {
		iov[i].iov_base = v[i].iov_base;
		iov[i].iov_len = v[i].iov_len;
	}
	memset(&m, 0, sizeof(m));
	m.msg_iov = iov;
	m.msg_iovlen = (size_t)n;
	do
		r = sendmsg(l->fd, &m, MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	if (r >= 0)
		return r;
	return errno == EAGAIN || errno == EWOULDBLOCK ? LEG_AGAIN : LEG_ERROR;
}

static bool
leg_plain_pending(const struct icpt_leg *l)
{
	(void)l;
	return false;
}

/* Keep the OpenSSL errors of a failure (what icpt_leg_error returns), and clear the queue. */
static void
leg_keep_errors(struct icpt_leg *l)
{
	unsigned long e;

	while ((e = ERR_get_error()) != 0) {
		if (l->nerr < ICPT_LEG_ERRORS)
			l->err[l->nerr++] = e;
	}
}

/*
 * The outcome of an SSL call that returned r <= 0, want the SSL_ERROR_WANT_
 * of its own direction (the other one is LEG_OTHER). An EOF without
 * close_notify (OpenSSL 3 reports it as unexpected_eof) is an EOF, as a
 * TCP FIN is on a plain leg: a close-delimited body ends there, and the
 * relays decide whether the body was whole. A reset is an error.
 */
static ssize_t
leg_tls_outcome(struct icpt_leg *l, int r, int want)
{
	int e = SSL_get_error(l->ssl, r);
	unsigned long top;

	switch (e) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return e == want ? LEG_AGAIN : LEG_OTHER;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	case SSL_ERROR_SYSCALL:
		if (r == 0 && ERR_peek_error() == 0)
			return 0;
		leg_keep_errors(l);
		return LEG_ERROR;
	case SSL_ERROR_SSL:
		top = ERR_peek_error();
		if (ERR_GET_LIB(top) == ERR_LIB_SSL &&
		    ERR_GET_REASON(top) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
			ERR_clear_error();
			return 0;
		}
		leg_keep_errors(l);
		return LEG_ERROR;
	default:
		leg_keep_errors(l);
		return LEG_ERROR;
	}
}

/* Stale errors (another object's) would make SSL_get_error misreport this one's. */
static void
leg_tls_clear(void)
{
	if (ERR_peek_error() != 0)
		ERR_clear_error();
}

static ssize_t
leg_tls_read(struct icpt_leg *l, void *buf, size_t n)
{
	int r;

	leg_tls_clear();
	r = SSL_read(l->ssl, buf, (int)n);
	/* LEG_OTHER: a KeyUpdate to answer, say, waits for the socket to take bytes. */
	return r > 0 ? r : leg_tls_outcome(l, r, SSL_ERROR_WANT_READ);
}

/*
 * One record: at most ICPT_LEG_READ bytes of the output, from its first
 * chain when they are contiguous there, else copied out (no allocation).
 * A write that OpenSSL could not finish is retried with the same length.
 */
static ssize_t
leg_tls_send(struct icpt_leg *l, struct evbuffer *out)
{
	size_t len = evbuffer_get_length(out), n = l->retry != 0 ? l->retry : len;
	struct evbuffer_iovec v;
	const void *p;
	int r;
	ssize_t o;

	if (n > ICPT_LEG_READ)
		n = ICPT_LEG_READ;
	if (evbuffer_peek(out, (ssize_t)n, NULL, &v, 1) >= 1 && v.iov_len >= n) {
		p = v.iov_base;
	} else {
		if (evbuffer_copyout(out, icpt_leg_buf, n) != (ssize_t)n)
			return LEG_ERROR;
		p = icpt_leg_buf;
	}
	leg_tls_clear();
	r = SSL_write(l->ssl, p, (int)n);
	if (r > 0) {
		l->retry = 0;
		return r;
	}
	o = leg_tls_outcome(l, r, SSL_ERROR_WANT_WRITE);
	if (o == LEG_AGAIN || o == LEG_OTHER)
		l->retry = n;
	return o == 0 ? LEG_ERROR : o; /* the peer's close_notify: nothing more can be sent */
}

static bool
leg_tls_pending(const struct icpt_leg *l)
{
	return SSL_has_pending(l->ssl) == 1;
}

static const struct icpt_leg_io icpt_leg_plain = {
    .read = leg_plain_read,
    .send = leg_plain_send,
    .pending = leg_plain_pending,
};

static const struct icpt_leg_io icpt_leg_tls = {
    .read = leg_tls_read,
    .send = leg_tls_send,
    .pending = leg_tls_pending,
};

/* ---------------------------------------------------------------- native */

/* The parts an idle leg gives back when it sleeps (leg_sleep); NULL ones are skipped. */
static void
leg_parts_free(struct icpt_leg *l)
{
	if (l->wr != NULL)
		event_free(l->wr);
	if (l->defer != NULL)
		event_free(l->defer);
	if (l->to != NULL)
		event_free(l->to);
	if (l->in != NULL)
		evbuffer_free(l->in);
	if (l->out != NULL)
		evbuffer_free(l->out);
	l->wr = l->defer = l->to = NULL;
	l->in = l->out = NULL;
}

static void
leg_destroy(struct icpt_leg *l)
{
	if (l->rd != NULL)
		event_free(l->rd);
	leg_parts_free(l);
	SSL_free(l->ssl);
	if (l->fd >= 0)
		close(l->fd);
	free(l);
}

/* Leaving one of the leg's own callbacks: a free asked for meanwhile happens now. */
static bool
leg_unbusy(struct icpt_leg *l)
{
	if (--l->busy > 0 || !l->dead)
		return !l->dead;
	leg_destroy(l);
	return false;
}

static void
leg_schedule(struct icpt_leg *l, unsigned what)
{
	if (l->failed || l->dead || l->defer == NULL) /* asleep: nothing is due */
		return;
	if (l->defer_what == 0)
		event_active(l->defer, EV_TIMEOUT, 0);
	l->defer_what |= what;
}

/* When a timeout of s seconds counted from at ends. */
static struct timeval
leg_due(const struct timeval *at, unsigned s)
{
	struct timeval d = {(time_t)s, 0}, r;

	timeradd(at, &d, &r);
	return r;
}

/* A handshake is bounded by the shorter timeout set, from its start (hs_at). */
static unsigned
leg_hs_s(const struct icpt_leg *l)
{
	if (l->rd_s == 0 || (l->wr_s != 0 && l->wr_s < l->rd_s))
		return l->wr_s;
	return l->rd_s;
}

/*
 * The timer for the nearer of the timeouts in force, unless it is already
 * set for that time or earlier (a read only moves rd_at: the timer, when
 * it fires early, sets itself again for the rest).
 */
static void
leg_timer(struct icpt_leg *l)
{
	struct timeval due = {0, 0}, now, wait;
	bool any = false;

	if (l->to == NULL)
		return; /* asleep: the read event carries the read timeout */
	if (l->rd_on && l->rd_s != 0 && !l->handshaking) {
		due = leg_due(&l->rd_at, l->rd_s);
		any = true;
	}
	if (l->wr_on && l->wr_s != 0) {
		struct timeval w = leg_due(&l->wr_at, l->wr_s);

		if (!any || timercmp(&w, &due, <))
			due = w;
		any = true;
	}
	if (l->handshaking && (l->rd_s != 0 || l->wr_s != 0)) {
		struct timeval h = leg_due(&l->hs_at, leg_hs_s(l));

		if (!any || timercmp(&h, &due, <))
			due = h;
		any = true;
	}
	if (!any) {
		if (evtimer_pending(l->to, NULL))
			evtimer_del(l->to);
		return;
	}
	if (evtimer_pending(l->to, NULL) && !timercmp(&due, &l->to_due, <))
		return;
	event_base_gettimeofday_cached(l->base, &now);
	if (timercmp(&due, &now, >))
		timersub(&due, &now, &wait);
	else
		timerclear(&wait);
	l->to_due = due;
	evtimer_add(l->to, &wait);
}

/* Read and write interest as the state asks: changed only when it differs. */
static void
leg_update(struct icpt_leg *l)
{
	bool want_rd, want_wr;

	if (l->failed || l->dead) {
		want_rd = want_wr = false;
	} else if (l->handshaking) {
		want_rd = !l->hs_write;
		want_wr = l->hs_write;
	} else {
		l->wm = l->high != 0 && l->in != NULL && evbuffer_get_length(l->in) >= l->high;
		want_rd = ((l->enabled & EV_READ) && !l->rd_eof && !l->wm) || l->write_wants_read;
		want_wr = (l->blocked && (l->enabled & EV_WRITE)) || l->read_wants_write;
	}
	if (want_rd != l->rd_on) {
		if (want_rd) {
			event_add(l->rd, NULL);
			event_base_gettimeofday_cached(l->base, &l->rd_at);
		} else {
			event_del(l->rd);
		}
		l->rd_on = want_rd;
	}
	if (want_wr != l->wr_on) {
		if (want_wr) {
			event_add(l->wr, NULL);
			event_base_gettimeofday_cached(l->base, &l->wr_at);
		} else {
			event_del(l->wr);
		}
		l->wr_on = want_wr;
	}
	leg_timer(l);
}

/* An end the relays hear of once: no more I/O on the leg. False when it was freed. */
static bool
leg_fail(struct icpt_leg *l, short what)
{
	l->failed = true;
	leg_update(l);
	if (l->eventcb != NULL)
		l->eventcb(l, what, l->arg);
	return !l->dead;
}

/*
 * Write the output: a record (TLS) or every chain (plain) per call, until
 * it is empty or the socket refuses. False when the leg was freed.
 */
static bool
leg_flush(struct icpt_leg *l)
{
	bool progress = false;
	ssize_t n;

	if (l->handshaking || l->failed || !(l->enabled & EV_WRITE))
		return true;
	l->write_wants_read = false;
	l->blocked = false;
	while (evbuffer_get_length(l->out) > 0) {
		n = l->io->send(l, l->out);
		if (n > 0) {
			evbuffer_drain(l->out, (size_t)n);
			progress = true;
			continue;
		}
		if (n == LEG_AGAIN)
			l->blocked = true;
		else if (n == LEG_OTHER)
			l->write_wants_read = true;
		else
			return leg_fail(l, BEV_EVENT_ERROR | BEV_EVENT_WRITING);
		break;
	}
	if (progress)
		event_base_gettimeofday_cached(l->base, &l->wr_at); /* the write timeout restarts */
	leg_update(l);
	if (progress && evbuffer_get_length(l->out) == 0 && l->writecb != NULL)
		l->writecb(l, l->arg);
	return !l->dead;
}

/*
 * Read what the socket (and OpenSSL's buffer) holds into the input, up
 * to the high-water mark and the turn's budget, telling the relays after
 * each read (at most a record), as a bufferevent does: their flow control
 * acts between reads. False when the leg was freed.
 */
static bool
leg_read(struct icpt_leg *l)
{
	size_t total = 0, room, len;
	short what = 0;
	ssize_t n;

	l->read_wants_write = false;
	while (!l->handshaking && !l->failed && !l->rd_eof && (l->enabled & EV_READ)) {
		len = evbuffer_get_length(l->in);
		room =
		    l->max_read != 0 && l->max_read < ICPT_LEG_READ ? l->max_read : ICPT_LEG_READ;
		if (l->high != 0) {
			if (len >= l->high)
				break; /* leg_update stops reading until the input drains */
			if (l->high - len < room)
				room = l->high - len;
		}
		if (total >= ICPT_LEG_BUDGET) {
			leg_schedule(l, LEG_D_READ); /* the rest next turn, after the others */
			break;
		}
		n = l->io->read(l, icpt_leg_buf, room);
		if (n <= 0) {
			if (n == 0)
				what = BEV_EVENT_EOF;
			else if (n == LEG_OTHER)
				l->read_wants_write = true;
			else if (n == LEG_ERROR)
				what = BEV_EVENT_ERROR;
			break;
		}
		if (evbuffer_add(l->in, icpt_leg_buf, (size_t)n) != 0) {
			what = BEV_EVENT_ERROR;
			break;
		}
		total += (size_t)n;
		if (l->readcb != NULL) {
			l->readcb(l, l->arg);
			if (l->dead)
				return false;
		}
		/*
		 * A short plain read emptied the socket; for TLS, what OpenSSL
		 * holds decides (a whole record may sit behind this one). A read
		 * that filled the room may have more behind it.
		 */
		if ((size_t)n < room && !l->io->pending(l))
			break;
	}
	if (what == BEV_EVENT_EOF)
		l->rd_eof = true;
	else if (what == BEV_EVENT_ERROR)
		l->failed = true;
	if (total > 0)
		event_base_gettimeofday_cached(l->base, &l->rd_at); /* the read timeout restarts */
	leg_update(l);
	if (what != 0 && l->eventcb != NULL) {
		l->eventcb(l, what | BEV_EVENT_READING, l->arg);
		if (l->dead)
			return false;
	}
	return true;
}

/* The TLS handshake goes on; once done, CONNECTED, the queued output, and what came with it. */
static bool
leg_handshake(struct icpt_leg *l)
{
	int r, e;
	ssize_t o;

	if (!l->handshaking || l->failed)
		return true;
	leg_tls_clear();
	r = SSL_do_handshake(l->ssl);
	if (r != 1) {
		e = SSL_get_error(l->ssl, r);
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
			l->hs_write = e == SSL_ERROR_WANT_WRITE;
			leg_update(l);
			return true;
		}
		o = leg_tls_outcome(l, r, SSL_ERROR_WANT_READ);
		return leg_fail(l, (o == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR) | BEV_EVENT_READING);
	}
	l->handshaking = false;
	l->hs_write = false;
	leg_update(l);
	if (l->eventcb != NULL) {
		l->eventcb(l, BEV_EVENT_CONNECTED, l->arg);
		if (l->dead)
			return false;
	}
	if (evbuffer_get_length(l->out) > 0 && !leg_flush(l))
		return false;
	/* The peer's first bytes may have come with its last handshake flight. */
	if (l->io->pending(l))
		return leg_read(l);
	return true;
}

static void
leg_rd_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_leg *l = arg;

	(void)fd;
	l->busy++;
	if (l->asleep) {
		/* Readable, or the read timeout the event carries while asleep ended. */
		if (l->wake_failed || !leg_wake(l)) {
			/* Once: a call its callbacks make on it finds the wake failed. */
			l->wake_failed = true;
			(void)leg_fail(l, BEV_EVENT_ERROR | BEV_EVENT_READING);
			(void)leg_unbusy(l);
			return;
		}
	}
	if (!(what & EV_READ)) {
		(void)leg_unbusy(l); /* the timeout: the timer, armed again on waking, reports it */
		return;
	}
	if (l->handshaking)
		(void)leg_handshake(l);
	else if (!l->write_wants_read || leg_flush(l))
		(void)leg_read(l);
	(void)leg_unbusy(l);
}

static void
leg_wr_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_leg *l = arg;

	(void)fd, (void)what;
	l->busy++;
	if (l->handshaking)
		(void)leg_handshake(l);
	else if (!l->read_wants_write || leg_read(l))
		(void)leg_flush(l);
	(void)leg_unbusy(l);
}

/* The timer: a timeout that ended is reported; one that moved sets it again. */
static void
leg_to_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_leg *l = arg;
	struct timeval now, d;
	short ended = 0;

	(void)fd, (void)what;
	event_base_gettimeofday_cached(l->base, &now);
	if (l->handshaking) {
		d = leg_due(&l->hs_at, leg_hs_s(l));
		if (leg_hs_s(l) != 0 && !timercmp(&now, &d, <))
			ended = BEV_EVENT_TIMEOUT | BEV_EVENT_READING;
	} else {
		d = leg_due(&l->rd_at, l->rd_s);
		if (l->rd_on && l->rd_s != 0 && !timercmp(&now, &d, <))
			ended = BEV_EVENT_TIMEOUT | BEV_EVENT_READING;
		d = leg_due(&l->wr_at, l->wr_s);
		if (ended == 0 && l->wr_on && l->wr_s != 0 && !timercmp(&now, &d, <))
			ended = BEV_EVENT_TIMEOUT | BEV_EVENT_WRITING;
	}
	if (ended == 0) {
		leg_timer(l);
		return;
	}
	l->busy++;
	if (l->eventcb != NULL)
		l->eventcb(l, ended, l->arg);
	/* Not handled (the leg lives on): the same timeout again after as long. */
	if (!l->dead) {
		if (l->handshaking)
			l->hs_at = now;
		else if (ended & BEV_EVENT_READING)
			l->rd_at = now;
		else
			l->wr_at = now;
		leg_timer(l);
	}
	(void)leg_unbusy(l);
}

static void
leg_defer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icpt_leg *l = arg;
	unsigned todo = l->defer_what;

	(void)fd, (void)what;
	l->defer_what = 0;
	l->busy++;
	if ((todo & LEG_D_FLUSH) && !leg_flush(l)) {
		(void)leg_unbusy(l);
		return;
	}
	if (todo & LEG_D_SHAKE)
		(void)leg_handshake(l);
	else if (todo & LEG_D_READ)
		(void)leg_read(l);
	(void)leg_unbusy(l);
}

/* Bytes were added to the output: they go at the end of this turn. */
static void
leg_out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct icpt_leg *l = arg;

	(void)buf;
	if (info->n_added > 0 && !l->blocked && !l->handshaking && (l->enabled & EV_WRITE))
		leg_schedule(l, LEG_D_FLUSH);
}

/* Bytes left the input: reading stopped at the high-water mark goes on below it. */
static void
leg_in_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct icpt_leg *l = arg;

	if (info->n_deleted == 0 || !l->wm || evbuffer_get_length(buf) >= l->high)
		return;
	leg_update(l);
	if (l->io->pending(l))
		leg_schedule(l, LEG_D_READ);
}

/* The parts a leg sleeps without (all or none); false without memory. */
static bool
leg_parts_new(struct icpt_leg *l)
{
	l->in = evbuffer_new();
	l->out = evbuffer_new();
	l->wr = event_new(l->base, l->fd, EV_WRITE | EV_PERSIST, leg_wr_cb, l);
	l->defer = event_new(l->base, -1, 0, leg_defer_cb, l);
	l->to = evtimer_new(l->base, leg_to_cb, l);
	if (l->in != NULL && l->out != NULL && l->wr != NULL && l->defer != NULL && l->to != NULL &&
	    evbuffer_add_cb(l->out, leg_out_cb, l) != NULL &&
	    evbuffer_add_cb(l->in, leg_in_cb, l) != NULL)
		return true;
	leg_parts_free(l);
	return false;
}

/*
 * An idle native leg sleeps: its buffers, their callbacks and every event
 * but the read one go, and the read event carries the read timeout
 * meanwhile (the write timeout counts only with write interest, which an
 * idle leg has not). About 1 KiB less per idle connection. Not while one
 * of its callbacks runs (the leg's code goes on using them), nor with
 * anything pending either way.
 */
static void
leg_sleep(struct icpt_leg *l)
{
	struct timeval now, due, wait = {0, 0};

	if (l->asleep || l->busy > 0 || l->handshaking || l->failed || l->dead ||
	    l->defer_what != 0 || l->wr_on || l->read_wants_write || l->write_wants_read ||
	    l->retry != 0)
		return;
	if (l->rd_on && l->rd_s != 0) {
		event_base_gettimeofday_cached(l->base, &now);
		due = leg_due(&l->rd_at, l->rd_s);
		/*
		 * A timeout already due is the timer's to report, awake: libevent
		 * keeps no period of zero, so a read event given one would be
		 * dropped when it fired, never to be added again.
		 */
		if (!timercmp(&due, &now, >))
			return;
		timersub(&due, &now, &wait);
		if (event_add(l->rd, &wait) != 0)
			return;
	}
	leg_parts_free(l);
	l->asleep = true;
}

/*
 * The read event of a waking leg back to an awake one's: on the socket, no
 * timer. libevent may have left it with the timeout it carried asleep
 * still pending, or fired: then it is off the socket and due to run its
 * callback, which would set that timeout again (a persistent event keeps
 * its period), and which a sleep before it would cancel, leaving it on no
 * socket. Deleting it drops both; a timeout added and removed clears the
 * period (event_remove_timer clears it only while a timer is pending).
 */
static bool
leg_rd_plain(struct icpt_leg *l)
{
	struct timeval any = {1, 0};

	return event_del(l->rd) == 0 && event_add(l->rd, &any) == 0 &&
	       event_remove_timer(l->rd) == 0;
}

/* A sleeping leg takes its parts back; false without memory (it sleeps on). */
static bool
leg_wake(struct icpt_leg *l)
{
	if (!l->asleep)
		return true;
	if (!leg_parts_new(l))
		return false;
	if (l->rd_on && !leg_rd_plain(l)) {
		leg_parts_free(l);
		return false;
	}
	l->asleep = false;
	leg_timer(l);
	return true;
}

/*
 * A call on a sleeping leg wakes it first. Without memory it stays asleep,
 * the call does nothing (its buffers are leg_none) and the leg fails from
 * the loop, where its callbacks may run (leg_rd_cb).
 */
static bool
leg_awake(struct icpt_leg *l)
{
	if (!l->asleep)
		return true;
	if (l->wake_failed)
		return false;
	if (leg_wake(l))
		return true;
	l->wake_failed = true;
	event_active(l->rd, EV_READ, 0);
	return false;
}

struct icpt_leg *
icpt_leg_new(struct event_base *base, int fd, SSL *ssl, enum icpt_leg_mode mode)
{
	struct icpt_leg *l = calloc(1, sizeof(*l));

	if (l == NULL) {
		SSL_free(ssl);
		close(fd);
		return NULL;
	}
	l->base = base;
	l->fd = fd;
	l->ssl = mode == ICPT_LEG_PLAIN ? NULL : ssl;
	l->io = l->ssl != NULL ? &icpt_leg_tls : &icpt_leg_plain;
	l->enabled = EV_READ | EV_WRITE;
	l->rd = event_new(base, fd, EV_READ | EV_PERSIST, leg_rd_cb, l);
	event_base_gettimeofday_cached(base, &l->rd_at);
	l->wr_at = l->hs_at = l->rd_at;
	if (mode == ICPT_LEG_PLAIN)
		SSL_free(ssl);
	if (leg_none == NULL && (leg_none = evbuffer_new()) != NULL) {
		evbuffer_freeze(leg_none, 0);
		evbuffer_freeze(leg_none, 1);
	}
	if (leg_none == NULL || l->rd == NULL || !leg_parts_new(l) ||
	    (l->ssl != NULL && SSL_set_fd(l->ssl, fd) != 1)) {
		leg_destroy(l);
		return NULL;
	}
	if (l->ssl != NULL) {
		/* A retried write may come from a copy; the record layer reads ahead. */
		SSL_set_mode(l->ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
		SSL_set_read_ahead(l->ssl, 1);
		if (mode == ICPT_LEG_ACCEPT)
			SSL_set_accept_state(l->ssl);
		else
			SSL_set_connect_state(l->ssl);
		l->handshaking = true;
	}
	leg_update(l);
	/*
	 * The handshake starts at the end of this turn, once the caller set
	 * its callbacks: a client's hello needs no wait for writability, and
	 * a server's peer's hello is already in the socket (it was peeked).
	 */
	if (l->ssl != NULL)
		leg_schedule(l, LEG_D_SHAKE);
	return l;
}

/* ---------------------------------------------------------------- wrapped */

static void
leg_bev_read_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_leg *l = arg;

	(void)bev;
	if (l->readcb != NULL)
		l->readcb(l, l->arg);
}

static void
leg_bev_write_cb(struct bufferevent *bev, void *arg)
{
	struct icpt_leg *l = arg;

	(void)bev;
	if (l->writecb != NULL)
		l->writecb(l, l->arg);
}

static void
leg_bev_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct icpt_leg *l = arg;

	(void)bev;
	if (l->eventcb != NULL)
		l->eventcb(l, what, l->arg);
}

struct icpt_leg *
icpt_leg_wrap(struct bufferevent *bev)
{
	struct icpt_leg *l = calloc(1, sizeof(*l));

	if (l == NULL) {
		bufferevent_free(bev);
		return NULL;
	}
	l->bev = bev;
	l->fd = -1;
	bufferevent_setcb(bev, leg_bev_read_cb, leg_bev_write_cb, leg_bev_event_cb, l);
	return l;
}

/* ---------------------------------------------------------------- both */

void
icpt_leg_free(struct icpt_leg *l)
{
	if (l == NULL)
		return;
	if (l->bev != NULL) {
		bufferevent_free(l->bev); /* libevent holds it while its callbacks run */
		free(l);
		return;
	}
	l->readcb = l->writecb = NULL;
	l->eventcb = NULL;
	if (l->busy > 0) {
		l->dead = true;
		event_del(l->rd);
		if (!l->asleep) {
			event_del(l->wr);
			event_del(l->defer);
			event_del(l->to);
		}
		return;
	}
	leg_destroy(l);
}

struct evbuffer *
icpt_leg_input(struct icpt_leg *l)
{
	if (l->bev != NULL)
		return bufferevent_get_input(l->bev);
	return leg_awake(l) ? l->in : leg_none;
}

struct evbuffer *
icpt_leg_output(struct icpt_leg *l)
{
	if (l->bev != NULL)
		return bufferevent_get_output(l->bev);
	return leg_awake(l) ? l->out : leg_none;
}

int
icpt_leg_write(struct icpt_leg *l, const void *data, size_t n)
{
	return evbuffer_add(icpt_leg_output(l), data, n);
}

void
icpt_leg_setcb(struct icpt_leg *l, icpt_leg_data_cb readcb, icpt_leg_data_cb writecb,
    icpt_leg_event_cb eventcb, void *arg)
{
	l->readcb = readcb;
	l->writecb = writecb;
	l->eventcb = eventcb;
	l->arg = arg;
}

void
icpt_leg_enable(struct icpt_leg *l, short what)
{
	short was = l->enabled;

	if (l->bev != NULL) {
		bufferevent_enable(l->bev, what);
		return;
	}
	if (!leg_awake(l))
		return;
	l->enabled |= what & (EV_READ | EV_WRITE);
	leg_update(l);
	if ((what & EV_WRITE) && !(was & EV_WRITE) && evbuffer_get_length(l->out) > 0)
		leg_schedule(l, LEG_D_FLUSH);
	/* Bytes OpenSSL read ahead bring no readiness of their own. */
	if ((what & EV_READ) && !l->handshaking && l->io->pending(l))
		leg_schedule(l, LEG_D_READ);
}

void
icpt_leg_disable(struct icpt_leg *l, short what)
{
	if (l->bev != NULL) {
		bufferevent_disable(l->bev, what);
		return;
	}
	if (!leg_awake(l))
		return;
	l->enabled &= (short)~(what & (EV_READ | EV_WRITE));
	leg_update(l);
}

void
icpt_leg_timeouts(struct icpt_leg *l, unsigned rd_s, unsigned wr_s)
{
	if (l->bev != NULL) {
		struct timeval r = {(time_t)rd_s, 0}, w = {(time_t)wr_s, 0};

		bufferevent_set_timeouts(l->bev, rd_s ? &r : NULL, wr_s ? &w : NULL);
		return;
	}
	if (!leg_awake(l))
		return;
	/* As a bufferevent's: a timeout set anew counts from now. */
	if (l->rd_s != rd_s) {
		l->rd_s = rd_s;
		event_base_gettimeofday_cached(l->base, &l->rd_at);
	}
	if (l->wr_s != wr_s) {
		l->wr_s = wr_s;
		event_base_gettimeofday_cached(l->base, &l->wr_at);
	}
	leg_timer(l);
}

void
icpt_leg_read_high(struct icpt_leg *l, size_t high)
{
	if (l->bev != NULL) {
		bufferevent_setwatermark(l->bev, EV_READ, 0, high);
		return;
	}
	if (!leg_awake(l))
		return;
	l->high = high;
	leg_update(l);
}

void
icpt_leg_max_read(struct icpt_leg *l, size_t n)
{
	if (l->bev != NULL) {
		bufferevent_set_max_single_read(l->bev, n);
		return;
	}
	l->max_read = n;
}

bool
icpt_leg_unread(struct icpt_leg *l)
{
	char b;
	ssize_t n;

	if (l->bev != NULL || l->rd_eof || l->failed || l->wake_failed)
		return true;
	if (l->in != NULL && evbuffer_get_length(l->in) > 0)
		return true;
	if (l->ssl != NULL && SSL_has_pending(l->ssl))
		return true;
	n = recv(l->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

SSL *
icpt_leg_ssl(const struct icpt_leg *l)
{
	if (l == NULL)
		return NULL;
	return l->bev != NULL ? bufferevent_openssl_get_ssl(l->bev) : l->ssl;
}

int
icpt_leg_fd(const struct icpt_leg *l)
{
	return l->bev != NULL ? -1 : l->fd;
}

unsigned long
icpt_leg_error(struct icpt_leg *l)
{
	if (l->bev != NULL)
		return bufferevent_get_openssl_error(l->bev);
	return l->errpos < l->nerr ? l->err[l->errpos++] : 0;
}

void
icpt_leg_close_notify(struct icpt_leg *l)
{
	SSL *ssl = icpt_leg_ssl(l);

	if (ssl == NULL || !SSL_is_init_finished(ssl) || l->notified)
		return;
	l->notified = true;
	ERR_set_mark();
	(void)SSL_shutdown(ssl);
	ERR_pop_to_mark();
	if (l->bev != NULL) {
		/* A filter over a socket bufferevent: write the record to the socket now. */
		struct bufferevent *under = bufferevent_get_underlying(l->bev);

		if (under != NULL && bufferevent_openssl_get_ssl(under) == NULL &&
		    bufferevent_getfd(under) >= 0)
			(void)evbuffer_write(
			    bufferevent_get_output(under), bufferevent_getfd(under));
	}
}

bool
icpt_leg_asleep(const struct icpt_leg *l)
{
	return l->asleep;
}

/* icpt_leg_trim; false when something was left (bytes waiting, or OpenSSL's). */
static bool
leg_trim(struct icpt_leg *l)
{
	SSL *ssl = icpt_leg_ssl(l);
	struct evbuffer *in;
	bool reading;

	if (l->bev == NULL && l->asleep)
		return false;
	in = icpt_leg_input(l);
	if (evbuffer_get_length(in) > 0 || evbuffer_get_length(icpt_leg_output(l)) > 0)
		return false;
	if (l->bev != NULL) {
		/*
		 * The empty chain the filter reserved for its next read goes (an
		 * evbuffer frees its chains only when bytes are drained: one in,
		 * one out, reading off meanwhile), and its next reads are small.
		 */
		reading = (bufferevent_get_enabled(l->bev) & EV_READ) != 0;
		if (reading)
			bufferevent_disable(l->bev, EV_READ);
		if (evbuffer_add(in, "", 1) == 0)
			evbuffer_drain(in, 1);
		bufferevent_set_max_single_read(l->bev, ICPT_LEG_TRIM_READ);
		if (reading)
			bufferevent_enable(l->bev, EV_READ);
	}
	/* OpenSSL keeps its record buffers unless told (it refuses while bytes are held). */
	return ssl == NULL || SSL_free_buffers(ssl) == 1;
}

void
icpt_leg_trim(struct icpt_leg *l)
{
	(void)leg_trim(l);
}

void
icpt_leg_sleep(struct icpt_leg *l)
{
	if (leg_trim(l) && l->bev == NULL)
		leg_sleep(l);
}
