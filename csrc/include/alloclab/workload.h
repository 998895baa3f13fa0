/* SPDX-License-Identifier: MIT */
/*
 * alloclab workload: what a run drives the allocator with.
 *
 * A workload is a descriptor (struct al_workload_desc, in registry.h) of hooks the engine
 * calls: setup (shared state, main thread), worker_init, cycle (one
 * iteration, on each worker), worker_fini and teardown, and optional
 * prepare, report and check_params. Each worker gets a struct al_worker: its
 * model CPU context, the top of the stack, its parameters, its counters and
 * timings, its latency histograms and its named metrics.
 *
 * Concurrency: a struct al_worker has one writer, its worker thread, except
 * for the fields the engine sets between phases (cycles, measuring, stop,
 * deadline) and live_bytes, which the engine's memory sampler reads with
 * relaxed loads while the run goes on. Shared state is the workload's own to
 * synchronise. Cost: the engine adds a clock pair per cycle (batch timing)
 * or per operation (per-op timing); al_worker_stopping() is one load and
 * one clock read.
 */
#ifndef ALLOCLAB_WORKLOAD_H
#define ALLOCLAB_WORKLOAD_H

#include "ops.h"
#include "clock.h"
#include "registry.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* A cycle's return: the worker has finished its part of the phase. */
#define AL_CYCLE_DONE 1

enum al_workload_flags {
	AL_WL_RESET = 1u << 0,	      /* allocator recreated (untimed) after every cycle */
	AL_WL_ONE_PRODUCER = 1u << 1, /* exactly one producer, as the modelled bench */
	AL_WL_LIVE = 1u << 2,	      /* workers keep live_bytes (al_worker_live) */
	/* Needs distinct objects: it links objects through their memory, checks
	 * their contents, or keeps them live while other workers write theirs;
	 * a stack with an AL_F_SHARED_BLOCKS layer (null) is refused */
	AL_WL_DISTINCT = 1u << 3,
	/* Its work is finite (replay: one pass of a trace): a cycle returns
	 * AL_CYCLE_DONE once the worker's part of the phase is done, and the
	 * worker then leaves the phase. A measured phase that ends before
	 * (duration, stop) is reported truncated; the phase may be bounded by
	 * neither cycles nor duration (it ends when every worker is done). */
	AL_WL_FINITE = 1u << 4,
	/* What a policy must be, known before a run (Python checks it when it
	 * plans; the workload refuses others again when it starts): */
	AL_WL_NMI = 1u << 8, /* calls the policy at NMI: an NMI-safe stack (al_stack_nmi_unsafe) */
	AL_WL_VMALLOC = 1u << 9, /* drives vmalloc's own API: a vmalloc layer on top */
	/* runs on simulated CPUs: its workers never block outside al_lock and
	 * run no threads of their own (sim.h) */
	AL_WL_SIM = 1u << 10
};

/* AL_WL_LIVE workloads: the bytes requested and not yet freed changed by
 * delta. Call outside timed regions; one writer per worker (the memory
 * sampler reads every worker's live_bytes while the run goes on). */
static inline void al_worker_live(struct al_worker *w, int64_t delta)
{
	__atomic_store_n(&w->live_bytes, w->live_bytes + delta, __ATOMIC_RELAXED);
}

/* The nmi workload: the highest timer-signal rate per worker this machine
 * delivers while leaving a worker a fifth of its time (measured once per
 * process, ~0.1 s), and the CPU cost of one signal in ns; 0 when it could
 * not be measured. Higher rates are refused (-ERANGE) before a run. */
AL_API double al_nmi_max_rate(double *signal_ns);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_WORKLOAD_H */
