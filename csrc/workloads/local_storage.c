/* SPDX-License-Identifier: MIT */
/*
 * local-storage-create: models bench local-storage-create (reference §4.4)
 * and the storage paths of kernel/bpf/bpf_local_storage.c (§4.2-§4.3).
 *
 * One cycle = create `batch_size` owners, then destroy them, as the bench
 * creates a batch of sockets (or threads) and then closes (joins) them all.
 *
 * Create (bpf_local_storage_update with F_CREATE, the owner's first element):
 *   - owner_work=real: a real AF_INET6 datagram socket (storage_type=socket)
 *     or a real thread that returns at once (task), as the bench; the BPF
 *     program runs inside that creation in the kernel, so the model creates
 *     the storage right after it. owner_work=none: the allocators alone.
 *   - charge the element (socket: sk_omem_charge, an atomic add and a check
 *     against optmem_max on the owner; task storage has no charge callback);
 *   - allocate the selem (elem_size = 72 + value_size: the kernel's
 *     struct bpf_local_storage_elem with its data on the second cache line),
 *     zeroed;
 *   - charge and allocate the storage struct (176 bytes), zeroed;
 *   - link the element into the storage and into a map bucket under that
 *     bucket's lock (an al_lock, rqspinlock-like: it can fail, counted);
 *   - publish the storage with a compare-exchange on the owner's pointer;
 *     losing the race unlinks, uncharges and frees both: -EAGAIN, counted
 *     (the bench never races; the C tests provoke it through the
 *     "local_storage.publish" injection point).
 * Other maps (other_maps=N): N more storage maps of the same type whose own
 * programs give every owner an element too, as another BPF service on the
 * machine does: after the bench's create, each calls
 * bpf_local_storage_update on an owner that has storage already, so it
 * charges and allocates only its element (bpf_selem_alloc), then under the
 * storage's lock links it into its own map (bpf_selem_link_map, that map's
 * bucket lock) and into the storage (bpf_selem_link_storage_nolock). Their
 * elements go with the owner's storage. A failure there is the other
 * program's (other_errs), not the bench's create.
 * Destroy (bpf_local_storage_destroy, reuse_now): under the storage's lock
 * unlink every element (and from its bucket under the bucket lock),
 * uncharge, free it; then free the storage; then close the socket / join the
 * thread.
 *
 * The free path of each era (free_path=auto picks it from the policy's top
 * layer; each can be forced):
 *   kfree_rcu  (kzalloc era, socket storage): both objects go to the RCU
 *              model's kvfree_rcu batches, freed with one free_bulk per batch
 *              after a grace period;
 *   reuse_now  (bpf_ma era, task storage): freed at once (bpf_mem_cache_free);
 *   call_rcu   (kmalloc_nolock era): one RCU callback per object, which
 *              calls kfree_nolock after the grace period.
 * Grace periods end when every worker has passed a quiescent point (between
 * cycles) and gp_latency has elapsed; callbacks run at the end of the
 * queuing worker's cycle, or with rcu_nocb at the end of the next worker's
 * (remote frees; with one producer there is no other CPU and they stay
 * local). Allocations pass AL_MAYSLEEP for socket storage (the bench's
 * sleepable LSM program: GFP_KERNEL, so bpf_ma may kmalloc directly when its
 * cache is empty) and not for task storage (a tracepoint program).
 *
 * Results (al_result_value, metrics "wl.<name>"): creates, creates_per_s
 * (mean over `sample`-long samples taken by worker 0, over all workers:
 * the bench's "creates M ± S k/s"; a run shorter than one sample gives the
 * rate over its whole span), creates_per_s_sd (n - 1; NaN below two
 * samples), samples,
 * ns_per_create, create_errs, eagain, charges, uncharges, lock_fails,
 * owner_errs, other_elems, other_errs, and the free-path counts. The model counts only the
 * allocations it makes (slab.traced_kmallocs: those the kernel's kmalloc
 * tracepoint would see); the kmallocs a real socket's or thread's creation
 * makes inside the real kernel are not the model's to count, and no figure
 * measured in a seed stands in for them here. Timing: batch = the create phase per allocation and
 * the destroy phase (plus callbacks) per free; per_op_sum = the allocator
 * calls alone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "alloclab/alloclab.h"
#include "../core/cpu.h"
#include "retry.h"

#define LS_STORAGE_SIZE	 176	   /* sizeof(struct bpf_local_storage) */
#define LS_ELEM_HDR	 72	   /* offsetof(struct bpf_local_storage_elem, sdata.data) */
#define LS_OPTMEM_MAX	 131072	   /* net.core.optmem_max */
#define LS_MAX_SAMPLES	 4096	   /* samples kept per run */
#define LS_CACHE_IDX	 0	   /* the map's slot in storage->cache[] */
#define LS_BUCKET_BUDGET 250000000 /* rqspinlock timeout: a quarter second */

enum { ST_SOCKET, ST_TASK };
enum { OW_NONE, OW_REAL };
enum { FP_AUTO, FP_KFREE_RCU, FP_REUSE_NOW, FP_CALL_RCU };
enum { TX_RCU, TX_INLINE };

#define LS_TASK_CHUNK 256 /* task records allocated at a time per worker */

enum {
	P_storage_type,
	P_batch_size,
	P_value_size,
	P_owner_work,
	P_free_path,
	P_gp_latency,
	P_rcu_nocb,
	P_charge,
	P_sample,
	P_task_exit,
	P_other_maps,
	P_reaper,
	P_NR
};

