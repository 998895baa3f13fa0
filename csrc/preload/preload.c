/* SPDX-License-Identifier: MIT */
/*
 * liballoclab-preload.so: run any program's malloc on an alloclab policy.
 *
 *   ALLOCLAB_POLICY='percpu > transfer > buddy' LD_PRELOAD=liballoclab-preload.so cmd
 *   (or: alloclab preload --policy libarena-transfer -- cmd)
 *
 * The shim embeds the whole library (built with AL_PRELOAD_BUILD: nothing but
 * the malloc family is exported) and routes malloc, free, calloc, realloc,
 * reallocarray, posix_memalign, aligned_alloc, memalign, valloc, pvalloc and
 * malloc_usable_size through the policy stack.
 *
 * CPU model: every thread is a model CPU (an id from a bitmap, taken at the
 * thread's first allocation and given back at its exit, when its per-CPU
 * caches are drained), so per-CPU state and counter blocks each have one
 * writer, as in the engine's virtual mode. Past AL_MAX_CPUS live threads,
 * the extra threads use glibc.
 *
 * Fallbacks (counted, and reported in the stats file):
 *  - before the policy exists, while it is being built, and on a thread that
 *    is already inside the shim (glibc calls malloc from dlsym, from the first
 *    TLS touch, from pthread_create): glibc's own __libc_malloc & co, so the
 *    shim never recurses;
 *  - requests the policy cannot serve: larger than its max size, an alignment
 *    it does not give, or an allocation it refuses (NULL): __libc_*;
 *  - free, realloc and malloc_usable_size find the owner by address range
 *    (ops.owns), never by a header: a pointer the policy does not own is
 *    glibc's.
 * fork(): pthread_atfork takes every policy lock before the fork and releases
 *    them in parent and child (ops.fork_lock), so the child never inherits a
 *    lock held by a thread that does not exist there.
 * guard=local is refused (a signal handler calling malloc would share the
 *    interrupted thread's cache unguarded): the shim then stays on glibc.
 * ALLOCLAB_STATS=FILE writes the policy's counters and the shim's as JSON at
 *    exit (with raw write(2): no stdio, no malloc).
 * Nothing here calls libc malloc or starts threads; the library reaches the
 * OS through mmap only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloclab/alloclab.h"

#define SHIM_API __attribute__((visibility("default")))

/* glibc's allocator, always there under these names. */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

#define SHIM_COUNTERS(X)                                                          \
	X(policy_allocs, "allocations served by the policy")                      \
	X(policy_frees, "frees of policy memory")                                 \
	X(libc_early, "allocations before the policy existed or inside the shim") \
	X(libc_large, "allocations above the policy's max size")                  \
	X(libc_refused, "allocations the policy returned NULL for")               \
	X(libc_aligned, "aligned allocations the policy could not align")         \
	X(libc_threads, "allocations by threads beyond AL_MAX_CPUS")              \
	X(libc_frees, "frees of glibc memory")                                    \
	X(free_errors, "policy frees that returned an error")                     \
	X(threads, "threads that took a model CPU")                               \
	X(thread_exits, "threads whose caches were drained at exit")              \
	X(forks, "forks with every policy lock held")

#define X(name, doc) SC_##name,
enum { SHIM_COUNTERS(X) SC_NR };
#undef X
static const char *const shim_counter_names[] = { SHIM_COUNTERS(AL_CTR_NAME) };

enum { ST_UNINIT, ST_INIT, ST_READY, ST_OFF };

struct shim_thread {
	struct al_ctx ctx; /* this thread's model CPU */
	int inside;	   /* reentrancy guard */
	int live;	   /* slot in use */
};

static int state = ST_UNINIT;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static struct al_allocator *top;
static size_t max_size;
static unsigned ncpu = AL_MAX_CPUS;
static struct al_counters ctr;
static struct shim_thread threads[AL_MAX_CPUS];
static pthread_key_t exit_key;
static char stats_path[512];
static char policy_text[1024];
static char policy_error[256];
static size_t (*libc_usable_size)(void *);

