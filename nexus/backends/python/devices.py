"""Devices of the python backend: where a placed node's kernel runs and what arrays it takes.

* ``/CPU:k``: NumPy arrays and the ops' reference kernels (every unplaced node, unchanged);
* ``/TORCH:k``: PyTorch tensors on the CPU, so that copies between two array libraries
  are exercised on machines without a GPU;
* ``/GPU:k``: PyTorch tensors on CUDA device k.

A node placed on a torch device runs a kernel of :data:`TORCH_KERNELS`: the elementwise
ops through the array API (``array_api_compat``'s namespace for torch, the same function
names NumPy's namespace has), the rest specialised (convolution, pooling, matrix
products, reductions).  An op without one runs its NumPy reference kernel on copies of
its inputs (counted in :data:`FALLBACKS`, so a test can ask that a model ran natively).
``Memcpy`` converts between the libraries (:func:`to_device`).  torch is imported only
when a graph places a node on a torch device.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from nexus.ir.kernels import kernel_attrs
from nexus.ir.node import Node
from nexus.ir.types import numpy_dtype
from nexus.passes.placement import DEVICE_KINDS, parse_device

FALLBACKS: Counter[str] = Counter()  # op name -> runs through NumPy on a torch device


def kind_of(device: str | None) -> str:
    """``"numpy"``, ``"torch"`` or ``"cuda"`` for a device name (None: numpy)."""
    return DEVICE_KINDS[parse_device(device)[0]] if device else "numpy"


@functools.cache
def torch_device(device: str) -> Any:
    """The ``torch.device`` of a torch or GPU device name."""
    import torch

    kind, index = parse_device(device)
    if kind == "GPU":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {device}: torch.cuda is not available on this machine")
        return torch.device("cuda", index)
    return torch.device("cpu")


def to_device(x: Any, device: str) -> Any:
    """A copy of ``x`` (NumPy array, NumPy scalar or torch tensor) on ``device``."""
    if kind_of(device) == "numpy":
        if isinstance(x, (np.ndarray, np.generic)):
            return np.array(x, copy=True)
        out = x.detach().cpu().numpy()
        return out if out.ndim else out[()]  # 0-d: a NumPy scalar, as the kernels give
    import torch

    if isinstance(x, torch.Tensor):
        return x.to(torch_device(device), copy=True)
    return torch.tensor(np.asarray(x), device=torch_device(device))


def to_numpy(x: Any) -> Any:
    """``x`` as NumPy (tuples element by element), without a copy when it is NumPy."""
    if isinstance(x, (np.ndarray, np.generic)):
        return x
    if isinstance(x, tuple):
        return tuple(to_numpy(v) for v in x)
    if hasattr(x, "detach"):
        out = x.detach().cpu().numpy()
        return out if out.ndim else out[()]
    return x


def constant_on(value: Any, device: str | None) -> Any:
    """A Constant's value as bound for a node on ``device``."""
    return value if kind_of(device) == "numpy" else to_device(value, device)  # type: ignore[arg-type]


def kernel_for(node: Node) -> Callable[..., Any] | None:
    """The callable running ``node`` on its device, or None for a NumPy device (the
    backend's ordinary path)."""
    device = node.attrs.get("device") if node.attrs else None
    name = node.op.name
    if name == "Memcpy":
        target = str(device or "/CPU:0")
        return functools.partial(to_device, device=target)
    kind = kind_of(device)
    if kind == "numpy":
        return None
    attrs = kernel_attrs(node)
    dev = torch_device(str(device))
    make = TORCH_KERNELS.get(name)
    if make is not None:
        return make(attrs)
    kernel = node.op.kernel
    if kernel is None:
        return None
    bound = functools.partial(kernel, **attrs) if attrs else kernel

    def fallback(*args: Any) -> Any:
        FALLBACKS[name] += 1
        out = bound(*(to_numpy(a) for a in args))
        return _back(out, dev)

    return fallback


def _back(out: Any, dev: Any) -> Any:
    import torch

    if isinstance(out, tuple):
        return tuple(_back(o, dev) for o in out)
    if isinstance(out, (np.ndarray, np.generic)):
        return torch.as_tensor(np.asarray(out), device=dev)
    return out


# --- torch kernels ---------------------------------------------------------------------------
Maker = Callable[[dict[str, Any]], Callable[..., Any]]
TORCH_KERNELS: dict[str, Maker] = {}

