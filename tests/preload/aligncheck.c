/*
 * Alignment under the preload shim: every malloc, calloc and realloc result
 * is aligned to alignof(max_align_t), and posix_memalign, aligned_alloc,
 * memalign, valloc and pvalloc honour their alignment, for sizes 0..4200
 * and alignments up to a page. malloc_usable_size is at least the size
 * asked, and a block keeps its bytes across realloc. Every block of 16 bytes
 * or more also takes an aligned SSE store (movdqa), which faults on a
 * misaligned address as ordinary vectorised code does. memalign takes any
 * alignment, as glibc's does (rounded up to a power of two). Prints
 * "misaligned N" and exits 1 when N > 0 (or dies of SIGSEGV).
 */
#include <malloc.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long bad;

static void check(void *p, size_t align, size_t size, const char *what)
{
	if (!p) {
		printf("%s(%zu, align %zu) = NULL\n", what, size, align);
		bad++;
		return;
	}
	if ((uintptr_t)p % align || malloc_usable_size(p) < size) {
		if (bad < 10)
			printf("%s(%zu, align %zu) = %p, usable %zu\n", what, size, align, p,
			       malloc_usable_size(p));
		bad++;
	}
	fflush(stdout);
#ifdef __x86_64__
	if (size >= 16) /* an aligned SSE store: SIGSEGV on a misaligned block */
		__asm__ volatile("pxor %%xmm0, %%xmm0\n\tmovdqa %%xmm0, (%0)"
				 :
				 : "r"(p)
				 : "xmm0", "memory");
#endif
	memset(p, 0x5a, size);
}

int main(void)
{
	const size_t A = alignof(max_align_t);
	size_t size, align, page = (size_t)sysconf(_SC_PAGESIZE);
	void *keep[64];
	int k = 0;
	static const size_t odd[] = { 0, 1, 3, 24, 48, 100, 3000 };
	size_t k2;

	for (size = 0; size <= 4200; size++) {
		void *p = malloc(size), *q = calloc(1, size), *r;

		check(p, A, size, "malloc");
		check(q, A, size, "calloc");
		r = realloc(p, size + 24);
		check(r, A, size + 24, "realloc");
		if (r && size && ((unsigned char *)r)[size - 1] != 0x5a)
			bad++;
		free(r);
		free(q);
		if (size % 67 == 0 && k < 64)
			keep[k++] = malloc(size); /* vary the state of the caches */
	}
	for (align = sizeof(void *); align <= page; align *= 2)
		for (size = 1; size <= 3 * align && size < 20000; size += align / 2 + 7) {
			void *p = NULL, *q, *r;

			if (posix_memalign(&p, align, size))
				p = NULL;
			check(p, align, size, "posix_memalign");
			q = aligned_alloc(align, (size + align - 1) / align * align);
			check(q, align, size, "aligned_alloc");
			r = memalign(align, size);
			check(r, align, size, "memalign");
			free(p);
			free(q);
			free(r);
		}
	/* memalign as glibc's: an alignment that is not a power of two is
	 * rounded up to one, 0 and 1 are malloc's */
	for (k2 = 0; k2 < sizeof(odd) / sizeof(odd[0]); k2++) {
		size_t want = odd[k2] < A ? A : 1;
		void *r = memalign(odd[k2], 40);

		while (want < odd[k2])
			want *= 2;
		check(r, want, 40, "memalign");
		free(r);
	}
	{
		void *v = valloc(100), *pv = pvalloc(100);

		check(v, page, 100, "valloc");
		check(pv, page, page, "pvalloc");
		free(v);
		free(pv);
	}
	while (k)
		free(keep[--k]);
	printf("misaligned %ld\n", bad);
	return bad != 0;
}
