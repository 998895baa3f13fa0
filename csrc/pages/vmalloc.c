/* SPDX-License-Identifier: MIT */
/*
 * vmalloc: virtually contiguous areas over a `pages` layer (reference §6;
 * the kernel's mm/vmalloc.c, modelled, not copied).
 *
 * Virtual space
 * -------------
 * `va_size` bytes (1 GiB aligned), kept as the kernel keeps VMALLOC_START..
 * END: free ranges in an augmented tree (free_lock), lowest-address first
 * fit (a request aligned beyond a page searches size + align - 1, as the
 * kernel does); busy areas in per-node trees (nodes = CPUs, a 64 KiB
 * address zone to a node, each with its lock); freed areas go to per-node
 * lazy lists and return to the free tree in one purge (merging with their
 * free neighbours, one "TLB flush") once their pages exceed lazy_max_pages
 * (fls(CPUs) * 32 MiB, as lazy_max_pages()) or when an allocation finds no
 * range (purge, then retry once). The purge runs on a worker thread of the
 * instance (drain_vmap_work's kworker), queued by the vfree that crosses the
 * threshold with one atomic exchange when none is pending, so neither the
 * merges nor the TLB flush are in the freeing thread's time; purge=inline
 * runs it in that vfree instead. The worker has a model CPU of its own
 * (record cache, counter block) past the kworker CPU that deferred frees use
 * (al_vmalloc_kworker_cpu, whose pages layer lists exist too). vmap pools and
 * KASAN are not modelled. Every vmalloc area has a guard page after it.
 *
 * The range is ordinary host memory too (one MAP_NORESERVE mapping, touched
 * only where written), so al_ops callers can dereference vmalloc pointers.
 *
 * Page table
 * ----------
 * A PTE per 4 KiB page and a PMD entry per 2 MiB (flat arrays, lazily
 * mapped; PTE tables are never freed, as for the kernel's vmalloc space).
 * Mapping writes a PTE per page after pfn_valid() (vmap_pages_pte_range), a
 * PMD per 2 MiB for huge mappings, or on arm64 groups of 16 PTEs with the
 * contiguous bit for order-4 blocks; unmapping reads and clears each entry.
 * al_vmalloc_write/read walk PMD then PTE to the page's memory.
 *
 * Populating an area (vm_area_alloc_pages), by the `alloc` strategy:
 *   order0      alloc_pages_bulk of at most bulk_max (100) pages a call,
 *               stopping at a short call; then single order-0 allocations.
 *   high_order  first the largest order <= ilog2(pages left) (at most 10),
 *               opportunistic (AL_GFP_NORETRY); an order that fails is not
 *               tried again; each block is split into order-0 pages; then as
 *               order0 (Vishal Moola's "request large order pages").
 *   pcp_first   first this CPU's page lists, high to low order, without
 *               refill; then the buddy, high to low order, bypassing the
 *               lists, failed orders not retried; then as order0 (the
 *               seed's suggestion, generalised as Ryan Roberts put it).
 * With use_huge (or AL_VM_HUGE) the mapping granule is a PMD for sizes of
 * 2 MiB and more, and on arm64 an order-4 contiguous-PTE block from 64 KiB;
 * the area is then populated with blocks of at least that order: under
 * high_order (and pcp_first's buddy step) first the larger orders down to
 * the block order, as vm_area_alloc_pages' `large_order > order` loop does
 * for any order, then blocks of that order one at a time; under order0
 * blocks of that order only. Each block is split, and a failure retries
 * with small pages, under every strategy.
 *
 * Freeing (vfree), by the `free` strategy:
 *   per_page    every page back through __free_page (the PCP), one at a time;
 *   bulk        free_pages_bulk over the area's pages: physically contiguous
 *               runs go back as naturally aligned high-order blocks.
 *
 * vm_map_ram of at most 64 pages comes from per-CPU vmap blocks of 1024
 * pages (power-of-two pieces handed out in order; a block whose pieces are
 * all unmapped is freed; one that cannot serve a request is retired with its
 * rest counted as dirty, the model's purge_fragmented_blocks).
 *
 * Metadata comes from per-CPU caches carved from al_meta_alloc chunks,
 * never returned before destroy, at a cost that does not depend on the
 * strategy: per area a vmap_area record (kmem_cache), a vm_struct record
 * (kzalloc: zeroed), and pages[] (kvzalloc: every entry zeroed; arrays over a
 * page of pointers are counted as kvmalloc's vmalloc side, whose own area is
 * not modelled).
 *
 * Locks (al_lock): free_lock (the free tree), per node busy and lazy locks,
 * purge_lock (one purge at a time). Order: purge_lock, then a lazy lock or
 * free_lock, never two of the others at once; the pages layer's locks are
 * taken with none of these held. The purge worker's mutex guards only its
 * queued/running/stop state and is never held across a purge; check() and
 * drain() wait on its idle condition (flush_work), destroy joins it.
 *
 * Counters (vm_counters): vmalloc and vfree find their per-CPU block once;
 * pages_alloc and pages_freed are kept at every stats level, so bytes_held
 * is right with stats off. free_lock counts as va_lock_*, the busy locks
 * together as busy_lock_*; the purge and lazy locks count nothing.
 *
 * Invariants (vm_check): free ranges are ordered, disjoint, non-adjacent
 * (merged), and their subtree_max and heap order hold; free, lazy and busy
 * areas tile the virtual range; every vmalloc area maps exactly its pages
 * and not its guard page; free and lazy ranges below the high-water mark are
 * unmapped; lazy_nr and bytes_held match.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloclab/alloclab.h"
#include "../core/cpu.h"
#include "vatree.h"

#define PAGE_SHIFT	 AL_PAGE_SHIFT
#define PAGE_SIZE	 AL_PAGE_SIZE
#define PMD_SHIFT	 21
#define PMD_SIZE	 (1ul << PMD_SHIFT)
#define CONT_PTE_SHIFT	 16 /* arm64: 16 x 4 KiB */
#define PTRS_PER_PTE	 (1u << (PMD_SHIFT - PAGE_SHIFT))
#define VMAP_MAX_ALLOC	 64   /* BITS_PER_LONG: larger vm_map_ram use areas */
#define VMAP_BBMAP_BITS	 1024 /* pages per vmap block */
#define VMAP_BLOCK_SHIFT (PAGE_SHIFT + 10)
#define VMAP_BLOCK_SIZE	 (1ul << VMAP_BLOCK_SHIFT)
#define VMAP_ZONE_SHIFT	 (PAGE_SHIFT + 4) /* 64 KiB of addresses per node */
#define LAZY_UNIT	 ((32ul << 20) >> PAGE_SHIFT)
#define NR_CLASSES	 25 /* page arrays of 2^0 .. 2^24 entries */
#define CARVE_BYTES	 (64u << 10)
#define CHUNK_HDR	 64
#define MAX_NODES	 64
#define VA_BASE_ALIGN	 (1ul << 30) /* at most; see va_base_align() */

/* Entry bits. A PTE or huge PMD holds pfn << PAGE_SHIFT | bits. */
#define E_PRESENT 1ull
#define E_CONT	  2ull /* PTE: part of a contiguous-PTE group (arm64) */
#define E_HUGE	  2ull /* PMD: maps 2 MiB itself */
#define E_TABLE	  4ull /* PMD: its PTE table is populated */

enum va_type { VA_VMALLOC = 1u << 0, VA_RAM = 1u << 1, VA_BLOCK = 1u << 2 };
enum { ALLOC_ORDER0, ALLOC_HIGH_ORDER, ALLOC_PCP_FIRST };
enum { FREE_PER_PAGE, FREE_BULK };
enum { ARCH_X86, ARCH_ARM64 };

/* struct vmap_area + vm_struct (+ vmap_block for VA_BLOCK). */
struct vmap_area {
	struct va_node node;	/* tree links and [start, end): must be first */
	struct vmap_area *next; /* lazy list or record cache */
	uint32_t flags;		/* VA_* */
	uint32_t page_shift;	/* mapping granule */
	uint32_t nr_pages;	/* pages mapped */
	uint32_t pages_class;	/* size class of pages[] */
	uint64_t *pages;	/* pfns (VA_VMALLOC) */
	struct vmap_area *vm;	/* VA_VMALLOC: its vm_struct (a record of its own) */
	uint32_t vb_free;	/* VA_BLOCK: pages not handed out yet (owner CPU) */
	uint32_t vb_dirty;	/* VA_BLOCK: pages unmapped again (atomic) */
	size_t requested;	/* bytes asked for */
};

/* struct vmap_node, reduced: busy tree and lazy list. */
struct vnode {
	struct al_lock busy_lock; /* busy */
	struct va_node *busy;	  /* busy areas starting in this node's zones */
	struct al_lock lazy_lock; /* lazy */
	struct vmap_area *lazy;	  /* freed areas waiting for a purge */
} __attribute__((aligned(AL_CACHELINE)));

/* Per-CPU state: caches and the vmap block queue. */
struct vcpu {
	struct vmap_area *cache;   /* free area records */
	struct vmap_area *preload; /* a record kept for a split (ne_fit_preload) */
	void *arrays[NR_CLASSES];  /* free page arrays, linked through word 0 */
	struct vmap_area *vb;	   /* the current vmap block, or NULL */
} __attribute__((aligned(AL_CACHELINE)));

struct chunk {
	struct chunk *next; /* all chunks, for destroy */
	size_t len;	    /* mapping length */
};

/*
 * vmalloc and vfree find their block once and add to it; pages_alloc and
 * pages_freed are counted at every stats level (al_ctr_block_acct: the
 * leak check's bytes_held is made of them), and the bytes mapped and
 * unmapped follow from them (reported by vmalloc_stats()).
 */
