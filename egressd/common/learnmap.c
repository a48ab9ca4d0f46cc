/*
 * Learned-destination map (dns and intercept, and the parent's copy). A chained hash table keyed by
 * (name, family, address, port). Bounded: it never grows past
 * LEARNMAP_MAX_ENTRIES, so a resolver flood cannot exhaust memory.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "egressd/common/learnmap.h"

#define LEARNMAP_BUCKETS 65536

struct learnmap_node {
	struct learnmap_node *next;
	struct learnmap_entry e;
	char name[];
};

struct learnmap {
	struct learnmap_node *b[LEARNMAP_BUCKETS];
	size_t count;
};

static uint32_t
learnmap_hash(const char *name, int family, const uint8_t *addr, uint16_t port)
{
	uint32_t h = 2166136261u;
	size_t alen = family == AF_INET ? 4 : 16;

	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	h = (h ^ (uint32_t)family) * 16777619u;
	for (size_t i = 0; i < alen; i++)
		h = (h ^ addr[i]) * 16777619u;
	h = (h ^ port) * 16777619u;
	return h % LEARNMAP_BUCKETS;
}

static bool
learnmap_same(const struct learnmap_entry *e, const char *name, int family, const uint8_t *addr,
    uint16_t port)
{
	return e->family == family && e->port == port && memcmp(e->addr, addr, 16) == 0 &&
	       strcmp(e->name, name) == 0;
}

/* A new, empty map. */
struct learnmap *
learnmap_new(void)
{
	return calloc(1, sizeof(struct learnmap));
}

/* Free the map and its entries (accepts NULL). */
void
learnmap_free(struct learnmap *m)
{
	if (m == NULL)
		return;
	for (size_t i = 0; i < LEARNMAP_BUCKETS; i++) {
		struct learnmap_node *n = m->b[i];
		while (n != NULL) {
			struct learnmap_node *next = n->next;
			free(n);
			n = next;
		}
	}
	free(m);
}

static void
learnmap_norm(int family, const uint8_t *addr, uint8_t out[16])
{
	memset(out, 0, 16);
	memcpy(out, addr, family == AF_INET ? 4 : 16);
}

int
learnmap_add(struct learnmap *m, const char *name, int family, const uint8_t *addr, uint16_t port,
    time_t expires)
{
	uint8_t a[16];
	uint32_t h;
	struct learnmap_node *n;
	size_t nlen = strlen(name);

	learnmap_norm(family, addr, a);
	h = learnmap_hash(name, family, a, port);
	for (n = m->b[h]; n != NULL; n = n->next) {
		if (learnmap_same(&n->e, name, family, a, port)) {
			if (expires > n->e.expires)
				n->e.expires = expires;
			return 0;
		}
	}
	if (m->count >= LEARNMAP_MAX_ENTRIES) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		learnmap_expire(m, ts.tv_sec);
		if (m->count >= LEARNMAP_MAX_ENTRIES)
			return -1;
	}
	n = malloc(sizeof(*n) + nlen + 1);
	if (n == NULL)
		return -1;
	memcpy(n->name, name, nlen + 1);
	n->e.name = n->name;
	n->e.family = family;
	memcpy(n->e.addr, a, 16);
	n->e.port = port;
	n->e.expires = expires;
	n->next = m->b[h];
	m->b[h] = n;
	m->count++;
	return 0;
}

bool
learnmap_has(const struct learnmap *m, const char *name, int family, const uint8_t *addr,
    uint16_t port, time_t now)
{
	uint8_t a[16];
	const struct learnmap_node *n;

	learnmap_norm(family, addr, a);
	/* An all-ports entry covers every port. */
	for (n = m->b[learnmap_hash(name, family, a, 0)]; n != NULL; n = n->next)
		if (learnmap_same(&n->e, name, family, a, 0) && n->e.expires > now)
			return true;
	if (port == 0)
		return false;
	for (n = m->b[learnmap_hash(name, family, a, port)]; n != NULL; n = n->next)
		if (learnmap_same(&n->e, name, family, a, port) && n->e.expires > now)
			return true;
	return false;
}

/* Drop entries whose lifetime has passed (the kernel expires the nft side). */
void
learnmap_expire(struct learnmap *m, time_t now)
{
	for (size_t i = 0; i < LEARNMAP_BUCKETS; i++) {
		struct learnmap_node **pp = &m->b[i];
		while (*pp != NULL) {
			struct learnmap_node *n = *pp;
			if (n->e.expires <= now) {
				*pp = n->next;
				free(n);
				m->count--;
			} else
				pp = &n->next;
		}
	}
}

static bool
learnmap_tuple_held(const struct learnmap *m, const struct learnmap_entry *e)
{
	/* Any remaining entry with the same address and port scope keeps it. */
	for (size_t i = 0; i < LEARNMAP_BUCKETS; i++)
		for (const struct learnmap_node *n = m->b[i]; n != NULL; n = n->next)
			if (n->e.family == e->family && n->e.port == e->port &&
			    memcmp(n->e.addr, e->addr, 16) == 0)
				return true;
	return false;
}

void
learnmap_prune(struct learnmap *m, bool (*keep)(const struct learnmap_entry *e, void *arg),
    learnmap_cb gone, void *arg)
{
	struct learnmap_node *removed = NULL;

	for (size_t i = 0; i < LEARNMAP_BUCKETS; i++) {
		struct learnmap_node **pp = &m->b[i];
		while (*pp != NULL) {
			struct learnmap_node *n = *pp;
			if (!keep(&n->e, arg)) {
				*pp = n->next;
				n->next = removed;
				removed = n;
				m->count--;
			} else
				pp = &n->next;
		}
	}
	/* Removals are rare (policy changes); a scan per removed tuple is fine. */
	while (removed != NULL) {
		struct learnmap_node *n = removed;
		removed = n->next;
		if (!learnmap_tuple_held(m, &n->e))
			gone(&n->e, arg);
		free(n);
	}
}

/* Number of entries, expired ones included until the next expiry pass. */
size_t
learnmap_count(const struct learnmap *m)
{
	return m->count;
}

void
learnmap_foreach(const struct learnmap *m, learnmap_cb fn, void *arg)
{
	for (size_t i = 0; i < LEARNMAP_BUCKETS; i++)
		for (const struct learnmap_node *n = m->b[i]; n != NULL; n = n->next)
			fn(&n->e, arg);
}
