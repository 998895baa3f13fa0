/* SPDX-License-Identifier: MIT */
/*
 * alr_rt.h: what the stand-in headers expand to, implemented by runtime.c
 * in the same private object as the tree. Hidden symbols: every copy of the
 * object has its own.
 *
 * The calling context (alloclab's struct al_ctx, opaque here), its model
 * CPU and the loop budget are per thread: set by each entry (alr_entry's
 * alloc, free, run) before it calls into the tree, as a BPF program's
 * may_goto budget is set at program entry.
 */
#ifndef ALR_RT_H
#define ALR_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ALR_HIDDEN __attribute__((visibility("hidden")))

/* The loop budget of one call: the verifier's BPF_MAX_LOOPS (8M iterations
 * of every may_goto loop in a program run, together). */
#define ALR_LOOP_BUDGET (8L * 1024 * 1024)

struct alr_thread {
	long budget;	 /* iterations left to can_loop in this call */
	const void *ctx; /* the caller's context (for the lock, the counters) */
	unsigned cpu;	 /* its model CPU */
};

extern __thread struct alr_thread alr_self ALR_HIDDEN;

ALR_HIDDEN bool alr_loop_exhausted(void);
ALR_HIDDEN void alr_stream_printk(int stream, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
ALR_HIDDEN void *alr_arena_base(void);
ALR_HIDDEN int alr_spin_lock(void *lock);
ALR_HIDDEN void alr_spin_unlock(void *lock);

/* can_loop: true while the call's budget lasts; the first exhaustion in a
 * call is counted (ALR_EV_LOOP_EXHAUSTED) and every later check fails. */
static inline bool alr_can_loop(void)
{
	if (__builtin_expect(alr_self.budget > 0, 1)) {
		alr_self.budget--;
		return true;
	}
	return alr_loop_exhausted();
}

#endif /* ALR_RT_H */
