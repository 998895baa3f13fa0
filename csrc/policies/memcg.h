/* SPDX-License-Identifier: MIT */
/*
 * memcg: the charge a __GFP_ACCOUNT slab allocation pays (mm/memcontrol.c),
 * for the slab layer's kmalloc-cg caches. One memory cgroup (the map's, or
 * the task's) whose page counters sit `depth` levels below the root.
 *
 * How it works
 * ------------
 * Per CPU, an obj_stock (the bytes of pages already charged and not yet
 * handed out, for the cached objcg) and a memcg stock (pages charged to the
 * page counters in advance, MEMCG_CHARGE_BATCH = 64 at a time), both under
 * one per-CPU lock (memcg_stock's local lock, a trylock here: the level this
 * call interrupted may hold it).
 *  charge(bytes) = obj_cgroup_charge: consume_obj_stock takes the bytes from
 *    the obj_stock when it has them (a hit); else obj_cgroup_charge_pages
 *    charges whole pages (consume_stock from the memcg stock, or
 *    page_counter_try_charge of a batch: an atomic add on every level's
 *    shared counter) and refill_obj_stock keeps the page's remainder.
 *  uncharge(bytes) = refill_obj_stock: the bytes go back to the obj_stock;
 *    whole pages beyond one go back to the memcg stock (refill_stock), and a
 *    memcg stock above the batch is drained to the page counters
 *    (drain_stock: an atomic sub on every level).
 *  A call that finds the per-CPU lock held (or a helper thread running
 *    beside the CPU, AL_NOCPU) charges or uncharges the page
 *    counters directly, and the sub-page remainder goes to the objcg's
 *    shared nr_charged_bytes (an atomic), as the kernel does.
 * Invariant: page counters = pages charged in stocks and by live objects
 * (stock pages + ceil of the bytes charged), nothing is lost when stocks
 * drain.
 * Cost: a hit is a lock flag, a compare and a subtract; a page charge is one
 * atomic add per level per 64 pages.
 */
#ifndef ALLOCLAB_MEMCG_H
#define ALLOCLAB_MEMCG_H

#include "alloclab/alloclab.h"

#define MEMCG_PAGE	4096u
#define MEMCG_BATCH	64u /* MEMCG_CHARGE_BATCH */
#define MEMCG_MAX_DEPTH 8u
#define OBJ_EXT_SIZE	16u /* struct slabobj_ext: objcg + codetag ref */
#define OBJCG_PTR_SIZE	8u  /* obj_full_size: the object plus its objcg pointer */

/* Per CPU: memcg_stock_pcp and obj_stock_pcp. */
struct memcg_stock {
	int locked;	   /* holder's level + 1, 0 = free */
	uint32_t nr_pages; /* memcg stock: pages charged in advance */
	int64_t nr_bytes;  /* obj stock: bytes of charged pages not handed out */
} __attribute__((aligned(AL_CACHELINE)));

/* One level's page counter (memcg->memory), on its own line. */
struct memcg_counter {
	int64_t usage; /* pages */
} __attribute__((aligned(AL_CACHELINE)));

struct memcg {
	unsigned depth;				     /* levels charged (the cgroup and ancestors) */
	struct memcg_counter level[MEMCG_MAX_DEPTH]; /* page_counter hierarchy */
	int64_t nr_charged_bytes;		     /* objcg's sub-page bytes from busy paths */
	struct memcg_stock *stock;		     /* ncpu entries */
};

/* What one call did, for the caller's counters. */
struct memcg_event {
	unsigned hit;	      /* consume_obj_stock served it */
	unsigned refill;      /* a page was charged for it (obj stock refilled) */
	unsigned page_charge; /* page_counter_try_charge of a batch */
	unsigned page_drain;  /* drain_stock to the page counters */
	unsigned busy;	      /* the per-CPU lock was held: counters directly */
};

static inline void memcg_counters_add(struct memcg *m, int64_t pages)
{
	unsigned i;

	for (i = 0; i < m->depth; i++)
		__atomic_fetch_add(&m->level[i].usage, pages, __ATOMIC_RELAXED);
}

static inline bool memcg_stock_lock(struct memcg_stock *st, const struct al_ctx *c)
{
	if (__atomic_load_n(&st->locked, __ATOMIC_RELAXED))
		return false;
	__atomic_store_n(&st->locked, (int)c->level + 1, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return true;
}

static inline void memcg_stock_unlock(struct memcg_stock *st)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&st->locked, 0, __ATOMIC_RELAXED);
}

