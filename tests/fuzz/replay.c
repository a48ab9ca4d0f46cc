/*
 * Corpus replay driver for the fuzz targets under plain ctest. It feeds
 * every file of the corpus directory to LLVMFuzzerTestOneInput, then a
 * bounded number of deterministic mutations of each (bit flips,
 * truncations, byte insertions), so that a ctest run exercises the parser
 * beyond the stored inputs while staying reproducible and bounded. Under
 * libFuzzer the target is linked without this file.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MUTATIONS 64
#define REPLAY_MAX_FILE (1 << 20)

static uint32_t
replay_rand(uint32_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 17;
	*state ^= *state << 5;
	return *state;
}

static void
replay_mutate(const uint8_t *in, size_t len, uint32_t seed)
{
	uint8_t *buf = malloc(len + 16);
	uint32_t st = seed | 1;

	for (int m = 0; m < REPLAY_MUTATIONS; m++) {
		size_t n = len;
		memcpy(buf, in, len);
		switch (replay_rand(&st) % 4) {
		case 0: /* bit flip */
			if (n > 0)
				buf[replay_rand(&st) % n] ^= 1u << (replay_rand(&st) % 8);
			break;
		case 1: /* truncate */
			if (n > 0)
				n = replay_rand(&st) % n;
			break;
		case 2: /* insert a byte */
			if (n < len + 16) {
				size_t at = n ? replay_rand(&st) % n : 0;
				memmove(buf + at + 1, buf + at, n - at);
				buf[at] = (uint8_t)replay_rand(&st);
				n++;
			}
			break;
		default: /* set a byte to an edge value */
			if (n > 0) {
				static const uint8_t edge[] = {
				    0, 0xff, 0x7f, 0x80, '\r', '\n', '.', '%'};
				buf[replay_rand(&st) % n] = edge[replay_rand(&st) % sizeof(edge)];
			}
			break;
		}
		/* Copy to an exact-size allocation so ASan sees over-reads. */
		uint8_t *exact = malloc(n ? n : 1);
		memcpy(exact, buf, n);
		LLVMFuzzerTestOneInput(exact, n);
		free(exact);
	}
	free(buf);
}

int
main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	DIR *d = opendir(argv[1]);
	if (d == NULL) {
		perror(argv[1]);
		return 1;
	}
	struct dirent *de;
	int files = 0;
	while ((de = readdir(d)) != NULL) {
		char path[4096];
		struct stat st;
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", argv[1], de->d_name);
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > REPLAY_MAX_FILE)
			continue;
		FILE *f = fopen(path, "rb");
		if (f == NULL)
			continue;
		size_t len = (size_t)st.st_size;
		uint8_t *data = malloc(len ? len : 1);
		if (fread(data, 1, len, f) != len) {
			fclose(f);
			free(data);
			fprintf(stderr, "short read: %s\n", path);
			return 1;
		}
		fclose(f);
		LLVMFuzzerTestOneInput(data, len);
		uint32_t seed = 2166136261u;
		for (const char *p = de->d_name; *p; p++)
			seed = (seed ^ (uint8_t)*p) * 16777619u;
		replay_mutate(data, len, seed);
		free(data);
		files++;
	}
	closedir(d);
	if (files == 0) {
		fprintf(stderr, "empty corpus: %s\n", argv[1]);
		return 1;
	}
	printf("replayed %d corpus files with %d mutations each\n", files, REPLAY_MUTATIONS);
	return 0;
}
