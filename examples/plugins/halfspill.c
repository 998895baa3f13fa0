/* SPDX-License-Identifier: MIT */
/*
 * halfspill: a per-CPU LIFO cache per order, like the built-in percpu layer,
 * except that a full cache spills HALF its capacity in one free_bulk instead
 * of one batch, and a refill brings `batch` objects. Fewer, larger trips to
 * the backend on free-heavy phases; a colder cache afterwards.
 *
 * Counters are declared once with docs (AL_COUNTERS_DEFINE): a hit adds to
 * one per-CPU slot, found once per call; allocs follows from hits and
 * refills and is derived when reported, and bytes_held comes from the
 * backend's and the caches' state, so it is right at every stats level.
 *
 * An example plugin: compile and run it beside the built-ins with
 *   alloclab run malloc-free --plugin examples/plugins/halfspill.c \
 *       --policy 'halfspill > buddy' --policy libarena-spill
 * or from Python with alloclab.plugin.compile_file(path).
 */
#include <errno.h>
#include <string.h>

#include <alloclab/alloclab.h>

#define HS_MAX_ORDERS 8 /* orders 0..7: objects up to 2 KiB */

enum { P_capacity, P_batch, P_NR };

static const struct al_param_desc hs_params[P_NR] = {
	[P_capacity] = { "capacity", AL_PARAM_INT, 16, 2, 1024, NULL, "objects per CPU per order" },
	[P_batch] = { "batch", AL_PARAM_INT, 8, 1, 512, NULL, "objects per refill" },
};

/* C: counted; D: derived from a formula, or ("") reported by hs_stats(). */
#define HS_COUNTERS(C, D, P)                                                              \
	C(P, hits, AL_CTR_KEY, "allocations served from the cache")                       \
	C(P, refills, AL_CTR_KEY, "allocations that refilled the cache from the backend") \
	D(P, allocs, AL_CTR_KEY, "hits+refills", "allocations of cached orders")          \
	C(P, frees, AL_CTR_KEY, "frees kept in the cache")                                \
	C(P, spills, AL_CTR_KEY, "half-capacity spills to the backend")                   \
	D(P, objects_cached, AL_CTR_GAUGE, "", "objects in the per-CPU caches")

AL_COUNTERS_DEFINE(HS_COUNTERS, HS_, hs_counters);

struct hs_stack {
	unsigned elems; /* objects cached */
	void **objects; /* capacity slots */
};

struct halfspill {
	struct al_allocator base; /* must be first */
	unsigned capacity, batch;
	struct hs_stack *stacks; /* [cpu][order] */
	void **slots;		 /* backing for every stack */
	size_t stacks_len, slots_len;
	struct al_counters ctr;
};

static unsigned order_of(size_t size)
{
	return size <= 16 ? 0 : al_fls64(size - 1) - 4;
}

static int order_floor(size_t usable)
{
	return usable < 16 ? -1 : (int)al_fls64(usable) - 5;
}

static struct hs_stack *stack_of(struct halfspill *h, unsigned cpu, unsigned order)
{
	return &h->stacks[cpu * HS_MAX_ORDERS + order];
}

static void *hs_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct halfspill *h = (struct halfspill *)a;
	unsigned order = order_of(size);
	struct hs_stack *s;
	void *p;
	int n;

	if (order >= HS_MAX_ORDERS)
		return al_alloc(a->below, c, size, flags);
	s = stack_of(h, c->cpu, order);
	if (!s->elems) {
		n = al_alloc_bulk(a->below, c, (size_t)16 << order, h->batch, s->objects, 0);
		if (n <= 0)
			return NULL;
		s->elems = (unsigned)n;
		al_count(&h->ctr, c, HS_refills, 1);
	} else {
		al_count(&h->ctr, c, HS_hits, 1); /* the hit path's one count */
	}
	p = s->objects[--s->elems];
	if (flags & AL_ZERO)
		memset(p, 0, size);
	return p;
}

static int hs_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct halfspill *h = (struct halfspill *)a;
	struct al_allocator *below = a->below;
	int order = order_floor(p ? below->ops->usable_size(below, p) : 0);
	struct hs_stack *s;
	uint64_t *b;

	if (!p)
		return 0;
	if (order < 0 || order >= HS_MAX_ORDERS)
		return al_free(below, c, p);
	s = stack_of(h, c->cpu, (unsigned)order);
	b = al_ctr_block(&h->ctr, c); /* once per call; NULL when stats are off */
	if (s->elems == h->capacity) {
		unsigned half = h->capacity / 2;

		if (al_free_bulk(below, c, &s->objects[s->elems - half], half) < 0)
			return al_free(below, c, p);
		s->elems -= half;
		al_ctr_add(b, HS_spills, 1);
	}
	s->objects[s->elems++] = p;
	al_ctr_add(b, HS_frees, 1);
	return 0;
}

