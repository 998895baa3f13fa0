/* SPDX-License-Identifier: MIT */
/*
 * failnth: fault injection. A pass-through layer that makes the
 * layer below "fail" its Nth call, or every Nth call, of one kind (alloc,
 * alloc_bulk, free, free_bulk) or of any kind. Put it under the layer whose
 * error paths you want to exercise: "percpu > failnth(op=alloc_bulk,nth=3,
 * every=1) > buddy" makes every third refill of the per-CPU cache fail.
 *
 * A failed call never reaches the layer below, so nothing is allocated or
 * freed there: allocations return NULL / 0 with c->err = the `err`
 * parameter (-ENOMEM by default, or -EBUSY, -ETIMEDOUT); frees return
 * -ETIMEDOUT with the objects untouched (what a lock that gave up returns:
 * the only error the contract allows for a valid free), so the layer above
 * must keep them and lose nothing. nth = 0 (the default) injects nothing.
 *
 * Invariants: calls_<kind> counts every call of the kind seen, failed_<kind>
 * the injected failures; the layer caches nothing: its bytes_held is the
 * layer below's.
 * Locking: none; the call number is one relaxed atomic counter shared by
 * every CPU (the Nth call of the whole stack, not of one CPU).
 * Cost: one atomic increment per call when armed, a branch otherwise.
 */
#include <errno.h>
#include <stdio.h>

#include "alloclab/alloclab.h"

/* The calls_* and failed_* entries are in the order of the FN_* kinds. */
#define FAILNTH_COUNTERS(C, D, P)                                                    \
	C(P, calls_alloc, 0, "alloc calls seen")                                     \
	C(P, calls_alloc_bulk, 0, "alloc_bulk calls seen")                           \
	C(P, calls_free, 0, "free calls seen (free and free_flags)")                 \
	C(P, calls_free_bulk, 0, "free_bulk calls seen")                             \
	C(P, failed_alloc, AL_CTR_KEY, "alloc calls failed by injection")            \
	C(P, failed_alloc_bulk, AL_CTR_KEY, "alloc_bulk calls failed by injection")  \
	C(P, failed_free, AL_CTR_KEY, "free calls failed by injection (-ETIMEDOUT)") \
	C(P, failed_free_bulk, AL_CTR_KEY, "free_bulk calls failed by injection (-ETIMEDOUT)")

AL_COUNTERS_DEFINE(FAILNTH_COUNTERS, FNTH_, failnth_counters);

/* Kinds of call, in the order of the `op` choices; FN_ANY selects them all. */
enum { FN_ALLOC, FN_ALLOC_BULK, FN_FREE, FN_FREE_BULK, FN_ANY };
#define FN_OP_CHOICES  "alloc,alloc_bulk,free,free_bulk,any"
#define FN_ERR_CHOICES "enomem,ebusy,etimedout"

enum { P_OP, P_NTH, P_EVERY, P_ERR, P_NR };

struct failnth {
	struct al_allocator base; /* must be first */
	unsigned op;		  /* FN_* the injection applies to */
	uint64_t nth;		  /* fail the nth selected call (1-based); 0 = never */
	bool every;		  /* fail every nth selected call, not only the nth */
	int err;		  /* c->err of a failed allocation (negative errno) */
	uint64_t seq;		  /* selected calls so far (relaxed atomic) */
	struct al_counters ctr;	  /* FAILNTH_COUNTERS, per [cpu][level] */
	struct al_stats scratch;  /* stats(): the layer below's, for its bytes_held */
};

static inline struct failnth *to_fn(struct al_allocator *a)
{
	return (struct failnth *)a;
}

/* Count a call of `kind`; true when this one is to fail. */
static inline bool fn_fail(struct failnth *f, struct al_ctx *c, unsigned kind)
{
	uint64_t *b = al_ctr_block(&f->ctr, c);
	uint64_t n;

	al_ctr_add(b, FNTH_calls_alloc + kind, 1);
	if (!f->nth || (f->op != FN_ANY && f->op != kind))
		return false;
	n = __atomic_add_fetch(&f->seq, 1, __ATOMIC_RELAXED);
	if (f->every ? n % f->nth : n != f->nth)
		return false;
	al_ctr_add(b, FNTH_failed_alloc + kind, 1);
	return true;
}

