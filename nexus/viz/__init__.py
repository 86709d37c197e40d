"""Pictures of graphs: ``to_dot(graph)`` and ``render(graph, "out.svg")``."""

from nexus.viz.dot import GraphvizMissing, dot_program, node_kind, render, to_dot

__all__ = ["GraphvizMissing", "dot_program", "node_kind", "render", "to_dot"]
