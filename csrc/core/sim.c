/* SPDX-License-Identifier: MIT */
/*
 * Simulated CPUs: fibers, a discrete-event scheduler in virtual time, and
 * the cost model of the code between sync points (design: sim.h).
 *
 * Scheduler: a binary heap of the runnable model CPUs (and of those blocked
 * on a lock with a deadline, keyed by it), ordered by (virtual clock, tie),
 * where tie is drawn from the seeded PRNG each time a CPU enters the heap.
 * At a sync point the running CPU enters the heap and the top runs: itself
 * unless another CPU is earlier. A switch goes straight from fiber to fiber;
 * control comes back to the engine thread only when every fiber is parked
 * at a barrier, done, or waiting forever.
 *
 * Cost model: at each segment end the running CPU's counter blocks (every
 * context level) are compared with a copy; each counter that moved is a
 * term ("layer.counter"), with the number of units it moved, and the
 * segment's kind pair ("seg.acq-rel") is a term of one unit. Predicting, a
 * segment costs the sum of units times cost; calibrating, the segment is
 * timed with the real clock, less an empty segment's timing cost, its time
 * added to the normal equations (xtx, xty) from which Python fits the
 * costs, and the clock advances by the time measured. Counters only lock
 * contention moves (contended, owner switches) are not terms: the
 * simulation models contention itself (waits, handoffs).
 *
 * Cache lines: a table of the lines of shared words (al_sim_shared) with
 * their last writer and a mask of CPUs (modulo 64) that read them since.
 *
 * Cost of the simulation itself (wall time, not virtual): a sync point is a
 * counter comparison (the stack's counters of one CPU), a heap push and pop
 * and, when another CPU is earlier, a fiber switch (six register pushes and
 * pops).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "alloclab/core.h"
#include "cpu.h"
#include "sim_run.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SIM_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define SIM_TSAN 1
#endif

int al_sim_active;
int al_sim_lines;
static int sims_running;
static double saved_ticks_per_ns;
static pthread_mutex_t clock_mu = PTHREAD_MUTEX_INITIALIZER;

enum cpu_state { S_RUNNABLE, S_BLOCKED, S_PARKED, S_DONE };

#define HELD_MAX     8
#define SEG_FLOOR_PS 500 /* the least a segment costs (0.5 ns) */

struct sim_cpu {
	void *sp;    /* saved stack pointer (fiber) */
	void *stack; /* mapping, stack_len bytes */
	size_t stack_len;
	void (*fn)(void *);
	void *arg;
	struct al_ctx *ctx;
	unsigned id;
	int state;
	uint64_t now;	      /* virtual clock, ps */
	uint64_t tie;	      /* heap tie-break */
	int heap_pos;	      /* index in the heap, or -1 */
	bool daemon;	      /* a workload's own thread (al_sim_daemon), not a worker */
	void *(*dfn)(void *); /* a daemon's function */
	bool sleeping;	      /* a daemon in al_sim_sleep_on (not counted awake) */
	unsigned char tls[AL_SIM_TLS][AL_SIM_TLS_BYTES]; /* its thread-locals */
	int phase;	   /* 0: the last operation at the top of the stack allocated, 1: freed */
	double offset_ps;  /* the offsets of the segment's calls at the top (phase_offset_ps) */
	bool stores_moved; /* a store took a line from another CPU since the last release */
	bool seg_waited;   /* a layer's load in this segment waited for a whole line */
	const void *wait_lock; /* blocked on */
	uint32_t wait_ticket;
	uint64_t wait_since;
	uint64_t deadline; /* ps; 0 = none */
	struct sim_cpu *wait_next;
	int begin;	  /* kind of the segment's start */
	uint64_t seg_tsc; /* calibrate: real clock at the segment's start */
	uint64_t cycle_start;
	unsigned nheld;
	const void *held[HELD_MAX];
	uint64_t held_since[HELD_MAX];
	uint16_t held_what[HELD_MAX];
#ifdef SIM_ASAN
	void *fake_stack;
#endif
#ifdef SIM_TSAN
	void *tsan_fiber;
#endif
};

struct ctrset {
	struct al_counters *k;
	int feat[64 * 4]; /* term per counter index (first n), -1 = not a term */
	unsigned n;
	uint64_t *snap;	     /* copy of k->v */
	size_t len;	     /* u64 in v */
	uint16_t layer_term; /* the layer's hold/wait label (term index of "layer") */
	struct ctrset *next;
};

struct waitq {
	const void *lock;
	struct sim_cpu *head;
};

#define LINES	   4096 /* shared-line table (open addressing) */
#define CALL_CACHE 32	/* layers whose calls are terms */
struct call_term {
	const void *desc;
	int term[4]; /* per call kind; -2 = not made yet */
};
struct obj_line {
	uintptr_t tag;	  /* line address + 1; 0 = empty */
	uint64_t readers; /* CPUs (mod 64) holding a copy since the last write */
	uint32_t writer;  /* the CPU that wrote it last */
};
struct line {
	uintptr_t tag; /* line address + 1; 0 = empty */
	int32_t writer;
	uint64_t readers;
};

struct al_sim {
	struct al_sim_config cfg;
	struct al_sim_table *t;
	unsigned ncpu;
	struct sim_cpu *cpus;
	struct sim_cpu *cur; /* running fiber, NULL on the engine */
	void *main_sp;
	unsigned char main_tls[AL_SIM_TLS][AL_SIM_TLS_BYTES]; /* the engine's thread-locals */
#ifdef SIM_ASAN
	void *main_fake;
	const void *main_bottom;
	size_t main_size;
#endif
#ifdef SIM_TSAN
	void *main_fiber;
#endif
	struct sim_cpu **heap;
	unsigned nheap;
	uint64_t rng;
	uint64_t phase;	 /* ps: the clock at the last barrier */
	double real_tpn; /* the real clock's ticks per ns (calibrate) */
	double term_ps[AL_SIM_FEATURES];
	int known[AL_SIM_FEATURES];
	int seg_term[AL_SIM_KIND_NR][AL_SIM_KIND_NR];
	struct ctrset *sets;
	const char *layer; /* being built */
	struct waitq wq[64];
	struct line *lines;
	struct obj_line *objs; /* objects' first lines (al_sim_object) */
	uint32_t obj_cap, obj_n;
	double phase_scale[2];	   /* cfg.phase_scale, 0 read as 1 */
	double phase_offset_ps[2]; /* cfg.phase_offset_ns, in ps */
	bool measuring;
	bool deadlock;
	double line_ps, handoff_ps, store_ps, overlap_ps;
	struct al_sim_stats st;
	unsigned nslots;		    /* ncpu workers, then AL_SIM_DAEMONS daemons */
	unsigned ndaemons;		    /* daemons started */
	unsigned nactive;		    /* workers neither parked nor done */
	unsigned nbusy;			    /* daemons awake (not in al_sim_sleep_on) */
	bool joining;			    /* the engine runs the daemons to their end */
	struct call_term calls[CALL_CACHE]; /* term of each layer's calls */
	const void *top;		    /* the stack's top layer: its calls are operations */

	int fbuf[AL_SIM_FEATURES]; /* this segment's terms */
	double ubuf[AL_SIM_FEATURES];
	unsigned nf;
};

static __thread struct al_sim *self;

/* Thread-locals switched with the fibers (al_sim_tls_register), set once
 * at load time by constructors: read-only after that. */
static struct {
	void *(*addr)(void);
	size_t size;
} tls[AL_SIM_TLS];
static unsigned ntls;

int al_sim_tls_register(void *(*addr)(void), size_t size)
{
	if (ntls >= AL_SIM_TLS || size > AL_SIM_TLS_BYTES)
		return -ENOSPC;
	tls[ntls].addr = addr;
	tls[ntls++].size = size;
	return 0;
}

/* Save the running context's thread-locals into from's copy (the engine's
 * into main), load to's. */
