/* SPDX-License-Identifier: MIT */
/*
 * dup: a front layer that hands one object out twice. It remembers
 * the last object of 32 to 64 bytes it got from the layer below and gives
 * it to the next such request as well, so two live objects share memory:
 * python3 on "dup > buddy" corrupts its objects and dies (SIGSEGV), the
 * misuse `alloclab preload` must name, with the signal and the policy.
 */
#include <alloclab/alloclab.h>

#define DU_COUNTERS(C, D, P) C(P, dups, 0, "objects handed out a second time")
AL_COUNTERS_DEFINE(DU_COUNTERS, DU_, du_counters);

struct dup {
	struct al_allocator base; /* must be first */
	struct al_counters ctr;	  /* du_counters */
	void *last[AL_MAX_CPUS];  /* per CPU: the object to hand out again */
};

static bool du_size(size_t size)
{
	return size >= 32 && size <= 64;
}

static void *du_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct dup *d = (struct dup *)a;
	void *p = d->last[c->cpu];

	if (du_size(size) && p) {
		d->last[c->cpu] = NULL;
		return p;
	}
	p = al_alloc(a->below, c, size, flags);
	if (du_size(size))
		d->last[c->cpu] = p;
	return p;
}

static int du_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	return al_free(a->below, c, p);
}

static int64_t du_held(struct al_allocator *a)
{
	return al_below_bytes_held(a);
}

AL_COUNTED_LAYER(dup, struct dup, du_counters, NULL, NULL, du_held,
		 (.alloc = du_alloc, .free = du_free, .owns = al_below_owns,
		  .usable_size = al_below_usable_size),
		 (.doc = "hands one object of 32 to 64 bytes out twice",
		  .features = AL_F_BACKEND | AL_F_OWNS_BELOW | AL_F_OWNS | AL_F_USABLE))
