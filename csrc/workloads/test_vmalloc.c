/* SPDX-License-Identifier: MIT */
/*
 * test_vmalloc: the kernel's lib/test_vmalloc.c (reference §6.5), run on a
 * policy whose top layer is `vmalloc` (e.g. vmalloc-default).
 *
 * Tests (bit: name), with the kernel's names, bits and parameters:
 *     1 fix_size_alloc_test            vmalloc(nr_pages) or vmalloc_huge, write, vfree
 *     2 full_fit_alloc_test            fls(CPUs) * 8192 pairs of 1-page areas, every
 *                                      other freed, then 1-page areas into the holes
 *     4 long_busy_list_alloc_test      15000 live 1-page areas, then 100 + 1 pages
 *     8 random_size_alloc_test         1..100 pages
 *    16 fix_align_alloc_test           5 pages aligned to THREAD_ALIGN << 1, zeroed
 *    32 random_size_align_alloc_test   1..10 pages aligned to 1 << (rnd % 23), zeroed
 *    64 align_shift_alloc_test         1 page aligned to 1 << 0..63: expected to fail
 *                                      (xfail) once the alignment exceeds the space
 *   128 pcpu_alloc_test                nr_pcpu_objects __alloc_percpu(1..1024 bytes,
 *                                      align 2..2048), then free_percpu (one pass)
 *   256 kvfree_rcu_1_arg_vmalloc_test  vmalloc 1 page, write, kvfree_rcu(p)
 *   512 kvfree_rcu_2_arg_vmalloc_test  the same with kvfree_rcu(p, rcu)
 *  1024 vm_map_ram_test                nr_pages pages mapped, written and unmapped
 * run_test_mask picks them (default 7, as the newest kernel; v6.4: all).
 * "zeroed" is the kernel's __GFP_ZERO; zero=false leaves it out, to see
 * what zeroing costs.
 * Every "write" goes through the simulated page table to the page's memory
 * (al_vmalloc_write), as the kernel's store goes through the MMU; pointer
 * arrays the kernel keeps in vmalloc'ed memory are vmalloc'ed (the cost) but
 * kept in host memory.
 *
 * Harness, as the kernel's: each worker (one per producer; nr_threads must
 * be 0 or equal the producers) shuffles its test order unless
 * sequential_test_order, then for each selected test takes the time, calls
 * the test function test_repeat_count times counting passed / failed /
 * xfailed, and reports avg = elapsed / repeat in usec: the wall time of ONE
 * call of the test function (a whole test_loop_count loop), not of one
 * allocation. One engine cycle = one such worker run (one insmod).
 *
 * Results, as workload metrics (Python: "wl.<name>"): <test>.avg_usec (mean
 * over cycles and workers), <test>.passed / .failed / .xfailed (sums),
 * all_tests_usec (a worker run, mean). Engine figures: timing=batch puts
 * each test's time in alloc_ns with one "op" per loop iteration (the
 * kernel's avg / loops; free_ns is not measured); timing=per_op_sum times
 * every vmalloc-family call into alloc_ns and every free the test thread
 * makes into free_ns (the clock pairs then also count in avg_usec;
 * kvfree_rcu's frees are the kworker's, not timed).
 *
 * Models of what test_vmalloc calls beyond vmalloc:
 *  - kvfree_rcu: pointers are queued per worker in pages of 510 (one
 *    kvfree_rcu_bulk_data page); a full page, and a test's last partial
 *    one, goes to one shared kworker thread (kfree_rcu_monitor's work) that
 *    vfree's it on the vmalloc layer's kworker CPU (al_vmalloc_kworker_cpu:
 *    its own per-CPU lists, so the pages land on another CPU's PCP, as an
 *    unbound kworker's do), outside the test thread's time. The grace period
 *    itself is not waited for (nothing reads the areas after kvfree_rcu).
 *    The harness waits for the kworker to go idle after it took a test's
 *    end time (kvfree_rcu_barrier), so no page outlives a test. Hand-off and
 *    wait use a mutex and condition variables, never a sleep; teardown
 *    stops the thread after it has freed everything queued.
 *  - __alloc_percpu: a global allocator (one lock) of chunks of 16 pages per
 *    CPU, populated with order-0 pages (alloc_pages per page, as
 *    pcpu_alloc_pages) mapped by vm_map_ram; objects are carved in order
 *    and zeroed in every CPU's unit through the page table; a chunk is freed
 *    when its last object is (the current one at the end of the test).
 * Nothing outlives a test function: no page is held between tests.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloclab/alloclab.h"
#include "../core/cpu.h"

enum {
	P_run_test_mask,
	P_nr_threads,
	P_test_loop_count,
	P_test_repeat_count,
	P_nr_pages,
	P_use_huge,
	P_sequential_test_order,
	P_nr_pcpu_objects,
	P_zero,
	P_NR
};

static const struct al_param_desc tv_params[P_NR] = {
	[P_run_test_mask] = { "run_test_mask", AL_PARAM_INT, 7, 1, 2047, NULL,
			      "tests to run, a bit each (1 fix_size ... 1024 vm_map_ram)" },
	[P_nr_threads] = { "nr_threads", AL_PARAM_INT, 0, 0, AL_MAX_PRODUCERS, NULL,
			   "worker threads: 0 = producers (it must equal producers otherwise)" },
	[P_test_loop_count] = { "test_loop_count", AL_PARAM_INT, 10000, 1, 100000000, NULL,
				"iterations inside a test function (the kernel's default is "
				"1000000)" },
	[P_test_repeat_count] = { "test_repeat_count", AL_PARAM_INT, 1, 1, 1000000, NULL,
				  "calls of each test function per run" },
	[P_nr_pages] = { "nr_pages", AL_PARAM_INT, 0, 0, 1 << 20, NULL,
			 "pages for fix_size_alloc_test and vm_map_ram_test (0 means 1)" },
	[P_use_huge] = { "use_huge", AL_PARAM_BOOL, 0, 0, 1, NULL,
			 "fix_size_alloc_test uses vmalloc_huge" },
	[P_sequential_test_order] = { "sequential_test_order", AL_PARAM_BOOL, 0, 0, 1, NULL,
				      "run the tests in bit order (else each worker shuffles)" },
	[P_nr_pcpu_objects] = { "nr_pcpu_objects", AL_PARAM_INT, 35000, 1, 10000000, NULL,
				"objects pcpu_alloc_test allocates" },
	[P_zero] = { "zero", AL_PARAM_BOOL, 1, 0, 1, NULL,
		     "the __GFP_ZERO of fix_align, random_size_align and align_shift, as the "
		     "kernel's tests pass it (false: their pages are not zeroed, to see what "
		     "zeroing costs)" },
};

#define KVFREE_BATCH	510   /* pointers per kvfree_rcu_bulk_data page */
#define LONG_BUSY	15000 /* long_busy_list_alloc_test's live areas */
#define PCPU_UNIT_PAGES 16    /* pages per CPU per percpu chunk */
#define PCPU_UNIT	(PCPU_UNIT_PAGES * AL_PAGE_SIZE)
#define THREAD_ALIGN_2X (32u << 10) /* THREAD_ALIGN << 1 on x86-64 */
#define RCU_HEAD_BYTES	16	    /* struct rcu_head before the test's array */
#define PCPU_SLAB	64	    /* chunk records per metadata mapping */

