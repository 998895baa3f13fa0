/* SPDX-License-Identifier: MIT */
/*
 * The run engine: one al_run() = one fresh allocator stack measured once.
 *
 * Phases (all workers released together at each barrier; the main thread is
 * a party to every barrier and takes its snapshots while workers wait):
 *
 *   create stack, drain, record each layer's bytes_held baseline
 *   start workers → worker_init → [A] warmup cycles → [B]
 *   main: snapshot counters, steal, clock  → [C] measured cycles → [D]
 *         (meanwhile main samples memory every mem_sample_ns: mem.c)
 *   main: snapshot counters, steal, clock  → [E] worker_fini → join
 *         (then merges the workers' per-op histograms, when asked: hist.c)
 *   teardown (shared leftovers), drain all, leak check, destroy
 *
 * Reported counters are end minus start snapshots: they cover exactly the
 * measured phase, so "lock acquisitions per op" divides like by like.
 * Gauges (AL_STAT_GAUGE: objects cached now) are reported as they are at
 * the end.
 *
 * Scheduling noise is recorded beside the numbers it disturbs: each worker
 * reads its own context switches (getrusage(RUSAGE_THREAD)) after barrier C
 * and after its last measured cycle, outside every timed region, so the
 * waits at the barriers are not counted; the main thread notes the CPU it
 * woke up on (sched_getcpu, a vDSO call) at each timed wake-up in the
 * measured phase, to show when it runs on a worker's CPU.
 *
 * CPU model (DESIGN §3): in pinned mode worker i runs on the i-th CPU of the
 * affinity mask. In virtual mode each worker is its own model CPU; workers
 * are grouped per real CPU and a token passed round-robin at cycle
 * boundaries (outside timed regions) lets at most one worker per real CPU
 * run a cycle at a time, so no lock holder is descheduled by another worker
 * inside a measured section. Each phase has its own token state, and a
 * worker leaving a phase gives its turn away, so no one waits on a worker
 * that has finished.
 *
 * Workloads with AL_WL_RESET (one producer) get a new allocator after every
 * cycle (untimed), as the libarena bench resets its buddy; the counters of
 * each retired instance are accumulated so snapshots still add up.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "alloclab/alloclab.h"
#include "../core/cpu.h"
#include "mem.h"

/* A round-robin token shared by the workers of one real CPU, for one phase. */
struct token {
	pthread_mutex_t m;
	pthread_cond_t cv;
	unsigned turn; /* member index whose turn it is */
	unsigned n;    /* members */
	unsigned left; /* members still in the phase */
	unsigned char done[AL_MAX_PRODUCERS];
	const int *stop; /* the engine's stop flag (the watchdog wakes waiters) */
};

/* A reusable barrier whose party count can shrink (a worker failed to start). */
struct barrier {
	pthread_mutex_t m;
	pthread_cond_t cv;
	unsigned parties, count, gen;
	int broken; /* the watchdog fired; every wait returns at once */
};

static void barrier_init(struct barrier *b, unsigned parties)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&b->m, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* for barrier_wait_sampling */
	pthread_cond_init(&b->cv, &ca);
	pthread_condattr_destroy(&ca);
	b->parties = parties;
	b->count = b->gen = 0;
	b->broken = 0;
}

static void barrier_release_locked(struct barrier *b)
{
	b->count = 0;
	b->gen++;
	pthread_cond_broadcast(&b->cv);
}

static void barrier_wait(struct barrier *b)
{
	unsigned gen;

	pthread_mutex_lock(&b->m);
	gen = b->gen;
	if (++b->count >= b->parties)
		barrier_release_locked(b);
	else
		while (gen == b->gen && !b->broken)
			pthread_cond_wait(&b->cv, &b->m);
	pthread_mutex_unlock(&b->m);
}

static void barrier_set_parties(struct barrier *b, unsigned parties)
{
	pthread_mutex_lock(&b->m);
	b->parties = parties;
	if (b->count && b->count >= parties)
		barrier_release_locked(b);
	pthread_mutex_unlock(&b->m);
}

static void barrier_destroy(struct barrier *b)
{
	pthread_mutex_destroy(&b->m);
	pthread_cond_destroy(&b->cv);
}

struct engine;

struct worker_slot {
	struct al_worker w;
	struct engine *e;
	pthread_t th;
	unsigned group;	 /* real CPU group */
	unsigned member; /* index within the group */
	int pin_cpu;	 /* OS CPU to pin to, or -1 */
	char err[200];
	struct al_metric metrics[AL_METRICS_MAX]; /* this worker's workload metrics */
	struct al_rcu_reader rcu;		  /* grace-period reader: online while cycling */
	int where;	   /* enum worker_where, for the watchdog (relaxed) */
	uint64_t progress; /* state changes and cycles so far (relaxed) */
	uint64_t nvcsw;	   /* voluntary context switches in the measured phase */
	uint64_t nivcsw;   /* involuntary context switches (preempted) in it */
} __attribute__((aligned(AL_CACHELINE)));

