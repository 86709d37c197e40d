"""The op families.  Importing this package registers every op into the registry."""

from nexus.ir import control  # noqa: F401  (the control ops)
from nexus.ops import activation, dynamic, index, linalg, math, nn, random, reduce, shape  # noqa: F401

# The op families of this package, in the order the docs list them.  Other packages may
# register ops of their own families (autodiff helpers, ...); those are not listed here.
FAMILIES = ("math", "activation", "reduce", "linalg", "shape", "index", "nn", "dynamic", "random")
