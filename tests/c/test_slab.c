/* SPDX-License-Identifier: MIT */
/*
 * slab and nolock: exact counters for scripted single-thread sequences (CPU
 * slab fast and slow paths, remote frees into a frozen slab, partial lists
 * and min_partial, the sheaves form), kmalloc_nolock's retry in the next
 * size class and kfree_nolock's deferral driven deterministically through
 * fault injection (a nested NMI at the instant the local lock is held), and
 * a multi-thread stress with cross-CPU frees and signal-handler ("NMI")
 * allocations, run under ASan and TSan by CI.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include "t_spec.h"

#define S(a, l, name) t_stat((a), (l), (name))

TEST(test_size_classes)
{
	struct al_allocator *a = t_spec("slab", 1);
	static const size_t req[] = { 1,   8,	9,   16,  33,  64,   65,   96,	 97,   128,
				      129, 192, 193, 256, 257, 1024, 1025, 4096, 4097, 8192 };
	static const size_t cls[] = { 8,   8,	16,  16,  64,  64,   96,   96,	 128,  128,
				      192, 192, 256, 256, 512, 1024, 2048, 4096, 8192, 8192 };
	struct al_ctx c;
	void *p;
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
		p = al_alloc(a, &c, req[i], 0);
		CHECK(p != NULL);
		CHECK_EQ(al_call_usable_size(a, p), cls[i]);
		CHECK_EQ(al_free(a, &c, p), 0);
	}
	CHECK(al_alloc(a, &c, 8193, 0) == NULL);
	CHECK_EQ(c.err, -EINVAL);
	CHECK(al_alloc(a, &c, 0, 0) == NULL);
	CHECK_EQ(S(a, 0, "einval"), 2);
	t_teardown(a);
}

TEST(test_cpu_slab_exact)
{
	struct al_allocator *a = t_spec("slab(cpu_partial=false)", 1);
	struct al_ctx c;
	void *v[65];
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	/* kmalloc-64: 64 objects per 4 KiB slab */
	v[0] = al_alloc(a, &c, 64, 0);
	CHECK_EQ(S(a, 0, "alloc_slowpath"), 1);
	CHECK_EQ(S(a, 0, "slab_allocs"), 1);
	CHECK_EQ(S(a, 0, "list_lock_acquired"), 0);
	for (i = 1; i < 64; i++)
		v[i] = al_alloc(a, &c, 64, 0);
	CHECK_EQ(S(a, 0, "alloc_fastpath"), 63);
	v[64] = al_alloc(a, &c, 64, 0); /* CPU slab exhausted: a new one */
	CHECK_EQ(S(a, 0, "alloc_slowpath"), 2);
	CHECK_EQ(S(a, 0, "slab_allocs"), 2);
	CHECK_EQ(S(a, 0, "deactivations"), 1);
	CHECK_EQ(al_free(a, &c, v[64]), 0); /* in the CPU slab */
	CHECK_EQ(S(a, 0, "free_fastpath"), 1);
	CHECK_EQ(al_free(a, &c, v[0]), 0); /* full slab -> partial: list_lock */
	CHECK_EQ(S(a, 0, "free_slowpath"), 1);
	CHECK_EQ(S(a, 0, "list_lock_acquired"), 1);
	CHECK_EQ(S(a, 0, "partial_slabs"), 1);
	for (i = 1; i < 63; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "list_lock_acquired"), 1); /* partial stays partial: lockless */
	CHECK_EQ(al_free(a, &c, v[63]), 0);	    /* empty, fewer than min_partial kept */
	CHECK_EQ(S(a, 0, "list_lock_acquired"), 2);
	CHECK_EQ(S(a, 0, "slab_frees"), 0);
	CHECK_EQ(S(a, 0, "kmallocs"), 65);
	CHECK_EQ(S(a, 0, "traced_kmallocs"), 65);
	CHECK_EQ(S(a, 0, "kfrees"), 65);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_check(a);
	t_teardown(a);
}

