/* SPDX-License-Identifier: MIT */
/*
 * The decoded trace (trace.h): per-thread arrays grown by al_trace_push,
 * checked and completed by al_trace_seal, and the handle registry replay
 * finds traces through.
 *
 * Memory is metadata (al_meta_alloc: mmap), never the allocator under test.
 * Seal is three passes over the ops: creations (each id once, dense), then
 * references in any thread order (a ref's creation precedes it in seq, an
 * object is consumed once), then the usable-size queries against the
 * consumption seq. O(ops + objects) time, 16 bytes per object of scratch.
 *
 * Concurrency: building and sealing are single-threaded; a sealed trace is
 * read-only. The registry is a small table under a mutex, taken only when a
 * run starts or a trace is registered or dropped.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "alloclab/alloclab.h"
#include "alloclab/trace.h"

#define NOSEQ UINT64_MAX

struct al_trace *al_trace_new(unsigned nthreads)
{
	struct al_trace *t;

	if (!nthreads || nthreads > AL_TRACE_MAX_THREADS)
		return NULL;
	t = al_meta_alloc(sizeof(*t));
	if (!t)
		return NULL;
	t->threads = al_meta_alloc(sizeof(*t->threads) * nthreads);
	if (!t->threads) {
		al_meta_free(t, sizeof(*t));
		return NULL;
	}
	t->nthreads = nthreads;
	for (unsigned i = 0; i < nthreads; i++)
		t->threads[i].parent = AL_TRACE_NOID;
	return t;
}

static void thread_arrays_free(struct al_trace_thread *th)
{
	al_meta_free(th->ops, sizeof(*th->ops) * th->cap);
	al_meta_free(th->seq, sizeof(*th->seq) * th->cap);
	al_meta_free(th->t_ns, sizeof(*th->t_ns) * th->cap);
}

static int thread_grow(struct al_trace_thread *th)
{
	uint64_t cap = th->cap ? th->cap * 2 : 4096;
	struct al_trace_thread n = *th;

	n.cap = cap;
	n.ops = al_meta_alloc(sizeof(*n.ops) * cap);
	n.seq = al_meta_alloc(sizeof(*n.seq) * cap);
	n.t_ns = al_meta_alloc(sizeof(*n.t_ns) * cap);
	if (!n.ops || !n.seq || !n.t_ns) {
		thread_arrays_free(&n);
		return -ENOMEM;
	}
	if (th->nops) {
		memcpy(n.ops, th->ops, sizeof(*n.ops) * th->nops);
		memcpy(n.seq, th->seq, sizeof(*n.seq) * th->nops);
		memcpy(n.t_ns, th->t_ns, sizeof(*n.t_ns) * th->nops);
	}
	thread_arrays_free(th);
	*th = n;
	return 0;
}

int al_trace_push(struct al_trace *t, unsigned thread, const struct al_trace_op *op, uint64_t seq,
		  uint64_t t_ns)
{
	struct al_trace_thread *th;

	if (!t || t->sealed || thread >= t->nthreads || !op || op->kind >= AL_TK_NR)
		return -EINVAL;
	th = &t->threads[thread];
	if (th->nops == th->cap && thread_grow(th))
		return -ENOMEM;
	th->ops[th->nops] = *op;
	th->seq[th->nops] = seq;
	th->t_ns[th->nops] = t_ns;
	th->nops++;
	return 0;
}

/* Whether op consumes its ref (the object is gone after it): free, and a
 * realloc that moved, resized in place or freed (size 0). A realloc that
 * failed leaves the old object as it was, as C says. */
static bool consumes(const struct al_trace_op *op)
{
	if (op->ref == AL_TRACE_NOID)
		return false;
	if (op->kind == AL_TK_FREE)
		return true;
	return op->kind == AL_TK_REALLOC && (op->id != AL_TRACE_NOID || !op->size);
}

static int bad(char *err, size_t errlen, unsigned th, uint64_t i, const char *fmt, uint64_t v)
{
	int n = snprintf(err, errlen, "thread %u, op %llu: ", th, (unsigned long long)i);

	if (n >= 0 && (size_t)n < errlen)
		snprintf(err + n, errlen - (size_t)n, fmt, (unsigned long long)v);
	return -EINVAL;
}

