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
 *     (name first: clang-format packs a list that opens with a macro).
 *
 *   - al_allocator_init() fills the common header of a new instance.
 *
 *   - al_below_owns(), al_below_usable_size() and al_below_free() answer
 *     for a layer that hands out the objects of the layer below unchanged
 *     (a cache's owns and usable_size, a filter's free): they are those of
 *     the layer below.
 *
 *   - AL_LAYER() writes all of that for a layer whose instance is one
 *     struct: the create (zeroed instance, header filled, then the layer's
 *     init), the destroy (the layer's fini, then the instance freed), the
 *     ops table, the descriptor and the registration. What is left to write
 *     is the algorithm (alloc, free, ...) and, if the layer has parts of its
 *     own (an arena, counters), init and fini:
 *
 *         AL_LAYER(mine, struct mine, mine_init, mine_fini,
 *                  (.alloc = mine_alloc, .free = mine_free),
 *                  (.doc = "what it models", .features = AL_F_USABLE))
 *
 *     AL_COUNTED_LAYER adds the layer's event counters (a member ctr and
 *     an array of their names): made, finished and reported for it.
 *     AL_LAYER_SHUTDOWN adds a step destroy takes first on a live instance
 *     (a cache hands its objects back with al_layer_drain_all), and
 *     AL_LAYER_VARIANT registers a second layer on the instance, ops and
 *     destroy of one defined above it, with a check of its own (libc's
 *     system). A layer whose code must know its own ops table (to tell
 *     its instances from others) names it AL_LAYER_OPS(NAME), declared
 *     ahead with AL_LAYER_DECLARE(NAME).
 *
 * Lifetime convention: a layer frees its parts in one function, its fini,
 * which both destroy and a failed create run (NULL and zeroed parts are
 * skipped: al_meta_free(NULL, n), al_counters_fini and al_arena_destroy of
 * a zeroed struct are no-ops).
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
#include "counters.h"
#include "registry.h"

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

/* The object index of layer a (index.h), or NULL: what the layer above a
 * reads usable sizes from inline (found once, at its create). */
static inline const struct al_index *al_index_of(struct al_allocator *a)
{
	return a && a->ops->index ? a->ops->index(a) : NULL;
}

/* The index() of a layer that hands out its backend's objects unchanged. */
static inline const struct al_index *al_below_index(struct al_allocator *a)
{
	return al_index_of(a->below);
}

/* bytes_held of the layer below: what the callers of a layer that keeps
 * nothing (a filter, a tap) hold through it. Runs the whole stats() of the
 * layer below (its counters summed over CPUs, a struct al_stats on the stack),
 * so it is for stats() only. */
AL_API int64_t al_below_bytes_held(struct al_allocator *a);

/* free_bulk of objects of one size class (al_ops.free_bulk_sized): the layer's
 * free_bulk_sized when it has one (and its ops are recent enough to say), else
 * al_free_bulk. */
static inline int al_free_bulk_sized(struct al_allocator *a, struct al_ctx *c, void **ptrs,
				     unsigned n, size_t size)
{
	const struct al_ops *o = a->ops;

	if (o->ops_size >= offsetof(struct al_ops, free_bulk_sized) + sizeof(o->free_bulk_sized) &&
	    o->free_bulk_sized)
		return o->free_bulk_sized(a, c, ptrs, n, size);
	return al_free_bulk(a, c, ptrs, n);
}

/* free() of a layer that takes its objects back unchanged (a filter). */
static inline int al_below_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	return al_free(a->below, c, p);
}

/*
 * A layer's own parts, for AL_LAYER. init runs after the header is filled
 * (a->below, a->ncpu, a->desc are set) on a zeroed instance; 0 or -errno.
 * fini frees the parts (and hands back objects it still holds to the layer
 * below); it also runs after a failed init, so it skips what is still zero.
 * Either may be NULL.
 */
typedef int (*al_layer_init_fn)(struct al_allocator *a, const int64_t *params);
typedef void (*al_layer_fini_fn)(struct al_allocator *a);

