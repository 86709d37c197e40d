"""A documentation page's examples as one Python file, for tests that run them.

The ```python blocks of a Markdown page are joined into ``<directory>/<stem>_doc.py``:
a file, not a string, because ``@nx.script`` reads its functions' source.  (The Sphinx
build runs the same blocks through ``docs/_ext/nexus_exec.py``; a test runs one page with
its own asserts, in the default test run.)
"""

from __future__ import annotations

import re
from pathlib import Path


def examples_file(page: Path, directory: Path, at_least: int = 1) -> Path:
    """The examples of ``page`` written to a file in ``directory`` (at least ``at_least``
    blocks, so that a page whose blocks lost their fences does not pass empty)."""
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    if len(blocks) < at_least:
        raise AssertionError(f"{page} has {len(blocks)} python blocks, expected at least {at_least}")
    out = directory / f"{page.stem}_doc.py"
    out.write_text("\n".join(blocks))
    return out
