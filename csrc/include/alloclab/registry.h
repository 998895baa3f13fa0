/* SPDX-License-Identifier: MIT */
/*
 * alloclab registry: the layers and workloads this process knows, by name.
 *
 * Built-in descriptors are found through ELF sections (AL_REGISTER_LAYER,
 * AL_REGISTER_WORKLOAD below) on the registry's first use; plugins register
 * at run time, from their constructor or through the function table
 * (struct al_api) handed to extension modules. A name is registered once:
 * the tables only grow, and a descriptor stays valid for the life of the
 * process (a plugin is never unloaded).
 *
 * Concurrency: lookups take no lock and never allocate (the tables are fixed
 * arrays published with a release store of their count), so they are safe
 * from any thread and from a malloc running in another library's
 * constructor. Registration is serialised by an internal spinlock; it is
 * rare and never on a hot path. Cost: a lookup by name is a linear scan of
 * at most a few dozen entries.
 */
#ifndef ALLOCLAB_REGISTRY_H
#define ALLOCLAB_REGISTRY_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct al_worker;
struct al_run_result;

/* A layer's declared min_align (0 = that of the layer below): what a
 * descriptor of an older, shorter layout leaves out reads as 0. */
AL_API size_t al_layer_min_align(const struct al_layer_desc *d);

/* What a workload registers (workload.h: the worker it runs with). */
struct al_workload_desc {
	unsigned abi_version; /* AL_ABI_VERSION */
	size_t desc_size;     /* sizeof(struct al_workload_desc) */
	const char *name;
	const char *doc;
	unsigned flags;
	unsigned nparams;
	const struct al_param_desc *params;
	int size_param; /* index of the param holding the object size, or -1 */
	/* Shared state; may be NULL. 0 or -errno. */
	int (*setup)(const int64_t *params, unsigned nworkers, void **shared);
	int (*worker_init)(struct al_worker *w);
	/* One cycle. 0, -errno (e.g. -ENOMEM with w->err filled in), or
	 * AL_CYCLE_DONE (AL_WL_FINITE): this worker's part of the phase is done. */
	int (*cycle)(struct al_worker *w);
	/* Free what this worker still holds (untimed). */
	void (*worker_fini)(struct al_worker *w);
	/* Free what the shared state still holds, then release it. */
	void (*teardown)(void *shared, struct al_allocator *a, struct al_ctx *c);
	/* Optional: untimed allocations by the main thread before the workers
	 * start (larson's warm-up blocks, cache-scratch's handed-out objects). */
	int (*prepare)(void *shared, struct al_allocator *a, struct al_ctx *c, char *err,
		       size_t errlen);
	/* Optional: after the measured phase, before worker_fini, add the
	 * workload's own results with al_result_value() (read by Python as
	 * metrics "wl.<name>"). Runs on the main thread; workers are waiting. */
	void (*report)(void *shared, unsigned nworkers, struct al_run_result *res);
	/* Optional: what the schema's per-parameter ranges cannot say (larson:
	 * min_size <= max_size; a thread count that must match the workers),
	 * for nworkers workers. 0, or -EINVAL with err filled in naming the
	 * values. al_run calls it before building anything. */
	int (*check_params)(const int64_t *params, unsigned nworkers, char *err, size_t errlen);
	/* Optional: the model CPUs the stack is built for, at least nworkers;
	 * those above nworkers belong to the workload's own threads (the
	 * local-storage reaper, where exited tasks' storage is freed). NULL:
	 * nworkers. */
	unsigned (*model_cpus)(const int64_t *params, unsigned nworkers);
	/* Optional, with threads of the workload's own: pause(shared, true)
	 * stops them at a point where their counts are whole, pause(shared,
	 * false) lets them go on. The engine pauses them around its counter
	 * snapshots and the report, so that a snapshot is taken while nothing
	 * runs (a counter read beside another that moves can make a derived
	 * one, allocs minus fallbacks, run backwards). */
	void (*pause)(void *shared, bool on);
};

