/* SPDX-License-Identifier: MIT */
/*
 * buddy: a model of the BPF libarena buddy allocator (reference §1).
 *
 * How it works
 * ------------
 * Memory comes in chunks of chunk_size (1 MiB by default) carved from one
 * al_arena reserved with alignment chunk_size, so a pointer's chunk is its
 * address rounded down and its index is (address & (chunk_size - 1)) / 16.
 * A chunk is 2^norders 16-byte items, norders = log2(chunk_size / 16); a
 * block of order o is 2^o items aligned to 2^o items, so the largest block
 * (order norders - 1) is half a chunk and every block has a buddy.
 *
 * Each chunk starts with its own metadata (41,096 B for 1 MiB, as libarena):
 *
 *   orders[items / 2]     4-bit order per item (even index: high nibble),
 *                         meaningful at block starts, free or allocated
 *   allocated[items / 8]  one bit per item, set exactly at allocated starts
 *   freelists[norders]    u64 head index per order, NIL (= items) if empty
 *   next                  the next (older) chunk
 *
 * The metadata is itself "allocated" by the greedy power-of-two
 * decomposition of §1.4d (order 11 @0, 9 @2048, 3 @2560, 0 @2568 for 1 MiB),
 * which leaves 13 free blocks, o0 @2569 up to o15 @32768. A free block keeps
 * a {prev_index, next_index} header at byte offset 8 (an overflow from the
 * block below hits poisoned bytes under ASan); lists are doubly linked, LIFO.
 *
 * alloc(size): order = log2(roundup_pow2(size)) - 4, at least 0. Under the
 * lock, first fit over chunks newest first: the smallest non-empty order
 * >= the request; split it keeping the low half, pushing each upper half at
 * the head of its list. If no chunk fits, grow one from the arena without
 * the lock (al_arena_grow is a CAS bump), initialise its metadata while it
 * is still private, then lock, link it at the head and allocate from it.
 *
 * free(p): under the lock, validate, clear the allocated bit, then merge
 * with buddy = idx ^ (1 << order) while the buddy is free and of the same
 * order (its start index is always a block start, so its nibble is exact).
 *
 * Bulk (dev tree, §1.10): one block of order + k is carved into 2^k objects,
 * each with its own nibble and allocated bit, so each is freed alone.
 *
 * Invariants (all verified by buddy_check())
 * ------------------------------------------
 *  - Blocks, walked by start from index 0 using their order nibbles, tile
 *    each chunk exactly; every start is aligned to its order.
 *  - A bit of allocated[] is set iff its index starts an allocated block, so
 *    a free is valid iff the bit is set (O(1)); a clear bit is classified as
 *    double free (a free block start) or "not a block start" by descending
 *    from the top order, where every aligned index on the way is a start.
 *  - Every free block is on the list of its order, exactly once, and no two
 *    free buddies of the same order exist (merges are eager).
 *  - Blocks below meta_items are metadata, allocated for ever, so nothing
 *    merges to a whole chunk.
 *  - bytes_held = sum of allocated block bytes outside the metadata.
 * Validation reads only metadata: a rejected free never writes the memory.
 *
 * Locking
 * -------
 * One global al_lock in arena mode (lock=arena: arena_spinlock_t as the
 * BPF header has it, see lock.c; lock=queued: with rqspinlock's deadlock
 * check) guards every chunk's metadata, the chunk list and the
 * linked[] bitmap. Acquisition can fail: alloc returns NULL (-ETIMEDOUT, or
 * -EBUSY under AL_NOSPIN), free returns the error and frees nothing. A
 * chunk grown while the lock then fails is not leaked: it goes on a
 * lock-free pending stack linked by the next allocation that misses.
 * Lock-free readers (usable_size, owns) use relaxed atomics on metadata
 * bytes and the linked[] bitmap (published with release under the lock);
 * the lock is a leaf: nothing else is taken while it is held.
 *
 * NMI context (the seed-000 series)
 * -------------------------------------------
 * At AL_CTX_NMI nothing may wait on the lock (the interrupted code on this
 * CPU may hold it). alloc and alloc_bulk return NULL at once (-EBUSY,
 * nmi_alloc_refused). free and free_bulk validate lock-free (relaxed reads
 * of the allocated bit, as usable_size) and push the block on a lock-free
 * stack (nmi_deferred, a Treiber push; the link is the block's first word,
 * a tag (address ^ BUDDY_DEFER_TAG) in its second word catches a second
 * NMI free of the same block before the drain): nmi_frees_deferred. The next
 * ordinary operation that takes the lock (alloc, free, bulk, drain) swaps
 * the whole stack out and frees it under the lock (deferred_drained). A
 * deferred block still counts in bytes_held until it is drained.
 *
 * Cost
 * ----
 * alloc: O(chunks x norders) list-head scan + O(norders) splits; free:
 * O(1) validation + O(norders) merges; all under the one lock, so CPUs
 * serialise on it. Every metadata access makes libarena's run-time checks
 * (see "checked metadata access" below): held against libarena's own
 * buddy.bpf.c compiled natively, they were the model's largest omission.
 * Metadata: 41,104 B per 1 MiB chunk (3.9%); internal fragmentation up to
 * 50% (power-of-two blocks). Counting: each call finds its per-CPU counters
 * block once; an allocation adds to its order's object slot and to
 * bytes_requested, a free to its order's slot (splits and merges when there
 * were any); the lock counts in the same block.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "alloclab/alloclab.h"

#include "../core/track.h"

#define BUDDY_MIN_SHIFT	 4 /* 16-byte items */
#define BUDDY_MIN_BYTES	 (1u << BUDDY_MIN_SHIFT)
#define BUDDY_HEADER_OFF 8	     /* free-block header offset (ASan granule 2) */
#define BUDDY_MIN_CHUNK	 (64u << 10) /* smallest chunk_size */
#define BUDDY_MAX_CHUNK	 (1u << 20)  /* largest chunk_size: 16 orders, 4-bit nibbles */
#define BUDDY_MAX_ORDERS 16	     /* orders in a 1 MiB chunk */
#define BUDDY_FILL_ALLOC 0xD0	     /* fill byte on alloc (fill=1), as mimalloc */
#define BUDDY_FILL_FREE	 0xDF	     /* fill byte on free (fill=1) */

/* Word 1 of a block an NMI deferred holds its address ^ this tag. */
#define BUDDY_DEFER_TAG 0x6e6d692d64656672ull

/* Free-block header, at byte BUDDY_HEADER_OFF of every free block. */
struct buddy_header {
	uint32_t prev_index; /* previous free block of the same order, or NIL */
	uint32_t next_index; /* next free block of the same order, or NIL */
};

_Static_assert(sizeof(struct buddy_header) == 8, "header must fit bytes 8..15 of a 16-B block");
_Static_assert(BUDDY_HEADER_OFF + sizeof(struct buddy_header) <= BUDDY_MIN_BYTES,
	       "header must fit the smallest block");

/*
 * The paths every object takes count in one block found once per call: the
 * objects allocated and freed per order go to the slots after the named
 * counters (al_ctr_block_acct: kept at every stats level, since bytes_held
 * and the leak check are made of them), and allocs, frees and their bytes
 * are reported from those slots, never counted.
 */
