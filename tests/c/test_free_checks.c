/* SPDX-License-Identifier: MIT */
/*
 * Misuse of free and free_bulk: the slab layers refuse a free of the object
 * already at the head of its freelist (-EINVAL, nothing written); a double
 * free that slips past them and makes a freelist cyclic is found by a
 * bounded walk and reported (a counter, -EFAULT from check() and from the
 * allocation that meets it), never walked forever; every native and generic
 * free_bulk refuses wild and repeated entries one by one, frees the others
 * exactly once and says how many it freed.
 */
#include <errno.h>

#include "t_spec.h"

#define S(a, l, name) t_stat((a), (l), (name))
#define WILD	      ((void *)0xdeadbeef000ull)

static int check_rc(struct al_allocator *a)
{
	char err[512];

	err[0] = 0;
	return al_call_check(a, err, sizeof(err));
}

TEST(test_slab_double_free_at_head)
{
	static const char *const specs[] = { "slab(zero=true)", "slab(form=sheaves)" };
	unsigned i;

	for (i = 0; i < 2; i++) {
		struct al_allocator *a = t_spec(specs[i], 1);
		struct al_ctx c;
		void *p, *q;

		CHECK(a != NULL);
		if (!a)
			continue;
		al_ctx_init(&c, 0);
		p = al_alloc(a, &c, 64, 0);
		q = al_alloc(a, &c, 64, 0);
		CHECK(p && q);
		CHECK_EQ(al_free(a, &c, p), 0);
		CHECK_EQ(al_free(a, &c, p), -EINVAL);
		CHECK_EQ(S(a, 0, "double_frees"), 1);
		CHECK_EQ(S(a, 0, "kfrees"), 1);
		CHECK_EQ(S(a, 0, "bytes_held"), 64);
		t_check(a);
		/* the refused free wrote nothing: p comes back once, then q's slot */
		CHECK(al_alloc(a, &c, 64, 0) == p);
		CHECK_EQ(al_free(a, &c, p), 0);
		CHECK_EQ(al_free(a, &c, q), 0);
		t_teardown(a);
	}
}

TEST(test_slab_cycle_found_by_drain)
{
	struct al_allocator *a = t_spec("slab(zero=true)", 1);
	struct al_ctx c;
	void *p, *q, *keep;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 64, 0);
	q = al_alloc(a, &c, 64, 0);
	keep = al_alloc(a, &c, 64, 0);
	CHECK_EQ(al_free(a, &c, p), 0);
	CHECK_EQ(al_free(a, &c, q), 0);
	/* p is second on the CPU freelist, not its head: accepted, and the
	 * list is now the cycle p -> q -> p */
	CHECK_EQ(al_free(a, &c, p), 0);
	CHECK_EQ(S(a, 0, "corrupt_freelists"), 0);
	al_stack_drain(a, &c, AL_DRAIN_ALL); /* returns: the walk is bounded */
	CHECK_EQ(S(a, 0, "corrupt_freelists"), 1);
	CHECK_EQ(check_rc(a), -EFAULT);
	/* still usable for what the cycle did not touch */
	CHECK_EQ(al_free(a, &c, keep), 0);
	CHECK(al_alloc(a, &c, 128, 0) != NULL);
	al_stack_destroy(a);
}

TEST(test_slab_cycle_found_by_alloc)
{
	struct al_allocator *a = t_spec("slab(form=sheaves)", 1);
	struct al_ctx c;
	void *p, *q, *out[200];
	int got;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 64, 0);
	q = al_alloc(a, &c, 64, 0);
	CHECK_EQ(al_free(a, &c, p), 0);
	CHECK_EQ(al_free(a, &c, q), 0);
	CHECK_EQ(al_free(a, &c, p), 0); /* behind q: a cycle p -> q -> p */
	c.err = 0;
	got = al_alloc_bulk(a, &c, 64, 200, out, 0);
	/* the only partial slab is cyclic: the allocation fails with -EFAULT and
	 * the slab's objects are dropped (leaked), never handed out twice */
	CHECK_EQ(got, 0);
	CHECK_EQ(c.err, -EFAULT);
	CHECK_EQ(S(a, 0, "corrupt_freelists"), 1);
	CHECK_EQ(check_rc(a), -EFAULT);
	/* the slab is off every list: the next allocation takes a new one */
	got = al_alloc_bulk(a, &c, 64, 200, out, 0);
	CHECK_EQ(got, 200);
	for (int i = 0; i < got; i++)
		CHECK(out[i] != p && out[i] != q);
	al_stack_destroy(a);
}

