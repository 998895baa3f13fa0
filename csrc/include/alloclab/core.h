/* SPDX-License-Identifier: MIT */
/*
 * alloclab core: registry, arena (reserved VA), queued spinlock with a time
 * budget, per-CPU counters, clock, and metadata memory.
 *
 * Everything here is usable from a plugin compiled at run time against this
 * header and linked to liballoclab.so.
 */
#ifndef ALLOCLAB_CORE_H
#define ALLOCLAB_CORE_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AL_CACHELINE 64

#define al_likely(x)   __builtin_expect(!!(x), 1)
#define al_unlikely(x) __builtin_expect(!!(x), 0)
#define al_noinline    __attribute__((noinline))
#define al_cold	       __attribute__((cold))

/* ---- registry ---- */

struct al_workload_desc;

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

/* Validate params[] against a schema: 0 or -EINVAL/-ERANGE with err filled in. */
AL_API int al_params_check(const struct al_param_desc *p, unsigned n, const int64_t *v, char *err,
			   size_t errlen);
/* Fill params[] with the schema defaults. */
AL_API void al_params_default(const struct al_param_desc *p, unsigned n, int64_t *v);

/* ---- metadata memory (mmap-backed: never recurses into malloc) ---- */

AL_API void *al_meta_alloc(size_t size); /* zeroed, page-granular; NULL on failure */
AL_API void al_meta_free(void *p, size_t size);

/* ---- arena: a reserved VA range committed piece by piece ---- */

struct al_arena {
	uintptr_t base;	    /* first usable address, aligned to align */
	size_t limit;	    /* usable bytes in the reservation */
	size_t align;	    /* alignment of base (and of every grow of that size) */
	size_t used;	    /* bump offset, advanced by CAS */
	void *map;	    /* what mmap returned */
	size_t map_len;	    /* its length */
	bool populate;	    /* prefault committed memory (the kernel allocates eagerly) */
	uint64_t commits;   /* number of successful grows */
	uint64_t committed; /* bytes committed */
};

/* Reserve limit bytes (PROT_NONE) aligned to align. 0 or -ENOMEM/-EINVAL. */
AL_API int al_arena_init(struct al_arena *ar, size_t limit, size_t align, bool populate);
/* Commit the next len bytes (lock-free); NULL when the limit is reached. */
AL_API void *al_arena_grow(struct al_arena *ar, size_t len);
AL_API bool al_arena_contains(const struct al_arena *ar, const void *p);
AL_API void al_arena_destroy(struct al_arena *ar);

/* ---- clock ---- */

struct al_clock {
	int tsc;	       /* 1: rdtsc (invariant TSC), 0: CLOCK_MONOTONIC ns */
	double ticks_per_ns;   /* 1.0 without TSC */
	double overhead_ticks; /* cost of one back-to-back al_ticks() pair */
};

AL_API extern struct al_clock al_clock;
AL_API int al_clock_init(void);	  /* calibrates once; later calls are free */
AL_API uint64_t al_mono_ns(void); /* CLOCK_MONOTONIC in ns */

#if defined(__x86_64__) || defined(__i386__)
/* For measurement boundaries: lfence first, so a clock pair brackets the
 * operations between them rather than overlapping them out of order. */
static inline uint64_t al_ticks(void)
{
	if (al_likely(al_clock.tsc)) {
		unsigned lo, hi;
		__asm__ __volatile__("lfence\n\trdtsc" : "=a"(lo), "=d"(hi)::"memory");
		return ((uint64_t)hi << 32) | lo;
	}
	return al_mono_ns();
}

/* For profiling inside hot paths (lock hold and wait times): no fence, so
 * the profiling does not serialise the path it profiles. */
static inline uint64_t al_ticks_fast(void)
{
	if (al_likely(al_clock.tsc)) {
		unsigned lo, hi;
		__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
		return ((uint64_t)hi << 32) | lo;
	}
	return al_mono_ns();
}
#else
static inline uint64_t al_ticks(void)
{
	return al_mono_ns();
}

static inline uint64_t al_ticks_fast(void)
{
	return al_mono_ns();
}
#endif

static inline double al_ticks_to_ns(double ticks)
{
	return ticks / al_clock.ticks_per_ns;
}

static inline void al_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* ---- counters: per [cpu][context level], cache-line padded, merged on read ---- */

