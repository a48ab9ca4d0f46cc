/*
 * netns test for egressd/nftrules: runs as root in a fresh network
 * namespace (unshare --net). Installs the table through netlink, checks it
 * with `nft list`, learns, refreshes and forgets elements, updates the
 * static sets while learned elements survive, checks that rejects and the
 * DNS redirect work on real sockets, and removes the table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <linux/netlink.h>

#include <cmocka.h>

#include "egressd/priv/nftrules.h"
#include "egressd/priv/nftrules_internal.h"
#include "policy/addrclass.h"

#define GUARD_MS 5000 /* bound on waits for replies that are due at once */

struct ctx {
	struct nftrules_config cfg;
	struct nftrules *n;
};

static struct nftrules_rule
rule(enum nftrules_action act, int fam, const char *addr, int plen, uint16_t lo, uint16_t hi)
{
	struct nftrules_rule r;

	memset(&r, 0, sizeof(r));
	r.action = act;
	r.family = fam;
	assert_int_equal(inet_pton(fam, addr, r.addr), 1);
	r.prefix_len = (uint8_t)plen;
	r.port_lo = lo;
	r.port_hi = hi;
	return r;
}

/* Output of an nft command (owned, free it); *rc gets its exit status. */
static char *
nft_out(const char *args, int *rc)
{
	char cmd[256];
	size_t cap = 1 << 16, len = 0, r;
	char *buf = malloc(cap);
	FILE *f;

	assert_non_null(buf);
	snprintf(cmd, sizeof(cmd), "nft %s 2>&1", args);
	f = popen(cmd, "r");
	assert_non_null(f);
	while ((r = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += r;
		if (cap - len < 2) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
	}
	buf[len] = '\0';
	*rc = pclose(f);
	return buf;
}

static void
assert_has(const char *hay, const char *needle)
{
	if (strstr(hay, needle) == NULL)
		fail_msg("missing \"%s\" in:\n%s", needle, hay);
}

static void
assert_lacks(const char *hay, const char *needle)
{
	if (strstr(hay, needle) != NULL)
		fail_msg("unexpected \"%s\" in:\n%s", needle, hay);
}

static const struct nftrules_rule *
base_rules(size_t *n)
{
	static struct nftrules_rule r[7];

	r[0] = rule(NFTRULES_ALLOW, AF_INET, "10.0.0.0", 8, 0, 0);
	r[1] = rule(NFTRULES_DENY, AF_INET, "10.1.0.0", 16, 0, 0);
	r[2] = rule(NFTRULES_ALLOW, AF_INET, "192.0.2.1", 32, 443, 443);
	r[3] = rule(NFTRULES_ALLOW, AF_INET6, "2001:db8::", 32, 8000, 8080);
	r[4] = rule(NFTRULES_DENY, AF_INET6, "2001:db8:1::", 48, 0, 0);
	r[5] = rule(NFTRULES_ALLOW, AF_INET, "10.7.0.0", 16, 853, 853);
	/* Overlaps r[2]: the kernel would refuse overlapping elements. */
	r[6] = rule(NFTRULES_ALLOW, AF_INET, "192.0.2.0", 24, 400, 500);
	*n = 7;
	return r;
}

static int
setup(void **state)
{
	static struct ctx c;
	char err[NFTRULES_ERRLEN];

	if (system("ip link set lo up") != 0)
		return -1;
	nftrules_config_default(&c.cfg);
	c.cfg.intercept = true;
	c.n = nftrules_open(&c.cfg, err, sizeof(err));
	if (c.n == NULL) {
		fprintf(stderr, "nftrules_open: %s\n", err);
		return -1;
	}
	*state = &c;
	return 0;
}

static int
teardown(void **state)
{
	struct ctx *c = *state;

	nftrules_close(c->n);
	return 0;
}

static void
install(struct ctx *c, enum nftrules_action def)
{
	struct nftrules_static st;

	st.rules = base_rules(&st.nrules);
	st.default_action = def;
	st.own = NULL;
	if (nftrules_install(c->n, &st) != 0)
		fail_msg("install: %s", nftrules_error(c->n));
}

static void
test_install(void **state)
{
	struct ctx *c = *state;
	char *out;
	int rc;

	install(c, NFTRULES_DENY);
	/* Installing again replaces the table (delete + add in one batch). */
	install(c, NFTRULES_DENY);
	out = nft_out("list table inet egressd", &rc);
	if (rc != 0)
		free(out);
	assert_int_equal(rc, 0);
	assert_has(out, "type filter hook output priority mangle; policy accept;");
	assert_has(out, "type nat hook output priority -100; policy accept;");
	assert_has(out, "set learned4 {\n\t\ttype ipv4_addr\n\t\tflags timeout\n");
	assert_has(out, "set learnedp6 {\n\t\ttype ipv6_addr . inet_service\n\t\tflags timeout\n");
	assert_has(out, "set allowp4 {\n\t\ttype ipv4_addr . inet_service\n\t\tflags interval\n");
	assert_has(out, "elements = { 10.0.0.0/8 }");
	assert_has(out, "10.1.0.0/16");
	/* Built-in inner destinations are always denied. */
	assert_has(out, "169.254.0.0/16");
	assert_has(out, "100.100.100.200");
	assert_has(out, "fd00:ec2::254");
	assert_has(out, "meta l4proto tcp ip daddr @learned4 accept");
	assert_has(out, "192.0.2.0/24 . 400-500");
	assert_lacks(out, "192.0.2.1 . 443");
	assert_has(out, "10.7.0.0/16 . 853");
	assert_has(out, "elements = { 2001:db8::/32 . 8000-8080 }");
	assert_has(out, "2001:db8:1::/48");
	assert_has(out, "\t\tct state established,related accept\n");
	/* The dns process's mark: nothing but the resolvers (none configured here). */
	assert_has(out, "meta mark 0x00000002 reject");
	assert_has(out, "meta mark 0x00000001 udp dport 53 reject");
	assert_has(out, "meta mark 0x00000001 tcp dport 53 reject with tcp reset");
	assert_has(out, "\t\toif \"lo\" accept\n");
	assert_has(out, "icmpv6 type nd-neighbor-solicit ip6 daddr fe80::/10 accept");
	assert_has(out, "icmpv6 type nd-neighbor-advert ip6 daddr ff00::/8 accept");
	assert_has(out, "icmpv6 type nd-router-solicit ip6 daddr fe80::/10 accept");
	assert_has(out, "\t\toif \"lo\" accept\n\t\ticmpv6 type nd-router-solicit limit rate "
	                "over 1/second burst 10 packets drop\n\t\ticmpv6 type nd-router-solicit "
	                "ip6 daddr fe80::/10 accept\n");
	assert_lacks(out, "icmpv6 type nd-neighbor-solicit accept");
	assert_has(out, "udp dport 53 accept");
	assert_has(out, "meta l4proto tcp ip daddr @deny4 reject with tcp reset");
	assert_has(out, "ip6 daddr @deny6 reject with icmpx admin-prohibited");
	assert_has(out, "ip daddr . tcp dport @allowp4 accept");
	assert_has(out, "ip6 daddr . tcp dport @learnedp6 accept");
	/* Rule ports are TCP ports: no UDP accept through a port set. */
	assert_lacks(out, "udp dport @learnedp6 accept");
	assert_lacks(out, "udp dport @allowp4 accept");
	assert_has(out, "tcp dport 853 reject with tcp reset\n\t\tudp dport 853 reject with icmpx "
	                "admin-prohibited\n\t\tip daddr @allow4 accept\n");
	assert_has(out, "\t\tmeta l4proto tcp reject with tcp reset\n"
	                "\t\treject with icmpx admin-prohibited\n\t}");
	assert_has(out,
	    "meta mark 0x00000001 return\n\t\tmeta mark 0x00000002 return\n"
	    "\t\tudp dport 53 redirect to :15353\n"
	    "\t\ttcp dport 53 redirect to :15353\n\t\toif \"lo\" return\n"
	    "\t\ttcp dport 443 redirect to :15443\n\t\ttcp dport 80 redirect to :15080\n");
	/* Exemption by mark only, never by uid. */
	assert_lacks(out, "skuid");
	assert_lacks(out, "meta skgid");
	free(out);
}

static void
test_learn_refresh(void **state)
{
	struct ctx *c = *state;
	uint8_t a4[4], a6[16];
	char *out;
	int rc;

	assert_int_equal(inet_pton(AF_INET, "93.184.216.34", a4), 1);
	assert_int_equal(inet_pton(AF_INET6, "2001:db8::5", a6), 1);
	assert_int_equal(nftrules_learn(c->n, AF_INET, a4, 0, 10000), 0);
	assert_int_equal(nftrules_learn(c->n, AF_INET6, a6, 443, 3600000), 0);
	out = nft_out("list set inet egressd learned4", &rc);
	assert_int_equal(rc, 0);
	assert_has(out, "93.184.216.34 timeout 10s expires");
	free(out);
	out = nft_out("list set inet egressd learnedp6", &rc);
	assert_has(out, "2001:db8::5 . 443 timeout 1h expires");
	free(out);
	/* A re-add refreshes the timeout (the kernel updates the element). */
	assert_int_equal(nftrules_learn(c->n, AF_INET, a4, 0, 600000), 0);
	out = nft_out("list set inet egressd learned4", &rc);
	assert_has(out, "93.184.216.34 timeout 10m expires");
	free(out);
}

/* Several elements, one transaction: all present, and a bad one adds none. */
static void
test_learn_many(void **state)
{
	struct ctx *c = *state;
	struct nftrules_elem el[3];
	char *out;
	int rc;

	memset(el, 0, sizeof(el));
	for (int i = 0; i < 3; i++) {
		el[i].family = AF_INET;
		el[i].timeout_ms = 60000;
	}
	assert_int_equal(inet_pton(AF_INET, "198.51.100.21", el[0].addr), 1);
	assert_int_equal(inet_pton(AF_INET, "198.51.100.22", el[1].addr), 1);
	assert_int_equal(inet_pton(AF_INET, "198.51.100.23", el[2].addr), 1);
	el[2].port = 443;
	assert_int_equal(nftrules_learn_many(c->n, el, 3), 0);
	out = nft_out("list table inet egressd", &rc);
	assert_int_equal(rc, 0);
	assert_has(out, "198.51.100.21 timeout 1m");
	assert_has(out, "198.51.100.22 timeout 1m");
	assert_has(out, "198.51.100.23 . 443 timeout 1m");
	free(out);
	assert_int_equal(inet_pton(AF_INET, "198.51.100.24", el[0].addr), 1);
	el[1].timeout_ms = 0; /* invalid: the whole batch is refused */
	assert_int_equal(nftrules_learn_many(c->n, el, 2), -1);
	out = nft_out("list table inet egressd", &rc);
	assert_lacks(out, "198.51.100.24");
	free(out);
}

/* Non-blocking TCP connect; returns the final errno (0: still pending). */
static int
connect_result(const char *ip, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), err = 0;
	socklen_t el = sizeof(err);
	struct pollfd p;

	assert_true(fd >= 0);
	assert_int_equal(inet_pton(AF_INET, ip, &sa.sin_addr), 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		close(fd);
		return 0;
	}
	if (errno != EINPROGRESS) {
		err = errno;
		close(fd);
		return err;
	}
	p.fd = fd;
	p.events = POLLOUT;
	if (poll(&p, 1, GUARD_MS) == 1)
		assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el), 0);
	close(fd);
	return err;
}