static void tls_switch(unsigned char (*from)[AL_SIM_TLS_BYTES],
		       unsigned char (*to)[AL_SIM_TLS_BYTES])
{
	for (unsigned i = 0; i < ntls; i++) {
		void *p = tls[i].addr();

		memcpy(from[i], p, tls[i].size);
		memcpy(p, to[i], tls[i].size);
	}
}

static const char *const kind_names[AL_SIM_KIND_NR] = {
	"start", "acq", "rel", "clock", "cycle", "shared", "end",
};

/* ---- fibers ---- */

#if defined(__x86_64__)
/* Save the callee-saved registers on this stack, store its pointer in *from,
 * load `to` and pop the other fiber's registers: its return resumes it. */
void sim_swap(void **from, void *to);
__asm__(".text\n"
	".globl sim_swap\n"
	".hidden sim_swap\n"
	".type sim_swap,@function\n"
	"sim_swap:\n"
	"\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
	"\tmovq %rsp, (%rdi)\n"
	"\tmovq %rsi, %rsp\n"
	"\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
	"\tret\n"
	".size sim_swap, .-sim_swap\n");
#define SIM_FIBERS 1
#elif defined(__aarch64__)
void sim_swap(void **from, void *to);
__asm__(".text\n"
	".globl sim_swap\n"
	".hidden sim_swap\n"
	".type sim_swap,%function\n"
	"sim_swap:\n"
	"\tsub sp, sp, #176\n"
	"\tstp x19, x20, [sp, #0]\n\tstp x21, x22, [sp, #16]\n\tstp x23, x24, [sp, #32]\n"
	"\tstp x25, x26, [sp, #48]\n\tstp x27, x28, [sp, #64]\n\tstp x29, x30, [sp, #80]\n"
	"\tstp d8, d9, [sp, #96]\n\tstp d10, d11, [sp, #112]\n\tstp d12, d13, [sp, #128]\n"
	"\tstp d14, d15, [sp, #144]\n"
	"\tmov x2, sp\n\tstr x2, [x0]\n\tmov sp, x1\n"
	"\tldp x19, x20, [sp, #0]\n\tldp x21, x22, [sp, #16]\n\tldp x23, x24, [sp, #32]\n"
	"\tldp x25, x26, [sp, #48]\n\tldp x27, x28, [sp, #64]\n\tldp x29, x30, [sp, #80]\n"
	"\tldp d8, d9, [sp, #96]\n\tldp d10, d11, [sp, #112]\n\tldp d12, d13, [sp, #128]\n"
	"\tldp d14, d15, [sp, #144]\n"
	"\tadd sp, sp, #176\n\tret\n"
	".size sim_swap, .-sim_swap\n");
#define SIM_FIBERS 1
#else
#define SIM_FIBERS 0
#endif

static void fiber_entry(void);

/* A new fiber's first switch "returns" into fiber_entry. */
static void fiber_prepare(struct sim_cpu *c)
{
	uintptr_t top = ((uintptr_t)c->stack + c->stack_len) & ~(uintptr_t)15;
	uintptr_t *sp;

#if defined(__x86_64__)
	sp = (uintptr_t *)(top - 16); /* after ret: rsp = top - 8, as after a call */
	sp[0] = (uintptr_t)fiber_entry;
	sp -= 6; /* r15 r14 r13 r12 rbx rbp */
	memset(sp, 0, 6 * sizeof(*sp));
#elif defined(__aarch64__)
	sp = (uintptr_t *)(top - 176);
	memset(sp, 0, 176);
	sp[11] = (uintptr_t)fiber_entry; /* x30 */
#else
	sp = (uintptr_t *)top;
#endif
	c->sp = sp;
}

/* Switch from the running fiber (or the engine: from == NULL) to `to` (or
 * the engine: to == NULL). */
static void switch_to(struct al_sim *s, struct sim_cpu *from, struct sim_cpu *to)
{
	void **save = from ? &from->sp : &s->main_sp;
	void *load = to ? to->sp : s->main_sp;

	if (from == to) /* a CPU whose own deadline is the earliest event goes on */
		return;

	s->cur = to;
	if (to)
		al_ctx_set_current(to->ctx);
	if (ntls)
		tls_switch(from ? from->tls : s->main_tls, to ? to->tls : s->main_tls);
	s->st.switches++;
#ifdef SIM_ASAN
	{
		void **fake = from ? &from->fake_stack : &s->main_fake;
		const void *bottom = to ? to->stack : s->main_bottom;
		size_t size = to ? to->stack_len : s->main_size;

		__sanitizer_start_switch_fiber(fake, bottom, size);
	}
#endif
#ifdef SIM_TSAN
	__tsan_switch_to_fiber(to ? to->tsan_fiber : s->main_fiber, 0);
#endif
	sim_swap(save, load);
#ifdef SIM_ASAN
	{
		struct sim_cpu *me = s->cur;

		if (me)
			__sanitizer_finish_switch_fiber(me->fake_stack, NULL, NULL);
		else
			__sanitizer_finish_switch_fiber(s->main_fake, &s->main_bottom,
							&s->main_size);
	}
#endif
}

/* ---- the heap ---- */

