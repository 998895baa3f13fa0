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

	record(s->m, ok, held, requested, read_rss(s));
}

void al_mem_end(struct al_mem_sampler *s, struct al_allocator *top, int64_t requested)
{
	struct al_mem *m = s->m;
	int64_t held = 0;
	bool ok = read_held(s, top, true, &held);
	uint64_t rss = read_rss(s);

	record(m, ok, held, requested, rss);
	m->held = held;
	m->requested = requested;
	m->rss = rss;
	if (s->statm_fd >= 0)
		close(s->statm_fd);
	s->statm_fd = -1;
}
