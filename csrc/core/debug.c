/* SPDX-License-Identifier: MIT */
/*
 * The failure handler of the debug tier (alloclab/debug.h): a failed
 * assertion is a bug in alloclab, so it reports where and aborts, as
 * assert(3). It formats on the stack and writes with write(2): stdio may
 * allocate, and under the preload shim an allocation would re-enter the
 * allocator whose invariant just broke. Only builds with AL_DEBUG >= 1 call
 * it; release builds keep the symbol (the ABI does not depend on the tier).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloclab/core.h"

int al_debug_level(void)
{
	return AL_DEBUG;
}

void al_assert_fail(const char *file, int line, const char *expr)
{
	char msg[512];
	int n;

	n = snprintf(msg, sizeof(msg), "alloclab: %s:%d: assertion failed: %s\n", file, line, expr);
	if (n > 0)
		(void)!write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
	abort();
}
