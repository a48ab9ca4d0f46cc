/* Unit tests of the parent <-> worker channel: the size table, direction
 * and field checks, and descriptor passing over a real socketpair. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include "egressd/common/chan.h"

/* Every role may send exactly its row of docs/privsep.md's table. */
static void
test_role_table(void **state)
{
	static const struct {
		enum chan_role role;
		unsigned type;
		int socktype;
		bool ok;
	} rows[] = {
	    {CHAN_ROLE_CONTROL, CHAN_POLICY, 0, true},
	    {CHAN_ROLE_CONTROL, CHAN_VAULT, 0, true},
	    {CHAN_ROLE_CONTROL, CHAN_READY, 0, true},
	    {CHAN_ROLE_CONTROL, CHAN_LEARN, 0, false},
	    {CHAN_ROLE_CONTROL, CHAN_SOCKET_REQ, SOCK_STREAM, false},
	    {CHAN_ROLE_CONTROL, CHAN_SOCKET_REQ, SOCK_DGRAM, false},
	    {CHAN_ROLE_CONTROL, CHAN_LEAF_REQ, 0, false},
	    {CHAN_ROLE_CONTROL, CHAN_ACK, 0, true}, /* of the CA certificates pushed to it */
	    {CHAN_ROLE_DNS, CHAN_LEARN, 0, true},
	    {CHAN_ROLE_DNS, CHAN_SOCKET_REQ, SOCK_DGRAM, true},
	    {CHAN_ROLE_DNS, CHAN_SOCKET_REQ, SOCK_STREAM, true},
	    {CHAN_ROLE_DNS, CHAN_READY, 0, true},
	    {CHAN_ROLE_DNS, CHAN_ACK, 0, true},
	    {CHAN_ROLE_DNS, CHAN_POLICY, 0, false},
	    {CHAN_ROLE_DNS, CHAN_VAULT, 0, false},
	    {CHAN_ROLE_DNS, CHAN_LEAF_REQ, 0, false},
	    {CHAN_ROLE_INTERCEPT, CHAN_LEAF_REQ, 0, true},
	    {CHAN_ROLE_INTERCEPT, CHAN_SOCKET_REQ, SOCK_STREAM, true},
	    {CHAN_ROLE_INTERCEPT, CHAN_SOCKET_REQ, SOCK_DGRAM, false},
	    {CHAN_ROLE_INTERCEPT, CHAN_READY, 0, true},
	    {CHAN_ROLE_INTERCEPT, CHAN_ACK, 0, true},
	    {CHAN_ROLE_INTERCEPT, CHAN_LEARN, 0, false},
	    {CHAN_ROLE_INTERCEPT, CHAN_POLICY, 0, false},
	    {CHAN_ROLE_INTERCEPT, CHAN_VAULT, 0, false},
	};
	union chan_msg m;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		memset(&m, 0, sizeof(m));
		m.hdr.type = (uint16_t)rows[i].type;
		m.hdr.id = 5;
		m.socket_req.family = AF_INET;
		if (rows[i].type == CHAN_SOCKET_REQ)
			m.socket_req.socktype = rows[i].socktype;
		assert_int_equal(chan_role_may_send(rows[i].role, &m), rows[i].ok);
	}
	/* No role sends the parent's own types, nor an unknown one. */
	for (int r = 0; r < CHAN_ROLE_MAX; r++) {
		static const unsigned parents[] = {
		    CHAN_RESULT, CHAN_SOCKET_REP, CHAN_LEAF_REP, CHAN_CA};

		for (size_t i = 0; i < sizeof(parents) / sizeof(parents[0]); i++) {
			memset(&m, 0, sizeof(m));
			m.hdr.type = (uint16_t)parents[i];
			assert_false(chan_role_may_send((enum chan_role)r, &m));
		}
	}
	memset(&m, 0, sizeof(m));
	m.hdr.type = CHAN_READY;
	assert_false(chan_role_may_send(CHAN_ROLE_MAX, &m));
}

/* A refusal event: each source sends only its own kind; the report child
 * sends none, and asks only for TCP sockets. */
