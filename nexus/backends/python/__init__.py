"""The python backend: each graph compiled to one Python function over NumPy kernels
(the block interpreter of seed 000).  ``nx.run(g, ...)`` and ``g(...)`` use it."""

from nexus.backends.base import NexusRuntimeError, register_backend
from nexus.backends.python.interpreter import PythonExecutable, compile_python, run, source

register_backend("python", compile_python, options=("max_iterations", "parallel"),
                 doc="generated Python over NumPy kernels; runs everywhere", stateful=True, containers=True)

__all__ = ["NexusRuntimeError", "PythonExecutable", "compile_python", "run", "source"]
