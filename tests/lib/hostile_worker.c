/*
 * egressd with a hostile worker: the real parent (parent_run, the real
 * privilege drop, the real nft table) and, in place of worker_main, code
 * that behaves as a worker taken over through a parser bug would. It
 * uses only messages that pass chan_validate() except where a step says
 * otherwise, and prints one line per step on stderr:
 *
 *   HOSTILE <step> err=<errno>     (the parent's answer)
 *
 * tests/netns/test_hostile_worker.sh reads those lines, the parent's log
 * and the table. Each incarnation of the worker (the parent restarts a
 * killed one) takes the next step of `violations` from a counter file in
 * $HOSTILE_STATE (a directory the worker's uid may write); the first one
 * also runs the learn checks. Each starts once $HOSTILE_STATE/go exists.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "egressd/common/chan.h"
#include "egressd/common/config.h"
#include "egressd/common/log.h"
#include "egressd/priv/parent.h"
#include "policy/policy.h"

static uint32_t next_id = 100;

/* Wait for the parent's answer to id (skipping nothing: it is the only one). */
static int
hostile_result(int fd, uint32_t id)
{
	union chan_msg *m = malloc(sizeof(*m));
	int err = -1;

	for (int tries = 0; m != NULL && tries < 50; tries++) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		const char *why;
		int passfd;
		enum chan_status st;

		if (poll(&pfd, 1, 5000) <= 0)
			break;
		st = chan_recv(fd, m, CHAN_TO_WORKER, &passfd, &why);
		if (st == CHAN_AGAIN)
			continue;
		if (st != CHAN_OK)
			break;
		if (passfd >= 0)
			close(passfd);
		if (m->hdr.type == CHAN_RESULT && m->hdr.id == id) {
			err = m->result.err;
			break;
		}
	}
	free(m);
	return err;
}

/* The parent's policy handover: read it and forget it. */
static void
hostile_skip_handover(int fd)
{
	union chan_msg *m = malloc(sizeof(*m));

	for (int tries = 0; m != NULL && tries < 10000; tries++) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		const char *why;
		int passfd;

		if (poll(&pfd, 1, 5000) <= 0)
			break;
		if (chan_recv(fd, m, CHAN_TO_WORKER, &passfd, &why) != CHAN_OK)
			continue;
		if (m->hdr.type == CHAN_POLICY && (m->hdr.flags & CHAN_POLICY_MORE) == 0)
			break;
	}
	free(m);
}

/* Propose a policy (JSON in the API's shape) as a worker does. */
static int
hostile_policy(int fd, const char *json)
{
	struct policy_err pe;
	struct policy *p = policy_from_json(json, strlen(json), NULL, &pe);
	struct chan_policy *c = calloc(1, sizeof(*c));
	size_t len = 0;
	char *doc = p ? policy_wire_encode(p, &len) : NULL;
	uint32_t id = next_id++;
	int err;

	if (doc == NULL || c == NULL || len > CHAN_POLICY_CHUNK)
		return -1;
	c->hdr.type = CHAN_POLICY;
	c->hdr.id = id;
	c->total = c->len = (uint32_t)len;
	memcpy(c->data, doc, len);
	err = chan_send(fd, c, -1) == 0 ? hostile_result(fd, id) : -1;
	free(doc);
	free(c);
	policy_free(p);
	return err;
}

static void
hostile_learn_msg(struct chan_learn *l, uint32_t id, const char *name, const char *addr,
    uint16_t port, uint32_t timeout)
{
	memset(l, 0, sizeof(*l));
	l->hdr.type = CHAN_LEARN;
	l->hdr.id = id;
	l->family = strchr(addr, ':') ? AF_INET6 : AF_INET;
	inet_pton(l->family, addr, l->addr);
	l->port = port;
	l->timeout_s = timeout;
	snprintf(l->name, sizeof(l->name), "%s", name);
}

static int
hostile_learn(int fd, const char *name, const char *addr, uint16_t port, uint32_t timeout)
{
	struct chan_learn l;
	uint32_t id = next_id++;

	hostile_learn_msg(&l, id, name, addr, port, timeout);
	return chan_send(fd, &l, -1) == 0 ? hostile_result(fd, id) : -1;
}

static void
say(const char *step, int err)
{
	fprintf(stderr, "HOSTILE %s err=%d\n", step, err);
}

/* Send and say when the send itself failed (the parent may already have killed us). */
static void
hostile_send(int fd, const void *msg)
{
	if (chan_send(fd, msg, -1) != 0)
		fprintf(stderr, "HOSTILE send failed: %s\n", strerror(errno));
}

/* Raw bytes past chan_send's size table. */
static void
hostile_raw(int fd, const void *buf, size_t len)
{
	if (send(fd, buf, len, MSG_NOSIGNAL) < 0)
		fprintf(stderr, "HOSTILE send failed: %s\n", strerror(errno));
}

static int
hostile_incarnation(void)
{
	const char *dir = getenv("HOSTILE_STATE");
	char path[512];
	FILE *f;
	int n = 0;

	if (dir == NULL)
		return 0;
	snprintf(path, sizeof(path), "%s/count", dir);
	if ((f = fopen(path, "r")) != NULL) {
		if (fscanf(f, "%d", &n) != 1)
			n = 0;
		fclose(f);
	}
	if ((f = fopen(path, "w")) != NULL) {
		fprintf(f, "%d\n", n + 1);
		fclose(f);
	}
	return n;
}