struct al_counters {
	unsigned n;		  /* counters per block */
	unsigned nblocks;	  /* ncpu * AL_CTX_NR */
	unsigned stride;	  /* u64 per block, a multiple of 8 (64 B) */
	uint64_t *v;		  /* nblocks * stride values */
	const char *const *names; /* n names */
};

/* X-macro helpers: #define FOO_COUNTERS(X) X(allocs, "doc") X(frees, "doc") */
#define AL_CTR_NAME(name, doc) #name,

AL_API int al_counters_init(struct al_counters *k, unsigned n, const char *const *names,
			    unsigned ncpu);
AL_API void al_counters_fini(struct al_counters *k);
AL_API uint64_t al_counters_sum(const struct al_counters *k, unsigned idx);
/* the sum over CPUs at one context level (AL_CTX_*): what happened in NMI */
AL_API uint64_t al_counters_sum_level(const struct al_counters *k, unsigned idx, unsigned level);
AL_API void al_counters_report(const struct al_counters *k, struct al_stats *out);

/*
 * Each [cpu][level] block has one writer at a time (a CPU runs one context per
 * level), so a relaxed load+store loses nothing to a signal handler running at
 * another level; relaxed atomics keep concurrent readers well defined.
 */
static inline void al_count(struct al_counters *k, const struct al_ctx *c, unsigned idx, uint64_t v)
{
	uint64_t *p = &k->v[(size_t)(c->cpu * AL_CTX_NR + c->level) * k->stride + idx];
	__atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

/* ---- queued spinlock with a spin budget in time ---- */

/*
 * An array-based queue lock (Anderson): a waiter takes a ticket and spins on
 * its own slot, so handover is FIFO. A waiter whose budget runs out abandons
 * its ticket with a CAS on the slot, and the unlocker skips abandoned
 * tickets, so acquisition can fail as arena_spinlock and rqspinlock can.
 */
#define AL_LOCK_SLOTS 4096 /* > the most waiters at once (CPUs x levels) */

struct al_lock_stats {
	uint64_t acquired;	 /* successful acquisitions */
	uint64_t contended;	 /* acquisitions that had to wait */
	uint64_t failed;	 /* budget exhausted, AA deadlock, or trylock failed */
	uint64_t wait_ticks;	 /* total time waited (contended path) */
	uint64_t hold_ticks;	 /* total time held (when timed) */
	uint64_t owner_switches; /* acquisitions by a different CPU than the last */
};

struct al_lock {
	uint32_t next_ticket __attribute__((aligned(AL_CACHELINE))); /* ticket dispenser */
	uint32_t head;	       /* the last ticket granted: next_ticket - head <= slots */
	uint32_t tas;	       /* the lock word when !fair (test-and-set mode) */
	bool fair;	       /* queued FIFO (default) or test-and-set (al_lock_fair = 0) */
	uint32_t ticket;       /* the holder's ticket */
	uint32_t owner_cpu;    /* last owner's CPU + 1 (0 = none), for owner switches */
	uint32_t holder_cpu;   /* current holder's CPU + 1 (0 = free), for AA detection */
	uint32_t holder_level; /* current holder's context level */
	bool timed;	       /* measure hold time */
	uint64_t t_acquired;   /* ticks at acquisition, when timed */
	uint64_t budget_ticks; /* spin budget; 0 = give up at the first check */
	struct al_lock_stats st __attribute__((aligned(AL_CACHELINE)));
	uint64_t slot[AL_LOCK_SLOTS] __attribute__((aligned(AL_CACHELINE))); /* per-ticket grants */
};

/* budget_ns: how long a waiter spins before failing. */
AL_API void al_lock_init(struct al_lock *l, uint64_t budget_ns, bool timed);
/* 0, or -ETIMEDOUT when the budget ran out, -EDEADLK when this CPU holds it at a
 * lower context level, -EBUSY when AL_LOCK_SLOTS tickets are outstanding
 * (the lock is not held on failure). */
AL_API int al_lock_acquire(struct al_lock *l, const struct al_ctx *c);
/* 0, or -EBUSY. Never waits. */
AL_API int al_lock_tryacquire(struct al_lock *l, const struct al_ctx *c);
AL_API void al_lock_release(struct al_lock *l, const struct al_ctx *c);
/* Appends lock_acquired, lock_contended, ... (names[]; times in ns) to out. */
AL_API void al_lock_report(const struct al_lock *l, const char *const names[6],
			   struct al_stats *out);
/* For layers with many locks: sum them, then report the sum. */
AL_API void al_lock_stats_add(const struct al_lock *l, struct al_lock_stats *sum);
AL_API void al_lock_stats_report(const struct al_lock_stats *st, const char *const names[6],
				 struct al_stats *out);
AL_API extern const char *const al_lock_stat_names[6]; /* "lock_acquired", ... */
AL_API extern unsigned al_lock_yield_mask;	       /* waiters yield every (mask + 1) spins */
/* Locks initialised while this is 0 are test-and-set locks (unfair, no convoy
 * behind a preempted waiter): the preload shim's mode, for programs with more
 * threads than CPUs. The engine keeps the default, queued FIFO locks. */
AL_API extern int al_lock_fair;

/* ---- misc ---- */

static inline unsigned al_fls64(uint64_t x) /* index of the highest set bit + 1; 0 for 0 */
{
	return x ? 64 - (unsigned)__builtin_clzll(x) : 0;
}

AL_API const char *al_version(void);
/* The malloc serving this process: index into "glibc,jemalloc,gperftools-tcmalloc,mimalloc"
 * (the `system` layer's allocator choices). */
AL_API int al_system_allocator(void);
AL_API const char *al_build_flags(void); /* compiler and flags the library was built with */
AL_API const char *al_strerror(int err); /* "ENOMEM", "EINVAL", ... */

/* ---- the running thread's context, fault injection, deferred work ---- */

/*
 * The context of the worker running on this thread, so that a signal handler
 * (the NMI model) can derive its own: same CPU, level AL_CTX_NMI. One
 * initial-exec TLS pointer: reading it never allocates, so it is
 * async-signal-safe. The engine sets it for each worker; tests set their own.
 */
AL_API struct al_ctx *al_ctx_current(void);
AL_API void al_ctx_set_current(struct al_ctx *c);

/* A context nested in c (same CPU) at `level`: what an interrupt or an NMI
 * arriving while c runs uses. */
static inline void al_ctx_nested(struct al_ctx *out, const struct al_ctx *c, unsigned level)
{
	out->cpu = c->cpu;
	out->level = level;
	out->err = 0;
	out->pad = 0;
}

/*
 * Fault injection for deterministic tests: layers call AL_INJECT("layer.point",
 * c, arg) at the instants a test needs to interrupt (e.g. "bpf_ma.active":
 * the per-CPU `active` counter is held). A test installs a hook that runs a
 * nested operation there, at AL_CTX_NMI, exactly as an NMI arriving at that
 * instruction would. Without a hook the cost is one load and a branch.
 */
typedef void (*al_inject_fn)(const char *point, struct al_ctx *c, void *arg);
AL_API extern al_inject_fn al_inject_hook;

#define AL_INJECT(point, c, arg)                                                         \
	do {                                                                             \
		al_inject_fn _al_f = __atomic_load_n(&al_inject_hook, __ATOMIC_RELAXED); \
		if (al_unlikely(_al_f))                                                  \
			_al_f(point, c, arg);                                            \
	} while (0)

/*
 * Deferred work (DESIGN §3), in domains: a layer instance (or a workload)
 * owns one struct al_defer with per-CPU state for
 *  - irq_work: an item is queued at most once (its pending flag) on its CPU's
 *    raised list, lock-free, from any level including NMI; it runs at
 *    AL_CTX_IRQ at the end of the next top-level operation on that CPU (when
 *    the owner calls al_defer_poll() at task level: the model of the self-IPI
 *    that fires when IRQs are re-enabled), or on a helper thread
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
	AL_IRQ_WORK_THREAD = 1	/* on the domain's helper thread */
};
#define AL_IRQ_WORK_CHOICES "inline,thread"

enum { AL_DEFER_IRQ = 1u << 0, AL_DEFER_RCU = 1u << 1 };

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
};

/* Grace periods completed so far (global; read by the inline poll). */
AL_API extern uint64_t al_rcu_gp_done;

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
/* The poll's slow path: raised irq_work, then ready RCU batches of c's CPU. */
AL_API void al_defer_run(struct al_defer *d, struct al_ctx *c);
/* Everything queued on c's CPU (scope AL_DRAIN_CPU) or on every CPU, now. */
AL_API void al_defer_flush(struct al_defer *d, struct al_ctx *c, unsigned scope);
/* Appends irq_work_queued, irq_work_runs, rcu_callbacks, kfree_rcu_objects, ... */
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
#endif /* ALLOCLAB_CORE_H */
