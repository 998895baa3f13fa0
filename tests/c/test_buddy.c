/* SPDX-License-Identifier: MIT */
/*
 * Tests of the `buddy` layer (the BPF libarena buddy model), through the
 * public API only: scripted sequences with exact indices, splits and merges
 * (check() after every step), a seeded random sequence, bulk calls, pointer
 * validation, exhaustion and recovery, chunk growth, a 4-thread stress test
 * and the trylock (lock_budget = 0) configuration.
 *
 * Index arithmetic for a fresh 1 MiB chunk (reference §1.4e): metadata
 * takes items [0, 2569) as o11@0, o9@2048, o3@2560, o0@2568; the free
 * blocks are o0@2569 o1@2570 o2@2572 o4@2576 o5@2592 o6@2624 o7@2688
 * o8@2816 o10@3072 o12@4096 o13@8192 o14@16384 o15@32768.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#include "test.h"

#define MIB (1u << 20)
#define KIB (1u << 10)

enum { P_CHUNK_SIZE, P_ARENA_LIMIT, P_LOCK_BUDGET, P_LOCK_TIMING, P_FILL, P_POPULATE };

static const char *const t_buddy[] = { "buddy" };

static void defaults(int64_t p[1][AL_MAX_PARAMS])
{
	const struct al_layer_desc *d = al_layer_find("buddy");

	memset(p, 0, sizeof(int64_t) * AL_MAX_PARAMS);
	al_params_default(d->params, d->nparams, p[0]);
}

static struct al_allocator *mk(int64_t p[1][AL_MAX_PARAMS], unsigned ncpu)
{
	return t_make(t_buddy, 1, (const int64_t(*)[AL_MAX_PARAMS])p, ncpu);
}

static struct al_allocator *mk_default(void)
{
	int64_t p[1][AL_MAX_PARAMS];

	defaults(p);
	return mk(p, 1);
}

static long long ctr(struct al_allocator *a, const char *name)
{
	return t_stat(a, 0, name);
}

/* check() must pass; print its message once when it does not. */
static int ck_line(struct al_allocator *a, int line)
{
	char err[256] = "";
	int ret = a->ops->check(a, err, sizeof(err));

	if (ret) {
		fprintf(stderr, "test_buddy.c:%d: check() = %d: %s\n", line, ret, err);
		t_failed_checks++;
	}
	return ret;
}
#define CK(a) ck_line((a), __LINE__)

static uintptr_t chunk_of(const void *p)
{
	return (uintptr_t)p & ~(uintptr_t)(MIB - 1);
}

static unsigned idx_of(const void *p)
{
	return (unsigned)(((uintptr_t)p & (MIB - 1)) >> 4);
}

