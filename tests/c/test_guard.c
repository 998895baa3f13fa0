/* SPDX-License-Identifier: MIT */
/*
 * The engine's pointer checks (al_guard_wrap, the stack spec's check bits):
 * checked runs of honest stacks give the counters of unchecked ones, with
 * several workers freeing each other's objects; a layer that hands out a
 * misaligned object, or an object that is still live, fails the run with
 * -EFAULT and a message naming it; frees the layer refuses leave the object
 * tracked; bulk paths are checked object by object.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>

#include "t_spec.h"
#include "test.h"

/* A front layer that passes everything down, except that after `after`
 * allocations it hands out the object 4 bytes in (mode 1) or the previous
 * object again (mode 2). */
struct liar {
	struct al_allocator base;
	unsigned long n;
	void *last;
	int mode, after;
};

static void *liar_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct liar *l = (struct liar *)a;
	unsigned long n = __atomic_add_fetch(&l->n, 1, __ATOMIC_RELAXED);
	void *p;

	p = __atomic_load_n(&l->last, __ATOMIC_RELAXED); /* workers share it */
	if (n > (unsigned long)l->after && l->mode == 2 && p)
		return p;
	p = al_alloc(a->below, c, size, flags);
	if (p && n > (unsigned long)l->after && l->mode == 1)
		return (char *)p + 4;
	__atomic_store_n(&l->last, p, __ATOMIC_RELAXED);
	return p;
}

static void liar_stats(struct al_allocator *a, struct al_stats *out)
{
	al_stats_add(out, "allocs", ((struct liar *)a)->n);
}

static void liar_destroy(struct al_allocator *a)
{
	al_meta_free(a, sizeof(struct liar));
}

static const struct al_ops liar_ops = {
	.name = "t_liar",
	AL_OPS_INIT,
	.alloc = liar_alloc,
	.free = al_below_free,
	.usable_size = al_below_usable_size,
	.stats = liar_stats,
	.destroy = liar_destroy,
};

static const struct al_param_desc liar_params[] = {
	{ "mode", AL_PARAM_INT, 0, 0, 2, NULL, "0 honest, 1 misaligned, 2 duplicate" },
	{ "after", AL_PARAM_INT, 0, 0, 1000000, NULL, "honest allocations first" },
};

