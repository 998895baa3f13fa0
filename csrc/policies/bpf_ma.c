/* SPDX-License-Identifier: MIT */
/*
 * bpf_ma: the BPF memory allocator, bpf_mem_alloc (reference §2), a front
 * layer over `slab` (its kmalloc).
 *
 * Modes
 * -----
 * mode=any (bpf_mem_alloc_init(ma, 0)): 11 caches per CPU, unit sizes
 *   {96, 192, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096} including the
 *   8-byte header; the bucket of (size + 8) comes from the kernel's 24-entry
 *   table up to 192 and from fls above, so the largest request is 4088.
 * mode=fixed (bpf_mem_alloc_init(ma, size)): one cache per CPU of unit
 *   size + 8. unit=N makes one such instance for requests up to N; unit=0
 *   makes one instance per distinct request size at its first allocation
 *   (up to 8), as a map creates one bpf_mem_alloc per object type: local
 *   storage's selem_ma and storage_ma are two.
 *
 * Per CPU cache (struct ma_cache)
 * -------------------------------
 * free_llist (a LIFO used non-atomically under `active`), free_cnt, the
 * `active` counter (local_t: an NMI or signal handler arriving while it is
 * held sees active > 1), free_llist_extra (an atomic list for reentrant
 * frees), low/high watermarks and batch (32/96/48 up to 256 B, scaled by
 * 256/unit above: 16/48/24, 8/24/12, 4/12/6, 2/6/3), a refill irq_work,
 * `tgt` (owner of the last freed object) and the return-to-slab lists.
 * Every object carries an 8-byte header: a link while free, the owning
 * cache while allocated; callers get obj + 8.
 *
 * unit_alloc: if ++active == 1, pop and store the cache in the header; else
 *   NULL (reentrancy: -EBUSY). An empty cache returns NULL with -EAGAIN: a
 *   refusal by design, the refill is queued and a retry will find objects;
 *   -ENOMEM only when the cache's last refill got nothing from the layer
 *   below (exhaustion). No instance left for a size (unit=0): -ENOSPC. --active. If the count left
 * is below low, queue the refill irq_work (a failed reentrant attempt counts 0, so it queues one
 * too). No synchronous refill: an empty cache returns NULL, except for an AL_MAYSLEEP caller
 * (bpf_mem_cache_alloc_flags(GFP_KERNEL)), which gets a direct kmalloc from the layer below.
 * unit_free: into the CURRENT CPU's cache of the same bucket; tgt = owner;
 *   if ++active == 1 push and count, else push on the atomic extra list; if
 *   the count is above high, queue the irq_work.
 * irq_work (bpf_mem_refill): below low, alloc_bulk(batch): objects from
 *   free_by_rcu_ttrace, then waiting_for_gp_ttrace, then kmalloc of the unit
 *   size below (one traced call per object, as kmalloc_node, AL_ACCOUNT: the
 *   memcg is charged per refilled object, never per allocation), each added
 *   under active. Above high, free_bulk: pop to tgt's free_by_rcu_ttrace
 *   while the count is above (high + low) / 2, move the extra list there
 *   too, then do_call_rcu_ttrace(tgt): unless a grace period is already in
 *   flight for tgt, move its list to waiting_for_gp_ttrace and
 *   call_rcu_tasks_trace; after that grace period __free_rcu_tasks_trace
 *   kfrees them into the layer below at once, since rcu_trace_implies_rcu_gp()
 *   is true (the tasks-trace GP waits for a plain one), or, with
 *   ttrace_chain=1 (as if it were false), chains a call_rcu and kfrees after
 *   that plain GP too. The tasks-trace GP is the domain's (deferred.h):
 *   ttrace=classic (the default: kernel/rcu/tasks.h before SRCU-fast, the
 *   seeds' kernels) waits for the lazy timer (ttrace_lazy_ms, default
 *   DIV_ROUND_UP(hz, 4) jiffies), checks every CPU, IPIs every other one,
 *   waits a plain GP and two holdout sleeps of hz/200 jiffies; ttrace=srcu
 *   (v7.0, SRCU-fast) two counter scans of every CPU with a plain GP each,
 *   a jiffy before and after; ttrace=plain one plain GP of gp_latency. Until
 *   then the objects stay reusable by alloc_bulk (waiting_for_gp_ttrace).
 * Prefill: 4 objects per cache up to 256 B, else 1, at the cache's first
 *   allocation (and again after a drain, which returns everything).
 *
 * Invariants (bpf_ma_check): free_cnt equals the length of free_llist;
 * every cached object is live below and its header is not a cache (free);
 * bytes_held counts unit sizes handed out and not freed.
 *
 * Concurrency: each CPU's cache is used by its own thread and its signal
 * handlers, guarded by `active` (a plain counter: nested contexts restore it,
 * so a load/store pair interrupted by one loses nothing). irq_work=thread
 * runs refills and trims on a helper thread: `active` becomes an atomic RMW
 * and the helper waits for it, worker operations that meet the helper fail
 * fast as reentrant ones do, and the helper calls below with AL_NOCPU.
 * The lists other CPUs touch (extra, the ttrace lists) are lock-free stacks:
 * pushes and delete-all by anyone, delete-first only by the owner (inside
 * its irq_work, an RCU read-side section, so no GP can recycle a node
 * under it: ABA-safe as the kernel argues).
 * ASan (core/track.h): a cached object's body (all but the header word) is
 * poisoned from the free or refill that caches it to the allocation or the
 * free below that takes it out. The header stays readable: llist_del_first
 * reads the link of a node another context may have taken meanwhile, and a
 * free reads the owner of the object it is given.
 * Cost: a hit is two stores to `active`, a pop and a header store.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "alloclab/alloclab.h"

#include "../core/track.h"

#define MA_HDR	      8 /* LLIST_NODE_SZ */
#define MA_NR_BUCKETS 11
#define MA_MAX_INST   8
#define MA_ANY_MAX    (4096 - MA_HDR)
#define MA_FIXED_MAX  (8192 - MA_HDR)

