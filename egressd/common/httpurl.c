/* The sidecar's own outbound URLs; see httpurl.h. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "egressd/common/httpurl.h"

int
httpurl_parse(const char *url, struct httpurl *u, char *err, size_t errlen)
{
	const char *p, *host, *hend, *path;
	bool bracket = false;
	size_t hl;

	memset(u, 0, sizeof(*u));
	if (strncmp(url, "https://", 8) == 0) {
		snprintf(err, errlen,
		    "https is not supported for the sidecar's own deliveries (use http:// to a "
		    "receiver in the cluster)");
		return -1;
	}
	if (strncmp(url, "http://", 7) != 0) {
		snprintf(err, errlen, "not an http:// URL");
		return -1;
	}
	p = url + 7;
	if (strpbrk(p, "@?#") != NULL || strpbrk(p, " \t\r\n\\") != NULL) {
		snprintf(
		    err, errlen, "userinfo, query, fragment and spaces are refused in the URL");
		return -1;
	}
	path = strchr(p, '/');
	if (path == NULL)
		path = p + strlen(p);
	if (*p == '[') {
		bracket = true;
		host = p + 1;
		hend = memchr(host, ']', (size_t)(path - host));
		if (hend == NULL) {
			snprintf(err, errlen, "unterminated [address] in the URL");
			return -1;
		}
		p = hend + 1;
	} else {
		host = p;
		hend = memchr(p, ':', (size_t)(path - p));
		if (hend == NULL)
			hend = path;
		p = hend;
	}
	hl = (size_t)(hend - host);
	if (hl == 0 || hl >= sizeof(u->host)) {
		snprintf(err, errlen, "no host, or too long a host, in the URL");
		return -1;
	}
	memcpy(u->host, host, hl);
	u->host[hl] = '\0';
	for (size_t i = 0; i < hl; i++)
		if (!isalnum((unsigned char)u->host[i]) && strchr(".-:", u->host[i]) == NULL) {
			snprintf(err, errlen, "the URL's host is neither a name nor an address");
			return -1;
		}
	if (inet_pton(AF_INET6, u->host, u->addr) == 1) {
		u->family = AF_INET6;
	} else if (inet_pton(AF_INET, u->host, u->addr) == 1) {
		u->family = AF_INET;
	} else if (bracket || strchr(u->host, ':') != NULL) {
		snprintf(err, errlen, "the URL's [address] is not an IPv6 address");
		return -1;
	}
	if (bracket && u->family != AF_INET6) {
		snprintf(err, errlen, "the URL's [address] is not an IPv6 address");
		return -1;
	}
	u->port = 80;
	if (*p == ':') {
		char *end;
		unsigned long v;

		if (p[1] < '0' || p[1] > '9') {
			snprintf(err, errlen, "the URL's port is not 1-65535");
			return -1;
		}
		v = strtoul(p + 1, &end, 10);
		if (end != path || v == 0 || v > 65535) {
			snprintf(err, errlen, "the URL's port is not 1-65535");
			return -1;
		}
		u->port = (uint16_t)v;
	} else if (p != path) {
		snprintf(err, errlen, "unexpected text after the URL's host");
		return -1;
	}
	snprintf(u->authority, sizeof(u->authority), "%s%s%s:%u", bracket ? "[" : "", u->host,
	    bracket ? "]" : "", u->port);
	if (strlen(path) >= sizeof(u->path)) {
		snprintf(err, errlen, "the URL's path is too long");
		return -1;
	}
	snprintf(u->path, sizeof(u->path), "%s", path[0] != '\0' ? path : "/");
	return 0;
}

socklen_t
httpurl_sockaddr(int family, const uint8_t addr[16], uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		memcpy(&s4->sin_addr, addr, 4);
		return sizeof(*s4);
	}
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	s6->sin6_family = AF_INET6;
	s6->sin6_port = htons(port);
	memcpy(&s6->sin6_addr, addr, 16);
	return sizeof(*s6);
}