static int liar_create(const struct al_layer_desc *d, const int64_t *params,
		       struct al_allocator *below, unsigned ncpu, struct al_allocator **out)
{
	struct liar *l = al_meta_alloc(sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->mode = (int)params[0];
	l->after = (int)params[1];
	*out = al_allocator_init(&l->base, &liar_ops, d, below, ncpu);
	return 0;
}

static const struct al_layer_desc liar_desc = {
	.name = "t_liar",
	AL_LAYER_DESC_INIT,
	.doc = "test: lies after a while",
	.features = AL_F_BACKEND | AL_F_USABLE,
	.nparams = 2,
	.params = liar_params,
	.create = liar_create,
};

static int run_spec(const char *spec, unsigned check, unsigned producers, struct al_run_result *res)
{
	struct al_run_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.workload = al_workload_find("malloc-xfree");
	al_params_default(cfg.workload->params, cfg.workload->nparams, cfg.wparams);
	if (t_spec_fill(spec, &cfg.stack))
		return -EINVAL;
	cfg.stack.check = check;
	cfg.producers = producers;
	cfg.cpu_mode = AL_CPU_VIRTUAL;
	cfg.warmup_cycles = 2;
	cfg.cycles = 20;
	return al_run(&cfg, res);
}

static long long stat_of(const struct al_run_result *r, unsigned layer, const char *name)
{
	unsigned i;

	for (i = 0; i < r->layers[layer].n; i++)
		if (!strcmp(r->layers[layer].v[i].name, name))
			return (long long)r->layers[layer].v[i].value;
	return -1;
}

TEST(test_checked_runs_count_as_unchecked)
{
	static const char *const specs[] = { "t_liar > buddy", "percpu > t_liar > buddy",
					     "t_liar > percpu > buddy", "percpu > buddy" };
	static struct al_run_result plain, checked;
	unsigned i;

	for (i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		CHECK_EQ(run_spec(specs[i], 0, 4, &plain), 0);
		CHECK_EQ(run_spec(specs[i], 0xff, 4, &checked), 0); /* every layer */
		CHECK_EQ(checked.alloc_ops, plain.alloc_ops);
		CHECK_EQ(checked.free_ops, plain.free_ops);
		CHECK_EQ(checked.nlayers, plain.nlayers);
		CHECK_EQ(stat_of(&checked, checked.nlayers - 1, "allocs"),
			 stat_of(&plain, plain.nlayers - 1, "allocs"));
	}
}

TEST(test_misaligned_object_fails_the_run)
{
	static struct al_run_result res;

	CHECK_EQ(run_spec("t_liar(mode=1, after=30) > buddy", 1, 2, &res), -EFAULT);
	CHECK(strstr(res.error, "layer t_liar returned 0x") != NULL);
	CHECK(strstr(res.error, "aligned to 4 bytes, below 16 (the min_align of buddy below it, "
				"which it inherits)") != NULL);
	/* honest all along: the checked run passes */
	CHECK_EQ(run_spec("t_liar(mode=1, after=1000000) > buddy", 1, 2, &res), 0);
}

TEST(test_duplicate_object_fails_the_run)
{
	static struct al_run_result res;
	struct al_stack_spec s;
	struct al_allocator *a = NULL, *plain = NULL;
	char err[256];

	CHECK_EQ(run_spec("t_liar(mode=2, after=30) > buddy", 1, 1, &res), -EFAULT);
	CHECK(strstr(res.error, "layer t_liar returned 0x") != NULL);
	CHECK(strstr(res.error, "(allocation 31) while it was still live") != NULL);
	/* bit i selects layer i: here buddy, not the liar */
	CHECK_EQ(t_spec_fill("t_liar > buddy", &s), 0);
	s.check = 2;
	CHECK_EQ(al_stack_create(&s, 1, &a, err, sizeof(err)), 0);
	CHECK(a->ops == &liar_ops);
	CHECK_EQ(t_spec_fill("buddy", &s), 0);
	CHECK_EQ(al_stack_create(&s, 1, &plain, err, sizeof(err)), 0);
	CHECK(a->below->ops != plain->ops); /* a checking copy of buddy's table */
	CHECK(a->below->ops->usable_size == plain->ops->usable_size);
	al_stack_destroy(plain);
	al_stack_destroy(a);
}

TEST(test_direct_calls)
{
	struct al_stack_spec s;
	struct al_allocator *a = NULL;
	struct al_ctx c;
	void *p, *q, *objs[8];
	char err[256];
	int i;

	al_ctx_init(&c, 0);
	CHECK_EQ(t_spec_fill("buddy", &s), 0);
	s.check = 1;
	CHECK_EQ(al_stack_create(&s, 1, &a, err, sizeof(err)), 0);
	CHECK(a->ops->check != NULL);
	p = al_alloc(a, &c, 100, 0);
	CHECK(p != NULL);
	/* a free the layer refuses leaves the object live and tracked */
	CHECK_EQ(al_free(a, &c, (char *)p + 8), -EINVAL);
	CHECK_EQ(al_free(a, &c, p), 0);
	CHECK_EQ(al_free(a, &c, p), -EINVAL); /* buddy's double-free check */
	/* bulk: checked object by object (buddy has a native path) */
	CHECK_EQ(al_alloc_bulk(a, &c, 64, 8, objs, 0), 8);
	CHECK_EQ(al_free_bulk(a, &c, objs, 8), 8);
	for (i = 0; i < 100; i++) { /* reuse: freed objects may come back */
		q = al_alloc(a, &c, 64, 0);
		CHECK(q != NULL);
		CHECK_EQ(al_free(a, &c, q), 0);
	}
	CHECK_EQ(al_stack_guard_error(a, err, sizeof(err)), 0);
	CHECK_EQ(al_call_check(a, err, sizeof(err)), 0);
	al_stack_destroy(a);
}

int main(void)
{
	if (al_layer_register(&liar_desc)) {
		fprintf(stderr, "cannot register t_liar\n");
		return 1;
	}
	RUN(test_checked_runs_count_as_unchecked);
	RUN(test_misaligned_object_fails_the_run);
	RUN(test_duplicate_object_fails_the_run);
	RUN(test_direct_calls);
	return TEST_SUMMARY();
}
