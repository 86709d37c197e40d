"""LLVM itself: initialisation, target machines (the host's or a named triple's), the
optimisation levels and their pipelines, assembly text and the JIT.  The only module here
that touches ``llvmlite.binding``; everything else builds ``llvmlite.ir``.

A module is optimised at the level its size calls for (:func:`level_for`): O3 with loop
unrolling and interleaving for the small modules of scripts and loops, whose few hot loops
are the whole run; O2 with the loop vectoriser but without unrolling or interleaving, and
code generation at level 2, for large modules (a CNN or a transformer: straight-line calls
into BLAS and the convolution kernels, one fused loop per elementwise stretch), where O3's
unrolling triples the code that LLVM then optimises and compiles (ResNet-18: 3,300
instructions become 10,600 and take 1.3 s instead of 0.5 s) for loops that memory bounds.
``nx.compile(g, backend="llvm", opt_level=N)`` chooses a level instead."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from nexus.backends.llvm import cache

try:
    import llvmlite
    import llvmlite.binding as llvm
except ImportError as e:  # one line naming the extra, as for every optional dependency
    raise ImportError("the llvm backend needs llvmlite: pip install nexus-ir[llvm]") from e

# Triples `--target` accepts by short name (any full triple LLVM knows works too).
TRIPLES = {"x86_64": "x86_64-unknown-linux-gnu", "aarch64": "aarch64-unknown-linux-gnu",
           "armv7": "armv7-unknown-linux-gnueabihf"}


@functools.cache
def _init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


# The optimisation levels: LLVM's pipeline settings (None: no pipeline) and the code
# generator's level (the target machine's ``opt``).  The settings of the level a module is
# compiled at are part of the object cache's key.
LEVELS: dict[int, dict[str, Any]] = {
    3: {"speed_level": 3, "loop_vectorization": True, "slp_vectorization": False, "loop_unrolling": True,
        "loop_interleaving": True, "codegen": 3},
    2: {"speed_level": 2, "loop_vectorization": True, "slp_vectorization": False, "loop_unrolling": False,
        "loop_interleaving": False, "codegen": 2},
    1: {"speed_level": 1, "loop_vectorization": False, "slp_vectorization": False, "loop_unrolling": False,
        "loop_interleaving": False, "codegen": 1},
    0: {"speed_level": None, "codegen": 0},
}
# Modules of more instructions than this (as emitted) are compiled at level 2, smaller ones
# at 3.  The hot kernels of the benchmarks (W2's count loop, W9's chain, the NMS and Viterbi
# loops, the RNN step) have 40 to 850; ResNet-18 has 3,300, BERT 7,100.
LARGE = 2000


def instructions(text: str) -> int:
    """The instructions in the LLVM IR ``text`` as llvmlite writes it (one a line, indented)."""
    return text.count("\n  ")


def level_for(text: str, option: int | None = None) -> int:
    """The optimisation level of the module ``text``: ``option`` where given (0 to 3), else
    3 for a small module and 2 for a large one (:data:`LARGE`)."""
    if option is None:
        return 2 if instructions(text) > LARGE else 3
    if isinstance(option, bool) or not isinstance(option, int) or option not in LEVELS:
        raise ValueError(f"opt_level is 0, 1, 2, 3 or None (chosen by size), got {option!r}")
    return option


@functools.cache
def host_machine(level: int = 3) -> Any:
    """The host CPU's target machine at code generation ``level`` (with its vector units)."""
    return _new_host_machine(level=level)


def _new_host_machine(reloc: str = "default", codemodel: str = "jitdefault", level: int = 3) -> Any:
    _init()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                        opt=LEVELS[level]["codegen"], reloc=reloc, codemodel=codemodel)


@functools.cache
def machine_for(triple: str | None, level: int = 3) -> Any:
    """The target machine of ``triple`` (a full triple or a key of TRIPLES; None: the host)
    at code generation ``level``."""
    if triple is None or triple in ("host", "native"):
        return host_machine(level)
    return _target(triple).create_target_machine(opt=LEVELS[level]["codegen"])


def little_endian(triple: str | None) -> bool:
    """Whether ``triple`` (None: the host) stores the low byte first (its data layout says)."""
    return not str(machine_for(triple).target_data).startswith("E")


def _target(triple: str) -> Any:
    """LLVM's target of ``triple`` (a full triple or a key of TRIPLES), or a ValueError naming it."""
    _init()
    full = TRIPLES.get(triple, triple)
    try:
        return llvm.Target.from_triple(full)
    except RuntimeError as e:
        known = ", ".join(TRIPLES)
        raise ValueError(f"LLVM has no target for {triple!r} ({e}); try {known} or a full triple") from None