/* A percpu chunk: ncpu units of PCPU_UNIT bytes, mapped contiguously. */
struct pcpu_chunk {
	struct pcpu_chunk *next; /* free records */
	char *base;		 /* vm_map_ram'ed address */
	size_t off;		 /* next free byte in a unit */
	unsigned live;		 /* objects not freed */
	unsigned npages;	 /* pages in pfns[] */
	uint64_t pfns[];	 /* the chunk's pages */
};

struct pcpu_slab {
	struct pcpu_slab *next; /* all slabs, for teardown */
	size_t len;		/* mapping length */
};

/* A page of kvfree_rcu pointers on its way to the kworker. */
struct kv_batch {
	struct kv_batch *next; /* queue or pool */
	unsigned n;	       /* pointers in p[] */
	void *p[KVFREE_BATCH];
};

/* The kvfree_rcu kworker, one per run (there is one kworker CPU). */
struct kv_worker {
	pthread_mutex_t mu;
	pthread_cond_t wake;	/* queued work or stop */
	pthread_cond_t idle;	/* queue empty and nothing being freed */
	struct kv_batch *queue; /* batches to free (LIFO: order does not matter) */
	struct kv_batch *pool;	/* empty batches */
	struct al_allocator *a; /* the vmalloc layer */
	struct al_kthread th;	/* a real thread, or a daemon on simulated CPUs */
	struct al_ctx ctx;	/* its model CPU's context */
	bool busy;		/* a batch being freed */
	bool stop;		/* teardown */
	bool started;		/* th runs */
};

/* Shared state: the percpu allocator, the kvfree_rcu kworker. */
struct tv_shared {
	struct kv_worker kv;	    /* kvfree_rcu's deferred frees */
	struct al_lock lock;	    /* pcpu_lock */
	struct pcpu_chunk *current; /* the chunk being carved */
	struct pcpu_chunk *free;    /* unused chunk records */
	struct pcpu_slab *slabs;    /* record mappings */
	unsigned ncpu;		    /* units per chunk */
	size_t rec_size;	    /* bytes of a chunk record */
};

struct pcpu_ref {
	struct pcpu_chunk *ch; /* the object's chunk */
	size_t off;	       /* its offset in each unit */
};

