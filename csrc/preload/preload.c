/* SPDX-License-Identifier: MIT */
/*
 * liballoclab-preload.so: run any program's malloc on an alloclab policy.
 *
 *   ALLOCLAB_POLICY='percpu > transfer > buddy' LD_PRELOAD=liballoclab-preload.so cmd
 *   (or: alloclab preload --policy libarena-transfer -- cmd)
 *
 * ALLOCLAB_POLICY is a spec or the name of a preset (registry.h). A peer
 * preset (glibc, jemalloc, ...) is a real allocator run in a child process
 * of its own: the shim refuses it by name.
 *
 * The shim embeds the whole library (built with AL_PRELOAD_BUILD: nothing but
 * the malloc family and the exec family is exported) and routes malloc, free,
 * calloc, realloc, reallocarray, posix_memalign, aligned_alloc, memalign,
 * valloc, pvalloc and malloc_usable_size through the policy stack.
 *
 * Start-up: the policy is built once per process image, by the shim's
 * constructor or by the first malloc if that comes earlier (from another
 * library's constructor): the registry finds the built-in layers in their
 * ELF section, so it never depends on which constructor ran first. On the
 * main thread, init also makes glibc initialise its own malloc: glibc sets up
 * its main arena lazily, on its first call, for the calling thread; if that
 * first call came from two worker threads falling back at once, both would
 * adopt the main arena with one reference between them, and glibc aborts at
 * the second one's exit ("a->attached_threads > 0").
 *
 * CPU model: every thread is a model CPU (an id from a bitmap, taken at the
 * thread's first allocation and given back at its exit, when its per-CPU
 * caches are drained), so per-CPU state and counter blocks each have one
 * writer, as in the engine's virtual mode. Past AL_MAX_CPUS live threads,
 * the extra threads use glibc.
 *
 * Alignment: malloc, calloc and realloc return at least alignof(max_align_t)
 * (16 on x86-64), as C requires, whatever the policy. Per stack, from the
 * min_align the layers declare: 16 or more, nothing to do; bpf_ma on top
 * (its object sits 8 bytes into a unit whose start is 16-aligned, as in the
 * kernel), every request is padded by 8 and the caller gets object + 8,
 * which free, realloc and malloc_usable_size undo; any other stack below 16
 * (slab's kmalloc-8 class), requests are rounded up to a multiple of 16,
 * which such layers serve from 16-aligned classes. Every pointer is still
 * checked, and one that is not aligned goes back to the policy and the
 * request to glibc (counted). posix_memalign, aligned_alloc, memalign,
 * valloc and pvalloc ask the policy for max(size, alignment), which a stack
 * of naturally aligned power-of-two blocks (buddy, pages) serves; otherwise
 * glibc serves them (counted).
 *
 * Fallbacks to glibc (each counted, and reported in the stats):
 *  - before the policy exists, while it is being built, and on a thread that
 *    is already inside the shim (glibc calls malloc from dlsym, from
 *    pthread_setspecific): glibc's own __libc_malloc & co, so the shim never
 *    recurses (libc_early);
 *  - by design: requests larger than the policy's max size, or than
 *    PTRDIFF_MAX, which glibc fails with ENOMEM as it fails them without
 *    the shim (libc_large), and
 *    threads beyond AL_MAX_CPUS live ones (libc_threads);
 *  - refusals: the policy returned NULL (libc_refused), or could not give
 *    the alignment (libc_aligned). These are the ones that make a run's
 *    figures glibc's rather than the policy's; `alloclab preload` fails a run
 *    where they exceed 1% of a process's allocations.
 *  - free, realloc and malloc_usable_size find the owner by address range,
 *    never by a header: a pointer the policy does not own is glibc's. The
 *    range is the owner's arena reservation when the owner has an object
 *    index (the buddy; see ours()), else its ops.owns.
 * When the policy cannot be built (a bad spec, a refused stack), the process
 * runs on glibc, and the shim then costs one load and branch per call: it
 * counts nothing. It says why in its stats record, and on stderr only when
 * ALLOCLAB_VERBOSE=1: nothing is written into the program's own output.
 * Allocations are served as from a sleepable context (AL_MAYSLEEP, the
 * kernel's GFP_KERNEL): bpf_ma answers an empty cache with a direct kmalloc
 * from the layer below, as bpf_mem_cache_alloc_flags(GFP_KERNEL) does.
 *
 * Cost per call, above the policy's own: a load of the recording flag
 * (al_rec_on, with its branch), a load of the state, two
 * thread-local loads (the reentrancy flag's thread, the model CPU), the
 * reentrancy flag set and cleared in the thread's own cache line (one per
 * model CPU), one indirect call into the policy and one counter added to the
 * thread's block (found once, when the thread took its model CPU), and,
 * under the watchdog, the thread's seq bumped twice in a line of its own in
 * the shared mapping (a load and a branch without it). free adds
 * the owner check: a range check inline against the owner's index, or one
 * owns() call on the layer that owns the memory, below the layers that
 * declare AL_F_OWNS_BELOW (percpu, transfer, magazine, ...).
 * Start-up: the policy is built and the clock calibrated for 1 ms in every
 * process image, which a compiler driver or a shell script pays per process.
 * Lock order: init_lock (start-up) before record_lock (a record being
 * written) before any lock the layers' stats() take.
 *
 * fork(): pthread_atfork takes every policy lock before the fork and releases
 *    them in parent and child (ops.fork_lock), so the child never inherits a
 *    lock held by a thread that does not exist there; the child zeroes its
 *    counters and writes a stats record of its own.
 * guard=local is refused: a free from a thread without a model CPU of its
 *    own, or from a signal handler that interrupted the shim, goes to CPU 0's
 *    caches (at IRQ level) from another thread than CPU 0's, which only the
 *    atomic guard excludes. The shim then stays on glibc.
 *
 * Stats: ALLOCLAB_STATS=PREFIX (or an existing directory DIR, meaning
 * DIR/alloclab) makes every process image write its own record,
 * PREFIX.<pid> (PREFIX.<pid>.<n> when taken: an image after exec, a reused
 * pid), as one JSON object: pid, ppid, argv0, exe, policy, state ("ready" or
 * "off"), error (why off), end ("running" until it ends; "exit", or "exec"
 * when the image was replaced: the exec family is wrapped for that; the
 * record then names the image and whether the environment passed on keeps
 * the shim, and a failed exec rewrites it as "running"), the alignment
 * fix-up, the shim's counters and every layer's stats. The record
 * is written when the image starts (so a process that never exits normally
 * still shows whether it had the policy), then again at exit or exec, to a
 * temporary name renamed over it, with raw syscalls: no stdio, no malloc;
 * _exit and _Exit are wrapped as well, since shells and forked children end
 * that way.
 * `alloclab preload` gives the program a private PREFIX and merges them.
 * ALLOCLAB_STATS_LEVEL=lite|off|full (default lite) is the level the policy's
 * layers count at (al_stats_level_set around al_stack_create); the record
 * names it ("stats_level"), and at off its layers carry no counters (not
 * measured, not zero). The shim's own counters are kept at lite whatever the
 * level, since the served share is read from them. A value that names no
 * level keeps the process on glibc, the record saying why, as a bad policy
 * does.
 * Nothing here calls libc malloc or starts threads; the library reaches the
 * OS through mmap only.
 *
 * Watchdog: ALLOCLAB_WATCH=FILE names a file the watcher (`alloclab
 * preload`) made, mapped MAP_SHARED here; no thread is added to the program.
 * Its layout (the watcher reads it):
 *
 *   offset 0         header: "alwatch1", u32 nslots, u32 nwords, u64 words_at
 *   offset 4096      nslots slots, a cache line each: i32 pid (0: free),
 *                    u32 hw (model CPUs whose seq may be in use), u64 init
 *   offset words_at  nslots areas of nwords lines (nwords >= AL_MAX_CPUS):
 *                    line i of area k is slot k's model CPU i's u64 seq
 *
 * The slots sit together, so that taking one reads a few pages, not one
 * page per slot; each seq has a line of its own, written by its thread only.
 * A process takes the slot holding its pid (an earlier image, before exec),
 * else a free one, else one whose pid is gone; a fork child takes its own.
 * Each thread bumps its seq on entering the policy and again on leaving it
 * (enter/leave), one store into a cache line of its own: an odd seq is a
 * call in progress, and one that stays odd and unchanged for the watchdog's
 * time is a policy call that made no progress (a plugin that loops); init
 * does the same while the policy is built. The watcher kills that process.
 * Threads without a model CPU, and processes past nslots, are not watched.
 *
 * Recording: ALLOCLAB_RECORD=DIR makes every image write its calls to a raw
 * file in DIR (record.c, which says how). Without ALLOCLAB_POLICY the shim
 * then stays on glibc (state off, "recording on glibc") and records; with
 * one, the policy serves and is recorded. The exits and execs above end the
 * image's raw file as they write its stats record.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloclab/alloclab.h"
#include "record.h"

#define SHIM_API __attribute__((visibility("default")))

/* What C requires of malloc: suitable for any fundamental type. */
#define SHIM_ALIGN _Alignof(max_align_t)

