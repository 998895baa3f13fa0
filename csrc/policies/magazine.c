/* SPDX-License-Identifier: MIT */
/*
 * magazine: Bonwick's magazines and depot (USENIX 2001), as libarena's
 * bmag/bdepot in the libarena dev tree: a third design beside "spill" and
 * "transfer cache".
 *
 * Per CPU and order: a current and a previous magazine (M rounds each).
 * Per order: a depot of full magazines and of empty ones, under a lock.
 * A fixed pool of 2*ncpu + depot magazines per order is made at create, so
 * full + empty in the depot always equals `depot` (the bound on full ones):
 * whenever the depot has room for a full magazine it also has an empty one.
 *
 * alloc: pop cur; cur empty and prev has rounds → swap; both empty → lock
 *        the depot: a full magazine there → prev goes back as empty, cur
 *        becomes prev, the full one becomes cur; none → refill cur with ONE
 *        backend alloc_bulk(M), stacked to pop in ascending address order
 *        (fc_stack_ascending).
 * free:  push cur; cur full and prev empty → swap; both full → lock the
 *        depot: room → prev goes in as full, cur becomes prev, an empty one
 *        becomes cur; depot full → prev is flushed to the backend with ONE
 *        free_bulk and reused.
 * Guard: the same per-CPU `active` guard as percpu; a nested operation takes
 *        the backend path (counted).
 * Classes: as percpu's: an object is counted and cached under the class of
 *        its usable size, on alloc as on free; an order the backend serves
 *        with another class (pages) is routed to that class's magazines, or
 *        to the backend directly when that class is not cached.
 * ASan: a cached round is poisoned over its class size (frontcache.h), from
 * the free that caches it (or the refill that brings it) to the pop.
 * Locks: the per-order depot locks are arena_spinlock_t (lock=arena, as
 * bdepot's; lock.c: no deadlock check, four queue nodes per CPU, failures
 * counted by reason), or the queued lock with its deadlock check.
 * Lock order: depot lock -> backend only in drain (teardown).
 * Cost: hits touch two pointers and add to one per-order counter slot of
 * the CPU's block; a depot exchange moves one pointer under a per-order
 * lock, whatever M is (Bonwick's point: the depot moves magazines, not
 * objects).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "frontcache.h"

enum { P_rounds, P_depot, P_orders, P_guard, P_lock_budget, P_lock, P_NR };
enum { MLOCK_ARENA, MLOCK_QUEUED };

static const struct al_param_desc magazine_params[P_NR] = {
	[P_rounds] = { "rounds", AL_PARAM_INT, 8, 1, 512, NULL,
		       "objects per magazine (libarena BMAG_CAPACITY = 8)" },
	[P_depot] = { "depot", AL_PARAM_INT, 16, 1, 4096, NULL,
		      "full magazines the depot may hold per order" },
	[P_orders] = { "orders", AL_PARAM_INT, 8, 1, 16, NULL, "orders below this are cached" },
	[P_guard] = { "guard", AL_PARAM_ENUM, FC_GUARD_ATOMIC, 0, 1, FC_GUARD_CHOICES,
		      "per-CPU guard: atomic cmpxchg or a local flag" },
	[P_lock_budget] = { "lock_budget", AL_PARAM_NS, 250000000, 0, 10000000000ll, NULL,
			    "spin budget of the depot locks" },
	[P_lock] = { "lock", AL_PARAM_ENUM, MLOCK_ARENA, 0, 1, "arena,queued",
		     "arena: arena_spinlock_t as the BPF header has it (no deadlock check, "
		     "4 queue nodes per CPU); queued: fails at once when its own CPU holds it "
		     "(EDEADLK)" },
};

/*
 * The hit paths add to one slot each, found once per call: the per-order
 * alloc_hit[] and free_hit[] arrays after the named counters. Counts that
 * follow from them (hits, allocs, frees, bytes) are reported, not counted.
 */
