/* SPDX-License-Identifier: MIT */
/*
 * Engine tests: stacks, runs on every bottom layer, exact op counts for fixed
 * cycles, counters covering the measured phase only, the virtual CPU token,
 * the scheduling noise recorded per run, bad configurations, and the lock
 * under contention (FIFO, failure, AA).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>

#include "test.h"

static void cfg_init(struct al_run_config *cfg, const char *wl, const char *layer)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->workload = al_workload_find(wl);
	al_params_default(cfg->workload->params, cfg->workload->nparams, cfg->wparams);
	cfg->stack.n = 1;
	cfg->stack.layer[0].desc = al_layer_find(layer);
	al_params_default(cfg->stack.layer[0].desc->params, cfg->stack.layer[0].desc->nparams,
			  cfg->stack.layer[0].params);
	cfg->producers = 1;
	cfg->warmup_cycles = 3;
	cfg->cycles = 10;
}

static long long res_stat(const struct al_run_result *r, unsigned layer, const char *name)
{
	unsigned i;

	for (i = 0; i < r->layers[layer].n; i++)
		if (!strcmp(r->layers[layer].v[i].name, name))
			return (long long)r->layers[layer].v[i].value;
	return -1;
}

TEST(test_registry)
{
	CHECK(al_layer_find("libc") != NULL);
	CHECK(al_layer_find("null") != NULL);
	CHECK(al_layer_find("nope") == NULL);
	CHECK(al_workload_find("malloc-free") != NULL);
	CHECK(al_workload_find("malloc") != NULL);
	CHECK(al_workload_find("calloc") != NULL);
	CHECK_EQ(al_layer_register(al_layer_find("libc")), -EEXIST);
	CHECK_EQ(al_layer_register(NULL), -EINVAL);
}

TEST(test_run_exact_counts)
{
	static const char *layers[] = { "libc", "null" };
	struct al_run_config cfg;
	struct al_run_result res;
	unsigned l, p;

	for (l = 0; l < 2; l++)
		for (p = 1; p <= 3; p++) {
			cfg_init(&cfg, "malloc-free", layers[l]);
			cfg.producers = p;
			cfg.wparams[1] = 16; /* allocs_per_cycle */
			CHECK_EQ(al_run(&cfg, &res), 0);
			CHECK_EQ(res.cycles, 10 * p);
			CHECK_EQ(res.alloc_ops, 160 * p);
			CHECK_EQ(res.free_ops, 160 * p);
			CHECK_EQ(res.ncpu_model, p);
			CHECK(res.alloc_ns > 0);
			if (l == 0) {
				/* counters cover the measured phase only, not warmup */
				CHECK_EQ(res_stat(&res, 0, "allocs"), 160 * p);
				CHECK_EQ(res_stat(&res, 0, "frees"), 160 * p);
				CHECK_EQ(res.layers[0].bytes_held, 0);
			}
		}
}

TEST(test_run_virtual_tokens)
{
	struct al_run_config cfg;
	struct al_run_result res;

	cfg_init(&cfg, "malloc-free", "libc");
	cfg.producers = 8;
	cfg.cpu_mode = AL_CPU_VIRTUAL;
	cfg.timing = AL_TIMING_PER_OP_SUM;
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK_EQ(res.cpu_mode, AL_CPU_VIRTUAL);
	CHECK_EQ(res.ncpu_model, 8);
	CHECK(res.ncpu_concurrent <= al_cpus_usable());
	CHECK_EQ(res.alloc_ops, 8 * 10 * 64);
	/* duration-bounded: every worker ran a cycle, or its turn had not come
	 * when the 2 ms were over (on a loaded host) and it counts as truncated */
	cfg.cycles = 0;
	cfg.duration_ns = 2000000;
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK(res.cycles + res.truncated >= 8);
	CHECK_EQ(res.alloc_ops, res.cycles * 64);
}

/* The main thread's wake-ups land only on CPUs of the affinity mask. */
static uint64_t affinity_mask64(void)
{
	cpu_set_t set;
	uint64_t m = 0;
	int c;

	if (sched_getaffinity(0, sizeof(set), &set))
		return ~0ull;
	for (c = 0; c < 64; c++)
		if (CPU_ISSET(c, &set))
			m |= 1ull << c;
	return m;
}

