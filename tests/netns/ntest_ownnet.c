/*
 * netns test for egressd/common/ownnet.c: runs as root in a fresh network
 * namespace (unshare --net). Builds interfaces, addresses and routes with
 * `ip`, and checks that the scan finds exactly the sandbox's own networks
 * (on-link prefixes, point-to-point ends, route gateways, multipath next
 * hops; not loopback, not link-local), and that the watch socket reports
 * an address added later.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "egressd/common/ownnet.h"
#include "policy/addrclass.h"

#define GUARD_MS 5000 /* bound on the wait for a notification that is due at once */

static void
sh(const char *cmd)
{
	if (system(cmd) != 0)
		fail_msg("command failed: %s", cmd);
}

static void
expect_add(struct addrclass_own *own, const char *text, unsigned prefix)
{
	uint8_t a[16];
	int fam = strchr(text, ':') != NULL ? AF_INET6 : AF_INET;

	assert_int_equal(inet_pton(fam, text, a), 1);
	assert_int_equal(addrclass_own_add(own, fam, a, prefix), 0);
}

static void
assert_own_equal(const struct addrclass_own *got, const struct addrclass_own *want)
{
	char g[2048], w[2048];

	if (addrclass_own_equal(got, want))
		return;
	ownnet_format(got, g, sizeof(g));
	ownnet_format(want, w, sizeof(w));
	fail_msg("own networks: got \"%s\", want \"%s\"", g, w);
}

static int
setup(void **state)
{
	(void)state;
	return system("ip link set lo up && "
	              "ip link add eo0 type veth peer name eo1 && "
	              "ip link set eo0 up && ip link set eo1 up && "
	              "ip addr add 10.9.0.2/24 dev eo0 && "
	              "ip -6 addr add fd00:9::2/64 dev eo0 nodad && "
	              "ip addr add 10.10.0.1 peer 10.10.0.2 dev eo1 && "
	              "ip route add default via 10.9.0.1 && "
	              "ip route add 192.0.2.0/24 via 198.51.100.254 dev eo0 onlink && "
	              "ip route add 198.18.0.0/15 nexthop via 198.51.100.253 dev eo0 onlink "
	              "nexthop via 198.51.100.252 dev eo1 onlink && "
	              "ip -6 route add default via fe80::1 dev eo0") == 0
	           ? 0
	           : -1;
}

/*
 * The subnets of eo0, both ends of the point-to-point address, the
 * gateway outside a subnet and both next hops of the multipath route;
 * the default gateway 10.9.0.1 lies inside 10.9.0.0/24. Not lo's
 * addresses, not fe80::/64 (link scope), not the link-local gateway.
 */
static void
test_scan(void **state)
{
	struct addrclass_own got, want;
	char err[256];

	(void)state;
	if (ownnet_scan(&got, err, sizeof(err)) != 0)
		fail_msg("scan: %s", err);
	memset(&want, 0, sizeof(want));
	expect_add(&want, "10.9.0.0", 24);
	expect_add(&want, "fd00:9::", 64);
	expect_add(&want, "10.10.0.1", 32);
	expect_add(&want, "10.10.0.2", 32);
	expect_add(&want, "198.51.100.254", 32);
	expect_add(&want, "198.51.100.253", 32);
	expect_add(&want, "198.51.100.252", 32);
	assert_own_equal(&got, &want);
}

/* A change of addresses is reported on the watch socket, and the next scan sees it. */
static void
test_watch(void **state)
{
	struct addrclass_own got;
	struct pollfd p;
	char err[256];
	uint8_t a[4] = {10, 11, 0, 77};
	int fd = ownnet_watch_open();

	(void)state;
	assert_true(fd >= 0);
	assert_false(ownnet_watch_drain(fd));
	sh("ip addr add 10.11.0.2/24 dev eo1");
	p.fd = fd;
	p.events = POLLIN;
	assert_int_equal(poll(&p, 1, GUARD_MS), 1);
	assert_true(ownnet_watch_drain(fd));
	assert_false(ownnet_watch_drain(fd));
	if (ownnet_scan(&got, err, sizeof(err)) != 0)
		fail_msg("scan: %s", err);
	assert_true(addrclass_is_own(&got, AF_INET, a, NULL));
	sh("ip route add 203.0.113.0/24 via 10.9.0.77");
	assert_int_equal(poll(&p, 1, GUARD_MS), 1);
	assert_true(ownnet_watch_drain(fd));
	close(fd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_scan),
	    cmocka_unit_test(test_watch),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
