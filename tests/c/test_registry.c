/* SPDX-License-Identifier: MIT */
/*
 * The registry finds the built-in layers and workloads without any
 * constructor having run: a constructor of the highest priority (it runs
 * before the library's own, as another library's constructor may run before
 * the preload shim's) looks them up and builds a stack; each is listed
 * once; plugins still register at run time, once.
 */
#include <errno.h>

#include "test.h"

static unsigned early_layers, early_workloads;
static int early_buddy, early_slab, early_stack;

__attribute__((constructor(101))) static void before_every_other_constructor(void)
{
	struct al_stack_spec s;
	struct al_allocator *a = NULL;
	char err[128];

	early_layers = al_layer_count();
	early_workloads = al_workload_count();
	early_buddy = al_layer_find("buddy") != NULL;
	early_slab = al_layer_find("slab") != NULL;
	if (!al_spec_parse("percpu > buddy", &s, err, sizeof(err)) &&
	    !al_stack_create(&s, 2, &a, err, sizeof(err))) {
		early_stack = 1;
		al_stack_destroy(a);
	}
}

TEST(test_builtins_found_before_constructors)
{
	CHECK(early_buddy && early_slab && early_stack);
	CHECK(early_layers >= 14);
	CHECK_EQ(early_layers, al_layer_count()); /* constructors added nothing new */
	CHECK_EQ(early_workloads, al_workload_count());
	CHECK(al_workload_find("malloc-free") != NULL);
}

TEST(test_builtins_listed_once)
{
	unsigned i, j, n = al_layer_count();

	for (i = 0; i < n; i++)
		for (j = i + 1; j < n; j++)
			CHECK(strcmp(al_layer_get(i)->name, al_layer_get(j)->name));
	CHECK_EQ(al_layer_register(al_layer_find("buddy")), -EEXIST);
}

static int plugin_create(const struct al_layer_desc *d, const int64_t *params,
			 struct al_allocator *below, unsigned ncpu, struct al_allocator **out)
{
	(void)d, (void)params, (void)below, (void)ncpu, (void)out;
	return -EOPNOTSUPP;
}

static const struct al_layer_desc plugin_desc = {
	.name = "test-late-plugin",
	AL_LAYER_DESC_INIT,
	.doc = "registered at run time",
	.create = plugin_create,
};

TEST(test_plugins_register_at_run_time)
{
	unsigned n = al_layer_count();

	CHECK(!al_layer_find("test-late-plugin"));
	CHECK_EQ(al_layer_register(&plugin_desc), 0);
	CHECK_EQ(al_layer_count(), n + 1);
	CHECK(al_layer_find("test-late-plugin") == &plugin_desc);
	CHECK_EQ(al_layer_register(&plugin_desc), -EEXIST);
}

int main(void)
{
	RUN(test_builtins_found_before_constructors);
	RUN(test_builtins_listed_once);
	RUN(test_plugins_register_at_run_time);
	return TEST_SUMMARY();
}