/* Per-worker state. */
struct tv {
	struct al_worker *w;	  /* the engine's worker */
	struct al_allocator *a;	  /* the vmalloc layer */
	struct al_allocator *pg;  /* the pages layer below it */
	struct al_ctx *c;	  /* this worker's CPU */
	struct tv_shared *sh;	  /* the percpu allocator */
	bool per_op;		  /* timing=per_op_sum */
	unsigned loops;		  /* test_loop_count */
	unsigned nr_pages;	  /* nr_pages, at least 1 */
	bool use_huge;		  /* use_huge */
	unsigned zero;		  /* AL_VM_ZERO, or 0 when zero is false */
	unsigned nr_pcpu;	  /* nr_pcpu_objects */
	unsigned junk_length;	  /* full_fit_alloc_test's pairs */
	void **ptr;		  /* pointer arrays (host memory) */
	void **junk;		  /* full_fit's junk areas */
	size_t ptr_len, junk_len; /* mapping lengths */
	struct kv_batch *pending; /* kvfree_rcu page being filled */
	uint64_t *pfns;		  /* vm_map_ram_test's pages */
	struct pcpu_ref *pcpu;	  /* pcpu_alloc_test's objects */
	size_t pcpu_len;	  /* mapping length */
	uint64_t iters;		  /* loop iterations of the current test */
};

/* ---- timed calls ---- */

static inline void *tv_vmalloc(struct tv *t, size_t size, size_t align, unsigned fl)
{
	uint64_t s;
	void *p;

	if (!t->per_op)
		return al_vmalloc(t->a, t->c, size, align, fl);
	s = al_ticks();
	p = al_vmalloc(t->a, t->c, size, align, fl);
	t->w->alloc_ticks += al_ticks() - s;
	t->w->alloc_ops++;
	return p;
}

static inline void tv_vfree(struct tv *t, void *p)
{
	uint64_t s;

	if (!p)
		return;
	if (!t->per_op) {
		al_vfree(t->a, t->c, p);
		return;
	}
	s = al_ticks();
	al_vfree(t->a, t->c, p);
	t->w->free_ticks += al_ticks() - s;
	t->w->free_ops++;
}

/* *((u8 *)p + off) = byte, through the page table. */
static inline void tv_write(struct tv *t, void *p, size_t off, char byte)
{
	al_vmalloc_write(t->a, (char *)p + off, &byte, 1);
}

static inline unsigned tv_rand(struct tv *t)
{
	uint64_t x = t->w->rng;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	t->w->rng = x;
	return (unsigned)(x >> 16);
}

/*
 * A long loop asks every 64 iterations whether the run is stopping or its
 * duration is over (al_worker_stopping: a clock read), and then ends as it
 * would at its last iteration, freeing what it holds; the engine reports
 * the run as truncated. 64 keeps the clock read out of the figures.
 */
static inline bool tv_stop(struct tv *t, unsigned i)
{
	return !(i & 63) && al_worker_stopping(t->w);
}

/* ---- the tests ---- */

static int fix_size_alloc_test(struct tv *t)
{
	size_t size = (size_t)t->nr_pages * AL_PAGE_SIZE;
	unsigned i;
	void *p;

	for (i = 0; i < t->loops && !tv_stop(t, i); i++, t->iters++) {
		p = tv_vmalloc(t, size, 0, t->use_huge ? AL_VM_HUGE : 0);
		if (!p)
			return -1;
		tv_write(t, p, 0, 0);
		tv_vfree(t, p);
	}
	return 0;
}

static int full_fit_alloc_test(struct tv *t)
{
	unsigned n = t->junk_length, i;
	void *arr1, *arr2, *tmp;
	int rv = -1;

	arr1 = tv_vmalloc(t, sizeof(void *) * n, 0, 0);
	if (!arr1)
		return rv;
	arr2 = tv_vmalloc(t, sizeof(void *) * n, 0, 0);
	if (!arr2) {
		tv_vfree(t, arr1);
		return rv;
	}
	for (i = 0; i < n; i++) {
		if (tv_stop(t, i)) {
			n = i; /* free only what was allocated */
			break;
		}
		t->ptr[i] = tv_vmalloc(t, AL_PAGE_SIZE, 0, 0);
		t->junk[i] = tv_vmalloc(t, AL_PAGE_SIZE, 0, 0);
	}
	for (i = 0; i < n; i++)
		tv_vfree(t, t->junk[i]);
	for (i = 0; i < t->loops && !tv_stop(t, i); i++, t->iters++) {
		tmp = tv_vmalloc(t, AL_PAGE_SIZE, 0, 0);
		if (!tmp)
			goto error;
		tv_write(t, tmp, 0, 1);
		tv_vfree(t, tmp);
	}
	rv = 0;
error:
	for (i = 0; i < n; i++)
		tv_vfree(t, t->ptr[i]);
	tv_vfree(t, arr1);
	tv_vfree(t, arr2);
	return rv;
}

