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

#include "egressd/common/listeners.h"
#include "egressd/common/httpurl.h"
#include "egressd/common/log.h"
#include "egressd/common/otlp.h"

struct ca;

enum config_mode {
	CONFIG_MODE_DNS_NFT = 0, /* DNS filtering and nft enforcement (default) */
	CONFIG_MODE_DNS,         /* DNS filtering only: compatibility, not secure */
};

#define CONFIG_TOKEN_MAX 256
#define CONFIG_FILE_MAX (1u << 20) /* bytes of a --config file */

#define CONFIG_MAX_UPSTREAMS 8
#define CONFIG_NFLOG_GROUP 4201 /* default NFLOG group of the table's refusals */

/* An upstream resolver, as the parent resolved the configuration at start. */
struct config_upstream {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	uint16_t port;
};

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
	/* DNS upstream health, read by the dns process (dnshealth.c) with upstream's fallbacks. */
	char dns_upstream_timeout[32];
	char dns_upstream_probe[256];
	char dns_upstream_probe_interval[32];
	uint16_t dns_port;
	uint32_t mark;
	uint32_t dns_mark; /* the dns process's sockets: resolvers only */
	uint16_t
	    nflog_group; /* NFLOG group of the table's refusals (0: not logged; docs/nflog.md) */
	char worker_user[64]; /* "uid[:gid]" or a user name; "" = default */
	char ready_file[PATH_MAX];
	bool remove_table_on_exit;
	char table[32];
	bool intercept;
	char intercept_ports[128];
	char intercept_extra_ports[96]; /* OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS */
	uint16_t tls_port;
	uint16_t plain_port;
	uint16_t peek_port;           /* other TCP ports of name-learned addresses */
	uint32_t intercept_max_conns; /* 0: derived from RLIMIT_NOFILE */
	uint32_t hello_timeout;       /* seconds; 0: default */
	uint32_t head_timeout;
	uint32_t keepalive_timeout;
	uint32_t upstream_idle_max; /* 0: default */
	bool terminate_all;         /* terminate every allowed TLS host */
	bool http2;                 /* HTTP/2 on terminated connections (default on) */
	char ca_export[PATH_MAX];
	char ca_cert[PATH_MAX];
	char ca_key[PATH_MAX];
	uint32_t ca_lifetime;     /* seconds, generated CA; 0: CA_DEFAULT_VALIDITY_SECS */
	uint32_t ca_renew_before; /* seconds of overlap; 0: carenew_settings()'s default */
	char upstream_ca[PATH_MAX];
	bool ssl_insecure;
	bool block_doh_443;       /* OPENSANDBOX_EGRESS_BLOCK_DOH_443 */
	char doh_blocklist[2048]; /* OPENSANDBOX_EGRESS_DOH_BLOCKLIST: IP/CIDR, comma-separated */
	enum log_level log_level;
	char deny_webhook[512]; /* OPENSANDBOX_EGRESS_DENY_WEBHOOK */
	/* A chained HTTP CONNECT proxy for every intercept dial (docs/api.md). */
	char upstream_proxy[512];
	char upstream_proxy_auth[1024]; /* the Proxy-Authorization value; never logged */
	bool dns_via_proxy;             /* the DNS upstream too, as DNS over TCP through CONNECT */
	uint32_t report_mark;  /* the report process's sockets: webhook and collector only */
	uint32_t listen_mark;  /* the parent's listeners, never a child's socket: input chain */
	uint32_t report_queue; /* events waiting at most; 0: REPORT_QUEUE */
	/* OpenTelemetry metrics export (egressd/common/otlp.h, docs/api.md) */
	char sandbox_id[128];
	char metrics_extra_attrs[1024];
	char otlp_endpoint[512];
	char otlp_metrics_endpoint[512];
	char otlp_protocol[32];
	char otlp_headers[1024]; /* never logged */
	uint32_t otlp_timeout_ms;
	uint32_t otlp_interval_ms;
	char otlp_temporality[16];
	char otel_metrics_exporter[32];
	bool otel_sdk_disabled;
	char otel_service_name[128];
	char otel_resource_attrs[1024];
	char config_file[PATH_MAX];

	/*
	 * Not an option: the sandbox CA, made (or loaded) once by the parent
	 * before the first fork, so that every worker incarnation serves the
	 * same CA the workload already trusts.
	 */
	struct ca *ca;
	/*
	 * Nor this: during a renewal's overlap, the previous generated CA
	 * (its key already dropped), still exported and trusted until it
	 * expires; NULL otherwise.
	 */
	struct ca *ca_prev;
	/*
	 * Not an option either: the listening sockets, bound by the parent
	 * once (egressd/priv/listen.c) and inherited by every worker.
	 */
	struct listen_set listen;
	/*
	 * Nor this: the upstream resolvers, from dns_upstream or
	 * /etc/resolv.conf, read once by the parent (config_upstreams) so
	 * that the DNS proxy and the table's rule for the sidecar's own DNS
	 * traffic name the same servers.
	 */
	struct config_upstream upstreams[CONFIG_MAX_UPSTREAMS];
	size_t nupstreams;
	/* Not an option: upstream_ca read by the parent before the first fork. */
	struct x509_store_st *upstream_store;
};

