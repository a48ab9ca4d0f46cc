/*
 * nftrules: the egressd nftables table (inet), written through libnftnl and
 * libmnl from the privileged parent. Every change is one atomic batch whose
 * ACKs are all read and matched to their requests.
 */
#ifndef EGRESSD_NFTRULES_H
#define EGRESSD_NFTRULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NFTRULES_TABLE_DEFAULT "egressd"
#define NFTRULES_MAX_TABLE_NAME 32 /* NFT_TABLE_MAXNAMELEN is 256; ours is short */
#define NFTRULES_MAX_INTERCEPT 16  /* intercepted TCP ports */
#define NFTRULES_MAX_RULES 65536   /* static IP rules per install/update */
#define NFTRULES_ERRLEN 256
#define NFTRULES_MARK_DEFAULT 0x1
#define NFTRULES_DNS_MARK_DEFAULT 0x2
#define NFTRULES_LISTEN_MARK_DEFAULT 0x8 /* the parent's listeners (--listen-mark) */
#define NFTRULES_DNS_PORT_DEFAULT 15353
#define NFTRULES_MAX_DOH 64 /* OPENSANDBOX_EGRESS_DOH_BLOCKLIST entries */
#define NFTRULES_PORT_DOH 443

enum nftrules_action {
	NFTRULES_ALLOW,
	NFTRULES_DENY,
};

/* One static IP/CIDR rule; port_lo = port_hi = 0 means all ports. */
struct nftrules_rule {
	enum nftrules_action action;
	int family;       /* AF_INET or AF_INET6 */
	uint8_t addr[16]; /* network order; the first 4 bytes for AF_INET */
	uint8_t prefix_len;
	uint16_t port_lo; /* host order, inclusive */
	uint16_t port_hi;
};

struct addrclass_own;

/*
 * The static part of the policy: IP rules and the default action, and
 * the sandbox's own networks, denied with the inner ranges.
 */
struct nftrules_static {
	const struct nftrules_rule *rules; /* borrowed for the call */
	size_t nrules;
	enum nftrules_action default_action;
	const struct addrclass_own *own; /* borrowed for the call; NULL: none */
};

/* A TCP destination port redirected to a local listener port. */
struct nftrules_redirect {
	uint16_t port;
	uint16_t to_port;
};

/* A port of the sidecar's that only a socket with the mark may serve. */
struct nftrules_listener {
	uint8_t proto; /* IPPROTO_TCP or IPPROTO_UDP */
	uint16_t port;
	uint32_t max_conns; /* TCP: new connections refused beyond this many at once; 0: no cap */
};

#define NFTRULES_MAX_LISTENERS 16

/* An upstream resolver the sidecar's own DNS traffic may reach. */
struct nftrules_dest {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	uint16_t port;
};

#define NFTRULES_MAX_RESOLVERS 8
#define NFTRULES_MAX_REPORTS 2 /* the deny webhook and the OTLP collector */
#define NFTRULES_MAX_PROXY 16  /* addresses of the chained proxy (CHAN_MAX_PROXY_ADDRS) */

