/* SPDX-License-Identifier: MIT */
/*
 * The recorder: the preload shim writes every malloc-family call of the
 * program into a raw stream (csrc/trace/raw.h) when ALLOCLAB_RECORD=DIR is
 * set. Without ALLOCLAB_POLICY the shim passes every call through to glibc
 * and records it; with one, the policy serves and is recorded. Linked into
 * liballoclab-preload.so only.
 *
 * Entry: preload.c's public functions test al_rec_on (one load and branch
 * when not recording) and come here; these wrappers call the shim's own
 * implementation (al_shim_*) and record the call. A thread-local busy flag
 * makes every call made while a recorded call is in progress (the shim's
 * realloc calling malloc and free, glibc's pthread_setspecific, a signal
 * handler that interrupts a recorded call) pass through unrecorded, so each
 * public call is recorded once, never recursively.
 *
 * Ordering: a global sequence number (one relaxed fetch-add) orders all
 * threads' ops. An allocation takes its seq after the call returns, a free
 * before the memory goes back, realloc one before (its old object) and one
 * after (its new one). If thread B gets the address thread A freed, A's free
 * happens before B's malloc returns (the allocator's own synchronisation
 * hands the block over), so A's seq is below B's in the counter's
 * modification order even with relaxed atomics; merging the threads in seq
 * order therefore never sees an address in use twice, and the finaliser can
 * turn addresses into object ids (finish.c). Addresses, not ids, are
 * recorded here: no table lookup per call.
 *
 * Buffers: one per live thread, REC_BUF_SIZE bytes of mmap (never malloc),
 * reused after the thread exits, so memory is bounded by the live threads.
 * The owner appends ops and publishes (ops, bytes) with one release store;
 * a full buffer is written as a chunk at an offset reserved by a fetch-add
 * on the file's end (pwrite): no lock is shared between recording threads.
 * Each buffer has a flush lock, taken by its owner only to flush and by the
 * end-of-image flush (exit, _exit, exec), which writes every thread's
 * published ops; an op written twice that way is dropped by the finaliser
 * (its seq is not above the thread's last).
 *
 * Threads: pthread_create is wrapped so the new thread records its start
 * with its parent's index; a thread's exit (a TSD destructor) records its
 * end and flushes. Calls the thread makes after that (later TSD destructors)
 * pass through and are counted as unrecorded, as are calls of a thread
 * whose buffer could not be mapped.
 *
 * Process images: each image (the program, a fork child, an exec'd image)
 * claims its own raw file DIR/raw.<pid>[.<n>] (O_EXCL) and appends one JSON
 * line to DIR/index.jsonl (O_APPEND, one write): pid, ppid, exe, argv, file,
 * start. A fork child drops the parent's unflushed data (the parent writes
 * it to its own file), closes the parent's file and starts its own, its
 * forking thread as thread 0. A vfork child shares the parent's memory and
 * records nothing of its own; the image it execs starts a file.
 *
 * Cost per recorded call: a TLS load and store (busy), the fetch-add, one
 * unfenced rdtsc, 8-20 bytes of varints into the thread's buffer and a
 * store; a 32-byte chunk header and a pwrite per 64 KiB.
 * Lock order: a buffer's flush lock is a leaf (no other lock is taken while
 * it is held); the end flush takes them one at a time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "alloclab/alloclab.h"
#include "../trace/raw.h"
#include "record.h"

#define SHIM_API     __attribute__((visibility("default")))
#define REC_BUF_SIZE (64u << 10)

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);

struct rec_buf {
	struct rec_buf *next; /* every buffer of the process, pushed once */
	int live;	      /* held by a thread */
	int lock;	      /* flush lock: the owner's flush, the end flush */
	uint64_t pub;	      /* (ops << 32) | bytes, published after each op */
	uint32_t wlen;	      /* owner: payload bytes */
	uint32_t wnops;	      /* owner: ops */
	uint64_t last_seq, last_tick, last_addr;
	struct rec_chunk hdr; /* written in place just before the payload */
	uint8_t payload[];
};

#define REC_CAP (REC_BUF_SIZE - sizeof(struct rec_buf))
/* A chunk is written with one pwrite from hdr through the payload. */
_Static_assert(offsetof(struct rec_buf, payload) ==
		       offsetof(struct rec_buf, hdr) + sizeof(struct rec_chunk),
	       "the chunk header must sit right before the payload");

