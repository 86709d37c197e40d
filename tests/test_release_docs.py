"""The docs' example runner (docs/_ext/nexus_exec.py) fails the build on a stale example.

A tiny site is built with Sphinx (the ``docs`` extra) from pages whose examples are wrong in
each way the runner must catch (a python block that raises, a fragment that uses a name no
block made, a command that fails, a command no rule runs, a command or doctest whose printed
output differs) and one page that is right; the oracle is Sphinx's own warning list under
``-W``.  The README runs the same way, from an empty directory (its page in the site,
docs/readme.md).  The real site is built by .ci/run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from nexus.testing.extras import require

require("sphinx", "docs")
require("myst_parser", "docs")

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "docs" / "_ext"

CONF = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
sys.path.insert(0, {str(EXT)!r})
extensions = ["myst_parser", "nexus_exec"]
exclude_patterns = ["_build"]
nexus_exec_fresh = ["readme"]
"""

GOOD = """# Good

```python
import nexus as nx
from nexus import seeds
nx.save(seeds.skip5_loop(), "model.nx")
total = int(nx.run(seeds.skip5_loop()))
print("the total is", total)
```

```pycon
>>> total
31
```

```console
$ nexus run model.nx
result 0: i32 = 31
$ python -m nexus verify seed:ifelse
ok: graph @ifelse is valid (...)
```

```bash
pip install nexus-ir
```

```{code-block} python
:class: no-exec

nx.load("a file the reader has.nx")
```
"""

BAD = """# Bad

```python
import nexus as nx
x = 1
```

```python
raise ValueError("stale example")
```

```pycon
>>> x + 1
3
```

```console
$ nexus run seed:skip5_loop
result 0: i32 = 30
```

```bash
nexus show no-such-file.nx
```

```python
nx.run(graph_no_block_made, max_iterations=1_000)
```

```bash
python -c "import nexus as nx; nx.save(nx.parse('not a graph'), 'model.nx')"
cp model.nx copy.nx
```
"""


def build(tmp_path: Path, pages: dict[str, str]) -> subprocess.CompletedProcess[str]:
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")  # docs/readme.md includes ../README.md
    (src / "conf.py").write_text(CONF)
    index = "# Site\n\n```{toctree}\n" + "\n".join(pages) + "\n```\n"
    (src / "index.md").write_text(index)
    for name, text in pages.items():
        (src / f"{name}.md").write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-b", "html", str(src), str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=300)


def test_good_examples_build_and_are_counted(tmp_path: Path) -> None:
    done = build(tmp_path, {"good": GOOD})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ran 1 python blocks, 1 doctests and 2 commands" in done.stdout, done.stdout
    assert "not run: good: pip install nexus-ir" in done.stdout
    assert "a python block marked no-exec" in done.stdout
    page = (tmp_path / "out" / "good.html").read_text()
    assert "example-output" in page and "the total is 31" in page  # what the block printed, shown


def test_each_stale_example_is_a_warning_naming_its_line(tmp_path: Path) -> None:
    done = build(tmp_path, {"bad": BAD})
    assert done.returncode != 0
    warnings = [line for line in done.stderr.splitlines() if "example failed" in line]
    assert len(warnings) == 7, done.stderr
    text = done.stderr
    assert "bad.md:8: WARNING: example failed: python block raised" in text, text
    assert "ValueError: stale example" in text
    assert "bad.md:12: WARNING: example failed: doctest failed" in text, text
    assert "`nexus run seed:skip5_loop` printed" in text and "result 0: i32 = 31" in text
    assert "`nexus show no-such-file.nx` exited with status 1" in text
    assert "NameError: name 'graph_no_block_made' is not defined" in text  # a fragment
    assert "`python -c \"import nexus as nx; nx.save(nx.parse('not a graph'), 'model.nx')\"` exited with " \
           "status 1" in text
    assert "`cp model.nx copy.nx`: no rule runs this command" in text


def test_the_readme_runs_as_written(tmp_path: Path) -> None:
    """Every block of the README, in order, from an empty directory: python blocks, and shell
    blocks' nexus and python commands; installing and the test suite are listed, not run."""
    done = build(tmp_path, {"readme": (ROOT / "docs" / "readme.md").read_text()})
    assert done.returncode == 0, done.stderr[-6000:]
    assert "nexus_exec: not run: readme: python -m pytest -q" in done.stdout, done.stdout
    ran = re.search(r"ran (\d+) python blocks, (\d+) doctests and (\d+) commands", done.stdout)
    assert ran and int(ran[1]) >= 5 and int(ran[3]) >= 8, done.stdout  # the blocks did run
