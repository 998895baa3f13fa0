/* SPDX-License-Identifier: MIT */
/*
 * The trace body codec: a sealed struct al_trace to bytes and back (the
 * file around the body, its header and compression: alloclab.trace and
 * docs/traces.md).
 *
 * Layout. Every integer is an unsigned LEB128 varint (7 bits a byte, low
 * bits first, at most 10 bytes):
 *
 *   nthreads
 *   per thread:  parent + 1 (0: none), nops, start_ns, stream bytes
 *   per thread, in thread order: its stream, nops ops back to back
 *
 * One op:
 *   head   u8: kind (bits 0-3), NULL (4), MOVED (5), UNKNOWN (6), EXT (7)
 *   ext    u8, only when EXT: ZERO (0), DT (1), FULL (2); other bits 0
 *   seq delta    from the thread's previous op (from 0 for its first)
 *   time delta   ns from the thread's previous op (from start_ns)
 *   dt           only when DT: op.dt, when it is not min(delta, UINT32_MAX)
 *   size, aux, ref, id   the fields the kind has (all four when FULL)
 *
 * ref and id are coded against `last`, the id the thread created last (-1
 * before its first): 0 is AL_TRACE_NOID, else zigzag(x - last) + 1, and a
 * created id becomes the new `last`. Ids are dense in global sequence
 * order, so a thread's next id is `last` plus what other threads created
 * meanwhile, and most refs name a recent object: both are small numbers
 * whose byte patterns repeat, which is what the outer compressor feeds on.
 * FULL is the escape for an op that sets a field its kind does not have;
 * DT for a dt that does not follow from t_ns. AL_TF_CROSS and the thread's
 * parent-by-op are not stored: seal recomputes them.
 *
 * Invariants the decoder establishes before it allocates: the thread count
 * fits the bytes left (a header entry is at least 4 bytes), each thread's
 * op count fits its stream (an op is at least 3 bytes: head and the two
 * deltas), and the streams' lengths add up to exactly the body. Arrays are
 * then sized once per thread: 48 bytes an op, and seal's 20 an object (an
 * object per op at most), so memory stays within about 23 times the body.
 * Every read is bounds-checked against its stream's end; an error
 * names the body offset and what was being read, and the result is sealed
 * (al_trace_seal's checks) before it is returned.
 *
 * Cost: encode is one pass to size the streams and one to write them;
 * decode one pass and the seal. Single-threaded; no locks; never prints.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloclab/alloclab.h"
#include "alloclab/trace.h"

enum { F_SIZE = 1, F_AUX = 2, F_REF = 4, F_ID = 8, F_ALL = 15 };
enum { H_KIND = 0x0f, H_NULL = 0x10, H_MOVED = 0x20, H_UNKNOWN = 0x40, H_EXT = 0x80 };
enum { X_ZERO = 1, X_DT = 2, X_FULL = 4, X_ALL = 7 };

#define MIN_OP_BYTES	 3
#define MIN_THREAD_BYTES 4
#define FLAGS_DEFINED	 (AL_TF_NULL | AL_TF_MOVED | AL_TF_CROSS | AL_TF_UNKNOWN | AL_TF_ZERO)

/* The fields each kind carries (trace.h's enum comments). */
static const uint8_t kind_fields[AL_TK_NR] = {
	[AL_TK_MALLOC] = F_SIZE | F_ID,
	[AL_TK_CALLOC] = F_SIZE | F_AUX | F_ID,
	[AL_TK_REALLOC] = F_SIZE | F_AUX | F_REF | F_ID,
	[AL_TK_FREE] = F_REF,
	[AL_TK_POSIX_MEMALIGN] = F_SIZE | F_AUX | F_ID,
	[AL_TK_ALIGNED_ALLOC] = F_SIZE | F_AUX | F_ID,
	[AL_TK_MEMALIGN] = F_SIZE | F_AUX | F_ID,
	[AL_TK_VALLOC] = F_SIZE | F_AUX | F_ID,
	[AL_TK_PVALLOC] = F_SIZE | F_AUX | F_ID,
	[AL_TK_USABLE_SIZE] = F_SIZE | F_REF,
	[AL_TK_THREAD_START] = F_AUX,
	[AL_TK_THREAD_EXIT] = 0,
};

