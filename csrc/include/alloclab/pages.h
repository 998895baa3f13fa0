/* SPDX-License-Identifier: MIT */
/*
 * alloclab: the page-allocator API of a `pages` layer (reference §5).
 *
 * A `pages` layer simulates physical memory: N page frames of 4 KiB, numbered
 * by pfn 0..N-1, each with a 64-byte descriptor, managed by a zone buddy
 * allocator (free areas of orders 0..AL_MAX_PAGE_ORDER) with per-CPU page
 * lists (PCP) for orders 0..3 and AL_PCP_THP_ORDER. Its struct al_ops serve
 * objects that are pages:
 *
 *   alloc(size)          one block of order ceil(log2(size / 4096)), returned
 *                        as the address of its first page in the backing memory
 *   free(p)              frees that block (its order is in the descriptor)
 *   alloc_bulk(size, n)  alloc_pages_bulk() for size <= 4096, else n allocs
 *   free_bulk(ptrs, n)   free_pages_bulk() over the order-0 pages among ptrs
 *                        (contiguous runs go back as aligned high-order
 *                        blocks); other blocks are freed one by one
 *
 * Layers and workloads that need more than that (vmalloc's allocation
 * strategies, test_vmalloc's vm_map_ram_test) call the functions below. Each
 * takes the al_allocator of a pages layer and checks it (al_pages_is(): its
 * ops table is the pages one); given any other layer it returns -EINVAL
 * (NULL, 0 or false for the queries). Page frames are named by pfn; a caller
 * that owns a page may read and write its memory at al_page_address().
 *
 * Concurrency: as for struct al_ops, one thread per model CPU (ctx->cpu) at a
 * time; any CPU may free what another allocated.
 */
#ifndef ALLOCLAB_PAGES_H
#define ALLOCLAB_PAGES_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AL_PAGE_SHIFT	  12
#define AL_PAGE_SIZE	  (1ul << AL_PAGE_SHIFT)
#define AL_MAX_PAGE_ORDER 10 /* MAX_PAGE_ORDER: 4 MiB blocks; 11 free areas */
#define AL_PCP_THP_ORDER  9  /* HPAGE_PMD_ORDER: also cached on the PCP lists */

/* Allocation flags (the gfp bits the model honours). */
enum al_gfp {
	AL_GFP_ZERO = 1u << 0,	  /* __GFP_ZERO: the pages are zeroed */
	AL_GFP_NORETRY = 1u << 1, /* an opportunistic attempt (no direct reclaim, no
				   * retry): the model never reclaims, so this only
				   * marks the attempt and counts its failures */
	AL_GFP_NOPCP = 1u << 2,	  /* straight to the buddy under the zone lock,
				   * bypassing this CPU's page lists */
	AL_GFP_PCP_ONLY = 1u << 3 /* only this CPU's page list of that order, no
				   * refill: -EAGAIN when it is empty */
};

/* Whether a is a `pages` layer. */
AL_API bool al_pages_is(const struct al_allocator *a);
/* Number of simulated page frames (0 if a is not a pages layer). */
AL_API uint64_t al_pages_nr(const struct al_allocator *a);
/* The backing memory of a page frame (NULL when out of range). */
AL_API void *al_page_address(const struct al_allocator *a, uint64_t pfn);
/* The pfn of an address inside the backing memory: 0 or -EINVAL. */
AL_API int al_page_pfn(const struct al_allocator *a, const void *addr, uint64_t *pfn);
/* pfn_valid(): the memory-section lookup the kernel does (section present,
 * subsection populated), as real work. */
AL_API bool al_pfn_valid(const struct al_allocator *a, uint64_t pfn);
/* Whether pcp lists cache blocks of this order (0..3 and AL_PCP_THP_ORDER). */
AL_API bool al_pcp_allowed_order(unsigned order);