TEST(test_min_partial_discards)
{
	struct al_allocator *a = t_spec("slab(cpu_partial=false)", 1);
	struct al_ctx c;
	static void *v[7 * 64];
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 7 * 64; i++)
		v[i] = al_alloc(a, &c, 64, 0);
	CHECK_EQ(S(a, 0, "slab_allocs"), 7);
	/* Slabs 1..6 empty in order; min_partial is 5 for kmalloc-64: the fifth
	 * and sixth find 5 partial slabs (themselves included) and go. */
	for (i = 0; i < 6 * 64; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "slab_frees"), 2);
	CHECK_EQ(S(a, 0, "partial_slabs"), 4);
	CHECK_EQ(S(a, 0, "slabs"), 5);
	for (; i < 7 * 64; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "free_fastpath"), 64);
	t_check(a);
	t_teardown(a);
}

/* Per-CPU partial slabs: a full slab made partial by a free goes on the
 * freeing CPU's list without list_lock, the next CPU slab comes from there,
 * and a list already at its limit (kmalloc-64: ceil(2 * 120 / 64) = 4 slabs)
 * moves whole to the node list under one list_lock hold. */
TEST(test_cpu_partial_exact)
{
	struct al_allocator *a = t_spec("slab", 2);
	struct al_ctx c, c1;
	static void *v[129 + 6 * 64];
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	al_ctx_init(&c1, 1);
	for (i = 0; i < 65; i++)
		v[i] = al_alloc(a, &c, 64, 0);
	CHECK_EQ(al_free(a, &c, v[0]), 0); /* full -> this CPU's partial list */
	CHECK_EQ(S(a, 0, "cpu_partial_free"), 1);
	CHECK_EQ(S(a, 0, "list_lock_acquired"), 0);
	CHECK_EQ(S(a, 0, "partial_slabs"), 0);
	for (i = 65; i < 128; i++) /* the rest of the CPU slab */
		v[i] = al_alloc(a, &c, 64, 0);
	v[128] = al_alloc(a, &c, 64, 0); /* the CPU partial slab becomes the CPU slab */
	CHECK_EQ(S(a, 0, "cpu_partial_alloc"), 1);
	CHECK_EQ(S(a, 0, "slab_allocs"), 2);
	CHECK_EQ(S(a, 0, "list_lock_acquired"), 0);
	CHECK(v[128] == v[0]);
	/* five full slabs made partial by CPU 1's frees: the fifth finds CPU
	 * 1's list at 4 and moves it to the node list (one list_lock) */
	for (i = 129; i < 129 + 6 * 64; i++) /* five full slabs and the CPU slab */
		v[i] = al_alloc(a, &c, 64, 0);
	for (i = 0; i < 5; i++)
		CHECK_EQ(al_free(a, &c1, v[129 + 64 * i]), 0);
	CHECK_EQ(S(a, 0, "cpu_partial_free"), 6);
	CHECK_EQ(S(a, 0, "cpu_partial_drain"), 1);
	CHECK_EQ(S(a, 0, "list_lock_acquired"), 1);
	CHECK_EQ(S(a, 0, "partial_slabs"), 4);
	t_check(a);
	for (i = 1; i < 129 + 6 * 64; i++)
		if (i < 129 || (i - 129) % 64 || i >= 129 + 5 * 64)
			CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_check(a);
	t_teardown(a);
}

