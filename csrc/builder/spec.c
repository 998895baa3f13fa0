/* SPDX-License-Identifier: MIT */
/*
 * Policy spec strings: the one parser of the grammar. Python's Policy calls it
 * (al_spec_parse_report) and only words its refusals; callers without Python
 * (the preload shim, the C tests) call al_spec_parse.
 *
 *   spec   := preset | layer ( '>' layer )*         top first
 *   preset := the name of a preset (registry.h), alone: its spec is read
 *   layer  := name [ '(' [ kv ( ',' kv )* ] ')' ]
 *   name   := [A-Za-z_][A-Za-z0-9_.-]*              '-' may stand for '_'
 *   kv     := param '=' value                       param: [A-Za-z_][A-Za-z0-9_-]*
 *   value  := the text up to the next ',' or ')', by the parameter's type:
 *     INT   [+-]digits
 *     SIZE  digits [K|M|G|T] [B|iB]                   (case-insensitive)
 *     NS    digits[.digits] | .digits [ns|us|µs|ms|s] (no unit: ns; whole ns only)
 *     BOOL  true|false|yes|no|on|off|1|0             (case-insensitive)
 *     ENUM  one of the parameter's choices, exactly
 *   Whitespace may surround every token.
 *
 * A refusal names the first fault a reader would meet: the parentheses of the
 * whole text are checked first, then each layer's text for its shape (a name,
 * items of name=value) before its names are looked up and its values
 * converted and range-checked; a parameter given twice is a syntax fault.
 * Layers past AL_MAX_LAYERS are still parsed (into scratch) so that the
 * count reported is the true one. Every refusal fills struct al_spec_error.
 *
 * A preset is a whole spec by a name: the text that is exactly a preset's
 * name (blanks around it allowed) reads as that preset's spec. A preset is
 * no layer: stacked or given parameters ('libarena-spill > buddy') it is
 * refused as an unknown layer whose message names it a preset, since its
 * layers would need a place of their own in the stack. Layer names come
 * first: a preset of one layer (buddy) is that layer anywhere.
 * Parsing never allocates, reads only the registry (immutable after load)
 * and costs O(length x parameters).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloclab/core.h"
#include "alloclab/stack.h"
#include "alloclab/spec.h"

/* A piece of the text: [s, s + n). */
struct tok {
	const char *s;
	size_t n;
};

struct parser {
	const char *text;
	struct al_spec_error *e;
};

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* A byte of a non-ASCII UTF-8 character. No name has one, but a name that
 * holds one is read whole, so that it is refused as an unknown name
 * ('bùddy') rather than cut at its first such byte ('b', then a syntax
 * error about what follows). */
static bool is_high(char c)
{
	return (unsigned char)c >= 0x80;
}

static char lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static struct tok trim(const char *s, const char *end)
{
	while (s < end && is_ws(*s))
		s++;
	while (end > s && is_ws(end[-1]))
		end--;
	return (struct tok){ s, (size_t)(end - s) };
}

/* Does t spell w, ignoring ASCII case? */
static bool tok_is(struct tok t, const char *w)
{
	size_t i;

	if (t.n != strlen(w))
		return false;
	for (i = 0; i < t.n; i++)
		if (lower(t.s[i]) != w[i])
			return false;
	return true;
}

/* Record a refusal: its fault, the token, and msg from fmt. Returns ret. */
static int fail(struct parser *p, int fault, int ret, struct tok t, const char *fmt, ...)
{
	struct al_spec_error *e = p->e;
	va_list ap;

	e->fault = fault;
	e->offset = (int)(t.s - p->text);
	e->tok = e->offset;
	e->toklen = (int)t.n;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return ret;
}

/* ---- values ---- */

/* Digits at *s (at least one) into *x; *s moves past them. -ERANGE on
 * overflow (the digits are still consumed), -EINVAL if there are none. */
static int digits(const char **s, const char *end, uint64_t *x, size_t *count)
{
	const char *q = *s;
	int ret = 0;

	*x = 0;
	for (; q < end && is_digit(*q); q++) {
		if (*x > (UINT64_MAX - 9) / 10)
			ret = -ERANGE;
		else
			*x = *x * 10 + (uint64_t)(*q - '0');
	}
	if (count)
		*count = (size_t)(q - *s);
	if (q == *s)
		return -EINVAL;
	*s = q;
	return ret;
}

