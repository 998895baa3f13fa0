/* SPDX-License-Identifier: MIT */
/*
 * alloclab: the vmalloc API of a `vmalloc` layer (reference §6).
 *
 * A `vmalloc` layer sits right above a `pages` layer. Its struct al_ops are
 * alloc(size) = vmalloc(size) and free(p) = vfree(p); the functions below
 * add what test_vmalloc and other callers need: alignment and huge
 * mappings (__vmalloc_node, vmalloc_huge), vm_map_ram, and access to an
 * area's memory through the simulated page table.
 *
 * Addresses are in a virtual range of the layer (`va_size` bytes). That
 * range is also ordinary host memory, touched only where written, so any
 * al_ops caller may dereference a vmalloc pointer (e.g. malloc-free links
 * its objects through them); the pages the area is mapped to are in the
 * pages layer's memory and are reached with al_vmalloc_write/read/memset,
 * which walk the simulated page table as the MMU would (test_vmalloc writes
 * its bytes this way, never through a host mapping per area).
 *
 * Each function checks that `a` is a vmalloc layer (-EINVAL, NULL or false
 * otherwise). vmalloc and vfree may sleep in the kernel: they return -EPERM
 * in IRQ or NMI context (c->level above AL_CTX_TASK).
 */
#ifndef ALLOCLAB_VMALLOC_H
#define ALLOCLAB_VMALLOC_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

enum al_vm_flags {
	AL_VM_ZERO = 1u << 0, /* __GFP_ZERO: the pages are zeroed when allocated */
	AL_VM_HUGE = 1u << 1  /* vmalloc_huge(): PMD mappings from 2 MiB, and on
			       * arm64 contiguous-PTE mappings (order-4 blocks) from
			       * 64 KiB */
};

/* Whether a is a vmalloc layer. */
AL_API bool al_vmalloc_is(const struct al_allocator *a);
/* The pages layer a vmalloc layer allocates from (NULL if a is not one). */
AL_API struct al_allocator *al_vmalloc_pages(const struct al_allocator *a);

/* __vmalloc_node(size, align, gfp): the area's address, or NULL with c->err
 * (-ENOMEM: no pages or no virtual range even after a purge; -EINVAL: size 0
 * or too large, align not a power of two; -EPERM; a lock error). align is
 * raised to the page size. */
AL_API void *al_vmalloc(struct al_allocator *a, struct al_ctx *c, size_t size, size_t align,
			unsigned vmflags);
/* vfree(): 0 (also for NULL), or -EINVAL when addr is not the start of a
 * vmalloc area (nothing changed), -EPERM, or a lock error from the pages. */
AL_API int al_vfree(struct al_allocator *a, struct al_ctx *c, const void *addr);
/* vm_map_ram(pages, n): map n pages of the pages layer (pfns, each allocated
 * by the caller) contiguously. n <= 64 comes from a per-CPU vmap block. NULL
 * with c->err on failure. */
AL_API void *al_vm_map_ram(struct al_allocator *a, struct al_ctx *c, const uint64_t *pfns,
			   unsigned n);
/* vm_unmap_ram(addr, n): undo al_vm_map_ram (the pages stay the caller's). */
AL_API int al_vm_unmap_ram(struct al_allocator *a, struct al_ctx *c, const void *addr, unsigned n);

/* Copy len bytes to / from / set at a mapped address, through the page table.
 * 0, or -EFAULT when a page on the way is not mapped (nothing after it). */
AL_API int al_vmalloc_write(struct al_allocator *a, void *addr, const void *src, size_t len);
AL_API int al_vmalloc_read(struct al_allocator *a, const void *addr, void *dst, size_t len);
AL_API int al_vmalloc_memset(struct al_allocator *a, void *addr, int byte, size_t len);
/* vmalloc_to_page(): the pfn an address is mapped to; 0 or -EFAULT. */
AL_API int al_vmalloc_to_pfn(struct al_allocator *a, const void *addr, uint64_t *pfn);
/* Purge the lazily freed areas now (returns how many); drain() does it too. */
AL_API int al_vmalloc_purge(struct al_allocator *a, struct al_ctx *c);
/* The model CPU of deferred work (a kworker: kvfree_rcu's frees): one past
 * the stack's CPUs, with per-CPU state of its own in the vmalloc and pages
 * layers. One thread at a time may use it (al_ctx.cpu), at AL_CTX_TASK;
 * returns ~0u when a is not a vmalloc layer. */
AL_API unsigned al_vmalloc_kworker_cpu(const struct al_allocator *a);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_VMALLOC_H */