#define BUDDY_COUNTERS(C, D, P)                                                              \
	D(P, allocs, AL_CTR_KEY, "", "objects allocated (alloc and alloc_bulk)")             \
	D(P, frees, AL_CTR_KEY, "", "objects freed (free, free_bulk and drained NMI frees)") \
	C(P, alloc_bulk_calls, 0, "alloc_bulk calls")                                        \
	C(P, free_bulk_calls, 0, "free_bulk calls")                                          \
	C(P, bulk_objects, 0, "objects returned by alloc_bulk")                              \
	C(P, bulk_freed, 0, "objects freed by free_bulk")                                    \
	C(P, splits, 0, "blocks split in two")                                               \
	C(P, merges, 0, "buddy pairs merged on free")                                        \
	C(P, chunks, 0, "chunks linked into the allocator")                                  \
	C(P, chunks_deferred, 0, "chunks grown while the lock then failed (linked later)")   \
	C(P, chunks_relinked, 0, "deferred chunks linked by a later allocation")             \
	C(P, bytes_requested, 0, "bytes asked for by successful allocations")                \
	D(P, bytes_allocated, 0, "", "block bytes handed out")                               \
	D(P, bytes_freed, 0, "", "block bytes returned")                                     \
	C(P, invalid_frees, AL_CTR_KEY,                                                      \
	  "frees rejected: not an allocated block (double frees excluded)")                  \
	C(P, free_outside, 0, "invalid frees: outside every linked chunk")                   \
	C(P, free_misaligned, 0, "invalid frees: not 16-byte aligned")                       \
	C(P, free_metadata, 0, "invalid frees: inside a chunk's metadata")                   \
	C(P, free_not_block_start, 0, "invalid frees: not the start of a block")             \
	C(P, double_frees, AL_CTR_KEY, "frees rejected: the block is already free")          \
	C(P, enomem, AL_CTR_KEY, "allocations failed: arena exhausted")                      \
	C(P, einval, 0, "allocations rejected: size 0 or above the largest block")           \
	C(P, lock_failed_allocs, AL_CTR_KEY,                                                 \
	  "allocations that returned NULL because the lock failed")                          \
	C(P, lock_failed_frees, AL_CTR_KEY,                                                  \
	  "free/free_bulk calls that freed nothing because the lock failed")                 \
	C(P, nmi_alloc_refused, AL_CTR_KEY, "NMI allocations: NULL at once (-EBUSY)")        \
	C(P, nmi_frees_deferred, 0, "NMI frees pushed on the deferred list")                 \
	C(P, deferred_drained, 0, "NMI-deferred frees done by a later operation")            \
	C(P, metadata_faults, AL_CTR_KEY,                                                    \
	  "metadata checks that failed (libarena reports them through arena_stderr)")        \
	AL_LOCK_COUNTERS(C, P, lock, "the buddy lock")                                       \
	AL_LOCK_REASON_COUNTERS(C, P, lock, "the buddy lock")                                \
	D(P, chunks_committed, AL_CTR_GAUGE, "", "chunks the arena has committed")           \
	D(P, arena_bytes_committed, AL_CTR_GAUGE, "", "arena bytes committed (chunks x chunk_size)")

AL_COUNTERS_DEFINE(BUDDY_COUNTERS, BUD_, buddy_counters);

/* The per-order object slots after the named counters (al_ctr_block_acct). */
#define BUD_ALLOC_N(order) (BUD_NR + (order))
#define BUD_FREE_N(order)  (BUD_NR + BUDDY_MAX_ORDERS + (order))
#define BUD_EXTRA	   (2 * BUDDY_MAX_ORDERS)

enum {
	P_CHUNK_SIZE,
	P_ARENA_LIMIT,
	P_LOCK_BUDGET,
	P_LOCK_TIMING,
	P_FILL,
	P_POPULATE,
	P_LOCK,
	P_NR
};
enum { BUDDY_LOCK_ARENA, BUDDY_LOCK_QUEUED };

/* Why a free was rejected. */
enum buddy_reject { R_OUTSIDE, R_MISALIGNED, R_METADATA, R_NOT_START, R_DOUBLE };

/* One instance. Geometry fields are set at create and read-only afterwards. */
struct buddy {
	struct al_allocator base; /* must be first */
	struct al_lock lock;	  /* the one global lock (queued, time-budgeted) */
	uintptr_t first;	  /* newest linked chunk (head of the chunk list); lock */
	uintptr_t pending;	  /* grown but unlinked chunks, lock-free stack via next */
	uintptr_t nmi_deferred;	  /* blocks freed in NMI context: lock-free stack via word 0 */
	uint64_t nchunks;	  /* linked chunks; lock */
	uint64_t *linked;	  /* bitmap: chunk number n is linked; written under lock */
	size_t linked_len;	  /* bytes of linked[] */
	size_t max_chunks;	  /* arena_limit / chunk_size */
	struct al_arena arena;	  /* the reserved VA, aligned to chunk_size */
	size_t chunk_size;	  /* bytes per chunk, a power of two */
	size_t max_size;	  /* largest request: chunk_size / 2 */
	unsigned chunk_shift;	  /* log2(chunk_size) */
	unsigned norders;	  /* orders 0..norders-1 */
	uint32_t items;		  /* 16-B items per chunk; also the NIL index */
	uint32_t meta_items;	  /* items taken by the metadata reservation */
	struct al_index index;	  /* where usable sizes are read, by us and layers above */
	size_t alloc_off;	  /* byte offset of allocated[] in a chunk */
	size_t fl_off;		  /* byte offset of freelists[] */
	size_t next_off;	  /* byte offset of the next-chunk pointer */
	size_t meta_bytes;	  /* bytes of metadata (41,096 for 1 MiB) */
	bool fill;		  /* fill 0xD0 on alloc and 0xDF on free */
	uint8_t *scratch;	  /* check(): three bitmaps of items bits */
	size_t scratch_len;	  /* bytes of scratch */
	struct al_counters ctr;	  /* buddy_counters, then BUD_EXTRA slots */
};

static inline struct buddy *to_buddy(struct al_allocator *a)
{
	return (struct buddy *)a;
}

/* ---- in-chunk metadata accessors ---- */

/* Metadata bytes can be read by lock-free readers, so they are relaxed atomics. */
static inline unsigned get_order(uintptr_t ch, uint32_t idx)
{
	uint8_t v = __atomic_load_n((uint8_t *)ch + (idx >> 1), __ATOMIC_RELAXED);

	return (idx & 1) ? v & 0xf : v >> 4;
}