/* 0, -EEXIST (name taken), -EINVAL (bad descriptor or ABI), -ENOSPC (table full). */
AL_API int al_layer_register(const struct al_layer_desc *d);
AL_API unsigned al_layer_count(void);
AL_API const struct al_layer_desc *al_layer_get(unsigned i);
AL_API const struct al_layer_desc *al_layer_find(const char *name);

AL_API int al_workload_register(const struct al_workload_desc *d);
AL_API unsigned al_workload_count(void);
AL_API const struct al_workload_desc *al_workload_get(unsigned i);
AL_API const struct al_workload_desc *al_workload_find(const char *name);

/*
 * Presets: policies by a short name, each a canonical spec with a one-line
 * doc. al_spec_parse reads a preset's name as its spec (a preset stands
 * alone: it is no layer of a stack). Peer presets name a real allocator (the
 * system layer); they run in a child process under LD_PRELOAD, never inside
 * the preload shim, which refuses them by name. The table is fixed at build
 * time, so lookups take no lock and never allocate.
 */
enum al_preset_where {
	AL_PRESET_IN_PROCESS = 0, /* a stack of alloclab's layers, here or in the shim */
	AL_PRESET_PEER = 1,	  /* a real allocator, run in a child process */
};

struct al_preset {
	const char *name;
	const char *spec; /* canonical: what Policy(spec) prints back */
	const char *doc;  /* one line */
	unsigned where;	  /* enum al_preset_where */
};

AL_API unsigned al_preset_count(void);
AL_API const struct al_preset *al_preset_get(unsigned i);
AL_API const struct al_preset *al_preset_find(const char *name);

/*
 * Registration of a layer or workload descriptor defined in this source.
 *
 * Each use leaves a pointer to the descriptor in a dedicated ELF section
 * (al_layers / al_workloads). The registry walks the sections of the object
 * it is linked into (liballoclab.so, the preload shim, a shim with plugins
 * linked in) on its first use, so built-in layers are found from the very
 * first call, even by a malloc that runs in another library's constructor
 * before ours have run: nothing depends on constructor order.
 *
 * A plugin built as its own shared object has its own sections, which the
 * library cannot see; the constructor emitted alongside registers it when it
 * is loaded (for descriptors already found in the section it is a no-op).
 */
#define AL_REGISTER_LAYER(desc)                                                               \
	static const struct al_layer_desc *const al_layer_entry_##desc                        \
		__attribute__((used, section("al_layers"), aligned(sizeof(void *)))) = &desc; \
	__attribute__((constructor)) static void al_register_##desc(void)                     \
	{                                                                                     \
		(void)al_layer_register(&desc);                                               \
	}
#define AL_REGISTER_WORKLOAD(desc)                                                               \
	static const struct al_workload_desc *const al_workload_entry_##desc                     \
		__attribute__((used, section("al_workloads"), aligned(sizeof(void *)))) = &desc; \
	__attribute__((constructor)) static void al_register_##desc(void)                        \
	{                                                                                        \
		(void)al_workload_register(&desc);                                               \
	}

/*
 * The registry as a table of function pointers, for extension modules built
 * outside alloclab: Python hands it out as a PyCapsule named "alloclab._C_API"
 * (alloclab.plugin.api_capsule()), as NumPy exports its C API. Check
 * abi_version and size before use.
 */
struct al_api {
	unsigned abi_version; /* AL_ABI_VERSION */
	size_t size;	      /* sizeof(struct al_api) */
	int (*layer_register)(const struct al_layer_desc *d);
	const struct al_layer_desc *(*layer_find)(const char *name);
	int (*workload_register)(const struct al_workload_desc *d);
	const struct al_workload_desc *(*workload_find)(const char *name);
	int (*alloc_bulk)(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
			  void **out, unsigned flags);
	int (*free_bulk)(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n);
	void *(*meta_alloc)(size_t size);
	void (*meta_free)(void *p, size_t size);
};

AL_API const struct al_api *al_get_api(void);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_REGISTRY_H */
