/* SPDX-License-Identifier: MIT */
/*
 * slab: kmalloc / kzalloc over SLUB-like slabs (reference §3), a bottom layer.
 *
 * How it works
 * ------------
 * Thirteen kmalloc caches, one per size class (8 ... 8192 with 96 and 192,
 * kmalloc.h). A slab is a run of pages (4 to 32 KiB: the smallest power of
 * two holding min_objects objects) carved into objects; a free object keeps
 * the next free object's address in its first word (the in-object free
 * list). Slabs come from an internal page source: 32 KiB frames of one
 * al_arena, committed 1 MiB at a time, recycled through a free-frame stack
 * under `page_lock` (the zone lock); a frame's metadata (the kernel's
 * struct slab) lives in a side array indexed by frame number, so
 * virt_to_slab() is a shift.
 *
 * Per slab, {freelist, counters} is one 16-byte pair updated with a locked
 * double-width compare-exchange (cmpxchg16b): counters = inuse | frozen<<32.
 * A frozen slab belongs to a CPU; others are full (on no list) or partial
 * (on the node's partial list under `list_lock`, an al_lock). Objects on a
 * CPU's freelist count as in use.
 *
 * form=cpu_slab (v6.18, the kernel the seed ran): per CPU per cache a
 * kmem_cache_cpu {freelist, tid} pair, a CPU slab and a local lock.
 *  alloc fast path: read tid, freelist, slab; pop with an unlocked
 *    cmpxchg16b on (freelist, tid) -> (next, tid + TID_STEP), as
 *    this_cpu_cmpxchg_double (atomic against the CPU's own interrupts and
 *    NMIs, which is all that touches per-CPU data); retry on failure.
 *  slow path (___slab_alloc) under the local lock: take the CPU slab's
 *    remote frees (get_freelist: one cmpxchg16b takes the slab freelist, or
 *    unfreezes a full slab); else a partial slab under list_lock (frozen);
 *    else a new slab from the page source.
 *  free fast path: if the object's slab is the CPU slab, push with the same
 *    cmpxchg16b; else __slab_free: push onto the slab's freelist with the
 *    locked cmpxchg16b, taking list_lock only on state changes (partial ->
 *    empty: discarded when min_partial slabs are already kept and the slab
 *    is on the node list).
 *  per-CPU partial slabs (cpu_partial=true, CONFIG_SLUB_CPU_PARTIAL; unfrozen
 *    as since v6.8): a full slab that a free makes partial goes on the
 *    FREEING CPU's partial list under its local lock, no list_lock
 *    (put_cpu_partial); a list already holding cpu_partial slabs (2 x
 *    120/52/24/6 objects' worth by size) is first moved whole to the node
 *    list under one list_lock hold (__put_partials, empty slabs discarded
 *    beyond min_partial). ___slab_alloc takes the next CPU partial slab
 *    before the node list, and get_partial_node moves up to half a list more
 *    from the node list to the CPU's in the same list_lock hold.
 *  kmalloc_nolock (AL_NOSPIN): every lock is a trylock (-EBUSY); in NMI, a
 *    cache whose local lock is held is skipped at once (-EBUSY, the
 *    interrupted slow path is mid-update), as 6.18 does.
 *  kfree_nolock (free_flags AL_NOSPIN): -EBUSY (the caller defers) when the
 *    slab is not the CPU slab or the local lock is held: 6.18's defer_free.
 * form=sheaves (sheaves-for-all kernels, which removed kmem_cache_cpu): no
 *    CPU slab; a single allocation takes one object from a partial slab
 *    under list_lock, alloc_bulk (refill_objects) takes many under one
 *    acquisition; frees are __slab_free. Meant to sit under `sheaves`.
 * AL_NOCPU (a helper thread running a CPU's deferred work): the sheaves-form
 *    paths, never the CPU's freelist or partial list. AL_SLOWPATH (irq_work
 *    on the CPU): frees go to __slab_free, which may use the CPU's partial
 *    list.
 *
 * Invariants (slab_check): per slab, free objects on its freelist + inuse =
 * objects; a slab is frozen iff it is some CPU's slab; every non-frozen slab
 * with free objects is on the node partial list, a CPU partial list or the
 * orphan stack; nr_partial and partial_nr count the lists; a CPU partial
 * list holds unfrozen slabs of its class that have free objects;
 * bytes_held = objects in use outside CPU freelists, times the class size.
 *
 * Lock order: local lock (per CPU per cache) -> list_lock -> page_lock (a CPU
 * partial list is moved to the node list after the local lock is dropped). All
 * are leaves with respect to other layers.
 *
 * Cost: a fast-path alloc or free is ~3 loads and one unlocked cmpxchg16b.
 * A remote free is a locked cmpxchg16b, plus list_lock on a state change.
 * A CPU slab refill is one list_lock round trip per slab (objects per slab:
 * 4 KiB / size, at least min_objects).
 * Misuse: as SLUB's hardened freelist, a free of the object already at the
 * head of the freelist it joins (the CPU freelist or the slab's) is a double
 * free, refused with -EINVAL before anything is written: one compare of a
 * value the free loads anyway. free_bulk also refuses an object repeated in
 * its batch. A double free that slips past (the object deeper in a list)
 * can make a freelist cyclic: every walk of a freelist is bounded by the
 * objects its slab holds, and a longer one is counted as corrupt
 * (corrupt_freelists; check() fails, an allocation that meets it fails with
 * -EFAULT) and its objects leaked rather than walked forever.
 *
 * ASan (core/track.h): a free object is poisoned except its first word, the
 * free-list link. The link stays readable because the lock-free paths read
 * it speculatively, as SLUB does: the fast path loads the next pointer of a
 * freelist head that an interrupting context may have allocated meanwhile
 * (the cmpxchg then fails); re-poisoning the link after such a read would
 * poison a live object. So a write after free is caught from byte 8 on; an
 * 8-byte object is not covered. An object is poisoned before a free
 * publishes it and unpoisoned (whole) once an allocation owns it; a frame is
 * unpoisoned whole before it is carved for another class.
 *
 * Not modelled: NUMA nodes, debugging, large kmalloc above 8 KiB (-EINVAL),
 * full double-free detection.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kmalloc.h"
#include "memcg.h"

#include "../core/track.h"

#define FRAME_SHIFT 15 /* 32 KiB frames: the largest slab (order 3) */
#define FRAME_SIZE  (1u << FRAME_SHIFT)
#define GROW_BYTES  (1u << 20) /* frames are committed 1 MiB at a time */
#define NOSLAB	    UINT32_MAX /* no CPU slab / end of a frame list */

enum { F_CPU_SLAB = 0, F_SHEAVES = 1 };
#define FORM_CHOICES "cpu_slab,sheaves"

enum {
	P_form,
	P_zero,
	P_min_objects,
	P_arena_limit,
	P_lock_budget,
	P_lock_timing,
	P_cpu_partial,
	P_memcg,
	P_memcg_depth,
	P_NR
};

#define NR_CACHES (2 * KM_NR_CLASSES) /* kmalloc-N, then kmalloc-cg-N */

static const struct al_param_desc slab_params[P_NR] = {
	[P_form] = { "form", AL_PARAM_ENUM, F_CPU_SLAB, 0, 1, FORM_CHOICES,
		     "cpu_slab: per-CPU slab with a cmpxchg16b freelist (v6.18); sheaves: no "
		     "CPU slab, for use under the sheaves layer (newer kernels)" },
	[P_zero] = { "zero", AL_PARAM_BOOL, 0, 0, 1, NULL, "zero every allocation (kzalloc)" },
	[P_min_objects] = { "min_objects", AL_PARAM_INT, 16, 1, 512, NULL,
			    "objects per slab at least (slabs are 4 to 32 KiB)" },
	[P_arena_limit] = { "arena_limit", AL_PARAM_SIZE, 4ll << 30, 1 << 20, 64ll << 30, NULL,
			    "reserved VA for slabs; new slabs fail with ENOMEM beyond it" },
	[P_lock_budget] = { "lock_budget", AL_PARAM_NS, 1000000000, 0, 10000000000ll, NULL,
			    "how long list_lock and page_lock waiters spin before failing" },
	[P_lock_timing] = { "lock_timing", AL_PARAM_BOOL, 1, 0, 1, NULL,
			    "measure lock hold time (list_lock_hold_ns)" },
	[P_cpu_partial] = { "cpu_partial", AL_PARAM_BOOL, 1, 0, 1, NULL,
			    "per-CPU partial slabs (CONFIG_SLUB_CPU_PARTIAL, cpu_slab form): "
			    "up to 2 x 120/52/24/6 objects' worth of slabs per CPU per cache by "
			    "object size, as v6.18" },
	[P_memcg] = { "memcg", AL_PARAM_BOOL, 1, 0, 1, NULL,
		      "charge AL_ACCOUNT (__GFP_ACCOUNT) allocations: kmalloc-cg caches whose "
		      "slabs get an obj_exts vector (a traced kcalloc), obj_cgroup per-CPU "
		      "byte stock, memcg page stock, page counters" },
	[P_memcg_depth] = { "memcg_depth", AL_PARAM_INT, 3, 1, MEMCG_MAX_DEPTH, NULL,
			    "page counters charged per page batch: the cgroup and its "
			    "ancestors below the root (user.slice/user-UID.slice/session)" },
};

/*
 * An object handed out or freed adds to one slot, its class's entry of the
 * per-class arrays after the named counters, by path: the fast path
 * (cmpxchg16b on the CPU freelist), any other single call, and the bulk
 * calls. Counts and bytes follow from the slots (kmallocs, kfrees,
 * alloc_fastpath, bytes_*) and are reported, not counted. The slots and
 * corrupt_freelists are kept at every stats level (al_ctr_block_acct):
 * bytes_held is made of the slots and check() reads both.
 */
