/* SPDX-License-Identifier: MIT */
/*
 * Policy spec strings in C: the one parser (al_spec_parse_report) reads every
 * value form the Python side prints or accepts, and reports a refusal as
 * facts (fault, layer, parameter, offending text) that a caller words
 * itself; al_stack_check names the layers of a shape that cannot stack.
 */
#include <errno.h>

#include "test.h"

static int64_t param_of(const char *text, const char *name)
{
	struct al_stack_spec s;
	struct al_spec_error e;
	unsigned k;

	CHECK_EQ(al_spec_parse_report(text, &s, &e), 0);
	for (k = 0; k < s.layer[0].desc->nparams; k++)
		if (!strcmp(s.layer[0].desc->params[k].name, name))
			return s.layer[0].params[k];
	CHECK(0);
	return -1;
}

TEST(test_value_forms)
{
	CHECK_EQ(param_of("buddy(arena_limit=4096KiB)", "arena_limit"), 4ll << 20);
	CHECK_EQ(param_of("buddy(arena-limit = 2 g)", "arena_limit"), 2ll << 30);
	CHECK_EQ(param_of("buddy(lock_budget=1.5ms)", "lock_budget"), 1500000);
	CHECK_EQ(param_of("buddy(lock_budget=.5us)", "lock_budget"), 500);
	CHECK_EQ(param_of("buddy(lock_budget=2\xc2\xb5s)", "lock_budget"), 2000);
	CHECK_EQ(param_of("buddy(lock_budget=42)", "lock_budget"), 42);
	CHECK_EQ(param_of("buddy(fill=yes)", "fill"), 1);
	CHECK_EQ(param_of("buddy(fill=OFF)", "fill"), 0);
	CHECK_EQ(param_of("transfer(full=single) > buddy", "full"), 1);
}

static struct al_spec_error refusal(const char *text, int ret)
{
	struct al_stack_spec s;
	struct al_spec_error e;

	CHECK_EQ(al_spec_parse_report(text, &s, &e), ret);
	CHECK(e.msg[0] != 0);
	return e;
}

static bool token_is(const char *text, const struct al_spec_error *e, const char *want)
{
	return (size_t)e->toklen == strlen(want) && !strncmp(text + e->tok, want, strlen(want));
}

TEST(test_refusals_are_facts)
{
	const char *t;
	struct al_spec_error e;

	e = refusal(t = "buddy > nosuch", -EINVAL);
	CHECK(e.fault == AL_SPEC_LAYER && e.layer == 1 && token_is(t, &e, "nosuch"));
	e = refusal(t = "buddy(bogus=1)", -EINVAL);
	CHECK(e.fault == AL_SPEC_PARAM && e.layer == 0 && e.param == -1 &&
	      token_is(t, &e, "bogus"));
	e = refusal(t = "buddy(lock_budget=0.5ns)", -EINVAL);
	CHECK(e.fault == AL_SPEC_VALUE && e.param >= 0 && token_is(t, &e, "0.5ns"));
	e = refusal(t = "buddy(arena_limit=1T)", -ERANGE);
	CHECK(e.fault == AL_SPEC_RANGE && token_is(t, &e, "1T"));
	e = refusal("transfer(full=1) > buddy", -EINVAL); /* an enum by its name only */
	CHECK(e.fault == AL_SPEC_VALUE && e.layer == 0);
	e = refusal("buddy(fill=true, fill=false)", -EINVAL);
	CHECK(e.fault == AL_SPEC_SYNTAX);
	e = refusal("buddy)", -EINVAL);
	CHECK(e.fault == AL_SPEC_SYNTAX && e.offset == 5);
	e = refusal("9buddy", -EINVAL);
	CHECK(e.fault == AL_SPEC_SYNTAX);
	e = refusal("", -EINVAL);
	CHECK(e.fault == AL_SPEC_SYNTAX);
	e = refusal("percpu>percpu>percpu>percpu>percpu>percpu>percpu>percpu>buddy", -EINVAL);
	CHECK(e.fault == AL_SPEC_TOO_MANY && e.nlayers == 9);
}

TEST(test_stack_check_names_both_layers)
{
	struct al_stack_spec s;
	struct al_spec_error e;
	char err[200];

	CHECK_EQ(al_spec_parse("percpu > null", &s, err, sizeof(err)), 0);
	CHECK_EQ(al_stack_check(&s, &e), -EINVAL);
	CHECK(e.fault == AL_SPEC_DISTINCT && e.layer == 0 && e.below == 1);
	CHECK_EQ(al_spec_parse("buddy > slab", &s, err, sizeof(err)), 0);
	CHECK_EQ(al_stack_check(&s, &e), -EINVAL);
	CHECK(e.fault == AL_SPEC_BOTTOM && e.layer == 0 && e.below == 1);
	CHECK_EQ(al_spec_parse("percpu > buddy", &s, err, sizeof(err)), 0);
	CHECK_EQ(al_stack_check(&s, &e), 0);
}

static int spec_of(const char *text, struct al_stack_spec *s)
{
	struct al_spec_error e;

	return al_spec_parse_report(text, s, &e);
}

/* Two specs read as the same stack: layers and every parameter. */
static bool same_stack(const struct al_stack_spec *a, const struct al_stack_spec *b)
{
	if (a->n != b->n)
		return false;
	for (unsigned i = 0; i < a->n; i++)
		if (a->layer[i].desc != b->layer[i].desc ||
		    memcmp(a->layer[i].params, b->layer[i].params,
			   a->layer[i].desc->nparams * sizeof(int64_t)))
			return false;
	return true;
}

