/* SPDX-License-Identifier: MIT */
/*
 * vmalloc over pages: each allocation strategy's exact page-allocator
 * traffic for scripted areas (bulk order-0, high orders first, PCP first),
 * each free strategy (per page vs free_pages_bulk blocks), huge mappings
 * (PMD on x86, contiguous PTEs on arm64), the page table (writes reach the
 * mapped pages, unmapped areas fault), lazy purge and range reuse,
 * alignment, vm_map_ram (vmap blocks and large areas), invalid frees,
 * exhaustion of pages and of virtual space with recovery, the walkers of
 * both layers after every step of a random sequence, a two-thread
 * stress with cross-CPU frees, and the counters at each stats level.
 */
#include <errno.h>
#include <pthread.h>

#include "test.h"

enum { V_ALLOC, V_FREE, V_USE_HUGE, V_ARCH, V_LAZY_MAX, V_VA_SIZE, V_BULK_MAX };
enum { M_MEMORY, M_BATCH, M_HIGH, M_DECAY };
enum { S_ORDER0, S_HIGH_ORDER, S_PCP_FIRST };
enum { F_PER_PAGE, F_BULK };

struct cfg {
	int alloc, free, huge, arm64;
	int64_t memory, va_size, lazy_max;
};

static struct al_allocator *make_vm(struct cfg k, unsigned ncpu)
{
	static const char *const names[] = { "vmalloc", "pages" };
	int64_t p[2][AL_MAX_PARAMS];
	const struct al_layer_desc *v = al_layer_find("vmalloc"), *g = al_layer_find("pages");

	if (!v || !g)
		return NULL;
	al_params_default(v->params, v->nparams, p[0]);
	al_params_default(g->params, g->nparams, p[1]);
	p[0][V_ALLOC] = k.alloc;
	p[0][V_FREE] = k.free;
	p[0][V_USE_HUGE] = k.huge;
	p[0][V_ARCH] = k.arm64;
	if (k.va_size)
		p[0][V_VA_SIZE] = k.va_size;
	p[0][V_LAZY_MAX] = k.lazy_max;
	p[1][M_MEMORY] = k.memory ? k.memory : 64 << 20;
	p[1][M_BATCH] = 63;
	p[1][M_DECAY] = 0;
	return t_make(names, 2, (const int64_t(*)[AL_MAX_PARAMS])p, ncpu);
}

static int walk(struct al_allocator *a)
{
	char err[256] = "";
	int ret = al_call_check(a, err, sizeof(err));

	if (ret)
		fprintf(stderr, "check: %s\n", err);
	return ret;
}

#define PG(name) t_stat(a, 1, name)
#define VM(name) t_stat(a, 0, name)

TEST(test_stack_shape)
{
	static const char *const bad[] = { "vmalloc", "buddy" };
	struct al_allocator *a = NULL;
	struct al_stack_spec s;
	char err[256];

	/* vmalloc needs a page allocator right below it */
	memset(&s, 0, sizeof(s));
	s.n = 2;
	s.layer[0].desc = al_layer_find(bad[0]);
	s.layer[1].desc = al_layer_find(bad[1]);
	al_params_default(s.layer[0].desc->params, s.layer[0].desc->nparams, s.layer[0].params);
	al_params_default(s.layer[1].desc->params, s.layer[1].desc->nparams, s.layer[1].params);
	CHECK_EQ(al_stack_create(&s, 1, &a, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "page allocator") != NULL);
	/* the largest request is vmalloc's, not the pages' 4 MiB */
	s.layer[1].desc = al_layer_find("pages");
	al_params_default(s.layer[1].desc->params, s.layer[1].desc->nparams, s.layer[1].params);
	CHECK_EQ(al_spec_max_size(&s), 8ll << 30);
	CHECK_EQ(al_stack_create(&s, 1, &a, err, sizeof(err)), 0);
	CHECK(al_vmalloc_is(a) && al_pages_is(al_vmalloc_pages(a)) && !al_vmalloc_is(a->below));
	al_stack_destroy(a);
}

