/*
 * Unit tests for egressd/nftrules batch builders, without root: each batch
 * is parsed back with libnftnl and its messages, sequence numbers, sets,
 * chains, rules and elements are checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <endian.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include <cmocka.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_conntrack_tuple_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include "egressd/priv/nftrules.h"
#include "egressd/priv/nftrules_internal.h"
#include "egressd/dns/krule.h"
#include "policy/addrclass.h"

#define SEQ0 1000

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

static uint16_t
cmd_of(const struct nlmsghdr *nlh)
{
	return nlh->nlmsg_type & 0xff;
}

/* Walk a batch: begin first, end last, seq consecutive, ACK on the rest. */
static size_t
check_framing(const struct nftrules_batch *b)
{
	const struct nlmsghdr *nlh = (const struct nlmsghdr *)b->buf;
	int len = (int)b->len;
	uint32_t seq = SEQ0;
	size_t n = 0, acked = 0;
	bool end_seen = false;

	for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len), n++) {
		assert_false(end_seen);
		assert_int_equal(nlh->nlmsg_seq, seq++);
		if (n == 0) {
			assert_int_equal(nlh->nlmsg_type, NFNL_MSG_BATCH_BEGIN);
			continue;
		}
		if (nlh->nlmsg_type == NFNL_MSG_BATCH_END) {
			end_seen = true;
			continue;
		}
		assert_int_equal(nlh->nlmsg_type >> 8, NFNL_SUBSYS_NFTABLES);
		assert_true(nlh->nlmsg_flags & NLM_F_ACK);
		/* Each acked message is recorded with its sequence number. */
		assert_int_equal(b->msgs[acked].seq, nlh->nlmsg_seq);
		acked++;
	}
	assert_int_equal(len, 0);
	assert_true(end_seen);
	assert_int_equal(acked, b->nmsgs);
	return n;
}

/* Elements of the NEWSETELEM messages for set name, keys concatenated. */
#define ELEMS_MAX 256

struct elems {
	size_t n;
	uint8_t key[ELEMS_MAX][20];
	uint8_t key_end[ELEMS_MAX][20];
	uint32_t klen[ELEMS_MAX];
	uint32_t flags[ELEMS_MAX];
	uint64_t timeout[ELEMS_MAX];
};

static void
data_value(const struct nlattr *nest, uint8_t *out, uint32_t *len)
{
	const struct nlattr *a;

	mnl_attr_for_each_nested(a, nest)
	{
		if (mnl_attr_get_type(a) == NFTA_DATA_VALUE) {
			*len = mnl_attr_get_payload_len(a);
			assert_true(*len <= 20);
			memcpy(out, mnl_attr_get_payload(a), *len);
		}
	}
}

/*
 * Parse the element list by hand: nftnl_set_elems_nlmsg_parse of
 * libnftnl 1.2.4 fails on messages with more than one element.
 */
static void
parse_elems(const struct nlmsghdr *nlh, const char *set, struct elems *out)
{
	const struct nlattr *a, *el, *f;
	bool match = false;

	mnl_attr_for_each(a, nlh, sizeof(struct nfgenmsg))
	{
		if (mnl_attr_get_type(a) == NFTA_SET_ELEM_LIST_SET)
			match = strcmp(mnl_attr_get_str(a), set) == 0;
	}
	if (!match)
		return;
	mnl_attr_for_each(a, nlh, sizeof(struct nfgenmsg))
	{
		if (mnl_attr_get_type(a) != NFTA_SET_ELEM_LIST_ELEMENTS)
			continue;
		mnl_attr_for_each_nested(el, a)
		{
			size_t i = out->n++;

			assert_true(i < ELEMS_MAX);
			mnl_attr_for_each_nested(f, el)
			{
				uint32_t l = 0;

				switch (mnl_attr_get_type(f)) {
				case NFTA_SET_ELEM_KEY:
					data_value(f, out->key[i], &out->klen[i]);
					break;
				case NFTA_SET_ELEM_KEY_END:
					data_value(f, out->key_end[i], &l);
					assert_int_equal(l, out->klen[i]);
					break;
				case NFTA_SET_ELEM_FLAGS:
					out->flags[i] = ntohl(mnl_attr_get_u32(f));
					break;
				case NFTA_SET_ELEM_TIMEOUT:
					out->timeout[i] = be64toh(mnl_attr_get_u64(f));
					break;
				}
			}
		}
	}
}

static void
collect(const struct nftrules_batch *b, uint16_t cmd, const char *set, struct elems *out)
{
	const struct nlmsghdr *nlh = (const struct nlmsghdr *)b->buf;
	int len = (int)b->len;

	memset(out, 0, sizeof(*out));
	for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len))
		if (nlh->nlmsg_type >> 8 == NFNL_SUBSYS_NFTABLES && cmd_of(nlh) == cmd)
			parse_elems(nlh, set, out);
}

/* Count messages of cmd; for sets/chains/rules, only those naming name. */
static size_t
count_cmd(const struct nftrules_batch *b, uint16_t cmd, const char *name)
{
	const struct nlmsghdr *nlh = (const struct nlmsghdr *)b->buf;
	int len = (int)b->len;
	size_t n = 0;

	for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
		const char *got = NULL;

		if (nlh->nlmsg_type >> 8 != NFNL_SUBSYS_NFTABLES || cmd_of(nlh) != cmd)
			continue;
		if (name == NULL) {
			n++;
			continue;
		}
		if (cmd == NFT_MSG_NEWSET) {
			struct nftnl_set *s = nftnl_set_alloc();

			assert_int_equal(nftnl_set_nlmsg_parse(nlh, s), 0);
			got = nftnl_set_get_str(s, NFTNL_SET_NAME);
			n += got != NULL && strcmp(got, name) == 0;
			nftnl_set_free(s);
		} else if (cmd == NFT_MSG_NEWSETELEM || cmd == NFT_MSG_DELSETELEM ||
		           cmd == NFT_MSG_DELSET) {
			const struct nlattr *a;

			/* NFTA_SET_ELEM_LIST_SET and NFTA_SET_NAME are both 2. */
			mnl_attr_for_each(a, nlh, sizeof(struct nfgenmsg))
			{
				if (mnl_attr_get_type(a) == NFTA_SET_ELEM_LIST_SET)
					n += strcmp(mnl_attr_get_str(a), name) == 0;
			}
		} else if (cmd == NFT_MSG_NEWRULE || cmd == NFT_MSG_DELRULE) {
			struct nftnl_rule *r = nftnl_rule_alloc();

			assert_int_equal(nftnl_rule_nlmsg_parse(nlh, r), 0);
			got = nftnl_rule_get_str(r, NFTNL_RULE_CHAIN);
			n += strcmp(got, name) == 0;
			nftnl_rule_free(r);
		}
	}
	return n;
}

struct zone_rule {
	uint32_t mark;
	bool zone_set, orig;
	uint16_t zone;
};

