/*
 * nftrules: the nft writer's batches and its netlink socket (parent
 * process): a batch is built in one buffer, sent once, and succeeds only
 * when every ACK has been read and matched to its request by sequence
 * number. The table's layout is in nfttable.c, its sets in nftsets.c.
 * It must never run the nft command, and never report success for a
 * batch before every ACK of it has been read.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include "egressd/priv/nftrules.h"
#include "egressd/priv/nftrules_internal.h"

/* Name of a set ("allow4", "learnedp6", ...). */
const char *
nftrules_set_name(enum nftrules_set_kind kind, int family)
{
	return nftrules_set_names[kind][family == AF_INET ? 0 : 1];
}

void
nftrules_batch_fail(struct nftrules_batch *b, const char *why)
{
	if (b->failed)
		return;
	b->failed = true;
	snprintf(b->err, sizeof(b->err), "%s", why);
}

/* Start an empty batch whose first message gets sequence number seq. */
void
nftrules_batch_init(struct nftrules_batch *b, uint32_t seq)
{
	memset(b, 0, sizeof(*b));
	b->seq = seq;
	b->set_id = 1;
}

/* Free the batch's buffers. */
void
nftrules_batch_deinit(struct nftrules_batch *b)
{
	free(b->buf);
	free(b->msgs);
	memset(b, 0, sizeof(*b));
}

/* Room for one more message; NULL (and failed) when out of memory. */
char *
nftrules_batch_reserve(struct nftrules_batch *b)
{
	if (b->failed)
		return NULL;
	if (b->cap - b->len < NFTRULES_MSG_MAX) {
		size_t ncap = b->cap ? b->cap * 2 : 4 * NFTRULES_MSG_MAX;
		uint8_t *nb = realloc(b->buf, ncap);

		if (nb == NULL) {
			nftrules_batch_fail(b, "out of memory");
			return NULL;
		}
		b->buf = nb;
		b->cap = ncap;
	}
	memset(b->buf + b->len, 0, NFTRULES_MSG_MAX);
	return (char *)b->buf + b->len;
}

/* Account for the message just built; what != NULL records it for its ACK. */
void
nftrules_batch_commit(
    struct nftrules_batch *b, struct nlmsghdr *nlh, const char *what, const char *obj)
{
	if (nlh->nlmsg_len > NFTRULES_MSG_MAX) {
		nftrules_batch_fail(b, "netlink message too large");
		return;
	}
	b->len += NLMSG_ALIGN(nlh->nlmsg_len);
	if (what == NULL)
		return;
	if (b->nmsgs == b->msgs_cap) {
		size_t ncap = b->msgs_cap ? b->msgs_cap * 2 : 64;
		struct nftrules_msg *nm = realloc(b->msgs, ncap * sizeof(*nm));

		if (nm == NULL) {
			nftrules_batch_fail(b, "out of memory");
			return;
		}
		b->msgs = nm;
		b->msgs_cap = ncap;
	}
	b->msgs[b->nmsgs].seq = nlh->nlmsg_seq;
	snprintf(b->msgs[b->nmsgs].what, NFTRULES_WHAT_LEN, "%s %s", what, obj);
	b->nmsgs++;
}

void
nftrules_batch_begin(struct nftrules_batch *b)
{
	char *p = nftrules_batch_reserve(b);

	if (p != NULL)
		nftrules_batch_commit(b, nftnl_batch_begin(p, b->seq++), NULL, NULL);
}

int
nftrules_batch_end(struct nftrules_batch *b)
{
	char *p = nftrules_batch_reserve(b);

	if (p != NULL)
		nftrules_batch_commit(b, nftnl_batch_end(p, b->seq++), NULL, NULL);
	return b->failed ? -1 : 0;
}

/* ---- socket side ---- */

