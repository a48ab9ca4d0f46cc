/*
 * bench/alloc_count.c: an LD_PRELOAD shim for bench/allocs (never linked
 * into egressd). It counts the malloc, calloc, realloc, free and memalign
 * calls of one process, each under its call stack, in a table in the file
 * named by ALLOC_COUNT_FILE. The file is mapped shared by the constructor,
 * before egressd forks, so every child keeps the same table; only the
 * process whose pid the bench writes into the header's target counts, the
 * others pass straight through. The bench reads the file before and after
 * a phase and subtracts. OpenSSL's CRYPTO_malloc family is wrapped too, only
 * to note the source file and line its caller passes, kept with the calls
 * that libc then sees (their count is unchanged). It must never change what
 * an allocation returns.
 */
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* glibc's own allocator, under names that interposing does not reach. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

#define AC_MAGIC 0x544e434f4c4c4141ULL /* "AALLOCNT" */
#define AC_VERSION 2
#define AC_SLOTS 65536 /* distinct (kind, stack) pairs */
#define AC_DEPTH 24    /* return addresses kept, the shim's own left out */
#define AC_SHIMMAX 4   /* frames of the shim itself at most (ac_record, the hook) */
#define AC_PROBES 64
#define AC_FILE 64 /* bytes kept of an OpenSSL caller's source file name */

/* What a call was; bench/allocs reads these numbers. */
enum ac_kind {
	AC_MALLOC,
	AC_CALLOC,
	AC_REALLOC,      /* of a block */
	AC_REALLOC_NULL, /* realloc(NULL, n): a new block */
	AC_MEMALIGN,     /* posix_memalign, aligned_alloc, memalign */
	AC_FREE,         /* of a block */
	AC_FREE_NULL,    /* free(NULL) */
	AC_NKINDS
};

/* The file: this header, then AC_SLOTS slots. Layout read by bench/allocs. */
struct ac_header {
	uint64_t magic;
	uint32_t version;
	uint32_t nslots;
	uint32_t depth;
	int32_t target; /* the pid that counts; 0: nobody (written by the bench) */
	uint64_t lost;  /* calls not in a slot (the table was full) */
	uint64_t calls[AC_NKINDS];
};

struct ac_slot {
	uint64_t key; /* hash of kind, stack and source position; 0: free */
	uint64_t count;
	uint64_t bytes; /* asked for */
	uint32_t kind;
	uint32_t nframes; /* set last: 0 until the frames are written */
	uint32_t line;    /* an OpenSSL caller's source line, 0 if none */
	uint32_t pad;
	uint64_t frames[AC_DEPTH];
	char file[AC_FILE]; /* and its file ("" if none) */
};

static struct ac_header *ac_hdr;
static struct ac_slot *ac_slots;
static pid_t ac_pid;
static uintptr_t ac_text_lo, ac_text_hi; /* the shim's own code */
static __thread int ac_busy __attribute__((tls_model("initial-exec")));
/* The source position an OpenSSL caller passed, while its call runs. */
static __thread const char *ac_file __attribute__((tls_model("initial-exec")));
static __thread int ac_line __attribute__((tls_model("initial-exec")));
static void *(*ac_crypto_malloc)(size_t, const char *, int);
static void *(*ac_crypto_zalloc)(size_t, const char *, int);
static void *(*ac_crypto_realloc)(void *, size_t, const char *, int);
static void *(*ac_crypto_clear_realloc)(void *, size_t, size_t, const char *, int);

