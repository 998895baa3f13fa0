/*
 * A program for the preload watchdog: it allocates 12345 bytes, which
 * the spin plugin (tests/preload/plugins/spin.c) never returns from, in the process itself
 * ("self"), in a forked child that its parent waits for ("fork"), or in the image an exec loads
 * ("exec": this program again, as "self"). "busy" allocates and frees 100 bytes for a second
 * instead: calls that each make progress, which the watchdog must leave alone. It prints "start
 * MODE" first, so a test knows it ran. Without the spin layer every mode exits 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* volatile: the compiler would drop a malloc whose block is only freed */
static void *volatile block;

static void stall(void)
{
	block = malloc(12345);
	free(block);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "self";
	pid_t pid;
	int st;

	printf("start %s\n", mode);
	fflush(stdout);
	if (!strcmp(mode, "fork")) {
		pid = fork();
		if (pid < 0)
			return 2;
		if (!pid) {
			stall();
			_exit(0);
		}
		if (waitpid(pid, &st, 0) < 0)
			return 2;
		return 0;
	}
	if (!strcmp(mode, "busy")) {
		time_t end = time(NULL) + 2; /* one to two seconds */

		while (time(NULL) < end) {
			block = malloc(100);
			free(block);
		}
		return 0;
	}
	if (!strcmp(mode, "exec")) {
		execl("/proc/self/exe", argv[0], "self", (char *)NULL);
		return 2;
	}
	stall();
	return 0;
}
