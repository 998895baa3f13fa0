/* SPDX-License-Identifier: MIT */
/*
 * alloclab clock: the time base of every measurement and lock budget.
 *
 * al_ticks() reads the invariant TSC when al_clock_init() found one (else
 * CLOCK_MONOTONIC in ns); al_clock.ticks_per_ns converts, and
 * overhead_ticks is the cost of one back-to-back pair, which the engine
 * reports so that per-operation timings can be read against it.
 * al_clock_init() calibrates once per process; al_clock is read-only after
 * that, so reading the clock takes no lock and is async-signal-safe.
 *
 * Two reads: al_ticks() (fenced, for measurement boundaries) and
 * al_ticks_fast() (no fence, for profiling inside hot paths). While a
 * simulation runs (sim.h) both read the running model CPU's virtual clock,
 * in picoseconds: al_ticks() also ends the code segment it closes.
 */
#ifndef ALLOCLAB_CLOCK_H
#define ALLOCLAB_CLOCK_H

#include "base.h"
#include "sim.h"

#ifdef __cplusplus
extern "C" {
#endif

struct al_clock {
	int tsc;	       /* 1: rdtsc (invariant TSC), 0: CLOCK_MONOTONIC ns */
	double ticks_per_ns;   /* 1.0 without TSC */
	double overhead_ticks; /* cost of one back-to-back al_ticks() pair */
};

AL_API extern struct al_clock al_clock;
AL_API int al_clock_init(void); /* calibrates once; later calls are free */
/* How long the calibration compares the TSC with the monotonic clock (set
 * before the first al_clock_init; the error is about 50 ns over this). */
AL_API extern unsigned long al_clock_calibration_ns;
AL_API uint64_t al_mono_ns(void); /* CLOCK_MONOTONIC in ns */

#if defined(__x86_64__) || defined(__i386__)
/* For measurement boundaries: lfence first, so a clock pair brackets the
 * operations between them rather than overlapping them out of order. */
static inline uint64_t al_ticks(void)
{
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		return al_sim_ticks(1); /* simulated CPUs: virtual time, a segment's end */
	if (al_likely(al_clock.tsc)) {
		unsigned lo, hi;
		__asm__ __volatile__("lfence\n\trdtsc" : "=a"(lo), "=d"(hi)::"memory");
		return ((uint64_t)hi << 32) | lo;
	}
	return al_mono_ns();
}

/* For profiling inside hot paths (lock hold and wait times): no fence, so
 * the profiling does not serialise the path it profiles. */
static inline uint64_t al_ticks_fast(void)
{
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		return al_sim_ticks(0); /* simulated CPUs: the model CPU's clock */
	if (al_likely(al_clock.tsc)) {
		unsigned lo, hi;
		__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
		return ((uint64_t)hi << 32) | lo;
	}
	return al_mono_ns();
}
#else
static inline uint64_t al_ticks(void)
{
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		return al_sim_ticks(1);
	return al_mono_ns();
}

static inline uint64_t al_ticks_fast(void)
{
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		return al_sim_ticks(0);
	return al_mono_ns();
}
#endif

static inline double al_ticks_to_ns(double ticks)
{
	return ticks / al_clock.ticks_per_ns;
}

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_CLOCK_H */
