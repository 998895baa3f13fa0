/* SPDX-License-Identifier: MIT */
/*
 * The deferred-work core: irq_work queued once and run at the end of a
 * task-level operation (never at IRQ or NMI level, never on another CPU),
 * grace periods that wait for every online reader, gp_latency, rcu_nocb
 * running batches on the next CPU, kfree_rcu batching into one free_bulk,
 * NMI refusal, the helper thread, and the running thread's context as seen
 * from a signal handler.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "t_spec.h"

static int runs[4];	    /* irq_work runs per CPU */
static unsigned last_level; /* level the last function ran at */
static struct al_defer *requeue_d;
static int requeue_left;

static void count_fn(struct al_irq_work *w, struct al_ctx *c)
{
	runs[c->cpu]++;
	last_level = c->level;
	if (requeue_left > 0) {
		requeue_left--;
		al_irq_work_queue(requeue_d, w, c);
	}
}

static struct al_defer *mk(unsigned ncpu, int mode, uint64_t latency, bool nocb)
{
	struct al_defer_params p = { .irq_mode = mode, .gp_latency_ns = latency, .nocb = nocb };
	struct al_defer *d = NULL;

	CHECK_EQ(al_defer_create(ncpu, &p, &d), 0);
	return d;
}

TEST(test_irq_work_once_and_at_task_level)
{
	struct al_defer *d = mk(2, AL_IRQ_WORK_INLINE, 0, false);
	struct al_irq_work w;
	struct al_ctx c0, c1, irq, nmi;

	if (!d)
		return;
	memset(runs, 0, sizeof(runs));
	al_ctx_init(&c0, 0);
	al_ctx_init(&c1, 1);
	al_ctx_nested(&irq, &c1, AL_CTX_IRQ);
	al_ctx_nested(&nmi, &c1, AL_CTX_NMI);
	al_irq_work_init(&w, 1, count_fn);
	CHECK(al_irq_work_queue(d, &w, &nmi)); /* NMI-safe */
	CHECK(!al_irq_work_queue(d, &w, &c1)); /* already pending */
	al_defer_poll(d, &irq);
	al_defer_poll(d, &nmi);
	al_defer_poll(d, &c0); /* another CPU */
	CHECK_EQ(runs[1], 0);
	al_defer_poll(d, &c1);
	CHECK_EQ(runs[1], 1);
	CHECK_EQ(last_level, AL_CTX_IRQ); /* irq_work runs in (modelled) hardirq */
	CHECK_EQ(runs[0], 0);
	CHECK(al_irq_work_queue(d, &w, &c1)); /* not pending any more */
	requeue_d = d;
	requeue_left = 1; /* the function queues itself again: run twice */
	al_defer_poll(d, &c1);
	CHECK_EQ(runs[1], 3);
	CHECK_EQ(al_defer_pending(d), 0);
	al_defer_destroy(d);
}

static void foreign_handler(int sig)
{
	(void)sig;
}