TEST(test_remote_free_into_frozen_slab)
{
	struct al_allocator *a = t_spec("slab", 2);
	struct al_ctx c0, c1;
	void *v[64], *p;
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c0, 0);
	al_ctx_init(&c1, 1);
	v[0] = al_alloc(a, &c0, 64, 0);
	v[1] = al_alloc(a, &c0, 64, 0);
	CHECK_EQ(al_free(a, &c1, v[1]), 0); /* CPU 1 frees into CPU 0's slab */
	CHECK_EQ(S(a, 0, "free_frozen"), 1);
	CHECK_EQ(S(a, 0, "list_lock_acquired"), 0);
	for (i = 1; i < 63; i++) /* the 62 left on CPU 0's freelist */
		v[i] = al_alloc(a, &c0, 64, 0);
	CHECK_EQ(S(a, 0, "alloc_fastpath"), 63);
	p = al_alloc(a, &c0, 64, 0); /* takes the remote free back: get_freelist */
	CHECK_EQ(S(a, 0, "get_freelist"), 1);
	CHECK_EQ(S(a, 0, "slab_allocs"), 1);
	CHECK(p != NULL);
	v[63] = p;
	for (i = 0; i < 64; i++)
		CHECK_EQ(al_free(a, &c1, v[i]), 0);
	t_check(a);
	t_teardown(a);
}

TEST(test_sheaves_form_bulk)
{
	struct al_allocator *a = t_spec("slab(form=sheaves)", 1);
	struct al_ctx c;
	void *v[100];
	int n;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	n = al_alloc_bulk(a, &c, 64, 100, v, 0); /* 64 from one slab, 36 from a second */
	CHECK_EQ(n, 100);
	CHECK_EQ(S(a, 0, "slab_allocs"), 2);
	CHECK_EQ(S(a, 0, "alloc_partial"), 100);
	CHECK_EQ(S(a, 0, "partial_slabs"), 1);
	CHECK_EQ(al_free_bulk(a, &c, v, 100), 100);
	CHECK_EQ(S(a, 0, "bulk_frees"), 1);
	CHECK_EQ(S(a, 0, "kfrees"), 100);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_check(a);
	t_teardown(a);
}

TEST(test_kzalloc_and_invalid_frees)
{
	struct al_allocator *a = t_spec("slab(zero=true)", 1);
	struct al_ctx c;
	unsigned char *p;
	unsigned i, nz = 0;
	int x;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 192, 0);
	memset(p, 0xAB, 192);
	CHECK_EQ(al_free(a, &c, p), 0);
	p = al_alloc(a, &c, 192, 0); /* the same object, zeroed */
	for (i = 0; i < 192; i++)
		nz += p[i] != 0;
	CHECK_EQ(nz, 0);
	CHECK_EQ(al_free(a, &c, p + 8), -EINVAL); /* not an object start */
	CHECK_EQ(al_free(a, &c, &x), -EINVAL);	  /* not ours */
	CHECK_EQ(S(a, 0, "invalid_frees"), 2);
	CHECK_EQ(al_free(a, &c, p), 0);
	t_teardown(a);
}

/* The cpu_slab form's bulk calls and single calls by path: every object is
 * counted once under its class (kmallocs, bytes), the tracepoint sees single
 * allocations without AL_NOTRACE only, and a free_bulk chain pushed onto the
 * CPU freelist is one fast-path free, as a single free is. */
