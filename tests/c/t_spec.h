/* SPDX-License-Identifier: MIT */
/*
 * Test helpers: build a stack from a policy spec string,
 * "nolock > sheaves(capacity=4) > slab(form=sheaves)": values are integers
 * or enum choice names; everything else takes its default. Plus the fault
 * injection plumbing: arm a hook for one named point, run a nested
 * operation there once.
 */
#ifndef ALLOCLAB_T_SPEC_H
#define ALLOCLAB_T_SPEC_H

#include <ctype.h>

#include "test.h"

static inline int t_param_value(const struct al_param_desc *p, const char *v, int64_t *out)
{
	const char *c = p->choices;
	size_t n = strlen(v);
	int64_t i = 0;

	if (p->type == AL_PARAM_ENUM && !isdigit((unsigned char)v[0])) {
		for (; c && *c; i++) {
			size_t k = strcspn(c, ",");

			if (k == n && !strncmp(c, v, n)) {
				*out = i;
				return 0;
			}
			c += k + (c[k] == ',');
		}
		return -1;
	}
	if (!strcmp(v, "true") || !strcmp(v, "false")) {
		*out = v[0] == 't';
		return 0;
	}
	*out = strtoll(v, NULL, 0);
	return 0;
}

/* Parse spec into s: 0, or -1 with a message. */
static inline int t_spec_fill(const char *spec, struct al_stack_spec *sp)
{
	struct al_stack_spec s;
	char buf[512], *save = NULL, *part;
	unsigned i;

	memset(&s, 0, sizeof(s));
	snprintf(buf, sizeof(buf), "%s", spec);
	for (part = strtok_r(buf, ">", &save); part; part = strtok_r(NULL, ">", &save)) {
		char name[64], *open, *kv, *save2 = NULL;
		const struct al_layer_desc *d;

		while (isspace((unsigned char)*part))
			part++;
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(part, "( "), part);
		d = al_layer_find(name);
		if (!d || s.n == AL_MAX_LAYERS) {
			fprintf(stderr, "t_spec: no layer %s\n", name);
			return -1;
		}
		s.layer[s.n].desc = d;
		al_params_default(d->params, d->nparams, s.layer[s.n].params);
		open = strchr(part, '(');
		if (open) {
			*strchr(open, ')') = 0;
			for (kv = strtok_r(open + 1, ",", &save2); kv;
			     kv = strtok_r(NULL, ",", &save2)) {
				char k[64], *eq = strchr(kv, '=');

				while (isspace((unsigned char)*kv))
					kv++;
				snprintf(k, sizeof(k), "%.*s", (int)(eq - kv), kv);
				for (i = 0; i < d->nparams; i++)
					if (!strcmp(d->params[i].name, k))
						break;
				if (i == d->nparams ||
				    t_param_value(&d->params[i], eq + 1, &s.layer[s.n].params[i])) {
					fprintf(stderr, "t_spec: bad parameter %s of %s\n", k,
						name);
					return -1;
				}
			}
		}
		s.n++;
	}
	*sp = s;
	return 0;
}

/* Build a stack for ncpu CPUs from spec; NULL (with a message) on error. */
static inline struct al_allocator *t_spec(const char *spec, unsigned ncpu)
{
	struct al_stack_spec s;
	struct al_allocator *a = NULL;
	char err[256];

	if (t_spec_fill(spec, &s))
		return NULL;
	if (al_stack_create(&s, ncpu, &a, err, sizeof(err))) {
		fprintf(stderr, "t_spec: %s: %s\n", spec, err);
		return NULL;
	}
	return a;
}

static inline void t_check(struct al_allocator *a)
{
	char err[512];

	err[0] = 0;
	if (al_call_check(a, err, sizeof(err))) {
		fprintf(stderr, "check: %s\n", err);
		t_failed_checks++;
	}
}

/* Drain every layer, check invariants and that every layer holds nothing. */
static inline void t_teardown(struct al_allocator *a)
{
	struct al_stats st[AL_MAX_LAYERS];
	struct al_ctx c;
	unsigned n, l;

	al_ctx_init(&c, 0);
	al_stack_drain(a, &c, AL_DRAIN_ALL);
	t_check(a);
	n = al_stack_stats(a, st, AL_MAX_LAYERS);
	for (l = 0; l < n; l++)
		if (st[l].bytes_held) {
			fprintf(stderr, "teardown: layer %s holds %lld bytes\n", st[l].layer,
				(long long)st[l].bytes_held);
			t_failed_checks++;
		}
	al_stack_destroy(a);
}

/* ---- fault injection: one nested operation at a named point ---- */

static const char *t_inject_point;			 /* armed point, or NULL */
static void (*t_inject_fn)(struct al_ctx *c, void *arg); /* what runs there */
static int t_inject_fired;				 /* times it ran */

static inline void t_inject_hook(const char *point, struct al_ctx *c, void *arg)
{
	if (!t_inject_point || strcmp(point, t_inject_point))
		return;
	t_inject_point = NULL; /* once: the nested operation may pass here too */
	t_inject_fired++;
	t_inject_fn(c, arg);
}

static inline void t_inject_arm(const char *point, void (*fn)(struct al_ctx *c, void *arg))
{
	t_inject_fn = fn;
	t_inject_fired = 0;
	t_inject_point = point;
	al_inject_hook = t_inject_hook;
}

static inline void t_inject_off(void)
{
	t_inject_point = NULL;
	al_inject_hook = NULL;
}

#endif
