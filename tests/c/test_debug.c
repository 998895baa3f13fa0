/* SPDX-License-Identifier: MIT */
/*
 * The debug tier is on in the test builds, and its assertions fire.
 *
 * Each misuse runs in a forked child whose stderr is a pipe: the child must
 * die of SIGABRT and have printed "file:line: assertion failed: expr". The
 * parent stays single-threaded, so fork is safe under every sanitizer. A
 * build where AL_DEBUG is silently 0 fails here (the level check, and no
 * child aborts).
 */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

static bool aborted_with(int status, const char *msg, const char *want)
{
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT) {
		fprintf(stderr, "child status %#x, stderr: %s\n", status, msg);
		return false;
	}
	if (!strstr(msg, "assertion failed: ") || !strstr(msg, want)) {
		fprintf(stderr, "child stderr lacks \"%s\": %s\n", want, msg);
		return false;
	}
	return true;
}

TEST(test_level)
{
	CHECK(al_debug_level() >= 2); /* the library under test is an assert build */
	CHECK_EQ(al_debug_level(), AL_DEBUG);
}

struct lock_case {
	struct al_lock lock;
	unsigned take_cpu, take_level; /* who takes it; take_cpu ~0u: nobody */
	unsigned check_cpu, check_level;
};

static void lock_child(void *arg)
{
	struct lock_case *k = arg;
	struct al_ctx c;

	if (k->take_cpu != ~0u) {
		al_ctx_init(&c, k->take_cpu);
		c.level = k->take_level;
		if (al_lock_acquire(&k->lock, &c))
			_exit(3);
	}
	al_ctx_init(&c, k->check_cpu);
	c.level = k->check_level;
	al_lock_assert_held(&k->lock, &c);
}

static int lock_case_run(unsigned take_cpu, unsigned take_level, unsigned check_cpu,
			 unsigned check_level, char *msg, size_t len)
{
	static struct lock_case k;

	al_lock_init(&k.lock, 1000000, false);
	k.take_cpu = take_cpu;
	k.take_level = take_level;
	k.check_cpu = check_cpu;
	k.check_level = check_level;
	return t_run_child(lock_child, &k, msg, len);
}

/* The lock rule: held by this CPU at this level, or the assertion aborts. */
TEST(test_lock_assert_held)
{
	char msg[1024];
	int st;

	st = lock_case_run(~0u, 0, 0, AL_CTX_TASK, msg, sizeof(msg)); /* free */
	CHECK(aborted_with(st, msg, "al_lock_held_by"));
	st = lock_case_run(0, AL_CTX_TASK, 1, AL_CTX_TASK, msg, sizeof(msg)); /* other CPU */
	CHECK(aborted_with(st, msg, "al_lock_held_by"));
	st = lock_case_run(0, AL_CTX_TASK, 0, AL_CTX_NMI, msg, sizeof(msg)); /* other level */
	CHECK(aborted_with(st, msg, "al_lock_held_by"));
	st = lock_case_run(2, AL_CTX_TASK, 2, AL_CTX_TASK, msg, sizeof(msg)); /* the holder */
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_EQ(msg[0], 0);
}

static void assert_false_child(void *arg)
{
	int *zero = arg;

	al_assert(*zero == 1);
}

static void expensive_false_child(void *arg)
{
	int *zero = arg;

	al_assert_expensive(*zero == 2);
}

/* The message is file:line: assertion failed: the expression, as assert(3). */
TEST(test_assert_message)
{
	char msg[1024];
	int zero = 0, st;

	st = t_run_child(assert_false_child, &zero, msg, sizeof(msg));
	CHECK(aborted_with(st, msg, "*zero == 1"));
	CHECK(strstr(msg, "alloclab: tests/c/test_debug.c:") == msg);
	st = t_run_child(expensive_false_child, &zero, msg, sizeof(msg));
	CHECK(aborted_with(st, msg, "*zero == 2"));
}

/*
 * An invariant inside the library: a free buddy block whose list link points
 * at itself (memory corruption: a write after free) is caught when the
 * allocator unlinks it, not followed into a cycle.
 */
static void buddy_corrupt_child(void *arg)
{
	struct al_allocator *a = arg;
	struct al_ctx c;
	uint8_t *x, *y;
	uint32_t *link, idx;

	al_ctx_init(&c, 0);
	x = al_alloc(a, &c, 16, 0);
	y = al_alloc(a, &c, 16, 0);
	if (!x || !y || al_free(a, &c, x))
		_exit(3);
	/* bytes 8..15 of a free block: its prev and next indices in the chunk */
	link = (uint32_t *)(x + 8);
	idx = (uint32_t)(((uintptr_t)x & ((1u << 20) - 1)) >> 4); /* default 1 MiB chunks */
#ifdef T_ASAN
	ASAN_UNPOISON_MEMORY_REGION(link, 8);
#endif
	link[1] = idx; /* next = itself */
	(void)al_alloc(a, &c, 16, 0);
}

TEST(test_buddy_invariant)
{
	const char *names[] = { "buddy" };
	struct al_allocator *a = t_make(names, 1, NULL, 1);
	char msg[1024];
	int st;

	CHECK(a != NULL);
	if (!a)
		return;
	st = t_run_child(buddy_corrupt_child, a, msg, sizeof(msg));
	CHECK(aborted_with(st, msg, "buddy.c:"));
	al_stack_destroy(a);
}

int main(void)
{
	RUN(test_level);
	RUN(test_lock_assert_held);
	RUN(test_assert_message);
	RUN(test_buddy_invariant);
	return TEST_SUMMARY();
}
