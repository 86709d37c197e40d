"""The llvm backend (issue 12) against independent oracles: plain Python, NumPy, the
seed's stated answers.  Needs llvmlite (the ``llvm`` extra)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from nexus.testing.extras import require

require("llvmlite", "llvm")

import nexus as nx  # noqa: E402
from nexus.backends.base import check_tables, lowering_table  # noqa: E402
from nexus.backends.llvm import asm, llvm_ir  # noqa: E402
from nexus.backends.llvm.backend import LLVMExecutable  # noqa: E402
from nexus.backends.llvm.partition import Partitioned  # noqa: E402
from nexus.ir.graph import Graph  # noqa: E402
from nexus.ir.types import TensorType, sym  # noqa: E402
from nexus.passes.examples import seed004  # noqa: E402

# x86-64 instructions that compute something (moves, returns, pushes and nops do not).
_ARITH = re.compile(r"^\s*(add|sub|imul|mul|div|idiv|inc|dec|neg|lea|shl|shr|sar|and|or|xor|not)[a-z]*\s", re.M)


def _graph(dtypes: list[str], build) -> Graph:  # type: ignore[no-untyped-def]
    g = Graph("t", [TensorType(d, ()) for d in dtypes])
    out = build(g, g.start_block, *g.args)
    g.end_block.append_input(g.add("Return", [out], g.start_block))
    return g


# --- seed 004 -----------------------------------------------------------------------------
def test_seed004_runs_and_is_one_add_of_103() -> None:
    exe = nx.compile(seed004(), backend="llvm")
    assert isinstance(exe, LLVMExecutable)
    assert exe(10) == ((10 - 2) + 5) + 100 == 113
    assert exe.compile_time > 0
    text = exe.asm()
    body = text.split("nexus_main:", 1)[1].split(".Lfunc_end0", 1)[0]
    arith = _ARITH.findall(body)
    assert len(arith) == 1 and "$103" in body, body


@pytest.mark.parametrize("triple, add", [("aarch64", r"add\s+w\d+, w\d+, #103"), ("armv7", r"add\s+r\d+, r\d+, #103")])
def test_seed004_assembly_for_arm(triple: str, add: str) -> None:
    text = asm(seed004(), triple)
    assert re.search(add, text), text


def test_llvm_ir_text_has_the_arithmetic_before_o3_and_one_add_after() -> None:
    raw = llvm_ir(seed004(), optimized=False)
    assert raw.count(" sub ") == 1 and raw.count(" add ") == 2
    assert re.search(r"add i32 %[.\w]+, 103", llvm_ir(seed004()))


# --- scalars, control flow, integer semantics ----------------------------------------------
def test_loop_graphs_match_python() -> None:
    from bench.graphs import MOD, w1_seed, w2_count

    assert nx.compile(w1_seed(), backend="llvm")() == 31
    s = i = 0
    while i < 1000:
        s, i = (s + i * i) % MOD, i + 1
    assert nx.compile(w2_count(), backend="llvm")(1000) == s


INT_CASES = [(a, b) for a in (-7, -1, 0, 1, 7, 13, -2**62) for b in (-3, -1, 2, 5)]


@pytest.mark.parametrize("op, fn", [("FloorDiv", lambda a, b: a // b), ("Mod", lambda a, b: a % b),
                                    ("Div", lambda a, b: int(a / b) if abs(a) < 2**52 else None)])
def test_int_division_rounds_like_python(op: str, fn) -> None:  # type: ignore[no-untyped-def]
    exe = nx.compile(_graph(["i64", "i64"], lambda g, b, x, y: g.add(op, [x, y], b)), backend="llvm")
    for a, b in INT_CASES:
        want = fn(a, b)
        if want is not None:
            assert exe(a, b) == want, (op, a, b)
    with pytest.raises(nx.NexusRuntimeError, match="ZeroDivisionError"):
        exe(1, 0)


@pytest.mark.parametrize("op", ["FloorDiv", "Mod"])
def test_int_division_by_constants_rounds_like_python(op: str) -> None:
    for d in (3, -3, 1000003, -1):
        g = Graph("t", [TensorType("i64", ())])
        b = g.start_block
        k = g.add("Constant", [], b, {"value": np.array(d, np.int64)})
        g.end_block.append_input(g.add("Return", [g.add(op, [g.args[0], k], b)], b))
        exe = nx.compile(g, backend="llvm")
        for a in (-2**63, -7, -6, -1, 0, 5, 2**63 - 1):
            with np.errstate(over="ignore"):
                ref = np.floor_divide if op == "FloorDiv" else np.mod
                want = ref(np.int64(a), np.int64(d))
            assert exe(a) == want, (op, a, d)


def test_int_wraparound_and_shifts_match_numpy() -> None:
    mul = nx.compile(_graph(["i32", "i32"], lambda g, b, x, y: g.add("Mul", [x, y], b)), backend="llvm")
    with np.errstate(over="ignore"):
        assert mul(2**30, 7) == np.int32(2**30) * np.int32(7)
    shl = nx.compile(_graph(["i64", "i64"], lambda g, b, x, y: g.add("LeftShift", [x, y], b)), backend="llvm")
    shr = nx.compile(_graph(["i64", "i64"], lambda g, b, x, y: g.add("RightShift", [x, y], b)), backend="llvm")
    for a in (-5, 3, 2**62):
        for n in (0, 1, 63, 64, 70):
            assert shr(a, n) == np.right_shift(np.int64(a), np.int64(n)), (a, n)
            assert shl(a, n) == np.left_shift(np.int64(a), np.int64(n)), (a, n)
    with pytest.raises(nx.NexusRuntimeError, match="negative shift"):
        shr(1, -1)


def test_float_floor_div_and_mod_match_numpy() -> None:
    fd = nx.compile(_graph(["f64", "f64"], lambda g, b, x, y: g.add("FloorDiv", [x, y], b)), backend="llvm")
    md = nx.compile(_graph(["f64", "f64"], lambda g, b, x, y: g.add("Mod", [x, y], b)), backend="llvm")
    for a in (-7.5, -0.0, 0.0, 3.25, 1e300):
        for b in (-2.0, 0.5, 3.0, 0.0):
            with np.errstate(all="ignore"):
                want_q, want_r = np.floor_divide(a, b), np.mod(a, b)
            np.testing.assert_array_equal(fd(a, b), want_q)
            np.testing.assert_array_equal(md(a, b), want_r)


# --- tensors ---------------------------------------------------------------------------------
def test_fused_chain_with_broadcasting_and_symbolic_dims() -> None:
    n = sym("N")
    g = Graph("chain", [TensorType("f32", (n, 3)), TensorType("f32", (3,)), TensorType("f32", ())])
    x, row, s = g.args
    b = g.start_block
    t = g.add("Tanh", [g.add("Mul", [g.add("Add", [g.add("Sub", [x, row], b), s], b), x], b)], b)
    g.end_block.append_input(g.add("Return", [t], b))
    exe = nx.compile(g, backend="llvm")
    rng = np.random.default_rng(0)
    for rows in (1, 7, 100):
        xv = rng.normal(size=(rows, 3)).astype(np.float32)
        rv = rng.normal(size=3).astype(np.float32)
        np.testing.assert_allclose(exe(xv, rv, np.float32(0.5)), np.tanh((xv - rv + 0.5) * xv), rtol=2e-6, atol=2e-6)
    src = exe.optimized_ir()
    assert "<8 x float>" in src or "<4 x float>" in src or "<16 x float>" in src  # the loop vectorised


def test_tanh_f32_is_close_to_numpy_everywhere() -> None:
    g = Graph("tanh", [TensorType("f32", (sym("N"),))])
    g.end_block.append_input(g.add("Return", [g.add("Tanh", [g.args[0]], g.start_block)], g.start_block))
    x = np.concatenate([np.linspace(-12, 12, 100001), [0.0, -0.0, 1e-7, np.inf, -np.inf]]).astype(np.float32)
    got = nx.compile(g, backend="llvm")(x)
    np.testing.assert_allclose(got, np.tanh(x), rtol=1e-6, atol=1e-7)


def test_unsupported_ops_run_partitioned_and_are_named() -> None:
    g = Graph("cs", [TensorType("f32", (4,))])
    g.end_block.append_input(g.add("Return", [g.add("CumSum", [g.args[0]], g.start_block, {"axis": 0})],
                                   g.start_block))
    exe = nx.compile(g, backend="llvm")
    assert isinstance(exe, Partitioned) and exe.stayed_out == {"CumSum": 1}
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(exe(x), np.cumsum(x), rtol=1e-6)


def test_lowering_table_names_registered_ops() -> None:
    assert check_tables({"llvm": lowering_table("llvm")}) == []


# --- the script fuzzer -----------------------------------------------------------------------
def test_fuzzed_scripts_agree_with_python_on_llvm() -> None:
    from nexus.testing.py_gen import fuzz

    stats: dict[str, int] = {}
    # numpy=False: the ops of np.array([...]) (Concat, Unsqueeze) have no LLVM lowering: such
    # programs run partitioned, which the 5,000-program run in docs/llvm.md covers.
    failures = fuzz(24, seed=12, arrays_every=2, backend="llvm", stats=stats, max_depth=2, runs=2, numpy=False)
    assert not failures, str(failures[0])
    assert stats.get("LLVMExecutable", 0) >= 20, stats


def test_cli_prints_assembly_for_another_target(capsys: pytest.CaptureFixture[str]) -> None:
    from nexus.cli.main import main

    assert main(["compile", "example:seed004", "--backend", "llvm", "--emit", "asm", "--target", "aarch64"]) == 0
    assert re.search(r"add\s+w\d+, w\d+, #103", capsys.readouterr().out)
