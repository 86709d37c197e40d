"""Execution of graphs.  ``run(graph, *args)`` is the entry point."""

from nexus.runtime.interpreter import NexusRuntimeError, run, source

__all__ = ["NexusRuntimeError", "run", "source"]
