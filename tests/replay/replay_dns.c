/*
 * Replay tests of the DNS proxy (issue 13, "seams for tests without
 * root"): scripted query -> the channel messages the proxy sends the
 * parent -> the answer the client gets. The real proxy (dnsproxy.c) runs in
 * this process's loop with the fake parent (tests/lib/fakeparent.c, which
 * records every learn) and the fake resolver (tests/lib/fakeresolver.c,
 * which answers from the case's script), on a loopback port.
 *
 *   replay_dns CASE_DIR      runs every CASE_DIR/<name>.case
 *
 * A case is lines of (# comments and blank lines aside):
 *
 *   policy <JSON policy, the API's shape>
 *   policy-wire <policy_wire document, as the parent pushes it (dns bounds)>
 *   upstream <name> <A|AAAA> <addr>[,<addr>...] ttl <seconds>
 *   upstream <name> <A|AAAA> rcode <n> | upstream <name> <A|AAAA> timeout
 *   query <name> <A|AAAA|TXT|MX> [tcp]
 *   expect rcode <n>               the answer's rcode
 *   expect answer <addr>[,...]|-   exactly these addresses (any order), or none
 *   expect learn <name> <addr> <port> <timeout>   one per learn the parent got;
 *                                  exactly these, in this order
 *   expect nolearn                 the parent got no learn
 *   expect upstream <n>            queries the resolver was asked
 *
 * Every wait is bounded in loop turns; nothing is timed. Exit 0 when every
 * case passes; each mismatch is printed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "egressd/child/wstate.h"
#include "egressd/common/chan.h"
#include "egressd/common/config.h"
#include "egressd/common/log.h"
#include "egressd/dns/dnsproxy.h"
#include "egressd/dns/dnswire.h"
#include "fakeparent.h"
#include "replay.h"
#include "fakeresolver.h"
#include "policy/policy.h"

#define TURNS 2000 /* loop turns of at most 5 ms each: a hang fails, it is not timed */
#define MAX_LINE 4096
#define MAX_EXPECT 16

struct expect_learn {
	char name[256];
	int family;
	uint8_t addr[16];
	unsigned port, timeout;
};

struct rcase {
	char policy[MAX_LINE];
	bool wire; /* policy is a policy_wire document (what the parent pushes) */
	char qname[256];
	uint16_t qtype;
	bool tcp;
	int rcode;   /* -1: not checked */
	int answers; /* -1: not checked; else count of want[] */
	int want_family[MAX_EXPECT];
	uint8_t want[MAX_EXPECT][16];
	int nlearn; /* -1: not checked */
	struct expect_learn learn[MAX_EXPECT];
	int upstream; /* -1: not checked */
};

static uint16_t
qtype_of(const char *t)
{
	if (strcmp(t, "A") == 0)
		return DNSWIRE_TYPE_A;
	if (strcmp(t, "AAAA") == 0)
		return DNSWIRE_TYPE_AAAA;
	if (strcmp(t, "MX") == 0)
		return DNSWIRE_TYPE_MX;
	if (strcmp(t, "TXT") == 0)
		return 16;
	return 0;
}

static bool
parse_addr(const char *s, int *family, uint8_t *out)
{
	memset(out, 0, 16);
	if (inet_pton(AF_INET, s, out) == 1) {
		*family = AF_INET;
		return true;
	}
	if (inet_pton(AF_INET6, s, out) == 1) {
		*family = AF_INET6;
		return true;
	}
	return false;
}

