/* SPDX-License-Identifier: MIT */
/*
 * The bulk calls' fallback loops (ops.h): al_alloc_bulk and al_free_bulk
 * give every layer the bulk contract of struct al_ops. A layer with a
 * native bulk path is called once, any other through a loop over its single
 * calls that keeps the native paths' semantics (see al_free_bulk). A front
 * layer refills and spills through them, so they sit on its slow path, not
 * on the cache-hit path.
 *
 * Nothing here takes a lock or allocates; each function touches only its
 * arguments, so it may run at any context level. Cost: one indirect call
 * per object for a layer without a native bulk path, one for the batch
 * otherwise.
 */
#include <errno.h>

#include "alloclab/core.h"

int al_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n, void **out,
		  unsigned flags)
{
	unsigned i;

	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		al_sim_call(a, AL_SIM_CALL_ALLOC_BULK);
	if (a->ops->alloc_bulk)
		return a->ops->alloc_bulk(a, c, size, n, out, flags);
	for (i = 0; i < n; i++) {
		out[i] = a->ops->alloc(a, c, size, flags);
		if (!out[i])
			break;
	}
	return (int)i;
}

/*
 * The loop behind a layer without a native bulk free, with the native
 * paths' contract: every entry is tried once; entries the layer refuses
 * (-EINVAL: not an allocated block, or repeated in ptrs) are skipped and
 * reported through c->err; the return is how many entries were freed (NULL
 * entries count, as free(NULL)). A transient failure (a lock budget) of the
 * first entry, before anything was freed, fails the whole call so the caller
 * may retry it; later ones are retried a few times, then reported in c->err
 * and not counted.
 */
int al_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n)
{
	unsigned i, done = 0, tries;
	int ret, err = 0;

	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		al_sim_call(a, AL_SIM_CALL_FREE_BULK);
	if (a->ops->free_bulk)
		return a->ops->free_bulk(a, c, ptrs, n);
	for (i = 0; i < n; i++) {
		if (!ptrs[i]) {
			done++;
			continue;
		}
		for (tries = 0;; tries++) {
			ret = a->ops->free(a, c, ptrs[i]);
			if (!ret || ret == -EINVAL || tries == 3)
				break;
			if (!done && !err)
				return ret; /* nothing freed: the caller may retry the batch */
		}
		if (!ret)
			done++;
		else if (!err || err == -EINVAL)
			err = ret;
	}
	if (err)
		c->err = err;
	return (int)done;
}
