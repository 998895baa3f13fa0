/* SPDX-License-Identifier: MIT */
/*
 * The recorder's finaliser (record.h): a raw file (raw.h) to a sealed trace.
 *
 * Pass 1 walks the chunks: the file ends at the first chunk that is not
 * whole (bad magic, payload past the end: a process killed mid-write, or a
 * chunk reserved but never written); each thread's chunk offsets are kept.
 * The merge then decodes each thread's ops one at a time, in its chunks'
 * file order, with absolute seq, clock and addresses, and takes them in
 * global seq order through a heap of threads keyed by their next op's seq.
 * Ops whose seq is not above the thread's last are copies (an end-of-image
 * flush of a buffer its owner flushed again) and are dropped. A realloc is
 * two events (its old object goes at its first seq, its new one comes at
 * its second), which keeps the address map right when another thread
 * reuses the old address in between. The address map (open addressing,
 * Fibonacci hashing, backward-shift deletion) holds the live objects:
 * address -> (id, requested size); ids are handed out in merge order, so
 * they are dense and in creation order, as trace.h asks.
 *
 * Memory: metadata only (al_meta_alloc), never the allocator under test:
 * the trace (48 bytes per op), 24 bytes per live object (at most half the
 * table full), 8 per chunk. Time: O(ops * log threads). Single-threaded;
 * the file is mapped read-only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloclab/alloclab.h"
#include "alloclab/record.h"
#include "raw.h"

struct ev {
	uint64_t seq, seq2, tick;
	uint64_t x, y;	     /* per kind (raw.h) */
	uint64_t addr, old;  /* the result (or freed object), realloc's old object */
	uint8_t kind, flags; /* enum al_trace_kind, REC_F_* */
};

struct rd {
	const uint8_t *p, *end;
	int bad;
};

struct fthread {
	uint64_t *chunks; /* offsets of its chunks, in file order */
	uint64_t nchunks, ci;
	struct rd r;			/* the chunk being decoded */
	uint64_t coff, seq, tick, addr; /* its offset and decoding state */
	uint64_t last_seq;		/* the last op taken: copies are not above it */
	struct ev cur;			/* the next event, when has */
	int has;
	int phase; /* 1: cur is a realloc that has had its first event */
	uint64_t nops, prev_tick;
	uint32_t dense;	  /* index in the trace */
	uint32_t pend_id; /* a realloc between its two events: the old object */
	uint64_t pend_size;
};

struct slot {
	uint64_t addr, size;
	uint32_t id;
};

struct fin {
	const uint8_t *buf;
	uint64_t size, valid;
	const struct rec_file_hdr *h;
	struct fthread *th;
	uint32_t nth;
	struct slot *map;
	uint64_t mcap, mn;
	unsigned mshift; /* 64 - log2(mcap) */
	uint32_t *heap, nheap;
	uint64_t next_id;
	struct al_trace *t;
	struct al_rec_info *info;
	char *err;
	size_t errlen;
};

static int fail(struct fin *f, int ret, const char *fmt, uint64_t a, uint64_t b)
{
	snprintf(f->err, f->errlen, fmt, (unsigned long long)a, (unsigned long long)b);
	return ret;
}

/* ---- the address map ---- */

/* Fibonacci hashing: the product's top bits, which every address bit feeds. */
static uint64_t slot_of(const struct fin *f, uint64_t addr)
{
	return ((addr >> 4) * 0x9e3779b97f4a7c15ull) >> f->mshift;
}

static int map_grow(struct fin *f)
{
	struct slot *old = f->map;
	uint64_t ocap = f->mcap;

	f->mcap = ocap ? ocap * 2 : 1024;
	f->mshift = (unsigned)__builtin_clzll(f->mcap) + 1;
	f->map = al_meta_alloc(sizeof(*f->map) * f->mcap);
	if (!f->map)
		return -ENOMEM;
	for (uint64_t i = 0; i < ocap; i++) {
		uint64_t j = slot_of(f, old[i].addr);

		if (!old[i].addr)
			continue;
		while (f->map[j].addr)
			j = (j + 1) & (f->mcap - 1);
		f->map[j] = old[i];
	}
	al_meta_free(old, sizeof(*old) * ocap);
	return 0;
}

/* The slot holding addr, or the empty slot where it would go. */
static uint64_t map_find(const struct fin *f, uint64_t addr)
{
	uint64_t j = slot_of(f, addr);

	while (f->map[j].addr && f->map[j].addr != addr)
		j = (j + 1) & (f->mcap - 1);
	return j;
}

