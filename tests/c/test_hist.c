/* SPDX-License-Identifier: MIT */
/*
 * Histograms and memory sampling: bucket bounds tile uint64_t, every value
 * lands in the bucket whose bounds hold it, relative bucket width <= 1/16,
 * record/merge/reset; runs with histogram=1 record one value per timed
 * operation, batch timing refuses histograms, and the memory sample of a
 * run (peaks >= end values, requested bytes from the top layer's counters,
 * RSS) is consistent, including for workloads that reset the allocator.
 */
#include <errno.h>
#include <stdint.h>

#include "test.h"

TEST(test_bucket_bounds_tile)
{
	unsigned i;

	CHECK_EQ(al_hist_bucket_lo(0), 0);
	CHECK(al_hist_bucket_hi(AL_HIST_BUCKETS - 1) == UINT64_MAX);
	for (i = 1; i < AL_HIST_BUCKETS; i++) {
		uint64_t lo = al_hist_bucket_lo(i), hi = al_hist_bucket_hi(i);

		CHECK(lo == al_hist_bucket_hi(i - 1) + 1); /* contiguous, no gap, no overlap */
		CHECK(hi >= lo);
		CHECK(al_hist_bucket(lo) == i);
		CHECK(al_hist_bucket(hi) == i);
		if (i >= AL_HIST_SUB)
			CHECK((hi - lo + 1) * AL_HIST_SUB <= lo); /* width <= lo / 16 */
	}
	CHECK(al_hist_bucket_lo(AL_HIST_BUCKETS) == UINT64_MAX); /* out of range */
}

TEST(test_bucket_of_values)
{
	uint64_t x = 0x9E3779B97F4A7C15ull, v;
	unsigned i, b;

	for (v = 0; v < 5000; v++) {
		b = al_hist_bucket(v);
		CHECK(al_hist_bucket_lo(b) <= v && v <= al_hist_bucket_hi(b));
	}
	for (i = 0; i < 100000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		v = x >> (x & 63);
		b = al_hist_bucket(v);
		CHECK(b < AL_HIST_BUCKETS);
		CHECK(al_hist_bucket_lo(b) <= v && v <= al_hist_bucket_hi(b));
	}
	CHECK_EQ(al_hist_bucket(16), 16);
	CHECK_EQ(al_hist_bucket(31), 31);
	CHECK_EQ(al_hist_bucket(32), 32);
	CHECK_EQ(al_hist_bucket(33), 32);
	CHECK_EQ(al_hist_bucket(UINT64_MAX), AL_HIST_BUCKETS - 1);
}

TEST(test_record_merge)
{
	static struct al_hist a, b;
	uint64_t v;

	al_hist_reset(&a);
	al_hist_reset(&b);
	CHECK(a.min == UINT64_MAX);
	CHECK_EQ(a.max, 0);
	for (v = 1; v <= 100; v++)
		al_hist_record(&a, v);
	al_hist_record(&b, 1000);
	al_hist_record(&b, 1000);
	CHECK_EQ(a.count, 100);
	CHECK_EQ(a.sum, 5050);
	CHECK_EQ(a.min, 1);
	CHECK_EQ(a.max, 100);
	CHECK_EQ(a.b[5], 1);
	CHECK_EQ(a.b[al_hist_bucket(64)], 4); /* 64..67 */
	al_hist_merge(&a, &b);
	CHECK_EQ(a.count, 102);
	CHECK_EQ(a.sum, 7050);
	CHECK_EQ(a.max, 1000);
	CHECK_EQ(a.min, 1);
	CHECK_EQ(a.b[al_hist_bucket(1000)], 2);
	al_hist_reset(&b);
	al_hist_merge(&a, &b); /* an empty histogram changes nothing */
	CHECK_EQ(a.count, 102);
	CHECK_EQ(a.min, 1);
}

static void cfg_init(struct al_run_config *cfg, const char *wl, const char *const *layers,
		     unsigned n)
{
	unsigned i;

	memset(cfg, 0, sizeof(*cfg));
	cfg->workload = al_workload_find(wl);
	al_params_default(cfg->workload->params, cfg->workload->nparams, cfg->wparams);
	cfg->stack.n = n;
	for (i = 0; i < n; i++) {
		cfg->stack.layer[i].desc = al_layer_find(layers[i]);
		al_params_default(cfg->stack.layer[i].desc->params,
				  cfg->stack.layer[i].desc->nparams, cfg->stack.layer[i].params);
	}
	cfg->producers = 1;
	cfg->warmup_cycles = 3;
	cfg->cycles = 10;
}

