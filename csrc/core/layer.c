/* SPDX-License-Identifier: MIT */
/*
 * The out-of-line part of the layer skeleton (alloclab/layer.h): taking and
 * releasing an array of per-class locks for fork().
 *
 * Lock order: a layer's per-class locks are taken in index order, the order
 * every path that holds two of them follows, and released in reverse. All or
 * none: when one acquisition fails (its lock budget ran out) the ones taken
 * are released before the error returns, so the caller never sees a partial
 * hold. Cost: n acquisitions; only the fork handlers call it.
 */
#include "alloclab/alloclab.h"

static struct al_lock *lock_at(struct al_lock *first, size_t stride, unsigned i)
{
	return (struct al_lock *)((char *)first + (size_t)i * stride);
}

int al_lock_acquire_all(struct al_lock *first, size_t stride, unsigned n, const struct al_ctx *c)
{
	unsigned i;
	int ret;

	for (i = 0; i < n; i++) {
		ret = al_lock_acquire(lock_at(first, stride, i), c);
		if (ret) {
			al_lock_release_all(first, stride, i, c);
			return ret;
		}
	}
	return 0;
}

void al_lock_release_all(struct al_lock *first, size_t stride, unsigned n, const struct al_ctx *c)
{
	while (n--)
		al_lock_release(lock_at(first, stride, n), c);
}
