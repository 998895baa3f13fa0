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

int main(void)
{
	RUN(test_value_forms);
	RUN(test_refusals_are_facts);
	RUN(test_stack_check_names_both_layers);
	return TEST_SUMMARY();
}
