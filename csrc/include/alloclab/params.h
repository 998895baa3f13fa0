/* SPDX-License-Identifier: MIT */
/*
 * alloclab parameter schemas: the typed, bounded parameters of a layer or a
 * workload.
 *
 * A descriptor lists its parameters as an array of struct al_param_desc;
 * values travel as int64_t arrays in schema order (sizes in bytes, durations
 * in ns, booleans 0/1, enums as the index of a choice). al_params_check()
 * validates each value against its range and type once, when a stack or a
 * run is built, so a layer's create() and a workload's hooks read params[]
 * without checking again. Relations between parameters (one at most
 * another, a power of two) are the descriptor's own check_params hook.
 *
 * Pure functions: no lock, no allocation, any context.
 */
#ifndef ALLOCLAB_PARAMS_H
#define ALLOCLAB_PARAMS_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

enum al_param_type {
	AL_PARAM_INT = 0,  /* integer */
	AL_PARAM_SIZE = 1, /* byte count; Python accepts "64", "4K", "1M", "1G" */
	AL_PARAM_BOOL = 2, /* 0 or 1 */
	AL_PARAM_ENUM = 3, /* index into the comma-separated choices */
	AL_PARAM_NS = 4	   /* duration in nanoseconds */
};

struct al_param_desc {
	const char *name;    /* identifier, [a-z_][a-z0-9_]* */
	int type;	     /* enum al_param_type */
	int64_t def;	     /* default */
	int64_t min;	     /* inclusive */
	int64_t max;	     /* inclusive */
	const char *choices; /* AL_PARAM_ENUM: "atomic,local"; else NULL */
	const char *doc;     /* one line */
};

/* Validate params[] against a schema: 0 or -EINVAL/-ERANGE with err filled in. */
AL_API int al_params_check(const struct al_param_desc *p, unsigned n, const int64_t *v, char *err,
			   size_t errlen);
/* Fill params[] with the schema defaults. */
AL_API void al_params_default(const struct al_param_desc *p, unsigned n, int64_t *v);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_PARAMS_H */
