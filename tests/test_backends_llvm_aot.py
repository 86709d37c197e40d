"""Ahead-of-time output of the llvm backend (``nexus compile --emit obj|shared|exe``):
programs and libraries that run with no Python, on the host and on aarch64 under qemu.
The oracle is plain Python running the same function (``nexus run`` for the printed text)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.cli.main import main
from nexus.frontend.script import Tensor
from nexus.testing import ports
from nexus.testing.extras import require, require_program

require("llvmlite", "llvm")

from nexus.backends.llvm.aot import AotError, build  # noqa: E402  (after the skip)

QEMU_ROOT = "/usr/aarch64-linux-gnu"


def _run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _bare_env() -> dict[str, str]:
    """An environment with no Python in it: only PATH to find the loader."""
    return {"PATH": "/usr/bin:/bin"}


def _exec(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=_bare_env(), timeout=120, **kw)


def _results(text: str) -> list[Any]:
    """The values of ``result i: TYPE = VALUE`` lines (a nested list is JSON)."""
    out = []
    for line in text.strip().splitlines():
        value = line.split(" = ", 1)[1]
        out.append(json.loads(value.replace("nan", "NaN").replace("True", "true").replace("False", "false")))
    return out


# --- the graphs: seed 004, W2's count loop, an NMS loop, a fused elementwise kernel -----------------
def count(n: int) -> int:
    s = 0
    for i in range(n):
        s = (s + i * i) % 1000003
    return s


def nms(boxes: Tensor["N", 4], scores: Tensor["N"], thresh: float):  # noqa: F821, UP037, ANN201
    """Greedy NMS, best score first: the indices kept (the first n of keep) and n.  W5's
    loop (``bench/w5_llvm.py``), but returning ``keep, n``: W5's and ``nexus.testing.ports``'
    ``keep[:n]`` has a size that depends on the data, which a C caller cannot allocate."""
    order = np.argsort(-scores)
    keep = np.zeros(boxes.shape[0], dtype=np.int64)
    n = 0
    for k in range(boxes.shape[0]):
        i = order[k]
        kept = True
        for m in range(n):
            j = keep[m]
            xx1 = max(boxes[i, 0], boxes[j, 0])
            yy1 = max(boxes[i, 1], boxes[j, 1])
            xx2 = min(boxes[i, 2], boxes[j, 2])
            yy2 = min(boxes[i, 3], boxes[j, 3])
            inter = max(0.0, xx2 - xx1) * max(0.0, yy2 - yy1)
            a_i = (boxes[i, 2] - boxes[i, 0]) * (boxes[i, 3] - boxes[i, 1])
            a_j = (boxes[j, 2] - boxes[j, 0]) * (boxes[j, 3] - boxes[j, 1])
            if inter / (a_i + a_j - inter) > thresh:
                kept = False
                break
        if kept:
            keep[n] = i
            n += 1
    return keep, n


def fused(x: Tensor["N"], y: Tensor["N"], a: float):  # noqa: F821, UP037, ANN201
    return np.tanh(x * a + y) * 0.5 - x * y


def _cases(tmp_path: Path) -> list[tuple[str, str, list[str], Any]]:
    """(name, saved graph, the program's arguments, plain Python's results)."""
    out = []
    boxes, scores = ports.boxes(np.random.default_rng(0), 7)
    x, y = np.linspace(-2, 2, 5), np.linspace(1, 3, 5)
    for name, fn, args, argv in [
        ("count", count, (1000,), ["n=1000"]),
        ("nms", nms, (boxes, scores, 0.3), [f"boxes={json.dumps(boxes.tolist())}",
                                            f"scores={json.dumps(scores.tolist())}", "thresh=0.3"]),
        ("fused", fused, (x, y, 1.5), [f"x={json.dumps(x.tolist())}", f"y={json.dumps(y.tolist())}", "a=1.5"]),
    ]:
        sf = nx.script(fn)
        g = sf.graph_for(*args)
        path = tmp_path / f"{name}.nx"
        nx.save(g, path)
        want = fn(*(a.copy() if isinstance(a, np.ndarray) else a for a in args))  # plain Python is the oracle
        out.append((name, str(path), argv, want if isinstance(want, tuple) else (want,)))
    out.append(("seed004", "example:seed004", ["input=10"], (np.int32(113),)))
    return out


def _agree(text: str, want: Any, what: str) -> None:
    got = _results(text)
    assert len(got) == len(want), text
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64),
                                   rtol=1e-15, atol=0, err_msg=what)


def test_programs_on_the_host_print_what_nexus_run_prints(capsys: Any, tmp_path: Path) -> None:
    require_program("cc", "gcc")
    for name, src, argv, want in _cases(tmp_path):
        exe = tmp_path / f"{name}.host"
        code, out, err = _run(capsys, "compile", src, "--backend", "llvm", "--emit", "exe", "-o", str(exe))
        assert code == 0 and out == f"wrote {exe}\n", err
        done = _exec([str(exe), *argv])
        assert done.returncode == 0, done.stderr
        _agree(done.stdout, want, name)
        if name in ("seed004", "count"):  # scalars: the very text of nexus run
            code, ref, err = _run(capsys, "run", src, *[a for v in argv for a in ("--input", v)])
            assert code == 0 and done.stdout == ref, (done.stdout, ref, err)


def test_programs_for_aarch64_run_under_qemu_and_agree(capsys: Any, tmp_path: Path) -> None:
    require_program("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu")
    qemu = require_program("qemu-aarch64", "qemu-user")
    for name, src, argv, want in _cases(tmp_path):
        exe = tmp_path / f"{name}.arm"
        code, _, err = _run(capsys, "compile", src, "--backend", "llvm", "--emit", "exe",
                            "--target", "aarch64-unknown-linux-gnu", "-o", str(exe))
        assert code == 0, err
        assert exe.read_bytes()[18] == 183  # ELF e_machine: EM_AARCH64
        done = _exec([qemu, "-L", QEMU_ROOT, str(exe), *argv])
        assert done.returncode == 0, done.stderr
        _agree(done.stdout, want, name)
        host = tmp_path / f"{name}.host"
        build(nx.load(src) if src.endswith(".nx") else _seed004(), "exe", str(host))
        assert done.stdout == _exec([str(host), *argv]).stdout, name


def _seed004() -> Any:
    from nexus.cli.files import load_graph

    return load_graph("example:seed004")


DRIVER = r"""
#include <stdio.h>
#include "fused.h"
int main(void) {
  double x[5] = {-2, -1, 0, 1, 2}, y[5] = {1, 1.5, 2, 2.5, 3}, out[5];
  int32_t status = fused(x, 5, y, 5, 1.5, out);
  if (status) { printf("%s\n", fused_error(status)); return 1; }
  for (int i = 0; i < 5; i++) printf("%.17g\n", out[i]);
  return 0;
}
"""


def test_a_shared_library_is_called_from_c_with_no_python(capsys: Any, tmp_path: Path) -> None:
    cc = require_program("cc", "gcc")
    x, y = np.array([-2.0, -1, 0, 1, 2]), np.array([1.0, 1.5, 2, 2.5, 3])
    g = nx.script(fused).graph_for(x, y, 1.5)
    src = tmp_path / "fused.nx"
    nx.save(g, src)
    lib = tmp_path / "libfused.so"
    code, out, err = _run(capsys, "compile", str(src), "--backend", "llvm", "--emit", "shared", "-o", str(lib))
    assert code == 0 and out == f"wrote {lib}\nwrote {tmp_path / 'libfused.h'}\n", err
    (tmp_path / "fused.h").write_text((tmp_path / "libfused.h").read_text())
    (tmp_path / "driver.c").write_text(DRIVER)
    built = _exec([cc, "-o", str(tmp_path / "driver"), str(tmp_path / "driver.c"), f"-L{tmp_path}", "-lfused"],
                  cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    done = subprocess.run([str(tmp_path / "driver")], capture_output=True, text=True, timeout=60,
                          env={**_bare_env(), "LD_LIBRARY_PATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    got = np.array([float(v) for v in done.stdout.split()])
    np.testing.assert_allclose(got, np.tanh(x * 1.5 + y) * 0.5 - x * y, rtol=1e-15)
    # an object file and its header, for a build of one's own
    obj = tmp_path / "fused.o"
    code, out, _ = _run(capsys, "compile", str(src), "--backend", "llvm", "--emit", "obj", "-o", str(obj))
    assert code == 0 and out == f"wrote {obj}\nwrote {tmp_path / 'fused.h'}\n"
    assert "int32_t fused(const double *x, int64_t x_d0, const double *y, int64_t y_d0, double a, double *result0);" \
        in (tmp_path / "fused.h").read_text()


def pick(x: Tensor["N"], i: int) -> float:  # noqa: F821, UP037
    return x[i] * 2.0


def grow(x: Tensor["N"]):  # noqa: F821, UP037, ANN201
    return x[x > 0.0]


def zeros(n: int):  # noqa: ANN201
    return np.zeros(n)


def test_failures_and_refusals_are_named(capsys: Any, tmp_path: Path) -> None:
    require_program("cc", "gcc")
    x = np.arange(4.0)
    g = nx.script(pick).graph_for(x, 1)
    exe = tmp_path / "pick"
    build(g, "exe", str(exe))
    ok = _exec([str(exe), "x=[0, 1, 2, 3]", "i=3"])
    assert ok.returncode == 0 and _results(ok.stdout) == [6.0]
    bad = _exec([str(exe), "x=[0, 1, 2, 3]", "i=9"])
    with pytest.raises(Exception) as info:  # the python backend's message is the oracle
        nx.compile(g, backend="python")(x, 9)
    where = str(info.value).split(": ")[0]  # the node and its source line, as the python backend names them
    expect = f"error: {where}: IndexError: index out of bounds for axis 0"
    assert bad.returncode == 1 and bad.stderr.startswith(expect), (bad.stderr, str(info.value))
    for argv, words in [(["x=[0, 1]"], "not given"), (["x=[[0, 1]]", "i=1"], "rank"),
                        (["x=[0, 1", "i=1"], "expected"), (["x=[0, 1]", "i=1.5"], "a float")]:
        done = _exec([str(exe), *argv])
        assert done.returncode == 2 and words in done.stderr, (argv, done.stderr)
    with pytest.raises(AotError, match="dim s[0-9]+, which no argument's dims give"):
        build(nx.script(zeros).graph_for(3), "obj", str(tmp_path / "zeros.o"))
    with pytest.raises(AotError, match="@grow natively .*no lowering rule for op BooleanMask"):
        build(nx.script(grow).graph_for(x), "obj", str(tmp_path / "grow.o"))
    code, _, err = _run(capsys, "compile", "example:seed004", "--backend", "llvm", "--emit", "exe")
    assert code == 1 and "-o" in err
    code, _, err = _run(capsys, "compile", "example:seed004", "--backend", "llvm", "--emit", "exe",
                        "-o", str(tmp_path / "e"), "--target", "nowhere-cpu")
    assert code == 1 and err.count("\n") == 1 and "no target for 'nowhere-cpu'" in err
    code, _, err = _run(capsys, "compile", "example:seed004", "--backend", "llvm", "--emit", "exe",
                        "-o", str(tmp_path / "e"), "--cc", "no-such-cc")
    assert code == 1 and "no C compiler 'no-such-cc'" in err


WEIGHTS = np.array([1.5, -2.0, 3.25])


def weighted(x: Tensor[3]):  # noqa: ANN201
    return x * WEIGHTS


@pytest.mark.parametrize("triple, order", [("x86_64-unknown-linux-gnu", "<"), ("aarch64-unknown-linux-gnu", "<"),
                                           ("s390x-unknown-linux-gnu", ">")])
def test_constant_arrays_are_written_in_the_targets_byte_order(triple: str, order: str) -> None:
    from nexus.backends.llvm.backend import llvm_ir

    g = nx.script(weighted).graph_for(np.zeros(3))
    text = llvm_ir(g, optimized=False, triple=triple)
    (literal,) = re.findall(r'\[24 x i8\] c"([^"]*)"', text)  # LLVM's string syntax: \XX or the character
    data = re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), literal).encode("latin-1")
    assert data == WEIGHTS.astype(np.dtype("f8").newbyteorder(order)).tobytes()


# An object that multiplies matrices calls Fortran's dgemm_ with 32-bit integers (the target's
# BLAS; in the process the JIT calls NumPy's or SciPy's instead).  The driver brings a plain
# column-major dgemm_ of its own, so the calling convention itself is what is checked.
MATMUL_DRIVER = r"""
#include <stdio.h>
#include "mm.h"
void dgemm_(const char *ta, const char *tb, const int32_t *m, const int32_t *n, const int32_t *k,
            const double *alpha, const double *a, const int32_t *lda, const double *b, const int32_t *ldb,
            const double *beta, double *c, const int32_t *ldc) {
  for (int j = 0; j < *n; j++)
    for (int i = 0; i < *m; i++) {
      double s = 0;
      for (int p = 0; p < *k; p++)
        s += (*ta == 'T' ? a[p + i * *lda] : a[i + p * *lda]) * (*tb == 'T' ? b[j + p * *ldb] : b[p + j * *ldb]);
      c[i + j * *ldc] = *alpha * s + (*beta == 0 ? 0 : *beta * c[i + j * *ldc]);
    }
}
int main(void) {
  double x[4 * 5], w[3 * 5], out[4 * 3];
  for (int i = 0; i < 20; i++) x[i] = i * 0.25 - 2;
  for (int i = 0; i < 15; i++) w[i] = (i % 4) - 1.5;
  int32_t status = mm(x, 4, 5, w, 3, 5, out);
  if (status) { printf("%s\n", mm_error(status)); return 1; }
  for (int i = 0; i < 12; i++) printf("%.17g\n", out[i]);
  return 0;
}
"""


def test_an_object_that_multiplies_calls_fortrans_dgemm_with_32_bit_integers(tmp_path: Path) -> None:
    cc = require_program("cc", "gcc")
    g = nx.parse("""
