/* SPDX-License-Identifier: MIT */
/*
 * Registry of layers, workloads and presets, and the C API table (struct
 * al_api) handed to extension modules. Presets are a fixed table: a name, a
 * canonical spec, a doc line and where it runs (registry.h).
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
 *
 * Invariants: entries [0, count) of a table are valid descriptors (ABI,
 * size, names and schema checked) with distinct names; an entry is never
 * removed or replaced, so a pointer a lookup returned stays valid.
 * Lock order: reg_lock is a leaf; nothing else is taken under it.
 * Cost: a lookup is a linear scan with strcmp over at most
 * AL_MAX_REGISTERED entries; the first call adds the built-ins once.
 */
#include <errno.h>
#include <string.h>

#include "alloclab/core.h"

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

size_t al_layer_min_align(const struct al_layer_desc *d)
{
	return d && d->desc_size >= sizeof(*d) ? d->min_align : 0;
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

/* The names of the features, from the one list (ops.h). */
static const struct {
	const char *name;
	unsigned mask;
} features[] = {
#define FEATURE_ENTRY(NAME, name, bit) { #name, AL_F_##NAME },
	AL_FEATURES(FEATURE_ENTRY)
#undef FEATURE_ENTRY
};

const char *al_feature_name(unsigned i, unsigned *mask)
{
	if (i >= sizeof(features) / sizeof(features[0]))
		return NULL;
	if (mask)
		*mask = features[i].mask;
	return features[i].name;
}

/* The presets, a line each: the seeds' variants by their short names. The
 * specs are canonical (tests/test_policy.py prints each back unchanged). */
static const struct al_preset presets[] = {
	{ "buddy", "buddy", "the buddy allocator alone", AL_PRESET_IN_PROCESS },
	{ "libc", "libc", "this process's malloc, as a layer", AL_PRESET_IN_PROCESS },
	{ "null", "null", "one block per CPU: the harness's floor", AL_PRESET_IN_PROCESS },
	/* seed 000: per-CPU caches in front of libarena's buddy */
	{ "libarena-spill", "percpu > buddy", "libarena: per-CPU caches spilling to the buddy",
	  AL_PRESET_IN_PROCESS },
	{ "libarena-transfer", "percpu > transfer > buddy",
	  "libarena: per-CPU caches over a shared transfer cache", AL_PRESET_IN_PROCESS },
	{ "libarena-transfer-v1", "percpu > transfer(peek=false, full=single) > buddy",
	  "libarena's first transfer cache: no peek, one batch when full", AL_PRESET_IN_PROCESS },
	{ "libarena-magazine", "magazine > buddy", "libarena: per-CPU magazines over the buddy",
	  AL_PRESET_IN_PROCESS },
	/* peers: real allocators, run under LD_PRELOAD in a child process */
	{ "glibc", "system", "glibc's malloc, in a child process", AL_PRESET_PEER },
	{ "jemalloc", "system(allocator=jemalloc)", "jemalloc, in a child process",
	  AL_PRESET_PEER },
	{ "gperftools-tcmalloc", "system(allocator=gperftools-tcmalloc)",
	  "gperftools' tcmalloc, in a child process", AL_PRESET_PEER },
	{ "mimalloc", "system(allocator=mimalloc)", "mimalloc, in a child process",
	  AL_PRESET_PEER },
	/* seed 004: vmalloc page population and vfree strategies over the page
	 * allocator */
	{ "pages", "pages", "the page allocator alone", AL_PRESET_IN_PROCESS },
	{ "vmalloc-default", "vmalloc > pages",
	  "vmalloc: order-0 pages in bulk, freed a page at a time", AL_PRESET_IN_PROCESS },
	{ "vmalloc-large", "vmalloc(alloc=high_order) > pages", "vmalloc: high-order pages first",
	  AL_PRESET_IN_PROCESS },
	{ "vmalloc-large-bulkfree", "vmalloc(alloc=high_order, free=bulk) > pages",
	  "vmalloc: high-order pages first, freed in bulk", AL_PRESET_IN_PROCESS },
	{ "vmalloc-pcp-first", "vmalloc(alloc=pcp_first, free=bulk) > pages",
	  "vmalloc: the per-CPU page lists first, then the buddy; freed in bulk",
	  AL_PRESET_IN_PROCESS },
	/* seed 003: BPF local storage allocators */
	{ "kzalloc", "slab(zero=true)", "kzalloc: the slab, zeroing", AL_PRESET_IN_PROCESS },
	{ "kmalloc-sheaves", "sheaves > slab(form=sheaves)", "kmalloc with per-CPU sheaves",
	  AL_PRESET_IN_PROCESS },
	{ "kmalloc-nolock", "nolock > slab", "kmalloc_nolock over the slab", AL_PRESET_IN_PROCESS },
	{ "bpf-ma", "bpf_ma(mode=fixed) > slab", "the BPF memory allocator over the slab",
	  AL_PRESET_IN_PROCESS },
};

unsigned al_preset_count(void)
{
	return sizeof(presets) / sizeof(presets[0]);
}

const struct al_preset *al_preset_get(unsigned i)
{
	return i < al_preset_count() ? &presets[i] : NULL;
}

const struct al_preset *al_preset_find(const char *name)
{
	for (unsigned i = 0; name && i < al_preset_count(); i++)
		if (!strcmp(presets[i].name, name))
			return &presets[i];
	return NULL;
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
