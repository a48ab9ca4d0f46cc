/*
 * Capability handling for both processes, with raw capget/capset so that
 * no libcap is needed. The worker drop is verified after the fact: a
 * worker that still holds any capability exits rather than run.
 */
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "egressd/priv/privsep.h"

static int
privsep_capget(struct __user_cap_data_struct d[2])
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};

	memset(d, 0, 2 * sizeof(*d));
	return (int)syscall(SYS_capget, &h, d);
}

/* Whether `cap` is effective. */
bool
privsep_has_cap(int cap)
{
	struct __user_cap_data_struct d[2];

	if (privsep_capget(d) != 0 || cap < 0 || cap > 63)
		return false;
	return (d[cap / 32].effective >> (cap % 32)) & 1;
}

/* Make this process undumpable and unable to write core files. */
int
privsep_harden(void)
{
	struct rlimit rl = {0, 0};

	if (setrlimit(RLIMIT_CORE, &rl) != 0)
		return -1;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
		return -1;
	return 0;
}

/* Shrink the bounding set to nothing (only while CAP_SETPCAP is held) and clear ambient. */
static int
privsep_drop_inheritable(char *err, size_t errlen)
{
	if (privsep_has_cap(CAP_SETPCAP)) {
		for (int c = 0; c <= 63; c++) {
			if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL) {
				snprintf(
				    err, errlen, "bounding set drop of %d: %s", c, strerror(errno));
				return -1;
			}
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
		snprintf(err, errlen, "ambient clear: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* Clear effective, permitted and inheritable, set no_new_privs, harden, verify. */
static int
privsep_clear_caps(char *err, size_t errlen)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[2];

	memset(d, 0, sizeof(d));
	if (syscall(SYS_capset, &h, d) != 0) {
		snprintf(err, errlen, "capset: %s", strerror(errno));
		return -1;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		snprintf(err, errlen, "no_new_privs: %s", strerror(errno));
		return -1;
	}
	if (privsep_harden() != 0) {
		snprintf(err, errlen, "harden: %s", strerror(errno));
		return -1;
	}
	if (privsep_capget(d) != 0 || d[0].effective || d[1].effective || d[0].permitted ||
	    d[1].permitted || d[0].inheritable || d[1].inheritable) {
		snprintf(err, errlen, "capabilities still present after the drop");
		return -1;
	}
	return 0;
}

int
privsep_drop(uid_t uid, gid_t gid, pid_t parent, char *err, size_t errlen)
{
	bool can_switch = privsep_has_cap(CAP_SETUID) && privsep_has_cap(CAP_SETGID);

	/*
	 * Die with the parent; re-check for the race with an early exit. The
	 * parent may itself be pid 1 (a container's entrypoint), so compare
	 * with its pid rather than with 1.
	 */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
		snprintf(err, errlen, "PDEATHSIG failed: %s", strerror(errno));
		return -1;
	}
	if (getppid() != parent) {
		snprintf(err, errlen, "parent %ld gone before the drop", (long)parent);
		return -1;
	}
	/* The bounding set can only shrink while we still hold CAP_SETPCAP. */
	if (privsep_drop_inheritable(err, errlen) != 0)
		return -1;
	if (can_switch) {
		if (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 ||
		    setresuid(uid, uid, uid) != 0) {
			snprintf(err, errlen, "switch to %u:%u: %s", (unsigned)uid, (unsigned)gid,
			    strerror(errno));
			return -1;
		}
		/* Root must be unreachable again. */
		if (uid != 0 && (setuid(0) == 0 || seteuid(0) == 0)) {
			snprintf(err, errlen, "could regain uid 0 after the switch");
			return -1;
		}
	}
	return privsep_clear_caps(err, errlen);
}

/* Drop every capability, keeping the uid (see privsep.h). */
int
privsep_drop_caps(char *err, size_t errlen)
{
	if (privsep_drop_inheritable(err, errlen) != 0)
		return -1;
	return privsep_clear_caps(err, errlen);
}