static int
zone_expr_cb(struct nftnl_expr *e, void *arg)
{
	struct zone_rule *z = arg;
	const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);
	uint32_t len = 0;
	const void *d;

	if (strcmp(name, "cmp") == 0) {
		d = nftnl_expr_get(e, NFTNL_EXPR_CMP_DATA, &len);
		if (len == sizeof(z->mark))
			memcpy(&z->mark, d, sizeof(z->mark));
	} else if (strcmp(name, "immediate") == 0) {
		d = nftnl_expr_get(e, NFTNL_EXPR_IMM_DATA, &len);
		if (d != NULL && len == sizeof(z->zone))
			memcpy(&z->zone, d, sizeof(z->zone));
	} else if (strcmp(name, "ct") == 0 && nftnl_expr_is_set(e, NFTNL_EXPR_CT_SREG)) {
		z->zone_set = nftnl_expr_get_u32(e, NFTNL_EXPR_CT_KEY) == NFT_CT_ZONE;
		z->orig = nftnl_expr_is_set(e, NFTNL_EXPR_CT_DIR) &&
		          nftnl_expr_get_u8(e, NFTNL_EXPR_CT_DIR) == IP_CT_DIR_ORIGINAL;
	}
	return 0;
}

/* The zone rules of an install batch, in order (at most max). */
static size_t
zone_rules(const struct nftrules_batch *b, struct zone_rule *out, size_t max)
{
	const struct nlmsghdr *nlh = (const struct nlmsghdr *)b->buf;
	int len = (int)b->len;
	size_t n = 0;

	for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
		struct nftnl_rule *r;

		if (nlh->nlmsg_type >> 8 != NFNL_SUBSYS_NFTABLES || cmd_of(nlh) != NFT_MSG_NEWRULE)
			continue;
		r = nftnl_rule_alloc();
		assert_int_equal(nftnl_rule_nlmsg_parse(nlh, r), 0);
		if (strcmp(nftnl_rule_get_str(r, NFTNL_RULE_CHAIN), "zone") == 0 && n < max) {
			memset(&out[n], 0, sizeof(out[n]));
			nftnl_expr_foreach(r, zone_expr_cb, &out[n]);
			n++;
		}
		nftnl_rule_free(r);
	}
	return n;
}

/*
 * Every sidecar mark puts the original direction of its flows in zone 1:
 * a workload flow and a sidecar flow with the same tuple are never one
 * conntrack entry (EX-073b). The reply direction stays in the default
 * zone, so the packets that come back still find the flow.
 */
static void
test_zone_chain(void **state)
{
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct nftrules_static st = {NULL, 0, NFTRULES_DENY, NULL};
	struct zone_rule z[4];
	size_t n;

	(void)state;
	nftrules_config_default(&cfg);
	cfg.mark = 0x4242;
	cfg.dns_mark = 0x5353;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	n = zone_rules(&b, z, 4);
	nftrules_batch_deinit(&b);
	assert_int_equal(n, 2);
	assert_int_equal(z[0].mark, 0x4242);
	assert_int_equal(z[1].mark, 0x5353);
	for (size_t i = 0; i < n; i++) {
		assert_true(z[i].zone_set);
		assert_true(z[i].orig);
		assert_int_equal(z[i].zone, 1);
	}

	/* The report process's mark too; a mark given twice gets one rule. */
	cfg.report_mark = 0x7272;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	assert_int_equal(zone_rules(&b, z, 4), 3);
	assert_int_equal(z[2].mark, 0x7272);
	nftrules_batch_deinit(&b);
	cfg.report_mark = cfg.mark;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	assert_int_equal(zone_rules(&b, z, 4), 2);
	nftrules_batch_deinit(&b);

	/* A policy update refills the filter chain only: the zone chain stays. */
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_update_static(&b, &cfg, &st), 0);
	assert_int_equal(zone_rules(&b, z, 4), 0);
	nftrules_batch_deinit(&b);
}

static void
test_install_framing_and_objects(void **state)
{
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct nftrules_static st = {NULL, 0, NFTRULES_DENY, NULL};
	const struct nlmsghdr *nlh;
	int len;
	size_t nsets = 0, nchains = 0, ntables = 0;

	nftrules_config_default(&cfg);
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	check_framing(&b);
	nlh = (const struct nlmsghdr *)b.buf;
	len = (int)b.len;
	for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
		if (nlh->nlmsg_type >> 8 != NFNL_SUBSYS_NFTABLES)
			continue;
		if (cmd_of(nlh) == NFT_MSG_NEWTABLE || cmd_of(nlh) == NFT_MSG_DELTABLE) {
			struct nftnl_table *t = nftnl_table_alloc();

			assert_int_equal(nftnl_table_nlmsg_parse(nlh, t), 0);
			assert_string_equal(nftnl_table_get_str(t, NFTNL_TABLE_NAME), "egressd");
			assert_int_equal(nftnl_table_get_u32(t, NFTNL_TABLE_FAMILY), NFPROTO_INET);
			/* add, delete, add: the old table is replaced atomically. */
			assert_int_equal(
			    cmd_of(nlh), ntables == 1 ? NFT_MSG_DELTABLE : NFT_MSG_NEWTABLE);
			ntables++;
			nftnl_table_free(t);
		} else if (cmd_of(nlh) == NFT_MSG_NEWSET) {
			struct nftnl_set *s = nftnl_set_alloc();
			const char *name;
			uint32_t flags;
			bool v4;

			assert_int_equal(nftnl_set_nlmsg_parse(nlh, s), 0);
			name = nftnl_set_get_str(s, NFTNL_SET_NAME);
			flags = nftnl_set_get_u32(s, NFTNL_SET_FLAGS);
			v4 = name[strlen(name) - 1] == '4';
			if (strncmp(name, "learned", 7) == 0) {
				/* Learned: hash with timeouts, never an interval set. */
				assert_true(flags & NFT_SET_TIMEOUT);
				assert_false(flags & NFT_SET_INTERVAL);
			} else {
				assert_true(flags & NFT_SET_INTERVAL);
				assert_false(flags & NFT_SET_TIMEOUT);
			}
			if (strchr(name, 'p') != NULL && strncmp(name, "allow", 5) != 0)
				assert_true(flags & NFT_SET_CONCAT);
			if (strcmp(name, "allowp4") == 0 || strcmp(name, "allowp6") == 0)
				assert_true(flags & NFT_SET_CONCAT);
			assert_int_equal(nftnl_set_get_u32(s, NFTNL_SET_KEY_LEN),
			    (flags & NFT_SET_CONCAT) ? (v4 ? 8 : 20) : (v4 ? 4 : 16));
			nsets++;
			nftnl_set_free(s);
		} else if (cmd_of(nlh) == NFT_MSG_NEWCHAIN) {
			struct nftnl_chain *c = nftnl_chain_alloc();
			const char *name;

			assert_int_equal(nftnl_chain_nlmsg_parse(nlh, c), 0);
			name = nftnl_chain_get_str(c, NFTNL_CHAIN_NAME);
			if (strcmp(name, "input") == 0) {
				/* Only marked sockets serve the sidecar's ports. */
				assert_int_equal(
				    nftnl_chain_get_u32(c, NFTNL_CHAIN_HOOKNUM), NF_INET_LOCAL_IN);
				assert_string_equal(
				    nftnl_chain_get_str(c, NFTNL_CHAIN_TYPE), "filter");
				nchains++;
				nftnl_chain_free(c);
				continue;
			}
			assert_int_equal(
			    nftnl_chain_get_u32(c, NFTNL_CHAIN_HOOKNUM), NF_INET_LOCAL_OUT);
			if (strcmp(name, "filter") == 0) {
				assert_string_equal(
				    nftnl_chain_get_str(c, NFTNL_CHAIN_TYPE), "filter");
				assert_int_equal(nftnl_chain_get_s32(c, NFTNL_CHAIN_PRIO), -150);
			} else if (strcmp(name, "zone") == 0) {
				/* Before conntrack (-200), so the zone is the flow's from its first packet. */
				assert_string_equal(
				    nftnl_chain_get_str(c, NFTNL_CHAIN_TYPE), "filter");
				assert_int_equal(nftnl_chain_get_s32(c, NFTNL_CHAIN_PRIO), -300);
			} else {
				assert_string_equal(name, "nat");
				assert_string_equal(
				    nftnl_chain_get_str(c, NFTNL_CHAIN_TYPE), "nat");
				assert_int_equal(nftnl_chain_get_s32(c, NFTNL_CHAIN_PRIO), -100);
			}
			nchains++;
			nftnl_chain_free(c);
		}
	}
	assert_int_equal(ntables, 3);
	assert_int_equal(nsets, 12);
	assert_int_equal(nchains, 4);
	/* One guard per listener: none configured here. */
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWRULE, "input"), 0);
	/* Interception off: the two marks' returns and the two DNS redirects only. */
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWRULE, "nat"), 4);
	nftrules_batch_deinit(&b);

	cfg.intercept = true;
	cfg.nlisteners = 3;
	cfg.listeners[0] = (struct nftrules_listener){IPPROTO_TCP, 18080, 64};
	cfg.listeners[1] = (struct nftrules_listener){IPPROTO_UDP, 15353, 0};
	cfg.listeners[2] = (struct nftrules_listener){IPPROTO_TCP, 15353, 0};
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWRULE, "nat"), 4 + 1 + 2);
	/* One guard per listener, and the API's connection cap. */
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWRULE, "input"), 3 + 1);
	nftrules_batch_deinit(&b);

	/* With a peek port: learned and learnedp, v4 and v6, go to it (shared-IP hole). */
	cfg.peek_port = 15444;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWRULE, "nat"), 4 + 1 + 2 + 4);
	nftrules_batch_deinit(&b);
}

