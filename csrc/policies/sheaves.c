/* SPDX-License-Identifier: MIT */
/*
 * sheaves: SLUB per-CPU sheaves and the barn (reference §3.1-§3.4), a front
 * layer for kmalloc classes, meant to sit on `slab(form=sheaves)`.
 *
 * How it works
 * ------------
 * Per CPU per kmalloc class: a local trylock and two sheaves, `main` (never
 * NULL once used) and `spare` (empty, full or NULL). A sheaf is an array
 * stack of object pointers, capacity by object size (60 below 256 B, 26
 * below 1 KiB, 12 below 4 KiB, else 4), raised so that the sheaf's own
 * allocation (32-B header + 8 B per slot) fills its kmalloc class (26 -> 28),
 * or a fixed `capacity`. Per class a barn holds at most barn_full full and
 * barn_empty empty sheaves under a spinlock (an al_lock).
 *
 * alloc: trylock; pop from main. Main empty: swap with a non-empty spare;
 *   else exchange the empty main for a full sheaf of the barn (nr_full
 *   checked racily first); else, if the caller may spin, take an empty sheaf
 *   (spare, barn or a new one), unlock, refill it with ONE alloc_bulk from
 *   the layer below (a partial fill is fine), relock and install it (main if
 *   main is still empty, else spare, else the barn). A trylock failure or an
 *   AL_NOSPIN caller with nothing found falls through to the layer below for
 *   one object (the slab slow path).
 * free: trylock; push onto main. Main full: no spare -> an empty sheaf from
 *   the barn becomes main (main becomes spare); a spare that is not full is
 *   swapped in; else the full main goes to the barn for an empty one. Barn
 *   full (-E2BIG): the full spare is flushed to the layer below (free_bulk in
 *   pieces of 32) and reused as the empty sheaf. No empty sheaf in the barn
 *   (-ENOMEM): allocate one, or flush main in place. A trylock failure frees
 *   to the layer below.
 * kfree_nolock (free_flags AL_NOSPIN): a trylock failure, a barn trylock
 *   failure, a flush or a sheaf allocation all count as failure: -EBUSY, and
 *   the caller defers the object.
 *
 * Other backends: objects are cached by the class of what the layer below
 * returns, km_class_floor(usable_size), so that a free finds the same sheaf
 * and counts the same bytes as the allocation. Over slab (AL_F_KM_CLASSES)
 * that is the requested class. Over anything else (buddy's powers of two,
 * libc's chunks) the first allocation of each class goes below and learns
 * the class it really gets (96 -> 128 over buddy; that first object is then
 * swapped for one asked at the whole class size, as below may expose only
 * what was asked), and later requests of the
 * class are served from that class's sheaves; a class that the layer below
 * rounds beyond 8 KiB is passed through uncached, counted by usable size.
 *
 * Invariants (sheaves_check): 0 <= size <= capacity for every sheaf; barn
 * lists have nr_full full and nr_empty empty sheaves; every cached object is
 * a live object of the layer below (so its bytes_held includes the caches,
 * and drain brings both back to baseline).
 *
 * ASan (core/track.h): an object in a sheaf is poisoned over its class size,
 * from the free or refill that puts it there to the allocation or flush that
 * takes it out; a use after free of a cached object is then reported.
 *
 * Lock order: per-CPU trylock -> barn lock -> (layer below). Sheaf memory
 * comes from a pool of al_meta_alloc chunks under pool_lock (a leaf).
 *
 * Cost: a hit is a trylock, a load and a store, and one add to its class's
 * slot of the CPU's counters block; a miss costs a barn lock round trip per
 * `capacity` objects, or one alloc_bulk/free_bulk below.
 * Not modelled: kfree_rcu sheaves, prefilled sheaves, NUMA, the kmalloc-cg
 * caches' own sheaves (AL_ACCOUNT is dropped: cached objects are uncharged).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kmalloc.h"

#include "../core/track.h"

#define SHEAF_HDR     32 /* the kernel's struct slab_sheaf header, for capacity rounding */
#define PCS_BATCH_MAX 32 /* objects per free_bulk when a sheaf is flushed */
#define POOL_CHUNK    (64u << 10)

enum { P_capacity, P_barn_full, P_barn_empty, P_lock_budget, P_NR };

static const struct al_param_desc sheaves_params[P_NR] = {
	[P_capacity] = { "capacity", AL_PARAM_INT, 0, 0, 1024, NULL,
			 "objects per sheaf; 0: by object size (60/28/12/4, sheaves for all)" },
	[P_barn_full] = { "barn_full", AL_PARAM_INT, 10, 0, 1024, NULL,
			  "full sheaves the barn holds at most (MAX_FULL_SHEAVES)" },
	[P_barn_empty] = { "barn_empty", AL_PARAM_INT, 10, 0, 1024, NULL,
			   "empty sheaves the barn holds at most (MAX_EMPTY_SHEAVES)" },
	[P_lock_budget] = { "lock_budget", AL_PARAM_NS, 1000000000, 0, 10000000000ll, NULL,
			    "how long a barn lock waiter spins before failing" },
};

/*
 * The fast paths add to one slot each, found once per call: the per-class
 * alloc_fast[] and free_fast[] arrays after the named counters. What follows
 * from them (the fastpath counts, allocs, frees, traced allocations and the
 * bytes) is reported, not counted.
 */