static const unsigned ma_unit[MA_NR_BUCKETS] = { 96,  192, 16,	 32,   64,  128,
						 256, 512, 1024, 2048, 4096 };
static const uint8_t ma_size_index[24] = { 3, 3, 4, 4, 5, 5, 5, 5, 1, 1, 1, 1,
					   6, 6, 6, 6, 2, 2, 2, 2, 2, 2, 2, 2 };

enum { M_ANY = 0, M_FIXED = 1 };
#define MODE_CHOICES "any,fixed"

enum {
	P_mode,
	P_unit,
	P_irq_work,
	P_gp_latency,
	P_ttrace,
	P_hz,
	P_ttrace_lazy_ms,
	P_ttrace_chain,
	P_NR
};

static const struct al_param_desc bpf_ma_params[P_NR] = {
	[P_mode] = { "mode", AL_PARAM_ENUM, M_ANY, 0, 1, MODE_CHOICES,
		     "any: 11 size buckets per CPU; fixed: one cache per CPU per object size" },
	[P_unit] = { "unit", AL_PARAM_SIZE, 0, 0, MA_FIXED_MAX, NULL,
		     "fixed mode: the object size (unit = size + 8); 0: one instance per "
		     "distinct request size (local storage: elements and storage structs)" },
	[P_irq_work] = { "irq_work", AL_PARAM_ENUM, AL_IRQ_WORK_IPI, 0, 3, AL_IRQ_WORK_CHOICES,
			 "where refill and trim run: at the end of the top-level operation, "
			 "entered through a self-IPI as the kernel does (ipi: a kernel "
			 "entry; signal: a self-signal, an upper bound) or at no cost "
			 "(inline), or on a helper thread (PREEMPT_RT)" },
	[P_gp_latency] = { "gp_latency", AL_PARAM_NS, 0, 0, 10000000000ll, NULL,
			   "a plain RCU grace period lasts at least this long (ttrace=plain: "
			   "the one trimmed objects wait for)" },
	[P_ttrace] = { "ttrace", AL_PARAM_ENUM, AL_TTRACE_CLASSIC, 0, 2, AL_TTRACE_CHOICES,
		       "RCU Tasks Trace grace period of trimmed objects: classic (tasks.h: lazy "
		       "timer, per-CPU holdouts, IPIs, a plain GP), srcu (SRCU-fast: two counter "
		       "scans with a plain GP each), plain (one plain GP)" },
	[P_hz] = { "hz", AL_PARAM_INT, AL_TTRACE_HZ_DEFAULT, 100, 10000, NULL,
		   "CONFIG_HZ of the tasks-trace timing (lazy timer, holdout sleeps, SRCU "
		   "delays are in jiffies); 250 is Kconfig's default" },
	[P_ttrace_lazy_ms] = { "ttrace_lazy_ms", AL_PARAM_INT, -1, -1, 60000, NULL,
			       "classic: rcupdate.rcu_tasks_trace_lazy_ms; -1: DIV_ROUND_UP(hz, 4) "
			       "jiffies, 0: no batching (a GP at once)" },
	[P_ttrace_chain] = { "ttrace_chain", AL_PARAM_BOOL, 0, 0, 1, NULL,
			     "1: a plain call_rcu after the tasks-trace GP before the kfree, as "
			     "when rcu_trace_implies_rcu_gp() is false (it is true)" },
};

/*
 * A successful allocation adds to one slot, its cache's (instance, bucket)
 * entry of the per-unit arrays after the named counters, and a free to the
 * other: allocs, frees, alloc_hits and the bytes follow from them and are
 * reported, not counted. The slots are kept at every stats level
 * (al_ctr_block_acct): bytes_held is made of them.
 */
#define BPF_MA_COUNTERS(C, D, P)                                                                   \
	D(P, allocs, AL_CTR_KEY, "", "allocations that returned memory")                           \
	D(P, frees, AL_CTR_KEY, "", "frees")                                                       \
	D(P, alloc_hits, AL_CTR_KEY, "", "allocations popped from the CPU's free list")            \
	C(P, alloc_empty, AL_CTR_KEY,                                                              \
	  "allocations that found the list empty (NULL, refill queued)")                           \
	C(P, reentrant_allocs, AL_CTR_KEY,                                                         \
	  "allocations that found active held (NULL, refill queued)")                              \
	C(P, reentrant_frees, AL_CTR_KEY, "frees that found active held (to the extra list)")      \
	C(P, fallback_kmallocs, 0, "AL_MAYSLEEP allocations served by a direct kmalloc")           \
	C(P, refills, AL_CTR_KEY, "refill irq_work runs that allocated (count below low)")         \
	C(P, refill_objects, 0, "objects added by refills")                                        \
	C(P, refill_kmallocs, 0, "refill objects kmalloc'ed from the layer below")                 \
	C(P, refill_reused, 0, "refill objects taken back from the return-to-slab lists")          \
	C(P, trims, AL_CTR_KEY, "irq_work runs that trimmed (count above high)")                   \
	C(P, trim_objects, 0, "objects trimmed toward the slab (incl. the extra list)")            \
	C(P, ttrace_batches, 0, "grace periods requested for trimmed objects")                     \
	C(P, ttrace_freed, 0, "trimmed objects kfree'd to the layer below after the GP")           \
	C(P, ttrace_chained, 0,                                                                    \
	  "tasks-trace GPs over that chained a plain call_rcu (ttrace_chain)")                     \
	C(P, drain_free_retries, 0, "drain frees the layer below failed and were retried")         \
	C(P, prefills, 0, "caches prefilled")                                                      \
	C(P, prefill_objects, 0, "objects added by prefills")                                      \
	C(P, instances, 0, "fixed-size instances created")                                         \
	C(P, no_instance, AL_CTR_KEY, "allocations refused: 8 fixed-size instances already exist") \
	C(P, einval, 0, "allocations rejected: size 0 or too large for the mode")                  \
	C(P, invalid_frees, AL_CTR_KEY, "frees rejected: not an object of this allocator")         \
	D(P, bytes_allocated, 0, "", "unit bytes handed out")                                      \
	D(P, bytes_freed, 0, "", "unit bytes taken back")                                          \
	D(P, nmi_frees_deferred, 0, "", "NMI frees that found active held (freed later)")          \
	D(P, objects_cached, AL_CTR_GAUGE, "", "objects on the CPUs' free lists")                  \
	AL_DEFER_COUNTERS(D, P)

