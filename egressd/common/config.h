/*
 * Runtime configuration of the sidecar: compiled defaults, then a config
 * file (--config, YAML mapping of option names), then environment
 * variables (the OpenSandbox names where they exist), then command-line
 * flags. One table describes every option for all four sources and for
 * --help.
 */
#ifndef EGRESSD_CONFIG_H
#define EGRESSD_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "egressd/common/log.h"

struct ca;

enum config_mode {
	CONFIG_MODE_DNS_NFT = 0, /* DNS filtering and nft enforcement (default) */
	CONFIG_MODE_DNS,         /* DNS filtering only: compatibility, not secure */
};

#define CONFIG_MAX_INTERCEPT_PORTS 8
#define CONFIG_TOKEN_MAX 256
#define CONFIG_FILE_MAX (1u << 20) /* bytes of a --config file */

struct config {
	enum config_mode mode;
	char policy_file[PATH_MAX];    /* our YAML policy file */
	char os_policy_file[PATH_MAX]; /* OPENSANDBOX_EGRESS_POLICY_FILE (JSON) */
	char *rules_json;              /* OPENSANDBOX_EGRESS_RULES (heap) */
	char always_dir[PATH_MAX];     /* deny.always / allow.always */
	char http_addr[128];
	char token[CONFIG_TOKEN_MAX]; /* never logged */
	bool insecure_no_token;
	long max_rules;
	char dns_upstream[512];
	uint16_t dns_port;
	uint32_t mark;
	char worker_user[64]; /* "uid[:gid]" or a user name; "" = default */
	char ready_file[PATH_MAX];
	bool remove_table_on_exit;
	char table[32];
	bool intercept;
	char intercept_ports[64];
	uint16_t tls_port;
	uint16_t plain_port;
	char ca_export[PATH_MAX];
	char ca_cert[PATH_MAX];
	char ca_key[PATH_MAX];
	char upstream_ca[PATH_MAX];
	bool ssl_insecure;
	enum log_level log_level;
	char config_file[PATH_MAX];

	/*
	 * Not an option: the sandbox CA, made (or loaded) once by the parent
	 * before the first fork, so that every worker incarnation serves the
	 * same CA the workload already trusts.
	 */
	struct ca *ca;
	/* Not an option: upstream_ca read by the parent before the first fork. */
	struct x509_store_st *upstream_store;
};

/* Fill in the compiled defaults. */
void config_defaults(struct config *c);

/*
 * Load file (if --config or EGRESSD_CONFIG names one), env and flags, in
 * that order of precedence (flags win). argv starts after the program
 * name. Returns 0, or -1 with a message in err.
 */
int config_load(struct config *c, int argc, char **argv, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Apply the environment only (used by tests). */
int config_from_env(struct config *c, char *err, size_t errlen) __attribute__((warn_unused_result));

/* Free heap members and the CA (accepts a config that was only defaulted). */
void config_free(struct config *c);

/* Check cross-option constraints (token present, ports sane...). */
int config_check(const struct config *c, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* --help text: every option with its flag, env variable and default. */
void config_usage(FILE *out);

/* Resolve worker_user into a uid/gid; the default is a dedicated uid. */
int config_worker_ids(const struct config *c, uid_t *uid, gid_t *gid, char *err, size_t errlen)
    __attribute__((warn_unused_result));

const char *config_mode_name(enum config_mode m);

/* The default dedicated worker uid/gid when no egressd user exists. */
#define CONFIG_DEFAULT_WORKER_ID 65533

#endif
