/* SPDX-License-Identifier: MIT */
/*
 * replay: a recorded program (trace.h) as a workload. Each trace thread is
 * a producer (worker k replays thread k's ops in order); one pass of the
 * trace per run (AL_WL_FINITE: a worker's cycle returns AL_CYCLE_DONE after
 * its last op, and a phase cut short by its duration is truncated).
 *
 * Objects: a flat table indexed by the trace's dense ids (24 bytes each:
 * the pointer, the requested size, a count of pending foreign references).
 * The creator publishes the pointer with a release store; an op on another
 * thread's object (AL_TF_CROSS, set by the trace's seal) reads it with an
 * acquire load and waits while it is NULL. A refused allocation publishes
 * RP_REFUSED, so its later ops are skipped rather than waited for. Ops that
 * read an object without consuming it (usable_size, a failed realloc) on a
 * thread other than the one that consumes it are counted per object at
 * setup; the consumer waits until they have all been done (each decrements
 * with release). A thread's THREAD_START waits until its parent's
 * published progress (the seq of its next op) is past the start's seq.
 *
 * No deadlock: every wait is for an op of lower seq, so the lowest pending
 * seq never waits. A worker that must wait spins briefly, then ends its
 * cycle (ops are replayed in chunks of RP_CHUNK), giving its CPU token up
 * in virtual mode and letting the engine see a stop request; its progress
 * is published at the end of every cycle.
 *
 * Timing: batch = one clock pair per run of consecutive ops of one kind
 * (so the per-kind totals are exact); per_op_sum = a pair per op, with
 * histograms when asked; wl.clock_reads counts the clock reads inside
 * timed runs, so that Python can say how much of a figure they are when a
 * program's ops alternate kinds (then batch timing reads the clock at
 * nearly every op); wl.<kind>_ns is the mean per op of that kind,
 * as alloc_ns and free_ns are. Alloc-side kinds (malloc, calloc, realloc, the
 * memalign family) add to alloc_ns, frees to free_ns, usable_size to its
 * own metric only. Untimed: think (spinning the recorded gap), touch
 * (writing the bytes the program got), waiting, and dropping what the
 * program did not get (its allocation returned NULL).
 *
 * Requests as the shim makes them: size 0 asks the smallest object (1),
 * the memalign family max(size, alignment) and a result off the alignment
 * counts as refused (freed at once); calloc passes AL_ZERO; realloc is an
 * alloc, a copy of min(old, new) bytes and a free of the old object, all
 * timed as one realloc. Over a stack that hands out one block per CPU
 * (null) touch is refused and realloc copies nothing.
 *
 * Teardown frees every object still live (the end of the trace, or a pass
 * cut short), untimed, so the leak check holds.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "alloclab/alloclab.h"
#include "alloclab/trace.h"
#include "retry.h"

enum { P_trace, P_think, P_touch, P_strict, P_NR };
enum { THINK_NONE, THINK_RECORDED };
enum { TOUCH_NONE, TOUCH_FIRST, TOUCH_ALL };

static const struct al_param_desc rp_params[P_NR] = {
	[P_trace] = { "trace", AL_PARAM_INT, 0, 0, INT64_MAX, NULL,
		      "the trace to replay (Python: a file or alloclab.Trace; C: its registry "
		      "handle)" },
	[P_think] = { "think", AL_PARAM_ENUM, THINK_NONE, 0, 1, "none,recorded",
		      "none: ops back to back; recorded: spin the recorded gap before each op "
		      "(untimed)" },
	[P_touch] = { "touch", AL_PARAM_ENUM, TOUCH_NONE, 0, 2, "none,first,all",
		      "write nothing, the first 64 bytes, or every byte of each object "
		      "(untimed)" },
	[P_strict] = { "strict", AL_PARAM_BOOL, 0, 0, 1, NULL,
		       "fail on an op on an object allocated before recording began (else "
		       "counted and skipped)" },
};

#define RP_CHUNK	  4096u			 /* ops per cycle at most */
#define RP_SPIN		  256u			 /* readiness checks before a blocked cycle ends */
#define RP_TOUCH_FIRST	  64u			 /* bytes touch=first writes */
#define RP_REFUSED	  ((void *)(uintptr_t)1) /* the policy refused what the program got */
#define RP_THINK_SLICE_NS 100000000ull		 /* think spins at most this long per cycle */
#define RP_NOKIND	  AL_TK_NR

