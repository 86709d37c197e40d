"""PyTorch import: ``torch.export`` programs -> Nexus graphs (``nx.from_torch``,
``nx.from_exported``).

``torch.export`` traces a module into an :class:`~torch.export.ExportedProgram`: an FX
graph of Core ATen ops whose placeholders are the parameters, buffers and user inputs
(``graph_signature`` says which), with symbolic sizes (``s0``, ``s1``... and their
ranges in ``range_constraints``).  Data-dependent control flow stays as the higher-order
ops ``torch.cond`` and ``while_loop``, whose branches and bodies are nested FX graphs
(``get_attr`` operands) that take every value they read as an explicit operand.

The importer walks the graph in order.  Each FX node becomes Nexus nodes in the current
block (the op table is :mod:`nexus.frontend.torch.ops`); ``cond`` and ``while_loop``
become blocks, with their joins and loop-carried values built by the shared SSA builder
(:mod:`nexus.frontend.torch.control`).  Because torch's subgraphs capture nothing
implicitly, every other value is a plain reference to a dominating node.

The graph's arguments are the user inputs (the pytree leaves of ``(args, kwargs)``, in
order), then, with ``params="arguments"``, the parameters and buffers in the program's
order; otherwise those are named constants.  Its results are the leaves of the output
pytree, in order; :class:`TorchProgram` rebuilds the tuple/list structure when called.
Symbolic sizes become Nexus symbols: the names of ``torch.export.Dim`` objects where
``from_torch`` can see them, else torch's own (``s77`` becomes ``S77``, apart from the
``s0, s1...`` Nexus makes for sizes nobody can name).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from nexus.frontend.importing import BlockBuilder, ident
from nexus.frontend.torch.data import (  # noqa: F401  (TorchImportError is part of this API)
    NP_DTYPES,
    TorchImportError,
    describe,
    source_of,
    target_name,
    tensor_to_numpy,
    torch_dtype,
)
from nexus.ir.cons import SSABuilder
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.opdef import OpTypeError
from nexus.ir.static import static_value
from nexus.ir.types import Dim, TensorType, Type, fresh_dim, sym

PARAM_MODES = ("constants", "arguments")


@dataclass
class TorchProgram:
    """An imported program: the graph, and what is needed to call it like the module.

    ``graph`` takes the user inputs, then ``param_names`` (with ``params="arguments"``);
    calling the program passes ``param_values`` for those and rebuilds the output
    structure (``out_spec``, a torch pytree spec) from the graph's flat results."""

    graph: Graph
    input_names: list[str]
    param_names: list[str] = field(default_factory=list)
    param_values: list[np.ndarray] = field(default_factory=list)
    out_spec: Any = None
    in_leaves: list[bool] = field(default_factory=list)  # which input leaves are graph arguments
    kw_order: list[str] = field(default_factory=list)  # the keyword arguments' order in the export

    @property
    def param_argnums(self) -> tuple[int, ...]:
        """The graph argument positions of the parameters (for ``nx.grad(..., argnums=)``)."""
        n = len(self.input_names)
        return tuple(range(n, n + len(self.param_names)))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils._pytree import tree_flatten, tree_unflatten

        if kwargs:  # the export's order of keywords, not the caller's
            kwargs = {k: kwargs[k] for k in self.kw_order if k in kwargs} | kwargs
        leaves = tree_flatten((args, kwargs))[0]
        if self.in_leaves and len(leaves) != len(self.in_leaves):
            raise TypeError(f"the program takes {len(self.in_leaves)} input leaves, got {len(leaves)}")
        flat = [_to_numpy(v) for v, keep in zip(leaves, self.in_leaves or [True] * len(leaves)) if keep]
        out = self.graph(*flat, *self.param_values)
        results = list(out) if len(self.graph.result_types) != 1 else [out]
        return results if self.out_spec is None else tree_unflatten(results, self.out_spec)


def _to_numpy(v: Any) -> Any:
    import torch

    if isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy()
    return v