static const struct al_param_desc ls_params[P_NR] = {
	[P_storage_type] = { "storage_type", AL_PARAM_ENUM, ST_SOCKET, 0, 1, "socket,task",
			     "socket (sk_storage, sleepable LSM program) or task storage "
			     "(task_storage, tracepoint program)" },
	[P_batch_size] = { "batch_size", AL_PARAM_INT, 32, 1, 4096, NULL,
			   "owners created, then destroyed, per cycle (the bench's --batch-size)" },
	[P_value_size] = { "value_size", AL_PARAM_SIZE, 64, 1, 4096, NULL,
			   "map value bytes: the element is 72 + value_size bytes" },
	[P_owner_work] = { "owner_work", AL_PARAM_ENUM, OW_NONE, 0, 1, "none,real",
			   "real: open and close a real AF_INET6 UDP socket (or create and "
			   "join a real thread) per owner, as the bench; none: allocators alone" },
	[P_free_path] = { "free_path", AL_PARAM_ENUM, FP_AUTO, 0, 3,
			  "auto,kfree_rcu,reuse_now,call_rcu",
			  "auto: by the policy's top layer (bpf_ma: reuse_now, nolock: call_rcu "
			  "+ kfree_nolock, else kfree_rcu)" },
	[P_gp_latency] = { "gp_latency", AL_PARAM_NS, 0, 0, 10000000000ll, NULL,
			   "a grace period lasts at least this long (and until every worker "
			   "passed a quiescent point)" },
	[P_rcu_nocb] = { "rcu_nocb", AL_PARAM_BOOL, 0, 0, 1, NULL,
			 "RCU callbacks run on the next worker's CPU (remote frees)" },
	[P_charge] = { "charge", AL_PARAM_BOOL, 1, 0, 1, NULL,
		       "charge and uncharge socket memory (sk_omem_charge against optmem_max)" },
	[P_sample] = { "sample", AL_PARAM_NS, 1000000000, 1000000, 60000000000ll, NULL,
		       "length of one creates/s sample (the bench: 1 s)" },
	[P_task_exit] = { "task_exit", AL_PARAM_ENUM, TX_RCU, 0, 1, "rcu,inline",
			  "task storage: rcu frees it with the task_struct, in an RCU callback "
			  "(delayed_put_task_struct -> free_task -> bpf_task_storage_free) run "
			  "by whichever worker runs it (with rcu_nocb, the next one); inline: by "
			  "the creating worker at the join" },
	[P_other_maps] = { "other_maps", AL_PARAM_INT, 0, 0, 15, NULL,
			   "other storage maps whose programs give every owner an element too "
			   "(another BPF service on the machine): each adds one element "
			   "allocation per create, linked into the owner's storage" },
	[P_reaper] = { "reaper", AL_PARAM_BOOL, 1, 0, 1, NULL,
		       "task storage with task_exit=rcu: the exited tasks go to a reaper, a "
		       "model CPU of its own on another real CPU where one is free, which "
		       "queues their delayed_put_task_struct and frees their storage there, "
		       "as a bench's children exit on other CPUs than their creator" },
};

struct ls_owner;
struct ls_storage;

/* struct bpf_local_storage_elem */
struct ls_selem {
	struct ls_selem *map_next;	  /* map_node: bucket list */
	struct ls_selem **map_pprev;	  /* ... */
	struct ls_selem *snode_next;	  /* snode: storage list */
	struct ls_selem **snode_pprev;	  /* ... */
	struct ls_storage *local_storage; /* the owner's storage */
	struct al_rcu_head rcu;		  /* call_rcu */
	uint32_t map_idx;		  /* the model's: which map (0: the bench's), kept */
	uint32_t hole;			  /* in the kernel's 8-byte hole (its sdata.smap says) */
	struct ls_map *smap;		  /* sdata.smap, on the second cache line */
	unsigned char data[];		  /* sdata.data: the value */
};

_Static_assert(offsetof(struct ls_selem, data) == LS_ELEM_HDR, "selem layout");

/* struct bpf_local_storage */
struct ls_storage {
	void *cache[16];	/* per-map lookup cache */
	struct ls_map *smap;	/* the map that created it */
	struct ls_selem *list;	/* elements (hlist head) */
	struct ls_owner *owner; /* the socket or task */
	struct al_rcu_head rcu; /* call_rcu */
	int lock;		/* raw spinlock */
	int pad;		/* unused */
};

_Static_assert(sizeof(struct ls_storage) == LS_STORAGE_SIZE, "storage layout");

struct ls_owner {
	struct ls_storage *storage; /* *owner_storage(): published by cmpxchg */
	int64_t omem;		    /* sk_omem_alloc */
	int fd;			    /* the real socket, or -1 */
	int thread_ok;		    /* a real thread to join */
	pthread_t th;		    /* the real thread */
};

/* The part of a task_struct that outlives the thread: its storage, freed by
 * the RCU callback that drops the last reference. */
struct ls_task {
	struct al_rcu_head rcu;	    /* delayed_put_task_struct */
	struct ls_storage *storage; /* task->bpf_storage */
	struct ls_map *m;	    /* the map */
	unsigned home;		    /* the worker whose pool it returns to */
	struct ls_task *next;	    /* pool link */
};

struct ls_task_chunk {
	struct ls_task_chunk *next;	 /* chunks, freed at teardown */
	struct ls_task t[LS_TASK_CHUNK]; /* records */
};

struct ls_bucket {
	struct al_lock lock;   /* the bucket lock (can fail) */
	struct ls_selem *head; /* elements */
};

/* Per-worker results, reset when the measured phase starts. */
struct ls_count {
	uint64_t creates, create_errs, eagain, charges, uncharges, charge_fails, lock_fails;
	uint64_t owner_errs, kfree_rcu, call_rcu, reuse_now, callbacks_run;
	uint64_t other_elems, other_errs; /* other_maps' elements made, and failed */
	uint64_t task_puts, task_frees, task_frees_remote; /* delayed_put_task_struct */
	uint64_t cycle_ticks;				   /* measured cycles' time */
};

struct ls_worker {
	struct ls_owner *owners;      /* batch_size */
	size_t owners_len;	      /* mapping length */
	struct ls_count n;	      /* this worker's counts */
	int measuring;		      /* counts were reset for the measured phase */
	int free_path;		      /* FP_* resolved for the run's policy */
	uint64_t first_t;	      /* sampler (worker 0): first measured cycle's start */
	uint64_t end_t;		      /* sampler: last measured cycle's end */
	uint64_t last_t;	      /* sampler: last sample time */
	uint64_t last_creates;	      /* sampler: creates_total then */
	struct ls_task *tasks;	      /* free task records (this worker only) */
	struct ls_task *returned;     /* records other workers' callbacks freed (lock-free) */
	struct ls_task_chunk *chunks; /* this worker's record memory */
} __attribute__((aligned(AL_CACHELINE)));

