/* SPDX-License-Identifier: MIT */
/*
 * alloclab engine: stacks of layers, workloads, and runs.
 *
 * A run = one fresh allocator stack, `producers` worker threads released
 * together by a barrier, warmup cycles, then a measured phase bounded by
 * cycles or by duration, then teardown that checks every layer's bytes_held
 * is back at its baseline. Python repeats runs and sweeps; each al_run() is
 * wholly in C (cffi releases the GIL around it).
 */
#ifndef ALLOCLAB_ENGINE_H
#define ALLOCLAB_ENGINE_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- stacks ---- */

struct al_layer_spec {
	const struct al_layer_desc *desc;
	int64_t params[AL_MAX_PARAMS]; /* desc->nparams values in schema order */
};

struct al_stack_spec {
	unsigned n; /* layers, [0] is the top */
	struct al_layer_spec layer[AL_MAX_LAYERS];
};

/* Builds bottom-up. 0, or -EINVAL (bad spec, err says why) / -ENOMEM. */
AL_API int al_stack_create(const struct al_stack_spec *s, unsigned ncpu, struct al_allocator **out,
			   char *err, size_t errlen);
AL_API void al_stack_destroy(struct al_allocator *top);
/* Drain every layer, top-down. */
AL_API void al_stack_drain(struct al_allocator *top, struct al_ctx *c, unsigned scope);
/* Largest request a stack spec accepts (the smallest max_size over its layers,
 * for their parameters), 0 = any. */
AL_API size_t al_spec_max_size(const struct al_stack_spec *s);
/* Stats of every layer, top first; returns how many were written (<= max). */
AL_API unsigned al_stack_stats(struct al_allocator *top, struct al_stats *out, unsigned max);

/* Non-inline entry points for Python and plugins (test hooks). */
AL_API void *al_call_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags);
AL_API int al_call_free(struct al_allocator *a, struct al_ctx *c, void *p);
AL_API int al_call_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
			      void **out, unsigned flags);
AL_API int al_call_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n);
AL_API size_t al_call_usable_size(struct al_allocator *a, const void *p);
AL_API bool al_call_owns(struct al_allocator *a, const void *p);
/* Run ops.check on every layer that has one, top first: 0 or the first error,
 * with err naming the layer and the violation. */
AL_API int al_call_check(struct al_allocator *top, char *err, size_t errlen);

/* ---- workloads ---- */

enum al_timing {
	AL_TIMING_BATCH = 0,	 /* one clock pair around a cycle's allocs, one around its frees */
	AL_TIMING_PER_OP_SUM = 1 /* a clock pair around every operation, summed */
};

/* Per-worker state handed to a workload. */
struct al_worker {
	unsigned id; /* 0..nworkers-1 */
	unsigned nworkers;
	struct al_ctx ctx;	/* this worker's CPU */
	struct al_allocator *a; /* top of the stack */
	const int64_t *params;	/* workload parameters, schema order */
	void *shared;		/* the workload's shared state (setup) */
	void *priv;		/* per-worker state (worker_init) */
	int timing;		/* enum al_timing */
	uint64_t alloc_ticks;	/* time spent in allocations */
	uint64_t free_ticks;	/* time spent in frees */
	uint64_t alloc_ops;
	uint64_t free_ops;
	uint64_t alloc_cross; /* frees of objects allocated by another worker */
	uint64_t cycles;      /* measured cycles done (set by the engine) */
	uint64_t rng;	      /* per-worker PRNG state */
	char *err;	      /* where a workload writes why it failed */
	size_t errlen;
	int measuring; /* issue 4: 1 from the first measured cycle on (set by the engine) */
};

struct al_run_result;

enum al_workload_flags {
	AL_WL_RESET = 1u << 0,	     /* allocator recreated (untimed) after every cycle */
	AL_WL_ONE_PRODUCER = 1u << 1 /* exactly one producer, as the modelled bench */
};

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
	/* One cycle. 0 or -errno (e.g. -ENOMEM with w->err filled in). */
	int (*cycle)(struct al_worker *w);
	/* Free what this worker still holds (untimed). */
	void (*worker_fini)(struct al_worker *w);
	/* Free what the shared state still holds, then release it. */
	void (*teardown)(void *shared, struct al_allocator *a, struct al_ctx *c);
	/* Optional (issue 4): after the measured phase, before worker_fini, add the
	 * workload's own results with al_result_value() (read by Python as
	 * metrics "wl.<name>"). Runs on the main thread; workers are waiting. */
	void (*report)(void *shared, unsigned nworkers, struct al_run_result *res);
};

/* ---- runs ---- */

enum al_cpu_mode {
	AL_CPU_AUTO = 0,   /* pinned when producers <= usable CPUs, else virtual */
	AL_CPU_PINNED = 1, /* one worker per CPU of the affinity mask */
	AL_CPU_VIRTUAL = 2 /* each worker is its own CPU; at most one per real CPU runs a cycle */
};

#define AL_MAX_PRODUCERS 1024

struct al_run_config {
	const struct al_workload_desc *workload;
	int64_t wparams[AL_MAX_PARAMS];
	struct al_stack_spec stack;
	unsigned producers;
	int cpu_mode; /* enum al_cpu_mode */
	int timing;   /* enum al_timing */
	uint64_t warmup_cycles;
	uint64_t cycles;      /* measured cycles per worker; 0 = bounded by duration_ns */
	uint64_t duration_ns; /* measured phase when cycles == 0 */
	uint64_t seed;
};

/* A named result of a workload (issue 4). */
#define AL_MAX_VALUES 48
struct al_value {
	const char *name; /* static string owned by the workload */
	double value;	  /* NaN when undefined (e.g. a deviation of one sample) */
};

struct al_run_result {
	int status;		  /* 0 or -errno */
	char error[256];	  /* why, when status != 0 */
	int cpu_mode;		  /* the mode used (never AUTO) */
	unsigned ncpu_model;	  /* model CPUs (= producers) */
	unsigned ncpu_concurrent; /* at most this many run a cycle at once */
	unsigned ncpu_usable;	  /* CPUs in the affinity mask */
	unsigned threads_per_core;
	int clock_tsc;
	double ticks_per_ns;
	double timer_overhead_ns; /* one clock pair */
	uint64_t cycles;	  /* measured cycles, all workers */
	uint64_t alloc_ops, free_ops, cross_frees;
	double alloc_ns; /* total measured alloc time, all workers */
	double free_ns;
	double elapsed_ns; /* wall time of the measured phase */
	double steal_pct;  /* steal time during the run, % of CPU time (from /proc/stat) */
	unsigned nlayers;
	struct al_stats layers[AL_MAX_LAYERS]; /* after the run, before drain; top first */
	int64_t leaked[AL_MAX_LAYERS];	       /* bytes_held after drain minus baseline */
	/* issue 4: named results the workload adds (al_result_value) */
	unsigned nvalues;
	struct al_value values[AL_MAX_VALUES];
};

/* 0 or -errno; res->status and res->error say the same. */
AL_API int al_run(const struct al_run_config *cfg, struct al_run_result *res);
/* Append a named workload result (issue 4); ignored when values[] is full. */
AL_API void al_result_value(struct al_run_result *res, const char *name, double value);

/* Topology helpers used by runs and recorded in results. */
AL_API unsigned al_cpus_usable(void);
AL_API unsigned al_threads_per_core(void);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_ENGINE_H */