#define SLAB_COUNTERS(C, D, P)                                                                   \
	D(P, kmallocs, AL_CTR_KEY, "", "objects handed out (alloc and alloc_bulk)")              \
	D(P, traced_kmallocs, 0, "", "allocations the kmalloc tracepoint sees (not AL_NOTRACE)") \
	C(P, untraced_kmallocs, 0, "single allocations with AL_NOTRACE (kmalloc_nolock)")        \
	D(P, kfrees, AL_CTR_KEY, "", "objects freed (free, free_bulk, free_flags)")              \
	D(P, alloc_fastpath, AL_CTR_KEY, "",                                                     \
	  "allocations popped from the CPU freelist by cmpxchg16b")                              \
	C(P, alloc_slowpath, AL_CTR_KEY, "allocations through ___slab_alloc (CPU slab refill)")  \
	C(P, alloc_partial, 0, "allocations from a partial slab under list_lock (sheaves form)") \
	D(P, free_fastpath, AL_CTR_KEY, "", "frees pushed onto the CPU freelist by cmpxchg16b")  \
	C(P, free_fastpath_chains, 0, "free_bulk chains pushed onto the CPU freelist")           \
	C(P, free_slowpath, AL_CTR_KEY, "__slab_free calls (object not in the CPU slab)")        \
	C(P, free_frozen, 0, "__slab_free into another CPU's (frozen) slab")                     \
	C(P, bulk_allocs, 0, "alloc_bulk calls")                                                 \
	C(P, bulk_frees, 0, "free_bulk calls")                                                   \
	C(P, cmpxchg_retries, 0, "failed cmpxchg16b on a CPU freelist (interrupted), retried")   \
	C(P, slab_cmpxchg_retries, 0,                                                            \
	  "failed cmpxchg16b on a slab freelist (remote race), retried")                         \
	C(P, slab_allocs, AL_CTR_KEY, "new slabs from the page source")                          \
	C(P, slab_frees, AL_CTR_KEY, "empty slabs discarded to the page source")                 \
	C(P, partial_gets, AL_CTR_KEY, "slabs taken from the partial list")                      \
	C(P, get_freelist, 0, "CPU slab refills from its own remote frees")                      \
	C(P, deactivations, 0, "CPU slabs given up (full or flushed)")                           \
	C(P, cpu_partial_alloc, AL_CTR_KEY,                                                      \
	  "CPU slab refills from this CPU's partial list (no list_lock)")                        \
	C(P, cpu_partial_free, AL_CTR_KEY,                                                       \
	  "full slabs a free put on the freeing CPU's partial list (no list_lock)")              \
	C(P, cpu_partial_node, 0, "slabs moved from the node list to a CPU's in get_partial")    \
	C(P, cpu_partial_drain, AL_CTR_KEY,                                                      \
	  "CPU partial lists moved to the node list (full list, or flushed)")                    \
	C(P, nospin_busy, AL_CTR_KEY, "AL_NOSPIN calls that found a lock held (-EBUSY)")         \
	C(P, nmi_deadlock, AL_CTR_KEY,                                                           \
	  "spinning calls in NMI that found the local lock held (-EDEADLK)")                     \
	C(P, page_grows, 0, "arena grows (1 MiB each)")                                          \
	C(P, einval, 0, "allocations rejected: size 0 or above 8 KiB")                           \
	C(P, enomem, AL_CTR_KEY, "allocations failed: no memory for a new slab")                 \
	C(P, invalid_frees, AL_CTR_KEY, "frees rejected: not an object of this allocator")       \
	C(P, double_frees, AL_CTR_KEY,                                                           \
	  "frees rejected: the object is already at the freelist head")                          \
	C(P, corrupt_freelists, AL_CTR_KEY,                                                      \
	  "freelists found longer than their slab (a cycle): leaked")                            \
	C(P, memcg_charges, AL_CTR_KEY, "objects charged to the memcg (kmalloc-cg caches)")      \
	C(P, memcg_uncharges, 0, "objects uncharged at free")                                    \
	C(P, memcg_stock_hits, AL_CTR_KEY, "charges the per-CPU obj_stock served")               \
	C(P, memcg_stock_refills, 0, "charges that charged a page and refilled the obj_stock")   \
	C(P, memcg_page_charges, AL_CTR_KEY,                                                     \
	  "page_counter charges of a 64-page batch (atomic adds up the hierarchy)")              \
	C(P, memcg_page_drains, 0, "memcg stocks drained to the page counters")                  \
	C(P, memcg_stock_busy, 0, "charges and uncharges that found the stock locked")           \
	C(P, obj_exts_allocs, AL_CTR_KEY,                                                        \
	  "obj_exts vectors kcalloc'ed for new kmalloc-cg slabs (kmallocs of their own)")        \
	C(P, obj_exts_failed, 0, "new kmalloc-cg slabs whose vector could not be had")           \
	C(P, obj_exts_bytes, 0, "class bytes of obj_exts vectors allocated")                     \
	C(P, obj_exts_bytes_freed, 0, "class bytes of obj_exts vectors freed")                   \
	D(P, bytes_allocated, 0, "", "class bytes handed out")                                   \
	D(P, bytes_freed, 0, "", "class bytes freed")                                            \
	AL_LOCK_COUNTERS(C, P, list_lock, "the caches' list_lock")                               \
	AL_LOCK_COUNTERS(C, P, page_lock, "page_lock (the zone lock)")                           \
	D(P, slabs, AL_CTR_GAUGE, "", "slabs in use")                                            \
	D(P, partial_slabs, AL_CTR_GAUGE, "", "slabs on the partial lists")                      \
	D(P, bytes_committed, AL_CTR_GAUGE, "", "arena bytes committed for slabs")

AL_COUNTERS_DEFINE(SLAB_COUNTERS, SLAB_, slab_counters);

/* The per-class slot arrays after the named counters, by path. */
enum {
	SLOT_ALLOC_FAST,
	SLOT_ALLOC_SLOW,
	SLOT_ALLOC_BULK,
	SLOT_FREE_FAST,
	SLOT_FREE_SLOW,
	SLOT_FREE_BULK,
	SLOT_NR
};
#define SLAB_SLOT(path, cls) (SLAB_NR + (path)*KM_NR_CLASSES + (cls))
#define SLAB_EXTRA	     (SLOT_NR * KM_NR_CLASSES)

/* The kernel's struct slab, one per frame. */
struct slab {
	void *freelist;	    /* free objects (in-object links); pair with counters */
	uint64_t counters;  /* inuse (low 32 bits) | frozen << 32 */
	char *base;	    /* first object (the frame's address) */
	uint32_t prev;	    /* partial list / free-frame list links (frame numbers) */
	uint32_t next;	    /* ... NOSLAB ends a list */
	uint32_t objects;   /* objects in this slab */
	uint16_t cls;	    /* size class + 1; 0: the frame is not a slab */
	uint8_t on_partial; /* 1: on its cache's partial list; 2: on the orphan stack;
			     * 3: on a CPU's partial list */
	uint8_t pad;	    /* unused */
	void **obj_exts;    /* kmalloc-cg slabs: per object {objcg, codetag}, or NULL */
} __attribute__((aligned(16)));

_Static_assert(offsetof(struct slab, counters) == 8, "freelist+counters must be one 16-B pair");

/* kmem_cache_cpu: one per CPU per cache. */
struct cpu_slab {
	void *freelist;	     /* lockless per-CPU freelist; pair with tid */
	uint64_t tid;	     /* transaction id, += TID_STEP per change */
	uint32_t slab;	     /* frame of the CPU slab, NOSLAB if none */
	int locked;	     /* local lock: holder's level + 1, 0 = free */
	uint32_t partial;    /* CPU partial list (slab.next links), NOSLAB if empty */
	uint32_t partial_nr; /* slabs on it */
} __attribute__((aligned(AL_CACHELINE)));

/* One kmalloc cache. */
struct kmem_cache {
	struct al_lock list_lock; /* n->list_lock: partial list, slab state changes */
	unsigned size;		  /* object size: the class size */
	unsigned objects;	  /* objects per slab */
	unsigned min_partial;	  /* empty slabs kept on the partial list */
	unsigned cls;		  /* class index (counter slots, sizes) */
	unsigned idx;		  /* cache index: cls, or KM_NR_CLASSES + cls for -cg */
	unsigned cpu_partial;	  /* slabs a CPU partial list holds at most; 0: none */
	uint64_t recip;		  /* ceil(2^32 / size): offset -> object index */
	uint32_t partial_head;	  /* first partial slab (list_lock) */
	uint32_t nr_partial;	  /* partial slabs (list_lock; read racily) */
	uint32_t orphans;	  /* lock-free stack of partial slabs a trylock caller
				   * could not list; the next list_lock holder lists them */
	struct cpu_slab *cpu;	  /* ncpu entries */
};

struct slab_layer {
	struct al_allocator base;  /* must be first */
	struct al_lock page_lock;  /* the page source ("zone lock") */
	uint32_t free_frames;	   /* stack of free frames via slab.next (page_lock) */
	uint32_t pending;	   /* frames freed or grown without page_lock, lock-free */
	int form;		   /* F_CPU_SLAB / F_SHEAVES */
	bool zero;		   /* kzalloc */
	uint64_t tid_step;	   /* roundup_pow_of_two(ncpu) */
	struct al_arena arena;	   /* reserved VA for frames */
	struct slab *frames;	   /* metadata of every frame */
	size_t nframes;		   /* frames in the arena */
	size_t frames_len;	   /* bytes of frames[] */
	struct kmem_cache *caches; /* NR_CACHES */
	size_t caches_len;	   /* bytes of caches[] */
	struct cpu_slab *cpus;	   /* NR_CACHES * ncpu */
	size_t cpus_len;	   /* bytes of cpus[] */
	struct al_counters ctr;	   /* SLAB_COUNTERS */
	bool memcg_on;		   /* P_memcg */
	struct memcg memcg;	   /* the charged cgroup */
	size_t stock_len;	   /* bytes of memcg.stock */
};

static inline struct slab_layer *to_sa(struct al_allocator *a)
{
	return (struct slab_layer *)a;
}

/* ---- double-width compare-exchange ---- */

/* The asm is invisible to ThreadSanitizer: tell it that a locked exchange
 * orders memory like an acq_rel atomic on the pair (it is a full barrier). */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define tsan_release(p) __tsan_release(p)
#define tsan_acquire(p) __tsan_acquire(p)
#else
#define tsan_release(p) ((void)(p))
#define tsan_acquire(p) ((void)(p))
#endif

#if defined(__x86_64__)
/* Unlocked: atomic against this thread's signal handlers only, as the
 * kernel's this_cpu_cmpxchg16b is against the CPU's interrupts. */
static inline bool cas2_local(void *pair, void *op, uint64_t ot, void *np, uint64_t nt)
{
	bool ok;

	__asm__ __volatile__("cmpxchg16b %1"
			     : "=@ccz"(ok), "+m"(*(unsigned __int128 *)pair), "+a"(op), "+d"(ot)
			     : "b"(np), "c"(nt)
			     : "memory");
	return ok;
}