/* struct bpf_local_storage_map plus the run's shared state. */
struct ls_map {
	struct al_allocator *a;	   /* the run's allocator */
	struct al_defer *rcu;	   /* the RCU model's domain */
	int free_path;		   /* P_free_path (FP_AUTO: each worker resolves it) */
	int storage_type;	   /* ST_* */
	int owner_work;		   /* OW_* */
	int task_exit;		   /* TX_* (task storage; socket storage: inline) */
	bool charge;		   /* P_charge */
	unsigned batch;		   /* P_batch_size */
	size_t elem_size;	   /* 72 + value_size */
	unsigned flags;		   /* AL_ZERO, plus AL_MAYSLEEP for sockets */
	uint64_t sample_ticks;	   /* P_sample */
	unsigned nworkers;	   /* workers */
	unsigned nbuckets;	   /* per map: a power of two, >= 2 */
	unsigned nmaps;		   /* 1 + other_maps */
	struct ls_bucket *buckets; /* nbuckets per map, map after map */
	size_t buckets_len;	   /* bytes */
	struct ls_worker *w;	   /* per worker, then the reaper's slot */
	size_t w_len;		   /* bytes */
	unsigned nslots;	   /* nworkers, + 1 with a reaper */
	/* the reaper (task storage, task_exit=rcu, reaper=true) */
	bool reaper;		     /* it runs: CPU nworkers is its */
	struct ls_task *exited;	     /* lock-free stack of tasks handed to it */
	sem_t reaper_wake;	     /* posted after a hand-over, and to stop it */
	pthread_mutex_t reaper_lock; /* held while it works; report takes it */
	pthread_t reaper_thread;     /* the thread */
	bool reaper_started;	     /* reaper_thread runs */
	bool reaper_sim;	     /* it is a daemon of the simulated CPUs (al_sim_daemon) */
	uintptr_t hash_base;	     /* simulated CPUs: buckets hash the offset from it */
	int reaper_stop;	     /* asks it to exit */
	int reaper_pinned;	     /* it has a real CPU no worker uses */
	struct al_ctx reaper_ctx;    /* its CPU's context (the thread's, or main's in ls_pause) */
	int measuring;		     /* the measured phase started (its counts reset) */
	uint64_t creates_total;	     /* creates by all workers (atomic, measured) */
	unsigned nsamples;	     /* samples taken */
	double samples[LS_MAX_SAMPLES]; /* creates/s */
};

static inline struct ls_count *cnt(struct ls_map *m, const struct al_ctx *c)
{
	return &m->w[c->cpu].n;
}