/* Install h for irq_work=signal's signal: sigaction's return value. */
static int set_handler(void (*h)(int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = h;
	sigemptyset(&sa.sa_mask);
	return sigaction(AL_IRQ_WORK_SIGNO, &sa, NULL);
}

/* irq_work=signal: the run is entered through a signal the thread sends
 * itself, once per raised batch (seen pending while blocked); a program
 * that owns the signal is refused, not overridden. */
TEST(test_irq_work_signal_is_a_self_signal)
{
	struct al_defer_params p = { .irq_mode = AL_IRQ_WORK_SIGNAL };
	struct al_defer *d = NULL;
	struct al_irq_work w1, w2;
	struct sigaction cur;
	struct al_ctx c0;
	sigset_t set, pend;

	CHECK_EQ(set_handler(foreign_handler), 0);
	CHECK_EQ(al_defer_create(1, &p, &d), -EBUSY);
	CHECK(d == NULL);
	CHECK_EQ(set_handler(SIG_DFL), 0);
	CHECK_EQ(al_defer_create(1, &p, &d), 0);
	if (!d)
		return;
	CHECK_EQ(sigaction(AL_IRQ_WORK_SIGNO, NULL, &cur), 0);
	CHECK(cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN);

	memset(runs, 0, sizeof(runs));
	al_ctx_init(&c0, 0);
	al_irq_work_init(&w1, 0, count_fn);
	al_irq_work_init(&w2, 0, count_fn);
	sigemptyset(&set);
	sigaddset(&set, AL_IRQ_WORK_SIGNO);
	CHECK_EQ(pthread_sigmask(SIG_BLOCK, &set, NULL), 0);
	al_defer_poll(d, &c0); /* nothing raised: no interrupt */
	CHECK_EQ(sigpending(&pend), 0);
	CHECK(!sigismember(&pend, AL_IRQ_WORK_SIGNO));
	CHECK(al_irq_work_queue(d, &w1, &c0));
	CHECK(al_irq_work_queue(d, &w2, &c0));
	al_defer_poll(d, &c0);
	CHECK_EQ(runs[0], 2);
	CHECK_EQ(last_level, AL_CTX_IRQ);
	CHECK_EQ(sigpending(&pend), 0);
	CHECK(sigismember(&pend, AL_IRQ_WORK_SIGNO));	       /* the interrupt was sent */
	CHECK_EQ(pthread_sigmask(SIG_UNBLOCK, &set, NULL), 0); /* delivered: no-op */
	CHECK_EQ(sigpending(&pend), 0);
	CHECK(!sigismember(&pend, AL_IRQ_WORK_SIGNO));
	CHECK_EQ(al_defer_pending(d), 0);
	al_defer_destroy(d);
	p.irq_mode = AL_IRQ_WORK_SIGNAL + 1;
	CHECK_EQ(al_defer_create(1, &p, &d), -EINVAL);
}

/* One of the defer's own counters (al_defer_report), or -1 when not reported. */
static double defer_stat(struct al_defer *d, const char *name)
{
	static struct al_stats st;
	unsigned i;

	memset(&st, 0, sizeof(st));
	al_defer_report(d, &st);
	for (i = 0; i < st.n; i++)
		if (!strcmp(st.v[i].name, name))
			return st.v[i].value;
	return -1;
}

/* irq_work=ipi: one kernel entry per raised batch, counted, and no signal:
 * a program that owns irq_work=signal's signal keeps it. */
TEST(test_irq_work_ipi_is_a_kernel_entry_per_batch)
{
	struct al_defer_params p = { .irq_mode = AL_IRQ_WORK_IPI };
	struct al_defer *d = NULL;
	struct al_irq_work w1, w2;
	struct sigaction cur;
	struct al_ctx c0;

	CHECK_EQ(set_handler(foreign_handler), 0);
	CHECK_EQ(al_defer_create(1, &p, &d), 0);
	if (!d)
		return;
	memset(runs, 0, sizeof(runs));
	al_ctx_init(&c0, 0);
	al_irq_work_init(&w1, 0, count_fn);
	al_irq_work_init(&w2, 0, count_fn);
	al_defer_poll(d, &c0); /* nothing raised: no interrupt */
	CHECK_EQ(defer_stat(d, "irq_work_ipis"), 0);
	CHECK(al_irq_work_queue(d, &w1, &c0));
	CHECK(al_irq_work_queue(d, &w2, &c0));
	al_defer_poll(d, &c0);
	CHECK_EQ(runs[0], 2);
	CHECK_EQ(last_level, AL_CTX_IRQ);
	CHECK_EQ(defer_stat(d, "irq_work_ipis"), 1); /* one interrupt for the batch */
	CHECK(al_irq_work_queue(d, &w1, &c0));
	al_defer_poll(d, &c0);
	CHECK_EQ(defer_stat(d, "irq_work_ipis"), 2);
	CHECK_EQ(sigaction(AL_IRQ_WORK_SIGNO, NULL, &cur), 0);
	CHECK(cur.sa_handler == foreign_handler); /* never installed over the program's */
	CHECK_EQ(set_handler(SIG_DFL), 0);
	al_defer_destroy(d);
}

static int cb_runs[4];
static unsigned cb_level;

static void cb(struct al_rcu_head *h, struct al_ctx *c)
{
	(void)h;
	cb_runs[c->cpu]++;
	cb_level = c->level;
}

TEST(test_grace_period_waits_for_every_reader)
{
	struct al_defer *d = mk(2, AL_IRQ_WORK_INLINE, 0, false);
	struct al_rcu_reader r1, r2;
	struct al_rcu_head h[3];
	struct al_ctx c;

	if (!d)
		return;
	memset(cb_runs, 0, sizeof(cb_runs));
	al_ctx_init(&c, 0);
	CHECK_EQ(al_rcu_online(&r1), 0);
	CHECK_EQ(al_rcu_online(&r2), 0);
	CHECK_EQ(al_call_rcu(d, &c, &h[0], cb), 0);
	CHECK_EQ(al_call_rcu(d, &c, &h[1], cb), 0);
	al_defer_poll(d, &c); /* seals the batch: a grace period is requested */
	CHECK_EQ(cb_runs[0], 0);
	al_rcu_quiescent(&r1);
	al_defer_poll(d, &c);
	CHECK_EQ(cb_runs[0], 0); /* r2 has not passed a quiescent point */
	al_rcu_quiescent(&r2);
	al_defer_poll(d, &c);
	CHECK_EQ(cb_runs[0], 2);
	CHECK_EQ(cb_level, AL_CTX_TASK); /* softirq runs with IRQs enabled */
	/* An offline reader holds nothing up. */
	CHECK_EQ(al_call_rcu(d, &c, &h[2], cb), 0);
	al_defer_poll(d, &c);
	CHECK_EQ(cb_runs[0], 2);
	al_rcu_offline(&r2);
	al_rcu_quiescent(&r1);
	al_defer_poll(d, &c);
	CHECK_EQ(cb_runs[0], 3);
	al_rcu_offline(&r1);
	al_defer_destroy(d);
}

TEST(test_no_reader_completes_at_once_and_nmi_refused)
{
	struct al_defer *d = mk(1, AL_IRQ_WORK_INLINE, 0, false);
	struct al_rcu_head h;
	struct al_ctx c, nmi;

	if (!d)
		return;
	memset(cb_runs, 0, sizeof(cb_runs));
	al_ctx_init(&c, 0);
	al_ctx_nested(&nmi, &c, AL_CTX_NMI);
	CHECK_EQ(al_call_rcu(d, &nmi, &h, cb), -EBUSY);
	CHECK_EQ(al_kfree_rcu(d, &nmi, NULL, &h), -EBUSY);
	CHECK_EQ(al_call_rcu(d, &c, &h, cb), 0);
	al_defer_poll(d, &c);
	CHECK_EQ(cb_runs[0], 1);
	al_defer_destroy(d);
}

TEST(test_gp_latency_and_flush)
{
	struct al_defer *d = mk(1, AL_IRQ_WORK_INLINE, 10000000000ull, false); /* 10 s */
	struct al_rcu_head h;
	struct al_ctx c;

	if (!d)
		return;
	memset(cb_runs, 0, sizeof(cb_runs));
	al_ctx_init(&c, 0);
	CHECK_EQ(al_call_rcu(d, &c, &h, cb), 0);
	al_defer_poll(d, &c);
	al_defer_poll(d, &c);
	CHECK_EQ(cb_runs[0], 0); /* the GP is over, its latency is not */
	CHECK_EQ(al_defer_pending(d), 1);
	al_defer_flush(d, &c, AL_DRAIN_ALL); /* teardown: everything now */
	CHECK_EQ(cb_runs[0], 1);
	CHECK_EQ(al_defer_pending(d), 0);
	al_defer_destroy(d);
}

TEST(test_nocb_runs_on_next_cpu)
{
	struct al_defer *d = mk(2, AL_IRQ_WORK_INLINE, 0, true);
	struct al_rcu_head h;
	struct al_ctx c0, c1;

	if (!d)
		return;
	memset(cb_runs, 0, sizeof(cb_runs));
	al_ctx_init(&c0, 0);
	al_ctx_init(&c1, 1);
	CHECK_EQ(al_call_rcu(d, &c0, &h, cb), 0);
	al_defer_poll(d, &c0); /* sealed and handed to CPU 1 */
	CHECK_EQ(cb_runs[0] + cb_runs[1], 0);
	al_defer_poll(d, &c1);
	CHECK_EQ(cb_runs[1], 1);
	CHECK_EQ(cb_runs[0], 0);
	al_defer_destroy(d);
}

TEST(test_kfree_rcu_batches_into_free_bulk)
{
	struct al_allocator *a = t_spec("slab", 1);
	struct al_defer *d = mk(1, AL_IRQ_WORK_INLINE, 0, false);
	struct al_ctx c;
	static void *v[700];
	unsigned i;

	if (!a || !d)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 700; i++)
		v[i] = al_alloc(a, &c, 64, 0);
	for (i = 0; i < 100; i++)
		CHECK_EQ(al_kfree_rcu(d, &c, a, v[i]), 0);
	CHECK_EQ(t_stat(a, 0, "kfrees"), 0);
	al_defer_poll(d, &c);
	CHECK_EQ(t_stat(a, 0, "kfrees"), 100);
	CHECK_EQ(t_stat(a, 0, "bulk_frees"), 1);   /* one kfree_bulk for the batch */
	CHECK_EQ(defer_stat(d, "rcu_batches"), 1); /* sealed by the poll */
	for (i = 100; i < 700; i++)		   /* more than a batch (504) holds: two batches */
		CHECK_EQ(al_kfree_rcu(d, &c, a, v[i]), 0);
	CHECK_EQ(defer_stat(d, "rcu_batches"), 2); /* the full one, sealed by kfree_rcu */
	al_defer_poll(d, &c);
	CHECK_EQ(t_stat(a, 0, "kfrees"), 700);
	CHECK_EQ(t_stat(a, 0, "bulk_frees"), 3);
	CHECK_EQ(defer_stat(d, "rcu_batches"), 3);
	al_defer_poll(d, &c); /* nothing open: nothing sealed */
	CHECK_EQ(defer_stat(d, "rcu_batches"), 3);
	al_defer_destroy(d);
	t_teardown(a);
}

