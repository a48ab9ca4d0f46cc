/*
 * ownnet: the sandbox's own networks from rtnetlink (see ownnet.h). The
 * dumps are answered by the kernel of our own namespace; every message is
 * checked to come from the kernel (port 0) with our sequence number, and
 * every attribute is length-checked before it is read.
 */
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "egressd/common/ownnet.h"

/* Receive buffer: a dump message set from the kernel fits (it sends at most 32 KiB). */
#define OWNNET_RECV_BUF (64 * 1024)
/* Bound on a dump's wait for the kernel (it answers at once). */
#define OWNNET_RECV_TIMEOUT_S 2

struct ownnet_acc {
	struct addrclass_own *own;
	bool full;
};

/* Add addr/prefix; a single inner or loopback address (fe80::1) is denied anyway. */
/* NLMSG_OK without its signed/unsigned comparison (clang -Wsign-compare). */
static bool
ownnet_msg_ok(const struct nlmsghdr *nh, int len)
{
	return len >= (int)sizeof(*nh) && nh->nlmsg_len >= sizeof(*nh) &&
	       nh->nlmsg_len <= (unsigned)len;
}

static void
ownnet_add(struct ownnet_acc *acc, int family, const void *addr, size_t alen, unsigned prefix)
{
	unsigned max = family == AF_INET ? 32 : 128;

	if ((family != AF_INET && family != AF_INET6) || alen != max / 8 || prefix > max)
		return;
	if (prefix == max) {
		enum addrclass c = addrclass_of(family, addr, NULL);

		if (c == ADDRCLASS_INNER || c == ADDRCLASS_LOOPBACK)
			return;
	}
	if (addrclass_own_add(acc->own, family, addr, prefix) != 0)
		acc->full = true;
}

/* An address: its on-link prefix (IFA_ADDRESS) and itself (IFA_LOCAL). */
static void
ownnet_addr_msg(struct ownnet_acc *acc, const struct nlmsghdr *nh)
{
	const struct ifaddrmsg *ifa = NLMSG_DATA(nh);
	const struct rtattr *rta;
	int len;

	if (nh->nlmsg_len < NLMSG_LENGTH(sizeof(*ifa)))
		return;
	/* Host (lo) and link scope (fe80::/10, 169.254/16) are inner already. */
	if ((ifa->ifa_family != AF_INET && ifa->ifa_family != AF_INET6) ||
	    ifa->ifa_scope >= RT_SCOPE_LINK)
		return;
	len = (int)(nh->nlmsg_len - NLMSG_LENGTH(sizeof(*ifa)));
	for (rta = IFA_RTA(ifa); RTA_OK(rta, len); rta = RTA_NEXT(rta, len)) {
		unsigned max = ifa->ifa_family == AF_INET ? 32 : 128;

		if (rta->rta_type == IFA_ADDRESS)
			ownnet_add(acc, ifa->ifa_family, RTA_DATA(rta), RTA_PAYLOAD(rta),
			    ifa->ifa_prefixlen);
		if (rta->rta_type == IFA_ADDRESS || rta->rta_type == IFA_LOCAL)
			ownnet_add(acc, ifa->ifa_family, RTA_DATA(rta), RTA_PAYLOAD(rta), max);
	}
}

/* RTA_GATEWAY or RTA_VIA of a route (or of one of its next hops). */
static void
ownnet_gateway(struct ownnet_acc *acc, int family, const struct rtattr *rta)
{
	if (rta->rta_type == RTA_GATEWAY) {
		ownnet_add(
		    acc, family, RTA_DATA(rta), RTA_PAYLOAD(rta), family == AF_INET ? 32 : 128);
	} else if (rta->rta_type == RTA_VIA && RTA_PAYLOAD(rta) >= sizeof(struct rtvia)) {
		const struct rtvia *via = RTA_DATA(rta);
		size_t alen = RTA_PAYLOAD(rta) - sizeof(*via);

		ownnet_add(acc, via->rtvia_family, via->rtvia_addr, alen,
		    via->rtvia_family == AF_INET ? 32 : 128);
	}
}

/* A route: its gateways, those of a multipath route's next hops included. */
static void
ownnet_route_msg(struct ownnet_acc *acc, const struct nlmsghdr *nh)
{
	const struct rtmsg *rt = NLMSG_DATA(nh);
	const struct rtattr *rta;
	int len;

	if (nh->nlmsg_len < NLMSG_LENGTH(sizeof(*rt)))
		return;
	if (rt->rtm_family != AF_INET && rt->rtm_family != AF_INET6)
		return;
	len = (int)(nh->nlmsg_len - NLMSG_LENGTH(sizeof(*rt)));
	for (rta = RTM_RTA(rt); RTA_OK(rta, len); rta = RTA_NEXT(rta, len)) {
		const struct rtnexthop *hop;
		int mlen;

		if (rta->rta_type != RTA_MULTIPATH) {
			ownnet_gateway(acc, rt->rtm_family, rta);
			continue;
		}
		hop = RTA_DATA(rta);
		mlen = (int)RTA_PAYLOAD(rta);
		while (mlen >= (int)sizeof(*hop) && hop->rtnh_len >= sizeof(*hop) &&
		       hop->rtnh_len <= mlen) {
			const struct rtattr *h = RTNH_DATA(hop);
			int hlen = hop->rtnh_len - (int)RTNH_LENGTH(0);

			for (; RTA_OK(h, hlen); h = RTA_NEXT(h, hlen))
				ownnet_gateway(acc, rt->rtm_family, h);
			mlen -= (int)RTNH_ALIGN(hop->rtnh_len);
			hop = RTNH_NEXT(hop);
		}
	}
}