/*
 * The marks are no blanket exemption: in the filter chain no rule accepts
 * on a mark alone (the sidecar's sockets meet the workload's sets); the
 * dns process's mark reaches the configured resolvers and is then
 * rejected whatever the destination; the other mark's DNS is rejected;
 * and the NAT chain's first rules are the two marks' returns (no redirect
 * of the sidecar's own traffic).
 */
static void
test_mark_is_scoped(void **state)
{
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct nftrules_static st = {NULL, 0, NFTRULES_DENY, NULL};
	const struct nlmsghdr *nlh;
	int len;
	bool nat_first = false, nat_second = false;
	int nat_seen = 0, resolver_rules = 0, mark_dns_rejects = 0, dns_mark_rejects = 0;
	int dns_mark_other = 0;

	nftrules_config_default(&cfg);
	cfg.mark = 0x4242;
	cfg.dns_mark = 0x5353;
	cfg.nresolvers = 1;
	cfg.resolvers[0].family = AF_INET;
	memcpy(cfg.resolvers[0].addr, "\xcb\x00\x71\x35", 4); /* 203.0.113.53 */
	cfg.resolvers[0].port = 53;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	nlh = (const struct nlmsghdr *)b.buf;
	len = (int)b.len;
	for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
		struct nftnl_rule *r;
		struct nftnl_expr_iter *it;
		struct nftnl_expr *e;
		const char *chain, *names[16];
		uint32_t dl, mark = 0;
		int n = 0, verdict = 0;
		bool has_payload = false, has_reject = false;

		if (nlh->nlmsg_type >> 8 != NFNL_SUBSYS_NFTABLES || cmd_of(nlh) != NFT_MSG_NEWRULE)
			continue;
		r = nftnl_rule_alloc();
		assert_int_equal(nftnl_rule_nlmsg_parse(nlh, r), 0);
		chain = nftnl_rule_get_str(r, NFTNL_RULE_CHAIN);
		it = nftnl_expr_iter_create(r);
		while ((e = nftnl_expr_iter_next(it)) != NULL && n < 16) {
			const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);

			names[n++] = name;
			if (strcmp(name, "meta") == 0) {
				uint32_t k = nftnl_expr_get_u32(e, NFTNL_EXPR_META_KEY);

				/* Never an exemption by uid: no meta skuid/skgid anywhere. */
				assert_true(k != NFT_META_SKUID && k != NFT_META_SKGID);
			}
			if (strcmp(name, "cmp") == 0 && n == 2 && strcmp(names[0], "meta") == 0)
				mark =
				    *(const uint32_t *)nftnl_expr_get(e, NFTNL_EXPR_CMP_DATA, &dl);
			if (strcmp(name, "payload") == 0)
				has_payload = true;
			if (strcmp(name, "reject") == 0)
				has_reject = true;
			if (strcmp(name, "immediate") == 0)
				verdict = (int)nftnl_expr_get_u32(e, NFTNL_EXPR_IMM_VERDICT);
		}
		nftnl_expr_iter_destroy(it);
		if (strcmp(chain, "filter") == 0 && mark == 0x4242) {
			/* Never [meta mark, cmp, accept] alone; no resolver for this mark. */
			assert_true(n > 3);
			if (has_reject && verdict != NF_ACCEPT)
				mark_dns_rejects++;
			else
				fail_msg("a filter rule on the intercept's mark that is not a DNS "
				         "reject");
		}
		if (strcmp(chain, "filter") == 0 && mark == 0x5353) {
			if (verdict == NF_ACCEPT && has_payload)
				resolver_rules++;
			else if (has_reject && n == 3)
				dns_mark_rejects++; /* [meta mark, cmp, reject]: everything else */
			else
				dns_mark_other++;
		}
		if (strcmp(chain, "nat") == 0 && nat_seen < 2) {
			if (nat_seen == 0)
				nat_first = n == 3 && mark == 0x4242 && verdict == NFT_RETURN;
			else
				nat_second = n == 3 && mark == 0x5353 && verdict == NFT_RETURN;
			nat_seen++;
		}
		nftnl_rule_free(r);
	}
	assert_true(nat_first);
	assert_true(nat_second);
	assert_int_equal(resolver_rules, 2);   /* UDP and TCP to the one resolver */
	assert_int_equal(dns_mark_rejects, 1); /* and nothing else, whatever the port */
	assert_int_equal(dns_mark_other, 0);
	assert_int_equal(mark_dns_rejects, 2); /* the other mark: no DNS to anyone */
	nftrules_batch_deinit(&b);
}

/* Filter rules on mark: those that accept, and those [meta mark, cmp, reject]. */
static void
mark_rules(const struct nftrules_batch *b, uint32_t want, int *accepts, int *rejects_all)
{
	const struct nlmsghdr *nlh = (const struct nlmsghdr *)b->buf;
	int len = (int)b->len;

	*accepts = *rejects_all = 0;
	for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
		struct nftnl_rule *r;
		struct nftnl_expr_iter *it;
		struct nftnl_expr *e;
		uint32_t dl, mark = 0;
		int n = 0, verdict = -1;
		bool reject = false, first_meta_mark = false;

		if (nlh->nlmsg_type >> 8 != NFNL_SUBSYS_NFTABLES || cmd_of(nlh) != NFT_MSG_NEWRULE)
			continue;
		r = nftnl_rule_alloc();
		assert_int_equal(nftnl_rule_nlmsg_parse(nlh, r), 0);
		it = nftnl_expr_iter_create(r);
		while ((e = nftnl_expr_iter_next(it)) != NULL) {
			const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);

			n++;
			if (n == 1 && strcmp(name, "meta") == 0)
				first_meta_mark =
				    nftnl_expr_get_u32(e, NFTNL_EXPR_META_KEY) == NFT_META_MARK;
			if (n == 2 && first_meta_mark && strcmp(name, "cmp") == 0)
				mark =
				    *(const uint32_t *)nftnl_expr_get(e, NFTNL_EXPR_CMP_DATA, &dl);
			if (strcmp(name, "reject") == 0)
				reject = true;
			if (strcmp(name, "immediate") == 0)
				verdict = (int)nftnl_expr_get_u32(e, NFTNL_EXPR_IMM_VERDICT);
		}
		nftnl_expr_iter_destroy(it);
		if (strcmp(nftnl_rule_get_str(r, NFTNL_RULE_CHAIN), "filter") == 0 &&
		    mark == want) {
			*accepts += verdict == NF_ACCEPT;
			*rejects_all += reject && n == 3;
		}
		nftnl_rule_free(r);
	}
}

