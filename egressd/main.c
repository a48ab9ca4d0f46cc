/*
 * egressd entry point: the policy CLI (check, explain, test) or the
 * sidecar itself (parent_run), configured from a file, the environment
 * and flags.
 */
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "egressd/common/config.h"
#include "egressd/common/otlp.h"
#include "egressd/common/log.h"
#include "egressd/common/wipe.h"
#include "egressd/child/worker.h"
#include "egressd/priv/parent.h"
#include "egressd/priv/privsep.h"
#include "policy/cli.h"
#include "version.h"

/* What this build implements, for scripts and the exfil suite. */
#define EGRESSD_FEATURES                                                                           \
	"dns nft api intercept vault dnsratelimit watchdog embedded4 hrrsni alpnalert "            \
	"clientcalog "                                                                             \
	"policyhmac capcheck placeholders h2"

/* A variable that is set but not implemented: said at every start. */
static void
main_env_ignored(const char *name, const char *why, void *arg)
{
	struct log_line l;

	(void)arg;
	log_begin(&l, LOG_WARN, "config", "env_ignored");
	log_str(&l, "variable", name);
	log_str(&l, "why", why);
	log_end(&l);
}

int
main(int argc, char **argv)
{
	struct config cfg;
	char err[1024];
	int rc;

	/* Before OpenSSL allocates anything: its freed memory is wiped. */
	if (wipe_install() != 0) {
		fprintf(stderr, "egressd: cannot install OpenSSL's wiping allocator\n");
		return 1;
	}
	if (argc >= 2 && (strcmp(argv[1], "check") == 0 || strcmp(argv[1], "explain") == 0 ||
	                     strcmp(argv[1], "test") == 0)) {
		log_init("cli", LOG_WARN, 2);
		/* Nothing is parsed with a privilege: root's capabilities go first. */
		if (privsep_drop_caps(err, sizeof(err)) != 0) {
			fprintf(stderr, "egressd %s: cannot drop capabilities: %s\n", argv[1], err);
			return 2;
		}
		return policycli_main(argc - 1, argv + 1);
	}
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--version") == 0 || strcmp(argv[i], "-V") == 0) {
			printf("egressd %s\n", EGRESSD_VERSION);
			return 0;
		}
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			config_usage(stdout);
			return 0;
		}
		if (strcmp(argv[i], "--features") == 0) {
			printf("%s\n", EGRESSD_FEATURES);
			return 0;
		}
	}
	config_defaults(&cfg);
	if (config_load(&cfg, argc - 1, argv + 1, err, sizeof(err)) != 0 ||
	    config_check(&cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "egressd: %s\n", err);
		config_free(&cfg);
		return 2;
	}
	/* The token is read: no process of ours (or exec'd helper) inherits it. */
	config_wipe_secrets(argc, argv);
	log_init("parent", cfg.log_level, 2);
	if (config_env_audit(environ, main_env_ignored, NULL, err, sizeof(err)) != 0) {
		log_msg(LOG_ERROR, "config", "env_refused", "%s", err);
		config_free(&cfg);
		return 2;
	}
	{
		struct otlp_settings os;

		/* config_check parsed them already: this cannot fail here. */
		if (otlp_settings(&cfg, &os, err, sizeof(err)) == 0 && !os.enabled &&
		    os.url.host[0] != '\0')
			log_msg(LOG_INFO, "config", "otlp_disabled",
			    "an OTLP endpoint is set but %s: no metrics are exported",
			    cfg.otel_sdk_disabled ? "OTEL_SDK_DISABLED is true"
			                          : "OTEL_METRICS_EXPORTER is none");
		explicit_bzero(&os, sizeof(os));
	}
	rc = parent_run(&cfg, worker_main);
	config_free(&cfg);
	return rc;
}
