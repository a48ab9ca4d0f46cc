/*
 * dnswire: DNS wire format for the DNS proxy. Parses client queries and
 * upstream answers, builds error replies, fresh upstream queries and the
 * filtered reply the client gets.
 *
 * Runs in the unprivileged worker on untrusted bytes. It must never read
 * outside (pkt, len), never follow a compression pointer forward or in a
 * loop, never allocate, and never return a name that is not canonical.
 */
#include <sys/socket.h>

#include <string.h>

#include "egressd/dns/dnswire.h"
#include "policy/name.h"

#define DNSWIRE_FLAG_QR 0x80
#define DNSWIRE_FLAG_AA 0x04
#define DNSWIRE_FLAG_TC 0x02
#define DNSWIRE_FLAG_RD 0x01
#define DNSWIRE_FLAG_RA 0x80
#define DNSWIRE_FLAG_CD 0x10
#define DNSWIRE_TYPE_DNAME 39
#define DNSWIRE_RR_FIXED 10 /* type, class, ttl, rdlength */
#define DNSWIRE_OPT_LEN 11
#define DNSWIRE_MIN_UDP 512

/* Bounds-checked read cursor over one message. */
struct dnswire_cur {
	const uint8_t *p;
	size_t len;
	size_t off;
};

/* Bounds-checked write cursor; err latches on overflow. */
struct dnswire_out {
	uint8_t *p;
	size_t cap;
	size_t off;
	bool err;
};

/* One answer RR located by the first pass. */
struct dnswire_rr {
	size_t name_off;
	uint16_t type;
	uint16_t rclass;
	uint32_t ttl;
	size_t rdata_off;
	uint16_t rdlen;
};

static bool
cur_u16(struct dnswire_cur *c, uint16_t *v)
{
	if (c->off > c->len || c->len - c->off < 2)
		return false;
	*v = (uint16_t)(c->p[c->off] << 8 | c->p[c->off + 1]);
	c->off += 2;
	return true;
}

static bool
cur_u32(struct dnswire_cur *c, uint32_t *v)
{
	if (c->off > c->len || c->len - c->off < 4)
		return false;
	*v = (uint32_t)c->p[c->off] << 24 | (uint32_t)c->p[c->off + 1] << 16 |
	     (uint32_t)c->p[c->off + 2] << 8 | c->p[c->off + 3];
	c->off += 4;
	return true;
}

static bool
cur_skip(struct dnswire_cur *c, size_t n)
{
	if (c->off > c->len || c->len - c->off < n)
		return false;
	c->off += n;
	return true;
}

static void
out_bytes(struct dnswire_out *o, const void *b, size_t n)
{
	if (o->err || o->cap - o->off < n) {
		o->err = true;
		return;
	}
	memcpy(o->p + o->off, b, n);
	o->off += n;
}

static void
out_u8(struct dnswire_out *o, uint8_t v)
{
	out_bytes(o, &v, 1);
}

static void
out_u16(struct dnswire_out *o, uint16_t v)
{
	uint8_t b[2] = {(uint8_t)(v >> 8), (uint8_t)v};
	out_bytes(o, b, 2);
}

static void
out_u32(struct dnswire_out *o, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
	out_bytes(o, b, 4);
}

static void
out_put16_at(struct dnswire_out *o, size_t at, uint16_t v)
{
	if (o->err || at + 2 > o->off)
		return;
	o->p[at] = (uint8_t)(v >> 8);
	o->p[at + 1] = (uint8_t)v;
}

static uint8_t
lower(uint8_t ch)
{
	return (ch >= 'A' && ch <= 'Z') ? (uint8_t)(ch + ('a' - 'A')) : ch;
}

/*
 * Read the name at c->off into wire (lowercased, uncompressed, at most
 * DNSWIRE_MAX_NAME_WIRE bytes) and advance c past it. Each pointer must
 * point before the start of the segment that holds it, so jump targets
 * strictly decrease: no loop is possible, and hops are bounded anyway.
 */