/* refill_stock (lock held): pages back to the memcg stock, drained to the
 * page counters when it holds more than a batch. */
static inline void memcg_refill_stock(struct memcg *m, struct memcg_stock *st, uint32_t pages,
				      struct memcg_event *ev)
{
	st->nr_pages += pages;
	if (st->nr_pages > MEMCG_BATCH) {
		memcg_counters_add(m, -(int64_t)st->nr_pages);
		st->nr_pages = 0;
		ev->page_drain++;
	}
}

/* refill_obj_stock (lock held): bytes back; whole pages beyond the last go
 * to the memcg stock. */
static inline void memcg_refill_obj_stock(struct memcg *m, struct memcg_stock *st, int64_t bytes,
					  struct memcg_event *ev)
{
	st->nr_bytes += bytes;
	if (st->nr_bytes > MEMCG_PAGE) {
		uint32_t pages = (uint32_t)(st->nr_bytes / MEMCG_PAGE);

		st->nr_bytes -= (int64_t)pages * MEMCG_PAGE;
		memcg_refill_stock(m, st, pages, ev);
	}
}

/* obj_cgroup_charge of bytes (<= a page) on c's CPU; nocpu: a helper thread
 * beside that CPU, which may not touch its stocks. */
static inline void memcg_charge(struct memcg *m, const struct al_ctx *c, unsigned bytes, bool nocpu,
				struct memcg_event *ev)
{
	struct memcg_stock *st = &m->stock[c->cpu];

	if (al_unlikely(nocpu || !memcg_stock_lock(st, c))) {
		ev->busy++;
		memcg_counters_add(m, 1);
		__atomic_fetch_add(&m->nr_charged_bytes, (int64_t)(MEMCG_PAGE - bytes),
				   __ATOMIC_RELAXED);
		return;
	}
	if (al_likely(st->nr_bytes >= bytes)) { /* consume_obj_stock */
		st->nr_bytes -= bytes;
		ev->hit++;
	} else { /* obj_cgroup_charge_pages: one page, from the memcg stock or a batch */
		if (!st->nr_pages) {
			memcg_counters_add(m, MEMCG_BATCH);
			st->nr_pages = MEMCG_BATCH;
			ev->page_charge++;
		}
		st->nr_pages--;
		ev->refill++;
		memcg_refill_obj_stock(m, st, MEMCG_PAGE - bytes, ev);
	}
	memcg_stock_unlock(st);
}

/* obj_cgroup_uncharge of bytes on c's CPU (nocpu: as memcg_charge). */
static inline void memcg_uncharge(struct memcg *m, const struct al_ctx *c, unsigned bytes,
				  bool nocpu, struct memcg_event *ev)
{
	struct memcg_stock *st = &m->stock[c->cpu];

	if (al_unlikely(nocpu || !memcg_stock_lock(st, c))) {
		ev->busy++;
		__atomic_fetch_add(&m->nr_charged_bytes, (int64_t)bytes, __ATOMIC_RELAXED);
		return;
	}
	memcg_refill_obj_stock(m, st, bytes, ev);
	memcg_stock_unlock(st);
}

/* Every stock back to the page counters (drain_all_stock; quiescent). */
static inline void memcg_drain_all(struct memcg *m, unsigned ncpu)
{
	int64_t bytes;
	unsigned cpu;

	for (cpu = 0; cpu < ncpu; cpu++) {
		struct memcg_stock *st = &m->stock[cpu];

		memcg_counters_add(m, -(int64_t)(st->nr_pages + st->nr_bytes / MEMCG_PAGE));
		__atomic_fetch_add(&m->nr_charged_bytes, st->nr_bytes % MEMCG_PAGE,
				   __ATOMIC_RELAXED);
		st->nr_pages = 0;
		st->nr_bytes = 0;
	}
	bytes = __atomic_load_n(&m->nr_charged_bytes, __ATOMIC_RELAXED);
	if (bytes >= MEMCG_PAGE) { /* whole pages of the shared remainder */
		memcg_counters_add(m, -(bytes / MEMCG_PAGE));
		__atomic_fetch_sub(&m->nr_charged_bytes, bytes / MEMCG_PAGE * MEMCG_PAGE,
				   __ATOMIC_RELAXED);
	}
}

#endif