/* A thread's coding state: what the next op's deltas are taken from. */
struct tstate {
	uint64_t seq; /* the previous op's seq (0 before the first) */
	uint64_t t;   /* the previous op's t_ns (start_ns before the first) */
	int64_t last; /* the id the thread created last, -1 before the first */
};

static uint64_t zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static uint64_t sat32(uint64_t v)
{
	return v > UINT32_MAX ? UINT32_MAX : v;
}

/* ---- encoding ---- */

/* Output, or only a count of the bytes when p is NULL. */
struct wbuf {
	uint8_t *p;
	size_t len;
};

static void put_u8(struct wbuf *w, uint8_t v)
{
	if (w->p)
		w->p[w->len] = v;
	w->len++;
}

static void put_var(struct wbuf *w, uint64_t v)
{
	while (v >= 0x80) {
		put_u8(w, (uint8_t)(v | 0x80));
		v >>= 7;
	}
	put_u8(w, (uint8_t)v);
}

static void put_ident(struct wbuf *w, uint32_t id, int64_t last)
{
	put_var(w, id == AL_TRACE_NOID ? 0 : zigzag((int64_t)id - last) + 1);
}

/* Whether every field the kind does not carry holds its default. */
static bool plain_shape(const struct al_trace_op *op)
{
	uint8_t f = kind_fields[op->kind];

	return ((f & F_SIZE) || !op->size) && ((f & F_AUX) || !op->aux) &&
	       ((f & F_REF) || op->ref == AL_TRACE_NOID) && ((f & F_ID) || op->id == AL_TRACE_NOID);
}

static void put_op(struct wbuf *w, const struct al_trace_op *op, uint64_t seq, uint64_t t_ns,
		   struct tstate *s)
{
	uint64_t d = t_ns - s->t;
	uint8_t fields = kind_fields[op->kind], ext = 0;
	uint8_t head = op->kind;

	head |= (op->flags & AL_TF_NULL ? H_NULL : 0) | (op->flags & AL_TF_MOVED ? H_MOVED : 0) |
		(op->flags & AL_TF_UNKNOWN ? H_UNKNOWN : 0);
	ext |= (op->flags & AL_TF_ZERO ? X_ZERO : 0) | (op->dt != sat32(d) ? X_DT : 0);
	if (!plain_shape(op)) {
		ext |= X_FULL;
		fields = F_ALL;
	}
	put_u8(w, ext ? head | H_EXT : head);
	if (ext)
		put_u8(w, ext);
	put_var(w, seq - s->seq);
	put_var(w, d);
	if (ext & X_DT)
		put_var(w, op->dt);
	if (fields & F_SIZE)
		put_var(w, op->size);
	if (fields & F_AUX)
		put_var(w, op->aux);
	if (fields & F_REF)
		put_ident(w, op->ref, s->last);
	if (fields & F_ID) {
		put_ident(w, op->id, s->last);
		if (op->id != AL_TRACE_NOID)
			s->last = op->id;
	}
	s->seq = seq;
	s->t = t_ns;
}

/* The start time stored for a thread: its first op's time less that op's
 * dt, so the first delta reproduces the dt (when it can). */
static uint64_t thread_start(const struct al_trace_thread *th)
{
	uint64_t dt0;

	if (!th->nops)
		return 0;
	dt0 = th->ops[0].dt;
	return th->t_ns[0] >= dt0 ? th->t_ns[0] - dt0 : 0;
}

/* Write (or with p NULL, size) one thread's stream; returns its length. */
static size_t put_stream(const struct al_trace_thread *th, uint8_t *p)
{
	struct wbuf w = { p, 0 };
	struct tstate s = { 0, thread_start(th), -1 };

	for (uint64_t i = 0; i < th->nops; i++)
		put_op(&w, &th->ops[i], th->seq[i], th->t_ns[i], &s);
	return w.len;
}

static void put_header(struct wbuf *w, const struct al_trace *t, const uint64_t *lens)
{
	put_var(w, t->nthreads);
	for (unsigned k = 0; k < t->nthreads; k++) {
		const struct al_trace_thread *th = &t->threads[k];

		put_var(w, th->parent == AL_TRACE_NOID ? 0 : (uint64_t)th->parent + 1);
		put_var(w, th->nops);
		put_var(w, thread_start(th));
		put_var(w, lens[k]);
	}
}

