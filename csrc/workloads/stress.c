/* SPDX-License-Identifier: MIT */
/*
 * stress: a long, checked, multi-thread stress. Each worker keeps
 * `slots` objects and, per cycle, runs ops_per_cycle random operations:
 *   alloc       a random size in [1, size_max] into an empty slot, filled
 *               with a per-object byte pattern;
 *   free        a live object, after checking its whole pattern;
 *   bulk alloc  up to `bulk` objects of one size with one al_alloc_bulk;
 *   bulk free   up to `bulk` live objects with one al_free_bulk;
 *   handoff     a live object to another worker's inbox, which checks and
 *               frees it on its next cycle (a cross-CPU free).
 * Every pattern is checked before its object goes back, so an allocator
 * that hands out overlapping or reused-while-live memory, or scribbles on
 * a live object, is caught. Errors (a changed pattern, a failed free of a
 * live object, a bulk free that freed less) are reported (workload metric
 * stress_errors and the run's error, which names the first one), never only
 * timings. A lock that gave up (-ETIMEDOUT) or a trylock-only policy
 * (-EBUSY) is retried (busy_retries); an allocation that returns a clean
 * NULL (exhaustion, an empty bpf_ma cache) is counted (alloc_nulls).
 *
 * The inboxes are bounded rings under a pthread mutex (the workload's own
 * synchronisation, not the allocator's). worker_fini checks and frees what
 * the worker still holds, then its inbox (every handoff happened in a
 * cycle, so before the barrier that precedes worker_fini).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "alloclab/alloclab.h"
#include "retry.h"

#define STRESS_INBOX 1024 /* objects per inbox */
#define STRESS_BULK  64	  /* `bulk` limit */

enum { P_size_max, P_slots, P_ops_per_cycle, P_bulk, P_handoff, P_NR };

static const struct al_param_desc stress_params[P_NR] = {
	[P_size_max] = { "size_max", AL_PARAM_SIZE, 1024, 1, 1ll << 30, NULL,
			 "largest request; sizes are uniform in [1, size_max]" },
	[P_slots] = { "slots", AL_PARAM_INT, 256, 1, 1 << 20, NULL,
		      "live objects a worker keeps at most" },
	[P_ops_per_cycle] = { "ops_per_cycle", AL_PARAM_INT, 1000, 1, 1 << 24, NULL,
			      "random operations per cycle" },
	[P_bulk] = { "bulk", AL_PARAM_INT, 16, 1, STRESS_BULK, NULL,
		     "objects per bulk call at most" },
	[P_handoff] = { "handoff", AL_PARAM_BOOL, 1, 0, 1, NULL,
			"hand objects to other workers, which free them" },
};

struct slot {
	void *p;      /* the object, NULL when empty */
	uint32_t len; /* its requested size */
	uint8_t tag;  /* its fill byte */
};

struct inbox {
	pthread_mutex_t m; /* guards the ring */
	unsigned head, n;  /* ring state */
	struct slot s[STRESS_INBOX];
};

struct stress_shared {
	unsigned nworkers; /* inboxes */
	struct inbox *in;  /* one per worker */
	size_t in_len;	   /* mapping length of in */
};

struct stress_worker {
	struct slot *slots;  /* the live objects */
	size_t slots_len;    /* mapping length */
	unsigned nslots;     /* slots */
	uint64_t errors;     /* pattern mismatches, failed frees, failed allocations */
	uint64_t checked;    /* bytes checked */
	uint64_t handoffs;   /* objects handed to another worker */
	uint64_t received;   /* objects freed from the inbox */
	uint64_t bulk_calls; /* bulk calls */
	uint64_t busy;	     /* -EBUSY retries */
	uint64_t nulls;	     /* allocations that returned NULL (exhaustion: not an error) */
};

static int stress_setup(const int64_t *params, unsigned nworkers, void **shared)
{
	struct stress_shared *sh = al_meta_alloc(sizeof(*sh));
	unsigned i;

	(void)params;
	if (!sh)
		return -ENOMEM;
	sh->nworkers = nworkers;
	sh->in_len = sizeof(struct inbox) * nworkers;
	sh->in = al_meta_alloc(sh->in_len);
	if (!sh->in) {
		al_meta_free(sh, sizeof(*sh));
		return -ENOMEM;
	}
	for (i = 0; i < nworkers; i++)
		pthread_mutex_init(&sh->in[i].m, NULL);
	*shared = sh;
	return 0;
}

