/* SPDX-License-Identifier: MIT */
/*
 * Per-operation latency histograms: log-linear buckets (see measure.h).
 *
 * Bucket i < 16 holds the value i. Above, bucket i = 16 * g + s (g >= 1,
 * s in 0..15) holds [(16 + s) << (g - 1), (17 + s) << (g - 1)): 16 linear
 * sub-buckets per power of two, so bucket width / lower bound <= 1/16.
 * Recording is inline in the header (one writer per histogram: the worker
 * that owns it); here are the cold helpers. Percentiles are computed by the
 * reader (Python) from the merged buckets and these bounds.
 */
#include <stdint.h>
#include <string.h>

#include "alloclab/alloclab.h"

_Static_assert(AL_HIST_BUCKETS == 976, "log-linear buckets cover all of uint64_t");

void al_hist_reset(struct al_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

void al_hist_merge(struct al_hist *dst, const struct al_hist *src)
{
	unsigned i;

	if (!src->count)
		return;
	for (i = 0; i < AL_HIST_BUCKETS; i++)
		dst->b[i] += src->b[i];
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
}

uint64_t al_hist_bucket_lo(unsigned i)
{
	unsigned g = i / AL_HIST_SUB, s = i % AL_HIST_SUB;

	if (i >= AL_HIST_BUCKETS)
		return UINT64_MAX;
	if (!g)
		return s;
	return (uint64_t)(AL_HIST_SUB + s) << (g - 1);
}

uint64_t al_hist_bucket_hi(unsigned i)
{
	unsigned g = i / AL_HIST_SUB;

	if (i >= AL_HIST_BUCKETS)
		return UINT64_MAX;
	if (!g)
		return i;
	return al_hist_bucket_lo(i) + ((uint64_t)1 << (g - 1)) - 1;
}