/* addr is now object id (an address given out again replaces a stale
 * entry: its free was not recorded). */
static int map_put(struct fin *f, uint64_t addr, uint32_t id, uint64_t size)
{
	uint64_t j;

	if (2 * (f->mn + 1) > f->mcap && map_grow(f))
		return -ENOMEM;
	j = map_find(f, addr);
	f->mn += !f->map[j].addr;
	f->map[j] = (struct slot){ addr, size, id };
	return 0;
}

/* Remove addr (backward shift keeps every probe chain whole); its id, or
 * NOID when it is not live. */
static uint32_t map_take(struct fin *f, uint64_t addr, uint64_t *size)
{
	uint64_t j = map_find(f, addr), k = j, mask = f->mcap - 1;
	uint32_t id = f->map[j].id;

	if (!f->map[j].addr)
		return AL_TRACE_NOID;
	*size = f->map[j].size;
	for (;;) {
		k = (k + 1) & mask;
		if (!f->map[k].addr)
			break;
		/* k's entry may move into the hole at j unless its home lies
		 * cyclically in (j, k] */
		uint64_t home = slot_of(f, f->map[k].addr);

		if (((k - home) & mask) >= ((k - j) & mask)) {
			f->map[j] = f->map[k];
			j = k;
		}
	}
	f->map[j].addr = 0;
	f->mn--;
	return id;
}

static uint32_t map_get(const struct fin *f, uint64_t addr)
{
	uint64_t j = map_find(f, addr);

	return f->map[j].addr ? f->map[j].id : AL_TRACE_NOID;
}

/* ---- pass 1: chunks ---- */

/* The chunk header at off, copied (chunks are not aligned in the file);
 * false when no whole chunk is there. */
static bool chunk_at(const struct fin *f, uint64_t off, struct rec_chunk *c)
{
	if (f->size - off < sizeof(*c))
		return false;
	memcpy(c, f->buf + off, sizeof(*c));
	return c->magic == REC_CHUNK_MAGIC && f->size - off - sizeof(*c) >= c->len;
}

static int thread_slot(struct fin *f, uint32_t thread)
{
	uint32_t n = f->nth ? f->nth : 64;
	struct fthread *th;

	if (thread < f->nth)
		return 0;
	if (thread >= AL_TRACE_MAX_THREADS)
		return -EINVAL;
	while (n <= thread)
		n *= 2;
	th = al_meta_alloc(sizeof(*th) * n);
	if (!th)
		return -ENOMEM;
	if (f->nth)
		memcpy(th, f->th, sizeof(*th) * f->nth);
	al_meta_free(f->th, sizeof(*th) * f->nth);
	f->th = th;
	f->nth = n;
	return 0;
}

static void end_chunk(struct fin *f, const struct rec_chunk *c, uint64_t off)
{
	struct rec_end e;

	memset(&e, 0, sizeof(e));
	memcpy(&e, f->buf + off + sizeof(*c), c->len < sizeof(e) ? c->len : sizeof(e));
	f->info->unrecorded = e.unrecorded;
	f->info->end = e.why;
}

static int scan(struct fin *f)
{
	uint64_t off = f->h->hdr_size;
	struct rec_chunk c;
	int ret, last_end = 0;

	while (chunk_at(f, off, &c)) {
		if (c.thread == REC_END_THREAD) {
			end_chunk(f, &c, off);
		} else {
			ret = thread_slot(f, c.thread);
			if (ret)
				return ret == -EINVAL ? fail(f, ret,
							     "chunk at offset %llu: thread "
							     "index %llu is out of range",
							     off, c.thread)
						      : ret;
			f->th[c.thread].nchunks++;
		}
		last_end = c.thread == REC_END_THREAD;
		f->info->chunks++;
		off += sizeof(c) + c.len;
	}
	f->valid = off;
	f->info->valid_bytes = off;
	f->info->complete = last_end && off == f->size;
	if (off != f->size)
		snprintf(f->info->note, sizeof(f->info->note),
			 "the raw file ends in a partial chunk at offset %llu of %llu (the process "
			 "was killed while recording): finalised up to there",
			 (unsigned long long)off, (unsigned long long)f->size);
	else if (!last_end)
		snprintf(f->info->note, sizeof(f->info->note),
			 "the raw file has no end record (the process was killed, or exited "
			 "without running its exit handlers): finalised up to its last chunk");
	return 0;
}

/* ---- pass 2: decoding, one op at a time as the merge asks ---- */

