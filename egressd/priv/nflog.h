/*
 * nflog: the parent's reader of the table's refusals (NFLOG, nfnetlink_log
 * over libmnl). It binds one group, asks for the first CHAN_NFLOG_COPY
 * bytes of each packet, and turns each kernel record into a chan_nflog
 * for the dns child, which parses the packet (docs/nflog.md): the parent
 * reads only the netlink attributes the kernel wrote.
 */
#ifndef EGRESSD_NFLOG_H
#define EGRESSD_NFLOG_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "egressd/common/chan.h"

#define NFLOG_QTHRESH 32    /* records the kernel batches into one message at most */
#define NFLOG_TIMEOUT_CS 10 /* and for at most this long (1/100 s) */
#define NFLOG_RCVBUF (1u << 20)

enum nflog_status {
	NFLOG_RECORD, /* *out holds a record */
	NFLOG_OTHER,  /* a message that is not a packet record (or one without a payload) */
	NFLOG_BAD,    /* malformed: its attributes do not parse */
};

struct nflog;

/* Bind `group` (refused when another socket holds it). Owned; NULL with err. */
struct nflog *nflog_open(uint16_t group, char *err, size_t errlen)
    __attribute__((warn_unused_result));
void nflog_close(struct nflog *n); /* accepts NULL */
int nflog_fd(const struct nflog *n);

/* Called for each record read (borrowed for the call). */
typedef void (*nflog_record_cb)(const struct chan_nflog *r, void *arg);

/*
 * Read what is pending without blocking (at most a few datagrams, so a
 * flood cannot hold the parent's loop), calling cb per record; records
 * the kernel dropped (a full socket) are counted in nflog_lost().
 */
void nflog_read(struct nflog *n, nflog_record_cb cb, void *arg);
uint64_t nflog_lost(const struct nflog *n);

/*
 * Decode one netlink message (buf, len: one nlmsghdr and its payload) into
 * *out (id 0: the caller numbers it), stamped with now. Pure.
 */
enum nflog_status nflog_decode(const void *buf, size_t len, time_t now, struct chan_nflog *out);

#endif
