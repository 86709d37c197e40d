"""The viewer in a real browser: Debian's Chromium driven by Playwright (never a
downloaded browser).  For each seed graph the page opens without script errors; clicking
a node shows its facts; search finds the nodes a plain count of the graph finds; a block
collapses and expands; the path of the run carries the counts plain Python counts; and
a screenshot shows the graph (decoded here with zlib: not blank, the seeds' colours)."""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from nexus import seeds
from nexus.ir.graph import Graph
from nexus.testing.extras import require, require_program
from nexus.viz import dot, html
from nexus.viz.runpath import run_path

sync_api = require("playwright.sync_api", "test")
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_program("dot", "graphviz")
    exe = require_program("chromium", "chromium")
    with sync_api.sync_playwright() as p:
        # As root, Chromium refuses to start with its sandbox.
        b = p.chromium.launch(executable_path=exe if os.path.exists(exe) else CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def png_pixels(data: bytes) -> np.ndarray:
    """The pixels (height, width, channels) of an 8-bit RGB or RGBA PNG, non-interlaced."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    width = height = channels = 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and ctype in (2, 6), (depth, ctype, interlace)
            channels = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            chunks.append(body)
        elif kind == b"IEND":
            break
    stride = width * channels
    raw = zlib.decompress(b"".join(chunks))
    out = bytearray(height * stride)
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:  # Sub
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 255
        elif f == 2:  # Up
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:  # Average
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:  # Paeth
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b, c = prev[i], prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out[y * stride:(y + 1) * stride] = line
        prev = line
    return np.frombuffer(bytes(out), np.uint8).reshape(height, width, channels)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def _open(browser: Any, g: Graph, tmp_path: Any) -> tuple[Any, list[str], dict]:
    path = tmp_path / f"{g.name}.html"
    path.write_text(html.page(g, run_path(g)), encoding="utf-8")
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri())
    page.wait_for_function("window.nexusViewer && window.nexusViewer.timings.paintedAt", timeout=60_000)
    return page, errors, page.evaluate("window.nexusViewer.timings")


# (seed, the node to click, the block it is in, how often it runs by plain Python)
CASES = [("ifelse", "c", "join", 1), ("skip5_loop", "i", "header", 8), ("first_example", "x.1", "header", 96)]


@pytest.mark.parametrize(("seed", "name", "block", "runs"), CASES)
def test_seed_page_in_chromium(browser: Any, tmp_path: Any, seed: str, name: str, block: str, runs: int) -> None:
    g = seeds.ALL[seed]()
    page, errors, timings = _open(browser, g, tmp_path)
    data = page.evaluate("window.nexusViewer.data")
    nid = next(k for k, v in data["nodes"].items() if v["name"] == name)
    node = next(n for b in g.blocks for n in b.members if n.op.name == "Phi" and n.block.name == block)
    # Click the node: the panel shows its op and name, block, type and how often it ran.
    page.click(f"#{nid}")
    assert page.inner_text("#details h2") == f"Phi %{name}"
    rows = dict(r.split("\t", 1) for r in page.inner_text("#details table").splitlines() if "\t" in r)
    assert rows["block"] == f"^{block}" and rows["type"] == str(node.type) and rows["ran"] == f"{runs} times"
    assert rows["device"] == "(default)" and rows["source"] == "(unknown)"
    assert page.eval_on_selector(f"#{nid}", "e => e.classList.contains('selected')")
    # Search by op: as many matches as the graph has Phis.
    page.fill("#search", "phi")
    page.press("#search", "Enter")
    phis = sum(n.op.name == "Phi" for b in g.blocks for n in b.members)
    assert page.inner_text("#hits") == f"{phis} match" + ("" if phis == 1 else "es")
    page.fill("#search", "")
    page.press("#search", "Escape")
    # Collapse the block by its name, then expand it from the cover.
    cid = next(k for k, v in data["blocks"].items() if v["name"] == block)
    page.click(f"#{cid} > text")
    assert page.eval_on_selector(f"#{nid}", "e => getComputedStyle(e).display") == "none"
    page.click(f"g.cover[data-block={cid}] text")
    assert page.eval_on_selector(f"#{nid}", "e => getComputedStyle(e).display") != "none"
    assert page.locator("g.cover").count() == 0
    # The run: the block's label carries its count.
    assert page.text_content(f"#{cid} .count").strip() == f"\u00d7{runs}"
    page.click("#fit")
    # The screenshot shows the graph: many distinct pixels, block fill and Phi green among them.
    shot = png_pixels(page.screenshot(path=tmp_path / f"{seed}.png"))  # kept for a person to look at
    rgb = shot[..., :3].reshape(-1, 3)
    assert rgb.std() > 20
    colours = {tuple(c) for c in np.unique(rgb[:: max(1, len(rgb) // 200_000)], axis=0)}
    assert len(colours) > 50
    block_px = np.all(rgb == _rgb(dot.BLOCK_FILL), axis=1).mean()
    phi_px = np.all(rgb == _rgb(dot.PHI_FILL), axis=1).sum()
    assert block_px > 0.05 and phi_px > 50, (block_px, phi_px)
    assert errors == []
    print(f"{seed}: script {timings['scriptMs']:.0f} ms, painted at {timings['paintedAt']:.0f} ms")
    page.close()


def test_png_decoder_against_zlib_written_image() -> None:
    """The decoder reads back an image written here with each PNG filter."""
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (7, 5, 3), dtype=np.uint8)
    rows = b""
    for y in range(7):
        line = img[y].reshape(-1).astype(np.int32)
        prev = img[y - 1].reshape(-1).astype(np.int32) if y else np.zeros(15, np.int32)
        f = y % 3  # None, Sub, Up
        if f == 1:
            line = (line - np.concatenate([[0, 0, 0], line[:-3]])) & 255
        elif f == 2:
            line = (line - prev) & 255
        rows += bytes([f]) + bytes(line.astype(np.uint8))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 5, 7, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    assert np.array_equal(png_pixels(data), img)
