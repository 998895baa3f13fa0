/* SPDX-License-Identifier: MIT */
/*
 * alloclab sim: simulated CPUs (DESIGN §11). N model CPUs run the real
 * worker loops and the real layer code on one OS thread, one at a time, in
 * virtual time; a discrete-event scheduler resumes the model CPU with the
 * lowest virtual clock (ties broken by a seeded PRNG), so a run is a
 * function of (workload, policy, parameters, cost table, seed).
 *
 * Execution: each model CPU is a fiber (a stack of its own and a saved
 * stack pointer) on the engine thread. Control passes only at sync points:
 * every al_lock acquire and release (core/lock.c), shared words reached
 * through al_sim_shared(), clock reads (al_ticks) and cycle boundaries. At a
 * sync point a model CPU goes on unless another has a lower clock, so a run
 * switches only where the order matters. Fibers rather than threads passing
 * a baton: a switch is a few stores and loads (a baton between OS threads is
 * a futex wake and wait, microseconds), and a cell at 8 CPUs makes tens of
 * millions of switches. What a thread would have of its own (the current
 * context, the guard's nesting) is switched with the fiber.
 *
 * Virtual time, each term from its source:
 *  - the code between two sync points (a segment) costs what a linear cost
 *    model says for what the segment did: one cost per (begin, end) kind of
 *    segment plus one per unit of every layer counter it incremented (the
 *    real code ran, so the counters are exact). The costs come from a
 *    calibration: the same simulation at one producer with the real clock,
 *    each segment timed (the timing overhead of an empty segment
 *    subtracted) and the costs fitted by non-negative least squares
 *    (alloclab.measure.sim). A counter the calibration never saw is counted
 *    and the cell marked;
 *  - lock waits with the lock's own semantics: a waiter blocks in virtual
 *    time until a release grants it (FIFO tickets), its budget runs out at
 *    its deadline (-ETIMEDOUT), or a trylock fails at once;
 *  - cache lines: an acquisition by another CPU than the lock's last owner
 *    moves the lock's line and lines_per_handoff lines of the data it
 *    protects; a shared word last written by another CPU moves its line;
 *    a free at the top of the stack moves its object's first line when
 *    another CPU wrote that line last (the link its allocator's caller
 *    stored: al_sim_object); layers' loads and read-modify-writes of data
 *    another CPU wrote move its line (al_sim_touch). Each costs
 *    line_transfer_ns. A plain store waits for nothing but takes the line,
 *    at store_fraction of a transfer (stores stream: their fetches overlap),
 *    and where this machine's reads take a line whole (read_takes_line) the
 *    writer's next access moves it back. Both come from a probe of this
 *    machine at calibration (al_sim_coherence_probe).
 *
 * Determinism: the fibers run one at a time; the only inputs are the
 * configuration, the cost table and the seed; the arena's addresses never
 * decide an order (nothing hashes a pointer on the simulated paths). During
 * a simulated run the process's clock is virtual: al_ticks() counts
 * picoseconds (al_clock.ticks_per_ns = 1000), so a measured run cannot run
 * at the same time in the same process (al_run_check refuses it).
 *
 * Concurrency: a simulation runs on one thread; several may run in one
 * process (each has its own state; the virtual clock rate is shared).
 */
#ifndef ALLOCLAB_SIM_H
#define ALLOCLAB_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AL_SIM_FEATURES	    160	 /* cost-model terms per table */
#define AL_SIM_TICKS_PER_NS 1000 /* the simulated clock counts virtual picoseconds */
#define AL_SIM_NAME	    64	 /* bytes per term name */

/* Kinds of segment ends. A segment's kind pair is a term of its own. */
enum al_sim_kind {
	AL_SIM_START = 0,  /* a fiber's start, or a barrier's release */
	AL_SIM_ACQ = 1,	   /* before a lock acquire */
	AL_SIM_REL = 2,	   /* before a lock release */
	AL_SIM_CLOCK = 3,  /* a clock read (al_ticks) */
	AL_SIM_CYCLE = 4,  /* a cycle boundary */
	AL_SIM_SHARED = 5, /* a shared word (al_sim_shared) */
	AL_SIM_END = 6,	   /* a barrier, or the fiber's end */
	AL_SIM_KIND_NR = 7
};

