/* SPDX-License-Identifier: MIT */
/*
 * bind.c: the entry points of a compiled libarena tree (alr.h), compiled
 * with the tree's own headers, so that a tree whose buddy API or chunk
 * layout differs from what this file calls fails to compile (loudly)
 * instead of being called wrongly.
 *
 * Each entry sets the calling thread's context, CPU and loop budget
 * (alr_self), then calls the tree on its global `buddy` (common.bpf.c).
 *
 * Block sizes: with ALR_LIBARENA_LAYOUT (the Python driver defines it when
 * the tree's buddy.h has libarena's struct buddy_chunk), the size of an
 * allocated block is read from its chunk's order nibble, as buddy_free
 * reads it; otherwise the tree must define
 *   size_t buddy_usable_size(struct buddy __arena *buddy, void __arena *p);
 * The largest request: BUDDY_MAX_ALLOC_BYTES where the tree's buddy.h
 * defines it (a macro), else libarena's largest block.
 * Bulk: a tree may define
 *   int buddy_alloc_bulk(struct buddy __arena *buddy, size_t size,
 *                        void __arena **ptrs, u32 n);   (objects stored)
 *   int buddy_free_bulk(struct buddy __arena *buddy, void __arena **ptrs,
 *                       u32 n);                          (0 or -errno)
 * (weak references: absent, the layer loops over alloc and free).
 */
#include <libarena/common.h>
#include <libarena/buddy.h>

#include "alr.h"

extern struct buddy __arena buddy;

/* The largest request: the tree's BUDDY_MAX_ALLOC_BYTES if it defines one,
 * else libarena's largest block (half a chunk), else unknown. */
#if defined(BUDDY_MAX_ALLOC_BYTES)
#define ALR_TREE_MAX_SIZE ((size_t)(BUDDY_MAX_ALLOC_BYTES))
#elif ALR_LIBARENA_LAYOUT
#define ALR_TREE_MAX_SIZE ((size_t)BUDDY_MIN_ALLOC_BYTES << (BUDDY_CHUNK_NUM_ORDERS - 1))
#else
#define ALR_TREE_MAX_SIZE 0
#endif

int buddy_alloc_bulk(struct buddy __arena *buddy, size_t size, void __arena **ptrs, u32 n)
	__attribute__((weak, visibility("hidden")));
int buddy_free_bulk(struct buddy __arena *buddy, void __arena **ptrs, u32 n)
	__attribute__((weak, visibility("hidden")));
#if !ALR_LIBARENA_LAYOUT
size_t buddy_usable_size(struct buddy __arena *buddy, void __arena *p) ALR_HIDDEN;
#endif

extern const struct alr_prog alr_progs[] ALR_HIDDEN;
extern const unsigned alr_nprogs ALR_HIDDEN;
extern struct alr_env alr_env ALR_HIDDEN;
ALR_HIDDEN int alr_arena_init(void);
ALR_HIDDEN void alr_arena_fini(void);
ALR_HIDDEN uintptr_t alr_arena_lo(void);
ALR_HIDDEN size_t alr_arena_span(void);
ALR_HIDDEN uint64_t alr_stat(unsigned ev);
ALR_HIDDEN const char *alr_last_msg(void);
ALR_HIDDEN void alr_pages_lock(int take);
ALR_HIDDEN unsigned alr_msg(unsigned i, const char **text, uint64_t *count);

static inline void enter(const void *ctx, unsigned cpu)
{
	alr_self.ctx = ctx;
	alr_self.cpu = cpu;
	alr_self.budget = ALR_LOOP_BUDGET;
}

static int e_init(void)
{
	enter(NULL, 0);
	return buddy_init(&buddy);
}

static int e_destroy(void)
{
	enter(NULL, 0);
	return buddy_destroy(&buddy);
}

static size_t e_usable(const void *p);

static void *e_alloc(const void *ctx, unsigned cpu, size_t size, size_t *usable)
{
	void *p;

	enter(ctx, cpu);
	p = buddy_alloc(&buddy, size);
	if (p)
		*usable = e_usable(p);
	return p;
}

static int e_free(const void *ctx, unsigned cpu, void *p, size_t *usable)
{
	enter(ctx, cpu);
	*usable = e_usable(p);
	return buddy_free(&buddy, p);
}

static int e_alloc_bulk(const void *ctx, unsigned cpu, size_t size, void **ptrs, unsigned n)
{
	enter(ctx, cpu);
	return buddy_alloc_bulk(&buddy, size, ptrs, n);
}

static int e_free_bulk(const void *ctx, unsigned cpu, void **ptrs, unsigned n)
{
	enter(ctx, cpu);
	return buddy_free_bulk(&buddy, ptrs, n);
}

static size_t e_usable(const void *p)
{
#if ALR_LIBARENA_LAYOUT
	uintptr_t a = (uintptr_t)p;
	struct buddy_chunk *chunk = (struct buddy_chunk *)(a & ~(uintptr_t)BUDDY_CHUNK_OFFSET_MASK);
	u64 idx = (a & BUDDY_CHUNK_OFFSET_MASK) / BUDDY_MIN_ALLOC_BYTES;
	u8 nib = chunk->orders[idx / 2];

	return (size_t)BUDDY_MIN_ALLOC_BYTES << ((idx & 1) ? (nib & 0xf) : (nib >> 4));
#else
	return buddy_usable_size(&buddy, (void *)p);
#endif
}

static int e_run(const void *ctx, unsigned cpu, int (*fn)(void))
{
	enter(ctx, cpu);
	return fn();
}

static void e_unbind(void)
{
	alr_arena_fini();
}

__attribute__((visibility("default"))) int alr_bind(const struct alr_env *env,
						    struct alr_entry *out)
{
	int ret;

	if (env && env->abi != ALR_ABI)
		return -EINVAL;
	if (env)
		alr_env = *env;
	ret = alr_arena_init();
	if (ret)
		return ret;
	*out = (struct alr_entry){
		.abi = ALR_ABI,
		.init = e_init,
		.destroy = e_destroy,
		.alloc = e_alloc,
		.free = e_free,
		.alloc_bulk = buddy_alloc_bulk ? e_alloc_bulk : NULL,
		.free_bulk = buddy_free_bulk ? e_free_bulk : NULL,
		.usable = e_usable,
		.run = e_run,
		.max_size = ALR_TREE_MAX_SIZE,
		.base = alr_arena_lo(),
		.span = alr_arena_span(),
		.progs = alr_progs,
		.nprogs = alr_nprogs,
		.stat = alr_stat,
		.last_msg = alr_last_msg,
		.unbind = e_unbind,
		.pages_lock = alr_pages_lock,
		.msg = alr_msg,
	};
	return 0;
}
