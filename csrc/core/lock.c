/* SPDX-License-Identifier: MIT */
/*
 * A queued spinlock with a spin budget in time (models arena_spinlock_t /
 * rqspinlock: acquisition can fail, and every caller handles the failure).
 *
 * Algorithm: Anderson's array-based queue lock with abandonment.
 *  - next_ticket hands out tickets (fetch_add); ticket t spins on its own
 *    slot[t % AL_LOCK_SLOTS], so waiters do not share a spinning word and
 *    handover is FIFO (fair), like the MCS queue of qspinlock.
 *  - A slot holds 0 (empty), GRANT(t) or ABANDON(t). The holder of ticket t
 *    releases by CAS-ing slot[t+1] from 0 to GRANT(t+1); if that slot holds
 *    ABANDON(t+1) it clears it and tries t+2, and so on. A granted slot whose
 *    ticket has not been taken yet simply waits for it (lock free).
 *  - A waiter whose budget runs out CASes its slot from 0 to ABANDON(t). If
 *    the CAS fails the grant arrived first, so it owns the lock after all.
 *    Exactly one of (grant, abandon) wins each slot: nothing is lost.
 *  - A context that finds the lock held by its own CPU at a lower level (an
 *    "NMI" interrupting the holder) fails at once with -EDEADLK, as
 *    rqspinlock's AA detection does, instead of burning its budget.
 *  - Arena mode models the BPF selftests' arena_spinlock_t
 *    (bpf_arena_spin_lock.h), whose outcomes differ in these ways: there is
 *    no AA check (arena_spin_lock_slowpath has none), so the nested context
 *    spins until its budget ends (the header bounds every loop with
 *    cond_break, whose timed may_goto budget is 250 ms, the default here);
 *    the first waiter spins as the "pending" waiter (a flag on the waiters'
 *    line; the header's pending bit) and needs no queue node; every other
 *    waiter first takes one of its CPU's AL_ARENA_NODES nodes (the header's
 *    qnodes[cpu][_Q_MAX_NODES] and count; here a bitmap claimed by CAS, so
 *    contexts of a model CPU shared by threads stay exclusive) and fails
 *    with -EBUSY when none is free. The queue itself stays the slot ring:
 *    the same FIFO handover with each waiter spinning on its own word as the
 *    header's MCS nodes, and a timed-out waiter leaves it cleanly, as the
 *    kernel's rqspinlock does (the header's own exit leaves its pending bit
 *    or its node in the queue; the model does not reproduce that breakage).
 *    Preemption and IRQs: the header disables both; a user-space holder can
 *    be preempted (the engine's --realtime runs workers SCHED_FIFO). IRQs:
 *    with al_lock_irq_mask set, a task-level holder blocks those signals
 *    (below); the nmi workload sets it for context=irq. Its default signal
 *    stands for an NMI, which irqsave does not mask.
 * Invariant: fewer than AL_LOCK_SLOTS tickets are outstanding at once
 * (waiters + abandoned tickets not yet passed by a release): tickets are
 * taken with a CAS that refuses one (-EBUSY, counted as failed) when
 * next_ticket - head would reach AL_LOCK_SLOTS, so a slot is always empty
 * when its next ticket arrives (waiters that abandon and retry while a holder
 * is descheduled could otherwise wrap the ring onto live slots).
 *
 * Statistics go to the acquirer's per-CPU block of the layer's counters
 * (al_lock_count_in): acquired, contended, owner switches and, at
 * AL_STATS_FULL for a timed lock, hold and wait ticks by the new holder;
 * failed by the failing waiter, and by reason (timeout, deadlock, no node)
 * where the layer gave the entries (al_lock_count_reasons_in). Nothing but
 * the lock word, the holder fields beside it and the slots is shared, so a
 * handoff moves no extra line and the critical section reads no clock below
 * full.
 *
 * Simulated CPUs (sim.h): acquire, trylock and release are sync points, a
 * waiter blocks in virtual time (lock_wait_sim) instead of spinning, and a
 * release wakes the waiter it granted (the first of a test-and-set lock's).
 *
 * Lock order: this is the primitive; the order between locks is each
 * layer's (see its design header). Cost: an uncontended acquire is one CAS
 * on next_ticket and one load of the slot, a release one CAS on the next
 * slot; a waiter spins on its own slot and checks its budget and the
 * deadlock condition every 64 spins. A struct al_lock is about 32 KiB
 * (the slot ring), so layers keep a few, not one per object.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>

#include "alloclab/core.h"

#define GRANT(t)   (((uint64_t)(uint32_t)(t) << 2) | 1)
#define ABANDON(t) (((uint64_t)(uint32_t)(t) << 2) | 2)

/* Waiters yield the CPU every (mask + 1) spins: under the preload shim, where
 * a program may run many more threads than CPUs and a FIFO lock would convoy
 * behind a preempted waiter, and in the engine's virtual runs. A power of two
 * minus one, at least 63. The engine's pinned workers never yield
 * (al_lock_spin_only): each has a CPU of its own. */
