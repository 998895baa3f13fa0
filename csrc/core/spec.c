/* SPDX-License-Identifier: MIT */
/*
 * Policy spec strings in C, for callers without Python (the preload shim):
 *
 *   spec   := layer ( '>' layer )*          top first
 *   layer  := name [ '(' [ kv ( ',' kv )* ] ')' ]
 *   kv     := param '=' value
 *   value  := integer [K|M|G]  (sizes)      | integer [ns|us|ms|s] (durations)
 *           | true | false | 0 | 1 (bools)   | a choice name (enums)
 *
 * The grammar is the one Python's Policy accepts and prints (canonical
 * strings round-trip through both); presets are a Python-side convenience
 * and are resolved before a spec reaches C. Parsing never allocates: names
 * and values are compared in place.
 *
 * Algorithm: one left-to-right pass. Each layer name is looked up in the
 * registry and its parameters start at the schema defaults; each kv names
 * a parameter of that layer and its value is converted by the parameter's
 * type (suffixes scale sizes and durations, enums match a choice). Once the
 * whole text is read, every layer's values are checked against its schema
 * ranges (cross-parameter checks are al_stack_create's). The first error
 * stops the parse with err naming the text at fault; *out is complete only
 * on success. No lock (the registry's lookups take none). Cost: linear in
 * the text, plus a registry lookup per layer.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "alloclab/alloclab.h"

static const char *skip_ws(const char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\n')
		s++;
	return s;
}

static size_t ident_len(const char *s)
{
	size_t n = 0;

	while ((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') ||
	       (s[n] >= '0' && s[n] <= '9') || s[n] == '_' || s[n] == '-')
		n++;
	return n;
}

/* Does the comma-separated list `choices` hold the n-byte word w? Index or -1. */
static int choice_index(const char *choices, const char *w, size_t n)
{
	int i = 0;

	while (*choices) {
		size_t len = strcspn(choices, ",");

		if (len == n && !strncmp(choices, w, n))
			return i;
		choices += len;
		if (*choices == ',')
			choices++;
		i++;
	}
	return -1;
}

static int parse_value(const struct al_param_desc *p, const char *v, size_t n, int64_t *out)
{
	int64_t x = 0, mul = 1;
	size_t i = 0;
	bool neg = false;

	if (p->type == AL_PARAM_ENUM) {
		int k = choice_index(p->choices, v, n);

		if (k >= 0) {
			*out = k;
			return 0;
		}
	}
	if (p->type == AL_PARAM_BOOL) {
		if (n == 4 && !strncmp(v, "true", 4)) {
			*out = 1;
			return 0;
		}
		if (n == 5 && !strncmp(v, "false", 5)) {
			*out = 0;
			return 0;
		}
	}
	if (i < n && v[i] == '-') {
		neg = true;
		i++;
	}
	if (i == n || v[i] < '0' || v[i] > '9')
		return -EINVAL;
	for (; i < n && v[i] >= '0' && v[i] <= '9'; i++) {
		if (x > (INT64_MAX - 9) / 10)
			return -ERANGE;
		x = x * 10 + (v[i] - '0');
	}
	if (i < n) {
		const char *u = v + i;
		size_t un = n - i;

		if (p->type == AL_PARAM_SIZE && un == 1 && (*u == 'K' || *u == 'k'))
			mul = 1ll << 10;
		else if (p->type == AL_PARAM_SIZE && un == 1 && (*u == 'M' || *u == 'm'))
			mul = 1ll << 20;
		else if (p->type == AL_PARAM_SIZE && un == 1 && (*u == 'G' || *u == 'g'))
			mul = 1ll << 30;
		else if (p->type == AL_PARAM_NS && un == 2 && !strncmp(u, "ns", 2))
			mul = 1;
		else if (p->type == AL_PARAM_NS && un == 2 && !strncmp(u, "us", 2))
			mul = 1000;
		else if (p->type == AL_PARAM_NS && un == 2 && !strncmp(u, "ms", 2))
			mul = 1000000;
		else if (p->type == AL_PARAM_NS && un == 1 && *u == 's')
			mul = 1000000000;
		else
			return -EINVAL;
	}
	if (x > INT64_MAX / mul)
		return -ERANGE;
	*out = neg ? -x * mul : x * mul;
	return 0;
}