#define MAGAZINE_COUNTERS(C, D, P)                                                          \
	D(P, allocs, AL_CTR_KEY, "", "allocations of cached classes through this layer")    \
	D(P, frees, AL_CTR_KEY, "", "frees of cached classes through this layer")           \
	D(P, hits, AL_CTR_KEY, "", "allocations served by cur or prev")                     \
	D(P, free_hits, AL_CTR_KEY, "", "frees taken by cur or prev")                       \
	C(P, swaps, 0, "cur/prev exchanges")                                                \
	C(P, depot_gets, AL_CTR_KEY, "full magazines taken from the depot")                 \
	C(P, depot_puts, AL_CTR_KEY, "full magazines put in the depot")                     \
	C(P, backend_refills, AL_CTR_KEY, "magazines filled with one backend alloc_bulk")   \
	C(P, backend_flushes, AL_CTR_KEY, "magazines emptied with one backend free_bulk")   \
	C(P, refill_failed, AL_CTR_KEY, "refills that brought nothing")                     \
	C(P, guard_busy, AL_CTR_KEY, "operations that found the guard held")                \
	C(P, uncached, 0, "operations on orders that are not cached")                       \
	D(P, bytes_allocated, 0, "", "class bytes handed out")                              \
	D(P, bytes_freed, 0, "", "class bytes taken back")                                  \
	C(P, routed_hits, 0, "hits from the magazines of the class an order is routed to")  \
	C(P, other_allocs, 0, "allocations of a cached class that were not hits")           \
	C(P, other_bytes_allocated, 0, "class bytes of other_allocs (and refused refills)") \
	C(P, other_frees, 0, "frees of a cached class that cur and prev could not take")    \
	C(P, other_bytes_freed, 0, "class bytes of other_frees")                            \
	AL_LOCK_COUNTERS(C, P, lock, "the depot locks")                                     \
	AL_LOCK_REASON_COUNTERS(C, P, lock, "the depot locks")                              \
	D(P, depot_full_magazines, AL_CTR_GAUGE, "", "full magazines in the depots")        \
	D(P, objects_cached, AL_CTR_GAUGE, "", "rounds in the CPUs' magazines and the depots")

AL_COUNTERS_DEFINE(MAGAZINE_COUNTERS, MAG_, magazine_counters);

/* The per-order slots after the named counters. */
#define MAG_ALLOC_HIT(order) (MAG_NR + (order))
#define MAG_FREE_HIT(order)  (MAG_NR + FC_ORDERS + (order))
#define MAG_EXTRA	     (2 * FC_ORDERS)

struct mag {
	uint32_t rounds; /* objects held */
	uint32_t pad;
	void *obj[]; /* M slots */
};

struct depot {
	struct al_lock lock; /* protects the lists */
	unsigned nfull;	     /* full magazines in full[] */
	unsigned nempty;     /* empty magazines in empty[] */
	struct mag **full;   /* stack, capacity `depot` */
	struct mag **empty;  /* stack, capacity `depot` */
};

struct mg_cpu {
	int active; /* the guard */
	int pad;
	struct mag *pair[][2]; /* per order: [0] = cur, [1] = prev */
};

struct magazine {
	struct al_allocator base; /* must be first */
	unsigned m;		  /* rounds per magazine */
	unsigned depot_max;	  /* full magazines per order in the depot */
	unsigned norders;
	int guard;
	size_t mag_size;	      /* bytes per magazine */
	size_t cpu_stride;	      /* bytes per mg_cpu, 64-aligned */
	char *cpus;		      /* ncpu mg_cpu blocks */
	struct depot *depots;	      /* norders */
	const struct al_index *index; /* the backend's object index, or NULL (index.h) */
	bool exact; /* fc_pow2_exact(backend): a refill's objects are of its class */
	char *pool; /* every magazine and the depot stacks */
	size_t pool_len;
	size_t cpus_len;
	uint8_t route[FC_ORDERS]; /* the class each order is served from (fc_route_get) */
	struct al_counters ctr;	  /* magazine_counters, then MAG_EXTRA slots */
};

