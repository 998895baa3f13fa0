/* SPDX-License-Identifier: MIT */
/*
 * alloclab's stand-in for libbpf's bpf_helpers.h, for BPF C compiled as
 * user-space C. Section annotations keep the object (SEC: "used", no ELF
 * section: nothing loads sections here), map definitions become plain
 * globals whose fields describe the map, and the helpers a program calls
 * are functions of alloclab's runtime (runtime.c).
 *
 * A helper or kfunc that is not declared here or in the other stand-in
 * headers is an undeclared function: the compiler names it, with the file
 * and line that called it.
 */
#ifndef ALR_BPF_HELPERS_H
#define ALR_BPF_HELPERS_H

#include "alr_rt.h"

#define SEC(name) __attribute__((used))
#ifndef __weak
#define __weak __attribute__((weak))
#endif
#define __hidden __attribute__((visibility("hidden")))
#define __ksym
#define __kconfig

/* Map definition fields: each is a member that records its value in its
 * type (libbpf reads them from BTF; here they only have to compile). */
#define __uint(name, val)  int(*name)[val]
#define __type(name, val)  __typeof__(val) *name
#define __array(name, val) __typeof__(val) *name[]
#define __ulong(name, val) unsigned long long name

#ifndef likely
#define likely(x) __builtin_expect(!!(x), 1)
#endif
#ifndef unlikely
#define unlikely(x) __builtin_expect(!!(x), 0)
#endif
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#ifndef barrier
#define barrier() __asm__ __volatile__("" ::: "memory")
#endif
/* Hide a variable's value from the optimiser (the verifier's habit). */
#ifndef barrier_var
#define barrier_var(var) __asm__ __volatile__("" : "+r"(var))
#endif
#ifndef __noinline
#define __noinline __attribute__((noinline))
#endif

/* The BPF stream printk: counted and kept as the last message, never printed. */
#define bpf_stream_printk(stream, fmt, ...) alr_stream_printk((stream), (fmt), ##__VA_ARGS__)
#define bpf_printk(fmt, ...)		    alr_stream_printk(2, (fmt), ##__VA_ARGS__)

/* The CPU of the calling context (a model CPU under alloclab's engine). */
static inline unsigned int bpf_get_smp_processor_id(void)
{
	return alr_self.cpu;
}

#endif /* ALR_BPF_HELPERS_H */
