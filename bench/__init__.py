"""Nexus benchmarks against peers (plain Python/NumPy, TorchScript, JAX, ONNX Runtime).

``python -m bench`` runs every workload and prints one table; see ``bench/README.md``.
"""