static inline struct mg_cpu *mg_cpu_ptr(struct magazine *mg, unsigned cpu)
{
	return (struct mg_cpu *)(mg->cpus + (size_t)cpu * mg->cpu_stride);
}

static inline void swap_pair(struct mag **pair)
{
	struct mag *t = pair[0];

	pair[0] = pair[1];
	pair[1] = t;
}

/* cur and prev are both empty. *got: the class of what the backend handed
 * out when it refilled cur (-1: none cached); objects of a class other than
 * `order` go straight back, and the caller routes the order there. */
static al_noinline void *mg_alloc_slow(struct magazine *mg, struct al_ctx *c, struct mag **pair,
				       unsigned order, int *got)
{
	struct depot *d = &mg->depots[order];
	struct mag *cur = pair[0];
	unsigned keep, stuck;
	int n;

	*got = (int)order;
	if (!al_lock_acquire(&d->lock, c)) {
		if (d->nfull) {
			d->empty[d->nempty++] = pair[1];
			pair[1] = cur;
			pair[0] = cur = d->full[--d->nfull];
			al_lock_release(&d->lock, c);
			al_count(&mg->ctr, c, MAG_depot_gets, 1);
			return cur->obj[--cur->rounds];
		}
		al_lock_release(&d->lock, c);
	} /* a failed acquisition is the lock's lock_failed */
	n = al_alloc_bulk(mg->base.below, c, fc_class_size(order), mg->m, cur->obj, 0);
	if (n <= 0) {
		al_count(&mg->ctr, c, MAG_refill_failed, 1);
		if (!c->err)
			c->err = -ENOMEM;
		return NULL;
	}
	/* Objects of another class go back; what the backend will not take
	 * back stays counted as handed out, for the leak check to name. */
	keep = fc_keep_class(mg->base.below, mg->index, c, cur->obj, (unsigned)n, order,
			     mg->norders, mg->exact, got, &stuck);
	if (al_unlikely(stuck))
		al_count(&mg->ctr, c, MAG_other_bytes_allocated,
			 (uint64_t)stuck * fc_class_size(order));
	if (al_unlikely(!keep))
		return NULL; /* *got: the class the backend hands out instead */
	*got = (int)order;
	al_count(&mg->ctr, c, MAG_backend_refills, 1);
	fc_stack_ascending(cur->obj, keep);
	al_track_poison_all(cur->obj, keep - 1, fc_class_size(order));
	cur->rounds = keep - 1;
	return cur->obj[keep - 1];
}

/* Pop from the CPU's pair of class `order` that requests of another order
 * are routed to: cur, prev, the depot, a refill. */
static void *mg_pop(struct magazine *mg, struct al_ctx *c, struct mag **pair, unsigned order,
		    int *got)
{
	*got = (int)order;
	if (pair[0]->rounds || pair[1]->rounds) {
		if (!pair[0]->rounds) {
			swap_pair(pair);
			al_count(&mg->ctr, c, MAG_swaps, 1);
		}
		al_count(&mg->ctr, c, MAG_routed_hits, 1);
		return pair[0]->obj[--pair[0]->rounds];
	}
	return mg_alloc_slow(mg, c, pair, order, got);
}

/* The pair of the requested order is empty, or the order is served from
 * another class (see fc_route_get). Returns the object and in *cls the
 * class it is counted under (-1: the backend's own, not cached). */
