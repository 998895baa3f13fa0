/* SPDX-License-Identifier: MIT */
/*
 * asan_rt.c: the arena ASan hooks a libarena tree calls when it is built
 * with BPF_ARENA_ASAN (alloclab's sanitizer builds, or
 * $ALLOCLAB_LIBARENA_ASAN=1), standing on alloclab's poisoning: the
 * AddressSanitizer manual poisoning interface that alloclab's own layers
 * use (csrc/core/track.h: al_track_poison / al_track_unpoison), so the
 * tree's free blocks are poisoned in the same shadow as alloclab's caches
 * and a use after free through either is reported by ASan.
 *
 * The tree is compiled with -fsanitize=address: its own loads and stores
 * are checked against that shadow, as the BPF arena ASan instruments arena
 * accesses. The kernel side's report state (asan_violated, asan_reported,
 * ...) is kept for code that reads it; ASan itself reports and ends the
 * process on a violation, as a failing selftest would.
 *
 * Poisoning is at 8-byte granularity (ASan's), as the BPF arena ASan's.
 * Compiled only into ASan builds of a tree: <sanitizer/asan_interface.h> is
 * the compiler's.
 */
#include <sanitizer/asan_interface.h>

#include <vmlinux.h>

volatile u64 asan_violated;
volatile u32 asan_reported;
volatile bool asan_inited = true;
volatile bool asan_report_once;

/* Mark size bytes at addr unreadable (val, the BPF ASan's shadow code for
 * why, is ASan's own here: a manual poisoning). */
int asan_poison(void *addr, s8 val, size_t size)
{
	(void)val;
	ASAN_POISON_MEMORY_REGION(addr, size);
	return 0;
}

int asan_unpoison(void *addr, size_t size)
{
	ASAN_UNPOISON_MEMORY_REGION(addr, size);
	return 0;
}

/* Whether addr's byte is poisoned. */
bool asan_shadow_set(void *addr)
{
	return __asan_address_is_poisoned(addr) != 0;
}
