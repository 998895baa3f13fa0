/* SPDX-License-Identifier: MIT */
/* bpf_tree: a power-of-two size-class allocator with the libarena buddy API
 * (struct buddy, buddy_init/destroy/alloc/free), for alloclab's tests. */
#pragma once

enum pool_consts {
	POOL_MIN_SHIFT = 4,	    /* smallest object: 16 B */
	POOL_CLASSES = 9,	    /* 16 B .. 4 KiB */
	POOL_SLAB_BYTES = 64 << 10, /* carved for one class at a time */
	POOL_SLABS = 1024,	    /* slabs in the window: 64 MiB */
	POOL_OFFSET = 1 << 28,	    /* the window's arena offset */
	POOL_NIL = 0,		    /* end of a free list */
};

/* The largest request (alloclab's layer reads it). */
#define BUDDY_MAX_ALLOC_BYTES (1UL << (POOL_MIN_SHIFT + POOL_CLASSES - 1))

struct buddy {
	u64 free_head[POOL_CLASSES]; /* free objects per class, linked by first word */
	u32 slabs_used;		     /* slabs taken from the window */
	u8 slab_class[POOL_SLABS];   /* the class of each slab taken */
	u64 live;		     /* objects handed out and not freed */
	arena_spinlock_t lock;	     /* guards everything above */
	bool reserved;		     /* the window is reserved */
};

#ifdef __BPF__
int buddy_init(struct buddy __arena *buddy);
int buddy_destroy(struct buddy __arena *buddy);
void __arena *buddy_alloc(struct buddy __arena *buddy, size_t size);
int buddy_free(struct buddy __arena *buddy, void __arena *ptr);
size_t buddy_usable_size(struct buddy __arena *buddy, void __arena *ptr);
int buddy_alloc_bulk(struct buddy __arena *buddy, size_t size, void __arena **ptrs, u32 n);
int buddy_free_bulk(struct buddy __arena *buddy, void __arena **ptrs, u32 n);
#endif