#define VM_COUNTERS(C, D, P)                                                                       \
	C(P, vmallocs, AL_CTR_KEY, "areas allocated (vmalloc, __vmalloc_node, vmalloc_huge)")      \
	C(P, vfrees, AL_CTR_KEY, "areas freed")                                                    \
	C(P, vmalloc_failed, AL_CTR_KEY, "vmallocs that returned NULL")                            \
	C(P, map_ram, AL_CTR_KEY, "vm_map_ram calls")                                              \
	C(P, unmap_ram, AL_CTR_KEY, "vm_unmap_ram calls")                                          \
	C(P, vb_allocs, AL_CTR_KEY, "vm_map_ram served by a vmap block")                           \
	C(P, vb_new, AL_CTR_KEY, "vmap blocks created")                                            \
	C(P, vb_freed, AL_CTR_KEY, "vmap blocks freed (all pieces unmapped)")                      \
	C(P, pages_alloc, AL_CTR_KEY, "pages obtained for areas (kept at every stats level)")      \
	C(P, pages_freed, AL_CTR_KEY, "pages given back by vfree (kept at every stats level)")     \
	C(P, high_order_blocks, AL_CTR_KEY,                                                        \
	  "high-order blocks obtained (high_order, pcp_first buddy step)")                         \
	C(P, high_order_failed, AL_CTR_KEY, "high-order attempts that failed (order not retried)") \
	C(P, pcp_first_blocks, AL_CTR_KEY, "blocks taken from this CPU's page lists (pcp_first)")  \
	C(P, bulk_calls, AL_CTR_KEY, "alloc_pages_bulk calls (stage B)")                           \
	C(P, bulk_pages, AL_CTR_KEY, "pages from alloc_pages_bulk")                                \
	C(P, single_allocs, AL_CTR_KEY, "single allocations (stage C; huge blocks)")               \
	C(P, huge_areas, AL_CTR_KEY, "areas mapped with a huge granule (PMD or contiguous PTEs)")  \
	C(P, huge_fallbacks, AL_CTR_KEY, "huge attempts that fell back to small pages")            \
	C(P, page_frees, 0, "__free_page calls (free=per_page)")                                   \
	C(P, bulk_frees, 0, "free_pages_bulk calls (free=bulk)")                                   \
	C(P, pte_writes, AL_CTR_KEY, "PTEs written")                                               \
	C(P, pte_clears, 0, "PTEs cleared")                                                        \
	C(P, pmd_huge, 0, "PMD entries written for huge mappings")                                 \
	C(P, pte_tables, 0, "PTE tables populated")                                                \
	C(P, cont_groups, 0, "contiguous-PTE groups written (arm64)")                              \
	C(P, va_allocs, 0, "virtual ranges allocated (areas and vmap blocks)")                     \
	C(P, va_lazy, 0, "virtual ranges freed lazily")                                            \
	C(P, purges, AL_CTR_KEY, "lazy purges (one TLB flush each)")                               \
	C(P, purged_areas, 0, "areas merged back into the free tree by purges")                    \
	C(P, purge_retries, AL_CTR_KEY, "allocations that purged and retried for lack of a range") \
	C(P, bytes_requested, 0, "bytes asked for by vmallocs")                                    \
	C(P, vm_structs, 0, "vm_struct records allocated (kzalloc in __get_vm_area_node)")         \
	C(P, pages_kmalloc, 0, "pages[] arrays of at most a page, zeroed (kmalloc in kvzalloc)")   \
	C(P, pages_vmalloc, 0, "pages[] arrays over a page, zeroed (kvzalloc's vmalloc side)")     \
	C(P, array_bytes_zeroed, 0, "bytes of pages[] zeroed (__GFP_ZERO on the array)")           \
	C(P, purge_work_queued, AL_CTR_KEY,                                                        \
	  "purges handed to the purge worker (drain_vmap_work queued)")                            \
	D(P, bytes_mapped, 0, "", "bytes of vmalloc areas mapped (pages_alloc pages)")             \
	D(P, bytes_unmapped, 0, "",                                                                \
	  "bytes of vmalloc areas unmapped by vfree (pages_freed pages)")                          \
	C(P, invalid_frees, AL_CTR_KEY,                                                            \
	  "vfree/vm_unmap_ram of an address that is not such an area")                             \
	C(P, enomem, AL_CTR_KEY, "failures: no pages or no virtual range")                         \
	C(P, einval, AL_CTR_KEY, "calls rejected: bad size, alignment or context")                 \
	AL_LOCK_COUNTERS(C, P, va_lock, "the free-range lock")                                     \
	AL_LOCK_COUNTERS(C, P, busy_lock, "the busy-tree locks")                                   \
	D(P, lazy_pages, AL_CTR_GAUGE, "", "pages of lazily freed ranges not yet purged")

AL_COUNTERS_DEFINE(VM_COUNTERS, VMAL_, vm_counters);

enum {
	P_ALLOC,
	P_FREE,
	P_USE_HUGE,
	P_ARCH,
	P_LAZY_MAX,
	P_VA_SIZE,
	P_BULK_MAX,
	P_LOCK_BUDGET,
	P_LOCK_TIMING,
	P_PURGE,
	P_NR
};

enum { PURGE_WORKER, PURGE_INLINE };

/* The drain_vmap_work kworker: one thread per instance, woken by the vfree
 * that takes vmap_lazy_nr past lazy_max. */
struct purge_worker {
	struct al_kthread th; /* a real thread, or a daemon on simulated CPUs */
	struct al_ctx ctx;    /* its model CPU's context */
	pthread_mutex_t mu;
	pthread_cond_t wake; /* queued or stop */
	pthread_cond_t idle; /* nothing queued or running */
	unsigned queued;     /* work pending (atomic: vfree tests it lock-free) */
	unsigned cpu;	     /* its model CPU, set before it starts */
	bool running;	     /* a purge in progress (mu) */
	bool stop;	     /* (mu) */
	bool started;
};

struct vm {
	struct al_allocator base;    /* must be first */
	struct al_allocator *pg;     /* the pages layer below */
	unsigned alloc_strategy;     /* ALLOC_* */
	unsigned free_strategy;	     /* FREE_* */
	unsigned arch;		     /* ARCH_* */
	bool use_huge;		     /* every vmalloc is vmalloc_huge */
	unsigned bulk_max;	     /* pages per alloc_pages_bulk call */
	uint64_t lazy_max;	     /* purge when lazily freed pages exceed this */
	void *map;		     /* the host reservation */
	size_t map_len;		     /* its length */
	uintptr_t va_base;	     /* first address of the range, va_base_align() aligned */
	size_t va_size;		     /* bytes of the range */
	uintptr_t va_top;	     /* highest end ever allocated (atomic max) */
	uint64_t *pte;		     /* one entry per page of the range */
	size_t pte_len;		     /* bytes of pte[] */
	uint64_t *pmd;		     /* one entry per 2 MiB */
	size_t pmd_len;		     /* bytes of pmd[] */
	struct vmap_area **vb_index; /* vmap block of each 4 MiB of the range */
	size_t vb_index_len;	     /* bytes of vb_index[] */
	struct al_lock free_lock;    /* free_vmap_area_lock */
	struct va_node *free_root;   /* free ranges */
	struct al_lock purge_lock;   /* vmap_purge_lock */
	uint64_t lazy_nr;	     /* vmap_lazy_nr (atomic) */
	struct vnode *nodes;	     /* nr_nodes */
	unsigned nr_nodes;	     /* busy/lazy nodes */
	size_t nodes_len;	     /* bytes of nodes[] */
	struct vcpu *cpus;	     /* ncpu */
	size_t cpus_len;	     /* bytes of cpus[] */
	struct chunk *chunks;	     /* metadata chunks (lock-free stack) */
	struct al_counters ctr;	     /* vm_counters */
	unsigned purge_mode;	     /* PURGE_* */
	unsigned nslots;	     /* per-CPU slots: ncpu, + kworker and purge CPUs if they fit */
	struct purge_worker pw;	     /* PURGE_WORKER */
};

/* Model CPUs past the stack's: the kworker of deferred frees (shared with the
 * pages layer's CPU of the same id) and the purge worker (vmalloc only). */
#define KWORKER_CPU(v) ((v)->base.ncpu)
#define PURGE_CPU(v)   ((v)->base.ncpu + 1)
#define NR_SLOTS(n)    ((n) + 2 <= AL_MAX_CPUS ? (n) + 2 : (n))

AL_LAYER_DECLARE(vmalloc);

static inline struct vm *to_vm(struct al_allocator *a)
{
	return (struct vm *)a;
}

static inline struct vm *vm_of(const struct al_allocator *a)
{
	return a && a->ops == AL_LAYER_OPS(vmalloc) ? (struct vm *)a : NULL;
}

static inline struct vmap_area *va_of(struct va_node *n)
{
	return (struct vmap_area *)n;
}

static inline uintptr_t align_up(uintptr_t x, uintptr_t a)
{
	return (x + a - 1) & ~(a - 1);
}

static inline unsigned ilog2_u64(uint64_t x)
{
	return al_fls64(x) - 1;
}

/* ---- metadata ---- */

static void *chunk_new(struct vm *v, size_t bytes)
{
	size_t len = bytes + CHUNK_HDR;
	struct chunk *ch = al_meta_alloc(len), *head;

	if (!ch)
		return NULL;
	ch->len = len;
	head = __atomic_load_n(&v->chunks, __ATOMIC_RELAXED);
	do
		ch->next = head;
	while (!__atomic_compare_exchange_n(&v->chunks, &head, ch, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED));
	return (char *)ch + CHUNK_HDR;
}

static struct vmap_area *record_get(struct vm *v, unsigned cpu)
{
	struct vcpu *vc = &v->cpus[cpu];
	struct vmap_area *va = vc->cache;
	size_t i, n;

	if (al_unlikely(!va)) {
		va = chunk_new(v, CARVE_BYTES);
		if (!va)
			return NULL;
		n = CARVE_BYTES / sizeof(*va);
		for (i = 0; i + 1 < n; i++)
			va[i].next = &va[i + 1];
		va[n - 1].next = NULL;
	}
	vc->cache = va->next;
	memset(va, 0, sizeof(*va));
	va_init_prio(&va->node);
	return va;
}

static inline void record_put(struct vm *v, unsigned cpu, struct vmap_area *va)
{
	struct vcpu *vc = &v->cpus[cpu];

	va->next = vc->cache;
	vc->cache = va;
}

static uint64_t *array_get(struct vm *v, unsigned cpu, unsigned n, uint32_t *cls)
{
	struct vcpu *vc = &v->cpus[cpu];
	unsigned c = n <= 1 ? 0 : al_fls64(n - 1);
	size_t bytes = sizeof(uint64_t) << c, i;
	void **a;

	if (c >= NR_CLASSES)
		return NULL;
	a = vc->arrays[c];
	if (al_unlikely(!a)) {
		if (bytes < CARVE_BYTES) {
			char *m = chunk_new(v, CARVE_BYTES);

			if (!m)
				return NULL;
			for (i = 0; i + bytes <= CARVE_BYTES; i += bytes)
				*(void **)(m + i) =
					i + 2 * bytes <= CARVE_BYTES ? m + i + bytes : NULL;
			a = (void **)m;
		} else {
			a = chunk_new(v, bytes);
			if (!a)
				return NULL;
			*a = NULL;
		}
	}
	vc->arrays[c] = *a;
	*cls = c;
	return (uint64_t *)a;
}