AL_COUNTERS_DEFINE(BPF_MA_COUNTERS, BMA_, bpf_ma_counters);

/* The per-unit slots after the named counters: one per (instance, bucket). */
#define BMA_UNITS	  (MA_MAX_INST * MA_NR_BUCKETS)
#define BMA_ALLOC_SLOT(u) (BMA_NR + (u))
#define BMA_FREE_SLOT(u)  (BMA_NR + BMA_UNITS + (u))
#define BMA_EXTRA	  (2 * BMA_UNITS)

struct ma_inst;

/* bpf_mem_cache: one per CPU per bucket. Hot fields first. */
struct ma_cache {
	void *free_llist;		/* free objects, LIFO, under active */
	long active;			/* > 0 while an operation is on this cache */
	void *free_llist_extra;		/* atomic list: frees that met active > 0 */
	int free_cnt;			/* objects on free_llist */
	int low_watermark;		/* refill below this */
	int high_watermark;		/* trim above this */
	int batch;			/* objects per refill */
	unsigned unit_size;		/* object size including the header */
	unsigned cpu;			/* owning CPU */
	unsigned bucket;		/* index in the instance */
	unsigned unit;			/* (instance, bucket): its counter slots */
	bool need_prefill;		/* prefill at the next allocation */
	int refill_err;			/* 0, or why the last refill got nothing (-ENOMEM) */
	struct ma_cache *tgt;		/* owner of the last freed object: trim target */
	struct ma_inst *inst;		/* the instance */
	struct al_irq_work refill_work; /* bpf_mem_refill */
	/* return-to-slab path */
	void *free_by_rcu_ttrace;	 /* atomic list: trimmed, GP not yet requested */
	void *waiting_for_gp_ttrace;	 /* atomic list: trimmed, GP in flight */
	int call_rcu_ttrace_in_progress; /* a GP is in flight for this cache */
	struct al_rcu_head rcu_ttrace;	 /* its callback */
} __attribute__((aligned(128)));

struct bpf_ma;

struct ma_inst {
	struct bpf_ma *ma;	 /* owner */
	unsigned nbuckets;	 /* 11 (any) or 1 (fixed) */
	size_t size;		 /* fixed: largest request; any: MA_ANY_MAX */
	struct ma_cache *caches; /* [cpu * nbuckets + bucket] */
	size_t caches_len;	 /* bytes of caches[] */
};

struct bpf_ma {
	struct al_allocator base;	  /* must be first */
	int mode;			  /* M_ANY / M_FIXED */
	size_t unit;			  /* P_unit */
	bool atomic;			  /* irq_work=thread: active is an atomic RMW */
	unsigned below_flags;		  /* AL_NOCPU in thread mode */
	bool ttrace_chain;		  /* P_ttrace_chain */
	struct al_defer *defer;		  /* irq_work and grace periods */
	struct ma_inst inst[MA_MAX_INST]; /* instances */
	unsigned ninst;			  /* published with release */
	int inst_lock;			  /* serialises instance creation */
	struct al_counters ctr;		  /* BPF_MA_COUNTERS */
};

static inline struct bpf_ma *to_ma(struct al_allocator *a)
{
	return (struct bpf_ma *)a;
}

static unsigned bucket_of(size_t size) /* size includes the header, <= 4096 */
{
	if (size <= 192)
		return ma_size_index[(size - 1) / 8] - 1u;
	return al_fls64(size - 1) - 2;
}

/* ---- active: local_t ---- */

static inline long active_inc(struct bpf_ma *ma, struct ma_cache *mc)
{
	long v;

	if (ma->atomic)
		return __atomic_add_fetch(&mc->active, 1, __ATOMIC_ACQUIRE);
	v = __atomic_load_n(&mc->active, __ATOMIC_RELAXED) + 1;
	__atomic_store_n(&mc->active, v, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return v;
}

static inline void active_dec(struct bpf_ma *ma, struct ma_cache *mc)
{
	if (ma->atomic) {
		__atomic_sub_fetch(&mc->active, 1, __ATOMIC_RELEASE);
		return;
	}
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&mc->active, __atomic_load_n(&mc->active, __ATOMIC_RELAXED) - 1,
			 __ATOMIC_RELAXED);
}

/* inc_active for the refill/trim paths. Inline, as the kernel, it just
 * counts: nothing can be inside the cache (only an NMI could, and it fails
 * fast). In thread mode the helper waits for the CPU's own operation. */
static inline void active_enter(struct bpf_ma *ma, struct ma_cache *mc)
{
	if (!ma->atomic) {
		active_inc(ma, mc);
		return;
	}
	while (active_inc(ma, mc) != 1) {
		active_dec(ma, mc);
		al_cpu_relax();
	}
}

/* ---- lock-free lists through the header word ---- */

