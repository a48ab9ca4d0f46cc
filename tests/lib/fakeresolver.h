/*
 * A fake resolver for the DNS proxy (struct dnsproxy_resolver_ops), for
 * tests without a network: it answers each fresh query the proxy sends
 * from a script (name and type -> addresses with a TTL, an rcode, or no
 * answer at all), in the test's loop, and counts what it was asked.
 */
#ifndef EGRESSD_TESTS_FAKERESOLVER_H
#define EGRESSD_TESTS_FAKERESOLVER_H

#include <stddef.h>
#include <stdint.h>

#include "egressd/dns/dnsproxy.h"

struct event_base;

#define FAKERESOLVER_MAX_RULES 16
#define FAKERESOLVER_MAX_ADDRS 8

struct fakeresolver_rule {
	char name[256];
	uint16_t qtype;
	int rcode;    /* the answer's rcode (0: NOERROR) */
	bool timeout; /* no answer: the query fails with ETIMEDOUT */
	size_t naddrs;
	int family[FAKERESOLVER_MAX_ADDRS];
	uint8_t addr[FAKERESOLVER_MAX_ADDRS][16];
	uint32_t ttl;
};

struct fakeresolver {
	struct event_base *base;
	struct fakeresolver_rule rules[FAKERESOLVER_MAX_RULES];
	size_t nrules;
	unsigned asked;                   /* queries the proxy sent */
	char last[256];                   /* the name of the last one */
	unsigned pending;                 /* answers not delivered yet */
	struct dnsproxy_resolver_ops ops; /* what to hand dnsproxy_new */
};

/* An empty script on base; fill rules, then pass &f->ops. */
void fakeresolver_init(struct fakeresolver *f, struct event_base *base);

#endif