static inline struct ls_bucket *select_bucket(struct ls_map *m, const struct ls_selem *s)
{
	uintptr_t key = (uintptr_t)s;
	uint64_t h;

	/* On simulated CPUs the arena's base (mmap, moved by ASLR) must not
	 * decide anything: hash the offset from the first element seen. */
	if (al_unlikely(__atomic_load_n(&al_sim_active, __ATOMIC_RELAXED))) {
		uintptr_t zero = 0;

		__atomic_compare_exchange_n(&m->hash_base, &zero, key, false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
		key -= __atomic_load_n(&m->hash_base, __ATOMIC_RELAXED);
	}
	h = (uint64_t)key * 0x9E3779B97F4A7C15ull;

	return &m->buckets[(size_t)s->map_idx * m->nbuckets + ((h >> 32) & (m->nbuckets - 1))];
}

static inline void raw_lock(int *l)
{
	while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
		al_cpu_relax();
}

static inline void raw_unlock(int *l)
{
	__atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

/* ---- charging ---- */

static int mem_charge(struct ls_map *m, struct al_ctx *c, struct ls_owner *o, size_t size)
{
	if (!m->charge || m->storage_type != ST_SOCKET)
		return 0; /* task storage has no charge callback */
	if (__atomic_load_n(&o->omem, __ATOMIC_RELAXED) + (int64_t)size >= LS_OPTMEM_MAX) {
		cnt(m, c)->charge_fails++;
		return -ENOMEM;
	}
	__atomic_fetch_add(&o->omem, (int64_t)size, __ATOMIC_RELAXED);
	cnt(m, c)->charges++;
	return 0;
}

static void mem_uncharge(struct ls_map *m, struct al_ctx *c, struct ls_owner *o, size_t size)
{
	if (!m->charge || m->storage_type != ST_SOCKET)
		return;
	__atomic_fetch_sub(&o->omem, (int64_t)size, __ATOMIC_RELAXED);
	cnt(m, c)->uncharges++;
}

/* ---- allocation and the three free paths ---- */

static inline void *ls_alloc(struct al_worker *w, struct ls_map *m, size_t size)
{
	uint64_t t0 = w->timing == AL_TIMING_PER_OP_SUM ? al_ticks() : 0;
	void *p = al_alloc(m->a, &w->ctx, size, m->flags);

	if (w->timing == AL_TIMING_PER_OP_SUM)
		w->alloc_ticks += al_ticks() - t0;
	w->alloc_ops++;
	return p;
}

static void selem_free_cb(struct al_rcu_head *h, struct al_ctx *x)
{
	struct ls_selem *s = (struct ls_selem *)((char *)h - offsetof(struct ls_selem, rcu));
	struct ls_map *m = s->smap;
	struct ls_count *n = cnt(m, x);

	n->callbacks_run++;
	al_free(m->a, x, s); /* kfree_nolock */
}

static void storage_free_cb(struct al_rcu_head *h, struct al_ctx *x)
{
	struct ls_storage *st = (struct ls_storage *)((char *)h - offsetof(struct ls_storage, rcu));
	struct ls_map *m = st->smap;

	cnt(m, x)->callbacks_run++;
	al_free(m->a, x, st);
}

/* Free an object by the era's path, on the CPU of c. 0 or the allocator's
 * error. */
static int free_obj(struct ls_map *m, struct al_ctx *c, void *p, struct al_rcu_head *h,
		    void (*cb)(struct al_rcu_head *, struct al_ctx *))
{
	int ret;

	switch (m->w[c->cpu].free_path) {
	case FP_REUSE_NOW:
		ret = al_free(m->a, c, p);
		cnt(m, c)->reuse_now++;
		break;
	case FP_CALL_RCU:
		ret = al_call_rcu(m->rcu, c, h, cb);
		cnt(m, c)->call_rcu++;
		break;
	default:
		ret = al_kfree_rcu(m->rcu, c, m->a, p);
		cnt(m, c)->kfree_rcu++;
		break;
	}
	return ret;
}

/* free_obj by a worker, timed and counted as its free. */
static int ls_free(struct al_worker *w, struct ls_map *m, void *p, struct al_rcu_head *h,
		   void (*cb)(struct al_rcu_head *, struct al_ctx *))
{
	uint64_t t0 = w->timing == AL_TIMING_PER_OP_SUM ? al_ticks() : 0;
	int ret = free_obj(m, &w->ctx, p, h, cb);

	if (w->timing == AL_TIMING_PER_OP_SUM)
		w->free_ticks += al_ticks() - t0;
	w->free_ops++;
	return ret;
}

/* ---- owners ---- */

static void *noop_thread(void *arg)
{
	return arg;
}

static int owner_open(struct ls_map *m, struct al_worker *w, struct ls_owner *o)
{
	o->fd = -1;
	o->thread_ok = 0;
	if (m->owner_work != OW_REAL)
		return 0;
	if (m->storage_type == ST_SOCKET) {
		o->fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (o->fd < 0)
			o->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0); /* no IPv6 here */
		if (o->fd >= 0)
			return 0;
	} else if (!pthread_create(&o->th, NULL, noop_thread, NULL)) {
		o->thread_ok = 1;
		return 0;
	}
	cnt(m, &w->ctx)->owner_errs++;
	return -EAGAIN;
}

static void owner_close(struct ls_owner *o)
{
	if (o->fd >= 0)
		close(o->fd);
	if (o->thread_ok)
		pthread_join(o->th, NULL);
	o->fd = -1;
	o->thread_ok = 0;
}

/* Link s into its bucket (0, or the lock's error). */
static int bucket_link(struct ls_map *m, struct al_ctx *c, struct ls_selem *s)
{
	struct ls_bucket *b = select_bucket(m, s);
	int ret = al_lock_acquire(&b->lock, c);

	if (ret) {
		cnt(m, c)->lock_fails++;
		return ret;
	}
	s->map_next = b->head;
	if (b->head)
		b->head->map_pprev = &s->map_next;
	s->map_pprev = &b->head;
	b->head = s;
	al_lock_release(&b->lock, c);
	return 0;
}

static void bucket_unlink(struct ls_map *m, struct al_ctx *c, struct ls_selem *s)
{
	struct ls_bucket *b = select_bucket(m, s);

	while (al_lock_acquire(&b->lock, c)) /* unlinking cannot give up: retry */
		cnt(m, c)->lock_fails++;
	*s->map_pprev = s->map_next;
	if (s->map_next)
		s->map_next->map_pprev = s->map_pprev;
	al_lock_release(&b->lock, c);
}

/* An allocation of a create failed: the create fails, as the kernel's
 * does (-ENOMEM to the program); a refusal by design (an empty bpf_ma
 * cache, a held guard) is also counted under its mechanism
 * (wl.alloc_refused_empty, ...). */
static int ls_alloc_failed(struct al_worker *w, bool *failed)
{
	int err = w->ctx.err ? w->ctx.err : -ENOMEM;
	const char *metric = wl_refusal_metric(err);

	if (metric)
		al_worker_metric(w, metric, 1, AL_METRIC_SUM);
	*failed = true;
	return err;
}

/*
 * Another map's program on an owner that has storage: bpf_local_storage_update
 * with F_CREATE finds the storage, allocates the element outside its lock,
 * then under the storage's lock links it into that map and the storage.
 * Its failure is that program's (other_errs).
 */
static void other_elem(struct al_worker *w, struct ls_map *m, struct ls_owner *o,
		       struct ls_storage *st, unsigned idx)
{
	struct al_ctx *c = &w->ctx;
	struct ls_selem *s;
	bool failed;

	if (mem_charge(m, c, o, m->elem_size))
		goto err;
	s = ls_alloc(w, m, m->elem_size);
	if (!s) {
		ls_alloc_failed(w, &failed);
		mem_uncharge(m, c, o, m->elem_size);
		goto err;
	}
	s->smap = m;
	s->map_idx = idx;
	s->local_storage = st;
	raw_lock(&st->lock);
	if (bucket_link(m, c, s)) {
		raw_unlock(&st->lock);
		mem_uncharge(m, c, o, m->elem_size);
		ls_free(w, m, s, &s->rcu, selem_free_cb);
		goto err;
	}
	s->snode_next = st->list; /* hlist_add_head_rcu(&selem->snode, &storage->list) */
	if (st->list)
		st->list->snode_pprev = &s->snode_next;
	s->snode_pprev = &st->list;
	st->list = s;
	st->cache[idx] = &s->smap;
	raw_unlock(&st->lock);
	cnt(m, c)->other_elems++;
	return;
err:
	cnt(m, c)->other_errs++;
}

/* The first element for a new owner. 0, or an error (counted). */
static int create(struct al_worker *w, struct ls_map *m, struct ls_owner *o)
{
	struct al_ctx *c = &w->ctx;
	struct ls_count *n = cnt(m, c);
	struct ls_storage *st, *expected = NULL;
	struct ls_selem *s;
	bool alloc_failed = false; /* its -EAGAIN is a refusal, not a lost race */
	unsigned idx;
	int ret;

	o->storage = NULL;
	o->omem = 0;
	if (owner_open(m, w, o))
		return -EAGAIN;
	ret = mem_charge(m, c, o, m->elem_size);
	if (ret)
		goto out_err;
	s = ls_alloc(w, m, m->elem_size);
	if (!s) {
		ret = ls_alloc_failed(w, &alloc_failed);
		mem_uncharge(m, c, o, m->elem_size);
		goto out_err;
	}
	s->smap = m;
	s->map_idx = 0;
	ret = mem_charge(m, c, o, LS_STORAGE_SIZE);
	if (ret)
		goto out_selem;
	st = ls_alloc(w, m, LS_STORAGE_SIZE);
	if (!st) {
		ret = ls_alloc_failed(w, &alloc_failed);
		mem_uncharge(m, c, o, LS_STORAGE_SIZE);
		goto out_selem;
	}
	st->smap = m;
	st->owner = o;
	st->list = s; /* hlist_add_head_rcu(&selem->snode, &storage->list) */
	s->snode_next = NULL;
	s->snode_pprev = &st->list;
	s->local_storage = st;
	ret = bucket_link(m, c, s);
	if (ret)
		goto out_storage;
	AL_INJECT("local_storage.publish", c, &o->storage);
	if (!__atomic_compare_exchange_n(&o->storage, &expected, st, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		/* another CPU's storage won: undo everything (-EAGAIN) */
		bucket_unlink(m, c, s);
		n->eagain++;
		ret = -EAGAIN;
		goto out_storage;
	}
	st->cache[LS_CACHE_IDX] = &s->smap; /* SDATA(selem) */
	n->creates++;
	for (idx = 1; idx < m->nmaps; idx++)
		other_elem(w, m, o, st, idx);
	return 0;

out_storage:
	mem_uncharge(m, c, o, LS_STORAGE_SIZE);
	ls_free(w, m, st, &st->rcu, storage_free_cb);
out_selem:
	mem_uncharge(m, c, o, m->elem_size);
	ls_free(w, m, s, &s->rcu, selem_free_cb);
out_err:
	if (ret != -EAGAIN || alloc_failed)
		n->create_errs++;
	owner_close(o);
	return ret;
}

/* bpf_local_storage_destroy(reuse_now) on the CPU of c: unlink and free
 * every element, then the storage; w (the worker, for its timing) or NULL
 * (an RCU callback). o: the owner to uncharge, NULL for task storage. */
static int storage_destroy(struct ls_map *m, struct al_ctx *c, struct al_worker *w,
			   struct ls_owner *o, struct ls_storage *st)
{
	struct ls_selem *s, *next;
	int ret = 0, r;

	raw_lock(&st->lock);
	for (s = st->list; s; s = next) {
		next = s->snode_next;
		bucket_unlink(m, c, s);
		mem_uncharge(m, c, o, m->elem_size);
		r = w ? ls_free(w, m, s, &s->rcu, selem_free_cb)
		      : free_obj(m, c, s, &s->rcu, selem_free_cb);
		ret = ret ? ret : r;
	}
	st->list = NULL;
	raw_unlock(&st->lock);
	mem_uncharge(m, c, o, LS_STORAGE_SIZE);
	r = w ? ls_free(w, m, st, &st->rcu, storage_free_cb)
	      : free_obj(m, c, st, &st->rcu, storage_free_cb);
	return ret ? ret : r;
}

/* A free task record of worker lw, or NULL (no memory). */
static struct ls_task *task_get(struct ls_worker *lw)
{
	struct ls_task_chunk *ch;
	struct ls_task *t;
	unsigned i;

	if (!lw->tasks) /* what other workers' callbacks gave back, taken whole */
		lw->tasks = __atomic_exchange_n(&lw->returned, NULL, __ATOMIC_ACQUIRE);
	if (!lw->tasks) {
		ch = al_meta_alloc(sizeof(*ch));
		if (!ch)
			return NULL;
		ch->next = lw->chunks;
		lw->chunks = ch;
		for (i = 0; i < LS_TASK_CHUNK; i++) {
			ch->t[i].next = lw->tasks;
			lw->tasks = &ch->t[i];
		}
	}
	t = lw->tasks;
	lw->tasks = t->next;
	return t;
}

/*
 * delayed_put_task_struct: the grace period after the task exited ended; the
 * last reference goes and free_task frees the task's storage
 * (bpf_task_storage_free: bpf_local_storage_destroy with reuse_now) on the
 * CPU running the callback, which need not be the one that created it.
 */
static void put_task_cb(struct al_rcu_head *h, struct al_ctx *x)
{
	struct ls_task *t = (struct ls_task *)((char *)h - offsetof(struct ls_task, rcu));
	struct ls_map *m = t->m;
	struct ls_worker *home = &m->w[t->home];
	struct ls_count *n = cnt(m, x);

	n->task_frees++;
	if (x->cpu != t->home)
		n->task_frees_remote++;
	storage_destroy(m, x, NULL, NULL, t->storage);
	t->next = __atomic_load_n(&home->returned, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(&home->returned, &t->next, t, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED))
		;
}

/* The task exited (joined): release_task's put_task_struct_rcu_user queues
 * delayed_put_task_struct. false when no record could be had (the caller
 * frees the storage at once). */
static bool task_put(struct al_worker *w, struct ls_map *m, struct ls_storage *st)
{
	struct ls_task *t = task_get(&m->w[w->id]);

	if (!t)
		return false;
	t->storage = st;
	t->m = m;
	t->home = w->id;
	if (m->reaper) { /* the task exits on the reaper's CPU */
		t->next = __atomic_load_n(&m->exited, __ATOMIC_RELAXED);
		while (!__atomic_compare_exchange_n(&m->exited, &t->next, t, true, __ATOMIC_RELEASE,
						    __ATOMIC_RELAXED))
			;
		if (!t->next && m->reaper_sim) /* the list was empty: it may be asleep */
			al_sim_wakeup(&m->reaper_wake);
		else if (!t->next)
			sem_post(&m->reaper_wake);
		cnt(m, &w->ctx)->task_puts++;
		return true;
	}
	if (al_call_rcu(m->rcu, &w->ctx, &t->rcu, put_task_cb)) {
		t->next = m->w[w->id].tasks;
		m->w[w->id].tasks = t;
		return false;
	}
	cnt(m, &w->ctx)->task_puts++;
	return true;
}

/* The owner goes: close the socket / join the thread; its storage goes with
 * it (socket: bpf_sk_storage_free at once) or with the task_struct, one
 * grace period later (task_exit=rcu). */
static int destroy(struct al_worker *w, struct ls_map *m, struct ls_owner *o)
{
	struct ls_storage *st = o->storage;
	int ret = 0;

	o->storage = NULL;
	owner_close(o);
	if (!st || st->owner != o) /* a failed publish may have left another storage */
		return 0;
	if (m->storage_type == ST_TASK && m->task_exit == TX_RCU && task_put(w, m, st))
		return 0;
	ret = storage_destroy(m, &w->ctx, w, o, st);
	return ret;
}

/* ---- the cycle ---- */

static void sample(struct ls_map *m, struct ls_worker *lw, uint64_t now)
{
	uint64_t total = __atomic_load_n(&m->creates_total, __ATOMIC_RELAXED);

	if (!lw->last_t) {
		lw->first_t = lw->last_t = now;
		lw->last_creates = total;
		return;
	}
	if (now - lw->last_t < m->sample_ticks)
		return;
	if (m->nsamples < LS_MAX_SAMPLES)
		m->samples[m->nsamples++] = (double)(total - lw->last_creates) * 1e9 /
					    al_ticks_to_ns((double)(now - lw->last_t));
	lw->last_t = now;
	lw->last_creates = total;
}

static int ls_cycle(struct al_worker *w)
{
	struct ls_map *m = w->shared;
	struct ls_worker *lw = &m->w[w->id];
	uint64_t t0, t1, t2, before;
	unsigned i;
	int ret, fatal = 0;

	if (w->measuring && !lw->measuring) { /* the measured phase starts */
		memset(&lw->n, 0, sizeof(lw->n));
		lw->measuring = 1;
		__atomic_store_n(&m->measuring, 1, __ATOMIC_RELAXED); /* for the reaper */
	}
	before = lw->n.creates;
	t0 = al_ticks();
	if (w->id == 0 && lw->measuring)
		sample(m, lw, t0);
	for (i = 0; i < m->batch; i++) {
		ret = create(w, m, &lw->owners[i]);
		if (ret == -EINVAL && !fatal) /* misconfigured (a size the policy refuses) */
			fatal = ret;
	}
	t1 = al_ticks();
	for (i = 0; i < m->batch; i++)
		if (destroy(w, m, &lw->owners[i]) && !fatal)
			fatal = -EFAULT;
	al_defer_poll(m->rcu, &w->ctx); /* this CPU's due RCU callbacks */
	t2 = al_ticks();
	if (w->timing == AL_TIMING_BATCH) {
		w->alloc_ticks += t1 - t0;
		w->free_ticks += t2 - t1;
	}
	lw->n.cycle_ticks += t2 - t0;
	if (lw->measuring) {
		__atomic_fetch_add(&m->creates_total, lw->n.creates - before, __ATOMIC_RELAXED);
		lw->end_t = t2;
	}
	if (fatal) {
		snprintf(w->err, w->errlen,
			 fatal == -EINVAL
				 ? "allocation of a %zu-byte element or a %d-byte storage "
				   "refused (EINVAL): value_size too large for the policy"
				 : "a free was refused (%zu/%d): not an object of the policy",
			 m->elem_size, LS_STORAGE_SIZE);
		return fatal;
	}
	return 0;
}

/* ---- the reaper: where exited tasks are freed ---- */

/*
 * In the kernel a task's storage goes with its task_struct: the exiting
 * task's CPU queues delayed_put_task_struct with call_rcu, and that CPU
 * runs it after the grace period (bpf_task_storage_free). The bench's
 * children exit on other CPUs than the one that created them, so the
 * frees fill another CPU's caches (bpf_ma: its free list, its free_bulk
 * and call_rcu_tasks_trace) while the creator's CPU refills. The reaper is
 * that other CPU: a model CPU of its own (CPU nworkers of the stack), a
 * thread pinned to a real CPU no worker uses where there is one. Workers
 * hand it their exited tasks (a lock-free stack; the push that finds it
 * empty wakes it); it queues their callbacks on its CPU and runs what is
 * due, waking every millisecond while grace periods are pending. It holds
 * reaper_lock while it works; the engine takes it (ls_pause) around its
 * counter snapshots and the report, so they are read while nothing moves.
 * At each snapshot the workers wait at a barrier, and the reaper's CPU
 * finishes what they handed it (every exited task's callback runs), so a
 * phase's counts hold its own tasks' frees whatever the reaper's timing:
 * the warmup's before the measured phase starts, the measured phase's
 * before it ends.
 */
static void reaper_take(struct ls_map *m, struct al_ctx *rc)
{
	struct ls_task *t = __atomic_exchange_n(&m->exited, NULL, __ATOMIC_ACQUIRE), *next;

	for (; t; t = next) {
		next = t->next;
		if (al_call_rcu(m->rcu, rc, &t->rcu, put_task_cb))
			put_task_cb(&t->rcu, rc); /* no batch memory: at once */
	}
}

static void *reaper_main(void *arg)
{
	struct ls_map *m = arg;
	struct timespec ts;

	al_ctx_set_current(&m->reaper_ctx);
	if (m->reaper_pinned) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(al_cpu_nth(m->nworkers), &set);
		if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set))
			__atomic_store_n(&m->reaper_pinned, 0, __ATOMIC_RELAXED);
	}
	while (!__atomic_load_n(&m->reaper_stop, __ATOMIC_ACQUIRE)) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		sem_timedwait(&m->reaper_wake, &ts);
		pthread_mutex_lock(&m->reaper_lock);
		reaper_take(m, &m->reaper_ctx);
		al_defer_poll(m->rcu, &m->reaper_ctx); /* seal, and run what is due here */
		pthread_mutex_unlock(&m->reaper_lock);
	}
	al_ctx_set_current(NULL);
	return NULL;
}

