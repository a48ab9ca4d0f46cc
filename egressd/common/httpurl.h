/*
 * The sidecar's own outbound URLs (the deny webhook, the OTLP collector):
 * http://host[:port][/path], parsed strictly at start.
 */
#ifndef EGRESSD_HTTPURL_H
#define EGRESSD_HTTPURL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct httpurl {
	char host[256];      /* an address literal (no brackets) or a name */
	uint16_t port;       /* 80 unless given */
	char path[512];      /* "/" at least */
	char authority[300]; /* the Host header: host:port, [v6]:port */
	uint8_t family;      /* AF_INET or AF_INET6 when host is a literal, else 0 */
	uint8_t addr[16];
};

/*
 * Parse url into *u: http:// only (https is refused with its own message),
 * an address literal ([v6] in brackets) or a name, a port 1-65535, no
 * userinfo, query, fragment or spaces. 0, or -1 with err (never the URL).
 */
int httpurl_parse(const char *url, struct httpurl *u, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * The socket address of an address literal (family AF_INET or AF_INET6,
 * addr as in struct httpurl) and port, into *ss (zeroed first): its length.
 */
socklen_t httpurl_sockaddr(
    int family, const uint8_t addr[16], uint16_t port, struct sockaddr_storage *ss);

#endif
