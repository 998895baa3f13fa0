/* SPDX-License-Identifier: MIT */
/*
 * pages: the zone buddy with per-CPU page lists. Exact PCP accounting for
 * scripted sequences (refill batches with alloc_factor, drains at high,
 * auto-tuned high, free_high, decay), the buddy's splits and merges, the
 * invariant walker after every step of scripted and random sequences
 * (alloc/free of every order, split_page, alloc_pages_bulk,
 * free_pages_bulk, drains), free_pages_bulk's aligned blocks, invalid and
 * double frees, exhaustion and recovery, and a two-thread stress with
 * cross-CPU frees (run under ASan and TSan by CI). The counters: declared
 * with docs, derived entries exact against the per-order counts, lock
 * counts, and stats levels (off keeps bytes_held and the walker right).
 * The zone lock's irqsave flags round trip: what it saves, and that it
 * leaves a leaf function's red-zone locals alone.
 */
#include <errno.h>
#include <pthread.h>

#include "test.h"
#include "../../csrc/core/irqflags.h"

enum { M_MEMORY, M_BATCH, M_HIGH, M_DECAY, M_FREE_HIGH_BATCH, M_LOCK_BUDGET, M_LOCK_TIMING };

static struct al_allocator *make_pages(int64_t memory, int64_t batch, int64_t high, unsigned ncpu)
{
	static const char *const names[] = { "pages" };
	int64_t p[1][AL_MAX_PARAMS];
	const struct al_layer_desc *d = al_layer_find("pages");

	if (!d)
		return NULL;
	al_params_default(d->params, d->nparams, p[0]);
	p[0][M_MEMORY] = memory;
	p[0][M_BATCH] = batch;
	p[0][M_HIGH] = high;
	p[0][M_DECAY] = 0; /* no decay by the clock: the sequences stay exact */
	return t_make(names, 1, (const int64_t(*)[AL_MAX_PARAMS])p, ncpu);
}

static int walk(struct al_allocator *a)
{
	char err[256] = "";
	int ret = al_call_check(a, err, sizeof(err));

	if (ret)
		fprintf(stderr, "check: %s\n", err);
	return ret;
}

static int pcp_count(struct al_allocator *a, unsigned cpu)
{
	int n = -1;

	al_pages_info(a, NULL, cpu, &n, NULL, NULL, NULL);
	return n;
}

static int pcp_high(struct al_allocator *a, unsigned cpu)
{
	int n = -1;

	al_pages_info(a, NULL, cpu, NULL, &n, NULL, NULL);
	return n;
}

static int alloc_factor(struct al_allocator *a, unsigned cpu)
{
	int n = -1;

	al_pages_info(a, NULL, cpu, NULL, NULL, &n, NULL);
	return n;
}

static uint64_t free_pages(struct al_allocator *a)
{
	struct al_pages_info in;

	al_pages_info(a, &in, 0, NULL, NULL, NULL, NULL);
	return in.free_pages;
}

TEST(test_geometry_and_formulas)
{
	struct al_allocator *a = make_pages(4ll << 30, 0, 0, 1), *b;
	struct al_pages_info in;

	CHECK(a != NULL);
	CHECK(al_pages_is(a));
	CHECK_EQ(al_pages_nr(a), 1 << 20);
	CHECK_EQ(al_pages_info(a, &in, 0, NULL, NULL, NULL, NULL), 0);
	/* zone_batchsize(): 4 GiB gives 63; min_free_kbytes = sqrt(4G/1K * 16) = 8192 KB */
	CHECK_EQ(in.batch, 63);
	CHECK_EQ(in.wmark_min, 2048);
	CHECK_EQ(in.wmark_low, 2048 + 1048); /* + max(min/4, managed * 10 / 10000) */
	CHECK_EQ(in.wmark_high, 2048 + 2096);
	CHECK_EQ(in.high_min, 3096);	      /* low watermark / 1 CPU */
	CHECK_EQ(in.high_max, (1 << 20) / 8); /* managed / 8 / 1 CPU */
	CHECK_EQ(in.free_pages, 1 << 20);
	CHECK_EQ(in.nr_free[10], 1024); /* 4 MiB blocks */
	CHECK(al_pfn_valid(a, 0) && al_pfn_valid(a, (1 << 20) - 1) && !al_pfn_valid(a, 1 << 20));
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);

	/* Two CPUs split high; a 6 MiB memory is one 4 MiB and one 2 MiB block. */
	b = make_pages(6 << 20, 0, 0, 2);
	CHECK(b != NULL);
	al_pages_info(b, &in, 1, NULL, NULL, NULL, NULL);
	CHECK_EQ(in.nr_free[10], 1);
	CHECK_EQ(in.nr_free[9], 1);
	CHECK_EQ(in.batch, 1);	   /* zone_batchsize of 1536 pages */
	CHECK_EQ(in.high_min, 48); /* low watermark 97 / 2 CPUs */
	CHECK_EQ(walk(b), 0);
	al_stack_destroy(b);
	CHECK(!al_pages_is(NULL));
}

