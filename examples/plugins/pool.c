/* SPDX-License-Identifier: MIT */
/*
 * pool: a bottom layer of 256-byte slots. New slots are bumped (one atomic
 * add) from a 16 MiB arena committed at create; a freed slot goes on the
 * freeing CPU's LIFO list, linked through its first word, which that CPU's
 * next allocation takes first. Each list has one user (its CPU), so nothing
 * takes a lock, and no layer may free into it on another CPU's behalf (a
 * free with AL_NOCPU from a helper thread). An example plugin, written from
 * docs/plugins.md.
 */
#include <errno.h>
#include <string.h>
#include <alloclab/alloclab.h>

#define SLOT	   256
#define POOL_BYTES (16u << 20)

struct pool {
	struct al_allocator base; /* must be first */
	struct al_arena arena;	  /* the slots */
	size_t next, live;	  /* bytes bumped so far; slots handed out */
	struct {
		void *head; /* this CPU's freed slots */
	} cpu[AL_MAX_CPUS] __attribute__((aligned(AL_CACHELINE)));
};

static void *pool_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct pool *pl = (struct pool *)a;
	char *p = pl->cpu[c->cpu].head;
	size_t off;

	if (p) {
		pl->cpu[c->cpu].head = *(void **)p;
	} else {
		off = __atomic_fetch_add(&pl->next, SLOT, __ATOMIC_RELAXED);
		if (size > SLOT || off >= POOL_BYTES) {
			c->err = size > SLOT ? -EINVAL : -ENOMEM;
			return NULL;
		}
		p = (char *)pl->arena.base + off;
	}
	__atomic_fetch_add(&pl->live, 1, __ATOMIC_RELAXED);
	return flags & AL_ZERO ? memset(p, 0, size) : p;
}

static size_t pool_usable_size(struct al_allocator *a, const void *p)
{
	struct pool *pl = (struct pool *)a;

	return al_arena_contains(&pl->arena, p) && (uintptr_t)p % SLOT == 0 ? SLOT : 0;
}

static int pool_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct pool *pl = (struct pool *)a;

	if (p && !pool_usable_size(a, p))
		return -EINVAL;
	if (p) {
		*(void **)p = pl->cpu[c->cpu].head;
		pl->cpu[c->cpu].head = p;
		__atomic_fetch_sub(&pl->live, 1, __ATOMIC_RELAXED);
	}
	return 0;
}

static void pool_stats(struct al_allocator *a, struct al_stats *out)
{
	out->bytes_held =
		(int64_t)(__atomic_load_n(&((struct pool *)a)->live, __ATOMIC_RELAXED) * SLOT);
}

static void pool_destroy(struct al_allocator *a)
{
	al_arena_destroy(&((struct pool *)a)->arena);
	al_meta_free(a, sizeof(struct pool));
}

static const struct al_ops pool_ops = {
	.name = "pool",
	AL_OPS_INIT,
	.alloc = pool_alloc,
	.free = pool_free,
	.usable_size = pool_usable_size,
	.stats = pool_stats,
	.destroy = pool_destroy,
};

static int pool_create(const struct al_layer_desc *d, const int64_t *params,
		       struct al_allocator *below, unsigned ncpu, struct al_allocator **out)
{
	struct pool *pl = al_meta_alloc(sizeof(*pl));

	(void)params;
	if (!pl)
		return -ENOMEM;
	if (al_arena_init(&pl->arena, POOL_BYTES, 4096, false) ||
	    !al_arena_grow(&pl->arena, POOL_BYTES))
		goto out_free;
	*out = al_allocator_init(&pl->base, &pool_ops, d, below, ncpu);
	return 0;

out_free:
	pool_destroy(&pl->base); /* frees only the parts that exist */
	return -ENOMEM;
}

static const struct al_layer_desc pool_desc = {
	.name = "pool",
	AL_LAYER_DESC_INIT,
	.doc = "example bottom layer: 256-byte slots bumped from an arena, per-CPU free lists",
	.features = AL_F_USABLE,
	.max_size = SLOT,
	.create = pool_create,
	.min_align = 16,
};

AL_REGISTER_LAYER(pool_desc)
