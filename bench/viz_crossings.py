"""How many edges of the seed pictures cross a block they neither leave nor enter.

``python -m bench.viz_crossings`` lays out each seed graph with Graphviz (``dot -Tjson``)
twice, with constants drawn once (edges to all their uses) and with echoes (a copy next
to each use in another block), and counts the edges whose drawn curve passes through a
cluster other than the ones of its two ends.  The geometry is Graphviz's own.
"""

from __future__ import annotations

import json
import math
import subprocess
from typing import Any

from nexus import seeds
from nexus.ir.graph import Graph
from nexus.viz import to_dot
from nexus.viz.dot import CONTROL_EDGE


def _bezier(points: list[list[float]], steps: int = 12) -> list[tuple[float, float]]:
    """Points along a piecewise cubic Bezier curve (Graphviz's 'b' draw operation)."""
    out = []
    for k in range(0, len(points) - 3, 3):
        p0, p1, p2, p3 = points[k:k + 4]
        for s in range(steps + 1):
            t = s / steps
            a, b, c, d = (1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t * t, t ** 3
            out.append((a * p0[0] + b * p1[0] + c * p2[0] + d * p3[0], a * p0[1] + b * p1[1] + c * p2[1] + d * p3[1]))
    return out


def crossings(layout: dict[str, Any]) -> tuple[int, int, int, float]:
    """(edges between clusters that are not control flow, edges that cross at least one
    foreign cluster, cluster crossings in all, length of the edges between clusters in
    points)."""
    objs = layout["objects"]
    boxes = {}
    home: dict[int, int] = {}
    for o in objs:
        if o.get("name", "").startswith("cluster_"):
            x1, y1, x2, y2 = map(float, o["bb"].split(","))
            boxes[o["_gvid"]] = (x1 + 1, y1 + 1, x2 - 1, y2 - 1)
            for n in o.get("nodes", []):
                home[n] = o["_gvid"]
    edges = crossed = between = 0
    length = 0.0
    for e in layout.get("edges", []):
        if e.get("style") == "invis":
            continue
        ends = {home.get(e["tail"]), home.get(e["head"])}
        if "lhead" in e:  # a control edge into a block ends at the block's border
            ends.add(next(o["_gvid"] for o in objs if o.get("name") == e["lhead"]))
        pts = [p for op in e.get("_draw_", []) if op["op"] == "b" for p in _bezier(op["points"])]
        hit = {c for c, (x1, y1, x2, y2) in boxes.items() if c not in ends
               and any(x1 < x < x2 and y1 < y < y2 for x, y in pts)}
        edges += bool(hit)
        crossed += len(hit)
        if home.get(e["tail"]) != home.get(e["head"]):
            length += sum(math.dist(a, b) for a, b in zip(pts, pts[1:]))
            between += e.get("color") != CONTROL_EDGE
    return between, edges, crossed, length


def measure(g: Graph, echoes: bool) -> tuple[int, int, int, int, float]:
    """(edges, data edges between blocks, crossing edges, cluster crossings, length
    between blocks) of ``g``'s picture."""
    proc = subprocess.run(["dot", "-Tjson"], input=to_dot(g, echoes=echoes).encode(), capture_output=True,
                          timeout=120, check=True)
    layout = json.loads(proc.stdout)
    drawn = sum(e.get("style") != "invis" for e in layout.get("edges", []))
    return (drawn, *crossings(layout))


def main() -> None:
    print("before -> after drawing constants next to their uses (echoes)")
    print(f"{'seed':<14} {'edges':>9} {'data edges between blocks':>26} {'edges crossing a block':>23} "
          f"{'block crossings':>16} {'length between blocks (pt)':>27}")
    for name, build in seeds.ALL.items():
        g = build()
        cols = zip(measure(g, False), measure(g, True))
        print(f"{name:<14}" + "".join(f"{f'{a:.0f} -> {b:.0f}':>{w}}" for (a, b), w in zip(cols, (10, 27, 24, 17, 28))))


if __name__ == "__main__":
    main()
