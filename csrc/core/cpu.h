/* SPDX-License-Identifier: MIT */
/* Internal topology helpers (core ↔ engine). */
#ifndef ALLOCLAB_CORE_CPU_H
#define ALLOCLAB_CORE_CPU_H
#include <stdint.h>
int al_cpu_nth(unsigned i);
int al_read_steal(uint64_t *total, uint64_t *steal);
#endif