static uint64_t rng_next(struct al_sim *s)
{
	uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static uint64_t key_of(const struct sim_cpu *c)
{
	return c->state == S_BLOCKED ? c->deadline : c->now;
}

static bool before(const struct sim_cpu *a, const struct sim_cpu *b)
{
	uint64_t ka = key_of(a), kb = key_of(b);

	return ka < kb || (ka == kb && a->tie < b->tie);
}

static void heap_set(struct al_sim *s, unsigned i, struct sim_cpu *c)
{
	s->heap[i] = c;
	c->heap_pos = (int)i;
}

static void sift_up(struct al_sim *s, unsigned i)
{
	struct sim_cpu *c = s->heap[i];

	while (i) {
		unsigned p = (i - 1) / 2;

		if (!before(c, s->heap[p]))
			break;
		heap_set(s, i, s->heap[p]);
		i = p;
	}
	heap_set(s, i, c);
}

static void sift_down(struct al_sim *s, unsigned i)
{
	struct sim_cpu *c = s->heap[i];

	for (;;) {
		unsigned l = 2 * i + 1, m = l;

		if (l >= s->nheap)
			break;
		if (l + 1 < s->nheap && before(s->heap[l + 1], s->heap[l]))
			m = l + 1;
		if (!before(s->heap[m], c))
			break;
		heap_set(s, i, s->heap[m]);
		i = m;
	}
	heap_set(s, i, c);
}

static void heap_push(struct al_sim *s, struct sim_cpu *c)
{
	c->tie = rng_next(s);
	heap_set(s, s->nheap++, c);
	sift_up(s, s->nheap - 1);
}

static void heap_remove(struct al_sim *s, struct sim_cpu *c)
{
	unsigned i = (unsigned)c->heap_pos;
	struct sim_cpu *last;

	c->heap_pos = -1;
	last = s->heap[--s->nheap];
	if (last == c)
		return;
	heap_set(s, i, last);
	sift_up(s, i);
	sift_down(s, (unsigned)last->heap_pos);
}

static struct sim_cpu *heap_pop(struct al_sim *s)
{
	struct sim_cpu *c = s->nheap ? s->heap[0] : NULL;

	if (c)
		heap_remove(s, c);
	return c;
}

/* ---- terms ---- */

static int term_find(struct al_sim *s, const char *name)
{
	struct al_sim_table *t = s->t;
	unsigned i;

	for (i = 0; i < t->n; i++)
		if (!strncmp(t->name[i], name, AL_SIM_NAME - 1))
			return (int)i;
	if (t->n >= AL_SIM_FEATURES) {
		t->overflow++;
		return -1;
	}
	snprintf(t->name[t->n], AL_SIM_NAME, "%s", name);
	t->cost_ns[t->n] = NAN;
	s->known[t->n] = 0;
	s->term_ps[t->n] = 0;
	return (int)t->n++;
}

static void seg_add(struct al_sim *s, int f, double units)
{
	if (f < 0)
		return;
	for (unsigned i = 0; i < s->nf; i++)
		if (s->fbuf[i] == f) {
			s->ubuf[i] += units;
			return;
		}
	if (s->nf < AL_SIM_FEATURES) {
		s->fbuf[s->nf] = f;
		s->ubuf[s->nf++] = units;
	}
}

static inline uint64_t real_ticks(void)
{
#if defined(__x86_64__)
	unsigned lo, hi;

	__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
#else
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
#endif
}

/* The terms of c's current segment: its kind pair, and each counter of c's
 * blocks that moved since the last look. */
static void seg_terms(struct al_sim *s, struct sim_cpu *c, int end)
{
	if (s->seg_term[c->begin][end] == -2) { /* a pair met for the first time */
		char name[AL_SIM_NAME];

		snprintf(name, sizeof(name), "seg.%s-%s", kind_names[c->begin], kind_names[end]);
		s->seg_term[c->begin][end] = term_find(s, name);
	}
	seg_add(s, s->seg_term[c->begin][end], 1);
	for (struct ctrset *cs = s->sets; cs; cs = cs->next) {
		const struct al_counters *k = cs->k;

		if (!k->v || !k->on || c->id * AL_CTX_NR >= k->nblocks)
			continue;
		for (unsigned lv = 0; lv < AL_CTX_NR; lv++) {
			size_t base = (size_t)(c->id * AL_CTX_NR + lv) * k->stride;
			const uint64_t *v = &k->v[base];
			uint64_t *snap = &cs->snap[base];

			if (!memcmp(v, snap, cs->n * sizeof(*v)))
				continue; /* the usual case for most blocks: one wide compare */
			for (unsigned i = 0; i < cs->n; i++) {
				uint64_t now = v[i];

				if (now == snap[i])
					continue;
				if (cs->feat[i] >= 0)
					seg_add(s, cs->feat[i], (double)(now - snap[i]));
				snap[i] = now;
			}
		}
	}
}

/* A lognormal factor of mean 1 and log-sd cfg.jitter (Box-Muller on the
 * seeded PRNG). */
static double jitter_factor(struct al_sim *s)
{
	double u1 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
	double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
	double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
	double sg = s->cfg.jitter;

	return exp(sg * z - 0.5 * sg * sg);
}

/* A segment's cost with the offsets of its calls at the top: what a
 * negative offset cannot take from this segment without going under the
 * floor goes on to the next one (a call at the top often ends its segment
 * at once, at the layer's first lock), never the floor itself. */
static double add_offsets(struct sim_cpu *c, double cost)
{
	double off = c->offset_ps, total = cost + off;

	c->offset_ps = 0;
	if (off < 0 && total < SEG_FLOOR_PS) {
		double carry = total - SEG_FLOOR_PS;

		c->offset_ps = carry > off ? carry : off;
	}
	return total;
}

/* End c's segment at a boundary of kind `end`: cost it (or time it), advance
 * c's clock, start the next segment. */
static void seg_end(struct al_sim *s, struct sim_cpu *c, int end)
{
	struct al_sim_table *t = s->t;
	uint64_t t1 = s->cfg.calibrate ? real_ticks() : 0;
	double cost = 0;

	c->seg_waited = false;
	seg_terms(s, c, end);
	for (unsigned i = 0; i < s->nf; i++) {
		int f = s->fbuf[i];

		t->seen[f] += s->ubuf[i];
		if (!s->cfg.calibrate) {
			if (s->known[f])
				cost += s->ubuf[i] * s->term_ps[f];
			else if (s->measuring) {
				s->st.uncalibrated_units += s->ubuf[i];
			}
		}
	}
	if (s->cfg.calibrate) {
		double y = (double)(t1 - c->seg_tsc) / s->real_tpn - t->null_ns;

		if (y < 0)
			y = 0;
		if (!s->measuring) {
			/* warmup: first touches and page faults, not the steady path */
			cost = y * 1000.0;
		} else if (y > 20000) { /* an interrupt or a preemption, not the code */
			t->dropped++;
		} else {
			for (unsigned i = 0; i < s->nf; i++) {
				int fi = s->fbuf[i];

				t->xty[fi] += s->ubuf[i] * y;
				for (unsigned j = 0; j < s->nf; j++)
					t->xtx[fi * AL_SIM_FEATURES + s->fbuf[j]] +=
						s->ubuf[i] * s->ubuf[j];
			}
			t->yy += y * y;
			t->nseg++;
			cost = y * 1000.0;
		}
	}
	if (!s->cfg.calibrate)
		cost *= s->phase_scale[c->phase];
	if (s->cfg.jitter > 0 && !s->cfg.calibrate && cost > 0)
		cost *= jitter_factor(s);
	cost = add_offsets(c, cost);
	/* no code runs in no time: a floor, so that a table of zeros still ends */
	c->now += cost < SEG_FLOOR_PS ? SEG_FLOOR_PS : (uint64_t)llround(cost);
	c->begin = end;
	s->nf = 0; /* the next segment's terms start here (al_sim_call adds to them) */

	s->st.segments++;
	if (s->cfg.calibrate)
		c->seg_tsc = real_ticks();
}

/* ---- events ---- */

static void event(struct al_sim *s, unsigned cpu, int kind, uint16_t what, uint64_t start,
		  uint64_t end)
{
	struct al_sim_event *ev;

	if (!s->measuring || !s->cfg.events)
		return;
	if (s->st.events >= s->cfg.events_max) {
		s->st.events_dropped++;
		return;
	}
	ev = &s->cfg.events[s->st.events++];
	ev->start_ps = start;
	ev->dur_ps = end > start ? end - start : 0;
	ev->cpu = cpu;
	ev->kind = (uint16_t)kind;
	ev->what = what;
}

/* ---- scheduling ---- */

/* A CPU taken off the heap to run: one blocked with a deadline runs because
 * its deadline came first (the lock code then sees its budget spent). */
static void wake_due(struct al_sim *s, struct sim_cpu *next)
{
	if (next->state != S_BLOCKED)
		return;
	if (next->sleeping) /* a daemon's sleep ended: it is awake */
		s->nbusy++;
	next->now = next->deadline > next->now ? next->deadline : next->now;
	next->state = S_RUNNABLE;
}

/* The running CPU c reached a point where it may give way: run whoever is
 * earliest (c itself, if it is). */
static void give_way(struct al_sim *s, struct sim_cpu *c)
{
	struct sim_cpu *next;

	if (!s->nheap)
		return;
	next = s->heap[0];
	c->tie = rng_next(s);
	if (!before(next, c))
		return;
	heap_push(s, c);
	next = heap_pop(s);
	if (next == c)
		return;
	wake_due(s, next);
	switch_to(s, c, next);
}

/* c stops running (blocked without deadline, parked, done): run the
 * earliest CPU, or return to the engine. */
static void run_next(struct al_sim *s, struct sim_cpu *c)
{
	struct sim_cpu *next = NULL;

	/* the engine's turn when no worker is left to run and no daemon is
	 * awake: sleeping daemons wait in the heap for the next step */
	if (s->nactive || s->nbusy || s->joining)
		next = heap_pop(s);
	if (next)
		wake_due(s, next);
	switch_to(s, c, next);
}

static void wq_del(struct al_sim *s, struct sim_cpu *c);

static void fiber_entry(void)
{
	struct al_sim *s = self;
	struct sim_cpu *c = s->cur;

#ifdef SIM_ASAN
	__sanitizer_finish_switch_fiber(NULL, &s->main_bottom, &s->main_size);
#endif
	if (c->daemon)
		c->dfn(c->arg);
	else
		c->fn(c->arg);
	seg_end(s, c, AL_SIM_END);
	c->state = S_DONE;
	if (c->daemon)
		s->nbusy--;
	else
		s->nactive--;
	run_next(s, c);
	__builtin_unreachable();
}

/* ---- hooks ---- */

bool al_sim_here(void)
{
	return self != NULL;
}

int al_sim_cpu(void)
{
	struct al_sim *s = self;

	return s && s->cur ? (int)s->cur->id : -1;
}

uint64_t al_sim_ticks(int boundary)
{
	struct al_sim *s = self;
	struct sim_cpu *c;

	if (!s)
		return real_ticks(); /* another thread: not simulated */
	c = s->cur;
	if (!c)
		return s->phase;
	if (boundary)
		seg_end(s, c, AL_SIM_CLOCK);
	return c->now;
}

void al_sim_sync(int kind)
{
	struct al_sim *s = self;
	struct sim_cpu *c;

	if (!s || !(c = s->cur))
		return;
	if (kind == AL_SIM_CYCLE) {
		event(s, c->id, AL_SIM_EV_CYCLE, 0, c->cycle_start, c->now);
	}
	seg_end(s, c, kind);
	if (kind == AL_SIM_CYCLE)
		c->cycle_start = c->now;
	s->st.sync_points++;
	give_way(s, c);
}

void al_sim_yield(void)
{
	struct al_sim *s = self;
	struct sim_cpu *c;

	if (!s || !(c = s->cur))
		return;
	seg_end(s, c, AL_SIM_SHARED);
	if (s->nheap && key_of(s->heap[0]) >= c->now)
		c->now = key_of(s->heap[0]) + 1;
	s->st.sync_points++;
	give_way(s, c);
}

void al_sim_wait_until(uint64_t ticks)
{
	struct al_sim *s = self;
	struct sim_cpu *c;

	if (!s || !(c = s->cur))
		return;
	seg_end(s, c, AL_SIM_CLOCK);
	if (ticks > c->now)
		c->now = ticks;
	s->st.sync_points++;
	give_way(s, c);
}

/*
 * One line c waited for or took, at ps: a whole transfer (line_ps), a
 * load's share when the loads around it overlap theirs (overlap_ps), or a
 * store's share (store_ps; counted apart: no whole line moved).
 */
static void charge_line(struct al_sim *s, struct sim_cpu *c, double ps, bool store)
{
	uint64_t t = (uint64_t)llround(ps);

	c->now += t;
	if (s->measuring) {
		if (store)
			s->st.store_lines++;
		else
			s->st.lines++;
		s->st.line_ns += (double)t / 1000.0;
	}
}

/*
 * Lines of objects and of layers' data (al_sim_object, al_sim_touch): who
 * wrote each last and who has read it since, in an open-addressed table
 * keyed by the line's address that doubles when half full. Lookups are
 * exact, so where the arena lies (ASLR) changes the table's layout but
 * never an answer: runs stay deterministic.
 */
#define OBJ_MIN	  (1u << 12)
#define OBJ_MAX	  (1u << 24) /* 16 Mi lines (1 GiB of objects); past it, untracked */
#define OBJ_EMPTY 0

static uint32_t obj_hash(uintptr_t tag, uint32_t mask)
{
	return (uint32_t)((tag * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

static bool obj_grow(struct al_sim *s)
{
	uint32_t n = s->obj_cap ? s->obj_cap * 2 : OBJ_MIN;
	struct obj_line *t, *old = s->objs;

	if (n > OBJ_MAX || !(t = al_meta_alloc(sizeof(*t) * n)))
		return false;
	for (uint32_t i = 0; i < s->obj_cap; i++) {
		uint32_t h;

		if (old[i].tag == OBJ_EMPTY)
			continue;
		for (h = obj_hash(old[i].tag, n - 1); t[h].tag != OBJ_EMPTY; h = (h + 1) & (n - 1))
			;
		t[h] = old[i];
	}
	if (old)
		al_meta_free(old, sizeof(*old) * s->obj_cap);
	s->objs = t;
	s->obj_cap = n;
	return true;
}

/*
 * c accesses the line of p. A load (or a read-modify-write) waits for the
 * line when another CPU wrote it last and c has not read it since; with
 * read_takes_line the load takes the line whole (the writer's copy is
 * invalidated, as this machine's probe found: migratory sharing), else c
 * shares it. A store waits for nothing (the store buffer holds it while the
 * line comes) but takes the line: from another CPU, or from the sharers of
 * c's own line, it pays store_fraction of a transfer (stores stream: their
 * fetches overlap), and a store that took another CPU's line makes c's next
 * release wait for one line. Returns whether c paid for a whole line.
 */
static bool touch(struct al_sim *s, struct sim_cpu *c, const void *p, int access, double load_ps)
{
	uintptr_t tag = ((uintptr_t)p >> 6) + 1;
	uint64_t bit = 1ull << (c->id % 64);
	struct obj_line *o;
	bool moved = false, away;
	uint32_t h;

	if (s->obj_n >= s->obj_cap / 2 && !obj_grow(s) && s->obj_n >= s->obj_cap)
		return false;
	for (h = obj_hash(tag, s->obj_cap - 1); s->objs[h].tag != OBJ_EMPTY;
	     h = (h + 1) & (s->obj_cap - 1))
		if (s->objs[h].tag == tag)
			break;
	o = &s->objs[h];
	if (o->tag == OBJ_EMPTY) {
		o->tag = tag;
		o->writer = c->id;
		o->readers = bit;
		s->obj_n++;
		return false;
	}
	away = o->writer != c->id && !(o->readers & bit); /* c holds no copy */
	if (access == AL_SIM_STORE) {
		if (away)
			c->stores_moved = true; /* paid at the next release */
		if (away || (o->readers & ~bit))
			charge_line(s, c, s->store_ps, true);
	} else if (away) {
		charge_line(s, c, load_ps, false);
		c->seg_waited = true;
		moved = true;
	} else if (access == AL_SIM_RMW && (o->readers & ~bit)) {
		charge_line(s, c, s->store_ps, true); /* the other copies are invalidated */
	}
	if (access != AL_SIM_LOAD || (moved && s->cfg.read_takes_line)) {
		o->writer = c->id;
		o->readers = bit;
	} else {
		o->readers |= bit;
	}
	return moved;
}

/* A calibration runs one CPU, whose lines never move, and times its
 * segments with the real clock: the tracking would only add its own time
 * to the code's, so it is off there. The workload stores into an object it
 * allocated (its list link) and loads from one it frees (the link). */
void al_sim_object(const void *a, const void *p, bool freeing)
{
	struct al_sim *s = self;

	if (!s || !s->cur || a != s->top || !p || s->cfg.calibrate)
		return;
	if (touch(s, s->cur, p, freeing ? AL_SIM_LOAD : AL_SIM_STORE, s->line_ps) && s->measuring)
		s->st.object_lines++;
}

void al_sim_touch(const void *p, int access)
{
	struct al_sim *s = self;

	if (s && s->cur && p && !s->cfg.calibrate)
		touch(s, s->cur, p, access, s->cur->seg_waited ? s->overlap_ps : s->line_ps);
}

/* The line of addr in the table (made when new), or NULL when it is full
 * (the line is then not tracked: no transfer charged). */
static struct line *line_of(struct al_sim *s, const void *addr)
{
	uintptr_t tag = ((uintptr_t)addr >> 6) + 1;
	unsigned h = (unsigned)((tag * 0x9E3779B97F4A7C15ull) >> 52) % LINES;

	for (unsigned i = 0; i < LINES; i++) {
		struct line *l = &s->lines[(h + i) % LINES];

		if (l->tag && l->tag != tag)
			continue;
		if (!l->tag) {
			l->tag = tag;
			l->writer = -1;
		}
		return l;
	}
	return NULL;
}

void al_sim_shared(const void *addr, bool write)
{
	struct al_sim *s = self;
	struct sim_cpu *c;
	struct line *l;
	uint64_t bit;
	bool moved;

	if (!s || !(c = s->cur))
		return;
	seg_end(s, c, AL_SIM_SHARED);
	s->st.sync_points++;
	give_way(s, c);
	if (!(l = line_of(s, addr)))
		return;
	bit = 1ull << (c->id % 64);
	moved = l->writer >= 0 && (unsigned)l->writer != c->id && !(l->readers & bit);
	if (moved) {
		charge_line(s, c, s->line_ps, false);
		/* the word is read when its line arrives: what other CPUs
		 * wrote while it travelled is what the caller sees */
		give_way(s, c);
	}
	if (write || (moved && s->cfg.read_takes_line)) {
		l->writer = (int32_t)c->id;
		l->readers = bit;
	} else {
		l->readers |= bit;
	}
}

void al_sim_note_write(const void *addr)
{
	struct al_sim *s = self;
	struct line *l;

	if (!s || !s->cur || !(l = line_of(s, addr)))
		return;
	l->writer = (int32_t)s->cur->id;
	l->readers = 1ull << (s->cur->id % 64);
}

static struct waitq *wq_get(struct al_sim *s, const void *lock, bool make)
{
	unsigned h = (unsigned)(((uintptr_t)lock >> 6) * 0x9E3779B97F4A7C15ull >> 58), i;

	for (i = 0; i < 64; i++) {
		struct waitq *q = &s->wq[(h + i) % 64];

		if (q->lock == lock)
			return q;
		if (!q->lock && make) {
			q->lock = lock;
			return q;
		}
		if (!q->lock && !make)
			return NULL;
	}
	return NULL;
}

static void wq_del(struct al_sim *s, struct sim_cpu *c)
{
	struct waitq *q = wq_get(s, c->wait_lock, false);
	struct sim_cpu **pp;

	if (!q)
		return;
	for (pp = &q->head; *pp; pp = &(*pp)->wait_next)
		if (*pp == c) {
			*pp = c->wait_next;
			break;
		}
	c->wait_next = NULL;
}

void al_sim_lock_block(const void *lock, uint32_t ticket, uint64_t deadline_ticks)
{
	struct al_sim *s = self;
	struct sim_cpu *c;
	struct waitq *q;

	if (!s || !(c = s->cur))
		return;
	q = wq_get(s, lock, true);
	if (!q) { /* more locks waited on than the table holds: spin in time */
		c->now += 1000;
		give_way(s, c);
		return;
	}
	c->wait_lock = lock;
	c->wait_ticket = ticket;
	c->wait_since = c->now;
	c->wait_next = q->head;
	q->head = c;
	c->state = S_BLOCKED;
	c->deadline = deadline_ticks;
	if (s->measuring && !c->daemon)
		s->st.lock_waits++;
	if (deadline_ticks)
		heap_push(s, c); /* keyed by its deadline */
	run_next(s, c);
	/* woken: by a release (state set by the waker) or by the deadline */
	if (c->wait_lock) {
		wq_del(s, c);
		c->wait_lock = NULL;
		if (s->measuring && !c->daemon)
			s->st.lock_timeouts++;
	}
	if (s->measuring && !c->daemon)
		s->st.wait_ns += (double)(c->now - c->wait_since) / 1000.0;
	if (!c->daemon)
		event(s, c->id, AL_SIM_EV_WAIT, 0, c->wait_since, c->now);
	c->state = S_RUNNABLE;
	c->deadline = 0;
}

void al_sim_lock_wake(const void *lock, uint32_t ticket, bool any)
{
	struct al_sim *s = self;
	struct sim_cpu *c, *w, **pp;
	struct waitq *q;

	if (!s || !(c = s->cur) || !(q = wq_get(s, lock, false)))
		return;
	for (pp = &q->head; (w = *pp);) {
		if (!any && w->wait_ticket != ticket) {
			pp = &w->wait_next;
			continue;
		}
		*pp = w->wait_next;
		w->wait_next = NULL;
		w->wait_lock = NULL;
		if (w->sleeping)
			s->nbusy++;
		if (w->heap_pos >= 0)
			heap_remove(s, w);
		w->state = S_RUNNABLE;
		if (w->now < c->now)
			w->now = c->now;
		heap_push(s, w);
		if (!any)
			break;
	}
}

void al_sim_lock_taken(const void *lock, unsigned prev_owner, const void *ctr)
{
	struct al_sim *s = self;
	struct sim_cpu *c;
	uint16_t what = 0;

	if (!s || !(c = s->cur))
		return;
	if (prev_owner && prev_owner != c->id + 1) {
		uint64_t t0 = c->now;

		charge_line(s, c, s->line_ps, false);
		c->now += (uint64_t)llround(s->handoff_ps);
		if (s->measuring) {
			s->st.handoffs++;
			s->st.line_ns += s->handoff_ps / 1000.0;
			s->st.lines += (uint64_t)llround(s->cfg.lines_per_handoff);
		}
		event(s, c->id, AL_SIM_EV_HANDOFF, 0, t0, c->now);
	}
	for (struct ctrset *cs = s->sets; cs; cs = cs->next)
		if (cs->k == ctr)
			what = cs->layer_term;
	if (c->nheld < HELD_MAX) {
		c->held[c->nheld] = lock;
		c->held_since[c->nheld] = c->now;
		c->held_what[c->nheld] = what;
	}
	c->nheld++;
}

void al_sim_lock_released(const void *lock)
{
	struct al_sim *s = self;
	struct sim_cpu *c;

	if (!s || !(c = s->cur) || !c->nheld)
		return;
	if (c->stores_moved) { /* the release waits for the hold's stores */
		c->stores_moved = false;
		charge_line(s, c, s->line_ps, false);
	}
	for (unsigned i = c->nheld < HELD_MAX ? c->nheld : HELD_MAX; i--;)
		if (c->held[i] == lock) {
			event(s, c->id, AL_SIM_EV_HOLD, c->held_what[i], c->held_since[i], c->now);
			memmove(&c->held[i], &c->held[i + 1],
				(HELD_MAX - i - 1) * sizeof(c->held[0]));
			memmove(&c->held_since[i], &c->held_since[i + 1],
				(HELD_MAX - i - 1) * sizeof(c->held_since[0]));
			memmove(&c->held_what[i], &c->held_what[i + 1],
				(HELD_MAX - i - 1) * sizeof(c->held_what[0]));
			break;
		}
	c->nheld--;
}

void al_sim_top(const void *a)
{
	if (self)
		self->top = a;
}

void al_sim_call(const void *a, int kind)
{
	static const char *const what[4] = { "alloc", "free", "alloc_bulk", "free_bulk" };
	struct al_sim *s = self;
	const void *desc = a ? ((const struct al_allocator *)a)->desc : NULL;
	struct call_term *ct;
	unsigned i;

	if (!s || !s->cur || kind < 0 || kind > 3)
		return;
	for (i = 0; i < CALL_CACHE && s->calls[i].desc; i++)
		if (s->calls[i].desc == desc)
			break;
	if (i == CALL_CACHE)
		return; /* more layers than the cache holds: not a term */
	ct = &s->calls[i];
	if (!ct->desc) {
		ct->desc = desc;
		for (int k = 0; k < 4; k++)
			ct->term[k] = -2;
	}
	if (ct->term[kind] == -2) {
		char name[AL_SIM_NAME];
		const struct al_layer_desc *d = desc;

		snprintf(name, sizeof(name), "call.%s.%s", d && d->name ? d->name : "?",
			 what[kind]);
		ct->term[kind] = term_find(s, name);
	}

	if (a == s->top) {
		int ph = kind == AL_SIM_CALL_FREE || kind == AL_SIM_CALL_FREE_BULK;

		s->cur->phase = ph;
		s->cur->offset_ps += s->phase_offset_ps[ph];
		if (s->measuring)
			s->st.phase_calls[ph]++;
		s->cur->stores_moved = false; /* stores outside a lock drain unseen */
	}
	seg_add(s, ct->term[kind], 1);
}

/* ---- counter sets ---- */

void al_sim_layer_begin(const char *layer)
{
	if (self)
		self->layer = layer;
}

static bool contention_only(const char *name)
{
	size_t n = strlen(name);
	static const char *const sfx[] = { "_contended", "_owner_switches" };

	for (unsigned i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		size_t m = strlen(sfx[i]);

		if (n >= m && !strcmp(name + n - m, sfx[i]))
			return true;
	}
	return false;
}

void al_sim_counters_add(struct al_counters *k)
{
	struct al_sim *s = self;
	struct ctrset *cs;
	char name[AL_SIM_NAME];
	const char *layer;

	if (!s || !k->v)
		return;
	cs = al_meta_alloc(sizeof(*cs));
	if (!cs)
		return;
	cs->k = k;
	cs->len = (size_t)k->nblocks * k->stride;
	cs->snap = al_meta_alloc(cs->len * sizeof(uint64_t));
	if (!cs->snap) {
		al_meta_free(cs, sizeof(*cs));
		return;
	}
	memcpy(cs->snap, k->v, cs->len * sizeof(uint64_t));
	layer = s->layer ? s->layer : "workload";
	cs->layer_term = (uint16_t)(term_find(s, layer) + 1);
	cs->n = k->n < sizeof(cs->feat) / sizeof(cs->feat[0])
			? k->n
			: sizeof(cs->feat) / sizeof(cs->feat[0]);
	for (unsigned i = 0; i < cs->n; i++) {
		const char *cn = k->descs ? k->descs[i].name : k->names ? k->names[i] : NULL;
		unsigned fl = k->descs ? k->descs[i].flags : 0;

		cs->feat[i] = -1;
		/* byte counts scale with the size asked for, not with the work */
		if (!cn || (fl & (AL_CTR_NS | AL_CTR_GAUGE)) || contention_only(cn) ||
		    strstr(cn, "bytes"))
			continue;
		snprintf(name, sizeof(name), "%s.%s", layer, cn);
		cs->feat[i] = term_find(s, name);
	}
	cs->next = s->sets;
	s->sets = cs;
}

void al_sim_counters_del(struct al_counters *k)
{
	struct al_sim *s = self;
	struct ctrset **pp, *cs;

	if (!s)
		return;
	for (pp = &s->sets; (cs = *pp); pp = &cs->next)
		if (cs->k == k) {
			*pp = cs->next;
			al_meta_free(cs->snap, cs->len * sizeof(uint64_t));
			al_meta_free(cs, sizeof(*cs));
			return;
		}
}

static void sets_resync(struct al_sim *s)
{
	for (struct ctrset *cs = s->sets; cs; cs = cs->next)
		if (cs->k->v)
			memcpy(cs->snap, cs->k->v, cs->len * sizeof(uint64_t));
}

/* ---- the engine's side ---- */

int al_sim_running(void)
{
	return __atomic_load_n(&sims_running, __ATOMIC_RELAXED);
}

/* An empty segment's timing cost: two back-to-back real clock reads. */
static double null_segment_ns(double tpn)
{
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < 2000; i++) {
		uint64_t a = real_ticks(), b = real_ticks();

		if (b - a < best)
			best = b - a;
	}
	return (double)best / tpn;
}

/* The process clock turns virtual (ticks are picoseconds) while any
 * simulation runs; returns the real clock's ticks per ns. */
static double clock_take(void)
{
	double tpn;

	al_clock_init();
	pthread_mutex_lock(&clock_mu);
	if (!sims_running++) {
		saved_ticks_per_ns = al_clock.ticks_per_ns;
		al_clock.ticks_per_ns = AL_SIM_TICKS_PER_NS;
		__atomic_store_n(&al_sim_active, 1, __ATOMIC_RELAXED);
	}
	tpn = saved_ticks_per_ns;
	pthread_mutex_unlock(&clock_mu);
	return tpn;
}

/* Simulations that track lines (not calibrations) running: al_sim_lines. */
static void lines_take(const struct al_sim *s, int delta)
{
	if (!s->cfg.calibrate)
		__atomic_fetch_add(&al_sim_lines, delta, __ATOMIC_RELAXED);
}

/* 0, or why a simulation cannot start with cfg here (in err). */
static int config_check(const struct al_sim_config *cfg, char *err, size_t errlen)
{
	if (!SIM_FIBERS) {
		snprintf(err, errlen, "simulated CPUs need an x86-64 or arm64 build");
		return -ENOTSUP;
	}
	if (!cfg->table) {
		snprintf(err, errlen, "simulated run without a cost table");
		return -EINVAL;
	}
	if (!(cfg->line_transfer_ns >= 0) || !(cfg->lines_per_handoff >= 0) ||
	    !(cfg->jitter >= 0 && cfg->jitter <= 4) ||
	    !(cfg->store_fraction >= 0 && cfg->store_fraction <= 1) ||
	    !(cfg->load_fraction >= 0 && cfg->load_fraction <= 1)) {
		snprintf(err, errlen,
			 "bad line_transfer_ns %g, lines_per_handoff %g, jitter %g, "
			 "store_fraction %g or load_fraction %g",
			 cfg->line_transfer_ns, cfg->lines_per_handoff, cfg->jitter,
			 cfg->store_fraction, cfg->load_fraction);
		return -EINVAL;
	}
	if (self) {
		snprintf(err, errlen, "a simulation already runs on this thread");
		return -EBUSY;
	}
	return 0;
}

int al_sim_new(const struct al_sim_config *cfg, unsigned ncpu, struct al_sim **out, char *err,
	       size_t errlen)
{
	struct al_sim *s;

	int rc;

	*out = NULL;
	if ((rc = config_check(cfg, err, errlen)))
		return rc;
	s = al_meta_alloc(sizeof(*s));
	if (!s)
		goto nomem;
	s->cfg = *cfg;
	s->t = cfg->table;
	s->ncpu = ncpu;
	s->nslots = ncpu + AL_SIM_DAEMONS;
	s->cpus = al_meta_alloc(sizeof(*s->cpus) * s->nslots);
	s->heap = al_meta_alloc(sizeof(*s->heap) * s->nslots);
	s->lines = al_meta_alloc(sizeof(*s->lines) * LINES);
	if (!s->cpus || !s->heap || !s->lines)
		goto nomem_free;
	s->rng = cfg->seed * 0xD1B54A32D192ED03ull + 1;

	for (unsigned i = 0; i < 2; i++) {
		s->phase_scale[i] = cfg->phase_scale[i] > 0 ? cfg->phase_scale[i] : 1.0;
		s->phase_offset_ps[i] = cfg->phase_offset_ns[i] * 1000.0;
	}
	s->line_ps = cfg->line_transfer_ns * 1000.0;
	s->handoff_ps = cfg->line_transfer_ns * cfg->lines_per_handoff * 1000.0;
	s->store_ps = s->line_ps * cfg->store_fraction;
	s->overlap_ps = s->line_ps * (cfg->load_fraction > 0 ? cfg->load_fraction : 1.0);
	s->real_tpn = clock_take();
	lines_take(s, 1);
	/* the table's known costs */
	for (unsigned i = 0; i < s->t->n && i < AL_SIM_FEATURES; i++) {
		s->known[i] = !isnan(s->t->cost_ns[i]) && s->t->cost_ns[i] >= 0;
		s->term_ps[i] = s->known[i] ? s->t->cost_ns[i] * 1000.0 : 0;
		s->t->seen[i] = 0;
	}
	self = s;
	for (int a = 0; a < AL_SIM_KIND_NR; a++)
		for (int b = 0; b < AL_SIM_KIND_NR; b++)
			s->seg_term[a][b] = -2; /* made when first met (seg_terms) */
	if (cfg->calibrate)
		s->t->null_ns = null_segment_ns(s->real_tpn);
	for (unsigned i = 0; i < s->nslots; i++) {
		s->cpus[i].id = i;
		s->cpus[i].heap_pos = -1;
		s->cpus[i].state = S_DONE;
	}
#ifdef SIM_TSAN
	s->main_fiber = __tsan_get_current_fiber();
#endif
	*out = s;
	return 0;
nomem_free:
	al_meta_free(s->cpus, sizeof(*s->cpus) * (ncpu + AL_SIM_DAEMONS));
	al_meta_free(s->heap, sizeof(*s->heap) * (ncpu + AL_SIM_DAEMONS));
	al_meta_free(s->lines, sizeof(*s->lines) * LINES);
	al_meta_free(s, sizeof(*s));
nomem:
	snprintf(err, errlen, "out of memory for the simulation");
	return -ENOMEM;
}

int al_sim_spawn(struct al_sim *s, unsigned cpu, void (*fn)(void *), void *arg, struct al_ctx *ctx)
{
	struct sim_cpu *c = &s->cpus[cpu];
	size_t len = (s->cfg.stack_kib ? s->cfg.stack_kib : 256) * 1024;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (m == MAP_FAILED)
		return -ENOMEM;
	mprotect(m, 4096, PROT_NONE); /* a guard page below the stack */
	c->stack = m;
	c->stack_len = len;
	c->fn = fn;
	c->arg = arg;
	c->ctx = ctx;
	c->state = S_PARKED;
	c->begin = AL_SIM_START;
	fiber_prepare(c);
#ifdef SIM_TSAN
	c->tsan_fiber = __tsan_create_fiber(0);
#endif
	return 0;
}

int al_sim_daemon(void *(*fn)(void *), void *arg, struct al_ctx *ctx)
{
	struct al_sim *s = self;
	struct sim_cpu *c;
	int ret;

	if (!s)
		return -ENOENT; /* this thread runs no simulation: use a thread */
	if (s->ndaemons >= AL_SIM_DAEMONS)
		return -EBUSY;
	c = &s->cpus[s->ncpu + s->ndaemons];
	ret = al_sim_spawn(s, s->ncpu + s->ndaemons, NULL, arg, ctx);
	if (ret)
		return ret;
	s->ndaemons++;
	c->dfn = fn;
	c->id = ctx->cpu; /* its model CPU: counter blocks, lock owners */
	c->daemon = true;
	c->state = S_RUNNABLE;
	c->now = s->cur ? s->cur->now : s->phase;
	s->nbusy++;
	heap_push(s, c);
	return 0;
}

void al_sim_sleep_on(const void *key, uint64_t ns)
{
	struct al_sim *s = self;
	struct sim_cpu *c;
	uint64_t until;

	if (!s)
		return;
	if (!(c = s->cur)) { /* the engine waits: run what is awake until it sleeps */
		run_next(s, NULL);
		return;
	}
	until = ns ? c->now + ns * 1000 : 0;
	c->sleeping = c->daemon;
	if (c->daemon)
		s->nbusy--; /* counted again when woken (wake_due, al_sim_lock_wake) */
	al_sim_lock_block(key, 0, until);
	c->sleeping = false;
}

void al_sim_wakeup(const void *key)
{
	struct al_sim *s = self;
	struct sim_cpu tmp;

	if (!s)
		return;
	if (s->cur) {
		al_sim_lock_wake(key, 0, true);
		return;
	}
	/* from the engine: as a CPU at the phase's time */
	memset(&tmp, 0, sizeof(tmp));
	tmp.now = s->phase;
	tmp.heap_pos = -1;
	s->cur = &tmp;
	al_sim_lock_wake(key, 0, true);
	s->cur = NULL;
}

void al_sim_join_daemons(void)
{
	struct al_sim *s = self;

	if (!s || s->cur || !s->ndaemons)
		return;
	s->joining = true;
	run_next(s, NULL);
	s->joining = false;
}

void al_sim_park(void)
{
	struct al_sim *s = self;
	struct sim_cpu *c;

	if (!s || !(c = s->cur))
		return;
	seg_end(s, c, AL_SIM_END);
	c->state = S_PARKED;
	s->nactive--;
	run_next(s, c);
}

int al_sim_step(struct al_sim *s, char *err, size_t errlen)
{
	uint64_t t = s->phase;
	unsigned i, blocked = 0;

	if (s->deadlock)
		return -EDEADLK;
	for (i = 0; i < s->ncpu; i++)
		if (s->cpus[i].state == S_PARKED && s->cpus[i].now > t)
			t = s->cpus[i].now;
	s->phase = t;
	sets_resync(s);
	for (i = 0; i < s->ncpu; i++) {
		struct sim_cpu *c = &s->cpus[i];

		if (c->state != S_PARKED)
			continue;
		c->now = t;
		c->cycle_start = t;
		c->begin = AL_SIM_START;
		c->state = S_RUNNABLE;
		if (s->cfg.calibrate)
			c->seg_tsc = real_ticks();
		heap_push(s, c);
		s->nactive++;
	}
	run_next(s, NULL);
	/* every fiber is parked, done, or blocked for good */
	for (i = 0; i < s->ncpu; i++) {
		struct sim_cpu *c = &s->cpus[i];

		if (c->state == S_BLOCKED && !c->daemon)
			blocked++;
		if (c->state == S_PARKED && c->now > s->phase)
			s->phase = c->now;
		if (c->state == S_DONE && c->now > s->phase)
			s->phase = c->now;
	}
	if (blocked) {
		s->deadlock = true;
		snprintf(err, errlen,
			 "simulated deadlock: %u model CPUs wait on locks no CPU will release",
			 blocked);
		return -EDEADLK;
	}
	return 0;
}

void al_sim_measuring(struct al_sim *s, bool on)
{
	s->measuring = on;
	if (!on)
		s->st.virtual_ns = (double)s->phase / 1000.0;
}

uint64_t al_sim_now_ps(const struct al_sim *s)
{
	return s->phase;
}

void al_sim_get_stats(const struct al_sim *s, struct al_sim_stats *out)
{
	*out = s->st;
	out->uncalibrated_terms = 0;
	for (unsigned i = 0; i < s->t->n; i++)
		if (s->t->seen[i] && !s->known[i] && !s->cfg.calibrate)
			out->uncalibrated_terms++;
}

void al_sim_free(struct al_sim *s)
{
	struct ctrset *cs;

	if (!s)
		return;
	for (unsigned i = 0; i < s->nslots; i++) {
		struct sim_cpu *c = &s->cpus[i];

		if (c->stack && !s->deadlock) {
#ifdef SIM_ASAN
			/* the fiber's frames poisoned its shadow: a later mapping
			 * at these addresses must not inherit it */
			__asan_unpoison_memory_region(c->stack, c->stack_len);
#endif
			munmap(c->stack, c->stack_len);
		}
#ifdef SIM_TSAN
		if (c->tsan_fiber && !s->deadlock)
			__tsan_destroy_fiber(c->tsan_fiber);
#endif
	}
	while ((cs = s->sets)) {
		s->sets = cs->next;
		al_meta_free(cs->snap, cs->len * sizeof(uint64_t));
		al_meta_free(cs, sizeof(*cs));
	}
	if (self == s)
		self = NULL;
	lines_take(s, -1);
	pthread_mutex_lock(&clock_mu);
	if (!--sims_running) {
		al_clock.ticks_per_ns = saved_ticks_per_ns;
		__atomic_store_n(&al_sim_active, 0, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&clock_mu);
	if (s->objs)
		al_meta_free(s->objs, sizeof(*s->objs) * s->obj_cap);
	al_meta_free(s->lines, sizeof(*s->lines) * LINES);
	al_meta_free(s->heap, sizeof(*s->heap) * s->nslots);
	al_meta_free(s->cpus, sizeof(*s->cpus) * s->nslots);
	al_meta_free(s, sizeof(*s));
}

/* ---- line transfer calibration ---- */

struct pingpong {
	uint64_t word __attribute__((aligned(64)));
	unsigned rounds;
	int cpu;
};

static void *pong_main(void *arg)
{
	struct pingpong *p = arg;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(p->cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	for (uint64_t i = 1; i <= 2ull * p->rounds; i += 2) {
		while (__atomic_load_n(&p->word, __ATOMIC_ACQUIRE) != i)
			al_cpu_relax();
		__atomic_store_n(&p->word, i + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

double al_sim_pingpong_ns(unsigned rounds)
{
	struct pingpong p = { .word = 0, .rounds = rounds };
	cpu_set_t saved, set;
	int a = al_cpu_nth(0), b = al_cpu_nth(1);
	pthread_t th;
	uint64_t t0, t1;

	if (al_cpus_usable() < 2 || a < 0 || b < 0 || a == b)
		return -ENODEV;
	if (pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved))
		return -errno;
	p.cpu = b;
	if (pthread_create(&th, NULL, pong_main, &p))
		return -EAGAIN;
	CPU_ZERO(&set);
	CPU_SET(a, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	al_clock_init();
	t0 = al_mono_ns();
	for (uint64_t i = 0; i < 2ull * rounds; i += 2) {
		__atomic_store_n(&p.word, i + 1, __ATOMIC_RELEASE);
		while (__atomic_load_n(&p.word, __ATOMIC_ACQUIRE) != i + 2)
			al_cpu_relax();
	}
	t1 = al_mono_ns();
	pthread_join(th, NULL);
	pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
	return (double)(t1 - t0) / (2.0 * rounds);
}

/*
 * The coherence probe: two real CPUs take turns on `lines` lines (128 bytes
 * apart, so that an adjacent-line prefetch fetches none of them). In each
 * round the other CPU writes them and this one times a stream of stores
 * into them (store_ns: a store's share of a transfer); the other writes
 * them again and this one times independent loads of them in a scrambled
 * order (load_ns: a load's share when loads overlap); then this CPU writes a
 * chain through them, the other CPU reads each, and this one times
 * following the chain (reread_ns: dependent loads, a whole transfer each
 * where the other's read took the line). The median of the rounds: a vCPU
 * descheduled inflates a round, and a round where the hardware kept a copy
 * anyway deflates one.
 */
struct probe {
	char *buf;
	unsigned lines, rounds;
	int cpu;
	unsigned turn __attribute__((aligned(64))); /* 1: the other CPU's turn */
	unsigned step;				    /* 0: write the lines, 1: read them */
	uint64_t sink, other_sink; /* what the loads read (kept, so they are made) */
	uint64_t drain;		   /* this CPU's read-modify-write after its stores */
};

#define PROBE_STRIDE 128

static void *probe_other(void *arg)
{
	struct probe *p = arg;
	cpu_set_t set;
	uint64_t sink = 0;

	CPU_ZERO(&set);
	CPU_SET(p->cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	for (unsigned r = 0; r < 3 * p->rounds; r++) {
		while (!__atomic_load_n(&p->turn, __ATOMIC_ACQUIRE))
			al_cpu_relax();
		for (unsigned i = 0; i < p->lines; i++) {
			volatile uint64_t *w =
				(volatile uint64_t *)(p->buf + (size_t)i * PROBE_STRIDE);

			if (p->step == 0)
				*w = r + i;
			else
				sink += *w;
		}
		__atomic_store_n(&p->turn, 0, __ATOMIC_RELEASE);
	}
	p->other_sink = sink;
	return NULL;
}

static void probe_hand(struct probe *p, unsigned step)
{
	p->step = step;
	__atomic_store_n(&p->turn, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&p->turn, __ATOMIC_ACQUIRE))
		al_cpu_relax();
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The rounds' median of each timing (st, rr: `rounds` slots each). */
static void probe_rounds(struct probe *p, uint64_t *st, uint64_t *ld, uint64_t *rr,
			 double *store_ns, double *load_ns, double *reread_ns)
{
	uint64_t sum = 0;

	for (unsigned r = 0; r < p->rounds; r++) {
		uint64_t t0;
		char *q;

		probe_hand(p, 0); /* the other CPU writes the lines */
		t0 = al_mono_ns();
		for (unsigned i = 0; i < p->lines; i++)
			*(volatile uint64_t *)(p->buf + (size_t)i * PROBE_STRIDE) = r;
		/* a locked read-modify-write drains the store buffer: the
		 * stores are done (a fence would do, but ThreadSanitizer
		 * builds refuse fences) */
		__atomic_fetch_add(&p->drain, 1, __ATOMIC_SEQ_CST);
		st[r] = al_mono_ns() - t0;
		probe_hand(p, 0); /* again, then independent loads of them */
		t0 = al_mono_ns();
		for (unsigned i = 0; i < p->lines; i++)
			sum += *(volatile uint64_t *)(p->buf +
						      (size_t)((5 * i + 1) & (p->lines - 1)) *
							      PROBE_STRIDE);
		ld[r] = al_mono_ns() - t0;
		/* a chain through every line in an order no prefetcher follows:
		 * x -> 5x + 1 mod lines (a full period: lines is a power of two) */
		for (unsigned i = 0; i < p->lines; i++)
			*(char *volatile *)(p->buf + (size_t)i * PROBE_STRIDE + 8) =
				p->buf + (size_t)((5 * i + 1) & (p->lines - 1)) * PROBE_STRIDE;
		probe_hand(p, 1); /* the other CPU reads them */
		q = p->buf;
		t0 = al_mono_ns();
		for (unsigned i = 0; i < p->lines; i++)
			q = *(char *volatile *)(q + 8);
		rr[r] = al_mono_ns() - t0;
		p->sink += (uintptr_t)q;
	}
	qsort(st, p->rounds, sizeof(*st), cmp_u64);
	qsort(rr, p->rounds, sizeof(*rr), cmp_u64);
	qsort(ld, p->rounds, sizeof(*ld), cmp_u64);
	p->sink += sum;
	*store_ns = (double)st[p->rounds / 2] / p->lines;
	*load_ns = (double)ld[p->rounds / 2] / p->lines;
	*reread_ns = (double)rr[p->rounds / 2] / p->lines;
}

int al_sim_coherence_probe(unsigned lines, unsigned tries, double *store_ns, double *load_ns,
			   double *reread_ns)
{
	struct probe p = { .lines = lines, .rounds = tries };
	int a = al_cpu_nth(0), b = al_cpu_nth(1);
	size_t len = (size_t)lines * PROBE_STRIDE;
	cpu_set_t saved, set;
	uint64_t *times;
	pthread_t th;

	if (lines < 2 || (lines & (lines - 1)) || lines > (1u << 16) || !tries ||
	    tries > (1u << 16) || !store_ns || !load_ns || !reread_ns)
		return -EINVAL;
	if (al_cpus_usable() < 2 || a < 0 || b < 0 || a == b)
		return -ENODEV;
	if (pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved))
		return -errno;
	len += 3 * (size_t)tries * sizeof(uint64_t); /* the rounds' timings, after the lines */
	p.buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p.buf == MAP_FAILED)
		return -ENOMEM;
	times = (uint64_t *)(p.buf + (size_t)lines * PROBE_STRIDE);
	p.cpu = b;
	if (pthread_create(&th, NULL, probe_other, &p)) {
		munmap(p.buf, len);
		return -EAGAIN;
	}
	CPU_ZERO(&set);
	CPU_SET(a, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	al_clock_init();
	probe_rounds(&p, times, times + tries, times + 2 * (size_t)tries, store_ns, load_ns,
		     reread_ns);
	pthread_join(th, NULL);
	pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
	munmap(p.buf, len);
	return 0;
}
