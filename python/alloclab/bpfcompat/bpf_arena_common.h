/* SPDX-License-Identifier: MIT */
/*
 * alloclab's stand-in for the arena helpers header, for BPF C compiled as
 * user-space C. An __arena pointer is an ordinary pointer into the
 * instance's arena (runtime.c), whose base is aligned to 4 GiB as the BPF
 * arena's user_vm_start is: the low 32 bits of a pointer are its arena
 * offset, so code that builds pointers from offsets or masks real pointers
 * works as in BPF. The page kfuncs read their address argument as such an
 * offset (a pointer or a small integer alike).
 */
#ifndef ALR_BPF_ARENA_COMMON_H
#define ALR_BPF_ARENA_COMMON_H

#include <vmlinux.h>

#ifndef WRITE_ONCE
#define WRITE_ONCE(x, v) (*(volatile __typeof__(x) *)&(x) = (v))
#endif

#ifndef NUMA_NO_NODE
#define NUMA_NO_NODE (-1)
#endif

#ifndef PAGE_SIZE
#define PAGE_SIZE __PAGE_SIZE
#endif

#define __arena
#define __arena_global
#define cast_kern(ptr) ((void)0)
#define cast_user(ptr) ((void)0)

#ifndef arena_container_of
#define arena_container_of(ptr, type, member) \
	((type *)((char *)(ptr) - __builtin_offsetof(type, member)))
#endif

/* The arena's first byte (the map argument names the program's one arena). */
#define arena_base(map) ((void __arena *)alr_arena_base())

/* Map page_cnt zeroed pages at arena offset addr (NULL: anywhere free): the
 * pages, or NULL when the range is not free or out of the arena. */
void __arena *bpf_arena_alloc_pages(void *map, void __arena *addr, __u32 page_cnt, int node_id,
				    __u64 flags) ALR_HIDDEN;
/* Keep page_cnt free pages at offset addr from being allocated anywhere but
 * there: 0, -EINVAL (out of the arena) or -EBUSY (not all free). */
int bpf_arena_reserve_pages(void *map, void __arena *addr, __u32 page_cnt) ALR_HIDDEN;
/* Return allocated or reserved pages at offset ptr to the free space. */
void bpf_arena_free_pages(void *map, void __arena *ptr, __u32 page_cnt) ALR_HIDDEN;

#endif /* ALR_BPF_ARENA_COMMON_H */
