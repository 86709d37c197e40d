"""The op families.  Importing this package registers every op into the registry."""

from nexus.ir import control  # noqa: F401  (the control ops)

# Besides the families users write programs with, this registers the ops that frontends
# and transformations emit: run-time checks (debug), the adjoint kernels the VJP rules
# use (adjoint, adjoint_nn), the stacks of graph-mode autodiff (stack) and the sequences
# and optionals of ONNX (sequence).  They live
# here, not beside their users, so that a saved graph using them loads in a fresh process.
from nexus.ops import (  # noqa: F401
    activation,
    adjoint,
    adjoint_nn,
    comm,
    debug,
    dynamic,
    index,
    linalg,
    math,
    nn,
    random,
    reduce,
    sequence,
    shape,
    stack,
    state,
)

# The op families users write programs with, in the order the docs list them.
FAMILIES = ("math", "activation", "reduce", "linalg", "shape", "index", "nn", "dynamic", "random", "comm")
