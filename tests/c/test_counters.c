/* SPDX-License-Identifier: MIT */
/*
 * Counters declared once (AL_COUNTERS_DEFINE): the enum, the descriptors and
 * their flags; per-[cpu][level] blocks found once; derived entries computed
 * at report time ("a+b-c"), reported ones left to the layer; the stats
 * levels (off counts and reports nothing but the byte accounting, lite
 * counts events and lock acquisitions, full also times locks), the level a
 * stack gets from its creating thread, and percpu's reported counts
 * following from its per-order slots. Locks count in the acquirer's block:
 * exact counts from several threads, and timing only at full.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "test.h"
#include "t_spec.h"

#define T_COUNTERS(C, D, P)                                     \
	C(P, hits, AL_CTR_KEY, "hits")                          \
	C(P, misses, 0, "misses")                               \
	D(P, allocs, AL_CTR_KEY, "hits+misses", "allocations")  \
	D(P, net, 0, "hits-misses", "hits less misses")         \
	D(P, cached, AL_CTR_GAUGE, "", "reported by the layer") \
	C(P, level, AL_CTR_GAUGE, "a counted level")            \
	AL_LOCK_COUNTERS(C, P, lock, "the lock")
AL_COUNTERS_DEFINE(T_COUNTERS, T_, t_counters);

static const struct al_stat *find(const struct al_stats *s, const char *name)
{
	unsigned i;

	for (i = 0; i < s->n; i++)
		if (!strcmp(s->v[i].name, name))
			return &s->v[i];
	return NULL;
}

TEST(test_descriptors)
{
	CHECK_EQ(T_NR, 12);
	CHECK(!strcmp(t_counters[T_allocs].name, "allocs"));
	CHECK(t_counters[T_allocs].flags & AL_CTR_DERIVED);
	CHECK(t_counters[T_allocs].flags & AL_CTR_KEY);
	CHECK(!strcmp(t_counters[T_allocs].formula, "hits+misses"));
	CHECK(t_counters[T_cached].flags & AL_CTR_REPORTED);
	CHECK(!t_counters[T_cached].formula);
	CHECK(!(t_counters[T_hits].flags & (AL_CTR_DERIVED | AL_CTR_REPORTED)));
	CHECK(!t_counters[T_hits].formula);
	CHECK(!strcmp(t_counters[T_lock_owner_switches].name, "lock_owner_switches"));
	CHECK(t_counters[T_lock_wait_ns].flags & AL_CTR_NS);
	CHECK_EQ(T_lock_owner_switches - T_lock_acquired, AL_LOCK_OWNER_SWITCHES);
}

TEST(test_levels_and_report)
{
	static const unsigned levels[] = { AL_STATS_OFF, AL_STATS_LITE, AL_STATS_FULL };
	struct al_counters k;
	struct al_ctx c0, c1;
	unsigned i, old;

	al_ctx_init(&c0, 0);
	al_ctx_init(&c1, 1);
	for (i = 0; i < 3; i++) {
		struct al_stats st;
		uint64_t *b;

		memset(&st, 0, sizeof(st));
		old = al_stats_level_set(levels[i]);
		CHECK_EQ(al_counters_init_desc(&k, t_counters, T_NR, 4, 2), 0);
		al_stats_level_set(old);
		CHECK_EQ(k.level, levels[i]);
		b = al_ctr_block(&k, &c0);
		CHECK_EQ(b == NULL, levels[i] == AL_STATS_OFF);
		al_ctr_add(b, T_hits, 5);
		al_ctr_add(b, T_NR + 3, 7); /* an extra slot */
		al_count(&k, &c1, T_misses, 2);
		al_ctr_add(al_ctr_block_acct(&k, &c1), T_level, 9); /* at every level */
		al_counters_report(&k, &st);
		if (levels[i] == AL_STATS_OFF) {
			CHECK_EQ(st.n, 0);
			CHECK_EQ(al_counters_sum(&k, T_hits), 0);
			CHECK_EQ(al_counters_sum(&k, T_level), 9);
		} else {
			CHECK_EQ(al_counters_sum(&k, T_NR + 3), 7);
			CHECK_EQ(find(&st, "hits")->value, 5);
			CHECK_EQ(find(&st, "misses")->value, 2);
			CHECK_EQ(find(&st, "allocs")->value, 7);
			CHECK_EQ(find(&st, "net")->value, 3);
			CHECK(!find(&st, "cached")); /* the layer's to report */
			CHECK_EQ(find(&st, "level")->value, 9);
			CHECK(find(&st, "level")->flags & AL_STAT_GAUGE);
			CHECK(find(&st, "lock_acquired") != NULL);
			/* lock times are measured at full only */
			CHECK_EQ(find(&st, "lock_wait_ns") != NULL, levels[i] == AL_STATS_FULL);
		}
		al_counters_fini(&k);
	}
	CHECK_EQ(al_stats_level_get(), AL_STATS_LITE);
	CHECK_EQ(al_stats_level_set(99), AL_STATS_LITE); /* out of range: the default */
	CHECK_EQ(al_stats_level_get(), AL_STATS_LITE);
}

