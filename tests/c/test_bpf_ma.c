/* SPDX-License-Identifier: MIT */
/*
 * bpf_ma: exact counters for refill (exactly when the count drops below the
 * low watermark) and trim (above the high watermark, down to the midpoint),
 * deterministic reentrancy through fault injection (a nested alloc while
 * `active` is held returns NULL and queues a refill; a nested free lands on
 * the extra list), trimmed objects reaching the slab only after a grace
 * period, fixed and any-size modes, the GFP_KERNEL fallback, and a
 * multi-thread stress with cross-CPU frees, grace-period readers and
 * signal-handler allocations (ASan and TSan in CI).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "t_spec.h"

#define S(a, l, name) t_stat((a), (l), (name))

TEST(test_watermarks_exact)
{
	/* unit 56 + 8 = 64 B: low 32, high 96, batch 48, prefill 4 */
	struct al_allocator *a = t_spec("bpf_ma(mode=fixed, unit=56) > slab", 1);
	struct al_ctx c;
	void *v[21];
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	v[0] = al_alloc(a, &c, 56, 0); /* prefill 4, pop: 3 < 32, refill 48 */
	CHECK_EQ(S(a, 0, "prefill_objects"), 4);
	CHECK_EQ(S(a, 0, "refills"), 1);
	CHECK_EQ(S(a, 0, "refill_objects"), 48);
	CHECK_EQ(S(a, 0, "objects_cached"), 51);
	for (i = 1; i < 20; i++)
		v[i] = al_alloc(a, &c, 56, 0);
	CHECK_EQ(S(a, 0, "objects_cached"), 32); /* at low: no refill yet */
	CHECK_EQ(S(a, 0, "refills"), 1);
	v[20] = al_alloc(a, &c, 56, 0); /* 31 < 32: refill */
	CHECK_EQ(S(a, 0, "refills"), 2);
	CHECK_EQ(S(a, 0, "objects_cached"), 79);
	CHECK_EQ(S(a, 0, "alloc_hits"), 21);
	/* kmalloc_node(__GFP_ACCOUNT) per object, from kmalloc-cg-64 (64 per
	 * slab): 2 slabs, each with its kcalloc'ed obj_exts vector */
	CHECK_EQ(S(a, 1, "obj_exts_allocs"), 2);
	CHECK_EQ(S(a, 1, "kmallocs"), 102);
	CHECK_EQ(S(a, 1, "traced_kmallocs"), 102);
	CHECK_EQ(S(a, 1, "memcg_charges"), 100); /* charged per refilled object */
	for (i = 0; i < 17; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "objects_cached"), 96); /* at high: no trim yet */
	CHECK_EQ(S(a, 0, "trims"), 0);
	CHECK_EQ(al_free(a, &c, v[17]), 0); /* 97 > 96: trim down to (96 + 32) / 2 */
	CHECK_EQ(S(a, 0, "trims"), 1);
	CHECK_EQ(S(a, 0, "trim_objects"), 33);
	CHECK_EQ(S(a, 0, "objects_cached"), 64);
	/* call_rcu_tasks_trace: lazy, the timer (DIV_ROUND_UP(HZ, 4) jiffies)
	 * has not fired, so no tasks-trace GP yet and the slab gets nothing */
	CHECK_EQ(S(a, 0, "ttrace_callbacks"), 1);
	CHECK_EQ(S(a, 0, "ttrace_gps"), 0);
	CHECK_EQ(S(a, 0, "ttrace_freed"), 0);
	CHECK_EQ(S(a, 1, "kfrees"), 0);
	for (i = 18; i < 21; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "objects_cached"), 67);
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_check(a);
	t_teardown(a);
}

/* ttrace=plain (one plain GP, the former model): a reader holds it up. */
TEST(test_trim_waits_for_grace_period)
{
	struct al_allocator *a = t_spec("bpf_ma(mode=fixed, unit=56, ttrace=plain) > slab", 1);
	struct al_rcu_reader r;
	struct al_ctx c;
	void *v[21];
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 21; i++)
		v[i] = al_alloc(a, &c, 56, 0);
	CHECK_EQ(al_rcu_online(&r), 0); /* a reader that has not passed a quiescent point */
	for (i = 0; i < 18; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	CHECK_EQ(S(a, 0, "trims"), 1);
	CHECK_EQ(S(a, 0, "ttrace_batches"), 1);
	CHECK_EQ(S(a, 0, "ttrace_freed"), 0); /* waiting for the grace period */
	CHECK_EQ(S(a, 1, "kfrees"), 0);
	al_rcu_quiescent(&r);
	CHECK_EQ(al_free(a, &c, v[18]), 0); /* the next operation's end runs it */
	CHECK_EQ(S(a, 0, "ttrace_freed"), 33);
	CHECK_EQ(S(a, 1, "kfrees"), 33);
	al_rcu_offline(&r);
	CHECK_EQ(al_free(a, &c, v[19]), 0);
	CHECK_EQ(al_free(a, &c, v[20]), 0);
	t_teardown(a);
}

