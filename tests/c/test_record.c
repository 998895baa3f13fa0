/* SPDX-License-Identifier: MIT */
/*
 * The recorder (csrc/preload/record.c) outside the shim, under the
 * sanitizers: it is compiled in here, with the shim's implementations
 * (al_shim_*) standing in as the C library's own, so ThreadSanitizer sees
 * the owner's appends, its flushes and the end-of-image flushes that
 * another thread runs at once, and the finaliser reads the result back.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>

#include "../../csrc/preload/record.c"
#include "test.h"

void *al_shim_malloc(size_t size)
{
	return malloc(size);
}

void *al_shim_calloc(size_t n, size_t size)
{
	return calloc(n, size);
}

void al_shim_free(void *p)
{
	free(p);
}

void *al_shim_realloc(void *p, size_t size)
{
	return realloc(p, size);
}

void *al_shim_aligned(unsigned kind, size_t align, size_t size)
{
	(void)kind;
	return aligned_alloc(align, (size + align - 1) & ~(align - 1));
}

int al_shim_posix_memalign(void **out, size_t align, size_t size)
{
	return posix_memalign(out, align, size);
}

size_t al_shim_usable_size(void *p)
{
	return malloc_usable_size(p);
}

void *al_shim_next_sym(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

#define NT 4
#define N  20000

static void *work(void *arg)
{
	(void)arg;
	for (int i = 0; i < N; i++) {
		void *p = al_rec_malloc(16 + (size_t)(i & 127));

		p = al_rec_realloc(p, 200);
		al_rec_usable_size(p);
		al_rec_free(p);
	}
	return NULL;
}

static void remove_dir(const char *dir)
{
	char path[600];

	snprintf(path, sizeof(path), "%s/%s", dir, rec_file);
	unlink(path);
	snprintf(path, sizeof(path), "%s/index.jsonl", dir);
	unlink(path);
	rmdir(dir);
}

/* Four threads record while the main thread runs end-of-image flushes
 * over their buffers: every op is in the trace once, in a consistent
 * order (the seal checks every id's creation, uses and free). */
TEST(test_threads_record_while_the_image_ends)
{
	char dir[] = "/tmp/alloclab-rec-XXXXXX", raw[600], err[256];
	struct al_rec_info info;
	struct al_trace *t = NULL;
	pthread_t th[NT];

	CHECK(mkdtemp(dir) != NULL);
	setenv("ALLOCLAB_RECORD", dir, 1);
	CHECK_EQ(al_rec_init(0), 1);
	al_rec_start();
	for (int k = 0; k < NT; k++)
		CHECK_EQ(pthread_create(&th[k], NULL, work, NULL), 0);
	for (int e = 0; e < 200; e++)
		al_rec_end(0);
	for (int k = 0; k < NT; k++)
		pthread_join(th[k], NULL);
	al_rec_end(0);
	snprintf(raw, sizeof(raw), "%s/%s", dir, rec_file);
	CHECK_EQ(al_rec_finish(raw, &t, &info, err, sizeof(err)), 0);
	if (t) {
		CHECK_EQ(t->nthreads, NT + 1); /* main: its first call was pthread_create */
		CHECK_EQ(t->kind_ops[AL_TK_MALLOC], NT * N);
		CHECK_EQ(t->kind_ops[AL_TK_REALLOC], NT * N);
		CHECK_EQ(t->kind_ops[AL_TK_USABLE_SIZE], NT * N);
		CHECK_EQ(t->kind_ops[AL_TK_FREE], NT * N);
		CHECK_EQ(t->kind_ops[AL_TK_THREAD_START], NT + 1);
		CHECK_EQ(t->kind_ops[AL_TK_THREAD_EXIT], NT);
		CHECK_EQ(t->nobjects, 2 * NT * N);
		CHECK_EQ(t->unknown_refs, 0);
		CHECK(info.complete);
		for (unsigned k = 1; k < t->nthreads; k++)
			CHECK_EQ(t->threads[k].parent, 0);
	}
	al_trace_free(t);
	al_rec_on = 0;
	remove_dir(dir);
}

int main(void)
{
	RUN(test_threads_record_while_the_image_ends);
	return TEST_SUMMARY();
}