static bool all_bytes(const void *p, int v, size_t n)
{
	const uint8_t *q = p;
	size_t i;

	for (i = 0; i < n; i++)
		if (q[i] != (uint8_t)v)
			return false;
	return true;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

TEST(test_registry)
{
	const struct al_layer_desc *d = al_layer_find("buddy");
	static const char *const names[] = { "chunk_size",  "arena_limit", "lock_budget",
					     "lock_timing", "fill",	   "populate",
					     "lock" };
	int64_t p[AL_MAX_PARAMS];
	struct al_allocator *a, *below;
	char err[256];
	unsigned i;

	CHECK(d != NULL);
	if (!d)
		return;
	CHECK_EQ(d->features, AL_F_BULK | AL_F_OWNS | AL_F_USABLE | AL_F_VALIDATES |
				      AL_F_STATS_ANYTIME | AL_F_NMI_SAFE | AL_F_POW2_CLASSES);
	CHECK_EQ(d->max_size, 512 * KIB);
	CHECK_EQ(d->nparams, 7);
	for (i = 0; i < 7 && i < d->nparams; i++)
		CHECK(!strcmp(d->params[i].name, names[i]));
	al_params_default(d->params, d->nparams, p);
	CHECK_EQ(p[P_CHUNK_SIZE], MIB);
	CHECK_EQ(p[P_ARENA_LIMIT], 1ll << 30);
	CHECK_EQ(p[P_LOCK_BUDGET], 250000000);
	CHECK_EQ(p[P_LOCK_TIMING], 1);
	CHECK_EQ(p[P_FILL], 0);
	CHECK_EQ(p[P_POPULATE], 0);
	CHECK_EQ(d->check_params(p, err, sizeof(err)), 0);

	p[P_CHUNK_SIZE] = 96 * KIB;
	CHECK_EQ(d->check_params(p, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "98304") != NULL);
	CHECK(strstr(err, "must be a power of two between 64K and 1M") != NULL);
	p[P_CHUNK_SIZE] = MIB;
	p[P_ARENA_LIMIT] = 512 * KIB;
	CHECK_EQ(d->check_params(p, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "arena_limit") != NULL);

	/* A bottom layer: create refuses a layer below. */
	al_params_default(d->params, d->nparams, p);
	below = mk_default();
	CHECK(below != NULL);
	a = NULL;
	CHECK_EQ(d->create(d, p, below, 1, &a), -EINVAL);
	CHECK(a == NULL);
	al_stack_destroy(below);
}

TEST(test_scripted)
{
	struct al_allocator *a = mk_default();
	struct al_ctx c;
	void *p16, *p64, *p16b, *p16c, *p32, *big, *q;
	uintptr_t base;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	CK(a);
	CHECK_EQ(ctr(a, "chunks"), 1);
	CHECK_EQ(ctr(a, "bytes_held"), 0);

	/* o0@2569 is the lowest order-0 block: no split. */
	p16 = al_alloc(a, &c, 16, 0);
	CHECK(p16 != NULL);
	base = chunk_of(p16);
	CHECK_EQ((uintptr_t)p16, base + 2569 * 16);
	CHECK_EQ(ctr(a, "splits"), 0);
	CK(a);
	/* o2@2572 exists: 64 B needs no split either. */
	p64 = al_alloc(a, &c, 64, 0);
	CHECK_EQ((uintptr_t)p64, base + 2572 * 16);
	CHECK_EQ(ctr(a, "splits"), 0);
	CK(a);
	/* o0 is empty now: o1@2570 splits once, the low half is returned. */
	p16b = al_alloc(a, &c, 16, 0);
	CHECK_EQ((uintptr_t)p16b, base + 2570 * 16);
	CHECK_EQ(ctr(a, "splits"), 1);
	CK(a);
	/* ... and its upper half o0@2571 was pushed. */
	p16c = al_alloc(a, &c, 10, 0);
	CHECK_EQ((uintptr_t)p16c, base + 2571 * 16);
	CHECK_EQ(ctr(a, "splits"), 1);
	CK(a);
	/* o1..o3 empty: o4@2576 splits three times. */
	p32 = al_alloc(a, &c, 32, 0);
	CHECK_EQ((uintptr_t)p32, base + 2576 * 16);
	CHECK_EQ(ctr(a, "splits"), 4);
	CK(a);
	CHECK_EQ(ctr(a, "bytes_held"), 16 + 64 + 16 + 16 + 32);
	CHECK_EQ(ctr(a, "bytes_requested"), 16 + 64 + 16 + 10 + 32);
	CHECK_EQ(ctr(a, "allocs"), 5);

	/* 2571: buddy 2570 allocated, no merge. */
	CHECK_EQ(al_free(a, &c, p16c), 0);
	CHECK_EQ(ctr(a, "merges"), 0);
	CK(a);
	/* 2570 + 2571 -> o1@2570, whose buddy 2568 is metadata. */
	CHECK_EQ(al_free(a, &c, p16b), 0);
	CHECK_EQ(ctr(a, "merges"), 1);
	CK(a);
	/* 2569: buddy 2568 is metadata. */
	CHECK_EQ(al_free(a, &c, p16), 0);
	CHECK_EQ(ctr(a, "merges"), 1);
	CK(a);
	/* 2576 merges with 2578 (o1), 2580 (o2), 2584 (o3); 2592 is o5, so it stops at o4. */
	CHECK_EQ(al_free(a, &c, p32), 0);
	CHECK_EQ(ctr(a, "merges"), 4);
	CK(a);
	/* 2572: buddy 2568 is metadata. */
	CHECK_EQ(al_free(a, &c, p64), 0);
	CHECK_EQ(ctr(a, "merges"), 4);
	CK(a);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	CHECK_EQ(ctr(a, "frees"), 5);
	CHECK_EQ(ctr(a, "bytes_allocated"), ctr(a, "bytes_freed"));

	/* Back to the initial lists: the same answers again. */
	q = al_alloc(a, &c, 1, 0);
	CHECK_EQ((uintptr_t)q, base + 2569 * 16);
	CHECK_EQ(al_free(a, &c, q), 0);
	q = al_alloc(a, &c, 64, 0);
	CHECK_EQ((uintptr_t)q, base + 2572 * 16);
	CHECK_EQ(al_free(a, &c, q), 0);
	/* Only the upper half can hold 512 KiB. */
	big = al_alloc(a, &c, 512 * KIB, 0);
	CHECK_EQ((uintptr_t)big, base + 32768 * 16);
	CHECK_EQ(ctr(a, "splits"), 4);
	CK(a);
	CHECK_EQ(al_free(a, &c, big), 0);
	CK(a);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	CHECK_EQ(ctr(a, "lock_failed"), 0);
	CHECK(a->ops->owns(a, p16));
	CHECK(!a->ops->owns(a, &c));
	al_stack_destroy(a);
}

TEST(test_sizes)
{
	static const struct {
		size_t size, usable;
	} t[] = {
		{ 1, 16 },	{ 16, 16 },
		{ 17, 32 },	{ 64, 64 },
		{ 65, 128 },	{ 256, 256 },
		{ 1024, 1024 }, { 4096, 4096 },
		{ 4097, 8192 }, { 512 * KIB, 512 * KIB },
	};
	struct al_allocator *a = mk_default();
	struct al_ctx c;
	unsigned i;
	void *p;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		p = al_alloc(a, &c, t[i].size, 0);
		CHECK(p != NULL);
		CHECK_EQ(a->ops->usable_size(a, p), t[i].usable);
		CHECK_EQ((uintptr_t)p % (t[i].usable < 4096 ? t[i].usable : 4096), 0);
		CHECK_EQ(al_free(a, &c, p), 0);
		CHECK_EQ(a->ops->usable_size(a, p), 0); /* freed */
		CK(a);
	}
	c.err = 0;
	CHECK(al_alloc(a, &c, 0, 0) == NULL);
	CHECK_EQ(c.err, -EINVAL);
	c.err = 0;
	CHECK(al_alloc(a, &c, 512 * KIB + 1, 0) == NULL);
	CHECK_EQ(c.err, -EINVAL);
	c.err = 0;
	CHECK(al_alloc(a, &c, (size_t)-1, 0) == NULL);
	CHECK_EQ(c.err, -EINVAL);
	CHECK_EQ(ctr(a, "einval"), 3);
	CHECK_EQ(ctr(a, "allocs"), sizeof(t) / sizeof(t[0]));
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	CK(a);
	/* usable_size of what is not an allocated block start. */
	p = al_alloc(a, &c, 64, 0);
	CHECK_EQ(a->ops->usable_size(a, (char *)p + 16), 0);
	CHECK_EQ(a->ops->usable_size(a, (char *)p + 1), 0);
	CHECK_EQ(a->ops->usable_size(a, (void *)chunk_of(p)), 0); /* metadata */
	CHECK_EQ(a->ops->usable_size(a, &c), 0);
	CHECK_EQ(al_free(a, &c, p), 0);

	/* AL_ZERO zeroes what was asked, over memory that held a pattern. */
	p = al_alloc(a, &c, 100, 0);
	memset(p, 0x77, 100);
	CHECK_EQ(al_free(a, &c, p), 0);
	p = al_alloc(a, &c, 100, AL_ZERO);
	CHECK(all_bytes(p, 0, 100));
	CHECK_EQ(al_free(a, &c, p), 0);
	/* AL_NOSPIN takes the trylock path; uncontended it succeeds. */
	p = al_alloc(a, &c, 100, AL_NOSPIN);
	CHECK(p != NULL);
	CHECK_EQ(al_free(a, &c, p), 0);
	CHECK_EQ(al_free(a, &c, NULL), 0);
	CK(a);
	al_stack_destroy(a);
}

