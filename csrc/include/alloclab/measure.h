/* SPDX-License-Identifier: MIT */
/*
 * alloclab measure: what a run measures beyond counts and times.
 *
 * Per-operation latency histograms (struct al_hist) and the memory a run
 * holds during its measured phase (struct al_mem). Both are filled by the
 * engine and read from struct al_run_result (run.h).
 *
 * Concurrency: a histogram has one writer (its worker) and is merged after
 * the workers are joined; memory is sampled by the engine's main thread.
 */
#ifndef ALLOCLAB_MEASURE_H
#define ALLOCLAB_MEASURE_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Log-linear buckets, as HdrHistogram's: values 0..15 have a bucket each;
 * every power-of-two range [2^k, 2^(k+1)), k >= 4, is split into 16 linear
 * sub-buckets of width 2^(k-4). A bucket is at most 1/16 as wide as its
 * lower bound, so a percentile read from the buckets is within 6.25% of the
 * true value. 976 buckets cover all of uint64_t; values are clock ticks.
 * One histogram per worker per operation kind (one writer, no atomics),
 * merged after the workers are joined. Recording costs a clock pair per
 * operation (the workload times each one) plus a bucket increment.
 */
#define AL_HIST_SUB_BITS 4
#define AL_HIST_SUB	 (1u << AL_HIST_SUB_BITS) /* linear sub-buckets per power of two */
#define AL_HIST_BUCKETS	 ((64 - AL_HIST_SUB_BITS + 1) * AL_HIST_SUB)

enum al_hist_op { AL_HIST_ALLOC = 0, AL_HIST_FREE = 1, AL_HIST_NR = 2 };

struct al_hist {
	uint64_t count;		     /* values recorded */
	uint64_t sum;		     /* their sum */
	uint64_t min;		     /* smallest value (UINT64_MAX when empty) */
	uint64_t max;		     /* largest value (0 when empty) */
	uint64_t b[AL_HIST_BUCKETS]; /* values per bucket */
};

/* The bucket of a value. */
static inline unsigned al_hist_bucket(uint64_t v)
{
	unsigned shift;

	if (v < AL_HIST_SUB)
		return (unsigned)v;
	shift = al_fls64(v) - AL_HIST_SUB_BITS - 1; /* v >> shift is in [16, 31] */
	return (shift + 1) * AL_HIST_SUB + (unsigned)(v >> shift) - AL_HIST_SUB;
}

static inline void al_hist_record(struct al_hist *h, uint64_t v)
{
	h->b[al_hist_bucket(v)]++;
	h->count++;
	h->sum += v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

AL_API void al_hist_reset(struct al_hist *h); /* empty */
AL_API void al_hist_merge(struct al_hist *dst, const struct al_hist *src);
AL_API uint64_t al_hist_bucket_lo(unsigned i); /* smallest value of bucket i */
AL_API uint64_t al_hist_bucket_hi(unsigned i); /* largest value of bucket i */

/* ---- memory during a run ---- */

/*
 * The engine samples memory at the start and the end of the measured phase
 * (workers quiescent) and every mem_sample_ns in between, never on a
 * worker's CPU during a cycle: the main thread does it from CPUs no worker
 * is pinned to, or, when every CPU runs a pinned worker, worker 0 does it
 * between two of its cycles (untimed). A sample reads
 *  - requested: the sum of the workers' live_bytes (AL_WL_LIVE workloads:
 *    bytes asked for and not yet freed, updated per batch, outside timed
 *    regions), -1 when the workload does not keep it;
 *  - held: the bottom layer's bytes_held (what the stack took from its
 *    backing memory for the workload, caches above included); in between
 *    the ends only when the bottom layer has AL_F_STATS_ANYTIME (its
 *    stats() may run while workers operate), else at the ends only;
 *  - rss: the resident set size (/proc/self/statm, kept open).
 * A sample costs a few microseconds, outside every timed region. Peaks are
 * of the samples: a lower bound of the true peak, close when the peak lasts
 * longer than a period.
 */
/*
 * The samples over time: at most AL_MEM_SERIES points, the phase's first
 * and last samples included. When the series is full every other point is
 * dropped and from then on one sample in twice as many is kept, so a phase
 * of any length gets an evenly spaced series within the bound.
 */
#define AL_MEM_SERIES 256

struct al_mem_point {
	uint64_t t_ns;	   /* since the start of the measured phase */
	int64_t requested; /* workers' live bytes; -1 unknown */
	int64_t held;	   /* bottom layer's bytes_held; -1 when not readable mid-phase */
	uint64_t rss;	   /* resident set size */
};

struct al_mem {
	uint64_t samples;	/* samples taken (rss, requested) */
	uint64_t held_samples;	/* of which held was read; 2 = only the two ends */
	int64_t held;		/* bottom layer's bytes_held at the end of the phase */
	int64_t held_peak;	/* the largest held sampled */
	int64_t requested;	/* workers' live bytes at the end; -1 unknown */
	int64_t requested_peak; /* the largest sampled; -1 unknown */
	uint64_t rss_start;	/* resident set size (bytes) at the start of the phase */
	uint64_t rss;		/* at the end */
	uint64_t rss_peak;	/* the largest sampled */
	unsigned nseries;	/* points in series[] */
	unsigned series_every;	/* one point kept per this many samples (a power of two) */
	struct al_mem_point series[AL_MEM_SERIES];
};

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_MEASURE_H */