TEST(test_cpu_slab_counts_by_path)
{
	struct al_allocator *a = t_spec("slab", 1);
	struct al_ctx c;
	void *v[10], *p, *q;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	CHECK_EQ(al_alloc_bulk(a, &c, 64, 10, v, 0), 10);
	CHECK_EQ(S(a, 0, "bulk_allocs"), 1);
	CHECK_EQ(S(a, 0, "kmallocs"), 10);
	CHECK_EQ(S(a, 0, "traced_kmallocs"), 0);
	CHECK_EQ(S(a, 0, "bytes_allocated"), 10 * 64);
	p = al_alloc(a, &c, 100, 0);	      /* kmalloc-128: a new CPU slab */
	q = al_alloc(a, &c, 100, AL_NOTRACE); /* kmalloc_nolock's: not traced */
	CHECK_EQ(S(a, 0, "alloc_slowpath"), 1);
	CHECK_EQ(S(a, 0, "alloc_fastpath"), 1);
	CHECK_EQ(S(a, 0, "kmallocs"), 12);
	CHECK_EQ(S(a, 0, "traced_kmallocs"), 1);
	CHECK_EQ(S(a, 0, "untraced_kmallocs"), 1);
	CHECK_EQ(S(a, 0, "bytes_allocated"), 10 * 64 + 2 * 128);
	CHECK_EQ(S(a, 0, "bytes_held"), 10 * 64 + 2 * 128);
	t_check(a); /* the slabs' objects in use match bytes_held */
	/* two slabs, each from the page source under page_lock; no partial list */
	CHECK_EQ(S(a, 0, "page_lock_acquired"), 2);
	CHECK_EQ(S(a, 0, "page_lock_contended"), 0);
	CHECK_EQ(S(a, 0, "list_lock_acquired"), 0);
	CHECK_EQ(al_free_bulk(a, &c, v, 10), 10); /* one chain, the CPU slab's */
	CHECK_EQ(S(a, 0, "free_fastpath"), 1);
	CHECK_EQ(S(a, 0, "kfrees"), 10);
	CHECK_EQ(S(a, 0, "bytes_freed"), 10 * 64);
	CHECK_EQ(al_free(a, &c, p), 0);
	CHECK_EQ(al_free(a, &c, q), 0);
	CHECK_EQ(S(a, 0, "free_fastpath"), 3);
	CHECK_EQ(S(a, 0, "free_slowpath"), 0);
	CHECK_EQ(S(a, 0, "kfrees"), 12);
	CHECK_EQ(S(a, 0, "bytes_freed"), 10 * 64 + 2 * 128);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_teardown(a);
}

/* Lock times are measured and reported at stats=full only; counts at both. */
TEST(test_lock_times_at_full_only)
{
	unsigned old, level;

	for (level = AL_STATS_LITE; level < AL_STATS_NR; level++) {
		struct al_allocator *a;
		struct al_ctx c;
		void *p;

		if (level == AL_STATS_OFF)
			continue;
		old = al_stats_level_set(level);
		a = t_spec("slab(form=sheaves)", 1);
		al_stats_level_set(old);
		CHECK(a != NULL);
		if (!a)
			return;
		al_ctx_init(&c, 0);
		p = al_alloc(a, &c, 64, 0); /* list_lock twice: take, put back */
		CHECK(p != NULL);
		CHECK_EQ(al_free(a, &c, p), 0);
		CHECK(S(a, 0, "list_lock_acquired") > 0);
		CHECK_EQ(S(a, 0, "page_lock_acquired"), 1);
		CHECK_EQ(S(a, 0, "list_lock_hold_ns") >= 0, level == AL_STATS_FULL);
		CHECK_EQ(S(a, 0, "page_lock_wait_ns") >= 0, level == AL_STATS_FULL);
		t_teardown(a);
	}
}

/* At stats=off nothing is reported, but bytes_held stays exact (the leak
 * check) and check() still compares the slabs with it: every layer of this
 * group, with objects of several classes live. */
