"""The ``nexus`` command and runs on unusual inputs (issue 18): every path ends in one
error line and a nonzero status (or a clean exit on a closed pipe), never a traceback;
names that verify compile; endless loops can be bounded and interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import nexus as nx
from nexus.backends.python import NexusRuntimeError
from nexus.io import save
from nexus.ir.parser import parse
from nexus.ir.printer import print_graph
from nexus.ir.verify import verify
from nexus.seeds import ALL
from nexus.testing.extras import require_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}

ENDLESS = "def spin(x: int) -> int:\n    while x > 0:\n        x = x + 1\n    return x\n"


def _nexus(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nexus.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV, **kw)


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    return proc.stderr


# --- names that verify compile --------------------------------------------------------------
def test_a_graph_named_with_any_characters_compiles_and_runs(tmp_path) -> None:
    text = print_graph(ALL["ifelse"]()).replace("graph @ifelse {", 'graph @"x²\\n(1)" {', 1)
    g = verify(parse(text))
    assert g.name == "x²\n(1)"
    want = nx.run(ALL["ifelse"]())
    assert nx.run(g) == want
    save(g, tmp_path / "x.nx")
    proc = _nexus("run", str(tmp_path / "x.nx"))
    assert proc.returncode == 0 and proc.stdout == f"result 0: f32 = {want}\n", proc.stderr


# --- endless loops: bounded in scripts, interrupted by Ctrl-C -------------------------------
def test_script_calls_take_max_iterations() -> None:
    spin = nx.script_source(ENDLESS, "spin")
    bounded = spin.with_options(max_iterations=1000)
    with pytest.raises(NexusRuntimeError, match="more than 1000 blocks"):
        bounded(1)
    assert bounded(-3) == -3 and spin(-3) == -3  # the unbounded script and its graphs are shared
    count = nx.script_source("def count(n: int) -> int:\n    i = 0\n    while i < n:\n        i = i + 1\n"
                             "    return i\n", "count")
    assert count.with_options(max_iterations=100)(10) == 10  # plain Python's answer
    with pytest.raises(NexusRuntimeError, match="max_iterations"):
        count.with_options(max_iterations=5)(10)
    with pytest.raises(TypeError, match="max_iterations"):
        count.with_options(max_iterations=-1)


def test_script_decorator_takes_max_iterations(tmp_path) -> None:
    path = tmp_path / "spin_mod.py"
    path.write_text("import nexus as nx\n\n@nx.script(max_iterations=500)\n" + ENDLESS)
    sys.path.insert(0, str(tmp_path))
    try:
        import spin_mod  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    with pytest.raises(NexusRuntimeError, match="more than 500 blocks"):
        spin_mod.spin(1)


def _interrupt(cmd: list[str], ready: str) -> tuple[subprocess.Popen, str, float]:
    """Start ``cmd``, wait until it printed ``ready`` plus a moment in its loop, send
    SIGINT; the process, its stderr and the seconds it took to stop."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert ready in line, line
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("Ctrl-C did not stop the run within 30 s")
    return proc, err, time.monotonic() - t0


def test_ctrl_c_stops_a_cli_run_with_one_line(tmp_path) -> None:
    save(nx.script_source(ENDLESS, "spin").graph, tmp_path / "spin.nx")
    # The CLI prints nothing before its result; a wrapper says when the run is about to start.
    code = ("import sys; from nexus.cli.main import main; print('ready', flush=True); "
            f"sys.exit(main(['run', {str(tmp_path / 'spin.nx')!r}, '-i', 'x=1', '--max-iterations', "
            "str(10**15)]))")
    proc, err, took = _interrupt([sys.executable, "-c", code], "ready")
    assert proc.returncode == 130 and err == "nexus: interrupted\n", (proc.returncode, err[-2000:])
    assert took < 10


