/* SPDX-License-Identifier: MIT */
/*
 * What the zone lock's spin_lock_irqsave flags round trip (csrc/core/irqflags.h:
 * the save and the restore that run at user level) costs on this CPU, per
 * lock take: ns per loop of an uncontended lock and unlock (one atomic
 * exchange and a release store) with and without the round trip around it,
 * median of the rounds, and their difference.
 *
 *     cc -O2 -Icsrc -o irqflags_cost bench/irqflags_cost.c && ./irqflags_cost [rounds]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/irqflags.h"

#define LOOPS	  20000000u
#define MAXROUNDS 31

static int lock_word;

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static __attribute__((noinline)) double take(int flags_too)
{
	double t0 = now_ns();
	unsigned i;

	for (i = 0; i < LOOPS; i++) {
		unsigned long f = flags_too ? al_local_irq_save() : 0;

		while (__atomic_exchange_n(&lock_word, 1, __ATOMIC_ACQUIRE))
			;
		__atomic_store_n(&lock_word, 0, __ATOMIC_RELEASE);
		if (flags_too)
			al_local_irq_restore(f);
	}
	return (now_ns() - t0) / LOOPS;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	unsigned rounds = argc > 1 ? (unsigned)atoi(argv[1]) : 7, r;
	double plain[MAXROUNDS], saved[MAXROUNDS];

	if (rounds < 1 || rounds > MAXROUNDS)
		rounds = 7;
	for (r = 0; r < rounds; r++) { /* interleaved, so drift hits both alike */
		plain[r] = take(0);
		saved[r] = take(1);
	}
	qsort(plain, rounds, sizeof(double), cmp);
	qsort(saved, rounds, sizeof(double), cmp);
	printf("{\"executed\": %d, \"rounds\": %u, \"lock_ns\": %.2f, \"lock_irqsave_ns\": %.2f, "
	       "\"round_trip_ns\": %.2f}\n",
	       AL_IRQFLAGS_EXECUTED, rounds, plain[rounds / 2], saved[rounds / 2],
	       saved[rounds / 2] - plain[rounds / 2]);
	return 0;
}
