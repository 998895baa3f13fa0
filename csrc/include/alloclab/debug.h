/* SPDX-License-Identifier: MIT */
/*
 * Runtime assertions in tiers, compiled out of the measured build.
 *
 * AL_DEBUG selects the tier when the library is compiled (as mimalloc's
 * MI_DEBUG):
 *   0  (default: setup.py / pip and the release `make`) every assertion
 *      below expands to nothing; the hot paths are the code without them.
 *   1  al_assert(): cheap invariants checked at their point of use (list
 *      links, counts within capacity, an object in its class or order) and
 *      the lock rules: every `*_locked` function starts with
 *      al_lock_assert_held() (or the form for its kind of lock below), as
 *      SQLite asserts sqlite3_mutex_held().
 *   2  + al_assert_expensive(): O(n) checks on the way (a free object not
 *      already on the list it joins, a walk of a short list).
 *   3  + al_assert_walk(): full structure walks (the *_check invariant
 *      walkers) after operations that rebuild structures.
 * The C tests and the sanitizer builds (`make test`, `make test SAN=asan`,
 * `make test SAN=tsan`) are built with AL_DEBUG=2.
 *
 * Failure policy. In every build the library returns 0 / -errno for bad input
 * and never aborts, prints or exits: a caller's mistake is an error code. An
 * assertion is different: it states a fact about alloclab's own state that no
 * call can break (a bad pointer or a double free is refused with -EINVAL
 * before it touches any state), so its failure is a programming error in
 * alloclab itself, or memory corrupted behind its back (a write after free),
 * and continuing would corrupt more. In a debug build the failure handler
 * prints "file:line: assertion failed: expression" to stderr and aborts, as
 * assert(3) does. Release builds contain no assertion and no handler call.
 *
 * Cost: zero at AL_DEBUG=0. At 1, one predictable branch per assertion (the
 * lock check is two relaxed loads); at 2 and 3, what each check says.
 */
#ifndef ALLOCLAB_DEBUG_H
#define ALLOCLAB_DEBUG_H

#include "base.h"
#include "lock.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef AL_DEBUG
#define AL_DEBUG 0
#endif

/* The AL_DEBUG the library was compiled with (a test checks that the assert
 * build really is one). */
AL_API int al_debug_level(void);

/* Reports a failed assertion on stderr and aborts. Only debug builds call it. */
AL_API __attribute__((noreturn, cold)) void al_assert_fail(const char *file, int line,
							   const char *expr);

#define al_assert_on_(cond) (al_likely(cond) ? (void)0 : al_assert_fail(__FILE__, __LINE__, #cond))
/* The condition is not evaluated, but still type-checked, when compiled out. */
#define al_assert_off_(cond) ((void)sizeof(!(cond)))

#if AL_DEBUG >= 1
#define al_assert(cond) al_assert_on_(cond)
#else
#define al_assert(cond) al_assert_off_(cond)
#endif

#if AL_DEBUG >= 2
#define al_assert_expensive(cond) al_assert_on_(cond)
#else
#define al_assert_expensive(cond) al_assert_off_(cond)
#endif

/* Compiled out entirely below 3 (not even type-checked): the walkers it
 * calls are static helpers that lower tiers leave unreferenced. */
#if AL_DEBUG >= 3
#define al_assert_walk(cond) al_assert_on_(cond)
#else
#define al_assert_walk(cond) ((void)0)
#endif

/* True when context c holds l: the lock records its holder's CPU and level
 * (for AA-deadlock detection), and only the holder writes them while it holds
 * the lock, so the holder always reads back its own values. */
static inline bool al_lock_held_by(const struct al_lock *l, const struct al_ctx *c)
{
	return __atomic_load_n(&l->holder_cpu, __ATOMIC_RELAXED) == c->cpu + 1 &&
	       __atomic_load_n(&l->holder_level, __ATOMIC_RELAXED) == c->level;
}

/* The caller, running as context c, holds l. */
#define al_lock_assert_held(l, c) al_assert(al_lock_held_by((l), (c)))

/* Some context holds l: for helpers that take no context (list operations).
 * A lock records its holder while held, so this fails only when nobody holds it. */
#define al_lock_assert_locked(l) al_assert(__atomic_load_n(&(l)->holder_cpu, __ATOMIC_RELAXED) != 0)

/* A test-and-set word lock (1 = held) is held. It records no owner, so this
 * checks that someone holds it: the caller forgot to take it unless another
 * thread happens to hold it at that moment. */
#define al_flag_assert_held(word) al_assert(__atomic_load_n((word), __ATOMIC_RELAXED) != 0)

/* A per-CPU local lock word that records its holder's context level + 1
 * (slab's local lock, the sheaves' trylock) is held by context c's level. */
#define al_level_lock_assert_held(word, c) \
	al_assert(__atomic_load_n((word), __ATOMIC_RELAXED) == (int)(c)->level + 1)

/* A pthread mutex is held (by someone, as above: a default mutex records no
 * owner portably). A trylock that succeeds means it was free, and the
 * assertion fails without unlocking it. Needs <pthread.h> and <errno.h>. */
#define al_mutex_assert_held(m) al_assert(pthread_mutex_trylock(m) == EBUSY)

#ifdef __cplusplus
}
#endif

#endif