static inline void set_order(uintptr_t ch, uint32_t idx, unsigned order)
{
	uint8_t *p = (uint8_t *)ch + (idx >> 1);
	uint8_t v = __atomic_load_n(p, __ATOMIC_RELAXED);

	v = (idx & 1) ? (uint8_t)((v & 0xf0) | order) : (uint8_t)((v & 0x0f) | (order << 4));
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

static inline bool test_alloc(const struct buddy *b, uintptr_t ch, uint32_t idx)
{
	uint8_t v = __atomic_load_n((uint8_t *)ch + b->alloc_off + (idx >> 3), __ATOMIC_RELAXED);

	return (v >> (idx & 7)) & 1;
}

static inline void set_alloc(const struct buddy *b, uintptr_t ch, uint32_t idx, bool on)
{
	uint8_t *p = (uint8_t *)ch + b->alloc_off + (idx >> 3);
	uint8_t v = __atomic_load_n(p, __ATOMIC_RELAXED);

	v = on ? (uint8_t)(v | (1u << (idx & 7))) : (uint8_t)(v & ~(1u << (idx & 7)));
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

static inline uint64_t *freelists(const struct buddy *b, uintptr_t ch)
{
	return (uint64_t *)(ch + b->fl_off);
}

static inline uintptr_t *chunk_next(const struct buddy *b, uintptr_t ch)
{
	return (uintptr_t *)(ch + b->next_off);
}

static inline struct buddy_header *hdr(uintptr_t ch, uint32_t idx)
{
	return (struct buddy_header *)(ch + ((uintptr_t)idx << BUDDY_MIN_SHIFT) + BUDDY_HEADER_OFF);
}

static inline bool chunk_linked(const struct buddy *b, size_t n)
{
	return (__atomic_load_n(&b->linked[n / 64], __ATOMIC_ACQUIRE) >> (n % 64)) & 1;
}

static inline unsigned size_to_order(size_t size)
{
	return size <= BUDDY_MIN_BYTES ? 0 : al_fls64(size - 1) - BUDDY_MIN_SHIFT;
}

/* ---- checked metadata access (libarena's accessors) ---- */

/*
 * libarena checks its metadata at run time on every access, in every build:
 * idx_set_allocated refuses an index past the chunk and a bit already in the
 * wanted state, idx_set_order an order or index out of range, idx_to_header
 * an index whose block is allocated, and each failure is reported through
 * arena_stderr. The model makes the same checks at the same places (a
 * failure is counted in metadata_faults; the operation goes on, as the
 * library's callers do with the NULL it returns) and keeps libarena's two
 * accessors that are global functions out of line, as BPF calls them.
 */
static al_noinline al_cold void metadata_fault(struct buddy *b, const struct al_ctx *c)
{
	if (c)
		al_count(&b->ctr, c, BUD_metadata_faults, 1);
}

/* libarena's idx_set_allocated: -EINVAL when idx is out of range or the
 * bit is already `on` (the free path's double-free test). */
static al_noinline int idx_set_alloc(const struct buddy *b, uintptr_t ch, uint32_t idx, bool on,
				     bool sim)
{
	if (al_unlikely(idx >= b->items || test_alloc(b, ch, idx) == on))
		return -EINVAL;
	if (sim)
		al_sim_touch((uint8_t *)ch + b->alloc_off + (idx >> 3), AL_SIM_RMW);
	set_alloc(b, ch, idx, on);
	return 0;
}

/* libarena's idx_set_order. */
static al_noinline int idx_set_order(const struct buddy *b, uintptr_t ch, uint32_t idx,
				     unsigned order, bool sim)
{
	if (al_unlikely(order >= b->norders || idx >= b->items))
		return -EINVAL;
	if (sim)
		al_sim_touch((uint8_t *)ch + (idx >> 1), AL_SIM_RMW);
	set_order(ch, idx, order);
	return 0;
}

/*
 * Simulated CPUs (sim.h) charge the lines of the metadata, headers and list
 * heads a CPU touches: the paths below take a `sim` that is a constant in
 * each of their two instances (free_locked, chunk_alloc_locked), so the
 * measured build's instance carries no test for it.
 */
static al_always_inline void sim_touch(bool sim, const void *p, int access)
{
	if (sim)
		al_sim_touch(p, access);
}

static al_always_inline unsigned get_order_s(uintptr_t ch, uint32_t idx, bool sim)
{
	sim_touch(sim, (uint8_t *)ch + (idx >> 1), AL_SIM_LOAD);
	return get_order(ch, idx);
}

static al_always_inline bool test_alloc_s(const struct buddy *b, uintptr_t ch, uint32_t idx,
					  bool sim)
{
	sim_touch(sim, (uint8_t *)ch + b->alloc_off + (idx >> 3), AL_SIM_LOAD);
	return test_alloc(b, ch, idx);
}

static al_always_inline void set_order_chk(struct buddy *b, const struct al_ctx *c, uintptr_t ch,
					   uint32_t idx, unsigned order, bool sim)
{
	if (al_unlikely(idx_set_order(b, ch, idx, order, sim)))
		metadata_fault(b, c);
}

/* libarena's idx_to_header: a header is only read in a free block.
 * access: what the caller does with the header (-1: nothing, its address
 * only, as the poisoning and the head test use it). */
static al_always_inline struct buddy_header *
hdr_chk(struct buddy *b, const struct al_ctx *c, uintptr_t ch, uint32_t idx, bool sim, int access)
{
	if (al_unlikely(idx >= b->items || test_alloc_s(b, ch, idx, sim)))
		metadata_fault(b, c);
	if (access >= 0)
		sim_touch(sim, hdr(ch, idx), access);
	return hdr(ch, idx);
}

/* ---- free lists (lock held) ---- */

/* A block on the list of `order` is a free block of that order; as
 * libarena's header_add_freelist, the push writes the block's order. */
static al_always_inline void list_push(struct buddy *b, const struct al_ctx *c, uintptr_t ch,
				       uint32_t idx, unsigned order, bool sim)
{
	uint64_t *fl = freelists(b, ch);
	uint32_t head = (uint32_t)fl[order];
	struct buddy_header *h = hdr_chk(b, c, ch, idx, sim, AL_SIM_STORE);

	sim_touch(sim, &fl[order], AL_SIM_RMW);
	set_order_chk(b, c, ch, idx, order, sim);
	al_assert(head == b->items || head < b->items);
	al_assert_expensive(head != idx);
	al_track_unpoison(h, sizeof(*h));
	h->prev_index = b->items;
	h->next_index = head;
	if (head != b->items)
		hdr_chk(b, c, ch, head, sim, AL_SIM_STORE)->prev_index = idx;
	fl[order] = idx;
}

static al_always_inline void push_locked(struct buddy *b, const struct al_ctx *c, uintptr_t ch,
					 uint32_t idx, unsigned order, bool sim)
{
	al_lock_assert_locked(&b->lock);
	list_push(b, c, ch, idx, order, sim);
}

/* libarena's header_remove_freelist: the head test reads the head's header,
 * and the removed header is cleared. */
static al_always_inline void unlink_locked(struct buddy *b, const struct al_ctx *c, uintptr_t ch,
					   uint32_t idx, unsigned order, bool sim)
{
	struct buddy_header *h = hdr_chk(b, c, ch, idx, sim, AL_SIM_RMW);
	uint32_t prev = h->prev_index, next = h->next_index;
	uint64_t *fl = freelists(b, ch);

	al_lock_assert_locked(&b->lock);
	al_assert(get_order(ch, idx) == order); /* the allocated bit: hdr_chk */
	al_assert(prev < b->items || (prev == b->items && fl[order] == idx));
	al_assert(next <= b->items && next != idx);
	al_assert(prev == b->items || hdr(ch, prev)->next_index == idx);
	al_assert(next == b->items || hdr(ch, next)->prev_index == idx);
	if (prev != b->items)
		hdr_chk(b, c, ch, prev, sim, AL_SIM_STORE)->next_index = next;
	if (next != b->items)
		hdr_chk(b, c, ch, next, sim, AL_SIM_STORE)->prev_index = prev;
	sim_touch(sim, &fl[order], AL_SIM_LOAD);
	if (hdr_chk(b, c, ch, (uint32_t)fl[order], sim, -1) == h)
		fl[order] = next;
	h->prev_index = h->next_index = b->items;
	al_track_poison(h, sizeof(*h));
}

/*
 * Take a block of order `order + k` from one chunk and carve it into 2^k
 * allocated blocks of `order`. Returns its index, or NIL when the chunk has
 * no block large enough; *splits gets the number of splits.
 */
static al_always_inline uint32_t chunk_alloc_(struct buddy *b, const struct al_ctx *c, uintptr_t ch,
					      unsigned order, unsigned k, unsigned *splits,
					      bool sim)
{
	uint64_t *fl = freelists(b, ch);
	unsigned top = order + k, o, i;
	uint32_t idx, j;

	al_lock_assert_locked(&b->lock);
	al_assert(top < b->norders);
	for (o = top; o < b->norders; o++) {
		sim_touch(sim, &fl[o], AL_SIM_LOAD);
		if (fl[o] != b->items)
			break;
	}
	if (o == b->norders)
		return b->items;
	idx = (uint32_t)fl[o];
	unlink_locked(b, c, ch, idx, o, sim);
	for (j = 0; j < (1u << k); j++) {
		set_order_chk(b, c, ch, idx + (j << order), order, sim);
		if (al_unlikely(idx_set_alloc(b, ch, idx + (j << order), true, sim)))
			metadata_fault(b, c);
	}
	for (i = o; i-- > top;)
		push_locked(b, c, ch, idx + (1u << i), i, sim);
	*splits = o - top;
	return idx;
}

static al_noinline uint32_t chunk_alloc_sim(struct buddy *b, const struct al_ctx *c, uintptr_t ch,
					    unsigned order, unsigned k, unsigned *splits)
{
	return chunk_alloc_(b, c, ch, order, k, splits, true);
}

static inline uint32_t chunk_alloc_locked(struct buddy *b, const struct al_ctx *c, uintptr_t ch,
					  unsigned order, unsigned k, unsigned *splits)
{
	al_lock_assert_locked(&b->lock);
	if (al_unlikely(__atomic_load_n(&al_sim_lines, __ATOMIC_RELAXED)))
		return chunk_alloc_sim(b, c, ch, order, k, splits);
	return chunk_alloc_(b, c, ch, order, k, splits, false);
}

/* ---- chunks ---- */

/*
 * Initialise a chunk's metadata while it is still private to the caller:
 * every list NIL, then reserve the metadata by the greedy power-of-two
 * decomposition of §1.4d, pushing the buddies it leaves free.
 */
static void chunk_init(struct buddy *b, uintptr_t ch)
{
	size_t left = b->meta_bytes;
	unsigned max_order = b->norders, order, o, p;
	uint32_t idx = 0;

	al_track_poison(ch, b->chunk_size);
	al_track_unpoison(ch, b->meta_bytes);
	for (o = 0; o < b->norders; o++)
		freelists(b, ch)[o] = b->items;
	*chunk_next(b, ch) = 0;
	while (left) {
		p = al_fls64(left) - 1;
		if (p >= BUDDY_MIN_SHIFT) {
			order = p - BUDDY_MIN_SHIFT;
			left -= (size_t)1 << p;
		} else {
			order = 0;
			left = 0;
		}
		set_order(ch, idx, order);
		set_alloc(b, ch, idx, true);
		for (o = left ? order + 1 : order; o < max_order; o++)
			list_push(b, NULL, ch, idx + (1u << o), o, false); /* private */
		idx += 1u << order;
		max_order = order;
	}
}

/* Link a chunk at the head: under the lock, or before the buddy is shared. */
static void chunk_link(struct buddy *b, const struct al_ctx *c, uintptr_t ch)
{
	size_t n = (ch - b->arena.base) >> b->chunk_shift;

	al_assert(!(ch & (b->chunk_size - 1)) && !chunk_linked(b, n));
	*chunk_next(b, ch) = b->first;
	b->first = ch;
	b->nchunks++;
	/* Release: a lock-free reader that sees the bit sees the metadata. */
	__atomic_fetch_or(&b->linked[n / 64], 1ull << (n % 64), __ATOMIC_RELEASE);
	al_count(&b->ctr, c, BUD_chunks, 1);
}

static void chunk_link_locked(struct buddy *b, const struct al_ctx *c, uintptr_t ch)
{
	al_lock_assert_held(&b->lock, c);
	chunk_link(b, c, ch);
}

/* Link chunks grown by allocators whose lock acquisition failed. */
static al_noinline al_cold uintptr_t link_pending_locked(struct buddy *b, const struct al_ctx *c)
{
	uintptr_t ch = __atomic_exchange_n(&b->pending, 0, __ATOMIC_ACQUIRE), next;

	al_lock_assert_held(&b->lock, c);
	for (; ch; ch = next) {
		next = *chunk_next(b, ch);
		chunk_link_locked(b, c, ch);
		al_count(&b->ctr, c, BUD_chunks_relinked, 1);
	}
	return b->first;
}

static inline int buddy_lock(struct buddy *b, const struct al_ctx *c, unsigned flags)
{
	if (al_unlikely(flags & AL_NOSPIN))
		return al_lock_tryacquire(&b->lock, c);
	return al_lock_acquire(&b->lock, c);
}

static al_noinline al_cold uintptr_t take_fail(struct buddy *b, struct al_ctx *c, int err,
					       unsigned ctr)
{
	c->err = err;
	al_count(&b->ctr, c, ctr, 1);
	return 0;
}

/*
 * Slow path: no linked chunk has a block of order + k. Grow a chunk from the
 * arena without the lock, initialise it privately, then lock, link it at the
 * head and allocate from it. If the lock fails the chunk is kept on the
 * pending stack for a later allocation.
 */
static al_noinline uintptr_t take_grow(struct buddy *b, struct al_ctx *c, unsigned order,
				       unsigned k, unsigned flags)
{
	uintptr_t ch, head;
	unsigned splits = 0;
	uint32_t idx;
	int ret;

	ch = (uintptr_t)al_arena_grow(&b->arena, b->chunk_size);
	if (!ch)
		return take_fail(b, c, -ENOMEM, BUD_enomem);
	chunk_init(b, ch);
	ret = buddy_lock(b, c, flags);
	if (ret) {
		head = __atomic_load_n(&b->pending, __ATOMIC_RELAXED);
		do
			*chunk_next(b, ch) = head;
		while (!__atomic_compare_exchange_n(&b->pending, &head, ch, true, __ATOMIC_RELEASE,
						    __ATOMIC_RELAXED));
		al_count(&b->ctr, c, BUD_chunks_deferred, 1);
		return take_fail(b, c, ret, BUD_lock_failed_allocs);
	}
	chunk_link_locked(b, c, ch);
	idx = chunk_alloc_locked(b, c, ch, order, k, &splits); /* a fresh chunk always fits */
	al_lock_release(&b->lock, c);
	al_count(&b->ctr, c, BUD_splits, splits);
	return ch + ((uintptr_t)idx << BUDDY_MIN_SHIFT);
}

static int free_locked(struct buddy *b, const struct al_ctx *c, uint64_t *blk, uintptr_t p);

/* Free, under the lock, every block an NMI deferred. */
static al_noinline al_cold void drain_deferred_locked(struct buddy *b, const struct al_ctx *c)
{
	uintptr_t p = __atomic_exchange_n(&b->nmi_deferred, 0, __ATOMIC_ACQUIRE), next;
	uint64_t *acct = al_ctr_block_acct(&b->ctr, c), *blk = al_ctr_block(&b->ctr, c);
	uint64_t n = 0;
	int ret;

	al_lock_assert_held(&b->lock, c);
	for (; p; p = next) {
		next = __atomic_load_n((uintptr_t *)p, __ATOMIC_RELAXED);
		__atomic_store_n((uint64_t *)p + 1, 0, __ATOMIC_RELAXED); /* the tag */
		ret = free_locked(b, c, blk, p);
		if (ret < 0)
			continue;
		n++;
		al_ctr_add(acct, BUD_FREE_N(ret), 1);
	}
	al_ctr_add(blk, BUD_deferred_drained, n);
}

/* Call with the lock held: the next ordinary operation drains NMI frees. */
static inline void drain_deferred(struct buddy *b, const struct al_ctx *c)
{
	if (al_unlikely(__atomic_load_n(&b->nmi_deferred, __ATOMIC_RELAXED)))
		drain_deferred_locked(b, c);
}

/*
 * Allocate a block of order + k carved into 2^k objects of `order`: first
 * fit over the chunks, newest first. Returns its address, or 0 with c->err.
 * blk: the caller's counters block (al_ctr_block).
 */
static inline uintptr_t buddy_take(struct buddy *b, struct al_ctx *c, uint64_t *blk, unsigned order,
				   unsigned k, unsigned flags)
{
	unsigned splits = 0;
	uint32_t idx = b->items;
	uintptr_t ch;
	int ret;

	ret = buddy_lock(b, c, flags);
	if (al_unlikely(ret))
		return take_fail(b, c, ret, BUD_lock_failed_allocs);
	drain_deferred(b, c);
	for (ch = b->first; ch; ch = *chunk_next(b, ch)) {
		idx = chunk_alloc_locked(b, c, ch, order, k, &splits);
		if (idx != b->items)
			break;
	}
	if (al_unlikely(!ch) && __atomic_load_n(&b->pending, __ATOMIC_RELAXED)) {
		ch = link_pending_locked(b, c);
		idx = chunk_alloc_locked(b, c, ch, order, k, &splits);
	}
	al_lock_release(&b->lock, c);
	if (al_unlikely(!ch))
		return take_grow(b, c, order, k, flags);
	if (splits)
		al_ctr_add(blk, BUD_splits, splits);
	return ch + ((uintptr_t)idx << BUDDY_MIN_SHIFT);
}

/* Poison the block, then expose (and fill or zero) exactly `size` bytes. */
static inline void object_prepare(const struct buddy *b, uintptr_t p, size_t size, unsigned order,
				  unsigned flags)
{
	al_track_poison(p, (size_t)BUDDY_MIN_BYTES << order);
	al_track_unpoison(p, size);
	if (flags & AL_ZERO)
		memset((void *)p, 0, size);
	else if (b->fill)
		memset((void *)p, BUDDY_FILL_ALLOC, size);
}

static al_noinline al_cold void *alloc_einval(struct buddy *b, struct al_ctx *c)
{
	c->err = -EINVAL;
	al_count(&b->ctr, c, BUD_einval, 1);
	return NULL;
}

/* NMI context: never wait on the lock (the interrupted code may hold it). */
static al_noinline al_cold void *alloc_nmi_refused(struct buddy *b, struct al_ctx *c)
{
	c->err = -EBUSY;
	al_count(&b->ctr, c, BUD_nmi_alloc_refused, 1);
	return NULL;
}

static void *buddy_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct buddy *b = to_buddy(a);
	uint64_t *blk;
	unsigned order;
	uintptr_t p;

	if (al_unlikely(c->level == AL_CTX_NMI))
		return alloc_nmi_refused(b, c);
	if (al_unlikely(size - 1 >= b->max_size))
		return alloc_einval(b, c);
	order = size_to_order(size);
	blk = al_ctr_block(&b->ctr, c);
	p = buddy_take(b, c, blk, order, 0, flags);
	if (al_unlikely(!p))
		return NULL;
	object_prepare(b, p, size, order, flags);
	al_ctr_add(al_ctr_block_acct(&b->ctr, c), BUD_ALLOC_N(order), 1);
	al_ctr_add(blk, BUD_bytes_requested, size);
	return (void *)p;
}

static int buddy_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
			    void **out, unsigned flags)
{
	struct buddy *b = to_buddy(a);
	uint64_t *blk = al_ctr_block(&b->ctr, c);
	unsigned order, k, j, cnt;
	size_t bs;
	uintptr_t p;

	al_ctr_add(blk, BUD_alloc_bulk_calls, 1);
	if (al_unlikely(c->level == AL_CTX_NMI)) {
		alloc_nmi_refused(b, c);
		return 0;
	}
	if (al_unlikely(size - 1 >= b->max_size || !n)) {
		alloc_einval(b, c);
		return 0;
	}
	order = size_to_order(size);
	k = al_fls64(n) - 1;
	if (order + k >= b->norders)
		k = b->norders - 1 - order;
	p = buddy_take(b, c, blk, order, k, flags);
	if (al_unlikely(!p))
		return 0;
	cnt = 1u << k;
	bs = (size_t)BUDDY_MIN_BYTES << order;
	for (j = 0; j < cnt; j++) {
		out[j] = (void *)(p + j * bs);
		object_prepare(b, p + j * bs, size, order, flags);
	}
	al_ctr_add(al_ctr_block_acct(&b->ctr, c), BUD_ALLOC_N(order), cnt);
	al_ctr_add(blk, BUD_bulk_objects, cnt);
	al_ctr_add(blk, BUD_bytes_requested, (uint64_t)size * cnt);
	return (int)cnt;
}

