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
* **Regions.** An If becomes ``lax.cond``, or, when both arms are small (at most 100
  nodes and about 65,536 multiply-adds, no loop, no host callback), a select of both arms:
  a conditional costs more per run than a few small ops computed twice, less than a
  large matrix product computed for nothing.  A loop becomes ``lax.while_loop``; one whose
  counter runs from a static start to a static bound by 1 without a break becomes
  ``lax.fori_loop``; a small body that branches or pushes (a gradient's sweeps) runs 4
  iterations per XLA trip, each after the first kept where the test still holds.
* **Calls.** ``nx.compile(script, backend="xla")`` calls each signature's jitted
  computation through an entry (``XlaExecutable.entry``, chained as the llvm backend's
  are by ``nexus.backends.base.Specialized``): the arguments' classes, dtypes and shapes
  are checked against the signature, x64 is switched on for the call, and CPU result
  buffers come back as NumPy arrays without a copy.
* **Shapes.** Symbolic dims are specialised per call: the cache is keyed by the concrete
  shapes and dtypes of the arguments, and ``XlaExecutable.compiles`` counts the
  compilations.  Shape inputs (Reshape's shape, Pad's widths, ...) must be known while
  compiling: they are computed at trace time by the NumPy kernels from static values
  (constants, ``ShapeOf``, ``DimSize``).  One computed from run-time data is an error
  naming the node; Slice's bounds are the exception: with run-time bounds (``v[i % 3:]``)
  the result is a padded window with its true length beside
  (:mod:`nexus.backends.xla.slicing`).
* **Data-dependent sizes** (NonMaxSuppression, NonZero, Unique, BooleanMask, TopK with a
  run-time k): *a static bound with padding, plus the true size*
  (:mod:`nexus.backends.xla.dynamic`).  The op's NumPy kernel runs on the host
  (``jax.pure_callback``); its result is padded to a bound derived from the input's static
  shape (NonZero <= the number of elements, NMS <= the number of boxes, ...) or to the
  smaller ``nx.compile(f, backend="xla", dynamic_bound=N)``; the true size (the op's size
  result) is a traced scalar.  Consumers that need it use it: ``ShapeOf``/``DimSize``
  give it, reductions mask the padding, a loop ``while i < k`` runs k times, and a graph
  result is sliced after the call, and elementwise ops, cumulative sums, slices, new axes,
  transposes and reshapes that keep the padded axis carry it.  An op whose meaning padding
  would change (an ArgMax or a MatMul over the padded axis, two values padded on different
  axes) is an error naming it.  We chose this over splitting the
  graph (the dynamic part on the python backend): the whole program, branches and loops
  around the op included, stays one XLA computation, and the LLVM backend's partitioner
  (``nexus.backends.llvm.partition``) is the place for splitting.
* **Run-time checks.** XLA cannot raise inside a computation, so an ``Assert`` on
  run-time values (a script's read of a variable unassigned on the path taken, falling
  off the end, ``range()`` with a zero step, an ``assert`` or ``raise`` statement) records its failure
  instead: the first failure's code is carried through the ``lax.cond`` arms and
  ``lax.while_loop`` carries of the regions that hold a check, loops stop once it is set,
  and the computation returns it beside the results; the executable then raises what
  the python backend raises for that node (``Trace.fail_where``; for a script,
  the exception Python raises there: UnboundLocalError, AssertionError, the class a
  ``raise`` names).  An elementwise op on values whose sizes are known only at run
  time (padded, see below) checks the same way that they broadcast, and raises NumPy's
  ValueError where they do not.  A region whose checks all fold while
  tracing (sizes, constants) carries nothing, and a graph without a run-time check
  returns no code: it pays nothing per call.  A check that fails on static values fails
  when the call reaches it, as on the python backend.  Integer division or modulo by
  zero raises ZeroDivisionError, an index out of range (``v[i]``, a Gather) IndexError,
  and a negative shift count ValueError, as there (XLA would give a number, or clamp the
  index).  Casting a NaN or out-of-range float to an int gives XLA's value (the python
  and llvm backends give theirs: integers are fixed-width on every backend).  The fuzzer
  (``nexus.testing.py_gen --backend xla``) compares the runs where plain Python raised
  UnboundLocalError, raised in a generated ``raise`` or ``assert``, or returned None,
  not those where it raised another error.
* **Floating point is XLA's.** Its algebraic simplifier reassociates arithmetic with
  constants (``-1.8 * (y * -1.5)`` becomes ``2.7 * y``); ``strict_float=True`` turns that
  pass off for one executable (about 3x slower on W3-small; the fuzzer uses it).  Its
  CPU compiler contracts ``a * b + c`` into one fused multiply-add (one rounding instead
  of NumPy's two: about a quarter of random f64 inputs differ in the last bit; no flag
  of jaxlib 0.10 turns that off), and its transcendental functions are not correctly
  rounded (tanh is exact only where it saturates, see ``rules._tanh``).  Results agree
  to tolerance, but a program that feeds such a last-bit difference into a comparison
  or into chaotic arithmetic (``(x * y) % 97.5`` iterated, as random fuzz programs do)
  can take another path; the fuzz report in the notes counts those apart.
* **Lists grown in loops and branches** (``Append``, a ``Concat`` onto a list): where
  paths disagree on a value's size along one axis (a list appended to in one arm of an
  If, or on every iteration), it becomes a ``Padded`` value too, padded to a bound
  (``Trace.agree``).  A loop pads it for all its trips where its trip count is static,
  else for ``capacity`` trips (64 at first): it counts its trips and reports them by a
  callback, and the executable doubles the capacity and compiles again when a run needed
  more, as for stacks.  (Before, a select of arms of shapes [1] and [0] broadcast them
  to [0]: such a list came back empty, with no error.)
* **Gradient graphs.** Their stack (``nexus.ops.stack``) becomes one preallocated buffer
  per kind (shape, dtype) of value pushed, with a count, carried through the loops, and
  the computation returns the peak depth.  At a signature's first call, the same
  computation with the depth as its only output (XLA drops the rest) runs first and
  sizes the buffers (at most a quarter over the depth, ``executable._sized``), so the
  full one compiles once; the buffers are the computation's last argument (donated) and
  output, kept by the executable for the signature's next call; when a later call's peak passes the
  capacity, the executable doubles the capacity until it fits, compiles again
  (remembered for later calls of that signature) and reruns.  An adjoint that starts as a scalar
  zero and gets its shape later (type ``f64[...]``) is broadcast to the shape the loop
  or branch settles on (found by ``jax.eval_shape``).
* **Host kernels.** Ops listed in ``rules_shape.HOST_OPS`` (gradients of convolutions and
  pooling, Resize, ScatterND, SetItem, random ops) run their NumPy kernel through
  ``jax.pure_callback``: correct, not fast.  Convolutions, pooling, normalisation and
  GatherElements/GatherND/OneHot are lax ops (:mod:`nexus.backends.xla.rules_nn`).
"""

from nexus.backends.base import register_backend
from nexus.backends.xla import dynamic, rules, rules_nn, rules_shape, slicing  # noqa: F401  (they fill the lowering table)
from nexus.backends.xla.executable import XlaExecutable, compile_xla
from nexus.backends.xla.trace import BACKEND, RULES, XlaLoweringError

register_backend(BACKEND, compile_xla, options=("dynamic_bound", "strict_float"),
                 doc="XLA through JAX (CPU here): regions as lax.cond / lax.while_loop")

__all__ = ["RULES", "XlaExecutable", "XlaLoweringError", "compile_xla"]
