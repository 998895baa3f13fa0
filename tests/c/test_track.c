/* SPDX-License-Identifier: MIT */
/*
 * ASan sees a use after free of an object that sits in any cache.
 *
 * Under AddressSanitizer (make test SAN=asan) each cache is made to hold a
 * freed object; the test checks that the object is poisoned there, then
 * forks a child that writes to it and expects ASan's use-after-poison report
 * (and a failing exit), and finally takes the object out again and checks
 * that all of it is usable (no report in the parent). The parent is
 * single-threaded, so forking is safe. Without ASan there is nothing to
 * observe and the tests are skipped.
 */
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t_spec.h"

#ifdef T_ASAN

static void write_byte(void *p)
{
	*(volatile char *)p = 0x5a;
}

/* A child writes one byte at p; true when ASan reported it and the child
 * failed. */
static bool uaf_caught(void *p)
{
	char msg[4096];
	int status = t_run_child(write_byte, p, msg, sizeof(msg));

	if (status == -1)
		return false;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		fprintf(stderr, "write to %p after free was not caught\n", p);
		return false;
	}
	if (!strstr(msg, "AddressSanitizer: use-after-poison")) {
		fprintf(stderr, "child status %#x, stderr: %.300s\n", status, msg);
		return false;
	}
	return true;
}

/* Every byte of [p, p + n) is poisoned / none is. */
static bool all_poisoned(const void *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!__asan_address_is_poisoned((const char *)p + i))
			return false;
	return true;
}

static bool none_poisoned(const void *p, size_t n)
{
	return __asan_region_is_poisoned((void *)(uintptr_t)p, n) == NULL;
}

/* One object through a front cache whose free keeps it (LIFO): poisoned over
 * [off, off + n) while cached, caught when written, whole again when reused. */
static void cached_object(const char *spec, size_t size, size_t off, size_t n)
{
	struct al_allocator *a = t_spec(spec, 1);
	struct al_ctx c;
	char *p, *q;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, size, 0);
	CHECK(p != NULL);
	if (!p)
		goto out;
	memset(p, 1, size);
	CHECK_EQ(al_free(a, &c, p), 0);
	CHECK(all_poisoned(p + off, n));
	CHECK(uaf_caught(p + off));
	CHECK(uaf_caught(p + off + n - 1));
	q = al_alloc(a, &c, size, 0);
	CHECK(q == p); /* the cache gave it back */
	if (q) {
		CHECK(none_poisoned(q, size));
		memset(q, 2, size);
		CHECK_EQ(al_free(a, &c, q), 0);
	}
out:
	t_teardown(a);
}

TEST(test_percpu)
{
	cached_object("percpu > buddy", 64, 0, 64);
}

TEST(test_magazine)
{
	cached_object("magazine > buddy", 64, 0, 64);
}

TEST(test_sheaves)
{
	cached_object("sheaves > slab(form=sheaves)", 64, 0, 64);
}

/* bpf_ma hands out obj + 8: the whole user object is poisoned. */
TEST(test_bpf_ma)
{
	cached_object("bpf_ma > slab", 56, 0, 56);
}

/* slab keeps the free-list link (the first word) readable: bytes 8.. */
TEST(test_slab)
{
	cached_object("slab", 64, 8, 56);
	cached_object("slab(form=sheaves)", 64, 8, 56);
}

/* The buddy's free blocks, for comparison: its list header sits at bytes
 * 8..15 of a free block, the rest is poisoned. */
TEST(test_buddy)
{
	cached_object("buddy", 64, 16, 48);
}

/* transfer parks whole batches a front spills (free_bulk of one order). */
TEST(test_transfer)
{
	struct al_allocator *a = t_spec("transfer > buddy", 1);
	void *v[8], *w[8];
	struct al_ctx c;
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	CHECK_EQ(al_alloc_bulk(a, &c, 64, 8, v, 0), 8);
	CHECK_EQ(al_free_bulk(a, &c, v, 8), 8);
	for (i = 0; i < 8; i++)
		CHECK(all_poisoned(v[i], 64));
	CHECK(uaf_caught(v[3]));
	CHECK_EQ(al_alloc_bulk(a, &c, 64, 8, w, 0), 8); /* the parked batch */
	for (i = 0; i < 8; i++) {
		CHECK(w[i] == v[i]);
		CHECK(none_poisoned(w[i], 64));
		memset(w[i], 3, 64);
	}
	CHECK_EQ(al_free_bulk(a, &c, w, 8), 8);
	t_teardown(a);
}

/* A percpu spill hands objects down to transfer, which parks them: still
 * poisoned on the way (unpoisoned by one, poisoned by the other). */
TEST(test_percpu_over_transfer)
{
	struct al_allocator *a = t_spec("percpu(capacity=4, batch=4) > transfer > buddy", 1);
	struct al_ctx c;
	void *v[8];
	unsigned i;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 8; i++)
		v[i] = al_alloc(a, &c, 64, 0);
	for (i = 0; i < 8; i++)
		CHECK_EQ(al_free(a, &c, v[i]), 0);
	for (i = 0; i < 8; i++)
		CHECK(all_poisoned(v[i], 64));
	CHECK(uaf_caught(v[0])); /* spilled: parked in transfer */
	CHECK(uaf_caught(v[7])); /* in the CPU's stack */
	t_teardown(a);
}

/* nolock: an NMI's kfree_nolock that meets the held per-CPU lock is deferred;
 * while it waits on the deferred list its body is poisoned. */
static struct al_allocator *nested_a;
static char *nested_obj;
static int nested_ret, nested_poisoned, nested_caught;

static void nested_free_nmi(struct al_ctx *c, void *arg)
{
	struct al_ctx nmi;

	(void)arg;
	al_ctx_nested(&nmi, c, AL_CTX_NMI);
	nested_ret = al_free(nested_a, &nmi, nested_obj);
	nested_poisoned = all_poisoned(nested_obj + 8, 56);
	nested_caught = uaf_caught(nested_obj + 8);
}

TEST(test_nolock_deferred)
{
	struct al_allocator *a = t_spec("nolock > sheaves > slab(form=sheaves)", 1);
	struct al_ctx c;
	void *p;

	CHECK(a != NULL);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 64, 0);
	nested_obj = al_alloc(a, &c, 64, 0);
	nested_a = a;
	t_inject_arm("sheaves.locked", nested_free_nmi);
	CHECK_EQ(al_free(a, &c, p), 0);
	t_inject_off();
	CHECK_EQ(t_inject_fired, 1);
	CHECK_EQ(nested_ret, 0);
	CHECK(nested_poisoned);
	CHECK(nested_caught);
	t_teardown(a);
}
#endif

int main(void)
{
#ifdef T_ASAN
	RUN(test_percpu);
	RUN(test_magazine);
	RUN(test_transfer);
	RUN(test_percpu_over_transfer);
	RUN(test_sheaves);
	RUN(test_bpf_ma);
	RUN(test_slab);
	RUN(test_buddy);
	RUN(test_nolock_deferred);
#else
	printf("skipped: cache poisoning is observable only in an ASan build (SAN=asan)\n");
#endif
	return TEST_SUMMARY();
}
