"""The xla backend: graphs compiled by XLA through JAX, by symbolic execution (seed 003).

``nx.compile(f_or_graph, backend="xla")`` returns an :class:`XlaExecutable` (or, for an
``@nx.script`` function or ``nx.grad(...)``, one per graph signature).  Compiling is
tf2xla's three steps (:mod:`nexus.backends.xla.executable`): BuildArguments (arguments
become tracers), ExecuteGraph (each node's rule from the ``xla`` lowering table emits
``jax.numpy`` / ``lax`` calls; the structured regions of :mod:`nexus.passes.structurize`
become ``lax.cond`` and ``lax.while_loop``), BuildComputation (results become the output
tuple).  ``.lower(*args)`` / ``.source()`` give the StableHLO text.

Decisions, and where the backend differs from the NumPy reference semantics:

* **64-bit types.** NumPy's int64/float64 need JAX's x64 mode.  It is switched on only
  around tracing, compiling and calling (``jax.enable_x64(True)`` as a context), never
  for the process: other JAX code (the peers in ``bench``) keeps its own setting.
* **Shapes.** Symbolic dims are specialised per call: the cache is keyed by the concrete
  shapes and dtypes of the arguments, and ``XlaExecutable.compiles`` counts the
  compilations.  Shape inputs (Reshape's shape, Slice's bounds, ...) must be known while
  compiling: they are computed at trace time by the NumPy kernels from static values
  (constants, ``ShapeOf``, ``DimSize``).  One computed from run-time data is an error
  naming the node.
* **Data-dependent sizes** (NonMaxSuppression, NonZero, Unique, BooleanMask, TopK with a
  run-time k) have no rule yet: compiling a graph with one is a MissingLoweringError.
  The chosen design is *splitting*: regions holding such an op run on the host (the
  If's condition or the loop's test decided in Python, the op by its NumPy kernel), and
  every maximal run of items without one is compiled to XLA as above, with the small
  int values made on the host (sizes) passed as compile-time constants.  We prefer it
  to a caller-given bound with padding because padding changes the meaning of every
  downstream op (a mean or max over padded rows) and of every shape a later op reads.
  A loop whose trip count comes from data is no problem on its own (``lax.while_loop``
  tests a traced value).
* **Run-time errors cannot be raised inside XLA.** Integer division or modulo by zero
  gives whatever XLA's division gives (no ZeroDivisionError); an out-of-range Gather
  index is clamped; a negative shift count or integer power does not raise; casting a
  NaN or out-of-range float to an int gives XLA's value.  Checks on values known while
  compiling (``CheckDims`` on specialised shapes, an ``Assert`` of a constant) raise at
  compile time; an ``Assert`` on run-time values is not checked.  The fuzzer
  (``nexus.testing.py_gen --backend xla``) does not compare runs where plain Python
  raised.
* **Floating point is XLA's.** XLA's CPU compiler contracts ``a * b + c`` into one fused
  multiply-add (one rounding instead of NumPy's two: about a quarter of random f64
  inputs differ in the last bit), and its transcendental functions are not correctly
  rounded (tanh is exact only where it saturates, see ``rules._tanh``).  Results agree
  to tolerance, but a program that feeds such a last-bit difference into a comparison
  or into chaotic arithmetic (``(x * y) % 97.5`` iterated, as random fuzz programs do)
  can take another path; the fuzz report in the notes counts those apart.
* **Gradient graphs.** Their stack (``nexus.ops.stack``) becomes one preallocated buffer
  per kind (shape, dtype) of value pushed, with a count, carried through the loops, and
  the computation returns the peak depth; when the peak passed the capacity (64 at
  first), the executable doubles the capacity until it fits, compiles again (remembered
  for later calls of that signature) and reruns.  An adjoint that starts as a scalar
  zero and gets its shape later (type ``f64[...]``) is broadcast to the shape the loop
  or branch settles on (found by ``jax.eval_shape``).
* **Host kernels.** Ops listed in ``rules_shape.HOST_OPS`` (convolutions, pooling, ...) run
  their NumPy kernel through ``jax.pure_callback``: correct, not fast.
"""

from nexus.backends.base import register_backend
from nexus.backends.xla import rules, rules_shape  # noqa: F401  (they fill the lowering table)
from nexus.backends.xla.executable import XlaExecutable, compile_xla
from nexus.backends.xla.trace import BACKEND, RULES, XlaLoweringError

register_backend(BACKEND, compile_xla, doc="XLA through JAX (CPU here): regions as lax.cond / lax.while_loop")

__all__ = ["RULES", "XlaExecutable", "XlaLoweringError", "compile_xla"]
