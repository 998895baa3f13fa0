/* SPDX-License-Identifier: MIT */
/*
 * The buddy's NMI path. An allocation at AL_CTX_NMI returns NULL at
 * once (-EBUSY, nmi_alloc_refused); a free at AL_CTX_NMI is validated
 * lock-free and pushed on a deferred list (nmi_frees_deferred), which the
 * next ordinary operation drains under the lock (deferred_drained). The
 * contexts are built by hand, so every count is exact.
 */
#include <pthread.h>

#include "test.h"

static const char *const t_buddy[] = { "buddy" };

static struct al_allocator *mk_buddy(unsigned ncpu)
{
	return t_make(t_buddy, 1, NULL, ncpu);
}

static long long ctr(struct al_allocator *a, const char *name)
{
	return t_stat(a, 0, name);
}

static long long held(struct al_allocator *a)
{
	struct al_stats st;

	memset(&st, 0, sizeof(st));
	a->ops->stats(a, &st);
	return st.bytes_held;
}

static void ck(struct al_allocator *a)
{
	char err[256] = "";

	if (a->ops->check(a, err, sizeof(err))) {
		fprintf(stderr, "check: %s\n", err);
		t_failed_checks++;
	}
}

TEST(test_feature)
{
	CHECK(al_layer_find("buddy")->features & AL_F_NMI_SAFE);
}

TEST(test_nmi_alloc_refused)
{
	struct al_allocator *a = mk_buddy(2);
	struct al_ctx task, nmi;
	void *out[4];

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&task, 1);
	al_ctx_nested(&nmi, &task, AL_CTX_NMI);
	CHECK(al_alloc(a, &nmi, 64, 0) == NULL);
	CHECK_EQ(nmi.err, -EBUSY);
	nmi.err = 0;
	CHECK_EQ(al_alloc_bulk(a, &nmi, 64, 4, out, 0), 0);
	CHECK_EQ(nmi.err, -EBUSY);
	CHECK_EQ(ctr(a, "nmi_alloc_refused"), 2);
	CHECK_EQ(ctr(a, "allocs"), 0);
	CHECK_EQ(ctr(a, "splits"), 0);
	CHECK_EQ(held(a), 0);
	ck(a);
	al_stack_destroy(a);
}

TEST(test_nmi_free_deferred)
{
	struct al_allocator *a = mk_buddy(2);
	struct al_ctx task, nmi;
	void *p[3], *q;
	int x;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&task, 0);
	al_ctx_nested(&nmi, &task, AL_CTX_NMI);
	for (x = 0; x < 3; x++) {
		p[x] = al_alloc(a, &task, 100, 0); /* 128-byte blocks */
		CHECK(p[x] != NULL);
	}
	CHECK_EQ(held(a), 3 * 128);
	CHECK_EQ(al_free(a, &nmi, p[0]), 0);
	CHECK_EQ(al_free(a, &nmi, p[1]), 0);
	CHECK_EQ(ctr(a, "nmi_frees_deferred"), 2);
	CHECK_EQ(ctr(a, "frees"), 0);
	CHECK_EQ(held(a), 3 * 128); /* still allocated until drained */
	ck(a);
	/* a second NMI free of a deferred block is a double free */
	CHECK_EQ(al_free(a, &nmi, p[1]), -EINVAL);
	CHECK_EQ(ctr(a, "double_frees"), 1);
	/* invalid pointers are rejected lock-free, nothing written */
	CHECK_EQ(al_free(a, &nmi, (char *)p[2] + 8), -EINVAL);
	CHECK_EQ(al_free(a, &nmi, &x), -EINVAL);
	CHECK_EQ(ctr(a, "invalid_frees"), 2);
	CHECK_EQ(ctr(a, "nmi_frees_deferred"), 2);
	/* the next ordinary operation drains under the lock */
	q = al_alloc(a, &task, 100, 0);
	CHECK(q != NULL);
	CHECK_EQ(ctr(a, "deferred_drained"), 2);
	CHECK_EQ(ctr(a, "frees"), 2);
	CHECK_EQ(held(a), 2 * 128);
	ck(a);
	/* drained blocks can be freed at NMI again after reuse (the tag is cleared) */
	CHECK_EQ(al_free(a, &nmi, q), 0);
	CHECK_EQ(al_free(a, &task, p[2]), 0); /* drains q first */
	CHECK_EQ(ctr(a, "deferred_drained"), 3);
	CHECK_EQ(ctr(a, "frees"), 4);
	CHECK_EQ(held(a), 0);
	ck(a);
	al_stack_destroy(a);
}

TEST(test_nmi_free_bulk_and_drain)
{
	struct al_allocator *a = mk_buddy(1);
	struct al_ctx task, nmi;
	void *p[8];
	int n;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&task, 0);
	al_ctx_nested(&nmi, &task, AL_CTX_NMI);
	n = al_alloc_bulk(a, &task, 16, 8, p, 0);
	CHECK_EQ(n, 8);
	if (n != 8)
		return;
	CHECK_EQ(al_free_bulk(a, &nmi, p, 8), 8);
	CHECK_EQ(ctr(a, "nmi_frees_deferred"), 8);
	CHECK_EQ(held(a), 8 * 16);
	ck(a);
	/* drain() drains the deferred list too */
	al_stack_drain(a, &task, AL_DRAIN_ALL);
	CHECK_EQ(ctr(a, "deferred_drained"), 8);
	CHECK_EQ(held(a), 0);
	ck(a);
	al_stack_destroy(a);
}

