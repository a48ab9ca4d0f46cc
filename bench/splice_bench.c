/*
 * splice_bench: what a passed-through TCP connection costs the relay, the
 * copy relay of vault/icpt_splice.c (recv into a 64 KiB buffer, send at
 * once, hold only what the other socket did not take) against splice(2)
 * through a pipe per direction (64 KiB and 1 MiB pipes), issue 19.
 *
 * One process: a writer thread feeds a source connection, a reader thread
 * drains a sink connection (both on loopback, blocking loops), and the main
 * thread relays between them in an edge-triggered epoll loop shaped like
 * icpt_raw_pump (one event per socket added once, write-first, 256 KiB a
 * direction per turn). Prints the CPU of the relay thread and of the
 * writer and reader, wall MB/s and the relay's syscalls, median (min-max)
 * of the repetitions, then what idle pipes cost in descriptors and kernel
 * memory. Not a test; run by hand on an otherwise quiet machine.
 * Usage: splice_bench [-u] [-r reps]
 *   -u  do not pin (default: relay on CPU 1, writer and reader on CPU 0)
 *
 * Read the total column, not only the relay's: on loopback the kernel does
 * one socket's TCP work in whichever thread's syscall or softirq gets to
 * it (an ACK the reader sends pushes the relay's queued segments out from
 * the reader's recv), and the writer's copy into its socket costs more
 * (likely: a spliced page stays referenced until the reader has copied it,
 * so the writer fills fresh pages, not its warm ones). Work moves between
 * the threads; the machine pays for all of it, and in a sidecar the
 * workload at one end is on the same machine.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#define SB_READ (64 * 1024)    /* ICPT_RAW_READ: one read, written at once */
#define SB_BUDGET (256 * 1024) /* ICPT_RAW_BUDGET: bytes a direction moves per turn */
#define SB_PUMP_MAX 4096       /* calls one pump makes before it yields its turn */
#define SB_TURNS_MAX 50000000u /* epoll turns of one relayed connection */
#define SB_WAIT_MS 1000        /* one epoll_wait */
#define SB_DEADLINE_S 30       /* a connection relayed longer than this failed */
#define SB_IO_TIMEOUT_S 10     /* a writer's or reader's blocked call */
#define SB_IO_MAX (1u << 24)   /* calls of one writer or reader loop */
#define SB_CHUNK (256 * 1024)  /* writer's send, reader's recv */
#define SB_PATTERN 65521       /* period of the stream's bytes (prime) */
#define SB_REPS 5
#define SB_REPS_MAX 21
#define SB_IDLE_CONNS 4096 /* INTERCEPT_MAX_CONNS */
#define SB_NOBODY 65534
#define SB_MIB (1024.0 * 1024.0)

/* A relay: how bytes go from fd[d] to fd[!d] (a const ops table per mode). */
struct sb_relay;
struct sb_ops {
	const char *name;
	int pipe_size; /* 0: no pipe */
	bool (*pump)(struct sb_relay *, int);
};

struct sb_relay {
	const struct sb_ops *ops;
	int fd[2];        /* 0: the workload's side (source), 1: upstream's (sink) */
	int pipe[2][2];   /* splice: pipe[d] carries fd[d] -> fd[!d] */
	size_t inpipe[2]; /* splice: bytes in pipe[d] */
	uint8_t *held[2]; /* copy: read from fd[d], not yet taken by fd[!d] */
	size_t off[2], len[2];
	bool eof[2], shut[2];
	bool pend[2];   /* the turn's budget ran out: pump again next turn */
	uint64_t calls; /* syscalls the relay made */
};

enum sb_kind {
	SB_BULK,     /* bytes one way, then EOFs */
	SB_PINGPONG, /* a message there, the same back, rounds times */
};

struct sb_case {
	const char *name;
	enum sb_kind kind;
	size_t size;     /* bulk: bytes a connection; ping-pong: message */
	unsigned rounds; /* ping-pong */
	unsigned conns;  /* connections, one after the other, in one repetition */
};