#define SHEAVES_COUNTERS(C, D, P)                                                                  \
	D(P, allocs, AL_CTR_KEY, "", "allocations through this layer")                             \
	D(P, frees, AL_CTR_KEY, "", "frees through this layer")                                    \
	D(P, alloc_fastpath, AL_CTR_KEY, "", "allocations popped from main")                       \
	C(P, alloc_fallback, AL_CTR_KEY,                                                           \
	  "allocations passed to the layer below (no sheaf, or busy)")                             \
	D(P, free_fastpath, AL_CTR_KEY, "", "frees pushed onto main")                              \
	C(P, free_fallback, AL_CTR_KEY, "frees passed to the layer below (busy)")                  \
	C(P, lock_busy_allocs, 0, "allocations that found the per-CPU lock held")                  \
	C(P, lock_busy_frees, 0, "frees that found the per-CPU lock held")                         \
	C(P, spare_swaps, 0, "main and spare swapped")                                             \
	C(P, barn_get, AL_CTR_KEY, "empty main exchanged for a full sheaf of the barn")            \
	C(P, barn_get_fail, 0, "allocations that found no full sheaf in the barn")                 \
	C(P, barn_put, AL_CTR_KEY, "full main exchanged for an empty sheaf of the barn")           \
	C(P, barn_put_fail, 0, "full sheaves the barn refused (full: -E2BIG)")                     \
	C(P, barn_empty_get, 0, "empty sheaves taken from the barn")                               \
	C(P, refills, AL_CTR_KEY, "sheaves refilled from the layer below (one alloc_bulk)")        \
	C(P, refill_objects, 0, "objects brought in by refills")                                   \
	C(P, refill_failed, AL_CTR_KEY, "refills that brought nothing")                            \
	C(P, flushes, AL_CTR_KEY, "sheaves flushed to the layer below")                            \
	C(P, flush_objects, 0, "objects flushed")                                                  \
	C(P, sheaf_allocs, 0, "sheaves allocated")                                                 \
	C(P, sheaf_frees, 0, "sheaves freed (barn had barn_empty empty ones)")                     \
	C(P, nospin_fail, AL_CTR_KEY,                                                              \
	  "kfree_nolock frees that could not proceed without spinning")                            \
	C(P, double_frees, AL_CTR_KEY, "frees refused: the object is already on top of main")      \
	D(P, traced_kmallocs, 0, "", "allocations the kmalloc tracepoint sees (not AL_NOTRACE)")   \
	C(P, untraced_allocs, 0, "allocations with AL_NOTRACE (the tracepoint does not see them)") \
	C(P, einval, 0, "allocations rejected: size 0 or above 8 KiB")                             \
	C(P, class_probes, 0, "first allocations of a class, which learn the class below")         \
	C(P, uncached, 0, "allocations below rounds beyond 8 KiB, passed through uncached")        \
	D(P, bytes_allocated, 0, "", "class bytes handed out")                                     \
	D(P, bytes_freed, 0, "", "class bytes taken back")                                         \
	C(P, fallback_bytes_allocated, 0, "class (or usable) bytes of alloc_fallback")             \
	C(P, fallback_bytes_freed, 0, "class (or usable) bytes of free_fallback")                  \
	AL_LOCK_COUNTERS(C, P, barn_lock, "the barn locks")                                        \
	D(P, objects_cached, AL_CTR_GAUGE, "",                                                     \
	  "objects in main, spare and the barns' full sheaves")                                    \
	D(P, barn_full, AL_CTR_GAUGE, "", "full sheaves in the barns")                             \
	D(P, barn_empty, AL_CTR_GAUGE, "", "empty sheaves in the barns")

AL_COUNTERS_DEFINE(SHEAVES_COUNTERS, SHV_, sheaves_counters);

/* The per-class slots after the named counters. */
#define SHV_ALLOC_FAST(ci) (SHV_NR + (ci))
#define SHV_FREE_FAST(ci)  (SHV_NR + KM_NR_CLASSES + (ci))
#define SHV_EXTRA	   (2 * KM_NR_CLASSES)

struct sheaf {
	struct sheaf *next; /* barn list or pool link */
	uint32_t size;	    /* objects held */
	uint32_t capacity;  /* slots */
	void *objects[];    /* stack, top at objects[size - 1] */
};

/* slub_percpu_sheaves: one per CPU per class. */
struct pcs {
	int lock;	     /* local_trylock: holder level + 1, 0 = free */
	struct sheaf *main;  /* objects are popped/pushed here */
	struct sheaf *spare; /* empty, full or NULL */
} __attribute__((aligned(AL_CACHELINE)));

/* node_barn: one per class. */
struct barn {
	struct al_lock lock; /* guards everything below */
	struct sheaf *full;  /* full sheaves */
	struct sheaf *empty; /* empty sheaves */
	uint32_t nr_full;    /* read racily before locking */
	uint32_t nr_empty;   /* read racily before locking */
	struct sheaf *pool;  /* free sheaf memory of this class (pool_lock) */
};

struct pool_chunk {
	struct pool_chunk *next; /* chunks, freed at destroy */
	size_t len;		 /* mapping length */
};

struct sheaves {
	struct al_allocator base;     /* must be first */
	unsigned cap[KM_NR_CLASSES];  /* sheaf capacity per class */
	unsigned max_full, max_empty; /* barn limits */
	struct pcs *pcs;	      /* [class * ncpu + cpu] */
	size_t pcs_len;		      /* bytes of pcs[] */
	struct barn *barns;	      /* KM_NR_CLASSES */
	size_t barns_len;	      /* bytes of barns[] */
	int pool_lock;		      /* guards barns[].pool and chunks */
	struct pool_chunk *chunks;    /* sheaf memory */
	struct al_counters ctr;	      /* sheaves_counters, then SHV_EXTRA slots */
	/* kmalloc class -> the class of the objects the layer below returns for
	 * it (see "Other backends"); -1 until learnt, AL_KM_UNCACHED when below
	 * rounds it beyond KM_MAX_SIZE */
	int8_t alias[KM_NR_CLASSES];
};

#define AL_KM_UNCACHED (-2)

static inline struct sheaves *to_sh(struct al_allocator *a)
{
	return (struct sheaves *)a;
}

