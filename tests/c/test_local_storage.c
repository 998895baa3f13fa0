/* SPDX-License-Identifier: MIT */
/*
 * local-storage-create through al_run: every era's allocator and free path
 * runs without leaks, the counts per create are exact (two allocations, two
 * charges for sockets, the era's free path), a publish race provoked through
 * the "local_storage.publish" injection point frees both objects and counts
 * -EAGAIN, the helper-thread irq_work modes run with several producers,
 * other maps' elements (other_maps) are made and freed with their owner, and
 * exited tasks' storage is freed on the reaper's CPU.
 */
#include <errno.h>
#include <math.h>

#include "t_spec.h"

static double value(const struct al_run_result *r, const char *name)
{
	unsigned i;

	for (i = 0; i < r->nmetrics; i++)
		if (!strcmp(r->metrics[i].name, name))
			return r->metrics[i].value;
	return NAN;
}

static long long layer_stat(const struct al_run_result *r, const char *layer, const char *name)
{
	unsigned l, i;

	for (l = 0; l < r->nlayers; l++)
		if (!strcmp(r->layers[l].layer, layer))
			for (i = 0; i < r->layers[l].n; i++)
				if (!strcmp(r->layers[l].v[i].name, name))
					return (long long)r->layers[l].v[i].value;
	return -1;
}

static struct al_run_result res;

/* One al_run of local-storage-create on spec; workload params as name/value pairs. */
static int run(const char *spec, unsigned producers, const char *const *kv, unsigned nkv)
{
	const struct al_workload_desc *wl = al_workload_find("local-storage-create");
	struct al_run_config cfg;
	unsigned i, j;

	memset(&cfg, 0, sizeof(cfg));
	if (!wl || t_spec_fill(spec, &cfg.stack))
		return -1;
	cfg.workload = wl;
	al_params_default(wl->params, wl->nparams, cfg.wparams);
	for (i = 0; i + 1 < nkv; i += 2)
		for (j = 0; j < wl->nparams; j++)
			if (!strcmp(wl->params[j].name, kv[i]))
				t_param_value(&wl->params[j], kv[i + 1], &cfg.wparams[j]);
	cfg.producers = producers;
	cfg.cpu_mode = AL_CPU_VIRTUAL;
	cfg.timing = AL_TIMING_BATCH;
	cfg.warmup_cycles = 2;
	cfg.cycles = 20;
	cfg.seed = 1;
	return al_run(&cfg, &res);
}

static const char *const SOCKET[] = { "storage_type", "socket", "batch_size", "16" };
static const char *const TASK[] = { "storage_type", "task", "batch_size", "16" };
static const char *const TASK_HERE[] = {
	"storage_type", "task", "batch_size", "16", "reaper", "0"
};

static void check_clean(const char *what)
{
	unsigned l;

	if (res.status)
		fprintf(stderr, "%s: %s\n", what, res.error);
	CHECK_EQ(res.status, 0);
	for (l = 0; l < res.nlayers; l++)
		CHECK_EQ(res.leaked[l], 0);
}

TEST(test_kzalloc_socket_exact)
{
	CHECK_EQ(run("slab(zero=true)", 1, SOCKET, 4), 0);
	check_clean("kzalloc");
	CHECK_EQ(value(&res, "creates"), 20 * 16);
	CHECK_EQ(value(&res, "create_errs"), 0);
	CHECK_EQ(value(&res, "charges"), 2 * 20 * 16);
	CHECK_EQ(value(&res, "uncharges"), 2 * 20 * 16);
	CHECK_EQ(value(&res, "kfree_rcu"), 2 * 20 * 16);
	CHECK(isnan(value(&res, "owner_kmallocs"))); /* the model adds no seed background */
	CHECK_EQ(res.alloc_ops, 2 * 20 * 16);
	CHECK_EQ(layer_stat(&res, "slab", "kmallocs"), 2 * 20 * 16);
	CHECK_EQ(layer_stat(&res, "slab", "traced_kmallocs"), 2 * 20 * 16);
}

TEST(test_nolock_call_rcu)
{
	CHECK_EQ(run("nolock > slab", 1, SOCKET, 4), 0);
	check_clean("kmalloc_nolock");
	CHECK_EQ(value(&res, "creates"), 20 * 16);
	CHECK_EQ(value(&res, "call_rcu"), 2 * 20 * 16);
	CHECK_EQ(layer_stat(&res, "slab", "traced_kmallocs"), 0);
	CHECK_EQ(layer_stat(&res, "nolock", "frees"), value(&res, "rcu_callbacks_run"));
}

TEST(test_bpf_ma_task_reuse_now)
{
	CHECK_EQ(run("bpf_ma(mode=fixed) > slab", 1, TASK_HERE, 6), 0);
	check_clean("bpf_ma");
	CHECK_EQ(value(&res, "creates"), 20 * 16);
	CHECK_EQ(value(&res, "reuse_now"), 2 * 20 * 16);
	CHECK_EQ(value(&res, "charges"), 0); /* task storage has no charge callback */
	CHECK_EQ(layer_stat(&res, "bpf_ma", "instances"), 0); /* made in warmup */
	CHECK_EQ(layer_stat(&res, "bpf_ma", "frees"), 2 * 20 * 16);
}