static enum dnswire_status
dnswire_read_name(struct dnswire_cur *c, bool allow_ptr, uint8_t *wire, size_t *wire_len)
{
	size_t pos = c->off, seg_start = c->off, end = 0, wl = 0;
	bool jumped = false;
	int hops = 0;

	for (;;) {
		uint8_t l;

		if (pos >= c->len)
			return DNSWIRE_INVALID;
		l = c->p[pos];
		if ((l & 0xc0) == 0xc0) {
			size_t target;

			if (!allow_ptr || pos + 1 >= c->len)
				return DNSWIRE_INVALID;
			target = (size_t)(l & 0x3f) << 8 | c->p[pos + 1];
			/* Forward or self pointers could loop: refuse. */
			if (target >= seg_start || ++hops > DNSWIRE_MAX_PTR_HOPS)
				return DNSWIRE_INVALID;
			if (!jumped)
				end = pos + 2;
			jumped = true;
			pos = seg_start = target;
			continue;
		}
		if (l & 0xc0) /* 0x40 / 0x80: obsolete extended label types */
			return DNSWIRE_INVALID;
		if (l == 0) {
			if (wl + 1 > DNSWIRE_MAX_NAME_WIRE)
				return DNSWIRE_INVALID;
			wire[wl++] = 0;
			if (!jumped)
				end = pos + 1;
			break;
		}
		if (c->len - pos - 1 < l)
			return DNSWIRE_INVALID;
		/* Room for this label and the final root label. */
		if (wl + 1 + l + 1 > DNSWIRE_MAX_NAME_WIRE)
			return DNSWIRE_INVALID;
		wire[wl++] = l;
		for (size_t i = 0; i < l; i++)
			wire[wl++] = lower(c->p[pos + 1 + i]);
		pos += 1 + (size_t)l;
	}
	c->off = end;
	*wire_len = wl;
	return DNSWIRE_OK;
}

/*
 * Wire (lowercased) to canonical text, through the one canonicaliser
 * (policy_name_canon) that SNI, Host, policy and bindings use too: a name
 * it would change or refuse (underscore, a dot or NUL inside a label,
 * non-LDH bytes, a numeric last label) is not a name we answer for.
 */
static bool
wire_to_text(const uint8_t *wire, size_t wl, char *text, size_t *text_len)
{
	char raw[DNSWIRE_MAX_NAME + 1];
	size_t i = 0, t = 0, clen;

	while (i < wl && wire[i] != 0) {
		uint8_t l = wire[i++];

		if (t > 0)
			raw[t++] = '.';
		if (t + l > DNSWIRE_MAX_NAME)
			return false;
		for (uint8_t k = 0; k < l; k++, i++) {
			/* A dot inside a label would read as a label boundary. */
			if (wire[i] == '.')
				return false;
			raw[t++] = (char)wire[i];
		}
	}
	if (t == 0)
		return false;
	if (policy_name_canon((const uint8_t *)raw, t, 0, text, &clen) != POLICY_NAME_OK ||
	    clen != t || memcmp(text, raw, t) != 0)
		return false;
	*text_len = clen;
	return true;
}

static bool
wire_eq(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
	return al == bl && memcmp(a, b, al) == 0;
}

/* Split a TCP stream: a 2-byte length then the message (a view into buf). */
enum dnswire_status
dnswire_tcp_frame(
    const uint8_t *buf, size_t len, const uint8_t **msg, size_t *msg_len, size_t *consumed)
{
	size_t n;

	*consumed = 0;
	if (len < 2)
		return DNSWIRE_NEED_MORE;
	n = (size_t)buf[0] << 8 | buf[1];
	if (n < DNSWIRE_HDR_LEN)
		return DNSWIRE_INVALID;
	if (len - 2 < n)
		return DNSWIRE_NEED_MORE;
	*msg = buf + 2;
	*msg_len = n;
	*consumed = n + 2;
	return DNSWIRE_OK;
}

