/* SPDX-License-Identifier: MIT */
/*
 * Simulated CPUs through the engine: many model CPUs on fibers of one
 * thread (the sanitizer builds follow the fiber switches), the same run
 * twice gives the same numbers, a lock held by one CPU makes the others
 * wait in virtual time (the closed form of a saturated FIFO lock), a
 * simulated run and a measured one refuse to overlap in one process, and
 * the refusals name what is wrong (a coherence share outside 0-1, a probe
 * of a size it cannot make).
 */
#include <errno.h>
#include <math.h>

#include "test.h"

static struct al_sim_table table;

static void table_set(const char *name, double ns)
{
	unsigned i = table.n++;

	snprintf(table.name[i], AL_SIM_NAME, "%s", name);
	table.cost_ns[i] = ns;
}

static void cfg_init(struct al_run_config *cfg, const char *layer, unsigned producers)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->workload = al_workload_find("malloc-free");
	al_params_default(cfg->workload->params, cfg->workload->nparams, cfg->wparams);
	cfg->wparams[1] = 8; /* allocs_per_cycle */
	cfg->stack.n = 1;
	cfg->stack.layer[0].desc = al_layer_find(layer);
	al_params_default(cfg->stack.layer[0].desc->params, cfg->stack.layer[0].desc->nparams,
			  cfg->stack.layer[0].params);
	cfg->producers = producers;
	cfg->cpu_mode = AL_CPU_SIMULATED;
	cfg->warmup_cycles = 2;
	cfg->cycles = 20;
	cfg->seed = 7;
	cfg->sim.seed = 7;
	cfg->sim.table = &table;
	cfg->sim.stack_kib = 128;
}

TEST(test_many_cpus_same_twice)
{
	struct al_run_config cfg;
	static struct al_run_result a, b;

	memset(&table, 0, sizeof(table));
	table_set("seg.acq-rel", 50.0);
	table_set("seg.op-op", 10.0);
	cfg_init(&cfg, "buddy", 16);
	CHECK_EQ(al_run(&cfg, &a), 0);
	CHECK_EQ(al_run(&cfg, &b), 0);
	CHECK_EQ(a.cpu_mode, AL_CPU_SIMULATED);
	CHECK_EQ(a.ncpu_model, 16);
	CHECK_EQ(a.alloc_ops, 16 * 20 * 8);
	CHECK(a.alloc_ns == b.alloc_ns && a.free_ns == b.free_ns);
	CHECK_EQ(a.sim.switches, b.sim.switches);
	CHECK(a.sim.lock_waits > 0);
	CHECK_EQ(a.leaked[0], 0);
}

TEST(test_saturated_lock_closed_form)
{
	struct al_run_config cfg;
	static struct al_run_result r;
	double per_op;

	memset(&table, 0, sizeof(table));
	table_set("seg.acq-rel", 100.0);
	cfg_init(&cfg, "buddy", 4);
	CHECK_EQ(al_run(&cfg, &r), 0);
	/* every op holds the one lock 100 ns; four CPUs queue: 400 ns per op,
	 * the 0.5 ns floor of the other segments aside */
	per_op = (r.alloc_ns + r.free_ns) / (double)(r.alloc_ops + r.free_ops);
	CHECK(fabs(per_op - 400.0) < 12.0);
}

TEST(test_refusals)
{
	struct al_run_config cfg;
	char err[256];
	int fault = 0;

	memset(&table, 0, sizeof(table));
	cfg_init(&cfg, "buddy", 2);
	cfg.sim.table = NULL;
	CHECK_EQ(al_run_check(&cfg, &fault, err, sizeof(err)), -EINVAL);
	CHECK_EQ(fault, AL_RUN_SIM);
	CHECK(strstr(err, "cost table") != NULL);
	cfg_init(&cfg, "buddy", 2);
	cfg.workload = al_workload_find("cache-scratch");
	al_params_default(cfg.workload->params, cfg.workload->nparams, cfg.wparams);
	CHECK_EQ(al_run_check(&cfg, &fault, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "cannot run on simulated CPUs") != NULL);
	cfg_init(&cfg, "buddy", 2);
	cfg.sim.calibrate = 1;
	CHECK_EQ(al_run_check(&cfg, &fault, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "one producer") != NULL);
}

TEST(test_coherence_refusals)
{
	struct al_run_config cfg;
	static struct al_run_result r;
	double st, ld, rr;

	memset(&table, 0, sizeof(table));
	table_set("seg.acq-rel", 10.0);
	cfg_init(&cfg, "buddy", 2);
	cfg.sim.store_fraction = 1.5;
	CHECK_EQ(al_run(&cfg, &r), -EINVAL);
	cfg_init(&cfg, "buddy", 2);
	cfg.sim.load_fraction = -0.5;
	CHECK_EQ(al_run(&cfg, &r), -EINVAL);
	cfg_init(&cfg, "buddy", 2);
	cfg.sim.store_fraction = 0.25;
	cfg.sim.load_fraction = 0.5;
	cfg.sim.read_takes_line = 1;
	CHECK_EQ(al_run(&cfg, &r), 0);
	/* the probe: lines a power of two from 2, rounds from 1, outputs given */
	CHECK_EQ(al_sim_coherence_probe(100, 5, &st, &ld, &rr), -EINVAL);
	CHECK_EQ(al_sim_coherence_probe(1, 5, &st, &ld, &rr), -EINVAL);
	CHECK_EQ(al_sim_coherence_probe(64, 0, &st, &ld, &rr), -EINVAL);
	CHECK_EQ(al_sim_coherence_probe(64, 5, NULL, &ld, &rr), -EINVAL);
	/* two threads handing the lines back and forth (the sanitizer builds
	 * follow the handoffs); one usable CPU cannot probe */
	if (al_cpus_usable() >= 2) {
		CHECK_EQ(al_sim_coherence_probe(64, 3, &st, &ld, &rr), 0);
		CHECK(st > 0 && ld > 0 && rr > 0);
	} else {
		CHECK_EQ(al_sim_coherence_probe(64, 3, &st, &ld, &rr), -ENODEV);
	}
}

int main(void)
{
	RUN(test_many_cpus_same_twice);
	RUN(test_saturated_lock_closed_form);
	RUN(test_refusals);
	RUN(test_coherence_refusals);
	return TEST_SUMMARY();
}