/*
 * A chained proxy: the intercept's mark is accepted toward each of the
 * proxy's addresses and refused everywhere else; with none known yet (a
 * proxy given by name, not resolved), toward nothing at all.
 */
static void
test_proxy_dests(void **state)
{
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct nftrules_static st = {NULL, 0, NFTRULES_DENY, NULL};
	int acc, rej;

	(void)state;
	nftrules_config_default(&cfg);
	cfg.mark = 0x4242;
	cfg.dns_mark = 0x5353;
	cfg.proxy = true;
	for (size_t n = 0; n <= 3; n++) {
		cfg.nproxy = n;
		for (size_t i = 0; i < n; i++) {
			cfg.proxy_dests[i].family = AF_INET;
			memcpy(
			    cfg.proxy_dests[i].addr, "\xc6\x33\x64\x5a", 4); /* 198.51.100.90+i */
			cfg.proxy_dests[i].addr[3] = (uint8_t)(0x5a + i);
			cfg.proxy_dests[i].port = 3128;
		}
		nftrules_batch_init(&b, SEQ0);
		assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
		mark_rules(&b, 0x4242, &acc, &rej);
		assert_int_equal(acc, (int)n);
		assert_int_equal(rej, 1);
		nftrules_batch_deinit(&b);
	}
	/* Without a proxy, the intercept's mark meets the sets like the workload's. */
	cfg.proxy = false;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	mark_rules(&b, 0x4242, &acc, &rej);
	assert_int_equal(acc, 0);
	assert_int_equal(rej, 0);
	nftrules_batch_deinit(&b);
}

/* Last filter rule: reject (deny) or accept (allow). */
static const char *
last_filter_expr(const struct nftrules_batch *b)
{
	const struct nlmsghdr *nlh = (const struct nlmsghdr *)b->buf;
	int len = (int)b->len;
	static char last[32];

	for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
		struct nftnl_rule *r;
		struct nftnl_expr_iter *it;
		struct nftnl_expr *e;

		if (nlh->nlmsg_type >> 8 != NFNL_SUBSYS_NFTABLES || cmd_of(nlh) != NFT_MSG_NEWRULE)
			continue;
		r = nftnl_rule_alloc();
		assert_int_equal(nftnl_rule_nlmsg_parse(nlh, r), 0);
		if (strcmp(nftnl_rule_get_str(r, NFTNL_RULE_CHAIN), "filter") == 0) {
			it = nftnl_expr_iter_create(r);
			while ((e = nftnl_expr_iter_next(it)) != NULL)
				snprintf(last, sizeof(last), "%s",
				    nftnl_expr_get_str(e, NFTNL_EXPR_NAME));
			nftnl_expr_iter_destroy(it);
		}
		nftnl_rule_free(r);
	}
	return last;
}

static void
test_default_action(void **state)
{
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct nftrules_static st = {NULL, 0, NFTRULES_DENY, NULL};
	size_t deny_rules;

	nftrules_config_default(&cfg);
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	assert_string_equal(last_filter_expr(&b), "reject");
	deny_rules = count_cmd(&b, NFT_MSG_NEWRULE, "filter");
	nftrules_batch_deinit(&b);

	st.default_action = NFTRULES_ALLOW;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	assert_string_equal(last_filter_expr(&b), "immediate");
	/* allow: one final accept instead of the two rejects; deny rules stay. */
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWRULE, "filter"), deny_rules - 1);
	nftrules_batch_deinit(&b);
}

/*
 * Router solicitations are rate-limited (EX-013b): one filter rule matches
 * ICMPv6 type 133 whatever its destination, with limit rate over
 * NFTRULES_RS_RATE/second burst NFTRULES_RS_BURST packets and a drop, and
 * it comes before the rules that accept neighbour discovery on the link
 * (a bitwise on the 16-byte destination), so no RS is accepted unlimited.
 */
static void
test_rs_rate_limited(void **state)
{
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct nftrules_static st = {NULL, 0, NFTRULES_ALLOW, NULL};
	const struct nlmsghdr *nlh;
	int len, idx = 0, limit_at = -1, first_nd = -1, nlimits = 0;

	nftrules_config_default(&cfg);
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	nlh = (const struct nlmsghdr *)b.buf;
	len = (int)b.len;
	for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
		struct nftnl_rule *r;
		struct nftnl_expr_iter *it;
		struct nftnl_expr *e;
		bool limit = false, rs = false, nd = false;
		int verdict = 0;

		if (nlh->nlmsg_type >> 8 != NFNL_SUBSYS_NFTABLES || cmd_of(nlh) != NFT_MSG_NEWRULE)
			continue;
		r = nftnl_rule_alloc();
		assert_int_equal(nftnl_rule_nlmsg_parse(nlh, r), 0);
		if (strcmp(nftnl_rule_get_str(r, NFTNL_RULE_CHAIN), "filter") != 0) {
			nftnl_rule_free(r);
			continue;
		}
		it = nftnl_expr_iter_create(r);
		while ((e = nftnl_expr_iter_next(it)) != NULL) {
			const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);
			uint32_t dl = 0;

			if (strcmp(name, "cmp") == 0) {
				const uint8_t *d = nftnl_expr_get(e, NFTNL_EXPR_CMP_DATA, &dl);

				rs |= dl == 1 && d[0] == 133;
			} else if (strcmp(name, "bitwise") == 0) {
				nd |= nftnl_expr_get_u32(e, NFTNL_EXPR_BITWISE_LEN) == 16;
			} else if (strcmp(name, "limit") == 0) {
				limit = true;
				assert_int_equal(
				    nftnl_expr_get_u64(e, NFTNL_EXPR_LIMIT_RATE), NFTRULES_RS_RATE);
				assert_int_equal(nftnl_expr_get_u64(e, NFTNL_EXPR_LIMIT_UNIT), 1);
				assert_int_equal(nftnl_expr_get_u32(e, NFTNL_EXPR_LIMIT_BURST),
				    NFTRULES_RS_BURST);
				assert_int_equal(
				    nftnl_expr_get_u32(e, NFTNL_EXPR_LIMIT_TYPE), NFT_LIMIT_PKTS);
				assert_int_equal(
				    nftnl_expr_get_u32(e, NFTNL_EXPR_LIMIT_FLAGS), NFT_LIMIT_F_INV);
			} else if (strcmp(name, "immediate") == 0) {
				verdict = (int)nftnl_expr_get_u32(e, NFTNL_EXPR_IMM_VERDICT);
			}
		}
		nftnl_expr_iter_destroy(it);
		if (limit) {
			/* The limit is on RS, and what passes it is dropped. */
			assert_true(rs);
			assert_false(nd);
			assert_int_equal(verdict, NF_DROP);
			limit_at = idx;
			nlimits++;
		}
		if (nd && first_nd < 0)
			first_nd = idx;
		idx++;
		nftnl_rule_free(r);
	}
	assert_int_equal(nlimits, 1);
	assert_true(first_nd >= 0);
	assert_true(limit_at >= 0 && limit_at < first_nd);
	nftrules_batch_deinit(&b);
}

