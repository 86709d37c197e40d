"""The thread pool that runs independent heavy nodes of one Kahn group at the same time.

NumPy and BLAS release the GIL inside their kernels, so threads give real parallelism
for large tensors.  One process-wide pool, created on first use, with one worker per
core.
"""

from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


@functools.cache
def cores() -> int:
    """Cores this process may run on (asked once: run() consults it on every call)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            # The calling thread runs nodes of the group too: one worker fewer than cores
            # keeps every core busy without time-slicing three threads on two cores.
            _pool = ThreadPoolExecutor(max_workers=max(1, cores() - 1), thread_name_prefix="nexus")
        return _pool


@functools.cache
def _threadpool_info() -> Any:
    # A failed import costs a search of sys.path (0.2 ms): ask once per process.
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    return threadpool_info


def blas_threads() -> int:
    """Threads the BLAS behind NumPy uses: from threadpoolctl when installed, else from
    the usual environment variables, else (BLAS libraries default to it) every core."""
    info = _threadpool_info()
    if info is not None:
        blas = [i["num_threads"] for i in info() if i.get("user_api") == "blas"]
        if blas:
            return int(max(blas))
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return cores()
