/* SPDX-License-Identifier: MIT */
/*
 * The calibrated clock. With an invariant TSC (constant_tsc + nonstop_tsc in
 * /proc/cpuinfo) al_ticks() is one rdtsc; otherwise CLOCK_MONOTONIC in ns.
 * Calibration runs once (pthread_once): al_clock_calibration_ns of TSC
 * against the monotonic clock (20 ms by default; the preload shim, which
 * starts in every process a program runs, asks for 1 ms), then the cost of a
 * back-to-back al_ticks() pair, reported with every result as the timer
 * overhead. Nothing here calls malloc.
 *
 * Invariant: al_clock is written only by the calibration, inside
 * pthread_once, and read-only after al_clock_init() returned; every reader
 * calls al_clock_init() first (a lock or a run does, at init), so readers
 * take no lock. Cost: the first al_clock_init() takes the calibration time; later
 * calls are one pthread_once check. A tick read is one rdtsc (lfence first
 * in al_ticks) or one clock_gettime without TSC.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloclab/core.h"

struct al_clock al_clock = { .tsc = 0, .ticks_per_ns = 1.0, .overhead_ticks = 0 };

unsigned long al_clock_calibration_ns = 20000000;

static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

uint64_t al_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool tsc_invariant(void)
{
#if defined(__x86_64__) || defined(__i386__)
	static char buf[16384];
	ssize_t n;
	int fd = open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC);
	char *flags;

	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	flags = strstr(buf, "\nflags");
	if (!flags)
		return false;
	*strchrnul(flags + 1, '\n') = 0;
	return strstr(flags, " constant_tsc") && strstr(flags, " nonstop_tsc");
#else
	return false;
#endif
}

static void clock_calibrate(void)
{
	uint64_t t0, c0, t1, c1, sum = 0;
	int i;

	if (tsc_invariant()) {
		al_clock.tsc = 1;
		t0 = al_mono_ns();
		c0 = al_ticks();
		do
			t1 = al_mono_ns();
		while (t1 - t0 < al_clock_calibration_ns);
		c1 = al_ticks();
		if (c1 > c0 && t1 > t0)
			al_clock.ticks_per_ns = (double)(c1 - c0) / (double)(t1 - t0);
		else
			al_clock.tsc = 0;
	}
	if (!al_clock.tsc)
		al_clock.ticks_per_ns = 1.0;
	for (i = 0; i < 10000; i++) {
		t0 = al_ticks();
		t1 = al_ticks();
		sum += t1 - t0;
	}
	al_clock.overhead_ticks = (double)sum / 10000.0;
}

int al_clock_init(void)
{
	pthread_once(&clock_once, clock_calibrate);
	return 0;
}