/* The reaper on simulated CPUs: a daemon on its model CPU that sleeps in
 * virtual time as the thread sleeps in real time. */
static void *reaper_sim_main(void *arg)
{
	struct ls_map *m = arg;

	while (!__atomic_load_n(&m->reaper_stop, __ATOMIC_ACQUIRE)) {
		al_sim_sleep_on(&m->reaper_wake, 1000000);
		pthread_mutex_lock(&m->reaper_lock);
		reaper_take(m, &m->reaper_ctx);
		al_defer_poll(m->rcu, &m->reaper_ctx);
		pthread_mutex_unlock(&m->reaper_lock);
	}
	return NULL;
}

/* The reaper's thread, at prepare (the allocator is there): 0 or -errno. */
static int reaper_start(struct ls_map *m)
{
	int ret;

	al_ctx_init(&m->reaper_ctx, m->nworkers);
	if (!al_sim_daemon(reaper_sim_main, m, &m->reaper_ctx)) {
		m->reaper_sim = m->reaper_started = true;
		return 0;
	}
	m->reaper_pinned = al_cpus_usable() > m->nworkers && al_cpu_nth(m->nworkers) >= 0 &&
			   al_cpu_nth(m->nworkers) < CPU_SETSIZE;
	ret = pthread_create(&m->reaper_thread, NULL, reaper_main, m);
	if (ret)
		return -ret;
	m->reaper_started = true;
	return 0;
}