TEST(test_self_linked_slab_freelist)
{
	struct al_allocator *a = t_spec("slab(form=sheaves)", 1);
	struct al_ctx c;
	void *p, *out[8];

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 256, 0);
	CHECK_EQ(al_free(a, &c, p), 0);
	*(void **)p = p; /* a use after free that links p to itself */
	c.err = 0;
	CHECK_EQ(al_alloc_bulk(a, &c, 256, 8, out, 0), 0);
	CHECK_EQ(c.err, -EFAULT);
	CHECK_EQ(S(a, 0, "corrupt_freelists"), 1);
	CHECK_EQ(al_alloc_bulk(a, &c, 256, 8, out, 0), 8);
	for (int i = 0; i < 8; i++)
		CHECK(out[i] != p);
	al_stack_destroy(a);
}

/* Three live blocks, then one batch with a wild pointer, an interior one, a
 * NULL and every block repeated: 3 + 1 (NULL) freed, the rest refused. */
static void bulk_refuses(const char *spec, size_t size)
{
	struct al_allocator *a = t_spec(spec, 1);
	struct al_ctx c;
	void *v[3], *bulk[9];
	int i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 3; i++) {
		v[i] = al_alloc(a, &c, size, 0);
		CHECK(v[i] != NULL);
	}
	bulk[0] = v[0];
	bulk[1] = WILD;
	bulk[2] = v[1];
	bulk[3] = v[0];
	bulk[4] = NULL;
	bulk[5] = v[2];
	bulk[6] = v[1];
	bulk[7] = (char *)v[2] + 8;
	bulk[8] = v[2];
	c.err = 0;
	CHECK_EQ(al_free_bulk(a, &c, bulk, 9), 4);
	CHECK_EQ(c.err, -EINVAL);
	/* freed once each: nothing is held, the invariants hold, and each block
	 * is free (a second free is refused, where the layer can tell) */
	al_stack_drain(a, &c, AL_DRAIN_ALL);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_check(a);
	if (a->desc->features & AL_F_VALIDATES)
		for (i = 0; i < 3; i++)
			CHECK_EQ(al_free(a, &c, v[i]), -EINVAL);
	/* and the allocator still hands out distinct blocks */
	for (i = 0; i < 3; i++)
		v[i] = al_alloc(a, &c, size, 0);
	CHECK(v[0] && v[1] && v[2] && v[0] != v[1] && v[1] != v[2] && v[0] != v[2]);
	for (i = 0; i < 3; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	t_teardown(a);
}

TEST(test_free_bulk_refuses_wild_and_repeated)
{
	bulk_refuses("buddy", 64);
	bulk_refuses("pages", 4096);
	bulk_refuses("vmalloc > pages", 8192);
	bulk_refuses("slab", 64);
	bulk_refuses("slab(form=sheaves)", 64);
}

TEST(test_free_bulk_whole_batch_valid)
{
	static const char *const specs[] = { "buddy", "pages", "slab", "vmalloc > pages" };
	unsigned i, k;

	for (i = 0; i < 4; i++) {
		struct al_allocator *a = t_spec(specs[i], 1);
		struct al_ctx c;
		void *v[16];

		CHECK(a != NULL);
		if (!a)
			continue;
		al_ctx_init(&c, 0);
		for (k = 0; k < 16; k++)
			v[k] = al_alloc(a, &c, 4096, 0);
		c.err = 0;
		CHECK_EQ(al_free_bulk(a, &c, v, 16), 16);
		CHECK_EQ(c.err, 0);
		t_teardown(a);
	}
}

TEST(test_front_layers_refuse_double_free)
{
	static const char *const specs[] = { "nolock > slab", "sheaves > slab(form=sheaves)",
					     "nolock > sheaves > slab(form=sheaves)" };
	unsigned i;

	for (i = 0; i < 3; i++) {
		struct al_allocator *a = t_spec(specs[i], 1);
		struct al_ctx c;
		void *p;

		CHECK(a != NULL);
		if (!a)
			continue;
		al_ctx_init(&c, 0);
		p = al_alloc(a, &c, 64, 0);
		CHECK(p != NULL);
		CHECK_EQ(al_free(a, &c, p), 0);
		CHECK_EQ(al_free(a, &c, p), -EINVAL);
		CHECK_EQ(S(a, 0, "bytes_held"), 0);
		t_teardown(a);
	}
}

int main(void)
{
	RUN(test_slab_double_free_at_head);
	RUN(test_slab_cycle_found_by_drain);
	RUN(test_slab_cycle_found_by_alloc);
	RUN(test_self_linked_slab_freelist);
	RUN(test_free_bulk_refuses_wild_and_repeated);
	RUN(test_free_bulk_whole_batch_valid);
	RUN(test_front_layers_refuse_double_free);
	return TEST_SUMMARY();
}
