/*
 * capwatch (parent process): see capwatch.h. Bounded: at most
 * CAPWATCH_MAX_PIDS processes are remembered as reported; /proc is read
 * once per tick.
 */
#include <ctype.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "egressd/common/log.h"
#include "egressd/priv/capwatch.h"

#define CAPWATCH_MAX_PIDS 256
#define CAPWATCH_CAP_NET_ADMIN 12
#define CAPWATCH_CAP_NET_RAW 13

struct capwatch {
	dev_t ns_dev;
	ino_t ns_ino;
	bool ns_ok;
	pid_t reported[CAPWATCH_MAX_PIDS]; /* still alive last scan */
	size_t nreported;
};

struct capwatch *
capwatch_new(void)
{
	struct capwatch *cw = calloc(1, sizeof(*cw));
	struct stat sb;

	if (cw == NULL)
		return NULL;
	if (stat("/proc/self/ns/net", &sb) == 0) {
		cw->ns_dev = sb.st_dev;
		cw->ns_ino = sb.st_ino;
		cw->ns_ok = true;
	}
	return cw;
}

void
capwatch_free(struct capwatch *cw)
{
	free(cw);
}

/* CapEff of pid, or false when it cannot be read. */
static bool
capwatch_capeff(pid_t pid, unsigned long long *eff, char *comm, size_t commlen)
{
	char path[64], line[256];
	FILE *f;
	bool ok = false;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return false;
	comm[0] = '\0';
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "Name:", 5) == 0)
			sscanf(line + 5, " %31s", comm);
		else if (strncmp(line, "CapEff:", 7) == 0 && sscanf(line + 7, " %llx", eff) == 1)
			ok = true;
	}
	fclose(f);
	(void)commlen;
	return ok;
}

/* Whether pid lives in our network namespace (false when that cannot be told). */
static bool
capwatch_same_netns(const struct capwatch *cw, pid_t pid)
{
	char path[64];
	struct stat sb;

	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	return cw->ns_ok && stat(path, &sb) == 0 && sb.st_dev == cw->ns_dev &&
	       sb.st_ino == cw->ns_ino;
}

/* One of egressd's own processes (the parent holds NET_ADMIN by design). */
static bool
capwatch_ours(pid_t pid, const pid_t *ours, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (ours[i] == pid)
			return true;
	return false;
}

unsigned
capwatch_scan(struct capwatch *cw, const pid_t *ours, size_t nours)
{
	pid_t alive[CAPWATCH_MAX_PIDS];
	size_t nalive = 0;
	unsigned reports = 0;
	struct dirent *de;
	DIR *d;

	if (cw == NULL || !cw->ns_ok || (d = opendir("/proc")) == NULL)
		return 0;
	while ((de = readdir(d)) != NULL) {
		unsigned long long eff = 0;
		char comm[32];
		bool seen = false;
		pid_t pid;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid = (pid_t)strtol(de->d_name, NULL, 10);
		if (pid <= 0 || capwatch_ours(pid, ours, nours))
			continue;
		if (!capwatch_capeff(pid, &eff, comm, sizeof(comm)))
			continue;
		if (!(eff >> CAPWATCH_CAP_NET_ADMIN & 1) && !(eff >> CAPWATCH_CAP_NET_RAW & 1))
			continue;
		if (!capwatch_same_netns(cw, pid))
			continue;
		for (size_t i = 0; i < cw->nreported && !seen; i++)
			seen = cw->reported[i] == pid;
		if (nalive < CAPWATCH_MAX_PIDS)
			alive[nalive++] = pid;
		if (seen)
			continue;
		{
			struct log_line l;
			char caps[32];

			snprintf(caps, sizeof(caps), "%s%s",
			    (eff >> CAPWATCH_CAP_NET_ADMIN & 1) ? "NET_ADMIN " : "",
			    (eff >> CAPWATCH_CAP_NET_RAW & 1) ? "NET_RAW" : "");
			log_begin(&l, LOG_ERROR, "proc", "unsafe_capabilities");
			log_int(&l, "pid", pid);
			log_str(&l, "comm", comm);
			log_str(&l, "caps", caps);
			log_str(&l, "msg",
			    "a process in the sandbox's network namespace holds CAP_NET_ADMIN or "
			    "CAP_NET_RAW: it can rewrite the ruleset or send frames below it; drop "
			    "those capabilities from the workload or enforce host-side");
			log_end(&l);
		}
		reports++;
	}
	closedir(d);
	memcpy(cw->reported, alive, nalive * sizeof(alive[0]));
	cw->nreported = nalive;
	return reports;
}
