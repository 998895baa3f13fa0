/* SPDX-License-Identifier: MIT */
/*
 * nolock: kmalloc_nolock() / kfree_nolock() (reference §3.8-§3.9), a front
 * layer over `slab` (either form) or `sheaves > slab(form=sheaves)`.
 *
 * kmalloc_nolock(size): one call below with AL_NOSPIN (every lock is a
 *   trylock; in NMI a cache whose local lock is held is skipped) and
 *   AL_NOTRACE (6.18's kmalloc_nolock does not fire the kmalloc tracepoint;
 *   `trace=true` makes it). When it fails with -EBUSY, retry ONCE with
 *   size = class size + 1, i.e. in the next kmalloc class, whose locks are
 *   independent; a second failure returns NULL (counted). No large kmalloc:
 *   above 8 KiB is NULL.
 * kfree_nolock(p): free below with AL_NOSPIN. The layer below refuses
 *   (-EBUSY) what it cannot do without spinning: slab (cpu_slab form) when
 *   the object's slab is not the CPU slab (6.18's defer_free), sheaves when
 *   its trylock fails or it would need the barn lock, a flush or a new
 *   sheaf. Refused objects are pushed on the CPU's lock-free deferred list
 *   (a CAS push through the object's first word, NMI-safe) and the CPU's
 *   irq_work is queued; the irq_work (free_deferred_objects) takes the whole
 *   list with one exchange and frees each object through the slow path
 *   (__slab_free, never a CPU freelist or sheaf), where spinning is allowed:
 *   AL_SLOWPATH when it runs on the CPU (inline: the CPU's partial slab list
 *   may take the slab, as in the kernel), AL_NOCPU from the helper thread.
 * The irq_work runs at the end of this layer's next top-level operation on
 * that CPU, entered through a self-IPI that costs what an interrupt costs
 * here (irq_work=ipi, the default, as the kernel raises it) or at no cost
 * (irq_work=inline), or on a helper thread (irq_work=thread).
 *
 * Invariants: every object on a deferred list is live in the layer below
 * (bytes_held below includes them) and is freed by the next drain; this
 * layer's bytes_held counts objects handed out and not yet freed by the
 * caller (a deferred free is a free).
 * ASan (core/track.h): a deferred object's body (all but its first word, the
 * list link, which is read and written racily) is poisoned while it waits.
 * Cost: one extra call level and, per allocation, a usable_size lookup for
 * the byte accounting (the kernel's post-alloc hooks read the slab too).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kmalloc.h"

#include "../core/track.h"

enum { P_irq_work, P_trace, P_NR };

#define DEFER_WALK_CHEAP 4096 /* deferred-list steps before the cycle bound is read */

static const struct al_param_desc nolock_params[P_NR] = {
	[P_irq_work] = { "irq_work", AL_PARAM_ENUM, AL_IRQ_WORK_IPI, 0, 3, AL_IRQ_WORK_CHOICES,
			 "where the deferred-free irq_work runs: at the end of the top-level "
			 "operation, entered through a self-IPI as the kernel does (ipi: a "
			 "kernel entry; signal: a self-signal, an upper bound) or at no cost "
			 "(inline), or on a helper thread (PREEMPT_RT)" },
	[P_trace] = { "trace", AL_PARAM_BOOL, 0, 0, 1, NULL,
		      "kmalloc_nolock fires the kmalloc tracepoint (6.18: it does not)" },
};

/*
 * allocs, bytes_allocated, bytes_freed and corrupt_lists are kept at every
 * stats level (al_ctr_block_acct): bytes_held is made of the bytes, allocs
 * bounds the deferred-list walks that detect a cycle, and check() reports
 * corrupt_lists. A free adds to its kind
 * (direct or deferred) and its bytes; frees is their sum.
 */
