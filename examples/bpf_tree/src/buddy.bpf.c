/* SPDX-License-Identifier: MIT */
/*
 * bpf_tree: a power-of-two size-class allocator written as BPF arena C, for
 * alloclab's tests of the libarena layer (see ../README.md).
 *
 * Objects of 16 B .. 4 KiB in POOL_CLASSES classes. A window of POOL_SLABS
 * slabs of POOL_SLAB_BYTES is reserved in the arena at POOL_OFFSET; a class
 * whose free list is empty takes the next slab (its reservation freed, its
 * pages allocated at that offset), records the class in slab_class[] and
 * carves the slab into objects on the class's LIFO list, linked through
 * each free object's first word. An object's slab is found from its arena
 * offset, the low 32 bits of its address (the arena is 4 GiB aligned).
 * Invalid frees (outside the used slabs, not an object start) return
 * -EINVAL; double frees are not detected. One arena spin lock guards the
 * lists and the slab table; every loop is bounded with can_loop. In an ASan
 * build a free object is poisoned whole (libarena/asan.h).
 */
#include <libarena/common.h>
#include <libarena/buddy.h>
#include <libarena/asan.h>

#define SLAB_PAGES (POOL_SLAB_BYTES / __PAGE_SIZE)

static int size_class(size_t size)
{
	int c;

	for (c = zero; c < POOL_CLASSES && can_loop; c++)
		if (size <= (1UL << (POOL_MIN_SHIFT + c)))
			return size ? c : -1;
	return -1;
}

__weak int buddy_init(struct buddy __arena *b)
{
	int c, ret;

	if (!b)
		return -EINVAL;
	ret = bpf_arena_reserve_pages(&arena, (void __arena *)POOL_OFFSET, POOL_SLABS * SLAB_PAGES);
	if (ret)
		return ret;
	b->reserved = true;
	b->slabs_used = 0;
	b->live = 0;
	for (c = zero; c < POOL_CLASSES && can_loop; c++)
		b->free_head[c] = POOL_NIL;
	return 0;
}

__weak int buddy_destroy(struct buddy __arena *b)
{
	int c;

	if (!b)
		return -EINVAL;
	/* Frees the slabs' pages and what is left of the reservation alike. */
	if (b->reserved)
		bpf_arena_free_pages(&arena, (void __arena *)POOL_OFFSET, POOL_SLABS * SLAB_PAGES);
	b->reserved = false;
	b->slabs_used = 0;
	b->live = 0;
	for (c = zero; c < POOL_CLASSES && can_loop; c++)
		b->free_head[c] = POOL_NIL;
	return 0;
}

/* Take the next slab for class c and put its objects on the list. */
static int refill_locked(struct buddy __arena *b, int c)
{
	u64 obj = 1UL << (POOL_MIN_SHIFT + c), n = POOL_SLAB_BYTES / obj, off, i;
	u8 __arena *slab;

	if (b->slabs_used >= POOL_SLABS) {
		pool_err("pool: all %d slabs in use", POOL_SLABS);
		return -ENOMEM;
	}
	off = POOL_OFFSET + (u64)b->slabs_used * POOL_SLAB_BYTES;
	bpf_arena_free_pages(&arena, (void __arena *)off, SLAB_PAGES); /* unreserve */
	slab = bpf_arena_alloc_pages(&arena, (void __arena *)off, SLAB_PAGES, NUMA_NO_NODE, 0);
	if (!slab) {
		pool_err("pool: no pages at offset %llx", off);
		return -ENOMEM;
	}
	b->slab_class[b->slabs_used++] = c;
	/* Push from the top so that the lowest object is handed out first. */
	for (i = zero; i < n && can_loop; i++) {
		u64 __arena *o = (u64 __arena *)(slab + (n - 1 - i) * obj);

		*o = b->free_head[c];
		b->free_head[c] = (u64)o;
		asan_poison(o, POOL_POISON, obj);
	}
	return 0;
}