static void
test_static_elements(void **state)
{
	struct nftrules_rule rules[] = {
	    rule(NFTRULES_ALLOW, AF_INET, "10.0.0.0", 9, 0, 0),
	    rule(NFTRULES_ALLOW, AF_INET, "10.200.1.2", 9, 0, 0), /* masked: 10.128/9 */
	    rule(NFTRULES_ALLOW, AF_INET, "192.0.2.7", 32, 0, 0),
	    rule(NFTRULES_ALLOW, AF_INET, "192.0.2.7", 32, 0, 0), /* duplicate */
	    rule(NFTRULES_DENY, AF_INET, "0.0.0.0", 0, 0, 0),
	    rule(NFTRULES_ALLOW, AF_INET, "198.51.100.0", 24, 443, 443),
	    rule(NFTRULES_DENY, AF_INET6, "2001:db8::", 32, 22, 23),
	};
	struct nftrules_static st = {rules, sizeof(rules) / sizeof(rules[0]), NFTRULES_DENY, NULL};
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct elems el;
	static const uint8_t k10[] = {10, 0, 0, 0}, k11[] = {11, 0, 0, 0};
	static const uint8_t k192[] = {192, 0, 2, 7}, k192e[] = {192, 0, 2, 8};

	nftrules_config_default(&cfg);
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);

	/* 10.0/9 + 10.128/9 merge into [10.0.0.0, 11.0.0.0); dup removed. */
	collect(&b, NFT_MSG_NEWSETELEM, "allow4", &el);
	assert_int_equal(el.n, 4);
	assert_memory_equal(el.key[0], k10, 4);
	assert_int_equal(el.flags[0], 0);
	assert_memory_equal(el.key[1], k11, 4);
	assert_int_equal(el.flags[1], NFT_SET_ELEM_INTERVAL_END);
	assert_memory_equal(el.key[2], k192, 4);
	assert_memory_equal(el.key[3], k192e, 4);
	assert_int_equal(el.flags[3], NFT_SET_ELEM_INTERVAL_END);

	/* 0.0.0.0/0 reaches the top: a start element and no end element. */
	collect(&b, NFT_MSG_NEWSETELEM, "deny4", &el);
	assert_int_equal(el.n, 1);
	assert_int_equal(el.flags[0], 0);

	/* Port-scoped: key and key_end carry addr . port, padded to 4 bytes. */
	collect(&b, NFT_MSG_NEWSETELEM, "allowp4", &el);
	assert_int_equal(el.n, 1);
	assert_int_equal(el.klen[0], 8);
	assert_memory_equal(el.key[0], ((uint8_t[]){198, 51, 100, 0, 0x01, 0xbb, 0, 0}), 8);
	assert_memory_equal(el.key_end[0], ((uint8_t[]){198, 51, 100, 255, 0x01, 0xbb, 0, 0}), 8);
	collect(&b, NFT_MSG_NEWSETELEM, "denyp6", &el);
	assert_int_equal(el.n, 1);
	assert_int_equal(el.klen[0], 20);
	assert_int_equal(el.key[0][17], 22);
	assert_int_equal(el.key_end[0][17], 23);
	assert_int_equal(el.key_end[0][4], 0xff);
	collect(&b, NFT_MSG_NEWSETELEM, "allow6", &el);
	assert_int_equal(el.n, 0);
	nftrules_batch_deinit(&b);
}

/* Overlapping port-scoped rules become disjoint elements (EEXIST otherwise). */
/*
 * The sandbox's own networks go into the deny sets with the inner
 * ranges, each IPv4 one with its IPv6 spellings, on install and on every
 * static update, so that no allow rule (0.0.0.0/0 included) opens them.
 */
static void
test_own_in_deny_sets(void **state)
{
	struct nftrules_rule rules[] = {
	    rule(NFTRULES_ALLOW, AF_INET, "0.0.0.0", 0, 0, 0),
	    rule(NFTRULES_ALLOW, AF_INET6, "::", 0, 0, 0),
	};
	struct addrclass_own own;
	struct nftrules_static st = {rules, 2, NFTRULES_ALLOW, NULL};
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct elems without4, without6, el;
	static const uint8_t net4[] = {10, 200, 0, 0}, end4[] = {10, 200, 1, 0};
	static const uint8_t net6[] = {0xfd, 0x00, 0x02, 0x00, [15] = 0};
	static const uint8_t nat64[] = {0, 0x64, 0xff, 0x9b, [12] = 10, 200, 0, 0};
	uint8_t a[16];
	bool has4 = false, has6 = false, has_nat64 = false;

	nftrules_config_default(&cfg);
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	collect(&b, NFT_MSG_NEWSETELEM, "deny4", &without4);
	collect(&b, NFT_MSG_NEWSETELEM, "deny6", &without6);
	nftrules_batch_deinit(&b);

	memset(&own, 0, sizeof(own));
	assert_int_equal(inet_pton(AF_INET, "10.200.0.2", a), 1);
	assert_int_equal(addrclass_own_add(&own, AF_INET, a, 24), 0);
	assert_int_equal(inet_pton(AF_INET6, "fd00:200::2", a), 1);
	assert_int_equal(addrclass_own_add(&own, AF_INET6, a, 64), 0);
	st.own = &own;
	for (int update = 0; update < 2; update++) {
		nftrules_batch_init(&b, SEQ0);
		assert_int_equal(update ? nftrules_build_update_static(&b, &cfg, &st)
		                        : nftrules_build_install(&b, &cfg, &st),
		    0);
		collect(&b, NFT_MSG_NEWSETELEM, "deny4", &el);
		/* One more interval: a start and an end element. */
		assert_int_equal(el.n, without4.n + 2);
		for (size_t i = 0; i + 1 < el.n; i++)
			has4 |= memcmp(el.key[i], net4, 4) == 0 && el.flags[i] == 0 &&
			        memcmp(el.key[i + 1], end4, 4) == 0 &&
			        el.flags[i + 1] == NFT_SET_ELEM_INTERVAL_END;
		collect(&b, NFT_MSG_NEWSETELEM, "deny6", &el);
		assert_true(el.n > without6.n);
		for (size_t i = 0; i < el.n; i++) {
			has6 |= memcmp(el.key[i], net6, 16) == 0 && el.flags[i] == 0;
			has_nat64 |= memcmp(el.key[i], nat64, 16) == 0 && el.flags[i] == 0;
		}
		assert_true(has4 && has6 && has_nat64);
		has4 = has6 = has_nat64 = false;
		nftrules_batch_deinit(&b);
	}
}