static inline struct pcs *pcs_of(struct sheaves *sh, unsigned ci, unsigned cpu)
{
	return &sh->pcs[(size_t)ci * sh->base.ncpu + cpu];
}

static inline bool pcs_trylock(struct pcs *p, const struct al_ctx *c)
{
	if (__atomic_load_n(&p->lock, __ATOMIC_RELAXED))
		return false;
	__atomic_store_n(&p->lock, (int)c->level + 1, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return true;
}

static inline void pcs_unlock(struct pcs *p)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&p->lock, 0, __ATOMIC_RELAXED);
}

/* ---- sheaf memory ---- */

static size_t sheaf_bytes(unsigned cap)
{
	return (sizeof(struct sheaf) + cap * sizeof(void *) + 15) & ~(size_t)15;
}

static bool pool_lock(struct sheaves *sh, unsigned flags)
{
	if (flags & AL_NOSPIN)
		return !__atomic_exchange_n(&sh->pool_lock, 1, __ATOMIC_ACQUIRE);
	while (__atomic_exchange_n(&sh->pool_lock, 1, __ATOMIC_ACQUIRE))
		al_cpu_relax();
	return true;
}

static void pool_unlock(struct sheaves *sh)
{
	__atomic_store_n(&sh->pool_lock, 0, __ATOMIC_RELEASE);
}

/* alloc_empty_sheaf: NULL under AL_NOSPIN (allow_spin=false counts as failure). */
static struct sheaf *sheaf_alloc(struct sheaves *sh, unsigned ci, struct al_ctx *c, unsigned flags)
{
	struct barn *b = &sh->barns[ci];
	size_t sz = sheaf_bytes(sh->cap[ci]), i, n;
	struct pool_chunk *ch;
	struct sheaf *s;

	if (flags & AL_NOSPIN)
		return NULL;
	pool_lock(sh, flags);
	if (!b->pool) {
		ch = al_meta_alloc(POOL_CHUNK);
		if (!ch) {
			pool_unlock(sh);
			return NULL;
		}
		ch->len = POOL_CHUNK;
		ch->next = sh->chunks;
		sh->chunks = ch;
		n = (POOL_CHUNK - 16) / sz;
		for (i = 0; i < n; i++) {
			s = (struct sheaf *)((char *)ch + 16 + i * sz);
			s->next = b->pool;
			b->pool = s;
		}
	}
	s = b->pool;
	b->pool = s->next;
	pool_unlock(sh);
	s->next = NULL;
	s->size = 0;
	s->capacity = sh->cap[ci];
	if (c) /* NULL: a main sheaf made with the cache */
		al_count(&sh->ctr, c, SHV_sheaf_allocs, 1);
	return s;
}

static void sheaf_free(struct sheaves *sh, unsigned ci, struct al_ctx *c, struct sheaf *s)
{
	pool_lock(sh, 0);
	s->next = sh->barns[ci].pool;
	sh->barns[ci].pool = s;
	pool_unlock(sh);
	al_count(&sh->ctr, c, SHV_sheaf_frees, 1);
}

/* ---- barn ---- */

static int barn_lock(struct barn *b, struct al_ctx *c, unsigned flags)
{
	return (flags & AL_NOSPIN) ? al_lock_tryacquire(&b->lock, c) : al_lock_acquire(&b->lock, c);
}

/* Empty main for a full sheaf; NULL if none (or the lock failed). */
static struct sheaf *barn_replace_empty(struct sheaves *sh, unsigned ci, struct sheaf *empty,
					struct al_ctx *c, unsigned flags)
{
	struct barn *b = &sh->barns[ci];
	struct sheaf *full = NULL;

	if (!__atomic_load_n(&b->nr_full, __ATOMIC_RELAXED) || barn_lock(b, c, flags))
		return NULL;
	if (b->full) {
		full = b->full;
		b->full = full->next;
		__atomic_store_n(&b->nr_full, b->nr_full - 1, __ATOMIC_RELAXED);
		empty->next = b->empty; /* the empty limit is ignored: the total is unchanged */
		b->empty = empty;
		__atomic_store_n(&b->nr_empty, b->nr_empty + 1, __ATOMIC_RELAXED);
	}
	al_lock_release(&b->lock, c);
	return full;
}

static struct sheaf *barn_get_empty(struct sheaves *sh, unsigned ci, struct al_ctx *c,
				    unsigned flags)
{
	struct barn *b = &sh->barns[ci];
	struct sheaf *e = NULL;

	if (!__atomic_load_n(&b->nr_empty, __ATOMIC_RELAXED) || barn_lock(b, c, flags))
		return NULL;
	if (b->empty) {
		e = b->empty;
		b->empty = e->next;
		__atomic_store_n(&b->nr_empty, b->nr_empty - 1, __ATOMIC_RELAXED);
	}
	al_lock_release(&b->lock, c);
	if (e)
		al_count(&sh->ctr, c, SHV_barn_empty_get, 1);
	return e;
}

static void barn_put_empty(struct sheaves *sh, unsigned ci, struct sheaf *e, struct al_ctx *c)
{
	struct barn *b = &sh->barns[ci];

	if (__atomic_load_n(&b->nr_empty, __ATOMIC_RELAXED) < sh->max_empty &&
	    !al_lock_acquire(&b->lock, c)) {
		if (b->nr_empty < sh->max_empty) {
			e->next = b->empty;
			b->empty = e;
			__atomic_store_n(&b->nr_empty, b->nr_empty + 1, __ATOMIC_RELAXED);
			e = NULL;
		}
		al_lock_release(&b->lock, c);
	}
	if (e)
		sheaf_free(sh, ci, c, e);
}

