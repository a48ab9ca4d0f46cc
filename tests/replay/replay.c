/*
 * The replay runners' shared part (tests only); see replay.h.
 */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

static int replay_nfails;

void
replay_bad(const char *cs, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "FAIL %s: ", cs);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	replay_nfails++;
}

int
replay_fails(void)
{
	return replay_nfails;
}

int
replay_main(
    int argc, char **argv, const char *prog, void (*run)(const char *path, const char *name))
{
	struct dirent **names;
	int n, ran = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s CASE_DIR\n", prog);
		return 2;
	}
	n = scandir(argv[1], &names, NULL, alphasort);
	if (n < 0) {
		perror(argv[1]);
		return 2;
	}
	for (int i = 0; i < n; i++) {
		size_t len = strlen(names[i]->d_name);
		char path[4096];

		if (len > 5 && strcmp(names[i]->d_name + len - 5, ".case") == 0) {
			int before = replay_nfails;

			snprintf(path, sizeof(path), "%s/%s", argv[1], names[i]->d_name);
			run(path, names[i]->d_name);
			printf(
			    "%s %s\n", replay_nfails == before ? "ok  " : "FAIL", names[i]->d_name);
			ran++;
		}
		free(names[i]);
	}
	free(names);
	printf("%d cases, %d failures\n", ran, replay_nfails);
	return replay_nfails == 0 && ran > 0 ? 0 : 1;
}