static al_noinline void *mg_alloc_miss(struct magazine *mg, struct al_ctx *c, struct mg_cpu *pc,
				       unsigned order, size_t size, int *cls)
{
	unsigned route = fc_route_get(mg->route, order);
	void *p;
	int got;

	if (route == order) {
		p = mg_alloc_slow(mg, c, pc->pair[order], order, &got);
		*cls = (int)order;
		if (al_likely(got == (int)order))
			return p;
		fc_route_set(mg->route, order, got);
		route = got < 0 ? FC_UNCACHED : (unsigned)got;
	}
	if (route != FC_UNCACHED) {
		p = mg_pop(mg, c, pc->pair[route], route, &got);
		*cls = (int)route;
		if (al_likely(got == (int)route))
			return p;
		fc_route_set(mg->route, order, -1); /* no stable class: uncached from now on */
	}
	p = al_alloc(mg->base.below, c, size, 0);
	*cls = fc_class_of(mg->base.below, mg->index, p, mg->norders);
	if (p && *cls < 0)
		al_count(&mg->ctr, c, MAG_uncached, 1);
	return p;
}

/* An allocation that was not a hit of its own order is done: p of class cls
 * (-1: not a cached class, the backend's own). */
static void *mg_alloc_done(struct magazine *mg, struct al_ctx *c, void *p, int cls, size_t size,
			   unsigned flags)
{
	uint64_t *blk;

	if (al_unlikely(!p))
		return NULL;
	if (cls >= 0) /* a round of that class (or the backend's object) */
		al_track_unpoison(p, fc_class_size((unsigned)cls));
	if (flags & AL_ZERO)
		memset(p, 0, size);
	if (cls < 0)
		return p;
	blk = al_ctr_block(&mg->ctr, c);
	al_ctr_add(blk, MAG_other_allocs, 1);
	al_ctr_add(blk, MAG_other_bytes_allocated, fc_class_size((unsigned)cls));
	return p;
}

/* Orders that are not cached go to the backend. It may round one into a
 * cached class: the free files it there, so it is counted alike. */
static al_noinline void *mg_alloc_uncached(struct magazine *mg, struct al_ctx *c, size_t size,
					   unsigned flags)
{
	void *p = al_alloc(mg->base.below, c, size, flags);
	int cls = fc_class_of(mg->base.below, mg->index, p, mg->norders);

	if (p && cls < 0) {
		al_count(&mg->ctr, c, MAG_uncached, 1);
	} else if (p) { /* as the backend exposed it: never cached, nothing to unpoison */
		uint64_t *blk = al_ctr_block(&mg->ctr, c);

		al_ctr_add(blk, MAG_other_allocs, 1);
		al_ctr_add(blk, MAG_other_bytes_allocated, fc_class_size((unsigned)cls));
	}
	return p;
}

/* A nested operation on this CPU holds the guard: the backend serves it. */
static al_noinline void *mg_alloc_guard_busy(struct magazine *mg, struct al_ctx *c, unsigned order,
					     size_t size, unsigned flags)
{
	void *p;

	al_count(&mg->ctr, c, MAG_guard_busy, 1);
	p = al_alloc(mg->base.below, c, fc_class_size(order), 0);
	return mg_alloc_done(mg, c, p, fc_class_of(mg->base.below, mg->index, p, mg->norders), size,
			     flags);
}

/* The hit path: the guard, a pop from cur (or prev) and one count. */
static void *magazine_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct magazine *mg = (struct magazine *)a;
	unsigned order = fc_order(size);
	int cls = (int)order;
	struct mg_cpu *pc;
	struct mag **pair;
	void *p;

	if (al_unlikely(order >= mg->norders || !size))
		return mg_alloc_uncached(mg, c, size, flags);
	pc = mg_cpu_ptr(mg, c->cpu);
	if (al_unlikely(!fc_guard_enter(&pc->active, mg->guard)))
		return mg_alloc_guard_busy(mg, c, order, size, flags);
	pair = pc->pair[order];
	if (al_unlikely(!pair[0]->rounds)) {
		if (!pair[1]->rounds) {
			p = mg_alloc_miss(mg, c, pc, order, size, &cls);
			fc_guard_exit(&pc->active, mg->guard);
			return mg_alloc_done(mg, c, p, cls, size, flags);
		}
		swap_pair(pair);
		al_count(&mg->ctr, c, MAG_swaps, 1);
	}
	p = pair[0]->obj[--pair[0]->rounds];
	fc_guard_exit(&pc->active, mg->guard);
	al_count(&mg->ctr, c, MAG_ALLOC_HIT(order), 1);
	al_track_unpoison(p, fc_class_size(order));
	if (al_unlikely(flags & AL_ZERO))
		memset(p, 0, size);
	return p;
}

