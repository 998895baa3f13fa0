/* SPDX-License-Identifier: MIT */
/*
 * malloc-free: models libarena-malloc-free (bench_malloc_free in the libarena
 * dev tree). One cycle = allocs_per_cycle allocations of `size` bytes, each
 * linked into the cycle's list through its first 8 bytes (so the memory is
 * touched, as in the bench), then the list is walked and every object freed.
 * Allocation and free are timed separately:
 *   batch       one clock pair around the allocations, one around the frees;
 *   per_op_sum  a clock pair around every operation, summed (the bench's
 *               bpf_ktime_get_ns() pairs; includes that timer cost).
 * Objects smaller than a pointer are kept in an array instead of a list.
 * Nothing is held between cycles, so teardown has nothing to free.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "alloclab/alloclab.h"
#include "list.h"

enum { P_size, P_allocs_per_cycle, P_NR };

static const struct al_param_desc mf_params[P_NR] = {
	[P_size] = { "size", AL_PARAM_SIZE, 64, 1, 1ll << 30, NULL, "bytes per allocation" },
	[P_allocs_per_cycle] = { "allocs_per_cycle", AL_PARAM_INT, 64, 1, 1 << 20, NULL,
				 "allocations per cycle, then as many frees" },
};

struct mf_worker {
	void **arr; /* objects when size < sizeof(void *) */
	size_t len; /* mapping length of arr */
};

static int mf_worker_init(struct al_worker *w)
{
	struct mf_worker *m = al_meta_alloc(sizeof(*m));

	if (!m)
		return -ENOMEM;
	if (w->params[P_size] < (int64_t)sizeof(void *)) {
		m->len = (size_t)w->params[P_allocs_per_cycle] * sizeof(void *);
		m->arr = al_meta_alloc(m->len);
		if (!m->arr) {
			al_meta_free(m, sizeof(*m));
			return -ENOMEM;
		}
	}
	w->priv = m;
	return 0;
}

static void mf_worker_fini(struct al_worker *w)
{
	struct mf_worker *m = w->priv;

	if (!m)
		return;
	al_meta_free(m->arr, m->len);
	al_meta_free(m, sizeof(*m));
	w->priv = NULL;
}

static int mf_cycle_list(struct al_worker *w)
{
	size_t size = (size_t)w->params[P_size];
	unsigned n = (unsigned)w->params[P_allocs_per_cycle];
	void *head = NULL;
	int ret = wl_alloc_list(w, size, n, &head);

	if (ret)
		return ret;
	al_worker_live(w, (int64_t)(size * n));
	ret = wl_free_list(w, head, n);
	if (!ret)
		al_worker_live(w, -(int64_t)(size * n));
	return ret;
}

static int mf_cycle_array(struct al_worker *w)
{
	struct mf_worker *m = w->priv;
	struct al_allocator *a = w->a;
	struct al_ctx *c = &w->ctx;
	size_t size = (size_t)w->params[P_size];
	unsigned n = (unsigned)w->params[P_allocs_per_cycle], i;
	uint64_t t0, t1, t_end = 0;
	int ret;

	t0 = al_ticks();
	for (i = 0; i < n; i++) {
		uint64_t s = w->timing == AL_TIMING_PER_OP_SUM ? al_ticks() : 0;

		m->arr[i] = al_alloc(a, c, size, 0);
		if (w->timing == AL_TIMING_PER_OP_SUM)
			wl_op_ticks(w, AL_HIST_ALLOC, al_ticks() - s);
		if (al_unlikely(!m->arr[i])) /* the wait is in the time, not the histogram */
			m->arr[i] = wl_alloc_again_timed(w, size, 0);
		if (al_unlikely(!m->arr[i])) {
			ret = wl_alloc_failed(w, i, n, size);
			while (i--)
				wl_free_untimed(a, c, m->arr[i], &t_end);
			return ret;
		}
		*(char *)m->arr[i] = (char)i;
	}
	t1 = al_ticks();
	if (w->timing == AL_TIMING_BATCH)
		w->alloc_ticks += t1 - t0;
	al_worker_live(w, (int64_t)(size * n));
	t1 = al_ticks();
	for (i = 0; i < n; i++) {
		uint64_t s = w->timing == AL_TIMING_PER_OP_SUM ? al_ticks() : 0;

		ret = al_free(a, c, m->arr[i]);
		if (w->timing == AL_TIMING_PER_OP_SUM)
			wl_op_ticks(w, AL_HIST_FREE, al_ticks() - s);
		if (al_unlikely(ret)) /* the wait is in the time, not the histogram */
			ret = wl_free_again_timed(w, m->arr[i], ret);
		if (al_unlikely(ret))
			return wl_free_failed(w, m->arr[i], ret);
	}
	if (w->timing == AL_TIMING_BATCH)
		w->free_ticks += al_ticks() - t1;
	al_worker_live(w, -(int64_t)(size * n));
	w->alloc_ops += n;
	w->free_ops += n;
	return 0;
}

static int mf_cycle(struct al_worker *w)
{
	struct mf_worker *m = w->priv;

	return m->arr ? mf_cycle_array(w) : mf_cycle_list(w);
}

static const struct al_workload_desc malloc_free_desc = {
	.name = "malloc-free",
	AL_WORKLOAD_DESC_INIT,
	.doc = "libarena-malloc-free: allocs_per_cycle allocations linked in a list, then free "
	       "them all; alloc and free timed separately",
	.flags = AL_WL_LIVE | AL_WL_SIM,
	.nparams = P_NR,
	.params = mf_params,
	.size_param = P_size,
	.worker_init = mf_worker_init,
	.cycle = mf_cycle,
	.worker_fini = mf_worker_fini,
};

AL_REGISTER_WORKLOAD(malloc_free_desc)
