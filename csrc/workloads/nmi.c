/* SPDX-License-Identifier: MIT */
/*
 * nmi: allocation under real interruption (issue 8). Each worker runs
 * malloc-free cycles (allocs_per_cycle objects of `size`, each touched, then
 * freed) while a per-thread POSIX timer (timer_create with SIGEV_THREAD_ID,
 * `rate` signals per second per thread, CLOCK_MONOTONIC) interrupts it. The
 * signal handler is the NMI model: it derives an AL_CTX_NMI context from
 * al_ctx_current() (same CPU as the worker it interrupted, wherever that
 * worker was, inside the allocator included) and allocates `handler_objs`
 * objects through the same policy; it frees them before returning, or with
 * keep=1 leaves them for the next handler run to free.
 *
 * Reported (workload metrics, wl.<name>): handler runs, objects served and
 * refused (NULL: -EBUSY, guard busy, empty cache), frees that failed (the
 * object is kept and freed later at task level, never lost), time spent in
 * handlers; the layers' own counters show what was deferred (e.g.
 * buddy.nmi_frees_deferred). Worker slowdown is the run's ops/s against a
 * run with rate=0.
 *
 * Only NMI-safe stacks run: from the top, every layer declares
 * AL_F_NMI_SAFE, down to a layer with AL_F_NMI_SHIELD (it reaches the layers
 * below only with AL_NOSPIN at NMI) or the bottom. Others are refused in
 * prepare with a clear error: in a signal handler they could spin forever on
 * a lock the interrupted worker holds.
 *
 * Teardown of a worker: disarm, block the signal, delete the timer, consume
 * any signal still pending (so none arrives after its state is freed), then
 * free what handlers left at task level. The handler stays installed for
 * the process (SIG_DFL for a real-time signal would kill the process if one
 * were ever delivered late); with no armed worker state it returns at once.
 * Signal tests run in plain and ASan builds, not TSan (TSan delays
 * asynchronous signals to its next interception point).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "alloclab/alloclab.h"

#define NMI_SIG	     (SIGRTMIN + 5) /* the timer's signal */
#define NMI_MAX_OBJS 64		    /* handler_objs limit */
#define NMI_RETRY    4096	    /* objects whose NMI free failed, freed later */

enum { P_size, P_allocs_per_cycle, P_rate, P_handler_objs, P_keep, P_NR };

static const struct al_param_desc nmi_params[P_NR] = {
	[P_size] = { "size", AL_PARAM_SIZE, 64, 1, 1ll << 30, NULL,
		     "bytes per allocation (workers and handlers)" },
	[P_allocs_per_cycle] = { "allocs_per_cycle", AL_PARAM_INT, 64, 1, 1 << 20, NULL,
				 "allocations per cycle, then as many frees" },
	[P_rate] = { "rate", AL_PARAM_INT, 10000, 0, 1000000, NULL,
		     "timer signals per second per worker thread (0 = none: the baseline)" },
	[P_handler_objs] = { "handler_objs", AL_PARAM_INT, 2, 0, NMI_MAX_OBJS, NULL,
			     "objects each handler run allocates" },
	[P_keep] = { "keep", AL_PARAM_BOOL, 0, 0, 1, NULL,
		     "leave a handler's objects for the next handler run to free" },
};

/* One worker. Handler-written fields are written only by this thread. */
struct nmi_worker {
	struct al_allocator *a;	  /* the stack */
	void **arr;		  /* the cycle's objects */
	size_t arr_len;		  /* mapping length of arr */
	size_t size;		  /* bytes per object */
	unsigned objs;		  /* handler_objs */
	bool keep;		  /* keep=1 */
	int armed;		  /* the handler works only while 1 */
	bool timer_ok;		  /* timer created */
	timer_t timer;		  /* the per-thread timer */
	bool measured;		  /* counters were reset at the first measured cycle */
	unsigned nkept;		  /* objects left by the last handler run (keep=1) */
	void *kept[NMI_MAX_OBJS]; /* those objects */
	unsigned nretry;	  /* objects whose NMI free failed */
	void *retry[NMI_RETRY];	  /* those objects, freed at task level */
	uint64_t runs;		  /* handler runs that worked */
	uint64_t served;	  /* handler allocations that returned memory */
	uint64_t refused;	  /* handler allocations that returned NULL */
	uint64_t free_errors;	  /* handler frees that failed (object kept) */
	uint64_t lost;		  /* objects that did not fit in retry[] (an error) */
	uint64_t handler_ticks;	  /* time in handlers */
	uint64_t busy_retries;	  /* worker allocations retried after -EBUSY */
};