static uint64_t get_v(struct rd *r)
{
	uint64_t v = 0;

	for (unsigned shift = 0; shift < 64; shift += 7) {
		if (r->p >= r->end)
			break;
		v |= (uint64_t)(*r->p & 0x7f) << shift;
		if (!(*r->p++ & 0x80))
			return v;
	}
	r->bad = 1;
	return 0;
}

static uint64_t get_addr(struct rd *r, uint64_t *last)
{
	uint64_t z = get_v(r);

	*last += (z >> 1) ^ (uint64_t) - (int64_t)(z & 1);
	return *last;
}

/* One op's fields after its head (raw.h's table). */
static void get_fields(struct rd *r, struct ev *e, uint64_t *addr)
{
	int has = !(e->flags & REC_F_NULL);

	switch (e->kind) {
	case AL_TK_MALLOC: e->x = get_v(r); break;
	case AL_TK_REALLOC:
		if (e->flags & REC_F_OLD)
			e->old = get_addr(r, addr);
		e->x = get_v(r);
		e->seq2 = e->seq + get_v(r);
		break;
	case AL_TK_THREAD_START: e->x = get_v(r); return;
	case AL_TK_THREAD_EXIT: return;
	case AL_TK_FREE:
	case AL_TK_USABLE_SIZE: break;
	default: /* calloc and the memalign family: two arguments */
		if (e->kind >= AL_TK_NR) {
			r->bad = 1;
			return;
		}
		e->x = get_v(r);
		e->y = get_v(r);
	}
	if (has)
		e->addr = get_addr(r, addr);
	if (e->kind == AL_TK_USABLE_SIZE)
		e->x = get_v(r);
}

/* Each thread's chunk offsets, in file order. */
static int index_chunks(struct fin *f)
{
	uint64_t off = f->h->hdr_size;

	for (uint32_t k = 0; k < f->nth; k++) {
		if (!f->th[k].nchunks)
			continue;
		f->th[k].chunks = al_meta_alloc(sizeof(uint64_t) * f->th[k].nchunks);
		if (!f->th[k].chunks)
			return -ENOMEM;
		f->th[k].nchunks = 0;
	}
	while (off < f->valid) {
		struct rec_chunk c;

		chunk_at(f, off, &c); /* whole: scan read it */
		if (c.thread != REC_END_THREAD)
			f->th[c.thread].chunks[f->th[c.thread].nchunks++] = off;
		off += sizeof(c) + c.len;
	}
	return 0;
}

/* Start decoding the thread's next chunk; 0 when it has none left. */
static int next_chunk(struct fin *f, struct fthread *th)
{
	struct rec_chunk c;

	if (th->ci == th->nchunks)
		return 0;
	th->coff = th->chunks[th->ci++];
	chunk_at(f, th->coff, &c);
	th->r.p = f->buf + th->coff + sizeof(c);
	th->r.end = th->r.p + c.len;
	th->r.bad = 0;
	th->seq = c.base_seq;
	th->tick = c.base_tick;
	th->addr = 0;
	return 1;
}

/* The thread's next event into cur (has = 0 at its end); copies of ops
 * already taken are dropped. -EINVAL when an op does not decode. */
static int advance(struct fin *f, struct fthread *th)
{
	struct ev *e = &th->cur;

	for (;;) {
		uint8_t kf;

		while (th->r.p >= th->r.end)
			if (!next_chunk(f, th)) {
				th->has = 0;
				return 0;
			}
		kf = *th->r.p++;
		memset(e, 0, sizeof(*e));
		e->kind = kf & 0x0f;
		e->flags = kf & 0xf0;
		e->seq = th->seq += get_v(&th->r);
		e->tick = th->tick += get_v(&th->r);
		get_fields(&th->r, e, &th->addr);
		if (th->r.bad || (e->kind == AL_TK_REALLOC && e->seq2 <= e->seq))
			return fail(
				f, -EINVAL,
				"corrupt chunk at offset %llu: op at offset %llu does not decode",
				th->coff, (uint64_t)(th->r.p - f->buf));
		if (e->seq <= th->last_seq) {
			f->info->duplicates++;
			continue;
		}
		th->last_seq = e->kind == AL_TK_REALLOC ? e->seq2 : e->seq;
		th->has = 1;
		return 0;
	}
}

/* ---- the merge ---- */

/* The seq at which thread k's next event happens. */
static uint64_t next_key(const struct fin *f, uint32_t k)
{
	const struct fthread *th = &f->th[k];

	return th->phase ? th->cur.seq2 : th->cur.seq;
}

