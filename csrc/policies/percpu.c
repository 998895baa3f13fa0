/* SPDX-License-Identifier: MIT */
/*
 * percpu: per-CPU LIFO object caches in front of any backend (the "spill"
 * design of seed 000, libarena's buddy_cache).
 *
 * Layout: one block per CPU, cache-line aligned:
 *
 *   cpu block: [active][pad to 64] [order 0: elems, objects[capacity]] ...
 *                                  [order N-1: ...]  (each order 64-aligned)
 *
 * Classes are buddy orders (16 B << order); orders >= `orders` are not
 * cached and go straight to the backend.
 *
 * alloc(size):  enter the CPU's guard (cmpxchg on `active`, or a plain flag
 *               with guard=local); pop the order's stack; on a miss refill
 *               with ONE backend alloc_bulk(class size, batch) and pop; the
 *               batch is stacked so that it pops in ascending address order
 *               (fc_stack_ascending).
 * free(p):      the order comes from the backend's index read inline (buddy:
 *               the order nibble, as buddy_cache_free reads idx_get_order;
 *               index.h), else from its usable_size(p); push;
 *               a full stack first spills its top `batch` objects with ONE
 *               backend free_bulk. If the spill fails (a transfer cache with
 *               full=single refuses it), the object alone goes to the backend
 *               and the stack stays full: the "two locks per free" path the
 *               reviewer describes, which the counters make visible.
 * Guard busy:   a nested operation on the same CPU (signal handler = NMI
 *               model) takes the backend path directly; counted.
 * Classes:      a stack holds objects whose usable size is of its class, and
 *               every object is counted under that class, on alloc as on
 *               free. A backend that hands out another class for a class
 *               size (pages: a 4 KiB page for 16 bytes) is found at the
 *               first refill: the objects go back, and that order is served
 *               from the stack of the class it gets (orders=9 caches pages),
 *               or straight from the backend when that class is not cached.
 *
 * Invariants: 0 <= elems <= capacity; every cached object is allocated from
 * the backend's point of view (so backend bytes_held includes the caches,
 * and drain brings both layers back to baseline).
 * Cost: a hit is a guard RMW, one load and one store; a miss or a spill is
 * one backend bulk call (one buddy lock per `batch` objects).
 * Not detected here: a double free of a cached object (the backend still sees
 * it allocated), as with SLUB's fast path without debugging. Under ASan a
 * cached object is poisoned (frontcache.h), so a use after free is caught.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "frontcache.h"

enum { P_capacity, P_batch, P_orders, P_guard, P_NR };

static const struct al_param_desc percpu_params[P_NR] = {
	[P_capacity] = { "capacity", AL_PARAM_INT, 16, 1, 1024, NULL,
			 "objects per CPU per order (seed: 16 = 2 x batch)" },
	[P_batch] = { "batch", AL_PARAM_INT, 8, 1, 512, NULL,
		      "objects per refill (alloc_bulk) and per spill (free_bulk)" },
	[P_orders] = { "orders", AL_PARAM_INT, 8, 1, 16, NULL,
		       "orders below this are cached (8: objects up to 2 KiB)" },
	[P_guard] = { "guard", AL_PARAM_ENUM, FC_GUARD_ATOMIC, 0, 1, FC_GUARD_CHOICES,
		      "per-CPU guard: atomic cmpxchg (seed) or a local flag" },
};

/*
 * The hit paths count one event each in the header of the stack they pop or
 * push (struct pc_stack: the line the hit writes anyway), not in the
 * counters' blocks. Counts that follow from those (hits, allocs, frees,
 * bytes) are reported by stats(), not counted.
 */
