/* SPDX-License-Identifier: MIT */
/*
 * Stacks of layers: built bottom-up from a spec (each layer's params already
 * in schema order), validated against the registry's schemas and the stack
 * shape (a layer that needs a backend has one; a bottom layer is last),
 * destroyed top-down so a front layer can hand its caches back on the way.
 *
 * al_stack_create checks the whole spec before it creates anything (each
 * layer's parameters and place, then the pairs that cannot stack: a cache
 * over shared blocks, an irq_work refill over a task-only layer), then
 * creates from the bottom. A layer owns the stack below it from its create
 * on: when a create fails, the layers below are destroyed with it, so a
 * failed call leaves nothing behind. No locks: a stack is built and
 * destroyed by one thread; the cost is the layers' own creates.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "alloclab/core.h"
#include "alloclab/stack.h"
#include "alloclab/spec.h"
#include "../core/refusal.h"

const struct al_layer_desc *al_spec_shared_layer(const struct al_stack_spec *s)
{
	unsigned i;

	for (i = 0; s && i < s->n && i < AL_MAX_LAYERS; i++)
		if (s->layer[i].desc && (s->layer[i].desc->features & AL_F_SHARED_BLOCKS))
			return s->layer[i].desc;
	return NULL;
}

/* Record a refusal of a stack's shape: fault, layers, message. Returns code. */
static int shape_fault(struct al_spec_error *e, int fault, int code, const struct al_stack_spec *s,
		       int layer, int below, const char *fmt, ...)
{
	va_list ap;

	e->fault = fault;
	e->code = code;
	e->layer = layer;
	e->below = below;
	e->desc = layer >= 0 ? s->layer[layer].desc : NULL;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return code;
}

/* A cache that keeps freed objects (in lists through their memory, or in
 * arrays handed out again) over a layer that returns one block per CPU would
 * hold the same memory twice, link it to itself, and hand it to two owners:
 * refused, naming both layers. */
static int check_distinct(const struct al_stack_spec *s, struct al_spec_error *e)
{
	unsigned i, j;

	for (i = 0; i < s->n; i++) {
		const struct al_layer_desc *d = s->layer[i].desc;

		if (!(d->features & AL_F_NEEDS_DISTINCT))
			continue;
		for (j = i + 1; j < s->n; j++) {
			const struct al_layer_desc *b = s->layer[j].desc;

			if (!(b->features & AL_F_SHARED_BLOCKS))
				continue;
			return shape_fault(e, AL_SPEC_DISTINCT, -EINVAL, s, (int)i, (int)j,
					   "%s cannot stack over %s: %s caches the objects freed "
					   "to it and needs distinct objects, but %s hands out one "
					   "block per CPU; use a real backend below it (e.g. '%s > "
					   "buddy')",
					   d->name, b->name, d->name, b->name, d->name);
		}
	}
	return 0;
}

/* A layer that reaches the layers below from irq_work (bpf_ma's refill, at
 * IRQ level, as the kernel's) over one that allocates only at task level
 * (vmalloc may sleep): every refill would fail and the cache would answer
 * "refill pending" forever. Refused, naming both layers. */
static int check_task_only(const struct al_stack_spec *s, struct al_spec_error *e)
{
	unsigned i, j;

	for (i = 0; i < s->n; i++) {
		const struct al_layer_desc *d = s->layer[i].desc;

		if (!(d->features & AL_F_BELOW_IN_IRQ))
			continue;
		for (j = i + 1; j < s->n; j++) {
			const struct al_layer_desc *b = s->layer[j].desc;

			if (!(b->features & AL_F_TASK_ONLY))
				continue;
			return shape_fault(e, AL_SPEC_TASK_ONLY, -EINVAL, s, (int)i, (int)j,
					   "%s cannot stack over %s: %s refills its caches from "
					   "irq_work (IRQ level), but %s allocates only at task "
					   "level, so every refill would fail; use a backend that "
					   "serves IRQ level below it (e.g. '%s > slab')",
					   d->name, b->name, d->name, b->name, d->name);
		}
	}
	return 0;
}

const char *al_refusal_why(int err)
{
	switch (err) {
	case -EAGAIN: return AL_WHY_EMPTY;
	case -EBUSY: return AL_WHY_BUSY;
	case -ETIMEDOUT: return AL_WHY_TIMEDOUT;
	case -ENOSPC: return AL_WHY_NOSPC;
	default: return NULL;
	}
}

/* Bytes with the largest exact G/M/K suffix, as a spec writes them. */
static void fmt_size(char *b, size_t n, uint64_t v)
{
	if (v && !(v & ((1ull << 30) - 1)))
		snprintf(b, n, "%lluG", (unsigned long long)(v >> 30));
	else if (v && !(v & ((1ull << 20) - 1)))
		snprintf(b, n, "%lluM", (unsigned long long)(v >> 20));
	else if (v && !(v & ((1ull << 10) - 1)))
		snprintf(b, n, "%lluK", (unsigned long long)(v >> 10));
	else
		snprintf(b, n, "%llu", (unsigned long long)v);
}

