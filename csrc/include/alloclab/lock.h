/* SPDX-License-Identifier: MIT */
/*
 * alloclab lock: the spinlock every layer uses, with a spin budget in time.
 *
 * A queued (FIFO) lock that can fail: a waiter gives up after budget_ns
 * (-ETIMEDOUT), and a context that would wait on a lock its own CPU holds at
 * a lower context level fails (-EDEADLK) without waiting out its budget, as
 * the kernel's arena_spinlock and rqspinlock do. Every caller handles the
 * failure; a
 * function named *_locked is called with its lock held. With al_lock_fair
 * at 0 locks are test-and-set instead (the preload shim's choice).
 *
 * Lock order is each layer's own, stated in its design header. A lock is
 * held at one context level at a time: a nested context (IRQ, NMI) of the
 * holder's CPU that asks for it gets -EDEADLK.
 *
 * Arena mode (al_lock_set_arena) models the BPF selftests' arena_spinlock_t
 * (bpf_arena_spin_lock.h) instead: it has no deadlock check, so a nested
 * context of the holder's CPU spins until its budget runs out (-ETIMEDOUT);
 * the first waiter spins as the "pending" waiter without a queue node, every
 * further waiter needs one of its CPU's AL_ARENA_NODES queue nodes and fails
 * with -EBUSY when they are all in use (deeper nesting, or more contexts of
 * one model CPU). Failures are counted by reason (al_lock_count_reasons_in).
 *
 * Cost: an uncontended acquire is one CAS on the ticket dispenser and one
 * load of the slot; counts go to the acquirer's per-CPU block; timed locks
 * at AL_STATS_FULL add two clock reads per hold.
 */
#ifndef ALLOCLAB_LOCK_H
#define ALLOCLAB_LOCK_H

#include <signal.h>

#include "ops.h"
#include "counters.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * An array-based queue lock (Anderson): a waiter takes a ticket and spins on
 * its own slot, so handover is FIFO. A waiter whose budget runs out abandons
 * its ticket with a CAS on the slot, and the unlocker skips abandoned
 * tickets, so acquisition can fail as arena_spinlock and rqspinlock can.
 */
#define AL_LOCK_SLOTS  4096 /* > the most waiters at once (CPUs x levels) */
#define AL_ARENA_NODES 4    /* queue nodes per CPU (the header's _Q_MAX_NODES) */

/* Three entries for a lock's failures by reason, after its six (any order in
 * the layer's counters; al_lock_count_reasons_in gives the first). */
#define AL_LOCK_REASON_COUNTERS(C, P, LOCK, WHAT)                                            \
	C(P, LOCK##_timeouts, AL_CTR_KEY,                                                    \
	  "acquisitions of " WHAT " that ran out of budget (ETIMEDOUT)")                     \
	C(P, LOCK##_deadlocks, AL_CTR_KEY,                                                   \
	  "acquisitions of " WHAT " refused: held by this CPU below (EDEADLK; not in arena " \
	  "mode)")                                                                           \
	C(P, LOCK##_no_node, AL_CTR_KEY,                                                     \
	  "acquisitions of " WHAT " that found no queue node free (EBUSY)")

struct al_lock_stats {
	uint64_t acquired;	 /* successful acquisitions */
	uint64_t contended;	 /* acquisitions that had to wait */
	uint64_t failed;	 /* budget exhausted, AA deadlock, or trylock failed */
	uint64_t wait_ticks;	 /* total time waited (contended path) */
	uint64_t hold_ticks;	 /* total time held (when timed) */
	uint64_t owner_switches; /* acquisitions by a different CPU than the last */
};

/* Offsets of a lock's six entries in its layer's counters (AL_LOCK_COUNTERS). */
enum {
	AL_LOCK_ACQUIRED,
	AL_LOCK_CONTENDED,
	AL_LOCK_FAILED,
	AL_LOCK_WAIT,
	AL_LOCK_HOLD,
	AL_LOCK_OWNER_SWITCHES
};

/* Offsets of the three reason entries (AL_LOCK_REASON_COUNTERS). */
enum { AL_LOCK_TIMEOUTS, AL_LOCK_DEADLOCKS, AL_LOCK_NO_NODE };

/*
 * Everything an uncontended acquire and release touch is in the first cache
 * line (the ticket dispenser, the holder): the statistics are counted in the
 * acquirer's per-CPU block of its layer's counters (al_lock_count_in), so a
 * handoff moves the lock word and the waiter's slot only, as with
 * qspinlock. The clock is read inside the critical section only at
 * AL_STATS_FULL for a timed lock.
 */
