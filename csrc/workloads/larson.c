/* SPDX-License-Identifier: MIT */
/*
 * larson: modelled on mimalloc-bench's larson (Larson & Krishnan), the
 * server "bleeding" benchmark. Each worker owns a slot array of `chunks`
 * live objects of random sizes in [min_size, max_size]; every operation
 * picks a random slot, frees its object and allocates a new one there. The
 * main thread allocates every initial object (prepare, untimed), so the
 * first frees are of objects another thread allocated, as in larson; and
 * every `rounds` operations a worker trades its whole array for the one
 * waiting in a shared baton (larson's thread that exits and hands its
 * blocks to a new thread), so objects keep moving between threads.
 *
 * One cycle = ops_per_cycle free+alloc pairs, timed per operation kind in
 * batch timing (a clock pair around the cycle's frees+allocs pairs would mix
 * them, so each pair is timed as free then alloc). Teardown frees all slots.
 */
#include <errno.h>
#include <stdio.h>

#include "alloclab/alloclab.h"
#include "list.h"

enum { P_min_size, P_max_size, P_chunks, P_rounds, P_ops_per_cycle, P_NR };

static const struct al_param_desc la_params[P_NR] = {
	[P_min_size] = { "min_size", AL_PARAM_SIZE, 8, 1, 1 << 20, NULL, "smallest object" },
	[P_max_size] = { "max_size", AL_PARAM_SIZE, 1000, 1, 1 << 20, NULL, "largest object" },
	[P_chunks] = { "chunks", AL_PARAM_INT, 5000, 1, 1 << 20, NULL, "live objects per thread" },
	[P_rounds] = { "rounds", AL_PARAM_INT, 10000, 1, 1ll << 40, NULL,
		       "operations between hand-overs of a thread's objects" },
	[P_ops_per_cycle] = { "ops_per_cycle", AL_PARAM_INT, 100, 1, 1 << 20, NULL,
			      "free+alloc pairs per cycle" },
};

struct la_array {
	uint32_t owner; /* worker that last held it (for cross_frees) */
	uint32_t pad;
	void *slot[]; /* chunks objects */
};

struct la_shared {
	unsigned nworkers;
	unsigned chunks;
	size_t min_size, max_size; /* object sizes, for the warm-up too */
	size_t array_len;	   /* bytes per la_array */
	struct la_array *baton;	   /* traded by atomic exchange */
	struct la_array **arrays;  /* the array each worker holds (worker_init takes it) */
	size_t arrays_len;
	struct la_array *pool[]; /* nworkers + 1 arrays, for teardown */
};