struct engine {
	const struct al_run_config *cfg;
	struct al_run_result *res;
	struct al_allocator *a;
	struct al_stats acc[AL_MAX_LAYERS]; /* counters of retired instances (RESET) */
	unsigned nacc;
	void *shared;
	unsigned nw;
	unsigned ngroups;
	bool tokens;	      /* virtual mode with more workers than real CPUs */
	struct token *tok[2]; /* per phase: [0] warmup, [1] measured */
	struct barrier bar;
	int stop;
	int status;
	pthread_mutex_t err_lock;
	uint64_t duration_ticks;
	pthread_mutex_t a_lock;		/* e->a replaced (RESET) vs read by the memory sampler */
	struct al_mem_sampler *sampler; /* memory samples (main thread only) */
	struct worker_slot *ws;		/* the workers, for their live bytes */
	unsigned started;		/* worker threads started */
	int fired;			/* the watchdog ended the run (main only) */
	uint64_t last_progress;		/* sum of the workers' progress last seen */
	uint64_t last_change_ns;	/* when it last changed */
	cpu_set_t worker_cpus;		/* CPUs the workers are pinned to */
};

/* ---- where a worker is, for the watchdog ---- */

enum worker_where { W_INIT, W_BARRIER, W_TOKEN, W_CYCLE, W_FINI, W_DONE, W_NR };

static const char *const where_names[W_NR] = {
	[W_INIT] = "in worker_init",
	[W_BARRIER] = "at a phase barrier",
	[W_TOKEN] = "waiting for its CPU token",
	[W_CYCLE] = "in a cycle",
	[W_FINI] = "in worker_fini",
	[W_DONE] = "done",
};

static void set_where(struct worker_slot *s, int where)
{
	__atomic_store_n(&s->where, where, __ATOMIC_RELAXED);
	__atomic_fetch_add(&s->progress, 1, __ATOMIC_RELAXED);
}

static void engine_fail(struct engine *e, int code, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&e->err_lock);
	if (!e->status) {
		e->status = code;
		va_start(ap, fmt);
		vsnprintf(e->res->error, sizeof(e->res->error), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&e->err_lock);
	__atomic_store_n(&e->stop, 1, __ATOMIC_RELEASE);
}

static bool stopped(struct engine *e)
{
	return __atomic_load_n(&e->stop, __ATOMIC_ACQUIRE);
}

/* ---- tokens ---- */

static void token_advance_locked(struct token *t)
{
	unsigned i, k = t->turn;

	for (i = 0; i < t->n; i++) {
		k = (k + 1) % t->n;
		if (!t->done[k])
			break;
	}
	t->turn = k;
	pthread_cond_broadcast(&t->cv);
}

/* false when the run was stopped by the watchdog before the turn came. */
static bool token_acquire(struct token *t, unsigned k)
{
	bool got;

	pthread_mutex_lock(&t->m);
	while (t->turn != k && !(t->stop && __atomic_load_n(t->stop, __ATOMIC_ACQUIRE) == 2))
		pthread_cond_wait(&t->cv, &t->m);
	got = t->turn == k;
	pthread_mutex_unlock(&t->m);
	return got;
}

static void token_release(struct token *t)
{
	pthread_mutex_lock(&t->m);
	token_advance_locked(t);
	pthread_mutex_unlock(&t->m);
}

static void token_leave(struct token *t, unsigned k)
{
	pthread_mutex_lock(&t->m);
	t->done[k] = 1;
	if (t->turn == k)
		token_advance_locked(t);
	pthread_mutex_unlock(&t->m);
}

static struct token *tokens_new(unsigned ngroups, const struct worker_slot *ws, unsigned nw)
{
	struct token *t = al_meta_alloc(sizeof(*t) * ngroups);
	unsigned g, i;

	if (!t)
		return NULL;
	for (g = 0; g < ngroups; g++) {
		pthread_mutex_init(&t[g].m, NULL);
		pthread_cond_init(&t[g].cv, NULL);
	}
	for (i = 0; i < nw; i++)
		t[ws[i].group].n++;
	return t;
}

static void tokens_free(struct token *t, unsigned ngroups)
{
	unsigned g;

	if (!t)
		return;
	for (g = 0; g < ngroups; g++) {
		pthread_mutex_destroy(&t[g].m);
		pthread_cond_destroy(&t[g].cv);
	}
	al_meta_free(t, sizeof(*t) * ngroups);
}

/* ---- stats snapshots ---- */

static void stats_add_into(struct al_stats *acc, const struct al_stats *s)
{
	unsigned i;

	acc->layer = s->layer;
	if (!acc->n) {
		acc->n = s->n;
		for (i = 0; i < s->n; i++) {
			acc->v[i].name = s->v[i].name;
			acc->v[i].value = 0;
		}
	}
	for (i = 0; i < s->n && i < acc->n; i++)
		if (!(s->v[i].flags & AL_STAT_GAUGE))
			acc->v[i].value += s->v[i].value;
}

/* Current instance plus retired ones. */
static unsigned stats_total(struct engine *e, struct al_stats *out)
{
	unsigned n = al_stack_stats(e->a, out, AL_MAX_LAYERS), l, i;

	for (l = 0; l < n && l < e->nacc; l++)
		for (i = 0; i < out[l].n && i < e->acc[l].n; i++)
			if (!(out[l].v[i].flags & AL_STAT_GAUGE))
				out[l].v[i].value += e->acc[l].v[i].value;
	return n;
}

