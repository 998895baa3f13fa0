/* SPDX-License-Identifier: MIT */
/*
 * The layer skeleton (alloclab/layer.h). al_lock_acquire_all takes an array
 * of locks in index order, all or none: when one cannot be taken, those
 * already taken are released before the error returns. The fork handlers of
 * the layers with per-class locks (magazine, transfer) are built on it, so a
 * second fork_lock from another CPU fails and leaves nothing held. The
 * pass-through owns/usable_size answer as the layer below does, and
 * al_allocator_init fills the header it returns. A layer in the short form
 * (AL_COUNTED_LAYER) is created, counts, reports the layer below's bytes and
 * is destroyed; when its init fails, its fini still runs and the create
 * returns init's error.
 */
#include <errno.h>
#include <string.h>

#include "test.h"
#include "t_spec.h"

struct cls {
	struct al_lock lock;
	char other[40]; /* a stride that is not the lock's size */
};

static struct cls *mk_locks(unsigned n)
{
	struct cls *k = al_meta_alloc(n * sizeof(*k));
	unsigned i;

	for (i = 0; k && i < n; i++)
		al_lock_init(&k[i].lock, 0, false); /* budget 0: a waiter gives up at once */
	return k;
}

/* How many of the n locks another CPU can take now (and gives back). */
static unsigned free_locks(struct cls *k, unsigned n, const struct al_ctx *other)
{
	unsigned i, nfree = 0;

	for (i = 0; i < n; i++)
		if (!al_lock_tryacquire(&k[i].lock, other)) {
			al_lock_release(&k[i].lock, other);
			nfree++;
		}
	return nfree;
}

TEST(test_acquire_all_then_release_all)
{
	struct cls *k = mk_locks(3);
	struct al_ctx c0, c1;

	CHECK(k != NULL);
	if (!k)
		return;
	al_ctx_init(&c0, 0);
	al_ctx_init(&c1, 1);
	CHECK_EQ(al_lock_acquire_all(&k[0].lock, sizeof(*k), 3, &c0), 0);
	CHECK_EQ(free_locks(k, 3, &c1), 0);
	al_lock_release_all(&k[0].lock, sizeof(*k), 3, &c0);
	CHECK_EQ(free_locks(k, 3, &c1), 3);
	CHECK_EQ(al_lock_acquire_all(&k[0].lock, sizeof(*k), 0, &c0), 0); /* none: nothing */
	CHECK_EQ(free_locks(k, 3, &c1), 3);
	al_meta_free(k, 3 * sizeof(*k));
}

TEST(test_acquire_all_is_all_or_none)
{
	struct cls *k = mk_locks(3);
	struct al_ctx c0, c1;

	CHECK(k != NULL);
	if (!k)
		return;
	al_ctx_init(&c0, 0);
	al_ctx_init(&c1, 1);
	CHECK_EQ(al_lock_tryacquire(&k[2].lock, &c1), 0); /* another CPU holds the last one */
	CHECK_EQ(al_lock_acquire_all(&k[0].lock, sizeof(*k), 3, &c0), -ETIMEDOUT);
	al_lock_release(&k[2].lock, &c1);
	CHECK_EQ(free_locks(k, 3, &c1), 3); /* the first two were given back */
	al_meta_free(k, 3 * sizeof(*k));
}

static void fork_lock_all_or_none(const char *spec)
{
	struct al_allocator *a = t_spec(spec, 2);
	struct al_ctx c0, c1;
	void *p;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c0, 0);
	al_ctx_init(&c1, 1);
	CHECK_EQ(a->ops->fork_lock(a, &c0), 0);
	CHECK(a->ops->fork_lock(a, &c1) < 0); /* held: fails, and holds none */
	a->ops->fork_unlock(a, &c0);
	CHECK_EQ(a->ops->fork_lock(a, &c1), 0); /* so every lock is free again */
	a->ops->fork_unlock(a, &c1);
	p = al_alloc(a, &c1, 64, 0);
	CHECK(p != NULL);
	CHECK_EQ(al_free(a, &c0, p), 0);
	t_teardown(a);
}

TEST(test_fork_lock_of_class_locks)
{
	fork_lock_all_or_none("transfer(orders=4, lock_budget=0) > buddy");
	fork_lock_all_or_none("magazine(orders=4, lock_budget=0) > buddy");
}

