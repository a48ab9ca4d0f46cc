/*
 * Conntrack revocation (parent process only). When a destination stops
 * being allowed, flows that were already established would otherwise go
 * on: the filter chain accepts established traffic before it looks at the
 * sets. This module dumps the conntrack table over ctnetlink and deletes
 * the entries whose original destination lies in a revoked prefix (and
 * port), except the sidecar's own marked flows. The next packet of such a
 * flow is seen as new, checked against the sets, and rejected.
 * The attributes parsed here come from the kernel, not from the workload.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>

#include "egressd/priv/ctflush.h"

/* Flows deleted per dump, and dumps per call: bounded work and memory. */
#define CTFLUSH_MAX_MATCHES 4096
#define CTFLUSH_MAX_ROUNDS 16
#define CTFLUSH_TUPLE_MAX 256

struct ctflush_match {
	uint16_t len;
	/*
	 * The CTA_TUPLE_ORIG attribute, whole: with its CTA_TUPLE_ZONE, so the
	 * delete finds the sidecar's flows in their zone (the zone chain).
	 */
	uint8_t tuple[CTFLUSH_TUPLE_MAX];
};

struct ctflush_ctx {
	const struct ctflush_target *t;
	size_t n;
	int family;
	uint32_t skip_mark;
	struct ctflush_match *m;
	size_t nm;
};

static bool
ctflush_in(const struct ctflush_target *t, int family, const uint8_t *addr, uint16_t port)
{
	size_t alen = family == AF_INET ? 4 : 16;
	unsigned bits = t->prefix;

	if (t->family != family || bits > alen * 8)
		return false;
	for (size_t i = 0; i < alen && bits > 0; i++) {
		uint8_t mask = bits >= 8 ? 0xff : (uint8_t)(0xff << (8 - bits));
		if ((addr[i] & mask) != (t->addr[i] & mask))
			return false;
		bits = bits >= 8 ? bits - 8 : 0;
	}
	return t->port == 0 || t->port == port;
}

static int
ctflush_attr_cb(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;
	int type = mnl_attr_get_type(a);

	if (type <= CTA_MAX)
		tb[type] = a;
	return MNL_CB_OK;
}

static int
ctflush_nested(const struct nlattr *a, const struct nlattr **tb, int max)
{
	memset(tb, 0, sizeof(*tb) * (size_t)(max + 1));
	return mnl_attr_parse_nested(a, ctflush_attr_cb, tb);
}

static int
ctflush_entry_cb(const struct nlmsghdr *nlh, void *data)
{
	struct ctflush_ctx *c = data;
	const struct nlattr *tb[CTA_MAX + 1] = {NULL};
	const struct nlattr *tt[CTA_MAX + 1], *ti[CTA_MAX + 1], *tp[CTA_MAX + 1];
	const uint8_t *dst;
	uint16_t port = 0;

	if (mnl_attr_parse(nlh, sizeof(struct nfgenmsg), ctflush_attr_cb, tb) < 0)
		return MNL_CB_OK;
	if (tb[CTA_MARK] != NULL && ntohl(mnl_attr_get_u32(tb[CTA_MARK])) == c->skip_mark)
		return MNL_CB_OK;
	if (tb[CTA_TUPLE_ORIG] == NULL || ctflush_nested(tb[CTA_TUPLE_ORIG], tt, CTA_MAX) < 0 ||
	    tt[CTA_TUPLE_IP] == NULL || ctflush_nested(tt[CTA_TUPLE_IP], ti, CTA_MAX) < 0)
		return MNL_CB_OK;
	if (c->family == AF_INET && ti[CTA_IP_V4_DST] != NULL &&
	    mnl_attr_get_payload_len(ti[CTA_IP_V4_DST]) == 4)
		dst = mnl_attr_get_payload(ti[CTA_IP_V4_DST]);
	else if (c->family == AF_INET6 && ti[CTA_IP_V6_DST] != NULL &&
	         mnl_attr_get_payload_len(ti[CTA_IP_V6_DST]) == 16)
		dst = mnl_attr_get_payload(ti[CTA_IP_V6_DST]);
	else
		return MNL_CB_OK;
	if (tt[CTA_TUPLE_PROTO] != NULL && ctflush_nested(tt[CTA_TUPLE_PROTO], tp, CTA_MAX) >= 0 &&
	    tp[CTA_PROTO_DST_PORT] != NULL)
		port = ntohs(mnl_attr_get_u16(tp[CTA_PROTO_DST_PORT]));
	for (size_t i = 0; i < c->n; i++) {
		if (!ctflush_in(&c->t[i], c->family, dst, port))
			continue;
		if (c->nm < CTFLUSH_MAX_MATCHES &&
		    mnl_attr_get_len(tb[CTA_TUPLE_ORIG]) <= CTFLUSH_TUPLE_MAX) {
			c->m[c->nm].len = mnl_attr_get_len(tb[CTA_TUPLE_ORIG]);
			memcpy(c->m[c->nm].tuple, tb[CTA_TUPLE_ORIG], c->m[c->nm].len);
			c->nm++;
		}
		break;
	}
	return MNL_CB_OK;
}