struct rp_obj {
	void *p;	/* NULL until created (and after it is gone), or RP_REFUSED */
	uint64_t size;	/* requested bytes */
	uint32_t waits; /* foreign non-consuming refs not done yet */
	uint32_t pad;
};

struct rp_progress {
	uint64_t next_seq; /* seq of the thread's next op; UINT64_MAX when done */
} __attribute__((aligned(AL_CACHELINE)));

struct rp_shared {
	const struct al_trace *t;
	struct rp_obj *obj;	  /* [nobjects] */
	uint32_t *consumer;	  /* [nobjects]: the thread that consumes it, or NOID */
	struct rp_progress *prog; /* [nthreads] */
	unsigned think, touch, strict;
};

struct rp_worker {
	const struct al_trace_thread *th;
	uint64_t next;	     /* index of the next op */
	uint64_t blocked_at; /* op index that last had to wait (counted once) */
	uint64_t kind_ops[AL_TK_NR];
	uint64_t kind_ticks[AL_TK_NR];
	uint64_t refused, unknown, cross_waits, copied, skipped, cross;
	uint64_t clock_reads; /* in timed runs: each costs part of what the ops measure */
	int64_t live;	      /* requested bytes not yet published with al_worker_live */
	/* the clock: batch = a run of one kind since t0; per-op = this op since t0 */
	uint64_t t0;
	unsigned cur; /* the kind being timed, RP_NOKIND when stopped */
	unsigned tid;
	bool per_op, shared_blocks;
	/* untimed work after the op: drop (free) or touch post_p */
	void *post_p;
	uint64_t post_n;
	uint32_t post_id;
	int post_drop;
	uint64_t verify_n; /* realloc with touch: bytes of the old fill to check */
	uint8_t verify_byte;
	uint64_t think_op;  /* 1 + the op whose recorded gap is being spun, 0: none */
	uint64_t think_end; /* ticks when that gap ends */
};

static bool rp_alloc_side(unsigned kind)
{
	return kind <= AL_TK_PVALLOC && kind != AL_TK_FREE;
}

/* Whether op consumes its ref: as trace.c's seal decides. */
static inline bool rp_consumes(const struct al_trace_op *op)
{
	if (op->kind == AL_TK_FREE)
		return true;
	return op->kind == AL_TK_REALLOC && (op->id != AL_TRACE_NOID || !op->size);
}

static uint8_t rp_fill(uint32_t id)
{
	return (uint8_t)(id ^ (id >> 8) ^ 0xa5);
}

/* ---- setup: the object table and who waits for whom ---- */

static void rp_count_waits(struct rp_shared *s)
{
	const struct al_trace *t = s->t;

	for (unsigned k = 0; k < t->nthreads; k++)
		for (uint64_t i = 0; i < t->threads[k].nops; i++) {
			const struct al_trace_op *op = &t->threads[k].ops[i];

			if (op->ref != AL_TRACE_NOID && rp_consumes(op))
				s->consumer[op->ref] = k;
		}
	for (unsigned k = 0; k < t->nthreads; k++)
		for (uint64_t i = 0; i < t->threads[k].nops; i++) {
			const struct al_trace_op *op = &t->threads[k].ops[i];

			if (op->ref == AL_TRACE_NOID || rp_consumes(op) ||
			    (op->kind != AL_TK_USABLE_SIZE && op->kind != AL_TK_REALLOC))
				continue;
			if (s->consumer[op->ref] != AL_TRACE_NOID && s->consumer[op->ref] != k)
				s->obj[op->ref].waits++;
		}
}

