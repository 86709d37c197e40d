"""``torchrun --nproc-per-node N -m nexus.distributed.run model.nx -i x=x.npy ... -o out/``

Every rank loads the same saved graph (``nx.save``), places it for its machines (one per
rank, in ``--machines`` order or sorted by name; a graph without machines runs whole on
every rank), runs its part on the arguments and, with ``-o``, writes its results to
``out/rank<k>.safetensors`` (``result0``, ``result1``, ...).  Arguments are ``.npy``
files (read without pickle), given by name or in order.  A failure prints one line
naming the rank and exits with status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from nexus.io import load
from nexus.ir.graph import Graph
from nexus.ir.tensorio import save_file


def _arguments(g: Graph, specs: Sequence[str]) -> list[Any]:
    names = [a.name for a in g.args]
    values: dict[int, Any] = {}
    for k, spec in enumerate(specs):
        name, _, path = spec.rpartition("=")
        i = names.index(name) if name in names else k if not name else -1
        if i < 0:
            raise SystemExit(f"nexus.distributed.run: @{g.name} has no argument {name!r} "
                             f"(its arguments: {', '.join(str(n) for n in names)})")
        values[i] = np.load(path, allow_pickle=False)
    missing = [str(names[i]) for i in range(len(names)) if i not in values]
    if missing:
        raise SystemExit(f"nexus.distributed.run: no value for argument(s) {', '.join(missing)} "
                         "(give -i NAME=FILE.npy)")
    return [values[i] for i in range(len(names))]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nexus.distributed.run", description=__doc__.split("\n\n")[1])
    ap.add_argument("model", help="a graph saved with nx.save (.nx)")
    ap.add_argument("-i", "--input", action="append", default=[], metavar="NAME=FILE.npy")
    ap.add_argument("-o", "--out", help="folder for each rank's results")
    ap.add_argument("--machines", default="", help="machine names in rank order, comma-separated")
    ap.add_argument("--timeout", type=float, default=None, help="seconds any wait may take (default 30)")
    ap.add_argument("--backend", default="gloo", help="gloo (CPU) or nccl (CUDA)")
    args = ap.parse_args(argv)
    if "RANK" not in os.environ:
        print("nexus.distributed.run: start it with torchrun (RANK and WORLD_SIZE are not set)", file=sys.stderr)
        return 2
    from nexus.distributed import runtime
    from nexus.ops.comm import CommError

    g = load(args.model)
    values = _arguments(g, args.input)
    ctx = runtime.init(timeout=args.timeout, backend=args.backend)
    try:
        machines = tuple(m for m in args.machines.split(",") if m)
        res = runtime.run_graph(g, *values, machines=machines)
    except (CommError, RuntimeError) as e:
        print(f"nexus.distributed.run: rank {ctx.rank}: {e}", file=sys.stderr)
        os._exit(1)  # the process group cannot be left cleanly with a peer gone
    runtime.shutdown()
    results = list(res) if isinstance(res, tuple) else [res]
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        save_file({f"result{i}": np.asarray(r) for i, r in enumerate(results)},
                  os.path.join(args.out, f"rank{ctx.rank}.safetensors"))
    if ctx.rank == 0:
        for i, r in enumerate(results):
            print(f"result{i} = {np.array2string(np.asarray(r), precision=6, threshold=20)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