static void heap_down(struct fin *f, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, m = i, tmp;

		if (l < f->nheap && next_key(f, f->heap[l]) < next_key(f, f->heap[m]))
			m = l;
		if (l + 1 < f->nheap && next_key(f, f->heap[l + 1]) < next_key(f, f->heap[m]))
			m = l + 1;
		if (m == i)
			return;
		tmp = f->heap[i];
		f->heap[i] = f->heap[m];
		f->heap[m] = tmp;
		i = m;
	}
}

static uint64_t ticks_ns(const struct fin *f, uint64_t ticks)
{
	double tpn = f->h->ticks_per_ns > 0 ? f->h->ticks_per_ns : 1.0;

	return (uint64_t)((double)ticks / tpn);
}

/* An allocation's result becomes a new object. */
static int create(struct fin *f, struct al_trace_op *op, const struct ev *e)
{
	if (e->flags & REC_F_NULL)
		return 0;
	op->id = (uint32_t)f->next_id++;
	return map_put(f, e->addr, op->id, op->size);
}

/* A realloc's first event: its old object goes (for now: a failed realloc
 * puts it back at the second). */
static void realloc_first(struct fin *f, struct fthread *th, const struct ev *e)
{
	th->pend_id = AL_TRACE_NOID;
	th->pend_size = 0;
	if (e->flags & REC_F_OLD)
		th->pend_id = map_take(f, e->old, &th->pend_size);
}

static int realloc_second(struct fin *f, struct fthread *th, struct al_trace_op *op,
			  const struct ev *e)
{
	op->size = e->x;
	op->aux = th->pend_size;
	op->ref = th->pend_id;
	if ((e->flags & REC_F_OLD) && th->pend_id == AL_TRACE_NOID)
		op->flags |= AL_TF_UNKNOWN;
	if ((e->flags & (REC_F_NULL | REC_F_OLD)) == REC_F_OLD && e->addr != e->old)
		op->flags |= AL_TF_MOVED;
	if ((e->flags & REC_F_NULL) && e->x && th->pend_id != AL_TRACE_NOID)
		return map_put(f, e->old, th->pend_id, th->pend_size); /* it failed */
	return create(f, op, e);
}

/* The op an event (or a realloc's second event) makes. */
static int make_op(struct fin *f, struct fthread *th, struct al_trace_op *op, const struct ev *e)
{
	uint64_t size;

	switch (e->kind) {
	case AL_TK_MALLOC: op->size = e->x; return create(f, op, e);
	case AL_TK_CALLOC:
		op->aux = e->x;
		op->size = __builtin_mul_overflow(e->x, e->y, &size) ? UINT64_MAX : size;
		return create(f, op, e);
	case AL_TK_REALLOC: return realloc_second(f, th, op, e);
	case AL_TK_FREE:
	case AL_TK_USABLE_SIZE:
		op->size = e->kind == AL_TK_USABLE_SIZE ? e->x : 0;
		if (e->flags & REC_F_NULL)
			return 0;
		op->ref = e->kind == AL_TK_FREE ? map_take(f, e->addr, &size) : map_get(f, e->addr);
		if (op->ref == AL_TRACE_NOID)
			op->flags |= AL_TF_UNKNOWN;
		return 0;
	case AL_TK_THREAD_START:
		op->aux = e->x && e->x - 1 < f->nth ? f->th[e->x - 1].dense : AL_TRACE_NOID;
		return 0;
	case AL_TK_THREAD_EXIT: return 0;
	default: /* the memalign family */
		op->aux = e->x;
		op->size = e->y;
		return create(f, op, e);
	}
}

/* Thread k's next event, in seq order with every other thread's. */
static int step(struct fin *f, uint32_t k)
{
	struct fthread *th = &f->th[k];
	const struct ev *e = &th->cur;
	struct al_trace_op op;
	uint64_t dt;
	int ret;

	if (e->kind == AL_TK_REALLOC && !th->phase) {
		realloc_first(f, th, e);
		th->phase = 1;
		return 0;
	}
	memset(&op, 0, sizeof(op));
	op.kind = e->kind;
	op.id = op.ref = AL_TRACE_NOID;
	op.flags = (uint8_t)((e->flags & REC_F_NULL ? AL_TF_NULL : 0) |
			     (e->flags & REC_F_ZERO ? AL_TF_ZERO : 0));
	ret = make_op(f, th, &op, e);
	if (ret)
		return ret;
	dt = th->nops++ ? ticks_ns(f, e->tick - th->prev_tick) : 0;
	op.dt = dt > UINT32_MAX ? UINT32_MAX : (uint32_t)dt;
	th->prev_tick = e->tick;
	th->phase = 0;
	ret = al_trace_push(f->t, th->dense, &op, e->kind == AL_TK_REALLOC ? e->seq2 : e->seq,
			    ticks_ns(f, e->tick - f->h->start_tick));
	return ret ? ret : advance(f, th);
}