static int long_busy_list_alloc_test(struct tv *t)
{
	void *arr, *p1, *p2;
	unsigned i, busy;
	int rv = -1;

	arr = tv_vmalloc(t, sizeof(void *) * LONG_BUSY, 0, 0);
	if (!arr)
		return rv;
	for (busy = 0; busy < LONG_BUSY && !tv_stop(t, busy); busy++)
		t->ptr[busy] = tv_vmalloc(t, AL_PAGE_SIZE, 0, 0);
	for (i = 0; i < t->loops && !tv_stop(t, i); i++, t->iters++) {
		p1 = tv_vmalloc(t, 100 * AL_PAGE_SIZE, 0, 0);
		if (!p1)
			goto leave;
		p2 = tv_vmalloc(t, AL_PAGE_SIZE, 0, 0);
		if (!p2) {
			tv_vfree(t, p1);
			goto leave;
		}
		tv_write(t, p1, 0, 0);
		tv_write(t, p2, 0, 1);
		tv_vfree(t, p1);
		tv_vfree(t, p2);
	}
	rv = 0;
leave:
	for (i = 0; i < busy; i++)
		tv_vfree(t, t->ptr[i]);
	tv_vfree(t, arr);
	return rv;
}

static int random_size_alloc_test(struct tv *t)
{
	unsigned i, n;
	void *p;

	for (i = 0; i < t->loops && !tv_stop(t, i); i++, t->iters++) {
		n = tv_rand(t) % 100 + 1;
		p = tv_vmalloc(t, (size_t)n * AL_PAGE_SIZE, 0, 0);
		if (!p)
			return -1;
		tv_write(t, p, 0, 'a');
		tv_vfree(t, p);
	}
	return 0;
}

static int fix_align_alloc_test(struct tv *t)
{
	unsigned i;
	void *p;

	for (i = 0; i < t->loops && !tv_stop(t, i); i++, t->iters++) {
		p = tv_vmalloc(t, 5 * AL_PAGE_SIZE, THREAD_ALIGN_2X, t->zero);
		if (!p)
			return -1;
		tv_write(t, p, 0, 0);
		tv_vfree(t, p);
	}
	return 0;
}

static int random_size_align_alloc_test(struct tv *t)
{
	unsigned i, rnd;
	size_t size, align;
	void *p;

	for (i = 0; i < t->loops && !tv_stop(t, i); i++, t->iters++) {
		rnd = tv_rand(t) & 0xff; /* get_random_u8() */
		align = (size_t)1 << (rnd % 23);
		size = ((rnd % 10) + 1) * AL_PAGE_SIZE;
		p = tv_vmalloc(t, size, align, t->zero);
		if (!p)
			return -1;
		tv_vfree(t, p);
	}
	return 0;
}

static int align_shift_alloc_test(struct tv *t)
{
	unsigned i;
	void *p;

	for (i = 0; i < 64; i++, t->iters++) {
		p = tv_vmalloc(t, AL_PAGE_SIZE, (size_t)1 << i, t->zero);
		if (!p)
			return -1;
		tv_vfree(t, p);
	}
	return 0;
}

/* -- the percpu allocator model -- */

static struct pcpu_chunk *pcpu_record(struct tv_shared *sh)
{
	struct pcpu_chunk *ch = sh->free;
	struct pcpu_slab *s;
	size_t len, i;

	if (!ch) {
		len = sizeof(*s) + PCPU_SLAB * sh->rec_size;
		s = al_meta_alloc(len);
		if (!s)
			return NULL;
		s->len = len;
		s->next = sh->slabs;
		sh->slabs = s;
		for (i = 0; i < PCPU_SLAB; i++) {
			ch = (struct pcpu_chunk *)((char *)(s + 1) + i * sh->rec_size);
			ch->next = sh->free;
			sh->free = ch;
		}
		ch = sh->free;
	}
	sh->free = ch->next;
	return ch;
}

static void pcpu_destroy_chunk(struct tv_shared *sh, struct al_allocator *a, struct al_ctx *c,
			       struct pcpu_chunk *ch)
{
	struct al_allocator *pg = al_vmalloc_pages(a);
	unsigned i;

	al_vm_unmap_ram(a, c, ch->base, ch->npages);
	for (i = 0; i < ch->npages; i++)
		al_free_pages(pg, c, ch->pfns[i], 0);
	ch->next = sh->free;
	sh->free = ch;
}

/* pcpu_create_chunk() + populate: order-0 pages, mapped contiguously. */
static struct pcpu_chunk *pcpu_create_chunk(struct tv_shared *sh, struct tv *t)
{
	struct pcpu_chunk *ch = pcpu_record(sh);
	unsigned i, n = PCPU_UNIT_PAGES * sh->ncpu;

	if (!ch)
		return NULL;
	for (i = 0; i < n; i++)
		if (al_alloc_pages(t->pg, t->c, 0, 0, &ch->pfns[i]))
			break;
	if (i == n)
		ch->base = al_vm_map_ram(t->a, t->c, ch->pfns, n);
	if (i < n || !ch->base) {
		while (i--)
			al_free_pages(t->pg, t->c, ch->pfns[i], 0);
		ch->next = sh->free;
		sh->free = ch;
		return NULL;
	}
	ch->npages = n;
	ch->off = 0;
	ch->live = 0;
	return ch;
}

