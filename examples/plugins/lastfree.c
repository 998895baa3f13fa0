/* SPDX-License-Identifier: MIT */
/*
 * lastfree: a front layer caching one object per CPU. A free parks the object
 * in the CPU's empty slot (else passes it down); an allocation that fits the
 * parked object (its usable size at most twice the request) takes it back.
 * Each slot has one user, its CPU: no lock. An example plugin, written from
 * docs/plugins.md.
 */
#include <errno.h>
#include <string.h>
#include <alloclab/alloclab.h>

#define LF_COUNTERS(X)                                     \
	X(hits, "allocations served by the parked object") \
	X(parked, "frees kept in the slot")                \
	X(bytes_allocated, "usable bytes handed out")      \
	X(bytes_freed, "usable bytes taken back")
#define X(name, doc) LF_##name,
enum { LF_COUNTERS(X) LF_NR };
#undef X
static const char *const lf_names[] = { LF_COUNTERS(AL_CTR_NAME) };

struct lastfree {
	struct al_allocator base; /* must be first */
	struct al_counters ctr;
	struct {
		void *obj;     /* the parked object, or NULL */
		size_t usable; /* its usable size */
	} cpu[AL_MAX_CPUS] __attribute__((aligned(AL_CACHELINE)));
};

static void *lf_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct lastfree *lf = (struct lastfree *)a;
	void *p = lf->cpu[c->cpu].obj;
	size_t u = lf->cpu[c->cpu].usable;

	if (p && size <= u && u / 2 <= size) {
		lf->cpu[c->cpu].obj = NULL;
		al_count(&lf->ctr, c, LF_hits, 1);
		if (flags & AL_ZERO)
			memset(p, 0, size);
	} else if ((p = al_alloc(a->below, c, size, flags))) {
		u = al_below_usable_size(a, p);
	}
	if (p)
		al_count(&lf->ctr, c, LF_bytes_allocated, u);
	return p;
}

static int lf_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct lastfree *lf = (struct lastfree *)a;
	size_t u = p ? al_below_usable_size(a, p) : 0;
	int ret = 0;

	if (u && !lf->cpu[c->cpu].obj) {
		lf->cpu[c->cpu].obj = p;
		lf->cpu[c->cpu].usable = u;
		al_count(&lf->ctr, c, LF_parked, 1);
	} else {
		ret = al_free(a->below, c, p);
	}
	if (u && !ret)
		al_count(&lf->ctr, c, LF_bytes_freed, u);
	return ret;
}

static void lf_drain(struct al_allocator *a, struct al_ctx *c, unsigned scope)
{
	struct lastfree *lf = (struct lastfree *)a;
	unsigned cpu;

	for (cpu = 0; cpu < a->ncpu; cpu++)
		if ((scope == AL_DRAIN_ALL || cpu == c->cpu) && lf->cpu[cpu].obj &&
		    !al_free(a->below, c, lf->cpu[cpu].obj))
			lf->cpu[cpu].obj = NULL;
}

static void lf_stats(struct al_allocator *a, struct al_stats *out)
{
	struct lastfree *lf = (struct lastfree *)a;

	out->bytes_held = (int64_t)(al_counters_sum(&lf->ctr, LF_bytes_allocated) -
				    al_counters_sum(&lf->ctr, LF_bytes_freed));
	al_counters_report(&lf->ctr, out);
}

static void lf_free_parts(struct lastfree *lf)
{
	al_counters_fini(&lf->ctr);
	al_meta_free(lf, sizeof(*lf));
}

static void lf_destroy(struct al_allocator *a)
{
	struct al_ctx c;

	al_ctx_init(&c, 0);
	lf_drain(a, &c, AL_DRAIN_ALL); /* the parked objects back before the layer below goes */
	lf_free_parts((struct lastfree *)a);
}

static const struct al_ops lf_ops = {
	.name = "lastfree",
	AL_OPS_INIT,
	.alloc = lf_alloc,
	.free = lf_free,
	.owns = al_below_owns,
	.usable_size = al_below_usable_size,
	.drain = lf_drain,
	.stats = lf_stats,
	.destroy = lf_destroy,
};

static int lf_create(const struct al_layer_desc *d, const int64_t *params,
		     struct al_allocator *below, unsigned ncpu, struct al_allocator **out)
{
	struct lastfree *lf = al_meta_alloc(sizeof(*lf));

	(void)params;
	if (!lf)
		return -ENOMEM;
	if (al_counters_init(&lf->ctr, LF_NR, lf_names, ncpu))
		goto out_free;
	*out = al_allocator_init(&lf->base, &lf_ops, d, below, ncpu);
	return 0;

out_free:
	lf_free_parts(lf);
	return -ENOMEM;
}

static const struct al_layer_desc lf_desc = {
	.name = "lastfree",
	AL_LAYER_DESC_INIT,
	.doc = "example front layer: one parked object per CPU",
	.features = AL_F_BACKEND | AL_F_NEEDS_DISTINCT | AL_F_OWNS | AL_F_USABLE,
	.create = lf_create,
};

AL_REGISTER_LAYER(lf_desc)