/* Parse a complete client query (UDP datagram or TCP frame body). */
enum dnswire_status
dnswire_parse_query(const uint8_t *pkt, size_t len, struct dnswire_query *q, size_t *consumed)
{
	struct dnswire_cur c = {pkt, len, 0};
	uint16_t flags, qd, an, ns, ar;
	size_t qstart;
	enum dnswire_status st;
	uint8_t rrname[DNSWIRE_MAX_NAME_WIRE];

	memset(q, 0, sizeof(*q));
	*consumed = 0;
	if (len > DNSWIRE_MAX_MSG)
		return DNSWIRE_TOO_LARGE;
	if (!cur_u16(&c, &q->id) || !cur_u16(&c, &flags) || !cur_u16(&c, &qd) ||
	    !cur_u16(&c, &an) || !cur_u16(&c, &ns) || !cur_u16(&c, &ar))
		return DNSWIRE_INVALID;
	/* A response sent to the proxy is dropped, never answered (no loops). */
	if (flags & (DNSWIRE_FLAG_QR << 8))
		return DNSWIRE_INVALID;
	q->hdr_valid = true;
	q->opcode = (flags >> 11) & 0x0f;
	q->rd = (flags & (DNSWIRE_FLAG_RD << 8)) != 0;
	q->cd = (flags & DNSWIRE_FLAG_CD) != 0;
	q->udp_size = DNSWIRE_MIN_UDP;
	if (qd != 1)
		return DNSWIRE_INVALID;

	/* Queries have no reason to compress the question: refuse pointers. */
	qstart = c.off;
	st = dnswire_read_name(&c, false, q->qname_wire, &q->qname_wire_len);
	if (st != DNSWIRE_OK)
		return st;
	if (!cur_u16(&c, &q->qtype) || !cur_u16(&c, &q->qclass))
		return DNSWIRE_INVALID;
	if (!wire_to_text(q->qname_wire, q->qname_wire_len, q->name, &q->name_len))
		return DNSWIRE_INVALID;
	q->question_len = c.off - qstart;
	memcpy(q->question, pkt + qstart, q->question_len);
	q->has_question = true;

	/* Walk the other sections only to find (at most one) OPT RR. */
	for (uint32_t i = 0; i < (uint32_t)an + ns + ar; i++) {
		uint16_t type, rclass, rdlen;
		uint32_t ttl;
		size_t nl;

		st = dnswire_read_name(&c, false, rrname, &nl);
		if (st != DNSWIRE_OK)
			return st;
		if (!cur_u16(&c, &type) || !cur_u16(&c, &rclass) || !cur_u32(&c, &ttl) ||
		    !cur_u16(&c, &rdlen) || !cur_skip(&c, rdlen))
			return DNSWIRE_INVALID;
		if (type != DNSWIRE_TYPE_OPT)
			continue;
		/* RFC 6891 6.1.1: OPT only in additional, root owner, once. */
		if (i < (uint32_t)an + ns || nl != 1 || q->has_opt)
			return DNSWIRE_INVALID;
		q->has_opt = true;
		q->udp_size = rclass < DNSWIRE_MIN_UDP ? DNSWIRE_MIN_UDP : rclass;
	}
	if (c.off != len)
		return DNSWIRE_INVALID;
	*consumed = c.off;
	return DNSWIRE_OK;
}

static void
out_opt(struct dnswire_out *o)
{
	out_u8(o, 0);
	out_u16(o, DNSWIRE_TYPE_OPT);
	out_u16(o, DNSWIRE_EDNS_UDP_SIZE);
	out_u32(o, 0);
	out_u16(o, 0);
}

