/* SPDX-License-Identifier: MIT */
/*
 * alloclab ctx: the running thread's context and fault injection.
 *
 * A struct al_ctx (ops.h) says which model CPU and context level a call runs
 * at. This header gives a thread its current context (so that a signal
 * handler, the model of an NMI, derives its own nested one) and the
 * fault-injection hook through which tests run a nested operation at an
 * exact instant inside a layer.
 *
 * Concurrency: the current context is a per-thread pointer read with no lock
 * and no allocation (async-signal-safe). The injection hook is one global
 * pointer, set by a test while no operation runs.
 */
#ifndef ALLOCLAB_CTX_H
#define ALLOCLAB_CTX_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The context of the worker running on this thread, so that a signal handler
 * (the NMI model) can derive its own: same CPU, level AL_CTX_NMI. One
 * initial-exec TLS pointer: reading it never allocates, so it is
 * async-signal-safe. The engine sets it for each worker; tests set their own.
 */
AL_API struct al_ctx *al_ctx_current(void);
AL_API void al_ctx_set_current(struct al_ctx *c);

/* A context nested in c (same CPU) at `level`: what an interrupt or an NMI
 * arriving while c runs uses. */
static inline void al_ctx_nested(struct al_ctx *out, const struct al_ctx *c, unsigned level)
{
	out->cpu = c->cpu;
	out->level = level;
	out->err = 0;
	out->pad = 0;
}

/* The machine's topology, from the CPU model (csrc/core/cpu.c): the CPUs
 * in this process's affinity mask, and hardware threads per core. Runs size
 * pinned workers by them and results record them. */
AL_API unsigned al_cpus_usable(void);
AL_API unsigned al_threads_per_core(void);

/*
 * Fault injection for deterministic tests: layers call AL_INJECT("layer.point",
 * c, arg) at the instants a test needs to interrupt (e.g. "bpf_ma.active":
 * the per-CPU `active` counter is held). A test installs a hook that runs a
 * nested operation there, at AL_CTX_NMI, exactly as an NMI arriving at that
 * instruction would. Without a hook the cost is one load and a branch.
 */
typedef void (*al_inject_fn)(const char *point, struct al_ctx *c, void *arg);
AL_API extern al_inject_fn al_inject_hook;

#define AL_INJECT(point, c, arg)                                                         \
	do {                                                                             \
		al_inject_fn _al_f = __atomic_load_n(&al_inject_hook, __ATOMIC_RELAXED); \
		if (al_unlikely(_al_f))                                                  \
			_al_f(point, c, arg);                                            \
	} while (0)

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_CTX_H */