/* The parameter list of layer d after its '(' (s points past it): each
 * kv sets params[]; returns the text after the closing ')' in *end. */
static int parse_params(const char *s, const struct al_layer_desc *d, int64_t *params,
			const char **end, char *err, size_t errlen)
{
	s = skip_ws(s);
	while (*s != ')') {
		size_t klen = ident_len(s), vlen;
		const char *v;
		unsigned k;
		int ret;

		for (k = 0; k < d->nparams; k++)
			if (strlen(d->params[k].name) == klen &&
			    !strncmp(d->params[k].name, s, klen))
				break;
		if (!klen || k == d->nparams) {
			snprintf(err, errlen, "%s has no parameter '%.*s'", d->name, (int)klen, s);
			return -EINVAL;
		}
		s = skip_ws(s + klen);
		if (*s != '=') {
			snprintf(err, errlen, "expected '=' after %s.%s", d->name,
				 d->params[k].name);
			return -EINVAL;
		}
		v = skip_ws(s + 1);
		vlen = strcspn(v, ",) \t\n");
		ret = parse_value(&d->params[k], v, vlen, &params[k]);
		if (ret) {
			snprintf(err, errlen, "%s.%s: bad value '%.*s'", d->name, d->params[k].name,
				 (int)vlen, v);
			return ret;
		}
		s = skip_ws(v + vlen);
		if (*s == ',')
			s = skip_ws(s + 1);
		else if (*s != ')') {
			snprintf(err, errlen, "expected ',' or ')' in %s(...)", d->name);
			return -EINVAL;
		}
	}
	*end = skip_ws(s + 1);
	return 0;
}

/* Layer n of the spec, at s: its name, then its parameters if a '(' follows,
 * into out->layer[n]; the text after it in *end. */
static int parse_layer(const char *text, const char *s, struct al_stack_spec *out, unsigned n,
		       const char **end, char *err, size_t errlen)
{
	const struct al_layer_desc *d;
	char name[64];
	size_t len;

	s = skip_ws(s);
	len = ident_len(s);
	if (!len || len >= sizeof(name)) {
		snprintf(err, errlen, "expected a layer name at offset %d of '%s'", (int)(s - text),
			 text);
		return -EINVAL;
	}
	memcpy(name, s, len);
	name[len] = 0;
	d = al_layer_find(name);
	if (!d) {
		snprintf(err, errlen, "unknown layer '%s'", name);
		return -EINVAL;
	}
	if (n == AL_MAX_LAYERS) {
		snprintf(err, errlen, "more than %d layers", AL_MAX_LAYERS);
		return -EINVAL;
	}
	out->layer[n].desc = d;
	al_params_default(d->params, d->nparams, out->layer[n].params);
	s = skip_ws(s + len);
	if (*s == '(')
		return parse_params(s + 1, d, out->layer[n].params, end, err, errlen);
	*end = s;
	return 0;
}

int al_spec_parse(const char *text, struct al_stack_spec *out, char *err, size_t errlen)
{
	const char *s = text ? text : "";
	unsigned n = 0;
	char why[160];
	int ret;

	memset(out, 0, sizeof(*out));
	for (;;) {
		ret = parse_layer(text, s, out, n, &s, err, errlen);
		if (ret)
			return ret;
		n++;
		if (*s == '>') {
			s++;
			continue;
		}
		if (*s) {
			snprintf(err, errlen, "unexpected '%c' at offset %d of '%s'", *s,
				 (int)(s - text), text);
			return -EINVAL;
		}
		break;
	}
	out->n = n;
	for (unsigned i = 0; i < n; i++) {
		const struct al_layer_desc *d = out->layer[i].desc;

		if (al_params_check(d->params, d->nparams, out->layer[i].params, why,
				    sizeof(why))) {
			snprintf(err, errlen, "%s: %s", d->name, why);
			return -ERANGE;
		}
	}
	return 0;
}
