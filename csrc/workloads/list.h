/* SPDX-License-Identifier: MIT */
/*
 * Timed list building blocks shared by the libarena workloads: allocate n
 * objects linked through their first 8 bytes (the bench's way of touching
 * each object), and free a list of n objects, in either timing mode.
 */
#ifndef ALLOCLAB_WORKLOADS_LIST_H
#define ALLOCLAB_WORKLOADS_LIST_H

#include <errno.h>
#include <stdio.h>

#include "alloclab/alloclab.h"
#include "retry.h"

/* One per_op_sum measurement: summed, and recorded when histograms are on. */
static inline void wl_op_ticks(struct al_worker *w, unsigned op, uint64_t dt)
{
	if (op == AL_HIST_ALLOC)
		w->alloc_ticks += dt;
	else
		w->free_ticks += dt;
	if (al_unlikely(w->hist != NULL))
		al_hist_record(&w->hist[op], dt);
}

/* Free the first n objects of a list, untimed (error paths, teardown). */
static inline void wl_free_list_untimed(struct al_allocator *a, struct al_ctx *c, void *head,
					unsigned n)
{
	uint64_t t_end = 0;

	while (n--) {
		void *next = *(void **)head;

		wl_free_untimed(a, c, head, &t_end);
		head = next;
	}
}

/*
 * The slow loops, chosen once per list before any timing starts, so the batch
 * and per_op_sum loops below carry no check per operation:
 *  - histogram mode (w->hist set; timing is per_op_sum): a clock pair around
 *    every operation, summed as per_op_sum and recorded in the histogram;
 *  - simulated CPUs (sim.h): every call into the stack is a term of the cost
 *    model, timed batch or per operation as asked.
 */
static al_noinline int wl_alloc_list_slow(struct al_worker *w, size_t size, unsigned n,
					  void **headp)
{
	struct al_allocator *a = w->a;
	struct al_ctx *c = &w->ctx;
	void *(*alloc)(struct al_allocator *, struct al_ctx *, size_t, unsigned) = a->ops->alloc;
	const bool sim = __atomic_load_n(&al_sim_active, __ATOMIC_RELAXED);
	const bool per_op = w->timing != AL_TIMING_BATCH;
	struct al_hist *h = w->hist ? &w->hist[AL_HIST_ALLOC] : NULL;
	void *head = NULL, *p;
	uint64_t t0 = per_op ? 0 : al_ticks(), s, dt, sum = 0;
	unsigned i;

	for (i = 0; i < n; i++) {
		s = per_op ? al_ticks() : 0;
		if (al_unlikely(sim))
			al_sim_call(a, AL_SIM_CALL_ALLOC);
		p = alloc(a, c, size, 0);
		/* the object's line is the call's, as in al_alloc: in the time and
		 * the histogram alike (none for a refusal) */
		if (al_unlikely(sim))
			al_sim_object_if(a, p, false);
		if (h) { /* the histogram times the call alone, not a retry */
			dt = al_ticks() - s;
			sum += dt;
			al_hist_record(h, dt);
		}
		if (al_unlikely(!p)) { /* the retry's wait is in the time, not the histogram */
			dt = h ? al_ticks() : 0;
			p = wl_alloc_again(w, size, 0); /* al_alloc charges its line */
			sum += h ? al_ticks() - dt : 0;
		}
		if (per_op && !h)
			sum += al_ticks() - s;
		if (al_unlikely(!p))
			goto fail;
		*(void **)p = head;
		head = p;
	}
	w->alloc_ticks += per_op ? sum : al_ticks() - t0;
	w->alloc_ops += n;
	*headp = head;
	return 0;
fail:
	wl_free_list_untimed(a, c, head, i);
	return wl_alloc_failed(w, i, n, size);
}