static int value_int(struct tok t, int64_t *out)
{
	const char *s = t.s, *end = t.s + t.n;
	bool neg = false;
	uint64_t x;
	int ret;

	if (s < end && (*s == '+' || *s == '-'))
		neg = *s++ == '-';
	ret = digits(&s, end, &x, NULL);
	if (ret == -EINVAL || s != end)
		return -EINVAL;
	if (ret || x > (uint64_t)INT64_MAX)
		return -ERANGE;
	*out = neg ? -(int64_t)x : (int64_t)x;
	return 0;
}

static int value_size(struct tok t, int64_t *out)
{
	const char *s = t.s, *end = t.s + t.n;
	unsigned shift = 0;
	uint64_t x;
	int ret = digits(&s, end, &x, NULL);

	if (ret == -EINVAL)
		return ret;
	while (s < end && is_ws(*s))
		s++;
	if (s < end && strchr("kmgt", lower(*s))) {
		shift = lower(*s) == 'k' ? 10 : lower(*s) == 'm' ? 20 : lower(*s) == 'g' ? 30 : 40;
		s++;
	}
	if (end - s >= 2 && lower(s[0]) == 'i' && lower(s[1]) == 'b')
		s += 2;
	else if (s < end && lower(*s) == 'b')
		s++;
	if (s != end)
		return -EINVAL;
	if (ret || x > ((uint64_t)INT64_MAX >> shift))
		return -ERANGE;
	*out = (int64_t)(x << shift);
	return 0;
}

static int64_t ns_unit(struct tok u)
{
	if (!u.n || tok_is(u, "ns"))
		return 1;
	if (tok_is(u, "us") || (u.n == 3 && !memcmp(u.s, "\xc2\xb5", 2) && lower(u.s[2]) == 's'))
		return 1000;
	if (tok_is(u, "ms"))
		return 1000000;
	if (tok_is(u, "s"))
		return 1000000000;
	return 0;
}

/* digits[.digits] | .digits, then a unit; only whole nanoseconds. */
static int value_ns(struct tok t, int64_t *out)
{
	const char *s = t.s, *end = t.s + t.n;
	uint64_t whole = 0, frac = 0, scale = 1;
	size_t nw = 0, nf = 0, nfrac = 0;
	int rw, rf = 0;
	int64_t mul;

	rw = digits(&s, end, &whole, &nw);
	if (s < end && *s == '.') {
		const char *f = ++s;

		while (s < end && is_digit(*s))
			s++;
		nf = nfrac = (size_t)(s - f);
		while (nf && f[nf - 1] == '0') /* trailing zeros change nothing */
			nf--;
		for (size_t i = 0; i < nf && i < 19; i++) {
			frac = frac * 10 + (uint64_t)(f[i] - '0');
			scale *= 10;
		}
		rf = nf > 9 ? -EDOM : 0; /* finer than 1ns at any unit */
	}
	if (!nw && !nfrac)
		return -EINVAL;
	while (s < end && is_ws(*s))
		s++;
	mul = ns_unit((struct tok){ s, (size_t)(end - s) });
	if (!mul)
		return -EINVAL;
	if (rf || (frac * (uint64_t)mul) % scale)
		return -EDOM;
	if (rw == -ERANGE || whole > (uint64_t)INT64_MAX / (uint64_t)mul ||
	    whole * (uint64_t)mul > (uint64_t)INT64_MAX - frac * (uint64_t)mul / scale)
		return -ERANGE;
	*out = (int64_t)(whole * (uint64_t)mul + frac * (uint64_t)mul / scale);
	return 0;
}

static int value_bool(struct tok t, int64_t *out)
{
	static const char *const yes[] = { "true", "1", "yes", "on" };
	static const char *const no[] = { "false", "0", "no", "off" };

	for (unsigned i = 0; i < 4; i++) {
		if (tok_is(t, yes[i]) || tok_is(t, no[i])) {
			*out = tok_is(t, yes[i]);
			return 0;
		}
	}
	return -EINVAL;
}

