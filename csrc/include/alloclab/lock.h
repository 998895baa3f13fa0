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
 * Cost: an uncontended acquire is one CAS on the ticket dispenser and one
 * load of the slot; counts go to the acquirer's per-CPU block; timed locks
 * at AL_STATS_FULL add two clock reads per hold.
 */
#ifndef ALLOCLAB_LOCK_H
#define ALLOCLAB_LOCK_H

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
#define AL_LOCK_SLOTS 4096 /* > the most waiters at once (CPUs x levels) */

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
	uint32_t ticket;	 /* the holder's ticket */
	uint32_t owner_cpu;	 /* last owner's CPU + 1 (0 = none), for owner switches */
	uint32_t holder_cpu;	 /* current holder's CPU + 1 (0 = free), for AA detection */
	uint32_t holder_level;	 /* current holder's context level */
	uint32_t ctr_idx;	 /* first of the six entries in *ctr */
	struct al_counters *ctr; /* where acquisitions are counted, or NULL (not counted) */
	uint64_t t_acquired;	 /* ticks at acquisition, when timed */
	uint64_t budget_ticks;	 /* spin budget; 0 = give up at the first check */
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
/* 0, or -ETIMEDOUT when the budget ran out, -EDEADLK when this CPU holds it at a
 * lower context level, -EBUSY when AL_LOCK_SLOTS tickets are outstanding
 * (the lock is not held on failure). */
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

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_LOCK_H */
