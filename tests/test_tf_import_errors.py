"""TensorFlow GraphDef import: malformed graphs give one clear error naming the node (never
a traceback, also from ``nexus convert``); what the fixtures do not show, on GraphDefs
edited from them or written by hand (Merge inputs in either order, splat constants,
every unsupported op in one error)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.cli.main import main
from nexus.testing.extras import require

require("tensorboard", "tf")
from nexus.frontend.tf.proto import TfImportError  # noqa: E402

HERE = os.path.join(os.path.dirname(__file__), "fixtures", "tf")


def text(name: str) -> str:
    with open(os.path.join(HERE, name + ".pbtxt")) as f:
        return f.read()


def edited(name: str, old: str, new: str, count: int = 1) -> bytes:
    """Fixture ``name`` with ``old`` replaced by ``new`` (which must occur), as text bytes."""
    s = text(name)
    assert s.count(old) >= count, old
    return s.replace(old, new, count).encode()


def load(data: bytes, tmp_path: Any, *args: Any) -> nx.Graph:
    path = tmp_path / "g.pbtxt"
    path.write_bytes(data)
    return nx.from_tf(str(path), *args)


def error(data: bytes, tmp_path: Any, *args: Any) -> str:
    with pytest.raises(TfImportError) as e:
        load(data, tmp_path, *args)
    return str(e.value)


# --- malformed ---------------------------------------------------------------------------------
def test_truncated_protobuf(tmp_path: Any) -> None:
    with open(os.path.join(HERE, "seed004.pb"), "rb") as f:
        data = f.read()
    bad = tmp_path / "cut.pb"
    bad.write_bytes(data[:len(data) - 20])
    with pytest.raises(TfImportError, match=r"cut\.pb: not a valid GraphDef \(truncated or corrupt protobuf\)"):
        nx.from_tf(str(bad))
    with pytest.raises(TfImportError, match="not a GraphDef in protobuf text format"):
        load(b"node { name: 'x' op: ", tmp_path)
    with pytest.raises(TfImportError, match="cannot read GraphDef"):
        nx.from_tf(str(tmp_path / "missing.pb"))


def test_input_naming_nothing(tmp_path: Any) -> None:
    msg = error(edited("seed004", 'input: "Add"', 'input: "Nope"'), tmp_path)
    assert "node 'output' (AddV2)" in msg and "'Nope'" in msg and "names nothing" in msg
    msg = error(edited("seed004", 'input: "Add"', 'input: "Add"\n  input: "^Ghost"'), tmp_path)
    assert "node 'output' (AddV2)" in msg and "^Ghost" in msg


def test_merge_with_no_enter(tmp_path: Any) -> None:
    msg = error(edited("skip5_v1", 'input: "while/Enter"\n', 'input: "Const"\n'), tmp_path, None, ["sum:0"])
    assert "node 'while/Merge' (Merge) takes NextIteration 'while/NextIteration' but no Enter" in msg


def test_frames_that_do_not_nest(tmp_path: Any) -> None:
    # An Enter of the inner loop that names the outer loop's frame: it enters a frame from inside itself.
    s = text("nested_v1")
    inner = s.index('name: "while/while/Enter"')
    frame = s.index('s: "while/while/while_context"', inner)
    bad = (s[:frame] + 's: "while/while_context"' + s[frame + len('s: "while/while/while_context"'):]).encode()
    msg = error(bad, tmp_path, None, ["acc:0"])
    assert "node 'while/while/Enter' (Enter) enters frame 'while/while_context'" in msg and "do not nest" in msg
    # The backward loop reads a value inside the forward loop directly (not through a stack).
    bad2 = edited("grad_v1", 'input: "gradients/while/mul_grad/Mul_1/StackPopV2"\n  input: "gradients/while/Merge',
                  'input: "while/Identity_1"\n  input: "gradients/while/Merge')
    msg = error(bad2, tmp_path, None, ["gw:0"])
    assert "node 'gradients/while/mul_grad/Mul_1' (Mul)" in msg and "do not nest" in msg


def test_exit_outside_any_loop(tmp_path: Any) -> None:
    msg = error(edited("seed004", 'op: "Sub"', 'op: "Exit"'), tmp_path)
    assert "node 'Sub' (Exit) is not inside any while loop" in msg


def test_cycle_without_next_iteration(tmp_path: Any) -> None:
    msg = error(edited("seed004", 'input: "input"', 'input: "output"'), tmp_path, [], ["output:0"])
    assert "is on a cycle that does not pass through NextIteration" in msg


def test_both_sides_of_a_switch(tmp_path: Any) -> None:
    msg = error(edited("cond_v1", 'input: "cond/add/Switch:1"', 'input: "cond/Sin/Switch"'), tmp_path)
    assert "node 'cond/add' (AddV2) takes values from both sides of the Switch on 'Greater'" in msg


def test_every_unsupported_op_in_one_error(tmp_path: Any) -> None:
    data = edited("seed004", 'op: "Sub"', 'op: "FancySub"')
    data = data.replace(b'op: "AddV2"', b'op: "Fancy2"', 1)
    msg = error(data, tmp_path)
    assert "2 TensorFlow op types without a Nexus import rule" in msg
    assert "FancySub (e.g. 'Sub')" in msg and "Fancy2 (e.g. 'Add')" in msg
    # Inside the function library too.
    msg = error(text("skip5_v2").replace('op: "LessEqual"', 'op: "LessEqualish"').encode(), tmp_path)
    assert "LessEqualish (e.g. function 'while_cond_" in msg


def test_names_of_inputs_and_outputs(tmp_path: Any) -> None:
    data = text("seed004").encode()
    assert "output 'nope:0' names no node" in error(data, tmp_path, None, ["nope:0"])
    assert "input 'Const:0' must be output 0 of a Placeholder" in error(data, tmp_path, ["Const:0"])
    msg = error(data, tmp_path, [], ["output:0"])
    assert "node 'input' (Placeholder)" in msg and "not among the inputs" in msg
    msg = error(text("skip5_v1").encode(), tmp_path, None, ["while/Identity_1:0"])
    assert "output while/Identity_1:0 is inside a while loop" in msg


def test_cli_reports_without_traceback(tmp_path: Any, capsys: Any) -> None:
    bad = tmp_path / "bad.pbtxt"
    bad.write_bytes(edited("skip5_v1", 'input: "while/Enter"\n', 'input: "Const"\n'))
    assert main(["convert", str(bad), "-o", str(tmp_path / "x.nx"), "--outputs", "sum:0"]) == 1
    err = capsys.readouterr().err
    assert "node 'while/Merge' (Merge)" in err and "Traceback" not in err


def test_cli_converts_binary_and_text(tmp_path: Any, capsys: Any) -> None:
    for src in ("seed004.pb", "seed004.pbtxt"):
        out = tmp_path / (src.replace(".", "_") + ".nx")
        assert main(["convert", os.path.join(HERE, src), "-o", str(out), "--inputs", "input:0",
                     "--outputs", "output:0"]) == 0
        assert int(np.asarray(nx.load(out)(np.array([10], np.int32)))[0]) == 113
    out = tmp_path / "skip5.nx"
    assert main(["convert", os.path.join(HERE, "skip5_v2.pbtxt"), "-o", str(out)]) == 0
    res = nx.load(out)(np.array(10, np.int32), np.array(25, np.int32))
    assert [int(v) for v in res] == [31, 8]


# --- what the fixtures do not show ----------------------------------------------------------------
def test_merge_inputs_in_either_order(tmp_path: Any) -> None:
    """A cond Merge's inputs are not ordered by side: swapped, the same results."""
    swapped = edited("cond_v1", 'input: "cond/sub"\n  input: "cond/add"', 'input: "cond/add"\n  input: "cond/sub"')
    g = load(swapped, tmp_path, ["x:0", "y:0"], ["out:0"])
    y = np.array(1.5, np.float32)
    for x in ([1.0, -0.5, 2.0], [-1.0, -0.5, 0.25]):
        xv = np.array(x, np.float32)
        want = xv * 2 + y if xv.sum() > 0 else np.sin(xv) - xv
        np.testing.assert_allclose(g(xv, y), want, rtol=1e-6)