static void *fn_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct failnth *f = to_fn(a);

	if (al_unlikely(fn_fail(f, c, FN_ALLOC))) {
		c->err = f->err;
		return NULL;
	}
	return al_alloc(a->below, c, size, flags);
}

static int fn_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	if (!p)
		return al_free(a->below, c, p);
	if (al_unlikely(fn_fail(to_fn(a), c, FN_FREE)))
		return -ETIMEDOUT;
	return al_free(a->below, c, p);
}

static int fn_free_flags(struct al_allocator *a, struct al_ctx *c, void *p, unsigned flags)
{
	if (p && al_unlikely(fn_fail(to_fn(a), c, FN_FREE)))
		return -ETIMEDOUT;
	return al_free_flags(a->below, c, p, flags);
}

static int fn_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
			 void **out, unsigned flags)
{
	struct failnth *f = to_fn(a);

	if (al_unlikely(fn_fail(f, c, FN_ALLOC_BULK))) {
		c->err = f->err;
		return 0;
	}
	return al_alloc_bulk(a->below, c, size, n, out, flags);
}

static int fn_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n)
{
	if (n && al_unlikely(fn_fail(to_fn(a), c, FN_FREE_BULK)))
		return -ETIMEDOUT;
	return al_free_bulk(a->below, c, ptrs, n);
}

static void fn_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	(void)a; /* nothing cached here; the stack drains the layer below itself */
	(void)c;
	(void)scope;
}

/* What it hands out is what the layer below hands out through it. */
static void fn_stats(struct al_allocator *a, struct al_stats *out)
{
	struct al_stats *below = &to_fn(a)->scratch;

	below->n = 0;
	below->bytes_held = 0;
	a->below->ops->stats(a->below, below);
	out->layer = "failnth";
	out->bytes_held = below->bytes_held;
	al_counters_report(&to_fn(a)->ctr, out);
}

/* Which calls fail, and how; the layer below is the one that fails. */
static int fn_init(struct al_allocator *a, const int64_t *params)
{
	static const int errs[] = { -ENOMEM, -EBUSY, -ETIMEDOUT };
	struct failnth *f = to_fn(a);

	if (!a->below)
		return -EINVAL;
	f->op = (unsigned)params[P_OP];
	f->nth = (uint64_t)params[P_NTH];
	f->every = params[P_EVERY];
	f->err = errs[params[P_ERR]];
	return al_counters_init_desc(&f->ctr, failnth_counters, FNTH_NR, 0, a->ncpu);
}

/* Frees what init made; a part not made yet is skipped. */
static void fn_fini(struct al_allocator *a)
{
	al_counters_fini(&to_fn(a)->ctr);
}

/* name, type, default, min, max, choices, doc */
static const struct al_param_desc fn_params[P_NR] = {
	[P_OP] = { "op", AL_PARAM_ENUM, FN_ANY, 0, FN_ANY, FN_OP_CHOICES,
		   "which calls of the layer below to fail" },
	[P_NTH] = { "nth", AL_PARAM_INT, 0, 0, 1ll << 40, NULL,
		    "fail the nth such call (1-based); 0 = never" },
	[P_EVERY] = { "every", AL_PARAM_BOOL, 0, 0, 1, NULL,
		      "fail every nth call, not only the nth" },
	[P_ERR] = { "err", AL_PARAM_ENUM, 0, 0, 2, FN_ERR_CHOICES,
		    "the error of a failed allocation (frees fail with ETIMEDOUT)" },
};

AL_LAYER(failnth, struct failnth, fn_init, fn_fini,
	 (.alloc = fn_alloc, .free = fn_free, .alloc_bulk = fn_alloc_bulk,
	  .free_bulk = fn_free_bulk, .owns = al_below_owns, .usable_size = al_below_usable_size,
	  .drain = fn_drain, .stats = fn_stats, .free_flags = fn_free_flags),
	 (.doc = "fault injection: the layer below fails its Nth (or every Nth) call",
	  .features = AL_F_BACKEND | AL_F_OWNS_BELOW | AL_F_BULK | AL_F_OWNS | AL_F_USABLE |
		      AL_F_PASSES_SIZE,
	  .nparams = P_NR, .params = fn_params, .counters = failnth_counters, .ncounters = FNTH_NR))