# Elementwise ops with the same name in every array-API namespace (NumPy's and torch's).
ARRAY_API = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "Neg": "negative", "Abs": "abs", "Exp": "exp",
    "Log": "log", "Sqrt": "sqrt", "Sin": "sin", "Cos": "cos", "Tanh": "tanh", "Maximum": "maximum",
    "Minimum": "minimum", "Equal": "equal", "NotEqual": "not_equal", "Less": "less", "Greater": "greater",
    "LessEqual": "less_equal", "GreaterEqual": "greater_equal", "And": "logical_and", "Or": "logical_or",
    "Not": "logical_not", "Xor": "logical_xor", "Floor": "floor", "Ceil": "ceil", "Sign": "sign",
    "Where": "where",
}


@functools.cache
def _xp() -> Any:
    """The array-API namespace for torch (array_api_compat when installed, else torch,
    whose names match for the ops of :data:`ARRAY_API`)."""
    import importlib

    try:
        return importlib.import_module("array_api_compat.torch")
    except ImportError:  # the names used here exist on torch itself
        return importlib.import_module("torch")


def _array_api(fname: str) -> Maker:
    def make(attrs: dict[str, Any]) -> Callable[..., Any]:
        return getattr(_xp(), fname)  # type: ignore[no-any-return]

    return make


for _op, _fname in ARRAY_API.items():
    TORCH_KERNELS[_op] = _array_api(_fname)


def torch_kernel(*ops: str) -> Callable[[Maker], Maker]:
    def register(make: Maker) -> Maker:
        for op in ops:
            TORCH_KERNELS[op] = make
        return make

    return register


def _tdtype(dtype: str) -> Any:
    import torch

    return getattr(torch, {"bool": "bool", "u8": "uint8"}.get(dtype, str(numpy_dtype(dtype))))


@torch_kernel("Identity")
def _identity(attrs: dict[str, Any]) -> Callable[..., Any]:
    return lambda x: x


@torch_kernel("Div")
def _div(attrs: dict[str, Any]) -> Callable[..., Any]:
    import torch

    def div(a: Any, b: Any) -> Any:
        if a.dtype.is_floating_point:
            return a / b
        return torch.div(a, b, rounding_mode="trunc")  # the reference kernel's C division

    return div


def _named(fname: str) -> Maker:
    def make(attrs: dict[str, Any]) -> Callable[..., Any]:
        import torch

        return getattr(torch, fname)  # type: ignore[no-any-return]

    return make


for _op, _fname in {"Relu": "relu", "Sigmoid": "sigmoid", "Erf": "erf", "Reciprocal": "reciprocal",
                    "Rsqrt": "rsqrt", "Pow": "pow", "MatMul": "matmul"}.items():
    TORCH_KERNELS[_op] = _named(_fname)


@torch_kernel("Cast")
def _cast(attrs: dict[str, Any]) -> Callable[..., Any]:
    dtype = _tdtype(attrs["to"])
    return lambda x: x.to(dtype)


@torch_kernel("Gemm")
def _gemm(attrs: dict[str, Any]) -> Callable[..., Any]:
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    ta, tb = attrs.get("transA", False), attrs.get("transB", False)

    def gemm(a: Any, b: Any, c: Any = None) -> Any:
        out = (a.T if ta else a) @ (b.T if tb else b)
        out = out * alpha if alpha != 1.0 else out
        return out if c is None else out + (c * beta if beta != 1.0 else c)

    return gemm


def _axes(axes: Any, ndim: int) -> tuple[int, ...]:
    return tuple(range(ndim)) if axes is None else tuple(int(a) % max(ndim, 1) for a in axes)


def _reducer(fname: str) -> Maker:
    def make(attrs: dict[str, Any]) -> Callable[..., Any]:
        import torch

        keep = bool(attrs.get("keepdims", False))

        def reduce(x: Any) -> Any:
            axes = _axes(attrs.get("axes"), x.ndim)
            if not axes:
                return x
            return getattr(torch, fname)(x, dim=axes, keepdim=keep)

        return reduce

    return make


for _op, _fname in {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "amax", "ReduceMin": "amin"}.items():
    TORCH_KERNELS[_op] = _reducer(_fname)


