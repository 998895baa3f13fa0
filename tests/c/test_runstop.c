/* SPDX-License-Identifier: MIT */
/*
 * Runs in the background: al_run_stop ends a running run promptly (a huge
 * cycle count, virtual CPUs with tokens, a fixed loop inside a cycle), the
 * duration bounds fixed-cycle runs and fixed loops and marks them
 * truncated, and the wait watches the engine thread's own steps (a destroy
 * that hangs ends with the watchdog naming the step, or with a stop).
 *
 * No sleeps: the test waits for the run to report the measured phase and
 * progress (al_run_phase, waiting in al_run_wait slices) before it stops
 * it, and for the hanging layer's handshake flags.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>

#include "test.h"

#define LIMIT_NS 10000000000ull /* generous: tests never assert tight timings */

/* ---- a layer whose destroy blocks until released ---- */

static int th_blocking;	  /* destroy blocks (set by the test) */
static int th_in_destroy; /* destroy started waiting */
static int th_released;	  /* set by the test */
static int th_returned;	  /* destroy returned */

static void *th_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	(void)size;
	(void)flags;
	return t_blocks_of(a, c);
}

static void th_fini(struct al_allocator *a)
{
	if (__atomic_load_n(&th_blocking, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&th_in_destroy, 1, __ATOMIC_RELEASE);
		while (!__atomic_load_n(&th_released, __ATOMIC_ACQUIRE))
			sched_yield();
		__atomic_store_n(&th_returned, 1, __ATOMIC_RELEASE);
	}
	t_blocks_fini(a);
}

AL_LAYER(t_hang, struct t_blocks, t_blocks_init, th_fini,
	 (.alloc = th_alloc, .free = t_blocks_free, .stats = t_blocks_stats),
	 (.doc = "test: its destroy blocks until released", .max_size = T_BLOCK))

static void th_arm(void)
{
	__atomic_store_n(&th_in_destroy, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&th_released, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&th_returned, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&th_blocking, 1, __ATOMIC_RELEASE);
}

/* Release the hanging destroy and wait until it has returned. */
static void th_release(void)
{
	__atomic_store_n(&th_released, 1, __ATOMIC_RELEASE);
	if (__atomic_load_n(&th_in_destroy, __ATOMIC_ACQUIRE))
		while (!__atomic_load_n(&th_returned, __ATOMIC_ACQUIRE))
			sched_yield();
	__atomic_store_n(&th_blocking, 0, __ATOMIC_RELEASE);
}

/* ---- helpers ---- */

static int param_index(const struct al_workload_desc *wl, const char *name)
{
	unsigned i;

	for (i = 0; i < wl->nparams; i++)
		if (!strcmp(wl->params[i].name, name))
			return (int)i;
	return -1;
}

static void cfg_init(struct al_run_config *cfg, const char *workload, const char *policy,
		     unsigned producers)
{
	char err[200];

	memset(cfg, 0, sizeof(*cfg));
	cfg->workload = al_workload_find(workload);
	al_params_default(cfg->workload->params, cfg->workload->nparams, cfg->wparams);
	CHECK_EQ(al_spec_parse(policy, &cfg->stack, err, sizeof(err)), 0);
	cfg->producers = producers;
	cfg->cpu_mode = AL_CPU_AUTO;
	cfg->warmup_cycles = 1;
	cfg->cycles = 100000000000ull; /* never ends by itself */
}

/* Wait (in al_run_wait slices) until the run is in its measured phase and
 * its workers have made progress there (at_least: until the progress count
 * is that high); false if it ended before. */
static bool wait_measuring(struct al_run *h, uint64_t at_least)
{
	uint64_t p0 = 0, p;
	int seen = 0;

	for (;;) {
		if (al_run_wait(h, 1000000) != -EINPROGRESS)
			return false;
		if (al_run_phase(h, &p) != AL_RUN_MEASURED)
			continue;
		if (at_least) {
			if (p >= at_least)
				return true;
		} else if (!seen) {
			seen = 1;
			p0 = p;
		} else if (p > p0) {
			return true;
		}
	}
}

/* Start a run, wait until it measures, stop it: it ends with -ECANCELED,
 * well within the limit. */
static void stop_running(struct al_run_config *cfg, uint64_t at_least)
{
	static struct al_run_result res;
	struct al_run *h;
	uint64_t t0;
	int rc;

	CHECK_EQ(al_run_start(cfg, &res, &h), 0);
	CHECK(wait_measuring(h, at_least));
	t0 = al_mono_ns();
	al_run_stop(h);
	rc = al_run_wait(h, LIMIT_NS);
	CHECK(al_mono_ns() - t0 < LIMIT_NS);
	CHECK_EQ(rc, -ECANCELED);
	CHECK_EQ(res.status, -ECANCELED);
	CHECK(strstr(res.error, "stopped on request") != NULL);
	CHECK(strstr(res.error, "leaked") == NULL); /* torn down, not abandoned */
	CHECK(res.cycles > 0);
	CHECK_EQ(al_run_phase(h, NULL), AL_RUN_DONE);
	al_run_free(h);
}

TEST(test_register)
{
	CHECK(al_layer_find("t_hang") != NULL); /* registered as the binary loads */
}

/* A run of 10^11 cycles per worker stops on request. */
TEST(test_stop_huge_cycles)
{
	struct al_run_config cfg;

	cfg_init(&cfg, "malloc-free", "buddy", 1);
	stop_running(&cfg, 0);
}

/* More workers than CPUs: those waiting for a CPU token leave at once. */
TEST(test_stop_virtual_tokens)
{
	struct al_run_config cfg;
	unsigned n = al_cpus_usable() + 3;

	if (n > 16)
		n = 16;
	cfg_init(&cfg, "malloc-free", "buddy", n);
	cfg.cpu_mode = AL_CPU_VIRTUAL;
	stop_running(&cfg, 0);
}