#define PERCPU_COUNTERS(C, D, P)                                                                 \
	D(P, allocs, AL_CTR_KEY, "",                                                             \
	  "allocations of a cached class (uncached orders: uncached_allocs)")                    \
	D(P, frees, AL_CTR_KEY, "", "frees of a cached class (uncached orders: uncached_frees)") \
	D(P, hits, AL_CTR_KEY, "", "allocations served from the CPU's cache")                    \
	C(P, misses, AL_CTR_KEY, "allocations that refilled from the backend")                   \
	C(P, refill_objects, 0, "objects brought in by refills")                                 \
	C(P, refill_failed, 0, "refills that brought nothing (backend NULL)")                    \
	D(P, free_hits, AL_CTR_KEY, "", "frees pushed without a spill")                          \
	C(P, spills, AL_CTR_KEY, "full caches spilled with free_bulk")                           \
	C(P, spill_objects, 0, "objects spilled")                                                \
	C(P, spill_failed, 0, "spills the backend refused (object freed alone)")                 \
	C(P, guard_busy_allocs, AL_CTR_KEY, "allocations that found the guard held")             \
	C(P, guard_busy_frees, 0, "frees that found the guard held")                             \
	C(P, uncached_allocs, 0, "allocations of orders that are not cached")                    \
	C(P, uncached_frees, 0, "frees of orders that are not cached, or unknown")               \
	D(P, bytes_allocated, 0, "", "class bytes handed out")                                   \
	D(P, bytes_freed, 0, "", "class bytes taken back")                                       \
	C(P, routed_hits, 0, "hits from the stack of the class an order is routed to")           \
	C(P, other_allocs, 0, "allocations of a cached class that were not hits")                \
	C(P, other_bytes_allocated, 0, "class bytes of other_allocs (and refused refills)")      \
	C(P, other_frees, 0, "frees of a cached class that were not pushed")                     \
	C(P, other_bytes_freed, 0, "class bytes of other_frees")                                 \
	D(P, objects_cached, AL_CTR_GAUGE, "", "objects in the per-CPU stacks")

AL_COUNTERS_DEFINE(PERCPU_COUNTERS, PCPU_, percpu_counters);

struct pc_stack {
	uint32_t elems; /* objects cached */
	uint32_t pad;
	/* Hits and pushes of this stack, counted in its header line, which the
	 * hit already writes (SLUB keeps stat[] in kmem_cache_cpu): a hit moves
	 * no other line. Written by the CPU inside its guard, read relaxed. */
	uint64_t hits, pushes;
	void *objects[]; /* capacity slots, LIFO */
};

struct percpu {
	struct al_allocator base;     /* must be first */
	unsigned capacity;	      /* slots per stack */
	unsigned batch;		      /* objects per refill/spill */
	unsigned norders;	      /* cached orders */
	int guard;		      /* enum fc_guard */
	size_t order_stride;	      /* bytes per stack, 64-aligned */
	size_t cpu_stride;	      /* bytes per CPU block */
	char *cpus;		      /* ncpu blocks */
	size_t cpus_len;	      /* mapping length */
	uint8_t route[FC_ORDERS];     /* the class each order is served from (fc_route_get) */
	const struct al_index *index; /* &ix when the backend has an object index, or NULL */
	struct al_index ix;	/* a copy of the backend's index (index.h), beside the hot fields */
	bool counting;		/* the stats level counts (the stack headers' hits and pushes) */
	bool exact;		/* fc_pow2_exact(backend): a refill's objects are of its class */
	struct al_counters ctr; /* percpu_counters (hits and pushes: in the stacks) */
};

/* A CPU's block: its guard word first, then its stacks. */
static inline char *cpu_block(struct percpu *pc, unsigned cpu)
{
	return pc->cpus + (size_t)cpu * pc->cpu_stride;
}

static inline int *cpu_active(struct percpu *pc, unsigned cpu)
{
	return (int *)cpu_block(pc, cpu);
}