/*
 * The cost model, in and out. In: n named terms with their cost in ns (NaN:
 * not calibrated). Out: every term the run met, appended when new, with the
 * units seen; with calibrate, the normal equations of the segments' times
 * (xtx, xty), the number of segments and the measured empty-segment cost.
 */
struct al_sim_table {
	unsigned n;
	char name[AL_SIM_FEATURES][AL_SIM_NAME];
	double cost_ns[AL_SIM_FEATURES];
	double seen[AL_SIM_FEATURES]; /* units met in this run (counted at every level) */
	double xtx[AL_SIM_FEATURES * AL_SIM_FEATURES];
	double xty[AL_SIM_FEATURES];
	double yy;
	uint64_t nseg;	   /* segments timed (calibrate) */
	uint64_t dropped;  /* segments timed longer than the outlier cut (calibrate) */
	double null_ns;	   /* an empty segment's timing cost, subtracted */
	unsigned overflow; /* terms that did not fit */
};

/* One event of the timeline (when asked for). */
enum al_sim_event_kind { AL_SIM_EV_CYCLE, AL_SIM_EV_HOLD, AL_SIM_EV_WAIT, AL_SIM_EV_HANDOFF };
struct al_sim_event {
	uint64_t start_ps;
	uint64_t dur_ps;
	uint32_t cpu;
	uint16_t kind; /* enum al_sim_event_kind */
	uint16_t what; /* hold, wait: the lock's term index (its layer), else 0 */
};

struct al_sim_config {
	uint64_t seed;		  /* tie-breaks (the run's seed) */
	double line_transfer_ns;  /* one cache line moved between model CPUs */
	double lines_per_handoff; /* data lines a lock handoff moves besides the lock's own */
	/* shares of a transfer (0-1; al_sim_coherence_probe): a store to a line
	 * another CPU holds (stores overlap their fetches), a layer's load after
	 * the first its segment waited for (0 = a whole one); read_takes_line:
	 * a load takes another CPU's line whole (migratory sharing) */
	double store_fraction;
	double load_fraction;
	int read_takes_line;
	/* sigma of a lognormal factor (mean 1) on every segment's cost, drawn
	 * from the seeded PRNG: code does not take the same time twice, and
	 * model CPUs with equal costs would otherwise run in lockstep; 0 = off */
	double jitter;
	int calibrate; /* time segments with the real clock (one producer) */
	/* factor on the costs of segments ending in an allocation's part of the
	 * run ([0]: after an alloc or alloc_bulk at the top of the stack) or a
	 * free's ([1]); 0 = 1 */
	double phase_scale[2];
	/* ns added per call at the top of the stack of each part, to the cost of
	 * the segment it ends in, after the factor (may be negative: what the
	 * fitted costs overstate per operation; a segment's floor still holds) */
	double phase_offset_ns[2];

	struct al_sim_table *table;  /* required */
	struct al_sim_event *events; /* timeline buffer, or NULL */
	uint64_t events_max;
	size_t stack_kib; /* per model CPU; 0 = 256 */
};

struct al_sim_stats {
	uint64_t switches;	   /* fiber switches */
	uint64_t sync_points;	   /* sync points met */
	uint64_t segments;	   /* segments costed */
	uint64_t phase_calls[2];   /* calls at the top of the stack in the measured phase:
				      allocations', frees' */
	uint64_t lock_waits;	   /* acquisitions that blocked in virtual time */
	uint64_t lock_timeouts;	   /* waits that ended at their deadline */
	uint64_t handoffs;	   /* acquisitions by another CPU than the lock's last owner */
	uint64_t lines;		   /* cache lines moved (handoffs, shared words, objects) */
	uint64_t object_lines;	   /* of those: objects' lines (al_sim_object) */
	uint64_t store_lines;	   /* stores that took a line (each store_fraction of one) */
	double wait_ns;		   /* virtual time blocked on locks, all CPUs */
	double line_ns;		   /* virtual time in line transfers */
	double uncalibrated_units; /* units of terms with no cost */
	unsigned uncalibrated_terms;
	uint64_t events; /* timeline events written */
	uint64_t events_dropped;
	double virtual_ns; /* virtual time at the end of the measured phase */
};

