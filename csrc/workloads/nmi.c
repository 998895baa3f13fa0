/* SPDX-License-Identifier: MIT */
/*
 * nmi: allocation under real interruption. Each worker runs
 * malloc-free cycles (allocs_per_cycle objects of `size`, each touched, then
 * freed; with mode=malloc-xfree each batch is handed to the next worker,
 * which frees it, as malloc-xfree does) while a per-thread POSIX timer (timer_create with
 * SIGEV_THREAD_ID, `rate` signals per second per thread, CLOCK_MONOTONIC) interrupts it. The signal
 * handler is the NMI model: it derives an AL_CTX_NMI context from al_ctx_current() (same CPU as the
 * worker it interrupted, wherever that worker was, inside the allocator included) and allocates
 * `handler_objs` objects through the same policy; it frees them before returning, or with keep=1
 * leaves them for the next handler run to free. With handler_frees=N the worker also allocates N
 * objects at task level whenever its handler has taken the last ones, and the handler frees them
 * at NMI: a BPF program freeing, in NMI, map elements allocated elsewhere (the path that reaches
 * a layer's deferred NMI free even where every NMI allocation is refused, as in the buddy).
 *
 * context=irq makes the signal an IRQ instead: the handler runs at
 * AL_CTX_IRQ, and a worker holding an arena lock blocks the signal until it
 * releases it (al_lock_irq_mask: arena_spin_lock_irqsave), so the handler
 * never runs inside that critical section and the buddy serves it (it
 * refuses only NMIs). context=nmi (default): an NMI, which irqsave does not
 * mask.
 *
 * The handler works only while its worker runs a cycle (signals between
 * cycles, at the engine's barriers, return at once), so its counts and the
 * layers' counters cover the same measured window.
 *
 * Reported (workload metrics, wl.<name>): handler runs, objects served and
 * refused (NULL), split by reason: -EBUSY (a lock or a guard held by the code
 * it interrupted: buddy, percpu's guard, bpf_ma's active) and -ENOMEM
 * (nothing cached and no refill at NMI), frees that failed (the
 * object is kept and freed later at task level, never lost), time spent in
 * handlers; the layers' own counters show what was deferred (e.g.
 * buddy.nmi_frees_deferred). Worker slowdown is the run's ops/s against a
 * run with rate=0.
 *
 * Only NMI-safe stacks run: from the top, every layer declares
 * AL_F_NMI_SAFE, down to a layer with AL_F_NMI_SHIELD (it reaches the layers
 * below only with AL_NOSPIN at NMI) or the bottom. Others are refused in
 * prepare with a clear error: in a signal handler they could spin forever on
 * a lock the interrupted worker holds.
 *
 * Teardown of a worker: disarm, block the signal, delete the timer, consume
 * any signal still pending (so none arrives after its state is freed), then
 * free what handlers left at task level. The handler stays installed for
 * the process (SIG_DFL for a real-time signal would kill the process if one
 * were ever delivered late); with no armed worker state it returns at once.
 * Signal tests run in plain and ASan builds, not TSan (TSan delays
 * asynchronous signals to its next interception point).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "alloclab/alloclab.h"
#include "list.h"
#include "retry.h"

#define NMI_SIG	     (SIGRTMIN + 5) /* the timer's signal */
#define NMI_MAX_OBJS 64		    /* handler_objs limit */
#define NMI_RETRY    4096	    /* objects whose NMI free failed, freed later */

enum {
	P_size,
	P_allocs_per_cycle,
	P_rate,
	P_handler_objs,
	P_keep,
	P_mode,
	P_handler_frees,
	P_context,
	P_NR
};
enum { C_NMI, C_IRQ };
enum { M_FREE, M_XFREE };

