/* SPDX-License-Identifier: MIT */
/*
 * sheaves: exact counters for a scripted sequence with capacity 4 and a barn
 * of one full and one empty sheaf (refills, sheaf swaps with the barn, the
 * flush when the barn is full, a spare swap), capacity by object size,
 * kfree_nolock meeting a held per-CPU lock (deferred, then freed by the
 * irq_work), and a multi-thread stress with NMI-level allocations.
 */
#include <errno.h>
#include <pthread.h>

#include "t_spec.h"

#define S(a, l, name) t_stat((a), (l), (name))

TEST(test_capacity_by_size)
{
	struct al_allocator *a = t_spec("sheaves > slab(form=sheaves)", 1);
	static const size_t size[] = { 64, 256, 1024, 4096 };
	static const long long cap[] = { 60, 28, 12, 4 }; /* 26 raised to fill kmalloc-256 */
	struct al_ctx c;
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 4; i++) {
		long long before = S(a, 0, "refill_objects");
		void *p = al_alloc(a, &c, size[i], 0);

		CHECK(p != NULL);
		CHECK_EQ(S(a, 0, "refill_objects") - before, cap[i]);
		CHECK_EQ(al_free(a, &c, p), 0);
	}
	t_teardown(a);
}

TEST(test_sheaves_script)
{
	struct al_allocator *a =
		t_spec("sheaves(capacity=4, barn_full=1, barn_empty=1) > slab(form=sheaves)", 1);
	struct al_ctx c;
	void *v[13];
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	/* 13 allocations: each empty main is swapped for a refilled sheaf; the
	 * empty one waits in the barn and is refilled next time. */
	for (i = 0; i < 13; i++)
		v[i] = al_alloc(a, &c, 64, 0);
	CHECK_EQ(S(a, 0, "refills"), 4);
	CHECK_EQ(S(a, 0, "refill_objects"), 16);
	CHECK_EQ(S(a, 0, "sheaf_allocs"), 1); /* each CPU's main exists from the start */
	CHECK_EQ(S(a, 0, "barn_get_fail"), 4);
	CHECK_EQ(S(a, 0, "barn_empty_get"), 3);
	CHECK_EQ(S(a, 0, "objects_cached"), 3);
	CHECK_EQ(S(a, 0, "barn_empty"), 1);
	CHECK_EQ(S(a, 1, "bulk_allocs"), 4);
	/* each refill after the first takes an empty sheaf from the barn and
	 * puts the empty main back: 1 + 3 x 2 barn lock acquisitions */
	CHECK_EQ(S(a, 0, "barn_lock_acquired"), 7);
	CHECK_EQ(S(a, 0, "barn_lock_contended"), 0);
	CHECK_EQ(S(a, 0, "barn_lock_owner_switches"), 0);
	/* 13 frees: main fills (f1), the barn's empty sheaf becomes main (f2),
	 * main and spare full: main goes to the barn for a new empty (f6), the
	 * barn is full: the full spare is flushed to the slab and reused (f10). */
	CHECK_EQ(al_free(a, &c, v[0]), 0);
	CHECK_EQ(al_free(a, &c, v[1]), 0);
	CHECK_EQ(S(a, 0, "barn_empty_get"), 4);
	CHECK_EQ(S(a, 0, "barn_empty"), 0);
	for (i = 2; i < 6; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "barn_put"), 1);
	CHECK_EQ(S(a, 0, "barn_full"), 1);
	CHECK_EQ(S(a, 0, "sheaf_allocs"), 2);
	for (i = 6; i < 10; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "barn_put_fail"), 1);
	CHECK_EQ(S(a, 0, "flushes"), 1);
	CHECK_EQ(S(a, 0, "flush_objects"), 4);
	CHECK_EQ(S(a, 1, "kfrees"), 4);
	for (i = 10; i < 13; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "free_fastpath"), 13);
	/* f2 empty from the barn, f6 no empty there then main put in: +3 */
	CHECK_EQ(S(a, 0, "barn_lock_acquired"), 10);
	CHECK_EQ(S(a, 0, "objects_cached"), 12); /* main 4, spare 4, barn 4 */
	CHECK_EQ(S(a, 1, "bytes_held"), 12 * 64);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_check(a);
	/* 9 allocations: main empties, the full spare is swapped in, then the
	 * empty main is exchanged for the barn's full sheaf. */
	for (i = 0; i < 9; i++)
		v[i] = al_alloc(a, &c, 64, 0);
	CHECK_EQ(S(a, 0, "spare_swaps"), 1);
	CHECK_EQ(S(a, 0, "barn_get"), 1);
	CHECK_EQ(S(a, 0, "refills"), 4); /* nothing new from the slab */
	CHECK_EQ(S(a, 0, "objects_cached"), 3);
	for (i = 0; i < 9; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	/* the barn's full sheaf (a9), then main for its empty one (f6) */
	CHECK_EQ(S(a, 0, "barn_lock_acquired"), 12);
	CHECK_EQ(S(a, 0, "barn_lock_wait_ns"), -1); /* times at stats=full only */
	t_check(a);
	t_teardown(a);
}

