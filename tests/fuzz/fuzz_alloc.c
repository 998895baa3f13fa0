/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer targets, one per layer family, from this one source:
 *   FUZZ_FAMILY_buddy   buddy
 *   FUZZ_FAMILY_front   percpu, transfer (under percpu), magazine over buddy
 *   FUZZ_FAMILY_slab    slab, sheaves, nolock, bpf_ma over slab; sheaves over buddy
 *   FUZZ_FAMILY_pages   pages, vmalloc over pages
 * The input's first byte picks a stack of the family; the rest decodes into
 * operations: allocations of any size (each object filled with its own
 * byte), frees of live objects, bogus and double frees (validating layers),
 * bulk calls, CPU switches, drains, and nested operations at AL_CTX_NMI
 * (synchronous, and from inside the layers at their AL_INJECT points, as an
 * NMI arriving there would) on NMI-safe stacks. After every step every
 * layer's check() must pass and the touched objects' patterns must be
 * intact; at the end everything is freed and drained and every layer's
 * bytes_held must be back to its baseline. A violation aborts (a crash for
 * libFuzzer, with the input saved).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloclab/alloclab.h"

#if defined(FUZZ_FAMILY_buddy)
static const char *const specs[] = { "buddy(chunk_size=64K, arena_limit=1M)" };
#elif defined(FUZZ_FAMILY_front)
static const char *const specs[] = {
	"percpu > buddy(chunk_size=64K, arena_limit=1M)",
	"percpu > transfer > buddy(chunk_size=64K, arena_limit=1M)",
	("percpu(guard=local) > transfer(peek=false, full=single) > "
	 "buddy(chunk_size=64K, arena_limit=1M)"),
	"magazine > buddy(chunk_size=64K, arena_limit=1M)",
};
#elif defined(FUZZ_FAMILY_slab)
static const char *const specs[] = {
	"slab(arena_limit=1M)",
	"sheaves > slab(form=sheaves, arena_limit=1M)",
	"nolock > slab(arena_limit=1M)",
	"bpf_ma > slab(arena_limit=1M)",
	/* sheaves over powers of two: the class learning (96 -> 128) */
	"sheaves(capacity=4, barn_full=1, barn_empty=1) > buddy(chunk_size=64K, arena_limit=1M)",
};
#elif defined(FUZZ_FAMILY_pages)
static const char *const specs[] = { "pages(memory=4M)", "vmalloc > pages(memory=4M)" };
#else
#error "define FUZZ_FAMILY_buddy, _front, _slab or _pages"
#endif

#define NSPECS	 (sizeof(specs) / sizeof(specs[0]))
#define NCPU	 2
#define MAXLIVE	 256
#define MAXBULK	 32
#define MAXBYTES 16384

struct obj {
	uint8_t *p;   /* NULL = empty */
	uint32_t len; /* requested bytes */
	uint8_t tag;  /* fill byte */
};

static struct obj live[MAXLIVE];
static struct al_allocator *top;
static bool nmi_safe, validates;
static size_t maxsz;
static int inject_armed; /* run one nested NMI operation at the next AL_INJECT */
static uint8_t tagseq;

#define FAIL(...)                                      \
	do {                                           \
		fprintf(stderr, "fuzz: " __VA_ARGS__); \
		fputc('\n', stderr);                   \
		abort();                               \
	} while (0)

static void fill(struct obj *o, void *p, size_t len)
{
	o->p = p;
	o->len = (uint32_t)len;
	o->tag = (uint8_t)(++tagseq ? tagseq : ++tagseq);
	memset(p, o->tag, len);
}

static void verify(const struct obj *o)
{
	uint32_t i;

	for (i = 0; i < o->len; i++)
		if (o->p[i] != o->tag)
			FAIL("object %p byte %u of %u changed while live (0x%02x, not 0x%02x)",
			     (void *)o->p, i, o->len, o->p[i], o->tag);
}

static void check_all(void)
{
	char err[256] = "";

	if (al_call_check(top, err, sizeof(err)))
		FAIL("check: %s", err);
}

