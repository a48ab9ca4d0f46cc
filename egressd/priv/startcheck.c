/*
 * Start-up check of the files the worker reads with its own rights (see
 * startcheck.h). The answer comes from the kernel, not from mode bits: a
 * short-lived probe switches to the worker's uid and gid (no supplementary
 * groups, as the worker) and tries access(2) on each path; ACLs and LSMs
 * count as they will for the worker.
 */
#include <errno.h>
#include <grp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "egressd/common/log.h"
#include "egressd/priv/startcheck.h"
#include "policy/binding.h"
#include "policy/policy.h"

#define STARTCHECK_MAX 64

struct sc_path {
	char path[PATH_MAX];
	const char *what;
	bool fatal;
};

/* errno of access(R_OK) on each path as uid:gid, or -1 if the probe failed. */
static int
startcheck_probe(const struct sc_path *ps, size_t n, uid_t uid, gid_t gid, int *res)
{
	int fd[2], st;
	pid_t pid;
	ssize_t got;

	if (pipe(fd) != 0)
		return -1;
	pid = fork();
	if (pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return -1;
	}
	if (pid == 0) {
		int r[STARTCHECK_MAX];

		close(fd[0]);
		if ((geteuid() != uid || getegid() != gid) &&
		    (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 ||
		        setresuid(uid, uid, uid) != 0))
			_exit(1);
		for (size_t i = 0; i < n; i++)
			r[i] = access(ps[i].path, R_OK) == 0 ? 0 : errno;
		_exit(write(fd[1], r, n * sizeof(int)) == (ssize_t)(n * sizeof(int)) ? 0 : 1);
	}
	close(fd[1]);
	do
		got = read(fd[0], res, n * sizeof(int));
	while (got < 0 && errno == EINTR);
	close(fd[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return got == (ssize_t)(n * sizeof(int)) && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void
startcheck_add(struct sc_path *ps, size_t *n, const char *path, const char *what, bool fatal)
{
	if (path == NULL || path[0] == '\0' || *n >= STARTCHECK_MAX || strlen(path) >= PATH_MAX)
		return;
	snprintf(ps[*n].path, sizeof(ps[*n].path), "%s", path);
	ps[*n].what = what;
	ps[*n].fatal = fatal;
	(*n)++;
}

/* "mode 0600, owner 0:0" of path, or why not. */
static void
startcheck_describe(const char *path, char *out, size_t outlen)
{
	struct stat sb;

	if (stat(path, &sb) != 0)
		snprintf(out, outlen, "%s", strerror(errno));
	else
		snprintf(out, outlen, "mode %04o, owner %u:%u", (unsigned)(sb.st_mode & 07777),
		    (unsigned)sb.st_uid, (unsigned)sb.st_gid);
}

int
startcheck_worker_reads(const struct config *cfg, uid_t uid, gid_t gid, char *err, size_t errlen)
{
	struct sc_path *ps;
	int res[STARTCHECK_MAX];
	size_t n = 0;
	int rc = 0;

	ps = calloc(STARTCHECK_MAX, sizeof(*ps));
	if (ps == NULL)
		return 0;
	startcheck_add(
	    ps, &n, cfg->policy_file, "the policy file (read at start and on change)", true);
	/* The OpenSandbox policy file may be absent (then the env policy applies). */
	if (access(cfg->os_policy_file, F_OK) == 0)
		startcheck_add(ps, &n, cfg->os_policy_file,
		    "the policy file (read at start and on change; unreadable, it is ignored)",
		    false);
	if (cfg->policy_file[0] != '\0') {
		struct policy_err pe;
		struct policy *p;

		/* The operator's own file, read as the worker would parse it. */
		memset(&pe, 0, sizeof(pe));
		p = policy_from_yaml_file(cfg->policy_file, NULL, &pe);
		if (p != NULL) {
			const struct binding_set *bs = policy_bindings(p);
			size_t nc = bs != NULL ? binding_credential_count(bs) : 0;

			for (size_t i = 0; i < nc; i++) {
				struct binding_credential_info ci;

				if (binding_credential_get(bs, i, &ci) == 0 &&
				    ci.source == BINDING_SOURCE_FILE)
					startcheck_add(ps, &n, ci.ref,
					    "a credential file (read at start and on every "
					    "rotation)",
					    false);
			}
			policy_free(p);
		}
	}
	if (n == 0 || startcheck_probe(ps, n, uid, gid, res) != 0) {
		free(ps);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		char desc[96];

		if (res[i] == 0)
			continue;
		startcheck_describe(ps[i].path, desc, sizeof(desc));
		if (ps[i].fatal && rc == 0) {
			snprintf(err, errlen,
			    "the worker (uid %u, gid %u) cannot read %.200s, %s: %s (%s); make it "
			    "readable by uid %u or set EGRESSD_WORKER_USER",
			    (unsigned)uid, (unsigned)gid, ps[i].path, ps[i].what, strerror(res[i]),
			    desc, (unsigned)uid);
			rc = -1;
		} else if (!ps[i].fatal)
			log_msg(LOG_WARN, "proc", "worker_access",
			    "the worker (uid %u, gid %u) cannot read %.200s, %s: %s (%s); make it "
			    "readable by uid %u",
			    (unsigned)uid, (unsigned)gid, ps[i].path, ps[i].what, strerror(res[i]),
			    desc, (unsigned)uid);
	}
	free(ps);
	return rc;
}
