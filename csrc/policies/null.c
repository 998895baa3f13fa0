/* SPDX-License-Identifier: MIT */
/*
 * null: the harness floor. Every allocation returns the calling CPU's
 * preallocated block (so the workload still touches memory, in its own
 * cache lines), and free does nothing. No counters, no checks: whatever a
 * run measures on it is the cost of the engine, the workload loop and the
 * indirect calls, to subtract from every other policy's numbers.
 *
 * Two live allocations on one CPU are the same memory, so it declares
 * AL_F_SHARED_BLOCKS: caches that keep freed objects refuse to stack over
 * it, and workloads that link, check or share objects (AL_WL_DISTINCT)
 * refuse it; it serves workloads that only touch what they allocate.
 */
#include <errno.h>

#include "alloclab/alloclab.h"

#define NULL_BLOCK (512u << 10) /* the largest request, as the buddy's */

struct null_layer {
	struct al_allocator base; /* must be first */
	char *blocks;		  /* ncpu blocks of NULL_BLOCK bytes */
	size_t len;		  /* mapping length */
};

static void *null_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	(void)size;
	(void)flags;
	return ((struct null_layer *)a)->blocks + (size_t)c->cpu * NULL_BLOCK;
}

static int null_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	(void)a;
	(void)c;
	(void)p;
	return 0;
}

static size_t null_usable_size(struct al_allocator *a, const void *p)
{
	(void)a;
	(void)p;
	return NULL_BLOCK;
}

static void null_stats(struct al_allocator *a, struct al_stats *out)
{
	(void)a;
	out->bytes_held = 0;
}

/* The calling CPUs' blocks; a bottom layer, nothing below it. */
static int null_init(struct al_allocator *a, const int64_t *params)
{
	struct null_layer *n = (struct null_layer *)a;

	(void)params;
	if (a->below)
		return -EINVAL;
	n->len = (size_t)a->ncpu * NULL_BLOCK;
	n->blocks = al_meta_alloc(n->len); /* lazily faulted */
	return n->blocks ? 0 : -ENOMEM;
}

/* Free what init made; a part not made yet is skipped. */
static void null_fini(struct al_allocator *a)
{
	struct null_layer *n = (struct null_layer *)a;

	al_meta_free(n->blocks, n->len);
}

AL_LAYER(null, struct null_layer, null_init, null_fini,
	 (.alloc = null_alloc, .free = null_free, .usable_size = null_usable_size,
	  .stats = null_stats),
	 (.min_align = 4096,
	  .doc = "no-op allocator returning a preallocated block: the harness floor",
	  .features = AL_F_USABLE | AL_F_STATS_ANYTIME | AL_F_SHARED_BLOCKS,
	  .max_size = NULL_BLOCK))