static bool transient(int err)
{
	return err == -ENOMEM || err == -EBUSY || err == -ETIMEDOUT || err == -EAGAIN;
}

static void free_obj(struct obj *o, struct al_ctx *c)
{
	int ret, tries = 0;

	verify(o);
	while ((ret = al_call_free(top, c, o->p)) && transient(ret) && ++tries < 100)
		;
	if (ret)
		FAIL("free(%p) of a live object failed: %d", (void *)o->p, ret);
	o->p = NULL;
}

static struct obj *slot(uint8_t b)
{
	return &live[b % MAXLIVE];
}

/* A nested operation at NMI level: allocate and free one object. */
static void nmi_op(struct al_ctx *c, size_t len)
{
	struct al_ctx nmi;
	uint8_t *p;
	int ret;

	al_ctx_nested(&nmi, c, AL_CTX_NMI);
	p = al_call_alloc(top, &nmi, len, 0);
	if (!p) {
		if (!transient(nmi.err))
			FAIL("NMI alloc(%zu): unexpected error %d", len, nmi.err);
		return;
	}
	memset(p, 0xa5, len);
	ret = al_call_free(top, &nmi, p);
	if (ret && !transient(ret))
		FAIL("NMI free: %d", ret);
	if (ret) /* not freed at NMI: free it at task level afterwards (the caller) */
		al_call_free(top, c, p);
}

