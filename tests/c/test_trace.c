/* SPDX-License-Identifier: MIT */
/*
 * The decoded trace and its body codec: seal refuses inconsistent traces
 * with the thread, op and reason; encode/decode round-trips every kind,
 * flag and field exactly; the decoder, fed every truncation, every single
 * byte change and seeded garbage, returns 0 (a sealed trace) or -EINVAL
 * with a message, never reads out of bounds (run under ASan) and never
 * allocates more than the input can describe.
 */
#include <errno.h>
#include <stdint.h>

#include "test.h"

#define NOID AL_TRACE_NOID

static struct al_trace_op op(unsigned kind, uint64_t size, uint64_t aux, uint32_t id, uint32_t ref,
			     uint32_t dt, unsigned flags)
{
	struct al_trace_op o = { .size = size, .aux = aux, .id = id, .ref = ref, .dt = dt };

	o.kind = (uint8_t)kind;
	o.flags = (uint8_t)flags;
	return o;
}

/* Two threads: every kind, every stored flag, a cross-thread free, an
 * unknown ref, a 2^40 size, a gap beyond 32 bits, an op with a field its
 * kind does not carry, a dt that does not follow from t_ns. */
static struct al_trace *sample(void)
{
	struct al_trace *t = al_trace_new(2);
	struct al_trace_op a[] = {
		op(AL_TK_THREAD_START, 0, NOID, NOID, NOID, 0, 0),
		op(AL_TK_MALLOC, 24, 0, 0, NOID, 10, 0),
		op(AL_TK_CALLOC, 40, 4, 1, NOID, UINT32_MAX, 0),
		op(AL_TK_REALLOC, 1ull << 40, 40, 2, 1, 7, AL_TF_MOVED),
		op(AL_TK_FREE, 0, 0, NOID, NOID, 3, AL_TF_NULL),
		op(AL_TK_FREE, 0, 0, NOID, NOID, 3, AL_TF_UNKNOWN),
		op(AL_TK_MALLOC, 0, 0, NOID, NOID, 1, AL_TF_NULL | AL_TF_ZERO),
		op(AL_TK_USABLE_SIZE, 24, 0, NOID, 0, 1, 0),
		op(AL_TK_POSIX_MEMALIGN, 100, 64, 3, NOID, 1, 0),
		op(AL_TK_ALIGNED_ALLOC, 128, 128, 4, NOID, 1, 0),
		op(AL_TK_MEMALIGN, 8, 32, 5, NOID, 1, 0),
		op(AL_TK_VALLOC, 10, 4096, 6, NOID, 1, 0),
		op(AL_TK_PVALLOC, 10, 4096, 7, NOID, 1, 0),
		op(AL_TK_MALLOC, 5, 9, 8, NOID, 12345, 0),
	};
	uint64_t at[] = {
		0, 10, 1ull << 34, (1ull << 34) + 7, (1ull << 34) + 10, (1ull << 34) + 13
	};
	struct al_trace_op b[] = {
		op(AL_TK_THREAD_START, 0, 0, NOID, NOID, 0, 0),
		op(AL_TK_FREE, 0, 0, NOID, 0, 0, 0),
		op(AL_TK_FREE, 0, 0, NOID, 3, 0, 0),
		op(AL_TK_THREAD_EXIT, 0, 0, NOID, NOID, 0, 0),
	};
	uint64_t seq = 1, now = 0;

	for (unsigned i = 0; i < sizeof(a) / sizeof(a[0]); i++) {
		now = i < 6 ? at[i] : now + 1;
		CHECK_EQ(al_trace_push(t, 0, &a[i], seq++, now), 0);
	}
	for (unsigned i = 0; i < sizeof(b) / sizeof(b[0]); i++)
		CHECK_EQ(al_trace_push(t, 1, &b[i], seq++, 5000 + i), 0);
	return t;
}