/* One dump (RTM_GETADDR or RTM_GETROUTE, every family and table). */
static int
ownnet_dump(int fd, uint16_t type, uint32_t seq, struct ownnet_acc *acc, uint8_t *buf, char *err,
    size_t errlen)
{
	struct {
		struct nlmsghdr nh;
		struct rtmsg rt; /* the larger of rtmsg and ifaddrmsg; zero: all */
	} req;
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};

	memset(&req, 0, sizeof(req));
	req.nh.nlmsg_len =
	    NLMSG_LENGTH(type == RTM_GETADDR ? sizeof(struct ifaddrmsg) : sizeof(struct rtmsg));
	req.nh.nlmsg_type = type;
	req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	req.nh.nlmsg_seq = seq;
	if (sendto(fd, &req, req.nh.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		snprintf(err, errlen, "netlink dump request: %s", strerror(errno));
		return -1;
	}
	for (;;) {
		struct sockaddr_nl from;
		socklen_t flen = sizeof(from);
		ssize_t r = recvfrom(fd, buf, OWNNET_RECV_BUF, 0, (struct sockaddr *)&from, &flen);
		const struct nlmsghdr *nh;
		int len;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "netlink dump: %s", strerror(errno));
			return -1;
		}
		if (flen < sizeof(from) || from.nl_pid != 0)
			continue; /* not from the kernel */
		len = (int)r;
		for (nh = (const struct nlmsghdr *)buf; ownnet_msg_ok(nh, len);
		     nh = NLMSG_NEXT(nh, len)) {
			if (nh->nlmsg_seq != seq)
				continue;
			if (nh->nlmsg_type == NLMSG_DONE)
				return 0;
			if (nh->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(nh);

				if (nh->nlmsg_len < NLMSG_LENGTH(sizeof(*e))) {
					snprintf(err, errlen, "netlink dump: short error message");
					return -1;
				}
				snprintf(err, errlen, "netlink dump: %s", strerror(-e->error));
				return -1;
			}
			if (nh->nlmsg_type == RTM_NEWADDR)
				ownnet_addr_msg(acc, nh);
			else if (nh->nlmsg_type == RTM_NEWROUTE)
				ownnet_route_msg(acc, nh);
		}
	}
}

/* Read the namespace's own networks (see ownnet.h). */
int
ownnet_scan(struct addrclass_own *own, char *err, size_t errlen)
{
	struct ownnet_acc acc = {.own = own, .full = false};
	struct sockaddr_nl local = {.nl_family = AF_NETLINK};
	struct timeval tv = {OWNNET_RECV_TIMEOUT_S, 0};
	uint32_t seq = (uint32_t)time(NULL);
	uint8_t *buf;
	int fd, rc = -1;

	memset(own, 0, sizeof(*own));
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0) {
		snprintf(err, errlen, "netlink socket: %s", strerror(errno));
		return -1;
	}
	buf = malloc(OWNNET_RECV_BUF);
	if (buf == NULL) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
	    bind(fd, (struct sockaddr *)&local, sizeof(local)) != 0) {
		snprintf(err, errlen, "netlink socket: %s", strerror(errno));
		goto out;
	}
	if (ownnet_dump(fd, RTM_GETADDR, seq, &acc, buf, err, errlen) != 0 ||
	    ownnet_dump(fd, RTM_GETROUTE, seq + 1, &acc, buf, err, errlen) != 0)
		goto out;
	if (acc.full) {
		snprintf(err, errlen, "more than %d own network prefixes", ADDRCLASS_MAX_OWN);
		goto out;
	}
	rc = 0;
out:
	if (rc != 0)
		memset(own, 0, sizeof(*own));
	free(buf);
	close(fd);
	return rc;
}

/* A socket told about address and route changes (see ownnet.h). */
int
ownnet_watch_open(void)
{
	struct sockaddr_nl sa = {
	    .nl_family = AF_NETLINK,
	    .nl_groups =
	        RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE,
	};
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Drain a watch socket (see ownnet.h). */
bool
ownnet_watch_drain(int fd)
{
	uint8_t buf[8192];
	bool changed = false;

	for (;;) {
		struct sockaddr_nl from;
		socklen_t flen = sizeof(from);
		ssize_t r = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC,
		    (struct sockaddr *)&from, &flen);
		const struct nlmsghdr *nh;
		int len;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == ENOBUFS) {
			changed = true; /* notifications were lost: look again */
			continue;
		}
		if (r < 0)
			return changed;
		if (flen < sizeof(from) || from.nl_pid != 0)
			continue;
		if ((size_t)r > sizeof(buf)) {
			changed = true; /* truncated: whatever it said, look again */
			continue;
		}
		len = (int)r;
		for (nh = (const struct nlmsghdr *)buf; ownnet_msg_ok(nh, len);
		     nh = NLMSG_NEXT(nh, len))
			if (nh->nlmsg_type == RTM_NEWADDR || nh->nlmsg_type == RTM_DELADDR ||
			    nh->nlmsg_type == RTM_NEWROUTE || nh->nlmsg_type == RTM_DELROUTE)
				changed = true;
	}
}

/* own as text (see ownnet.h). */
void
ownnet_format(const struct addrclass_own *own, char *buf, size_t buflen)
{
	size_t used = 0;

	if (buflen == 0)
		return;
	buf[0] = '\0';
	for (size_t i = 0; i < own->n && used + 1 < buflen; i++) {
		char one[POLICY_ADDR_TEXT_MAX];
		int w;

		policy_addr_format(&own->net[i], one, sizeof(one));
		w = snprintf(buf + used, buflen - used, "%s%s", i ? " " : "", one);
		if (w < 0 || (size_t)w >= buflen - used)
			break;
		used += (size_t)w;
	}
}
