/* SPDX-License-Identifier: MIT */
/*
 * skel_front: the skeleton of a front layer (a cache over the layer below).
 * Requests of (size/2, size] bytes are served from a per-CPU stack of up to
 * `depth` objects of `size` bytes, taken from the layer below on a miss and
 * pushed back on a free while the stack has room; everything else passes
 * through. A stack has one user, its CPU: no lock (and no NMI safety: the
 * layer does not declare nmi_safe). Put your algorithm in alloc/free; drain
 * must hand every cached object back, and bytes_held counts only what
 * callers hold, so the engine's leak check passes.
 */
#include <string.h>
#include <alloclab/alloclab.h>

#define SF_DEPTH_MAX 64

#define SF_COUNTERS(C, D, P)                                              \
	C(P, hits, AL_CTR_KEY, "allocations served from the CPU's stack") \
	C(P, misses, AL_CTR_KEY, "allocations of the size taken from below")
AL_COUNTERS_DEFINE(SF_COUNTERS, SF_, sf_counters);

enum { P_size, P_depth, P_NR };
static const struct al_param_desc sf_params[P_NR] = {
	{ "size", AL_PARAM_SIZE, 64, 16, 1 << 20, NULL, "object size cached" },
	{ "depth", AL_PARAM_INT, 16, 1, SF_DEPTH_MAX, NULL, "objects cached per CPU" },
};

struct skel_front {
	struct al_allocator base; /* must be first */
	struct al_counters ctr;	  /* sf_counters */
	size_t size;
	unsigned depth;
	struct {
		unsigned n;
		void *obj[SF_DEPTH_MAX];
	} cpu[AL_MAX_CPUS] __attribute__((aligned(AL_CACHELINE)));
};

static int sf_init(struct al_allocator *a, const int64_t *params)
{
	struct skel_front *f = (struct skel_front *)a;

	f->size = (size_t)params[P_size];
	f->depth = (unsigned)params[P_depth];
	return 0;
}

static void *sf_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct skel_front *f = (struct skel_front *)a;
	void *p;

	if (size > f->size || size <= f->size / 2)
		return al_alloc(a->below, c, size, flags);
	if (!f->cpu[c->cpu].n) {
		al_count(&f->ctr, c, SF_misses, 1);
		return al_alloc(a->below, c, f->size, flags);
	}
	al_count(&f->ctr, c, SF_hits, 1);
	p = f->cpu[c->cpu].obj[--f->cpu[c->cpu].n];
	return flags & AL_ZERO ? memset(p, 0, size) : p;
}

static int sf_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct skel_front *f = (struct skel_front *)a;
	size_t u = p ? al_below_usable_size(a, p) : 0;

	if (u < f->size || u >= 2 * f->size || f->cpu[c->cpu].n == f->depth)
		return al_free(a->below, c, p);
	f->cpu[c->cpu].obj[f->cpu[c->cpu].n++] = p;
	return 0;
}

static void sf_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct skel_front *f = (struct skel_front *)a;

	for (unsigned cpu = 0; cpu < a->ncpu; cpu++)
		while ((scope == AL_DRAIN_ALL || cpu == c->cpu) && f->cpu[cpu].n &&
		       !al_free(a->below, c, f->cpu[cpu].obj[f->cpu[cpu].n - 1]))
			f->cpu[cpu].n--;
}

/* Held by callers: what the layer below holds, less what the stacks keep. */
static int64_t sf_held(struct al_allocator *a)
{
	struct skel_front *f = (struct skel_front *)a;
	int64_t held = al_below_bytes_held(a);

	for (unsigned cpu = 0; cpu < a->ncpu; cpu++)
		for (unsigned i = 0; i < f->cpu[cpu].n; i++)
			held -= (int64_t)al_below_usable_size(a, f->cpu[cpu].obj[i]);
	return held;
}

static void sf_fini(struct al_allocator *a)
{
	struct al_ctx c = { 0 }; /* CPU 0 at task level */

	sf_drain(a, &c, AL_DRAIN_ALL); /* back to the layer below before it goes */
}

AL_COUNTED_LAYER(skel_front, struct skel_front, sf_counters, sf_init, sf_fini, sf_held,
		 (.alloc = sf_alloc, .free = sf_free, .owns = al_below_owns,
		  .usable_size = al_below_usable_size, .drain = sf_drain),
		 (.doc = "skeleton front layer: a per-CPU stack of objects of one size",
		  .features = AL_F_BACKEND | AL_F_OWNS_BELOW | AL_F_NEEDS_DISTINCT | AL_F_OWNS |
			      AL_F_USABLE,
		  .nparams = P_NR, .params = sf_params))
