"""Optimisation passes and the pass manager (see :mod:`nexus.passes.manager`).

``optimize(g, "constfold,cse,dce")`` edits ``g`` in place and returns it; without a
pipeline it runs :data:`DEFAULT_PIPELINE` (``inline,canonicalize,licm,canonicalize``).
Passes: constfold, dce, cse (alias gvn), simplifycfg, licm, inline, canonicalize (the
first four to a fixpoint), shapes (shape inference).  Passes are registered by name and imported
lazily; analyses (dominators, loops, liveness) are cached on the graph.
"""

from nexus.passes.manager import (
    DEFAULT_PIPELINE,
    PASSES,
    Pass,
    PassError,
    available_passes,
    get_pass,
    optimize,
    parse_pipeline,
    register_pass,
    run_pipeline,
)

__all__ = [
    "DEFAULT_PIPELINE", "PASSES", "Pass", "PassError", "available_passes", "get_pass", "optimize",
    "parse_pipeline", "register_pass", "run_pipeline",
]
