/* SPDX-License-Identifier: MIT */
/*
 * Pointer checks around a layer (the stack spec's `check` bits): every
 * object the layer hands out is checked to be aligned to the layer's
 * declared alignment and not live already (handed out and not yet freed).
 * The first violation is recorded with the layer's name, the object is
 * withheld from the caller (the allocation fails with -EFAULT), and every
 * later allocation through the layer fails the same way, so the run stops
 * before anything writes through a bad pointer; al_run() then reports the
 * violation in place of whatever the workload saw.
 *
 * The check replaces the instance's ops pointer with a per-instance copy of
 * the layer's table whose alloc/free entries check and call the originals:
 * the layer above reaches it through a->ops as before, the layer's own code
 * still receives its own struct al_allocator, and its counters and stats
 * are untouched, so a checked run reports what an unchecked one does.
 *
 * The live set is an open-addressing hash table (linear probing, deletion
 * by backward shift) under one mutex: a debugging aid, not a fast path.
 * A free takes the object out of the set before the layer can hand it out
 * again, and puts it back if the layer refused it. A call at IRQ or NMI
 * level (a signal handler on a thread that may hold the mutex) only tries
 * the mutex; when it is taken, duplicate tracking stops for the instance
 * (alignment is still checked), so no stale entry can report a false
 * duplicate.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloclab/core.h"
#include "alloclab/stack.h"
#include "alloclab/spec.h"

#define GUARD_MAGIC	0x616c2d6775617264ull /* "al-guard" */
#define GUARD_MIN_SLOTS 1024

struct guard {
	struct al_ops ops; /* first: the instance's a->ops points here */
	const struct al_ops *orig;
	uint64_t magic;
	const char *name;
	size_t align;	    /* every object is aligned to this */
	char align_why[96]; /* where align comes from, for the report */
	pthread_mutex_t lock;
	void **slots; /* live objects; NULL = empty */
	size_t nslots, used;
	uint64_t allocs; /* objects handed out through the guard */
	int untracked;	 /* duplicate tracking stopped (see above) */
	int violated;	 /* 0, 2 while msg is written, 1 once it holds the violation */
	char msg[200];
};

/* Nested calls on the same thread and context (a layer's bulk path calling
 * its own alloc through a->ops) pass through: the outer call checks. */
struct guard_where {
	const struct guard *g;
	const struct al_ctx *c;
	unsigned level;
};
static __thread struct guard_where guard_cur;

/* A model CPU of a simulation has its own (sim.h switches it). */
static void *guard_cur_addr(void)
{
	return &guard_cur;
}

__attribute__((constructor)) static void guard_tls(void)
{
	al_sim_tls_register(guard_cur_addr, sizeof(guard_cur));
}

static struct guard *guard_of(struct al_allocator *a)
{
	return (struct guard *)(void *)a->ops;
}

static bool guard_nested(const struct guard *g, const struct al_ctx *c)
{
	return guard_cur.g == g && guard_cur.c == c && guard_cur.level == c->level;
}

/* Enter the layer's own code; returns what to restore on the way out (the
 * layer may call another checked layer, which enters and leaves in turn). */
static struct guard_where guard_enter(const struct guard *g, const struct al_ctx *c)
{
	struct guard_where prev = guard_cur;

	guard_cur.g = g;
	guard_cur.c = c;
	guard_cur.level = c->level;
	return prev;
}

static size_t guard_hash(const void *p, size_t nslots)
{
	uint64_t x = (uint64_t)(uintptr_t)p;

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (size_t)x & (nslots - 1);
}

/* Index of p in the table, or of the empty slot where it would go. */
static size_t guard_find(const struct guard *g, const void *p)
{
	size_t i = guard_hash(p, g->nslots);

	while (g->slots[i] && g->slots[i] != p)
		i = (i + 1) & (g->nslots - 1);
	return i;
}

/* Monotonic, and safe without the lock: once set, the table is never read. */
static void guard_stop_tracking(struct guard *g)
{
	__atomic_store_n(&g->untracked, 1, __ATOMIC_RELAXED);
}