/* Index of the word t in the comma-separated list `choices`, or -1. */
static int choice_index(const char *choices, struct tok t)
{
	int i = 0;

	while (choices && *choices) {
		size_t len = strcspn(choices, ",");
		struct tok c = trim(choices, choices + len);

		if (c.n == t.n && !memcmp(c.s, t.s, t.n))
			return i;
		choices += len;
		if (*choices == ',')
			choices++;
		i++;
	}
	return -1;
}

/* The value text t of parameter p, its range unchecked: 0, -EINVAL (not its
 * type), -EDOM (finer than 1ns) or -ERANGE (beyond int64). */
static int read_value(const struct al_param_desc *p, struct tok t, int64_t *out)
{
	int ret = -EINVAL, k;

	switch (p->type) {
	case AL_PARAM_INT: ret = value_int(t, out); break;
	case AL_PARAM_SIZE: ret = value_size(t, out); break;
	case AL_PARAM_NS: ret = value_ns(t, out); break;
	case AL_PARAM_BOOL: ret = value_bool(t, out); break;
	case AL_PARAM_ENUM:
		k = choice_index(p->choices, t);
		if (k >= 0) {
			*out = k;
			ret = 0;
		}
		break;
	}
	return ret;
}

int al_value_parse(const struct al_param_desc *p, const char *text, size_t len, int64_t *out)
{
	int64_t v;
	int ret;

	if (!p || !text || !out)
		return -EINVAL;
	ret = read_value(p, trim(text, text + len), &v);
	if (!ret)
		*out = v;
	return ret;
}

/* The value text t of parameter p: 0, -EINVAL (not its type) or -ERANGE. */
static int parse_value(const struct al_param_desc *p, struct tok t, int64_t *out)
{
	int ret = read_value(p, t, out);

	if (ret == -EDOM)
		return -EINVAL;
	if (!ret && (*out < p->min || *out > p->max))
		ret = -ERANGE;
	return ret;
}

/* ---- layers ---- */

static int check_parens(struct parser *p)
{
	const char *s;
	int depth = 0;

	for (s = p->text; *s; s++) {
		if (*s == '(')
			depth++;
		else if (*s == ')' && --depth < 0)
			return fail(p, AL_SPEC_SYNTAX, -EINVAL, (struct tok){ s, 1 },
				    "unbalanced ')' at offset %d", (int)(s - p->text));
	}
	if (depth)
		return fail(p, AL_SPEC_SYNTAX, -EINVAL, (struct tok){ s, 0 }, "missing ')'");
	return 0;
}

/* End of the layer that starts at s: the next '>' outside parentheses. */
static const char *layer_end(const char *s)
{
	int depth = 0;

	for (; *s && (*s != '>' || depth); s++)
		depth += *s == '(' ? 1 : *s == ')' ? -1 : 0;
	return s;
}

/* Split one layer's text into its name and the text inside its parentheses
 * (body.s == NULL when it has none). */
static int layer_shape(struct parser *p, struct tok layer, struct tok *name, struct tok *body)
{
	struct tok t = trim(layer.s, layer.s + layer.n), rest;
	size_t n = 1;

	if (!t.n)
		return fail(p, AL_SPEC_SYNTAX, -EINVAL, t,
			    "empty layer (layers are separated by '>')");
	if (!is_alpha(t.s[0]) && !is_high(t.s[0]))
		return fail(p, AL_SPEC_SYNTAX, -EINVAL, t, "bad layer name '%.*s'", (int)t.n, t.s);
	while (n < t.n && (is_alpha(t.s[n]) || is_high(t.s[n]) || is_digit(t.s[n]) ||
			   t.s[n] == '.' || t.s[n] == '-'))
		n++;
	*name = (struct tok){ t.s, n };
	*body = (struct tok){ NULL, 0 };
	rest = trim(t.s + n, t.s + t.n);
	if (!rest.n)
		return 0;
	if (rest.s[0] != '(' || rest.s[rest.n - 1] != ')')
		return fail(p, AL_SPEC_SYNTAX, -EINVAL, rest,
			    "expected '(k=v, ...)' after layer '%.*s', got '%.*s'", (int)n, t.s,
			    (int)rest.n, rest.s);
	*body = (struct tok){ rest.s + 1, rest.n - 2 };
	if (memchr(body->s, '(', body->n) || memchr(body->s, ')', body->n))
		return fail(p, AL_SPEC_SYNTAX, -EINVAL, rest, "nested parentheses in layer '%.*s'",
			    (int)n, t.s);
	return 0;
}

