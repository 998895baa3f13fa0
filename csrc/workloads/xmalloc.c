/* SPDX-License-Identifier: MIT */
/*
 * xmalloc: modelled on mimalloc-bench's xmalloc-test (Lever/Boreham): pure
 * producer/consumer. With producers = 2N, workers 0..N-1 only allocate and
 * workers N..2N-1 only free; objects of `size` bytes (64 in the suite) travel
 * in batches through one shared queue, so every free is a cross-thread free
 * of an object allocated elsewhere. With one producer the single worker frees
 * its own batches (a degenerate but valid case).
 *
 * Allocating cycle: allocate a batch (timed), linked through the objects'
 * first 8 bytes; push it on the queue; if the queue already holds
 * `max_queued` batches the producer frees the batch itself (timed, counted
 * as frees by the allocating thread). Freeing cycle: pop a batch and free it
 * (timed); an empty queue makes an empty cycle. Throughput (ops/s) and
 * free_ns are the figures; cross_frees counts frees by a non-allocating
 * worker. The queue is the workload's own mutex-protected stack, outside the
 * timed regions. Teardown frees whatever is still queued. On simulated CPUs
 * the queue is a shared word (its line moves between model CPUs; the mutex
 * never waits there: nothing inside it is a sync point) and a consumer's
 * frees move each object's first line from its producer.
 */
#include <errno.h>
#include <pthread.h>

#include "alloclab/alloclab.h"
#include "list.h"

enum { P_size, P_batch, P_max_queued, P_NR };

static const struct al_param_desc xm_params[P_NR] = {
	[P_size] = { "size", AL_PARAM_SIZE, 64, 16, 1ll << 20, NULL,
		     "bytes per object (at least 16: batches are linked through them)" },
	[P_batch] = { "batch", AL_PARAM_INT, 100, 1, 1 << 16, NULL,
		      "objects handed from an allocating to a freeing thread at once" },
	[P_max_queued] = { "max_queued", AL_PARAM_INT, 64, 1, 1 << 20, NULL,
			   "batches in flight before producers free their own" },
};

struct xm_shared {
	pthread_mutex_t m; /* protects top and queued */
	void *top;	   /* stack of batches: head object, next batch at offset 8 */
	unsigned queued;   /* batches on the stack */
	unsigned n;	   /* objects per batch */
	unsigned max;	   /* max_queued */
};

static int xm_setup(const int64_t *params, unsigned nworkers, void **shared)
{
	struct xm_shared *s = al_meta_alloc(sizeof(*s));

	(void)nworkers;
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->m, NULL);
	s->n = (unsigned)params[P_batch];
	s->max = (unsigned)params[P_max_queued];
	*shared = s;
	return 0;
}

static inline void **next_batch(void *head)
{
	return (void **)head + 1;
}

static bool is_producer(const struct al_worker *w)
{
	return w->nworkers == 1 || w->id < w->nworkers / 2;
}

static int xm_cycle(struct al_worker *w)
{
	struct xm_shared *s = w->shared;
	void *head = NULL;
	int ret;

	if (is_producer(w)) {
		ret = wl_alloc_list(w, (size_t)w->params[P_size], s->n, &head);
		if (ret)
			return ret;
		al_worker_live(w, w->params[P_size] * s->n);
		al_shared(&s->top, true); /* simulated CPUs: the queue's line moves */
		pthread_mutex_lock(&s->m);
		if (s->queued < s->max && w->nworkers > 1) {
			*next_batch(head) = s->top;
			s->top = head;
			s->queued++;
			head = NULL;
		}
		pthread_mutex_unlock(&s->m);
		if (!head)
			return 0;
		ret = wl_free_list(w, head, s->n);
		if (!ret)
			al_worker_live(w, -w->params[P_size] * s->n);
		return ret;
	}
	al_shared(&s->top, true);
	pthread_mutex_lock(&s->m);
	head = s->top;
	if (head) {
		s->top = *next_batch(head);
		s->queued--;
	}
	pthread_mutex_unlock(&s->m);
	if (!head)
		return 0;
	w->alloc_cross += s->n;
	ret = wl_free_list(w, head, s->n);
	if (!ret)
		al_worker_live(w, -w->params[P_size] * s->n);
	return ret;
}

static void xm_teardown(void *shared, struct al_allocator *a, struct al_ctx *c)
{
	struct xm_shared *s = shared;

	if (!s)
		return;
	while (s->top && a) {
		void *head = s->top;

		s->top = *next_batch(head);
		wl_free_list_untimed(a, c, head, s->n);
	}
	pthread_mutex_destroy(&s->m);
	al_meta_free(s, sizeof(*s));
}

static const struct al_workload_desc xmalloc_desc = {
	.name = "xmalloc",
	AL_WORKLOAD_DESC_INIT,
	.doc = "mimalloc-bench xmalloc-test: producers/2 threads only allocate, producers/2 only "
	       "free, batches handed through a shared queue",
	.flags = AL_WL_LIVE | AL_WL_DISTINCT | AL_WL_SIM, /* lists linked through the objects */
	.nparams = P_NR,
	.params = xm_params,
	.size_param = P_size,
	.setup = xm_setup,
	.cycle = xm_cycle,
	.teardown = xm_teardown,
};

AL_REGISTER_WORKLOAD(xmalloc_desc)