/* ---- free ---- */

/*
 * A clear allocated bit: find the block containing idx by descending from
 * the top order. Both halves of a chunk are block starts, and if the
 * aligned block at s of order o is not a single block then it is split, so
 * s (aligned to o - 1) starts a block again: each nibble read is exact.
 */
static uint32_t find_block(const struct buddy *b, uintptr_t ch, uint32_t idx)
{
	unsigned o = b->norders - 1;
	uint32_t s;

	for (;; o--) {
		s = idx & ~((1u << o) - 1);
		if (get_order(ch, s) >= o || !o)
			return s;
	}
}

static al_noinline al_cold int free_reject(struct buddy *b, const struct al_ctx *c,
					   enum buddy_reject why)
{
	static const unsigned ctr[] = {
		[R_OUTSIDE] = BUD_free_outside,
		[R_MISALIGNED] = BUD_free_misaligned,
		[R_METADATA] = BUD_free_metadata,
		[R_NOT_START] = BUD_free_not_block_start,
	};

	if (why == R_DOUBLE) {
		al_count(&b->ctr, c, BUD_double_frees, 1);
	} else {
		al_count(&b->ctr, c, BUD_invalid_frees, 1);
		al_count(&b->ctr, c, ctr[why], 1);
	}
	return -EINVAL;
}