TEST(test_thread_mode_helper)
{
	struct al_defer *d = mk(2, AL_IRQ_WORK_THREAD, 0, false);
	struct al_irq_work w;
	struct al_ctx c;

	if (!d)
		return;
	memset(runs, 0, sizeof(runs));
	al_ctx_init(&c, 1);
	al_irq_work_init(&w, 1, count_fn);
	CHECK(al_irq_work_queue(d, &w, &c));
	al_defer_poll(d, &c);		     /* inline polls do nothing in thread mode */
	al_defer_flush(d, &c, AL_DRAIN_ALL); /* waits for the helper, runs what is left */
	CHECK_EQ(__atomic_load_n(&runs[1], __ATOMIC_RELAXED), 1);
	al_defer_destroy(d);
}

static struct al_ctx handler_ctx;
static int handler_saw;

static void on_signal(int sig)
{
	struct al_ctx *cur = al_ctx_current();

	(void)sig;
	if (cur) {
		al_ctx_nested(&handler_ctx, cur, AL_CTX_NMI);
		handler_saw = 1;
	}
}

TEST(test_ctx_current_in_signal_handler)
{
	struct al_ctx c;

	al_ctx_init(&c, 3);
	al_ctx_set_current(&c);
	signal(SIGUSR2, on_signal);
	raise(SIGUSR2); /* delivered before raise returns */
	signal(SIGUSR2, SIG_DFL);
	al_ctx_set_current(NULL);
	CHECK_EQ(handler_saw, 1);
	CHECK_EQ(handler_ctx.cpu, 3);
	CHECK_EQ(handler_ctx.level, AL_CTX_NMI);
	CHECK(al_ctx_current() == NULL);
}

