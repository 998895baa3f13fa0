/* SPDX-License-Identifier: MIT */
/*
 * runtime.c: the BPF environment of one private copy of a compiled libarena
 * tree (the stand-in headers expand to these functions).
 *
 * The arena
 * ---------
 * One arena per copy, as one per loaded BPF program: ARENA_SPAN (4 GiB, the
 * BPF arena's largest) of address space reserved PROT_NONE at an address
 * aligned to 4 GiB, so that an arena pointer's low 32 bits are its offset,
 * as under the kernel's user_vm_start, and code that masks pointers (chunk
 * = p & ~mask) or makes them from offsets (BUDDY_VADDR_OFFSET) is right.
 * Each page is free, reserved or allocated (one byte of state per page):
 *   alloc_pages(addr, n)  addr's offset, or (NULL) the lowest free run of n
 *                         pages; every page free, else NULL; mapped zeroed
 *   reserve_pages(addr,n) every page free, else -EBUSY; kept from alloc
 *                         with NULL, and from alloc at addr (as the kernel's
 *                         range tree keeps them: free them first)
 *   free_pages(addr, n)   allocated or reserved pages become free; the
 *                         allocated ones are unmapped (PROT_NONE, dropped)
 * Page operations take a mutex (they are the slow path: chunk growth).
 *
 * The lock, the CPU, the loop budget, printk
 * ------------------------------------------
 * arena_spin_lock takes the driver's lock for the lock word (env->acquire,
 * with the handle env->lock_handle gave for the word, asked once) with the
 * calling thread's context (alr_self.ctx, set at entry): alloclab's lock in
 * arena mode. With no driver (the selftest runner) it is a test-and-set
 * lock that never fails. bpf_get_smp_processor_id answers alr_self.cpu. can_loop spends
 * alr_self.budget (alr_rt.h); printk formats into last_msg, counts, and
 * keeps the first ALR_MSGS distinct texts with their counts (alr_msg).
 *
 * Cost: the hot path adds, per lock and unlock, a compare against the kept
 * lock words, one indirect call straight to the driver's lock and one
 * thread-local read; per can_loop a thread-local decrement (as BPF's may_goto
 * decrements a stack slot); the page calls are system calls (mmap) at chunk
 * growth.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include <vmlinux.h>
#include <bpf_arena_common.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
/* Memory given back to the system leaves no poison behind: the next mapping
 * at that address (another instance's arena) starts clean. */
#define unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION((const void *)(p), (size_t)(n))
#else
#define unpoison(p, n) ((void)(p), (void)(n))
#endif

#include "alr.h"

#define ARENA_SPAN  (1ULL << 32)
#define ARENA_PAGES (ARENA_SPAN / __PAGE_SIZE)
#define MSG_LEN	    256

enum { PG_FREE, PG_RESERVED, PG_ALLOCATED };

__thread struct alr_thread alr_self ALR_HIDDEN;

ALR_HIDDEN struct alr_env alr_env; /* the driver's callbacks (abi 0: none) */
static uintptr_t arena_lo;	   /* the arena's base, 4 GiB aligned */
static void *arena_map;		   /* the whole reservation (for munmap) */
static size_t arena_map_len;	   /* its length */
static uint8_t *page_state;	   /* PG_* per page */
static pthread_mutex_t pages_mu = PTHREAD_MUTEX_INITIALIZER; /* guards page_state */
static uint64_t events[ALR_EV_NR];			     /* totals, relaxed atomics */
static char last_msg[MSG_LEN]; /* the last printk, for the test report */
/* The first ALR_MSGS distinct printk texts and how often each came (the
 * layer writes them to the Result's notes); msgs_mu guards them. */
static struct {
	char text[MSG_LEN];
	uint64_t count;
} msgs[ALR_MSGS];
static unsigned nmsgs;
static uint64_t msgs_dropped; /* printk calls whose text found no free entry */
static pthread_mutex_t msgs_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t tas_lock; /* the lock without a driver */
#define ALR_LOCKS_SEEN 4  /* lock words whose driver handle is kept */
static struct {
	void *addr;   /* the tree's lock word (published last) */
	void *handle; /* the driver's lock for it */
} locks_seen[ALR_LOCKS_SEEN];
static pthread_mutex_t locks_mu = PTHREAD_MUTEX_INITIALIZER; /* first sight of a word */

static void event(unsigned ev, const char *msg)
{
	__atomic_fetch_add(&events[ev], 1, __ATOMIC_RELAXED);
	if (alr_env.event)
		alr_env.event(alr_env.owner, alr_self.ctx, ev, msg);
}

ALR_HIDDEN uint64_t alr_stat(unsigned ev)
{
	return ev < ALR_EV_NR ? __atomic_load_n(&events[ev], __ATOMIC_RELAXED) : 0;
}

ALR_HIDDEN const char *alr_last_msg(void)
{
	return last_msg;
}

