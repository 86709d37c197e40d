"""The op families.  Importing this package registers every op into the registry."""

from nexus.ir import control  # noqa: F401  (the control ops)
from nexus.ops import activation, dynamic, index, linalg, math, nn, random, reduce, shape  # noqa: F401
