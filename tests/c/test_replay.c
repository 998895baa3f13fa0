/* SPDX-License-Identifier: MIT */
/*
 * The replay workload under the sanitizers: a ring of threads, each
 * freeing (and asking the usable size of) the objects the thread before it
 * allocated, so most ops wait on another worker's ready slot; run pinned
 * and on virtual CPUs with more workers than CPUs, on a plain and a cached
 * stack, writing every object (touch=all) or not; exact op counts and cross frees, no leak; and
 * al_run_stop ends a replay that spins long recorded gaps.
 *
 * No sleeps: the stop test waits for the measured phase in al_run_wait
 * slices before it stops the run.
 */
#include <errno.h>

#include "alloclab/trace.h"
#include "test.h"

#define NTHREADS 6
#define PER	 400 /* objects per thread */

static void push(struct al_trace *t, unsigned k, uint64_t *seq, uint8_t kind, uint64_t size,
		 uint32_t id, uint32_t ref, uint32_t dt)
{
	struct al_trace_op op = { .size = size, .id = id, .ref = ref, .dt = dt, .kind = kind };

	op.aux = kind == AL_TK_THREAD_START ? (k ? 0 : AL_TRACE_NOID) : 0;
	++*seq;
	CHECK_EQ(al_trace_push(t, k, &op, *seq, *seq), 0);
}

/* Thread k allocates PER objects; then each thread reads and frees the
 * objects of thread k-1 (a ring), interleaved in seq order. */
static struct al_trace *ring_trace(void)
{
	struct al_trace *t = al_trace_new(NTHREADS);
	uint64_t seq = 0;
	char err[200];

	for (unsigned k = 0; k < NTHREADS; k++)
		push(t, k, &seq, AL_TK_THREAD_START, 0, AL_TRACE_NOID, AL_TRACE_NOID, 0);
	for (unsigned i = 0; i < PER; i++)
		for (unsigned k = 0; k < NTHREADS; k++)
			push(t, k, &seq, AL_TK_MALLOC, 16 + (i * 7 + k) % 300, k * PER + i,
			     AL_TRACE_NOID, 0);
	for (unsigned i = 0; i < PER; i++)
		for (unsigned k = 0; k < NTHREADS; k++) {
			uint32_t id = ((k + NTHREADS - 1) % NTHREADS) * PER + i;

			push(t, k, &seq, AL_TK_USABLE_SIZE, 0, AL_TRACE_NOID, id, 0);
			push(t, k, &seq, AL_TK_FREE, 0, AL_TRACE_NOID, id, 0);
		}
	CHECK_EQ(al_trace_seal(t, err, sizeof(err)), 0);
	return t;
}

static void cfg_init(struct al_run_config *cfg, const char *policy, int64_t handle, int mode)
{
	char err[200];

	memset(cfg, 0, sizeof(*cfg));
	cfg->workload = al_workload_find("replay");
	CHECK(cfg->workload != NULL);
	al_params_default(cfg->workload->params, cfg->workload->nparams, cfg->wparams);
	cfg->wparams[0] = handle;
	CHECK_EQ(al_spec_parse(policy, &cfg->stack, err, sizeof(err)), 0);
	cfg->producers = NTHREADS;
	cfg->cpu_mode = mode;
	cfg->watchdog_ns = 30000000000ull;
}

static double metric(const struct al_run_result *res, const char *name)
{
	for (unsigned i = 0; i < res->nmetrics; i++)
		if (!strcmp(res->metrics[i].name, name))
			return res->metrics[i].value;
	return -1;
}

TEST(test_ring)
{
	static const char *const policies[] = { "buddy", "percpu > transfer > buddy" };
	static struct al_run_result res;
	struct al_run_config cfg;
	struct al_trace *t = ring_trace();
	int64_t h = al_trace_register(t);

	CHECK(h > 0);
	for (unsigned p = 0; p < 2; p++)
		for (int mode = AL_CPU_AUTO; mode <= AL_CPU_VIRTUAL; mode += 2)
			for (int touch = 0; touch <= 2; touch += 2) {
				cfg_init(&cfg, policies[p], h, mode);
				cfg.wparams[2] = touch; /* none, all */
				CHECK_EQ(al_run(&cfg, &res), 0);
				CHECK_EQ(res.alloc_ops, NTHREADS * PER);
				CHECK_EQ(res.free_ops, NTHREADS * PER);
				CHECK_EQ(res.cross_frees, NTHREADS * PER);
				CHECK_EQ(res.truncated, 0);
				CHECK(metric(&res, "usable_size_ops") == NTHREADS * PER);
				CHECK(metric(&res, "unfinished_ops") == 0);
				for (unsigned l = 0; l < res.nlayers; l++)
					CHECK_EQ(res.leaked[l], 0);
			}
	cfg_init(&cfg, "buddy", h + 1, AL_CPU_AUTO); /* a handle nobody registered */
	CHECK_EQ(al_run(&cfg, &res), -EINVAL);
	CHECK(strstr(res.error, "not a registered trace handle") != NULL);
	al_trace_unregister(h);
	al_trace_free(t);
}

TEST(test_stop_in_recorded_gaps)
{
	static struct al_run_result res;
	struct al_run_config cfg;
	struct al_trace *t = al_trace_new(1);
	struct al_run *run;
	uint64_t seq = 0, t0;
	char err[200];
	int64_t h;
	int rc;

	for (unsigned i = 0; i < 100; i++) /* a second between ops */
		push(t, 0, &seq, AL_TK_MALLOC, 64, i, AL_TRACE_NOID, 1000000000u);
	CHECK_EQ(al_trace_seal(t, err, sizeof(err)), 0);
	h = al_trace_register(t);
	cfg_init(&cfg, "buddy", h, AL_CPU_AUTO);
	cfg.producers = 1;
	cfg.wparams[1] = 1; /* think=recorded */
	CHECK_EQ(al_run_start(&cfg, &res, &run), 0);
	while ((rc = al_run_wait(run, 1000000)) == -EINPROGRESS &&
	       al_run_phase(run, NULL) != AL_RUN_MEASURED)
		;
	CHECK_EQ(rc, -EINPROGRESS);
	t0 = al_mono_ns();
	al_run_stop(run);
	CHECK_EQ(al_run_wait(run, UINT64_MAX), -ECANCELED);
	CHECK(al_mono_ns() - t0 < 5000000000ull);
	al_run_free(run);
	al_trace_unregister(h);
	al_trace_free(t);
}

int main(void)
{
	RUN(test_ring);
	RUN(test_stop_in_recorded_gaps);
	return TEST_SUMMARY();
}
