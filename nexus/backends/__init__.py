"""Backends: ``compile(graph_or_function, backend=NAME, **options)`` and the lowering
tables (:mod:`nexus.backends.base`).  ``python`` is the default backend; loading this
package installs it as what ``g(...)`` and ``g.compile()`` run on."""

from nexus.backends.base import (
    BACKENDS,
    Backend,
    BackendError,
    Executable,
    LoweringTable,
    MissingLoweringError,
    NexusRuntimeError,
    compile,
    get_backend,
    lowering_table,
    register_backend,
    register_lowering,
)
from nexus.backends.python import run, source
from nexus.ir.graph import install_backends

install_backends(compile, run)

__all__ = [
    "BACKENDS", "Backend", "BackendError", "Executable", "LoweringTable", "MissingLoweringError",
    "NexusRuntimeError", "compile", "get_backend", "lowering_table", "register_backend", "register_lowering",
    "run", "source",
]
