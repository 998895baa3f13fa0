/* SPDX-License-Identifier: MIT */
/*
 * Workload metrics (al_worker_metric -> al_run_result.metrics): SUM, MEAN and
 * MAX merged by name across workers, warmup values discarded, values added
 * in worker_fini kept, the table's capacity respected. Driven by a probe
 * workload registered at run time.
 */
#include <errno.h>

#include "test.h"

static char many[AL_METRICS_MAX + 20][16]; /* names for the capacity test */
static int probe_many;			   /* add every name in many[] */

static int probe_cycle(struct al_worker *w)
{
	unsigned i;

	static const char sum2[] = "sum"; /* same name, another pointer */

	al_worker_metric(w, w->id % 2 ? sum2 : "sum", 1, AL_METRIC_SUM);
	al_worker_metric(w, "mean", w->id + 1, AL_METRIC_MEAN);
	al_worker_metric(w, "max", w->id * 10.0, AL_METRIC_MAX);
	if (probe_many)
		for (i = 0; i < sizeof(many) / sizeof(many[0]); i++)
			al_worker_metric(w, many[i], 1, AL_METRIC_SUM);
	return 0;
}

static void probe_fini(struct al_worker *w)
{
	al_worker_metric(w, "fini", 1, AL_METRIC_SUM);
}

static const struct al_workload_desc probe_desc = {
	.name = "metrics-probe",
	AL_WORKLOAD_DESC_INIT,
	.doc = "test: adds workload metrics",
	.size_param = -1,
	.cycle = probe_cycle,
	.worker_fini = probe_fini,
};

static double metric(const struct al_run_result *r, const char *name, int *found)
{
	unsigned i;

	*found = 0;
	for (i = 0; i < r->nmetrics; i++)
		if (!strcmp(r->metrics[i].name, name)) {
			*found = 1;
			return r->metrics[i].value;
		}
	return -1;
}

static int run_probe(struct al_run_result *res, unsigned producers)
{
	static struct al_run_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.workload = al_workload_find("metrics-probe");
	cfg.stack.n = 1;
	cfg.stack.layer[0].desc = al_layer_find("null");
	al_params_default(cfg.stack.layer[0].desc->params, cfg.stack.layer[0].desc->nparams,
			  cfg.stack.layer[0].params);
	cfg.producers = producers;
	cfg.cpu_mode = AL_CPU_VIRTUAL;
	cfg.warmup_cycles = 2;
	cfg.cycles = 4;
	return al_run(&cfg, res);
}

TEST(test_merge_by_kind)
{
	static struct al_run_result res;
	int found;

	CHECK_EQ(run_probe(&res, 3), 0);
	CHECK_EQ(metric(&res, "sum", &found), 12); /* 3 workers x 4 cycles; warmup dropped */
	CHECK(found);
	CHECK(metric(&res, "mean", &found) == 2.0); /* (1 + 2 + 3) / 3 */
	CHECK(metric(&res, "max", &found) == 20.0);
	CHECK_EQ(metric(&res, "fini", &found), 3);
	CHECK_EQ(res.nmetrics, 4);
	CHECK_EQ(res.metrics[0].count, 12);
}

TEST(test_capacity)
{
	static struct al_run_result res;
	int found;

	probe_many = 1;
	CHECK_EQ(run_probe(&res, 2), 0);
	probe_many = 0;
	CHECK_EQ(res.nmetrics, AL_METRICS_MAX);
	CHECK_EQ(metric(&res, "sum", &found), 8);
	CHECK_EQ(metric(&res, many[AL_METRICS_MAX - 4], &found), 8);
	metric(&res, many[AL_METRICS_MAX], &found);
	CHECK(!found); /* past the capacity: ignored */
}

TEST(test_worker_without_storage)
{
	struct al_worker w;

	memset(&w, 0, sizeof(w));
	al_worker_metric(&w, "x", 1, AL_METRIC_SUM); /* no storage: ignored, no crash */
	CHECK_EQ(w.nmetrics, 0);
}

int main(void)
{
	unsigned i;

	for (i = 0; i < sizeof(many) / sizeof(many[0]); i++)
		snprintf(many[i], sizeof(many[i]), "m%u", i);
	if (al_workload_register(&probe_desc)) {
		fprintf(stderr, "cannot register the probe workload\n");
		return 1;
	}
	RUN(test_merge_by_kind);
	RUN(test_capacity);
	RUN(test_worker_without_storage);
	return TEST_SUMMARY();
}