/* One repetition of a case in one mode. */
struct sb_sample {
	double cpu, wall, ends; /* seconds: relay thread CPU, relay wall, writer+reader CPU */
	double bytes;           /* through the relay, both ways */
	double calls, ops;      /* ops: connections (bulk) or round trips (ping-pong) */
};

/* A writer's or reader's side of one connection. */
struct sb_end {
	int fd;
	const struct sb_case *c;
	pthread_barrier_t *gate;
	int cpu; /* -1: not pinned */
	double cputime;
	int err;
};

static uint8_t sb_buf[SB_READ];
static uint8_t sb_pattern[SB_PATTERN + SB_CHUNK];

static double
sb_clock(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
sb_pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	(void)sched_setaffinity(0, sizeof(set), &set);
}

static size_t
sb_pending(const struct sb_relay *r, int d)
{
	return r->len[d] + r->inpipe[d];
}

/* An EOF passes on once the bytes before it are out (as icpt_raw_pump). */
static void
sb_relay_shut(struct sb_relay *r, int d)
{
	if (r->eof[d] && sb_pending(r, d) == 0 && !r->shut[!d]) {
		r->shut[!d] = true;
		r->calls++;
		(void)shutdown(r->fd[!d], SHUT_WR);
	}
}

/* ------------------------------------------------------------------ copy */

/* Write to fd; false on an error other than a full socket. */
static bool
sb_copy_send(struct sb_relay *r, int fd, const uint8_t *data, size_t n, size_t *sent)
{
	ssize_t w;
	unsigned i;

	*sent = 0;
	for (i = 0; *sent < n && i < SB_PUMP_MAX; i++) {
		r->calls++;
		w = send(fd, data + *sent, n - *sent, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK;
		}
		*sent += (size_t)w;
	}
	return *sent == n;
}

/* icpt_raw_pump: what is held first, then reads written at once. */
static bool
sb_copy_pump(struct sb_relay *r, int d)
{
	size_t budget = SB_BUDGET, sent;
	ssize_t n;
	unsigned i;

	if (r->len[d] > 0) {
		if (!sb_copy_send(r, r->fd[!d], r->held[d] + r->off[d], r->len[d], &sent))
			return false;
		r->off[d] += sent;
		r->len[d] -= sent;
		if (r->len[d] > 0)
			return true; /* wait for fd[!d] to take more */
		free(r->held[d]);
		r->held[d] = NULL;
	}
	for (i = 0; !r->eof[d]; i++) {
		if (budget == 0 || i == SB_PUMP_MAX) {
			r->pend[d] = true;
			break;
		}
		r->calls++;
		n = recv(r->fd[d], sb_buf, sizeof(sb_buf), 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return false;
		}
		if (n == 0) {
			r->eof[d] = true;
			break;
		}
		if (!sb_copy_send(r, r->fd[!d], sb_buf, (size_t)n, &sent))
			return false;
		if (sent < (size_t)n) {
			if ((r->held[d] = malloc((size_t)n - sent)) == NULL)
				return false;
			memcpy(r->held[d], sb_buf + sent, (size_t)n - sent);
			r->off[d] = 0;
			r->len[d] = (size_t)n - sent;
			return true;
		}
		budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
	}
	sb_relay_shut(r, d);
	return true;
}

/* ---------------------------------------------------------------- splice */

/* Empty pipe[d] into fd[!d] as far as it takes; false on an error. */
static bool
sb_splice_out(struct sb_relay *r, int d)
{
	ssize_t n;
	unsigned i;

	for (i = 0; r->inpipe[d] > 0; i++) {
		if (i == SB_PUMP_MAX)
			return false;
		r->calls++;
		n = splice(r->pipe[d][0], NULL, r->fd[!d], NULL, r->inpipe[d],
		    SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK;
		}
		if (n == 0)
			return false;
		r->inpipe[d] -= (size_t)n;
	}
	return true;
}

/*
 * The same pump with the pipe as what is held: splice in only into an
 * empty pipe, so EAGAIN there means the socket is empty, and fd[d] is read
 * no more while the pipe holds what fd[!d] did not take.
 */
