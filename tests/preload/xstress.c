/*
 * A checked stress under the preload shim. 4 threads run random
 * malloc / realloc / free / calloc and hand objects to each other through a
 * shared queue (the receiver frees them: cross-thread frees). Every object
 * carries a fill pattern (its own byte) checked before every realloc and
 * free; realloc must keep the common prefix. Prints "done N" with N the
 * number of errors; exit 0 when N is 0.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NT    4
#define SLOTS 128
#define QLEN  512
#define OPS   20000

struct obj {
	unsigned char *p;
	size_t n;
	unsigned char tag;
};

static pthread_mutex_t qm = PTHREAD_MUTEX_INITIALIZER;
static struct obj q[QLEN];
static unsigned qn;
static long errors;

static int check(const struct obj *o, size_t n)
{
	size_t k;

	for (k = 0; k < n; k++)
		if (o->p[k] != o->tag)
			return 1;
	return 0;
}

static void *worker(void *arg)
{
	unsigned long s = (unsigned long)arg * 2654435761ul + 1;
	struct obj v[SLOTS], o;
	long bad = 0;
	int it, i;

	memset(v, 0, sizeof(v));
	for (it = 0; it < OPS; it++) {
		s = s * 6364136223846793005ul + 1442695040888963407ul;
		i = (int)((s >> 33) % SLOTS);
		size_t n = 1 + (s >> 40) % 4096;
		unsigned op = (unsigned)(s >> 20) % 8;

		if (!v[i].p) {
			v[i].p = op == 0 ? calloc(1, n) : malloc(n);
			if (!v[i].p) {
				bad++;
				continue;
			}
			if (op == 0 && v[i].p[n - 1])
				bad++; /* calloc memory not zero */
			v[i].n = n;
			v[i].tag = (unsigned char)(s >> 8) | 1;
			memset(v[i].p, v[i].tag, n);
		} else if (op < 3) { /* realloc: the common prefix survives */
			unsigned char *p;

			bad += check(&v[i], v[i].n);
			p = realloc(v[i].p, n);
			if (!p) {
				bad++;
				continue;
			}
			v[i].p = p;
			bad += check(&v[i], n < v[i].n ? n : v[i].n);
			v[i].n = n;
			memset(p, v[i].tag, n);
		} else if (op < 6) { /* free */
			bad += check(&v[i], v[i].n);
			free(v[i].p);
			v[i].p = NULL;
		} else { /* hand it over, or take one and free it */
			pthread_mutex_lock(&qm);
			if (op == 6 && qn < QLEN) {
				q[qn++] = v[i];
				v[i].p = NULL;
				o.p = NULL;
			} else if (qn) {
				o = q[--qn];
			} else {
				o.p = NULL;
			}
			pthread_mutex_unlock(&qm);
			if (o.p) {
				bad += check(&o, o.n);
				free(o.p);
			}
		}
	}
	for (i = 0; i < SLOTS; i++)
		if (v[i].p) {
			bad += check(&v[i], v[i].n);
			free(v[i].p);
		}
	__atomic_fetch_add(&errors, bad, __ATOMIC_RELAXED);
	return NULL;
}

int main(void)
{
	pthread_t t[NT];
	long i;

	for (i = 0; i < NT; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (i = 0; i < NT; i++)
		pthread_join(t[i], NULL);
	while (qn) { /* what is still queued */
		struct obj o = q[--qn];

		errors += check(&o, o.n);
		free(o.p);
	}
	printf("done %ld\n", errors);
	return errors ? 1 : 0;
}