TEST(test_small_chunk)
{
	int64_t p[1][AL_MAX_PARAMS];
	struct al_allocator *a;
	struct al_ctx c;
	void *x, *y;

	/* 64 KiB: 12 orders, 2,664 B of metadata -> items [0, 167). */
	defaults(p);
	p[0][P_CHUNK_SIZE] = 64 * KIB;
	a = mk(p, 1);
	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	CK(a);
	x = al_alloc(a, &c, 16, 0);
	CHECK_EQ((uintptr_t)x & (64 * KIB - 1), 167 * 16);
	y = al_alloc(a, &c, 32 * KIB, 0);
	CHECK_EQ((uintptr_t)y & (64 * KIB - 1), 32 * KIB);
	CHECK_EQ(a->ops->usable_size(a, y), 32 * KIB);
	CK(a);
	CHECK(al_alloc(a, &c, 32 * KIB + 1, 0) == NULL);
	CHECK_EQ(c.err, -EINVAL);
	CHECK_EQ(al_free(a, &c, x), 0);
	CHECK_EQ(al_free(a, &c, y), 0);
	CK(a);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	al_stack_destroy(a);
}

/* ---- random sequence ---- */

struct obj {
	uint8_t *p;
	size_t size;
	uint8_t tag;
};

static void obj_fill(struct obj *o)
{
	size_t i;

	for (i = 0; i < o->size; i++)
		o->p[i] = (uint8_t)(o->tag + i * 7);
}

static bool obj_intact(const struct obj *o)
{
	size_t i;

	for (i = 0; i < o->size; i++)
		if (o->p[i] != (uint8_t)(o->tag + i * 7))
			return false;
	return true;
}

#define RSLOTS 192

TEST(test_random)
{
	int64_t p[1][AL_MAX_PARAMS];
	static struct obj o[RSLOTS];
	void *ptrs[16];
	struct al_allocator *a;
	uint64_t rng = 12345, r;
	unsigned step, i, s, n, got, nptrs;
	long long held = 0;
	struct al_ctx c;
	size_t size;
	bool zero;

	defaults(p);
	p[0][P_FILL] = 1;
	a = mk(p, 1);
	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	memset(o, 0, sizeof(o));
	for (step = 0; step < 4000; step++) {
		r = rng_next(&rng);
		s = (unsigned)(r % RSLOTS);
		if ((r >> 8) % 32 == 0) {
			/* Bulk: allocate into empty slots from s on. */
			size = 1 + (size_t)((r >> 16) % 2048);
			n = 1 + (unsigned)((r >> 32) % 16);
			got = (unsigned)al_alloc_bulk(a, &c, size, n, ptrs, 0);
			CHECK_EQ(got, 1u << (al_fls64(n) - 1));
			for (i = 0; i < got; i++) {
				struct obj *e = NULL;
				unsigned j;

				CHECK(all_bytes(ptrs[i], 0xD0, size));
				for (j = 0; j < RSLOTS && !e; j++)
					if (!o[(s + j) % RSLOTS].p)
						e = &o[(s + j) % RSLOTS];
				if (!e) {
					CHECK_EQ(al_free(a, &c, ptrs[i]), 0);
					continue;
				}
				e->p = ptrs[i];
				e->size = size;
				e->tag = (uint8_t)(step + i);
				obj_fill(e);
				held += (long long)a->ops->usable_size(a, e->p);
			}
		} else if ((r >> 8) % 32 == 1) {
			/* Bulk free of up to 16 live objects, with NULLs in between. */
			nptrs = 0;
			for (i = 0; i < RSLOTS && nptrs < 16; i += 5) {
				struct obj *e = &o[(s + i) % RSLOTS];

				if (!e->p) {
					ptrs[nptrs++] = NULL;
					continue;
				}
				CHECK(obj_intact(e));
				held -= (long long)a->ops->usable_size(a, e->p);
				ptrs[nptrs++] = e->p;
				e->p = NULL;
			}
			CHECK_EQ(al_free_bulk(a, &c, ptrs, nptrs), nptrs);
		} else if (!o[s].p) {
			/* Log-uniform sizes 1..64K. */
			size = 1 + (size_t)((r >> 16) % (1u << ((r >> 40) % 17)));
			zero = (r >> 60) == 0;
			o[s].p = al_alloc(a, &c, size, zero ? AL_ZERO : 0);
			CHECK(o[s].p != NULL);
			if (!o[s].p)
				break;
			CHECK(all_bytes(o[s].p, zero ? 0 : 0xD0, size));
			CHECK((size_t)a->ops->usable_size(a, o[s].p) >= size);
			CHECK((size_t)a->ops->usable_size(a, o[s].p) < 2 * size || size <= 16);
			o[s].size = size;
			o[s].tag = (uint8_t)step;
			obj_fill(&o[s]);
			held += (long long)a->ops->usable_size(a, o[s].p);
		} else {
			CHECK(obj_intact(&o[s]));
			held -= (long long)a->ops->usable_size(a, o[s].p);
			CHECK_EQ(al_free(a, &c, o[s].p), 0);
			o[s].p = NULL;
		}
		if (CK(a))
			break;
		if (held != ctr(a, "bytes_held")) {
			CHECK_EQ(held, ctr(a, "bytes_held"));
			break;
		}
	}
	for (s = 0; s < RSLOTS; s++) {
		if (!o[s].p)
			continue;
		CHECK(obj_intact(&o[s]));
		CHECK_EQ(al_free(a, &c, o[s].p), 0);
	}
	CK(a);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	CHECK_EQ(ctr(a, "allocs"), ctr(a, "frees"));
	CHECK_EQ(ctr(a, "invalid_frees"), 0);
	CHECK_EQ(ctr(a, "double_frees"), 0);
	CHECK(ctr(a, "alloc_bulk_calls") > 0);
	CHECK(ctr(a, "free_bulk_calls") > 0);
	CHECK(ctr(a, "splits") > 0);
	CHECK(ctr(a, "merges") > 0);
	al_stack_destroy(a);
}

/* ---- bulk ---- */

