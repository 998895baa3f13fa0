/* SPDX-License-Identifier: MIT */
/*
 * kmalloc size classes, shared by the slab, sheaves and nolock layers:
 * 8, 16, 32, 64, 96, 128, 192, 256, 512, 1k, 2k, 4k, 8k (KMALLOC_MAX_CACHE_SIZE
 * with 4 KiB pages is 8 KiB; larger requests have no slab cache).
 * Up to 192 bytes the class comes from a table indexed by (size - 1) / 8, as
 * the kernel's size_index[] (which is how 96 and 192 fit between powers of
 * two); above, from the highest set bit of size - 1.
 */
#ifndef ALLOCLAB_KMALLOC_H
#define ALLOCLAB_KMALLOC_H

#include "alloclab/alloclab.h"

#define KM_NR_CLASSES 13
#define KM_MAX_SIZE   8192u

static const uint32_t km_class_size[KM_NR_CLASSES] = {
	8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192,
};

/* Class index of sizes 1..192, by (size - 1) / 8. */
static const uint8_t km_small_index[24] = {
	0, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6,
};

/* The class serving a request of size bytes; -1 if 0 or above 8 KiB. */
static inline int km_class(size_t size)
{
	if (al_unlikely(!size || size > KM_MAX_SIZE))
		return -1;
	if (size <= 192)
		return km_small_index[(size - 1) / 8];
	return (int)al_fls64(size - 1) - 1; /* 193..256 -> 7 ... 8192 -> 12 */
}

/* The largest class an object of `usable` bytes can serve (floor): -1 if
 * usable < 8. Used when the object comes from a backend with other sizes. */
static inline int km_class_floor(size_t usable)
{
	int i;

	for (i = KM_NR_CLASSES - 1; i >= 0; i--)
		if (km_class_size[i] <= usable)
			return i;
	return -1;
}

#endif
