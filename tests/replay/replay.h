/*
 * What the replay runners share (tests/replay/replay_*.c): the failure
 * count and its report, and the walk over a directory of .case files.
 */
#ifndef EGRESSD_TESTS_REPLAY_H
#define EGRESSD_TESTS_REPLAY_H

/* Report one mismatch of case cs (counted). */
void replay_bad(const char *cs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Mismatches reported so far. */
int replay_fails(void);

/*
 * Run each <dir>/<name>.case in name order: run(path, name) reports its
 * mismatches with replay_bad. Prints a line per case and a summary; the
 * process's exit code (0: at least one case ran and none failed; 2: the
 * usage or the directory is wrong).
 */
int replay_main(
    int argc, char **argv, const char *prog, void (*run)(const char *path, const char *name));

#endif
