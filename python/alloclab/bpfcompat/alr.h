/* SPDX-License-Identifier: MIT */
/*
 * alr.h: the interface between a compiled libarena tree (one private copy of
 * the object per allocator instance) and whoever drives it: alloclab's layer
 * glue (layer.c) or the selftest runner (Python, through cffi).
 *
 * The object exports one function, alr_bind(): it reserves the instance's
 * arena (4 GiB of address space aligned to 4 GiB, as the BPF arena's
 * user_vm_start is, so the low 32 bits of an arena pointer are its offset)
 * and fills a struct alr_entry with the tree's entry points. Everything
 * else in the object is hidden, so two copies never bind to each other's
 * globals.
 *
 * The driver hands in a struct alr_env: how to take and release an arena
 * spin lock (alloclab's lock in arena mode, counted in the layer's
 * counters) and where to count what the BPF environment would report
 * (loop budgets run out, stream printk). With env NULL the object uses a
 * test-and-set lock of its own and counts only into its own totals.
 */
#ifndef ALR_H
#define ALR_H

#include <stddef.h>
#include <stdint.h>

#define ALR_ABI 2

/* Distinct printk texts kept per copy (the rest are counted together). */
#define ALR_MSGS 16

/* The arena's page size (vmlinux.h's __PAGE_SIZE: the host's 4 KiB pages). */
#define ALR_PAGE_SIZE 4096

/* Events the object reports through env->event (and counts in alr_entry.stat). */
enum alr_event {
	ALR_EV_LOOP_EXHAUSTED,	/* a can_loop/cond_break budget ran out in one call */
	ALR_EV_PRINTK,		/* bpf_stream_printk / arena_stdout / arena_stderr */
	ALR_EV_PAGES_ALLOC,	/* arena pages handed out by bpf_arena_alloc_pages */
	ALR_EV_PAGES_FREE,	/* arena pages returned by bpf_arena_free_pages */
	ALR_EV_ALLOC_FAILED,	/* bpf_arena_alloc_pages calls that returned NULL */
	ALR_EV_LOCK_TABLE_FULL, /* arena spin locks refused: the driver had no lock left */
	ALR_EV_NR
};

struct alr_env {
	unsigned abi; /* ALR_ABI */
	void *owner;  /* passed back to every callback */
	/* The driver's lock standing for the arena spin lock word at addr, asked
	 * once per word (the object keeps the answer): NULL when it has none
	 * left (that arena_spin_lock fails -EBUSY, ALR_EV_LOCK_TABLE_FULL). */
	void *(*lock_handle)(void *owner, void *addr);
	/* arena_spin_lock / unlock of that lock from the calling context ctx
	 * (NULL: create and destroy): 0 or -errno. Called directly from the
	 * tree's lock calls, so they cost what the driver's lock costs. */
	int (*acquire)(void *handle, const void *ctx);
	void (*release)(void *handle, const void *ctx);
	/* an event (enum alr_event) from ctx; msg: the printk text, else NULL */
	void (*event)(void *owner, const void *ctx, unsigned ev, const char *msg);
};

/* A SEC("syscall") program of the selftests: int name(void). */
struct alr_prog {
	const char *name;
	int (*fn)(void);
};

struct alr_entry {
	unsigned abi; /* ALR_ABI */
	/* The tree's buddy_init/buddy_destroy on its global `buddy`. */
	int (*init)(void);
	int (*destroy)(void);
	/* buddy_alloc/buddy_free on `buddy`, entered from ctx on model CPU cpu
	 * (what bpf_get_smp_processor_id() answers), with a fresh loop budget;
	 * *usable: the block size of the object handed out, or of the one
	 * freed, read before the free (as usable() would: no second call). */
	void *(*alloc)(const void *ctx, unsigned cpu, size_t size, size_t *usable);
	int (*free)(const void *ctx, unsigned cpu, void *p, size_t *usable);
	/* The tree's buddy_alloc_bulk/buddy_free_bulk, or NULL when it has none:
	 * alloc_bulk returns how many objects it stored in ptrs. */
	int (*alloc_bulk)(const void *ctx, unsigned cpu, size_t size, void **ptrs, unsigned n);
	int (*free_bulk)(const void *ctx, unsigned cpu, void **ptrs, unsigned n);
	/* The block size of an allocated object (the tree's chunk metadata). */
	size_t (*usable)(const void *p);
	/* Run a selftest program with a fresh loop budget: its return value. */
	int (*run)(const void *ctx, unsigned cpu, int (*fn)(void));
	size_t max_size; /* the largest request the tree serves (0: unknown) */
	uintptr_t base;	 /* the arena: [base, base + span) */
	size_t span;
	const struct alr_prog *progs; /* the selftest programs compiled in */
	unsigned nprogs;
	uint64_t (*stat)(unsigned ev); /* totals of enum alr_event */
	const char *(*last_msg)(void); /* the last printk text, "" if none */
	void (*unbind)(void);	       /* unmap the arena (after destroy) */
	void (*pages_lock)(int take);  /* take (1) or release (0) the page mutex: fork() */
	/* The i-th distinct printk text and its count; returns how many there
	 * are (text NULL for the last when more texts came than were kept: its
	 * count is theirs). */
	unsigned (*msg)(unsigned i, const char **text, uint64_t *count);
};

typedef int (*alr_bind_fn)(const struct alr_env *env, struct alr_entry *out);

#endif /* ALR_H */
