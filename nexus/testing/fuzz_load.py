"""A fuzz target for what ``nx.load`` reads: the text parser (and the verifier behind it)
and the safetensors payload reader.

    python -m nexus.testing.fuzz_load --seconds 60          # coverage-guided with atheris
    python -m nexus.testing.fuzz_load --seconds 60 --random  # byte mutations, no atheris

Every input must either load or fail with one of the errors a user is meant to meet
(:data:`EXPECTED`: ParseError, LoadError, VerifyError...).  Anything else is a crash: the
input is written to ``--crashes`` (default ``fuzz-crashes/``) and reported, and the run
goes on, so one run counts every distinct crash (``--stop`` stops at the first).  A random
run ends with one line: executions, seconds, crashes; an atheris run with libFuzzer's
``Done N runs in S second(s)`` and its stats (libFuzzer ends the process itself, so
each crash's own line is the count there).  With atheris (``pip install
atheris``) libFuzzer drives the inputs from the coverage of the Nexus modules; without
it (or with ``--random``), seeded random mutations of valid files.  The test suite runs a
few seconds of the random mode (tests/test_fuzz_load.py).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from nexus.io import save
from nexus.ir.graph import Graph
from nexus.ir.opdef import OpTypeError
from nexus.ir.parser import ParseError, parse
from nexus.ir.printer import print_graph
from nexus.ir.tensorio import LoadError, load_bytes, save_bytes
from nexus.ir.types import DimSyntaxError
from nexus.ir.verify import VerifyError, verify

EXPECTED: tuple[type[BaseException], ...] = (ParseError, LoadError, VerifyError, OpTypeError, DimSyntaxError)
"""The errors a malformed file may raise (each a one-line message naming what is wrong)."""

_TEXT, _PAYLOAD, _BOTH = 0, 1, 2
_SEP = b"\n\x00payload\x00\n"


def one_input(data: bytes) -> None:
    """Load ``data`` as the fuzzers see it: its first byte picks the text parser, the
    payload reader or both (text, separator, payload).  Raises only :data:`EXPECTED`
    errors, or whatever bug the input found."""
    if not data:
        return
    mode, rest = data[0] % 3, data[1:]
    if mode == _PAYLOAD:
        load_bytes(rest, "<fuzz>")
        return
    payload: dict[str, np.ndarray] = {}
    text = rest
    if mode == _BOTH and _SEP in rest:
        text, blob = rest.split(_SEP, 1)
        payload = load_bytes(blob, "<fuzz>")
    g = parse(text.decode("utf-8", errors="replace"), payload)
    verify(g)
    print_graph(g)  # what `nexus show` does next


def seeds() -> list[bytes]:
    """Valid inputs of each mode: the seed graphs, a graph with a payload, payloads."""
    from nexus.seeds import ALL

    out = [bytes([_TEXT]) + print_graph(build()).encode() for build in ALL.values()]
    g = Graph("consts")
    w = g.add("Constant", [], g.start_block, {"value": np.arange(40, dtype=np.float32).reshape(8, 5)}, name="w")
    g.end_block.append_input(g.add("Return", [w], g.start_block))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.nx")
        save(g, path)
        with open(path, "rb") as f, open(path + ".safetensors", "rb") as p:
            text, blob = f.read(), p.read()
    out.append(bytes([_BOTH]) + text + _SEP + blob)
    out.append(bytes([_PAYLOAD]) + blob)
    out.append(bytes([_PAYLOAD]) + save_bytes({"a": np.ones((2, 3), np.int64), "b": np.array(True)},
                                              {"k": "v"}))
    return out


class Runner:
    """Calls :func:`one_input`, counting executions and recording unexpected errors."""

    def __init__(self, crashes: str | None, stop: bool):
        self.crashes, self.stop = crashes, stop
        self.runs = 0
        self.found: dict[str, str] = {}  # signature -> file

    def __call__(self, data: bytes) -> None:
        self.runs += 1
        try:
            one_input(data)
        except EXPECTED:
            return
        except Exception as e:  # noqa: BLE001  (anything else is what the fuzzer looks for)
            self._record(data, e)
            if self.stop:
                raise

    def _record(self, data: bytes, e: BaseException) -> None:
        frame = traceback.extract_tb(e.__traceback__)[-1]
        sig = f"{type(e).__name__} at {os.path.basename(frame.filename)}:{frame.lineno}"
        if sig in self.found:
            return
        name = "-"
        if self.crashes is not None:
            os.makedirs(self.crashes, exist_ok=True)
            name = os.path.join(self.crashes, "crash-" + hashlib.sha1(data).hexdigest())
            with open(name, "wb") as f:
                f.write(data)
        self.found[sig] = name
        print(f"fuzz_load: crash {sig}: {str(e)[:200]!r} (input in {name})", file=sys.stderr, flush=True)


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """A random mutation of ``data``: flipped bits, set bytes, cut, duplicated or spliced
    ranges (a few at once)."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not buf:
            buf.extend(rng.randbytes(4))
        op = rng.randrange(6)
        i = rng.randrange(len(buf))
        if op == 0:
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[i] = rng.choice(b"0123456789()[]{},:%@^-+*/<>=\"\\ \n\r\xff\x00")
        elif op == 2:
            del buf[i:i + rng.randint(1, 64)]
        elif op == 3:
            j = rng.randrange(len(buf))
            buf[j:j] = buf[i:i + rng.randint(1, 64)]
        elif op == 4:
            other = rng.choice(pool)
            k = rng.randrange(len(other)) if other else 0
            buf[i:i + rng.randint(0, 32)] = other[k:k + rng.randint(1, 64)]
        else:
            buf[i:i] = str(rng.choice([0, -1, 2**31, 2**63, 2**64, 10**700])).encode()
    return bytes(buf)


