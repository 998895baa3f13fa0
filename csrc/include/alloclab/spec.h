/* SPDX-License-Identifier: MIT */
/*
 * Policy spec strings: the one parser of the grammar (csrc/core/spec.c) and
 * the structured account of a refusal.
 *
 * A refusal says what is wrong (fault), where (byte offset into the text, the
 * layer's index top first, the parameter's index in its layer's schema) and
 * which text (the offending token), so that a caller with its own wording
 * (Python's Policy) formats its message from these facts without parsing the
 * text again; msg is a complete English message for callers that only print.
 */
#ifndef ALLOCLAB_SPEC_H
#define ALLOCLAB_SPEC_H

#include "engine.h"

#ifdef __cplusplus
extern "C" {
#endif

enum al_spec_fault {
	AL_SPEC_OK = 0,
	AL_SPEC_SYNTAX,	  /* malformed text: msg says what, offset where */
	AL_SPEC_LAYER,	  /* no layer is named by the token */
	AL_SPEC_PARAM,	  /* the layer (desc) has no parameter named by the token */
	AL_SPEC_VALUE,	  /* the token is not a value of the parameter's type */
	AL_SPEC_RANGE,	  /* the token's value is outside the parameter's [min, max] */
	AL_SPEC_TOO_MANY, /* more than AL_MAX_LAYERS layers; nlayers says how many */
};

struct al_spec_error {
	int fault;			  /* enum al_spec_fault */
	int offset;			  /* byte offset of the fault in the text */
	int layer;			  /* index of the layer, top first; -1 if none */
	int param;			  /* index in desc->params; -1 if none */
	int tok, toklen;		  /* the offending text: [tok, tok + toklen) */
	unsigned nlayers;		  /* layers in the text (AL_SPEC_TOO_MANY) */
	const struct al_layer_desc *desc; /* the layer at fault, NULL if none */
	char msg[200];
};

/* Parse "percpu(capacity=16) > buddy" into a spec with every parameter filled
 * in. 0; or -EINVAL (-ERANGE for a value out of range) with *e filled in. */
AL_API int al_spec_parse_report(const char *text, struct al_stack_spec *out,
				struct al_spec_error *e);

#ifdef __cplusplus
}
#endif
#endif