static int stack_reset(struct engine *e, struct al_ctx *c, char *err, size_t errlen)
{
	struct al_stats now[AL_MAX_LAYERS];
	unsigned n, l;
	int ret;

	al_stack_drain(e->a, c, AL_DRAIN_ALL);
	n = al_stack_stats(e->a, now, AL_MAX_LAYERS);
	for (l = 0; l < n; l++)
		stats_add_into(&e->acc[l], &now[l]);
	e->nacc = n;
	pthread_mutex_lock(&e->a_lock);
	al_stack_destroy(e->a);
	e->a = NULL;
	ret = al_stack_create(&e->cfg->stack, e->nw, &e->a, err, errlen);
	pthread_mutex_unlock(&e->a_lock);
	return ret;
}

/* ---- scheduling noise ---- */

/* This thread's context switches so far; zeros when getrusage fails. */
static void ctxsw_read(uint64_t *nvcsw, uint64_t *nivcsw)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru)) {
		*nvcsw = *nivcsw = 0;
		return;
	}
	*nvcsw = (uint64_t)ru.ru_nvcsw;
	*nivcsw = (uint64_t)ru.ru_nivcsw;
}

/* The main thread woke up in the measured phase: note on which CPU. */
static void engine_woke(struct engine *e)
{
	struct al_run_result *res = e->res;
	int cpu = sched_getcpu();

	res->engine_wakeups++;
	if (cpu < 0)
		return;
	if (cpu < 64)
		res->engine_cpus |= 1ull << cpu;
	if (cpu < CPU_SETSIZE && CPU_ISSET(cpu, &e->worker_cpus))
		res->engine_wakeups_on_worker_cpus++;
}

/* ---- memory sampling (main thread) ---- */

/* The workers' live bytes (AL_WL_LIVE workloads), or -1. */
static int64_t live_bytes(struct engine *e)
{
	int64_t sum = 0;
	unsigned i;

	if (!(e->cfg->workload->flags & AL_WL_LIVE))
		return -1;
	for (i = 0; i < e->nw; i++)
		sum += __atomic_load_n(&e->ws[i].w.live_bytes, __ATOMIC_RELAXED);
	return sum > 0 ? sum : 0;
}

static void mem_sample(struct engine *e)
{
	pthread_mutex_lock(&e->a_lock);
	al_mem_sample(e->sampler, e->a, live_bytes(e), false);
	pthread_mutex_unlock(&e->a_lock);
}

/*
 * The main thread's barrier_wait at D: instead of sleeping until the
 * measured phase ends, it wakes every mem_sample_ns to take a memory sample
 * (outside the barrier lock, so workers arriving are never held up).
 */
static void barrier_wait_sampling(struct engine *e)
{
	struct barrier *b = &e->bar;
	uint64_t period = e->cfg->mem_sample_ns, ns;
	struct timespec deadline;
	unsigned gen;

	if (!period) {
		barrier_wait(b);
		return;
	}
	pthread_mutex_lock(&b->m);
	gen = b->gen;
	if (++b->count >= b->parties) {
		barrier_release_locked(b);
		pthread_mutex_unlock(&b->m);
		return;
	}
	ns = al_mono_ns() + period;
	deadline.tv_sec = (time_t)(ns / 1000000000u);
	deadline.tv_nsec = (long)(ns % 1000000000u);
	while (gen == b->gen) {
		if (pthread_cond_timedwait(&b->cv, &b->m, &deadline) != ETIMEDOUT || gen != b->gen)
			continue;
		pthread_mutex_unlock(&b->m);
		engine_woke(e);
		mem_sample(e);
		ns = al_mono_ns() + period;
		deadline.tv_sec = (time_t)(ns / 1000000000u);
		deadline.tv_nsec = (long)(ns % 1000000000u);
		pthread_mutex_lock(&b->m);
	}
	pthread_mutex_unlock(&b->m);
}

/* ---- the watchdog (main thread) ---- */

/*
 * With cfg->watchdog_ns, the main thread's waits (the phase barriers and the
 * joins) wake up periodically and add up the workers' progress counters
 * (one step per state change and per cycle). When the sum has not moved for
 * watchdog_ns the run ends with -ETIMEDOUT and an error naming the policy,
 * the workload and where each worker is. Barriers and token waits are
 * broken so that the workers that are not stuck run out; the stuck ones are
 * left running, detached, and the allocator (and the engine's state they
 * use) is leaked on purpose: nothing is destroyed under a running thread.
 */