ALR_HIDDEN bool alr_loop_exhausted(void)
{
	if (alr_self.budget == 0) {
		alr_self.budget = -1; /* count once per call */
		event(ALR_EV_LOOP_EXHAUSTED, NULL);
	}
	return false;
}

static void keep_msg(const char *text);

ALR_HIDDEN void alr_stream_printk(int stream, const char *fmt, ...)
{
	char buf[MSG_LEN];
	va_list ap;

	(void)stream;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	memcpy(last_msg, buf, sizeof(buf));
	keep_msg(buf);
	event(ALR_EV_PRINTK, buf);
}

/* Count text among the distinct messages (a slow path: the tree printed). */
static void keep_msg(const char *text)
{
	unsigned i;

	pthread_mutex_lock(&msgs_mu);
	for (i = 0; i < nmsgs && strcmp(msgs[i].text, text); i++)
		;
	if (i == nmsgs && nmsgs < ALR_MSGS)
		snprintf(msgs[nmsgs++].text, MSG_LEN, "%s", text);
	if (i < nmsgs)
		msgs[i].count++;
	else
		msgs_dropped++;
	pthread_mutex_unlock(&msgs_mu);
}

ALR_HIDDEN unsigned alr_msg(unsigned i, const char **text, uint64_t *count)
{
	unsigned n;

	pthread_mutex_lock(&msgs_mu);
	n = nmsgs;
	if (i < n) {
		*text = msgs[i].text;
		*count = msgs[i].count;
	} else if (i == n && msgs_dropped) {
		*text = NULL; /* the rest: texts past the first ALR_MSGS */
		*count = msgs_dropped;
	}
	pthread_mutex_unlock(&msgs_mu);
	return n + !!msgs_dropped;
}

ALR_HIDDEN void *alr_arena_base(void)
{
	return (void *)arena_lo;
}

/* The driver's handle of the lock word at lock: the words seen so far are
 * kept (handle stored before the word is published), the first sight of a
 * word asks the driver under locks_mu. NULL: the driver has no lock left. */
static void *handle_slow(void *lock)
{
	void *h = NULL;
	unsigned i;

	pthread_mutex_lock(&locks_mu);
	for (i = 0; i < ALR_LOCKS_SEEN && locks_seen[i].addr; i++)
		if (locks_seen[i].addr == lock) {
			h = locks_seen[i].handle;
			goto out;
		}
	h = alr_env.lock_handle(alr_env.owner, lock);
	if (h && i < ALR_LOCKS_SEEN) {
		locks_seen[i].handle = h;
		__atomic_store_n(&locks_seen[i].addr, lock, __ATOMIC_RELEASE);
	}
out:
	pthread_mutex_unlock(&locks_mu);
	return h;
}

static inline void *handle_of(void *lock)
{
	unsigned i;

	for (i = 0; i < ALR_LOCKS_SEEN; i++) {
		void *a = __atomic_load_n(&locks_seen[i].addr, __ATOMIC_ACQUIRE);

		if (a == lock)
			return locks_seen[i].handle;
		if (!a)
			break;
	}
	return handle_slow(lock);
}

/*
 * The driver's lock may run other callers on this thread while it waits or
 * hands over (simulated CPUs switch fibers in al_lock acquire and release),
 * and each of them enters the tree with its own context, CPU and budget in
 * this thread's alr_self: the caller's own are put back when the lock
 * returns.
 */
