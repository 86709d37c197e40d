"""Reverse-mode automatic differentiation through control flow (DESIGN section 6).

Two modes: tape mode (seed 002) records the executed dataflow nodes of a forward run and
differentiates that acyclic record; graph mode transforms a Graph into a gradient Graph
whose reverse CFG walks the forward path backwards.  VJP rules live in :data:`VJPS`.
"""

from nexus.autodiff.api import grad, gradient_graph, value_and_grad, vjp
from nexus.autodiff.graph_mode import GradError, vjp_graph
from nexus.autodiff.vjp import VJPS, MissingVJPError

__all__ = ["VJPS", "GradError", "MissingVJPError", "grad", "gradient_graph", "value_and_grad", "vjp",
           "vjp_graph"]