static inline void array_put(struct vm *v, unsigned cpu, uint64_t *arr, uint32_t cls)
{
	struct vcpu *vc = &v->cpus[cpu];

	*(void **)arr = vc->arrays[cls];
	vc->arrays[cls] = arr;
}

/* ---- page table ---- */

static inline size_t pte_index(const struct vm *v, uintptr_t addr)
{
	return (addr - v->va_base) >> PAGE_SHIFT;
}

static inline size_t pmd_index(const struct vm *v, uintptr_t addr)
{
	return (addr - v->va_base) >> PMD_SHIFT;
}

static inline uint64_t ld(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static inline void st(uint64_t *p, uint64_t x)
{
	__atomic_store_n(p, x, __ATOMIC_RELAXED);
}

/* Walk to the pfn an address is mapped to (the MMU's page walk). */
static inline int translate(const struct vm *v, uintptr_t addr, uint64_t *pfn)
{
	uint64_t e;

	if (addr - v->va_base >= v->va_size)
		return -EFAULT;
	e = ld(&v->pmd[pmd_index(v, addr)]);
	if (e & E_HUGE) {
		*pfn = (e >> PAGE_SHIFT) + ((addr >> PAGE_SHIFT) & (PTRS_PER_PTE - 1));
		return 0;
	}
	if (!(e & E_TABLE))
		return -EFAULT;
	e = ld(&v->pte[pte_index(v, addr)]);
	if (!(e & E_PRESENT))
		return -EFAULT;
	*pfn = e >> PAGE_SHIFT;
	return 0;
}

/* vmap_pages_range(): map nr pages at addr with the given granule. 0, or
 * -EINVAL when a pfn is not valid or an entry is already set (the pages
 * mapped so far stay mapped). */
static int vmap_pages(struct vm *v, const struct al_ctx *c, uintptr_t addr, const uint64_t *pfns,
		      unsigned nr, unsigned shift, unsigned *mapped)
{
	uint64_t ptes = 0, tables = 0, groups = 0, huge = 0;
	unsigned i = 0, j;
	int ret = 0;

	while (i < nr) {
		uintptr_t a = addr + ((uintptr_t)i << PAGE_SHIFT);
		uint64_t *pmd = &v->pmd[pmd_index(v, a)];

		if (shift == PMD_SHIFT) {
			/* pmd_set_huge(): the 512 pages are one aligned block. */
			st(pmd, (pfns[i] << PAGE_SHIFT) | E_HUGE | E_PRESENT);
			huge++;
			i += PTRS_PER_PTE;
			continue;
		}
		if (!(ld(pmd) & E_TABLE)) {
			st(pmd, E_TABLE | E_PRESENT); /* pte_alloc_kernel() */
			tables++;
		}
		/* The PTEs of this PMD (vmap_pte_range). */
		do {
			uint64_t *pte = &v->pte[pte_index(v, addr + ((uintptr_t)i << PAGE_SHIFT))];

			if (shift == CONT_PTE_SHIFT) {
				for (j = 0; j < 16; j++) {
					if (!al_pfn_valid(v->pg, pfns[i + j])) {
						ret = -EINVAL;
						goto out;
					}
					st(&pte[j],
					   (pfns[i + j] << PAGE_SHIFT) | E_CONT | E_PRESENT);
				}
				groups++;
				ptes += 16;
				i += 16;
			} else {
				/* vmap_pages_pte_range(): the entry must be empty
				 * (pte_none) and the page valid (pfn_valid). */
				if (ld(pte) || !al_pfn_valid(v->pg, pfns[i])) {
					ret = -EINVAL;
					goto out;
				}
				st(pte, (pfns[i] << PAGE_SHIFT) | E_PRESENT);
				ptes++;
				i++;
			}
		} while (i < nr && ((addr + ((uintptr_t)i << PAGE_SHIFT)) & (PMD_SIZE - 1)));
	}
out:
	*mapped = i;
	al_count(&v->ctr, c, VMAL_pte_writes, ptes);
	if (tables)
		al_count(&v->ctr, c, VMAL_pte_tables, tables);
	if (groups)
		al_count(&v->ctr, c, VMAL_cont_groups, groups);
	if (huge)
		al_count(&v->ctr, c, VMAL_pmd_huge, huge);
	return ret;
}

/* vunmap_range_noflush(): clear the entries of nr pages at addr. */
static void vunmap_pages(struct vm *v, const struct al_ctx *c, uintptr_t addr, unsigned nr)
{
	uintptr_t a = addr, end = addr + ((uintptr_t)nr << PAGE_SHIFT);
	uint64_t cleared = 0;

	while (a < end) {
		uint64_t *pmd = &v->pmd[pmd_index(v, a)], e = ld(pmd);
		uintptr_t next = (a & ~(PMD_SIZE - 1)) + PMD_SIZE;

		if (next > end)
			next = end;
		if (e & E_HUGE) {
			st(pmd, 0);
		} else if (e & E_TABLE) {
			uint64_t *pte = &v->pte[pte_index(v, a)];
			size_t k, n = (next - a) >> PAGE_SHIFT;

			for (k = 0; k < n; k++)
				if (ld(&pte[k])) {
					st(&pte[k], 0);
					cleared++;
				}
		}
		a = next;
	}
	al_count(&v->ctr, c, VMAL_pte_clears, cleared);
}

/* ---- virtual ranges ---- */

static inline struct vnode *node_of(const struct vm *v, uintptr_t addr)
{
	return &v->nodes[(addr >> VMAP_ZONE_SHIFT) % v->nr_nodes];
}

static void merge_or_add_locked(struct vm *v, const struct al_ctx *c, struct vmap_area *va)
{
	struct va_node *n = &va->node, *prev, *next;

	al_lock_assert_held(&v->free_lock, c);
	al_assert(n->start < n->end);
	next = va_find_gt(v->free_root, n->start);
	prev = va_find_le(v->free_root, n->start);
	if (next && next->start == n->end) {
		/* Grow the next range down over this one (order is kept). */
		next->start = n->start;
		record_put(v, c->cpu, va);
		n = next;
		if (prev && prev->end == n->start) {
			prev->end = n->end;
			v->free_root = va_erase(v->free_root, n->start);
			record_put(v, c->cpu, va_of(n));
			n = prev;
		}
		va_fix(v->free_root, n->start);
		return;
	}
	if (prev && prev->end == n->start) {
		prev->end = n->end;
		record_put(v, c->cpu, va);
		va_fix(v->free_root, prev->start);
		return;
	}
	v->free_root = va_insert(v->free_root, n);
}

/* __purge_vmap_area_lazy(): every lazy area back to the free tree. */
static int purge(struct vm *v, const struct al_ctx *c, bool wait)
{
	struct vmap_area *list = NULL, *va, *next;
	uint64_t pages = 0, areas = 0;
	unsigned i;

	if (al_lock_tryacquire(&v->purge_lock, c)) {
		if (!wait || al_lock_acquire(&v->purge_lock, c))
			return 0; /* another CPU is purging */
	}
	for (i = 0; i < v->nr_nodes; i++) {
		struct vnode *vn = &v->nodes[i];

		if (!__atomic_load_n(&vn->lazy, __ATOMIC_RELAXED) ||
		    al_lock_acquire(&vn->lazy_lock, c))
			continue;
		for (va = vn->lazy; va; va = next) {
			next = va->next;
			va->next = list;
			list = va;
		}
		__atomic_store_n(&vn->lazy, NULL, __ATOMIC_RELAXED);
		al_lock_release(&vn->lazy_lock, c);
	}
	if (!list || al_lock_acquire(&v->free_lock, c)) {
		/* Nothing to purge, or the lock failed: put them back on node 0. */
		if (list) {
			struct vnode *vn = &v->nodes[0];

			if (!al_lock_acquire(&vn->lazy_lock, c)) {
				for (va = list; va; va = next) {
					next = va->next;
					va->next = vn->lazy;
					__atomic_store_n(&vn->lazy, va, __ATOMIC_RELAXED);
				}
				al_lock_release(&vn->lazy_lock, c);
			}
		}
		al_lock_release(&v->purge_lock, c);
		return 0;
	}
	/* flush_tlb_kernel_range() over the purged ranges happens here. */
	for (va = list; va; va = next) {
		next = va->next;
		pages += va_size(&va->node) >> PAGE_SHIFT;
		areas++;
		va->flags = 0;
		merge_or_add_locked(v, c, va);
	}
	al_lock_release(&v->free_lock, c);
	__atomic_sub_fetch(&v->lazy_nr, pages, __ATOMIC_RELAXED);
	al_lock_release(&v->purge_lock, c);
	al_count(&v->ctr, c, VMAL_purges, 1);
	al_count(&v->ctr, c, VMAL_purged_areas, areas);
	return (int)areas;
}

/*
 * schedule_work(&drain_vmap_work): the purge and its TLB flush run on the
 * worker thread, outside the freeing thread's time. Work already pending is
 * not queued again (work_pending), so a crossing costs one atomic exchange.
 */
static void purge_queue(struct vm *v, const struct al_ctx *c)
{
	struct purge_worker *w = &v->pw;

	if (__atomic_exchange_n(&w->queued, 1, __ATOMIC_ACQ_REL))
		return;
	pthread_mutex_lock(&w->mu);
	al_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->mu);
	al_count(&v->ctr, c, VMAL_purge_work_queued, 1);
}

