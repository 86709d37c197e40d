"""Sphinx configuration of the Nexus documentation site.

Build it from the repository root (CI does, in .ci/run):

    sphinx-build -W --keep-going -E -b html docs build/docs

Pages are Markdown (MyST).  Every code example on them runs while the site builds
(``_ext/nexus_exec.py``), and the pictures are drawn by ``nexus viz`` before the pages are
read (:func:`draw_pictures`), so a stale example or a picture that no longer draws fails
the build: warnings are errors (``-W``).
"""

from __future__ import annotations

import os
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DOCS)
# The checkout's nexus, whatever else is installed: the site documents this source tree.
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(DOCS, "_ext"))

# JAX (the xla page) would log that it found no TPU: the site is built on CPUs.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import nexus  # noqa: E402

project = "Nexus"
author = "the Nexus authors"
copyright = "the Nexus authors"  # noqa: A001 (Sphinx's name)
release = nexus.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "nexus_exec",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_generated/*.dot", "Thumbs.db", ".DS_Store"]

# Each page's examples run in a fresh directory; these names in it link to the repository's
# files (pages read test fixtures as from the checkout: tests/fixtures/tf/seed004.pb).
nexus_exec_links = {"tests": "../tests"}
# Pages whose examples run in an empty directory: the README (readme.md includes it), whose
# reader starts from nothing, so its examples must make every file they use.
nexus_exec_fresh = ["readme"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # links like format.md#grammar

autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Members only where a page asks (:members:): the nx names are documented once, under nexus.
autodoc_default_options: dict[str, object] = {}
# A type hint `type[Pass]` would otherwise be an ambiguous reference to every attribute
# called `type` (Node.type, Value.type, ...): Python's builtin is meant, and Sphinx's
# python domain cannot tell (it is a warning, not a broken link).
suppress_warnings = ["ref.python"]

html_theme = "furo"
html_title = f"Nexus {release}"
html_static_path = ["_static"]
html_css_files = ["nexus.css"]  # marks the output the examples printed (nexus_exec)

# The pictures: (file under _generated/, what `nexus viz` draws).  Seeds are built in;
# other graphs are text files under _graphs/.
PICTURES = [
    ("ifelse.svg", "seed:ifelse"),
    ("skip5_loop.svg", "seed:skip5_loop"),
    ("first_example.svg", "seed:first_example"),
    ("ordering.svg", os.path.join(DOCS, "_graphs", "ordering.nx")),
    ("data_parallel.svg", os.path.join(DOCS, "_graphs", "data_parallel.nx")),
]


def draw_pictures(app: object) -> None:
    """Draw every picture with ``nexus viz`` before any page is read."""
    import contextlib
    import io

    from nexus.cli.main import main

    out = os.path.join(DOCS, "_generated")
    os.makedirs(out, exist_ok=True)
    for name, source in PICTURES:
        with contextlib.redirect_stdout(io.StringIO()):  # its "wrote FILE"
            status = main(["viz", source, "-o", os.path.join(out, name)])
        if status != 0:
            raise RuntimeError(f"nexus viz {source} failed (status {status}); the site needs Graphviz's dot")


def setup(app: object) -> None:
    app.connect("builder-inited", draw_pictures)  # type: ignore[attr-defined]