TEST(test_refill_reuses_trimmed_objects)
{
	struct al_allocator *a = t_spec("bpf_ma(mode=fixed, unit=56, ttrace=plain) > slab", 1);
	struct al_rcu_reader r;
	struct al_ctx c;
	void *v[21], *w[48];
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 21; i++)
		v[i] = al_alloc(a, &c, 56, 0);
	al_rcu_online(&r);
	for (i = 0; i < 18; i++) /* trim 33 toward the slab; the GP never ends */
		al_free(a, &c, v[i]);
	/* 64 cached; the 33rd allocation leaves 31: the refill takes the 33
	 * trimmed objects back (waiting_for_gp_ttrace) and kmallocs 15 */
	for (i = 0; i < 48; i++)
		w[i] = al_alloc(a, &c, 56, 0);
	CHECK_EQ(S(a, 0, "refill_reused"), 33);
	CHECK_EQ(S(a, 0, "refill_kmallocs"), 4 + 48 + 48 + 15);
	CHECK_EQ(S(a, 0, "objects_cached"), 64);
	al_rcu_offline(&r);
	al_free(a, &c, w[0]); /* its end runs the GP callback: the list was taken back */
	CHECK_EQ(S(a, 0, "rcu_callbacks_run"), 1);
	CHECK_EQ(S(a, 0, "ttrace_freed"), 0);
	for (i = 1; i < 48; i++)
		al_free(a, &c, w[i]);
	for (i = 18; i < 21; i++)
		al_free(a, &c, v[i]);
	t_teardown(a);
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { 0, (long)ms * 1000000L };

	nanosleep(&ts, NULL);
}

/* Free v[*next...] on c until the layer has trimmed `trims` times. */
static void free_until_trims(struct al_allocator *a, struct al_ctx *c, void **v, unsigned n,
			     unsigned *next, double trims)
{
	while (*next < n && S(a, 0, "trims") < trims)
		CHECK_EQ(al_free(a, c, v[(*next)++]), 0);
}

/* ttrace=classic (the default) without batching, HZ=100, two CPUs: the
 * first trim's 33 objects wait for one tasks-trace GP (driven by CPU 0: two
 * per-CPU checks, a plain GP, a holdout pass that IPIs CPU 1, whose next
 * operation takes the IPI, and a pass that drops it), and, with
 * ttrace_chain=1, for one plain GP after it. The GP advances only at the
 * slow paths of CPU 0 (its trims); the later trims wait their turn
 * (call_rcu_ttrace_in_progress) on free_by_rcu_ttrace. */
