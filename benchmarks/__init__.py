"""Benchmark scripts that report numbers (``bench_cpu``, ``bench_gpu``, ``bench_scaling``,
``philox_ulps``) and the shape argument the ``bench_*`` scripts share (``shapes``).

Each script runs as ``python benchmarks/<script>.py`` or ``python -m benchmarks.<script>``; as a
package, ``tests/benchmarks/`` imports their pure parts (parsing, report layout) directly.
"""
