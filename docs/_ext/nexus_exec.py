"""Run every code example of the site while it builds, so that a stale example fails the build.

Per page, in order, in one namespace and one fresh working directory (like a notebook), which
holds a copy of the example graphs in ``docs/_graphs/`` and links to the repository's files
that pages read (``nexus_exec_links`` in conf.py: ``tests`` for its fixtures):

- a ``python`` block is executed and what it prints is shown under it; a ``pycon`` block
  or a docstring's ``>>>`` example is run by :mod:`doctest`, its printed output compared
  (``...`` and whitespace are forgiven);
- a ``bash`` / ``console`` block: each ``nexus ...``, ``python -m nexus...`` or
  ``python -c CODE`` command runs in this process (``nexus`` is ``python -m nexus``); after a
  ``$ `` prompt, the lines up to the next prompt are the expected output, compared like a
  doctest's; without prompts, the commands' output is shown under the block (unless it also
  has commands not run).  The commands in :data:`NOT_RUN` (installing, the test suite, this
  build, CI itself) are not run, and the end of the build lists each with the reason; any
  other command is a failure, so that no example is skipped without a word.

A failure is a Sphinx warning naming the page and line, so ``sphinx-build -W`` stops on it.
A block that must not run (it needs a file the reader has) says so with ``:class: no-exec``
(MyST: a ``{code-block}`` directive); the end of the build lists every one of them.

A page named in conf.py's ``nexus_exec_fresh`` (the README, included as ``readme``) runs in an
empty directory instead, as a reader who follows it from a fresh directory does: its examples
must make every file they use.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import runpy
import shlex
import shutil
import sys
import tempfile
import traceback
import types
import warnings
from dataclasses import dataclass, field
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

PYTHON = {"python", "py", "python3"}
PYCON = {"pycon"}
SHELL = {"bash", "console", "shell", "sh"}
CHECKER = doctest.OutputChecker()
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
MAX_OUTPUT_LINES = 40  # of a block's printed output shown on the page

# The commands a shell block may show that the build does not run, by how they start: why not.
NOT_RUN: dict[tuple[str, ...], str] = {
    ("pip",): "installs packages (CI installs the wheel and each extra)",
    ("python", "-m", "pip"): "installs packages (CI installs the wheel and each extra)",
    ("apt-get",): "installs system packages (.ci/run does)",
    ("python", "-m", "pytest"): "the test suite: minutes (.ci/run runs it)",
    ("pytest",): "the test suite: minutes (.ci/run runs it)",
    ("python", "-m", "build"): "builds the wheel and sdist (.ci/run and tests/test_release.py do)",
    ("sphinx-build",): "builds this site: it is this build",
    ("python", "-m", "sphinx"): "builds this site: it is this build",
    (".ci/run",): "CI itself: about 14 minutes",
    ("torchrun",): "starts one process per rank (tests/test_distributed.py runs it)",
}


@dataclass
class Stats:
    """What ran, for the summary at the end of the build."""

    python: int = 0
    doctests: int = 0
    commands: int = 0
    not_run: list[str] = field(default_factory=list)


def _stats(app: Sphinx) -> Stats:
    if not hasattr(app, "_nexus_exec_stats"):
        app._nexus_exec_stats = Stats()  # type: ignore[attr-defined]
    return app._nexus_exec_stats  # type: ignore[attr-defined, no-any-return]


class Page:
    """One page's run: its namespace, its working directory, where its failures go."""

    def __init__(self, app: Sphinx, docname: str) -> None:
        self.app = app
        self.docname = docname
        self.workdir = tempfile.mkdtemp(prefix="nexus-docs-")
        if docname not in app.config.nexus_exec_fresh:
            self.furnish()
        # The page's namespace is a module that stands in as __main__ while the page's code
        # runs: tools that look a function's globals up through sys.modules (torch.export's
        # tracer) find them there, as they would for a script.
        self.module = types.ModuleType("__main__")
        self.namespace: dict[str, Any] = self.module.__dict__
        self.count = 0
        self.printed: list[str] = []  # the current shell block's commands and their output
        self.skipped = False  # whether it has commands that are not run (pip install ...)

    def furnish(self) -> None:
        """Put in the working directory the files that the site's pages open."""
        # The example graphs (docs/_graphs/*.nx) are there for the examples to open.
        graphs = os.path.join(self.app.srcdir, "_graphs")
        for name in sorted(os.listdir(graphs)) if os.path.isdir(graphs) else []:
            shutil.copy(os.path.join(graphs, name), self.workdir)
        # Files of the repository that pages read by relative paths (conf.py's nexus_exec_links,
        # e.g. tests/fixtures): links, so an example sees them as run from the checkout.
        for name, target in self.app.config.nexus_exec_links.items():
            os.symlink(os.path.normpath(os.path.join(self.app.srcdir, target)), os.path.join(self.workdir, name))

    def fail(self, node: nodes.Node, what: str) -> None:
        logger.warning("example failed: %s", what, location=node, type="nexus", subtype="example")

    @contextlib.contextmanager
    def inside(self) -> Any:
        """Run with the page's directory as the working directory and stdout captured."""
        old, old_main = os.getcwd(), sys.modules["__main__"]
        out = io.StringIO()
        os.chdir(self.workdir)
        sys.modules["__main__"] = self.module
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                yield out
        finally:
            sys.modules["__main__"] = old_main
            os.chdir(old)

    def source_file(self, code: str) -> str:
        """Write the block to a file: @nx.script and the DSL read their source lines back."""
        self.count += 1
        path = os.path.join(self.workdir, f"{self.docname.replace('/', '_')}_{self.count}.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(code)
        return path

    # --- python ----------------------------------------------------------------------------
    def run_python(self, node: nodes.Node, code: str) -> None:
        path = self.source_file(code)
        with self.inside() as out:
            try:
                exec(compile(code, path, "exec"), self.namespace)  # noqa: S102 (the docs' own examples)
            except BaseException:  # noqa: BLE001  (reported as the page's failure)
                self.fail(node, f"python block raised\n{_short_traceback(path)}\noutput:\n{out.getvalue()}")
        self.show_output(node, out.getvalue())
        _stats(self.app).python += 1

    def show_output(self, node: nodes.Node, text: str) -> None:
        """Put what the block printed under it on the page, as a notebook does (the working
        directory's name, which changes with every build, is written as `.`)."""
        text = text.replace(self.workdir + os.sep, "").replace(self.workdir, ".").rstrip()
        if not text:
            return
        lines = text.splitlines()
        if len(lines) > MAX_OUTPUT_LINES:
            lines = [*lines[:MAX_OUTPUT_LINES], f"... ({len(lines) - MAX_OUTPUT_LINES} more lines)"]
        shown = nodes.literal_block("\n".join(lines), "\n".join(lines), language="none",
                                    classes=["example-output"])
        node.parent.insert(node.parent.index(node) + 1, shown)

    def run_doctest(self, node: nodes.Node, text: str) -> None:
        path = self.source_file(text)
        test = doctest.DocTestParser().get_doctest(text, self.namespace, self.docname, path, 0)
        report = io.StringIO()
        runner = doctest.DocTestRunner(optionflags=FLAGS, verbose=False)
        with self.inside():
            runner.run(test, out=report.write, clear_globs=False)
        if runner.failures:
            self.fail(node, f"doctest failed\n{report.getvalue()}")
        _stats(self.app).doctests += 1

    # --- shell -----------------------------------------------------------------------------
    def run_shell(self, node: nodes.Node, text: str) -> None:
        # A command continued with a trailing backslash is one command, as for a shell.
        lines = text.replace("\\\n", " ").splitlines()
        prompted = any(line.startswith("$ ") for line in lines)
        self.printed = []
        self.skipped = False
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if prompted:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
                expected = []
                while i < len(lines) and not lines[i].startswith("$ "):
                    expected.append(lines[i])
                    i += 1
            else:
                expected = []
            self.run_command(node, line, "\n".join(expected).strip())
        # A prompted block shows its output already; a block that also installs (the quick
        # start's `pip install ... && python -m nexus.demo`) is about the commands, not their output.
        if not prompted and not self.skipped:
            self.show_output(node, "".join(self.printed))

    def run_command(self, node: nodes.Node, line: str, expected: str) -> None:
        stats = _stats(self.app)
        for command in line.split("&&"):
            argv = shlex.split(command, comments=True)
            if not argv:
                continue
            why = next((why for start, why in NOT_RUN.items() if tuple(argv[:len(start)]) == start), None)
            if why is not None:
                stats.not_run.append(f"{self.docname}: {command.strip()}  ({why})")
                self.skipped = True
                continue
            if argv[0] == "nexus":
                status, output = self.run_module("nexus", argv[1:])
            elif argv[:2] == ["python", "-m"] and len(argv) > 2 and argv[2].split(".")[0] == "nexus":
                status, output = self.run_module(argv[2], argv[3:])
            elif argv[:2] == ["python", "-c"] and len(argv) > 2:
                status, output = self.run_code(argv[2], argv[3:])
            else:
                self.fail(node, f"`{command.strip()}`: no rule runs this command (nexus, python -m nexus..., "
                                "python -c; or list it in NOT_RUN of docs/_ext/nexus_exec.py)")
                continue
            self.printed.append(f"$ {command.strip()}\n{output}")
            stats.commands += 1
            if status != 0:
                self.fail(node, f"`{command.strip()}` exited with status {status}:\n{output}")
            elif expected and not CHECKER.check_output(expected + "\n", output, FLAGS):
                self.fail(node, f"`{command.strip()}` printed\n{output}\nnot\n{expected}")

    def run_module(self, module: str, args: list[str]) -> tuple[int, str]:
        """``python -m module args`` in this process: its exit status and output."""
        return self.run_main([module, *args], lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))

    def run_code(self, code: str, args: list[str]) -> tuple[int, str]:
        """``python -c code args`` in this process, in a namespace of its own: its exit status
        and output."""
        namespace = {"__name__": "__main__"}
        return self.run_main(["-c", *args], lambda: exec(compile(code, "<string>", "exec"), namespace))  # noqa: S102

    def run_main(self, argv: list[str], main: Any) -> tuple[int, str]:
        """Run ``main()`` as a program with ``sys.argv = argv``: its exit status and output."""
        old_argv = sys.argv
        sys.argv = argv
        status: Any = 0
        with self.inside() as out, warnings.catch_warnings():
            # runpy's note that nexus.X was imported before it ran as __main__ (it was: by
            # an earlier example) is no fault of the example.
            warnings.filterwarnings("ignore", ".*found in sys.modules.*", RuntimeWarning)
            try:
                main()
            except SystemExit as e:
                status = e.code
            except BaseException:  # noqa: BLE001
                status = 1
                out.write(traceback.format_exc())
            finally:
                sys.argv = old_argv
        if status is None:
            status = 0
        return (status if isinstance(status, int) else 1), out.getvalue()