/* The one thread-local: static TLS, so touching it never allocates. */
static __thread struct shim_thread *self __attribute__((tls_model("initial-exec")));
static __thread int bootstrapping __attribute__((tls_model("initial-exec")));

/* Counters of threads without a model CPU go to CPU 0's IRQ-level block, a
 * level no model CPU uses here, with atomics. */
static void count(struct shim_thread *t, unsigned idx)
{
	if (t) {
		al_count(&ctr, &t->ctx, idx, 1);
	} else if (ctr.v) {
		__atomic_fetch_add(&ctr.v[AL_CTX_IRQ * ctr.stride + idx], 1, __ATOMIC_RELAXED);
	}
}

static void thread_exit(void *arg)
{
	struct shim_thread *t = arg;

	if (!t || state != ST_READY)
		return;
	t->inside = 1;
	al_stack_drain(top, &t->ctx, AL_DRAIN_CPU);
	count(t, SC_thread_exits);
	t->inside = 0;
	self = NULL;
	__atomic_store_n(&t->live, 0, __ATOMIC_RELEASE);
}

/* This thread's model CPU, taking one on first use; NULL if none is left. */
static struct shim_thread *thread_self(void)
{
	unsigned i;

	if (al_likely(self != NULL))
		return self;
	for (i = 0; i < ncpu; i++) {
		int zero = 0;

		if (__atomic_compare_exchange_n(&threads[i].live, &zero, 1, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED)) {
			al_ctx_init(&threads[i].ctx, i);
			threads[i].inside = 0;
			self = &threads[i];
			self->inside = 1; /* pthread_setspecific may allocate */
			pthread_setspecific(exit_key, self);
			count(self, SC_threads);
			self->inside = 0;
			return self;
		}
	}
	return NULL;
}