/* ---- RCU Tasks Trace ---- */

static int tt_runs;

static void tt_cb(struct al_rcu_head *h, struct al_ctx *c)
{
	(void)h;
	(void)c;
	tt_runs++;
}

static struct al_defer *mk_tt(unsigned ncpu, int mode, int lazy_ms)
{
	struct al_defer_params p = {
		.irq_mode = AL_IRQ_WORK_INLINE, .ttrace = mode, .hz = 20, .lazy_ms = lazy_ms
	};
	struct al_defer *d = NULL;

	CHECK_EQ(al_defer_create(ncpu, &p, &d), 0);
	return d;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { 0, (long)ms * 1000000L };

	nanosleep(&ts, NULL);
}

/* classic, no batching, HZ=20 (50 ms jiffies: wide margins for a loaded
 * machine): the GP starts at the first step; CPU 0 drives it, so CPU 1's
 * running task is the one holdout. Pass one (after init_fract = HZ/200,
 * at least 1 jiffy) sends it an IPI, CPU 1's next poll takes it, pass two
 * (2 jiffies later) drops it and the GP ends: 2 + 1 + 1 per-CPU checks,
 * one IPI, one plain GP waited for (postscan). The callback never runs
 * before the end, however often the domain is stepped. */
TEST(test_ttrace_classic_holdouts_and_ipis)
{
	struct al_defer *d = mk_tt(2, AL_TTRACE_CLASSIC, 0);
	struct al_rcu_head h;
	struct al_ctx c0, c1, nmi;
	unsigned i;

	if (!d)
		return;
	tt_runs = 0;
	al_ctx_init(&c0, 0);
	al_ctx_init(&c1, 1);
	al_ctx_nested(&nmi, &c0, AL_CTX_NMI);
	CHECK_EQ(al_call_rcu_tasks_trace(d, &nmi, &h, tt_cb), -EBUSY);
	CHECK_EQ(al_call_rcu_tasks_trace(d, &c0, &h, tt_cb), 0);
	CHECK_EQ(al_defer_pending(d), 1);
	al_defer_run(d, &c0); /* pregp: both CPUs checked, CPU 1 a holdout */
	CHECK_EQ(defer_stat(d, "ttrace_cpu_checks"), 2);
	CHECK_EQ(defer_stat(d, "ttrace_rcu_gps"), 1);
	CHECK_EQ(defer_stat(d, "ttrace_ipis"), 0);
	for (i = 0; i < 3; i++)
		al_defer_run(d, &c0); /* before the first holdout sleep ends */
	CHECK_EQ(defer_stat(d, "ttrace_ipis"), 0);
	sleep_ms(75);
	al_defer_run(d, &c0); /* pass one: IPI CPU 1 */
	CHECK_EQ(defer_stat(d, "ttrace_ipis"), 1);
	CHECK_EQ(defer_stat(d, "ttrace_cpu_checks"), 3);
	CHECK_EQ(tt_runs, 0);
	al_defer_poll(d, &c1); /* the IPI is taken at CPU 1's next poll */
	al_defer_run(d, &c0);  /* too early for pass two */
	CHECK_EQ(al_ttrace_gp_done(d), 0);
	CHECK_EQ(tt_runs, 0);
	sleep_ms(125);
	al_defer_run(d, &c0); /* pass two: the GP ends, the callback runs */
	CHECK_EQ(al_ttrace_gp_done(d), 1);
	CHECK_EQ(tt_runs, 1);
	CHECK_EQ(defer_stat(d, "ttrace_gps"), 1);
	CHECK_EQ(defer_stat(d, "ttrace_cpu_checks"), 4);
	CHECK_EQ(defer_stat(d, "ttrace_ipis"), 1);
	CHECK_EQ(defer_stat(d, "ttrace_ipis_idle"), 0);
	CHECK_EQ(defer_stat(d, "ttrace_callbacks_run"), 1);
	CHECK_EQ(defer_stat(d, "rcu_callbacks"), 0); /* not a plain call_rcu */
	CHECK_EQ(al_defer_pending(d), 0);
	al_defer_destroy(d);
}