/* The create and destroy AL_LAYER generates: size bytes of zeroed metadata
 * memory hold the instance. al_layer_create: 0, -ENOMEM, or init's error. */
AL_API int al_layer_create(const struct al_layer_desc *d, const int64_t *params,
			   struct al_allocator *below, unsigned ncpu, struct al_allocator **out,
			   const struct al_ops *ops, size_t size, al_layer_init_fn init,
			   al_layer_fini_fn fini);
AL_API void al_layer_destroy(struct al_allocator *a, size_t size, al_layer_fini_fn fini);

/* For AL_COUNTED_LAYER: call init / fini when not NULL. */
static inline int al_layer_call_init(al_layer_init_fn init, struct al_allocator *a,
				     const int64_t *params)
{
	return init ? init(a, params) : 0;
}

static inline void al_layer_call_fini(al_layer_fini_fn fini, struct al_allocator *a)
{
	if (fini)
		fini(a);
}

#define AL_UNPAREN_(...) __VA_ARGS__

/*
 * Define and register the layer NAME (an identifier: its name in specs) whose
 * instance is TYPE (first member: struct al_allocator base). OPS and DESC are
 * parenthesised lists of designated initialisers of struct al_ops (without
 * .name and .destroy) and struct al_layer_desc (without .name and .create).
 */
#define AL_LAYER(NAME, TYPE, INIT, FINI, OPS, DESC) \
	AL_LAYER_(NAME, TYPE, INIT, NULL, FINI, OPS, DESC, )

/* AL_LAYER whose destroy runs SHUTDOWN on the live instance before FINI
 * (a failed create runs FINI alone: its instance never served). */
#define AL_LAYER_SHUTDOWN(NAME, TYPE, INIT, SHUTDOWN, FINI, OPS, DESC) \
	AL_LAYER_(NAME, TYPE, INIT, SHUTDOWN, FINI, OPS, DESC, )

/* A SHUTDOWN: every cache drained to the layer below, as CPU 0 at task level. */
static inline void al_layer_drain_all(struct al_allocator *a)
{
	struct al_ctx c;

	al_ctx_init(&c, 0);
	a->ops->drain(a, &c, AL_DRAIN_ALL);
}

/* The ops table of layer NAME, to tell its instances by a->ops, and its
 * declaration ahead of the code that names it. */
#define AL_LAYER_OPS(NAME)     (&NAME##_ops_)
#define AL_LAYER_DECLARE(NAME) static const struct al_ops NAME##_ops_

/*
 * A second layer NAME on the instance TYPE, ops table (its name included)
 * and destroy of layer OF, defined above in the same file: a descriptor of
 * its own (DESC, as for AL_LAYER), and a create that runs CHECK (refuse
 * with its error; may be NULL) before OF's init.
 */