/* The link word is read racily by llist_del_first (a node may be taken
 * and pushed elsewhere between the read and the CAS, which then fails), so
 * every link access on these lists is a relaxed atomic (READ_ONCE). */
static inline void *link_get(void *obj)
{
	return __atomic_load_n((void **)obj, __ATOMIC_RELAXED);
}

static inline void link_set(void *obj, void *next)
{
	__atomic_store_n((void **)obj, next, __ATOMIC_RELAXED);
}

static inline void llist_add(void **head, void *obj)
{
	void *old = __atomic_load_n(head, __ATOMIC_RELAXED);

	do
		link_set(obj, old);
	while (!__atomic_compare_exchange_n(head, &old, obj, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED));
}

static inline void *llist_del_first(void **head)
{
	void *old = __atomic_load_n(head, __ATOMIC_ACQUIRE);

	while (old && !__atomic_compare_exchange_n(head, &old, link_get(old), true,
						   __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE))
		;
	return old;
}

/* A cached object's body, after its header (see ASan above). */
static inline void body_poison(const struct ma_cache *mc, void *obj)
{
	al_track_poison((char *)obj + MA_HDR, mc->unit_size - MA_HDR);
	(void)mc;
	(void)obj;
}

static inline void body_unpoison(const struct ma_cache *mc, void *obj)
{
	al_track_unpoison((char *)obj + MA_HDR, mc->unit_size - MA_HDR);
	(void)mc;
	(void)obj;
}

/* ---- irq_work: refill and trim ---- */

static void add_obj_to_free_list(struct bpf_ma *ma, struct ma_cache *mc, void *obj)
{
	body_poison(mc, obj);
	active_enter(ma, mc);
	link_set(obj, mc->free_llist);
	mc->free_llist = obj;
	__atomic_store_n(&mc->free_cnt, mc->free_cnt + 1, __ATOMIC_RELAXED);
	active_dec(ma, mc);
}

/* Up to cnt objects into mc's free list; returns how many. */
static int ma_alloc_bulk(struct bpf_ma *ma, struct ma_cache *mc, int cnt, struct al_ctx *x,
			 unsigned flags)
{
	int i;
	void *obj;

	for (i = 0; i < cnt; i++) {
		obj = llist_del_first(&mc->free_by_rcu_ttrace);
		if (!obj)
			obj = llist_del_first(&mc->waiting_for_gp_ttrace);
		if (obj) {
			al_count(&ma->ctr, x, BMA_refill_reused, 1);
		} else {
			/* kmalloc_node(__GFP_ACCOUNT): charged to the map's memcg */
			obj = al_alloc(ma->base.below, x, mc->unit_size, flags | AL_ACCOUNT);
			if (!obj)
				break;
			al_count(&ma->ctr, x, BMA_refill_kmallocs, 1);
		}
		add_obj_to_free_list(ma, mc, obj);
	}
	return i;
}

static void free_ttrace(struct al_rcu_head *h, struct al_ctx *x);
static void free_rcu_tasks_trace(struct al_rcu_head *h, struct al_ctx *x);

/* do_call_rcu_ttrace: send tgt's trimmed objects to the slab after a GP. */
static void do_call_rcu_ttrace(struct bpf_ma *ma, struct ma_cache *c, struct al_ctx *x)
{
	void *obj, *next;

	if (__atomic_exchange_n(&c->call_rcu_ttrace_in_progress, 1, __ATOMIC_ACQ_REL))
		return; /* the objects wait for the next round */
	obj = __atomic_exchange_n(&c->free_by_rcu_ttrace, NULL, __ATOMIC_ACQUIRE);
	for (; obj; obj = next) {
		next = link_get(obj);
		llist_add(&c->waiting_for_gp_ttrace, obj);
	}
	al_count(&ma->ctr, x, BMA_ttrace_batches, 1);
	if (al_call_rcu_tasks_trace(ma->defer, x, &c->rcu_ttrace, free_rcu_tasks_trace))
		free_ttrace(&c->rcu_ttrace, x); /* no batch memory: at once */
}

/* __free_rcu_tasks_trace: the tasks-trace GP is over. */
static void free_rcu_tasks_trace(struct al_rcu_head *h, struct al_ctx *x)
{
	struct ma_cache *c = (struct ma_cache *)((char *)h - offsetof(struct ma_cache, rcu_ttrace));
	struct bpf_ma *ma = c->inst->ma;

	if (!ma->ttrace_chain) { /* rcu_trace_implies_rcu_gp() */
		free_ttrace(h, x);
		return;
	}
	al_count(&ma->ctr, x, BMA_ttrace_chained, 1);
	if (al_call_rcu(ma->defer, x, h, free_ttrace))
		free_ttrace(h, x);
}

static void free_ttrace(struct al_rcu_head *h, struct al_ctx *x)
{
	struct ma_cache *c = (struct ma_cache *)((char *)h - offsetof(struct ma_cache, rcu_ttrace));
	struct bpf_ma *ma = c->inst->ma;
	void *obj = __atomic_exchange_n(&c->waiting_for_gp_ttrace, NULL, __ATOMIC_ACQUIRE), *next;

	for (; obj; obj = next) {
		next = link_get(obj);
		body_unpoison(c, obj);
		if (al_free_flags(ma->base.below, x, obj, ma->below_flags)) {
			body_poison(c, obj);
			llist_add(&c->free_by_rcu_ttrace, obj); /* a lock failed: next round */
		} else {
			al_count(&ma->ctr, x, BMA_ttrace_freed, 1);
		}
	}
	__atomic_store_n(&c->call_rcu_ttrace_in_progress, 0, __ATOMIC_RELEASE);
}

