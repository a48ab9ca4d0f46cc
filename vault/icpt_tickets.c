/*
 * Session tickets toward the workload (RFC 5077, RFC 8446 4.6.1): a
 * resumed handshake skips the leaf's signature and certificate. The keys
 * are this interceptor's own, random (so a ticket is good in this sandbox
 * alone), rotated every ICPT_TICKET_ROTATE_S with the previous key kept
 * for decryption one period more, and wiped on rotation and at the end.
 * Each resumption gets a fresh ticket (a client uses one once). Each
 * ticket carries the canonical host it was issued for: one presented for
 * another host gives a full handshake, and all are dropped when the
 * policy, the vault or the CA changes. No early data is ever accepted (a
 * replayed request could carry a credential twice).
 */
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include "vault/icpt_internal.h"

/* A fresh key into k. 0, or -1 (no randomness). */
static int
icpt_tkey_new(struct icpt_tkey *k, time_t now)
{
	if (RAND_bytes(k->name, sizeof(k->name)) != 1 ||
	    RAND_priv_bytes(k->aes, sizeof(k->aes)) != 1 ||
	    RAND_priv_bytes(k->hmac, sizeof(k->hmac)) != 1) {
		OPENSSL_cleanse(k, sizeof(*k));
		return -1;
	}
	k->born = now;
	k->set = true;
	return 0;
}

int
icpt_tickets_init(struct icpt_tickets *t, unsigned rotate_s, time_t now)
{
	memset(t, 0, sizeof(*t));
	t->rotate_s = rotate_s;
	return icpt_tkey_new(&t->k[0], now);
}

void
icpt_tickets_rotate(struct icpt_tickets *t, time_t now)
{
	struct icpt_tkey next;

	if (!t->k[0].set || now - t->k[0].born < (time_t)t->rotate_s)
		return;
	if (icpt_tkey_new(&next, now) != 0)
		return; /* the current key stays: tickets go on, none is weaker */
	OPENSSL_cleanse(&t->k[1], sizeof(t->k[1]));
	t->k[1] = t->k[0];
	t->k[0] = next;
	OPENSSL_cleanse(&next, sizeof(next));
}

const struct icpt_tkey *
icpt_tickets_find(const struct icpt_tickets *t, const unsigned char *name, bool *old)
{
	for (int i = 0; i < 2; i++)
		if (t->k[i].set && memcmp(t->k[i].name, name, sizeof(t->k[i].name)) == 0) {
			*old = i == 1;
			return &t->k[i];
		}
	return NULL;
}

void
icpt_tickets_wipe(struct icpt_tickets *t)
{
	OPENSSL_cleanse(t, sizeof(*t));
}

/* OpenSSL's key callback: encrypt with the current key, decrypt with either. */
static int
icpt_ticket_key_cb(SSL *ssl, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *ectx,
    EVP_MAC_CTX *hctx, int enc)
{
	struct intercept *ic = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
	const struct icpt_tkey *k;
	OSSL_PARAM params[3];
	bool old = false;

	if (ic == NULL)
		return -1;
	if (enc) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		icpt_tickets_rotate(&ic->tickets, ts.tv_sec);
		k = &ic->tickets.k[0];
		if (!k->set || RAND_bytes(iv, EVP_MAX_IV_LENGTH) != 1)
			return -1;
		memcpy(name, k->name, sizeof(k->name));
	} else if ((k = icpt_tickets_find(&ic->tickets, name, &old)) == NULL)
		return 0; /* not ours, or too old: a full handshake */
	/* The MAC context is OpenSSL's HMAC: our key, with SHA-256. */
	params[0] =
	    OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, (void *)k->hmac, sizeof(k->hmac));
	params[1] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
	params[2] = OSSL_PARAM_construct_end();
	if (EVP_MAC_CTX_set_params(hctx, params) != 1)
		return -1;
	if ((enc ? EVP_EncryptInit_ex(ectx, EVP_aes_256_cbc(), NULL, k->aes, iv)
	         : EVP_DecryptInit_ex(ectx, EVP_aes_256_cbc(), NULL, k->aes, iv)) != 1)
		return -1;
	return enc ? 1 : old ? 2 : 1;
}

