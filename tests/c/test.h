/* SPDX-License-Identifier: MIT */
/*
 * A tiny C test harness: CHECK() records a failure and continues, TEST()
 * declares a test, RUN() runs it. main() ends with TEST_SUMMARY(), which
 * prints "N passed, N failed" and returns the exit code.
 */
#ifndef ALLOCLAB_TEST_H
#define ALLOCLAB_TEST_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/wait.h>
#include <unistd.h>

#include "alloclab/alloclab.h"

/* T_ASAN: built with AddressSanitizer (gcc's macro, or clang's feature). */
#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#endif
#endif
#ifdef T_ASAN
#include <sanitizer/asan_interface.h>
#endif

/* Run fn(arg) in a forked child; its stderr (up to len - 1 bytes) into msg.
 * Returns the child's wait status, or -1 when no pipe could be made. For
 * tests that expect the child to abort (an assertion) or be stopped by a
 * sanitizer (a use after free). */
static inline int t_run_child(void (*fn)(void *), void *arg, char *msg, size_t len)
{
	int fds[2], status = 0;
	size_t n = 0;
	ssize_t r;
	pid_t pid;

	msg[0] = 0;
	if (pipe(fds))
		return -1;
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], 2);
		close(fds[0]);
		fn(arg);
		_exit(0);
	}
	close(fds[1]);
	while (n < len - 1 && (r = read(fds[0], msg + n, len - 1 - n)) > 0)
		n += (size_t)r;
	msg[n] = 0;
	close(fds[0]);
	waitpid(pid, &status, 0);
	return status;
}

static int t_failed_checks;
static int t_passed, t_failed;

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
			t_failed_checks++;                                                       \
		}                                                                                \
	} while (0)

#define CHECK_EQ(a, b)                                                                      \
	do {                                                                                \
		long long _a = (long long)(a), _b = (long long)(b);                         \
		if (_a != _b) {                                                             \
			fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %lld, %s == %lld\n", \
				__FILE__, __LINE__, #a, _a, #b, _b);                        \
			t_failed_checks++;                                                  \
		}                                                                           \
	} while (0)

#define TEST(name) static void name(void)

#define RUN(name)                                   \
	do {                                        \
		int _before = t_failed_checks;      \
		name();                             \
		if (t_failed_checks == _before) {   \
			t_passed++;                 \
			printf("ok   %s\n", #name); \
		} else {                            \
			t_failed++;                 \
			printf("FAIL %s\n", #name); \
		}                                   \
		fflush(stdout);                     \
	} while (0)

#define TEST_SUMMARY() (printf("%d passed, %d failed\n", t_passed, t_failed), t_failed ? 1 : 0)

/* Look up a registered layer and build a one-layer (or stacked) allocator. */
static inline struct al_allocator *t_make(const char *const *names, unsigned n,
					  const int64_t (*params)[AL_MAX_PARAMS], unsigned ncpu)
{
	struct al_stack_spec s;
	struct al_allocator *a = NULL;
	char err[256];
	unsigned i;

	memset(&s, 0, sizeof(s));
	s.n = n;
	for (i = 0; i < n; i++) {
		s.layer[i].desc = al_layer_find(names[i]);
		if (!s.layer[i].desc) {
			fprintf(stderr, "no layer %s\n", names[i]);
			return NULL;
		}
		if (params)
			memcpy(s.layer[i].params, params[i], sizeof(s.layer[i].params));
		else
			al_params_default(s.layer[i].desc->params, s.layer[i].desc->nparams,
					  s.layer[i].params);
	}
	if (al_stack_create(&s, ncpu, &a, err, sizeof(err))) {
		fprintf(stderr, "al_stack_create: %s\n", err);
		return NULL;
	}
	return a;
}

/*
 * Test bottom layers that hand out one 4096-byte block per CPU (the same
 * block every time: only for workloads that free before they allocate
 * again). A layer's struct starts with struct t_blocks; AL_LAYER with
 * t_blocks_init / t_blocks_fini, t_blocks_free and t_blocks_stats makes it.
 */
#define T_BLOCK 4096

struct t_blocks {
	struct al_allocator base; /* must be first */
	char *blocks;		  /* ncpu blocks */
	size_t len;		  /* their mapping's length */
};

static inline int t_blocks_init(struct al_allocator *a, const int64_t *params)
{
	struct t_blocks *t = (struct t_blocks *)a;

	(void)params;
	if (a->below)
		return -EINVAL; /* a bottom layer */
	t->len = (size_t)a->ncpu * T_BLOCK;
	t->blocks = al_meta_alloc(t->len);
	return t->blocks ? 0 : -ENOMEM;
}

static inline void t_blocks_fini(struct al_allocator *a)
{
	struct t_blocks *t = (struct t_blocks *)a;

	al_meta_free(t->blocks, t->len);
}

static inline void *t_blocks_of(struct al_allocator *a, const struct al_ctx *c)
{
	return ((struct t_blocks *)a)->blocks + (size_t)c->cpu * T_BLOCK;
}

static inline int t_blocks_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	(void)a;
	(void)c;
	(void)p;
	return 0;
}

static inline void t_blocks_stats(struct al_allocator *a, struct al_stats *out)
{
	(void)a;
	out->bytes_held = 0;
}

/* The value of a named stat of the layer at depth `layer` (0 = top); -1 if absent. */
static inline long long t_stat(struct al_allocator *top, unsigned layer, const char *name)
{
	static struct al_stats st[AL_MAX_LAYERS];
	unsigned n = al_stack_stats(top, st, AL_MAX_LAYERS), i;

	if (layer >= n)
		return -1;
	if (!strcmp(name, "bytes_held"))
		return st[layer].bytes_held;
	for (i = 0; i < st[layer].n; i++)
		if (!strcmp(st[layer].v[i].name, name))
			return (long long)st[layer].v[i].value;
	return -1;
}

#endif
