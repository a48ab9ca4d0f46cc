/*
 * egressd with hostile children: the real parent (parent_run, the real
 * privilege drop, the real nft table) and, in place of worker_main for
 * every role (control, dns, intercept), code that behaves as a child
 * taken over through a parser bug would. It prints one line per step on
 * stderr:
 *
 *   HOSTILE <step> err=<errno>     (the parent's answer)
 *
 * tests/netns/test_hostile_worker.sh reads those lines, the parent's log
 * and the table. Incarnation 0 of each role (after $HOSTILE_STATE/go)
 * checks what its role may do: control proposes a policy, dns learns
 * (good and bad) and asks for a UDP socket, intercept asks for leaves and
 * a TCP socket. Then every incarnation (after $HOSTILE_STATE/fire) sends
 * one message of the next type, and the last an unknown type, each of
 * which must kill it (see hostile_violation). Incarnations are counted in
 * $HOSTILE_STATE/count.<role> (a directory the worker's uid may write).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <stdbool.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "egressd/common/chan.h"
#include "egressd/common/config.h"
#include "egressd/common/log.h"
#include "egressd/priv/parent.h"
#include "policy/policy.h"

static uint32_t next_id = 100;
/* A whole policy was pushed (control's, which it sends only after go). */
static bool seen_policy;

/* Acknowledge a push once whole (documents: the last chunk; learns: the batch's last). */
static void
hostile_ack_push(int fd, const union chan_msg *m)
{
	struct chan_ack a;

	if ((m->hdr.flags & CHAN_POLICY_MORE) != 0)
		return; /* CHAN_POLICY_MORE and CHAN_LEARN_MORE are the same bit */
	memset(&a, 0, sizeof(a));
	a.hdr.type = CHAN_ACK;
	a.hdr.id = m->hdr.id;
	if (chan_send(fd, &a, -1) != 0)
		fprintf(stderr, "HOSTILE ack failed: %s\n", strerror(errno));
}

/*
 * A result for another request than the one waited for (the parent answers
 * a refusal at once, an accepted change once the intercept holds it): kept
 * for hostile_result to find.
 */
static bool early;
static uint32_t early_id;
static int early_err;

/*
 * Serve the channel for at most ms: acknowledge what the parent pushes
 * (as a real child does, or the parent would kill it for not answering);
 * stop at the result for id (its err), or at a whole policy push when
 * want_policy (at once if one was pushed before). -1 on timeout or a
 * broken channel.
 */
static int
hostile_pump(int fd, uint32_t id, bool want_policy, int ms)
{
	union chan_msg *m = malloc(sizeof(*m));
	int err = -1;

	/* It may have come while this child waited for the test's go. */
	if (want_policy && seen_policy) {
		free(m);
		return 0;
	}
	for (int waited = 0; m != NULL && waited < ms;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		const char *why;
		int passfd, rc;
		enum chan_status st;

		rc = poll(&pfd, 1, 100);
		if (rc < 0)
			break;
		if (rc == 0) {
			waited += 100;
			continue;
		}
		st = chan_recv(fd, m, CHAN_TO_WORKER, &passfd, &why);
		if (st == CHAN_AGAIN)
			continue;
		if (st != CHAN_OK)
			break;
		if (passfd >= 0)
			close(passfd);
		if ((m->hdr.id & CHAN_ID_PARENT) != 0 && m->hdr.id != CHAN_ID_HANDOVER) {
			hostile_ack_push(fd, m);
			if (m->hdr.type == CHAN_POLICY && (m->hdr.flags & CHAN_POLICY_MORE) == 0)
				seen_policy = true;
			if (want_policy && seen_policy) {
				err = 0;
				break;
			}
			continue;
		}
		if (m->hdr.type == CHAN_RESULT && m->hdr.id == id) {
			err = m->result.err;
			break;
		}
		if (m->hdr.type == CHAN_RESULT && id != 0 && !early) {
			early = true;
			early_id = m->hdr.id;
			early_err = m->result.err;
		}
		if ((m->hdr.type == CHAN_LEAF_REP || m->hdr.type == CHAN_SOCKET_REP) &&
		    m->hdr.id == id) {
			err = m->hdr.type == CHAN_LEAF_REP ? m->leaf_rep.err : m->socket_rep.err;
			break;
		}
	}
	free(m);
	return err;
}

