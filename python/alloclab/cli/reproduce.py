"""`alloclab reproduce SEED`: the seed discussions' experiments rerun
(alloclab.reproduce): libarena, vmalloc and local-storage, with their
reports, tables, plots and JSON."""



from .. import errors
from .format import UsageError
from .format import RunFailed as _RunFailed
from .format import integer as _integer
from .format import real as _real
from .format import check_outputs as _check_outputs
from .format import write_output as _write_output
from .format import wrote as _wrote
from . import format as _format
from ..present import plot
from ..measure.run import DEFAULT_STATS, TIMINGS
from ..reproduce.vmalloc import TEST_BITS
from .. import reproduce
from ..reproduce.local_storage import other_maps_bounds
from ..reproduce import libarena_sim as _ls
from .flags import choice_list, duration_arg, effort_flags, int_list, progress_flags, stats_flag


def libarena_parser(rsub):
    """`alloclab reproduce libarena`: seed 000's grid and outputs."""
    lib_p = rsub.add_parser(
        "libarena", help="seed 000: spill vs transfer cache in front of libarena's buddy",
        description="Seed 000: per-CPU caches in front of libarena's buddy, 'spill' vs "
                    "'transfer cache' (plus plain buddy), on libarena-malloc-free and "
                    "libarena-malloc-xfree, printed in the seed's layout with the counters "
                    "that explain it and the seed's conclusions judged on this data "
                    "(holds / does not hold / inconclusive, with the reason).")
    lib_p.add_argument("--producers", type=int_list("--producers"), default=None,
                       help="comma-separated (default 1,2,4,8; --fidelity 1,2)")
    lib_p.add_argument("--allocs-per-cycle", type=int_list("--allocs-per-cycle"),
                       default=None, help="comma-separated (default 1,4,16,64,256; --quick "
                                          "4,64,256; --fidelity 64,256)")
    lib_p.add_argument("--size", type=int_list("--size"), default=[64],
                       help="object size in bytes (default 64)")
    lib_p.add_argument("--runs", type=_integer, default=None,
                       help="runs per cell (default 5, --quick 3, --rigorous 10; virtual-CPU "
                            "cells, judged on counters, at most half, at least 3)")
    lib_p.add_argument("--timing", type=choice_list("timing", list(TIMINGS)),
                       default=None,
                       help="per_op_sum (as the seed's bench, the default) and/or batch "
                            "(--fidelity: one, default batch)")
    stats_flag(lib_p, "what the layers count: lite (every event), off (nothing: the "
                       "counters n/a) or full (also lock times: the wait ns/op rows)",
                sweep=False)
    lib_p.add_argument("--workloads", type=choice_list("workload", ["malloc-free",
                                                                     "malloc-xfree"],
                                                       prefix="libarena-"),
                       default=["malloc-free", "malloc-xfree"])
    lib_p.add_argument("--duration", type=duration_arg, default=None,
                       help="measured phase per run (default 0.1 s, --quick 0.05 s, "
                            "--rigorous 0.5 s)")
    effort_flags(lib_p)
    lib_p.add_argument("--no-baseline", action="store_true",
                       help="leave out the plain buddy ('no cache') column")
    lib_p.add_argument("--tree", metavar="DIR",
                       help="run on the real buddy: the libarena tree DIR's own buddy.bpf.c "
                            "(compiled natively against alloclab's BPF stand-in) in place of "
                            "the model's buddy under every design, as the spec substitution "
                            "'... > buddy' -> '... > libarena(tree=DIR)' (the model's buddy "
                            "parameters dropped); $ALLOCLAB_LIBARENA when --fidelity is given "
                            "without it")
    lib_p.add_argument("--caches-above", action="store_true",
                       help="with --tree: allow the model's caches above a tree that has "
                            "per-CPU caches of its own (refused otherwise)")
    lib_p.add_argument("--fidelity", action="store_true",
                       help="instead of the seed's grid: the model's buddy against the real "
                            "buddy of --tree on malloc-free (1,2 producers, 64,256 "
                            "allocs/cycle, stats=full unless --stats): per-op cost, locks "
                            "per op, lock hold time per acquisition, bytes held and "
                            "committed at teardown")
    lib_p.add_argument("--json", metavar="FILE", help="write the report's data as JSON")
    lib_p.add_argument("--plot", metavar="FILE",
                       help="write alloc and free latency plots (PNG/PDF/SVG by extension)")
    simulated_flags(lib_p)
    progress_flags(lib_p)


