/* SPDX-License-Identifier: MIT */
/*
 * alloclab's stand-in for the arena spin lock header. arena_spinlock_t keeps
 * the BPF lock's size (one 32-bit word, zero when unlocked), but the lock
 * taken is alloclab's own (struct al_lock in arena mode: its budget, its
 * failures by reason, its counters), the driving layer's (layer.c) lock
 * for the word's address, asked once per word (runtime.c); the word itself
 * is not used. Acquisition can fail as the BPF lock's can: 0, or a
 * negative errno (-ETIMEDOUT, -EBUSY).
 * The irqsave variants take the same lock: user space has no IRQs to mask.
 */
#ifndef ALR_BPF_ARENA_SPIN_LOCK_H
#define ALR_BPF_ARENA_SPIN_LOCK_H

#include <vmlinux.h>
#include <bpf_atomic.h>

typedef struct {
	u32 val; /* unused: the lock state is alloclab's lock, by address */
} arena_spinlock_t;

static inline int arena_spin_lock(arena_spinlock_t *lock)
{
	return alr_spin_lock(lock);
}

static inline void arena_spin_unlock(arena_spinlock_t *lock)
{
	alr_spin_unlock(lock);
}

#define arena_spin_lock_irqsave(lock, flags) \
	({                                   \
		(flags) = 0;                 \
		arena_spin_lock(lock);       \
	})
#define arena_spin_unlock_irqrestore(lock, flags) \
	({                                        \
		(void)(flags);                    \
		arena_spin_unlock(lock);          \
	})

#endif /* ALR_BPF_ARENA_SPIN_LOCK_H */