/* cur and prev are both full. 0, or an error with p not freed. */
static al_noinline int mg_free_slow(struct magazine *mg, struct al_ctx *c, struct mag **pair,
				    unsigned order, void *p)
{
	struct depot *d = &mg->depots[order];
	struct mag *prev = pair[1];

	if (!al_lock_acquire(&d->lock, c)) {
		if (d->nfull < mg->depot_max) {
			d->full[d->nfull++] = prev;
			pair[1] = pair[0];
			pair[0] = d->empty[--d->nempty];
			al_lock_release(&d->lock, c);
			al_count(&mg->ctr, c, MAG_depot_puts, 1);
			pair[0]->obj[pair[0]->rounds++] = p;
			return 0;
		}
		al_lock_release(&d->lock, c);
	} /* a failed acquisition is the lock's lock_failed */
	al_track_unpoison_all(prev->obj, prev->rounds, fc_class_size(order));
	if (al_free_bulk_sized(mg->base.below, c, prev->obj, prev->rounds, fc_class_size(order)) <
	    0) {
		al_track_poison_all(prev->obj, prev->rounds, fc_class_size(order));
		al_track_unpoison(p, fc_class_size(order));
		return al_free(mg->base.below, c, p);
	}
	al_count(&mg->ctr, c, MAG_backend_flushes, 1);
	prev->rounds = 0;
	swap_pair(pair);
	pair[0]->obj[pair[0]->rounds++] = p;
	return 0;
}

/* A free of a cached class that cur and prev did not take is done. */
static void count_other_free(struct magazine *mg, struct al_ctx *c, unsigned order)
{
	uint64_t *blk = al_ctr_block(&mg->ctr, c);

	al_ctr_add(blk, MAG_other_frees, 1);
	al_ctr_add(blk, MAG_other_bytes_freed, fc_class_size(order));
}

/* Not a cacheable order, or not a live object of the backend: it decides. */
static al_noinline int mg_free_uncached(struct magazine *mg, struct al_ctx *c, void *p, int order)
{
	int ret = al_free(mg->base.below, c, p);

	if (!ret && order >= 0)
		al_count(&mg->ctr, c, MAG_uncached, 1);
	return ret;
}

static al_noinline int mg_free_guard_busy(struct magazine *mg, struct al_ctx *c, void *p,
					  unsigned order)
{
	int ret;

	al_count(&mg->ctr, c, MAG_guard_busy, 1);
	ret = al_free(mg->base.below, c, p);
	if (!ret)
		count_other_free(mg, c, order);
	return ret;
}

/* The push path: the guard, a push onto cur (or prev) and one count. */
static int magazine_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct magazine *mg = (struct magazine *)a;
	struct al_allocator *below = a->below;
	struct mg_cpu *pc;
	struct mag **pair;
	int order, ret;

	if (!p)
		return 0;
	order = fc_order_floor(fc_usable(below, mg->index, p));
	if (al_unlikely(order < 0 || order >= (int)mg->norders))
		return mg_free_uncached(mg, c, p, order);
	pc = mg_cpu_ptr(mg, c->cpu);
	if (al_unlikely(!fc_guard_enter(&pc->active, mg->guard)))
		return mg_free_guard_busy(mg, c, p, (unsigned)order);
	pair = pc->pair[order];
	al_assert(pair[0]->rounds <= mg->m && pair[1]->rounds <= mg->m);
	/* cached by every branch below; mg_free_slow unpoisons it if not */
	al_track_poison(p, fc_class_size((unsigned)order));
	if (al_unlikely(pair[0]->rounds >= mg->m)) {
		if (pair[1]->rounds) {
			ret = mg_free_slow(mg, c, pair, (unsigned)order, p);
			fc_guard_exit(&pc->active, mg->guard);
			if (!ret)
				count_other_free(mg, c, (unsigned)order);
			return ret;
		}
		swap_pair(pair);
		al_count(&mg->ctr, c, MAG_swaps, 1);
	}
	pair[0]->obj[pair[0]->rounds++] = p;
	fc_guard_exit(&pc->active, mg->guard);
	al_count(&mg->ctr, c, MAG_FREE_HIT(order), 1);
	return 0;
}

