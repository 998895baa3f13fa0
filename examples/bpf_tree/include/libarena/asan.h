/* SPDX-License-Identifier: MIT */
/* bpf_tree: the arena ASan hooks. In an ASan build (BPF_ARENA_ASAN defined)
 * they are the environment's: poison marks bytes no caller may touch,
 * unpoison gives them back, shadow_set says whether a byte is poisoned.
 * Otherwise they cost nothing. The pool poisons a free object whole and
 * unpoisons its link word around each read or write of it. */
#pragma once

#ifdef BPF_ARENA_ASAN
int asan_poison(void __arena *addr, s8 val, size_t size);
int asan_unpoison(void __arena *addr, size_t size);
bool asan_shadow_set(void __arena *addr);
#else
static inline int asan_poison(void __arena *addr, s8 val, size_t size)
{
	return 0;
}
static inline int asan_unpoison(void __arena *addr, size_t size)
{
	return 0;
}
static inline bool asan_shadow_set(void __arena *addr)
{
	return false;
}
#endif

#define POOL_POISON ((s8)0xfb) /* the shadow code of a free object */