/* glibc's allocator, always there under these names. */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern char **environ;

/*
 * The shim's own counters (prefix SHIM_). Each thread finds its block once,
 * when it takes its model CPU, and keeps it beside its context; a thread
 * without one counts in CPU 0's IRQ-level block, with atomics.
 */
#define SHIM_COUNTERS(C, D, P)                                                          \
	C(P, policy_allocs, AL_CTR_KEY, "allocations served by the policy")             \
	C(P, policy_frees, AL_CTR_KEY, "frees of policy memory")                        \
	C(P, libc_early, AL_CTR_KEY,                                                    \
	  "allocations glibc served before the policy existed or inside the shim")      \
	C(P, libc_large, AL_CTR_KEY, "allocations above the policy's max size (glibc)") \
	C(P, libc_refused, AL_CTR_KEY, "allocations the policy returned NULL for")      \
	C(P, libc_aligned, AL_CTR_KEY, "allocations the policy could not align")        \
	C(P, libc_threads, AL_CTR_KEY, "allocations by threads beyond AL_MAX_CPUS")     \
	C(P, libc_frees, 0, "frees of glibc memory")                                    \
	C(P, free_errors, AL_CTR_KEY, "policy frees that returned an error")            \
	C(P, threads, 0, "threads that took a model CPU")                               \
	C(P, thread_exits, 0, "threads whose caches were drained at exit")              \
	C(P, forks, 0, "forks with every policy lock held")
AL_COUNTERS_DEFINE(SHIM_COUNTERS, SHIM_, shim_counters);

enum { ST_UNINIT, ST_INIT, ST_READY, ST_OFF };

/* How malloc's results reach SHIM_ALIGN on this stack (see the header). */
enum { ALIGN_NONE, ALIGN_ROUND, ALIGN_PAD };
static const char *const align_names[] = { "none", "round", "pad" };

/* One per model CPU, a cache line each: its thread writes `inside` twice per
 * call, which must not move a line another thread uses. */
struct shim_thread {
	struct al_ctx ctx; /* this thread's model CPU */
	uint64_t *blk;	   /* its block of the shim's counters; NULL when not counting */
	uint64_t *watch;   /* its seq in the watchdog's mapping; NULL when not watched */
	int inside;	   /* reentrancy guard */
	int live;	   /* slot in use */
} __attribute__((aligned(AL_CACHELINE)));

static int state = ST_UNINIT;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static struct al_allocator *top;
/* The layer whose owns() answers for the stack: the top one, or below the
 * cache layers whose owns() is their backend's (see owner_layer). */
static struct al_allocator *owner;
/* The arena reservation of an owner with an object index (the buddy),
 * checked inline on every free instead of an owns() call. Its owns() answers
 * for the part in use only; the rest is reserved by this process and no
 * other allocator hands memory out there, so a pointer into it is the
 * policy's to refuse (a counted free error), never glibc's. limit 0: ask
 * owner->ops->owns(). */
static uintptr_t owner_base;
static size_t owner_limit;
static size_t max_size;	 /* largest request the caller may make, 0 = any */
static size_t min_align; /* what the stack declares */
static int align_mode;
static size_t pad; /* ALIGN_PAD: bytes between the policy's object and the caller's */
static unsigned ncpu = AL_MAX_CPUS;
static struct al_counters ctr;
static struct shim_thread threads[AL_MAX_CPUS];
static pthread_key_t exit_key;
static char policy_text[1024];
static char policy_error[256];
/* ALLOCLAB_STATS_LEVEL: what the policy's layers count (enum al_stats_level);
 * -1 when the value names no level, which keeps the shim on glibc. The shim's
 * own counters are kept at AL_STATS_LITE whatever it says: the served share
 * is read from them. */
static int stats_level = AL_STATS_LITE;
static char stats_level_text[32];
static int verbose;
static size_t (*libc_usable_size)(void *);

/* Stats records: the prefix, the file this image claimed, and the pid that
 * claimed it (a forked child claims its own). my_pid is the pid the shim's
 * state belongs to: init's, or a fork child's (set by the atfork handler).
 * A vfork or clone child runs in its parent's memory without that handler:
 * there getpid() differs, and the shim writes nothing. */
static char stats_prefix[512];
static char record_path[640];
/* The image an exec is about to load, named in the record the exec writes:
 * if no record of the same pid follows, that image ran without the shim. */
static char exec_target[512];
/* Whether the environment the exec passes on still preloads the shim (env -i
 * and the like drop it): the record says so, which tells a process killed
 * before its new image started from an image that ran without the shim. */
static int exec_preload;
#define VREC_SIZE 640
static pid_t record_pid;
static pid_t my_pid;
static int record_lock;

/* The watchdog's mapping (see the header): the file, its slots, and this
 * process's slot (NULL: not watched). */
#define WATCH_MAGIC    "alwatch1"
#define WATCH_SLOTS_AT 4096
struct watch_header {
	char magic[8];
	uint32_t nslots;
	uint32_t nwords;
	uint64_t words_at; /* the first area of seq words */
};
struct watch_slot {
	int32_t pid;   /* the process that holds it; 0: free */
	uint32_t hw;   /* model CPUs whose seq may be in use (highest + 1) */
	uint64_t init; /* bumped around the policy's build, as a thread's seq */
};
static char *watch_map;
static struct watch_slot *watch_slot;
static uint64_t *watch_words; /* watch_slot's area: model CPU i's seq at [i * 8] */
#define WATCH_STRIDE (AL_CACHELINE / sizeof(uint64_t))