/* The process-wide switch the inline clock reads test (0: no simulation). */
AL_API extern int al_sim_active;
/* Simulations running that track lines (al_sim_object, al_sim_touch): a
 * calibration times one CPU's code with the real clock and tracks none, so
 * the layers' reporting paths stay out of what it times. */
AL_API extern int al_sim_lines;

/* Hooks (no-ops outside a simulated CPU). */
AL_API uint64_t al_sim_ticks(int boundary); /* virtual ticks; boundary: end a segment */
AL_API void al_sim_sync(int kind);	    /* a sync point of kind (enum al_sim_kind) */
/* A shared word: a sync point, and its line moves when another CPU wrote it
 * last (write: this CPU writes it now). */
AL_API void al_sim_shared(const void *addr, bool write);
/* Spin (a workload waiting for another CPU's progress): this CPU's clock
 * moves past the next model CPU's, which then runs. */
AL_API void al_sim_yield(void);
/* Idle until `ticks` (virtual): a workload's think time. */
AL_API void al_sim_wait_until(uint64_t ticks);
/* An operation at the top of the stack (a, as al_sim_top) on object p: an
 * allocation's caller stores into it (the line becomes this CPU's, without
 * a wait), a free's caller has loaded from it (its first line moves when
 * another CPU wrote it last). The workload calls it after an allocation
 * and before a free (al_alloc and al_free do, for the top layer); other
 * layers' calls and NULL are ignored. */
AL_API void al_sim_object(const void *a, const void *p, bool freeing);
/*
 * A layer's access to data other CPUs reach too (the buddy's block headers,
 * free-list heads and chunk metadata, the transfer cache's batches). A load
 * or a read-modify-write waits for the line when another CPU wrote it last
 * and this CPU has not read it since (with read_takes_line the load takes
 * the line whole); a plain store does not wait (the store buffer holds it)
 * but pays store_fraction of a transfer to take a line another CPU holds,
 * and, when it took the line from another CPU, the CPU's next lock release
 * waits for one line (its stores drain before the release is seen, their
 * fetches overlapping). A write makes this CPU the line's only holder.
 * al_sim_touch_if is the inline test for layers' paths.
 */
enum al_sim_access { AL_SIM_LOAD, AL_SIM_RMW, AL_SIM_STORE };
AL_API void al_sim_touch(const void *p, int access);
static inline void al_sim_touch_if(const void *p, int access)
{
	if (al_unlikely(__atomic_load_n(&al_sim_lines, __ATOMIC_RELAXED)))
		al_sim_touch(p, access);
}
static inline void al_sim_object_if(const void *a, const void *p, bool freeing)
{
	if (__atomic_load_n(&al_sim_lines, __ATOMIC_RELAXED))
		al_sim_object(a, p, freeing);
}

/* Block on a lock until a release grants `ticket` (or, any: until any
 * release), or until deadline_ticks (0 = none). */
AL_API void al_sim_lock_block(const void *lock, uint32_t ticket, uint64_t deadline_ticks);
/* A release granted `ticket` (any: the lock is free for whoever comes). */
AL_API void al_sim_lock_wake(const void *lock, uint32_t ticket, bool any);
/* A lock was taken; prev_owner: its last owner's CPU + 1 (0 = none). */
AL_API void al_sim_lock_taken(const void *lock, unsigned prev_owner, const void *ctr);
AL_API void al_sim_lock_released(const void *lock);
/* Counter sets made while a simulation is being built take part in the cost
 * model (counters.c); layer: the name of the layer being created. */