/* One item of a layer's body, [s, end): its key and value text. */
static int item_shape(struct parser *p, struct tok name, const char *s, const char *end,
		      struct tok *key, struct tok *val)
{
	struct tok it = trim(s, end);
	const char *q = it.s, *iend = it.s + it.n;

	if (!it.n)
		return fail(p, AL_SPEC_SYNTAX, -EINVAL, it, "empty parameter in layer '%.*s'",
			    (int)name.n, name.s);
	if (is_alpha(*q) || is_high(*q))
		for (q++; q < iend && (is_alpha(*q) || is_high(*q) || is_digit(*q) || *q == '-');
		     q++)
			;
	*key = (struct tok){ it.s, (size_t)(q - it.s) };
	while (q < iend && is_ws(*q))
		q++;
	if (key->n && q < iend && *q == '=') {
		*val = trim(q + 1, iend);
		if (val->n)
			return 0;
	}
	return fail(p, AL_SPEC_SYNTAX, -EINVAL, it,
		    "expected 'name=value', got '%.*s' in layer '%.*s'", (int)it.n, it.s,
		    (int)name.n, name.s);
}

/* Index of the parameter the key names ('-' standing for '_'), or -1. */
static int param_index(const struct al_layer_desc *d, struct tok key)
{
	for (unsigned k = 0; k < d->nparams; k++) {
		const char *pn = d->params[k].name;
		size_t i;

		if (strlen(pn) != key.n)
			continue;
		for (i = 0; i < key.n; i++)
			if (pn[i] != (key.s[i] == '-' ? '_' : key.s[i]))
				break;
		if (i == key.n)
			return (int)k;
	}
	return -1;
}

/* One item, looked up and converted into l->params. */
static int item_value(struct parser *p, struct al_layer_spec *l, struct tok key, struct tok val,
		      bool *seen)
{
	const struct al_layer_desc *d = l->desc;
	int k = param_index(d, key), ret;

	p->e->param = -1;
	if (k < 0)
		return fail(p, AL_SPEC_PARAM, -EINVAL, key, "%s has no parameter '%.*s'", d->name,
			    (int)key.n, key.s);
	p->e->param = k;
	if (seen[k])
		return fail(p, AL_SPEC_SYNTAX, -EINVAL, key,
			    "parameter '%s' given twice in layer '%s'", d->params[k].name, d->name);
	seen[k] = true;
	ret = parse_value(&d->params[k], val, &l->params[k]);
	if (ret == -ERANGE)
		return fail(p, AL_SPEC_RANGE, ret, val, "%s.%s=%.*s is out of range [%lld, %lld]",
			    d->name, d->params[k].name, (int)val.n, val.s,
			    (long long)d->params[k].min, (long long)d->params[k].max);
	if (ret)
		return fail(p, AL_SPEC_VALUE, ret, val, "%s.%s: bad value '%.*s'", d->name,
			    d->params[k].name, (int)val.n, val.s);
	return 0;
}

/* Walk the items of a body: their shape only (l == NULL), or their values. */
static int layer_items(struct parser *p, struct tok name, struct tok body, struct al_layer_spec *l)
{
	bool seen[AL_MAX_PARAMS] = { false };
	const char *s = body.s, *end, *c;
	struct tok key = { 0 }, val = { 0 };
	int ret;

	if (!body.s) /* a layer without parentheses (NULL + 0 is undefined in C) */
		return 0;
	end = body.s + body.n;
	if (!trim(body.s, end).n)
		return 0;
	for (;; s = c + 1) {
		c = memchr(s, ',', (size_t)(end - s));
		if (!c)
			c = end;
		ret = item_shape(p, name, s, c, &key, &val);
		if (!ret && l)
			ret = item_value(p, l, key, val, seen);
		if (ret || c == end)
			return ret;
	}
}

