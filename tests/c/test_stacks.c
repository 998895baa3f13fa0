/* SPDX-License-Identifier: MIT */
/*
 * Stacks that cannot work are refused with the reason (caches over null,
 * workloads that need distinct objects on null); front caches count every
 * object under the class of its usable size, so they balance over a page
 * allocator; drains retry a refused free_bulk; bpf_ma tells a refusal by
 * design (-EAGAIN, -ENOSPC) from exhaustion (-ENOMEM).
 */
#include <errno.h>

#include "t_spec.h"

static int create(const char *spec, char *err, size_t errlen)
{
	struct al_stack_spec s;
	struct al_allocator *a = NULL;
	int ret;

	if (t_spec_fill(spec, &s))
		return -EFAULT;
	ret = al_stack_create(&s, 2, &a, err, errlen);
	if (!ret)
		al_stack_destroy(a);
	return ret;
}

TEST(test_caches_over_null_refused)
{
	static const char *const caches[] = { "percpu",	 "transfer", "magazine",
					      "sheaves", "nolock",   "bpf_ma" };
	char spec[128], err[256];
	unsigned i;

	for (i = 0; i < sizeof(caches) / sizeof(caches[0]); i++) {
		snprintf(spec, sizeof(spec), "%s > null", caches[i]);
		CHECK_EQ(create(spec, err, sizeof(err)), -EINVAL);
		CHECK(strstr(err, caches[i]) && strstr(err, "null") &&
		      strstr(err, "one block per CPU"));
		snprintf(spec, sizeof(spec), "%s > failnth > null", caches[i]);
		CHECK_EQ(create(spec, err, sizeof(err)), -EINVAL);
	}
	CHECK_EQ(create("null", err, sizeof(err)), 0);
	CHECK_EQ(create("failnth > null", err, sizeof(err)), 0);
	CHECK_EQ(create("percpu > buddy", err, sizeof(err)), 0);
}

/* bpf_ma refills from irq_work at IRQ level; vmalloc serves task level only:
 * refused up front, wherever vmalloc sits below, rather than failing every
 * refill. vmalloc under a task-level cache and bpf_ma over slab stand. */
TEST(test_irq_refill_over_task_only_refused)
{
	static const char *const bad[] = { "bpf_ma > vmalloc > pages",
					   "bpf_ma(irq_work=thread) > vmalloc > pages",
					   "bpf_ma > percpu > vmalloc > pages" };
	char err[256];
	unsigned i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		CHECK_EQ(create(bad[i], err, sizeof(err)), -EINVAL);
		CHECK(strstr(err, "bpf_ma cannot stack over vmalloc") && strstr(err, "task level"));
	}
	CHECK_EQ(create("percpu > vmalloc > pages", err, sizeof(err)), 0);
	CHECK_EQ(create("bpf_ma > slab", err, sizeof(err)), 0);
}

static void run_on(const char *wl, const char *spec, unsigned producers, struct al_run_result *res,
		   int expect)
{
	struct al_run_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.workload = al_workload_find(wl);
	al_params_default(cfg.workload->params, cfg.workload->nparams, cfg.wparams);
	CHECK_EQ(t_spec_fill(spec, &cfg.stack), 0);
	cfg.producers = producers;
	cfg.warmup_cycles = 2;
	cfg.cycles = 20;
	memset(res, 0, sizeof(*res));
	CHECK_EQ(al_run(&cfg, res), expect);
}

TEST(test_distinct_workloads_refuse_null)
{
	static const char *const wls[] = { "malloc-xfree", "xmalloc", "larson", "stress",
					   "local-storage-create" };
	static struct al_run_result res;
	unsigned i;

	for (i = 0; i < sizeof(wls) / sizeof(wls[0]); i++) {
		CHECK(al_workload_find(wls[i])->flags & AL_WL_DISTINCT);
		run_on(wls[i], "null", 2, &res, -EINVAL);
		CHECK(strstr(res.error, wls[i]) && strstr(res.error, "null") &&
		      strstr(res.error, "distinct"));
	}
	/* The floor: objects only touched by the CPU that allocated them. */
	CHECK(!(al_workload_find("malloc-free")->flags & AL_WL_DISTINCT));
	run_on("malloc-free", "null", 2, &res, 0);
}

static long long held(struct al_allocator *a, unsigned layer)
{
	struct al_stats st[AL_MAX_LAYERS];
	unsigned n = al_stack_stats(a, st, AL_MAX_LAYERS);

	return layer < n ? st[layer].bytes_held : -1;
}

/* Objects of every size allocated on CPU 0 and freed on CPU 1: the front
 * layer's bytes_held returns to 0 before any drain, whatever class the
 * backend hands out for a size. */
