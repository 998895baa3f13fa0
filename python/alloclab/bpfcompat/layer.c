/* SPDX-License-Identifier: MIT */
/*
 * layer.c: the alloclab layer that runs a compiled libarena tree (the real
 * buddy.bpf.c, built as user-space C against the stand-in headers beside
 * this file). It is compiled once per tree as a plugin, with:
 *   ALR_LAYER_NAME  the layer's name (a string: "libarena", "libarena_<hash>")
 *   ALR_OBJECT      the path of the tree's compiled object (a string; cached by hash)
 *   ALR_HAS_BULK  1 when the tree has buddy_alloc_bulk/buddy_free_bulk
 *   ALR_MAX_SIZE  the largest request it serves (alr_entry.max_size)
 *   ALR_LAYER_DOC   its one-line doc (says whether it has per-CPU caches)
 *
 * One private copy per instance
 * -----------------------------
 * The tree's globals (the arena map, common.bpf.c's `buddy`, `zero`) belong
 * to one loaded BPF program; here every instance (each run's fresh stack,
 * two trees side by side, a model and a real stack in one process) needs
 * its own, and its own arena. So create copies ALR_OBJECT into an anonymous
 * memory file and dlopen()s it by its /proc/self/fd path, kept open while
 * loaded (a new path and a new inode), so the loader maps a new
 * copy with fresh globals even though every copy exports the same names
 * (dlopen of one path twice returns one handle). The object's symbols are
 * hidden but for alr_bind, and it is linked -Bsymbolic, so no copy binds to
 * another's. Nothing is left on disk; destroy unmaps the arena and closes
 * the copy. The alternative, rewriting the tree's globals into a struct,
 * would mean editing the code under test.
 *
 * What is counted
 * ---------------
 * The tree's arena_spin_lock is alloclab's al_lock in arena mode (budget
 * lock_budget, failures by reason), found by the lock word's address in a
 * table of ALR_LOCKS (a tree has one lock per allocator: libarena's
 * buddy->lock); acquisitions are counted in this layer's counters. Loop
 * budgets that ran out (can_loop / cond_break) and printk calls are
 * counted per CPU; bytes_held is the block bytes handed out minus those
 * returned, block sizes read from the tree's own chunk metadata. stats()
 * reads relaxed counters only, so the engine may sample it during a run.
 *
 * Lock order: the tree's own; this file takes no lock but through it.
 * Cost per operation: the call into the copy (an indirect call, which also
 * reads the block's size: one metadata byte), per lock and unlock one
 * indirect call to a wrapper that tail-calls the al_lock (the copy keeps the
 * lock's handle: no lookup here), and the counters.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <alloclab/alloclab.h>

#include "alr.h"

#ifndef ALR_LAYER_NAME
#error "ALR_LAYER_NAME: the layer's name, a string"
#endif
#ifndef ALR_OBJECT
#error "ALR_OBJECT: the path of the compiled tree, a string"
#endif
#ifndef ALR_HAS_BULK
#define ALR_HAS_BULK 0
#endif
#ifndef ALR_LAYER_DOC
#define ALR_LAYER_DOC "libarena's own buddy.bpf.c, compiled natively as user-space C"
#endif
#ifndef ALR_MAX_SIZE
#define ALR_MAX_SIZE 0 /* the largest request the tree serves, 0: unknown */
#endif

#define ALR_LOCKS 4 /* distinct arena spin locks a tree may take */

