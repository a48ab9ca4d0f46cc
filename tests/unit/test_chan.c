/* Unit tests of the parent <-> worker channel: the size table, direction
 * and field checks, and descriptor passing over a real socketpair. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include "egressd/common/chan.h"

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
		assert_true(chan_validate(&c, sizeof(c), CHAN_TO_WORKER, &why));
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
