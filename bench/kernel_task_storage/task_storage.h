/* SPDX-License-Identifier: MIT */
/*
 * What task_storage.bpf.c and its driver share: the per-CPU state of the
 * programs, one cache line per CPU, written only by that CPU (in hard IRQ
 * for irq_work, between the RCU softirq's entry and exit on it), for at
 * most MAXCPU CPUs (the driver refuses more).
 */
#ifndef TASK_STORAGE_H
#define TASK_STORAGE_H

#define MAXCPU 64

struct pcpu {
	unsigned long long iw_n, iw_ns, iw_t0;	/* irq_work interrupts: count, ns, entry */
	unsigned long long sq_t0, sq_n0, sq_h0; /* RCU softirq: entry, irq_work at entry */
	unsigned long long pad[2];
} __attribute__((aligned(64)));

#endif