struct al_lock {
	uint32_t next_ticket __attribute__((aligned(AL_CACHELINE))); /* ticket dispenser */
	uint32_t head;		 /* the last ticket granted: next_ticket - head <= slots */
	uint32_t tas;		 /* the lock word when !fair (test-and-set mode) */
	bool fair;		 /* queued FIFO (default) or test-and-set (al_lock_fair = 0) */
	bool timed;		 /* time holds (needs AL_STATS_FULL counters) */
	bool wait_timed;	 /* time waits (AL_STATS_FULL counters) */
	bool arena;		 /* arena_spinlock_t mode: no AA check, per-CPU nodes */
	uint32_t ticket;	 /* the holder's ticket */
	uint32_t owner_cpu;	 /* last owner's CPU + 1 (0 = none), for owner switches */
	uint32_t holder_cpu;	 /* current holder's CPU + 1 (0 = free), for AA detection */
	uint32_t holder_level;	 /* current holder's context level */
	uint32_t ctr_idx;	 /* first of the six entries in *ctr */
	struct al_counters *ctr; /* where acquisitions are counted, or NULL (not counted) */
	uint64_t t_acquired;	 /* ticks at acquisition, when timed */
	uint64_t budget_ticks;	 /* spin budget; 0 = give up at the first check */
	/* Touched by waiters only, on a line of its own (a trylock reads it):
	 * arena mode, a waiter spins nodeless; test-and-set mode, waiters. */
	uint32_t pending __attribute__((aligned(AL_CACHELINE)));
	uint32_t reason_idx; /* first of the three reason entries, or UINT32_MAX */
	uint64_t slot[AL_LOCK_SLOTS] __attribute__((aligned(AL_CACHELINE))); /* per-ticket grants */
};

/* budget_ns: how long a waiter spins before failing. timed: time holds when
 * the lock counts in AL_STATS_FULL counters (waits are timed there always;
 * an untimed lock's hold time is not reported, rather than 0). Not counted
 * until al_lock_count_in(). */
AL_API void al_lock_init(struct al_lock *l, uint64_t budget_ns, bool timed);
/* Count the lock's statistics in k's per-CPU blocks, entries idx..idx+5 as
 * declared by AL_LOCK_COUNTERS (several locks may share them: their sum). */
AL_API void al_lock_count_in(struct al_lock *l, struct al_counters *k, unsigned idx);
/* Also count failures by reason in k (set by al_lock_count_in) at idx..idx+2
 * (AL_LOCK_REASON_COUNTERS). */
AL_API void al_lock_count_reasons_in(struct al_lock *l, unsigned idx);
/* Model arena_spinlock_t (see above); call after al_lock_init, before use.
 * Ignored for a test-and-set lock (al_lock_fair = 0). */
AL_API void al_lock_set_arena(struct al_lock *l);
/* Make l a test-and-set lock, whatever al_lock_fair says: for a spinlock_t
 * that its owner CPU only trylocks on the hot path and others take rarely
 * (the page allocator's pcp->lock), where nothing ever queues and the
 * kernel pays qspinlock's uncontended cost, one cmpxchg to take it and a
 * store to release it (the queued mode pays a second atomic, the release's
 * CAS of the next slot). Call after al_lock_init, before use. */
AL_API void al_lock_set_tas(struct al_lock *l);
/* Arena mode: how many of model CPU cpu's queue nodes are in use now. */
AL_API unsigned al_lock_arena_nodes_used(unsigned cpu);
/* 0, or -ETIMEDOUT when the budget ran out, -EDEADLK when this CPU holds it at a
 * lower context level (not in arena mode), -EBUSY when AL_LOCK_SLOTS tickets
 * are outstanding or (arena mode) no queue node of this CPU is free (the
 * lock is not held on failure). */
AL_API int al_lock_acquire(struct al_lock *l, const struct al_ctx *c);
/* 0, or -EBUSY. Never waits. */
AL_API int al_lock_tryacquire(struct al_lock *l, const struct al_ctx *c);
AL_API void al_lock_release(struct al_lock *l, const struct al_ctx *c);
/* The statistics the lock counted in its counters (zero when not counted). */
AL_API void al_lock_stats_get(const struct al_lock *l, struct al_lock_stats *out);
AL_API extern unsigned al_lock_yield_mask; /* waiters yield every (mask + 1) spins */
/* Set on a thread that never shares its CPU with another worker (the
 * engine's pinned workers): its waits spin without yielding. */
AL_API void al_lock_spin_only(bool on);
/* Locks initialised while this is 0 are test-and-set locks (unfair, no convoy
 * behind a preempted waiter): the preload shim's mode, for programs with more
 * threads than CPUs. The engine keeps the default, queued FIFO locks. */
AL_API extern int al_lock_fair;
/* Signals an arena lock's task-level holder blocks while it holds it
 * (arena_spin_lock_irqsave with those signals as IRQs), or NULL (default:
 * nothing blocked). Set while no lock is held (the nmi workload's
 * context=irq, for its run). */
AL_API extern const sigset_t *al_lock_irq_mask;

/*
 * Take n locks, the first at `first` and each next one `stride` bytes on
 * (a lock member of each element of an array: stride = sizeof(element)), in
 * index order. 0 with all held, or the first acquisition's error with none
 * held (those already taken are released, in reverse).
 */
AL_API int al_lock_acquire_all(struct al_lock *first, size_t stride, unsigned n,
			       const struct al_ctx *c);
/* Release the n locks al_lock_acquire_all() took, in reverse index order. */
AL_API void al_lock_release_all(struct al_lock *first, size_t stride, unsigned n,
				const struct al_ctx *c);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_LOCK_H */