static uint64_t bucket_total(const struct al_hist *h)
{
	uint64_t t = 0;
	unsigned i;

	for (i = 0; i < AL_HIST_BUCKETS; i++)
		t += h->b[i];
	return t;
}

TEST(test_run_histogram_counts)
{
	static const char *buddy[] = { "buddy" };
	static const char *wls[] = { "malloc-free", "malloc-xfree", "malloc" };
	static struct al_run_config cfg;
	static struct al_run_result res;
	unsigned w, p, sz;

	for (w = 0; w < 3; w++)
		for (p = 1; p <= (w == 2 ? 1u : 2u); p++)
			for (sz = 0; sz < 2; sz++) {
				cfg_init(&cfg, wls[w], buddy, 1);
				cfg.producers = p;
				cfg.timing = AL_TIMING_PER_OP_SUM;
				cfg.histogram = 1;
				if (sz && w == 0)
					cfg.wparams[0] = 4; /* malloc-free's array path */
				CHECK_EQ(al_run(&cfg, &res), 0);
				CHECK(res.hist[AL_HIST_ALLOC].count == res.alloc_ops);
				CHECK(res.hist[AL_HIST_FREE].count == (w == 2 ? 0 : res.free_ops));
				CHECK(bucket_total(&res.hist[AL_HIST_ALLOC]) == res.alloc_ops);
				CHECK(res.hist[AL_HIST_ALLOC].min <= res.hist[AL_HIST_ALLOC].max);
				/* the per-op sum is the histogram's sum */
				CHECK(al_ticks_to_ns((double)res.hist[AL_HIST_ALLOC].sum) <=
				      res.alloc_ns * 1.0001 + 1);
				CHECK(al_ticks_to_ns((double)res.hist[AL_HIST_ALLOC].sum) >=
				      res.alloc_ns * 0.9999 - 1);
			}
}

/* The peer workloads time their operations their own way; each records them. */
TEST(test_run_histogram_other_workloads)
{
	static const char *libc[] = { "libc" };
	static const char *wls[] = { "xmalloc", "larson", "cache-scratch" };
	static struct al_run_config cfg;
	static struct al_run_result res;
	unsigned w;

	for (w = 0; w < 3; w++) {
		if (!al_workload_find(wls[w]))
			continue;
		cfg_init(&cfg, wls[w], libc, 1);
		cfg.producers = 2;
		cfg.timing = AL_TIMING_PER_OP_SUM;
		cfg.histogram = 1;
		CHECK_EQ(al_run(&cfg, &res), 0);
		CHECK(res.alloc_ops > 0);
		CHECK(res.hist[AL_HIST_ALLOC].count == res.alloc_ops);
		CHECK(res.hist[AL_HIST_FREE].count == res.free_ops);
	}
}

TEST(test_run_histogram_off_and_batch)
{
	static const char *libc[] = { "libc" };
	static struct al_run_config cfg;
	static struct al_run_result res;

	cfg_init(&cfg, "malloc-free", libc, 1);
	CHECK_EQ(al_run(&cfg, &res), 0); /* batch, no histogram */
	CHECK_EQ(res.hist[AL_HIST_ALLOC].count, 0);
	CHECK(res.hist[AL_HIST_ALLOC].min == UINT64_MAX);
	cfg.histogram = 1; /* batch timing cannot record per-op latency */
	CHECK_EQ(al_run(&cfg, &res), -EINVAL);
	CHECK(strstr(res.error, "per_op_sum") != NULL);
}

/* A workload that keeps no live bytes (no AL_WL_LIVE): one alloc+free a cycle. */
static int quiet_cycle(struct al_worker *w)
{
	void *p = al_alloc(w->a, &w->ctx, 32, 0);

	if (!p)
		return -ENOMEM;
	w->alloc_ops++;
	w->free_ops++;
	return al_free(w->a, &w->ctx, p);
}

static const struct al_workload_desc quiet_desc = {
	.name = "test-quiet",
	AL_WORKLOAD_DESC_INIT,
	.doc = "test: keeps no live bytes",
	.size_param = -1,
	.cycle = quiet_cycle,
};

