/* SPDX-License-Identifier: MIT */
/*
 * Shared by the per-CPU front layers (percpu, transfer, magazine): size
 * classes as buddy orders (16 B << order) and the per-CPU `active` guard.
 *
 * ASan (core/track.h): an object sits in a front cache poisoned over its
 * class size; it is unpoisoned when it leaves, to the caller or to the
 * backend (fc_give_back_cached), so a use after free of a cached object is
 * reported as the buddy reports one of its free blocks.
 */
#ifndef ALLOCLAB_FRONTCACHE_H
#define ALLOCLAB_FRONTCACHE_H

#include "alloclab/alloclab.h"

#include "../core/track.h"

#define FC_MIN_SHIFT 4 /* 16 B, the buddy's minimum block */

/* The class that fits size: the smallest order with 16 << order >= size. */
static inline unsigned fc_order(size_t size)
{
	if (size <= (1u << FC_MIN_SHIFT))
		return 0;
	return al_fls64(size - 1) - FC_MIN_SHIFT;
}

/* The class an object of `usable` bytes can serve: the largest order with
 * 16 << order <= usable (floor, so a libc object of 24 usable bytes serves
 * 16-byte requests, never 32-byte ones). -1 when usable < 16. */
static inline int fc_order_floor(size_t usable)
{
	if (usable < (1u << FC_MIN_SHIFT))
		return -1;
	return (int)al_fls64(usable) - 1 - FC_MIN_SHIFT;
}

static inline size_t fc_class_size(unsigned order)
{
	return (size_t)1 << (order + FC_MIN_SHIFT);
}

/* The class a front cache files a live object of `below` under: the floor
 * order of its usable size, or -1 when it is not cached (usable size unknown
 * or under 16 bytes, or an order of norders and above). Frees know only the
 * object, so allocations count by the object too, never by the request: a
 * backend whose objects are larger than asked (a page allocator hands out
 * whole pages) is then counted alike both ways. */
/* The backend's index when its items are the classes' 16 bytes (every
 * buddy's), so that a cache reads it with that size as a constant and its
 * masks and shifts fold; NULL otherwise (the cache asks usable_size()). */
static inline const struct al_index *fc_index_of(struct al_allocator *below)
{
	const struct al_index *ix = al_index_of(below);

	return ix && ix->min_shift == FC_MIN_SHIFT ? ix : NULL;
}

/* log2 of p's usable size from an index of fc_index_of(), or -1 when p is
 * not a live block. */
static inline int fc_index_shift(const struct al_index *ix, const void *p)
{
	return al_index_shift_items(ix, p, FC_MIN_SHIFT);
}

/* The usable size of p in the backend: read from its index inline when it
 * has one (index.h: libarena reads the order from the buddy's index), else
 * through its usable_size. */
static inline size_t fc_usable(struct al_allocator *below, const struct al_index *ix, const void *p)
{
	int shift;

	if (!ix)
		return below->ops->usable_size(below, p);
	shift = fc_index_shift(ix, p);
	return shift < 0 ? 0 : (size_t)1 << shift;
}

static inline int fc_class_of(struct al_allocator *below, const struct al_index *ix, const void *p,
			      unsigned norders)
{
	int o;

	if (!p || (!ix && !below->ops->usable_size))
		return -1;
	/* the floor order of a power-of-two usable size is its log2 less 4 */
	o = ix ? fc_index_shift(ix, p) - FC_MIN_SHIFT : fc_order_floor(fc_usable(below, ix, p));
	return o >= 0 && o < (int)norders ? o : -1;
}

/* Where the requests of each order are served from: the order itself until
 * a refill shows that the backend hands out objects of another class for
 * that size (pages for 16 bytes), then that class, or FC_UNCACHED (straight
 * to the backend) when the objects are of no cached class. Learnt once per
 * order; the fast path never reads it (a stack that gets no frees of its
 * class stays empty and misses). */
#define FC_UNCACHED 0xffu
#define FC_ORDERS   16 /* the largest `orders` parameter */

static inline void fc_route_init(uint8_t *route)
{
	unsigned o;

	for (o = 0; o < FC_ORDERS; o++)
		route[o] = (uint8_t)o;
}

static inline unsigned fc_route_get(const uint8_t *route, unsigned order)
{
	return __atomic_load_n(&route[order], __ATOMIC_RELAXED);
}

/* A refill of class `order` brought objects of class `got` (-1: none cached). */
static inline void fc_route_set(uint8_t *route, unsigned order, int got)
{
	__atomic_store_n(&route[order], got < 0 ? (uint8_t)FC_UNCACHED : (uint8_t)got,
			 __ATOMIC_RELAXED);
}

static inline unsigned fc_give_back(struct al_allocator *below, struct al_ctx *c, void **ptrs,
				    unsigned n, size_t size);

/* Whether `below` hands out, for a class size, a block of exactly that
 * usable size (AL_F_POW2_CLASSES, seen through the layers that pass sizes
 * down unchanged, AL_F_PASSES_SIZE): a refill's objects are then of the
 * class it asked for, as libarena's refill knows the order it asked the
 * buddy for, and nobody reads each one to file it. Found once, at create. */