TEST(test_presets_are_specs)
{
	const struct al_preset *pr;
	struct al_stack_spec a, b;
	unsigned i, peers = 0;

	CHECK(al_preset_count() > 0);
	for (i = 0; (pr = al_preset_get(i)); i++) {
		CHECK(pr->name && pr->spec && pr->doc && pr->doc[0] && !strchr(pr->doc, '\n'));
		CHECK(al_preset_find(pr->name) == pr);
		/* the name reads as its spec, and the spec as a stack that would build */
		CHECK_EQ(spec_of(pr->name, &a), 0);
		CHECK_EQ(spec_of(pr->spec, &b), 0);
		CHECK(same_stack(&a, &b));
		peers += pr->where == AL_PRESET_PEER;
		CHECK(pr->where == AL_PRESET_PEER ||
		      (pr->where == AL_PRESET_IN_PROCESS &&
		       strcmp(b.layer[b.n - 1].desc->name, "system")));
	}
	CHECK_EQ(i, al_preset_count());
	CHECK(al_preset_get(i) == NULL && al_preset_find("nosuch") == NULL);
	CHECK_EQ(peers, 4);
	CHECK(al_preset_find("glibc")->where == AL_PRESET_PEER);

	CHECK_EQ(spec_of(" \tlibarena-spill\n", &a), 0);
	CHECK_EQ(spec_of("percpu > buddy", &b), 0);
	CHECK(same_stack(&a, &b));
	CHECK(al_spec_preset(" libarena-spill ") == al_preset_find("libarena-spill"));
	CHECK(al_spec_preset("libarena") == NULL && al_spec_preset(NULL) == NULL);
	/* a preset of one layer is that layer, in a stack too */
	CHECK_EQ(spec_of("percpu > buddy", &a), 0);
}

TEST(test_preset_stands_alone)
{
	static const char *const texts[] = { "percpu > libarena-spill", "libarena-spill > buddy",
					     "libarena-spill(capacity=8)", "glibc > buddy" };
	struct al_spec_error e;

	for (unsigned i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		const char *t = texts[i];
		const char *name = strstr(t, "libarena-spill") ? "libarena-spill" : "glibc";

		e = refusal(t, -EINVAL);
		CHECK(e.fault == AL_SPEC_LAYER && token_is(t, &e, name));
		CHECK(strstr(e.msg, "is a preset (") && strstr(e.msg, "stands alone"));
	}
	e = refusal("nosuch", -EINVAL);
	CHECK(e.fault == AL_SPEC_LAYER && !strcmp(e.msg, "unknown layer 'nosuch'"));
}

static int value_of(const char *layer, const char *param, const char *text, int64_t *out)
{
	const struct al_layer_desc *d = al_layer_find(layer);

	for (unsigned k = 0; d && k < d->nparams; k++)
		if (!strcmp(d->params[k].name, param))
			return al_value_parse(&d->params[k], text, strlen(text), out);
	CHECK(0);
	return -1;
}

TEST(test_value_parse_is_the_spec_grammar)
{
	int64_t v = -7;

	CHECK_EQ(value_of("buddy", "arena_limit", " 4 KiB ", &v), 0);
	CHECK_EQ(v, 4096);
	CHECK_EQ(value_of("buddy", "lock_budget", "1.5ms", &v), 0);
	CHECK_EQ(v, 1500000);
	CHECK_EQ(value_of("buddy", "fill", "On", &v), 0);
	CHECK_EQ(v, 1);
	CHECK_EQ(value_of("transfer", "full", "single", &v), 0);
	CHECK_EQ(v, 1);
	v = -7;
	CHECK_EQ(value_of("buddy", "arena_limit", "4X", &v), -EINVAL);
	CHECK_EQ(value_of("buddy", "arena_limit", "\xd9\xa4", &v), -EINVAL); /* Arabic-Indic 4 */
	CHECK_EQ(value_of("buddy", "lock_budget", "1.5ns", &v), -EDOM);
	CHECK_EQ(value_of("buddy", "lock_budget", "0.0000000001s", &v), -EDOM);
	CHECK_EQ(value_of("buddy", "lock_budget", "1.5xs", &v), -EINVAL);
	CHECK_EQ(value_of("buddy", "arena_limit", "99999999999999999999", &v), -ERANGE);
	CHECK_EQ(value_of("buddy", "arena_limit", "9999999999G", &v), -ERANGE);
	CHECK_EQ(value_of("transfer", "full", "Single", &v), -EINVAL);
	CHECK_EQ(v, -7); /* a refusal leaves *out alone */
	/* the range is the caller's: the value is read, not checked */
	CHECK_EQ(value_of("buddy", "arena_limit", "0", &v), 0);
	CHECK_EQ(v, 0);
	/* the spec grammar refuses the same forms */
	refusal("buddy(lock_budget=1.5ns)", -EINVAL);
}

TEST(test_feature_names_are_the_enum)
{
	unsigned mask, seen = 0, i;
	const char *name;

	for (i = 0; (name = al_feature_name(i, &mask)); i++) {
		CHECK(mask && !(mask & (mask - 1)) && !(seen & mask));
		seen |= mask;
	}
	CHECK(al_feature_name(i, NULL) == NULL);
	CHECK(!strcmp(al_feature_name(0, &mask), "bulk") && mask == AL_F_BULK);
	for (i = 0; (name = al_feature_name(i, &mask)); i++)
		if (!strcmp(name, "passes_size"))
			CHECK_EQ(mask, AL_F_PASSES_SIZE);
	CHECK(seen & AL_F_OWNS_BELOW);
}

int main(void)
{
	RUN(test_value_forms);
	RUN(test_refusals_are_facts);
	RUN(test_stack_check_names_both_layers);
	RUN(test_presets_are_specs);
	RUN(test_preset_stands_alone);
	RUN(test_value_parse_is_the_spec_grammar);
	RUN(test_feature_names_are_the_enum);
	return TEST_SUMMARY();
}
