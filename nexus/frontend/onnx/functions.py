"""ONNX ops defined by functions: import them as their function body.

Many newer ONNX ops (Attention, RotaryEmbedding, Mish, GroupNormalization...) come with a
definition in terms of other ops in their schema: a FunctionProto, fixed or built for the
node at hand (a context-dependent function, which sees the node's attributes and input
types).  An op Nexus has no import rule for is imported as that body when it has one: its
inputs and outputs are the node's, its other values get names of their own, and its
attribute references take the node's attribute values (or the schema's defaults).  The
body's nodes then go through the ordinary import table, under the opset the function was
written for.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nexus.frontend.onnx.data import NEXUS_TO_ONNX
from nexus.ir.types import TensorType

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer

@dataclass
class Body:
    """A function body ready to import: its nodes and the opset they were written for."""

    node: list[Any]
    opset: int


def function_body(imp: Importer, nd: Any) -> Body | None:
    """The body of ``nd``'s op as nodes over ``nd``'s names, or None when the schema has no
    function for the model's opset."""
    from onnx import FunctionProto, defs

    domain = "" if nd.domain == "ai.onnx" else nd.domain
    version = imp.opset if not domain else next(
        (int(o.version) for o in imp.model.opset_import if o.domain == domain), 1)
    try:
        schema: Any = defs.get_schema(nd.op_type, version, domain)  # Any: its stubs lack the function API
    except Exception:  # noqa: BLE001  (onnx raises SchemaError, a private class)
        return None
    # The function written for the newest opset not after the model's; else the oldest
    # (a body added to the op later: the op itself, schema.since_version, is the model's).
    versions = [(v, False) for v in schema.function_opset_versions]
    versions += [(v, True) for v in schema.context_dependent_function_opset_versions]
    if not versions:
        return None
    older = [x for x in versions if x[0] <= imp.opset]
    body_opset, built = max(older) if older else min(versions)
    node = _with_defaults(nd, schema)
    fp = FunctionProto()
    if built:
        types = [_type_proto(imp, name).SerializeToString() for name in node.input]
        data = schema.get_context_dependent_function_with_opset_version(body_opset, node.SerializeToString(), types)
    else:
        data = schema.get_function_with_opset_version(body_opset)
    fp.ParseFromString(data)
    opset = next((o.version for o in fp.opset_import if o.domain in ("", "ai.onnx")), imp.opset)
    return Body(_instantiate(fp, node), opset)


def _with_defaults(nd: Any, schema: Any) -> Any:
    """A copy of ``nd`` with the schema's default for each attribute it leaves out."""
    from onnx import NodeProto

    node = NodeProto()
    node.CopyFrom(nd)
    given = {a.name for a in nd.attribute}
    for name, spec in schema.attributes.items():
        if name not in given and spec.default_value and spec.default_value.name:
            node.attribute.append(spec.default_value)
    return node


def _type_proto(imp: Importer, name: str) -> Any:
    """The ONNX type of the value ``name`` is bound to (empty for an omitted input)."""
    from onnx import TypeProto, helper

    if not name:
        return TypeProto()
    t = imp.read(name).type
    if not isinstance(t, TensorType) or t.dtype not in NEXUS_TO_ONNX:
        return TypeProto()
    shape = None if t.shape is None else [d if isinstance(d, int) else str(d) for d in t.shape]
    return helper.make_tensor_type_proto(NEXUS_TO_ONNX[t.dtype], shape)


def _instantiate(fp: Any, node: Any) -> list[Any]:
    """The function's nodes with its formal names replaced by the node's and its other
    names made unique, and attribute references replaced by the node's attributes."""
    # ONNX output names are unique in a model, so the first one makes the body's names
    # unique, and the same in every import of the model.
    prefix = f"{next((o for o in node.output if o), node.op_type)}__"
    names: dict[str, str] = {}
    for i, formal in enumerate(fp.input):
        names[formal] = node.input[i] if i < len(node.input) else ""
    for i, formal in enumerate(fp.output):
        if i < len(node.output) and node.output[i]:
            names[formal] = node.output[i]

    def rename(name: str) -> str:
        return names.get(name, prefix + name if name else "")

    attrs = {a.name: a for a in node.attribute}
    return [_copy_node(n, rename, attrs) for n in fp.node]


def _copy_node(n: Any, rename: Callable[[str], str], attrs: dict[str, Any]) -> Any:
    from onnx import AttributeProto, NodeProto

    out = NodeProto()
    out.CopyFrom(n)
    out.input[:] = [rename(x) for x in n.input]
    out.output[:] = [rename(x) for x in n.output]
    del out.attribute[:]
    for a in n.attribute:
        if a.ref_attr_name:
            value = attrs.get(a.ref_attr_name)
            if value is None:
                continue  # the node leaves it out and the schema has no default: the op's own default
            b = AttributeProto()
            b.CopyFrom(value)
            b.name = a.name
            out.attribute.append(b)
            continue
        b = AttributeProto()
        b.CopyFrom(a)
        if b.type == AttributeProto.GRAPH:
            _rename_graph(b.g, rename, attrs)
        for g in b.graphs:
            _rename_graph(g, rename, attrs)
        out.attribute.append(b)
    return out


def _rename_graph(g: Any, rename: Callable[[str], str], attrs: dict[str, Any]) -> None:
    """Rename a subgraph in place (its own names and those it reads from the body alike)."""
    nodes = [_copy_node(n, rename, attrs) for n in g.node]
    del g.node[:]
    g.node.extend(nodes)
    for vi in itertools.chain(g.input, g.output, g.value_info):
        vi.name = rename(vi.name)
    for t in g.initializer:
        t.name = rename(t.name)