#if AL_DEBUG >= 3
static int check_chunk(struct buddy *b, uintptr_t ch, unsigned cn, uint64_t *held, char *err,
		       size_t errlen);

/* The full walk of one chunk (AL_DEBUG >= 3 asserts it after every free). */
static inline bool chunk_valid(struct buddy *b, uintptr_t ch)
{
	uint64_t held = 0;
	char err[160];

	return !check_chunk(b, ch, 0, &held, err, sizeof(err));
}
#endif

/*
 * Validate and free one pointer. Returns the freed block's order, or
 * -EINVAL (counted) with nothing written. blk: the caller's counters block.
 */
static al_always_inline int free_locked_(struct buddy *b, const struct al_ctx *c, uint64_t *blk,
					 uintptr_t p, bool sim)
{
	uintptr_t off = p - b->arena.base, ch;
	unsigned order, o, merges = 0;
	uint32_t idx, bd;
	size_t n;

	al_lock_assert_held(&b->lock, c);
	if (al_unlikely(off >= b->arena.limit))
		return free_reject(b, c, R_OUTSIDE);
	if (al_unlikely(p & (BUDDY_MIN_BYTES - 1)))
		return free_reject(b, c, R_MISALIGNED);
	n = off >> b->chunk_shift;
	if (al_unlikely(!chunk_linked(b, n)))
		return free_reject(b, c, R_OUTSIDE);
	ch = p & ~(uintptr_t)(b->chunk_size - 1);
	idx = (uint32_t)((p - ch) >> BUDDY_MIN_SHIFT);
	if (al_unlikely(idx < b->meta_items))
		return free_reject(b, c, R_METADATA);
	/* libarena's idx_set_allocated(false) is the double-free test. */
	if (al_unlikely(idx_set_alloc(b, ch, idx, false, sim)))
		return free_reject(b, c, find_block(b, ch, idx) == idx ? R_DOUBLE : R_NOT_START);

	o = order = get_order_s(ch, idx, sim);
	(void)hdr_chk(b, c, ch, idx, sim, -1);
	al_track_unpoison(p, (size_t)BUDDY_MIN_BYTES << order);
	if (b->fill)
		memset((void *)p, BUDDY_FILL_FREE, (size_t)BUDDY_MIN_BYTES << order);
	al_track_poison(p, (size_t)BUDDY_MIN_BYTES << order);
	while (o + 1 < b->norders) {
		bd = idx ^ (1u << o);
		if (test_alloc_s(b, ch, bd, sim) || get_order_s(ch, bd, sim) != o)
			break;
		unlink_locked(b, c, ch, bd, o, sim);
		/* libarena writes the dropped (right) buddy's order, then reads
		 * its header to poison it. */
		set_order_chk(b, c, ch, idx | bd, o, sim);
		(void)hdr_chk(b, c, ch, idx | bd, sim, -1);
		idx &= bd;
		o++;
		merges++;
	}
	set_order_chk(b, c, ch, idx, o, sim);
	push_locked(b, c, ch, idx, o, sim);
	al_assert_walk(chunk_valid(b, ch));
	if (merges)
		al_ctr_add(blk, BUD_merges, merges);
	return (int)order;
}