/* Header + question of a reply to q; counts fixed up later by the caller. */
static void
out_reply_head(struct dnswire_out *o, const struct dnswire_query *q, uint8_t fl1, uint8_t rcode)
{
	out_u16(o, q->id);
	out_u8(o, (uint8_t)(DNSWIRE_FLAG_QR | (q->opcode & 0x0f) << 3 |
	                    (q->rd ? DNSWIRE_FLAG_RD : 0) | fl1));
	out_u8(o, rcode & 0x0f);
	out_u16(o, q->has_question ? 1 : 0);
	out_u16(o, 0);
	out_u16(o, 0);
	out_u16(o, q->has_opt ? 1 : 0);
	if (q->has_question)
		out_bytes(o, q->question, q->question_len);
}

/* Build an answerless reply with rcode, echoing id/opcode/RD/question of q. */
int
dnswire_build_error(
    const struct dnswire_query *q, uint8_t rcode, uint8_t *out, size_t cap, size_t *out_len)
{
	struct dnswire_out o = {out, cap, 0, false};

	*out_len = 0;
	if (!q->hdr_valid)
		return -1;
	out_reply_head(&o, q, 0, rcode);
	if (q->has_opt)
		out_opt(&o);
	if (o.err)
		return -1;
	*out_len = o.off;
	return 0;
}

/* Build a fresh upstream query: RD, one question, our OPT RR (no options). */
int
dnswire_build_query(uint16_t id, const char *name, uint16_t qtype, uint16_t qclass, uint8_t *out,
    size_t cap, size_t *out_len)
{
	struct dnswire_out o = {out, cap, 0, false};
	size_t n = strlen(name), wl = 0, clen;
	const char *p = name;
	char canon[POLICY_NAME_MAX + 1];

	*out_len = 0;
	/* Only a canonical name is sent upstream (the one canonicaliser decides). */
	if (n > DNSWIRE_MAX_NAME ||
	    policy_name_canon((const uint8_t *)name, n, 0, canon, &clen) != POLICY_NAME_OK ||
	    clen != n || memcmp(canon, name, n) != 0)
		return -1;
	out_u16(&o, id);
	out_u16(&o, DNSWIRE_FLAG_RD << 8);
	out_u16(&o, 1);
	out_u16(&o, 0);
	out_u16(&o, 0);
	out_u16(&o, 1);
	while (n > 0 && *p != '\0') {
		const char *dot = strchr(p, '.');
		size_t l = dot ? (size_t)(dot - p) : strlen(p);

		if (l == 0 || l > DNSWIRE_MAX_LABEL)
			return -1;
		out_u8(&o, (uint8_t)l);
		for (size_t i = 0; i < l; i++)
			out_u8(&o, lower((uint8_t)p[i]));
		wl += l + 1;
		p += l;
		if (*p == '.') {
			p++;
			if (*p == '\0') /* canonical names have no trailing dot */
				return -1;
		}
	}
	if (wl + 1 > DNSWIRE_MAX_NAME_WIRE)
		return -1;
	out_u8(&o, 0);
	out_u16(&o, qtype);
	out_u16(&o, qclass);
	out_opt(&o);
	if (o.err)
		return -1;
	*out_len = o.off;
	return 0;
}

/* Write name as wire; the asked name becomes a pointer to the question. */
static void
out_name(struct dnswire_out *o, const struct dnswire_query *q, const uint8_t *w, size_t wl)
{
	if (wire_eq(w, wl, q->qname_wire, q->qname_wire_len)) {
		out_u16(o, 0xc000 | DNSWIRE_HDR_LEN);
		return;
	}
	out_bytes(o, w, wl);
}

/* Copy an rdata name (decompressed); it must end inside rdata. */
static enum dnswire_status
copy_rdata_name(struct dnswire_cur *c, size_t rd_end, struct dnswire_out *o)
{
	uint8_t w[DNSWIRE_MAX_NAME_WIRE];
	size_t wl;
	enum dnswire_status st = dnswire_read_name(c, true, w, &wl);

	if (st != DNSWIRE_OK)
		return st;
	if (c->off > rd_end)
		return DNSWIRE_INVALID;
	out_bytes(o, w, wl);
	return DNSWIRE_OK;
}

