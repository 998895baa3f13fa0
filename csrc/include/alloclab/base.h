/* SPDX-License-Identifier: MIT */
/*
 * alloclab base: what every other public header builds on.
 *
 * The export macro (AL_API), the ABI version a plugin's descriptors carry,
 * the fixed size limits of stacks, parameter lists and stats blocks, the
 * compiler hints the fast paths use (likely/unlikely, noinline, cold), two
 * bit and spin helpers, and the library's identity (version, build flags,
 * errno names, the process's own malloc).
 *
 * Nothing here takes a lock or allocates; every function may be called at
 * any context level.
 */
#ifndef ALLOCLAB_BASE_H
#define ALLOCLAB_BASE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef AL_PRELOAD_BUILD
/* The LD_PRELOAD shim embeds the library and exports only malloc & co. */
#define AL_API __attribute__((visibility("hidden")))
#else
#define AL_API __attribute__((visibility("default")))
#endif

/* Bumped whenever struct al_ops, al_layer_desc or al_workload_desc change. */
#define AL_ABI_VERSION 1

#define AL_MAX_PARAMS 16   /* parameters per layer or workload */
#define AL_MAX_LAYERS 8	   /* layers per stack */
#define AL_MAX_CPUS   1024 /* model CPUs (same limit as arena spinlocks) */
#define AL_STATS_MAX  96   /* named values one layer may report */

#define AL_CACHELINE 64

#define al_likely(x)	 __builtin_expect(!!(x), 1)
#define al_unlikely(x)	 __builtin_expect(!!(x), 0)
#define al_noinline	 __attribute__((noinline))
#define al_always_inline inline __attribute__((always_inline))
#define al_cold		 __attribute__((cold))

static inline unsigned al_fls64(uint64_t x) /* index of the highest set bit + 1; 0 for 0 */
{
	return x ? 64 - (unsigned)__builtin_clzll(x) : 0;
}

static inline void al_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

AL_API const char *al_version(void);
/* The malloc serving this process: index into "glibc,jemalloc,gperftools-tcmalloc,mimalloc"
 * (the `system` layer's allocator choices). */
AL_API int al_system_allocator(void);
AL_API const char *al_build_flags(void); /* compiler and flags the library was built with */
/* 1 where locks the kernel takes with irqsave run the flags save and restore
 * (x86-64: pushf/popf), 0 where this CPU cannot run them at user level. */
AL_API int al_irqflags_executed(void);
AL_API const char *al_strerror(int err); /* "ENOMEM", "EINVAL", ... */

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_BASE_H */