static void check_same(const struct al_trace *x, const struct al_trace *y)
{
	CHECK_EQ(x->nthreads, y->nthreads);
	CHECK_EQ(x->nops, y->nops);
	CHECK_EQ(x->nobjects, y->nobjects);
	CHECK_EQ(x->cross_refs, y->cross_refs);
	CHECK_EQ(x->unknown_refs, y->unknown_refs);
	for (unsigned k = 0; k < x->nthreads && k < y->nthreads; k++) {
		const struct al_trace_thread *a = &x->threads[k], *b = &y->threads[k];

		CHECK_EQ(a->nops, b->nops);
		CHECK_EQ(a->parent, b->parent);
		if (a->nops != b->nops)
			continue;
		CHECK(!memcmp(a->ops, b->ops, sizeof(*a->ops) * a->nops));
		CHECK(!memcmp(a->seq, b->seq, sizeof(*a->seq) * a->nops));
		CHECK(!memcmp(a->t_ns, b->t_ns, sizeof(*a->t_ns) * a->nops));
	}
}

/* The sample trace's body, malloc'ed; *len its length. */
static uint8_t *sample_body(size_t *len)
{
	struct al_trace *t = sample();
	char err[200];
	uint8_t *buf;

	CHECK_EQ(al_trace_seal(t, err, sizeof(err)), 0);
	CHECK_EQ(al_trace_encode(t, NULL, 0, len, err, sizeof(err)), 0);
	buf = malloc(*len);
	CHECK_EQ(al_trace_encode(t, buf, *len, len, err, sizeof(err)), 0);
	al_trace_free(t);
	return buf;
}

TEST(test_round_trip)
{
	struct al_trace *t = sample(), *u = NULL;
	char err[200];
	uint8_t small[4];
	size_t len = 0, len2 = 0;
	uint8_t *buf;

	CHECK_EQ(al_trace_encode(t, NULL, 0, &len, err, sizeof(err)), -EINVAL); /* not sealed */
	CHECK(strstr(err, "sealed") != NULL);
	CHECK_EQ(al_trace_seal(t, err, sizeof(err)), 0);
	CHECK_EQ(t->cross_refs, 2);
	CHECK_EQ(t->unknown_refs, 1);
	CHECK_EQ(al_trace_encode(t, NULL, 0, &len, err, sizeof(err)), 0);
	CHECK(len > 40 && len < 200);
	CHECK_EQ(al_trace_encode(t, small, sizeof(small), &len2, err, sizeof(err)), -ENOSPC);
	CHECK_EQ(len2, len);
	buf = malloc(len);
	CHECK_EQ(al_trace_encode(t, buf, len, &len2, err, sizeof(err)), 0);
	CHECK_EQ(len2, len);
	CHECK_EQ(al_trace_decode(buf, len, &u, err, sizeof(err)), 0);
	CHECK(u && u->sealed);
	if (u)
		check_same(t, u);
	CHECK_EQ(u->threads[1].parent, 0);
	CHECK_EQ(u->threads[0].ops[2].dt, UINT32_MAX); /* the gap of 2^34 - 10 ns */
	CHECK(u->threads[0].t_ns[2] == 1ull << 34);
	al_trace_free(u);
	al_trace_free(t);
	free(buf);
}

TEST(test_encode_refuses_undefined_flags)
{
	struct al_trace *t = al_trace_new(1);
	struct al_trace_op o = op(AL_TK_MALLOC, 8, 0, 0, NOID, 0, 0x40);
	char err[200];
	size_t len;

	CHECK_EQ(al_trace_push(t, 0, &o, 1, 0), 0);
	CHECK_EQ(al_trace_seal(t, err, sizeof(err)), 0);
	CHECK_EQ(al_trace_encode(t, NULL, 0, &len, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "thread 0, op 0: flags 0x40") != NULL);
	al_trace_free(t);
}

/* Decode must give 0 and a sealed trace, or -EINVAL, a message and NULL. */
static int decode_checked(const uint8_t *buf, size_t len)
{
	struct al_trace *u = (struct al_trace *)1;
	char err[200] = "";
	int rc = al_trace_decode(buf, len, &u, err, sizeof(err));

	CHECK(rc == 0 || rc == -EINVAL);
	if (rc) {
		CHECK(u == NULL);
		CHECK(!strncmp(err, "body offset ", 12) || !strncmp(err, "the ops decode", 14));
	} else {
		CHECK(u && u->sealed);
	}
	al_trace_free(rc ? NULL : u);
	return rc;
}

TEST(test_every_truncation_fails)
{
	size_t len;
	uint8_t *buf = sample_body(&len);

	for (size_t n = 0; n < len; n++) {
		/* A copy of exactly n bytes, so ASan sees a read past its end. */
		uint8_t *cut = malloc(n ? n : 1);

		memcpy(cut, buf, n);
		CHECK_EQ(decode_checked(cut, n), -EINVAL);
		free(cut);
	}
	CHECK_EQ(decode_checked(buf, len), 0);
	free(buf);
}

