/* SPDX-License-Identifier: MIT */
/*
 * malloc and calloc: model libarena-malloc and libarena-calloc
 * (bench_malloc / bench_calloc). One invocation = nallocs timed allocations
 * of `size` bytes (calloc: zeroed, AL_ZERO, so zeroing is part of the cost);
 * nothing is freed in the timed part. Then, untimed, every object is freed
 * (so the engine can check nothing leaked) and the engine recreates the
 * allocator (AL_WL_RESET), as the bench runs arena_buddy_reset after every
 * invocation: each invocation starts from a fresh single chunk, so chunk
 * growth is part of what is measured. One producer, as the bench validates.
 */
#include <errno.h>
#include <stdio.h>

#include "alloclab/alloclab.h"
#include "retry.h"

enum { P_size, P_nallocs, P_NR };

static const struct al_param_desc malloc_params[P_NR] = {
	[P_size] = { "size", AL_PARAM_SIZE, 64, 1, 1ll << 30, NULL, "bytes per allocation" },
	[P_nallocs] = { "nallocs", AL_PARAM_INT, 10000, 1, 1 << 22, NULL,
			"allocations per invocation (the allocator is reset between invocations)" },
};

struct malloc_worker {
	void **obj; /* this invocation's objects */
	size_t len; /* mapping length */
};

static int malloc_worker_init(struct al_worker *w)
{
	struct malloc_worker *m = al_meta_alloc(sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->len = (size_t)w->params[P_nallocs] * sizeof(void *);
	m->obj = al_meta_alloc(m->len);
	if (!m->obj) {
		al_meta_free(m, sizeof(*m));
		return -ENOMEM;
	}
	w->priv = m;
	return 0;
}

static void malloc_worker_fini(struct al_worker *w)
{
	struct malloc_worker *m = w->priv;

	if (!m)
		return;
	al_meta_free(m->obj, m->len);
	al_meta_free(m, sizeof(*m));
	w->priv = NULL;
}

static int release_all(struct al_worker *w, unsigned n)
{
	struct malloc_worker *m = w->priv;
	unsigned i;
	int ret, first = 0;

	for (i = 0; i < n; i++) {
		ret = al_free(w->a, &w->ctx, m->obj[i]);
		if (al_unlikely(ret))
			ret = wl_free_again(w, m->obj[i], ret);
		if (ret && !first)
			first = wl_free_failed(w, m->obj[i], ret);
	}
	return first;
}

static int invocation(struct al_worker *w, unsigned flags)
{
	struct malloc_worker *m = w->priv;
	size_t size = (size_t)w->params[P_size];
	unsigned n = (unsigned)w->params[P_nallocs], i;
	uint64_t t0, t_end = 0, sum = 0;
	int err;

	t0 = al_ticks();
	for (i = 0; i < n; i++) {
		uint64_t s = w->timing == AL_TIMING_PER_OP_SUM ? al_ticks() : 0;

		m->obj[i] = al_alloc(w->a, &w->ctx, size, flags);
		if (w->timing == AL_TIMING_PER_OP_SUM) {
			uint64_t dt = al_ticks() - s;

			sum += dt;
			if (al_unlikely(w->hist != NULL))
				al_hist_record(&w->hist[AL_HIST_ALLOC], dt);
		}
		if (al_unlikely(!m->obj[i])) /* the wait is in the time, not the histogram */
			m->obj[i] = wl_alloc_again_timed(w, size, flags);
		if (al_unlikely(!m->obj[i]))
			goto fail;
	}
	w->alloc_ticks += w->timing == AL_TIMING_PER_OP_SUM ? sum : al_ticks() - t0;
	w->alloc_ops += n;
	al_worker_live(w, (int64_t)(size * n));
	err = release_all(w, n);
	al_worker_live(w, -(int64_t)(size * n));
	return err;
fail:
	err = wl_alloc_failed(w, i, n, size);
	while (i--) /* untimed, and the allocation's error kept */
		wl_free_untimed(w->a, &w->ctx, m->obj[i], &t_end);
	return err;
}

static int malloc_cycle(struct al_worker *w)
{
	return invocation(w, 0);
}

static int calloc_cycle(struct al_worker *w)
{
	return invocation(w, AL_ZERO);
}

static const struct al_workload_desc malloc_desc = {
	.name = "malloc",
	AL_WORKLOAD_DESC_INIT,
	.doc = "libarena-malloc: nallocs timed allocations per invocation, allocator reset "
	       "(untimed) between invocations; one producer",
	.flags = AL_WL_RESET | AL_WL_ONE_PRODUCER | AL_WL_LIVE | AL_WL_SIM,
	.nparams = P_NR,
	.params = malloc_params,
	.size_param = P_size,
	.worker_init = malloc_worker_init,
	.cycle = malloc_cycle,
	.worker_fini = malloc_worker_fini,
};

static const struct al_workload_desc calloc_desc = {
	.name = "calloc",
	AL_WORKLOAD_DESC_INIT,
	.doc = "libarena-calloc: as malloc, with zeroed memory (the zeroing is timed)",
	.flags = AL_WL_RESET | AL_WL_ONE_PRODUCER | AL_WL_LIVE | AL_WL_SIM,
	.nparams = P_NR,
	.params = malloc_params,
	.size_param = P_size,
	.worker_init = malloc_worker_init,
	.cycle = calloc_cycle,
	.worker_fini = malloc_worker_fini,
};

AL_REGISTER_WORKLOAD(malloc_desc)
AL_REGISTER_WORKLOAD(calloc_desc)
