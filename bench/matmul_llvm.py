"""How the llvm backend should lower MatMul (issue 12): SciPy's BLAS ``gemm`` called from the
native code, or the i-k-j loop nest LLVM vectorises, against NumPy's ``@``, on square
f32/f64 matrices of 64 to 512, in the same run.

    OPENBLAS_NUM_THREADS=1 python -m bench.matmul_llvm [-r 7]

(one BLAS thread: on a shared, loaded machine a threaded BLAS measures its waiting).

Prints the median milliseconds per product and loops / BLAS; the result chose
``nexus.backends.llvm.matmul.STRATEGY = "auto"`` (BLAS for floats) and is recorded in
docs/llvm.md.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from bench.common import measure


def _exe(dtype: str, strategy: str):  # type: ignore[no-untyped-def]
    import nexus as nx
    from nexus.backends.llvm import matmul
    from nexus.ir.graph import Graph
    from nexus.ir.types import TensorType, sym

    g = Graph("mm", [TensorType(dtype, (sym("m"), sym("k"))), TensorType(dtype, (sym("k"), sym("n")))])
    y = g.add("MatMul", list(g.args), g.start_block)
    g.end_block.append_input(g.add("Return", [y], g.start_block))
    old, matmul.STRATEGY = matmul.STRATEGY, strategy
    try:
        return nx.compile(g, backend="llvm", fallback=False)
    finally:
        matmul.STRATEGY = old


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-r", "--repeats", type=int, default=7)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'dtype':5s} {'n':>4s} {'loops ms':>9s} {'blas ms':>9s} {'numpy ms':>9s} {'loops/blas':>10s}")
    for dtype in ("f32", "f64"):
        loops, blas = _exe(dtype, "loops"), _exe(dtype, "blas")
        for n in (64, 128, 256, 512):
            a = rng.normal(size=(n, n)).astype(dtype.replace("f", "float"))
            b = rng.normal(size=(n, n)).astype(a.dtype)
            np.testing.assert_allclose(loops(a, b), a @ b, rtol=1e-3, atol=1e-3)
            np.testing.assert_allclose(blas(a, b), a @ b, rtol=1e-3, atol=1e-3)
            t = measure({"loops": lambda: loops(a, b), "blas": lambda: blas(a, b), "numpy": lambda: a @ b},
                        args.repeats, number=max(1, 2_000_000 // n**3))
            med = {k: statistics.median(v) * 1e3 for k, v in t.items()}
            print(f"{dtype:5s} {n:4d} {med['loops']:9.3f} {med['blas']:9.3f} {med['numpy']:9.3f} "
                  f"{med['loops'] / med['blas']:10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