/* A new ticket: the host it is issued for goes inside it. */
static int
icpt_ticket_gen_cb(SSL *ssl, void *arg)
{
	struct icpt_conn *c = SSL_get_app_data(ssl);
	SSL_SESSION *s = SSL_get0_session(ssl);

	(void)arg;
	if (c == NULL || s == NULL)
		return 0;
	return SSL_SESSION_set1_ticket_appdata(s, c->host, strlen(c->host));
}

/* A ticket presented: resumed only for the host it was issued for. */
static SSL_TICKET_RETURN
icpt_ticket_dec_cb(SSL *ssl, SSL_SESSION *ss, const unsigned char *keyname, size_t keyname_len,
    SSL_TICKET_STATUS status, void *arg)
{
	struct icpt_conn *c = SSL_get_app_data(ssl);
	void *data = NULL;
	size_t len = 0;

	(void)keyname;
	(void)keyname_len;
	(void)arg;
	if (status != SSL_TICKET_SUCCESS && status != SSL_TICKET_SUCCESS_RENEW)
		return status == SSL_TICKET_EMPTY || status == SSL_TICKET_NO_DECRYPT
		           ? SSL_TICKET_RETURN_IGNORE_RENEW
		           : SSL_TICKET_RETURN_IGNORE;
	if (c == NULL)
		return SSL_TICKET_RETURN_IGNORE;
	if (ss == NULL || SSL_SESSION_get0_ticket_appdata(ss, &data, &len) != 1 ||
	    len != strlen(c->host) || memcmp(data, c->host, len) != 0) {
		icpt_count(c->ic, INTERCEPT_M_TICKET_REFUSED, 1);
		return SSL_TICKET_RETURN_IGNORE_RENEW;
	}
	icpt_count(c->ic, INTERCEPT_M_RESUMED, 1);
	/*
	 * Always a fresh ticket: clients use a TLS 1.3 ticket once (RFC 8446
	 * C.4, OpenSSL's own client), so without one every other connection
	 * was a full handshake (wrk: 288 of 576 resumed, 1,064 of 1,065 now).
	 */
	return SSL_TICKET_RETURN_USE_RENEW;
}

int
icpt_tickets_setup(struct intercept *ic)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (icpt_tickets_init(&ic->tickets, ICPT_TICKET_ROTATE_S, ts.tv_sec) != 0)
		return -1;
	SSL_CTX_set_app_data(ic->srv_ctx, ic);
	/* Stateless tickets only: no server-side cache; one ticket per handshake. */
	SSL_CTX_set_session_cache_mode(ic->srv_ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_clear_options(ic->srv_ctx, SSL_OP_NO_TICKET);
	SSL_CTX_set_num_tickets(ic->srv_ctx, 1);
	SSL_CTX_set_timeout(ic->srv_ctx, 2 * ICPT_TICKET_ROTATE_S);
	/* Never 0-RTT: early data could be replayed, credential and all. */
	SSL_CTX_set_max_early_data(ic->srv_ctx, 0);
	SSL_CTX_set_recv_max_early_data(ic->srv_ctx, 0);
	if (SSL_CTX_set_tlsext_ticket_key_evp_cb(ic->srv_ctx, icpt_ticket_key_cb) != 1 ||
	    SSL_CTX_set_session_ticket_cb(
	        ic->srv_ctx, icpt_ticket_gen_cb, icpt_ticket_dec_cb, NULL) != 1)
		return -1;
	return 0;
}

void
intercept_tickets_reset(struct intercept *ic)
{
	struct icpt_tickets next;
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	/* No fresh key (no randomness): the old ones stay rather than none. */
	if (icpt_tickets_init(&next, ic->tickets.rotate_s, ts.tv_sec) != 0)
		return;
	icpt_tickets_wipe(&ic->tickets);
	ic->tickets = next;
	icpt_tickets_wipe(&next);
}