/* Pass 1: per-thread order, kinds, and every creation (each id once). */
static int seal_creations(struct al_trace *t, uint64_t *cseq, char *err, size_t errlen)
{
	for (unsigned k = 0; k < t->nthreads; k++) {
		const struct al_trace_thread *th = &t->threads[k];

		for (uint64_t i = 0; i < th->nops; i++) {
			const struct al_trace_op *op = &th->ops[i];

			if (i && th->seq[i] <= th->seq[i - 1])
				return bad(err, errlen, k, i,
					   "seq %llu does not follow the thread's previous op",
					   th->seq[i]);
			if (i && th->t_ns[i] < th->t_ns[i - 1])
				return bad(err, errlen, k, i, "time %llu ns goes backwards",
					   th->t_ns[i]);
			if (op->kind >= AL_TK_NR)
				return bad(err, errlen, k, i, "unknown kind %llu", op->kind);
			if (op->id == AL_TRACE_NOID)
				continue;
			if (op->id >= t->nobjects)
				return bad(err, errlen, k, i, "id %llu is beyond the ids created",
					   op->id);
			if (cseq[op->id] != NOSEQ)
				return bad(err, errlen, k, i, "id %llu is created twice", op->id);
			cseq[op->id] = th->seq[i];
			t->owner[op->id] = k;
		}
	}
	return 0;
}

/* Pass 2: every reference follows its creation; consumption once. */
static int seal_refs(struct al_trace *t, const uint64_t *cseq, uint64_t *fseq, char *err,
		     size_t errlen)
{
	for (unsigned k = 0; k < t->nthreads; k++) {
		struct al_trace_thread *th = &t->threads[k];

		for (uint64_t i = 0; i < th->nops; i++) {
			struct al_trace_op *op = &th->ops[i];

			t->kind_ops[op->kind]++;
			op->flags &= (uint8_t)~AL_TF_CROSS;
			if (op->flags & AL_TF_UNKNOWN) {
				if (op->ref != AL_TRACE_NOID)
					return bad(err, errlen, k, i, "unknown ref names id %llu",
						   op->ref);
				t->unknown_refs++;
			}
			if (op->kind == AL_TK_THREAD_START && op->aux != AL_TRACE_NOID) {
				if (op->aux >= t->nthreads)
					return bad(err, errlen, k, i,
						   "parent thread %llu does not exist", op->aux);
				th->parent = (uint32_t)op->aux;
			}
			if (op->ref == AL_TRACE_NOID)
				continue;
			if (op->ref >= t->nobjects || cseq[op->ref] == NOSEQ)
				return bad(err, errlen, k, i, "ref %llu was never created",
					   op->ref);
			if (cseq[op->ref] >= th->seq[i])
				return bad(err, errlen, k, i,
					   "ref %llu is used before it is created", op->ref);
			if (t->owner[op->ref] != k) {
				op->flags |= AL_TF_CROSS;
				t->cross_refs++;
			}
			if (!consumes(op))
				continue;
			if (fseq[op->ref] != NOSEQ)
				return bad(err, errlen, k, i, "ref %llu is freed twice", op->ref);
			fseq[op->ref] = th->seq[i];
		}
	}
	return 0;
}

/* Pass 3: no reference after the object is gone. */
static int seal_lifetimes(const struct al_trace *t, const uint64_t *fseq, char *err, size_t errlen)
{
	for (unsigned k = 0; k < t->nthreads; k++) {
		const struct al_trace_thread *th = &t->threads[k];

		for (uint64_t i = 0; i < th->nops; i++) {
			const struct al_trace_op *op = &th->ops[i];

			if (op->ref != AL_TRACE_NOID && fseq[op->ref] < th->seq[i])
				return bad(err, errlen, k, i, "ref %llu is used after it was freed",
					   op->ref);
		}
	}
	return 0;
}