static void
test_reject(void **state)
{
	/* Any device that takes a route will do; packets that pass are lost. */
	assert_int_equal(system("{ ip link add eg0 type dummy || ip link add eg0 type ifb || "
	                        "ip link add eg0 type bridge; } 2>/dev/null && "
	                        "ip addr add 172.16.0.1/24 dev eg0 && ip link set eg0 up && "
	                        "ip route add default dev eg0"),
	    0);
	/* Default deny: TCP reset, so the client fails fast. */
	assert_int_equal(connect_result("172.16.0.2", 80), ECONNREFUSED);
	/* Deny set inside an allowed range. */
	assert_int_equal(connect_result("10.1.2.3", 80), ECONNREFUSED);
	/* DoT to an allowed address without a port rule for 853. */
	assert_int_equal(connect_result("10.5.0.1", 853), ECONNREFUSED);
}

/* Marked and unmarked UDP to port 53: redirected to the proxy or not. */
/*
 * The sandbox's own networks are denied with the inner ranges: under
 * allow-all with 0.0.0.0/0 allowed, the on-link subnet of eg0
 * (test_reject) is refused, in the deny sets with its IPv6 spellings,
 * and an address outside it is not.
 */
static void
test_own_denied(void **state)
{
	struct ctx *c = *state;
	struct nftrules_rule r[] = {rule(NFTRULES_ALLOW, AF_INET, "0.0.0.0", 0, 0, 0)};
	struct addrclass_own own;
	struct nftrules_static st = {r, 1, NFTRULES_ALLOW, &own};
	uint8_t a[4] = {172, 16, 0, 1};
	char *out;
	int rc;

	memset(&own, 0, sizeof(own));
	assert_int_equal(addrclass_own_add(&own, AF_INET, a, 24), 0);
	if (nftrules_install(c->n, &st) != 0)
		fail_msg("install: %s", nftrules_error(c->n));
	out = nft_out("list table inet egressd", &rc);
	assert_int_equal(rc, 0);
	assert_has(out, "172.16.0.0/24");
	assert_has(out, "64:ff9b::ac10:0/120");
	assert_has(out, "2002:ac10::/40");
	free(out);
	assert_int_equal(connect_result("172.16.0.2", 80), ECONNREFUSED);
	/* Without the own networks the same policy lets it out (the SYN is lost on eg0). */
	st.own = NULL;
	if (nftrules_update_static(c->n, &st) != 0)
		fail_msg("update: %s", nftrules_error(c->n));
	out = nft_out("list table inet egressd", &rc);
	assert_lacks(out, "172.16.0.0/24");
	free(out);
	install(c, NFTRULES_DENY);
}