/* free_bulk: trim mc down to the midpoint of its watermarks. */
static void ma_free_bulk(struct bpf_ma *ma, struct ma_cache *mc, struct al_ctx *x)
{
	struct ma_cache *tgt = __atomic_load_n(&mc->tgt, __ATOMIC_RELAXED);
	int cnt, n = 0;
	void *obj, *next;

	if (!tgt)
		tgt = mc;
	do {
		active_enter(ma, mc);
		obj = mc->free_llist;
		if (obj) {
			mc->free_llist = link_get(obj);
			cnt = mc->free_cnt - 1;
			__atomic_store_n(&mc->free_cnt, cnt, __ATOMIC_RELAXED);
		} else {
			cnt = 0;
		}
		active_dec(ma, mc);
		if (obj) {
			llist_add(&tgt->free_by_rcu_ttrace, obj);
			n++;
		}
	} while (cnt > (mc->high_watermark + mc->low_watermark) / 2);
	obj = __atomic_exchange_n(&mc->free_llist_extra, NULL, __ATOMIC_ACQUIRE);
	for (; obj; obj = next, n++) {
		next = link_get(obj);
		llist_add(&tgt->free_by_rcu_ttrace, obj);
	}
	al_count(&ma->ctr, x, BMA_trims, 1);
	al_count(&ma->ctr, x, BMA_trim_objects, (uint64_t)n);
	do_call_rcu_ttrace(ma, tgt, x);
}

/* bpf_mem_refill */
static void refill_fn(struct al_irq_work *w, struct al_ctx *x)
{
	struct ma_cache *mc =
		(struct ma_cache *)((char *)w - offsetof(struct ma_cache, refill_work));
	struct bpf_ma *ma = mc->inst->ma;
	int cnt = __atomic_load_n(&mc->free_cnt, __ATOMIC_RELAXED), n;

	if (cnt < mc->low_watermark) {
		x->err = 0;
		n = ma_alloc_bulk(ma, mc, mc->batch, x, ma->below_flags);
		/* An empty cache answers -ENOMEM (exhausted) rather than -EAGAIN
		 * (refill pending) only once a refill found nothing below. */
		__atomic_store_n(&mc->refill_err, n > 0 ? 0 : (x->err ? x->err : -ENOMEM),
				 __ATOMIC_RELAXED);
		al_count(&ma->ctr, x, BMA_refills, 1);
		al_count(&ma->ctr, x, BMA_refill_objects, (uint64_t)n);
	} else if (cnt > mc->high_watermark) {
		ma_free_bulk(ma, mc, x);
	}
}

/* ---- instances ---- */

static void init_cache(struct ma_cache *mc, struct ma_inst *in, unsigned cpu, unsigned bucket,
		       unsigned unit)
{
	mc->inst = in;
	mc->cpu = cpu;
	mc->bucket = bucket;
	mc->unit = (unsigned)(in - in->ma->inst) * MA_NR_BUCKETS + bucket;
	mc->unit_size = unit;
	if (unit <= 256) {
		mc->low_watermark = 32;
		mc->high_watermark = 96;
	} else {
		mc->low_watermark = (int)(32 * 256 / unit) > 1 ? (int)(32 * 256 / unit) : 1;
		mc->high_watermark = (int)(96 * 256 / unit) > 3 ? (int)(96 * 256 / unit) : 3;
	}
	mc->batch = (mc->high_watermark - mc->low_watermark) / 4 * 3;
	if (mc->batch < 1)
		mc->batch = 1;
	mc->need_prefill = true;
	al_irq_work_init(&mc->refill_work, cpu, refill_fn);
}

/* Build instance i (caller serialises). 0 or -ENOMEM. */
static int inst_init(struct bpf_ma *ma, unsigned i, unsigned nbuckets, size_t size)
{
	struct ma_inst *in = &ma->inst[i];
	unsigned cpu, b;

	in->ma = ma;
	in->nbuckets = nbuckets;
	in->size = size;
	in->caches_len = sizeof(struct ma_cache) * nbuckets * ma->base.ncpu;
	in->caches = al_meta_alloc(in->caches_len);
	if (!in->caches)
		return -ENOMEM;
	for (cpu = 0; cpu < ma->base.ncpu; cpu++)
		for (b = 0; b < nbuckets; b++)
			init_cache(&in->caches[cpu * nbuckets + b], in, cpu, b,
				   nbuckets == 1 ? (unsigned)size + MA_HDR : ma_unit[b]);
	return 0;
}

/* The fixed-size instance for requests of `size` (unit=0), made at first use.
 * NULL with c->err: -ENOSPC (MA_MAX_INST instances exist, none of this size),
 * -EBUSY (another CPU is creating one and this context may not wait),
 * -ENOMEM (no memory for a new one). */
static struct ma_inst *inst_for(struct bpf_ma *ma, struct al_ctx *c, size_t size, unsigned flags)
{
	unsigned n = __atomic_load_n(&ma->ninst, __ATOMIC_ACQUIRE), i;
	struct ma_inst *in = NULL;

	for (i = 0; i < n; i++)
		if (ma->inst[i].size == size)
			return &ma->inst[i];
	if (c->level == AL_CTX_NMI || (flags & AL_NOSPIN)) {
		/* never spin here: an NMI may have interrupted a creator */
		if (__atomic_exchange_n(&ma->inst_lock, 1, __ATOMIC_ACQUIRE)) {
			c->err = -EBUSY;
			return NULL;
		}
	} else {
		while (__atomic_exchange_n(&ma->inst_lock, 1, __ATOMIC_ACQUIRE))
			al_cpu_relax(); /* another CPU is creating one: brief */
	}
	n = ma->ninst;
	for (i = 0; i < n; i++)
		if (ma->inst[i].size == size)
			in = &ma->inst[i];
	if (!in && n < MA_MAX_INST && !inst_init(ma, n, 1, size)) {
		in = &ma->inst[n];
		__atomic_store_n(&ma->ninst, n + 1, __ATOMIC_RELEASE);
		al_count(&ma->ctr, c, BMA_instances, 1);
	}
	__atomic_store_n(&ma->inst_lock, 0, __ATOMIC_RELEASE);
	if (!in && n >= MA_MAX_INST) {
		al_count(&ma->ctr, c, BMA_no_instance, 1);
		c->err = -ENOSPC;
	} else if (!in) {
		c->err = -ENOMEM;
	}
	return in;
}