static uint64_t count_ids(const struct al_trace *t)
{
	uint64_t n = 0;

	for (unsigned k = 0; k < t->nthreads; k++)
		for (uint64_t i = 0; i < t->threads[k].nops; i++)
			n += t->threads[k].ops[i].id != AL_TRACE_NOID;
	return n;
}

int al_trace_seal(struct al_trace *t, char *err, size_t errlen)
{
	uint64_t *cseq = NULL, *fseq = NULL, n;
	int ret = -ENOMEM;

	if (!t)
		return -EINVAL;
	if (t->sealed)
		return 0;
	n = count_ids(t);
	al_meta_free(t->owner, sizeof(*t->owner) * (t->nobjects ? t->nobjects : 1));
	t->nobjects = n;
	t->nops = t->unknown_refs = t->cross_refs = 0;
	memset(t->kind_ops, 0, sizeof(t->kind_ops));
	t->owner = al_meta_alloc(sizeof(*t->owner) * (n ? n : 1));
	cseq = al_meta_alloc(sizeof(*cseq) * (n ? n : 1));
	fseq = al_meta_alloc(sizeof(*fseq) * (n ? n : 1));
	if (!t->owner || !cseq || !fseq) {
		snprintf(err, errlen, "out of memory for %llu objects", (unsigned long long)n);
		goto out;
	}
	memset(cseq, 0xff, sizeof(*cseq) * n);
	memset(fseq, 0xff, sizeof(*fseq) * n);
	for (unsigned k = 0; k < t->nthreads; k++)
		t->nops += t->threads[k].nops;
	ret = seal_creations(t, cseq, err, errlen);
	if (!ret)
		ret = seal_refs(t, cseq, fseq, err, errlen);
	if (!ret)
		ret = seal_lifetimes(t, fseq, err, errlen);
	if (!ret)
		t->sealed = 1;
out:
	al_meta_free(cseq, sizeof(*cseq) * (n ? n : 1));
	al_meta_free(fseq, sizeof(*fseq) * (n ? n : 1));
	return ret;
}

void al_trace_free(struct al_trace *t)
{
	if (!t)
		return;
	for (unsigned k = 0; k < t->nthreads; k++)
		thread_arrays_free(&t->threads[k]);
	al_meta_free(t->threads, sizeof(*t->threads) * t->nthreads);
	al_meta_free(t->owner, sizeof(*t->owner) * (t->nobjects ? t->nobjects : 1));
	al_meta_free(t, sizeof(*t));
}

/* ---- the registry ---- */

#define REG_MAX 64

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct al_trace *reg[REG_MAX];
static int64_t reg_gen[REG_MAX]; /* handle = gen * REG_MAX + slot + 1 */
static int64_t reg_next_gen = 1;

int64_t al_trace_register(const struct al_trace *t)
{
	int64_t h = -ENOSPC;

	if (!t || !t->sealed)
		return -EINVAL;
	pthread_mutex_lock(&reg_lock);
	for (int i = 0; i < REG_MAX; i++) {
		if (reg[i])
			continue;
		reg[i] = t;
		reg_gen[i] = reg_next_gen++;
		h = reg_gen[i] * REG_MAX + i + 1;
		break;
	}
	pthread_mutex_unlock(&reg_lock);
	return h;
}

static int reg_slot(int64_t h)
{
	int i;

	if (h <= 0)
		return -1;
	i = (int)((h - 1) % REG_MAX);
	return reg[i] && reg_gen[i] == (h - 1) / REG_MAX ? i : -1;
}

void al_trace_unregister(int64_t h)
{
	int i;

	pthread_mutex_lock(&reg_lock);
	i = reg_slot(h);
	if (i >= 0)
		reg[i] = NULL;
	pthread_mutex_unlock(&reg_lock);
}

const struct al_trace *al_trace_lookup(int64_t h)
{
	const struct al_trace *t = NULL;
	int i;

	pthread_mutex_lock(&reg_lock);
	i = reg_slot(h);
	if (i >= 0)
		t = reg[i];
	pthread_mutex_unlock(&reg_lock);
	return t;
}
