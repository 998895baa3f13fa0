/* SPDX-License-Identifier: MIT */
/*
 * pages: a zone buddy page allocator with per-CPU page lists (reference §5;
 * the kernel's mm/page_alloc.c, modelled, not copied).
 *
 * Simulated physical memory
 * -------------------------
 * `memory` bytes of page frames (4 GiB by default: 1M frames, so that the
 * kernel's formulas give batch 63 and its usual high values, and the page
 * metadata, 64 MiB, is larger than a last-level cache, as in the kernel).
 * Each frame has a 64-byte descriptor (struct page: flags, order, atomic
 * refcount, list links, migratetype) in one array, mapped lazily: a zero
 * descriptor means "not the head of a block" (a tail, or memory inside a
 * free block whose head is elsewhere), so creating the allocator touches one
 * descriptor per 4 MiB block. The frames' memory is one MAP_NORESERVE
 * mapping touched only where a caller writes; the allocator itself never
 * touches it (except to zero pages on request), as the kernel does not.
 * Beside the descriptors: memory sections (128 MiB, with a 2 MiB subsection
 * map) for pfn_valid(), each pointing at its part of a pageblock bitmap (4
 * bits of migratetype per 2 MiB pageblock), read through the section on
 * every free as get_pfnblock_migratetype() is.
 *
 * One more CPU's page lists than the stack has: the kworker CPU's
 * (deferred frees run there: al_vmalloc_kworker_cpu).
 *
 * The kernel's memory is always there; a fresh host mapping is not: its
 * first touch of each page is a host page fault, which would be counted in
 * whatever phase first wrote that page (a PCP that grows towards high_max
 * walks through fresh memory for a long time). So the backing memory and
 * the descriptor array are kept for the process: a destroyed instance parks
 * them (descriptors cleared back to zero up to the highest block ever taken
 * from the buddy, plus the boot-time heads) and the next instance of at
 * most that size reuses them, already faulted in. Page contents are left as
 * they were, as RAM's are; AL_GFP_ZERO zeroes what it hands out.
 *
 * Buddy (the zone)
 * ----------------
 * free_area[order].free_list[migratetype] for orders 0..10 hold the heads of
 * free blocks (PG_BUDDY, order in the descriptor), under the zone lock.
 * Allocation takes the first block of the smallest order >= the request and
 * splits it, putting each upper half back at the head of its list
 * (expand()). Freeing merges with buddy = pfn ^ (1 << order) while the buddy
 * is a free head of the same order, clearing each absorbed head; the merged
 * block goes to the tail of its list when its parent's buddy is free (the
 * kernel's buddy_merge_likely), else to the head. Memory is handed to the
 * buddy at creation as naturally aligned blocks in ascending order (to the
 * tail, as memblock_free_all does).
 *
 * PCP (per-CPU page lists)
 * ------------------------
 * Per CPU: lists[order_to_pindex(mt, order)] for orders 0..3 and the THP
 * order 9, count (pages on them), batch, high between high_min and high_max,
 * alloc_factor, free_count and flags, under the CPU's pcp lock. The owner
 * takes it with a trylock; on failure the operation goes to the zone
 * (rmqueue_buddy / free_one_page), counted as pcp_trylock_failed.
 *  - alloc: free_count >>= 1; the list's first block (LIFO, cache-hot); an
 *    empty list is refilled with nr_pcp_alloc() blocks of that order taken
 *    from the buddy under one zone-lock acquisition and added to the tail
 *    (rmqueue_bulk). nr_pcp_alloc grows high by the batch under auto-tuning,
 *    and for order 0 doubles the batch (alloc_factor) while refills find
 *    room, up to batch << 5; higher orders refill max(batch >> order, 2).
 *  - free: alloc_factor >>= 1; the block goes to the head of its list;
 *    free_count counts consecutive frees; high-order frees in a free-heavy
 *    phase set free_high; nr_pcp_high() then shrinks or grows high; when
 *    count >= high, nr_pcp_free() blocks are drained from the tails of the
 *    lists, round-robin from the list just freed to, under one zone-lock
 *    acquisition (free_pcppages_bulk).
 *  - decay (decay_pcp_high, every `decay` on a CPU's own operations, or
 *    al_pages_pcp_decay()): high shrinks by at most 1/8 towards high_min and
 *    the excess is drained.
 *  - batch = zone_batchsize() (63 from 1 GiB up), high_min = the low
 *    watermark / CPUs, high_max = memory / 8 / CPUs, both at least 4 batches
 *    (CPUs: the model's, or `cpus` to model a bigger machine's share);
 *    `batch` and `high` parameters fix them instead.
 *
 * Page states (descriptor flags; exactly one at a block head)
 * -----------------------------------------------------------
 *   PG_BUDDY  free, on a zone free list        (zone lock)
 *   PG_PCP    free, on some CPU's page list    (that pcp lock)
 *   PG_ALLOC  allocated, refcount 1            (its owner)
 *   PG_BULK   with PG_ALLOC, only inside one free_bulk call: collected for
 *             its chunk, so a repeat of the page in the same call is refused
 * split_page() makes every page of an allocated block an allocated order-0
 * page. Frees are validated from the descriptor (an allocated head of that
 * order), so invalid and double frees return -EINVAL and change nothing.
 *
 * Bulk
 * ----
 * alloc_pages_bulk: one pcp lock for the whole request, refills as needed.
 * free_pages_bulk: check every page, drop every reference, then free each
 * run of consecutive pfns as naturally aligned blocks (order = min(ffs(pfn)
 * - 1, ilog2(left), 10)); each block once, through the PCP when its order is
 * PCP-allowed, else to the buddy.
 *
 * Not modelled: mobility grouping (every pageblock and allocation is
 * UNMOVABLE, so there is no fallback stealing; the lookup still happens on
 * every free), reclaim and compaction (allocations may take the zone down to
 * zero free pages; watermarks only drive ZONE_BELOW_HIGH and high_min; the
 * zone_watermark_fast check is not made), NUMA, and the cli of the zone
 * lock's spin_lock_irqsave: its flags save and restore do run
 * (irqflags.h), around every zone-lock take.
 *
 * Lock order: a pcp lock, then the zone lock. Nothing else is taken inside.
 *
 * Counters (pages_counters): a PCP hit adds to one per-CPU slot, its order's
 * alloc_o or free_o; blocks, pages and PCP hits follow from them and are
 * derived when reported. bytes_held comes from the free counts (pages not in
 * the buddy nor on a pcp list), so it needs no counter at any stats level.
 * The zone lock counts as zone_lock_*, every CPU's pcp lock together as
 * pcp_lock_*.
 *
 * Cost: a PCP hit is a trylock, a list operation and descriptor writes; a
 * refill or drain costs one zone lock per batch plus the buddy's O(orders)
 * split/merge per block; every free reads the pageblock bitmap; every list
 * update is checked first, out of line, as CONFIG_DEBUG_LIST does.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "alloclab/alloclab.h"
#include "../core/irqflags.h"

#define PAGE_SHIFT	     AL_PAGE_SHIFT
#define PAGE_SIZE	     AL_PAGE_SIZE
#define MAX_ORDER	     AL_MAX_PAGE_ORDER
#define NR_ORDERS	     (MAX_ORDER + 1)
#define PAGEBLOCK_ORDER	     9 /* 2 MiB pageblocks, as x86-64 */
#define COSTLY_ORDER	     3 /* PAGE_ALLOC_COSTLY_ORDER */
#define THP_ORDER	     AL_PCP_THP_ORDER
#define MT_UNMOVABLE	     0
#define MT_MOVABLE	     1
#define MT_PCPTYPES	     3 /* UNMOVABLE, MOVABLE, RECLAIMABLE */
#define NR_LOWORDER_LISTS    (MT_PCPTYPES * (COSTLY_ORDER + 1))
#define NR_PCP_LISTS	     (NR_LOWORDER_LISTS + 2) /* + THP unmovable, movable */
#define BATCH_SCALE_MAX	     5			     /* CONFIG_PCP_BATCH_SCALE_MAX */
#define HIGH_FRACTION	     8			     /* MIN_PERCPU_PAGELIST_HIGH_FRACTION */
#define SECTION_SHIFT	     15			     /* 128 MiB sections */
#define SUBSECTION_SHIFT     9			     /* 2 MiB subsections: 64 per section */
#define SECTION_HAS_MEM_MAP  1ull
#define PB_BITS		     4 /* pageblock flag bits (migratetype + skip) */
#define PB_MT_MASK	     7ull
#define PB_PER_SECTION	     (1ull << (SECTION_SHIFT - PAGEBLOCK_ORDER)) /* 64 */
#define PCPF_PREV_FREE_HIGH  0x01 /* PCPF_PREV_FREE_HIGH_ORDER */
#define PCPF_FREE_HIGH_BATCH 0x02
#define DECAY_EVERY	     256 /* pcp operations between clock checks for decay */
#define FREE_CHUNK	     256 /* pfns per free_bulk chunk (stack array) */

enum { PG_BUDDY = 1u << 0, PG_PCP = 1u << 1, PG_ALLOC = 1u << 2, PG_BULK = 1u << 3 };

struct plist {
	struct plist *next; /* next entry, or the head */
	struct plist *prev; /* previous entry, or the head */
};

/* The page descriptor: 64 bytes, as struct page. */
struct page {
	uint32_t flags;	   /* PG_*, relaxed atomics; 0 = a tail or untouched frame */
	uint8_t order;	   /* block order at a head */
	uint8_t mt;	   /* migratetype of the list a free block is on */
	uint16_t pad0;	   /* unused */
	int32_t refcount;  /* atomic: 1 while allocated, 0 when free */
	uint32_t pad1;	   /* unused */
	struct plist lru;  /* free list or pcp list links */
	uint64_t private_; /* page->private: for the owner */
	uint64_t rsvd[3];  /* mapping, index, memcg_data in the kernel */
};

_Static_assert(sizeof(struct page) == 64, "a page descriptor is 64 bytes");

struct free_area {
	struct plist free_list[MT_PCPTYPES]; /* heads of free blocks, per migratetype */
	uint64_t nr_free;		     /* blocks on the lists */
};

struct zone {
	struct al_lock lock;		       /* zone->lock: free areas, free_pages */
	struct free_area area[NR_ORDERS];      /* the buddy's free lists */
	uint64_t free_pages;		       /* NR_FREE_PAGES (buddy only); relaxed reads */
	uint64_t managed;		       /* managed pages */
	long wmark_min, wmark_low, wmark_high; /* watermarks in pages */
	int below_high;			       /* ZONE_BELOW_HIGH; relaxed atomic */
};

/* struct per_cpu_pages. */
struct pcp {
	struct al_lock lock;		  /* pcp->lock: the owner trylocks, drains spin */
	int count;			  /* pages on every list */
	int high;			  /* drain when count reaches it */
	int high_min;			  /* lower bound of high */
	int high_max;			  /* upper bound of high */
	int batch;			  /* base batch */
	int free_count;			  /* recent consecutive frees (pages), decays */
	uint8_t flags;			  /* PCPF_* */
	uint8_t alloc_factor;		  /* order-0 refills are batch << alloc_factor */
	uint32_t ops;			  /* operations since the last decay clock check */
	uint64_t last_decay;		  /* ticks of the last decay */
	struct plist lists[NR_PCP_LISTS]; /* by order_to_pindex(mt, order) */
} __attribute__((aligned(AL_CACHELINE)));

