"""``python -m bench.models``: real models on every Nexus backend beside torch eager and ONNX
Runtime, in one process, as ratios to ONNX Runtime.

Each model of :mod:`bench.model_zoo` is built with random weights, exported once with a
symbolic batch, imported through ``nx.from_torch`` and through ``nx.from_onnx`` (of
``torch.onnx.export``; for models with loops, which that exporter cannot write, of
``nx.to_onnx``), checked against torch eager at every batch size, and timed: torch eager,
ONNX Runtime on the same ONNX file, and each Nexus backend, one thread each (BLAS pinned,
ONNX Runtime's threads not spinning), interleaved rounds, each timed call right after an
untimed one of the same implementation (a serving loop's warm caches, not the previous
implementation's leftovers), median and spread.  The ratio is
the median over rounds of (this time / ONNX Runtime's time) in the same round: below 1 is
faster than ONNX Runtime.

Needs the ``models`` extra (``pip install -e ".[all,models]"``: torchvision, transformers,
matplotlib, pinned so that none pulls another torch); a model whose package is missing is
reported and skipped.  ``--write-readme`` puts the table into bench/README.md and draws the
chart bench/models.png.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import PIN_BLAS, fmt_time, machine, measure
from bench.model_zoo import MODELS, Model

README = Path(__file__).with_name("README.md")
CHART = Path(__file__).with_name("models.png")
BEGIN, END = "<!-- models:begin -->", "<!-- models:end -->"
DEFAULT_BACKENDS = ("python", "onnxruntime", "auto")
ALL_BACKENDS = ("python", "onnxruntime", "auto", "xla", "llvm")
RTOL = 1e-4


@dataclass
class Row:
    """One implementation of one model at one batch size."""

    model: str
    batch: int
    impl: str
    median: float
    low: float
    high: float
    ratio: float  # this time / ONNX Runtime's, median over paired rounds
    ok: bool
    err: float  # the largest difference from torch eager, relative to its largest magnitude
    note: str = ""


def step(model: str, what: str, fn: Callable[[], Any]) -> Any:
    """Run one long step of ``model`` and say how long it took."""
    print(f"  [{model}] {what} ...", end="", flush=True)
    t0 = time.perf_counter()
    try:
        out = fn()
    except Exception as e:
        print(f" failed after {time.perf_counter() - t0:.1f} s: {type(e).__name__}: {str(e)[:300]}", flush=True)
        raise
    print(f" {time.perf_counter() - t0:.1f} s", flush=True)
    return out


def _numpy(x: Any) -> list[np.ndarray]:
    items = x if isinstance(x, (tuple, list)) else (x,)
    return [np.asarray(i.detach().numpy() if hasattr(i, "detach") else i) for i in items]


def error(outs: Any, refs: list[np.ndarray]) -> float:
    """The largest difference of ``outs`` from ``refs``, relative to the largest magnitude
    of each reference (integers: 0 or infinity)."""
    got = [np.asarray(o) for o in (outs if isinstance(outs, tuple) else (outs,))]
    if len(got) != len(refs):
        return float("inf")
    worst = 0.0
    for o, r in zip(got, refs):
        if o.shape != r.shape:
            return float("inf")
        if r.dtype.kind in "iub":
            worst = max(worst, 0.0 if np.array_equal(o, r) else float("inf"))
        else:
            scale = max(float(np.abs(r).max(initial=0.0)), 1e-6)
            worst = max(worst, float(np.abs(o.astype(np.float64) - r).max(initial=0.0)) / scale)
    return worst


@dataclass
class Imported:
    """A model exported and imported both ways, with its ONNX Runtime peer."""

    module: Any
    from_torch: Any
    from_onnx: Any
    session: Any
    onnx_inputs: list[int]  # which of the model's inputs the ONNX file takes
    onnx_note: str


def _session(data: bytes) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def import_model(m: Model) -> Imported:
    """Build ``m``, export it with a symbolic batch and import it both ways."""
    import torch

    import nexus as nx

    module = step(m.name, "build", m.build)
    args = m.inputs(2)  # batch 2: torch.export specialises a dim it sees as 1
    batch = torch.export.Dim("batch", min=1, max=1024)
    dynamic = tuple(None if d is None else {d: batch} for d in m.batch_dims)
    g = step(m.name, "torch.export + nx.from_torch", lambda: nx.from_torch(module, args, dynamic_shapes=dynamic))
    names = [f"in{i}" for i in range(len(args))]
    note = ""

    def export() -> bytes:
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            axes = {n: {d: "batch"} for n, d in zip(names, m.batch_dims) if d is not None}
            torch.onnx.export(module, args, buf, dynamo=False, input_names=names, dynamic_axes=axes,
                              opset_version=18)
        return buf.getvalue()

    try:
        data = step(m.name, "torch.onnx.export", export)
    except Exception:  # noqa: BLE001  (a model with loops: torch's TorchScript exporter cannot write it)
        data = step(m.name, "nx.to_onnx (torch.onnx.export failed)", lambda: nx.to_onnx(g).SerializeToString())
        note, names = "ONNX from nx.to_onnx", [a.name for a in g.args]
    session = _session(data)
    taken = {i.name for i in session.get_inputs()}
    onnx_inputs = [k for k, n in enumerate(names) if n in taken]
    h = step(m.name, "nx.from_onnx", lambda: nx.from_onnx(data))
    return Imported(module, g, h, session, onnx_inputs, note)


def run_model(m: Model, batches: list[int], backends: list[str], repeats: int) -> list[Row]:
    import torch

    import nexus as nx

    imp = import_model(m)
    rows: list[Row] = []
    exes: dict[str, Any] = {}
    for b in backends:
        opts: dict[str, Any] = {"python": {"parallel": False}, "onnxruntime": {"threads": 1},
                                "auto": {"threads": 1, "parallel": False}}.get(b, {})
        exes[f"nexus-{b}"] = step(m.name, f"compile on {b}",
                                  lambda b=b, o=opts: nx.compile(imp.from_torch, backend=b, **o))
    exes["nexus-auto (from_onnx)"] = nx.compile(imp.from_onnx, backend="auto", threads=1, parallel=False)
    exes["nexus-python (from_onnx)"] = nx.compile(imp.from_onnx, backend="python", parallel=False)
    for batch in batches:
        args = m.inputs(batch)
        feeds = [a.numpy() for a in args]
        with torch.no_grad():
            refs = _numpy(imp.module(*args))
        onnx_feeds = [feeds[k] for k in imp.onnx_inputs]
        names = [i.name for i in imp.session.get_inputs()]
        impls: dict[str, Callable[[], Any]] = {}

        def eager(args: tuple[Any, ...] = args) -> Any:
            with torch.no_grad():
                return imp.module(*args)

        impls["torch eager"] = eager
        ort_feeds = dict(zip(names, onnx_feeds, strict=True))
        impls["onnxruntime"] = lambda f=ort_feeds: imp.session.run(None, f)
        errs: dict[str, float] = {"torch eager": 0.0, "onnxruntime": error(tuple(impls["onnxruntime"]()), refs)}
        for name, exe in exes.items():
            which = onnx_feeds if "from_onnx" in name else feeds
            try:
                out = step(m.name, f"first call, batch {batch}, {name}", lambda e=exe, w=which: e(*w))
            except Exception:  # noqa: BLE001  (reported as a failed row, the suite goes on)
                errs[name] = float("inf")
                continue
            errs[name] = error(out, refs)
            impls[name] = lambda e=exe, w=which: e(*w)
        times = measure(impls, repeats, prime=True)  # each timed call after one of its own
        base = times["onnxruntime"]
        for name in [*impls, *(n for n in errs if n not in impls)]:
            ts = times.get(name)
            if ts is None:
                rows.append(Row(m.name, batch, name, float("nan"), float("nan"), float("nan"), float("nan"),
                                False, errs[name], "failed"))
                continue
            ratio = statistics.median(t / o for t, o in zip(ts, base))
            ok = errs[name] <= RTOL
            rows.append(Row(m.name, batch, name, statistics.median(ts), min(ts), max(ts), ratio, ok, errs[name],
                            imp.onnx_note if name == "onnxruntime" else ""))
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| model | batch | implementation | median | min | max | / ONNX Runtime | error | check |",
             "|" + "---|" * 9]
    for r in rows:
        if r.note == "failed":
            lines.append(f"| {r.model} | {r.batch} | {r.impl} | - | - | - | - | - | **FAILED** |")
            continue
        note = f" ({r.note})" if r.note else ""
        check = "ok" if r.ok else "**MISMATCH**"
        lines.append(f"| {r.model} | {r.batch} | {r.impl}{note} | {fmt_time(r.median)} | {fmt_time(r.low)} | "
                     f"{fmt_time(r.high)} | {r.ratio:.2f} | {r.err:.1e} | {check} |")
    return "\n".join(lines)


def summary(rows: list[Row], batches: list[int]) -> str:
    """One line per model: each implementation's ratio to ONNX Runtime at each batch."""
    impls = list(dict.fromkeys(r.impl for r in rows if r.impl != "onnxruntime"))
    head = "| model | " + " | ".join(f"{i} (b{b})" for i in impls for b in batches) + " |"
    lines = [head, "|" + "---|" * (1 + len(impls) * len(batches))]
    for model in dict.fromkeys(r.model for r in rows):
        cells = []
        for i in impls:
            for b in batches:
                r = next((r for r in rows if r.model == model and r.impl == i and r.batch == b), None)
                cells.append("-" if r is None or r.note == "failed" else f"{r.ratio:.2f}" + ("" if r.ok else "!"))
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chart(rows: list[Row], batches: list[int], path: Path) -> None:
    """Time per model and implementation relative to ONNX Runtime (log scale), one panel per batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r.model for r in rows))
    impls = [i for i in dict.fromkeys(r.impl for r in rows) if i != "onnxruntime"]
    fig, axes = plt.subplots(len(batches), 1, figsize=(max(8, len(models) * 0.9), 3.6 * len(batches)), squeeze=False)
    width = 0.8 / max(1, len(impls))
    for ax, b in zip(axes[:, 0], batches):
        for k, impl in enumerate(impls):
            vals = []
            for model in models:
                r = next((r for r in rows if r.model == model and r.impl == impl and r.batch == b), None)
                vals.append(r.ratio if r is not None and r.note != "failed" else np.nan)
            ax.bar(np.arange(len(models)) + (k - (len(impls) - 1) / 2) * width, vals, width, label=impl)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylabel("time / ONNX Runtime")
        ax.set_title(f"batch {b} (below 1: faster than ONNX Runtime)")
        ax.set_xticks(np.arange(len(models)), models, rotation=30, ha="right")
    axes[0, 0].legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_readme(text: str) -> None:
    old = README.read_text()
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in old:
        new = old[:old.index(BEGIN)] + block + old[old.index(END) + len(END):]
    else:
        new = old.rstrip("\n") + "\n\n## The model suite (`python -m bench.models`)\n\n" + block + "\n"
    README.write_text(new)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(os.environ.get(k) != v for k, v in PIN_BLAS.items()):
        # BLAS reads its thread count when it loads: start again with it pinned.
        os.execve(sys.executable, [sys.executable, "-m", "bench.models", *argv], {**os.environ, **PIN_BLAS})
    ap = argparse.ArgumentParser(prog="python -m bench.models", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(MODELS), help="comma-separated models (default: all)")
    ap.add_argument("--batch", default="1,8", help="comma-separated batch sizes (default: 1,8)")
    ap.add_argument("--backends", default=",".join(DEFAULT_BACKENDS),
                    help=f"comma-separated Nexus backends, or 'all' ({','.join(ALL_BACKENDS)})")
    ap.add_argument("-r", "--repeats", type=int, default=5, help="interleaved rounds per implementation")
    ap.add_argument("--write-readme", action="store_true", help="write the table into bench/README.md and "
                                                                "draw bench/models.png")
    a = ap.parse_args(argv)
    unknown = [n for n in a.only.split(",") if n.strip() not in MODELS]
    if unknown:
        ap.error(f"unknown model {', '.join(unknown)}; the suite has {', '.join(MODELS)}")
    import torch

    torch.set_num_threads(1)
    batches = [int(b) for b in a.batch.split(",")]
    backends = list(ALL_BACKENDS) if a.backends == "all" else a.backends.split(",")
    before, t0 = machine(), time.perf_counter()
    rows: list[Row] = []
    skipped: list[str] = []
    for name in a.only.split(","):
        m = MODELS[name.strip()]
        why = m.available()
        if why:
            skipped.append(f"{m.name}: {why}")
            continue
        print(f"{m.name} ({m.family})", flush=True)
        try:
            rows += run_model(m, batches, backends, a.repeats)
        except Exception as e:  # noqa: BLE001  (one model's failure is a line of the report)
            skipped.append(f"{m.name}: {type(e).__name__}: {str(e)[:200]}")
    text = "\n".join([
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `python -m bench.models "
        f"{' '.join(argv)}` ({time.perf_counter() - t0:.0f} s), one thread each.",
        f"Machine at start: {before}.", f"Machine at end: {machine()}.", "",
        "Time relative to ONNX Runtime on the same model (median over paired rounds; below 1: faster; "
        "`!`: the result differs from torch eager by more than 1e-4 of its magnitude):", "",
        summary(rows, batches), "",
        *(["Not run: " + "; ".join(skipped), ""] if skipped else []),
        "<details><summary>every row: median, spread, error against torch eager</summary>", "",
        table(rows), "", "</details>",
    ])
    print(text)
    if a.write_readme:
        write_readme(text + "\n\n![time relative to ONNX Runtime](models.png)")
        chart(rows, batches, CHART)
        print(f"wrote {README} and {CHART}")
    return 0 if rows and all(r.ok for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