/* Full sheaf into the barn regardless of the limit (as barn_put_full_sheaf). */
static bool barn_put_full(struct sheaves *sh, unsigned ci, struct sheaf *f, struct al_ctx *c,
			  unsigned flags)
{
	struct barn *b = &sh->barns[ci];

	if (barn_lock(b, c, flags))
		return false;
	f->next = b->full;
	b->full = f;
	__atomic_store_n(&b->nr_full, b->nr_full + 1, __ATOMIC_RELAXED);
	al_lock_release(&b->lock, c);
	return true;
}

/* barn_replace_full_sheaf: 0 with *empty, -E2BIG (barn full), -ENOMEM (no
 * empty sheaf) or -EBUSY (lock). */
static int barn_replace_full(struct sheaves *sh, unsigned ci, struct sheaf *full,
			     struct sheaf **empty, struct al_ctx *c, unsigned flags)
{
	struct barn *b = &sh->barns[ci];
	int ret = 0;

	if (__atomic_load_n(&b->nr_full, __ATOMIC_RELAXED) >= sh->max_full)
		return -E2BIG;
	if (barn_lock(b, c, flags))
		return -EBUSY;
	if (b->nr_full >= sh->max_full) {
		ret = -E2BIG;
	} else if (!b->empty) {
		ret = -ENOMEM;
	} else {
		*empty = b->empty;
		b->empty = (*empty)->next;
		__atomic_store_n(&b->nr_empty, b->nr_empty - 1, __ATOMIC_RELAXED);
		full->next = b->full;
		b->full = full;
		__atomic_store_n(&b->nr_full, b->nr_full + 1, __ATOMIC_RELAXED);
	}
	al_lock_release(&b->lock, c);
	return ret;
}

/* Return a sheaf's objects to the layer below in pieces of PCS_BATCH_MAX. */
static void sheaf_flush(struct sheaves *sh, struct sheaf *s, unsigned ci, struct al_ctx *c)
{
	struct al_allocator *below = sh->base.below;
	uint32_t n, i;
	int ret;

	if (!s->size)
		return;
	al_count(&sh->ctr, c, SHV_flushes, 1);
	al_count(&sh->ctr, c, SHV_flush_objects, s->size);
	al_assert(s->size <= s->capacity);
	al_track_unpoison_all(s->objects, s->size, km_class_size[ci]);
	while (s->size) {
		n = s->size < PCS_BATCH_MAX ? s->size : PCS_BATCH_MAX;
		ret = al_free_bulk(below, c, &s->objects[s->size - n], n);
		if (ret < 0) /* refused as a whole (a lock failed): one by one, each
			      * retried a few times rather than lost */
			for (i = 0; i < n; i++)
				for (int t = 0;
				     t < 4 && al_free(below, c, s->objects[s->size - n + i]); t++)
					;
		s->size -= n;
	}
}

/* ---- alloc ---- */

/* Refill an empty sheaf from the layer below, unlocked (refill_sheaf). */
static void refill(struct sheaves *sh, unsigned ci, struct sheaf *s, struct al_ctx *c,
		   unsigned flags)
{
	int n = al_alloc_bulk(sh->base.below, c, km_class_size[ci], s->capacity - s->size,
			      &s->objects[s->size], (flags | AL_NOTRACE) & ~(AL_ZERO | AL_ACCOUNT));

	al_count(&sh->ctr, c, SHV_refills, 1);
	if (n > 0) {
		al_track_poison_all(&s->objects[s->size], (unsigned)n, km_class_size[ci]);
		s->size += (uint32_t)n;
		al_count(&sh->ctr, c, SHV_refill_objects, (uint64_t)n);
	} else {
		al_count(&sh->ctr, c, SHV_refill_failed, 1);
	}
}

/* __pcs_replace_empty_main, lock held on entry. true: main has objects and
 * the lock is held; false: the lock is released. */
static bool replace_empty_main(struct sheaves *sh, unsigned ci, struct pcs *p, struct al_ctx *c,
			       unsigned flags)
{
	struct sheaf *full, *empty;

	al_level_lock_assert_held(&p->lock, c);
	al_assert(!p->main->size);
	if (p->spare && p->spare->size) {
		full = p->spare;
		p->spare = p->main;
		p->main = full;
		al_count(&sh->ctr, c, SHV_spare_swaps, 1);
		return true;
	}
	full = barn_replace_empty(sh, ci, p->main, c, flags);
	if (full) {
		p->main = full;
		al_count(&sh->ctr, c, SHV_barn_get, 1);
		return true;
	}
	al_count(&sh->ctr, c, SHV_barn_get_fail, 1);
	if (flags & AL_NOSPIN) {
		pcs_unlock(p);
		return false;
	}
	/* May "block": an empty sheaf, refilled unlocked. */
	if (p->spare && !p->spare->size) {
		empty = p->spare;
		p->spare = NULL;
	} else {
		empty = barn_get_empty(sh, ci, c, flags);
	}
	pcs_unlock(p);
	if (!empty)
		empty = sheaf_alloc(sh, ci, c, flags);
	if (!empty)
		return false;
	refill(sh, ci, empty, c, flags);
	if (!empty->size) {
		barn_put_empty(sh, ci, empty, c);
		return false;
	}
	if (!pcs_trylock(p, c)) {
		if (!barn_put_full(sh, ci, empty, c, flags)) {
			sheaf_flush(sh, empty, ci, c);
			barn_put_empty(sh, ci, empty, c);
		}
		return false;
	}
	/* Main may have changed while unlocked (interrupts on this CPU). */
	if (!p->main->size) {
		barn_put_empty(sh, ci, p->main, c);
		p->main = empty;
	} else if (!p->spare) {
		p->spare = empty;
	} else if (!p->spare->size) {
		barn_put_empty(sh, ci, p->spare, c);
		p->spare = empty;
	} else if (!barn_put_full(sh, ci, empty, c, flags)) {
		sheaf_flush(sh, empty, ci, c);
		barn_put_empty(sh, ci, empty, c);
	}
	if (p->main->size)
		return true;
	pcs_unlock(p);
	return false;
}