/* ---- fast paths ---- */

static inline void *unit_alloc(struct bpf_ma *ma, struct ma_cache *mc, struct al_ctx *c, bool *busy)
{
	void *obj = NULL;
	int cnt = 0;

	if (al_likely(active_inc(ma, mc) == 1)) {
		AL_INJECT("bpf_ma.active", c, NULL);
		obj = mc->free_llist;
		if (al_likely(obj)) {
			mc->free_llist = link_get(obj);
			cnt = mc->free_cnt - 1;
			al_assert(cnt >= 0);
			__atomic_store_n(&mc->free_cnt, cnt, __ATOMIC_RELAXED);
			link_set(obj, mc);
			body_unpoison(mc, obj);
		}
	} else {
		al_count(&ma->ctr, c, BMA_reentrant_allocs, 1);
		*busy = true;
	}
	active_dec(ma, mc);
	if (cnt < mc->low_watermark)
		al_irq_work_queue(ma->defer, &mc->refill_work, c);
	return obj;
}

static inline void unit_free(struct bpf_ma *ma, struct ma_cache *mc, void *obj, struct al_ctx *c)
{
	struct ma_cache *owner = link_get(obj);
	int cnt = 0;

	__atomic_store_n(&mc->tgt, owner, __ATOMIC_RELAXED);
	al_assert(owner->unit_size == mc->unit_size); /* the same bucket, maybe another CPU */
	body_poison(mc, obj);
	if (al_likely(active_inc(ma, mc) == 1)) {
		AL_INJECT("bpf_ma.active", c, obj);
		link_set(obj, mc->free_llist);
		mc->free_llist = obj;
		cnt = mc->free_cnt + 1;
		__atomic_store_n(&mc->free_cnt, cnt, __ATOMIC_RELAXED);
	} else {
		llist_add(&mc->free_llist_extra, obj);
		al_count(&ma->ctr, c, BMA_reentrant_frees, 1);
	}
	active_dec(ma, mc);
	if (cnt > mc->high_watermark)
		al_irq_work_queue(ma->defer, &mc->refill_work, c);
}

static al_noinline void prefill(struct bpf_ma *ma, struct ma_cache *mc, struct al_ctx *c)
{
	int n = ma_alloc_bulk(ma, mc, mc->unit_size <= 256 ? 4 : 1, c, 0);

	mc->need_prefill = false;
	al_count(&ma->ctr, c, BMA_prefills, 1);
	al_count(&ma->ctr, c, BMA_prefill_objects, (uint64_t)n);
}

static void *bpf_ma_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct bpf_ma *ma = to_ma(a);
	struct ma_inst *in;
	struct ma_cache *mc;
	bool busy = false;
	unsigned b = 0;
	void *obj;

	if (ma->mode == M_ANY) {
		if (al_unlikely(!size || size > MA_ANY_MAX))
			goto einval;
		in = &ma->inst[0];
		b = bucket_of(size + MA_HDR);
	} else if (ma->unit) {
		if (al_unlikely(!size || size > ma->unit))
			goto einval;
		in = &ma->inst[0];
	} else {
		if (al_unlikely(!size || size > MA_FIXED_MAX))
			goto einval;
		in = inst_for(ma, c, size, flags);
		if (!in)
			return NULL; /* c->err says why */
	}
	mc = &in->caches[c->cpu * in->nbuckets + b];
	if (al_unlikely(mc->need_prefill) && c->level == AL_CTX_TASK && !(flags & AL_NOSPIN))
		prefill(ma, mc, c);
	obj = unit_alloc(ma, mc, c, &busy);
	if (al_unlikely(!obj) && (flags & AL_MAYSLEEP) && c->level == AL_CTX_TASK) {
		/* GFP_KERNEL | __GFP_ACCOUNT: a direct kmalloc, charged */
		obj = al_alloc(a->below, c, mc->unit_size, AL_ACCOUNT);
		if (obj) {
			link_set(obj, mc);
			al_count(&ma->ctr, c, BMA_fallback_kmallocs, 1);
		}
	}
	al_defer_poll(ma->defer, c); /* IRQs back on: the refill runs now */
	if (al_unlikely(!obj)) {
		if (busy) { /* the guard: this CPU's cache is in use below us */
			c->err = -EBUSY;
			return NULL;
		}
		al_count(&ma->ctr, c, BMA_alloc_empty, 1);
		c->err = __atomic_load_n(&mc->refill_err, __ATOMIC_RELAXED) == -ENOMEM ? -ENOMEM
										       : -EAGAIN;
		return NULL;
	}
	al_ctr_add(al_ctr_block_acct(&ma->ctr, c), BMA_ALLOC_SLOT(mc->unit), 1);
	obj = (char *)obj + MA_HDR;
	if (flags & AL_ZERO)
		memset(obj, 0, size);
	return obj;
einval:
	al_count(&ma->ctr, c, BMA_einval, 1);
	c->err = -EINVAL;
	return NULL;
}

/* The owning cache of a live object, or NULL if p is not one of ours. */
static struct ma_cache *owner_of(struct bpf_ma *ma, const void *p)
{
	struct al_allocator *below = ma->base.below;
	const char *obj = (const char *)p - MA_HDR;
	struct ma_cache *owner;
	unsigned i, n = __atomic_load_n(&ma->ninst, __ATOMIC_ACQUIRE);

