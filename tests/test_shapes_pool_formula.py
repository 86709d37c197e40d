"""Symbolic conv / pool output sizes equal the concrete ones (which the NN tests check
against PyTorch) for every input size."""

from __future__ import annotations

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.ir.types import sym
from nexus.ops.nn import _out_dim

H = sym("H")


@settings(max_examples=200, deadline=None)
@given(k=st.integers(1, 5), s=st.integers(1, 4), pb=st.integers(0, 2), pe=st.integers(0, 2),
       dil=st.integers(1, 3), ceil=st.booleans())
def test_symbolic_out_dim_matches_concrete(k: int, s: int, pb: int, pe: int, dil: int, ceil: bool) -> None:
    if pb >= k or pe >= k:
        return  # pools need pads smaller than the kernel
    expr = _out_dim(H, k, s, pb, pe, dil, ceil)
    for h in range(dil * (k - 1) + 1, 20):  # sizes where at least one window fits
        assert int(sympy.sympify(expr).subs(H, h)) == _out_dim(h, k, s, pb, pe, dil, ceil), (h, expr)
