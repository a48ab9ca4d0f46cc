/*
 * The worker's end of the channel: sends requests to the parent and calls
 * back when the matching reply (by id) arrives.
 */
#ifndef EGRESSD_WCHAN_H
#define EGRESSD_WCHAN_H

#include <stdint.h>

#include <event2/event.h>

#include "egressd/common/chan.h"

struct wchan;

/* Reply callback: `reply` is borrowed for the call; `fd` is owned (-1 if none). */
typedef void (*wchan_reply_cb)(const union chan_msg *reply, int fd, void *arg);

/* Called when the channel breaks: the worker must exit. */
typedef void (*wchan_dead_cb)(const char *why, void *arg);

/*
 * A document chunk or learn the parent pushed (id with CHAN_ID_PARENT);
 * borrowed for the call. The handler answers with CHAN_ACK when whole.
 */
typedef void (*wchan_push_cb)(const union chan_msg *m, void *arg);

/* Pending requests at most; more is a worker bug and is refused. */
#define WCHAN_MAX_PENDING CHAN_MAX_PENDING

struct wchan *wchan_new(struct event_base *base, int fd, wchan_dead_cb dead, void *arg);
void wchan_free(struct wchan *w);

/* Take the parent's pushes; without a handler, a push breaks the channel. */
void wchan_on_push(struct wchan *w, wchan_push_cb cb, void *arg);

/* A fresh non-zero request id. */
uint32_t wchan_id(struct wchan *w);

/*
 * Send `msg` (its hdr.id must come from wchan_id()) and call `cb` with the
 * reply. 0, or -1 if the channel is broken or too many are pending.
 */
int wchan_request(struct wchan *w, const void *msg, wchan_reply_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* Send a message that has no reply of its own (static elements, ready). */
int wchan_send(struct wchan *w, const void *msg) __attribute__((warn_unused_result));

/* Send a message only if the channel has room now (events); 0, or -1 (dropped). */
int wchan_offer(struct wchan *w, const void *msg);

/*
 * Send n (1..CHAN_MAX_BATCH) messages of one batchable type, `size` bytes
 * apart in msgs, under one fresh id: CHAN_LEARN_MORE on all but the last
 * (other flags the caller set are kept), whose reply goes to cb. 0, or -1 if the channel broke.
 */
int wchan_batch(struct wchan *w, void *msgs, size_t size, size_t n, wchan_reply_cb cb, void *arg)
    __attribute__((warn_unused_result));

/*
 * Send a whole document (CHAN_POLICY or CHAN_VAULT) as chunks of one
 * fresh id, CHAN_POLICY_MORE on all but the last, whose reply goes to cb.
 * Every chunk buffer is wiped (a vault holds secrets). 0, or -1 if the
 * channel broke or there was no memory (cb is then not called).
 */
int wchan_doc(struct wchan *w, unsigned type, const char *doc, size_t len, wchan_reply_cb cb,
    void *arg) __attribute__((warn_unused_result));

/* Forget a pending request whose requester is gone; its reply is dropped. */
void wchan_cancel(struct wchan *w, uint32_t id);

#endif
