/* SPDX-License-Identifier: MIT */
/*
 * alloclab's stand-in for the may_goto loop macros. In BPF, a loop that
 * tests can_loop (or runs cond_break) is bounded by a per-program-run
 * budget the verifier inserts; here the budget is the calling thread's
 * alr_self.budget, refilled at each entry into the tree, and running out is
 * counted (ALR_EV_LOOP_EXHAUSTED) and reported by the layer.
 */
#ifndef ALR_BPF_MAY_GOTO_H
#define ALR_BPF_MAY_GOTO_H

#include "alr_rt.h"

#define can_loop alr_can_loop()
#define cond_break                   \
	({                           \
		if (!alr_can_loop()) \
			break;       \
	})
#define cond_break_label(label)      \
	({                           \
		if (!alr_can_loop()) \
			goto label;  \
	})

#endif /* ALR_BPF_MAY_GOTO_H */
