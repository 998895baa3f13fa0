/*
 * A program of known malloc-family calls, for the recorder's tests
 * (tests/test_record.py). Each mode brackets its calls between malloc(MARK)
 * and malloc(MARK + 1) so the test can find them among what the C library
 * does on its own; what only the program knows (whether a realloc moved)
 * is written to stdout after the closing mark.
 *   calls    every kind once or more, NULL results, size 0, free(NULL)
 *   threads  4 threads allocate, main frees their objects; thread 0 starts
 *            a thread of its own
 *   fork     the parent allocates, forks; the child allocates and execs
 *            itself in mode exec; the parent waits
 *   kill     enough calls to fill several buffers, then SIGKILL itself
 * Built with -fno-builtin so that the compiler keeps every call.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MARK 987654

static void say(const char *fmt, long a, long b)
{
	char buf[128];
	int n = snprintf(buf, sizeof(buf), fmt, a, b);

	if (write(1, buf, (size_t)n) < 0)
		exit(9);
}

static void *volatile sink;

static int calls(void)
{
	void *a, *z, *b, *big, *c = NULL, *d, *e, *f, *g, *h, *r;
	size_t huge = SIZE_MAX / 2;
	int moved, inplace, pm;

	sink = malloc(MARK);
	a = malloc(100);
	z = malloc(0);
	b = calloc(3, 40);
	big = realloc(a, 1 << 20); /* mmap'd: moved */
	moved = big != a;
	r = realloc(big, (1 << 20) - 4096); /* shrink: in place */
	inplace = r == big;
	free(NULL);
	pm = posix_memalign(&c, 64, 300);
	d = aligned_alloc(128, 256);
	e = memalign(32, 50);
	f = valloc(10);
	g = pvalloc(10);
	sink = (void *)(uintptr_t)malloc_usable_size(c);
	h = malloc(huge); /* NULL */
	sink = reallocarray(b, huge, 4); /* overflow: NULL, b stays */
	free(b);
	free(z);
	free(r);
	free(c);
	free(d);
	free(e);
	free(f);
	free(g);
	free(h); /* NULL */
	sink = malloc(MARK + 1);
	say("moved %ld inplace %ld\n", moved, inplace);
	return pm;
}

#define NT 4
#define PER 100
static void *objs[NT][PER];

static void *nested(void *arg)
{
	(void)arg;
	free(malloc(55));
	return NULL;
}

static void *worker(void *arg)
{
	long k = (long)arg;

	for (int i = 0; i < PER; i++)
		objs[k][i] = malloc(32 + (size_t)k);
	if (k == 0) {
		pthread_t t;

		if (pthread_create(&t, NULL, nested, NULL) || pthread_join(t, NULL))
			exit(8);
	}
	return NULL;
}

static int threads(void)
{
	pthread_t t[NT];

	sink = malloc(MARK);
	for (long k = 0; k < NT; k++)
		if (pthread_create(&t[k], NULL, worker, (void *)k))
			return 1;
	for (int k = 0; k < NT; k++)
		pthread_join(t[k], NULL);
	for (int k = 0; k < NT; k++)
		for (int i = 0; i < PER; i++)
			free(objs[k][i]);
	sink = malloc(MARK + 1);
	return 0;
}

static int forks(const char *self)
{
	void *p;
	int status;
	pid_t pid;

	sink = malloc(MARK);
	p = malloc(111);
	pid = fork();
	if (pid == 0) {
		free(malloc(222));
		execl(self, self, "exec", (char *)NULL);
		_exit(7);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		return 1;
	free(p);
	sink = malloc(MARK + 1);
	say("child %ld\n", (long)pid, 0);
	return 0;
}

static int execd(void)
{
	sink = malloc(MARK);
	free(malloc(333));
	sink = malloc(MARK + 1);
	return 0;
}

static int killed(void)
{
	sink = malloc(MARK);
	for (int i = 0; i < 50000; i++)
		free(malloc(16 + (size_t)(i & 255)));
	kill(getpid(), SIGKILL);
	return 1;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "calls";

	if (!strcmp(mode, "calls"))
		return calls();
	if (!strcmp(mode, "threads"))
		return threads();
	if (!strcmp(mode, "fork"))
		return forks(argv[0]);
	if (!strcmp(mode, "exec"))
		return execd();
	if (!strcmp(mode, "kill"))
		return killed();
	return 2;
}
