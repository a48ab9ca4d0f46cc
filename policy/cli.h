/*
 * The policy-repository CLI: `egressd check`, `egressd explain` and
 * `egressd test`, for policy files kept in git and their CI.
 */
#ifndef POLICY_CLI_H
#define POLICY_CLI_H

#define POLICYCLI_MAX_CASES 10000 /* cases of one test file */

/*
 * Run a subcommand; argv[0] is its name ("check", "explain", "test").
 * Returns the process exit status: 0 success, 1 invalid policy or a
 * failed expectation, 2 usage or unreadable input.
 */
int policycli_main(int argc, char **argv);

#endif
