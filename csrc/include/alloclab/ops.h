/* SPDX-License-Identifier: MIT */
/*
 * alloclab ops: the object-allocator contract (DESIGN.md §2).
 *
 * An allocator is a stack of layers. Each layer is a struct al_allocator
 * (embedded as the first member of the layer's private struct) reached only
 * through its const struct al_ops. A front layer holds a pointer to the
 * layer below and refills/spills through that layer's bulk calls. A layer
 * is described to the registry by a struct al_layer_desc: its name, its
 * parameter schema (params.h), what it offers and needs (enum al_features)
 * and its create().
 *
 * The caller passes its "CPU" explicitly in a struct al_ctx: the engine builds
 * one per worker, so the fast path never pays for sched_getcpu() or a TLS
 * lookup. Tests build contexts by hand to drive "CPU 3 frees what CPU 1
 * allocated" deterministically on one thread.
 *
 * Concurrency: one thread per model CPU (ctx->cpu) at a time, at one context
 * level each; any CPU may free what another allocated. A call at AL_CTX_IRQ
 * or AL_CTX_NMI models an interrupt of the same CPU's task-level call at any
 * instruction; a layer says what it supports there with AL_F_NMI_SAFE,
 * AL_F_NMI_SHIELD and AL_F_TASK_ONLY. Locking is each layer's own business
 * (lock.h); no lock is held across a call into the layer below unless the
 * layer's design header says so.
 *
 * Error convention: functions return 0 or a negative errno; allocation
 * functions return NULL and leave the reason in ctx->err. The library never
 * aborts, prints or exits.
 *
 * Cost: the dispatch helpers are one indirect call; the bulk wrappers loop
 * over single calls only for a layer without a native bulk path.
 */
#ifndef ALLOCLAB_OPS_H
#define ALLOCLAB_OPS_H

#include "base.h"
#include "params.h"
#include "features.h"
#include "sim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Context levels: the IRQ/NMI model. Counters are indexed by [cpu][level]. */
enum al_ctx_level {
	AL_CTX_TASK = 0,
	AL_CTX_IRQ = 1,
	AL_CTX_NMI = 2,
	AL_CTX_NR = 3,
};

/* Flags passed down the stack, as gfp flags are in the kernel. */
enum al_flags {
	AL_ZERO = 1u << 0,     /* zero the memory (kzalloc, calloc) */
	AL_NOSPIN = 1u << 1,   /* may not spin on a lock: trylock only */
	AL_MAYSLEEP = 1u << 2, /* may block (unused by the spin-only models) */
	AL_NOTRACE = 1u << 3,  /* part of a call already traced above, or an API without the
				* kmalloc tracepoint (kmalloc_nolock): not counted as traced */
	AL_NOCPU = 1u << 4,    /* do not touch the calling CPU's per-CPU caches (a helper
				* thread running a CPU's deferred work concurrently with it) */
	AL_SLOWPATH = 1u << 5, /* free through the slab's slow path (__slab_free) on the
				* calling CPU, past its object caches: irq_work running on
				* that CPU (free_deferred_objects) */
	AL_ACCOUNT = 1u << 6   /* charge to the memory cgroup (__GFP_ACCOUNT): slab's
				* kmalloc-cg caches when its memcg is on */
};

/* The calling "CPU". One per worker thread; never shared between threads. */
struct al_ctx {
	unsigned cpu;	/* model CPU id, < the allocator's ncpu */
	unsigned level; /* enum al_ctx_level */
	int err;	/* why the last allocation returned NULL (-ENOMEM, ...) */
	unsigned pad;
};

struct al_allocator;
struct al_counter_desc;
struct al_index;

/* A layer's counters and gauges, reported by name. */
struct al_stat {
	const char *name; /* static string owned by the layer */
	uint64_t value;
	unsigned flags; /* AL_STAT_GAUGE: a level (objects cached now), not an event count */
};

enum { AL_STAT_GAUGE = 1u << 0 };