/* One event in a stack header: its CPU is the only writer (inside the guard). */
static inline void stack_count(uint64_t *v)
{
	__atomic_store_n(v, __atomic_load_n(v, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

static inline struct pc_stack *block_stack(struct percpu *pc, char *blk, unsigned order)
{
	return (struct pc_stack *)(blk + AL_CACHELINE + (size_t)order * pc->order_stride);
}

static inline struct pc_stack *cpu_stack(struct percpu *pc, unsigned cpu, unsigned order)
{
	return block_stack(pc, cpu_block(pc, cpu), order);
}

/* Refill the CPU's stack of class `cls` with requests of that class size and
 * pop one. The objects must be of class `cls` themselves (a free files each
 * under its own class): when the backend hands out another class for the
 * size, they go straight back and *got says which class it was (-1: none
 * cached), for the caller to route the order there. */
static void *refill_pop(struct percpu *pc, struct al_ctx *c, unsigned cls, unsigned flags, int *got)
{
	struct pc_stack *s = cpu_stack(pc, c->cpu, cls);
	int n = al_alloc_bulk(pc->base.below, c, fc_class_size(cls), pc->batch, s->objects,
			      flags & ~AL_ZERO);
	unsigned keep, stuck;

	*got = (int)cls;
	al_count(&pc->ctr, c, PCPU_misses, 1);
	if (n <= 0) {
		al_count(&pc->ctr, c, PCPU_refill_failed, 1);
		if (!c->err)
			c->err = -ENOMEM;
		return NULL;
	}
	/* Objects of another class cannot sit in this stack; one that the
	 * backend will not take back stays counted as handed out, so the leak
	 * check names it rather than losing it silently. */
	keep = fc_keep_class(pc->base.below, pc->index, c, s->objects, (unsigned)n, cls,
			     pc->norders, pc->exact, got, &stuck);
	if (al_unlikely(stuck))
		al_count(&pc->ctr, c, PCPU_other_bytes_allocated,
			 (uint64_t)stuck * fc_class_size(cls));
	if (al_unlikely(!keep))
		return NULL; /* *got: the class the backend hands out instead */
	*got = (int)cls;
	al_count(&pc->ctr, c, PCPU_refill_objects, keep);
	fc_stack_ascending(s->objects, keep);
	al_track_poison_all(s->objects, keep - 1, fc_class_size(cls));
	s->elems = keep - 1;
	return s->objects[keep - 1];
}

/* The CPU's stack of the requested order is empty (or the order is served
 * from another class). Returns the object and in *cls the class it is
 * counted under (-1: not a cached class, the backend's own). */
static al_noinline void *percpu_alloc_slow(struct percpu *pc, struct al_ctx *c, unsigned order,
					   size_t size, unsigned flags, int *cls)
{
	unsigned route = fc_route_get(pc->route, order);
	struct pc_stack *s;
	void *p;
	int got;

	if (route == order || route == FC_UNCACHED) {
		if (route == order) {
			p = refill_pop(pc, c, order, flags, &got);
			*cls = (int)order;
			if (al_likely(got == (int)order))
				return p;
			fc_route_set(pc->route, order, got);
			if (got < 0)
				goto direct;
			route = (unsigned)got;
		} else {
			goto direct;
		}
	}
	/* Requests of this order get objects of class `route` from the backend. */
	s = cpu_stack(pc, c->cpu, route);
	*cls = (int)route;
	if (s->elems) {
		al_count(&pc->ctr, c, PCPU_routed_hits, 1);
		return s->objects[--s->elems];
	}
	p = refill_pop(pc, c, route, flags, &got);
	if (al_likely(got == (int)route))
		return p;
	fc_route_set(pc->route, order, -1); /* no stable class: uncached from now on */
direct:
	p = al_alloc(pc->base.below, c, size, flags & ~AL_ZERO);
	*cls = fc_class_of(pc->base.below, pc->index, p, pc->norders);
	if (p && *cls < 0)
		al_count(&pc->ctr, c, PCPU_uncached_allocs, 1);
	return p;
}

/* An allocation that was not a hit is done: p of class cls (-1: not cached). */
static void *alloc_done(struct percpu *pc, struct al_ctx *c, void *p, int cls, size_t size,
			unsigned flags)
{
	if (al_unlikely(!p))
		return NULL;
	if (cls < 0)
		return p;
	al_track_unpoison(p, fc_class_size((unsigned)cls)); /* it left a stack of that class */
	if (flags & AL_ZERO)
		memset(p, 0, size);
	al_count(&pc->ctr, c, PCPU_other_allocs, 1);
	al_count(&pc->ctr, c, PCPU_other_bytes_allocated, fc_class_size((unsigned)cls));
	return p;
}

/* Orders that are not cached go to the backend. It may round one into a
 * cached class (libc: 2049 bytes are 2056 usable): the free files it there,
 * so it is counted as an allocation of that class. */
static al_noinline void *alloc_uncached(struct percpu *pc, struct al_ctx *c, size_t size,
					unsigned flags)
{
	void *p = al_alloc(pc->base.below, c, size, flags);
	int cls = fc_class_of(pc->base.below, pc->index, p, pc->norders);

	if (p && cls < 0)
		al_count(&pc->ctr, c, PCPU_uncached_allocs, 1);
	else if (p) {
		al_count(&pc->ctr, c, PCPU_other_allocs, 1);
		al_count(&pc->ctr, c, PCPU_other_bytes_allocated, fc_class_size((unsigned)cls));
	}
	return p;
}

/* A nested operation on this CPU holds the guard: the backend serves it. */
static al_noinline void *alloc_guard_busy(struct percpu *pc, struct al_ctx *c, unsigned order,
					  size_t size, unsigned flags)
{
	void *p;

	al_count(&pc->ctr, c, PCPU_guard_busy_allocs, 1);
	p = al_alloc(pc->base.below, c, fc_class_size(order), flags & ~AL_ZERO);
	return alloc_done(pc, c, p, fc_class_of(pc->base.below, pc->index, p, pc->norders), size,
			  flags);
}

/* The stack was empty (or the order is routed): the slow path, inside the
 * guard the hit path entered, which this exits. */
static al_noinline void *alloc_miss(struct percpu *pc, struct al_ctx *c, unsigned order,
				    size_t size, unsigned flags, int *active)
{
	int cls = (int)order;
	void *p = percpu_alloc_slow(pc, c, order, size, flags, &cls);

	fc_guard_exit(active, pc->guard);
	return alloc_done(pc, c, p, cls, size, flags);
}

/* The hit path: the guard, a pop and one count, in the CPU's own lines.
 * Everything else is a tail call, so the hit saves no registers; what the
 * hit reads of pc is read before the guard's compiler fence. */
static void *percpu_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct percpu *pc = (struct percpu *)a;
	unsigned order = fc_order(size), e;
	int guard = pc->guard;
	bool counting = AL_STATS_COMPILED && pc->counting;
	struct pc_stack *s;
	char *blk;
	void *p;

	if (al_unlikely(order >= pc->norders || !size))
		return alloc_uncached(pc, c, size, flags);
	blk = cpu_block(pc, c->cpu);
	s = block_stack(pc, blk, order);
	if (al_unlikely(!fc_guard_enter((int *)blk, guard)))
		return alloc_guard_busy(pc, c, order, size, flags);
	e = s->elems;
	if (al_unlikely(!e))
		return alloc_miss(pc, c, order, size, flags, (int *)blk);
	p = s->objects[--e];
	s->elems = e;
	if (al_likely(counting))
		stack_count(&s->hits);
	fc_guard_exit((int *)blk, guard);
	al_track_unpoison(p, fc_class_size(order));
	if (al_unlikely(flags & AL_ZERO))
		return memset(p, 0, size);
	return p;
}

/* The stack is full, inside the guard the push path entered: spill the top
 * batch and push p, or on a refused spill free p alone; then exit the guard.
 * Returns what free returns. */
static al_noinline int free_spill_push(struct percpu *pc, struct al_ctx *c, struct pc_stack *s,
				       unsigned order, void *p, int *active)
{
	unsigned b = pc->batch < s->elems ? pc->batch : s->elems;
	size_t cs = fc_class_size(order);
	int n, ret = 0;

	al_assert(s->elems <= pc->capacity);
	al_track_unpoison_all(&s->objects[s->elems - b], b, cs);
	n = al_free_bulk_sized(pc->base.below, c, &s->objects[s->elems - b], b, cs);
	if (n >= 0) {
		s->elems -= b;
		al_count(&pc->ctr, c, PCPU_spills, 1);
		al_count(&pc->ctr, c, PCPU_spill_objects, b);
		al_assert(s->elems < pc->capacity);
		al_track_poison(p, cs);
		s->objects[s->elems++] = p;
		if (AL_STATS_COMPILED && pc->counting)
			stack_count(&s->pushes);
	} else {
		al_count(&pc->ctr, c, PCPU_spill_failed, 1);
		al_track_poison_all(&s->objects[s->elems - b], b, cs);
		ret = al_free(pc->base.below, c, p);
		if (!ret) {
			al_count(&pc->ctr, c, PCPU_other_frees, 1);
			al_count(&pc->ctr, c, PCPU_other_bytes_freed, cs);
		}
	}
	fc_guard_exit(active, pc->guard);
	return ret;
}

/* Not a cacheable order, or not a live object of the backend: it decides. */
static al_noinline int free_uncached(struct percpu *pc, struct al_ctx *c, void *p, size_t usable)
{
	int ret = al_free(pc->base.below, c, p);

	if (!ret && usable)
		al_count(&pc->ctr, c, PCPU_uncached_frees, 1);
	return ret;
}

static al_noinline int free_guard_busy(struct percpu *pc, struct al_ctx *c, void *p, unsigned order)
{
	int ret;

	al_count(&pc->ctr, c, PCPU_guard_busy_frees, 1);
	ret = al_free(pc->base.below, c, p);
	if (!ret) {
		al_count(&pc->ctr, c, PCPU_other_frees, 1);
		al_count(&pc->ctr, c, PCPU_other_bytes_freed, fc_class_size(order));
	}
	return ret;
}

/* Push p, of cached class `order`, on the CPU's stack: the guard, a push and
 * one count, in the CPU's own lines; a busy guard or a full stack is a tail
 * call, so the push saves no registers. */
static inline __attribute__((always_inline)) int push(struct percpu *pc, struct al_ctx *c, void *p,
						      unsigned order)
{
	int guard = pc->guard;
	bool counting = AL_STATS_COMPILED && pc->counting;
	char *blk = cpu_block(pc, c->cpu);
	struct pc_stack *s = block_stack(pc, blk, order);
	unsigned e;

	if (al_unlikely(!fc_guard_enter((int *)blk, guard)))
		return free_guard_busy(pc, c, p, order);
	e = s->elems;
	if (al_unlikely(e >= pc->capacity))
		return free_spill_push(pc, c, s, order, p, (int *)blk);
	al_track_poison(p, fc_class_size(order));
	s->objects[e] = p;
	s->elems = e + 1;
	if (al_likely(counting))
		stack_count(&s->pushes);
	fc_guard_exit((int *)blk, guard);
	return 0;
}

/* Without the backend's index: the class from its usable_size(). */
static al_noinline int free_by_usable(struct percpu *pc, struct al_ctx *c, void *p)
{
	struct al_allocator *below = pc->base.below;
	size_t usable = below->ops->usable_size(below, p);
	int order = fc_order_floor(usable);

	if (al_unlikely(order < 0 || order >= (int)pc->norders))
		return free_uncached(pc, c, p, usable);
	return push(pc, c, p, (unsigned)order);
}

/* The free path: the order from the backend's index read inline, as
 * libarena reads idx_get_order, then the push. */
static int percpu_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct percpu *pc = (struct percpu *)a;
	int order, shift;

	if (!p)
		return 0;
	if (al_unlikely(!pc->index))
		return free_by_usable(pc, c, p);
	/* pc->ix is a copy of fc_index_of(backend), beside the hot fields */
	shift = fc_index_shift(&pc->ix, p);
	order = shift - FC_MIN_SHIFT;
	if (al_unlikely((unsigned)order >= pc->norders))
		return free_uncached(pc, c, p, shift < 0 ? 0 : (size_t)1 << shift);
	return push(pc, c, p, (unsigned)order);
}

static size_t percpu_usable_size(struct al_allocator *a, const void *p)
{
	struct al_allocator *below = a->below;
	const struct al_index *ix = ((struct percpu *)a)->index;
	size_t usable = fc_usable(below, ix, p);
	int order = fc_order_floor(usable);

	/* A cached class hands out class-sized objects. */
	return order >= 0 && order < (int)((struct percpu *)a)->norders
		       ? fc_class_size((unsigned)order)
		       : usable;
}

static void drain_cpu(struct percpu *pc, struct al_ctx *c, unsigned cpu)
{
	unsigned o;

	for (o = 0; o < pc->norders; o++) {
		struct pc_stack *s = cpu_stack(pc, cpu, o);

		/* Refused (a full transfer array with full=single, a transient
		 * failure): one by one; what still fails stays cached. */
		s->elems = fc_give_back_cached(pc->base.below, c, s->objects, s->elems,
					       fc_class_size(o));
	}
}

static void percpu_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct percpu *pc = (struct percpu *)a;
	unsigned cpu;
	int *active;

	if (scope == AL_DRAIN_ALL) {
		for (cpu = 0; cpu < a->ncpu; cpu++)
			drain_cpu(pc, c, cpu);
		return;
	}
	active = cpu_active(pc, c->cpu);
	if (!fc_guard_enter(active, pc->guard))
		return;
	drain_cpu(pc, c, c->cpu);
	fc_guard_exit(active, pc->guard);
}

