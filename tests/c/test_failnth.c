/* SPDX-License-Identifier: MIT */
/*
 * The failnth fault-injection layer: exact counts of calls and
 * injected failures, the errors it returns, and objects untouched by a
 * failed free (the caller keeps them and frees them later).
 */
#include <errno.h>

#include "test.h"

enum { P_OP, P_NTH, P_EVERY, P_ERR };
enum { OP_ALLOC, OP_ALLOC_BULK, OP_FREE, OP_FREE_BULK, OP_ANY };

static struct al_allocator *mk(int op, int nth, int every, int err)
{
	static const char *const names[] = { "failnth", "buddy" };
	int64_t p[2][AL_MAX_PARAMS];

	memset(p, 0, sizeof(p));
	al_params_default(al_layer_find("failnth")->params, al_layer_find("failnth")->nparams,
			  p[0]);
	al_params_default(al_layer_find("buddy")->params, al_layer_find("buddy")->nparams, p[1]);
	p[0][P_OP] = op;
	p[0][P_NTH] = nth;
	p[0][P_EVERY] = every;
	p[0][P_ERR] = err;
	return t_make(names, 2, (const int64_t(*)[AL_MAX_PARAMS])p, 1);
}

TEST(test_nth_alloc_once)
{
	struct al_allocator *a = mk(OP_ALLOC, 3, 0, 0);
	struct al_ctx c;
	void *p[5];
	int i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 5; i++) {
		c.err = 0;
		p[i] = al_alloc(a, &c, 64, 0);
		if (i == 2) {
			CHECK(p[i] == NULL);
			CHECK_EQ(c.err, -ENOMEM);
		} else {
			CHECK(p[i] != NULL);
		}
	}
	CHECK_EQ(t_stat(a, 0, "calls_alloc"), 5);
	CHECK_EQ(t_stat(a, 0, "failed_alloc"), 1);
	CHECK_EQ(t_stat(a, 1, "allocs"), 4);
	for (i = 0; i < 5; i++)
		CHECK_EQ(al_free(a, &c, p[i]), 0);
	CHECK_EQ(t_stat(a, 1, "frees"), 4);
	al_stack_destroy(a);
}

TEST(test_every_nth_free)
{
	struct al_allocator *a = mk(OP_FREE, 2, 1, 0);
	struct al_ctx c;
	void *p[4];
	int i, ret, failed = 0;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 4; i++)
		p[i] = al_alloc(a, &c, 64, 0);
	for (i = 0; i < 4; i++) {
		ret = al_free(a, &c, p[i]);
		if (ret == -ETIMEDOUT) { /* untouched: free it again */
			failed++;
			CHECK_EQ(al_free(a, &c, p[i]), 0);
		} else {
			CHECK_EQ(ret, 0);
		}
	}
	/* calls 1..: free p0 ok(1), p1 fails(2), p1 ok(3), p2 fails(4), p2 ok(5), p3 fails(6),
	 * ok(7) */
	CHECK_EQ(failed, 3);
	CHECK_EQ(t_stat(a, 0, "calls_free"), 7);
	CHECK_EQ(t_stat(a, 0, "failed_free"), 3);
	CHECK_EQ(t_stat(a, 1, "frees"), 4);
	CHECK_EQ(t_stat(a, 1, "double_frees"), 0);
	al_stack_destroy(a);
}

TEST(test_bulk_and_err)
{
	struct al_allocator *a = mk(OP_ANY, 1, 1, 1 /* ebusy */);
	struct al_ctx c;
	void *p[4] = { 0 };

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	CHECK_EQ(al_alloc_bulk(a, &c, 64, 4, p, 0), 0);
	CHECK_EQ(c.err, -EBUSY);
	CHECK(al_alloc(a, &c, 64, 0) == NULL);
	CHECK_EQ(al_free_bulk(a, &c, p, 4), -ETIMEDOUT);
	CHECK_EQ(t_stat(a, 0, "failed_alloc_bulk"), 1);
	CHECK_EQ(t_stat(a, 0, "failed_alloc"), 1);
	CHECK_EQ(t_stat(a, 0, "failed_free_bulk"), 1);
	CHECK_EQ(t_stat(a, 1, "allocs"), 0);
	al_stack_destroy(a);
}

int main(void)
{
	RUN(test_nth_alloc_once);
	RUN(test_every_nth_free);
	RUN(test_bulk_and_err);
	return TEST_SUMMARY();
}