unsigned al_lock_yield_mask = 1023;
int al_lock_fair = 1;
static __thread bool spin_only;

/* Arena mode: the queue nodes in use per model CPU, one bit each; a line per
 * CPU, as the header's per-CPU qnodes. */
static struct {
	uint32_t used;
} __attribute__((aligned(AL_CACHELINE))) arena_nodes[AL_MAX_CPUS];

static int arena_node_get(unsigned cpu)
{
	uint32_t *u = &arena_nodes[cpu % AL_MAX_CPUS].used;
	uint32_t old = __atomic_load_n(u, __ATOMIC_RELAXED), bit;

	do {
		if (old == (1u << AL_ARENA_NODES) - 1)
			return -1;
		bit = (uint32_t)__builtin_ctz(~old);
	} while (!__atomic_compare_exchange_n(u, &old, old | (1u << bit), true, __ATOMIC_ACQUIRE,
					      __ATOMIC_RELAXED));
	return (int)bit;
}

static void arena_node_put(unsigned cpu, int node)
{
	__atomic_fetch_and(&arena_nodes[cpu % AL_MAX_CPUS].used, ~(1u << node), __ATOMIC_RELEASE);
}

void al_lock_spin_only(bool on)
{
	spin_only = on;
}

void al_lock_init(struct al_lock *l, uint64_t budget_ns, bool timed)
{
	al_clock_init();
	memset(l, 0, sizeof(*l));
	l->budget_ticks = (uint64_t)((double)budget_ns * al_clock.ticks_per_ns);
	l->timed = timed;
	l->fair = al_lock_fair;
	l->slot[0] = GRANT(0);
	l->reason_idx = UINT32_MAX;
}

void al_lock_set_arena(struct al_lock *l)
{
	l->arena = l->fair; /* a test-and-set lock has no queue to model */
}

void al_lock_set_tas(struct al_lock *l)
{
	l->fair = false;
	l->arena = false;
}

unsigned al_lock_arena_nodes_used(unsigned cpu)
{
	return (unsigned)__builtin_popcount(
		__atomic_load_n(&arena_nodes[cpu % AL_MAX_CPUS].used, __ATOMIC_ACQUIRE));
}

void al_lock_count_reasons_in(struct al_lock *l, unsigned idx)
{
	l->reason_idx = idx;
}

void al_lock_count_in(struct al_lock *l, struct al_counters *k, unsigned idx)
{
	l->ctr = k;
	l->ctr_idx = idx;
	l->wait_timed = k->level == AL_STATS_FULL; /* the wait path reads the clock anyway */
	if (!l->timed && idx + AL_LOCK_HOLD < 64)
		k->unmeasured |= 1ull << (idx + AL_LOCK_HOLD); /* not 0: not measured */
	if (k->level != AL_STATS_FULL)
		l->timed = false; /* times are kept at full only */
}

/* The acquirer's block and the lock's first entry in it, or NULL. */
static inline uint64_t *lock_block(const struct al_lock *l, const struct al_ctx *c)
{
	uint64_t *b = l->ctr ? al_ctr_block(l->ctr, c) : NULL;

	return b ? b + l->ctr_idx : NULL;
}

