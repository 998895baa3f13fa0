/*
 * The malloc family at the limits of size_t, as glibc answers them: sizes of
 * SIZE_MAX, SIZE_MAX - 4000 and SIZE_MAX / 2 + 1 (more than PTRDIFF_MAX: no
 * allocator can serve them), products that overflow (calloc, reallocarray),
 * page rounding that would wrap (pvalloc), and alignments past the largest
 * power of two. Each call must return NULL with errno ENOMEM or EINVAL
 * (posix_memalign returns the error and leaves its pointer alone), and a
 * failed realloc or reallocarray must leave the old block as it was.
 *
 * Prints one line per call, "name(args) = NULL errno NAME" (or "= ptr"), so
 * that the output under the shim can be compared with glibc's line by line,
 * then "limits N" where N is the number of calls that differ from what glibc
 * does; exits 1 when N > 0. Every pointer returned is written to and freed,
 * so a wrapped size that handed out a small block shows as a crash too.
 * "limits ENTRY" makes only the calls of one entry point (pvalloc,
 * posix_memalign, ...): the red-team matrix has a cell per entry and policy.
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long bad;
static const char *only; /* the entry point whose calls are made; NULL: all */

/* Whether the call named by text ("pvalloc(SIZE_MAX)") is skipped. */
static int skip(const char *text)
{
	size_t n = only ? strlen(only) : 0;

	return only && (strncmp(text, only, n) || text[n] != '(');
}

/* A size the compiler cannot see, so that it neither warns about the
 * constant (-Walloc-size-larger-than) nor folds the call away. */
static size_t v(size_t x)
{
	volatile size_t y = x;

	return y;
}

static const char *errname(int e)
{
	return e == 0 ? "0" : e == ENOMEM ? "ENOMEM" : e == EINVAL ? "EINVAL" : "other";
}

/* A call that must fail: NULL, and errno as expected. */
static void expect_null(const char *what, void *p, int err, int want)
{
	printf("%s = %s errno %s\n", what, p ? "ptr" : "NULL", errname(err));
	if (p || err != want) {
		printf("  expected NULL errno %s\n", errname(want));
		bad++;
	}
	if (p) { /* a wrapped size: touch what was claimed, as a program would */
		memset(p, 0, 64);
		free(p);
	}
}

#define FAIL(want, call, text)                   \
	do {                                     \
		void *p_;                        \
		int e_;                          \
                                                 \
		if (skip(text))                  \
			break;                   \
		errno = 0;                       \
		p_ = (call);                     \
		e_ = errno;                      \
		expect_null(text, p_, e_, want); \
	} while (0)

/* posix_memalign: the error is returned, the pointer left alone. errno is
 * printed, not judged: the output comparison with glibc judges it. */
static void pm(size_t align, size_t size, int want, const char *text)
{
	void *p = (void *)&bad;
	int ret, e;

	if (skip(text))
		return;
	errno = 0;
	ret = posix_memalign(&p, align, size);
	e = errno;
	printf("%s = %s (errno %s)\n", text, errname(ret), errname(e));
	if (ret != want || p != (void *)&bad) {
		printf("  expected %s with the pointer untouched\n", errname(want));
		bad++;
		if (!ret)
			free(p);
	}
}

/* realloc and reallocarray: NULL and ENOMEM, the old block kept intact. */
static void grow(int array, size_t n, size_t size, const char *text)
{
	unsigned char *old = malloc(100), *q;
	int e, i, kept = 1;

	if (skip(text)) {
		free(old);
		return;
	}
	if (!old) {
		printf("malloc(100) = NULL\n");
		bad++;
		return;
	}
	memset(old, 0xa5, 100);
	errno = 0;
	q = array ? reallocarray(old, n, size) : realloc(old, size);
	e = errno;
	for (i = 0; i < 100; i++)
		kept &= old[i] == 0xa5;
	printf("%s = %s errno %s, old block %s\n", text, q ? "ptr" : "NULL", errname(e),
	       kept ? "kept" : "changed");
	if (q || e != ENOMEM || !kept) {
		printf("  expected NULL errno ENOMEM, the old block kept\n");
		bad++;
	}
	free(q ? q : old);
}