def simulated_flags(lib_p):
    """--cpu simulated, --calibration and --scaling of `reproduce libarena`."""
    lib_p.add_argument("--cpu", choices=["pinned", "simulated"], default="pinned",
                       help="pinned (default: producers on real CPUs, those beyond the "
                            "usable CPUs virtual) or simulated: every producer count as "
                            "model CPUs in virtual time, all 32 seed cells filled, every "
                            "judgement a prediction named by its calibration (--duration: "
                            "virtual seconds, default 0.05, --quick 0.02, --rigorous 0.25)")
    lib_p.add_argument("--calibration", metavar="FILE",
                       help="with --cpu simulated: the calibration to use (JSON, as "
                            "Calibration.save writes); default: calibrate here at one "
                            "producer first")
    lib_p.add_argument("--scaling", metavar="FILE",
                       help="with --cpu simulated, instead of the seed's grid: latency "
                            "against 1-256 CPUs (--producers) for spill, transfer cache "
                            "and magazine on malloc-free at 256 allocs/cycle (the first of "
                            "--workloads and --allocs-per-cycle when given): simulated lines "
                            "and measured points (pinned, at the CPUs this machine has), "
                            "written to FILE (PNG/PDF/SVG); --json writes its data")


def cmd_simulated(args):
    """`reproduce libarena --cpu simulated` (and --scaling)."""
    if args.tree or args.fidelity:
        raise UsageError("--cpu simulated runs the model's designs; --tree and --fidelity "
                         "measure a tree's code: leave them out")
    if args.scaling is not None:
        return cmd_scaling(args)
    return emit_report(
        lambda: reproduce.libarena_simulated(
            producers=args.producers or [1, 2, 4, 8], allocs_per_cycle=args.allocs_per_cycle,
            runs=args.runs, size=args.size[0], timings=args.timing or ["per_op_sum"],
            workloads=args.workloads, duration=args.duration, baseline=not args.no_baseline,
            effort=args.effort, progress=args.progress, stats=args.stats or DEFAULT_STATS,
            calibration=args.calibration),
        args, reproduce.SimulatedLibarenaReport)


def cmd_scaling(args):
    """`reproduce libarena --cpu simulated --scaling FILE`."""
    if args.plot:
        raise UsageError("--scaling FILE is the figure; leave out --plot")
    _check_outputs(("--json", args.json, "file"),
                   *[("--scaling", p, "plot") for p in _format.plot_paths(
                       "--scaling", args.scaling, [""], args)])
    workload = args.workloads[0] if len(args.workloads) == 1 else _ls.SCALING_WORKLOAD
    try:
        s = reproduce.libarena_scaling(
            cpus=args.producers or _ls.SCALING_CPUS, workload=workload,
            allocs_per_cycle=(args.allocs_per_cycle or [_ls.SCALING_APC])[0],
            runs=args.runs or 3, duration=args.duration or 0.02, size=args.size[0],
            timing=(args.timing or ["per_op_sum"])[0], calibration=args.calibration,
            progress=args.progress)
    except (errors.AllocatorExhausted, errors.RunError) as e:
        raise _RunFailed(str(e)) from None
    print(s)
    if args.json:
        _write_output("--json", args.json, lambda: s.to_json(args.json))
        _wrote(args.json)
    _write_output("--scaling", args.scaling, lambda: _save_figure(s.plot(), args.scaling))
    _wrote(args.scaling)
    return 0


def _save_figure(fig, path):
    import matplotlib
    matplotlib.use("Agg")
    plot.save([fig], path, "--scaling")


