/* SPDX-License-Identifier: MIT */
/*
 * Transient failures in workloads that run under signals or trylock-only
 * policies: a lock that gave up (-ETIMEDOUT, its holder was descheduled) or
 * a trylock that found it held (-EBUSY) is retried for up to a second,
 * yielding to the holder, and every retry is counted. Anything else, or a
 * second of failures, is the caller's error to report.
 */
#ifndef ALLOCLAB_WORKLOADS_RETRY_H
#define ALLOCLAB_WORKLOADS_RETRY_H

#include <errno.h>
#include <sched.h>

#include "alloclab/alloclab.h"

/* Another try? *t_end (0 at first) holds the deadline. */
static inline bool wl_retry_ok(uint64_t *t_end)
{
	uint64_t now = al_mono_ns();

	if (!*t_end)
		*t_end = now + 1000000000u;
	sched_yield();
	return now < *t_end;
}

/* al_alloc at task level, retrying -EBUSY/-ETIMEDOUT; NULL with w->ctx.err. */
static inline void *wl_alloc_retry(struct al_worker *w, size_t size, uint64_t *retries)
{
	uint64_t t_end = 0;
	void *p;

	while (!(p = al_alloc(w->a, &w->ctx, size, 0)) &&
	       (w->ctx.err == -EBUSY || w->ctx.err == -ETIMEDOUT) && wl_retry_ok(&t_end))
		(*retries)++;
	return p;
}

/* al_free at task level, retrying -ETIMEDOUT; 0 or -errno. */
static inline int wl_free_retry(struct al_worker *w, void *p, uint64_t *retries)
{
	uint64_t t_end = 0;
	int ret;

	while ((ret = al_free(w->a, &w->ctx, p)) == -ETIMEDOUT && wl_retry_ok(&t_end))
		(*retries)++;
	return ret;
}

#endif