/* An allocation the layer below served ends here: counted, zeroed for kzalloc. */
static void *alloc_fallback_done(struct sheaves *sh, struct al_ctx *c, void *obj, size_t bytes,
				 unsigned flags)
{
	uint64_t *blk = al_ctr_block(&sh->ctr, c);

	al_ctr_add(blk, SHV_alloc_fallback, 1);
	al_ctr_add(blk, SHV_fallback_bytes_allocated, bytes);
	if (flags & AL_NOTRACE)
		al_ctr_add(blk, SHV_untraced_allocs, 1);
	al_track_unpoison(obj, bytes);
	if (flags & AL_ZERO)
		memset(obj, 0, bytes);
	return obj;
}

/*
 * A class whose objects below are not yet known (or not cacheable): one
 * object straight from below; its usable size says which class it is, and
 * so which sheaves later requests of the class use.
 */
static void *sheaves_alloc_below(struct sheaves *sh, struct al_ctx *c, unsigned ci, unsigned flags)
{
	struct al_allocator *below = sh->base.below;
	int8_t want = -1;
	size_t usable, bytes;
	void *obj;
	int k;

	obj = al_alloc(below, c, km_class_size[ci], (flags | AL_NOTRACE) & ~(AL_ZERO | AL_ACCOUNT));
	if (!obj)
		return NULL;
	usable = below->ops->usable_size(below, obj);
	k = km_class_floor(usable);
	if (k < (int)ci || usable > KM_MAX_SIZE) { /* beyond the classes (or short) */
		k = AL_KM_UNCACHED;
		bytes = usable;
		al_count(&sh->ctr, c, SHV_uncached, 1);
	} else {
		bytes = km_class_size[k];
	}
	if (k > (int)ci && !al_free(below, c, obj)) {
		/* Ask again for the whole class: below may expose only what was
		 * asked (the buddy under ASan), and the object will be reused as
		 * one of class k. A refused free keeps the first one. */
		obj = al_alloc(below, c, km_class_size[k],
			       (flags | AL_NOTRACE) & ~(AL_ZERO | AL_ACCOUNT));
		if (!obj)
			return NULL;
	}
	if (__atomic_compare_exchange_n(&sh->alias[ci], &want, (int8_t)k, false, __ATOMIC_RELAXED,
					__ATOMIC_RELAXED)) {
		al_count(&sh->ctr, c, SHV_class_probes, 1);
		want = -1;
		if (k >= 0 && k != (int)ci) /* the learnt class is its own */
			__atomic_compare_exchange_n(&sh->alias[k], &want, (int8_t)k, false,
						    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	}
	return alloc_fallback_done(sh, c, obj, bytes, flags);
}

static void *sheaves_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct sheaves *sh = to_sh(a);
	int ci = km_class(size), k;
	struct pcs *p;
	uint64_t *blk;
	void *obj;

	if (al_unlikely(ci < 0)) {
		al_count(&sh->ctr, c, SHV_einval, 1);
		c->err = -EINVAL;
		return NULL;
	}
	k = __atomic_load_n(&sh->alias[ci], __ATOMIC_RELAXED);
	if (al_unlikely(k < 0)) /* not learnt yet, or not cacheable */
		return sheaves_alloc_below(sh, c, (unsigned)ci, flags);
	ci = k;
	if (al_unlikely(flags & AL_NOCPU))
		goto fallback;
	p = pcs_of(sh, (unsigned)ci, c->cpu);
	if (al_unlikely(!pcs_trylock(p, c))) {
		al_count(&sh->ctr, c, SHV_lock_busy_allocs, 1);
		goto fallback;
	}
	AL_INJECT("sheaves.locked", c, (void *)(uintptr_t)km_class_size[ci]);
	if (al_unlikely(!p->main->size) && !replace_empty_main(sh, (unsigned)ci, p, c, flags))
		goto fallback;
	obj = p->main->objects[--p->main->size];
	pcs_unlock(p);
	blk = al_ctr_block(&sh->ctr, c);
	al_ctr_add(blk, SHV_ALLOC_FAST(ci), 1);
	if (al_unlikely(flags & AL_NOTRACE))
		al_ctr_add(blk, SHV_untraced_allocs, 1);
	al_track_unpoison(obj, km_class_size[ci]); /* it was poisoned in the sheaf */
	if (flags & AL_ZERO)
		memset(obj, 0, km_class_size[ci]);
	return obj;
fallback:
	obj = al_alloc(a->below, c, km_class_size[ci],
		       (flags | AL_NOTRACE) & ~(AL_ZERO | AL_ACCOUNT));
	if (!obj)
		return NULL;
	return alloc_fallback_done(sh, c, obj, km_class_size[ci], flags);
}

/* ---- free ---- */

/* Install an empty sheaf after the lock was dropped (__pcs_install_empty_sheaf). */
static void install_empty(struct sheaves *sh, unsigned ci, struct pcs *p, struct sheaf *empty,
			  struct al_ctx *c)
{
	if (p->main->size < p->main->capacity) { /* main got room meanwhile */
		barn_put_empty(sh, ci, empty, c);
		return;
	}
	if (!p->spare) {
		p->spare = p->main;
		p->main = empty;
		return;
	}
	if (!barn_put_full(sh, ci, p->main, c, 0)) {
		sheaf_flush(sh, p->main, ci, c);
		barn_put_empty(sh, ci, empty, c);
		return;
	}
	al_count(&sh->ctr, c, SHV_barn_put, 1);
	p->main = empty;
}

/* __pcs_replace_full_main, lock held on entry. true: main has room and the
 * lock is held; false: the lock is released. */