static int rp_check_params(const int64_t *params, unsigned nworkers, char *err, size_t errlen)
{
	const struct al_trace *t = al_trace_lookup(params[P_trace]);

	if (!t) {
		snprintf(err, errlen,
			 "trace=%lld is not a registered trace handle (load the trace and pass "
			 "it: Python trace=FILE, or alloclab.Trace.handle())",
			 (long long)params[P_trace]);
		return -EINVAL;
	}
	if (nworkers != t->nthreads) {
		snprintf(err, errlen, "the trace has %u threads, so producers must be %u, not %u",
			 t->nthreads, t->nthreads, nworkers);
		return -EINVAL;
	}
	return 0;
}

static void rp_shared_free(struct rp_shared *s)
{
	uint64_t n = s->t ? (s->t->nobjects ? s->t->nobjects : 1) : 1;

	al_meta_free(s->obj, sizeof(*s->obj) * n);
	al_meta_free(s->consumer, sizeof(*s->consumer) * n);
	al_meta_free(s->prog, sizeof(*s->prog) * (s->t ? s->t->nthreads : 1));
	al_meta_free(s, sizeof(*s));
}

static int rp_setup(const int64_t *params, unsigned nworkers, void **shared)
{
	struct rp_shared *s;
	uint64_t n;

	(void)nworkers;
	s = al_meta_alloc(sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->t = al_trace_lookup(params[P_trace]);
	if (!s->t) { /* unregistered since the check */
		rp_shared_free(s);
		return -EINVAL;
	}
	n = s->t->nobjects ? s->t->nobjects : 1;
	s->obj = al_meta_alloc(sizeof(*s->obj) * n);
	s->consumer = al_meta_alloc(sizeof(*s->consumer) * n);
	s->prog = al_meta_alloc(sizeof(*s->prog) * s->t->nthreads);
	if (!s->obj || !s->consumer || !s->prog) {
		rp_shared_free(s);
		return -ENOMEM;
	}
	memset(s->obj, 0, sizeof(*s->obj) * n); /* fault the table in now, untimed */
	memset(s->consumer, 0xff, sizeof(*s->consumer) * n);
	rp_count_waits(s);
	for (unsigned k = 0; k < s->t->nthreads; k++)
		s->prog[k].next_seq = s->t->threads[k].nops ? s->t->threads[k].seq[0] : UINT64_MAX;
	s->think = (unsigned)params[P_think];
	s->touch = (unsigned)params[P_touch];
	s->strict = (unsigned)params[P_strict];
	*shared = s;
	return 0;
}

/* Free what the pass left live (its end, or a pass cut short), untimed. */
static void rp_teardown(void *shared, struct al_allocator *a, struct al_ctx *c)
{
	struct rp_shared *s = shared;
	uint64_t t_end = 0;

	if (!s)
		return;
	for (uint64_t i = 0; a && i < s->t->nobjects; i++) {
		void *p = s->obj[i].p;

		if (p && p != RP_REFUSED)
			wl_free_untimed(a, c, p, &t_end);
	}
	rp_shared_free(s);
}

/* Whether any layer of the stack hands out one block per CPU (null). */
static bool rp_shared_blocks(const struct al_allocator *a)
{
	for (; a; a = a->below)
		if (a->desc && (a->desc->features & AL_F_SHARED_BLOCKS))
			return true;
	return false;
}

static int rp_worker_init(struct al_worker *w)
{
	struct rp_shared *s = w->shared;
	struct rp_worker *r = al_meta_alloc(sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->th = &s->t->threads[w->id];
	r->tid = w->id;
	r->blocked_at = UINT64_MAX;
	r->cur = RP_NOKIND;
	r->per_op = w->timing == AL_TIMING_PER_OP_SUM || w->hist;
	r->shared_blocks = rp_shared_blocks(w->a);
	w->priv = r;
	if (s->touch != TOUCH_NONE && r->shared_blocks) {
		snprintf(w->err, w->errlen,
			 "touch=%s writes the objects, but the stack hands out one block per "
			 "CPU (null): use touch=none or a real allocator",
			 s->touch == TOUCH_FIRST ? "first" : "all");
		return -EINVAL;
	}
	return 0;
}

/* ---- the clock ---- */

/* End the current timed run (batch) before untimed work. */
static inline void rp_clock_stop(struct rp_worker *r)
{
	if (r->cur != RP_NOKIND) {
		r->kind_ticks[r->cur] += al_ticks() - r->t0;
		r->cur = RP_NOKIND;
		r->clock_reads++;
	}
}

/* Before an op of `kind`: per-op, a new pair; batch, a new run on a change. */
static inline void rp_clock_op(struct rp_worker *r, unsigned kind)
{
	uint64_t now;

	if (r->per_op) {
		r->t0 = al_ticks();
		r->clock_reads += 2;
		return;
	}
	if (kind == r->cur)
		return;
	r->clock_reads++;
	if (r->cur == RP_NOKIND) {
		r->t0 = al_ticks(); /* a run starts: a measurement boundary */
	} else {
		/* One run ends where the next begins: unfenced, so the switch does
		 * not serialise the replay (the runs' sum is still bracketed by
		 * fenced reads; a few cycles may move between adjacent runs). */
		now = al_ticks_fast();
		r->kind_ticks[r->cur] += now - r->t0;
		r->t0 = now;
	}
	r->cur = kind;
}

/* After an op (per-op timing): its pair, summed and into the histogram. */
static inline void rp_clock_done(struct al_worker *w, struct rp_worker *r, unsigned kind)
{
	uint64_t dt = al_ticks() - r->t0;

	r->kind_ticks[kind] += dt;
	if (w->hist && kind != AL_TK_USABLE_SIZE && kind < AL_TK_THREAD_START)
		al_hist_record(&w->hist[kind == AL_TK_FREE ? AL_HIST_FREE : AL_HIST_ALLOC], dt);
}

/* ---- ops ---- */

static al_noinline al_cold int rp_unknown(struct al_worker *w, struct rp_worker *r,
					  const struct al_trace_op *op)
{
	struct rp_shared *s = w->shared;

	r->unknown++;
	if (!s->strict)
		return 0;
	snprintf(w->err, w->errlen,
		 "thread %u, op %llu: %s of an object allocated before recording began "
		 "(strict=1 refuses it)",
		 r->tid, (unsigned long long)r->next,
		 op->kind == AL_TK_FREE	     ? "free"
		 : op->kind == AL_TK_REALLOC ? "realloc"
					     : "usable_size");
	return -EINVAL;
}

static al_noinline al_cold int rp_free_failed(struct al_worker *w, struct rp_worker *r,
					      const struct al_trace_op *op, void *p, int ret)
{
	ret = wl_free_again(w, p, ret); /* counted: free_refused_timedout */
	if (!ret)
		return 0;
	snprintf(w->err, w->errlen, "thread %u, op %llu: free of object %u (%p) failed: %s", r->tid,
		 (unsigned long long)r->next, op->ref, p, al_strerror(ret));
	return ret;
}

/* Free object `ref` through the policy (timed by the caller). */
static inline int rp_release(struct al_worker *w, struct rp_worker *r, struct rp_shared *s,
			     const struct al_trace_op *op, uint32_t ref)
{
	struct rp_obj *o = &s->obj[ref];
	void *p = o->p;
	int ret;

	if (al_unlikely(p == RP_REFUSED)) {
		r->skipped++;
		return 0;
	}
	ret = w->a->ops->free(w->a, &w->ctx, p);
	if (al_unlikely(ret) && (ret = rp_free_failed(w, r, op, p, ret)))
		return ret;
	o->p = NULL;
	r->live -= (int64_t)o->size;
	r->cross += (op->flags & AL_TF_CROSS) != 0;
	return 0;
}

static int rp_free(struct al_worker *w, struct rp_worker *r, const struct al_trace_op *op)
{
	if (al_unlikely(op->ref == AL_TRACE_NOID))
		return (op->flags & AL_TF_UNKNOWN) ? rp_unknown(w, r, op) : 0; /* free(NULL) */
	return rp_release(w, r, w->shared, op, op->ref);
}

/* A new object `id` (or one the program did not get: id NOID) of `size`. */
static inline void rp_created(struct rp_worker *r, struct rp_shared *s, uint32_t id, void *p,
			      uint64_t size)
{
	if (id == AL_TRACE_NOID) {
		if (p) { /* the program got NULL: the policy's object is dropped */
			r->post_p = p;
			r->post_drop = 1;
		}
		return;
	}
	if (!p) {
		r->refused++;
		__atomic_store_n(&s->obj[id].p, RP_REFUSED, __ATOMIC_RELEASE);
		return;
	}
	s->obj[id].size = size;
	r->live += (int64_t)size;
	if (s->touch != TOUCH_NONE) { /* published once written (rp_post) */
		r->post_p = p;
		r->post_n = s->touch == TOUCH_ALL || size < RP_TOUCH_FIRST ? size : RP_TOUCH_FIRST;
		r->post_id = id;
		return;
	}
	__atomic_store_n(&s->obj[id].p, p, __ATOMIC_RELEASE);
}

/* malloc, calloc and the memalign family. */
static int rp_alloc(struct al_worker *w, struct rp_worker *r, const struct al_trace_op *op)
{
	uint64_t req = op->size, align = 0;
	unsigned flags = 0;
	void *p;

	if (op->kind == AL_TK_CALLOC)
		flags = AL_ZERO;
	else if (op->kind != AL_TK_MALLOC)
		align = op->aux;
	/* memalign rounds an alignment up to a power of two, as glibc's does */
	if (op->kind == AL_TK_MEMALIGN && (align & (align - 1)) && align <= (UINT64_MAX >> 1) + 1)
		align = (uint64_t)1 << (64 - __builtin_clzll(align - 1));
	if (al_unlikely(align & (align - 1))) { /* the program was refused (EINVAL) */
		rp_created(r, w->shared, op->id, NULL, op->size);
		return 0;
	}
	if (op->kind == AL_TK_PVALLOC && align)
		req = (req + align - 1) & ~(align - 1);
	if (req < align)
		req = align;
	if (!req)
		req = 1;
	p = w->a->ops->alloc(w->a, &w->ctx, req, flags);
	if (al_unlikely(p && align && ((uintptr_t)p & (align - 1)))) {
		int ret = w->a->ops->free(w->a, &w->ctx, p);

		if (ret)
			return rp_free_failed(w, r, op, p, ret);
		p = NULL;
	}
	rp_created(r, w->shared, op->id, p, op->size);
	return 0;
}

/* A non-consuming reference done: the object's consumer may go on. */
static inline void rp_ref_done(struct rp_shared *s, struct rp_worker *r, uint32_t ref)
{
	uint32_t c = s->consumer[ref];

	if (c != AL_TRACE_NOID && c != r->tid)
		__atomic_fetch_sub(&s->obj[ref].waits, 1, __ATOMIC_RELEASE);
}

static int rp_usable(struct al_worker *w, struct rp_worker *r, const struct al_trace_op *op)
{
	struct rp_shared *s = w->shared;
	void *p;

	if (op->ref == AL_TRACE_NOID)
		return rp_unknown(w, r, op);
	p = s->obj[op->ref].p;
	if (p == RP_REFUSED)
		r->skipped++;
	else if (w->a->ops->usable_size)
		(void)w->a->ops->usable_size(w->a, p);
	rp_ref_done(s, r, op->ref);
	return 0;
}

/* Copy what the old object holds into the new one (not over shared blocks,
 * where both are one CPU's block); with touch, check the old fill later. */
static void rp_copy(struct rp_worker *r, struct rp_shared *s, void *np, const struct rp_obj *o,
		    uint64_t size, uint32_t ref)
{
	uint64_t n = o->size < size ? o->size : size, touched;

	if (o->p == RP_REFUSED || r->shared_blocks)
		return;
	memcpy(np, o->p, n);
	r->copied += n;
	if (s->touch == TOUCH_NONE)
		return;
	touched = s->touch == TOUCH_ALL || o->size < RP_TOUCH_FIRST ? o->size : RP_TOUCH_FIRST;
	r->verify_n = n < touched ? n : touched;
	r->verify_byte = rp_fill(ref);
}

/* realloc = alloc + copy + free through the policy, one timed op. */
static int rp_realloc(struct al_worker *w, struct rp_worker *r, const struct al_trace_op *op)
{
	struct rp_shared *s = w->shared;
	uint32_t ref = op->ref;
	void *np;
	int ret;

	if (ref == AL_TRACE_NOID && (op->flags & AL_TF_UNKNOWN) && (ret = rp_unknown(w, r, op)))
		return ret;
	if (ref != AL_TRACE_NOID && !op->size && op->id == AL_TRACE_NOID)
		return rp_release(w, r, s, op, ref); /* realloc(p, 0) frees p */
	np = w->a->ops->alloc(w->a, &w->ctx, op->size ? op->size : 1, 0);
	if (ref == AL_TRACE_NOID) {
		rp_created(r, s, op->id, np, op->size);
		return 0;
	}
	if (op->id == AL_TRACE_NOID) { /* the program's realloc failed: p stays */
		rp_created(r, s, AL_TRACE_NOID, np, op->size);
		rp_ref_done(s, r, ref);
		return 0;
	}
	if (np)
		rp_copy(r, s, np, &s->obj[ref], op->size, ref);
	ret = rp_release(w, r, s, op, ref);
	rp_created(r, s, op->id, np, op->size);
	return ret;
}

static int rp_op(struct al_worker *w, struct rp_worker *r, const struct al_trace_op *op)
{
	switch (op->kind) {
	case AL_TK_FREE: return rp_free(w, r, op);
	case AL_TK_REALLOC: return rp_realloc(w, r, op);
	case AL_TK_USABLE_SIZE: return rp_usable(w, r, op);
	case AL_TK_THREAD_START:
	case AL_TK_THREAD_EXIT: return 0;
	default: return rp_alloc(w, r, op);
	}
}

/* ---- the untimed work around ops ---- */

static al_noinline int rp_verify(struct al_worker *w, struct rp_worker *r,
				 const struct al_trace_op *op)
{
	const uint8_t *b = r->post_p;

	for (uint64_t i = 0; i < r->verify_n; i++)
		if (b[i] != r->verify_byte) {
			snprintf(w->err, w->errlen,
				 "thread %u, op %llu: realloc of object %u to %u: byte %llu is "
				 "0x%02x, the old object's was 0x%02x",
				 r->tid, (unsigned long long)r->next, op->ref, op->id,
				 (unsigned long long)i, b[i], r->verify_byte);
			return -EIO;
		}
	return 0;
}

/* Drop an object the program did not get, or touch a new one and only then
 * publish it: another thread may realloc or free it as soon as it sees the
 * pointer, so the creator must be done writing it. After an op that failed
 * (ret), the object is published untouched, for teardown to free. */
static al_noinline int rp_post(struct al_worker *w, struct rp_worker *r,
			       const struct al_trace_op *op, int ret)
{
	rp_clock_stop(r);
	if (r->post_drop) {
		int fret = w->a->ops->free(w->a, &w->ctx, r->post_p);

		if (fret && !ret)
			ret = rp_free_failed(w, r, op, r->post_p, fret);
	} else {
		if (r->verify_n && !ret)
			ret = rp_verify(w, r, op);
		memset(r->post_p, rp_fill(r->post_id), r->post_n);
		__atomic_store_n(&((struct rp_shared *)w->shared)->obj[r->post_id].p, r->post_p,
				 __ATOMIC_RELEASE);
	}
	r->post_p = NULL;
	r->post_drop = 0;
	r->verify_n = 0;
	return ret;
}

/* Spin the recorded gap before op r->next (untimed): true once it is over;
 * false when stopping, or after RP_THINK_SLICE_NS of it, so that the cycle
 * ends and the engine's watchdog sees progress through a long gap (the next
 * cycle spins the rest, to the same end). */
static al_noinline bool rp_think(struct al_worker *w, struct rp_worker *r, uint32_t dt)
{
	uint64_t now, slice_end;

	rp_clock_stop(r);
	now = al_ticks();
	if (r->think_op != r->next + 1) { /* this op's gap starts now */
		r->think_op = r->next + 1;
		r->think_end = now + (uint64_t)((double)dt * al_clock.ticks_per_ns);
	}
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED))) {
		al_sim_wait_until(r->think_end); /* simulated CPUs: the gap is virtual time */
		return true;
	}
	slice_end = now + (uint64_t)((double)RP_THINK_SLICE_NS * al_clock.ticks_per_ns);
	while ((now = al_ticks()) < r->think_end)
		if (al_worker_stopping(w) || now >= slice_end)
			return false;
	return true;
}

