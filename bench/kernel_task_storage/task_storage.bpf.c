/* SPDX-License-Identifier: MIT */
/*
 * The kernel's own task local storage, timed where it runs: a
 * tp_btf/sched_process_fork program creates (or only looks up) the child's
 * storage in a BPF_MAP_TYPE_TASK_STORAGE map, as local-storage-create's task
 * program does, and times the call with the irq_work interrupts it took
 * (bpf_mem_alloc raises its refill from unit_alloc; the interrupt is taken
 * when unit_alloc restores IRQs, inside the timed call). Only the driver's
 * own forks count (target_tgid).
 *
 * The free side has no tracepoint of its own: bpf_task_storage_free runs from
 * free_task in an RCU callback (delayed_put_task_struct), so the RCU softirq
 * (vector RCU_SOFTIRQ) is timed whole, with the irq_work interrupts it took;
 * the driver subtracts the same time measured with lookups only, and the
 * softirq's time when no thread is made. on_free, which tells whether the
 * storage is freed on its creator's CPU, is attached by the driver only in
 * a segment of its own, since it adds a lookup to every free.
 *
 * Per-CPU state: task_storage.h; the totals are atomics.
 * The license string is the kernel's requirement for tracing programs.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "task_storage.h"

struct task_struct;

#define RCU_SOFTIRQ 9

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, long);
} task_map SEC(".maps");

int do_create;
int target_tgid;

struct pcpu pc[MAXCPU];
/* create calls: [0] those that took no irq_work interrupt, [1] those that did */
unsigned long long al_cnt[2], al_ns[2], al_hns[2], al_hn[2];
unsigned long long rs_cnt, rs_ns, rs_hns, rs_hn;
/* storage freed on another CPU than its creator's, and on the same */
unsigned long long free_remote, free_local;

static __always_inline struct pcpu *this_cpu(void)
{
	return &pc[bpf_get_smp_processor_id() & (MAXCPU - 1)];
}

SEC("tp_btf/irq_work_entry")
int BPF_PROG(irq_work_entry)
{
	this_cpu()->iw_t0 = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/irq_work_exit")
int BPF_PROG(irq_work_exit)
{
	struct pcpu *p = this_cpu();

	if (p->iw_t0) {
		p->iw_ns += bpf_ktime_get_ns() - p->iw_t0;
		p->iw_n++;
		p->iw_t0 = 0;
	}
	return 0;
}

SEC("tp_btf/sched_process_fork")
int on_fork(unsigned long long *ctx)
{
	void *child = (void *)ctx[1];
	struct pcpu *p = this_cpu();
	unsigned long long n0 = p->iw_n, h0 = p->iw_ns, t0, t;
	long *v;
	int k;

	if ((int)(bpf_get_current_pid_tgid() >> 32) != target_tgid)
		return 0;
	t0 = bpf_ktime_get_ns();
	v = bpf_task_storage_get(&task_map, child, 0,
				 do_create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	t = bpf_ktime_get_ns() - t0;
	if (v)
		*v = bpf_get_smp_processor_id() + 1; /* the creator's CPU, for on_free */
	k = p->iw_n != n0;
	__sync_fetch_and_add(&al_cnt[k], 1);
	__sync_fetch_and_add(&al_ns[k], t);
	__sync_fetch_and_add(&al_hns[k], p->iw_ns - h0);
	__sync_fetch_and_add(&al_hn[k], p->iw_n - n0);
	return 0;
}

SEC("tp_btf/sched_process_free")
int BPF_PROG(on_free, struct task_struct *task)
{
	long *v = bpf_task_storage_get(&task_map, task, 0, 0);

	if (v && *v)
		__sync_fetch_and_add(
			*v == bpf_get_smp_processor_id() + 1 ? &free_local : &free_remote, 1);
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(softirq_entry, unsigned int vec)
{
	struct pcpu *p = this_cpu();

	if (vec != RCU_SOFTIRQ)
		return 0;
	p->sq_n0 = p->iw_n;
	p->sq_h0 = p->iw_ns;
	p->sq_t0 = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(softirq_exit, unsigned int vec)
{
	struct pcpu *p = this_cpu();

	if (vec != RCU_SOFTIRQ || !p->sq_t0)
		return 0;
	__sync_fetch_and_add(&rs_cnt, 1);
	__sync_fetch_and_add(&rs_ns, bpf_ktime_get_ns() - p->sq_t0);
	__sync_fetch_and_add(&rs_hns, p->iw_ns - p->sq_h0);
	__sync_fetch_and_add(&rs_hn, p->iw_n - p->sq_n0);
	p->sq_t0 = 0;
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
