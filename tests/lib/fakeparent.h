/*
 * A fake parent for tests without root: the other end of a real channel,
 * in the test's own event loop. It answers socket requests with real
 * (unmarked) sockets, learns with RESULT, policies by decoding them with
 * policy_wire_decode, and records what it saw. Everything a child sends
 * goes through chan_recv()/chan_validate(), as in the real parent; an
 * invalid message is counted, never dispatched.
 */
#ifndef EGRESSD_TESTS_FAKEPARENT_H
#define EGRESSD_TESTS_FAKEPARENT_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct wchan;
struct chan_learn;

#define FAKEPARENT_MAX_LEARNS 256

struct fakeparent {
	struct event_base *base; /* the test's loop */
	struct wchan *wc;        /* the child's end, for the code under test */
	int pfd;                 /* the parent's end */
	struct event *ev;
	int fail_errno;    /* answer socket requests and learns with this errno when non-zero */
	unsigned served;   /* socket requests answered */
	unsigned invalid;  /* messages chan_validate() refused */
	unsigned policies; /* whole policies received and decoded */
	struct chan_learn *learns; /* the learns seen, FAKEPARENT_MAX_LEARNS at most */
	size_t nlearns;
	unsigned acks; /* CHAN_ACKs received, the last one's id and err */
	uint32_t ack_id;
	int ack_err;
	char *policy_rx; /* a policy document being received */
	uint32_t policy_have;
};

/* Set up the pair, the child's wchan and the fake's read event on base. 0 or -1. */
int fakeparent_init(struct fakeparent *f, struct event_base *base);
void fakeparent_fini(struct fakeparent *f);

#endif