TEST(test_pass_through_owns_and_usable_size)
{
	struct al_allocator *a = t_spec("magazine > buddy", 1);
	struct al_allocator *n = t_spec("failnth > null", 1);
	struct al_ctx c;
	void *p;
	int local;

	CHECK(a != NULL && n != NULL);
	if (!a || !n)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 100, 0);
	CHECK(p != NULL);
	CHECK(a->ops->owns(a, p) && !a->ops->owns(a, &local));
	CHECK_EQ(a->ops->usable_size(a, p), 128);
	CHECK_EQ(a->ops->usable_size(a, p), a->below->ops->usable_size(a->below, p));
	CHECK_EQ(al_free(a, &c, p), 0);
	p = al_alloc(n, &c, 100, 0);
	CHECK(!n->ops->owns(n, p)); /* null cannot say: not ours */
	CHECK_EQ(n->ops->usable_size(n, p), n->below->ops->usable_size(n->below, p));
	t_teardown(a);
	t_teardown(n);
}

TEST(test_allocator_init_fills_the_header)
{
	const struct al_layer_desc *d = al_layer_find("buddy");
	struct al_allocator base, below;

	CHECK(al_allocator_init(&base, (const struct al_ops *)&below, d, &below, 3) == &base);
	CHECK(base.ops == (const struct al_ops *)&below && base.desc == d);
	CHECK(base.below == &below && base.ncpu == 3);
}

/* A pass-through layer in the short form; init fails with init_error. */
#define SF_COUNTERS(C, D, P)                                      \
	C(P, allocs, AL_CTR_KEY, "allocations through the layer") \
	D(P, allocs_twice, 0, "allocs+allocs", "allocs, derived twice over")
AL_COUNTERS_DEFINE(SF_COUNTERS, SF_, sf_counters);
static int init_error, fini_calls;

struct shortform {
	struct al_allocator base;
	struct al_counters ctr;
};

static void *sf_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	al_count(&((struct shortform *)a)->ctr, c, SF_allocs, 1);
	return al_alloc(a->below, c, size, flags);
}

static int sf_init(struct al_allocator *a, const int64_t *params)
{
	(void)a;
	(void)params;
	return init_error;
}

static void sf_fini(struct al_allocator *a)
{
	(void)a;
	fini_calls++;
}

AL_COUNTED_LAYER(shortform, struct shortform, sf_counters, sf_init, sf_fini, al_below_bytes_held,
		 (.alloc = sf_alloc, .free = al_below_free, .owns = al_below_owns,
		  .usable_size = al_below_usable_size),
		 (.doc = "test layer in the short form", .features = AL_F_BACKEND | AL_F_USABLE))

TEST(test_short_form_layer)
{
	struct al_allocator *a = t_spec("shortform > buddy", 1);
	struct al_stats st[2];
	struct al_ctx c;
	void *p;

	CHECK(a != NULL);
	if (!a)
		return;
	CHECK(a->ops->destroy != NULL && a->desc == al_layer_find("shortform"));
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 100, 0);
	CHECK(p != NULL);
	CHECK_EQ(al_stack_stats(a, st, 2), 2);
	CHECK_EQ(st[0].bytes_held, st[1].bytes_held); /* what the buddy holds, through it */
	CHECK(st[0].bytes_held >= 100);
	CHECK_EQ(st[0].n, 2); /* the counted one and the derived one */
	CHECK(!strcmp(st[0].v[0].name, "allocs") && st[0].v[0].value == 1);
	CHECK(!strcmp(st[0].v[1].name, "allocs_twice") && st[0].v[1].value == 2);
	CHECK(a->desc->ncounters == 2 && a->desc->counters == sf_counters);
	CHECK_EQ(al_free(a, &c, p), 0);
	fini_calls = 0;
	t_teardown(a);
	CHECK_EQ(fini_calls, 1);
}

TEST(test_short_form_init_failure_runs_fini)
{
	const struct al_layer_desc *d = al_layer_find("shortform");
	struct al_allocator *out = NULL;
	int64_t params[1] = { 0 };

	CHECK(d != NULL);
	if (!d)
		return;
	init_error = -ENOSPC;
	fini_calls = 0;
	CHECK_EQ(d->create(d, params, NULL, 1, &out), -ENOSPC);
	CHECK(out == NULL);
	CHECK_EQ(fini_calls, 1);
	init_error = 0;
}

int main(void)
{
	RUN(test_acquire_all_then_release_all);
	RUN(test_acquire_all_is_all_or_none);
	RUN(test_fork_lock_of_class_locks);
	RUN(test_pass_through_owns_and_usable_size);
	RUN(test_allocator_init_fills_the_header);
	RUN(test_short_form_layer);
	RUN(test_short_form_init_failure_runs_fini);
	return TEST_SUMMARY();
}