/* A UDP query from a socket with `mark` to dns (port 53) is refused; l (the proxy) gets nothing. */
static void
marked_dns_refused(const struct sockaddr_in *dns, int l, uint32_t mark)
{
	int m = socket(AF_INET, SOCK_DGRAM, 0);
	struct pollfd p = {.fd = m, .events = POLLIN};
	char buf[16];

	assert_true(m >= 0);
	assert_int_equal(setsockopt(m, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)), 0);
	assert_int_equal(connect(m, (const struct sockaddr *)dns, sizeof(*dns)), 0);
	if (send(m, "qm", 2, 0) == 2) {
		assert_int_equal(poll(&p, 1, GUARD_MS), 1);
		assert_int_equal(recv(m, buf, sizeof(buf), 0), -1);
	} else
		assert_true(errno == EPERM || errno == ECONNREFUSED);
	assert_int_equal(recv(l, buf, sizeof(buf), MSG_DONTWAIT), -1);
	close(m);
}

static void
test_dns_redirect_and_mark(void **state)
{
	struct ctx *c = *state;
	struct sockaddr_in proxy = {.sin_family = AF_INET, .sin_port = htons(c->cfg.dns_port)};
	struct sockaddr_in dns = {.sin_family = AF_INET, .sin_port = htons(53)};
	int l = socket(AF_INET, SOCK_DGRAM, 0), s = socket(AF_INET, SOCK_DGRAM, 0);
	struct pollfd p;
	char buf[16];

	assert_true(l >= 0 && s >= 0);
	proxy.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	dns.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(l, (struct sockaddr *)&proxy, sizeof(proxy)), 0);
	assert_int_equal(sendto(s, "q1", 2, 0, (struct sockaddr *)&dns, sizeof(dns)), 2);
	p.fd = l;
	p.events = POLLIN;
	assert_int_equal(poll(&p, 1, GUARD_MS), 1);
	assert_int_equal(recv(l, buf, sizeof(buf), 0), 2);
	assert_memory_equal(buf, "q1", 2);

	/*
	 * The sidecar's marked sockets (the intercept's mark and the dns
	 * process's) skip the redirect, and their DNS to a server that is not
	 * a configured resolver is refused in the kernel: the proxy gets
	 * nothing.
	 */
	marked_dns_refused(&dns, l, c->cfg.mark);
	marked_dns_refused(&dns, l, c->cfg.dns_mark);
	close(l);
	close(s);
}

