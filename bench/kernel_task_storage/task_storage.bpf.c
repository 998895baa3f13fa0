/* SPDX-License-Identifier: MIT */
/*
 * The kernel's own task local storage, timed where it runs: a
 * tp_btf/sched_process_fork program creates (or only looks up) the child's
 * storage in a BPF_MAP_TYPE_TASK_STORAGE map, as local-storage-create's task
 * program does, and times the call with the irq_work interrupts it took
 * (bpf_mem_alloc raises its refill from unit_alloc; the interrupt is taken
 * when unit_alloc restores IRQs, inside the timed call).
 *
 * The free side has no tracepoint of its own: bpf_task_storage_free runs from
 * free_task in an RCU callback (delayed_put_task_struct), so the RCU softirq
 * (vector RCU_SOFTIRQ) is timed whole, with the irq_work interrupts it took;
 * the driver subtracts the same time measured with lookups only.
 *
 * Per-CPU state is kept in arrays indexed by CPU (at most MAXCPU CPUs): each
 * slot is written only by its CPU, with IRQs off (tracepoints in hard IRQ) or
 * with the softirq's entry and exit on that CPU; the totals are atomics.
 * The license string is the kernel's requirement for tracing programs.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct task_struct;

#define MAXCPU	    64
#define RCU_SOFTIRQ 9

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, long);
} task_map SEC(".maps");

int do_create;

/* irq_work interrupts per CPU: count, ns, entry time */
unsigned long long iw_n[MAXCPU], iw_ns[MAXCPU], iw_t0[MAXCPU];
/* creates: [0] calls that took no irq_work interrupt, [1] calls that did */
unsigned long long al_cnt[2], al_ns[2], al_hns[2], al_hn[2];
/* RCU softirq per CPU: entry time and irq_work counters at entry */
unsigned long long sq_t0[MAXCPU], sq_n0[MAXCPU], sq_h0[MAXCPU];
unsigned long long rs_cnt, rs_ns, rs_hns, rs_hn;
/* storage freed on another CPU than its creator's, and on the same */
unsigned long long free_remote, free_local;

SEC("tp_btf/irq_work_entry")
int BPF_PROG(irq_work_entry)
{
	int c = bpf_get_smp_processor_id() & (MAXCPU - 1);

	iw_t0[c] = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/irq_work_exit")
int BPF_PROG(irq_work_exit)
{
	int c = bpf_get_smp_processor_id() & (MAXCPU - 1);

	if (iw_t0[c]) {
		iw_ns[c] += bpf_ktime_get_ns() - iw_t0[c];
		iw_n[c]++;
		iw_t0[c] = 0;
	}
	return 0;
}

SEC("tp_btf/sched_process_fork")
int on_fork(unsigned long long *ctx)
{
	void *child = (void *)ctx[1];
	int c = bpf_get_smp_processor_id() & (MAXCPU - 1);
	unsigned long long n0 = iw_n[c], h0 = iw_ns[c], t0, t;
	long *v;
	int k;

	t0 = bpf_ktime_get_ns();
	v = bpf_task_storage_get(&task_map, child, 0,
				 do_create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	t = bpf_ktime_get_ns() - t0;
	if (v)
		*v = c + 1; /* the creator's CPU, for the free side */
	k = iw_n[c] != n0;
	__sync_fetch_and_add(&al_cnt[k], 1);
	__sync_fetch_and_add(&al_ns[k], t);
	__sync_fetch_and_add(&al_hns[k], iw_ns[c] - h0);
	__sync_fetch_and_add(&al_hn[k], iw_n[c] - n0);
	return 0;
}

SEC("tp_btf/sched_process_free")
int BPF_PROG(on_free, struct task_struct *task)
{
	long *v = bpf_task_storage_get(&task_map, task, 0, 0);
	int c = bpf_get_smp_processor_id() & (MAXCPU - 1);

	if (v && *v)
		__sync_fetch_and_add(*v == c + 1 ? &free_local : &free_remote, 1);
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(softirq_entry, unsigned int vec)
{
	int c = bpf_get_smp_processor_id() & (MAXCPU - 1);

	if (vec != RCU_SOFTIRQ)
		return 0;
	sq_n0[c] = iw_n[c];
	sq_h0[c] = iw_ns[c];
	sq_t0[c] = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(softirq_exit, unsigned int vec)
{
	int c = bpf_get_smp_processor_id() & (MAXCPU - 1);

	if (vec != RCU_SOFTIRQ || !sq_t0[c])
		return 0;
	__sync_fetch_and_add(&rs_cnt, 1);
	__sync_fetch_and_add(&rs_ns, bpf_ktime_get_ns() - sq_t0[c]);
	__sync_fetch_and_add(&rs_hns, iw_ns[c] - sq_h0[c]);
	__sync_fetch_and_add(&rs_hn, iw_n[c] - sq_n0[c]);
	sq_t0[c] = 0;
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
