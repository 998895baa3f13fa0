/* SPDX-License-Identifier: MIT */
/*
 * alloclab: the whole public API, one header per role.
 *
 *   core.h      the core's headers below, from base.h to debug.h
 *   base.h      export macro, ABI version, limits, compiler hints, identity
 *   params.h    parameter schemas of layers and workloads
 *   ops.h       the layer contract: al_ctx, al_ops, al_allocator, descriptors
 *   registry.h  layers and workloads by name, their descriptors' checks,
 *               AL_REGISTER_*, the C API table
 *   arena.h     metadata memory and reserved address ranges
 *   clock.h     the TSC / monotonic time base
 *   counters.h  per-CPU, per-context-level event counters
 *   lock.h      the queued spinlock with a time budget
 *   ctx.h       the running thread's context, fault injection
 *   deferred.h  irq_work and RCU callbacks, grace periods
 *   layer.h     the layer skeleton: table initialisers, header, pass-throughs
 *   index.h     a buddy backend's object index, read inline by the layers above
 *   debug.h     assertion levels and lock-held checks (compiled out at AL_DEBUG=0)
 *   stack.h     the builder: stacks of layers built from a spec, the guard
 *   spec.h      the builder: spec parsing with fault reports, stack checks
 *   workload.h  the workers a workload runs with
 *   measure.h   latency histograms, memory during a run
 *   run.h       runs: configuration, checks, result, start/wait/stop
 *   trace.h     a recorded program's allocations, decoded (replay)
 *   record.h    the recorder's finaliser: a raw recording to a trace
 *   pages.h     the page-allocator API of a `pages` layer
 *   vmalloc.h   the vmalloc API of a `vmalloc` layer
 *
 * Each header includes what it depends on, so any one may be included alone.
 */
#ifndef ALLOCLAB_H
#define ALLOCLAB_H

/* The layer contract and the services a layer is built from. */
#include "core.h"
#include "base.h"
#include "params.h"
#include "features.h"
#include "ops.h"
#include "registry.h"
#include "arena.h"
#include "clock.h"
#include "counters.h"
#include "lock.h"
#include "ctx.h"
#include "deferred.h"
#include "layer.h"
#include "index.h"
#include "debug.h"

/* The builder: a spec parsed and turned into a stack of layers. */
#include "stack.h"
#include "spec.h"

/* The engine: workloads, measurements, runs. */
#include "workload.h"
#include "measure.h"
#include "run.h"
#include "trace.h"
#include "record.h"

/* The APIs of particular layers. */
#include "pages.h"
#include "vmalloc.h"
#include "sim.h"
#include "kthread.h"
#endif
