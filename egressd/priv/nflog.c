/*
 * NFLOG reader (parent process). The kernel writes each record of the
 * table's refusing rules (`log group G`) to this socket; the parent takes
 * the rule's prefix, the ethertype and the packet's first bytes from the
 * netlink attributes and hands them to the dns child as they are. It must
 * never look inside the packet bytes (the workload's), never block its
 * loop on a flood, and never accept a message that did not come from the
 * kernel (nl_pid 0).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>

#include "egressd/priv/nflog.h"

/* Datagrams read per wake-up: the rest waits for the next loop turn. */
#define NFLOG_READS_PER_WAKE 16
#define NFLOG_BUF (64 * 1024) /* one datagram: NFLOG_QTHRESH records of CHAN_NFLOG_COPY bytes fit */
#define NFLOG_CFG_BUF 512     /* one configuration message */
#define NFLOG_ACK_TRIES 4096  /* datagrams read while waiting for a configuration ACK */

struct nflog {
	struct mnl_socket *nl;
	uint16_t group;
	uint32_t portid;
	uint32_t seq;
	uint64_t lost;
	uint8_t buf[NFLOG_BUF];
};

/* One NFULNL_MSG_CONFIG for the group, with an ACK asked for. */
static struct nlmsghdr *
nflog_cfg_msg(struct nflog *n, uint8_t *buf)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct nfgenmsg *g;

	nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	nlh->nlmsg_seq = ++n->seq;
	g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
	g->nfgen_family = AF_UNSPEC;
	g->version = NFNETLINK_V0;
	g->res_id = htons(n->group);
	return nlh;
}

/*
 * Send one configuration message and read its ACK. 0, or -1 with errno.
 * Records may come first (a table kept from an earlier run logs to the
 * group as soon as it is bound): they are skipped, a bounded number.
 */
static int
nflog_talk(struct nflog *n, struct nlmsghdr *nlh)
{
	ssize_t got;

	if (mnl_socket_sendto(n->nl, nlh, nlh->nlmsg_len) < 0)
		return -1;
	for (int i = 0; i < NFLOG_ACK_TRIES; i++) {
		int rc;

		got = mnl_socket_recvfrom(n->nl, n->buf, sizeof(n->buf));
		/* A record too big for the buffer (before the copy range is set), or dropped ones. */
		if (got < 0 && (errno == ENOSPC || errno == ENOBUFS))
			continue;
		if (got < 0)
			return -1;
		rc = mnl_cb_run(n->buf, (size_t)got, nlh->nlmsg_seq, n->portid, NULL, NULL);
		if (rc <= MNL_CB_STOP)
			return rc == MNL_CB_ERROR ? -1 : 0;
	}
	errno = EPROTO;
	return -1;
}

/* Bind the group and set the copy mode; see nflog.h. */
struct nflog *
nflog_open(uint16_t group, char *err, size_t errlen)
{
	struct nflog *n = calloc(1, sizeof(*n));
	uint8_t buf[NFLOG_CFG_BUF];
	struct nlmsghdr *nlh;
	struct nfulnl_msg_config_cmd cmd = {.command = NFULNL_CFG_CMD_BIND};
	struct nfulnl_msg_config_mode mode = {
	    .copy_range = htonl(CHAN_NFLOG_COPY), .copy_mode = NFULNL_COPY_PACKET};
	int rcv = NFLOG_RCVBUF;
	const char *step = "socket";

	if (n == NULL) {
		snprintf(err, errlen, "nflog: out of memory");
		return NULL;
	}
	n->group = group;
	n->nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
	if (n->nl == NULL)
		goto fail;
	step = "bind";
	if (mnl_socket_bind(n->nl, 0, MNL_SOCKET_AUTOPID) < 0)
		goto fail;
	n->portid = mnl_socket_get_portid(n->nl);
	/*
	 * A bigger buffer absorbs bursts (FORCE: past rmem_max, which the
	 * parent's CAP_NET_ADMIN allows); past it the kernel drops and says so
	 * (ENOBUFS, counted).
	 */
	if (setsockopt(mnl_socket_get_fd(n->nl), SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv)) !=
	    0)
		(void)setsockopt(
		    mnl_socket_get_fd(n->nl), SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	step = "bind the group (is another NFLOG reader using it? see --nflog-group)";
	nlh = nflog_cfg_msg(n, buf);
	mnl_attr_put(nlh, NFULA_CFG_CMD, sizeof(cmd), &cmd);
	if (nflog_talk(n, nlh) < 0)
		goto fail;
	step = "configure the group";
	nlh = nflog_cfg_msg(n, buf);
	mnl_attr_put(nlh, NFULA_CFG_MODE, sizeof(mode), &mode);
	mnl_attr_put_u32(nlh, NFULA_CFG_QTHRESH, htonl(NFLOG_QTHRESH));
	mnl_attr_put_u32(nlh, NFULA_CFG_TIMEOUT, htonl(NFLOG_TIMEOUT_CS));
	if (nflog_talk(n, nlh) < 0)
		goto fail;
	step = "make the socket non-blocking";
	{
		int fd = mnl_socket_get_fd(n->nl);
		int fl = fcntl(fd, F_GETFL);

		if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
			goto fail;
	}
	return n;
fail:
	snprintf(err, errlen, "nflog group %u: cannot %s: %s", group, step, strerror(errno));
	nflog_close(n);
	return NULL;
}

