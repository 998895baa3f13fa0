/* SPDX-License-Identifier: MIT */
/*
 * alloclab core: the layer contract and the services a layer is built from,
 * the bottom room of the library. Everything in csrc/core includes this and
 * nothing above it: the builder (stack.h, spec.h: a spec turned into a stack
 * of layers), the engine (workload.h, measure.h, run.h) and the traces stand
 * on the core, never the other way round, so a layer, a plugin or the
 * preload shim can use the core without any of them.
 *
 * Each header includes what it depends on, all of them in this list.
 */
#ifndef ALLOCLAB_CORE_H
#define ALLOCLAB_CORE_H

#include "base.h"
#include "params.h"
#include "features.h"
#include "ops.h"
#include "registry.h"
#include "arena.h"
#include "sim.h"
#include "kthread.h"
#include "clock.h"
#include "counters.h"
#include "lock.h"
#include "ctx.h"
#include "deferred.h"
#include "layer.h"
#include "index.h"
#include "debug.h"

#endif
