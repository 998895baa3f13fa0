/* SPDX-License-Identifier: MIT */
/*
 * lastfree: a front layer caching one object per CPU. A free parks the object
 * in the CPU's empty slot (else passes it down); an allocation that fits the
 * parked object (its usable size at most twice the request) takes it back.
 * A slot has one user, its CPU: no lock.
 */
#include <string.h>
#include <alloclab/alloclab.h>

#define LF_COUNTERS(C, D, P) \
	C(P, hits, AL_CTR_KEY, "parked objects reused") C(P, parked, 0, "frees parked")
AL_COUNTERS_DEFINE(LF_COUNTERS, LF_, lf_counters);

struct lastfree {
	struct al_allocator base; /* must be first */
	struct al_counters ctr;	  /* lf_counters */
	struct {
		void *obj; /* the parked object, or NULL */
	} cpu[AL_MAX_CPUS] __attribute__((aligned(AL_CACHELINE)));
};

static void *lf_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct lastfree *lf = (struct lastfree *)a;
	void *p = lf->cpu[c->cpu].obj;
	size_t u = p ? al_below_usable_size(a, p) : 0;

	if (!p || size > u || u / 2 > size)
		return al_alloc(a->below, c, size, flags);
	lf->cpu[c->cpu].obj = NULL;
	al_count(&lf->ctr, c, LF_hits, 1);
	return flags & AL_ZERO ? memset(p, 0, size) : p;
}

static int lf_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct lastfree *lf = (struct lastfree *)a;
	size_t u = p ? al_below_usable_size(a, p) : 0;

	if (!u || lf->cpu[c->cpu].obj)
		return al_free(a->below, c, p);
	lf->cpu[c->cpu].obj = p;
	al_count(&lf->ctr, c, LF_parked, 1);
	return 0;
}

static void lf_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct lastfree *lf = (struct lastfree *)a;

	for (unsigned cpu = 0; cpu < a->ncpu; cpu++)
		if ((scope == AL_DRAIN_ALL || cpu == c->cpu) && lf->cpu[cpu].obj &&
		    !al_free(a->below, c, lf->cpu[cpu].obj))
			lf->cpu[cpu].obj = NULL;
}

/* Handed out through this layer: what the layer below holds, less the parked. */
static int64_t lf_held(struct al_allocator *a)
{
	struct lastfree *lf = (struct lastfree *)a;
	int64_t held = al_below_bytes_held(a);

	for (unsigned cpu = 0; cpu < a->ncpu; cpu++)
		held -= lf->cpu[cpu].obj ? (int64_t)al_below_usable_size(a, lf->cpu[cpu].obj) : 0;
	return held;
}

static void lf_fini(struct al_allocator *a)
{
	struct al_ctx c = { 0 }; /* CPU 0 at task level */

	lf_drain(a, &c, AL_DRAIN_ALL); /* parked objects go back before the layer below does */
}

AL_COUNTED_LAYER(lastfree, struct lastfree, lf_counters, NULL, lf_fini, lf_held,
		 (.alloc = lf_alloc, .free = lf_free, .owns = al_below_owns,
		  .usable_size = al_below_usable_size, .drain = lf_drain),
		 (.doc = "example front layer: one parked object per CPU",
		  .features = AL_F_BACKEND | AL_F_NEEDS_DISTINCT | AL_F_OWNS | AL_F_USABLE))