	if (!p || (below->ops->owns && !below->ops->owns(below, obj)))
		return NULL;
	owner = link_get((void *)obj);
	for (i = 0; i < n; i++) {
		const struct ma_inst *in = &ma->inst[i];
		uintptr_t off = (uintptr_t)owner - (uintptr_t)in->caches;

		if (off < in->caches_len && !(off % sizeof(struct ma_cache)))
			return owner;
	}
	return NULL;
}

static int bpf_ma_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct bpf_ma *ma = to_ma(a);
	struct ma_cache *owner, *mc;
	struct ma_inst *in;

	if (!p)
		return 0;
	owner = owner_of(ma, p);
	if (al_unlikely(!owner)) {
		al_count(&ma->ctr, c, BMA_invalid_frees, 1);
		return -EINVAL;
	}
	in = owner->inst;
	mc = &in->caches[c->cpu * in->nbuckets + owner->bucket]; /* this CPU's cache */
	al_ctr_add(al_ctr_block_acct(&ma->ctr, c), BMA_FREE_SLOT(owner->unit), 1);
	unit_free(ma, mc, (char *)p - MA_HDR, c);
	al_defer_poll(ma->defer, c);
	return 0;
}

static size_t bpf_ma_usable_size(struct al_allocator *a, const void *p)
{
	struct ma_cache *owner = owner_of(to_ma(a), p);

	return owner ? owner->unit_size - MA_HDR : 0;
}

static bool bpf_ma_owns(struct al_allocator *a, const void *p)
{
	return owner_of(to_ma(a), p) != NULL;
}

/* ---- drain, stats, check ---- */

static void free_list(struct bpf_ma *ma, const struct ma_cache *mc, struct al_ctx *c, void *obj)
{
	void *next;
	int tries;

	for (; obj; obj = next) {
		next = link_get(obj);
		body_unpoison(mc, obj);
		/* A backend free can fail transiently (a lock budget, an injected
		 * fault): retry rather than lose the object. */
		for (tries = 0; tries < 4 && al_free(ma->base.below, c, obj); tries++)
			al_count(&ma->ctr, c, BMA_drain_free_retries, 1);
	}
}

static void drain_cache(struct bpf_ma *ma, struct ma_cache *mc, struct al_ctx *c, bool all)
{
	void *obj;

	active_enter(ma, mc);
	obj = mc->free_llist;
	mc->free_llist = NULL;
	__atomic_store_n(&mc->free_cnt, 0, __ATOMIC_RELAXED);
	mc->need_prefill = true;
	active_dec(ma, mc);
	free_list(ma, mc, c, obj);
	free_list(ma, mc, c, __atomic_exchange_n(&mc->free_llist_extra, NULL, __ATOMIC_ACQUIRE));
	free_list(ma, mc, c, __atomic_exchange_n(&mc->free_by_rcu_ttrace, NULL, __ATOMIC_ACQUIRE));
	if (all) /* no callback is in flight after the flush */
		free_list(ma, mc, c,
			  __atomic_exchange_n(&mc->waiting_for_gp_ttrace, NULL, __ATOMIC_ACQUIRE));
}

static void bpf_ma_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct bpf_ma *ma = to_ma(a);
	unsigned i, n = __atomic_load_n(&ma->ninst, __ATOMIC_ACQUIRE), k;

	/* Pending refills, trims and grace periods first (bpf_mem_alloc_destroy:
	 * irq_work_sync, rcu_barrier), then every list. */
	al_defer_flush(ma->defer, c, scope);
	for (i = 0; i < n; i++) {
		struct ma_inst *in = &ma->inst[i];

		for (k = 0; k < in->nbuckets * a->ncpu; k++) {
			struct ma_cache *mc = &in->caches[k];

			if (scope == AL_DRAIN_ALL || mc->cpu == c->cpu)
				drain_cache(ma, mc, c, scope == AL_DRAIN_ALL);
		}
	}
}

/* The slots of every unit that exists: events and unit bytes. */
static void sum_units(const struct bpf_ma *ma, unsigned first, uint64_t *n, uint64_t *bytes)
{
	unsigned i, b, ninst = __atomic_load_n(&ma->ninst, __ATOMIC_ACQUIRE);

	*n = *bytes = 0;
	for (i = 0; i < ninst; i++)
		for (b = 0; b < ma->inst[i].nbuckets; b++) {
			uint64_t v = al_counters_sum(&ma->ctr, first + i * MA_NR_BUCKETS + b);

			*n += v;
			*bytes += v * ma->inst[i].caches[b].unit_size;
		}
}

static void bpf_ma_stats(struct al_allocator *a, struct al_stats *out)
{
	struct bpf_ma *ma = to_ma(a);
	const struct al_counters *k = &ma->ctr;
	unsigned i, n = __atomic_load_n(&ma->ninst, __ATOMIC_ACQUIRE), j;
	uint64_t cached = 0, allocs, abytes, frees, fbytes;

	sum_units(ma, BMA_ALLOC_SLOT(0), &allocs, &abytes);
	sum_units(ma, BMA_FREE_SLOT(0), &frees, &fbytes);
	out->bytes_held = (int64_t)(abytes - fbytes);
	if (!al_counters_on(k))
		return;
	al_stats_add(out, "allocs", allocs);
	al_stats_add(out, "frees", frees);
	al_stats_add(out, "alloc_hits", allocs - al_counters_sum(k, BMA_fallback_kmallocs));
	al_stats_add(out, "bytes_allocated", abytes);
	al_stats_add(out, "bytes_freed", fbytes);
	al_counters_report(k, out);
	/* NMI frees that found `active` held: to the extra list, freed later */
	al_stats_add(out, "nmi_frees_deferred",
		     al_counters_sum_level(k, BMA_reentrant_frees, AL_CTX_NMI));
	al_defer_report(ma->defer, out);
	for (i = 0; i < n; i++)
		for (j = 0; j < ma->inst[i].nbuckets * a->ncpu; j++)
			cached += (uint64_t)__atomic_load_n(&ma->inst[i].caches[j].free_cnt,
							    __ATOMIC_RELAXED);
	al_stats_add_gauge(out, "objects_cached", cached);
}