static void
test_update_keeps_learned(void **state)
{
	struct ctx *c = *state;
	struct nftrules_rule r[] = {rule(NFTRULES_ALLOW, AF_INET, "203.0.113.0", 24, 0, 0),
	    rule(NFTRULES_DENY, AF_INET, "203.0.113.9", 32, 0, 0)};
	struct nftrules_static st = {r, 2, NFTRULES_ALLOW, NULL};
	char *out;
	int rc;

	if (nftrules_update_static(c->n, &st) != 0)
		fail_msg("update: %s", nftrules_error(c->n));
	out = nft_out("list table inet egressd", &rc);
	assert_int_equal(rc, 0);
	assert_has(out, "93.184.216.34 timeout 10m expires");
	assert_has(out, "2001:db8::5 . 443 timeout 1h expires");
	assert_has(out, "elements = { 203.0.113.0/24 }");
	assert_has(out, "203.0.113.9,");
	assert_has(out, "169.254.0.0/16");
	assert_lacks(out, "10.0.0.0/8");
	assert_lacks(out, "192.0.2.0/24 . 400-500");
	/* defaultAction allow: final accept, deny sets still rejected. */
	assert_lacks(out, "\t\treject with icmpx admin-prohibited\n\t}");
	assert_has(out, "ip daddr @learned4 accept\n\t\tip6 daddr @allow6 accept\n"
	                "\t\tmeta l4proto tcp ip6 daddr @learned6 accept\n\t\taccept\n\t}");
	assert_has(out, "ip daddr @deny4 reject with icmpx admin-prohibited");
	/* The NAT chain is untouched. */
	assert_has(out, "tcp dport 443 redirect to :15443");
	free(out);
	/* The deny rule holds under defaultAction allow. */
	assert_int_equal(connect_result("203.0.113.9", 80), ECONNREFUSED);
}

