/* SPDX-License-Identifier: MIT */
/*
 * What an allocation refused by design means, in one set of words: the
 * builder's answer to a live allocator's caller and the workloads' errors
 * both say it with these strings, so the two never drift. A refusal is a
 * code a layer returns on purpose rather than for lack of memory: -EAGAIN
 * (the CPU's cache is empty with its refill queued), -EBUSY (a lock or
 * reentrancy guard stayed held), -ETIMEDOUT (a lock's wait ran past its
 * budget), -ENOSPC (no instance for the
 * size). Strings only: no code, no state, so both rooms above may include
 * it.
 */
#ifndef ALLOCLAB_CORE_REFUSAL_H
#define ALLOCLAB_CORE_REFUSAL_H

/* What a refusal by design means and which parameter changes it. */
#define AL_WHY_EMPTY                                                                            \
	"the CPU's cache stayed empty, its refill pending (bpf_ma irq_work=thread: the helper " \
	"fell behind; irq_work=inline: the layer below kept failing the refill)"
#define AL_WHY_BUSY                                                                      \
	"a trylock found its lock held, or the CPU's reentrancy guard was held (bpf_ma " \
	"irq_work=thread: by its helper; irq_work=inline runs that work in the caller)"
#define AL_WHY_TIMEDOUT                                                              \
	"a lock stayed held past the layer's lock_budget (in user space its holder " \
	"was descheduled; raise lock_budget or run on a quieter machine)"
#define AL_WHY_NOSPC                                                                \
	"no instance for this size: bpf_ma unit=0 makes one per distinct size, at " \
	"most 8; set unit=<largest size> or mode=any"

#endif
