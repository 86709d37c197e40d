"""Special functions the kernels need, without a hard dependency on SciPy."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

_math_erf = np.frompyfunc(math.erf, 1, 1)


@functools.cache
def _scipy_erf() -> Any:
    # SciPy's erf is vectorised but optional (not a dependency of nexus), and importing
    # it costs half a second: look for it on first use only.
    try:
        from scipy.special import erf as fn
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    return fn


def erf(x: Any) -> Any:
    """The error function, elementwise, keeping the dtype of ``x``."""
    arr = np.asarray(x)
    scipy_erf = _scipy_erf()
    if scipy_erf is not None:
        out = np.asarray(scipy_erf(arr.astype(np.float64) if arr.dtype == np.float16 else arr))
    else:
        out = np.asarray(_math_erf(arr.astype(np.float64)), dtype=np.float64)
    out = out.astype(arr.dtype, copy=False)
    return out[()] if out.ndim == 0 else out
