/* SPDX-License-Identifier: MIT */
/*
 * Deferred work (DESIGN §3): the running thread's context (the NMI model),
 * the fault-injection hook, irq_work, and grace periods (an RCU model).
 *
 * Grace periods
 * -------------
 * Global, like the kernel's RCU. Readers (engine workers) register and
 * report quiescent points between cycles. Three numbers, changed under a
 * small spinlock (once per grace period or batch, never per object):
 *   started    the last GP number started,
 *   done       the last GP number completed (al_rcu_gp_done, read lock-free),
 *   requested  the highest GP number a sealed batch waits for.
 * A reader's `seen` is the value of `started` it read at its last quiescent
 * point, so seen >= g proves it passed one after GP g began. GP g completes
 * when every online reader has seen >= g; if more was requested, GP g + 1
 * starts at once. A reader going offline (waiting at a barrier, finished) is
 * in an extended quiescent state and holds nothing up; with no reader online
 * a request completes at once, which keeps single-threaded tests
 * deterministic.
 *
 * Domains
 * -------
 * A layer instance or workload owns a struct al_defer: per CPU, a lock-free
 * raised list of irq_work, an open RCU batch (callbacks and kfree_rcu
 * pointers, owner only), a lock-free stack of incoming sealed batches, a
 * FIFO of batches waiting for their GP (executor only), and a pool of free
 * batches (returned lock-free by whichever CPU executed them).
 * Lock-free stacks are pushed with CAS and emptied whole with an exchange
 * (one consumer), so there is no ABA. A batch is one 4 KiB block from
 * al_meta_alloc, recycled, freed at destroy.
 *
 * Thread mode: one helper thread per domain (woken by a semaphore, which is
 * async-signal-safe) runs every CPU's irq_work and RCU batches under
 * run_lock; the inline poll then does nothing. In that mode call_rcu and
 * kfree_rcu may only be called from the domain's own irq_work functions.
 *
 * Cost: al_defer_poll() is two loads and a branch when there is nothing to
 * do; queueing irq_work is one CAS (plus an atomic OR); call_rcu is a few
 * stores into the open batch; a seal is one spinlock round trip on the
 * global GP state.
 *
 * RCU Tasks Trace
 * ---------------
 * Per domain (struct tt), a state machine stepped by whichever CPU takes
 * the poll's slow path (tt_advance): one trylock and one clock read when a
 * callback or a GP is pending, nothing otherwise. Its timers: a busy domain
 * registers the tick of its next step (tt_kick); al_rcu_quiescent reads the
 * earliest (one load, and a clock read only while one is registered) and
 * marks the CPUs of due domains with AL_DEFER_TT, so the poll's fast path is
 * unchanged. Phases: TT_IDLE (callbacks
 * queued wait for the lazy timer, or urgent_gp, and for gp_sleep after the
 * last GP), TT_RCU (waiting for a plain GP: the classic postscan, or one
 * SRCU-fast scan), TT_HOLD (classic: sleeping until the next holdout pass),
 * TT_CBDELAY (SRCU: cbdelay before the callbacks run). A CPU's holdout state
 * (defer_cpu.tt_hold) goes WAIT (a holdout) -> IPI (sent: the target's todo
 * has AL_DEFER_TT_IPI) -> DONE (its handler ran on the target) -> NONE
 * (dropped by the next pass). Callbacks are queued, covered by the running
 * GP (in_gp) or ready; they run outside the lock, on the stepping CPU.
 * Times are in ticks; a jiffy is 1/hz s.
 *
 * Lock order: a domain's run_lock (thread mode, and al_defer_flush in it)
 * before tt.lock before gp.lock; gp.lock and tt.lock are leaves but for
 * that order (gp.lock: nothing else is taken under it; tt.lock: only
 * gp.lock, to request a grace period), and no callback runs under either.
 * Callbacks and irq_work functions run under run_lock in thread mode and
 * under no lock of this file inline, so they may take their layer's locks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "alloclab/core.h"

/* ---- the running thread's context ---- */

static __thread struct al_ctx *cur_ctx __attribute__((tls_model("initial-exec")));

struct al_ctx *al_ctx_current(void)
{
	return cur_ctx;
}

void al_ctx_set_current(struct al_ctx *c)
{
	cur_ctx = c;
}

al_inject_fn al_inject_hook;

/* ---- grace periods ---- */

uint64_t al_rcu_gp_done;

static struct {
	uint64_t started;   /* last GP started */
	uint64_t requested; /* highest GP some batch waits for */
	int lock;	    /* guards started, requested, done, readers[] */
	unsigned hwm;	    /* readers[] slots ever used */
	struct al_rcu_reader *readers[AL_RCU_MAX_READERS];
} gp;

static void gp_lock(void)
{
	while (__atomic_exchange_n(&gp.lock, 1, __ATOMIC_ACQUIRE))
		al_cpu_relax();
}

static bool gp_trylock(void)
{
	return !__atomic_exchange_n(&gp.lock, 1, __ATOMIC_ACQUIRE);
}

static void gp_unlock(void)
{
	__atomic_store_n(&gp.lock, 0, __ATOMIC_RELEASE);
}

/* Complete the running GP if every online reader has passed it (lock held). */
static void gp_advance_locked(void)
{
	al_flag_assert_held(&gp.lock);
	al_assert(gp.hwm <= AL_RCU_MAX_READERS);
	for (;;) {
		uint64_t s = gp.started;
		unsigned i;

		/* grace periods complete in order, at most the one started */
		al_assert(__atomic_load_n(&al_rcu_gp_done, __ATOMIC_RELAXED) <= s);
		if (s == __atomic_load_n(&al_rcu_gp_done, __ATOMIC_RELAXED))
			return;
		for (i = 0; i < gp.hwm; i++) {
			struct al_rcu_reader *r = gp.readers[i];

			if (r && __atomic_load_n(&r->seen, __ATOMIC_ACQUIRE) < s)
				return;
		}
		__atomic_store_n(&al_rcu_gp_done, s, __ATOMIC_RELEASE);
		if (gp.requested <= s)
			return;
		__atomic_store_n(&gp.started, s + 1, __ATOMIC_RELEASE);
	}
}

static void gp_try_advance(void)
{
	if (!gp_trylock())
		return; /* whoever holds it advances */
	gp_advance_locked();
	gp_unlock();
}

uint64_t al_rcu_gp_request(void)
{
	uint64_t need;

	gp_lock();
	if (gp.started == __atomic_load_n(&al_rcu_gp_done, __ATOMIC_RELAXED)) {
		__atomic_store_n(&gp.started, gp.started + 1, __ATOMIC_RELEASE);
		need = gp.started;
	} else {
		need = gp.started + 1; /* the running GP began before this request */
	}
	if (need > gp.requested)
		gp.requested = need;
	gp_advance_locked();
	gp_unlock();
	return need;
}

