"""The llvm backend's on-disk object cache (nexus.backends.llvm.cache): a second process
loads the object the first compiled, a damaged entry is compiled again, results agree
with the python backend either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

require("llvmlite", "llvm")

from nexus.backends.llvm import LLVMExecutable  # noqa: E402
from nexus.backends.llvm.cache import ENV  # noqa: E402

CHILD = r"""
import json, sys
import numpy as np
import nexus as nx
from nexus.passes.examples import seed004

exe = nx.compile(seed004(), backend="llvm")
print(json.dumps({"cached": exe.jit.cached, "out": int(exe(np.int32(int(sys.argv[1]))))}))
"""


def _child(env_dir: Path | None, n: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if env_dir is not None:
        env[ENV] = str(env_dir)
    done = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True, text=True, env=env,
                          timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_what_the_first_compiled(tmp_path: Path) -> None:
    from nexus.passes.examples import seed004

    want = int(nx.compile(seed004(), backend="python")(np.int32(10)))
    first = _child(tmp_path, 10)
    assert first == {"cached": False, "out": want}
    entries = list(tmp_path.glob("*.o"))
    assert len(entries) == 1
    assert _child(tmp_path, 10) == {"cached": True, "out": want}
    # a damaged entry is not loaded: compiled again, right, and the entry written anew
    raw = bytearray(entries[0].read_bytes())
    raw[-1] ^= 0xFF
    entries[0].write_bytes(bytes(raw))
    assert _child(tmp_path, 10) == {"cached": False, "out": want}
    assert _child(tmp_path, 10) == {"cached": True, "out": want}
    assert _child(None, 10) == {"cached": False, "out": want}  # no variable: no cache


@nx.script
def scale(x, a: float):  # noqa: ANN001, ANN201
    return x * a + 1.0


def test_the_option_chooses_the_directory_or_turns_it_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.arange(4.0)
    g = scale.graph_for(x, 2.0)
    monkeypatch.setenv(ENV, str(tmp_path / "env"))
    off = nx.compile(g, backend="llvm", cache=False)
    assert isinstance(off, LLVMExecutable) and not off.jit.cached and not (tmp_path / "env").exists()
    mine = tmp_path / "mine"
    a = nx.compile(g, backend="llvm", cache=str(mine))
    b = nx.compile(g, backend="llvm", cache=mine)
    assert isinstance(a, LLVMExecutable) and isinstance(b, LLVMExecutable)
    assert (a.jit.cached, b.jit.cached) == (False, True)
    np.testing.assert_array_equal(b(x, 2.0), x * 2.0 + 1.0)
    other = nx.compile(scale.graph_for(x.astype(np.float32), 2.0), backend="llvm", cache=mine)
    assert isinstance(other, LLVMExecutable) and not other.jit.cached and len(list(mine.glob("*.o"))) == 2
    with pytest.raises(TypeError, match="cache is a directory"):
        nx.compile(g, backend="llvm", cache=3)


def test_a_directory_that_cannot_be_written_is_no_failure(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    exe = nx.compile(scale.graph_for(np.arange(3.0), 1.0), backend="llvm", cache=blocker / "sub")
    assert isinstance(exe, LLVMExecutable) and not exe.jit.cached
    np.testing.assert_array_equal(exe(np.arange(3.0), 1.0), np.arange(3.0) + 1.0)


W = np.arange(64.0 * 32.0).reshape(64, 32) / 1000.0  # 16 KB: read from the constants table


@nx.script
def layer(x, i: int):  # noqa: ANN001, ANN201
    return np.tanh(x @ W)[i]


def test_a_loaded_object_needs_no_text_yet_has_its_table_blas_errors_and_ir(tmp_path: Path) -> None:
    # a hit loads the object without parsing the module's text: the constants table, the
    # BLAS symbol, the failures and the optimised IR (optimised again on demand) all still work
    x = np.random.default_rng(0).normal(size=(5, 64))
    g = layer.graph_for(x, 1)
    a = nx.compile(g, backend="llvm", cache=tmp_path)
    b = nx.compile(g, backend="llvm", cache=tmp_path)
    assert isinstance(a, LLVMExecutable) and isinstance(b, LLVMExecutable)
    assert (a.jit.cached, b.jit.cached) == (False, True)
    want = np.tanh(x @ W)
    np.testing.assert_allclose(b(x, 3), want[3], rtol=1e-12)
    np.testing.assert_allclose(b(x, -1), want[-1], rtol=1e-12)
    with pytest.raises(nx.NexusRuntimeError, match="IndexError"):
        b(x, 5)
    text = b.optimized_ir()  # (a's module was changed further by code generation: no equality)
    assert "define" in text and "nexus_main" in text and "gemm" in text