static bool
sb_splice_pump(struct sb_relay *r, int d)
{
	size_t budget = SB_BUDGET;
	ssize_t n;
	unsigned i;

	if (!sb_splice_out(r, d))
		return false;
	if (r->inpipe[d] > 0)
		return true;
	for (i = 0; !r->eof[d]; i++) {
		if (budget == 0 || i == SB_PUMP_MAX) {
			r->pend[d] = true;
			break;
		}
		r->calls++;
		n = splice(r->fd[d], NULL, r->pipe[d][1], NULL, (size_t)r->ops->pipe_size,
		    SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return false;
		}
		if (n == 0) {
			r->eof[d] = true;
			break;
		}
		r->inpipe[d] = (size_t)n;
		if (!sb_splice_out(r, d))
			return false;
		if (r->inpipe[d] > 0)
			return true;
		budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
	}
	sb_relay_shut(r, d);
	return true;
}

/*
 * SPLICE_F_MOVE is only a hint (the kernel moves no page for it today); it
 * is set as the issue asks. F_SETPIPE_SZ to 64 KiB is the default size.
 */
static const struct sb_ops sb_modes[] = {
    {.name = "copy", .pipe_size = 0, .pump = sb_copy_pump},
    {.name = "splice-64k", .pipe_size = 64 * 1024, .pump = sb_splice_pump},
    {.name = "splice-1m", .pipe_size = 1024 * 1024, .pump = sb_splice_pump},
};
#define SB_NMODES (sizeof(sb_modes) / sizeof(sb_modes[0]))

/*
 * A connection's pipes, one a direction (a pipe is one-way, and each
 * direction must be able to hold what its sink did not take). Made and
 * closed inside the timed part: a relay that splices pays this for each
 * connection, so the short bulk cases show what it costs.
 */
static int
sb_pipes_open(struct sb_relay *r)
{
	int d;

	for (d = 0; d < 2; d++) {
		r->calls += 2;
		if (pipe2(r->pipe[d], O_CLOEXEC | O_NONBLOCK) != 0) {
			r->pipe[d][0] = r->pipe[d][1] = -1;
			return -1;
		}
		if (fcntl(r->pipe[d][1], F_SETPIPE_SZ, r->ops->pipe_size) < r->ops->pipe_size)
			return -1;
	}
	return 0;
}

/*
 * Relay one connection until both EOFs are through, then close it; the
 * relay thread's CPU and wall time from the start gate to the last close.
 */
static int
sb_relay_run(
    int ep, const struct sb_ops *ops, int a, int b, pthread_barrier_t *gate, struct sb_sample *s)
{
	struct sb_relay r = {.ops = ops, .fd = {a, b}, .pipe = {{-1, -1}, {-1, -1}}};
	struct epoll_event ev, evs[4];
	double t0, c0, deadline;
	unsigned turn;
	bool pend[2];
	int d, i, n, rc = -1;

	/* The writer sends nothing before this: no byte is in flight at t0. */
	(void)pthread_barrier_wait(gate);
	t0 = sb_clock(CLOCK_MONOTONIC);
	c0 = sb_clock(CLOCK_THREAD_CPUTIME_ID);
	deadline = t0 + SB_DEADLINE_S;
	if (ops->pipe_size > 0 && sb_pipes_open(&r) != 0) {
		perror("pipe");
		goto out;
	}
	for (d = 0; d < 2; d++) {
		ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
		ev.data.u32 = (uint32_t)d;
		r.calls++;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, r.fd[d], &ev) != 0)
			goto out;
	}
	/*
	 * One turn is one epoll_wait, as a libevent loop's: readable runs the
	 * pump of that socket, writable the pump of the other one if it holds
	 * bytes for it (icpt_raw_cb). A pump that spent its budget asks for
	 * another turn, which then does not sleep (libevent's event_active).
	 */
	for (turn = 0; turn < SB_TURNS_MAX; turn++) {
		pend[0] = r.pend[0];
		pend[1] = r.pend[1];
		r.pend[0] = r.pend[1] = false;
		r.calls++;
		n = epoll_wait(ep, evs, 4, pend[0] || pend[1] ? 0 : SB_WAIT_MS);
		if (n < 0 && errno != EINTR)
			goto out;
		for (i = 0; i < n; i++) {
			d = (int)evs[i].data.u32;
			if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
				if (!ops->pump(&r, d))
					goto out;
				pend[d] = false;
			}
			if ((evs[i].events & EPOLLOUT) && sb_pending(&r, !d) > 0) {
				if (!ops->pump(&r, !d))
					goto out;
				pend[!d] = false;
			}
		}
		for (d = 0; d < 2; d++)
			if (pend[d] && !ops->pump(&r, d))
				goto out;
		if (r.eof[0] && r.eof[1] && sb_pending(&r, 0) == 0 && sb_pending(&r, 1) == 0) {
			rc = 0;
			break;
		}
		if (sb_clock(CLOCK_MONOTONIC) > deadline)
			break;
	}