int al_rcu_online(struct al_rcu_reader *r)
{
	unsigned i;

	gp_lock();
	for (i = 0; i < gp.hwm && gp.readers[i]; i++)
		;
	if (i == AL_RCU_MAX_READERS) {
		gp_unlock();
		r->slot = -1;
		return -ENOSPC;
	}
	if (i == gp.hwm)
		gp.hwm++;
	/* A reader coming online holds no reference from before: it has passed. */
	__atomic_store_n(&r->seen, gp.started, __ATOMIC_RELEASE);
	r->slot = (int)i;
	gp.readers[i] = r;
	gp_unlock();
	return 0;
}

void al_rcu_offline(struct al_rcu_reader *r)
{
	if (r->slot < 0)
		return;
	gp_lock();
	al_assert((unsigned)r->slot < gp.hwm && gp.readers[r->slot] == r);
	gp.readers[r->slot] = NULL;
	r->slot = -1;
	gp_advance_locked();
	gp_unlock();
}

static void tt_kick_due(void);

void al_rcu_quiescent(struct al_rcu_reader *r)
{
	uint64_t s = __atomic_load_n(&gp.started, __ATOMIC_ACQUIRE);

	__atomic_store_n(&r->seen, s, __ATOMIC_RELEASE);
	if (s != __atomic_load_n(&al_rcu_gp_done, __ATOMIC_ACQUIRE))
		gp_try_advance();
	tt_kick_due();
}

/* ---- domains ---- */

#define BATCH_BYTES 4096

struct rcu_batch {
	struct rcu_batch *next;	      /* incoming/wait/pool link */
	uint64_t need;		      /* GP that must complete first */
	uint64_t ready_at;	      /* ticks: not before (gp_latency) */
	unsigned owner;		      /* CPU whose pool it returns to */
	unsigned nptr;		      /* kfree_rcu pointers in ptrs[] */
	unsigned ncb;		      /* callbacks on cb_head */
	unsigned pad;		      /* unused */
	struct al_allocator *kfree_a; /* allocator the pointers go back to */
	struct al_rcu_head *cb_head;  /* callbacks, FIFO */
	struct al_rcu_head *cb_tail;  /* last callback */
	void *ptrs[];		      /* kfree_rcu pointers */
};

#define BATCH_PTRS ((BATCH_BYTES - offsetof(struct rcu_batch, ptrs)) / sizeof(void *))

/* Private per-CPU state (one cache line each). */
struct defer_cpu {
	struct al_irq_work *raised;  /* lock-free stack of queued irq_work */
	struct rcu_batch *open;	     /* batch taking callbacks (owner only) */
	struct rcu_batch *incoming;  /* lock-free stack of sealed batches to run here */
	struct rcu_batch *wait_head; /* sealed batches waiting for their GP (FIFO) */
	struct rcu_batch *wait_tail; /* last of them */
	struct rcu_batch *pool;	     /* lock-free stack of free batches, pushed by executors */
	struct rcu_batch *pool_own;  /* free batches taken by the owner */
	uint64_t nbatches;	     /* batches this CPU allocated (freed at destroy) */
	int tt_hold;		     /* TT_H_*: this CPU in the running tasks-trace GP */
} __attribute__((aligned(AL_CACHELINE)));

/* A CPU's part in a classic tasks-trace GP (its running task as a holdout). */
enum { TT_H_NONE = 0, TT_H_WAIT = 1, TT_H_IPI = 2, TT_H_DONE = 3 };
enum { TT_IDLE = 0, TT_RCU = 1, TT_HOLD = 2, TT_CBDELAY = 3 };

struct tt_list {
	struct al_rcu_head *head; /* FIFO */
	struct al_rcu_head *tail; /* last */
	unsigned n;		  /* callbacks */
};

/* A domain's RCU Tasks Trace engine (the kernel's rcu_tasks_trace kthread). */
struct tt {
	int lock;	       /* guards the rest; only gp.lock is taken under it */
	int busy;	       /* callbacks or a GP pending (read without the lock) */
	int phase;	       /* TT_* */
	unsigned urgent;       /* urgent_gp: GPs that need not wait for the lazy timer */
	unsigned fract;	       /* classic: the holdout sleep, jiffies */
	unsigned scan;	       /* SRCU: the scan running, 1 or 2 */
	unsigned nholdout;     /* classic: holdout CPUs left */
	uint64_t seq;	       /* GPs started */
	uint64_t done;	       /* GPs completed */
	uint64_t lazy_at;      /* ticks: the lazy timer (SRCU: the GP work's start), 0: off */
	uint64_t next_at;      /* ticks: the running GP's next step */
	uint64_t idle_at;      /* ticks: no GP starts before (gp_sleep) */
	uint64_t rcu_need;     /* plain GP the running step waits for */
	uint64_t scan_sum;     /* SRCU: what the last counter scan read (kept, so it is done) */
	struct tt_list queued; /* not covered by a GP yet */
	struct tt_list in_gp;  /* covered by the running GP */
	struct tt_list ready;  /* GP over, not run yet */
};

/* The domain counts every entry of AL_DEFER_COUNTERS (deferred.h), which
 * the owning layer's list declares as reported by its stats(). */
#define DEFER_ENUM_(P, name, flags, formula, doc) P##name,
#define DEFER_DESC_(P, name, flags, formula, doc) { #name, doc, (flags), NULL },
enum { AL_DEFER_COUNTERS(DEFER_ENUM_, DEFER_) DEFER_NR };
static const struct al_counter_desc defer_counters[] = { AL_DEFER_COUNTERS(DEFER_DESC_, DEFER_) };

struct defer {
	struct al_defer pub;	/* must be first */
	unsigned ncpu;		/* CPUs */
	int mode;		/* enum al_irq_work_mode */
	bool nocb;		/* sealed batches run on the next CPU */
	uint64_t latency_ticks; /* minimum grace-period length */
	struct defer_cpu *cpu;	/* ncpu entries */
	struct al_counters ctr; /* DEFER_COUNTERS */
	/* RCU Tasks Trace */
	int tt_mode;	    /* enum al_ttrace_mode */
	unsigned tt_hz;	    /* jiffies per second */
	unsigned tt_fract0; /* classic: init_fract and gp_sleep, HZ/200 jiffies (at least 1) */
	uint64_t tt_jiffy;  /* ticks per jiffy */
	uint64_t tt_lazy;   /* classic: ticks of the lazy timer, 0: no batching */
	uint64_t tt_due;    /* ticks: its next step, 0: idle (tt_kick.lock) */
	struct tt tt;	    /* the engine */
	/* thread mode */
	pthread_t helper;	  /* the helper thread */
	bool helper_started;	  /* helper is running */
	int stop;		  /* asks the helper to exit */
	sem_t wake;		  /* posted when work is queued */
	pthread_mutex_t run_lock; /* held by whoever runs the domain's work */
};