/* Called with the lock just taken by ticket t; waited: the ticks waited, or 0. */
static inline void lock_taken(struct al_lock *l, const struct al_ctx *c, uint32_t t)
{
	uint64_t *b = lock_block(l, c);

	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		al_sim_lock_taken(l, l->owner_cpu, l->ctr); /* handoff lines, timeline */
	l->ticket = t;
	__atomic_store_n(&l->holder_level, c->level, __ATOMIC_RELAXED);
	__atomic_store_n(&l->holder_cpu, c->cpu + 1, __ATOMIC_RELAXED);
	al_ctr_add(b, AL_LOCK_ACQUIRED, 1);
	if (l->owner_cpu != c->cpu + 1) {
		if (l->owner_cpu)
			al_ctr_add(b, AL_LOCK_OWNER_SWITCHES, 1);
		l->owner_cpu = c->cpu + 1;
	}
	if (l->timed)
		l->t_acquired = al_ticks_fast();
}

/* A waiter got the lock after waiting since `start`. */
static inline void lock_waited(struct al_lock *l, const struct al_ctx *c, uint64_t start)
{
	uint64_t *b = lock_block(l, c);

	al_ctr_add(b, AL_LOCK_CONTENDED, 1);
	if (l->wait_timed)
		al_ctr_add(b, AL_LOCK_WAIT, (l->timed ? l->t_acquired : al_ticks_fast()) - start);
}

/* A failed acquisition; err: its reason (-ETIMEDOUT, -EDEADLK, -EBUSY for a
 * full queue), or 0 for a trylock that found the lock held (no reason). */
static void lock_failed(struct al_lock *l, const struct al_ctx *c, int err)
{
	uint64_t *b = l->ctr ? al_ctr_block(l->ctr, c) : NULL;

	if (!b)
		return;
	al_ctr_add(b + l->ctr_idx, AL_LOCK_FAILED, 1);
	if (err && l->reason_idx != UINT32_MAX)
		al_ctr_add(b + l->reason_idx,
			   err == -ETIMEDOUT ? AL_LOCK_TIMEOUTS
			   : err == -EDEADLK ? AL_LOCK_DEADLOCKS
					     : AL_LOCK_NO_NODE,
			   1);
}

/* The waiter's deadline in (virtual) ticks for a simulated block; 0 = none. */
static uint64_t sim_deadline(const struct al_lock *l, uint64_t start)
{
	if (l->budget_ticks > UINT64_MAX - start)
		return 0;
	return start + l->budget_ticks ? start + l->budget_ticks : 1;
}

/* Whether the AA condition holds: the lock is held by c's CPU at a lower
 * context level, which cannot run until c returns. */
static inline bool held_below(const struct al_lock *l, const struct al_ctx *c)
{
	return __atomic_load_n(&l->holder_cpu, __ATOMIC_RELAXED) == c->cpu + 1 &&
	       __atomic_load_n(&l->holder_level, __ATOMIC_RELAXED) < c->level;
}

/*
 * lock_wait on a simulated CPU: instead of spinning, the waiter blocks in
 * virtual time until the release that grants its ticket wakes it, or its
 * budget's deadline does (then it abandons the ticket as a spinning waiter
 * would); the AA check comes first, as the spinning waiter's first check.
 */
static al_noinline int lock_wait_sim(struct al_lock *l, const struct al_ctx *c, uint32_t t)
{
	uint64_t *s = &l->slot[t % AL_LOCK_SLOTS];
	uint64_t start = al_ticks_fast(), expected;
	int ret = -ETIMEDOUT;

	for (;;) {
		if (__atomic_load_n(s, __ATOMIC_ACQUIRE) == GRANT(t))
			break;
		if (!l->arena && held_below(l, c)) {
			ret = -EDEADLK;
		} else if (al_ticks_fast() - start < l->budget_ticks) {
			al_sim_lock_block(l, t, sim_deadline(l, start));
			continue;
		}
		expected = 0;
		if (__atomic_compare_exchange_n(s, &expected, ABANDON(t), false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			lock_failed(l, c, ret);
			return ret;
		}
		break;
	}
	__atomic_store_n(s, 0, __ATOMIC_RELAXED);
	lock_taken(l, c, t);
	lock_waited(l, c, start);
	return 0;
}

static al_noinline int lock_wait(struct al_lock *l, const struct al_ctx *c, uint32_t t)
{
	uint64_t *s = &l->slot[t % AL_LOCK_SLOTS];
	uint64_t start = al_ticks_fast(), expected;
	unsigned spins = 0;
	int ret = -ETIMEDOUT;

	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)) && al_sim_cpu() >= 0)
		return lock_wait_sim(l, c, t);

	for (;;) {
		if (__atomic_load_n(s, __ATOMIC_ACQUIRE) == GRANT(t))
			break;
		al_cpu_relax();
		if (++spins & 63)
			continue;
		/* every 64 spins: deadlock check, budget, maybe yield */
		if (!l->arena && __atomic_load_n(&l->holder_cpu, __ATOMIC_RELAXED) == c->cpu + 1 &&
		    __atomic_load_n(&l->holder_level, __ATOMIC_RELAXED) < c->level)
			ret = -EDEADLK;
		else if (al_ticks_fast() - start < l->budget_ticks) {
			if (!(spins & al_lock_yield_mask) && !spin_only)
				sched_yield(); /* a user-space holder can be descheduled */
			continue;
		}
		expected = 0;
		if (__atomic_compare_exchange_n(s, &expected, ABANDON(t), false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			lock_failed(l, c, ret);
			return ret;
		}
		break; /* the grant won the race: we hold the lock */
	}
	__atomic_store_n(s, 0, __ATOMIC_RELAXED);
	lock_taken(l, c, t);
	lock_waited(l, c, start);
	return 0;
}