static void ttrace_classic(bool chain)
{
	struct al_allocator *a =
		t_spec(chain ? "bpf_ma(mode=fixed, unit=56, hz=100, ttrace_lazy_ms=0, "
			       "ttrace_chain=1) > slab"
			     : "bpf_ma(mode=fixed, unit=56, hz=100, ttrace_lazy_ms=0) > slab",
		       2);
	static void *v[300];
	struct al_ctx c0, c1;
	unsigned i, next = 0;
	void *p;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c0, 0);
	al_ctx_init(&c1, 1);
	for (i = 0; i < 300; i++)
		CHECK((v[i] = al_alloc(a, &c0, 56, 0)) != NULL);
	free_until_trims(a, &c0, v, 300, &next, 1);
	CHECK_EQ(S(a, 0, "ttrace_batches"), 1);
	CHECK_EQ(S(a, 0, "ttrace_callbacks"), 1);
	CHECK_EQ(S(a, 0, "ttrace_cpu_checks"), 2); /* pregp, at once: not lazy */
	CHECK_EQ(S(a, 0, "ttrace_rcu_gps"), 1);	   /* postscan's synchronize_rcu */
	CHECK_EQ(S(a, 0, "ttrace_ipis"), 0);
	sleep_ms(15);
	free_until_trims(a, &c0, v, 300, &next, 2); /* pass one */
	CHECK_EQ(S(a, 0, "ttrace_ipis"), 1);
	CHECK_EQ(S(a, 0, "ttrace_batches"), 1); /* in progress: the 33 wait */
	CHECK_EQ(S(a, 0, "ttrace_freed"), 0);
	p = al_alloc(a, &c1, 56, 0); /* CPU 1 runs an operation: takes the IPI */
	CHECK(p != NULL);
	CHECK_EQ(al_free(a, &c1, p), 0);
	sleep_ms(25);
	free_until_trims(a, &c0, v, 300, &next, 3); /* pass two: the GP ends */
	CHECK_EQ(S(a, 0, "ttrace_gps"), 1);
	CHECK_EQ(S(a, 0, "ttrace_cpu_checks"), 4);
	CHECK_EQ(S(a, 0, "ttrace_ipis_idle"), 0);
	CHECK_EQ(S(a, 0, "ttrace_callbacks_run"), 1);
	if (chain) { /* __free_rcu_tasks_trace chains call_rcu: one more GP */
		CHECK_EQ(S(a, 0, "ttrace_chained"), 1);
		CHECK_EQ(S(a, 0, "rcu_callbacks"), 1);
		CHECK_EQ(S(a, 0, "ttrace_freed"), 0);
		CHECK_EQ(S(a, 1, "kfrees"), 0);
		CHECK_EQ(al_free(a, &c0, v[next++]), 0); /* its end runs the plain GP's batch */
		CHECK_EQ(S(a, 0, "rcu_callbacks_run"), 1);
	} else { /* rcu_trace_implies_rcu_gp(): kfree at once */
		CHECK_EQ(S(a, 0, "ttrace_chained"), 0);
		CHECK_EQ(S(a, 0, "rcu_callbacks"), 0);
	}
	CHECK_EQ(S(a, 0, "ttrace_freed"), 33);
	CHECK_EQ(S(a, 1, "kfrees"), 33);
	CHECK_EQ(S(a, 0, "refill_reused"), 0);
	while (next < 300)
		CHECK_EQ(al_free(a, &c0, v[next++]), 0);
	t_check(a);
	t_teardown(a);
}

TEST(test_ttrace_classic_gp_frees_trimmed)
{
	ttrace_classic(false);
}

TEST(test_ttrace_chain_waits_a_plain_gp_more)
{
	ttrace_classic(true);
}

/* ---- reentrancy ---- */

static struct al_allocator *nested_a;
static void *nested_p;
static int nested_err;

static void nested_alloc(struct al_ctx *c, void *arg)
{
	struct al_ctx nmi;

	(void)arg;
	al_ctx_nested(&nmi, c, AL_CTX_NMI);
	nested_p = al_alloc(nested_a, &nmi, 56, 0);
	nested_err = nmi.err;
}

static void nested_free(struct al_ctx *c, void *arg)
{
	struct al_ctx nmi;

	(void)arg;
	al_ctx_nested(&nmi, c, AL_CTX_NMI);
	nested_err = al_free(nested_a, &nmi, nested_p);
}

TEST(test_nested_alloc_returns_null_and_queues_refill)
{
	struct al_allocator *a = t_spec("bpf_ma(mode=fixed, unit=56) > slab", 1);
	struct al_ctx c;
	long long queued;
	void *p, *q;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 56, 0); /* 51 cached */
	queued = S(a, 0, "irq_work_queued");
	nested_a = a;
	t_inject_arm("bpf_ma.active", nested_alloc);
	q = al_alloc(a, &c, 56, 0);
	t_inject_off();
	CHECK(q != NULL);
	CHECK_EQ(t_inject_fired, 1);
	CHECK(nested_p == NULL);
	CHECK_EQ(nested_err, -EBUSY); /* the guard, not an empty cache */
	CHECK_EQ(S(a, 0, "reentrant_allocs"), 1);
	CHECK_EQ(S(a, 0, "alloc_empty"), 0);
	CHECK_EQ(S(a, 0, "irq_work_queued"), queued + 1); /* cnt 0 < low: refill queued */
	CHECK_EQ(S(a, 0, "irq_work_runs"), queued + 1);	  /* ran at the outer end */
	CHECK_EQ(S(a, 0, "refills"), 1);		  /* it found 50 >= low: nothing to do */
	CHECK_EQ(al_free(a, &c, p), 0);
	CHECK_EQ(al_free(a, &c, q), 0);
	t_teardown(a);
}

TEST(test_nested_free_goes_to_extra_list)
{
	struct al_allocator *a = t_spec("bpf_ma(mode=fixed, unit=56) > slab", 1);
	struct al_ctx c;
	void *p;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 56, 0);
	nested_p = al_alloc(a, &c, 56, 0);
	nested_a = a;
	t_inject_arm("bpf_ma.active", nested_free);
	CHECK_EQ(al_free(a, &c, p), 0);
	t_inject_off();
	CHECK_EQ(t_inject_fired, 1);
	CHECK_EQ(nested_err, 0);
	CHECK_EQ(S(a, 0, "reentrant_frees"), 1);
	CHECK_EQ(S(a, 0, "objects_cached"), 51); /* 50 + p; the nested one is on the extra list */
	CHECK_EQ(S(a, 0, "bytes_held"), 0);
	t_teardown(a); /* the drain frees the extra list too: nothing lost */
}

