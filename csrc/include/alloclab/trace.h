/* SPDX-License-Identifier: MIT */
/*
 * alloclab trace: a real program's malloc-family calls, decoded in memory.
 *
 * A trace is what `alloclab record` captured of one process image: per
 * program thread, its operations in order. Objects are named by ids, dense
 * from 0 in the order they were created (global sequence order), never by
 * address; AL_TRACE_NOID names no object (the argument of free(NULL), the
 * result of an allocation that returned NULL, or an object allocated before
 * recording began, flagged AL_TF_UNKNOWN).
 *
 * Per thread three parallel arrays: ops[] (what replay reads: 32 bytes an
 * op), seq[] (the global sequence number: a total order of all threads'
 * operations) and t_ns[] (ns since the trace began, for analysis). The
 * file's outer header and its compression belong to alloclab.trace
 * (Python); this header is the decoded form shared by the body codec, the
 * recorder's finaliser, the replay workload and the analysis.
 *
 * Building: al_trace_new, al_trace_push per op (in each thread's order),
 * then al_trace_seal, which checks the whole trace (ids created once, used
 * after they are created and before they are freed, in seq order; seq
 * unique) and fills in nobjects, owner[], AL_TF_CROSS and the totals. Only a
 * sealed trace may be replayed or registered. A sealed trace is read-only,
 * so any number of threads may read it at once.
 *
 * Replay finds a trace through a handle (al_trace_register): a workload
 * parameter is an int64, and a handle the registry does not know is
 * refused, never dereferenced.
 */
#ifndef ALLOCLAB_TRACE_H
#define ALLOCLAB_TRACE_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AL_TRACE_NOID 0xffffffffu

enum al_trace_kind {
	AL_TK_MALLOC = 0,	  /* size; id */
	AL_TK_CALLOC = 1,	  /* size = nmemb * elem; aux = nmemb; id */
	AL_TK_REALLOC = 2,	  /* size = new size; aux = old size; ref = old id; id = new id */
	AL_TK_FREE = 3,		  /* ref */
	AL_TK_POSIX_MEMALIGN = 4, /* size; aux = alignment; id */
	AL_TK_ALIGNED_ALLOC = 5,  /* size; aux = alignment; id */
	AL_TK_MEMALIGN = 6,	  /* size; aux = alignment; id */
	AL_TK_VALLOC = 7,	  /* size; aux = alignment (the page); id */
	AL_TK_PVALLOC = 8,	  /* size (as asked); aux = alignment; id */
	AL_TK_USABLE_SIZE = 9,	  /* ref; size = what malloc_usable_size returned */
	AL_TK_THREAD_START = 10,  /* aux = parent thread index (AL_TRACE_NOID: none) */
	AL_TK_THREAD_EXIT = 11,
	AL_TK_NR
};

enum al_trace_flags {
	AL_TF_NULL = 1u << 0,	 /* the call returned NULL (or an error), or free(NULL) */
	AL_TF_MOVED = 1u << 1,	 /* realloc returned another address */
	AL_TF_CROSS = 1u << 2,	 /* ref was created by another thread (set by seal) */
	AL_TF_UNKNOWN = 1u << 3, /* ref was created before recording began: ref = NOID */
	AL_TF_ZERO = 1u << 4	 /* a size-0 request */
};

struct al_trace_op {
	uint64_t size; /* bytes, as per kind */
	uint64_t aux;  /* per kind: calloc's nmemb, realloc's old size, the alignment */
	uint32_t id;   /* the object this op creates, or AL_TRACE_NOID */
	uint32_t ref;  /* the object this op frees, resizes or asks about, or AL_TRACE_NOID */
	uint32_t dt;   /* ns since this thread's previous op, saturated at UINT32_MAX */
	uint8_t kind;  /* enum al_trace_kind */
	uint8_t flags; /* enum al_trace_flags */
	uint16_t pad;
};

struct al_trace_thread {
	uint32_t parent; /* index of the thread that created it, or AL_TRACE_NOID */
	uint32_t pad;
	uint64_t nops;
	struct al_trace_op *ops;
	uint64_t *seq;	/* global sequence numbers, increasing within a thread */
	uint64_t *t_ns; /* ns since the trace began, non-decreasing within a thread */
	uint64_t cap;	/* capacity of the three arrays (al_trace_push) */
};

struct al_trace {
	unsigned nthreads;
	unsigned sealed;
	struct al_trace_thread *threads;
	/* Filled in by al_trace_seal: */
	uint64_t nops;		     /* all threads */
	uint64_t nobjects;	     /* ids 0..nobjects-1 */
	uint32_t *owner;	     /* [nobjects]: the thread that created each id */
	uint64_t unknown_refs;	     /* ops whose ref was created before recording */
	uint64_t cross_refs;	     /* ops whose ref another thread created */
	uint64_t kind_ops[AL_TK_NR]; /* ops per kind */
};

/* An empty trace of nthreads threads (1..AL_TRACE_MAX_THREADS); NULL on ENOMEM. */
#define AL_TRACE_MAX_THREADS 65536
AL_API struct al_trace *al_trace_new(unsigned nthreads);
/* Append one op to thread `thread`: 0, -EINVAL (bad thread, sealed trace,
 * kind out of range), or -ENOMEM. */
AL_API int al_trace_push(struct al_trace *t, unsigned thread, const struct al_trace_op *op,
			 uint64_t seq, uint64_t t_ns);
/* Check and complete the trace: 0, or -EINVAL with err naming the thread,
 * the op index and what is wrong (-ENOMEM on ENOMEM). Idempotent. */
AL_API int al_trace_seal(struct al_trace *t, char *err, size_t errlen);
AL_API void al_trace_free(struct al_trace *t);

/* ---- the body codec (codec.c; the file around it: docs/traces.md) ----
 *
 * The body is the trace's ops as bytes: a header (thread count; per thread
 * its parent, op count, start time and stream length) then one stream per
 * thread, each op varint-coded as deltas from the thread's previous op.
 *
 * Encode: a sealed trace into buf. With buf NULL, only *len = the size
 * needed (0). Else 0 and *len = bytes written; -ENOSPC (*len = the size
 * needed) when cap is too small; -EINVAL with err when the trace is not
 * sealed or an op has flag bits the format does not define. */
AL_API int al_trace_encode(const struct al_trace *t, void *buf, size_t cap, size_t *len, char *err,
			   size_t errlen);
/* Decode a body into a new sealed trace (*out; al_trace_free it). The input
 * is not trusted: 0, or -EINVAL with err naming the body offset and what
 * was expected there (or, for a body that decodes but does not seal, the
 * thread, the op and what is wrong), -ENOMEM. *out is NULL on error. */
AL_API int al_trace_decode(const void *buf, size_t len, struct al_trace **out, char *err,
			   size_t errlen);

/* Replay's handles: register a sealed trace (the registry does not own it:
 * unregister before freeing it). >0, or -EINVAL (not sealed), -ENOSPC. */
AL_API int64_t al_trace_register(const struct al_trace *t);
AL_API void al_trace_unregister(int64_t handle);
/* The registered trace, or NULL for a handle the registry does not hold. */
AL_API const struct al_trace *al_trace_lookup(int64_t handle);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_TRACE_H */