/* The stacks' hit and push counts over every CPU, and their class bytes. */
static void sum_stacks(struct percpu *pc, uint64_t *hits, uint64_t *hit_bytes, uint64_t *pushes,
		       uint64_t *push_bytes)
{
	unsigned cpu, o;

	*hits = *hit_bytes = *pushes = *push_bytes = 0;
	for (cpu = 0; cpu < pc->base.ncpu; cpu++)
		for (o = 0; o < pc->norders; o++) {
			struct pc_stack *s = cpu_stack(pc, cpu, o);
			uint64_t h = __atomic_load_n(&s->hits, __ATOMIC_RELAXED);
			uint64_t u = __atomic_load_n(&s->pushes, __ATOMIC_RELAXED);

			*hits += h;
			*hit_bytes += h * fc_class_size(o);
			*pushes += u;
			*push_bytes += u * fc_class_size(o);
		}
}

static void percpu_stats(struct al_allocator *a, struct al_stats *out)
{
	struct percpu *pc = (struct percpu *)a;
	const struct al_counters *k = &pc->ctr;
	uint64_t cached = 0, cached_bytes = 0, hits, hit_bytes, pushes, push_bytes;
	unsigned cpu, o;

	for (cpu = 0; cpu < a->ncpu; cpu++)
		for (o = 0; o < pc->norders; o++) {
			uint64_t n =
				__atomic_load_n(&cpu_stack(pc, cpu, o)->elems, __ATOMIC_RELAXED);

			cached += n;
			cached_bytes += n * fc_class_size(o);
		}
	if (!al_counters_on(k)) {
		/* Every cached object is allocated from the backend's view. */
		out->bytes_held = al_below_bytes_held(a) - (int64_t)cached_bytes;
		return;
	}
	sum_stacks(pc, &hits, &hit_bytes, &pushes, &push_bytes);
	al_stats_add(out, "allocs", hits + al_counters_sum(k, PCPU_other_allocs));
	al_stats_add(out, "frees", pushes + al_counters_sum(k, PCPU_other_frees));
	al_stats_add(out, "hits", hits + al_counters_sum(k, PCPU_routed_hits));
	al_stats_add(out, "free_hits", pushes - al_counters_sum(k, PCPU_spills));
	hit_bytes += al_counters_sum(k, PCPU_other_bytes_allocated);
	push_bytes += al_counters_sum(k, PCPU_other_bytes_freed);
	al_stats_add(out, "bytes_allocated", hit_bytes);
	al_stats_add(out, "bytes_freed", push_bytes);
	out->bytes_held = (int64_t)(hit_bytes - push_bytes);
	al_counters_report(k, out);
	al_stats_add_gauge(out, "objects_cached", cached);
}

