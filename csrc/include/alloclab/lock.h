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
 * load of the slot; stats are updated by the holder with relaxed stores;
 * timed locks add two clock reads per hold.
 */
#ifndef ALLOCLAB_LOCK_H
#define ALLOCLAB_LOCK_H

#include "ops.h"

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

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_LOCK_H */