/* A context-switch count read as a difference of two getrusage calls: a
 * wrapped (negative) difference shows up as a huge value. */
#define SANE_CTXSW(x) ((x) < (1ull << 40))

TEST(test_run_sched_noise)
{
	struct al_run_config cfg;
	struct al_run_result res;
	unsigned usable = al_cpus_usable(), k;

	/* Pinned with every usable CPU running a worker (k = 0, 1): worker 0
	 * samples between its cycles and the main thread never wakes up on a
	 * worker's CPU; with a CPU to spare (k = 2, 3), the main thread samples
	 * from the spare CPUs only. */
	for (k = 0; k < 4; k++) {
		bool all = k < 2;

		if (!all && usable < 2)
			break;
		cfg_init(&cfg, "malloc-free", "libc");
		cfg.producers = all ? usable : 1;
		if (cfg.producers > 4)
			break;
		cfg.cpu_mode = AL_CPU_PINNED;
		cfg.cycles = 0;
		cfg.duration_ns = 100000000; /* the phase outlasts many sampling periods */
		cfg.mem_sample_ns = 1000000;
		cfg.watchdog_ns = k % 2 ? 10000000000ull : 0; /* both of the main thread's waits */
		CHECK_EQ(al_run(&cfg, &res), 0);
		CHECK(SANE_CTXSW(res.worker_nvcsw));
		CHECK(SANE_CTXSW(res.worker_nivcsw));
		CHECK(res.mem.samples > 10);
		CHECK_EQ(res.engine_wakeups_on_worker_cpus, 0);
		if (all) {
			CHECK_EQ(res.engine_wakeups, 0);
		} else {
			CHECK(res.engine_wakeups > 0);
			CHECK(res.engine_cpus != 0);
			CHECK((res.engine_cpus & ~affinity_mask64()) == 0);
		}
	}

	/* No sampling and no watchdog: the main thread sleeps through the phase. */
	cfg.mem_sample_ns = 0;
	cfg.watchdog_ns = 0;
	cfg.duration_ns = 2000000;
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK_EQ(res.engine_wakeups, 0);
	CHECK_EQ(res.engine_cpus, 0);

	/* Virtual CPUs, two workers per real CPU: a worker waiting for its CPU
	 * token sleeps, a voluntary context switch counted in the phase. */
	cfg_init(&cfg, "malloc-free", "libc");
	cfg.producers = 2 * usable;
	cfg.cpu_mode = AL_CPU_VIRTUAL;
	cfg.cycles = 50;
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK(res.worker_nvcsw > 0);
	CHECK(SANE_CTXSW(res.worker_nvcsw));
	CHECK(SANE_CTXSW(res.worker_nivcsw));
}

TEST(test_run_reset_workloads)
{
	struct al_run_config cfg;
	struct al_run_result res;

	cfg_init(&cfg, "calloc", "libc");
	cfg.wparams[1] = 100;
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK_EQ(res.alloc_ops, 1000);
	CHECK_EQ(res.free_ops, 0);
	CHECK_EQ(res_stat(&res, 0, "allocs"), 1000); /* summed over reset instances */
	cfg.producers = 2;
	CHECK_EQ(al_run(&cfg, &res), -EINVAL);
	CHECK(strstr(res.error, "one producer") != NULL);
}

TEST(test_run_bad_config)
{
	struct al_run_config cfg;
	struct al_run_result res;

	cfg_init(&cfg, "malloc-free", "null");
	cfg.producers = 0;
	CHECK_EQ(al_run(&cfg, &res), -EINVAL);
	cfg.producers = AL_MAX_PRODUCERS + 1;
	CHECK_EQ(al_run(&cfg, &res), -EINVAL);
	cfg.producers = 1;
	cfg.wparams[0] = 0; /* size */
	CHECK_EQ(al_run(&cfg, &res), -EINVAL);
	CHECK(strstr(res.error, "size=0") != NULL);
	cfg.wparams[0] = (512 << 10) + 1;
	CHECK_EQ(al_run(&cfg, &res), -EINVAL);
	cfg.wparams[0] = 64;
	cfg.cycles = 0;
	cfg.duration_ns = 0;
	CHECK_EQ(al_run(&cfg, &res), -EINVAL);
	cfg.cycles = 1;
	cfg.cpu_mode = AL_CPU_PINNED;
	cfg.producers = al_cpus_usable() + 1;
	CHECK_EQ(al_run(&cfg, &res), -EINVAL);
	CHECK(strstr(res.error, "pinned") != NULL);
}

