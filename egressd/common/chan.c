/*
 * Parent <-> worker channel (both processes). Messages are fixed-size
 * structs on a SOCK_SEQPACKET socketpair, so one recv() is one message and
 * a short or long datagram is detectable. chan_validate() is the only gate:
 * the parent dispatches nothing that has not passed it, and a message that
 * fails it is treated as a compromised worker.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
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
    [CHAN_VAULT] = sizeof(struct chan_policy),
    [CHAN_ACK] = sizeof(struct chan_ack),
    [CHAN_EVENT] = sizeof(struct chan_event),
    [CHAN_CA] = sizeof(struct chan_ca),
    [CHAN_NFLOG] = sizeof(struct chan_nflog),
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
    [CHAN_VAULT] = "vault",
    [CHAN_ACK] = "ack",
    [CHAN_EVENT] = "event",
    [CHAN_CA] = "ca",
    [CHAN_NFLOG] = "nflog",
};

static const char *const chan_roles[CHAN_ROLE_MAX] = {
    [CHAN_ROLE_CONTROL] = "control",
    [CHAN_ROLE_DNS] = "dns",
    [CHAN_ROLE_INTERCEPT] = "intercept",
    [CHAN_ROLE_REPORT] = "report",
};

const char *
chan_role_name(enum chan_role role)
{
	if ((unsigned)role >= CHAN_ROLE_MAX)
		return "unknown";
	return chan_roles[role];
}

/* What each role may send the parent; see chan.h and docs/privsep.md. */
bool
chan_role_may_send(enum chan_role role, const union chan_msg *m)
{
	/* The CA certificates come from the parent, which holds the key; no child tells it one. */
	if (m->hdr.type == CHAN_CA)
		return false;
	switch (role) {
	case CHAN_ROLE_CONTROL:
		/* ACK: of the CA certificates pushed to it (parent_ack checks it was pushed some). */
		return m->hdr.type == CHAN_POLICY || m->hdr.type == CHAN_VAULT ||
		       m->hdr.type == CHAN_READY || m->hdr.type == CHAN_ACK;
	case CHAN_ROLE_DNS:
		if (m->hdr.type == CHAN_SOCKET_REQ)
			return m->socket_req.socktype == SOCK_DGRAM ||
			       m->socket_req.socktype == SOCK_STREAM;
		if (m->hdr.type == CHAN_EVENT)
			return m->event.kind == CHAN_EVENT_DNS_DENY ||
			       m->event.kind == CHAN_EVENT_CONN_DENY;
		return m->hdr.type == CHAN_LEARN || m->hdr.type == CHAN_READY ||
		       m->hdr.type == CHAN_ACK;
	case CHAN_ROLE_INTERCEPT:
		if (m->hdr.type == CHAN_SOCKET_REQ)
			return m->socket_req.socktype == SOCK_STREAM;
		if (m->hdr.type == CHAN_EVENT)
			return m->event.kind == CHAN_EVENT_CONN_DENY ||
			       m->event.kind == CHAN_EVENT_VAULT_DENY;
		return m->hdr.type == CHAN_LEAF_REQ || m->hdr.type == CHAN_READY ||
		       m->hdr.type == CHAN_ACK;
	case CHAN_ROLE_REPORT:
		/* It reports to the outside: it tells the parent nothing but that it serves. */
		if (m->hdr.type == CHAN_SOCKET_REQ)
			return m->socket_req.socktype == SOCK_STREAM;
		return m->hdr.type == CHAN_READY;
	default:
		return false;
	}
}

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

/*
 * A child sends requests, READY and ACK; the parent replies, and pushes
 * documents and learns. Documents and learns travel both ways.
 */
static bool
chan_side_ok(unsigned type, enum chan_side side)
{
	switch (type) {
	case CHAN_SOCKET_REP:
	case CHAN_RESULT:
	case CHAN_LEAF_REP:
	case CHAN_CA:
	case CHAN_NFLOG:
		return side == CHAN_TO_WORKER;
	case CHAN_POLICY:
	case CHAN_VAULT:
	case CHAN_LEARN:
	case CHAN_EVENT:
		return true;
	default:
		return side == CHAN_TO_PARENT;
	}
}

/*
 * Ids by direction (chan.h): a child's own requests stay below
 * CHAN_ID_PARENT and so do the parent's replies to them; the parent's
 * pushes and a child's acknowledgements of them carry it.
 */
