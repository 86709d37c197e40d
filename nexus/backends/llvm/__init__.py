"""The ``llvm`` backend (issue 12): graphs as native code through llvmlite.

Importing this package registers the backend and its lowering table; ``llvmlite`` is
imported here and nowhere else in Nexus (``pip install nexus-ir[llvm]``)."""

from nexus.backends.llvm import adjoint, conv, emit, matmul, memory, nn, reduce, rules, shape, sort, stack  # noqa: F401,E501
from nexus.backends.llvm.backend import LLVMExecutable, asm, compile_llvm, llvm_ir

__all__ = ["LLVMExecutable", "asm", "compile_llvm", "llvm_ir"]
