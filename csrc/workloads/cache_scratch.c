/* SPDX-License-Identifier: MIT */
/*
 * cache-scratch: modelled on mimalloc-bench's cache-scratch (Hoard, Berger):
 * passive false sharing. The main thread allocates one small object per
 * worker, back to back (prepare, untimed), so they share cache lines, and
 * hands object i to worker i. Each worker frees the object it was handed,
 * then every cycle allocates an object of `size` bytes, writes it
 * `repetitions` times, and frees it. An allocator that gives a worker memory
 * on a line another worker writes (because the handed-back objects went to a
 * shared pool) makes the writes slow: the figure is the cycle rate (the
 * run's throughput: alloc+free operations per second of the measured phase,
 * the writes included), not the alloc/free latency.
 */
#include <errno.h>
#include <stdio.h>

#include "alloclab/alloclab.h"
#include "retry.h"

enum { P_size, P_repetitions, P_NR };

static const struct al_param_desc cs_params[P_NR] = {
	[P_size] = { "size", AL_PARAM_SIZE, 8, 1, 1 << 20, NULL, "bytes per object (suite: 1-8)" },
	[P_repetitions] = { "repetitions", AL_PARAM_INT, 1000, 0, 1 << 30, NULL,
			    "writes to each object per cycle" },
};

struct cs_shared {
	unsigned nworkers;
	size_t len;	/* mapping length */
	size_t size;	/* object size for the handed-out objects */
	void *handed[]; /* one object per worker, allocated by the main thread */
};

static int cs_setup(const int64_t *params, unsigned nworkers, void **shared)
{
	size_t len = sizeof(struct cs_shared) + nworkers * sizeof(void *);
	struct cs_shared *s = al_meta_alloc(len);

	if (!s)
		return -ENOMEM;
	s->nworkers = nworkers;
	s->len = len;
	s->size = (size_t)params[P_size];
	*shared = s;
	return 0;
}

static int cs_prepare(void *shared, struct al_allocator *a, struct al_ctx *c, char *err,
		      size_t errlen)
{
	struct cs_shared *s = shared;
	uint64_t t_end = 0;
	unsigned i;

	for (i = 0; i < s->nworkers; i++) {
		s->handed[i] = al_alloc(a, c, s->size, 0);
		if (!s->handed[i])
			s->handed[i] = wl_alloc_again_untimed(a, c, s->size, 0, &t_end);
		if (!s->handed[i]) {
			snprintf(err, errlen, "handing out object %u failed: %s: %s", i,
				 al_strerror(c->err ? c->err : -ENOMEM),
				 wl_alloc_why(c->err ? c->err : -ENOMEM));
			return c->err ? c->err : -ENOMEM;
		}
	}
	return 0;
}

static int cs_cycle(struct al_worker *w)
{
	struct cs_shared *s = w->shared;
	size_t size = (size_t)w->params[P_size];
	int64_t reps = w->params[P_repetitions], r;
	volatile char *p;
	uint64_t t0, t1, first;
	void *q;
	int ret;

	q = __atomic_exchange_n(&s->handed[w->id], NULL, __ATOMIC_ACQ_REL);
	if (q) { /* the first cycle frees the object the main thread handed over */
		ret = al_free(w->a, &w->ctx, q);
		if (ret && (ret = wl_free_again(w, q, ret)))
			return wl_free_failed(w, q, ret);
		w->alloc_cross++;
	}
	/* a retry's wait is in the times, not the histograms (first) */
	t0 = al_ticks();
	p = al_alloc(w->a, &w->ctx, size, 0);
	t1 = al_ticks();
	first = t1 - t0;
	if (al_unlikely(!p)) {
		p = wl_alloc_again(w, size, 0);
		t1 = al_ticks();
	}
	if (!p) {
		snprintf(w->err, w->errlen, "allocation of %zu bytes failed: %s: %s", size,
			 al_strerror(w->ctx.err ? w->ctx.err : -ENOMEM),
			 wl_alloc_why(w->ctx.err ? w->ctx.err : -ENOMEM));
		return w->ctx.err ? w->ctx.err : -ENOMEM;
	}
	w->alloc_ticks += t1 - t0;
	if (al_unlikely(w->hist != NULL)) /* histogram=1 */
		al_hist_record(&w->hist[AL_HIST_ALLOC], first);
	/* up to 2^30 passes over up to 1 MiB: ask now and then (untimed) whether
	 * the run is stopping or its duration is over */
	for (r = 0; r < reps; r++) {
		if (!(r & (size >= 4096 ? 0 : 1023)) && al_worker_stopping(w))
			break;
		for (size_t k = 0; k < size; k++)
			p[k] = (char)(p[k] + 1);
	}
	t0 = al_ticks();
	ret = al_free(w->a, &w->ctx, (void *)p);
	t1 = al_ticks();
	first = t1 - t0;
	if (al_unlikely(ret)) {
		ret = wl_free_again(w, (void *)p, ret);
		t1 = al_ticks();
	}
	w->free_ticks += t1 - t0;
	if (al_unlikely(w->hist != NULL))
		al_hist_record(&w->hist[AL_HIST_FREE], first);
	if (ret)
		return wl_free_failed(w, (void *)p, ret);
	w->alloc_ops++;
	w->free_ops++;
	return 0;
}

static void cs_teardown(void *shared, struct al_allocator *a, struct al_ctx *c)
{
	struct cs_shared *s = shared;
	uint64_t t_end = 0;
	unsigned i;

	if (!s)
		return;
	for (i = 0; a && i < s->nworkers; i++)
		if (s->handed[i])
			wl_free_untimed(a, c, s->handed[i], &t_end);
	al_meta_free(s, s->len);
}

static const struct al_workload_desc cache_scratch_desc = {
	.name = "cache-scratch",
	AL_WORKLOAD_DESC_INIT,
	.doc = "mimalloc-bench cache-scratch: passive false sharing; objects handed out by the "
	       "main thread are freed by the workers, whose own objects are then written",
	.nparams = P_NR,
	.params = cs_params,
	.size_param = P_size,
	.setup = cs_setup,
	.prepare = cs_prepare,
	.cycle = cs_cycle,
	.teardown = cs_teardown,
};

AL_REGISTER_WORKLOAD(cache_scratch_desc)
