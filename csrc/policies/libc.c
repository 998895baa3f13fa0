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

static void libc_stats(struct al_allocator *a, struct al_stats *out)
{
	struct libc_layer *l = (struct libc_layer *)a;

	out->bytes_held = (int64_t)(al_counters_sum(&l->ctr, LIBC_bytes_allocated) -
				    al_counters_sum(&l->ctr, LIBC_bytes_freed));
	al_counters_report(&l->ctr, out);
}

static void libc_destroy(struct al_allocator *a)
{
	struct libc_layer *l = (struct libc_layer *)a;

	al_counters_fini(&l->ctr);
	al_meta_free(l, sizeof(*l));
}

static const struct al_ops libc_ops = {
	.name = "libc",
	AL_OPS_INIT,
	.alloc = libc_alloc,
	.free = libc_free,
	.usable_size = libc_usable_size,
	.stats = libc_stats,
	.destroy = libc_destroy,
};

static int libc_create(const struct al_layer_desc *d, const int64_t *params,
		       struct al_allocator *below, unsigned ncpu, struct al_allocator **out)
{
	struct libc_layer *l;

	(void)params;
	if (below)
		return -EINVAL;
	l = al_meta_alloc(sizeof(*l));
	if (!l)
		return -ENOMEM;
	if (al_counters_init_desc(&l->ctr, libc_counters, LIBC_NR, 0, ncpu))
		goto out_free;
	*out = al_allocator_init(&l->base, &libc_ops, d, below, ncpu);
	return 0;

out_free:
	libc_destroy(&l->base); /* it frees only the parts that exist */
	return -ENOMEM;
}

static const struct al_layer_desc libc_desc = {
	.name = "libc",
	AL_LAYER_DESC_INIT,
	.min_align = 16,
	.doc = "the process's malloc/free (glibc unless preloaded otherwise)",
	.features = AL_F_USABLE | AL_F_STATS_ANYTIME,
	.max_size = 0,
	.nparams = 0,
	.params = NULL,
	.create = libc_create,
	.counters = libc_counters,
	.ncounters = LIBC_NR,
};

AL_REGISTER_LAYER(libc_desc)

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

static int system_create(const struct al_layer_desc *d, const int64_t *params,
			 struct al_allocator *below, unsigned ncpu, struct al_allocator **out)
{
	if (al_system_allocator() != params[0])
		return -EOPNOTSUPP;
	return libc_create(d, params, below, ncpu, out);
}

static const struct al_layer_desc system_desc = {
	.name = "system",
	AL_LAYER_DESC_INIT,
	.min_align = 16,
	.doc = "a real allocator (glibc, jemalloc, gperftools-tcmalloc, mimalloc) as a bottom "
	       "layer, run under LD_PRELOAD",
	.features = AL_F_USABLE,
	.max_size = 0,
	.nparams = 1,
	.params = system_params,
	.create = system_create,
	.counters = libc_counters,
	.ncounters = LIBC_NR,
};

AL_REGISTER_LAYER(system_desc)
