/* SPDX-License-Identifier: MIT */
/*
 * alloclab run: one measured run of a workload over a fresh stack.
 *
 * A run = one fresh allocator stack, `producers` worker threads released
 * together by a barrier, warmup cycles, then a measured phase bounded by
 * cycles or by duration, then teardown that checks every layer's bytes_held
 * is back at its baseline. Python repeats runs and sweeps; each al_run() is
 * wholly in C (cffi releases the GIL around it).
 *
 * Concurrency: the engine runs on a thread of its own (al_run_start); the
 * caller waits in slices, may ask it to stop from any thread, and reads the
 * result once the wait returned. A run holds no lock of the caller's.
 */
#ifndef ALLOCLAB_RUN_H
#define ALLOCLAB_RUN_H

#include "ops.h"
#include "stack.h"
#include "workload.h"
#include "measure.h"
#include "sim.h"

#ifdef __cplusplus
extern "C" {
#endif

enum al_cpu_mode {
	AL_CPU_AUTO = 0,     /* pinned when producers <= usable CPUs, else virtual */
	AL_CPU_PINNED = 1,   /* one worker per CPU of the affinity mask */
	AL_CPU_VIRTUAL = 2,  /* each worker is its own CPU; at most one per real CPU runs a cycle */
	AL_CPU_SIMULATED = 3 /* model CPUs on one thread in virtual time (sim.h): predictions */
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
	/* enum al_stats_level (counters.h) of the run's stacks; 0 = AL_STATS_LITE */
	int stats_level;
	/* Run the workers SCHED_FIFO (priority 1), as the kernel's arena lock
	 * holders run with preemption off: only with fewer producers than usable
	 * CPUs, so the main thread and the watchdog keep one; needs CAP_SYS_NICE
	 * or RLIMIT_RTPRIO >= 1 (al_run_check refuses otherwise). */
	int realtime;
	/* cpu_mode AL_CPU_SIMULATED: the simulation's cost model and options */
	struct al_sim_config sim;
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

	/* cpu_mode AL_CPU_SIMULATED: what the simulation did (times are virtual) */
	struct al_sim_stats sim;
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
/* After the run ended: 1 when threads were left running (the engine thread
 * abandoned at its watchdog, or stuck workers), which may still read the
 * configuration and what it points to: the caller must then keep all of it
 * for the life of the process. Call before al_run_free. */
AL_API int al_run_abandoned(struct al_run *r);
/* Stop the run if it goes on, wait for it, release the handle. */
AL_API void al_run_free(struct al_run *r);
/* Set a named workload result from a workload's report hook: it joins
 * the metrics merged from the workers (al_worker_metric), as "wl.<name>" in
 * Python; ignored when metrics[] is full. NaN is allowed (undefined). */
AL_API void al_result_value(struct al_run_result *res, const char *name, double value);

/* The topology helpers runs use and results record (al_cpus_usable,
 * al_threads_per_core) are the CPU model's: ctx.h. */

/* Why al_run would refuse a configuration before building anything. */
enum al_run_fault {
	AL_RUN_OK = 0,
	AL_RUN_NO_WORKLOAD,   /* no workload, or one built for another ABI */
	AL_RUN_PRODUCERS,     /* producers outside [1, AL_MAX_PRODUCERS] */
	AL_RUN_ONE_PRODUCER,  /* the workload runs exactly one producer (AL_WL_ONE_PRODUCER) */
	AL_RUN_MODE,	      /* cpu_mode or timing is not one of its values */
	AL_RUN_PINNED,	      /* cpu_mode pinned with more producers than usable CPUs */
	AL_RUN_HISTOGRAM,     /* histogram without timing per_op_sum */
	AL_RUN_NO_END,	      /* neither cycles nor duration ends the measured phase */
	AL_RUN_DISTINCT,      /* the workload needs distinct objects; a layer shares blocks */
	AL_RUN_WPARAMS,	      /* the workload's parameters (range or check_params) */
	AL_RUN_SIZE,	      /* the request size is below 1 or above the stack's max_size */
	AL_RUN_REALTIME,      /* realtime with as many producers as usable CPUs, or more */
	AL_RUN_REALTIME_PERM, /* realtime, but this process may not use SCHED_FIFO */
	AL_RUN_SIM,	      /* simulated: the workload cannot be, or the options are bad */
	AL_RUN_SIM_BUSY,      /* a simulated and a measured run at once in one process */
};

/* Check a run configuration as al_run does before it builds anything: 0, or
 * -EINVAL with *fault set (when fault is not NULL) and err saying why. */
AL_API int al_run_check(const struct al_run_config *cfg, int *fault, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_RUN_H */
