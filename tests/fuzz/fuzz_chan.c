/*
 * Fuzz target for the parent <-> worker channel (egressd/common/chan.c):
 * chan_validate() is the parent's only gate on what a (possibly
 * compromised) worker sends. The first input byte picks the receiving side
 * (bit 0) and whether a descriptor travels with the message (bit 1); the
 * rest is the message. It goes to chan_validate() directly (an exact-size
 * copy, so ASan sees over-reads) and through chan_recv() on a real
 * SOCK_SEQPACKET pair, with and without SCM_RIGHTS. Invariants:
 *  - a message that validates has exactly the size of its type, a known
 *    type meant for that side, a non-zero id, and validates for that side
 *    only; a refused one says why;
 *  - chan_recv() accepts exactly what chan_validate() accepts, copies it
 *    unchanged, hands out a descriptor only with a successful socket
 *    reply (which must carry one) and leaks no descriptor when it refuses;
 *  - one message is one recv: nothing is left in the socket.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egressd/common/chan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fuzz_sv[2] = {-1, -1};
static int fuzz_nullfd = -1;

static void
fuzz_chan_init(void)
{
	if (fuzz_sv[0] >= 0)
		return;
	if (chan_pair(fuzz_sv) != 0)
		abort();
	fuzz_nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fuzz_nullfd < 0)
		abort();
}

/* The lowest free descriptor number: it moves if a descriptor leaked. */
static int
fuzz_next_fd(void)
{
	int fd = dup(fuzz_nullfd);

	if (fd < 0)
		abort();
	close(fd);
	return fd;
}

/* Send raw bytes (any length, even ones chan_send would refuse). */
static bool
fuzz_send_raw(const uint8_t *msg, size_t len, int passfd)
{
	struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
	struct msghdr mh;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} cbuf;

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (passfd >= 0) {
		struct cmsghdr *cm;

		memset(&cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf.buf;
		mh.msg_controllen = sizeof(cbuf.buf);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &passfd, sizeof(int));
	}
	return sendmsg(fuzz_sv[1], &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)len;
}

static void
fuzz_check_validate(const uint8_t *msg, size_t len, enum chan_side side)
{
	uint8_t *exact = malloc(len ? len : 1);
	const char *why = NULL;
	const char *why2 = NULL;
	bool ok;

	memcpy(exact, msg, len);
	ok = chan_validate(exact, len, side, &why);
	if (why == NULL)
		abort();
	if (ok) {
		struct chan_hdr hdr;

		if (len < sizeof(hdr))
			abort();
		memcpy(&hdr, exact, sizeof(hdr));
		if (hdr.type == CHAN_NONE || hdr.type >= CHAN_TYPE_MAX ||
		    chan_msg_size(hdr.type) != len || hdr.id == 0 || strcmp(why, "ok") != 0)
			abort();
		/* Every message travels in one direction only: by type, or for a
		 * document or learn (both ways) by its id's CHAN_ID_PARENT bit. */
		if (chan_validate(exact, len,
		        side == CHAN_TO_PARENT ? CHAN_TO_WORKER : CHAN_TO_PARENT, &why2))
			abort();
		if (hdr.type == CHAN_POLICY || hdr.type == CHAN_VAULT || hdr.type == CHAN_LEARN) {
			if (((hdr.id & CHAN_ID_PARENT) != 0) != (side == CHAN_TO_WORKER))
				abort();
		} else if ((hdr.type == CHAN_SOCKET_REP || hdr.type == CHAN_RESULT ||
		               hdr.type == CHAN_LEAF_REP || hdr.type == CHAN_CA) !=
		           (side == CHAN_TO_WORKER))
			abort();
		/* An ack echoes a parent id, the CA push carries one; no other child message or reply. */
		if ((hdr.type == CHAN_ACK || hdr.type == CHAN_CA) && (hdr.id & CHAN_ID_PARENT) == 0)
			abort();
		if (hdr.type == CHAN_CA) {
			struct chan_ca *c = malloc(sizeof(*c));
			memcpy(c, exact, sizeof(*c));
			if (c->cur_len == 0 || c->cur_len > CHAN_CA_DER_MAX ||
			    c->prev_len > CHAN_CA_DER_MAX)
				abort();
			free(c);
		}
		if ((hdr.type == CHAN_SOCKET_REQ || hdr.type == CHAN_READY ||
		        hdr.type == CHAN_LEAF_REQ || hdr.type == CHAN_RESULT ||
		        hdr.type == CHAN_SOCKET_REP || hdr.type == CHAN_LEAF_REP) &&
		    (hdr.id & CHAN_ID_PARENT) != 0)
			abort();
		if (hdr.type == CHAN_LEARN) {
			struct chan_learn l;
			memcpy(&l, exact, sizeof(l));
			if (memchr(l.name, '\0', sizeof(l.name)) == NULL || l.name[0] == '\0')
				abort();
		}
		if (hdr.type == CHAN_POLICY || hdr.type == CHAN_VAULT) {
			struct chan_policy *c = malloc(sizeof(*c));
			memcpy(c, exact, sizeof(*c));
			if (c->len > CHAN_POLICY_CHUNK || c->offset + c->len > c->total ||
			    c->total > (hdr.type == CHAN_VAULT ? CHAN_MAX_VAULT_BYTES
			                                       : CHAN_MAX_POLICY_BYTES))
				abort();
			free(c);
		}
		if (hdr.type == CHAN_RESULT) {
			struct chan_result r;
			memcpy(&r, exact, sizeof(r));
			if (memchr(r.msg, '\0', sizeof(r.msg)) == NULL)
				abort();
		}
	} else if (strcmp(why, "ok") == 0) {
		abort();
	}
	/* Pure: the same answer twice, and the input untouched. */
	if (chan_validate(exact, len, side, &why2) != ok || memcmp(exact, msg, len) != 0)
		abort();
	free(exact);
}