static int
hostile_main(const struct config *cfg, int fd)
{
	int n = hostile_incarnation();
	struct chan_ready rd = {.hdr = {.type = CHAN_READY, .id = next_id++}};
	static union chan_msg m;

	(void)cfg;
	hostile_skip_handover(fd);
	if (chan_send(fd, &rd, -1) != 0)
		return 1;
	/* The test says when to go (it first sees the ready file). */
	if (getenv("HOSTILE_STATE") != NULL) {
		char go[512];

		snprintf(go, sizeof(go), "%s/go", getenv("HOSTILE_STATE"));
		for (int k = 0; k < 300 && access(go, F_OK) != 0; k++)
			usleep(100000);
	}
	if (n == 0) {
		struct chan_learn two[2];
		uint32_t id = next_id++;

		say("policy",
		    hostile_policy(fd, "{\"defaultAction\":\"deny\",\"egress\":["
		                       "{\"action\":\"allow\",\"target\":\"ok.example.test\","
		                       "\"ports\":[443]}]}"));
		say("learn-denied-name",
		    hostile_learn(fd, "evil.example.test", "192.0.2.66", 443, 60));
		say("learn-metadata",
		    hostile_learn(fd, "ok.example.test", "169.254.169.254", 443, 60));
		say("learn-loopback", hostile_learn(fd, "ok.example.test", "127.0.0.2", 443, 60));
		say("learn-all-ports", hostile_learn(fd, "ok.example.test", "192.0.2.10", 0, 60));
		say("learn-other-port", hostile_learn(fd, "ok.example.test", "192.0.2.10", 22, 60));
		say("learn-ok-7-days",
		    hostile_learn(fd, "ok.example.test", "192.0.2.10", 443, CHAN_MAX_TIMEOUT_S));
		hostile_learn_msg(&two[0], id, "ok.example.test", "192.0.2.11", 443, 60);
		two[0].hdr.flags = CHAN_LEARN_MORE;
		hostile_learn_msg(&two[1], id, "evil.example.test", "192.0.2.67", 443, 60);
		if (chan_send(fd, &two[0], -1) == 0 && chan_send(fd, &two[1], -1) == 0)
			say("learn-batch-one-bad", hostile_result(fd, id));
	}
	/* One violation per incarnation: each must kill it. */
	memset(&m, 0, sizeof(m));
	switch (n) {
	case 0: /* a policy chunk that continues nothing */
		m.policy.hdr.type = CHAN_POLICY;
		m.policy.hdr.id = next_id++;
		m.policy.total = 2 * CHAN_POLICY_CHUNK;
		m.policy.offset = CHAN_POLICY_CHUNK;
		m.policy.len = CHAN_POLICY_CHUNK;
		memset(m.policy.data, ' ', CHAN_POLICY_CHUNK);
		say("violation-policy-sequence", 0);
		hostile_send(fd, &m.policy);
		break;
	case 1: /* the reply type, which only the parent sends */
		m.result.hdr.type = CHAN_RESULT;
		m.result.hdr.id = next_id++;
		m.result.req_type = CHAN_LEARN;
		say("violation-result", 0);
		hostile_send(fd, &m.result);
		break;
	case 2: { /* the old "static set" and "revoke" type numbers and beyond */
		uint8_t raw[64] = {0};
		struct chan_hdr h = {.type = CHAN_TYPE_MAX, .id = next_id++};

		memcpy(raw, &h, sizeof(h));
		say("violation-unknown-type", 0);
		hostile_raw(fd, raw, sizeof(raw));
		break;
	}
	case 3: /* a learn for a name that is not canonical */
		hostile_learn_msg(&m.learn, next_id++, "OK.Example.Test.", "192.0.2.12", 443, 60);
		say("violation-learn-name", 0);
		hostile_send(fd, &m.learn);
		break;
	case 4: { /* a learn batch longer than CHAN_MAX_BATCH */
		uint32_t id = next_id++;

		say("violation-long-batch", 0);
		for (int k = 0; k <= CHAN_MAX_BATCH; k++) {
			hostile_learn_msg(&m.learn, id, "ok.example.test", "192.0.2.13", 443, 60);
			m.learn.hdr.flags = CHAN_LEARN_MORE;
			if (chan_send(fd, &m.learn, -1) != 0)
				break;
		}
		break;
	}
	case 5: /* a policy begun twice */
		m.policy.hdr.type = CHAN_POLICY;
		m.policy.hdr.id = next_id++;
		m.policy.hdr.flags = CHAN_POLICY_MORE;
		m.policy.total = 2 * CHAN_POLICY_CHUNK;
		m.policy.len = CHAN_POLICY_CHUNK;
		memset(m.policy.data, ' ', CHAN_POLICY_CHUNK);
		say("violation-policy-twice", 0);
		hostile_send(fd, &m.policy);
		hostile_send(fd, &m.policy);
		break;
	case 6: /* a leaf while interception is off (and so, no CA to sign with) */
		m.leaf_req.hdr.type = CHAN_LEAF_REQ;
		m.leaf_req.hdr.id = next_id++;
		snprintf(m.leaf_req.name, sizeof(m.leaf_req.name), "ok.example.test");
		m.leaf_req.key_len = 91;
		memset(m.leaf_req.key, 0x30, 91);
		say("violation-leaf", 0);
		hostile_send(fd, &m.leaf_req);
		break;
	default:
		say("idle", 0);
		break;
	}
	/* Alive until the parent kills it (or the test stops egressd). */
	for (int k = 0; k < 600; k++)
		sleep(1);
	return 0;
}

int
main(int argc, char **argv)
{
	struct config cfg;
	char err[1024];
	int rc;

	config_defaults(&cfg);
	if (config_load(&cfg, argc - 1, argv + 1, err, sizeof(err)) != 0 ||
	    config_check(&cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "egressd_hostile: %s\n", err);
		return 2;
	}
	unsetenv("OPENSANDBOX_EGRESS_TOKEN");
	log_init("parent", cfg.log_level, 2);
	rc = parent_run(&cfg, hostile_main);
	config_free(&cfg);
	return rc;
}
