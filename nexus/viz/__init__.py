"""Pictures of graphs: ``to_dot(graph)`` and ``render(graph, "out.svg")``; the interactive
viewer page is :mod:`nexus.viz.html` (``page``, ``write_html``), the path of one run
:mod:`nexus.viz.runpath` (``run_path``), its local server :mod:`nexus.viz.serve`."""

from nexus.viz.dot import (
    MAX_DRAWN_NODES,
    DrawError,
    GraphvizMissing,
    dot_program,
    drawing,
    node_kind,
    render,
    to_dot,
)

__all__ = ["MAX_DRAWN_NODES", "DrawError", "GraphvizMissing", "dot_program", "drawing", "node_kind", "render",
           "to_dot"]