/* Whether op may run now: its object exists and nobody still reads it
 * before a consumption; a thread start waits for its parent to get there. */
static inline bool rp_ready(struct rp_shared *s, struct rp_worker *r, const struct al_trace_op *op)
{
	const struct rp_obj *o;

	if (al_unlikely(op->kind == AL_TK_THREAD_START)) {
		if (op->aux == AL_TRACE_NOID || op->aux == r->tid) /* no parent to wait for */
			return true;
		return __atomic_load_n(&s->prog[op->aux].next_seq, __ATOMIC_ACQUIRE) >
		       r->th->seq[r->next];
	}
	if (op->ref == AL_TRACE_NOID)
		return true;
	o = &s->obj[op->ref];
	if ((op->flags & AL_TF_CROSS) && !__atomic_load_n(&o->p, __ATOMIC_ACQUIRE))
		return false;
	return !rp_consumes(op) || !__atomic_load_n(&o->waits, __ATOMIC_ACQUIRE);
}

/* The op at r->next cannot run yet: spin a little, then give up the cycle. */
static al_noinline bool rp_wait(struct al_worker *w, struct rp_shared *s, struct rp_worker *r,
				const struct al_trace_op *op)
{
	rp_clock_stop(r);
	if (r->blocked_at != r->next) {
		r->blocked_at = r->next;
		r->cross_waits += op->kind != AL_TK_THREAD_START;
	}
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED))) {
		al_sim_yield(); /* simulated CPUs: spin until the next model CPU has run */
		return rp_ready(s, r, op);
	}
	for (unsigned i = 0; i < RP_SPIN; i++) {
		al_cpu_relax();
		if (rp_ready(s, r, op))
			return true;
	}
	(void)w;
	sched_yield(); /* the thread it waits for may need this CPU */
	return false;
}