int al_rec_on;
static char rec_dir[512];
static char rec_file[64];
static int rec_fd = -1;
static pid_t rec_pid;
static uint64_t rec_off;      /* the raw file's end: next chunk's offset */
static uint64_t rec_seq;      /* the global sequence */
static uint32_t rec_nthreads; /* thread indices handed out in this image */
static uint64_t rec_unrecorded;
static uint64_t rec_start_tick;
static struct rec_buf *rec_bufs;
static pthread_key_t rec_key;
static int rec_policy; /* a policy serves (else glibc) */

static __thread struct rec_buf *rec_me __attribute__((tls_model("initial-exec")));
static __thread int rec_busy __attribute__((tls_model("initial-exec")));
static __thread int rec_done __attribute__((tls_model("initial-exec")));
static __thread uint32_t rec_parent __attribute__((tls_model("initial-exec")));
static __thread int rec_ending __attribute__((tls_model("initial-exec")));

/* ---- the raw file ---- */

static void pwrite_all(const void *buf, size_t n, uint64_t off)
{
	const char *p = buf;

	while (n) {
		ssize_t r = pwrite(rec_fd, p, n, (off_t)off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
}

/* Reserve n bytes at the file's end and write them there. */
static void rec_append(const void *buf, size_t n)
{
	uint64_t off = __atomic_fetch_add(&rec_off, n, __ATOMIC_RELAXED);

	if (rec_fd >= 0)
		pwrite_all(buf, n, off);
}

static void flag_lock(int *l)
{
	while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
		al_cpu_relax();
}

static void flag_unlock(int *l)
{
	__atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

/* Write the buffer's published ops as a chunk; the lock is held. */
static void buf_write_locked(struct rec_buf *b)
{
	uint64_t pub;

	al_flag_assert_held(&b->lock);
	pub = __atomic_load_n(&b->pub, __ATOMIC_ACQUIRE);
	if (!(uint32_t)pub)
		return;
	b->hdr.magic = REC_CHUNK_MAGIC;
	b->hdr.len = (uint32_t)pub;
	b->hdr.nops = (uint32_t)(pub >> 32);
	rec_append(&b->hdr, sizeof(b->hdr) + (uint32_t)pub);
}

/* Start a new chunk after the thread's last op; the lock is held. */
static void buf_reset_locked(struct rec_buf *b)
{
	al_flag_assert_held(&b->lock);
	b->wlen = b->wnops = 0;
	b->last_addr = 0;
	b->hdr.base_seq = b->last_seq;
	b->hdr.base_tick = b->last_tick;
	__atomic_store_n(&b->pub, 0, __ATOMIC_RELEASE);
}

static al_noinline void buf_flush(struct rec_buf *b)
{
	flag_lock(&b->lock);
	buf_write_locked(b);
	buf_reset_locked(b);
	flag_unlock(&b->lock);
}

/* ---- encoding ---- */

static inline uint8_t *put_v(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)v | 0x80;
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

static inline uint8_t *put_addr(struct rec_buf *b, uint8_t *p, const void *a)
{
	uint64_t d = (uint64_t)(uintptr_t)a - b->last_addr;

	b->last_addr = (uint64_t)(uintptr_t)a;
	return put_v(p, (d << 1) ^ (uint64_t)((int64_t)d >> 63));
}

static inline uint64_t seq_next(void)
{
	return __atomic_fetch_add(&rec_seq, 1, __ATOMIC_RELAXED) + 1;
}

/* Room for one op, its kind and flags, seq and clock deltas. */
static inline uint8_t *op_head(struct rec_buf *b, unsigned kf, uint64_t seq)
{
	uint64_t t = al_ticks_fast();
	uint8_t *p;

	if (al_unlikely(b->wlen > REC_CAP - REC_OP_MAX))
		buf_flush(b);
	p = b->payload + b->wlen;
	if (al_unlikely(t < b->last_tick))
		t = b->last_tick; /* another CPU's clock ran behind: keep order */
	*p++ = (uint8_t)kf;
	p = put_v(p, seq - b->last_seq);
	p = put_v(p, t - b->last_tick);
	b->last_seq = seq;
	b->last_tick = t;
	return p;
}

static inline void op_end(struct rec_buf *b, uint8_t *p)
{
	b->wlen = (uint32_t)(p - b->payload);
	b->wnops++;
	__atomic_store_n(&b->pub, ((uint64_t)b->wnops << 32) | b->wlen, __ATOMIC_RELEASE);
}

/* ---- threads ---- */

/* A buffer for this thread: a free one, else a new mapping. */
static struct rec_buf *buf_take(void)
{
	struct rec_buf *b;

	for (b = __atomic_load_n(&rec_bufs, __ATOMIC_ACQUIRE); b; b = b->next) {
		int zero = 0;

		if (!__atomic_load_n(&b->live, __ATOMIC_RELAXED) &&
		    __atomic_compare_exchange_n(&b->live, &zero, 1, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return b;
	}
	b = mmap(NULL, REC_BUF_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED)
		return NULL;
	b->live = 1;
	b->next = __atomic_load_n(&rec_bufs, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(&rec_bufs, &b->next, b, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED))
		;
	return b;
}

static void rec_thread_start(struct rec_buf *b)
{
	uint8_t *p = op_head(b, AL_TK_THREAD_START, seq_next());

	op_end(b, put_v(p, rec_parent));
}

/* This thread's first recorded call: a buffer and a thread index; NULL
 * (counted) when the thread has ended or no buffer can be mapped. */
static al_noinline struct rec_buf *buf_new(void)
{
	struct rec_buf *b = rec_done ? NULL : buf_take();

	if (!b) {
		__atomic_fetch_add(&rec_unrecorded, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	flag_lock(&b->lock);
	b->hdr.thread = __atomic_fetch_add(&rec_nthreads, 1, __ATOMIC_RELAXED);
	b->last_seq = 0;
	b->last_tick = rec_start_tick;
	buf_reset_locked(b);
	flag_unlock(&b->lock);
	rec_me = b;
	pthread_setspecific(rec_key, b); /* may allocate: busy, so not recorded */
	rec_thread_start(b);
	return b;
}

/* The thread ends: its last op, its data written, its buffer free again. */
static void rec_thread_exit(void *arg)
{
	struct rec_buf *b = arg;

	if (!b || b != rec_me || !al_rec_on)
		return;
	rec_busy = 1;
	op_end(b, op_head(b, AL_TK_THREAD_EXIT, seq_next()));
	buf_flush(b);
	rec_me = NULL;
	rec_done = 1;
	rec_busy = 0;
	__atomic_store_n(&b->live, 0, __ATOMIC_RELEASE);
}

/* NULL: pass the call through unrecorded (a call inside a recorded one, or
 * a thread that cannot record); else busy is set until rec_leave. */
static inline struct rec_buf *rec_enter(void)
{
	struct rec_buf *b;

	if (rec_busy)
		return NULL;
	rec_busy = 1;
	b = rec_me;
	if (al_unlikely(!b)) {
		b = buf_new();
		if (!b)
			rec_busy = 0;
	}
	return b;
}

static inline void rec_leave(void)
{
	rec_busy = 0;
}

/* ---- the recorded calls ---- */

/* An allocation: its seq after it returned, one or two arguments, the result. */
static inline void rec_alloc(struct rec_buf *b, unsigned kind, uint64_t x, uint64_t y, int two,
			     const void *p, int zero)
{
	uint8_t *o = op_head(b, kind | (p ? 0 : REC_F_NULL) | (zero ? REC_F_ZERO : 0), seq_next());

	o = put_v(o, x);
	if (two)
		o = put_v(o, y);
	if (p)
		o = put_addr(b, o, p);
	op_end(b, o);
}

void *al_rec_malloc(size_t size)
{
	struct rec_buf *b = rec_enter();
	void *p;

	if (!b)
		return al_shim_malloc(size);
	p = al_shim_malloc(size);
	rec_alloc(b, AL_TK_MALLOC, size, 0, 0, p, !size);
	rec_leave();
	return p;
}

void *al_rec_calloc(size_t n, size_t size)
{
	struct rec_buf *b = rec_enter();
	void *p;

	if (!b)
		return al_shim_calloc(n, size);
	p = al_shim_calloc(n, size);
	rec_alloc(b, AL_TK_CALLOC, n, size, 1, p, !n || !size);
	rec_leave();
	return p;
}

void al_rec_free(void *p)
{
	struct rec_buf *b = rec_enter();
	uint8_t *o;

	if (!b) {
		al_shim_free(p);
		return;
	}
	/* the seq before the memory goes back (see the header) */
	o = op_head(b, AL_TK_FREE | (p ? 0 : REC_F_NULL), seq_next());
	if (p)
		o = put_addr(b, o, p);
	op_end(b, o);
	al_shim_free(p);
	rec_leave();
}

/* realloc and reallocarray: seq before (the old object goes) and after. */
static void *rec_realloc(struct rec_buf *b, void *old, size_t size, int overflow)
{
	uint64_t seq = seq_next(), seq2;
	void *p = NULL;
	uint8_t *o;

	if (overflow)
		errno = ENOMEM;
	else
		p = al_shim_realloc(old, size);
	seq2 = seq_next();
	o = op_head(b,
		    AL_TK_REALLOC | (p ? 0 : REC_F_NULL) | (size ? 0 : REC_F_ZERO) |
			    (old ? REC_F_OLD : 0),
		    seq);
	if (old)
		o = put_addr(b, o, old);
	o = put_v(o, size);
	o = put_v(o, seq2 - seq);
	if (p)
		o = put_addr(b, o, p);
	op_end(b, o);
	return p;
}

void *al_rec_realloc(void *old, size_t size)
{
	struct rec_buf *b = rec_enter();
	void *p;

	if (!b)
		return al_shim_realloc(old, size);
	p = rec_realloc(b, old, size, 0);
	rec_leave();
	return p;
}

void *al_rec_reallocarray(void *old, size_t n, size_t size)
{
	struct rec_buf *b;
	size_t total;
	int over = __builtin_mul_overflow(n, size, &total);
	void *p;

	b = rec_enter();
	if (!b) {
		if (over) {
			errno = ENOMEM;
			return NULL;
		}
		return al_shim_realloc(old, total);
	}
	p = rec_realloc(b, old, over ? SIZE_MAX : total, over);
	rec_leave();
	return p;
}

/* The memalign family: kind, alignment, size. */
void *al_rec_aligned(unsigned kind, size_t align, size_t size)
{
	struct rec_buf *b = rec_enter();
	void *p;

	p = al_shim_aligned(kind, align, size);
	if (b) {
		rec_alloc(b, kind, align, size, 1, p, !size);
		rec_leave();
	}
	return p;
}

int al_rec_posix_memalign(void **out, size_t align, size_t size)
{
	struct rec_buf *b = rec_enter();
	int ret = al_shim_posix_memalign(out, align, size);

	if (b) {
		rec_alloc(b, AL_TK_POSIX_MEMALIGN, align, size, 1, ret ? NULL : *out, !size);
		rec_leave();
	}
	return ret;
}

size_t al_rec_usable_size(void *p)
{
	struct rec_buf *b = rec_enter();
	size_t n = al_shim_usable_size(p);
	uint8_t *o;

	if (b) {
		o = op_head(b, AL_TK_USABLE_SIZE | (p ? 0 : REC_F_NULL), seq_next());
		if (p)
			o = put_addr(b, o, p);
		op_end(b, put_v(o, n));
		rec_leave();
	}
	return n;
}

/* ---- pthread_create: the new thread records its parent ---- */

struct rec_start {
	void *(*fn)(void *);
	void *arg;
	uint32_t parent; /* the creating thread's index + 1 */
};

static void *rec_trampoline(void *p)
{
	struct rec_start s = *(struct rec_start *)p;

	__libc_free(p);
	rec_parent = s.parent;
	if (rec_enter()) /* records the start now, not at the first allocation */
		rec_leave();
	return s.fn(s.arg);
}

typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

SHIM_API int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
			    void *arg)
{
	static pthread_create_fn next;
	struct rec_start *s;
	struct rec_buf *b;
	int ret;

	if (!next)
		next = (pthread_create_fn)al_shim_next_sym("pthread_create");
	if (!next)
		return ENOSYS;
	if (!al_rec_on)
		return next(t, attr, fn, arg);
	b = rec_enter();
	s = __libc_malloc(sizeof(*s));
	if (!s) {
		if (b)
			rec_leave();
		return EAGAIN;
	}
	s->fn = fn;
	s->arg = arg;
	s->parent = b ? b->hdr.thread + 1 : 0;
	if (b)
		rec_leave();
	ret = next(t, attr, rec_trampoline, s);
	if (ret)
		__libc_free(s);
	return ret;
}

/* ---- process images ---- */

struct lw {
	size_t n;
	char buf[16384];
};

static void lw_put(struct lw *w, const char *s, size_t len)
{
	if (len > sizeof(w->buf) - 2 - w->n)
		len = sizeof(w->buf) - 2 - w->n;
	memcpy(w->buf + w->n, s, len);
	w->n += len;
}

/* A JSON string of the bytes s: quotes and backslashes escaped, and every
 * control byte and byte of 0x7f and above written as \u00XX, a byte and not
 * a code point (JSON has no bytes, and a name need not be UTF-8): the reader
 * (alloclab.record) takes the string back to bytes as Latin-1 and decodes
 * them as the file system's names are. */
static void lw_str(struct lw *w, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";

	lw_put(w, "\"", 1);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char e[6] = { '\\', (char)c, 0, 0, 0, 0 };

		if (c == '"' || c == '\\') {
			lw_put(w, e, 2);
		} else if (c < 0x20 || c >= 0x7f) {
			e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[c >> 4], e[5] = hex[c & 15];
			lw_put(w, e, 6);
		} else {
			lw_put(w, (const char *)&c, 1);
		}
	}
	lw_put(w, "\"", 1);
}

/* argv from /proc/self/cmdline, as a JSON list. */
static void lw_argv(struct lw *w)
{
	static char cmd[8192];
	ssize_t n = 0, r;
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

	while (fd >= 0 && (size_t)n < sizeof(cmd) && (r = read(fd, cmd + n, sizeof(cmd) - n)) > 0)
		n += r;
	if (fd >= 0)
		close(fd);
	lw_put(w, "[", 1);
	for (ssize_t i = 0; i < n;) {
		size_t len = strnlen(cmd + i, (size_t)(n - i));

		if (i)
			lw_put(w, ", ", 2);
		lw_str(w, cmd + i, len);
		i += (ssize_t)len + 1;
	}
	lw_put(w, "]", 1);
}

/* One line in DIR/index.jsonl, written with one O_APPEND write. */
static void index_append(const struct rec_file_hdr *h)
{
	static struct lw w;
	char path[sizeof(rec_dir) + 16], num[160], exe[512];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int fd, n;

	w.n = 0;
	n = snprintf(num, sizeof(num),
		     "{\"pid\": %d, \"ppid\": %d, \"start_ns\": %llu, \"exe\": ", h->pid, h->ppid,
		     (unsigned long long)h->start_ns);
	lw_put(&w, num, (size_t)n);
	lw_str(&w, exe, len > 0 ? (size_t)len : 0);
	lw_put(&w, ", \"argv\": ", 10);
	lw_argv(&w);
	lw_put(&w, ", \"file\": ", 10);
	lw_str(&w, rec_file, strlen(rec_file));
	lw_put(&w, rec_policy ? ", \"served_by\": \"policy\"}\n" : ", \"served_by\": \"glibc\"}\n",
	       rec_policy ? 25 : 24);
	snprintf(path, sizeof(path), "%s/index.jsonl", rec_dir);
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, w.buf, w.n) < 0) { /* nothing to do: the trace will lack its index line */
	}
	close(fd);
}

/* Claim this image's raw file, write its header, name it in the index. */
static void image_open(void)
{
	struct rec_file_hdr h;
	struct timespec ts;
	char path[sizeof(rec_dir) + sizeof(rec_file)];

	rec_pid = getpid();
	for (unsigned k = 0; k < 1000; k++) {
		if (k)
			snprintf(rec_file, sizeof(rec_file), "raw.%d.%u", (int)rec_pid, k);
		else
			snprintf(rec_file, sizeof(rec_file), "raw.%d", (int)rec_pid);
		snprintf(path, sizeof(path), "%s/%s", rec_dir, rec_file);
		rec_fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (rec_fd >= 0 || errno != EEXIST)
			break;
	}
	if (rec_fd < 0)
		return;
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, REC_MAGIC, sizeof(h.magic));
	h.version = REC_VERSION;
	h.hdr_size = sizeof(h);
	h.start_tick = rec_start_tick = al_ticks();
	h.ticks_per_ns = al_clock.ticks_per_ns;
	h.tsc = (uint32_t)al_clock.tsc;
	h.pid = (int32_t)rec_pid;
	h.ppid = (int32_t)getppid();
	clock_gettime(CLOCK_REALTIME, &ts);
	h.start_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	rec_off = 0;
	rec_append(&h, sizeof(h));
	index_append(&h);
}

/* The image ends (exit, _exit, exec): every thread's published ops, then
 * the end chunk. Ops recorded after it (later exit handlers) are written
 * by a later end if any. Not in a vfork child, whose memory is the
 * parent's, nor again from a signal handler that interrupted an end. */
void al_rec_end(int exec)
{
	struct {
		struct rec_chunk c;
		struct rec_end e;
	} end;
	struct rec_buf *b;
	int busy = rec_busy;

	if (!al_rec_on || getpid() != rec_pid || rec_ending)
		return;
	rec_ending = 1;
	for (b = __atomic_load_n(&rec_bufs, __ATOMIC_ACQUIRE); b; b = b->next) {
		/* This thread's own buffer while a signal handler interrupted a
		 * recorded call (which may hold its lock) is left out. */
		if (!__atomic_load_n(&b->live, __ATOMIC_ACQUIRE) || (b == rec_me && busy))
			continue;
		flag_lock(&b->lock);
		buf_write_locked(b);
		flag_unlock(&b->lock);
	}
	memset(&end, 0, sizeof(end));
	end.c.magic = REC_CHUNK_MAGIC;
	end.c.thread = REC_END_THREAD;
	end.c.len = sizeof(end.e);
	end.e.end_tick = al_ticks();
	end.e.unrecorded = __atomic_load_n(&rec_unrecorded, __ATOMIC_RELAXED);
	end.e.threads = __atomic_load_n(&rec_nthreads, __ATOMIC_RELAXED);
	end.e.why = exec ? REC_END_EXEC : REC_END_EXIT;
	rec_append(&end, sizeof(end));
	rec_ending = 0;
}

static void rec_atexit(void)
{
	al_rec_end(0);
}

/* A fork child is an image of its own: its own file, its forking thread as
 * thread 0, none of the parent's unflushed ops. */
static void rec_fork_child(void)
{
	struct rec_buf *b;

	if (!al_rec_on)
		return;
	if (rec_fd >= 0)
		close(rec_fd);
	rec_fd = -1;
	for (b = rec_bufs; b; b = b->next) {
		b->lock = 0;
		b->live = b == rec_me;
	}
	rec_seq = 0;
	rec_nthreads = 0;
	rec_unrecorded = 0;
	image_open();
	b = rec_me;
	if (b) {
		b->hdr.thread = rec_nthreads++;
		b->last_seq = 0;
		b->last_tick = rec_start_tick;
		flag_lock(&b->lock);
		buf_reset_locked(b);
		flag_unlock(&b->lock);
		rec_parent = 0;
		rec_thread_start(b);
	}
}

/* Set up recording when ALLOCLAB_RECORD names a directory; called while
 * the shim starts, with malloc going to glibc. Returns whether it records. */
int al_rec_init(int policy)
{
	const char *dir = getenv("ALLOCLAB_RECORD");

	if (!dir || !*dir || strlen(dir) >= sizeof(rec_dir))
		return 0;
	snprintf(rec_dir, sizeof(rec_dir), "%s", dir);
	rec_policy = policy;
	al_clock_init();
	if (pthread_key_create(&rec_key, rec_thread_exit))
		return 0;
	image_open();
	if (rec_fd < 0)
		return 0;
	pthread_atfork(NULL, NULL, rec_fork_child);
	atexit(rec_atexit);
	return 1;
}

void al_rec_start(void)
{
	__atomic_store_n(&al_rec_on, 1, __ATOMIC_RELEASE);
}
