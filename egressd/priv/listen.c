/*
 * listen: the listening sockets (parent process). Each is made once with
 * SO_MARK set (only a process with CAP_NET_ADMIN can), so that the nft
 * input chain can tell it from a socket the workload bound to the same
 * port, and non-blocking: the child that serves it inherits it by fork (and only that one).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egressd/priv/listen.h"

#define LISTEN_BACKLOG 1024

static const struct {
	int socktype;
	int family; /* 0: from --http-addr */
	const char *what;
} listen_table[LISTEN_MAX] = {
    [LISTEN_API] = {SOCK_STREAM, 0, "control API"},
    [LISTEN_DNS_UDP4] = {SOCK_DGRAM, AF_INET, "DNS proxy (UDP)"},
    [LISTEN_DNS_UDP6] = {SOCK_DGRAM, AF_INET6, "DNS proxy (UDP)"},
    [LISTEN_DNS_TCP4] = {SOCK_STREAM, AF_INET, "DNS proxy (TCP)"},
    [LISTEN_DNS_TCP6] = {SOCK_STREAM, AF_INET6, "DNS proxy (TCP)"},
    [LISTEN_TLS4] = {SOCK_STREAM, AF_INET, "intercept (TLS)"},
    [LISTEN_TLS6] = {SOCK_STREAM, AF_INET6, "intercept (TLS)"},
    [LISTEN_PLAIN4] = {SOCK_STREAM, AF_INET, "intercept (HTTP)"},
    [LISTEN_PLAIN6] = {SOCK_STREAM, AF_INET6, "intercept (HTTP)"},
    [LISTEN_PEEK4] = {SOCK_STREAM, AF_INET, "intercept (other ports)"},
    [LISTEN_PEEK6] = {SOCK_STREAM, AF_INET6, "intercept (other ports)"},
};

/* One marked, bound (and, for TCP, listening) socket; -1 with err. */
static int
listen_one(const struct sockaddr *sa, socklen_t salen, int socktype, uint32_t mark,
    const char *what, const char *shown, uint16_t port, char *err, size_t errlen)
{
	int one = 1, fd;

	fd = socket(sa->sa_family, socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	/*
	 * The mark tells our socket from one the workload bound (needs
	 * CAP_NET_ADMIN) or a child holds (the parent gives children only
	 * their roles' marks): only it may serve the sidecar's ports.
	 */
	if (setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) != 0)
		goto fail;
	if (sa->sa_family == AF_INET6 &&
	    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0)
		goto fail;
	if (socktype == SOCK_STREAM &&
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0)
		goto fail;
	if (bind(fd, sa, salen) != 0)
		goto fail;
	if (socktype == SOCK_STREAM && listen(fd, LISTEN_BACKLOG) != 0)
		goto fail;
	return fd;
fail:
	snprintf(err, errlen, "cannot listen for the %s on %s port %u: %s%s", what, shown, port,
	    strerror(errno),
	    errno == EADDRINUSE ? " (another process holds the port; free it, or choose another "
	                          "port with the option of that listener)"
	                        : "");
	if (fd >= 0)
		close(fd);
	return -1;
}

/* The API's address from --http-addr (numeric, or a name of /etc/hosts). */
static int
listen_api_addr(const struct config *cfg, struct sockaddr_storage *ss, socklen_t *salen,
    uint16_t *port, char *shown, size_t shownlen, char *err, size_t errlen)
{
	struct addrinfo hints, *res = NULL;
	char host[128];

	if (listen_split_addr(cfg->http_addr, host, sizeof(host), port) != 0) {
		snprintf(err, errlen, "http-addr: \"%.64s\" is not [host]:port", cfg->http_addr);
		return -1;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL ||
	    res->ai_addrlen > sizeof(*ss)) {
		snprintf(err, errlen, "http-addr: cannot resolve \"%.64s\"", host);
		if (res != NULL)
			freeaddrinfo(res);
		return -1;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*salen = res->ai_addrlen;
	freeaddrinfo(res);
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(*port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(*port);
	snprintf(shown, shownlen, "%s", host);
	return 0;
}

/* Bind every listener (see listen.h). */
int
listen_open(struct config *cfg, char *err, size_t errlen)
{
	struct listen_set *ls = &cfg->listen;

	listen_set_none(ls);
	for (int i = 0; i < LISTEN_MAX; i++) {
		struct sockaddr_storage ss;
		socklen_t salen;
		char shown[128];
		uint16_t port;

		if (i >= LISTEN_TLS4 && !cfg->intercept)
			continue;
		if (i >= LISTEN_PEEK4 && cfg->peek_port == 0)
			continue;
		memset(&ss, 0, sizeof(ss));
		if (i == LISTEN_API) {
			if (listen_api_addr(
			        cfg, &ss, &salen, &port, shown, sizeof(shown), err, errlen) != 0)
				goto fail;
		} else {
			if (i <= LISTEN_DNS_TCP6)
				port = cfg->dns_port;
			else if (i <= LISTEN_TLS6)
				port = cfg->tls_port;
			else if (i <= LISTEN_PLAIN6)
				port = cfg->plain_port;
			else
				port = cfg->peek_port;
			if (listen_table[i].family == AF_INET) {
				struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

				s4->sin_family = AF_INET;
				s4->sin_port = htons(port);
				s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
				salen = sizeof(*s4);
				snprintf(shown, sizeof(shown), "127.0.0.1");
			} else {
				struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

				s6->sin6_family = AF_INET6;
				s6->sin6_port = htons(port);
				s6->sin6_addr = in6addr_loopback;
				salen = sizeof(*s6);
				snprintf(shown, sizeof(shown), "[::1]");
			}
		}
		ls->fd[i] = listen_one((struct sockaddr *)&ss, salen, listen_table[i].socktype,
		    cfg->listen_mark, listen_table[i].what, shown, port, err, errlen);
		if (ls->fd[i] < 0)
			goto fail;
		ls->port[i] = port;
		ls->proto[i] = listen_table[i].socktype == SOCK_STREAM ? IPPROTO_TCP : IPPROTO_UDP;
	}
	return 0;
fail:
	listen_close(ls);
	return -1;
}

void
listen_close(struct listen_set *ls)
{
	for (int i = 0; i < LISTEN_MAX; i++) {
		if (ls->fd[i] >= 0)
			close(ls->fd[i]);
		ls->fd[i] = -1;
	}
}
