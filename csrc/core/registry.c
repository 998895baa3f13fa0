/* SPDX-License-Identifier: MIT */
/*
 * Registry of layers and workloads, parameter schemas, and small shared
 * helpers (stats, errno names, version).
 *
 * Built-ins are found in the al_layers / al_workloads ELF sections that
 * AL_REGISTER_LAYER / AL_REGISTER_WORKLOAD fill (the linker collects them
 * and defines __start_/__stop_ bounds): the first call into the registry
 * adds them, in link order, before anything else. No constructor has to have
 * run, so the preload shim finds its layers even when the program's first
 * malloc comes from another library's constructor. Plugins register at run
 * time. The tables are fixed arrays published with a release store of the
 * count, so readers never take a lock and registration never allocates.
 * Registration itself is serialised by a spinlock (rare, never on a hot path).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "alloclab/alloclab.h"

#ifndef AL_VERSION_STR
#define AL_VERSION_STR "0.0.0"
#endif
#ifndef AL_BUILD_FLAGS
#define AL_BUILD_FLAGS "unknown"
#endif

#define AL_MAX_REGISTERED 64

static const struct al_layer_desc *layers[AL_MAX_REGISTERED];
static unsigned nlayers;
static const struct al_workload_desc *workloads[AL_MAX_REGISTERED];
static unsigned nworkloads;
static int reg_lock;
static int builtins_added;

/* Bounds of the sections, defined by the linker when at least one entry
 * exists (weak: a program linking the registry without any is valid);
 * hidden, so that each shared object sees its own sections. */
extern const struct al_layer_desc *const __start_al_layers[]
	__attribute__((weak, visibility("hidden")));
extern const struct al_layer_desc *const __stop_al_layers[]
	__attribute__((weak, visibility("hidden")));
extern const struct al_workload_desc *const __start_al_workloads[]
	__attribute__((weak, visibility("hidden")));
extern const struct al_workload_desc *const __stop_al_workloads[]
	__attribute__((weak, visibility("hidden")));

static void reg_enter(void)
{
	while (__atomic_exchange_n(&reg_lock, 1, __ATOMIC_ACQUIRE))
		al_cpu_relax();
}

static void reg_exit(void)
{
	__atomic_store_n(&reg_lock, 0, __ATOMIC_RELEASE);
}

static bool valid_ident(const char *s, bool dash)
{
	if (!s || !*s)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' ||
		      (dash && *s == '-')))
			return false;
	return true;
}

static bool valid_schema(const struct al_param_desc *p, unsigned n)
{
	unsigned i;

	if (n > AL_MAX_PARAMS || (n && !p))
		return false;
	for (i = 0; i < n; i++) {
		if (!valid_ident(p[i].name, false) || p[i].min > p[i].max || p[i].def < p[i].min ||
		    p[i].def > p[i].max || p[i].type < AL_PARAM_INT || p[i].type > AL_PARAM_NS)
			return false;
		if (p[i].type == AL_PARAM_ENUM && !p[i].choices)
			return false;
	}
	return true;
}

static int reg_add_locked(const void **table, unsigned *count, const void *d, const char *name,
			  const char *(*name_of)(const void *))
{
	unsigned i, n = __atomic_load_n(count, __ATOMIC_RELAXED);

	al_flag_assert_held(&reg_lock);
	al_assert(n <= AL_MAX_REGISTERED);
	for (i = 0; i < n; i++)
		if (!strcmp(name_of(table[i]), name))
			return -EEXIST;
	if (n == AL_MAX_REGISTERED)
		return -ENOSPC;
	table[n] = d;
	__atomic_store_n(count, n + 1, __ATOMIC_RELEASE);
	return 0;
}

static const char *layer_name(const void *d);
static const char *workload_name(const void *d);
static bool layer_valid(const struct al_layer_desc *d);
static bool workload_valid(const struct al_workload_desc *d);