static int merge(struct fin *f)
{
	uint32_t dense = 0;
	int ret;

	f->heap = al_meta_alloc(sizeof(*f->heap) * (f->nth ? f->nth : 1));
	if (!f->heap)
		return -ENOMEM;
	for (uint32_t k = 0; k < f->nth; k++) {
		f->th[k].dense = AL_TRACE_NOID;
		ret = advance(f, &f->th[k]);
		if (ret)
			return ret;
		if (f->th[k].has) {
			f->th[k].dense = dense++;
			f->heap[f->nheap++] = k;
		}
	}
	f->t = al_trace_new(dense ? dense : 1);
	if (!f->t)
		return -ENOMEM;
	for (uint32_t i = f->nheap; i-- > 0;)
		heap_down(f, i);
	while (f->nheap) {
		uint32_t k = f->heap[0];

		ret = step(f, k);
		if (ret)
			return ret;
		if (!f->th[k].has)
			f->heap[0] = f->heap[--f->nheap];
		heap_down(f, 0);
	}
	f->info->threads = f->t->nthreads;
	return 0;
}

/* ---- the file ---- */

static int open_raw(struct fin *f, const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return fail(f, -errno, "cannot open the raw file (errno %llu)", (uint64_t)errno, 0);
	if (fstat(fd, &st) || st.st_size < (off_t)sizeof(struct rec_file_hdr)) {
		close(fd);
		return fail(f, -EINVAL, "not a raw recording: %llu bytes, shorter than its header",
			    (uint64_t)st.st_size, 0);
	}
	f->size = (uint64_t)st.st_size;
	f->buf = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (f->buf == MAP_FAILED) {
		f->buf = NULL;
		return -ENOMEM;
	}
	f->h = (const void *)f->buf;
	if (memcmp(f->h->magic, REC_MAGIC, sizeof(f->h->magic)))
		return fail(f, -EINVAL, "not a raw recording: bad magic at offset 0", 0, 0);
	if (f->h->version != REC_VERSION)
		return fail(f, -EINVAL,
			    "raw format version %llu at offset 8; this build reads %llu",
			    f->h->version, REC_VERSION);
	if (f->h->hdr_size < sizeof(*f->h) || f->h->hdr_size > f->size)
		return fail(f, -EINVAL, "bad header size %llu at offset 12", f->h->hdr_size, 0);
	return 0;
}

static void fin_free(struct fin *f)
{
	for (uint32_t k = 0; k < f->nth; k++)
		al_meta_free(f->th[k].chunks, sizeof(uint64_t) * f->th[k].nchunks);
	al_meta_free(f->th, sizeof(*f->th) * f->nth);
	al_meta_free(f->map, sizeof(*f->map) * f->mcap);
	al_meta_free(f->heap, sizeof(*f->heap) * (f->nth ? f->nth : 1));
	if (f->buf)
		munmap((void *)f->buf, f->size);
}

int al_rec_finish(const char *path, struct al_trace **out, struct al_rec_info *info, char *err,
		  size_t errlen)
{
	struct fin f;
	int ret;

	memset(&f, 0, sizeof(f));
	memset(info, 0, sizeof(*info));
	f.info = info;
	f.err = err;
	f.errlen = errlen;
	*out = NULL;
	if (errlen)
		err[0] = 0;
	ret = open_raw(&f, path);
	if (!ret) {
		info->pid = f.h->pid;
		info->ppid = f.h->ppid;
		info->version = f.h->version;
		info->start_ns = f.h->start_ns;
		info->ticks_per_ns = f.h->ticks_per_ns;
		info->file_bytes = f.size;
		ret = scan(&f);
	}
	if (!ret)
		ret = index_chunks(&f);
	if (!ret && !(ret = map_grow(&f)))
		ret = merge(&f);
	if (!ret)
		ret = al_trace_seal(f.t, err, errlen);
	if (ret == -ENOMEM && errlen && !err[0])
		snprintf(err, errlen, "out of memory finalising the raw file");
	if (ret) {
		al_trace_free(f.t);
		f.t = NULL;
	} else {
		info->ops = f.t->nops;
	}
	*out = f.t;
	fin_free(&f);
	return ret;
}
