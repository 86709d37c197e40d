"""Convolution kernels of the python backend (issue 28): depthwise, grouped and dense Conv
layers of MobileNet / EfficientNet / ResNet(X) sizes, and a whole MobileNetV3-like
inverted-residual block, at batch 1 and 8, one thread each.

Every layer is one ONNX model built with ``onnx.helper`` (random weights): ONNX Runtime
runs it (``intra_op_num_threads = inter_op_num_threads = 1``, no spinning), Nexus imports
it with ``nx.from_onnx`` and runs it on the python backend (``parallel=False``, BLAS pinned
to one thread through the environment, which BLAS reads when it loads), and PyTorch eager
runs the same weights (``torch.set_num_threads(1)``).  Each answer is checked against
PyTorch's.  Timing is bench.common's: interleaved rounds, median with min and max, and the
paired ratio *nexus / peer* (the median over rounds of the two times in the same round;
below 1 Nexus is faster), the issue's target being at most 3 against ONNX Runtime.

    python -m bench.conv_kernels [-r 9] [--batch 1 8] [--only dw]
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # Only as a script: BLAS and OpenMP read these when they load, so before NumPy.
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                 "VECLIB_MAXIMUM_THREADS"):
        os.environ[_var] = "1"
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import argparse  # noqa: E402
import statistics  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from bench.common import Row, Skip, machine, measure, rows_from, table  # noqa: E402


@dataclass(frozen=True)
class Layer:
    """One Conv layer: ``cin`` -> ``cout`` channels, a k x k kernel, on an ``hw`` x ``hw`` input."""

    name: str
    cin: int
    cout: int
    k: int
    stride: int = 1
    group: int = 1
    hw: int = 56
    dilation: int = 1

    @property
    def kind(self) -> str:
        if self.group == 1:
            return "dense"
        return "depthwise" if self.group == self.cin else "grouped"


LAYERS = [
    # depthwise (group == C): MobileNetV3-small and EfficientNet-B0
    Layer("mnv3s dw3x3 s2 16@112", 16, 16, 3, 2, 16, 112),
    Layer("mnv3s dw5x5 96@14", 96, 96, 5, 1, 96, 14),
    Layer("effb0 dw3x3 96@112 s2", 96, 96, 3, 2, 96, 112),
    Layer("effb0 dw3x3 144@56", 144, 144, 3, 1, 144, 56),
    Layer("effb0 dw5x5 240@28", 240, 240, 5, 1, 240, 28),
    Layer("effb0 dw3x3 480@14", 480, 480, 3, 1, 480, 14),
    # grouped: ResNeXt-50 32x4d and a RegNet-like width
    Layer("resnext g32 3x3 128@56", 128, 128, 3, 1, 32, 56),
    Layer("resnext g32 3x3 512@14", 512, 512, 3, 1, 32, 14),
    Layer("regnet g8 3x3 64@28", 64, 64, 3, 1, 8, 28),
    # dense: ResNet-18 and pointwise (1x1) layers of the mobile nets
    Layer("resnet stem 7x7 s2 3->64@224", 3, 64, 7, 2, 1, 224),
    Layer("resnet 3x3 64@56", 64, 64, 3, 1, 1, 56),
    Layer("resnet 3x3 256@14", 256, 256, 3, 1, 1, 14),
    Layer("pointwise 1x1 24->96@56", 24, 96, 1, 1, 1, 56),
    Layer("pointwise 1x1 96->24@56", 96, 24, 1, 1, 1, 56),
    Layer("dilated 3x3 d2 64@28", 64, 64, 3, 1, 1, 28, 2),
]


# --- models --------------------------------------------------------------------------------
def _session(model: Any) -> Any:
    try:
        import onnx
        import onnxruntime as ort
    except ImportError as e:
        raise Skip(f"onnxruntime not installed: {e}") from None
    onnx.checker.check_model(model)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


class _Builder:
    """An ONNX graph under construction: nodes, initializers, fresh names."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def const(self, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self.fresh("w")
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs: Any) -> str:
        from onnx import helper

        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def model(self, x: str, y: str, shape: tuple[int, ...]) -> Any:
        from onnx import TensorProto, helper

        out = helper.make_tensor_value_info(y, TensorProto.FLOAT, ["n", "c", "h", "w"])
        graph = helper.make_graph(self.nodes, "bench", [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
                                  [out], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _conv_weights(rng: np.random.Generator, cin: int, cout: int, k: int, group: int) -> np.ndarray:
    fan_in = cin // group * k * k
    return (rng.standard_normal((cout, cin // group, k, k)) / np.sqrt(fan_in)).astype(np.float32)


def _layer_model(layer: Layer, batch: int, rng: np.random.Generator) -> tuple[Any, dict[str, Any]]:
    b = _Builder()
    w = _conv_weights(rng, layer.cin, layer.cout, layer.k, layer.group)
    bias = rng.standard_normal(layer.cout).astype(np.float32)
    p = layer.dilation * (layer.k - 1) // 2
    y = b.node("Conv", ["x", b.const(w), b.const(bias)], strides=[layer.stride] * 2, pads=[p] * 4,
               dilations=[layer.dilation] * 2, group=layer.group)
    spec = {"w": w, "b": bias, "stride": layer.stride, "pad": p, "dilation": layer.dilation, "group": layer.group}
    return b.model("x", y, (batch, layer.cin, layer.hw, layer.hw)), spec


def _block_model(batch: int, rng: np.random.Generator, c: int = 24, e: int = 96, hw: int = 56,
                 k: int = 3) -> tuple[Any, list[tuple[str, Any]]]:
    """MobileNetV3's inverted residual: 1x1 expand, BN, HardSwish, depthwise k x k, BN,
    HardSwish, 1x1 project, BN, plus the input.  Returns the model and the torch recipe."""
    b = _Builder()
    steps: list[tuple[str, Any]] = []

    def conv_bn(h: str, cin: int, cout: int, kk: int, group: int, act: bool) -> str:
        w = _conv_weights(rng, cin, cout, kk, group)
        stats = [rng.uniform(0.5, 1.5, cout), rng.uniform(-0.2, 0.2, cout), rng.uniform(-0.2, 0.2, cout),
                 rng.uniform(0.5, 2.0, cout)]
        scale, shift, mean, var = (s.astype(np.float32) for s in stats)
        h = b.node("Conv", [h, b.const(w)], pads=[kk // 2] * 4, group=group)
        h = b.node("BatchNormalization", [h, b.const(scale), b.const(shift), b.const(mean), b.const(var)],
                   epsilon=1e-5)
        steps.append(("conv_bn", (w, kk // 2, group, scale, shift, mean, var)))
        if act:
            h = b.node("HardSwish", [h])
            steps.append(("hardswish", None))
        return h

    h = conv_bn("x", c, e, 1, 1, True)
    h = conv_bn(h, e, e, k, e, True)
    h = conv_bn(h, e, c, 1, 1, False)
    y = b.node("Add", ["x", h])
    return b.model("x", y, (batch, c, hw, hw)), steps


# --- peers ---------------------------------------------------------------------------------
def _nexus(model: Any) -> Callable[[np.ndarray], Any]:
    import nexus as nx

    return nx.compile(nx.from_onnx(model), backend="python", parallel=False)  # type: ignore[no-any-return]


def _torch_layer(spec: dict[str, Any]) -> Callable[[Any], Any]:
    import torch
    import torch.nn.functional as F

    w, b = torch.from_numpy(spec["w"]), torch.from_numpy(spec["b"])
    return lambda x: F.conv2d(x, w, b, spec["stride"], spec["pad"], spec["dilation"], spec["group"])


def _torch_block(steps: list[tuple[str, Any]]) -> Callable[[Any], Any]:
    import torch
    import torch.nn.functional as F

    def run(x: Any) -> Any:
        h = x
        for kind, args in steps:
            if kind == "hardswish":
                h = F.hardswish(h)
                continue
            w, pad, group, scale, shift, mean, var = (torch.from_numpy(a) if isinstance(a, np.ndarray) else a
                                                      for a in args)
            h = F.batch_norm(F.conv2d(h, w, None, 1, pad, 1, group), mean, var, scale, shift, False, 0.0, 1e-5)
        return x + h

    return run


def _compare(workload: str, model: Any, torch_fn: Callable[[Any], Any], x: np.ndarray, repeats: int) -> list[Row]:
    import torch

    torch.set_num_threads(1)
    xt = torch.from_numpy(x)
    nexus = _nexus(model)
    impls: dict[str, Callable[[], Any]] = {"nexus python": lambda: nexus(x)}
    try:
        sess = _session(model)
        impls["onnxruntime"] = lambda: sess.run(None, {"x": x})[0]
    except Skip:
        pass

    def eager() -> Any:
        with torch.no_grad():
            return torch_fn(xt)

    impls["torch eager"] = eager
    want = eager().numpy()
    ok = {k: bool(np.allclose(np.asarray(f()), want, rtol=1e-3, atol=1e-3)) for k, f in impls.items()}
    number = max(1, int(0.02 / max(_once(impls["nexus python"]), 1e-6)))
    times = measure(impls, repeats, number=number)
    return rows_from(workload, times, "call", ok=ok)


def _once(fn: Callable[[], Any]) -> float:
    import time

    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(repeats: int, batches: tuple[int, ...] = (1, 8), only: str = "") -> list[Row]:
    rows: list[Row] = []
    for batch in batches:
        for layer in LAYERS:
            if only and only not in layer.name and only != layer.kind:
                continue
            rng = np.random.default_rng(0)
            model, spec = _layer_model(layer, batch, rng)
            x = rng.standard_normal((batch, layer.cin, layer.hw, layer.hw)).astype(np.float32)
            rows += _compare(f"{layer.kind}: {layer.name}, batch {batch}", model, _torch_layer(spec), x, repeats)
        if not only or only == "block":
            rng = np.random.default_rng(0)
            model, steps = _block_model(batch, rng)
            x = rng.standard_normal((batch, 24, 56, 56)).astype(np.float32)
            rows += _compare(f"block: MobileNetV3 inverted residual 24-96-24@56, batch {batch}", model,
                             _torch_block(steps), x, repeats)
    return rows


def summary(rows: list[Row]) -> str:
    """One line per workload: nexus / onnxruntime and nexus / torch eager (paired medians)."""
    lines = ["| workload | nexus median | nexus / onnxruntime | nexus / torch eager |", "|---|---|---|---|"]
    by: dict[str, dict[str, Row]] = {}
    for r in rows:
        by.setdefault(r.workload, {})[r.impl] = r
    for workload, impls in by.items():
        nexus = impls["nexus python"]
        cells = []
        for peer in ("onnxruntime", "torch eager"):
            r = impls.get(peer)
            cells.append(f"{r.ratio:.2f}" if r is not None and r.ratio else "-")
        lines.append(f"| {workload} | {nexus.median * 1e3:.3f} ms | {cells[0]} | {cells[1]} |")
    worst = [i["onnxruntime"].ratio for i in by.values() if "onnxruntime" in i and i["onnxruntime"].ratio]
    if worst:
        lines.append(f"\nnexus / onnxruntime: median {statistics.median(worst):.2f}, worst {max(worst):.2f} "
                     f"over {len(worst)} workloads (issue 28's target: at most 3)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-r", "--repeats", type=int, default=9)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--only", default="", help="a layer name's part, a kind (depthwise, grouped, dense) or block")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"Machine: {machine()}")
    rows = run(args.repeats, tuple(args.batch), args.only)
    print(table(rows))
    print()
    print(summary(rows))
    bad = [r for r in rows if not r.ok]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
