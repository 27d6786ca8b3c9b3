"""The benchmarks, one script each: run from the repository root as ``python -m
bench.bench_<what>`` (bench/README.md)."""
