/* SPDX-License-Identifier: MIT */
/*
 * alloclab counters: per-CPU event counters of a layer, declared once.
 *
 * A layer lists its counters in one X-macro with two callbacks, C for a
 * counted event and D for a value that is not counted (derived from others
 * at report time, or reported by the layer's stats() code):
 *
 *   #define PCPU_COUNTERS(C, D, P)                                        \
 *           C(P, misses, AL_CTR_KEY, "allocations that refilled")         \
 *           D(P, allocs, AL_CTR_KEY, "hits+misses", "allocations")        \
 *           D(P, objects_cached, AL_CTR_GAUGE, "", "objects in the stacks")
 *   AL_COUNTERS_DEFINE(PCPU_COUNTERS, PCPU_, pcpu_counters)
 *
 * generates enum { PCPU_misses, PCPU_allocs, ..., PCPU_NR } and the
 * descriptor array pcpu_counters[] (name, doc, flags, formula) that the
 * layer descriptor exports, so docs reach Python (`alloclab list LAYER`).
 * A D entry with a formula ("a+b-c", names of the same list) is computed
 * when reported, never counted; with "" the layer's stats() reports it.
 * Each file's enum has a prefix of its own.
 *
 * Storage: one block of u64 per [cpu][context level], padded to whole cache
 * lines, so counting never shares a line between CPUs and never needs an
 * atomic read-modify-write: each block has one writer at a time (a CPU runs
 * one context per level). A layer finds its block once per call
 * (al_ctr_block) and adds to it (al_ctr_add), as SLUB keeps stat[] in
 * kmem_cache_cpu. Readers merge the blocks on demand, at any time, with
 * relaxed loads.
 *
 * Stats level: chosen per stack when it is created (al_stats_level_set, on
 * the creating thread). AL_STATS_OFF: nothing is counted (al_ctr_block is
 * NULL and every add a not-taken branch; only al_ctr_block_acct's byte
 * accounting goes on) and nothing reported, so values read "not measured"; AL_STATS_LITE (the
 * default): every event counter, and locks count acquisitions in the acquirer's block;
 * AL_STATS_FULL: locks also time every hold and wait. Building with -DAL_STATS_COMPILED=0 compiles
 * counting out altogether (the reference for what counting costs).
 *
 * Cost: al_ctr_block is one load of the level and a multiply-add; al_ctr_add
 * a relaxed load and store to a line the CPU owns; a read is
 * ncpu * AL_CTX_NR loads per counter.
 */
#ifndef ALLOCLAB_COUNTERS_H
#define ALLOCLAB_COUNTERS_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef AL_STATS_COMPILED
#define AL_STATS_COMPILED 1
#endif

/* Stats levels. 0 is the default, so a zeroed configuration gets it. */
enum al_stats_level {
	AL_STATS_LITE = 0, /* event counters, lock counts; no clock reads */
	AL_STATS_OFF = 1,  /* nothing counted or reported */
	AL_STATS_FULL = 2, /* and lock hold and wait times */
	AL_STATS_NR = 3,
};

/* Counter flags. */
enum al_ctr_flags {
	AL_CTR_KEY = 1u << 0,	   /* the tables and reproductions need it */
	AL_CTR_GAUGE = 1u << 1,	   /* a level (reported at the end), not an event count */
	AL_CTR_DERIVED = 1u << 2,  /* computed from `formula` when reported, never counted */
	AL_CTR_REPORTED = 1u << 3, /* reported by the layer's stats() code, not counted here */
	AL_CTR_NS = 1u << 4,	   /* nanoseconds (lock times: measured at AL_STATS_FULL only) */
};

struct al_counter_desc {
	const char *name;
	const char *doc;
	unsigned flags;	     /* enum al_ctr_flags */
	const char *formula; /* AL_CTR_DERIVED: "a+b-c" over this list's names; else NULL */
};

struct al_counters {
	unsigned n;		  /* named counters (descs or names) */
	unsigned nblocks;	  /* ncpu * AL_CTX_NR */
	unsigned stride;	  /* u64 per block, a multiple of 8 (64 B) */
	unsigned level;		  /* enum al_stats_level, fixed at init */
	bool on;		  /* counting (level is not OFF) */
	uint64_t unmeasured;	  /* bit i: entry i (< 64) is never measured here, not reported */
	uint64_t *v;		  /* nblocks * stride values */
	const char *const *names; /* n names (al_counters_init), or NULL */
	const struct al_counter_desc *descs; /* n descriptors (al_counters_init_desc), or NULL */
};

/* Names only, from a one-callback list X(name, doc) (al_counters_init). */
#define AL_CTR_NAME(name, doc) #name,

/* X-macro callbacks for AL_COUNTERS_DEFINE. */
#define AL_CTR_ENUM_C_(P, name, flags, doc)	     P##name,
#define AL_CTR_ENUM_D_(P, name, flags, formula, doc) P##name,
#define AL_CTR_DESC_C_(P, name, flags, doc)	     { #name, doc, (flags), NULL },
#define AL_CTR_DESC_D_(P, name, flags, formula, doc)                                      \
	{ #name, doc, (flags) | (sizeof(formula) > 1 ? AL_CTR_DERIVED : AL_CTR_REPORTED), \
	  sizeof(formula) > 1 ? formula : NULL },