static bool replace_full_main(struct sheaves *sh, unsigned ci, struct pcs *p, struct al_ctx *c,
			      unsigned flags)
{
	struct sheaf *empty = NULL, *tmp;
	int ret;

	al_level_lock_assert_held(&p->lock, c);
	al_assert(p->main->size == p->main->capacity);
	if (!p->spare) {
		empty = barn_get_empty(sh, ci, c, flags);
		if (empty) {
			p->spare = p->main;
			p->main = empty;
			return true;
		}
		goto alloc_empty;
	}
	if (p->spare->size < p->spare->capacity) {
		tmp = p->spare;
		p->spare = p->main;
		p->main = tmp;
		al_count(&sh->ctr, c, SHV_spare_swaps, 1);
		return true;
	}
	ret = barn_replace_full(sh, ci, p->main, &empty, c, flags);
	if (!ret) {
		p->main = empty;
		al_count(&sh->ctr, c, SHV_barn_put, 1);
		return true;
	}
	if (ret == -EBUSY || (flags & AL_NOSPIN)) {
		pcs_unlock(p);
		return false; /* a flush or an allocation: not without spinning */
	}
	if (ret == -E2BIG) {
		al_count(&sh->ctr, c, SHV_barn_put_fail, 1);
		empty = p->spare; /* full */
		p->spare = NULL;
		pcs_unlock(p);
		sheaf_flush(sh, empty, ci, c);
		goto got_empty;
	}
alloc_empty: /* -ENOMEM: no empty sheaf in the barn */
	if (flags & AL_NOSPIN) {
		pcs_unlock(p);
		return false;
	}
	pcs_unlock(p);
	empty = sheaf_alloc(sh, ci, c, flags);
	if (!empty) {
		if (!pcs_trylock(p, c))
			return false;
		sheaf_flush(sh, p->main, ci, c); /* sheaf_flush_main */
		return true;
	}
got_empty:
	if (!pcs_trylock(p, c)) {
		barn_put_empty(sh, ci, empty, c);
		return false;
	}
	install_empty(sh, ci, p, empty, c);
	return true;
}

/* A free the layer below took is done: counted. */
static void free_fallback_done(struct sheaves *sh, struct al_ctx *c, size_t bytes)
{
	uint64_t *blk = al_ctr_block(&sh->ctr, c);

	al_ctr_add(blk, SHV_free_fallback, 1);
	al_ctr_add(blk, SHV_fallback_bytes_freed, bytes);
}

/* What no sheaf caches: below decides (a bogus pointer's error is its). */
static int sheaves_free_uncached(struct sheaves *sh, struct al_ctx *c, void *ptr, size_t usable,
				 unsigned flags)
{
	int ret = al_free_flags(sh->base.below, c, ptr, flags);

	if (ret || !usable)
		return ret;
	free_fallback_done(sh, c, usable);
	return 0;
}

static int sheaves_free_flags(struct al_allocator *a, struct al_ctx *c, void *ptr, unsigned flags)
{
	struct sheaves *sh = to_sh(a);
	struct al_allocator *below = a->below;
	size_t usable;
	struct pcs *p;
	int ci, ret;

	if (!ptr)
		return 0;
	usable = below->ops->usable_size ? below->ops->usable_size(below, ptr) : 0;
	ci = km_class_floor(usable);
	if (al_unlikely(ci < 0 || usable > KM_MAX_SIZE))
		return sheaves_free_uncached(sh, c, ptr, usable, flags);
	if (al_unlikely(flags & (AL_NOCPU | AL_SLOWPATH)))
		goto fallback;
	p = pcs_of(sh, (unsigned)ci, c->cpu);
	if (al_unlikely(!pcs_trylock(p, c))) {
		al_count(&sh->ctr, c, SHV_lock_busy_frees, 1);
		goto fallback;
	}
	AL_INJECT("sheaves.locked", c, (void *)(uintptr_t)km_class_size[ci]);
	if (al_unlikely(p->main->size && p->main->objects[p->main->size - 1] == ptr)) {
		/* the object freed last on this CPU, freed again: refuse it
		 * before it is cached twice (a compare of a line already hot) */
		pcs_unlock(p);
		al_count(&sh->ctr, c, SHV_double_frees, 1);
		return -EINVAL;
	}
	if (al_unlikely(p->main->size == p->main->capacity) &&
	    !replace_full_main(sh, (unsigned)ci, p, c, flags))
		goto fallback;
	al_assert(p->main->size < p->main->capacity);
	al_track_poison(ptr, km_class_size[ci]);
	p->main->objects[p->main->size++] = ptr;
	pcs_unlock(p);
	al_count(&sh->ctr, c, SHV_FREE_FAST(ci), 1);
	return 0;
fallback:
	if (flags & AL_NOSPIN) { /* kfree_nolock: the caller defers it */
		al_count(&sh->ctr, c, SHV_nospin_fail, 1);
		return -EBUSY;
	}
	ret = al_free_flags(below, c, ptr, flags);
	if (ret)
		return ret;
	free_fallback_done(sh, c, km_class_size[ci]);
	return 0;
}

static int sheaves_free(struct al_allocator *a, struct al_ctx *c, void *ptr)
{
	return sheaves_free_flags(a, c, ptr, 0);
}

static size_t sheaves_usable_size(struct al_allocator *a, const void *p)
{
	struct al_allocator *below = a->below;
	size_t usable = below->ops->usable_size ? below->ops->usable_size(below, p) : 0;
	int ci = km_class_floor(usable);

	return ci >= 0 && usable <= KM_MAX_SIZE ? km_class_size[ci] : usable;
}

