/* SPDX-License-Identifier: MIT */
/*
 * alloclab index: a buddy backend's object index, read inline by the layers
 * above it.
 *
 * libarena's per-CPU cache finds a freed object's order by reading the
 * buddy's index (idx_get_order) directly, not through a call. The buddy
 * layer publishes where its index lies (struct al_index, through the
 * optional al_ops.index); a cache above it (percpu) reads an object's
 * usable size with al_index_usable() instead of an indirect usable_size()
 * call per object, and a pass-through layer (transfer) hands its backend's
 * index up. The buddy's own usable_size() is this same function, so the two
 * cannot disagree.
 *
 * Layout read (the buddy's design header has the whole of it): an arena of
 * chunks of 1 << chunk_shift bytes, aligned to their size; linked[] has a
 * bit per chunk in use; a chunk begins with one order nibble per 16-byte
 * item (high nibble first) and holds an allocated bit per item at alloc_off;
 * items below meta_items are the metadata itself.
 *
 * The struct is filled when the backend is created and never changes, so a
 * layer may keep a copy beside its other hot fields (percpu does).
 * Concurrency: lock-free relaxed reads, exact for a block the caller owns
 * (its start nibble and bit cannot change under it), as usable_size().
 * Cost: a range check, three loads (the linked bit, the allocated bit, the
 * nibble) and no call.
 */
#ifndef ALLOCLAB_INDEX_H
#define ALLOCLAB_INDEX_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

struct al_index {
	uintptr_t base;		/* arena start, aligned to the chunk size; [base, base + limit)
				 * is the arena's whole reservation, of which owns()
				 * answers for the part in use: no other allocator
				 * hands out memory in the rest */
	size_t limit;		/* arena bytes */
	const uint64_t *linked; /* bit n: chunk n is in use (acquire loads) */
	size_t alloc_off;	/* byte offset of the allocated bits in a chunk */
	unsigned chunk_shift;	/* log2 of the chunk size */
	unsigned min_shift;	/* log2 of the item size (16 B) */
	uint32_t meta_items;	/* items taken by each chunk's metadata */
};

/* log2 of the usable size of the live block starting at ptr (the block's
 * order plus min_shift), or -1 when ptr is not one (outside the arena,
 * misaligned, metadata, free, not a block start). A cache above files the
 * block by this shift, with no size to take the logarithm of again.
 * min_shift is ix->min_shift: a layer that checked it once against a
 * constant passes the constant, and the masks and shifts fold. */
static inline __attribute__((always_inline)) int
al_index_shift_items(const struct al_index *ix, const void *ptr, unsigned min_shift)
{
	uintptr_t p = (uintptr_t)ptr, off = p - ix->base, ch;
	size_t n = off >> ix->chunk_shift;
	uint32_t idx;
	uint8_t v;

	if (off >= ix->limit || (p & (((uintptr_t)1 << min_shift) - 1)) ||
	    !((__atomic_load_n(&ix->linked[n / 64], __ATOMIC_ACQUIRE) >> (n % 64)) & 1))
		return -1;
	ch = p & ~(((uintptr_t)1 << ix->chunk_shift) - 1);
	idx = (uint32_t)((p - ch) >> min_shift);
	if (idx < ix->meta_items)
		return -1;
	v = __atomic_load_n((const uint8_t *)ch + ix->alloc_off + (idx >> 3), __ATOMIC_RELAXED);
	if (!((v >> (idx & 7)) & 1))
		return -1;
	v = __atomic_load_n((const uint8_t *)ch + (idx >> 1), __ATOMIC_RELAXED);
	return (int)min_shift + ((idx & 1) ? v & 0xf : v >> 4);
}

static inline int al_index_shift(const struct al_index *ix, const void *ptr)
{
	return al_index_shift_items(ix, ptr, ix->min_shift);
}

/* The usable size of the live block starting at ptr, or 0 when ptr is not
 * one. */
static inline size_t al_index_usable(const struct al_index *ix, const void *ptr)
{
	int shift = al_index_shift(ix, ptr);

	return shift < 0 ? 0 : (size_t)1 << shift;
}

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_INDEX_H */