static void
fuzz_check_recv(const uint8_t *msg, size_t len, enum chan_side side, bool withfd)
{
	union chan_msg out;
	const char *why = NULL, *vwhy = NULL;
	int passfd = -2;
	int before = fuzz_next_fd();
	bool valid = chan_validate(msg, len, side, &vwhy);
	enum chan_status st;

	/* Longer than any message plus one: refused by size anyway; keep it bounded. */
	if (!fuzz_send_raw(msg, len, withfd ? fuzz_nullfd : -1))
		return;
	st = chan_recv(fuzz_sv[0], &out, side, &passfd, &why);
	if (why == NULL)
		abort();
	if (len == 0) {
		/*
		 * A zero-length datagram reads as end of stream; one that carries
		 * a descriptor is refused (and the descriptor closed).
		 */
		if (st != (withfd ? CHAN_INVALID : CHAN_EOF) || passfd != -1)
			abort();
	} else if (st == CHAN_OK) {
		bool wantfd = out.hdr.type == CHAN_SOCKET_REP && out.socket_rep.err == 0;

		if (!valid || memcmp(&out, msg, len) != 0 || wantfd != withfd)
			abort();
		if (wantfd) {
			if (passfd < 0)
				abort();
			close(passfd);
		} else if (passfd != -1) {
			abort();
		}
	} else {
		if (st != CHAN_INVALID || passfd != -1)
			abort();
		/* Refused: either it fails validation or its descriptor is wrong. */
		if (valid) {
			struct chan_hdr hdr;
			struct chan_socket_rep rep;
			memcpy(&hdr, msg, sizeof(hdr));
			memcpy(&rep, msg, len < sizeof(rep) ? len : sizeof(rep));
			if ((hdr.type == CHAN_SOCKET_REP && rep.err == 0) == withfd)
				abort();
		}
	}
	if (fuzz_next_fd() != before)
		abort();
	/* Nothing left over for the next message. */
	if (chan_recv(fuzz_sv[0], &out, side, &passfd, &why) != CHAN_AGAIN)
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum chan_side side;
	bool withfd;

	if (size == 0)
		return 0;
	fuzz_chan_init();
	side = (data[0] & 1) ? CHAN_TO_WORKER : CHAN_TO_PARENT;
	withfd = (data[0] & 2) != 0;
	data++;
	size--;
	if (size > sizeof(union chan_msg) + 16)
		return 0;
	fuzz_check_validate(data, size, CHAN_TO_PARENT);
	fuzz_check_validate(data, size, CHAN_TO_WORKER);
	fuzz_check_recv(data, size, side, withfd);
	return 0;
}