/* A CPU that runs nothing for a whole pass takes its IPI as an idle CPU
 * does (at once): the GP still ends at pass two. A plain GP held up by a
 * reader holds up the tasks-trace GP (its postscan's synchronize_rcu). */
TEST(test_ttrace_classic_idle_cpu_and_reader)
{
	struct al_defer *d = mk_tt(3, AL_TTRACE_CLASSIC, 0);
	struct al_rcu_reader r;
	struct al_rcu_head h;
	struct al_ctx c0;

	if (!d)
		return;
	tt_runs = 0;
	al_ctx_init(&c0, 0);
	CHECK_EQ(al_rcu_online(&r), 0);
	CHECK_EQ(al_call_rcu_tasks_trace(d, &c0, &h, tt_cb), 0);
	al_defer_run(d, &c0); /* pregp: 3 checks, CPUs 1 and 2 holdouts */
	sleep_ms(75);
	al_defer_run(d, &c0); /* the plain GP is not over: no pass yet */
	CHECK_EQ(defer_stat(d, "ttrace_ipis"), 0);
	al_rcu_quiescent(&r);
	al_rcu_offline(&r);
	al_defer_run(d, &c0); /* plain GP over: the holdout sleep starts now */
	CHECK_EQ(defer_stat(d, "ttrace_ipis"), 0);
	sleep_ms(75);
	al_defer_run(d, &c0); /* pass one: two IPIs */
	CHECK_EQ(defer_stat(d, "ttrace_ipis"), 2);
	sleep_ms(125);
	al_defer_run(d, &c0); /* pass two: neither was taken, both idle */
	CHECK_EQ(defer_stat(d, "ttrace_ipis_idle"), 2);
	CHECK_EQ(defer_stat(d, "ttrace_cpu_checks"), 3 + 2 + 2);
	CHECK_EQ(defer_stat(d, "ttrace_gps"), 1);
	CHECK_EQ(tt_runs, 1);
	al_defer_destroy(d);
}