/*
 * Why a create failed with -ENOMEM. A layer's largest size parameter sizes
 * the address space it reserves up front (buddy's and slab's arena_limit,
 * pages' memory, vmalloc's va_size); the reservation is what an
 * address-space limit (ulimit -v) or strict overcommit refuses, so name that
 * parameter, the limit, and a value that fits: a power of two at most a
 * quarter of the limit, as large as the parameter's minimum.
 */
static void enomem_why(const struct al_layer_desc *d, const int64_t *params, char *err,
		       size_t errlen)
{
	char have[32], lim[32], fit[32];
	uint64_t want = 0, room;
	struct rlimit rl;
	int best = -1;
	unsigned i;

	for (i = 0; i < d->nparams; i++)
		if (d->params[i].type == AL_PARAM_SIZE && (best < 0 || params[i] > params[best]))
			best = (int)i;
	if (best < 0) {
		snprintf(err, errlen, "%s: create failed: ENOMEM (out of memory)", d->name);
		return;
	}
	fmt_size(have, sizeof(have), (uint64_t)params[best]);
	if (getrlimit(RLIMIT_AS, &rl) || rl.rlim_cur == RLIM_INFINITY) {
		snprintf(err, errlen,
			 "%s: create failed: ENOMEM: could not reserve %s=%s (memory or address "
			 "space refused); a smaller %s fixes it",
			 d->name, d->params[best].name, have, d->params[best].name);
		return;
	}
	room = (uint64_t)rl.rlim_cur / 4;
	for (want = 1ull << 62; want > room; want >>= 1)
		;
	if (want < (uint64_t)d->params[best].min)
		want = (uint64_t)d->params[best].min;
	if ((uint64_t)rl.rlim_cur >= (1ull << 20)) /* ulimit -v counts KiB: say MiB */
		snprintf(lim, sizeof(lim), "%lluM", (unsigned long long)(rl.rlim_cur >> 20));
	else
		fmt_size(lim, sizeof(lim), (uint64_t)rl.rlim_cur);
	fmt_size(fit, sizeof(fit), want);
	if (want < (uint64_t)params[best])
		snprintf(err, errlen,
			 "%s: create failed: ENOMEM: could not reserve %s=%s of address space "
			 "under this process's limit of %s (ulimit -v); a smaller %s fixes it, "
			 "e.g. '%s(%s=%s)'",
			 d->name, d->params[best].name, have, lim, d->params[best].name, d->name,
			 d->params[best].name, fit);
	else
		snprintf(err, errlen,
			 "%s: create failed: ENOMEM: could not reserve %s=%s of address space "
			 "under this process's limit of %s (ulimit -v); raise the limit",
			 d->name, d->params[best].name, have, lim);
}

/* Layer i of a spec: its descriptor, its place in the stack (a layer that
 * needs a backend has one; a bottom layer is last; one that needs pages sits
 * right over a page allocator), then its parameters. */
static int check_layer(const struct al_stack_spec *s, unsigned i, struct al_spec_error *e)
{
	const struct al_layer_desc *d = s->layer[i].desc, *b;
	bool last = i == s->n - 1;
	char why[200] = "";
	int ret;

	if (!d || d->abi_version != AL_ABI_VERSION)
		return shape_fault(e, AL_SPEC_NO_DESC, -EINVAL, s, -1, -1,
				   "layer %u: missing descriptor or ABI mismatch", i);
	if (last && (d->features & AL_F_BACKEND))
		return shape_fault(e, AL_SPEC_NO_BACKEND, -EINVAL, s, (int)i, -1,
				   "%s needs a layer below it (e.g. '%s > %s')", d->name, d->name,
				   (d->features & AL_F_NEEDS_PAGES) ? "pages" : "buddy");
	if (!last && !(d->features & AL_F_BACKEND))
		return shape_fault(e, AL_SPEC_BOTTOM, -EINVAL, s, (int)i, (int)i + 1,
				   "%s is a bottom layer: nothing can stack below it", d->name);
	b = last ? NULL : s->layer[i + 1].desc;
	if (b && (d->features & AL_F_NEEDS_PAGES) && !(b->features & AL_F_PAGES))
		return shape_fault(e, AL_SPEC_NO_PAGES, -EINVAL, s, (int)i, (int)i + 1,
				   "%s needs a page allocator right below it (e.g. '%s > pages'), "
				   "not %s",
				   d->name, d->name, b->name);
	ret = al_params_check(d->params, d->nparams, s->layer[i].params, why, sizeof(why));
	if (!ret && d->check_params)
		ret = d->check_params(s->layer[i].params, why, sizeof(why));
	if (ret)
		return shape_fault(e, AL_SPEC_PARAMS, ret, s, (int)i, -1, "%s: %s", d->name,
				   why[0] ? why : "invalid parameters");
	return 0;
}