/* Replay ops up to `end` or until one must wait. */
static int rp_run(struct al_worker *w, struct rp_shared *s, struct rp_worker *r, uint64_t end)
{
	const struct al_trace_op *ops = r->th->ops;
	int ret = 0;

	for (; r->next < end; r->next++) {
		const struct al_trace_op *op = &ops[r->next];

		if ((op->ref != AL_TRACE_NOID || op->kind == AL_TK_THREAD_START) &&
		    al_unlikely(!rp_ready(s, r, op)) && !rp_wait(w, s, r, op))
			break;
		if (al_unlikely(s->think) && op->dt && !rp_think(w, r, op->dt))
			break;
		rp_clock_op(r, op->kind);
		ret = rp_op(w, r, op);
		if (r->per_op)
			rp_clock_done(w, r, op->kind);
		r->kind_ops[op->kind]++;
		if (al_unlikely(r->post_p))
			ret = rp_post(w, r, op, ret);
		if (al_unlikely(ret))
			break;
	}
	rp_clock_stop(r);
	return ret;
}

/* What the worker did so far, as the engine's figures. */
static void rp_publish(struct al_worker *w, struct rp_worker *r)
{
	uint64_t ao = 0, at = 0;

	for (unsigned k = 0; k < AL_TK_NR; k++)
		if (rp_alloc_side(k)) {
			ao += r->kind_ops[k];
			at += r->kind_ticks[k];
		}
	w->alloc_ops = ao;
	w->alloc_ticks = at;
	w->free_ops = r->kind_ops[AL_TK_FREE];
	w->free_ticks = r->kind_ticks[AL_TK_FREE];
	w->alloc_cross = r->cross;
	if (r->live) {
		al_worker_live(w, r->live);
		r->live = 0;
	}
}