/* Parse a case file into c and the resolver's script. 0 or -1. */
static int
load_case(const char *path, struct rcase *c, struct fakeresolver *fr)
{
	FILE *f = fopen(path, "r");
	char line[MAX_LINE];

	if (f == NULL)
		return -1;
	memset(c, 0, sizeof(*c));
	c->rcode = c->answers = c->nlearn = c->upstream = -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *nl = strchr(line, '\n'), *sp;
		char a[256], b[64], d[2048], e[64];
		unsigned long v;

		if (nl != NULL)
			*nl = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		if (strncmp(line, "policy ", 7) == 0) {
			snprintf(c->policy, sizeof(c->policy), "%s", line + 7);
		} else if (strncmp(line, "policy-wire ", 12) == 0) {
			snprintf(c->policy, sizeof(c->policy), "%s", line + 12);
			c->wire = true;
		} else if (sscanf(line, "upstream %255s %63s %2047s %63s", a, b, d, e) >= 3) {
			struct fakeresolver_rule *r = &fr->rules[fr->nrules++];

			snprintf(r->name, sizeof(r->name), "%s", a);
			r->qtype = qtype_of(b);
			if (strcmp(d, "timeout") == 0)
				r->timeout = true;
			else if (strcmp(d, "rcode") == 0)
				r->rcode = atoi(e);
			else {
				for (char *t = strtok_r(d, ",", &sp); t != NULL && r->naddrs < 8;
				     t = strtok_r(NULL, ",", &sp)) {
					if (!parse_addr(
					        t, &r->family[r->naddrs], r->addr[r->naddrs]))
						goto fail;
					r->naddrs++;
				}
				if (sscanf(line, "upstream %*s %*s %*s ttl %lu", &v) != 1)
					goto fail;
				r->ttl = (uint32_t)v;
			}
		} else if (sscanf(line, "query %255s %63s %63s", a, b, e) >= 2) {
			snprintf(c->qname, sizeof(c->qname), "%s", a);
			c->qtype = qtype_of(b);
			c->tcp = strstr(line, " tcp") != NULL;
		} else if (sscanf(line, "expect rcode %lu", &v) == 1) {
			c->rcode = (int)v;
		} else if (sscanf(line, "expect answer %2047s", d) == 1) {
			c->answers = 0;
			if (strcmp(d, "-") != 0)
				for (char *t = strtok_r(d, ",", &sp);
				     t != NULL && c->answers < MAX_EXPECT;
				     t = strtok_r(NULL, ",", &sp)) {
					if (!parse_addr(t, &c->want_family[c->answers],
					        c->want[c->answers]))
						goto fail;
					c->answers++;
				}
		} else if (strcmp(line, "expect nolearn") == 0) {
			c->nlearn = 0;
		} else if (sscanf(line, "expect learn %255s %255s", a, d) == 2) {
			struct expect_learn *l;
			unsigned port, to;

			if (c->nlearn < 0)
				c->nlearn = 0;
			l = &c->learn[c->nlearn];
			if (sscanf(line, "expect learn %*s %*s %u %u", &port, &to) != 2 ||
			    !parse_addr(d, &l->family, l->addr) || c->nlearn >= MAX_EXPECT)
				goto fail;
			snprintf(l->name, sizeof(l->name), "%s", a);
			l->port = port;
			l->timeout = to;
			c->nlearn++;
		} else if (sscanf(line, "expect upstream %lu", &v) == 1) {
			c->upstream = (int)v;
		} else
			goto fail;
	}
	fclose(f);
	return c->qname[0] != '\0' && c->qtype != 0 && c->policy[0] != '\0' ? 0 : -1;
fail:
	fclose(f);
	return -1;
}

static void
ready_cb(void *arg)
{
	*(bool *)arg = true;
}

static void
turn(struct event_base *base)
{
	struct timeval tv = {0, 5000};

	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
}