/* Test-and-set mode: spin on the word, yield, give up at the budget. The
 * waiter counts itself in `pending` while it waits, so that a trylock fails
 * meanwhile, as qspinlock's trylock does while its pending bit or queue tail
 * is set (a CPU that only trylocks cannot starve a drain waiting on it). */
static al_noinline int tas_wait(struct al_lock *l, const struct al_ctx *c)
{
	uint64_t start = al_ticks_fast();
	unsigned spins = 0;
	int err = 0;
	bool sim =
		al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)) && al_sim_cpu() >= 0;

	__atomic_fetch_add(&l->pending, 1, __ATOMIC_RELAXED);
	for (;;) {
		uint32_t zero = 0;

		if (!__atomic_load_n(&l->tas, __ATOMIC_RELAXED) &&
		    __atomic_compare_exchange_n(&l->tas, &zero, 1, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			break;
		if (sim) { /* block until a release, or the deadline; then the checks */
			if (!held_below(l, c) && al_ticks_fast() - start < l->budget_ticks)
				al_sim_lock_block(l, 0, sim_deadline(l, start));
			spins = 63;
		}
		al_cpu_relax();
		if (++spins & 63)
			continue;
		/* AA: held by this CPU at a lower level, which cannot run until we return */
		if (__atomic_load_n(&l->holder_cpu, __ATOMIC_RELAXED) == c->cpu + 1 &&
		    __atomic_load_n(&l->holder_level, __ATOMIC_RELAXED) < c->level)
			err = -EDEADLK;
		else if (al_ticks_fast() - start >= l->budget_ticks)
			err = -ETIMEDOUT;
		if (err) {
			__atomic_fetch_sub(&l->pending, 1, __ATOMIC_RELAXED);
			lock_failed(l, c, err);
			return err;
		}
		if (!(spins & al_lock_yield_mask) && !spin_only)
			sched_yield();
	}
	__atomic_fetch_sub(&l->pending, 1, __ATOMIC_RELAXED);
	lock_taken(l, c, 0);
	lock_waited(l, c, start);
	return 0;
}

/*
 * Arena mode's wait: the pending waiter needs no node, any other takes one of
 * its CPU's nodes for the wait or, finding none, gives its ticket up.
 */
static al_noinline int arena_wait(struct al_lock *l, const struct al_ctx *c, uint32_t t)
{
	uint64_t *s = &l->slot[t % AL_LOCK_SLOTS], expected = 0;
	uint32_t zero = 0;
	int node = -1, ret;

	if (!__atomic_compare_exchange_n(&l->pending, &zero, 1, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED)) {
		node = arena_node_get(c->cpu);
		if (node < 0) {
			if (__atomic_compare_exchange_n(s, &expected, ABANDON(t), false,
							__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				lock_failed(l, c, -EBUSY);
				return -EBUSY;
			}
			/* the grant arrived first: the lock is ours */
			__atomic_store_n(s, 0, __ATOMIC_RELAXED);
			lock_taken(l, c, t);
			lock_waited(l, c, al_ticks_fast());
			return 0;
		}
	}
	ret = lock_wait(l, c, t);
	if (node < 0)
		__atomic_store_n(&l->pending, 0, __ATOMIC_RELEASE);
	else
		arena_node_put(c->cpu, node);
	return ret;
}

/* Take a ticket unless the ring is full. */
static inline bool take_ticket(struct al_lock *l, uint32_t *t)
{
	uint32_t n = __atomic_load_n(&l->next_ticket, __ATOMIC_RELAXED);

	do {
		/* Signed: a stale n may already be behind head (the CAS then retries). */
		if (al_unlikely((int32_t)(n - __atomic_load_n(&l->head, __ATOMIC_ACQUIRE)) >=
				AL_LOCK_SLOTS - 1))
			return false;
	} while (!__atomic_compare_exchange_n(&l->next_ticket, &n, n + 1, true, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	*t = n;
	return true;
}

static int lock_acquire(struct al_lock *l, const struct al_ctx *c);

/*
 * arena_spin_lock_irqsave: with al_lock_irq_mask set, a task-level context
 * blocks those signals before it asks for an arena lock and unblocks them
 * when it has released its last one (or failed), so a signal standing for
 * an IRQ stays pending while the lock is held and is delivered at the
 * release, as local_irq_restore delivers it. Two syscalls per outermost
 * hold, paid only where the mask is set (the nmi workload's context=irq).
 */
const sigset_t *al_lock_irq_mask;
static __thread unsigned irq_depth;

static void irq_save(void)
{
	if (!irq_depth++)
		pthread_sigmask(SIG_BLOCK, al_lock_irq_mask, NULL);
}

static void irq_restore(void)
{
	if (!--irq_depth)
		pthread_sigmask(SIG_UNBLOCK, al_lock_irq_mask, NULL);
}

static inline bool irq_masked(const struct al_lock *l, const struct al_ctx *c)
{
	return l->arena && c->level == AL_CTX_TASK &&
	       __atomic_load_n(&al_lock_irq_mask, __ATOMIC_RELAXED);
}

int al_lock_acquire(struct al_lock *l, const struct al_ctx *c)
{
	int ret;

	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		al_sim_sync(AL_SIM_ACQ); /* simulated CPUs: acquisitions happen in time order */
	if (al_likely(!irq_masked(l, c)))
		return lock_acquire(l, c);
	irq_save();
	ret = lock_acquire(l, c);
	if (ret)
		irq_restore();
	return ret;
}

static int lock_acquire(struct al_lock *l, const struct al_ctx *c)
{
	uint32_t t;
	uint64_t *s;

	if (!l->fair) {
		uint32_t zero = 0;

		if (al_likely(__atomic_compare_exchange_n(&l->tas, &zero, 1, false,
							  __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))) {
			lock_taken(l, c, 0);
			return 0;
		}
		return tas_wait(l, c);
	}
	if (al_unlikely(!take_ticket(l, &t))) {
		lock_failed(l, c, -EBUSY);
		return -EBUSY;
	}
	s = &l->slot[t % AL_LOCK_SLOTS];

	if (al_likely(__atomic_load_n(s, __ATOMIC_ACQUIRE) == GRANT(t))) {
		__atomic_store_n(s, 0, __ATOMIC_RELAXED);
		lock_taken(l, c, t);
		return 0;
	}
	if (al_unlikely(l->arena))
		return arena_wait(l, c, t);
	return lock_wait(l, c, t);
}

static int lock_tryacquire(struct al_lock *l, const struct al_ctx *c);

int al_lock_tryacquire(struct al_lock *l, const struct al_ctx *c)
{
	int ret;

	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		al_sim_sync(AL_SIM_ACQ);
	if (al_likely(!irq_masked(l, c)))
		return lock_tryacquire(l, c);
	irq_save();
	ret = lock_tryacquire(l, c);
	if (ret)
		irq_restore();
	return ret;
}

static int lock_tryacquire(struct al_lock *l, const struct al_ctx *c)
{
	uint32_t t = __atomic_load_n(&l->next_ticket, __ATOMIC_RELAXED), zero = 0;
	uint64_t *s = &l->slot[t % AL_LOCK_SLOTS];

	if (!l->fair) {
		if (__atomic_load_n(&l->pending, __ATOMIC_RELAXED) ||
		    !__atomic_compare_exchange_n(&l->tas, &zero, 1, false, __ATOMIC_ACQUIRE,
						 __ATOMIC_RELAXED)) {
			lock_failed(l, c, 0);
			return -EBUSY;
		}
		lock_taken(l, c, 0);
		return 0;
	}
	if (__atomic_load_n(s, __ATOMIC_ACQUIRE) != GRANT(t) ||
	    !__atomic_compare_exchange_n(&l->next_ticket, &t, t + 1, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED)) {
		lock_failed(l, c, 0);
		return -EBUSY;
	}
	__atomic_store_n(s, 0, __ATOMIC_RELAXED);
	lock_taken(l, c, t);
	return 0;
}

static void lock_release(struct al_lock *l, const struct al_ctx *c);

void al_lock_release(struct al_lock *l, const struct al_ctx *c)
{
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		al_sim_sync(AL_SIM_REL); /* the release happens at this CPU's time */
	lock_release(l, c);
	if (al_unlikely(irq_masked(l, c)))
		irq_restore();
}

static void lock_release(struct al_lock *l, const struct al_ctx *c)
{
	uint32_t n = l->ticket + 1;
	uint64_t expected;

	if (l->timed)
		al_ctr_add(lock_block(l, c), AL_LOCK_HOLD, al_ticks_fast() - l->t_acquired);
	__atomic_store_n(&l->holder_cpu, 0, __ATOMIC_RELAXED);
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		al_sim_lock_released(l);
	if (!l->fair) {
		__atomic_store_n(&l->tas, 0, __ATOMIC_RELEASE);
		if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
			al_sim_lock_wake(l, 0, true);
		return;
	}
	for (;; n++) {
		uint64_t *s = &l->slot[n % AL_LOCK_SLOTS];

		/* Every ticket below n is passed and its slot empty: head may move
		 * (before the grant, so a later releaser never moves it back). */
		__atomic_store_n(&l->head, n, __ATOMIC_RELEASE);
		expected = 0;
		if (__atomic_compare_exchange_n(s, &expected, GRANT(n), false, __ATOMIC_RELEASE,
						__ATOMIC_ACQUIRE)) {
			if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
				al_sim_lock_wake(l, n, false); /* the waiter of ticket n runs */
			return;
		}
		/* ABANDON(n): the waiter gave up; pass over its ticket. */
		__atomic_store_n(s, 0, __ATOMIC_RELAXED);
	}
}

void al_lock_stats_get(const struct al_lock *l, struct al_lock_stats *out)
{
	const struct al_counters *k = l->ctr;

	memset(out, 0, sizeof(*out));
	if (!k)
		return;
	out->acquired = al_counters_sum(k, l->ctr_idx + AL_LOCK_ACQUIRED);
	out->contended = al_counters_sum(k, l->ctr_idx + AL_LOCK_CONTENDED);
	out->failed = al_counters_sum(k, l->ctr_idx + AL_LOCK_FAILED);
	out->wait_ticks = al_counters_sum(k, l->ctr_idx + AL_LOCK_WAIT);
	out->hold_ticks = al_counters_sum(k, l->ctr_idx + AL_LOCK_HOLD);
	out->owner_switches = al_counters_sum(k, l->ctr_idx + AL_LOCK_OWNER_SWITCHES);
}

/*
 * An array of locks for fork() (one per size class or order of a layer):
 * taken in index order, the order every path that holds two of them
 * follows, and released in reverse. All or none: when one acquisition fails
 * (its lock budget ran out) the ones taken are released before the error
 * returns, so the caller never sees a partial hold. Cost: n acquisitions;
 * only the fork handlers call it.
 */
static struct al_lock *lock_at(struct al_lock *first, size_t stride, unsigned i)
{
	return (struct al_lock *)((char *)first + (size_t)i * stride);
}

int al_lock_acquire_all(struct al_lock *first, size_t stride, unsigned n, const struct al_ctx *c)
{
	unsigned i;
	int ret;

	for (i = 0; i < n; i++) {
		ret = al_lock_acquire(lock_at(first, stride, i), c);
		if (ret) {
			al_lock_release_all(first, stride, i, c);
			return ret;
		}
	}
	return 0;
}

void al_lock_release_all(struct al_lock *first, size_t stride, unsigned n, const struct al_ctx *c)
{
	while (n--)
		al_lock_release(lock_at(first, stride, n), c);
}
