/*
 * Parent <-> worker channel (both processes). Messages are fixed-size
 * structs on a SOCK_SEQPACKET socketpair, so one recv() is one message and
 * a short or long datagram is detectable. chan_validate() is the only gate:
 * the parent dispatches nothing that has not passed it, and a message that
 * fails it is treated as a compromised worker.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "egressd/common/chan.h"
#include "policy/name.h"

/* Size of each message type; 0 marks an unknown type. */
static const size_t chan_sizes[CHAN_TYPE_MAX] = {
    [CHAN_SOCKET_REQ] = sizeof(struct chan_socket_req),
    [CHAN_SOCKET_REP] = sizeof(struct chan_socket_rep),
    [CHAN_LEARN] = sizeof(struct chan_learn),
    [CHAN_POLICY] = sizeof(struct chan_policy),
    [CHAN_RESULT] = sizeof(struct chan_result),
    [CHAN_READY] = sizeof(struct chan_ready),
    [CHAN_LEAF_REQ] = sizeof(struct chan_leaf_req),
    [CHAN_LEAF_REP] = sizeof(struct chan_leaf_rep),
};

static const char *const chan_names[CHAN_TYPE_MAX] = {
    [CHAN_NONE] = "none",
    [CHAN_SOCKET_REQ] = "socket_req",
    [CHAN_SOCKET_REP] = "socket_rep",
    [CHAN_LEARN] = "learn",
    [CHAN_POLICY] = "policy",
    [CHAN_RESULT] = "result",
    [CHAN_READY] = "ready",
    [CHAN_LEAF_REQ] = "leaf_req",
    [CHAN_LEAF_REP] = "leaf_rep",
};

/* Name of a message type for logs. */
const char *
chan_type_name(unsigned type)
{
	if (type >= CHAN_TYPE_MAX)
		return "unknown";
	return chan_names[type];
}

/* Table size of a type, 0 if unknown. */
size_t
chan_msg_size(unsigned type)
{
	if (type >= CHAN_TYPE_MAX)
		return 0;
	return chan_sizes[type];
}

static bool
chan_family_ok(unsigned family)
{
	return family == AF_INET || family == AF_INET6;
}

static bool
chan_is_zero(const uint8_t *p, size_t n)
{
	uint8_t acc = 0;

	for (size_t i = 0; i < n; i++)
		acc |= p[i];
	return acc == 0;
}

/* The worker may only send requests; the parent only replies (and hands over the policy). */
static bool
chan_side_ok(unsigned type, enum chan_side side)
{
	switch (type) {
	case CHAN_SOCKET_REP:
	case CHAN_RESULT:
	case CHAN_LEAF_REP:
		return side == CHAN_TO_WORKER;
	case CHAN_POLICY:
		return true;
	default:
		return side == CHAN_TO_PARENT;
	}
}

/* A NUL-terminated canonical name filling the rest of the field with NULs. */
static bool
chan_name_ok(const char *name, size_t cap)
{
	const char *nul = memchr(name, '\0', cap);
	char canon[POLICY_NAME_MAX + 1];
	size_t n, clen;

	if (nul == NULL || nul == name)
		return false;
	n = (size_t)(nul - name);
	if (!chan_is_zero((const uint8_t *)nul, cap - n))
		return false;
	return n <= POLICY_NAME_MAX &&
	       policy_name_canon((const uint8_t *)name, n, 0, canon, &clen) == POLICY_NAME_OK &&
	       clen == n && memcmp(canon, name, n) == 0;
}

