/* SPDX-License-Identifier: MIT */
/*
 * alloclab counters: per-CPU event counters of a layer.
 *
 * One block of n uint64_t per [cpu][context level], each block padded to
 * whole cache lines, so counting never shares a line between CPUs and never
 * needs an atomic read-modify-write: each block has one writer at a time (a
 * CPU runs one context per level). Readers merge the blocks on demand
 * (al_counters_sum, al_counters_report), at any time, with relaxed loads.
 * A layer lists its counters once in an X-macro and derives the names with
 * AL_CTR_NAME.
 *
 * Cost: al_count() is a relaxed load and store to a line the CPU owns; a
 * read is ncpu * AL_CTX_NR loads.
 */
#ifndef ALLOCLAB_COUNTERS_H
#define ALLOCLAB_COUNTERS_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct al_counters {
	unsigned n;		  /* counters per block */
	unsigned nblocks;	  /* ncpu * AL_CTX_NR */
	unsigned stride;	  /* u64 per block, a multiple of 8 (64 B) */
	uint64_t *v;		  /* nblocks * stride values */
	const char *const *names; /* n names */
};

/* X-macro helpers: #define FOO_COUNTERS(X) X(allocs, "doc") X(frees, "doc") */
#define AL_CTR_NAME(name, doc) #name,

AL_API int al_counters_init(struct al_counters *k, unsigned n, const char *const *names,
			    unsigned ncpu);
AL_API void al_counters_fini(struct al_counters *k);
AL_API uint64_t al_counters_sum(const struct al_counters *k, unsigned idx);
/* the sum over CPUs at one context level (AL_CTX_*): what happened in NMI */
AL_API uint64_t al_counters_sum_level(const struct al_counters *k, unsigned idx, unsigned level);
AL_API void al_counters_report(const struct al_counters *k, struct al_stats *out);

/*
 * Each [cpu][level] block has one writer at a time (a CPU runs one context per
 * level), so a relaxed load+store loses nothing to a signal handler running at
 * another level; relaxed atomics keep concurrent readers well defined.
 */
static inline void al_count(struct al_counters *k, const struct al_ctx *c, unsigned idx, uint64_t v)
{
	uint64_t *p = &k->v[(size_t)(c->cpu * AL_CTX_NR + c->level) * k->stride + idx];
	__atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_COUNTERS_H */