/* Unbind and close. */
void
nflog_close(struct nflog *n)
{
	if (n == NULL)
		return;
	if (n->nl != NULL)
		mnl_socket_close(n->nl);
	free(n);
}

int
nflog_fd(const struct nflog *n)
{
	return mnl_socket_get_fd(n->nl);
}

uint64_t
nflog_lost(const struct nflog *n)
{
	return n == NULL ? 0 : n->lost;
}

struct nflog_attrs {
	const struct nlattr *a[NFULA_MAX + 1];
};

static int
nflog_attr_cb(const struct nlattr *attr, void *data)
{
	struct nflog_attrs *t = data;
	uint16_t type = mnl_attr_get_type(attr);

	if (mnl_attr_type_valid(attr, NFULA_MAX) < 0)
		return MNL_CB_OK; /* newer attributes: not ours */
	switch (type) {
	case NFULA_PACKET_HDR:
		if (mnl_attr_validate2(
		        attr, MNL_TYPE_UNSPEC, sizeof(struct nfulnl_msg_packet_hdr)) < 0)
			return MNL_CB_ERROR;
		break;
	case NFULA_PREFIX:
		if (mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) < 0)
			return MNL_CB_ERROR;
		break;
	default:
		break;
	}
	t->a[type] = attr;
	return MNL_CB_OK;
}

/* One kernel message to a record; see nflog.h. */
enum nflog_status
nflog_decode(const void *buf, size_t len, time_t now, struct chan_nflog *out)
{
	const struct nlmsghdr *nlh = buf;
	struct nflog_attrs t;
	const char *prefix = "";
	size_t pl, dl;

	memset(out, 0, sizeof(*out));
	if (len < sizeof(*nlh) || nlh->nlmsg_len > len || !mnl_nlmsg_ok(nlh, (int)nlh->nlmsg_len))
		return NFLOG_BAD;
	if (nlh->nlmsg_type != ((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET))
		return NFLOG_OTHER;
	if (mnl_nlmsg_get_payload_len(nlh) < sizeof(struct nfgenmsg))
		return NFLOG_BAD;
	memset(&t, 0, sizeof(t));
	if (mnl_attr_parse(nlh, sizeof(struct nfgenmsg), nflog_attr_cb, &t) < 0)
		return NFLOG_BAD;
	if (t.a[NFULA_PAYLOAD] == NULL)
		return NFLOG_OTHER;
	if (t.a[NFULA_PACKET_HDR] != NULL) {
		const struct nfulnl_msg_packet_hdr *ph =
		    mnl_attr_get_payload(t.a[NFULA_PACKET_HDR]);

		out->hwproto = ntohs(ph->hw_protocol);
	}
	if (t.a[NFULA_PREFIX] != NULL)
		prefix = mnl_attr_get_str(t.a[NFULA_PREFIX]);
	/* Only our own rule names pass (chan_validate checks the same): others stay empty. */
	pl = strnlen(prefix, CHAN_NFLOG_PREFIX);
	if (pl < CHAN_NFLOG_PREFIX &&
	    strspn(prefix, "abcdefghijklmnopqrstuvwxyz0123456789_:") == pl)
		memcpy(out->prefix, prefix, pl);
	dl = mnl_attr_get_payload_len(t.a[NFULA_PAYLOAD]);
	if (dl > CHAN_NFLOG_COPY)
		dl = CHAN_NFLOG_COPY;
	memcpy(out->data, mnl_attr_get_payload(t.a[NFULA_PAYLOAD]), dl);
	out->len = (uint32_t)dl;
	out->hdr.type = CHAN_NFLOG;
	out->time_s = now > 0 ? (uint64_t)now : 0;
	return NFLOG_RECORD;
}

/* Read what is pending; see nflog.h. */
void
nflog_read(struct nflog *n, nflog_record_cb cb, void *arg)
{
	int fd = mnl_socket_get_fd(n->nl);

	for (int i = 0; i < NFLOG_READS_PER_WAKE; i++) {
		struct sockaddr_nl from;
		socklen_t fl = sizeof(from);
		ssize_t got =
		    recvfrom(fd, n->buf, sizeof(n->buf), 0, (struct sockaddr *)&from, &fl);
		const struct nlmsghdr *nlh;
		int left;
		time_t now = time(NULL);

		if (got < 0) {
			if (errno == ENOBUFS) {
				n->lost++; /* at least one record; the kernel does not say how many */
				continue;
			}
			return; /* EAGAIN, or nothing more to do this turn */
		}
		/* Only the kernel writes records; anything else is ignored whole. */
		if (fl != sizeof(from) || from.nl_family != AF_NETLINK || from.nl_pid != 0)
			continue;
		left = (int)got;
		for (nlh = (const struct nlmsghdr *)n->buf; mnl_nlmsg_ok(nlh, left);
		     nlh = mnl_nlmsg_next(nlh, &left)) {
			struct chan_nflog r;

			if (nflog_decode(nlh, nlh->nlmsg_len, now, &r) == NFLOG_RECORD)
				cb(&r, arg);
		}
	}
}