def emit_report(make, args, report=None):
    """Run a reproduction, print it, and write --json and --plot (each file
    written is announced on stderr); all are checked before it runs, every
    file of the ``report`` class's figures included."""
    plots = []
    if args.plot is not None:
        suffixes = report.figure_suffixes(getattr(args, "workloads", None)) if report else [""]
        plots = _format.plot_paths("--plot", args.plot, suffixes, args)
    _check_outputs(("--json", args.json, "file"), *[("--plot", p, "plot") for p in plots])
    try:
        rep = make()
    except errors.AlloclabError as e:
        if isinstance(e, (errors.AllocatorExhausted, errors.RunError)):
            raise _RunFailed(str(e)) from None
        raise
    print(rep)
    if args.json:
        _write_output("--json", args.json, lambda: rep.to_json(args.json))
        _wrote(args.json)
    if args.plot:
        written = []
        _write_output("--plot", args.plot, lambda: written.extend(rep.save_figures(args.plot)))
        for path in written:
            _wrote(path)
    return 0


def vmalloc_parser(rsub):
    """`alloclab reproduce vmalloc` (seed 004)."""

    p = rsub.add_parser(
        "vmalloc", help="seed 004: vmalloc high-order allocation and bulk vfree (test_vmalloc)",
        description="Seed 004: test_vmalloc under v6.18 (vmalloc-default), 6-19-0-rc1 "
                    "(vmalloc-large) and vfree-high-order (vmalloc-large-bulkfree) (with "
                    "--pcp-first also the thread's pcp-first suggestion), normalised to v6.18 "
                    "in the seed's table "
                    "(positive = improvement, (R)/(I) where significant), then Uladzislau "
                    "Rezki's 3- and 100-page comparison, the counters that explain it and "
                    "the seed's conclusions judged on this data.")
    p.add_argument("--scale", type=_real, default=None,
                   help="loops = the seed's loops x SCALE (default: calibrated per row so "
                        "that each run lasts --min-time)")
    p.add_argument("--min-time", type=duration_arg, default=None, metavar="SECONDS",
                   help="each run's measured phase at least (default 0.1 s, --quick 0.05 s, "
                        "--rigorous 0.25 s)")
    p.add_argument("--runs", type=_integer, default=None,
                   help="runs per cell (default 5, --quick 3, --rigorous 10)")
    effort_flags(p)
    p.add_argument("--threads", type=_integer, default=1,
                   help="test_vmalloc workers, nr_threads (default 1)")
    p.add_argument("--arch", choices=["arm64", "x86"], default="arm64",
                   help="page-table geometry (default arm64, the seed's machine)")
    p.add_argument("--cpus", type=_integer, default=64,
                   help="CPUs the modelled machine splits its PCP high across (default 64; "
                        "0 = the threads)")
    p.add_argument("--tests", type=choice_list("test", list(TEST_BITS)), default=None,
                   help="only these tests (comma-separated)")
    pc = p.add_mutually_exclusive_group()
    pc.add_argument("--pcp-first", dest="pcp_first", action="store_true", default=False,
                    help="add the thread's pcp-first suggestion as a column (not in the seed's "
                         "table; about a third more time)")
    pc.add_argument("--no-pcp-first", dest="pcp_first", action="store_false",
                    help="leave out the pcp-first column (the default)")
    p.add_argument("--no-rezki", action="store_true",
                   help="leave out the 3- and 100-page comparison")
    p.add_argument("--json", metavar="FILE", help="write the report's data as JSON")
    p.add_argument("--plot", metavar="FILE",
                   help="write the change plot (PNG/PDF/SVG by extension; a second file "
                        "'-sizes' holds ns per loop against nr_pages)")
    progress_flags(p)
    return p


