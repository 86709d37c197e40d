"""Start N ranks on this machine without torchrun (tests, benchmarks, notebooks).

:func:`spawn` hosts the rendezvous store itself on a free port (port 0: the system picks
one, so parallel runs never clash), starts ``nprocs`` fresh processes (from a fork server
that has imported torch and nexus once; nothing is forked from the caller), runs ``fn(rank, *args)`` in each after
:func:`nexus.distributed.init`, and returns what each returned or raised.  A run that
outlives ``timeout`` seconds is killed, every process of it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist


@dataclass
class RankResult:
    """How one rank ended: ``value`` (what fn returned) or ``error`` (the message it
    raised), and its exit code (None: killed at the deadline, negative: by a signal)."""

    rank: int
    value: Any = None
    error: str | None = None
    exitcode: int | None = None
    seconds: float = 0.0


def _child(fn: Callable[..., Any], rank: int, world: int, port: int, args: tuple[Any, ...], timeout: float,
           check: bool, out: Any) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NEXUS_STORE_HOSTED": "1"})
    from nexus.distributed import runtime

    t0 = time.perf_counter()
    try:
        runtime.init(timeout=timeout, check=check)
        value = fn(rank, *args)
        runtime.shutdown()
        out.put((rank, value, None, time.perf_counter() - t0))
    except BaseException as e:  # noqa: BLE001  (reported to the parent, which decides)
        msg = f"{type(e).__name__}: {e}"
        if not str(e):
            msg += "\n" + traceback.format_exc()
        out.put((rank, None, msg, time.perf_counter() - t0))


# Imported once by the fork server, so each rank starts in milliseconds instead of
# importing torch and nexus again (seconds on a busy machine).
PRELOAD = ["torch", "nexus", "nexus.distributed.runtime", "nexus.distributed.examples"]


def _context() -> Any:
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return mp.get_context("spawn")


def spawn(fn: Callable[..., Any], nprocs: int, args: tuple[Any, ...] = (), *, timeout: float = 60.0,
          comm_timeout: float = 10.0, check: bool = True) -> list[RankResult]:
    """Run ``fn(rank, *args)`` on ``nprocs`` ranks (``fn`` must be importable: a module-level
    function).  ``comm_timeout`` bounds every wait inside the run; ``timeout`` the run."""
    store = dist.TCPStore("127.0.0.1", 0, nprocs, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=timeout))
    ctx = _context()
    out = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(fn, r, nprocs, store.port, args, comm_timeout, check, out),
                         daemon=True) for r in range(nprocs)]
    for p in procs:
        p.start()
    results = {r: RankResult(r) for r in range(nprocs)}
    got: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(got) < nprocs and time.monotonic() < deadline:
        try:
            r, value, error, secs = out.get(timeout=0.1)
        except queue.Empty:
            if all(not p.is_alive() for p in procs):
                # drain what the last ones put before exiting
                try:
                    while True:
                        r, value, error, secs = out.get(timeout=0.5)
                        results[r].value, results[r].error, results[r].seconds = value, error, secs
                        got.add(r)
                except queue.Empty:
                    break
            continue
        results[r].value, results[r].error, results[r].seconds = value, error, secs
        got.add(r)
    for p in procs:
        p.join(timeout=max(0.0, min(5.0, deadline - time.monotonic())))
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()
            p.join()
            results[r].exitcode = None
            if r not in got:
                results[r].error = f"killed after the run's timeout of {timeout:g} s"
        else:
            results[r].exitcode = p.exitcode
            if r not in got and results[r].error is None:
                results[r].error = f"exited with code {p.exitcode} without a result"
    del store
    return [results[r] for r in range(nprocs)]