static void inject(const char *point, struct al_ctx *c, void *arg)
{
	(void)point;
	(void)arg;
	if (!__atomic_exchange_n(&inject_armed, 0, __ATOMIC_RELAXED) || c->level != AL_CTX_TASK)
		return;
	nmi_op(c, 64);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct al_stack_spec spec;
	struct al_stats st0[AL_MAX_LAYERS], st1[AL_MAX_LAYERS];
	struct al_ctx ctx[NCPU], *c;
	void *out[MAXBULK], *copy[MAXBULK];
	char err[256];
	size_t i = 0, len;
	unsigned n, k, j, nl, cpu = 0;
	int ret;

	if (size < 1)
		return 0;
	if (al_spec_parse(specs[data[i++] % NSPECS], &spec, err, sizeof(err)))
		FAIL("spec: %s", err);
	if (al_stack_create(&spec, NCPU, &top, err, sizeof(err)))
		FAIL("create: %s", err);
	maxsz = al_spec_max_size(&spec);
	if (!maxsz || maxsz > MAXBYTES)
		maxsz = MAXBYTES;
	nmi_safe = !al_stack_nmi_unsafe(top);
	validates = top->desc->features & AL_F_VALIDATES;
	for (j = 0; j < NCPU; j++)
		al_ctx_init(&ctx[j], j);
	memset(live, 0, sizeof(live));
	al_stack_drain(top, &ctx[0], AL_DRAIN_ALL);
	nl = al_stack_stats(top, st0, AL_MAX_LAYERS);
	if (nmi_safe)
		__atomic_store_n(&al_inject_hook, inject, __ATOMIC_RELAXED);

	while (i + 3 <= size) {
		uint8_t op = data[i], a = data[i + 1], b = data[i + 2];
		struct obj *o = slot(a);

		i += 3;
		c = &ctx[cpu];
		len = 1 + ((size_t)b << (a % 7)) % maxsz;
		switch (op % 10) {
		case 0: /* alloc */
		case 1:
			if (o->p)
				free_obj(o, c);
			c->err = 0;
			o->p = al_call_alloc(top, c, len, (op & 0x80) ? AL_ZERO : 0);
			if (!o->p) {
				if (!transient(c->err))
					FAIL("alloc(%zu): unexpected error %d", len, c->err);
				break;
			}
			if ((op & 0x80))
				for (j = 0; j < len; j++)
					if (o->p[j])
						FAIL("AL_ZERO object %p byte %u not zero",
						     (void *)o->p, j);
			fill(o, o->p, len);
			break;
		case 2: /* free */
			if (o->p)
				free_obj(o, c);
			break;
		case 3: /* alloc_bulk into consecutive slots */
			n = 1 + b % MAXBULK;
			len = 1 + ((size_t)a * 7) % (maxsz < 2048 ? maxsz : 2048);
			c->err = 0;
			ret = al_call_alloc_bulk(top, c, len, n, out, 0);
			if (ret < 0 || (unsigned)ret > n)
				FAIL("alloc_bulk(%zu, %u) returned %d", len, n, ret);
			if (!ret && !transient(c->err))
				FAIL("alloc_bulk: unexpected error %d", c->err);
			for (k = 0; k < (unsigned)ret; k++) {
				struct obj *t = slot((uint8_t)(a + k));

				if (t->p)
					free_obj(t, c);
				fill(t, out[k], len);
			}
			break;
		case 4: /* free_bulk of live objects from consecutive slots */
			for (n = 0, k = 0; k < 1 + b % MAXBULK && n < MAXBULK; k++) {
				struct obj *t = slot((uint8_t)(a + k));

				if (t->p) {
					verify(t);
					out[n++] = t->p;
				}
			}
			if (!n)
				break;
			memcpy(copy, out, n * sizeof(void *)); /* free_bulk may rewrite its array */
			ret = al_call_free_bulk(top, c, copy, n);
			if (ret < 0 && transient(ret))
				break; /* nothing freed: still live */
			if (ret != (int)n)
				FAIL("free_bulk(%u) returned %d", n, ret);
			for (k = 0; k < 1 + b % MAXBULK; k++) {
				struct obj *t = slot((uint8_t)(a + k));

				for (j = 0; j < n; j++)
					if (t->p == out[j])
						t->p = NULL;
			}
			break;
		case 5: /* switch CPU */ cpu = a % NCPU; break;
		case 6: /* bogus or double free on validating layers */
			if (!validates)
				break;
			if (o->p && (b & 1)) {
				uint8_t *bogus = o->p + 1 + b % 15; /* never a block start */

				if (al_call_free(top, c, bogus) != -EINVAL)
					FAIL("bogus free %p accepted", (void *)bogus);
			} else if (!o->p) {
				void *p = al_call_alloc(top, c, len, 0);

				if (p) {
					if (al_call_free(top, c, p))
						FAIL("free of a fresh object failed");
					if (al_call_free(top, c, p) != -EINVAL)
						FAIL("double free %p accepted", p);
				}
			}
			break;
		case 7: /* drain */
			al_stack_drain(top, c, (b & 1) ? AL_DRAIN_ALL : AL_DRAIN_CPU);
			break;
		case 8: /* a nested NMI operation, now or inside the next operation */
			if (!nmi_safe)
				break;
			if (b & 1)
				__atomic_store_n(&inject_armed, 1, __ATOMIC_RELAXED);
			else
				nmi_op(c, len);
			break;
		case 9: /* touch and verify a live object */
			if (o->p)
				verify(o);
			break;
		}
		check_all();
	}

	__atomic_store_n(&inject_armed, 0, __ATOMIC_RELAXED);
	for (j = 0; j < MAXLIVE; j++)
		if (live[j].p)
			free_obj(&live[j], &ctx[0]);
	for (j = 0; j < NCPU; j++)
		al_stack_drain(top, &ctx[j], AL_DRAIN_CPU);
	al_stack_drain(top, &ctx[0], AL_DRAIN_ALL);
	check_all();
	if (al_stack_stats(top, st1, AL_MAX_LAYERS) != nl)
		FAIL("layer count changed");
	for (j = 0; j < nl; j++)
		if (st1[j].bytes_held != st0[j].bytes_held)
			FAIL("leak: layer %s holds %lld bytes, %lld at start", st1[j].layer,
			     (long long)st1[j].bytes_held, (long long)st0[j].bytes_held);
	__atomic_store_n(&al_inject_hook, NULL, __ATOMIC_RELAXED);
	al_stack_destroy(top);
	top = NULL;
	return 0;
}
