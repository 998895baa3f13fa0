/* SPDX-License-Identifier: MIT */
/*
 * Layer features: what a layer above, the builder and the preload shim may
 * rely on, as bits of struct al_layer_desc's features. This file is the one
 * list of them (AL_FEATURES): the enum and the names al_feature_name() gives
 * Python's schema (`alloclab list`, plugin builds) come from it, so a feature
 * added here is known on both sides at once.
 */
#ifndef ALLOCLAB_FEATURES_H
#define ALLOCLAB_FEATURES_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Layer features: what a layer above may rely on. The one list of them:
 * X(NAME, name, bit) makes AL_F_NAME = 1u << bit of enum al_features, and
 * "name" is what al_feature_name() gives Python, the CLI and plugins.
 *
 * bulk: native alloc_bulk/free_bulk. owns: owns() answers by address range.
 * backend: needs a layer below. usable: usable_size() works. validates:
 * invalid and double frees return -EINVAL.
 * stats_anytime: stats() may run while other threads operate (it reads
 *   relaxed atomics only): the engine then samples this layer's bytes_held
 *   during a run.
 * pages: a page allocator, implements alloclab/pages.h. needs_pages: needs a
 *   page allocator (AL_F_PAGES) right below.
 * trylock: trylock-only; an allocation may fail (-EBUSY) while another CPU
 *   holds a lock below.
 * nmi_safe: every call may run at AL_CTX_NMI (a signal handler interrupting
 *   the same CPU anywhere): it never waits on a lock another level of the CPU
 *   may hold, and it refuses (NULL, -EBUSY) or defers what it cannot do.
 * nmi_shield: at AL_CTX_NMI it reaches the layer below only with AL_NOSPIN or
 *   not at all (refill and trim run later, from ordinary context), so the
 *   layers below need no NMI path of their own.
 * km_classes: usable_size() of an allocation of a kmalloc class size is
 *   exactly that size (slab): a kmalloc-class cache above it needs no class
 *   learning.
 * shared_blocks: hands out one block per CPU, not distinct objects: two live
 *   allocations on a CPU are the same memory (null, the harness floor).
 *   Usable only where objects are never linked, kept or checked.
 * needs_distinct: needs distinct objects from the layers below: it caches the
 *   objects freed to it (links them, keeps them in arrays), so two live ones
 *   that are the same memory corrupt it. Refused over AL_F_SHARED_BLOCKS.
 * task_only: allocates only at AL_CTX_TASK (it may sleep, as vmalloc): a call
 *   at IRQ or NMI level fails (-EPERM).
 * below_in_irq: reaches the layers below from irq_work, at AL_CTX_IRQ
 *   (bpf_ma's refill): refused over an AL_F_TASK_ONLY layer, whose every
 *   refill would fail.
 * owns_below: owns() is the layer below's (al_below_owns): its objects are
 *   its backend's, so whoever asks who owns an address (the preload shim, on
 *   every free) may ask the first layer below that does not say this. Only
 *   with owns = al_below_owns: a layer that owned memory of its own and said
 *   this would have the shim hand its objects to glibc's free.
 * pow2_classes: a power-of-two request of 16 bytes or more is a block of
 *   exactly that size (a buddy): a cache of such classes above takes a
 *   refill's objects as of the class it asked for, unread.
 * passes_size: what it hands out for a request of s is what the layer below
 *   handed out for s or for the class of s, never for more (not nolock, whose
 *   retry asks for the next class): exact over AL_F_POW2_CLASSES.
 */
#define AL_FEATURES(X)                        \
	X(BULK, bulk, 0)                      \
	X(OWNS, owns, 1)                      \
	X(BACKEND, backend, 2)                \
	X(USABLE, usable, 3)                  \
	X(VALIDATES, validates, 4)            \
	X(STATS_ANYTIME, stats_anytime, 5)    \
	X(PAGES, pages, 6)                    \
	X(NEEDS_PAGES, needs_pages, 7)        \
	X(TRYLOCK, trylock, 8)                \
	X(NMI_SAFE, nmi_safe, 12)             \
	X(NMI_SHIELD, nmi_shield, 13)         \
	X(KM_CLASSES, km_classes, 14)         \
	X(SHARED_BLOCKS, shared_blocks, 18)   \
	X(NEEDS_DISTINCT, needs_distinct, 19) \
	X(TASK_ONLY, task_only, 20)           \
	X(BELOW_IN_IRQ, below_in_irq, 21)     \
	X(OWNS_BELOW, owns_below, 22)         \
	X(POW2_CLASSES, pow2_classes, 23)     \
	X(PASSES_SIZE, passes_size, 24)

enum al_features {
#define AL_F_ENUM(NAME, name, bit) AL_F_##NAME = 1u << (bit),
	AL_FEATURES(AL_F_ENUM)
#undef AL_F_ENUM
};

/* The name of the i-th feature of AL_FEATURES, its bit in *mask (when mask is
 * not NULL); NULL past the last one. */
AL_API const char *al_feature_name(unsigned i, unsigned *mask);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_FEATURES_H */