#define NOLOCK_COUNTERS(C, D, P)                                                            \
	C(P, allocs, AL_CTR_KEY, "kmalloc_nolock calls that returned memory")               \
	D(P, frees, AL_CTR_KEY, "frees_direct+frees_deferred", "kfree_nolock calls")        \
	C(P, retries, AL_CTR_KEY, "allocations retried in the next size class (-EBUSY)")    \
	C(P, retry_ok, 0, "retries that returned memory")                                   \
	C(P, alloc_failed, AL_CTR_KEY, "kmalloc_nolock calls that returned NULL")           \
	C(P, frees_direct, 0, "frees the layer below took at once")                         \
	C(P, frees_deferred, AL_CTR_KEY,                                                    \
	  "frees pushed on the deferred list (trylock or not the CPU slab)")                \
	C(P, deferred_freed, 0, "deferred objects freed by the irq_work")                   \
	C(P, deferred_requeued, 0, "deferred objects the irq_work could not free yet")      \
	C(P, deferred_refused, 0, "deferred objects the layer below refused (freed twice)") \
	C(P, double_frees, AL_CTR_KEY,                                                      \
	  "frees refused: the object is already the deferred list's head")                  \
	C(P, corrupt_lists, AL_CTR_KEY,                                                     \
	  "deferred lists found cyclic (a double free): the rest leaked")                   \
	C(P, einval, 0, "allocations rejected: size 0 or above 8 KiB")                      \
	C(P, bytes_allocated, 0, "usable bytes handed out")                                 \
	C(P, bytes_freed, 0, "usable bytes taken back")                                     \
	D(P, nmi_frees_deferred, 0, "", "frees deferred at NMI level")                      \
	D(P, deferred_pending, AL_CTR_GAUGE, "", "objects on the deferred lists")           \
	AL_DEFER_COUNTERS(D, P)

AL_COUNTERS_DEFINE(NOLOCK_COUNTERS, NOLK_, nolock_counters);

struct nolock;

struct nolock_cpu {
	void *deferred;		 /* lock-free list of deferred objects (first word links) */
	struct al_irq_work work; /* free_deferred_objects for this CPU */
	struct nolock *nl;	 /* back pointer for the irq_work */
} __attribute__((aligned(AL_CACHELINE)));

struct nolock {
	struct al_allocator base; /* must be first */
	struct al_defer *defer;	  /* irq_work domain */
	struct nolock_cpu *cpus;  /* ncpu entries */
	size_t cpus_len;	  /* bytes of cpus[] */
	unsigned trace_flag;	  /* 0, or AL_NOTRACE */
	unsigned drain_flag;	  /* how the irq_work frees: AL_SLOWPATH on the CPU (inline),
				   * AL_NOCPU beside it (thread) */
	struct al_counters ctr;	  /* NOLOCK_COUNTERS */
};

static inline struct nolock *to_nl(struct al_allocator *a)
{
	return (struct nolock *)a;
}

static inline size_t usable(struct al_allocator *below, const void *p)
{
	return below->ops->usable_size ? below->ops->usable_size(below, p) : 0;
}

static void *nolock_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct nolock *nl = to_nl(a);
	struct al_allocator *below = a->below;
	unsigned f = (flags & (AL_ZERO | AL_NOCPU | AL_ACCOUNT)) | AL_NOSPIN | nl->trace_flag;
	int ci = km_class(size);
	void *p;

	if (al_unlikely(ci < 0)) {
		al_count(&nl->ctr, c, NOLK_einval, 1);
		c->err = -EINVAL;
		return NULL;
	}
	p = al_alloc(below, c, size, f);
	if (al_unlikely(!p) && c->err == -EBUSY && ci + 1 < KM_NR_CLASSES) {
		/* the next kmalloc bucket: its locks are independent */
		al_count(&nl->ctr, c, NOLK_retries, 1);
		c->err = 0;
		p = al_alloc(below, c, km_class_size[ci] + 1, f);
		if (p)
			al_count(&nl->ctr, c, NOLK_retry_ok, 1);
	}
	if (al_unlikely(!p)) {
		al_count(&nl->ctr, c, NOLK_alloc_failed, 1);
		if (!c->err)
			c->err = -ENOMEM;
	} else {
		uint64_t *b = al_ctr_block_acct(&nl->ctr, c);

		al_ctr_add(b, NOLK_allocs, 1);
		al_ctr_add(b, NOLK_bytes_allocated, usable(below, p));
	}
	al_defer_poll(nl->defer, c);
	return p;
}

/* A deferred object's body, after its link word: poisoned while it waits on
 * a deferred list, exposed again for the free below (ASan only). */
static inline void defer_track(struct nolock *nl, void *p, bool poison)
{
#ifdef AL_TRACK_ASAN
	size_t n = usable(nl->base.below, p);

	if (n <= sizeof(void *))
		return;
	if (poison)
		al_track_poison((char *)p + sizeof(void *), n - sizeof(void *));
	else
		al_track_unpoison((char *)p + sizeof(void *), n - sizeof(void *));
#else
	(void)nl;
	(void)p;
	(void)poison;
#endif
}

