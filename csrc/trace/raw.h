/* SPDX-License-Identifier: MIT */
/*
 * The recorder's raw stream: what the preload shim writes while a program
 * runs (csrc/preload/record.c) and the finaliser decodes (finish.c).
 *
 * One raw file per process image: a file header (struct rec_file_hdr), then
 * chunks in any thread order. Each chunk is a header (struct rec_chunk) and
 * `len` payload bytes of one thread's ops, flushed from that thread's buffer
 * at an offset reserved with one atomic fetch-add on the file's end, so no
 * lock is shared by two recording threads. A chunk decodes alone: its seq,
 * clock and address deltas start from the header's base_seq and base_tick
 * and from address 0. A thread's chunks are in its op order; the same op
 * may be written twice (a buffer flushed at exit by another thread, then by
 * its owner): ops whose seq is not above the thread's last are duplicates.
 * A chunk whose magic is wrong or whose payload runs past the file ends the
 * file (a process killed mid-write). An end chunk (thread REC_END_THREAD)
 * says the image ended cleanly (exit or exec) and how many calls it could
 * not record.
 *
 * An op: one byte, kind (low 4 bits, enum al_trace_kind) and REC_F_* flags
 * (high 4 bits); varint seq delta, varint tick delta; then per kind, each a
 * varint, addresses as zigzag deltas from the chunk's previous address:
 *   malloc          size [addr]
 *   calloc          nmemb elem [addr]
 *   realloc         [old_addr] size seq2_delta [addr]  (old_addr: REC_F_OLD)
 *   free            [addr]
 *   memalign family align size [addr]
 *   usable_size     [addr] result
 *   thread_start    parent+1 (0: none)
 *   thread_exit     -
 * [addr] is absent when REC_F_NULL is set (a NULL result, free(NULL)).
 * Varints are LEB128, little end first.
 */
#ifndef ALLOCLAB_TRACE_RAW_H
#define ALLOCLAB_TRACE_RAW_H

#include <stdint.h>

#define REC_MAGIC	"ALRECRAW"
#define REC_VERSION	1
#define REC_CHUNK_MAGIC 0x4b43524cu /* "LRCK" */
#define REC_END_THREAD	0xffffffffu
#define REC_OP_MAX	64 /* bytes: one op's largest encoding, with room */

enum rec_flags {
	REC_F_NULL = 0x10, /* no address: a NULL result, free(NULL), usable_size(NULL) */
	REC_F_ZERO = 0x20, /* a size-0 request */
	REC_F_OLD = 0x40   /* realloc of an object (not realloc(NULL)) */
};

struct rec_file_hdr {
	char magic[8];	     /* REC_MAGIC */
	uint32_t version;    /* REC_VERSION */
	uint32_t hdr_size;   /* sizeof(struct rec_file_hdr) */
	uint64_t start_tick; /* the clock when the image started recording */
	double ticks_per_ns; /* the clock's calibration */
	int32_t pid, ppid;   /* the process */
	uint32_t tsc;	     /* 1: ticks are the TSC; 0: CLOCK_MONOTONIC ns */
	uint32_t pad;
	uint64_t start_ns; /* CLOCK_REALTIME ns when recording began */
	uint64_t reserved[2];
};

struct rec_chunk {
	uint32_t magic;	    /* REC_CHUNK_MAGIC */
	uint32_t thread;    /* the image's thread index, or REC_END_THREAD */
	uint32_t len;	    /* payload bytes after this header */
	uint32_t nops;	    /* ops in the payload */
	uint64_t base_seq;  /* the first op's seq is base_seq + its delta */
	uint64_t base_tick; /* the thread's previous op's clock (start_tick at first) */
};

/* The end chunk's payload (thread REC_END_THREAD). */
struct rec_end {
	uint64_t end_tick;
	uint64_t unrecorded; /* calls that passed through unrecorded (see record.c) */
	uint32_t threads;    /* thread indices handed out */
	uint32_t why;	     /* REC_END_EXIT or REC_END_EXEC */
};

enum { REC_END_EXIT = 1, REC_END_EXEC = 2 };

#endif /* ALLOCLAB_TRACE_RAW_H */
