/* SPDX-License-Identifier: MIT */
/*
 * alloclab: the layer skeleton, what every layer writes the same way.
 *
 * A layer is its algorithm plus a few lines of glue. The glue is here, once:
 *
 *   - AL_OPS_INIT, AL_LAYER_DESC_INIT, AL_WORKLOAD_DESC_INIT open an ops
 *     table or a descriptor with its ABI version and size, the two fields
 *     the registry checks before it reads anything else:
 *
 *         static const struct al_ops mine_ops = {
 *                 .name = "mine",
 *                 AL_OPS_INIT,
 *                 .alloc = mine_alloc,
 *                 ...
 *         };
 *
 *     The name comes first so that the table opens with a designator:
 *     clang-format lays a braced list that opens with a plain macro out as
 *     a packed table instead of one field per line.
 *
 *   - al_allocator_init() fills the common header at the end of a create
 *     and returns it, so the create's tail is `*out = al_allocator_init(...)`.
 *
 *   - al_below_owns(), al_below_usable_size() and al_below_free() answer
 *     for a layer that hands out the objects of the layer below unchanged
 *     (a cache's owns and usable_size, a filter's free): they are those of
 *     the layer below.
 *
 *   - al_lock_acquire_all() / al_lock_release_all() take and release an
 *     array of locks (one per size class or order) for fork(): in index
 *     order, all or none, released in reverse.
 *
 * Lifetime convention: a layer frees its parts in one function (NULL and
 * zeroed parts are skipped: al_meta_free(NULL, n), al_counters_fini and
 * al_arena_destroy of a zeroed struct are no-ops), which both destroy and a
 * failed create's `out_free:` label call.
 *
 * Cost: the initialisers and al_allocator_init() are compile-time or
 * create-time only. The pass-through helpers are one indirect call into the
 * layer below, as a layer's own forwarding function was; al_below_usable_size()
 * also tests that the layer below has usable_size (one predictable branch).
 */
#ifndef ALLOCLAB_LAYER_H
#define ALLOCLAB_LAYER_H

#include <stdbool.h>
#include <stddef.h>

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* First fields of every table: ABI version and size, checked by the registry. */
#define AL_OPS_INIT	   .abi_version = AL_ABI_VERSION, .ops_size = sizeof(struct al_ops)
#define AL_LAYER_DESC_INIT .abi_version = AL_ABI_VERSION, .desc_size = sizeof(struct al_layer_desc)
#define AL_WORKLOAD_DESC_INIT \
	.abi_version = AL_ABI_VERSION, .desc_size = sizeof(struct al_workload_desc)

/* Fill the common header of a new layer instance; returns base for *out. */
static inline struct al_allocator *al_allocator_init(struct al_allocator *base,
						     const struct al_ops *ops,
						     const struct al_layer_desc *desc,
						     struct al_allocator *below, unsigned ncpu)
{
	base->ops = ops;
	base->desc = desc;
	base->below = below;
	base->ncpu = ncpu;
	return base;
}

/* owns() of a layer whose objects are those of the layer below. */
static inline bool al_below_owns(struct al_allocator *a, const void *p)
{
	struct al_allocator *b = a->below;

	return b->ops->owns && b->ops->owns(b, p);
}

/* usable_size() of a layer whose objects are those of the layer below. */
static inline size_t al_below_usable_size(struct al_allocator *a, const void *p)
{
	struct al_allocator *b = a->below;

	return b->ops->usable_size ? b->ops->usable_size(b, p) : 0;
}

/* free() of a layer that takes its objects back unchanged (a filter). */
static inline int al_below_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	return al_free(a->below, c, p);
}

struct al_lock;

/*
 * Take n locks, the first at `first` and each next one `stride` bytes on
 * (a lock member of each element of an array: stride = sizeof(element)), in
 * index order. 0 with all held, or the first acquisition's error with none
 * held (those already taken are released, in reverse).
 */
AL_API int al_lock_acquire_all(struct al_lock *first, size_t stride, unsigned n,
			       const struct al_ctx *c);
/* Release the n locks al_lock_acquire_all() took, in reverse index order. */
AL_API void al_lock_release_all(struct al_lock *first, size_t stride, unsigned n,
				const struct al_ctx *c);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_LAYER_H */
