/* SPDX-License-Identifier: MIT */
/*
 * skel_bottom: the skeleton of a bottom layer (it owns its memory). One
 * arena of `limit` bytes is cut into `slot`-byte slots as they are needed,
 * 64 KiB at a time; freed slots go on one LIFO list, linked through their
 * first word. One lock guards the list, the carving point and the count.
 * Put your algorithm in take/put; keep bytes_held exact: the engine checks
 * at teardown that it is back to its value at the start.
 */
#include <errno.h>
#include <string.h>
#include <alloclab/alloclab.h>

#define CHUNK (64u << 10) /* committed at a time: a multiple of any slot */

enum { P_slot, P_limit, P_NR };
static const struct al_param_desc sb_params[P_NR] = {
	{ "slot", AL_PARAM_SIZE, 256, 16, 4096, NULL, "bytes per slot, a power of two" },
	{ "limit", AL_PARAM_SIZE, 64 << 20, 1 << 20, 1LL << 36, NULL, "address space reserved" },
};

struct skel_bottom {
	struct al_allocator base; /* must be first */
	struct al_arena arena;	  /* where the slots live */
	struct al_lock lock;	  /* guards everything below */
	char *next, *end;	  /* the part of the last chunk not yet carved */
	void *head;		  /* freed slots */
	size_t slot, live;	  /* slot size; slots handed out */
};

static int sb_init(struct al_allocator *a, const int64_t *params)
{
	struct skel_bottom *s = (struct skel_bottom *)a;

	s->slot = (size_t)params[P_slot];
	if (s->slot & (s->slot - 1))
		return -EINVAL;
	al_lock_init(&s->lock, 10 * 1000 * 1000, false); /* a waiter gives up after 10 ms */
	return al_arena_init(&s->arena, (size_t)params[P_limit], CHUNK, false);
}

static void sb_fini(struct al_allocator *a)
{
	al_arena_destroy(&((struct skel_bottom *)a)->arena); /* nothing if init failed */
}

static void *sb_take(struct skel_bottom *s) /* under the lock */
{
	void **p = s->head;

	if (p) {
		s->head = *p;
		return p;
	}
	if (s->next == s->end) {
		s->next = al_arena_grow(&s->arena, CHUNK);
		s->end = s->next ? s->next + CHUNK : NULL;
		if (!s->next)
			return NULL;
	}
	s->next += s->slot;
	return s->next - s->slot;
}

static void *sb_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct skel_bottom *s = (struct skel_bottom *)a;
	int ret = size > s->slot ? -EINVAL : al_lock_acquire(&s->lock, c);
	void *p;

	if (ret) {
		c->err = ret;
		return NULL;
	}
	p = sb_take(s);
	s->live += p != NULL;
	al_lock_release(&s->lock, c);
	if (!p)
		c->err = -ENOMEM;
	return p && (flags & AL_ZERO) ? memset(p, 0, size) : p;
}

static bool sb_owns(struct al_allocator *a, const void *p)
{
	struct skel_bottom *s = (struct skel_bottom *)a;

	return al_arena_contains(&s->arena, p) && ((uintptr_t)p - s->arena.base) % s->slot == 0;
}

static size_t sb_usable_size(struct al_allocator *a, const void *p)
{
	return sb_owns(a, p) ? ((struct skel_bottom *)a)->slot : 0;
}

static int sb_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct skel_bottom *s = (struct skel_bottom *)a;
	int ret = !p ? 0 : !sb_owns(a, p) ? -EINVAL : al_lock_acquire(&s->lock, c);

	if (ret || !p)
		return ret;
	*(void **)p = s->head;
	s->head = p;
	s->live--;
	al_lock_release(&s->lock, c);
	return 0;
}

static void sb_stats(struct al_allocator *a, struct al_stats *out)
{
	struct skel_bottom *s = (struct skel_bottom *)a;

	out->bytes_held = (int64_t)(s->live * s->slot);
}

AL_LAYER(skel_bottom, struct skel_bottom, sb_init, sb_fini,
	 (.alloc = sb_alloc, .free = sb_free, .owns = sb_owns, .usable_size = sb_usable_size,
	  .stats = sb_stats),
	 (.doc = "skeleton bottom layer: fixed slots from an arena, one locked free list",
	  .features = AL_F_OWNS | AL_F_USABLE, .max_size = 4096, .min_align = 16, .nparams = P_NR,
	  .params = sb_params))