/* Stop the reaper, then free what it had not taken yet (main thread). */
static void reaper_stop(struct ls_map *m)
{
	struct al_ctx rc;

	if (m->reaper_started && m->reaper_sim) {
		__atomic_store_n(&m->reaper_stop, 1, __ATOMIC_RELEASE);
		al_sim_wakeup(&m->reaper_wake);
		al_sim_join_daemons();
		m->reaper_started = false;
	} else if (m->reaper_started) {
		__atomic_store_n(&m->reaper_stop, 1, __ATOMIC_RELEASE);
		sem_post(&m->reaper_wake);
		pthread_join(m->reaper_thread, NULL);
		m->reaper_started = false;
	}
	al_ctx_init(&rc, m->nworkers);
	reaper_take(m, &rc);
}

/* ---- setup and teardown ---- */

static bool wants_reaper(const int64_t *p)
{
	return p[P_storage_type] == ST_TASK && p[P_task_exit] == TX_RCU && p[P_reaper];
}

static unsigned ls_model_cpus(const int64_t *p, unsigned nworkers)
{
	return nworkers + (wants_reaper(p) ? 1 : 0);
}

static int ls_check_params(const int64_t *p, unsigned nworkers, char *err, size_t errlen)
{
	if (wants_reaper(p) && nworkers >= AL_MAX_CPUS) {
		snprintf(err, errlen,
			 "reaper=true needs a model CPU of its own: at most %u producers, not %u "
			 "(or reaper=false)",
			 AL_MAX_CPUS - 1, nworkers);
		return -EINVAL;
	}
	return 0;
}