int main(int argc, char **argv)
{
	const size_t big[] = { SIZE_MAX, SIZE_MAX - 4000, SIZE_MAX / 2 + 1 };
	const char *bigname[] = { "SIZE_MAX", "SIZE_MAX-4000", "SIZE_MAX/2+1" };
	const size_t page = (size_t)sysconf(_SC_PAGESIZE), top = v(SIZE_MAX / 2 + 1);
	char text[128];
	unsigned i;
	void *p;

	only = argc > 1 ? argv[1] : NULL;
	for (i = 0; i < 3; i++) {
		size_t s = v(big[i]);
		const char *n = bigname[i];

#define T(...) (snprintf(text, sizeof(text), __VA_ARGS__), text)
		FAIL(ENOMEM, malloc(s), T("malloc(%s)", n));
		FAIL(ENOMEM, calloc(1, s), T("calloc(1, %s)", n));
		FAIL(ENOMEM, calloc(s, 1), T("calloc(%s, 1)", n));
		FAIL(ENOMEM, realloc(NULL, s), T("realloc(NULL, %s)", n));
		FAIL(ENOMEM, reallocarray(NULL, 1, s), T("reallocarray(NULL, 1, %s)", n));
		FAIL(ENOMEM, memalign(16, s), T("memalign(16, %s)", n));
		FAIL(ENOMEM, memalign(page, s), T("memalign(page, %s)", n));
		FAIL(ENOMEM, memalign(0, s), T("memalign(0, %s)", n));
		FAIL(ENOMEM, aligned_alloc(64, s), T("aligned_alloc(64, %s)", n));
		FAIL(ENOMEM, aligned_alloc(page, s), T("aligned_alloc(page, %s)", n));
		FAIL(ENOMEM, valloc(s), T("valloc(%s)", n));
		FAIL(ENOMEM, pvalloc(s), T("pvalloc(%s)", n));
		pm(16, s, ENOMEM, T("posix_memalign(16, %s)", n));
		pm(page, s, ENOMEM, T("posix_memalign(page, %s)", n));
		grow(0, 1, s, T("realloc(p, %s)", n));
		grow(1, 1, s, T("reallocarray(p, 1, %s)", n));
	}
	/* page rounding: the last sizes below SIZE_MAX that round up to a page
	 * would wrap to 0 */
	FAIL(ENOMEM, pvalloc(v(SIZE_MAX) - page + 2), T("pvalloc(SIZE_MAX-page+2)"));
	FAIL(ENOMEM, pvalloc(v(SIZE_MAX) - page), T("pvalloc(SIZE_MAX-page)"));
	FAIL(ENOMEM, pvalloc(top + 1), T("pvalloc(SIZE_MAX/2+2)"));
	/* products that overflow */
	FAIL(ENOMEM, calloc(v(SIZE_MAX), 2), T("calloc(SIZE_MAX, 2)"));
	FAIL(ENOMEM, calloc(2, top), T("calloc(2, SIZE_MAX/2+1)"));
	FAIL(ENOMEM, calloc(v((size_t)1 << 32), (size_t)1 << 32), T("calloc(2^32, 2^32)"));
	FAIL(ENOMEM, calloc(top, top), T("calloc(SIZE_MAX/2+1, SIZE_MAX/2+1)"));
	FAIL(ENOMEM, reallocarray(NULL, v(SIZE_MAX), 2), T("reallocarray(NULL, SIZE_MAX, 2)"));
	grow(1, 2, top, T("reallocarray(p, 2, SIZE_MAX/2+1)"));
	grow(1, (size_t)1 << 33, (size_t)1 << 31, T("reallocarray(p, 2^33, 2^31)"));
	/* alignments: past the largest power of two a size_t holds is EINVAL;
	 * the largest itself cannot be served (ENOMEM) */
	FAIL(EINVAL, memalign(v(SIZE_MAX), 16), T("memalign(SIZE_MAX, 16)"));
	FAIL(EINVAL, memalign(top + 1, 16), T("memalign(SIZE_MAX/2+2, 16)"));
	FAIL(ENOMEM, memalign(top, 16), T("memalign(SIZE_MAX/2+1, 16)"));
	FAIL(ENOMEM, memalign(top - 1, 16), T("memalign(SIZE_MAX/2, 16)"));
	FAIL(ENOMEM, memalign(top, v(SIZE_MAX)), T("memalign(SIZE_MAX/2+1, SIZE_MAX)"));
	FAIL(EINVAL, aligned_alloc(v(SIZE_MAX), 16), T("aligned_alloc(SIZE_MAX, 16)"));
	FAIL(ENOMEM, aligned_alloc(top, 16), T("aligned_alloc(SIZE_MAX/2+1, 16)"));
	pm(v(SIZE_MAX), 16, EINVAL, T("posix_memalign(SIZE_MAX, 16)"));
	pm(top + 8, 16, EINVAL, T("posix_memalign(SIZE_MAX/2+9, 16)"));
	pm(0, 16, EINVAL, T("posix_memalign(0, 16)"));
	pm(sizeof(void *) / 2, 16, EINVAL, T("posix_memalign(sizeof(void *)/2, 16)"));
	pm(top, 16, ENOMEM, T("posix_memalign(SIZE_MAX/2+1, 16)"));
	pm(top, v(SIZE_MAX), ENOMEM, T("posix_memalign(SIZE_MAX/2+1, SIZE_MAX)"));
	if (!skip("malloc_usable_size(")) {
		printf("malloc_usable_size(NULL) = %zu\n", malloc_usable_size(NULL));
		if (malloc_usable_size(NULL))
			bad++;
	}
	/* after all that, the allocator still serves */
	p = pvalloc(1);
	printf("pvalloc(1) = %s, page aligned %s\n", p ? "ptr" : "NULL",
	       p && !((uintptr_t)p % page) ? "yes" : "no");
	if (!p || (uintptr_t)p % page || malloc_usable_size(p) < page)
		bad++;
	else
		memset(p, 1, page);
	free(p);
	printf("limits %ld\n", bad);
	return bad != 0;
}
