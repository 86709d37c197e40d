"""Special functions the kernels need, without a hard dependency on SciPy."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

try:  # SciPy's erf is vectorised; it is optional (not a dependency of nexus).
    from scipy.special import erf as _scipy_erf
except ImportError:  # pragma: no cover - depends on the environment
    _scipy_erf = None

_math_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: Any) -> Any:
    """The error function, elementwise, keeping the dtype of ``x``."""
    arr = np.asarray(x)
    if _scipy_erf is not None:
        out = np.asarray(_scipy_erf(arr.astype(np.float64) if arr.dtype == np.float16 else arr))
    else:
        out = np.asarray(_math_erf(arr.astype(np.float64)), dtype=np.float64)
    out = out.astype(arr.dtype, copy=False)
    return out[()] if out.ndim == 0 else out
