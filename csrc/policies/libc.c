/* SPDX-License-Identifier: MIT */
/*
 * libc and system: the process's malloc/free as a bottom layer.
 *
 * `libc` is whatever malloc the process has (glibc, unless something is
 * preloaded). `system(allocator=...)` is the same layer pinned to a named
 * peer: glibc, jemalloc, gperftools-tcmalloc or mimalloc. Peers cannot be
 * dlopen'ed reliably (Debian's jemalloc needs static TLS; gperftools does not
 * support it), so they run in a child process started with LD_PRELOAD (the
 * Python side does that transparently); create() checks that the process's
 * malloc really is the one asked for, by the symbols each exports, and fails
 * with -EOPNOTSUPP otherwise, so a result can never be mislabelled.
 *
 * AL_ZERO uses calloc. Nothing is validated (a bad free is the process's
 * problem, as with the real thing), and there is no bulk path, so layers above
 * fall back to loops. bytes_held counts malloc_usable_size() bytes.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>

#include "alloclab/alloclab.h"

/*
 * bytes_allocated and bytes_freed are what bytes_held is made of and malloc
 * keeps no total to compute it from: they are counted through
 * al_ctr_block_acct, at every stats level.
 */
#define LIBC_COUNTERS(C, D, P)                              \
	C(P, allocs, AL_CTR_KEY, "successful allocations")  \
	C(P, frees, AL_CTR_KEY, "frees")                    \
	C(P, bytes_requested, 0, "bytes asked for")         \
	C(P, bytes_allocated, 0, "usable bytes handed out") \
	C(P, bytes_freed, 0, "usable bytes given back")     \
	C(P, enomem, AL_CTR_KEY, "allocations that returned NULL")

AL_COUNTERS_DEFINE(LIBC_COUNTERS, LIBC_, libc_counters);

struct libc_layer {
	struct al_allocator base; /* must be first */
	struct al_counters ctr;	  /* LIBC_COUNTERS */
};

static void *libc_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct libc_layer *l = (struct libc_layer *)a;
	void *p = (flags & AL_ZERO) ? calloc(1, size) : malloc(size);

	uint64_t *b;

	if (al_unlikely(!p)) {
		c->err = -ENOMEM;
		al_count(&l->ctr, c, LIBC_enomem, 1);
		return NULL;
	}
	b = al_ctr_block_acct(&l->ctr, c);
	al_ctr_add(b, LIBC_bytes_allocated, malloc_usable_size(p));
	if (al_counters_on(&l->ctr)) {
		al_ctr_add(b, LIBC_allocs, 1);
		al_ctr_add(b, LIBC_bytes_requested, size);
	}
	return p;
}

static int libc_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct libc_layer *l = (struct libc_layer *)a;

	uint64_t *b;

	if (!p)
		return 0;
	b = al_ctr_block_acct(&l->ctr, c);
	al_ctr_add(b, LIBC_bytes_freed, malloc_usable_size(p));
	if (al_counters_on(&l->ctr))
		al_ctr_add(b, LIBC_frees, 1);
	free(p);
	return 0;
}

static size_t libc_usable_size(struct al_allocator *a, const void *p)
{
	(void)a;
	return p ? malloc_usable_size((void *)p) : 0;
}

/* Bytes handed out and not given back: malloc keeps no total of its own. */
static int64_t libc_held(struct al_allocator *a)
{
	struct libc_layer *l = (struct libc_layer *)a;

	return (int64_t)(al_counters_sum(&l->ctr, LIBC_bytes_allocated) -
			 al_counters_sum(&l->ctr, LIBC_bytes_freed));
}

/* A bottom layer: nothing below it. */
static int libc_init(struct al_allocator *a, const int64_t *params)
{
	(void)params;
	return a->below ? -EINVAL : 0;
}

AL_COUNTED_LAYER(libc, struct libc_layer, libc_counters, libc_init, NULL, libc_held,
		 (.alloc = libc_alloc, .free = libc_free, .usable_size = libc_usable_size),
		 (.min_align = 16,
		  .doc = "the process's malloc/free (glibc unless preloaded otherwise)",
		  .features = AL_F_USABLE | AL_F_STATS_ANYTIME))

/* ---- system(allocator=...) ---- */

enum { SYS_GLIBC, SYS_JEMALLOC, SYS_TCMALLOC, SYS_MIMALLOC };

#define SYSTEM_CHOICES "glibc,jemalloc,gperftools-tcmalloc,mimalloc"

static const struct al_param_desc system_params[] = {
	{ "allocator", AL_PARAM_ENUM, SYS_GLIBC, SYS_GLIBC, SYS_MIMALLOC, SYSTEM_CHOICES,
	  "the peer allocator; peers other than the process's own run in a child process "
	  "under LD_PRELOAD" },
};

/* Which malloc serves this process, from the symbols only that one exports. */
int al_system_allocator(void)
{
	if (dlsym(RTLD_DEFAULT, "mallctl"))
		return SYS_JEMALLOC;
	if (dlsym(RTLD_DEFAULT, "tc_malloc"))
		return SYS_TCMALLOC;
	if (dlsym(RTLD_DEFAULT, "mi_malloc"))
		return SYS_MIMALLOC;
	return SYS_GLIBC;
}

/* The process's malloc must be the one asked for, or a result would be
 * mislabelled. */
static int system_check(struct al_allocator *a, const int64_t *params)
{
	(void)a;
	return al_system_allocator() != params[0] ? -EOPNOTSUPP : 0;
}

AL_LAYER_VARIANT(system, libc, struct libc_layer, system_check,
		 (.min_align = 16,
		  .doc = "a real allocator (glibc, jemalloc, gperftools-tcmalloc, mimalloc) as a "
			 "bottom layer, run under LD_PRELOAD",
		  .features = AL_F_USABLE, .nparams = 1, .params = system_params,
		  .counters = libc_counters, .ncounters = LIBC_NR))