/* Push p on a CPU's deferred list; -EINVAL, nothing written, when p is
 * already its head (the same object deferred twice in a row). */
static int defer_free(struct nolock *nl, struct al_ctx *c, unsigned cpu, void *p)
{
	struct nolock_cpu *nc = &nl->cpus[cpu];
	void *old = __atomic_load_n(&nc->deferred, __ATOMIC_RELAXED);

	/* The link lives in the object's first word: a backend may keep bytes
	 * past a small request poisoned (buddy unpoisons exactly the request).
	 * The body is poisoned before the push publishes it (a helper thread
	 * may take and free it at once); a refused p is already on the list. */
	al_track_unpoison(p, sizeof(void *));
	defer_track(nl, p, true);
	do {
		if (al_unlikely(old == p))
			return -EINVAL;
		*(void **)p = old;
	} while (!__atomic_compare_exchange_n(&nc->deferred, &old, p, true, __ATOMIC_RELEASE,
					      __ATOMIC_RELAXED));
	al_irq_work_queue(nl->defer, &nc->work, c);
	return 0;
}

static int nolock_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct nolock *nl = to_nl(a);
	struct al_allocator *below = a->below;
	uint64_t *acct;
	size_t n;
	int ret;

	if (!p)
		return 0;
	n = usable(below, p);
	if (al_unlikely(!n))
		return al_free(below, c, p); /* not a live object below: it says why */
	ret = al_free_flags(below, c, p, AL_NOSPIN);
	acct = al_ctr_block_acct(&nl->ctr, c);
	if (al_likely(!ret)) {
		al_ctr_add(al_counters_on(&nl->ctr) ? acct : NULL, NOLK_frees_direct, 1);
	} else if (ret == -EBUSY) {
		if (al_unlikely(defer_free(nl, c, c->cpu, p))) {
			al_count(&nl->ctr, c, NOLK_double_frees, 1);
			return -EINVAL;
		}
		al_count(&nl->ctr, c, NOLK_frees_deferred, 1);
	} else {
		return ret; /* not an object of the layer below: untouched */
	}
	al_ctr_add(acct, NOLK_bytes_freed, n);
	al_defer_poll(nl->defer, c);
	return 0;
}

/* free_deferred_objects: the irq_work of one CPU. */
static void drain_deferred(struct al_irq_work *w, struct al_ctx *x)
{
	struct nolock_cpu *nc =
		(struct nolock_cpu *)((char *)w - offsetof(struct nolock_cpu, work));
	struct nolock *nl = nc->nl;
	void *p = __atomic_exchange_n(&nc->deferred, NULL, __ATOMIC_ACQUIRE), *next;
	uint64_t steps = 0, bound = 0;
	int ret;

	for (; p; p = next) {
		/* Every deferred object was handed out by this layer, so a list
		 * longer than its allocations so far is cyclic: the bound is read
		 * only once the walk is long, so a short list costs nothing. */
		if (al_unlikely(++steps > DEFER_WALK_CHEAP)) {
			if (!bound)
				bound = al_counters_sum(&nl->ctr, NOLK_allocs) + DEFER_WALK_CHEAP;
			if (steps > bound) {
				/* kept at every stats level: check() reports it */
				al_ctr_add(al_ctr_block_acct(&nl->ctr, x), NOLK_corrupt_lists, 1);
				return;
			}
		}
		next = *(void **)p;
		defer_track(nl, p, false);
		ret = al_free_flags(nl->base.below, x, p, nl->drain_flag);
		if (!ret) {
			al_count(&nl->ctr, x, NOLK_deferred_freed, 1);
		} else if (ret == -EINVAL) { /* already free below: drop it */
			al_count(&nl->ctr, x, NOLK_deferred_refused, 1);
		} else { /* a lock failed (budget, or a helper beside its CPU): later */
			al_count(&nl->ctr, x, NOLK_deferred_requeued, 1);
			if (defer_free(nl, x, w->cpu, p))
				al_count(&nl->ctr, x, NOLK_deferred_refused, 1);
		}
	}
}

static void nolock_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	al_defer_flush(to_nl(a)->defer, c, scope);
}

