/* SPDX-License-Identifier: MIT */
/*
 * Arena: a reserved virtual-address range, committed piece by piece.
 *
 * Models bpf_arena_reserve_pages() + bpf_arena_alloc_pages(): init reserves
 * `limit` bytes PROT_NONE (over-mapped by `align` so base can be aligned),
 * grow() bumps an offset with a CAS (lock-free, as buddy_chunk_get() does)
 * and makes the piece read-write. Exhaustion is a NULL from grow(), so a
 * small limit makes ENOMEM testable. destroy() unmaps everything.
 *
 * Metadata memory (al_meta_alloc) comes straight from mmap so that the
 * library never calls malloc: it must work when preloaded as malloc itself.
 *
 * Invariants: base is aligned to max(align, page size) and the reservation
 * [map, map + map_len) covers [base, base + limit); used only grows and
 * never exceeds limit; [base, base + used) is committed, except pieces
 * whose commit failed (their VA stays consumed, as libarena leaks it).
 * Locking: none. Concurrent grows race only on the CAS of `used`, so each
 * gets a distinct piece; contains() reads `used` with acquire and may run
 * at any time. init and destroy run while no other thread uses the arena.
 * Cost: a grow is one CAS and one mmap(MAP_FIXED) system call (a prefault
 * of the piece with populate); al_meta_alloc is one mmap per call, so
 * layers allocate their metadata once, at create.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloclab/core.h"

void *al_meta_alloc(size_t size)
{
	void *p;

	if (!size)
		size = 1;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void al_meta_free(void *p, size_t size)
{
	if (p)
		munmap(p, size ? size : 1);
}

int al_arena_init(struct al_arena *ar, size_t limit, size_t align, bool populate)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t base;
	void *m;

	memset(ar, 0, sizeof(*ar));
	if (!limit || !align || (align & (align - 1)) || limit % page)
		return -EINVAL;
	if (align < page)
		align = page;
	m = mmap(NULL, limit + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	base = ((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1);
	ar->map = m;
	ar->map_len = limit + align;
	ar->base = base;
	ar->limit = limit;
	ar->align = align;
	ar->populate = populate;
	return 0;
}

void *al_arena_grow(struct al_arena *ar, size_t len)
{
	size_t old = __atomic_load_n(&ar->used, __ATOMIC_RELAXED), new;
	void *p;

	if (len % (size_t)sysconf(_SC_PAGESIZE))
		return NULL; /* a commit is whole pages: refused before any VA is consumed */
	do {
		new = old + len;
		if (new > ar->limit || new < old)
			return NULL;
	} while (!__atomic_compare_exchange_n(&ar->used, &old, new, false, __ATOMIC_ACQ_REL,
					      __ATOMIC_RELAXED));
	p = (void *)(ar->base + old);
	/* MAP_FIXED over our own reservation: fresh zero pages, read-write. */
	if (mmap(p, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | (ar->populate ? MAP_POPULATE : 0), -1,
		 0) == MAP_FAILED)
		return NULL; /* the VA stays consumed, as libarena leaks it on failure */
	__atomic_fetch_add(&ar->commits, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&ar->committed, len, __ATOMIC_RELAXED);
	return p;
}

bool al_arena_contains(const struct al_arena *ar, const void *p)
{
	uintptr_t a = (uintptr_t)p;

	return a >= ar->base && a < ar->base + __atomic_load_n(&ar->used, __ATOMIC_ACQUIRE);
}

void al_arena_destroy(struct al_arena *ar)
{
	if (ar->map)
		munmap(ar->map, ar->map_len);
	memset(ar, 0, sizeof(*ar));
}
