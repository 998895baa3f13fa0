"""No output option may name a file the same command reads: the write would
replace the calibration, the trace, the plugin or the result it came from.
Each is refused before anything runs (one error line, exit 2), the input
left as it was, whatever spelling or link names it."""

import os
import subprocess
import sys

import pytest

RUN = ["run", "malloc-free", "--policy", "buddy", "--runs", "1", "--duration", "0.02"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "alloclab", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("argv,flag,reads", [
    (RUN + ["--cpu", "simulated", "--calibration", "IN", "--json", "OUT"], "--json",
     "--calibration"),
    (RUN + ["--cpu", "simulated", "--calibration", "IN", "--csv", "OUT"], "--csv",
     "--calibration"),
    (RUN + ["--cpu", "simulated", "--calibration", "IN", "--timeline", "OUT"], "--timeline",
     "--calibration"),
    (["run", "replay", "--trace", "IN", "--policy", "buddy", "--json", "OUT"], "--json",
     "--trace"),
    (RUN + ["--plugin", "IN", "--json", "OUT"], "--json", "--plugin"),
    (["preload", "--plugin", "IN", "--json", "OUT", "--", "true"], "--json", "--plugin"),
    (["reproduce", "libarena", "--cpu", "simulated", "--calibration", "IN", "--json", "OUT"],
     "--json", "--calibration"),
    (["compare", "IN", "IN", "--plot", "OUT"], "--plot", "RESULT.json"),
    (["trace", "info", "IN", "--plot", "OUT"], "--plot", "FILE"),
])
@pytest.mark.parametrize("spelling", ["same", "dot", "symlink", "hardlink"])
def test_an_output_naming_an_input_is_refused(tmp_path, argv, flag, reads, spelling):
    src = tmp_path / "in.dat"
    src.write_text("KEEP")
    out = {"same": str(src), "dot": str(tmp_path / "." / "in.dat"),
           "symlink": str(tmp_path / "link"), "hardlink": str(tmp_path / "hard")}[spelling]
    if spelling == "symlink":
        os.symlink(src, out)
    elif spelling == "hardlink":
        os.link(src, out)
    p = _cli(*[str(src) if a == "IN" else out if a == "OUT" else a for a in argv])
    assert p.returncode == 2, p.stderr
    assert p.stderr == "alloclab: error: %s %s is the %s this command reads: writing it " \
        "would replace it; give another file name\n" % (flag, out, reads)
    assert src.read_text() == "KEEP" and p.stdout == ""


@pytest.mark.parametrize("argv,reads", [
    (RUN + ["--cpu", "simulated", "--calibration", "IN", "--hist", "--plot", "PLOT"],
     "--calibration"),
    (["run", "replay", "--trace", "IN", "--policy", "buddy", "--hist", "--plot", "PLOT"],
     "--trace"),
])
def test_a_figure_named_after_the_plot_may_not_be_an_input(tmp_path, argv, reads):
    # --hist draws three figures: fig.png, fig-1.png, fig-2.png
    src = tmp_path / "fig-1.png"
    src.write_text("KEEP")
    plot = str(tmp_path / "fig.png")
    p = _cli(*[str(src) if a == "IN" else plot if a == "PLOT" else a for a in argv])
    assert p.returncode == 2, p.stderr
    assert p.stderr == "alloclab: error: --plot %s would write %s, which is the %s this " \
        "command reads: writing it would replace it; give another file name\n" % (
            plot, src, reads)
    assert src.read_text() == "KEEP" and not os.path.exists(plot) and p.stdout == ""


@pytest.mark.parametrize("by", ["--tree", "env"])
def test_an_output_over_a_file_of_the_tree_read_is_refused(tmp_path, by):
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    src = tree / "src" / "buddy.bpf.c"
    src.write_text("SRC")
    argv = ["reproduce", "libarena", "--fidelity", "--json", str(src)]
    env = dict(os.environ)
    if by == "--tree":
        argv += ["--tree", str(tree)]
    else:
        env["ALLOCLAB_LIBARENA"] = str(tree)
    p = subprocess.run([sys.executable, "-m", "alloclab", *argv], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 2, p.stderr
    assert p.stderr == "alloclab: error: --json %s is a file of the %s this command reads: " \
        "writing it would replace it; give another file name\n" % (
            src, "--tree" if by == "--tree" else "--tree ($ALLOCLAB_LIBARENA)")
    assert src.read_text() == "SRC" and sorted(os.listdir(tree / "src")) == ["buddy.bpf.c"]


def test_a_new_file_in_the_tree_is_not_an_input(tmp_path):
    import argparse
    from alloclab.cli import format as cli_format
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "buddy.bpf.c").write_text("SRC")
    for out in (tree / "fid.json", tmp_path / "fid.json", "fid.json"):
        args = argparse.Namespace(cmd="reproduce", tree=str(tree), json=str(out))
        cli_format.check_not_inputs(args)  # no error: a new file, not one the tree has
    args.json = str(tree / "." / "src" / "buddy.bpf.c")
    with pytest.raises(cli_format.UsageError, match="is a file of the --tree"):
        cli_format.check_not_inputs(args)


def test_an_output_beside_its_input_is_written(tmp_path):
    plugin = os.path.join(os.path.dirname(__file__), "..", "examples", "plugins", "pool.c")
    out = tmp_path / "r.json"
    p = _cli(*RUN, "--plugin", plugin, "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert out.exists() and "alloclab: wrote %s" % out in p.stderr


def test_sim_validate_may_write_its_calibration_back():
    import argparse
    from alloclab.cli import format as cli_format
    args = argparse.Namespace(cmd="sim", sim_cmd="validate", calibration="c.json", out="c.json")
    cli_format.check_not_inputs(args)  # no error: the calibration with its validation added
    args.sim_cmd = "calibrate"
    with pytest.raises(cli_format.UsageError, match="--out c.json is the --calibration"):
        cli_format.check_not_inputs(args)


@pytest.mark.parametrize("argv,flag", [
    (["record", "--quiet", "--out", "OUT", "--", "PROG"], "--out"),
    (["preload", "--json", "OUT", "--", "PROG"], "--json"),
])
@pytest.mark.parametrize("spelling", ["same", "symlink"])
def test_an_output_naming_the_program_it_runs_is_refused(tmp_path, argv, flag, spelling):
    prog = tmp_path / "mytrue"
    prog.write_bytes(open("/bin/true", "rb").read())
    prog.chmod(0o755)
    keep = prog.read_bytes()
    out = str(prog) if spelling == "same" else str(tmp_path / "link")
    if spelling == "symlink":
        os.symlink(prog, out)
    p = _cli(*[out if a == "OUT" else str(prog) if a == "PROG" else a for a in argv])
    assert p.returncode == 2, p.stderr
    assert p.stderr == "alloclab: error: %s %s is the program the command runs (%s): " \
        "writing it would replace it; give another file name\n" % (flag, out, prog)
    assert prog.read_bytes() == keep


@pytest.mark.parametrize("argv,flag", [
    (["record", "--quiet", "--out", "OUT", "--", "cat", "ARG"], "--out"),
    (["preload", "--json", "OUT", "--", "cat", "ARG"], "--json"),
])
@pytest.mark.parametrize("form", ["FILE", "--opt=FILE"])
def test_an_output_naming_a_file_of_the_programs_arguments_is_refused(tmp_path, argv, flag,
                                                                      form):
    src = tmp_path / "in.txt"
    src.write_text("KEEP")
    arg = form.replace("FILE", str(src))
    p = _cli(*[str(src) if a == "OUT" else arg if a == "ARG" else a for a in argv])
    assert p.returncode == 2, p.stderr
    assert p.stderr == "alloclab: error: %s %s is a file the command's arguments name (%s): " \
        "writing it would replace what the program reads; give another file name\n" % (
            flag, src, arg)
    assert src.read_text() == "KEEP" and p.stdout == ""
