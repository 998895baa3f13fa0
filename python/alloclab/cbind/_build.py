"""cffi builder for alloclab._alloclab (out-of-line API mode).

The cdef below is written by hand from csrc/include/alloclab/*.h: only what
Python calls or reads is declared, and every struct ends in ``...;`` so that
the C compiler, not this file, decides the layout. Constants whose values
live in the headers are declared as ``#define NAME ...`` for the same reason.

setup.py compiles csrc/SOURCES into liballoclab.so first, then adds the
directory it was placed in to ``library_dirs`` of this extension; the
extension finds the library at run time through ``rpath=$ORIGIN``.
"""

import os

from cffi import FFI

CDEF = r"""
/* ---- constants (values from the headers) ---- */
#define AL_ABI_VERSION ...
#define AL_MAX_PARAMS ...
#define AL_MAX_LAYERS ...
#define AL_MAX_CPUS ...
#define AL_STATS_MAX ...
#define AL_MAX_PRODUCERS ...

enum al_ctx_level { AL_CTX_TASK, AL_CTX_IRQ, AL_CTX_NMI, AL_CTX_NR, ... };
enum al_flags { AL_ZERO, AL_NOSPIN, AL_MAYSLEEP, ... };
enum al_drain_scope { AL_DRAIN_CPU, AL_DRAIN_ALL, ... };
enum al_param_type { AL_PARAM_INT, AL_PARAM_SIZE, AL_PARAM_BOOL, AL_PARAM_ENUM,
                     AL_PARAM_NS, ... };
/* the features' names and bits: the one list is ops.h's AL_FEATURES */
const char *al_feature_name(unsigned i, unsigned *mask);
enum al_timing { AL_TIMING_BATCH, AL_TIMING_PER_OP_SUM, ... };
enum al_workload_flags { AL_WL_RESET, AL_WL_ONE_PRODUCER, ... };
enum al_cpu_mode { AL_CPU_AUTO, AL_CPU_PINNED, AL_CPU_VIRTUAL, AL_CPU_SIMULATED, ... };

/* ---- ops.h, params.h ---- */
struct al_ctx {
    unsigned cpu;
    unsigned level;
    int err;
    ...;
};

#define AL_STAT_GAUGE ...
struct al_stat {
    const char *name;
    uint64_t value;
    unsigned flags;
    ...;
};

struct al_stats {
    const char *layer;
    int64_t bytes_held;
    unsigned n;
    struct al_stat v[...];
    ...;
};

struct al_allocator;

struct al_ops {
    unsigned abi_version;
    const char *name;
    int (*check)(struct al_allocator *a, char *err, size_t errlen);
    ...;
};

struct al_param_desc {
    const char *name;
    int type;
    int64_t def;
    int64_t min;
    int64_t max;
    const char *choices;
    const char *doc;
    ...;
};

/* ---- counters.h ---- */
enum al_stats_level { AL_STATS_LITE, AL_STATS_OFF, AL_STATS_FULL, AL_STATS_NR, ... };
enum al_ctr_flags { AL_CTR_KEY, AL_CTR_GAUGE, AL_CTR_DERIVED, AL_CTR_REPORTED, AL_CTR_NS, ... };
struct al_counter_desc {
    const char *name;
    const char *doc;
    unsigned flags;
    const char *formula;
    ...;
};
extern const char *const al_stats_level_names[];
int al_stats_compiled(void);

struct al_allocator;
struct al_layer_desc {
    unsigned abi_version;
    size_t desc_size;
    const char *name;
    const char *doc;
    unsigned features;
    size_t max_size;
    unsigned nparams;
    const struct al_param_desc *params;
    size_t (*max_size_of)(const int64_t *params);
    int (*check_params)(const int64_t *params, char *err, size_t errlen);
    int (*create)(const struct al_layer_desc *d, const int64_t *params,
                  struct al_allocator *below, unsigned ncpu, struct al_allocator **out);
    size_t min_align;
    const struct al_counter_desc *counters;
    unsigned ncounters;
    ...;
};

struct al_allocator {
    const struct al_ops *ops;
    const struct al_layer_desc *desc;
    struct al_allocator *below;
    unsigned ncpu;
    ...;
};

/* ---- registry.h, params.h, clock.h, base.h ---- */
struct al_workload_desc;

unsigned al_layer_count(void);
const struct al_layer_desc *al_layer_get(unsigned i);
const struct al_layer_desc *al_layer_find(const char *name);
int al_layer_register(const struct al_layer_desc *d);

unsigned al_workload_count(void);
const struct al_workload_desc *al_workload_get(unsigned i);
const struct al_workload_desc *al_workload_find(const char *name);
int al_workload_register(const struct al_workload_desc *d);

enum al_preset_where { AL_PRESET_IN_PROCESS, AL_PRESET_PEER, ... };
struct al_preset {
    const char *name;
    const char *spec;
    const char *doc;
    unsigned where;
    ...;
};
unsigned al_preset_count(void);
const struct al_preset *al_preset_get(unsigned i);
const struct al_preset *al_preset_find(const char *name);

int al_params_check(const struct al_param_desc *p, unsigned n, const int64_t *v, char *err,
                    size_t errlen);
void al_params_default(const struct al_param_desc *p, unsigned n, int64_t *v);

struct al_clock {
    int tsc;
    double ticks_per_ns;
    double overhead_ticks;
    ...;
};
extern struct al_clock al_clock;
int al_clock_init(void);
uint64_t al_mono_ns(void);

const char *al_version(void);
/* plugins */
const void *al_get_api(void);
/* peers */
int al_system_allocator(void);
const char *al_build_flags(void);
int al_irqflags_executed(void);
const char *al_strerror(int err);

/* ---- stack.h, workload.h ---- */
struct al_metric {  /* workload metrics */
    const char *name;
    double value;
    uint64_t count;
    unsigned kind;
    ...;
};

struct al_layer_spec {
    const struct al_layer_desc *desc;
    int64_t params[...];
    ...;
};

struct al_stack_spec {
    unsigned n;
    struct al_layer_spec layer[...];
    unsigned check;
    ...;
};

/* ---- spec.h ---- */
enum al_spec_fault { AL_SPEC_OK, AL_SPEC_SYNTAX, AL_SPEC_LAYER, AL_SPEC_PARAM, AL_SPEC_VALUE,
                     AL_SPEC_RANGE, AL_SPEC_TOO_MANY, AL_SPEC_NO_DESC, AL_SPEC_NO_BACKEND,
                     AL_SPEC_BOTTOM, AL_SPEC_NO_PAGES, AL_SPEC_PARAMS, AL_SPEC_DISTINCT,
                     AL_SPEC_TASK_ONLY, ... };
struct al_spec_error {
    int fault;
    int offset;
    int layer;
    int param;
    int tok;
    int toklen;
    unsigned nlayers;
    const struct al_layer_desc *desc;
    int below;
    int code;
    char msg[...];
    ...;
};
int al_spec_parse_report(const char *text, struct al_stack_spec *out, struct al_spec_error *e);
const struct al_preset *al_spec_preset(const char *text);
int al_value_parse(const struct al_param_desc *p, const char *text, size_t len, int64_t *out);
int al_stack_check(const struct al_stack_spec *s, struct al_spec_error *e);
enum al_run_fault { AL_RUN_OK, AL_RUN_NO_WORKLOAD, AL_RUN_PRODUCERS, AL_RUN_ONE_PRODUCER,
                    AL_RUN_MODE, AL_RUN_PINNED, AL_RUN_HISTOGRAM, AL_RUN_NO_END,
                    AL_RUN_DISTINCT, AL_RUN_WPARAMS, AL_RUN_SIZE, AL_RUN_REALTIME,
                    AL_RUN_REALTIME_PERM, AL_RUN_SIM, AL_RUN_SIM_BUSY, ... };

int al_stack_create(const struct al_stack_spec *s, unsigned ncpu, struct al_allocator **out,
                    char *err, size_t errlen);
void al_stack_destroy(struct al_allocator *top);
void al_stack_drain(struct al_allocator *top, struct al_ctx *c, unsigned scope);
size_t al_spec_max_size(const struct al_stack_spec *s);
const char *al_refusal_why(int err);
size_t al_spec_min_align(const struct al_stack_spec *s);
size_t al_layer_min_align(const struct al_layer_desc *d);
unsigned al_stack_stats(struct al_allocator *top, struct al_stats *out, unsigned max);

void *al_call_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags);
int al_call_free(struct al_allocator *a, struct al_ctx *c, void *p);
int al_call_alloc_bulk(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned n,
                       void **out, unsigned flags);
int al_call_free_bulk(struct al_allocator *a, struct al_ctx *c, void **ptrs, unsigned n);
size_t al_call_usable_size(struct al_allocator *a, const void *p);
bool al_call_owns(struct al_allocator *a, const void *p);

struct al_workload_desc {
    unsigned abi_version;
    const char *name;
    const char *doc;
    unsigned flags;
    unsigned nparams;
    const struct al_param_desc *params;
    int size_param;
    int (*check_params)(const int64_t *params, unsigned nworkers, char *err, size_t errlen);
    ...;
};

/* ---- histograms and memory (fields added to al_run_config/result below) ---- */
#define AL_HIST_BUCKETS ...
#define AL_HIST_SUB ...
#define AL_WL_LIVE ...
#define AL_WL_NMI ...
#define AL_WL_VMALLOC ...
#define AL_WL_SIM ...

/* ---- sim.h: simulated CPUs ---- */
#define AL_SIM_FEATURES ...
#define AL_SIM_TICKS_PER_NS ...
#define AL_SIM_NAME ...
struct al_sim_table {
    unsigned n;
    char name[...][...];
    double cost_ns[...];
    double seen[...];
    double xtx[...];
    double xty[...];
    double yy;
    uint64_t nseg;
    uint64_t dropped;
    double null_ns;
    unsigned overflow;
    ...;
};
enum al_sim_event_kind { AL_SIM_EV_CYCLE, AL_SIM_EV_HOLD, AL_SIM_EV_WAIT, AL_SIM_EV_HANDOFF,
                         ... };
struct al_sim_event {
    uint64_t start_ps;
    uint64_t dur_ps;
    uint32_t cpu;
    uint16_t kind;
    uint16_t what;
    ...;
};
struct al_sim_config {
    uint64_t seed;
    double line_transfer_ns;
    double lines_per_handoff;
    double store_fraction;
    double load_fraction;
    int read_takes_line;
    double jitter;
    int calibrate;
    double phase_scale[2];
    double phase_offset_ns[2];
    struct al_sim_table *table;
    struct al_sim_event *events;
    uint64_t events_max;
    size_t stack_kib;
    ...;
};
struct al_sim_stats {
    uint64_t switches;
    uint64_t sync_points;
    uint64_t segments;
    uint64_t phase_calls[2];
    uint64_t lock_waits;
    uint64_t lock_timeouts;
    uint64_t handoffs;
    uint64_t lines;
    uint64_t object_lines;
    uint64_t store_lines;
    double wait_ns;
    double line_ns;
    double uncalibrated_units;
    unsigned uncalibrated_terms;
    uint64_t events;
    uint64_t events_dropped;
    double virtual_ns;
    ...;
};
double al_sim_pingpong_ns(unsigned rounds);
int al_sim_coherence_probe(unsigned lines, unsigned tries, double *store_ns, double *load_ns,
                           double *reread_ns);
enum al_hist_op { AL_HIST_ALLOC, AL_HIST_FREE, AL_HIST_NR, ... };
struct al_hist {
    uint64_t count;
    uint64_t sum;
    uint64_t min;
    uint64_t max;
    uint64_t b[...];
    ...;
};
#define AL_MEM_SERIES ...
struct al_mem_point {
    uint64_t t_ns;
    int64_t requested;
    int64_t held;
    uint64_t rss;
};
struct al_mem {
    uint64_t samples;
    uint64_t held_samples;
    int64_t held;
    int64_t held_peak;
    int64_t requested;
    int64_t requested_peak;
    uint64_t rss_start;
    uint64_t rss;
    uint64_t rss_peak;
    unsigned nseries;
    unsigned series_every;
    struct al_mem_point series[...];
    ...;
};
void al_hist_reset(struct al_hist *h);
void al_hist_merge(struct al_hist *dst, const struct al_hist *src);
uint64_t al_hist_bucket_lo(unsigned i);
uint64_t al_hist_bucket_hi(unsigned i);

struct al_run_config {
    const struct al_workload_desc *workload;
    int64_t wparams[...];
    struct al_stack_spec stack;
    unsigned producers;
    int cpu_mode;
    int timing;
    uint64_t warmup_cycles;
    uint64_t cycles;
    uint64_t duration_ns;
    uint64_t seed;
    int histogram;
    uint64_t mem_sample_ns;
    uint64_t watchdog_ns;
    int stats_level;
    int realtime;
    struct al_sim_config sim;
    ...;
};

struct al_run_result {
    int status;
    char error[...];
    int cpu_mode;
    unsigned ncpu_model;
    unsigned ncpu_concurrent;
    unsigned ncpu_usable;
    unsigned threads_per_core;
    int clock_tsc;
    double ticks_per_ns;
    double timer_overhead_ns;
    uint64_t cycles;
    uint64_t alloc_ops;
    uint64_t free_ops;
    uint64_t cross_frees;
    double alloc_ns;
    double free_ns;
    double elapsed_ns;
    double steal_pct;
    unsigned nlayers;
    struct al_stats layers[...];
    int64_t leaked[...];
    struct al_hist hist[...];
    struct al_mem mem;
    uint64_t worker_nvcsw;      /* scheduling in the measured phase */
    uint64_t worker_nivcsw;
    uint64_t engine_wakeups;
    uint64_t engine_wakeups_on_worker_cpus;
    uint64_t engine_cpus;
    unsigned nmetrics;
    struct al_metric metrics[...];
    unsigned truncated;
    struct al_sim_stats sim;
    ...;
};

int al_run(const struct al_run_config *cfg, struct al_run_result *res);
struct al_run;
enum al_run_phase { AL_RUN_SETUP, AL_RUN_WARMUP, AL_RUN_MEASURED, AL_RUN_FINISH, AL_RUN_DONE,
                    ... };
int al_run_check(const struct al_run_config *cfg, int *fault, char *err, size_t errlen);
int al_run_start(const struct al_run_config *cfg, struct al_run_result *res,
                 struct al_run **out);
int al_run_wait(struct al_run *r, uint64_t timeout_ns);
void al_run_stop(struct al_run *r);
int al_run_phase(struct al_run *r, uint64_t *progress);
int al_run_abandoned(struct al_run *r);
void al_run_free(struct al_run *r);
double al_nmi_max_rate(double *signal_ns);
unsigned al_cpus_usable(void);
unsigned al_threads_per_core(void);

/* ---- workload metrics, page allocator and vmalloc APIs ---- */
#define AL_METRICS_MAX ...
enum al_metric_kind { AL_METRIC_SUM, AL_METRIC_MEAN, AL_METRIC_MAX, ... };

#define AL_PAGE_SIZE ...
#define AL_MAX_PAGE_ORDER ...
enum al_gfp { AL_GFP_ZERO, AL_GFP_NORETRY, AL_GFP_NOPCP, AL_GFP_PCP_ONLY, ... };
struct al_pages_info {
    uint64_t nr_pages;
    uint64_t free_pages;
    uint64_t pcp_pages;
    uint64_t nr_free[...];
    int batch;
    int high_min;
    int high_max;
    int wmark_min;
    int wmark_low;
    int wmark_high;
    ...;
};
bool al_pages_is(const struct al_allocator *a);
uint64_t al_pages_nr(const struct al_allocator *a);
void *al_page_address(const struct al_allocator *a, uint64_t pfn);
int al_page_pfn(const struct al_allocator *a, const void *addr, uint64_t *pfn);
bool al_pfn_valid(const struct al_allocator *a, uint64_t pfn);
bool al_pcp_allowed_order(unsigned order);
int al_alloc_pages(struct al_allocator *a, struct al_ctx *c, unsigned order, unsigned gfp,
                   uint64_t *pfn);
int al_free_pages(struct al_allocator *a, struct al_ctx *c, uint64_t pfn, unsigned order);
int al_split_page(struct al_allocator *a, struct al_ctx *c, uint64_t pfn, unsigned order);
int al_alloc_pages_bulk(struct al_allocator *a, struct al_ctx *c, unsigned order, unsigned n,
                        unsigned gfp, uint64_t *pfns);
int al_free_pages_bulk(struct al_allocator *a, struct al_ctx *c, const uint64_t *pfns,
                       unsigned n);
int al_pages_pcp_decay(struct al_allocator *a, struct al_ctx *c);
int al_pages_info(const struct al_allocator *a, struct al_pages_info *out, unsigned cpu,
                  int *pcp_count, int *pcp_high, int *pcp_alloc_factor, int *pcp_free_count);

enum al_vm_flags { AL_VM_ZERO, AL_VM_HUGE, ... };
bool al_vmalloc_is(const struct al_allocator *a);
struct al_allocator *al_vmalloc_pages(const struct al_allocator *a);
void *al_vmalloc(struct al_allocator *a, struct al_ctx *c, size_t size, size_t align,
                 unsigned vmflags);
int al_vfree(struct al_allocator *a, struct al_ctx *c, const void *addr);
void *al_vm_map_ram(struct al_allocator *a, struct al_ctx *c, const uint64_t *pfns, unsigned n);
int al_vm_unmap_ram(struct al_allocator *a, struct al_ctx *c, const void *addr, unsigned n);
int al_vmalloc_write(struct al_allocator *a, void *addr, const void *src, size_t len);
int al_vmalloc_read(struct al_allocator *a, const void *addr, void *dst, size_t len);
int al_vmalloc_memset(struct al_allocator *a, void *addr, int byte, size_t len);
int al_vmalloc_to_pfn(struct al_allocator *a, const void *addr, uint64_t *pfn);
int al_vmalloc_purge(struct al_allocator *a, struct al_ctx *c);
unsigned al_vmalloc_kworker_cpu(const struct al_allocator *a);
/* ---- slab/sheaves/nolock/bpf_ma, deferred work, contexts ---- */
static const int AL_NOTRACE;
static const int AL_NOCPU;
/* ---- distinct objects ---- */
static const int AL_WL_DISTINCT;
static const int AL_WL_FINITE;
#define AL_CYCLE_DONE ...
/* ---- trace.h ---- */
#define AL_TRACE_NOID ...
#define AL_TRACE_MAX_THREADS ...
enum al_trace_kind { AL_TK_MALLOC, AL_TK_CALLOC, AL_TK_REALLOC, AL_TK_FREE,
                     AL_TK_POSIX_MEMALIGN, AL_TK_ALIGNED_ALLOC, AL_TK_MEMALIGN,
                     AL_TK_VALLOC, AL_TK_PVALLOC, AL_TK_USABLE_SIZE,
                     AL_TK_THREAD_START, AL_TK_THREAD_EXIT, AL_TK_NR, ... };
enum al_trace_flags { AL_TF_NULL, AL_TF_MOVED, AL_TF_CROSS, AL_TF_UNKNOWN, AL_TF_ZERO, ... };
struct al_trace_op {
    uint64_t size;
    uint64_t aux;
    uint32_t id;
    uint32_t ref;
    uint32_t dt;
    uint8_t kind;
    uint8_t flags;
    ...;
};
struct al_trace_thread {
    uint32_t parent;
    uint64_t nops;
    struct al_trace_op *ops;
    uint64_t *seq;
    uint64_t *t_ns;
    ...;
};
struct al_trace {
    unsigned nthreads;
    unsigned sealed;
    struct al_trace_thread *threads;
    uint64_t nops;
    uint64_t nobjects;
    uint32_t *owner;
    uint64_t unknown_refs;
    uint64_t cross_refs;
    uint64_t kind_ops[...];
    ...;
};
struct al_trace *al_trace_new(unsigned nthreads);
int al_trace_push(struct al_trace *t, unsigned thread, const struct al_trace_op *op,
                  uint64_t seq, uint64_t t_ns);
int al_trace_seal(struct al_trace *t, char *err, size_t errlen);
void al_trace_free(struct al_trace *t);
int al_trace_encode(const struct al_trace *t, void *buf, size_t cap, size_t *len, char *err,
                    size_t errlen);
int al_trace_decode(const void *buf, size_t len, struct al_trace **out, char *err,
                    size_t errlen);
int64_t al_trace_register(const struct al_trace *t);
void al_trace_unregister(int64_t handle);
const struct al_trace *al_trace_lookup(int64_t handle);
/* ---- record.h ---- */
struct al_rec_info {
    int32_t pid, ppid;
    uint32_t version;
    uint32_t complete;
    uint32_t end;
    uint32_t threads;
    uint64_t start_ns;
    uint64_t file_bytes;
    uint64_t valid_bytes;
    uint64_t chunks;
    uint64_t ops;
    uint64_t duplicates;
    uint64_t unrecorded;
    double ticks_per_ns;
    char note[256];
};
int al_rec_finish(const char *path, struct al_trace **out, struct al_rec_info *info,
                  char *err, size_t errlen);
"""

# Paths are relative to the project root, where setup.py runs.
INCLUDE_DIR = os.path.join("csrc", "include")

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "alloclab._alloclab",
    "#include <alloclab/alloclab.h>\n",
    include_dirs=[INCLUDE_DIR],
    libraries=["alloclab"],
    library_dirs=[],  # setup.py adds where liballoclab.so was placed
    extra_link_args=["-Wl,-rpath,$ORIGIN"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
