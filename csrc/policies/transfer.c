/* SPDX-License-Identifier: MIT */
/*
 * transfer: per-order transfer caches shared by all CPUs, between a per-CPU
 * front (percpu) and the backend (the "transfer cache" design of seed 000;
 * tcmalloc's TransferCache with a fixed capacity).
 *
 *   order o: [lock][count][objects: batches x batch slots]
 *
 * alloc_bulk(size, n):  the front's refill. Peek at count without the lock
 *     (peek=true): fewer than n parked → straight to the backend, no transfer
 *     lock taken. Else lock; n parked → hand them over (remove hit); else
 *     unlock and ask the backend (remove miss).
 * free_bulk(ptrs, n):   the front's spill (one order per batch, as percpu
 *     spills). Peek: no room for n → skip the lock. Else lock; room → park
 *     them (insert hit). No room (insert miss): with full=bulk the whole batch
 *     goes to the backend in ONE free_bulk (one backend lock per batch, the
 *     same as spilling); with full=single the spill is refused (-ENOMEM) and
 *     the front frees the object alone: the reviewer's "two locks per free"
 *     v1 path, kept as parameters (peek=false, full=single).
 * alloc/free of single objects pass through to the backend.
 *
 * NMI context: every call may run in a handler (nmi_safe). The per-order
 * locks are arena_spinlock_t (lock=arena, lock.c): at NMI a refill or spill
 * takes its order's lock like any caller, and if the code it interrupted on
 * this CPU holds that lock it spins until the budget ends and the call is a
 * miss (the lock's lock_failed and lock_timeouts), as the header's nested acquisition
 * does. Behind percpu that does not happen: a nested call finds percpu's
 * guard held and comes here as a single alloc or free, which passes through.
 *
 * Lock order: transfer order lock -> backend locks, and only in drain (teardown);
 * the hot paths never hold a transfer lock while calling the backend.
 * Invariants: 0 <= count <= batches*batch; every parked object is a live
 * object of the backend of that order, and under ASan poisoned over its
 * class size (poisoned under the order lock as it is parked, unpoisoned by
 * whoever took it out, once it is theirs).
 * Cost: a hit is one uncontended per-order lock and a memcpy of n pointers,
 * counted with two adds to the CPU's counters block (the event and its
 * objects, per order); the lock counts in the same block.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "frontcache.h"

enum { P_batches, P_batch, P_orders, P_peek, P_full, P_lock_budget, P_lock, P_NR };
enum { XLOCK_ARENA, XLOCK_QUEUED };

enum { FULL_BULK = 0, FULL_SINGLE = 1 };

static const struct al_param_desc transfer_params[P_NR] = {
	[P_batches] = { "batches", AL_PARAM_INT, 8, 1, 1024, NULL,
			"capacity per order, in batches (T)" },
	[P_batch] = { "batch", AL_PARAM_INT, 8, 1, 512, NULL, "objects per batch" },
	[P_orders] = { "orders", AL_PARAM_INT, 8, 1, 16, NULL, "orders below this are cached" },
	[P_peek] = { "peek", AL_PARAM_BOOL, 1, 0, 1, NULL,
		     "peek at the count without the lock before taking it" },
	[P_full] = { "full", AL_PARAM_ENUM, FULL_BULK, 0, 1, "bulk,single",
		     "a full array: send the batch to the backend (bulk) or refuse it (single, "
		     "v1)" },
	[P_lock_budget] = { "lock_budget", AL_PARAM_NS, 250000000, 0, 10000000000ll, NULL,
			    "spin budget of the per-order locks" },
	[P_lock] = { "lock", AL_PARAM_ENUM, XLOCK_ARENA, 0, 1, "arena,queued",
		     "arena: arena_spinlock_t as the BPF header has it (no deadlock check, "
		     "4 queue nodes per CPU); queued: fails at once when its own CPU holds it "
		     "(EDEADLK)" },
};

/*
 * A hit counts its event and its objects in one block found once per call;
 * the objects go to per-order slots after the named counters, so the class
 * bytes (and bytes_held) are reported from them, never counted.
 */
