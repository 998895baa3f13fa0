/*
 * Threads created and exiting in a loop, the main thread never allocating
 * before them: each worker at once asks for blocks larger than any policy's
 * max size (served by glibc) and small ones (served by the policy), then
 * exits. If glibc's malloc were first initialised in two such workers at
 * once, it would abort at a thread exit ("a->attached_threads > 0").
 * Prints "done 0" when every block held its pattern.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define ROUNDS	40

static void *worker(void *arg)
{
	long id = (long)arg, bad = 0;
	size_t big = (size_t)(4 + id) << 20; /* above every policy's max size */
	unsigned char *b = malloc(big), *s[64];
	int i;

	if (!b)
		return (void *)1;
	memset(b, (int)id, big);
	for (i = 0; i < 64; i++) {
		s[i] = malloc((size_t)(i * 37 % 500) + 1);
		if (!s[i])
			return (void *)1;
		s[i][0] = (unsigned char)i;
	}
	for (i = 0; i < 64; i++) {
		bad += s[i][0] != (unsigned char)i;
		free(s[i]);
	}
	bad += b[big - 1] != (unsigned char)id;
	free(b);
	return (void *)bad;
}

int main(void)
{
	pthread_t t[THREADS];
	long bad = 0;
	int r, i;

	for (r = 0; r < ROUNDS; r++) {
		for (i = 0; i < THREADS; i++)
			if (pthread_create(&t[i], NULL, worker, (void *)(long)i))
				return 2;
		for (i = 0; i < THREADS; i++) {
			void *ret;

			pthread_join(t[i], &ret);
			bad += (long)ret;
		}
	}
	printf("done %ld\n", bad);
	return bad != 0;
}