/* Several threads, one lock counting in their own blocks: exact sums. */
static struct al_lock lk;
static struct al_counters lk_ctr;
static long inside;

static void *locker(void *arg)
{
	struct al_ctx c;
	unsigned i;

	al_ctx_init(&c, (unsigned)(uintptr_t)arg);
	for (i = 0; i < 20000; i++) {
		if (al_lock_acquire(&lk, &c))
			continue;
		inside++;
		al_lock_release(&lk, &c);
	}
	return NULL;
}

static void lock_run(unsigned level, bool timed, struct al_lock_stats *st)
{
	pthread_t th[3];
	unsigned i, old = al_stats_level_set(level);

	CHECK_EQ(al_counters_init_desc(&lk_ctr, t_counters, T_NR, 0, 4), 0);
	al_stats_level_set(old);
	al_lock_init(&lk, 1000000000ull, timed);
	al_lock_count_in(&lk, &lk_ctr, T_lock_acquired);
	inside = 0;
	for (i = 0; i < 3; i++)
		pthread_create(&th[i], NULL, locker, (void *)(uintptr_t)i);
	for (i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	al_lock_stats_get(&lk, st);
	al_counters_fini(&lk_ctr);
}

TEST(test_lock_counts_in_blocks)
{
	struct al_lock_stats st;

	lock_run(AL_STATS_LITE, true, &st);
	CHECK_EQ(inside, 60000);
	CHECK_EQ(st.acquired, 60000);
	CHECK_EQ(st.failed, 0);
	CHECK(st.owner_switches <= st.acquired);
	CHECK_EQ(st.wait_ticks + st.hold_ticks, 0); /* no clock below full */
	lock_run(AL_STATS_FULL, true, &st);
	CHECK_EQ(st.acquired, 60000);
	CHECK(st.hold_ticks > 0);
	CHECK(st.contended == 0 || st.wait_ticks > 0);
	lock_run(AL_STATS_FULL, false, &st); /* an untimed lock stays untimed */
	CHECK_EQ(st.hold_ticks, 0);
	lock_run(AL_STATS_OFF, true, &st);
	CHECK_EQ(inside, 60000);
	CHECK_EQ(st.acquired, 0);
}

/* percpu's allocs, hits, frees, free_hits and bytes follow from its
 * per-order slots and the slow-path counters. */
TEST(test_percpu_reported_counts)
{
	struct al_allocator *a = t_spec("percpu(capacity=4,batch=2) > buddy", 1);
	struct al_stats st[2];
	struct al_ctx c;
	void *p[6];
	unsigned i;

	if (!a)
		return;
	al_ctx_init(&c, 0);
	for (i = 0; i < 6; i++) /* 3 misses (refill 2 each), 3 hits */
		p[i] = al_alloc(a, &c, 64, 0);
	for (i = 0; i < 6; i++) /* 4 pushes, a spill of 2, 2 more pushes */
		CHECK_EQ(al_free(a, &c, p[i]), 0);
	CHECK_EQ(al_stack_stats(a, st, 2), 2);
	CHECK_EQ(find(&st[0], "allocs")->value, 6);
	CHECK_EQ(find(&st[0], "misses")->value, 3);
	CHECK_EQ(find(&st[0], "hits")->value, 3);
	CHECK_EQ(find(&st[0], "frees")->value, 6);
	CHECK_EQ(find(&st[0], "spills")->value, 1);
	CHECK_EQ(find(&st[0], "free_hits")->value, 5);
	CHECK_EQ(find(&st[0], "bytes_allocated")->value, 6 * 64);
	CHECK_EQ(find(&st[0], "bytes_freed")->value, 6 * 64);
	CHECK_EQ(st[0].bytes_held, 0);
	CHECK_EQ(find(&st[0], "objects_cached")->value, 4);
	al_stack_destroy(a);
}

/* At stats=off percpu reports nothing, and its bytes_held comes from its
 * state: the backend's bytes less what the stacks cache. */
TEST(test_percpu_off_holds_from_state)
{
	unsigned old = al_stats_level_set(AL_STATS_OFF);
	struct al_allocator *a = t_spec("percpu > buddy", 1);
	struct al_stats st[2];
	struct al_ctx c;
	void *p;

	al_stats_level_set(old);
	if (!a)
		return;
	al_ctx_init(&c, 0);
	p = al_alloc(a, &c, 64, 0);
	CHECK(p != NULL);
	CHECK_EQ(al_stack_stats(a, st, 2), 2);
	CHECK_EQ(st[0].n, 0);
	CHECK_EQ(st[0].bytes_held, 64);
	CHECK_EQ(al_free(a, &c, p), 0);
	CHECK_EQ(al_stack_stats(a, st, 2), 2);
	CHECK_EQ(st[0].bytes_held, 0);
	al_stack_destroy(a);
}

int main(void)
{
	al_clock_init();
	RUN(test_descriptors);
	RUN(test_levels_and_report);
	RUN(test_lock_counts_in_blocks);
	RUN(test_percpu_reported_counts);
	RUN(test_percpu_off_holds_from_state);
	return TEST_SUMMARY();
}