/* Thread-locals in static TLS, so touching them never allocates. */
static __thread struct shim_thread *self __attribute__((tls_model("initial-exec")));
static __thread int bootstrapping __attribute__((tls_model("initial-exec")));
static __thread int writing_record __attribute__((tls_model("initial-exec")));

/* Counters of threads without a model CPU go to CPU 0's IRQ-level block, a
 * level no model CPU uses here, with atomics. */
static inline void count(struct shim_thread *t, unsigned idx)
{
	if (t) {
		al_ctr_add(t->blk, idx, 1);
	} else if (ctr.v && al_counters_on(&ctr)) {
		__atomic_fetch_add(&ctr.v[AL_CTX_IRQ * ctr.stride + idx], 1, __ATOMIC_RELAXED);
	}
}

/* Model CPU i's seq in this process's slot, or NULL when not watched. */
static uint64_t *watch_word(unsigned i)
{
	return watch_words ? watch_words + (size_t)i * WATCH_STRIDE : NULL;
}

/* A policy call begins or ends on this thread: odd seq, inside. */
static inline void watch_bump(uint64_t *w)
{
	if (w)
		__atomic_store_n(w, *w + 1, __ATOMIC_RELEASE);
}

static struct watch_slot *watch_slot_at(uint32_t k)
{
	return (struct watch_slot *)(watch_map + WATCH_SLOTS_AT + (size_t)k * AL_CACHELINE);
}

static uint64_t *watch_area(uint32_t k)
{
	const struct watch_header *h = (const void *)watch_map;

	return (uint64_t *)(watch_map + h->words_at + (size_t)k * h->nwords * AL_CACHELINE);
}

static bool watch_try(struct watch_slot *s, int32_t old, int32_t pid)
{
	return __atomic_compare_exchange_n(&s->pid, &old, pid, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_RELAXED);
}

/* Take a slot for pid: the one an earlier image of it held, a free one, or
 * one whose process is gone; its words start at 0 (no call in progress). */
static void watch_claim(pid_t pid)
{
	const struct watch_header *h = (const void *)watch_map;
	struct watch_slot *s = NULL;
	uint32_t k = 0, pass, i;
	uint64_t *w;

	watch_slot = NULL;
	watch_words = NULL;
	if (!watch_map)
		return;
	for (pass = 0; pass < 3 && !s; pass++)
		for (k = 0; k < h->nslots; k++) {
			struct watch_slot *c = watch_slot_at(k);
			int32_t old = __atomic_load_n(&c->pid, __ATOMIC_ACQUIRE);

			if (pass == 0	? old == pid
			    : pass == 1 ? old == 0 && watch_try(c, 0, pid)
					: old > 0 && kill(old, 0) && errno == ESRCH &&
						  watch_try(c, old, pid)) {
				s = c;
				break;
			}
		}
	if (!s)
		return; /* more processes than slots: this one is not watched */
	w = watch_area(k);
	for (i = 0; i < s->hw && i < h->nwords; i++)
		__atomic_store_n(w + (size_t)i * WATCH_STRIDE, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->hw, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->init, 0, __ATOMIC_RELEASE);
	watch_slot = s;
	watch_words = w;
}

/* Map ALLOCLAB_WATCH's file when it has the layout this shim writes. */
static void watch_open(const char *path)
{
	const struct watch_header *h;
	struct stat sb;
	void *m;
	int fd;

	if (!path || !*path)
		return;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &sb) || sb.st_size < WATCH_SLOTS_AT) {
		close(fd);
		return;
	}
	m = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return;
	h = m;
	if (memcmp(h->magic, WATCH_MAGIC, 8) || h->nwords < AL_MAX_CPUS ||
	    h->words_at < WATCH_SLOTS_AT + (uint64_t)h->nslots * AL_CACHELINE ||
	    h->words_at + (uint64_t)h->nslots * h->nwords * AL_CACHELINE > (uint64_t)sb.st_size) {
		munmap(m, (size_t)sb.st_size);
		return;
	}
	watch_map = m;
}

