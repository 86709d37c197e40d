"""How fast the viewer page of a big graph opens: ``python -m bench.viz_page [-n 5000] [-r 5]``.

Builds :func:`bench.viz_graphs.diamonds` (about n nodes), times the layout (Graphviz
``dot``, done once when the page is written) and the page, then opens the page ``r``
times in headless Chromium (Debian's, through Playwright) and reports, from the page's
own ``performance.now()``: when the script had made the page interactive (``ready``)
and when the first frame after it was painted (``painted``), from navigation start; and,
from a Chromium trace, the CPU time the page's main thread spent until then (``main
CPU``: on a shared, loaded machine the wall-clock times mostly measure the others' load;
the CPU time is what an idle machine would need on that thread).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from bench.viz_graphs import diamonds
from nexus.viz.html import page
from nexus.viz.runpath import run_path


def _main_thread_cpu_ms(trace: bytes) -> float:
    """CPU time of the busiest renderer main thread's tasks in a Chromium trace (ms)."""
    events = json.loads(trace)["traceEvents"]
    mains = {(e["pid"], e["tid"]) for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain"}
    per: dict[tuple[int, int], float] = {k: 0.0 for k in mains}
    for e in events:
        if e.get("ph") == "X" and e.get("name") == "RunTask" and (e["pid"], e["tid"]) in per:
            per[e["pid"], e["tid"]] += e.get("tdur", 0) / 1000
    return max(per.values(), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5000, help="about this many nodes")
    ap.add_argument("-r", type=int, default=5, help="times to open the page")
    ap.add_argument("--screenshot", metavar="PNG", help="save a screenshot of the last opening")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    g = diamonds(args.n)
    t = time.perf_counter()
    path = run_path(g)
    t_run = time.perf_counter() - t
    t = time.perf_counter()
    text = page(g, path)
    t_page = time.perf_counter() - t
    out = os.path.join(tempfile.mkdtemp(), "big.html")
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"graph: {g.num_nodes()} nodes, {len(g.blocks)} blocks; path of a run {t_run:.2f} s; "
          f"layout + page {t_page:.1f} s; page {len(text) / 1e6:.1f} MB; load average {os.getloadavg()[0]:.1f}")
    ready, painted, cpu = [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        for i in range(args.r):
            tab = browser.new_page(viewport={"width": 1400, "height": 900})
            browser.start_tracing(page=tab, categories=["devtools.timeline", "disabled-by-default-devtools.timeline"])
            tab.goto("file://" + out)
            tab.wait_for_function("window.nexusViewer && window.nexusViewer.timings.paintedAt", timeout=120_000)
            timings = tab.evaluate("window.nexusViewer.timings")
            cpu.append(_main_thread_cpu_ms(browser.stop_tracing()))
            ready.append(timings["readyAt"])
            painted.append(timings["paintedAt"])
            if args.screenshot and i == args.r - 1:
                tab.screenshot(path=args.screenshot)
            tab.close()
        browser.close()
    for name, xs in (("ready", ready), ("painted", painted), ("main CPU", cpu)):
        print(f"{name:>8}: median {statistics.median(xs):.0f} ms, min {min(xs):.0f}, max {max(xs):.0f} "
              f"({len(xs)} openings)")


if __name__ == "__main__":
    main()
