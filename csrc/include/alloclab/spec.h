/* SPDX-License-Identifier: MIT */
/*
 * Refusals reported as facts: a policy spec string that does not parse
 * (al_spec_parse_report, csrc/builder/spec.c) and a stack whose shape the
 * builder would refuse (al_stack_check, csrc/builder/stack.c); a run
 * configuration the engine would refuse is run.h's (al_run_check). The C
 * side decides; a caller with its own wording (Python) formats the message
 * from the facts.
 *
 * A spec's refusal says what is wrong (fault), where (byte offset into the text, the
 * layer's index top first, the parameter's index in its layer's schema) and
 * which text (the offending token), so that a caller with its own wording
 * (Python's Policy) formats its message from these facts without parsing the
 * text again; msg is a complete English message for callers that only print.
 */
#ifndef ALLOCLAB_SPEC_H
#define ALLOCLAB_SPEC_H

#include "stack.h"

#ifdef __cplusplus
extern "C" {
#endif

struct al_preset;

enum al_spec_fault {
	AL_SPEC_OK = 0,
	AL_SPEC_SYNTAX,	  /* malformed text: msg says what, offset where */
	AL_SPEC_LAYER,	  /* no layer is named by the token */
	AL_SPEC_PARAM,	  /* the layer (desc) has no parameter named by the token */
	AL_SPEC_VALUE,	  /* the token is not a value of the parameter's type */
	AL_SPEC_RANGE,	  /* the token's value is outside the parameter's [min, max] */
	AL_SPEC_TOO_MANY, /* more than AL_MAX_LAYERS layers; nlayers says how many */
	/* A stack's shape (al_stack_check): layer is the one at fault, below
	 * the one it cannot stand on (-1 if none). */
	AL_SPEC_NO_DESC,    /* a layer without a descriptor, or one of another ABI */
	AL_SPEC_NO_BACKEND, /* the last layer needs a layer below it */
	AL_SPEC_BOTTOM,	    /* a bottom layer that is not last */
	AL_SPEC_NO_PAGES,   /* a layer that needs a page allocator right below it */
	AL_SPEC_PARAMS,	    /* the layer's parameters (code: what its check returned) */
	AL_SPEC_DISTINCT,   /* a cache that needs distinct objects over shared blocks */
	AL_SPEC_TASK_ONLY,  /* an irq_work refill over a task-level-only layer */
};

struct al_spec_error {
	int fault;			  /* enum al_spec_fault */
	int offset;			  /* byte offset of the fault in the text */
	int layer;			  /* index of the layer, top first; -1 if none */
	int param;			  /* index in desc->params; -1 if none */
	int tok, toklen;		  /* the offending text: [tok, tok + toklen) */
	unsigned nlayers;		  /* layers in the text (AL_SPEC_TOO_MANY) */
	const struct al_layer_desc *desc; /* the layer at fault, NULL if none */
	int below;			  /* the layer below at fault (shape), -1 if none */
	int code;			  /* the error code returned */
	char msg[200];
};

/* Parse "percpu(capacity=16) > buddy", or a preset's name (registry.h), into
 * a spec with every parameter filled in. 0; or -EINVAL (-ERANGE for a value
 * out of range) with *e filled in. */
AL_API int al_spec_parse_report(const char *text, struct al_stack_spec *out,
				struct al_spec_error *e);

/* The preset that the whole of text names (ASCII blanks around it allowed),
 * or NULL: al_spec_parse_report reads that preset's spec. */
AL_API const struct al_preset *al_spec_preset(const char *text);

/* The text [text, text + len) of a value of parameter p, in the grammar of
 * specs (spec.c: blanks around it allowed) into *out: 0; -EINVAL when it is
 * not a value of p's type; -EDOM when it is a duration finer than a whole
 * nanosecond; -ERANGE when its number is beyond int64 (*out untouched). p's
 * [min, max] is the caller's to check. The one reader of values: Python's
 * schema calls it for the command line's and the API's text. */
AL_API int al_value_parse(const struct al_param_desc *p, const char *text, size_t len,
			  int64_t *out);

/* Check a stack spec's shape as al_stack_create does before it creates
 * anything: each layer's descriptor, place and parameters, then the pairs of
 * layers that cannot stack. 0, or an error code with *e filled in. */
AL_API int al_stack_check(const struct al_stack_spec *s, struct al_spec_error *e);

#ifdef __cplusplus
}
#endif
#endif