/* The lazy timer: with rcu_tasks_trace_lazy_ms=30 (1 jiffy) no GP starts
 * before it fires, however often the domain is stepped; 32 queued
 * callbacks wake the kthread at the 33rd; al_defer_flush runs everything
 * at once, uncounted as a GP. A single-CPU domain has no holdout: its GP
 * is the plain GP. */
TEST(test_ttrace_classic_lazy_timer_and_flush)
{
	struct al_defer *d = mk_tt(1, AL_TTRACE_CLASSIC, 30);
	static struct al_rcu_head h[40];
	struct al_ctx c0;
	unsigned i;

	if (!d)
		return;
	tt_runs = 0;
	al_ctx_init(&c0, 0);
	CHECK_EQ(al_call_rcu_tasks_trace(d, &c0, &h[0], tt_cb), 0);
	al_defer_run(d, &c0);
	sleep_ms(10);
	al_defer_run(d, &c0);
	CHECK_EQ(defer_stat(d, "ttrace_gps"), 0);
	CHECK_EQ(defer_stat(d, "ttrace_cpu_checks"), 0);
	sleep_ms(70);
	al_defer_run(d, &c0); /* the timer fired: one CPU, no holdout, done */
	CHECK_EQ(defer_stat(d, "ttrace_gps"), 1);
	CHECK_EQ(defer_stat(d, "ttrace_cpu_checks"), 1);
	CHECK_EQ(defer_stat(d, "ttrace_ipis"), 0);
	CHECK_EQ(tt_runs, 1);
	/* gp_sleep (1 jiffy) is over before the 33rd callback below */
	sleep_ms(75);
	for (i = 0; i < 32; i++)
		CHECK_EQ(al_call_rcu_tasks_trace(d, &c0, &h[i], tt_cb), 0);
	al_defer_run(d, &c0); /* 32 queued, the timer armed: still lazy */
	CHECK_EQ(defer_stat(d, "ttrace_gps"), 1);
	CHECK_EQ(al_call_rcu_tasks_trace(d, &c0, &h[32], tt_cb), 0);
	al_defer_run(d, &c0); /* the 33rd wakes the kthread */
	CHECK_EQ(defer_stat(d, "ttrace_gps"), 2);
	CHECK_EQ(tt_runs, 34);
	CHECK_EQ(al_call_rcu_tasks_trace(d, &c0, &h[33], tt_cb), 0);
	al_defer_flush(d, &c0, AL_DRAIN_ALL);
	CHECK_EQ(tt_runs, 35);
	CHECK_EQ(defer_stat(d, "ttrace_gps"), 2);
	CHECK_EQ(al_defer_pending(d), 0);
	al_defer_destroy(d);
}

