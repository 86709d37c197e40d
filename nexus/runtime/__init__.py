"""Execution of graphs.  ``run(graph, *args)`` is the entry point."""

from nexus.runtime.interpreter import NexusRuntimeError, run

__all__ = ["NexusRuntimeError", "run"]