static inline struct defer *to_defer(struct al_defer *d)
{
	return (struct defer *)d;
}

static void push_batch(struct rcu_batch **head, struct rcu_batch *b)
{
	struct rcu_batch *old = __atomic_load_n(head, __ATOMIC_RELAXED);

	do
		b->next = old;
	while (!__atomic_compare_exchange_n(head, &old, b, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED));
}

static void wake_helper(struct defer *d)
{
	if (d->mode == AL_IRQ_WORK_THREAD)
		sem_post(&d->wake);
}

void al_irq_work_init(struct al_irq_work *w, unsigned cpu,
		      void (*func)(struct al_irq_work *w, struct al_ctx *c))
{
	w->func = func;
	w->next = NULL;
	w->cpu = cpu;
	w->pending = 0;
}

bool al_irq_work_queue(struct al_defer *pub, struct al_irq_work *w, const struct al_ctx *c)
{
	struct defer *d = to_defer(pub);
	struct defer_cpu *dc = &d->cpu[w->cpu];
	struct al_irq_work *old;
	int zero = 0;

	if (!__atomic_compare_exchange_n(&w->pending, &zero, 1, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_RELAXED)) {
		al_count(&d->ctr, c, DEFER_irq_work_busy, 1);
		return false;
	}
	old = __atomic_load_n(&dc->raised, __ATOMIC_RELAXED);
	do
		w->next = old;
	while (!__atomic_compare_exchange_n(&dc->raised, &old, w, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED));
	__atomic_fetch_or(&pub->pcpu[w->cpu].todo, AL_DEFER_IRQ, __ATOMIC_RELEASE);
	al_count(&d->ctr, c, DEFER_irq_work_queued, 1);
	wake_helper(d);
	return true;
}

/* ---- the self-IPI (irq_work=ipi, irq_work=signal) ---- */

/* The kernel raises irq_work with a self-IPI (arch_irq_work_raise) and runs
 * it from the interrupt once IRQs are on again. An interrupt taken in kernel
 * mode pays the kernel's entry and exit and nothing of user space's state:
 * irq_work=ipi stands it in by a null system call (getppid, never cached),
 * the same entry and exit path; the APIC write that sends the IPI is not in
 * it. irq_work=signal: a signal a thread sends itself is delivered before
 * pthread_kill returns: two system calls, a signal frame holding the FPU
 * state and sigreturn, more than any interrupt: an upper bound. */
static void ipi_handler(int sig)
{
	(void)sig;
}

static int ipi_installed;

/* Install the no-op handler once per process: 0, or -EBUSY when the program
 * has its own handler for the signal. */
static int ipi_install(void)
{
	struct sigaction sa, old;

	if (__atomic_load_n(&ipi_installed, __ATOMIC_ACQUIRE))
		return 0;
	if (sigaction(AL_IRQ_WORK_SIGNO, NULL, &old))
		return -EINVAL;
	if (old.sa_handler == ipi_handler) {
		__atomic_store_n(&ipi_installed, 1, __ATOMIC_RELEASE);
		return 0;
	}
	if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)
		return -EBUSY;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = ipi_handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(AL_IRQ_WORK_SIGNO, &sa, NULL))
		return -EINVAL;
	__atomic_store_n(&ipi_installed, 1, __ATOMIC_RELEASE);
	return 0;
}

/* Take an interrupt on x's CPU (raised irq_work, or a tasks-trace GP's IPI),
 * timed at stats=full. */
static void ipi_take(struct defer *d, const struct al_ctx *x, bool irq_work)
{
	uint64_t *k = al_ctr_block(&d->ctr, x);
	uint64_t t0 = 0;

	if (d->ctr.level == AL_STATS_FULL)
		t0 = al_ticks();
	if (d->mode == AL_IRQ_WORK_SIGNAL)
		pthread_kill(pthread_self(), AL_IRQ_WORK_SIGNO);
	else
		syscall(SYS_getppid);
	if (t0)
		al_ctr_add(k, DEFER_irq_work_ipi_ns,
			   (uint64_t)al_ticks_to_ns((double)(al_ticks() - t0)));
	if (irq_work)
		al_ctr_add(k, DEFER_irq_work_ipis, 1);
}

/* Run the raised irq_work of x->cpu, oldest first, at x's level. */
static void run_irq_work(struct defer *d, struct al_ctx *x)
{
	struct defer_cpu *dc = &d->cpu[x->cpu];
	struct al_irq_work *w, *rev = NULL, *next;

	w = __atomic_exchange_n(&dc->raised, NULL, __ATOMIC_ACQUIRE);
	if (w && d->mode >= AL_IRQ_WORK_IPI)
		ipi_take(d, x, true);
	for (; w; w = next) { /* the stack is newest first */
		next = w->next;
		w->next = rev;
		rev = w;
	}
	for (w = rev; w; w = next) {
		next = w->next;
		__atomic_store_n(&w->pending, 0, __ATOMIC_RELEASE); /* may be queued again */
		al_count(&d->ctr, x, DEFER_irq_work_runs, 1);
		x->err = 0;
		w->func(w, x);
	}
}

static struct rcu_batch *batch_get(struct defer *d, unsigned cpu)
{
	struct defer_cpu *dc = &d->cpu[cpu];
	struct rcu_batch *b = dc->pool_own;

	if (!b) {
		b = __atomic_exchange_n(&dc->pool, NULL, __ATOMIC_ACQUIRE);
		if (!b) {
			b = al_meta_alloc(BATCH_BYTES);
			if (!b)
				return NULL;
			dc->nbatches++;
		}
	}
	dc->pool_own = b->next;
	memset(b, 0, offsetof(struct rcu_batch, ptrs));
	b->owner = cpu;
	return b;
}

/* Seal c's CPU's open batch: request a GP and hand it to its executor. */
static void seal(struct defer *d, const struct al_ctx *c)
{
	unsigned cpu = c->cpu;
	struct defer_cpu *dc = &d->cpu[cpu];
	struct rcu_batch *b = dc->open;
	unsigned target = d->nocb && d->ncpu > 1 ? (cpu + 1) % d->ncpu : cpu;

	if (!b || (!b->nptr && !b->ncb))
		return;
	dc->open = NULL;
	al_count(&d->ctr, c, DEFER_rcu_batches, 1);
	b->need = al_rcu_gp_request();
	b->ready_at = d->latency_ticks ? al_ticks_fast() + d->latency_ticks : 0;
	push_batch(&d->cpu[target].incoming, b);
	__atomic_fetch_or(&d->pub.pcpu[target].todo, AL_DEFER_RCU, __ATOMIC_RELEASE);
	if (target != cpu)
		wake_helper(d);
}

