/* SPDX-License-Identifier: MIT */
/*
 * Stats blocks (ops.h): a layer's stats() appends its named values to a
 * struct al_stats, cumulative counts with al_stats_add and levels that go
 * up and down (bytes cached, objects in a list) with al_stats_add_gauge, so
 * a reader knows which ones a delta over a run means something for. A block
 * holds AL_STATS_MAX values; more are dropped, never written past the end.
 *
 * No locks, no allocation; each call touches only the block it is given.
 * Cost: one store per value.
 */
#include "alloclab/core.h"

void al_stats_add(struct al_stats *s, const char *name, uint64_t value)
{
	if (s->n < AL_STATS_MAX) {
		s->v[s->n].name = name;
		s->v[s->n].value = value;
		s->v[s->n].flags = 0;
		s->n++;
	}
}

void al_stats_add_gauge(struct al_stats *s, const char *name, uint64_t value)
{
	if (s->n < AL_STATS_MAX) {
		al_stats_add(s, name, value);
		s->v[s->n - 1].flags = AL_STAT_GAUGE;
	}
}