/* ---- modes ---- */

TEST(test_fixed_instances_per_size)
{
	struct al_allocator *a = t_spec("bpf_ma(mode=fixed) > slab", 2);
	struct al_ctx c0, c1;
	void *e, *s;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c0, 0);
	al_ctx_init(&c1, 1);
	e = al_alloc(a, &c0, 136, 0); /* a selem: unit 144 */
	s = al_alloc(a, &c0, 176, 0); /* a storage struct: unit 184 */
	CHECK_EQ(S(a, 0, "instances"), 2);
	CHECK_EQ(al_call_usable_size(a, e), 136);
	CHECK_EQ(al_call_usable_size(a, s), 176);
	CHECK_EQ(al_call_usable_size(a->below, (char *)e - 8), 192); /* kmalloc-192 below */
	/* one slot per (instance, bucket): each counted at its unit size */
	CHECK_EQ(S(a, 0, "allocs"), 2);
	CHECK_EQ(S(a, 0, "alloc_hits"), 2);
	CHECK_EQ(S(a, 0, "bytes_allocated"), 144 + 184);
	CHECK_EQ(S(a, 0, "bytes_held"), 144 + 184);
	CHECK_EQ(al_free(a, &c1, e), 0); /* into CPU 1's cache of the selem instance */
	CHECK_EQ(S(a, 0, "bytes_held"), 184);
	CHECK_EQ(al_free(a, &c1, s), 0);
	CHECK_EQ(S(a, 0, "frees"), 2);
	CHECK_EQ(S(a, 0, "bytes_freed"), 144 + 184);
	CHECK_EQ(S(a, 0, "instances"), 2);
	CHECK(al_alloc(a, &c0, 8185, 0) == NULL);
	CHECK_EQ(c0.err, -EINVAL);
	t_teardown(a);
}

TEST(test_any_size_buckets)
{
	struct al_allocator *a = t_spec("bpf_ma > slab", 1);
	static const size_t req[] = { 1, 8, 9, 88, 89, 120, 184, 185, 248, 249, 4088 };
	static const size_t usable[] = { 8, 8, 24, 88, 120, 120, 184, 248, 248, 504, 4088 };
	struct al_ctx c;
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
		void *p = al_alloc(a, &c, req[i], AL_ZERO);

		CHECK(p != NULL);
		CHECK_EQ(al_call_usable_size(a, p), usable[i]);
		CHECK_EQ(al_free(a, &c, p), 0);
	}
	CHECK(al_alloc(a, &c, 4089, 0) == NULL);
	CHECK_EQ(c.err, -EINVAL);
	t_teardown(a);
}

static void nested_alloc_task_maysleep(struct al_ctx *c, void *arg)
{
	(void)arg;
	/* A second task-level call on the CPU (a test-only situation) finds
	 * active held: an AL_MAYSLEEP caller falls back to kmalloc. */
	nested_p = al_alloc(nested_a, c, 56, AL_MAYSLEEP);
}

TEST(test_maysleep_fallback_kmalloc)
{
	struct al_allocator *a = t_spec("bpf_ma(mode=fixed, unit=56) > slab", 1);
	struct al_ctx c;
	void *p;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 56, 0);
	nested_a = a;
	t_inject_arm("bpf_ma.active", nested_alloc_task_maysleep);
	CHECK_EQ(al_free(a, &c, p), 0);
	t_inject_off();
	CHECK(nested_p != NULL);
	CHECK_EQ(S(a, 0, "fallback_kmallocs"), 1);
	CHECK_EQ(S(a, 0, "allocs"), 2); /* a fallback is an allocation, not a hit */
	CHECK_EQ(S(a, 0, "alloc_hits"), 1);
	CHECK_EQ(S(a, 0, "bytes_allocated"), 2 * 64);
	CHECK_EQ(al_free(a, &c, nested_p), 0); /* its header names the cache */
	t_teardown(a);
}

/* ---- stress ---- */

#define NTHREADS 4
#define NOPS	 20000