static void
test_event_roles(void **state)
{
	static const struct {
		enum chan_role role;
		unsigned kind;
		bool ok;
	} rows[] = {
	    {CHAN_ROLE_DNS, CHAN_EVENT_DNS_DENY, true},
	    {CHAN_ROLE_DNS, CHAN_EVENT_CONN_DENY, true}, /* the table's refusals (kreject.c) */
	    {CHAN_ROLE_DNS, CHAN_EVENT_VAULT_DENY, false},
	    {CHAN_ROLE_INTERCEPT, CHAN_EVENT_CONN_DENY, true},
	    {CHAN_ROLE_INTERCEPT, CHAN_EVENT_VAULT_DENY, true},
	    {CHAN_ROLE_INTERCEPT, CHAN_EVENT_DNS_DENY, false},
	    {CHAN_ROLE_CONTROL, CHAN_EVENT_DNS_DENY, false},
	    {CHAN_ROLE_CONTROL, CHAN_EVENT_VAULT_DENY, false},
	    {CHAN_ROLE_REPORT, CHAN_EVENT_DNS_DENY, false},
	    {CHAN_ROLE_REPORT, CHAN_EVENT_CONN_DENY, false},
	    {CHAN_ROLE_DNS, 0, false},
	    {CHAN_ROLE_INTERCEPT, CHAN_EVENT_KIND_MAX, false},
	};
	union chan_msg m;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		memset(&m, 0, sizeof(m));
		m.hdr.type = CHAN_EVENT;
		m.hdr.id = 3;
		m.event.kind = (uint8_t)rows[i].kind;
		assert_int_equal(chan_role_may_send(rows[i].role, &m), rows[i].ok);
	}
	memset(&m, 0, sizeof(m));
	m.hdr.type = CHAN_SOCKET_REQ;
	m.hdr.id = 3;
	m.socket_req.family = AF_INET;
	m.socket_req.socktype = SOCK_STREAM;
	assert_true(chan_role_may_send(CHAN_ROLE_REPORT, &m));
	m.socket_req.socktype = SOCK_DGRAM;
	assert_false(chan_role_may_send(CHAN_ROLE_REPORT, &m));
	m.hdr.type = CHAN_READY;
	assert_true(chan_role_may_send(CHAN_ROLE_REPORT, &m));
	m.hdr.type = CHAN_LEARN;
	assert_false(chan_role_may_send(CHAN_ROLE_REPORT, &m));
	m.hdr.type = CHAN_LEAF_REQ;
	assert_false(chan_role_may_send(CHAN_ROLE_REPORT, &m));
}

/*
 * The chained proxy's addresses (CHAN_LEARN_PROXY): port 0 only, and no
 * other flag beside CHAN_LEARN_MORE; both ways.
 */
static void
test_proxy_learn_fields(void **state)
{
	struct chan_learn l;
	const char *why;

	(void)state;
	memset(&l, 0, sizeof(l));
	l.hdr.type = CHAN_LEARN;
	l.hdr.id = 4;
	l.hdr.flags = CHAN_LEARN_PROXY;
	l.family = AF_INET;
	l.addr[0] = 192;
	l.addr[1] = 0;
	l.addr[2] = 2;
	l.addr[3] = 9;
	l.timeout_s = 60;
	strcpy(l.name, "proxy.corp.example");
	assert_true(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	l.hdr.flags = CHAN_LEARN_PROXY | CHAN_LEARN_MORE;
	assert_true(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	l.hdr.id = CHAN_ID_PARENT | 4;
	assert_true(chan_validate(&l, sizeof(l), CHAN_TO_WORKER, &why));
	l.hdr.id = 4;
	l.port = 443;
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	assert_string_equal(why, "proxy address with a port scope");
	l.port = 0;
	l.hdr.flags = CHAN_LEARN_PROXY | 0x4;
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	/* A workload learn keeps its port scopes. */
	l.hdr.flags = 0;
	l.port = 443;
	assert_true(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
}

/* An event's fields: a known kind, a reason word, an address of its family
 * or a canonical name; a child's id toward the parent, a parent id onward. */
static void
test_event_fields(void **state)
{
	struct chan_event e;
	const char *why;

#define EVENT_RESET()                                                                              \
	do {                                                                                       \
		memset(&e, 0, sizeof(e));                                                          \
		e.hdr.type = CHAN_EVENT;                                                           \
		e.hdr.id = 9;                                                                      \
		e.kind = CHAN_EVENT_DNS_DENY;                                                      \
		strcpy(e.name, "evil.example.com");                                                \
		strcpy(e.reason, "policy_deny");                                                   \
	} while (0)

	EVENT_RESET();
	assert_true(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_WORKER, &why)); /* a child's id */
	e.hdr.id = CHAN_ID_PARENT | 9;
	assert_true(chan_validate(&e, sizeof(e), CHAN_TO_WORKER, &why));
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));

	EVENT_RESET();
	strcpy(e.name, "Evil.Example.com"); /* not canonical */
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));
	assert_string_equal(why, "event out of range");
	EVENT_RESET();
	e.name[sizeof(e.name) - 1] = 'x'; /* bytes after the NUL */
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));
	EVENT_RESET();
	strcpy(e.reason, "policy deny"); /* only [a-z0-9_] */
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));
	EVENT_RESET();
	strcpy(e.reason, "Policy");
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));
	EVENT_RESET();
	memset(e.reason, 0, sizeof(e.reason)); /* a reason is required */
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));
	EVENT_RESET();
	e.kind = CHAN_EVENT_KIND_MAX;
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));
	EVENT_RESET();
	e.hdr.flags = 1;
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));

	/* An address alone is enough; it must be of its family. */
	EVENT_RESET();
	memset(e.name, 0, sizeof(e.name));
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why)); /* neither */
	e.family = AF_INET;
	e.addr[0] = 192;
	e.addr[3] = 1;
	e.port = 443;
	assert_true(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));
	e.addr[5] = 1; /* IPv4 with trailing bytes */
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));
	e.addr[5] = 0;
	e.family = AF_UNIX;
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));
	e.family = AF_INET6;
	e.addr[15] = 1;
	assert_true(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));
	e.family = 0; /* no family, yet address bytes */
	assert_false(chan_validate(&e, sizeof(e), CHAN_TO_PARENT, &why));