static void hs_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct halfspill *h = (struct halfspill *)a;
	unsigned cpu, o;

	for (cpu = 0; cpu < a->ncpu; cpu++) {
		if (scope != AL_DRAIN_ALL && cpu != c->cpu)
			continue;
		for (o = 0; o < HS_MAX_ORDERS; o++) {
			struct hs_stack *s = stack_of(h, cpu, o);

			if (s->elems && al_free_bulk(a->below, c, s->objects, s->elems) >= 0)
				s->elems = 0;
		}
	}
}

static void hs_stats(struct al_allocator *a, struct al_stats *out)
{
	struct halfspill *h = (struct halfspill *)a;
	uint64_t cached = 0, cached_bytes = 0;
	unsigned cpu, o;

	for (cpu = 0; cpu < a->ncpu; cpu++)
		for (o = 0; o < HS_MAX_ORDERS; o++) {
			uint64_t n = __atomic_load_n(&stack_of(h, cpu, o)->elems, __ATOMIC_RELAXED);

			cached += n;
			cached_bytes += n * ((uint64_t)16 << o);
		}
	/* The backend counts the cached objects as allocated: callers hold the rest. */
	out->bytes_held = al_below_bytes_held(a) - (int64_t)cached_bytes;
	al_counters_report(&h->ctr, out); /* nothing when stats are off */
	if (al_counters_on(&h->ctr))
		al_stats_add_gauge(out, "objects_cached", cached);
}

/* Free what create made; a part not made yet is skipped. */
static void hs_free_parts(struct halfspill *h)
{
	al_counters_fini(&h->ctr);
	al_meta_free(h->slots, h->slots_len);
	al_meta_free(h->stacks, h->stacks_len);
	al_meta_free(h, sizeof(*h));
}

static void hs_destroy(struct al_allocator *a)
{
	struct al_ctx c;

	al_ctx_init(&c, 0);
	hs_drain(a, &c, AL_DRAIN_ALL); /* hand the caches back before the backend goes */
	hs_free_parts((struct halfspill *)a);
}

static const struct al_ops hs_ops = {
	.name = "halfspill",
	AL_OPS_INIT,
	.alloc = hs_alloc,
	.free = hs_free,
	.owns = al_below_owns,
	.usable_size = al_below_usable_size,
	.drain = hs_drain,
	.stats = hs_stats,
	.destroy = hs_destroy,
};

static int hs_create(const struct al_layer_desc *d, const int64_t *p, struct al_allocator *below,
		     unsigned ncpu, struct al_allocator **out)
{
	struct halfspill *h;
	unsigned i;

	if (!below || !below->ops->usable_size || p[P_batch] > p[P_capacity])
		return -EINVAL;
	h = al_meta_alloc(sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->capacity = (unsigned)p[P_capacity];
	h->batch = (unsigned)p[P_batch];
	h->stacks_len = sizeof(struct hs_stack) * ncpu * HS_MAX_ORDERS;
	h->slots_len = sizeof(void *) * h->capacity * ncpu * HS_MAX_ORDERS;
	h->stacks = al_meta_alloc(h->stacks_len);
	h->slots = al_meta_alloc(h->slots_len);
	if (!h->stacks || !h->slots || al_counters_init_desc(&h->ctr, hs_counters, HS_NR, 0, ncpu))
		goto out_free;
	for (i = 0; i < ncpu * HS_MAX_ORDERS; i++)
		h->stacks[i].objects = h->slots + (size_t)i * h->capacity;
	*out = al_allocator_init(&h->base, &hs_ops, d, below, ncpu);
	return 0;

out_free:
	hs_free_parts(h);
	return -ENOMEM;
}

static const struct al_layer_desc hs_desc = {
	.name = "halfspill",
	AL_LAYER_DESC_INIT,
	.doc = "plugin example: per-CPU cache that spills half its capacity when full",
	.features = AL_F_BACKEND | AL_F_OWNS_BELOW | AL_F_OWNS | AL_F_USABLE,
	.nparams = P_NR,
	.params = hs_params,
	.counters = hs_counters, /* their docs reach `alloclab list halfspill` */
	.ncounters = HS_NR,
	.create = hs_create,
};

AL_REGISTER_LAYER(hs_desc)