/* The answer's rcode and its A/AAAA addresses. -1 if it does not parse. */
static int
parse_answer(const uint8_t *m, size_t n, int *rcode, int *fam, uint8_t (*addrs)[16], int *naddrs)
{
	size_t p = DNSWIRE_HDR_LEN;
	unsigned qd, an;

	if (n < DNSWIRE_HDR_LEN)
		return -1;
	*rcode = m[3] & 0xf;
	qd = (unsigned)(m[4] << 8 | m[5]);
	an = (unsigned)(m[6] << 8 | m[7]);
	*naddrs = 0;
	for (unsigned i = 0; i < qd; i++) {
		while (p < n && m[p] != 0 && (m[p] & 0xc0) == 0)
			p += 1 + m[p];
		p += p < n && (m[p] & 0xc0) ? 2 : 1;
		p += 4;
	}
	for (unsigned i = 0; i < an && p < n; i++) {
		unsigned type, rdlen;

		while (p < n && m[p] != 0 && (m[p] & 0xc0) == 0)
			p += 1 + m[p];
		p += p < n && (m[p] & 0xc0) ? 2 : 1;
		if (p + 10 > n)
			return -1;
		type = (unsigned)(m[p] << 8 | m[p + 1]);
		rdlen = (unsigned)(m[p + 8] << 8 | m[p + 9]);
		p += 10;
		if (p + rdlen > n)
			return -1;
		if ((type == DNSWIRE_TYPE_A && rdlen == 4) ||
		    (type == DNSWIRE_TYPE_AAAA && rdlen == 16)) {
			if (*naddrs < MAX_EXPECT) {
				fam[*naddrs] = rdlen == 4 ? AF_INET : AF_INET6;
				memset(addrs[*naddrs], 0, 16);
				memcpy(addrs[*naddrs], m + p, rdlen);
				(*naddrs)++;
			}
		}
		p += rdlen;
	}
	return 0;
}

static bool
same_addr(int fa, const uint8_t *a, int fb, const uint8_t *b)
{
	return fa == fb && memcmp(a, b, fa == AF_INET ? 4 : 16) == 0;
}