TEST(test_page_table_round_trip)
{
	struct al_allocator *a = make_vm((struct cfg){ 0 }, 1);
	char buf[10000], back[10000];
	struct al_ctx c;
	uint64_t pfn;
	unsigned i;
	char *p;

	al_ctx_init(&c, 0);
	p = al_vmalloc(a, &c, 3 * 4096, 0, 0);
	CHECK(p != NULL);
	for (i = 0; i < sizeof(buf); i++)
		buf[i] = (char)(i * 7);
	CHECK_EQ(al_vmalloc_write(a, p + 100, buf, sizeof(buf)), 0);
	CHECK_EQ(al_vmalloc_read(a, p + 100, back, sizeof(back)), 0);
	CHECK(!memcmp(buf, back, sizeof(buf)));
	/* the bytes are in the mapped pages' memory */
	CHECK_EQ(al_vmalloc_to_pfn(a, p + 4096, &pfn), 0);
	CHECK_EQ(((char *)al_page_address(a->below, pfn))[0], buf[4096 - 100]);
	/* the guard page and beyond fault */
	CHECK_EQ(al_vmalloc_write(a, p + 3 * 4096 - 1, buf, 2), -EFAULT);
	CHECK_EQ(al_vmalloc_memset(a, p, 0, 3 * 4096), 0);
	CHECK_EQ(al_vmalloc_read(a, p + 100, back, 1), 0);
	CHECK_EQ(back[0], 0);
	/* the range itself is host memory too: al_ops callers may write it */
	p[0] = 1;
	CHECK_EQ(VM("pte_writes"), 3);
	CHECK_EQ(VM("bytes_held"), 3 * 4096);
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(VM("pte_clears"), 3);
	CHECK_EQ(al_vmalloc_write(a, p, buf, 1), -EFAULT);
	CHECK_EQ(VM("va_lazy"), 1);
	CHECK_EQ(VM("lazy_pages"), 4); /* with the guard page */
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_vmalloc_purge(a, &c), 1);
	CHECK_EQ(VM("lazy_pages"), 0);
	CHECK_EQ(VM("bytes_held"), 0);
	CHECK_EQ(PG("bytes_held"), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* order0: alloc_pages_bulk of <= 100; per_page: every page through the PCP. */
TEST(test_order0_per_page)
{
	struct al_allocator *a = make_vm((struct cfg){ .alloc = S_ORDER0, .free = F_PER_PAGE }, 1);
	struct al_ctx c;
	void *p;

	al_ctx_init(&c, 0);
	p = al_vmalloc(a, &c, 250 * 4096, 0, 0);
	CHECK(p != NULL);
	CHECK_EQ(VM("bulk_calls"), 3); /* 100 + 100 + 50 */
	CHECK_EQ(VM("bulk_pages"), 250);
	CHECK_EQ(PG("alloc_o0"), 250);
	CHECK_EQ(PG("pcp_allocs"), 250);
	CHECK_EQ(PG("zone_allocs"), 0);
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(VM("page_frees"), 250);
	CHECK_EQ(PG("free_o0"), 250);
	CHECK_EQ(PG("pcp_frees"), 250);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* high_order: 100 pages = order 6 + order 5 + order 2, each split; bulk free
 * gives the three blocks back whole (they are contiguous and aligned). */
TEST(test_high_order_bulk_free)
{
	struct al_allocator *a = make_vm((struct cfg){ .alloc = S_HIGH_ORDER, .free = F_BULK }, 1);
	struct al_ctx c;
	void *p;

	al_ctx_init(&c, 0);
	p = al_vmalloc(a, &c, 100 * 4096, 0, 0);
	CHECK(p != NULL);
	CHECK_EQ(VM("high_order_blocks"), 3);
	CHECK_EQ(PG("alloc_o6"), 1);
	CHECK_EQ(PG("alloc_o5"), 1);
	CHECK_EQ(PG("alloc_o2"), 1);
	CHECK_EQ(PG("split_pages"), 3);
	CHECK_EQ(VM("bulk_calls"), 0);
	CHECK_EQ(PG("zone_allocs"), 2);	       /* orders 6 and 5: not PCP-allowed */
	CHECK_EQ(PG("pcp_refill_blocks"), 15); /* order 2: 63 >> 2 blocks */
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(VM("bulk_frees"), 1);
	CHECK_EQ(PG("bulk_free_runs"), 1);
	CHECK_EQ(PG("bulk_free_blocks"), 3);
	CHECK_EQ(PG("free_o6"), 1);
	CHECK_EQ(PG("free_o5"), 1);
	CHECK_EQ(PG("free_o2"), 1);
	CHECK_EQ(PG("zone_frees"), 2);
	CHECK_EQ(PG("bytes_held"), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* high_order with per_page frees: the blocks come back as 100 order-0 pages
 * onto the PCP, which drains them to the buddy to merge there. */
TEST(test_high_order_per_page)
{
	struct al_allocator *a =
		make_vm((struct cfg){ .alloc = S_HIGH_ORDER, .free = F_PER_PAGE }, 1);
	struct al_ctx c;
	void *p;
	int i;

	al_ctx_init(&c, 0);
	for (i = 0; i < 20; i++) {
		p = al_vmalloc(a, &c, 100 * 4096, 0, 0);
		CHECK(p != NULL);
		CHECK_EQ(al_vfree(a, &c, p), 0);
	}
	CHECK_EQ(PG("free_o0"), 2000);
	CHECK(PG("pcp_drains") > 0);
	CHECK(PG("zone_allocs") >= 40); /* order 6 and 5 from the zone every time */
	CHECK(PG("merges") > 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* pcp_first: blocks cached on this CPU's lists first, then the buddy. */
TEST(test_pcp_first)
{
	struct al_allocator *a = make_vm((struct cfg){ .alloc = S_PCP_FIRST, .free = F_BULK }, 1);
	struct al_ctx c;
	void *p;

	al_ctx_init(&c, 0);
	p = al_vmalloc(a, &c, 3 * 4096, 0, 0);
	/* empty lists: nothing cached; the buddy gives order 1 (no pcp), then 1 page */
	CHECK(p != NULL);
	CHECK_EQ(VM("pcp_first_blocks"), 0);
	CHECK_EQ(PG("alloc_o1"), 1);
	CHECK_EQ(PG("pcp_bypass"), 1);
	CHECK_EQ(VM("bulk_pages"), 1);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	/* the order-1 block and the page came back to the lists: both reused */
	p = al_vmalloc(a, &c, 3 * 4096, 0, 0);
	CHECK(p != NULL);
	CHECK_EQ(VM("pcp_first_blocks"), 2);
	CHECK_EQ(PG("alloc_o1"), 2);
	CHECK_EQ(PG("zone_allocs"), 1);
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* vmalloc_huge: a PMD on x86 from 2 MiB; arm64 maps order-4 blocks with
 * contiguous PTEs from 64 KiB, where x86 uses small pages. */
TEST(test_huge_mappings)
{
	struct al_allocator *a = make_vm(
		(struct cfg){ .alloc = S_ORDER0, .free = F_BULK, .huge = 1, .arm64 = 0 }, 1);
	struct al_ctx c;
	uint64_t pfn;
	char *p;

	al_ctx_init(&c, 0);
	p = al_vmalloc(a, &c, 512 * 4096, 0, 0);
	CHECK(p != NULL);
	CHECK_EQ((uintptr_t)p & ((2 << 20) - 1), 0);
	CHECK_EQ(VM("pmd_huge"), 1);
	CHECK_EQ(VM("huge_areas"), 1);
	CHECK_EQ(PG("alloc_o9"), 1); /* through the PCP's THP list */
	CHECK_EQ(VM("pte_writes"), 0);
	CHECK_EQ(al_vmalloc_write(a, p + (300 << 12) + 5, "x", 1), 0);
	CHECK_EQ(al_vmalloc_to_pfn(a, p + (300 << 12), &pfn), 0);
	CHECK_EQ(((char *)al_page_address(a->below, pfn))[5], 'x');
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(PG("free_o9"), 1);
	CHECK_EQ(walk(a), 0);
	/* 16 pages on x86: small pages even with use_huge */
	p = al_vmalloc(a, &c, 16 * 4096, 0, 0);
	CHECK_EQ(VM("huge_areas"), 1);
	CHECK_EQ(VM("cont_groups"), 0);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	al_stack_destroy(a);

	a = make_vm((struct cfg){ .alloc = S_ORDER0, .free = F_PER_PAGE, .huge = 1, .arm64 = 1 },
		    1);
	p = al_vmalloc(a, &c, 64 * 4096, 0, 0);
	CHECK(p != NULL);
	CHECK_EQ((uintptr_t)p & 0xffff, 0);
	CHECK_EQ(VM("cont_groups"), 4);
	CHECK_EQ(VM("pte_writes"), 64);
	CHECK_EQ(PG("alloc_o4"), 4);
	CHECK_EQ(VM("single_allocs"), 4);
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(PG("free_o0"), 64); /* split, freed page by page */
	CHECK_EQ(walk(a), 0);
	/* AL_VM_HUGE asks for it per call */
	al_stack_destroy(a);
	a = make_vm((struct cfg){ .alloc = S_ORDER0, .free = F_BULK, .huge = 0, .arm64 = 1 }, 1);
	p = al_vmalloc(a, &c, 16 * 4096, 0, AL_VM_HUGE);
	CHECK_EQ(VM("cont_groups"), 1);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(PG("free_o4"), 1);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);

	/* high_order tries the orders above the block order first, as the
	 * kernel's large_order > order loop does: 64 pages in order-4 chunks
	 * are one order-6 block, split, still mapped as 4 contiguous groups */
	a = make_vm((struct cfg){ .alloc = S_HIGH_ORDER, .free = F_BULK, .huge = 1, .arm64 = 1 },
		    1);
	p = al_vmalloc(a, &c, 64 * 4096, 0, 0);
	CHECK(p != NULL);
	CHECK_EQ(VM("cont_groups"), 4);
	CHECK_EQ(VM("high_order_blocks"), 1);
	CHECK_EQ(VM("single_allocs"), 0);
	CHECK_EQ(PG("alloc_o6"), 1);
	CHECK_EQ(PG("alloc_o4"), 0);
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(PG("free_o6"), 1); /* the contiguous run goes back whole */
	CHECK_EQ(walk(a), 0);
	/* 80 pages: order 6, then order 4 is the block order itself: one
	 * order-4 block the single way */
	p = al_vmalloc(a, &c, 80 * 4096, 0, 0);
	CHECK_EQ(VM("high_order_blocks"), 2);
	CHECK_EQ(VM("single_allocs"), 1);
	CHECK_EQ(VM("cont_groups"), 4 + 5);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);

	/* a PMD mapping's block order is order 9: nothing above it to try */
	a = make_vm((struct cfg){ .alloc = S_HIGH_ORDER, .free = F_BULK, .huge = 1, .arm64 = 0 },
		    1);
	p = al_vmalloc(a, &c, 512 * 4096, 0, 0);
	CHECK(p != NULL);
	CHECK_EQ(VM("pmd_huge"), 1);
	CHECK_EQ(VM("high_order_blocks"), 0);
	CHECK_EQ(VM("single_allocs"), 1);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

TEST(test_alignment_and_zero)
{
	struct al_allocator *a = make_vm((struct cfg){ .alloc = S_HIGH_ORDER, .free = F_BULK }, 1);
	struct al_ctx c;
	char *p, *q, b[5 * 4096];
	unsigned i;

	al_ctx_init(&c, 0);
	p = al_vmalloc(a, &c, 4096, 1 << 22, 0);
	CHECK(p && !((uintptr_t)p & ((1 << 22) - 1)));
	q = al_vmalloc(a, &c, 5 * 4096, 32768, AL_VM_ZERO);
	CHECK(q && !((uintptr_t)q & 32767));
	CHECK_EQ(al_vmalloc_read(a, q, b, sizeof(b)), 0);
	for (i = 0; i < sizeof(b); i++)
		if (b[i])
			break;
	CHECK_EQ(i, sizeof(b));
	CHECK(al_vmalloc(a, &c, 4096, 1ull << 40, 0) == NULL && c.err == -ENOMEM);
	CHECK(al_vmalloc(a, &c, 4096, 3 << 12, 0) == NULL && c.err == -EINVAL);
	CHECK(al_vmalloc(a, &c, 0, 0, 0) == NULL && c.err == -EINVAL);
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(al_vfree(a, &c, q), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

TEST(test_invalid_frees_and_context)
{
	struct al_allocator *a = make_vm((struct cfg){ 0 }, 1);
	struct al_ctx c;
	char *p;

	al_ctx_init(&c, 0);
	p = al_vmalloc(a, &c, 2 * 4096, 0, 0);
	CHECK_EQ(al_vfree(a, &c, p + 4096), -EINVAL);
	CHECK_EQ(al_vfree(a, &c, &c), -EINVAL);
	CHECK_EQ(al_vfree(a, &c, NULL), 0);
	c.level = AL_CTX_NMI;
	CHECK(al_vmalloc(a, &c, 4096, 0, 0) == NULL && c.err == -EPERM);
	CHECK_EQ(al_vfree(a, &c, p), -EPERM);
	c.level = AL_CTX_TASK;
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(al_vfree(a, &c, p), -EINVAL); /* double */
	CHECK_EQ(VM("invalid_frees"), 3);
	CHECK_EQ(al_vfree(a->below, &c, p), -EINVAL); /* not a vmalloc layer */
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

TEST(test_vm_map_ram)
{
	struct al_allocator *a = make_vm((struct cfg){ 0 }, 2);
	uint64_t pfns[100], pfn;
	struct al_ctx c, c1;
	char *p, *q, *r;
	int i;

	al_ctx_init(&c, 0);
	al_ctx_init(&c1, 1);
	CHECK_EQ(al_alloc_pages_bulk(a->below, &c, 0, 100, 0, pfns), 100);
	p = al_vm_map_ram(a, &c, pfns, 3); /* a vmap block, 4 pages of it */
	q = al_vm_map_ram(a, &c, pfns, 3);
	CHECK(p && q && q == p + 4 * 4096);
	CHECK_EQ(VM("vb_new"), 1);
	CHECK_EQ(al_vmalloc_write(a, q + 4096 + 7, "z", 1), 0);
	CHECK_EQ(((char *)al_page_address(a->below, pfns[1]))[7], 'z');
	r = al_vm_map_ram(a, &c, pfns, 100); /* more than 64: an area */
	CHECK(r != NULL);
	CHECK_EQ(al_vmalloc_to_pfn(a, r + 99 * 4096, &pfn), 0);
	CHECK_EQ(pfn, pfns[99]);
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_vm_unmap_ram(a, &c1, p, 3), 0); /* from another CPU */
	CHECK_EQ(al_vm_unmap_ram(a, &c, q, 3), 0);
	CHECK_EQ(al_vm_unmap_ram(a, &c, r, 99), -EINVAL); /* wrong count */
	CHECK_EQ(al_vm_unmap_ram(a, &c, r, 100), 0);
	CHECK_EQ(al_vmalloc_to_pfn(a, r, &pfn), -EFAULT);
	CHECK_EQ(walk(a), 0);
	/* 256 maps of 3 fill the block exactly: it is freed when all are unmapped */
	for (i = 0; i < 256 * 2; i++) {
		p = al_vm_map_ram(a, &c, pfns, 3);
		CHECK(p != NULL);
		CHECK_EQ(al_vm_unmap_ram(a, &c, p, 3), 0);
	}
	CHECK_EQ(VM("vb_new"), 3);
	CHECK_EQ(VM("vb_freed"), 2);
	al_stack_drain(a, &c, AL_DRAIN_ALL);
	CHECK_EQ(VM("vb_freed"), 3);
	CHECK_EQ(walk(a), 0);
	for (i = 0; i < 100; i++)
		CHECK_EQ(al_free_pages(a->below, &c, pfns[i], 0), 0);
	CHECK_EQ(PG("bytes_held"), 0);
	al_stack_destroy(a);
}

/* Lazily freed ranges are reused only after a purge; lowest fit reuses the
 * lowest hole. */
TEST(test_lazy_purge_and_reuse)
{
	struct al_allocator *a = make_vm((struct cfg){ .lazy_max = 20 }, 1);
	static void *p[64];
	struct al_ctx c;
	void *first, *x;
	int i;

	al_ctx_init(&c, 0);
	for (i = 0; i < 10; i++)
		p[i] = al_vmalloc(a, &c, 4096, 0, 0);
	first = p[0];
	CHECK_EQ((char *)p[1] - (char *)p[0], 2 * 4096); /* one guard page between */
	for (i = 0; i < 5; i++)
		CHECK_EQ(al_vfree(a, &c, p[i]), 0);
	CHECK_EQ(VM("purges"), 0); /* 10 lazy pages <= 20 */
	x = al_vmalloc(a, &c, 4096, 0, 0);
	CHECK(x == (char *)p[9] + 2 * 4096); /* the holes are not free yet */
	for (i = 5; i < 10; i++)
		CHECK_EQ(al_vfree(a, &c, p[i]), 0);
	CHECK_EQ(VM("purges"), 0);
	CHECK_EQ(al_vfree(a, &c, x), 0); /* 22 lazy pages > 20: purge queued */
	CHECK_EQ(VM("purge_work_queued"), 1);
	CHECK_EQ(walk(a), 0); /* the check waits for the purge worker */
	CHECK_EQ(VM("purges"), 1);
	CHECK_EQ(VM("purged_areas"), 11);
	CHECK_EQ(VM("lazy_pages"), 0);
	CHECK_EQ(walk(a), 0);
	x = al_vmalloc(a, &c, 4096, 0, 0);
	CHECK(x == first);
	CHECK_EQ(al_vfree(a, &c, x), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* Pages run out: ENOMEM, nothing leaked, everything back afterwards. */
TEST(test_page_exhaustion_and_recovery)
{
	struct al_allocator *a = make_vm(
		(struct cfg){ .alloc = S_HIGH_ORDER, .free = F_BULK, .memory = 4 << 20 }, 1);
	static void *p[2048];
	struct al_pages_info in;
	struct al_ctx c;
	int n = 0, i;

	al_ctx_init(&c, 0);
	while (n < 2048 && (p[n] = al_vmalloc(a, &c, 7 * 4096, 0, 0)))
		n++;
	CHECK_EQ(n, 1024 / 7);
	CHECK_EQ(c.err, -ENOMEM);
	CHECK_EQ(VM("vmalloc_failed"), 1);
	CHECK_EQ(PG("bytes_held"), n * 7 * 4096); /* the failed one gave its pages back */
	CHECK_EQ(walk(a), 0);
	for (i = 0; i < n; i++)
		CHECK_EQ(al_vfree(a, &c, p[i]), 0);
	al_stack_drain(a, &c, AL_DRAIN_ALL);
	al_pages_info(a->below, &in, 0, NULL, NULL, NULL, NULL);
	CHECK_EQ(in.nr_free[10], 1);
	CHECK_EQ(walk(a), 0);
	p[0] = al_vmalloc(a, &c, 1000 * 4096, 0, 0);
	CHECK(p[0] != NULL);
	CHECK_EQ(al_vfree(a, &c, p[0]), 0);
	al_stack_destroy(a);
}

/* The virtual range runs out: ENOMEM after a purge, then reuse. */
TEST(test_va_exhaustion_and_recovery)
{
	struct al_allocator *a = make_vm((struct cfg){ .va_size = 64 << 20 }, 1);
	static void *p[8192];
	struct al_ctx c;
	int n = 0, i;

	al_ctx_init(&c, 0);
	while (n < 8192 && (p[n] = al_vmalloc(a, &c, 4 * 4096, 0, 0)))
		n++;
	CHECK_EQ(n, (64 << 20) / (5 * 4096));
	CHECK_EQ(c.err, -ENOMEM);
	CHECK_EQ(VM("purge_retries"), 1);
	CHECK_EQ(walk(a), 0);
	for (i = 0; i < n; i++)
		CHECK_EQ(al_vfree(a, &c, p[i]), 0);
	/* lazily freed: the next allocation purges when it finds no range */
	p[0] = al_vmalloc(a, &c, 8 << 20, 0, 0);
	CHECK(p[0] != NULL);
	CHECK_EQ(al_vfree(a, &c, p[0]), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_drain(a, &c, AL_DRAIN_ALL);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* A seeded random sequence per strategy, both walkers after every step. */
TEST(test_random_sequence_walkers)
{
	int strat, fr;

	for (strat = 0; strat < 3; strat++)
		for (fr = 0; fr < 2; fr++) {
			struct al_allocator *a = make_vm((struct cfg){ .alloc = strat,
								       .free = fr,
								       .huge = 0,
								       .arm64 = strat == 1,
								       .memory = 16 << 20,
								       .va_size = 0,
								       .lazy_max = 64 },
							 2);
			static void *live[256];
			struct al_ctx c[2];
			uint64_t s = 7 + (uint64_t)strat * 3 + (uint64_t)fr;
			unsigned n = 0, step, i;
			int bad = 0;

			al_ctx_init(&c[0], 0);
			al_ctx_init(&c[1], 1);
			for (step = 0; step < 400 && !bad; step++) {
				struct al_ctx *cx = &c[rng(&s) % 2];
				unsigned op = (unsigned)(rng(&s) % 8);

				if (op < 4 && n < 256) {
					size_t pages = 1 + rng(&s) % (rng(&s) % 4 ? 20 : 600);
					size_t align = rng(&s) % 4 ? 0 : 1ul << (rng(&s) % 23);
					unsigned fl = (rng(&s) % 5 ? 0 : AL_VM_HUGE) |
						      (rng(&s) % 7 ? 0 : AL_VM_ZERO);
					void *p = al_vmalloc(a, cx, pages * 4096, align, fl);

					if (p) {
						CHECK_EQ(al_vmalloc_write(a, p, "q", 1), 0);
						live[n++] = p;
					}
				} else if (op == 4) {
					al_stack_drain(a, cx,
						       rng(&s) % 2 ? AL_DRAIN_CPU : AL_DRAIN_ALL);
				} else if (n) {
					i = (unsigned)(rng(&s) % n);
					CHECK_EQ(al_vfree(a, cx, live[i]), 0);
					live[i] = live[--n];
				}
				if (walk(a)) {
					fprintf(stderr, "strategy %d free %d step %u\n", strat, fr,
						step);
					bad = 1;
				}
				CHECK(!bad);
			}
			for (i = 0; i < n; i++)
				CHECK_EQ(al_vfree(a, &c[i % 2], live[i]), 0);
			al_stack_drain(a, &c[0], AL_DRAIN_ALL);
			CHECK_EQ(VM("bytes_held"), 0);
			CHECK_EQ(PG("bytes_held"), 0);
			CHECK_EQ(walk(a), 0);
			al_stack_destroy(a);
		}
}

#define XSLOTS 32

struct vstress {
	struct al_allocator *a;
	void *slot[XSLOTS];
};

static struct vstress vsh;

static void *vstress_main(void *arg)
{
	unsigned cpu = (unsigned)(uintptr_t)arg, i;
	uint64_t s = 0x1234567ull * (cpu + 1);
	struct al_ctx c;
	void *p, *old;

	al_ctx_init(&c, cpu);
	for (i = 0; i < 3000; i++) {
		p = al_vmalloc(vsh.a, &c, (1 + rng(&s) % 40) * 4096, 0,
			       rng(&s) % 8 ? 0 : AL_VM_HUGE);
		if (!p)
			continue;
		CHECK_EQ(al_vmalloc_write(vsh.a, p, "s", 1), 0);
		old = __atomic_exchange_n(&vsh.slot[rng(&s) % XSLOTS], p, __ATOMIC_ACQ_REL);
		if (old)
			CHECK_EQ(al_vfree(vsh.a, &c, old), 0);
	}
	return NULL;
}

TEST(test_two_thread_stress)
{
	pthread_t th[2];
	struct al_ctx c;
	unsigned i;

	vsh.a = make_vm((struct cfg){ .alloc = S_HIGH_ORDER,
				      .free = F_BULK,
				      .huge = 0,
				      .arm64 = 1,
				      .memory = 64 << 20,
				      .va_size = 0,
				      .lazy_max = 0 },
			2);
	for (i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, vstress_main, (void *)(uintptr_t)i);
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	al_ctx_init(&c, 0);
	for (i = 0; i < XSLOTS; i++)
		if (vsh.slot[i])
			CHECK_EQ(al_vfree(vsh.a, &c, vsh.slot[i]), 0);
	al_stack_drain(vsh.a, &c, AL_DRAIN_ALL);
	CHECK_EQ(t_stat(vsh.a, 1, "bytes_held"), 0);
	CHECK_EQ(walk(vsh.a), 0);
	al_stack_destroy(vsh.a);
}

/* ---- the test_vmalloc workload ---- */

enum { W_MASK, W_THREADS, W_LOOPS, W_REPEAT, W_NR_PAGES, W_USE_HUGE, W_SEQ, W_PCPU };

static double metric(const struct al_run_result *r, const char *name)
{
	unsigned i;

	for (i = 0; i < r->nmetrics; i++)
		if (!strcmp(r->metrics[i].name, name))
			return r->metrics[i].value;
	return -1;
}

static int tv_stats_level; /* of the runs run_tv makes (AL_STATS_*) */

static int run_tv(struct al_run_result *res, int alloc, int fr, int64_t mask, int64_t nr_pages,
		  int64_t huge, unsigned producers, int timing)
{
	static struct al_run_config cfg;
	const struct al_layer_desc *v = al_layer_find("vmalloc"), *g = al_layer_find("pages");

	memset(&cfg, 0, sizeof(cfg));
	cfg.workload = al_workload_find("test_vmalloc");
	if (!cfg.workload)
		return -ENOENT;
	al_params_default(cfg.workload->params, cfg.workload->nparams, cfg.wparams);
	cfg.wparams[W_MASK] = mask;
	cfg.wparams[W_LOOPS] = 200;
	cfg.wparams[W_REPEAT] = 2;
	cfg.wparams[W_NR_PAGES] = nr_pages;
	cfg.wparams[W_USE_HUGE] = huge;
	cfg.wparams[W_PCPU] = 3000;
	cfg.stack.n = 2;
	cfg.stack.layer[0].desc = v;
	cfg.stack.layer[1].desc = g;
	al_params_default(v->params, v->nparams, cfg.stack.layer[0].params);
	al_params_default(g->params, g->nparams, cfg.stack.layer[1].params);
	cfg.stack.layer[0].params[V_ALLOC] = alloc;
	cfg.stack.layer[0].params[V_FREE] = fr;
	cfg.stack.layer[0].params[V_ARCH] = 1;
	cfg.stack.layer[1].params[M_MEMORY] = 256 << 20;
	cfg.producers = producers;
	cfg.timing = timing;
	cfg.cycles = 1;
	cfg.warmup_cycles = 1;
	cfg.seed = 3;
	cfg.stats_level = tv_stats_level;
	return al_run(&cfg, res);
}

/* Every test alone on every strategy: passes (align_shift: xfails), the
 * metrics are there, and no page or byte is left behind (the engine's
 * teardown leak check fails the run otherwise). */
TEST(test_workload_each_test)
{
	static const char *const names[] = {
		"fix_size_alloc_test",
		"full_fit_alloc_test",
		"long_busy_list_alloc_test",
		"random_size_alloc_test",
		"fix_align_alloc_test",
		"random_size_align_alloc_test",
		"align_shift_alloc_test",
		"pcpu_alloc_test",
		"kvfree_rcu_1_arg_vmalloc_test",
		"kvfree_rcu_2_arg_vmalloc_test",
		"vm_map_ram_test",
	};
	static struct al_run_result res;
	char key[96];
	int bit, s;

	for (s = 0; s < 3; s++)
		for (bit = 0; bit < 11; bit++) {
			int ret = run_tv(&res, s, s ? F_BULK : F_PER_PAGE, 1 << bit, 3, 0, 1,
					 AL_TIMING_BATCH);

			if (ret)
				fprintf(stderr, "%s on strategy %d: %s\n", names[bit], s,
					res.error);
			CHECK_EQ(ret, 0);
			snprintf(key, sizeof(key), "%s.%s", names[bit],
				 bit == 6 ? "xfailed" : "passed");
			CHECK_EQ(metric(&res, key), 2);
			snprintf(key, sizeof(key), "%s.failed", names[bit]);
			CHECK_EQ(metric(&res, key), 0);
			snprintf(key, sizeof(key), "%s.avg_usec", names[bit]);
			CHECK(metric(&res, key) > 0);
			CHECK(metric(&res, "all_tests_usec") > 0);
			CHECK_EQ(res.leaked[0], 0);
			CHECK_EQ(res.leaked[1], 0);
			CHECK(res.alloc_ops > 0);
		}
}

TEST(test_workload_all_tests_two_threads)
{
	static struct al_run_result res;
	int ret;

	ret = run_tv(&res, S_PCP_FIRST, F_BULK, 2047, 16, 1, 2, AL_TIMING_PER_OP_SUM);
	if (ret)
		fprintf(stderr, "%s\n", res.error);
	CHECK_EQ(ret, 0);
	CHECK_EQ(metric(&res, "fix_size_alloc_test.passed"), 4); /* 2 workers x 2 */
	CHECK_EQ(metric(&res, "align_shift_alloc_test.xfailed"), 4);
	CHECK_EQ(metric(&res, "vm_map_ram_test.failed"), 0);
	CHECK(res.free_ops > 0 && res.free_ns > 0);
	/* a policy without vmalloc on top is refused, with the reason */
	{
		static struct al_run_config cfg;
		const struct al_layer_desc *g = al_layer_find("pages");

		memset(&cfg, 0, sizeof(cfg));
		cfg.workload = al_workload_find("test_vmalloc");
		al_params_default(cfg.workload->params, cfg.workload->nparams, cfg.wparams);
		cfg.stack.n = 1;
		cfg.stack.layer[0].desc = g;
		al_params_default(g->params, g->nparams, cfg.stack.layer[0].params);
		cfg.producers = 1;
		cfg.cycles = 1;
		CHECK_EQ(al_run(&cfg, &res), -EINVAL);
		CHECK(strstr(res.error, "vmalloc layer") != NULL);
	}
}

/* A vmalloc stack made at one stats level. */
static struct al_allocator *vm_at(unsigned level)
{
	unsigned prev = al_stats_level_set(level);
	struct al_allocator *a = make_vm((struct cfg){ .alloc = S_ORDER0, .free = F_BULK }, 1);

	al_stats_level_set(prev);
	return a;
}

/*
 * The bytes mapped and unmapped follow from the page counts; the free-range
 * lock and the busy locks count as va_lock_* and busy_lock_*. With stats
 * off nothing is reported, yet both layers' bytes_held (the leak check) and
 * the walkers stay right.
 */
TEST(test_counters_and_stats_levels)
{
	const struct al_layer_desc *d = al_layer_find("vmalloc");
	struct al_allocator *a = vm_at(AL_STATS_LITE);
	unsigned i, undocumented = 0;
	struct al_ctx c;
	void *p, *q;

	CHECK(d && d->counters && d->ncounters > 40);
	for (i = 0; d && i < d->ncounters; i++)
		undocumented += !d->counters[i].doc || !*d->counters[i].doc;
	CHECK_EQ(undocumented, 0);
	CHECK(a != NULL);
	al_ctx_init(&c, 0);
	p = al_vmalloc(a, &c, 3 * 4096, 0, 0);
	CHECK(p != NULL);
	CHECK_EQ(VM("vmallocs"), 1);
	CHECK_EQ(VM("pages_alloc"), 3);
	CHECK_EQ(VM("bytes_mapped"), 3 * 4096);
	CHECK_EQ(VM("bytes_held"), 3 * 4096);
	CHECK_EQ(VM("busy_lock_acquired"), 1);
	CHECK(VM("va_lock_acquired") >= 1);
	CHECK_EQ(VM("va_lock_wait_ns"), -1);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(VM("vfrees"), 1);
	CHECK_EQ(VM("pages_freed"), 3);
	CHECK_EQ(VM("bytes_unmapped"), 3 * 4096);
	CHECK_EQ(VM("busy_lock_acquired"), 2);
	CHECK_EQ(VM("bytes_held"), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);

	a = vm_at(AL_STATS_OFF);
	CHECK(a != NULL);
	p = al_vmalloc(a, &c, 3 * 4096, 0, 0);
	q = al_vmalloc(a, &c, 40 * 4096, 0, 0);
	CHECK(p && q);
	CHECK_EQ(VM("bytes_held"), 43 * 4096);
	CHECK_EQ(PG("bytes_held"), 43 * 4096);
	CHECK_EQ(VM("vmallocs"), -1);
	CHECK_EQ(VM("bytes_mapped"), -1);
	CHECK_EQ(VM("busy_lock_acquired"), -1);
	CHECK_EQ(PG("alloc_o0"), -1);
	CHECK_EQ(walk(a), 0);
	CHECK_EQ(al_vfree(a, &c, q), 0);
	CHECK_EQ(VM("bytes_held"), 3 * 4096);
	CHECK_EQ(al_vfree(a, &c, p), 0);
	CHECK_EQ(VM("bytes_held"), 0);
	CHECK_EQ(PG("bytes_held"), 0);
	CHECK_EQ(walk(a), 0);
	al_stack_destroy(a);
}

/* Runs with stats off (every test, every strategy, two threads) pass the
 * engine's leak check, which reads both layers' bytes_held, and report no
 * counters. */
TEST(test_workload_stats_off)
{
	static struct al_run_result res;
	int s, ret;

	tv_stats_level = AL_STATS_OFF;
	for (s = 0; s < 3; s++) {
		ret = run_tv(&res, s, s ? F_BULK : F_PER_PAGE, 0x7ff, 5, s == 2, 2,
			     AL_TIMING_BATCH);
		if (ret)
			fprintf(stderr, "strategy %d, stats off: %s\n", s, res.error);
		CHECK_EQ(ret, 0);
		CHECK_EQ(res.nlayers, 2);
		CHECK_EQ(res.leaked[0], 0);
		CHECK_EQ(res.leaked[1], 0);
		CHECK_EQ(res.layers[0].n, 0);
		CHECK_EQ(res.layers[1].n, 0);
	}
	tv_stats_level = AL_STATS_LITE;
}

int main(void)
{
	RUN(test_stack_shape);
	RUN(test_page_table_round_trip);
	RUN(test_order0_per_page);
	RUN(test_high_order_bulk_free);
	RUN(test_high_order_per_page);
	RUN(test_pcp_first);
	RUN(test_huge_mappings);
	RUN(test_alignment_and_zero);
	RUN(test_invalid_frees_and_context);
	RUN(test_vm_map_ram);
	RUN(test_lazy_purge_and_reuse);
	RUN(test_page_exhaustion_and_recovery);
	RUN(test_va_exhaustion_and_recovery);
	RUN(test_random_sequence_walkers);
	RUN(test_two_thread_stress);
	RUN(test_workload_each_test);
	RUN(test_workload_all_tests_two_threads);
	RUN(test_counters_and_stats_levels);
	RUN(test_workload_stats_off);
	return TEST_SUMMARY();
}