/* Cross-parameter checks of a workload (its check_params) refuse the run
 * before anything is built, with the values named. */
TEST(test_run_workload_check_params)
{
	const struct al_workload_desc *wl;
	struct al_run_config cfg;
	struct al_run_result res;
	unsigned i, lo = 0, hi = 0, nt = 0;

	cfg_init(&cfg, "larson", "libc");
	wl = cfg.workload;
	CHECK(wl->check_params != NULL);
	for (i = 0; i < wl->nparams; i++) {
		if (!strcmp(wl->params[i].name, "min_size"))
			lo = i;
		if (!strcmp(wl->params[i].name, "max_size"))
			hi = i;
	}
	cfg.wparams[lo] = 1000;
	cfg.wparams[hi] = 8;
	CHECK_EQ(al_run(&cfg, &res), -EINVAL);
	CHECK(strstr(res.error, "larson: min_size=1000 is above max_size=8") != NULL);
	cfg.wparams[lo] = 8;
	CHECK_EQ(al_run(&cfg, &res), 0);

	cfg_init(&cfg, "test_vmalloc", "libc");
	wl = cfg.workload;
	CHECK(wl->flags & AL_WL_VMALLOC);
	CHECK(al_workload_find("nmi")->flags & AL_WL_NMI);
	for (i = 0; i < wl->nparams; i++)
		if (!strcmp(wl->params[i].name, "nr_threads"))
			nt = i;
	cfg.wparams[nt] = 2;
	CHECK_EQ(al_run(&cfg, &res), -EINVAL);
	CHECK(strstr(res.error, "nr_threads=2 with producers=1") != NULL);
}

/* ---- lock ---- */

static struct al_lock test_lock;

/* The test lock counts in these (as a layer's lock counts in its counters). */
#define TL_COUNTERS(C, D, P) AL_LOCK_COUNTERS(C, P, lock, "the test lock")
AL_COUNTERS_DEFINE(TL_COUNTERS, TL_, tl_counters);
static struct al_counters tl_ctr;

static void test_lock_init(uint64_t budget_ns, bool timed)
{
	al_lock_init(&test_lock, budget_ns, timed);
	al_counters_fini(&tl_ctr);
	CHECK_EQ(al_counters_init_desc(&tl_ctr, tl_counters, TL_NR, 0, 8), 0);
	al_lock_count_in(&test_lock, &tl_ctr, TL_lock_acquired);
}

static struct al_lock_stats test_lock_stats(void)
{
	struct al_lock_stats st;

	al_lock_stats_get(&test_lock, &st);
	return st;
}
static long shared_counter;

struct lock_arg {
	unsigned cpu;
	unsigned iters;
	unsigned failed;
};

static void *lock_thread(void *p)
{
	struct lock_arg *arg = p;
	struct al_ctx c;
	unsigned i;

	al_ctx_init(&c, arg->cpu);
	for (i = 0; i < arg->iters; i++) {
		if (al_lock_acquire(&test_lock, &c)) {
			arg->failed++;
			continue;
		}
		shared_counter++;
		al_lock_release(&test_lock, &c);
	}
	return NULL;
}

TEST(test_lock_contended)
{
	pthread_t th[4];
	struct lock_arg arg[4];
	struct al_lock_stats st;
	unsigned i, failed = 0;

	test_lock_init(1000000000ull, true);
	shared_counter = 0;
	for (i = 0; i < 4; i++) {
		arg[i] = (struct lock_arg){ .cpu = i, .iters = 20000 };
		pthread_create(&th[i], NULL, lock_thread, &arg[i]);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		failed += arg[i].failed;
	}
	CHECK_EQ(failed, 0);
	CHECK_EQ(shared_counter, 80000);
	st = test_lock_stats();
	CHECK_EQ(st.acquired, 80000);
	CHECK_EQ(st.failed, 0);
	CHECK(st.owner_switches <= 80000);
}