static al_noinline int free_locked_sim(struct buddy *b, const struct al_ctx *c, uint64_t *blk,
				       uintptr_t p)
{
	return free_locked_(b, c, blk, p, true);
}

static int free_locked(struct buddy *b, const struct al_ctx *c, uint64_t *blk, uintptr_t p)
{
	al_lock_assert_held(&b->lock, c);
	if (al_unlikely(__atomic_load_n(&al_sim_lines, __ATOMIC_RELAXED)))
		return free_locked_sim(b, c, blk, p);
	return free_locked_(b, c, blk, p, false);
}

/*
 * NMI context: validate lock-free (the allocated bit, as usable_size reads
 * it), tag the block so a second NMI free of it is caught, and push it on
 * the deferred stack for the next operation that holds the lock.
 */
static al_noinline int free_nmi(struct buddy *b, const struct al_ctx *c, uintptr_t p)
{
	uintptr_t off = p - b->arena.base, ch, head;
	uint64_t *w = (uint64_t *)p, tag;
	uint32_t idx;

	if (al_unlikely(off >= b->arena.limit))
		return free_reject(b, c, R_OUTSIDE);
	if (al_unlikely(p & (BUDDY_MIN_BYTES - 1)))
		return free_reject(b, c, R_MISALIGNED);
	if (al_unlikely(!chunk_linked(b, off >> b->chunk_shift)))
		return free_reject(b, c, R_OUTSIDE);
	ch = p & ~(uintptr_t)(b->chunk_size - 1);
	idx = (uint32_t)((p - ch) >> BUDDY_MIN_SHIFT);
	if (al_unlikely(idx < b->meta_items))
		return free_reject(b, c, R_METADATA);
	if (al_unlikely(!test_alloc(b, ch, idx)))
		return free_reject(b, c, find_block(b, ch, idx) == idx ? R_DOUBLE : R_NOT_START);
	al_track_unpoison(p, BUDDY_MIN_BYTES);
	tag = __atomic_load_n(&w[1], __ATOMIC_RELAXED);
	if (al_unlikely(tag == (p ^ BUDDY_DEFER_TAG)) ||
	    !__atomic_compare_exchange_n(&w[1], &tag, p ^ BUDDY_DEFER_TAG, false, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return free_reject(b, c, R_DOUBLE); /* already deferred */
	head = __atomic_load_n(&b->nmi_deferred, __ATOMIC_RELAXED);
	do
		__atomic_store_n((uintptr_t *)p, head, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(&b->nmi_deferred, &head, p, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED));
	al_count(&b->ctr, c, BUD_nmi_frees_deferred, 1);
	return 0;
}

static al_noinline al_cold int free_lock_failed(struct buddy *b, const struct al_ctx *c, int err)
{
	al_count(&b->ctr, c, BUD_lock_failed_frees, 1);
	return err;
}

static int buddy_free(struct al_allocator *a, struct al_ctx *c, void *ptr)
{
	struct buddy *b = to_buddy(a);
	int ret;

	if (!ptr)
		return 0;
	if (al_unlikely(c->level == AL_CTX_NMI))
		return free_nmi(b, c, (uintptr_t)ptr);
	ret = al_lock_acquire(&b->lock, c);
	if (al_unlikely(ret))
		return free_lock_failed(b, c, ret);
	drain_deferred(b, c);
	ret = free_locked(b, c, al_ctr_block(&b->ctr, c), (uintptr_t)ptr);
	al_lock_release(&b->lock, c);
	if (al_unlikely(ret < 0))
		return ret;
	al_ctr_add(al_ctr_block_acct(&b->ctr, c), BUD_FREE_N(ret), 1);
	return 0;
}

/* Every entry is validated as free() does, in order, under one lock hold:
 * a repeated entry is already free when it is reached, so it is refused
 * like any invalid one (counted, untouched) and the rest are freed. */
static int buddy_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n)
{
	struct buddy *b = to_buddy(a);
	uint64_t *acct = al_ctr_block_acct(&b->ctr, c), *blk = al_ctr_block(&b->ctr, c);
	unsigned i, freed = 0, refused = 0;
	int ret;

	al_ctr_add(blk, BUD_free_bulk_calls, 1);
	if (!n)
		return 0;
	if (al_unlikely(c->level == AL_CTX_NMI)) {
		for (i = 0; i < n; i++)
			if (ptrs[i] && free_nmi(b, c, (uintptr_t)ptrs[i]))
				refused++;
		goto out;
	}
	ret = al_lock_acquire(&b->lock, c);
	if (al_unlikely(ret))
		return free_lock_failed(b, c, ret);
	drain_deferred(b, c);
	for (i = 0; i < n; i++) {
		if (!ptrs[i])
			continue;
		ret = free_locked(b, c, blk, (uintptr_t)ptrs[i]);
		if (ret < 0) {
			refused++;
			continue;
		}
		freed++;
		al_ctr_add(acct, BUD_FREE_N(ret), 1);
	}
	al_lock_release(&b->lock, c);
	al_ctr_add(blk, BUD_bulk_freed, freed);
out:
	if (al_unlikely(refused))
		c->err = -EINVAL;
	return (int)(n - refused);
}

/* ---- queries ---- */

static bool buddy_owns(struct al_allocator *a, const void *ptr)
{
	return al_arena_contains(&to_buddy(a)->arena, ptr);
}

/* Lock-free: exact for a block the caller owns (its start nibble cannot
 * change). The same inline read the layers above make (index.h). */
static size_t buddy_usable_size(struct al_allocator *a, const void *ptr)
{
	return al_index_usable(&to_buddy(a)->index, ptr);
}

static const struct al_index *buddy_index(struct al_allocator *a)
{
	return &to_buddy(a)->index;
}

static void buddy_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct buddy *b = to_buddy(a);

	(void)scope; /* no caches: only the blocks NMIs deferred are not in the free lists */
	if (c->level == AL_CTX_NMI || !__atomic_load_n(&b->nmi_deferred, __ATOMIC_RELAXED))
		return;
	if (al_lock_acquire(&b->lock, c))
		return;
	drain_deferred_locked(b, c);
	al_lock_release(&b->lock, c);
}

/* Sum of a per-order slot array: objects and block bytes. */
static void sum_orders(const struct buddy *b, unsigned first, uint64_t *n, uint64_t *bytes)
{
	unsigned o;

	*n = *bytes = 0;
	for (o = 0; o < b->norders; o++) {
		uint64_t v = al_counters_sum(&b->ctr, first + o);

		*n += v;
		*bytes += v << (o + BUDDY_MIN_SHIFT);
	}
}

/* Block bytes allocated outside the metadata, at every stats level. */
static int64_t bytes_held(const struct buddy *b)
{
	uint64_t n, in, out;

	sum_orders(b, BUD_ALLOC_N(0), &n, &in);
	sum_orders(b, BUD_FREE_N(0), &n, &out);
	return (int64_t)(in - out);
}

static void buddy_stats(struct al_allocator *a, struct al_stats *out)
{
	struct buddy *b = to_buddy(a);
	uint64_t allocs, frees, in, gone;

	out->layer = "buddy";
	sum_orders(b, BUD_ALLOC_N(0), &allocs, &in);
	sum_orders(b, BUD_FREE_N(0), &frees, &gone);
	out->bytes_held = (int64_t)(in - gone);
	if (!al_counters_on(&b->ctr))
		return;
	al_stats_add(out, "allocs", allocs);
	al_stats_add(out, "frees", frees);
	al_stats_add(out, "bytes_allocated", in);
	al_stats_add(out, "bytes_freed", gone);
	al_counters_report(&b->ctr, out);
	al_stats_add_gauge(out, "chunks_committed",
			   __atomic_load_n(&b->arena.commits, __ATOMIC_RELAXED));
	al_stats_add_gauge(out, "arena_bytes_committed",
			   __atomic_load_n(&b->arena.committed, __ATOMIC_RELAXED));
}