#define LAR_COUNTERS(C, D, P)                                                                   \
	D(P, allocs, AL_CTR_KEY, "", "objects allocated by the tree's buddy_alloc")             \
	D(P, frees, AL_CTR_KEY, "", "objects freed by the tree's buddy_free")                   \
	C(P, alloc_failed, AL_CTR_KEY, "buddy_alloc calls that returned NULL")                  \
	C(P, free_failed, AL_CTR_KEY, "buddy_free calls that returned an error")                \
	D(P, bytes_allocated, 0, "", "block bytes handed out (the tree's block sizes)")         \
	D(P, bytes_freed, 0, "", "block bytes returned")                                        \
	C(P, loop_exhausted, AL_CTR_KEY, "calls whose can_loop/cond_break budget ran out")      \
	C(P, printk, AL_CTR_KEY, "bpf_stream_printk calls of the tree (counted, not printed)")  \
	C(P, lock_table_full, AL_CTR_KEY, "arena spin locks refused: no al_lock left for them") \
	AL_LOCK_COUNTERS(C, P, lock, "the tree's arena spin lock")                              \
	AL_LOCK_REASON_COUNTERS(C, P, lock, "the tree's arena spin lock")                       \
	D(P, arena_pages, AL_CTR_GAUGE, "",                                                     \
	  "arena pages the tree holds (alloc_pages - free_pages)")                              \
	D(P, arena_bytes_committed, AL_CTR_GAUGE, "",                                           \
	  "arena bytes the tree holds (arena_pages x page)")

AL_COUNTERS_DEFINE(LAR_COUNTERS, LAR_, lar_counters);

enum { P_LOCK_BUDGET, P_CACHES_ABOVE, P_NR };
static const struct al_param_desc lar_params[P_NR] = {
	{ "lock_budget", AL_PARAM_NS, 250000000, 1000, 10000000000LL, NULL,
	  "how long an arena spin lock waiter spins before failing (the may_goto budget)" },
	{ "caches_above", AL_PARAM_BOOL, 0, 0, 1, NULL,
	  "allow the model's caches above a tree with per-CPU caches of its own (read by the spec "
	  "check, not here)" },
};

struct lar {
	struct al_allocator base;	 /* must be first */
	void *dl;			 /* this instance's private copy of the tree */
	int mfd;			 /* the memory file it was loaded from (kept open), or -1 */
	struct alr_entry t;		 /* its entry points */
	bool bound;			 /* t.unbind must run at fini */
	bool inited;			 /* buddy_init succeeded: destroy at fini */
	void *lock_addr[ALR_LOCKS];	 /* the tree's lock words, claimed by CAS */
	struct al_lock locks[ALR_LOCKS]; /* the al_lock standing for each */
	unsigned fork_held;		 /* locks fork_lock took (released by fork_unlock) */
	int64_t created_ns;		 /* CLOCK_REALTIME at create: whose run it was */
	struct al_counters ctr;		 /* lar_counters */
};

static const struct al_ctx lar_setup_ctx; /* CPU 0, task level: create and destroy */

static inline const struct al_ctx *ctx_or_setup(const void *ctx)
{
	return ctx ? ctx : &lar_setup_ctx;
}

/* The al_lock for the tree's lock word at addr (claimed on first use). */
static struct al_lock *lock_of(struct lar *l, void *addr)
{
	unsigned i;

