"""LLVM itself: initialisation, target machines (the host's or a named triple's), the O3
pipeline, assembly text and the JIT.  The only module here that touches
``llvmlite.binding``; everything else builds ``llvmlite.ir``."""

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


@functools.cache
def host_machine() -> Any:
    """The host CPU's target machine at optimisation level 3 (with its vector units)."""
    return _new_host_machine()


def _new_host_machine(reloc: str = "default", codemodel: str = "jitdefault") -> Any:
    _init()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, reloc=reloc, codemodel=codemodel)


@functools.cache
def machine_for(triple: str | None) -> Any:
    """The target machine of ``triple`` (a full triple or a key of TRIPLES; None: the host)."""
    if triple is None or triple in ("host", "native"):
        return host_machine()
    return _target(triple).create_target_machine(opt=3)


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


# The optimisation pipeline's settings (part of the object cache's key).
PIPELINE = {"speed_level": 3, "loop_vectorization": True, "slp_vectorization": False, "loop_unrolling": True}


def optimize(text: str, machine: Any) -> Any:
    """Parse LLVM IR text for ``machine`` and run LLVM's O3 pipeline, with the loop
    vectoriser (fused elementwise loops) and without the SLP vectoriser: on the scalar
    loops of scripts it packs pairs of scalars (``max(x1, y1)``, ``max(x2, y2)``) into
    short vectors, paid for with inserts and mask logic in the loop; the NMS loops of W5
    and W10 ran 9-18% slower with it, and no workload here was faster."""
    _init()
    mod = llvm.parse_assembly(text)
    mod.triple = machine.triple
    mod.data_layout = str(machine.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=PIPELINE["speed_level"])
    pto.loop_vectorization = PIPELINE["loop_vectorization"]
    pto.slp_vectorization = PIPELINE["slp_vectorization"]
    pto.loop_unrolling = PIPELINE["loop_unrolling"]
    pb = llvm.create_pass_builder(machine, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def assembly(text: str, triple: str | None = None) -> str:
    """Optimised assembly of the LLVM IR ``text`` for ``triple`` (None: the host)."""
    machine = machine_for(triple)
    return str(machine.emit_assembly(optimize(text, machine)))


def object_code(text: str, triple: str | None = None) -> bytes:
    """Optimised, position-independent object code of the LLVM IR ``text`` for ``triple``
    (None: the host CPU, with its vector units)."""
    if triple is None or triple in ("host", "native"):
        machine = _new_host_machine(reloc="pic", codemodel="default")
    else:
        machine = _target(triple).create_target_machine(opt=3, reloc="pic", codemodel="default")
    return bytes(machine.emit_object(optimize(text, machine)))


def bind_symbol(name: str, address: int) -> None:
    """Resolve the external symbol ``name`` of modules loaded from now on to ``address``."""
    llvm.add_symbol(name, address)


class Jitted:
    """An optimised module loaded into this process; ``address(name)`` of its functions.
    Keeps the engine (and so the machine code) alive as long as it lives.  With
    ``cache_dir`` (:mod:`nexus.backends.llvm.cache`), an object compiled before from the same
    text for the same machine is loaded instead of optimised and compiled (``cached``
    says which); ``module`` is then an empty one (the text is not parsed again)."""

    def __init__(self, text: str, cache_dir: Path | None = None):
        # A machine of its own: the engine takes ownership of it (and frees it with itself).
        machine = _new_host_machine()
        self.text = text
        hit = None
        if cache_dir is not None:
            name = cache.key(text, machine.triple, llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(),
                             ".".join(map(str, llvm.llvm_version_info)), llvmlite.__version__, repr(PIPELINE))
            hit = cache.load(cache_dir, name)
        self.cached = hit is not None
        if hit is not None:  # the engine loads the object: the module it stands for stays empty
            self.module = llvm.parse_assembly("")
            self.module.triple = machine.triple
            self.module.data_layout = str(machine.target_data)
        else:
            self.module = optimize(text, machine)
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
        return optimize(self.text, _new_host_machine()) if self.cached else self.module

    def optimized_ir(self) -> str:
        return str(self.optimized())