/* Locked: atomic against every CPU (slab freelist + counters). */
static inline bool cas2(void *pair, void *op, uint64_t ot, void *np, uint64_t nt)
{
	bool ok;

	tsan_release(pair);
	__asm__ __volatile__("lock cmpxchg16b %1"
			     : "=@ccz"(ok), "+m"(*(unsigned __int128 *)pair), "+a"(op), "+d"(ot)
			     : "b"(np), "c"(nt)
			     : "memory");
	tsan_acquire(pair);
	return ok;
}
#elif defined(__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16)
static inline bool cas2(void *pair, void *op, uint64_t ot, void *np, uint64_t nt)
{
	unsigned __int128 o = (unsigned __int128)ot << 64 | (uintptr_t)op;
	unsigned __int128 n = (unsigned __int128)nt << 64 | (uintptr_t)np;

	return __sync_bool_compare_and_swap((unsigned __int128 *)pair, o, n);
}
#define cas2_local cas2
#else
#error "slab needs a 16-byte compare-exchange (x86-64 cmpxchg16b, or -mcx16-like support)"
#endif

/* ---- geometry and lookup ---- */

static inline uint32_t frame_of(const struct slab_layer *sa, const void *p)
{
	return (uint32_t)(((uintptr_t)p - sa->arena.base) >> FRAME_SHIFT);
}

/* The free pointer is a relaxed atomic (READ_ONCE/WRITE_ONCE): a free
 * object's first word is read racily by others than its owner. SLUB's
 * get_freepointer_safe reads it speculatively, and a layer above (bpf_ma's
 * llist_del_first) may read the link word of an object another CPU has
 * just handed down to us; such a read is discarded when its CAS fails, but
 * it must not be a data race with the store here. On x86-64 both are plain
 * moves. */
static inline void *get_fp(const void *obj)
{
	return __atomic_load_n((void *const *)obj, __ATOMIC_RELAXED);
}

static inline void set_fp(void *obj, void *fp)
{
	__atomic_store_n((void **)obj, fp, __ATOMIC_RELAXED);
}

/* A free object's body: everything after its link word (see ASan above). */
static inline void obj_poison(const struct kmem_cache *s, void *obj)
{
	al_track_poison((char *)obj + sizeof(void *), s->size - sizeof(void *));
	(void)s;
	(void)obj;
}

static inline void obj_unpoison(const struct kmem_cache *s, void *obj)
{
	al_track_unpoison(obj, s->size);
	(void)s;
	(void)obj;
}

/* The slab of a live object, or NULL when p is not an object start of ours. */
static struct slab *lookup(struct slab_layer *sa, const void *p)
{
	uintptr_t a = (uintptr_t)p;
	struct slab *slab;
	uint32_t off, idx;
	const struct kmem_cache *s;
	unsigned cls;

	if (!al_arena_contains(&sa->arena, p))
		return NULL;
	slab = &sa->frames[frame_of(sa, p)];
	cls = __atomic_load_n(&slab->cls, __ATOMIC_ACQUIRE);
	if (!cls)
		return NULL;
	s = &sa->caches[cls - 1];
	off = (uint32_t)(a & (FRAME_SIZE - 1));
	idx = (uint32_t)(((uint64_t)off * s->recip) >> 32);
	if (idx >= s->objects || idx * s->size != off)
		return NULL;
	return slab;
}

static inline struct slab *frame(struct slab_layer *sa, uint32_t f)
{
	return &sa->frames[f];
}

/* ---- the page source ---- */

/* Push a chain first..last (linked by .next) on the lock-free pending stack. */
static void pending_push(struct slab_layer *sa, uint32_t first, uint32_t last)
{
	uint32_t old = __atomic_load_n(&sa->pending, __ATOMIC_RELAXED);

	do
		frame(sa, last)->next = old;
	while (!__atomic_compare_exchange_n(&sa->pending, &old, first, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED));
}

/* page_lock held: move pending frames onto the free stack. */
static void pending_splice_locked(struct slab_layer *sa)
{
	uint32_t f = __atomic_exchange_n(&sa->pending, NOSLAB, __ATOMIC_ACQUIRE), next;

	al_lock_assert_locked(&sa->page_lock);
	for (; f != NOSLAB; f = next) {
		next = frame(sa, f)->next;
		frame(sa, f)->next = sa->free_frames;
		sa->free_frames = f;
	}
}

static int page_lock(struct slab_layer *sa, struct al_ctx *c, unsigned flags)
{
	return (flags & AL_NOSPIN) ? al_lock_tryacquire(&sa->page_lock, c)
				   : al_lock_acquire(&sa->page_lock, c);
}

/* A free frame, or NOSLAB with c->err set. */
static uint32_t page_alloc(struct slab_layer *sa, struct al_ctx *c, unsigned flags)
{
	uint32_t f = NOSLAB, first, n, i, last;
	char *p;
	int ret = page_lock(sa, c, flags);

	if (ret && !(flags & AL_NOSPIN)) {
		c->err = ret;
		return NOSLAB;
	}
	if (ret) {
		/* A trylock caller takes the lock-free pending frames (whole, so no
		 * ABA), or grows: the model's page source does not fail a nolock
		 * caller for contention (alloc_pages_nolock rarely does: PCP). */
		al_count(&sa->ctr, c, SLAB_nospin_busy, 1);
		f = __atomic_exchange_n(&sa->pending, NOSLAB, __ATOMIC_ACQUIRE);
		if (f != NOSLAB) {
			first = frame(sa, f)->next;
			for (last = first; last != NOSLAB && frame(sa, last)->next != NOSLAB;)
				last = frame(sa, last)->next;
			if (first != NOSLAB)
				pending_push(sa, first, last);
			return f;
		}
	} else {
		pending_splice_locked(sa);
		if (sa->free_frames != NOSLAB) {
			f = sa->free_frames;
			sa->free_frames = frame(sa, f)->next;
		}
		al_lock_release(&sa->page_lock, c);
		if (f != NOSLAB)
			return f;
	}
	/* Grow (lock-free): keep the first frame, the rest go to pending. */
	p = al_arena_grow(&sa->arena, GROW_BYTES);
	if (!p) {
		c->err = -ENOMEM;
		return NOSLAB;
	}
	al_count(&sa->ctr, c, SLAB_page_grows, 1);
	first = frame_of(sa, p);
	n = GROW_BYTES / FRAME_SIZE;
	for (i = 1; i + 1 < n; i++)
		frame(sa, first + i)->next = first + i + 1;
	if (n > 1)
		pending_push(sa, first + 1, first + n - 1);
	return first;
}

static void page_free(struct slab_layer *sa, struct al_ctx *c, uint32_t f, unsigned flags)
{
	if (page_lock(sa, c, flags)) {
		pending_push(sa, f, f); /* linked by the next page_alloc: nothing is lost */
		return;
	}
	frame(sa, f)->next = sa->free_frames;
	sa->free_frames = f;
	al_lock_release(&sa->page_lock, c);
}

static void *slab_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags);
static int slab_free_flags(struct al_allocator *a, struct al_ctx *c, void *p, unsigned flags);

/* The class bytes of a kmalloc-cg slab's obj_exts vector. */
static inline uint64_t obj_exts_bytes(const struct kmem_cache *s)
{
	return km_class_size[km_class((size_t)s->objects * OBJ_EXT_SIZE)];
}

/*
 * alloc_slab_obj_exts for a new kmalloc-cg slab: a zeroed vector of one
 * slabobj_ext per object, kcalloc'ed from the plain kmalloc caches, so it
 * fires the kmalloc tracepoint (kmalloc_nolock's callers get it from
 * kmalloc_nolock: untraced). Without it the slab's objects go uncharged.
 */
static al_noinline void alloc_obj_exts(struct slab_layer *sa, const struct kmem_cache *s,
				       struct al_ctx *c, struct slab *slab, unsigned flags)
{
	unsigned f =
		AL_ZERO | (flags & AL_NOCPU) | (flags & AL_NOSPIN ? AL_NOSPIN | AL_NOTRACE : 0);
	int err = c->err;

	slab->obj_exts = slab_alloc(&sa->base, c, (size_t)s->objects * OBJ_EXT_SIZE, f);
	if (!slab->obj_exts) {
		c->err = err; /* the slab itself is fine */
		al_count(&sa->ctr, c, SLAB_obj_exts_failed, 1);
		return;
	}
	al_count(&sa->ctr, c, SLAB_obj_exts_allocs, 1);
	al_ctr_add(al_ctr_block_acct(&sa->ctr, c), SLAB_obj_exts_bytes, obj_exts_bytes(s));
}

/* free_slab_obj_exts when a kmalloc-cg slab goes back to the page source. */
static al_noinline void free_obj_exts(struct slab_layer *sa, struct al_ctx *c, struct slab *slab,
				      unsigned flags)
{
	const struct kmem_cache *s = &sa->caches[slab->cls - 1];
	void *vec = slab->obj_exts;

	slab->obj_exts = NULL;
	if (slab_free_flags(&sa->base, c, vec, flags & (AL_NOSPIN | AL_NOCPU)) == -EBUSY)
		slab_free_flags(&sa->base, c, vec, AL_NOCPU); /* the slow path, spinning */
	al_ctr_add(al_ctr_block_acct(&sa->ctr, c), SLAB_obj_exts_bytes_freed, obj_exts_bytes(s));
}

/* A memcg event's counts. */
static void memcg_count(struct slab_layer *sa, const struct al_ctx *c, const struct memcg_event *ev)
{
	al_count(&sa->ctr, c, SLAB_memcg_stock_hits, ev->hit);
	al_count(&sa->ctr, c, SLAB_memcg_stock_refills, ev->refill);
	al_count(&sa->ctr, c, SLAB_memcg_page_charges, ev->page_charge);
	al_count(&sa->ctr, c, SLAB_memcg_page_drains, ev->page_drain);
	al_count(&sa->ctr, c, SLAB_memcg_stock_busy, ev->busy);
}

/* The object's slabobj_ext objcg slot in its kmalloc-cg slab, or NULL. */
static inline void **objcg_slot(struct slab_layer *sa, const struct kmem_cache *s, void *obj)
{
	struct slab *slab = &sa->frames[frame_of(sa, obj)];
	uint32_t off = (uint32_t)((uintptr_t)obj & (FRAME_SIZE - 1));

	if (!slab->obj_exts)
		return NULL;
	return &slab->obj_exts[(((uint64_t)off * s->recip) >> 32) *
			       (OBJ_EXT_SIZE / sizeof(void *))];
}

/* memcg_slab_post_alloc_hook: charge obj_full_size through the per-CPU
 * stock and record the objcg in the object's slabobj_ext. */
static void memcg_post_alloc(struct slab_layer *sa, const struct kmem_cache *s, struct al_ctx *c,
			     void *obj, unsigned flags)
{
	void **slot = objcg_slot(sa, s, obj);
	struct memcg_event ev = { 0 };

	if (!slot)
		return;
	memcg_charge(&sa->memcg, c, s->size + OBJCG_PTR_SIZE, flags & AL_NOCPU, &ev);
	*slot = &sa->memcg;
	al_count(&sa->ctr, c, SLAB_memcg_charges, 1);
	memcg_count(sa, c, &ev);
}