static struct rcu_batch *open_batch(struct defer *d, struct al_ctx *c)
{
	struct defer_cpu *dc = &d->cpu[c->cpu];

	if (!dc->open) {
		dc->open = batch_get(d, c->cpu);
		if (!dc->open)
			return NULL;
		if (!(__atomic_load_n(&d->pub.pcpu[c->cpu].todo, __ATOMIC_RELAXED) & AL_DEFER_RCU))
			__atomic_fetch_or(&d->pub.pcpu[c->cpu].todo, AL_DEFER_RCU,
					  __ATOMIC_RELAXED);
	}
	return dc->open;
}

int al_call_rcu(struct al_defer *pub, struct al_ctx *c, struct al_rcu_head *h,
		void (*func)(struct al_rcu_head *h, struct al_ctx *c))
{
	struct defer *d = to_defer(pub);
	struct rcu_batch *b;

	if (c->level == AL_CTX_NMI || !(b = open_batch(d, c))) {
		al_count(&d->ctr, c, DEFER_rcu_refused, 1);
		return c->level == AL_CTX_NMI ? -EBUSY : -ENOMEM;
	}
	h->func = func;
	h->next = NULL;
	if (b->cb_tail)
		b->cb_tail->next = h;
	else
		b->cb_head = h;
	b->cb_tail = h;
	b->ncb++;
	al_count(&d->ctr, c, DEFER_rcu_callbacks, 1);
	return 0;
}

int al_kfree_rcu(struct al_defer *pub, struct al_ctx *c, struct al_allocator *a, void *ptr)
{
	struct defer *d = to_defer(pub);
	struct rcu_batch *b;

	if (c->level == AL_CTX_NMI) {
		al_count(&d->ctr, c, DEFER_rcu_refused, 1);
		return -EBUSY;
	}
	b = d->cpu[c->cpu].open;
	if (b && (b->nptr == BATCH_PTRS || (b->kfree_a && b->kfree_a != a)))
		seal(d, c); /* full, or for another allocator */
	b = open_batch(d, c);
	if (!b) {
		al_count(&d->ctr, c, DEFER_rcu_refused, 1);
		return -ENOMEM;
	}
	b->kfree_a = a;
	b->ptrs[b->nptr++] = ptr;
	al_count(&d->ctr, c, DEFER_kfree_rcu_objects, 1);
	return 0;
}

static void run_batch(struct defer *d, struct rcu_batch *b, struct al_ctx *x)
{
	struct al_rcu_head *h, *next;
	unsigned i;
	int n;

	uint64_t *k = al_ctr_block(&d->ctr, x);

	if (b->owner != x->cpu)
		al_ctr_add(k, DEFER_rcu_batches_remote, 1);
	for (h = b->cb_head; h; h = next) {
		next = h->next;
		x->err = 0;
		h->func(h, x);
	}
	al_ctr_add(k, DEFER_rcu_callbacks_run, b->ncb);
	if (b->nptr) {
		n = al_free_bulk(b->kfree_a, x, b->ptrs, b->nptr);
		if (n < 0) /* refused as a whole (a lock failed): one by one */
			for (i = 0, n = 0; i < b->nptr; i++)
				n += !al_free(b->kfree_a, x, b->ptrs[i]);
		al_ctr_add(k, DEFER_kfree_rcu_freed, (uint64_t)n);
		al_ctr_add(k, DEFER_kfree_rcu_failed, b->nptr - (unsigned)n);
	}
	push_batch(&d->cpu[b->owner].pool, b);
}

/* Seal the open batch, collect incoming ones, run those whose GP is over
 * (all of them when force). x: the executing CPU, at task level. */
static void run_rcu(struct defer *d, struct al_ctx *x, bool force)
{
	struct defer_cpu *dc = &d->cpu[x->cpu];
	struct rcu_batch *b, *rev = NULL, *next;
	uint64_t now = 0;

	seal(d, x);
	b = __atomic_exchange_n(&dc->incoming, NULL, __ATOMIC_ACQUIRE);
	for (; b; b = next) {
		next = b->next;
		b->next = rev;
		rev = b;
	}
	for (b = rev; b; b = next) { /* oldest first onto the FIFO */
		next = b->next;
		b->next = NULL;
		if (dc->wait_tail)
			dc->wait_tail->next = b;
		else
			dc->wait_head = b;
		dc->wait_tail = b;
	}
	while ((b = dc->wait_head)) {
		if (!force) {
			if (__atomic_load_n(&al_rcu_gp_done, __ATOMIC_ACQUIRE) < b->need) {
				gp_try_advance();
				if (__atomic_load_n(&al_rcu_gp_done, __ATOMIC_ACQUIRE) < b->need)
					break;
			}
			if (b->ready_at) {
				if (!now)
					now = al_ticks_fast();
				if (now < b->ready_at)
					break;
			}
		}
		dc->wait_head = b->next;
		if (!dc->wait_head)
			dc->wait_tail = NULL;
		run_batch(d, b, x);
	}
	__atomic_store_n(&d->pub.pcpu[x->cpu].wait_need, dc->wait_head ? dc->wait_head->need : 0,
			 __ATOMIC_RELAXED);
}

/* ---- RCU Tasks Trace ---- */

static void tt_lock(struct tt *t)
{
	while (__atomic_exchange_n(&t->lock, 1, __ATOMIC_ACQUIRE))
		al_cpu_relax();
}

static bool tt_trylock(struct tt *t)
{
	return !__atomic_exchange_n(&t->lock, 1, __ATOMIC_ACQUIRE);
}

static void tt_unlock(struct tt *t)
{
	__atomic_store_n(&t->lock, 0, __ATOMIC_RELEASE);
}

static void tt_append(struct tt_list *to, struct tt_list *from)
{
	if (!from->head)
		return;
	if (to->tail)
		to->tail->next = from->head;
	else
		to->head = from->head;
	to->tail = from->tail;
	to->n += from->n;
	from->head = from->tail = NULL;
	from->n = 0;
}

static void tt_set_busy(struct tt *t)
{
	__atomic_store_n(&t->busy, t->queued.n || t->in_gp.n || t->ready.n || t->phase != TT_IDLE,
			 __ATOMIC_RELEASE);
}

static uint64_t tt_jiffies(const struct defer *d, uint64_t j)
{
	return j * d->tt_jiffy;
}

/* The engines' timers: the domains with a tasks-trace step pending, and the
 * earliest tick one is due (0: none), read by every quiescent point. */
