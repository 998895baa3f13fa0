/* SPDX-License-Identifier: MIT */
/*
 * alloclab's stand-in for the BPF atomics header: the kernel's memory-model
 * primitives as GCC/C11 atomics on the host. __sync_* builtins are the
 * compiler's own and need nothing here.
 */
#ifndef ALR_BPF_ATOMIC_H
#define ALR_BPF_ATOMIC_H

#include <vmlinux.h>
#include <bpf_may_goto.h>

#ifndef READ_ONCE
#define READ_ONCE(x) (*(volatile __typeof__(x) *)&(x))
#endif
#ifndef WRITE_ONCE
#define WRITE_ONCE(x, v) (*(volatile __typeof__(x) *)&(x) = (v))
#endif

#define cpu_relax() __builtin_ia32_pause_or_nothing()
#if defined(__x86_64__) || defined(__i386__)
#define __builtin_ia32_pause_or_nothing() __builtin_ia32_pause()
#else
#define __builtin_ia32_pause_or_nothing() ((void)0)
#endif

#define smp_mb()		      __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define smp_rmb()		      __atomic_thread_fence(__ATOMIC_ACQUIRE)
#define smp_wmb()		      __atomic_thread_fence(__ATOMIC_RELEASE)
#define smp_acquire__after_ctrl_dep() smp_rmb()
#define smp_load_acquire(p)	      __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define smp_store_release(p, v)	      __atomic_store_n((p), (v), __ATOMIC_RELEASE)

#define cmpxchg(p, old, new) __sync_val_compare_and_swap((p), (old), (new))
/* true when *p held *pold and now holds new; else *pold is what *p held */
#define try_cmpxchg(p, pold, new) \
	__atomic_compare_exchange_n((p), (pold), (new), false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)
#define try_cmpxchg_relaxed(p, pold, new) \
	__atomic_compare_exchange_n((p), (pold), (new), false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)
#define try_cmpxchg_acquire(p, pold, new) \
	__atomic_compare_exchange_n((p), (pold), (new), false, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)

#define atomic_read(p)				 READ_ONCE((p)->counter)
#define atomic_try_cmpxchg_relaxed(p, pold, new) try_cmpxchg_relaxed(&(p)->counter, pold, new)
#define atomic_try_cmpxchg_acquire(p, pold, new) try_cmpxchg_acquire(&(p)->counter, pold, new)

#endif /* ALR_BPF_ATOMIC_H */