/*
 * alloc_pages(): one block of 2^order pages (order <= AL_MAX_PAGE_ORDER);
 * its first pfn in *pfn. PCP-allowed orders come from this CPU's page list
 * (refilled from the zone in batches), others from the buddy under the zone
 * lock. The block is one allocation: free it whole with al_free_pages(), or
 * split it first. Returns 0, or -ENOMEM (no free block of that order or
 * above), -EAGAIN (AL_GFP_PCP_ONLY and the list is empty), -ETIMEDOUT/-EBUSY
 * (the zone lock could not be taken), -EINVAL.
 */
AL_API int al_alloc_pages(struct al_allocator *a, struct al_ctx *c, unsigned order, unsigned gfp,
			  uint64_t *pfn);
/* __free_pages(): drop the reference on an allocated block of that order and
 * free it (PCP for PCP-allowed orders, else the buddy). 0, or -EINVAL (not an
 * allocated block of that order: nothing changed), -ETIMEDOUT/-EBUSY. */
AL_API int al_free_pages(struct al_allocator *a, struct al_ctx *c, uint64_t pfn, unsigned order);
/* split_page(): an allocated block of 2^order pages becomes 2^order allocated
 * order-0 pages, each with its own reference, each freed on its own. */
AL_API int al_split_page(struct al_allocator *a, struct al_ctx *c, uint64_t pfn, unsigned order);
/*
 * alloc_pages_bulk(): up to n blocks of a PCP-allowed order (0 for the
 * kernel's alloc_pages_bulk) into pfns[], under one pcp lock for the whole
 * request, refilling the list from the zone in batches as needed (not with
 * AL_GFP_PCP_ONLY). Returns how many were stored (0..n); it stops at the
 * first failure. 0 sets c->err. When the pcp trylock fails it falls back to
 * one block from the buddy, as the kernel does.
 */
AL_API int al_alloc_pages_bulk(struct al_allocator *a, struct al_ctx *c, unsigned order, unsigned n,
			       unsigned gfp, uint64_t *pfns);
/*
 * free_pages_bulk(): pfns[] holds n allocated order-0 pages (e.g. a split
 * block, or a vmalloc area's pages) in any order. All are checked first; one
 * that is not an allocated order-0 page fails the call with -EINVAL and
 * nothing is freed. Then each page's reference is dropped and every run of
 * consecutive entries with consecutive pfns is freed as naturally aligned
 * blocks, order = min(ffs(pfn) - 1, ilog2(pages left), AL_MAX_PAGE_ORDER),
 * each block once (PCP for PCP-allowed orders, else the buddy). Returns n,
 * or a negative errno.
 */
AL_API int al_free_pages_bulk(struct al_allocator *a, struct al_ctx *c, const uint64_t *pfns,
			      unsigned n);
/* decay_pcp_high(): one tick of the vmstat worker's decay on this CPU's
 * lists (it also runs by itself every decay_ms). Returns pages freed. */
AL_API int al_pages_pcp_decay(struct al_allocator *a, struct al_ctx *c);

/* A snapshot of the allocator's state, for tests and reports. */
struct al_pages_info {
	uint64_t nr_pages;   /* simulated page frames */
	uint64_t free_pages; /* pages in the buddy free lists (not on PCP lists) */
	uint64_t pcp_pages;  /* pages on every CPU's PCP lists */
	uint64_t nr_free[AL_MAX_PAGE_ORDER + 1]; /* free blocks per order */
	int batch;				 /* pcp->batch */
	int high_min, high_max;			 /* pcp high bounds (equal when high is fixed) */
	int wmark_min, wmark_low, wmark_high;	 /* zone watermarks, pages */
};

/* Totals, plus the PCP state of one CPU (cpu < ncpu) in the out-params
 * that follow (any may be NULL): count, high, alloc_factor, free_count. */
AL_API int al_pages_info(const struct al_allocator *a, struct al_pages_info *out, unsigned cpu,
			 int *pcp_count, int *pcp_high, int *pcp_alloc_factor, int *pcp_free_count);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_PAGES_H */