static void
test_port_ranges_disjoint(void **state)
{
	struct nftrules_rule rules[] = {
	    rule(NFTRULES_ALLOW, AF_INET, "192.0.2.0", 24, 400, 500),
	    rule(NFTRULES_ALLOW, AF_INET, "192.0.2.1", 32, 443, 443),
	    rule(NFTRULES_ALLOW, AF_INET, "10.0.0.0", 8, 1, 100),
	    rule(NFTRULES_ALLOW, AF_INET, "11.0.0.0", 8, 50, 200),
	    rule(NFTRULES_DENY, AF_INET, "198.51.100.0", 24, 80, 80),
	    rule(NFTRULES_DENY, AF_INET, "198.51.100.0", 24, 81, 81),
	};
	struct nftrules_static st = {rules, sizeof(rules) / sizeof(rules[0]), NFTRULES_DENY, NULL};
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct elems el;

	nftrules_config_default(&cfg);
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	collect(&b, NFT_MSG_NEWSETELEM, "allowp4", &el);
	assert_int_equal(el.n, 4);
	/* ports 1-49: 10/8 only */
	assert_memory_equal(el.key[0], ((uint8_t[]){10, 0, 0, 0, 0, 1, 0, 0}), 8);
	assert_memory_equal(el.key_end[0], ((uint8_t[]){10, 255, 255, 255, 0, 49, 0, 0}), 8);
	/* ports 50-100: 10/8 and 11/8 merged */
	assert_memory_equal(el.key[1], ((uint8_t[]){10, 0, 0, 0, 0, 50, 0, 0}), 8);
	assert_memory_equal(el.key_end[1], ((uint8_t[]){11, 255, 255, 255, 0, 100, 0, 0}), 8);
	/* ports 101-200: 11/8 */
	assert_memory_equal(el.key[2], ((uint8_t[]){11, 0, 0, 0, 0, 101, 0, 0}), 8);
	assert_memory_equal(el.key_end[2], ((uint8_t[]){11, 255, 255, 255, 0, 200, 0, 0}), 8);
	/* 192.0.2.1 . 443 lies inside 192.0.2.0/24 . 400-500: one element */
	assert_memory_equal(el.key[3], ((uint8_t[]){192, 0, 2, 0, 0x01, 0x90, 0, 0}), 8);
	assert_memory_equal(el.key_end[3], ((uint8_t[]){192, 0, 2, 255, 0x01, 0xf4, 0, 0}), 8);
	/* Adjacent ports with the same addresses join: 80-81. */
	collect(&b, NFT_MSG_NEWSETELEM, "denyp4", &el);
	assert_int_equal(el.n, 1);
	assert_int_equal(el.key[0][5], 80);
	assert_int_equal(el.key_end[0][5], 81);
	nftrules_batch_deinit(&b);
}

static void
test_static_invalid(void **state)
{
	struct nftrules_rule bad[] = {
	    rule(NFTRULES_ALLOW, AF_INET, "10.0.0.0", 33, 0, 0),
	};
	struct nftrules_static st = {bad, 1, NFTRULES_DENY, NULL};
	struct nftrules_config cfg;
	struct nftrules_batch b;

	nftrules_config_default(&cfg);
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), -1);
	assert_true(b.failed);
	assert_non_null(strstr(b.err, "invalid static rule"));
	nftrules_batch_deinit(&b);

	bad[0] = rule(NFTRULES_ALLOW, AF_INET, "10.0.0.0", 8, 90, 80);
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_update_static(&b, &cfg, &st), -1);
	nftrules_batch_deinit(&b);

	bad[0].family = 12345;
	bad[0].port_lo = 0;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), -1);
	nftrules_batch_deinit(&b);

	cfg.table[0] = '\0';
	st.nrules = 0;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), -1);
	nftrules_batch_deinit(&b);
}

static void
test_update_keeps_learned(void **state)
{
	struct nftrules_rule rules[] = {
	    rule(NFTRULES_ALLOW, AF_INET6, "2001:db8::1", 128, 0, 0),
	};
	struct nftrules_static st = {rules, 1, NFTRULES_ALLOW, NULL};
	struct nftrules_config cfg;
	struct nftrules_batch b;
	static const char *const learned[] = {"learned4", "learned6", "learnedp4", "learnedp6"};
	static const char *const flushed[] = {
	    "allow4", "allow6", "deny4", "deny6", "allowp4", "allowp6", "denyp4", "denyp6"};

	nftrules_config_default(&cfg);
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_update_static(&b, &cfg, &st), 0);
	check_framing(&b);
	/* The table stays; static sets are re-created; learned ones untouched. */
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWTABLE, NULL), 0);
	assert_int_equal(count_cmd(&b, NFT_MSG_DELTABLE, NULL), 0);
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWSET, NULL), 8);
	assert_int_equal(count_cmd(&b, NFT_MSG_DELSET, NULL), 8);
	assert_int_equal(count_cmd(&b, NFT_MSG_DELSETELEM, NULL), 0);
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(count_cmd(&b, NFT_MSG_DELSET, learned[i]), 0);
		assert_int_equal(count_cmd(&b, NFT_MSG_NEWSET, learned[i]), 0);
		assert_int_equal(count_cmd(&b, NFT_MSG_NEWSETELEM, learned[i]), 0);
	}
	for (size_t i = 0; i < 8; i++) {
		assert_int_equal(count_cmd(&b, NFT_MSG_DELSET, flushed[i]), 1);
		assert_int_equal(count_cmd(&b, NFT_MSG_NEWSET, flushed[i]), 1);
	}
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWSETELEM, "allow6"), 1);
	assert_int_equal(count_cmd(&b, NFT_MSG_DELRULE, "filter"), 1);
	assert_int_equal(count_cmd(&b, NFT_MSG_DELRULE, "nat"), 0);
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWRULE, "nat"), 0);
	assert_string_equal(last_filter_expr(&b), "immediate");
	nftrules_batch_deinit(&b);
}

static void
test_learn(void **state)
{
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct elems el;
	uint8_t a4[4] = {93, 184, 216, 34}, a6[16] = {0x20, 0x01, 0x0d, 0xb8};

	nftrules_config_default(&cfg);
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_learn(&b, &cfg, AF_INET, a4, 0, 30000, false), 0);
	assert_int_equal(check_framing(&b), 3);
	assert_string_equal(b.msgs[0].what, "add element to learned4");
	collect(&b, NFT_MSG_NEWSETELEM, "learned4", &el);
	assert_int_equal(el.n, 1);
	assert_int_equal(el.klen[0], 4);
	assert_memory_equal(el.key[0], a4, 4);
	assert_int_equal(el.timeout[0], 30000);
	nftrules_batch_deinit(&b);

	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_learn(&b, &cfg, AF_INET6, a6, 8443, 5000, false), 0);
	collect(&b, NFT_MSG_NEWSETELEM, "learnedp6", &el);
	assert_int_equal(el.n, 1);
	assert_int_equal(el.klen[0], 20);
	assert_memory_equal(el.key[0], a6, 16);
	assert_int_equal(el.key[0][16], 8443 >> 8);
	assert_int_equal(el.key[0][17], 8443 & 0xff);
	nftrules_batch_deinit(&b);

	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_learn(&b, &cfg, AF_INET, a4, 0, 0, true), 0);
	collect(&b, NFT_MSG_DELSETELEM, "learned4", &el);
	assert_int_equal(el.n, 1);
	assert_int_equal(el.timeout[0], 0);
	nftrules_batch_deinit(&b);

	/* An add without a timeout would never expire: refused. */
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_learn(&b, &cfg, AF_INET, a4, 0, 0, false), -1);
	nftrules_batch_deinit(&b);
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_learn(&b, &cfg, AF_UNIX, a4, 0, 10, false), -1);
	nftrules_batch_deinit(&b);
}