/* Free at NMI; a failure keeps the object for a task-level free later. */
static void nmi_free_one(struct nmi_worker *m, struct al_ctx *nmi, void *p)
{
	if (al_likely(!al_free(m->a, nmi, p)))
		return;
	m->free_errors++;
	if (m->nretry < NMI_RETRY)
		m->retry[m->nretry++] = p;
	else
		m->lost++;
}

static void nmi_handler(int sig, siginfo_t *si, void *uc)
{
	struct nmi_worker *m = si->si_value.sival_ptr;
	void *got[NMI_MAX_OBJS];
	struct al_ctx *cur, nmi;
	int saved = errno;
	unsigned i, n = 0;
	uint64_t t0;

	(void)sig;
	(void)uc;
	if (!m || !__atomic_load_n(&m->armed, __ATOMIC_RELAXED) || !(cur = al_ctx_current()))
		return;
	t0 = al_ticks();
	al_ctx_nested(&nmi, cur, AL_CTX_NMI);
	for (i = 0; i < m->objs; i++) {
		void *p = al_alloc(m->a, &nmi, m->size, 0);

		if (p) {
			*(volatile char *)p = (char)i; /* touch it */
			got[n++] = p;
		} else {
			m->refused++;
		}
	}
	m->served += n;
	if (m->keep) {
		for (i = 0; i < m->nkept; i++)
			nmi_free_one(m, &nmi, m->kept[i]);
		memcpy(m->kept, got, n * sizeof(void *));
		m->nkept = n;
	} else {
		for (i = 0; i < n; i++)
			nmi_free_one(m, &nmi, got[i]);
	}
	m->runs++;
	m->handler_ticks += al_ticks() - t0;
	errno = saved;
}

static int nmi_setup(const int64_t *params, unsigned nworkers, void **shared)
{
	struct sigaction sa;

	(void)params;
	(void)nworkers;
	*shared = NULL;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = nmi_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	return sigaction(NMI_SIG, &sa, NULL) ? -errno : 0;
}

/* Refuse stacks that could deadlock in a handler. */
static int nmi_prepare(void *shared, struct al_allocator *a, struct al_ctx *c, char *err,
		       size_t errlen)
{
	struct al_allocator *l;

	(void)shared;
	(void)c;
	for (l = a; l; l = l->below) {
		if (!(l->desc->features & AL_F_NMI_SAFE)) {
			snprintf(err, errlen,
				 "layer %s is not NMI-safe (no nmi_safe feature): a signal handler "
				 "could spin on a lock the code it interrupted holds; try buddy, "
				 "percpu|magazine > buddy, nolock > slab, bpf_ma > any",
				 l->desc->name);
			return -EOPNOTSUPP;
		}
		if (l->desc->features & AL_F_NMI_SHIELD)
			break;
	}
	return 0;
}