#define AL_LAYER_VARIANT(NAME, OF, TYPE, CHECK, DESC)                                         \
	static int NAME##_init_(struct al_allocator *a, const int64_t *params)                \
	{                                                                                     \
		int ret = al_layer_call_init(CHECK, a, params);                               \
		return ret ? ret : OF##_init_(a, params);                                     \
	}                                                                                     \
	static int NAME##_create_(const struct al_layer_desc *d, const int64_t *params,       \
				  struct al_allocator *below, unsigned ncpu,                  \
				  struct al_allocator **out)                                  \
	{                                                                                     \
		return al_layer_create(d, params, below, ncpu, out, &OF##_ops_, sizeof(TYPE), \
				       NAME##_init_, OF##_fini_);                             \
	}                                                                                     \
	static const struct al_layer_desc NAME##_desc_ = {                                    \
		.name = #NAME, AL_LAYER_DESC_INIT, .create = NAME##_create_, AL_UNPAREN_ DESC \
	};                                                                                    \
	AL_REGISTER_LAYER(NAME##_desc_)

/*
 * AL_LAYER for a layer whose TYPE has a member `struct al_counters ctr`
 * counting the events described by DESCS (a struct al_counter_desc array
 * from AL_COUNTERS_DEFINE; the layer's enum indexes it): the create
 * initialises the counters before INIT, the destroy finishes them after
 * FINI, the descriptor exports DESCS (their docs reach `alloclab list`),
 * and the generated stats() reports them with bytes_held = HELD(a) (so OPS
 * has no .stats). HELD: the bytes callers hold through the layer
 * (al_below_bytes_held for a layer that keeps nothing).
 */
#define AL_COUNTED_LAYER(NAME, TYPE, DESCS, INIT, FINI, HELD, OPS, DESC)                       \
	static int NAME##_counted_init_(struct al_allocator *a, const int64_t *params)         \
	{                                                                                      \
		int ret = al_counters_init_desc(&((TYPE *)a)->ctr, DESCS,                      \
						sizeof(DESCS) / sizeof(DESCS[0]), 0, a->ncpu); \
		return ret ? ret : al_layer_call_init(INIT, a, params);                        \
	}                                                                                      \
	static void NAME##_counted_fini_(struct al_allocator *a)                               \
	{                                                                                      \
		al_layer_call_fini(FINI, a);                                                   \
		al_counters_fini(&((TYPE *)a)->ctr);                                           \
	}                                                                                      \
	static void NAME##_counted_stats_(struct al_allocator *a, struct al_stats *out)        \
	{                                                                                      \
		out->bytes_held = HELD(a);                                                     \
		al_counters_report(&((TYPE *)a)->ctr, out);                                    \
	}                                                                                      \
	AL_LAYER_(NAME, TYPE, NAME##_counted_init_, NULL, NAME##_counted_fini_, OPS,           \
		  (.counters = DESCS, .ncounters = sizeof(DESCS) / sizeof(DESCS[0]),           \
		   AL_UNPAREN_ DESC),                                                          \
		  .stats = NAME##_counted_stats_, )

/* The create, destroy, ops table, descriptor and registration of a layer;
 * NAME##_init_ and NAME##_fini_ are what AL_LAYER_VARIANT builds on. */
#define AL_LAYER_(NAME, TYPE, INIT, SHUTDOWN, FINI, OPS, DESC, ...)                             \
	static __attribute__((unused)) int NAME##_init_(struct al_allocator *a,                 \
							const int64_t *params)                  \
	{                                                                                       \
		return al_layer_call_init(INIT, a, params);                                     \
	}                                                                                       \
	static void NAME##_fini_(struct al_allocator *a)                                        \
	{                                                                                       \
		al_layer_call_fini(FINI, a);                                                    \
	}                                                                                       \
	static void NAME##_destroy_(struct al_allocator *a)                                     \
	{                                                                                       \
		al_layer_call_fini(SHUTDOWN, a);                                                \
		al_layer_destroy(a, sizeof(TYPE), NAME##_fini_);                                \
	}                                                                                       \
	static const struct al_ops NAME##_ops_ = { .name = #NAME,                               \
						   AL_OPS_INIT,                                 \
						   .destroy = NAME##_destroy_,                  \
						   __VA_ARGS__ AL_UNPAREN_ OPS };               \
	static int NAME##_create_(const struct al_layer_desc *d, const int64_t *params,         \
				  struct al_allocator *below, unsigned ncpu,                    \
				  struct al_allocator **out)                                    \
	{                                                                                       \
		return al_layer_create(d, params, below, ncpu, out, &NAME##_ops_, sizeof(TYPE), \
				       NAME##_init_, NAME##_fini_);                             \
	}                                                                                       \
	static const struct al_layer_desc NAME##_desc_ = {                                      \
		.name = #NAME, AL_LAYER_DESC_INIT, .create = NAME##_create_, AL_UNPAREN_ DESC   \
	};                                                                                      \
	AL_REGISTER_LAYER(NAME##_desc_)

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_LAYER_H */