static inline bool fc_pow2_exact(struct al_allocator *below)
{
	for (; below && below->desc; below = below->below) {
		unsigned f = below->desc->features;

		if (f & AL_F_POW2_CLASSES)
			return true;
		if (!(f & AL_F_PASSES_SIZE))
			return false;
	}
	return false;
}

/* A refill of class `cls` brought objs[0..n-1]: keep those of that class
 * at the front and give the others back (a backend may serve one size with
 * objects of different usable sizes: glibc reuses a larger free chunk).
 * Returns how many were kept; *other is the class of one that was not
 * (-1: of no cached class; `cls` when all were kept), *stuck how many the
 * backend would not take back (left after the kept ones). exact: the
 * backend is fc_pow2_exact, so all are kept unread (asserted in debug
 * builds). */
static inline unsigned fc_keep_class(struct al_allocator *below, const struct al_index *ix,
				     struct al_ctx *c, void **objs, unsigned n, unsigned cls,
				     unsigned norders, bool exact, int *other, unsigned *stuck)
{
	unsigned keep = 0, i;
	void *t;

	*other = (int)cls;
	*stuck = 0;
	if (exact) {
		for (i = 0; i < n; i++)
			al_assert_expensive(fc_class_of(below, ix, objs[i], norders) == (int)cls);
		return n;
	}
	for (i = 0; i < n; i++) {
		int k = fc_class_of(below, ix, objs[i], norders);

		if (k != (int)cls) {
			*other = k;
			continue;
		}
		t = objs[keep];
		objs[keep++] = objs[i];
		objs[i] = t;
	}
	*stuck = keep < n ? fc_give_back(below, c, objs + keep, n - keep, 0) : 0;
	return keep;
}

/* Give objects back to the backend: in one free_bulk (free_bulk_sized when
 * they are all of the class of `size`; 0: not known), or one by one when it
 * refuses the batch (a transient failure, a full transfer array). Returns
 * how many are left (0 unless single frees failed too; those stay in ptrs[]
 * from index 0). */
static inline unsigned fc_give_back(struct al_allocator *below, struct al_ctx *c, void **ptrs,
				    unsigned n, size_t size)
{
	unsigned left = 0, i;

	if (!n || (size ? al_free_bulk_sized(below, c, ptrs, n, size)
			: al_free_bulk(below, c, ptrs, n)) >= 0)
		return 0;
	for (i = 0; i < n; i++)
		if (al_free(below, c, ptrs[i]))
			ptrs[left++] = ptrs[i];
	return left;
}

/* fc_give_back for cached objects of class size `size` (poisoned): exposed
 * to the backend, and those it would not take stay cached, poisoned again. */
static inline unsigned fc_give_back_cached(struct al_allocator *below, struct al_ctx *c,
					   void **ptrs, unsigned n, size_t size)
{
	al_track_unpoison_all(ptrs, n, size);
	n = fc_give_back(below, c, ptrs, n, size);
	al_track_poison_all(ptrs, n, size);
	return n;
}

/* A refill's objects as the backend's alloc_bulk gave them (the buddy carves
 * one block in ascending address order), reversed so that a LIFO stack,
 * which pops from the end, hands them out in ascending address order, as a
 * fresh SLUB slab's freelist and a tcmalloc span's do. Which object of a
 * batch goes first is no part of the model (the same batches, hits, locks
 * and counters), but a program walks its objects in the order it made them
 * (a garbage collector's lists, a container's items), and the hardware
 * prefetchers follow an ascending run where a batch handed out from its top
 * breaks it every `batch` objects: python3 under the shim spent half again
 * as much time in its object walks (gc, list_traverse, json) before this.
 * Costs n/2 swaps per refill. */
static inline void fc_stack_ascending(void **objs, unsigned n)
{
	unsigned i, j;

	for (i = 0, j = n ? n - 1 : 0; i < j; i++, j--) {
		void *t = objs[i];

		objs[i] = objs[j];
		objs[j] = t;
	}
}

enum fc_guard {
	FC_GUARD_ATOMIC = 0, /* cmpxchg on the CPU's `active` word (faithful to the seed) */
	FC_GUARD_LOCAL = 1   /* plain flag: enough when one thread owns each model CPU */
};

#define FC_GUARD_CHOICES "atomic,local"

/* Enter the CPU's cache: false when an operation is already in flight on
 * this CPU (nested, e.g. a signal handler), and the caller takes the backend
 * path. */
static inline bool fc_guard_enter(int *active, int kind)
{
	int zero = 0;

	if (kind == FC_GUARD_ATOMIC)
		return __atomic_compare_exchange_n(active, &zero, 1, false, __ATOMIC_ACQUIRE,
						   __ATOMIC_RELAXED);
	if (__atomic_load_n(active, __ATOMIC_RELAXED))
		return false;
	__atomic_store_n(active, 1, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return true;
}

static inline void fc_guard_exit(int *active, int kind)
{
	if (kind == FC_GUARD_ATOMIC) {
		__atomic_store_n(active, 0, __ATOMIC_RELEASE);
		return;
	}
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(active, 0, __ATOMIC_RELAXED);
}

#endif
