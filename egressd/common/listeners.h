/*
 * The sidecar's listening sockets (every process). The parent binds each
 * one once, before the first fork, with the sidecar's SO_MARK, and keeps
 * it for its whole life; every worker incarnation inherits the same
 * sockets. A crashed worker therefore never frees a port, and the nft
 * input chain lets only a marked socket serve these ports, so a workload
 * that binds one while the sidecar restarts receives nothing.
 */
#ifndef EGRESSD_LISTENERS_H
#define EGRESSD_LISTENERS_H

#include <stddef.h>
#include <stdint.h>

enum listen_id {
	LISTEN_API = 0,
	LISTEN_DNS_UDP4,
	LISTEN_DNS_UDP6,
	LISTEN_DNS_TCP4,
	LISTEN_DNS_TCP6,
	LISTEN_TLS4,
	LISTEN_TLS6,
	LISTEN_PLAIN4,
	LISTEN_PLAIN6,
	LISTEN_PEEK4, /* other TCP ports of name-learned addresses (SNI/Host checks) */
	LISTEN_PEEK6,
	LISTEN_MAX,
};

/*
 * Connections the control API holds at once (the table's input chain
 * refuses more); part of the descriptor reserve the worker keeps beside
 * the intercept's and the DNS proxy's own caps.
 */
#define LISTEN_API_MAX_CONNS 64

/* Every listening socket; fd -1 where the configuration has none. */
struct listen_set {
	int fd[LISTEN_MAX];
	uint16_t port[LISTEN_MAX];
	uint8_t proto[LISTEN_MAX]; /* IPPROTO_TCP or IPPROTO_UDP */
};

/* A set with no sockets (every fd -1). */
static inline void
listen_set_none(struct listen_set *ls)
{
	for (int i = 0; i < LISTEN_MAX; i++) {
		ls->fd[i] = -1;
		ls->port[i] = 0;
		ls->proto[i] = 0;
	}
}

/*
 * Split an --http-addr spec: "[host]:port", "host:port" or ":port" (host
 * "0.0.0.0" then). 0, or -1 when it is none of these.
 */
int listen_split_addr(const char *spec, char *host, size_t hostlen, uint16_t *port)
    __attribute__((warn_unused_result));

#endif