bool
chan_validate(const void *buf, size_t len, enum chan_side side, const char **why)
{
	struct chan_hdr hdr;
	union chan_msg m;

	*why = "ok";
	if (len < sizeof(hdr)) {
		*why = "short message";
		return false;
	}
	memcpy(&hdr, buf, sizeof(hdr));
	if (hdr.type == CHAN_NONE || hdr.type >= CHAN_TYPE_MAX) {
		*why = "unknown message type";
		return false;
	}
	if (len != chan_sizes[hdr.type]) {
		*why = "message size does not match its type";
		return false;
	}
	if (!chan_side_ok(hdr.type, side)) {
		*why = "message type not allowed in this direction";
		return false;
	}
	if (hdr.id == 0) {
		*why = "message id 0";
		return false;
	}
	memcpy(&m, buf, len);
	switch (hdr.type) {
	case CHAN_SOCKET_REQ:
		if (hdr.flags != 0 || !chan_family_ok((unsigned)m.socket_req.family) ||
		    (m.socket_req.socktype != SOCK_DGRAM && m.socket_req.socktype != SOCK_STREAM)) {
			*why = "socket request out of range";
			return false;
		}
		break;
	case CHAN_SOCKET_REP:
		if (m.socket_rep.err < 0) {
			*why = "negative errno";
			return false;
		}
		break;
	case CHAN_LEARN:
		if ((hdr.flags & ~CHAN_LEARN_MORE) != 0 || !chan_family_ok(m.learn.family) ||
		    !chan_is_zero(m.learn.pad, sizeof(m.learn.pad)) || m.learn.pad2 != 0) {
			*why = "learn message out of range";
			return false;
		}
		if (m.learn.family == AF_INET && !chan_is_zero(m.learn.addr + 4, 12)) {
			*why = "IPv4 address with trailing bytes";
			return false;
		}
		if (m.learn.timeout_s == 0 || m.learn.timeout_s > CHAN_MAX_TIMEOUT_S) {
			*why = "learn timeout out of range";
			return false;
		}
		if (!chan_name_ok(m.learn.name, sizeof(m.learn.name))) {
			*why = "learn name not canonical";
			return false;
		}
		break;
	case CHAN_POLICY: {
		const struct chan_policy *c = &m.policy;

		if ((hdr.flags & ~CHAN_POLICY_MORE) != 0 || c->pad != 0 ||
		    c->total > CHAN_MAX_POLICY_BYTES || c->len > CHAN_POLICY_CHUNK ||
		    c->offset > c->total || c->len > c->total - c->offset ||
		    ((hdr.flags & CHAN_POLICY_MORE) == 0) != (c->offset + c->len == c->total) ||
		    ((hdr.flags & CHAN_POLICY_MORE) != 0 && c->len != CHAN_POLICY_CHUNK) ||
		    !chan_is_zero((const uint8_t *)c->data + c->len, CHAN_POLICY_CHUNK - c->len)) {
			*why = "policy chunk out of range";
			return false;
		}
		break;
	}
	case CHAN_LEAF_REQ:
		if (hdr.flags != 0 || m.leaf_req.pad != 0 || m.leaf_req.key_len == 0 ||
		    m.leaf_req.key_len > CHAN_LEAF_KEY_MAX ||
		    !chan_is_zero(m.leaf_req.key + m.leaf_req.key_len,
		        CHAN_LEAF_KEY_MAX - m.leaf_req.key_len) ||
		    !chan_name_ok(m.leaf_req.name, sizeof(m.leaf_req.name))) {
			*why = "leaf request out of range";
			return false;
		}
		break;
	case CHAN_LEAF_REP:
		if (hdr.flags != 0 || m.leaf_rep.err < 0 ||
		    m.leaf_rep.der_len > CHAN_LEAF_DER_MAX ||
		    (m.leaf_rep.err == 0) != (m.leaf_rep.der_len > 0) ||
		    !chan_is_zero(m.leaf_rep.der + m.leaf_rep.der_len,
		        CHAN_LEAF_DER_MAX - m.leaf_rep.der_len)) {
			*why = "leaf reply out of range";
			return false;
		}
		break;
	case CHAN_RESULT:
		if (m.result.req_type == CHAN_NONE || m.result.req_type >= CHAN_TYPE_MAX ||
		    m.result.err < 0 || memchr(m.result.msg, '\0', sizeof(m.result.msg)) == NULL) {
			*why = "result out of range";
			return false;
		}
		break;
	default:
		if (hdr.flags != 0) {
			*why = "unexpected flags";
			return false;
		}
		break;
	}
	return true;
}

