/*
 * The egress policy: an immutable, refcounted model built from the
 * OpenSandbox JSON shape, the git YAML file and the always-rules files,
 * with a matching engine for names and addresses.
 */
#ifndef POLICY_POLICY_H
#define POLICY_POLICY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/name.h"

#define POLICY_MAX_RULES_DEFAULT 4096      /* user rules, as OpenSandbox */
#define POLICY_MAX_RULES_HARD 1000000      /* compiled ceiling of max_rules */
#define POLICY_MAX_TARGET_LEN 253          /* bytes of one target after trimming */
#define POLICY_MAX_PORT_RANGES 32          /* port ranges of one rule */
#define POLICY_MAX_ALWAYS_RULES 65536      /* lines of one always file */
#define POLICY_MAX_ALWAYS_BYTES (8u << 20) /* bytes of one always file */
#define POLICY_MAX_FILE_BYTES (4u << 20)   /* bytes of one YAML policy file */
#define POLICY_DNS_TTL_MIN_DEFAULT 60      /* seconds */
#define POLICY_DNS_TTL_MAX_DEFAULT 360     /* seconds, the OpenSandbox dyn timeout */
#define POLICY_DNS_TTL_CEILING 86400       /* largest ttl_max accepted */

struct policy;
struct binding_set;

enum policy_action {
	POLICY_DENY = 0,
	POLICY_ALLOW = 1,
};

/* Where a rule comes from, in precedence order. */
enum policy_origin {
	POLICY_ORIGIN_DENY_ALWAYS = 0,  /* /var/egress/rules/deny.always */
	POLICY_ORIGIN_ALLOW_ALWAYS = 1, /* /var/egress/rules/allow.always */
	POLICY_ORIGIN_USER = 2,         /* API or file rules, first match wins */
	POLICY_ORIGIN_DEFAULT = 3,      /* no rule matched: defaultAction */
};
#define POLICY_ORIGIN_RULE_LISTS 3

enum policy_target_kind {
	POLICY_TARGET_NAME = 0,     /* exact FQDN */
	POLICY_TARGET_WILDCARD = 1, /* "*.example.com": strictly below the apex */
	POLICY_TARGET_ADDR = 2,     /* one IPv4 or IPv6 address */
	POLICY_TARGET_CIDR = 3,     /* a prefix */
};

/* Error classes; POLICY_ERR_TOO_LARGE maps to HTTP 413. */
enum policy_errcode {
	POLICY_ERR_NONE = 0,
	POLICY_ERR_SYNTAX,    /* not JSON / not YAML */
	POLICY_ERR_INVALID,   /* well-formed but not a valid policy */
	POLICY_ERR_TOO_LARGE, /* a limit was exceeded */
	POLICY_ERR_IO,        /* the file could not be read */
	POLICY_ERR_NOMEM,
};

/* A load or validation error: file:line:col: key: message. */
struct policy_err {
	enum policy_errcode code;
	char file[256]; /* file name, or "<json>" */
	unsigned line;  /* 1-based, 0 if unknown */
	unsigned col;   /* 1-based, 0 if unknown */
	char key[128];  /* path of the offending key, e.g. egress[2].target */
	char msg[256];
};

/* Limits a caller may lower (never raise past the compiled maximum). */
struct policy_limits {
	size_t max_rules;      /* user rules; 0 = POLICY_MAX_RULES_HARD */
	size_t max_target_len; /* 0 = POLICY_MAX_TARGET_LEN */
};

struct policy_port_range {
	uint16_t lo, hi; /* inclusive, 1..65535 */
};

struct policy_dns {
	uint32_t ttl_min;    /* learned addresses live at least this long */
	uint32_t ttl_max;    /* and at most this long */
	bool filter_private; /* drop answers in private ranges */
};

/* One rule as seen by iterators (borrowed from the policy). */
struct policy_rule_info {
	enum policy_origin origin;
	size_t index; /* position in its origin list */
	enum policy_action action;
	enum policy_target_kind kind;
	const char *target;                    /* canonical text */
	const struct policy_addr *addr;        /* ADDR/CIDR, else NULL */
	const struct policy_port_range *ports; /* NULL when all ports */
	size_t nports;
};