static const struct al_layer_desc *find_layer(struct tok name)
{
	const struct al_layer_desc *d;
	char buf[64];

	if (name.n >= sizeof(buf))
		return NULL;
	memcpy(buf, name.s, name.n);
	buf[name.n] = 0;
	d = al_layer_find(buf);
	for (size_t i = 0; !d && i < name.n; i++)
		if (buf[i] == '-')
			buf[i] = '_';
	return d ? d : al_layer_find(buf);
}

/* The preset named by [s, s + n) exactly, or NULL. */
static const struct al_preset *find_preset(const char *s, size_t n)
{
	const struct al_preset *pr;

	for (unsigned i = 0; (pr = al_preset_get(i)); i++)
		if (strlen(pr->name) == n && !memcmp(pr->name, s, n))
			return pr;
	return NULL;
}

const struct al_preset *al_spec_preset(const char *text)
{
	struct tok t;

	if (!text)
		return NULL;
	t = trim(text, text + strlen(text));
	return find_preset(t.s, t.n);
}

/* A name that is no layer; a preset's name is told as one, since the fix is
 * to spell out its layers. */
static int unknown_layer(struct parser *p, struct tok name)
{
	const struct al_preset *pr = find_preset(name.s, name.n);

	if (pr)
		return fail(p, AL_SPEC_LAYER, -EINVAL, name,
			    "'%s' is a preset (%s), not a layer: a preset stands alone", pr->name,
			    pr->spec);
	return fail(p, AL_SPEC_LAYER, -EINVAL, name, "unknown layer '%.*s'", (int)name.n, name.s);
}

/* One layer's text into l: shape, name, then values. */
static int parse_layer(struct parser *p, struct tok text, struct al_layer_spec *l)
{
	struct tok name, body;
	int ret = layer_shape(p, text, &name, &body);

	if (!ret)
		ret = layer_items(p, name, body, NULL);
	if (ret)
		return ret;
	l->desc = find_layer(name);
	if (!l->desc)
		return unknown_layer(p, name);
	p->e->desc = l->desc;
	al_params_default(l->desc->params, l->desc->nparams, l->params);
	return layer_items(p, name, body, l);
}

int al_spec_parse_report(const char *text, struct al_stack_spec *out, struct al_spec_error *e)
{
	const struct al_preset *preset = al_spec_preset(text);
	struct parser p = { preset ? preset->spec : text ? text : "", e };
	struct al_layer_spec scratch;
	const char *s = p.text, *end;
	unsigned n = 0;
	int ret;

	memset(out, 0, sizeof(*out));
	memset(e, 0, sizeof(*e));
	e->layer = e->param = -1;
	ret = check_parens(&p);
	for (; !ret; s = end + 1, n++) {
		end = layer_end(s);
		e->layer = (int)n;
		e->param = -1;
		e->desc = NULL;
		ret = parse_layer(&p, (struct tok){ s, (size_t)(end - s) },
				  n < AL_MAX_LAYERS ? &out->layer[n] : &scratch);
		if (!*end)
			break;
	}
	if (ret)
		return ret;
	e->layer = e->param = -1;
	e->desc = NULL;
	if (++n > AL_MAX_LAYERS) {
		e->nlayers = n;
		return fail(&p, AL_SPEC_TOO_MANY, -EINVAL, (struct tok){ p.text, strlen(p.text) },
			    "%u layers; at most %d", n, AL_MAX_LAYERS);
	}
	out->n = n;
	return 0;
}

int al_spec_parse(const char *text, struct al_stack_spec *out, char *err, size_t errlen)
{
	struct al_spec_error e;
	int ret = al_spec_parse_report(text, out, &e);
	const char *in_layer;

	if (ret && err && errlen) {
		/* "... in layer 'x' of policy '...'", "... in policy '...'" */
		in_layer = strstr(e.msg, " in layer '");
		snprintf(err, errlen, "%s %s policy '%s'", e.msg,
			 in_layer && !strchr(in_layer + 11, ' ') ? "of" : "in", text ? text : "");
	}
	return ret;
}