static int check_flags(const struct al_trace *t, char *err, size_t errlen)
{
	for (unsigned k = 0; k < t->nthreads; k++)
		for (uint64_t i = 0; i < t->threads[k].nops; i++) {
			unsigned f = t->threads[k].ops[i].flags;

			if (f & ~FLAGS_DEFINED) {
				snprintf(err, errlen,
					 "thread %u, op %llu: flags 0x%x have bits no trace format "
					 "defines",
					 k, (unsigned long long)i, f);
				return -EINVAL;
			}
		}
	return 0;
}

int al_trace_encode(const struct al_trace *t, void *buf, size_t cap, size_t *len, char *err,
		    size_t errlen)
{
	struct wbuf w = { NULL, 0 };
	uint64_t *lens;
	int ret;

	if (!err)
		errlen = 0;
	if (!t || !len || !t->sealed) {
		snprintf(err, errlen, "only a sealed trace can be encoded");
		return -EINVAL;
	}
	ret = check_flags(t, err, errlen);
	if (ret)
		return ret;
	lens = al_meta_alloc(sizeof(*lens) * t->nthreads);
	if (!lens)
		return -ENOMEM;
	for (unsigned k = 0; k < t->nthreads; k++)
		lens[k] = put_stream(&t->threads[k], NULL);
	put_header(&w, t, lens);
	for (unsigned k = 0; k < t->nthreads; k++)
		w.len += lens[k];
	*len = w.len;
	if (buf && cap < w.len) {
		ret = -ENOSPC;
	} else if (buf) {
		w = (struct wbuf){ buf, 0 };
		put_header(&w, t, lens);
		for (unsigned k = 0; k < t->nthreads; k++)
			w.len += put_stream(&t->threads[k], w.p + w.len);
	}
	al_meta_free(lens, sizeof(*lens) * t->nthreads);
	return ret;
}

/* ---- decoding ---- */

/* Input: [pos, end) of the body; `where` and `what` name what is being
 * read, for the error. */
struct rbuf {
	const uint8_t *p;
	size_t pos, end;
	char where[48];
	const char *what;
	char *err;
	size_t errlen;
};