TEST(test_lock_budget_and_aa)
{
	struct al_ctx a, b, nmi;

	al_ctx_init(&a, 0);
	al_ctx_init(&b, 1);
	al_ctx_init(&nmi, 0);
	nmi.level = AL_CTX_NMI;
	test_lock_init(200000, false); /* 200 us */
	CHECK_EQ(al_lock_acquire(&test_lock, &a), 0);
	CHECK_EQ(al_lock_tryacquire(&test_lock, &b), -EBUSY);
	CHECK_EQ(al_lock_acquire(&test_lock, &b), -ETIMEDOUT);
	CHECK_EQ(al_lock_acquire(&test_lock, &nmi), -EDEADLK);
	al_lock_release(&test_lock, &a);
	/* the abandoned tickets are skipped: the next acquirer gets it at once */
	CHECK_EQ(al_lock_tryacquire(&test_lock, &b), 0);
	al_lock_release(&test_lock, &b);
	CHECK_EQ(al_lock_acquire(&test_lock, &a), 0);
	al_lock_release(&test_lock, &a);
	CHECK_EQ(test_lock_stats().acquired, 3);
	CHECK_EQ(test_lock_stats().failed, 3);
	CHECK_EQ(test_lock_stats().owner_switches, 2);
}

/* Budget 0: waiters abandon at once and retry while a holder may be
 * descheduled (4 threads, 2 cores), the case that once wrapped the ticket
 * ring. Mutual exclusion must hold and every failure must be counted. */
static long excl_inside, excl_violations, excl_ok;

static void *excl_thread(void *p)
{
	struct al_ctx c;
	unsigned i;

	al_ctx_init(&c, (unsigned)(uintptr_t)p);
	for (i = 0; i < 50000; i++) {
		if (al_lock_acquire(&test_lock, &c))
			continue;
		if (__atomic_fetch_add(&excl_inside, 1, __ATOMIC_SEQ_CST))
			__atomic_fetch_add(&excl_violations, 1, __ATOMIC_RELAXED);
		shared_counter++;
		__atomic_fetch_sub(&excl_inside, 1, __ATOMIC_SEQ_CST);
		__atomic_fetch_add(&excl_ok, 1, __ATOMIC_RELAXED);
		al_lock_release(&test_lock, &c);
	}
	return NULL;
}