TEST(test_bulk)
{
	struct al_allocator *a = mk_default();
	void *out[8], *again[8], *ptrs[10];
	long long locks, merges;
	struct al_ctx c;
	uintptr_t base;
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	/* 64 B x 8 = one o5 block: o5@2592 is free, so no split. */
	locks = ctr(a, "lock_acquired");
	CHECK_EQ(al_alloc_bulk(a, &c, 64, 8, out, 0), 8);
	CHECK_EQ(ctr(a, "lock_acquired") - locks, 1);
	base = chunk_of(out[0]);
	CHECK_EQ((uintptr_t)out[0], base + 2592 * 16);
	for (i = 0; i < 8; i++) {
		CHECK_EQ((uintptr_t)out[i], (uintptr_t)out[0] + 64 * i);
		CHECK_EQ(a->ops->usable_size(a, out[i]), 64);
		memset(out[i], (int)i, 64);
	}
	CHECK_EQ(ctr(a, "splits"), 0);
	CHECK_EQ(ctr(a, "alloc_bulk_calls"), 1);
	CHECK_EQ(ctr(a, "bulk_objects"), 8);
	CHECK_EQ(ctr(a, "allocs"), 8);
	CHECK_EQ(ctr(a, "bytes_held"), 512);
	CK(a);
	/* Each object is freed alone; the eight merge back into o5@2592 (7 merges). */
	for (i = 0; i < 8; i++) {
		CHECK(all_bytes(out[i], (int)i, 64));
		CHECK_EQ(al_free(a, &c, out[i]), 0);
		CK(a);
	}
	CHECK_EQ(ctr(a, "merges"), 7);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	/* The initial state: the same block again, and a plain 16 B still gets 2569. */
	CHECK_EQ(al_alloc_bulk(a, &c, 64, 8, again, 0), 8);
	CHECK_EQ((uintptr_t)again[0], base + 2592 * 16);
	CHECK_EQ(ctr(a, "splits"), 0);
	/* free_bulk: one lock for all eight, NULLs skipped, returns n. */
	for (i = 0; i < 10; i++)
		ptrs[i] = i < 8 ? again[i] : NULL;
	locks = ctr(a, "lock_acquired");
	merges = ctr(a, "merges");
	CHECK_EQ(al_free_bulk(a, &c, ptrs, 10), 10);
	CHECK_EQ(ctr(a, "lock_acquired") - locks, 1);
	CHECK_EQ(ctr(a, "merges") - merges, 7);
	CHECK_EQ(ctr(a, "free_bulk_calls"), 1);
	CHECK_EQ(ctr(a, "bulk_freed"), 8);
	CHECK_EQ(ctr(a, "frees"), 16);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	CK(a);
	/* n = 5 gives 2^floor(log2 5) = 4, from one o4 block (o4@2576). */
	CHECK_EQ(al_alloc_bulk(a, &c, 64, 5, out, 0), 4);
	CHECK_EQ((uintptr_t)out[0], base + 2576 * 16);
	for (i = 1; i < 4; i++)
		CHECK_EQ((uintptr_t)out[i], (uintptr_t)out[0] + 64 * i);
	CK(a);
	CHECK_EQ(al_free_bulk(a, &c, out, 4), 4);
	CK(a);
	/* n is clamped so that order + k stays below 16: 256 KiB x 4 -> 2. */
	CHECK_EQ(al_alloc_bulk(a, &c, 256 * KIB, 4, out, 0), 2);
	CHECK_EQ((uintptr_t)out[0], base + 32768 * 16);
	CHECK_EQ((uintptr_t)out[1], base + (32768 + 16384) * 16);
	CHECK_EQ(al_free_bulk(a, &c, out, 2), 2);
	/* n = 1 and n = 0. */
	CHECK_EQ(al_alloc_bulk(a, &c, 16, 1, out, AL_ZERO), 1);
	CHECK_EQ((uintptr_t)out[0], base + 2569 * 16);
	CHECK(all_bytes(out[0], 0, 16));
	CHECK_EQ(al_free_bulk(a, &c, out, 1), 1);
	c.err = 0;
	CHECK_EQ(al_alloc_bulk(a, &c, 16, 0, out, 0), 0);
	CHECK_EQ(c.err, -EINVAL);
	c.err = 0;
	CHECK_EQ(al_alloc_bulk(a, &c, 0, 4, out, 0), 0);
	CHECK_EQ(c.err, -EINVAL);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	CK(a);
	al_stack_destroy(a);
}

/* ---- validation ---- */

TEST(test_validation)
{
	int64_t p[1][AL_MAX_PARAMS];
	struct al_allocator *a;
	uint8_t *x, *y, *v[3];
	struct al_ctx c;
	uintptr_t base;
	void *bulk[5];
	int local;

	defaults(p);
	p[0][P_FILL] = 1;
	a = mk(p, 1);
	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	x = al_alloc(a, &c, 64, 0); /* o2@2572 */
	y = al_alloc(a, &c, 64, 0); /* o2@2576 after splitting o4 (2 splits) */
	CHECK(all_bytes(x, 0xD0, 64));
	base = chunk_of(x);
	CHECK_EQ((uintptr_t)x, base + 2572 * 16);
	CHECK_EQ((uintptr_t)y, base + 2576 * 16);
	memset(x, 0x5A, 64);
	memset(y, 0xA5, 64);
#define UNTOUCHED()                                  \
	do {                                         \
		CHECK(all_bytes(x, 0x5A, 64));       \
		CHECK(all_bytes(y, 0xA5, 64));       \
		CHECK_EQ(ctr(a, "bytes_held"), 128); \
		CK(a);                               \
	} while (0)

	CHECK_EQ(al_free(a, &c, x + 8), -EINVAL); /* misaligned */
	CHECK_EQ(ctr(a, "free_misaligned"), 1);
	UNTOUCHED();
	CHECK_EQ(al_free(a, &c, x + 1), -EINVAL);
	CHECK_EQ(ctr(a, "free_misaligned"), 2);
	UNTOUCHED();
	CHECK_EQ(al_free(a, &c, x + 16), -EINVAL); /* interior: 2573 */
	CHECK_EQ(al_free(a, &c, x + 48), -EINVAL); /* interior: 2575 */
	CHECK_EQ(ctr(a, "free_not_block_start"), 2);
	UNTOUCHED();
	CHECK_EQ(al_free(a, &c, &local), -EINVAL);		     /* outside the arena */
	CHECK_EQ(al_free(a, &c, (void *)(base + 3 * MIB)), -EINVAL); /* chunk not grown */
	CHECK_EQ(ctr(a, "free_outside"), 2);
	UNTOUCHED();
	CHECK_EQ(al_free(a, &c, (void *)base), -EINVAL);	       /* metadata: o11@0 */
	CHECK_EQ(al_free(a, &c, (void *)(base + 2568 * 16)), -EINVAL); /* metadata: o0@2568 */
	CHECK_EQ(al_free(a, &c, (void *)(base + 16)), -EINVAL);
	CHECK_EQ(ctr(a, "free_metadata"), 3);
	UNTOUCHED();
	CHECK_EQ(ctr(a, "invalid_frees"), 9);
	CHECK_EQ(ctr(a, "double_frees"), 0);
	CHECK_EQ(ctr(a, "frees"), 0);

	/* Free blocks: a start is a double free, an interior address is not a start. */
	CHECK_EQ(al_free(a, &c, (void *)(base + 2569 * 16)), -EINVAL);	/* free o0 */
	CHECK_EQ(al_free(a, &c, (void *)(base + 32768 * 16)), -EINVAL); /* free o15 */
	CHECK_EQ(ctr(a, "double_frees"), 2);
	CHECK_EQ(al_free(a, &c, (void *)(base + 32769 * 16)), -EINVAL);
	CHECK_EQ(ctr(a, "free_not_block_start"), 3);
	UNTOUCHED();

	/* A real double free. */
	CHECK_EQ(al_free(a, &c, y), 0);
#ifndef T_ASAN
	CHECK(all_bytes(y, 0xDF, 8)); /* 0xDF fill; bytes 8..15 are the free-list header */
	CHECK(all_bytes(y + 16, 0xDF, 48));
#endif
	CHECK(all_bytes(x, 0x5A, 64));
	CHECK_EQ(ctr(a, "bytes_held"), 64);
	CK(a);
	CHECK_EQ(al_free(a, &c, y), -EINVAL);
	CHECK_EQ(ctr(a, "double_frees"), 3);
	CHECK_EQ(ctr(a, "bytes_held"), 64);
	CHECK(all_bytes(x, 0x5A, 64));
	CK(a);
	CHECK_EQ(ctr(a, "invalid_frees"), 10);
	CHECK_EQ(ctr(a, "frees"), 1);

	/* free_bulk counts and skips the bad ones, frees the good ones, and returns how
	 * many entries were freed (the NULL one counts) with -EINVAL in c->err. */
	v[0] = al_alloc(a, &c, 32, 0);
	v[1] = al_alloc(a, &c, 32, 0);
	v[2] = al_alloc(a, &c, 32, 0);
	bulk[0] = v[0];
	bulk[1] = v[1] + 16; /* interior */
	bulk[2] = NULL;
	bulk[3] = v[2];
	bulk[4] = v[0]; /* double free within the batch */
	c.err = 0;
	CHECK_EQ(al_free_bulk(a, &c, bulk, 5), 3);
	CHECK_EQ(c.err, -EINVAL);
	CHECK_EQ(ctr(a, "invalid_frees"), 11);
	CHECK_EQ(ctr(a, "double_frees"), 4);
	CHECK_EQ(ctr(a, "bulk_freed"), 2);
	CHECK_EQ(a->ops->usable_size(a, v[1]), 32);
	CHECK_EQ(ctr(a, "bytes_held"), 64 + 32);
	CK(a);
	CHECK_EQ(al_free(a, &c, v[1]), 0);
	CHECK_EQ(al_free(a, &c, x), 0);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	CK(a);
#undef UNTOUCHED
	al_stack_destroy(a);
}

