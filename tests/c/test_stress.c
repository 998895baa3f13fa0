/* SPDX-License-Identifier: MIT */
/*
 * Issue 8: the stress workload (random alloc/free/bulk/handoff with fill
 * patterns checked before every free) on every front layer over buddy and
 * on the slab stacks, 4 workers; no signals, so it is TSan's share of the
 * reliability tests. A run must end with no error and no leak.
 */
#include <errno.h>

#include "test.h"

static void stress_run(const char *const *names, unsigned n)
{
	struct al_run_config cfg;
	static struct al_run_result res;
	unsigned i;
	int ret;

	memset(&cfg, 0, sizeof(cfg));
	cfg.workload = al_workload_find("stress");
	al_params_default(cfg.workload->params, cfg.workload->nparams, cfg.wparams);
	cfg.wparams[2] = 200; /* ops_per_cycle */
	cfg.stack.n = n;
	for (i = 0; i < n; i++) {
		cfg.stack.layer[i].desc = al_layer_find(names[i]);
		al_params_default(cfg.stack.layer[i].desc->params, cfg.stack.layer[i].desc->nparams,
				  cfg.stack.layer[i].params);
	}
	cfg.producers = 4;
	cfg.cpu_mode = AL_CPU_VIRTUAL;
	cfg.warmup_cycles = 2;
	cfg.cycles = 100;
	cfg.watchdog_ns = 120000000000ull;
	ret = al_run(&cfg, &res);
	CHECK_EQ(ret, 0);
	if (ret)
		fprintf(stderr, "stress on %s%s%s: %s\n", names[0], n > 1 ? " > " : "",
			n > 1 ? names[1] : "", res.error);
	for (i = 0; i < res.nmetrics; i++)
		if (!strcmp(res.metrics[i].name, "stress_errors"))
			CHECK_EQ(res.metrics[i].value, 0);
}

TEST(test_stress_stacks)
{
	static const char *const s1[] = { "buddy" };
	static const char *const s2[] = { "percpu", "buddy" };
	static const char *const s3[] = { "percpu", "transfer", "buddy" };
	static const char *const s4[] = { "magazine", "buddy" };
	static const char *const s5[] = { "slab" };
	static const char *const s6[] = { "nolock", "slab" };
	static const char *const s7[] = { "bpf_ma", "buddy" };

	stress_run(s1, 1);
	stress_run(s2, 2);
	stress_run(s3, 3);
	stress_run(s4, 2);
	stress_run(s5, 1);
	stress_run(s6, 2);
	stress_run(s7, 2);
}

int main(void)
{
	RUN(test_stress_stacks);
	return TEST_SUMMARY();
}
