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
#include <stdio.h>

#include "alloclab/alloclab.h"
#include "../core/refusal.h"

/* Another try? *t_end (0 at first) holds the deadline. On a simulated CPU
 * the second is virtual and the yield lets the next model CPU run. */
static inline bool wl_retry_ok(uint64_t *t_end)
{
	bool sim = __atomic_load_n(&al_sim_active, __ATOMIC_RELAXED) && al_sim_cpu() >= 0;
	uint64_t now = sim ? al_ticks_fast() : al_mono_ns();

	if (!*t_end)
		*t_end = now + (sim ? (uint64_t)(1e9 * al_clock.ticks_per_ns) : 1000000000u);
	if (sim)
		al_sim_yield();
	else
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

/*
 * Allocations a policy refuses by design rather than for lack of memory:
 * the CPU's cache is empty with its refill queued (-EAGAIN: bpf_ma refills
 * after the operation, or on a helper thread with irq_work=thread), a lock
 * or reentrancy guard was held (-EBUSY), a lock gave up (-ETIMEDOUT). The
 * metric that counts each refusal of that mechanism, or NULL for the
 * failures a workload cannot go on from (-ENOMEM exhaustion, -ENOSPC no
 * instance for the size, -EINVAL).
 */
static inline const char *wl_refusal_metric(int err)
{
	switch (err) {
	case -EAGAIN: return "alloc_refused_empty";
	case -EBUSY: return "alloc_refused_busy";
	case -ETIMEDOUT: return "alloc_refused_timedout";
	default: return NULL;
	}
}

/* What an allocation error means and which parameter changes it: the text
 * after "failed: ENAME: " in a workload's error. */
static inline const char *wl_alloc_why(int err)
{
	switch (err) {
	case -ENOMEM: return "out of memory";
	case -EAGAIN: return "refused for 1 s: " AL_WHY_EMPTY;
	case -EBUSY: return "refused for 1 s: " AL_WHY_BUSY;
	case -ETIMEDOUT: return "refused for 1 s: " AL_WHY_TIMEDOUT;
	case -ENOSPC: return AL_WHY_NOSPC;
	case -EINVAL: return "the policy does not serve this size";
	default: return "failed";
	}
}

/*
 * The worker's allocation of `size` just returned NULL. A refusal by design
 * is retried for up to a second, each refusal counted in the worker's
 * metric for its mechanism (wl.alloc_refused_empty, ...): the workload goes
 * on and the run reports how often the policy said "not now". NULL, with
 * ctx.err, for anything else or when refusals last a second.
 */
static __attribute__((unused)) al_noinline al_cold void *wl_alloc_again(struct al_worker *w,
									size_t size, unsigned flags)
{
	uint64_t t_end = 0;
	const char *metric;
	void *p = NULL;

	while ((metric = wl_refusal_metric(w->ctx.err))) {
		al_worker_metric(w, metric, 1, AL_METRIC_SUM);
		if (!wl_retry_ok(&t_end))
			break;
		w->ctx.err = 0;
		p = al_alloc(w->a, &w->ctx, size, flags);
		if (p)
			break;
	}
	return p;
}

/* A free that failed for good (a lock's refusal after a second of
 * retries, or an error): the worker's error, and its code. */
static __attribute__((unused)) al_noinline al_cold int wl_free_failed(struct al_worker *w, void *p,
								      int err)
{
	snprintf(w->err, w->errlen, "free(%p) failed: %s%s", p, al_strerror(err),
		 err == -ETIMEDOUT ? ": refused for 1 s: " AL_WHY_TIMEDOUT : "");
	return err;
}

/*
 * A free a lock refused (-ETIMEDOUT: the lock gave up waiting, its holder
 * descheduled; the object is untouched and still the caller's): counted as
 * free_refused_timedout and tried again for up to a second, as a refused
 * allocation is. 0, or the error of the last try.
 */
static __attribute__((unused)) al_noinline al_cold int wl_free_again(struct al_worker *w, void *p,
								     int err)
{
	uint64_t t_end = 0;

	while (err == -ETIMEDOUT) {
		al_worker_metric(w, "free_refused_timedout", 1, AL_METRIC_SUM);
		if (!wl_retry_ok(&t_end))
			break;
		err = al_free(w->a, &w->ctx, p);
	}
	return err;
}

/* An allocation that failed for good: the worker's error, and its code. */
static __attribute__((unused)) al_noinline al_cold int
wl_alloc_failed(struct al_worker *w, unsigned done, unsigned n, size_t size)
{
	int err = w->ctx.err ? w->ctx.err : -ENOMEM;

	snprintf(w->err, w->errlen, "allocation %u of %u (%zu bytes) failed: %s: %s", done + 1, n,
		 size, al_strerror(err), wl_alloc_why(err));
	return err;
}

/*
 * A refused operation retried where each operation is timed on its own
 * (per_op_sum): the retry's wait goes into the operation's time, not into
 * its histogram, which holds the first call's. In batch timing the loop's
 * own clock already holds it.
 */
static __attribute__((unused)) al_noinline al_cold void *
wl_alloc_again_timed(struct al_worker *w, size_t size, unsigned flags)
{
	uint64_t s = al_ticks();
	void *p = wl_alloc_again(w, size, flags);

	if (w->timing == AL_TIMING_PER_OP_SUM)
		w->alloc_ticks += al_ticks() - s;
	return p;
}

static __attribute__((unused)) al_noinline al_cold int wl_free_again_timed(struct al_worker *w,
									   void *p, int err)
{
	uint64_t s = al_ticks();

	err = wl_free_again(w, p, err);
	if (w->timing == AL_TIMING_PER_OP_SUM)
		w->free_ticks += al_ticks() - s;
	return err;
}

/* A free outside the measured loop (teardown, error paths): a lock's
 * refusal is retried the same way, not counted, so that a descheduled holder
 * at teardown is not reported as a leak. *t_end is the deadline of the whole
 * teardown (0 before its first retry): once it has passed, each free gets
 * one try, so a lock that never yields costs a second, not one per object.
 * 0 or -errno. */
static inline int wl_free_untimed(struct al_allocator *a, struct al_ctx *c, void *p,
				  uint64_t *t_end)
{
	int ret;

	while ((ret = al_free(a, c, p)) == -ETIMEDOUT && wl_retry_ok(t_end))
		;
	return ret;
}

/* The same for untimed allocations outside a worker (prepare): retried,
 * not counted, within the deadline *t_end shared by the whole prepare. */
static __attribute__((unused)) al_noinline al_cold void *
wl_alloc_again_untimed(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags,
		       uint64_t *t_end)
{
	void *p = NULL;

	while (wl_refusal_metric(c->err) && wl_retry_ok(t_end)) {
		c->err = 0;
		p = al_alloc(a, c, size, flags);
		if (p)
			break;
	}
	return p;
}

#endif
