"""Pictures of graphs: ``to_dot(graph)`` and ``render(graph, "out.svg")``."""

from nexus.viz.dot import MAX_DRAWN_NODES, DrawError, GraphvizMissing, dot_program, node_kind, render, to_dot

__all__ = ["MAX_DRAWN_NODES", "DrawError", "GraphvizMissing", "dot_program", "node_kind", "render", "to_dot"]