/* Defaults: table egressd, mark 0x1, DNS 15353, 443->15443 and 80->15080 off. */
void
nftrules_config_default(struct nftrules_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->table, sizeof(cfg->table), "%s", NFTRULES_TABLE_DEFAULT);
	cfg->mark = NFTRULES_MARK_DEFAULT;
	cfg->dns_mark = NFTRULES_DNS_MARK_DEFAULT;
	cfg->listen_mark = NFTRULES_LISTEN_MARK_DEFAULT;
	cfg->dns_port = NFTRULES_DNS_PORT_DEFAULT;
	cfg->intercept = false;
	cfg->nintercept = 2;
	cfg->intercept_ports[0] = (struct nftrules_redirect){443, 15443};
	cfg->intercept_ports[1] = (struct nftrules_redirect){80, 15080};
}

/* Open a NETLINK_NETFILTER socket; NULL and err filled on failure. Owned. */
struct nftrules *
nftrules_open(const struct nftrules_config *cfg, char *err, size_t errlen)
{
	struct nftrules *n = calloc(1, sizeof(*n));
	int one = 1;

	if (n == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	n->cfg = *cfg;
	n->nl = mnl_socket_open(NETLINK_NETFILTER);
	if (n->nl == NULL || mnl_socket_bind(n->nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		snprintf(err, errlen, "netlink socket: %s", strerror(errno));
		nftrules_close(n);
		return NULL;
	}
	/* Error ACKs without a copy of the request: small, many fit. */
	(void)mnl_socket_setsockopt(n->nl, NETLINK_CAP_ACK, &one, sizeof(one));
	n->portid = mnl_socket_get_portid(n->nl);
	n->seq = (uint32_t)time(NULL);
	return n;
}

static void
sockbuf(struct nftrules *n, int force, int plain, size_t want)
{
	int fd = mnl_socket_get_fd(n->nl), v = want > (1u << 30) ? (1 << 30) : (int)want;

	if (setsockopt(fd, SOL_SOCKET, force, &v, sizeof(v)) < 0)
		(void)setsockopt(fd, SOL_SOCKET, plain, &v, sizeof(v));
}

/*
 * Send the batch once and read every ACK. The kernel processes a batch
 * inside sendmsg, so all replies are queued when it returns: they are read
 * without blocking, each matched to its request by sequence number.
 */
static int
run_batch(struct nftrules *n, struct nftrules_batch *b, int ignore_errno)
{
	uint8_t rbuf[NFTRULES_RECV_BUF];
	bool *acked;
	size_t nacked = 0;
	int first_err = 0;
	const char *first_what = "batch";
	uint32_t first_seq = 0;
	ssize_t r;

	if (b->failed) {
		snprintf(n->err, sizeof(n->err), "%s", b->err);
		errno = EINVAL;
		return -1;
	}
	acked = calloc(b->nmsgs ? b->nmsgs : 1, sizeof(*acked));
	if (acked == NULL) {
		snprintf(n->err, sizeof(n->err), "out of memory");
		return -1;
	}
	sockbuf(n, SO_SNDBUFFORCE, SO_SNDBUF, b->len + 65536);
	/* One skb per ACK: budget its truesize, not its length. */
	sockbuf(n, SO_RCVBUFFORCE, SO_RCVBUF, b->nmsgs * 2048 + 262144);
	r = mnl_socket_sendto(n->nl, b->buf, b->len);
	if (r < 0 || (size_t)r != b->len) {
		snprintf(n->err, sizeof(n->err), "netlink send: %s",
		    r < 0 ? strerror(errno) : "short write");
		free(acked);
		return -1;
	}
	for (;;) {
		const struct nlmsghdr *nlh;
		int len;

		r = recv(mnl_socket_get_fd(n->nl), rbuf, sizeof(rbuf), MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (r < 0) {
			/* ENOBUFS: ACKs were lost, the outcome is unknown. */
			first_err = errno;
			first_what = "netlink receive";
			break;
		}
		len = (int)r;
		for (nlh = (const struct nlmsghdr *)rbuf; mnl_nlmsg_ok(nlh, len);
		     nlh = mnl_nlmsg_next(nlh, &len)) {
			const struct nlmsgerr *e;
			size_t i;

			if (nlh->nlmsg_type != NLMSG_ERROR ||
			    nlh->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
				continue;
			e = mnl_nlmsg_get_payload(nlh);
			for (i = 0; i < b->nmsgs && b->msgs[i].seq != nlh->nlmsg_seq; i++)
				;
			if (i < b->nmsgs && !acked[i]) {
				acked[i] = true;
				nacked++;
			}
			if (e->error != 0 && -e->error != ignore_errno && first_err == 0) {
				first_err = -e->error;
				first_seq = nlh->nlmsg_seq;
				first_what = i < b->nmsgs ? b->msgs[i].what : "batch";
			}
		}
	}
	free(acked);
	if (first_err != 0) {
		snprintf(n->err, sizeof(n->err), "%s (seq %u): %s", first_what, first_seq,
		    strerror(first_err));
		errno = first_err;
		return -1;
	}
	if (nacked != b->nmsgs) {
		snprintf(n->err, sizeof(n->err), "netlink: %zu of %zu ACKs missing",
		    b->nmsgs - nacked, b->nmsgs);
		errno = EPROTO;
		return -1;
	}
	n->err[0] = '\0';
	return 0;
}

static int
finish(struct nftrules *n, struct nftrules_batch *b, int built, int ignore_errno)
{
	int rc = -1;

	if (built == 0)
		rc = run_batch(n, b, ignore_errno);
	else
		snprintf(n->err, sizeof(n->err), "%s", b->err);
	n->seq = b->seq;
	nftrules_batch_deinit(b);
	return rc;
}

/* Replace the whole table (delete if present, create, fill) atomically. */
int
nftrules_install(struct nftrules *n, const struct nftrules_static *st)
{
	struct nftrules_batch b;

	nftrules_batch_init(&b, n->seq);
	return finish(n, &b, nftrules_build_install(&b, &n->cfg, st), 0);
}

/* Refill allow/deny sets and rebuild the filter chain; learned sets kept. */
int
nftrules_update_static(struct nftrules *n, const struct nftrules_static *st)
{
	struct nftrules_batch b;

	nftrules_batch_init(&b, n->seq);
	return finish(n, &b, nftrules_build_update_static(&b, &n->cfg, st), 0);
}

void
nftrules_proxy(const struct nftrules *n, struct nftrules_dest *d, size_t *count)
{
	memcpy(d, n->cfg.proxy_dests, n->cfg.nproxy * sizeof(*d));
	*count = n->cfg.nproxy;
}

int
nftrules_set_proxy(struct nftrules *n, const struct nftrules_dest *d, size_t count,
    const struct nftrules_static *st)
{
	struct nftrules_dest old[NFTRULES_MAX_PROXY];
	size_t nold = n->cfg.nproxy;

	if (count > NFTRULES_MAX_PROXY || !n->cfg.proxy) {
		snprintf(n->err, sizeof(n->err), "%s",
		    n->cfg.proxy ? "too many proxy addresses" : "no chained proxy configured");
		return -1;
	}
	memcpy(old, n->cfg.proxy_dests, sizeof(old));
	memcpy(n->cfg.proxy_dests, d, count * sizeof(*d));
	n->cfg.nproxy = count;
	if (nftrules_update_static(n, st) != 0) {
		memcpy(n->cfg.proxy_dests, old, sizeof(old));
		n->cfg.nproxy = nold;
		return -1;
	}
	return 0;
}

/* Add (or refresh) a learned address; port 0 = all ports. timeout in ms. */
int
nftrules_learn(
    struct nftrules *n, int family, const uint8_t *addr, uint16_t port, uint64_t timeout_ms)
{
	struct nftrules_batch b;

	nftrules_batch_init(&b, n->seq);
	return finish(
	    n, &b, nftrules_build_learn(&b, &n->cfg, family, addr, port, timeout_ms, false), 0);
}

/*
 * Add (or refresh) several learned elements in one transaction: one
 * netlink round trip per DNS answer, however many addresses it has.
 */
int
nftrules_learn_many(struct nftrules *n, const struct nftrules_elem *el, size_t count)
{
	struct nftrules_batch b;
	int built = 0;

	nftrules_batch_init(&b, n->seq);
	if (!nftrules_config_ok(&b, &n->cfg))
		built = -1;
	else {
		nftrules_batch_begin(&b);
		for (size_t i = 0; i < count && built == 0; i++)
			built = nftrules_msg_learn(&b, &n->cfg, el[i].family, el[i].addr,
			    el[i].port, el[i].timeout_ms, false);
		if (built == 0)
			built = nftrules_batch_end(&b);
	}
	return finish(n, &b, built, 0);
}

/* Remove a learned address; absent is not an error. */
int
nftrules_forget(struct nftrules *n, int family, const uint8_t *addr, uint16_t port)
{
	struct nftrules_batch b;

	nftrules_batch_init(&b, n->seq);
	return finish(
	    n, &b, nftrules_build_learn(&b, &n->cfg, family, addr, port, 0, true), ENOENT);
}

/* Delete the table; absent is not an error. */
int
nftrules_remove_table(struct nftrules *n)
{
	struct nftrules_batch b;

	nftrules_batch_init(&b, n->seq);
	return finish(n, &b, nftrules_build_remove_table(&b, &n->cfg), ENOENT);
}

/* The last error message (valid until the next call on n). */
const char *
nftrules_error(const struct nftrules *n)
{
	return n->err;
}

/* Close the socket and free n (accepts NULL). The table stays in place. */
void
nftrules_close(struct nftrules *n)
{
	if (n == NULL)
		return;
	if (n->nl != NULL)
		mnl_socket_close(n->nl);
	free(n);
}

static int
nftrules_gen_cb(const struct nlmsghdr *nlh, void *data)
{
	struct nlattr *a;

	mnl_attr_for_each(a, nlh, sizeof(struct nfgenmsg))
	{
		if (mnl_attr_get_type(a) == NFTA_GEN_ID && mnl_attr_validate(a, MNL_TYPE_U32) >= 0)
			*(uint32_t *)data = ntohl(mnl_attr_get_u32(a));
	}
	return MNL_CB_OK;
}

/*
 * The ruleset generation: the kernel bumps it on every committed change
 * by anyone. The watchdog compares it with the one after our own last
 * change to notice tampering (a workload that was given CAP_NET_ADMIN).
 */
int
nftrules_genid(struct nftrules *n, uint32_t *genid)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct nfgenmsg *nfg;
	uint32_t seq = ++n->seq;
	ssize_t r;
	int rc;

	nlh->nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	nlh->nlmsg_seq = seq;
	nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
	nfg->nfgen_family = AF_UNSPEC;
	nfg->version = NFNETLINK_V0;
	nfg->res_id = 0;
	*genid = 0;
	if (mnl_socket_sendto(n->nl, nlh, nlh->nlmsg_len) < 0) {
		snprintf(n->err, sizeof(n->err), "getgen: %s", strerror(errno));
		return -1;
	}
	do {
		r = mnl_socket_recvfrom(n->nl, buf, sizeof(buf));
		if (r < 0) {
			snprintf(n->err, sizeof(n->err), "getgen: %s", strerror(errno));
			return -1;
		}
		rc = mnl_cb_run(buf, (size_t)r, seq, n->portid, nftrules_gen_cb, genid);
	} while (rc > 0);
	if (rc < 0) {
		snprintf(n->err, sizeof(n->err), "getgen: %s", strerror(errno));
		return -1;
	}
	return 0;
}