#undef EVENT_RESET
}

/* Acks go to the parent and echo a parent id; pushes go to a child with one. */
static void
test_ack_and_push_ids(void **state)
{
	struct chan_ack a = {.hdr = {.type = CHAN_ACK, .id = CHAN_ID_PARENT | 9}};
	struct chan_learn l = {.hdr = {.type = CHAN_LEARN, .id = CHAN_ID_PARENT | 9},
	    .family = AF_INET,
	    .addr = {192, 0, 2, 1},
	    .port = 443,
	    .timeout_s = 60,
	    .name = "api.example.com"};
	const char *why;

	assert_true(chan_validate(&a, sizeof(a), CHAN_TO_PARENT, &why));
	assert_false(chan_validate(&a, sizeof(a), CHAN_TO_WORKER, &why));
	a.err = -1;
	assert_false(chan_validate(&a, sizeof(a), CHAN_TO_PARENT, &why));
	assert_string_equal(why, "ack out of range");
	a.err = 0;
	a.hdr.id = 9; /* acknowledges nothing the parent could have pushed */
	assert_false(chan_validate(&a, sizeof(a), CHAN_TO_PARENT, &why));
	/* A learn pushed to the intercept carries a parent id; one from dns may not. */
	assert_true(chan_validate(&l, sizeof(l), CHAN_TO_WORKER, &why));
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	l.hdr.id = 9;
	assert_true(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_WORKER, &why));
}