static int bpf_ma_check(struct al_allocator *a, char *err, size_t errlen)
{
	struct bpf_ma *ma = to_ma(a);
	struct al_allocator *below = a->below;
	unsigned i, k;
	int n;
	void *o;

	for (i = 0; i < ma->ninst; i++)
		for (k = 0; k < ma->inst[i].nbuckets * a->ncpu; k++) {
			struct ma_cache *mc = &ma->inst[i].caches[k];

			if (mc->active) {
				snprintf(err, errlen, "cache %u/%u: active %ld", i, k, mc->active);
				return -EFAULT;
			}
			for (n = 0, o = mc->free_llist; o; o = *(void **)o, n++)
				if (n > mc->free_cnt ||
				    (below->ops->usable_size &&
				     below->ops->usable_size(below, o) < mc->unit_size)) {
					snprintf(
						err, errlen,
						"cache %u/%u (unit %u): free object %p is not live "
						"below, or the list is longer than free_cnt %d",
						i, k, mc->unit_size, o, mc->free_cnt);
					return -EFAULT;
				}
			if (n != mc->free_cnt) {
				snprintf(err, errlen, "cache %u/%u: %d objects listed, free_cnt %d",
					 i, k, n, mc->free_cnt);
				return -EFAULT;
			}
		}
	return 0;
}

/* Free what init made; a part not made yet is skipped. */
static void bpf_ma_fini(struct al_allocator *a)
{
	struct bpf_ma *ma = to_ma(a);
	unsigned i;

	al_defer_destroy(ma->defer);
	for (i = 0; i < ma->ninst; i++)
		al_meta_free(ma->inst[i].caches, ma->inst[i].caches_len);
	al_counters_fini(&ma->ctr);
}

static int bpf_ma_check_params(const int64_t *p, char *err, size_t errlen)
{
	if (p[P_mode] == M_ANY && p[P_unit]) {
		snprintf(err, errlen, "unit=%lld is for mode=fixed; mode=any takes sizes 1 to %d",
			 (long long)p[P_unit], MA_ANY_MAX);
		return -EINVAL;
	}
	return 0;
}

static size_t bpf_ma_max_size_of(const int64_t *p)
{
	if (p[P_mode] == M_ANY)
		return MA_ANY_MAX;
	return p[P_unit] ? (size_t)p[P_unit] : MA_FIXED_MAX;
}

static int bpf_ma_init(struct al_allocator *a, const int64_t *p)
{
	struct bpf_ma *ma = to_ma(a);
	struct al_allocator *below = a->below;
	unsigned ncpu = a->ncpu;
	struct al_defer_params dp = { .irq_mode = (int)p[P_irq_work],
				      .gp_latency_ns = (uint64_t)p[P_gp_latency],
				      .ttrace = (int)p[P_ttrace],
				      .hz = (unsigned)p[P_hz],
				      .lazy_ms = (int)p[P_ttrace_lazy_ms] };
	char why[160];
	int ret;

	if (!below || bpf_ma_check_params(p, why, sizeof(why)))
		return -EINVAL;
	ma->mode = (int)p[P_mode];
	ma->unit = (size_t)p[P_unit];
	ma->atomic = p[P_irq_work] == AL_IRQ_WORK_THREAD;
	ma->below_flags = ma->atomic ? AL_NOCPU : 0;
	ma->ttrace_chain = p[P_ttrace_chain] != 0;
	ret = al_counters_init_desc(&ma->ctr, bpf_ma_counters, BMA_NR, BMA_EXTRA, ncpu);
	if (ret)
		return ret;
	ret = al_defer_create(ncpu, &dp, &ma->defer);
	if (ret)
		return ret;
	if (ma->mode == M_ANY || ma->unit) {
		ret = inst_init(ma, 0, ma->mode == M_ANY ? MA_NR_BUCKETS : 1,
				ma->mode == M_ANY ? MA_ANY_MAX : ma->unit);
		if (ret)
			return ret;
		ma->ninst = 1;
	}
	return 0;
}

/* destroy hands every cached object back while the layer below exists. */
AL_LAYER_SHUTDOWN(
	bpf_ma, struct bpf_ma, bpf_ma_init, al_layer_drain_all, bpf_ma_fini,
	(.alloc = bpf_ma_alloc, .free = bpf_ma_free, .owns = bpf_ma_owns,
	 .usable_size = bpf_ma_usable_size, .drain = bpf_ma_drain, .stats = bpf_ma_stats,
	 .check = bpf_ma_check),
	(.min_align = 8,
	 .doc = "bpf_mem_alloc: per-CPU free lists with low/high watermarks refilled and trimmed "
		"by irq_work, `active` reentrancy guard, 8-byte owner header, return to slab "
		"after a grace period",
	 .features = AL_F_BACKEND | AL_F_NEEDS_DISTINCT | AL_F_OWNS | AL_F_USABLE | AL_F_NMI_SAFE |
		     AL_F_NMI_SHIELD | AL_F_BELOW_IN_IRQ,
	 .max_size = MA_FIXED_MAX, .max_size_of = bpf_ma_max_size_of, .nparams = P_NR,
	 .params = bpf_ma_params, .check_params = bpf_ma_check_params, .counters = bpf_ma_counters,
	 .ncounters = BMA_NR))
