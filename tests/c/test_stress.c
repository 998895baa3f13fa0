/* SPDX-License-Identifier: MIT */
/*
 * The stress workload (random alloc/free/bulk/handoff with fill
 * patterns checked before every free) on every preset and on the front
 * layers over buddy, 4 workers; no signals, so it is TSan's share of the
 * reliability tests. A run must end with no error and no leak.
 */
#include <errno.h>

#include "test.h"

/* The presets of python/alloclab/policy.py (peers and null excluded: peers
 * run in preloaded children, null hands out one block per CPU), and the
 * front layers over buddy, transfer and nolock included (their mixed-size
 * free_bulk and small-object deferred link were found here and fixed), and
 * sheaves over buddy (its class accounting, found by the exhaustion tests). */
static const char *const specs[] = {
	"buddy",
	"libc",
	"percpu > buddy",
	"percpu > transfer > buddy",
	"percpu > transfer(peek=false, full=single) > buddy",
	"magazine > buddy",
	"pages",
	"vmalloc > pages",
	"vmalloc(alloc=high_order) > pages",
	"vmalloc(alloc=high_order, free=bulk) > pages",
	"vmalloc(alloc=pcp_first, free=bulk) > pages",
	"slab(zero=true)",
	"sheaves > slab(form=sheaves)",
	"nolock > slab",
	"bpf_ma(mode=fixed) > slab",
	"bpf_ma > buddy",
	"failnth(op=alloc, nth=7, every=true) > buddy",
	"transfer > buddy",
	"nolock > buddy",
	"sheaves(capacity=4, barn_full=1, barn_empty=1) > buddy", /* class learning */
};

static void stress_run(const char *spec)
{
	struct al_run_config cfg;
	static struct al_run_result res;
	char err[256];
	size_t max;
	unsigned i;
	int ret;

	memset(&cfg, 0, sizeof(cfg));
	cfg.workload = al_workload_find("stress");
	al_params_default(cfg.workload->params, cfg.workload->nparams, cfg.wparams);
	cfg.wparams[2] = 200; /* ops_per_cycle */
	if (al_spec_parse(spec, &cfg.stack, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", spec, err);
		t_failed_checks++;
		return;
	}
	max = al_spec_max_size(&cfg.stack);
	if (max && cfg.wparams[0] > (int64_t)max) /* size_max */
		cfg.wparams[0] = (int64_t)max;
	cfg.producers = 4;
	cfg.cpu_mode = AL_CPU_VIRTUAL;
	cfg.warmup_cycles = 2;
	cfg.cycles = 40;
	cfg.watchdog_ns = 120000000000ull;
	ret = al_run(&cfg, &res);
	CHECK_EQ(ret, 0);
	if (ret)
		fprintf(stderr, "stress on %s: %s\n", spec, res.error);
	for (i = 0; i < res.nmetrics; i++)
		if (!strcmp(res.metrics[i].name, "stress_errors"))
			CHECK_EQ(res.metrics[i].value, 0);
}

TEST(test_stress_every_preset)
{
	unsigned i;

	for (i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
		stress_run(specs[i]);
}

int main(void)
{
	RUN(test_stress_every_preset);
	return TEST_SUMMARY();
}