def test_ctrl_c_stops_nx_run_with_keyboard_interrupt() -> None:
    code = ("import nexus as nx\nspin = nx.script_source(" + repr(ENDLESS) + ", 'spin')\n"
            "g = spin.graph_for(1)\nprint('ready', flush=True)\n"
            "try:\n    nx.run(g, 1)\nexcept KeyboardInterrupt:\n    print('KeyboardInterrupt', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    assert proc.stdout is not None and "ready" in proc.stdout.readline()
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert out.strip() == "KeyboardInterrupt" and proc.returncode == 0, err[-2000:]


# --- --input values --------------------------------------------------------------------------
@pytest.mark.parametrize("value, message", [
    ("2**64", "argument 'x' (i64): '2**64' is not a number"),
    ("18446744073709551616", "argument 'x': a value is out of range for i64"),  # was already fixed
    ("[1, 18446744073709551616]", "argument 'x': a value is out of range for i64"),  # was already fixed
])
def test_out_of_range_inputs_name_the_argument_and_dtype(tmp_path, value: str, message: str) -> None:
    save(nx.script_source(ENDLESS, "spin").graph, tmp_path / "spin.nx")
    err = _one_error_line(_nexus("run", str(tmp_path / "spin.nx"), "-i", f"x={value}"))
    assert message in err, err


def test_a_float_input_beyond_its_dtype_is_refused() -> None:
    from nexus.cli.values import InputError, parse_value, to_array
    from nexus.ir.types import TensorType

    with pytest.raises(InputError, match="argument 'y': a value is out of range for f32"):
        to_array(parse_value("[1, 1e39]"), TensorType("f32", None), "argument 'y'")
    assert to_array(parse_value("1e39"), TensorType("f64", ()), "y") == np.float64(1e39)


# --- viz and pipes ---------------------------------------------------------------------------
def test_viz_into_a_missing_directory(tmp_path) -> None:
    proc = _nexus("viz", "seed:ifelse", "-o", str(tmp_path / "missing" / "x.svg"))
    err = _one_error_line(proc)
    assert "does not exist" in err and str(tmp_path / "missing") in err


def _chain_text(n: int) -> str:
    body = "".join(f"  %v{i} = Add %v{i - 1}, %v{i - 1} : f32\n" for i in range(1, n))
    return ("graph @big {\n^entry:\n  %s = Start : (f32)\n  %v0 = Proj %s {num = 0} : f32\n" + body
            + f"  %r = Return %v{n - 1} : X\n^exit(%r):\n  End : X\n}}\n")


def test_viz_of_a_huge_graph_is_refused_with_a_message(tmp_path) -> None:
    require_program("dot", "graphviz")
    from nexus.viz import MAX_DRAWN_NODES

    (tmp_path / "big.nx").write_text(_chain_text(MAX_DRAWN_NODES + 10))
    err = _one_error_line(_nexus("viz", str(tmp_path / "big.nx"), "-o", str(tmp_path / "big.svg"), timeout=60))
    assert f"pictures are limited to {MAX_DRAWN_NODES}" in err and "write a .dot file" in err
    proc = _nexus("viz", str(tmp_path / "big.nx"), "-o", str(tmp_path / "big.dot"))
    assert proc.returncode == 0 and os.path.getsize(tmp_path / "big.dot") > 0


@pytest.mark.parametrize("command", [["show"], ["show", "--types"], ["verify"], ["run"]])
def test_output_into_a_closed_pipe_exits_cleanly(tmp_path, command: list[str]) -> None:
    """What ``nexus show model.nx | head -1`` meets when head has gone: the pipe is closed
    before the command writes (deterministic, unlike a race with head)."""
    (tmp_path / "big.nx").write_text(_chain_text(3000))
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "nexus.cli.main", *command, str(tmp_path / "big.nx"),
                               *(["-i", "0=0"] if command == ["run"] else [])],
                              stdout=write, stderr=subprocess.PIPE, env=ENV, timeout=60)
    finally:
        os.close(write)
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr[-2000:]