static bool guard_tracking(const struct guard *g)
{
	return !__atomic_load_n(&g->untracked, __ATOMIC_RELAXED);
}

static void guard_grow(struct guard *g)
{
	size_t n = g->nslots * 2, i, j;
	void **old = g->slots, **slots = al_meta_alloc(n * sizeof(void *));

	if (!slots) { /* no memory to track more: alignment checks go on */
		guard_stop_tracking(g);
		return;
	}
	g->slots = slots;
	g->nslots = n;
	for (i = 0; i < n / 2; i++) {
		if (!old[i])
			continue;
		j = guard_find(g, old[i]);
		slots[j] = old[i];
	}
	al_meta_free(old, n / 2 * sizeof(void *));
}

static void guard_remove_at(struct guard *g, size_t i)
{
	size_t mask = g->nslots - 1, j = i, home;

	g->slots[i] = NULL;
	g->used--;
	for (;;) {
		j = (j + 1) & mask;
		if (!g->slots[j])
			return;
		home = guard_hash(g->slots[j], g->nslots);
		/* move slots[j] into the hole when the hole lies between its home and j */
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			g->slots[i] = g->slots[j];
			g->slots[j] = NULL;
			i = j;
		}
	}
}

static bool guard_lock(struct guard *g, const struct al_ctx *c)
{
	if (c->level == AL_CTX_TASK) {
		pthread_mutex_lock(&g->lock);
		return true;
	}
	return pthread_mutex_trylock(&g->lock) == 0;
}

