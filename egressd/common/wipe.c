/* Wipe-on-free allocator for OpenSSL (see wipe.h). */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "egressd/common/wipe.h"

static void *
wipe_malloc(size_t n, const char *file, int line)
{
	return malloc(n);
}

static void
wipe_free(void *p, const char *file, int line)
{
	if (p == NULL)
		return;
	OPENSSL_cleanse(p, malloc_usable_size(p));
	free(p);
}

/* Never realloc in place of a wipe: the old block is cleared before it is freed. */
static void *
wipe_realloc(void *p, size_t n, const char *file, int line)
{
	size_t old;
	void *q;

	if (p == NULL)
		return malloc(n);
	if (n == 0) {
		wipe_free(p, file, line);
		return NULL;
	}
	if ((q = malloc(n)) == NULL)
		return NULL;
	old = malloc_usable_size(p);
	memcpy(q, p, old < n ? old : n);
	wipe_free(p, file, line);
	return q;
}

int
wipe_install(void)
{
	return CRYPTO_set_mem_functions(wipe_malloc, wipe_realloc, wipe_free) == 1 ? 0 : -1;
}