/* check() itself: a corrupted allocated bit is caught, with a precise message. */
TEST(test_check_detects)
{
	struct al_allocator *a = mk_default();
	struct al_ctx c;
	char err[256] = "";
	uint8_t *bits;
	void *x;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	x = al_alloc(a, &c, 64, 0);
	/* allocated[] starts at byte 32768 of the chunk; 2569 is bit 1 of byte 321. */
	bits = (uint8_t *)chunk_of(x) + 32768;
	bits[2569 / 8] |= 1u << (2569 % 8);
	CHECK_EQ(a->ops->check(a, err, sizeof(err)), -EFAULT);
	CHECK(strstr(err, "2569") != NULL);
	bits[2569 / 8] &= (uint8_t) ~(1u << (2569 % 8));
	/* A stray allocated bit inside an allocated block. */
	bits[2573 / 8] |= 1u << (2573 % 8);
	CHECK_EQ(a->ops->check(a, err, sizeof(err)), -EFAULT);
	CHECK(strstr(err, "not a block start") != NULL);
	bits[2573 / 8] &= (uint8_t) ~(1u << (2573 % 8));
	CK(a);
	CHECK_EQ(al_free(a, &c, x), 0);
	CK(a);
	al_stack_destroy(a);
}

/*
 * libarena's run-time metadata checks, made where libarena makes them: a
 * header read from a block whose allocated bit is set (idx_to_header) and an
 * allocated bit set twice (idx_set_allocated) are each counted once.
 */
TEST(test_metadata_faults)
{
	struct al_allocator *a = mk_default();
	struct al_ctx c;
	uint8_t *bits;
	void *x, *y;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	x = al_alloc(a, &c, 64, 0); /* o2 @2572 */
	CHECK_EQ(ctr(a, "metadata_faults"), 0);
	/* Mark the free o1 block @2570, the only one on its list, allocated. */
	bits = (uint8_t *)chunk_of(x) + 32768;
	bits[2570 / 8] |= 1u << (2570 % 8);
	y = al_alloc(a, &c, 32, 0);
	CHECK(y == (void *)((uintptr_t)chunk_of(x) + 2570 * 16));
	/* Its header read to unlink it, the list head's header (the same
	 * block), and setting its allocated bit: three faults. */
	CHECK_EQ(ctr(a, "metadata_faults"), 3);
	CK(a);
	CHECK_EQ(al_free(a, &c, y), 0);
	CHECK_EQ(al_free(a, &c, x), 0);
	CHECK_EQ(ctr(a, "metadata_faults"), 3);
	CHECK_EQ(ctr(a, "double_frees"), 0);
	CK(a);
	al_stack_destroy(a);
}

#ifdef T_ASAN
/* ASan sees exactly the requested bytes; free blocks are poisoned. */
TEST(test_asan_poison)
{
	struct al_allocator *a = mk_default();
	struct al_ctx c;
	uint8_t *x;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	x = al_alloc(a, &c, 20, 0);
	CHECK(!__asan_address_is_poisoned(x));
	CHECK(!__asan_address_is_poisoned(x + 19));
	CHECK(__asan_address_is_poisoned(x + 20));
	CHECK(__asan_address_is_poisoned(x + 31));
	CHECK(!__asan_address_is_poisoned((void *)chunk_of(x))); /* metadata */
	CHECK_EQ(al_free(a, &c, x), 0);
	CHECK(__asan_address_is_poisoned(x));
	CHECK(__asan_address_is_poisoned(x + 19));
	x = al_alloc(a, &c, 8, 0);
	CHECK(!__asan_address_is_poisoned(x + 7));
	CHECK(__asan_address_is_poisoned(x + 8)); /* the header granule is re-poisoned */
	CHECK_EQ(al_free(a, &c, x), 0);
	al_stack_destroy(a);
}
#endif

/* ---- exhaustion, growth ---- */