/* memcg_slab_free_hook: uncharge an object whose slabobj_ext names the
 * objcg, and clear it (a deferred free that comes back here finds it
 * cleared). */
static al_noinline void memcg_uncharge_obj(struct slab_layer *sa, struct al_ctx *c,
					   struct slab *slab, void *obj, unsigned flags)
{
	const struct kmem_cache *s = &sa->caches[slab->cls - 1];
	void **slot;
	struct memcg_event ev = { 0 };

	if (s->idx < KM_NR_CLASSES || !(slot = objcg_slot(sa, s, obj)) || !*slot)
		return;
	*slot = NULL;
	memcg_uncharge(&sa->memcg, c, s->size + OBJCG_PTR_SIZE, flags & AL_NOCPU, &ev);
	al_count(&sa->ctr, c, SLAB_memcg_uncharges, 1);
	memcg_count(sa, c, &ev);
}

static inline void memcg_free_hook(struct slab_layer *sa, struct al_ctx *c, struct slab *slab,
				   void *obj, unsigned flags)
{
	if (al_unlikely(slab->obj_exts))
		memcg_uncharge_obj(sa, c, slab, obj, flags);
}

/* A new slab of cache s: frozen (for a CPU) or not; all objects on its freelist. */
static struct slab *new_slab(struct slab_layer *sa, struct kmem_cache *s, struct al_ctx *c,
			     unsigned flags)
{
	uint32_t f = page_alloc(sa, c, flags), i;
	struct slab *slab;
	char *base;

	if (f == NOSLAB)
		return NULL;
	slab = frame(sa, f);
	base = (char *)(sa->arena.base + ((uintptr_t)f << FRAME_SHIFT));
	al_assert(s->objects && (size_t)s->objects * s->size <= FRAME_SIZE);
	al_track_unpoison(base, FRAME_SIZE); /* another class's free objects may lie here */
	for (i = 0; i + 1 < s->objects; i++) {
		set_fp(base + (size_t)i * s->size, base + (size_t)(i + 1) * s->size);
		obj_poison(s, base + (size_t)i * s->size);
	}
	set_fp(base + (size_t)(s->objects - 1) * s->size, NULL);
	obj_poison(s, base + (size_t)(s->objects - 1) * s->size);
	slab->base = base;
	slab->objects = s->objects;
	slab->prev = slab->next = NOSLAB;
	__atomic_store_n(&slab->on_partial, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&slab->freelist, base, __ATOMIC_RELAXED);
	__atomic_store_n(&slab->counters, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&slab->cls, (uint16_t)(s->idx + 1), __ATOMIC_RELEASE);
	al_count(&sa->ctr, c, SLAB_slab_allocs, 1);
	slab->obj_exts = NULL;
	if (s->idx >= KM_NR_CLASSES)
		alloc_obj_exts(sa, s, c, slab, flags);
	return slab;
}

static void discard_slab(struct slab_layer *sa, struct al_ctx *c, struct slab *slab, unsigned flags)
{
	if (slab->obj_exts)
		free_obj_exts(sa, c, slab, flags);
	__atomic_store_n(&slab->cls, 0, __ATOMIC_RELEASE);
	al_count(&sa->ctr, c, SLAB_slab_frees, 1);
	page_free(sa, c, (uint32_t)(slab - sa->frames), flags);
}

/* ---- partial lists (list_lock held) ---- */

static void add_partial(struct slab_layer *sa, struct kmem_cache *s, struct slab *slab)
{
	uint32_t f = (uint32_t)(slab - sa->frames);

	slab->prev = NOSLAB;
	slab->next = s->partial_head;
	if (s->partial_head != NOSLAB)
		frame(sa, s->partial_head)->prev = f;
	s->partial_head = f;
	__atomic_store_n(&slab->on_partial, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&s->nr_partial, s->nr_partial + 1, __ATOMIC_RELAXED);
}

static void remove_partial(struct slab_layer *sa, struct kmem_cache *s, struct slab *slab)
{
	if (slab->prev != NOSLAB)
		frame(sa, slab->prev)->next = slab->next;
	else
		s->partial_head = slab->next;
	if (slab->next != NOSLAB)
		frame(sa, slab->next)->prev = slab->prev;
	slab->prev = slab->next = NOSLAB;
	__atomic_store_n(&slab->on_partial, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->nr_partial, s->nr_partial - 1, __ATOMIC_RELAXED);
}

/* Take list_lock (a trylock under AL_NOSPIN) and list the orphans. */
static int list_lock(struct slab_layer *sa, struct kmem_cache *s, struct al_ctx *c, unsigned flags)
{
	uint32_t f, next;
	int ret = (flags & AL_NOSPIN) ? al_lock_tryacquire(&s->list_lock, c)
				      : al_lock_acquire(&s->list_lock, c);

	if (ret)
		return ret;
	if (al_unlikely(__atomic_load_n(&s->orphans, __ATOMIC_RELAXED) != NOSLAB))
		for (f = __atomic_exchange_n(&s->orphans, NOSLAB, __ATOMIC_ACQUIRE); f != NOSLAB;
		     f = next) {
			next = frame(sa, f)->next;
			add_partial(sa, s, frame(sa, f));
		}
	return 0;
}

/* A partial slab that could not be listed (AL_NOSPIN, list_lock busy). */
static void orphan_push(struct slab_layer *sa, struct kmem_cache *s, struct slab *slab)
{
	uint32_t f = (uint32_t)(slab - sa->frames),
		 old = __atomic_load_n(&s->orphans, __ATOMIC_RELAXED);

	__atomic_store_n(&slab->on_partial, 2, __ATOMIC_RELAXED);
	do
		slab->next = old;
	while (!__atomic_compare_exchange_n(&s->orphans, &old, f, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED));
}

#define INUSE(cn)		((uint32_t)(cn))
#define FROZEN(cn)		((uint32_t)((cn) >> 32) & 1)
#define COUNTERS(inuse, frozen) ((uint64_t)(inuse) | (uint64_t)(frozen) << 32)

/*
 * Take a slab's whole freelist; inuse becomes objects. frozen: the new frozen
 * state, or -1 to freeze only if objects were taken (get_freelist: a CPU
 * slab with nothing left is unfrozen in the same exchange).
 */
static void *take_freelist(struct slab_layer *sa, struct al_ctx *c, struct slab *slab, int frozen)
{
	void *fl;
	uint64_t cn;

	for (;;) {
		fl = __atomic_load_n(&slab->freelist, __ATOMIC_ACQUIRE);
		cn = __atomic_load_n(&slab->counters, __ATOMIC_RELAXED);
		if (cas2(&slab->freelist, fl, cn, NULL,
			 COUNTERS(slab->objects, frozen < 0 ? fl != NULL : frozen)))
			return fl;
		al_count(&sa->ctr, c, SLAB_slab_cmpxchg_retries, 1);
	}
}

/*
 * __put_partials: move a chain of CPU-partial slabs (linked by .next) to the
 * node list under one list_lock hold; an empty one is discarded instead
 * when min_partial slabs are already kept. A caller that cannot have the
 * lock (its budget ran out) leaves them on the orphan stack for the next
 * holder.
 */
static void put_partials(struct slab_layer *sa, struct kmem_cache *s, struct al_ctx *c, uint32_t f)
{
	uint32_t next, discard = NOSLAB;
	bool locked = !list_lock(sa, s, c, 0);

	al_count(&sa->ctr, c, SLAB_cpu_partial_drain, 1);
	for (; f != NOSLAB; f = next) {
		struct slab *slab = frame(sa, f);

		next = slab->next;
		if (!locked) {
			orphan_push(sa, s, slab);
		} else if (!INUSE(__atomic_load_n(&slab->counters, __ATOMIC_RELAXED)) &&
			   s->nr_partial >= s->min_partial) {
			__atomic_store_n(&slab->on_partial, 0, __ATOMIC_RELAXED);
			slab->next = discard;
			discard = f;
		} else {
			add_partial(sa, s, slab);
		}
	}
	if (locked)
		al_lock_release(&s->list_lock, c);
	for (; discard != NOSLAB; discard = next) {
		next = frame(sa, discard)->next;
		discard_slab(sa, c, frame(sa, discard), 0);
	}
}

/* Local lock held: push slab on this CPU's partial list. With drain, a full
 * list is detached first and returned (the caller puts it to the node list
 * after unlocking), as put_cpu_partial does; NOSLAB otherwise. */
static uint32_t cpu_partial_push(struct slab_layer *sa, struct kmem_cache *s, struct cpu_slab *cs,
				 struct slab *slab, bool drain)
{
	uint32_t to_put = NOSLAB;

	if (drain && cs->partial != NOSLAB && cs->partial_nr >= s->cpu_partial) {
		to_put = cs->partial;
		cs->partial = NOSLAB;
		cs->partial_nr = 0;
	}
	slab->next = cs->partial;
	__atomic_store_n(&slab->on_partial, 3, __ATOMIC_RELAXED);
	cs->partial = (uint32_t)(slab - sa->frames);
	cs->partial_nr++;
	return to_put;
}

static void local_unlock(struct cpu_slab *cs);

/*
 * put_cpu_partial: a full slab that a free made partial goes on the freeing
 * CPU's partial list, without list_lock. When this CPU's local lock is held
 * by the level this call interrupted, the slab goes to the node list (or
 * the orphan stack when list_lock cannot be had either).
 */
static void put_cpu_partial(struct slab_layer *sa, struct kmem_cache *s, struct al_ctx *c,
			    struct slab *slab)
{
	struct cpu_slab *cs = &s->cpu[c->cpu];
	uint32_t to_put;
	int err = c->err;

