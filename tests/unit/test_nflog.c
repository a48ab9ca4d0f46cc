/*
 * Unit tests of egressd/priv/nflog.c's decoder (the parent's reading of a
 * kernel NFLOG message) and of the CHAN_NFLOG record it makes: the prefix,
 * the ethertype and at most CHAN_NFLOG_COPY bytes of the packet are taken
 * as they are, other messages are skipped, malformed attributes refused,
 * a prefix that is not one of our words is dropped, and the record passes
 * chan_validate() toward a child only.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>

#include <cmocka.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>

#include "egressd/common/chan.h"
#include "egressd/priv/nflog.h"

static uint8_t buf[4096];

/* A packet message: optional hdr (hwproto), prefix, payload of plen bytes (0xAB...). */
static struct nlmsghdr *
msg(uint16_t type, const char *prefix, bool hdr, size_t plen)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct nfgenmsg *g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
	uint8_t payload[512];

	nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | type;
	g->nfgen_family = AF_INET;
	g->res_id = htons(4201);
	if (hdr) {
		struct nfulnl_msg_packet_hdr ph = {.hw_protocol = htons(0x0800), .hook = 3};

		mnl_attr_put(nlh, NFULA_PACKET_HDR, sizeof(ph), &ph);
	}
	if (prefix != NULL)
		mnl_attr_put_strz(nlh, NFULA_PREFIX, prefix);
	if (plen > 0) {
		for (size_t i = 0; i < plen; i++)
			payload[i] = (uint8_t)(0xab + i);
		mnl_attr_put(nlh, NFULA_PAYLOAD, plen, payload);
	}
	return nlh;
}

static void
test_decode_record(void **state)
{
	struct nlmsghdr *nlh = msg(NFULNL_MSG_PACKET, "egressd:default_tcp", true, 40);
	struct chan_nflog r;
	const char *why;

	assert_int_equal(nflog_decode(nlh, nlh->nlmsg_len, 1700000000, &r), NFLOG_RECORD);
	assert_int_equal(r.hdr.type, CHAN_NFLOG);
	assert_int_equal(r.hwproto, 0x0800);
	assert_string_equal(r.prefix, "egressd:default_tcp");
	assert_int_equal(r.len, 40);
	assert_int_equal(r.data[0], 0xab);
	assert_int_equal(r.data[39], (uint8_t)(0xab + 39));
	assert_int_equal(r.data[40], 0);
	assert_int_equal(r.time_s, 1700000000);
	/* The parent numbers it; then it is a valid message toward a child, never from one. */
	r.hdr.id = CHAN_ID_PARENT | 5;
	assert_true(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
	assert_false(chan_validate(&r, sizeof(r), CHAN_TO_PARENT, &why));
	r.hdr.id = 5;
	assert_false(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
}

/* A copy longer than CHAN_NFLOG_COPY (a kernel with another copy range) is cut. */
static void
test_decode_long_copy(void **state)
{
	struct nlmsghdr *nlh = msg(NFULNL_MSG_PACKET, "egressd:deny", false, 300);
	struct chan_nflog r;

	assert_int_equal(nflog_decode(nlh, nlh->nlmsg_len, 0, &r), NFLOG_RECORD);
	assert_int_equal(r.len, CHAN_NFLOG_COPY);
	assert_int_equal(r.hwproto, 0);
	assert_int_equal(r.data[CHAN_NFLOG_COPY - 1], (uint8_t)(0xab + CHAN_NFLOG_COPY - 1));
}

static void
test_decode_other_and_bad(void **state)
{
	struct nlmsghdr *nlh;
	struct chan_nflog r;

	nlh = msg(NFULNL_MSG_CONFIG, "egressd:deny", true, 40);
	assert_int_equal(nflog_decode(nlh, nlh->nlmsg_len, 0, &r), NFLOG_OTHER);
	nlh = msg(NFULNL_MSG_PACKET, "egressd:deny", true, 0);
	assert_int_equal(nflog_decode(nlh, nlh->nlmsg_len, 0, &r), NFLOG_OTHER);
	nlh = msg(NFULNL_MSG_PACKET, "egressd:deny", true, 40);
	assert_int_equal(nflog_decode(nlh, nlh->nlmsg_len - 1, 0, &r), NFLOG_BAD);
	assert_int_equal(nflog_decode(nlh, 3, 0, &r), NFLOG_BAD);
	/* A packet header attribute of the wrong size. */
	nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
	mnl_nlmsg_put_extra_header(nlh, sizeof(struct nfgenmsg));
	mnl_attr_put_u16(nlh, NFULA_PACKET_HDR, 8);
	mnl_attr_put(nlh, NFULA_PAYLOAD, 4, "abcd");
	assert_int_equal(nflog_decode(nlh, nlh->nlmsg_len, 0, &r), NFLOG_BAD);
	/* A prefix without its NUL. */
	nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
	mnl_nlmsg_put_extra_header(nlh, sizeof(struct nfgenmsg));
	mnl_attr_put(nlh, NFULA_PREFIX, 4, "abcd");
	mnl_attr_put(nlh, NFULA_PAYLOAD, 4, "abcd");
	assert_int_equal(nflog_decode(nlh, nlh->nlmsg_len, 0, &r), NFLOG_BAD);
}

/* A prefix that is not one of our words (another ruleset's) is left empty. */
static void
test_decode_foreign_prefix(void **state)
{
	static const char *const bad[] = {"Egressd:deny", "egressd deny", "egressd:deny\n", "x\"y",
	    "egressd:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
	struct chan_nflog r;
	const char *why;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct nlmsghdr *nlh = msg(NFULNL_MSG_PACKET, bad[i], true, 20);

		assert_int_equal(nflog_decode(nlh, nlh->nlmsg_len, 0, &r), NFLOG_RECORD);
		assert_string_equal(r.prefix, "");
		r.hdr.id = CHAN_ID_PARENT | 9;
		assert_true(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
	}
}

/* chan_validate's own checks of a record: length, padding, prefix bytes. */
static void
test_record_validation(void **state)
{
	struct chan_nflog r;
	const char *why;

	memset(&r, 0, sizeof(r));
	r.hdr.type = CHAN_NFLOG;
	r.hdr.id = CHAN_ID_PARENT | 1;
	r.len = 1;
	r.data[0] = 0x45;
	snprintf(r.prefix, sizeof(r.prefix), "egressd:deny");
	assert_true(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
	r.len = CHAN_NFLOG_COPY + 1;
	assert_false(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
	assert_string_equal(why, "nflog record out of range");
	r.len = 1;
	r.data[5] = 1; /* a byte past len */
	assert_false(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
	r.data[5] = 0;
	r.prefix[3] = 'E';
	assert_false(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
	r.prefix[3] = 'r';
	memset(r.prefix, 'a', sizeof(r.prefix)); /* no NUL */
	assert_false(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
	snprintf(r.prefix, sizeof(r.prefix), "egressd:deny");
	r.prefix[20] = 'x'; /* a byte after the NUL */
	assert_false(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
	r.prefix[20] = 0;
	r.pad = 1;
	assert_false(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
	r.pad = 0;
	r.hdr.flags = 1;
	assert_false(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_decode_record),
	    cmocka_unit_test(test_decode_long_copy),
	    cmocka_unit_test(test_decode_other_and_bad),
	    cmocka_unit_test(test_decode_foreign_prefix),
	    cmocka_unit_test(test_record_validation),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