TEST(test_front_classes_balance)
{
	static const char *const specs[] = {
		"percpu > pages",
		"percpu(orders=9) > pages",
		"magazine > pages",
		"magazine(orders=9) > pages",
		"percpu > transfer > pages",
		"transfer > pages",
		"percpu > libc",
		"magazine > libc",
		"percpu > buddy",
	};
	static const size_t sizes[] = { 1, 8, 16, 17, 64, 100, 1000, 2048, 2049, 3000, 4096 };
	void *v[sizeof(sizes) / sizeof(sizes[0]) * 10];
	struct al_ctx c0, c1;
	unsigned i, k;

	al_ctx_init(&c0, 0);
	al_ctx_init(&c1, 1);
	for (i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		struct al_allocator *a = t_spec(specs[i], 2);
		long long frees;

		CHECK(a != NULL);
		if (!a)
			continue;
		for (k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
			v[k] = al_alloc(a, &c0, sizes[k % (sizeof(sizes) / sizeof(sizes[0]))], 0);
			CHECK(v[k] != NULL);
		}
		for (k = 0; k < sizeof(v) / sizeof(v[0]); k++)
			CHECK_EQ(al_free(a, &c1, v[k]), 0);
		t_check(a);
		if (held(a, 0)) {
			fprintf(stderr, "%s: front holds %lld bytes\n", specs[i], held(a, 0));
			t_failed_checks++;
		}
		frees = t_stat(a, 0, "frees");
		if (frees >= 0 && strncmp(specs[i], "transfer", 8))
			CHECK_EQ(frees, t_stat(a, 0, "allocs"));
		t_teardown(a);
	}
}

/* One failed free_bulk in a drain is retried one by one: nothing left. */
TEST(test_drain_retries_free_bulk)
{
	static const char *const specs[] = {
		"magazine > failnth(op=free_bulk, nth=1) > buddy",
		"percpu > transfer > failnth(op=free_bulk, nth=1) > buddy",
		"percpu > failnth(op=free_bulk, nth=1) > buddy",
	};
	void *v[64];
	struct al_ctx c;
	unsigned i, k;

	al_ctx_init(&c, 0);
	for (i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		struct al_allocator *a = t_spec(specs[i], 2);

		CHECK(a != NULL);
		if (!a)
			continue;
		for (k = 0; k < 64; k++)
			CHECK((v[k] = al_alloc(a, &c, 64, 0)) != NULL);
		for (k = 0; k < 64; k++)
			CHECK_EQ(al_free(a, &c, v[k]), 0);
		t_teardown(a); /* drains, and fails on any byte left */
	}
}

TEST(test_bpf_ma_refusals)
{
	struct al_allocator *a = t_spec("bpf_ma(mode=fixed) > slab", 2);
	struct al_ctx c, nmi;
	void *v[9];
	unsigned k;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (k = 0; k < 8; k++) /* one instance per distinct size, 8 at most */
		CHECK((v[k] = al_alloc(a, &c, 16 + 8 * k, 0)) != NULL);
	c.err = 0;
	CHECK(al_alloc(a, &c, 200, 0) == NULL);
	CHECK_EQ(c.err, -ENOSPC);
	CHECK_EQ(t_stat(a, 0, "no_instance"), 1);
	/* CPU 1's cache of the first size was never filled, and an NMI gets
	 * no prefill: empty with its refill queued, not out of memory. */
	al_ctx_init(&nmi, 1);
	nmi.level = AL_CTX_NMI;
	CHECK(al_alloc(a, &nmi, 16, 0) == NULL);
	CHECK_EQ(nmi.err, -EAGAIN);
	CHECK_EQ(t_stat(a, 0, "alloc_empty"), 1);
	for (k = 0; k < 8; k++)
		CHECK_EQ(al_free(a, &c, v[k]), 0);
	t_teardown(a);

	/* Exhaustion below: the refill finds nothing, and that is -ENOMEM. */
	a = t_spec("bpf_ma > buddy(chunk_size=65536, arena_limit=1048576)", 1);
	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	{
		static void *live[1 << 15];
		unsigned n = 0;

		while (n < (1u << 15) && (live[n] = al_alloc(a, &c, 1024, 0)))
			n++;
		CHECK(n < (1u << 15));
		CHECK_EQ(c.err, -ENOMEM);
		while (n--)
			CHECK_EQ(al_free(a, &c, live[n]), 0);
	}
	t_teardown(a);
}

int main(void)
{
	RUN(test_caches_over_null_refused);
	RUN(test_distinct_workloads_refuse_null);
	RUN(test_irq_refill_over_task_only_refused);
	RUN(test_front_classes_balance);
	RUN(test_drain_retries_free_bulk);
	RUN(test_bpf_ma_refusals);
	return TEST_SUMMARY();
}