/* Empty a magazine into the backend. A batch it refuses (a transient
 * failure) goes one by one, so one failed free_bulk does not leave the
 * magazine's objects behind at teardown; what still fails stays in it. */
static void flush(struct magazine *mg, struct al_ctx *c, struct mag *m, unsigned order)
{
	m->rounds = fc_give_back_cached(mg->base.below, c, m->obj, m->rounds, fc_class_size(order));
}

static void drain_cpu(struct magazine *mg, struct al_ctx *c, unsigned cpu)
{
	struct mg_cpu *pc = mg_cpu_ptr(mg, cpu);
	unsigned o;

	for (o = 0; o < mg->norders; o++) {
		flush(mg, c, pc->pair[o][0], o);
		flush(mg, c, pc->pair[o][1], o);
	}
}

static void magazine_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct magazine *mg = (struct magazine *)a;
	struct mg_cpu *pc = mg_cpu_ptr(mg, c->cpu);
	unsigned cpu, o;

	if (scope != AL_DRAIN_ALL) {
		if (fc_guard_enter(&pc->active, mg->guard)) {
			drain_cpu(mg, c, c->cpu);
			fc_guard_exit(&pc->active, mg->guard);
		}
		return;
	}
	for (cpu = 0; cpu < a->ncpu; cpu++)
		drain_cpu(mg, c, cpu);
	for (o = 0; o < mg->norders; o++) {
		struct depot *d = &mg->depots[o];

		if (al_lock_acquire(&d->lock, c))
			continue;
		while (d->nfull) {
			struct mag *m = d->full[d->nfull - 1];

			flush(mg, c, m, o);
			if (m->rounds)
				break;
			d->nfull--;
			d->empty[d->nempty++] = m;
		}
		al_lock_release(&d->lock, c);
	}
}

/* Rounds cached per CPU and in the depots, and their class bytes. Relaxed
 * reads: every magazine lives as long as the layer, so a racing reader
 * sees a recent count, never freed memory. */
static uint64_t cached_bytes(struct magazine *mg, uint64_t *objects, uint64_t *full)
{
	uint64_t bytes = 0, n;
	unsigned o, cpu, i;

	*objects = *full = 0;
	for (o = 0; o < mg->norders; o++) {
		struct depot *d = &mg->depots[o];
		unsigned nfull = __atomic_load_n(&d->nfull, __ATOMIC_RELAXED);

		n = 0;
		for (cpu = 0; cpu < mg->base.ncpu; cpu++)
			for (i = 0; i < 2; i++) {
				struct mag *m = __atomic_load_n(&mg_cpu_ptr(mg, cpu)->pair[o][i],
								__ATOMIC_RELAXED);

				n += __atomic_load_n(&m->rounds, __ATOMIC_RELAXED);
			}
		for (i = 0; i < nfull; i++)
			n += __atomic_load_n(
				&__atomic_load_n(&d->full[i], __ATOMIC_RELAXED)->rounds,
				__ATOMIC_RELAXED);
		*objects += n;
		*full += nfull;
		bytes += n * fc_class_size(o);
	}
	return bytes;
}