graph @mm {
^entry:
  %0 = Start : (f64[n, 5], f64[3, 5])
  %x = Proj %0 {num = 0} : f64[n, 5]
  %w = Proj %0 {num = 1} : f64[3, 5]
  %t = Transpose %w {perm = [1, 0]} : f64[5, 3]
  %y = MatMul %x, %t : f64[n, 3]
  %ret = Return %y : X
^exit(%ret):
  End : X
}""")
    paths = build(g, "obj", str(tmp_path / "mm.o"))
    header = Path(paths[1]).read_text()
    assert "Link with what provides: dgemm_." in header
    (tmp_path / "driver.c").write_text(MATMUL_DRIVER)
    built = _exec([cc, "-o", str(tmp_path / "driver"), str(tmp_path / "driver.c"), str(tmp_path / "mm.o"), "-lm"],
                  cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    done = _exec([str(tmp_path / "driver")])
    assert done.returncode == 0, done.stderr
    x = np.arange(20) * 0.25 - 2
    w = (np.arange(15) % 4) - 1.5
    np.testing.assert_allclose([float(v) for v in done.stdout.split()], (x.reshape(4, 5) @ w.reshape(3, 5).T).ravel(),
                               rtol=1e-15)


def test_cli_opt_level_reaches_llvm(capsys: Any, tmp_path: Path) -> None:
    """``-O`` picks LLVM's level for what ``nexus compile`` writes: -O0 leaves the emitted
    arithmetic that -O3 folds away, and an -O1 program still prints seed 004's answer."""
    texts = {}
    for level in ("0", "3"):
        code, out, err = _run(capsys, "compile", "example:seed004", "--backend", "llvm", "--emit", "llvm-ir",
                              "-O", level)
        assert code == 0, err
        texts[level] = out
    assert texts["0"].count(" = add ") > texts["3"].count(" = add ")
    require_program("cc", "gcc")
    exe = tmp_path / "seed004"
    code, _, err = _run(capsys, "compile", "example:seed004", "--backend", "llvm", "--emit", "exe",
                        "-O", "1", "-o", str(exe))
    assert code == 0, err
    code, ref, err = _run(capsys, "run", "example:seed004", "--input", "input=10")
    assert _exec([str(exe), "input=10"]).stdout == ref
    with pytest.raises(SystemExit):
        _run(capsys, "compile", "example:seed004", "--backend", "llvm", "-O", "5")
