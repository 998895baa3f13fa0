/* SPDX-License-Identifier: MIT */
/*
 * The out-of-line part of the layer skeleton (alloclab/layer.h): the create
 * and destroy of AL_LAYER, and the layer below's bytes_held.
 *
 * AL_LAYER's create: zeroed metadata memory for the instance, the common
 * header filled, then the layer's init; when init fails, fini runs on what
 * init made (zeroed parts are skipped) and the instance is freed, so a
 * failed create leaves nothing behind. Its destroy is fini, then the free.
 * No locks: a layer is created and destroyed by one thread. Cost: one
 * metadata allocation per create.
 */
#include <errno.h>

#include "alloclab/core.h"

int al_layer_create(const struct al_layer_desc *d, const int64_t *params,
		    struct al_allocator *below, unsigned ncpu, struct al_allocator **out,
		    const struct al_ops *ops, size_t size, al_layer_init_fn init,
		    al_layer_fini_fn fini)
{
	struct al_allocator *a = al_meta_alloc(size);
	int ret;

	if (!a)
		return -ENOMEM;
	al_allocator_init(a, ops, d, below, ncpu);
	ret = al_layer_call_init(init, a, params);
	if (ret)
		goto out_free;
	*out = a;
	return 0;

out_free:
	al_layer_destroy(a, size, fini);
	return ret;
}

void al_layer_destroy(struct al_allocator *a, size_t size, al_layer_fini_fn fini)
{
	al_layer_call_fini(fini, a);
	al_meta_free(a, size);
}

int64_t al_below_bytes_held(struct al_allocator *a)
{
	struct al_stats st; /* the values it reports are dropped: only bytes_held is read */

	st.layer = a->below->desc ? a->below->desc->name : a->below->ops->name;
	st.bytes_held = 0;
	st.n = 0;
	a->below->ops->stats(a->below, &st);
	return st.bytes_held;
}