TEST(test_stats_off_keeps_bytes_held)
{
	static const struct {
		const char *spec;
		size_t hdr; /* bytes a layer keeps per object beyond the usable size */
	} st[] = {
		{ "slab", 0 },
		{ "slab(form=sheaves)", 0 },
		{ "nolock > slab", 0 },
		{ "nolock > sheaves > slab(form=sheaves)", 0 },
		{ "bpf_ma > slab", 8 },
		{ "bpf_ma(mode=fixed) > slab", 8 },
		{ "failnth(nth=3) > slab", 0 },
		{ "libc", 0 },
	};
	static const size_t sizes[] = { 8, 64, 100, 1000, 4000 };
	unsigned i, k;

	for (i = 0; i < sizeof(st) / sizeof(st[0]); i++) {
		unsigned old = al_stats_level_set(AL_STATS_OFF);
		struct al_allocator *a = t_spec(st[i].spec, 1);
		struct al_stats out[AL_MAX_LAYERS];
		void *v[sizeof(sizes) / sizeof(sizes[0])];
		long long held = 0;
		struct al_ctx c;

		al_stats_level_set(old);
		CHECK(a != NULL);
		if (!a)
			continue;
		al_ctx_init(&c, 0);
		for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
			v[k] = al_alloc(a, &c, sizes[k], 0);
			if (!v[k]) /* failnth: its third call fails */
				v[k] = al_alloc(a, &c, sizes[k], 0);
			CHECK(v[k] != NULL);
			held += (long long)(al_call_usable_size(a, v[k]) + st[i].hdr);
		}
		CHECK_EQ(S(a, 0, "bytes_held"), held);
		CHECK(al_stack_stats(a, out, AL_MAX_LAYERS) >= 1);
		CHECK_EQ(out[0].n, 0);
		t_check(a);
		for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
			int ret = al_free(a, &c, v[k]);

			CHECK_EQ(ret ? al_free(a, &c, v[k]) : 0, 0); /* failnth fails one */
		}
		if (t_failed_checks)
			fprintf(stderr, "     at stats=off: %s\n", st[i].spec);
		t_teardown(a);
	}
}

/* ---- kmalloc_nolock ---- */

static struct al_allocator *nested_a;
static void *nested_p;
static int nested_err;
static size_t nested_size;

static void nested_alloc_nmi(struct al_ctx *c, void *arg)
{
	struct al_ctx nmi;

	(void)arg;
	al_ctx_nested(&nmi, c, AL_CTX_NMI);
	nested_p = al_alloc(nested_a, &nmi, nested_size, 0);
	nested_err = nmi.err;
}

TEST(test_nolock_retries_next_class)
{
	struct al_allocator *a = t_spec("nolock > slab", 1);
	struct al_ctx c;
	void *p;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	/* An NMI arrives while the task-level kmalloc_nolock(64) holds
	 * kmalloc-64's local lock in ___slab_alloc: the nested call skips that
	 * bucket (-EBUSY) and retries once in kmalloc-96. */
	nested_a = a;
	nested_size = 64;
	t_inject_arm("slab.cpu_locked", nested_alloc_nmi);
	p = al_alloc(a, &c, 64, 0);
	t_inject_off();
	CHECK(p != NULL);
	CHECK_EQ(t_inject_fired, 1);
	CHECK(nested_p != NULL);
	CHECK_EQ(al_call_usable_size(a, nested_p), 96);
	CHECK_EQ(S(a, 0, "retries"), 1);
	CHECK_EQ(S(a, 0, "retry_ok"), 1);
	CHECK_EQ(S(a, 0, "alloc_failed"), 0);
	CHECK_EQ(S(a, 1, "nospin_busy"), 1);
	CHECK_EQ(S(a, 1, "traced_kmallocs"), 0); /* kmalloc_nolock: no tracepoint */
	CHECK_EQ(al_free(a, &c, nested_p), 0);
	CHECK_EQ(al_free(a, &c, p), 0);
	t_teardown(a);
}

TEST(test_kmalloc_in_nmi_with_lock_held_fails)
{
	struct al_allocator *a = t_spec("slab", 1);
	struct al_ctx c;
	void *p;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	nested_a = a;
	nested_size = 64;
	t_inject_arm("slab.cpu_locked", nested_alloc_nmi);
	p = al_alloc(a, &c, 64, 0);
	t_inject_off();
	CHECK(p != NULL);
	CHECK(nested_p == NULL); /* plain kmalloc cannot spin on its own CPU's lock */
	CHECK_EQ(nested_err, -EDEADLK);
	CHECK_EQ(S(a, 0, "nmi_deadlock"), 1);
	CHECK_EQ(al_free(a, &c, p), 0);
	t_teardown(a);
}