/*
 * Resolve the upstream resolvers into c->upstreams: the dns_upstream list
 * ("ip", "ip:port" or "[ip6]:port", comma or space separated), or the
 * nameservers of /etc/resolv.conf when it is empty. 0, or -1 with err.
 */
int config_upstreams(struct config *c, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * The chained upstream proxy, parsed: set is false without one. Given by
 * address (family set), the nft table pins the intercept's dials to it;
 * given by name (family 0, name set), the dns process resolves the name
 * and the parent pins the table to the addresses it learns (docs/api.md).
 */
struct config_proxy {
	bool set;
	bool tls; /* https://: TLS to the proxy, verified against the upstream trust */
	uint8_t family;
	uint8_t addr[16];
	uint16_t port;
	char name[254]; /* canonical, or "" for an address */
};

/* The proxy of c (checked by config_check), into *p. */
void config_proxy(const struct config *c, struct config_proxy *p);

/* What the report process delivers, from deny_webhook and the OTEL_* settings. */
struct config_report {
	bool webhook; /* deny_webhook is set: hook holds it */
	struct httpurl hook;
	struct otlp_settings otlp; /* otlp.enabled: export */
};

/* Resolve c's report settings into *r (config_check passed: 0). 0, or -1 with err. */
int config_report(const struct config *c, struct config_report *r, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Called for each variable that is set but ignored: its name and why. */
typedef void (*config_env_report_cb)(const char *name, const char *why, void *arg);

/*
 * Check the environment envp for OPENSANDBOX_EGRESS_* and EGRESSD_*
 * variables egressd does not implement. One that would change
 * enforcement if ignored (a chained proxy, the vault transport guard, a
 * profile...) is an error (-1, err names it); every other one is reported
 * to `report` (warn at start). 0 otherwise. docs/api.md lists them all.
 */
int config_env_audit(char **envp, config_env_report_cb report, void *arg, char *err, size_t errlen)
    __attribute__((warn_unused_result));

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

/*
 * Wipe, in place, the values of every secret option (the API token, the
 * proxy authorization, the OTLP headers) from the environment and argv,
 * and unset the variables: after config_load no process forked later holds
 * them (nor shows them in /proc/PID/environ or cmdline) but in its struct
 * config, which each child forgets but for its own.
 */
void config_wipe_secrets(int argc, char **argv);

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

/* Most entries of OPENSANDBOX_EGRESS_DOH_BLOCKLIST. */
#define CONFIG_MAX_DOH 64
#define CONFIG_MAX_INTERCEPT_PORTS 16 /* = NFTRULES_MAX_INTERCEPT */

/* One DoH blocklist entry: the prefix, masked. */
struct config_prefix {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	uint8_t prefix_len;
};

/*
 * Parse doh_blocklist ("IP[/len],..."; spaces around entries ignored) into
 * out[0..max); *n entries. -1 with err naming the bad entry: an invalid
 * entry is refused, not skipped, so a typo cannot leave DoH open.
 */
int config_doh_blocklist(const struct config *c, struct config_prefix *out, size_t max, size_t *n,
    char *err, size_t errlen) __attribute__((warn_unused_result));

/* The default dedicated worker uid/gid when no egressd user exists. */
#define CONFIG_DEFAULT_WORKER_ID 65533

#endif