out:
	if (rc != 0)
		fprintf(stderr, "splice_bench: %s relay failed (%s)\n", ops->name, strerror(errno));
	for (d = 0; d < 2; d++) {
		free(r.held[d]);
		r.calls++;
		close(r.fd[d]);
		for (i = 0; i < 2; i++) {
			if (r.pipe[d][i] >= 0) {
				r.calls++;
				close(r.pipe[d][i]);
			}
		}
	}
	s->cpu += sb_clock(CLOCK_THREAD_CPUTIME_ID) - c0;
	s->wall += sb_clock(CLOCK_MONOTONIC) - t0;
	s->calls += (double)r.calls;
	return rc;
}

/* ----------------------------------------------------- writer and reader */

static int
sb_send_all(int fd, const uint8_t *p, size_t n)
{
	size_t off = 0;
	ssize_t w;
	unsigned i;

	for (i = 0; off < n && i < SB_IO_MAX; i++) {
		w = send(fd, p + off, n - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		off += (size_t)w;
	}
	return off == n ? 0 : -1;
}

/* Exactly n bytes: 0; an EOF before the first: 1; else -1. */
static int
sb_recv_all(int fd, uint8_t *p, size_t n)
{
	size_t off = 0;
	ssize_t k;
	unsigned i;

	for (i = 0; off < n && i < SB_IO_MAX; i++) {
		k = recv(fd, p + off, n - off, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0 && off == 0)
			return 1;
		if (k <= 0)
			return -1;
		off += (size_t)k;
	}
	return off == n ? 0 : -1;
}

/* Bytes until EOF; a byte that differs from the stream's pattern is an error. */
static int
sb_drain(int fd, uint8_t *buf, uint64_t expect)
{
	uint64_t off = 0;
	ssize_t k;
	unsigned i;

	for (i = 0; i < SB_IO_MAX; i++) {
		k = recv(fd, buf, SB_CHUNK, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 || off + (uint64_t)k > expect)
			return -1;
		if (k == 0)
			return off == expect ? 0 : -1;
		if (memcmp(buf, sb_pattern + off % SB_PATTERN, (size_t)k) != 0)
			return -1;
		off += (uint64_t)k;
	}
	return -1;
}

static void *
sb_writer(void *arg)
{
	struct sb_end *e = arg;
	const struct sb_case *c = e->c;
	uint8_t *buf = malloc(SB_CHUNK);
	uint64_t off = 0;
	size_t n;
	unsigned i;
	double c0;

	sb_pin(e->cpu);
	(void)pthread_setname_np(pthread_self(), "sb-writer");
	(void)pthread_barrier_wait(e->gate);
	c0 = sb_clock(CLOCK_THREAD_CPUTIME_ID);
	e->err = buf == NULL;
	if (c->kind == SB_BULK) {
		for (i = 0; off < c->size && i < SB_IO_MAX && !e->err; i++) {
			n = c->size - off < SB_CHUNK ? (size_t)(c->size - off) : SB_CHUNK;
			e->err = sb_send_all(e->fd, sb_pattern + off % SB_PATTERN, n) != 0;
			off += n;
		}
	} else {
		for (i = 0; i < c->rounds && !e->err; i++) {
			e->err = sb_send_all(e->fd, sb_pattern, c->size) != 0 ||
			         sb_recv_all(e->fd, buf, c->size) != 0 ||
			         memcmp(buf, sb_pattern, c->size) != 0;
		}
	}
	if (shutdown(e->fd, SHUT_WR) != 0 || (buf != NULL && sb_drain(e->fd, buf, 0) != 0))
		e->err = 1;
	e->cputime = sb_clock(CLOCK_THREAD_CPUTIME_ID) - c0;
	free(buf);
	return NULL;
}

static void *
sb_reader(void *arg)
{
	struct sb_end *e = arg;
	const struct sb_case *c = e->c;
	uint8_t *buf = malloc(SB_CHUNK);
	unsigned i;
	double c0;
	int k;

	sb_pin(e->cpu);
	(void)pthread_setname_np(pthread_self(), "sb-reader");
	(void)pthread_barrier_wait(e->gate);
	c0 = sb_clock(CLOCK_THREAD_CPUTIME_ID);
	e->err = buf == NULL;
	if (buf != NULL && c->kind == SB_BULK) {
		e->err = sb_drain(e->fd, buf, c->size) != 0;
	} else if (buf != NULL) {
		for (i = 0; i <= c->rounds; i++) {
			if ((k = sb_recv_all(e->fd, buf, c->size)) != 0) {
				e->err = k < 0 || i != c->rounds;
				break;
			}
			if (sb_send_all(e->fd, buf, c->size) != 0) {
				e->err = 1;
				break;
			}
		}
	}
	if (shutdown(e->fd, SHUT_WR) != 0)
		e->err = 1;
	e->cputime = sb_clock(CLOCK_THREAD_CPUTIME_ID) - c0;
	free(buf);
	return NULL;
}

/* ----------------------------------------------------------- the runs */

static void
sb_sockopts(int fd, bool relay)
{
	struct timeval tv = {SB_IO_TIMEOUT_S, 0};
	int one = 1;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (relay) {
		(void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	} else {
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
}

/* A loopback connection: *c connected to the listener, *s accepted. */
static int
sb_pair(int lfd, const struct sockaddr_in *sin, int *c, int *s)
{
	*s = -1;
	if ((*c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	if (connect(*c, (const struct sockaddr *)sin, sizeof(*sin)) != 0 ||
	    (*s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0) {
		close(*c);
		return -1;
	}
	return 0;
}

/*
 * One connection of a case: source and sink pairs, writer and reader, the
 * relay between. The relay's sockets are non-blocking with TCP_NODELAY, as
 * the intercept's are; the ends block, with timeouts, so that a relay that
 * stalls ends the run instead of hanging it.
 */
static int
sb_conn(int lfd, const struct sockaddr_in *sin, int ep, const struct sb_ops *ops,
    const struct sb_case *c, bool pin, struct sb_sample *s)
{
	pthread_barrier_t gate;
	pthread_t tw, tr;
	struct sb_end w = {.c = c, .gate = &gate, .cpu = pin ? 0 : -1};
	struct sb_end rd = w;
	int a, b, rc;

	if (sb_pair(lfd, sin, &w.fd, &a) != 0)
		return -1;
	if (sb_pair(lfd, sin, &b, &rd.fd) != 0) {
		close(w.fd);
		close(a);
		return -1;
	}
	sb_sockopts(w.fd, false);
	sb_sockopts(rd.fd, false);
	sb_sockopts(a, true);
	sb_sockopts(b, true);
	if (pthread_barrier_init(&gate, NULL, 3) != 0 ||
	    pthread_create(&tw, NULL, sb_writer, &w) != 0 ||
	    pthread_create(&tr, NULL, sb_reader, &rd) != 0) {
		fprintf(stderr, "splice_bench: cannot start the writer and reader\n");
		exit(1);
	}
	rc = sb_relay_run(ep, ops, a, b, &gate, s);
	(void)pthread_join(tw, NULL);
	(void)pthread_join(tr, NULL);
	(void)pthread_barrier_destroy(&gate);
	close(w.fd);
	close(rd.fd);
	if (w.err || rd.err) {
		fprintf(
		    stderr, "splice_bench: %s %s: writer or reader failed\n", c->name, ops->name);
		rc = -1;
	}
	s->ends += w.cputime + rd.cputime;
	if (c->kind == SB_BULK) {
		s->bytes += (double)c->size;
		s->ops += 1;
	} else {
		s->bytes += 2.0 * (double)c->size * c->rounds;
		s->ops += c->rounds;
	}
	return rc;
}

static int
sb_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* "median (min-max)" of n values; the median, since a VM's steal time makes outliers. */
static void
sb_stat(char *out, size_t outlen, double *v, int n, int prec)
{
	char lo[32], mid[32], hi[32];

	qsort(v, (size_t)n, sizeof(*v), sb_cmp);
	snprintf(lo, sizeof(lo), "%.*f", prec, v[0]);
	snprintf(mid, sizeof(mid), "%.*f", prec, n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
	snprintf(hi, sizeof(hi), "%.*f", prec, v[n - 1]);
	snprintf(out, outlen, "%s (%s-%s)", mid, lo, hi);
}

static void
sb_report(const struct sb_case *c, const struct sb_ops *ops, const struct sb_sample *s, int reps)
{
	double v[6][SB_REPS_MAX];
	char col[6][128];
	static const int prec[6] = {0, 0, 0, 1, 0, 1};
	int i;

	for (i = 0; i < reps; i++) {
		double mib = s[i].bytes / SB_MIB;

		v[0][i] = s[i].cpu * 1e6 / mib;
		v[1][i] = s[i].ends * 1e6 / mib;
		v[2][i] = (s[i].cpu + s[i].ends) * 1e6 / mib;
		v[3][i] = s[i].cpu * 1e6 / s[i].ops;
		v[4][i] = s[i].bytes / s[i].wall / 1e6;
		v[5][i] = s[i].calls / s[i].ops;
	}
	for (i = 0; i < 6; i++)
		sb_stat(col[i], sizeof(col[i]), v[i], reps, prec[i]);
	printf("%-22s %-10s %-17s %-17s %-17s %-26s %-17s %s\n", c->name, ops->name, col[0], col[1],
	    col[2], col[3], col[4], col[5]);
}

/*
 * Ping-pong: a message each way per round trip, on one connection. Bulk:
 * connections one after the other, each with its pipes made and closed.
 */
static const struct sb_case sb_cases[] = {
    {.name = "pingpong 4KiB x5000", .kind = SB_PINGPONG, .size = 4096, .rounds = 5000, .conns = 1},
    {.name = "pingpong 64KiB x1000",
        .kind = SB_PINGPONG,
        .size = 65536,
        .rounds = 1000,
        .conns = 1},
    {.name = "bulk 64KiB x128conn", .kind = SB_BULK, .size = 64 << 10, .conns = 128},
    {.name = "bulk 256KiB x64conn", .kind = SB_BULK, .size = 256 << 10, .conns = 64},
    {.name = "bulk 1MiB x64conn", .kind = SB_BULK, .size = 1 << 20, .conns = 64},
    {.name = "bulk 4MiB x16conn", .kind = SB_BULK, .size = 4 << 20, .conns = 16},
    {.name = "bulk 16MiB x4conn", .kind = SB_BULK, .size = 16 << 20, .conns = 4},
    {.name = "bulk 100MiB x1conn", .kind = SB_BULK, .size = 100 << 20, .conns = 1},
};
static const struct sb_case sb_warmup = {
    .name = "warm-up", .kind = SB_BULK, .size = 16 << 20, .conns = 1};
#define SB_NCASES (sizeof(sb_cases) / sizeof(sb_cases[0]))

/* ------------------------------------------------------------ pipe cost */

/* A /proc/meminfo field in KiB, or -1. */
static long
sb_meminfo(const char *key)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	size_t kl = strlen(key);
	long v = -1;
	int i;

	if (f == NULL)
		return -1;
	for (i = 0; i < 128 && fgets(line, sizeof(line), f) != NULL; i++) {
		if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
			v = strtol(line + kl + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

static void
sb_pipes_close(int (*p)[2], int n)
{
	int i;

	for (i = 0; i < n; i++) {
		close(p[i][0]);
		close(p[i][1]);
	}
}

/*
 * As the worker uid: the kernel charges each pipe's capacity (not what it
 * holds) to its user, and past fs.pipe-user-pages-soft a new pipe gets 2
 * pages and a resize is refused (EPERM).
 */
static void
sb_pipes_unprivileged(int (*p)[2], int npipes)
{
	int i, n, sz, full = 0, small = 0, minsz = 1 << 30, raised = 0, err = 0;

	if (setgroups(0, NULL) != 0 || setgid(SB_NOBODY) != 0 || setuid(SB_NOBODY) != 0) {
		printf("  unprivileged: cannot become uid %d, skipped\n", SB_NOBODY);
		return;
	}
	for (n = 0; n < npipes && pipe2(p[n], O_CLOEXEC) == 0; n++) {
		sz = fcntl(p[n][1], F_GETPIPE_SZ);
		if (sz >= 65536)
			full++;
		else
			small++;
		if (sz < minsz)
			minsz = sz;
	}
	sb_pipes_close(p, n);
	printf("  unprivileged (uid %d): %d pipes made, %d of 64 KiB, then %d of %d bytes\n",
	    SB_NOBODY, n, full, small, small > 0 ? minsz : 0);
	for (i = 0; i < npipes && pipe2(p[i], O_CLOEXEC) == 0; i++) {
		if (fcntl(p[i][1], F_SETPIPE_SZ, 1 << 20) < 0) {
			err = errno;
			i++;
			break;
		}
		raised++;
	}
	sb_pipes_close(p, i);
	printf("  unprivileged: F_SETPIPE_SZ 1 MiB accepted for %d pipes, then %s\n", raised,
	    err ? strerror(err) : "no refusal");
}

/* Idle pipes for SB_IDLE_CONNS connections, a pipe per direction. */
static void
sb_pipe_cost(void)
{
	/*
	 * Kernel memory is read off /proc/meminfo around the allocations: a
	 * rough figure (anything else on the machine moves it too), good to
	 * a KiB a pipe with 8192 of them. An empty pipe holds no data page.
	 */
	int npipes = 2 * SB_IDLE_CONNS, n, i, st;
	int(*p)[2] = calloc((size_t)npipes, sizeof(*p));
	long free0, slab0, free1, slab1, free2, slab2;
	struct rlimit rl;
	pid_t pid;

	if (p == NULL)
		return;
	(void)getrlimit(RLIMIT_NOFILE, &rl);
	printf("\npipe cost (a pipe per direction: 2 pipes, 4 descriptors a connection)\n");
	printf("  %d connections: %d pipes, %d descriptors on top of %d sockets; "
	       "RLIMIT_NOFILE here %llu/%llu\n",
	    SB_IDLE_CONNS, npipes, 2 * npipes, 2 * SB_IDLE_CONNS, (unsigned long long)rl.rlim_cur,
	    (unsigned long long)rl.rlim_max);
	free0 = sb_meminfo("MemFree");
	slab0 = sb_meminfo("Slab");
	for (n = 0; n < npipes && pipe2(p[n], O_CLOEXEC) == 0; n++)
		;
	free1 = sb_meminfo("MemFree");
	slab1 = sb_meminfo("Slab");
	for (i = 0; i < n; i++)
		(void)fcntl(p[i][1], F_SETPIPE_SZ, 1 << 20);
	free2 = sb_meminfo("MemFree");
	slab2 = sb_meminfo("Slab");
	sb_pipes_close(p, n);
	if (n > 0) {
		printf("  root, %d idle empty pipes: MemFree -%ld KiB (%.2f KiB a pipe), "
		       "Slab +%ld KiB (%.2f KiB a pipe)\n",
		    n, free0 - free1, (double)(free0 - free1) / n, slab1 - slab0,
		    (double)(slab1 - slab0) / n);
		printf("  the same pipes resized to 1 MiB, still empty: MemFree -%ld KiB more "
		       "(%.2f KiB a pipe), Slab +%ld KiB\n",
		    free1 - free2, (double)(free1 - free2) / n, slab2 - slab1);
	}
	printf("  fs.pipe-user-pages-soft is charged by capacity: %d pipes of 64 KiB "
	       "= %d pages; of 1 MiB = %d pages\n",
	    npipes, npipes * 16, npipes * 256);
	if (geteuid() != 0) {
		free(p);
		return;
	}
	fflush(stdout);
	if ((pid = fork()) == 0) {
		sb_pipes_unprivileged(p, npipes);
		fflush(stdout);
		_exit(0);
	}
	if (pid > 0)
		(void)waitpid(pid, &st, 0);
	free(p);
}

static void
sb_header(bool pin, int reps)
{
	struct utsname u;
	FILE *f;
	char buf[64] = "?";

	if (uname(&u) != 0)
		strcpy(u.release, "?");
	if ((f = fopen("/proc/sys/fs/pipe-max-size", "r")) != NULL) {
		if (fgets(buf, sizeof(buf), f) == NULL)
			strcpy(buf, "?");
		buf[strcspn(buf, "\n")] = '\0';
		fclose(f);
	}
	printf("splice_bench: kernel %s, %ld CPUs, %s, %d repetitions, pipe-max-size %s\n",
	    u.release, sysconf(_SC_NPROCESSORS_ONLN),
	    pin ? "relay on CPU 1, writer+reader on CPU 0" : "not pinned", reps, buf);
	printf(
	    "op = a connection (bulk) or a round trip (pingpong); MiB counted through the relay, "
	    "both ways; ends = writer+reader threads; total = relay+ends; median (min-max)\n");
	printf("%-22s %-10s %-17s %-17s %-17s %-26s %-17s %s\n", "case", "mode", "relay CPU us/MiB",
	    "ends CPU us/MiB", "total CPU us/MiB", "relay CPU us/op", "wall MB/s",
	    "relay syscalls/op");
}

int
main(int argc, char **argv)
{
	static struct sb_sample s[SB_NCASES][SB_NMODES][SB_REPS_MAX];
	struct sockaddr_in sin = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sin);
	bool pin = sysconf(_SC_NPROCESSORS_ONLN) >= 2;
	int reps = SB_REPS, opt, lfd, ep, one = 1, rc = 0;
	uint32_t x = 2463534242u;
	size_t ci, mi, i;
	int rep;
	unsigned k;

	while ((opt = getopt(argc, argv, "ur:")) != -1) {
		if (opt == 'u')
			pin = false;
		else if (opt == 'r')
			reps = atoi(optarg);
		else
			reps = 0;
	}
	if (reps < 1 || reps > SB_REPS_MAX) {
		fprintf(stderr, "usage: splice_bench [-u] [-r reps (1-%d)]\n", SB_REPS_MAX);
		return 2;
	}
	for (i = 0; i < sizeof(sb_pattern); i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		sb_pattern[i] = i < SB_PATTERN ? (uint8_t)x : sb_pattern[i - SB_PATTERN];
	}
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if ((lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(lfd, 16) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&sin, &sl) != 0 ||
	    (ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		perror("splice_bench: listen");
		return 1;
	}
	/*
	 * On 2 cores: the relay alone on one, the ends share the other (as a
	 * workload and its upstream's traffic would share the machine). The
	 * ends then bound wall MB/s, so CPU per MiB is the figure to compare.
	 */
	if (pin)
		sb_pin(1);
	sb_header(pin, reps);
	/* Warm-up, not counted: a 16 MiB connection in each mode. */
	for (mi = 0; mi < SB_NMODES; mi++) {
		struct sb_sample w = {0};

		if (sb_conn(lfd, &sin, ep, &sb_modes[mi], &sb_warmup, pin, &w) != 0)
			return 1;
	}
	/* Modes interleaved within a repetition, so that drift hits each alike. */
	for (ci = 0; ci < SB_NCASES; ci++) {
		for (rep = 0; rep < reps; rep++) {
			for (mi = 0; mi < SB_NMODES; mi++) {
				for (k = 0; k < sb_cases[ci].conns; k++) {
					if (sb_conn(lfd, &sin, ep, &sb_modes[mi], &sb_cases[ci],
					        pin, &s[ci][mi][rep]) != 0)
						rc = 1;
				}
			}
		}
		for (mi = 0; mi < SB_NMODES; mi++)
			sb_report(&sb_cases[ci], &sb_modes[mi], s[ci][mi], reps);
		fflush(stdout);
	}
	close(ep);
	close(lfd);
	sb_pipe_cost();
	return rc;
}