static int percpu_check(struct al_allocator *a, char *err, size_t errlen)
{
	struct percpu *pc = (struct percpu *)a;
	struct al_allocator *below = a->below;
	unsigned cpu, o, i;

	for (cpu = 0; cpu < a->ncpu; cpu++)
		for (o = 0; o < pc->norders; o++) {
			struct pc_stack *s = cpu_stack(pc, cpu, o);

			if (s->elems > pc->capacity) {
				snprintf(err, errlen, "cpu %u order %u: %u objects > capacity %u",
					 cpu, o, s->elems, pc->capacity);
				return -EFAULT;
			}
			for (i = 0; below->ops->usable_size && i < s->elems; i++)
				if (fc_order_floor(below->ops->usable_size(below, s->objects[i])) !=
				    (int)o) {
					snprintf(
						err, errlen,
						"cpu %u order %u: cached %p is not a live order-%u "
						"object of the backend",
						cpu, o, s->objects[i], o);
					return -EFAULT;
				}
		}
	return 0;
}

static int percpu_check_params(const int64_t *p, char *err, size_t errlen)
{
	if (p[P_batch] > p[P_capacity]) {
		snprintf(err, errlen, "batch=%lld must not exceed capacity=%lld",
			 (long long)p[P_batch], (long long)p[P_capacity]);
		return -EINVAL;
	}
	return 0;
}