/* The answer of a decision, borrowed from the policy it came from. */
struct policy_decision {
	enum policy_action action;
	enum policy_origin origin;
	size_t index;       /* in its origin list, SIZE_MAX for the default */
	const char *target; /* deciding rule's target, NULL for the default */
	enum policy_target_kind kind;
	const struct policy_port_range *ports; /* of the deciding allow rule; NULL = all */
	size_t nports;
	const char *why; /* static English text */
};

typedef int (*policy_rule_cb)(const struct policy_rule_info *rule, void *arg);

/* Fill lim with the defaults (4096 rules, 253-byte targets). */
void policy_limits_default(struct policy_limits *lim);

/* Format err as "file:line:col: key: message" into buf. */
void policy_err_format(const struct policy_err *err, char *buf, size_t len);

/*
 * Build a policy from the OpenSandbox body {"defaultAction","egress"}
 * (POST/PUT /policy, OPENSANDBOX_EGRESS_RULES). Empty or blank body,
 * null and {} mean deny-all. lim may be NULL. Returns an owned policy
 * or NULL with err filled.
 */
struct policy *policy_from_json(const char *buf, size_t len, const struct policy_limits *lim,
    struct policy_err *err) __attribute__((warn_unused_result));

/* Build a policy from the YAML file at path (see docs/policy.md). */
struct policy *policy_from_yaml_file(const char *path, const struct policy_limits *lim,
    struct policy_err *err) __attribute__((warn_unused_result));

/* Same as policy_from_yaml_file over a buffer; name labels errors. */
struct policy *policy_from_yaml_buf(const char *name, const char *buf, size_t len,
    const struct policy_limits *lim, struct policy_err *err) __attribute__((warn_unused_result));

/* A deny-all policy with default DNS settings. */
struct policy *policy_new_deny_all(void) __attribute__((warn_unused_result));

/* Take a reference. */
struct policy *policy_ref(struct policy *p);

/* Drop a reference; the last one frees (accepts NULL). */
void policy_free(struct policy *p);

/*
 * PATCH: patch's user rules first, then base's, one rule per target
 * (first occurrence wins, so the patch overrides). Keeps base's default,
 * always rules, DNS settings and bindings. Owned result or NULL.
 */
struct policy *policy_merge(const struct policy *base, const struct policy *patch,
    const struct policy_limits *lim, struct policy_err *err) __attribute__((warn_unused_result));

/* PATCH body: a non-empty JSON array of rules merged into base. */
struct policy *policy_patch_json(const struct policy *base, const char *buf, size_t len,
    const struct policy_limits *lim, struct policy_err *err) __attribute__((warn_unused_result));

/*
 * DELETE: base without the user rules whose target equals one of targets
 * (compared canonically). *removed gets the count. Owned result or NULL.
 */
struct policy *policy_remove_targets(const struct policy *base, const char *const *targets,
    size_t ntargets, size_t *removed, struct policy_err *err) __attribute__((warn_unused_result));

/* DELETE body: a non-empty JSON array of target strings. */
struct policy *policy_remove_json(const struct policy *base, const char *buf, size_t len,
    size_t *removed, struct policy_err *err) __attribute__((warn_unused_result));

/*
 * A copy of p whose deny.always and allow.always lists are parsed from
 * the given buffers (one target per line, '#' comments; NULL = none).
 * The names label errors.
 */
struct policy *policy_with_always(const struct policy *p, const char *deny_name,
    const char *deny_buf, size_t deny_len, const char *allow_name, const char *allow_buf,
    size_t allow_len, struct policy_err *err) __attribute__((warn_unused_result));

/*
 * A copy of p whose log_skip list (OpenSandbox's log_skip.always: names
 * whose successful resolutions are not logged) is parsed from buf: one
 * name or "*.name" per line, '#' comments; an IP or CIDR line is an
 * error naming the line. NULL buf = none. The name labels errors.
 */
struct policy *policy_with_log_skip(const struct policy *p, const char *name, const char *buf,
    size_t len, struct policy_err *err) __attribute__((warn_unused_result));

/*
 * A copy of p with the operator directory's DIR/deny.always,
 * DIR/allow.always and DIR/log_skip.always (a missing file means an
 * empty list), built once. Errors name the file and line.
 */