#define TT_MAX_DOMAINS 64
static struct {
	int lock; /* a leaf, after tt.lock */
	unsigned n;
	struct defer *d[TT_MAX_DOMAINS];
} tt_kick;
static uint64_t tt_next;

static void tt_kick_lock(void)
{
	while (__atomic_exchange_n(&tt_kick.lock, 1, __ATOMIC_ACQUIRE))
		al_cpu_relax();
}

static void tt_kick_unlock(void)
{
	__atomic_store_n(&tt_kick.lock, 0, __ATOMIC_RELEASE);
}

static void tt_kick_recompute(void)
{
	uint64_t min = 0;
	unsigned i;

	for (i = 0; i < tt_kick.n; i++) {
		uint64_t due = __atomic_load_n(&tt_kick.d[i]->tt_due, __ATOMIC_RELAXED);

		if (due && (!min || due < min))
			min = due;
	}
	__atomic_store_n(&tt_next, min, __ATOMIC_RELEASE);
}

/* Register d's next step (0: none). Beyond TT_MAX_DOMAINS busy domains the
 * extra ones advance at their slow paths only. */
static void tt_set_due(struct defer *d, uint64_t due)
{
	unsigned i;

	tt_kick_lock();
	for (i = 0; i < tt_kick.n && tt_kick.d[i] != d; i++)
		;
	if (due && i == tt_kick.n && tt_kick.n < TT_MAX_DOMAINS)
		tt_kick.d[tt_kick.n++] = d;
	else if (!due && i < tt_kick.n)
		tt_kick.d[i] = tt_kick.d[--tt_kick.n];
	__atomic_store_n(&d->tt_due, due, __ATOMIC_RELAXED);
	tt_kick_recompute();
	tt_kick_unlock();
}

/* From a quiescent point: mark every CPU of each domain whose step is due,
 * so that its next poll takes the slow path and steps it. A domain kicked
 * waits for that step to set its next time. */
static void tt_kick_due(void)
{
	uint64_t next = __atomic_load_n(&tt_next, __ATOMIC_ACQUIRE), now;
	unsigned i, cpu;

	if (!next || al_ticks_fast() < next)
		return;
	if (__atomic_exchange_n(&tt_kick.lock, 1, __ATOMIC_ACQUIRE))
		return; /* another reader kicks */
	now = al_ticks_fast();
	for (i = 0; i < tt_kick.n; i++) {
		struct defer *d = tt_kick.d[i];
		uint64_t due = __atomic_load_n(&d->tt_due, __ATOMIC_RELAXED);

		if (!due || due > now)
			continue;
		__atomic_store_n(&d->tt_due, UINT64_MAX, __ATOMIC_RELAXED); /* until its step */
		for (cpu = 0; cpu < d->ncpu; cpu++)
			__atomic_fetch_or(&d->pub.pcpu[cpu].todo, AL_DEFER_TT, __ATOMIC_RELEASE);
		wake_helper(d);
	}
	tt_kick_recompute();
	tt_kick_unlock();
}

/* When the engine needs its next step: now (callbacks ready, a plain GP to
 * watch), a timer's tick, or 0 (nothing pending). Lock held. */
static uint64_t tt_next_due(const struct defer *d, uint64_t now)
{
	const struct tt *t = &d->tt;
	uint64_t due;

	if (t->ready.n)
		return now;
	switch (t->phase) {
	case TT_IDLE:
		if (!t->queued.n)
			return 0;
		if (d->tt_mode == AL_TTRACE_CLASSIC)
			due = t->urgent ? now : t->lazy_at;
		else
			due = t->lazy_at ? t->lazy_at : now;
		if (due < t->idle_at)
			due = t->idle_at;
		return due ? due : now;
	case TT_RCU: return now;
	default: return t->next_at;
	}
}

int al_call_rcu_tasks_trace(struct al_defer *pub, struct al_ctx *c, struct al_rcu_head *h,
			    void (*func)(struct al_rcu_head *h, struct al_ctx *c))
{
	struct defer *d = to_defer(pub);
	struct tt *t = &d->tt;
	unsigned pending;
	uint64_t due;

	if (d->tt_mode == AL_TTRACE_PLAIN)
		return al_call_rcu(pub, c, h, func);
	if (c->level == AL_CTX_NMI) {
		al_count(&d->ctr, c, DEFER_rcu_refused, 1);
		return -EBUSY;
	}
	h->func = func;
	h->next = NULL;
	tt_lock(t);
	pending = t->queued.n + t->in_gp.n; /* rcu_segcblist_n_cbs */
	if (d->tt_mode == AL_TTRACE_CLASSIC) {
		/* call_rcu_tasks_generic: wake the kthread at rcu_task_lazy_lim
		 * callbacks, else arm the lazy timer (no batching: wake when the
		 * list was empty); a wake makes three GPs urgent */
		if (pending == AL_TTRACE_LAZY_LIM)
			t->urgent = 3;
		else if (!t->lazy_at && d->tt_lazy)
			t->lazy_at = al_ticks_fast() + d->tt_lazy;
		else if (!d->tt_lazy && !pending)
			t->urgent = 3;
	} else if (t->phase == TT_IDLE && !t->lazy_at) {
		/* srcu_funnel_gp_start: the GP work is queued !!srcu_get_delay() = 1 jiffy out */
		t->lazy_at = al_ticks_fast() + tt_jiffies(d, 1);
	}
	if (t->queued.tail)
		t->queued.tail->next = h;
	else
		t->queued.head = h;
	t->queued.tail = h;
	t->queued.n++;
	tt_set_busy(t);
	due = tt_next_due(d, al_ticks_fast());
	if (due != __atomic_load_n(&d->tt_due, __ATOMIC_RELAXED))
		tt_set_due(d, due);
	tt_unlock(t);
	al_count(&d->ctr, c, DEFER_ttrace_callbacks, 1);
	return 0;
}

uint64_t al_ttrace_gp_done(struct al_defer *pub)
{
	return __atomic_load_n(&to_defer(pub)->tt.done, __ATOMIC_ACQUIRE);
}

/* A plain grace period the engine waits for (synchronize_rcu). Lock held. */
static void tt_wait_rcu(struct defer *d, uint64_t *k)
{
	d->tt.rcu_need = al_rcu_gp_request();
	d->tt.phase = TT_RCU;
	al_ctr_add(k, DEFER_ttrace_rcu_gps, 1);
}