static int nmi_worker_init(struct al_worker *w)
{
	struct nmi_worker *m = al_meta_alloc(sizeof(*m));
	int64_t rate = w->params[P_rate];
	struct itimerspec its;
	struct sigevent sev;
	sigset_t set;

	if (!m)
		return -ENOMEM;
	w->priv = m;
	m->a = w->a;
	m->size = (size_t)w->params[P_size];
	m->objs = (unsigned)w->params[P_handler_objs];
	m->keep = w->params[P_keep];
	m->arr_len = (size_t)w->params[P_allocs_per_cycle] * sizeof(void *);
	m->arr = al_meta_alloc(m->arr_len);
	if (!m->arr)
		return -ENOMEM;
	if (!rate)
		return 0;
	sigemptyset(&set);
	sigaddset(&set, NMI_SIG);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = NMI_SIG;
	sev.sigev_value.sival_ptr = m;
	sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
	if (timer_create(CLOCK_MONOTONIC, &sev, &m->timer)) {
		snprintf(w->err, w->errlen, "timer_create: %s", strerror(errno));
		return -errno;
	}
	m->timer_ok = true;
	__atomic_store_n(&m->armed, 1, __ATOMIC_RELAXED);
	memset(&its, 0, sizeof(its));
	its.it_interval.tv_sec = (time_t)(1000000000 / rate / 1000000000);
	its.it_interval.tv_nsec = (long)(1000000000 / rate % 1000000000);
	its.it_value = its.it_interval;
	if (timer_settime(m->timer, 0, &its, NULL)) {
		snprintf(w->err, w->errlen, "timer_settime: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

/* Retry a transient failure for up to a second (yielding to the holder). */
static bool retry_ok(uint64_t *t_end)
{
	uint64_t now = al_mono_ns();

	if (!*t_end)
		*t_end = now + 1000000000u;
	sched_yield();
	return now < *t_end;
}

static void nmi_reset_counters(struct nmi_worker *m)
{
	m->runs = m->served = m->refused = m->free_errors = m->handler_ticks = 0;
	m->busy_retries = 0;
}

static int nmi_cycle(struct al_worker *w)
{
	struct nmi_worker *m = w->priv;
	struct al_allocator *a = w->a;
	struct al_ctx *c = &w->ctx;
	unsigned n = (unsigned)w->params[P_allocs_per_cycle], i;
	uint64_t t0, t1;
	int ret;

	if (w->measuring && !m->measured) { /* the warmup's handler runs do not count */
		m->measured = true;
		nmi_reset_counters(m);
	}
	t0 = al_ticks();
	for (i = 0; i < n; i++) {
		uint64_t t_end = 0;

		/* a lock that gave up (-ETIMEDOUT: its holder was descheduled) or a
		 * trylock-only policy (-EBUSY): retried for up to a second, counted */
		while (!(m->arr[i] = al_alloc(a, c, m->size, 0)) &&
		       (c->err == -EBUSY || c->err == -ETIMEDOUT) && retry_ok(&t_end))
			m->busy_retries++;
		if (al_unlikely(!m->arr[i])) {
			ret = c->err ? c->err : -ENOMEM;
			snprintf(w->err, w->errlen, "allocation %u of %u (%zu bytes) failed: %s",
				 i + 1, n, m->size, al_strerror(ret));
			while (i--)
				al_free(a, c, m->arr[i]);
			return ret;
		}
		*(volatile char *)m->arr[i] = (char)i;
	}
	t1 = al_ticks();
	w->alloc_ticks += t1 - t0;
	for (i = 0; i < n; i++) {
		uint64_t t_end = 0;

		while ((ret = al_free(a, c, m->arr[i])) == -ETIMEDOUT && retry_ok(&t_end))
			m->busy_retries++;
		if (al_unlikely(ret)) {
			snprintf(w->err, w->errlen, "free(%p) failed: %s", m->arr[i],
				 al_strerror(ret));
			return ret;
		}
	}
	w->free_ticks += al_ticks() - t1;
	w->alloc_ops += n;
	w->free_ops += n;
	if (al_unlikely(__atomic_load_n(&m->lost, __ATOMIC_RELAXED))) {
		snprintf(w->err, w->errlen,
			 "%llu objects whose free failed in a handler did not fit the retry list",
			 (unsigned long long)m->lost);
		return -ENOSPC;
	}
	return 0;
}

static void nmi_worker_fini(struct al_worker *w)
{
	struct nmi_worker *m = w->priv;
	struct timespec zero = { 0, 0 };
	sigset_t set;
	unsigned i;

	if (!m)
		return;
	if (m->timer_ok) {
		__atomic_store_n(&m->armed, 0, __ATOMIC_RELAXED);
		sigemptyset(&set);
		sigaddset(&set, NMI_SIG);
		pthread_sigmask(SIG_BLOCK, &set, NULL);
		timer_delete(m->timer);
		while (sigtimedwait(&set, NULL, &zero) == NMI_SIG)
			; /* consume what is still pending for this thread */
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	}
	for (i = 0; i < m->nkept; i++)
		al_free(m->a, &w->ctx, m->kept[i]);
	for (i = 0; i < m->nretry; i++)
		al_free(m->a, &w->ctx, m->retry[i]);
	al_worker_metric(w, "nmi_handler_runs", (double)m->runs, AL_METRIC_SUM);
	al_worker_metric(w, "nmi_served", (double)m->served, AL_METRIC_SUM);
	al_worker_metric(w, "nmi_refused", (double)m->refused, AL_METRIC_SUM);
	al_worker_metric(w, "nmi_free_errors", (double)m->free_errors, AL_METRIC_SUM);
	al_worker_metric(w, "busy_retries", (double)m->busy_retries, AL_METRIC_SUM);
	al_worker_metric(w, "nmi_handler_ns", al_ticks_to_ns((double)m->handler_ticks),
			 AL_METRIC_SUM);
	al_meta_free(m->arr, m->arr_len);
	al_meta_free(m, sizeof(*m));
	w->priv = NULL;
}

static const struct al_workload_desc nmi_desc = {
	.abi_version = AL_ABI_VERSION,
	.desc_size = sizeof(struct al_workload_desc),
	.name = "nmi",
	.doc = "malloc-free while a per-thread timer signal (the NMI model) allocates and frees "
	       "through the same policy; NMI-safe policies only",
	.nparams = P_NR,
	.params = nmi_params,
	.size_param = P_size,
	.setup = nmi_setup,
	.worker_init = nmi_worker_init,
	.cycle = nmi_cycle,
	.worker_fini = nmi_worker_fini,
	.prepare = nmi_prepare,
};

AL_REGISTER_WORKLOAD(nmi_desc)