static void guard_violation(struct guard *g, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void guard_violation(struct guard *g, const char *fmt, ...)
{
	va_list ap;
	int none = 0;

	/* 0 -> 2 (this thread writes msg) -> 1 (msg complete): the first one wins */
	if (!__atomic_compare_exchange_n(&g->violated, &none, 2, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return;
	va_start(ap, fmt);
	vsnprintf(g->msg, sizeof(g->msg), fmt, ap);
	va_end(ap);
	__atomic_store_n(&g->violated, 1, __ATOMIC_RELEASE);
}

/* Check one object the layer handed out; false when it is withheld. Called
 * with the lock held when `locked`. */
static bool guard_take(struct guard *g, void *p, size_t size, bool locked)
{
	uint64_t n = ++g->allocs;
	size_t i;

	if ((uintptr_t)p & (g->align - 1)) {
		guard_violation(g,
				"layer %s returned %p for a %zu-byte request (allocation %llu): "
				"aligned to %zu bytes, below %zu (%s)",
				g->name, p, size, (unsigned long long)n,
				(size_t)1 << __builtin_ctzll((uint64_t)(uintptr_t)p), g->align,
				g->align_why);
		return false;
	}
	if (!locked || !guard_tracking(g))
		return true;
	i = guard_find(g, p);
	if (g->slots[i]) {
		guard_violation(g,
				"layer %s returned %p for a %zu-byte request (allocation %llu) "
				"while it was still live: the same object handed out twice",
				g->name, p, size, (unsigned long long)n);
		return false;
	}
	g->slots[i] = p;
	if (++g->used * 2 > g->nslots)
		guard_grow(g);
	return true;
}

/* Take p out of the live set before the layer may hand it out again. */
static bool guard_release(struct guard *g, const struct al_ctx *c, void *p)
{
	size_t i;

	if (!guard_lock(g, c)) {
		guard_stop_tracking(g); /* racy but monotonic: only the flag matters */
		return false;
	}
	if (guard_tracking(g)) {
		i = guard_find(g, p);
		if (g->slots[i])
			guard_remove_at(g, i);
		else
			p = NULL; /* not handed out through the guard: nothing to restore */
	}
	pthread_mutex_unlock(&g->lock);
	return p != NULL && guard_tracking(g);
}

/* The layer refused a free: the object is still the caller's. */
static void guard_restore(struct guard *g, const struct al_ctx *c, void *p)
{
	if (!guard_lock(g, c)) {
		guard_stop_tracking(g);
		return;
	}
	if (guard_tracking(g)) {
		size_t i = guard_find(g, p);

		if (!g->slots[i]) {
			g->slots[i] = p;
			if (++g->used * 2 > g->nslots)
				guard_grow(g);
		}
	}
	pthread_mutex_unlock(&g->lock);
}

static void *guard_refused(struct al_ctx *c)
{
	c->err = -EFAULT;
	return NULL;
}

static void *guard_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct guard *g = guard_of(a);
	struct guard_where prev;
	void *p;
	bool locked, ok;

	if (guard_nested(g, c))
		return g->orig->alloc(a, c, size, flags);
	if (__atomic_load_n(&g->violated, __ATOMIC_ACQUIRE))
		return guard_refused(c);
	prev = guard_enter(g, c);
	p = g->orig->alloc(a, c, size, flags);
	guard_cur = prev;
	if (!p)
		return NULL;
	locked = guard_lock(g, c);
	if (!locked)
		guard_stop_tracking(g);
	ok = guard_take(g, p, size, locked);
	if (locked)
		pthread_mutex_unlock(&g->lock);
	return ok ? p : guard_refused(c);
}

static int guard_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
			    void **out, unsigned flags)
{
	struct guard *g = guard_of(a);
	struct guard_where prev;
	unsigned i, kept = 0;
	bool locked;
	int got;

	if (guard_nested(g, c))
		return g->orig->alloc_bulk(a, c, size, n, out, flags);
	if (__atomic_load_n(&g->violated, __ATOMIC_ACQUIRE)) {
		guard_refused(c);
		return 0;
	}
	prev = guard_enter(g, c);
	got = g->orig->alloc_bulk(a, c, size, n, out, flags);
	guard_cur = prev;
	if (got <= 0)
		return got;
	if ((unsigned)got > n) {
		guard_violation(g, "layer %s: alloc_bulk returned %d objects for %u asked", g->name,
				got, n);
		guard_refused(c);
		return 0;
	}
	locked = guard_lock(g, c);
	if (!locked)
		guard_stop_tracking(g);
	for (i = 0; i < (unsigned)got; i++)
		if (guard_take(g, out[i], size, locked))
			out[kept++] = out[i];
	if (locked)
		pthread_mutex_unlock(&g->lock);
	if (kept < (unsigned)got) /* withheld: the caller must see no object at all */
		kept = 0;
	if (!kept)
		guard_refused(c);
	return (int)kept;
}

static int guard_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct guard *g = guard_of(a);
	struct guard_where prev;
	bool tracked;
	int ret;

	if (!p || guard_nested(g, c))
		return g->orig->free(a, c, p);
	tracked = guard_release(g, c, p);
	prev = guard_enter(g, c);
	ret = g->orig->free(a, c, p);
	guard_cur = prev;
	if (ret && tracked)
		guard_restore(g, c, p);
	return ret;
}

static int guard_free_flags(struct al_allocator *a, struct al_ctx *c, void *p, unsigned flags)
{
	struct guard *g = guard_of(a);
	struct guard_where prev;
	bool tracked;
	int ret;

	if (!p || guard_nested(g, c))
		return g->orig->free_flags(a, c, p, flags);
	tracked = guard_release(g, c, p);
	prev = guard_enter(g, c);
	ret = g->orig->free_flags(a, c, p, flags);
	guard_cur = prev;
	if (ret && tracked)
		guard_restore(g, c, p);
	return ret;
}

static int guard_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n)
{
	struct guard *g = guard_of(a);
	struct guard_where prev;
	unsigned i;
	int ret;

	if (guard_nested(g, c))
		return g->orig->free_bulk(a, c, ptrs, n);
	for (i = 0; i < n; i++)
		if (ptrs[i])
			guard_release(g, c, ptrs[i]);
	prev = guard_enter(g, c);
	ret = g->orig->free_bulk(a, c, ptrs, n);
	guard_cur = prev;
	/* A bulk free that failed freed none (ops.h): they are the caller's again.
	 * A short count leaves it unknown which were taken: stop tracking. */
	if (ret < 0) {
		for (i = 0; i < n; i++)
			if (ptrs[i])
				guard_restore(g, c, ptrs[i]);
	} else if ((unsigned)ret < n && guard_lock(g, c)) {
		guard_stop_tracking(g);
		pthread_mutex_unlock(&g->lock);
	}
	return ret;
}