/* Find the executable segment of the object that holds ac_init: this shim. */
static int
ac_find_text(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t self = (uintptr_t)arg;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && self >= lo &&
		    self < lo + ph->p_memsz) {
			ac_text_lo = lo;
			ac_text_hi = lo + ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

/* OpenSSL's allocators behind the shim's (NULL while libcrypto is not loaded). */
static void
ac_resolve(void)
{
	int busy = ac_busy;

	ac_busy = 1;
	ac_crypto_malloc = (void *(*)(size_t, const char *, int))dlsym(RTLD_NEXT, "CRYPTO_malloc");
	ac_crypto_zalloc = (void *(*)(size_t, const char *, int))dlsym(RTLD_NEXT, "CRYPTO_zalloc");
	ac_crypto_realloc =
	    (void *(*)(void *, size_t, const char *, int))dlsym(RTLD_NEXT, "CRYPTO_realloc");
	ac_crypto_clear_realloc = (void *(*)(void *, size_t, size_t, const char *, int))dlsym(
	    RTLD_NEXT, "CRYPTO_clear_realloc");
	ac_busy = busy;
}

static void
ac_forked(void)
{
	ac_pid = getpid();
}

__attribute__((constructor)) static void
ac_init(void)
{
	const char *path = getenv("ALLOC_COUNT_FILE");
	size_t len = sizeof(struct ac_header) + (size_t)AC_SLOTS * sizeof(struct ac_slot);
	void *warm[4];
	struct stat st;
	void *m;
	int fd;

	ac_pid = getpid();
	if (path == NULL || path[0] == '\0')
		return;
	ac_busy = 1;
	(void)dl_iterate_phdr(ac_find_text, (void *)(uintptr_t)ac_init);
	/* Load the unwinder now: a child may no longer be able to open it. */
	(void)backtrace(warm, 4);
	(void)pthread_atfork(NULL, NULL, ac_forked);
	ac_resolve();
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size < len && ftruncate(fd, len) != 0) {
		close(fd);
		fd = -1;
	}
	if (fd >= 0) {
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (m != MAP_FAILED) {
			ac_hdr = m;
			ac_slots = (struct ac_slot *)(ac_hdr + 1);
			if (ac_hdr->magic != AC_MAGIC) {
				ac_hdr->version = AC_VERSION;
				ac_hdr->nslots = AC_SLOTS;
				ac_hdr->depth = AC_DEPTH;
				__atomic_store_n(&ac_hdr->magic, AC_MAGIC, __ATOMIC_RELEASE);
			}
		}
	}
	ac_busy = 0;
}

static inline int
ac_counting(void)
{
	return ac_hdr != NULL && !ac_busy &&
	       __atomic_load_n(&ac_hdr->target, __ATOMIC_RELAXED) == ac_pid;
}