	for (i = 0; i < ALR_LOCKS; i++) {
		void *seen = __atomic_load_n(&l->lock_addr[i], __ATOMIC_ACQUIRE);

		if (seen == addr)
			return &l->locks[i];
		if (!seen && (__atomic_compare_exchange_n(&l->lock_addr[i], &seen, addr, false,
							  __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
			      seen == addr))
			return &l->locks[i];
	}
	return NULL;
}

static void *env_lock_handle(void *owner, void *addr)
{
	return lock_of(owner, addr);
}

static int env_acquire(void *lock, const void *ctx)
{
	return al_lock_acquire(lock, ctx_or_setup(ctx));
}

static void env_release(void *lock, const void *ctx)
{
	al_lock_release(lock, ctx_or_setup(ctx));
}

static void env_event(void *owner, const void *ctx, unsigned ev, const char *msg)
{
	struct lar *l = owner;

	(void)msg;
	if (!ctx)
		return; /* create and destroy: in the copy's totals only */
	if (ev == ALR_EV_LOOP_EXHAUSTED)
		al_count(&l->ctr, ctx, LAR_loop_exhausted, 1);
	else if (ev == ALR_EV_LOCK_TABLE_FULL)
		al_count(&l->ctr, ctx, LAR_lock_table_full, 1);
	else if (ev == ALR_EV_PRINTK)
		al_count(&l->ctr, ctx, LAR_printk, 1);
}

/* dlopen a private copy of ALR_OBJECT (see the design above). */
static int load_copy(struct lar *l)
{
	char path[64], buf[1 << 16];
	int src, mfd, ret = 0;
	ssize_t n;

	src = open(ALR_OBJECT, O_RDONLY | O_CLOEXEC);
	if (src < 0)
		return -errno;
	mfd = memfd_create("alloclab-libarena", MFD_CLOEXEC);
	if (mfd < 0) {
		ret = -errno;
		goto out_src;
	}
	while ((n = read(src, buf, sizeof(buf))) > 0)
		if (write(mfd, buf, (size_t)n) != n) {
			ret = -EIO;
			goto out_mfd;
		}
	if (n < 0) {
		ret = -errno;
		goto out_mfd;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", mfd);
	l->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!l->dl) {
		ret = -ENOEXEC;
		goto out_mfd;
	}
	/* Kept open while the copy is loaded: the loader knows a copy by its
	 * path first, and a closed descriptor's number (so its path) is reused
	 * by the next instance, which would then get this copy. */
	l->mfd = mfd;
	goto out_src;
out_mfd:
	close(mfd);
out_src:
	close(src);
	return ret;
}

static int lar_init(struct al_allocator *a, const int64_t *params)
{
	struct lar *l = (struct lar *)a;
	struct alr_env env = { .abi = ALR_ABI,
			       .owner = l,
			       .lock_handle = env_lock_handle,
			       .acquire = env_acquire,
			       .release = env_release,
			       .event = env_event };
	alr_bind_fn bind;
	struct timespec now;
	unsigned i;
	int ret;

	l->mfd = -1;
	if (!clock_gettime(CLOCK_REALTIME, &now))
		l->created_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	for (i = 0; i < ALR_LOCKS; i++) {
		al_lock_init(&l->locks[i], (uint64_t)params[P_LOCK_BUDGET], true);
		al_lock_set_arena(&l->locks[i]);
		al_lock_count_in(&l->locks[i], &l->ctr, LAR_lock_acquired);
		al_lock_count_reasons_in(&l->locks[i], LAR_lock_timeouts);
	}
	ret = load_copy(l);
	if (ret)
		return ret;
	bind = (alr_bind_fn)dlsym(l->dl, "alr_bind");
	if (!bind)
		return -ENOEXEC;
	ret = bind(&env, &l->t);
	if (ret)
		return ret;
	l->bound = true;
	ret = l->t.init();
	if (ret)
		return ret < 0 ? ret : -EINVAL;
	l->inited = true;
	return 0;
}

/*
 * The tree's printk texts, for the Result's notes: when $ALLOCLAB_LIBARENA_NOTES
 * names a folder (the Python driver sets it), each instance appends its
 * distinct texts at teardown to FOLDER/notes.<pid>, a line each:
 *   <created: CLOCK_REALTIME ns>\t<layer>\t<count>\t<text, tabs and newlines as spaces>
 * ("(more texts)" for those past the first ALR_MSGS). The driver gives each
 * line to the run whose process and start time it matches. System calls only:
 * fini may run under the preload shim.
 */
static void write_notes(struct lar *l)
{
	const char *dir = getenv("ALLOCLAB_LIBARENA_NOTES"), *text;
	char path[4096], line[512];
	unsigned i, n;
	uint64_t count;
	int fd, len;

	if (!dir || !*dir || !l->bound || !(n = l->t.msg(0, &text, &count)))
		return;
	if (snprintf(path, sizeof(path), "%s/notes.%d", dir, (int)getpid()) >= (int)sizeof(path))
		return;
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	for (i = 0; i < n; i++) {
		text = NULL;
		count = 0;
		l->t.msg(i, &text, &count);
		len = snprintf(line, sizeof(line), "%lld\t%s\t%llu\t", (long long)l->created_ns,
			       ALR_LAYER_NAME, (unsigned long long)count);
		if (len < 0 || len >= (int)sizeof(line) - 1)
			continue;
		for (text = text ? text : "(more texts)"; *text && len < (int)sizeof(line) - 1;
		     text++)
			line[len++] =
				(*text == '\n' || *text == '\r' || *text == '\t') ? ' ' : *text;
		line[len++] = '\n';
		if (write(fd, line, (size_t)len) != len)
			break;
	}
	close(fd);
}

static void lar_fini(struct al_allocator *a)
{
	struct lar *l = (struct lar *)a;

	write_notes(l);
	if (l->inited)
		l->t.destroy();
	if (l->bound)
		l->t.unbind();
	if (l->dl)
		dlclose(l->dl);
	if (l->mfd >= 0)
		close(l->mfd);
}

static inline struct lar *to_lar(struct al_allocator *a)
{
	return (struct lar *)a;
}

/* Whether p lies in this instance's arena. */
static inline bool in_arena(const struct lar *l, const void *p)
{
	return (uintptr_t)p - l->t.base < l->t.span;
}

static void *lar_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct lar *l = to_lar(a);
	size_t got = 0;
	void *p = l->t.alloc(c, c->cpu, size, &got);
	uint64_t *blk;

