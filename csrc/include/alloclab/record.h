/* SPDX-License-Identifier: MIT */
/*
 * alloclab record: the finaliser, which turns the raw file the preload shim
 * wrote for one process image (ALLOCLAB_RECORD, docs/record.md) into a
 * sealed trace (trace.h).
 *
 * It decodes every complete chunk, drops ops written twice, merges the
 * threads in global sequence order and names objects by dense ids in that
 * order: an address maps to the id of the last allocation that returned it
 * until a free (or realloc) gives it back, so a reused address is a new
 * object. A free, realloc or usable_size of an address the trace never
 * allocated (memory from before recording began, or from a call the shim
 * passed through unrecorded) is flagged AL_TF_UNKNOWN with ref NOID. A file
 * cut short (a process killed) is finalised up to its last complete chunk,
 * and info says so. Time is converted from the recorded clock ticks to ns
 * with the calibration in the file's header.
 *
 * Cost: one pass over the file, a heap merge of the threads (log threads per
 * op), a hash table of live addresses; the trace (48 bytes per op) and
 * about 48 bytes per live object while it runs.
 */
#ifndef ALLOCLAB_RECORD_H
#define ALLOCLAB_RECORD_H

#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

struct al_rec_info {
	int32_t pid, ppid;
	uint32_t version;     /* the raw format's */
	uint32_t complete;    /* the image ended (exit or exec) and every chunk is whole */
	uint32_t end;	      /* how the image ended: 0 unknown (killed), 1 exit, 2 exec */
	uint32_t threads;     /* threads in the trace */
	uint64_t start_ns;    /* CLOCK_REALTIME when recording began */
	uint64_t file_bytes;  /* the raw file's size */
	uint64_t valid_bytes; /* read up to here: the end of the last complete chunk */
	uint64_t chunks;      /* complete chunks read */
	uint64_t ops;	      /* ops in the trace */
	uint64_t duplicates;  /* ops written twice, dropped */
	uint64_t unrecorded;  /* calls the shim passed through unrecorded (end chunk) */
	double ticks_per_ns;  /* the recorded clock's calibration */
	char note[256];	      /* why the file ends early, "" when complete */
};

/* Finalise the raw file at path: 0 and *out a sealed trace (free it with
 * al_trace_free), info filled in; -EINVAL when it is not a raw file of this
 * format version or a chunk contradicts the rest (err says which and at
 * which offset), -errno when it cannot be read, -ENOMEM. Never prints. */
AL_API int al_rec_finish(const char *path, struct al_trace **out, struct al_rec_info *info,
			 char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* ALLOCLAB_RECORD_H */