/* Fast-path allocations and frees count in one per-class slot; allocs,
 * frees, the fastpath counts, traced allocations and bytes follow. */
TEST(test_reported_counts)
{
	struct al_allocator *a = t_spec("sheaves > slab(form=sheaves)", 1);
	struct al_ctx c;
	void *v[5];
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 5; i++)
		v[i] = al_alloc(a, &c, 64, i < 3 ? 0 : AL_NOTRACE);
	CHECK_EQ(S(a, 0, "allocs"), 5);
	CHECK_EQ(S(a, 0, "alloc_fastpath"), 5);
	CHECK_EQ(S(a, 0, "alloc_fallback"), 0);
	CHECK_EQ(S(a, 0, "traced_kmallocs"), 3);
	CHECK_EQ(S(a, 0, "untraced_allocs"), 2);
	CHECK_EQ(S(a, 0, "bytes_allocated"), 5 * 64);
	CHECK_EQ(S(a, 0, "bytes_held"), 5 * 64);
	for (i = 0; i < 5; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "frees"), 5);
	CHECK_EQ(S(a, 0, "free_fastpath"), 5);
	CHECK_EQ(S(a, 0, "bytes_freed"), 5 * 64);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_teardown(a);
}

/* The same script over buddy at stats=lite and stats=off: the same
 * bytes_held in both layers (at off, the sheaves' is what buddy holds less
 * what the sheaves cache), and nothing else reported at off. */
static void held_script(unsigned level)
{
	unsigned old = al_stats_level_set(level);
	struct al_allocator *a = t_spec("sheaves(capacity=4) > buddy", 1);
	struct al_ctx c;
	void *v[6];
	unsigned i;

	al_stats_level_set(old);
	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 6; i++) /* a probe, then 5 of two refills of 4 */
		v[i] = al_alloc(a, &c, 96, 0);
	CHECK_EQ(S(a, 0, "bytes_held"), 6 * 128);
	CHECK_EQ(S(a, 1, "bytes_held"), 9 * 128);
	CHECK_EQ(S(a, 0, "allocs"), level == AL_STATS_OFF ? -1 : 6);
	for (i = 0; i < 3; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "bytes_held"), 3 * 128);
	CHECK_EQ(S(a, 1, "bytes_held"), 9 * 128);
	for (i = 3; i < 6; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_teardown(a);
}

TEST(test_bytes_held_at_every_level)
{
	held_script(AL_STATS_LITE);
	held_script(AL_STATS_OFF);
	held_script(AL_STATS_FULL);
}

/* kfree_nolock in an NMI that interrupts a free holding the per-CPU lock. */
static struct al_allocator *nested_a;
static void *nested_obj;
static int nested_ret;

static void nested_free_nmi(struct al_ctx *c, void *arg)
{
	struct al_ctx nmi;

	(void)arg;
	al_ctx_nested(&nmi, c, AL_CTX_NMI);
	nested_ret = al_free(nested_a, &nmi, nested_obj);
}

TEST(test_kfree_nolock_trylock_failure_defers)
{
	struct al_allocator *a = t_spec("nolock > sheaves > slab(form=sheaves)", 1);
	struct al_ctx c;
	void *p, *q;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 64, 0);
	q = al_alloc(a, &c, 64, 0);
	nested_a = a;
	nested_obj = q;
	t_inject_arm("sheaves.locked", nested_free_nmi);
	CHECK_EQ(al_free(a, &c, p), 0);
	t_inject_off();
	CHECK_EQ(t_inject_fired, 1);
	CHECK_EQ(nested_ret, 0);
	CHECK_EQ(S(a, 1, "lock_busy_frees"), 1);
	CHECK_EQ(S(a, 1, "nospin_fail"), 1);
	CHECK_EQ(S(a, 0, "frees_deferred"), 1);
	/* the outer free's end ran the irq_work: the slow path took it */
	CHECK_EQ(S(a, 0, "deferred_freed"), 1);
	CHECK_EQ(S(a, 0, "deferred_pending"), 0);
	CHECK_EQ(S(a, 1, "free_fallback"), 1);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_teardown(a);
}

/* ---- stress ---- */

#define NTHREADS 4
#define NOPS	 20000

static struct al_allocator *sa;
static int serrors;
static void *slots[64];

