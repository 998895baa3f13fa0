/*
 * Allocates and frees everything, without stdio: after it exits, the shim's
 * stats must show the policy's top layer holding nothing.
 */
#include <stdlib.h>
#include <string.h>

int main(void)
{
	static void *p[5000];
	int i, r;

	for (r = 0; r < 20; r++) {
		for (i = 0; i < 5000; i++) {
			p[i] = malloc(16 + (size_t)(i * 37) % 4000);
			if (!p[i])
				return 1;
			memset(p[i], 1, 16);
		}
		for (i = 0; i < 5000; i++)
			free(p[i]);
	}
	return 0;
}