static int pcpu_alloc(struct tv *t, size_t size, size_t align, struct pcpu_ref *ref)
{
	struct tv_shared *sh = t->sh;
	struct pcpu_chunk *ch;
	size_t off = 0;
	unsigned cpu;

	if (al_lock_acquire(&sh->lock, t->c))
		return -1;
	ch = sh->current;
	if (ch)
		off = (ch->off + align - 1) & ~(align - 1);
	if (!ch || off + size > PCPU_UNIT) {
		ch = pcpu_create_chunk(sh, t);
		if (!ch) {
			al_lock_release(&sh->lock, t->c);
			return -1;
		}
		if (sh->current && !sh->current->live)
			pcpu_destroy_chunk(sh, t->a, t->c, sh->current);
		sh->current = ch;
		off = 0;
	}
	ch->off = off + size;
	ch->live++;
	al_lock_release(&sh->lock, t->c);
	/* __alloc_percpu zeroes the object in every CPU's unit. */
	for (cpu = 0; cpu < sh->ncpu; cpu++)
		al_vmalloc_memset(t->a, ch->base + (size_t)cpu * PCPU_UNIT + off, 0, size);
	ref->ch = ch;
	ref->off = off;
	return 0;
}

static void pcpu_free(struct tv *t, struct pcpu_ref *ref)
{
	struct tv_shared *sh = t->sh;

	if (!ref->ch || al_lock_acquire(&sh->lock, t->c))
		return;
	if (!--ref->ch->live && ref->ch != sh->current)
		pcpu_destroy_chunk(sh, t->a, t->c, ref->ch);
	ref->ch = NULL;
	al_lock_release(&sh->lock, t->c);
}

/* The current chunk, when empty, goes too: no page outlives the test. */
static void pcpu_release(struct tv_shared *sh, struct al_allocator *a, struct al_ctx *c)
{
	if (al_lock_acquire(&sh->lock, c))
		return;
	if (sh->current && !sh->current->live) {
		pcpu_destroy_chunk(sh, a, c, sh->current);
		sh->current = NULL;
	}
	al_lock_release(&sh->lock, c);
}

static int pcpu_alloc_test(struct tv *t)
{
	void *arr = tv_vmalloc(t, sizeof(void *) * t->nr_pcpu, 0, 0);
	unsigned i, n = t->nr_pcpu;
	int rv = 0;

	if (!arr)
		return -1;
	for (i = 0; i < n; i++, t->iters++) {
		if (tv_stop(t, i)) {
			n = i; /* free only what was allocated */
			break;
		}
		size_t size = tv_rand(t) % (AL_PAGE_SIZE / 4) + 1;
		size_t align = (size_t)1 << (tv_rand(t) % 11 + 1);
		uint64_t s = t->per_op ? al_ticks() : 0;

		if (pcpu_alloc(t, size, align, &t->pcpu[i])) {
			t->pcpu[i].ch = NULL;
			rv = -1;
		}
		if (t->per_op) {
			t->w->alloc_ticks += al_ticks() - s;
			t->w->alloc_ops++;
		}
	}
	for (i = 0; i < n; i++) {
		uint64_t s = t->per_op ? al_ticks() : 0;

		pcpu_free(t, &t->pcpu[i]);
		if (t->per_op) {
			t->w->free_ticks += al_ticks() - s;
			t->w->free_ops++;
		}
	}
	pcpu_release(t->sh, t->a, t->c);
	tv_vfree(t, arr);
	return rv;
}

/* -- kvfree_rcu: frees deferred to the kworker -- */

/* kvfree_rcu_bulk(): vfree every pointer of a batch at the kworker CPU. */
static void kv_free_batch(struct kv_worker *k, struct al_ctx *c, struct kv_batch *b)
{
	unsigned i;

	for (i = 0; i < b->n; i++)
		al_vfree(k->a, c, b->p[i]);
	b->n = 0;
}

static void *kv_main(void *arg)
{
	struct kv_worker *k = arg;
	struct kv_batch *b;
	struct al_ctx x;

	al_ctx_init(&x, al_vmalloc_kworker_cpu(k->a));
	pthread_mutex_lock(&k->mu);
	for (;;) {
		while (!k->queue && !k->stop)
			al_cond_wait(&k->wake, &k->mu);
		b = k->queue;
		if (!b)
			break; /* stopping with nothing queued */
		k->queue = b->next;
		k->busy = true;
		pthread_mutex_unlock(&k->mu);
		kv_free_batch(k, &x, b);
		pthread_mutex_lock(&k->mu);
		b->next = k->pool;
		k->pool = b;
		k->busy = false;
		if (!k->queue)
			al_cond_broadcast(&k->idle);
	}
	pthread_mutex_unlock(&k->mu);
	return NULL;
}

/* The worker's batch to the kworker; a fresh one from the pool back (or
 * NULL when the pool is empty and a new one cannot be had). */
static struct kv_batch *kv_hand_off(struct kv_worker *k, struct kv_batch *b)
{
	struct kv_batch *fresh;

