/* SPDX-License-Identifier: MIT */
/* alloclab: the whole public API. */
#ifndef ALLOCLAB_H
#define ALLOCLAB_H
#include "ops.h"
#include "core.h"
#include "engine.h"
#include "pages.h"
#include "vmalloc.h"
#include "debug.h"
#endif