static void sheaves_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct sheaves *sh = to_sh(a);
	unsigned ci, cpu;
	struct sheaf *s;

	for (ci = 0; ci < KM_NR_CLASSES; ci++) {
		for (cpu = 0; cpu < a->ncpu; cpu++) {
			struct pcs *p = pcs_of(sh, ci, cpu);

			if (scope != AL_DRAIN_ALL && cpu != c->cpu)
				continue;
			if (!pcs_trylock(p, c))
				continue;
			if (p->main)
				sheaf_flush(sh, p->main, ci, c);
			if (p->spare)
				sheaf_flush(sh, p->spare, ci, c);
			pcs_unlock(p);
		}
		if (scope == AL_DRAIN_ALL) {
			struct barn *b = &sh->barns[ci];

			if (al_lock_acquire(&b->lock, c))
				continue;
			while ((s = b->full)) {
				b->full = s->next;
				b->nr_full--;
				sheaf_flush(sh, s, ci, c);
				s->next = b->empty;
				b->empty = s;
				b->nr_empty++;
			}
			al_lock_release(&b->lock, c);
		}
	}
}

/* Objects cached in every CPU's main and spare and in the barns' full
 * sheaves, and their class bytes; *nfull, *nempty: the barns' sheaves.
 * Relaxed reads: sheaf memory lives as long as the layer. */
static uint64_t cached_bytes(struct sheaves *sh, uint64_t *objects, uint64_t *nfull,
			     uint64_t *nempty)
{
	uint64_t bytes = 0, n;
	unsigned ci, cpu;

	*objects = *nfull = *nempty = 0;
	for (ci = 0; ci < KM_NR_CLASSES; ci++) {
		struct barn *b = &sh->barns[ci];
		uint32_t full = __atomic_load_n(&b->nr_full, __ATOMIC_RELAXED);

		n = (uint64_t)full * sh->cap[ci];
		*nfull += full;
		*nempty += __atomic_load_n(&b->nr_empty, __ATOMIC_RELAXED);
		for (cpu = 0; cpu < sh->base.ncpu; cpu++) {
			struct pcs *p = pcs_of(sh, ci, cpu);
			struct sheaf *m = __atomic_load_n(&p->main, __ATOMIC_RELAXED);
			struct sheaf *s = __atomic_load_n(&p->spare, __ATOMIC_RELAXED);

			n += m ? __atomic_load_n(&m->size, __ATOMIC_RELAXED) : 0;
			n += s ? __atomic_load_n(&s->size, __ATOMIC_RELAXED) : 0;
		}
		*objects += n;
		bytes += n * km_class_size[ci];
	}
	return bytes;
}

/* Sum of a per-class slot array: events and class bytes. */
static void sum_classes(const struct sheaves *sh, unsigned first, uint64_t *n, uint64_t *bytes)
{
	unsigned ci;

	*n = *bytes = 0;
	for (ci = 0; ci < KM_NR_CLASSES; ci++) {
		uint64_t v = al_counters_sum(&sh->ctr, first + ci);

		*n += v;
		*bytes += v * km_class_size[ci];
	}
}

static void sheaves_stats(struct al_allocator *a, struct al_stats *out)
{
	struct sheaves *sh = to_sh(a);
	const struct al_counters *k = &sh->ctr;
	uint64_t cached, nfull, nempty, fast, fast_bytes, pushes, push_bytes, allocs;
	uint64_t cbytes = cached_bytes(sh, &cached, &nfull, &nempty);

	if (!al_counters_on(k)) {
		/* Every cached object is a live object of the layer below. */
		out->bytes_held = al_below_bytes_held(a) - (int64_t)cbytes;
		return;
	}
	sum_classes(sh, SHV_ALLOC_FAST(0), &fast, &fast_bytes);
	sum_classes(sh, SHV_FREE_FAST(0), &pushes, &push_bytes);
	allocs = fast + al_counters_sum(k, SHV_alloc_fallback);
	al_stats_add(out, "allocs", allocs);
	al_stats_add(out, "frees", pushes + al_counters_sum(k, SHV_free_fallback));
	al_stats_add(out, "alloc_fastpath", fast);
	al_stats_add(out, "free_fastpath", pushes);
	al_stats_add(out, "traced_kmallocs", allocs - al_counters_sum(k, SHV_untraced_allocs));
	fast_bytes += al_counters_sum(k, SHV_fallback_bytes_allocated);
	push_bytes += al_counters_sum(k, SHV_fallback_bytes_freed);
	al_stats_add(out, "bytes_allocated", fast_bytes);
	al_stats_add(out, "bytes_freed", push_bytes);
	out->bytes_held = (int64_t)(fast_bytes - push_bytes);
	al_counters_report(k, out);
	al_stats_add_gauge(out, "objects_cached", cached);
	al_stats_add_gauge(out, "barn_full", nfull);
	al_stats_add_gauge(out, "barn_empty", nempty);
}

static int check_sheaf(const struct sheaf *s, struct al_allocator *below, unsigned ci,
		       const char *what, char *err, size_t errlen)
{
	uint32_t i;

	if (s->size > s->capacity) {
		snprintf(err, errlen, "class %u %s: %u objects > capacity %u", km_class_size[ci],
			 what, s->size, s->capacity);
		return -EFAULT;
	}
	for (i = 0; below->ops->usable_size && i < s->size; i++)
		if (km_class_floor(below->ops->usable_size(below, s->objects[i])) != (int)ci) {
			snprintf(err, errlen,
				 "class %u %s: cached %p is not a live object of the class below",
				 km_class_size[ci], what, s->objects[i]);
			return -EFAULT;
		}
	return 0;
}

