"""The Nexus IR: types, nodes, blocks, graphs, the op registry, text form and verifier."""

from nexus.ir import control  # noqa: F401  (registers the control ops)
from nexus.ir.graph import Graph, GraphError
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.opdef import REGISTRY, Attr, OpDef, OpTypeError, all_ops, get_op, register
from nexus.ir.parser import ParseError, parse, parse_module
from nexus.ir.printer import print_graph, structural_diff, structurally_equal
from nexus.ir.types import (
    ControlType,
    OptionalType,
    SequenceType,
    StackType,
    TensorType,
    TupleType,
    Type,
    X,
    parse_dim,
    scalar,
    sym,
)
from nexus.ir.verify import VerifyError, verify

__all__ = [
    "REGISTRY", "Attr", "Block", "ControlType", "Graph", "GraphError", "Node", "OpDef", "OpTypeError",
    "OptionalType", "ParseError", "SequenceType", "SourceLoc", "StackType", "TensorType", "TupleType", "Type",
    "VerifyError", "X", "all_ops", "get_op",
    "parse", "parse_dim", "parse_module", "print_graph", "register", "scalar", "structural_diff",
    "structurally_equal", "sym", "verify",
]