#define TRANSFER_COUNTERS(C, D, P)                                                            \
	C(P, remove_hits, AL_CTR_KEY, "refills served from the transfer cache")               \
	C(P, remove_misses, AL_CTR_KEY, "refills passed to the backend")                      \
	C(P, insert_hits, AL_CTR_KEY, "spills parked in the transfer cache")                  \
	C(P, insert_misses, AL_CTR_KEY, "spills that found the array full")                   \
	C(P, peek_skips_remove, 0, "refills that skipped the lock: array too empty")          \
	C(P, peek_skips_insert, 0, "spills that skipped the lock: array too full")            \
	C(P, refused, AL_CTR_KEY, "spills refused (full=single)")                             \
	C(P, backend_flushes, AL_CTR_KEY, "batches sent to the backend in one free_bulk")     \
	C(P, backend_refills, AL_CTR_KEY, "refills taken from the backend in one alloc_bulk") \
	C(P, single_allocs, 0, "single allocations passed through")                           \
	C(P, single_frees, 0, "single frees passed through")                                  \
	D(P, bytes_allocated, 0, "", "class bytes handed out")                                \
	D(P, bytes_freed, 0, "", "class bytes taken back")                                    \
	AL_LOCK_COUNTERS(C, P, lock, "the per-order transfer locks")                          \
	AL_LOCK_REASON_COUNTERS(C, P, lock, "the per-order transfer locks")                   \
	D(P, objects_parked, AL_CTR_GAUGE, "", "objects in the transfer arrays")

AL_COUNTERS_DEFINE(TRANSFER_COUNTERS, XFER_, transfer_counters);

/* Objects of each cached class handed out and taken back, after the named counters. */
#define XFER_OUT_N(order) (XFER_NR + (order))
#define XFER_IN_N(order)  (XFER_NR + FC_ORDERS + (order))
#define XFER_EXTRA	  (2 * FC_ORDERS)

struct tc_order {
	struct al_lock lock; /* protects count and objects */
	uint32_t count;	     /* objects parked; read without the lock by the peek */
	void **objects;	     /* capacity slots */
};

struct transfer {
	struct al_allocator base; /* must be first */
	unsigned capacity;	  /* objects per order (batches x batch) */
	unsigned norders;	  /* cached orders */
	bool peek;		  /* lockless peek before locking */
	int full;		  /* FULL_BULK or FULL_SINGLE */
	struct tc_order *orders;  /* norders entries */
	void **slots;		  /* norders x capacity pointers */
	size_t slots_len;
	struct al_counters ctr;	      /* transfer_counters, then XFER_EXTRA slots */
	const struct al_index *index; /* the backend's object index, or NULL (index.h) */
	bool exact; /* fc_pow2_exact(backend): a refill's objects are of the class asked for */
};

/* The lockless peek reads a line other CPUs write under the lock: on
 * simulated CPUs a shared word (a sync point; the line moves when another
 * CPU wrote it last). */
static inline uint32_t peek_count(struct tc_order *t)
{
	al_shared(&t->count, false);
	return __atomic_load_n(&t->count, __ATOMIC_RELAXED);
}

static int transfer_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
			       void **out, unsigned flags)
{
	struct transfer *tc = (struct transfer *)a;
	unsigned order = fc_order(size);
	struct tc_order *t;
	uint64_t *blk;
	int got, cls;

	if (order >= tc->norders || n > tc->capacity)
		return al_alloc_bulk(a->below, c, size, n, out, flags);
	t = &tc->orders[order];
	blk = al_ctr_block(&tc->ctr, c);
	if (tc->peek && peek_count(t) < n) {
		al_ctr_add(blk, XFER_peek_skips_remove, 1);
		goto miss;
	}
	if (al_lock_acquire(&t->lock, c))
		goto miss; /* counted by the lock: lock_failed, by reason */
	al_assert(t->count <= tc->capacity);
	if (t->count >= n) {
		uint32_t left = t->count - n;

		al_sim_touch_if(&t->objects[left], AL_SIM_LOAD); /* the batch's lines */
		al_sim_touch_if(&t->objects[left + (n ? n - 1 : 0)], AL_SIM_LOAD);
		memcpy(out, &t->objects[left], n * sizeof(void *));
		__atomic_store_n(&t->count, left, __ATOMIC_RELAXED);
		al_shared_wrote(&t->count);
		al_lock_release(&t->lock, c);
		al_track_unpoison_all(out, n, fc_class_size(order));
		al_ctr_add(blk, XFER_remove_hits, 1);
		al_ctr_add(blk, XFER_OUT_N(order), n);
		got = (int)n;
		goto zero;
	}
	al_lock_release(&t->lock, c);
miss:
	al_ctr_add(blk, XFER_remove_misses, 1);
	got = al_alloc_bulk(a->below, c, fc_class_size(order), n, out, flags & ~AL_ZERO);
	if (got <= 0)
		return got;
	al_ctr_add(blk, XFER_backend_refills, 1);
	/* Each counted under the class it is of, as its free will be (a page
	 * allocator hands out pages of no cached class for any size); over a
	 * buddy that is the class asked for. */
	if (tc->exact) {
		al_ctr_add(blk, XFER_OUT_N(order), (uint64_t)got);
		goto zero;
	}
	for (int i = 0; i < got; i++) {
		cls = fc_class_of(a->below, tc->index, out[i], tc->norders);
		if (cls >= 0)
			al_ctr_add(blk, XFER_OUT_N(cls), 1);
	}
zero:
	if (flags & AL_ZERO)
		for (int i = 0; i < got; i++)
			memset(out[i], 0, size);
	return got;
}