/*
 * Copy rdata, decompressing the names of the types that may compress them
 * (RFC 3597 section 4): offsets of the upstream packet mean nothing in ours.
 */
static enum dnswire_status
copy_rdata(const uint8_t *pkt, size_t len, const struct dnswire_rr *rr, struct dnswire_out *o)
{
	struct dnswire_cur c = {pkt, len, rr->rdata_off};
	size_t rd_end = rr->rdata_off + rr->rdlen, fixed = 0, names = 1, tail = 0;
	size_t len_at;
	enum dnswire_status st;

	switch (rr->type) {
	case DNSWIRE_TYPE_CNAME:
	case DNSWIRE_TYPE_NS:
	case DNSWIRE_TYPE_PTR:
	case DNSWIRE_TYPE_DNAME:
		break;
	case DNSWIRE_TYPE_MX:
		fixed = 2;
		break;
	case DNSWIRE_TYPE_SRV:
		fixed = 6;
		break;
	case DNSWIRE_TYPE_SOA:
		names = 2;
		tail = 20;
		break;
	default:
		out_u16(o, rr->rdlen);
		out_bytes(o, pkt + rr->rdata_off, rr->rdlen);
		return DNSWIRE_OK;
	}
	len_at = o->off;
	out_u16(o, 0);
	if (rr->rdlen < fixed)
		return DNSWIRE_INVALID;
	out_bytes(o, pkt + c.off, fixed);
	c.off += fixed;
	for (size_t i = 0; i < names; i++)
		if ((st = copy_rdata_name(&c, rd_end, o)) != DNSWIRE_OK)
			return st;
	if (rd_end - c.off != tail)
		return DNSWIRE_INVALID;
	out_bytes(o, pkt + c.off, tail);
	if (o->off - len_at - 2 > UINT16_MAX)
		return DNSWIRE_TOO_LARGE;
	out_put16_at(o, len_at, (uint16_t)(o->off - len_at - 2));
	return DNSWIRE_OK;
}

static int
chain_find(uint8_t chain[][DNSWIRE_MAX_NAME_WIRE], const size_t *chain_len, size_t n,
    const uint8_t *w, size_t wl)
{
	for (size_t i = 0; i < n; i++)
		if (wire_eq(chain[i], chain_len[i], w, wl))
			return (int)i;
	return -1;
}

/* Header + question only, TC set: the client retries over TCP. */
static enum dnswire_status
write_truncated(const struct dnswire_query *q, uint8_t ra, uint8_t rcode, uint8_t *out, size_t cap,
    size_t *out_len, struct dnswire_answer *res)
{
	struct dnswire_out o = {out, cap, 0, false};

	out_reply_head(&o, q, DNSWIRE_FLAG_TC, rcode);
	if (q->has_opt)
		out_opt(&o);
	if (o.err)
		return DNSWIRE_TOO_LARGE;
	out[3] |= ra;
	*out_len = o.off;
	res->truncated = true;
	res->nremoved += res->naddrs;
	res->naddrs = 0;
	res->min_ttl = 0;
	return DNSWIRE_OK;
}

/* Parse the upstream reply and write the filtered reply for the client. */
enum dnswire_status
dnswire_filter_answer(const uint8_t *pkt, size_t len, uint16_t up_id, const struct dnswire_query *q,
    dnswire_addr_ok_cb ok_cb, void *arg, size_t max_len, uint8_t *out, size_t cap, size_t *out_len,
    struct dnswire_answer *res)
{
	struct dnswire_cur c = {pkt, len, 0};
	struct dnswire_out o = {out, cap, 0, false};
	struct dnswire_rr rrs[DNSWIRE_MAX_RRS];
	uint8_t chain[DNSWIRE_MAX_CNAME_CHAIN + 1][DNSWIRE_MAX_NAME_WIRE];
	size_t chain_len[DNSWIRE_MAX_CNAME_CHAIN + 1], nchain = 1;
	uint8_t w[DNSWIRE_MAX_NAME_WIRE];
	uint16_t id, flags, qd, an, ns, ar, qtype, qclass, kept = 0;
	size_t wl;
	uint8_t ra, rcode;
	enum dnswire_status st;
	bool grew;

