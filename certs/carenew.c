/*
 * carenew: the sandbox CA's renewal schedule and the operator CA's expiry
 * warning (the parent asks every watchdog tick). A generated CA is
 * renewed renew_before seconds before it expires; the previous one stays
 * in the export and GET /ca.pem until its own end, and then goes. It
 * holds no state and reads no clock: the caller passes both.
 */
#include <stdio.h>

#include "certs/ca.h"
#include "certs/carenew.h"

/* The next step of a generated CA's schedule. */
enum carenew_action
carenew_next(const struct carenew_sched *s, time_t now)
{
	if (s->prev_not_after != 0 && now >= s->prev_not_after)
		return CARENEW_DROP_PREV;
	if (s->prev_not_after != 0 || now < s->retry_at)
		return CARENEW_NONE;
	/* Written as a sum: cur_not_after - renew_before could precede the epoch. */
	if (now + (time_t)s->renew_before >= s->cur_not_after)
		return CARENEW_RENEW;
	return CARENEW_NONE;
}

/* The lifetime and overlap in force, checked. */
int
carenew_settings(unsigned lifetime_in, unsigned renew_before_in, unsigned *lifetime,
    unsigned *renew_before, char *err, size_t errlen)
{
	unsigned lt = lifetime_in ? lifetime_in : CA_DEFAULT_VALIDITY_SECS;
	unsigned rb = renew_before_in;

	if (lt < CA_MIN_VALIDITY_SECS || lt > CA_MAX_VALIDITY_SECS) {
		snprintf(err, errlen, "ca-lifetime must be between %d and %d seconds",
		    CA_MIN_VALIDITY_SECS, CA_MAX_VALIDITY_SECS);
		return -1;
	}
	if (rb == 0)
		rb = CARENEW_DEFAULT_RENEW_BEFORE_SECS < lt / 2 ? CARENEW_DEFAULT_RENEW_BEFORE_SECS
		                                                : lt / 2;
	/* Above half the lifetime, a third CA would be due while two are still trusted. */
	if (rb < CARENEW_MIN_RENEW_BEFORE_SECS || rb > lt / 2) {
		snprintf(err, errlen,
		    "ca-renew-before must be between %d seconds and half of ca-lifetime (%u)",
		    CARENEW_MIN_RENEW_BEFORE_SECS, lt / 2);
		return -1;
	}
	*lifetime = lt;
	*renew_before = rb;
	return 0;
}

/* How close an operator CA is to its end. */
enum carenew_op_state
carenew_operator_state(time_t not_after, time_t now)
{
	if (now >= not_after)
		return CARENEW_OP_EXPIRED;
	if (not_after - now <= CARENEW_OPERATOR_WARN_SECS)
		return CARENEW_OP_SOON;
	return CARENEW_OP_OK;
}

/* Log a state worse than the last one logged, once. */
bool
carenew_operator_warn(enum carenew_op_state logged, enum carenew_op_state now)
{
	return now > logged;
}