	if (al_unlikely(__atomic_load_n(&cs->locked, __ATOMIC_RELAXED))) {
		/* held by the level this call interrupted: the node list */
		if (list_lock(sa, s, c, 0)) {
			c->err = err;
			orphan_push(sa, s, slab);
			return;
		}
		add_partial(sa, s, slab);
		al_lock_release(&s->list_lock, c);
		return;
	}
	__atomic_store_n(&cs->locked, (int)c->level + 1, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	to_put = cpu_partial_push(sa, s, cs, slab, true);
	local_unlock(cs);
	al_count(&sa->ctr, c, SLAB_cpu_partial_free, 1);
	if (to_put != NOSLAB)
		put_partials(sa, s, c, to_put);
}

static al_noinline al_cold int double_free(struct slab_layer *sa, const struct al_ctx *c)
{
	al_count(&sa->ctr, c, SLAB_double_frees, 1);
	return -EINVAL;
}

static al_noinline al_cold void corrupt(struct slab_layer *sa, struct al_ctx *c)
{
	/* kept at every stats level: check() reports it */
	al_ctr_add(al_ctr_block_acct(&sa->ctr, c), SLAB_corrupt_freelists, 1);
	c->err = -EFAULT;
}

/*
 * __slab_free: return a chain head..tail of cnt objects to a slab that is not
 * this CPU's. 0, -EBUSY (AL_NOSPIN and list_lock busy: nothing freed), or
 * -EINVAL (tail is already the slab's freelist head: a double free).
 */
static int __slab_free(struct slab_layer *sa, struct kmem_cache *s, struct al_ctx *c,
		       struct slab *slab, void *head, void *tail, unsigned cnt, unsigned flags)
{
	bool locked = false, discard = false;
	/* the freeing CPU's partial list: cpu_slab form, a CPU of our own */
	bool cpu_partial = s->cpu_partial && sa->form == F_CPU_SLAB && !(flags & AL_NOCPU);
	uint32_t inuse;
	uint64_t cn;
	void *prior;
	int ret;

	al_count(&sa->ctr, c, SLAB_free_slowpath, 1);
	for (;;) {
		prior = __atomic_load_n(&slab->freelist, __ATOMIC_ACQUIRE);
		cn = __atomic_load_n(&slab->counters, __ATOMIC_RELAXED);
		if (al_unlikely(prior == tail)) { /* already free: refuse before writing */
			if (locked)
				al_lock_release(&s->list_lock, c);
			return double_free(sa, c);
		}
		inuse = INUSE(cn) - cnt;
		if (!locked && !FROZEN(cn) && (!inuse || !prior) && (!cpu_partial || prior)) {
			/* full -> partial or -> empty: the list changes (a full slab
			 * goes to this CPU's partial list instead, without the lock) */
			ret = list_lock(sa, s, c, flags);
			if (ret) {
				al_count(&sa->ctr, c, SLAB_nospin_busy, 1);
				return ret;
			}
			locked = true;
			continue;
		}
		set_fp(tail, prior);
		if (cas2(&slab->freelist, prior, cn, head, COUNTERS(inuse, FROZEN(cn))))
			break;
		al_count(&sa->ctr, c, SLAB_slab_cmpxchg_retries, 1);
	}
	if (FROZEN(cn)) {
		al_count(&sa->ctr, c, SLAB_free_frozen, 1);
	} else if (!locked && !prior && cpu_partial) {
		put_cpu_partial(sa, s, c, slab);
	} else if (locked) {
		uint8_t on = __atomic_load_n(&slab->on_partial, __ATOMIC_RELAXED);

		if (on == 2 || (on != 1 && prior)) {
			/* on the orphan stack (the next list_lock holder lists it),
			 * or on (or bound for) a CPU partial list: left there */
		} else if (!inuse && s->nr_partial >= s->min_partial) {
			if (on)
				remove_partial(sa, s, slab);
			discard = true;
		} else if (!on) {
			add_partial(sa, s, slab);
		}
	}
	if (locked)
		al_lock_release(&s->list_lock, c);
	if (discard)
		discard_slab(sa, c, slab, flags);
	return 0;
}

/* ---- form=cpu_slab: ___slab_alloc ---- */

/*
 * get_partial_node (list_lock held): the first node partial slab becomes
 * the CPU slab (frozen, its freelist returned), and up to half a CPU
 * partial list more move to this CPU's partial list in the same hold.
 */
static void *get_partial_node(struct slab_layer *sa, struct kmem_cache *s, struct cpu_slab *cs,
			      struct al_ctx *c, struct slab **out)
{
	unsigned moved = 0;
	struct slab *slab;
	void *fl = NULL;

	while (s->partial_head != NOSLAB) {
		slab = frame(sa, s->partial_head);
		remove_partial(sa, s, slab);
		if (!fl) {
			fl = take_freelist(sa, c, slab, 1);
			*out = slab;
			al_count(&sa->ctr, c, SLAB_partial_gets, 1);
			if (!s->cpu_partial)
				break;
			continue;
		}
		cpu_partial_push(sa, s, cs, slab, false);
		al_count(&sa->ctr, c, SLAB_cpu_partial_node, 1);
		if (++moved > s->cpu_partial / 2)
			break;
	}
	return fl;
}

/*
 * Local lock held: make cs->freelist non-empty. false with c->err set when
 * no object can be had (trylock failed under AL_NOSPIN, or no memory).
 */
static bool refill_cpu_locked(struct slab_layer *sa, struct kmem_cache *s, struct cpu_slab *cs,
			      struct al_ctx *c, unsigned flags)
{
	struct slab *slab;
	void *fl = NULL;
	int ret;

	al_level_lock_assert_held(&cs->locked, c);
	if (cs->slab != NOSLAB) {
		slab = frame(sa, cs->slab);
		fl = take_freelist(sa, c, slab, -1);
		if (fl) {
			al_count(&sa->ctr, c, SLAB_get_freelist, 1);
			goto load;
		}
		/* The slab is full and now unfrozen (on no list): deactivate it. */
		al_count(&sa->ctr, c, SLAB_deactivations, 1);
		cs->slab = NOSLAB;
	}
	while (cs->partial != NOSLAB) { /* this CPU's partial slabs: no list_lock */
		slab = frame(sa, cs->partial);
		cs->partial = slab->next;
		cs->partial_nr--;
		slab->next = NOSLAB;
		__atomic_store_n(&slab->on_partial, 0, __ATOMIC_RELAXED);
		fl = take_freelist(sa, c, slab, -1); /* freeze_slab */
		if (fl) {
			al_count(&sa->ctr, c, SLAB_cpu_partial_alloc, 1);
			goto install;
		}
	}
	if (__atomic_load_n(&s->nr_partial, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&s->orphans, __ATOMIC_RELAXED) != NOSLAB) {
		ret = list_lock(sa, s, c, flags);
		if (ret) { /* get_partial_node: a failed trylock means "no partial slab" */
			al_count(&sa->ctr, c, SLAB_nospin_busy, 1);
			goto new_slab;
		}
		fl = get_partial_node(sa, s, cs, c, &slab);
		al_lock_release(&s->list_lock, c);
		if (fl)
			goto install;
	}
new_slab:
	slab = new_slab(sa, s, c, flags);
	if (!slab)
		return false;
	fl = take_freelist(sa, c, slab, 1);
install:
	cs->slab = (uint32_t)(slab - sa->frames);
load:
	cs->freelist = fl;
	cs->tid += sa->tid_step;
	return true;
}

static bool local_lock(struct slab_layer *sa, struct cpu_slab *cs, struct al_ctx *c, unsigned flags)
{
	if (al_unlikely(__atomic_load_n(&cs->locked, __ATOMIC_RELAXED))) {
		/* an interrupted lower level holds it on this CPU */
		if (flags & AL_NOSPIN) {
			al_count(&sa->ctr, c, SLAB_nospin_busy, 1);
			c->err = -EBUSY;
		} else {
			al_count(&sa->ctr, c, SLAB_nmi_deadlock, 1);
			c->err = -EDEADLK;
		}
		return false;
	}
	__atomic_store_n(&cs->locked, (int)c->level + 1, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return true;
}

static void local_unlock(struct cpu_slab *cs)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&cs->locked, 0, __ATOMIC_RELAXED);
}

static al_noinline void *alloc_slow(struct slab_layer *sa, struct kmem_cache *s,
				    struct cpu_slab *cs, struct al_ctx *c, unsigned flags)
{
	void *obj = NULL;

	if (!local_lock(sa, cs, c, flags))
		return NULL;
	AL_INJECT("slab.cpu_locked", c, (void *)(uintptr_t)s->size);
	al_count(&sa->ctr, c, SLAB_alloc_slowpath, 1);
	if (cs->freelist || refill_cpu_locked(sa, s, cs, c, flags)) {
		obj = cs->freelist;
		cs->freelist = get_fp(obj);
		cs->tid += sa->tid_step;
	}
	local_unlock(cs);
	return obj;
}

/* ---- form=sheaves (and AL_NOCPU): objects straight from partial slabs ---- */

/*
 * Take up to n objects from partial slabs, then new slabs, under list_lock
 * (refill_objects). Under AL_NOSPIN a busy list_lock means "no partial
 * slab", and a new slab's leftover objects go to the orphan stack when the
 * lock cannot be had. Returns how many; 0 with c->err set.
 */
static unsigned alloc_from_partial(struct slab_layer *sa, struct kmem_cache *s, struct al_ctx *c,
				   unsigned n, void **out, unsigned flags)
{
	unsigned got = 0, first, k;
	struct slab *slab;
	bool locked;
	void *fl, *rest, *t, *tail, *prior;
	uint64_t cn;

	locked = !list_lock(sa, s, c, flags);
	if (!locked)
		al_count(&sa->ctr, c, SLAB_nospin_busy, 1);
	while (got < n) {
		slab = NULL;
		if (locked && s->partial_head != NOSLAB) {
			slab = frame(sa, s->partial_head);
			remove_partial(sa, s, slab);
			al_count(&sa->ctr, c, SLAB_partial_gets, 1);
		} else {
			if (locked)
				al_lock_release(&s->list_lock, c);
			locked = false;
			slab = new_slab(sa, s, c, flags);
			if (!slab)
				break;
		}
		fl = take_freelist(sa, c, slab, 0);
		first = got;
		for (k = 0; fl && got < n; k++) {
			if (al_unlikely(k == slab->objects || get_fp(fl) == fl))
				goto corrupt;
			out[got++] = fl;
			fl = get_fp(fl);
		}
		if (!fl)
			continue; /* the slab is full: on no list */
		/* Objects left: give them back and keep the slab partial. The
		 * walk to the tail is bounded by what the slab holds. */
		rest = fl;
		for (tail = fl; get_fp(tail); tail = get_fp(tail))
			if (al_unlikely(++k >= slab->objects))
				goto corrupt;
		k = 1;
		for (t = rest; t != tail; t = get_fp(t))
			k++;
		for (;;) {
			prior = __atomic_load_n(&slab->freelist, __ATOMIC_ACQUIRE);
			cn = __atomic_load_n(&slab->counters, __ATOMIC_RELAXED);
			set_fp(tail, prior);
			if (cas2(&slab->freelist, prior, cn, rest, COUNTERS(INUSE(cn) - k, 0)))
				break;
			al_count(&sa->ctr, c, SLAB_slab_cmpxchg_retries, 1);
		}
		if (!locked)
			locked = !list_lock(sa, s, c, flags);
		if (locked)
			add_partial(sa, s, slab);
		else
			orphan_push(sa, s, slab);
		continue;
	corrupt:
		/* A cyclic freelist: the slab stays full, on no list, and every
		 * object taken from it in this call is dropped (a cycle repeats
		 * them): leaked, never handed out twice. */
		got = first;
		corrupt(sa, c);
		break;
	}
	if (locked)
		al_lock_release(&s->list_lock, c);
	if (!got && !c->err)
		c->err = -ENOMEM;
	return got;
}