/* The end of the running GP: its callbacks become ready. Lock held. */
static void tt_end_gp(struct defer *d, uint64_t *k, uint64_t now)
{
	struct tt *t = &d->tt;

	__atomic_store_n(&t->done, t->seq, __ATOMIC_RELEASE);
	tt_append(&t->ready, &t->in_gp);
	t->phase = TT_IDLE;
	al_ctr_add(k, DEFER_ttrace_gps, 1);
	if (d->tt_mode == AL_TTRACE_CLASSIC) {
		t->idle_at = now + tt_jiffies(d, d->tt_fract0); /* rcu_tasks_kthread's gp_sleep */
	} else if (t->queued.n) {
		t->lazy_at = now + tt_jiffies(d, 1); /* srcu_reschedule: srcu_get_delay() */
	}
}

/* One SRCU-fast scan (srcu_readers_unlock_idx, then srcu_readers_lock_idx):
 * two passes reading a line each CPU writes, its poll state standing for its
 * srcu_data counters. Lock held. */
static void tt_srcu_scan(struct defer *d, uint64_t *k)
{
	uint64_t sum = 0;
	unsigned pass, cpu;

	for (pass = 0; pass < 2; pass++)
		for (cpu = 0; cpu < d->ncpu; cpu++)
			sum += __atomic_load_n(&d->pub.pcpu[cpu].todo, __ATOMIC_ACQUIRE);
	d->tt.scan_sum = sum;
	al_ctr_add(k, DEFER_ttrace_cpu_checks, 2ull * d->ncpu);
}

/* Start a GP on x's CPU (the kthread's): lock held. */
static void tt_start_gp(struct defer *d, const struct al_ctx *x, uint64_t *k)
{
	struct tt *t = &d->tt;
	unsigned cpu;

	t->seq++;
	tt_append(&t->in_gp, &t->queued);
	t->lazy_at = 0;
	if (d->tt_mode == AL_TTRACE_CLASSIC) {
		if (d->tt_lazy && t->urgent)
			t->urgent--;
		/* rcu_tasks_trace_pregp_step: every online CPU's running task; all
		 * but the kthread's own are holdouts */
		al_ctr_add(k, DEFER_ttrace_cpu_checks, d->ncpu);
		t->nholdout = 0;
		for (cpu = 0; cpu < d->ncpu; cpu++)
			if (cpu != x->cpu) {
				__atomic_store_n(&d->cpu[cpu].tt_hold, TT_H_WAIT, __ATOMIC_RELAXED);
				t->nholdout++;
			}
	} else {
		/* srcu_advance_state, SRCU_STATE_SCAN1: unlock then lock counters of
		 * every possible CPU (srcu_readers_active_idx_check) */
		t->scan = 1;
		tt_srcu_scan(d, k);
	}
	tt_wait_rcu(d, k); /* postscan's synchronize_rcu / the scan's */
}

