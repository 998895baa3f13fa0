/* SPDX-License-Identifier: MIT */
/*
 * Helper threads (kthread.h): a helper started off_pinned by a thread that
 * is not pinned runs where it likes until the engine's workers are pinned;
 * al_kthreads_avoid then moves it off their CPUs, and a joined helper is
 * off the list.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>

#include "test.h"
#include "alloclab/kthread.h"
#include "../../csrc/core/cpu.h"

static sem_t go, done;
static cpu_set_t seen;

/* Wait to be asked, report this thread's mask, end. */
static void *helper(void *arg)
{
	(void)arg;
	while (sem_wait(&go))
		;
	sched_getaffinity(0, sizeof(seen), &seen);
	sem_post(&done);
	return NULL;
}

TEST(test_helpers_move_off_the_workers_cpus)
{
	struct al_kthread t;
	struct al_ctx c;
	cpu_set_t mine, busy;
	int first = -1;

	CHECK_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
	if (CPU_COUNT(&mine) < 2) {
		printf("skip test_helpers_move_off_the_workers_cpus: one CPU\n");
		return;
	}
	for (int i = 0; i < CPU_SETSIZE && first < 0; i++)
		if (CPU_ISSET(i, &mine))
			first = i;
	CHECK_EQ(sem_init(&go, 0, 0), 0);
	CHECK_EQ(sem_init(&done, 0, 0), 0);
	al_ctx_init(&c, 0);
	CHECK_EQ(al_kthread_start(&t, helper, NULL, &c, true), 0);
	CHECK(t.listed);
	CPU_ZERO(&busy);
	CPU_SET(first, &busy); /* one worker, pinned to the first CPU */
	al_kthreads_avoid(&busy);
	sem_post(&go);
	while (sem_wait(&done))
		;
	CHECK(!CPU_ISSET(first, &seen));
	CHECK_EQ(CPU_COUNT(&seen), CPU_COUNT(&mine) - 1);
	al_kthread_join(&t);
	CHECK(!t.listed);
	al_kthreads_avoid(&mine); /* every CPU busy: nothing to move, and no helper listed */
	sem_destroy(&go);
	sem_destroy(&done);
}

int main(void)
{
	RUN(test_helpers_move_off_the_workers_cpus);
	return TEST_SUMMARY();
}