/* The reaper: every exited task is freed on its model CPU, one more than
 * the producers' (so each free is remote), while it runs beside them
 * (several producers: the hand-over list and the reaper's lock, under
 * TSan); whatever it had not freed when the run ended is freed at teardown,
 * so nothing leaks. reaper=false keeps the frees on the creating CPU. */
TEST(test_task_frees_on_the_reaper)
{
	static const char *const specs[] = { "bpf_ma(mode=fixed) > slab", "slab(zero=true)" };
	unsigned i, p;

	for (i = 0; i < 2; i++)
		for (p = 1; p <= 3; p += 2) {
			CHECK_EQ(run(specs[i], p, TASK, 4), 0);
			check_clean(specs[i]);
			CHECK_EQ(value(&res, "reaper"), 1);
			CHECK_EQ(value(&res, "task_puts"), p * 20 * 16);
			CHECK(value(&res, "task_frees") > 0);
			CHECK_EQ(value(&res, "task_frees_remote"), value(&res, "task_frees"));
		}
	CHECK_EQ(run("bpf_ma(mode=fixed) > slab", 1, TASK_HERE, 6), 0);
	check_clean("reaper=0");
	CHECK_EQ(value(&res, "reaper"), 0);
	CHECK_EQ(value(&res, "task_frees"), 20 * 16);
	CHECK_EQ(value(&res, "task_frees_remote"), 0);
}

static const char *const SOCKET_OTHER2[] = { "storage_type", "socket",	   "batch_size",
					     "16",	     "other_maps", "2" };

/* Two other maps on every socket: two elements more per create, linked into
 * the storage and their own maps' buckets, all freed with the socket (several
 * producers: the storages' and buckets' locks, under TSan). */
TEST(test_other_maps_elements)
{
	static const char *const specs[] = { "slab(zero=true)", "nolock > slab" };
	unsigned i, p;

	for (i = 0; i < 2; i++)
		for (p = 1; p <= 3; p += 2) {
			CHECK_EQ(run(specs[i], p, SOCKET_OTHER2, 6), 0);
			check_clean(specs[i]);
			CHECK_EQ(value(&res, "creates"), p * 20 * 16);
			CHECK_EQ(value(&res, "other_elems"), 2 * p * 20 * 16);
			CHECK_EQ(value(&res, "other_errs"), 0);
			CHECK_EQ(res.alloc_ops, 4 * p * 20 * 16);
			CHECK_EQ(value(&res, "charges"), 4 * p * 20 * 16);
			CHECK_EQ(value(&res, "uncharges"), 4 * p * 20 * 16);
			/* kzalloc: each element and storage, and a new cg slab's obj_exts */
			CHECK_EQ(layer_stat(&res, "slab", "traced_kmallocs"),
				 i ? 0
				   : 4 * p * 20 * 16 + layer_stat(&res, "slab", "obj_exts_allocs"));
		}
}

static void *fake_storage[32]; /* "another CPU's" storage: its owner is not ours */
static int publishes;

/* The 40th publish (in the measured phase: warmup is 2 x 16) loses its race. */
static void steal_publish(const char *point, struct al_ctx *c, void *arg)
{
	(void)c;
	if (!strcmp(point, "local_storage.publish") && ++publishes == 40)
		*(void **)arg = fake_storage;
}

TEST(test_publish_race_counts_eagain)
{
	publishes = 0;
	al_inject_hook = steal_publish;
	CHECK_EQ(run("nolock > slab", 1, SOCKET, 4), 0);
	al_inject_hook = NULL;
	check_clean("eagain");
	CHECK_EQ(value(&res, "eagain"), 1);
	CHECK_EQ(value(&res, "creates"), 20 * 16 - 1);
	CHECK_EQ(value(&res, "create_errs"), 0);
	/* both objects of the loser were freed: 2 allocations, 2 frees more */
	CHECK_EQ(res.alloc_ops, 2 * 20 * 16);
	CHECK_EQ(res.free_ops, 2 * 20 * 16);
}

static const char *const SOCKET_NOCB[] = { "storage_type", "socket",   "batch_size",
					   "16",	   "rcu_nocb", "1" };

TEST(test_multi_producer_eras)
{
	static const char *const specs[] = {
		"slab(zero=true)",
		"nolock > slab",
		"nolock(irq_work=thread) > slab",
		"bpf_ma(mode=fixed, irq_work=thread) > slab",
		"nolock > sheaves > slab(form=sheaves)",
	};
	unsigned i;

	for (i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		CHECK_EQ(run(specs[i], 3, SOCKET_NOCB, 6), 0);
		check_clean(specs[i]);
		CHECK_EQ(value(&res, "creates") + value(&res, "create_errs"), 3 * 20 * 16);
	}
}

int main(void)
{
	RUN(test_kzalloc_socket_exact);
	RUN(test_nolock_call_rcu);
	RUN(test_bpf_ma_task_reuse_now);
	RUN(test_publish_race_counts_eagain);
	RUN(test_multi_producer_eras);
	RUN(test_other_maps_elements);
	RUN(test_task_frees_on_the_reaper);
	return TEST_SUMMARY();
}