def cmd_reproduce_vmalloc(args):

    if args.scale is not None and not args.scale > 0:
        raise UsageError("--scale=%r: a positive fraction of the seed's loops" % args.scale)
    if args.runs is not None and args.runs < 2:
        raise UsageError("--runs=%d: significance needs at least 2 runs per cell" % args.runs)
    if args.threads < 1:
        raise UsageError("--threads=%d: at least 1" % args.threads)
    if args.cpus < 0:
        raise UsageError("--cpus=%d: 0 or more" % args.cpus)
    if args.min_time is not None and not args.min_time > 0:
        raise UsageError("--min-time=%r: a positive number of seconds" % args.min_time)
    return emit_report(
        lambda: reproduce.vmalloc(scale=args.scale, runs=args.runs, threads=args.threads,
                                arch=args.arch, cpus=args.cpus,
                                  pcp_first=args.pcp_first, tests=args.tests,
                                  rezki=not args.no_rezki, effort=args.effort,
                                  min_time=args.min_time, progress=args.progress),
        args, reproduce.VmallocReport)


def local_storage_parser(rsub):
    """`alloclab reproduce local-storage` (seed 003)."""
    ls = rsub.add_parser(
        "local-storage", help="seed 003: BPF local storage, kzalloc/bpf_ma vs kmalloc_nolock",
        description="Seed 003: bench local-storage-create before and after BPF local storage "
                    "switched to kmalloc_nolock() (socket: kzalloc vs kmalloc_nolock; task: "
                    "the BPF memory allocator vs kmalloc_nolock), creation speed ± sd and "
                    "kmallocs per create at each batch size, in the seed's layout next to the "
                    "seed's numbers, with the counters that explain the differences and whether "
                    "the seed's direction holds here.")
    ls.add_argument("--storage-types", type=choice_list("storage type", ["socket", "task"]),
                    default=["socket", "task"], help="comma-separated (default socket,task)")
    ls.add_argument("--batch-sizes", type=int_list("--batch-sizes"), default=[16, 32, 64],
                    help="comma-separated (default 16,32,64)")
    ls.add_argument("--runs", type=_integer, default=None,
                    help="runs per cell (default 12, --quick 6, --rigorous 30: many short runs, "
                         "as runs of one era differ however long they last); the table's sd "
                         "pools the samples within runs and the runs' spread")
    ls.add_argument("--duration", type=duration_arg, default=None,
                    help="measured phase per run (default 0.2 s, --quick 0.1 s, --rigorous "
                         "0.3 s; whole --sample lengths count)")
    ls.add_argument("--sample", type=duration_arg, default=0.1,
                    help="length of one creates/s sample (default 0.1 s; the bench: 1 s)")
    effort_flags(ls)
    ls.add_argument("--owner-work", choices=["real", "none"], default="real",
                    help="real sockets/threads per owner as the bench (default), or none: the "
                         "allocators alone")
    ls.add_argument("--no-alone", dest="alone", action="store_false",
                    help="with real owners, skip the short runs of the storage path alone "
                         "(owner_work=none) that the report sets against the seed's change "
                         "per create")
    ls.add_argument("--other-maps", type=_integer, default=None, metavar="N",
                    help="other socket-storage maps whose programs give every socket an "
                         "element too (default 1: the seed's machine ran such a service, its "
                         "author said; 0: the bench alone)")
    ls.add_argument("--producers", type=_integer, default=1, help="producers (default 1, as -p 1)")
    ls.add_argument("--gp-latency", type=duration_arg, default=0.0,
                    help="minimum grace period (default 0: the next quiescent point)")
    ls.add_argument("--rcu-nocb", action="store_true",
                    help="RCU callbacks run on the next producer's CPU (needs 2+ producers)")
    ls.add_argument("--json", metavar="FILE", help="write the report's data as JSON")
    ls.add_argument("--plot", metavar="FILE",
                    help="write creation-speed and kmallocs plots (PNG/PDF/SVG by extension)")
    progress_flags(ls)