TEST(test_every_byte_change_is_safe)
{
	size_t len;
	uint8_t *buf = sample_body(&len), *b = malloc(len);
	static const uint8_t xors[] = { 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xff };
	unsigned refused = 0;

	for (size_t i = 0; i < len; i++)
		for (unsigned x = 0; x < sizeof(xors); x++) {
			memcpy(b, buf, len);
			b[i] ^= xors[x];
			refused += decode_checked(b, len) != 0;
		}
	CHECK(refused > len); /* most changes are caught; the rest decode to a sealed trace */
	free(b);
	free(buf);
}

TEST(test_garbage_is_refused)
{
	uint64_t x = 0x9E3779B97F4A7C15ull;
	uint8_t buf[512];

	for (unsigned round = 0; round < 20000; round++) {
		size_t n = round % sizeof(buf);

		for (size_t i = 0; i < n; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			buf[i] = (uint8_t)x;
		}
		if (n > 2 && round % 2) /* a plausible start: few threads */
			buf[0] = (uint8_t)(1 + round % 3);
		decode_checked(buf, n);
	}
}

static void check_refused(const uint8_t *buf, size_t len, const char *msg)
{
	struct al_trace *u = NULL;
	char err[200] = "";

	CHECK_EQ(al_trace_decode(buf, len, &u, err, sizeof(err)), -EINVAL);
	CHECK(u == NULL);
	if (!strstr(err, msg)) {
		fprintf(stderr, "expected \"%s\", got \"%s\"\n", msg, err);
		CHECK(0);
	}
}

TEST(test_decode_errors_name_offset)
{
	/* nthreads 1; parent none, 1 op, start 0, 3 bytes; a varint cut short */
	const uint8_t cut[] = { 1, 0, 1, 0, 3, 0x00, 0x80, 0x80 };
	const uint8_t huge_threads[] = { 0x80, 0x80, 0x80, 0x80, 0x80, 0x01 };
	const uint8_t huge_ops[] = { 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 3, 0, 0, 0 };
	const uint8_t long_var[] = { 1,	   0,	 1,    0,    12,   0,	 0xff, 0xff, 0xff,
				     0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0 };
	const uint8_t trailing[] = { 1, 0, 1, 0, 4, 0x0b, 1, 0, 0 };
	const uint8_t past_end[] = { 1, 0, 1, 0, 9, 0x0b, 1, 0 };
	const uint8_t bad_kind[] = { 1, 0, 1, 0, 3, 0x0c, 1, 0 };
	const uint8_t bad_ext[] = { 1, 0, 1, 0, 4, 0x8b, 0x08, 1, 0 };
	const uint8_t bad_parent[] = { 1, 2, 1, 0, 3, 0x0b, 1, 0 };
	const uint8_t bad_id[] = { 1, 0, 1, 0, 5, 0x00, 1, 0, 8, 1 };  /* id -1 */
	const uint8_t never_made[] = { 1, 0, 1, 0, 4, 0x03, 1, 0, 5 }; /* free(id 1) */

	check_refused(cut, sizeof(cut), "body offset 8: thread 0's stream ends inside an op");
	check_refused(huge_threads, sizeof(huge_threads),
		      "body offset 0: 34359738368 threads; a trace has 1..65536");
	check_refused(huge_ops, sizeof(huge_ops), "body offset 1: thread 0's 4294967295 ops");
	check_refused(long_var, sizeof(long_var), "body offset 6: a varint longer than 64 bits");
	check_refused(trailing, sizeof(trailing), "body offset 8: thread 0's stream has 1 bytes");
	check_refused(past_end, sizeof(past_end), "body offset 1: thread 0's 9-byte stream runs");
	check_refused(bad_kind, sizeof(bad_kind),
		      "body offset 5: thread 0's stream: op kind 12; kinds are 0..11");
	check_refused(bad_ext, sizeof(bad_ext),
		      "body offset 6: thread 0's stream: op extension bits 0x8");
	check_refused(bad_parent, sizeof(bad_parent), "thread 0's parent is thread 1; threads are");
	check_refused(bad_id, sizeof(bad_id),
		      "body offset 9: thread 0's stream: id -1 (delta 0 from");
	check_refused(never_made, sizeof(never_made),
		      "do not seal: thread 0, op 0: ref 1 was never");
	check_refused(NULL, 0, "body offset 0: the body ends inside its thread count");
}