static const struct al_param_desc nmi_params[P_NR] = {
	[P_size] = { "size", AL_PARAM_SIZE, 64, 1, 1ll << 30, NULL,
		     "bytes per allocation (workers and handlers)" },
	[P_allocs_per_cycle] = { "allocs_per_cycle", AL_PARAM_INT, 64, 1, 1 << 20, NULL,
				 "allocations per cycle, then as many frees" },
	[P_rate] = { "rate", AL_PARAM_INT, 10000, 0, 1000000, NULL,
		     "timer signals per second per worker thread (0 = none: the baseline)" },
	[P_handler_objs] = { "handler_objs", AL_PARAM_INT, 2, 0, NMI_MAX_OBJS, NULL,
			     "objects each handler run allocates" },
	[P_keep] = { "keep", AL_PARAM_BOOL, 0, 0, 1, NULL,
		     "leave a handler's objects for the next handler run to free" },
	[P_mode] = { "mode", AL_PARAM_ENUM, M_FREE, 0, 1, "malloc-free,malloc-xfree",
		     "workers free their own objects, or hand each batch to the next worker, "
		     "which frees it (cross-CPU frees)" },
	[P_handler_frees] = { "handler_frees", AL_PARAM_INT, 0, 0, NMI_MAX_OBJS, NULL,
			      "objects the worker allocates for its handler to free at NMI "
			      "(refilled when the handler has taken them)" },
	[P_context] = { "context", AL_PARAM_ENUM, C_NMI, 0, 1, "nmi,irq",
			"what the signal stands for: an NMI (never masked) or an IRQ, masked "
			"while the worker holds an arena lock (arena_spin_lock_irqsave) and run "
			"at the release" },
};

/* malloc-xfree: worker i hands its batch to worker i + 1 through box i + 1. */
struct nmi_box {
	pthread_mutex_t m; /* guards the box */
	unsigned n;	   /* objects in it, 0 = empty */
	void **objs;	   /* allocs_per_cycle slots */
};

struct nmi_shared {
	int64_t rate;	     /* signals per second per worker */
	bool irq;	     /* context=irq: al_lock_irq_mask set for the run */
	unsigned nworkers;   /* boxes */
	unsigned per;	     /* slots per box */
	struct nmi_box *box; /* one per worker */
	void **slots;	     /* nworkers * per pointers */
};

/* One worker. Handler-written fields are written only by this thread. */
struct nmi_worker {
	struct al_allocator *a;	  /* the stack */
	void **arr;		  /* the cycle's objects */
	void **in;		  /* malloc-xfree: the batch taken from this worker's box */
	size_t arr_len;		  /* mapping length of arr */
	size_t size;		  /* bytes per object */
	unsigned objs;		  /* handler_objs */
	unsigned level;		  /* the handler's context level (AL_CTX_NMI or AL_CTX_IRQ) */
	bool keep;		  /* keep=1 */
	int armed;		  /* the handler works only while 1 */
	int in_cycle;		  /* ... and the worker runs a cycle */
	bool timer_ok;		  /* timer created */
	timer_t timer;		  /* the per-thread timer */
	bool measured;		  /* counters were reset at the first measured cycle */
	unsigned nkept;		  /* objects left by the last handler run (keep=1) */
	void *kept[NMI_MAX_OBJS]; /* those objects */
	unsigned hand_objs;	  /* handler_frees */
	unsigned nhand;		  /* objects handed to the handler (0: it took them) */
	void *hand[NMI_MAX_OBJS]; /* those objects, allocated at task level */
	unsigned nretry;	  /* objects whose NMI free failed */
	void *retry[NMI_RETRY];	  /* those objects, freed at task level */
	uint64_t runs;		  /* handler runs that worked */
	uint64_t served;	  /* handler allocations that returned memory */
	uint64_t refused;	  /* handler allocations that returned NULL */
	uint64_t refused_busy;	  /* ... with -EBUSY: a lock or guard held below */
	uint64_t refused_nomem;	  /* ... with -ENOMEM: nothing cached, no refill at NMI */
	uint64_t free_errors;	  /* handler frees that failed (object kept) */
	uint64_t lost;		  /* objects that did not fit in retry[] (an error) */
	uint64_t handler_ticks;	  /* time in handlers */
	uint64_t busy_retries;	  /* worker allocations retried after -EBUSY */
	uint64_t handed;	  /* objects handed to the handler */
	uint64_t handed_freed;	  /* of those, freed at NMI (the others: free_errors) */
	uint64_t hits;		  /* signals received, working or not (calibration) */
};

