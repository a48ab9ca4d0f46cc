/*
 * The report process: the sidecar's own deliveries to the outside, the
 * deny webhook (an OpenSandbox-shaped JSON POST per refusal) and the OTLP
 * metrics export. Unprivileged like the other children; its sockets carry
 * the report mark, which the nft table lets reach the webhook's and the
 * collector's address and port and nothing else (docs/nft-table.md). It
 * parses only the status line of their answers.
 */
#ifndef EGRESSD_REPORT_H
#define EGRESSD_REPORT_H

#include <stddef.h>

#include "egressd/common/chan.h"

#define REPORT_QUEUE 256       /* events waiting; one more is dropped and counted */
#define REPORT_DRAIN_S 5       /* on SIGTERM, queued events get this long */
#define REPORT_ATTEMPT_S 5     /* one delivery attempt, connect to answer */
#define REPORT_RETRIES 3       /* after the first attempt, at 1, 2 and 4 s */
#define REPORT_MAX_ANSWER 8192 /* bytes of an answer read for its status line */

struct wstate;
struct report;

/* The service (worker.c): NULL with err. */
struct report *report_new(struct wstate *ws, char *err, size_t errlen);
void report_free(struct report *r);

/* Queue an event for the webhook (dropped and counted when the queue is full). */
void report_event(struct report *r, const struct chan_event *e);

/* SIGTERM: deliver what is queued for up to REPORT_DRAIN_S, then end the loop. */
void report_drain(struct report *r);

/*
 * The webhook body of e into buf (cap bytes): upstream's shape
 * {"hostname","timestamp","source","sandboxId"} and egressd's "kind",
 * "reason", "address", "port". The length, or -1 when it does not fit.
 */
long report_event_json(const struct chan_event *e, const char *sandbox_id, char *buf, size_t cap);

/*
 * The status code of an HTTP/1.x answer head in buf: 100-599, 0 while
 * the status line is incomplete, -1 when it is not one.
 */
int report_status(const char *buf, size_t len);

#endif