int al_stack_check(const struct al_stack_spec *s, struct al_spec_error *e)
{
	int ret = 0;

	memset(e, 0, sizeof(*e));
	e->layer = e->param = e->below = -1;
	if (!s || s->n < 1 || s->n > AL_MAX_LAYERS)
		return shape_fault(e, AL_SPEC_TOO_MANY, -EINVAL, s, -1, -1,
				   "a stack has 1 to %d layers, not %u", AL_MAX_LAYERS,
				   s ? s->n : 0);
	for (unsigned i = 0; !ret && i < s->n; i++)
		ret = check_layer(s, i, e);
	if (!ret)
		ret = check_distinct(s, e);
	if (!ret)
		ret = check_task_only(s, e);
	return ret;
}

/* The whole spec, before anything is built: al_stack_check's refusal as
 * -EINVAL, whatever a layer's own check returned. */
static int check_stack(const struct al_stack_spec *s, unsigned ncpu, char *err, size_t errlen)
{
	struct al_spec_error e;

	if (al_stack_check(s, &e)) {
		snprintf(err, errlen, "%s", e.msg);
		return -EINVAL;
	}
	if (ncpu < 1 || ncpu > AL_MAX_CPUS) {
		snprintf(err, errlen, "ncpu=%u is out of range [1, %d]", ncpu, AL_MAX_CPUS);
		return -EINVAL;
	}
	return 0;
}

/* Create layer i over `below` (which it owns from then on, also when it
 * fails: the layers below are destroyed with it). */

/* Whether the ops table a create returned is unusable: its ABI, or a required
 * entry (alloc, free, destroy, stats) missing; err names which. */
static bool ops_refused(const struct al_ops *o, const char *name, char *err, size_t errlen)
{
	const char *missing;

	if (!o || o->abi_version != AL_ABI_VERSION ||
	    (o->ops_size != sizeof(struct al_ops) && o->ops_size != AL_OPS_SIZE_V1)) {
		snprintf(err, errlen,
			 "%s: ops table of another ABI (version %u, %zu bytes; this library: %u, "
			 "%zu or %zu bytes): rebuild the layer against its headers",
			 name, o ? o->abi_version : 0, o ? o->ops_size : 0,
			 (unsigned)AL_ABI_VERSION, sizeof(struct al_ops), (size_t)AL_OPS_SIZE_V1);
		return true;
	}
	missing = !o->alloc	? "alloc"
		  : !o->free	? "free"
		  : !o->destroy ? "destroy"
		  : !o->stats	? "stats"
				: NULL;
	if (missing)
		snprintf(
			err, errlen,
			"%s: its ops table has no %s (alloc, free, destroy and stats are required)",
			name, missing);
	return missing != NULL;
}

static int create_layer(const struct al_stack_spec *s, unsigned i, unsigned ncpu,
			struct al_allocator *below, struct al_allocator **out, char *err,
			size_t errlen)
{
	const struct al_layer_desc *d = s->layer[i].desc;
	struct al_allocator *a = NULL;
	int ret;

	al_sim_layer_begin(d->name); /* names the layer's counters in a simulation's cost model */
	ret = d->create(d, s->layer[i].params, below, ncpu, &a);
	al_sim_layer_begin(NULL);

	if (ret == -ENOMEM)
		enomem_why(d, s->layer[i].params, err, errlen);
	else if (ret == -EOPNOTSUPP && al_sim_here())
		snprintf(err, errlen,
			 "%s: this configuration runs a helper thread that holds a mutex across "
			 "lock waits (irq_work=thread), which simulated CPUs cannot run: use "
			 "irq_work=inline, ipi or signal",
			 d->name);
	else if (ret || !a)
		snprintf(err, errlen, "%s: create failed: %s", d->name,
			 al_strerror(ret ? ret : -EINVAL));
	if (ret || !a) {
		al_stack_destroy(below);
		return ret ? ret : -EINVAL;
	}
	if (ops_refused(a->ops, d->name, err, errlen)) {
		if (a->ops && a->ops->destroy)
			a->ops->destroy(a);
		al_stack_destroy(below);
		return -EINVAL;
	}
	a->desc = d;
	a->below = below;
	a->ncpu = ncpu;
	if ((s->check >> i & 1) && (ret = al_guard_wrap(a))) {
		snprintf(err, errlen, "%s: no memory for its pointer checks", d->name);
		a->ops->destroy(a);
		al_stack_destroy(below);
		return ret;
	}
	*out = a;
	return 0;
}