TEST(test_exhaustion)
{
	int64_t p[1][AL_MAX_PARAMS];
	struct al_allocator *a;
	void *big[4];
	struct al_ctx c;
	unsigned n, i, round;

	/*
	 * 2 MiB = 2 chunks. In each, only the upper half (o15@32768) can hold
	 * 512 KiB: the lower half holds the metadata. So exactly 2 fit.
	 */
	defaults(p);
	p[0][P_ARENA_LIMIT] = 2 * MIB;
	a = mk(p, 1);
	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (round = 1; round <= 2; round++) {
		for (n = 0; n < 4; n++) {
			c.err = 0;
			big[n] = al_alloc(a, &c, 512 * KIB, 0);
			if (!big[n])
				break;
			CHECK_EQ(idx_of(big[n]), 32768);
			CK(a);
		}
		CHECK_EQ(n, 2);
		CHECK_EQ(c.err, -ENOMEM);
		CHECK_EQ(ctr(a, "enomem"), round);
		CHECK_EQ(ctr(a, "chunks"), 2);
		CHECK_EQ(ctr(a, "chunks_committed"), 2);
		CHECK_EQ(ctr(a, "arena_bytes_committed"), 2 * MIB);
		/* Smaller blocks still fit in the lower halves. */
		big[n] = al_alloc(a, &c, 256 * KIB, 0);
		CHECK(big[n] != NULL);
		CHECK_EQ(idx_of(big[n]), 16384);
		for (i = 0; i <= n; i++)
			CHECK_EQ(al_free(a, &c, big[i]), 0);
		CK(a);
		CHECK_EQ(ctr(a, "bytes_held"), 0);
	}
	al_stack_destroy(a);
}

TEST(test_growth)
{
	struct al_allocator *a = mk_default();
	void *x, *y, *s, *h1, *h2, *m[20];
	struct al_ctx c;
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	x = al_alloc(a, &c, 512 * KIB, 0); /* chunk A's upper half */
	y = al_alloc(a, &c, 512 * KIB, 0); /* no fit: chunk B grows */
	CHECK(x && y);
	CHECK(chunk_of(x) != chunk_of(y));
	CHECK_EQ(idx_of(y), 32768);
	CHECK_EQ(ctr(a, "chunks"), 2);
	CK(a);
	/* Newest first: B's o0@2569, not A's. */
	s = al_alloc(a, &c, 16, 0);
	CHECK_EQ((uintptr_t)s, chunk_of(y) + 2569 * 16);
	CHECK_EQ(al_free(a, &c, s), 0);
	/* First fit: B's o14 first, then A's, then a new chunk. */
	h1 = al_alloc(a, &c, 256 * KIB, 0);
	h2 = al_alloc(a, &c, 256 * KIB, 0);
	CHECK_EQ((uintptr_t)h1, chunk_of(y) + 16384 * 16);
	CHECK_EQ((uintptr_t)h2, chunk_of(x) + 16384 * 16);
	CHECK_EQ(ctr(a, "chunks"), 2);
	CK(a);
	/* 20 x 64 KiB: A and B have 2 x (o12 + o13 = 192 KiB) = 6 blocks, then chunks grow. */
	for (i = 0; i < 20; i++) {
		m[i] = al_alloc(a, &c, 64 * KIB, 0);
		CHECK(m[i] != NULL);
	}
	CK(a);
	/* 6 from A and B; 14 more need 14 / (1 + 2 + 4 + 8 = 15 per fresh chunk) = 1 chunk. */
	CHECK_EQ(ctr(a, "chunks"), 3);
	for (i = 6; i < 20; i++)
		CHECK(chunk_of(m[i]) != chunk_of(x) && chunk_of(m[i]) != chunk_of(y));
	for (i = 0; i < 20; i++)
		CHECK_EQ(al_free(a, &c, m[i]), 0);
	CHECK_EQ(al_free(a, &c, x), 0);
	CHECK_EQ(al_free(a, &c, y), 0);
	CHECK_EQ(al_free(a, &c, h1), 0);
	CHECK_EQ(al_free(a, &c, h2), 0);
	CK(a);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	CHECK_EQ(ctr(a, "chunks"), 3); /* chunks are kept until destroy */
	al_stack_destroy(a);
}

/* ---- locks ---- */

TEST(test_trylock_budget)
{
	int64_t p[1][AL_MAX_PARAMS];
	struct al_allocator *a;
	void *v[64];
	struct al_ctx c;
	unsigned i;

	defaults(p);
	p[0][P_LOCK_BUDGET] = 0;
	p[0][P_LOCK_TIMING] = 0;
	a = mk(p, 2);
	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 1);
	for (i = 0; i < 64; i++) {
		v[i] = al_alloc(a, &c, 16 + i * 8, 0);
		CHECK(v[i] != NULL);
	}
	for (i = 0; i < 64; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CK(a);
	CHECK_EQ(ctr(a, "lock_acquired"), 128);
	CHECK_EQ(ctr(a, "lock_failed"), 0);
	CHECK_EQ(ctr(a, "lock_contended"), 0);
	CHECK_EQ(ctr(a, "lock_hold_ns"), -1); /* times are reported at stats=full only */
	CHECK_EQ(ctr(a, "lock_failed_allocs"), 0);
	CHECK_EQ(ctr(a, "lock_failed_frees"), 0);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	al_stack_destroy(a);
}

/* Lock times at stats=full: waits always, holds when lock_timing is on; an
 * unmeasured hold time is not reported (-1 here), never 0. */
TEST(test_lock_times_at_full)
{
	int64_t p[1][AL_MAX_PARAMS];
	unsigned old = al_stats_level_set(AL_STATS_FULL), timing;
	struct al_allocator *a;
	struct al_ctx c;
	void *v;

	al_ctx_init(&c, 0);
	for (timing = 0; timing < 2; timing++) {
		defaults(p);
		p[0][P_LOCK_TIMING] = timing;
		a = mk(p, 1);
		CHECK(a != NULL);
		if (!a)
			break;
		v = al_alloc(a, &c, 64, 0);
		CHECK_EQ(al_free(a, &c, v), 0);
		CHECK_EQ(ctr(a, "lock_acquired"), 2);
		CHECK_EQ(ctr(a, "lock_wait_ns"), 0); /* never contended */
		if (timing)
			CHECK(ctr(a, "lock_hold_ns") >= 0);
		else
			CHECK_EQ(ctr(a, "lock_hold_ns"), -1);
		al_stack_destroy(a);
	}
	al_stats_level_set(old);
}