TEST(test_kfree_nolock_defers_remote_slab)
{
	struct al_allocator *a = t_spec("nolock > slab", 1);
	struct al_ctx c, irq;
	void *v[65];
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	al_ctx_nested(&irq, &c, AL_CTX_IRQ);
	for (i = 0; i < 65; i++)
		v[i] = al_alloc(a, &c, 64, 0);
	/* v[0] is in the first slab, no longer the CPU slab: 6.18 defers it. At
	 * IRQ level the irq_work cannot run yet: it stays on the list. */
	CHECK_EQ(al_free(a, &irq, v[0]), 0);
	CHECK_EQ(S(a, 0, "frees_deferred"), 1);
	CHECK_EQ(S(a, 0, "deferred_pending"), 1);
	CHECK_EQ(S(a, 0, "irq_work_queued"), 1);
	CHECK_EQ(S(a, 1, "kfrees"), 0);
	/* v[64] is in the CPU slab: freed at once, at task level, and the
	 * operation's end runs the irq_work (free_deferred_objects). */
	CHECK_EQ(al_free(a, &c, v[64]), 0);
	CHECK_EQ(S(a, 0, "frees_direct"), 1);
	CHECK_EQ(S(a, 0, "deferred_freed"), 1);
	CHECK_EQ(S(a, 0, "deferred_pending"), 0);
	CHECK_EQ(S(a, 1, "kfrees"), 2);
	CHECK_EQ(S(a, 1, "free_slowpath"), 1);
	/* the rest deferred at IRQ level, then drained */
	for (i = 1; i < 64; i++)
		CHECK_EQ(al_free(a, &irq, v[i]), 0);
	CHECK_EQ(S(a, 0, "deferred_pending"), 63);
	CHECK_EQ(S(a, 0, "irq_work_queued"), 2); /* queued once: it was pending */
	CHECK_EQ(S(a, 1, "bytes_held"), 63 * 64);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_teardown(a); /* the drain runs it: nothing lost */
}

/* ---- stress: cross-CPU frees and NMI allocations in signal handlers ---- */

#define NTHREADS 4
#define NSLOTS	 64
#define NOPS	 20000

struct stress {
	struct al_allocator *a; /* stack under test */
	bool nmi_safe;		/* the handler may allocate */
	void *slots[NSLOTS];	/* handoff: objects freed by another CPU */
	int stop;		/* the signaller stops */
	int errors;		/* pattern or API failures */
	uint64_t nmi_allocs;	/* handler allocations that succeeded */
	pthread_t th[NTHREADS]; /* workers */
};

static struct stress st;

static void fill(void *p, size_t n, unsigned seed)
{
	memset(p, (int)(seed & 0xff), n);
}

static bool verify(const void *p, size_t n, unsigned seed)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i] != (unsigned char)seed)
			return false;
	return true;
}

static void on_nmi(int sig)
{
	struct al_ctx *cur = al_ctx_current(), nmi;
	unsigned char *p;

	(void)sig;
	if (!cur || !st.nmi_safe)
		return;
	al_ctx_nested(&nmi, cur, AL_CTX_NMI);
	p = al_alloc(st.a, &nmi, 48, 0);
	if (!p)
		return; /* allowed: a trylock failed or the cache is busy */
	fill(p, 48, 0x5a);
	if (!verify(p, 48, 0x5a))
		__atomic_fetch_add(&st.errors, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&st.nmi_allocs, 1, __ATOMIC_RELAXED);
	if (al_free(st.a, &nmi, p))
		__atomic_fetch_add(&st.errors, 1, __ATOMIC_RELAXED);
}

struct held {
	void *p;
	size_t n;
	unsigned seed;
};