/* Model CPU i's seq for its thread, the slot's high-water mark raised to it. */
static uint64_t *watch_thread(unsigned i)
{
	uint32_t hw;

	if (!watch_slot)
		return NULL;
	hw = __atomic_load_n(&watch_slot->hw, __ATOMIC_RELAXED);
	while (hw < i + 1 && !__atomic_compare_exchange_n(&watch_slot->hw, &hw, i + 1, true,
							  __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
	return watch_word(i);
}

static void thread_exit(void *arg)
{
	struct shim_thread *t = arg;

	if (!t || state != ST_READY)
		return;
	t->inside = 1;
	watch_bump(t->watch);
	al_stack_drain(top, &t->ctx, AL_DRAIN_CPU);
	count(t, SHIM_thread_exits);
	watch_bump(t->watch);
	t->inside = 0;
	self = NULL;
	__atomic_store_n(&t->live, 0, __ATOMIC_RELEASE);
}

/* Take a model CPU for this thread; NULL if none is left. */
static al_noinline struct shim_thread *thread_take(void)
{
	unsigned i;

	for (i = 0; i < ncpu; i++) {
		int zero = 0;

		/* a plain load first: a failed CAS would take the line of a slot
		 * in use away from its thread */
		if (!__atomic_load_n(&threads[i].live, __ATOMIC_RELAXED) &&
		    __atomic_compare_exchange_n(&threads[i].live, &zero, 1, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED)) {
			al_ctx_init(&threads[i].ctx, i);
			threads[i].blk = al_ctr_block(&ctr, &threads[i].ctx);
			threads[i].watch = watch_thread(i);
			threads[i].inside = 0;
			self = &threads[i];
			self->inside = 1; /* pthread_setspecific may allocate */
			pthread_setspecific(exit_key, self);
			count(self, SHIM_threads);
			self->inside = 0;
			return self;
		}
	}
	return NULL;
}

/* This thread's model CPU, taking one on first use: one TLS load after that. */
static inline struct shim_thread *thread_self(void)
{
	struct shim_thread *t = self;

	return al_likely(t != NULL) ? t : thread_take();
}

/* ---- stats records: JSON through a small stack buffer and write(2) ---- */

struct jw {
	int fd;
	size_t n;
	char buf[2048];
};

static void jw_flush(struct jw *w)
{
	size_t off = 0;

	while (off < w->n) {
		ssize_t r = write(w->fd, w->buf + off, w->n - off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		off += (size_t)r;
	}
	w->n = 0;
}

static void jw_put(struct jw *w, const char *s, size_t len)
{
	while (len) {
		size_t k = sizeof(w->buf) - w->n;

		if (!k) {
			jw_flush(w);
			continue;
		}
		if (k > len)
			k = len;
		memcpy(w->buf + w->n, s, k);
		w->n += k;
		s += k;
		len -= k;
	}
}

static void jw_fmt(struct jw *w, const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > 0)
		jw_put(w, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* A JSON string: quotes, backslashes and control bytes escaped; bytes that
 * are not ASCII become \u00XX (Latin-1), so the record is always valid JSON
 * whatever argv[0] holds. */
static void jw_str(struct jw *w, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	jw_put(w, "\"", 1);
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			char e[2] = { '\\', (char)c };

			jw_put(w, e, 2);
		} else if (c < 0x20 || c >= 0x7f) {
			char e[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };

			jw_put(w, e, 6);
		} else {
			jw_put(w, (const char *)&c, 1);
		}
	}
	jw_put(w, "\"", 1);
}

/* The layers' stats level, or null when ALLOCLAB_STATS_LEVEL named none (the
 * error says what it was). At "off" the layers report no counters: absent,
 * not zero. */
static void jw_stats_level(struct jw *w)
{
	jw_put(w, ", \"stats_level\": ", 17);
	if (stats_level < 0)
		jw_put(w, "null", 4);
	else
		jw_str(w, al_stats_level_names[stats_level]);
}

/* Claim a record name for this pid: PREFIX.<pid>, or PREFIX.<pid>.<n> when an
 * earlier image of the same pid (before an exec) or an earlier process with
 * the same pid already holds it. O_EXCL makes the claim atomic. */
static void record_claim(pid_t pid)
{
	unsigned k;

	record_path[0] = 0;
	record_pid = pid;
	for (k = 0; k < 1000; k++) {
		int fd, n;

		if (k)
			n = snprintf(record_path, sizeof(record_path), "%s.%d.%u", stats_prefix,
				     (int)pid, k);
		else
			n = snprintf(record_path, sizeof(record_path), "%s.%d", stats_prefix,
				     (int)pid);
		if (n <= 0 || (size_t)n >= sizeof(record_path) - 8)
			break;
		fd = open(record_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd >= 0) {
			close(fd);
			return;
		}
		if (errno != EEXIST)
			break;
	}
	record_path[0] = 0;
}

static void record_write_locked(const char *end)
{
	static struct al_stats st[AL_MAX_LAYERS];
	char tmp[sizeof(record_path) + 8], exe[512];
	unsigned n = 0, l, i;
	struct jw w;
	ssize_t len;

	al_flag_assert_held(&record_lock);
	snprintf(tmp, sizeof(tmp), "%s.tmp", record_path);
	w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	w.n = 0;
	if (w.fd < 0)
		return;
	len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[len > 0 ? len : 0] = 0;
	jw_fmt(&w, "{\"pid\": %d, \"ppid\": %d, \"argv0\": ", (int)getpid(), (int)getppid());
	jw_str(&w, program_invocation_name);
	jw_put(&w, ", \"exe\": ", 9);
	jw_str(&w, exe);
	jw_put(&w, ", \"policy\": ", 12);
	jw_str(&w, policy_text);
	jw_fmt(&w, ", \"state\": \"%s\", \"error\": ", state == ST_READY ? "ready" : "off");
	jw_str(&w, policy_error);
	jw_stats_level(&w);
	jw_fmt(&w,
	       ", \"end\": \"%s\", \"align\": \"%s\", \"align_pad\": %zu, \"min_align\": %zu, "
	       "\"max_size\": %zu",
	       end, align_names[align_mode], pad, min_align, max_size);
	if (!strcmp(end, "exec")) {
		jw_put(&w, ", \"exec\": ", 10);
		jw_str(&w, exec_target);
		jw_fmt(&w, ", \"exec_preload\": %s", exec_preload ? "true" : "false");
	}
	jw_put(&w, ", \"shim\": {", 11);
	for (i = 0; i < SHIM_NR; i++)
		jw_fmt(&w, "%s\"%s\": %llu", i ? ", " : "", shim_counters[i].name,
		       (unsigned long long)(ctr.v ? al_counters_sum(&ctr, i) : 0));
	jw_put(&w, "}, \"layers\": [", 14);
	if (state == ST_READY)
		n = al_stack_stats(top, st, AL_MAX_LAYERS);
	for (l = 0; l < n; l++) {
		jw_put(&w, l ? ", {\"layer\": " : "{\"layer\": ", l ? 12 : 10);
		jw_str(&w, st[l].layer);
		jw_fmt(&w, ", \"bytes_held\": %lld", (long long)st[l].bytes_held);
		for (i = 0; i < st[l].n; i++) {
			jw_put(&w, ", ", 2);
			jw_str(&w, st[l].v[i].name);
			jw_fmt(&w, ": %llu", (unsigned long long)st[l].v[i].value);
		}
		jw_put(&w, "}", 1);
	}
	jw_put(&w, "]}\n", 3);
	jw_flush(&w);
	close(w.fd);
	if (rename(tmp, record_path))
		unlink(tmp);
}

/* Write (or rewrite) this image's record; claims one first in a new process.
 * Does nothing without ALLOCLAB_STATS, and in a vfork/clone child. */
static void record_write(const char *end)
{
	pid_t pid;

	if (!stats_prefix[0])
		return;
	pid = getpid();
	if (pid != my_pid || writing_record)
		return; /* a signal handler's _exit while this thread writes: that record stands */
	writing_record = 1;
	while (__atomic_exchange_n(&record_lock, 1, __ATOMIC_ACQUIRE))
		al_cpu_relax();
	if (record_pid != pid)
		record_claim(pid);
	if (record_path[0])
		record_write_locked(end);
	__atomic_store_n(&record_lock, 0, __ATOMIC_RELEASE);
	writing_record = 0;
}

static void say(const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	int n;

	if (!verbose)
		return;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n > 0)
		(void)!write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
}

static void atexit_stats(void)
{
	struct shim_thread *t = self;

	if (state == ST_READY && t && !t->inside) { /* its caches count as freed */
		t->inside = 1;
		watch_bump(t->watch);
		al_stack_drain(top, &t->ctx, AL_DRAIN_CPU);
		watch_bump(t->watch);
		t->inside = 0;
	}
	record_write("exit");
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
		count(self, SHIM_forks);
}

static void fork_parent(void)
{
	if (fork_locked) {
		fork_locked = 0;
		al_stack_fork_unlock(top, &fork_ctx);
	}
}

/* The child is a process of its own: its counters start at zero, and it
 * claims its own record when it first writes one. */
static void fork_child(void)
{
	fork_parent();
	my_pid = getpid();
	record_pid = 0;
	record_path[0] = 0;
	record_lock = 0;
	if (ctr.v)
		memset(ctr.v, 0, (size_t)ctr.nblocks * ctr.stride * sizeof(uint64_t));
	/* the parent's slot stays the parent's: the child watches in its own */
	if (watch_slot) {
		unsigned i;

		watch_claim(my_pid);
		for (i = 0; i < ncpu; i++)
			threads[i].watch = __atomic_load_n(&threads[i].live, __ATOMIC_RELAXED)
						   ? watch_thread(i)
						   : NULL;
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

/* The topmost layer that declares an alignment: the one whose objects the
 * stack hands out. */
static const struct al_layer_desc *object_layer(const struct al_stack_spec *s)
{
	unsigned i;

	for (i = 0; i < s->n; i++)
		if (al_layer_min_align(s->layer[i].desc))
			return s->layer[i].desc;
	return s->layer[s->n - 1].desc;
}

/*
 * The layer whose owns() answers for the whole stack: the layers that declare
 * AL_F_OWNS_BELOW answer with their backend's owns() (their objects are its
 * objects), so a free asks the first layer below them directly and saves a
 * call per layer.
 */
static struct al_allocator *owner_layer(struct al_allocator *a)
{
	while (a->below && (a->desc->features & AL_F_OWNS_BELOW) && a->below->ops->owns)
		a = a->below;
	return a;
}

/* Choose how malloc reaches SHIM_ALIGN on this stack (see the header). */
static void choose_alignment(const struct al_stack_spec *s)
{
	min_align = al_spec_min_align(s);
	max_size = al_spec_max_size(s);
	if (min_align >= SHIM_ALIGN) {
		align_mode = ALIGN_NONE;
	} else if (!strcmp(object_layer(s)->name, "bpf_ma") && min_align == 8) {
		/* bpf_mem_alloc's 8-byte list node sits in front of every object
		 * in a unit of 16 bytes or more, each from a layer that aligns
		 * such units to 16: every object is 8 mod 16. */
		align_mode = ALIGN_PAD;
		pad = SHIM_ALIGN - min_align;
	} else {
		align_mode = ALIGN_ROUND;
	}
	if (max_size) /* what the caller may ask for, once padded or rounded */
		max_size = align_mode == ALIGN_PAD     ? max_size - pad
			   : align_mode == ALIGN_ROUND ? max_size & ~(SHIM_ALIGN - 1)
						       : max_size;
}

static void set_stats_prefix(const char *env)
{
	struct stat sb;
	char cwd[256];
	const char *sep = "";

	if (!env || !*env)
		return;
	if (env[0] != '/' && getcwd(cwd, sizeof(cwd)))
		sep = "/";
	else
		cwd[0] = 0;
	if (!stat(env, &sb) && S_ISDIR(sb.st_mode))
		snprintf(stats_prefix, sizeof(stats_prefix), "%s%s%s/alloclab", cwd, sep, env);
	else
		snprintf(stats_prefix, sizeof(stats_prefix), "%s%s%s", cwd, sep, env);
}

/* An empty or missing value is the default level. */
static void set_stats_level(const char *env)
{
	unsigned i;

	stats_level = AL_STATS_LITE;
	if (!env || !*env)
		return;
	snprintf(stats_level_text, sizeof(stats_level_text), "%s", env);
	stats_level = -1;
	for (i = 0; i < AL_STATS_NR; i++)
		if (!strcmp(env, al_stats_level_names[i]))
			stats_level = (int)i;
}

/* The environment's settings, and the library's for a shim's threads. */
static void shim_settings(void)
{
	const char *env;

	libc_usable_size = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
	env = getenv("ALLOCLAB_VERBOSE");
	verbose = env && *env && strcmp(env, "0");
	set_stats_prefix(getenv("ALLOCLAB_STATS"));
	set_stats_level(getenv("ALLOCLAB_STATS_LEVEL"));
	watch_open(getenv("ALLOCLAB_WATCH"));
	env = getenv("ALLOCLAB_POLICY");
	snprintf(policy_text, sizeof(policy_text), "%s", env ? env : "percpu > transfer > buddy");
	ncpu = AL_MAX_CPUS;
	/* Threads may outnumber CPUs and are preempted anywhere: test-and-set
	 * locks (no FIFO convoy behind a preempted waiter) that yield early. */
	al_lock_yield_mask = 63;
	al_lock_fair = 0;
	/* Every process the program starts pays for the clock's calibration
	 * (the locks' time budget reads the TSC): 1 ms is within 1e-4. */
	al_clock_calibration_ns = 1000000;
}

/* Parse the policy and build its stack, its layers counting at the stats
 * level asked for; 0, or -1 with policy_error saying why the shim cannot. */
static int policy_build(struct al_stack_spec *spec)
{
	const struct al_preset *preset;
	unsigned old_level;
	int ret;

	if (stats_level < 0) {
		snprintf(policy_error, sizeof(policy_error),
			 "ALLOCLAB_STATS_LEVEL=%s is not a stats level; valid levels: %s, %s, %s",
			 stats_level_text, al_stats_level_names[AL_STATS_LITE],
			 al_stats_level_names[AL_STATS_OFF], al_stats_level_names[AL_STATS_FULL]);
		return -1;
	}
	preset = al_spec_preset(policy_text);
	if (preset && preset->where == AL_PRESET_PEER) {
		/* Its spec would read (system), and be refused as malloc itself:
		 * name the preset and where it runs instead. */
		snprintf(policy_error, sizeof(policy_error),
			 "preset %s is a peer (%s): a real allocator, run in a child process "
			 "of its own, never inside the shim; give the shim alloclab's layers or "
			 "an in-process preset",
			 preset->name, preset->spec);
		return -1;
	}
	if (al_spec_parse(policy_text, spec, policy_error, sizeof(policy_error)))
		return -1;
	if (!(spec->layer[spec->n - 1].desc->features & AL_F_OWNS)) {
		snprintf(policy_error, sizeof(policy_error),
			 "the bottom layer %s does not own its memory by address range (libc and "
			 "system are malloc itself): the shim cannot use it",
			 spec->layer[spec->n - 1].desc->name);
		return -1;
	}
	if (spec_has_local_guard(spec)) {
		snprintf(policy_error, sizeof(policy_error),
			 "guard=local is refused under the preload shim (a free from a thread "
			 "without a model CPU, or from a signal handler inside the shim, reaches "
			 "CPU 0's caches from another thread); use guard=atomic");
		return -1;
	}
	old_level = al_stats_level_set((unsigned)stats_level);
	ret = al_stack_create(spec, ncpu, &top, policy_error, sizeof(policy_error));
	al_stats_level_set(old_level);
	if (ret)
		return -1;
	if (!top->ops->usable_size || !top->ops->owns) {
		snprintf(policy_error, sizeof(policy_error),
			 "the top layer %s cannot tell an object's size or owner (usable_size, "
			 "owns): realloc and free need both",
			 spec->layer[0].desc->name);
		al_stack_destroy(top);
		top = NULL;
		return -1;
	}
	return 0;
}

static al_noinline al_cold void shim_init(void)
{
	static struct al_stack_spec spec;
	int ret, recording = 0;
	unsigned old_level;

	bootstrapping = 1; /* everything below may call malloc: it gets glibc's */
	pthread_mutex_lock(&init_lock);
	if (state != ST_UNINIT)
		goto out_unlock;
	state = ST_INIT;
	my_pid = getpid();
	/* glibc initialises its malloc on the main thread, not in two worker
	 * threads falling back at once (see the header). */
	if (syscall(SYS_gettid) == my_pid)
		__libc_free(__libc_malloc(1));
	shim_settings();
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	atexit(atexit_stats);
	/* Recording without a policy passes every call through to glibc. */
	recording = al_rec_init(getenv("ALLOCLAB_POLICY") != NULL);
	if (recording && !getenv("ALLOCLAB_POLICY")) {
		policy_text[0] = 0;
		snprintf(policy_error, sizeof(policy_error), "recording on glibc (no policy)");
		goto out_off;
	}
	/* The shim's counters count at every level the layers may: the served
	 * share and the fallbacks are read from them. */
	old_level = al_stats_level_set(AL_STATS_LITE);
	ret = al_counters_init_desc(&ctr, shim_counters, SHIM_NR, 0, ncpu);
	al_stats_level_set(old_level);
	if (ret || pthread_key_create(&exit_key, thread_exit)) {
		snprintf(policy_error, sizeof(policy_error), "out of memory for the shim");
		goto out_off;
	}
	watch_claim(my_pid);
	if (watch_slot)
		watch_bump(&watch_slot->init);
	ret = policy_build(&spec);
	if (watch_slot)
		watch_bump(&watch_slot->init);
	if (ret)
		goto out_off;
	choose_alignment(&spec);
	owner = owner_layer(top);
	if (al_index_of(owner)) { /* an index covers the arena the owner owns */
		owner_base = al_index_of(owner)->base;
		owner_limit = al_index_of(owner)->limit;
	}
	__atomic_store_n(&state, ST_READY, __ATOMIC_RELEASE);
	say("alloclab preload: pid %d: malloc on %s (alignment: %s)\n", (int)my_pid, policy_text,
	    align_names[align_mode]);
	record_write("running");
	goto out_unlock;
out_off:
	/* Stay on glibc, costing nothing per call; say why in the stats record
	 * (and on stderr only when asked). */
	__atomic_store_n(&state, ST_OFF, __ATOMIC_RELEASE);
	say("alloclab preload: pid %d: %s; running on glibc malloc\n", (int)my_pid, policy_error);
	record_write("running");
out_unlock:
	if (recording)
		al_rec_start();
	pthread_mutex_unlock(&init_lock);
	bootstrapping = 0;
}

/* The policy is built before main() even when nothing allocates earlier. */
__attribute__((constructor)) static void shim_ctor(void)
{
	if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) == ST_UNINIT && !bootstrapping)
		shim_init();
}

static void *libc_alloc(size_t size, unsigned flags, size_t align)
{
	if (align > SHIM_ALIGN)
		return __libc_memalign(align, size);
	return (flags & AL_ZERO) ? __libc_calloc(1, size) : __libc_malloc(size);
}

static void *policy_alloc(size_t size, unsigned flags, size_t align);

/* Not ready: build the policy on the first call, else glibc (counted only
 * while the policy is being built: an off shim counts nothing). */
static al_noinline void *alloc_slow(size_t size, unsigned flags, size_t align)
{
	int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);

	if (s == ST_UNINIT && !bootstrapping) {
		shim_init();
		s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
	}
	if (s == ST_READY && !bootstrapping)
		return policy_alloc(size, flags, align);
	if (s != ST_OFF)
		count(NULL, SHIM_libc_early);
	return libc_alloc(size, flags, align);
}