/* stats=off: nothing is reported, but bytes_held (the leak check) and
 * check()'s comparison with the blocks still hold, through bulk calls too. */
TEST(test_stats_off_bytes_held)
{
	unsigned old = al_stats_level_set(AL_STATS_OFF);
	struct al_allocator *a = mk_default();
	void *v[8], *w[4];
	struct al_ctx c;
	int i;

	al_stats_level_set(old);
	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 8; i++)
		v[i] = al_alloc(a, &c, 16u << i, 0);
	CHECK_EQ(al_alloc_bulk(a, &c, 100, 4, w, 0), 4);
	CHECK_EQ(ctr(a, "bytes_held"), (16 << 8) - 16 + 4 * 128);
	CHECK_EQ(ctr(a, "allocs"), -1);
	CHECK_EQ(ctr(a, "lock_acquired"), -1);
	CK(a);
	for (i = 0; i < 8; i += 2)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(al_free_bulk(a, &c, w, 4), 4);
	CHECK_EQ(ctr(a, "bytes_held"), 32 + 128 + 512 + 2048);
	CK(a);
	for (i = 1; i < 8; i += 2)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	CK(a);
	al_stack_destroy(a);
}

/* ---- multi-thread stress ---- */

#define NTHREADS 4
#define TSLOTS	 48
#define HANDOFF	 16
#define ITERS	 2000

struct stress {
	struct al_allocator *a;
	void *handoff[HANDOFF]; /* exchanged atomically: objects freed by another thread */
};

struct worker {
	struct stress *st;
	unsigned id;
	uint64_t rng;
	unsigned bad_pattern, bad_alloc, bad_free, cross;
};

/* An object: u32 size, u32 tag, then bytes derived from the tag. */
static void s_fill(uint8_t *p, uint32_t size, uint32_t tag)
{
	uint32_t i;

	memcpy(p, &size, 4);
	memcpy(p + 4, &tag, 4);
	for (i = 8; i < size; i++)
		p[i] = (uint8_t)(tag * 31 + i);
}

static bool s_intact(const uint8_t *p)
{
	uint32_t size, tag, i;

	memcpy(&size, p, 4);
	memcpy(&tag, p + 4, 4);
	if (size < 8 || size > 4096)
		return false;
	for (i = 8; i < size; i++)
		if (p[i] != (uint8_t)(tag * 31 + i))
			return false;
	return true;
}

static void s_free(struct worker *w, struct al_ctx *c, void *p)
{
	if (!s_intact(p))
		w->bad_pattern++;
	if (al_free(w->st->a, c, p))
		w->bad_free++;
}

static void *stress_thread(void *arg)
{
	struct worker *w = arg;
	struct al_allocator *a = w->st->a;
	void *mine[TSLOTS] = { 0 }, *batch[8];
	uint32_t seq = 0, size;
	unsigned it, s, i, n;
	struct al_ctx c;
	uint64_t r;

	al_ctx_init(&c, w->id);
	for (it = 0; it < ITERS; it++) {
		r = rng_next(&w->rng);
		s = (unsigned)(r % TSLOTS);
		size = 8 + (uint32_t)((r >> 16) % (1u << (3 + (r >> 32) % 10)));
		if (size > 4096)
			size = 4096;
		switch ((r >> 8) % 8) {
		case 0: /* hand an object over, free whatever was there */
			if (!mine[s])
				break;
			mine[s] = __atomic_exchange_n(&w->st->handoff[(r >> 40) % HANDOFF], mine[s],
						      __ATOMIC_ACQ_REL);
			if (mine[s]) {
				w->cross++;
				s_free(w, &c, mine[s]);
				mine[s] = NULL;
			}
			break;
		case 1: /* bulk alloc then bulk free */
			n = (unsigned)al_alloc_bulk(a, &c, size, 8, batch, 0);
			if (n != 8)
				w->bad_alloc++;
			for (i = 0; i < n; i++)
				s_fill(batch[i], size, w->id << 24 | seq++);
			for (i = 0; i < n; i++)
				if (!s_intact(batch[i]))
					w->bad_pattern++;
			if (n && al_free_bulk(a, &c, batch, n) != (int)n)
				w->bad_free++;
			break;
		default:
			if (mine[s]) {
				s_free(w, &c, mine[s]);
				mine[s] = NULL;
				break;
			}
			mine[s] = al_alloc(a, &c, size, 0);
			if (!mine[s]) {
				w->bad_alloc++;
				break;
			}
			s_fill(mine[s], size, w->id << 24 | seq++);
			break;
		}
	}
	for (s = 0; s < TSLOTS; s++)
		if (mine[s])
			s_free(w, &c, mine[s]);
	return NULL;
}

TEST(test_stress)
{
	int64_t p[1][AL_MAX_PARAMS];
	struct worker w[NTHREADS];
	pthread_t th[NTHREADS];
	struct stress st;
	struct al_ctx c;
	unsigned i, cross = 0;

	defaults(p);
	p[0][P_FILL] = 1;
	p[0][P_LOCK_BUDGET] = 10000000000ll; /* no spurious failure on a loaded machine */
	memset(&st, 0, sizeof(st));
	st.a = mk(p, NTHREADS);
	CHECK(st.a != NULL);
	if (!st.a)
		return;
	for (i = 0; i < NTHREADS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].st = &st;
		w[i].id = i;
		w[i].rng = 1000 + i;
		CHECK_EQ(pthread_create(&th[i], NULL, stress_thread, &w[i]), 0);
	}
	for (i = 0; i < NTHREADS; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ(w[i].bad_pattern, 0);
		CHECK_EQ(w[i].bad_alloc, 0);
		CHECK_EQ(w[i].bad_free, 0);
		cross += w[i].cross;
	}
	CHECK(cross > 0);
	al_ctx_init(&c, 0);
	for (i = 0; i < HANDOFF; i++) {
		if (!st.handoff[i])
			continue;
		CHECK(s_intact(st.handoff[i]));
		CHECK_EQ(al_free(st.a, &c, st.handoff[i]), 0);
	}
	CK(st.a);
	CHECK_EQ(ctr(st.a, "bytes_held"), 0);
	CHECK_EQ(ctr(st.a, "allocs"), ctr(st.a, "frees"));
	CHECK_EQ(ctr(st.a, "invalid_frees"), 0);
	CHECK_EQ(ctr(st.a, "double_frees"), 0);
	CHECK_EQ(ctr(st.a, "lock_failed"), 0);
	CHECK(ctr(st.a, "lock_acquired") > NTHREADS * ITERS / 2);
	al_stack_destroy(st.a);
}