static void json_write(int fd, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > 0)
		(void)!write(fd, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

static void write_stats(void)
{
	static struct al_stats st[AL_MAX_LAYERS];
	unsigned n = 0, l, i;
	int fd;

	if (!stats_path[0])
		return;
	fd = open(stats_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	json_write(fd, "{\"policy\": \"%s\", \"state\": \"%s\", \"error\": \"%s\", \"shim\": {",
		   policy_text, state == ST_READY ? "ready" : "off", policy_error);
	for (i = 0; i < SC_NR; i++)
		json_write(fd, "%s\"%s\": %llu", i ? ", " : "", shim_counter_names[i],
			   (unsigned long long)(ctr.v ? al_counters_sum(&ctr, i) : 0));
	json_write(fd, "}, \"layers\": [");
	if (state == ST_READY)
		n = al_stack_stats(top, st, AL_MAX_LAYERS);
	for (l = 0; l < n; l++) {
		json_write(fd, "%s{\"layer\": \"%s\", \"bytes_held\": %lld", l ? ", " : "",
			   st[l].layer, (long long)st[l].bytes_held);
		for (i = 0; i < st[l].n; i++)
			json_write(fd, ", \"%s\": %llu", st[l].v[i].name,
				   (unsigned long long)st[l].v[i].value);
		json_write(fd, "}");
	}
	json_write(fd, "]}\n");
	close(fd);
}

static void atexit_stats(void)
{
	struct shim_thread *t = self;

	if (state == ST_READY && t) { /* the exiting thread's caches count as freed */
		t->inside = 1;
		al_stack_drain(top, &t->ctx, AL_DRAIN_CPU);
		t->inside = 0;
	}
	write_stats();
}

static struct al_ctx fork_ctx;
static int fork_locked;

static void fork_prepare(void)
{
	if (state != ST_READY)
		return;
	fork_ctx = self ? self->ctx : threads[0].ctx;
	fork_locked = !al_stack_fork_lock(top, &fork_ctx);
	if (fork_locked && self)
		count(self, SC_forks);
}

static void fork_release(void)
{
	if (fork_locked) {
		fork_locked = 0;
		al_stack_fork_unlock(top, &fork_ctx);
	}
}

static bool spec_has_local_guard(const struct al_stack_spec *s)
{
	unsigned i, k;

	for (i = 0; i < s->n; i++)
		for (k = 0; k < s->layer[i].desc->nparams; k++) {
			const struct al_param_desc *p = &s->layer[i].desc->params[k];

			if (!strcmp(p->name, "guard") && p->type == AL_PARAM_ENUM &&
			    s->layer[i].params[k] == 1)
				return true;
		}
	return false;
}

static al_noinline al_cold void shim_init(void)
{
	static struct al_stack_spec spec;
	const char *env;
	int ret;

	bootstrapping = 1; /* everything below may call malloc: it gets glibc's */
	pthread_mutex_lock(&init_lock);
	if (state != ST_UNINIT)
		goto out_unlock;
	state = ST_INIT;
	libc_usable_size = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
	env = getenv("ALLOCLAB_STATS");
	if (env)
		snprintf(stats_path, sizeof(stats_path), "%s", env);
	env = getenv("ALLOCLAB_POLICY");
	snprintf(policy_text, sizeof(policy_text), "%s", env ? env : "percpu > transfer > buddy");
	ncpu = AL_MAX_CPUS;
	/* Threads may outnumber CPUs and are preempted anywhere: test-and-set
	 * locks (no FIFO convoy behind a preempted waiter) that yield early. */
	al_lock_yield_mask = 63;
	al_lock_fair = 0;
	if (al_counters_init(&ctr, SC_NR, shim_counter_names, ncpu) ||
	    pthread_key_create(&exit_key, thread_exit)) {
		snprintf(policy_error, sizeof(policy_error), "out of memory for the shim");
		goto out_off;
	}
	ret = al_spec_parse(policy_text, &spec, policy_error, sizeof(policy_error));
	if (ret)
		goto out_off;
	if (!(spec.layer[spec.n - 1].desc->features & AL_F_OWNS)) {
		snprintf(policy_error, sizeof(policy_error),
			 "the bottom layer %s does not own its memory by address range (libc and "
			 "system are malloc itself): the shim cannot use it",
			 spec.layer[spec.n - 1].desc->name);
		goto out_off;
	}
	if (spec_has_local_guard(&spec)) {
		snprintf(policy_error, sizeof(policy_error),
			 "guard=local is refused under the preload shim (signal handlers may "
			 "allocate); use guard=atomic");
		goto out_off;
	}
	ret = al_stack_create(&spec, ncpu, &top, policy_error, sizeof(policy_error));
	if (ret)
		goto out_off;
	max_size = al_spec_max_size(&spec);
	pthread_atfork(fork_prepare, fork_release, fork_release);
	atexit(atexit_stats);
	__atomic_store_n(&state, ST_READY, __ATOMIC_RELEASE);
	goto out_unlock;
out_off:
	/* Stay on glibc, and say why in the stats file (and once on stderr). */
	{
		char msg[400];
		int n = snprintf(msg, sizeof(msg),
				 "alloclab preload: %s; running on glibc malloc\n", policy_error);

		if (n > 0)
			(void)!write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
	}
	atexit(write_stats);
	__atomic_store_n(&state, ST_OFF, __ATOMIC_RELEASE);
out_unlock:
	pthread_mutex_unlock(&init_lock);
	bootstrapping = 0;
}

/* The thread to serve from the policy, or NULL for glibc (counting why). */
static inline struct shim_thread *enter(void)
{
	struct shim_thread *t;

	if (al_unlikely(__atomic_load_n(&state, __ATOMIC_ACQUIRE) != ST_READY)) {
		if (bootstrapping || state == ST_INIT)
			return NULL;
		if (state == ST_UNINIT)
			shim_init();
		if (state != ST_READY)
			return NULL;
	}
	if (al_unlikely(bootstrapping))
		return NULL;
	t = thread_self();
	if (al_unlikely(!t)) {
		count(NULL, SC_libc_threads);
		return NULL;
	}
	if (al_unlikely(t->inside)) {
		count(t, SC_libc_early);
		return NULL;
	}
	t->inside = 1;
	return t;
}

static inline void leave(struct shim_thread *t)
{
	t->inside = 0;
}

static inline bool ours(const void *p)
{
	return p && state == ST_READY && top->ops->owns && top->ops->owns(top, p);
}

static void *policy_alloc(size_t size, unsigned flags, size_t align)
{
	struct shim_thread *t = enter();
	size_t req = size > align ? size : align;
	void *p;

	if (!t) {
		if (state == ST_READY)
			; /* counted in enter() */
		else if (ctr.v)
			count(NULL, SC_libc_early);
		goto out_libc;
	}
	if (al_unlikely(!req || (max_size && req > max_size))) {
		count(t, SC_libc_large);
		leave(t);
		goto out_libc;
	}
	p = top->ops->alloc(top, &t->ctx, req, flags);
	if (al_unlikely(!p)) {
		count(t, SC_libc_refused);
		leave(t);
		goto out_libc;
	}
	if (al_unlikely(align > 16 && ((uintptr_t)p & (align - 1)))) {
		top->ops->free(top, &t->ctx, p);
		count(t, SC_libc_aligned);
		leave(t);
		goto out_libc;
	}
	count(t, SC_policy_allocs);
	leave(t);
	return p;
out_libc:
	if (align > 16)
		return __libc_memalign(align, size);
	return (flags & AL_ZERO) ? __libc_calloc(1, size) : __libc_malloc(size);
}

SHIM_API void *malloc(size_t size)
{
	return policy_alloc(size, 0, 0);
}

SHIM_API void free(void *p)
{
	struct shim_thread *t;

	if (!p)
		return;
	if (!ours(p)) {
		if (state == ST_READY && self)
			count(self, SC_libc_frees);
		__libc_free(p);
		return;
	}
	t = enter();
	if (!t) {
		/* Inside the shim or without a model CPU: CPU-free path of the
		 * bottom layer is not available, so borrow a fresh context on the
		 * thread's own slot only when it has one. Otherwise leak is worse
		 * than a slow path: take CPU 0's IRQ level, which no thread uses. */
		struct al_ctx c;

		al_ctx_init(&c, 0);
		c.level = AL_CTX_IRQ;
		if (top->ops->free(top, &c, p))
			count(NULL, SC_free_errors);
		return;
	}
	if (top->ops->free(top, &t->ctx, p))
		count(t, SC_free_errors);
	else
		count(t, SC_policy_frees);
	leave(t);
}

SHIM_API void *calloc(size_t n, size_t size)
{
	size_t total;

	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return policy_alloc(total, AL_ZERO, 0);
}

static size_t usable(void *p)
{
	if (ours(p))
		return top->ops->usable_size ? top->ops->usable_size(top, p) : 0;
	return libc_usable_size ? libc_usable_size(p) : 0;
}

SHIM_API size_t malloc_usable_size(void *p)
{
	return p ? usable(p) : 0;
}

SHIM_API void *realloc(void *p, size_t size)
{
	size_t old;
	void *q;

	if (!p)
		return malloc(size);
	if (!size) {
		free(p);
		return NULL;
	}
	if (!ours(p))
		return __libc_realloc(p, size);
	old = usable(p);
	if (size <= old && size > old / 2)
		return p;
	q = malloc(size);
	if (!q)
		return NULL;
	memcpy(q, p, old < size ? old : size);
	free(p);
	return q;
}

SHIM_API void *reallocarray(void *p, size_t n, size_t size)
{
	size_t total;

	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc(p, total);
}

static bool pow2(size_t a)
{
	return a && !(a & (a - 1));
}

SHIM_API int posix_memalign(void **out, size_t align, size_t size)
{
	void *p;

	if (!pow2(align) || align % sizeof(void *))
		return EINVAL;
	p = policy_alloc(size, 0, align);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

SHIM_API void *aligned_alloc(size_t align, size_t size)
{
	if (!pow2(align)) {
		errno = EINVAL;
		return NULL;
	}
	return policy_alloc(size, 0, align);
}

SHIM_API void *memalign(size_t align, size_t size)
{
	if (!pow2(align)) {
		errno = EINVAL;
		return NULL;
	}
	return policy_alloc(size, 0, align);
}

SHIM_API void *valloc(size_t size)
{
	return policy_alloc(size, 0, (size_t)sysconf(_SC_PAGESIZE));
}

SHIM_API void *pvalloc(size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return policy_alloc((size + page - 1) & ~(page - 1), 0, page);
}