/*
 * Add the descriptors of the sections once, before any other registration
 * or lookup: idempotent, safe from any thread (the first caller adds them
 * under the lock; the others wait on it), and it never allocates. Invalid or
 * duplicate entries are skipped as their constructor's registration would
 * have refused them.
 */
static void add_builtins(void)
{
	const struct al_layer_desc *const *l;
	const struct al_workload_desc *const *w;

	if (al_likely(__atomic_load_n(&builtins_added, __ATOMIC_ACQUIRE)))
		return;
	reg_enter();
	if (!builtins_added) {
		for (l = __start_al_layers; l && l < __stop_al_layers; l++)
			if (*l && layer_valid(*l))
				(void)reg_add_locked((const void **)layers, &nlayers, *l,
						     (*l)->name, layer_name);
		for (w = __start_al_workloads; w && w < __stop_al_workloads; w++)
			if (*w && workload_valid(*w))
				(void)reg_add_locked((const void **)workloads, &nworkloads, *w,
						     (*w)->name, workload_name);
		__atomic_store_n(&builtins_added, 1, __ATOMIC_RELEASE);
	}
	reg_exit();
}

static int reg_add(const void **table, unsigned *count, const void *d, const char *name,
		   const char *(*name_of)(const void *))
{
	int ret;

	add_builtins();
	reg_enter();
	ret = reg_add_locked(table, count, d, name, name_of);
	reg_exit();
	return ret;
}

static const char *layer_name(const void *d)
{
	return ((const struct al_layer_desc *)d)->name;
}

static const char *workload_name(const void *d)
{
	return ((const struct al_workload_desc *)d)->name;
}

static bool layer_valid(const struct al_layer_desc *d)
{
	return d && d->abi_version == AL_ABI_VERSION &&
	       (d->desc_size == sizeof(*d) || d->desc_size == AL_LAYER_DESC_SIZE_V1) && d->create &&
	       !(al_layer_min_align(d) & (al_layer_min_align(d) - 1)) &&
	       valid_ident(d->name, true) && valid_schema(d->params, d->nparams);
}

int al_layer_register(const struct al_layer_desc *d)
{
	if (!layer_valid(d))
		return -EINVAL;
	return reg_add((const void **)layers, &nlayers, d, d->name, layer_name);
}

unsigned al_layer_count(void)
{
	add_builtins();
	return __atomic_load_n(&nlayers, __ATOMIC_ACQUIRE);
}

const struct al_layer_desc *al_layer_get(unsigned i)
{
	return i < al_layer_count() ? layers[i] : NULL;
}

const struct al_layer_desc *al_layer_find(const char *name)
{
	unsigned i, n = al_layer_count();

	for (i = 0; name && i < n; i++)
		if (!strcmp(layers[i]->name, name))
			return layers[i];
	return NULL;
}

static bool workload_valid(const struct al_workload_desc *d)
{
	return d && d->abi_version == AL_ABI_VERSION && d->desc_size == sizeof(*d) && d->cycle &&
	       valid_ident(d->name, true) && valid_schema(d->params, d->nparams) &&
	       d->size_param < (int)d->nparams;
}

int al_workload_register(const struct al_workload_desc *d)
{
	if (!workload_valid(d))
		return -EINVAL;
	return reg_add((const void **)workloads, &nworkloads, d, d->name, workload_name);
}

unsigned al_workload_count(void)
{
	add_builtins();
	return __atomic_load_n(&nworkloads, __ATOMIC_ACQUIRE);
}

const struct al_workload_desc *al_workload_get(unsigned i)
{
	return i < al_workload_count() ? workloads[i] : NULL;
}

const struct al_workload_desc *al_workload_find(const char *name)
{
	unsigned i, n = al_workload_count();

	for (i = 0; name && i < n; i++)
		if (!strcmp(workloads[i]->name, name))
			return workloads[i];
	return NULL;
}

void al_params_default(const struct al_param_desc *p, unsigned n, int64_t *v)
{
	unsigned i;

	for (i = 0; i < n; i++)
		v[i] = p[i].def;
}