/*
 * Contention with lock_budget = 0: waiters give up almost at once, so
 * allocations and frees fail with the lock. Every failure is counted once,
 * failed frees can be retried, and a chunk grown while the lock then failed
 * is linked by a later allocation instead of being leaked.
 *
 * After a failure a thread waits (yielding) until the lock has been taken
 * again, or until every other thread waits or is done, so abandoned tickets
 * stay few: a client that retries at once while the holder is descheduled
 * piles up abandoned tickets without bound, past AL_LOCK_SLOTS.
 */
#define CTHREADS 4
#define CITERS	 1500
#define CSLOTS	 16

struct cshared {
	struct al_allocator *a;
	unsigned waiting; /* threads in backoff() */
	unsigned done;	  /* threads finished */
};

struct cworker {
	struct cshared *sh;
	unsigned id;
	uint64_t rng;
	unsigned bad, timeouts;
};

static long long lock_acquired_now(struct al_allocator *a)
{
	struct al_stats st;
	unsigned i;

	memset(&st, 0, sizeof(st));
	a->ops->stats(a, &st);
	for (i = 0; i < st.n; i++)
		if (!strcmp(st.v[i].name, "lock_acquired"))
			return (long long)st.v[i].value;
	return -1;
}

static void backoff(struct cworker *w)
{
	long long snap = lock_acquired_now(w->sh->a);

	w->timeouts++;
	__atomic_add_fetch(&w->sh->waiting, 1, __ATOMIC_SEQ_CST);
	while (lock_acquired_now(w->sh->a) == snap &&
	       __atomic_load_n(&w->sh->waiting, __ATOMIC_SEQ_CST) +
			       __atomic_load_n(&w->sh->done, __ATOMIC_SEQ_CST) <
		       CTHREADS)
		sched_yield();
	__atomic_sub_fetch(&w->sh->waiting, 1, __ATOMIC_SEQ_CST);
}

static void c_free(struct cworker *w, struct al_ctx *c, void *p)
{
	int ret;

	while ((ret = al_free(w->sh->a, c, p)) == -ETIMEDOUT)
		backoff(w);
	if (ret)
		w->bad++;
}

static void *contend_thread(void *arg)
{
	struct cworker *w = arg;
	void *mine[CSLOTS] = { 0 };
	struct al_ctx c;
	unsigned it, s;
	uint64_t r;

	al_ctx_init(&c, w->id);
	for (it = 0; it < CITERS; it++) {
		r = rng_next(&w->rng);
		s = (unsigned)(r % CSLOTS);
		if (mine[s]) {
			c_free(w, &c, mine[s]);
			mine[s] = NULL;
			continue;
		}
		c.err = 0;
		mine[s] = al_alloc(w->sh->a, &c, 8 * KIB + (size_t)((r >> 16) % (24 * KIB)), 0);
		if (mine[s])
			memset(mine[s], (int)w->id, 8);
		else if (c.err == -ETIMEDOUT)
			backoff(w);
		else
			w->bad++;
	}
	for (s = 0; s < CSLOTS; s++)
		if (mine[s])
			c_free(w, &c, mine[s]);
	__atomic_add_fetch(&w->sh->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

TEST(test_contention_trylock)
{
	int64_t p[1][AL_MAX_PARAMS];
	struct cworker w[CTHREADS];
	pthread_t th[CTHREADS];
	struct cshared sh;
	struct al_allocator *a;
	long long committed, lf;
	void *v[256];
	struct al_ctx c;
	unsigned i, n;

	defaults(p);
	p[0][P_CHUNK_SIZE] = 64 * KIB; /* 32 KiB blocks: chunks grow often */
	p[0][P_ARENA_LIMIT] = 256 * MIB;
	p[0][P_LOCK_BUDGET] = 0;
	a = mk(p, CTHREADS);
	CHECK(a != NULL);
	if (!a)
		return;
	memset(&sh, 0, sizeof(sh));
	sh.a = a;
	for (i = 0; i < CTHREADS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].sh = &sh;
		w[i].id = i;
		w[i].rng = 77 + i;
		CHECK_EQ(pthread_create(&th[i], NULL, contend_thread, &w[i]), 0);
	}
	for (i = 0; i < CTHREADS; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ(w[i].bad, 0);
	}
	CK(a);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	CHECK_EQ(ctr(a, "allocs"), ctr(a, "frees"));
	/* Each failed acquisition is counted once, by what it failed. */
	lf = ctr(a, "lock_failed");
	CHECK_EQ(lf, ctr(a, "lock_failed_allocs") + ctr(a, "lock_failed_frees"));
	/* No chunk is lost: linked + still pending = committed. */
	committed = ctr(a, "chunks_committed");
	CHECK_EQ(committed,
		 ctr(a, "chunks") + ctr(a, "chunks_deferred") - ctr(a, "chunks_relinked"));
	/* Fill every linked chunk's upper half; the next miss links the pending ones first. */
	al_ctx_init(&c, 0);
	for (n = 0; n < 256 && ctr(a, "chunks_relinked") < ctr(a, "chunks_deferred"); n++) {
		v[n] = al_alloc(a, &c, 32 * KIB, 0);
		CHECK(v[n] != NULL);
		if (!v[n])
			break;
	}
	CHECK_EQ(ctr(a, "chunks_committed"), committed); /* relinked, not grown */
	CHECK_EQ(ctr(a, "chunks"), committed);
	for (i = 0; i < n; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CK(a);
	CHECK_EQ(ctr(a, "bytes_held"), 0);
	printf("     (lock_budget=0: %lld failed acquisitions, %lld chunks deferred)\n", lf,
	       ctr(a, "chunks_deferred"));
	al_stack_destroy(a);
}

int main(void)
{
	RUN(test_registry);
	RUN(test_scripted);
	RUN(test_sizes);
	RUN(test_small_chunk);
	RUN(test_metadata_faults);
	RUN(test_random);
	RUN(test_bulk);
	RUN(test_validation);
	RUN(test_check_detects);
#ifdef T_ASAN
	RUN(test_asan_poison);
#endif
	RUN(test_exhaustion);
	RUN(test_growth);
	RUN(test_trylock_budget);
	RUN(test_lock_times_at_full);
	RUN(test_stats_off_bytes_held);
	RUN(test_stress);
	RUN(test_contention_trylock);
	return TEST_SUMMARY();
}