/* A one-thread trace of the given ops, sealed: the rc and message. */
static int seal_ops(const struct al_trace_op *ops, unsigned n, const uint64_t *seq,
		    const uint64_t *t_ns, char *err, size_t errlen)
{
	struct al_trace *t = al_trace_new(1);
	int rc;

	for (unsigned i = 0; i < n; i++)
		CHECK_EQ(al_trace_push(t, 0, &ops[i], seq[i], t_ns[i]), 0);
	rc = al_trace_seal(t, err, errlen);
	al_trace_free(t);
	return rc;
}

TEST(test_seal_checks)
{
	const uint64_t seq[] = { 1, 2, 3 }, back[] = { 1, 3, 2 }, t0[] = { 0, 0, 0 };
	const uint64_t tback[] = { 5, 4, 6 };
	const struct al_trace_op twice[] = { op(AL_TK_MALLOC, 8, 0, 0, NOID, 0, 0),
					     op(AL_TK_FREE, 0, 0, NOID, 0, 0, 0),
					     op(AL_TK_FREE, 0, 0, NOID, 0, 0, 0) };
	const struct al_trace_op after[] = { op(AL_TK_MALLOC, 8, 0, 0, NOID, 0, 0),
					     op(AL_TK_FREE, 0, 0, NOID, 0, 0, 0),
					     op(AL_TK_USABLE_SIZE, 8, 0, NOID, 0, 0, 0) };
	const struct al_trace_op dup[] = { op(AL_TK_MALLOC, 8, 0, 0, NOID, 0, 0),
					   op(AL_TK_MALLOC, 8, 0, 0, NOID, 0, 0),
					   op(AL_TK_MALLOC, 8, 0, 1, NOID, 0, 0) };
	const struct al_trace_op unk[] = { op(AL_TK_MALLOC, 8, 0, 0, NOID, 0, 0),
					   op(AL_TK_FREE, 0, 0, NOID, 0, 0, AL_TF_UNKNOWN),
					   op(AL_TK_THREAD_EXIT, 0, 0, NOID, NOID, 0, 0) };
	struct al_trace *t = al_trace_new(1);
	struct al_trace_op bad_kind = op(AL_TK_NR, 0, 0, NOID, NOID, 0, 0);
	char err[200];

	CHECK_EQ(seal_ops(twice, 3, seq, t0, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "thread 0, op 2: ref 0 is freed twice") != NULL);
	CHECK_EQ(seal_ops(after, 3, seq, t0, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "thread 0, op 2: ref 0 is used after it was freed") != NULL);
	CHECK_EQ(seal_ops(dup, 3, seq, t0, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "thread 0, op 1: id 0 is created twice") != NULL);
	CHECK_EQ(seal_ops(unk, 3, seq, t0, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "thread 0, op 1: unknown ref names id 0") != NULL);
	CHECK_EQ(seal_ops(twice, 2, back, t0, err, sizeof(err)), 0);
	CHECK_EQ(seal_ops(twice, 3, back, t0, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "thread 0, op 2: seq 2 does not follow") != NULL);
	CHECK_EQ(seal_ops(twice, 2, seq, tback, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "thread 0, op 1: time 4 ns goes backwards") != NULL);
	CHECK_EQ(al_trace_push(t, 0, &bad_kind, 1, 0), -EINVAL);
	CHECK_EQ(al_trace_push(t, 1, &twice[0], 1, 0), -EINVAL);
	CHECK_EQ(al_trace_seal(t, err, sizeof(err)), 0);
	CHECK_EQ(al_trace_push(t, 0, &twice[0], 1, 0), -EINVAL); /* sealed */
	al_trace_free(t);
	CHECK(al_trace_new(0) == NULL);
	CHECK(al_trace_new(AL_TRACE_MAX_THREADS + 1) == NULL);
}

int main(void)
{
	RUN(test_round_trip);
	RUN(test_encode_refuses_undefined_flags);
	RUN(test_every_truncation_fails);
	RUN(test_every_byte_change_is_safe);
	RUN(test_garbage_is_refused);
	RUN(test_decode_errors_name_offset);
	RUN(test_seal_checks);
	return TEST_SUMMARY();
}
