/* SPDX-License-Identifier: MIT */
/*
 * Shared by the per-CPU front layers (percpu, transfer, magazine): size
 * classes as buddy orders (16 B << order) and the per-CPU `active` guard.
 */
#ifndef ALLOCLAB_FRONTCACHE_H
#define ALLOCLAB_FRONTCACHE_H

#include "alloclab/alloclab.h"

#define FC_MIN_SHIFT 4 /* 16 B, the buddy's minimum block */

/* The class that fits size: the smallest order with 16 << order >= size. */
static inline unsigned fc_order(size_t size)
{
	if (size <= (1u << FC_MIN_SHIFT))
		return 0;
	return al_fls64(size - 1) - FC_MIN_SHIFT;
}

/* The class an object of `usable` bytes can serve: the largest order with
 * 16 << order <= usable (floor, so a libc object of 24 usable bytes serves
 * 16-byte requests, never 32-byte ones). -1 when usable < 16. */
static inline int fc_order_floor(size_t usable)
{
	if (usable < (1u << FC_MIN_SHIFT))
		return -1;
	return (int)al_fls64(usable) - 1 - FC_MIN_SHIFT;
}

static inline size_t fc_class_size(unsigned order)
{
	return (size_t)1 << (order + FC_MIN_SHIFT);
}

enum fc_guard {
	FC_GUARD_ATOMIC = 0, /* cmpxchg on the CPU's `active` word (faithful to the seed) */
	FC_GUARD_LOCAL = 1   /* plain flag: enough when one thread owns each model CPU */
};

#define FC_GUARD_CHOICES "atomic,local"

/* Enter the CPU's cache: false when an operation is already in flight on
 * this CPU (nested, e.g. a signal handler), and the caller takes the backend
 * path. */
static inline bool fc_guard_enter(int *active, int kind)
{
	int zero = 0;

	if (kind == FC_GUARD_ATOMIC)
		return __atomic_compare_exchange_n(active, &zero, 1, false, __ATOMIC_ACQUIRE,
						   __ATOMIC_RELAXED);
	if (__atomic_load_n(active, __ATOMIC_RELAXED))
		return false;
	__atomic_store_n(active, 1, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return true;
}

static inline void fc_guard_exit(int *active, int kind)
{
	if (kind == FC_GUARD_ATOMIC) {
		__atomic_store_n(active, 0, __ATOMIC_RELEASE);
		return;
	}
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(active, 0, __ATOMIC_RELAXED);
}

#endif