static int transfer_free(struct al_allocator *a, struct al_ctx *c, void *p);

/* The cached order of a batch whose objects are all of one order (what a
 * per-CPU front spills), or -1 for a mixed or uncached batch. */
static int batch_order(struct transfer *tc, struct al_allocator *below, void **ptrs, unsigned n)
{
	int order = ptrs[0] ? fc_order_floor(fc_usable(below, tc->index, ptrs[0])) : -1;
	unsigned i;

	for (i = 1; i < n && order >= 0; i++)
		if (!ptrs[i] || fc_order_floor(fc_usable(below, tc->index, ptrs[i])) != order)
			order = -1;
	return order < (int)tc->norders ? order : -1;
}

/* Park a batch of one cached order in its array (buddy_transfer_put_batch),
 * or hand it to the backend when the array is full. */
static int put_batch(struct transfer *tc, struct al_ctx *c, void **ptrs, unsigned n, int order)
{
	struct al_allocator *below = tc->base.below;
	struct tc_order *t;
	uint64_t *blk;
	int ret;

	blk = al_ctr_block(&tc->ctr, c);
	if (n > tc->capacity)
		goto flush; /* can never fit: straight to the backend */
	t = &tc->orders[order];
	if (tc->peek && peek_count(t) + n > tc->capacity) {
		al_ctr_add(blk, XFER_peek_skips_insert, 1);
		goto full;
	}
	if (al_lock_acquire(&t->lock, c))
		goto full; /* counted by the lock: lock_failed, by reason */
	al_assert(t->count <= tc->capacity);
	if (t->count + n <= tc->capacity) {
		al_track_poison_all(ptrs, n, fc_class_size((unsigned)order));
		al_sim_touch_if(&t->objects[t->count], AL_SIM_STORE);
		al_sim_touch_if(&t->objects[t->count + (n ? n - 1 : 0)], AL_SIM_STORE);
		memcpy(&t->objects[t->count], ptrs, n * sizeof(void *));
		__atomic_store_n(&t->count, t->count + n, __ATOMIC_RELAXED);
		al_shared_wrote(&t->count);
		al_lock_release(&t->lock, c);
		al_ctr_add(blk, XFER_insert_hits, 1);
		al_ctr_add(blk, XFER_IN_N(order), n);
		return (int)n;
	}
	al_lock_release(&t->lock, c);
full:
	al_ctr_add(blk, XFER_insert_misses, 1);
	if (tc->full == FULL_SINGLE) {
		al_ctr_add(blk, XFER_refused, 1);
		return -ENOMEM;
	}
flush:
	ret = al_free_bulk_sized(below, c, ptrs, n, fc_class_size((unsigned)order));
	if (ret < 0)
		return ret;
	al_ctr_add(blk, XFER_backend_flushes, 1);
	al_ctr_add(blk, XFER_IN_N(order), n);
	return ret;
}

static int transfer_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n)
{
	struct transfer *tc = (struct transfer *)a;
	int order, ret, first = 0;
	unsigned i, done = 0;

	if (!n)
		return 0;
	order = batch_order(tc, a->below, ptrs, n);
	if (order >= 0)
		return put_batch(tc, c, ptrs, n, order);
	/* Mixed sizes (a caller other than a per-CPU front): one by one; the
	 * refused ones (-EINVAL) are left, said in c->err, the rest freed. */
	for (i = 0; i < n; i++) {
		ret = transfer_free(a, c, ptrs[i]);
		if (!ret)
			done++;
		else if (!first)
			first = ret;
	}
	if (!first)
		return (int)n;
	if (!done && first != -EINVAL)
		return first; /* nothing freed: the caller may retry the batch */
	c->err = first;
	return (int)done;
}