struct nftrules_config {
	char table[NFTRULES_MAX_TABLE_NAME];
	uint32_t mark;     /* the sidecar's own sockets carry this SO_MARK */
	uint32_t dns_mark; /* the dns process's sockets: the resolvers only */
	uint16_t dns_port; /* local DNS proxy port that port 53 goes to */
	bool intercept;    /* redirect intercept ports to the vault */
	size_t nintercept;
	struct nftrules_redirect intercept_ports[NFTRULES_MAX_INTERCEPT];
	uint32_t listen_mark; /* the parent's listeners: only they may serve listeners[] */
	size_t nlisteners;    /* input chain: these ports, listen_mark sockets only */
	struct nftrules_listener listeners[NFTRULES_MAX_LISTENERS];
	size_t nresolvers; /* marked DNS (port 53 or theirs) goes to these only */
	struct nftrules_dest resolvers[NFTRULES_MAX_RESOLVERS];
	/*
	 * OPENSANDBOX_EGRESS_BLOCK_DOH_443: refuse port 443 (TCP and UDP) to
	 * the ndoh blocklist prefixes (family, addr, prefix_len used), or to
	 * every address when the list is empty. Before every allow rule.
	 */
	bool block_doh;
	size_t ndoh;
	struct nftrules_rule doh[NFTRULES_MAX_DOH];
	uint16_t peek_port; /* other TCP ports of learned addresses go here; 0: none */
	/*
	 * The report process's sockets (report_mark; 0: no such process):
	 * TCP to these destinations (the deny webhook, the OTLP collector)
	 * and nothing else, ahead of every set, and never redirected.
	 */
	uint32_t report_mark;
	size_t nreports;
	struct nftrules_dest reports[NFTRULES_MAX_REPORTS];
	/*
	 * A chained upstream proxy (OPENSANDBOX_EGRESS_UPSTREAM_PROXY): the
	 * intercept's mark reaches TCP to it and nothing else, and the
	 * workload's traffic leaves only where the NAT chain hands it to the
	 * intercept (intercepted ports, learned addresses). Given by name,
	 * the proxy's addresses change as the dns process resolves it again
	 * (nftrules_set_proxy); none yet: the intercept's mark reaches nothing.
	 */
	bool proxy;
	bool dns_via_proxy; /* dns_mark reaches the proxy (TCP) in place of the resolvers */
	size_t nproxy;
	struct nftrules_dest proxy_dests[NFTRULES_MAX_PROXY];
	/*
	 * NFLOG group of the refusing rules of the workload's traffic (0: not
	 * logged). Each logs its packet's first NFTRULES_LOG_SNAPLEN bytes with
	 * the prefix NFTRULES_LOG_PREFIX and the rule's name (docs/nflog.md).
	 */
	uint16_t nflog_group;
};

#define NFTRULES_LOG_PREFIX "egressd:"
#define NFTRULES_LOG_SNAPLEN 128

struct nftrules;

/* Defaults: table egressd, mark 0x1, DNS 15353, 443->15443 and 80->15080 off. */
void nftrules_config_default(struct nftrules_config *cfg);

/* Open a NETLINK_NETFILTER socket; NULL and err filled on failure. Owned. */
struct nftrules *nftrules_open(const struct nftrules_config *cfg, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Replace the whole table (delete if present, create, fill) atomically. */
int nftrules_install(struct nftrules *n, const struct nftrules_static *st)
    __attribute__((warn_unused_result));

/* Refill allow/deny sets and rebuild the filter chain; learned sets kept. */
int nftrules_update_static(struct nftrules *n, const struct nftrules_static *st)
    __attribute__((warn_unused_result));

/*
 * The chained proxy's addresses (n of them, at most NFTRULES_MAX_PROXY;
 * each with the proxy's port) in place of those in force: the filter chain
 * is rebuilt with st as nftrules_update_static does. On error the previous
 * addresses stay in force, in the table and in n.
 */
int nftrules_set_proxy(struct nftrules *n, const struct nftrules_dest *d, size_t count,
    const struct nftrules_static *st) __attribute__((warn_unused_result));

/* The chained proxy's addresses in force, into d (NFTRULES_MAX_PROXY room). */
void nftrules_proxy(const struct nftrules *n, struct nftrules_dest *d, size_t *count);

/* Add (or refresh) a learned address; port 0 = all ports. timeout in ms. */
int nftrules_learn(struct nftrules *n, int family, const uint8_t *addr, uint16_t port,
    uint64_t timeout_ms) __attribute__((warn_unused_result));

/* A learned element for nftrules_learn_many(). */
struct nftrules_elem {
	int family;
	uint8_t addr[16];
	uint16_t port; /* 0 = all ports */
	uint64_t timeout_ms;
};

/* Add (or refresh) count learned elements in one atomic batch. */
int nftrules_learn_many(struct nftrules *n, const struct nftrules_elem *el, size_t count)
    __attribute__((warn_unused_result));

/* Remove a learned address; absent is not an error. */
int nftrules_forget(struct nftrules *n, int family, const uint8_t *addr, uint16_t port)
    __attribute__((warn_unused_result));

/* Delete the table; absent is not an error. */
int nftrules_remove_table(struct nftrules *n) __attribute__((warn_unused_result));

/* The kernel's ruleset generation id (changes on every commit, by anyone). */
int nftrules_genid(struct nftrules *n, uint32_t *genid) __attribute__((warn_unused_result));

/* The last error message (valid until the next call on n). */
const char *nftrules_error(const struct nftrules *n);

/* Close the socket and free n (accepts NULL). The table stays in place. */
void nftrules_close(struct nftrules *n);

#endif