/* A classic holdout pass (check_all_holdout_tasks_trace). Lock held. */
static void tt_holdout_pass(struct defer *d, uint64_t *k)
{
	struct tt *t = &d->tt;
	unsigned cpu;

	for (cpu = 0; cpu < d->ncpu; cpu++) {
		struct defer_cpu *dc = &d->cpu[cpu];
		int h = __atomic_load_n(&dc->tt_hold, __ATOMIC_ACQUIRE);

		if (h == TT_H_NONE)
			continue;
		al_ctr_add(k, DEFER_ttrace_cpu_checks, 1);
		if (h == TT_H_WAIT) {
			/* trc_wait_for_one_reader: the task is running, IPI its CPU */
			__atomic_store_n(&dc->tt_hold, TT_H_IPI, __ATOMIC_RELEASE);
			__atomic_fetch_or(&d->pub.pcpu[cpu].todo, AL_DEFER_TT_IPI,
					  __ATOMIC_RELEASE);
			al_ctr_add(k, DEFER_ttrace_ipis, 1);
			wake_helper(d);
			continue;
		}
		/* IPI not taken for a whole pass: an idle CPU, where the kernel's
		 * handler runs at once; else DONE (its handler ran): drop it */
		if (h == TT_H_IPI &&
		    __atomic_compare_exchange_n(&dc->tt_hold, &h, TT_H_NONE, false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			al_ctr_add(k, DEFER_ttrace_ipis_idle, 1);
		else
			__atomic_store_n(&dc->tt_hold, TT_H_NONE, __ATOMIC_RELEASE);
		t->nholdout--;
	}
}

/* Step the engine as far as time and the plain GPs allow. Lock held. */
static void tt_step(struct defer *d, const struct al_ctx *x, uint64_t *k, uint64_t now)
{
	struct tt *t = &d->tt;
	unsigned guard;

	/* call_rcu_tasks_generic_timer: fires, makes a GP urgent, re-arms */
	if (d->tt_mode == AL_TTRACE_CLASSIC && t->lazy_at && now >= t->lazy_at) {
		if (t->queued.n || t->in_gp.n) {
			if (!t->urgent)
				t->urgent = 1;
			t->lazy_at = now + d->tt_lazy;
		} else {
			t->lazy_at = 0;
		}
	}
	for (guard = 0; guard < 8; guard++) {
		switch (t->phase) {
		case TT_IDLE:
			if (!t->queued.n || now < t->idle_at)
				return;
			if (d->tt_mode == AL_TTRACE_CLASSIC ? !t->urgent
							    : (!t->lazy_at || now < t->lazy_at))
				return;
			tt_start_gp(d, x, k);
			break;
		case TT_RCU:
			if (__atomic_load_n(&al_rcu_gp_done, __ATOMIC_ACQUIRE) < t->rcu_need) {
				gp_try_advance();
				if (__atomic_load_n(&al_rcu_gp_done, __ATOMIC_ACQUIRE) <
				    t->rcu_need)
					return;
			}
			if (d->tt_mode == AL_TTRACE_SRCU) {
				if (t->scan == 1) { /* srcu_flip, SRCU_STATE_SCAN2 */
					t->scan = 2;
					tt_srcu_scan(d, k);
					tt_wait_rcu(d, k);
				} else { /* srcu_gp_end: callbacks cbdelay = 1 jiffy out */
					t->phase = TT_CBDELAY;
					t->next_at = now + tt_jiffies(d, 1);
				}
			} else if (t->nholdout) { /* rcu_tasks_wait_gp's first sleep */
				t->fract = d->tt_fract0;
				t->phase = TT_HOLD;
				t->next_at = now + tt_jiffies(d, t->fract);
			} else {
				tt_end_gp(d, k, now);
			}
			break;
		case TT_HOLD:
			if (now < t->next_at)
				return;
			tt_holdout_pass(d, k);
			if (!t->nholdout) {
				tt_end_gp(d, k, now);
				break;
			}
			if (t->fract < d->tt_hz)
				t->fract++;
			t->next_at = now + tt_jiffies(d, t->fract);
			return;
		default: /* TT_CBDELAY */
			if (now < t->next_at)
				return;
			tt_end_gp(d, k, now);
			break;
		}
	}
}

static void tt_run_list(struct defer *d, struct al_ctx *x, struct al_rcu_head *h)
{
	struct al_rcu_head *next;
	uint64_t n = 0;

	for (; h; h = next, n++) {
		next = h->next;
		x->err = 0;
		h->func(h, x);
	}
	if (n)
		al_count(&d->ctr, x, DEFER_ttrace_callbacks_run, n);
}

/* Step the engine from x's CPU and run the callbacks that are ready there;
 * force (al_defer_flush): everything now, ignoring grace periods. */
static void tt_advance(struct defer *d, struct al_ctx *x, bool force)
{
	struct tt *t = &d->tt;
	struct tt_list run = { NULL, NULL, 0 };
	uint64_t now = 0, due;
	unsigned cpu;

	if (d->tt_mode == AL_TTRACE_PLAIN || !__atomic_load_n(&t->busy, __ATOMIC_ACQUIRE))
		return;
	if (force) {
		tt_lock(t);
		tt_append(&run, &t->ready);
		tt_append(&run, &t->in_gp);
		tt_append(&run, &t->queued);
		if (t->phase != TT_IDLE) { /* the running GP is cut short, not counted */
			__atomic_store_n(&t->done, t->seq, __ATOMIC_RELEASE);
			for (cpu = 0; cpu < d->ncpu; cpu++)
				__atomic_store_n(&d->cpu[cpu].tt_hold, TT_H_NONE, __ATOMIC_RELAXED);
			t->nholdout = 0;
			t->phase = TT_IDLE;
		}
		t->lazy_at = 0;
	} else {
		if (!tt_trylock(t))
			return; /* whoever holds it steps it */
		now = al_ticks_fast();
		tt_step(d, x, al_ctr_block(&d->ctr, x), now);
		tt_append(&run, &t->ready);
	}
	tt_set_busy(t);
	due = tt_next_due(d, now);
	if (due != __atomic_load_n(&d->tt_due, __ATOMIC_RELAXED))
		tt_set_due(d, due);
	tt_unlock(t);
	tt_run_list(d, x, run.head);
}

/* The IPI of a classic GP, taken on its target CPU (trc_read_check_handler):
 * between two operations the CPU's task is outside any read-side section. */
static void tt_ipi(struct defer *d, struct al_ctx *x)
{
	int h = TT_H_IPI;

	if (d->mode >= AL_IRQ_WORK_IPI)
		ipi_take(d, x, false); /* counted as sent (ttrace_ipis) */
	__atomic_compare_exchange_n(&d->cpu[x->cpu].tt_hold, &h, TT_H_DONE, false, __ATOMIC_ACQ_REL,
				    __ATOMIC_RELAXED);
}

/* One CPU's deferred work; c is any context of that CPU. */
static void run_cpu(struct defer *d, const struct al_ctx *c, bool force)
{
	struct al_defer_cpu *p = &d->pub.pcpu[c->cpu];
	struct al_ctx x;
	unsigned pass;

	for (pass = 0; pass < 16; pass++) {
		uint64_t todo = __atomic_exchange_n(&p->todo, 0, __ATOMIC_ACQUIRE);

		if (todo & AL_DEFER_TT_IPI) {
			al_ctx_nested(&x, c, AL_CTX_IRQ);
			tt_ipi(d, &x);
		}
		if (todo & AL_DEFER_IRQ) {
			al_ctx_nested(&x, c, AL_CTX_IRQ);
			run_irq_work(d, &x);
		}
		/* Softirq runs with IRQs enabled: task level, so irq_work raised by a
		 * callback runs at the end of its operation. The helper thread
		 * stays at IRQ level: it runs beside the CPU's own worker. */
		al_ctx_nested(&x, c, d->mode == AL_IRQ_WORK_THREAD ? AL_CTX_IRQ : AL_CTX_TASK);
		run_rcu(d, &x, force);
		tt_advance(d, &x, force);
		if (!(__atomic_load_n(&p->todo, __ATOMIC_ACQUIRE) & AL_DEFER_IRQ) &&
		    (!force || !d->cpu[c->cpu].wait_head))
			break;
	}
}

void al_defer_run(struct al_defer *pub, struct al_ctx *c)
{
	struct defer *d = to_defer(pub);

	if (c->level != AL_CTX_TASK || d->mode == AL_IRQ_WORK_THREAD)
		return;
	run_cpu(d, c, false);
}

void al_defer_flush(struct al_defer *pub, struct al_ctx *c, unsigned scope)
{
	struct defer *d = to_defer(pub);
	struct al_ctx x;
	unsigned cpu, round;

	if (d->mode == AL_IRQ_WORK_THREAD)
		pthread_mutex_lock(&d->run_lock);
	/* Callbacks may queue more work on any CPU (a trim queues a free): repeat
	 * until a round finds nothing. */
	for (round = 0; round < 64; round++) {
		bool more = false;

		for (cpu = 0; cpu < d->ncpu; cpu++) {
			if (scope != AL_DRAIN_ALL && cpu != c->cpu)
				continue;
			al_ctx_init(&x, cpu);
			run_cpu(d, &x, true);
		}
		for (cpu = 0; cpu < d->ncpu; cpu++)
			if ((scope == AL_DRAIN_ALL || cpu == c->cpu) &&
			    (__atomic_load_n(&d->pub.pcpu[cpu].todo, __ATOMIC_ACQUIRE) ||
			     d->cpu[cpu].wait_head ||
			     __atomic_load_n(&d->cpu[cpu].incoming, __ATOMIC_ACQUIRE) ||
			     (d->cpu[cpu].open &&
			      (d->cpu[cpu].open->nptr || d->cpu[cpu].open->ncb))))
				more = true;
		if (__atomic_load_n(&d->tt.busy, __ATOMIC_ACQUIRE))
			more = true;
		if (!more)
			break;
	}
	if (d->mode == AL_IRQ_WORK_THREAD)
		pthread_mutex_unlock(&d->run_lock);
}

static void *helper_main(void *arg)
{
	struct defer *d = arg;
	struct al_rcu_reader r = { .slot = -1 };
	struct al_ctx x;
	unsigned cpu;
	bool waiting = false;

	while (!__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE)) {
		if (waiting) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 1000000; /* poll waiting batches every 1 ms */
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			sem_timedwait(&d->wake, &ts);
		} else {
			sem_wait(&d->wake);
		}
		pthread_mutex_lock(&d->run_lock);
		/* irq_work is an RCU read-side section: no grace period ends while
		 * the helper runs (what makes the owner's llist_del_first ABA-safe) */
		al_rcu_online(&r);
		waiting = false;
		for (cpu = 0; cpu < d->ncpu; cpu++) {
			x.cpu = cpu;
			x.level = AL_CTX_IRQ;
			x.err = 0;
			x.pad = 0;
			run_cpu(d, &x, false);
			if (d->cpu[cpu].wait_head)
				waiting = true;
		}
		if (__atomic_load_n(&d->tt.busy, __ATOMIC_ACQUIRE))
			waiting = true;
		al_rcu_offline(&r);
		pthread_mutex_unlock(&d->run_lock);
	}
	return NULL;
}

