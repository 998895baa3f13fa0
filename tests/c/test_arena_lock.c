/* SPDX-License-Identifier: MIT */
/*
 * The lock in arena mode (arena_spinlock_t as the BPF selftests' header has
 * it) against the default queued mode: a nested acquisition on the holder's
 * CPU spins until its budget ends (no deadlock check), the first waiter
 * needs no queue node and the others one of their CPU's four, a waiter
 * beyond them fails with -EBUSY, failures are counted by reason, and mutual
 * exclusion and FIFO handover hold as in queued mode. Waiting threads are
 * observed through the lock's own state (tickets, nodes in use), never by
 * sleeping.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include "test.h"

static struct al_lock lk;

#define AT_COUNTERS(C, D, P)                          \
	AL_LOCK_COUNTERS(C, P, lock, "the test lock") \
	AL_LOCK_REASON_COUNTERS(C, P, lock, "the test lock")
AL_COUNTERS_DEFINE(AT_COUNTERS, AT_, at_counters);
static struct al_counters ctr;

static void lk_init(uint64_t budget_ns, bool arena)
{
	al_lock_init(&lk, budget_ns, false);
	if (arena)
		al_lock_set_arena(&lk);
	al_counters_fini(&ctr);
	CHECK_EQ(al_counters_init_desc(&ctr, at_counters, AT_NR, 0, 8), 0);
	al_lock_count_in(&lk, &ctr, AT_lock_acquired);
	al_lock_count_reasons_in(&lk, AT_lock_timeouts);
}

static uint64_t sum(unsigned idx)
{
	return al_counters_sum(&ctr, idx);
}

TEST(test_nested_spins_until_budget)
{
	struct al_ctx task, nmi;
	uint64_t t0, waited_ns;

	al_ctx_init(&task, 0);
	al_ctx_nested(&nmi, &task, AL_CTX_NMI);
	lk_init(20000000, true); /* 20 ms */
	CHECK_EQ(al_lock_acquire(&lk, &task), 0);
	t0 = al_ticks();
	CHECK_EQ(al_lock_acquire(&lk, &nmi), -ETIMEDOUT);
	waited_ns = (uint64_t)al_ticks_to_ns(al_ticks() - t0);
	CHECK(waited_ns >= 20000000);
	al_lock_release(&lk, &task);
	CHECK_EQ(sum(AT_lock_timeouts), 1);
	CHECK_EQ(sum(AT_lock_deadlocks), 0);
	CHECK_EQ(sum(AT_lock_failed), 1);
	/* the timed-out waiter left the queue: the lock works on */
	CHECK_EQ(al_lock_acquire(&lk, &nmi), 0);
	al_lock_release(&lk, &nmi);
	CHECK_EQ(al_lock_arena_nodes_used(0), 0);
	CHECK_EQ(__atomic_load_n(&lk.pending, __ATOMIC_ACQUIRE), 0);
}

TEST(test_queued_mode_refuses_nested)
{
	struct al_ctx task, nmi;

	al_ctx_init(&task, 0);
	al_ctx_nested(&nmi, &task, AL_CTX_NMI);
	lk_init(10000000000ull, false); /* 10 s: a wait would show */
	CHECK_EQ(al_lock_acquire(&lk, &task), 0);
	CHECK_EQ(al_lock_acquire(&lk, &nmi), -EDEADLK);
	al_lock_release(&lk, &task);
	CHECK_EQ(sum(AT_lock_deadlocks), 1);
	CHECK_EQ(sum(AT_lock_timeouts), 0);
}

struct waiter {
	pthread_t th;
	unsigned cpu;
	int ret;
	uint32_t order; /* the lock's acquisition count when this one got it */
};

static uint32_t taken;

static void *waiter_run(void *p)
{
	struct waiter *w = p;
	struct al_ctx c;

	al_ctx_init(&c, w->cpu);
	w->ret = al_lock_acquire(&lk, &c);
	if (!w->ret) {
		w->order = taken++;
		al_lock_release(&lk, &c);
	}
	return NULL;
}

/* Wait until n tickets are out and cpu's nodes in use reach `nodes`. */
static void await_waiters(uint32_t tickets, unsigned cpu, unsigned nodes)
{
	while (__atomic_load_n(&lk.next_ticket, __ATOMIC_ACQUIRE) < tickets ||
	       al_lock_arena_nodes_used(cpu) < nodes)
		sched_yield();
}