/* Sum of a per-order slot array: events and class bytes. */
static void sum_orders(const struct magazine *mg, unsigned first, uint64_t *n, uint64_t *bytes)
{
	unsigned o;

	*n = *bytes = 0;
	for (o = 0; o < mg->norders; o++) {
		uint64_t v = al_counters_sum(&mg->ctr, first + o);

		*n += v;
		*bytes += v * fc_class_size(o);
	}
}

static void magazine_stats(struct al_allocator *a, struct al_stats *out)
{
	struct magazine *mg = (struct magazine *)a;
	const struct al_counters *k = &mg->ctr;
	uint64_t cached, full, hits, hit_bytes, pushes, push_bytes;
	uint64_t cbytes = cached_bytes(mg, &cached, &full);

	if (!al_counters_on(k)) {
		/* Every cached round is allocated from the backend's view. */
		out->bytes_held = al_below_bytes_held(a) - (int64_t)cbytes;
		return;
	}
	sum_orders(mg, MAG_ALLOC_HIT(0), &hits, &hit_bytes);
	sum_orders(mg, MAG_FREE_HIT(0), &pushes, &push_bytes);
	al_stats_add(out, "allocs", hits + al_counters_sum(k, MAG_other_allocs));
	al_stats_add(out, "frees", pushes + al_counters_sum(k, MAG_other_frees));
	al_stats_add(out, "hits", hits + al_counters_sum(k, MAG_routed_hits));
	al_stats_add(out, "free_hits", pushes);
	hit_bytes += al_counters_sum(k, MAG_other_bytes_allocated);
	push_bytes += al_counters_sum(k, MAG_other_bytes_freed);
	al_stats_add(out, "bytes_allocated", hit_bytes);
	al_stats_add(out, "bytes_freed", push_bytes);
	out->bytes_held = (int64_t)(hit_bytes - push_bytes);
	al_counters_report(k, out);
	al_stats_add_gauge(out, "depot_full_magazines", full);
	al_stats_add_gauge(out, "objects_cached", cached);
}

static int magazine_check(struct al_allocator *a, char *err, size_t errlen)
{
	struct magazine *mg = (struct magazine *)a;
	unsigned o, cpu;

	for (o = 0; o < mg->norders; o++) {
		struct depot *d = &mg->depots[o];

		if (d->nfull + d->nempty != mg->depot_max) {
			snprintf(err, errlen, "order %u: depot holds %u full + %u empty != %u", o,
				 d->nfull, d->nempty, mg->depot_max);
			return -EFAULT;
		}
		for (cpu = 0; cpu < a->ncpu; cpu++) {
			struct mag **pair = mg_cpu_ptr(mg, cpu)->pair[o];

			if (pair[0]->rounds > mg->m || pair[1]->rounds > mg->m) {
				snprintf(err, errlen, "cpu %u order %u: magazine overfull", cpu, o);
				return -EFAULT;
			}
		}
	}
	return 0;
}

/* Free what init made; a part not made yet is skipped. */
static void magazine_fini(struct al_allocator *a)
{
	struct magazine *mg = (struct magazine *)a;

	al_counters_fini(&mg->ctr);
	al_meta_free(mg->pool, mg->pool_len);
	al_meta_free(mg->cpus, mg->cpus_len);
	al_meta_free(mg->depots, sizeof(struct depot) * mg->norders);
}

/* Every depot lock, in index order: all or none. */
static int magazine_fork_lock(struct al_allocator *a, struct al_ctx *c)
{
	struct magazine *t = (struct magazine *)a;

	return al_lock_acquire_all(&t->depots[0].lock, sizeof(t->depots[0]), t->norders, c);
}

static void magazine_fork_unlock(struct al_allocator *a, struct al_ctx *c)
{
	struct magazine *t = (struct magazine *)a;

	al_lock_release_all(&t->depots[0].lock, sizeof(t->depots[0]), t->norders, c);
}