/* An NMI arriving while this CPU holds the lock: nothing waits, nothing deadlocks. */
TEST(test_nmi_while_locked)
{
	struct al_allocator *a = mk_buddy(1);
	struct al_ctx task, nmi;
	void *p;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&task, 0);
	al_ctx_nested(&nmi, &task, AL_CTX_NMI);
	p = al_alloc(a, &task, 32, 0);
	CHECK(p != NULL);
	CHECK_EQ(a->ops->fork_lock(a, &task), 0); /* the task level holds the lock */
	CHECK(al_alloc(a, &nmi, 32, 0) == NULL);
	CHECK_EQ(nmi.err, -EBUSY);
	CHECK_EQ(al_free(a, &nmi, p), 0);
	a->ops->fork_unlock(a, &task);
	CHECK_EQ(ctr(a, "nmi_frees_deferred"), 1);
	CHECK_EQ(ctr(a, "lock_failed_frees"), 0);
	al_stack_drain(a, &task, AL_DRAIN_CPU);
	CHECK_EQ(held(a), 0);
	ck(a);
	al_stack_destroy(a);
}

/* Many CPUs: NMI frees race with ordinary operations that drain (TSan). */
struct race_arg {
	struct al_allocator *a;
	unsigned cpu;
	int errors;
};

static void *race_thread(void *arg)
{
	struct race_arg *r = arg;
	struct al_ctx task, nmi;
	void *p[16];
	int i, j;

	al_ctx_init(&task, r->cpu);
	al_ctx_nested(&nmi, &task, AL_CTX_NMI);
	for (i = 0; i < 500; i++) {
		for (j = 0; j < 16; j++) {
			p[j] = al_alloc(r->a, &task, 16u << (j % 5), 0);
			if (!p[j])
				r->errors++;
		}
		for (j = 0; j < 16; j++)
			if (p[j] && al_free(r->a, (j & 1) ? &nmi : &task, p[j]))
				r->errors++;
	}
	return NULL;
}

TEST(test_nmi_race)
{
	struct al_allocator *a = mk_buddy(4);
	struct race_arg r[4];
	pthread_t t[4];
	struct al_ctx c;
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	for (i = 0; i < 4; i++) {
		r[i] = (struct race_arg){ .a = a, .cpu = i };
		CHECK_EQ(pthread_create(&t[i], NULL, race_thread, &r[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ(r[i].errors, 0);
	}
	al_ctx_init(&c, 0);
	al_stack_drain(a, &c, AL_DRAIN_ALL);
	CHECK_EQ(ctr(a, "nmi_frees_deferred"), 4 * 500 * 8);
	CHECK_EQ(ctr(a, "deferred_drained"), 4 * 500 * 8);
	CHECK_EQ(held(a), 0);
	ck(a);
	al_stack_destroy(a);
}

#if defined(__SANITIZE_THREAD__)
#define T_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define T_TSAN 1
#endif
#endif

static void nmi_run(const char *const *names, unsigned n, int expect, unsigned producers)
{
	struct al_run_config cfg;
	static struct al_run_result res;
	double most, signal_ns;
	unsigned i;

	memset(&cfg, 0, sizeof(cfg));
	cfg.workload = al_workload_find("nmi");
	al_params_default(cfg.workload->params, cfg.workload->nparams, cfg.wparams);
	/* 50k signals/s, or 90% of what this machine delivers when that is less
	 * (the engine refuses a rate it cannot deliver: a slow or busy machine),
	 * never under the 20k/s it always accepts */
	most = 0.9 * al_nmi_max_rate(&signal_ns);
	cfg.wparams[2] = most >= 50000 ? 50000 : most <= 20000 ? 20000 : (int64_t)most;
	cfg.stack.n = n;
	for (i = 0; i < n; i++) {
		cfg.stack.layer[i].desc = al_layer_find(names[i]);
		al_params_default(cfg.stack.layer[i].desc->params, cfg.stack.layer[i].desc->nparams,
				  cfg.stack.layer[i].params);
	}
	cfg.producers = producers;
	cfg.cpu_mode = AL_CPU_VIRTUAL;
	cfg.warmup_cycles = 10;
	cfg.cycles = 300;
	cfg.watchdog_ns = 60000000000ull;
	CHECK_EQ(al_run(&cfg, &res), expect);
	if (res.status != expect)
		fprintf(stderr, "nmi run: %s\n", res.error);
	if (expect) {
		CHECK(strstr(res.error, "is not NMI-safe") != NULL);
		return;
	}
	for (i = 0; i < res.nmetrics; i++) /* the handler ran: the run tested something */
		if (!strcmp(res.metrics[i].name, "nmi_handler_runs"))
			break;
	CHECK(i < res.nmetrics && res.metrics[i].value > 0);
}

/* Real timer signals (not under TSan, which delays asynchronous signals). */
TEST(test_nmi_workload)
{
	static const char *const sheaves[] = { "sheaves", "slab" };

	nmi_run(sheaves, 2, -EOPNOTSUPP, 1);
#ifndef T_TSAN
	static const char *const buddy[] = { "buddy" };
	static const char *const spill[] = { "percpu", "buddy" };
	static const char *const transfer[] = { "percpu", "transfer", "buddy" };
	static const char *const nolock[] = { "nolock", "slab" };

	nmi_run(buddy, 1, 0, 2);
	nmi_run(spill, 2, 0, 2);
	nmi_run(transfer, 3, 0, 2);
	nmi_run(nolock, 2, 0, 2);
#endif
}

int main(void)
{
	RUN(test_feature);
	RUN(test_nmi_alloc_refused);
	RUN(test_nmi_free_deferred);
	RUN(test_nmi_free_bulk_and_drain);
	RUN(test_nmi_while_locked);
	RUN(test_nmi_race);
	RUN(test_nmi_workload);
	return TEST_SUMMARY();
}
