/*
 * fork() while other threads allocate: the child (one thread) must be able to
 * allocate and free at once, i.e. no policy lock may be left held by a thread
 * that does not exist in the child.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;

static void *churn(void *arg)
{
	(void)arg;
	while (!stop) {
		void *v[64];
		int i;

		for (i = 0; i < 64; i++)
			v[i] = malloc(64 + i * 16);
		for (i = 0; i < 64; i++)
			free(v[i]);
	}
	return NULL;
}

int main(void)
{
	pthread_t t[3];
	int i, k, status, bad = 0;

	for (i = 0; i < 3; i++)
		pthread_create(&t[i], 0, churn, NULL);
	for (k = 0; k < 20; k++) {
		pid_t pid = fork();

		if (pid == 0) {
			void *v[100];

			for (i = 0; i < 100; i++)
				v[i] = malloc(100);
			for (i = 0; i < 100; i++)
				free(v[i]);
			_exit(0);
		}
		if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status))
			bad = 1;
	}
	stop = 1;
	for (i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	printf("forks %d\n", bad);
	return bad;
}