static int sheaves_check(struct al_allocator *a, char *err, size_t errlen)
{
	struct sheaves *sh = to_sh(a);
	unsigned ci, cpu, n;
	struct sheaf *s;
	int ret;

	for (ci = 0; ci < KM_NR_CLASSES; ci++) {
		struct barn *b = &sh->barns[ci];
		int k = sh->alias[ci];

		if (k != -1 && k != AL_KM_UNCACHED && (k < (int)ci || sh->alias[k] != k)) {
			snprintf(err, errlen, "class %u: learnt class %d is not a class of its own",
				 km_class_size[ci], k);
			return -EFAULT;
		}
		for (cpu = 0; cpu < a->ncpu; cpu++) {
			struct pcs *p = pcs_of(sh, ci, cpu);

			if (p->lock) {
				snprintf(err, errlen, "class %u cpu %u: lock held",
					 km_class_size[ci], cpu);
				return -EFAULT;
			}
			if ((p->main &&
			     (ret = check_sheaf(p->main, a->below, ci, "main", err, errlen))) ||
			    (p->spare &&
			     (ret = check_sheaf(p->spare, a->below, ci, "spare", err, errlen))))
				return ret;
		}
		for (n = 0, s = b->full; s; s = s->next, n++) {
			if (s->size != s->capacity) {
				snprintf(err, errlen, "class %u: barn sheaf of %u/%u is not full",
					 km_class_size[ci], s->size, s->capacity);
				return -EFAULT;
			}
			ret = check_sheaf(s, a->below, ci, "barn full sheaf", err, errlen);
			if (ret)
				return ret;
		}
		if (n != b->nr_full) {
			snprintf(err, errlen, "class %u: %u full sheaves, nr_full %u",
				 km_class_size[ci], n, b->nr_full);
			return -EFAULT;
		}
		for (n = 0, s = b->empty; s; s = s->next, n++)
			if (s->size) {
				snprintf(err, errlen, "class %u: barn empty sheaf holds %u",
					 km_class_size[ci], s->size);
				return -EFAULT;
			}
		if (n != b->nr_empty) {
			snprintf(err, errlen, "class %u: %u empty sheaves, nr_empty %u",
				 km_class_size[ci], n, b->nr_empty);
			return -EFAULT;
		}
	}
	return 0;
}

/* Free what init made; a part not made yet is skipped. */
static void sheaves_fini(struct al_allocator *a)
{
	struct sheaves *sh = to_sh(a);
	struct pool_chunk *ch, *next;

	for (ch = sh->chunks; ch; ch = next) {
		next = ch->next;
		al_meta_free(ch, ch->len);
	}
	al_counters_fini(&sh->ctr);
	al_meta_free(sh->barns, sh->barns_len);
	al_meta_free(sh->pcs, sh->pcs_len);
}

/* calculate_sheaf_capacity: by object size, then up to fill the kmalloc class. */
static unsigned capacity_of(unsigned size)
{
	unsigned cap = size >= 4096 ? 4 : size >= 1024 ? 12 : size >= 256 ? 26 : 60;
	int k = km_class(SHEAF_HDR + cap * sizeof(void *));

	return k >= 0 ? (km_class_size[k] - SHEAF_HDR) / (unsigned)sizeof(void *) : cap;
}

static int sheaves_init(struct al_allocator *a, const int64_t *p)
{
	struct sheaves *sh = to_sh(a);
	struct al_allocator *below = a->below;
	unsigned ncpu = a->ncpu;
	unsigned ci, cpu;

	if (!below || !below->ops->usable_size)
		return -EINVAL;
	for (ci = 0; ci < KM_NR_CLASSES; ci++)
		sh->cap[ci] =
			p[P_capacity] ? (unsigned)p[P_capacity] : capacity_of(km_class_size[ci]);
	sh->max_full = (unsigned)p[P_barn_full];
	sh->max_empty = (unsigned)p[P_barn_empty];
	sh->pcs_len = sizeof(struct pcs) * KM_NR_CLASSES * ncpu;
	sh->barns_len = sizeof(struct barn) * KM_NR_CLASSES;
	sh->pcs = al_meta_alloc(sh->pcs_len);
	sh->barns = al_meta_alloc(sh->barns_len);
	if (!sh->pcs || !sh->barns ||
	    al_counters_init_desc(&sh->ctr, sheaves_counters, SHV_NR, SHV_EXTRA, ncpu))
		return -ENOMEM;
	for (ci = 0; ci < KM_NR_CLASSES; ci++) {
		al_lock_init(&sh->barns[ci].lock, (uint64_t)p[P_lock_budget], false);
		al_lock_count_in(&sh->barns[ci].lock, &sh->ctr, SHV_barn_lock_acquired);
	}
	for (ci = 0; ci < KM_NR_CLASSES; ci++)
		sh->alias[ci] =
			below->desc && (below->desc->features & AL_F_KM_CLASSES) ? (int8_t)ci : -1;
	/* Every CPU's main sheaf exists from the start, as the kernel allocates
	 * them with the cache (not counted as sheaf_allocs). */
	for (ci = 0; ci < KM_NR_CLASSES; ci++)
		for (cpu = 0; cpu < ncpu; cpu++) {
			struct pcs *pc = pcs_of(sh, ci, cpu);

			pc->main = sheaf_alloc(sh, ci, NULL, 0);
			if (!pc->main)
				return -ENOMEM; /* the sheaves made are empty, in sh->chunks */
		}
	return 0;
}

/* destroy hands every cached object back while the layer below exists. */
AL_LAYER_SHUTDOWN(
	sheaves, struct sheaves, sheaves_init, al_layer_drain_all, sheaves_fini,
	(.alloc = sheaves_alloc, .free = sheaves_free, .owns = al_below_owns,
	 .usable_size = sheaves_usable_size, .drain = sheaves_drain, .stats = sheaves_stats,
	 .check = sheaves_check, .free_flags = sheaves_free_flags),
	(.doc = "SLUB per-CPU sheaves (main + spare behind a trylock) and a barn of at most 10 "
		"full and 10 empty sheaves per class; whole-sheaf exchanges",
	 .features = AL_F_BACKEND | AL_F_OWNS_BELOW | AL_F_NEEDS_DISTINCT | AL_F_OWNS | AL_F_USABLE,
	 .max_size = KM_MAX_SIZE, .nparams = P_NR, .params = sheaves_params,
	 .counters = sheaves_counters, .ncounters = SHV_NR))