static void stress_teardown(void *shared, struct al_allocator *a, struct al_ctx *c)
{
	struct stress_shared *sh = shared;
	unsigned i;

	(void)a;
	(void)c;
	if (!sh)
		return;
	for (i = 0; i < sh->nworkers; i++)
		pthread_mutex_destroy(&sh->in[i].m);
	al_meta_free(sh->in, sh->in_len);
	al_meta_free(sh, sizeof(*sh));
}

static uint64_t rnd(struct al_worker *w)
{
	uint64_t z = (w->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Count an error; the first one's message becomes the run's error. */
static int stress_fail(struct stress_worker *m, int e)
{
	m->errors++;
	return e;
}

/* Count an error; the first one's message becomes the run's error. */
#define FAIL(e_, ...) \
	(w->err[0] ? (void)0 : (void)snprintf(w->err, w->errlen, __VA_ARGS__), stress_fail(m, (e_)))

/* Check an object's pattern; 0 or -EFAULT (reported). */
static int verify(struct al_worker *w, struct stress_worker *m, const struct slot *s)
{
	const uint8_t *q = s->p;
	uint32_t i;

	for (i = 0; i < s->len; i++)
		if (q[i] != s->tag)
			return FAIL(-EFAULT,
				    "corruption: object %p byte %u of %u changed while live", s->p,
				    i, s->len);
	m->checked += s->len;
	return 0;
}

static int do_free(struct al_worker *w, struct stress_worker *m, struct slot *s)
{
	int ret = verify(w, m, s);

	if (ret)
		return ret;
	ret = wl_free_retry(w, s->p, &m->busy);
	if (ret)
		return FAIL(ret, "free(%p) of a live object of %u bytes failed: %s", s->p, s->len,
			    al_strerror(ret));
	s->p = NULL;
	w->free_ops++;
	return 0;
}

static void fill(struct slot *s, void *p, size_t len, uint8_t tag)
{
	s->p = p;
	s->len = (uint32_t)len;
	s->tag = tag ? tag : 0x5a;
	memset(p, s->tag, len);
}

static int stress_worker_init(struct al_worker *w)
{
	struct stress_worker *m = al_meta_alloc(sizeof(*m));

	if (!m)
		return -ENOMEM;
	w->priv = m;
	m->nslots = (unsigned)w->params[P_slots];
	m->slots_len = sizeof(struct slot) * m->nslots;
	m->slots = al_meta_alloc(m->slots_len);
	return m->slots ? 0 : -ENOMEM;
}

/* Free what other workers handed to this one. */
static int drain_inbox(struct al_worker *w, struct stress_worker *m)
{
	struct stress_shared *sh = w->shared;
	struct inbox *in = &sh->in[w->id];
	uint64_t t_end = 0;
	struct slot s;
	int ret = 0;

	for (;;) {
		pthread_mutex_lock(&in->m);
		if (!in->n) {
			pthread_mutex_unlock(&in->m);
			return ret;
		}
		s = in->s[in->head];
		in->head = (in->head + 1) % STRESS_INBOX;
		in->n--;
		pthread_mutex_unlock(&in->m);
		if (ret) { /* after an error: still freed, not checked */
			wl_free_untimed(w->a, &w->ctx, s.p, &t_end);
			continue;
		}
		ret = do_free(w, m, &s);
		if (!ret) {
			m->received++;
			w->alloc_cross++;
		}
	}
}

static bool handoff(struct al_worker *w, const struct slot *s)
{
	struct stress_shared *sh = w->shared;
	unsigned to = (unsigned)(rnd(w) % sh->nworkers);
	struct inbox *in = &sh->in[to];
	bool ok = false;

	if (to == w->id)
		return false;
	pthread_mutex_lock(&in->m);
	if (in->n < STRESS_INBOX) {
		in->s[(in->head + in->n) % STRESS_INBOX] = *s;
		in->n++;
		ok = true;
	}
	pthread_mutex_unlock(&in->m);
	return ok;
}

static int stress_cycle(struct al_worker *w)
{
	struct stress_worker *m = w->priv;
	size_t smax = (size_t)w->params[P_size_max];
	unsigned ops = (unsigned)w->params[P_ops_per_cycle], bulk = (unsigned)w->params[P_bulk];
	void *out[STRESS_BULK];
	unsigned i, j, k, n;
	uint64_t r, t_end = 0;
	int ret;

	ret = drain_inbox(w, m);
	for (i = 0; i < ops && !ret; i++) {
		struct slot *s = &m->slots[rnd(w) % m->nslots];
		size_t len = 1 + rnd(w) % smax;

		r = rnd(w) % 16;
		if (!s->p && r < 10) { /* alloc */
			void *p = wl_alloc_retry(w, len, &m->busy);

			if (p) /* a clean NULL (exhaustion) is counted, not an error */
				fill(s, p, len, (uint8_t)rnd(w));
			else
				m->nulls++;
			w->alloc_ops++;
		} else if (!s->p && r < 13) { /* bulk alloc into empty slots */
			n = 1 + (unsigned)(rnd(w) % bulk);
			k = (unsigned)al_alloc_bulk(w->a, &w->ctx, len, n, out, 0);
			m->bulk_calls++;
			if (!k)
				m->nulls++;
			for (j = 0; j < k; j++) {
				struct slot *t = &m->slots[(s - m->slots + j) % m->nslots];

				if (t->p && (ret = do_free(w, m, t)))
					break;
				fill(t, out[j], len, (uint8_t)rnd(w));
				w->alloc_ops++;
			}
			for (; j < k; j++) /* only after an error */
				wl_free_untimed(w->a, &w->ctx, out[j], &t_end);
		} else if (s->p && r < 11) { /* free */
			ret = do_free(w, m, s);
		} else if (s->p && r < 13) { /* bulk free of consecutive live slots */
			n = 0;
			for (j = 0; j < bulk && n < bulk; j++) {
				struct slot *t = &m->slots[(s - m->slots + j) % m->nslots];

				if (!t->p)
					continue;
				if ((ret = verify(w, m, t)))
					break;
				out[n++] = t->p;
				t->p = NULL;
			}
			if (!ret && n) {
				k = (unsigned)al_free_bulk(w->a, &w->ctx, out, n);
				m->bulk_calls++;
				if ((int)k < 0)
					ret = FAIL(-EFAULT, "free_bulk(%p, %u) failed: %s", out[0],
						   n, al_strerror((int)k));
				else if (k != n)
					ret = FAIL(-EFAULT, "free_bulk(%p, %u) freed %u of them",
						   out[0], n, k);
				w->free_ops += n;
			}
		} else if (s->p && w->params[P_handoff] && handoff(w, s)) {
			s->p = NULL;
			m->handoffs++;
		}
	}
	return ret;
}

static void stress_worker_fini(struct al_worker *w)
{
	struct stress_worker *m = w->priv;
	uint64_t t_end = 0;
	unsigned i;

	if (!m)
		return;
	for (i = 0; m->slots && i < m->nslots; i++)
		if (m->slots[i].p && do_free(w, m, &m->slots[i]))
			wl_free_untimed(w->a, &w->ctx, m->slots[i].p, &t_end); /* still freed */
	drain_inbox(w, m);
	al_worker_metric(w, "stress_errors", (double)m->errors, AL_METRIC_SUM);
	al_worker_metric(w, "checked_bytes", (double)m->checked, AL_METRIC_SUM);
	al_worker_metric(w, "handoffs", (double)m->handoffs, AL_METRIC_SUM);
	al_worker_metric(w, "received", (double)m->received, AL_METRIC_SUM);
	al_worker_metric(w, "bulk_calls", (double)m->bulk_calls, AL_METRIC_SUM);
	al_worker_metric(w, "busy_retries", (double)m->busy, AL_METRIC_SUM);
	al_worker_metric(w, "alloc_nulls", (double)m->nulls, AL_METRIC_SUM);
	al_meta_free(m->slots, m->slots_len);
	al_meta_free(m, sizeof(*m));
	w->priv = NULL;
}

static const struct al_workload_desc stress_desc = {
	.name = "stress",
	AL_WORKLOAD_DESC_INIT,
	.doc = "random alloc/free/bulk/handoff between workers, every object's fill pattern "
	       "checked before it is freed; reports errors",
	.flags = AL_WL_DISTINCT, /* every object's fill pattern is checked */
	.nparams = P_NR,
	.params = stress_params,
	.size_param = P_size_max,
	.setup = stress_setup,
	.worker_init = stress_worker_init,
	.cycle = stress_cycle,
	.worker_fini = stress_worker_fini,
	.teardown = stress_teardown,
};

AL_REGISTER_WORKLOAD(stress_desc)
