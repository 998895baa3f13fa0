/* SPDX-License-Identifier: MIT */
/*
 * Telling AddressSanitizer which bytes of our own pools a caller may touch
 * (as mimalloc's track.h, and the kernel's kasan_poison/kasan_unpoison).
 *
 * ASan sees a pool's memory as one live allocation (our arena, or objects
 * the layer below handed up), so a use after free of an object that sits in
 * a cache is invisible unless the cache says so. The rule every layer follows:
 *  - poison an object when it enters a free list or a cache (a free, a refill
 *    that keeps spare objects, a drain that moves it between caches);
 *  - unpoison it on every way out: to the caller (the bytes it may use), and
 *    to the layer below before handing it back (that layer reads and writes
 *    it: free-list links, fill bytes, its own poisoning);
 *  - a layer that keeps its list link inside the free object unpoisons the
 *    link word around each read or write of it, and re-poisons it after.
 * Poisoning is at 8-byte granularity: an object shorter than a granule or not
 * 8-aligned may stay partly visible (never the reverse: no false report).
 *
 * Without ASan every macro is a no-op that still evaluates nothing: the
 * release build's hot paths are unchanged. With ASan each call is one shadow
 * memset (n / 8 bytes).
 */
#ifndef ALLOCLAB_TRACK_H
#define ALLOCLAB_TRACK_H

#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__)
#define AL_TRACK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AL_TRACK_ASAN 1
#endif
#endif

#ifdef AL_TRACK_ASAN
#include <sanitizer/asan_interface.h>
#define al_track_poison(p, n)	ASAN_POISON_MEMORY_REGION((const void *)(p), (size_t)(n))
#define al_track_unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION((const void *)(p), (size_t)(n))
#else
#define al_track_poison(p, n)	((void)sizeof(p), (void)sizeof(n))
#define al_track_unpoison(p, n) ((void)sizeof(p), (void)sizeof(n))
#endif

/* Poison / unpoison each of n objects of `size` bytes in an array of pointers
 * (a batch entering or leaving a cache). Empty without ASan. */
static inline void al_track_poison_all(void *const *objs, unsigned n, size_t size)
{
#ifdef AL_TRACK_ASAN
	unsigned i;

	for (i = 0; i < n; i++)
		al_track_poison(objs[i], size);
#else
	(void)objs;
	(void)n;
	(void)size;
#endif
}

static inline void al_track_unpoison_all(void *const *objs, unsigned n, size_t size)
{
#ifdef AL_TRACK_ASAN
	unsigned i;

	for (i = 0; i < n; i++)
		al_track_unpoison(objs[i], size);
#else
	(void)objs;
	(void)n;
	(void)size;
#endif
}

#endif