static void
test_large_static_chunks(void **state)
{
	size_t n = 3000;
	struct nftrules_rule *rules = calloc(n, sizeof(*rules));
	struct nftrules_static st = {rules, n, NFTRULES_DENY, NULL};
	struct nftrules_config cfg;
	struct nftrules_batch b;

	assert_non_null(rules);
	for (size_t i = 0; i < n; i++) {
		rules[i].action = NFTRULES_ALLOW;
		rules[i].family = AF_INET;
		rules[i].addr[0] = 100;
		rules[i].addr[1] = (uint8_t)(i >> 8);
		rules[i].addr[2] = (uint8_t)i;
		rules[i].addr[3] = 1; /* /32, non-adjacent: nothing merges */
		rules[i].prefix_len = 32;
	}
	nftrules_config_default(&cfg);
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	check_framing(&b);
	/* 6000 elements in messages of at most NFTRULES_ELEMS_PER_MSG ranges. */
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWSETELEM, "allow4"),
	    (n + NFTRULES_ELEMS_PER_MSG - 1) / NFTRULES_ELEMS_PER_MSG);
	nftrules_batch_deinit(&b);
	free(rules);
}

/* ---- ranges_disjoint_ports against the old O(n^2) scan ---- */

static bool
ref_inc(uint8_t *a, size_t alen)
{
	for (size_t i = alen; i-- > 0;)
		if (++a[i] != 0)
			return true;
	return false;
}

static int
ref_cmp(const void *a, const void *b)
{
	const struct nftrules_range *x = a, *y = b;
	int c = memcmp(x->lo, y->lo, 16);

	if (c != 0)
		return c;
	if ((c = memcmp(x->hi, y->hi, 16)) != 0)
		return c;
	if (x->plo != y->plo)
		return x->plo < y->plo ? -1 : 1;
	return x->phi < y->phi ? -1 : x->phi > y->phi;
}

static size_t
ref_normalise(struct nftrules_range *r, size_t n, size_t alen)
{
	size_t out = 0;

	if (n == 0)
		return 0;
	qsort(r, n, sizeof(*r), ref_cmp);
	for (size_t i = 1; i < n; i++) {
		uint8_t next[16];
		bool adj;

		memcpy(next, r[out].hi, alen);
		adj = !ref_inc(next, alen) || memcmp(r[i].lo, next, alen) <= 0;
		if (!adj) {
			r[++out] = r[i];
			continue;
		}
		if (memcmp(r[i].hi, r[out].hi, alen) > 0)
			memcpy(r[out].hi, r[i].hi, alen);
	}
	return out + 1;
}

static int
ref_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* The brute-force reference: every rule scanned for every port piece. */
static struct nftrules_range *
ref_disjoint(const struct nftrules_range *r, size_t n, size_t alen, size_t *nout)
{
	uint32_t *bd = calloc(2 * n + 1, sizeof(*bd));
	struct nftrules_range *tmp = calloc(n + 1, sizeof(*tmp));
	struct nftrules_range *out = calloc(n * (2 * n + 1) + 1, sizeof(*out));
	size_t nb = 0, no = 0, prev_start = 0, prev_n = 0;
	uint32_t prev_end = 0;
	bool have_prev = false;

	assert_non_null(bd);
	assert_non_null(tmp);
	assert_non_null(out);
	for (size_t i = 0; i < n; i++) {
		bd[nb++] = r[i].plo;
		bd[nb++] = (uint32_t)r[i].phi + 1;
	}
	qsort(bd, nb, sizeof(*bd), ref_u32);
	for (size_t k = 0; k + 1 < nb; k++) {
		uint32_t a = bd[k], e = bd[k + 1] - 1;
		size_t m = 0;
		bool same;

		if (bd[k + 1] == a)
			continue;
		for (size_t i = 0; i < n; i++)
			if (r[i].plo <= a && r[i].phi >= e) {
				tmp[m] = r[i];
				tmp[m].plo = tmp[m].phi = 0;
				m++;
			}
		m = ref_normalise(tmp, m, alen);
		if (m == 0) {
			have_prev = false;
			continue;
		}
		same = have_prev && prev_end + 1 == a && prev_n == m;
		for (size_t j = 0; same && j < m; j++)
			same = memcmp(out[prev_start + j].lo, tmp[j].lo, 16) == 0 &&
			       memcmp(out[prev_start + j].hi, tmp[j].hi, 16) == 0;
		if (same) {
			for (size_t j = 0; j < m; j++)
				out[prev_start + j].phi = (uint16_t)e;
			prev_end = e;
			continue;
		}
		for (size_t j = 0; j < m; j++) {
			out[no + j] = tmp[j];
			out[no + j].plo = (uint16_t)a;
			out[no + j].phi = (uint16_t)e;
		}
		prev_start = no;
		prev_n = m;
		prev_end = e;
		have_prev = true;
		no += m;
	}
	free(bd);
	free(tmp);
	*nout = no;
	return out;
}

/* A fixed-seed generator, so a failure is reproducible. */
static uint32_t
rnd(uint64_t *st)
{
	*st = *st * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)(*st >> 33);
}

/* Random small inputs (bounded: 400 cases of up to 48 rules): same output as the scan. */
static void
test_disjoint_ports_matches_reference(void **state)
{
	uint64_t st = 0x5eed;

	(void)state;
	for (int c = 0; c < 400; c++) {
		size_t alen = (c & 1) ? 16 : 4, n = rnd(&st) % 49, nref = 0, nout = 0;
		struct nftrules_range r[48];
		struct nftrules_range *got, *want;
		const char *why = NULL;

		memset(r, 0, sizeof(r));
		for (size_t i = 0; i < n; i++) {
			/* Small address and port spaces so that ranges overlap and touch. */
			uint32_t lo = rnd(&st) % 64, len = rnd(&st) % 16;
			uint32_t plo = (c % 5 == 0) ? 65500 + rnd(&st) % 36 : 1 + rnd(&st) % 40;
			uint32_t plen = rnd(&st) % 12;

			r[i].lo[alen - 1] = (uint8_t)lo;
			r[i].hi[alen - 1] = (uint8_t)(lo + len > 255 ? 255 : lo + len);
			if (c % 7 == 0) /* whole-space ranges hit the address carry */
				memset(r[i].hi, 0xff, alen);
			r[i].plo = (uint16_t)plo;
			r[i].phi = (uint16_t)(plo + plen > 65535 ? 65535 : plo + plen);
		}
		want = ref_disjoint(r, n, alen, &nref);
		got = nftrules_ranges_disjoint_ports(r, n, alen, &nout, &why);
		assert_null(why);
		assert_int_equal(nout, nref);
		if (nref > 0)
			assert_memory_equal(got, want, nref * sizeof(*got));
		free(got);
		free(want);
	}
}

/*
 * 4096 rules x 32 ports, each port its own rule (131072 port-scoped
 * ranges, most ports distinct): the sweep finishes (the old scan was
 * 131072 pieces x 131072 rules) and its output is disjoint.
 */
