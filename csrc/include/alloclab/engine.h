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
/* A layer's declared min_align (0 = that of the layer below). */
AL_API size_t al_layer_min_align(const struct al_layer_desc *d);
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

/* ---- workloads ---- */

enum al_timing {
	AL_TIMING_BATCH = 0,	 /* one clock pair around a cycle's allocs, one around its frees */
	AL_TIMING_PER_OP_SUM = 1 /* a clock pair around every operation, summed */
};

struct al_hist;
/*
 * Workload metrics: named results a workload reports beyond the
 * engine's alloc/free figures (e.g. test_vmalloc's per-test "avg usec" and
 * passed/failed counts). A worker adds values with al_worker_metric() during
 * its cycles or in worker_fini; values added in the warmup are discarded
 * with the rest of the warmup. al_run() merges every worker's metrics by
 * name into al_run_result.metrics; Python reports them as "wl.<name>".
 */
#define AL_METRICS_MAX 128 /* named metrics per worker and per run */

enum al_metric_kind {
	AL_METRIC_SUM = 0,  /* the sum of every value added, all workers */
	AL_METRIC_MEAN = 1, /* the mean of every value added (over cycles and workers) */
	AL_METRIC_MAX = 2   /* the largest value added */
};

struct al_metric {
	const char *name; /* static string owned by the workload */
	double value;	  /* sum (SUM, and MEAN until al_run divides), or max (MAX) */
	uint64_t count;	  /* values added */
	unsigned kind;	  /* enum al_metric_kind */
	unsigned pad;
};

struct al_worker;

/* Add one value to the worker's metric `name` (appended on first use; names
 * are compared as strings). Ignored when the storage is full or absent. A
 * name keeps the kind it was first added with. */
AL_API void al_worker_metric(struct al_worker *w, const char *name, double value, unsigned kind);

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
	struct al_hist *hist; /* per-op latency [AL_HIST_ALLOC], [AL_HIST_FREE]; NULL = off */
	int64_t live_bytes;   /* requested and not freed by this worker (AL_WL_LIVE; may be < 0) */
	struct al_metric *metrics; /* named results of this worker (al_worker_metric) */
	unsigned nmetrics;	   /* entries used in metrics[] */
	unsigned metrics_max;	   /* capacity of metrics[]; 0 = the worker keeps none */
	int measuring;		   /* 1 from the first measured cycle on (set by the engine) */
	/* Set by the engine for al_worker_stopping(): the run's stop flag and
	 * the end of the current phase in al_ticks() (0 = none). */
	const int *stop;
	uint64_t deadline;
	int cut; /* al_worker_stopping() said stop during this phase */
};

/*
 * For workloads whose cycle is a long fixed loop (test_vmalloc): true when
 * the run is stopping (al_run_stop, a failed worker, the watchdog) or the
 * phase's duration is over, so the loop should end early and clean up as
 * it would at its end. Returning true marks the cycle cut: the engine then
 * reports the run as truncated. Costs one load and one clock read.
 */
static inline bool al_worker_stopping(struct al_worker *w)
{
	if ((w->stop && __atomic_load_n(w->stop, __ATOMIC_RELAXED)) ||
	    (w->deadline && al_ticks() >= w->deadline)) {
		w->cut = 1;
		return true;
	}
	return false;
}

struct al_run_result;

enum al_workload_flags {
	AL_WL_RESET = 1u << 0,	      /* allocator recreated (untimed) after every cycle */
	AL_WL_ONE_PRODUCER = 1u << 1, /* exactly one producer, as the modelled bench */
	AL_WL_LIVE = 1u << 2,	      /* workers keep live_bytes (al_worker_live) */
	/* Needs distinct objects: it links objects through their memory, checks
	 * their contents, or keeps them live while other workers write theirs;
	 * a stack with an AL_F_SHARED_BLOCKS layer (null) is refused */
	AL_WL_DISTINCT = 1u << 3,
	/* What a policy must be, known before a run (Python checks it when it
	 * plans; the workload refuses others again when it starts): */
	AL_WL_NMI = 1u << 8, /* calls the policy at NMI: an NMI-safe stack (al_stack_nmi_unsafe) */
	AL_WL_VMALLOC = 1u << 9 /* drives vmalloc's own API: a vmalloc layer on top */
};

/* AL_WL_LIVE workloads: the bytes requested and not yet freed changed by
 * delta. Call outside timed regions; one writer per worker (the memory
 * sampler reads every worker's live_bytes while the run goes on). */
