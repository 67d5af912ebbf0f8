"""The parts of ``benchmarks/bench_cache.py``: cache provider throughput (part 1), worker memory
with a shared cache (part 2) and ``transform --cache`` (part 3); the script holds the CLI and the report.
"""