/* drain_vmap_area_work(): purge whenever queued, until stopped. */
static void *purge_main(void *arg)
{
	struct vm *v = arg;
	struct purge_worker *w = &v->pw;
	struct al_ctx x;

	al_ctx_init(&x, w->cpu);
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->stop && !__atomic_load_n(&w->queued, __ATOMIC_ACQUIRE))
			al_cond_wait(&w->wake, &w->mu);
		if (w->stop)
			break;
		__atomic_store_n(&w->queued, 0, __ATOMIC_RELEASE);
		w->running = true;
		pthread_mutex_unlock(&w->mu);
		purge(v, &x, true);
		pthread_mutex_lock(&w->mu);
		w->running = false;
		if (!__atomic_load_n(&w->queued, __ATOMIC_ACQUIRE))
			al_cond_broadcast(&w->idle);
	}
	w->running = false;
	al_cond_broadcast(&w->idle);
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* flush_work(&drain_vmap_work): wait until no purge is queued or running. */
static void purge_flush(struct vm *v)
{
	struct purge_worker *w = &v->pw;

	if (!w->started)
		return;
	pthread_mutex_lock(&w->mu);
	while (!w->stop && (w->running || __atomic_load_n(&w->queued, __ATOMIC_ACQUIRE)))
		al_cond_wait(&w->idle, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

static int purge_start(struct vm *v)
{
	struct purge_worker *w = &v->pw;

	w->cpu = PURGE_CPU(v);
	al_ctx_init(&w->ctx, w->cpu);
	if (pthread_mutex_init(&w->mu, NULL))
		return -ENOMEM;
	/* off a pinned creator's CPU */
	if (pthread_cond_init(&w->wake, NULL) || pthread_cond_init(&w->idle, NULL) ||
	    al_kthread_start(&w->th, purge_main, v, &w->ctx, true)) {
		pthread_mutex_destroy(&w->mu);
		return -ENOMEM;
	}
	w->started = true;
	return 0;
}

static void purge_stop(struct vm *v)
{
	struct purge_worker *w = &v->pw;

	if (!w->started)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	al_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->mu);
	al_kthread_join(&w->th);
	pthread_cond_destroy(&w->wake);
	pthread_cond_destroy(&w->idle);
	pthread_mutex_destroy(&w->mu);
	w->started = false;
}

/* free_vmap_area_noflush(): to the lazy list; purge past lazy_max. */
static void free_va_lazy(struct vm *v, const struct al_ctx *c, struct vmap_area *va)
{
	struct vnode *vn = node_of(v, va->node.start);
	uint64_t nr = va_size(&va->node) >> PAGE_SHIFT, lazy;

	lazy = __atomic_add_fetch(&v->lazy_nr, nr, __ATOMIC_RELAXED);
	/* A lazy lock that fails leaves the range on node 0's list (spinning
	 * there too can only fail with the budget: then the range is lost to
	 * the free tree, counted as lazily freed). */
	if (al_lock_acquire(&vn->lazy_lock, c)) {
		vn = &v->nodes[0];
		if (al_lock_acquire(&vn->lazy_lock, c))
			return;
	}
	va->next = vn->lazy;
	__atomic_store_n(&vn->lazy, va, __ATOMIC_RELAXED);
	al_lock_release(&vn->lazy_lock, c);
	al_count(&v->ctr, c, VMAL_va_lazy, 1);
	if (lazy > v->lazy_max) {
		if (v->purge_mode == PURGE_WORKER)
			purge_queue(v, c);
		else
			purge(v, c, false);
	}
}

/*
 * alloc_vmap_area(): a range of size bytes aligned to align, inserted in
 * its node's busy tree. NULL with c->err.
 */
/*
 * Carve [addr, addr + size) from the lowest free range that fits len bytes
 * (the four fits of the kernel's va_clip). The NE_FIT split consumes the
 * CPU's preloaded record; a range used up whole is returned in *gone for the
 * caller to recycle after the lock. false when no free range fits.
 */
static bool va_clip_locked(struct vm *v, const struct al_ctx *c, struct vcpu *vc, size_t len,
			   size_t size, size_t align, uintptr_t *addr, struct vmap_area **gone)
{
	struct va_node *n = va_lowest_fit(v->free_root, len), *r;

	al_lock_assert_held(&v->free_lock, c);
	if (!n)
		return false;
	al_assert(n->end - n->start >= len);
	*addr = align_up(n->start, align);
	if (*addr == n->start && *addr + size == n->end) {
		v->free_root = va_erase(v->free_root, n->start); /* FL_FIT */
		*gone = va_of(n);
	} else if (*addr == n->start) {
		n->start += size; /* LE_FIT */
		va_fix(v->free_root, n->start);
	} else if (*addr + size == n->end) {
		n->end = *addr; /* RE_FIT */
		va_fix(v->free_root, n->start);
	} else {
		al_assert(vc->preload != NULL);
		r = &vc->preload->node; /* NE_FIT: split in two */
		vc->preload = NULL;
		r->start = *addr + size;
		r->end = n->end;
		n->end = *addr;
		va_fix(v->free_root, n->start);
		v->free_root = va_insert(v->free_root, r);
	}
	return true;
}

/* A record for the new area in *va, and the CPU's preload for a split
 * (preload_this_cpu_lock): 0 or -ENOMEM with nothing held. */
static int va_records(struct vm *v, const struct al_ctx *c, struct vcpu *vc, struct vmap_area **va)
{
	*va = record_get(v, c->cpu);
	if (!vc->preload)
		vc->preload = record_get(v, c->cpu);
	if (*va && vc->preload)
		return 0;
	if (*va)
		record_put(v, c->cpu, *va);
	return -ENOMEM;
}

/* Clip a free range for len bytes under free_lock, purging the lazy areas
 * once when none fits. 0, -ENOMEM or a lock error; *addr is the range. */
static int va_claim(struct vm *v, struct al_ctx *c, struct vcpu *vc, size_t len, size_t size,
		    size_t align, uintptr_t *addr)
{
	struct vmap_area *gone = NULL;
	bool purged = false, found;
	int ret;

	for (;;) {
		ret = al_lock_acquire(&v->free_lock, c);
		if (ret)
			return ret;
		found = va_clip_locked(v, c, vc, len, size, align, addr, &gone);
		al_lock_release(&v->free_lock, c);
		if (found)
			break;
		if (purged) {
			al_count(&v->ctr, c, VMAL_enomem, 1);
			return -ENOMEM;
		}
		purged = true;
		al_count(&v->ctr, c, VMAL_purge_retries, 1);
		purge(v, c, true);
	}
	if (gone)
		record_put(v, c->cpu, gone);
	if (!vc->preload)
		vc->preload = record_get(v, c->cpu);
	return 0;
}

/* Make va busy: raise the high-water mark, insert it in its node's busy tree. */
static int va_publish(struct vm *v, struct al_ctx *c, struct vmap_area *va)
{
	uintptr_t end = va->node.end, top = __atomic_load_n(&v->va_top, __ATOMIC_RELAXED);
	struct vnode *vn = node_of(v, va->node.start);
	int ret;

	while (top < end && !__atomic_compare_exchange_n(&v->va_top, &top, end, true,
							 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	ret = al_lock_acquire(&vn->busy_lock, c);
	if (ret)
		return ret;
	vn->busy = va_insert(vn->busy, &va->node);
	al_lock_release(&vn->busy_lock, c);
	return 0;
}

/* alloc_vmap_area(): a busy area of size bytes aligned to align, or NULL
 * with c->err. */
static struct vmap_area *alloc_va(struct vm *v, struct al_ctx *c, size_t size, size_t align,
				  uint32_t type)
{
	struct vcpu *vc = &v->cpus[c->cpu];
	size_t len = align > PAGE_SIZE ? size + align - 1 : size;
	struct vmap_area *va;
	uintptr_t addr = 0;
	int ret;

	if (len < size || va_records(v, c, vc, &va)) {
		c->err = -ENOMEM;
		return NULL;
	}
	ret = va_claim(v, c, vc, len, size, align, &addr);
	if (ret) {
		record_put(v, c->cpu, va);
		c->err = ret;
		return NULL;
	}
	va->node.start = addr;
	va->node.end = addr + size;
	va->flags = type;
	ret = va_publish(v, c, va);
	if (ret) {
		/* The range goes back lazily; the call fails. */
		free_va_lazy(v, c, va);
		c->err = ret;
		return NULL;
	}
	al_count(&v->ctr, c, VMAL_va_allocs, 1);
	return va;
}

/* find_unlink_vmap_area(): the busy area starting at addr, of one of types. */
static struct vmap_area *unlink_va(struct vm *v, const struct al_ctx *c, uintptr_t addr,
				   uint32_t types)
{
	struct vnode *vn;
	struct va_node *n;

	if (addr - v->va_base >= v->va_size)
		return NULL;
	vn = node_of(v, addr);
	if (al_lock_acquire(&vn->busy_lock, c))
		return NULL;
	n = va_find(vn->busy, addr);
	if (n && (va_of(n)->flags & types))
		vn->busy = va_erase(vn->busy, addr);
	else
		n = NULL;
	al_lock_release(&vn->busy_lock, c);
	return n ? va_of(n) : NULL;
}

/* ---- populating an area ---- */

/* Store a (split) block of 2^order pages. */
static inline void take_block(struct vm *v, struct al_ctx *c, uint64_t pfn, unsigned order,
			      uint64_t *pages, unsigned *got)
{
	unsigned i;

	if (order)
		al_split_page(v->pg, c, pfn, order);
	for (i = 0; i < (1u << order); i++)
		pages[(*got)++] = pfn + i;
}

/* Stage A: the largest orders above the block order first, a failed order
 * never retried (vm_area_alloc_pages loops while large_order > order: for a
 * huge mapping's block order too, not only for order 0). Every block is a
 * multiple of the block order and aligned to it, so the area still maps in
 * chunks of the block order. */
static void high_order_stage(struct vm *v, struct al_ctx *c, unsigned order, unsigned nr,
			     uint64_t *pages, unsigned *got, unsigned gfp)
{
	unsigned max_attempt = AL_MAX_PAGE_ORDER, large, blocks = 0, failed = 0;
	uint64_t pfn;

	large = ilog2_u64(nr - *got);
	if (large > max_attempt)
		large = max_attempt;
	while (large > order && *got < nr) {
		if (al_alloc_pages(v->pg, c, large, gfp | AL_GFP_NORETRY, &pfn)) {
			max_attempt = --large;
			failed++;
			continue;
		}
		take_block(v, c, pfn, large, pages, got);
		blocks++;
		if (*got < nr) {
			large = ilog2_u64(nr - *got);
			if (large > max_attempt)
				large = max_attempt;
		}
	}
	if (blocks)
		al_count(&v->ctr, c, VMAL_high_order_blocks, blocks);
	if (failed)
		al_count(&v->ctr, c, VMAL_high_order_failed, failed);
}

/* pcp_first step 1: this CPU's page lists, high to low order, no refill. */
static void pcp_stage(struct vm *v, struct al_ctx *c, unsigned nr, uint64_t *pages, unsigned *got,
		      unsigned gfp)
{
	uint64_t pfns[64];
	unsigned top = ilog2_u64(nr - *got), blocks = 0, want, k;
	int o, n;

	if (top > AL_PCP_THP_ORDER)
		top = AL_PCP_THP_ORDER;
	for (o = (int)top; o >= 0; o--) {
		if (!al_pcp_allowed_order((unsigned)o))
			continue;
		while (*got < nr && ((nr - *got) >> o)) {
			want = (nr - *got) >> o;
			if (want > 64)
				want = 64;
			n = al_alloc_pages_bulk(v->pg, c, (unsigned)o, want, gfp | AL_GFP_PCP_ONLY,
						pfns);
			for (k = 0; k < (unsigned)n; k++)
				take_block(v, c, pfns[k], (unsigned)o, pages, got);
			blocks += (unsigned)n;
			if ((unsigned)n < want)
				break; /* that list is empty */
		}
	}
	if (blocks)
		al_count(&v->ctr, c, VMAL_pcp_first_blocks, blocks);
}

/* pcp_first step 2: the buddy, high to low order, failed orders not retried. */
static void buddy_stage(struct vm *v, struct al_ctx *c, unsigned order, unsigned nr,
			uint64_t *pages, unsigned *got, unsigned gfp)
{
	high_order_stage(v, c, order, nr, pages, got, gfp | AL_GFP_NOPCP);
}

/* vm_area_alloc_pages(): how many of nr pages were obtained. */
static unsigned area_alloc_pages(struct vm *v, struct al_ctx *c, unsigned order, unsigned nr,
				 uint64_t *pages, unsigned gfp)
{
	unsigned got = 0, want;
	uint64_t pfn;
	int n;

	/* Stage A, for every block order; pcp_first's page lists hold the
	 * orders up to the THP order, of which a huge mapping's block order
	 * uses none but its own, so above order 0 it starts at the buddy. */
	if (v->alloc_strategy == ALLOC_HIGH_ORDER) {
		high_order_stage(v, c, order, nr, pages, &got, gfp);
	} else if (v->alloc_strategy == ALLOC_PCP_FIRST) {
		if (!order)
			pcp_stage(v, c, nr, pages, &got, gfp);
		if (got < nr)
			buddy_stage(v, c, order, nr, pages, &got, gfp);
	}
	if (!order) {
		/* Stage B: bulk order-0, stopping at a short call. */
		while (got < nr) {
			want = nr - got < v->bulk_max ? nr - got : v->bulk_max;
			n = al_alloc_pages_bulk(v->pg, c, 0, want, gfp, pages + got);
			al_count(&v->ctr, c, VMAL_bulk_calls, 1);
			al_count(&v->ctr, c, VMAL_bulk_pages, (uint64_t)n);
			got += (unsigned)n;
			if ((unsigned)n < want)
				break;
		}
	}
	/* Stage C: one block at a time (the only path for huge orders). */
	while (got < nr) {
		if (al_alloc_pages(v->pg, c, order, gfp, &pfn))
			break;
		take_block(v, c, pfn, order, pages, &got);
		al_count(&v->ctr, c, VMAL_single_allocs, 1);
	}
	return got;
}

/* Free an area's pages by the free strategy. 0 or the first error. */
static int area_free_pages(struct vm *v, struct al_ctx *c, const uint64_t *pages, unsigned nr)
{
	unsigned i;
	int ret, err = 0;

	if (!nr)
		return 0;
	if (v->free_strategy == FREE_BULK) {
		ret = al_free_pages_bulk(v->pg, c, pages, nr);
		al_count(&v->ctr, c, VMAL_bulk_frees, 1);
		return ret < 0 ? ret : 0;
	}
	for (i = 0; i < nr; i++) {
		ret = al_free_pages(v->pg, c, pages[i], 0);
		if (ret && !err)
			err = ret;
	}
	al_count(&v->ctr, c, VMAL_page_frees, nr);
	return err;
}

/* ---- vmalloc / vfree ---- */

static al_noinline al_cold void *vm_fail(struct vm *v, struct al_ctx *c, int err, unsigned ctr)
{
	c->err = err;
	al_count(&v->ctr, c, ctr, 1);
	al_count(&v->ctr, c, VMAL_vmalloc_failed, 1);
	return NULL;
}

/*
 * __vmalloc_area_node()'s pages[]: kvzalloc of nr pointers, zeroed as the
 * kernel's __GFP_ZERO array is (one store per entry). At most a page of
 * pointers is a kmalloc; larger arrays are the kernel's nested vmalloc,
 * here served by the same per-CPU array cache (counted apart: the nested
 * area's own pages and mapping are not modelled).
 */
static uint64_t *pages_array(struct vm *v, const struct al_ctx *c, unsigned nr, uint32_t *cls)
{
	size_t bytes = (size_t)nr * sizeof(uint64_t);
	uint64_t *pages = array_get(v, c->cpu, nr, cls), *b;

	if (!pages)
		return NULL;
	memset(pages, 0, bytes);
	b = al_ctr_block(&v->ctr, c);
	al_ctr_add(b, bytes <= PAGE_SIZE ? VMAL_pages_kmalloc : VMAL_pages_vmalloc, 1);
	al_ctr_add(b, VMAL_array_bytes_zeroed, bytes);
	return pages;
}

/* __vmalloc_node_range(). */
/* A new area that could not be populated: out of the busy tree, and its range
 * back to the free tree lazily. */
static void va_discard(struct vm *v, struct al_ctx *c, struct vmap_area *va)
{
	unlink_va(v, c, va->node.start, VA_VMALLOC);
	free_va_lazy(v, c, va);
}

/*
 * __vmalloc_area_node(): the area's nr pages (allocated in pages of 1 << shift
 * bytes) and their mapping. 0, or an error (*ctr: the counter it goes to; *short_pages:
 * the pages ran out, where a huge attempt falls back to small pages) with
 * the pages and the area given back.
 */
static int area_populate(struct vm *v, struct al_ctx *c, struct vmap_area *va, unsigned shift,
			 unsigned nr, unsigned gfp, unsigned *ctr, bool *short_pages)
{
	unsigned got, mapped;
	uint64_t *pages;
	uint32_t cls;
	int ret;

	*ctr = VMAL_enomem;
	*short_pages = false;
	pages = pages_array(v, c, nr, &cls);
	if (!pages) {
		va_discard(v, c, va);
		return -ENOMEM;
	}
	got = area_alloc_pages(v, c, shift - PAGE_SHIFT, nr, pages, gfp);
	if (got < nr) {
		ret = c->err == -ETIMEDOUT || c->err == -EBUSY ? c->err : -ENOMEM;
		*short_pages = true;
		goto out_pages;
	}
	ret = vmap_pages(v, c, va->node.start, pages, nr, shift, &mapped);
	if (al_unlikely(ret)) {
		vunmap_pages(v, c, va->node.start, mapped);
		*ctr = VMAL_einval;
		goto out_pages;
	}
	va->pages = pages;
	va->pages_class = cls;
	va->nr_pages = nr;
	va->page_shift = shift;
	return 0;

out_pages:
	area_free_pages(v, c, pages, got);
	array_put(v, c->cpu, pages, cls);
	va_discard(v, c, va);
	return ret;
}

/* The page size a huge-capable area of size bytes is mapped with (PMD, or
 * arm64's contiguous PTEs), PAGE_SHIFT when none fits. */
static unsigned huge_shift(const struct vm *v, size_t size, unsigned vmflags)
{
	if (!(vmflags & AL_VM_HUGE) && !v->use_huge)
		return PAGE_SHIFT;
	if (size >= PMD_SIZE)
		return PMD_SHIFT;
	if (v->arch == ARCH_ARM64 && size >= (1ul << CONT_PTE_SHIFT))
		return CONT_PTE_SHIFT;
	return PAGE_SHIFT;
}

static void *vm_alloc(struct vm *v, struct al_ctx *c, size_t size, size_t align, unsigned vmflags)
{
	uint64_t *acct, *b;
	size_t real_size, real_align;
	unsigned shift, nr, ctr;
	unsigned gfp = (vmflags & AL_VM_ZERO) ? AL_GFP_ZERO : 0;
	struct vmap_area *va, *vm;
	bool short_pages;
	int ret;

	if (al_unlikely(c->level != AL_CTX_TASK))
		return vm_fail(v, c, -EPERM, VMAL_einval);
	if (al_unlikely(!size || size > v->va_size / 2 || (align & (align - 1))))
		return vm_fail(v, c, -EINVAL, VMAL_einval);
	if (align < PAGE_SIZE)
		align = PAGE_SIZE;
	real_size = size = align_up(size, PAGE_SIZE);
	real_align = align;
	shift = huge_shift(v, size, vmflags);
	if (shift > PAGE_SHIFT) {
		if (align < (1ul << shift))
			align = 1ul << shift;
		size = align_up(real_size, 1ul << shift);
	}
	for (;;) {
		/* __get_vm_area_node(): the vm_struct (kzalloc), then the range. */
		vm = record_get(v, c->cpu);
		if (!vm)
			return vm_fail(v, c, -ENOMEM, VMAL_enomem);
		al_count(&v->ctr, c, VMAL_vm_structs, 1);
		va = alloc_va(v, c, size + PAGE_SIZE, align, VA_VMALLOC); /* + the guard page */
		if (!va) {
			record_put(v, c->cpu, vm);
			return vm_fail(v, c, c->err, VMAL_enomem);
		}
		va->vm = vm;
		vm->node.start = va->node.start; /* vm->addr, vm->size */
		vm->node.end = va->node.end;
		nr = (unsigned)(size >> PAGE_SHIFT);
		ret = area_populate(v, c, va, shift, nr, gfp, &ctr, &short_pages);
		if (!ret)
			break;
		record_put(v, c->cpu, vm);
		if (!short_pages || shift == PAGE_SHIFT)
			return vm_fail(v, c, ret, ctr);
		/* The huge attempt failed: small pages, the caller's alignment. */
		al_count(&v->ctr, c, VMAL_huge_fallbacks, 1);
		shift = PAGE_SHIFT;
		align = real_align;
		size = real_size;
	}
	va->requested = real_size;
	acct = al_ctr_block_acct(&v->ctr, c);
	b = al_counters_on(&v->ctr) ? acct : NULL;
	al_ctr_add(acct, VMAL_pages_alloc, nr);
	al_ctr_add(b, VMAL_vmallocs, 1);
	al_ctr_add(b, VMAL_bytes_requested, real_size);
	if (shift > PAGE_SHIFT)
		al_ctr_add(b, VMAL_huge_areas, 1);
	return (void *)va->node.start;
}

static al_noinline al_cold int free_reject(struct vm *v, const struct al_ctx *c)
{
	al_count(&v->ctr, c, VMAL_invalid_frees, 1);
	return -EINVAL;
}

/* vfree(): unmap, free the pages, free the range lazily. */
static int vm_free(struct vm *v, struct al_ctx *c, const void *addr)
{
	uint64_t *acct;
	struct vmap_area *va;
	unsigned nr;
	int ret;

	if (!addr)
		return 0;
	if (al_unlikely(c->level != AL_CTX_TASK))
		return -EPERM;
	va = unlink_va(v, c, (uintptr_t)addr, VA_VMALLOC);
	if (al_unlikely(!va))
		return free_reject(v, c);
	nr = va->nr_pages;
	vunmap_pages(v, c, va->node.start, nr);
	ret = area_free_pages(v, c, va->pages, nr);
	array_put(v, c->cpu, va->pages, va->pages_class); /* kvfree(vm->pages) */
	va->pages = NULL;
	record_put(v, c->cpu, va->vm); /* kfree(vm) */
	va->vm = NULL;
	free_va_lazy(v, c, va);
	acct = al_ctr_block_acct(&v->ctr, c);
	al_ctr_add(acct, VMAL_pages_freed, nr);
	al_ctr_add(al_counters_on(&v->ctr) ? acct : NULL, VMAL_vfrees, 1);
	return ret;
}

/* ---- vm_map_ram ---- */

static void vb_free_block(struct vm *v, const struct al_ctx *c, struct vmap_area *vb)
{
	__atomic_store_n(&v->vb_index[(vb->node.start - v->va_base) >> VMAP_BLOCK_SHIFT], NULL,
			 __ATOMIC_RELEASE);
	if (unlink_va(v, c, vb->node.start, VA_BLOCK) == vb)
		free_va_lazy(v, c, vb);
	al_count(&v->ctr, c, VMAL_vb_freed, 1);
}

/* Retire a block: its pieces never handed out count as unmapped. */
static void vb_retire(struct vm *v, const struct al_ctx *c, struct vmap_area *vb)
{
	uint32_t rest = vb->vb_free;

	vb->vb_free = 0;
	if (__atomic_add_fetch(&vb->vb_dirty, rest, __ATOMIC_ACQ_REL) == VMAP_BBMAP_BITS)
		vb_free_block(v, c, vb);
}

static uintptr_t vb_alloc(struct vm *v, struct al_ctx *c, unsigned n)
{
	struct vcpu *vc = &v->cpus[c->cpu];
	unsigned need = 1u << (n <= 1 ? 0 : al_fls64(n - 1));
	struct vmap_area *vb = vc->vb;
	uintptr_t addr;

	if (!vb || vb->vb_free < need) {
		if (vb) {
			vc->vb = NULL;
			vb_retire(v, c, vb);
		}
		vb = alloc_va(v, c, VMAP_BLOCK_SIZE, VMAP_BLOCK_SIZE, VA_BLOCK);
		if (!vb)
			return 0;
		vb->vb_free = VMAP_BBMAP_BITS;
		vb->vb_dirty = 0;
		__atomic_store_n(&v->vb_index[(vb->node.start - v->va_base) >> VMAP_BLOCK_SHIFT],
				 vb, __ATOMIC_RELEASE);
		vc->vb = vb;
		al_count(&v->ctr, c, VMAL_vb_new, 1);
	}
	addr = vb->node.start + ((uintptr_t)(VMAP_BBMAP_BITS - vb->vb_free) << PAGE_SHIFT);
	vb->vb_free -= need;
	if (!vb->vb_free)
		vc->vb = NULL; /* full: off the queue */
	al_count(&v->ctr, c, VMAL_vb_allocs, 1);
	return addr;
}

static int vb_free(struct vm *v, struct al_ctx *c, uintptr_t addr, unsigned n)
{
	unsigned need = 1u << (n <= 1 ? 0 : al_fls64(n - 1));
	struct vmap_area *vb;

	if (addr - v->va_base >= v->va_size || (addr & (PAGE_SIZE - 1)))
		return free_reject(v, c);
	vb = __atomic_load_n(&v->vb_index[(addr - v->va_base) >> VMAP_BLOCK_SHIFT],
			     __ATOMIC_ACQUIRE);
	if (!vb || addr + ((uintptr_t)n << PAGE_SHIFT) > vb->node.end)
		return free_reject(v, c);
	vunmap_pages(v, c, addr, n);
	if (__atomic_add_fetch(&vb->vb_dirty, need, __ATOMIC_ACQ_REL) == VMAP_BBMAP_BITS)
		vb_free_block(v, c, vb);
	return 0;
}

static void *vm_map_ram(struct vm *v, struct al_ctx *c, const uint64_t *pfns, unsigned n)
{
	struct vmap_area *va = NULL;
	uintptr_t addr;
	unsigned mapped;
	int ret;

	if (al_unlikely(c->level != AL_CTX_TASK || !n || !pfns ||
			(size_t)n << PAGE_SHIFT > v->va_size / 2)) {
		c->err = c->level != AL_CTX_TASK ? -EPERM : -EINVAL;
		al_count(&v->ctr, c, VMAL_einval, 1);
		return NULL;
	}
	if (n <= VMAP_MAX_ALLOC) {
		addr = vb_alloc(v, c, n);
	} else {
		va = alloc_va(v, c, (size_t)n << PAGE_SHIFT, PAGE_SIZE, VA_RAM);
		addr = va ? va->node.start : 0;
		if (va)
			va->nr_pages = n;
	}
	if (!addr)
		return NULL;
	ret = vmap_pages(v, c, addr, pfns, n, PAGE_SHIFT, &mapped);
	if (ret) {
		vunmap_pages(v, c, addr, mapped);
		if (va) {
			unlink_va(v, c, addr, VA_RAM);
			free_va_lazy(v, c, va);
		} else {
			vb_free(v, c, addr, n);
		}
		c->err = ret;
		return NULL;
	}
	al_count(&v->ctr, c, VMAL_map_ram, 1);
	return (void *)addr;
}

static int vm_unmap_ram(struct vm *v, struct al_ctx *c, uintptr_t addr, unsigned n)
{
	struct vmap_area *va;
	int ret;

	if (al_unlikely(c->level != AL_CTX_TASK))
		return -EPERM;
	if (n <= VMAP_MAX_ALLOC) {
		ret = vb_free(v, c, addr, n);
	} else {
		va = unlink_va(v, c, addr, VA_RAM);
		if (!va || va->nr_pages != n) {
			if (va) { /* wrong count: put it back */
				struct vnode *vn = node_of(v, addr);

				if (!al_lock_acquire(&vn->busy_lock, c)) {
					vn->busy = va_insert(vn->busy, &va->node);
					al_lock_release(&vn->busy_lock, c);
				}
			}
			return free_reject(v, c);
		}
		vunmap_pages(v, c, addr, n);
		free_va_lazy(v, c, va);
		ret = 0;
	}
	if (!ret)
		al_count(&v->ctr, c, VMAL_unmap_ram, 1);
	return ret;
}

/* ---- public API (vmalloc.h) ---- */

bool al_vmalloc_is(const struct al_allocator *a)
{
	return vm_of(a) != NULL;
}

struct al_allocator *al_vmalloc_pages(const struct al_allocator *a)
{
	struct vm *v = vm_of(a);

	return v ? v->pg : NULL;
}

void *al_vmalloc(struct al_allocator *a, struct al_ctx *c, size_t size, size_t align,
		 unsigned vmflags)
{
	struct vm *v = vm_of(a);

	if (!v) {
		c->err = -EINVAL;
		return NULL;
	}
	return vm_alloc(v, c, size, align, vmflags);
}

int al_vfree(struct al_allocator *a, struct al_ctx *c, const void *addr)
{
	struct vm *v = vm_of(a);

	return v ? vm_free(v, c, addr) : -EINVAL;
}

void *al_vm_map_ram(struct al_allocator *a, struct al_ctx *c, const uint64_t *pfns, unsigned n)
{
	struct vm *v = vm_of(a);

	if (!v) {
		c->err = -EINVAL;
		return NULL;
	}
	return vm_map_ram(v, c, pfns, n);
}

int al_vm_unmap_ram(struct al_allocator *a, struct al_ctx *c, const void *addr, unsigned n)
{
	struct vm *v = vm_of(a);

	return v ? vm_unmap_ram(v, c, (uintptr_t)addr, n) : -EINVAL;
}

/* Visit the page memory of [addr, addr + len) through the page table. */
static int walk_mem(struct vm *v, uintptr_t addr, size_t len,
		    void (*fn)(void *mem, size_t off, size_t n, void *arg), void *arg)
{
	size_t done = 0, n;
	uint64_t pfn;

	while (done < len) {
		uintptr_t a = addr + done;

		if (translate(v, a, &pfn))
			return -EFAULT;
		n = PAGE_SIZE - (a & (PAGE_SIZE - 1));
		if (n > len - done)
			n = len - done;
		fn((char *)al_page_address(v->pg, pfn) + (a & (PAGE_SIZE - 1)), done, n, arg);
		done += n;
	}
	return 0;
}

static void do_write(void *mem, size_t off, size_t n, void *arg)
{
	memcpy(mem, (const char *)arg + off, n);
}

static void do_read(void *mem, size_t off, size_t n, void *arg)
{
	memcpy((char *)arg + off, mem, n);
}

static void do_set(void *mem, size_t off, size_t n, void *arg)
{
	(void)off;
	memset(mem, *(int *)arg, n);
}

int al_vmalloc_write(struct al_allocator *a, void *addr, const void *src, size_t len)
{
	struct vm *v = vm_of(a);
	uint64_t pfn;

	if (!v)
		return -EINVAL;
	if (len == 1) { /* the test's one byte: a single walk */
		if (translate(v, (uintptr_t)addr, &pfn))
			return -EFAULT;
		*((char *)al_page_address(v->pg, pfn) + ((uintptr_t)addr & (PAGE_SIZE - 1))) =
			*(const char *)src;
		return 0;
	}
	return walk_mem(v, (uintptr_t)addr, len, do_write, (void *)(uintptr_t)src);
}

int al_vmalloc_read(struct al_allocator *a, const void *addr, void *dst, size_t len)
{
	struct vm *v = vm_of(a);

	return v ? walk_mem(v, (uintptr_t)addr, len, do_read, dst) : -EINVAL;
}

int al_vmalloc_memset(struct al_allocator *a, void *addr, int byte, size_t len)
{
	struct vm *v = vm_of(a);

	return v ? walk_mem(v, (uintptr_t)addr, len, do_set, &byte) : -EINVAL;
}

int al_vmalloc_to_pfn(struct al_allocator *a, const void *addr, uint64_t *pfn)
{
	struct vm *v = vm_of(a);

	return v ? translate(v, (uintptr_t)addr, pfn) : -EINVAL;
}

int al_vmalloc_purge(struct al_allocator *a, struct al_ctx *c)
{
	struct vm *v = vm_of(a);

	if (!v)
		return -EINVAL;
	purge_flush(v);
	return purge(v, c, true);
}

unsigned al_vmalloc_kworker_cpu(const struct al_allocator *a)
{
	const struct vm *v = vm_of(a);

	return v && v->nslots > v->base.ncpu ? KWORKER_CPU(v) : ~0u;
}

/* ---- struct al_ops ---- */

static void *vmalloc_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	void *p = vm_alloc(to_vm(a), c, size, PAGE_SIZE, 0);

	/* The caller reads the range itself: zero what it sees. */
	if (p && (flags & AL_ZERO))
		memset(p, 0, size);
	return p;
}

static int vmalloc_free(struct al_allocator *a, struct al_ctx *c, void *ptr)
{
	return vm_free(to_vm(a), c, ptr);
}

static bool vmalloc_owns(struct al_allocator *a, const void *ptr)
{
	const struct vm *v = to_vm(a);

	return (uintptr_t)ptr - v->va_base < v->va_size;
}

static size_t vmalloc_usable_size(struct al_allocator *a, const void *ptr)
{
	struct vm *v = to_vm(a);
	struct vnode *vn;
	struct va_node *n;
	struct al_ctx c;
	size_t sz = 0;

	if ((uintptr_t)ptr - v->va_base >= v->va_size)
		return 0;
	al_ctx_init(&c, 0);
	vn = node_of(v, (uintptr_t)ptr);
	if (al_lock_acquire(&vn->busy_lock, &c))
		return 0;
	n = va_find(vn->busy, (uintptr_t)ptr);
	if (n && (va_of(n)->flags & VA_VMALLOC))
		sz = (size_t)va_of(n)->nr_pages << PAGE_SHIFT;
	al_lock_release(&vn->busy_lock, &c);
	return sz;
}

/* Purge the lazy areas; free vmap blocks with nothing mapped. */
static void vmalloc_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct vm *v = to_vm(a);
	unsigned i;

	purge_flush(v);
	for (i = 0; i < v->nslots; i++) {
		struct vcpu *vc = &v->cpus[i];
		struct vmap_area *vb = vc->vb;

		if ((scope != AL_DRAIN_ALL && i != c->cpu) || !vb)
			continue;
		if (__atomic_load_n(&vb->vb_dirty, __ATOMIC_ACQUIRE) + vb->vb_free ==
		    VMAP_BBMAP_BITS) {
			vc->vb = NULL;
			vb_retire(v, c, vb);
		}
	}
	purge(v, c, true);
}

/* Counted at every stats level (al_ctr_block_acct). */
static int64_t vm_held(const struct vm *v)
{
	return (int64_t)(al_counters_sum(&v->ctr, VMAL_pages_alloc) -
			 al_counters_sum(&v->ctr, VMAL_pages_freed))
	       << PAGE_SHIFT;
}

static void vmalloc_stats(struct al_allocator *a, struct al_stats *out)
{
	struct vm *v = to_vm(a);

	out->layer = "vmalloc";
	out->bytes_held = vm_held(v);
	if (!al_counters_on(&v->ctr))
		return;
	al_stats_add(out, "bytes_mapped", al_counters_sum(&v->ctr, VMAL_pages_alloc) << PAGE_SHIFT);
	al_stats_add(out, "bytes_unmapped",
		     al_counters_sum(&v->ctr, VMAL_pages_freed) << PAGE_SHIFT);
	al_counters_report(&v->ctr, out);
	al_stats_add_gauge(out, "lazy_pages", __atomic_load_n(&v->lazy_nr, __ATOMIC_RELAXED));
}

/* ---- check ---- */

struct range {
	uintptr_t start, end; /* [start, end) */
	uint32_t kind;	      /* 0 free, 1 lazy, else the busy area's flags << 1 */
	const struct vmap_area *va;
};

static void sift(struct range *r, size_t i, size_t n)
{
	for (;;) {
		size_t m = i, l = 2 * i + 1, k = l + 1;
		struct range t;

		if (l < n && r[l].start > r[m].start)
			m = l;
		if (k < n && r[k].start > r[m].start)
			m = k;
		if (m == i)
			return;
		t = r[i];
		r[i] = r[m];
		r[m] = t;
		i = m;
	}
}

static void sort_ranges(struct range *r, size_t n)
{
	size_t i;
	struct range t;

	for (i = n / 2; i-- > 0;)
		sift(r, i, n);
	for (i = n; i-- > 1;) {
		t = r[0];
		r[0] = r[i];
		r[i] = t;
		sift(r, 0, i);
	}
}

#define VCHECK_FAIL(...)                                        \
	do {                                                    \
		snprintf(err, errlen, "vmalloc: " __VA_ARGS__); \
		ret = -EFAULT;                                  \
		goto out;                                       \
	} while (0)

static size_t count_nodes(const struct va_node *n)
{
	return n ? 1 + count_nodes(n->left) + count_nodes(n->right) : 0;
}

static void add_tree(struct range *r, size_t *k, const struct va_node *n, uint32_t kind)
{
	if (!n)
		return;
	add_tree(r, k, n->left, kind);
	r[*k].start = n->start;
	r[*k].end = n->end;
	r[*k].kind = kind ? va_of((struct va_node *)n)->flags << 1 : 0;
	r[*k].va = va_of((struct va_node *)n);
	(*k)++;
	add_tree(r, k, n->right, kind);
}

static int vm_idle_check(struct al_allocator *a, char *err, size_t errlen)
{
	struct vm *v = to_vm(a);
	size_t nfree = count_nodes(v->free_root), total = nfree, k = 0, i, len;
	uint64_t lazy = 0, held = 0, pfn;
	uintptr_t at = v->va_base, top = v->va_top;
	const struct vmap_area *va;
	struct range *r;
	unsigned n, j;
	int ret = 0;

	if (va_verify(v->free_root, v->va_base, v->va_base + v->va_size, UINT32_MAX)) {
		snprintf(err, errlen,
			 "vmalloc: the free tree is not ordered or its subtree_max "
			 "is wrong");
		return -EFAULT;
	}
	for (n = 0; n < v->nr_nodes; n++) {
		if (va_verify(v->nodes[n].busy, v->va_base, v->va_base + v->va_size, UINT32_MAX)) {
			snprintf(err, errlen, "vmalloc: busy tree %u is not ordered", n);
			return -EFAULT;
		}
		total += count_nodes(v->nodes[n].busy);
		for (va = v->nodes[n].lazy; va; va = va->next)
			total++;
	}
	len = (total + 1) * sizeof(*r);
	r = al_meta_alloc(len);
	if (!r) {
		snprintf(err, errlen, "vmalloc: no memory for the check");
		return -ENOMEM;
	}
	add_tree(r, &k, v->free_root, 0);
	for (n = 0; n < v->nr_nodes; n++) {
		size_t k0 = k;

		add_tree(r, &k, v->nodes[n].busy, 1);
		for (i = k0; i < k; i++)
			if (node_of(v, r[i].start) != &v->nodes[n])
				VCHECK_FAIL("busy area %#lx is in node %u's tree",
					    (unsigned long)r[i].start, n);
		for (va = v->nodes[n].lazy; va; va = va->next) {
			r[k].start = va->node.start;
			r[k].end = va->node.end;
			r[k].kind = 1;
			r[k].va = va;
			k++;
			lazy += va_size(&va->node) >> PAGE_SHIFT;
		}
	}
	for (i = 1; i < nfree; i++)
		if (r[i - 1].end >= r[i].start)
			VCHECK_FAIL("free ranges [%#lx, %#lx) and [%#lx, %#lx) touch or overlap "
				    "(not merged)",
				    (unsigned long)r[i - 1].start, (unsigned long)r[i - 1].end,
				    (unsigned long)r[i].start, (unsigned long)r[i].end);
	sort_ranges(r, k);
	for (i = 0; i < k; i++) {
		if (r[i].start != at)
			VCHECK_FAIL("%s at %#lx: the ranges do not tile the space (expected %#lx)",
				    r[i].start < at ? "overlap" : "gap", (unsigned long)r[i].start,
				    (unsigned long)at);
		at = r[i].end;
		va = r[i].va;
		if (r[i].kind == VA_VMALLOC << 1) {
			if (!va->nr_pages || !va->pages ||
			    ((size_t)va->nr_pages + 1) << PAGE_SHIFT > va_size(&va->node))
				VCHECK_FAIL("area %#lx: %u pages in %zu bytes",
					    (unsigned long)r[i].start, va->nr_pages,
					    va_size(&va->node));
			for (j = 0; j < va->nr_pages; j++)
				if (translate(v, r[i].start + ((uintptr_t)j << PAGE_SHIFT), &pfn) ||
				    pfn != va->pages[j])
					VCHECK_FAIL("area %#lx: page %u is not mapped to pfn %llu",
						    (unsigned long)r[i].start, j,
						    (unsigned long long)va->pages[j]);
			if (!translate(v, r[i].start + ((uintptr_t)va->nr_pages << PAGE_SHIFT),
				       &pfn))
				VCHECK_FAIL("area %#lx: its guard page is mapped",
					    (unsigned long)r[i].start);
			held += (uint64_t)va->nr_pages << PAGE_SHIFT;
		} else if (r[i].kind == VA_BLOCK << 1) {
			if (v->vb_index[(r[i].start - v->va_base) >> VMAP_BLOCK_SHIFT] != va ||
			    va->vb_free + va->vb_dirty > VMAP_BBMAP_BITS)
				VCHECK_FAIL("vmap block %#lx: not indexed, or free %u + dirty %u > "
					    "%u",
					    (unsigned long)r[i].start, va->vb_free, va->vb_dirty,
					    VMAP_BBMAP_BITS);
		} else if (r[i].kind <= 1) {
			uintptr_t x, end = r[i].end < top ? r[i].end : top;

			for (x = r[i].start; x < end; x += PAGE_SIZE)
				if (!translate(v, x, &pfn))
					VCHECK_FAIL("%s range [%#lx, %#lx): %#lx is still mapped",
						    r[i].kind ? "lazy" : "free",
						    (unsigned long)r[i].start,
						    (unsigned long)r[i].end, (unsigned long)x);
		}
	}
	if (at != v->va_base + v->va_size)
		VCHECK_FAIL("the ranges end at %#lx, the space at %#lx", (unsigned long)at,
			    (unsigned long)(v->va_base + v->va_size));
	if (lazy != __atomic_load_n(&v->lazy_nr, __ATOMIC_RELAXED))
		VCHECK_FAIL("lazy_nr is %llu, the lazy lists hold %llu pages",
			    (unsigned long long)v->lazy_nr, (unsigned long long)lazy);
	if ((int64_t)held != vm_held(v))
		VCHECK_FAIL("vmalloc areas map %llu bytes, counters say %lld",
			    (unsigned long long)held, (long long)vm_held(v));
out:
	al_meta_free(r, len);
	return ret;
}

/* ---- lifetime ---- */

/* The walk runs with the purge worker idle (a queued purge finishes first). */
static int vm_check(struct al_allocator *a, char *err, size_t errlen)
{
	purge_flush(to_vm(a));
	return vm_idle_check(a, err, errlen);
}

/* Stop the purge worker, then free what init made (also after a failed
 * init): a part not made is skipped. */
static void vmalloc_fini(struct al_allocator *a)
{
	struct vm *v = to_vm(a);
	struct chunk *ch, *next;

	purge_stop(v);
	for (ch = v->chunks; ch; ch = next) {
		next = ch->next;
		al_meta_free(ch, ch->len);
	}
	if (v->map)
		munmap(v->map, v->map_len);
	al_meta_free(v->pte, v->pte_len);
	al_meta_free(v->pmd, v->pmd_len);
	al_meta_free(v->vb_index, v->vb_index_len);
	al_meta_free(v->nodes, v->nodes_len);
	al_meta_free(v->cpus, v->cpus_len);
	al_counters_fini(&v->ctr);
}

static int vmalloc_check_params(const int64_t *params, char *err, size_t errlen)
{
	if (params[P_VA_SIZE] % VMAP_BLOCK_SIZE) {
		snprintf(err, errlen, "va_size=%lld: va_size must be a multiple of 4M",
			 (long long)params[P_VA_SIZE]);
		return -EINVAL;
	}
	return 0;
}

/*
 * Alignment of the range's base: the largest power of two within va_size, at
 * most 1 GiB. Any alignment an area may ask for within the range then falls
 * at the same offsets on every run, and the host reservation (va_size plus
 * this slack) stays within twice va_size, so a smaller va_size really needs
 * less address space (an address-space limit, ulimit -v, is met by shrinking
 * va_size).
 */
static size_t va_base_align(size_t va_size)
{
	size_t a = VA_BASE_ALIGN;

	while (a > va_size)
		a >>= 1;
	return a;
}

static int vmalloc_init(struct al_allocator *a, const int64_t *params)
{
	struct vm *v = to_vm(a);
	struct al_allocator *below = a->below;
	unsigned ncpu = a->ncpu;
	struct vmap_area *va;
	char why[160];
	unsigned i;
	void *m;

	if (!below || !al_pages_is(below) || vmalloc_check_params(params, why, sizeof(why)))
		return -EINVAL;
	v->pg = below;
	v->alloc_strategy = (unsigned)params[P_ALLOC];
	v->free_strategy = (unsigned)params[P_FREE];
	v->use_huge = params[P_USE_HUGE];
	v->arch = (unsigned)params[P_ARCH];
	v->bulk_max = (unsigned)params[P_BULK_MAX];
	v->lazy_max =
		params[P_LAZY_MAX] ? (uint64_t)params[P_LAZY_MAX] : al_fls64(ncpu) * LAZY_UNIT;
	v->va_size = (size_t)params[P_VA_SIZE];
	v->pte_len = (v->va_size >> PAGE_SHIFT) * sizeof(uint64_t);
	v->pmd_len = (v->va_size >> PMD_SHIFT) * sizeof(uint64_t);
	v->vb_index_len = (v->va_size >> VMAP_BLOCK_SHIFT) * sizeof(void *);
	v->nr_nodes = ncpu < MAX_NODES ? ncpu : MAX_NODES;
	v->nodes_len = v->nr_nodes * sizeof(struct vnode);
	v->nslots = NR_SLOTS(ncpu);
	v->cpus_len = v->nslots * sizeof(struct vcpu);
	/* No CPU left for the worker (a stack of AL_MAX_CPUS): purge inline. */
	v->purge_mode = v->nslots > ncpu ? (unsigned)params[P_PURGE] : PURGE_INLINE;
	if (al_counters_init_desc(&v->ctr, vm_counters, VMAL_NR, 0, v->nslots))
		return -ENOMEM;
	v->pte = al_meta_alloc(v->pte_len);
	v->pmd = al_meta_alloc(v->pmd_len);
	v->vb_index = al_meta_alloc(v->vb_index_len);
	v->nodes = al_meta_alloc(v->nodes_len);
	v->cpus = al_meta_alloc(v->cpus_len);
	v->map_len = v->va_size + va_base_align(v->va_size);
	m = mmap(NULL, v->map_len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	v->map = m == MAP_FAILED ? NULL : m;
	if (!v->pte || !v->pmd || !v->vb_index || !v->nodes || !v->cpus || !v->map)
		return -ENOMEM;
	v->va_base = align_up((uintptr_t)v->map, va_base_align(v->va_size));
	al_lock_init(&v->free_lock, (uint64_t)params[P_LOCK_BUDGET], params[P_LOCK_TIMING]);
	al_lock_count_in(&v->free_lock, &v->ctr, VMAL_va_lock_acquired);
	al_lock_init(&v->purge_lock, (uint64_t)params[P_LOCK_BUDGET], params[P_LOCK_TIMING]);
	for (i = 0; i < v->nr_nodes; i++) {
		al_lock_init(&v->nodes[i].busy_lock, (uint64_t)params[P_LOCK_BUDGET],
			     params[P_LOCK_TIMING]);
		al_lock_count_in(&v->nodes[i].busy_lock, &v->ctr, VMAL_busy_lock_acquired);
		al_lock_init(&v->nodes[i].lazy_lock, (uint64_t)params[P_LOCK_BUDGET],
			     params[P_LOCK_TIMING]);
	}
	va = record_get(v, 0);
	if (!va)
		return -ENOMEM;
	va->node.start = v->va_base;
	va->node.end = v->va_base + v->va_size;
	v->free_root = va_insert(NULL, &va->node);
	if (v->purge_mode == PURGE_WORKER && purge_start(v))
		return -ENOMEM;
	return 0;
}

/* name, type, default, min, max, choices, doc */
static const struct al_param_desc vmalloc_params[P_NR] = {
	[P_ALLOC] = { "alloc", AL_PARAM_ENUM, ALLOC_ORDER0, 0, 2, "order0,high_order,pcp_first",
		      "page population: bulk order-0 through the PCP; largest orders first "
		      "(split); PCP lists then buddy, high to low order" },
	[P_FREE] = { "free", AL_PARAM_ENUM, FREE_PER_PAGE, 0, 1, "per_page,bulk",
		     "vfree: every page through the PCP, or free_pages_bulk (contiguous runs as "
		     "aligned high-order blocks)" },
	[P_USE_HUGE] = { "use_huge", AL_PARAM_BOOL, 0, 0, 1, NULL,
			 "every vmalloc is vmalloc_huge (PMD from 2M; arm64: contiguous PTEs "
			 "from 64K)" },
	[P_ARCH] = { "arch", AL_PARAM_ENUM, ARCH_X86, 0, 1, "x86,arm64",
		     "page-table geometry: arm64 maps order-4 blocks with contiguous PTEs" },
	[P_LAZY_MAX] = { "lazy_max_pages", AL_PARAM_INT, 0, 0, 1ll << 30, NULL,
			 "purge lazily freed areas past this many pages; 0 = fls(CPUs) * 32M" },
	[P_VA_SIZE] = { "va_size", AL_PARAM_SIZE, 16ll << 30, 64 << 20, 1ll << 40, NULL,
			"virtual range for areas (a multiple of 4M; host memory touched only "
			"where written)" },
	[P_BULK_MAX] = { "bulk_max", AL_PARAM_INT, 100, 1, 1 << 20, NULL,
			 "pages per alloc_pages_bulk call (the kernel's 100)" },
	[P_LOCK_BUDGET] = { "lock_budget", AL_PARAM_NS, 1000000000, 0, 10000000000ll, NULL,
			    "how long a waiter spins on a vmalloc lock before the call fails" },
	[P_LOCK_TIMING] = { "lock_timing", AL_PARAM_BOOL, 0, 0, 1, NULL,
			    "measure lock hold times" },
	[P_PURGE] = { "purge", AL_PARAM_ENUM, PURGE_WORKER, 0, 1, "worker,inline",
		      "lazy purge + TLB flush: on a worker thread (drain_vmap_work), or in the "
		      "vfree that crosses lazy_max_pages" },
};

static size_t vmalloc_max_size_of(const int64_t *p)
{
	return (size_t)p[P_VA_SIZE] / 2;
}

AL_LAYER(vmalloc, struct vm, vmalloc_init, vmalloc_fini,
	 (.alloc = vmalloc_alloc, .free = vmalloc_free, .owns = vmalloc_owns,
	  .usable_size = vmalloc_usable_size, .drain = vmalloc_drain, .stats = vmalloc_stats,
	  .check = vm_check),
	 (.min_align = 4096,
	  .doc = "vmalloc/vfree over a pages layer: VA allocator, page table, order0/high_order/"
		 "pcp_first population, per_page/bulk free",
	  .features = AL_F_BACKEND | AL_F_NEEDS_PAGES | AL_F_OWNS | AL_F_USABLE | AL_F_VALIDATES |
		      AL_F_TASK_ONLY,
	  .max_size = 1ull << 39, .max_size_of = vmalloc_max_size_of, .nparams = P_NR,
	  .params = vmalloc_params, .counters = vm_counters, .ncounters = VMAL_NR,
	  .check_params = vmalloc_check_params))