def optimize(text: str, machine: Any, level: int = 3) -> Any:
    """Parse LLVM IR text for ``machine`` and run the pipeline of ``level`` (:data:`LEVELS`).
    Levels 2 and 3 have the loop vectoriser (fused elementwise loops) and not the SLP
    vectoriser: on the scalar loops of scripts it packs pairs of scalars (``max(x1, y1)``,
    ``max(x2, y2)``) into short vectors, paid for with inserts and mask logic in the loop;
    the NMS loops of W5 and W10 ran 9-18% slower with it, and no workload here was faster."""
    _init()
    mod = llvm.parse_assembly(text)
    mod.triple = machine.triple
    mod.data_layout = str(machine.target_data)
    mod.verify()
    settings = LEVELS[level]
    if settings["speed_level"] is None:
        return mod
    pto = llvm.create_pipeline_tuning_options(speed_level=settings["speed_level"])
    pto.loop_vectorization = settings["loop_vectorization"]
    pto.slp_vectorization = settings["slp_vectorization"]
    pto.loop_unrolling = settings["loop_unrolling"]
    pto.loop_interleaving = settings["loop_interleaving"]
    pb = llvm.create_pass_builder(machine, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def assembly(text: str, triple: str | None = None, level: int | None = None) -> str:
    """Optimised assembly of the LLVM IR ``text`` for ``triple`` (None: the host) at
    ``level`` (None: chosen by size)."""
    lv = level_for(text, level)
    machine = machine_for(triple, lv)
    return str(machine.emit_assembly(optimize(text, machine, lv)))


def object_code(text: str, triple: str | None = None, level: int | None = None) -> bytes:
    """Optimised, position-independent object code of the LLVM IR ``text`` for ``triple``
    (None: the host CPU, with its vector units) at ``level`` (None: chosen by size)."""
    lv = level_for(text, level)
    if triple is None or triple in ("host", "native"):
        machine = _new_host_machine(reloc="pic", codemodel="default", level=lv)
    else:
        machine = _target(triple).create_target_machine(opt=LEVELS[lv]["codegen"], reloc="pic", codemodel="default")
    return bytes(machine.emit_object(optimize(text, machine, lv)))


def bind_symbol(name: str, address: int) -> None:
    """Resolve the external symbol ``name`` of modules loaded from now on to ``address``."""
    llvm.add_symbol(name, address)


class Jitted:
    """An optimised module loaded into this process; ``address(name)`` of its functions.
    Keeps the engine (and so the machine code) alive as long as it lives.  With
    ``cache_dir`` (:mod:`nexus.backends.llvm.cache`), an object compiled before from the same
    text for the same machine at the same level is loaded instead of optimised and compiled
    (``cached`` says which); ``module`` is then an empty one (the text is not parsed again).
    ``level``: the optimisation level (:data:`LEVELS`; None: chosen by the module's size)."""

    def __init__(self, text: str, cache_dir: Path | None = None, level: int | None = None):
        self.level = level_for(text, level)
        # A machine of its own: the engine takes ownership of it (and frees it with itself).
        machine = _new_host_machine(level=self.level)
        self.text = text
        hit = None
        if cache_dir is not None:
            name = cache.key(text, machine.triple, llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(),
                             ".".join(map(str, llvm.llvm_version_info)), llvmlite.__version__,
                             repr(sorted(LEVELS[self.level].items())))
            hit = cache.load(cache_dir, name)
        self.cached = hit is not None
        if hit is not None:  # the engine loads the object: the module it stands for stays empty
            self.module = llvm.parse_assembly("")
            self.module.triple = machine.triple
            self.module.data_layout = str(machine.target_data)
        else:
            self.module = optimize(text, machine, self.level)
        self.engine = llvm.create_mcjit_compiler(self.module, machine)
        if cache_dir is not None:
            where = cache_dir
            self.engine.set_object_cache(lambda _m, obj: None if self.cached else cache.store(where, name, obj),
                                         lambda _m: hit)
        self.engine.finalize_object()

    def address(self, name: str) -> int:
        return int(self.engine.get_function_address(name))

    def global_address(self, name: str) -> int:
        return int(self.engine.get_global_value_address(name))

    def optimized(self) -> llvm.ModuleRef:
        """The optimised module (optimised again from the text where the object was cached)."""
        return optimize(self.text, _new_host_machine(level=self.level), self.level) if self.cached else self.module

    def optimized_ir(self) -> str:
        return str(self.optimized())