static void nolock_stats(struct al_allocator *a, struct al_stats *out)
{
	struct nolock *nl = to_nl(a);

	out->bytes_held = (int64_t)(al_counters_sum(&nl->ctr, NOLK_bytes_allocated) -
				    al_counters_sum(&nl->ctr, NOLK_bytes_freed));
	if (!al_counters_on(&nl->ctr))
		return;
	al_counters_report(&nl->ctr, out);
	/* the share of NMI frees deferred, as the nmi workload reports it */
	al_stats_add(out, "nmi_frees_deferred",
		     al_counters_sum_level(&nl->ctr, NOLK_frees_deferred, AL_CTX_NMI));
	al_defer_report(nl->defer, out);
	al_stats_add_gauge(out, "deferred_pending",
			   al_counters_sum(&nl->ctr, NOLK_frees_deferred) -
				   al_counters_sum(&nl->ctr, NOLK_deferred_freed) -
				   al_counters_sum(&nl->ctr, NOLK_deferred_refused));
}

static int nolock_check(struct al_allocator *a, char *err, size_t errlen)
{
	struct nolock *nl = to_nl(a);
	uint64_t n, bound = al_counters_sum(&nl->ctr, NOLK_allocs),
		    bad = al_counters_sum(&nl->ctr, NOLK_corrupt_lists);
	unsigned cpu;
	void *p;

	if (bad) {
		snprintf(err, errlen, "%llu deferred lists were found cyclic (a double free)",
			 (unsigned long long)bad);
		return -EFAULT;
	}
	for (cpu = 0; cpu < a->ncpu; cpu++)
		for (n = 0, p = nl->cpus[cpu].deferred; p; p = *(void **)p)
			if (++n > bound || !usable(a->below, p)) {
				snprintf(
					err, errlen,
					"cpu %u: deferred object %p is not live below (or a cycle)",
					cpu, p);
				return -EFAULT;
			}
	return 0;
}

/* Free what init made; a part not made yet is skipped. */
static void nolock_fini(struct al_allocator *a)
{
	struct nolock *nl = to_nl(a);

	al_defer_destroy(nl->defer); /* frees what is still deferred, while below exists */
	al_counters_fini(&nl->ctr);
	al_meta_free(nl->cpus, nl->cpus_len);
}

static int nolock_init(struct al_allocator *a, const int64_t *p)
{
	struct nolock *nl = to_nl(a);
	struct al_allocator *below = a->below;
	unsigned ncpu = a->ncpu;
	struct al_defer_params dp = { .irq_mode = (int)p[P_irq_work] };
	unsigned cpu;
	int ret;

	if (!below)
		return -EINVAL;
	nl->trace_flag = p[P_trace] ? 0 : AL_NOTRACE;
	nl->drain_flag = p[P_irq_work] == AL_IRQ_WORK_THREAD ? AL_NOCPU : AL_SLOWPATH;
	nl->cpus_len = sizeof(struct nolock_cpu) * ncpu;
	nl->cpus = al_meta_alloc(nl->cpus_len);
	ret = -ENOMEM;
	if (!nl->cpus || al_counters_init_desc(&nl->ctr, nolock_counters, NOLK_NR, 0, ncpu))
		return ret;
	ret = al_defer_create(ncpu, &dp, &nl->defer);
	if (ret)
		return ret;
	for (cpu = 0; cpu < ncpu; cpu++) {
		nl->cpus[cpu].nl = nl;
		al_irq_work_init(&nl->cpus[cpu].work, cpu, drain_deferred);
	}
	return 0;
}

AL_LAYER(nolock, struct nolock, nolock_init, nolock_fini,
	 (.alloc = nolock_alloc, .free = nolock_free, .owns = al_below_owns,
	  .usable_size = al_below_usable_size, .drain = nolock_drain, .stats = nolock_stats,
	  .check = nolock_check),
	 (.doc = "kmalloc_nolock/kfree_nolock: trylocks only, one retry in the next size class, "
		 "refused frees deferred to a per-CPU lock-free list drained by irq_work",
	  .features = AL_F_BACKEND | AL_F_OWNS_BELOW | AL_F_NEEDS_DISTINCT | AL_F_OWNS |
		      AL_F_USABLE | AL_F_TRYLOCK | AL_F_NMI_SAFE | AL_F_NMI_SHIELD,
	  .max_size = KM_MAX_SIZE, .nparams = P_NR, .params = nolock_params,
	  .counters = nolock_counters, .ncounters = NOLK_NR))