def _short_traceback(path: str) -> str:
    """The traceback from the example's own frames on (Sphinx's and this module's left out)."""
    lines = traceback.format_exc().splitlines()
    for k, line in enumerate(lines):
        if path in line:
            return "\n".join(["Traceback (most recent call last):", *lines[k:]])
    return "\n".join(lines)


def _language(node: nodes.literal_block) -> str:
    lang = str(node.get("language", "")).lower()
    if lang in PYTHON and node.astext().lstrip().startswith(">>>"):
        return "pycon"
    return lang


def run_page(app: Sphinx, doctree: nodes.document) -> None:
    """The ``doctree-read`` hook: run the page's examples in document order."""
    docname = app.env.docname
    page: Page | None = None
    for node in list(doctree.findall(lambda n: isinstance(n, (nodes.literal_block, nodes.doctest_block)))):
        if isinstance(node, nodes.doctest_block):
            lang = "pycon"
        else:
            lang = _language(node)
        if lang not in PYTHON | PYCON | SHELL:
            continue
        if "no-exec" in node.get("classes", []):
            _stats(app).not_run.append(f"{docname}:{node.line}: a {lang} block marked no-exec")
            continue
        if page is None:
            page = Page(app, docname)
            # A docstring's >>> examples (the API reference) see the names they are written with.
            exec("import numpy as np\nimport nexus as nx\n", page.namespace)  # noqa: S102
        if lang in PYTHON:
            page.run_python(node, node.astext())
        elif lang in PYCON:
            page.run_doctest(node, node.astext())
        else:
            page.run_shell(node, node.astext())


def summary(app: Sphinx, exception: Exception | None) -> None:
    """At the end: how many examples ran, and each command or block that did not."""
    if exception is not None:
        return
    s = _stats(app)
    logger.info("nexus_exec: ran %d python blocks, %d doctests and %d commands", s.python, s.doctests, s.commands)
    for item in s.not_run:
        logger.info("nexus_exec: not run: %s", item)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("nexus_exec_links", {}, "env")
    app.add_config_value("nexus_exec_fresh", [], "env")
    app.connect("doctree-read", run_page)
    app.connect("build-finished", summary)
    # Examples change the working directory and share a process: read pages one at a time.
    return {"version": "1", "parallel_read_safe": False, "parallel_write_safe": True}