/* Refills take batch << alloc_factor pages while they fit under high. */
TEST(test_refill_batches_grow)
{
	struct al_allocator *a = make_pages(16 << 20, 63, 1000, 1);
	unsigned long saves = al_irqflags_saves;
	struct al_ctx c;
	uint64_t pfn;
	int i;

	al_ctx_init(&c, 0);
	CHECK_EQ(al_alloc_pages(a, &c, 0, 0, &pfn), 0);
	/* 63 order-0 pages carved in ascending order from a 4 MiB block */
	CHECK_EQ(pfn, 0);
	CHECK_EQ(t_stat(a, 0, "pcp_refills"), 1);
	CHECK_EQ(t_stat(a, 0, "pcp_refill_blocks"), 63);
	CHECK_EQ(t_stat(a, 0, "splits"), 67);
	CHECK_EQ(t_stat(a, 0, "zone_lock_acquired"), 1);
	CHECK_EQ(pcp_count(a, 0), 62);
	CHECK_EQ(alloc_factor(a, 0), 1);
	for (i = 1; i < 63; i++)
		CHECK_EQ(al_alloc_pages(a, &c, 0, 0, &pfn), 0);
	CHECK_EQ(pfn, 62);
	CHECK_EQ(pcp_count(a, 0), 0);
	CHECK_EQ(t_stat(a, 0, "pcp_refills"), 1);
	/* 126, 252, 504, then min(1008, high - count - batch = 937) */
	CHECK_EQ(al_alloc_pages(a, &c, 0, 0, &pfn), 0);
	CHECK_EQ(t_stat(a, 0, "pcp_refill_blocks"), 63 + 126);
	CHECK_EQ(alloc_factor(a, 0), 2);
	for (i = 0; i < 125 + 252 + 504; i++)
		CHECK_EQ(al_alloc_pages(a, &c, 0, 0, &pfn), 0);
	CHECK_EQ(t_stat(a, 0, "pcp_refill_blocks"), 63 + 126 + 252 + 504);
	CHECK_EQ(alloc_factor(a, 0), 4);
	CHECK_EQ(pcp_count(a, 0), 0);
	CHECK_EQ(al_alloc_pages(a, &c, 0, 0, &pfn), 0);
	CHECK_EQ(t_stat(a, 0, "pcp_refill_blocks"), 63 + 126 + 252 + 504 + 937);
	CHECK_EQ(alloc_factor(a, 0), 4);
	CHECK_EQ(t_stat(a, 0, "pcp_allocs"), 63 + 126 + 252 + 504 + 1);
	CHECK_EQ(t_stat(a, 0, "allocs"), 946);
	CHECK_EQ(t_stat(a, 0, "bytes_held"), 946 * 4096);
	CHECK_EQ(t_stat(a, 0, "zone_lock_acquired"), 5);
	CHECK_EQ(al_irqflags_saves - saves, 5ul); /* every refill under spin_lock_irqsave */
	CHECK_EQ(free_pages(a), 4096 - 946 - 936);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* Frees fill the list; at high, nr_pcp_free() pages leave from the tails. */
TEST(test_drain_at_high)
{
	struct al_allocator *a = make_pages(16 << 20, 63, 200, 1);
	static uint64_t pfns[300];
	struct al_ctx c;
	int i;

	al_ctx_init(&c, 0);
	for (i = 0; i < 300; i++)
		CHECK_EQ(al_alloc_pages(a, &c, 0, 0, &pfns[i]), 0);
	/* refills: 63, 126, then min(252, 200 - 0 - 63 = 137) */
	CHECK_EQ(t_stat(a, 0, "pcp_refill_blocks"), 63 + 126 + 137);
	CHECK_EQ(pcp_count(a, 0), 26);
	CHECK_EQ(walk(a), 0);
	for (i = 0; i < 174; i++)
		CHECK_EQ(al_free_pages(a, &c, pfns[i], 0), 0);
	/* count reached 200 at the 174th free: clamp(free_count 174, 63, 200 - 63) = 137 */
	CHECK_EQ(t_stat(a, 0, "pcp_drains"), 1);
	CHECK_EQ(t_stat(a, 0, "pcp_drain_pages"), 137);
	CHECK_EQ(pcp_count(a, 0), 63);
	CHECK_EQ(walk(a), 0);
	for (; i < 300; i++)
		CHECK_EQ(al_free_pages(a, &c, pfns[i], 0), 0);
	CHECK_EQ(t_stat(a, 0, "pcp_drains"), 1);
	CHECK_EQ(pcp_count(a, 0), 189);
	CHECK_EQ(t_stat(a, 0, "pcp_frees"), 300);
	CHECK_EQ(t_stat(a, 0, "bytes_held"), 0);
	CHECK_EQ(walk(a), 0);
	/* The next allocation is the page freed last (LIFO). */
	CHECK_EQ(al_alloc_pages(a, &c, 0, 0, &pfns[0]), 0);
	CHECK_EQ(pfns[0], pfns[299]);
	CHECK_EQ(al_free_pages(a, &c, pfns[0], 0), 0);
	al_stack_drain(a, &c, AL_DRAIN_ALL);
	CHECK_EQ(pcp_count(a, 0), 0);
	CHECK_EQ(free_pages(a), 4096);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* Auto-tuned high: allocation pressure raises it, decay lowers it. */
TEST(test_auto_high_and_decay)
{
	struct al_allocator *a = make_pages(64 << 20, 63, 0, 1);
	static uint64_t pfns[2000];
	struct al_pages_info in;
	struct al_ctx c;
	int i, freed;

	al_ctx_init(&c, 0);
	al_pages_info(a, &in, 0, NULL, NULL, NULL, NULL);
	CHECK_EQ(in.high_min, 320); /* the low watermark of 64 MiB */
	CHECK_EQ(in.high_max, 2048);
	CHECK_EQ(pcp_high(a, 0), 320);
	CHECK_EQ(al_alloc_pages(a, &c, 0, 0, &pfns[0]), 0);
	CHECK_EQ(pcp_high(a, 0), 383); /* + batch */
	for (i = 1; i < 2000; i++)
		CHECK_EQ(al_alloc_pages(a, &c, 0, 0, &pfns[i]), 0);
	CHECK_EQ(pcp_high(a, 0), 2048); /* grown to high_max */
	for (i = 0; i < 2000; i++)
		CHECK_EQ(al_free_pages(a, &c, pfns[i], 0), 0);
	CHECK(pcp_count(a, 0) < 2048);
	CHECK_EQ(walk(a), 0);
	/* decay: high -= high / 8 each tick (at most), the excess drained */
	freed = al_pages_pcp_decay(a, &c);
	CHECK_EQ(pcp_high(a, 0), 2048 - 256);
	CHECK(freed >= 0);
	CHECK(pcp_count(a, 0) <= 1792);
	for (i = 0; i < 40; i++)
		al_pages_pcp_decay(a, &c);
	CHECK_EQ(pcp_high(a, 0), 320);
	CHECK(pcp_count(a, 0) <= 320);
	CHECK(t_stat(a, 0, "decays") > 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* Consecutive frees of order-2 blocks without allocations: free_high. */
TEST(test_free_high)
{
	struct al_allocator *a = make_pages(64 << 20, 63, 0, 1);
	static uint64_t pfns[256];
	struct al_ctx c;
	int i;

	al_ctx_init(&c, 0);
	for (i = 0; i < 256; i++)
		CHECK_EQ(al_alloc_pages(a, &c, 2, AL_GFP_NOPCP, &pfns[i]), 0);
	CHECK_EQ(t_stat(a, 0, "pcp_bypass"), 256);
	CHECK_EQ(t_stat(a, 0, "zone_allocs"), 256);
	CHECK_EQ(t_stat(a, 0, "alloc_o2"), 256);
	for (i = 0; i < 256; i++)
		CHECK_EQ(al_free_pages(a, &c, pfns[i], 2), 0);
	/* free_count >= batch + high_min / 2 = 223 pages after 56 frees */
	CHECK(t_stat(a, 0, "free_high") > 0);
	CHECK_EQ(t_stat(a, 0, "free_o2"), 256);
	CHECK_EQ(walk(a), 0);
	al_stack_drain(a, &c, AL_DRAIN_ALL);
	CHECK_EQ(free_pages(a), 16384);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* The buddy: splits keep the low half, merges go back to 4 MiB blocks. */
TEST(test_buddy_split_merge)
{
	struct al_allocator *a = make_pages(8 << 20, 63, 0, 1);
	struct al_pages_info in;
	struct al_ctx c;
	uint64_t p4, p5;

	al_ctx_init(&c, 0);
	CHECK_EQ(al_alloc_pages(a, &c, 4, 0, &p4), 0); /* not PCP-allowed: the buddy */
	CHECK_EQ(p4, 0);
	CHECK_EQ(t_stat(a, 0, "splits"), 6);
	CHECK_EQ(al_alloc_pages(a, &c, 5, 0, &p5), 0);
	CHECK_EQ(p5, 32);
	CHECK_EQ(t_stat(a, 0, "splits"), 6);
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_free_pages(a, &c, p4, 4), 0);
	CHECK_EQ(t_stat(a, 0, "merges"), 1); /* with the free order-4 block at 16 */
	CHECK_EQ(al_free_pages(a, &c, p5, 5), 0);
	CHECK_EQ(t_stat(a, 0, "merges"), 1 + 5);
	al_pages_info(a, &in, 0, NULL, NULL, NULL, NULL);
	CHECK_EQ(in.nr_free[10], 2);
	CHECK_EQ(in.free_pages, 2048);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* free_pages_bulk: runs go back as naturally aligned blocks. */
TEST(test_free_pages_bulk_blocks)
{
	struct al_allocator *a = make_pages(8 << 20, 63, 0, 1);
	struct al_ctx c;
	uint64_t base, run[16], odd[8];
	unsigned i;

	al_ctx_init(&c, 0);
	CHECK_EQ(al_alloc_pages(a, &c, 4, 0, &base), 0);
	CHECK_EQ(al_split_page(a, &c, base, 4), 0);
	CHECK_EQ(walk(a), 0);
	for (i = 0; i < 16; i++)
		run[i] = base + i;
	CHECK_EQ(al_free_pages_bulk(a, &c, run, 16), 16);
	CHECK_EQ(t_stat(a, 0, "bulk_free_runs"), 1);
	CHECK_EQ(t_stat(a, 0, "bulk_free_blocks"), 1);
	CHECK_EQ(t_stat(a, 0, "free_o4"), 1);
	CHECK_EQ(t_stat(a, 0, "zone_frees"), 1);
	CHECK_EQ(t_stat(a, 0, "bytes_held"), 0);
	CHECK_EQ(walk(a), 0);

	/* pfns base+3 .. base+10 in one run: 3 (o0), 4-7 (o2), 8-9 (o1), 10 (o0) */
	CHECK_EQ(al_alloc_pages(a, &c, 4, 0, &base), 0);
	CHECK_EQ(al_split_page(a, &c, base, 4), 0);
	for (i = 0; i < 8; i++)
		odd[i] = base + 3 + i;
	CHECK_EQ(al_free_pages_bulk(a, &c, odd, 8), 8);
	CHECK_EQ(t_stat(a, 0, "bulk_free_blocks"), 1 + 4);
	CHECK_EQ(t_stat(a, 0, "free_o2"), 1);
	CHECK_EQ(t_stat(a, 0, "free_o1"), 1);
	CHECK_EQ(t_stat(a, 0, "free_o0"), 2);
	CHECK_EQ(walk(a), 0);
	/* two runs, reversed order: each page is its own run */
	odd[0] = base + 2;
	odd[1] = base + 1;
	CHECK_EQ(al_free_pages_bulk(a, &c, odd, 2), 2);
	CHECK_EQ(t_stat(a, 0, "bulk_free_runs"), 1 + 1 + 2);
	/* a page that is not allocated fails the whole call, nothing freed */
	odd[0] = base;
	odd[1] = base + 1; /* already free */
	CHECK_EQ(al_free_pages_bulk(a, &c, odd, 2), -EINVAL);
	CHECK_EQ(t_stat(a, 0, "invalid_frees"), 1);
	CHECK_EQ(walk(a), 0);
	odd[0] = base;
	for (i = 11; i < 16; i++)
		odd[i - 10] = base + i;
	CHECK_EQ(al_free_pages_bulk(a, &c, odd, 6), 6);
	CHECK_EQ(t_stat(a, 0, "bytes_held"), 0);
	al_stack_drain(a, &c, AL_DRAIN_ALL);
	CHECK_EQ(free_pages(a), 2048);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

TEST(test_invalid_and_double_frees)
{
	struct al_allocator *a = make_pages(8 << 20, 63, 0, 1);
	struct al_ctx c;
	void *p, *q;
	long long held;

	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 5000, 0); /* order 1 */
	CHECK(p != NULL);
	CHECK_EQ(al_call_usable_size(a, p), 8192);
	q = al_alloc(a, &c, 1, 0);
	CHECK(q != NULL);
	held = t_stat(a, 0, "bytes_held");
	CHECK_EQ(held, 8192 + 4096);
	CHECK_EQ(al_free(a, &c, (char *)p + 8), -EINVAL);
	CHECK_EQ(al_free(a, &c, (char *)p + 4096), -EINVAL); /* a tail page */
	CHECK_EQ(al_free(a, &c, &c), -EINVAL);		     /* not in the memory */
	CHECK_EQ(al_free_pages(a, &c, 0, 3), -EINVAL);	     /* wrong order */
	CHECK_EQ(t_stat(a, 0, "bytes_held"), held);
	CHECK_EQ(al_free(a, &c, p), 0);
	CHECK_EQ(al_free(a, &c, p), -EINVAL); /* double free: on the pcp list now */
	CHECK_EQ(t_stat(a, 0, "invalid_frees"), 5);
	CHECK_EQ(al_free(a, &c, q), 0);
	CHECK_EQ(t_stat(a, 0, "frees"), 2);
	CHECK_EQ(t_stat(a, 0, "bytes_held"), 0);
	CHECK(al_alloc(a, &c, 0, 0) == NULL && c.err == -EINVAL);
	CHECK(al_alloc(a, &c, (4 << 20) + 1, 0) == NULL && c.err == -EINVAL);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* All memory handed out, ENOMEM at every order, then all back and merged. */
TEST(test_exhaustion_and_recovery)
{
	struct al_allocator *a = make_pages(4 << 20, 63, 0, 2);
	static void *p[2000];
	struct al_pages_info in;
	struct al_ctx c0, c1;
	uint64_t pfn;
	int n = 0, i;

	al_ctx_init(&c0, 0);
	al_ctx_init(&c1, 1);
	while (n < 2000 && (p[n] = al_alloc(a, n % 2 ? &c1 : &c0, 4096, 0)))
		n++;
	CHECK_EQ(n, 1024); /* the last ones after draining the other CPU's list */
	CHECK_EQ((n % 2 ? c1 : c0).err, -ENOMEM);
	CHECK(t_stat(a, 0, "drain_all") >= 1);
	CHECK_EQ(al_alloc_pages(a, &c1, 0, 0, &pfn), -ENOMEM);
	CHECK_EQ(al_alloc_pages(a, &c1, 3, AL_GFP_NORETRY, &pfn), -ENOMEM);
	CHECK_EQ(al_alloc_pages(a, &c1, 0, AL_GFP_PCP_ONLY, &pfn), -EAGAIN);
	CHECK(t_stat(a, 0, "enomem") >= 2);
	CHECK_EQ(t_stat(a, 0, "noretry_failed"), 1);
	CHECK_EQ(walk(a), 0);
	for (i = 0; i < n; i++)
		CHECK_EQ(al_free(a, i % 3 ? &c0 : &c1, p[i]), 0);
	al_stack_drain(a, &c0, AL_DRAIN_ALL);
	al_pages_info(a, &in, 0, NULL, NULL, NULL, NULL);
	CHECK_EQ(in.nr_free[10], 1);
	CHECK_EQ(in.pcp_pages, 0);
	CHECK_EQ(walk(a), 0);
	p[0] = al_alloc(a, &c0, 4 << 20, 0);
	CHECK(p[0] != NULL);
	CHECK_EQ(al_free(a, &c0, p[0]), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

TEST(test_alloc_bulk_and_pcp_only)
{
	struct al_allocator *a = make_pages(16 << 20, 63, 0, 1);
	uint64_t pfns[100], one;
	void *ptrs[100];
	struct al_ctx c;
	int got, i;

	al_ctx_init(&c, 0);
	/* Nothing cached yet: a PCP-only attempt finds the list empty. */
	CHECK_EQ(al_alloc_pages_bulk(a, &c, 0, 10, AL_GFP_PCP_ONLY, pfns), 0);
	CHECK_EQ(c.err, -EAGAIN);
	got = al_alloc_pages_bulk(a, &c, 0, 100, 0, pfns);
	CHECK_EQ(got, 100);
	CHECK_EQ(t_stat(a, 0, "bulk_alloc_calls"), 2);
	CHECK_EQ(t_stat(a, 0, "pcp_refills"), 2); /* 63, then 37 of 126 */
	CHECK_EQ(t_stat(a, 0, "pcp_lock_acquired"), 2);
	CHECK_EQ(pcp_count(a, 0), 63 + 126 - 100);
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_free_pages_bulk(a, &c, pfns, 100), 100);
	CHECK_EQ(walk(a), 0);
	/* PCP-only takes cached blocks, no refill */
	got = al_alloc_pages_bulk(a, &c, 0, 50, AL_GFP_PCP_ONLY, pfns);
	CHECK_EQ(got, 50);
	CHECK_EQ(al_alloc_pages(a, &c, 1, AL_GFP_PCP_ONLY, &one), -EAGAIN);
	CHECK_EQ(al_alloc_pages(a, &c, 4, AL_GFP_PCP_ONLY, &one), -EINVAL);
	CHECK_EQ(al_alloc_pages_bulk(a, &c, 4, 2, 0, pfns + 50), 0);
	CHECK_EQ(c.err, -EINVAL);
	for (i = 0; i < 50; i++)
		CHECK_EQ(al_free_pages(a, &c, pfns[i], 0), 0);
	/* the al_ops bulk calls */
	CHECK_EQ(al_call_alloc_bulk(a, &c, 4096, 100, ptrs, AL_ZERO), 100);
	for (i = 0; i < 100; i++)
		CHECK_EQ(((char *)ptrs[i])[4095], 0);
	CHECK_EQ(al_call_free_bulk(a, &c, ptrs, 100), 100);
	CHECK_EQ(al_call_alloc_bulk(a, &c, 3 * 4096, 4, ptrs, 0), 4);
	CHECK_EQ(t_stat(a, 0, "alloc_o2"), 4);
	CHECK_EQ(al_call_free_bulk(a, &c, ptrs, 4), 4);
	CHECK_EQ(t_stat(a, 0, "bytes_held"), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* A seeded random sequence on two CPUs, the walker after every step. */
static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct held {
	uint64_t pfn;
	unsigned order;
	bool split; /* pages freed one by one or in bulk */
};

TEST(test_random_sequence_walker)
{
	struct al_allocator *a = make_pages(8 << 20, 7, 0, 2);
	static struct held h[4096];
	static uint64_t pfns[1024];
	struct al_ctx c[2];
	uint64_t s = 42;
	unsigned n = 0, step, i, k, j;
	int bad = 0;

	al_ctx_init(&c[0], 0);
	al_ctx_init(&c[1], 1);
	for (step = 0; step < 3000 && !bad; step++) {
		struct al_ctx *cx = &c[rng(&s) % 2];
		unsigned op = rng(&s) % 10;

		if (op < 4 && n < 4000) {
			unsigned order = (unsigned)(rng(&s) % 11);

			if (order > 5 && rng(&s) % 4)
				order = (unsigned)(rng(&s) % 4);
			if (!al_alloc_pages(a, cx, order, rng(&s) % 5 ? 0 : AL_GFP_NOPCP,
					    &h[n].pfn)) {
				h[n].order = order;
				h[n].split = false;
				n++;
			}
		} else if (op == 4 && n) {
			i = (unsigned)(rng(&s) % n);
			if (!h[i].split && h[i].order) {
				CHECK_EQ(al_split_page(a, cx, h[i].pfn, h[i].order), 0);
				h[i].split = true;
			}
		} else if (op == 5 && n < 4000) {
			int got = al_alloc_pages_bulk(a, cx, 0, 1 + (unsigned)(rng(&s) % 40), 0,
						      pfns);

			for (k = 0; k < (unsigned)got && n < 4096; k++) {
				h[n].pfn = pfns[k];
				h[n].order = 0;
				h[n].split = false;
				n++;
			}
		} else if (op == 6) {
			al_stack_drain(a, cx, rng(&s) % 2 ? AL_DRAIN_CPU : AL_DRAIN_ALL);
		} else if (n) {
			i = (unsigned)(rng(&s) % n);
			if (h[i].split) {
				k = 1u << h[i].order;
				for (j = 0; j < k; j++)
					pfns[j] = h[i].pfn + j;
				if (rng(&s) % 2) {
					CHECK_EQ(al_free_pages_bulk(a, cx, pfns, k), (int)k);
				} else {
					for (j = 0; j < k; j++)
						CHECK_EQ(al_free_pages(a, cx, pfns[k - 1 - j], 0),
							 0);
				}
			} else {
				CHECK_EQ(al_free_pages(a, cx, h[i].pfn, h[i].order), 0);
			}
			h[i] = h[--n];
		}
		if (walk(a)) {
			fprintf(stderr, "at step %u\n", step);
			bad = 1;
		}
		CHECK(!bad);
	}
	for (i = 0; i < n; i++) {
		if (h[i].split)
			for (j = 0; j < (1u << h[i].order); j++)
				CHECK_EQ(al_free_pages(a, &c[0], h[i].pfn + j, 0), 0);
		else
			CHECK_EQ(al_free_pages(a, &c[1], h[i].pfn, h[i].order), 0);
	}
	al_stack_drain(a, &c[0], AL_DRAIN_ALL);
	CHECK_EQ(free_pages(a), 2048); /* everything merged back */
	CHECK_EQ(t_stat(a, 0, "bytes_held"), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* Two threads, two CPUs, cross-CPU frees through a shared slot array. */
#define XSLOTS 64

struct stress {
	struct al_allocator *a;
	uint64_t slot[XSLOTS]; /* pfn + 1 of a block (order in the top bits), 0 = empty */
	unsigned cpu;
	uint64_t seed;
};

static struct stress *shared_stress;

static void *stress_main(void *arg)
{
	struct stress *st = arg, *sh = shared_stress;
	struct al_ctx c;
	uint64_t s = st->seed, v, pfn;
	unsigned i, order;

	al_ctx_init(&c, st->cpu);
	for (i = 0; i < 20000; i++) {
		unsigned k = (unsigned)(rng(&s) % XSLOTS);

		order = (unsigned)(rng(&s) % 4);
		if (rng(&s) % 16 == 0)
			order = 4 + (unsigned)(rng(&s) % 6);
		if (al_alloc_pages(sh->a, &c, order, 0, &pfn))
			continue;
		*(volatile char *)al_page_address(sh->a, pfn) = (char)i;
		v = __atomic_exchange_n(&sh->slot[k], (pfn + 1) | ((uint64_t)order << 56),
					__ATOMIC_ACQ_REL);
		if (v)
			CHECK_EQ(al_free_pages(sh->a, &c, (v & ((1ull << 56) - 1)) - 1,
					       (unsigned)(v >> 56)),
				 0);
	}
	return NULL;
}

TEST(test_two_thread_stress)
{
	struct stress sh = { 0 }, t[2];
	pthread_t th[2];
	struct al_ctx c;
	unsigned i;

	sh.a = make_pages(32 << 20, 15, 0, 2);
	shared_stress = &sh;
	for (i = 0; i < 2; i++) {
		t[i].cpu = i;
		t[i].seed = 0x9E3779B97F4A7C15ull * (i + 1);
		pthread_create(&th[i], NULL, stress_main, &t[i]);
	}
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	al_ctx_init(&c, 0);
	for (i = 0; i < XSLOTS; i++)
		if (sh.slot[i])
			CHECK_EQ(al_free_pages(sh.a, &c, (sh.slot[i] & ((1ull << 56) - 1)) - 1,
					       (unsigned)(sh.slot[i] >> 56)),
				 0);
	al_stack_drain(sh.a, &c, AL_DRAIN_ALL);
	CHECK_EQ(free_pages(sh.a), 8192);
	CHECK_EQ(walk(sh.a), 0);
	al_stack_destroy(sh.a);
}

/* Every counter is documented, and every formula sums counted entries of
 * the same list (a misspelt term would add nothing, silently). */
static int check_descs(const struct al_layer_desc *d)
{
	unsigned i, j, bad = 0;

	for (i = 0; i < d->ncounters; i++) {
		const struct al_counter_desc *e = &d->counters[i];
		const char *f = e->formula;

		if (!e->doc || !*e->doc)
			bad++;
		if (!(e->flags & AL_CTR_DERIVED))
			continue;
		while (f && *f) {
			size_t n = strcspn(f, "+-");

			for (j = 0; j < d->ncounters; j++)
				if (strlen(d->counters[j].name) == n &&
				    !memcmp(d->counters[j].name, f, n) &&
				    !(d->counters[j].flags & (AL_CTR_DERIVED | AL_CTR_REPORTED)))
					break;
			if (j == d->ncounters) {
				fprintf(stderr, "%s: bad term in %s = %s\n", d->name, e->name,
					e->formula);
				bad++;
			}
			f += n + (f[n] != 0);
		}
	}
	return (int)bad;
}

/* The flags of the counter named `name` in d's list, or -1. */
static int ctr_flags(const struct al_layer_desc *d, const char *name)
{
	unsigned i;

	for (i = 0; i < d->ncounters; i++)
		if (!strcmp(d->counters[i].name, name))
			return (int)d->counters[i].flags;
	return -1;
}

/*
 * A PCP hit counts one per-order slot; blocks, pages and PCP hits are
 * derived from the per-order counts: split_page adds its pages as blocks,
 * a bulk-freed block counts its pages as frees.
 */
TEST(test_counters_declared_and_derived)
{
	const struct al_layer_desc *d = al_layer_find("pages");
	struct al_allocator *a = make_pages(16 << 20, 63, 1000, 1);
	uint64_t p0, p2, p5, split[4];
	struct al_ctx c;
	unsigned i;

	CHECK(d && d->counters && d->ncounters > 50);
	CHECK_EQ(check_descs(d), 0);
	CHECK_EQ(ctr_flags(d, "allocs"), AL_CTR_KEY | AL_CTR_DERIVED);
	CHECK_EQ(ctr_flags(d, "pcp_allocs"), AL_CTR_KEY | AL_CTR_DERIVED);
	CHECK_EQ(ctr_flags(d, "pages_alloc"), AL_CTR_REPORTED);
	CHECK_EQ(ctr_flags(d, "alloc_o0"), AL_CTR_KEY);
	CHECK_EQ(ctr_flags(d, "zone_lock_acquired"), AL_CTR_KEY);
	CHECK_EQ(ctr_flags(d, "pcp_lock_wait_ns"), AL_CTR_NS);
	CHECK_EQ(ctr_flags(d, "free_pages"), AL_CTR_GAUGE | AL_CTR_REPORTED);
	CHECK(a != NULL);
	al_ctx_init(&c, 0);
	CHECK_EQ(al_alloc_pages(a, &c, 0, 0, &p0), 0); /* refill, then a PCP hit */
	CHECK_EQ(al_alloc_pages(a, &c, 2, 0, &p2), 0);
	CHECK_EQ(al_alloc_pages(a, &c, 5, 0, &p5), 0); /* not PCP-allowed: the zone */
	CHECK_EQ(t_stat(a, 0, "alloc_o0"), 1);
	CHECK_EQ(t_stat(a, 0, "alloc_o2"), 1);
	CHECK_EQ(t_stat(a, 0, "alloc_o5"), 1);
	CHECK_EQ(t_stat(a, 0, "allocs"), 3);
	CHECK_EQ(t_stat(a, 0, "pcp_allocs"), 2);
	CHECK_EQ(t_stat(a, 0, "zone_allocs"), 1);
	CHECK_EQ(t_stat(a, 0, "pages_alloc"), 1 + 4 + 32);
	CHECK_EQ(t_stat(a, 0, "bytes_held"), 37 * 4096);
	CHECK_EQ(t_stat(a, 0, "pcp_lock_acquired"), 2);
	CHECK_EQ(t_stat(a, 0, "zone_lock_acquired"), 3); /* two refills, one rmqueue_buddy */
	CHECK_EQ(t_stat(a, 0, "zone_lock_wait_ns"), -1); /* timed at stats=full only */
	CHECK_EQ(al_split_page(a, &c, p2, 2), 0);
	CHECK_EQ(t_stat(a, 0, "split_pages"), 1);
	CHECK_EQ(t_stat(a, 0, "split_page_blocks"), 3);
	CHECK_EQ(t_stat(a, 0, "allocs"), 6);
	CHECK_EQ(t_stat(a, 0, "pages_alloc"), 37);
	CHECK_EQ(walk(a), 0);
	for (i = 0; i < 4; i++)
		split[i] = p2 + i;
	CHECK_EQ(al_free_pages_bulk(a, &c, split, 4), 4); /* one aligned order-2 block */
	CHECK_EQ(t_stat(a, 0, "bulk_free_blocks"), 1);
	CHECK_EQ(t_stat(a, 0, "bulk_free_pages"), 4);
	CHECK_EQ(t_stat(a, 0, "frees"), 4);
	CHECK_EQ(al_free_pages(a, &c, p5, 5), 0);
	CHECK_EQ(al_free_pages(a, &c, p0, 0), 0);
	CHECK_EQ(t_stat(a, 0, "free_o0"), 1);
	CHECK_EQ(t_stat(a, 0, "free_o2"), 1);
	CHECK_EQ(t_stat(a, 0, "free_o5"), 1);
	CHECK_EQ(t_stat(a, 0, "frees"), 6);
	CHECK_EQ(t_stat(a, 0, "pcp_frees"), 2);
	CHECK_EQ(t_stat(a, 0, "zone_frees"), 1);
	CHECK_EQ(t_stat(a, 0, "pages_freed"), 37);
	CHECK_EQ(t_stat(a, 0, "bytes_held"), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* A stack made at one stats level: allocate, check, free, check. */
static struct al_allocator *pages_at(unsigned level)
{
	unsigned prev = al_stats_level_set(level);
	struct al_allocator *a = make_pages(16 << 20, 63, 1000, 1);

	al_stats_level_set(prev);
	return a;
}

/* stats=off counts and reports nothing, yet bytes_held (the leak check)
 * and the walker stay right; stats=full adds the lock times. */
TEST(test_stats_levels)
{
	struct al_allocator *a = pages_at(AL_STATS_OFF);
	unsigned long saves, restores;
	uint64_t pfn[8], big;
	struct al_ctx c;

	CHECK(a != NULL);
	al_ctx_init(&c, 0);
	CHECK_EQ(al_alloc_pages_bulk(a, &c, 0, 8, 0, pfn), 8);
	CHECK_EQ(al_alloc_pages(a, &c, 6, 0, &big), 0);
	CHECK_EQ(t_stat(a, 0, "bytes_held"), (8 + 64) * 4096);
	CHECK_EQ(t_stat(a, 0, "allocs"), -1);
	CHECK_EQ(t_stat(a, 0, "alloc_o0"), -1);
	CHECK_EQ(t_stat(a, 0, "zone_lock_acquired"), -1);
	CHECK_EQ(t_stat(a, 0, "free_pages"), -1);
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_free_pages_bulk(a, &c, pfn, 8), 8);
	CHECK_EQ(al_free_pages(a, &c, big, 6), 0);
	CHECK_EQ(t_stat(a, 0, "bytes_held"), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);

	a = pages_at(AL_STATS_FULL);
	CHECK(a != NULL);
	saves = al_irqflags_saves;
	restores = al_irqflags_restores;
	CHECK_EQ(al_alloc_pages(a, &c, 6, 0, &big), 0);
	CHECK_EQ(t_stat(a, 0, "zone_lock_acquired"), 1);
	/* spin_lock_irqsave: the zone lock's take saved the flags, its release
	 * restored them, once each */
	CHECK_EQ(al_irqflags_saves - saves, 1ul);
	CHECK_EQ(al_irqflags_restores - restores, 1ul);
	CHECK(t_stat(a, 0, "zone_lock_wait_ns") >= 0);
	CHECK(t_stat(a, 0, "pcp_lock_hold_ns") >= 0);
	CHECK_EQ(al_free_pages(a, &c, big, 6), 0);
	CHECK_EQ(t_stat(a, 0, "zone_lock_acquired"), 2);
	CHECK_EQ(al_irqflags_saves - saves, 2ul);
	CHECK_EQ(al_irqflags_restores - restores, 2ul);
	CHECK_EQ(t_stat(a, 0, "bytes_held"), 0);
	al_stack_destroy(a);
}

/* A leaf function: gcc keeps its locals in the red zone below the stack
 * pointer, where a bare push would land. */
static __attribute__((noinline)) uint64_t redzone_sum(uint64_t seed)
{
	volatile uint64_t a[15]; /* 120 of the red zone's 128 bytes */
	unsigned long flags;
	uint64_t sum = 0;
	unsigned i;

	for (i = 0; i < 15; i++)
		a[i] = seed * (i + 1);
	flags = al_local_irq_save();
	al_local_irq_restore(flags);
	for (i = 0; i < 15; i++)
		sum += a[i];
	return sum;
}

static void test_irqflags_round_trip(void)
{
	unsigned long flags = al_local_irq_save();

	al_local_irq_restore(flags);
	CHECK_EQ(al_irqflags_executed(), AL_IRQFLAGS_EXECUTED);
#if defined(__x86_64__) && !defined(__ILP32__)
	CHECK_EQ(AL_IRQFLAGS_EXECUTED, 1);
	CHECK(flags & 0x2);	      /* EFLAGS bit 1 reads as one */
	CHECK(flags & 0x200);	      /* user code runs with IF set */
	CHECK_EQ(flags & 0x400, 0ul); /* DF clear, as the ABI requires */
	/* The restore writes the flags it is given: the carry flag reads back
	 * set after a restore that sets it, and clear after one that clears it. */
	al_local_irq_restore(flags | 0x1);
	CHECK(al_local_irq_save() & 0x1);
	al_local_irq_restore(flags & ~0x1ul);
	CHECK_EQ(al_local_irq_save() & 0x1, 0ul);
#else
	CHECK_EQ(flags, 0ul);
#endif
	CHECK_EQ(redzone_sum(0x0101010101ull), 120ull * 0x0101010101ull);
}

int main(void)
{
	RUN(test_geometry_and_formulas);
	RUN(test_refill_batches_grow);
	RUN(test_drain_at_high);
	RUN(test_auto_high_and_decay);
	RUN(test_free_high);
	RUN(test_buddy_split_merge);
	RUN(test_free_pages_bulk_blocks);
	RUN(test_invalid_and_double_frees);
	RUN(test_exhaustion_and_recovery);
	RUN(test_alloc_bulk_and_pcp_only);
	RUN(test_random_sequence_walker);
	RUN(test_two_thread_stress);
	RUN(test_counters_declared_and_derived);
	RUN(test_stats_levels);
	RUN(test_irqflags_round_trip);
	return TEST_SUMMARY();
}
