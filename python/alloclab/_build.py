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
enum al_features { AL_F_BULK, AL_F_OWNS, AL_F_BACKEND, AL_F_USABLE, AL_F_VALIDATES, ... };
enum al_timing { AL_TIMING_BATCH, AL_TIMING_PER_OP_SUM, ... };
enum al_workload_flags { AL_WL_RESET, AL_WL_ONE_PRODUCER, ... };
enum al_cpu_mode { AL_CPU_AUTO, AL_CPU_PINNED, AL_CPU_VIRTUAL, ... };

/* ---- ops.h ---- */
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

struct al_layer_desc {
    unsigned abi_version;
    const char *name;
    const char *doc;
    unsigned features;
    size_t max_size;
    unsigned nparams;
    const struct al_param_desc *params;
    int (*check_params)(const int64_t *params, char *err, size_t errlen);
    ...;
};

struct al_allocator {
    const struct al_ops *ops;
    const struct al_layer_desc *desc;
    struct al_allocator *below;
    unsigned ncpu;
    ...;
};

/* ---- core.h ---- */
struct al_workload_desc;

unsigned al_layer_count(void);
const struct al_layer_desc *al_layer_get(unsigned i);
const struct al_layer_desc *al_layer_find(const char *name);
int al_layer_register(const struct al_layer_desc *d);

unsigned al_workload_count(void);
const struct al_workload_desc *al_workload_get(unsigned i);
const struct al_workload_desc *al_workload_find(const char *name);
int al_workload_register(const struct al_workload_desc *d);

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
const char *al_build_flags(void);
const char *al_strerror(int err);

/* ---- engine.h ---- */
struct al_layer_spec {
    const struct al_layer_desc *desc;
    int64_t params[...];
    ...;
};

struct al_stack_spec {
    unsigned n;
    struct al_layer_spec layer[...];
    ...;
};

int al_stack_create(const struct al_stack_spec *s, unsigned ncpu, struct al_allocator **out,
                    char *err, size_t errlen);
void al_stack_destroy(struct al_allocator *top);
void al_stack_drain(struct al_allocator *top, struct al_ctx *c, unsigned scope);
size_t al_spec_max_size(const struct al_stack_spec *s);
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
    ...;
};

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
    ...;
};

struct al_value {             /* issue 4 */
    const char *name;
    double value;
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
    unsigned nvalues;           /* issue 4 */
    struct al_value values[...]; /* issue 4 */
    ...;
};

int al_run(const struct al_run_config *cfg, struct al_run_result *res);
unsigned al_cpus_usable(void);
unsigned al_threads_per_core(void);

/* ---- issue 4: slab/sheaves/nolock/bpf_ma, deferred work, workload values ---- */
static const int AL_F_TRYLOCK;
static const int AL_NOTRACE;
static const int AL_NOCPU;
#define AL_MAX_VALUES ...
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
