/* SPDX-License-Identifier: MIT */
/*
 * alloclab arena: memory for the allocators themselves.
 *
 * Metadata memory (al_meta_alloc) comes straight from mmap, zeroed and
 * page-granular, so a layer's own tables never recurse into malloc (the
 * preload shim is malloc). An arena reserves a range of address space once
 * (PROT_NONE) and commits it piece by piece with a lock-free bump of `used`
 * (a CAS), so a bottom layer hands out addresses from one contiguous range
 * and answers owns() with two compares; it never returns memory before
 * al_arena_destroy().
 *
 * Invariants: base is aligned to align; used <= limit; committed counts the
 * bytes made accessible (every grow that succeeded). Cost: a grow is one CAS
 * plus an mmap over the reservation (and a prefault when populate is set);
 * contains() is two compares.
 */
#ifndef ALLOCLAB_ARENA_H
#define ALLOCLAB_ARENA_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- metadata memory (mmap-backed: never recurses into malloc) ---- */

AL_API void *al_meta_alloc(size_t size); /* zeroed, page-granular; NULL on failure */
AL_API void al_meta_free(void *p, size_t size);

/* ---- arena: a reserved VA range committed piece by piece ---- */

struct al_arena {
	uintptr_t base;	    /* first usable address, aligned to align */
	size_t limit;	    /* usable bytes in the reservation */
	size_t align;	    /* alignment of base (and of every grow of that size) */
	size_t used;	    /* bump offset, advanced by CAS */
	void *map;	    /* what mmap returned */
	size_t map_len;	    /* its length */
	bool populate;	    /* prefault committed memory (the kernel allocates eagerly) */
	uint64_t commits;   /* number of successful grows */
	uint64_t committed; /* bytes committed */
};

/* Reserve limit bytes (PROT_NONE) aligned to align. 0 or -ENOMEM/-EINVAL. */
AL_API int al_arena_init(struct al_arena *ar, size_t limit, size_t align, bool populate);
/* Commit the next len bytes (lock-free), len a multiple of the page size;
 * NULL when the limit is reached or len is not whole pages (nothing consumed). */
AL_API void *al_arena_grow(struct al_arena *ar, size_t len);
AL_API bool al_arena_contains(const struct al_arena *ar, const void *p);
AL_API void al_arena_destroy(struct al_arena *ar);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_ARENA_H */