/* Free at NMI; a failure keeps the object for a task-level free later. */
static bool nmi_free_one(struct nmi_worker *m, struct al_ctx *nmi, void *p)
{
	if (al_likely(!al_free(m->a, nmi, p)))
		return true;
	m->free_errors++;
	if (m->nretry < NMI_RETRY)
		m->retry[m->nretry++] = p;
	else
		m->lost++;
	return false;
}

static void nmi_handler(int sig, siginfo_t *si, void *uc)
{
	struct nmi_worker *m = si->si_value.sival_ptr;
	void *got[NMI_MAX_OBJS];
	struct al_ctx *cur, nmi;
	int saved = errno;
	unsigned i, n = 0;
	uint64_t t0;

	(void)sig;
	(void)uc;
	if (m) /* only this thread writes it; the calibration reads it */
		__atomic_fetch_add(&m->hits, 1, __ATOMIC_RELAXED);
	if (!m || !__atomic_load_n(&m->armed, __ATOMIC_RELAXED) ||
	    !__atomic_load_n(&m->in_cycle, __ATOMIC_RELAXED) || !(cur = al_ctx_current()))
		return;
	t0 = al_ticks();
	al_ctx_nested(&nmi, cur, m->level);
	for (i = 0; i < m->objs; i++) {
		void *p;

		nmi.err = 0;
		p = al_alloc(m->a, &nmi, m->size, 0);

		if (p) {
			*(volatile char *)p = (char)i; /* touch it */
			got[n++] = p;
		} else {
			m->refused++;
			m->refused_busy += nmi.err == -EBUSY;
			m->refused_nomem += nmi.err == -ENOMEM;
		}
	}
	m->served += n;
	if (m->keep) {
		for (i = 0; i < m->nkept; i++)
			nmi_free_one(m, &nmi, m->kept[i]);
		memcpy(m->kept, got, n * sizeof(void *));
		m->nkept = n;
	} else {
		for (i = 0; i < n; i++)
			nmi_free_one(m, &nmi, got[i]);
	}
	n = __atomic_load_n(&m->nhand, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_ACQUIRE); /* the worker is this thread */
	for (i = 0; i < n; i++)
		m->handed_freed += nmi_free_one(m, &nmi, m->hand[i]);
	if (n)
		__atomic_store_n(&m->nhand, 0, __ATOMIC_RELAXED);
	m->runs++;
	m->handler_ticks += al_ticks() - t0;
	errno = saved;
}

/*
 * The highest rate a timer signal can be delivered at here. A signal costs
 * its delivery (the timer interrupt, the kernel's frame setup, sigreturn)
 * before the handler does any work. When the timer fires again before that
 * is done, the next signal is pending at sigreturn and delivered at once:
 * the thread never runs its own code again (no cycle ends, the watchdog
 * fires after 30 s). Measured once per process: a victim thread counts
 * iterations of a fixed piece of work; a controlling thread reads the count
 * and the victim's CPU time over 10 ms windows alone and 20 ms windows
 * under a timer at NMI_CAL_RATE aimed at the victim (the controller disarms
 * it, so the measurement ends even when the victim is livelocked), three
 * times each, keeping the fastest window of each kind. Per CPU second of
 * the victim, preemption by other processes does not count; interrupt time
 * the kernel does not charge to the thread is missed, so the estimate errs
 * towards allowing a rate. The victim's lost share of its CPU time divided
 * by the signals it received is the cost of one. At 1 / cost a worker
 * would do nothing else; the highest rate allowed leaves it a fifth of its
 * time: 0.8 / cost (a margin for the estimate's noise on a busy machine).
 */