struct al_stats {
	const char *layer;  /* layer name */
	int64_t bytes_held; /* bytes handed out to callers and not yet freed */
	unsigned n;	    /* entries used in v[] */
	struct al_stat v[AL_STATS_MAX];
};

/* Drain scopes. */
enum al_drain_scope {
	AL_DRAIN_CPU = 0, /* the caller's CPU only */
	AL_DRAIN_ALL = 1  /* every CPU: used at teardown, nothing runs concurrently */
};

struct al_ops {
	unsigned abi_version; /* AL_ABI_VERSION */
	size_t ops_size;      /* sizeof(struct al_ops) */
	const char *name;
	void *(*alloc)(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags);
	/* 0, or -EINVAL (not an allocated block: memory untouched), -ETIMEDOUT (lock). */
	int (*free)(struct al_allocator *a, struct al_ctx *c, void *ptr);
	/* Returns how many objects were stored in out[] (0..n); 0 sets c->err. NULL when
	 * the layer has no native bulk path (see al_alloc_bulk()). */
	int (*alloc_bulk)(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
			  void **out, unsigned flags);
	/* Returns how many entries were freed (NULL entries count): n, or fewer
	 * when some were refused (not allocated blocks, or repeated in ptrs:
	 * -EINVAL in c->err, those entries untouched, every other one freed);
	 * a negative errno when the call failed as a whole and freed nothing (a
	 * lock budget), so the caller may retry the batch. */
	int (*free_bulk)(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n);
	bool (*owns)(struct al_allocator *a, const void *ptr);		/* by address range */
	size_t (*usable_size)(struct al_allocator *a, const void *ptr); /* 0 if unknown */
	void (*drain)(struct al_allocator *a, struct al_ctx *c, unsigned scope);
	void (*stats)(struct al_allocator *a, struct al_stats *out);
	void (*destroy)(struct al_allocator *a); /* returns everything to the OS */
	/* Optional: walk every internal invariant (single-threaded, quiescent).
	 * 0, or -EFAULT with err describing the first violation. */
	int (*check)(struct al_allocator *a, char *err, size_t errlen);
	/* Optional, for fork(): take every lock of the layer (0, or an error with
	 * none held), and release them in parent and child afterwards. */
	int (*fork_lock)(struct al_allocator *a, struct al_ctx *c);
	void (*fork_unlock)(struct al_allocator *a, struct al_ctx *c);
	/* Optional: free with flags. AL_NOSPIN: -EBUSY, object untouched,
	 * when the free would have to spin on a lock or leave the fast path
	 * (kfree_nolock then defers it); AL_NOCPU: bypass per-CPU caches. */
	int (*free_flags)(struct al_allocator *a, struct al_ctx *c, void *ptr, unsigned flags);
	/* Optional: the object index the layers above may read inline for
	 * usable sizes (index.h), the layer below's for a layer that hands its
	 * objects out unchanged; NULL when there is none. Must agree with
	 * usable_size for every pointer, and its [base, base + limit) must be
	 * memory of this layer's own reservation (the preload shim takes a
	 * pointer there for the policy's without asking owns()). */
	const struct al_index *(*index)(struct al_allocator *a);
	/* Optional: free_bulk of objects the caller vouches for (a cache of size
	 * classes spilling one class, as kmem_cache_free_bulk knows its cache):
	 * each live, held once, of usable size in [size, 2 * size) here, read
	 * when it entered the caller. The layer may file them unchecked: a wrong
	 * object corrupts it. Returns as free_bulk (al_free_bulk_sized). */
	int (*free_bulk_sized)(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n,
			       size_t size);
};

/* Common header of every layer instance. */
struct al_allocator {
	const struct al_ops *ops;
	const struct al_layer_desc *desc; /* how it was made */
	struct al_allocator *below;	  /* backend, or NULL for a bottom layer */
	unsigned ncpu;			  /* model CPUs the instance was built for */
};

/* Layer features (enum al_features): features.h, the one list of them. */

