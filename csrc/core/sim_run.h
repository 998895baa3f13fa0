/* SPDX-License-Identifier: MIT */
/*
 * The run engine's side of simulated CPUs (not public API; the hooks the
 * core calls at its sync points: alloclab/sim.h).
 *
 * al_sim_new() makes a simulation for ncpu model CPUs and makes this thread
 * its engine: from then on the process clock is virtual and counter sets
 * made on this thread take part in the cost model. al_sim_spawn() gives a
 * model CPU its fiber (fn(arg), with ctx as its current context);
 * al_sim_step() releases every fiber parked at a barrier at the latest
 * clock and runs them until each is parked again (al_sim_park) or done:
 * 0, or -EDEADLK when every fiber left waits on a lock with no deadline
 * (err says which). al_sim_free() gives the clock back; a simulation that
 * ended in a deadlock keeps its fibers' stacks (leaked, as stuck workers
 * are). Lock order: none (one thread).
 */
#ifndef ALLOCLAB_CORE_SIM_RUN_H
#define ALLOCLAB_CORE_SIM_RUN_H

#include "alloclab/sim.h"
#include "alloclab/ops.h"

struct al_sim;

int al_sim_new(const struct al_sim_config *cfg, unsigned ncpu, struct al_sim **out, char *err,
	       size_t errlen);
int al_sim_spawn(struct al_sim *s, unsigned cpu, void (*fn)(void *), void *arg, struct al_ctx *ctx);
int al_sim_step(struct al_sim *s, char *err, size_t errlen);
void al_sim_park(void);
void al_sim_measuring(struct al_sim *s, bool on);
uint64_t al_sim_now_ps(const struct al_sim *s);
void al_sim_get_stats(const struct al_sim *s, struct al_sim_stats *out);
void al_sim_free(struct al_sim *s);
/* Simulations running in this process now (a measured run refuses to start). */
int al_sim_running(void);

#endif