/* SRCU-fast: the GP work starts a jiffy after the request; two scans of
 * both CPUs' lock and unlock counters, each with a plain GP; no IPI; the
 * callbacks run a jiffy after the GP ends. */
TEST(test_ttrace_srcu_fast_scans)
{
	struct al_defer *d = mk_tt(2, AL_TTRACE_SRCU, -1);
	struct al_rcu_head h;
	struct al_ctx c0;

	if (!d)
		return;
	tt_runs = 0;
	al_ctx_init(&c0, 0);
	CHECK_EQ(al_call_rcu_tasks_trace(d, &c0, &h, tt_cb), 0);
	sleep_ms(75);
	al_defer_run(d, &c0); /* both scans (no reader: plain GPs at once) */
	CHECK_EQ(defer_stat(d, "ttrace_cpu_checks"), 2 * 2 * 2);
	CHECK_EQ(defer_stat(d, "ttrace_rcu_gps"), 2);
	CHECK_EQ(defer_stat(d, "ttrace_gps"), 0); /* cbdelay */
	CHECK_EQ(tt_runs, 0);
	sleep_ms(75);
	al_defer_run(d, &c0);
	CHECK_EQ(defer_stat(d, "ttrace_gps"), 1);
	CHECK_EQ(defer_stat(d, "ttrace_ipis"), 0);
	CHECK_EQ(tt_runs, 1);
	al_defer_destroy(d);
}

/* ttrace=plain is a plain call_rcu (the former model). */
TEST(test_ttrace_plain_is_call_rcu)
{
	struct al_defer *d = mk_tt(1, AL_TTRACE_PLAIN, -1);
	struct al_rcu_head h;
	struct al_ctx c0;

	if (!d)
		return;
	tt_runs = 0;
	al_ctx_init(&c0, 0);
	CHECK_EQ(al_call_rcu_tasks_trace(d, &c0, &h, tt_cb), 0);
	al_defer_poll(d, &c0);
	CHECK_EQ(tt_runs, 1);
	CHECK_EQ(defer_stat(d, "rcu_callbacks_run"), 1);
	CHECK_EQ(defer_stat(d, "ttrace_callbacks"), 0);
	al_defer_destroy(d);
}

int main(void)
{
	RUN(test_irq_work_once_and_at_task_level);
	RUN(test_irq_work_signal_is_a_self_signal);
	RUN(test_irq_work_ipi_is_a_kernel_entry_per_batch);
	RUN(test_grace_period_waits_for_every_reader);
	RUN(test_no_reader_completes_at_once_and_nmi_refused);
	RUN(test_gp_latency_and_flush);
	RUN(test_nocb_runs_on_next_cpu);
	RUN(test_kfree_rcu_batches_into_free_bulk);
	RUN(test_thread_mode_helper);
	RUN(test_ctx_current_in_signal_handler);
	RUN(test_ttrace_classic_holdouts_and_ipis);
	RUN(test_ttrace_classic_idle_cpu_and_reader);
	RUN(test_ttrace_classic_lazy_timer_and_flush);
	RUN(test_ttrace_srcu_fast_scans);
	RUN(test_ttrace_plain_is_call_rcu);
	return TEST_SUMMARY();
}
