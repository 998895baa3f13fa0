/* SPDX-License-Identifier: MIT */
/*
 * pool: a bottom layer of 256-byte slots. The instance is the pool: its
 * 16 MiB of slots live in the instance itself (zeroed metadata memory,
 * committed by the kernel as it is touched). New slots are bumped with one
 * atomic add; a freed slot goes on its CPU's LIFO list, linked through its
 * first word, which that CPU's next allocation takes first. A list has one
 * user, its CPU: no lock, and no free on another CPU's behalf (AL_NOCPU).
 */
#include <errno.h>
#include <string.h>
#include <alloclab/alloclab.h>

#define SLOT	   256
#define POOL_BYTES (16u << 20)

struct pool {
	struct al_allocator base; /* must be first */
	size_t next, live;	  /* bytes bumped so far; slots handed out */
	struct {
		void *head; /* this CPU's freed slots */
	} cpu[AL_MAX_CPUS] __attribute__((aligned(AL_CACHELINE)));
	char slots[POOL_BYTES] __attribute__((aligned(SLOT)));
};

static void *pool_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct pool *pl = (struct pool *)a;
	void **p = pl->cpu[c->cpu].head;
	size_t off = p || size > SLOT ? 0 : __atomic_fetch_add(&pl->next, SLOT, __ATOMIC_RELAXED);

	if (size > SLOT || off >= POOL_BYTES) {
		c->err = size > SLOT ? -EINVAL : -ENOMEM;
		return NULL;
	}
	if (p)
		pl->cpu[c->cpu].head = *p; /* pop this CPU's last freed slot */
	else
		p = (void **)&pl->slots[off]; /* bump a new one */
	__atomic_fetch_add(&pl->live, 1, __ATOMIC_RELAXED);
	return flags & AL_ZERO ? memset(p, 0, size) : p;
}

static size_t pool_usable_size(struct al_allocator *a, const void *p)
{
	size_t off = (uintptr_t)p - (uintptr_t)((struct pool *)a)->slots;

	return off < POOL_BYTES && off % SLOT == 0 ? SLOT : 0;
}

static int pool_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct pool *pl = (struct pool *)a;

	if (!p || !pool_usable_size(a, p))
		return p ? -EINVAL : 0;
	*(void **)p = pl->cpu[c->cpu].head;
	pl->cpu[c->cpu].head = p;
	__atomic_fetch_sub(&pl->live, 1, __ATOMIC_RELAXED);
	return 0;
}

static void pool_stats(struct al_allocator *a, struct al_stats *out)
{
	out->bytes_held = (int64_t)(((struct pool *)a)->live * SLOT);
}

AL_LAYER(
	pool, struct pool, NULL, NULL,
	(.alloc = pool_alloc, .free = pool_free, .usable_size = pool_usable_size,
	 .stats = pool_stats),
	(.doc = "example bottom layer: 256-byte slots bumped from the instance, per-CPU free lists",
	 .features = AL_F_USABLE, .max_size = SLOT, .min_align = 16))