	if (al_unlikely(!p)) {
		al_count(&l->ctr, c, LAR_alloc_failed, 1);
		c->err = size ? -ENOMEM : -EINVAL;
		return NULL;
	}
	blk = al_ctr_block_acct(&l->ctr, c);
	al_ctr_add(blk, LAR_allocs, 1);
	al_ctr_add(blk, LAR_bytes_allocated, got);
	if (flags & AL_ZERO)
		memset(p, 0, size);
	return p;
}

static int lar_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct lar *l = to_lar(a);
	uint64_t *blk;
	size_t got = 0;
	int ret;

	if (!p)
		return 0;
	if (!in_arena(l, p))
		return -EINVAL;
	ret = l->t.free(c, c->cpu, p, &got);
	if (al_unlikely(ret)) {
		al_count(&l->ctr, c, LAR_free_failed, 1);
		return ret;
	}
	blk = al_ctr_block_acct(&l->ctr, c);
	al_ctr_add(blk, LAR_frees, 1);
	al_ctr_add(blk, LAR_bytes_freed, got);
	return 0;
}

#if ALR_HAS_BULK
static int lar_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
			  void **out, unsigned flags)
{
	struct lar *l = to_lar(a);
	int got = l->t.alloc_bulk(c, c->cpu, size, out, n);
	uint64_t *blk = al_ctr_block_acct(&l->ctr, c);
	int i;

	if (got <= 0) {
		c->err = -ENOMEM;
		return 0;
	}
	for (i = 0; i < got; i++) {
		al_ctr_add(blk, LAR_bytes_allocated, l->t.usable(out[i]));
		if (flags & AL_ZERO)
			memset(out[i], 0, size);
	}
	al_ctr_add(blk, LAR_allocs, (uint64_t)got);
	return got;
}

static int lar_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n)
{
	struct lar *l = to_lar(a);
	uint64_t *blk = al_ctr_block_acct(&l->ctr, c);
	uint64_t bytes = 0, objs = 0;
	unsigned i;

	for (i = 0; i < n; i++)
		if (ptrs[i]) {
			bytes += l->t.usable(ptrs[i]);
			objs++;
		}
	if (l->t.free_bulk(c, c->cpu, ptrs, n))
		return 0;
	al_ctr_add(blk, LAR_frees, objs);
	al_ctr_add(blk, LAR_bytes_freed, bytes);
	return (int)n;
}
#endif

static bool lar_owns(struct al_allocator *a, const void *p)
{
	struct lar *l = to_lar(a);

	return in_arena(l, p);
}

static size_t lar_usable_size(struct al_allocator *a, const void *p)
{
	return lar_owns(a, p) ? to_lar(a)->t.usable(p) : 0;
}

static int64_t lar_bytes_held(struct al_allocator *a)
{
	struct lar *l = to_lar(a);

	return (int64_t)(al_counters_sum(&l->ctr, LAR_bytes_allocated) -
			 al_counters_sum(&l->ctr, LAR_bytes_freed));
}