/* ---- check ---- */

#define CHECK_FAIL(...)                                       \
	do {                                                  \
		snprintf(err, errlen, "buddy: " __VA_ARGS__); \
		return -EFAULT;                               \
	} while (0)

static inline bool bit_test(const uint8_t *m, uint32_t i)
{
	return (m[i >> 3] >> (i & 7)) & 1;
}

static inline void bit_set(uint8_t *m, uint32_t i)
{
	m[i >> 3] |= (uint8_t)(1u << (i & 7));
}

/* Verify one chunk; adds its allocated bytes (outside the metadata) to *held. */
/* Walk the blocks of a chunk by start: they tile it. Marks block starts in
 * start[] and free ones in freeb[], counts free blocks per order in nfree[]
 * and adds allocated bytes (outside the metadata) to *held. */
static int chunk_tiles(const struct buddy *b, uintptr_t ch, unsigned cn, uint8_t *start,
		       uint8_t *freeb, uint64_t *nfree, uint64_t *held, char *err, size_t errlen)
{
	uint32_t idx, pfree = b->items;
	unsigned o, po = 0;

	for (idx = 0; idx < b->items; idx += 1u << o) {
		o = get_order(ch, idx);
		if (o >= b->norders)
			CHECK_FAIL("chunk %u: block %u has order %u >= %u", cn, idx, o, b->norders);
		if (idx & ((1u << o) - 1))
			CHECK_FAIL("chunk %u: block %u is not aligned to its order %u", cn, idx, o);
		if (idx + (1u << o) > b->items)
			CHECK_FAIL("chunk %u: block %u of order %u runs past the chunk", cn, idx,
				   o);
		if (idx < b->meta_items && idx + (1u << o) > b->meta_items)
			CHECK_FAIL("chunk %u: block %u of order %u straddles the metadata end %u",
				   cn, idx, o, b->meta_items);
		bit_set(start, idx);
		if (test_alloc(b, ch, idx)) {
			if (idx >= b->meta_items)
				*held += (uint64_t)BUDDY_MIN_BYTES << o;
			pfree = b->items;
		} else {
			if (idx < b->meta_items)
				CHECK_FAIL("chunk %u: metadata block %u is not allocated", cn, idx);
			/* Eager merging: a free upper buddy follows its lower half directly. */
			if (pfree != b->items && po == o && (pfree ^ (1u << o)) == idx &&
			    o + 1 < b->norders)
				CHECK_FAIL("chunk %u: free buddies %u and %u of order %u were not "
					   "merged",
					   cn, pfree, idx, o);
			bit_set(freeb, idx);
			nfree[o]++;
			pfree = idx;
			po = o;
		}
	}
	return 0;
}

/* Allocated bits only at block starts (quiescent: plain word loads). */
static int chunk_alloc_bits(const struct buddy *b, uintptr_t ch, unsigned cn, const uint8_t *start,
			    char *err, size_t errlen)
{
	const uint8_t *alloc = (const uint8_t *)ch + b->alloc_off;
	size_t i, mlen = b->items / 8;

	for (i = 0; i < mlen; i += sizeof(uint64_t)) {
		uint64_t aw, sw;

		memcpy(&aw, alloc + i, sizeof(aw));
		memcpy(&sw, start + i, sizeof(sw));
		if (aw & ~sw)
			CHECK_FAIL("chunk %u: allocated bit set at %zu, which is not a block start",
				   cn, i * 8 + (size_t)__builtin_ctzll(aw & ~sw));
	}
	return 0;
}

/* Every list: well linked, members are free starts of its order, counts match. */
static int chunk_lists(const struct buddy *b, uintptr_t ch, unsigned cn, const uint8_t *start,
		       const uint8_t *freeb, uint8_t *seen, const uint64_t *nfree, char *err,
		       size_t errlen)
{
	const uint64_t *fl = freelists(b, ch);
	uint32_t prev, node;
	unsigned o;
	size_t cnt;

	for (o = 0; o < b->norders; o++) {
		prev = b->items;
		cnt = 0;
		for (node = (uint32_t)fl[o]; node != b->items; node = hdr(ch, node)->next_index) {
			if (node >= b->items)
				CHECK_FAIL("chunk %u: list %u: index %u out of range", cn, o, node);
			if (!bit_test(start, node))
				CHECK_FAIL("chunk %u: list %u: %u is not a block start", cn, o,
					   node);
			if (!bit_test(freeb, node))
				CHECK_FAIL("chunk %u: list %u: block %u has its allocated bit set",
					   cn, o, node);
			if (get_order(ch, node) != o)
				CHECK_FAIL("chunk %u: list %u: block %u has order nibble %u", cn, o,
					   node, get_order(ch, node));
			if (bit_test(seen, node))
				CHECK_FAIL("chunk %u: list %u: block %u linked twice (cycle?)", cn,
					   o, node);
			bit_set(seen, node);
			if (hdr(ch, node)->prev_index != prev)
				CHECK_FAIL("chunk %u: list %u: block %u has prev %u, expected %u",
					   cn, o, node, hdr(ch, node)->prev_index, prev);
			prev = node;
			cnt++;
		}
		if (cnt != nfree[o])
			CHECK_FAIL(
				"chunk %u: list %u has %zu blocks, the chunk has %llu free of that "
				"order",
				cn, o, cnt, (unsigned long long)nfree[o]);
	}
	return 0;
}

static int check_chunk(struct buddy *b, uintptr_t ch, unsigned cn, uint64_t *held, char *err,
		       size_t errlen)
{
	size_t mlen = b->items / 8;
	uint8_t *start = b->scratch, *freeb = start + mlen, *seen = freeb + mlen;
	uint64_t nfree[BUDDY_MAX_ORDERS] = { 0 };
	int ret;

	memset(b->scratch, 0, b->scratch_len);
	ret = chunk_tiles(b, ch, cn, start, freeb, nfree, held, err, errlen);
	if (!ret)
		ret = chunk_alloc_bits(b, ch, cn, start, err, errlen);
	if (!ret)
		ret = chunk_lists(b, ch, cn, start, freeb, seen, nfree, err, errlen);
	return ret;
}

static int buddy_check(struct al_allocator *a, char *err, size_t errlen)
{
	struct buddy *b = to_buddy(a);
	uint64_t held = 0, n = 0;
	uintptr_t ch;
	int ret;

	for (ch = b->first; ch; ch = *chunk_next(b, ch), n++) {
		if (n >= b->max_chunks)
			CHECK_FAIL("chunk list longer than the arena holds (cycle?)");
		if (ch < b->arena.base || ch - b->arena.base >= b->arena.limit ||
		    (ch & (b->chunk_size - 1)))
			CHECK_FAIL("chunk %llu at %#lx is not an aligned chunk of the arena",
				   (unsigned long long)n, (unsigned long)ch);
		if (!chunk_linked(b, (ch - b->arena.base) >> b->chunk_shift))
			CHECK_FAIL("chunk %llu at %#lx is on the list but not marked linked",
				   (unsigned long long)n, (unsigned long)ch);
		ret = check_chunk(b, ch, (unsigned)n, &held, err, errlen);
		if (ret)
			return ret;
	}
	if (n != b->nchunks)
		CHECK_FAIL("%llu chunks on the list, %llu linked", (unsigned long long)n,
			   (unsigned long long)b->nchunks);
	if ((int64_t)held != bytes_held(b))
		CHECK_FAIL("allocated blocks hold %llu bytes, counters say bytes_held %lld",
			   (unsigned long long)held, (long long)bytes_held(b));
	return 0;
}