/* ---- entry points ---- */

static al_noinline al_cold void *bad_size(struct slab_layer *sa, struct al_ctx *c)
{
	al_count(&sa->ctr, c, SLAB_einval, 1);
	c->err = -EINVAL;
	return NULL;
}

/* An allocation by `path` (SLOT_ALLOC_*) is done: one slot, one block. */
static inline void *alloc_done(struct slab_layer *sa, struct kmem_cache *s, struct al_ctx *c,
			       void *obj, unsigned flags, unsigned path)
{
	uint64_t *b;

	if (al_unlikely(!obj)) {
		if (!c->err)
			c->err = -ENOMEM;
		if (c->err == -ENOMEM)
			al_count(&sa->ctr, c, SLAB_enomem, 1);
		return NULL;
	}
	b = al_ctr_block_acct(&sa->ctr, c);
	al_ctr_add(b, SLAB_SLOT(path, s->cls), 1);
	if (al_unlikely(flags & AL_NOTRACE) && al_counters_on(&sa->ctr))
		al_ctr_add(b, SLAB_untraced_kmallocs, 1);
	obj_unpoison(s, obj);
	if (sa->zero || (flags & AL_ZERO))
		memset(obj, 0, s->size);
	if (s->idx >= KM_NR_CLASSES)
		memcg_post_alloc(sa, s, c, obj, flags);
	return obj;
}

static void *slab_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct slab_layer *sa = to_sa(a);
	int ci = km_class(size);
	struct kmem_cache *s;
	struct cpu_slab *cs;
	uint64_t tid;
	void *obj, *next;

	if (al_unlikely(ci < 0))
		return bad_size(sa, c);
	s = &sa->caches[ci + (al_unlikely(flags & AL_ACCOUNT) && sa->memcg_on ? KM_NR_CLASSES : 0)];
	if (al_unlikely(sa->form != F_CPU_SLAB || (flags & AL_NOCPU))) {
		obj = alloc_from_partial(sa, s, c, 1, &obj, flags) ? obj : NULL;
		if (obj)
			al_count(&sa->ctr, c, SLAB_alloc_partial, 1);
		return alloc_done(sa, s, c, obj, flags, SLOT_ALLOC_SLOW);
	}
	cs = &s->cpu[c->cpu];
	if (al_unlikely(c->level == AL_CTX_NMI && __atomic_load_n(&cs->locked, __ATOMIC_RELAXED)))
		return alloc_done(sa, s, c, alloc_slow(sa, s, cs, c, flags), flags,
				  SLOT_ALLOC_SLOW); /* fails */
redo:
	tid = __atomic_load_n(&cs->tid, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	obj = __atomic_load_n(&cs->freelist, __ATOMIC_RELAXED);
	if (al_unlikely(!obj || __atomic_load_n(&cs->slab, __ATOMIC_RELAXED) == NOSLAB))
		return alloc_done(sa, s, c, alloc_slow(sa, s, cs, c, flags), flags,
				  SLOT_ALLOC_SLOW);
	next = get_fp(obj);
	if (al_unlikely(!cas2_local(cs, obj, tid, next, tid + sa->tid_step))) {
		al_count(&sa->ctr, c, SLAB_cmpxchg_retries, 1);
		goto redo;
	}
	return alloc_done(sa, s, c, obj, flags, SLOT_ALLOC_FAST);
}

static int slab_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
			   void **out, unsigned flags)
{
	struct slab_layer *sa = to_sa(a);
	int ci = km_class(size);
	struct kmem_cache *s;
	struct cpu_slab *cs;
	unsigned got = 0, i;

	if (al_unlikely(ci < 0)) {
		bad_size(sa, c);
		return 0;
	}
	s = &sa->caches[ci + ((flags & AL_ACCOUNT) && sa->memcg_on ? KM_NR_CLASSES : 0)];
	al_count(&sa->ctr, c, SLAB_bulk_allocs, 1);
	if (!n)
		return 0;
	if (sa->form != F_CPU_SLAB || (flags & AL_NOCPU)) {
		got = alloc_from_partial(sa, s, c, n, out, flags);
		al_count(&sa->ctr, c, SLAB_alloc_partial, got);
	} else {
		/* __kmem_cache_alloc_bulk: pop under the local lock, refilling as needed. */
		cs = &s->cpu[c->cpu];
		if (!local_lock(sa, cs, c, flags))
			return 0;
		while (got < n) {
			if (!cs->freelist && !refill_cpu_locked(sa, s, cs, c, flags))
				break;
			out[got] = cs->freelist;
			cs->freelist = get_fp(out[got]);
			got++;
		}
		cs->tid += sa->tid_step;
		local_unlock(cs);
	}
	if (!got) {
		if (!c->err)
			c->err = -ENOMEM;
		return 0;
	}
	al_ctr_add(al_ctr_block_acct(&sa->ctr, c), SLAB_SLOT(SLOT_ALLOC_BULK, ci), got);
	al_track_unpoison_all(out, got, s->size);
	if (sa->zero || (flags & AL_ZERO))
		for (i = 0; i < got; i++)
			memset(out[i], 0, s->size);
	for (i = 0; s->idx >= KM_NR_CLASSES && i < got; i++)
		memcg_post_alloc(sa, s, c, out[i], flags);
	return (int)got;
}

/* Free a chain head..tail of cnt objects of one slab. 1 (pushed on the CPU
 * freelist), 0 (__slab_free), -EBUSY (NOSPIN), or -EINVAL when tail is
 * already the head of the freelist it would join. */
static int publish_chain(struct slab_layer *sa, struct al_ctx *c, struct slab *slab, void *head,
			 void *tail, unsigned cnt, unsigned flags)
{
	struct kmem_cache *s = &sa->caches[slab->cls - 1];
	uint32_t f = (uint32_t)(slab - sa->frames);
	struct cpu_slab *cs;
	uint64_t tid;
	void *fl;

	if (sa->form != F_CPU_SLAB || (flags & (AL_NOCPU | AL_SLOWPATH)))
		return __slab_free(sa, s, c, slab, head, tail, cnt, flags);
	cs = &s->cpu[c->cpu];
redo:
	tid = __atomic_load_n(&cs->tid, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&cs->slab, __ATOMIC_RELAXED) != f ||
	    (c->level != AL_CTX_TASK && __atomic_load_n(&cs->locked, __ATOMIC_RELAXED))) {
		if (flags & AL_NOSPIN) { /* kfree_nolock: 6.18 defers these */
			al_count(&sa->ctr, c, SLAB_nospin_busy, 1);
			return -EBUSY;
		}
		return __slab_free(sa, s, c, slab, head, tail, cnt, flags);
	}
	fl = __atomic_load_n(&cs->freelist, __ATOMIC_RELAXED);
	if (al_unlikely(fl == tail)) /* already free: refuse before writing */
		return double_free(sa, c);
	set_fp(tail, fl);
	if (al_unlikely(!cas2_local(cs, fl, tid, head, tid + sa->tid_step))) {
		al_count(&sa->ctr, c, SLAB_cmpxchg_retries, 1);
		goto redo;
	}
	return 1;
}

/* Poison (or unpoison) the bodies of the chain head.. of cnt objects. */
static void track_chain(const struct kmem_cache *s, void *head, unsigned cnt, bool poison)
{
#ifdef AL_TRACK_ASAN
	for (; cnt--; head = get_fp(head)) {
		if (poison)
			obj_poison(s, head);
		else
			obj_unpoison(s, head);
	}
#else
	(void)s;
	(void)head;
	(void)cnt;
	(void)poison;
#endif
}

/* publish_chain, with the objects poisoned before they are published (once
 * published another CPU may take them) and exposed again when refused. */
static int free_chain(struct slab_layer *sa, struct al_ctx *c, struct slab *slab, void *head,
		      void *tail, unsigned cnt, unsigned flags)
{
	const struct kmem_cache *s = &sa->caches[slab->cls - 1];
	int ret;

	al_assert(cnt && cnt <= slab->objects);
	track_chain(s, head, cnt, true);
	ret = publish_chain(sa, c, slab, head, tail, cnt, flags);
	if (al_unlikely(ret < 0))
		track_chain(s, head, cnt, false);
	return ret;
}

static int slab_free_flags(struct al_allocator *a, struct al_ctx *c, void *p, unsigned flags)
{
	struct slab_layer *sa = to_sa(a);
	struct slab *slab;
	unsigned cls;
	int ret;

	if (!p)
		return 0;
	slab = lookup(sa, p);
	if (al_unlikely(!slab)) {
		al_count(&sa->ctr, c, SLAB_invalid_frees, 1);
		return -EINVAL;
	}
	cls = sa->caches[slab->cls - 1].cls;	/* before: the free may discard the slab */
	memcg_free_hook(sa, c, slab, p, flags); /* a second free finds its slot cleared */
	ret = free_chain(sa, c, slab, p, p, 1, flags);
	if (al_unlikely(ret < 0))
		return ret;
	al_ctr_add(al_ctr_block_acct(&sa->ctr, c),
		   SLAB_SLOT(ret ? SLOT_FREE_FAST : SLOT_FREE_SLOW, cls), 1);
	return 0;
}

static int slab_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	return slab_free_flags(a, c, p, 0);
}

/* Whether p is the head of its slab's freelist or of this CPU's freelist
 * (already free: writing its first word would corrupt the list). */
static inline bool at_freelist_head(struct slab_layer *sa, const struct al_ctx *c,
				    struct slab *slab, const void *p)
{
	const struct kmem_cache *s = &sa->caches[slab->cls - 1];

	return __atomic_load_n(&slab->freelist, __ATOMIC_RELAXED) == p ||
	       (sa->form == F_CPU_SLAB &&
		__atomic_load_n(&s->cpu[c->cpu].freelist, __ATOMIC_RELAXED) == p);
}

/* A mark a batch writes into the first word of each object it takes, to
 * find an object repeated in the batch; non-canonical, so never a pointer. */
static inline uintptr_t batch_mark(void *const *ptrs)
{
	return (uintptr_t)ptrs ^ 0xa5a5000000000000ull;
}