ALR_HIDDEN int alr_spin_lock(void *lock)
{
	if (alr_env.acquire) {
		struct alr_thread me = alr_self;
		void *h = handle_of(lock);
		int ret;

		if (__builtin_expect(!h, 0)) {
			event(ALR_EV_LOCK_TABLE_FULL, NULL);
			return -EBUSY;
		}
		ret = alr_env.acquire(h, me.ctx);
		alr_self = me;
		return ret;
	}
	while (__atomic_exchange_n(&tas_lock, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(&tas_lock, __ATOMIC_RELAXED))
			;
	return 0;
}

ALR_HIDDEN void alr_spin_unlock(void *lock)
{
	if (alr_env.release) {
		struct alr_thread me = alr_self;
		void *h = handle_of(lock);

		if (h) {
			alr_env.release(h, me.ctx);
			alr_self = me;
		}
		return;
	}
	__atomic_store_n(&tas_lock, 0, __ATOMIC_RELEASE);
}

ALR_HIDDEN void alr_pages_lock(int take)
{
	if (take)
		pthread_mutex_lock(&pages_mu);
	else
		pthread_mutex_unlock(&pages_mu);
}

/* Reserve the arena: 4 GiB aligned to 4 GiB, PROT_NONE. */
ALR_HIDDEN int alr_arena_init(void)
{
	size_t len = 2 * ARENA_SPAN;
	uintptr_t p, lo;
	void *m;

	m = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	p = (uintptr_t)m;
	lo = (p + ARENA_SPAN - 1) & ~(uintptr_t)(ARENA_SPAN - 1);
	if (lo > p)
		munmap(m, lo - p);
	if (lo + ARENA_SPAN < p + len)
		munmap((void *)(lo + ARENA_SPAN), p + len - lo - ARENA_SPAN);
	page_state = mmap(NULL, ARENA_PAGES, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (page_state == MAP_FAILED) {
		page_state = NULL;
		munmap((void *)lo, ARENA_SPAN);
		return -ENOMEM;
	}
	arena_lo = lo;
	arena_map = (void *)lo;
	arena_map_len = ARENA_SPAN;
	return 0;
}

ALR_HIDDEN void alr_arena_fini(void)
{
	if (arena_map) {
		unpoison(arena_map, arena_map_len);
		munmap(arena_map, arena_map_len);
	}
	if (page_state)
		munmap(page_state, ARENA_PAGES);
	arena_map = NULL;
	page_state = NULL;
	arena_lo = 0;
}

ALR_HIDDEN uintptr_t alr_arena_lo(void)
{
	return arena_lo;
}

ALR_HIDDEN size_t alr_arena_span(void)
{
	return ARENA_SPAN;
}

/* The first page of [addr's offset, + n pages), or -1 when out of the arena. */
static int64_t page_of(const void *addr, uint32_t n)
{
	uint64_t off = (uint32_t)(uintptr_t)addr;

	if (off % __PAGE_SIZE || n == 0 || off / __PAGE_SIZE + n > ARENA_PAGES)
		return -1;
	return (int64_t)(off / __PAGE_SIZE);
}

static bool range_is(uint64_t pg, uint32_t n, uint8_t state)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (page_state[pg + i] != state)
			return false;
	return true;
}

/* The lowest run of n free pages, or -1. */
static int64_t find_free(uint32_t n)
{
	uint64_t pg, run = 0;

	for (pg = 0; pg < ARENA_PAGES; pg++) {
		run = page_state[pg] == PG_FREE ? run + 1 : 0;
		if (run == n)
			return (int64_t)(pg + 1 - n);
	}
	return -1;
}

void __arena *bpf_arena_alloc_pages(void *map, void __arena *addr, __u32 page_cnt, int node_id,
				    __u64 flags)
{
	void *p = NULL;
	int64_t pg;

	(void)map;
	(void)node_id;
	(void)flags;
	if (!arena_lo)
		return NULL;
	pthread_mutex_lock(&pages_mu);
	pg = addr ? page_of(addr, page_cnt) : page_cnt ? find_free(page_cnt) : -1;
	if (pg >= 0 && range_is((uint64_t)pg, page_cnt, PG_FREE)) {
		p = (void *)(arena_lo + (uint64_t)pg * __PAGE_SIZE);
		if (mmap(p, (size_t)page_cnt * __PAGE_SIZE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
			 0) == MAP_FAILED)
			p = NULL;
		else
			memset(page_state + pg, PG_ALLOCATED, page_cnt);
	}
	pthread_mutex_unlock(&pages_mu);
	if (p)
		__atomic_fetch_add(&events[ALR_EV_PAGES_ALLOC], page_cnt, __ATOMIC_RELAXED);
	else
		event(ALR_EV_ALLOC_FAILED, NULL);
	return p;
}

int bpf_arena_reserve_pages(void *map, void __arena *addr, __u32 page_cnt)
{
	int64_t pg = page_of(addr, page_cnt);
	int ret = 0;

	(void)map;
	if (!arena_lo || pg < 0)
		return -EINVAL;
	pthread_mutex_lock(&pages_mu);
	if (range_is((uint64_t)pg, page_cnt, PG_FREE))
		memset(page_state + pg, PG_RESERVED, page_cnt);
	else
		ret = -EBUSY;
	pthread_mutex_unlock(&pages_mu);
	return ret;
}

void bpf_arena_free_pages(void *map, void __arena *ptr, __u32 page_cnt)
{
	int64_t pg = page_of(ptr, page_cnt);
	uint64_t freed = 0;
	uint32_t i;

	(void)map;
	if (!arena_lo || pg < 0)
		return;
	pthread_mutex_lock(&pages_mu);
	for (i = 0; i < page_cnt;) {
		uint32_t j = i;

		while (j < page_cnt && page_state[pg + j] == PG_ALLOCATED)
			page_state[pg + j++] = PG_FREE;
		if (j > i) { /* one mapping call per run of allocated pages */
			unpoison(arena_lo + (uint64_t)(pg + i) * __PAGE_SIZE,
				 (size_t)(j - i) * __PAGE_SIZE);
			mmap((void *)(arena_lo + (uint64_t)(pg + i) * __PAGE_SIZE),
			     (size_t)(j - i) * __PAGE_SIZE, PROT_NONE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
			freed += j - i;
			i = j;
			continue;
		}
		page_state[pg + i++] = PG_FREE;
	}
	pthread_mutex_unlock(&pages_mu);
	__atomic_fetch_add(&events[ALR_EV_PAGES_FREE], freed, __ATOMIC_RELAXED);
}
