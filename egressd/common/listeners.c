/*
 * The listening sockets' shared helpers (every process): the address
 * syntax of --http-addr, used by the parent to bind and by the API to
 * say where it listens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egressd/common/listeners.h"

/* Split "[host]:port", "host:port" or ":port" (host "0.0.0.0" then). */
int
listen_split_addr(const char *spec, char *host, size_t hostlen, uint16_t *port)
{
	const char *colon = strrchr(spec, ':');
	char *end;
	unsigned long v;

	if (colon == NULL || colon[1] == '\0')
		return -1;
	v = strtoul(colon + 1, &end, 10);
	if (*end != '\0' || v == 0 || v > 65535)
		return -1;
	*port = (uint16_t)v;
	if (colon == spec)
		snprintf(host, hostlen, "0.0.0.0");
	else if (spec[0] == '[' && colon[-1] == ']' && colon - spec >= 2 &&
	         (size_t)(colon - spec - 2) < hostlen) {
		memcpy(host, spec + 1, (size_t)(colon - spec - 2));
		host[colon - spec - 2] = '\0';
	} else if (spec[0] != '[' && memchr(spec, ':', (size_t)(colon - spec)) == NULL &&
	           (size_t)(colon - spec) < hostlen) {
		memcpy(host, spec, (size_t)(colon - spec));
		host[colon - spec] = '\0';
	} else
		return -1;
	return host[0] == '\0' ? -1 : 0;
}