TEST(test_lock_abandon_storm)
{
	pthread_t th[4];
	unsigned i;

	test_lock_init(0, false);
	shared_counter = excl_ok = excl_violations = 0;
	for (i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, excl_thread, (void *)(uintptr_t)i);
	for (i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(excl_violations, 0);
	CHECK_EQ(shared_counter, excl_ok);
	CHECK_EQ(test_lock_stats().acquired, excl_ok);
	CHECK_EQ(test_lock_stats().acquired + test_lock_stats().failed, 200000);
}

/* The preload shim's test-and-set mode: the same guarantees, no queue. */
TEST(test_lock_tas_mode)
{
	pthread_t th[4];
	struct lock_arg arg[4];
	struct al_ctx a, b, nmi;
	unsigned i, failed = 0;

	al_lock_fair = 0;
	test_lock_init(1000000000ull, true);
	al_lock_fair = 1;
	CHECK(!test_lock.fair);
	shared_counter = 0;
	for (i = 0; i < 4; i++) {
		arg[i] = (struct lock_arg){ .cpu = i, .iters = 20000 };
		pthread_create(&th[i], NULL, lock_thread, &arg[i]);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		failed += arg[i].failed;
	}
	CHECK_EQ(failed, 0);
	CHECK_EQ(shared_counter, 80000);
	CHECK_EQ(test_lock_stats().acquired, 80000);
	CHECK_EQ(test_lock.pending, 0); /* every waiter counted itself out */

	al_lock_fair = 0;
	test_lock_init(200000, false);
	al_lock_fair = 1;
	al_ctx_init(&a, 0);
	al_ctx_init(&b, 1);
	al_ctx_init(&nmi, 0);
	nmi.level = AL_CTX_NMI;
	CHECK_EQ(al_lock_acquire(&test_lock, &a), 0);
	CHECK_EQ(al_lock_tryacquire(&test_lock, &b), -EBUSY);
	CHECK_EQ(al_lock_acquire(&test_lock, &b), -ETIMEDOUT);
	CHECK_EQ(al_lock_acquire(&test_lock, &nmi), -EDEADLK);
	al_lock_release(&test_lock, &a);
	CHECK_EQ(al_lock_tryacquire(&test_lock, &b), 0);
	al_lock_release(&test_lock, &b);
	CHECK_EQ(test_lock_stats().failed, 3);
}

/* al_lock_set_tas: a test-and-set lock whatever al_lock_fair says (the page
 * allocator's pcp->lock). A trylock fails while a waiter is counted, as
 * qspinlock's does while its pending bit is set, and a waiter that runs out
 * of budget behind a holder of its own CPU at its own level times out: only
 * a holder at a lower level is a deadlock. */
TEST(test_lock_set_tas)
{
	struct al_ctx a, a2, b, irq;

	al_ctx_init(&a, 0);
	al_ctx_init(&a2, 0);
	al_ctx_init(&b, 1);
	al_ctx_init(&irq, 0);
	irq.level = AL_CTX_IRQ;
	test_lock_init(200000, false); /* 200 us */
	al_lock_set_tas(&test_lock);
	CHECK(!test_lock.fair && !test_lock.arena);
	test_lock.pending = 1; /* a waiter spinning on the word */
	CHECK_EQ(al_lock_tryacquire(&test_lock, &a), -EBUSY);
	test_lock.pending = 0;
	CHECK_EQ(al_lock_tryacquire(&test_lock, &a), 0);
	CHECK_EQ(al_lock_acquire(&test_lock, &a2), -ETIMEDOUT);
	CHECK_EQ(al_lock_acquire(&test_lock, &irq), -EDEADLK);
	CHECK_EQ(al_lock_tryacquire(&test_lock, &b), -EBUSY);
	CHECK_EQ(test_lock.pending, 0);
	al_lock_release(&test_lock, &a);
	CHECK_EQ(al_lock_acquire(&test_lock, &b), 0);
	al_lock_release(&test_lock, &b);
	CHECK_EQ(test_lock_stats().acquired, 2);
	CHECK_EQ(test_lock_stats().failed, 4);
}

TEST(test_arena_limit)
{
	struct al_arena ar;
	unsigned i;

	CHECK_EQ(al_arena_init(&ar, 4 << 20, 1 << 20, false), 0);
	/* a commit is whole pages: a part of one is refused and consumes nothing */
	CHECK(al_arena_grow(&ar, 64) == NULL);
	CHECK_EQ(ar.used, 0);
	for (i = 0; i < 4; i++) {
		char *p = al_arena_grow(&ar, 1 << 20);

		CHECK(p != NULL);
		CHECK(((uintptr_t)p & ((1 << 20) - 1)) == 0);
		p[0] = 1;
		p[(1 << 20) - 1] = 2;
		CHECK(al_arena_contains(&ar, p));
	}
	CHECK(al_arena_grow(&ar, 1 << 20) == NULL);
	CHECK(!al_arena_contains(&ar, (void *)(ar.base + (4 << 20))));
	CHECK_EQ(ar.commits, 4);
	al_arena_destroy(&ar);
	CHECK_EQ(al_arena_init(&ar, 3, 1 << 20, false), -EINVAL);
}

int main(void)
{
	RUN(test_registry);
	RUN(test_run_exact_counts);
	RUN(test_run_virtual_tokens);
	RUN(test_run_sched_noise);
	RUN(test_run_reset_workloads);
	RUN(test_run_bad_config);
	RUN(test_run_workload_check_params);
	RUN(test_lock_contended);
	RUN(test_lock_budget_and_aa);
	RUN(test_lock_abandon_storm);
	RUN(test_lock_tas_mode);
	RUN(test_lock_set_tas);
	RUN(test_arena_limit);
	return TEST_SUMMARY();
}