static void
test_forget(void **state)
{
	struct ctx *c = *state;
	uint8_t a4[4];
	char *out;
	int rc;

	assert_int_equal(inet_pton(AF_INET, "93.184.216.34", a4), 1);
	assert_int_equal(nftrules_forget(c->n, AF_INET, a4, 0), 0);
	out = nft_out("list set inet egressd learned4", &rc);
	assert_lacks(out, "93.184.216.34");
	free(out);
	/* Forgetting an absent element is not an error. */
	assert_int_equal(nftrules_forget(c->n, AF_INET, a4, 0), 0);
}

/* Send one ICMPv6 message of type t to dst (scope: ifindex); 0 or the errno. */
static int
nd_send(uint8_t t, const char *dst, unsigned scope)
{
	struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_scope_id = scope};
	uint8_t msg[24];
	int fd = socket(AF_INET6, SOCK_RAW, IPPROTO_ICMPV6), err = 0;

	assert_true(fd >= 0);
	assert_int_equal(inet_pton(AF_INET6, dst, &sa.sin6_addr), 1);
	memset(msg, 0, sizeof(msg));
	msg[0] = t; /* code 0, checksum by the kernel, then reserved and a target */
	memcpy(msg + 8, "exfil-payload-16", 16);
	if (sendto(fd, msg, t == 133 ? 8 : sizeof(msg), 0, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		err = errno;
	close(fd);
	return err;
}

/*
 * Neighbour discovery (RS 133, NS 135, NA 136) leaves only to link-local
 * and multicast destinations; to a routed address the default deny
 * drops it (EPERM at the sender), as any other ICMPv6.
 */
static void
test_nd_link_only(void **state)
{
	struct ctx *c = *state;
	static const uint8_t types[] = {133, 135, 136};
	unsigned ifi;

	install(c, NFTRULES_DENY);
	assert_int_equal(system("ip link add egnd0 type veth peer name egnd1 && "
	                        "ip link set egnd0 up && ip link set egnd1 up && "
	                        "ip -6 addr add fd00:6::1/64 dev egnd0 nodad && "
	                        "ip -6 route add 2001:db8:99::/48 dev egnd0"),
	    0);
	ifi = if_nametoindex("egnd0");
	assert_true(ifi > 0);
	for (size_t i = 0; i < sizeof(types); i++) {
		assert_int_equal(nd_send(types[i], "2001:db8:99::1", 0), EPERM);
		assert_int_equal(nd_send(types[i], "fd00:6::2", 0), EPERM);
		assert_int_equal(nd_send(types[i], "ff02::1:ff00:2", ifi), 0);
		assert_int_equal(nd_send(types[i], "ff02::2", ifi), 0);
		assert_int_equal(nd_send(types[i], "fe80::2", ifi), 0);
	}
	/* Other ICMPv6 (echo request) to a link-local address is not ND: dropped. */
	assert_int_equal(nd_send(128, "fe80::2", ifi), EPERM);
	assert_int_equal(system("ip link del egnd0"), 0);
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * A router-solicitation flood (EX-013b) is rate-limited: of 200 RS sent
 * to ff02::2 at once, at most the burst plus what the rate refilled while
 * they were sent leave (the kernel's own RS share the bucket, so fewer may);
 * the rest are dropped (EPERM at the sender).
 */
static void
test_rs_rate_limited(void **state)
{
	struct ctx *c = *state;
	unsigned ifi;
	int ok = 0, refused = 0;
	double t0, elapsed;

	install(c, NFTRULES_ALLOW);
	assert_int_equal(system("ip link add egrs0 type veth peer name egrs1 && "
	                        "ip link set egrs0 up && ip link set egrs1 up && "
	                        "ip -6 addr add fd00:7::1/64 dev egrs0 nodad"),
	    0);
	ifi = if_nametoindex("egrs0");
	assert_true(ifi > 0);
	t0 = now_s();
	for (int i = 0; i < 200; i++) {
		int err = nd_send(133, "ff02::2", ifi);

		if (err == 0)
			ok++;
		else {
			assert_int_equal(err, EPERM);
			refused++;
		}
	}
	elapsed = now_s() - t0;
	assert_true(ok >= 1);
	assert_true((double)ok <= NFTRULES_RS_BURST + NFTRULES_RS_RATE * elapsed + 1);
	assert_int_equal(ok + refused, 200);
	/* Neighbour solicitations are not under that limit. */
	for (int i = 0; i < 50; i++)
		assert_int_equal(nd_send(135, "ff02::1:ff00:2", ifi), 0);
	assert_int_equal(system("ip link del egrs0"), 0);
}

static void
test_remove_and_errors(void **state)
{
	struct ctx *c = *state;
	struct nftrules_static st = {NULL, 0, NFTRULES_DENY, NULL};
	uint8_t a4[4] = {192, 0, 2, 1};
	char *out;
	int rc;

	assert_int_equal(nftrules_remove_table(c->n), 0);
	out = nft_out("list table inet egressd", &rc);
	assert_int_not_equal(rc, 0);
	free(out);
	assert_int_equal(nftrules_remove_table(c->n), 0);
	/* The failing message is named, with the kernel's errno. */
	assert_int_equal(nftrules_update_static(c->n, &st), -1);
	assert_has(nftrules_error(c->n), "flush chain filter");
	assert_has(nftrules_error(c->n), strerror(ENOENT));
	assert_int_equal(nftrules_learn(c->n, AF_INET, a4, 0, 1000), -1);
	assert_has(nftrules_error(c->n), "add element to learned4");
	/* Nothing was half-applied. */
	out = nft_out("list ruleset", &rc);
	assert_lacks(out, "egressd");
	free(out);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_install),
	    cmocka_unit_test(test_learn_refresh),
	    cmocka_unit_test(test_learn_many),
	    cmocka_unit_test(test_reject),
	    cmocka_unit_test(test_dns_redirect_and_mark),
	    cmocka_unit_test(test_update_keeps_learned),
	    cmocka_unit_test(test_forget),
	    cmocka_unit_test(test_own_denied),
	    cmocka_unit_test(test_nd_link_only),
	    cmocka_unit_test(test_rs_rate_limited),
	    cmocka_unit_test(test_remove_and_errors),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
