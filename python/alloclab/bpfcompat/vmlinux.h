/* SPDX-License-Identifier: MIT */
/*
 * alloclab's stand-in for vmlinux.h when BPF C is compiled as user-space C:
 * the kernel's fixed-width types and the few UAPI constants an arena program
 * names, taken from the C library instead of the kernel's BTF.
 */
#ifndef ALR_VMLINUX_H
#define ALR_VMLINUX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int8_t s8;
typedef int16_t s16;
typedef int32_t s32;
typedef int64_t s64;
typedef uint8_t __u8;
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
typedef int8_t __s8;
typedef int16_t __s16;
typedef int32_t __s32;
typedef int64_t __s64;

/* Only named in map definitions: the values are never read here. */
enum bpf_map_type { BPF_MAP_TYPE_ARENA = 33 };
enum { BPF_F_MMAPABLE = 1u << 10 };

/* The arena's page size: the host's (x86-64 and arm64 with 4 KiB pages). */
#ifndef __PAGE_SIZE
#define __PAGE_SIZE 4096
#endif

#include <bpf/bpf_helpers.h>

#endif /* ALR_VMLINUX_H */
