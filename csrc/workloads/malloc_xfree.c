/* SPDX-License-Identifier: MIT */
/*
 * malloc-xfree: models libarena-malloc-xfree. One cycle = allocate a list of
 * allocs_per_cycle objects (timed), publish it in ONE shared slot with an
 * atomic exchange, and free the list that was there (timed), left by the
 * previous invocation of whichever worker published last. With more than
 * one worker most frees therefore happen on a different CPU from the
 * allocation; the engine reports how many (cross_frees), from the owner id
 * packed in the slot beside the list head.
 * Teardown frees the list still in the slot, so nothing leaks.
 */
#include <errno.h>

#include "alloclab/alloclab.h"
#include "list.h"

enum { P_size, P_allocs_per_cycle, P_NR };

static const struct al_param_desc xf_params[P_NR] = {
	[P_size] = { "size", AL_PARAM_SIZE, 64, 8, 1ll << 30, NULL,
		     "bytes per allocation (at least 8: objects are linked through them)" },
	[P_allocs_per_cycle] = { "allocs_per_cycle", AL_PARAM_INT, 64, 1, 1 << 20, NULL,
				 "objects per published list" },
};

#define OWNER_SHIFT 48
#define PTR_MASK    ((1ull << OWNER_SHIFT) - 1)

struct xf_shared {
	uint64_t slot __attribute__((aligned(AL_CACHELINE))); /* owner << 48 | list head */
	unsigned n;					      /* objects per list */
};

static int xf_setup(const int64_t *params, unsigned nworkers, void **shared)
{
	struct xf_shared *s = al_meta_alloc(sizeof(*s));

	(void)nworkers;
	if (!s)
		return -ENOMEM;
	s->n = (unsigned)params[P_allocs_per_cycle];
	*shared = s;
	return 0;
}

static int xf_cycle(struct al_worker *w)
{
	struct xf_shared *s = w->shared;
	void *head = NULL, *old;
	uint64_t prev;
	int ret;

	ret = wl_alloc_list(w, (size_t)w->params[P_size], s->n, &head);
	if (ret)
		return ret;
	al_worker_live(w, w->params[P_size] * s->n);
	al_shared(&s->slot, true); /* simulated CPUs: the slot's line moves between CPUs */
	prev = __atomic_exchange_n(&s->slot, (uint64_t)w->id << OWNER_SHIFT | (uintptr_t)head,
				   __ATOMIC_ACQ_REL);
	old = (void *)(uintptr_t)(prev & PTR_MASK);
	if (!old)
		return 0;
	if ((prev >> OWNER_SHIFT) != w->id)
		w->alloc_cross += s->n; /* simulated: each free moves the object's line */
	ret = wl_free_list(w, old, s->n);
	if (!ret)
		al_worker_live(w, -w->params[P_size] * s->n);
	return ret;
}

static void xf_teardown(void *shared, struct al_allocator *a, struct al_ctx *c)
{
	struct xf_shared *s = shared;
	void *old;

	if (!s)
		return;
	old = (void *)(uintptr_t)(s->slot & PTR_MASK);
	if (old && a)
		wl_free_list_untimed(a, c, old, s->n);
	al_meta_free(s, sizeof(*s));
}

static const struct al_workload_desc malloc_xfree_desc = {
	.name = "malloc-xfree",
	AL_WORKLOAD_DESC_INIT,
	.doc = "libarena-malloc-xfree: publish each list in a shared slot and free the list left "
	       "there, so most frees are cross-CPU",
	.flags = AL_WL_LIVE | AL_WL_DISTINCT | AL_WL_SIM, /* lists linked through the objects */
	.nparams = P_NR,
	.params = xf_params,
	.size_param = P_size,
	.setup = xf_setup,
	.cycle = xf_cycle,
	.teardown = xf_teardown,
};

AL_REGISTER_WORKLOAD(malloc_xfree_desc)