	memset(res, 0, sizeof(*res));
	*out_len = 0;
	if (!q->has_question || ok_cb == NULL)
		return DNSWIRE_INVALID;
	if (len > DNSWIRE_MAX_MSG)
		return DNSWIRE_TOO_LARGE;
	if (!cur_u16(&c, &id) || !cur_u16(&c, &flags) || !cur_u16(&c, &qd) || !cur_u16(&c, &an) ||
	    !cur_u16(&c, &ns) || !cur_u16(&c, &ar))
		return DNSWIRE_INVALID;
	/* Only the reply to the query we sent: id, QR, opcode and question. */
	if (id != up_id || !(flags & (DNSWIRE_FLAG_QR << 8)) || ((flags >> 11) & 0x0f) != 0 ||
	    qd != 1)
		return DNSWIRE_INVALID;
	if ((st = dnswire_read_name(&c, true, w, &wl)) != DNSWIRE_OK)
		return st;
	if (!cur_u16(&c, &qtype) || !cur_u16(&c, &qclass))
		return DNSWIRE_INVALID;
	if (!wire_eq(w, wl, q->qname_wire, q->qname_wire_len) || qtype != q->qtype ||
	    qclass != q->qclass)
		return DNSWIRE_INVALID;
	rcode = flags & 0x0f;
	ra = (uint8_t)(flags & DNSWIRE_FLAG_RA);
	res->rcode = rcode;
	if (flags & (DNSWIRE_FLAG_TC << 8))
		return write_truncated(q, ra, rcode, out, cap, out_len, res);
	if (an > DNSWIRE_MAX_RRS)
		return DNSWIRE_TOO_LARGE;

	/* Pass 1: locate every answer RR. */
	for (size_t i = 0; i < an; i++) {
		struct dnswire_rr *rr = &rrs[i];

		rr->name_off = c.off;
		if ((st = dnswire_read_name(&c, true, w, &wl)) != DNSWIRE_OK)
			return st;
		if (!cur_u16(&c, &rr->type) || !cur_u16(&c, &rr->rclass) ||
		    !cur_u32(&c, &rr->ttl) || !cur_u16(&c, &rr->rdlen))
			return DNSWIRE_INVALID;
		rr->rdata_off = c.off;
		if (!cur_skip(&c, rr->rdlen))
			return DNSWIRE_INVALID;
		if (rr->ttl & 0x80000000u) /* RFC 2181 8: treat as zero */
			rr->ttl = 0;
	}

	/*
	 * Follow the CNAME chain from the asked name. A loop, or a chain of
	 * more than DNSWIRE_MAX_CNAME_CHAIN links, refuses the whole answer
	 * (the proxy answers SERVFAIL): cutting it short would hand the
	 * client a partial chain, and each link costs a pass over the RRs.
	 */
	memcpy(chain[0], q->qname_wire, q->qname_wire_len);
	chain_len[0] = q->qname_wire_len;
	do {
		grew = false;
		for (size_t i = 0; i < an; i++) {
			struct dnswire_cur rc = {pkt, len, rrs[i].name_off};

			if (rrs[i].type != DNSWIRE_TYPE_CNAME || rrs[i].rclass != DNSWIRE_CLASS_IN)
				continue;
			if (dnswire_read_name(&rc, true, w, &wl) != DNSWIRE_OK)
				return DNSWIRE_INVALID;
			if (!wire_eq(w, wl, chain[nchain - 1], chain_len[nchain - 1]))
				continue;
			rc.off = rrs[i].rdata_off;
			if (dnswire_read_name(&rc, true, w, &wl) != DNSWIRE_OK ||
			    rc.off != rrs[i].rdata_off + rrs[i].rdlen)
				return DNSWIRE_INVALID;
			if (chain_find(chain, chain_len, nchain, w, wl) >= 0)
				return DNSWIRE_INVALID; /* CNAME loop */
			if (nchain > DNSWIRE_MAX_CNAME_CHAIN)
				return DNSWIRE_TOO_LARGE; /* one link past the limit */
			memcpy(chain[nchain], w, wl);
			chain_len[nchain++] = wl;
			grew = true;
			break;
		}
	} while (grew);