def run_random(target: Callable[[bytes], Any], seconds: float, seed: int = 0) -> None:
    """Random mutations of the seeds (and of inputs made from them) for ``seconds``."""
    rng = random.Random(seed)
    pool = seeds()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(50):
            data = mutate(rng, rng.choice(pool), pool)
            target(data)
            if len(pool) < 2000 and rng.random() < 0.01:
                pool.append(data)


def run_atheris(runner: Runner, seconds: float, corpus: str, extra: list[str]) -> None:
    import atheris  # type: ignore[import-not-found,import-untyped]

    os.makedirs(corpus, exist_ok=True)
    for i, s in enumerate(seeds()):
        with open(os.path.join(corpus, f"seed-{i}"), "wb") as f:
            f.write(s)
    _instrument(atheris)
    argv = [sys.argv[0], corpus, f"-max_total_time={int(seconds)}", "-timeout=30", "-rss_limit_mb=3072",
            "-print_final_stats=1", *extra]
    atheris.Setup(argv, runner)
    atheris.Fuzz()


def _instrument(atheris: Any) -> None:
    """Coverage of the code a load runs: the functions of ``nexus.ir`` and ``nexus.io``
    (instrumenting every loaded function, sympy and NumPy included, takes minutes)."""
    import inspect

    done: set[int] = set()
    for name, mod in list(sys.modules.items()):
        if not (name.startswith("nexus.ir") or name == "nexus.io") or mod is None:
            continue
        for obj in list(vars(mod).values()):
            funcs = [obj] if inspect.isfunction(obj) else (
                [f for f in vars(obj).values() if inspect.isfunction(f)] if inspect.isclass(obj) else [])
            for f in funcs:
                if f.__module__ == name and id(f.__code__) not in done:
                    done.add(id(f.__code__))
                    atheris.instrument_func(f)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nexus.testing.fuzz_load", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60, help="how long to run (default %(default)s)")
    p.add_argument("--random", action="store_true", help="random mutations even when atheris is installed")
    p.add_argument("--seed", type=int, default=0, help="seed of the random mutations")
    p.add_argument("--crashes", default="fuzz-crashes", help="where crashing inputs are written")
    p.add_argument("--corpus", default=None, help="atheris: the corpus directory (default: a temporary one)")
    p.add_argument("--stop", action="store_true", help="stop at the first crash")
    p.add_argument("--replay", nargs="*", default=None, metavar="FILE", help="run these inputs once each")
    args, extra = p.parse_known_args(argv)
    runner = Runner(args.crashes, args.stop)
    t0 = time.monotonic()
    if args.replay is not None:
        for name in args.replay:
            with open(name, "rb") as f:
                runner(f.read())
    elif args.random or not _has_atheris():
        run_random(runner, args.seconds, args.seed)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            run_atheris(runner, args.seconds, args.corpus or tmp, extra)
        return 0
    _report(runner, t0, "replay" if args.replay is not None else "random")
    return 1 if runner.found else 0


def _report(runner: Runner, t0: float, mode: str) -> None:
    print(f"fuzz_load ({mode}): {runner.runs} executions in {time.monotonic() - t0:.0f} s, "
          f"{len(runner.found)} crashes", file=sys.stderr, flush=True)


def _has_atheris() -> bool:
    try:
        import atheris  # type: ignore[import-not-found,import-untyped] # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