/* The thread to serve from the policy, or NULL for glibc (counting why). */
static inline struct shim_thread *enter(void)
{
	struct shim_thread *t;

	if (al_unlikely(bootstrapping))
		return NULL;
	t = thread_self();
	if (al_unlikely(!t)) {
		count(NULL, SHIM_libc_threads);
		return NULL;
	}
	if (al_unlikely(t->inside)) {
		count(t, SHIM_libc_early);
		return NULL;
	}
	t->inside = 1;
	watch_bump(t->watch);
	return t;
}

static inline void leave(struct shim_thread *t)
{
	watch_bump(t->watch);
	t->inside = 0;
}

/* Whether p (a pointer the caller got) is policy memory: one owns() call on
 * the layer that answers it, not a walk down the stack. */
static inline bool ours(const void *p)
{
	if (!p || __atomic_load_n(&state, __ATOMIC_ACQUIRE) != ST_READY)
		return false;
	if (al_likely(owner_limit))
		return (uintptr_t)p - pad - owner_base < owner_limit;
	return owner->ops->owns(owner, (const char *)p - pad);
}

/*
 * An allocation a lock refused after its time budget (-ETIMEDOUT, a holder
 * preempted while threads outnumber CPUs) or a full waiter ring (-EBUSY) is
 * tried again after yielding: the policy did not say it has no memory, and
 * serving it from glibc would count against the policy's share. A few tries
 * only, unlike free_retry (a failed free would leak): each may wait a whole
 * lock budget, and what is still refused goes to glibc, counted.
 */
