/* SPDX-License-Identifier: MIT */
/*
 * alloclab stack: an allocator built from a spec of layers.
 *
 * A struct al_stack_spec names the layers top first, with every parameter
 * filled in (al_spec_parse reads the text form "percpu(capacity=16) >
 * buddy"). al_stack_create() validates the spec against the registry's
 * schemas and the stack's shape (a layer that needs a backend has one, a
 * bottom layer is last, what each layer needs of the one below), builds the
 * layers bottom-up and, on any failure, destroys what it built and says why
 * in err. Destruction goes top-down, so a front layer can hand its caches
 * back on the way. The queries below answer from a spec or a built stack
 * without running it; the al_call_* entry points are out-of-line wrappers of
 * the ops.h dispatch, for Python and for tests; the guard checks every
 * object a layer hands out (alignment, not live already).
 *
 * Concurrency: a stack is created, checked, drained with AL_DRAIN_ALL and
 * destroyed by one thread while no other operates on it; al_stack_fork_lock takes every
 * layer's locks top-down (the stack order is the lock order) and the unlock
 * releases them bottom-up.
 */
#ifndef ALLOCLAB_STACK_H
#define ALLOCLAB_STACK_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct al_layer_spec {
	const struct al_layer_desc *desc;
	int64_t params[AL_MAX_PARAMS]; /* desc->nparams values in schema order */
};

struct al_stack_spec {
	unsigned n; /* layers, [0] is the top */
	struct al_layer_spec layer[AL_MAX_LAYERS];
	/* Bit i: check the objects layer i hands out (aligned to its declared
	 * alignment, not live already); see al_guard_wrap. 0 = no checks. */
	unsigned check;
};

/* Builds bottom-up. 0, or -EINVAL (bad spec, err says why) / -ENOMEM. */
AL_API int al_stack_create(const struct al_stack_spec *s, unsigned ncpu, struct al_allocator **out,
			   char *err, size_t errlen);
AL_API void al_stack_destroy(struct al_allocator *top);
/* Whether every call on the stack may run at AL_CTX_NMI: from the top, every
 * layer AL_F_NMI_SAFE down to one with AL_F_NMI_SHIELD (or the bottom). NULL
 * if so, else the first layer that is not. */
AL_API const struct al_allocator *al_stack_nmi_unsafe(const struct al_allocator *top);
/* Drain every layer, top-down. */
AL_API void al_stack_drain(struct al_allocator *top, struct al_ctx *c, unsigned scope);
/* The first layer of a stack spec that hands out shared blocks rather than
 * distinct objects (AL_F_SHARED_BLOCKS), or NULL. */
AL_API const struct al_layer_desc *al_spec_shared_layer(const struct al_stack_spec *s);
/* What an allocation's refusal by design (-EAGAIN, -EBUSY, -ETIMEDOUT,
 * -ENOSPC) means and which parameter changes it, in the words of the
 * workloads' errors; NULL for any other code. */
AL_API const char *al_refusal_why(int err);
/* Largest request a stack spec accepts (the smallest max_size over its layers,
 * for their parameters), 0 = any. */
AL_API size_t al_spec_max_size(const struct al_stack_spec *s);
/* Alignment every object of a stack spec has: the min_align of the topmost
 * layer that declares one, sizeof(void *) if none does. */
AL_API size_t al_spec_min_align(const struct al_stack_spec *s);
/* Stats of every layer, top first; returns how many were written (<= max). */
AL_API unsigned al_stack_stats(struct al_allocator *top, struct al_stats *out, unsigned max);

/* Parse "percpu(capacity=16) > buddy" (the grammar Python's Policy prints) into a
 * spec with every parameter filled in. 0, or -EINVAL/-ERANGE with err set. */
AL_API int al_spec_parse(const char *text, struct al_stack_spec *out, char *err, size_t errlen);
/* fork(): take every layer's locks top-down (0, or an error with none held) and
 * release them bottom-up in parent and child. */
AL_API int al_stack_fork_lock(struct al_allocator *top, struct al_ctx *c);
AL_API void al_stack_fork_unlock(struct al_allocator *top, struct al_ctx *c);

/* Non-inline entry points for Python and plugins (test hooks). */
AL_API void *al_call_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags);
AL_API int al_call_free(struct al_allocator *a, struct al_ctx *c, void *p);
AL_API int al_call_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
			      void **out, unsigned flags);
AL_API int al_call_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n);
AL_API size_t al_call_usable_size(struct al_allocator *a, const void *p);
AL_API bool al_call_owns(struct al_allocator *a, const void *p);
/* Check every object layer a hands out from now on: aligned to the layer's
 * declared alignment and not live already. The first violation withholds the
 * object (the allocation fails with -EFAULT, as does every later one) and is
 * reported by al_stack_guard_error and the layer's ops.check. 0 or -ENOMEM. */
AL_API int al_guard_wrap(struct al_allocator *a);
/* -EFAULT with err naming the layer and the violation when a checked layer
 * of the stack handed out a bad object, else 0. */
AL_API int al_stack_guard_error(struct al_allocator *top, char *err, size_t errlen);
/* Run ops.check on every layer that has one, top first: 0 or the first error,
 * with err naming the layer and the violation. */
AL_API int al_call_check(struct al_allocator *top, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_STACK_H */
