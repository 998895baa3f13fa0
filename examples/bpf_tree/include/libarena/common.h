/* SPDX-License-Identifier: MIT */
/* bpf_tree: what every unit includes. Under __BPF__ it takes the BPF
 * environment (vmlinux.h, the arena helpers, the arena spin lock) and
 * defines the program's one arena map. */
#pragma once

#ifdef __BPF__

#include <vmlinux.h>
#include <bpf_arena_common.h>
#include <bpf_arena_spin_lock.h>
#include <asm-generic/errno.h>

#define POOL_ARENA_PAGES (1UL << 20) /* 4 GiB of 4 KiB pages */

struct {
	__uint(type, BPF_MAP_TYPE_ARENA);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, POOL_ARENA_PAGES);
} arena __weak SEC(".maps");

/* A loop index the verifier cannot see as a constant. */
extern const volatile u32 zero;

#define pool_err(fmt, ...) bpf_stream_printk(2, (fmt), ##__VA_ARGS__)

#endif /* __BPF__ */