static int rp_cycle(struct al_worker *w)
{
	struct rp_shared *s = w->shared;
	struct rp_worker *r = w->priv;
	uint64_t end;
	int ret;

	if (!w->measuring) /* a pass is the measured unit: the warmup does nothing */
		return AL_CYCLE_DONE;
	end = r->th->nops - r->next > RP_CHUNK ? r->next + RP_CHUNK : r->th->nops;
	ret = rp_run(w, s, r, end);
	rp_publish(w, r);
	__atomic_store_n(&s->prog[r->tid].next_seq,
			 r->next < r->th->nops ? r->th->seq[r->next] : UINT64_MAX,
			 __ATOMIC_RELEASE);
	if (ret)
		return ret;
	return r->next < r->th->nops ? 0 : AL_CYCLE_DONE;
}

static const char *const rp_ops_names[AL_TK_NR] = {
	"malloc_ops",	      "calloc_ops",	   "realloc_ops",      "free_ops",
	"posix_memalign_ops", "aligned_alloc_ops", "memalign_ops",     "valloc_ops",
	"pvalloc_ops",	      "usable_size_ops",   "thread_start_ops", "thread_exit_ops",
};
static const char *const rp_ns_names[AL_TK_NR] = {
	"malloc_ns",	     "calloc_ns",	 "realloc_ns",	"free_ns",
	"posix_memalign_ns", "aligned_alloc_ns", "memalign_ns", "valloc_ns",
	"pvalloc_ns",	     "usable_size_ns",	 NULL,		NULL,
};