static inline void al_worker_live(struct al_worker *w, int64_t delta)
{
	__atomic_store_n(&w->live_bytes, w->live_bytes + delta, __ATOMIC_RELAXED);
}

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
};

/* The nmi workload: the highest timer-signal rate per worker this machine
 * delivers while leaving a worker a fifth of its time (measured once per
 * process, ~0.1 s), and the CPU cost of one signal in ns; 0 when it could
 * not be measured. Higher rates are refused (-ERANGE) before a run. */
AL_API double al_nmi_max_rate(double *signal_ns);

/* ---- per-operation latency histograms ---- */

/*
 * Log-linear buckets, as HdrHistogram's: values 0..15 have a bucket each;
 * every power-of-two range [2^k, 2^(k+1)), k >= 4, is split into 16 linear
 * sub-buckets of width 2^(k-4). A bucket is at most 1/16 as wide as its
 * lower bound, so a percentile read from the buckets is within 6.25% of the
 * true value. 976 buckets cover all of uint64_t; values are clock ticks.
 * One histogram per worker per operation kind (one writer, no atomics),
 * merged after the workers are joined. Recording costs a clock pair per
 * operation (the workload times each one) plus a bucket increment.
 */
#define AL_HIST_SUB_BITS 4
#define AL_HIST_SUB	 (1u << AL_HIST_SUB_BITS) /* linear sub-buckets per power of two */
#define AL_HIST_BUCKETS	 ((64 - AL_HIST_SUB_BITS + 1) * AL_HIST_SUB)

enum al_hist_op { AL_HIST_ALLOC = 0, AL_HIST_FREE = 1, AL_HIST_NR = 2 };

struct al_hist {
	uint64_t count;		     /* values recorded */
	uint64_t sum;		     /* their sum */
	uint64_t min;		     /* smallest value (UINT64_MAX when empty) */
	uint64_t max;		     /* largest value (0 when empty) */
	uint64_t b[AL_HIST_BUCKETS]; /* values per bucket */
};

/* The bucket of a value. */
static inline unsigned al_hist_bucket(uint64_t v)
{
	unsigned shift;

	if (v < AL_HIST_SUB)
		return (unsigned)v;
	shift = al_fls64(v) - AL_HIST_SUB_BITS - 1; /* v >> shift is in [16, 31] */
	return (shift + 1) * AL_HIST_SUB + (unsigned)(v >> shift) - AL_HIST_SUB;
}

