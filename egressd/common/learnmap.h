/*
 * The worker's map of learned destinations: which name resolved to which
 * address (and port scope) until when. The vault checks an intercepted
 * connection's original destination against it, and policy changes use it
 * to forget the addresses of names that are no longer allowed.
 */
#ifndef EGRESSD_LEARNMAP_H
#define EGRESSD_LEARNMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Entries kept at most; beyond it learning fails (and the query SERVFAILs). */
#define LEARNMAP_MAX_ENTRIES 262144

struct learnmap;

/* One learned destination (borrowed in callbacks). */
struct learnmap_entry {
	const char *name; /* canonical name asked by the client */
	int family;
	uint8_t addr[16];
	uint16_t port;  /* 0: all ports */
	time_t expires; /* CLOCK_MONOTONIC seconds */
};

typedef void (*learnmap_cb)(const struct learnmap_entry *e, void *arg);

struct learnmap *learnmap_new(void);
void learnmap_free(struct learnmap *m);

/* Record or refresh; -1 when full even after expiring old entries. */
int learnmap_add(struct learnmap *m, const char *name, int family, const uint8_t *addr,
    uint16_t port, time_t expires) __attribute__((warn_unused_result));

/* Whether addr (any port scope, or `port` when non-zero) is learned for name. */
bool learnmap_has(const struct learnmap *m, const char *name, int family, const uint8_t *addr,
    uint16_t port, time_t now);

/* Drop expired entries. */
void learnmap_expire(struct learnmap *m, time_t now);

/*
 * Remove the entries for which keep() says false and call gone() for each
 * (family, addr, port) that no kept entry still holds, so that the caller
 * forgets exactly the nft elements nothing else needs.
 */
void learnmap_prune(struct learnmap *m, bool (*keep)(const struct learnmap_entry *e, void *arg),
    learnmap_cb gone, void *arg);

size_t learnmap_count(const struct learnmap *m);

/* Call fn for every entry (expired ones included until the next expiry pass). */
void learnmap_foreach(const struct learnmap *m, learnmap_cb fn, void *arg);

#endif