def _arg_maker(fname: str) -> Maker:
    def make(attrs: dict[str, Any]) -> Callable[..., Any]:
        import torch

        axis, keep = int(attrs.get("axis", 0)), bool(attrs.get("keepdims", False))
        if attrs.get("select_last_index"):  # the first index of the reversed axis, mirrored
            return lambda x: x.shape[axis] - 1 - getattr(torch, fname)(x.flip(axis), dim=axis, keepdim=keep)
        return lambda x: getattr(torch, fname)(x, dim=axis, keepdim=keep)

    return make


TORCH_KERNELS["ArgMax"], TORCH_KERNELS["ArgMin"] = _arg_maker("argmax"), _arg_maker("argmin")


@torch_kernel("Reshape")
def _reshape(attrs: dict[str, Any]) -> Callable[..., Any]:
    def reshape(x: Any, shape: Any) -> Any:
        return x.reshape([int(d) for d in shape])

    return reshape


@torch_kernel("Flatten")
def _flatten(attrs: dict[str, Any]) -> Callable[..., Any]:
    axis = int(attrs.get("axis", 1))

    def flatten(x: Any) -> Any:
        a = axis % x.ndim if x.ndim else 0
        return x.reshape(int(np.prod(x.shape[:a])), -1)

    return flatten


@torch_kernel("Transpose")
def _transpose(attrs: dict[str, Any]) -> Callable[..., Any]:
    perm = attrs.get("perm")
    return lambda x: x.permute(*(perm if perm is not None else range(x.ndim - 1, -1, -1)))


def _softmax_maker(fname: str) -> Maker:
    def make(attrs: dict[str, Any]) -> Callable[..., Any]:
        import torch

        axis = int(attrs.get("axis", -1))
        return lambda x: getattr(torch, fname)(x, dim=axis)

    return make


TORCH_KERNELS["Softmax"], TORCH_KERNELS["LogSoftmax"] = _softmax_maker("softmax"), _softmax_maker("log_softmax")


def _symmetric_pads(attrs: dict[str, Any], n: int) -> tuple[int, ...] | None:
    pads = attrs.get("pads")
    if pads is None:
        return (0,) * n
    begin, end = tuple(pads[:n]), tuple(pads[n:])
    return begin if begin == end else None


@torch_kernel("Conv")
def _conv(attrs: dict[str, Any]) -> Callable[..., Any]:
    import torch.nn.functional as F

    def conv(x: Any, w: Any, b: Any = None) -> Any:
        n = x.ndim - 2
        pads = _symmetric_pads(attrs, n)
        if pads is None or n not in (1, 2, 3) or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", None):
            FALLBACKS["Conv"] += 1
            from nexus.ir.opdef import get_op

            kernel = get_op("Conv").kernel
            assert kernel is not None
            out = kernel(*(to_numpy(a) for a in (x, w, b) if a is not None), **attrs)
            return _back(out, x.device)
        fn = (F.conv1d, F.conv2d, F.conv3d)[n - 1]
        return fn(x, w, b, stride=tuple(attrs.get("strides") or (1,) * n), padding=pads,
                  dilation=tuple(attrs.get("dilations") or (1,) * n), groups=int(attrs.get("group", 1)))

    return conv


def _pool_maker(op: str) -> Maker:
    def make(attrs: dict[str, Any]) -> Callable[..., Any]:
        import torch.nn.functional as F

        def pool(x: Any) -> Any:
            n = x.ndim - 2
            pads = _symmetric_pads(attrs, n)
            simple = (pads is not None and n in (1, 2, 3) and not attrs.get("ceil_mode")
                      and attrs.get("auto_pad", "NOTSET") in ("NOTSET", None)
                      and (op == "MaxPool" or not any(pads or ()))  # count_include_pad differs
                      and not any(d != 1 for d in (attrs.get("dilations") or ())))
            if not simple:
                FALLBACKS[op] += 1
                from nexus.ir.opdef import get_op

                kernel = get_op(op).kernel
                assert kernel is not None
                return _back(kernel(to_numpy(x), **attrs), x.device)
            kernel_shape = tuple(attrs["kernel_shape"])
            strides = tuple(attrs.get("strides") or (1,) * n)
            fns = (F.max_pool1d, F.max_pool2d, F.max_pool3d) if op == "MaxPool" else \
                (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)
            return fns[n - 1](x, kernel_shape, strides, pads or 0)

        return pool

    return make


TORCH_KERNELS["MaxPool"], TORCH_KERNELS["AveragePool"] = _pool_maker("MaxPool"), _pool_maker("AveragePool")