/* A fixed loop inside one cycle (test_vmalloc, 10^8 iterations) stops. */
TEST(test_stop_fixed_loop)
{
	struct al_run_config cfg;

	cfg_init(&cfg, "test_vmalloc", "vmalloc > pages", 1);
	cfg.wparams[param_index(cfg.workload, "test_loop_count")] = 100000000;
	cfg.warmup_cycles = 0;
	cfg.cycles = 1;
	/* the worker's states: init, barrier A, barrier B, in its one cycle */
	stop_running(&cfg, 4);
}

/* A stop asked before the workers start: the run ends without cycles. */
TEST(test_stop_at_once)
{
	static struct al_run_result res;
	struct al_run_config cfg;
	struct al_run *h;

	cfg_init(&cfg, "malloc-free", "buddy", 1);
	CHECK_EQ(al_run_start(&cfg, &res, &h), 0);
	al_run_stop(h);
	al_run_stop(h); /* twice is harmless */
	CHECK_EQ(al_run_wait(h, LIMIT_NS), -ECANCELED);
	al_run_free(h);
}

/* al_run_free on a running run stops it first. */
TEST(test_free_running)
{
	static struct al_run_result res;
	struct al_run_config cfg;
	struct al_run *h;

	cfg_init(&cfg, "malloc-free", "buddy", 1);
	CHECK_EQ(al_run_start(&cfg, &res, &h), 0);
	CHECK(wait_measuring(h, 0));
	al_run_free(h);
	CHECK_EQ(res.status, -ECANCELED);
}

/* duration bounds a fixed-cycle run: it ends, whole, marked truncated. */
TEST(test_duration_bounds_cycles)
{
	static struct al_run_result res;
	struct al_run_config cfg;
	unsigned n = al_cpus_usable() + 1;

	if (n > 4)
		n = 4;
	cfg_init(&cfg, "malloc-free", "buddy", n);
	cfg.cpu_mode = AL_CPU_VIRTUAL;
	cfg.warmup_cycles = 100000000000ull; /* bounded by the duration too */
	cfg.duration_ns = 50000000;	     /* 50 ms */
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK_EQ(res.truncated, n);
	CHECK(res.cycles > 0);
	CHECK(res.elapsed_ns < (double)LIMIT_NS);
}

/* duration cuts a fixed loop inside a cycle: truncated, counted per worker;
 * a run whose loops finish is not. */
TEST(test_duration_cuts_fixed_loop)
{
	static struct al_run_result res;
	struct al_run_config cfg;

	cfg_init(&cfg, "test_vmalloc", "vmalloc > pages", 2);
	cfg.cpu_mode = AL_CPU_VIRTUAL;
	cfg.wparams[param_index(cfg.workload, "test_loop_count")] = 100000000;
	cfg.warmup_cycles = 0;
	cfg.cycles = 0;
	cfg.duration_ns = 50000000;
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK_EQ(res.truncated, 2);
	CHECK(res.elapsed_ns < (double)LIMIT_NS);

	cfg.wparams[param_index(cfg.workload, "test_loop_count")] = 10;
	cfg.cycles = 2;
	cfg.duration_ns = 0;
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK_EQ(res.truncated, 0);
	CHECK_EQ(res.cycles, 4);
}

/* A destroy that hangs: the watchdog ends the run naming the step. */
TEST(test_watchdog_destroy)
{
	static struct al_run_result res;
	struct al_run_config cfg;

	cfg_init(&cfg, "malloc-free", "t_hang", 1);
	cfg.cycles = 10;
	cfg.watchdog_ns = 200000000; /* 0.2 s */
	th_arm();
	CHECK_EQ(al_run(&cfg, &res), -ETIMEDOUT);
	CHECK(strstr(res.error, "watchdog: no progress for 0.2 s in destroying the stack") != NULL);
	CHECK(strstr(res.error, "policy t_hang") != NULL);
	CHECK(strstr(res.error, "allocator leaked") != NULL);
	CHECK(__atomic_load_n(&th_in_destroy, __ATOMIC_ACQUIRE));
	th_release();
}

/* The same hang without a watchdog: a stop ends the wait after the grace. */
TEST(test_stop_destroy)
{
	static struct al_run_result res;
	struct al_run_config cfg;
	struct al_run *h;
	uint64_t t0;

	cfg_init(&cfg, "malloc-free", "t_hang", 1);
	cfg.cycles = 10;
	th_arm();
	CHECK_EQ(al_run_start(&cfg, &res, &h), 0);
	while (!__atomic_load_n(&th_in_destroy, __ATOMIC_ACQUIRE)) /* the handshake */
		CHECK_EQ(al_run_wait(h, 1000000), -EINPROGRESS);
	t0 = al_mono_ns();
	al_run_stop(h);
	CHECK_EQ(al_run_wait(h, LIMIT_NS), -ECANCELED);
	CHECK(al_mono_ns() - t0 < LIMIT_NS);
	CHECK(strstr(res.error, "destroying the stack did not finish") != NULL);
	al_run_free(h); /* the engine thread frees the handle when it returns */
	th_release();
}

int main(void)
{
	RUN(test_register);
	RUN(test_stop_huge_cycles);
	RUN(test_stop_virtual_tokens);
	RUN(test_stop_fixed_loop);
	RUN(test_stop_at_once);
	RUN(test_free_running);
	RUN(test_duration_bounds_cycles);
	RUN(test_duration_cuts_fixed_loop);
	RUN(test_watchdog_destroy);
	RUN(test_stop_destroy);
	return TEST_SUMMARY();
}
