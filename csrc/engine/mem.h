/* SPDX-License-Identifier: MIT */
/*
 * Memory sampling during a run's measured phase (engine internal; design and
 * fields: measure.h, struct al_mem). One sampler per run, used by the engine's
 * main thread only (no locks of its own; the engine's a_lock guards the
 * allocator it reads); a sample costs a few microseconds and never allocates.
 */
#ifndef ALLOCLAB_ENGINE_MEM_H
#define ALLOCLAB_ENGINE_MEM_H

#include <stdbool.h>

#include "alloclab/alloclab.h"

struct al_mem_sampler {
	struct al_mem *m;    /* where samples go (in the run result) */
	int statm_fd;	     /* /proc/self/statm, or -1 */
	uint64_t page_size;  /* bytes per page, for statm */
	struct al_stats bot; /* scratch for the bottom layer's stats */
	uint64_t t0_ns;	     /* the phase's start (al_mono_ns), for the series */
};

/* Open /proc/self/statm and reset *m. */
void al_mem_begin(struct al_mem_sampler *s, struct al_mem *m);
/* One sample: requested is the workers' live bytes (-1 unknown); top is the
 * stack (NULL: none); quiescent says no worker is operating. */
void al_mem_sample(struct al_mem_sampler *s, struct al_allocator *top, int64_t requested,
		   bool quiescent);
/* The last sample, taken quiescent: also sets the end values. */
void al_mem_end(struct al_mem_sampler *s, struct al_allocator *top, int64_t requested);
#endif
