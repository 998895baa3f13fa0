/* SPDX-License-Identifier: MIT */
/*
 * alloclab kthread: the threads of layers and workloads (the kernel's
 * kworkers and kthreads), the same code on real and on simulated CPUs.
 *
 * al_kthread_start runs fn(arg) on a thread of its own: a real thread, or,
 * on the engine of a simulation or one of its model CPUs (sim.h), a daemon
 * fiber on model CPU ctx->cpu that runs in virtual time. Its waits go
 * through al_cond_wait, al_cond_signal and al_cond_broadcast, which are
 * pthread's on real CPUs; on a simulated CPU a wait gives the model CPU
 * up until a signal of the same condition (the mutex released meanwhile,
 * as pthread_cond_wait does), and on the engine's thread of a simulation it
 * runs what is awake until all of it sleeps. A mutex is never held across
 * a sync point there (nothing between lock and unlock takes an al_lock).
 * al_kthread_join waits for fn to return (the owner told it to stop first).
 *
 * Cost: one load of the simulation switch per call on real CPUs.
 */
#ifndef ALLOCLAB_KTHREAD_H
#define ALLOCLAB_KTHREAD_H

#include <pthread.h>
#include <stdbool.h>

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct al_kthread {
	pthread_t th;		 /* the real thread */
	bool started;		 /* fn runs (or ran) */
	bool sim;		 /* a daemon of a simulation */
	bool listed;		 /* on the list the engine moves off its workers' CPUs */
	struct al_kthread *next; /* that list's link */
};

/* off_pinned: a real thread avoids its pinned creator's CPU (an unbound
 * kworker beside the worker that queued it), and the CPUs of a run's pinned
 * workers once they are pinned (a helper started before them, by the
 * thread that builds the stack, would otherwise preempt them). 0, or a
 * negative errno. */
AL_API int al_kthread_start(struct al_kthread *t, void *(*fn)(void *), void *arg,
			    struct al_ctx *ctx, bool off_pinned);
AL_API void al_kthread_join(struct al_kthread *t);
AL_API void al_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu);
AL_API void al_cond_signal(pthread_cond_t *cv);
AL_API void al_cond_broadcast(pthread_cond_t *cv);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_KTHREAD_H */
