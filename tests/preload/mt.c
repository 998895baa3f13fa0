/*
 * A multi-threaded malloc user for the preload shim tests: 8 threads (or
 * argv[1], 1..MAX_THREADS) allocate random sizes up to 3000 bytes, fill them,
 * realloc them, free them; each checks posix_memalign and aligned_alloc
 * alignment and the fill pattern. Exit 0 and "done 0" when every check
 * passed; 2 for a bad thread count.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *worker(void *arg)
{
	long id = (long)arg;
	unsigned long s = (unsigned long)id + 1;
	unsigned char *v[256];
	size_t n[256];
	void *a;
	int it, i;

	for (it = 0; it < 500; it++) {
		for (i = 0; i < 256; i++) {
			s = s * 6364136223846793005ul + 1;
			n[i] = 1 + (s >> 33) % 3000;
			v[i] = malloc(n[i]);
			if (!v[i])
				return (void *)1;
			memset(v[i], (int)id, n[i]);
		}
		for (i = 0; i < 256; i++) {
			size_t m = 1 + (size_t)i * 7, k;

			v[i] = realloc(v[i], m);
			for (k = 0; k < (m < n[i] ? m : n[i]); k++)
				if (v[i][k] != (unsigned char)id)
					return (void *)2;
		}
		for (i = 0; i < 256; i++)
			free(v[i]);
	}
	if (posix_memalign(&a, 4096, 100) || ((unsigned long)a & 4095))
		return (void *)3;
	free(a);
	a = aligned_alloc(256, 512);
	if (!a || ((unsigned long)a & 255))
		return (void *)4;
	free(a);
	a = calloc(100, 10);
	for (i = 0; i < 1000; i++)
		if (((char *)a)[i])
			return (void *)5;
	free(a);
	return NULL;
}

#define MAX_THREADS 1024

int main(int argc, char **argv)
{
	static pthread_t t[MAX_THREADS];
	long i, n = argc > 1 ? atol(argv[1]) : 8, bad = 0;
	void *r;

	if (n < 1 || n > MAX_THREADS) {
		fprintf(stderr, "mt: threads must be 1..%d, not %s\n", MAX_THREADS, argv[1]);
		return 2;
	}
	for (i = 0; i < n; i++)
		if (pthread_create(&t[i], 0, worker, (void *)i))
			return 2;
	for (i = 0; i < n; i++) {
		pthread_join(t[i], &r);
		bad |= (long)r;
	}
	printf("done %ld\n", bad);
	return (int)bad;
}