static int guard_check(struct al_allocator *a, char *err, size_t errlen)
{
	struct guard *g = guard_of(a);

	if (__atomic_load_n(&g->violated, __ATOMIC_ACQUIRE) == 1) {
		snprintf(err, errlen, "%s", g->msg);
		return -EFAULT;
	}
	return g->orig->check ? g->orig->check(a, err, errlen) : 0;
}

static void guard_destroy(struct al_allocator *a)
{
	struct guard *g = guard_of(a);

	a->ops = g->orig; /* the layer's destroy sees its own table */
	g->orig->destroy(a);
	pthread_mutex_destroy(&g->lock);
	al_meta_free(g->slots, g->nslots * sizeof(void *));
	al_meta_free(g, sizeof(*g));
}

/* The alignment a layer promises: its own min_align, else (0: a cache of
 * the layer below's objects) that of the first layer below that declares
 * one, else a pointer's; why says which. */
static size_t guard_align(const struct al_allocator *a, char *why, size_t len)
{
	const struct al_allocator *x;

	for (x = a; x; x = x->below) {
		size_t align = al_layer_min_align(x->desc);

		if (!align)
			continue;
		if (x == a)
			snprintf(why, len, "its min_align");
		else
			snprintf(why, len, "the min_align of %s below it, which it inherits",
				 x->desc->name);
		return align;
	}
	snprintf(why, len, "a pointer's: no layer of the stack declares min_align");
	return sizeof(void *);
}

int al_guard_wrap(struct al_allocator *a)
{
	struct guard *g = al_meta_alloc(sizeof(*g));

	if (!g)
		return -ENOMEM;
	g->nslots = GUARD_MIN_SLOTS;
	g->slots = al_meta_alloc(g->nslots * sizeof(void *));
	if (!g->slots) {
		al_meta_free(g, sizeof(*g));
		return -ENOMEM;
	}
	/* A table built before free_bulk_sized is shorter: copy what it has. The
	 * copy has no free_bulk_sized, so sized spills come through the guarded
	 * free_bulk and every freed object leaves the live set. */
	memcpy(&g->ops, a->ops, a->ops->ops_size);
	g->ops.ops_size = sizeof(g->ops);
	g->ops.free_bulk_sized = NULL;
	g->orig = a->ops;
	g->magic = GUARD_MAGIC;
	g->name = a->desc ? a->desc->name : a->ops->name;
	g->align = guard_align(a, g->align_why, sizeof(g->align_why));
	pthread_mutex_init(&g->lock, NULL);
	g->ops.alloc = guard_alloc;
	g->ops.free = guard_free;
	if (g->orig->alloc_bulk)
		g->ops.alloc_bulk = guard_alloc_bulk;
	if (g->orig->free_bulk)
		g->ops.free_bulk = guard_free_bulk;
	if (g->orig->free_flags)
		g->ops.free_flags = guard_free_flags;
	g->ops.check = guard_check;
	g->ops.destroy = guard_destroy;
	a->ops = &g->ops;
	return 0;
}

int al_stack_guard_error(struct al_allocator *top, char *err, size_t errlen)
{
	for (; top; top = top->below) {
		const struct guard *g = (const struct guard *)(const void *)top->ops;

		if (top->ops->destroy == guard_destroy && g->magic == GUARD_MAGIC &&
		    __atomic_load_n(&g->violated, __ATOMIC_ACQUIRE) == 1) {
			snprintf(err, errlen, "%s", g->msg);
			return -EFAULT;
		}
	}
	return 0;
}