static al_noinline int wl_free_list_slow(struct al_worker *w, void *head, unsigned n)
{
	struct al_allocator *a = w->a;
	struct al_ctx *c = &w->ctx;
	int (*free_fn)(struct al_allocator *, struct al_ctx *, void *) = a->ops->free;
	const bool sim = __atomic_load_n(&al_sim_active, __ATOMIC_RELAXED);
	const bool per_op = w->timing != AL_TIMING_BATCH;
	struct al_hist *h = w->hist ? &w->hist[AL_HIST_FREE] : NULL;
	uint64_t t0 = per_op ? 0 : al_ticks(), s, dt, sum = 0;
	void *next;
	unsigned i;
	int ret;

	for (i = 0; i < n; i++) {
		next = *(void **)head;
		s = per_op ? al_ticks() : 0;
		if (al_unlikely(sim)) {
			al_sim_call(a, AL_SIM_CALL_FREE);
			al_sim_object_if(a, head, true);
		}
		ret = free_fn(a, c, head);
		if (h) { /* the histogram times the call alone, not a retry */
			dt = al_ticks() - s;
			sum += dt;
			al_hist_record(h, dt);
		}
		if (al_unlikely(ret)) { /* the retry's wait is in the time, not the histogram */
			dt = h ? al_ticks() : 0;
			ret = wl_free_again(w, head, ret);
			sum += h ? al_ticks() - dt : 0;
		}
		if (per_op && !h)
			sum += al_ticks() - s;
		if (al_unlikely(ret))
			return wl_free_failed(w, head, ret);
		head = next;
	}
	w->free_ticks += per_op ? sum : al_ticks() - t0;
	w->free_ops += n;
	return 0;
}

/* Allocate n objects of size >= 8 into *headp, timed into w->alloc_ticks. */
static inline int wl_alloc_list(struct al_worker *w, size_t size, unsigned n, void **headp)
{
	struct al_allocator *a = w->a;
	struct al_ctx *c = &w->ctx;
	/* Ops tables are const for an instance's life: load the entry once, as a
	 * kernel caller binds a direct call, so the loop measures the allocator. */
	void *(*alloc)(struct al_allocator *, struct al_ctx *, size_t, unsigned) = a->ops->alloc;
	void *head = NULL, *p;
	uint64_t t0, sum = 0;
	unsigned i;

	if (al_unlikely(w->hist != NULL || __atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		return wl_alloc_list_slow(w, size, n, headp);
	if (w->timing == AL_TIMING_BATCH) {
		t0 = al_ticks();
		for (i = 0; i < n; i++) {
			p = alloc(a, c, size, 0);
			if (al_unlikely(!p) && !(p = wl_alloc_again(w, size, 0)))
				goto fail;
			*(void **)p = head;
			head = p;
		}
		sum = al_ticks() - t0;
	} else {
		for (i = 0; i < n; i++) {
			t0 = al_ticks();
			p = alloc(a, c, size, 0);
			if (al_unlikely(!p))
				p = wl_alloc_again(w, size, 0);
			sum += al_ticks() - t0;
			if (al_unlikely(!p))
				goto fail;
			*(void **)p = head;
			head = p;
		}
	}
	w->alloc_ticks += sum;
	w->alloc_ops += n;
	*headp = head;
	return 0;
fail:
	wl_free_list_untimed(a, c, head, i);
	return wl_alloc_failed(w, i, n, size);
}

/* Free a list of n objects, timed into w->free_ticks. */
static inline int wl_free_list(struct al_worker *w, void *head, unsigned n)
{
	struct al_allocator *a = w->a;
	struct al_ctx *c = &w->ctx;
	int (*free_fn)(struct al_allocator *, struct al_ctx *, void *) = a->ops->free;
	uint64_t t0, sum = 0;
	void *next;
	unsigned i;
	int ret;

	if (al_unlikely(w->hist != NULL || __atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		return wl_free_list_slow(w, head, n);
	if (w->timing == AL_TIMING_BATCH) {
		t0 = al_ticks();
		for (i = 0; i < n; i++) {
			next = *(void **)head;
			ret = free_fn(a, c, head);
			if (al_unlikely(ret) && (ret = wl_free_again(w, head, ret)))
				return wl_free_failed(w, head, ret);
			head = next;
		}
		sum = al_ticks() - t0;
	} else {
		for (i = 0; i < n; i++) {
			next = *(void **)head;
			t0 = al_ticks();
			ret = free_fn(a, c, head);
			if (al_unlikely(ret))
				ret = wl_free_again(w, head, ret);
			sum += al_ticks() - t0;
			if (al_unlikely(ret))
				return wl_free_failed(w, head, ret);
			head = next;
		}
	}
	w->free_ticks += sum;
	w->free_ops += n;
	return 0;
}

#endif