AL_API void al_sim_layer_begin(const char *layer);
struct al_counters;
AL_API void al_sim_counters_add(struct al_counters *k);
AL_API void al_sim_counters_del(struct al_counters *k);
/* A call into layer instance a (a struct al_allocator), a term of the
 * running segment: "call.LAYER.alloc", ".free", ".alloc_bulk", ".free_bulk".
 * A call into the top layer (al_sim_top) starts an operation: a segment. */
enum { AL_SIM_CALL_ALLOC, AL_SIM_CALL_FREE, AL_SIM_CALL_ALLOC_BULK, AL_SIM_CALL_FREE_BULK };
AL_API void al_sim_call(const void *a, int kind);
AL_API void al_sim_top(const void *a);
/*
 * A thread of a workload or a layer (a kworker) on a simulated CPU: a
 * daemon, started on model CPU ctx->cpu (by the engine's thread or a
 * worker), runs beside the workers in virtual time and ends when fn
 * returns. al_sim_sleep_on blocks the running fiber until al_sim_wakeup of
 * the same key or, ns > 0, ns of virtual time; called by the engine's
 * thread, it runs what is awake until all of it sleeps. The engine never
 * steps past a daemon that is awake; al_sim_join_daemons (after the owner
 * told them to stop and woke them) runs them to their end. Most code uses
 * them through kthread.h. 0; -ENOENT when this thread runs no simulation
 * (start a real thread); -EBUSY past AL_SIM_DAEMONS.
 */
#define AL_SIM_DAEMONS 4
struct al_ctx;
AL_API int al_sim_daemon(void *(*fn)(void *), void *arg, struct al_ctx *ctx);
AL_API void al_sim_sleep_on(const void *key, uint64_t ns);
AL_API void al_sim_wakeup(const void *key);
AL_API void al_sim_join_daemons(void);
/* A thread-local a model CPU has of its own (a layer's nesting state):
 * switched with the fiber. addr returns this thread's copy; at most
 * AL_SIM_TLS of them, AL_SIM_TLS_BYTES each. 0, or -ENOSPC. */
#define AL_SIM_TLS	 4
#define AL_SIM_TLS_BYTES 32
AL_API int al_sim_tls_register(void *(*addr)(void), size_t size);
/* Whether this thread runs a simulation (its engine or one of its CPUs). */
AL_API bool al_sim_here(void);
/* The current model CPU, or -1 outside a simulation. */
AL_API int al_sim_cpu(void);

/* This CPU wrote a shared word under a lock (the handoff paid for its line):
 * the next reader on another CPU moves it. Not a sync point. */
AL_API void al_sim_note_write(const void *addr);

static inline void al_shared_wrote(const void *addr)
{
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		al_sim_note_write(addr);
}

/* Inline: the shared-word hook, free when no simulation runs. */
static inline void al_shared(const void *addr, bool write)
{
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		al_sim_shared(addr, write);
}

/* A one-CPU cache-line ping-pong between two real CPUs of the affinity
 * mask: ns per one-way transfer, or a negative errno (-ENODEV: fewer than
 * two usable CPUs). */
AL_API double al_sim_pingpong_ns(unsigned rounds);
/* How this machine's cache lines move between two real CPUs, ns per line
 * over `lines` lines (a power of two, 2 to 65536), each the median of
 * `tries` rounds (1 to 65536): store_ns, a stream of stores into lines the
 * other CPU wrote; load_ns, a stream of independent loads of such lines
 * (their fetches overlap); reread_ns, the writer's dependent loads of its
 * own lines after the other CPU read them (a line transfer when reads take
 * lines whole, a cache hit when they share them). 0, or a negative errno
 * (-EINVAL: bad arguments; -ENODEV: fewer than two usable CPUs). */
AL_API int al_sim_coherence_probe(unsigned lines, unsigned tries, double *store_ns, double *load_ns,
				  double *reread_ns);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_SIM_H */
