/* SPDX-License-Identifier: MIT */
/*
 * Topology helpers shared by the core and the engine (not public API).
 *
 * al_cpu_nth() maps a worker index to the i-th CPU of the process's
 * affinity mask, wrapping around it: the CPU a pinned worker runs on (-1
 * when the mask cannot be read). al_read_steal() reads the total and steal
 * jiffies of the aggregate "cpu" line of /proc/stat (0, or -1 when it
 * cannot), so a run can report the steal time of its measured phase. Both are stateless
 * and lock-free; each costs a system call or a file read (cpu.c).
 */
#ifndef ALLOCLAB_CORE_CPU_H
#define ALLOCLAB_CORE_CPU_H
#include <stdint.h>
int al_cpu_nth(unsigned i);
int al_read_steal(uint64_t *total, uint64_t *steal);
#endif