int al_stack_create(const struct al_stack_spec *s, unsigned ncpu, struct al_allocator **out,
		    char *err, size_t errlen)
{
	struct al_allocator *below = NULL;
	int ret;

	*out = NULL;
	if (err && errlen)
		err[0] = 0;
	ret = check_stack(s, ncpu, err, errlen);
	for (unsigned i = s ? s->n : 0; !ret && i-- > 0;)
		ret = create_layer(s, i, ncpu, below, &below, err, errlen);
	if (!ret)
		*out = below;
	return ret;
}

void al_stack_destroy(struct al_allocator *top)
{
	while (top) {
		struct al_allocator *next = top->below;

		top->ops->destroy(top);
		top = next;
	}
}

void al_stack_drain(struct al_allocator *top, struct al_ctx *c, unsigned scope)
{
	for (; top; top = top->below)
		if (top->ops->drain)
			top->ops->drain(top, c, scope);
}

const struct al_allocator *al_stack_nmi_unsafe(const struct al_allocator *top)
{
	for (; top; top = top->below) {
		if (!(top->desc->features & AL_F_NMI_SAFE))
			return top;
		if (top->desc->features & AL_F_NMI_SHIELD)
			return NULL;
	}
	return NULL;
}

size_t al_spec_max_size(const struct al_stack_spec *s)
{
	size_t m = 0, x;
	unsigned i;

	for (i = 0; i < s->n && i < AL_MAX_LAYERS; i++) {
		const struct al_layer_desc *d = s->layer[i].desc;

		if (!d)
			continue;
		x = d->max_size_of ? d->max_size_of(s->layer[i].params) : d->max_size;
		if (x && (!m || x < m))
			m = x;
		/* The page allocator below such a layer serves pages, not requests. */
		if (d->features & AL_F_NEEDS_PAGES)
			break;
	}
	return m;
}

size_t al_spec_min_align(const struct al_stack_spec *s)
{
	unsigned i;

	for (i = 0; i < s->n && i < AL_MAX_LAYERS; i++) {
		size_t a = al_layer_min_align(s->layer[i].desc);

		if (a)
			return a;
	}
	return sizeof(void *);
}

unsigned al_stack_stats(struct al_allocator *top, struct al_stats *out, unsigned max)
{
	unsigned n = 0;

	for (; top && n < max; top = top->below, n++) {
		out[n].layer = top->desc ? top->desc->name : top->ops->name;
		out[n].bytes_held = 0;
		out[n].n = 0;
		top->ops->stats(top, &out[n]);
	}
	return n;
}

void *al_call_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	return a->ops->alloc(a, c, size, flags);
}

int al_call_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	return a->ops->free(a, c, p);
}

int al_call_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
		       void **out, unsigned flags)
{
	return al_alloc_bulk(a, c, size, n, out, flags);
}

int al_call_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n)
{
	return al_free_bulk(a, c, ptrs, n);
}

size_t al_call_usable_size(struct al_allocator *a, const void *p)
{
	return a->ops->usable_size ? a->ops->usable_size(a, p) : 0;
}

bool al_call_owns(struct al_allocator *a, const void *p)
{
	return a->ops->owns ? a->ops->owns(a, p) : false;
}

int al_call_check(struct al_allocator *top, char *err, size_t errlen)
{
	char why[256];
	int ret;

	for (; top; top = top->below) {
		if (!top->ops->check)
			continue;
		why[0] = 0;
		ret = top->ops->check(top, why, sizeof(why));
		if (ret) {
			snprintf(err, errlen, "%s: %s", top->ops->name, why);
			return ret;
		}
	}
	return 0;
}

static void fork_unlock_from(struct al_allocator *top, struct al_allocator *stop, struct al_ctx *c)
{
	/* bottom-up: the reverse of the order they were taken in */
	struct al_allocator *layers[AL_MAX_LAYERS], *a;
	int n = 0;

	for (a = top; a && a != stop && n < AL_MAX_LAYERS; a = a->below)
		layers[n++] = a;
	while (n--)
		if (layers[n]->ops->fork_lock && layers[n]->ops->fork_unlock)
			layers[n]->ops->fork_unlock(layers[n], c);
}

int al_stack_fork_lock(struct al_allocator *top, struct al_ctx *c)
{
	struct al_allocator *a;
	int ret;

	for (a = top; a; a = a->below) {
		if (!a->ops->fork_lock)
			continue;
		ret = a->ops->fork_lock(a, c);
		if (ret) {
			fork_unlock_from(top, a, c);
			return ret;
		}
	}
	return 0;
}

void al_stack_fork_unlock(struct al_allocator *top, struct al_ctx *c)
{
	fork_unlock_from(top, NULL, c);
}
