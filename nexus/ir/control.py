"""The control ops: Block, Start, End, Return, Jmp, Cond, Proj, Phi, Call.

They live in ``nexus/ir`` (not ``nexus/ops``) because the graph itself is made of them.
The interpreter handles them structurally.  Proj and Call are of kind "meta": they run
with the data flow of their block (Proj also selects the exits of a Cond).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nexus.ir.opdef import Attr, OpDef, OpTypeError, register
from nexus.ir.types import TensorType, TupleType, Type, X, join_types


def _control(_: Sequence[Type], __: Mapping[str, Any], ___: Sequence[Any]) -> Type:
    return X


def _cond(ins: Sequence[Type], _: Mapping[str, Any], __: Sequence[Any]) -> Type:
    (c,) = ins
    if not (isinstance(c, TensorType) and c.dtype == "bool" and c.shape == ()):
        raise OpTypeError(f"Cond: the condition must be a bool scalar, got {c}")
    return TupleType((X, X))


def _proj(ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    (t,) = ins
    if not isinstance(t, TupleType):
        raise OpTypeError(f"Proj: input must be a tuple, got {t}")
    num = int(attrs["num"])
    if not 0 <= num < len(t.elems):
        raise OpTypeError(f"Proj: num = {num} is out of range for {t}")
    return t.elems[num]


def _phi(ins: Sequence[Type], _: Mapping[str, Any], __: Sequence[Any]) -> Type:
    if not ins:
        raise OpTypeError("Phi: needs at least one input")
    out = ins[0]
    for t in ins[1:]:
        try:
            out = join_types(out, t)
        except TypeError as e:
            raise OpTypeError(f"Phi: {e}") from None
    return out


def _call(ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    callee = attrs["callee"]
    if len(ins) != len(callee.arg_types):
        raise OpTypeError(f"Call @{callee.name}: takes {len(callee.arg_types)} arguments, got {len(ins)}")
    for i, (got, want) in enumerate(zip(ins, callee.arg_types)):
        if isinstance(got, TensorType) and isinstance(want, TensorType) and got.dtype != want.dtype:
            raise OpTypeError(f"Call @{callee.name}: argument {i} is {got}, the callee takes {want}")
    results = callee.result_types
    return results[0] if len(results) == 1 else TupleType(results)


register(OpDef("Block", "control", variadic=True, inputs=("pred",), type_rule=_control,
               doc="A basic block; its inputs are its control predecessors."))
register(OpDef("Start", "control", doc="Starts the graph; its tuple holds the arguments (read with Proj)."))
register(OpDef("End", "control", type_rule=_control, doc="The single node of the end block."))
register(OpDef("Return", "control", inputs=("value",), variadic=True, type_rule=_control, terminator=True,
               doc="Leaves the graph with its inputs as results; enters the end block."))
register(OpDef("Jmp", "control", type_rule=_control, terminator=True,
               doc="Unconditional jump to the block that lists it."))
register(OpDef("Cond", "control", inputs=("condition",), type_rule=_cond, results=("false", "true"),
               terminator=True, forking=True,
               doc="Branches on a bool scalar; Proj 0 is the false exit, Proj 1 the true exit."))
register(OpDef("Proj", "meta", inputs=("tuple",), attrs={"num": Attr("int", doc="component")},
               type_rule=_proj, kernel=lambda t, num: t[num],
               doc="Component `num` of a tuple-valued node: a Cond exit, an argument, an output."))
register(OpDef("Phi", "phi", inputs=("value",), variadic=True, type_rule=_phi,
               doc="Selects the input at the position of the control edge the block was entered by."))
register(OpDef("Call", "meta", inputs=("arg",), variadic=True, pure=False, type_rule=_call,
               attrs={"callee": Attr("graph", doc="the graph to run"),
                      "recurrent": Attr("str", None, doc="the ONNX recurrent op the callee's loop stands for "
                                                         "(nexus.frontend.recurrent.Spec)")},
               doc="Runs another graph; one result directly, several as a tuple."))
