/*
 * capwatch: the parent looks, every watchdog tick, for processes in its
 * own network namespace, other than egressd's, whose effective
 * capabilities hold CAP_NET_ADMIN or CAP_NET_RAW. With NET_ADMIN a
 * workload can rewrite the ruleset, with NET_RAW it can send frames below
 * the inet hooks (AF_PACKET): egressd cannot enforce against either from
 * inside the namespace, so it says so loudly (unsafe_capabilities, once
 * per process). It sees what the PID namespace shows it: in a pod, only
 * with shareProcessNamespace; otherwise the check belongs host-side.
 */
#ifndef EGRESSD_CAPWATCH_H
#define EGRESSD_CAPWATCH_H

#include <stddef.h>
#include <sys/types.h>

struct capwatch;

struct capwatch *capwatch_new(void);
void capwatch_free(struct capwatch *cw);

/* One scan of /proc; egressd's own processes (ours[0..nours)) are skipped. Returns the reports made. */
unsigned capwatch_scan(struct capwatch *cw, const pid_t *ours, size_t nours);

#endif
