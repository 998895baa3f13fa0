/* SPDX-License-Identifier: MIT */
/*
 * Threads of layers and workloads on real or simulated CPUs (kthread.h).
 * On a simulated CPU, a condition variable is a key of the simulation's
 * sleepers (sim.h): a wait sleeps on it, a signal wakes every sleeper (a
 * spurious wake-up is allowed by pthread_cond_wait's contract, and every
 * caller waits in a loop on its predicate).
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#include <errno.h>

#include "alloclab/core.h"
#include "alloclab/kthread.h"
#include "cpu.h"

/* The real helpers started off_pinned that still run (al_kthreads_avoid). */
static pthread_mutex_t helpers_mu = PTHREAD_MUTEX_INITIALIZER;
static struct al_kthread *helpers;

static void helpers_add(struct al_kthread *t)
{
	pthread_mutex_lock(&helpers_mu);
	t->next = helpers;
	helpers = t;
	t->listed = true;
	pthread_mutex_unlock(&helpers_mu);
}

static void helpers_remove(struct al_kthread *t)
{
	struct al_kthread **pp;

	pthread_mutex_lock(&helpers_mu);
	for (pp = &helpers; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	t->listed = false;
	pthread_mutex_unlock(&helpers_mu);
}

void al_kthreads_avoid(const cpu_set_t *busy)
{
	cpu_set_t mine, spare;
	struct al_kthread *t;

	if (sched_getaffinity(0, sizeof(mine), &mine))
		return;
	CPU_ZERO(&spare);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &mine) && !CPU_ISSET(c, busy))
			CPU_SET(c, &spare);
	if (!CPU_COUNT(&spare))
		return; /* nowhere else to go */
	pthread_mutex_lock(&helpers_mu);
	for (t = helpers; t; t = t->next)
		pthread_setaffinity_np(t->th, sizeof(spare), &spare);
	pthread_mutex_unlock(&helpers_mu);
}

static bool simulated(void)
{
	return __atomic_load_n(&al_sim_active, __ATOMIC_RELAXED) && al_sim_here();
}

int al_kthread_start(struct al_kthread *t, void *(*fn)(void *), void *arg, struct al_ctx *ctx,
		     bool off_pinned)
{
	pthread_attr_t attr;
	int ret;

	t->started = t->sim = t->listed = false;
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
	if (off_pinned)
		helpers_add(t);
	return 0;
}

void al_kthread_join(struct al_kthread *t)
{
	if (!t->started)
		return;
	if (t->listed)
		helpers_remove(t);
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
