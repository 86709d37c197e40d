"""The nexus command, run in-process through ``main([...])``."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus import seeds
from nexus.cli.main import main
from nexus.cli.values import InputError, parse_value, to_array
from nexus.ir import Graph, TensorType, parse, structurally_equal
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


def test_top_level_help_and_usage_errors(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0 and "nexus run model.nx --input" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


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
