"""Reading a TensorFlow GraphDef without TensorFlow: the protobuf, its tensors, its nodes.

The GraphDef is parsed with the compiled protos the ``tensorboard`` package ships
(``tensorboard.compat.proto.graph_pb2``, the extra ``nexus-ir[tf]``), binary or text
format.  Loading never executes code.  Nodes are normalised to :class:`TfNode`: data
inputs as ``(node, output index)`` pairs and control inputs (``^name``) apart, the same
for the top-level graph and for function bodies, whose inputs are written
``node:out_arg:idx`` (an output *argument* name and an index inside it) and whose
arguments become nodes of the pseudo op ``_Arg``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nexus.frontend.importing import read_source
from nexus.ir.types import TensorType, Type, fresh_dim


class TfImportError(ValueError):
    """A GraphDef Nexus cannot import: malformed, or using what Nexus lacks.  The message
    names the node (its name and op) where there is one."""


# TensorFlow DataType enum -> Nexus dtype (those Nexus has).
TF_DTYPES: dict[int, str] = {1: "f32", 2: "f64", 3: "i32", 4: "u8", 5: "i16", 6: "i8", 9: "i64", 10: "bool",
                             19: "f16"}
_TF_NAMES = {0: "invalid", 7: "string", 8: "complex64", 14: "bfloat16", 17: "uint16", 18: "complex128",
             20: "resource", 21: "variant", 22: "uint32", 23: "uint64"}
DT_RESOURCE, DT_VARIANT = 20, 21
MAX_SPLAT_ELEMENTS = 1 << 26
"""Elements a constant written as one repeated value (TF's splat encoding) may expand to."""

# Ops whose outputs are split over several output arguments: (argument, its length attr or
# None for one tensor).  Function bodies name an output as ``node:arg:idx``; every other op
# has one output argument, so there ``idx`` is the flat index.
OUT_ARGS: dict[str, list[tuple[str, str | None]]] = {
    "Switch": [("output_false", None), ("output_true", None)],
    "Merge": [("output", None), ("value_index", None)],
    "TensorListPopBack": [("output_handle", None), ("tensor", None)],
    "TensorArrayV3": [("handle", None), ("flow", None)],
    "Unique": [("y", None), ("idx", None)],
    "TopKV2": [("values", None), ("indices", None)],
}


@dataclass
class TfNode:
    """One NodeDef: data inputs as (node name, output index), control inputs apart."""

    name: str
    op: str
    inputs: list[tuple[str, int]]
    controls: list[str]
    attr: Mapping[str, Any]
    index: int  # position in its GraphDef or function body (for stable order and errors)
    device: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def where(self) -> str:
        return f"node {self.name!r} ({self.op})"


def load_graphdef(source: Any) -> tuple[Any, str]:
    """A GraphDef and a name for errors.  ``source`` is a path (``.pbtxt``/``.txt`` are
    text format, others binary, tried as text if binary fails), bytes, or a GraphDef."""
    try:
        from google.protobuf import text_format
        from google.protobuf.message import DecodeError
        from tensorboard.compat.proto import graph_pb2
    except ImportError as e:
        raise TfImportError(f"reading a GraphDef needs the tensorboard package (pip install 'nexus-ir[tf]'): {e}") \
            from None
    if isinstance(source, graph_pb2.GraphDef):
        return source, "graph"
    data, path = read_source(source, "GraphDef", TfImportError)
    name = "graph.pb" if path is None else os.path.basename(path)
    text = path is not None and path.endswith((".pbtxt", ".txt", ".pbtext"))
    gd = graph_pb2.GraphDef()
    if text:
        try:
            text_format.Parse(data.decode("utf-8"), gd)
        except (text_format.ParseError, UnicodeDecodeError) as e:
            raise TfImportError(f"{name}: not a GraphDef in protobuf text format: {e}") from None
        return gd, name
    try:
        gd.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        try:  # a text GraphDef under another suffix
            text_format.Parse(data.decode("utf-8"), gd)
        except Exception:  # noqa: BLE001  (any failure: report the binary one)
            raise TfImportError(f"{name}: not a valid GraphDef (truncated or corrupt protobuf): {e}") from None
    return gd, name


def nexus_dtype(dt: int, what: str) -> str:
    """The Nexus dtype of a TensorFlow DataType."""
    d = TF_DTYPES.get(int(dt) % 100)  # 1xx are the _REF variants of xx
    if d is None:
        raise TfImportError(f"{what}: TensorFlow type {_TF_NAMES.get(int(dt) % 100, f'#{dt}')} has no Nexus dtype")
    return d


def shape_dims(shape: Any) -> tuple[int, ...] | None:
    """A TensorShapeProto as a tuple with -1 for unknown dims; None for unknown rank."""
    if shape.unknown_rank:
        return None
    return tuple(int(d.size) for d in shape.dim)


def tensor_type(dtype: str, dims: tuple[int, ...] | None) -> Type:
    """A Nexus type for a TF shape: -1 dims become fresh symbols."""
    if dims is None:
        return TensorType(dtype, None)
    return TensorType(dtype, tuple(d if d >= 0 else fresh_dim() for d in dims))


def tensor_to_array(t: Any, what: str) -> np.ndarray:
    """A TensorProto as a NumPy array: raw ``tensor_content`` or the typed value lists,
    where fewer values than elements repeat the last one (TF's splat encoding)."""
    dtype = np.dtype(nexus_np(nexus_dtype(t.dtype, what)))
    dims = shape_dims(t.tensor_shape)
    if dims is None or any(d < 0 for d in dims):
        raise TfImportError(f"{what}: a constant tensor needs a fully known shape")
    size = int(np.prod(dims, dtype=np.int64))
    if t.tensor_content:
        raw = bytes(t.tensor_content)
        if len(raw) != size * dtype.itemsize:
            raise TfImportError(f"{what}: tensor_content has {len(raw)} bytes, shape {list(dims)} of "
                                f"{dtype} needs {size * dtype.itemsize}")
        return np.frombuffer(raw, dtype.newbyteorder("<")).astype(dtype).reshape(dims)
    vals: Any
    if dtype == np.float16:
        vals = np.array(list(t.half_val), np.uint16).view(np.float16)
    elif dtype == np.float32:
        vals = list(t.float_val)
    elif dtype == np.float64:
        vals = list(t.double_val)
    elif dtype == np.int64:
        vals = list(t.int64_val)
    elif dtype == np.bool_:
        vals = list(t.bool_val)
    else:
        vals = list(t.int_val)
    vals = np.asarray(vals, dtype)
    if vals.size == size:
        return vals.reshape(dims)
    if vals.size > size:
        raise TfImportError(f"{what}: {vals.size} values for a tensor of shape {list(dims)}")
    if size > MAX_SPLAT_ELEMENTS:  # a few bytes of protobuf must not allocate gigabytes
        raise TfImportError(f"{what}: a splat constant of {size} elements (shape {list(dims)}); "
                            f"the limit is {MAX_SPLAT_ELEMENTS}")
    out = np.zeros(size, dtype)
    if vals.size:
        out[:vals.size] = vals
        out[vals.size:] = vals[-1]
    return out.reshape(dims)


def nexus_np(dtype: str) -> np.dtype[Any]:
    from nexus.ir.types import numpy_dtype

    return numpy_dtype(dtype)


def parse_input(s: str) -> tuple[str, int]:
    """``name`` or ``name:k`` of a GraphDef node input (or of a tensor the user names)."""
    head, sep, tail = s.rpartition(":")
    if sep and tail.isdigit():
        return head, int(tail)
    return s, 0


def graph_nodes(nodes: Any) -> dict[str, TfNode]:
    """The GraphDef's nodes by name (a duplicate name is an error)."""
    out: dict[str, TfNode] = {}
    for i, nd in enumerate(nodes):
        if not nd.name:
            raise TfImportError(f"node {i} ({nd.op}) has no name")
        if nd.name in out:
            raise TfImportError(f"node {nd.name!r} ({nd.op}): two nodes have this name")
        data, ctrl = [], []
        for s in nd.input:
            if s.startswith("^"):
                ctrl.append(s[1:])
            else:
                data.append(parse_input(s))
        out[nd.name] = TfNode(nd.name, nd.op, data, ctrl, nd.attr, i, nd.device)
    return out


def function_nodes(fn: Any) -> tuple[dict[str, TfNode], list[tuple[str, int]]]:
    """A FunctionDef's body as nodes (its arguments as ``_Arg`` nodes) and its outputs in
    signature order.  Body inputs ``node:arg:idx`` become flat output indices."""
    sig = fn.signature
    where = f"function {sig.name!r}"
    nodes: dict[str, TfNode] = {}
    for k, a in enumerate(sig.input_arg):
        nodes[a.name] = TfNode(a.name, "_Arg", [], [], {}, -len(sig.input_arg) + k, extra={"arg": k})
    ops = {nd.name: nd.op for nd in fn.node_def}
    for i, nd in enumerate(fn.node_def):
        if nd.name in nodes:
            raise TfImportError(f"{where}: node {nd.name!r} ({nd.op}): two nodes have this name")
        data, ctrl = [], []
        for s in nd.input:
            if s.startswith("^"):
                ctrl.append(s[1:])
                continue
            data.append(_body_ref(s, ops, nodes, where, nd))
        nodes[nd.name] = TfNode(nd.name, nd.op, data, ctrl, nd.attr, i, nd.device)
    outs = []
    for a in sig.output_arg:
        ref = fn.ret.get(a.name)
        if ref is None:
            raise TfImportError(f"{where}: output {a.name!r} has no value in 'ret'")
        outs.append(_body_ref(ref, ops, nodes, where, None))
    return nodes, outs


def _body_ref(s: str, ops: Mapping[str, str], nodes: Mapping[str, TfNode], where: str, nd: Any) -> tuple[str, int]:
    parts = s.split(":")
    if len(parts) == 1:
        return parts[0], 0  # an argument (or a node of the body, which has one output)
    if len(parts) == 3 and parts[2].isdigit():
        name, arg, idx = parts[0], parts[1], int(parts[2])
        op = ops.get(name)
        base = 0
        for a, _ in OUT_ARGS.get(op or "", []):
            if a == arg:
                break
            base += 1
        return name, base + idx
    if len(parts) == 2 and parts[1].isdigit():
        return parts[0], int(parts[1])
    at = f"node {nd.name!r} ({nd.op})" if nd is not None else "its ret"
    raise TfImportError(f"{where}: {at}: cannot read input {s!r} (expected node:arg:index)")