/* ---- lifetime ---- */

/* Free what init made; a part not made yet is skipped. */
static void buddy_fini(struct al_allocator *a)
{
	struct buddy *b = to_buddy(a);

	/* The shadow outlives the mapping: leave nothing poisoned for the next user. */
	al_track_unpoison(b->arena.base, __atomic_load_n(&b->arena.used, __ATOMIC_RELAXED));
	al_arena_destroy(&b->arena);
	al_counters_fini(&b->ctr);
	al_meta_free(b->scratch, b->scratch_len);
	al_meta_free(b->linked, b->linked_len);
}

static int buddy_fork_lock(struct al_allocator *a, struct al_ctx *c)
{
	return al_lock_acquire(&((struct buddy *)a)->lock, c);
}

static void buddy_fork_unlock(struct al_allocator *a, struct al_ctx *c)
{
	al_lock_release(&((struct buddy *)a)->lock, c);
}

static int buddy_check_params(const int64_t *params, char *err, size_t errlen)
{
	int64_t cs = params[P_CHUNK_SIZE], limit = params[P_ARENA_LIMIT];

	if (cs < BUDDY_MIN_CHUNK || cs > BUDDY_MAX_CHUNK || (cs & (cs - 1))) {
		snprintf(err, errlen,
			 "chunk_size=%lld: chunk_size must be a power of two between 64K and 1M",
			 (long long)cs);
		return -EINVAL;
	}
	if (limit < cs) {
		snprintf(err, errlen,
			 "arena_limit=%lld is below chunk_size=%lld: it must hold "
			 "at least one chunk",
			 (long long)limit, (long long)cs);
		return -EINVAL;
	}
	return 0;
}

static int buddy_init(struct al_allocator *a, const int64_t *params)
{
	struct buddy *b = to_buddy(a);
	struct al_allocator *below = a->below;
	unsigned ncpu = a->ncpu;
	struct al_ctx c0;
	uintptr_t ch;
	char why[160];
	int ret;

	if (below || buddy_check_params(params, why, sizeof(why)))
		return -EINVAL;
	b->chunk_size = (size_t)params[P_CHUNK_SIZE];
	b->chunk_shift = al_fls64(b->chunk_size) - 1;
	b->norders = b->chunk_shift - BUDDY_MIN_SHIFT;
	b->items = (uint32_t)(b->chunk_size >> BUDDY_MIN_SHIFT);
	b->max_size = b->chunk_size / 2;
	b->alloc_off = b->items / 2;
	b->fl_off = b->alloc_off + b->items / 8;
	b->next_off = b->fl_off + sizeof(uint64_t) * b->norders;
	b->meta_bytes = b->next_off + sizeof(uintptr_t);
	b->fill = params[P_FILL];
	b->max_chunks = (size_t)params[P_ARENA_LIMIT] >> b->chunk_shift;
	b->linked_len = (b->max_chunks + 63) / 64 * sizeof(uint64_t);
	b->scratch_len = 3 * (size_t)b->items / 8;
	al_lock_init(&b->lock, (uint64_t)params[P_LOCK_BUDGET], params[P_LOCK_TIMING]);
	if (params[P_LOCK] == BUDDY_LOCK_ARENA)
		al_lock_set_arena(&b->lock);
	b->linked = al_meta_alloc(b->linked_len);
	b->scratch = al_meta_alloc(b->scratch_len);
	if (!b->linked || !b->scratch)
		return -ENOMEM;
	ret = al_counters_init_desc(&b->ctr, buddy_counters, BUD_NR, BUD_EXTRA, ncpu);
	if (ret)
		return ret;
	al_lock_count_in(&b->lock, &b->ctr, BUD_lock_acquired);
	al_lock_count_reasons_in(&b->lock, BUD_lock_timeouts);
	ret = al_arena_init(&b->arena, b->max_chunks << b->chunk_shift, b->chunk_size,
			    params[P_POPULATE]);
	if (ret)
		return ret;
	/* buddy_init: the first chunk is there from the start (§1.4.1). */
	ch = (uintptr_t)al_arena_grow(&b->arena, b->chunk_size);
	if (!ch)
		return -ENOMEM;
	chunk_init(b, ch);
	b->meta_items = 0;
	while (b->meta_items < b->items && test_alloc(b, ch, b->meta_items))
		b->meta_items += 1u << get_order(ch, b->meta_items);
	b->index = (struct al_index){ .base = b->arena.base,
				      .limit = b->arena.limit,
				      .linked = b->linked,
				      .alloc_off = b->alloc_off,
				      .chunk_shift = b->chunk_shift,
				      .min_shift = BUDDY_MIN_SHIFT,
				      .meta_items = b->meta_items };
	al_ctx_init(&c0, 0);
	chunk_link(b, &c0, ch); /* nothing runs concurrently yet: no lock */
	return 0;
}

/* name, type, default, min, max, choices, doc */
static const struct al_param_desc buddy_params[P_NR] = {
	[P_CHUNK_SIZE] = { "chunk_size", AL_PARAM_SIZE, 1 << 20, 64 << 10, 1 << 20, NULL,
			   "bytes per chunk, a power of two; the largest block is half a chunk" },
	[P_ARENA_LIMIT] = { "arena_limit", AL_PARAM_SIZE, 1ll << 30, 1 << 20, 64ll << 30, NULL,
			    "reserved VA for chunks; allocations fail with ENOMEM once it is "
			    "used" },
	[P_LOCK_BUDGET] = { "lock_budget", AL_PARAM_NS, 250000000, 0, 10000000000ll, NULL,
			    "how long a waiter spins on the lock before the call fails "
			    "(ETIMEDOUT)" },
	[P_LOCK_TIMING] = { "lock_timing", AL_PARAM_BOOL, 1, 0, 1, NULL,
			    "measure lock hold time (lock_hold_ns, at stats=full)" },
	[P_FILL] = { "fill", AL_PARAM_BOOL, 0, 0, 1, NULL,
		     "debug: fill 0xD0 on alloc and 0xDF on free, as mimalloc" },
	[P_POPULATE] = { "populate", AL_PARAM_BOOL, 0, 0, 1, NULL,
			 "prefault chunks when they are grown, as the kernel allocates arena "
			 "pages" },
	[P_LOCK] = { "lock", AL_PARAM_ENUM, BUDDY_LOCK_ARENA, 0, 1, "arena,queued",
		     "arena: arena_spinlock_t as the BPF header has it (no deadlock check, "
		     "4 queue nodes per CPU); queued: fails at once when its own CPU holds it "
		     "(EDEADLK)" },
};

static size_t buddy_max_size_of(const int64_t *p)
{
	return (size_t)p[P_CHUNK_SIZE] / 2;
}

AL_LAYER(buddy, struct buddy, buddy_init, buddy_fini,
	 (.alloc = buddy_alloc, .free = buddy_free, .alloc_bulk = buddy_alloc_bulk,
	  .free_bulk = buddy_free_bulk, .owns = buddy_owns, .usable_size = buddy_usable_size,
	  .index = buddy_index, .drain = buddy_drain, .stats = buddy_stats, .check = buddy_check,
	  .fork_lock = buddy_fork_lock, .fork_unlock = buddy_fork_unlock),
	 (.min_align = 16,
	  .doc = "BPF libarena buddy allocator: 1 MiB chunks, 16 orders, one lock that can fail",
	  .features = AL_F_BULK | AL_F_OWNS | AL_F_USABLE | AL_F_VALIDATES | AL_F_STATS_ANYTIME |
		      AL_F_NMI_SAFE | AL_F_POW2_CLASSES,
	  .max_size = BUDDY_MAX_CHUNK / 2, .max_size_of = buddy_max_size_of, .nparams = P_NR,
	  .params = buddy_params, .check_params = buddy_check_params, .counters = buddy_counters,
	  .ncounters = BUD_NR))