static int magazine_init(struct al_allocator *a, const int64_t *p)
{
	struct magazine *mg = (struct magazine *)a;
	struct al_allocator *below = a->below;
	unsigned ncpu = a->ncpu;
	unsigned o, cpu, i, per_order;
	char *q;

	if (!below || !below->ops->usable_size)
		return -EINVAL;
	mg->m = (unsigned)p[P_rounds];
	mg->depot_max = (unsigned)p[P_depot];
	mg->norders = (unsigned)p[P_orders];
	mg->guard = (int)p[P_guard];
	fc_route_init(mg->route);
	mg->index = fc_index_of(below);
	mg->exact = fc_pow2_exact(below);
	mg->mag_size = (sizeof(struct mag) + mg->m * sizeof(void *) + AL_CACHELINE - 1) &
		       ~(size_t)(AL_CACHELINE - 1);
	mg->cpu_stride = (sizeof(struct mg_cpu) + mg->norders * 2 * sizeof(struct mag *) +
			  AL_CACHELINE - 1) &
			 ~(size_t)(AL_CACHELINE - 1);
	per_order = 2 * ncpu + mg->depot_max;
	mg->cpus_len = mg->cpu_stride * ncpu;
	mg->pool_len =
		(size_t)mg->norders * (per_order * mg->mag_size +
				       2 * mg->depot_max * sizeof(struct mag *) + AL_CACHELINE);
	mg->cpus = al_meta_alloc(mg->cpus_len);
	mg->pool = al_meta_alloc(mg->pool_len);
	mg->depots = al_meta_alloc(sizeof(struct depot) * mg->norders);
	if (!mg->cpus || !mg->pool || !mg->depots ||
	    al_counters_init_desc(&mg->ctr, magazine_counters, MAG_NR, MAG_EXTRA, ncpu))
		return -ENOMEM;
	q = mg->pool;
	for (o = 0; o < mg->norders; o++) {
		struct depot *dp = &mg->depots[o];

		al_lock_init(&dp->lock, (uint64_t)p[P_lock_budget], false);
		al_lock_count_in(&dp->lock, &mg->ctr, MAG_lock_acquired);
		al_lock_count_reasons_in(&dp->lock, MAG_lock_timeouts);
		if (p[P_lock] == MLOCK_ARENA)
			al_lock_set_arena(&dp->lock);
		dp->full = (struct mag **)q;
		q += mg->depot_max * sizeof(struct mag *);
		dp->empty = (struct mag **)q;
		q += mg->depot_max * sizeof(struct mag *);
		q = (char *)(((uintptr_t)q + AL_CACHELINE - 1) & ~(uintptr_t)(AL_CACHELINE - 1));
		for (cpu = 0; cpu < ncpu; cpu++)
			for (i = 0; i < 2; i++) {
				mg_cpu_ptr(mg, cpu)->pair[o][i] = (struct mag *)q;
				q += mg->mag_size;
			}
		for (i = 0; i < mg->depot_max; i++) {
			dp->empty[dp->nempty++] = (struct mag *)q;
			q += mg->mag_size;
		}
	}
	return 0;
}

/* destroy hands every cached object back while the layer below exists. */
AL_LAYER_SHUTDOWN(
	magazine, struct magazine, magazine_init, al_layer_drain_all, magazine_fini,
	(.alloc = magazine_alloc, .free = magazine_free, .owns = al_below_owns,
	 .usable_size = al_below_usable_size, .drain = magazine_drain, .stats = magazine_stats,
	 .check = magazine_check, .fork_lock = magazine_fork_lock,
	 .fork_unlock = magazine_fork_unlock),
	(.doc = "Bonwick magazines: cur + prev per CPU and order, a depot of full and empty "
		"magazines (libarena bmag/bdepot)",
	 .features = AL_F_BACKEND | AL_F_OWNS_BELOW | AL_F_NEEDS_DISTINCT | AL_F_OWNS |
		     AL_F_USABLE | AL_F_NMI_SAFE | AL_F_PASSES_SIZE,
	 .max_size = 0, .nparams = P_NR, .params = magazine_params, .counters = magazine_counters,
	 .ncounters = MAG_NR))
