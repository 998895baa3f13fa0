/* SPDX-License-Identifier: MIT */
/*
 * Between the preload shim (preload.c) and its recorder (record.c): the
 * recorder's entry points, which the shim's public malloc family calls when
 * al_rec_on is set, and the shim's own implementations, which the recorder
 * calls to serve each call (al_shim_*: the policy, or glibc). Hidden: the
 * shim exports only the malloc, exec and thread families.
 */
#ifndef ALLOCLAB_PRELOAD_RECORD_H
#define ALLOCLAB_PRELOAD_RECORD_H

#include <stddef.h>

extern int al_rec_on;

int al_rec_init(int policy);
void al_rec_start(void);
void al_rec_end(int exec);

void *al_rec_malloc(size_t size);
void *al_rec_calloc(size_t n, size_t size);
void al_rec_free(void *p);
void *al_rec_realloc(void *p, size_t size);
void *al_rec_reallocarray(void *p, size_t n, size_t size);
void *al_rec_aligned(unsigned kind, size_t align, size_t size);
int al_rec_posix_memalign(void **out, size_t align, size_t size);
size_t al_rec_usable_size(void *p);

void *al_shim_malloc(size_t size);
void *al_shim_calloc(size_t n, size_t size);
void al_shim_free(void *p);
void *al_shim_realloc(void *p, size_t size);
/* kind: AL_TK_ALIGNED_ALLOC, AL_TK_MEMALIGN, AL_TK_VALLOC or AL_TK_PVALLOC */
void *al_shim_aligned(unsigned kind, size_t align, size_t size);
int al_shim_posix_memalign(void **out, size_t align, size_t size);
size_t al_shim_usable_size(void *p);
void *al_shim_next_sym(const char *name);

#endif /* ALLOCLAB_PRELOAD_RECORD_H */
