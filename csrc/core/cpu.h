/* SPDX-License-Identifier: MIT */
/*
 * Topology helpers shared by the core and the engine (not public API).
 *
 * al_cpu_nth() maps a worker index to the i-th CPU of the process's
 * affinity mask, wrapping around it: the CPU a pinned worker runs on (-1
 * when the mask cannot be read). al_read_steal() reads the total and steal
 * jiffies of the aggregate "cpu" line of /proc/stat (0, or -1 when it
 * cannot), so a run can report the steal time of its measured phase.
 * al_attr_off_pinned_cpu() sets a helper thread's attribute (a kworker
 * analogue) to the CPUs its creator is not pinned to, when the creator is
 * pinned to one CPU and others exist; otherwise the thread inherits: a pinned
 * worker's lock waits never yield, so a helper that shares its CPU and holds
 * the lock it waits for would stall it. All are stateless and lock-free; each
 * costs a system call or a file read (cpu.c).
 */
#ifndef ALLOCLAB_CORE_CPU_H
#define ALLOCLAB_CORE_CPU_H
#include <pthread.h>
#include <stdint.h>
int al_cpu_nth(unsigned i);
int al_read_steal(uint64_t *total, uint64_t *steal);
void al_attr_off_pinned_cpu(pthread_attr_t *attr);
/* Move the helper threads started off_pinned (al_kthread_start) to the CPUs
 * of the caller's mask not in `busy`, when any are left; a helper started
 * later by a pinned worker avoids that worker's CPU by itself. */
#include <sched.h>
void al_kthreads_avoid(const cpu_set_t *busy);
#endif
