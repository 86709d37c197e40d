"""W3: LICM on the RNN ``h = tanh(W x_t + U h)`` over ``t < T``.

Builds the RNN with the IR API (the cell written as a naive frontend emits it, with the
weight transposes and the bias sum inside the loop), optimises a copy with the default
pipeline, checks both agree with NumPy, and times both with the interpreter
(``nx.run``), runs interleaved.  Prints median, min and max per variant and the ratio of
medians (optimised / unoptimised; below 1 is faster).

    python bench/w3_licm.py [--steps T] [--input I] [--hidden H] [--repeat N] [--serial]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from nexus.passes import optimize  # noqa: E402
from nexus.passes.examples import rnn, rnn_inputs, rnn_reference  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--input", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--serial", action="store_true", help="run with parallel=False (no thread pool)")
    args = ap.parse_args(argv)

    base = rnn(args.steps, args.input, args.hidden)
    opt, _ = base.clone()
    stats: dict[str, dict[str, int]] = {}
    optimize(opt, verify_each=True, stats=stats)
    ins = rnn_inputs(args.steps, args.input, args.hidden)
    want = rnn_reference(*ins)
    for g in (base, opt):
        np.testing.assert_allclose(g(*ins), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(opt(*ins), base(*ins))

    parallel = False if args.serial else None
    times: dict[str, list[float]] = {"unoptimised": [], "optimised": []}
    for _ in range(args.repeat):
        for label, g in (("unoptimised", base), ("optimised", opt)):
            t0 = time.perf_counter()
            g(*ins, parallel=parallel)
            times[label].append(time.perf_counter() - t0)

    hoisted = stats.get("licm", {}).get("hoisted", 0)
    print(f"W3 RNN: T={args.steps}, I={args.input}, H={args.hidden}; LICM hoisted {hoisted} nodes; "
          f"{args.repeat} runs each, interleaved, {'serial' if args.serial else 'default scheduling'}")
    print(f"{'variant':<12} {'median ms':>10} {'min ms':>9} {'max ms':>9} {'us/step':>9}")
    for label, ts in times.items():
        med = statistics.median(ts)
        print(f"{label:<12} {med * 1e3:10.3f} {min(ts) * 1e3:9.3f} {max(ts) * 1e3:9.3f} "
              f"{med / args.steps * 1e6:9.2f}")
    ratio = statistics.median(times["optimised"]) / statistics.median(times["unoptimised"])
    print(f"ratio optimised/unoptimised (median): {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
