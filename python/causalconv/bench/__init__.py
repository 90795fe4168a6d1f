"""Benchmark of causalconv against its baselines and the measured copy bandwidth.

Run ``python -m causalconv.bench`` on a CUDA machine (``--help`` for options);
cases live in ``causalconv.bench.cases``.
"""
