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
 *         (meanwhile memory is sampled every mem_sample_ns, off the workers' CPUs or by worker 0
 * between cycles: mem.c) main: snapshot counters, steal, clock  → [E] worker_fini → join (then
 * merges the workers' per-op histograms, when asked: hist.c) teardown (shared leftovers), drain
 * all, leak check, destroy
 *
 * Reported counters are end minus start snapshots: they cover exactly the
 * measured phase, so "lock acquisitions per op" divides like by like.
 * Gauges (AL_STAT_GAUGE: objects cached now) are reported as they are at
 * the end.
 *
 * Realtime runs (cfg->realtime): each worker makes itself SCHED_FIFO at
 * priority 1 after pinning, before barrier A, so a lock holder is never
 * preempted by an ordinary thread, as the kernel's arena lock holders run
 * with preemption disabled. Only with fewer producers than usable CPUs: the
 * main thread and the watchdog run SCHED_OTHER on the CPU left over (a
 * SCHED_FIFO worker never yields its CPU to them). al_run_check refuses a
 * process that may not use SCHED_FIFO (neither CAP_SYS_NICE nor
 * RLIMIT_RTPRIO >= 1); a worker the kernel still refuses (a cgroup without
 * realtime time) fails the run with EPERM, naming the worker.
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
 * A run executes on an engine thread of its own (al_run_start), so that
 * the caller waits in slices (al_run_wait) and can stop it (al_run_stop):
 * the stop flag ends the workers' loops at cycle boundaries, wakes those
 * waiting for a CPU token, and wakes the main thread, which then gives the
 * workers AL_RUN_STOP_GRACE_NS without progress before leaving them running
 * and leaking the allocator, as the watchdog does. duration_ns bounds the
 * warmup and the measured phase (also with cycles); a worker whose phase it
 * cut short (fewer cycles than asked, none at all when only the duration
 * bounds it, or a fixed loop ended early through al_worker_stopping) is
 * counted in res->truncated. The steps the engine thread does itself
 * (creating the stack, the workload's setup, prepare and teardown, draining,
 * destroying) are watched by al_run_wait.
 *
 * A finite workload (AL_WL_FINITE: replay's one pass of a trace) ends a
 * worker's phase itself: its cycle returns AL_CYCLE_DONE after the worker's
 * last piece of work, the worker leaves the phase (giving its CPU token
 * away), and a phase that ended otherwise (duration, stop) is truncated. It
 * may run bounded by neither cycles nor duration (al_run_check).
 *
 * Workloads with AL_WL_RESET (one producer) get a new allocator after every
 * cycle (untimed), as the libarena bench resets its buddy; the counters of
 * each retired instance are accumulated so snapshots still add up.
 *
 * Simulated CPUs (cpu_mode AL_CPU_SIMULATED, sim.h): the workers are fibers
 * of a simulation on the engine thread, not threads. The phases are the
 * same; a barrier is a fiber parking, and the main thread's part of each
 * barrier is al_sim_step(), which releases the parked fibers at the latest
 * virtual clock and runs them until each parks again. The clock is virtual
 * for the whole run (the stack's creation and teardown too), memory samples
 * are taken by worker 0 between cycles. Nothing on a simulated CPU waits for
 * another thread, but a policy call may never return: al_run_wait watches
 * the simulation as one step of the engine thread, restarted whenever the
 * fibers progress, so the watchdog and a stop's grace still end the run.
 *
 * Before anything is built, al_run_check decides whether the configuration
 * can run at all (the same function Python's plan() calls on every cell, so
 * a sweep is refused before its first run, in the engine's terms).
 *
 * Locks, outermost first: the handle's m (al_run_wait/stop, run_step,
 * publishing the engine); under it engine_stop takes each token's m and the
 * barrier's m, one at a time. err_lock (the first failure wins) and a_lock
 * (e->a replaced under RESET vs read by the memory sampler) are leaves. The
 * workers take only the barrier's and their group's token lock, never two.
 * Cost outside the measured cycles only: a token hand-off is one mutex and
 * a condition variable per cycle in virtual mode; nothing else is per op.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>

#include "alloclab/alloclab.h"
#include "../core/cpu.h"
#include "mem.h"
#include "../core/sim_run.h"

/* A round-robin token shared by the workers of one real CPU, for one phase. */
struct token {
	pthread_mutex_t m;
	pthread_cond_t cv;
	unsigned turn; /* member index whose turn it is */
	unsigned n;    /* members */
	unsigned left; /* members still in the phase */
	unsigned char done[AL_MAX_PRODUCERS];
	const int *stop; /* the engine's stop flag (waiters are woken when it is set) */
	const int *over; /* this phase's duration is over (waiters are woken) */
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
	al_mutex_assert_held(&b->m);
	al_assert(b->count >= b->parties || b->broken);
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
	char err[256];
	struct al_metric metrics[AL_METRICS_MAX]; /* this worker's workload metrics */
	struct al_rcu_reader rcu;		  /* grace-period reader: online while cycling */
	int where;	   /* enum worker_where, for the watchdog (relaxed) */
	uint64_t progress; /* state changes and cycles so far (relaxed) */
	uint64_t nvcsw;	   /* voluntary context switches in the measured phase */
	uint64_t nivcsw;   /* involuntary context switches (preempted) in it */
	int truncated;	   /* the measured phase was cut short by the duration */
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
	struct al_run *h;		/* the run's handle: stop requests, phase */
	struct al_sim *sim;		/* cpu_mode simulated: the simulation */
	int over[2];			/* [0] warmup, [1] measured: the duration is over */
	uint64_t stop_seen_ns;		/* when the main thread saw a stop request */
	/* Pinned runs with a worker on every usable CPU: worker 0 takes the memory
	 * samples between its cycles (untimed), so no thread wakes up on a
	 * worker's CPU in the middle of a cycle. Else the main thread samples,
	 * moved off the workers' CPUs when there are others. */
	bool worker_samples;
	uint64_t next_sample_ticks; /* worker 0's next sample (worker_samples) */
	uint64_t sample_ticks;	    /* the sampling period in ticks */
	/* The main thread's own (engine_run's phases) */
	struct al_run_config *cfg_copy;	   /* what cfg points to: outlives abandoned workers */
	struct al_stats *snap0;		   /* counters at the start of the measured phase */
	int64_t baseline[AL_MAX_LAYERS];   /* each layer's bytes_held before the workload */
	struct al_ctx main_ctx;		   /* the engine thread's context */
	uint64_t t0, steal_total0, steal0; /* clock and steal at the start of the phase */
};

/* The handle of a run in the background (al_run_start). */
struct al_run {
	pthread_mutex_t m;
	pthread_cond_t cv;	   /* CLOCK_MONOTONIC; done, stop, step changes */
	struct al_run_config cfg;  /* the caller's, copied */
	struct al_run_result *res; /* the engine writes here (owned by the handle) */
	struct al_run_result *out; /* the caller's, filled in when the run ends */
	struct engine *e;	   /* while workers run: al_run_stop reaches them */
	const char *step;	   /* what the engine thread does itself, or NULL */
	uint64_t step_ns;	   /* when that step began */
	uint64_t stop_ns;	   /* when a stop was asked; 0 = not asked */
	int stop_req;		   /* a stop was asked (atomic: read by the engine) */
	int phase;		   /* enum al_run_phase (atomic) */
	int done;		   /* the engine thread has finished */
	int ended;		   /* the end was reported (done, or abandoned) */
	int freed;		   /* al_run_free was called: the engine thread frees */
	int left;		   /* workers were left running (the watchdog fired) */
	uint64_t progress;	   /* simulated CPUs: the workers' progress seen last */
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

static void tokens_wake(struct token *t, unsigned ngroups)
{
	unsigned g;

	for (g = 0; t && g < ngroups; g++) {
		pthread_mutex_lock(&t[g].m);
		pthread_cond_broadcast(&t[g].cv);
		pthread_mutex_unlock(&t[g].m);
	}
}

/*
 * Stop the run (al_run_stop): workers see the flag at their next cycle
 * boundary or in al_worker_stopping, token waiters give up their turn, and
 * the main thread wakes up to watch them stop. Called with the handle's
 * lock held, from any thread.
 */
static void engine_stop(struct engine *e)
{
	int zero = 0;

	__atomic_compare_exchange_n(&e->stop, &zero, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	tokens_wake(e->tok[0], e->ngroups);
	tokens_wake(e->tok[1], e->ngroups);
	pthread_mutex_lock(&e->bar.m);
	pthread_cond_broadcast(&e->bar.cv);
	pthread_mutex_unlock(&e->bar.m);
}

/* Phase k's duration is over: workers waiting for a token leave the phase. */
static void phase_over(struct engine *e, int k)
{
	__atomic_store_n(&e->over[k], 1, __ATOMIC_RELEASE);
	tokens_wake(e->tok[k], e->ngroups);
}

static bool stop_requested(const struct engine *e)
{
	return e->h && __atomic_load_n(&e->h->stop_req, __ATOMIC_ACQUIRE);
}

static void set_phase(struct engine *e, int phase)
{
	if (e->h)
		__atomic_store_n(&e->h->phase, phase, __ATOMIC_RELAXED);
}

/* What the engine thread does itself now (NULL: it waits for workers,
 * watched by its own watchdog): al_run_wait watches the named steps. */
static void run_step(struct al_run *h, const char *step)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->m);
	h->step = step;
	h->step_ns = al_mono_ns();
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->m);
}

/* Workers run: a stop request reaches them through the engine. */
static void run_publish(struct engine *e)
{
	if (!e->h)
		return;
	pthread_mutex_lock(&e->h->m);
	e->h->e = e;
	if (e->h->stop_ns)
		engine_stop(e);
	pthread_mutex_unlock(&e->h->m);
}

static void run_unpublish(struct engine *e)
{
	if (!e->h)
		return;
	pthread_mutex_lock(&e->h->m);
	e->h->e = NULL;
	if (e->fired)
		e->h->left = 1;
	pthread_mutex_unlock(&e->h->m);
}

/* "a>b>c": the policy, for messages. */
static void policy_name(const struct al_run_config *cfg, char *pol, size_t len)
{
	size_t m = 0;
	unsigned i;

	pol[0] = 0;
	for (i = 0; i < cfg->stack.n && m < len; i++)
		m += (size_t)snprintf(pol + m, len - m, "%s%s", i ? ">" : "",
				      cfg->stack.layer[i].desc ? cfg->stack.layer[i].desc->name
							       : "?");
	if (!cfg->stack.n)
		snprintf(pol, len, "?");
}

/* ---- tokens ---- */

static void token_advance_locked(struct token *t)
{
	unsigned i, k = t->turn;

	al_mutex_assert_held(&t->m);
	for (i = 0; i < t->n; i++) {
		k = (k + 1) % t->n;
		if (!t->done[k])
			break;
	}
	t->turn = k;
	pthread_cond_broadcast(&t->cv);
}

static bool token_cancelled(const struct token *t)
{
	return (t->stop && __atomic_load_n(t->stop, __ATOMIC_ACQUIRE)) ||
	       (t->over && __atomic_load_n(t->over, __ATOMIC_ACQUIRE));
}

/* false when the run is stopping, or the phase's duration is over, before
 * (or when) the turn comes: the worker leaves the phase without a cycle. */
static bool token_acquire(struct token *t, unsigned k)
{
	bool got;

	pthread_mutex_lock(&t->m);
	while (t->turn != k && !token_cancelled(t))
		pthread_cond_wait(&t->cv, &t->m);
	got = t->turn == k && !token_cancelled(t);
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

/* The run's stack, its counters and locks at the run's stats level. */
static int engine_stack_create(struct engine *e, char *err, size_t errlen)
{
	const struct al_workload_desc *wl = e->cfg->workload;
	unsigned ncpu = wl->model_cpus ? wl->model_cpus(e->cfg->wparams, e->nw) : e->nw;
	unsigned old = al_stats_level_set((unsigned)e->cfg->stats_level);
	int ret;

	if (ncpu < e->nw || ncpu > AL_MAX_CPUS)
		ncpu = e->nw;
	ret = al_stack_create(&e->cfg->stack, ncpu, &e->a, err, errlen);

	al_stats_level_set(old);
	return ret;
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
	ret = engine_stack_create(e, err, errlen);
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

/* Worker 0 between two cycles (worker_samples): a sample when one is due. */
static void worker_sample(struct engine *e)
{
	uint64_t now = al_ticks_fast();

	if (now < e->next_sample_ticks)
		return;
	e->next_sample_ticks = now + e->sample_ticks;
	mem_sample(e);
}

/*
 * Where the measured phase's memory samples are taken. Pinned with every
 * usable CPU running a worker: by worker 0 between cycles. Pinned with CPUs
 * to spare: by the main thread, moved to those CPUs for the phase (*saved
 * keeps its affinity; true when it was moved).
 */
static bool sampling_place(struct engine *e, cpu_set_t *saved)
{
	unsigned usable = e->res->ncpu_usable, i;
	cpu_set_t spare;
	int cpu;

	e->worker_samples = false;
	if (e->sim && e->cfg->mem_sample_ns) { /* no thread of its own: worker 0 samples */
		e->worker_samples = true;
		e->sample_ticks = (uint64_t)((double)e->cfg->mem_sample_ns * al_clock.ticks_per_ns);
		e->next_sample_ticks = al_ticks_fast() + e->sample_ticks;
		return false;
	}
	if (e->res->cpu_mode != AL_CPU_PINNED || !e->cfg->mem_sample_ns)
		return false;
	CPU_ZERO(&spare);
	for (i = 0; i < usable; i++) {
		cpu = al_cpu_nth(i);
		if (cpu >= 0 && cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &e->worker_cpus))
			CPU_SET(cpu, &spare);
	}
	if (!CPU_COUNT(&spare)) {
		e->worker_samples = true;
		e->sample_ticks = (uint64_t)((double)e->cfg->mem_sample_ns * al_clock.ticks_per_ns);
		e->next_sample_ticks = al_ticks_fast() + e->sample_ticks;
		return false;
	}
	if (pthread_getaffinity_np(pthread_self(), sizeof(*saved), saved))
		return false;
	return !pthread_setaffinity_np(pthread_self(), sizeof(spare), &spare);
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
static void watchdog_fire(struct engine *e, uint64_t limit)
{
	char msg[sizeof(e->res->error)], pol[96];
	size_t n = 0;
	unsigned i;
	int w;

	policy_name(e->cfg, pol, sizeof(pol));
	if (e->stop_seen_ns)
		n = (size_t)snprintf(msg, sizeof(msg),
				     "stopped on request, but workers made no progress for %.3g s "
				     "after it (policy %s, workload %s); stuck workers left "
				     "running, allocator leaked;",
				     (double)limit / 1e9, pol, e->cfg->workload->name);
	else
		n = (size_t)snprintf(msg, sizeof(msg),
				     "watchdog: no progress for %.3g s (policy %s, workload %s); "
				     "stuck workers left running, allocator leaked;",
				     (double)limit / 1e9, pol, e->cfg->workload->name);
	for (i = 0; i < e->started && n < sizeof(msg); i++) {
		w = __atomic_load_n(&e->ws[i].where, __ATOMIC_RELAXED);
		n += (size_t)snprintf(msg + n, sizeof(msg) - n, " worker %u %s%s", i,
				      w >= 0 && w < W_NR ? where_names[w] : "?",
				      i + 1 < e->started ? "," : "");
	}
	engine_fail(e, e->stop_seen_ns ? -ECANCELED : -ETIMEDOUT, "%s", msg);
	__atomic_store_n(&e->stop, 2, __ATOMIC_RELEASE);
	e->fired = 1;
	pthread_mutex_lock(&e->bar.m);
	e->bar.broken = 1;
	pthread_cond_broadcast(&e->bar.cv);
	pthread_mutex_unlock(&e->bar.m);
	tokens_wake(e->tok[0], e->ngroups);
	tokens_wake(e->tok[1], e->ngroups);
}

/*
 * True when the watchdog fired (now or before). After a stop request the
 * workers get AL_RUN_STOP_GRACE_NS without progress (or the watchdog's
 * time, when shorter) before they are given up on.
 */
static bool watchdog_check(struct engine *e)
{
	uint64_t sum = 0, now = al_mono_ns(), limit = e->cfg->watchdog_ns;
	unsigned i;

	if (e->fired)
		return true;
	if (!e->stop_seen_ns && stop_requested(e)) {
		e->stop_seen_ns = now;
		e->last_change_ns = 0; /* the grace counts from the request */
	}
	if (e->stop_seen_ns && (!limit || limit > AL_RUN_STOP_GRACE_NS))
		limit = AL_RUN_STOP_GRACE_NS;
	if (!limit)
		return false;
	for (i = 0; i < e->started; i++)
		sum += __atomic_load_n(&e->ws[i].progress, __ATOMIC_RELAXED);
	if (sum != e->last_progress || !e->last_change_ns) {
		e->last_progress = sum;
		e->last_change_ns = now;
		return false;
	}
	if (now - e->last_change_ns < limit)
		return false;
	watchdog_fire(e, limit);
	return true;
}

/* How often the main thread looks: an eighth of the watchdog, 1 ms to 1 s. */
static uint64_t watchdog_period(const struct engine *e)
{
	uint64_t p = e->cfg->watchdog_ns / 8;

	return p < 1000000 ? 1000000 : p > 1000000000 ? 1000000000 : p;
}

/* How long the main thread may sleep with nothing to sample: the
 * watchdog's period, shorter once a stop was asked (the grace is watched),
 * else an hour (a stop request wakes it). */
static uint64_t main_period(const struct engine *e)
{
	uint64_t p = e->cfg->watchdog_ns ? watchdog_period(e) : 3600000000000ull;

	if (e->stop_seen_ns && p > AL_RUN_STOP_GRACE_NS / 8)
		p = AL_RUN_STOP_GRACE_NS / 8;
	return p;
}

static void deadline_at(struct timespec *ts, uint64_t ns)
{
	ts->tv_sec = (time_t)(ns / 1000000000u);
	ts->tv_nsec = (long)(ns % 1000000000u);
}

/* A stop request the main thread has not acted on yet. */
static bool stop_news(const struct engine *e)
{
	return !e->stop_seen_ns && stop_requested(e);
}

/*
 * The main thread's barrier wait. It wakes up to take memory samples every
 * mem_sample_ns when `sample`, to check the watchdog when it is on, when a
 * stop is asked (then it watches the stop's grace), and, for phase k (0
 * warmup, 1 measured, -1 none) in virtual mode, when the phase's duration
 * is over, so that workers still waiting for a CPU token leave at once
 * instead of passing every turn round. false when the watchdog fired.
 */
static bool barrier_wait_main(struct engine *e, bool sample, int k)
{
	struct barrier *b = &e->bar;
	uint64_t sp = sample ? e->cfg->mem_sample_ns : 0, next_sample, now, wake, end = UINT64_MAX;
	struct timespec deadline;
	unsigned gen;
	int rc;

	if (e->fired)
		return false;
	now = al_mono_ns();
	if (k >= 0 && e->tokens && e->cfg->duration_ns)
		end = now + e->cfg->duration_ns;
	next_sample = sp ? now + sp : UINT64_MAX;
	pthread_mutex_lock(&b->m);
	gen = b->gen;
	if (++b->count >= b->parties) {
		barrier_release_locked(b);
		pthread_mutex_unlock(&b->m);
		return true;
	}
	for (;;) {
		now = al_mono_ns();
		wake = now + main_period(e);
		if (next_sample < wake)
			wake = next_sample;
		if (end < wake && !e->over[k])
			wake = end;
		deadline_at(&deadline, wake);
		rc = 0;
		while (gen == b->gen && rc != ETIMEDOUT && !stop_news(e))
			rc = pthread_cond_timedwait(&b->cv, &b->m, &deadline);
		if (gen != b->gen)
			break;
		pthread_mutex_unlock(&b->m);
		now = al_mono_ns();
		if (sample && rc == ETIMEDOUT)
			engine_woke(e);
		if (sp && now >= next_sample) {
			mem_sample(e);
			next_sample = al_mono_ns() + sp;
		}
		if (k >= 0 && now >= end && !e->over[k])
			phase_over(e, k);
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
	uint64_t p;

	for (;;) {
		/* a tenth of a second at most: a stop request does not wake a join */
		p = main_period(e);
		if (p > 100000000)
			p = 100000000;
		/* pthread_timedjoin_np measures CLOCK_REALTIME */
		clock_gettime(CLOCK_REALTIME, &now);
		deadline = now;
		deadline.tv_nsec += (long)(p % 1000000000u);
		deadline.tv_sec += (time_t)(p / 1000000000u) + deadline.tv_nsec / 1000000000;
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

/* A worker's barrier: the threads' barrier, or parking its fiber. */
static void worker_barrier(struct engine *e)
{
	if (e->sim)
		al_sim_park();
	else
		barrier_wait(&e->bar);
}

static int run_cycle(struct worker_slot *s, struct token *t)
{
	struct engine *e = s->e;
	int ret;

	if (t) {
		set_where(s, W_TOKEN);
		if (!token_acquire(t, s->member))
			return -ECANCELED; /* stopping, or the phase's time is over */
	}
	set_where(s, W_CYCLE);
	ret = e->cfg->workload->cycle(&s->w);
	if (e->sim)
		al_sim_sync(AL_SIM_CYCLE); /* a cycle boundary is a sync point */
	if (t)
		token_release(t);
	al_rcu_quiescent(&s->rcu); /* between cycles: nothing is held */
	if (ret == AL_CYCLE_DONE)
		return ret; /* the worker leaves the phase (worker_warmup/measure) */
	if (ret) {
		engine_fail(e, ret, "worker %u: %s", s->w.id,
			    s->err[0] ? s->err : al_strerror(ret));
		return ret;
	}
	if (e->cfg->workload->flags & AL_WL_RESET) {
		ret = stack_reset(e, &s->w.ctx, s->err, sizeof(s->err));
		s->w.a = e->a;
		if (e->sim)
			al_sim_top(e->a);
		if (ret) {
			engine_fail(e, ret, "allocator reset: %s", s->err);
			return ret;
		}
	}
	return 0;
}

/* Pin, publish the context, the workload's worker_init; then barrier A. */
static void worker_start(struct worker_slot *s)
{
	struct engine *e = s->e;
	const struct al_workload_desc *wl = e->cfg->workload;
	int ret;

	if (s->pin_cpu >= 0 && !e->sim) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(s->pin_cpu, &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	if (e->cfg->realtime) {
		struct sched_param sp = { .sched_priority = 1 };

		ret = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
		if (ret)
			engine_fail(e, -ret,
				    "worker %u: realtime: the kernel refused SCHED_FIFO (%s); a "
				    "cgroup may give this process no realtime time",
				    s->w.id, al_strerror(-ret));
	}
	al_ctx_set_current(&s->w.ctx); /* for signal handlers (the NMI model) */
	/* A pinned worker has its CPU to itself: lock waits never yield. */
	if (!e->sim)
		al_lock_spin_only(e->res->cpu_mode == AL_CPU_PINNED);
	s->w.stop = &e->stop;
	s->rcu.slot = -1;
	set_where(s, W_INIT);
	if (wl->worker_init) {
		ret = wl->worker_init(&s->w);
		if (ret)
			engine_fail(e, ret, "worker %u: init: %s", s->w.id,
				    s->err[0] ? s->err : al_strerror(ret));
	}
	set_where(s, W_BARRIER);
	worker_barrier(e); /* A: everyone is ready */
}

/* Warmup cycles, bounded by the duration too: a run takes at most about
 * twice its duration, whatever warmup_cycles asks. */
static void worker_warmup(struct worker_slot *s)
{
	struct engine *e = s->e;
	struct token *t = e->tokens ? &e->tok[0][s->group] : NULL;

	s->w.deadline = e->duration_ticks ? al_ticks() + e->duration_ticks : 0;
	al_rcu_online(&s->rcu); /* offline (quiescent) while waiting at barriers */
	for (uint64_t i = 0; i < e->cfg->warmup_cycles && !stopped(e); i++) {
		if (i && s->w.deadline && al_ticks() >= s->w.deadline)
			break;
		if (run_cycle(s, t))
			break;
	}
	al_rcu_offline(&s->rcu);
	if (t)
		token_leave(t, s->member);
}

/* What the warmup measured is discarded. */
static void worker_reset_measures(struct worker_slot *s)
{
	s->w.measuring = 1;
	s->w.alloc_ticks = s->w.free_ticks = 0;
	s->w.alloc_ops = s->w.free_ops = s->w.alloc_cross = 0;
	if (s->w.hist) {
		al_hist_reset(&s->w.hist[AL_HIST_ALLOC]);
		al_hist_reset(&s->w.hist[AL_HIST_FREE]);
	}
	s->w.nmetrics = 0;
}

/* The measured cycles. duration_ns bounds the phase, also when cycles are
 * given: every worker starts at least one cycle, and none after the
 * deadline. A phase cut short is marked truncated. */
static void worker_measure(struct worker_slot *s)
{
	struct engine *e = s->e;
	struct token *t = e->tokens ? &e->tok[1][s->group] : NULL;
	uint64_t i, deadline, nvcsw0, nivcsw0, nvcsw1, nivcsw1;
	bool deadline_hit = false, done = false;
	int ret;

	ctxsw_read(&nvcsw0, &nivcsw0);
	al_rcu_online(&s->rcu);
	deadline = e->duration_ticks ? al_ticks() + e->duration_ticks : 0;
	s->w.deadline = deadline;
	s->w.cut = 0;
	for (i = 0; !stopped(e); i++) {
		if (e->cfg->cycles && i >= e->cfg->cycles)
			break;
		if (i && deadline && al_ticks() >= deadline)
			break;
		ret = run_cycle(s, t);
		if (e->worker_samples && !s->w.id)
			worker_sample(e);
		if (ret == AL_CYCLE_DONE) {
			done = true;
			i++; /* the cycle that finished counts */
			break;
		}
		if (ret) {
			/* A worker still waiting for its turn when main declares the
			 * phase over sees the end before its own deadline (taken a
			 * little later than main's): its fixed loop was cut too. */
			if (ret == -ECANCELED)
				deadline_hit = true;
			break;
		}
	}
	s->w.cycles = i; /* read by main after the barrier */
	if (deadline && al_ticks() >= deadline)
		deadline_hit = true;
	/* Cut short: the workload's loop saw the end, or the phase ended before
	 * the cycles asked for; with the duration alone, before the worker's
	 * first cycle (its turn never came: the phase holds none of its work). */
	s->truncated = s->w.cut || (deadline_hit && i < (e->cfg->cycles ? e->cfg->cycles : 1));
	if (e->cfg->workload->flags & AL_WL_FINITE) /* not done: its part was cut short */
		s->truncated = !done;
	s->w.deadline = 0;
	ctxsw_read(&nvcsw1, &nivcsw1);
	s->nvcsw = nvcsw1 - nvcsw0;
	s->nivcsw = nivcsw1 - nivcsw0;
	al_rcu_offline(&s->rcu);
	if (t)
		token_leave(t, s->member);
}

/* A worker: start, warmup, measured phase, fini; the main thread is a party
 * to every barrier (A to E) and snapshots while the workers wait. */
static void *worker_main(void *arg)
{
	struct worker_slot *s = arg;
	struct engine *e = s->e;

	worker_start(s);
	worker_warmup(s);
	worker_reset_measures(s);
	set_where(s, W_BARRIER);
	worker_barrier(e); /* B: warm */
	worker_barrier(e); /* C: main took its start snapshot */
	worker_measure(s);
	set_where(s, W_BARRIER);
	worker_barrier(e); /* D: measured phase over */
	worker_barrier(e); /* E: main took its end snapshot */
	set_where(s, W_FINI);
	if (e->cfg->workload->worker_fini)
		e->cfg->workload->worker_fini(&s->w);
	set_where(s, W_DONE);
	return NULL;
}

/* A worker's fiber on a simulated CPU. */
static void sim_worker_main(void *arg)
{
	worker_main(arg);
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

/* Record a refusal of a configuration: its fault and the message. -EINVAL. */
static int refuse(int *fault, int f, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (fault)
		*fault = f;
	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* The workload's parameters (range, then its own cross-parameter check) and
 * the request size against what the stack accepts. */
static int check_wparams(const struct al_run_config *cfg, int *fault, char *err, size_t errlen)
{
	const struct al_workload_desc *wl = cfg->workload;
	char why[200] = "";
	size_t max;

	if (al_params_check(wl->params, wl->nparams, cfg->wparams, why, sizeof(why)) ||
	    (wl->check_params && wl->check_params(cfg->wparams, cfg->producers, why, sizeof(why))))
		return refuse(fault, AL_RUN_WPARAMS, err, errlen, "%s: %s", wl->name,
			      why[0] ? why : "its parameters do not go together");
	if (wl->size_param >= 0) {
		int64_t size = cfg->wparams[wl->size_param];

		max = al_spec_max_size(&cfg->stack);
		if (size < 1 || (max && (uint64_t)size > max))
			return refuse(fault, AL_RUN_SIZE, err, errlen,
				      "size=%lld is not a valid request: the policy takes 1 to %zu "
				      "bytes",
				      (long long)size, max);
	}
	return 0;
}

/* Whether this process may make a thread SCHED_FIFO at priority 1: the
 * capability, or a realtime priority limit (what sched_setscheduler checks). */
static int check_rest(const struct al_run_config *cfg, int *fault, char *err, size_t errlen);

/* What a simulated run needs besides the common checks. */
static int check_sim(const struct al_run_config *cfg, int *fault, char *err, size_t errlen)
{
	const struct al_workload_desc *wl = cfg->workload;

	if (!(wl->flags & AL_WL_SIM))
		return refuse(fault, AL_RUN_SIM, err, errlen, "%s cannot run on simulated CPUs: %s",
			      wl->name,
			      wl->flags & AL_WL_NMI ? "it sends signals between threads"
			      : wl->flags & AL_WL_VMALLOC
				      ? "its kernel threads block on condition variables"
				      : "its workers block outside al_lock or run threads of their "
					"own (a workload declares AL_WL_SIM when they do neither)");
	if (cfg->realtime)
		return refuse(fault, AL_RUN_SIM, err, errlen,
			      "realtime does not apply to simulated CPUs (no thread is scheduled)");
	if (!cfg->sim.table)
		return refuse(fault, AL_RUN_SIM, err, errlen,
			      "a simulated run needs a cost table (a calibration)");
	if (!(cfg->sim.line_transfer_ns >= 0) || !(cfg->sim.lines_per_handoff >= 0))
		return refuse(fault, AL_RUN_SIM, err, errlen,
			      "line_transfer_ns (%g) and lines_per_handoff (%g) must be >= 0",
			      cfg->sim.line_transfer_ns, cfg->sim.lines_per_handoff);
	if (cfg->sim.calibrate && cfg->producers != 1)
		return refuse(fault, AL_RUN_SIM, err, errlen,
			      "a calibration runs one producer, not %u", cfg->producers);
	return check_rest(cfg, fault, err, errlen);
}

static bool realtime_permitted(void)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	struct rlimit rl;

	if (!getrlimit(RLIMIT_RTPRIO, &rl) && rl.rlim_cur >= 1)
		return true;
	memset(data, 0, sizeof(data));
	return !syscall(SYS_capget, &hdr, data) &&
	       (data[CAP_SYS_NICE / 32].effective & (1u << (CAP_SYS_NICE % 32)));
}

int al_run_check(const struct al_run_config *cfg, int *fault, char *err, size_t errlen)
{
	const struct al_workload_desc *wl = cfg->workload;
	unsigned usable = al_cpus_usable();

	if (fault)
		*fault = AL_RUN_OK;
	if (!wl || wl->abi_version != AL_ABI_VERSION)
		return refuse(fault, AL_RUN_NO_WORKLOAD, err, errlen,
			      "no workload, or ABI mismatch");
	if (cfg->producers < 1 || cfg->producers > AL_MAX_PRODUCERS)
		return refuse(fault, AL_RUN_PRODUCERS, err, errlen,
			      "producers=%u is out of range [1, %d]", cfg->producers,
			      AL_MAX_PRODUCERS);
	if ((wl->flags & AL_WL_ONE_PRODUCER) && cfg->producers != 1)
		return refuse(fault, AL_RUN_ONE_PRODUCER, err, errlen,
			      "%s runs exactly one producer (as the modelled bench), not %u",
			      wl->name, cfg->producers);
	if (cfg->cpu_mode < AL_CPU_AUTO || cfg->cpu_mode > AL_CPU_SIMULATED ||
	    cfg->timing < AL_TIMING_BATCH || cfg->timing > AL_TIMING_PER_OP_SUM ||
	    cfg->stats_level < 0 || cfg->stats_level >= AL_STATS_NR)
		return refuse(fault, AL_RUN_MODE, err, errlen,
			      "bad cpu_mode %d, timing %d or stats_level %d", cfg->cpu_mode,
			      cfg->timing, cfg->stats_level);
	if (cfg->cpu_mode == AL_CPU_PINNED && cfg->producers > usable)
		return refuse(fault, AL_RUN_PINNED, err, errlen,
			      "cpu=pinned needs producers <= usable CPUs (%u), not %u; use "
			      "cpu=virtual",
			      usable, cfg->producers);
	if (cfg->cpu_mode == AL_CPU_SIMULATED)
		return check_sim(cfg, fault, err, errlen);
	if (al_sim_running())
		return refuse(fault, AL_RUN_SIM_BUSY, err, errlen,
			      "a simulated run is in progress in this process (its clock is "
			      "virtual): run measured cells after it, or in another process");
	if (cfg->realtime && cfg->producers >= usable)
		return refuse(fault, AL_RUN_REALTIME, err, errlen,
			      "realtime needs fewer producers than usable CPUs (%u), not %u: the "
			      "main thread and the watchdog keep a CPU",
			      usable, cfg->producers);
	if (cfg->realtime && !realtime_permitted())
		return refuse(fault, AL_RUN_REALTIME_PERM, err, errlen,
			      "realtime: this process may not use SCHED_FIFO (no CAP_SYS_NICE, "
			      "RLIMIT_RTPRIO is 0): run as root, grant CAP_SYS_NICE or raise the "
			      "limit (ulimit -r 1)");
	return check_rest(cfg, fault, err, errlen);
}

/* The checks every CPU mode shares, after the mode's own. */
static int check_rest(const struct al_run_config *cfg, int *fault, char *err, size_t errlen)
{
	const struct al_workload_desc *wl = cfg->workload;
	const struct al_layer_desc *shared;

	if (cfg->histogram && cfg->timing != AL_TIMING_PER_OP_SUM)
		return refuse(fault, AL_RUN_HISTOGRAM, err, errlen,
			      "histogram needs timing per_op_sum (a clock pair around every "
			      "operation)");
	if (!cfg->cycles && !cfg->duration_ns && !(wl->flags & AL_WL_FINITE))
		return refuse(fault, AL_RUN_NO_END, err, errlen,
			      "the measured phase needs cycles > 0 or duration > 0");
	shared = al_spec_shared_layer(&cfg->stack);
	if ((wl->flags & AL_WL_DISTINCT) && shared)
		return refuse(
			fault, AL_RUN_DISTINCT, err, errlen,
			"%s needs distinct objects, but layer %s hands out one block per CPU; "
			"use a real allocator (e.g. buddy or slab)",
			wl->name, shared->name);
	return check_wparams(cfg, fault, err, errlen);
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

/* The engine's state, its copy of the config and its buffers; NULL if out of
 * memory. Workers read the engine's own copy of the config, which a
 * watchdog-abandoned worker may still read after the run has returned. */
static struct engine *engine_new(struct al_run *h)
{
	struct engine *e = al_meta_alloc(sizeof(*e));
	unsigned i;

	if (!e)
		return NULL;
	e->nw = h->cfg.producers;
	e->cfg_copy = al_meta_alloc(sizeof(*e->cfg_copy));
	e->snap0 = al_meta_alloc(sizeof(*e->snap0) * AL_MAX_LAYERS);
	e->ws = al_meta_alloc(sizeof(*e->ws) * e->nw);
	e->sampler = al_meta_alloc(sizeof(*e->sampler));
	e->res = h->res;
	if (!e->cfg_copy || !e->snap0 || !e->ws || !e->sampler)
		return e; /* engine_free frees what there is */
	*e->cfg_copy = h->cfg;
	e->cfg = e->cfg_copy;
	e->h = h;
	pthread_mutex_init(&e->err_lock, NULL);
	pthread_mutex_init(&e->a_lock, NULL);
	for (i = 0; i < AL_HIST_NR; i++)
		al_hist_reset(&e->res->hist[i]);
	al_ctx_init(&e->main_ctx, 0);
	return e;
}

static void engine_free(struct engine *e)
{
	for (unsigned i = 0; e->ws && i < e->nw; i++)
		al_meta_free(e->ws[i].w.hist, sizeof(struct al_hist) * AL_HIST_NR);
	al_meta_free(e->sampler, sizeof(*e->sampler));
	al_meta_free(e->ws, sizeof(*e->ws) * e->nw);
	al_meta_free(e->snap0, sizeof(*e->snap0) * AL_MAX_LAYERS);
	al_meta_free(e->cfg_copy, sizeof(*e->cfg_copy));
	al_meta_free(e, sizeof(*e));
}

/* The CPU model (pinned or virtual, groups per real CPU) and the clock. */
static void engine_cpus(struct engine *e)
{
	struct al_run_result *res = e->res;
	unsigned usable = al_cpus_usable();

	res->ncpu_usable = usable;
	res->threads_per_core = al_threads_per_core();
	res->cpu_mode = e->cfg->cpu_mode == AL_CPU_AUTO
				? (e->nw <= usable ? AL_CPU_PINNED : AL_CPU_VIRTUAL)
				: e->cfg->cpu_mode;
	e->ngroups = e->nw < usable ? e->nw : usable;
	if (res->cpu_mode == AL_CPU_SIMULATED)
		e->ngroups = 1; /* one thread runs every model CPU */
	e->tokens = res->cpu_mode == AL_CPU_VIRTUAL && e->nw > e->ngroups;
	res->ncpu_model = e->nw;
	res->ncpu_concurrent = e->ngroups;
	res->clock_tsc = al_clock.tsc;
	res->ticks_per_ns = al_clock.ticks_per_ns;
	res->timer_overhead_ns = al_ticks_to_ns(al_clock.overhead_ticks);
	e->duration_ticks = (uint64_t)((double)e->cfg->duration_ns * al_clock.ticks_per_ns);
}

/* A fresh stack, drained, with each layer's bytes_held as its baseline. */
static int stack_build(struct engine *e)
{
	struct al_run_result *res = e->res;
	unsigned i, nl;
	int ret;

	run_step(e->h, "creating the stack");
	ret = engine_stack_create(e, res->error, sizeof(res->error));
	if (ret)
		return ret;
	run_step(e->h, "draining the new stack");
	al_stack_drain(e->a, &e->main_ctx, AL_DRAIN_ALL);
	nl = al_stack_stats(e->a, res->layers, AL_MAX_LAYERS);
	for (i = 0; i < nl; i++)
		e->baseline[i] = res->layers[i].bytes_held;
	return 0;
}

static int workload_setup(struct engine *e)
{
	const struct al_workload_desc *wl = e->cfg->workload;
	int ret;

	if (!wl->setup)
		return 0;
	run_step(e->h, "the workload's setup");
	ret = wl->setup(e->cfg->wparams, e->nw, &e->shared);
	if (ret)
		snprintf(e->res->error, sizeof(e->res->error), "%s: setup failed: %s", wl->name,
			 al_strerror(ret));
	return ret;
}

static int workload_prepare(struct engine *e)
{
	const struct al_workload_desc *wl = e->cfg->workload;
	char why[200] = "";
	int ret;

	if (!wl->prepare)
		return 0;
	run_step(e->h, "the workload's prepare");
	ret = wl->prepare(e->shared, e->a, &e->main_ctx, why, sizeof(why));
	if (ret) /* engine_fail, so the leak check cannot overwrite the reason */
		engine_fail(e, ret, "%s: prepare failed: %s", wl->name,
			    why[0] ? why : al_strerror(ret));
	return ret;
}

/* Each worker's slot: its CPU group, context, parameters and buffers. */
static int workers_setup(struct engine *e)
{
	const struct al_run_config *cfg = e->cfg;

	for (unsigned i = 0; i < e->nw; i++) {
		struct worker_slot *s = &e->ws[i];

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
		s->w.metrics = s->metrics;
		s->w.metrics_max = AL_METRICS_MAX;
		if (cfg->histogram) {
			s->w.hist = al_meta_alloc(sizeof(struct al_hist) * AL_HIST_NR);
			if (!s->w.hist) {
				snprintf(e->res->error, sizeof(e->res->error),
					 "out of memory for histograms");
				return -ENOMEM;
			}
		}
	}
	return 0;
}

/* Per-phase CPU tokens, in virtual mode with more workers than real CPUs. */
static int tokens_setup(struct engine *e)
{
	if (!e->tokens)
		return 0;
	e->tok[0] = tokens_new(e->ngroups, e->ws, e->nw);
	e->tok[1] = tokens_new(e->ngroups, e->ws, e->nw);
	if (!e->tok[0] || !e->tok[1]) {
		snprintf(e->res->error, sizeof(e->res->error), "out of memory for tokens");
		return -ENOMEM;
	}
	for (unsigned i = 0; i < e->ngroups; i++) { /* waiters are woken when these are set */
		e->tok[0][i].stop = e->tok[1][i].stop = &e->stop;
		e->tok[0][i].over = &e->over[0];
		e->tok[1][i].over = &e->over[1];
	}
	return 0;
}

/* Start the workers; when the thread limit stops some, the phases run with
 * those that started (they see stop). */
static void workers_start(struct engine *e)
{
	unsigned started = 0;

	barrier_init(&e->bar, e->nw + 1);
	run_publish(e);
	/* Threads: the engine's own watchdog watches the workers. Simulated CPUs:
	 * their fibers run on this thread, so al_run_wait watches it, as long as
	 * they make no progress (a policy call that never returns): its watchdog
	 * and a stop's grace then leave this thread running and end the run. */
	run_step(e->h, e->sim ? "simulating the model CPUs" : NULL);
	if (e->sim) {
		for (unsigned i = 0; i < e->nw; i++) {
			if (al_sim_spawn(e->sim, i, sim_worker_main, &e->ws[i], &e->ws[i].w.ctx))
				break;
			started++;
		}
		if (started < e->nw) /* the fibers made run; the phases see stop */
			engine_fail(e, -ENOMEM, "no memory for model CPU %u's stack", started);
		e->started = started;
		return;
	}
	for (unsigned i = 0; i < e->nw; i++) {
		if (pthread_create(&e->ws[i].th, NULL, worker_main, &e->ws[i]))
			break;
		started++;
	}
	if (started < e->nw) {
		engine_fail(e, -EAGAIN, "could not start worker %u of %u (thread limit)", started,
			    e->nw);
		barrier_set_parties(&e->bar, started + 1);
	}
	e->started = started;
}

/* The workload's own threads (not workers) stop, or go on. */
static void workload_pause(struct engine *e, bool on)
{
	if (e->cfg->workload->pause && e->shared)
		e->cfg->workload->pause(e->shared, on);
}

/* The start of the measured phase, while the workers wait at B: the counter
 * snapshot, memory and steal, where samples are taken, the clock. Returns
 * sampling_place's answer (the main thread was moved; *saved its mask). */
static bool measure_start(struct engine *e, cpu_set_t *saved)
{
	bool moved;

	workload_pause(e, true);
	stats_total(e, e->snap0);
	workload_pause(e, false);
	al_mem_begin(e->sampler, &e->res->mem);
	al_mem_sample(e->sampler, e->a, live_bytes(e), true);
	al_read_steal(&e->steal_total0, &e->steal0);
	moved = sampling_place(e, saved);
	e->t0 = al_ticks();
	return moved;
}

/* The main thread's part of a barrier on simulated CPUs: run every fiber
 * until it parks. false: the simulation deadlocked (the run fails). */
static bool sim_step(struct engine *e)
{
	char why[200];
	int ret = al_sim_step(e->sim, why, sizeof(why));

	if (ret)
		engine_fail(e, ret, "%s", why);
	return !ret;
}

/* engine_measure on simulated CPUs. */
static bool engine_measure_sim(struct engine *e)
{
	cpu_set_t saved;

	if (!sim_step(e)) /* A */
		return false;
	set_phase(e, AL_RUN_WARMUP);
	if (!sim_step(e)) /* B */
		return false;
	measure_start(e, &saved);
	if (!sim_step(e)) /* C */
		return false;
	set_phase(e, AL_RUN_MEASURED);
	al_sim_measuring(e->sim, true);
	if (!sim_step(e)) /* D */
		return false;
	al_sim_measuring(e->sim, false);
	al_sim_get_stats(e->sim, &e->res->sim);
	set_phase(e, AL_RUN_FINISH);
	return true;
}

/* Barriers A to D: warmup, the start snapshot, the measured phase (memory
 * samples meanwhile). false: the watchdog fired. */
static bool engine_measure(struct engine *e)
{
	cpu_set_t saved;
	bool moved, ok;

	if (e->sim)
		return engine_measure_sim(e);

	if (!barrier_wait_main(e, false, -1)) /* A */
		return false;
	set_phase(e, AL_RUN_WARMUP);
	if (!barrier_wait_main(e, false, 0)) /* B */
		return false;
	moved = measure_start(e, &saved);
	barrier_wait(&e->bar); /* C */
	set_phase(e, AL_RUN_MEASURED);
	ok = barrier_wait_main(e, !e->worker_samples, 1); /* D */
	if (moved)
		pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
	if (!ok)
		return false;
	set_phase(e, AL_RUN_FINISH);
	return true;
}

/* The end snapshot while the workers wait at E: counters over the measured
 * phase, elapsed time, steal, the workload's report. */
static void engine_snapshot(struct engine *e)
{
	struct al_run_result *res = e->res;
	uint64_t total1, steal1, t1 = al_ticks();
	unsigned nl;

	al_mem_end(e->sampler, e->a, live_bytes(e));
	al_read_steal(&total1, &steal1);
	workload_pause(e, true);
	nl = stats_total(e, res->layers);
	diff_stats(res->layers, e->snap0, nl);
	if (e->cfg->workload->report) /* workers wait at E: their state is stable */
		e->cfg->workload->report(e->shared, e->started, res);
	workload_pause(e, false);
	res->nlayers = nl;
	res->elapsed_ns = al_ticks_to_ns((double)(t1 - e->t0));
	if (total1 > e->steal_total0)
		res->steal_pct =
			100.0 * (double)(steal1 - e->steal0) / (double)(total1 - e->steal_total0);
}

/* Release E, join the workers and add up what they measured. false: one did
 * not end (the rest are abandoned, everything leaked on purpose). */
static bool engine_collect(struct engine *e)
{
	struct al_run_result *res = e->res;

	if (e->sim) {
		if (!sim_step(e)) /* E: worker_fini, and the fibers end */
			return false;
	} else {
		barrier_wait(&e->bar); /* E */
	}
	for (unsigned i = 0; i < e->started; i++) {
		const struct worker_slot *s = &e->ws[i];

		if (!e->sim && !join_main(e, i)) {
			abandon_workers(e, i);
			return false;
		}
		res->cycles += s->w.cycles;
		res->truncated += s->truncated != 0;
		res->alloc_ops += s->w.alloc_ops;
		res->free_ops += s->w.free_ops;
		res->cross_frees += s->w.alloc_cross;
		if (e->sim) {
			/* Every model CPU reads the one host thread's switches over
			 * nearly the same phase: the widest reading is the count. */
			if (s->nvcsw > res->worker_nvcsw)
				res->worker_nvcsw = s->nvcsw;
			if (s->nivcsw > res->worker_nivcsw)
				res->worker_nivcsw = s->nivcsw;
		} else {
			res->worker_nvcsw += s->nvcsw;
			res->worker_nivcsw += s->nivcsw;
		}
		res->alloc_ns += al_ticks_to_ns((double)s->w.alloc_ticks);
		res->free_ns += al_ticks_to_ns((double)s->w.free_ticks);
		if (s->w.hist) {
			al_hist_merge(&res->hist[AL_HIST_ALLOC], &s->w.hist[AL_HIST_ALLOC]);
			al_hist_merge(&res->hist[AL_HIST_FREE], &s->w.hist[AL_HIST_FREE]);
		}
		metrics_merge(res, &s->w);
	}
	metrics_finish(res);
	run_unpublish(e);
	barrier_destroy(&e->bar);
	return true;
}

/* The workload's teardown, then drain and the leak check against the
 * baseline; returns ret, or -EFAULT when a checked layer misbehaved. */
static int engine_teardown(struct engine *e, int ret)
{
	struct al_stats *after = e->snap0; /* reused */
	struct al_run_result *res = e->res;
	unsigned i, nl;

	if (e->cfg->workload->teardown) {
		run_step(e->h, "the workload's teardown");
		e->cfg->workload->teardown(e->shared, e->a, &e->main_ctx);
	}
	run_step(e->h, "draining at teardown");
	al_stack_drain(e->a, &e->main_ctx, AL_DRAIN_ALL);
	if (guard_report(e))
		ret = -EFAULT;
	nl = al_stack_stats(e->a, after, AL_MAX_LAYERS);
	for (i = 0; i < nl; i++) {
		res->leaked[i] = after[i].bytes_held - e->baseline[i];
		if (res->leaked[i] && !e->status)
			engine_fail(e, -EFAULT,
				    "leak: layer %s holds %lld bytes more at teardown than at "
				    "start (baseline %lld)",
				    after[i].layer, (long long)res->leaked[i],
				    (long long)e->baseline[i]);
	}
	tokens_free(e->tok[0], e->ngroups);
	tokens_free(e->tok[1], e->ngroups);
	return ret;
}

/* Destroy the stack; the run's status: ret, else the first failure, else a
 * stop on request. */
static int engine_destroy(struct engine *e, int ret)
{
	run_step(e->h, "destroying the stack");
	al_stack_destroy(e->a);
	run_step(e->h, NULL);
	if (!ret)
		ret = e->status;
	if (!ret && stop_requested(e)) {
		snprintf(e->res->error, sizeof(e->res->error),
			 "stopped on request after %llu measured cycles",
			 (unsigned long long)e->res->cycles);
		ret = -ECANCELED;
	}
	pthread_mutex_destroy(&e->err_lock);
	pthread_mutex_destroy(&e->a_lock);
	return ret;
}

/* The run, on the engine thread: h->cfg into h->res. Setup, start, measure,
 * collect, teardown; a run the watchdog ends leaks its stack and engine. */
static int engine_run(struct al_run *h)
{
	struct al_run_result *res = h->res;
	struct engine *e;
	int ret;

	memset(res, 0, sizeof(*res));
	al_clock_init();
	ret = al_run_check(&h->cfg, NULL, res->error, sizeof(res->error));
	if (ret)
		return res->status = ret;
	e = engine_new(h);
	if (!e || !e->cfg) {
		snprintf(res->error, sizeof(res->error), "out of memory for the engine");
		if (e)
			engine_free(e);
		return res->status = -ENOMEM;
	}
	engine_cpus(e);
	if (res->cpu_mode == AL_CPU_SIMULATED) {
		ret = al_sim_new(&e->cfg->sim, e->nw, &e->sim, res->error, sizeof(res->error));
		if (ret)
			goto out_free;
		res->ticks_per_ns = al_clock.ticks_per_ns; /* virtual ticks */
		res->timer_overhead_ns = 0;
		e->duration_ticks = (uint64_t)((double)e->cfg->duration_ns * al_clock.ticks_per_ns);
	}
	ret = stack_build(e);
	if (ret)
		goto out_free;
	if (e->sim)
		al_sim_top(e->a); /* its calls are the workload's operations */
	ret = workload_setup(e);
	if (ret)
		goto out_destroy;
	ret = workload_prepare(e);
	if (!ret)
		ret = workers_setup(e);
	if (!ret && res->cpu_mode == AL_CPU_PINNED && !e->sim)
		al_kthreads_avoid(&e->worker_cpus); /* helpers the stack started */
	if (!ret)
		ret = tokens_setup(e);
	if (!ret) {
		workers_start(e);
		if (!engine_measure(e)) {
			if (!e->sim)
				abandon_workers(e, 0); /* stuck workers still run: detach them */
			run_unpublish(e);
			al_sim_free(e->sim); /* its fibers' stacks stay (leaked) */
			return res->status = e->status;
		}
		engine_snapshot(e);
		if (!engine_collect(e)) {
			run_unpublish(e);
			al_sim_free(e->sim);
			return res->status = e->status;
		}
	}
	ret = engine_teardown(e, ret);
out_destroy:
	ret = engine_destroy(e, ret);
out_free:
	al_sim_free(e->sim);
	engine_free(e);
	return res->status = ret;
}

/* ---- runs in the background ---- */

static void handle_free(struct al_run *h)
{
	pthread_mutex_destroy(&h->m);
	pthread_cond_destroy(&h->cv);
	al_meta_free(h->res, sizeof(*h->res));
	al_meta_free(h, sizeof(*h));
}

static void *engine_thread(void *arg)
{
	struct al_run *h = arg;
	bool free_it;

	engine_run(h);
	pthread_mutex_lock(&h->m);
	__atomic_store_n(&h->phase, AL_RUN_DONE, __ATOMIC_RELAXED);
	h->done = 1;
	free_it = h->freed; /* the caller gave up on it: nobody else will free */
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->m);
	if (free_it)
		handle_free(h);
	return NULL;
}

int al_run_start(const struct al_run_config *cfg, struct al_run_result *res, struct al_run **out)
{
	struct al_run *h;
	pthread_condattr_t ca;
	pthread_attr_t attr;
	sigset_t block, old;
	pthread_t th;
	int ret;

	memset(res, 0, sizeof(*res));
	*out = NULL;
	al_clock_init();
	h = al_meta_alloc(sizeof(*h));
	if (h)
		h->res = al_meta_alloc(sizeof(*h->res));
	if (!h || !h->res) {
		al_meta_free(h, sizeof(*h));
		snprintf(res->error, sizeof(res->error), "out of memory for the run");
		return res->status = -ENOMEM;
	}
	h->cfg = *cfg;
	h->out = res;
	h->step = "starting the engine thread";
	h->step_ns = al_mono_ns();
	pthread_mutex_init(&h->m, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->cv, &ca);
	pthread_condattr_destroy(&ca);

	/* Asynchronous signals go to the caller's threads, never to the engine's
	 * (which inherit this mask): a Python program's SIGINT handler then runs
	 * on its main thread, which waits in al_run_wait slices. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	sigaddset(&block, SIGQUIT);
	sigaddset(&block, SIGALRM);
	sigaddset(&block, SIGCHLD);
	sigaddset(&block, SIGUSR1);
	sigaddset(&block, SIGUSR2);
	sigaddset(&block, SIGWINCH);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	ret = pthread_create(&th, &attr, engine_thread, h);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (ret) {
		handle_free(h);
		snprintf(res->error, sizeof(res->error), "could not start the engine thread: %s",
			 strerror(ret));
		return res->status = -ret;
	}
	*out = h;
	return 0;
}

/*
 * The engine thread works on a step itself (h->step): give up on it when
 * the step has lasted watchdog_ns, or the stop grace since a stop request.
 * The engine thread is left running with everything it holds; it frees the
 * handle if it ever finishes after al_run_free. Called with h->m held;
 * returns when to look again.
 */
static uint64_t run_watch(struct al_run *h, uint64_t now)
{
	uint64_t limit = h->cfg.watchdog_ns, base = h->step_ns;
	char pol[96];

	if (!h->step)
		return UINT64_MAX;
	if (h->e && h->e->sim) { /* the simulation is one step: it lasts while fibers progress */
		uint64_t sum = 0;

		for (unsigned i = 0; i < h->e->nw; i++)
			sum += __atomic_load_n(&h->e->ws[i].progress, __ATOMIC_RELAXED);
		if (sum != h->progress) {
			h->progress = sum;
			h->step_ns = base = now;
		}
	}
	if (h->stop_ns) {
		if (!limit || limit > AL_RUN_STOP_GRACE_NS)
			limit = AL_RUN_STOP_GRACE_NS;
		if (h->stop_ns > base)
			base = h->stop_ns;
	}
	if (!limit)
		return UINT64_MAX;
	if (now < base || now - base < limit)
		return base + limit;
	policy_name(&h->cfg, pol, sizeof(pol));
	if (h->stop_ns) {
		h->out->status = -ECANCELED;
		snprintf(h->out->error, sizeof(h->out->error),
			 "stopped on request, but %s did not finish within %.3g s (policy %s, "
			 "workload %s); engine thread left running, allocator leaked",
			 h->step, (double)limit / 1e9, pol,
			 h->cfg.workload ? h->cfg.workload->name : "?");
	} else {
		h->out->status = -ETIMEDOUT;
		snprintf(h->out->error, sizeof(h->out->error),
			 "watchdog: no progress for %.3g s in %s (policy %s, workload %s); engine "
			 "thread left running, allocator leaked",
			 (double)limit / 1e9, h->step, pol,
			 h->cfg.workload ? h->cfg.workload->name : "?");
	}
	h->ended = 1;
	if (h->e) /* should the stuck step return, the run ends at once */
		engine_stop(h->e);
	return UINT64_MAX;
}

int al_run_wait(struct al_run *h, uint64_t timeout_ns)
{
	uint64_t now, end, next;
	struct timespec ts;
	int ret;

	/* The clock is read under h->m: a step the engine started before we
	 * held it then never lies in our future (now - step_ns would wrap and
	 * fire the watchdog at once). */
	pthread_mutex_lock(&h->m);
	now = al_mono_ns();
	end = timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
	for (;;) {
		if (h->done && !h->ended) {
			memcpy(h->out, h->res, sizeof(*h->out));
			h->ended = 1;
		}
		if (h->ended) {
			ret = h->out->status;
			break;
		}
		next = run_watch(h, now);
		if (h->ended)
			continue;
		if (now >= end) {
			ret = -EINPROGRESS;
			break;
		}
		if (next > end)
			next = end;
		if (next - now > 3600000000000ull) /* the end or the engine wakes us */
			next = now + 3600000000000ull;
		deadline_at(&ts, next);
		pthread_cond_timedwait(&h->cv, &h->m, &ts);
		now = al_mono_ns();
	}
	pthread_mutex_unlock(&h->m);
	return ret;
}

void al_run_stop(struct al_run *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->m);
	if (!h->stop_ns) {
		h->stop_ns = al_mono_ns();
		__atomic_store_n(&h->stop_req, 1, __ATOMIC_RELEASE);
		if (h->e)
			engine_stop(h->e);
		pthread_cond_broadcast(&h->cv);
	}
	pthread_mutex_unlock(&h->m);
}

int al_run_phase(struct al_run *h, uint64_t *progress)
{
	uint64_t sum = 0;
	unsigned i;

	pthread_mutex_lock(&h->m);
	if (h->e)
		for (i = 0; i < h->e->nw; i++)
			sum += __atomic_load_n(&h->e->ws[i].progress, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&h->m);
	if (progress)
		*progress = sum;
	return __atomic_load_n(&h->phase, __ATOMIC_RELAXED);
}

int al_run_abandoned(struct al_run *h)
{
	int ret;

	pthread_mutex_lock(&h->m);
	ret = (h->ended && !h->done) || h->left;
	pthread_mutex_unlock(&h->m);
	return ret;
}

void al_run_free(struct al_run *h)
{
	bool going, free_it;

	if (!h)
		return;
	pthread_mutex_lock(&h->m);
	going = !h->done && !h->ended;
	pthread_mutex_unlock(&h->m);
	if (going) {
		al_run_stop(h);
		al_run_wait(h, UINT64_MAX);
	}
	pthread_mutex_lock(&h->m);
	h->freed = 1;
	free_it = h->done;
	pthread_mutex_unlock(&h->m);
	if (free_it)
		handle_free(h);
}

int al_run(const struct al_run_config *cfg, struct al_run_result *res)
{
	struct al_run *h;
	int ret = al_run_start(cfg, res, &h);

	if (ret)
		return ret;
	ret = al_run_wait(h, UINT64_MAX);
	al_run_free(h);
	return ret;
}