TEST(test_nodes_run_out)
{
	struct waiter w[5];
	struct al_ctx holder, extra;
	unsigned i;

	al_ctx_init(&holder, 1);
	al_ctx_init(&extra, 0);
	lk_init(10000000000ull, true);
	taken = 0;
	CHECK_EQ(al_lock_acquire(&lk, &holder), 0);
	/* five waiters on model CPU 0, one at a time so the order is known: the
	 * first is the pending waiter, the next four hold CPU 0's nodes */
	for (i = 0; i < 5; i++) {
		w[i] = (struct waiter){ .cpu = 0 };
		CHECK_EQ(pthread_create(&w[i].th, NULL, waiter_run, &w[i]), 0);
		await_waiters(i + 2, 0, i);
	}
	CHECK_EQ(al_lock_arena_nodes_used(0), 4);
	CHECK_EQ(__atomic_load_n(&lk.pending, __ATOMIC_ACQUIRE), 1);
	CHECK_EQ(al_lock_acquire(&lk, &extra), -EBUSY);
	CHECK_EQ(sum(AT_lock_no_node), 1);
	al_lock_release(&lk, &holder);
	for (i = 0; i < 5; i++) {
		pthread_join(w[i].th, NULL);
		CHECK_EQ(w[i].ret, 0);
		CHECK_EQ(w[i].order, i); /* FIFO, the abandoned ticket skipped */
	}
	CHECK_EQ(al_lock_arena_nodes_used(0), 0);
	CHECK_EQ(__atomic_load_n(&lk.pending, __ATOMIC_ACQUIRE), 0);
	CHECK_EQ(sum(AT_lock_acquired), 6);
	CHECK_EQ(sum(AT_lock_failed), 1);
}

static long counter;

static void *contend(void *p)
{
	unsigned cpu = (unsigned)(uintptr_t)p, i;
	struct al_ctx c;

	al_ctx_init(&c, cpu);
	for (i = 0; i < 20000; i++) {
		while (al_lock_acquire(&lk, &c))
			;
		counter++;
		al_lock_release(&lk, &c);
	}
	return NULL;
}

TEST(test_arena_mutual_exclusion)
{
	pthread_t th[4];
	unsigned i;

	lk_init(1000000000ull, true);
	counter = 0;
	for (i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, contend, (void *)(uintptr_t)i);
	for (i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(counter, 80000);
	CHECK_EQ(sum(AT_lock_acquired), 80000);
	CHECK_EQ(sum(AT_lock_failed), 0);
	for (i = 0; i < 4; i++)
		CHECK_EQ(al_lock_arena_nodes_used(i), 0);
	CHECK_EQ(__atomic_load_n(&lk.pending, __ATOMIC_ACQUIRE), 0);
}

static volatile sig_atomic_t irq_ran;

static void on_irq(int sig)
{
	(void)sig;
	irq_ran++;
}

static bool blocked(int sig)
{
	sigset_t cur;

	pthread_sigmask(SIG_BLOCK, NULL, &cur);
	return sigismember(&cur, sig);
}

/* arena_spin_lock_irqsave: with al_lock_irq_mask set, a task-level holder
 * keeps the signal pending until it releases its last arena lock, and the
 * signal runs then; nested contexts and queued-mode locks block nothing. */
TEST(test_irqsave_holds_the_signal)
{
	static struct al_lock inner;
	struct al_ctx task, irq;
	struct sigaction sa;
	sigset_t set;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_irq;
	sigaction(SIGUSR2, &sa, NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	al_ctx_init(&task, 0);
	al_ctx_nested(&irq, &task, AL_CTX_IRQ);
	lk_init(1000000000ull, true);
	al_lock_init(&inner, 1000000000ull, false);
	al_lock_set_arena(&inner);
	al_lock_irq_mask = &set;
	irq_ran = 0;
	CHECK_EQ(al_lock_acquire(&lk, &task), 0);
	CHECK(blocked(SIGUSR2));
	raise(SIGUSR2);
	CHECK_EQ(irq_ran, 0); /* pending while the lock is held */
	CHECK_EQ(al_lock_tryacquire(&inner, &task), 0);
	al_lock_release(&inner, &task);
	CHECK(blocked(SIGUSR2)); /* the outer lock is still held */
	CHECK_EQ(irq_ran, 0);
	al_lock_release(&lk, &task);
	CHECK(!blocked(SIGUSR2));
	CHECK_EQ(irq_ran, 1);			 /* delivered at the release */
	CHECK_EQ(al_lock_acquire(&lk, &irq), 0); /* a nested context masks nothing */
	CHECK(!blocked(SIGUSR2));
	al_lock_release(&lk, &irq);
	lk_init(1000000000ull, false); /* queued mode: not an arena lock */
	CHECK_EQ(al_lock_acquire(&lk, &task), 0);
	CHECK(!blocked(SIGUSR2));
	al_lock_release(&lk, &task);
	al_lock_irq_mask = NULL;
	signal(SIGUSR2, SIG_DFL);
}

int main(void)
{
	al_clock_init();
	RUN(test_nested_spins_until_budget);
	RUN(test_queued_mode_refuses_nested);
	RUN(test_nodes_run_out);
	RUN(test_arena_mutual_exclusion);
	RUN(test_irqsave_holds_the_signal);
	al_counters_fini(&ctr);
	return TEST_SUMMARY();
}