/* The per-CPU stacks, sized by the parameters; the backend must say how
 * big each object is, to cache it by order. */
static int percpu_init(struct al_allocator *a, const int64_t *p)
{
	struct percpu *pc = (struct percpu *)a;
	struct al_allocator *below = a->below;

	if (!below || !below->ops->usable_size)
		return -EINVAL;
	pc->capacity = (unsigned)p[P_capacity];
	pc->batch = (unsigned)p[P_batch];
	pc->norders = (unsigned)p[P_orders];
	pc->guard = (int)p[P_guard];
	fc_route_init(pc->route);
	pc->exact = fc_pow2_exact(below);
	if (fc_index_of(below)) {
		pc->ix = *fc_index_of(below);
		pc->index = &pc->ix;
	}
	pc->order_stride =
		(sizeof(struct pc_stack) + pc->capacity * sizeof(void *) + AL_CACHELINE - 1) &
		~(size_t)(AL_CACHELINE - 1);
	pc->cpu_stride = AL_CACHELINE + pc->norders * pc->order_stride;
	pc->cpus_len = pc->cpu_stride * a->ncpu;
	pc->cpus = al_meta_alloc(pc->cpus_len);
	if (!pc->cpus || al_counters_init_desc(&pc->ctr, percpu_counters, PCPU_NR, 0, a->ncpu))
		return -ENOMEM;
	pc->counting = al_counters_on(&pc->ctr);
	return 0;
}

/* Free what init made; a part not made yet is skipped. */
static void percpu_fini(struct al_allocator *a)
{
	struct percpu *pc = (struct percpu *)a;

	al_counters_fini(&pc->ctr);
	al_meta_free(pc->cpus, pc->cpus_len);
}

/* destroy hands the caches back before the backend goes. */
AL_LAYER_SHUTDOWN(percpu, struct percpu, percpu_init, al_layer_drain_all, percpu_fini,
		  (.alloc = percpu_alloc, .free = percpu_free, .owns = al_below_owns,
		   .usable_size = percpu_usable_size, .drain = percpu_drain, .stats = percpu_stats,
		   .check = percpu_check),
		  (.doc = "per-CPU LIFO caches per order; refill with alloc_bulk(batch), spill a "
			  "batch with free_bulk (seed 000 'spill')",
		   .features = AL_F_BACKEND | AL_F_OWNS_BELOW | AL_F_NEEDS_DISTINCT | AL_F_OWNS |
			       AL_F_USABLE | AL_F_NMI_SAFE | AL_F_PASSES_SIZE,
		   .nparams = P_NR, .params = percpu_params, .check_params = percpu_check_params,
		   .counters = percpu_counters, .ncounters = PCPU_NR))
