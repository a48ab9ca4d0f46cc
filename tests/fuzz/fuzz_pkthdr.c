/*
 * Fuzz target for egressd/dns/pkthdr: the first byte picks the family the
 * record claims (0, AF_INET, AF_INET6), the rest is the packet copy. The
 * parse never reads past the copy (ASan), and what it returns is
 * consistent: INVALID leaves nothing set, ports only with a protocol that
 * has them, and a packet that parsed parses the same with its own family.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include "egressd/dns/pkthdr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int fams[] = {0, AF_INET, AF_INET6};
	struct pkthdr h, h2;
	enum pkthdr_status st;
	uint8_t *copy;

	if (size == 0)
		return 0;
	/* An exact-size heap copy, so that any read past it is caught. */
	copy = malloc(size - 1 > 0 ? size - 1 : 1);
	if (copy == NULL)
		return 0;
	memcpy(copy, data + 1, size - 1);
	st = pkthdr_parse(copy, size - 1, fams[data[0] % 3], &h);
	if (st == PKTHDR_INVALID) {
		static const struct pkthdr zero;

		if (memcmp(&h, &zero, sizeof(h)) != 0)
			abort();
	} else {
		if (h.family != AF_INET && h.family != AF_INET6)
			abort();
		if (h.has_ports && h.proto != IPPROTO_TCP && h.proto != IPPROTO_UDP &&
		    h.proto != IPPROTO_UDPLITE && h.proto != IPPROTO_SCTP)
			abort();
		if (h.has_icmp && h.proto != IPPROTO_ICMP && h.proto != IPPROTO_ICMPV6)
			abort();
		if (h.has_ports && h.has_icmp)
			abort();
		if (pkthdr_parse(copy, size - 1, h.family, &h2) != st ||
		    memcmp(&h, &h2, sizeof(h)) != 0)
			abort();
	}
	free(copy);
	return 0;
}
