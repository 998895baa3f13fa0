/* SPDX-License-Identifier: MIT */
/*
 * What zeroing random_size_align_alloc_test's pages costs on this CPU when
 * they come from one order-0 free list (v6.18: alloc_pages_bulk) or from
 * one list per order (6.19-rc1's large orders, whose blocks come back to
 * their own order's list when vfree frees them in bulk).
 *
 * Each loop takes n = rnd % max + 1 pages (rnd a byte, as get_random_u8),
 * zeroes them, and puts them back at the head of their list (LIFO, as the
 * per-CPU page lists). "pages" takes n order-0 pages; "blocks" takes the
 * orders vm_area_alloc_pages asks for (the largest order <= ilog2(left),
 * down to order 1, then order-0 pages), zeroing each block with one memset;
 * "blocks-by-page" zeroes the same blocks a page at a time (the kernel's
 * clear_page loop). Prints one line per mode and size range: ns per loop
 * (median of the rounds) and the distinct pages the last 4096 loops zeroed.
 *
 *     cc -O2 -o zero_hotset bench/zero_hotset.c && ./zero_hotset [rounds]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAGE	  4096u
#define NPAGES	  4096u /* 16 MiB of "memory" */
#define NORDERS	  4
#define LOOPS	  400000u
#define TAIL	  4096u /* loops whose pages make the hot set */
#define MAXROUNDS 31

struct list {
	unsigned *pfn; /* a stack: the head is pfn[n - 1] */
	unsigned n;
};

static char *mem;
static unsigned char *seen;

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static unsigned ilog2(unsigned x)
{
	return 31u - (unsigned)__builtin_clz(x);
}

static void zero(unsigned pfn, unsigned order, int by_page, int track)
{
	unsigned k;

	if (by_page)
		for (k = 0; k < (1u << order); k++)
			memset(mem + (size_t)(pfn + k) * PAGE, 0, PAGE);
	else
		memset(mem + (size_t)pfn * PAGE, 0, (size_t)PAGE << order);
	if (track)
		for (k = 0; k < (1u << order); k++)
			seen[pfn + k] = 1;
}

/* Each order's list holds its share of the memory, in naturally aligned
 * blocks; order 0 also when only pages are used. */
static void fill(struct list *l, int per_order)
{
	unsigned o, pfn = 0, share = NPAGES / NORDERS;

	for (o = 0; o < NORDERS; o++) {
		l[o].n = 0;
		l[o].pfn = malloc(sizeof(unsigned) * NPAGES);
		if (!l[o].pfn)
			exit(1);
	}
	if (!per_order) {
		for (pfn = 0; pfn < NPAGES; pfn++)
			l[0].pfn[l[0].n++] = NPAGES - 1 - pfn;
		return;
	}
	for (o = 0; o < NORDERS; o++)
		for (pfn = o * share; pfn + (1u << o) <= (o + 1) * share; pfn += 1u << o)
			l[o].pfn[l[o].n++] = pfn;
}

static double run(int mode, unsigned max, unsigned *hot)
{
	struct list l[NORDERS];
	unsigned taken[16][2], i, t, nt, left, o, rnd, seed = 1;
	double t0, t1;

	fill(l, mode != 0);
	memset(seen, 0, NPAGES);
	t0 = now_ns();
	for (i = 0; i < LOOPS; i++) {
		seed = seed * 1103515245u + 12345u;
		rnd = (seed >> 16) & 0xff;
		left = rnd % max + 1;
		nt = 0;
		while (mode && left > 1) { /* vm_area_alloc_pages' large orders */
			o = ilog2(left);
			if (o >= NORDERS)
				o = NORDERS - 1;
			taken[nt][0] = l[o].pfn[--l[o].n];
			taken[nt++][1] = o;
			left -= 1u << o;
		}
		while (left--) {
			taken[nt][0] = l[0].pfn[--l[0].n];
			taken[nt++][1] = 0;
		}
		for (t = 0; t < nt; t++)
			zero(taken[t][0], taken[t][1], mode == 2, i >= LOOPS - TAIL);
		for (t = 0; t < nt; t++) /* freed in order: the last on top */
			l[taken[t][1]].pfn[l[taken[t][1]].n++] = taken[t][0];
	}
	t1 = now_ns();
	for (*hot = 0, i = 0; i < NPAGES; i++)
		*hot += seen[i];
	for (o = 0; o < NORDERS; o++)
		free(l[o].pfn);
	return (t1 - t0) / LOOPS;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	static const char *names[] = { "pages", "blocks", "blocks-by-page" };
	static const unsigned maxes[] = { 7, 10 };
	double ns[MAXROUNDS];
	unsigned rounds = argc > 1 ? (unsigned)atoi(argv[1]) : 7, r, m, s, hot = 0;

	if (rounds < 1 || rounds > MAXROUNDS)
		rounds = 7;
	mem = aligned_alloc(1u << 21, (size_t)NPAGES * PAGE);
	seen = malloc(NPAGES);
	if (!mem || !seen)
		return 1;
	memset(mem, 1, (size_t)NPAGES * PAGE);
	for (s = 0; s < 2; s++)
		for (m = 0; m < 3; m++) {
			for (r = 0; r < rounds; r++)
				ns[r] = run((int)m, maxes[s], &hot);
			qsort(ns, rounds, sizeof(double), cmp);
			printf("{\"mode\": \"%s\", \"max_pages\": %u, \"ns_per_loop\": %.2f, "
			       "\"min_ns\": %.2f, \"max_ns\": %.2f, \"hot_pages\": %u}\n",
			       names[m], maxes[s], ns[rounds / 2], ns[0], ns[rounds - 1], hot);
		}
	return 0;
}