static int
ctflush_family(struct mnl_socket *nl, int family, struct ctflush_ctx *c, size_t *deleted, char *err,
    size_t errlen)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh;
	struct nfgenmsg *nfg;
	uint32_t seq = (uint32_t)time(NULL), portid = mnl_socket_get_portid(nl);
	ssize_t r;

	c->family = family;
	c->nm = 0;
	nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	nlh->nlmsg_seq = seq;
	nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
	nfg->nfgen_family = (uint8_t)family;
	nfg->version = NFNETLINK_V0;
	nfg->res_id = 0;
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
		snprintf(err, errlen, "conntrack dump: %s", strerror(errno));
		return -1;
	}
	while ((r = mnl_socket_recvfrom(nl, buf, sizeof(buf))) > 0) {
		int rc = mnl_cb_run(buf, (size_t)r, seq, portid, ctflush_entry_cb, c);
		if (rc == MNL_CB_STOP)
			break;
		if (rc < 0) {
			snprintf(err, errlen, "conntrack dump: %s", strerror(errno));
			return -1;
		}
	}
	if (r < 0) {
		snprintf(err, errlen, "conntrack dump: %s", strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < c->nm; i++) {
		nlh = mnl_nlmsg_put_header(buf);
		nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE;
		nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
		nlh->nlmsg_seq = ++seq;
		nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
		nfg->nfgen_family = (uint8_t)family;
		nfg->version = NFNETLINK_V0;
		nfg->res_id = 0;
		memcpy((char *)nlh + nlh->nlmsg_len, c->m[i].tuple, c->m[i].len);
		nlh->nlmsg_len += MNL_ALIGN(c->m[i].len);
		if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
			snprintf(err, errlen, "conntrack delete: %s", strerror(errno));
			return -1;
		}
		r = mnl_socket_recvfrom(nl, buf, sizeof(buf));
		/* An entry that expired meanwhile (ENOENT) is already gone: fine. */
		if (r < 0 ||
		    (mnl_cb_run(buf, (size_t)r, seq, portid, NULL, NULL) < 0 && errno != ENOENT)) {
			snprintf(err, errlen, "conntrack delete: %s", strerror(errno));
			return -1;
		}
		(*deleted)++;
	}
	return 0;
}

int
ctflush_revoke(const struct ctflush_target *t, size_t n, uint32_t skip_mark, size_t *deleted,
    char *err, size_t errlen)
{
	struct mnl_socket *nl;
	struct ctflush_ctx c = {.t = t, .n = n, .skip_mark = skip_mark};
	bool v4 = false, v6 = false;
	int rc = 0;

	*deleted = 0;
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		v4 |= t[i].family == AF_INET;
		v6 |= t[i].family == AF_INET6;
	}
	c.m = malloc(sizeof(*c.m) * CTFLUSH_MAX_MATCHES);
	nl = mnl_socket_open(NETLINK_NETFILTER);
	if (nl == NULL || c.m == NULL || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		snprintf(err, errlen, "conntrack socket: %s", strerror(errno));
		rc = -1;
		goto out;
	}
	/* A full match list means more may remain: dump again, a bounded number of times. */
	for (int round = 0; v4 && round < CTFLUSH_MAX_ROUNDS; round++) {
		if (ctflush_family(nl, AF_INET, &c, deleted, err, errlen) != 0) {
			rc = -1;
			goto out;
		}
		if (c.nm < CTFLUSH_MAX_MATCHES)
			break;
	}
	for (int round = 0; v6 && round < CTFLUSH_MAX_ROUNDS; round++) {
		if (ctflush_family(nl, AF_INET6, &c, deleted, err, errlen) != 0) {
			rc = -1;
			goto out;
		}
		if (c.nm < CTFLUSH_MAX_MATCHES)
			break;
	}
out:
	if (nl != NULL)
		mnl_socket_close(nl);
	free(c.m);
	return rc;
}
