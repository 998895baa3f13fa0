/* SPDX-License-Identifier: MIT */
/*
 * Threads of layers and workloads on real or simulated CPUs (kthread.h).
 * On a simulated CPU, a condition variable is a key of the simulation's
 * sleepers (sim.h): a wait sleeps on it, a signal wakes every sleeper (a
 * spurious wake-up is allowed by pthread_cond_wait's contract, and every
 * caller waits in a loop on its predicate).
 */
#include <errno.h>

#include "alloclab/core.h"
#include "alloclab/kthread.h"
#include "cpu.h"

static bool simulated(void)
{
	return __atomic_load_n(&al_sim_active, __ATOMIC_RELAXED) && al_sim_here();
}

int al_kthread_start(struct al_kthread *t, void *(*fn)(void *), void *arg, struct al_ctx *ctx,
		     bool off_pinned)
{
	pthread_attr_t attr;
	int ret;

	t->started = t->sim = false;
	if (simulated()) {
		ret = al_sim_daemon(fn, arg, ctx);
		if (ret)
			return ret;
		t->started = t->sim = true;
		return 0;
	}
	if (pthread_attr_init(&attr))
		return -ENOMEM;
	if (off_pinned)
		al_attr_off_pinned_cpu(&attr);
	ret = pthread_create(&t->th, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	if (ret)
		return -ret;
	t->started = true;
	return 0;
}

void al_kthread_join(struct al_kthread *t)
{
	if (!t->started)
		return;
	if (t->sim)
		al_sim_join_daemons();
	else
		pthread_join(t->th, NULL);
	t->started = false;
}

void al_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu)
{
	if (!simulated()) {
		pthread_cond_wait(cv, mu);
		return;
	}
	pthread_mutex_unlock(mu);
	al_sim_sleep_on(cv, 0);
	pthread_mutex_lock(mu);
}

void al_cond_signal(pthread_cond_t *cv)
{
	if (simulated())
		al_sim_wakeup(cv);
	else
		pthread_cond_signal(cv);
}

void al_cond_broadcast(pthread_cond_t *cv)
{
	if (simulated())
		al_sim_wakeup(cv);
	else
		pthread_cond_broadcast(cv);
}