#define ALLOC_RETRIES 3

static al_noinline void *alloc_retry(struct al_ctx *c, size_t n, unsigned flags)
{
	void *p = NULL;
	int tries = 0;

	while ((c->err == -ETIMEDOUT || c->err == -EBUSY) && tries++ < ALLOC_RETRIES) {
		sched_yield();
		c->err = 0;
		p = top->ops->alloc(top, c, n, flags);
		if (p)
			break;
	}
	c->err = 0; /* read by the next refusal only: not cleared on the fast path */
	return p;
}

static void *policy_alloc(size_t size, unsigned flags, size_t align)
{
	struct shim_thread *t;
	size_t req;
	char *p;

	if (al_unlikely(__atomic_load_n(&state, __ATOMIC_ACQUIRE) != ST_READY))
		return alloc_slow(size, flags, align);
	/* More than PTRDIFF_MAX bytes (or an alignment that large) no allocator
	 * can serve: glibc fails it with ENOMEM, by design rather than as the
	 * policy's refusal. Below that, the rounding and the pad cannot wrap. */
	if (al_unlikely(size > PTRDIFF_MAX || align > PTRDIFF_MAX)) {
		count(self, SHIM_libc_large);
		goto out_libc;
	}
	t = enter();
	if (!t)
		goto out_libc;
	if (al_unlikely(align > SHIM_ALIGN && pad)) {
		count(t, SHIM_libc_aligned); /* no power-of-two block under a pad */
		goto out_leave;
	}
	/* malloc(0) is a unique pointer: the smallest object. */
	req = size > align ? size : align ? align : 1;
	if (align_mode == ALIGN_ROUND)
		req = (req + SHIM_ALIGN - 1) & ~(SHIM_ALIGN - 1);
	if (al_unlikely(max_size && req > max_size)) {
		count(t, SHIM_libc_large);
		goto out_leave;
	}
	p = top->ops->alloc(top, &t->ctx, req + pad, flags | AL_MAYSLEEP);
	if (al_unlikely(!p))
		p = alloc_retry(&t->ctx, req + pad, flags | AL_MAYSLEEP);
	if (al_unlikely(!p)) {
		count(t, SHIM_libc_refused);
		goto out_leave;
	}
	p += pad;
	if (al_unlikely((uintptr_t)p & ((align > SHIM_ALIGN ? align : SHIM_ALIGN) - 1))) {
		if (top->ops->free(top, &t->ctx, p - pad))
			count(t, SHIM_free_errors);
		count(t, SHIM_libc_aligned);
		goto out_leave;
	}
	count(t, SHIM_policy_allocs);
	leave(t);
	return p;
out_leave:
	leave(t);
out_libc:
	return libc_alloc(size, flags, align);
}

/* Recording (record.c): each public function below tests al_rec_on first,
 * one load and branch when not recording; the recorder serves the call
 * through the al_shim_* twin, which is the function's own body. Not while
 * bootstrapping: dlsym's and the start-up's calls are the shim's. */
#define RECORDING() (al_unlikely(al_rec_on) && !bootstrapping)

SHIM_API void *malloc(size_t size)
{
	if (RECORDING())
		return al_rec_malloc(size);
	return policy_alloc(size, 0, 0);
}

void *al_shim_malloc(size_t size)
{
	return policy_alloc(size, 0, 0);
}

/*
 * A thread may sleep in free(): a lock the policy gave up on after its time
 * budget (-ETIMEDOUT, a holder preempted while threads outnumber CPUs) or a
 * full waiter ring (-EBUSY) is tried again after yielding, since a failed
 * free would leak the block. Bounded, so that a lock that never comes back
 * turns into a counted free error, not a hang.
 */
static int free_retry(struct al_ctx *c, void *p)
{
	int ret, tries = 0;

	while ((ret = top->ops->free(top, c, p)) == -ETIMEDOUT || ret == -EBUSY) {
		if (++tries == 1000)
			break;
		sched_yield();
	}
	return ret;
}

