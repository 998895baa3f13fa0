/* SPDX-License-Identifier: MIT */
/*
 * Parameter schemas (params.h): a schema's defaults, and the range check
 * every value of a layer's or a workload's parameters passes before a
 * create or a run sees it. A value outside [min, max] is -ERANGE, with err
 * naming the parameter, its value and its range, so the caller's message
 * says which knob to turn.
 *
 * No locks, no allocation; each call touches only its arguments. Cost:
 * linear in the schema's entries.
 */
#include <errno.h>
#include <stdio.h>

#include "alloclab/core.h"

void al_params_default(const struct al_param_desc *p, unsigned n, int64_t *v)
{
	unsigned i;

	for (i = 0; i < n; i++)
		v[i] = p[i].def;
}

int al_params_check(const struct al_param_desc *p, unsigned n, const int64_t *v, char *err,
		    size_t errlen)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		if (v[i] < p[i].min || v[i] > p[i].max) {
			if (err)
				snprintf(err, errlen, "%s=%lld is out of range [%lld, %lld]",
					 p[i].name, (long long)v[i], (long long)p[i].min,
					 (long long)p[i].max);
			return -ERANGE;
		}
	}
	return 0;
}