/* Vault chunks: the policy's chunk rules under the vault's own limit. */
static void
test_vault_chunks(void **state)
{
	static struct chan_policy c;
	const char *why;

	memset(&c, 0, sizeof(c));
	c.hdr.type = CHAN_VAULT;
	c.hdr.id = 4;
	c.total = c.len = 6;
	memcpy(c.data, "secret", 6);
	assert_true(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
	c.total = CHAN_MAX_VAULT_BYTES + 1;
	assert_false(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
	assert_string_equal(why, "vault chunk out of range");
	c.total = 6;
	c.data[100] = 'x'; /* bytes past len */
	assert_false(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
}

/* A document in chunks: whole in order, refused out of order, wiped when reset. */
static void
test_doc_feed(void **state)
{
	static union chan_msg m;
	struct chan_doc d;
	char *doc;
	size_t len;

	memset(&d, 0, sizeof(d));
	memset(&m, 0, sizeof(m));
	m.policy.hdr.type = CHAN_VAULT;
	m.policy.hdr.id = 3;
	m.policy.hdr.flags = CHAN_POLICY_MORE;
	m.policy.total = CHAN_POLICY_CHUNK + 4;
	m.policy.len = CHAN_POLICY_CHUNK;
	memset(m.policy.data, 'a', CHAN_POLICY_CHUNK);
	assert_int_equal(chan_doc_feed(&d, &m), CHAN_DOC_MORE);
	/* Begun twice. */
	assert_int_equal(chan_doc_feed(&d, &m), CHAN_DOC_BAD);
	m.policy.offset = CHAN_POLICY_CHUNK;
	m.policy.len = 4;
	m.policy.hdr.flags = 0;
	memset(m.policy.data, 0, CHAN_POLICY_CHUNK);
	memcpy(m.policy.data, "tail", 4);
	/* Another id, or the other document type, continues nothing. */
	m.policy.hdr.id = 4;
	assert_int_equal(chan_doc_feed(&d, &m), CHAN_DOC_BAD);
	m.policy.hdr.id = 3;
	m.policy.hdr.type = CHAN_POLICY;
	assert_int_equal(chan_doc_feed(&d, &m), CHAN_DOC_BAD);
	m.policy.hdr.type = CHAN_VAULT;
	assert_int_equal(chan_doc_feed(&d, &m), CHAN_DOC_DONE);
	doc = chan_doc_take(&d, &len);
	assert_non_null(doc);
	assert_int_equal(len, CHAN_POLICY_CHUNK + 4);
	assert_memory_equal(doc + CHAN_POLICY_CHUNK, "tail", 4);
	assert_int_equal(doc[0], 'a');
	free(doc);
	assert_null(d.buf);
	/* An empty document is no buffer. */
	memset(&m, 0, sizeof(m));
	m.policy.hdr.type = CHAN_POLICY;
	m.policy.hdr.id = 5;
	assert_int_equal(chan_doc_feed(&d, &m), CHAN_DOC_DONE);
	assert_null(chan_doc_take(&d, &len));
	assert_int_equal(len, 0);
	/* A chunk that continues nothing. */
	m.policy.offset = 8;
	m.policy.total = 16;
	m.policy.len = 8;
	assert_int_equal(chan_doc_feed(&d, &m), CHAN_DOC_BAD);
	chan_doc_reset(&d);
}

/* chan_doc_send cuts a document into chunks that reassemble to it. */
static void
test_doc_send(void **state)
{
	static char doc[CHAN_POLICY_CHUNK * 2 + 100];
	static union chan_msg m;
	struct chan_doc d;
	int sv[2], passfd, n = 0;
	enum chan_doc_status st = CHAN_DOC_MORE;
	const char *why;
	char *got;
	size_t len;

	for (size_t i = 0; i < sizeof(doc); i++)
		doc[i] = (char)('a' + i % 26);
	memset(&d, 0, sizeof(d));
	assert_int_equal(chan_pair(sv), 0);
	assert_int_equal(
	    chan_doc_send(sv[0], CHAN_POLICY, CHAN_ID_PARENT | 2, doc, sizeof(doc), 1000), 0);
	while (st == CHAN_DOC_MORE) {
		assert_int_equal(chan_recv(sv[1], &m, CHAN_TO_WORKER, &passfd, &why), CHAN_OK);
		st = chan_doc_feed(&d, &m);
		n++;
	}
	assert_int_equal(st, CHAN_DOC_DONE);
	assert_int_equal(n, 3);
	got = chan_doc_take(&d, &len);
	assert_int_equal(len, sizeof(doc));
	assert_memory_equal(got, doc, sizeof(doc));
	free(got);
	close(sv[0]);
	close(sv[1]);
}

/*
 * The renewed CA's certificates: parent to child only, under a parent id,
 * a current certificate always, every byte past what is used zero.
 */
static void
test_ca_message(void **state)
{
	struct chan_ca *m = calloc(1, sizeof(*m));
	const char *why;

	assert_non_null(m);
	assert_int_equal(chan_msg_size(CHAN_CA), sizeof(struct chan_ca));
	assert_string_equal(chan_type_name(CHAN_CA), "ca");
	m->hdr.type = CHAN_CA;
	m->hdr.id = CHAN_ID_PARENT | 9;
	m->cur_len = 3;
	memset(m->cur, 0x30, 3);
	assert_true(chan_validate(m, sizeof(*m), CHAN_TO_WORKER, &why));
	m->prev_len = CHAN_CA_DER_MAX;
	memset(m->prev, 0x30, CHAN_CA_DER_MAX);
	assert_true(chan_validate(m, sizeof(*m), CHAN_TO_WORKER, &why));
	/* A child never tells the parent a CA. */
	assert_false(chan_validate(m, sizeof(*m), CHAN_TO_PARENT, &why));
	assert_string_equal(why, "message type not allowed in this direction");
	/* A push, not a reply: a child's id is refused. */
	m->hdr.id = 9;
	assert_false(chan_validate(m, sizeof(*m), CHAN_TO_WORKER, &why));
	assert_string_equal(why, "message id of the wrong side");
	m->hdr.id = CHAN_ID_PARENT | 9;
	/* No current certificate, or one past the field. */
	m->cur_len = 0;
	assert_false(chan_validate(m, sizeof(*m), CHAN_TO_WORKER, &why));
	assert_string_equal(why, "ca message out of range");
	m->cur_len = CHAN_CA_DER_MAX + 1;
	assert_false(chan_validate(m, sizeof(*m), CHAN_TO_WORKER, &why));
	m->cur_len = 3;
	m->prev_len = CHAN_CA_DER_MAX + 1;
	assert_false(chan_validate(m, sizeof(*m), CHAN_TO_WORKER, &why));
	/* Bytes past the lengths. */
	m->prev_len = CHAN_CA_DER_MAX - 1;
	assert_false(chan_validate(m, sizeof(*m), CHAN_TO_WORKER, &why));
	m->prev_len = 0;
	memset(m->prev, 0, sizeof(m->prev));
	m->cur[3] = 1;
	assert_false(chan_validate(m, sizeof(*m), CHAN_TO_WORKER, &why));
	m->cur[3] = 0;
	m->hdr.flags = 1;
	assert_false(chan_validate(m, sizeof(*m), CHAN_TO_WORKER, &why));
	m->hdr.flags = 0;
	assert_true(chan_validate(m, sizeof(*m), CHAN_TO_WORKER, &why));
	/* And no role may send one, were it ever let through. */
	for (int r = 0; r < CHAN_ROLE_MAX; r++)
		assert_false(chan_role_may_send((enum chan_role)r, (const union chan_msg *)m));
	free(m);
}

static void
test_valid_request_passes(void **state)
{
	struct chan_socket_req m = {
	    .hdr = {.type = CHAN_SOCKET_REQ, .id = 7}, .family = AF_INET, .socktype = SOCK_DGRAM};
	const char *why;

	assert_true(chan_validate(&m, sizeof(m), CHAN_TO_PARENT, &why));
}

static void
test_wrong_sizes_refused(void **state)
{
	uint8_t buf[sizeof(union chan_msg) + 8];
	struct chan_socket_req m = {
	    .hdr = {.type = CHAN_SOCKET_REQ, .id = 7}, .family = AF_INET, .socktype = SOCK_DGRAM};
	const char *why;

	memset(buf, 0, sizeof(buf));
	memcpy(buf, &m, sizeof(m));
	assert_false(chan_validate(buf, sizeof(m) - 1, CHAN_TO_PARENT, &why));
	assert_string_equal(why, "message size does not match its type");
	assert_false(chan_validate(buf, sizeof(m) + 1, CHAN_TO_PARENT, &why));
	assert_false(chan_validate(buf, 3, CHAN_TO_PARENT, &why));
	assert_string_equal(why, "short message");
	assert_false(chan_validate(buf, 0, CHAN_TO_PARENT, &why));
	/* Every type refuses every size but its own. */
	for (unsigned t = 1; t < CHAN_TYPE_MAX; t++) {
		struct chan_hdr h = {.type = (uint16_t)t, .id = 1};
		memcpy(buf, &h, sizeof(h));
		for (size_t n = 0; n <= sizeof(union chan_msg); n++) {
			if (n == chan_msg_size(t))
				continue;
			assert_false(chan_validate(buf, n, CHAN_TO_PARENT, &why));
			assert_false(chan_validate(buf, n, CHAN_TO_WORKER, &why));
		}
	}
}

static void
test_unknown_types_refused(void **state)
{
	uint8_t buf[sizeof(union chan_msg)];
	const char *why;
	unsigned bad[] = {CHAN_NONE, CHAN_TYPE_MAX, CHAN_TYPE_MAX + 1, 0xffff};

	memset(buf, 0, sizeof(buf));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct chan_hdr h = {.type = (uint16_t)bad[i], .id = 1};
		memcpy(buf, &h, sizeof(h));
		assert_false(
		    chan_validate(buf, sizeof(struct chan_socket_req), CHAN_TO_PARENT, &why));
		assert_string_equal(why, "unknown message type");
		assert_int_equal(chan_msg_size(bad[i]), 0);
	}
}

static void
test_direction_enforced(void **state)
{
	struct chan_result r = {.hdr = {.type = CHAN_RESULT, .id = 3}, .req_type = CHAN_LEARN};
	struct chan_ready rd = {.hdr = {.type = CHAN_READY, .id = 3}};
	const char *why;

	assert_true(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
	/* A worker cannot send the parent a reply, nor the parent a request. */
	assert_false(chan_validate(&r, sizeof(r), CHAN_TO_PARENT, &why));
	assert_string_equal(why, "message type not allowed in this direction");
	assert_false(chan_validate(&rd, sizeof(rd), CHAN_TO_WORKER, &why));
}

static void
test_out_of_range_fields_refused(void **state)
{
	const char *why;
	struct chan_socket_req s = {
	    .hdr = {.type = CHAN_SOCKET_REQ, .id = 1}, .family = AF_UNIX, .socktype = SOCK_DGRAM};
	struct chan_learn l = {.hdr = {.type = CHAN_LEARN, .id = 1},
	    .family = AF_INET,
	    .timeout_s = 60,
	    .name = "api.example.com"};
	struct chan_result r = {.hdr = {.type = CHAN_RESULT, .id = 1}, .req_type = CHAN_LEARN};

	assert_false(chan_validate(&s, sizeof(s), CHAN_TO_PARENT, &why));
	s.family = AF_INET6;
	s.socktype = SOCK_RAW; /* a raw socket would escape the mark model */
	assert_false(chan_validate(&s, sizeof(s), CHAN_TO_PARENT, &why));
	s.socktype = SOCK_STREAM;
	assert_true(chan_validate(&s, sizeof(s), CHAN_TO_PARENT, &why));
	s.hdr.id = 0; /* id 0 is never valid */
	assert_false(chan_validate(&s, sizeof(s), CHAN_TO_PARENT, &why));
	assert_string_equal(why, "message id 0");

	assert_true(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	l.timeout_s = 0;
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	l.timeout_s = CHAN_MAX_TIMEOUT_S + 1;
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	l.timeout_s = 60;
	l.addr[7] = 1; /* IPv4 with trailing bytes */
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	l.addr[7] = 0;
	l.hdr.flags = 0x80;
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	l.hdr.flags = CHAN_LEARN_MORE;
	assert_true(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	/* Only the parent acts on a learn. */
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_WORKER, &why));

	/* The name is canonical, NUL-terminated, and nothing follows it. */
	memset(l.name, 0, sizeof(l.name));
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	assert_string_equal(why, "learn name not canonical");
	strcpy(l.name, "API.example.com");
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	strcpy(l.name, "api.example.com.");
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	strcpy(l.name, "bad_name.example");
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	memset(l.name, 0, sizeof(l.name));
	strcpy(l.name, "api.example.com");
	l.name[100] = 'x'; /* bytes after the NUL */
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	memset(l.name, 'a', sizeof(l.name)); /* no NUL at all */
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	memset(l.name, 0, sizeof(l.name));
	strcpy(l.name, "api.example.com");
	l.pad2 = 1;
	assert_false(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));
	l.pad2 = 0;
	assert_true(chan_validate(&l, sizeof(l), CHAN_TO_PARENT, &why));

	/* Policy chunks: in range, full unless last, the last ends at total. */
	{
		static struct chan_policy c;

		memset(&c, 0, sizeof(c));
		c.hdr.type = CHAN_POLICY;
		c.hdr.id = 1;
		assert_true(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why)); /* empty: none */
		/* To a child, a document is the parent's push: its id says so. */
		assert_false(chan_validate(&c, sizeof(c), CHAN_TO_WORKER, &why));
		assert_string_equal(why, "message id of the wrong side");
		c.hdr.id = CHAN_ID_HANDOVER;
		assert_true(chan_validate(&c, sizeof(c), CHAN_TO_WORKER, &why));
		assert_false(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
		c.hdr.id = 1;
		c.total = 10;
		c.len = 10;
		assert_true(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
		c.len = 9; /* the last chunk must end at total */
		assert_false(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
		c.hdr.flags = CHAN_POLICY_MORE; /* a chunk with more after it must be full */
		assert_false(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
		c.total = CHAN_POLICY_CHUNK * 2;
		c.len = CHAN_POLICY_CHUNK;
		assert_true(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
		c.offset = CHAN_POLICY_CHUNK + 1; /* past the end */
		assert_false(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
		c.offset = 0;
		c.total = CHAN_MAX_POLICY_BYTES + 1;
		assert_false(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
		c.total = 10;
		c.len = 10;
		c.hdr.flags = 0;
		c.data[10] = 'x'; /* bytes past len */
		assert_false(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
		c.data[10] = 0;
		c.hdr.flags = 0x80;
		assert_false(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
		c.hdr.flags = 0;
		c.pad = 1;
		assert_false(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
		c.pad = 0;
		c.len = CHAN_POLICY_CHUNK + 1;
		assert_false(chan_validate(&c, sizeof(c), CHAN_TO_PARENT, &why));
	}

	/* Leaf requests: a canonical name and a key of at most CHAN_LEAF_KEY_MAX bytes. */
	{
		static struct chan_leaf_req q;
		static struct chan_leaf_rep p;

		memset(&q, 0, sizeof(q));
		q.hdr.type = CHAN_LEAF_REQ;
		q.hdr.id = 1;
		strcpy(q.name, "api.example.com");
		q.key_len = 91;
		memset(q.key, 0x30, 91);
		assert_true(chan_validate(&q, sizeof(q), CHAN_TO_PARENT, &why));
		assert_false(chan_validate(&q, sizeof(q), CHAN_TO_WORKER, &why));
		q.key[100] = 1; /* bytes past key_len */
		assert_false(chan_validate(&q, sizeof(q), CHAN_TO_PARENT, &why));
		q.key[100] = 0;
		q.key_len = 0;
		assert_false(chan_validate(&q, sizeof(q), CHAN_TO_PARENT, &why));
		q.key_len = CHAN_LEAF_KEY_MAX + 1;
		assert_false(chan_validate(&q, sizeof(q), CHAN_TO_PARENT, &why));
		q.key_len = 91;
		strcpy(q.name, "*.example.com");
		assert_false(chan_validate(&q, sizeof(q), CHAN_TO_PARENT, &why));

		memset(&p, 0, sizeof(p));
		p.hdr.type = CHAN_LEAF_REP;
		p.hdr.id = 1;
		p.der_len = 10;
		assert_true(chan_validate(&p, sizeof(p), CHAN_TO_WORKER, &why));
		assert_false(chan_validate(&p, sizeof(p), CHAN_TO_PARENT, &why));
		p.err = EPERM; /* an error carries no certificate */
		assert_false(chan_validate(&p, sizeof(p), CHAN_TO_WORKER, &why));
		p.der_len = 0;
		assert_true(chan_validate(&p, sizeof(p), CHAN_TO_WORKER, &why));
		p.err = 0; /* and success carries one */
		assert_false(chan_validate(&p, sizeof(p), CHAN_TO_WORKER, &why));
		p.der_len = CHAN_LEAF_DER_MAX + 1;
		assert_false(chan_validate(&p, sizeof(p), CHAN_TO_WORKER, &why));
	}

	/* A result message must be NUL-terminated. */
	assert_true(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
	memset(r.msg, 'A', sizeof(r.msg));
	assert_false(chan_validate(&r, sizeof(r), CHAN_TO_WORKER, &why));
}

static void
test_fd_passing(void **state)
{
	int sv[2], p[2], fd = -1;
	union chan_msg m;
	const char *why;
	struct chan_socket_rep rep = {.hdr = {.type = CHAN_SOCKET_REP, .id = 9}, .err = 0};
	struct chan_ready rd = {.hdr = {.type = CHAN_READY, .id = 9}};

	assert_int_equal(chan_pair(sv), 0);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(chan_send(sv[0], &rep, p[1]), 0);
	assert_int_equal(chan_recv(sv[1], &m, CHAN_TO_WORKER, &fd, &why), CHAN_OK);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
	/* A descriptor on a message that carries none is refused and closed. */
	assert_int_equal(chan_send(sv[1], &rd, p[1]), 0);
	assert_int_equal(chan_recv(sv[0], &m, CHAN_TO_PARENT, &fd, &why), CHAN_INVALID);
	assert_int_equal(fd, -1);
	/* A successful socket reply without a descriptor is refused. */
	assert_int_equal(chan_send(sv[0], &rep, -1), 0);
	assert_int_equal(chan_recv(sv[1], &m, CHAN_TO_WORKER, &fd, &why), CHAN_INVALID);
	/* Nothing pending: AGAIN; closed peer: EOF. */
	assert_int_equal(chan_recv(sv[1], &m, CHAN_TO_WORKER, &fd, &why), CHAN_AGAIN);
	close(sv[0]);
	assert_int_equal(chan_recv(sv[1], &m, CHAN_TO_WORKER, &fd, &why), CHAN_EOF);
	close(sv[1]);
	close(p[0]);
	close(p[1]);
}

/*
 * A socket reply that arrives while the receiver has no free descriptor
 * (the kernel drops the fd and sets MSG_CTRUNC) is a failed request, not
 * a broken channel: the worker used to exit on it, freeing its ports.
 * The scenario runs in a re-executed copy of this program, so that it
 * meets the kernel's descriptor limit even under valgrind (which keeps
 * descriptor limits of its own and does not follow exec). Its exit status
 * is the number of the first check that failed.
 */
static const char *self_path;

static int
fd_lost_scenario(void)
{
	int sv[2], p[2], fd = -1, nfill = 0, fill[64];
	union chan_msg m;
	const char *why;
	struct chan_socket_rep rep = {.hdr = {.type = CHAN_SOCKET_REP, .id = 7}, .err = 0};
	struct rlimit low;

	if (chan_pair(sv) != 0 || pipe(p) != 0 || chan_send(sv[0], &rep, p[1]) != 0)
		return 1;
	/* Use up every descriptor slot (bounded): the next one cannot arrive. */
	if (getrlimit(RLIMIT_NOFILE, &low) != 0)
		return 2;
	low.rlim_cur = (rlim_t)p[1] + 8;
	if (setrlimit(RLIMIT_NOFILE, &low) != 0)
		return 3;
	while (nfill < 64 && (fill[nfill] = dup(0)) >= 0)
		nfill++;
	if (nfill == 64 || errno != EMFILE)
		return 4;
	if (chan_recv(sv[1], &m, CHAN_TO_WORKER, &fd, &why) != CHAN_FDLOST)
		return 5;
	if (fd != -1 || m.hdr.type != CHAN_SOCKET_REP || m.hdr.id != 7)
		return 6;
	/* The channel goes on: with a slot free, the next reply arrives whole. */
	close(p[0]);
	if (chan_send(sv[0], &rep, p[1]) != 0)
		return 7;
	if (chan_recv(sv[1], &m, CHAN_TO_WORKER, &fd, &why) != CHAN_OK || fd < 0)
		return 8;
	/* Free the slots again: the sanitizers' exit-time checks need descriptors. */
	for (int i = 0; i < nfill; i++)
		close(fill[i]);
	close(fd);
	return 0;
}

static void
test_fd_lost_is_a_failed_request(void **state)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		execl(self_path, self_path, "--fd-lost-scenario", (char *)NULL);
		_exit(99);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void
test_oversize_datagram_refused(void **state)
{
	int sv[2], fd;
	uint8_t big[sizeof(union chan_msg) + 32];
	union chan_msg m;
	const char *why;
	struct chan_hdr h = {.type = CHAN_READY, .id = 1};

	memset(big, 0, sizeof(big));
	memcpy(big, &h, sizeof(h));
	assert_int_equal(chan_pair(sv), 0);
	assert_int_equal(send(sv[0], big, sizeof(big), 0), (ssize_t)sizeof(big));
	assert_int_equal(chan_recv(sv[1], &m, CHAN_TO_PARENT, &fd, &why), CHAN_INVALID);
	close(sv[0]);
	close(sv[1]);
}

int
main(int argc, char **argv)
{
	self_path = argv[0];
	if (argc == 2 && strcmp(argv[1], "--fd-lost-scenario") == 0)
		return fd_lost_scenario();
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_role_table),
	    cmocka_unit_test(test_event_roles),
	    cmocka_unit_test(test_event_fields),
	    cmocka_unit_test(test_proxy_learn_fields),
	    cmocka_unit_test(test_ack_and_push_ids),
	    cmocka_unit_test(test_vault_chunks),
	    cmocka_unit_test(test_doc_feed),
	    cmocka_unit_test(test_doc_send),
	    cmocka_unit_test(test_ca_message),
	    cmocka_unit_test(test_valid_request_passes),
	    cmocka_unit_test(test_wrong_sizes_refused),
	    cmocka_unit_test(test_unknown_types_refused),
	    cmocka_unit_test(test_direction_enforced),
	    cmocka_unit_test(test_out_of_range_fields_refused),
	    cmocka_unit_test(test_fd_passing),
	    cmocka_unit_test(test_oversize_datagram_refused),
	    cmocka_unit_test(test_fd_lost_is_a_failed_request),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
