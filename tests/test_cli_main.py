"""The nexus command, run in-process through ``main([...])``."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import nexus as nx
from nexus import seeds
from nexus.cli.main import main
from nexus.cli.values import InputError, parse_value, to_array
from nexus.ir import Graph, TensorType, parse, structurally_equal
from nexus.ir.limits import MAX_NESTING, MAX_NUMBER_CHARS
from nexus.testing.extras import require_program


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _args_graph() -> Graph:
    """f(x: f32[2, 2], n: i64) = (x * 2 summed over rows, n + 1)."""
    g = Graph("f", [TensorType("f32", (2, 2)), TensorType("i64", ())], ["x", "n"])
    two = g.add("Constant", [], g.start_block, {"value": np.array(2.0, np.float32)})
    s = g.add("ReduceSum", [g.add("Mul", [g.args[0], two], g.start_block)], g.start_block, {"axes": (0,)})
    one = g.add("Constant", [], g.start_block, {"value": np.array(1, np.int64)})
    r = g.add("Return", [s, g.add("Add", [g.args[1], one], g.start_block)], g.start_block)
    g.end_block.append_input(r)
    return g


def test_show_prints_text_that_parses_back(capsys, tmp_path) -> None:
    nx.save(seeds.skip5_loop(), tmp_path / "loop.nx")
    code, out, err = _run(capsys, "show", str(tmp_path / "loop.nx"))
    assert code == 0 and not err
    assert structurally_equal(parse(out), seeds.skip5_loop())
    code, out, _ = _run(capsys, "show", "--types", "seed:ifelse")
    assert code == 0 and out.startswith("# @ifelse() -> (f32)\n")


def test_verify(capsys, tmp_path) -> None:
    code, out, _ = _run(capsys, "verify", "seed:first_example")
    assert code == 0 and "ok: graph @first_example is valid" in out
    # Break the text: the Phi of the join loses an input.
    text = nx.print_graph(seeds.ifelse()).replace("Phi %c_then, %c_else", "Phi %c_then")
    (tmp_path / "bad.nx").write_text(text)
    code, out, err = _run(capsys, "verify", str(tmp_path / "bad.nx"))
    assert code == 1 and not out
    assert err.startswith("nexus: invalid graph: graph @ifelse is invalid")
    assert "Phi has 1 inputs but its block has 2 predecessors" in err and "Traceback" not in err


def test_errors_are_one_message(capsys, tmp_path) -> None:
    code, _, err = _run(capsys, "show", str(tmp_path / "missing.nx"))
    assert code == 1 and "missing.nx: no such file" in err and "Traceback" not in err
    (tmp_path / "bad.nx").write_text("graph @g {\n^entry:\n  %0 = Start : (f32\n}\n")
    code, _, err = _run(capsys, "verify", str(tmp_path / "bad.nx"))
    assert code == 1 and err.startswith(f"nexus: parse error: {tmp_path / 'bad.nx'}: line 3, col")
    code, _, err = _run(capsys, "show", "seed:nope")
    assert code == 1 and "unknown seed graph 'nope'" in err
    code, _, err = _run(capsys, "show", str(tmp_path))
    assert code == 1 and "is a directory" in err


def test_run_with_inputs(capsys, tmp_path) -> None:
    code, out, _ = _run(capsys, "run", "seed:skip5_loop")
    assert (code, out) == (0, "result 0: i32 = 31\n")
    nx.save(_args_graph(), tmp_path / "f.nx")
    code, out, err = _run(capsys, "run", str(tmp_path / "f.nx"), "--input", "x=[[1, 2.5], [3, -4]]", "-i", "n=41")
    assert code == 0, err
    assert out == "result 0: f32[2] = [ 8., -3.]\nresult 1: i64 = 42\n"
    code, out, _ = _run(capsys, "run", str(tmp_path / "f.nx"), "-i", "0=[[inf, 0], [nan, 1]]", "-i", "1=0")
    assert code == 0 and out.startswith("result 0: f32[2] = [nan,  2.]")
    for bad, message in [
        (["-i", "x=[[1,2],[3,4]]"], "missing --input for n"),
        (["-i", "x=[1,2]", "-i", "n=1"], "expected f32[2, 2] (rank 2)"),
        (["-i", "x=[[1,2],[3,4]]", "-i", "n=1.5"], "i64 takes whole numbers"),
        (["-i", "x=[[1,2],[3]]", "-i", "n=1"], "argument 'x'"),
        (["-i", "x=__import__('os')", "-i", "n=1"], "is not a number or a nested list"),
        (["-i", "y=1"], "has no argument 'y'; its arguments: x: f32[2, 2], n: i64"),
        (["-i", "n=1", "-i", "n=2"], "given twice"),
        (["-i", "x"], "write NAME=VALUE"),
    ]:
        code, _, err = _run(capsys, "run", str(tmp_path / "f.nx"), *bad)
        assert code == 1 and message in err and "Traceback" not in err, (bad, err)


def test_run_endless_loop_is_stopped(capsys, tmp_path) -> None:
    # With y = 10 seed 000's first example never ends; the block limit stops it.
    nx.save(seeds.first_example(10.0), tmp_path / "loop.nx")
    code, _, err = _run(capsys, "run", str(tmp_path / "loop.nx"), "--max-iterations", "1000")
    assert code == 1 and "max_iterations" in err and "Traceback" not in err


def test_viz(capsys, tmp_path) -> None:
    require_program("dot", "graphviz")
    out_svg = tmp_path / "loop.svg"
    code, out, _ = _run(capsys, "viz", "seed:skip5_loop", "-o", str(out_svg))
    assert code == 0 and out == f"wrote {out_svg}\n" and "^header" in out_svg.read_text()
    code, _, err = _run(capsys, "viz", "seed:ifelse", "-o", str(tmp_path / "x.bmpx"))
    assert code == 1 and "use a .svg" in err


@pytest.mark.parametrize("command", ["show", "verify", "viz", "run", "opt"])
def test_every_help_has_an_example(capsys, command: str) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    if command != "opt" or "unavailable" not in out:
        assert "example" in out and f"nexus {command}" in out


GRAPH_COMMANDS = ["show", "verify", "viz", "run", "opt", "compile"]


@pytest.mark.parametrize("command", GRAPH_COMMANDS)
def test_every_command_takes_seed_and_example_names(capsys, tmp_path, command: str) -> None:
    """One resolver for FILE (issue 32): ``example:seed004`` works wherever ``seed:NAME``
    does, and each --help says so."""
    extra = {"viz": ["-o", str(tmp_path / "g.dot")], "run": ["-i", "input=1"],
             "compile": ["--backend", "python"]}.get(command, [])
    code, out, err = _run(capsys, command, "example:seed004", *extra)
    assert code == 0, err
    if command == "run":
        assert out == f"result 0: i32 = {((1 - 2) + 5) + 100}\n"
    if command in ("show", "opt"):
        assert out.startswith("graph @seed004 {")
    code, _, err = _run(capsys, command, "example:nope", *extra)
    assert code == 1 and err == "nexus: error: unknown example 'nope'; known: seed004, rnn\n"
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "example:NAME" in capsys.readouterr().out.replace("\n", " ")


def test_top_level_help_and_usage_errors(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0 and "nexus run example:seed004 --input" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


def test_top_level_examples_run_as_written(capsys, tmp_path, monkeypatch) -> None:
    """The examples of ``nexus --help`` run in order in an empty folder (each makes the
    files the next one reads); the pictures when Graphviz is here, --serve not at all
    (it serves until stopped: tests/test_viz_serve.py)."""
    from nexus.cli.main import EPILOG
    from nexus.viz import dot_program

    monkeypatch.chdir(tmp_path)
    lines = [line.split("  ", 2)[1] for line in EPILOG.splitlines() if line.startswith("  nexus ")]
    assert len(lines) >= 5
    for line in lines:
        argv = line.split()[1:]
        if "--serve" in argv or (argv[0] == "viz" and dot_program() is None):
            continue
        code, out, err = _run(capsys, *argv)
        assert code == 0 and not err, (line, err)
    assert (tmp_path / "small.nx").exists()


def test_values_are_parsed_not_evaluated() -> None:
    assert parse_value(" [1, -2.5, true] ") == [1, -2.5, True]
    assert np.isinf(parse_value("-inf")) and np.isnan(parse_value("nan"))
    for bad in ['"text"', "[1, {}]", "1+1", "[" * 5000 + "]" * 5000, "ninf"]:
        with pytest.raises(InputError):
            parse_value(bad)
    assert to_array(3, TensorType("u8", ()), "a").dtype == np.uint8
    with pytest.raises(InputError, match="out of range for u8"):
        to_array(256, TensorType("u8", ()), "a")
    with pytest.raises(InputError, match="bool takes"):
        to_array([0, 2], TensorType("bool", (2,)), "a")
    assert to_array([1, 0], TensorType("bool", (2,)), "a").tolist() == [True, False]


def _nested(levels: int, inner: list) -> list:
    value = inner
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("inner", ["", "1"])
def test_values_nest_up_to_nexus_limit(inner: str) -> None:
    """Nexus's limit, not the interpreter's: json.loads alone accepts 5000 levels on 3.13
    and refuses them on 3.11."""
    at = "[" * MAX_NESTING + inner + "]" * MAX_NESTING
    assert parse_value(at) == _nested(MAX_NESTING, [int(inner)] if inner else [])
    for levels in (MAX_NESTING + 1, 5000):
        with pytest.raises(InputError) as info:
            parse_value("[" * levels + inner + "]" * levels)
        assert str(info.value).endswith(f"...: brackets nest more than {MAX_NESTING} levels deep"), info.value
        assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="values are numbers"):  # brackets in a string do not nest
        parse_value('[1, "' + "[" * 40 + '"]')


def test_value_numbers_up_to_nexus_limit() -> None:
    at = "1" * MAX_NUMBER_CHARS
    saved = sys.get_int_max_str_digits()
    try:
        for setting in (640, 0):  # the interpreter's lowest int-digit limit, and none
            sys.set_int_max_str_digits(setting)
            assert parse_value(f"[{at}]") == [int(at)]
            assert parse_value("-0." + "5" * (MAX_NUMBER_CHARS - 3)) == -0.5555555555555556
            for past in ("1" * (MAX_NUMBER_CHARS + 1), "1" * 5000, "1e" + "1" * MAX_NUMBER_CHARS):
                with pytest.raises(InputError, match=f"a number of {len(past)} characters \\(the limit is 600\\)$"):
                    parse_value(past)
    finally:
        sys.set_int_max_str_digits(saved)


def test_values_past_every_dtype_say_out_of_range() -> None:
    """A long integer the parser accepts is out of range, not a ragged list."""
    big = "1" + "0" * 30
    with pytest.raises(InputError, match=r"^a: a value is out of range for i64 \[-9223372036854775808, "):
        to_array(parse_value(f"[1, {big}]"), TensorType("i64", (2,)), "a")
    with pytest.raises(InputError, match="bool takes true/false"):
        to_array(parse_value(big), TensorType("bool", ()), "a")
    assert to_array(parse_value(f"[1, {big}]"), TensorType("f64", (2,)), "a").tolist() == [1.0, 1e30]
    with pytest.raises(InputError, match="out of range for f32"):
        to_array(parse_value("1" * 400), TensorType("f32", ()), "a")
    with pytest.raises(InputError, match="the nested lists are ragged|inhomogeneous"):
        to_array(parse_value("[[1, 2], [3]]"), TensorType("i64", None), "a")


SYMBOLIC = """graph @double {
^entry:
  %0 = Start : (f32[N, 4])
  %x = Proj %0 {num = 0} : f32[N, 4]
  %y = Add %x, %x : f32[...]
  %r = Return %y : X
^exit(%r):
  End : X
}
"""


def test_show_types_infers_symbolic_shapes(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "double.nx"
    path.write_text(SYMBOLIC)
    assert main(["show", "--types", str(path)]) == 0
    out = capsys.readouterr().out
    # The text says only "unknown rank" for %y; broadcasting [N, 4] with itself gives [N, 4].
    assert "%y = Add %x, %x : f32[N, 4]" in out
    assert "-> (f32[N, 4])" in out


def test_picture_labels_tensor_edges_with_shapes() -> None:
    from nexus.ir import parse
    from nexus.viz import to_dot

    dot = to_dot(parse(SYMBOLIC))
    edges = [line for line in dot.splitlines() if "->" in line and 'label=" [N, 4]"' in line]
    assert len(edges) == 2  # both inputs of the Add


def test_run_reports_a_symbol_bound_twice_in_one_line(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "pair.nx"
    path.write_text(SYMBOLIC.replace("@double", "@pair").replace(
        "%0 = Start : (f32[N, 4])", "%0 = Start : (f32[N, 4], f32[N, 4])").replace(
        "%y = Add %x, %x", "%x2 = Proj %0 {num = 1} : f32[N, 4]\n  %y = Add %x, %x2"))
    assert main(["run", str(path), "-i", "x=[[1,2,3,4]]", "-i", "x2=[[1,2,3,4],[5,6,7,8]]"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "N = 2" in err and "N = 1" in err and "'x'" in err and "'x2'" in err