/* A mean per op over every worker's ops: the worker's total with its op
 * count as the metric's count, so the engine's merge divides by all ops. */
static void rp_metric_mean(struct al_worker *w, const char *name, double total, uint64_t ops)
{
	al_worker_metric(w, name, total, AL_METRIC_MEAN);
	for (unsigned i = 0; i < w->nmetrics; i++)
		if (w->metrics[i].name == name) {
			w->metrics[i].count = ops;
			return;
		}
}

/* The worker's metrics (after the measured phase; the table is the run's). */
static void rp_worker_fini(struct al_worker *w)
{
	struct rp_worker *r = w->priv;

	if (!r)
		return;
	for (unsigned k = 0; k < AL_TK_NR; k++) {
		al_worker_metric(w, rp_ops_names[k], (double)r->kind_ops[k], AL_METRIC_SUM);
		if (rp_ns_names[k] && r->kind_ops[k])
			rp_metric_mean(w, rp_ns_names[k], al_ticks_to_ns((double)r->kind_ticks[k]),
				       r->kind_ops[k]);
	}
	al_worker_metric(w, "refused", (double)r->refused, AL_METRIC_SUM);
	al_worker_metric(w, "unknown_frees", (double)r->unknown, AL_METRIC_SUM);
	al_worker_metric(w, "cross_waits", (double)r->cross_waits, AL_METRIC_SUM);
	al_worker_metric(w, "clock_reads", (double)r->clock_reads, AL_METRIC_SUM);
	al_worker_metric(w, "reallocs_copied_bytes", (double)r->copied, AL_METRIC_SUM);
	al_worker_metric(w, "skipped", (double)r->skipped, AL_METRIC_SUM);
	al_worker_metric(w, "unfinished_ops", (double)(r->th->nops - r->next), AL_METRIC_SUM);
	al_meta_free(r, sizeof(*r));
	w->priv = NULL;
}

static const struct al_workload_desc replay_desc = {
	.name = "replay",
	AL_WORKLOAD_DESC_INIT,
	.doc = "a recorded program's malloc-family calls, one worker per program thread, in "
	       "order (cross-thread objects wait until they exist); one pass per run",
	.flags = AL_WL_LIVE | AL_WL_FINITE | AL_WL_SIM,
	.nparams = P_NR,
	.params = rp_params,
	.size_param = -1,
	.setup = rp_setup,
	.worker_init = rp_worker_init,
	.cycle = rp_cycle,
	.worker_fini = rp_worker_fini,
	.teardown = rp_teardown,
	.check_params = rp_check_params,
};

AL_REGISTER_WORKLOAD(replay_desc)
