/*
 * Interceptor test fixtures (tests only); see icptfix.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "icptfix.h"
#include "policy/binding.h"
#include "vault/icpt_internal.h"
#include "vault/secret.h"
#include "vault/snap.h"

#define ICPTFIX_CHECK(x)                                                                           \
	do {                                                                                       \
		if (!(x)) {                                                                        \
			fprintf(stderr, "icptfix: %s:%d: %s\n", __FILE__, __LINE__, #x);           \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

struct intercept *
icptfix_intercept(struct event_base *base, const struct intercept_ops *ops, void *arg, X509 *trust)
{
	struct intercept *ic = calloc(1, sizeof(*ic));

	ICPTFIX_CHECK(ic != NULL);
	ic->base = base;
	TAILQ_INIT(&ic->idle);
	TAILQ_INIT(&ic->quiet);
	TAILQ_INIT(&ic->pool);
	ic->ev_reap = event_new(ic->base, -1, 0, icpt_reap_cb, ic);
	ICPTFIX_CHECK(ic->ev_reap != NULL);
	ic->ops = ops;
	ic->arg = arg;
	ic->cfg.tls_port = 15443;
	ic->cfg.plain_port = 15080;
	ic->cfg.max_conns = 16;
	ic->fd_budget = 64; /* as intercept_new() derives it from RLIMIT_NOFILE */
	ic->cfg.max_buffer = INTERCEPT_MAX_BUFFER;
	ic->cfg.head_timeout_s = INTERCEPT_MAX_HEAD_S;
	ic->cfg.idle_timeout_s = ICPT_DEFAULT_IDLE_S;
	ic->cfg.connect_timeout_s = INTERCEPT_MAX_CONNECT_S;
	ic->cfg.upstream_idle_max = INTERCEPT_DEFAULT_UPSTREAM_IDLE;
	if (trust != NULL) {
		ic->up_ctx = SSL_CTX_new(TLS_client_method());
		ICPTFIX_CHECK(ic->up_ctx != NULL);
		SSL_CTX_set_verify(ic->up_ctx, SSL_VERIFY_PEER, NULL);
		ICPTFIX_CHECK(X509_STORE_add_cert(SSL_CTX_get_cert_store(ic->up_ctx), trust) == 1);
	}
	return ic;
}

struct icptfix_job {
	int fd;
	intercept_socket_cb cb;
	void *arg;
};

static void
icptfix_socket_cb(evutil_socket_t fd, short what, void *arg)
{
	struct icptfix_job *j = arg;

	(void)fd, (void)what;
	j->cb(j->fd, j->fd < 0 ? EIO : 0, j->arg);
	free(j);
}

int
icptfix_socket(struct event_base *base, int family, intercept_socket_cb cb, void *cbarg)
{
	struct icptfix_job *j = calloc(1, sizeof(*j));
	struct timeval tv = {0, 0};

	ICPTFIX_CHECK(j != NULL);
	j->fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	j->cb = cb;
	j->arg = cbarg;
	ICPTFIX_CHECK(event_base_once(base, -1, EV_TIMEOUT, icptfix_socket_cb, j, &tv) == 0);
	return 0;
}

bool
icptfix_sni_allowed(void *arg, const char *canon)
{
	(void)arg;
	return strcmp(canon, ICPTFIX_HOST) == 0;
}

bool
icptfix_dst_ok(void *arg, const char *canon, int family, const uint8_t *addr, uint16_t port)
{
	(void)arg, (void)canon, (void)family, (void)addr, (void)port;
	return true;
}

void
icptfix_cert(const char *host, X509 **cert, EVP_PKEY **key)
{
	char san[300];
	X509 *x = X509_new();
	EVP_PKEY *k = EVP_EC_gen("P-256");
	X509_NAME *n;
	X509_EXTENSION *e;
	X509V3_CTX v3;

	ICPTFIX_CHECK(x != NULL && k != NULL);
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), -3600);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, k);
	n = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)host, -1, -1, 0);
	X509_set_issuer_name(x, n);
	X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
	snprintf(san, sizeof(san), "DNS:%s", host);
	e = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san);
	ICPTFIX_CHECK(e != NULL);
	X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
	e = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "critical,CA:TRUE");
	ICPTFIX_CHECK(e != NULL);
	X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
	ICPTFIX_CHECK(X509_sign(x, k, EVP_sha256()) > 0);
	*cert = x;
	*key = k;
}

struct vault_snap *
icptfix_snap(const char *json, const uint8_t *secret, size_t n)
{
	struct policy_err pe;
	struct binding_set *bs = binding_set_from_json(json, strlen(json), &pe);
	struct secret *s = secret_new(secret, n);
	struct vault_snap *snap;
	char err[256];

	if (bs == NULL)
		fprintf(stderr, "icptfix: bindings: %s\n", pe.msg);
	ICPTFIX_CHECK(bs != NULL && s != NULL);
	snap = vault_snap_new(bs, &s, 1, 1, err, sizeof(err));
	if (snap == NULL)
		fprintf(stderr, "icptfix: snapshot: %s\n", err);
	ICPTFIX_CHECK(snap != NULL);
	binding_set_free(bs);
	secret_unref(s);
	return snap;
}
