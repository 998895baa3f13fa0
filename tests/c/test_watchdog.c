/* SPDX-License-Identifier: MIT */
/*
 * The engine's watchdog. A test layer, t_block, blocks its Nth
 * allocation until the test releases it: the run must end with -ETIMEDOUT
 * and an error naming the policy, the workload and where each worker was,
 * instead of hanging. The stuck worker is left running (detached) and the
 * allocator leaked; the test then releases it and waits until it returned.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>

#include "test.h"

static uint64_t tb_calls;    /* allocations so far */
static uint64_t tb_block_at; /* the allocation that blocks (1-based), 0 = none */
static int tb_released;	     /* set by the test */
static int tb_returned;	     /* the blocked allocation returned */
static int tb_blocked;	     /* the blocked allocation started waiting */

static void *tb_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	uint64_t n = __atomic_add_fetch(&tb_calls, 1, __ATOMIC_RELAXED);

	(void)size;
	(void)flags;
	if (n == __atomic_load_n(&tb_block_at, __ATOMIC_RELAXED)) {
		__atomic_store_n(&tb_blocked, 1, __ATOMIC_RELEASE);
		while (!__atomic_load_n(&tb_released, __ATOMIC_ACQUIRE))
			sched_yield();
		__atomic_store_n(&tb_returned, 1, __ATOMIC_RELEASE);
	}
	return t_blocks_of(a, c);
}

AL_LAYER(t_block, struct t_blocks, t_blocks_init, t_blocks_fini,
	 (.alloc = tb_alloc, .free = t_blocks_free, .stats = t_blocks_stats),
	 (.doc = "test: blocks its Nth allocation until released", .max_size = T_BLOCK))

static void cfg_init(struct al_run_config *cfg, unsigned producers)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->workload = al_workload_find("malloc-free");
	al_params_default(cfg->workload->params, cfg->workload->nparams, cfg->wparams);
	cfg->stack.n = 1;
	cfg->stack.layer[0].desc = al_layer_find("t_block");
	cfg->producers = producers;
	cfg->cpu_mode = AL_CPU_VIRTUAL;
	cfg->warmup_cycles = 2;
	cfg->cycles = 20;
}

static void arm(uint64_t at)
{
	__atomic_store_n(&tb_calls, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&tb_released, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&tb_returned, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&tb_blocked, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&tb_block_at, at, __ATOMIC_RELEASE);
}

/* Release the stuck allocation and wait until it has returned. */
static void release(void)
{
	__atomic_store_n(&tb_released, 1, __ATOMIC_RELEASE);
	if (!__atomic_load_n(&tb_blocked, __ATOMIC_ACQUIRE))
		return;
	while (!__atomic_load_n(&tb_returned, __ATOMIC_ACQUIRE))
		sched_yield();
}

TEST(test_register)
{
	CHECK(al_layer_find("t_block") != NULL); /* registered as the binary loads */
}

/* Without a stuck worker the watchdog changes nothing. */
TEST(test_quiet)
{
	struct al_run_config cfg;
	static struct al_run_result res;

	cfg_init(&cfg, 2);
	cfg.watchdog_ns = 10000000000ull;
	arm(0);
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK_EQ(res.cycles, 2 * 20);
}

static void stuck_run(unsigned producers, uint64_t block_at, const char *where)
{
	struct al_run_config cfg;
	static struct al_run_result res;
	char name[64];

	cfg_init(&cfg, producers);
	cfg.watchdog_ns = 200000000ull; /* 0.2 s */
	arm(block_at);
	CHECK_EQ(al_run(&cfg, &res), -ETIMEDOUT);
	CHECK_EQ(res.status, -ETIMEDOUT);
	CHECK(strstr(res.error, "watchdog: no progress for 0.2 s") != NULL);
	CHECK(strstr(res.error, "policy t_block") != NULL);
	CHECK(strstr(res.error, "workload malloc-free") != NULL);
	CHECK(strstr(res.error, "allocator leaked") != NULL);
	CHECK(strstr(res.error, where) != NULL);
	snprintf(name, sizeof(name), "worker %u ", producers - 1); /* every worker is named */
	CHECK(strstr(res.error, name) != NULL);
	if (!strstr(res.error, where) || !strstr(res.error, name))
		fprintf(stderr, "error: %s\n", res.error);
	release();
}

/* One worker stuck in its first measured allocation: "in a cycle". */
TEST(test_stuck_cycle)
{
	/* malloc-free: allocs_per_cycle allocations per cycle; 2 warmup cycles */
	stuck_run(1, 2 * (uint64_t)al_workload_find("malloc-free")->params[1].def + 5,
		  "in a cycle");
}

/* Stuck in the warmup with more workers than CPUs: the others wait for the
 * token (or at the barrier), and every one of them is named. */
TEST(test_stuck_tokens)
{
	unsigned n = al_cpus_usable() + 1;

	if (n > 8)
		n = 8;
	stuck_run(n, 3, "in a cycle");
}

int main(void)
{
	RUN(test_register);
	RUN(test_quiet);
	RUN(test_stuck_cycle);
	RUN(test_stuck_tokens);
	return TEST_SUMMARY();
}
