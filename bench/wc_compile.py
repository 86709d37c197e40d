"""WC: compile time to a first result (issue 34).  torchvision's ResNet-18 (random weights,
batch 3, 224x224; where torchvision is missing, a CNN of the same layout defined here)
imported with ``nx.from_torch``, then compiled and called once, each in a fresh process
with BLAS and torch on one thread, so that nothing is warm:

- ``nexus llvm``: ``nx.compile(g, backend="llvm")`` (no cache);
- ``nexus llvm, warm cache``: the same with ``NEXUS_CACHE_DIR`` filled by an earlier process;
- ``nexus python``: the python backend;
- ``xla``: ``backend="xla"`` (JAX/XLA compiles the whole graph).

The import (torch.export) is not counted; the child also reports the compile alone and a
second call, still cold (``python -m bench.wc_compile`` prints them; the steady state
is ``python -m bench.models --only resnet18 --backends python,llvm``).  Issue 34's targets: llvm at most
5 s, and with a warm cache at most 0.5 s, to a first result.

The children inherit the environment: with ``PYTHONDONTWRITEBYTECODE=1`` (or a read-only
checkout) each one compiles Nexus's own Python sources again, ~0.2 s of every row here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from bench.common import PIN_BLAS, Row, Skip, rows_from

CHILD = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np, torch, torch.nn as nn
import nexus as nx
from bench.wc_compile import resnet18
torch.set_num_threads(1)
torch.manual_seed(0)
m = resnet18()
x = torch.randn(3, 3, 224, 224)
g = nx.from_torch(m, (x,))
t0 = time.perf_counter()
exe = nx.compile(g, backend=sys.argv[1])
t1 = time.perf_counter()
out = exe(x.numpy())
dt = time.perf_counter() - t0
t2 = time.perf_counter()
exe(x.numpy())
again = time.perf_counter() - t2
with torch.no_grad():
    ok = bool(np.allclose(np.asarray(out), m(x).numpy(), rtol=1e-3, atol=1e-4))
print(json.dumps({"seconds": dt, "compile": t1 - t0, "again": again, "ok": ok, "kind": type(exe).__name__}))
"""


def resnet18() -> Any:
    """torchvision's ResNet-18 with random weights, or :func:`resnet18_like` without torchvision."""
    import importlib.util

    if importlib.util.find_spec("torchvision") is None:
        return resnet18_like().eval()
    from bench.model_zoo import torchvision

    return torchvision().models.resnet18(weights=None).eval()


def resnet18_like() -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: Any) -> Any:
            y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            blocks, c = [], 64
            for cout, stride in [(64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1)]:
                blocks.append(Block(c, cout, stride))
                c = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x: Any) -> Any:
            h = nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1)
            return self.fc(torch.flatten(h, 1))

    return Net()


def _child(backend: str, env: dict[str, str]) -> dict[str, Any]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", CHILD, backend], capture_output=True, text=True, cwd=root,
                          env={**{k: v for k, v in os.environ.items() if k != "NEXUS_CACHE_DIR"}, **PIN_BLAS, **env},
                          timeout=1800)
    if done.returncode != 0:
        raise Skip(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run(repeats: int) -> list[Row]:
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise Skip(f"torch is not installed ({e})") from None
    times: dict[str, list[float]] = {k: [] for k in ("nexus llvm", "nexus llvm, warm cache", "nexus python", "xla")}
    ok: dict[str, bool] = dict.fromkeys(times, True)
    with tempfile.TemporaryDirectory(prefix="nexus-wc-") as cache:
        _child("llvm", {"NEXUS_CACHE_DIR": cache})  # fills the cache
        for _ in range(max(1, repeats)):
            for name, backend, env in (("nexus llvm", "llvm", {}), ("nexus llvm, warm cache", "llvm",
                                                                    {"NEXUS_CACHE_DIR": cache}),
                                       ("nexus python", "python", {}), ("xla", "xla", {})):
                try:
                    r = _child(backend, env)
                except Skip:
                    times.pop(name, None)
                    continue
                if name in times:
                    times[name].append(r["seconds"])
                    ok[name] = ok[name] and r["ok"]
    return rows_from("WC resnet18 b3 compile + first call", times, "call", ok=ok)


def main() -> None:
    """Each child's compile, compile + first call and second call: median (min..max)."""
    import argparse
    import statistics

    p = argparse.ArgumentParser(description="WC: compile time of ResNet-18, fresh processes")
    p.add_argument("-r", "--repeats", type=int, default=3)
    p.add_argument("--backends", default="llvm,python,xla")
    a = p.parse_args()
    names = a.backends.split(",")
    got: dict[str, list[dict[str, Any]]] = {b: [] for b in names}
    with tempfile.TemporaryDirectory(prefix="nexus-wc-") as cache:
        if "llvm" in names:
            _child("llvm", {"NEXUS_CACHE_DIR": cache})
            got["llvm, warm cache"] = []
        for _ in range(a.repeats):
            for name in got:
                got[name].append(_child(name.split(",")[0], {"NEXUS_CACHE_DIR": cache} if "cache" in name else {}))
    print(f"{'backend':18} {'compile s':>22} {'to first result s':>22} {'second call s':>22}  ok  executable")
    for name, rs in got.items():
        cells = []
        for key in ("compile", "seconds", "again"):
            v = [r[key] for r in rs]
            cells.append(f"{statistics.median(v):.3g} ({min(v):.3g}..{max(v):.3g})")
        print(f"{name:18} {cells[0]:>22} {cells[1]:>22} {cells[2]:>22}  {all(r['ok'] for r in rs)!s:5} "
              f"{rs[0]['kind']}")


if __name__ == "__main__":
    main()
