/*
 * Unit tests for egressd/nftrules batch builders, without root: each batch
 * is parsed back with libnftnl and its messages, sequence numbers, sets,
 * chains, rules and elements are checked.
 */
#include <setjmp.h>
#include <stdarg.h>
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
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include "egressd/priv/nftrules.h"
#include "egressd/priv/nftrules_internal.h"

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
struct elems {
	size_t n;
	uint8_t key[64][20];
	uint8_t key_end[64][20];
	uint32_t klen[64];
	uint32_t flags[64];
	uint64_t timeout[64];
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

			assert_true(i < 64);
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

static void
test_install_framing_and_objects(void **state)
{
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct nftrules_static st = {NULL, 0, NFTRULES_DENY};
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
			assert_int_equal(
			    nftnl_chain_get_u32(c, NFTNL_CHAIN_HOOKNUM), NF_INET_LOCAL_OUT);
			if (strcmp(name, "filter") == 0) {
				assert_string_equal(
				    nftnl_chain_get_str(c, NFTNL_CHAIN_TYPE), "filter");
				assert_int_equal(nftnl_chain_get_s32(c, NFTNL_CHAIN_PRIO), -150);
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
	assert_int_equal(nchains, 2);
	/* Interception off: mark return and the two DNS redirects only. */
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWRULE, "nat"), 3);
	nftrules_batch_deinit(&b);

	cfg.intercept = true;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWRULE, "nat"), 3 + 1 + 2);
	nftrules_batch_deinit(&b);

	/* With a peek port: learned and learnedp, v4 and v6, go to it (shared-IP hole). */
	cfg.peek_port = 15444;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	assert_int_equal(count_cmd(&b, NFT_MSG_NEWRULE, "nat"), 3 + 1 + 2 + 4);
	nftrules_batch_deinit(&b);
}

/* The first rules of each chain: mark accept (filter), mark return (nat). */
static void
test_mark_rule_first(void **state)
{
	struct nftrules_config cfg;
	struct nftrules_batch b;
	struct nftrules_static st = {NULL, 0, NFTRULES_DENY};
	const struct nlmsghdr *nlh;
	int len;
	int seen = 0;

	nftrules_config_default(&cfg);
	cfg.mark = 0x4242;
	nftrules_batch_init(&b, SEQ0);
	assert_int_equal(nftrules_build_install(&b, &cfg, &st), 0);
	nlh = (const struct nlmsghdr *)b.buf;
	len = (int)b.len;
	for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
		struct nftnl_rule *r;
		struct nftnl_expr_iter *it;
		struct nftnl_expr *e;
		const char *chain;
		uint32_t dl;

		if (nlh->nlmsg_type >> 8 != NFNL_SUBSYS_NFTABLES || cmd_of(nlh) != NFT_MSG_NEWRULE)
			continue;
		r = nftnl_rule_alloc();
		assert_int_equal(nftnl_rule_nlmsg_parse(nlh, r), 0);
		chain = nftnl_rule_get_str(r, NFTNL_RULE_CHAIN);
		if ((strcmp(chain, "filter") == 0 && !(seen & 1)) ||
		    (strcmp(chain, "nat") == 0 && !(seen & 2))) {
			int bit = strcmp(chain, "filter") == 0 ? 1 : 2;

			it = nftnl_expr_iter_create(r);
			e = nftnl_expr_iter_next(it);
			assert_string_equal(nftnl_expr_get_str(e, NFTNL_EXPR_NAME), "meta");
			assert_int_equal(nftnl_expr_get_u32(e, NFTNL_EXPR_META_KEY), NFT_META_MARK);
			e = nftnl_expr_iter_next(it);
			assert_string_equal(nftnl_expr_get_str(e, NFTNL_EXPR_NAME), "cmp");
			assert_int_equal(
			    *(const uint32_t *)nftnl_expr_get(e, NFTNL_EXPR_CMP_DATA, &dl), 0x4242);
			e = nftnl_expr_iter_next(it);
			assert_string_equal(nftnl_expr_get_str(e, NFTNL_EXPR_NAME), "immediate");
			assert_int_equal((int)nftnl_expr_get_u32(e, NFTNL_EXPR_IMM_VERDICT),
			    bit == 1 ? NF_ACCEPT : NFT_RETURN);
			assert_null(nftnl_expr_iter_next(it));
			nftnl_expr_iter_destroy(it);
			seen |= bit;
		}
		/* Never an exemption by uid: no meta skuid/skgid anywhere. */
		it = nftnl_expr_iter_create(r);
		while ((e = nftnl_expr_iter_next(it)) != NULL)
			if (strcmp(nftnl_expr_get_str(e, NFTNL_EXPR_NAME), "meta") == 0) {
				uint32_t k = nftnl_expr_get_u32(e, NFTNL_EXPR_META_KEY);

				assert_true(k != NFT_META_SKUID && k != NFT_META_SKGID);
			}
		nftnl_expr_iter_destroy(it);
		nftnl_rule_free(r);
	}
	assert_int_equal(seen, 3);
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
	struct nftrules_static st = {NULL, 0, NFTRULES_DENY};
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
	struct nftrules_static st = {rules, sizeof(rules) / sizeof(rules[0]), NFTRULES_DENY};
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
	struct nftrules_static st = {rules, sizeof(rules) / sizeof(rules[0]), NFTRULES_DENY};
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
	struct nftrules_static st = {bad, 1, NFTRULES_DENY};
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
	struct nftrules_static st = {rules, 1, NFTRULES_ALLOW};
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
	struct nftrules_static st = {rules, n, NFTRULES_DENY};
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

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_install_framing_and_objects),
	    cmocka_unit_test(test_mark_rule_first),
	    cmocka_unit_test(test_default_action),
	    cmocka_unit_test(test_static_elements),
	    cmocka_unit_test(test_port_ranges_disjoint),
	    cmocka_unit_test(test_static_invalid),
	    cmocka_unit_test(test_update_keeps_learned),
	    cmocka_unit_test(test_learn),
	    cmocka_unit_test(test_large_static_chunks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