TEST(test_run_memory)
{
	static const char *buddy[] = { "buddy" };
	static const char *spill[] = { "percpu", "buddy" };
	static struct al_run_config cfg;
	static struct al_run_result res;
	unsigned k;

	/* buddy alone, 64-byte objects: blocks are exactly the requests */
	cfg_init(&cfg, "malloc-free", buddy, 1);
	cfg.producers = 2;
	cfg.cycles = 0;
	cfg.duration_ns = 30 * 1000 * 1000;
	cfg.mem_sample_ns = 1000 * 1000;
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK(res.mem.samples >= 3);			/* start, end, and some in between */
	CHECK(res.mem.held_samples == res.mem.samples); /* buddy: stats() any time */
	CHECK_EQ(res.mem.held, 0); /* malloc-free holds nothing between cycles */
	CHECK_EQ(res.mem.requested, 0);
	CHECK(res.mem.held_peak >= res.mem.held);
	CHECK(res.mem.held_peak <= 2 * 64 * 64);
	CHECK(res.mem.requested_peak <= 2 * 64 * 64);
	CHECK(res.mem.requested_peak % (64 * 64) == 0); /* whole cycles, per worker */
	CHECK(res.mem.held_peak % 64 == 0);
	CHECK(res.mem.rss_start > 0 && res.mem.rss > 0);
	CHECK(res.mem.rss_peak >= res.mem.rss && res.mem.rss_peak >= res.mem.rss_start);

	/* per-CPU caches keep objects out of the buddy after the cycles */
	cfg_init(&cfg, "malloc-free", spill, 2);
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK_EQ(res.mem.requested, 0);
	CHECK(res.mem.held > 0); /* cached objects are held by the stack */
	CHECK(res.mem.held == res.layers[1].bytes_held);
	CHECK_EQ(res.mem.samples, 2); /* no period: the two ends */
	CHECK_EQ(res.mem.held_samples, 2);
	CHECK_EQ(res.mem.requested_peak, 0); /* the ends: between cycles */

	/* sampled while front layers run: only the bottom layer's stats() is read */
	for (k = 0; k < 2; k++) {
		static const char *stacks[][3] = { { "percpu", "transfer", "buddy" },
						   { "magazine", "buddy", NULL } };

		cfg_init(&cfg, "malloc-xfree", stacks[k], stacks[k][2] ? 3 : 2);
		cfg.producers = 2;
		cfg.cycles = 0;
		cfg.duration_ns = 20 * 1000 * 1000;
		cfg.mem_sample_ns = 500 * 1000;
		CHECK_EQ(al_run(&cfg, &res), 0);
		CHECK(res.mem.samples >= 3);
		CHECK(res.mem.held_peak >= res.mem.held);
		CHECK(res.mem.requested_peak >= res.mem.requested);
		CHECK_EQ(res.mem.requested, 64 * 64); /* the list left in the slot */
	}

	/* a workload that keeps no live bytes: requested is unknown */
	CHECK_EQ(al_workload_register(&quiet_desc), 0);
	cfg_init(&cfg, "test-quiet", buddy, 1);
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK_EQ(res.mem.requested, -1);
	CHECK_EQ(res.mem.requested_peak, -1);
	CHECK_EQ(res.mem.held, 0);

	/* the allocator is replaced after every invocation while sampled */
	cfg_init(&cfg, "malloc", buddy, 1);
	cfg.wparams[1] = 2000;
	cfg.cycles = 0;
	cfg.duration_ns = 20 * 1000 * 1000;
	cfg.mem_sample_ns = 200 * 1000;
	CHECK_EQ(al_run(&cfg, &res), 0);
	CHECK(res.mem.samples >= 3);
	CHECK(res.mem.held_peak <= 2000 * 64);
	CHECK(res.mem.requested_peak <= 2000 * 64);
	CHECK_EQ(res.mem.requested, 0);
}

int main(void)
{
	al_clock_init();
	RUN(test_bucket_bounds_tile);
	RUN(test_bucket_of_values);
	RUN(test_record_merge);
	RUN(test_run_histogram_counts);
	RUN(test_run_histogram_other_workloads);
	RUN(test_run_histogram_off_and_batch);
	RUN(test_run_memory);
	return TEST_SUMMARY();
}