def cmd_reproduce_local_storage(args):

    if (args.runs is not None and args.runs < 1) or args.producers < 1:
        raise UsageError("--runs and --producers must be at least 1")
    lo, hi = other_maps_bounds()
    if args.other_maps is not None and not lo <= args.other_maps <= hi:
        raise UsageError("--other-maps=%d: a number of maps from %d to %d"
                         % (args.other_maps, lo, hi))
    if args.other_maps and "socket" not in args.storage_types:
        raise UsageError("--other-maps=%d gives sockets elements of other maps, but "
                         "--storage-types=%s runs no socket storage; add socket"
                         % (args.other_maps, ",".join(args.storage_types)))
    for flag, v in (("--duration", args.duration), ("--sample", args.sample)):
        if v is not None and not v > 0:
            raise UsageError("%s=%r: a positive number of seconds" % (flag, v))
    return emit_report(
        lambda: reproduce.local_storage(storage_types=args.storage_types,
                                      batch_sizes=args.batch_sizes, runs=args.runs,
                                      duration=args.duration, sample=args.sample,
                                      owner_work=args.owner_work, producers=args.producers,
                                      gp_latency=int(round(args.gp_latency * 1e9)),
                                        rcu_nocb=args.rcu_nocb, effort=args.effort,
                                        progress=args.progress,
                                        alone=args.alone and args.owner_work == "real",
                                        other_maps=None if args.other_maps is None else
                                        {"socket": args.other_maps, "task": 0}),
        args, reproduce.LocalStorageReport)


def cmd_reproduce(args, parser):

    if args.seed == "vmalloc":
        return cmd_reproduce_vmalloc(args)
    if args.seed == "local-storage":
        return cmd_reproduce_local_storage(args)
    if args.seed != "libarena":  # argparse refuses an unknown seed; this is none given
        raise UsageError("reproduce needs a seed: alloclab reproduce SEED [flags]; seeds: %s "
                         "(`alloclab reproduce SEED --help` describes one)"
                         % ", ".join(args.seeds))
    if len(args.size) != 1:
        raise UsageError("--size takes one size for a reproduction, not %r" % (args.size,))
    if args.cpu != "simulated" and (args.calibration is not None or args.scaling is not None):
        raise UsageError("--calibration and --scaling go with --cpu simulated")
    if args.cpu == "simulated":
        return cmd_simulated(args)
    if args.caches_above and not args.tree:
        raise UsageError("--caches-above needs --tree DIR (the model's caches above a tree's "
                         "own)")
    if args.fidelity:
        return cmd_fidelity(args)
    return emit_report(
        lambda: reproduce.libarena(producers=args.producers or [1, 2, 4, 8],
                                 allocs_per_cycle=args.allocs_per_cycle, runs=args.runs,
                                 size=args.size[0], timings=args.timing or ["per_op_sum"],
                                 workloads=args.workloads, duration=args.duration,
                                   baseline=not args.no_baseline, effort=args.effort,
                                   progress=args.progress, stats=args.stats or DEFAULT_STATS,
                                   tree=args.tree, caches_above=args.caches_above),
        args, reproduce.LibarenaReport)


def cmd_fidelity(args):
    """`reproduce libarena --fidelity`: the model's buddy against the tree's."""
    from ..policies import libarena_real

    if args.plot:
        raise UsageError("--plot is not made by --fidelity (a table); leave it out")
    if args.timing and len(args.timing) != 1:
        raise UsageError("--fidelity takes one --timing, not %s" % ",".join(args.timing))
    tree = args.tree or libarena_real.default_tree()
    if tree is None:
        raise UsageError("--fidelity needs a libarena tree: --tree DIR or $%s"
                         % libarena_real.ENV_TREE)
    effort = {"quick": (3, 0.05), "normal": (5, 0.2), "rigorous": (10, 0.5)}[args.effort]
    return emit_report(
        lambda: reproduce.libarena_fidelity(
            tree, producers=args.producers or [1, 2],
            allocs_per_cycle=args.allocs_per_cycle or [64, 256], size=args.size[0],
            runs=args.runs or effort[0], duration=args.duration or effort[1],
            stats=args.stats or "full", timing=(args.timing or ["batch"])[0],
            progress=args.progress),
        args)