/* A close-on-exec SOCK_SEQPACKET socketpair. */
int
chan_pair(int sv[2])
{
	return socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv);
}

/* Send one message, attaching passfd by SCM_RIGHTS when >= 0. */
int
chan_send(int fd, const void *msg, int passfd)
{
	struct chan_hdr hdr;
	size_t len;
	struct iovec iov;
	struct msghdr mh;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} cbuf;
	ssize_t n;

	memcpy(&hdr, msg, sizeof(hdr));
	len = chan_msg_size(hdr.type);
	if (len == 0) {
		errno = EINVAL;
		return -1;
	}
	iov.iov_base = (void *)msg;
	iov.iov_len = len;
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
	do {
		n = sendmsg(fd, &mh, MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if ((size_t)n != len) {
		errno = EMSGSIZE;
		return -1;
	}
	return 0;
}

enum chan_status
chan_recv(int fd, union chan_msg *out, enum chan_side side, int *passfd, const char **why)
{
	/* One byte more than the largest message, to detect oversize ones. */
	uint8_t buf[sizeof(union chan_msg) + 1];
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr mh;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * 4)];
	} cbuf;
	ssize_t n;
	int fd_in = -1;
	bool bad_cmsg = false;

	*passfd = -1;
	*why = "ok";
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cbuf.buf;
	mh.msg_controllen = sizeof(cbuf.buf);
	do {
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	} while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return CHAN_AGAIN;
		*why = "recv failed";
		return CHAN_EOF;
	}
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < nfd; i++) {
				int f;
				memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				if (fd_in < 0 && i == 0)
					fd_in = f;
				else {
					close(f);
					bad_cmsg = true;
				}
			}
		} else
			bad_cmsg = true;
	}
	if ((mh.msg_flags & MSG_TRUNC) != 0)
		bad_cmsg = true;
	/*
	 * End of stream, or an empty datagram: a descriptor sent with one is
	 * closed, not kept (the caller never sees it).
	 */
	if (n == 0) {
		if (fd_in >= 0)
			close(fd_in);
		if (fd_in >= 0 || bad_cmsg || (mh.msg_flags & MSG_CTRUNC) != 0) {
			*why = "empty message with control data";
			return CHAN_INVALID;
		}
		return CHAN_EOF;
	}
	/*
	 * MSG_CTRUNC with a valid socket reply: the descriptor was sent, but
	 * this process had no slot for it (EMFILE). The kernel dropped it;
	 * the request failed, and the process lives on.
	 */
	if ((mh.msg_flags & MSG_CTRUNC) != 0 && !bad_cmsg && fd_in < 0 &&
	    chan_validate(buf, (size_t)n, side, why)) {
		memcpy(out, buf, (size_t)n);
		if (out->hdr.type == CHAN_SOCKET_REP && out->socket_rep.err == 0) {
			*why = "descriptor lost: out of descriptors";
			return CHAN_FDLOST;
		}
		*why = "truncated control data";
		return CHAN_INVALID;
	}
	if ((mh.msg_flags & MSG_CTRUNC) != 0)
		bad_cmsg = true;
	if (!chan_validate(buf, (size_t)n, side, why) || bad_cmsg) {
		if (bad_cmsg)
			*why = "unexpected or truncated control data";
		if (fd_in >= 0)
			close(fd_in);
		return CHAN_INVALID;
	}
	memcpy(out, buf, (size_t)n);
	/* Only a successful socket reply may carry a descriptor, and it must. */
	if (out->hdr.type == CHAN_SOCKET_REP && out->socket_rep.err == 0) {
		if (fd_in < 0) {
			*why = "socket reply without a descriptor";
			return CHAN_INVALID;
		}
		*passfd = fd_in;
	} else if (fd_in >= 0) {
		close(fd_in);
		*why = "descriptor on a message that carries none";
		return CHAN_INVALID;
	}
	return CHAN_OK;
}
