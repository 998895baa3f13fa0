/* SPDX-License-Identifier: MIT */
/*
 * Per-CPU counters: one block of n u64 per [cpu][context level], each block
 * padded to a cache line so CPUs never share a line. Writers do a relaxed
 * load+store on their own block (al_count in counters.h); readers sum all blocks.
 *
 * Invariant: a block has one writer at a time (the CPU's context at that
 * level), so a load+store loses no increment without an atomic
 * read-modify-write; relaxed atomics make reads concurrent with writes well
 * defined, and a sum read during a run is a snapshot of each block, not of
 * all of them at one instant. Locking: none. Memory: ncpu * AL_CTX_NR
 * blocks of stride u64 from al_meta_alloc, allocated at init and freed by
 * fini. Cost: a count is a load and a store to a line its CPU owns; a sum
 * is ncpu * AL_CTX_NR loads.
 */
#include <errno.h>
#include <string.h>

#include "alloclab/alloclab.h"

int al_counters_init(struct al_counters *k, unsigned n, const char *const *names, unsigned ncpu)
{
	memset(k, 0, sizeof(*k));
	if (!ncpu || ncpu > AL_MAX_CPUS)
		return -EINVAL;
	k->n = n;
	k->nblocks = ncpu * AL_CTX_NR;
	k->stride = (n + 7) & ~7u;
	if (!k->stride)
		k->stride = 8;
	k->names = names;
	k->v = al_meta_alloc((size_t)k->nblocks * k->stride * sizeof(uint64_t));
	return k->v ? 0 : -ENOMEM;
}

void al_counters_fini(struct al_counters *k)
{
	if (k->v)
		al_meta_free(k->v, (size_t)k->nblocks * k->stride * sizeof(uint64_t));
	k->v = NULL;
}

uint64_t al_counters_sum(const struct al_counters *k, unsigned idx)
{
	uint64_t s = 0;
	unsigned b;

	for (b = 0; b < k->nblocks; b++)
		s += __atomic_load_n(&k->v[(size_t)b * k->stride + idx], __ATOMIC_RELAXED);
	return s;
}

uint64_t al_counters_sum_level(const struct al_counters *k, unsigned idx, unsigned level)
{
	uint64_t s = 0;
	unsigned b;

	for (b = level; b < k->nblocks; b += AL_CTX_NR)
		s += __atomic_load_n(&k->v[(size_t)b * k->stride + idx], __ATOMIC_RELAXED);
	return s;
}

void al_counters_report(const struct al_counters *k, struct al_stats *out)
{
	unsigned i;

	for (i = 0; i < k->n; i++)
		al_stats_add(out, k->names[i], al_counters_sum(k, i));
}