int al_params_check(const struct al_param_desc *p, unsigned n, const int64_t *v, char *err,
		    size_t errlen)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		if (v[i] < p[i].min || v[i] > p[i].max) {
			if (err)
				snprintf(err, errlen, "%s=%lld is out of range [%lld, %lld]",
					 p[i].name, (long long)v[i], (long long)p[i].min,
					 (long long)p[i].max);
			return -ERANGE;
		}
	}
	return 0;
}

void al_stats_add(struct al_stats *s, const char *name, uint64_t value)
{
	if (s->n < AL_STATS_MAX) {
		s->v[s->n].name = name;
		s->v[s->n].value = value;
		s->v[s->n].flags = 0;
		s->n++;
	}
}

void al_stats_add_gauge(struct al_stats *s, const char *name, uint64_t value)
{
	if (s->n < AL_STATS_MAX) {
		al_stats_add(s, name, value);
		s->v[s->n - 1].flags = AL_STAT_GAUGE;
	}
}

int al_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n, void **out,
		  unsigned flags)
{
	unsigned i;

	if (a->ops->alloc_bulk)
		return a->ops->alloc_bulk(a, c, size, n, out, flags);
	for (i = 0; i < n; i++) {
		out[i] = a->ops->alloc(a, c, size, flags);
		if (!out[i])
			break;
	}
	return (int)i;
}

/*
 * The loop behind a layer without a native bulk free, with the native
 * paths' contract: every entry is tried once; entries the layer refuses
 * (-EINVAL: not an allocated block, or repeated in ptrs) are skipped and
 * reported through c->err; the return is how many entries were freed (NULL
 * entries count, as free(NULL)). A transient failure (a lock budget) of the
 * first entry, before anything was freed, fails the whole call so the caller
 * may retry it; later ones are retried a few times, then reported in c->err
 * and not counted.
 */
int al_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n)
{
	unsigned i, done = 0, tries;
	int ret, err = 0;

	if (a->ops->free_bulk)
		return a->ops->free_bulk(a, c, ptrs, n);
	for (i = 0; i < n; i++) {
		if (!ptrs[i]) {
			done++;
			continue;
		}
		for (tries = 0;; tries++) {
			ret = a->ops->free(a, c, ptrs[i]);
			if (!ret || ret == -EINVAL || tries == 3)
				break;
			if (!done && !err)
				return ret; /* nothing freed: the caller may retry the batch */
		}
		if (!ret)
			done++;
		else if (!err || err == -EINVAL)
			err = ret;
	}
	if (err)
		c->err = err;
	return (int)done;
}

const char *al_version(void)
{
	return AL_VERSION_STR;
}

const char *al_build_flags(void)
{
	return AL_BUILD_FLAGS;
}

const char *al_strerror(int err)
{
	switch (err < 0 ? -err : err) {
	case 0: return "OK";
	case ENOMEM: return "ENOMEM";
	case EINVAL: return "EINVAL";
	case ERANGE: return "ERANGE";
	case EBUSY: return "EBUSY";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EEXIST: return "EEXIST";
	case ENOSPC: return "ENOSPC";
	case EAGAIN: return "EAGAIN";
	case EFAULT: return "EFAULT";
	case ENOENT: return "ENOENT";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EPERM: return "EPERM";
	case EDEADLK: return "EDEADLK";
	case EIO: return "EIO";
	default: return "EUNKNOWN";
	}
}

static const struct al_api api = {
	.abi_version = AL_ABI_VERSION,
	.size = sizeof(struct al_api),
	.layer_register = al_layer_register,
	.layer_find = al_layer_find,
	.workload_register = al_workload_register,
	.workload_find = al_workload_find,
	.alloc_bulk = al_alloc_bulk,
	.free_bulk = al_free_bulk,
	.meta_alloc = al_meta_alloc,
	.meta_free = al_meta_free,
};

const struct al_api *al_get_api(void)
{
	return &api;
}