/* The enum P##name... P##NR and `static const struct al_counter_desc ARR[]`. */
#define AL_COUNTERS_DEFINE(LIST, P, ARR)                        \
	enum { LIST(AL_CTR_ENUM_C_, AL_CTR_ENUM_D_, P) P##NR }; \
	static const struct al_counter_desc ARR[] = { LIST(AL_CTR_DESC_C_, AL_CTR_DESC_D_, P) }

/* Six entries for a lock's statistics, NAME_acquired ... NAME_owner_switches,
 * in the order al_lock_count_in() expects (LOCK: e.g. lock, zone_lock). */
#define AL_LOCK_COUNTERS(C, P, LOCK, WHAT)                                                  \
	C(P, LOCK##_acquired, AL_CTR_KEY, "acquisitions of " WHAT)                          \
	C(P, LOCK##_contended, AL_CTR_KEY, "acquisitions of " WHAT " that had to wait")     \
	C(P, LOCK##_failed, AL_CTR_KEY,                                                     \
	  "acquisitions of " WHAT " that failed (budget, AA, trylock)")                     \
	C(P, LOCK##_wait_ns, AL_CTR_NS, "time spent waiting for " WHAT " (stats=full)")     \
	C(P, LOCK##_hold_ns, AL_CTR_NS, "time " WHAT " was held (stats=full, timed locks)") \
	C(P, LOCK##_owner_switches, AL_CTR_KEY,                                             \
	  "acquisitions of " WHAT " by another CPU than the last")

/*
 * descs: n descriptors; extra: unnamed slots after them (indices n..n+extra-1)
 * for a layer's own arrays (per-order hits) that its stats() sums into
 * AL_CTR_REPORTED entries. The level is the creating thread's
 * (al_stats_level_set). 0, -EINVAL, -ENOMEM.
 */
AL_API int al_counters_init_desc(struct al_counters *k, const struct al_counter_desc *descs,
				 unsigned n, unsigned extra, unsigned ncpu);
/* Counters with names only (no docs, every one counted). */
AL_API int al_counters_init(struct al_counters *k, unsigned n, const char *const *names,
			    unsigned ncpu);
AL_API void al_counters_fini(struct al_counters *k);
AL_API uint64_t al_counters_sum(const struct al_counters *k, unsigned idx);
/* the sum over CPUs at one context level (AL_CTX_*): what happened in NMI */
AL_API uint64_t al_counters_sum_level(const struct al_counters *k, unsigned idx, unsigned level);
/* Appends every counted and derived entry (in list order; AL_CTR_REPORTED
 * ones are the layer's to add). Nothing at AL_STATS_OFF. */
AL_API void al_counters_report(const struct al_counters *k, struct al_stats *out);
/* Whether counters are kept: false at AL_STATS_OFF (values not measured). */
static inline bool al_counters_on(const struct al_counters *k)
{
	return AL_STATS_COMPILED && k->on;
}

/* The stats level stacks created by this thread get (default AL_STATS_LITE);
 * returns the previous one. */
AL_API unsigned al_stats_level_set(unsigned level);
AL_API unsigned al_stats_level_get(void);
/* 1, or 0 in a library built with -DAL_STATS_COMPILED=0 (nothing is ever counted). */
AL_API int al_stats_compiled(void);
AL_API extern const char *const al_stats_level_names[AL_STATS_NR]; /* "lite", "off", "full" */

/* The calling context's block: find it once per call. NULL when not counting. */
static inline uint64_t *al_ctr_block(const struct al_counters *k, const struct al_ctx *c)
{
	if (!AL_STATS_COMPILED || !k->on)
		return NULL;
	return &k->v[(size_t)(c->cpu * AL_CTX_NR + c->level) * k->stride];
}

/* The block at every level, for the few counts a layer's bytes_held (the
 * leak check) is made of when it cannot be computed from the layer's state:
 * kept even at AL_STATS_OFF (never compiled out), never reported there. */
static inline uint64_t *al_ctr_block_acct(const struct al_counters *k, const struct al_ctx *c)
{
	return &k->v[(size_t)(c->cpu * AL_CTX_NR + c->level) * k->stride];
}

/*
 * Each [cpu][level] block has one writer at a time (a CPU runs one context per
 * level), so a relaxed load+store loses nothing to a signal handler running at
 * another level; relaxed atomics keep concurrent readers well defined.
 */
static inline void al_ctr_add(uint64_t *b, unsigned idx, uint64_t v)
{
	if (b)
		__atomic_store_n(&b[idx], __atomic_load_n(&b[idx], __ATOMIC_RELAXED) + v,
				 __ATOMIC_RELAXED);
}

/* One event where the block is needed once: al_ctr_add(al_ctr_block(k, c), idx, v). */
static inline void al_count(struct al_counters *k, const struct al_ctx *c, unsigned idx, uint64_t v)
{
	al_ctr_add(al_ctr_block(k, c), idx, v);
}

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_COUNTERS_H */
