/* SPDX-License-Identifier: MIT */
/*
 * Memory during a run: what the engine's main thread samples while it waits
 * for the measured phase to end (design and fields: measure.h, struct al_mem).
 *
 * The bottom layer's stats() is called in the middle of the phase only when
 * the layer declares AL_F_STATS_ANYTIME: other layers' stats() may read
 * fields their fast paths write without atomics, which is fine when workers
 * wait at a barrier and not otherwise. RSS comes from /proc/self/statm,
 * opened once and read with pread(), so a sample makes no allocation.
 * Samples also go into a bounded series (measure.h: AL_MEM_SERIES points,
 * thinned by halving when full), so a run's memory over time is kept.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mem.h"

static uint64_t read_rss(struct al_mem_sampler *s)
{
	char buf[128], *p;
	ssize_t n;

	if (s->statm_fd < 0)
		return 0;
	n = pread(s->statm_fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	strtoull(buf, &p, 10); /* total program size; resident comes second */
	return strtoull(p, NULL, 10) * s->page_size;
}

void al_mem_begin(struct al_mem_sampler *s, struct al_mem *m)
{
	long page = sysconf(_SC_PAGESIZE);

	s->m = m;
	s->page_size = page > 0 ? (uint64_t)page : 4096;
	s->statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	memset(m, 0, sizeof(*m));
	m->requested = m->requested_peak = -1;
	m->series_every = 1;
	s->t0_ns = al_mono_ns();
	m->rss_start = read_rss(s);
}

/* The bottom layer's bytes_held, if it may be read now. */
static bool read_held(struct al_mem_sampler *s, struct al_allocator *top, bool quiescent,
		      int64_t *held)
{
	struct al_allocator *bot = top;

	if (!top)
		return false;
	while (bot->below)
		bot = bot->below;
	if (!quiescent && !(bot->desc->features & AL_F_STATS_ANYTIME))
		return false;
	memset(&s->bot, 0, sizeof(s->bot));
	bot->ops->stats(bot, &s->bot);
	*held = s->bot.bytes_held;
	return true;
}

/* Keep every other point and from now on one sample in twice as many. */
static void series_halve(struct al_mem *m)
{
	for (unsigned i = 0; 2 * i < m->nseries; i++)
		m->series[i] = m->series[2 * i];
	m->nseries = (m->nseries + 1) / 2;
	m->series_every *= 2;
}

/* The sample as a point of the series when it falls on the kept spacing,
 * or always (the last sample). */
static void series_add(struct al_mem_sampler *s, bool always, bool held_ok, int64_t held,
		       int64_t requested, uint64_t rss)
{
	struct al_mem *m = s->m;
	struct al_mem_point *pt;

	if (!always && m->samples % m->series_every)
		return;
	if (m->nseries == AL_MEM_SERIES)
		series_halve(m);
	pt = &m->series[m->nseries++];
	pt->t_ns = al_mono_ns() - s->t0_ns;
	pt->requested = requested;
	pt->held = held_ok ? held : -1;
	pt->rss = rss;
}

static void record(struct al_mem *m, bool held_ok, int64_t held, int64_t requested, uint64_t rss)
{
	if (held_ok) {
		if (!m->held_samples || held > m->held_peak)
			m->held_peak = held;
		m->held_samples++;
	}
	if (requested > m->requested_peak)
		m->requested_peak = requested;
	if (rss > m->rss_peak)
		m->rss_peak = rss;
	m->samples++;
}

void al_mem_sample(struct al_mem_sampler *s, struct al_allocator *top, int64_t requested,
		   bool quiescent)
{
	int64_t held = 0;
	bool ok = read_held(s, top, quiescent, &held);
	uint64_t rss = read_rss(s);

	series_add(s, false, ok, held, requested, rss);
	record(s->m, ok, held, requested, rss);
}

void al_mem_end(struct al_mem_sampler *s, struct al_allocator *top, int64_t requested)
{
	struct al_mem *m = s->m;
	int64_t held = 0;
	bool ok = read_held(s, top, true, &held);
	uint64_t rss = read_rss(s);

	series_add(s, true, ok, held, requested, rss);
	record(m, ok, held, requested, rss);
	m->held = held;
	m->requested = requested;
	m->rss = rss;
	if (s->statm_fd >= 0)
		close(s->statm_fd);
	s->statm_fd = -1;
}