static bool
chan_id_ok(unsigned type, uint32_t id, enum chan_side side)
{
	bool parent_id = (id & CHAN_ID_PARENT) != 0;

	switch (type) {
	case CHAN_ACK:
	case CHAN_CA: /* a push, never a reply */
	case CHAN_NFLOG:
		return parent_id;
	case CHAN_POLICY:
	case CHAN_VAULT:
	case CHAN_LEARN:
	case CHAN_EVENT:
		return parent_id == (side == CHAN_TO_WORKER);
	default:
		return !parent_id;
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

/* An event: known kind, an address or a canonical name (or both), a reason word. */
static bool
chan_event_ok(const struct chan_event *e)
{
	const char *nul = memchr(e->reason, '\0', sizeof(e->reason));
	size_t rl;

	if (e->hdr.flags != 0 || e->kind == 0 || e->kind >= CHAN_EVENT_KIND_MAX || nul == NULL ||
	    nul == e->reason)
		return false;
	rl = (size_t)(nul - e->reason);
	if (!chan_is_zero((const uint8_t *)nul, sizeof(e->reason) - rl))
		return false;
	for (size_t i = 0; i < rl; i++)
		if (!((e->reason[i] >= 'a' && e->reason[i] <= 'z') ||
		        (e->reason[i] >= '0' && e->reason[i] <= '9') || e->reason[i] == '_'))
			return false;
	if (e->family == 0) {
		if (!chan_is_zero(e->addr, sizeof(e->addr)))
			return false;
	} else if (!chan_family_ok(e->family) ||
	           (e->family == AF_INET && !chan_is_zero(e->addr + 4, 12))) {
		return false;
	}
	if (chan_is_zero((const uint8_t *)e->name, sizeof(e->name)))
		return e->family != 0;
	return chan_name_ok(e->name, sizeof(e->name));
}

/* An NFLOG record: a prefix word, len in range, nothing past len or the prefix's NUL. */
static bool
chan_nflog_ok(const struct chan_nflog *r)
{
	const char *nul = memchr(r->prefix, '\0', sizeof(r->prefix));
	size_t pl;

	if (r->hdr.flags != 0 || r->pad != 0 || r->len > CHAN_NFLOG_COPY || nul == NULL)
		return false;
	pl = (size_t)(nul - r->prefix);
	if (!chan_is_zero((const uint8_t *)nul, sizeof(r->prefix) - pl) ||
	    !chan_is_zero(r->data + r->len, CHAN_NFLOG_COPY - r->len))
		return false;
	for (size_t i = 0; i < pl; i++)
		if (!((r->prefix[i] >= 'a' && r->prefix[i] <= 'z') ||
		        (r->prefix[i] >= '0' && r->prefix[i] <= '9') || r->prefix[i] == '_' ||
		        r->prefix[i] == ':'))
			return false;
	return true;
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
	if (!chan_id_ok(hdr.type, hdr.id, side)) {
		*why = "message id of the wrong side";
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
		if ((hdr.flags & ~(CHAN_LEARN_MORE | CHAN_LEARN_PROXY)) != 0 ||
		    !chan_family_ok(m.learn.family) ||
		    !chan_is_zero(m.learn.pad, sizeof(m.learn.pad)) || m.learn.pad2 != 0) {
			*why = "learn message out of range";
			return false;
		}
		if (m.learn.family == AF_INET && !chan_is_zero(m.learn.addr + 4, 12)) {
			*why = "IPv4 address with trailing bytes";
			return false;
		}
		if ((hdr.flags & CHAN_LEARN_PROXY) != 0 && m.learn.port != 0) {
			*why = "proxy address with a port scope";
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
	case CHAN_POLICY:
	case CHAN_VAULT: {
		const struct chan_policy *c = &m.policy;
		uint32_t max =
		    hdr.type == CHAN_VAULT ? CHAN_MAX_VAULT_BYTES : CHAN_MAX_POLICY_BYTES;
		bool bad =
		    (hdr.flags & ~CHAN_POLICY_MORE) != 0 || c->pad != 0 || c->total > max ||
		    c->len > CHAN_POLICY_CHUNK || c->offset > c->total ||
		    c->len > c->total - c->offset ||
		    ((hdr.flags & CHAN_POLICY_MORE) == 0) != (c->offset + c->len == c->total) ||
		    ((hdr.flags & CHAN_POLICY_MORE) != 0 && c->len != CHAN_POLICY_CHUNK) ||
		    !chan_is_zero((const uint8_t *)c->data + c->len, CHAN_POLICY_CHUNK - c->len);

		/* A vault chunk holds secrets: no copy of it stays on this stack. */
		if (hdr.type == CHAN_VAULT)
			explicit_bzero(&m, sizeof(m));
		if (bad) {
			*why = hdr.type == CHAN_VAULT ? "vault chunk out of range"
			                              : "policy chunk out of range";
			return false;
		}
		break;
	}
	case CHAN_EVENT:
		if (!chan_event_ok(&m.event)) {
			*why = "event out of range";
			return false;
		}
		break;
	case CHAN_NFLOG:
		if (!chan_nflog_ok(&m.nflog)) {
			*why = "nflog record out of range";
			return false;
		}
		break;
	case CHAN_ACK:
		if (hdr.flags != 0 || m.ack.err < 0 || m.ack.pad != 0) {
			*why = "ack out of range";
			return false;
		}
		break;
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
	case CHAN_CA:
		if (hdr.flags != 0 || m.ca.cur_len == 0 || m.ca.cur_len > CHAN_CA_DER_MAX ||
		    m.ca.prev_len > CHAN_CA_DER_MAX ||
		    !chan_is_zero(m.ca.cur + m.ca.cur_len, CHAN_CA_DER_MAX - m.ca.cur_len) ||
		    !chan_is_zero(m.ca.prev + m.ca.prev_len, CHAN_CA_DER_MAX - m.ca.prev_len)) {
			*why = "ca message out of range";
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

static int chan_sendmsg(int fd, const void *msg, int passfd, int flags);

/* Send one message, attaching passfd by SCM_RIGHTS when >= 0. */
int
chan_send(int fd, const void *msg, int passfd)
{
	return chan_sendmsg(fd, msg, passfd, 0);
}

/* Send one message only if there is room now; see chan.h. */
int
chan_offer(int fd, const void *msg)
{
	return chan_sendmsg(fd, msg, -1, MSG_DONTWAIT);
}

static int
chan_sendmsg(int fd, const void *msg, int passfd, int flags)
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
		n = sendmsg(fd, &mh, MSG_NOSIGNAL | flags);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if ((size_t)n != len) {
		errno = EMSGSIZE;
		return -1;
	}
	return 0;
}

/* One byte more than the largest message, to detect oversize ones. */
#define CHAN_RECV_BUF (sizeof(union chan_msg) + 1)

static enum chan_status
chan_recv_into(
    int fd, uint8_t *buf, union chan_msg *out, enum chan_side side, int *passfd, const char **why)
{
	struct iovec iov = {.iov_base = buf, .iov_len = CHAN_RECV_BUF};
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

enum chan_status
chan_recv(int fd, union chan_msg *out, enum chan_side side, int *passfd, const char **why)
{
	uint8_t buf[CHAN_RECV_BUF];
	enum chan_status st;
	uint16_t type;

	buf[0] = buf[1] = 0; /* nothing received: no type */
	st = chan_recv_into(fd, buf, out, side, passfd, why);

	/* A vault chunk holds secrets: the copy in this frame goes now, valid or not. */
	memcpy(&type, buf, sizeof(type));
	if (type == CHAN_VAULT)
		explicit_bzero(buf, sizeof(buf));
	return st;
}

/* ---- chunked documents ---- */

void
chan_doc_reset(struct chan_doc *d)
{
	if (d->buf != NULL) {
		explicit_bzero(d->buf, d->total);
		free(d->buf);
	}
	memset(d, 0, sizeof(*d));
}

enum chan_doc_status
chan_doc_feed(struct chan_doc *d, const union chan_msg *m)
{
	const struct chan_policy *c = &m->policy;

	if (c->offset == 0) {
		if (d->buf != NULL)
			return CHAN_DOC_BAD; /* begun twice */
		d->buf = malloc(c->total ? c->total : 1);
		if (d->buf == NULL)
			return CHAN_DOC_NOMEM;
		d->total = c->total;
		d->have = 0;
		d->id = m->hdr.id;
		d->type = m->hdr.type;
	} else if (d->buf == NULL || m->hdr.id != d->id || m->hdr.type != d->type ||
	           c->total != d->total || c->offset != d->have)
		return CHAN_DOC_BAD;
	memcpy(d->buf + d->have, c->data, c->len);
	d->have += c->len;
	return (m->hdr.flags & CHAN_POLICY_MORE) != 0 ? CHAN_DOC_MORE : CHAN_DOC_DONE;
}

char *
chan_doc_take(struct chan_doc *d, size_t *len)
{
	char *buf = d->buf;

	*len = d->total;
	if (d->total == 0) {
		free(buf);
		buf = NULL;
	}
	memset(d, 0, sizeof(*d));
	return buf;
}

/* One send, waiting for room until the deadline. */
int
chan_send_wait(int fd, const void *msg, int timeout_ms)
{
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		int rc;

		if (chan_send(fd, msg, -1) == 0)
			return 0;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS)
			return -1;
		rc = poll(&pfd, 1, timeout_ms);
		if (rc == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (rc < 0 && errno != EINTR)
			return -1;
	}
}

size_t
chan_doc_chunk(
    struct chan_policy *c, unsigned type, uint32_t id, const char *doc, size_t len, size_t off)
{
	size_t n = len - off > CHAN_POLICY_CHUNK ? CHAN_POLICY_CHUNK : len - off;

	memset(c, 0, sizeof(*c));
	c->hdr.type = (uint16_t)type;
	c->hdr.id = id;
	c->total = (uint32_t)len;
	c->offset = (uint32_t)off;
	c->len = (uint32_t)n;
	if (n > 0)
		memcpy(c->data, doc + off, n);
	if (off + n < len)
		c->hdr.flags = CHAN_POLICY_MORE;
	return off + n;
}

int
chan_doc_send(int fd, unsigned type, uint32_t id, const char *doc, size_t len, int timeout_ms)
{
	struct chan_policy *c = malloc(sizeof(*c));
	size_t off = 0;
	int rc = 0;

	if (c == NULL)
		return -1;
	do {
		off = chan_doc_chunk(c, type, id, doc, len, off);
		rc = chan_send_wait(fd, c, timeout_ms);
	} while (rc == 0 && off < len);
	explicit_bzero(c, sizeof(*c));
	free(c);
	return rc;
}
