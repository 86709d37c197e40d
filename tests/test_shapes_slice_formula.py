"""The symbolic slice length agrees with Python's slicing for every concrete size."""

from __future__ import annotations

import numpy as np
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.ir.types import sym
from nexus.ops.check import apply_op
from nexus.ops.index import slice_len

N = sym("N")
BIG = 2**63 - 1
index = st.one_of(st.integers(-12, 12), st.sampled_from([BIG, -BIG]))


@settings(max_examples=150, deadline=None)
@given(start=index, end=index, step=st.integers(-4, 4).filter(lambda s: s != 0))
def test_symbolic_slice_len_matches_python(start: int, end: int, step: int) -> None:
    expr = slice_len(N, start, end, step)
    for n in range(0, 9):
        want = len(range(*slice(start, end, step).indices(n)))
        assert int(sympy.sympify(expr).subs(N, n)) == want, (start, end, step, n, expr)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 7), start=index, end=index, step=st.integers(-3, 3).filter(lambda s: s != 0))
def test_slice_kernel_and_rule_match_numpy(n: int, start: int, end: int, step: int) -> None:
    x = np.arange(n * 2, dtype=np.int32).reshape(n, 2)
    got = apply_op("Slice", x, np.array([start]), np.array([end]), np.array([0]), np.array([step]),
                   const=(1, 2, 3, 4))
    np.testing.assert_array_equal(got, x[start:end:step])