struct al_layer_desc {
	unsigned abi_version; /* AL_ABI_VERSION */
	size_t desc_size;     /* sizeof(struct al_layer_desc) */
	const char *name;
	const char *doc; /* one line */
	unsigned features;
	size_t max_size; /* largest request over all parameters, 0 = unlimited */
	/* Optional: the largest request for these parameters (e.g. chunk_size / 2). */
	size_t (*max_size_of)(const int64_t *params);
	unsigned nparams;
	const struct al_param_desc *params;
	/* Optional: cross-parameter checks beyond the schema's ranges (e.g. "chunk_size
	 * must be a power of two"). 0, or -EINVAL with err naming the value and what
	 * is valid. */
	int (*check_params)(const int64_t *params, char *err, size_t errlen);
	/* params[] holds nparams values in schema order, already validated. */
	int (*create)(const struct al_layer_desc *d, const int64_t *params,
		      struct al_allocator *below, unsigned ncpu, struct al_allocator **out);
	/* Alignment every object this layer hands out has, for every size and
	 * every parameter (a power of two), as the kernel design it models gives
	 * it: slab's kmalloc-8 objects are 8-aligned, bpf_mem_alloc's objects sit
	 * 8 bytes into their unit. 0: whatever the layer below gives (a cache
	 * that hands out objects of the layer below). A descriptor built before
	 * this field existed (desc_size without it) reads as 0. */
	size_t min_align;
	/* Optional: the layer's counters (counters.h), for their docs and kinds
	 * (`alloclab list LAYER`); NULL when undocumented. Read as NULL from a
	 * descriptor built before these fields existed. */
	const struct al_counter_desc *counters;
	unsigned ncounters;
};

/* desc_size of a descriptor without min_align, still accepted. */
#define AL_LAYER_DESC_SIZE_V1 offsetof(struct al_layer_desc, min_align)
/* The ops_size of a table built before free_bulk_sized: still accepted. */
#define AL_OPS_SIZE_V1 offsetof(struct al_ops, free_bulk_sized)

/* ---- dispatch helpers (what a layer uses to call the layer below) ---- */

/* On simulated CPUs every call into a layer is a term of the cost model
 * (sim.h): what a path did, where no counter says it. */
static inline void *al_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	void *p;

	if (al_likely(!__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		return a->ops->alloc(a, c, size, flags);
	al_sim_call(a, AL_SIM_CALL_ALLOC);
	p = a->ops->alloc(a, c, size, flags);
	al_sim_object_if(a, p, false);
	return p;
}

static inline int al_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED))) {
		al_sim_call(a, AL_SIM_CALL_FREE);
		al_sim_object_if(a, p, true);
	}
	return a->ops->free(a, c, p);
}

/* Free with AL_NOSPIN/AL_NOCPU: a layer without free_flags cannot
 * promise not to spin, so AL_NOSPIN gets -EBUSY; otherwise a plain free. */
static inline int al_free_flags(struct al_allocator *a, struct al_ctx *c, void *p, unsigned flags)
{
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED))) {
		al_sim_call(a, AL_SIM_CALL_FREE);
		al_sim_object_if(a, p, true);
	}
	if (a->ops->free_flags)
		return a->ops->free_flags(a, c, p, flags);
	if (flags & AL_NOSPIN)
		return -EBUSY;
	return a->ops->free(a, c, p);
}

/* Bulk calls that fall back to a loop when the layer has no native path. */
AL_API int al_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
			 void **out, unsigned flags);
AL_API int al_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n);

static inline void al_ctx_init(struct al_ctx *c, unsigned cpu)
{
	c->cpu = cpu;
	c->level = AL_CTX_TASK;
	c->err = 0;
	c->pad = 0;
}

/* Append one named value to a stats block (silently ignores overflow of v[]). */
AL_API void al_stats_add(struct al_stats *s, const char *name, uint64_t value);
/* Append a gauge: runs report its value at the end, not a difference. */
AL_API void al_stats_add_gauge(struct al_stats *s, const char *name, uint64_t value);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_OPS_H */