	pthread_mutex_lock(&k->mu);
	b->next = k->queue;
	k->queue = b;
	fresh = k->pool;
	if (fresh)
		k->pool = fresh->next;
	al_cond_signal(&k->wake);
	pthread_mutex_unlock(&k->mu);
	if (!fresh) {
		fresh = al_meta_alloc(sizeof(*fresh));
		if (fresh)
			fresh->n = 0;
	}
	return fresh;
}

/* kvfree_rcu_barrier(): wait until every batch handed off is freed. */
static void kv_barrier(struct kv_worker *k)
{
	pthread_mutex_lock(&k->mu);
	while (k->queue || k->busy)
		al_cond_wait(&k->idle, &k->mu);
	pthread_mutex_unlock(&k->mu);
}

/* The kworker, started by the first worker (it needs the allocator). */
static int kv_start(struct kv_worker *k, struct al_allocator *a)
{
	int ret = 0;

	if (al_vmalloc_kworker_cpu(a) == ~0u)
		return -ERANGE; /* a stack with no CPU left for the kworker */
	pthread_mutex_lock(&k->mu);
	if (!k->started) {
		k->a = a;
		al_ctx_init(&k->ctx, al_vmalloc_kworker_cpu(a));
		/* as an unbound kworker beside the test's CPU */
		if (al_kthread_start(&k->th, kv_main, k, &k->ctx, true))
			ret = -EAGAIN;
		else
			k->started = true;
	}
	pthread_mutex_unlock(&k->mu);
	return ret;
}

/* Free what is queued, stop the thread, free the batches. */
static void kv_stop(struct kv_worker *k)
{
	struct kv_batch *b, *next;

	pthread_mutex_lock(&k->mu);
	k->stop = true;
	al_cond_broadcast(&k->wake);
	pthread_mutex_unlock(&k->mu);
	if (k->started)
		al_kthread_join(&k->th);
	for (b = k->pool; b; b = next) {
		next = b->next;
		al_meta_free(b, sizeof(*b));
	}
	k->pool = NULL;
	pthread_cond_destroy(&k->wake);
	pthread_cond_destroy(&k->idle);
	pthread_mutex_destroy(&k->mu);
}

/* A partial batch goes too (the test's end). Without a fresh batch the
 * worker has none until one is free again. */
static void kvfree_flush(struct tv *t)
{
	if (t->pending && t->pending->n)
		t->pending = kv_hand_off(&t->sh->kv, t->pending);
}

/* Without a batch to queue in (no memory for one), the kernel's kvfree_rcu
 * waits for a grace period and frees at once (synchronize_rcu + kvfree):
 * here, an inline vfree. */
static inline void kvfree_rcu(struct tv *t, void *p)
{
	if (al_unlikely(!t->pending)) {
		t->pending = al_meta_alloc(sizeof(*t->pending));
		if (!t->pending) {
			tv_vfree(t, p);
			return;
		}
		t->pending->n = 0;
	}
	t->pending->p[t->pending->n++] = p;
	if (t->pending->n == KVFREE_BATCH)
		kvfree_flush(t);
}

static int kvfree_rcu_test(struct tv *t)
{
	unsigned i;
	void *p;
	int rv = 0;

	for (i = 0; i < t->loops && !tv_stop(t, i); i++, t->iters++) {
		p = tv_vmalloc(t, AL_PAGE_SIZE, 0, 0);
		if (!p) {
			rv = -1;
			break;
		}
		tv_write(t, p, RCU_HEAD_BYTES, 'a'); /* p->array[0] = 'a' */
		kvfree_rcu(t, p);
	}
	kvfree_flush(t);
	return rv;
}

static int kvfree_rcu_1_arg_vmalloc_test(struct tv *t)
{
	return kvfree_rcu_test(t); /* kvfree_rcu_mightsleep(p) */
}

static int kvfree_rcu_2_arg_vmalloc_test(struct tv *t)
{
	return kvfree_rcu_test(t); /* kvfree_rcu(p, rcu): the same queue */
}

static int vm_map_ram_test(struct tv *t)
{
	unsigned n = t->nr_pages, i;
	int got = al_alloc_pages_bulk(t->pg, t->c, 0, n, 0, t->pfns);
	void *v;
	int rv = 0;

	if (got != (int)n) {
		rv = -1;
		goto cleanup;
	}
	for (i = 0; i < t->loops && !tv_stop(t, i); i++, t->iters++) {
		uint64_t s = t->per_op ? al_ticks() : 0;

		v = al_vm_map_ram(t->a, t->c, t->pfns, n);
		if (t->per_op) {
			t->w->alloc_ticks += al_ticks() - s;
			t->w->alloc_ops++;
		}
		if (!v) {
			rv = -1;
			break;
		}
		tv_write(t, v, 0, 'a');
		s = t->per_op ? al_ticks() : 0;
		al_vm_unmap_ram(t->a, t->c, v, n);
		if (t->per_op) {
			t->w->free_ticks += al_ticks() - s;
			t->w->free_ops++;
		}
	}
cleanup:
	for (i = 0; got > 0 && i < (unsigned)got; i++)
		al_free_pages(t->pg, t->c, t->pfns[i], 0);
	return rv;
}