/* A per-CPU front's spill: one class, each object read when it was freed to
 * the front, so the batch's order is not read again per object. */
static int transfer_free_bulk_sized(struct al_allocator *a, struct al_ctx *c, void **ptrs,
				    unsigned n, size_t size)
{
	struct transfer *tc = (struct transfer *)a;
	int order = fc_order_floor(size);

	if (!n)
		return 0;
	if (order < 0 || order >= (int)tc->norders)
		return transfer_free_bulk(a, c, ptrs, n);
	for (unsigned i = 0; i < n; i++)
		al_assert_expensive(ptrs[i] && fc_order_floor(fc_usable(a->below, tc->index,
									ptrs[i])) == order);
	return put_batch(tc, c, ptrs, n, order);
}

static void *transfer_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct transfer *tc = (struct transfer *)a;
	unsigned order = fc_order(size);
	uint64_t *blk = al_ctr_block(&tc->ctr, c);
	void *p;
	int cls;

	al_ctr_add(blk, XFER_single_allocs, 1);
	p = al_alloc(a->below, c, order >= tc->norders ? size : fc_class_size(order), flags);
	cls = fc_class_of(a->below, tc->index, p, tc->norders); /* as transfer_free will count it */
	if (cls >= 0)
		al_ctr_add(blk, XFER_OUT_N(cls), 1);
	return p;
}

static int transfer_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct transfer *tc = (struct transfer *)a;
	struct al_allocator *below = a->below;
	int order, ret;

	if (!p)
		return 0;
	order = fc_order_floor(fc_usable(below, tc->index, p));
	ret = al_free(below, c, p);
	if (!ret) {
		uint64_t *blk = al_ctr_block(&tc->ctr, c);

		al_ctr_add(blk, XFER_single_frees, 1);
		if (order >= 0 && order < (int)tc->norders)
			al_ctr_add(blk, XFER_IN_N(order), 1);
	}
	return ret;
}

static void transfer_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct transfer *tc = (struct transfer *)a;
	unsigned o;

	if (scope != AL_DRAIN_ALL)
		return; /* shared by all CPUs: nothing belongs to one CPU */
	for (o = 0; o < tc->norders; o++) {
		struct tc_order *t = &tc->orders[o];

		if (!peek_count(t) || al_lock_acquire(&t->lock, c))
			continue;
		/* A batch the backend refuses (a transient failure) goes one by
		 * one; only what still fails stays parked. */
		__atomic_store_n(
			&t->count,
			fc_give_back_cached(a->below, c, t->objects, t->count, fc_class_size(o)),
			__ATOMIC_RELAXED);
		al_lock_release(&t->lock, c);
	}
}

/* Class bytes of a per-order object slot array. */
static uint64_t sum_bytes(const struct transfer *tc, unsigned first)
{
	uint64_t bytes = 0;
	unsigned o;

	for (o = 0; o < tc->norders; o++)
		bytes += al_counters_sum(&tc->ctr, first + o) * fc_class_size(o);
	return bytes;
}

static void transfer_stats(struct al_allocator *a, struct al_stats *out)
{
	struct transfer *tc = (struct transfer *)a;
	uint64_t parked = 0, parked_bytes = 0, in, gone;
	unsigned o;

	for (o = 0; o < tc->norders; o++) {
		uint32_t n = peek_count(&tc->orders[o]);

		parked += n;
		parked_bytes += n * fc_class_size(o);
	}
	if (!al_counters_on(&tc->ctr)) {
		/* Every parked object is allocated from the backend's view. */
		out->bytes_held = al_below_bytes_held(a) - (int64_t)parked_bytes;
		return;
	}
	in = sum_bytes(tc, XFER_OUT_N(0));
	gone = sum_bytes(tc, XFER_IN_N(0));
	out->bytes_held = (int64_t)(in - gone);
	al_stats_add(out, "bytes_allocated", in);
	al_stats_add(out, "bytes_freed", gone);
	al_counters_report(&tc->ctr, out);
	al_stats_add_gauge(out, "objects_parked", parked);
}