	/* Pass 2: write the reply with the kept answer RRs. */
	out_reply_head(&o, q, (uint8_t)((flags >> 8) & DNSWIRE_FLAG_AA), rcode);
	if (!o.err)
		out[3] |= ra;
	for (size_t i = 0; i < an; i++) {
		const struct dnswire_rr *rr = &rrs[i];
		struct dnswire_cur rc = {pkt, len, rr->name_off};
		bool is_addr = rr->type == DNSWIRE_TYPE_A || rr->type == DNSWIRE_TYPE_AAAA;

		if (dnswire_read_name(&rc, true, w, &wl) != DNSWIRE_OK)
			return DNSWIRE_INVALID;
		if (is_addr && rr->rclass == DNSWIRE_CLASS_IN) {
			int fam = rr->type == DNSWIRE_TYPE_A ? AF_INET : AF_INET6;
			size_t alen = fam == AF_INET ? 4 : 16;
			struct dnswire_addr *a;

			if (rr->rdlen != alen)
				return DNSWIRE_INVALID;
			/* Off-chain, refused or beyond the limit: not sent, not learned. */
			if (chain_find(chain, chain_len, nchain, w, wl) < 0 ||
			    res->naddrs >= DNSWIRE_MAX_ADDRS ||
			    !ok_cb(fam, pkt + rr->rdata_off, arg)) {
				res->nremoved++;
				continue;
			}
			a = &res->addrs[res->naddrs++];
			a->family = fam;
			memset(a->addr, 0, sizeof(a->addr));
			memcpy(a->addr, pkt + rr->rdata_off, alen);
			a->ttl = rr->ttl;
			if (res->naddrs == 1 || rr->ttl < res->min_ttl)
				res->min_ttl = rr->ttl;
		} else if (is_addr || chain_find(chain, chain_len, nchain, w, wl) < 0) {
			if (is_addr)
				res->nremoved++;
			continue;
		}
		out_name(&o, q, w, wl);
		out_u16(&o, rr->type);
		out_u16(&o, rr->rclass);
		out_u32(&o, rr->ttl);
		if ((st = copy_rdata(pkt, len, rr, &o)) != DNSWIRE_OK)
			return st;
		kept++;
	}
	if (q->has_opt)
		out_opt(&o);
	if (o.err || o.off > max_len) {
		memset(res->addrs, 0, sizeof(res->addrs));
		return write_truncated(q, ra, rcode, out, cap, out_len, res);
	}
	out_put16_at(&o, 6, kept);
	*out_len = o.off;
	return DNSWIRE_OK;
}

/* Printable name of a status (for logs and test messages). */
const char *
dnswire_status_str(enum dnswire_status st)
{
	switch (st) {
	case DNSWIRE_OK:
		return "ok";
	case DNSWIRE_NEED_MORE:
		return "need_more";
	case DNSWIRE_INVALID:
		return "invalid";
	case DNSWIRE_TOO_LARGE:
		return "too_large";
	}
	return "unknown";
}

const char *
dnswire_rcode_name(int rcode)
{
	static const char *const names[] = {"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP",
	    "REFUSED", "YXDOMAIN", "YXRRSET", "NXRRSET", "NOTAUTH", "NOTZONE"};

	return rcode >= 0 && (size_t)rcode < sizeof(names) / sizeof(names[0]) ? names[rcode]
	                                                                      : "other";
}