/* ---- the harness ---- */

#define TV_TESTS(X)                             \
	X(fix_size_alloc_test, false)           \
	X(full_fit_alloc_test, false)           \
	X(long_busy_list_alloc_test, false)     \
	X(random_size_alloc_test, false)        \
	X(fix_align_alloc_test, false)          \
	X(random_size_align_alloc_test, false)  \
	X(align_shift_alloc_test, true)         \
	X(pcpu_alloc_test, false)               \
	X(kvfree_rcu_1_arg_vmalloc_test, false) \
	X(kvfree_rcu_2_arg_vmalloc_test, false) \
	X(vm_map_ram_test, false)

struct tv_case {
	const char *name;	 /* the kernel's name */
	int (*fn)(struct tv *t); /* 0 passed, else failed */
	bool xfail;		 /* expected to fail */
	const char *m_avg;	 /* metric names */
	const char *m_passed;
	const char *m_failed;
	const char *m_xfailed;
};

#define TV_CASE(name, xf) \
	{ #name, name, xf, #name ".avg_usec", #name ".passed", #name ".failed", #name ".xfailed" },
static const struct tv_case tv_cases[] = { TV_TESTS(TV_CASE) };
#define NR_TESTS (sizeof(tv_cases) / sizeof(tv_cases[0]))

_Static_assert(NR_TESTS == 11, "the kernel's eleven tests, bits 1 to 1024");

static int tv_setup(const int64_t *params, unsigned nworkers, void **shared)
{
	struct tv_shared *sh = al_meta_alloc(sizeof(*sh));

	(void)params;
	if (!sh)
		return -ENOMEM;
	if (pthread_mutex_init(&sh->kv.mu, NULL) || pthread_cond_init(&sh->kv.wake, NULL) ||
	    pthread_cond_init(&sh->kv.idle, NULL)) {
		al_meta_free(sh, sizeof(*sh));
		return -ENOMEM;
	}
	/* Not counted (no al_lock_count_in): nothing reports its statistics. */
	al_lock_init(&sh->lock, 10000000000ull, false);
	sh->ncpu = nworkers;
	sh->rec_size = (sizeof(struct pcpu_chunk) + PCPU_UNIT_PAGES * nworkers * sizeof(uint64_t) +
			AL_CACHELINE - 1) &
		       ~(size_t)(AL_CACHELINE - 1);
	*shared = sh;
	return 0;
}

static void tv_teardown(void *shared, struct al_allocator *a, struct al_ctx *c)
{
	struct tv_shared *sh = shared;
	struct pcpu_slab *s, *next;

	if (!sh)
		return;
	kv_stop(&sh->kv); /* before the allocator goes: it frees what is queued */
	if (a && al_vmalloc_is(a) && sh->current)
		pcpu_destroy_chunk(sh, a, c, sh->current);
	for (s = sh->slabs; s; s = next) {
		next = s->next;
		al_meta_free(s, s->len);
	}
	al_meta_free(sh, sizeof(*sh));
}

static void tv_worker_fini(struct al_worker *w);

/* nr_threads is the module's thread count: here one worker per producer. */
static int tv_check_params(const int64_t *p, unsigned nworkers, char *err, size_t errlen)
{
	if (p[P_nr_threads] && p[P_nr_threads] != nworkers) {
		snprintf(err, errlen,
			 "nr_threads=%lld with producers=%u: the engine runs one worker per "
			 "producer; use producers=%lld (or nr_threads=0)",
			 (long long)p[P_nr_threads], nworkers, (long long)p[P_nr_threads]);
		return -EINVAL;
	}
	return 0;
}

static int tv_worker_init(struct al_worker *w)
{
	const int64_t *p = w->params;
	struct tv *t;

	if (!al_vmalloc_is(w->a)) {
		snprintf(w->err, w->errlen,
			 "test_vmalloc needs a vmalloc layer at the top of the policy (e.g. "
			 "vmalloc-default = 'vmalloc > pages'), not '%s'",
			 w->a->ops->name);
		return -EINVAL;
	}
	t = al_meta_alloc(sizeof(*t));
	if (!t)
		return -ENOMEM;
	w->priv = t;
	t->w = w;
	t->a = w->a;
	t->pg = al_vmalloc_pages(w->a);
	t->c = &w->ctx;
	t->sh = w->shared;
	t->per_op = w->timing == AL_TIMING_PER_OP_SUM;
	t->loops = (unsigned)p[P_test_loop_count];
	t->nr_pages = p[P_nr_pages] > 0 ? (unsigned)p[P_nr_pages] : 1;
	t->use_huge = p[P_use_huge];
	t->zero = p[P_zero] ? AL_VM_ZERO : 0;
	t->nr_pcpu = (unsigned)p[P_nr_pcpu_objects];
	/* fls(num_online_cpus()) * (32 MiB / PAGE_SIZE), the model's CPUs */
	t->junk_length = al_fls64(w->nworkers) * ((32u << 20) / AL_PAGE_SIZE);
	t->ptr_len = sizeof(void *) * (t->junk_length > LONG_BUSY ? t->junk_length : LONG_BUSY);
	t->junk_len = sizeof(void *) * t->junk_length;
	t->pcpu_len = sizeof(struct pcpu_ref) * t->nr_pcpu;
	t->ptr = al_meta_alloc(t->ptr_len);
	t->junk = al_meta_alloc(t->junk_len);
	t->pending = al_meta_alloc(sizeof(*t->pending));
	t->pfns = al_meta_alloc(sizeof(uint64_t) * t->nr_pages);
	t->pcpu = al_meta_alloc(t->pcpu_len);
	if (!t->ptr || !t->junk || !t->pending || !t->pfns || !t->pcpu) {
		tv_worker_fini(w);
		return -ENOMEM;
	}
	if (kv_start(&t->sh->kv, w->a)) {
		snprintf(w->err, w->errlen, "test_vmalloc: cannot start the kvfree_rcu kworker");
		tv_worker_fini(w);
		return -EAGAIN;
	}
	return 0;
}

static void tv_worker_fini(struct al_worker *w)
{
	struct tv *t = w->priv;

	if (!t)
		return;
	al_meta_free(t->ptr, t->ptr_len);
	al_meta_free(t->junk, t->junk_len);
	if (t->pending && t->pending->n) /* a test cut short: its batch is freed here */
		kv_free_batch(&t->sh->kv, t->c, t->pending);
	al_meta_free(t->pending, sizeof(*t->pending));
	al_meta_free(t->pfns, sizeof(uint64_t) * t->nr_pages);
	al_meta_free(t->pcpu, t->pcpu_len);
	al_meta_free(t, sizeof(*t));
	w->priv = NULL;
}

/* One worker run: every selected test, test_repeat_count times each. */
static int tv_cycle(struct al_worker *w)
{
	struct tv *t = w->priv;
	unsigned order[NR_TESTS], i, j, k, r, tmp;
	unsigned mask = (unsigned)w->params[P_run_test_mask];
	unsigned repeat = (unsigned)w->params[P_test_repeat_count];
	uint64_t all0 = al_ticks(), t0, t1;
	int ret;

	for (i = 0; i < NR_TESTS; i++)
		order[i] = i;
	if (!w->params[P_sequential_test_order])
		for (i = NR_TESTS - 1; i > 0; i--) {
			j = tv_rand(t) % (i + 1);
			tmp = order[i];
			order[i] = order[j];
			order[j] = tmp;
		}
	for (k = 0; k < NR_TESTS; k++) {
		const struct tv_case *tc = &tv_cases[order[k]];
		unsigned passed = 0, failed = 0, xfailed = 0;

		if (!(mask & (1u << order[k])))
			continue;
		if (al_worker_stopping(w))
			break;
		t->iters = 0;
		t0 = al_ticks();
		for (r = 0; r < repeat; r++) {
			ret = tc->fn(t);
			if (w->cut)
				break; /* a test cut short neither passed nor failed */
			if (!ret && !tc->xfail)
				passed++;
			else if (ret && tc->xfail)
				xfailed++;
			else
				failed++;
		}
		t1 = al_ticks();
		kv_barrier(&t->sh->kv); /* untimed: kvfree_rcu's frees end with the test */
		if (!t->per_op) {
			w->alloc_ticks += t1 - t0;
			w->alloc_ops += t->iters;
		}
		if (w->cut)
			break;
		al_worker_metric(w, tc->m_avg, al_ticks_to_ns((double)(t1 - t0)) / 1e3 / repeat,
				 AL_METRIC_MEAN);
		al_worker_metric(w, tc->m_passed, passed, AL_METRIC_SUM);
		al_worker_metric(w, tc->m_failed, failed, AL_METRIC_SUM);
		al_worker_metric(w, tc->m_xfailed, xfailed, AL_METRIC_SUM);
	}
	if (w->cut)
		return 0; /* the engine reports the run as truncated */
	al_worker_metric(w, "all_tests_usec", al_ticks_to_ns((double)(al_ticks() - all0)) / 1e3,
			 AL_METRIC_MEAN);
	return 0;
}

static const struct al_workload_desc test_vmalloc_desc = {
	.name = "test_vmalloc",
	AL_WORKLOAD_DESC_INIT,
	.doc = "lib/test_vmalloc.c: the kernel's vmalloc tests by name, bit and parameter on a "
	       "'vmalloc > pages' policy; one cycle = one run of every selected test; reports "
	       "<test>.avg_usec and passed/failed/xfailed",
	.flags = AL_WL_VMALLOC | AL_WL_SIM,
	.nparams = P_NR,
	.params = tv_params,
	.size_param = -1,
	.check_params = tv_check_params,
	.setup = tv_setup,
	.worker_init = tv_worker_init,
	.cycle = tv_cycle,
	.worker_fini = tv_worker_fini,
	.teardown = tv_teardown,
};

AL_REGISTER_WORKLOAD(test_vmalloc_desc)
