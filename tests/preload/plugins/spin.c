/* SPDX-License-Identifier: MIT */
/*
 * spin: a front layer that never returns from an allocation of
 * exactly 12345 bytes (a loop that makes no progress, as a broken plugin's
 * might); every other call passes through to the layer below. The preload
 * watchdog's tests run tests/preload/stall.c on "spin > buddy".
 */
#include <alloclab/alloclab.h>

#define SP_COUNTERS(C, D, P) C(P, calls, 0, "allocations passed down")
AL_COUNTERS_DEFINE(SP_COUNTERS, SP_, sp_counters);

struct spin {
	struct al_allocator base; /* must be first */
	struct al_counters ctr;	  /* sp_counters */
};

#define SP_FOREVER 12345

static volatile int forever = 1; /* volatile: the loop is not optimised away */

static void *sp_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	while (size == SP_FOREVER && forever)
		;
	return al_alloc(a->below, c, size, flags);
}

static int sp_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	return al_free(a->below, c, p);
}

static int64_t sp_held(struct al_allocator *a)
{
	return al_below_bytes_held(a);
}

AL_COUNTED_LAYER(spin, struct spin, sp_counters, NULL, NULL, sp_held,
		 (.alloc = sp_alloc, .free = sp_free, .owns = al_below_owns,
		  .usable_size = al_below_usable_size),
		 (.doc = "loops for ever on an allocation of 12345 bytes",
		  .features = AL_F_BACKEND | AL_F_OWNS_BELOW | AL_F_OWNS | AL_F_USABLE))