static void __arena *take_locked(struct buddy __arena *b, int c)
{
	u64 head = b->free_head[c];

	if (head == POOL_NIL) {
		/* refill may carve nothing when the call's loop budget is spent */
		if (refill_locked(b, c) || b->free_head[c] == POOL_NIL)
			return NULL;
		head = b->free_head[c];
	}
	asan_unpoison((void __arena *)head, sizeof(u64));
	b->free_head[c] = *(u64 __arena *)head;
	b->live++;
	asan_unpoison((void __arena *)head, 1UL << (POOL_MIN_SHIFT + c));
	return (void __arena *)head;
}

/* The class of p, or -1 when p is no object start of a used slab. */
static int class_of(struct buddy __arena *b, void __arena *p)
{
	u32 off = (u32)(u64)p, slab;
	int c;

	if (off < POOL_OFFSET)
		return -1;
	slab = (off - POOL_OFFSET) / POOL_SLAB_BYTES;
	if (slab >= READ_ONCE(b->slabs_used))
		return -1;
	c = b->slab_class[slab];
	if (off & ((1U << (POOL_MIN_SHIFT + c)) - 1))
		return -1;
	return c;
}

static void put_locked(struct buddy __arena *b, void __arena *p, int c)
{
	*(u64 __arena *)p = b->free_head[c];
	b->free_head[c] = (u64)p;
	b->live--;
	asan_poison(p, POOL_POISON, 1UL << (POOL_MIN_SHIFT + c));
}

__weak void __arena *buddy_alloc(struct buddy __arena *b, size_t size)
{
	void __arena *p;
	int c = size_class(size);

	if (c < 0) {
		pool_err("pool: no class for %lu bytes", size);
		return NULL;
	}
	if (arena_spin_lock(&b->lock))
		return NULL;
	p = take_locked(b, c);
	arena_spin_unlock(&b->lock);
	return p;
}

__weak int buddy_free(struct buddy __arena *b, void __arena *p)
{
	int c;

	if (!p)
		return 0;
	if (arena_spin_lock(&b->lock))
		return -EBUSY;
	c = class_of(b, p);
	if (c < 0) {
		arena_spin_unlock(&b->lock);
		pool_err("pool: free of %p, not an object", p);
		return -EINVAL;
	}
	put_locked(b, p, c);
	arena_spin_unlock(&b->lock);
	return 0;
}

__weak size_t buddy_usable_size(struct buddy __arena *b, void __arena *p)
{
	int c = class_of(b, p);

	return c < 0 ? 0 : 1UL << (POOL_MIN_SHIFT + c);
}

/* Up to n objects of one class under one lock hold: how many were stored. */
__weak int buddy_alloc_bulk(struct buddy __arena *b, size_t size, void __arena **ptrs, u32 n)
{
	int c = size_class(size);
	u32 i;

	if (c < 0 || arena_spin_lock(&b->lock))
		return 0;
	for (i = zero; i < n && can_loop; i++) {
		ptrs[i] = take_locked(b, c);
		if (!ptrs[i])
			break;
	}
	arena_spin_unlock(&b->lock);
	return i;
}

/* All n objects (NULL entries skipped) or, if any is invalid, none. */
__weak int buddy_free_bulk(struct buddy __arena *b, void __arena **ptrs, u32 n)
{
	u32 i;

	if (arena_spin_lock(&b->lock))
		return -EBUSY;
	for (i = zero; i < n && can_loop; i++)
		if (ptrs[i] && class_of(b, ptrs[i]) < 0) {
			arena_spin_unlock(&b->lock);
			return -EINVAL;
		}
	for (i = zero; i < n && can_loop; i++)
		if (ptrs[i])
			put_locked(b, ptrs[i], class_of(b, ptrs[i]));
	arena_spin_unlock(&b->lock);
	return 0;
}