def from_torch(module: Any, example_args: tuple[Any, ...], dynamic_shapes: Any = None, *,
               kwargs: Mapping[str, Any] | None = None, params: str = "constants",
               program: bool = False) -> Any:
    """Export ``module`` (an ``nn.Module`` or a function) with ``torch.export.export`` on
    ``example_args`` and import it: a :class:`Graph` (or the :class:`TorchProgram` with
    ``program=True``).  ``dynamic_shapes`` is torch's (``{0: Dim("batch")}`` per
    argument); named ``Dim`` objects name the graph's symbols."""
    import torch

    if not isinstance(module, torch.nn.Module):
        module = _as_module(module)
    ep = torch.export.export(module, tuple(example_args), dict(kwargs or {}), dynamic_shapes=dynamic_shapes)
    names = _dim_names(ep, dynamic_shapes)
    prog = import_exported(ep, params=params, dim_names=names, name=type(module).__name__)
    return prog if program else prog.graph


def from_exported(ep: Any, *, params: str = "constants", program: bool = False, name: str | None = None) -> Any:
    """Import an ``ExportedProgram`` (from ``torch.export.export`` or ``torch.export.load``)."""
    prog = import_exported(ep, params=params, name=name)
    return prog if program else prog.graph


def import_exported(ep: Any, *, params: str = "constants", dim_names: Mapping[str, str] | None = None,
                    name: str | None = None, decompose: bool = True) -> TorchProgram:
    """The :class:`TorchProgram` of ``ep``.  ``decompose`` first runs torch's default
    decompositions (to Core ATen, :func:`decompositions`), so the importer sees one small op
    set; where torch fails at that, the program is imported as exported, and an op without
    a rule there is named in an error that also gives torch's failure."""
    if params not in PARAM_MODES:
        raise ValueError(f"params must be one of {', '.join(PARAM_MODES)}, got {params!r}")
    failure = None
    if decompose:
        try:
            ep = decompositions(ep)
        except Exception as e:  # noqa: BLE001  (torch raises many kinds from inside its decompositions)
            first = (str(e).strip().splitlines() or [""])[0]
            failure = f"{type(e).__name__}: {first}"
    return Importer(ep, params, dict(dim_names or {}), name, decompose_failure=failure).run()


def decompositions(ep: Any) -> Any:
    """``ep`` decomposed to Core ATen by torch's default table, less the ops the importer
    converts whole (:func:`nexus.frontend.torch.ops.whole_ops`: scaled dot-product
    attention, which torch's decomposition cannot always trace, GPT-2's for one, and which
    Nexus builds from fewer ops than torch's decomposition has)."""
    import torch

    from nexus.frontend.torch.ops import whole_ops

    table = torch.export.default_decompositions()
    keep = whole_ops()
    for op in [op for op in table if target_name(op) in keep]:
        del table[op]
    return ep.run_decompositions(table)


def _as_module(fn: Callable[..., Any]) -> Any:
    """A plain function as an ``nn.Module`` whose forward it is, for ``torch.export``."""
    import torch

    class Fn(torch.nn.Module):
        forward = staticmethod(fn)

    Fn.__name__ = getattr(fn, "__name__", "fn")
    # torch.export keeps only the stack frames of functions named forward (and of
    # registered anchors): register the function, so errors can show its lines
    anchor = getattr(torch.fx.proxy, "_register_stack_trace_anchor", None)
    if anchor is not None:
        anchor(fn)
    return Fn()


def _dim_names(ep: Any, dynamic_shapes: Any) -> dict[str, str]:
    """torch symbol name -> the name of the ``Dim`` the user gave for it (top-level tensor
    arguments whose spec is a dict or a sequence of Dims)."""
    if dynamic_shapes is None:
        return {}
    user = [n for n, s in zip(_placeholders(ep.graph_module), ep.graph_signature.input_specs)
            if s.kind.name == "USER_INPUT"]
    specs: list[Any]
    if isinstance(dynamic_shapes, Mapping):
        arg_names = list(getattr(ep.module_call_graph[0].signature, "forward_arg_names", None) or [])
        specs = [dynamic_shapes.get(a) for a in arg_names]
    else:
        specs = list(dynamic_shapes)
    out: dict[str, str] = {}
    for node, spec in zip(user, specs):
        val = node.meta.get("val")
        shape = getattr(val, "shape", None)
        if shape is None or spec is None:
            continue
        items: Any = ()
        if isinstance(spec, Mapping):
            items = spec.items()
        elif isinstance(spec, (list, tuple)):
            items = enumerate(spec)
        for axis, d in items:
            nm = getattr(d, "__name__", None)
            if not isinstance(axis, int) or not isinstance(nm, str) or not 0 <= axis < len(shape):
                continue
            expr = getattr(shape[axis], "node", None)
            expr = getattr(expr, "expr", None)
            if isinstance(expr, sympy.Symbol) and _IDENT.fullmatch(nm):
                out[expr.name] = nm
    return out


_IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_UNBACKED = re.compile(r"u\d+")  # torch's data-dependent sizes


def _placeholders(gm: Any) -> list[Any]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


# --- the importer ----------------------------------------------------------------------------
class Importer(BlockBuilder):
    """One import: the graph being built, its current block, the SSA builder for the
    joins and loops, and the torch symbol -> Nexus dim map."""

    def __init__(self, ep: Any, params: str, dim_names: dict[str, str], name: str | None, *,
                 decompose_failure: str | None = None):
        self.ep = ep
        self.decompose_failure = decompose_failure  # why torch could not decompose ep, if it could not
        self.params = params
        self.dim_names = dim_names
        self.syms: dict[str, Dim] = {}
        self.file = name or "torch"
        self.fx: Any = None  # the FX node being converted (errors, locations)
        self.outer_src: list[tuple[str, int, str] | None] = [None]
        self.g: Graph
        self.block: Block
        self.ssa: SSABuilder[tuple[int, int]]
        self._uid = 0

    # --- the whole program -------------------------------------------------------------------
    def run(self) -> TorchProgram:
        from nexus.frontend.torch.ops import unsupported

        gm = self.ep.graph_module
        sig = self.ep.graph_signature
        for o in sig.output_specs:
            if o.kind.name in ("BUFFER_MUTATION", "USER_INPUT_MUTATION", "PARAMETER_MUTATION"):
                raise TorchImportError(f"the program mutates {o.target!r} ({o.kind.name.lower()}); Nexus graphs "
                                       f"are functional: export in eval mode or return the new value")
        missing = unsupported(gm)
        if missing:
            lines = "\n".join(f"  {m}" for m in missing)
            why = "" if self.decompose_failure is None else (
                f"\n(torch could not decompose the program to Core ATen, so it is imported as exported: "
                f"{self.decompose_failure})")
            raise TorchImportError(f"{len(missing)} op(s) of the program have no Nexus import rule:\n{lines}{why}")
        places = _placeholders(gm)
        user: list[tuple[Any, Any]] = []
        state: list[tuple[Any, Any]] = []
        consts: list[tuple[Any, Any]] = []
        for node, spec in zip(places, sig.input_specs):
            kind = spec.kind.name
            if kind == "USER_INPUT":
                user.append((node, spec))
            elif kind in ("PARAMETER", "BUFFER"):
                (state if self.params == "arguments" else consts).append((node, spec))
            elif kind == "CONSTANT_TENSOR":
                consts.append((node, spec))
            else:
                raise TorchImportError(f"input {node.name!r} is a {kind.lower()}, which Nexus does not import")
        in_leaves = [not _is_constant_input(n) for n, _ in user]
        args = [(n, s) for (n, s), keep in zip(user, in_leaves) if keep]
        arg_nodes = [n for n, _ in args] + [n for n, _ in state]
        types = [self.placeholder_type(n) for n in arg_nodes]
        names = [ident(n.name) for n, _ in args] + [ident(s.target) for _, s in state]
        self.g = Graph(ident(self.file), types, names)
        self.block = self.g.start_block
        self.ssa = SSABuilder(self.g)
        env: dict[Any, Any] = dict(zip(arg_nodes, self.g.args))
        for n, _ in user:
            if _is_constant_input(n):
                env[n] = _constant_input_value(n)
        for n, spec in consts:
            env[n] = self.const(self.state_value(spec), name=ident(spec.target))
        outs = self.emit_graph(gm, env, [env[p] for p in places])
        user_outs = [v for v, o in zip(outs, sig.output_specs) if o.kind.name in ("USER_OUTPUT", "LOSS_OUTPUT")]
        values = [self.as_node(v, "an output") for v in user_outs]
        ret = self.g.add("Return", values, self.block)
        self.g.end_block.append_input(ret)
        self.ssa.finish()
        return TorchProgram(self.g, names[:len(args)], [ident(s.target) for _, s in state],
                            [self.state_value(s) for _, s in state], self.ep.call_spec.out_spec, in_leaves,
                            _kw_order(self.ep.call_spec.in_spec))

    def state_value(self, spec: Any) -> np.ndarray:
        target = spec.target
        t = self.ep.state_dict[target] if target in self.ep.state_dict else self.ep.constants.get(target)
        if t is None:
            raise TorchImportError(f"no value for {spec.target!r} in the program's state")
        return tensor_to_numpy(t, spec.target)

    # --- graphs and nodes --------------------------------------------------------------------
    def emit_graph(self, gm: Any, env: dict[Any, Any] | None, inputs: Sequence[Any]) -> list[Any]:
        """Convert FX graph module ``gm`` at the current block (which may change), its
        placeholders bound to ``inputs``; returns its outputs (Nodes or Python values)."""
        env = {} if env is None else env
        places = _placeholders(gm)
        if len(places) != len(inputs):
            raise TorchImportError(f"a subgraph takes {len(places)} operands, the op gives it {len(inputs)}")
        for p, v in zip(places, inputs):
            env[p] = v
        out: list[Any] = []
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "get_attr":
                env[n] = _get_attr(gm, n.target)
            elif n.op == "call_function":
                env[n] = self.convert(n, env)
            elif n.op == "output":
                res = n.args[0]
                out = [self.lookup(v, env) for v in (res if isinstance(res, (list, tuple)) else [res])]
            else:
                raise TorchImportError(f"FX node {n.name!r} of kind {n.op!r} is not supported (call_module?)")
        return out

    def lookup(self, a: Any, env: Mapping[Any, Any]) -> Any:
        """An FX argument with its nodes replaced by their values (Nexus nodes, subgraphs)."""
        if hasattr(a, "op") and hasattr(a, "meta"):  # an fx.Node
            return env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.lookup(x, env) for x in a)
        if isinstance(a, dict):
            return {k: self.lookup(v, env) for k, v in a.items()}
        return a

    def convert(self, n: Any, env: Mapping[Any, Any]) -> Any:
        from nexus.frontend.torch.ops import rule_for

        args = [self.lookup(a, env) for a in n.args]
        kwargs = {k: self.lookup(v, env) for k, v in n.kwargs.items()}
        if n.target is operator.getitem:
            seq, k = args
            v = seq[k]
            if v is None:
                raise TorchImportError(f"{describe(n, self.outer_src[-1])}: output {k} of its op is not supported")
            return v
        fn = rule_for(n.target)
        assert fn is not None  # unsupported() checked every op first
        outer, self.fx = self.fx, n
        try:
            out = fn(self, *args, **kwargs)
        except TorchImportError as e:
            if getattr(e, "located", False):
                raise
            raise self.located(str(e)) from None
        except (OpTypeError, ValueError, TypeError, KeyError, IndexError, AssertionError) as e:
            raise self.located(f"{type(e).__name__}: {e}") from None
        finally:
            self.fx = outer
        self.check(n, out)
        return out

    def located(self, msg: str) -> TorchImportError:
        err = TorchImportError(f"{describe(self.fx, self.outer_src[-1])}: {msg}")
        err.located = True  # type: ignore[attr-defined]
        return err

    def check(self, n: Any, out: Any) -> None:
        """Nexus's type of a converted node must have torch's dtype and rank (a wrong
        conversion stops here, naming the op, rather than computing wrong numbers)."""
        val = n.meta.get("val")
        if not isinstance(out, Node) or val is None or not hasattr(val, "dtype") or not hasattr(val, "shape"):
            return
        t = out.type
        if not isinstance(t, TensorType):
            return
        want = torch_dtype(val.dtype)
        if t.dtype != want or (t.shape is not None and len(t.shape) != len(val.shape)):
            outer, self.fx = self.fx, n
            try:
                raise self.located(f"imported as {t}, but torch says {want} of rank {len(val.shape)}")
            finally:
                self.fx = outer
        if t.shape is not None and not t.is_static:
            out.type = t.with_shape(tuple(self.refine(a, b) for a, b in zip(t.shape, val.shape)))

    def refine(self, mine: Dim, theirs: Any) -> Dim:
        """The better of a dim Nexus's rule gave and torch's: torch sees through shape
        arithmetic that Nexus's rules, at build time, see as a run-time value."""
        if isinstance(mine, int):
            return mine
        expr = getattr(getattr(theirs, "node", None), "expr", theirs)
        if isinstance(expr, sympy.Symbol) and _UNBACKED.fullmatch(expr.name):
            # a data-dependent size: the Nexus dim of its first appearance stands for it
            return self.syms.setdefault(expr.name, mine)
        if isinstance(expr, sympy.Expr) and any(_UNBACKED.fullmatch(s.name) and s.name not in self.syms
                                                for s in expr.free_symbols):
            return mine
        return self.dim(theirs)

    @contextmanager
    def inside(self, n: Any) -> Iterator[None]:
        """Errors in a subgraph of HOP ``n`` point at the HOP's source line."""
        self.outer_src.append(source_of(n) or self.outer_src[-1])
        try:
            yield
        finally:
            self.outer_src.pop()

    # --- building ----------------------------------------------------------------------------
    def loc(self) -> SourceLoc | None:
        src = source_of(self.fx) if self.fx is not None else None
        src = src or self.outer_src[-1]
        return SourceLoc(src[0], src[1], 0) if src else None

    def emit(self, op: str, inputs: Sequence[Node], attrs: Mapping[str, Any] | None = None, *,
             name: str | None = None, type: Type | None = None) -> Node:
        nm = name if name is not None else (ident(self.fx.name) if self.fx is not None else None)
        return self.g.add(op, list(inputs), self.block, attrs, type=type, name=nm or None, loc=self.loc())

    def const(self, value: Any, dtype: Any = None, *, name: str | None = None) -> Node:
        arr = np.array(value, dtype=dtype, order="C")
        return self.g.add("Constant", [], self.block, {"value": arr}, name=name, loc=self.loc())

    def as_node(self, v: Any, what: str, dtype: str | None = None) -> Node:
        """``v`` as a node: Python numbers become constants (of ``dtype`` if given)."""
        if isinstance(v, Node):
            return v
        if isinstance(v, (bool, int, float, np.generic)) and not isinstance(v, complex):
            if dtype is not None:
                return self.const(v, np.dtype(NP_DTYPES[dtype]))
            return self.const(v, np.bool_ if isinstance(v, bool) else np.int64 if isinstance(v, int) else np.float32)
        raise TorchImportError(f"{what} must be a tensor or a number, got {type(v).__name__}")

    def value_of(self, v: Any) -> Any:
        return static_value(v) if isinstance(v, Node) else v

    def new_id(self) -> int:
        self._uid += 1
        return self._uid

    # --- types -------------------------------------------------------------------------------
    def placeholder_type(self, n: Any) -> Type:
        val = n.meta.get("val")
        if val is None:
            raise TorchImportError(f"input {n.name!r} has no example value (meta['val'])")
        if isinstance(val, (int, bool)) or type(val).__name__ in ("SymInt", "SymBool"):
            return TensorType("bool" if type(val).__name__ == "SymBool" or isinstance(val, bool) else "i64", ())
        if not hasattr(val, "dtype"):
            raise TorchImportError(f"input {n.name!r} is a {type(val).__name__}, not a tensor")
        return TensorType(torch_dtype(val.dtype), tuple(self.dim(d) for d in val.shape))

    def dim(self, d: Any) -> Dim:
        """A torch size (an int or a SymInt) as a Nexus dim."""
        if isinstance(d, int):
            return d
        expr = getattr(getattr(d, "node", None), "expr", d)
        if isinstance(expr, (int, sympy.Integer)):
            return int(expr)
        if not isinstance(expr, sympy.Expr):
            return fresh_dim()
        if not all(isinstance(a, (sympy.Symbol, sympy.Integer, sympy.Add, sympy.Mul, sympy.Pow))
                   for a in sympy.preorder_traversal(expr)):
            return fresh_dim()  # torch's FloorDiv, ModularIndexing...: no Nexus spelling
        return expr.xreplace({s: self.symbol(s.name) for s in expr.free_symbols})

    def symbol(self, name: str) -> Dim:
        d = self.syms.get(name)
        if d is None:
            given = self.dim_names.get(name)
            d = self.syms[name] = sym(given if given else name.upper())
        return d


def _kw_order(in_spec: Any) -> list[str]:
    """The keyword names of an export's input spec ``((args...), {kwargs...})``."""
    try:
        kw = in_spec.child(1) if hasattr(in_spec, "child") else in_spec.children_specs[1]
        return [str(k) for k in (kw.context or [])]
    except (AttributeError, IndexError, TypeError):
        return []


def _get_attr(gm: Any, target: str) -> Any:
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _is_constant_input(n: Any) -> bool:
    val = n.meta.get("val")
    return val is None or isinstance(val, (int, float, bool, str)) or val is None


def _constant_input_value(n: Any) -> Any:
    return n.meta.get("val")
