/* SPDX-License-Identifier: MIT */
/*
 * alloclab deferred: irq_work and RCU callbacks, the kernel's ways of doing
 * later what cannot be done now.
 *
 * A layer that must not do some work at the point it arises (an NMI cannot
 * take a lock; a freed object may still be read by a concurrent reader)
 * queues it in its struct al_defer and polls at the end of each of its
 * public entries (al_defer_poll). Grace periods are global and counted by
 * the readers the engine registers (al_rcu_online / al_rcu_quiescent).
 *
 * Concurrency: queueing irq_work is lock-free from any level, NMI included;
 * call_rcu and kfree_rcu run at task or IRQ level (-EBUSY at NMI); the work
 * itself runs at AL_CTX_IRQ (irq_work) or task level (RCU callbacks), on the
 * CPU it was queued for, or on the domain's helper thread.
 *
 * Cost: the poll is two loads and a branch when nothing is due.
 */
#ifndef ALLOCLAB_DEFERRED_H
#define ALLOCLAB_DEFERRED_H

#include <signal.h>

#include "ops.h"
#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Deferred work (DESIGN §3), in domains: a layer instance (or a workload)
 * owns one struct al_defer with per-CPU state for
 *  - irq_work: an item is queued at most once (its pending flag) on its CPU's
 *    raised list, lock-free, from any level including NMI; it runs at
 *    AL_CTX_IRQ at the end of the next top-level operation on that CPU (when
 *    the owner calls al_defer_poll() at task level: the model of the self-IPI
 *    that fires when IRQs are re-enabled). With AL_IRQ_WORK_IPI that run
 *    is entered as the kernel enters it, through an interrupt: each raise
 *    costs a real kernel entry and exit (a null system call, the entry and
 *    exit path an interrupt takes too), measured on this machine and
 *    counted (irq_work_ipis, irq_work_ipi_ns at stats=full). With
 *    AL_IRQ_WORK_SIGNAL the thread sends itself a signal instead (its
 *    handler does nothing): two system calls, a signal frame with the FPU
 *    state and sigreturn, which an interrupt taken in kernel mode does not
 *    pay: an upper bound. AL_IRQ_WORK_INLINE runs it at no cost. Or it runs on a helper thread
 *    (AL_IRQ_WORK_THREAD: PREEMPT_RT's irq_work kthread; that thread runs
 *    concurrently with the CPU's worker, so layers pass AL_NOCPU below).
 *  - RCU callbacks: al_call_rcu() (a callback per object) and al_kfree_rcu()
 *    (pointers batched and freed with one free_bulk, as kvfree_rcu does) go
 *    into the CPU's open batch; the next poll seals it and requests a grace
 *    period; it runs once every registered reader (engine worker) has passed
 *    a quiescent point after the request, and gp_latency has elapsed. With
 *    `nocb`, sealed batches run on the next CPU's poll (rcuo kthreads: remote
 *    frees). Callbacks run at task level with the executing CPU's context
 *    (softirq runs with IRQs enabled, so irq_work they raise runs at once).
 * Grace periods are global (as the kernel's RCU): readers register with
 * al_rcu_online(), report al_rcu_quiescent() between operations, and go
 * offline (an extended quiescent state) while idle. With no reader online a
 * requested grace period completes at once.
 * call_rcu and kfree_rcu are not NMI-safe (as in the kernel): -EBUSY at
 * AL_CTX_NMI. al_defer_flush() runs everything now, ignoring grace periods:
 * for drains and teardown, when no reader can hold a reference.
 *
 * RCU Tasks Trace (al_call_rcu_tasks_trace, what bpf_mem_alloc's trimmed
 * objects wait for): a grace period of its own, driven by the domain, with
 * the kernel's per-GP work and timing in jiffies of `hz` (CONFIG_HZ):
 *  - AL_TTRACE_CLASSIC, kernel/rcu/tasks.h up to the SRCU-fast rewrite (the
 *    seeds' kernels). call_rcu_tasks_generic() queues the callback lazily:
 *    the GP starts when the lazy timer fires, rcu_tasks_trace_lazy_ms
 *    (default DIV_ROUND_UP(HZ, 4) jiffies) after the first callback, or at
 *    once when the queue reaches rcu_task_lazy_lim (32) callbacks; a wake
 *    makes the next three GPs urgent (urgent_gp). Each GP
 *    (rcu_tasks_wait_gp): rcu_tasks_trace_pregp_step checks every online
 *    CPU's running task and makes every CPU but the driver's a holdout;
 *    rcu_tasks_trace_postscan waits for a plain RCU GP (synchronize_rcu,
 *    why rcu_trace_implies_rcu_gp() is true); then holdout passes after
 *    sleeps of init_fract = HZ/200 jiffies, one more each pass
 *    (check_all_holdout_tasks_trace): the first sends each holdout CPU an
 *    IPI (trc_wait_for_one_reader, a running task cannot be inspected
 *    remotely), the next finds the handler's answer and drops it. The
 *    IPI is taken on the target CPU at its next poll (a kernel entry when
 *    irq_work=ipi, the self-signal when irq_work=signal); a CPU that ran no operation for a whole
 *    pass is idle and its handler counts as run then (ttrace_ipis_idle).
 *    After the GP the kthread sleeps gp_sleep = HZ/200 jiffies.
 *  - AL_TTRACE_SRCU, v7.0's RCU Tasks Trace on SRCU-fast
 *    (call_rcu_tasks_trace is call_srcu): the GP work starts
 *    !!srcu_get_delay() = 1 jiffy after the request (srcu_funnel_gp_start);
 *    srcu_advance_state runs two scans, each summing every CPU's lock and
 *    unlock counters (srcu_readers_active_idx_check) and, for the fast
 *    flavour, waiting a plain RCU GP (synchronize_rcu) instead of a
 *    memory barrier; no IPIs; callbacks run cbdelay = 1 jiffy after the
 *    GP ends (srcu_gp_end).
 *  - AL_TTRACE_PLAIN: one plain grace period of at least gp_latency.
 * The machine advances whenever a CPU of the domain takes the poll's slow
 * path (raised irq_work, a due batch, an IPI), and its timers fire from the
 * readers' quiescent points: al_rcu_quiescent() (once per engine cycle)
 * marks every CPU of a domain whose next step is due, so that CPU's next
 * poll takes it. Callbacks run on that CPU at task level, as the kernel runs
 * them from its kthread or workqueue. One engine per domain (the kernel has
 * one for the system).
 */
struct al_irq_work {
	void (*func)(struct al_irq_work *w, struct al_ctx *c); /* runs at AL_CTX_IRQ on w->cpu */
	struct al_irq_work *next;			       /* raised-list link */
	unsigned cpu;					       /* the CPU whose list it goes on */
	int pending; /* 1 from queueing until func starts */
};

struct al_rcu_head {
	struct al_rcu_head *next;			       /* batch link */
	void (*func)(struct al_rcu_head *h, struct al_ctx *c); /* runs after the GP */
};

enum al_irq_work_mode {
	AL_IRQ_WORK_INLINE = 0, /* at the end of the top-level operation on the CPU */
	AL_IRQ_WORK_THREAD = 1, /* on the domain's helper thread */
	AL_IRQ_WORK_IPI = 2,	/* as INLINE, entered through a kernel entry (the self-IPI) */
	AL_IRQ_WORK_SIGNAL = 3	/* as INLINE, entered through a self-signal (upper bound) */
};
#define AL_IRQ_WORK_CHOICES "inline,thread,ipi,signal"
/* irq_work=signal's signal: its handler is installed once and does nothing. */
#define AL_IRQ_WORK_SIGNO (SIGRTMIN + 6)

enum {
	AL_DEFER_IRQ = 1u << 0,	   /* raised irq_work */
	AL_DEFER_RCU = 1u << 1,	   /* a new or incoming RCU batch */
	AL_DEFER_TT_IPI = 1u << 2, /* a tasks-trace GP's IPI to this CPU */
	AL_DEFER_TT = 1u << 3	   /* a tasks-trace step is due (the kthread's timer) */
};

enum al_ttrace_mode {
	AL_TTRACE_PLAIN = 0,   /* one plain grace period (al_call_rcu) */
	AL_TTRACE_CLASSIC = 1, /* tasks.h before SRCU-fast: lazy timer, holdouts, IPIs */
	AL_TTRACE_SRCU = 2     /* SRCU-fast: two counter scans, each with a plain GP */
};
#define AL_TTRACE_CHOICES "plain,classic,srcu"
/* CONFIG_HZ's Kconfig default (HZ_250): the jiffy of the tasks-trace timing. */
#define AL_TTRACE_HZ_DEFAULT 250
/* rcu_task_lazy_lim: queued callbacks that wake the GP kthread at once. */
#define AL_TTRACE_LAZY_LIM 32

/*
 * What a domain counts and al_defer_report appends to its owner's stats: a
 * layer that owns a domain lists AL_DEFER_COUNTERS(D, P) in its counters
 * X-macro, so the names are documented as reported by its stats().
 */
#define AL_DEFER_COUNTERS(D, P)                                                                 \
	D(P, irq_work_queued, 0, "", "irq_work queued")                                         \
	D(P, irq_work_busy, 0, "", "irq_work queue calls that found it already pending")        \
	D(P, irq_work_runs, 0, "", "irq_work functions run")                                    \
	D(P, irq_work_ipis, 0, "",                                                              \
	  "self-IPIs taken to run raised irq_work (irq_work=ipi or signal)")                    \
	D(P, irq_work_ipi_ns, AL_CTR_NS, "",                                                    \
	  "time in self-IPIs, tasks-trace ones too (stats=full)")                               \
	D(P, rcu_callbacks, 0, "", "call_rcu callbacks queued")                                 \
	D(P, rcu_callbacks_run, 0, "", "call_rcu callbacks run after their grace period")       \
	D(P, kfree_rcu_objects, 0, "", "objects queued by kfree_rcu")                           \
	D(P, kfree_rcu_freed, 0, "", "kfree_rcu objects freed after their grace period")        \
	D(P, kfree_rcu_failed, AL_CTR_KEY, "", "kfree_rcu frees the allocator refused")         \
	D(P, rcu_batches, 0, "", "RCU batches sealed (one grace-period request each)")          \
	D(P, rcu_batches_remote, 0, "", "batches run on another CPU (rcu_nocb)")                \
	D(P, rcu_refused, AL_CTR_KEY, "", "call_rcu/kfree_rcu refused (NMI level, no memory)")  \
	D(P, ttrace_callbacks, 0, "", "call_rcu_tasks_trace callbacks queued")                  \
	D(P, ttrace_callbacks_run, 0, "", "tasks-trace callbacks run after their grace period") \
	D(P, ttrace_gps, 0, "", "RCU Tasks Trace grace periods completed")                      \
	D(P, ttrace_cpu_checks, 0, "",                                                          \
	  "per-CPU checks of those GPs (running task or holdout; SRCU: counter reads)")         \
	D(P, ttrace_ipis, 0, "", "IPIs those GPs sent to CPUs running a holdout task")          \
	D(P, ttrace_ipis_idle, 0, "", "of them, to a CPU that ran no operation for a pass")     \
	D(P, ttrace_rcu_gps, 0, "", "plain RCU GPs those GPs waited for (synchronize_rcu)")

/* Per-CPU state read by the inline al_defer_poll(); one cache line per CPU. */
struct al_defer_cpu {
	uint64_t todo;	    /* AL_DEFER_*: raised irq_work, or a new or incoming RCU batch */
	uint64_t wait_need; /* grace period the oldest waiting batch needs, 0 = none */
	uint64_t pad[6];
};

struct al_defer {
	struct al_defer_cpu *pcpu; /* ncpu entries */
	int poll_inline;	   /* 0 in thread mode: the helper does everything */
};

struct al_defer_params {
	int irq_mode;		/* enum al_irq_work_mode */
	uint64_t gp_latency_ns; /* a grace period lasts at least this long */
	bool nocb;		/* RCU callbacks run on the next CPU (rcu_nocb) */
	int ttrace;		/* enum al_ttrace_mode of al_call_rcu_tasks_trace */
	unsigned hz;		/* jiffies per second of its timing; 0: AL_TTRACE_HZ_DEFAULT */
	int lazy_ms; /* classic: rcu_tasks_trace_lazy_ms; < 0: HZ/4 jiffies, 0: no batching */
};

/* Grace periods completed so far (global; read by the inline poll). */
AL_API extern uint64_t al_rcu_gp_done;

/* 0; -EINVAL; -ENOMEM; -EBUSY for AL_IRQ_WORK_SIGNAL when AL_IRQ_WORK_SIGNO has
 * a handler that is not ours (the program uses that signal). */
AL_API int al_defer_create(unsigned ncpu, const struct al_defer_params *p, struct al_defer **out);
/* Flushes everything, stops the helper, frees. */
AL_API void al_defer_destroy(struct al_defer *d);
AL_API void al_irq_work_init(struct al_irq_work *w, unsigned cpu,
			     void (*func)(struct al_irq_work *w, struct al_ctx *c));
/* Queue w on w->cpu (any level, any thread). false if it was already pending. */
AL_API bool al_irq_work_queue(struct al_defer *d, struct al_irq_work *w, const struct al_ctx *c);
/* 0; -EBUSY at AL_CTX_NMI; -ENOMEM when no batch could be allocated. */
AL_API int al_call_rcu(struct al_defer *d, struct al_ctx *c, struct al_rcu_head *h,
		       void (*func)(struct al_rcu_head *h, struct al_ctx *c));
AL_API int al_kfree_rcu(struct al_defer *d, struct al_ctx *c, struct al_allocator *a, void *ptr);
/* call_rcu_tasks_trace: func runs after an RCU Tasks Trace grace period (the
 * domain's `ttrace` mode). 0; -EBUSY at AL_CTX_NMI; -ENOMEM (plain mode). */
AL_API int al_call_rcu_tasks_trace(struct al_defer *d, struct al_ctx *c, struct al_rcu_head *h,
				   void (*func)(struct al_rcu_head *h, struct al_ctx *c));
/* Tasks-trace grace periods this domain has completed (a gauge for tests). */
AL_API uint64_t al_ttrace_gp_done(struct al_defer *d);
/* The poll's slow path: raised irq_work, then ready RCU batches of c's CPU. */
AL_API void al_defer_run(struct al_defer *d, struct al_ctx *c);
/* Everything queued on c's CPU (scope AL_DRAIN_CPU) or on every CPU, now. */
AL_API void al_defer_flush(struct al_defer *d, struct al_ctx *c, unsigned scope);
/* Appends the counters of AL_DEFER_COUNTERS (nothing at AL_STATS_OFF). */
AL_API void al_defer_report(struct al_defer *d, struct al_stats *out);
/* Objects and callbacks queued and not yet run (a gauge for tests). */
AL_API uint64_t al_defer_pending(struct al_defer *d);

/* Run deferred work due on c's CPU: call at the end of every public entry of a
 * layer that queues some. Only at task level (an IRQ or NMI returns first). */
static inline void al_defer_poll(struct al_defer *d, struct al_ctx *c)
{
	struct al_defer_cpu *p;
	uint64_t need;

	if (c->level != AL_CTX_TASK || !d->poll_inline)
		return;
	p = &d->pcpu[c->cpu];
	need = __atomic_load_n(&p->wait_need, __ATOMIC_RELAXED);
	if (al_likely(!__atomic_load_n(&p->todo, __ATOMIC_RELAXED) &&
		      (!need || __atomic_load_n(&al_rcu_gp_done, __ATOMIC_RELAXED) < need)))
		return;
	al_defer_run(d, c);
}

/* A grace-period reader (one per engine worker). Memory stays valid while online. */
struct al_rcu_reader {
	uint64_t seen; /* the last GP number seen started at a quiescent point */
	int slot;      /* index in the registry, -1 when offline */
} __attribute__((aligned(AL_CACHELINE)));

/* 0, or -ENOSPC when AL_RCU_MAX_READERS are online. */
#define AL_RCU_MAX_READERS 4096
AL_API int al_rcu_online(struct al_rcu_reader *r);
AL_API void al_rcu_offline(struct al_rcu_reader *r);
AL_API void al_rcu_quiescent(struct al_rcu_reader *r);
/* Start a grace period if none is running; returns the GP number that, once
 * completed (al_rcu_gp_done >= it), covers everything before the call. */
AL_API uint64_t al_rcu_gp_request(void);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_DEFERRED_H */