static void watchdog_fire(struct engine *e)
{
	char msg[sizeof(e->res->error)], pol[96];
	size_t n = 0, m = 0;
	unsigned i, g, k;
	int w;

	for (i = 0; i < e->cfg->stack.n && m < sizeof(pol); i++)
		m += (size_t)snprintf(pol + m, sizeof(pol) - m, "%s%s", i ? ">" : "",
				      e->cfg->stack.layer[i].desc->name);
	if (!e->cfg->stack.n)
		snprintf(pol, sizeof(pol), "?");
	n = (size_t)snprintf(msg, sizeof(msg),
			     "watchdog: no progress for %.3g s (policy %s, workload %s); "
			     "stuck workers left running, allocator leaked;",
			     (double)e->cfg->watchdog_ns / 1e9, pol, e->cfg->workload->name);
	for (i = 0; i < e->started && n < sizeof(msg); i++) {
		w = __atomic_load_n(&e->ws[i].where, __ATOMIC_RELAXED);
		n += (size_t)snprintf(msg + n, sizeof(msg) - n, " worker %u %s%s", i,
				      w >= 0 && w < W_NR ? where_names[w] : "?",
				      i + 1 < e->started ? "," : "");
	}
	engine_fail(e, -ETIMEDOUT, "%s", msg);
	__atomic_store_n(&e->stop, 2, __ATOMIC_RELEASE);
	e->fired = 1;
	pthread_mutex_lock(&e->bar.m);
	e->bar.broken = 1;
	pthread_cond_broadcast(&e->bar.cv);
	pthread_mutex_unlock(&e->bar.m);
	for (k = 0; k < 2; k++)
		for (g = 0; e->tok[k] && g < e->ngroups; g++) {
			pthread_mutex_lock(&e->tok[k][g].m);
			pthread_cond_broadcast(&e->tok[k][g].cv);
			pthread_mutex_unlock(&e->tok[k][g].m);
		}
}

/* True when the watchdog fired (now or before). */
static bool watchdog_check(struct engine *e)
{
	uint64_t sum = 0, now = al_mono_ns();
	unsigned i;

	if (e->fired)
		return true;
	if (!e->cfg->watchdog_ns)
		return false;
	for (i = 0; i < e->started; i++)
		sum += __atomic_load_n(&e->ws[i].progress, __ATOMIC_RELAXED);
	if (sum != e->last_progress || !e->last_change_ns) {
		e->last_progress = sum;
		e->last_change_ns = now;
		return false;
	}
	if (now - e->last_change_ns < e->cfg->watchdog_ns)
		return false;
	watchdog_fire(e);
	return true;
}

/* How often the main thread looks: an eighth of the watchdog, 1 ms to 1 s. */
static uint64_t watchdog_period(const struct engine *e)
{
	uint64_t p = e->cfg->watchdog_ns / 8;

	return p < 1000000 ? 1000000 : p > 1000000000 ? 1000000000 : p;
}

static void deadline_in(struct timespec *ts, uint64_t ns)
{
	ns += al_mono_ns();
	ts->tv_sec = (time_t)(ns / 1000000000u);
	ts->tv_nsec = (long)(ns % 1000000000u);
}

/*
 * The main thread's barrier wait: memory samples every mem_sample_ns when
 * `sample`, watchdog checks when it is on. false when the watchdog fired.
 */
static bool barrier_wait_main(struct engine *e, bool sample)
{
	struct barrier *b = &e->bar;
	uint64_t sp = sample ? e->cfg->mem_sample_ns : 0, wp, next_sample, now;
	struct timespec deadline;
	unsigned gen;

	if (!e->cfg->watchdog_ns) {
		if (sample)
			barrier_wait_sampling(e);
		else
			barrier_wait(b);
		return !e->fired;
	}
	if (e->fired)
		return false;
	wp = watchdog_period(e);
	next_sample = sp ? al_mono_ns() + sp : UINT64_MAX;
	pthread_mutex_lock(&b->m);
	gen = b->gen;
	if (++b->count >= b->parties) {
		barrier_release_locked(b);
		pthread_mutex_unlock(&b->m);
		return true;
	}
	for (;;) {
		now = al_mono_ns();
		deadline_in(&deadline, next_sample <= now	? 0
				       : next_sample - now < wp ? next_sample - now
								: wp);
		while (gen == b->gen &&
		       pthread_cond_timedwait(&b->cv, &b->m, &deadline) != ETIMEDOUT)
			;
		if (gen != b->gen)
			break;
		pthread_mutex_unlock(&b->m);
		if (sample)
			engine_woke(e);
		if (sp && al_mono_ns() >= next_sample) {
			mem_sample(e);
			next_sample = al_mono_ns() + sp;
		}
		if (watchdog_check(e))
			return false; /* watchdog_fire broke the barrier */
		pthread_mutex_lock(&b->m);
	}
	pthread_mutex_unlock(&b->m);
	return true;
}

/* Join a worker, watching the others' progress. false when the watchdog fired. */
static bool join_main(struct engine *e, unsigned i)
{
	struct timespec deadline;
	struct timespec now;

	if (!e->cfg->watchdog_ns) {
		pthread_join(e->ws[i].th, NULL);
		return true;
	}
	for (;;) {
		/* pthread_timedjoin_np measures CLOCK_REALTIME */
		clock_gettime(CLOCK_REALTIME, &now);
		deadline = now;
		deadline.tv_nsec += (long)(watchdog_period(e) % 1000000000u);
		deadline.tv_sec +=
			(time_t)(watchdog_period(e) / 1000000000u) + deadline.tv_nsec / 1000000000;
		deadline.tv_nsec %= 1000000000;
		if (pthread_timedjoin_np(e->ws[i].th, NULL, &deadline) != ETIMEDOUT)
			return true;
		if (watchdog_check(e))
			return false;
	}
}

/* The watchdog fired: detach every worker not joined yet; leak the rest. */
static void abandon_workers(struct engine *e, unsigned from)
{
	unsigned i;

	for (i = from; i < e->started; i++)
		pthread_detach(e->ws[i].th);
}