static int ls_setup(const int64_t *p, unsigned nworkers, void **shared)
{
	struct al_defer_params dp = { .irq_mode = AL_IRQ_WORK_INLINE,
				      .gp_latency_ns = (uint64_t)p[P_gp_latency],
				      .nocb = p[P_rcu_nocb] };
	struct ls_map *m = al_meta_alloc(sizeof(*m));
	unsigned i;
	int ret;

	if (!m)
		return -ENOMEM;
	m->storage_type = (int)p[P_storage_type];
	m->owner_work = (int)p[P_owner_work];
	m->task_exit = (int)p[P_task_exit];
	m->free_path = (int)p[P_free_path];
	m->charge = p[P_charge];
	m->batch = (unsigned)p[P_batch_size];
	m->elem_size = LS_ELEM_HDR + (size_t)p[P_value_size];
	/* bpf_map_kzalloc / bpf_map_kmalloc_nolock / bpf_mem_alloc: __GFP_ACCOUNT */
	m->flags = AL_ZERO | AL_ACCOUNT | (m->storage_type == ST_SOCKET ? AL_MAYSLEEP : 0);
	al_clock_init();
	m->sample_ticks = (uint64_t)((double)p[P_sample] * al_clock.ticks_per_ns);
	m->nworkers = nworkers;
	m->reaper = wants_reaper(p);
	m->nslots = nworkers + (m->reaper ? 1 : 0);
	for (m->nbuckets = 2; m->nbuckets < nworkers; m->nbuckets <<= 1)
		;
	m->nmaps = 1 + (unsigned)p[P_other_maps];
	m->buckets_len = sizeof(struct ls_bucket) * m->nbuckets * m->nmaps;
	m->w_len = sizeof(struct ls_worker) * m->nslots;
	m->buckets = al_meta_alloc(m->buckets_len);
	m->w = al_meta_alloc(m->w_len);
	ret = -ENOMEM;
	if (!m->buckets || !m->w)
		goto out_free;
	/* Not counted in any counters (no al_lock_count_in): the workload reports
	 * its own lock_fails, nothing reports the locks' statistics. */
	for (i = 0; i < m->nbuckets * m->nmaps; i++)
		al_lock_init(&m->buckets[i].lock, LS_BUCKET_BUDGET, false);
	ret = al_defer_create(m->nslots, &dp, &m->rcu);
	if (ret)
		goto out_free;
	if (m->reaper) {
		if (sem_init(&m->reaper_wake, 0, 0)) {
			al_defer_destroy(m->rcu);
			ret = -ENOMEM;
			goto out_free;
		}
		pthread_mutex_init(&m->reaper_lock, NULL);
	}
	*shared = m;
	return 0;

out_free:
	al_meta_free(m->w, m->w_len);
	al_meta_free(m->buckets, m->buckets_len);
	al_meta_free(m, sizeof(*m));
	return ret;
}

/* FP_* for the policy whose top layer is `top` (free_path=auto). */
static int resolve_free_path(const struct ls_map *m, const char *top)
{
	return m->free_path != FP_AUTO	? m->free_path
	       : !strcmp(top, "bpf_ma") ? FP_REUSE_NOW
	       : !strcmp(top, "nolock") ? FP_CALL_RCU
					: FP_KFREE_RCU;
}

static int ls_worker_init(struct al_worker *w)
{
	struct ls_map *m = w->shared;
	struct ls_worker *lw = &m->w[w->id];
	const char *top = w->a->desc ? w->a->desc->name : w->a->ops->name;
	unsigned i;

	lw->owners_len = sizeof(struct ls_owner) * m->batch;
	lw->owners = al_meta_alloc(lw->owners_len);
	if (!lw->owners)
		return -ENOMEM;
	for (i = 0; i < m->batch; i++)
		lw->owners[i].fd = -1;
	/* Every worker resolves the same values; the allocator is the run's. */
	__atomic_store_n(&m->a, w->a, __ATOMIC_RELAXED);
	lw->free_path = resolve_free_path(m, top);
	w->priv = lw;
	return 0;
}

/* The reaper's slot and thread: the policy is known now. */
static int ls_prepare(void *shared, struct al_allocator *a, struct al_ctx *c, char *err,
		      size_t errlen)
{
	struct ls_map *m = shared;
	int ret;

	(void)c;
	if (!m->reaper)
		return 0;
	m->a = a;
	m->w[m->nworkers].free_path = resolve_free_path(m, a->desc ? a->desc->name : a->ops->name);
	ret = reaper_start(m);
	if (ret)
		snprintf(err, errlen, "the reaper's thread could not start: %s", al_strerror(ret));
	return ret;
}

static void ls_worker_fini(struct al_worker *w)
{
	struct ls_map *m = w->shared;
	struct ls_worker *lw = w->priv;
	unsigned i;

	if (!lw)
		return;
	for (i = 0; i < m->batch; i++) /* a failed cycle may leave owners */
		destroy(w, m, &lw->owners[i]);
	al_meta_free(lw->owners, lw->owners_len);
	lw->owners = NULL;
	w->priv = NULL;
}

