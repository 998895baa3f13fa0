/* SPDX-License-Identifier: MIT */
/* bpf_tree: the program's globals. */
#include <libarena/common.h>
#include <libarena/buddy.h>

const volatile u32 zero = 0;

struct buddy __arena buddy;

char _license[] SEC("license") = "Dual MIT/GPL";
