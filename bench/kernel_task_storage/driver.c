/* SPDX-License-Identifier: MIT */
/*
 * Drives task_storage.bpf.c: creates threads in batches, as
 * local-storage-create's task producer does (pthread_create a batch, then
 * join it; the threads do nothing), once with the program creating each
 * child's storage and once with it only looking it up, the two modes of each
 * batch size interleaved round by round. Prints one JSON object: per batch
 * size and mode, the creates and the counters' changes over its segment,
 * and what one VM exit costs here (a CPUID, which traps to the hypervisor
 * in a virtual machine and runs in a few dozen cycles on bare metal).
 *
 * Each segment ends with a 100 ms pause so that the RCU callbacks that free
 * its threads' storage (two grace periods) run inside it: a benchmark, not a
 * test, so a sleep is the honest wait for the kernel's own grace periods.
 * Each round starts with a segment that is not measured (the fresh map's
 * caches fill), and has an idle segment (no thread made, as long as the
 * others), for the RCU softirq's time that is not the threads', and the run
 * ends with a segment that tells whether storage is freed on its creator's
 * CPU (on_free attached, batch 64, creating).
 *
 *     driver [SECONDS [FIRST]]   (root; the kernel's BTF at /sys/kernel/btf/vmlinux)
 *
 * One round: SECONDS (default 0.3) per segment; FIRST (0 or 1, default 0):
 * whether lookups (0) or creates (1) go first, so that rounds, one driver
 * each, alternate.
 */
#include <cpuid.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "task_storage.h"
#include "task_storage.skel.h"

#define NB	 3
#define NV	 10
#define MAXBATCH 64

static const int batches[NB] = { 16, 32, 64 };
static const char *const names[NV] = { "alloc_calls",
				       "alloc_calls_irq_work",
				       "alloc_ns",
				       "alloc_ns_irq_work",
				       "alloc_handler_ns_irq_work",
				       "alloc_handlers",
				       "rcu_softirqs",
				       "rcu_softirq_ns",
				       "rcu_softirq_handler_ns",
				       "rcu_softirq_handlers" };

static void *nothing(void *arg)
{
	return arg;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void take(const struct task_storage_bpf *s, unsigned long long *v)
{
	const struct task_storage_bpf__bss *b = s->bss;
	unsigned long long h = 0;

	v[0] = b->al_cnt[0];
	v[1] = b->al_cnt[1];
	v[2] = b->al_ns[0];
	v[3] = b->al_ns[1];
	v[4] = b->al_hns[1];
	h = b->al_hn[0] + b->al_hn[1];
	v[5] = h;
	v[6] = b->rs_cnt;
	v[7] = b->rs_ns;
	v[8] = b->rs_hns;
	v[9] = b->rs_hn;
}

/* Threads made in batches for about `seconds` (batch 0: none, the time
 * slept), then the pause; *wall: the segment's time, pause included. */
static long segment(int batch, double seconds, double *wall)
{
	pthread_t th[MAXBATCH];
	long n = 0;
	double t0 = now();

	if (!batch) {
		usleep((useconds_t)(seconds * 1e6) + 100000);
		*wall = now() - t0;
		return 0;
	}
	do {
		for (int i = 0; i < batch; i++)
			if (pthread_create(&th[i], NULL, nothing, NULL))
				return -1;
		for (int i = 0; i < batch; i++)
			pthread_join(th[i], NULL);
		n += batch;
	} while (now() - t0 < seconds);
	usleep(100000);
	*wall = now() - t0;
	return n;
}

static double vm_exit_ns(void)
{
	unsigned a, b, c, d, sum = 0;
	const int n = 2000;
	double t0 = now();

	for (int i = 0; i < n; i++) {
		__cpuid(0, a, b, c, d);
		sum += a;
	}
	if (sum == 1) /* keeps the loop: CPUID's result is used */
		fprintf(stderr, "\n");
	return (now() - t0) * 1e9 / n;
}

/* One segment of batch threads (0: idle) with the program creating storage
 * or not; prints its JSON object (after `sep`). */
static int cell(struct task_storage_bpf *s, int batch, int create, double seconds, const char *sep)
{
	unsigned long long a[NV], z[NV];
	double wall;
	long n;

	s->bss->do_create = create;
	take(s, a);
	n = segment(batch, seconds, &wall);
	if (n < 0) {
		fprintf(stderr, "pthread_create failed\n");
		return -1;
	}
	take(s, z);
	printf("%s\n {\"batch\": %d, \"mode\": \"%s\", \"creates\": %ld, \"wall_s\": %.6f", sep,
	       batch, batch ? (create ? "create" : "lookup") : "idle", n, wall);
	for (int i = 0; i < NV; i++)
		printf(", \"%s\": %llu", names[i], z[i] - a[i]);
	printf("}");
	return 0;
}

/* Storage freed on its creator's CPU or another: on_free attached for one
 * creating segment of batch 64. */
static int classify(struct task_storage_bpf *s, double seconds)
{
	struct bpf_link *l = bpf_program__attach(s->progs.on_free);
	double wall;

	if (!l)
		return -1;
	s->bss->do_create = 1;
	if (segment(MAXBATCH, seconds, &wall) < 0)
		return -1;
	bpf_link__destroy(l);
	printf("], \"frees_remote\": %llu, \"frees_local\": %llu", s->bss->free_remote,
	       s->bss->free_local);
	return 0;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 0.3;
	int first = argc > 2 ? atoi(argv[2]) : 0;
	struct task_storage_bpf *s;
	const char *sep = "";
	double wall;

	if (argc > 3 || seconds <= 0 || (first != 0 && first != 1)) {
		fprintf(stderr, "usage: %s [SECONDS [FIRST]]\n", argv[0]);
		return 2;
	}
	if (libbpf_num_possible_cpus() > MAXCPU) {
		fprintf(stderr, "more than %d CPUs: the programs' per-CPU state has %d slots\n",
			MAXCPU, MAXCPU);
		return 1;
	}
	s = task_storage_bpf__open();
	if (s)
		bpf_program__set_autoattach(s->progs.on_free, false);
	if (!s || task_storage_bpf__load(s) || task_storage_bpf__attach(s)) {
		fprintf(stderr, "cannot load or attach the BPF programs (root and BTF needed)\n");
		return 1;
	}
	s->bss->target_tgid = getpid();
	s->bss->do_create = 1; /* fill the fresh map's caches before measuring */
	if (segment(MAXBATCH, seconds, &wall) < 0)
		return 1;
	printf("{\"seconds\": %g, \"vm_exit_ns\": %.1f, \"cells\": [", seconds, vm_exit_ns());
	for (int b = 0; b < NB; b++)
		for (int k = 0; k < 2; k++) {
			int m = first ? 1 - k : k; /* which mode goes first */

			if (cell(s, batches[b], m, seconds, sep))
				return 1;
			sep = ",";
		}
	if (cell(s, 0, 0, seconds, sep) || classify(s, seconds))
		return 1;
	printf("}\n");
	task_storage_bpf__destroy(s);
	return 0;
}
