"""Benchmark scripts (``bench_cpu``, ``bench_gpu``, ``bench_scaling``) and the shape argument they share.

Each script runs as ``python benchmarks/<script>.py`` or ``python -m benchmarks.<script>``; as a
package, ``tests/benchmarks/`` imports their pure parts (parsing, report layout) directly.
"""
