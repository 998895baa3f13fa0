/* SPDX-License-Identifier: MIT */
/*
 * Per-CPU counters: one block of u64 per [cpu][context level], each block
 * padded to a cache line so CPUs never share a line. Writers find their
 * block once per call and do relaxed load+stores on it (counters.h);
 * readers sum all blocks. Derived entries are computed here, when reported.
 *
 * Invariant: a block has one writer at a time (the CPU's context at that
 * level), so a load+store loses no increment without an atomic
 * read-modify-write; relaxed atomics make reads concurrent with writes well
 * defined, and a sum read during a run is a snapshot of each block, not of
 * all of them at one instant. Locking: none. Memory: ncpu * AL_CTX_NR
 * blocks of stride u64 from al_meta_alloc, allocated at init and freed by
 * fini (at AL_STATS_OFF only al_ctr_block_acct's pages are touched). Cost: a count is a load and a
 * store to a line its CPU owns; a sum is ncpu * AL_CTX_NR loads.
 */
#include <errno.h>
#include <string.h>

#include "alloclab/core.h"

const char *const al_stats_level_names[AL_STATS_NR] = { "lite", "off", "full" };

static __thread unsigned stats_level; /* this thread's stacks; 0 = AL_STATS_LITE */

unsigned al_stats_level_set(unsigned level)
{
	unsigned old = stats_level;

	stats_level = level < AL_STATS_NR ? level : AL_STATS_LITE;
	return old;
}

int al_stats_compiled(void)
{
	return AL_STATS_COMPILED;
}

unsigned al_stats_level_get(void)
{
	return stats_level;
}

static int counters_alloc(struct al_counters *k, unsigned slots, unsigned ncpu)
{
	if (!ncpu || ncpu > AL_MAX_CPUS)
		return -EINVAL;
	k->nblocks = ncpu * AL_CTX_NR;
	k->stride = (slots + 7) & ~7u;
	if (!k->stride)
		k->stride = 8;
	k->level = stats_level;
	k->on = AL_STATS_COMPILED && k->level != AL_STATS_OFF;
	k->v = al_meta_alloc((size_t)k->nblocks * k->stride * sizeof(uint64_t));
	if (!k->v)
		return -ENOMEM;
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		al_sim_counters_add(k); /* a simulation's cost model reads it */
	return 0;
}

int al_counters_init_desc(struct al_counters *k, const struct al_counter_desc *descs, unsigned n,
			  unsigned extra, unsigned ncpu)
{
	memset(k, 0, sizeof(*k));
	k->n = n;
	k->descs = descs;
	return counters_alloc(k, n + extra, ncpu);
}

int al_counters_init(struct al_counters *k, unsigned n, const char *const *names, unsigned ncpu)
{
	memset(k, 0, sizeof(*k));
	k->n = n;
	k->names = names;
	return counters_alloc(k, n, ncpu);
}

void al_counters_fini(struct al_counters *k)
{
	if (k->v && al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED)))
		al_sim_counters_del(k);
	if (k->v)
		al_meta_free(k->v, (size_t)k->nblocks * k->stride * sizeof(uint64_t));
	k->v = NULL;
}

uint64_t al_counters_sum(const struct al_counters *k, unsigned idx)
{
	uint64_t s = 0;
	unsigned b;

	if (!k->v)
		return 0;
	for (b = 0; b < k->nblocks; b++)
		s += __atomic_load_n(&k->v[(size_t)b * k->stride + idx], __ATOMIC_RELAXED);
	return s;
}

uint64_t al_counters_sum_level(const struct al_counters *k, unsigned idx, unsigned level)
{
	uint64_t s = 0;
	unsigned b;

	if (!k->v)
		return 0;
	for (b = level; b < k->nblocks; b += AL_CTX_NR)
		s += __atomic_load_n(&k->v[(size_t)b * k->stride + idx], __ATOMIC_RELAXED);
	return s;
}

/* The index of the entry named by the n bytes at s, or -1. */
static int desc_index(const struct al_counters *k, const char *s, size_t n)
{
	unsigned i;

	for (i = 0; i < k->n; i++)
		if (strlen(k->descs[i].name) == n && !memcmp(k->descs[i].name, s, n))
			return (int)i;
	return -1;
}

/* "a+b-c": the sum of the counted terms (a term that is not a counted entry
 * of this list adds nothing; tests/test_counters checks every formula). */
static uint64_t derive(const struct al_counters *k, const char *f)
{
	uint64_t v = 0;
	int sign = 1;

	while (*f) {
		size_t n = strcspn(f, "+-");
		int i = desc_index(k, f, n);

		if (i >= 0 && !(k->descs[i].flags & (AL_CTR_DERIVED | AL_CTR_REPORTED)))
			v += sign > 0 ? al_counters_sum(k, (unsigned)i)
				      : (uint64_t)0 - al_counters_sum(k, (unsigned)i);
		f += n;
		if (*f)
			sign = *f++ == '-' ? -1 : 1;
	}
	return v;
}

void al_counters_report(const struct al_counters *k, struct al_stats *out)
{
	unsigned i;

	if (!k->on)
		return;
	for (i = 0; i < k->n; i++) {
		const struct al_counter_desc *d = k->descs ? &k->descs[i] : NULL;

		if (!d) {
			al_stats_add(out, k->names[i], al_counters_sum(k, i));
			continue;
		}
		if (d->flags & AL_CTR_REPORTED)
			continue;
		if ((d->flags & AL_CTR_NS) && k->level != AL_STATS_FULL)
			continue; /* not measured below full */
		if (i < 64 && (k->unmeasured >> i & 1))
			continue; /* e.g. the hold time of an untimed lock */
		if (d->flags & AL_CTR_DERIVED)
			al_stats_add(out, d->name, derive(k, d->formula));
		else if (d->flags & AL_CTR_NS) /* kept in ticks */
			al_stats_add(out, d->name,
				     (uint64_t)al_ticks_to_ns((double)al_counters_sum(k, i)));
		else if (d->flags & AL_CTR_GAUGE)
			al_stats_add_gauge(out, d->name, al_counters_sum(k, i));
		else
			al_stats_add(out, d->name, al_counters_sum(k, i));
	}
}