/* ---- workers ---- */

static int run_cycle(struct worker_slot *s, struct token *t)
{
	struct engine *e = s->e;
	int ret;

	if (t) {
		set_where(s, W_TOKEN);
		if (!token_acquire(t, s->member))
			return -ECANCELED; /* the watchdog stopped the run */
	}
	set_where(s, W_CYCLE);
	ret = e->cfg->workload->cycle(&s->w);
	if (t)
		token_release(t);
	al_rcu_quiescent(&s->rcu); /* between cycles: nothing is held */
	if (ret) {
		engine_fail(e, ret, "worker %u: %s", s->w.id,
			    s->err[0] ? s->err : al_strerror(ret));
		return ret;
	}
	if (e->cfg->workload->flags & AL_WL_RESET) {
		ret = stack_reset(e, &s->w.ctx, s->err, sizeof(s->err));
		s->w.a = e->a;
		if (ret) {
			engine_fail(e, ret, "allocator reset: %s", s->err);
			return ret;
		}
	}
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker_slot *s = arg;
	struct engine *e = s->e;
	const struct al_workload_desc *wl = e->cfg->workload;
	struct token *t;
	uint64_t i, deadline, nvcsw0, nivcsw0, nvcsw1, nivcsw1;
	int ret;

	if (s->pin_cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(s->pin_cpu, &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	al_ctx_set_current(&s->w.ctx); /* for signal handlers (the NMI model) */
	s->rcu.slot = -1;
	set_where(s, W_INIT);
	if (wl->worker_init) {
		ret = wl->worker_init(&s->w);
		if (ret)
			engine_fail(e, ret, "worker %u: init: %s", s->w.id,
				    s->err[0] ? s->err : al_strerror(ret));
	}
	set_where(s, W_BARRIER);
	barrier_wait(&e->bar); /* A: everyone is ready */

	t = e->tokens ? &e->tok[0][s->group] : NULL;
	al_rcu_online(&s->rcu); /* offline (quiescent) while waiting at barriers */
	for (i = 0; i < e->cfg->warmup_cycles && !stopped(e); i++)
		if (run_cycle(s, t))
			break;
	al_rcu_offline(&s->rcu);
	if (t)
		token_leave(t, s->member);
	s->w.measuring = 1;
	s->w.alloc_ticks = s->w.free_ticks = 0;
	s->w.alloc_ops = s->w.free_ops = s->w.alloc_cross = 0;
	if (s->w.hist) {
		al_hist_reset(&s->w.hist[AL_HIST_ALLOC]);
		al_hist_reset(&s->w.hist[AL_HIST_FREE]);
	}
	s->w.nmetrics = 0; /* warmup metrics are discarded */
	set_where(s, W_BARRIER);
	barrier_wait(&e->bar); /* B: warm */
	barrier_wait(&e->bar); /* C: main took its start snapshot */
	ctxsw_read(&nvcsw0, &nivcsw0);

	t = e->tokens ? &e->tok[1][s->group] : NULL;
	al_rcu_online(&s->rcu);
	deadline = al_ticks() + e->duration_ticks;
	for (i = 0; !stopped(e); i++) {
		if (e->cfg->cycles && i >= e->cfg->cycles)
			break;
		if (run_cycle(s, t))
			break;
		if (!e->cfg->cycles && al_ticks() >= deadline) {
			i++;
			break;
		}
	}
	s->w.cycles = i; /* read by main after the barrier */
	ctxsw_read(&nvcsw1, &nivcsw1);
	s->nvcsw = nvcsw1 - nvcsw0;
	s->nivcsw = nivcsw1 - nivcsw0;
	al_rcu_offline(&s->rcu);
	if (t)
		token_leave(t, s->member);
	set_where(s, W_BARRIER);
	barrier_wait(&e->bar); /* D: measured phase over */
	barrier_wait(&e->bar); /* E: main took its end snapshot */
	set_where(s, W_FINI);
	if (wl->worker_fini)
		wl->worker_fini(&s->w);
	set_where(s, W_DONE);
	return NULL;
}

/* ---- workload metrics ---- */

static struct al_metric *metric_find(struct al_metric *m, unsigned *n, unsigned max,
				     const char *name, unsigned kind)
{
	unsigned i;

	for (i = 0; i < *n; i++)
		if (m[i].name == name || !strcmp(m[i].name, name))
			return &m[i];
	if (*n >= max)
		return NULL;
	m[*n].name = name;
	m[*n].value = 0;
	m[*n].count = 0;
	m[*n].kind = kind;
	return &m[(*n)++];
}

static void metric_add(struct al_metric *m, double value, uint64_t count)
{
	if (m->kind == AL_METRIC_MAX) {
		if (!m->count || value > m->value)
			m->value = value;
	} else {
		m->value += value;
	}
	m->count += count;
}

void al_worker_metric(struct al_worker *w, const char *name, double value, unsigned kind)
{
	struct al_metric *m;

	if (!w->metrics || !name)
		return;
	m = metric_find(w->metrics, &w->nmetrics, w->metrics_max, name, kind);
	if (m)
		metric_add(m, value, 1);
}

/* Fold one worker's metrics into the run's, by name. */
static void metrics_merge(struct al_run_result *res, const struct al_worker *w)
{
	struct al_metric *m;
	unsigned i;

	for (i = 0; i < w->nmetrics; i++) {
		m = metric_find(res->metrics, &res->nmetrics, AL_METRICS_MAX, w->metrics[i].name,
				w->metrics[i].kind);
		if (m)
			metric_add(m, w->metrics[i].value, w->metrics[i].count);
	}
}

static void metrics_finish(struct al_run_result *res)
{
	unsigned i;

	for (i = 0; i < res->nmetrics; i++)
		if (res->metrics[i].kind == AL_METRIC_MEAN && res->metrics[i].count)
			res->metrics[i].value /= (double)res->metrics[i].count;
}

/* ---- the run ---- */

static int check_config(const struct al_run_config *cfg, struct al_run_result *res)
{
	const struct al_workload_desc *wl = cfg->workload;
	char why[200];
	size_t max;

	if (!wl || wl->abi_version != AL_ABI_VERSION) {
		snprintf(res->error, sizeof(res->error), "no workload, or ABI mismatch");
		return -EINVAL;
	}
	if (cfg->producers < 1 || cfg->producers > AL_MAX_PRODUCERS) {
		snprintf(res->error, sizeof(res->error), "producers=%u is out of range [1, %d]",
			 cfg->producers, AL_MAX_PRODUCERS);
		return -EINVAL;
	}
	if ((wl->flags & AL_WL_ONE_PRODUCER) && cfg->producers != 1) {
		snprintf(res->error, sizeof(res->error),
			 "%s runs exactly one producer (as the modelled bench), not %u", wl->name,
			 cfg->producers);
		return -EINVAL;
	}
	if (cfg->cpu_mode < AL_CPU_AUTO || cfg->cpu_mode > AL_CPU_VIRTUAL ||
	    cfg->timing < AL_TIMING_BATCH || cfg->timing > AL_TIMING_PER_OP_SUM) {
		snprintf(res->error, sizeof(res->error), "bad cpu_mode %d or timing %d",
			 cfg->cpu_mode, cfg->timing);
		return -EINVAL;
	}
	if (cfg->histogram && cfg->timing != AL_TIMING_PER_OP_SUM) {
		snprintf(res->error, sizeof(res->error),
			 "histogram needs timing per_op_sum (a clock pair around every operation)");
		return -EINVAL;
	}
	if (!cfg->cycles && !cfg->duration_ns) {
		snprintf(res->error, sizeof(res->error),
			 "the measured phase needs cycles > 0 or duration > 0");
		return -EINVAL;
	}
	if (al_params_check(wl->params, wl->nparams, cfg->wparams, why, sizeof(why)) ||
	    (wl->check_params &&
	     wl->check_params(cfg->wparams, cfg->producers, why, sizeof(why)))) {
		snprintf(res->error, sizeof(res->error), "%s: %s", wl->name, why);
		return -EINVAL;
	}
	if (wl->size_param >= 0) {
		int64_t size = cfg->wparams[wl->size_param];
		max = al_spec_max_size(&cfg->stack);
		if (size < 1 || (max && (uint64_t)size > max)) {
			snprintf(
				res->error, sizeof(res->error),
				"size=%lld is not a valid request: the policy takes 1 to %zu bytes",
				(long long)size, max);
			return -EINVAL;
		}
	}
	return 0;
}

static void diff_stats(struct al_stats *end, const struct al_stats *start, unsigned n)
{
	unsigned l, i;

	for (l = 0; l < n; l++)
		for (i = 0; i < end[l].n && i < start[l].n; i++)
			if (!(end[l].v[i].flags & AL_STAT_GAUGE))
				end[l].v[i].value -= start[l].v[i].value;
}

void al_result_value(struct al_run_result *res, const char *name, double value)
{
	/* One mechanism for workload results: the run's metrics[] (a value set
	 * once, as a SUM of one), beside those merged from the workers. */
	struct al_metric *m =
		metric_find(res->metrics, &res->nmetrics, AL_METRICS_MAX, name, AL_METRIC_SUM);

	if (m) {
		m->value = value;
		m->count = 1;
	}
}

/* A checked layer that handed out a bad object is the cause of whatever the
 * workload then saw (a refused allocation) and of the leak that follows: its
 * report replaces the run's error. */
static bool guard_report(struct engine *e)
{
	char why[sizeof(e->res->error)];

	if (!e->cfg->stack.check || !al_stack_guard_error(e->a, why, sizeof(why)))
		return false;
	pthread_mutex_lock(&e->err_lock);
	e->status = -EFAULT;
	snprintf(e->res->error, sizeof(e->res->error), "%s", why);
	pthread_mutex_unlock(&e->err_lock);
	return true;
}

int al_run(const struct al_run_config *cfg, struct al_run_result *res)
{
	struct engine *e;
	struct worker_slot *ws = NULL;
	struct al_stats *snap0 = NULL;
	struct al_mem_sampler *sampler = NULL;
	struct al_ctx main_ctx;
	struct al_run_config *cfg_copy = NULL;
	int64_t baseline[AL_MAX_LAYERS] = { 0 };
	uint64_t st_total0, st_steal0, st_total1, st_steal1, t0, t1;
	unsigned i, usable, started = 0, nl;
	int ret;

	memset(res, 0, sizeof(*res));
	al_clock_init();
	ret = check_config(cfg, res);
	if (ret)
		return res->status = ret;

	e = al_meta_alloc(sizeof(*e));
	/* Workers read the engine's own copy of the config, which a
	 * watchdog-abandoned worker may still read after al_run has returned */
	cfg_copy = al_meta_alloc(sizeof(*cfg_copy));
	snap0 = al_meta_alloc(sizeof(*snap0) * AL_MAX_LAYERS);
	ws = al_meta_alloc(sizeof(*ws) * cfg->producers);
	sampler = al_meta_alloc(sizeof(*sampler));
	if (!e || !cfg_copy || !snap0 || !ws || !sampler) {
		snprintf(res->error, sizeof(res->error), "out of memory for the engine");
		ret = -ENOMEM;
		goto out_free;
	}
	*cfg_copy = *cfg;
	cfg = e->cfg = cfg_copy;
	e->res = res;
	e->sampler = sampler;
	e->ws = ws;
	e->nw = cfg->producers;
	pthread_mutex_init(&e->err_lock, NULL);
	pthread_mutex_init(&e->a_lock, NULL);
	for (i = 0; i < AL_HIST_NR; i++)
		al_hist_reset(&res->hist[i]);
	al_ctx_init(&main_ctx, 0);

	usable = al_cpus_usable();
	res->ncpu_usable = usable;
	res->threads_per_core = al_threads_per_core();
	res->cpu_mode = cfg->cpu_mode == AL_CPU_AUTO
				? (e->nw <= usable ? AL_CPU_PINNED : AL_CPU_VIRTUAL)
				: cfg->cpu_mode;
	if (res->cpu_mode == AL_CPU_PINNED && e->nw > usable) {
		snprintf(res->error, sizeof(res->error),
			 "cpu=pinned needs producers <= usable CPUs (%u), not %u; use cpu=virtual",
			 usable, e->nw);
		ret = -EINVAL;
		goto out_free;
	}
	e->ngroups = e->nw < usable ? e->nw : usable;
	e->tokens = res->cpu_mode == AL_CPU_VIRTUAL && e->nw > e->ngroups;
	res->ncpu_model = e->nw;
	res->ncpu_concurrent = e->ngroups;
	res->clock_tsc = al_clock.tsc;
	res->ticks_per_ns = al_clock.ticks_per_ns;
	res->timer_overhead_ns = al_ticks_to_ns(al_clock.overhead_ticks);
	e->duration_ticks = (uint64_t)((double)cfg->duration_ns * al_clock.ticks_per_ns);

	ret = al_stack_create(&cfg->stack, e->nw, &e->a, res->error, sizeof(res->error));
	if (ret)
		goto out_free;
	al_stack_drain(e->a, &main_ctx, AL_DRAIN_ALL);
	nl = al_stack_stats(e->a, res->layers, AL_MAX_LAYERS);
	for (i = 0; i < nl; i++)
		baseline[i] = res->layers[i].bytes_held;

	if (cfg->workload->setup) {
		ret = cfg->workload->setup(cfg->wparams, e->nw, &e->shared);
		if (ret) {
			snprintf(res->error, sizeof(res->error), "%s: setup failed: %s",
				 cfg->workload->name, al_strerror(ret));
			goto out_destroy;
		}
	}
	if (cfg->workload->prepare) {
		char why[200] = "";

		ret = cfg->workload->prepare(e->shared, e->a, &main_ctx, why, sizeof(why));
		if (ret) {
			/* engine_fail, so the leak check below cannot overwrite the reason */
			engine_fail(e, ret, "%s: prepare failed: %s", cfg->workload->name,
				    why[0] ? why : al_strerror(ret));
			goto out_teardown;
		}
	}
	for (i = 0; i < e->nw; i++) {
		struct worker_slot *s = &ws[i];

		s->e = e;
		s->group = i % e->ngroups;
		s->member = i / e->ngroups;
		s->pin_cpu = al_cpu_nth(s->group);
		if (s->pin_cpu >= 0 && s->pin_cpu < CPU_SETSIZE)
			CPU_SET(s->pin_cpu, &e->worker_cpus);
		s->w.id = i;
		s->w.nworkers = e->nw;
		al_ctx_init(&s->w.ctx, i);
		s->w.a = e->a;
		s->w.params = cfg->wparams;
		s->w.shared = e->shared;
		s->w.timing = cfg->timing;
		s->w.rng =
			(cfg->seed + 1) * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xBF58476D1CE4E5B9ull;
		s->w.err = s->err;
		s->w.errlen = sizeof(s->err);
		if (cfg->histogram) {
			s->w.hist = al_meta_alloc(sizeof(struct al_hist) * AL_HIST_NR);
			if (!s->w.hist) {
				snprintf(res->error, sizeof(res->error),
					 "out of memory for histograms");
				ret = -ENOMEM;
				goto out_teardown;
			}
		}
		s->w.metrics = s->metrics;
		s->w.metrics_max = AL_METRICS_MAX;
	}
	if (e->tokens) {
		e->tok[0] = tokens_new(e->ngroups, ws, e->nw);
		e->tok[1] = tokens_new(e->ngroups, ws, e->nw);
		if (!e->tok[0] || !e->tok[1]) {
			snprintf(res->error, sizeof(res->error), "out of memory for tokens");
			ret = -ENOMEM;
			goto out_teardown;
		}
		for (i = 0; i < e->ngroups; i++) /* the watchdog wakes waiters */
			e->tok[0][i].stop = e->tok[1][i].stop = &e->stop;
	}
	barrier_init(&e->bar, e->nw + 1);
	for (i = 0; i < e->nw; i++) {
		if (pthread_create(&ws[i].th, NULL, worker_main, &ws[i]))
			break;
		started++;
	}
	if (started < e->nw) {
		/* Run the phases with the workers that started; they see stop. */
		engine_fail(e, -EAGAIN, "could not start worker %u of %u (thread limit)", started,
			    e->nw);
		barrier_set_parties(&e->bar, started + 1);
	}
	e->started = started;
	if (!barrier_wait_main(e, false)) /* A */
		goto out_abandon;
	if (!barrier_wait_main(e, false)) /* B */
		goto out_abandon;
	stats_total(e, snap0);
	al_mem_begin(sampler, &res->mem);
	al_mem_sample(sampler, e->a, live_bytes(e), true);
	al_read_steal(&st_total0, &st_steal0);
	t0 = al_ticks();
	barrier_wait(&e->bar);		 /* C */
	if (!barrier_wait_main(e, true)) /* D (memory samples meanwhile) */
		goto out_abandon;
	t1 = al_ticks();
	al_mem_end(sampler, e->a, live_bytes(e));
	al_read_steal(&st_total1, &st_steal1);
	nl = stats_total(e, res->layers);
	diff_stats(res->layers, snap0, nl);
	if (cfg->workload->report) /* workers wait at E: their state is stable */
		cfg->workload->report(e->shared, started, res);
	res->nlayers = nl;
	res->elapsed_ns = al_ticks_to_ns((double)(t1 - t0));
	if (st_total1 > st_total0)
		res->steal_pct =
			100.0 * (double)(st_steal1 - st_steal0) / (double)(st_total1 - st_total0);
	barrier_wait(&e->bar); /* E */
	for (i = 0; i < started; i++) {
		if (!join_main(e, i)) {
			abandon_workers(e, i);
			return res->status = -ETIMEDOUT; /* everything leaked on purpose */
		}
		res->cycles += ws[i].w.cycles;
		res->alloc_ops += ws[i].w.alloc_ops;
		res->free_ops += ws[i].w.free_ops;
		res->cross_frees += ws[i].w.alloc_cross;
		res->worker_nvcsw += ws[i].nvcsw;
		res->worker_nivcsw += ws[i].nivcsw;
		res->alloc_ns += al_ticks_to_ns((double)ws[i].w.alloc_ticks);
		res->free_ns += al_ticks_to_ns((double)ws[i].w.free_ticks);
		if (ws[i].w.hist) {
			al_hist_merge(&res->hist[AL_HIST_ALLOC], &ws[i].w.hist[AL_HIST_ALLOC]);
			al_hist_merge(&res->hist[AL_HIST_FREE], &ws[i].w.hist[AL_HIST_FREE]);
		}
		metrics_merge(res, &ws[i].w);
	}
	metrics_finish(res);
	barrier_destroy(&e->bar);

out_teardown:
	if (cfg->workload->teardown)
		cfg->workload->teardown(e->shared, e->a, &main_ctx);
	if (e->a) {
		struct al_stats *after = snap0; /* reuse */

		al_stack_drain(e->a, &main_ctx, AL_DRAIN_ALL);
		if (guard_report(e))
			ret = -EFAULT;
		nl = al_stack_stats(e->a, after, AL_MAX_LAYERS);
		for (i = 0; i < nl; i++) {
			res->leaked[i] = after[i].bytes_held - baseline[i];
			if (res->leaked[i] && !e->status)
				engine_fail(
					e, -EFAULT,
					"leak: layer %s holds %lld bytes more at teardown than at "
					"start (baseline %lld)",
					after[i].layer, (long long)res->leaked[i],
					(long long)baseline[i]);
		}
	}
	tokens_free(e->tok[0], e->ngroups);
	tokens_free(e->tok[1], e->ngroups);
out_destroy:
	al_stack_destroy(e->a);
	if (!ret)
		ret = e->status;
	pthread_mutex_destroy(&e->err_lock);
	pthread_mutex_destroy(&e->a_lock);
out_free:
	for (i = 0; ws && i < cfg->producers; i++)
		al_meta_free(ws[i].w.hist, sizeof(struct al_hist) * AL_HIST_NR);
	al_meta_free(sampler, sizeof(*sampler));
	al_meta_free(ws, sizeof(*ws) * cfg->producers);
	al_meta_free(snap0, sizeof(*snap0) * AL_MAX_LAYERS);
	al_meta_free(e, sizeof(*e));
	al_meta_free(cfg_copy, sizeof(*cfg_copy)); /* last: cfg may point to it */
	return res->status = ret;

out_abandon:
	/* The watchdog fired. Stuck workers still run: detach them and
	 * leak the allocator, the workload's state and the engine's. */
	abandon_workers(e, 0);
	return res->status = -ETIMEDOUT;
}