static void *worker(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg, i, k;
	uint64_t rng = 0xD1B54A32D192ED03ull * (id + 1);
	struct al_ctx c, nmi;
	void *p, *o;

	al_ctx_init(&c, id);
	al_ctx_nested(&nmi, &c, AL_CTX_NMI);
	for (i = 0; i < NOPS; i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		k = (unsigned)(rng >> 33);
		p = al_alloc(sa, (k & 7) ? &c : &nmi, 1 + k % 2048, 0);
		if (!p) {
			if (c.err != -EBUSY && nmi.err != -EBUSY)
				__atomic_fetch_add(&serrors, 1, __ATOMIC_RELAXED);
			continue;
		}
		memset(p, (int)k, 1 + k % 2048 < 8 ? 1 + k % 2048 : 8);
		o = __atomic_exchange_n(&slots[k % 64], p, __ATOMIC_ACQ_REL);
		if (o && al_free(sa, (k & 8) ? &c : &nmi, o))
			__atomic_fetch_add(&serrors, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

TEST(test_stress_nolock_sheaves)
{
	pthread_t th[NTHREADS];
	struct al_ctx c;
	unsigned i;

	sa = t_spec("nolock > sheaves(barn_full=2, barn_empty=2) > slab(form=sheaves)", NTHREADS);
	CHECK(sa != NULL);
	if (!sa)
		return;
	for (i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
	for (i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	al_ctx_init(&c, 0);
	for (i = 0; i < 64; i++)
		if (slots[i])
			CHECK_EQ(al_free(sa, &c, slots[i]), 0);
	CHECK_EQ(serrors, 0);
	t_teardown(sa);
}

/*
 * Over buddy a kmalloc-96 request gets a 128-byte block: the first one goes
 * below and learns it; later 96-byte requests use the 128 sheaves, and every
 * free counts the bytes its allocation counted (found by the stress tests:
 * bytes_held went negative).
 */
TEST(test_class_learnt_over_buddy)
{
	struct al_allocator *a = t_spec("sheaves(capacity=4) > buddy", 1);
	struct al_ctx c;
	void *v[6];
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 6; i++)
		v[i] = al_alloc(a, &c, 96, 0);
	CHECK_EQ(S(a, 0, "class_probes"), 1);
	CHECK_EQ(S(a, 0, "alloc_fallback"), 1);
	CHECK_EQ(S(a, 0, "refills"), 2); /* 4 + 4 objects of class 128 */
	CHECK_EQ(S(a, 0, "bytes_held"), 6 * 128);
	CHECK_EQ((long long)al_call_usable_size(a, v[0]), 128);
	t_check(a);
	for (i = 0; i < 6; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	v[0] = al_alloc(a, &c, 128, 0); /* class 128 is its own: no second probe */
	CHECK_EQ(S(a, 0, "class_probes"), 1);
	CHECK_EQ(S(a, 0, "bytes_held"), 128);
	CHECK_EQ(al_free(a, &c, v[0]), 0);
	t_check(a);
	t_teardown(a);
}

/* Over libc an 8 KiB request gets a chunk beyond the classes: uncached,
 * counted by its usable size both ways. (Under ASan, malloc_usable_size is
 * the requested size: then the class is cached like any other.) */
TEST(test_uncached_over_libc)
{
	struct al_allocator *a = t_spec("sheaves > libc", 1);
	struct al_ctx c;
	long long up, uq;
	bool beyond;
	void *p, *q;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 8192, 0);
	q = al_alloc(a, &c, 8000, 0);
	CHECK(p != NULL && q != NULL);
	up = (long long)al_call_usable_size(a, p);
	uq = (long long)al_call_usable_size(a, q);
	beyond = up > 8192;
	CHECK_EQ(S(a, 0, "class_probes"), 1);
	CHECK_EQ(S(a, 0, "uncached"), beyond ? 2 : 0);
	CHECK_EQ(S(a, 0, "bytes_held"), beyond ? up + uq : 2 * 8192);
	CHECK_EQ(uq, beyond ? uq : 8192);
	CHECK_EQ(al_free(a, &c, p), 0);
	CHECK_EQ(al_free(a, &c, q), 0);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_check(a);
	t_teardown(a);
}

int main(void)
{
	RUN(test_capacity_by_size);
	RUN(test_sheaves_script);
	RUN(test_kfree_nolock_trylock_failure_defers);
	RUN(test_stress_nolock_sheaves);
	RUN(test_class_learnt_over_buddy);
	RUN(test_uncached_over_libc);
	RUN(test_reported_counts);
	RUN(test_bytes_held_at_every_level);
	return TEST_SUMMARY();
}
