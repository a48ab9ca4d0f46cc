/*
 * carenew: when the sandbox CA is renewed, and when an operator CA is
 * warned about. Pure decisions over times, so that the schedule is
 * unit-tested without waiting for a clock.
 */
#ifndef EGRESSD_CERTS_CARENEW_H
#define EGRESSD_CERTS_CARENEW_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

/* Limits and defaults (seconds). */
#define CARENEW_DEFAULT_RENEW_BEFORE_SECS (24 * 3600) /* or half the lifetime, if shorter */
#define CARENEW_MIN_RENEW_BEFORE_SECS 5
#define CARENEW_RETRY_SECS 5                       /* after a renewal that failed */
#define CARENEW_OPERATOR_WARN_SECS (7 * 24 * 3600) /* an operator CA this close to its end */

/* What the holder of a generated CA does now. */
enum carenew_action {
	CARENEW_NONE,      /* nothing yet */
	CARENEW_DROP_PREV, /* the previous CA has expired: out of the bundle, freed */
	CARENEW_RENEW,     /* make a new CA: the current one becomes the previous */
};

/* A generated CA's schedule. */
struct carenew_sched {
	time_t cur_not_after;  /* of the CA that signs the leaves */
	time_t prev_not_after; /* of the previous CA, still trusted; 0: none */
	unsigned renew_before; /* the overlap: renew this long before cur_not_after */
	time_t retry_at;       /* a failed renewal is not retried before; 0: no failure */
};

/*
 * The next step at `now`. An expired previous CA goes first; a renewal
 * waits until there is no previous CA, so that at most two CAs are ever
 * trusted (the configuration keeps the overlap at most half the
 * lifetime, so the previous one is gone by then). Call again after
 * acting: a late tick (a suspended host) may need both steps.
 */
enum carenew_action carenew_next(const struct carenew_sched *s, time_t now);

/*
 * The lifetime and overlap in force: 0 means the default (a week; a day
 * or half the lifetime if that is shorter). 0 with *lifetime and
 * *renew_before set, or -1 with err: the lifetime outside
 * CA_MIN_VALIDITY_SECS..CA_MAX_VALIDITY_SECS, the overlap below
 * CARENEW_MIN_RENEW_BEFORE_SECS or above half the lifetime.
 */
int carenew_settings(unsigned lifetime_in, unsigned renew_before_in, unsigned *lifetime,
    unsigned *renew_before, char *err, size_t errlen) __attribute__((warn_unused_result));

/* How close an operator CA (never renewed by egressd) is to its end. */
enum carenew_op_state {
	CARENEW_OP_OK,      /* more than CARENEW_OPERATOR_WARN_SECS left */
	CARENEW_OP_SOON,    /* within CARENEW_OPERATOR_WARN_SECS of notAfter */
	CARENEW_OP_EXPIRED, /* past notAfter: no leaf can be issued */
};

enum carenew_op_state carenew_operator_state(time_t not_after, time_t now);

/*
 * Whether to log the operator CA's state: once for each state worse than
 * the one last logged (start from CARENEW_OP_OK, so a CA already within
 * the window is warned about at start).
 */
bool carenew_operator_warn(enum carenew_op_state logged, enum carenew_op_state now);

#endif
