"""Benchmarks of sclate itself, behind `sclated bench NAME --json`."""

from sclated.bench._cli import BENCHES, run_bench_cli
from sclated.bench._scheduler import bench_scheduler

__all__ = ["BENCHES", "bench_scheduler", "run_bench_cli"]