/* kmem_cache_free_bulk: detached freelists of objects of one slab, with a
 * look-ahead of 3, as build_detached_freelist() (clobbers ptrs[]). Entries
 * that are not objects of ours, or repeat an earlier entry, are refused
 * (-EINVAL in c->err) and the rest freed: objects being freed are dead, so
 * a first pass marks each one's first word and a repeat finds its mark. */
static int slab_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n)
{
	struct slab_layer *sa = to_sa(a);
	unsigned size = n, i, refused = 0, cls;
	uintptr_t mark = batch_mark(ptrs);
	uint64_t *acct = al_ctr_block_acct(&sa->ctr, c);
	int ret;

	al_count(&sa->ctr, c, SLAB_bulk_frees, 1);
	for (i = 0; i < n; i++) {
		struct slab *slab;

		if (!ptrs[i])
			continue;
		slab = lookup(sa, ptrs[i]);
		if (al_unlikely(!slab)) {
			al_count(&sa->ctr, c, SLAB_invalid_frees, 1);
		} else if (al_unlikely((uintptr_t)get_fp(ptrs[i]) == mark ||
				       at_freelist_head(sa, c, slab, ptrs[i]))) {
			al_count(&sa->ctr, c, SLAB_double_frees, 1);
		} else {
			memcg_free_hook(sa, c, slab, ptrs[i], 0);
			set_fp(ptrs[i], (void *)mark);
			continue;
		}
		ptrs[i] = NULL;
		refused++;
	}
	while (size) {
		unsigned lookahead = 3, cnt = 1, next_size = 0;
		struct slab *slab;
		void *head, *tail, *obj;

		obj = ptrs[--size];
		if (!obj)
			continue;
		slab = lookup(sa, obj);
		head = tail = obj;
		ptrs[size] = NULL;
		while (size) {
			obj = ptrs[--size];
			if (!obj)
				continue;
			if (lookup(sa, obj) == slab) {
				set_fp(obj, head);
				head = obj;
				cnt++;
				ptrs[size] = NULL;
				continue;
			}
			if (!--lookahead)
				break;
			if (!next_size)
				next_size = size + 1;
		}
		if (!next_size)
			next_size = size;
		cls = sa->caches[slab->cls - 1].cls; /* before: the slab may be discarded */
		ret = free_chain(sa, c, slab, head, tail, cnt, 0);
		while (al_unlikely(ret == -EINVAL)) {
			/* tail became a freelist head meanwhile (a double free
			 * racing this one): refuse it alone, free the others */
			refused++;
			if (!--cnt)
				break;
			for (tail = head, i = 1; i < cnt; i++)
				tail = get_fp(tail);
			ret = free_chain(sa, c, slab, head, tail, cnt, 0);
		}
		if (ret >= 0 && cnt) {
			al_ctr_add(acct, SLAB_SLOT(SLOT_FREE_BULK, cls), cnt);
			if (ret)
				al_count(&sa->ctr, c, SLAB_free_fastpath_chains, 1);
		}
		size = next_size;
	}
	if (al_unlikely(refused))
		c->err = -EINVAL;
	return (int)(n - refused);
}

static size_t slab_usable_size(struct al_allocator *a, const void *p)
{
	struct slab *slab = lookup(to_sa(a), p);

	return slab ? to_sa(a)->caches[slab->cls - 1].size : 0;
}

static bool slab_owns(struct al_allocator *a, const void *p)
{
	return lookup(to_sa(a), p) != NULL;
}

/* deactivate_slab: give the CPU slab (and its freelist) back. */
static void flush_cpu_slab(struct slab_layer *sa, struct kmem_cache *s, struct cpu_slab *cs,
			   struct al_ctx *c)
{
	struct slab *slab;
	void *head = cs->freelist, *tail = NULL, *t, *prior;
	unsigned n = 0;
	uint32_t inuse;
	uint64_t cn;
	bool discard = false;

	if (cs->partial != NOSLAB) { /* this CPU's partial slabs go to the node list */
		uint32_t f = cs->partial;

		cs->partial = NOSLAB;
		cs->partial_nr = 0;
		put_partials(sa, s, c, f);
	}
	if (cs->slab == NOSLAB)
		return;
	slab = frame(sa, cs->slab);
	cs->slab = NOSLAB;
	cs->freelist = NULL;
	cs->tid += sa->tid_step;
	for (t = head; t; t = get_fp(t)) {
		if (al_unlikely(n == slab->objects)) {
			/* Longer than the slab: a cycle. Leak the CPU freelist
			 * (its objects stay counted in use) rather than walk it. */
			corrupt(sa, c);
			head = tail = NULL;
			n = 0;
			break;
		}
		tail = t;
		n++;
	}
	list_lock(sa, s, c, 0); /* drains may spin; the budget is generous */
	for (;;) {
		prior = __atomic_load_n(&slab->freelist, __ATOMIC_ACQUIRE);
		cn = __atomic_load_n(&slab->counters, __ATOMIC_RELAXED);
		inuse = INUSE(cn) - n;
		if (tail)
			set_fp(tail, prior);
		if (cas2(&slab->freelist, prior, cn, tail ? head : prior, COUNTERS(inuse, 0)))
			break;
		al_count(&sa->ctr, c, SLAB_slab_cmpxchg_retries, 1);
	}
	al_count(&sa->ctr, c, SLAB_deactivations, 1);
	if (!inuse && s->nr_partial >= s->min_partial)
		discard = true;
	else if (inuse < slab->objects)
		add_partial(sa, s, slab);
	al_lock_release(&s->list_lock, c);
	if (discard)
		discard_slab(sa, c, slab, 0);
}

static void slab_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct slab_layer *sa = to_sa(a);
	unsigned ci, cpu;

	if (sa->memcg_on && scope == AL_DRAIN_ALL)
		memcg_drain_all(&sa->memcg, a->ncpu);
	if (sa->form != F_CPU_SLAB)
		return;
	for (ci = 0; ci < NR_CACHES; ci++) {
		struct kmem_cache *s = &sa->caches[ci];

		for (cpu = 0; cpu < a->ncpu; cpu++) {
			struct cpu_slab *cs = &s->cpu[cpu];

			if (scope != AL_DRAIN_ALL && cpu != c->cpu)
				continue;
			if (scope != AL_DRAIN_ALL && !local_lock(sa, cs, c, AL_NOSPIN))
				continue;
			flush_cpu_slab(sa, s, cs, c);
			if (scope != AL_DRAIN_ALL)
				local_unlock(cs);
		}
	}
}

/* Sums of the per-class slots of the paths in mask (1 << SLOT_*): objects
 * and class bytes. */
static void sum_slots(const struct slab_layer *sa, unsigned mask, uint64_t *n, uint64_t *bytes)
{
	unsigned path, ci;

	*n = *bytes = 0;
	for (path = 0; path < SLOT_NR; path++)
		for (ci = 0; mask & (1u << path) && ci < KM_NR_CLASSES; ci++) {
			uint64_t v = al_counters_sum(&sa->ctr, SLAB_SLOT(path, ci));

			*n += v;
			*bytes += v * km_class_size[ci];
		}
}

#define ALLOC_PATHS (1u << SLOT_ALLOC_FAST | 1u << SLOT_ALLOC_SLOW | 1u << SLOT_ALLOC_BULK)
#define FREE_PATHS  (1u << SLOT_FREE_FAST | 1u << SLOT_FREE_SLOW | 1u << SLOT_FREE_BULK)

static int64_t bytes_held(const struct slab_layer *sa)
{
	uint64_t n, allocated, freed;

	sum_slots(sa, ALLOC_PATHS, &n, &allocated);
	sum_slots(sa, FREE_PATHS, &n, &freed);
	/* the obj_exts vectors are the slab layer's own metadata, not the caller's */
	return (int64_t)(allocated - freed) -
	       (int64_t)(al_counters_sum(&sa->ctr, SLAB_obj_exts_bytes) -
			 al_counters_sum(&sa->ctr, SLAB_obj_exts_bytes_freed));
}

/* What follows from the slots: counts by path, totals and bytes. */
static void report_slots(const struct slab_layer *sa, struct al_stats *out)
{
	const struct al_counters *k = &sa->ctr;
	uint64_t n, bytes, fast, single;

	sum_slots(sa, ALLOC_PATHS, &n, &bytes);
	al_stats_add(out, "kmallocs", n);
	al_stats_add(out, "bytes_allocated", bytes);
	sum_slots(sa, 1u << SLOT_ALLOC_FAST | 1u << SLOT_ALLOC_SLOW, &single, &bytes);
	al_stats_add(out, "traced_kmallocs", single - al_counters_sum(k, SLAB_untraced_kmallocs));
	sum_slots(sa, 1u << SLOT_ALLOC_FAST, &fast, &bytes);
	al_stats_add(out, "alloc_fastpath", fast);
	sum_slots(sa, FREE_PATHS, &n, &bytes);
	al_stats_add(out, "kfrees", n);
	al_stats_add(out, "bytes_freed", bytes);
	sum_slots(sa, 1u << SLOT_FREE_FAST, &fast, &bytes);
	al_stats_add(out, "free_fastpath", fast + al_counters_sum(k, SLAB_free_fastpath_chains));
}

static void slab_stats(struct al_allocator *a, struct al_stats *out)
{
	struct slab_layer *sa = to_sa(a);
	uint64_t partial = 0, slabs;
	unsigned ci;

	out->bytes_held = bytes_held(sa);
	if (!al_counters_on(&sa->ctr))
		return;
	report_slots(sa, out);
	al_counters_report(&sa->ctr, out);
	for (ci = 0; ci < NR_CACHES; ci++)
		partial += __atomic_load_n(&sa->caches[ci].nr_partial, __ATOMIC_RELAXED);
	slabs = al_counters_sum(&sa->ctr, SLAB_slab_allocs) -
		al_counters_sum(&sa->ctr, SLAB_slab_frees);
	al_stats_add_gauge(out, "slabs", slabs);
	al_stats_add_gauge(out, "partial_slabs", partial);
	al_stats_add_gauge(out, "bytes_committed",
			   __atomic_load_n(&sa->arena.committed, __ATOMIC_RELAXED));
}

#define CHECK_FAIL(...)                             \
	do {                                        \
		snprintf(err, errlen, __VA_ARGS__); \
		return -EFAULT;                     \
	} while (0)

/* 0, or (the slabs walked) + 1 when cs's partial list is not cs->partial_nr
 * unfrozen slabs of s with free objects, marked as on a CPU list. */
