"""Benchmark and parity scripts (run as files: ``python3 benchmarks/x.py``; importable as
``benchmarks.x`` from the repository root, e.g. by the GPU tests). See ``manifest.yaml``."""