#define NMI_CAL_RATE  500000 /* signals per second while measuring */
#define NMI_SAFE_RATE 20000  /* below this (50 us apart) no measurement is needed */

static double nmi_rate_max;  /* signals/s per worker; 0 = not measured */
static double nmi_signal_ns; /* ns per signal */
static pthread_once_t nmi_cal_once = PTHREAD_ONCE_INIT;

struct nmi_cal {
	struct nmi_worker m; /* armed = 0: the handler only counts hits */
	pid_t tid;	     /* the victim's, once it runs */
	int stop;	     /* set by the controller */
	uint64_t iters;	     /* the victim's work so far */
};

static void *nmi_cal_victim(void *arg)
{
	struct nmi_cal *cal = arg;
	uint64_t x = 88172645463325252ull, n = 0;
	struct timespec zero = { 0, 0 };
	volatile uint64_t sink;
	sigset_t set;
	unsigned j;

	sigemptyset(&set);
	sigaddset(&set, NMI_SIG);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	__atomic_store_n(&cal->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	while (!__atomic_load_n(&cal->stop, __ATOMIC_ACQUIRE)) {
		for (j = 0; j < 64; j++) { /* xorshift: no memory, no syscalls */
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		__atomic_store_n(&cal->iters, ++n, __ATOMIC_RELAXED);
	}
	sink = x;
	(void)sink;
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	while (sigtimedwait(&set, NULL, &zero) == NMI_SIG)
		;
	return NULL;
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	if (clock_gettime(id, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The victim's iterations per ns of its CPU time over a window of `ns`;
 * *cpu_ns: the CPU time it had in the window. */
static double nmi_cal_window(struct nmi_cal *cal, clockid_t victim, uint64_t ns, uint64_t *cpu_ns)
{
	struct timespec d = { 0, (long)ns };
	uint64_t i0, i1, c0, c1;

	i0 = __atomic_load_n(&cal->iters, __ATOMIC_RELAXED);
	c0 = clock_ns(victim);
	nanosleep(&d, NULL); /* the measuring window, not a wait for the thread */
	i1 = __atomic_load_n(&cal->iters, __ATOMIC_RELAXED);
	c1 = clock_ns(victim);
	*cpu_ns = c1 - c0;
	return c1 > c0 ? (double)(i1 - i0) / (double)(c1 - c0) : 0;
}

static void nmi_calibrate(void)
{
	static struct nmi_cal cal;
	struct itimerspec on, off;
	double base = 0, loaded = 0, v, left;
	uint64_t hits = 0, h0, cpu, best_ns = 1;
	clockid_t victim;
	struct sigevent sev;
	struct sigaction sa;
	pthread_t th;
	timer_t timer;
	int k;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = nmi_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(NMI_SIG, &sa, NULL) || pthread_create(&th, NULL, nmi_cal_victim, &cal))
		return;
	while (!__atomic_load_n(&cal.tid, __ATOMIC_ACQUIRE)) /* the victim's handshake */
		sched_yield();
	if (pthread_getcpuclockid(th, &victim))
		goto out;
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = NMI_SIG;
	sev.sigev_value.sival_ptr = &cal.m;
	sev._sigev_un._tid = cal.tid;
	if (timer_create(CLOCK_MONOTONIC, &sev, &timer))
		goto out;
	memset(&on, 0, sizeof(on));
	memset(&off, 0, sizeof(off));
	on.it_interval.tv_nsec = 1000000000 / NMI_CAL_RATE;
	on.it_value = on.it_interval;
	for (k = 0; k < 3; k++) {
		v = nmi_cal_window(&cal, victim, 10000000, &cpu);
		if (v > base)
			base = v;
		h0 = __atomic_load_n(&cal.m.hits, __ATOMIC_RELAXED);
		if (timer_settime(timer, 0, &on, NULL))
			break;
		v = nmi_cal_window(&cal, victim, 20000000, &cpu);
		timer_settime(timer, 0, &off, NULL);
		if (v >= loaded && cpu) {
			loaded = v;
			hits = __atomic_load_n(&cal.m.hits, __ATOMIC_RELAXED) - h0;
			best_ns = cpu;
		}
	}
	timer_delete(timer);
	if (base > 0 && hits) {
		left = loaded / base; /* the share of its time the victim kept */
		if (left > 1)
			left = 1;
		nmi_signal_ns = (1 - left) * (double)best_ns / (double)hits;
		if (nmi_signal_ns < 50) /* below what any kernel takes: noise */
			nmi_signal_ns = 50;
		nmi_rate_max = 0.8e9 / nmi_signal_ns;
	}
out:
	__atomic_store_n(&cal.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
}

static void nmi_calibrate_once(void)
{
	sigset_t all, old;

	/* every signal blocked in the threads it starts (and so in the calling
	 * thread meanwhile), so that only the victim receives the timer's */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	nmi_calibrate();
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

#if defined(__SANITIZE_THREAD__)
#define NMI_NO_CAL 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NMI_NO_CAL 1
#endif
#endif

double al_nmi_max_rate(double *signal_ns)
{
#ifdef NMI_NO_CAL
	/* TSan delays asynchronous signals to its next interception point: a
	 * measurement would mean nothing. Not measured: every rate runs. */
	(void)nmi_cal_once;
	(void)nmi_calibrate_once;
	if (signal_ns)
		*signal_ns = 0;
	return 0;
#else
	pthread_once(&nmi_cal_once, nmi_calibrate_once);
	if (signal_ns)
		*signal_ns = nmi_signal_ns;
	return nmi_rate_max;
#endif
}

/* 0 when `rate` can be delivered, else -ERANGE with why. */
static int nmi_rate_check(int64_t rate, char *err, size_t errlen)
{
	double cost, max;

	if (rate <= NMI_SAFE_RATE)
		return 0;
	max = al_nmi_max_rate(&cost);
	if (max <= 0 || (double)rate <= max)
		return 0; /* not measurable here: run, the watchdog still watches */
	snprintf(err, errlen,
		 "rate=%lld is more timer signals than this machine delivers: one costs ~%.2g us "
		 "of CPU here, so at most %lld/s per worker (then signals take 80%% of its "
		 "time); use rate <= %lld",
		 (long long)rate, cost / 1e3, (long long)max, (long long)max);
	return -ERANGE;
}

static int nmi_setup(const int64_t *params, unsigned nworkers, void **shared)
{
	struct nmi_shared *sh;
	struct sigaction sa;
	unsigned i;

	sh = al_meta_alloc(sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	sh->nworkers = nworkers;
	sh->rate = params[P_rate];
	sh->per = (unsigned)params[P_allocs_per_cycle];
	sh->box = al_meta_alloc(sizeof(*sh->box) * nworkers);
	sh->slots = al_meta_alloc(sizeof(void *) * sh->per * nworkers);
	if (!sh->box || !sh->slots) {
		al_meta_free(sh->box, sizeof(*sh->box) * nworkers);
		al_meta_free(sh, sizeof(*sh));
		return -ENOMEM;
	}
	for (i = 0; i < nworkers; i++) {
		pthread_mutex_init(&sh->box[i].m, NULL);
		sh->box[i].objs = sh->slots + (size_t)i * sh->per;
	}
	*shared = sh;
	if (params[P_context] == C_IRQ) {
		static sigset_t irq_set; /* the set the arena locks block */

		sigemptyset(&irq_set);
		sigaddset(&irq_set, NMI_SIG);
		sh->irq = true;
		__atomic_store_n(&al_lock_irq_mask, &irq_set, __ATOMIC_RELEASE);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = nmi_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	return sigaction(NMI_SIG, &sa, NULL) ? -errno : 0;
}

/* Free what is still in the boxes, then the shared state. */
static void nmi_teardown(void *shared, struct al_allocator *a, struct al_ctx *c)
{
	struct nmi_shared *sh = shared;
	uint64_t t_end = 0;
	unsigned i, j;

	if (!sh)
		return;
	if (sh->irq)
		__atomic_store_n(&al_lock_irq_mask, NULL, __ATOMIC_RELEASE);
	for (i = 0; i < sh->nworkers; i++) {
		for (j = 0; j < sh->box[i].n; j++)
			wl_free_untimed(a, c, sh->box[i].objs[j], &t_end);
		pthread_mutex_destroy(&sh->box[i].m);
	}
	al_meta_free(sh->slots, sizeof(void *) * sh->per * sh->nworkers);
	al_meta_free(sh->box, sizeof(*sh->box) * sh->nworkers);
	al_meta_free(sh, sizeof(*sh));
}

/* Refuse stacks that could deadlock in a handler. */
static int nmi_prepare(void *shared, struct al_allocator *a, struct al_ctx *c, char *err,
		       size_t errlen)
{
	const struct al_allocator *l = al_stack_nmi_unsafe(a);
	struct nmi_shared *sh = shared;

	(void)c;
	if (l) {
		snprintf(err, errlen,
			 "layer %s is not NMI-safe (no nmi_safe feature): a signal handler could "
			 "spin on a lock the code it interrupted holds; try buddy, "
			 "percpu|magazine > buddy, nolock > slab, bpf_ma > any",
			 l->desc->name);
		return -EOPNOTSUPP;
	}
	if (sh && nmi_rate_check(sh->rate, err, errlen))
		return -ERANGE;
	return 0;
}

static int nmi_worker_init(struct al_worker *w)
{
	struct nmi_worker *m = al_meta_alloc(sizeof(*m));
	int64_t rate = w->params[P_rate];
	struct itimerspec its;
	struct sigevent sev;
	sigset_t set;

	if (!m)
		return -ENOMEM;
	w->priv = m;
	m->a = w->a;
	m->size = (size_t)w->params[P_size];
	m->objs = (unsigned)w->params[P_handler_objs];
	m->level = w->params[P_context] == C_IRQ ? AL_CTX_IRQ : AL_CTX_NMI;
	m->keep = w->params[P_keep];
	m->hand_objs = (unsigned)w->params[P_handler_frees];
	m->arr_len = (size_t)w->params[P_allocs_per_cycle] * sizeof(void *);
	m->arr = al_meta_alloc(m->arr_len);
	m->in = al_meta_alloc(m->arr_len);
	if (!m->arr || !m->in)
		return -ENOMEM;
	if (!rate)
		return 0;
	sigemptyset(&set);
	sigaddset(&set, NMI_SIG);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = NMI_SIG;
	sev.sigev_value.sival_ptr = m;
	sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
	if (timer_create(CLOCK_MONOTONIC, &sev, &m->timer)) {
		snprintf(w->err, w->errlen, "timer_create: %s", strerror(errno));
		return -errno;
	}
	m->timer_ok = true;
	__atomic_store_n(&m->armed, 1, __ATOMIC_RELAXED);
	memset(&its, 0, sizeof(its));
	its.it_interval.tv_sec = (time_t)(1000000000 / rate / 1000000000);
	its.it_interval.tv_nsec = (long)(1000000000 / rate % 1000000000);
	its.it_value = its.it_interval;
	if (timer_settime(m->timer, 0, &its, NULL)) {
		snprintf(w->err, w->errlen, "timer_settime: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

static void nmi_reset_counters(struct nmi_worker *m)
{
	m->runs = m->served = m->refused = m->free_errors = m->handler_ticks = 0;
	m->refused_busy = m->refused_nomem = 0;
	m->busy_retries = m->handed = m->handed_freed = 0;
}

/*
 * handler_frees: when the handler has taken the last objects, allocate the
 * next ones at task level (untimed) and publish them. The handler interrupts
 * this thread only, so a signal fence orders the slots before the count; a
 * handler that runs before the count is stored sees none.
 */
static void nmi_hand_over(struct al_worker *w, struct nmi_worker *m)
{
	unsigned n = 0;

	/* without a timer (rate=0, the baseline) no handler would take them: the
	 * worker would hold objects the rate>0 runs do not, and shift every
	 * cache's fill level (percpu > buddy at 16 allocs/cycle then refills and
	 * spills each cycle, 4x slower at 2 workers) */
	if (!m->hand_objs || !m->timer_ok || __atomic_load_n(&m->nhand, __ATOMIC_RELAXED))
		return;
	while (n < m->hand_objs && (m->hand[n] = al_alloc(m->a, &w->ctx, m->size, 0)))
		*(volatile char *)m->hand[n++] = 1; /* a refusal: fewer this time */
	m->handed += n;
	__atomic_signal_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&m->nhand, n, __ATOMIC_RELAXED);
}

/* Free n objects of arr (timed); -errno with w->err on a failed free. */
static int nmi_free_batch(struct al_worker *w, struct nmi_worker *m, void **arr, unsigned n)
{
	uint64_t t1 = al_ticks();
	unsigned i;
	int ret;

	for (i = 0; i < n; i++) {
		ret = wl_free_retry(w, arr[i], &m->busy_retries);
		if (al_unlikely(ret))
			return wl_free_failed(w, arr[i], ret);
	}
	w->free_ticks += al_ticks() - t1;
	w->free_ops += n;
	return 0;
}

/* malloc-xfree: give this batch to the next worker's box (or free it here
 * when the box is still full), then free the batch in this worker's box. */
static int nmi_xfree(struct al_worker *w, struct nmi_worker *m, unsigned n)
{
	struct nmi_shared *sh = w->shared;
	struct nmi_box *next = &sh->box[(w->id + 1) % sh->nworkers], *own = &sh->box[w->id];
	unsigned got = 0;
	bool given = false;
	int ret;

	w->alloc_ops += n;
	pthread_mutex_lock(&next->m);
	if (!next->n) {
		memcpy(next->objs, m->arr, n * sizeof(void *));
		next->n = n;
		given = true;
	}
	pthread_mutex_unlock(&next->m);
	if (!given && (ret = nmi_free_batch(w, m, m->arr, n)))
		return ret;
	pthread_mutex_lock(&own->m);
	got = own->n;
	memcpy(m->in, own->objs, got * sizeof(void *));
	own->n = 0;
	pthread_mutex_unlock(&own->m);
	ret = nmi_free_batch(w, m, m->in, got);
	if (!ret && sh->nworkers > 1)
		w->alloc_cross += got;
	return ret;
}

static int nmi_cycle_body(struct al_worker *w)
{
	struct nmi_worker *m = w->priv;
	unsigned n = (unsigned)w->params[P_allocs_per_cycle], i;
	uint64_t t0, t_end = 0;
	int ret;

	nmi_hand_over(w, m);
	t0 = al_ticks();
	for (i = 0; i < n; i++) {
		m->arr[i] = wl_alloc_retry(w, m->size, &m->busy_retries);
		if (al_unlikely(!m->arr[i])) {
			ret = wl_alloc_failed(w, i, n, m->size);
			while (i--)
				wl_free_untimed(w->a, &w->ctx, m->arr[i], &t_end);
			return ret;
		}
		*(volatile char *)m->arr[i] = (char)i;
	}
	w->alloc_ticks += al_ticks() - t0;
	if (w->params[P_mode] == M_XFREE)
		return nmi_xfree(w, m, n);
	w->alloc_ops += n;
	ret = nmi_free_batch(w, m, m->arr, n);
	if (ret)
		return ret;
	if (al_unlikely(__atomic_load_n(&m->lost, __ATOMIC_RELAXED))) {
		snprintf(w->err, w->errlen,
			 "%llu objects whose free failed in a handler did not fit the retry list",
			 (unsigned long long)m->lost);
		return -ENOSPC;
	}
	return 0;
}

/*
 * The handler works only inside cycles, so that what it does falls in the
 * engine's measured window exactly (the layers' counters are snapshotted
 * at barriers between cycles) and the workload's counts match theirs.
 */
static int nmi_cycle(struct al_worker *w)
{
	struct nmi_worker *m = w->priv;
	int ret;

	if (w->measuring && !m->measured) { /* the warmup's handler runs do not count */
		m->measured = true;
		nmi_reset_counters(m);
	}
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&m->in_cycle, 1, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	ret = nmi_cycle_body(w);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&m->in_cycle, 0, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return ret;
}

static void nmi_worker_fini(struct al_worker *w)
{
	struct nmi_worker *m = w->priv;
	struct timespec zero = { 0, 0 };
	uint64_t t_end = 0;
	sigset_t set;
	unsigned i;

	if (!m)
		return;
	if (m->timer_ok) {
		__atomic_store_n(&m->armed, 0, __ATOMIC_RELAXED);
		sigemptyset(&set);
		sigaddset(&set, NMI_SIG);
		pthread_sigmask(SIG_BLOCK, &set, NULL);
		timer_delete(m->timer);
		while (sigtimedwait(&set, NULL, &zero) == NMI_SIG)
			; /* consume what is still pending for this thread */
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	}
	for (i = 0; i < m->nkept; i++)
		wl_free_untimed(m->a, &w->ctx, m->kept[i], &t_end);
	for (i = 0; i < m->nhand; i++)
		wl_free_untimed(m->a, &w->ctx, m->hand[i], &t_end);
	for (i = 0; i < m->nretry; i++)
		wl_free_untimed(m->a, &w->ctx, m->retry[i], &t_end);
	al_worker_metric(w, "nmi_handler_runs", (double)m->runs, AL_METRIC_SUM);
	al_worker_metric(w, "nmi_served", (double)m->served, AL_METRIC_SUM);
	al_worker_metric(w, "nmi_refused", (double)m->refused, AL_METRIC_SUM);
	al_worker_metric(w, "nmi_refused_busy", (double)m->refused_busy, AL_METRIC_SUM);
	al_worker_metric(w, "nmi_refused_nomem", (double)m->refused_nomem, AL_METRIC_SUM);
	al_worker_metric(w, "nmi_free_errors", (double)m->free_errors, AL_METRIC_SUM);
	al_worker_metric(w, "nmi_handed", (double)m->handed, AL_METRIC_SUM);
	al_worker_metric(w, "nmi_handed_freed", (double)m->handed_freed, AL_METRIC_SUM);
	al_worker_metric(w, "busy_retries", (double)m->busy_retries, AL_METRIC_SUM);
	al_worker_metric(w, "nmi_handler_ns", al_ticks_to_ns((double)m->handler_ticks),
			 AL_METRIC_SUM);
	al_meta_free(m->arr, m->arr_len);
	al_meta_free(m->in, m->arr_len);
	al_meta_free(m, sizeof(*m));
	w->priv = NULL;
}

static const struct al_workload_desc nmi_desc = {
	.name = "nmi",
	AL_WORKLOAD_DESC_INIT,
	.doc = "malloc-free while a per-thread timer signal (the NMI model) allocates and frees "
	       "through the same policy; NMI-safe policies only",
	.flags = AL_WL_NMI,
	.nparams = P_NR,
	.params = nmi_params,
	.size_param = P_size,
	.setup = nmi_setup,
	.worker_init = nmi_worker_init,
	.cycle = nmi_cycle,
	.worker_fini = nmi_worker_fini,
	.prepare = nmi_prepare,
	.teardown = nmi_teardown,
};

AL_REGISTER_WORKLOAD(nmi_desc)