static uint32_t check_cpu_partial(struct slab_layer *sa, const struct kmem_cache *s,
				  const struct cpu_slab *cs, size_t nf)
{
	uint32_t n = 0, f;

	for (f = cs->partial; f != NOSLAB && n <= nf; f = frame(sa, f)->next, n++) {
		const struct slab *slab = frame(sa, f);

		if (slab->cls != s->idx + 1 || slab->on_partial != 3 || FROZEN(slab->counters) ||
		    !slab->freelist)
			return n + 1;
	}
	return n == cs->partial_nr ? 0 : n + 1;
}

static int slab_check(struct al_allocator *a, char *err, size_t errlen)
{
	struct slab_layer *sa = to_sa(a);
	size_t nf = __atomic_load_n(&sa->arena.used, __ATOMIC_RELAXED) >> FRAME_SHIFT, f;
	int64_t held = 0;
	unsigned ci, cpu;
	uint64_t bad = al_counters_sum(&sa->ctr, SLAB_corrupt_freelists);

	if (bad)
		CHECK_FAIL("%llu freelists were found cyclic (a double free of an object not at "
			   "the freelist head) and leaked",
			   (unsigned long long)bad);
	for (ci = 0; ci < NR_CACHES; ci++) {
		struct kmem_cache *s = &sa->caches[ci];
		uint32_t n = 0, p, prev = NOSLAB;

		for (p = s->partial_head; p != NOSLAB; prev = p, p = frame(sa, p)->next) {
			struct slab *slab = frame(sa, p);

			if (++n > nf)
				CHECK_FAIL("class %u: partial list longer than the arena (cycle?)",
					   s->size);
			if (slab->cls != ci + 1 || slab->on_partial != 1 || slab->prev != prev)
				CHECK_FAIL("class %u: partial slab %u has cls %u, on_partial %u, "
					   "prev %u (expected %u)",
					   s->size, p, slab->cls, slab->on_partial, slab->prev,
					   prev);
			if (FROZEN(slab->counters))
				CHECK_FAIL("class %u: partial slab %u is frozen", s->size, p);
		}
		if (n != s->nr_partial)
			CHECK_FAIL("class %u: %u slabs on the partial list, nr_partial %u", s->size,
				   n, s->nr_partial);
		for (cpu = 0; cpu < a->ncpu; cpu++) {
			struct cpu_slab *cs = &s->cpu[cpu];
			struct slab *slab;
			uint32_t k = 0;
			void *o;

			if (cs->locked)
				CHECK_FAIL("class %u cpu %u: local lock held", s->size, cpu);
			if (check_cpu_partial(sa, s, cs, nf))
				CHECK_FAIL("class %u cpu %u: CPU partial list of %u slabs is not "
					   "%u unfrozen slabs of the class with free objects",
					   s->size, cpu, check_cpu_partial(sa, s, cs, nf),
					   cs->partial_nr);
			if (cs->slab == NOSLAB) {
				if (cs->freelist)
					CHECK_FAIL("class %u cpu %u: freelist without a slab",
						   s->size, cpu);
				continue;
			}
			slab = frame(sa, cs->slab);
			if (slab->cls != ci + 1 || !FROZEN(slab->counters))
				CHECK_FAIL("class %u cpu %u: CPU slab %u is not a frozen slab of "
					   "the class",
					   s->size, cpu, cs->slab);
			for (o = cs->freelist; o; o = get_fp(o)) {
				if (lookup(sa, o) != slab || ++k > slab->objects)
					CHECK_FAIL("class %u cpu %u: CPU freelist has %p, not an "
						   "object of slab %u (or a cycle)",
						   s->size, cpu, o, cs->slab);
			}
			held -= (int64_t)k * s->size;
		}
	}
	for (f = 0; f < nf; f++) {
		struct slab *slab = frame(sa, (uint32_t)f);
		struct kmem_cache *s;
		uint32_t k = 0;
		void *o;

		if (!slab->cls)
			continue;
		s = &sa->caches[slab->cls - 1];
		for (o = slab->freelist; o; o = get_fp(o))
			if (lookup(sa, o) != slab || ++k > slab->objects)
				CHECK_FAIL(
					"slab %zu: freelist has %p, not one of its objects (or a "
					"cycle)",
					f, o);
		if (k + INUSE(slab->counters) != slab->objects)
			CHECK_FAIL("slab %zu: %u free + %u in use != %u objects", f, k,
				   INUSE(slab->counters), slab->objects);
		if (!FROZEN(slab->counters) && k && !slab->on_partial)
			CHECK_FAIL("slab %zu has %u free objects but is on no list", f, k);
		held += (int64_t)INUSE(slab->counters) * s->size;
	}
	held -= (int64_t)(al_counters_sum(&sa->ctr, SLAB_obj_exts_bytes) -
			  al_counters_sum(&sa->ctr, SLAB_obj_exts_bytes_freed));
	if (held != bytes_held(sa))
		CHECK_FAIL("slabs hold %lld bytes in use, counters say bytes_held %lld",
			   (long long)held, (long long)bytes_held(sa));
	return 0;
}

/* Free what init made; a part not made yet is skipped. */
static void slab_fini(struct al_allocator *a)
{
	struct slab_layer *sa = to_sa(a);

	/* The shadow outlives the mapping: leave nothing poisoned for the next user. */
	al_track_unpoison(sa->arena.base, __atomic_load_n(&sa->arena.used, __ATOMIC_RELAXED));
	al_arena_destroy(&sa->arena);
	al_counters_fini(&sa->ctr);
	al_meta_free(sa->memcg.stock, sa->stock_len);
	al_meta_free(sa->cpus, sa->cpus_len);
	al_meta_free(sa->caches, sa->caches_len);
	al_meta_free(sa->frames, sa->frames_len);
}

/* set_cpu_partial: objects a CPU partial list is meant to hold by object
 * size, as slabs: twice that many objects' worth (slub_set_cpu_partial). */
static unsigned cpu_partial_slabs(const struct kmem_cache *s)
{
	unsigned nr = s->size >= 4096 ? 6 : s->size >= 1024 ? 24 : s->size >= 256 ? 52 : 120;

	return (nr * 2 + s->objects - 1) / s->objects;
}

static void init_cache(struct kmem_cache *s, unsigned ci, unsigned min_objects, uint64_t budget,
		       bool timing)
{
	unsigned bytes = 4096, lg;

	s->size = km_class_size[ci];
	s->cls = ci;
	while (bytes < FRAME_SIZE && bytes / s->size < min_objects)
		bytes <<= 1;
	s->objects = bytes / s->size;
	s->recip = ((1ull << 32) + s->size - 1) / s->size;
	lg = al_fls64(s->size) - 1; /* min_partial = clamp(ilog2(size) / 2, 5, 10) */
	s->min_partial = lg / 2 < 5 ? 5 : lg / 2 > 10 ? 10 : lg / 2;
	s->partial_head = NOSLAB;
	s->orphans = NOSLAB;
	al_lock_init(&s->list_lock, budget, timing);
}

static int slab_init(struct al_allocator *a, const int64_t *p)
{
	struct slab_layer *sa = to_sa(a);
	struct al_allocator *below = a->below;
	unsigned ncpu = a->ncpu;
	unsigned ci, cpu;
	int ret = -ENOMEM;

	if (below)
		return -EINVAL;
	sa->form = (int)p[P_form];
	sa->zero = p[P_zero];
	sa->tid_step = 1;
	while (sa->tid_step < ncpu)
		sa->tid_step <<= 1;
	sa->free_frames = sa->pending = NOSLAB;
	al_lock_init(&sa->page_lock, (uint64_t)p[P_lock_budget], p[P_lock_timing]);
	sa->nframes = (size_t)p[P_arena_limit] >> FRAME_SHIFT;
	sa->frames_len = sa->nframes * sizeof(struct slab);
	sa->caches_len = sizeof(struct kmem_cache) * NR_CACHES;
	sa->cpus_len = sizeof(struct cpu_slab) * NR_CACHES * ncpu;
	sa->memcg_on = p[P_memcg];
	sa->memcg.depth = (unsigned)p[P_memcg_depth];
	sa->stock_len = sizeof(struct memcg_stock) * ncpu;
	sa->memcg.stock = al_meta_alloc(sa->stock_len);
	sa->frames = al_meta_alloc(sa->frames_len);
	sa->caches = al_meta_alloc(sa->caches_len);
	sa->cpus = al_meta_alloc(sa->cpus_len);
	if (!sa->frames || !sa->caches || !sa->cpus || !sa->memcg.stock)
		return ret;
	if (al_counters_init_desc(&sa->ctr, slab_counters, SLAB_NR, SLAB_EXTRA, ncpu))
		return ret;
	al_lock_count_in(&sa->page_lock, &sa->ctr, SLAB_page_lock_acquired);
	ret = al_arena_init(&sa->arena, sa->nframes << FRAME_SHIFT, FRAME_SIZE, false);
	if (ret)
		return ret;
	for (ci = 0; ci < NR_CACHES; ci++) {
		struct kmem_cache *s = &sa->caches[ci];

		init_cache(s, ci % KM_NR_CLASSES, (unsigned)p[P_min_objects],
			   (uint64_t)p[P_lock_budget], p[P_lock_timing]);
		s->idx = ci;
		al_lock_count_in(&s->list_lock, &sa->ctr, SLAB_list_lock_acquired);
		if (sa->form == F_CPU_SLAB && p[P_cpu_partial])
			s->cpu_partial = cpu_partial_slabs(s);
		s->cpu = &sa->cpus[(size_t)ci * ncpu];
		for (cpu = 0; cpu < ncpu; cpu++) {
			s->cpu[cpu].slab = NOSLAB;
			s->cpu[cpu].partial = NOSLAB;
			s->cpu[cpu].tid = cpu;
		}
	}
	return 0;
}

AL_LAYER(slab, struct slab_layer, slab_init, slab_fini,
	 (.alloc = slab_alloc, .free = slab_free, .alloc_bulk = slab_alloc_bulk,
	  .free_bulk = slab_free_bulk, .owns = slab_owns, .usable_size = slab_usable_size,
	  .drain = slab_drain, .stats = slab_stats, .check = slab_check,
	  .free_flags = slab_free_flags),
	 (.min_align = 8,
	  .doc = "kmalloc/kzalloc over SLUB-like slabs: 13 size classes, per-CPU slab with a "
		 "cmpxchg16b freelist (v6.18) or none (sheaves form), partial lists under "
		 "list_lock",
	  .features = AL_F_BULK | AL_F_OWNS | AL_F_USABLE | AL_F_KM_CLASSES,
	  .max_size = KM_MAX_SIZE, .nparams = P_NR, .params = slab_params,
	  .counters = slab_counters, .ncounters = SLAB_NR))