static int
hostile_result(int fd, uint32_t id)
{
	if (early && early_id == id) {
		early = false;
		return early_err;
	}
	return hostile_pump(fd, id, false, 20000);
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

/* One address of the chained proxy's name (CHAN_LEARN_PROXY): the parent's answer. */
static int
hostile_proxy(int fd, const char *name, const char *addr)
{
	struct chan_learn l;
	uint32_t id = next_id++;

	hostile_learn_msg(&l, id, name, addr, 0, 60);
	l.hdr.flags = CHAN_LEARN_PROXY;
	return chan_send(fd, &l, -1) == 0 ? hostile_result(fd, id) : -1;
}

static void
say(const char *step, int err)
{
	fprintf(stderr, "HOSTILE %s err=%d\n", step, err);
}

/* Raw bytes past chan_send's size table. */
static void
hostile_raw(int fd, const void *buf, size_t len)
{
	if (send(fd, buf, len, MSG_NOSIGNAL) < 0)
		fprintf(stderr, "HOSTILE send failed: %s\n", strerror(errno));
}

/* This role's incarnation number, counted in $HOSTILE_STATE/count.<role>. */
static int
hostile_incarnation(enum chan_role role)
{
	const char *dir = getenv("HOSTILE_STATE");
	char path[512];
	FILE *f;
	int n = 0;

	if (dir == NULL)
		return 0;
	snprintf(path, sizeof(path), "%s/count.%s", dir, chan_role_name(role));
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

/* Wait (bounded) for the test's file $HOSTILE_STATE/<name>, serving the channel meanwhile. */
static void
hostile_wait_file(int fd, const char *name)
{
	char path[512];

	if (getenv("HOSTILE_STATE") == NULL)
		return;
	snprintf(path, sizeof(path), "%s/%s", getenv("HOSTILE_STATE"), name);
	for (int k = 0; k < 600 && access(path, F_OK) != 0; k++)
		hostile_pump(fd, 0, false, 100);
}

/* A leaf request for name with a fresh P-256 key; the parent's answer. */
static int
hostile_leaf(int fd, const char *name)
{
	struct chan_leaf_req r;
	EVP_PKEY *k = EVP_EC_gen("P-256");
	unsigned char *d = r.key;
	int n;

	memset(&r, 0, sizeof(r));
	r.hdr.type = CHAN_LEAF_REQ;
	r.hdr.id = next_id++;
	snprintf(r.name, sizeof(r.name), "%s", name);
	if (k == NULL || (n = i2d_PUBKEY(k, NULL)) <= 0 || n > CHAN_LEAF_KEY_MAX) {
		EVP_PKEY_free(k);
		return -1;
	}
	r.key_len = (uint16_t)i2d_PUBKEY(k, &d);
	EVP_PKEY_free(k);
	return chan_send(fd, &r, -1) == 0 ? hostile_result(fd, r.hdr.id) : -1;
}

static int
hostile_socket(int fd, int socktype)
{
	struct chan_socket_req r;

	memset(&r, 0, sizeof(r));
	r.hdr.type = CHAN_SOCKET_REQ;
	r.hdr.id = next_id++;
	r.family = AF_INET;
	r.socktype = socktype;
	return chan_send(fd, &r, -1) == 0 ? hostile_result(fd, r.hdr.id) : -1;
}

/*
 * A burst: nleaf leaf requests and nsock socket requests sent at once,
 * nothing read meanwhile (more replies than the channel holds), then every
 * reply read (bounded): the number of requests left without a good answer
 * (a leaf, or a socket with its descriptor). The parent keeps what its
 * channel cannot take: none may be lost.
 */
static int
hostile_burst(int fd, int nleaf, int nsock)
{
	union chan_msg *m = calloc(1, sizeof(*m));
	uint32_t first = next_id;
	int n = nleaf + nsock, missing = n;
	EVP_PKEY *k = EVP_EC_gen("P-256");
	struct chan_leaf_req lr;
	unsigned char *d = lr.key;

	memset(&lr, 0, sizeof(lr));
	if (m == NULL || k == NULL || i2d_PUBKEY(k, NULL) > CHAN_LEAF_KEY_MAX) {
		EVP_PKEY_free(k);
		free(m);
		return -1;
	}
	lr.hdr.type = CHAN_LEAF_REQ;
	snprintf(lr.name, sizeof(lr.name), "ok.example.test");
	lr.key_len = (uint16_t)i2d_PUBKEY(k, &d);
	EVP_PKEY_free(k);
	for (int i = 0; i < n; i++) {
		struct chan_socket_req sr = {.hdr = {.type = CHAN_SOCKET_REQ, .id = next_id},
		    .family = AF_INET,
		    .socktype = SOCK_STREAM};

		lr.hdr.id = next_id++;
		if (chan_send(fd, i < nleaf ? (const void *)&lr : (const void *)&sr, -1) != 0) {
			free(m);
			return -1;
		}
	}
	for (int waited = 0; missing > 0 && waited < 30000;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		const char *why;
		int passfd;

		if (poll(&pfd, 1, 100) == 0) {
			waited += 100;
			continue;
		}
		if (chan_recv(fd, m, CHAN_TO_WORKER, &passfd, &why) != CHAN_OK)
			continue;
		if ((m->hdr.id & CHAN_ID_PARENT) != 0 && m->hdr.id != CHAN_ID_HANDOVER)
			hostile_ack_push(fd, m);
		else if (m->hdr.id >= first && m->hdr.id < first + (uint32_t)n &&
		         ((m->hdr.type == CHAN_LEAF_REP && m->leaf_rep.err == 0) ||
		             (m->hdr.type == CHAN_SOCKET_REP && m->socket_rep.err == 0 &&
		                 passfd >= 0)))
			missing--;
		if (passfd >= 0)
			close(passfd);
	}
	free(m);
	return missing;
}

/*
 * Requests without end, no reply ever read: the parent keeps the replies
 * its channel cannot take only up to a bound, then kills this child. The
 * requests stop at 3 times that bound (the parent reads them all).
 */
static void
hostile_flood(int fd)
{
	struct chan_socket_req sr = {
	    .hdr = {.type = CHAN_SOCKET_REQ}, .family = AF_INET, .socktype = SOCK_STREAM};

	say("flood", 0);
	for (int i = 0; i < 3 * 2 * CHAN_MAX_PENDING; i++) {
		sr.hdr.id = next_id++;
		if (chan_send(fd, &sr, -1) != 0)
			break;
	}
	say("flood-sent", 0);
	sleep(60); /* killed meanwhile */
}

/* What a role may do, checked once (incarnation 0), after the test says go. */
static void
hostile_allowed(int fd, enum chan_role role)
{
	struct chan_learn two[2];
	uint32_t id;

	switch (role) {
	case CHAN_ROLE_CONTROL:
		say("policy",
		    hostile_policy(fd, "{\"defaultAction\":\"deny\",\"egress\":["
		                       "{\"action\":\"allow\",\"target\":\"ok.example.test\","
		                       "\"ports\":[443]}]}"));
		return;
	case CHAN_ROLE_INTERCEPT:
		say("intercept-policy-pushed", hostile_pump(fd, 0, true, 20000));
		say("leaf-allowed", hostile_leaf(fd, "ok.example.test"));
		say("leaf-denied", hostile_leaf(fd, "evil.example.test"));
		say("intercept-socket-tcp", hostile_socket(fd, SOCK_STREAM));
		say("intercept-burst-missing", hostile_burst(fd, 300, 600));
		return;
	case CHAN_ROLE_DNS:
		break;
	default:
		return;
	}
	say("dns-policy-pushed", hostile_pump(fd, 0, true, 20000));
	say("dns-socket-udp", hostile_socket(fd, SOCK_DGRAM));
	say("learn-denied-name", hostile_learn(fd, "evil.example.test", "192.0.2.66", 443, 60));
	say("learn-metadata", hostile_learn(fd, "ok.example.test", "169.254.169.254", 443, 60));
	say("learn-loopback", hostile_learn(fd, "ok.example.test", "127.0.0.2", 443, 60));
	say("learn-all-ports", hostile_learn(fd, "ok.example.test", "192.0.2.10", 0, 60));
	say("learn-other-port", hostile_learn(fd, "ok.example.test", "192.0.2.10", 22, 60));
	say("learn-ok-7-days",
	    hostile_learn(fd, "ok.example.test", "192.0.2.10", 443, CHAN_MAX_TIMEOUT_S));
	id = next_id++;
	hostile_learn_msg(&two[0], id, "ok.example.test", "192.0.2.11", 443, 60);
	two[0].hdr.flags = CHAN_LEARN_MORE;
	hostile_learn_msg(&two[1], id, "evil.example.test", "192.0.2.67", 443, 60);
	if (chan_send(fd, &two[0], -1) == 0 && chan_send(fd, &two[1], -1) == 0)
		say("learn-batch-one-bad", hostile_result(fd, id));
	/*
	 * The chained proxy's addresses (the test gives it by name,
	 * proxy.hostile.test): never the sandbox's inner ones, never for
	 * another name; a good one is pinned for the intercept's mark.
	 */
	say("proxy-loopback", hostile_proxy(fd, "proxy.hostile.test", "127.0.0.2"));
	say("proxy-metadata", hostile_proxy(fd, "proxy.hostile.test", "169.254.169.254"));
	say("proxy-other-name", hostile_proxy(fd, "evil.example.test", "192.0.2.91"));
	/*
	 * Each change rebuilds the filter chain: no flapping. The change
	 * comes with the good address, before its answer is read, so that the
	 * parent takes both within its PARENT_PROXY_CHANGE_S however slowly
	 * a loaded machine runs this process.
	 */
	{
		struct chan_learn ok, flap;
		uint32_t a = next_id++, b = next_id++;

		hostile_learn_msg(&ok, a, "proxy.hostile.test", "192.0.2.90", 0, 60);
		ok.hdr.flags = CHAN_LEARN_PROXY;
		hostile_learn_msg(&flap, b, "proxy.hostile.test", "192.0.2.93", 0, 60);
		flap.hdr.flags = CHAN_LEARN_PROXY;
		if (chan_send(fd, &ok, -1) == 0 && chan_send(fd, &flap, -1) == 0) {
			say("proxy-ok", hostile_result(fd, a));
			say("proxy-flap", hostile_result(fd, b));
		}
	}
}

/*
 * A well-formed message of `type`: a child whose role may not send it is
 * killed for sending it at all.
 */
static void
hostile_wellformed(union chan_msg *m, unsigned type)
{
	memset(m, 0, sizeof(*m));
	m->hdr.type = (uint16_t)type;
	m->hdr.id = next_id++;
	switch (type) {
	case CHAN_SOCKET_REQ:
		m->socket_req.family = AF_INET;
		m->socket_req.socktype = SOCK_DGRAM;
		break;
	case CHAN_LEARN:
		hostile_learn_msg(&m->learn, m->hdr.id, "ok.example.test", "192.0.2.14", 443, 60);
		break;
	case CHAN_POLICY:
		/* An empty document: what it holds never matters, who sends it does. */
		break;
	case CHAN_RESULT:
		m->result.req_type = CHAN_LEARN;
		break;
	case CHAN_LEAF_REQ:
		snprintf(m->leaf_req.name, sizeof(m->leaf_req.name), "ok.example.test");
		m->leaf_req.key_len = 91;
		memset(m->leaf_req.key, 0x30, 91);
		break;
	case CHAN_LEAF_REP:
		m->leaf_rep.err = EPERM;
		break;
	case CHAN_ACK:
		m->hdr.id = CHAN_ID_PARENT | 77;
		break;
	case CHAN_EVENT:
		m->event.kind = CHAN_EVENT_DNS_DENY;
		snprintf(m->event.name, sizeof(m->event.name), "denied.example.test");
		snprintf(m->event.reason, sizeof(m->event.reason), "policy");
		break;
	default:
		break;
	}
}

/*
 * Incarnation n (1..) of a role sends one message of type n (and n ==
 * CHAN_TYPE_MAX: a type that does not exist): well-formed when its role
 * may not send that type, every byte past the header 0xff (extreme
 * values) when it may. Each must kill it.
 */
static void
hostile_violation(int fd, enum chan_role role, int n)
{
	static union chan_msg m;
	char step[64];
	unsigned type = (unsigned)n;

	if (type >= CHAN_TYPE_MAX) {
		uint8_t raw[64] = {0};
		struct chan_hdr h = {.type = CHAN_TYPE_MAX, .id = next_id++};

		memcpy(raw, &h, sizeof(h));
		say("violation-unknown-type", 0);
		hostile_raw(fd, raw, sizeof(raw));
		return;
	}
	hostile_wellformed(&m, type);
	if (type == CHAN_ACK && role == CHAN_ROLE_CONTROL) {
		/* Control acknowledges only the CA certificates pushed to it: never anything else. */
		say("violation-unsolicited-ack", 0);
		if (send(fd, &m, chan_msg_size(type), MSG_NOSIGNAL) < 0)
			fprintf(stderr, "HOSTILE send failed: %s\n", strerror(errno));
		return;
	}
	if (chan_role_may_send(role, &m)) {
		uint32_t id = m.hdr.id;

		memset(&m, 0xff, sizeof(m));
		m.hdr.type = (uint16_t)type;
		m.hdr.id = type == CHAN_ACK ? m.hdr.id : id;
		snprintf(step, sizeof(step), "violation-extreme-%s", chan_type_name(type));
	} else
		snprintf(step, sizeof(step), "violation-forbidden-%s", chan_type_name(type));
	say(step, 0);
	if (chan_msg_size(type) == 0 || send(fd, &m, chan_msg_size(type), MSG_NOSIGNAL) < 0)
		fprintf(stderr, "HOSTILE send failed: %s\n", strerror(errno));
}

static int
hostile_main(const struct config *cfg, int fd, enum chan_role role)
{
	int n = hostile_incarnation(role);
	struct chan_ready rd = {.hdr = {.type = CHAN_READY, .id = next_id++}};

	(void)cfg;
	hostile_skip_handover(fd);
	if (chan_send(fd, &rd, -1) != 0)
		return 1;
	/* The test says when to go (it first sees the ready file), then when to fire. */
	hostile_wait_file(fd, "go");
	if (getenv("HOSTILE_FLOOD") != NULL) {
		if (role == CHAN_ROLE_INTERCEPT && n == 0)
			hostile_flood(fd);
		for (int k = 0; k < 600; k++)
			hostile_pump(fd, 0, false, 1000);
		return 0;
	}
	if (n == 0)
		hostile_allowed(fd, role);
	hostile_wait_file(fd, "fire");
	if (n + 1 <= CHAN_TYPE_MAX)
		hostile_violation(fd, role, n + 1);
	else
		say("idle", 0);
	/* Alive until the parent kills it (or the test stops egressd), acknowledging pushes. */
	for (int k = 0; k < 600; k++)
		hostile_pump(fd, 0, false, 1000);
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