/* Count one call of the process being measured under its caller's stack. */
__attribute__((noinline)) static void
ac_record(enum ac_kind kind, size_t bytes)
{
	void *bt[AC_DEPTH + AC_SHIMMAX];
	uint64_t key = 1469598103934665603ULL ^ (uint64_t)kind;
	struct ac_slot *s;
	int saved = errno, skip = 0, n, i;

	ac_busy = 1;
	n = backtrace(bt, AC_DEPTH + AC_SHIMMAX);
	/* The shim's own frames (however the compiler inlined or tail-called). */
	while (skip < n && skip < AC_SHIMMAX && (uintptr_t)bt[skip] >= ac_text_lo &&
	       (uintptr_t)bt[skip] < ac_text_hi)
		skip++;
	n -= skip;
	if (n > AC_DEPTH)
		n = AC_DEPTH;
	for (i = 0; i < n; i++)
		key = (key ^ (uint64_t)(uintptr_t)bt[skip + i]) * 1099511628211ULL;
	key = (key ^ (uint64_t)(uintptr_t)ac_file ^ ((uint64_t)ac_line << 48)) * 1099511628211ULL;
	key = key == 0 ? 1 : key;
	__atomic_fetch_add(&ac_hdr->calls[kind], 1, __ATOMIC_RELAXED);
	for (i = 0; i < AC_PROBES; i++) {
		uint64_t expect = 0;

		s = &ac_slots[(key + (uint64_t)i) % AC_SLOTS];
		if (__atomic_load_n(&s->key, __ATOMIC_ACQUIRE) == key)
			break;
		if (__atomic_compare_exchange_n(
		        &s->key, &expect, key, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			s->kind = (uint32_t)kind;
			if (ac_file != NULL) {
				size_t len = strlen(ac_file),
				       keep = len < AC_FILE ? len : AC_FILE - 1;

				/* The end of a long name says more than its start. */
				s->line = (uint32_t)ac_line;
				memcpy(s->file, ac_file + len - keep, keep);
			}
			for (int f = 0; f < n; f++)
				s->frames[f] = (uint64_t)(uintptr_t)bt[skip + f];
			__atomic_store_n(&s->nframes, (uint32_t)n, __ATOMIC_RELEASE);
			break;
		}
		if (expect == key)
			break;
	}
	if (i == AC_PROBES) {
		__atomic_fetch_add(&ac_hdr->lost, 1, __ATOMIC_RELAXED);
	} else {
		__atomic_fetch_add(&s->count, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&s->bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
	}
	ac_busy = 0;
	errno = saved;
}

void *
malloc(size_t n)
{
	void *p = __libc_malloc(n);

	if (ac_counting())
		ac_record(AC_MALLOC, n);
	return p;
}

void *
calloc(size_t k, size_t n)
{
	void *p = __libc_calloc(k, n);

	if (ac_counting())
		ac_record(AC_CALLOC, k * n);
	return p;
}

void *
realloc(void *old, size_t n)
{
	void *p = __libc_realloc(old, n);

	if (ac_counting())
		ac_record(old == NULL ? AC_REALLOC_NULL : AC_REALLOC, n);
	return p;
}

void
free(void *p)
{
	__libc_free(p);
	if (ac_counting())
		ac_record(p == NULL ? AC_FREE_NULL : AC_FREE, 0);
}

void *
memalign(size_t align, size_t n)
{
	void *p = __libc_memalign(align, n);

	if (ac_counting())
		ac_record(AC_MEMALIGN, n);
	return p;
}

void *
aligned_alloc(size_t align, size_t n)
{
	void *p = __libc_memalign(align, n);

	if (ac_counting())
		ac_record(AC_MEMALIGN, n);
	return p;
}

int
posix_memalign(void **out, size_t align, size_t n)
{
	void *p;

	if (align % sizeof(void *) != 0 || (align & (align - 1)) != 0 || align == 0)
		return EINVAL;
	if ((p = __libc_memalign(align, n)) == NULL)
		return ENOMEM;
	*out = p;
	if (ac_counting())
		ac_record(AC_MEMALIGN, n);
	return 0;
}

/*
 * OpenSSL's allocators, wrapped (the shim is loaded first, so libssl and
 * libcrypto call these through their PLT) only to note the caller's source
 * position for the libc calls they make; nothing is counted here.
 */
#define AC_AT(file, line, call)                                                                    \
	do {                                                                                       \
		const char *of = ac_file;                                                          \
		int ol = ac_line;                                                                  \
                                                                                                   \
		ac_file = (file);                                                                  \
		ac_line = (line);                                                                  \
		call;                                                                              \
		ac_file = of;                                                                      \
		ac_line = ol;                                                                      \
	} while (0)

void *
CRYPTO_malloc(size_t n, const char *file, int line)
{
	void *p = NULL;

	if (ac_crypto_malloc == NULL)
		ac_resolve();
	if (ac_crypto_malloc != NULL)
		AC_AT(file, line, p = ac_crypto_malloc(n, file, line));
	return p;
}

void *
CRYPTO_zalloc(size_t n, const char *file, int line)
{
	void *p = NULL;

	if (ac_crypto_zalloc == NULL)
		ac_resolve();
	if (ac_crypto_zalloc != NULL)
		AC_AT(file, line, p = ac_crypto_zalloc(n, file, line));
	return p;
}

void *
CRYPTO_realloc(void *old, size_t n, const char *file, int line)
{
	void *p = NULL;

	if (ac_crypto_realloc == NULL)
		ac_resolve();
	if (ac_crypto_realloc != NULL)
		AC_AT(file, line, p = ac_crypto_realloc(old, n, file, line));
	return p;
}

void *
CRYPTO_clear_realloc(void *old, size_t oldn, size_t n, const char *file, int line)
{
	void *p = NULL;

	if (ac_crypto_clear_realloc == NULL)
		ac_resolve();
	if (ac_crypto_clear_realloc != NULL)
		AC_AT(file, line, p = ac_crypto_clear_realloc(old, oldn, n, file, line));
	return p;
}