static struct al_allocator *sa;
static int serrors;
static void *slots[64];
static unsigned stress_ms; /* run at least this long (0: NOPS operations) */
static bool stress_split;  /* odd workers only free (trims there, refills elsewhere) */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void on_nmi(int sig)
{
	struct al_ctx *cur = al_ctx_current(), nmi;
	void *p;

	(void)sig;
	if (!cur)
		return;
	al_ctx_nested(&nmi, cur, AL_CTX_NMI);
	p = al_alloc(sa, &nmi, 100, 0);
	if (p) {
		memset(p, 0x77, 100);
		if (al_free(sa, &nmi, p))
			__atomic_fetch_add(&serrors, 1, __ATOMIC_RELAXED);
	}
}

static void *worker(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg, i, k;
	uint64_t rng = 0xA0761D6478BD642Full * (id + 1);
	struct al_rcu_reader r;
	struct al_ctx c;
	void *p, *o;

	uint64_t end = now_ms() + stress_ms;

	al_ctx_init(&c, id);
	al_ctx_set_current(&c);
	al_rcu_online(&r);
	for (i = 0; i < NOPS || (stress_ms && (i % 1024 || now_ms() < end)); i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		k = (unsigned)(rng >> 33);
		if (!(i % 64))
			al_rcu_quiescent(&r);
		if (stress_split && (id & 1)) {
			o = __atomic_exchange_n(&slots[k % 64], NULL, __ATOMIC_ACQ_REL);
			if (o && al_free(sa, &c, o))
				__atomic_fetch_add(&serrors, 1, __ATOMIC_RELAXED);
			continue;
		}
		p = al_alloc(sa, &c, 1 + k % 300, 0);
		if (!p)
			continue; /* allowed: an empty cache with IRQs "off" */
		memset(p, (int)k, 1);
		o = __atomic_exchange_n(&slots[k % 64], p, __ATOMIC_ACQ_REL);
		if (o && al_free(sa, &c, o))
			__atomic_fetch_add(&serrors, 1, __ATOMIC_RELAXED);
	}
	al_rcu_offline(&r);
	al_ctx_set_current(NULL);
	return NULL;
}

static void stress(const char *spec)
{
	pthread_t th[NTHREADS];
	struct sigaction sact;
	struct al_ctx c;
	unsigned i, k;

	memset(slots, 0, sizeof(slots));
	serrors = 0;
	sa = t_spec(spec, NTHREADS);
	CHECK(sa != NULL);
	if (!sa)
		return;
	memset(&sact, 0, sizeof(sact));
	sact.sa_handler = on_nmi;
	sigemptyset(&sact.sa_mask);
	sact.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sact, NULL);
	for (i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
	for (k = 0; k < 200; k++)
		for (i = 0; i < NTHREADS; i++)
			pthread_kill(th[i], SIGUSR1);
	for (i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	signal(SIGUSR1, SIG_IGN);
	al_ctx_init(&c, 0);
	for (i = 0; i < 64; i++)
		if (slots[i])
			CHECK_EQ(al_free(sa, &c, slots[i]), 0);
	CHECK_EQ(serrors, 0);
	/* whether a tasks-trace grace period ends within the stress depends on
	 * how long the machine lets it run (real timers): test_deferred counts
	 * them exactly, in virtual steps */
	t_teardown(sa);
}

TEST(test_stress_any)
{
	stress("bpf_ma > slab");
}

TEST(test_stress_fixed_thread_irq_work)
{
	stress("bpf_ma(mode=fixed, unit=300, irq_work=thread) > slab");
}

/* Tasks-trace GPs completing while the workers run: not lazy, so GPs start,
 * IPI the other workers' CPUs and end under the stress; chained and SRCU. */
TEST(test_stress_ttrace_gps)
{
	stress_ms = 150;
	stress_split = true;
	stress("bpf_ma(mode=fixed, unit=300, hz=1000, ttrace_lazy_ms=0, ttrace_chain=1) > slab");
	stress("bpf_ma(mode=fixed, unit=300, hz=1000, ttrace=srcu, irq_work=thread) > slab");
	stress_ms = 0;
	stress_split = false;
}

int main(void)
{
	RUN(test_watermarks_exact);
	RUN(test_trim_waits_for_grace_period);
	RUN(test_refill_reuses_trimmed_objects);
	RUN(test_ttrace_classic_gp_frees_trimmed);
	RUN(test_ttrace_chain_waits_a_plain_gp_more);
	RUN(test_nested_alloc_returns_null_and_queues_refill);
	RUN(test_nested_free_goes_to_extra_list);
	RUN(test_fixed_instances_per_size);
	RUN(test_any_size_buckets);
	RUN(test_maysleep_fallback_kmalloc);
	RUN(test_stress_any);
	RUN(test_stress_fixed_thread_irq_work);
	RUN(test_stress_ttrace_gps);
	return TEST_SUMMARY();
}