struct policy *policy_with_always_dir(const struct policy *p, const char *dir,
    struct policy_err *err) __attribute__((warn_unused_result));

/* Whether a canonical name's successful resolution goes unlogged (log_skip). */
bool policy_log_skip(const struct policy *p, const char *canon);

/* Number of log_skip entries (names and wildcards). */
size_t policy_log_skip_count(const struct policy *p);

/* A copy of p with another binding set (takes a reference; NULL = none). */
struct policy *policy_with_bindings(const struct policy *p, struct binding_set *bs)
    __attribute__((warn_unused_result));

/* The user policy in the OpenSandbox GET shape {"egress":[..]|null,"defaultAction"}. */
json_t *policy_to_json(const struct policy *p);

/*
 * The whole effective policy (default, terminateAll, DNS settings and the
 * three rule lists, always rules included; not the bindings) as one
 * compact JSON document, for the channel between processes: the parent
 * keeps its own copy of the policy a child gives it. Owned string, or NULL
 * on allocation failure.
 */
char *policy_wire_encode(const struct policy *p, size_t *len) __attribute__((warn_unused_result));

/*
 * The policy a policy_wire_encode() document describes, through the same
 * strict rule parser as the API (unknown keys, bad targets and ports are
 * refused). Owned policy, or NULL with err filled.
 */
struct policy *policy_wire_decode(const char *buf, size_t len, struct policy_err *err)
    __attribute__((warn_unused_result));

/* "deny_all", "allow_all" or "enforcing", as GET /policy reports it. */
const char *policy_mode(const struct policy *p);

enum policy_action policy_default_action(const struct policy *p);
const struct policy_dns *policy_dns(const struct policy *p);

/* terminateAll: terminate every allowed TLS host, so that Host == SNI holds everywhere. */
bool policy_terminate_all(const struct policy *p);

/* The policy's bindings (borrowed), or NULL. */
const struct binding_set *policy_bindings(const struct policy *p);

/*
 * Decide a canonical name (policy_name_canon output): deny.always, then
 * allow.always, then the first matching user rule, then the default.
 * IP rules never take part. The deciding allow rule's ports (if any) are
 * in out->ports: the name is allowed on those ports only.
 */
void policy_decide_name(const struct policy *p, const char *canon, struct policy_decision *out);

/* The ports a name may be reached on: 0 = none, else 1 and *ports (NULL = all). */
int policy_name_ports(const struct policy *p, const char *canon,
    const struct policy_port_range **ports, size_t *nports);

/*
 * Decide a destination address (4 or 16 bytes, IPv4-mapped IPv6 is
 * unmapped) and port (0 = any port), as the nft sets do: deny.always,
 * then any user deny prefix, then allow.always, then a user allow prefix
 * covering the port, then the default. proto is IPPROTO_TCP/UDP (ports
 * apply to both).
 */
void policy_decide_addr(const struct policy *p, int family, const uint8_t *addr, uint16_t port,
    int proto, struct policy_decision *out);

/* True if port is in ranges (nports 0 = all ports). */
bool policy_ports_contain(const struct policy_port_range *ports, size_t nports, uint16_t port);

/*
 * Whether p allows a learned destination of canon on a port scope (0: all
 * ports, only when the deciding rule has none). NULL, or why not (static).
 */
const char *policy_learn_refusal(const struct policy *p, const char *canon, uint16_t port);

/* Number of rules of one origin list. */
size_t policy_rule_count(const struct policy *p, enum policy_origin origin);

/* Rule index of origin into *out; 0 or -1. */
int policy_rule_get(
    const struct policy *p, enum policy_origin origin, size_t index, struct policy_rule_info *out);

/* Call cb for every IP/CIDR rule (deny.always, allow.always, user); stops on non-zero. */
int policy_foreach_addr(const struct policy *p, policy_rule_cb cb, void *arg);

/* Call cb for every name and wildcard rule, in precedence order. */
int policy_foreach_name(const struct policy *p, policy_rule_cb cb, void *arg);

/* Text of an origin ("deny.always", "allow.always", "user", "default"). */
const char *policy_origin_str(enum policy_origin o);

/* "allow" or "deny". */
const char *policy_action_str(enum policy_action a);

#endif