static void *stress_worker(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg, i, k;
	uint64_t rng = 0x9E3779B97F4A7C15ull * (id + 1);
	static __thread struct held h[32];
	struct al_ctx c;
	unsigned nh = 0;

	al_ctx_init(&c, id);
	al_ctx_set_current(&c);
	for (i = 0; i < NOPS; i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		k = (unsigned)(rng >> 40);
		if (nh < 32 && (k & 1)) {
			size_t n = 1 + (rng >> 20) % 1024;
			void *p = al_alloc(st.a, &c, n, (k & 2) ? AL_ZERO : 0);

			if (!p) {
				if (c.err != -EBUSY && c.err != -ENOMEM)
					__atomic_fetch_add(&st.errors, 1, __ATOMIC_RELAXED);
				continue;
			}
			h[nh].p = p;
			h[nh].n = n;
			h[nh].seed = k >> 8;
			fill(p, n, h[nh].seed);
			nh++;
		} else if (nh) {
			struct held x = h[--nh];
			void *other;

			if (!verify(x.p, x.n, x.seed))
				__atomic_fetch_add(&st.errors, 1, __ATOMIC_RELAXED);
			/* swap with the handoff slot: free what another CPU left */
			other = __atomic_exchange_n(&st.slots[k % NSLOTS], x.p, __ATOMIC_ACQ_REL);
			if (other && al_free(st.a, &c, other))
				__atomic_fetch_add(&st.errors, 1, __ATOMIC_RELAXED);
		}
	}
	while (nh--)
		if (al_free(st.a, &c, h[nh].p))
			__atomic_fetch_add(&st.errors, 1, __ATOMIC_RELAXED);
	al_ctx_set_current(NULL);
	return NULL;
}

static void stress(const char *spec, bool nmi_safe)
{
	struct sigaction sa;
	struct al_ctx c;
	unsigned i, rounds = 0;
	int done;

	memset(&st, 0, sizeof(st));
	st.a = t_spec(spec, NTHREADS);
	CHECK(st.a != NULL);
	if (!st.a)
		return;
	st.nmi_safe = nmi_safe;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_nmi;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	for (i = 0; i < NTHREADS; i++)
		pthread_create(&st.th[i], NULL, stress_worker, (void *)(uintptr_t)i);
	/* The "NMI" source: signal workers while they run (until all joined). */
	for (done = 0; done < NTHREADS;) {
		for (i = done; i < NTHREADS && rounds < 2000; i++)
			pthread_kill(st.th[i], SIGUSR1);
		rounds++;
		if (rounds >= 2000 || !(rounds % 64)) {
			pthread_join(st.th[done], NULL);
			done++;
		}
	}
	signal(SIGUSR1, SIG_IGN);
	al_ctx_init(&c, 0);
	for (i = 0; i < NSLOTS; i++)
		if (st.slots[i])
			CHECK_EQ(al_free(st.a, &c, st.slots[i]), 0);
	CHECK_EQ(st.errors, 0);
	printf("     %s: %llu allocations in signal handlers\n", spec,
	       (unsigned long long)st.nmi_allocs);
	t_teardown(st.a);
}

TEST(test_stress_slab)
{
	stress("slab", false);
}

TEST(test_stress_slab_sheaves_form)
{
	stress("slab(form=sheaves)", false);
}

TEST(test_stress_nolock_nmi)
{
	stress("nolock > slab", true);
}

TEST(test_stress_nolock_thread_irq_work)
{
	stress("nolock(irq_work=thread) > slab", true);
}

int main(void)
{
	RUN(test_size_classes);
	RUN(test_cpu_slab_exact);
	RUN(test_min_partial_discards);
	RUN(test_cpu_partial_exact);
	RUN(test_remote_free_into_frozen_slab);
	RUN(test_sheaves_form_bulk);
	RUN(test_kzalloc_and_invalid_frees);
	RUN(test_cpu_slab_counts_by_path);
	RUN(test_lock_times_at_full_only);
	RUN(test_stats_off_keeps_bytes_held);
	RUN(test_nolock_retries_next_class);
	RUN(test_kmalloc_in_nmi_with_lock_held_fails);
	RUN(test_kfree_nolock_defers_remote_slab);
	RUN(test_stress_slab);
	RUN(test_stress_slab_sheaves_form);
	RUN(test_stress_nolock_nmi);
	RUN(test_stress_nolock_thread_irq_work);
	return TEST_SUMMARY();
}
