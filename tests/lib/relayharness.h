/*
 * A harness for the interceptor's HTTP relay (vault/icpt_http.c) driven
 * through the real code, for tests without root or TLS: a plain workload
 * connection is built as icpt_accept_cb builds one (its original
 * destination an in-process upstream on loopback), requests are written
 * on the workload's end of a socket pair, and a scripted upstream answers
 * each request head it sees. Used by tests/unit/test_icpt_relay.c and
 * tests/replay/replay_http.c. Every wait is bounded in loop turns.
 */
#ifndef EGRESSD_TESTS_RELAYHARNESS_H
#define EGRESSD_TESTS_RELAYHARNESS_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct intercept;
struct vault_snap;

#define RELAY_RX_MAX 65536
#define RELAY_MAX_SCRIPT 8
#define RELAY_PUMP_TURNS                                                                           \
	400 /* loop turns of at most 10 ms: a hang ends the test, it does not time it */

struct relay {
	struct event_base *base;
	struct intercept *ic;
	struct vault_snap *snap;
	int w;   /* the workload's end */
	int lfd; /* the upstream's listener */
	int ufd; /* the accepted upstream connection */
	int accepts;
	struct sockaddr_in up;
	char urx[RELAY_RX_MAX]; /* what the upstream received */
	size_t urxlen;
	char wrx[RELAY_RX_MAX]; /* what the workload received */
	size_t wrxlen;
	bool weof;
	const char *script[RELAY_MAX_SCRIPT]; /* one answer per request head upstream sees */
	size_t nscript, heads;
	char log[4096]; /* event:reason of every log record */
};

/* A connection for host api.allowed.test (plain HTTP, port 80) with snap in force (taken). */
struct relay *relay_new(struct vault_snap *snap);
void relay_free(struct relay *h);

/* Write s on the workload's end. */
void relay_send(struct relay *h, const char *s);

/* Run until the workload has received want (NULL: until EOF), at most turns (RELAY_PUMP_TURNS) times. */
bool relay_pump_n(struct relay *h, const char *want, int turns);
bool relay_pump(struct relay *h, const char *want);

/* Occurrences of needle in hay. */
size_t relay_count(const char *hay, const char *needle);

#endif