def test_splat_constant_and_roll(tmp_path: Any) -> None:
    """A Const with fewer values than elements repeats the last one (TF's splat encoding)."""
    gd = """
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "shape" value { shape { dim { size: 4 } } } } }
node { name: "c" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 4 } }
                                            float_val: 1.5 float_val: 2.5 } } } }
node { name: "k" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
       attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 2 } } int_val: 7 } } } }
node { name: "y" op: "Mul" input: "x" input: "c" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "one" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
       attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { } int_val: 1 } } } }
node { name: "r" op: "Roll" input: "y" input: "one" input: "axis" }
node { name: "axis" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
       attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { } int_val: 0 } } } }
"""
    g = load(gd.encode(), tmp_path, None, ["y:0", "k:0", "r:0"])
    x = np.arange(4, dtype=np.float32)
    y, k, r = g(x)
    np.testing.assert_array_equal(y, x * np.array([1.5, 2.5, 2.5, 2.5], np.float32))
    np.testing.assert_array_equal(k, [7, 7])
    np.testing.assert_array_equal(r, np.roll(y, 1))
    assert [n.name for n in g.args] == ["x"]


def test_hostile_graphs_are_refused_cheaply(tmp_path: Any) -> None:
    huge = """
node { name: "c" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 100000 } dim { size: 100000 } }
                                            float_val: 1.0 } } } }
"""
    assert "splat constant of 10000000000 elements" in error(huge.encode(), tmp_path)
    # A function whose If calls the function itself.
    selfcall = """
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "p" op: "Placeholder" attr { key: "dtype" value { type: DT_BOOL } } }
node { name: "top" op: "StatelessIf" input: "p" input: "x" input: "p"
       attr { key: "then_branch" value { func { name: "f" } } }
       attr { key: "else_branch" value { func { name: "f" } } } }
library { function {
  signature { name: "f" input_arg { name: "a" type: DT_FLOAT } input_arg { name: "q" type: DT_BOOL }
              output_arg { name: "r" type: DT_FLOAT } }
  node_def { name: "i" op: "StatelessIf" input: "q" input: "a" input: "q"
             attr { key: "then_branch" value { func { name: "f" } } }
             attr { key: "else_branch" value { func { name: "f" } } } }
  ret { key: "r" value: "i:output:0" } } }
"""
    msg = error(selfcall.encode(), tmp_path)
    assert "function 'f': node 'i' (StatelessIf): function 'f' calls itself (through f)" in msg


def test_one_input_merge_passes_its_input(tmp_path: Any) -> None:
    data = text("seed004") + 'node { name: "m" op: "Merge" input: "output" attr { key: "N" value { i: 1 } } }\n'
    g = load(data.encode(), tmp_path, None, ["m:0"])
    assert int(np.asarray(g(np.array([10], np.int32)))[0]) == 113