static void
run_case(const char *name, const struct rcase *c, struct fakeresolver *fr, uint16_t port)
{
	struct event_base *base = event_base_new();
	struct fakeparent fp;
	struct config cfg;
	struct wstate *ws;
	struct dnsproxy *d = NULL;
	struct policy_err pe;
	struct policy *p;
	bool ready = false;
	char err[512];
	uint8_t q[512], ans[4096];
	size_t qlen;
	ssize_t got = -1;
	int cli = -1, rcode = -1, naddr = 0, fam[MAX_EXPECT];
	uint8_t addrs[MAX_EXPECT][16];
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};

	if (base == NULL || fakeparent_init(&fp, base) != 0) {
		replay_bad(name, "setup failed");
		return;
	}
	fr->base = base;
	config_defaults(&cfg);
	cfg.dns_port = port;
	snprintf(cfg.dns_upstream, sizeof(cfg.dns_upstream), "203.0.113.53");
	ws = wstate_new(&cfg, CHAN_ROLE_DNS, base, fp.wc, NULL);
	memset(&pe, 0, sizeof(pe));
	p = c->wire ? policy_wire_decode(c->policy, strlen(c->policy), &pe)
	            : policy_from_json(c->policy, strlen(c->policy), NULL, &pe);
	if (ws == NULL || p == NULL) {
		replay_bad(name, "policy does not load: %s", p == NULL ? pe.msg : "no state");
		policy_free(p);
		goto out_ws;
	}
	wstate_set_policy(ws, p);
	d = dnsproxy_new(ws, ready_cb, &ready, &fr->ops, err, sizeof(err));
	if (d == NULL) {
		replay_bad(name, "dnsproxy_new: %s", err);
		goto out_ws;
	}
	for (int i = 0; i < TURNS && !ready; i++)
		turn(base);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cli = socket(AF_INET, (c->tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK, 0);
	if (!ready || cli < 0 ||
	    dnswire_build_query(
	        0x4242, c->qname, c->qtype, DNSWIRE_CLASS_IN, q + 2, sizeof(q) - 2, &qlen) != 0) {
		replay_bad(name, "the proxy is not ready or the query does not build");
		goto out_d;
	}
	if (c->tcp) {
		q[0] = (uint8_t)(qlen >> 8);
		q[1] = (uint8_t)qlen;
		(void)connect(cli, (struct sockaddr *)&sa, sizeof(sa));
		for (int i = 0; i < TURNS && send(cli, q, qlen + 2, MSG_NOSIGNAL) < 0; i++)
			turn(base);
	} else
		(void)sendto(cli, q + 2, qlen, 0, (struct sockaddr *)&sa, sizeof(sa));
	for (int i = 0; i < TURNS && got <= 0; i++) {
		turn(base);
		got = recv(cli, ans, sizeof(ans), 0);
	}
	/* Nothing of the case may still be on its way. */
	for (int i = 0; i < TURNS && fr->pending > 0; i++)
		turn(base);
	if (got <= 0) {
		replay_bad(name, "no answer");
		goto out_cli;
	}
	if (parse_answer(c->tcp ? ans + 2 : ans, c->tcp ? (size_t)got - 2 : (size_t)got, &rcode,
	        fam, addrs, &naddr) != 0) {
		replay_bad(name, "the answer does not parse");
		goto out_cli;
	}
	if (c->rcode >= 0 && rcode != c->rcode)
		replay_bad(name, "rcode %d, expected %d", rcode, c->rcode);
	if (c->answers >= 0) {
		bool ok = naddr == c->answers;

		for (int i = 0; ok && i < c->answers; i++) {
			bool found = false;

			for (int k = 0; k < naddr && !found; k++)
				found = same_addr(c->want_family[i], c->want[i], fam[k], addrs[k]);
			ok = found;
		}
		if (!ok)
			replay_bad(name, "the answer holds %d addresses, expected %d (or others)",
			    naddr, c->answers);
	}
	if (c->nlearn >= 0) {
		if ((int)fp.nlearns != c->nlearn)
			replay_bad(
			    name, "the parent got %zu learns, expected %d", fp.nlearns, c->nlearn);
		for (int i = 0; i < c->nlearn && i < (int)fp.nlearns; i++) {
			const struct chan_learn *l = &fp.learns[i];
			const struct expect_learn *w = &c->learn[i];

			if (strcmp(l->name, w->name) != 0 ||
			    !same_addr(l->family, l->addr, w->family, w->addr))
				replay_bad(
				    name, "learn %d (%s): another name or address", i, l->name);
			if (l->port != w->port || l->timeout_s != w->timeout)
				replay_bad(name,
				    "learn %d (%s): port %u timeout %u, expected %u and %u", i,
				    l->name, l->port, l->timeout_s, w->port, w->timeout);
		}
	}
	if (c->upstream >= 0 && (int)fr->asked != c->upstream)
		replay_bad(
		    name, "the resolver was asked %u times, expected %d", fr->asked, c->upstream);
	if (fp.invalid != 0)
		replay_bad(name, "%u messages the parent's validator refused", fp.invalid);
out_cli:
	if (cli >= 0)
		close(cli);
	/* The proxy sees its TCP client go (and frees it) before it is freed itself. */
	for (int i = 0; i < TURNS && d != NULL && dnsproxy_tcp_clients(d) > 0; i++)
		turn(base);
out_d:
	dnsproxy_free(d);
out_ws:
	wstate_free(ws);
	fakeparent_fini(&fp);
	event_base_free(base);
}

/* One case: a port of our own for each run (ctest runs tests side by side). */
static void
dns_case(const char *path, const char *name)
{
	struct rcase c;
	struct fakeresolver fr;

	fakeresolver_init(&fr, NULL);
	if (load_case(path, &c, &fr) != 0)
		replay_bad(name, "the case does not parse");
	else
		run_case(name, &c, &fr, (uint16_t)(20000 + getpid() % 20000));
}

int
main(int argc, char **argv)
{
	log_init("dns", LOG_ERROR, 2);
	return replay_main(argc, argv, "replay_dns", dns_case);
}
