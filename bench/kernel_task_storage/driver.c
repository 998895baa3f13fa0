/* SPDX-License-Identifier: MIT */
/*
 * Drives task_storage.bpf.c: creates threads in batches, as
 * local-storage-create's task producer does (pthread_create a batch, then
 * join it; the threads do nothing), once with the program creating each
 * child's storage and once with it only looking it up, the two modes of each
 * batch size interleaved round by round. Prints one JSON object: per batch
 * size and mode, the creates and the counters' changes over its segments,
 * and what one VM exit costs here (a CPUID, which traps to the hypervisor
 * in a virtual machine and runs in a few dozen cycles on bare metal).
 *
 * Each segment ends with a 100 ms pause so that the RCU callbacks that free
 * its threads' storage (two grace periods) run inside it: a benchmark, not a
 * test, so a sleep is the honest wait for the kernel's own grace periods.
 *
 *     driver RUNS SECONDS [FIRST]   (root; the kernel's BTF at /sys/kernel/btf/vmlinux)
 *
 * FIRST (0 or 1, default 0): the round parity to start from, so that rounds
 * run one driver each still alternate which mode goes first.
 */
#include <cpuid.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "task_storage.skel.h"

#define NB	 3
#define NV	 12
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
				       "rcu_softirq_handlers",
				       "frees_remote",
				       "frees_local" };

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
	v[10] = b->free_remote;
	v[11] = b->free_local;
}

static long segment(int batch, double seconds)
{
	pthread_t th[MAXBATCH];
	long n = 0;
	double t0 = now();

	do {
		for (int i = 0; i < batch; i++)
			if (pthread_create(&th[i], NULL, nothing, NULL))
				return -1;
		for (int i = 0; i < batch; i++)
			pthread_join(th[i], NULL);
		n += batch;
	} while (now() - t0 < seconds);
	usleep(100000);
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

int main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 10;
	double seconds = argc > 2 ? atof(argv[2]) : 0.3;
	int first = argc > 3 ? atoi(argv[3]) : 0;
	unsigned long long tot[NB][2][NV], a[NV], z[NV];
	long creates[NB][2];
	struct task_storage_bpf *s;

	if (runs < 1 || seconds <= 0 || (first != 0 && first != 1)) {
		fprintf(stderr, "usage: %s RUNS SECONDS [FIRST]\n", argv[0]);
		return 2;
	}
	s = task_storage_bpf__open_and_load();
	if (!s || task_storage_bpf__attach(s)) {
		fprintf(stderr, "cannot load or attach the BPF programs (root and BTF needed)\n");
		return 1;
	}
	memset(tot, 0, sizeof(tot));
	memset(creates, 0, sizeof(creates));
	for (int r = 0; r < runs; r++)
		for (int b = 0; b < NB; b++)
			for (int k = 0; k < 2; k++) {
				int m = ((r + first) % 2) ? 1 - k
							  : k; /* alternate which mode runs first */
				long n;

				s->bss->do_create = m;
				take(s, a);
				n = segment(batches[b], seconds);
				if (n < 0) {
					fprintf(stderr, "pthread_create failed\n");
					return 1;
				}
				take(s, z);
				for (int i = 0; i < NV; i++)
					tot[b][m][i] += z[i] - a[i];
				creates[b][m] += n;
			}
	printf("{\"runs\": %d, \"seconds\": %g, \"vm_exit_ns\": %.1f, \"cells\": [", runs, seconds,
	       vm_exit_ns());
	for (int b = 0; b < NB; b++)
		for (int m = 0; m < 2; m++) {
			printf("%s\n {\"batch\": %d, \"mode\": \"%s\", \"creates\": %ld",
			       b || m ? "," : "", batches[b], m ? "create" : "lookup",
			       creates[b][m]);
			for (int i = 0; i < NV; i++)
				printf(", \"%s\": %llu", names[i], tot[b][m][i]);
			printf("}");
		}
	printf("]}\n");
	task_storage_bpf__destroy(s);
	return 0;
}