static inline void free_impl(void *p)
{
	struct shim_thread *t;

	if (!p)
		return;
	if (!ours(p)) {
		if (self && state == ST_READY)
			count(self, SHIM_libc_frees);
		__libc_free(p);
		return;
	}
	p = (char *)p - pad;
	t = enter();
	if (!t) {
		/* Inside the shim or without a model CPU: this thread has no
		 * context of its own, and leaking is worse than a slow path, so
		 * free at CPU 0's IRQ level, which no thread uses. */
		struct al_ctx c;

		al_ctx_init(&c, 0);
		c.level = AL_CTX_IRQ;
		if (top->ops->free(top, &c, p))
			count(NULL, SHIM_free_errors);
		return;
	}
	if (free_retry(&t->ctx, p))
		count(t, SHIM_free_errors);
	else
		count(t, SHIM_policy_frees);
	leave(t);
}

SHIM_API void free(void *p)
{
	if (RECORDING()) {
		al_rec_free(p);
		return;
	}
	free_impl(p);
}

void al_shim_free(void *p)
{
	free_impl(p);
}

void *al_shim_calloc(size_t n, size_t size)
{
	size_t total;

	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return policy_alloc(total, AL_ZERO, 0);
}

SHIM_API void *calloc(size_t n, size_t size)
{
	if (RECORDING())
		return al_rec_calloc(n, size);
	return al_shim_calloc(n, size);
}

static size_t usable(void *p)
{
	if (ours(p))
		return top->ops->usable_size(top, (char *)p - pad) - pad;
	return libc_usable_size ? libc_usable_size(p) : 0;
}

size_t al_shim_usable_size(void *p)
{
	return p ? usable(p) : 0;
}

SHIM_API size_t malloc_usable_size(void *p)
{
	if (RECORDING())
		return al_rec_usable_size(p);
	return p ? usable(p) : 0;
}

void *al_shim_realloc(void *p, size_t size)
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

SHIM_API void *realloc(void *p, size_t size)
{
	if (RECORDING())
		return al_rec_realloc(p, size);
	return al_shim_realloc(p, size);
}

SHIM_API void *reallocarray(void *p, size_t n, size_t size)
{
	size_t total;

	if (RECORDING())
		return al_rec_reallocarray(p, n, size);
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

/* The error is returned, errno left as it was (as glibc leaves it), and
 * *out only written on success. */
int al_shim_posix_memalign(void **out, size_t align, size_t size)
{
	int saved = errno;
	void *p;

	if (!pow2(align) || align % sizeof(void *))
		return EINVAL;
	p = policy_alloc(size, 0, align);
	errno = saved;
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

SHIM_API int posix_memalign(void **out, size_t align, size_t size)
{
	if (RECORDING())
		return al_rec_posix_memalign(out, align, size);
	return al_shim_posix_memalign(out, align, size);
}

/* aligned_alloc (a power of two), memalign (any alignment), valloc and
 * pvalloc (the page; pvalloc rounds the size up to pages, and a size within
 * a page of SIZE_MAX, which would wrap to 0, is ENOMEM as in glibc).
 * memalign is glibc's: an alignment that is not a power of two is rounded
 * up to one (0 and 1 ask nothing beyond malloc's), past the largest one it
 * is EINVAL. */
void *al_shim_aligned(unsigned kind, size_t align, size_t size)
{
	if (kind == AL_TK_PVALLOC) {
		if (__builtin_add_overflow(size, align - 1, &size)) {
			errno = ENOMEM;
			return NULL;
		}
		size &= ~(align - 1);
	}
	if (kind == AL_TK_MEMALIGN && !pow2(align) && align <= SIZE_MAX / 2 + 1)
		align = align <= 1 ? 1 : (size_t)1 << (64 - __builtin_clzll(align - 1));
	if (!pow2(align)) {
		errno = EINVAL;
		return NULL;
	}
	return policy_alloc(size, 0, align);
}

SHIM_API void *aligned_alloc(size_t align, size_t size)
{
	if (RECORDING())
		return al_rec_aligned(AL_TK_ALIGNED_ALLOC, align, size);
	return al_shim_aligned(AL_TK_ALIGNED_ALLOC, align, size);
}

SHIM_API void *memalign(size_t align, size_t size)
{
	if (RECORDING())
		return al_rec_aligned(AL_TK_MEMALIGN, align, size);
	return al_shim_aligned(AL_TK_MEMALIGN, align, size);
}

SHIM_API void *valloc(size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (RECORDING())
		return al_rec_aligned(AL_TK_VALLOC, page, size);
	return policy_alloc(size, 0, page);
}

SHIM_API void *pvalloc(size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (RECORDING())
		return al_rec_aligned(AL_TK_PVALLOC, page, size);
	return al_shim_aligned(AL_TK_PVALLOC, page, size);
}

/*
 * The exec family: an image about to be replaced writes its record first
 * (atexit handlers do not run across exec), so `sh -c`, a compiler driver or
 * git that execs leaves the counters of the image it was. glibc's exec
 * functions call its internal execve directly, so each public one is
 * wrapped here and reaches the kernel through the next execve / execvpe /
 * fexecve. A failed exec leaves the process running; its record is
 * rewritten at exit.
 */
typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);

void *al_shim_next_sym(const char *name)
{
	void *f;

	bootstrapping = 1; /* dlsym may allocate */
	f = dlsym(RTLD_NEXT, name);
	bootstrapping = 0;
	return f;
}

static int next_execve(const char *path, char *const argv[], char *const envp[])
{
	static execve_fn f;

	if (!f)
		f = (execve_fn)al_shim_next_sym("execve");
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	return f(path, argv, envp);
}

static int next_execvpe(const char *file, char *const argv[], char *const envp[])
{
	static execve_fn f;

	if (!f)
		f = (execve_fn)al_shim_next_sym("execvpe");
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	return f(file, argv, envp);
}

/* A vfork child (or a raw clone) shares the parent's memory and must leave
 * its record state alone, yet an exec from it may load an image that never
 * runs the shim (env -i, a static program: what a shell's vfork runs). It
 * writes a record of its own, with nothing but stack buffers, naming the
 * image; the counters are the parent's, so it reports none. path is the
 * caller's buffer: empty until claimed, kept for the rewrite after a
 * failed exec. */
static void vfork_record(char *path, size_t size, const char *end, const char *target, int keeps)
{
	char tmp[VREC_SIZE + 8];
	pid_t pid = getpid();
	unsigned k, i;
	struct jw w;

	for (k = 0; !path[0] && k < 1000; k++) {
		int fd, n = k ? snprintf(path, size, "%s.%d.%u", stats_prefix, (int)pid, k)
			      : snprintf(path, size, "%s.%d", stats_prefix, (int)pid);

		if (n <= 0 || (size_t)n >= size - 8) {
			path[0] = 0;
			return;
		}
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd >= 0) {
			close(fd);
			break;
		}
		path[0] = 0;
		if (errno != EEXIST)
			return;
	}
	if (!path[0])
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	w.n = 0;
	if (w.fd < 0)
		return;
	jw_fmt(&w, "{\"pid\": %d, \"ppid\": %d, \"argv0\": ", (int)pid, (int)getppid());
	jw_str(&w, program_invocation_name);
	jw_put(&w, ", \"exe\": \"\", \"policy\": ", 23);
	jw_str(&w, policy_text);
	jw_fmt(&w, ", \"state\": \"%s\", \"error\": ", state == ST_READY ? "ready" : "off");
	jw_str(&w, policy_error);
	jw_stats_level(&w);
	jw_fmt(&w,
	       ", \"end\": \"%s\", \"vfork\": true, \"align\": \"%s\", \"align_pad\": %zu, "
	       "\"min_align\": %zu, \"max_size\": %zu",
	       end, align_names[align_mode], pad, min_align, max_size);
	if (!strcmp(end, "exec")) {
		jw_put(&w, ", \"exec\": ", 10);
		jw_str(&w, target);
		jw_fmt(&w, ", \"exec_preload\": %s", keeps ? "true" : "false");
	}
	jw_put(&w, ", \"shim\": {", 11);
	for (i = 0; i < SHIM_NR; i++)
		jw_fmt(&w, "%s\"%s\": 0", i ? ", " : "", shim_counters[i].name);
	jw_put(&w, "}, \"layers\": []}\n", 17);
	jw_flush(&w);
	close(w.fd);
	if (rename(tmp, path))
		unlink(tmp);
}