static void
test_disjoint_ports_large(void **state)
{
	size_t n = 4096 * 32, nout = 0;
	struct nftrules_range *r = calloc(n, sizeof(*r)), *d;
	const char *why = NULL;

	(void)state;
	assert_non_null(r);
	for (size_t i = 0; i < 4096; i++)
		for (size_t j = 0; j < 32; j++) {
			struct nftrules_range *x = &r[i * 32 + j];
			uint32_t a = htonl(
			    0x0a000000u + (uint32_t)i * 2); /* 10.0.0.0 + 2i: never adjacent */
			uint16_t port = (uint16_t)(1 + (i * 32 + j) % 65535);

			memcpy(x->lo, &a, 4);
			memcpy(x->hi, &a, 4);
			x->plo = x->phi = port;
		}
	d = nftrules_ranges_disjoint_ports(r, n, 4, &nout, &why);
	assert_null(why);
	assert_non_null(d);
	assert_true(nout > 0 && nout <= n);
	/* Pieces come in increasing port order; within a piece, sorted disjoint addresses. */
	for (size_t k = 1; k < nout; k++) {
		if (d[k].plo == d[k - 1].plo) {
			assert_int_equal(d[k].phi, d[k - 1].phi);
			assert_true(memcmp(d[k].lo, d[k - 1].hi, 4) > 0);
		} else
			assert_true(d[k].plo > d[k - 1].phi);
	}
	free(d);
	free(r);
}

/*
 * Nested port ranges on distinct addresses need a quadratic output (rule i
 * covers ports i+1..65535): refused with a reason once past the cap,
 * instead of growing the parent's memory without bound.
 */
static void
test_disjoint_ports_capped(void **state)
{
	size_t n = 4096, nout = 7;
	struct nftrules_range *r = calloc(n, sizeof(*r)), *d;
	const char *why = NULL;

	(void)state;
	assert_non_null(r);
	for (size_t i = 0; i < n; i++) {
		uint32_t a = htonl(0x0a000000u + (uint32_t)i * 2);

		memcpy(r[i].lo, &a, 4);
		memcpy(r[i].hi, &a, 4);
		r[i].plo = (uint16_t)(i + 1);
		r[i].phi = 65535;
	}
	d = nftrules_ranges_disjoint_ports(r, n, 4, &nout, &why);
	assert_null(d);
	assert_non_null(why);
	assert_non_null(strstr(why, "too many disjoint elements"));
	free(r);
}

/*
 * Kernel refusals leave a record (NFLOG): with a group configured, every
 * reject of the filter chain that refuses the workload's traffic is
 * preceded by a log expression to that group, with a 128-byte copy and a
 * prefix naming a rule krule knows; the rules on the sidecar's own marks
 * and every accept log nothing; without a group, no rule logs. On install
 * and on the policy update that rebuilds the chain.
 */
struct log_tally {
	unsigned rejects, logged, mark_rejects, stray;
	unsigned by_rule[8];
};

static void
tally_logs(const struct nftrules_batch *b, uint16_t group, struct log_tally *t)
{
	const struct nlmsghdr *nlh = (const struct nlmsghdr *)b->buf;
	int len = (int)b->len;
	size_t nrules;
	const struct krule *all = krule_all(&nrules);

	memset(t, 0, sizeof(*t));
	for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
		struct nftnl_rule *r;
		struct nftnl_expr_iter *it;
		struct nftnl_expr *e;
		const char *prev = "", *prefix = NULL;
		bool mark = false, first = true;

		if (nlh->nlmsg_type >> 8 != NFNL_SUBSYS_NFTABLES || cmd_of(nlh) != NFT_MSG_NEWRULE)
			continue;
		r = nftnl_rule_alloc();
		assert_int_equal(nftnl_rule_nlmsg_parse(nlh, r), 0);
		if (strcmp(nftnl_rule_get_str(r, NFTNL_RULE_CHAIN), "filter") != 0) {
			nftnl_rule_free(r);
			continue;
		}
		it = nftnl_expr_iter_create(r);
		while ((e = nftnl_expr_iter_next(it)) != NULL) {
			const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);

			if (first && strcmp(name, "meta") == 0 &&
			    nftnl_expr_get_u32(e, NFTNL_EXPR_META_KEY) == NFT_META_MARK)
				mark = true;
			first = false;
			if (strcmp(name, "log") == 0) {
				assert_int_equal(
				    nftnl_expr_get_u16(e, NFTNL_EXPR_LOG_GROUP), group);
				assert_int_equal(
				    nftnl_expr_get_u32(e, NFTNL_EXPR_LOG_SNAPLEN), 128);
				prefix = nftnl_expr_get_str(e, NFTNL_EXPR_LOG_PREFIX);
			}
			if (strcmp(name, "reject") == 0) {
				if (mark)
					t->mark_rejects++;
				else
					t->rejects++;
				if (strcmp(prev, "log") == 0 && !mark) {
					const struct krule *k = krule_find(prefix);

					assert_non_null(k);
					t->logged++;
					t->by_rule[k - all]++;
				} else if (strcmp(prev, "log") == 0)
					t->stray++;
			}
			if (strcmp(name, "immediate") == 0 && strcmp(prev, "log") == 0)
				t->stray++; /* an accept that logs */
			prev = name;
		}
		nftnl_expr_iter_destroy(it);
		nftnl_rule_free(r);
	}
}

static void
test_refusals_logged(void **state)
{
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct nftrules_static st = {NULL, 0, NFTRULES_DENY, NULL};
	struct log_tally t;
	size_t n;

	(void)krule_all(&n);
	assert_true(n <= 8);
	nftrules_config_default(&cfg);
	cfg.nflog_group = 4201;
	cfg.block_doh = true;
	cfg.proxy = true;
	cfg.nproxy = 1;
	cfg.proxy_dests[0].family = AF_INET;
	inet_pton(AF_INET, "192.0.2.8", cfg.proxy_dests[0].addr);
	cfg.proxy_dests[0].port = 3128;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	tally_logs(&b, 4201, &t);
	nftrules_batch_deinit(&b);
	assert_true(t.rejects > 0);
	assert_int_equal(t.logged, t.rejects); /* every refusal of the workload's traffic */
	assert_int_equal(t.stray, 0);          /* and no accept, no mark rule */
	assert_true(t.mark_rejects > 0);
	for (size_t i = 0; i < n; i++)
		assert_true(t.by_rule[i] > 0); /* every rule of the vocabulary is used */

	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_update_static(&b, &cfg, &st), 0);
	tally_logs(&b, 4201, &t);
	nftrules_batch_deinit(&b);
	assert_true(t.rejects > 0);
	assert_int_equal(t.logged, t.rejects);

	cfg.nflog_group = 0;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	tally_logs(&b, 0, &t);
	nftrules_batch_deinit(&b);
	assert_true(t.rejects > 0);
	assert_int_equal(t.logged, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_install_framing_and_objects),
	    cmocka_unit_test(test_zone_chain),
	    cmocka_unit_test(test_mark_is_scoped),
	    cmocka_unit_test(test_proxy_dests),
	    cmocka_unit_test(test_default_action),
	    cmocka_unit_test(test_refusals_logged),
	    cmocka_unit_test(test_rs_rate_limited),
	    cmocka_unit_test(test_static_elements),
	    cmocka_unit_test(test_own_in_deny_sets),
	    cmocka_unit_test(test_port_ranges_disjoint),
	    cmocka_unit_test(test_static_invalid),
	    cmocka_unit_test(test_update_keeps_learned),
	    cmocka_unit_test(test_learn),
	    cmocka_unit_test(test_large_static_chunks),
	    cmocka_unit_test(test_disjoint_ports_matches_reference),
	    cmocka_unit_test(test_disjoint_ports_large),
	    cmocka_unit_test(test_disjoint_ports_capped),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