int al_defer_create(unsigned ncpu, const struct al_defer_params *p, struct al_defer **out)
{
	struct defer *d;
	int ret = -ENOMEM;

	*out = NULL;
	if (!ncpu || ncpu > AL_MAX_CPUS || !p || p->irq_mode < AL_IRQ_WORK_INLINE ||
	    p->irq_mode > AL_IRQ_WORK_SIGNAL || p->ttrace < AL_TTRACE_PLAIN ||
	    p->ttrace > AL_TTRACE_SRCU || p->hz > 100000)
		return -EINVAL;
	if (p->irq_mode == AL_IRQ_WORK_SIGNAL) {
		int err = ipi_install();

		if (err)
			return err;
	}
	al_clock_init();
	d = al_meta_alloc(sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->ncpu = ncpu;
	d->mode = p->irq_mode;
	d->nocb = p->nocb;
	d->latency_ticks = (uint64_t)((double)p->gp_latency_ns * al_clock.ticks_per_ns);
	d->tt_mode = p->ttrace;
	d->tt_hz = p->hz ? p->hz : AL_TTRACE_HZ_DEFAULT;
	d->tt_fract0 = d->tt_hz / 200 ? d->tt_hz / 200 : 1; /* HZ / 200, at least 1 */
	d->tt_jiffy = (uint64_t)(1e9 / d->tt_hz * al_clock.ticks_per_ns);
	if (!d->tt_jiffy)
		d->tt_jiffy = 1;
	if (p->lazy_ms < 0) /* DEFINE_RCU_TASKS: DIV_ROUND_UP(HZ, 4) jiffies */
		d->tt_lazy = (uint64_t)(d->tt_hz + 3) / 4 * d->tt_jiffy;
	else /* msecs_to_jiffies() rounds up */
		d->tt_lazy = ((uint64_t)p->lazy_ms * d->tt_hz + 999) / 1000 * d->tt_jiffy;
	d->pub.poll_inline = d->mode != AL_IRQ_WORK_THREAD;
	d->pub.pcpu = al_meta_alloc(sizeof(struct al_defer_cpu) * ncpu);
	d->cpu = al_meta_alloc(sizeof(struct defer_cpu) * ncpu);
	if (!d->pub.pcpu || !d->cpu ||
	    al_counters_init_desc(&d->ctr, defer_counters, DEFER_NR, 0, ncpu))
		goto out_free;
	pthread_mutex_init(&d->run_lock, NULL);
	/* The helper holds run_lock across lock waits: on simulated CPUs, where
	 * every model CPU is one thread, that mutex could not be shared. */
	if (d->mode == AL_IRQ_WORK_THREAD && al_sim_here()) {
		ret = -EOPNOTSUPP;
		goto out_mutex;
	}
	ret = -ENOMEM;
	if (d->mode == AL_IRQ_WORK_THREAD) {
		if (sem_init(&d->wake, 0, 0))
			goto out_mutex;
		if (pthread_create(&d->helper, NULL, helper_main, d)) {
			sem_destroy(&d->wake);
			goto out_mutex;
		}
		d->helper_started = true;
	}
	*out = &d->pub;
	return 0;

out_mutex:
	pthread_mutex_destroy(&d->run_lock);
out_free:
	al_counters_fini(&d->ctr);
	al_meta_free(d->cpu, sizeof(struct defer_cpu) * ncpu);
	al_meta_free(d->pub.pcpu, sizeof(struct al_defer_cpu) * ncpu);
	al_meta_free(d, sizeof(*d));
	return ret;
}

static void free_stack(struct rcu_batch *b)
{
	struct rcu_batch *next;

	for (; b; b = next) {
		next = b->next;
		al_meta_free(b, BATCH_BYTES);
	}
}

void al_defer_destroy(struct al_defer *pub)
{
	struct defer *d = to_defer(pub);
	struct al_ctx c;
	unsigned cpu;

	if (!pub)
		return;
	tt_set_due(d, 0); /* no quiescent point kicks it (or posts its helper) from now */
	if (d->helper_started) {
		__atomic_store_n(&d->stop, 1, __ATOMIC_RELEASE);
		sem_post(&d->wake);
		pthread_join(d->helper, NULL);
		sem_destroy(&d->wake);
		d->mode = AL_IRQ_WORK_INLINE;
	}
	al_ctx_init(&c, 0);
	al_defer_flush(pub, &c, AL_DRAIN_ALL);
	tt_set_due(d, 0); /* off the timers' list before it is freed */
	for (cpu = 0; cpu < d->ncpu; cpu++) {
		struct defer_cpu *dc = &d->cpu[cpu];

		free_stack(dc->pool_own);
		free_stack(dc->pool);
		free_stack(dc->open);
	}
	pthread_mutex_destroy(&d->run_lock);
	al_counters_fini(&d->ctr);
	al_meta_free(d->cpu, sizeof(struct defer_cpu) * d->ncpu);
	al_meta_free(d->pub.pcpu, sizeof(struct al_defer_cpu) * d->ncpu);
	al_meta_free(d, sizeof(*d));
}

/* From the counters: 0 at AL_STATS_OFF, where nothing is counted. */
uint64_t al_defer_pending(struct al_defer *pub)
{
	struct defer *d = to_defer(pub);
	uint64_t q = al_counters_sum(&d->ctr, DEFER_rcu_callbacks) +
		     al_counters_sum(&d->ctr, DEFER_kfree_rcu_objects);
	uint64_t r = al_counters_sum(&d->ctr, DEFER_rcu_callbacks_run) +
		     al_counters_sum(&d->ctr, DEFER_kfree_rcu_freed) +
		     al_counters_sum(&d->ctr, DEFER_kfree_rcu_failed);
	uint64_t wq = al_counters_sum(&d->ctr, DEFER_irq_work_queued);
	uint64_t wr = al_counters_sum(&d->ctr, DEFER_irq_work_runs);
	uint64_t tq = al_counters_sum(&d->ctr, DEFER_ttrace_callbacks);
	uint64_t tr = al_counters_sum(&d->ctr, DEFER_ttrace_callbacks_run);

	return (q - r) + (wq - wr) + (tq - tr);
}

void al_defer_report(struct al_defer *pub, struct al_stats *out)
{
	al_counters_report(&to_defer(pub)->ctr, out);
}
