/* SPDX-License-Identifier: MIT */
/*
 * Topology facts recorded with every result: the CPUs of the process's
 * affinity mask, threads per core (SMT siblings of CPU 0), and steal time
 * from /proc/stat (on a shared VM, both decide how far a latency can be
 * trusted). Nothing here calls malloc.
 *
 * Each query reads the kernel's answer afresh (sched_getaffinity, sysfs,
 * /proc/stat) into stack buffers: no state, no lock, safe from any thread.
 * Cost: one or two system calls and a file read per call; callers ask once
 * per run, never on a measured path.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloclab/core.h"
#include "cpu.h"

unsigned al_cpus_usable(void)
{
	cpu_set_t set;
	int n;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 1;
	n = CPU_COUNT(&set);
	return n > 0 ? (unsigned)n : 1;
}

/* The i-th CPU of the affinity mask (wrapping), or -1. */
int al_cpu_nth(unsigned i)
{
	cpu_set_t set;
	unsigned n = al_cpus_usable(), seen = 0;
	int c;

	if (sched_getaffinity(0, sizeof(set), &set))
		return -1;
	i %= n;
	for (c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set) && seen++ == i)
			return c;
	return -1;
}

/* A helper thread off its pinned creator's CPU (see cpu.h). */
void al_attr_off_pinned_cpu(pthread_attr_t *attr)
{
	cpu_set_t mine, other;
	long n = sysconf(_SC_NPROCESSORS_ONLN), i;

	if (pthread_getaffinity_np(pthread_self(), sizeof(mine), &mine))
		return;
	CPU_ZERO(&other);
	for (i = 0; i < n && i < CPU_SETSIZE; i++)
		if (!CPU_ISSET(i, &mine))
			CPU_SET(i, &other);
	if (!CPU_COUNT(&other) || CPU_COUNT(&mine) > 1)
		return; /* not pinned, or nowhere else to go: inherit */
	pthread_attr_setaffinity_np(attr, sizeof(other), &other);
}

static ssize_t read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n >= 0)
		buf[n] = 0;
	return n;
}

unsigned al_threads_per_core(void)
{
	char buf[256], *p;
	unsigned n = 0;

	/* e.g. "0-1" or "0,4" or "0" */
	if (read_file("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list", buf,
		      sizeof(buf)) <= 0)
		return 1;
	for (p = buf; *p && *p != '\n';) {
		long a = strtol(p, &p, 10), b = a;

		if (*p == '-')
			b = strtol(p + 1, &p, 10);
		n += (unsigned)(b - a + 1);
		if (*p == ',')
			p++;
		else
			break;
	}
	return n ? n : 1;
}

/* Aggregate "cpu" line of /proc/stat: total and steal jiffies. */
int al_read_steal(uint64_t *total, uint64_t *steal)
{
	char buf[1024], *p;
	uint64_t v[10] = { 0 };
	int i;

	*total = *steal = 0;
	if (read_file("/proc/stat", buf, sizeof(buf)) <= 0 || strncmp(buf, "cpu ", 4))
		return -1;
	p = buf + 4;
	for (i = 0; i < 10; i++)
		v[i] = strtoull(p, &p, 10);
	for (i = 0; i < 8; i++) /* guest time is already in user */
		*total += v[i];
	*steal = v[7];
	return 0;
}