static void ls_report(void *shared, unsigned nworkers, struct al_run_result *res)
{
	struct ls_map *m = shared;
	struct ls_count t = { 0 };
	double mean = NAN, sd = NAN, ticks = 0, sum = 0;
	unsigned i;

	(void)nworkers;			  /* the engine paused the reaper (ls_pause) */
	for (i = 0; i < m->nslots; i++) { /* the workers, and the reaper */
		const struct ls_count *n = &m->w[i].n;

		t.creates += n->creates;
		t.create_errs += n->create_errs;
		t.eagain += n->eagain;
		t.charges += n->charges;
		t.uncharges += n->uncharges;
		t.charge_fails += n->charge_fails;
		t.lock_fails += n->lock_fails;
		t.owner_errs += n->owner_errs;
		t.kfree_rcu += n->kfree_rcu;
		t.call_rcu += n->call_rcu;
		t.reuse_now += n->reuse_now;
		t.callbacks_run += n->callbacks_run;
		t.task_puts += n->task_puts;
		t.task_frees += n->task_frees;
		t.task_frees_remote += n->task_frees_remote;
		t.other_elems += n->other_elems;
		t.other_errs += n->other_errs;
		ticks += (double)n->cycle_ticks;
	}
	if (!m->nsamples && m->w[0].end_t > m->w[0].first_t && m->w[0].first_t) {
		/* shorter than one sample: the whole measured span is the one value */
		mean = (double)__atomic_load_n(&m->creates_total, __ATOMIC_RELAXED) * 1e9 /
		       al_ticks_to_ns((double)(m->w[0].end_t - m->w[0].first_t));
	} else if (m->nsamples) {
		for (i = 0; i < m->nsamples; i++)
			sum += m->samples[i];
		mean = sum / m->nsamples;
		if (m->nsamples > 1) {
			for (sd = 0, i = 0; i < m->nsamples; i++)
				sd += (m->samples[i] - mean) * (m->samples[i] - mean);
			sd = sqrt(sd / (m->nsamples - 1));
		}
	}
	al_result_value(res, "creates", (double)t.creates);
	al_result_value(res, "creates_per_s", mean);
	al_result_value(res, "creates_per_s_sd", sd);
	al_result_value(res, "samples", m->nsamples);
	al_result_value(res, "ns_per_create",
			t.creates ? al_ticks_to_ns(ticks) / (double)t.creates : NAN);
	al_result_value(res, "create_errs", (double)t.create_errs);
	al_result_value(res, "eagain", (double)t.eagain);
	al_result_value(res, "charges", (double)t.charges);
	al_result_value(res, "uncharges", (double)t.uncharges);
	al_result_value(res, "charge_fails", (double)t.charge_fails);
	al_result_value(res, "lock_fails", (double)t.lock_fails);
	al_result_value(res, "owner_errs", (double)t.owner_errs);
	al_result_value(res, "kfree_rcu", (double)t.kfree_rcu);
	al_result_value(res, "call_rcu", (double)t.call_rcu);
	al_result_value(res, "reuse_now", (double)t.reuse_now);
	al_result_value(res, "rcu_callbacks_run", (double)t.callbacks_run);
	al_result_value(res, "free_path", m->w[0].free_path);
	al_result_value(res, "task_puts", (double)t.task_puts);
	al_result_value(res, "task_frees", (double)t.task_frees);
	al_result_value(res, "task_frees_remote", (double)t.task_frees_remote);
	al_result_value(res, "other_elems", (double)t.other_elems);
	al_result_value(res, "other_errs", (double)t.other_errs);
	al_result_value(res, "reaper", m->reaper);
	al_result_value(res, "reaper_pinned", __atomic_load_n(&m->reaper_pinned, __ATOMIC_RELAXED));
}

/* The engine's snapshots: the reaper waits between two batches. */
static void ls_pause(void *shared, bool on)
{
	struct ls_map *m = shared;

	if (!m->reaper)
		return;
	if (!on) {
		pthread_mutex_unlock(&m->reaper_lock);
		return;
	}
	pthread_mutex_lock(&m->reaper_lock);
	/* The workers wait at a barrier: the reaper's CPU finishes their
	 * tasks now (grace periods ended: nothing reads them any more). */
	reaper_take(m, &m->reaper_ctx);
	al_defer_flush(m->rcu, &m->reaper_ctx, AL_DRAIN_CPU);
	if (!__atomic_load_n(&m->measuring, __ATOMIC_RELAXED)) /* before the measured phase */
		memset(&m->w[m->nworkers].n, 0, sizeof(m->w[m->nworkers].n));
}

static void ls_teardown(void *shared, struct al_allocator *a, struct al_ctx *c)
{
	struct ls_map *m = shared;
	unsigned i;

	(void)a;
	if (!m)
		return;
	if (m->reaper)
		reaper_stop(m);	  /* before the flush: nothing runs beside it */
	al_defer_destroy(m->rcu); /* runs every callback left: nothing is lost */
	if (m->reaper) {
		sem_destroy(&m->reaper_wake);
		pthread_mutex_destroy(&m->reaper_lock);
	}
	for (i = 0; i < m->nworkers; i++) /* task records, all back in their pools */
		while (m->w[i].chunks) {
			struct ls_task_chunk *ch = m->w[i].chunks;

			m->w[i].chunks = ch->next;
			al_meta_free(ch, sizeof(*ch));
		}
	al_meta_free(m->w, m->w_len);
	al_meta_free(m->buckets, m->buckets_len);
	al_meta_free(m, sizeof(*m));
	(void)c;
}

static const struct al_workload_desc local_storage_desc = {
	.name = "local-storage-create",
	AL_WORKLOAD_DESC_INIT,
	.doc = "bench local-storage-create: create batch_size owners (element + storage "
	       "allocation, bucket lock, publish by cmpxchg), then destroy them through the "
	       "era's free path (kfree_rcu, reuse_now, call_rcu + kfree_nolock)",
	.flags = AL_WL_DISTINCT | AL_WL_SIM, /* elements and storages are linked */
	.nparams = P_NR,
	.params = ls_params,
	.size_param = -1,
	.setup = ls_setup,
	.worker_init = ls_worker_init,
	.cycle = ls_cycle,
	.worker_fini = ls_worker_fini,
	.teardown = ls_teardown,
	.report = ls_report,
	.prepare = ls_prepare,
	.check_params = ls_check_params,
	.model_cpus = ls_model_cpus,
	.pause = ls_pause,
};

AL_REGISTER_WORKLOAD(local_storage_desc)