__attribute__((format(printf, 3, 4))) static int fail(struct rbuf *r, size_t off, const char *fmt,
						      ...)
{
	va_list ap;
	int n = snprintf(r->err, r->errlen, "body offset %zu: ", off);

	if (n >= 0 && (size_t)n < r->errlen) {
		va_start(ap, fmt);
		vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static int get_u8(struct rbuf *r, uint8_t *v)
{
	if (r->pos >= r->end)
		return fail(r, r->pos, "%s ends inside %s", r->where, r->what);
	*v = r->p[r->pos++];
	return 0;
}

static int get_var(struct rbuf *r, uint64_t *v)
{
	size_t at = r->pos;
	uint64_t x = 0;
	uint8_t b = 0;

	for (unsigned shift = 0;; shift += 7) {
		if (get_u8(r, &b))
			return -EINVAL;
		if (shift == 63 && b > 1)
			return fail(r, at, "a varint longer than 64 bits in %s", r->where);
		x |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			break;
	}
	*v = x;
	return 0;
}

static int get_ident(struct rbuf *r, int64_t last, uint32_t *out, const char *name)
{
	size_t at = r->pos;
	int64_t d, id;
	uint64_t v;

	if (get_var(r, &v))
		return -EINVAL;
	if (!v) {
		*out = AL_TRACE_NOID;
		return 0;
	}
	d = unzigzag(v - 1);
	id = d > -(int64_t)AL_TRACE_NOID && d < (int64_t)AL_TRACE_NOID ? last + d : -1;
	if (id < 0 || id >= (int64_t)AL_TRACE_NOID)
		return fail(
			r, at,
			"%s: %s %lld (delta %lld from the thread's last id %lld) is outside 0..%u",
			r->where, name, (long long)id, (long long)d, (long long)last,
			AL_TRACE_NOID - 1);
	*out = (uint32_t)id;
	return 0;
}

/* The op's head and extension byte: kind, flags, and which fields follow. */
static int get_head(struct rbuf *r, struct al_trace_op *op, uint8_t *ext)
{
	size_t at = r->pos;
	uint8_t head = 0;

	*ext = 0;
	if (get_u8(r, &head))
		return -EINVAL;
	if ((head & H_KIND) >= AL_TK_NR)
		return fail(r, at, "%s: op kind %u; kinds are 0..%d", r->where, head & H_KIND,
			    AL_TK_NR - 1);
	if ((head & H_EXT) && get_u8(r, ext))
		return -EINVAL;
	if (*ext & ~X_ALL)
		return fail(r, at + 1, "%s: op extension bits 0x%x; defined are 0x%x", r->where,
			    *ext, X_ALL);
	memset(op, 0, sizeof(*op));
	op->id = op->ref = AL_TRACE_NOID;
	op->kind = head & H_KIND;
	op->flags = (head & H_NULL ? AL_TF_NULL : 0) | (head & H_MOVED ? AL_TF_MOVED : 0) |
		    (head & H_UNKNOWN ? AL_TF_UNKNOWN : 0) | (*ext & X_ZERO ? AL_TF_ZERO : 0);
	return 0;
}

/* The op's seq and time (deltas from the previous op) and its dt. */
static int get_times(struct rbuf *r, struct al_trace_op *op, uint8_t ext, struct tstate *s)
{
	size_t at = r->pos;
	uint64_t dseq, d, dt;

	if (get_var(r, &dseq) || get_var(r, &d))
		return -EINVAL;
	if (dseq > UINT64_MAX - s->seq || d > UINT64_MAX - s->t)
		return fail(r, at, "%s: op seq or time past 2^64", r->where);
	dt = sat32(d);
	if (ext & X_DT) {
		at = r->pos;
		if (get_var(r, &dt))
			return -EINVAL;
		if (dt > UINT32_MAX)
			return fail(r, at, "%s: op dt %llu is past 2^32", r->where,
				    (unsigned long long)dt);
	}
	op->dt = (uint32_t)dt;
	s->seq += dseq;
	s->t += d;
	return 0;
}

static int get_op(struct rbuf *r, struct al_trace_op *op, struct tstate *s)
{
	uint8_t ext, fields;

	if (get_head(r, op, &ext) || get_times(r, op, ext, s))
		return -EINVAL;
	fields = ext & X_FULL ? F_ALL : kind_fields[op->kind];
	if ((fields & F_SIZE) && get_var(r, &op->size))
		return -EINVAL;
	if ((fields & F_AUX) && get_var(r, &op->aux))
		return -EINVAL;
	if ((fields & F_REF) && get_ident(r, s->last, &op->ref, "ref"))
		return -EINVAL;
	if ((fields & F_ID) && get_ident(r, s->last, &op->id, "id"))
		return -EINVAL;
	if (op->id != AL_TRACE_NOID)
		s->last = op->id;
	return 0;
}

/* One thread's header entry. */
struct thdr {
	uint64_t parent, nops, start, bytes;
};

static int get_thdr(struct rbuf *r, unsigned k, unsigned nthreads, struct thdr *h)
{
	size_t at = r->pos;

	snprintf(r->where, sizeof(r->where), "the body header");
	r->what = "a thread's entry";
	if (get_var(r, &h->parent) || get_var(r, &h->nops) || get_var(r, &h->start) ||
	    get_var(r, &h->bytes))
		return -EINVAL;
	if (h->parent > nthreads)
		return fail(r, at, "thread %u's parent is thread %llu; threads are 0..%u", k,
			    (unsigned long long)h->parent - 1, nthreads - 1);
	if (h->bytes / MIN_OP_BYTES < h->nops)
		return fail(r, at, "thread %u's %llu ops cannot fit in its %llu-byte stream", k,
			    (unsigned long long)h->nops, (unsigned long long)h->bytes);
	return 0;
}

/* Check every header entry, then that the streams' lengths add up to
 * exactly the rest of the body. r->pos: the first entry before, the first
 * stream after. */
static int check_header(struct rbuf *r, unsigned nthreads)
{
	size_t first = r->pos, end;
	uint64_t sum = 0, rest;
	struct thdr h;

	for (unsigned k = 0; k < nthreads; k++)
		if (get_thdr(r, k, nthreads, &h))
			return -EINVAL;
	end = r->pos;
	rest = r->end - end;
	r->pos = first;
	for (unsigned k = 0; k < nthreads; k++) {
		size_t at = r->pos;

		get_thdr(r, k, nthreads, &h); /* read and checked above */
		if (h.bytes > rest - sum)
			return fail(r, at,
				    "thread %u's %llu-byte stream runs past the body's end (%llu "
				    "bytes left)",
				    k, (unsigned long long)h.bytes,
				    (unsigned long long)(rest - sum));
		sum += h.bytes;
	}
	if (sum != rest)
		return fail(r, end + sum, "%llu bytes after the last thread's stream",
			    (unsigned long long)(rest - sum));
	return 0;
}

static int thread_arrays(struct al_trace_thread *th, uint64_t nops)
{
	if (!nops)
		return 0;
	th->ops = al_meta_alloc(sizeof(*th->ops) * nops);
	th->seq = al_meta_alloc(sizeof(*th->seq) * nops);
	th->t_ns = al_meta_alloc(sizeof(*th->t_ns) * nops);
	th->cap = nops;
	return th->ops && th->seq && th->t_ns ? 0 : -ENOMEM;
}

/* Decode thread k's stream, which starts at *pos. */
static int get_stream(struct rbuf *r, struct al_trace *t, unsigned k, const struct thdr *h,
		      size_t *pos)
{
	struct al_trace_thread *th = &t->threads[k];
	struct rbuf s = *r;
	struct tstate st = { 0, h->start, -1 };

	th->parent = h->parent ? (uint32_t)h->parent - 1 : AL_TRACE_NOID;
	if (thread_arrays(th, h->nops))
		return -ENOMEM;
	s.pos = *pos;
	s.end = *pos + h->bytes;
	snprintf(s.where, sizeof(s.where), "thread %u's stream", k);
	s.what = "an op";
	for (uint64_t i = 0; i < h->nops; i++) {
		if (get_op(&s, &th->ops[i], &st))
			return -EINVAL;
		th->seq[i] = st.seq;
		th->t_ns[i] = st.t;
		th->nops = i + 1;
	}
	if (s.pos != s.end)
		return fail(&s, s.pos, "%s has %zu bytes after its %llu ops", s.where,
			    s.end - s.pos, (unsigned long long)h->nops);
	*pos = s.end;
	return 0;
}

/* Pass 2: each entry again (valid now), and its thread's stream. */
static int decode_threads(struct rbuf *r, struct al_trace *t, size_t first)
{
	size_t pos = r->pos;
	struct thdr h;
	int ret;

	r->pos = first;
	for (unsigned k = 0; k < t->nthreads; k++) {
		get_thdr(r, k, t->nthreads, &h);
		ret = get_stream(r, t, k, &h, &pos);
		if (ret)
			return ret;
	}
	return 0;
}

int al_trace_decode(const void *buf, size_t len, struct al_trace **out, char *err, size_t errlen)
{
	struct rbuf r = { .p = buf, .pos = 0, .end = len, .err = err, .errlen = err ? errlen : 0 };
	char serr[160];
	struct al_trace *t;
	size_t first;
	uint64_t n;
	int ret;

	if (!out || (!buf && len))
		return -EINVAL;
	*out = NULL;
	snprintf(r.where, sizeof(r.where), "the body");
	r.what = "its thread count";
	if (get_var(&r, &n))
		return -EINVAL;
	if (!n || n > AL_TRACE_MAX_THREADS)
		return fail(&r, 0, "%llu threads; a trace has 1..%d", (unsigned long long)n,
			    AL_TRACE_MAX_THREADS);
	if ((r.end - r.pos) / MIN_THREAD_BYTES < n)
		return fail(&r, r.pos, "%llu threads' entries cannot fit in the %zu bytes left",
			    (unsigned long long)n, r.end - r.pos);
	first = r.pos;
	ret = check_header(&r, (unsigned)n);
	if (ret)
		return ret;
	t = al_trace_new((unsigned)n);
	if (!t)
		return -ENOMEM;
	ret = decode_threads(&r, t, first);
	if (!ret) {
		ret = al_trace_seal(t, serr, sizeof(serr));
		if (ret == -EINVAL)
			snprintf(r.err, r.errlen, "the ops decode but do not seal: %s", serr);
	}
	if (ret)
		al_trace_free(t);
	else
		*out = t;
	return ret;
}