/* struct mem_section, reduced to what pfn_valid() reads. */
struct section {
	uint64_t flags;		 /* SECTION_HAS_MEM_MAP */
	uint64_t subsection_map; /* one bit per 2 MiB subsection */
	uint64_t *usage;	 /* its pageblocks' flags (ms->usage->pageblock_flags) */
};

/*
 * A PCP hit adds to one slot, found once per call: the block's order in
 * alloc_o[] or free_o[]. What follows from those (blocks and pages handed
 * out and given back, PCP hits) is derived or reported by pages_stats(),
 * not counted.
 */
#define PAGE_ORDERS(C, P, DIR, DOC)                 \
	C(P, DIR##_o0, AL_CTR_KEY, DOC ", order 0") \
	C(P, DIR##_o1, AL_CTR_KEY, "order 1")       \
	C(P, DIR##_o2, AL_CTR_KEY, "order 2")       \
	C(P, DIR##_o3, AL_CTR_KEY, "order 3")       \
	C(P, DIR##_o4, AL_CTR_KEY, "order 4")       \
	C(P, DIR##_o5, AL_CTR_KEY, "order 5")       \
	C(P, DIR##_o6, AL_CTR_KEY, "order 6")       \
	C(P, DIR##_o7, AL_CTR_KEY, "order 7")       \
	C(P, DIR##_o8, AL_CTR_KEY, "order 8")       \
	C(P, DIR##_o9, AL_CTR_KEY, "order 9")       \
	C(P, DIR##_o10, AL_CTR_KEY, "order 10")

#define PAGE_SUM(DIR)                                                                            \
#DIR "_o0+" #DIR "_o1+" #DIR "_o2+" #DIR "_o3+" #DIR "_o4+" #DIR "_o5+" #DIR "_o6+" #DIR \
	     "_o7+" #DIR "_o8+" #DIR "_o9+" #DIR "_o10"

#define PAGES_COUNTERS(C, D, P)                                                                   \
	D(P, allocs, AL_CTR_KEY, PAGE_SUM(alloc) "+split_page_blocks",                            \
	  "blocks handed out (alloc, alloc_bulk, page API)")                                      \
	D(P, frees, AL_CTR_KEY, PAGE_SUM(free) "-bulk_free_blocks+bulk_free_pages",               \
	  "blocks given back by callers (a bulk-freed run counts its pages)")                     \
	D(P, pages_alloc, 0, "", "pages handed out")                                              \
	D(P, pages_freed, 0, "", "pages given back")                                              \
	PAGE_ORDERS(C, P, alloc, "blocks allocated")                                              \
	PAGE_ORDERS(C, P, free, "blocks freed (to a pcp list or the buddy)")                      \
	D(P, pcp_allocs, AL_CTR_KEY, PAGE_SUM(alloc) "-zone_allocs",                              \
	  "blocks taken from a pcp list")                                                         \
	D(P, pcp_frees, AL_CTR_KEY, PAGE_SUM(free) "-zone_frees", "blocks put on a pcp list")     \
	C(P, pcp_refills, AL_CTR_KEY,                                                             \
	  "empty pcp lists refilled from the buddy (one zone lock each)")                         \
	C(P, pcp_refill_blocks, 0, "blocks moved buddy -> pcp by refills")                        \
	C(P, pcp_drains, AL_CTR_KEY, "free_pcppages_bulk calls (one zone lock each)")             \
	C(P, pcp_drain_pages, 0, "pages moved pcp -> buddy by drains")                            \
	C(P, pcp_trylock_failed, AL_CTR_KEY,                                                      \
	  "pcp trylock failures: the operation went to the zone")                                 \
	C(P, pcp_bypass, AL_CTR_KEY,                                                              \
	  "blocks allocated or freed at the zone: order not PCP-allowed or NOPCP")                \
	C(P, pcp_only_empty, 0, "AL_GFP_PCP_ONLY attempts that found the list empty")             \
	C(P, zone_allocs, AL_CTR_KEY, "blocks allocated straight from the buddy (rmqueue_buddy)") \
	C(P, zone_frees, AL_CTR_KEY, "blocks freed straight to the buddy (free_one_page)")        \
	C(P, splits, AL_CTR_KEY, "blocks halved by the buddy (expand)")                           \
	C(P, merges, AL_CTR_KEY, "buddy pairs merged on free")                                    \
	C(P, merge_to_tail, 0, "merged blocks queued at the tail (buddy_merge_likely)")           \
	C(P, pages_zeroed, 0, "pages zeroed as they were allocated (__GFP_ZERO)")                 \
	C(P, split_pages, 0, "split_page calls")                                                  \
	C(P, split_page_blocks, 0, "blocks split_page added (the pages of a block but its head)") \
	C(P, bulk_alloc_calls, 0, "alloc_pages_bulk calls")                                       \
	C(P, bulk_free_calls, 0, "free_pages_bulk calls")                                         \
	C(P, bulk_free_runs, 0, "contiguous runs found by free_pages_bulk")                       \
	C(P, bulk_free_blocks, 0, "aligned blocks free_pages_bulk freed")                         \
	C(P, bulk_free_pages, 0, "pages free_pages_bulk freed")                                   \
	C(P, high_grow, 0, "pcp high raised (allocation pressure or a batch of frees)")           \
	C(P, high_shrink, 0, "pcp high lowered (free_high, below-high zone, decay)")              \
	C(P, free_high, 0, "high-order free bursts drained at once (free_high)")                  \
	C(P, decays, 0, "decay_pcp_high ticks that changed high or drained")                      \
	C(P, below_high, 0, "times the zone fell below its high watermark")                       \
	C(P, drain_all, AL_CTR_KEY,                                                               \
	  "allocations that drained every CPU's lists and retried (slow path)")                   \
	C(P, enomem, AL_CTR_KEY, "allocations failed: no free block of that order")               \
	C(P, noretry_failed, 0, "AL_GFP_NORETRY attempts that failed")                            \
	C(P, einval, AL_CTR_KEY, "calls rejected: bad order, size or flags")                      \
	C(P, invalid_frees, AL_CTR_KEY, "frees rejected: not an allocated block of that order")   \
	C(P, lock_failed, AL_CTR_KEY,                                                             \
	  "operations that failed or were cut short: the zone lock failed")                       \
	AL_LOCK_COUNTERS(C, P, zone_lock, "the zone lock")                                        \
	AL_LOCK_COUNTERS(C, P, pcp_lock, "the pcp locks")                                         \
	D(P, free_pages, AL_CTR_GAUGE, "", "pages free in the buddy")                             \
	D(P, pcp_pages, AL_CTR_GAUGE, "", "pages on the pcp lists of every CPU")                  \
	D(P, pcp_high, AL_CTR_GAUGE, "", "the sum of every CPU's pcp high")                       \
	D(P, pcp_batch, AL_CTR_GAUGE, "", "the pcp batch (CPU 0's)")                              \
	D(P, pcp_high_min, AL_CTR_GAUGE, "", "the lowest pcp high (CPU 0's)")                     \
	D(P, pcp_high_max, AL_CTR_GAUGE, "", "the highest pcp high (CPU 0's)")

AL_COUNTERS_DEFINE(PAGES_COUNTERS, PAGE_, pages_counters);

enum {
	P_MEMORY,
	P_BATCH,
	P_HIGH,
	P_DECAY,
	P_FREE_HIGH_BATCH,
	P_LOCK_BUDGET,
	P_LOCK_TIMING,
	P_CPUS,
	P_NR
};

/* One instance. Geometry is set at create and read-only afterwards. */
struct pages {
	struct al_allocator base; /* must be first */
	struct zone zone;	  /* the one zone */
	struct pcp *pcp;	  /* npcp per-CPU page lists */
	unsigned npcp;		  /* ncpu + the kworker CPU (al_kworker_cpu) */
	size_t pcp_len;		  /* bytes of pcp[] */
	struct page *map;	  /* mem_map: one descriptor per frame */
	size_t map_len;		  /* bytes of map[] */
	uint8_t *mem;		  /* backing memory of the frames */
	size_t mem_len;		  /* bytes of mem */
	uint64_t *pageblock;	  /* PB_BITS per pageblock */
	size_t pageblock_len;	  /* bytes of pageblock[] */
	struct section *sections; /* memory sections */
	size_t sections_len;	  /* bytes of sections[] */
	uint64_t nr_sections;	  /* entries of sections[] */
	uint64_t npages;	  /* page frames */
	uint64_t hw;		  /* end pfn of the highest block taken from the buddy; zone lock */
	size_t mem_map_len;	  /* bytes of the mem mapping (may exceed mem_len: reused) */
	size_t map_map_len;	  /* bytes of the map mapping (likewise) */
	uint64_t decay_ticks;	  /* decay interval in clock ticks; 0 = off */
	struct al_counters ctr;	  /* pages_counters, per [cpu][level] */
};

AL_LAYER_DECLARE(pages);

static inline struct pages *to_pages(struct al_allocator *a)
{
	return (struct pages *)a;
}

static inline struct pages *pages_of(const struct al_allocator *a)
{
	return a && a->ops == AL_LAYER_OPS(pages) ? (struct pages *)a : NULL;
}

/* ---- lists ---- */

static inline void plist_init(struct plist *h)
{
	h->next = h->prev = h;
}

static inline bool plist_empty(const struct plist *h)
{
	return h->next == h;
}

/*
 * lib/list_debug.c, CONFIG_DEBUG_LIST (which the seed's kernel runs with:
 * __list_add_valid_or_report is 4.3% of its default vfree profile): every
 * list_add and list_del first calls an out-of-line check that the
 * neighbours' links point back at each other, and a deleted entry's links
 * are poisoned (LIST_POISON1/2). A check that fails refuses the update, as
 * the kernel's list_add()/list_del() do after the report; here only a bug
 * in the model could make one fail (asserted in debug builds).
 */
#define LIST_POISON1 ((struct plist *)0x100)
#define LIST_POISON2 ((struct plist *)0x122)

/* __list_add_valid_or_report(). */
static al_noinline bool plist_add_valid(const struct plist *n, const struct plist *prev,
					const struct plist *next)
{
	return prev && next && next->prev == prev && prev->next == next && n != prev && n != next;
}

/* __list_del_entry_valid_or_report(). */
static al_noinline bool plist_del_valid(const struct plist *n)
{
	const struct plist *prev = n->prev, *next = n->next;

	return prev && next && next != LIST_POISON1 && prev != LIST_POISON2 && prev->next == n &&
	       next->prev == n;
}

static inline void plist_insert(struct plist *n, struct plist *prev, struct plist *next)
{
	if (al_unlikely(!plist_add_valid(n, prev, next))) {
		al_assert(!"list_add corruption");
		return;
	}
	next->prev = n;
	n->next = next;
	n->prev = prev;
	prev->next = n;
}

static inline void plist_add(struct plist *n, struct plist *h)
{
	plist_insert(n, h, h->next);
}

static inline void plist_add_tail(struct plist *n, struct plist *h)
{
	plist_insert(n, h->prev, h);
}

static inline void plist_del(struct plist *n)
{
	if (al_unlikely(!plist_del_valid(n))) {
		al_assert(!"list_del corruption");
		return;
	}
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = LIST_POISON1;
	n->prev = LIST_POISON2;
}

static inline struct page *lru_page(struct plist *l)
{
	return (struct page *)((char *)l - __builtin_offsetof(struct page, lru));
}

/* ---- descriptors ---- */

static inline struct page *pfn_page(const struct pages *pg, uint64_t pfn)
{
	return &pg->map[pfn];
}

static inline uint64_t page_pfn(const struct pages *pg, const struct page *p)
{
	return (uint64_t)(p - pg->map);
}

static inline uint32_t pflags(const struct page *p)
{
	return __atomic_load_n(&p->flags, __ATOMIC_RELAXED);
}

static inline void set_pflags(struct page *p, uint32_t f)
{
	__atomic_store_n(&p->flags, f, __ATOMIC_RELAXED);
}

/*
 * get_pfnblock_migratetype() -> __get_pfnblock_flags_mask(): the bitmap is
 * found through the pfn's memory section (SPARSEMEM keeps it in the
 * section's usage), then the pageblock's bits are read: two dependent loads.
 */
static inline unsigned pageblock_mt(const struct pages *pg, uint64_t pfn)
{
	const uint64_t *bitmap = pg->sections[pfn >> SECTION_SHIFT].usage;
	uint64_t bit = ((pfn >> PAGEBLOCK_ORDER) & (PB_PER_SECTION - 1)) * PB_BITS;
	uint64_t w = __atomic_load_n(&bitmap[bit / 64], __ATOMIC_RELAXED);

	return (unsigned)((w >> (bit % 64)) & PB_MT_MASK);
}

static inline bool pcp_allowed(unsigned order)
{
	return order <= COSTLY_ORDER || order == THP_ORDER;
}

static inline unsigned order_to_pindex(unsigned mt, unsigned order)
{
	if (order > COSTLY_ORDER)
		return NR_LOWORDER_LISTS + (mt == MT_MOVABLE);
	return MT_PCPTYPES * order + mt;
}

static inline unsigned pindex_to_order(unsigned pindex)
{
	return pindex >= NR_LOWORDER_LISTS ? THP_ORDER : pindex / MT_PCPTYPES;
}

static inline void count_ctr(struct pages *pg, const struct al_ctx *c, unsigned idx, uint64_t v)
{
	if (v)
		al_count(&pg->ctr, c, idx, v);
}

/* ---- the buddy (zone lock held) ---- */

static inline void add_to_free_list(struct pages *pg, struct page *p, unsigned order, unsigned mt,
				    bool tail)
{
	struct free_area *fa = &pg->zone.area[order];

	p->order = (uint8_t)order;
	p->mt = (uint8_t)mt;
	set_pflags(p, PG_BUDDY);
	if (tail)
		plist_add_tail(&p->lru, &fa->free_list[mt]);
	else
		plist_add(&p->lru, &fa->free_list[mt]);
	fa->nr_free++;
}

static inline void del_from_free_list(struct pages *pg, struct page *p, unsigned order)
{
	al_assert((pflags(p) & PG_BUDDY) && p->order == order);
	al_assert(pg->zone.area[order].nr_free > 0);
	plist_del(&p->lru);
	set_pflags(p, 0);
	p->order = 0;
	pg->zone.area[order].nr_free--;
}

static inline void zone_free_add(struct pages *pg, int64_t n)
{
	__atomic_store_n(&pg->zone.free_pages,
			 __atomic_load_n(&pg->zone.free_pages, __ATOMIC_RELAXED) + (uint64_t)n,
			 __ATOMIC_RELAXED);
}

/* Statistics gathered under the zone lock, counted after it. */
struct zstat {
	uint64_t splits, merges, to_tail;
};

/* __rmqueue_smallest + expand(): a block of `order`, or NULL. */
static struct page *rmqueue_smallest_locked(struct pages *pg, unsigned order, unsigned mt,
					    struct zstat *zs)
{
	struct page *p;
	unsigned o;

	al_lock_assert_locked(&pg->zone.lock);
	for (o = order; o <= MAX_ORDER; o++) {
		struct plist *h = &pg->zone.area[o].free_list[mt];

		if (plist_empty(h))
			continue;
		p = lru_page(h->next);
		del_from_free_list(pg, p, o);
		if (page_pfn(pg, p) + (1ull << o) > pg->hw)
			pg->hw = page_pfn(pg, p) + (1ull << o);
		while (o > order) {
			o--;
			add_to_free_list(pg, p + (1u << o), o, mt, false);
			zs->splits++;
		}
		zone_free_add(pg, -(int64_t)(1u << order));
		return p;
	}
	return NULL;
}

/* Whether pfn is the head of a free buddy block of exactly `order`. */
static inline bool is_free_head(const struct pages *pg, uint64_t pfn, unsigned order)
{
	const struct page *b;

	if (pfn >= pg->npages)
		return false;
	b = pfn_page(pg, pfn);
	return (pflags(b) & PG_BUDDY) && b->order == order;
}

/* __free_one_page: merge and queue. The head's descriptor is already clear. */
static void free_one_page_locked(struct pages *pg, uint64_t pfn, unsigned order, unsigned mt,
				 struct zstat *zs)
{
	unsigned o = order;
	uint64_t buddy_pfn;
	bool tail = false;

	al_lock_assert_locked(&pg->zone.lock);
	al_assert(pfn < pg->npages && !(pfn & ((1ull << order) - 1)));
	while (o < MAX_ORDER) {
		buddy_pfn = pfn ^ (1ull << o);
		if (!is_free_head(pg, buddy_pfn, o))
			break;
		/* At pageblock order and above only blocks of one type merge. */
		if (o >= PAGEBLOCK_ORDER && pageblock_mt(pg, buddy_pfn) != mt)
			break;
		del_from_free_list(pg, pfn_page(pg, buddy_pfn), o);
		pfn &= buddy_pfn;
		o++;
		zs->merges++;
	}
	/* buddy_merge_likely(): if the parent's buddy is free, this block is
	 * likely to merge soon, so keep it at the tail, away from allocations. */
	if (o < MAX_ORDER - 1) {
		uint64_t parent = pfn & ~(1ull << o);

		tail = is_free_head(pg, parent ^ (1ull << (o + 1)), o + 1);
	}
	if (tail)
		zs->to_tail++;
	add_to_free_list(pg, pfn_page(pg, pfn), o, mt, tail);
	zone_free_add(pg, (int64_t)1 << order);
}

/*
 * spin_lock_irqsave(&zone->lock, flags) (spin_trylock_irqsave for nospin), as
 * every zone-lock taker in page_alloc.c does: the flags save and restore run
 * here (irqflags.h), so each acquisition costs what they cost on this CPU.
 * The saved flags stay in the caller's local, as the kernel's do. 0, or the
 * lock's error, counted as lock_failed.
 */
static inline int zone_lock(struct pages *pg, const struct al_ctx *c, bool nospin,
			    unsigned long *flags)
{
	int ret;

	*flags = al_local_irq_save();
	if (al_unlikely(nospin))
		ret = al_lock_tryacquire(&pg->zone.lock, c);
	else
		ret = al_lock_acquire(&pg->zone.lock, c);
	if (al_unlikely(ret)) {
		al_local_irq_restore(*flags);
		al_count(&pg->ctr, c, PAGE_lock_failed, 1);
	}
	return ret;
}

/* spin_unlock_irqrestore(&zone->lock, flags), then the statistics gathered under it. */
static inline void zone_unlock(struct pages *pg, const struct al_ctx *c, const struct zstat *zs,
			       unsigned long flags)
{
	al_lock_release(&pg->zone.lock, c);
	al_local_irq_restore(flags);
	count_ctr(pg, c, PAGE_splits, zs->splits);
	count_ctr(pg, c, PAGE_merges, zs->merges);
	count_ctr(pg, c, PAGE_merge_to_tail, zs->to_tail);
}

/* ---- allocated blocks ---- */

static inline void prep_new_block(struct pages *pg, struct page *p, unsigned order, unsigned gfp)
{
	p->order = (uint8_t)order;
	p->private_ = 0;
	__atomic_store_n(&p->refcount, 1, __ATOMIC_RELAXED);
	set_pflags(p, PG_ALLOC);
	if (gfp & AL_GFP_ZERO)
		memset(pg->mem + (page_pfn(pg, p) << PAGE_SHIFT), 0, PAGE_SIZE << order);
}

/* Blocks handed out: one slot (allocs, pages_alloc and pcp_allocs follow). */
static inline void count_alloc(struct pages *pg, const struct al_ctx *c, unsigned order,
			       uint64_t blocks)
{
	al_count(&pg->ctr, c, PAGE_alloc_o0 + order, blocks);
}

/* ZONE_BELOW_HIGH detection, done on allocation as get_page_from_freelist does. */
static inline void check_below_high(struct pages *pg, const struct al_ctx *c, unsigned order)
{
	uint64_t free;

	if (__atomic_load_n(&pg->zone.below_high, __ATOMIC_RELAXED))
		return;
	free = __atomic_load_n(&pg->zone.free_pages, __ATOMIC_RELAXED);
	if ((int64_t)free - (1ll << order) + 1 <= pg->zone.wmark_high) {
		__atomic_store_n(&pg->zone.below_high, 1, __ATOMIC_RELAXED);
		al_count(&pg->ctr, c, PAGE_below_high, 1);
	}
}

/* ---- PCP (pcp lock held) ---- */

static inline int clamp_int(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

static inline void set_high(struct pages *pg, const struct al_ctx *c, struct pcp *pcp, int high)
{
	if (high > pcp->high)
		al_count(&pg->ctr, c, PAGE_high_grow, 1);
	else if (high < pcp->high)
		al_count(&pg->ctr, c, PAGE_high_shrink, 1);
	pcp->high = high;
}

/* nr_pcp_alloc(): how many blocks of `order` a refill takes. */
static int nr_pcp_alloc(struct pages *pg, const struct al_ctx *c, struct pcp *pcp, unsigned order)
{
	int base = pcp->batch, high_min = pcp->high_min, high_max = pcp->high_max, high, batch;
	int max_nr;

	high = pcp->high = clamp_int(pcp->high, high_min, high_max);
	if (high < base)
		return 1; /* PCP disabled or a tiny fixed high */
	batch = order ? base : base << pcp->alloc_factor;
	/* Allocation pressure grows high, unless the zone is short of memory. */
	if (high_min != high_max && !__atomic_load_n(&pg->zone.below_high, __ATOMIC_RELAXED)) {
		set_high(pg, c, pcp, high + batch < high_max ? high + batch : high_max);
		high = pcp->high;
	}
	if (!order) {
		max_nr = high - pcp->count - base;
		if (max_nr < base)
			max_nr = base;
		if (batch <= max_nr && pcp->alloc_factor < BATCH_SCALE_MAX)
			pcp->alloc_factor++;
		if (batch > max_nr)
			batch = max_nr;
	}
	if (batch > 1) {
		batch >>= order;
		if (batch < 2)
			batch = 2;
	}
	return batch;
}

/* nr_pcp_high(): the high to drain at; may adjust pcp->high. */
static int nr_pcp_high(struct pages *pg, const struct al_ctx *c, struct pcp *pcp, int batch,
		       bool free_high)
{
	int high_min = pcp->high_min, high_max = pcp->high_max, high, fc;

	high = pcp->high = clamp_int(pcp->high, high_min, high_max);
	if (!high)
		return 0;
	if (free_high) {
		fc = high - (batch << BATCH_SCALE_MAX);
		set_high(pg, c, pcp, fc > high_min ? fc : high_min);
		return 0;
	}
	if (high_min == high_max)
		return high;
	if (__atomic_load_n(&pg->zone.below_high, __ATOMIC_RELAXED)) {
		fc = pcp->free_count > batch ? pcp->free_count : batch;
		set_high(pg, c, pcp, high - fc > high_min ? high - fc : high_min);
		high = pcp->count > high_min ? pcp->count : high_min;
	} else if (pcp->count >= high) {
		int need = pcp->free_count + batch;

		/* Large enough to hold a batch of frees. */
		if (pcp->high < need)
			set_high(pg, c, pcp, clamp_int(need, high_min, high_max));
	}
	return high;
}

/* nr_pcp_free(): how many pages a drain frees. */
static int nr_pcp_free(const struct pcp *pcp, int batch, int high, bool free_high)
{
	int lo, hi, n;

	if (free_high) {
		n = batch << BATCH_SCALE_MAX;
		return pcp->count < n ? pcp->count : n;
	}
	if (high < batch)
		return 1;
	/* Leave at least a batch; free more in free-heavy phases. */
	lo = batch;
	hi = high - batch;
	n = pcp->free_count > lo ? pcp->free_count : lo;
	return n < hi ? n : hi;
}

/*
 * free_pcppages_bulk(): drain `count` pages from the list tails, round-robin
 * starting with `pindex`, under one zone-lock acquisition. Returns pages
 * freed, or a negative errno when the zone lock failed (nothing moved).
 */
static int free_pcppages_bulk(struct pages *pg, const struct al_ctx *c, struct pcp *pcp, int count,
			      unsigned pindex)
{
	struct zstat zs = { 0 };
	unsigned long flags;
	struct plist *list;
	int freed = 0, ret;
	unsigned order;

	if (count > pcp->count)
		count = pcp->count;
	if (count <= 0)
		return 0;
	ret = zone_lock(pg, c, false, &flags);
	if (al_unlikely(ret))
		return ret;
	pindex = pindex ? pindex - 1 : NR_PCP_LISTS - 1;
	while (count > 0) {
		do {
			if (++pindex >= NR_PCP_LISTS)
				pindex = 0;
			list = &pcp->lists[pindex];
		} while (plist_empty(list));
		order = pindex_to_order(pindex);
		do {
			struct page *p = lru_page(list->prev);
			uint64_t pfn = page_pfn(pg, p);
			unsigned mt = pageblock_mt(pg, pfn);

			plist_del(&p->lru);
			set_pflags(p, 0);
			p->order = 0;
			count -= 1 << order;
			pcp->count -= 1 << order;
			freed += 1 << order;
			free_one_page_locked(pg, pfn, order, mt, &zs);
		} while (count > 0 && !plist_empty(list));
	}
	zone_unlock(pg, c, &zs, flags);
	al_count(&pg->ctr, c, PAGE_pcp_drains, 1);
	al_count(&pg->ctr, c, PAGE_pcp_drain_pages, (uint64_t)freed);
	return freed;
}

/* decay_pcp_high(): shrink high by at most 1/8 and drain the excess. */
static int decay_locked(struct pages *pg, const struct al_ctx *c, struct pcp *pcp)
{
	int high_min = pcp->high_min, batch = pcp->batch, h, n, freed = 0;
	bool did = false;

	al_lock_assert_held(&pcp->lock, c);
	if (pcp->high > high_min) {
		h = pcp->count - (batch << BATCH_SCALE_MAX);
		if (pcp->high - (pcp->high >> 3) > h)
			h = pcp->high - (pcp->high >> 3);
		if (high_min > h)
			h = high_min;
		set_high(pg, c, pcp, h);
		did = true;
	}
	n = pcp->count - pcp->high;
	if (n > 0) {
		freed = free_pcppages_bulk(pg, c, pcp, n, 0);
		did = true;
	}
	if (did)
		al_count(&pg->ctr, c, PAGE_decays, 1);
	return freed > 0 ? freed : 0;
}

static inline void maybe_decay(struct pages *pg, const struct al_ctx *c, struct pcp *pcp)
{
	uint64_t now;

	if (al_likely(++pcp->ops % DECAY_EVERY) || !pg->decay_ticks)
		return;
	now = al_ticks_fast();
	if (now - pcp->last_decay < pg->decay_ticks)
		return;
	pcp->last_decay = now;
	decay_locked(pg, c, pcp);
}

/* rmqueue_bulk(): up to count blocks from the buddy to the tail of a list. */
static int rmqueue_bulk(struct pages *pg, const struct al_ctx *c, unsigned order, int count,
			struct plist *list, unsigned mt)
{
	struct zstat zs = { 0 };
	unsigned long flags;
	struct page *p;
	int i, ret;

	ret = zone_lock(pg, c, false, &flags);
	if (al_unlikely(ret))
		return ret;
	for (i = 0; i < count; i++) {
		p = rmqueue_smallest_locked(pg, order, mt, &zs);
		if (!p)
			break;
		p->order = (uint8_t)order;
		p->mt = (uint8_t)mt;
		set_pflags(p, PG_PCP);
		plist_add_tail(&p->lru, list);
	}
	zone_unlock(pg, c, &zs, flags);
	al_count(&pg->ctr, c, PAGE_pcp_refills, 1);
	al_count(&pg->ctr, c, PAGE_pcp_refill_blocks, (uint64_t)i);
	return i;
}

/*
 * __rmqueue_pcplist(): a block from a pcp list, refilled when empty (unless
 * !refill). NULL with *err = -ENOMEM, -EAGAIN (empty, no refill) or a lock
 * error.
 */
static struct page *rmqueue_pcplist_locked(struct pages *pg, const struct al_ctx *c,
					   struct pcp *pcp, unsigned order, unsigned mt,
					   bool refill, int *err)
{
	struct plist *list = &pcp->lists[order_to_pindex(mt, order)];
	struct page *p;
	int got;

	al_lock_assert_held(&pcp->lock, c);
	if (plist_empty(list)) {
		if (!refill) {
			*err = -EAGAIN;
			return NULL;
		}
		got = rmqueue_bulk(pg, c, order, nr_pcp_alloc(pg, c, pcp, order), list, mt);
		if (got <= 0) {
			*err = got < 0 ? got : -ENOMEM;
			return NULL;
		}
		pcp->count += got << order;
		maybe_decay(pg, c, pcp);
	}
	p = lru_page(list->next);
	al_assert((pflags(p) & PG_PCP) && p->order == order);
	plist_del(&p->lru);
	set_pflags(p, 0);
	pcp->count -= 1 << order;
	al_assert(pcp->count >= 0);
	return p;
}

/* free_frozen_page_commit(): put a free block on this CPU's list, drain at high. */
static void free_commit_locked(struct pages *pg, const struct al_ctx *c, struct pcp *pcp,
			       uint64_t pfn, unsigned order, unsigned mt)
{
	struct page *p = pfn_page(pg, pfn);
	unsigned pindex = order_to_pindex(mt, order);
	bool free_high = false;
	int batch = pcp->batch, high;

	al_lock_assert_held(&pcp->lock, c);
	al_assert(!(pflags(p) & (PG_BUDDY | PG_PCP)));
	pcp->alloc_factor >>= 1;
	p->order = (uint8_t)order;
	p->mt = (uint8_t)mt;
	set_pflags(p, PG_PCP);
	plist_add(&p->lru, &pcp->lists[pindex]);
	pcp->count += 1 << order;
	/* High-order pages freed in bulk without allocations: drain them
	 * quickly, they fragment the buddy while cached. */
	if (order && order <= COSTLY_ORDER) {
		free_high = pcp->free_count >= batch + pcp->high_min / 2 &&
			    (pcp->flags & PCPF_PREV_FREE_HIGH) &&
			    (!(pcp->flags & PCPF_FREE_HIGH_BATCH) || pcp->count >= batch);
		pcp->flags |= PCPF_PREV_FREE_HIGH;
	} else if (pcp->flags & PCPF_PREV_FREE_HIGH) {
		pcp->flags &= (uint8_t)~PCPF_PREV_FREE_HIGH;
	}
	if (pcp->free_count < (batch << BATCH_SCALE_MAX))
		pcp->free_count += 1 << order;
	high = nr_pcp_high(pg, c, pcp, batch, free_high);
	if (pcp->count >= high) {
		if (free_high)
			al_count(&pg->ctr, c, PAGE_free_high, 1);
		free_pcppages_bulk(pg, c, pcp, nr_pcp_free(pcp, batch, high, free_high), pindex);
		if (__atomic_load_n(&pg->zone.below_high, __ATOMIC_RELAXED) &&
		    (int64_t)__atomic_load_n(&pg->zone.free_pages, __ATOMIC_RELAXED) >
			    pg->zone.wmark_high)
			__atomic_store_n(&pg->zone.below_high, 0, __ATOMIC_RELAXED);
	}
	maybe_decay(pg, c, pcp);
}

/* ---- allocation ---- */

/* rmqueue_buddy(): a block straight from the buddy. 0 or -errno. */
static int rmqueue_buddy(struct pages *pg, const struct al_ctx *c, unsigned order, unsigned gfp,
			 bool nospin, struct page **out)
{
	struct zstat zs = { 0 };
	unsigned long flags;
	struct page *p;
	int ret;

	ret = zone_lock(pg, c, nospin, &flags);
	if (al_unlikely(ret))
		return ret;
	p = rmqueue_smallest_locked(pg, order, MT_UNMOVABLE, &zs);
	zone_unlock(pg, c, &zs, flags);
	if (!p) {
		al_count(&pg->ctr, c, PAGE_enomem, 1);
		if (gfp & AL_GFP_NORETRY)
			al_count(&pg->ctr, c, PAGE_noretry_failed, 1);
		return -ENOMEM;
	}
	al_count(&pg->ctr, c, PAGE_zone_allocs, 1);
	*out = p;
	return 0;
}

static void drain_cpu(struct pages *pg, const struct al_ctx *c, unsigned cpu);

/* alloc_pages(): see pages.h. */
static int alloc_block(struct pages *pg, struct al_ctx *c, unsigned order, unsigned gfp,
		       bool nospin, struct page **out)
{
	bool drained = false;

	struct pcp *pcp;
	struct page *p;
	int err = 0;

	check_below_high(pg, c, order);
	if (pcp_allowed(order) && !(gfp & AL_GFP_NOPCP)) {
		pcp = &pg->pcp[c->cpu];
		if (al_likely(!al_lock_tryacquire(&pcp->lock, c))) {
			/* An allocation halves the consecutive-frees signal. */
			pcp->free_count >>= 1;
			p = rmqueue_pcplist_locked(pg, c, pcp, order, MT_UNMOVABLE,
						   !(gfp & AL_GFP_PCP_ONLY), &err);
			al_lock_release(&pcp->lock, c);
			if (al_likely(p))
				goto out;
			if (err == -EAGAIN) {
				al_count(&pg->ctr, c, PAGE_pcp_only_empty, 1);
				return err;
			}
			if (err != -ENOMEM)
				return err; /* the zone lock failed */
		} else {
			al_count(&pg->ctr, c, PAGE_pcp_trylock_failed, 1);
			if (gfp & AL_GFP_PCP_ONLY)
				return -EAGAIN;
		}
	} else {
		if (gfp & AL_GFP_PCP_ONLY)
			return -EINVAL;
		al_count(&pg->ctr, c, PAGE_pcp_bypass, 1);
	}
retry:
	err = rmqueue_buddy(pg, c, order, gfp, nospin, &p);
	if (al_unlikely(err == -ENOMEM) && !drained && !nospin && !(gfp & AL_GFP_NORETRY)) {
		/* The slow path: pages cached on other CPUs' lists come back to
		 * the buddy (drain_all_pages) before the allocation gives up. */
		unsigned cpu;

		for (cpu = 0; cpu < pg->npcp; cpu++)
			drain_cpu(pg, c, cpu);
		drained = true;
		al_count(&pg->ctr, c, PAGE_drain_all, 1);
		goto retry;
	}
	if (err)
		return err;
out:
	prep_new_block(pg, p, order, gfp);
	count_alloc(pg, c, order, 1);
	if (gfp & AL_GFP_ZERO)
		al_count(&pg->ctr, c, PAGE_pages_zeroed, 1ull << order);
	*out = p;
	return 0;
}

static al_noinline al_cold int reject(struct pages *pg, const struct al_ctx *c, unsigned ctr)
{
	al_count(&pg->ctr, c, ctr, 1);
	return -EINVAL;
}

/* alloc_pages_bulk(): see pages.h. Fills pfns[] or ptrs[] (either may be NULL). */
static int alloc_bulk(struct pages *pg, struct al_ctx *c, unsigned order, unsigned n, unsigned gfp,
		      uint64_t *pfns, void **ptrs)
{
	struct pcp *pcp = &pg->pcp[c->cpu];
	struct page *p;
	unsigned i = 0;
	int err = 0;

	al_count(&pg->ctr, c, PAGE_bulk_alloc_calls, 1);
	if (!n)
		return 0;
	if (n == 1 && !(gfp & AL_GFP_PCP_ONLY))
		goto one; /* one page: the single-page path, as the kernel does */
	if (al_unlikely(al_lock_tryacquire(&pcp->lock, c))) {
		al_count(&pg->ctr, c, PAGE_pcp_trylock_failed, 1);
		if (gfp & AL_GFP_PCP_ONLY) {
			c->err = -EAGAIN;
			return 0;
		}
		goto one;
	}
	for (; i < n; i++) {
		p = rmqueue_pcplist_locked(pg, c, pcp, order, MT_UNMOVABLE,
					   !(gfp & AL_GFP_PCP_ONLY), &err);
		if (!p)
			break;
		prep_new_block(pg, p, order, gfp);
		if (pfns)
			pfns[i] = page_pfn(pg, p);
		if (ptrs)
			ptrs[i] = pg->mem + (page_pfn(pg, p) << PAGE_SHIFT);
	}
	al_lock_release(&pcp->lock, c);
	if (i) {
		count_alloc(pg, c, order, i);
		if (gfp & AL_GFP_ZERO)
			al_count(&pg->ctr, c, PAGE_pages_zeroed, (uint64_t)i << order);
		return (int)i;
	}
	if (err == -EAGAIN) {
		al_count(&pg->ctr, c, PAGE_pcp_only_empty, 1);
		c->err = err;
		return 0;
	}
	if (err != -ENOMEM) {
		c->err = err;
		return 0;
	}
one:
	/* The first page failed (or one was asked for): one through the full path. */
	err = alloc_block(pg, c, order, gfp & ~AL_GFP_PCP_ONLY, false, &p);
	if (err) {
		c->err = err;
		return 0;
	}
	if (pfns)
		pfns[0] = page_pfn(pg, p);
	if (ptrs)
		ptrs[0] = pg->mem + (page_pfn(pg, p) << PAGE_SHIFT);
	return 1;
}

/* ---- free ---- */

/*
 * __free_frozen_pages(): a block whose reference is gone goes to this CPU's
 * list (PCP-allowed orders) or to the buddy. 0 or a lock error (nothing
 * freed; the caller restores the block).
 */
static int free_frozen(struct pages *pg, const struct al_ctx *c, uint64_t pfn, unsigned order)
{
	unsigned mt = pageblock_mt(pg, pfn);
	struct zstat zs = { 0 };
	unsigned long flags;
	struct pcp *pcp;
	int ret;

	if (pcp_allowed(order)) {
		pcp = &pg->pcp[c->cpu];
		if (al_likely(!al_lock_tryacquire(&pcp->lock, c))) {
			free_commit_locked(pg, c, pcp, pfn, order, mt);
			al_lock_release(&pcp->lock, c);
			al_count(&pg->ctr, c, PAGE_free_o0 + order, 1); /* pcp_frees follows */
			return 0;
		}
		al_count(&pg->ctr, c, PAGE_pcp_trylock_failed, 1);
	} else {
		al_count(&pg->ctr, c, PAGE_pcp_bypass, 1);
	}
	/* free_one_page() */
	ret = zone_lock(pg, c, false, &flags);
	if (al_unlikely(ret))
		return ret;
	free_one_page_locked(pg, pfn, order, mt, &zs);
	zone_unlock(pg, c, &zs, flags);
	al_count(&pg->ctr, c, PAGE_zone_frees, 1);
	al_count(&pg->ctr, c, PAGE_free_o0 + order, 1);
	return 0;
}

/* An allocated head of this order? (read-only check) */
static inline bool valid_block(const struct pages *pg, uint64_t pfn, unsigned order)
{
	const struct page *p;

	if (pfn >= pg->npages || order > MAX_ORDER || (pfn & ((1ull << order) - 1)))
		return false;
	p = pfn_page(pg, pfn);
	return pflags(p) == PG_ALLOC && p->order == order &&
	       __atomic_load_n(&p->refcount, __ATOMIC_RELAXED) > 0;
}

/* Restore a block whose free failed: allocated again, reference back. */
static void unfreeze(struct page *p, unsigned order)
{
	p->order = (uint8_t)order;
	__atomic_store_n(&p->refcount, 1, __ATOMIC_RELAXED);
	set_pflags(p, PG_ALLOC);
}

/* __free_pages(): validated free of one block. */
static int free_block(struct pages *pg, struct al_ctx *c, uint64_t pfn, unsigned order)
{
	struct page *p;
	int ret;

	if (al_unlikely(!valid_block(pg, pfn, order)))
		return reject(pg, c, PAGE_invalid_frees);
	p = pfn_page(pg, pfn);
	if (__atomic_sub_fetch(&p->refcount, 1, __ATOMIC_ACQ_REL))
		return 0; /* still referenced (put_page_testzero) */
	set_pflags(p, 0);
	p->order = 0;
	ret = free_frozen(pg, c, pfn, order);
	if (al_unlikely(ret)) {
		unfreeze(p, order);
		return ret;
	}
	return 0; /* free_frozen counted it: frees and pages_freed follow */
}

/*
 * free_pages_bulk() over pages already checked: drop each reference, then
 * free every run of consecutive pfns as naturally aligned blocks. On a lock
 * failure the pages not yet freed are restored (still allocated) and the
 * error is returned.
 */
static int free_pages_bulk_checked(struct pages *pg, struct al_ctx *c, const uint64_t *pfns,
				   unsigned n)
{
	uint64_t runs = 0, blocks = 0, freed = 0, *b;
	unsigned i, j, start = 0, order;
	uint64_t pfn, left;
	int ret = 0;

	al_count(&pg->ctr, c, PAGE_bulk_free_calls, 1);
	if (n == 1) {
		/* One page: one run of one order-0 block. */
		ret = free_block(pg, c, pfns[0], 0);
		if (!ret) {
			uint64_t *b = al_ctr_block(&pg->ctr, c);

			al_ctr_add(b, PAGE_bulk_free_runs, 1);
			al_ctr_add(b, PAGE_bulk_free_blocks, 1);
			al_ctr_add(b, PAGE_bulk_free_pages, 1);
		}
		return ret ? ret : 1;
	}
	/* Every page's reference first (put_page_testzero per page). */
	for (i = 0; i < n; i++)
		__atomic_sub_fetch(&pfn_page(pg, pfns[i])->refcount, 1, __ATOMIC_ACQ_REL);
	while (start < n) {
		for (i = start + 1; i < n && pfns[i] == pfns[i - 1] + 1; i++)
			;
		runs++;
		pfn = pfns[start];
		left = i - start;
		while (left) {
			order = pfn ? (unsigned)__builtin_ctzll(pfn) : MAX_ORDER;
			if (order > al_fls64(left) - 1)
				order = al_fls64(left) - 1;
			if (order > MAX_ORDER)
				order = MAX_ORDER;
			/* The block's pages: the head and every tail page lose
			 * their allocated state (free_pages_prepare). */
			for (j = 0; j < (1u << order); j++) {
				struct page *p = pfn_page(pg, pfn + j);

				set_pflags(p, 0);
				p->order = 0;
			}
			ret = free_frozen(pg, c, pfn, order);
			if (al_unlikely(ret))
				goto restore;
			blocks++;
			freed += 1ull << order;
			pfn += 1ull << order;
			left -= 1ull << order;
		}
		start = i;
	}
	goto out;
restore:
	/* pfns[] from the failed block's first page to the end stay allocated. */
	for (j = start; j < n; j++)
		if (pfns[j] >= pfn || j >= i)
			unfreeze(pfn_page(pg, pfns[j]), 0);
out:
	b = al_ctr_block(&pg->ctr, c);
	al_ctr_add(b, PAGE_bulk_free_runs, runs);
	al_ctr_add(b, PAGE_bulk_free_blocks, blocks);
	al_ctr_add(b, PAGE_bulk_free_pages, freed);
	return ret ? ret : (int)n;
}

/* ---- the public page API (pages.h) ---- */

bool al_pages_is(const struct al_allocator *a)
{
	return pages_of(a) != NULL;
}

uint64_t al_pages_nr(const struct al_allocator *a)
{
	const struct pages *pg = pages_of(a);

	return pg ? pg->npages : 0;
}

void *al_page_address(const struct al_allocator *a, uint64_t pfn)
{
	const struct pages *pg = pages_of(a);

	return pg && pfn < pg->npages ? pg->mem + (pfn << PAGE_SHIFT) : NULL;
}

int al_page_pfn(const struct al_allocator *a, const void *addr, uint64_t *pfn)
{
	const struct pages *pg = pages_of(a);
	uintptr_t off;

	if (!pg)
		return -EINVAL;
	off = (uintptr_t)addr - (uintptr_t)pg->mem;
	if (off >= pg->mem_len)
		return -EINVAL;
	*pfn = off >> PAGE_SHIFT;
	return 0;
}

bool al_pfn_valid(const struct al_allocator *a, uint64_t pfn)
{
	const struct pages *pg = pages_of(a);
	const struct section *ms;
	uint64_t nr = pfn >> SECTION_SHIFT;

	if (!pg || nr >= pg->nr_sections)
		return false;
	ms = &pg->sections[nr];
	if (!(ms->flags & SECTION_HAS_MEM_MAP))
		return false;
	return (ms->subsection_map >> ((pfn >> SUBSECTION_SHIFT) & 63)) & 1;
}

bool al_pcp_allowed_order(unsigned order)
{
	return pcp_allowed(order);
}

int al_alloc_pages(struct al_allocator *a, struct al_ctx *c, unsigned order, unsigned gfp,
		   uint64_t *pfn)
{
	struct pages *pg = pages_of(a);
	struct page *p;
	int ret;

	if (al_unlikely(!pg))
		return -EINVAL;
	if (al_unlikely(order > MAX_ORDER || !pfn))
		return reject(pg, c, PAGE_einval);
	ret = alloc_block(pg, c, order, gfp, false, &p);
	if (ret)
		return ret;
	*pfn = page_pfn(pg, p);
	return 0;
}

int al_free_pages(struct al_allocator *a, struct al_ctx *c, uint64_t pfn, unsigned order)
{
	struct pages *pg = pages_of(a);

	if (al_unlikely(!pg))
		return -EINVAL;
	return free_block(pg, c, pfn, order);
}

int al_split_page(struct al_allocator *a, struct al_ctx *c, uint64_t pfn, unsigned order)
{
	struct pages *pg = pages_of(a);
	struct page *p;
	uint64_t *b;
	unsigned i;

	if (al_unlikely(!pg))
		return -EINVAL;
	if (al_unlikely(!valid_block(pg, pfn, order)))
		return reject(pg, c, PAGE_einval);
	p = pfn_page(pg, pfn);
	for (i = 1; i < (1u << order); i++) {
		p[i].order = 0;
		__atomic_store_n(&p[i].refcount, 1, __ATOMIC_RELAXED);
		set_pflags(&p[i], PG_ALLOC);
	}
	p->order = 0;
	/* The block counted once as allocated; its pages are now separate blocks. */
	b = al_ctr_block(&pg->ctr, c);
	al_ctr_add(b, PAGE_split_pages, 1);
	al_ctr_add(b, PAGE_split_page_blocks, (1u << order) - 1);
	return 0;
}

int al_alloc_pages_bulk(struct al_allocator *a, struct al_ctx *c, unsigned order, unsigned n,
			unsigned gfp, uint64_t *pfns)
{
	struct pages *pg = pages_of(a);

	if (al_unlikely(!pg)) {
		c->err = -EINVAL;
		return 0;
	}
	if (al_unlikely(!pcp_allowed(order) || (n && !pfns))) {
		c->err = reject(pg, c, PAGE_einval);
		return 0;
	}
	return alloc_bulk(pg, c, order, n, gfp, pfns, NULL);
}

int al_free_pages_bulk(struct al_allocator *a, struct al_ctx *c, const uint64_t *pfns, unsigned n)
{
	struct pages *pg = pages_of(a);
	unsigned i;

	if (al_unlikely(!pg))
		return -EINVAL;
	if (!n)
		return 0;
	/* Page-level checks once, up front, for the whole array. */
	for (i = 0; i < n; i++)
		if (al_unlikely(!valid_block(pg, pfns[i], 0)))
			return reject(pg, c, PAGE_invalid_frees);
	return free_pages_bulk_checked(pg, c, pfns, n);
}

int al_pages_pcp_decay(struct al_allocator *a, struct al_ctx *c)
{
	struct pages *pg = pages_of(a);
	struct pcp *pcp;
	int ret;

	if (!pg)
		return -EINVAL;
	pcp = &pg->pcp[c->cpu];
	ret = al_lock_acquire(&pcp->lock, c);
	if (ret)
		return ret;
	ret = decay_locked(pg, c, pcp);
	al_lock_release(&pcp->lock, c);
	return ret;
}

int al_pages_info(const struct al_allocator *a, struct al_pages_info *out, unsigned cpu,
		  int *pcp_count, int *pcp_high, int *pcp_alloc_factor, int *pcp_free_count)
{
	const struct pages *pg = pages_of(a);
	unsigned i, o;

	if (!pg || cpu >= a->ncpu)
		return -EINVAL;
	if (out) {
		memset(out, 0, sizeof(*out));
		out->nr_pages = pg->npages;
		out->free_pages = __atomic_load_n(&pg->zone.free_pages, __ATOMIC_RELAXED);
		for (i = 0; i < pg->npcp; i++)
			out->pcp_pages += (uint64_t)pg->pcp[i].count;
		for (o = 0; o <= MAX_ORDER; o++)
			out->nr_free[o] = pg->zone.area[o].nr_free;
		out->batch = pg->pcp[cpu].batch;
		out->high_min = pg->pcp[cpu].high_min;
		out->high_max = pg->pcp[cpu].high_max;
		out->wmark_min = (int)pg->zone.wmark_min;
		out->wmark_low = (int)pg->zone.wmark_low;
		out->wmark_high = (int)pg->zone.wmark_high;
	}
	if (pcp_count)
		*pcp_count = pg->pcp[cpu].count;
	if (pcp_high)
		*pcp_high = pg->pcp[cpu].high;
	if (pcp_alloc_factor)
		*pcp_alloc_factor = pg->pcp[cpu].alloc_factor;
	if (pcp_free_count)
		*pcp_free_count = pg->pcp[cpu].free_count;
	return 0;
}

/* ---- struct al_ops ---- */

static inline unsigned size_to_order(size_t size)
{
	return size <= PAGE_SIZE ? 0 : al_fls64(size - 1) - PAGE_SHIFT;
}

static al_noinline al_cold void *alloc_einval(struct pages *pg, struct al_ctx *c)
{
	c->err = reject(pg, c, PAGE_einval);
	return NULL;
}

static void *pages_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct pages *pg = to_pages(a);
	struct page *p;
	int ret;

	if (al_unlikely(size - 1 >= (PAGE_SIZE << MAX_ORDER)))
		return alloc_einval(pg, c);
	ret = alloc_block(pg, c, size_to_order(size), (flags & AL_ZERO) ? AL_GFP_ZERO : 0,
			  flags & AL_NOSPIN, &p);
	if (al_unlikely(ret)) {
		c->err = ret;
		return NULL;
	}
	return pg->mem + (page_pfn(pg, p) << PAGE_SHIFT);
}

/* The pfn of a pointer that must be a page start inside the memory. */
static inline bool ptr_pfn(const struct pages *pg, const void *ptr, uint64_t *pfn)
{
	uintptr_t off = (uintptr_t)ptr - (uintptr_t)pg->mem;

	if (off >= pg->mem_len || (off & (PAGE_SIZE - 1)))
		return false;
	*pfn = off >> PAGE_SHIFT;
	return true;
}

static int pages_free(struct al_allocator *a, struct al_ctx *c, void *ptr)
{
	struct pages *pg = to_pages(a);
	uint64_t pfn;

	if (!ptr)
		return 0;
	if (al_unlikely(!ptr_pfn(pg, ptr, &pfn)))
		return reject(pg, c, PAGE_invalid_frees);
	return free_block(pg, c, pfn, pfn_page(pg, pfn)->order);
}

static int pages_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
			    void **out, unsigned flags)
{
	struct pages *pg = to_pages(a);
	unsigned i;

	if (al_unlikely(size - 1 >= (PAGE_SIZE << MAX_ORDER))) {
		alloc_einval(pg, c);
		return 0;
	}
	if (size <= PAGE_SIZE)
		return alloc_bulk(pg, c, 0, n, (flags & AL_ZERO) ? AL_GFP_ZERO : 0, NULL, out);
	for (i = 0; i < n; i++) {
		out[i] = pages_alloc(a, c, size, flags);
		if (!out[i])
			break;
	}
	return (int)i;
}

/*
 * free_bulk: the order-0 pages among ptrs go through free_pages_bulk (in
 * chunks of FREE_CHUNK entries, in the given order); higher-order blocks are
 * freed one by one; invalid entries are rejected (counted) and skipped. An
 * order-0 page collected for the chunk is marked PG_BULK until the chunk is
 * freed, so the same page repeated in ptrs fails valid_block() like a
 * double free instead of entering the chunk twice.
 */
static int pages_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n)
{
	struct pages *pg = to_pages(a);
	uint64_t pfns[FREE_CHUNK], pfn;
	unsigned i = 0, j, k, done = 0, refused = 0, order;
	int ret, err = 0;

	while (i < n) {
		for (k = 0; i < n && k < FREE_CHUNK; i++) {
			if (!ptrs[i]) {
				done++;
				continue;
			}
			if (!ptr_pfn(pg, ptrs[i], &pfn)) {
				reject(pg, c, PAGE_invalid_frees);
				refused++;
				continue;
			}
			order = pfn_page(pg, pfn)->order;
			if (!valid_block(pg, pfn, order)) {
				reject(pg, c, PAGE_invalid_frees);
				refused++;
				continue;
			}
			if (!order) {
				set_pflags(pfn_page(pg, pfn), PG_ALLOC | PG_BULK);
				pfns[k++] = pfn;
				continue;
			}
			ret = free_block(pg, c, pfn, order);
			if (ret)
				err = ret;
			else
				done++;
		}
		if (!k)
			continue;
		for (j = 0; j < k; j++)
			set_pflags(pfn_page(pg, pfns[j]), PG_ALLOC);
		ret = free_pages_bulk_checked(pg, c, pfns, k);
		if (ret < 0)
			err = ret;
		else
			done += k;
	}
	if (al_unlikely(err && !done && !refused))
		return err; /* nothing freed: the caller may retry */
	if (al_unlikely(err || refused))
		c->err = err ? err : -EINVAL;
	return (int)done;
}

static bool pages_owns(struct al_allocator *a, const void *ptr)
{
	const struct pages *pg = to_pages(a);

	return (uintptr_t)ptr - (uintptr_t)pg->mem < pg->mem_len;
}

static size_t pages_usable_size(struct al_allocator *a, const void *ptr)
{
	const struct pages *pg = to_pages(a);
	const struct page *p;
	uint64_t pfn;

	if (!ptr_pfn(pg, ptr, &pfn))
		return 0;
	p = pfn_page(pg, pfn);
	return pflags(p) == PG_ALLOC ? PAGE_SIZE << p->order : 0;
}

/* drain_pages_zone(): everything on a CPU's lists back to the buddy. */
static void drain_cpu(struct pages *pg, const struct al_ctx *c, unsigned cpu)
{
	struct pcp *pcp = &pg->pcp[cpu];
	int n, chunk, ret;

	do {
		if (al_lock_acquire(&pcp->lock, c))
			return;
		n = pcp->count;
		if (n) {
			chunk = pcp->batch << BATCH_SCALE_MAX;
			ret = free_pcppages_bulk(pg, c, pcp, n < chunk ? n : chunk, 0);
			n = ret > 0 ? pcp->count : 0;
		}
		al_lock_release(&pcp->lock, c);
	} while (n);
}

static void pages_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct pages *pg = to_pages(a);
	unsigned i;

	if (scope == AL_DRAIN_ALL) {
		for (i = 0; i < pg->npcp; i++)
			drain_cpu(pg, c, i);
	} else {
		drain_cpu(pg, c, c->cpu);
	}
}

/* Pages neither in the buddy nor on a pcp list are allocated: exact when
 * quiescent, at every stats level (nothing counted is needed). */
static int64_t pages_held(const struct pages *pg)
{
	int64_t held = (int64_t)pg->npages -
		       (int64_t)__atomic_load_n(&pg->zone.free_pages, __ATOMIC_RELAXED);
	unsigned i;

	for (i = 0; i < pg->npcp; i++)
		held -= __atomic_load_n(&pg->pcp[i].count, __ATOMIC_RELAXED);
	return held * (int64_t)PAGE_SIZE;
}

/* Pages of the per-order block counts from idx (alloc_o0 or free_o0). */
static uint64_t pages_counted(const struct pages *pg, unsigned idx)
{
	uint64_t n = 0;
	unsigned o;

	for (o = 0; o <= MAX_ORDER; o++)
		n += al_counters_sum(&pg->ctr, idx + o) << o;
	return n;
}

static void pages_stats(struct al_allocator *a, struct al_stats *out)
{
	struct pages *pg = to_pages(a);
	uint64_t pcp_pages = 0, high = 0;
	unsigned i;

	out->layer = "pages";
	out->bytes_held = pages_held(pg);
	if (!al_counters_on(&pg->ctr))
		return;
	al_stats_add(out, "pages_alloc", pages_counted(pg, PAGE_alloc_o0));
	al_stats_add(out, "pages_freed", pages_counted(pg, PAGE_free_o0));
	al_counters_report(&pg->ctr, out);
	for (i = 0; i < pg->npcp; i++) {
		pcp_pages += (uint64_t)__atomic_load_n(&pg->pcp[i].count, __ATOMIC_RELAXED);
		if (i < a->ncpu) /* the stack's CPUs: the kworker's list only holds pages */
			high += (uint64_t)__atomic_load_n(&pg->pcp[i].high, __ATOMIC_RELAXED);
	}
	al_stats_add_gauge(out, "free_pages",
			   __atomic_load_n(&pg->zone.free_pages, __ATOMIC_RELAXED));
	al_stats_add_gauge(out, "pcp_pages", pcp_pages);
	al_stats_add_gauge(out, "pcp_high", high);
	al_stats_add_gauge(out, "pcp_batch", (uint64_t)pg->pcp[0].batch);
	al_stats_add_gauge(out, "pcp_high_min", (uint64_t)pg->pcp[0].high_min);
	al_stats_add_gauge(out, "pcp_high_max", (uint64_t)pg->pcp[0].high_max);
}

/* ---- check: the invariant walker ---- */

#define CHECK_FAIL(...)                                       \
	do {                                                  \
		snprintf(err, errlen, "pages: " __VA_ARGS__); \
		ret = -EFAULT;                                \
		goto out;                                     \
	} while (0)

static inline bool mark(uint8_t *bits, uint64_t i)
{
	bool was = (bits[i >> 3] >> (i & 7)) & 1;

	bits[i >> 3] |= (uint8_t)(1u << (i & 7));
	return was;
}

/*
 * Quiescent only. Blocks tile the memory by heads, each aligned and in
 * range with exactly one state, tails clear; no two free buddies of one
 * order are unmerged; each free list and pcp list is well linked, holds
 * heads of its order and state once each, and the counts match (nr_free,
 * free_pages, pcp->count, bytes_held); high within [high_min, high_max].
 */
static int pages_check(struct al_allocator *a, char *err, size_t errlen)
{
	struct pages *pg = to_pages(a);
	uint64_t nfree[NR_ORDERS] = { 0 }, free_pages = 0, held = 0, pcp_heads = 0, listed;
	uint64_t pfn = 0, i, steps, bits_len = (pg->npages + 7) / 8;
	uint8_t *seen = al_meta_alloc(bits_len);
	unsigned o, mt, cpu, pindex;
	int ret = 0;

	if (!seen) {
		snprintf(err, errlen, "pages: no memory for the check");
		return -ENOMEM;
	}
	while (pfn < pg->npages) {
		struct page *p = pfn_page(pg, pfn);
		uint32_t f = pflags(p);

		o = p->order;
		if (f != PG_BUDDY && f != PG_PCP && f != PG_ALLOC)
			CHECK_FAIL("pfn %llu is not the head of a block (flags %#x)",
				   (unsigned long long)pfn, f);
		if (o > MAX_ORDER || (pfn & ((1ull << o) - 1)) || pfn + (1ull << o) > pg->npages)
			CHECK_FAIL("block at pfn %llu has a bad order %u", (unsigned long long)pfn,
				   o);
		for (i = 1; i < (1ull << o); i++)
			if (pflags(p + i) || p[i].order ||
			    __atomic_load_n(&p[i].refcount, __ATOMIC_RELAXED))
				CHECK_FAIL("pfn %llu, a tail of the order-%u block at %llu, is not "
					   "clear",
					   (unsigned long long)(pfn + i), o,
					   (unsigned long long)pfn);
		if (f == PG_BUDDY) {
			nfree[o]++;
			free_pages += 1ull << o;
			if (__atomic_load_n(&p->refcount, __ATOMIC_RELAXED))
				CHECK_FAIL("free block at pfn %llu has refcount %d",
					   (unsigned long long)pfn, p->refcount);
			if (o < MAX_ORDER && !(pfn & (1ull << o)) &&
			    is_free_head(pg, pfn ^ (1ull << o), o) &&
			    (o < PAGEBLOCK_ORDER ||
			     pageblock_mt(pg, pfn) == pageblock_mt(pg, pfn ^ (1ull << o))))
				CHECK_FAIL("free buddies at pfn %llu and %llu of order %u are not "
					   "merged",
					   (unsigned long long)pfn,
					   (unsigned long long)(pfn ^ (1ull << o)), o);
		} else if (f == PG_PCP) {
			pcp_heads++;
		} else {
			if (__atomic_load_n(&p->refcount, __ATOMIC_RELAXED) != 1)
				CHECK_FAIL("allocated block at pfn %llu has refcount %d",
					   (unsigned long long)pfn, p->refcount);
			held += PAGE_SIZE << o;
		}
		pfn += 1ull << o;
	}
	/* The free lists. */
	for (o = 0; o <= MAX_ORDER; o++) {
		listed = 0;
		for (mt = 0; mt < MT_PCPTYPES; mt++) {
			struct plist *h = &pg->zone.area[o].free_list[mt], *l, *prev = h;

			for (l = h->next, steps = 0; l != h; prev = l, l = l->next, steps++) {
				struct page *p = lru_page(l);

				if (steps > pg->npages || p < pg->map || p >= pg->map + pg->npages)
					CHECK_FAIL("free list %u/%u is broken (cycle or stray "
						   "pointer)",
						   o, mt);
				if (l->prev != prev)
					CHECK_FAIL("free list %u/%u: bad prev link at pfn %llu", o,
						   mt, (unsigned long long)page_pfn(pg, p));
				if (pflags(p) != PG_BUDDY || p->order != o || p->mt != mt)
					CHECK_FAIL(
						"free list %u/%u holds pfn %llu (flags %#x order "
						"%u mt %u)",
						o, mt, (unsigned long long)page_pfn(pg, p),
						pflags(p), p->order, p->mt);
				if (mark(seen, page_pfn(pg, p)))
					CHECK_FAIL("pfn %llu is on the lists twice",
						   (unsigned long long)page_pfn(pg, p));
				listed++;
			}
			if (h->prev != prev)
				CHECK_FAIL("free list %u/%u: bad tail link", o, mt);
		}
		if (listed != nfree[o] || listed != pg->zone.area[o].nr_free)
			CHECK_FAIL(
				"order %u: %llu free blocks in memory, %llu listed, nr_free %llu",
				o, (unsigned long long)nfree[o], (unsigned long long)listed,
				(unsigned long long)pg->zone.area[o].nr_free);
	}
	if (free_pages != pg->zone.free_pages)
		CHECK_FAIL("free_pages is %llu, the free lists hold %llu",
			   (unsigned long long)pg->zone.free_pages, (unsigned long long)free_pages);
	/* The pcp lists. */
	listed = 0;
	for (cpu = 0; cpu < pg->npcp; cpu++) {
		struct pcp *pcp = &pg->pcp[cpu];
		int64_t count = 0;

		for (pindex = 0; pindex < NR_PCP_LISTS; pindex++) {
			struct plist *h = &pcp->lists[pindex], *l, *prev = h;

			o = pindex_to_order(pindex);
			for (l = h->next, steps = 0; l != h; prev = l, l = l->next, steps++) {
				struct page *p = lru_page(l);

				if (steps > pg->npages || p < pg->map || p >= pg->map + pg->npages)
					CHECK_FAIL("cpu %u pcp list %u is broken", cpu, pindex);
				if (l->prev != prev)
					CHECK_FAIL("cpu %u pcp list %u: bad prev link", cpu,
						   pindex);
				if (pflags(p) != PG_PCP || p->order != o ||
				    order_to_pindex(p->mt, o) != pindex)
					CHECK_FAIL("cpu %u pcp list %u holds pfn %llu (flags %#x "
						   "order "
						   "%u)",
						   cpu, pindex, (unsigned long long)page_pfn(pg, p),
						   pflags(p), p->order);
				if (mark(seen, page_pfn(pg, p)))
					CHECK_FAIL("pfn %llu is on the lists twice",
						   (unsigned long long)page_pfn(pg, p));
				count += 1ll << o;
				listed++;
			}
		}
		if (count != pcp->count)
			CHECK_FAIL("cpu %u: pcp count is %d, its lists hold %lld pages", cpu,
				   pcp->count, (long long)count);
		if (pcp->high < pcp->high_min || pcp->high > pcp->high_max)
			CHECK_FAIL("cpu %u: high %d outside [%d, %d]", cpu, pcp->high,
				   pcp->high_min, pcp->high_max);
	}
	if (listed != pcp_heads)
		CHECK_FAIL("%llu blocks are marked as on a pcp list, %llu are listed",
			   (unsigned long long)pcp_heads, (unsigned long long)listed);
	if ((int64_t)held != pages_held(pg))
		CHECK_FAIL("allocated blocks hold %llu bytes, the free counts say %lld",
			   (unsigned long long)held, (long long)pages_held(pg));
	if (al_counters_on(&pg->ctr) &&
	    held != (pages_counted(pg, PAGE_alloc_o0) - pages_counted(pg, PAGE_free_o0)) *
			    PAGE_SIZE)
		CHECK_FAIL("allocated blocks hold %llu bytes, counters say %llu",
			   (unsigned long long)held,
			   (unsigned long long)((pages_counted(pg, PAGE_alloc_o0) -
						 pages_counted(pg, PAGE_free_o0)) *
						PAGE_SIZE));
out:
	al_meta_free(seen, bits_len);
	return ret;
}

/* ---- lifetime ---- */

/* The order of the boot-time block at pfn (memblock_free_all's split). */
static unsigned boot_order(uint64_t pfn, uint64_t npages)
{
	uint64_t left = npages - pfn;
	unsigned order = pfn ? (unsigned)__builtin_ctzll(pfn) : MAX_ORDER;

	if (order > al_fls64(left) - 1)
		order = al_fls64(left) - 1;
	return order > MAX_ORDER ? MAX_ORDER : order;
}

/* The process's spare backing memory and descriptor array (see the top). */
static struct {
	int lock;	  /* a spinlock: create and destroy only */
	void *mem;	  /* backing memory, or NULL */
	size_t mem_len;	  /* its mapping length */
	struct page *map; /* an all-zero descriptor array, or NULL */
	size_t map_len;	  /* its mapping length */
} spare;

static void spare_lock(void)
{
	while (__atomic_exchange_n(&spare.lock, 1, __ATOMIC_ACQUIRE))
		al_cpu_relax();
}

static void spare_unlock(void)
{
	__atomic_store_n(&spare.lock, 0, __ATOMIC_RELEASE);
}

/* Take a spare mapping of at least len bytes out of its slot, or NULL. */
static void *spare_take(void **slot, size_t *slot_len, size_t len, size_t *map_len)
{
	void *m = NULL;

	spare_lock();
	if (*slot && *slot_len >= len) {
		m = *slot;
		*map_len = *slot_len;
		*slot = NULL;
	}
	spare_unlock();
	return m;
}

/* Keep the larger of the slot's mapping and this one; unmap the other. */
static void spare_keep(void **slot, size_t *slot_len, void *m, size_t len)
{
	void *old = NULL;
	size_t old_len = 0;

	spare_lock();
	if (!*slot || *slot_len < len) {
		old = *slot;
		old_len = *slot_len;
		*slot = m;
		*slot_len = len;
		m = NULL;
	}
	spare_unlock();
	if (m)
		munmap(m, len);
	if (old)
		munmap(old, old_len);
}

/* Take the spare mapping when it is large enough, else map a new one. */
static void *mem_get(size_t len, size_t *map_len)
{
	void *m = spare_take(&spare.mem, &spare.mem_len, len, map_len);

	if (m)
		return m;
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		 0);
	*map_len = len;
	return m == MAP_FAILED ? NULL : m;
}

static struct page *map_get(size_t len, size_t *map_len)
{
	struct page *m = spare_take((void **)&spare.map, &spare.map_len, len, map_len);

	if (m)
		return m;
	*map_len = len;
	return al_meta_alloc(len);
}

static void mem_put(void *m, size_t len)
{
	if (m)
		spare_keep(&spare.mem, &spare.mem_len, m, len);
}

static void map_put(struct pages *pg)
{
	struct page *m = pg->map;
	uint64_t pfn;

	if (!m)
		return;
	/* Back to all zero: everything below hw, and the boot-time heads above
	 * it (never taken from the buddy, so nothing else there was written). */
	memset(m, 0, pg->hw * sizeof(*m));
	for (pfn = 0; pfn < pg->npages; pfn += 1ull << boot_order(pfn, pg->npages))
		if (pfn >= pg->hw)
			memset(&m[pfn], 0, sizeof(*m));
	spare_keep((void **)&spare.map, &spare.map_len, m, pg->map_map_len);
}

/* Free what init made (also after a failed init): a part not made is skipped. */
static void pages_fini(struct al_allocator *a)
{
	struct pages *pg = to_pages(a);

	mem_put(pg->mem, pg->mem_map_len);
	map_put(pg);
	al_meta_free(pg->pageblock, pg->pageblock_len);
	al_meta_free(pg->sections, pg->sections_len);
	al_meta_free(pg->pcp, pg->pcp_len);
	al_counters_fini(&pg->ctr);
}

static uint64_t int_sqrt(uint64_t x)
{
	uint64_t r = 0, b = 1ull << 62;

	while (b > x)
		b >>= 2;
	while (b) {
		if (x >= r + b) {
			x -= r + b;
			r = (r >> 1) + b;
		} else {
			r >>= 1;
		}
		b >>= 2;
	}
	return r;
}

/* setup_per_zone_wmarks() for the one zone (watermark_scale_factor 10). */
static void set_watermarks(struct zone *z)
{
	uint64_t kbytes = z->managed << (PAGE_SHIFT - 10), min_kb, tmp;

	min_kb = int_sqrt(kbytes * 16);
	if (min_kb < 128)
		min_kb = 128;
	if (min_kb > 262144)
		min_kb = 262144;
	z->wmark_min = (long)(min_kb >> (PAGE_SHIFT - 10));
	tmp = z->managed * 10 / 10000;
	if (tmp < (uint64_t)z->wmark_min / 4)
		tmp = (uint64_t)z->wmark_min / 4;
	z->wmark_low = z->wmark_min + (long)tmp;
	z->wmark_high = z->wmark_min + 2 * (long)tmp;
}

/* zone_batchsize(). */
static int zone_batchsize(uint64_t managed)
{
	uint64_t b = managed >> 10;

	if (b > (1u << 20) / PAGE_SIZE)
		b = (1u << 20) / PAGE_SIZE;
	b /= 4;
	if (b < 1)
		b = 1;
	b = (1ull << (al_fls64(b + b / 2) - 1)) - 1;
	return b < 1 ? 1 : (int)b;
}

/* zone_highsize(). */
static int zone_highsize(uint64_t total, int batch, unsigned ncpu)
{
	int64_t high = (int64_t)(total / ncpu);

	return high > (int64_t)batch << 2 ? (int)high : batch << 2;
}

static int pages_check_params(const int64_t *params, char *err, size_t errlen)
{
	int64_t mem = params[P_MEMORY];

	if (mem % (2 << 20)) {
		snprintf(err, errlen, "memory=%lld: memory must be a multiple of 2M (a pageblock)",
			 (long long)mem);
		return -EINVAL;
	}
	return 0;
}

/* Sections and subsections present for the whole memory. */
static void sections_init(struct pages *pg)
{
	uint64_t pfn;

	for (pfn = 0; pfn < pg->npages; pfn += 1ull << SUBSECTION_SHIFT) {
		struct section *ms = &pg->sections[pfn >> SECTION_SHIFT];

		ms->flags = SECTION_HAS_MEM_MAP;
		ms->subsection_map |= 1ull << ((pfn >> SUBSECTION_SHIFT) & 63);
		ms->usage = &pg->pageblock[(pfn >> SECTION_SHIFT) * PB_PER_SECTION * PB_BITS / 64];
	}
}

/* The zone: its lock, empty free lists, watermarks, then memblock_free_all():
 * every page in aligned blocks, ascending, to the tail of its list. */
static void zone_init(struct pages *pg, const int64_t *params)
{
	uint64_t pfn;
	unsigned order, o, mt;

	al_clock_init();
	pg->decay_ticks = (uint64_t)((double)params[P_DECAY] * al_clock.ticks_per_ns);
	al_lock_init(&pg->zone.lock, (uint64_t)params[P_LOCK_BUDGET], params[P_LOCK_TIMING]);
	al_lock_count_in(&pg->zone.lock, &pg->ctr, PAGE_zone_lock_acquired);
	for (o = 0; o <= MAX_ORDER; o++)
		for (mt = 0; mt < MT_PCPTYPES; mt++)
			plist_init(&pg->zone.area[o].free_list[mt]);
	pg->zone.managed = pg->npages;
	set_watermarks(&pg->zone);
	for (pfn = 0; pfn < pg->npages; pfn += 1ull << order) {
		order = boot_order(pfn, pg->npages);
		add_to_free_list(pg, pfn_page(pg, pfn), order, MT_UNMOVABLE, true);
	}
	pg->zone.free_pages = pg->npages;
}

/* The pcp lists: zone_set_pageset_high_and_batch(). */
static void pcp_init(struct pages *pg, const int64_t *params, unsigned ncpu)
{
	unsigned cpu, i, split;
	int batch, high_min, high_max;

	batch = params[P_BATCH] ? (int)params[P_BATCH] : zone_batchsize(pg->zone.managed);
	split = params[P_CPUS] ? (unsigned)params[P_CPUS] : ncpu;
	if (params[P_HIGH]) {
		high_min = high_max = (int)params[P_HIGH];
	} else {
		high_min = zone_highsize((uint64_t)pg->zone.wmark_low, batch, split);
		high_max = zone_highsize(pg->zone.managed / HIGH_FRACTION, batch, split);
	}
	for (cpu = 0; cpu < pg->npcp; cpu++) {
		struct pcp *pcp = &pg->pcp[cpu];

		al_lock_init(&pcp->lock, (uint64_t)params[P_LOCK_BUDGET], params[P_LOCK_TIMING]);
		al_lock_set_tas(&pcp->lock); /* trylocked by its CPU: qspinlock's fast path */
		al_lock_count_in(&pcp->lock, &pg->ctr, PAGE_pcp_lock_acquired); /* shared */
		for (i = 0; i < NR_PCP_LISTS; i++)
			plist_init(&pcp->lists[i]);
		pcp->batch = batch;
		pcp->high_min = high_min;
		pcp->high_max = high_max;
		pcp->high = high_min;
		pcp->flags = params[P_FREE_HIGH_BATCH] ? PCPF_FREE_HIGH_BATCH : 0;
		pcp->last_decay = al_ticks_fast();
	}
}

static int pages_init(struct al_allocator *a, const int64_t *params)
{
	struct pages *pg = to_pages(a);
	struct al_allocator *below = a->below;
	unsigned ncpu = a->ncpu;
	uint64_t npb;
	char why[160];

	if (below || pages_check_params(params, why, sizeof(why)) || !ncpu)
		return -EINVAL;
	pg->npages = (uint64_t)params[P_MEMORY] >> PAGE_SHIFT;
	pg->mem_len = (size_t)params[P_MEMORY];
	pg->map_len = pg->npages * sizeof(struct page);
	npb = pg->npages >> PAGEBLOCK_ORDER;
	pg->pageblock_len = (npb * PB_BITS + 63) / 64 * sizeof(uint64_t);
	pg->nr_sections = (pg->npages + (1ull << SECTION_SHIFT) - 1) >> SECTION_SHIFT;
	pg->sections_len = pg->nr_sections * sizeof(struct section);
	pg->npcp = ncpu < AL_MAX_CPUS ? ncpu + 1 : ncpu; /* + the kworker CPU when it fits */
	pg->pcp_len = pg->npcp * sizeof(struct pcp);
	if (al_counters_init_desc(&pg->ctr, pages_counters, PAGE_NR, 0, pg->npcp))
		return -ENOMEM;
	pg->map = map_get(pg->map_len, &pg->map_map_len);
	pg->pageblock = al_meta_alloc(pg->pageblock_len);
	pg->sections = al_meta_alloc(pg->sections_len);
	pg->pcp = al_meta_alloc(pg->pcp_len);
	pg->mem = mem_get(pg->mem_len, &pg->mem_map_len);
	if (!pg->map || !pg->pageblock || !pg->sections || !pg->pcp || !pg->mem)
		return -ENOMEM;
	sections_init(pg);
	/* Every pageblock is UNMOVABLE (0): the zeroed bitmap already says so. */
	zone_init(pg, params);
	pcp_init(pg, params, ncpu);
	return 0;
}

/* name, type, default, min, max, choices, doc */
static const struct al_param_desc pages_params[P_NR] = {
	[P_MEMORY] = { "memory", AL_PARAM_SIZE, 4ll << 30, 4 << 20, 256ll << 30, NULL,
		       "simulated physical memory, a multiple of 2M (64-B descriptor per 4K "
		       "page; backing memory touched only where written)" },
	[P_BATCH] = { "batch", AL_PARAM_INT, 0, 0, 4096, NULL,
		      "pcp batch; 0 = the kernel's zone_batchsize() (63 from 1G of memory)" },
	[P_HIGH] = { "high", AL_PARAM_INT, 0, 0, 1 << 24, NULL,
		     "pcp high in pages, fixed; 0 = auto-tuned between high_min (low watermark "
		     "/ CPUs) and high_max (memory / 8 / CPUs)" },
	[P_DECAY] = { "decay", AL_PARAM_NS, 1000000000, 0, 60000000000ll, NULL,
		      "interval of decay_pcp_high on each CPU (0 = never by itself)" },
	[P_FREE_HIGH_BATCH] = { "free_high_batch", AL_PARAM_BOOL, 1, 0, 1, NULL,
				"PCPF_FREE_HIGH_BATCH: the CPU's cache slice holds 3 batches, so "
				"free_high keeps a batch cached" },
	[P_LOCK_BUDGET] = { "lock_budget", AL_PARAM_NS, 1000000000, 0, 10000000000ll, NULL,
			    "how long a waiter spins on the zone lock before the call fails "
			    "(ETIMEDOUT)" },
	[P_LOCK_TIMING] = { "lock_timing", AL_PARAM_BOOL, 0, 0, 1, NULL,
			    "measure lock hold times (two clock reads per lock: off by default, "
			    "the pcp lock is taken per page)" },
	[P_CPUS] = { "cpus", AL_PARAM_INT, 0, 0, AL_MAX_CPUS, NULL,
		     "the machine's CPUs the zone's pcp high is split across (zone_highsize); "
		     "0 = the allocator's CPUs" },
};

AL_LAYER(pages, struct pages, pages_init, pages_fini,
	 (.alloc = pages_alloc, .free = pages_free, .alloc_bulk = pages_alloc_bulk,
	  .free_bulk = pages_free_bulk, .owns = pages_owns, .usable_size = pages_usable_size,
	  .drain = pages_drain, .stats = pages_stats, .check = pages_check),
	 (.min_align = 4096,
	  .doc = "zone buddy page allocator with per-CPU page lists (orders 0-10, PCP batch 63)",
	  .features = AL_F_BULK | AL_F_OWNS | AL_F_USABLE | AL_F_VALIDATES | AL_F_PAGES,
	  .max_size = AL_PAGE_SIZE << AL_MAX_PAGE_ORDER, .nparams = P_NR, .params = pages_params,
	  .counters = pages_counters, .ncounters = PAGE_NR, .check_params = pages_check_params))