struct la_worker {
	struct la_array *mine; /* the array this worker holds */
	uint64_t ops;	       /* operations since the last hand-over */
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static size_t rnd_size(struct al_worker *w, uint64_t r)
{
	uint64_t lo = (uint64_t)w->params[P_min_size], hi = (uint64_t)w->params[P_max_size];

	return hi > lo ? lo + r % (hi - lo + 1) : lo;
}

/* Sizes are drawn from [min_size, max_size]: an empty range is refused. */
static int la_check_params(const int64_t *params, unsigned nworkers, char *err, size_t errlen)
{
	(void)nworkers;
	if (params[P_min_size] > params[P_max_size]) {
		snprintf(err, errlen,
			 "min_size=%lld is above max_size=%lld: sizes are drawn from "
			 "[min_size, max_size], so min_size must be at most max_size",
			 (long long)params[P_min_size], (long long)params[P_max_size]);
		return -EINVAL;
	}
	return 0;
}

static int la_setup(const int64_t *params, unsigned nworkers, void **shared)
{
	size_t len = sizeof(struct la_shared) + (nworkers + 1) * sizeof(struct la_array *);
	struct la_shared *s;
	unsigned i;

	if (la_check_params(params, nworkers, NULL, 0)) /* al_run has said why */
		return -EINVAL;
	s = al_meta_alloc(len);
	if (!s)
		return -ENOMEM;
	s->nworkers = nworkers;
	s->chunks = (unsigned)params[P_chunks];
	s->min_size = (size_t)params[P_min_size];
	s->max_size = (size_t)params[P_max_size];
	s->array_len = sizeof(struct la_array) + s->chunks * sizeof(void *);
	s->arrays_len = len;
	for (i = 0; i <= nworkers; i++) {
		s->pool[i] = al_meta_alloc(s->array_len);
		if (!s->pool[i]) {
			while (i--)
				al_meta_free(s->pool[i], s->array_len);
			al_meta_free(s, len);
			return -ENOMEM;
		}
	}
	s->baton = s->pool[nworkers];
	*shared = s;
	return 0;
}

static int la_prepare(void *shared, struct al_allocator *a, struct al_ctx *c, char *err,
		      size_t errlen)
{
	struct la_shared *s = shared;
	uint64_t seed = 4141, t_end = 0;
	unsigned i, k;

	for (i = 0; i <= s->nworkers; i++) {
		s->pool[i]->owner = UINT32_MAX; /* allocated by the main thread */
		for (k = 0; k < s->chunks; k++) {
			size_t size = s->min_size + rnd(&seed) % (s->max_size - s->min_size + 1);

			s->pool[i]->slot[k] = al_alloc(a, c, size, 0);
			if (!s->pool[i]->slot[k])
				s->pool[i]->slot[k] = wl_alloc_again_untimed(a, c, size, 0, &t_end);
			if (!s->pool[i]->slot[k]) {
				int e = c->err ? c->err : -ENOMEM;

				snprintf(err, errlen,
					 "warm-up allocation %u of %u (%zu bytes) failed: %s: %s",
					 k + 1, s->chunks, size, al_strerror(e), wl_alloc_why(e));
				return e;
			}
		}
	}
	return 0;
}

static int la_worker_init(struct al_worker *w)
{
	struct la_shared *s = w->shared;
	struct la_worker *lw = al_meta_alloc(sizeof(*lw));

	if (!lw)
		return -ENOMEM;
	lw->mine = s->pool[w->id];
	w->priv = lw;
	return 0;
}

static void la_worker_fini(struct al_worker *w)
{
	struct la_shared *s = w->shared;
	struct la_worker *lw = w->priv;

	if (!lw)
		return;
	s->pool[w->id] = lw->mine; /* teardown frees the array this worker ended with */
	al_meta_free(lw, sizeof(*lw));
	w->priv = NULL;
}

static int la_cycle(struct al_worker *w)
{
	struct la_shared *s = w->shared;
	struct la_worker *lw = w->priv;
	struct al_allocator *a = w->a;
	struct al_ctx *c = &w->ctx;
	unsigned n = (unsigned)w->params[P_ops_per_cycle], i;
	uint64_t t0, t1, t2, first[2];
	int ret;

	for (i = 0; i < n; i++) {
		uint64_t r = rnd(&w->rng);
		unsigned k = (unsigned)(r % s->chunks);
		void *p = lw->mine->slot[k];
		size_t size = rnd_size(w, r >> 20);

		/* a retry's wait is in the times, not the histograms (first[]) */
		t0 = al_ticks_fast();
		ret = al_free(a, c, p);
		t1 = al_ticks_fast();
		first[0] = t1 - t0;
		if (al_unlikely(ret)) {
			ret = wl_free_again(w, p, ret);
			t1 = al_ticks_fast();
		}
		if (al_unlikely(ret))
			return wl_free_failed(w, p, ret);
		p = al_alloc(a, c, size, 0);
		t2 = al_ticks_fast();
		first[1] = t2 - t1;
		if (al_unlikely(!p)) {
			p = wl_alloc_again(w, size, 0);
			t2 = al_ticks_fast();
		}
		if (al_unlikely(!p)) {
			lw->mine->slot[k] = NULL;
			return wl_alloc_failed(w, 0, 1, size);
		}
		*(char *)p = (char)k;
		lw->mine->slot[k] = p;
		w->free_ticks += t1 - t0;
		w->alloc_ticks += t2 - t1;
		if (al_unlikely(w->hist != NULL)) { /* histogram=1 */
			al_hist_record(&w->hist[AL_HIST_FREE], first[0]);
			al_hist_record(&w->hist[AL_HIST_ALLOC], first[1]);
		}
		if (lw->mine->owner != w->id)
			w->alloc_cross++;
	}
	w->alloc_ops += n;
	w->free_ops += n;
	lw->ops += n;
	if (lw->ops >= (uint64_t)w->params[P_rounds] && s->nworkers > 1) {
		lw->mine->owner = w->id;
		al_shared(&s->baton, true); /* simulated CPUs: the baton's line moves */
		lw->mine = __atomic_exchange_n(&s->baton, lw->mine, __ATOMIC_ACQ_REL);
		lw->ops = 0;
	}
	return 0;
}

static void la_teardown(void *shared, struct al_allocator *a, struct al_ctx *c)
{
	struct la_shared *s = shared;
	uint64_t t_end = 0;
	unsigned i, k;

	if (!s)
		return;
	/* After the run, pool[0..n-1] are the workers' arrays and the baton is the
	 * one left over; pool[n] may now be held by a worker, so free by holder. */
	s->pool[s->nworkers] = s->baton;
	for (i = 0; i <= s->nworkers; i++) {
		if (!s->pool[i])
			continue;
		for (k = 0; a && k < s->chunks; k++)
			if (s->pool[i]->slot[k])
				wl_free_untimed(a, c, s->pool[i]->slot[k], &t_end);
		al_meta_free(s->pool[i], s->array_len);
	}
	al_meta_free(s, s->arrays_len);
}

static const struct al_workload_desc larson_desc = {
	.name = "larson",
	AL_WORKLOAD_DESC_INIT,
	.doc = "mimalloc-bench larson: random free+alloc over a per-thread array of live chunks, "
	       "arrays handed between threads (server bleeding)",
	.flags = AL_WL_DISTINCT | AL_WL_SIM, /* objects stay live and move between workers */
	.nparams = P_NR,
	.params = la_params,
	.size_param = P_max_size,
	.check_params = la_check_params,
	.setup = la_setup,
	.prepare = la_prepare,
	.worker_init = la_worker_init,
	.cycle = la_cycle,
	.worker_fini = la_worker_fini,
	.teardown = la_teardown,
};

AL_REGISTER_WORKLOAD(larson_desc)