static int in_vfork_child(void)
{
	return stats_prefix[0] && getpid() != my_pid;
}

/* Whether envp keeps this shim for the next image as it is in this one:
 * LD_PRELOAD names the file it was loaded from (as the loader recorded it),
 * ALLOCLAB_POLICY names a policy unless this image records on glibc, and
 * ALLOCLAB_RECORD stays when this image records. */
static int env_preloads_shim(char *const envp[])
{
	static char self[512];
	/* Recording on glibc there is no policy to keep; recording, the next
	 * image is recorded only if ALLOCLAB_RECORD stays. */
	int preload = 0, policy = al_rec_on && !policy_text[0], record = !al_rec_on;

	if (!self[0]) {
		Dl_info info;

		if (dladdr((void *)env_preloads_shim, &info) && info.dli_fname)
			snprintf(self, sizeof(self), "%s", info.dli_fname);
	}
	for (; envp && *envp; envp++) {
		if (!strncmp(*envp, "LD_PRELOAD=", 11) &&
		    strstr(*envp + 11, self[0] ? self : "alloclab"))
			preload = 1;
		else if (!strncmp(*envp, "ALLOCLAB_POLICY=", 16))
			policy = 1;
		else if (!strncmp(*envp, "ALLOCLAB_RECORD=", 16))
			record = 1;
	}
	return preload && policy && record;
}

/* vrec: the caller's VREC_SIZE buffer for a vfork child's record. */
static void before_exec(const char *path, char *vrec, char *const envp[])
{
	int saved = errno, keeps = env_preloads_shim(envp);

	al_rec_end(1);
	vrec[0] = 0;
	if (in_vfork_child()) {
		vfork_record(vrec, VREC_SIZE, "exec", path ? path : "", keeps);
	} else {
		snprintf(exec_target, sizeof(exec_target), "%s", path ? path : "");
		exec_preload = keeps;
		record_write("exec");
	}
	errno = saved;
}

/* The exec failed (ENOENT, EACCES, ...): this image goes on, so its record
 * must not say it was replaced; a shell searching PATH lands here once per
 * directory that lacks the program. */
static int after_failed_exec(int ret, char *vrec)
{
	int saved = errno;

	if (vrec[0]) {
		vfork_record(vrec, VREC_SIZE, "running", "", 0);
	} else if (!in_vfork_child()) {
		exec_target[0] = 0;
		record_write("running");
	}
	errno = saved;
	return ret;
}

/* fexecve's image has no path; /proc names the file the descriptor opened. */
static void before_fexec(int fd, char *vrec, char *const envp[])
{
	char link[64], path[sizeof(exec_target)];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	path[n > 0 ? n : 0] = 0;
	before_exec(path, vrec, envp);
}

SHIM_API int execve(const char *path, char *const argv[], char *const envp[])
{
	char vrec[VREC_SIZE];

	before_exec(path, vrec, envp);
	return after_failed_exec(next_execve(path, argv, envp), vrec);
}

SHIM_API int execv(const char *path, char *const argv[])
{
	char vrec[VREC_SIZE];

	before_exec(path, vrec, environ);
	return after_failed_exec(next_execve(path, argv, environ), vrec);
}

SHIM_API int execvpe(const char *file, char *const argv[], char *const envp[])
{
	char vrec[VREC_SIZE];

	before_exec(file, vrec, envp);
	return after_failed_exec(next_execvpe(file, argv, envp), vrec);
}

SHIM_API int execvp(const char *file, char *const argv[])
{
	char vrec[VREC_SIZE];

	before_exec(file, vrec, environ);
	return after_failed_exec(next_execvpe(file, argv, environ), vrec);
}

SHIM_API int fexecve(int fd, char *const argv[], char *const envp[])
{
	static fexecve_fn f;
	char vrec[VREC_SIZE];

	before_fexec(fd, vrec, envp);
	if (!f)
		f = (fexecve_fn)al_shim_next_sym("fexecve");
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	return after_failed_exec(f(fd, argv, envp), vrec);
}

/* execl, execlp, execle: the variadic arguments as an argv on the stack. */
#define VA_ARGV(first, last, argv, extra)                           \
	do {                                                        \
		va_list ap_;                                        \
		size_t n_ = 1;                                      \
                                                                    \
		va_start(ap_, last);                                \
		while (va_arg(ap_, char *))                         \
			n_++;                                       \
		va_end(ap_);                                        \
		argv = __builtin_alloca((n_ + 1) * sizeof(char *)); \
		argv[0] = (char *)(first);                          \
		va_start(ap_, last);                                \
		for (size_t i_ = 1; i_ <= n_; i_++)                 \
			argv[i_] = va_arg(ap_, char *);             \
		extra;                                              \
		va_end(ap_);                                        \
	} while (0)

SHIM_API int execl(const char *path, const char *arg, ...)
{
	char **argv;
	char vrec[VREC_SIZE];

	VA_ARGV(arg, arg, argv, (void)0);
	before_exec(path, vrec, environ);
	return after_failed_exec(next_execve(path, argv, environ), vrec);
}

SHIM_API int execlp(const char *file, const char *arg, ...)
{
	char **argv;
	char vrec[VREC_SIZE];

	VA_ARGV(arg, arg, argv, (void)0);
	before_exec(file, vrec, environ);
	return after_failed_exec(next_execvpe(file, argv, environ), vrec);
}

SHIM_API int execle(const char *path, const char *arg, ...)
{
	char **argv, **envp;
	char vrec[VREC_SIZE];

	VA_ARGV(arg, arg, argv, envp = va_arg(ap_, char **));
	before_exec(path, vrec, envp);
	return after_failed_exec(next_execve(path, argv, envp), vrec);
}

/*
 * _exit and _Exit skip atexit handlers (shells end that way, and so do
 * forked children): the record is written here, then the process ends as
 * glibc's own would. exit() reaches glibc's internal _exit, not this one.
 */
static __attribute__((noreturn)) void exit_now(int status)
{
	for (;;)
		syscall(SYS_exit_group, status);
}

SHIM_API void _exit(int status)
{
	al_rec_end(0);
	record_write("exit");
	exit_now(status);
}

SHIM_API void _Exit(int status)
{
	al_rec_end(0);
	record_write("exit");
	exit_now(status);
}