static void lar_stats(struct al_allocator *a, struct al_stats *out)
{
	struct lar *l = to_lar(a);

	out->bytes_held = lar_bytes_held(a);
	if (!al_counters_on(&l->ctr))
		return;
	al_counters_report(&l->ctr, out);
	if (l->bound) {
		uint64_t pages = l->t.stat(ALR_EV_PAGES_ALLOC) - l->t.stat(ALR_EV_PAGES_FREE);

		al_stats_add_gauge(out, "arena_pages", pages);
		al_stats_add_gauge(out, "arena_bytes_committed", pages * ALR_PAGE_SIZE);
	}
}

/* fork(): the tree's locks (in the order they were claimed), then the
 * copy's page mutex, which the tree may take under its lock (chunk growth):
 * the child inherits none of them held by a thread it does not have. */
static int lar_fork_lock(struct al_allocator *a, struct al_ctx *c)
{
	struct lar *l = to_lar(a);
	unsigned n;
	int ret = 0;

	for (n = 0; n < ALR_LOCKS && __atomic_load_n(&l->lock_addr[n], __ATOMIC_ACQUIRE); n++) {
		ret = al_lock_acquire(&l->locks[n], c);
		if (ret)
			break;
	}
	if (ret) {
		while (n--)
			al_lock_release(&l->locks[n], c);
		return ret;
	}
	l->fork_held = n;
	if (l->bound)
		l->t.pages_lock(1);
	return 0;
}

static void lar_fork_unlock(struct al_allocator *a, struct al_ctx *c)
{
	struct lar *l = to_lar(a);
	unsigned n = l->fork_held;

	if (l->bound)
		l->t.pages_lock(0);
	while (n--)
		al_lock_release(&l->locks[n], c);
	l->fork_held = 0;
}

static void lar_fini_all(struct al_allocator *a)
{
	lar_fini(a);
	al_counters_fini(&to_lar(a)->ctr);
}

static void lar_destroy(struct al_allocator *a)
{
	al_layer_destroy(a, sizeof(struct lar), lar_fini_all);
}

static int lar_init_all(struct al_allocator *a, const int64_t *params)
{
	int ret = al_counters_init_desc(&to_lar(a)->ctr, lar_counters,
					sizeof(lar_counters) / sizeof(lar_counters[0]), 0, a->ncpu);

	return ret ? ret : lar_init(a, params);
}

static const struct al_ops lar_ops = {
	.name = ALR_LAYER_NAME,
	AL_OPS_INIT,
	.alloc = lar_alloc,
	.free = lar_free,
#if ALR_HAS_BULK
	.alloc_bulk = lar_alloc_bulk,
	.free_bulk = lar_free_bulk,
#endif
	.owns = lar_owns,
	.usable_size = lar_usable_size,
	.stats = lar_stats,
	.destroy = lar_destroy,
	.fork_lock = lar_fork_lock,
	.fork_unlock = lar_fork_unlock,
};

static int lar_create_(const struct al_layer_desc *d, const int64_t *params,
		       struct al_allocator *below, unsigned ncpu, struct al_allocator **out)
{
	return al_layer_create(d, params, below, ncpu, out, &lar_ops, sizeof(struct lar),
			       lar_init_all, lar_fini_all);
}

static const struct al_layer_desc lar_desc = {
	.name = ALR_LAYER_NAME,
	AL_LAYER_DESC_INIT,
	.doc = ALR_LAYER_DOC,
	.features = AL_F_OWNS | AL_F_USABLE | AL_F_STATS_ANYTIME | (ALR_HAS_BULK ? AL_F_BULK : 0),
	.counters = lar_counters,
	.ncounters = sizeof(lar_counters) / sizeof(lar_counters[0]),
	.nparams = P_NR,
	.params = lar_params,
	.create = lar_create_,
	.max_size = ALR_MAX_SIZE,
	.min_align = 16,
};

/* Found in the al_layers section where the object links the library in (a
 * preload shim built with this layer), registered by its constructor where
 * it is loaded beside the library (a plugin module). */
AL_REGISTER_LAYER(lar_desc)
