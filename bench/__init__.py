"""Benchmarks of the TrinityLake reference implementation (`python -m bench.run_all`).

See `bench.common` for the result-file schema every `bench_*.py` module follows.
"""