static int transfer_check(struct al_allocator *a, char *err, size_t errlen)
{
	struct transfer *tc = (struct transfer *)a;
	struct al_allocator *below = a->below;
	unsigned o, i;

	for (o = 0; o < tc->norders; o++) {
		struct tc_order *t = &tc->orders[o];

		if (t->count > tc->capacity) {
			snprintf(err, errlen, "order %u: %u parked > capacity %u", o, t->count,
				 tc->capacity);
			return -EFAULT;
		}
		for (i = 0; i < t->count; i++)
			if (fc_order_floor(below->ops->usable_size(below, t->objects[i])) !=
			    (int)o) {
				snprintf(err, errlen,
					 "order %u: parked %p is not a live order-%u object", o,
					 t->objects[i], o);
				return -EFAULT;
			}
	}
	return 0;
}

/* Free what init made; a part not made yet is skipped. */
static void transfer_fini(struct al_allocator *a)
{
	struct transfer *tc = (struct transfer *)a;

	al_counters_fini(&tc->ctr);
	al_meta_free(tc->slots, tc->slots_len);
	al_meta_free(tc->orders, sizeof(struct tc_order) * tc->norders);
}

/* Every per-order lock, in index order: all or none. */
static int transfer_fork_lock(struct al_allocator *a, struct al_ctx *c)
{
	struct transfer *t = (struct transfer *)a;

	return al_lock_acquire_all(&t->orders[0].lock, sizeof(t->orders[0]), t->norders, c);
}

static void transfer_fork_unlock(struct al_allocator *a, struct al_ctx *c)
{
	struct transfer *t = (struct transfer *)a;

	al_lock_release_all(&t->orders[0].lock, sizeof(t->orders[0]), t->norders, c);
}

static int transfer_init(struct al_allocator *a, const int64_t *p)
{
	struct transfer *tc = (struct transfer *)a;
	struct al_allocator *below = a->below;
	unsigned ncpu = a->ncpu;
	unsigned o;

	if (!below || !below->ops->usable_size)
		return -EINVAL;
	tc->capacity = (unsigned)(p[P_batches] * p[P_batch]);
	tc->norders = (unsigned)p[P_orders];
	tc->peek = p[P_peek];
	tc->full = (int)p[P_full];
	tc->index = fc_index_of(below);
	tc->exact = fc_pow2_exact(below);
	tc->orders = al_meta_alloc(sizeof(struct tc_order) * tc->norders);
	tc->slots_len = (size_t)tc->norders * tc->capacity * sizeof(void *);
	tc->slots = al_meta_alloc(tc->slots_len);
	if (!tc->orders || !tc->slots ||
	    al_counters_init_desc(&tc->ctr, transfer_counters, XFER_NR, XFER_EXTRA, ncpu))
		return -ENOMEM;
	for (o = 0; o < tc->norders; o++) {
		al_lock_init(&tc->orders[o].lock, (uint64_t)p[P_lock_budget], false);
		al_lock_count_in(&tc->orders[o].lock, &tc->ctr, XFER_lock_acquired);
		al_lock_count_reasons_in(&tc->orders[o].lock, XFER_lock_timeouts);
		if (p[P_lock] == XLOCK_ARENA)
			al_lock_set_arena(&tc->orders[o].lock);
		tc->orders[o].objects = tc->slots + (size_t)o * tc->capacity;
	}
	return 0;
}

/* destroy hands every cached object back while the layer below exists. */
AL_LAYER_SHUTDOWN(
	transfer, struct transfer, transfer_init, al_layer_drain_all, transfer_fini,
	(.alloc = transfer_alloc, .free = transfer_free, .alloc_bulk = transfer_alloc_bulk,
	 .free_bulk = transfer_free_bulk, .free_bulk_sized = transfer_free_bulk_sized,
	 .owns = al_below_owns, .usable_size = al_below_usable_size,
	 .index = al_below_index, /* parked objects are the backend's, unchanged */
	 .drain = transfer_drain, .stats = transfer_stats, .check = transfer_check,
	 .fork_lock = transfer_fork_lock, .fork_unlock = transfer_fork_unlock),
	(.doc = "per-order transfer caches of whole batches shared between CPUs, under per-order "
		"locks (seed 000 'transfer cache')",
	 .features = AL_F_BACKEND | AL_F_OWNS_BELOW | AL_F_NEEDS_DISTINCT | AL_F_BULK | AL_F_OWNS |
		     AL_F_USABLE | AL_F_NMI_SAFE | AL_F_PASSES_SIZE,
	 .max_size = 0, .nparams = P_NR, .params = transfer_params, .counters = transfer_counters,
	 .ncounters = XFER_NR))