static inline void al_hist_record(struct al_hist *h, uint64_t v)
{
	h->b[al_hist_bucket(v)]++;
	h->count++;
	h->sum += v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

AL_API void al_hist_reset(struct al_hist *h); /* empty */
AL_API void al_hist_merge(struct al_hist *dst, const struct al_hist *src);
AL_API uint64_t al_hist_bucket_lo(unsigned i); /* smallest value of bucket i */
AL_API uint64_t al_hist_bucket_hi(unsigned i); /* largest value of bucket i */

/* ---- memory during a run ---- */

/*
 * The engine's main thread samples memory while it waits for the measured
 * phase to end: at the start and the end of the phase (workers quiescent)
 * and every mem_sample_ns in between. A sample reads
 *  - requested: the sum of the workers' live_bytes (AL_WL_LIVE workloads:
 *    bytes asked for and not yet freed, updated per batch, outside timed
 *    regions), -1 when the workload does not keep it;
 *  - held: the bottom layer's bytes_held (what the stack took from its
 *    backing memory for the workload, caches above included); in between
 *    the ends only when the bottom layer has AL_F_STATS_ANYTIME (its
 *    stats() may run while workers operate), else at the ends only;
 *  - rss: the resident set size (/proc/self/statm, kept open).
 * A sample costs a few microseconds on the unpinned main thread, which
 * sleeps between samples. Peaks are of the samples: a lower bound of the
 * true peak, close when the peak lasts longer than a period.
 */
struct al_mem {
	uint64_t samples;	/* samples taken (rss, requested) */
	uint64_t held_samples;	/* of which held was read; 2 = only the two ends */
	int64_t held;		/* bottom layer's bytes_held at the end of the phase */
	int64_t held_peak;	/* the largest held sampled */
	int64_t requested;	/* workers' live bytes at the end; -1 unknown */
	int64_t requested_peak; /* the largest sampled; -1 unknown */
	uint64_t rss_start;	/* resident set size (bytes) at the start of the phase */
	uint64_t rss;		/* at the end */
	uint64_t rss_peak;	/* the largest sampled */
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
	int histogram;		/* per-op latency histograms (needs AL_TIMING_PER_OP_SUM) */
	uint64_t mem_sample_ns; /* memory sampling period in the measured phase; 0 = ends only */
	/* End the run with -ETIMEDOUT when no worker makes progress for
	 * this long (stuck workers are left running, the allocator leaked); 0 = off */
	uint64_t watchdog_ns;
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
	struct al_hist hist[AL_HIST_NR];       /* per-op latency, ticks, all workers (histogram) */
	struct al_mem mem;		       /* memory during the measured phase */

	/* Scheduling during the measured phase: what makes the numbers noisy. */
	uint64_t worker_nvcsw;	 /* workers' voluntary context switches (they blocked), summed */
	uint64_t worker_nivcsw;	 /* workers' involuntary context switches (preempted), summed */
	uint64_t engine_wakeups; /* main thread's timed wake-ups (memory samples, watchdog) */
	uint64_t engine_wakeups_on_worker_cpus; /* of which on a CPU a worker is pinned to */
	uint64_t engine_cpus; /* CPUs the main thread woke up on: bit i = CPU i (CPUs 0-63) */

	/* Workload metrics merged from the workers (MEAN already divided). */
	unsigned nmetrics;
	struct al_metric metrics[AL_METRICS_MAX];

	/* Workers whose measured phase was cut short by duration_ns: a cycle
	 * ended early (al_worker_stopping) or fewer than `cycles` cycles ran.
	 * Such a run's figures are not those of the whole loop asked for. */
	unsigned truncated;
};

/* 0 or -errno; res->status and res->error say the same. Equivalent to
 * al_run_start + al_run_wait(UINT64_MAX) + al_run_free. */
AL_API int al_run(const struct al_run_config *cfg, struct al_run_result *res);

/*
 * A run in the background, so that the caller can wait in slices and stop
 * it (Ctrl-C): al_run_start() runs the engine on a thread of its own, with
 * the asynchronous signals (SIGINT, SIGTERM, ...) blocked in it and in its
 * workers, so they are delivered to the caller's threads. `res` must stay
 * valid until al_run_wait() has returned something other than -EINPROGRESS
 * or al_run_free() has returned.
 *
 * al_run_stop() asks the run to end: workers stop at their next cycle
 * boundary (long loops inside a cycle check al_worker_stopping), finish,
 * and the allocator is torn down as usual; the run then ends with
 * -ECANCELED. Workers that do not stop within AL_RUN_STOP_GRACE_NS are left
 * running and the allocator leaked, as the watchdog does.
 *
 * While the engine thread itself works (creating the stack, the workload's
 * setup and teardown, draining, destroying), al_run_wait() is its watchdog:
 * no step finished within watchdog_ns (or the stop grace after a stop) ends
 * the run with -ETIMEDOUT ("watchdog: ... in <step>") or -ECANCELED, the
 * engine thread is left running and everything it holds leaked.
 */
#define AL_RUN_STOP_GRACE_NS 1000000000ull

enum al_run_phase {
	AL_RUN_SETUP = 0,    /* creating the stack, the workload's setup, starting workers */
	AL_RUN_WARMUP = 1,   /* warmup cycles */
	AL_RUN_MEASURED = 2, /* the measured phase */
	AL_RUN_FINISH = 3,   /* worker_fini, joins, teardown, leak check, destroy */
	AL_RUN_DONE = 4
};

struct al_run;
/* 0 and *out set, or -errno (res->error says why; nothing to free). */
AL_API int al_run_start(const struct al_run_config *cfg, struct al_run_result *res,
			struct al_run **out);
/* Wait up to timeout_ns (UINT64_MAX = until done): -EINPROGRESS while the
 * run goes on, else its status (res filled in). */
AL_API int al_run_wait(struct al_run *r, uint64_t timeout_ns);
/* Ask the run to stop (any thread, any time, more than once). */
AL_API void al_run_stop(struct al_run *r);
/* The run's phase (enum al_run_phase) and a count that grows as workers
 * change state and finish cycles. */
AL_API int al_run_phase(struct al_run *r, uint64_t *progress);
/* Stop the run if it goes on, wait for it, release the handle. */
AL_API void al_run_free(struct al_run *r);
/* Set a named workload result from a workload's report hook: it joins
 * the metrics merged from the workers (al_worker_metric), as "wl.<name>" in
 * Python; ignored when metrics[] is full. NaN is allowed (undefined). */
AL_API void al_result_value(struct al_run_result *res, const char *name, double value);

/* Topology helpers used by runs and recorded in results. */
AL_API unsigned al_cpus_usable(void);
AL_API unsigned al_threads_per_core(void);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_ENGINE_H */
